/* qm_hash.c — XXH3 variant selection (see qm_hash.h). No state is kept: selection is cheap (a cpuid
 * result cached by libgcc and one getenv) and happens once per qm_checksum call, i.e. per tensor. */
#include "qm_hash.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

uint64_t qm_xxh3_generic(const void *data, size_t len) { return XXH3_64bits(data, len); }

qm_hash_fn qm_hash_select(const char **name)
{
    const char *force = getenv("QMAP_CPU");
    int limit = 2; /* 0 generic, 1 avx2, 2 avx512 */
    if (force) {
        if (!strcmp(force, "generic") || !strcmp(force, "scalar")) limit = 0;
        else if (!strcmp(force, "avx2")) limit = 1;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    if (limit >= 2 && __builtin_cpu_supports("avx512f")) { if (name) *name = "avx512"; return qm_xxh3_avx512; }
    if (limit >= 1 && __builtin_cpu_supports("avx2")) { if (name) *name = "avx2"; return qm_xxh3_avx2; }
#else
    (void)limit;
#endif
    if (name) *name = "generic";
    return qm_xxh3_generic;
}
