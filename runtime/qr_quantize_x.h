/* qr_quantize_x.h — the one rule that turns a row of X into int8, included by every kernel variant so
 * each compiles it with its own vector width (the AVX-512 variant writes the same steps in 512-bit
 * intrinsics, which gcc did not make of this loop: qr_kernels_avx512.c). Every step is exact IEEE
 * arithmetic (max, compare, division, the round-to-nearest-even of adding and subtracting 1.5·2²³) and
 * max is order-independent, so every variant writes the same bytes and returns the same scale
 * (test_matmul holds each to the rule).
 *
 * Rule: spec/FORMAT.md 6.1's, for weight rows, through format/qm_q8.h (s = max|x| / 127;
 * q = round_half_even(x / s) in [-127, 127]); at the edges, as qm_q8.h documents, s = 0 and q = 0 for a row
 * whose max|x| is below 2⁻¹⁰⁰, and s = NaN (so every output of the row is NaN, as the float product would
 * be) if the row holds NaN or Inf. `flip` is XORed into each byte:
 * 0x80 turns q into q + 128, the unsigned operand of vpdpbusd.
 */
#ifndef QR_QUANTIZE_X_H
#define QR_QUANTIZE_X_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "qm_q8.h"

#define QR_QX_LANES 16

/* Value c of the row being quantized: x itself, or (for the second term of QR_ACT_INT8X2) the residual
 * x − s₁·q₁ of the first term, computed in binary32 (multiply, then subtract; -std=c11 keeps them
 * separate roundings, so every variant gets the same floats). */
static inline __attribute__((always_inline)) float qr_qx_value(const float *x, const uint8_t *q1, float s1,
                                                               uint8_t flip, size_t c)
{
    if (!q1) return x[c];
    return x[c] - s1 * (float)(int8_t)(uint8_t)(q1[c] ^ flip);
}

/* The rule's first half: max|value| of the row (x, or the residual of its first term), +Inf if a value is
 * NaN or Inf. Also what a tensor-parallel process contributes to the max of a row it holds part of
 * (qr_matmul_opts.x_amax_reduce): max is order-independent, so the parts' max is the whole row's. */
static inline __attribute__((always_inline)) float qr_qx_amax(const float *x, const uint8_t *q1, float s1,
                                                              size_t cols, uint8_t flip)
{
    float lane_max[QR_QX_LANES] = {0};
    int lane_bad[QR_QX_LANES] = {0};
    size_t c = 0;
    for (; c + QR_QX_LANES <= cols; c += QR_QX_LANES)
        for (int l = 0; l < QR_QX_LANES; l++) {
            float a = fabsf(qr_qx_value(x, q1, s1, flip, c + l));
            lane_bad[l] |= !(a <= FLT_MAX);
            lane_max[l] = a > lane_max[l] ? a : lane_max[l];
        }
    for (; c < cols; c++) {
        float a = fabsf(qr_qx_value(x, q1, s1, flip, c));
        lane_bad[0] |= !(a <= FLT_MAX);
        lane_max[0] = a > lane_max[0] ? a : lane_max[0];
    }
    float amax = 0.0f;
    int bad = 0;
    for (int l = 0; l < QR_QX_LANES; l++) {
        amax = lane_max[l] > amax ? lane_max[l] : amax;
        bad |= lane_bad[l];
    }
    return bad ? INFINITY : amax;
}

/* The rule's second half: q (XOR flip) of the row's values for the row's max|value| `amax` (from
 * qr_qx_amax, or joined across the processes that hold parts of the row); returns s. */
static inline __attribute__((always_inline)) float qr_qx_write(const float *x, const uint8_t *q1, float s1,
                                                               size_t cols, size_t kpad, uint8_t *out,
                                                               uint8_t flip, float amax)
{
    memset(out, flip, kpad);
    if (!(amax <= FLT_MAX)) return NAN;
    if (amax < QM_Q8_ACT_FLOOR) return 0.0f;   /* format/qm_q8.h says why activations stop here */
    const float s = qm_q8_scale(amax);
    for (size_t c = 0; c < cols; c++) {
        float r = qm_q8_round(qr_qx_value(x, q1, s1, flip, c) / s);
        out[c] = (uint8_t)((uint8_t)(int8_t)(int32_t)r ^ flip);
    }
    return s;
}

static inline __attribute__((always_inline)) float qr_quantize_values(const float *x, const uint8_t *q1, float s1,
                                                                      size_t cols, size_t kpad, uint8_t *out,
                                                                      uint8_t flip)
{
    return qr_qx_write(x, q1, s1, cols, kpad, out, flip, qr_qx_amax(x, q1, s1, cols, flip));
}

/* The rule above for a row of X: returns s, writes q (XOR flip) to out[0..kpad). */
static inline float qr_quantize_x_row(const float *x, size_t cols, size_t kpad, uint8_t *out, uint8_t flip)
{
    return qr_quantize_values(x, NULL, 0.0f, cols, kpad, out, flip);
}

/* The same rule for the residual r = x − s₁·q₁ of a row already quantized to (q1, s1) by
 * qr_quantize_x_row with the same flip: returns s₂, writes q₂ to out. */
static inline float qr_quantize_x_residual_row(const float *x, const uint8_t *q1, float s1, size_t cols, size_t kpad,
                                               uint8_t *out, uint8_t flip)
{
    return qr_quantize_values(x, q1, s1, cols, kpad, out, flip);
}

#endif /* QR_QUANTIZE_X_H */
