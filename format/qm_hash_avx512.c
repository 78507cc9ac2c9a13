/* qm_hash_avx512.c — XXH3-64 compiled for AVX512 (built with per-file flags; see qm_hash.h). */
#include "qm_hash.h"

#if defined(__x86_64__)
#define XXH_INLINE_ALL /* private static copy of xxhash, vectorized for this file's target */
#include <xxhash.h>
uint64_t qm_xxh3_avx512(const void *data, size_t len) { return XXH3_64bits(data, len); }
#else
uint64_t qm_xxh3_avx512(const void *data, size_t len) { return qm_xxh3_generic(data, len); }
#endif
