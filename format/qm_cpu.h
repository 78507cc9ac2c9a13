/* qm_cpu.h — which vector instruction set this CPU offers, capped by QMAP_CPU.
 *
 * Every module with per-ISA variants (checksums, quantization, later the matmul kernels) picks its
 * variant through this one function, so QMAP_CPU=generic|avx2|avx512 forces the same level everywhere
 * (tests run each variant the machine has; benchmarks compare them). No state: cpuid results are cached
 * by libgcc, and the environment is read per call. */
#ifndef QM_CPU_H
#define QM_CPU_H

typedef enum qm_cpu_level {
    QM_CPU_GENERIC = 0,   /* portable C (x86-64 baseline: SSE2) */
    QM_CPU_AVX2 = 1,      /* AVX2 */
    QM_CPU_AVX512 = 2,    /* AVX-512 F + BW */
} qm_cpu_level;

/* The widest level the CPU supports, no wider than QMAP_CPU says ("generic"/"scalar", "avx2", "avx512";
 * unset or unknown: no cap). */
qm_cpu_level qm_cpu_level_get(void);
/* "generic", "avx2", "avx512". */
const char *qm_cpu_level_name(qm_cpu_level level);

#endif /* QM_CPU_H */
