/* qm_cpu.c — CPU feature level for per-ISA variant selection (see qm_cpu.h). */
#include "qm_cpu.h"

#include <stdlib.h>
#include <string.h>

qm_cpu_level qm_cpu_level_get(void)
{
    const char *force = getenv("QMAP_CPU");
    qm_cpu_level limit = QM_CPU_AVX512;
    if (force) {
        if (!strcmp(force, "generic") || !strcmp(force, "scalar")) limit = QM_CPU_GENERIC;
        else if (!strcmp(force, "avx2")) limit = QM_CPU_AVX2;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    if (limit >= QM_CPU_AVX512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        return QM_CPU_AVX512;
    if (limit >= QM_CPU_AVX2 && __builtin_cpu_supports("avx2")) return QM_CPU_AVX2;
#else
    (void)limit;
#endif
    return QM_CPU_GENERIC;
}

const char *qm_cpu_level_name(qm_cpu_level level)
{
    return level == QM_CPU_AVX512 ? "avx512" : level == QM_CPU_AVX2 ? "avx2" : "generic";
}
