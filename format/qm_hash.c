/* qm_hash.c — XXH3 variant selection (see qm_hash.h). No state is kept: selection is cheap (a cpuid
 * result cached by libgcc and one getenv) and happens once per qm_checksum call, i.e. per tensor. */
#include "qm_hash.h"

#include "qm_cpu.h"

#include <xxhash.h>

uint64_t qm_xxh3_generic(const void *data, size_t len) { return XXH3_64bits(data, len); }

qm_hash_fn qm_hash_select(const char **name)
{
    qm_cpu_level level = qm_cpu_level_get();
    if (name) *name = qm_cpu_level_name(level);
    return level == QM_CPU_AVX512 ? qm_xxh3_avx512 : level == QM_CPU_AVX2 ? qm_xxh3_avx2 : qm_xxh3_generic;
}
