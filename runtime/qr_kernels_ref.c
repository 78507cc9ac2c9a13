/* qr_kernels_ref.c — the portable kernels: plain C that builds on any CPU, and the reference every
 * SIMD variant is tested against (tests/unit/test_matmul.c).
 *
 * Float dots accumulate in QR_REF_LANES interleaved partial sums (lane l takes every element c with
 * c mod QR_REF_LANES == l), combined pairwise at the end: the compiler can vectorise that at -O3 where
 * a single running sum would stay scalar, and the error bound is the same as for any summation order. */
#include <stdint.h>
#include <string.h>

#include "qr_kernels.h"
#include "qr_quantize_x.h"

#define QR_REF_LANES 16

static float lanes_sum(float *acc)
{
    for (int width = QR_REF_LANES / 2; width >= 1; width /= 2)
        for (int l = 0; l < width; l++) acc[l] += acc[l + width];
    return acc[0];
}

static float dot_f32(const float *x, const float *w, size_t k)
{
    float acc[QR_REF_LANES] = {0};
    size_t c = 0;
    for (; c + QR_REF_LANES <= k; c += QR_REF_LANES)
        for (int l = 0; l < QR_REF_LANES; l++) acc[l] += x[c + l] * w[c + l];
    for (int l = 0; c < k; c++, l++) acc[l] += x[c] * w[c];
    return lanes_sum(acc);
}

/* binary16 -> binary32, exact and branch-free (so the loop below vectorises): the half's exponent and
 * mantissa placed in a float's low bits and scaled by 2^112 give every finite half exactly, subnormals
 * included; Inf and NaN are patched with a select. Held equal to qm_f16_to_f32 by the unit test. */
static inline float f16_to_f32(uint16_t h)
{
    uint32_t em = (uint32_t)(h & 0x7fffu) << 13, sign = (uint32_t)(h & 0x8000u) << 16;
    float v;
    memcpy(&v, &em, sizeof v);
    v *= 0x1p112f;
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    uint32_t special = 0u - (uint32_t)((h & 0x7c00u) == 0x7c00u); /* all ones for Inf/NaN */
    bits = (bits & ~special) | ((em | 0x7f800000u) & special) | sign;
    memcpy(&v, &bits, sizeof v);
    return v;
}

static float dot_f16(const float *x, const uint16_t *w, size_t k)
{
    float acc[QR_REF_LANES] = {0};
    size_t c = 0;
    for (; c + QR_REF_LANES <= k; c += QR_REF_LANES)
        for (int l = 0; l < QR_REF_LANES; l++) acc[l] += x[c + l] * f16_to_f32(w[c + l]);
    for (int l = 0; c < k; c++, l++) acc[l] += x[c] * f16_to_f32(w[c]);
    return lanes_sum(acc);
}

static float dot_q8_f32(const float *x, const int8_t *w, size_t k)
{
    float acc[QR_REF_LANES] = {0};
    size_t c = 0;
    for (; c + QR_REF_LANES <= k; c += QR_REF_LANES)
        for (int l = 0; l < QR_REF_LANES; l++) acc[l] += x[c + l] * (float)w[c + l];
    for (int l = 0; c < k; c++, l++) acc[l] += x[c] * (float)w[c];
    return lanes_sum(acc);
}

/* Exact: |Σ| <= 127·127·QR_INT8_MAX_COLS < 2^31, and qr_matmul never passes a longer row. */
static int32_t dot_i8(const int8_t *x, const int8_t *w, size_t k)
{
    int32_t acc = 0;
    for (size_t c = 0; c < k; c++) acc += (int32_t)x[c] * (int32_t)w[c];
    return acc;
}

#define ROW(base, stride, i) ((const void *)((const uint8_t *)(base) + (i) * (stride)))

static void block_f32(const qr_block *b)
{
    for (size_t i = 0; i < b->m; i++)
        for (size_t r = 0; r < b->nr; r++)
            b->y[i * b->y_stride + r] = dot_f32(ROW(b->x, b->x_stride, i), ROW(b->w, b->w_stride, r), b->k);
}

static void block_f16(const qr_block *b)
{
    for (size_t i = 0; i < b->m; i++)
        for (size_t r = 0; r < b->nr; r++)
            b->y[i * b->y_stride + r] = dot_f16(ROW(b->x, b->x_stride, i), ROW(b->w, b->w_stride, r), b->k);
}

static void block_q8_f32(const qr_block *b)
{
    for (size_t i = 0; i < b->m; i++)
        for (size_t r = 0; r < b->nr; r++)
            b->y[i * b->y_stride + r] =
                dot_q8_f32(ROW(b->x, b->x_stride, i), ROW(b->w, b->w_stride, r), b->k) * b->w_scales[r];
}

static void block_q8_int8(const qr_block *b)
{
    if (b->x2) { /* decode with two terms: m = 1 */
        for (size_t r = 0; r < b->nr; r++) {
            const void *wr = ROW(b->w, b->w_stride, r);
            int32_t d1 = dot_i8(b->x, wr, b->k), d2 = dot_i8(b->x2, wr, b->k);
            b->y[r] = ((float)d1 * b->x_scales[0]) * b->w_scales[r] + ((float)d2 * b->x2_scales[0]) * b->w_scales[r];
        }
        return;
    }
    for (size_t i = 0; i < b->m; i++) {
        const float sx = b->x_scales[i];
        for (size_t r = 0; r < b->nr; r++) {
            int32_t d = dot_i8(ROW(b->x, b->x_stride, i), ROW(b->w, b->w_stride, r), b->k);
            b->y[i * b->y_stride + r] = ((float)d * sx) * b->w_scales[r];
        }
    }
}

static float quantize_x_signed(const float *x, size_t cols, size_t kpad, uint8_t *out)
{
    return qr_quantize_x_row(x, cols, kpad, out, 0);
}

static float quantize_x_residual_signed(const float *x, const uint8_t *q1, float s1, size_t cols, size_t kpad, uint8_t *out)
{
    return qr_quantize_x_residual_row(x, q1, s1, cols, kpad, out, 0);
}

const qr_kernels qr_kernels_ref = {
    .name = "generic",
    .level = QM_CPU_GENERIC,
    .block[QM_DTYPE_F32][QR_XK_FLOAT] = block_f32,
    .block[QM_DTYPE_F16][QR_XK_FLOAT] = block_f16,
    .block[QM_DTYPE_Q8_ROW][QR_XK_FLOAT] = block_q8_f32,
    .block[QM_DTYPE_Q8_ROW][QR_XK_INT8] = block_q8_int8,
    .quantize_x = quantize_x_signed,
    .quantize_x_residual = quantize_x_residual_signed,
    .x_flip = 0,
};
