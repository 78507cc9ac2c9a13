/* qm_hash.h — internal to format/: XXH3-64 (seed 0) of a byte range, with per-ISA variants.
 *
 * Debian's libxxhash is built for baseline x86-64 (SSE2). XXH3 gives the same value whatever vector
 * unit computes it, so the same xxhash.h is compiled inline a second and third time with -mavx2 and
 * -mavx512f (qm_hash_avx2.c, qm_hash_avx512.c) and the widest one the CPU supports is used. The
 * environment variable QMAP_CPU=generic|avx2|avx512 forces a narrower one (tests, comparisons). */
#ifndef QM_HASH_H
#define QM_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef uint64_t (*qm_hash_fn)(const void *data, size_t len);

uint64_t qm_xxh3_generic(const void *data, size_t len);  /* libxxhash: the reference */
uint64_t qm_xxh3_avx2(const void *data, size_t len);     /* only call if the CPU has AVX2 */
uint64_t qm_xxh3_avx512(const void *data, size_t len);   /* only call if the CPU has AVX-512F */

/* The variant to use on this CPU (honouring QMAP_CPU), and its name ("generic", "avx2", "avx512"). */
qm_hash_fn qm_hash_select(const char **name);

#endif
