/* qr_kernels_avx2.c — AVX2 + FMA + F16C kernels (any x86-64 since 2013). Compiled with those flags and
 * only called after qr_kernels_for() saw them in cpuid.
 *
 * The same design as qr_kernels_avx512.c (lanes along the row, an RM × RN register tile, nothing
 * repacked) at 8 floats per vector and with 16 registers, hence a 2 × 4 tile. Without VNNI the int8
 * dot uses maddubs, whose int16 pair sums saturate for an unsigned operand above 127: X stays signed,
 * |q_x| is the unsigned operand and q_x's sign moves onto q_w (vpsignb), so every pair sum is at most
 * 2·127·127 < 2^15 and the result is exact. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "qr_kernels.h"
#include "qr_quantize_x.h"

#define RM 2 /* X rows per register tile */
#define RN 4 /* W rows per register tile */
#define INLINE static inline __attribute__((always_inline))

INLINE float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE int32_t hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* Lane mask for the last (k mod 8) floats: maskload reads nothing past them. */
INLINE __m256i tail_mask(size_t left)
{
    static const int32_t table[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(const void *)(table + 8 - left));
}

typedef __m256 load_w_fn(const void *row, size_t c);
typedef __m256 load_w_tail_fn(const void *row, size_t c, size_t left, __m256i mask);

INLINE __m256 w_f32(const void *row, size_t c) { return _mm256_loadu_ps((const float *)row + c); }
INLINE __m256 w_f32_tail(const void *row, size_t c, size_t left, __m256i mask)
{
    (void)left;
    return _mm256_maskload_ps((const float *)row + c, mask);
}
INLINE __m256 w_f16(const void *row, size_t c)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)row + c)));
}
INLINE __m256 w_f16_tail(const void *row, size_t c, size_t left, __m256i mask)
{
    (void)mask;
    uint16_t h[8] = {0};
    memcpy(h, (const uint16_t *)row + c, left * sizeof(uint16_t));
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)h));
}
INLINE __m256 w_q8(const void *row, size_t c)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)((const int8_t *)row + c))));
}
/* Q8_ROW rows are zero-padded to 64 bytes, so the 8 bytes at a tail position are inside the row. */
INLINE __m256 w_q8_tail(const void *row, size_t c, size_t left, __m256i mask)
{
    (void)left;
    (void)mask;
    return w_q8(row, c);
}

INLINE void tile_float(const qr_block *b, size_t i, size_t j, const int rm, const int rn, load_w_fn *load_w,
                       load_w_tail_fn *load_w_tail, int scaled)
{
    __m256 acc[RM][RN];
    const float *xr[RM];
    const void *wr[RN];
#pragma GCC unroll 4
    for (int a = 0; a < rm; a++) {
        xr[a] = (const float *)(const void *)((const uint8_t *)b->x + (i + a) * b->x_stride);
#pragma GCC unroll 4
        for (int q = 0; q < rn; q++) acc[a][q] = _mm256_setzero_ps();
    }
#pragma GCC unroll 4
    for (int q = 0; q < rn; q++) wr[q] = (const uint8_t *)b->w + (j + q) * b->w_stride;

    const size_t k = b->k;
    size_t c = 0;
    for (; c + 8 <= k; c += 8) {
        __m256 xv[RM];
#pragma GCC unroll 4
        for (int a = 0; a < rm; a++) xv[a] = _mm256_loadu_ps(xr[a] + c);
#pragma GCC unroll 4
        for (int q = 0; q < rn; q++) {
            __m256 wv = load_w(wr[q], c);
#pragma GCC unroll 4
            for (int a = 0; a < rm; a++) acc[a][q] = _mm256_fmadd_ps(xv[a], wv, acc[a][q]);
        }
    }
    if (c < k) {
        const size_t left = k - c;
        const __m256i mask = tail_mask(left);
        __m256 xv[RM];
#pragma GCC unroll 4
        for (int a = 0; a < rm; a++) xv[a] = _mm256_maskload_ps(xr[a] + c, mask);
#pragma GCC unroll 4
        for (int q = 0; q < rn; q++) {
            __m256 wv = load_w_tail(wr[q], c, left, mask);
#pragma GCC unroll 4
            for (int a = 0; a < rm; a++) acc[a][q] = _mm256_fmadd_ps(xv[a], wv, acc[a][q]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < rm; a++) {
        float *yr = b->y + (i + a) * b->y_stride + j;
#pragma GCC unroll 4
        for (int q = 0; q < rn; q++) {
            float s = hsum_ps(acc[a][q]);
            yr[q] = scaled ? s * b->w_scales[j + q] : s;
        }
    }
}

INLINE void tile_int8(const qr_block *b, size_t i, size_t j, const int rm, const int rn)
{
    __m256i acc[RM][RN];
    const int8_t *xr[RM];
    const int8_t *wr[RN];
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int a = 0; a < rm; a++) {
        xr[a] = (const int8_t *)b->x + (i + a) * b->x_stride;
#pragma GCC unroll 4
        for (int q = 0; q < rn; q++) acc[a][q] = _mm256_setzero_si256();
    }
#pragma GCC unroll 4
    for (int q = 0; q < rn; q++) wr[q] = (const int8_t *)b->w + (j + q) * b->w_stride;

    const size_t k = b->k; /* a multiple of 64 */
    for (size_t c = 0; c < k; c += 32) {
        __m256i xv[RM], ax[RM];
#pragma GCC unroll 4
        for (int a = 0; a < rm; a++) {
            xv[a] = _mm256_loadu_si256((const __m256i *)(const void *)(xr[a] + c));
            ax[a] = _mm256_abs_epi8(xv[a]);
        }
#pragma GCC unroll 4
        for (int q = 0; q < rn; q++) {
            __m256i wv = _mm256_loadu_si256((const __m256i *)(const void *)(wr[q] + c));
#pragma GCC unroll 4
            for (int a = 0; a < rm; a++) {
                __m256i p16 = _mm256_maddubs_epi16(ax[a], _mm256_sign_epi8(wv, xv[a]));
                acc[a][q] = _mm256_add_epi32(acc[a][q], _mm256_madd_epi16(p16, ones));
            }
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < rm; a++) {
        float *yr = b->y + (i + a) * b->y_stride + j;
        const float sx = b->x_scales[i + a];
#pragma GCC unroll 4
        for (int q = 0; q < rn; q++) yr[q] = ((float)hsum_epi32(acc[a][q]) * sx) * b->w_scales[j + q];
    }
}

/* ---- one X row (decode): four streams per thread, as in qr_kernels_avx512.c ----------------------
 * A decode is a read of W. A thread reads its block as four streams (qr_kernels.h, QR_DECODE_QUARTERS):
 * rows i of the block's four quarters side by side, each row summed exactly as a lone row is (the rows
 * left over), so a row's result does not depend on the path it took. Every float row has two
 * accumulators (elements 0-7 and 8-15 of each 16-element step): four streams of four, as the AVX-512 loop
 * keeps, would need all sixteen registers for the sums alone. The int8 loops read each W vector once for
 * both terms of X (qr_block.x2). Software prefetch as qr_kernels.h says (QR_PREFETCH). */
/* The two accumulators of row w after the steps of 16, then 8, then the masked rest (both paths). */
#define FLOAT_ROW_TAIL(x_, w_, k_, c_, a0_, a1_)                                                                  \
    do {                                                                                                          \
        if ((c_) + 8 <= (k_)) {                                                                                   \
            a0_ = _mm256_fmadd_ps(_mm256_loadu_ps((x_) + (c_)), load_w((w_), (c_)), a0_);                         \
            (c_) += 8;                                                                                            \
        }                                                                                                         \
        if ((c_) < (k_)) {                                                                                        \
            const __m256i mask_ = tail_mask((k_) - (c_));                                                         \
            const __m256 xt_ = _mm256_maskload_ps((x_) + (c_), mask_);                                            \
            a1_ = _mm256_fmadd_ps(xt_, load_w_tail((w_), (c_), (k_) - (c_), mask_), a1_);                         \
        }                                                                                                         \
    } while (0)

INLINE float row_float(const float *x, const void *w, size_t k, load_w_fn *load_w, load_w_tail_fn *load_w_tail,
                       const int w_size, const int pf)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    size_t c = 0;
    for (; c + 16 <= k; c += 16) {
        if (pf && (w_size == 4 || c % (64 / (size_t)w_size) == 0)) /* one prefetch per 64 bytes of W */
            QR_PREFETCH((const char *)w + c * (size_t)w_size + QR_PREFETCH_BYTES);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), load_w(w, c), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 8), load_w(w, c + 8), a1);
    }
    FLOAT_ROW_TAIL(x, w, k, c, a0, a1);
    return hsum_ps(_mm256_add_ps(a0, a1));
}

/* Four W rows far apart, each summed as row_float sums it. */
INLINE void rows4_float(const float *x, const void *const w[4], size_t k, load_w_fn *load_w,
                        load_w_tail_fn *load_w_tail, const int w_size, const int pf, float out[4])
{
    __m256 a[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) a[r][0] = a[r][1] = _mm256_setzero_ps();
    size_t c = 0;
    for (; c + 16 <= k; c += 16) {
        const __m256 x0 = _mm256_loadu_ps(x + c), x1 = _mm256_loadu_ps(x + c + 8);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            if (pf && (w_size == 4 || c % (64 / (size_t)w_size) == 0))
                QR_PREFETCH((const char *)w[r] + c * (size_t)w_size + QR_PREFETCH4_BYTES);
            a[r][0] = _mm256_fmadd_ps(x0, load_w(w[r], c), a[r][0]);
            a[r][1] = _mm256_fmadd_ps(x1, load_w(w[r], c + 8), a[r][1]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        size_t cr = c;
        FLOAT_ROW_TAIL(x, w[r], k, cr, a[r][0], a[r][1]);
        out[r] = hsum_ps(_mm256_add_ps(a[r][0], a[r][1]));
    }
}

/* Σ over 32 bytes of q_x·q_w, in eight int32 lanes: maddubs(|q_x|, sign(q_w, q_x)) (see the top). */
INLINE __m256i dot32_i8(__m256i ax, __m256i xv, __m256i wv, __m256i ones)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(wv, xv)), ones);
}

/* Integer dots of one W row with one or two int8 terms of X (x2 NULL: one); each W vector meets both. */
INLINE void row_int8(const int8_t *x, const int8_t *x2, const int8_t *w, size_t k, int32_t *d1, int32_t *d2)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, b0 = a0, b1 = a0;
    for (size_t c = 0; c < k; c += 64) { /* k is a multiple of 64 */
        QR_PREFETCH((const char *)w + c + QR_PREFETCH_BYTES);
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)(const void *)(w + c));
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)(const void *)(w + c + 32));
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(const void *)(x + c));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(const void *)(x + c + 32));
        a0 = _mm256_add_epi32(a0, dot32_i8(_mm256_abs_epi8(x0), x0, w0, ones));
        a1 = _mm256_add_epi32(a1, dot32_i8(_mm256_abs_epi8(x1), x1, w1, ones));
        if (x2) {
            const __m256i y0 = _mm256_loadu_si256((const __m256i *)(const void *)(x2 + c));
            const __m256i y1 = _mm256_loadu_si256((const __m256i *)(const void *)(x2 + c + 32));
            b0 = _mm256_add_epi32(b0, dot32_i8(_mm256_abs_epi8(y0), y0, w0, ones));
            b1 = _mm256_add_epi32(b1, dot32_i8(_mm256_abs_epi8(y1), y1, w1, ones));
        }
    }
    *d1 = hsum_epi32(_mm256_add_epi32(a0, a1));
    *d2 = x2 ? hsum_epi32(_mm256_add_epi32(b0, b1)) : 0;
}

/* Four W rows far apart (rows i, q + i, 2q + i, 3q + i of the block) against one or two int8 terms.
 * Instantiated out of line for each term count (rows4_int8): with x2 a run-time value its tests stayed in
 * the loop and an accumulator went to the stack. */
INLINE void rows4_int8_body(const int8_t *x, const int8_t *x2, const int8_t *w, size_t stride, size_t k,
                            int32_t d1[4], int32_t d2[4])
{
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *w0 = w, *w1 = w + stride, *w2 = w + 2 * stride, *w3 = w + 3 * stride;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (size_t c = 0; c < k; c += 32) { /* k is a multiple of 64 */
        QR_PREFETCH((const char *)w0 + c + QR_PREFETCH4_BYTES);
        QR_PREFETCH((const char *)w1 + c + QR_PREFETCH4_BYTES);
        QR_PREFETCH((const char *)w2 + c + QR_PREFETCH4_BYTES);
        QR_PREFETCH((const char *)w3 + c + QR_PREFETCH4_BYTES);
        const __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)(x + c)), ax = _mm256_abs_epi8(xv);
        const __m256i v0 = _mm256_loadu_si256((const __m256i *)(const void *)(w0 + c));
        const __m256i v1 = _mm256_loadu_si256((const __m256i *)(const void *)(w1 + c));
        const __m256i v2 = _mm256_loadu_si256((const __m256i *)(const void *)(w2 + c));
        const __m256i v3 = _mm256_loadu_si256((const __m256i *)(const void *)(w3 + c));
        a0 = _mm256_add_epi32(a0, dot32_i8(ax, xv, v0, ones));
        a1 = _mm256_add_epi32(a1, dot32_i8(ax, xv, v1, ones));
        a2 = _mm256_add_epi32(a2, dot32_i8(ax, xv, v2, ones));
        a3 = _mm256_add_epi32(a3, dot32_i8(ax, xv, v3, ones));
        if (x2) {
            const __m256i yv = _mm256_loadu_si256((const __m256i *)(const void *)(x2 + c)), ay = _mm256_abs_epi8(yv);
            b0 = _mm256_add_epi32(b0, dot32_i8(ay, yv, v0, ones));
            b1 = _mm256_add_epi32(b1, dot32_i8(ay, yv, v1, ones));
            b2 = _mm256_add_epi32(b2, dot32_i8(ay, yv, v2, ones));
            b3 = _mm256_add_epi32(b3, dot32_i8(ay, yv, v3, ones));
        }
    }
    d1[0] = hsum_epi32(a0), d1[1] = hsum_epi32(a1), d1[2] = hsum_epi32(a2), d1[3] = hsum_epi32(a3);
    d2[0] = hsum_epi32(b0), d2[1] = hsum_epi32(b1), d2[2] = hsum_epi32(b2), d2[3] = hsum_epi32(b3);
}

__attribute__((noinline)) static void rows4_int8(const int8_t *x, const int8_t *x2, const int8_t *w, size_t stride,
                                                 size_t k, int32_t d1[4], int32_t d2[4])
{
    if (x2) rows4_int8_body(x, x2, w, stride, k, d1, d2);
    else rows4_int8_body(x, NULL, w, stride, k, d1, d2);
}

/* y of W row r from its dots: ((float)dᵢ·sᵢ)·scale_r per term, added (qr_block.x2). */
INLINE float q8_int8_out(const qr_block *b, size_t r, int32_t d1, int32_t d2)
{
    const float t1 = ((float)d1 * b->x_scales[0]) * b->w_scales[r];
    return b->x2 ? t1 + ((float)d2 * b->x2_scales[0]) * b->w_scales[r] : t1;
}

/* A float decode block over the four streams (qr_kernels.h). */
QR_DEFINE_DECODE_FLOAT

INLINE void decode_q8_int8(const qr_block *b, const int8_t *x2)
{
    const int8_t *x = b->x, *w = b->w;
#define INT8_ROW4(i)                                                                                          \
    do {                                                                                                      \
        int32_t d1_[4], d2_[4];                                                                               \
        rows4_int8(x, x2, w + (i) * b->w_stride, q * b->w_stride, b->k, d1_, d2_);                            \
        for (int u_ = 0; u_ < 4; u_++) {                                                                      \
            const size_t r_ = (size_t)u_ * q + (i);                                                           \
            b->y[r_] = q8_int8_out(b, r_, d1_[u_], d2_[u_]);                                                  \
        }                                                                                                     \
    } while (0)
#define INT8_ROW1(r)                                                                                          \
    do {                                                                                                      \
        int32_t d1_, d2_;                                                                                     \
        row_int8(x, x2, w + (r) * b->w_stride, b->k, &d1_, &d2_);                                             \
        b->y[r] = q8_int8_out(b, (r), d1_, d2_);                                                              \
    } while (0)
    QR_DECODE_QUARTERS(b, q, INT8_ROW4, INT8_ROW1);
#undef INT8_ROW4
#undef INT8_ROW1
}

#define TILE_SWITCH(CALL)                                                                                         \
    switch ((rm - 1) * RN + (rn - 1)) {                                                                           \
    case 0: CALL(1, 1); break; case 1: CALL(1, 2); break; case 2: CALL(1, 3); break; case 3: CALL(1, 4); break;   \
    case 4: CALL(2, 1); break; case 5: CALL(2, 2); break; case 6: CALL(2, 3); break; default: CALL(2, 4); break;  \
    }
_Static_assert(RM == 2 && RN == 4, "TILE_SWITCH lists the 2 x 4 tile shapes");

INLINE void block_float(const qr_block *b, load_w_fn *load_w, load_w_tail_fn *load_w_tail, int scaled, const int w_size,
                        const int pf)
{
    if (b->decode) {
        decode_float(b, load_w, load_w_tail, scaled, w_size, pf);
        return;
    }
#define CALL_FLOAT(a_, b_) tile_float(b, i, j, a_, b_, load_w, load_w_tail, scaled)
    for (size_t i = 0; i < b->m; i += RM) {
        const int rm = b->m - i < RM ? (int)(b->m - i) : RM;
        for (size_t j = 0; j < b->nr; j += RN) {
            const int rn = b->nr - j < RN ? (int)(b->nr - j) : RN;
            TILE_SWITCH(CALL_FLOAT)
        }
    }
#undef CALL_FLOAT
}

/* The F16 decode goes without software prefetch: on a Zen 4 core with this table it read faster without,
 * as the AVX-512 table for that core found; F32 and the Q8_ROW loops were alike either way and keep
 * theirs (docs/perf/2026-11-28-source-comments.md). */
static void block_f32(const qr_block *b) { block_float(b, w_f32, w_f32_tail, 0, 4, 1); }
static void block_f16(const qr_block *b) { block_float(b, w_f16, w_f16_tail, 0, 2, 0); }
static void block_q8_f32(const qr_block *b) { block_float(b, w_q8, w_q8_tail, 1, 1, 1); }

static void block_q8_int8(const qr_block *b)
{
#define CALL_INT8(a_, b_) tile_int8(b, i, j, a_, b_)
    if (b->decode) {
        if (b->x2) decode_q8_int8(b, b->x2);
        else decode_q8_int8(b, NULL); /* x2 a constant NULL: the one-term loops */
        return;
    }
    for (size_t i = 0; i < b->m; i += RM) {
        const int rm = b->m - i < RM ? (int)(b->m - i) : RM;
        for (size_t j = 0; j < b->nr; j += RN) {
            const int rn = b->nr - j < RN ? (int)(b->nr - j) : RN;
            TILE_SWITCH(CALL_INT8)
        }
    }
#undef CALL_INT8
}

static float quantize_x_signed(const float *x, size_t cols, size_t kpad, uint8_t *out)
{
    return qr_quantize_x_row(x, cols, kpad, out, 0);
}

static float quantize_x_residual_signed(const float *x, const uint8_t *q1, float s1, size_t cols, size_t kpad, uint8_t *out)
{
    return qr_quantize_x_residual_row(x, q1, s1, cols, kpad, out, 0);
}

/* QR_ACT_AUTO decodes in two int8 terms here: the four-stream maddubs loop reads W faster than widening
 * it to float (8 lanes: a sign-extend, a convert and a multiply-add per 8 weights). Decode regions
 * (qr_kernels.decode_regions) are off here: this table gained nothing from them on the Zen 4 host.
 * Measurements: docs/perf/2026-11-28-source-comments.md. */
const qr_kernels qr_kernels_avx2 = {
    .name = "avx2",
    .level = QM_CPU_AVX2,
    .block[QM_DTYPE_F32][QR_XK_FLOAT] = block_f32,
    .block[QM_DTYPE_F16][QR_XK_FLOAT] = block_f16,
    .block[QM_DTYPE_Q8_ROW][QR_XK_FLOAT] = block_q8_f32,
    .block[QM_DTYPE_Q8_ROW][QR_XK_INT8] = block_q8_int8,
    .quantize_x = quantize_x_signed,
    .quantize_x_residual = quantize_x_residual_signed,
    .x_flip = 0,
    .auto_decode_terms = 2,
};
