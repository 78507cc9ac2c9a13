/* qr_attn_avx512.c — attention's inner loops with AVX-512 F/BW/VL (contract in qr_attn_kernels.h).
 * Compiled with those flags (mk/k.mk); only called after qr_attn.c saw them in cpuid and QMAP_CPU allows.
 *
 * The AVX2 file's loops at twice the width: 16 dims per vector, so a head of 64 dims is four steps of
 * every chain instead of eight, and a tail of hd % 16 dims goes through the same vector code with masked
 * loads (masked-off lanes load 0 and add 0) instead of a scalar loop. Each loop is instantiated for every
 * block height NR = 1..8, so its eight accumulators live in registers; a row's arithmetic is the same in
 * every instantiation (its own accumulator, the same lane tree), so a row's bits do not depend on the
 * block it ran in. The exponential is the AVX2 one's polynomial and steps, sixteen lanes at a time: the
 * same result per element. */
#include <immintrin.h>

#include "qr_attn_kernels.h"
#include "qr_kv.h"
#include "qr_exp_consts.h"

#define INLINE static inline __attribute__((always_inline))

INLINE __m512 load_f32(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
INLINE __m512 load_f16(const uint16_t *p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }

static inline __mmask16 first_lanes(size_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

/* Lane sums of eight accumulators at once: out[r] = Σ lanes of a[r] (halves added, then a tree). */
INLINE __m256 hsum8x16(const __m512 *a)
{
    __m256 h[8];
    for (int r = 0; r < 8; r++)
        h[r] = _mm256_add_ps(_mm512_castps512_ps256(a[r]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[r]), 1)));
    __m256 t0 = _mm256_hadd_ps(h[0], h[1]), t1 = _mm256_hadd_ps(h[2], h[3]);
    __m256 t2 = _mm256_hadd_ps(h[4], h[5]), t3 = _mm256_hadd_ps(h[6], h[7]);
    t0 = _mm256_hadd_ps(t0, t1);
    t2 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t2, 0x20), _mm256_permute2f128_ps(t0, t2, 0x31));
}

/* scores: NR rows × KJ = 16/NR keys per step, up to sixteen accumulators (r, j) (AVX-512 has 32
 * registers; eight chains, as AVX2 keeps, left the FMA units idle for the reduction at every step: 37
 * GFLOP/s on Zen 4 against 104 for wsum), each row r's dot with key t + j only, over the dims in steps
 * of 16 (the last one masked), then the same lane tree for every accumulator. */
#define DEFINE_SCORES(NAME, T, LOAD)                                                                         \
    /* keys [t, t + KJ) for rows [0, NR): accumulator r·KJ + j is row r's dot with key t + j */             \
    INLINE void NAME##_step(const float *const *q, const int NR, const int KJ, const T *k, size_t ld, size_t t, \
                            size_t hd, float scale, float *sc, size_t ldsc)                                  \
    {                                                                                                        \
        __m512 acc[16];                                                                                      \
        for (int a = 0; a < 16; a++) acc[a] = _mm512_setzero_ps();                                           \
        for (size_t d = 0; d < hd; d += 16) {                                                                \
            const __mmask16 m = first_lanes(hd - d);                                                         \
            for (int j = 0; j < KJ; j++) {                                                                   \
                __m512 kv = LOAD(k + (t + (size_t)j) * ld + d, m);                                           \
                for (int r = 0; r < NR; r++)                                                                 \
                    acc[r * KJ + j] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q[r] + d), kv, acc[r * KJ + j]); \
            }                                                                                                \
        }                                                                                                    \
        float s[16];                                                                                         \
        _mm256_storeu_ps(s, hsum8x16(acc));                                                                  \
        if (NR * KJ > 8) _mm256_storeu_ps(s + 8, hsum8x16(acc + 8));                                         \
        for (int r = 0; r < NR; r++)                                                                         \
            for (int j = 0; j < KJ; j++) sc[(size_t)r * ldsc + t + (size_t)j] = scale * s[r * KJ + j];       \
    }                                                                                                        \
    INLINE void NAME##_nr(const float *const *q, const int NR, const T *k, size_t ld, size_t nk, size_t hd,  \
                          float scale, float *sc, size_t ldsc)                                               \
    {                                                                                                        \
        const int KJ = 16 / NR;                                                                              \
        size_t t = 0;                                                                                        \
        for (; t + (size_t)KJ <= nk; t += (size_t)KJ) NAME##_step(q, NR, KJ, k, ld, t, hd, scale, sc, ldsc); \
        for (; t < nk; t++) NAME##_step(q, NR, 1, k, ld, t, hd, scale, sc, ldsc);                           \
    }                                                                                                        \
    QR_ATTN_SCORES_ENTRY(NAME, T)

/* scores_kt: the cache's keys, 16 to a group with the keys across the lanes (runtime/qr_kv.h): per group and
 * dim one load (and one F16 conversion) serves every row of the block, and a key's score is its own lane —
 * no lane sums. NR rows of one group per step, two chains (even and odd dims) each, 2·NR <= 16
 * accumulators. One group at a time (G = 1) reads the keys in address order, one stream: 2 or 4 groups a
 * step (more chains for a one-row block) interleave streams 2 KB apart and read a cache from memory
 * slower, and in cache the conversions bind a one-row block anyway (64 of ~2 cycles per group against 64
 * FMAs; docs/perf/2026-11-26-zen4.md, "Decode at a context depth"). A group the run covers only in part (a
 * window's first key, the newest key's group) goes the same way, its lanes copied out one by one
 * (QR_ATTN_KT_WALK). */
INLINE __m512 load16_f32(const float *p) { return _mm512_loadu_ps(p); }
INLINE __m512 load16_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
#define DEFINE_SCORES_KT(NAME, T, LOAD16)                                                                    \
    /* groups g0 .. g0+G-1 for rows 0 .. NR-1: out[r·G + g] = scale · (q[r] · the 16 keys of group g0 + g) */ \
    INLINE void NAME##_step(const float *const *q, const int NR, const T *kt, size_t hd, float scale, const int G, \
                            size_t g0, __m512 *out)                                                          \
    {                                                                                                        \
        __m512 a0[8], a1[8];                                                                                 \
        for (int i = 0; i < 8; i++) a0[i] = a1[i] = _mm512_setzero_ps();                                     \
        size_t d = 0;                                                                                        \
        for (; d + 2 <= hd; d += 2)                                                                          \
            for (int g = 0; g < G; g++) {                                                                    \
                const T *b = kt + ((g0 + (size_t)g) * hd + d) * QR_KV_GROUP;                                 \
                const __m512 k0 = LOAD16(b), k1 = LOAD16(b + QR_KV_GROUP);                                   \
                for (int r = 0; r < NR; r++) {                                                               \
                    a0[r * G + g] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d]), k0, a0[r * G + g]);             \
                    a1[r * G + g] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d + 1]), k1, a1[r * G + g]);         \
                }                                                                                            \
            }                                                                                                \
        if (d < hd)                                                                                          \
            for (int g = 0; g < G; g++) {                                                                    \
                const __m512 k0 = LOAD16(kt + ((g0 + (size_t)g) * hd + d) * QR_KV_GROUP);                    \
                for (int r = 0; r < NR; r++)                                                                 \
                    a0[r * G + g] = _mm512_fmadd_ps(_mm512_set1_ps(q[r][d]), k0, a0[r * G + g]);             \
            }                                                                                                \
        for (int i = 0; i < NR * G; i++) out[i] = _mm512_mul_ps(_mm512_set1_ps(scale), _mm512_add_ps(a0[i], a1[i])); \
    }                                                                                                        \
    INLINE void NAME##_nr(const float *const *q, const int NR, const T *kt, size_t s0, size_t n, size_t hd,  \
                          float scale, float *sc, size_t ldsc)                                               \
    {                                                                                                        \
        const int G = 1;                                                                                     \
        QR_ATTN_KT_WALK(QR_KV_GROUP, G, NR, __m512, 8, NAME##_step, (q, NR, kt, hd, scale), _mm512_storeu_ps, s0, n, \
                        sc, ldsc);                                                                           \
    }                                                                                                        \
    QR_ATTN_SCORES_KT_ENTRY(NAME, T)

/* wsum: NR rows × CP = 8/NR chunks of 16 dims per pass, eight accumulators. Each (row, dim) is
 * o + Σ_t p·v in key order, whatever NR and CP are; the last chunk of a row is masked. A pass is
 * instantiated for its chunk count NC as well as NR (QR_ATTN_BY_CHUNKS), so that its accumulators live in
 * registers: with NC a run-time bound, gcc kept them on the stack, and every multiply-add of a one-row
 * block (decode without GQA) went through a store and a reload; instantiated, the cached case runs about
 * twice as fast, with the same bits (docs/perf/2026-11-26-zen4.md, "Decode at a context depth"). */
#define DEFINE_WSUM(NAME, T, LOAD)                                                                           \
    INLINE void NAME##_pass(const float *p, size_t ldp, const int NR, const int NC, const T *v, size_t ld,    \
                            size_t nk, size_t hd, size_t c0, float *const *o)                                \
    {                                                                                                        \
        __m512 acc[8];                                                                                       \
        __mmask16 m[8];                                                                                      \
        for (int c = 0; c < NC; c++) m[c] = first_lanes(hd - 16 * (c0 + (size_t)c));                        \
        for (int r = 0; r < NR; r++)                                                                         \
            for (int c = 0; c < NC; c++) acc[r * NC + c] = _mm512_maskz_loadu_ps(m[c], o[r] + 16 * (c0 + (size_t)c)); \
        for (size_t t = 0; t < nk; t++) {                                                                    \
            for (int c = 0; c < NC; c++) {                                                                   \
                __m512 vv = LOAD(v + t * ld + 16 * (c0 + (size_t)c), m[c]);                                  \
                for (int r = 0; r < NR; r++)                                                                 \
                    acc[r * NC + c] = _mm512_fmadd_ps(_mm512_set1_ps(p[(size_t)r * ldp + t]), vv, acc[r * NC + c]); \
            }                                                                                                \
        }                                                                                                    \
        for (int r = 0; r < NR; r++)                                                                         \
            for (int c = 0; c < NC; c++) _mm512_mask_storeu_ps(o[r] + 16 * (c0 + (size_t)c), m[c], acc[r * NC + c]); \
    }                                                                                                        \
    INLINE void NAME##_nr(const float *p, size_t ldp, const int NR, const T *v, size_t ld, size_t nk, size_t hd, \
                          float *const *o)                                                                   \
    {                                                                                                        \
        const int CP = 8 / NR;                                                                               \
        const size_t chunks = (hd + 15) / 16;                                                                \
        for (size_t c0 = 0; c0 < chunks; c0 += (size_t)CP) {                                                 \
            const int nc = chunks - c0 < (size_t)CP ? (int)(chunks - c0) : CP;                               \
            QR_ATTN_BY_CHUNKS(nc, NR, NAME##_pass, (p, ldp), (v, ld, nk, hd, c0, o))                     \
        }                                                                                                    \
    }                                                                                                        \
    QR_ATTN_WSUM_ENTRY(NAME, T)

DEFINE_SCORES(scores_f32, float, load_f32)
DEFINE_SCORES_KT(scores_kt_f32, float, load16_f32)
DEFINE_SCORES_KT(scores_kt_f16, uint16_t, load16_f16)
DEFINE_WSUM(wsum_f32, float, load_f32)
DEFINE_WSUM(wsum_f16, uint16_t, load_f16)

/* e^x for x <= 0 (or -inf), sixteen lanes: qr_exp_avx2.h's reduction, polynomial and exponent build, step
 * for step, with the same constants (qr_exp_consts.h; its comment has the method and the 2 ulp bound). */
INLINE __m512 exp16(__m512 x)
{
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(QR_EXP_UNDER), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_set1_ps(QR_EXP_OVER), x);   /* min(c, NaN) is NaN: NaN passes through */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(QR_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(QR_EXP_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(QR_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(QR_EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(QR_EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(QR_EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(QR_EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(QR_EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(QR_EXP_P5));
    __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    y = _mm512_mul_ps(y, _mm512_castsi512_ps(e));
    return _mm512_maskz_mov_ps((__mmask16)~under, y);
}

static void exp_sub(float *s, size_t n, float m)
{
    const __m512 vm = _mm512_set1_ps(m);
    for (size_t t = 0; t < n; t += 16) { /* the tail through the same code: every element, the same function */
        const __mmask16 k = first_lanes(n - t);
        _mm512_mask_storeu_ps(s + t, k, exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(vm, k, s + t), vm)));
    }
}

const qr_attn_kernels qr_attn_kernels_avx512 = { scores_f32, scores_kt_f32, scores_kt_f16,
                                                 wsum_f32,   wsum_f16,      exp_sub };
