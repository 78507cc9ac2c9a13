/* qm_q8.h — spec/FORMAT.md 6.1's int8 rule, written once: the scale of a row and the rounding of one value.
 * The weight quantizer (quantize/qq_kernels_impl.h) and the activation quantizer of the int8 matmul
 * (runtime/qr_quantize_x.h) both build on these, so their arithmetic cannot drift apart; every variant
 * compiles them inline with its own vector width.
 *
 * Where the two callers differ, on purpose (each documented at its call):
 *   - a row holding NaN or ±Inf: a weight row is refused (quantize reports the tensor); an activation row
 *     gets scale NaN, so its outputs are NaN as the float product's would be;
 *   - a tiny row: a weight row has scale +0 and every q 0 exactly when amax/127 underflows to 0 (the spec's
 *     rule, which fixes the file's bytes); an activation row is zeroed already when max|x| < 2⁻¹⁰⁰
 *     (QM_Q8_ACT_FLOOR), so that the scale of its second term (the residual, ≤ s/254) stays a normal
 *     number and its integer product a well-scaled float.
 */
#ifndef QM_Q8_H
#define QM_Q8_H

#define QM_Q8_QMAX 127.0f
#define QM_Q8_ACT_FLOOR 0x1p-100f
/* 1.5·2²³: adding and subtracting it rounds a float of magnitude below 2²² to an integer (qm_q8_round) */
#define QM_Q8_ROUND_MAGIC 12582912.0f

/* Step 2: the scale of a row whose largest magnitude is amax (finite, >= 0): a binary32 division. */
static inline float qm_q8_scale(float amax)
{
    return amax / QM_Q8_QMAX;
}

/* Step 3 for v = x / s (a binary32 division, never a reciprocal multiply): round half to even, clamp to
 * [-127, 127]. Adding and subtracting 1.5·2²³ rounds |v| < 2²² to an integer in the current
 * (nearest-even) mode, and |v| <= 127·(1 + a few ulps) here. */
static inline float qm_q8_round(float v)
{
    float r = (v + QM_Q8_ROUND_MAGIC) - QM_Q8_ROUND_MAGIC;
    r = r > QM_Q8_QMAX ? QM_Q8_QMAX : r;
    return r < -QM_Q8_QMAX ? -QM_Q8_QMAX : r;
}

#endif /* QM_Q8_H */
