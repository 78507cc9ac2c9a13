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

/* One X row (decode): each W row read start to end on its own, so a thread reads one stream, with four
 * accumulators to cover the instruction latency and, for F16 and Q8_ROW, a software prefetch
 * QR_PREFETCH_BYTES ahead (see qr_kernels_avx512.c for the measurements). */
#define QR_PREFETCH_BYTES 4096

INLINE float row_float(const float *x, const void *w, size_t k, load_w_fn *load_w, load_w_tail_fn *load_w_tail,
                       const int w_size)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t c = 0;
    for (; c + 32 <= k; c += 32) {
        if (w_size == 2) /* 64 bytes of F16 per step; Q8_ROW's 32 bytes get one prefetch every other step */
            _mm_prefetch((const char *)w + c * 2 + QR_PREFETCH_BYTES, _MM_HINT_T0);
        else if (w_size == 1 && c % 64 == 0)
            _mm_prefetch((const char *)w + c + QR_PREFETCH_BYTES, _MM_HINT_T0);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), load_w(w, c), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 8), load_w(w, c + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 16), load_w(w, c + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c + 24), load_w(w, c + 24), a3);
    }
    for (; c + 8 <= k; c += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), load_w(w, c), a0);
    if (c < k) {
        const __m256i mask = tail_mask(k - c);
        a1 = _mm256_fmadd_ps(_mm256_maskload_ps(x + c, mask), load_w_tail(w, c, k - c, mask), a1);
    }
    return hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

INLINE __m256i dot32_i8(const int8_t *x, const int8_t *w, __m256i ones)
{
    __m256i xv = _mm256_loadu_si256((const __m256i *)(const void *)x);
    __m256i wv = _mm256_loadu_si256((const __m256i *)(const void *)w);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(xv), _mm256_sign_epi8(wv, xv)), ones);
}

INLINE int32_t row_int8(const int8_t *x, const int8_t *w, size_t k)
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0;
    for (size_t c = 0; c < k; c += 64) { /* k is a multiple of 64 */
        _mm_prefetch((const char *)w + c + QR_PREFETCH_BYTES, _MM_HINT_T0);
        a0 = _mm256_add_epi32(a0, dot32_i8(x + c, w + c, ones));
        a1 = _mm256_add_epi32(a1, dot32_i8(x + c + 32, w + c + 32, ones));
    }
    return hsum_epi32(_mm256_add_epi32(a0, a1));
}

#define TILE_SWITCH(CALL)                                                                                         \
    switch ((rm - 1) * RN + (rn - 1)) {                                                                           \
    case 0: CALL(1, 1); break; case 1: CALL(1, 2); break; case 2: CALL(1, 3); break; case 3: CALL(1, 4); break;   \
    case 4: CALL(2, 1); break; case 5: CALL(2, 2); break; case 6: CALL(2, 3); break; default: CALL(2, 4); break;  \
    }
_Static_assert(RM == 2 && RN == 4, "TILE_SWITCH lists the 2 x 4 tile shapes");

INLINE void block_float(const qr_block *b, load_w_fn *load_w, load_w_tail_fn *load_w_tail, int scaled, const int w_size)
{
    if (b->decode) {
        for (size_t r = 0; r < b->nr; r++) {
            float s = row_float((const float *)b->x, (const uint8_t *)b->w + r * b->w_stride, b->k, load_w, load_w_tail,
                                w_size);
            b->y[r] = scaled ? s * b->w_scales[r] : s;
        }
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

static void block_f32(const qr_block *b) { block_float(b, w_f32, w_f32_tail, 0, 4); }
static void block_f16(const qr_block *b) { block_float(b, w_f16, w_f16_tail, 0, 2); }
static void block_q8_f32(const qr_block *b) { block_float(b, w_q8, w_q8_tail, 1, 1); }

static void block_q8_int8(const qr_block *b)
{
#define CALL_INT8(a_, b_) tile_int8(b, i, j, a_, b_)
    if (b->decode) {
        for (size_t r = 0; r < b->nr; r++) {
            const int8_t *wr = (const int8_t *)b->w + r * b->w_stride;
            int32_t d = row_int8((const int8_t *)b->x, wr, b->k);
            b->y[r] = ((float)d * b->x_scales[0]) * b->w_scales[r];
            if (b->x2) /* the second term: the row is in L1 now */
                b->y[r] += ((float)row_int8((const int8_t *)b->x2, wr, b->k) * b->x2_scales[0]) * b->w_scales[r];
        }
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

const qr_kernels qr_kernels_avx2 = {
    .name = "avx2",
    .level = QM_CPU_AVX2,
    .f32 = block_f32,
    .f16 = block_f16,
    .q8_f32 = block_q8_f32,
    .q8_int8 = block_q8_int8,
    .quantize_x = quantize_x_signed,
    .quantize_x_residual = quantize_x_residual_signed,
};
