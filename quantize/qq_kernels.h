/* qq_kernels.h — the row kernels of qmap quantize, one variant per instruction set.
 *
 * Each kernel is written once, in portable C (qq_kernels_impl.h), and compiled three times: as the
 * reference (qq_kernels_ref.c, baseline x86-64 or any CPU) and with -mavx2 / -mavx512f -mavx512bw
 * (qq_kernels_avx2.c, qq_kernels_avx512.c), where the compiler vectorises it wider. Every operation in
 * them is exactly rounded IEEE arithmetic (division, add, max, compare, conversion; -std=c11 keeps gcc
 * from contracting into FMAs) and every reduction runs in a fixed number of lanes combined in a fixed
 * order, so all variants produce the same bytes: tests/unit/test_quantize_kernels.c holds them equal.
 */
#ifndef QQ_KERNELS_H
#define QQ_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "qm_cpu.h"

/* Error statistics of one row (double sums). */
typedef struct qq_row_stats {
    double sq_err;      /* Σ (w - ŵ)² */
    double sq_w;        /* Σ w² */
    double max_err;     /* max |w - ŵ| */
    uint8_t outlier;    /* max|w| > 8 × RMS(w) (only when asked) */
    uint8_t bad;        /* set by the caller: 1 NaN/Inf, 2 beyond F16 */
} qq_row_stats;

typedef struct qq_kernels {
    const char *name;   /* "generic", "avx2", "avx512" */
    /* Spec/FORMAT.md 6.1 for one row: q[0..cols), its scale and row sum. false if a value is NaN/Inf. */
    bool (*q8row)(const float *w, uint64_t cols, int8_t *q, float *scale, int32_t *row_sum);
    /* IEEE binary32 -> binary16 of one row, round to nearest even (as qm_f32_to_f16), and back[j] = the
     * half's value. Returns 0, or 1 if a value is NaN/Inf, 2 if a finite value rounds beyond ±65504. */
    int (*f16row)(const float *w, uint64_t cols, uint16_t *h, float *back);
    /* Statistics of w against ŵ: ŵ = back[j], or q[j] × scale in f32 when back is NULL. */
    void (*stats)(const float *w, const float *back, const int8_t *q, float scale, uint64_t cols, bool outliers,
                  qq_row_stats *out);
} qq_kernels;

/* The variant for this CPU, capped by QMAP_CPU (qm_cpu.h). */
const qq_kernels *qq_kernels_get(void);
/* A given variant, or NULL if this build or CPU lacks it (for tests and benchmarks). */
const qq_kernels *qq_kernels_for(qm_cpu_level level);

/* The variants themselves (only call a non-reference one after checking the CPU). */
extern const qq_kernels qq_kernels_ref, qq_kernels_avx2, qq_kernels_avx512;

#endif /* QQ_KERNELS_H */
