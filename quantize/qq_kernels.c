/* qq_kernels.c — pick the quantize kernel variant for this CPU (see qq_kernels.h). */
#include "qq_kernels.h"

#include <stddef.h>

const qq_kernels *qq_kernels_for(qm_cpu_level level)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (level == QM_CPU_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? &qq_kernels_avx512 : NULL;
    if (level == QM_CPU_AVX2) return __builtin_cpu_supports("avx2") ? &qq_kernels_avx2 : NULL;
#else
    if (level != QM_CPU_GENERIC) return NULL;
#endif
    return &qq_kernels_ref;
}

const qq_kernels *qq_kernels_get(void)
{
    const qq_kernels *k = qq_kernels_for(qm_cpu_level_get());
    return k ? k : &qq_kernels_ref;
}
