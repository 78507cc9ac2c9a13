/* qr_kernels_avx512.c — AVX-512 (F, BW, VL) + VNNI kernels. Compiled with those flags and only called
 * after qr_kernels_for() saw them in cpuid.
 *
 * Layout of the work: each output Y[i][r] is one dot product of X row i and W row r, computed with the
 * lanes of a vector running along the row (16 floats, or 64 int8 in groups of 4 for vpdpbusd) and summed
 * across lanes once at the end. A register tile of RM X rows × RN W rows keeps RM·RN accumulators live,
 * so every vector loaded from W serves RM rows of X and every X vector serves RN rows of W. W is never
 * repacked: it is read as it lies, which is what lets it stay in the mapping. The int8 GEMM is the
 * exception to lanes along the row: it reads X (which qr_matmul copies when it quantizes it anyway) in
 * groups of 16 rows, lanes along X's rows (gemm_int8 and the group tiles, below).
 *
 * Results do not depend on the thread count or the blocking: an output's float accumulation order
 * depends only on whether the whole product has one X row (decode, below) or more. Int8 products are
 * exact, so for them not even on that. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "qr_kernels.h"
#include "qr_quantize_x.h"

/* The register tile. 4 × 4 is the fastest int8 GEMM tile gcc compiles here: wider tiles leave too few
 * registers for the operands (docs/perf/2026-11-28-source-comments.md). Overridable with -DRM= -DRN=. */
#ifndef RM
#define RM 4 /* X rows per register tile */
#endif
#ifndef RN
#define RN 4 /* W rows per register tile */
#endif
#define INLINE static inline __attribute__((always_inline))

/* acc += Σ₄ a(u8)·b(s8) per 32-bit lane, in place. gcc 12 compiles _mm512_dpbusd_epi32 in a register tile
 * with a register copy of the accumulator around most instructions; the asm ties the accumulator to its
 * register. */
INLINE __m512i dpbusd(__m512i acc, __m512i a, __m512i b)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "vm"(b));
    return acc;
}

/* Sum of the 16 lanes, wrapping: GCC's _mm512_reduce_add_epi32 adds in signed vector arithmetic, whose
 * overflow is undefined, while these sums are meant to wrap (see put_int8_sum). The add intrinsics used
 * here are unsigned in GCC's headers. */
INLINE uint32_t reduce_add_u32(__m512i v)
{
    __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0x4e));
    q = _mm_add_epi32(q, _mm_shuffle_epi32(q, 0xb1));
    return (uint32_t)_mm_cvtsi128_si32(q);
}

/* The four lane sums of v0..v3 in one vector, wrapping: a transpose-and-add tree (8 additions for four
 * sums, against 4 × 4 for four separate reductions). */
INLINE __m128i reduce4_u32(__m512i v0, __m512i v1, __m512i v2, __m512i v3)
{
    /* per 128-bit lane: [v0₀+v0₂, v1₀+v1₂, v0₁+v0₃, v1₁+v1₃] and the same for v2, v3 */
    __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(v0, v1), _mm512_unpackhi_epi32(v0, v1));
    __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(v2, v3), _mm512_unpackhi_epi32(v2, v3));
    /* per 128-bit lane: [Σv0, Σv1, Σv2, Σv3] of that lane */
    __m512i c = _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
    __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(c), _mm512_extracti64x4_epi64(c, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* ---- float products: W widened to 16 floats per step ------------------------------------------- */

typedef __m512 load_w_fn(const void *row, size_t c);
typedef __m512 load_w_tail_fn(const void *row, size_t c, __mmask16 m);

INLINE __m512 w_f32(const void *row, size_t c) { return _mm512_loadu_ps((const float *)row + c); }
INLINE __m512 w_f32_tail(const void *row, size_t c, __mmask16 m) { return _mm512_maskz_loadu_ps(m, (const float *)row + c); }
INLINE __m512 w_f16(const void *row, size_t c)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)row + c)));
}
INLINE __m512 w_f16_tail(const void *row, size_t c, __mmask16 m)
{
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + c));
}
INLINE __m512 w_q8(const void *row, size_t c)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)((const int8_t *)row + c))));
}
/* Q8_ROW rows are zero-padded to 64 bytes, so the 16 bytes at a tail position are inside the row. */
INLINE __m512 w_q8_tail(const void *row, size_t c, __mmask16 m)
{
    (void)m;
    return w_q8(row, c);
}

INLINE void tile_float(const qr_block *b, size_t i, size_t j, const int rm, const int rn, load_w_fn *load_w,
                       load_w_tail_fn *load_w_tail, int scaled)
{
    __m512 acc[RM][RN];
    const float *xr[RM];
    const void *wr[RN];
#pragma GCC unroll 8
    for (int a = 0; a < rm; a++) {
        xr[a] = (const float *)(const void *)((const uint8_t *)b->x + (i + a) * b->x_stride);
#pragma GCC unroll 8
        for (int q = 0; q < rn; q++) acc[a][q] = _mm512_setzero_ps();
    }
#pragma GCC unroll 8
    for (int q = 0; q < rn; q++) wr[q] = (const uint8_t *)b->w + (j + q) * b->w_stride;

    const size_t k = b->k;
    size_t c = 0;
    for (; c + 16 <= k; c += 16) {
        __m512 xv[RM];
#pragma GCC unroll 8
        for (int a = 0; a < rm; a++) xv[a] = _mm512_loadu_ps(xr[a] + c);
#pragma GCC unroll 8
        for (int q = 0; q < rn; q++) {
            __m512 wv = load_w(wr[q], c);
#pragma GCC unroll 8
            for (int a = 0; a < rm; a++) acc[a][q] = _mm512_fmadd_ps(xv[a], wv, acc[a][q]);
        }
    }
    if (c < k) {
        const __mmask16 m = (__mmask16)((1u << (k - c)) - 1u);
        __m512 xv[RM];
#pragma GCC unroll 8
        for (int a = 0; a < rm; a++) xv[a] = _mm512_maskz_loadu_ps(m, xr[a] + c);
#pragma GCC unroll 8
        for (int q = 0; q < rn; q++) {
            __m512 wv = load_w_tail(wr[q], c, m);
#pragma GCC unroll 8
            for (int a = 0; a < rm; a++) acc[a][q] = _mm512_fmadd_ps(xv[a], wv, acc[a][q]);
        }
    }
#pragma GCC unroll 8
    for (int a = 0; a < rm; a++) {
        float *yr = b->y + (i + a) * b->y_stride + j;
#pragma GCC unroll 8
        for (int q = 0; q < rn; q++) {
            float s = _mm512_reduce_add_ps(acc[a][q]);
            yr[q] = scaled ? s * b->w_scales[j + q] : s;
        }
    }
}

/* ---- int8 products: vpdpbusd of (q_x + 128) (unsigned) and q_w (signed) ------------------------- */

/* One output's integer sum into Y: added to the partial sum Y holds (as uint32 bits) unless `first`,
 * kept there as bits unless `last`, and at the last slice Σ (q_x + 128)·q_w − 128·Σ q_w = Σ q_x·q_w
 * turned into ((float)d·s_x)·scale_w. The sums may wrap in 32 bits; the result fits, so the wrapped
 * arithmetic (unsigned in C) gives it exactly. Both GEMM tiles finish through it (or, four or eight
 * outputs at a time, through the same operations in vectors). */
INLINE void put_int8_sum(const qr_block *b, float *y, size_t r, uint32_t sum, float sx, bool first, bool last)
{
    uint32_t part;
    if (!first) memcpy(&part, y, sizeof part), sum += part;
    if (!last) {
        memcpy(y, &sum, sizeof sum);
        return;
    }
    const uint32_t u = sum - 128u * (uint32_t)b->w_sums[r];
    *y = ((float)(int32_t)u * sx) * b->w_scales[r];
}

/* Columns [c0, c1) of the tile. A product whose rows are split in K slices (block_q8_int8) keeps each
 * output's partial sum in its own Y element between slices, as uint32 bits (Y is this block's to write):
 * `first` starts from zero instead of that sum, `last` turns the sum into the float result. */
INLINE void tile_int8(const qr_block *b, size_t i, size_t j, const int rm, const int rn, size_t c0, size_t c1,
                      bool first, bool last)
{
    __m512i acc[RM][RN];
    const uint8_t *xr[RM];
    const uint8_t *wr[RN];
#pragma GCC unroll 8
    for (int a = 0; a < rm; a++) {
        xr[a] = (const uint8_t *)b->x + (i + a) * b->x_stride;
#pragma GCC unroll 8
        for (int q = 0; q < rn; q++) acc[a][q] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int q = 0; q < rn; q++) wr[q] = (const uint8_t *)b->w + (j + q) * b->w_stride;

    for (size_t c = c0; c < c1; c += 64) { /* multiples of 64: both operands are padded */
        __m512i xv[RM];
#pragma GCC unroll 8
        for (int a = 0; a < rm; a++) xv[a] = _mm512_loadu_si512((const void *)(xr[a] + c));
#pragma GCC unroll 8
        for (int q = 0; q < rn; q++) {
            __m512i wv = _mm512_loadu_si512((const void *)(wr[q] + c));
#pragma GCC unroll 8
            for (int a = 0; a < rm; a++) acc[a][q] = dpbusd(acc[a][q], xv[a], wv);
        }
    }
    /* the outputs as put_int8_sum gives them */
#pragma GCC unroll 8
    for (int a = 0; a < rm; a++) {
        float *yr = b->y + (i + a) * b->y_stride + j;
        const float sx = b->x_scales[i + a];
        if (rn == 4) { /* the same operations four outputs at a time */
            __m128i sum = reduce4_u32(acc[a][0], acc[a][1], acc[a][2], acc[a][3]);
            if (!first) sum = _mm_add_epi32(sum, _mm_loadu_si128((const __m128i *)(void *)yr));
            if (!last) {
                _mm_storeu_si128((__m128i *)(void *)yr, sum);
                continue;
            }
            __m128i d = _mm_sub_epi32(sum, _mm_slli_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b->w_sums + j)), 7));
            __m128 v = _mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(d), _mm_set1_ps(sx)), _mm_loadu_ps(b->w_scales + j));
            _mm_storeu_ps(yr, v);
            continue;
        }
#pragma GCC unroll 8
        for (int q = 0; q < rn; q++) put_int8_sum(b, yr + q, j + q, reduce_add_u32(acc[a][q]), sx, first, last);
    }
}

/* ---- one X row (decode): four streams per thread, each W row read start to end -----------------
 * With a single X row nothing is reused across W rows: the product is a read of W, and what matters is
 * how fast a thread's share streams in. Four streams far apart (the quarters of the block, one row of
 * each at a time, every row summed as it would be alone) beat one; neighbouring rows as the streams (a
 * 1 × RN tile) do worse than one stream, as each such stream ends after one row. Each W row has four
 * accumulators to cover the instruction latency and a software prefetch ahead of the loads:
 * QR_PREFETCH_BYTES for a lone row, QR_PREFETCH4_BYTES per stream with four
 * (docs/perf/2026-11-28-source-comments.md has the measurements behind each choice). */
/* The prefetches go to L2 (T1), not L1 (T0): on a Zen 4 host T0 lost decode speed against no software
 * prefetch at all, while T1 matched or beat none. Per stream 2 KiB ahead: on Zen 4 F32 reads 2 KiB ahead
 * better than 4 (1 KiB about the same), but the one-term int8 loop reads 1 KiB ahead faster than 2
 * (rows4_int8_body); on the Intel Xeon host 1, 2 and 4 KiB could not be told apart, while dropping the
 * F16 prefetch there cost a tenth (docs/perf/2026-11-28-source-comments.md, docs/perf/2026-11-26-zen4.md,
 * docs/perf/2026-11-28-zen4-prefetch-distance.md).
 * -DQR_PREFETCH_HINT=, -DQR_PREFETCH_BYTES=, -DQR_PREFETCH4_BYTES=, -DQR_PREFETCH4_INT8_HALVES_BYTES= to
 * measure again. */

INLINE float row_float(const float *x, const void *w, size_t k, load_w_fn *load_w, load_w_tail_fn *load_w_tail,
                        const int w_size, const int pf)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t c = 0;
    for (; c + 64 <= k; c += 64) {
        if (pf && w_size <= 2) /* F16, Q8_ROW */
#pragma GCC unroll 2
            for (int p = 0; p < w_size; p++)
                QR_PREFETCH((const char *)w + c * (size_t)w_size + QR_PREFETCH_BYTES + 64 * p);
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c), load_w(w, c), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 16), load_w(w, c + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 32), load_w(w, c + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c + 48), load_w(w, c + 48), a3);
    }
    for (; c + 16 <= k; c += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + c), load_w(w, c), a0);
    if (c < k) {
        const __mmask16 m = (__mmask16)((1u << (k - c)) - 1u);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + c), load_w_tail(w, c, m), a1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* Four W rows far apart (one from each quarter of the block: four streams, as the bandwidth baseline's
 * best reader), each summed exactly as row_float sums one: the same four accumulators per row, so a row's
 * result does not depend on which of the two it went through. F32 takes each 64-column step in two passes
 * over the four rows, two lines of each at a time (accumulators 0-1, then 2-3: the same sums in the same
 * order), as the baseline reader interleaves its streams 128 bytes at a time; four lines of one row and
 * then the next read slower (docs/perf/2026-11-27-zen4.md, "Where F32 decode goes"). F16 gains too little
 * from the split to take it, and keeps one pass, as does Q8_ROW widened. */
INLINE void rows4_float(const float *x, const void *const w[4], size_t k, load_w_fn *load_w,
                        load_w_tail_fn *load_w_tail, const int w_size, const int pf, float out[4])
{
    __m512 a[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm512_setzero_ps();
    size_t c = 0;
    const int group = w_size == 4 ? 2 : 4;   /* accumulators (16 columns each) per pass over the rows */
    for (; c + 64 <= k; c += 64) {
#pragma GCC unroll 2
        for (int h = 0; h < 4; h += group) {
            __m512 xv[4];
#pragma GCC unroll 4
            for (int g = h; g < h + group; g++) xv[g] = _mm512_loadu_ps(x + c + 16 * g);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                if (pf) /* this pass's lines of the row: group · 16 · w_size bytes from column c + 16h */
#pragma GCC unroll 4
                    for (int p = 0; p < group * w_size / 4; p++)
                        QR_PREFETCH((const char *)w[r] + (c + 16 * (size_t)h) * (size_t)w_size + QR_PREFETCH4_BYTES +
                                    64 * p);
#pragma GCC unroll 4
                for (int g = h; g < h + group; g++) a[r][g] = _mm512_fmadd_ps(xv[g], load_w(w[r], c + 16 * g), a[r][g]);
            }
        }
    }
    for (; c + 16 <= k; c += 16) {
        const __m512 xv = _mm512_loadu_ps(x + c);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) a[r][0] = _mm512_fmadd_ps(xv, load_w(w[r], c), a[r][0]);
    }
    if (c < k) {
        const __mmask16 m = (__mmask16)((1u << (k - c)) - 1u);
        const __m512 xv = _mm512_maskz_loadu_ps(m, x + c);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) a[r][1] = _mm512_fmadd_ps(xv, load_w_tail(w[r], c, m), a[r][1]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        out[r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_add_ps(a[r][2], a[r][3])));
}

/* y[r] of one W row from its integer dots: ((float)dᵢ·sᵢ)·scale_r per term, added (qr_block.x2). */
INLINE float q8_int8_out(const qr_block *b, size_t r, uint32_t u1, uint32_t u2)
{
    const uint32_t bias = 128u * (uint32_t)b->w_sums[r]; /* the +128 of X's unsigned encoding */
    const float t1 = ((float)(int32_t)(u1 - bias) * b->x_scales[0]) * b->w_scales[r];
    return b->x2 ? t1 + ((float)(int32_t)(u2 - bias) * b->x2_scales[0]) * b->w_scales[r] : t1;
}

/* q8_int8_out of four rows r[0..3] at once: the same operations in the same order, one lane a row, so
 * each output has the bits the one-row form gives it. The four-stream loop's function ends with it, on
 * its reduced sums in registers, which is faster than four at a time in scalar from sums stored to the
 * stack after the call (docs/perf/2026-11-26-zen4.md). */
INLINE void q8_int8_out4(const qr_block *b, const size_t r[4], __m128i u1, __m128i u2, const int two)
{
    const int32_t *ws = b->w_sums;
    const float *sc = b->w_scales;
    /* 128 · sum as uint32, as q8_int8_out computes it: a shift left by 7 has the same bits */
    const __m128i bias = _mm_slli_epi32(_mm_setr_epi32(ws[r[0]], ws[r[1]], ws[r[2]], ws[r[3]]), 7);
    const __m128 scale = _mm_setr_ps(sc[r[0]], sc[r[1]], sc[r[2]], sc[r[3]]);
    __m128 t = _mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(u1, bias)), _mm_set1_ps(b->x_scales[0])), scale);
    if (two) {
        const __m128 t2 = _mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(u2, bias)), _mm_set1_ps(b->x2_scales[0]));
        t = _mm_add_ps(t, _mm_mul_ps(t2, scale));
    }
    float out[4];
    _mm_storeu_ps(out, t);
    for (int u = 0; u < 4; u++) b->y[r[u]] = out[u];
}

/* Four W rows far apart (rows i, q + i, 2q + i, 3q + i of the block) against one int8 term of X, or two
 * (x2 not NULL), and their four outputs (q8_int8_out4); integer sums, so any order. Instantiated out of
 * line (rows4_int8, rows4_int8_no_prefetch): inlined in the block's loop, gcc 12 kept the four row
 * pointers on the stack and reloaded them at every step; on its own the loop holds everything in
 * registers.
 * `prefetch` = 0 (the table for cores that run 512-bit operations in halves) drops the software prefetch
 * of the two-term loop and brings the one-term loop's closer. On a Zen 4 core the prefetches cost the
 * two-term loop more than they gave: two vpdpbusd per W vector waiting on its load appear to fill the
 * scheduler sooner (one term issued twice per vector was as slow). The one-term loop keeps its prefetch
 * everywhere (docs/perf/2026-11-28-source-comments.md), there QR_PREFETCH4_INT8_HALVES_BYTES ahead:
 * 1 KiB read the 1.1B decode faster than 2 KiB in every pair on one thread, and 3–4 KiB slower
 * (docs/perf/2026-11-28-zen4-prefetch-distance.md). */
#ifndef QR_PREFETCH4_INT8_HALVES_BYTES
#define QR_PREFETCH4_INT8_HALVES_BYTES 1024
#endif
INLINE void rows4_int8_body(const qr_block *b, const uint8_t *x2, size_t i, size_t q, const int prefetch)
{
    const uint8_t *x = b->x, *w = (const uint8_t *)b->w + i * b->w_stride;
    const size_t qs = q * b->w_stride, k = b->k;
    const size_t ahead = prefetch ? QR_PREFETCH4_BYTES : QR_PREFETCH4_INT8_HALVES_BYTES;
    const uint8_t *w1 = w + qs, *w2 = w + 2 * qs, *w3 = w + 3 * qs;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (size_t c = 0; c < k; c += 64) { /* k is a multiple of 64 */
        const __m512i xv = _mm512_loadu_si512(x + c);
        if (prefetch || !x2) {
            QR_PREFETCH((const char *)w + c + ahead);
            QR_PREFETCH((const char *)w1 + c + ahead);
            QR_PREFETCH((const char *)w2 + c + ahead);
            QR_PREFETCH((const char *)w3 + c + ahead);
        }
        const __m512i v0 = _mm512_loadu_si512(w + c), v1 = _mm512_loadu_si512(w1 + c);
        const __m512i v2 = _mm512_loadu_si512(w2 + c), v3 = _mm512_loadu_si512(w3 + c);
        a0 = dpbusd(a0, xv, v0);
        a1 = dpbusd(a1, xv, v1);
        a2 = dpbusd(a2, xv, v2);
        a3 = dpbusd(a3, xv, v3);
        if (x2) {
            const __m512i xv2 = _mm512_loadu_si512(x2 + c);
            b0 = dpbusd(b0, xv2, v0);
            b1 = dpbusd(b1, xv2, v1);
            b2 = dpbusd(b2, xv2, v2);
            b3 = dpbusd(b3, xv2, v3);
        }
    }
    const size_t r[4] = { i, q + i, 2 * q + i, 3 * q + i };
    q8_int8_out4(b, r, reduce4_u32(a0, a1, a2, a3), x2 ? reduce4_u32(b0, b1, b2, b3) : _mm_setzero_si128(), x2 != NULL);
}

__attribute__((noinline)) static void rows4_int8(const qr_block *b, const uint8_t *x2, size_t i, size_t q)
{
    if (x2) rows4_int8_body(b, x2, i, q, 1);
    else rows4_int8_body(b, NULL, i, q, 1);
}

__attribute__((noinline)) static void rows4_int8_no_prefetch(const qr_block *b, const uint8_t *x2, size_t i, size_t q)
{
    if (x2) rows4_int8_body(b, x2, i, q, 0);
    else rows4_int8_body(b, NULL, i, q, 0);
}

INLINE uint32_t row_int8(const uint8_t *x, const uint8_t *w, size_t k)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    size_t c = 0;
    for (; c + 256 <= k; c += 256) {
#pragma GCC unroll 8
        for (int p = 0; p < 4; p++) QR_PREFETCH((const char *)w + c + QR_PREFETCH_BYTES + 64 * p);
        a0 = dpbusd(a0, _mm512_loadu_si512(x + c), _mm512_loadu_si512(w + c));
        a1 = dpbusd(a1, _mm512_loadu_si512(x + c + 64), _mm512_loadu_si512(w + c + 64));
        a2 = dpbusd(a2, _mm512_loadu_si512(x + c + 128), _mm512_loadu_si512(w + c + 128));
        a3 = dpbusd(a3, _mm512_loadu_si512(x + c + 192), _mm512_loadu_si512(w + c + 192));
    }
    for (; c < k; c += 64) a0 = dpbusd(a0, _mm512_loadu_si512(x + c), _mm512_loadu_si512(w + c));
    return reduce_add_u32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)));
}

/* Two int8 terms of one X row against one W row, reading W once: each W vector meets both terms.
 * `prefetch` = 0 drops the software prefetch (as rows4_int8_body's). */
INLINE void row_int8x2(const uint8_t *x, const uint8_t *x2, const uint8_t *w, size_t k, uint32_t *d1, uint32_t *d2,
                       const int prefetch)
{
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    size_t c = 0;
    for (; c + 256 <= k; c += 256) {
#pragma GCC unroll 8
        for (int p = 0; p < 4 && prefetch; p++) QR_PREFETCH((const char *)w + c + QR_PREFETCH_BYTES + 64 * p);
        __m512i w0 = _mm512_loadu_si512(w + c), w1 = _mm512_loadu_si512(w + c + 64);
        __m512i w2 = _mm512_loadu_si512(w + c + 128), w3 = _mm512_loadu_si512(w + c + 192);
        a0 = dpbusd(a0, _mm512_loadu_si512(x + c), w0);
        b0 = dpbusd(b0, _mm512_loadu_si512(x2 + c), w0);
        a1 = dpbusd(a1, _mm512_loadu_si512(x + c + 64), w1);
        b1 = dpbusd(b1, _mm512_loadu_si512(x2 + c + 64), w1);
        a2 = dpbusd(a2, _mm512_loadu_si512(x + c + 128), w2);
        b2 = dpbusd(b2, _mm512_loadu_si512(x2 + c + 128), w2);
        a3 = dpbusd(a3, _mm512_loadu_si512(x + c + 192), w3);
        b3 = dpbusd(b3, _mm512_loadu_si512(x2 + c + 192), w3);
    }
    for (; c < k; c += 64) {
        __m512i wv = _mm512_loadu_si512(w + c);
        a0 = dpbusd(a0, _mm512_loadu_si512(x + c), wv);
        b0 = dpbusd(b0, _mm512_loadu_si512(x2 + c), wv);
    }
    *d1 = reduce_add_u32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)));
    *d2 = reduce_add_u32(_mm512_add_epi32(_mm512_add_epi32(b0, b1), _mm512_add_epi32(b2, b3)));
}

/* ---- blocks: register tiles over the block, X tiles outer so each X tile stays in L1 ----------- */

/* Full RM × RN tiles, then the edges: leftover W rows as RM × 1 tiles, leftover X rows as 1 × RN and
 * 1 × 1 tiles. Four shapes in all, each compiled with constant bounds so its accumulators stay in
 * registers. (An output's result does not depend on the tile shape it falls in.) */
#define FOR_TILES(b, CALL)                                                                                        \
    do {                                                                                                          \
        const size_t m_full_ = (b)->m / RM * RM, n_full_ = (b)->nr / RN * RN;                                     \
        for (size_t i = 0; i < m_full_; i += RM) {                                                                \
            for (size_t j = 0; j < n_full_; j += RN) CALL(RM, RN);                                               \
            for (size_t j = n_full_; j < (b)->nr; j++) CALL(RM, 1);                                              \
        }                                                                                                         \
        for (size_t i = m_full_; i < (b)->m; i++) {                                                               \
            for (size_t j = 0; j < n_full_; j += RN) CALL(1, RN);                                                \
            for (size_t j = n_full_; j < (b)->nr; j++) CALL(1, 1);                                               \
        }                                                                                                         \
    } while (0)

/* A float decode block over the four streams (qr_kernels.h). */
QR_DEFINE_DECODE_FLOAT

INLINE void gemm_float(const qr_block *b, load_w_fn *load_w, load_w_tail_fn *load_w_tail, int scaled)
{
#define CALL_FLOAT(a_, b_) tile_float(b, i, j, a_, b_, load_w, load_w_tail, scaled)
    FOR_TILES(b, CALL_FLOAT);
#undef CALL_FLOAT
}

static void block_f32(const qr_block *b)
{
    if (b->decode) decode_float(b, w_f32, w_f32_tail, 0, 4, 1);
    else gemm_float(b, w_f32, w_f32_tail, 0);
}
static void block_f16(const qr_block *b)
{
    if (b->decode) decode_float(b, w_f16, w_f16_tail, 0, 2, 1);
    else gemm_float(b, w_f16, w_f16_tail, 0);
}
/* F16 decode without software prefetch, for cores that run 512-bit operations in halves (Zen 4): there
 * the prefetches slowed it, while F32 and the Q8_ROW loops with one term or widening gain from theirs and
 * keep them (docs/perf/2026-11-25-zen4.md, the last paragraph). */
static void block_f16_no_prefetch(const qr_block *b)
{
    if (b->decode) decode_float(b, w_f16, w_f16_tail, 0, 2, 0);
    else gemm_float(b, w_f16, w_f16_tail, 0);
}
static void block_q8_f32(const qr_block *b)
{
    if (b->decode) decode_float(b, w_q8, w_q8_tail, 1, 1, 1);
    else gemm_float(b, w_q8, w_q8_tail, 1);
}

/* `prefetch` = 0: the quarters (rows4_int8_no_prefetch) and the two-term lone rows go without software
 * prefetch. Two terms and a block marked one_stream (only a table with decode_regions marks them): row by
 * row, one stream that the thread's next block continues, instead of in quarters. */
INLINE void decode_q8_int8(const qr_block *b, const uint8_t *x2, const int prefetch)
{
    const uint8_t *x = b->x, *w = b->w;
#define INT8_ROW4(i) (prefetch ? rows4_int8 : rows4_int8_no_prefetch)(b, x2, (i), q)
#define INT8_ROW1(r)                                                                                          \
    do {                                                                                                      \
        uint32_t d1_, d2_ = 0;                                                                                \
        if (x2) row_int8x2(x, x2, w + (r) * b->w_stride, b->k, &d1_, &d2_, prefetch);                         \
        else d1_ = row_int8(x, w + (r) * b->w_stride, b->k);                                                  \
        b->y[r] = q8_int8_out(b, (r), d1_, d2_);                                                              \
    } while (0)
    if (x2 && b->one_stream)
        for (size_t r = 0; r < b->nr; r++) INT8_ROW1(r);
    else
        QR_DECODE_QUARTERS(b, q, INT8_ROW4, INT8_ROW1);
#undef INT8_ROW4
#undef INT8_ROW1
}

/* Long rows in K slices: a tile reads RM rows of X and RN of W over its columns, and once those pass L1's
 * size (4 + 4 rows of 11008 bytes: 88 KB) every step of every tile loads both from L2. With slices of at
 * most QR_K_SLICE_BYTES bytes, an X tile's slice stays in L1 while the W rows of the block pass it, as in
 * a product of shorter rows. */
/* Columns [c0, c1) of the block's rows, slice by slice: as many slices of equal width (a multiple of 64)
 * as keep each under QR_K_SLICE_BYTES, `first` and `last` true for the first and the last. */
#define FOR_K_SLICES(b, BODY)                                                                                 \
    do {                                                                                                      \
        const size_t slices_ = ((b)->k + QR_K_SLICE_BYTES - 1) / QR_K_SLICE_BYTES;                            \
        const size_t width_ = ((b)->k / 64 + slices_ - 1) / slices_ * 64;                                     \
        for (size_t s_ = 0; s_ < slices_; s_++) {                                                             \
            const size_t c0 = s_ * width_, c1 = c0 + width_ < (b)->k ? c0 + width_ : (b)->k;                  \
            const bool first = s_ == 0, last = s_ + 1 == slices_;                                             \
            BODY;                                                                                             \
        }                                                                                                     \
    } while (0)

INLINE void gemm_q8_int8(const qr_block *b)
{
#define CALL_INT8(a_, b_) tile_int8(b, i, j, a_, b_, c0, c1, first, last)
    FOR_K_SLICES(b, FOR_TILES(b, CALL_INT8));
#undef CALL_INT8
}

/* ---- int8 GEMM of a few X rows (QR_SMALL_ROWS; a batch's decode step of up to 15 sequences) -------
 * The int8 copy of X, both terms included, stays in cache while each tile of SMALL_RN W rows is read from
 * memory once over its whole length and meets every X row, and both terms of each (qr_kernels.gemm_x2),
 * while it is in L1. The row tiles below read a W block from L2 once per term and, with a row tile of
 * one X row, through four times as many W loads per multiply. Integer sums are exact and the float
 * epilogue is q8_int8_out's, so each output has the bits every other row count gives it.
 * A tile's four rows are four short streams, which the hardware prefetcher does not follow: the first X
 * tile over each W tile prefetches the W tile SMALL_PF_TILES ahead, row by row beside its own loads
 * (docs/perf/2026-11-28-zen4-small-gemm.md). */
#define SMALL_RN 4

/* Rows i .. i+rm-1 of X (one term, or two: x2 not NULL) against W rows j .. j+rn-1, whole rows. */
INLINE void tile_int8_small(const qr_block *b, const uint8_t *x2, size_t i, size_t j, const int rm, const int rn,
                            const uint8_t *pf)
{
    __m512i acc[RM][SMALL_RN], acc2[RM][SMALL_RN];
    const uint8_t *xr[RM], *x2r[RM], *wr[SMALL_RN];
#pragma GCC unroll 8
    for (int a = 0; a < rm; a++) {
        xr[a] = (const uint8_t *)b->x + (i + a) * b->x_stride;
        x2r[a] = x2 ? x2 + (i + a) * b->x_stride : NULL;
#pragma GCC unroll 8
        for (int q = 0; q < rn; q++) acc[a][q] = acc2[a][q] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int q = 0; q < rn; q++) wr[q] = (const uint8_t *)b->w + (j + q) * b->w_stride;
    for (size_t c = 0; c < b->k; c += 64) { /* k is a multiple of 64 */
        __m512i xv[RM], xv2[RM];
#pragma GCC unroll 8
        for (int a = 0; a < rm; a++) {
            xv[a] = _mm512_loadu_si512((const void *)(xr[a] + c));
            if (x2) xv2[a] = _mm512_loadu_si512((const void *)(x2r[a] + c));
        }
        if (pf)
#pragma GCC unroll 8
            for (int q = 0; q < rn; q++) QR_PREFETCH((const char *)pf + q * b->w_stride + c);
#pragma GCC unroll 8
        for (int q = 0; q < rn; q++) {
            const __m512i wv = _mm512_loadu_si512((const void *)(wr[q] + c));
#pragma GCC unroll 8
            for (int a = 0; a < rm; a++) {
                acc[a][q] = dpbusd(acc[a][q], xv[a], wv);
                if (x2) acc2[a][q] = dpbusd(acc2[a][q], xv2[a], wv);
            }
        }
    }
    /* q8_int8_out's operations, four outputs at a time when rn = 4 (q8_int8_out4's vector form) */
#pragma GCC unroll 8
    for (int a = 0; a < rm; a++) {
        float *yr = b->y + (i + a) * b->y_stride + j;
        const float s1 = b->x_scales[i + a], s2 = x2 ? b->x2_scales[i + a] : 0.0f;
        if (rn == 4) {
            const __m128i bias = _mm_slli_epi32(_mm_loadu_si128((const __m128i *)(const void *)(b->w_sums + j)), 7);
            const __m128 scale = _mm_loadu_ps(b->w_scales + j);
            const __m128i u1 = reduce4_u32(acc[a][0], acc[a][1], acc[a][2], acc[a][3]);
            __m128 t = _mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(u1, bias)), _mm_set1_ps(s1)), scale);
            if (x2) {
                const __m128i u2 = reduce4_u32(acc2[a][0], acc2[a][1], acc2[a][2], acc2[a][3]);
                const __m128 t2 = _mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(u2, bias)), _mm_set1_ps(s2));
                t = _mm_add_ps(t, _mm_mul_ps(t2, scale));
            }
            _mm_storeu_ps(yr, t);
            continue;
        }
#pragma GCC unroll 8
        for (int q = 0; q < rn; q++) {
            const uint32_t bias = 128u * (uint32_t)b->w_sums[j + q];
            const float sc = b->w_scales[j + q];
            float t = ((float)(int32_t)(reduce_add_u32(acc[a][q]) - bias) * s1) * sc;
            if (x2) t = t + ((float)(int32_t)(reduce_add_u32(acc2[a][q]) - bias) * s2) * sc;
            yr[q] = t;
        }
    }
}

/* Every X row against W rows j .. j+rn-1: X tiles of 4 rows (one term only: with two, 2 × 2 × 4
 * accumulators fill as many registers as 4 × 4 do), then of 2, then 1. */
#ifndef SMALL_PF_TILES
#define SMALL_PF_TILES 3
#endif
#define SMALL_X_TILES(rn_)                                                                                    \
    do {                                                                                                      \
        size_t i = 0;                                                                                         \
        const size_t pj_ = j + SMALL_PF_TILES * SMALL_RN;                                                    \
        const uint8_t *pf_ = pj_ + (rn_) <= b->nr ? (const uint8_t *)b->w + pj_ * b->w_stride : NULL;         \
        if (!x2)                                                                                              \
            for (; i + 4 <= b->m; i += 4) tile_int8_small(b, x2, i, j, 4, rn_, i ? NULL : pf_);               \
        for (; i + 2 <= b->m; i += 2) tile_int8_small(b, x2, i, j, 2, rn_, i ? NULL : pf_);                   \
        if (i < b->m) tile_int8_small(b, x2, i, j, 1, rn_, i ? NULL : pf_);                                   \
    } while (0)

INLINE void gemm_small_body(const qr_block *b, const uint8_t *x2)
{
    size_t j = 0;
    for (; j + SMALL_RN <= b->nr; j += SMALL_RN) SMALL_X_TILES(SMALL_RN);
    for (; j < b->nr; j++) SMALL_X_TILES(1);
}
#undef SMALL_X_TILES

static void gemm_small_int8(const qr_block *b)
{
    if (b->x2) gemm_small_body(b, b->x2);
    else gemm_small_body(b, NULL); /* x2 a constant NULL: the one-term loop */
}

/* ---- int8 GEMM over X in row groups (qr_kernels.h, QR_XG_OFFSET) --------------------------------
 * One vector of X holds the next 4 columns of 16 rows, and a W row's 4 bytes broadcast to every lane meet
 * them in one vpdpbusd: the lanes of an accumulator are 16 outputs (16 X rows, one W row), so a tile ends
 * without summing across lanes, where the row tiles above spend about 9% of a 2048-column product
 * reducing theirs, and W is still read as it lies. A tile is GM groups × GN W rows (24 accumulators, 3 X
 * vectors and a broadcast W in registers); the tile shapes that fit ran alike, all ahead of the row tiles
 * (docs/perf/2026-11-28-source-comments.md, docs/perf/2026-11-27-zen4.md).
 * Groups reach past the block's X rows; those outputs are not written. */
#define GM 3
#define GN 8

/* Lanes 8h .. 8h+7 of v. */
INLINE __m256 half_ps(__m512 v, int h)
{
    return h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)) : _mm512_castps512_ps256(v);
}

/* r[q][l] becomes r[l][q] (8 × 8 floats). */
INLINE void transpose8_ps(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* The outputs of a tile as put_int8_sum gives them (sixteen at a time in the same float operations, so
 * the same bits); rows of the groups outside the block are not written. */
INLINE void tile_groups_out(const qr_block *b, size_t t, const int gm, size_t j, const int gn,
                            __m512i acc[GM][GN], bool first, bool last)
{
    const size_t row_end = b->x_row0 + b->m;
#pragma GCC unroll 8
    for (int a = 0; a < gm; a++) {
        const size_t g0 = (t + a) * QR_XG_ROWS;
        const size_t l0 = g0 < b->x_row0 ? b->x_row0 - g0 : 0;
        const size_t l1 = g0 + QR_XG_ROWS < row_end ? QR_XG_ROWS : row_end > g0 ? row_end - g0 : 0;
        if (l0 >= l1) continue;
        if (first && last) {
            float sx[QR_XG_ROWS] = { 0 };
            for (size_t l = l0; l < l1; l++) sx[l] = b->x_scales[g0 + l - b->x_row0];
            const __m512 sxv = _mm512_loadu_ps(sx);
            __m512 v[GN];
#pragma GCC unroll 8
            for (int q = 0; q < gn; q++) {
                const __m512i sums128 = _mm512_set1_epi32((int32_t)(128u * (uint32_t)b->w_sums[j + q]));
                const __m512i d = _mm512_sub_epi32(acc[a][q], sums128);
                v[q] = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(d), sxv), _mm512_set1_ps(b->w_scales[j + q]));
            }
            if (gn == 8) { /* rows out of columns: two 8 × 8 transposes, one per half of the lanes */
                for (int h = 0; h < 2; h++) {
                    __m256 r[8];
#pragma GCC unroll 8
                    for (int q = 0; q < 8; q++) r[q] = half_ps(v[q], h);
                    transpose8_ps(r);
                    for (size_t l = 8 * (size_t)h; l < 8 * (size_t)h + 8; l++)
                        if (l >= l0 && l < l1)
                            _mm256_storeu_ps(b->y + (g0 + l - b->x_row0) * b->y_stride + j, r[l - 8 * (size_t)h]);
                }
                continue;
            }
            float out[GN][QR_XG_ROWS];
#pragma GCC unroll 8
            for (int q = 0; q < gn; q++) _mm512_storeu_ps(out[q], v[q]);
            for (size_t l = l0; l < l1; l++) {
                float *yr = b->y + (g0 + l - b->x_row0) * b->y_stride + j;
#pragma GCC unroll 8
                for (int q = 0; q < gn; q++) yr[q] = out[q][l];
            }
            continue;
        }
        uint32_t sums[GN][QR_XG_ROWS];
#pragma GCC unroll 8
        for (int q = 0; q < gn; q++) _mm512_storeu_si512((void *)sums[q], acc[a][q]);
        for (size_t l = l0; l < l1; l++) {
            float *yr = b->y + (g0 + l - b->x_row0) * b->y_stride + j;
            const float sx = b->x_scales[g0 + l - b->x_row0];
            for (int q = 0; q < gn; q++) put_int8_sum(b, yr + q, j + q, sums[q][l], sx, first, last);
        }
    }
}

/* A tile in C, for every shape but the full one (tile_int8_groups_full). */
INLINE void tile_int8_groups(const qr_block *b, size_t t, const int gm, size_t j, const int gn, size_t c0,
                             size_t c1, bool first, bool last)
{
    __m512i acc[GM][GN];
#pragma GCC unroll 8
    for (int a = 0; a < gm; a++)
#pragma GCC unroll 8
        for (int q = 0; q < gn; q++) acc[a][q] = _mm512_setzero_si512();
    const uint8_t *xg[GM];
    const uint8_t *wr[GN];
#pragma GCC unroll 8
    for (int a = 0; a < gm; a++) xg[a] = b->xg + QR_XG_OFFSET(b->k, (t + a) * QR_XG_ROWS, 0);
#pragma GCC unroll 8
    for (int q = 0; q < gn; q++) wr[q] = (const uint8_t *)b->w + (j + q) * b->w_stride;

    for (size_t c = c0; c < c1; c += 4) {
        __m512i xv[GM];
#pragma GCC unroll 8
        for (int a = 0; a < gm; a++) xv[a] = _mm512_load_si512((const void *)(xg[a] + c * QR_XG_ROWS));
#pragma GCC unroll 8
        for (int q = 0; q < gn; q++) {
            int32_t w4;
            memcpy(&w4, wr[q] + c, sizeof w4);
            const __m512i wv = _mm512_set1_epi32(w4);
#pragma GCC unroll 8
            for (int a = 0; a < gm; a++) acc[a][q] = dpbusd(acc[a][q], xv[a], wv);
        }
    }
    tile_groups_out(b, t, gm, j, gn, acc, first, last);
}

/* The full tile's loop in assembly: written in C (above), gcc 12 ran out of general registers for the
 * eight W rows and three groups, kept pointers in vector registers and moved accumulators between
 * registers every step. Here two pointers and five strides address every operand (base + stride·1, 2 or
 * 4), the accumulators stay in zmm0-23 (acc[a][q] in zmm(8a + q)), the groups' vectors in zmm24-26, and
 * the broadcast W rows rotate through zmm27-31. acc: out (the sums from zero), 64-byte aligned;
 * steps >= 1. */
#define ZERO_(r) "vpxord %%zmm" #r ", %%zmm" #r ", %%zmm" #r "\n\t"
#define ZERO4_(a, b, c, d) ZERO_(a) ZERO_(b) ZERO_(c) ZERO_(d)
/* W row q's next 4 bytes at addr into zmm wb, times the three groups, into zmm q, q + 8, q + 16 */
#define WROW_(addr, wb, r0, r1, r2)                                                                           \
    "vpbroadcastd " addr ", %%zmm" #wb "\n\t"                                                                  \
    "vpdpbusd %%zmm" #wb ", %%zmm24, %%zmm" #r0 "\n\t"                                                        \
    "vpdpbusd %%zmm" #wb ", %%zmm25, %%zmm" #r1 "\n\t"                                                        \
    "vpdpbusd %%zmm" #wb ", %%zmm26, %%zmm" #r2 "\n\t"
#define STORE_(r) "vmovdqa64 %%zmm" #r ", 64*" #r "(%[acc])\n\t"
#define STORE4_(a, b, c, d) STORE_(a) STORE_(b) STORE_(c) STORE_(d)
__attribute__((noinline)) static void loop_groups_full(__m512i acc[GM][GN], const uint8_t *xp, size_t gs,
                                                       const uint8_t *wp, size_t ws, size_t steps)
{
    const size_t ws3 = 3 * ws, ws5 = 5 * ws, ws7 = 7 * ws;
    __asm__ volatile(
        ZERO4_(0, 1, 2, 3) ZERO4_(4, 5, 6, 7) ZERO4_(8, 9, 10, 11) ZERO4_(12, 13, 14, 15)
        ZERO4_(16, 17, 18, 19) ZERO4_(20, 21, 22, 23)
        "1:\n\t"
        "vmovdqa64 (%[xp]), %%zmm24\n\t"
        "vmovdqa64 (%[xp],%[gs],1), %%zmm25\n\t"
        "vmovdqa64 (%[xp],%[gs],2), %%zmm26\n\t"
        WROW_("(%[wp])", 27, 0, 8, 16)
        WROW_("(%[wp],%[ws],1)", 28, 1, 9, 17)
        WROW_("(%[wp],%[ws],2)", 29, 2, 10, 18)
        WROW_("(%[wp],%[ws3],1)", 30, 3, 11, 19)
        WROW_("(%[wp],%[ws],4)", 31, 4, 12, 20)
        WROW_("(%[wp],%[ws5],1)", 27, 5, 13, 21)
        WROW_("(%[wp],%[ws3],2)", 28, 6, 14, 22)
        WROW_("(%[wp],%[ws7],1)", 29, 7, 15, 23)
        "add $4, %[wp]\n\t"
        "add $64, %[xp]\n\t"
        "dec %[n]\n\t"
        "jnz 1b\n\t"
        STORE4_(0, 1, 2, 3) STORE4_(4, 5, 6, 7) STORE4_(8, 9, 10, 11) STORE4_(12, 13, 14, 15)
        STORE4_(16, 17, 18, 19) STORE4_(20, 21, 22, 23)
        : [xp] "+r"(xp), [wp] "+r"(wp), [n] "+r"(steps)
        : [acc] "r"(acc), [gs] "r"(gs), [ws] "r"(ws), [ws3] "r"(ws3), [ws5] "r"(ws5), [ws7] "r"(ws7)
        : "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
          "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20",
          "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31");
}
#undef ZERO_
#undef ZERO4_
#undef WROW_
#undef STORE_
#undef STORE4_

/* The full tile (GM groups × GN W rows): the assembly loop, then the outputs. */
static void tile_int8_groups_full(const qr_block *b, size_t t, size_t j, size_t c0, size_t c1, bool first,
                                  bool last)
{
    __m512i acc[GM][GN];
    loop_groups_full(acc, b->xg + QR_XG_OFFSET(b->k, t * QR_XG_ROWS, c0), QR_XG_OFFSET(b->k, QR_XG_ROWS, 0),
                     (const uint8_t *)b->w + j * b->w_stride + c0, b->w_stride, (c1 - c0) / 4);
    tile_groups_out(b, t, GM, j, GN, acc, first, last);
}

/* Groups t .. t+gm_-1 against the block's W rows GN at a time (then 4, 2, 1), over one K slice: every
 * shape compiled with constant bounds. */
#define GROUP_W_ROWS(gm_)                                                                                     \
    do {                                                                                                      \
        size_t j = 0;                                                                                         \
        for (; j + GN <= b->nr; j += GN) {                                                                  \
            if (gm_ == GM) tile_int8_groups_full(b, t, j, c0, c1, first, last);                              \
            else tile_int8_groups(b, t, gm_, j, GN, c0, c1, first, last);                                    \
        }                                                                                                     \
        if (j + 4 <= b->nr) tile_int8_groups(b, t, gm_, j, 4, c0, c1, first, last), j += 4;                  \
        if (j + 2 <= b->nr) tile_int8_groups(b, t, gm_, j, 2, c0, c1, first, last), j += 2;                  \
        if (j < b->nr) tile_int8_groups(b, t, gm_, j, 1, c0, c1, first, last);                               \
    } while (0)

/* The groups the block's X rows fall in, GM at a time, then the one or two left. */
INLINE void groups_slice(const qr_block *b, size_t c0, size_t c1, bool first, bool last)
{
    const size_t t_end = (b->x_row0 + b->m + QR_XG_ROWS - 1) / QR_XG_ROWS;
    size_t t = b->x_row0 / QR_XG_ROWS;
    for (; t + GM <= t_end; t += GM) GROUP_W_ROWS(GM);
    if (t + 2 <= t_end) {
        GROUP_W_ROWS(2);
        t += 2;
    }
    if (t < t_end) GROUP_W_ROWS(1);
}
#undef GROUP_W_ROWS

/* A GEMM block: from X in row groups when qr_matmul wrote them, else with the row tiles. */
INLINE void gemm_int8(const qr_block *b)
{
    if (b->xg) FOR_K_SLICES(b, groups_slice(b, c0, c1, first, last));
    else if (b->m <= QR_SMALL_ROWS) gemm_small_int8(b);
    else gemm_q8_int8(b);
}

static void block_q8_int8(const qr_block *b)
{
    if (!b->decode) gemm_int8(b);
    else if (b->x2) decode_q8_int8(b, b->x2, 1);
    else decode_q8_int8(b, NULL, 1); /* x2 a constant NULL: the lone rows' one-term loop */
}
/* The two-term decode without software prefetch (rows4_int8_body, and the lone rows of row_int8x2), for
 * cores that run 512-bit operations in halves, where with several threads (decode_regions) each thread
 * reads its run of W's rows as one stream of lone rows (two terms, the default there): faster there than
 * four-stream chunks claimed in turn, and slower with the lone rows' prefetch. F16 read as one stream was
 * slower and keeps its quarters inside the regions (docs/perf/2026-11-27-zen4.md, "Decode regions"). */
static void block_q8_int8_no_prefetch(const qr_block *b)
{
    if (!b->decode) gemm_int8(b);
    else if (b->x2) decode_q8_int8(b, b->x2, 0);
    else decode_q8_int8(b, NULL, 0); /* one term: quarters (one stream not measured) */
}

/* ---- X to int8: qr_quantize_x.h's rule sixteen lanes at a time ------------------------------------
 * The header's portable loop compiled to 128-bit operations with its lane arrays on the stack (gcc 12);
 * this is the same rule step for step: max|value| (vmaxps(a, m) is the header's a > m ? a : m, NaN
 * included), NaN/Inf found by !(a <= FLT_MAX), the binary32 division, the ±1.5·2²³ rounding, the clamp,
 * the integer's low byte XOR 0x80. test_matmul holds every variant's products (which start from these
 * bytes and scales) to the rule's bits, NaN, Inf, ties, subnormals and the 2⁻¹⁰⁰ floor included. */

/* Values c..c+15 of the row (lanes outside m: 0): x, or the residual x − s₁·q₁ of its first term
 * (binary32, multiply then subtract, as qr_qx_value). */
INLINE __m512 qx_values(const float *x, const uint8_t *q1, float s1, size_t c, __mmask16 m)
{
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + c);
    if (!q1) return xv;
    const __m128i q = _mm_xor_si128(_mm_maskz_loadu_epi8(m, q1 + c), _mm_set1_epi8((char)0x80));
    const __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
    return _mm512_maskz_sub_ps(m, xv, _mm512_mul_ps(_mm512_set1_ps(s1), qf));
}

INLINE __mmask16 qx_mask(size_t c, size_t cols)
{
    return c + 16 <= cols ? (__mmask16)0xffff : (__mmask16)((1u << (cols - c)) - 1u);
}

INLINE float quantize_unsigned(const float *x, const uint8_t *q1, float s1, size_t cols, size_t kpad, uint8_t *out)
{
    __m512 vmax = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (size_t c = 0; c < cols; c += 16) {
        const __m512 a = _mm512_abs_ps(qx_values(x, q1, s1, c, qx_mask(c, cols)));
        bad |= _mm512_cmp_ps_mask(a, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
        vmax = _mm512_max_ps(a, vmax);
    }
    const float amax = _mm512_reduce_max_ps(vmax);
    if (bad || amax < QM_Q8_ACT_FLOOR) {
        memset(out, 0x80, kpad);
        return bad ? NAN : 0.0f;
    }
    const float s = qm_q8_scale(amax);
    const __m512 sv = _mm512_set1_ps(s), magic = _mm512_set1_ps(QM_Q8_ROUND_MAGIC), qmax = _mm512_set1_ps(QM_Q8_QMAX);
    for (size_t c = 0; c < cols; c += 16) {
        const __mmask16 m = qx_mask(c, cols);
        __m512 r = _mm512_div_ps(qx_values(x, q1, s1, c, m), sv);
        r = _mm512_sub_ps(_mm512_add_ps(r, magic), magic);            /* qm_q8_round: nearest, ties to even */
        r = _mm512_max_ps(_mm512_min_ps(r, qmax), _mm512_set1_ps(-QM_Q8_QMAX));
        const __m128i b = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(r)); /* exact integers in [-127, 127] */
        _mm_mask_storeu_epi8(out + c, m, _mm_xor_si128(b, _mm_set1_epi8((char)0x80)));
    }
    memset(out + cols, 0x80, kpad - cols);
    return s;
}

static float quantize_x_unsigned(const float *x, size_t cols, size_t kpad, uint8_t *out)
{
    return quantize_unsigned(x, NULL, 0.0f, cols, kpad, out);
}

static float quantize_x_residual_unsigned(const float *x, const uint8_t *q1, float s1, size_t cols, size_t kpad, uint8_t *out)
{
    return quantize_unsigned(x, q1, s1, cols, kpad, out);
}

/* What the three AVX-512 tables share; each table below lists only what makes it differ (the F16 and
 * two-term decode loops, QR_ACT_AUTO's decode, decode regions), so the differences read at a glance. */
#define AVX512_SHARED                                                                       \
    .level = QM_CPU_AVX512, .block[QM_DTYPE_F32][QR_XK_FLOAT] = block_f32,                  \
    .block[QM_DTYPE_Q8_ROW][QR_XK_FLOAT] = block_q8_f32,                                    \
    .k_slice_bytes = QR_K_SLICE_BYTES, .x_groups = 1, .gemm_x2 = 1, .quantize_x = quantize_x_unsigned,  \
    .quantize_x_residual = quantize_x_residual_unsigned, .x_flip = 0x80

const qr_kernels qr_kernels_avx512 = {
    AVX512_SHARED,
    .name = "avx512-vnni",
    .block[QM_DTYPE_F16][QR_XK_FLOAT] = block_f16,
    .block[QM_DTYPE_Q8_ROW][QR_XK_INT8] = block_q8_int8,
    .auto_decode_terms = 0,
};

/* The same kernels for a core with full-width 512-bit units where widening does not keep up with memory
 * in a decode (Intel Xeon with AVX-512 FP16; runtime/README.md): QR_ACT_AUTO decodes in two int8 terms,
 * and the rest is the plain table's (software prefetch and chunks claimed in turn: the halves table's way,
 * without prefetch and in regions, is slower there). docs/perf/2026-11-28-intel-xeon.md has the
 * measurements. */
const qr_kernels qr_kernels_avx512_i8x2 = {
    AVX512_SHARED,
    .name = "avx512-vnni-i8x2",
    .block[QM_DTYPE_F16][QR_XK_FLOAT] = block_f16,
    .block[QM_DTYPE_Q8_ROW][QR_XK_INT8] = block_q8_int8,
    .auto_decode_terms = 2,
};

/* The same kernels tuned for a core that runs 512-bit operations as two 256-bit halves (AMD Zen 4).
 * There, widening Q8_ROW weights to float runs below the speed one core reads from memory, even from L1,
 * and QR_ACT_AUTO's decode in two terms is faster; on Zen 5 (full-width 512-bit units) widening is the
 * faster one, so the plain table keeps it (docs/perf/2026-11-25-zen4.md). And the two-term and F16 decodes
 * go without software prefetch (block_q8_int8_no_prefetch, block_f16_no_prefetch), and with several
 * threads a decode gives each thread its own run of W's rows (decode_regions), which the two-term loop
 * reads as one stream. The other tables keep the chunks claimed in turn that they were tuned with. */
const qr_kernels qr_kernels_avx512_halves = {
    AVX512_SHARED,
    .name = "avx512-vnni-2x256",
    .block[QM_DTYPE_F16][QR_XK_FLOAT] = block_f16_no_prefetch,
    .block[QM_DTYPE_Q8_ROW][QR_XK_INT8] = block_q8_int8_no_prefetch,
    .auto_decode_terms = 2,
    .decode_regions = 1,
};

#undef AVX512_SHARED
