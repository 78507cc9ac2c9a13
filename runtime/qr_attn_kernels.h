/* qr_attn_kernels.h — the two inner loops of attention, per instruction set (internal to qr_attn.c).
 *
 * qr_attn.c runs a block of up to QR_ATTN_MAX_ROWS query rows that share one KV head (the heads of a GQA
 * group, or several positions of one head) over a tile of consecutive keys, so every key and value row
 * loaded serves every row of the block:
 *   scores:    sc[r·ldsc + t] = scale · (q[r] · k[t])        r < nr, t < nk   (key rows: attention without a cache)
 *   scores_kt: sc[r·ldsc + i] = scale · (q[r] · k[s0 + i])   r < nr, i < n    (the cache's transposed keys)
 *   wsum:      o[r][d] += Σ_t p[r·ldp + t] · v[t][d]         (t in increasing order)
 *   exp_sub:   the softmax numerators of one row of a tile
 * Key/value row t starts at k + t·ld (ld >= hd elements: hd in the cache, the projection's row width for
 * rows given directly), F32 (scores: rows given directly are always F32) or F16. scores_kt reads the cache's
 * keys as runtime/qr_kv.h lays them out, a head at a time: key element d of slot s at
 * kt[((s / 16)·hd + d)·16 + s % 16], slots s0 .. s0+n-1. Its dot product is the same in every table entry
 * and block: dims in increasing order in two chains (even dims, odd dims), one lane per key, the chains
 * added, then scaled. A row's result depends only on its own inputs, never on nr or on the other rows of the
 * block, so any grouping gives the same bits.
 *
 * qr_attn.c holds the portable versions; qr_attn_avx2.c (AVX2 + FMA + F16C) and qr_attn_avx512.c (AVX-512
 * F/BW/VL), compiled with those flags by mk/k.mk, are chosen at run time, the widest the CPU has and
 * QMAP_CPU allows (format/qm_cpu.h). */
#ifndef QR_ATTN_KERNELS_H
#define QR_ATTN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define QR_ATTN_MAX_ROWS 8

typedef struct qr_attn_kernels {
    void (*scores_f32)(const float *const *q, size_t nr, const float *k, size_t ld, size_t nk, size_t hd, float scale,
                       float *sc, size_t ldsc);
    void (*scores_kt_f32)(const float *const *q, size_t nr, const float *kt, size_t s0, size_t n, size_t hd,
                          float scale, float *sc, size_t ldsc);
    void (*scores_kt_f16)(const float *const *q, size_t nr, const uint16_t *kt, size_t s0, size_t n, size_t hd,
                          float scale, float *sc, size_t ldsc);
    void (*wsum_f32)(const float *p, size_t ldp, size_t nr, const float *v, size_t ld, size_t nk, size_t hd,
                     float *const *o);
    void (*wsum_f16)(const float *p, size_t ldp, size_t nr, const uint16_t *v, size_t ld, size_t nk, size_t hd,
                     float *const *o);
    /* s[t] = exp(s[t] - m) for t < n (m finite; s[t] <= m or -inf, which gives 0). Within 2 ulp of the
     * exact exponential of the float difference (libm's expf in the portable table). */
    void (*exp_sub)(float *s, size_t n, float m);
} qr_attn_kernels;

/* For the SIMD files, which instantiate each loop for every block height: call FN(PRE..., h, POST...) with
 * the constant h = nr (1 .. QR_ATTN_MAX_ROWS; nr above 8 runs as 8, which the callers never pass). PRE and
 * POST are parenthesised argument lists. */
#define QR_ATTN_UNPAREN(...) __VA_ARGS__
#define QR_ATTN_BY_HEIGHT(nr, FN, PRE, POST)                                                                  \
    switch (nr) {                                                                                             \
    case 1: FN(QR_ATTN_UNPAREN PRE, 1, QR_ATTN_UNPAREN POST); break;                                          \
    case 2: FN(QR_ATTN_UNPAREN PRE, 2, QR_ATTN_UNPAREN POST); break;                                          \
    case 3: FN(QR_ATTN_UNPAREN PRE, 3, QR_ATTN_UNPAREN POST); break;                                          \
    case 4: FN(QR_ATTN_UNPAREN PRE, 4, QR_ATTN_UNPAREN POST); break;                                          \
    case 5: FN(QR_ATTN_UNPAREN PRE, 5, QR_ATTN_UNPAREN POST); break;                                          \
    case 6: FN(QR_ATTN_UNPAREN PRE, 6, QR_ATTN_UNPAREN POST); break;                                          \
    case 7: FN(QR_ATTN_UNPAREN PRE, 7, QR_ATTN_UNPAREN POST); break;                                          \
    default: FN(QR_ATTN_UNPAREN PRE, 8, QR_ATTN_UNPAREN POST); break;                                         \
    }

/* For the weighted-sum loops, which instantiate a pass for its chunk count as well as its height NR (so that
 * the accumulators stay in registers: qr_attn_avx512.c): call FN(PRE..., NR, nc, POST...) with nc as a
 * constant, 1 .. 8 (NR·nc <= 8; the other cases are dead code for that NR). */
#define QR_ATTN_BY_CHUNKS(nc, NR, FN, PRE, POST)                                                              \
    switch (nc) {                                                                                             \
    case 1: FN(QR_ATTN_UNPAREN PRE, NR, 1, QR_ATTN_UNPAREN POST); break;                                      \
    case 2: if (NR <= 4) FN(QR_ATTN_UNPAREN PRE, NR, 2, QR_ATTN_UNPAREN POST); break;                         \
    case 3: if (NR <= 2) FN(QR_ATTN_UNPAREN PRE, NR, 3, QR_ATTN_UNPAREN POST); break;                         \
    case 4: if (NR <= 2) FN(QR_ATTN_UNPAREN PRE, NR, 4, QR_ATTN_UNPAREN POST); break;                         \
    case 5: if (NR == 1) FN(QR_ATTN_UNPAREN PRE, NR, 5, QR_ATTN_UNPAREN POST); break;                         \
    case 6: if (NR == 1) FN(QR_ATTN_UNPAREN PRE, NR, 6, QR_ATTN_UNPAREN POST); break;                         \
    case 7: if (NR == 1) FN(QR_ATTN_UNPAREN PRE, NR, 7, QR_ATTN_UNPAREN POST); break;                         \
    default: if (NR == 1) FN(QR_ATTN_UNPAREN PRE, NR, 8, QR_ATTN_UNPAREN POST); break;                        \
    }

/* For the SIMD files' scores_kt: slots s0 .. s0+n-1 in blocks of W key lanes (W = 16 a group, 8 half of
 * one; block b holds slots W·b ..): STEP(PRE..., cnt, b, out) computes cnt blocks from b for the NR rows
 * into out[r·cnt + j] (VTYPE vectors of W floats, OUTN >= NR·G of them), STORE(p, v) stores one. G blocks
 * the run covers whole go straight to sc; a block it covers in part (a window's first key, the newest key's
 * block) is computed alone and its lanes in the run copied one by one. */
#define QR_ATTN_KT_WALK(W, G, NR, VTYPE, OUTN, STEP, PRE, STORE, s0, n, sc, ldsc)                             \
    do {                                                                                                      \
        const size_t end_ = (s0) + (n), b_end_ = (end_ + (W) - 1) / (W);                                      \
        VTYPE out_[OUTN];                                                                                     \
        size_t b_ = (s0) / (W);                                                                               \
        while (b_ < b_end_) {                                                                                 \
            const size_t first_ = b_ * (W);                                                                   \
            if (first_ >= (s0) && first_ + (size_t)(G) * (W) <= end_) {                                       \
                STEP(QR_ATTN_UNPAREN PRE, G, b_, out_);                                                       \
                for (int r_ = 0; r_ < (NR); r_++)                                                             \
                    for (int j_ = 0; j_ < (G); j_++)                                                          \
                        STORE((sc) + (size_t)r_ * (ldsc) + (first_ - (s0)) + (size_t)j_ * (W), out_[r_ * (G) + j_]); \
                b_ += (size_t)(G);                                                                            \
            } else {                                                                                          \
                STEP(QR_ATTN_UNPAREN PRE, 1, b_, out_);                                                       \
                const size_t lo_ = first_ > (s0) ? first_ : (s0), hi_ = first_ + (W) < end_ ? first_ + (W) : end_; \
                float tmp_[W];                                                                                \
                for (int r_ = 0; r_ < (NR); r_++) {                                                           \
                    STORE(tmp_, out_[r_]);                                                                    \
                    for (size_t x_ = lo_; x_ < hi_; x_++) (sc)[(size_t)r_ * (ldsc) + (x_ - (s0))] = tmp_[x_ - first_]; \
                }                                                                                             \
                b_++;                                                                                         \
            }                                                                                                 \
        }                                                                                                     \
    } while (0)

/* The table entries of a SIMD file: NAME(...) with the table's signature, calling NAME##_nr instantiated
 * for the block height. */
#define QR_ATTN_SCORES_KT_ENTRY(NAME, T)                                                                      \
    static void NAME(const float *const *q, size_t nr, const T *kt, size_t s0, size_t n, size_t hd, float scale, \
                     float *sc, size_t ldsc)                                                                  \
    {                                                                                                         \
        QR_ATTN_BY_HEIGHT(nr, NAME##_nr, (q), (kt, s0, n, hd, scale, sc, ldsc))                               \
    }
#define QR_ATTN_SCORES_ENTRY(NAME, T)                                                                         \
    static void NAME(const float *const *q, size_t nr, const T *k, size_t ld, size_t nk, size_t hd, float scale, \
                     float *sc, size_t ldsc)                                                                  \
    {                                                                                                         \
        QR_ATTN_BY_HEIGHT(nr, NAME##_nr, (q), (k, ld, nk, hd, scale, sc, ldsc))                               \
    }
#define QR_ATTN_WSUM_ENTRY(NAME, T)                                                                           \
    static void NAME(const float *p, size_t ldp, size_t nr, const T *v, size_t ld, size_t nk, size_t hd,       \
                     float *const *o)                                                                         \
    {                                                                                                         \
        QR_ATTN_BY_HEIGHT(nr, NAME##_nr, (p, ldp), (v, ld, nk, hd, o))                                         \
    }

extern const qr_attn_kernels qr_attn_kernels_avx2;
extern const qr_attn_kernels qr_attn_kernels_avx512;   /* AVX-512 F/BW/VL */
/* The portable table (tests compare the others with it). */
const qr_attn_kernels *qr_attn_kernels_generic(void);

#endif /* QR_ATTN_KERNELS_H */
