/* qr_attn_avx2.c — attention's inner loops with AVX2 + FMA + F16C (contract in qr_attn_kernels.h).
 * Compiled with -mavx2 -mfma -mf16c (mk/k.mk); only called after qr_attn.c checked the CPU.
 *
 * Each loop is instantiated for every block height NR = 1..8 (always_inline + a switch), so its eight
 * accumulators live in registers. A row's arithmetic is the same in every instantiation: its own
 * accumulator, the same lane tree, the same scalar tail. */
#include <immintrin.h>

#include "qm_half.h"
#include "qr_attn_kernels.h"
#include "qr_kv.h"
#include "qr_exp_avx2.h"

#define INLINE static inline __attribute__((always_inline))

INLINE __m256 load_f32(const float *p) { return _mm256_loadu_ps(p); }
INLINE __m256 load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
INLINE float elem_f32(const float *p) { return *p; }
INLINE float elem_f16(const uint16_t *p) { return qm_f16_to_f32(*p); }

/* Lane sums of eight accumulators at once: out[r] = Σ lanes of a[r]. */
INLINE __m256 hsum8(const __m256 *a)
{
    __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    t0 = _mm256_hadd_ps(t0, t1);
    t2 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t2, 0x20), _mm256_permute2f128_ps(t0, t2, 0x31));
}

/* scores: NR rows × KJ = 8/NR keys per step, so the eight accumulators always fill hsum8's tree and a single
 * row (multi-head attention) still has eight independent FMA chains. Accumulator (r, j) holds row r's dot
 * with key t + j only: the same chain, lane tree and tail whatever NR and KJ are. A step is instantiated
 * for its key count (KJ, or 1 for the keys left over): with the count a run-time bound, gcc kept the
 * accumulators on the stack (20 of the FMAs read their accumulator from memory). */
#define DEFINE_SCORES(NAME, T, LOAD, ELEM)                                                                   \
    /* keys [t, t + KJ) for rows [0, NR): accumulator r·KJ + j is row r's dot with key t + j */             \
    INLINE void NAME##_step(const float *const *q, const int NR, const int KJ, const T *k, size_t ld, size_t t, \
                            size_t hd, float scale, float *sc, size_t ldsc)                                  \
    {                                                                                                        \
        const size_t hd8 = hd & ~(size_t)7;                                                                  \
        __m256 acc[8];                                                                                       \
        for (int a = 0; a < 8; a++) acc[a] = _mm256_setzero_ps();                                            \
        for (size_t d = 0; d < hd8; d += 8) {                                                                \
            for (int j = 0; j < KJ; j++) {                                                                   \
                __m256 kv = LOAD(k + (t + (size_t)j) * ld + d);                                              \
                for (int r = 0; r < NR; r++)                                                                 \
                    acc[r * KJ + j] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + d), kv, acc[r * KJ + j]);       \
            }                                                                                                \
        }                                                                                                    \
        float s[8];                                                                                          \
        _mm256_storeu_ps(s, hsum8(acc));                                                                     \
        for (int r = 0; r < NR; r++)                                                                         \
            for (int j = 0; j < KJ; j++) {                                                                   \
                const T *kt = k + (t + (size_t)j) * ld;                                                      \
                float x = s[r * KJ + j];                                                                     \
                for (size_t d = hd8; d < hd; d++) x += q[r][d] * ELEM(kt + d);                               \
                sc[(size_t)r * ldsc + t + (size_t)j] = scale * x;                                            \
            }                                                                                                \
    }                                                                                                        \
    INLINE void NAME##_nr(const float *const *q, const int NR, const T *k, size_t ld, size_t nk, size_t hd,  \
                          float scale, float *sc, size_t ldsc)                                               \
    {                                                                                                        \
        const int KJ = 8 / NR;                                                                               \
        size_t t = 0;                                                                                        \
        for (; t + (size_t)KJ <= nk; t += (size_t)KJ) NAME##_step(q, NR, KJ, k, ld, t, hd, scale, sc, ldsc); \
        for (; t < nk; t++) NAME##_step(q, NR, 1, k, ld, t, hd, scale, sc, ldsc);                           \
    }                                                                                                        \
    QR_ATTN_SCORES_ENTRY(NAME, T)

/* scores_kt: the cache's keys, 16 to a group with the keys across the lanes (runtime/qr_kv.h), here as two
 * halves of 8: per half-group and dim one load (and one F16 conversion) serves every row, and a key's score
 * is its own lane — no lane sums. At most 4 rows × H halves per step (2·rows·H <= 8 accumulators of the 16
 * registers; a block of 5-8 rows runs as 4 + the rest), H = 2 (one whole group) for 1-2 rows, 1 for more:
 * the groups are read in address order, as qr_attn_avx512.c explains; two chains (even and odd dims) per
 * key as the contract says. A half the run covers only in part goes the same way, its lanes copied out one
 * by one (QR_ATTN_KT_WALK). */
#define KT_HALF 8
INLINE __m256 load8_f32(const float *p) { return _mm256_loadu_ps(p); }
INLINE __m256 load8_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
#define DEFINE_SCORES_KT(NAME, T, LOAD8)                                                                     \
    /* halves h0 .. h0+H-1 (slots 8·h ..), rows 0 .. NR-1: out[r·H + j] = scale · (q[r] · keys of half h0 + j) */ \
    INLINE void NAME##_step(const float *const *q, const int NR, const T *kt, size_t hd, float scale, const int H, \
                            size_t h0, __m256 *out)                                                          \
    {                                                                                                        \
        __m256 a0[4], a1[4];                                                                                 \
        for (int i = 0; i < 4; i++) a0[i] = a1[i] = _mm256_setzero_ps();                                     \
        size_t d = 0;                                                                                        \
        for (; d + 2 <= hd; d += 2)                                                                          \
            for (int j = 0; j < H; j++) {                                                                    \
                const size_t h = h0 + (size_t)j;                                                             \
                const T *b = kt + (h / 2 * hd + d) * QR_KV_GROUP + h % 2 * KT_HALF;                          \
                const __m256 k0 = LOAD8(b), k1 = LOAD8(b + QR_KV_GROUP);                                     \
                for (int r = 0; r < NR; r++) {                                                               \
                    a0[r * H + j] = _mm256_fmadd_ps(_mm256_broadcast_ss(q[r] + d), k0, a0[r * H + j]);       \
                    a1[r * H + j] = _mm256_fmadd_ps(_mm256_broadcast_ss(q[r] + d + 1), k1, a1[r * H + j]);   \
                }                                                                                            \
            }                                                                                                \
        if (d < hd)                                                                                          \
            for (int j = 0; j < H; j++) {                                                                    \
                const size_t h = h0 + (size_t)j;                                                             \
                const __m256 k0 = LOAD8(kt + (h / 2 * hd + d) * QR_KV_GROUP + h % 2 * KT_HALF);              \
                for (int r = 0; r < NR; r++)                                                                 \
                    a0[r * H + j] = _mm256_fmadd_ps(_mm256_broadcast_ss(q[r] + d), k0, a0[r * H + j]);       \
            }                                                                                                \
        for (int i = 0; i < NR * H; i++) out[i] = _mm256_mul_ps(_mm256_set1_ps(scale), _mm256_add_ps(a0[i], a1[i])); \
    }                                                                                                        \
    INLINE void NAME##_rows(const float *const *q, const int NR, const T *kt, size_t s0, size_t n, size_t hd, \
                            float scale, float *sc, size_t ldsc)                                             \
    {                                                                                                        \
        const int H = NR <= 2 ? 2 : 1;                                                                       \
        QR_ATTN_KT_WALK(KT_HALF, H, NR, __m256, 4, NAME##_step, (q, NR, kt, hd, scale), _mm256_storeu_ps, s0, n, \
                        sc, ldsc);                                                                           \
    }                                                                                                        \
    INLINE void NAME##_nr(const float *const *q, const int NR, const T *kt, size_t s0, size_t n, size_t hd,  \
                          float scale, float *sc, size_t ldsc)                                               \
    {                                                                                                        \
        NAME##_rows(q, NR <= 4 ? NR : 4, kt, s0, n, hd, scale, sc, ldsc);                                    \
        if (NR > 4) NAME##_rows(q + 4, NR > 4 ? NR - 4 : 1, kt, s0, n, hd, scale, sc + 4 * ldsc, ldsc);      \
    }                                                                                                        \
    QR_ATTN_SCORES_KT_ENTRY(NAME, T)

/* wsum: NR rows × CP = 8/NR chunks of 8 dims per pass: again eight independent accumulators. Each (row, dim)
 * is o + Σ_t p·v in key order, whatever NR and CP are. */
/* A pass is instantiated for its chunk count NC as well as NR (QR_ATTN_BY_CHUNKS), so that its accumulators
 * live in registers (with NC a run-time bound gcc kept them on the stack: qr_attn_avx512.c;
 * docs/perf/2026-11-26-zen4.md). */
#define DEFINE_WSUM(NAME, T, LOAD, ELEM)                                                                     \
    INLINE void NAME##_pass(const float *p, size_t ldp, const int NR, const int NC, const T *v, size_t ld,    \
                            size_t nk, size_t d0, float *const *o)                                           \
    {                                                                                                        \
        __m256 acc[8];                                                                                       \
        for (int r = 0; r < NR; r++)                                                                         \
            for (int c = 0; c < NC; c++) acc[r * NC + c] = _mm256_loadu_ps(o[r] + d0 + 8 * (size_t)c);      \
        for (size_t t = 0; t < nk; t++) {                                                                    \
            for (int c = 0; c < NC; c++) {                                                                   \
                __m256 vv = LOAD(v + t * ld + d0 + 8 * (size_t)c);                                           \
                for (int r = 0; r < NR; r++)                                                                 \
                    acc[r * NC + c] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + (size_t)r * ldp + t), vv, acc[r * NC + c]); \
            }                                                                                                \
        }                                                                                                    \
        for (int r = 0; r < NR; r++)                                                                         \
            for (int c = 0; c < NC; c++) _mm256_storeu_ps(o[r] + d0 + 8 * (size_t)c, acc[r * NC + c]);       \
    }                                                                                                        \
    INLINE void NAME##_nr(const float *p, size_t ldp, const int NR, const T *v, size_t ld, size_t nk, size_t hd, \
                          float *const *o)                                                                   \
    {                                                                                                        \
        const int CP = 8 / NR;                                                                               \
        const size_t hd8 = hd & ~(size_t)7;                                                                  \
        for (size_t d0 = 0; d0 < hd8; d0 += (size_t)CP * 8) {                                                \
            const int nc = (hd8 - d0) / 8 < (size_t)CP ? (int)((hd8 - d0) / 8) : CP;                        \
            QR_ATTN_BY_CHUNKS(nc, NR, NAME##_pass, (p, ldp), (v, ld, nk, d0, o))                         \
        }                                                                                                    \
        for (size_t d = hd8; d < hd; d++)                                                                    \
            for (int r = 0; r < NR; r++) {                                                                   \
                float x = o[r][d];                                                                           \
                for (size_t t = 0; t < nk; t++) x += p[(size_t)r * ldp + t] * ELEM(v + t * ld + d);          \
                o[r][d] = x;                                                                                 \
            }                                                                                                \
    }                                                                                                        \
    QR_ATTN_WSUM_ENTRY(NAME, T)

DEFINE_SCORES(scores_f32, float, load_f32, elem_f32)
DEFINE_SCORES_KT(scores_kt_f32, float, load8_f32)
DEFINE_SCORES_KT(scores_kt_f16, uint16_t, load8_f16)
DEFINE_WSUM(wsum_f32, float, load_f32, elem_f32)
DEFINE_WSUM(wsum_f16, uint16_t, load_f16, elem_f16)

static void exp_sub(float *s, size_t n, float m)
{
    const __m256 vm = _mm256_set1_ps(m);
    size_t t = 0;
    for (; t + 8 <= n; t += 8) _mm256_storeu_ps(s + t, qr_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + t), vm)));
    if (t < n) {   /* the tail through the same vector code, so every element gets the same function */
        float buf[8];
        size_t k = n - t;
        for (size_t i = 0; i < 8; i++) buf[i] = i < k ? s[t + i] : m;
        _mm256_storeu_ps(buf, qr_exp8(_mm256_sub_ps(_mm256_loadu_ps(buf), vm)));
        for (size_t i = 0; i < k; i++) s[t + i] = buf[i];
    }
}

const qr_attn_kernels qr_attn_kernels_avx2 = { scores_f32, scores_kt_f32, scores_kt_f16,
                                               wsum_f32,   wsum_f16,      exp_sub };
