/* qr_kernels.h — the inner kernels behind qr_matmul, one table per instruction set (internal).
 *
 * A variant computes one block of Y = X·Wᵀ: m rows of X against nr rows of W, every X row against every
 * W row, walking register tiles inside the block. qr_matmul.c chooses the blocks (cache tiling and the
 * split between threads); the variant only has to be fast on a block whose W part sits in L2.
 *
 * Variants: qr_kernels_ref.c (portable C, the reference every other variant is tested against),
 * qr_kernels_avx2.c (AVX2 + FMA + F16C), qr_kernels_avx512.c (AVX-512 F/BW/VL + VNNI), each compiled
 * with its own flags and only called after qr_kernels_for() checked the CPU.
 */
#ifndef QR_KERNELS_H
#define QR_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "qm_cpu.h"
#include "qr_matmul.h"

/* One block. Pointers are already offset to the block's first X row, W row and Y element. */
typedef struct qr_block {
    const void *x;            /* float rows, or the int8 rows quantize_x wrote */
    size_t x_stride;          /* bytes between X rows */
    const float *x_scales;    /* int8 X: one scale per X row */
    const void *w;            /* W rows as in qr_matrix */
    size_t w_stride;          /* bytes between W rows */
    const float *w_scales;    /* Q8_ROW: one per W row */
    const int32_t *w_sums;    /* Q8_ROW: one per W row */
    size_t m, nr;             /* X rows, W rows in the block (>= 1) */
    size_t k;                 /* values per row: cols; for int8 X, cols rounded up to 64 */
    float *y;                 /* Y[i][r] at y[i·y_stride + r] */
    size_t y_stride;          /* floats */
    int decode;               /* the whole product has one X row (then m = 1): a variant may use another
                               * float summation order, the same in every block, to stream W faster */
    int one_stream;           /* decode only: the block is this thread's next piece of its own run of W rows
                               * (qr_kernels.decode_regions), and its next block starts where this one ends,
                               * so the variant may read the rows in order as one stream */
    const void *x2;           /* q8_int8 with decode, or a GEMM of at most QR_SMALL_ROWS X rows on a variant
                               * with gemm_x2: the second int8 term of X (QR_ACT_INT8X2), same encoding and
                               * stride, or NULL. Y = t₁ + t₂, each tᵢ = ((float)dᵢ·sᵢ)·scale_r as for one
                               * term (the bits of adding two one-term products), so W is read once for both */
    const float *x2_scales;   /* its scales (one per X row) */
    const uint8_t *xg;        /* q8_int8 GEMM (not decode) of a variant with x_groups: this term's int8 X of
                               * the whole product in groups of QR_XG_ROWS rows (QR_XG_OFFSET), else NULL */
    size_t x_row0;            /* with xg: the row of the whole X that x, x_scales and y start at */
} qr_block;

/* X in row groups (qr_kernels.x_groups): rows 16t .. 16t+15 of an int8 X with rows of kpad bytes are
 * group t, kpad·16 bytes from the groups' start; in it, bytes 4g .. 4g+3 of row 16t+l lie at 64g + 4l.
 * One 64-byte vector then holds the next 4 columns of 16 rows. Rows past the last of X are zero. */
#define QR_XG_ROWS 16
#define QR_XG_OFFSET(kpad, row, col)                                                                            \
    (((row) / QR_XG_ROWS) * QR_XG_ROWS * (kpad) + ((col) / 4) * 64 + ((row) % QR_XG_ROWS) * 4 + (col) % 4)

/* A GEMM of at most this many X rows (every count below one row group: a batch's decode step of up to 15
 * sequences) may take both int8 terms in one block (qr_kernels.gemm_x2): its int8 X, both terms, stays in
 * cache while each tile of W rows is read from memory once and meets all of it, so W is read once for every
 * row and term (docs/perf/2026-11-28-zen4-small-gemm.md). */
#define QR_SMALL_ROWS (QR_XG_ROWS - 1)

typedef void qr_block_fn(const qr_block *b);

/* The kinds of X a block kernel takes, qr_kernels.block's second index: float rows as given, or the int8
 * rows (one term each) that qr_kernels.quantize_x writes. */
typedef enum qr_xkind {
    QR_XK_FLOAT = 0,
    QR_XK_INT8 = 1,
    QR_XK_COUNT
} qr_xkind;
#define QR_XK_BIT(xk) (1u << (xk))

/* The SIMD variants' decode loops prefetch W into L2 (hint T1), QR_PREFETCH4_BYTES ahead in each of four
 * streams and QR_PREFETCH_BYTES ahead of a lone row; -DQR_NO_PREFETCH drops it, -DQR_PREFETCH_HINT=,
 * -DQR_PREFETCH_BYTES=, -DQR_PREFETCH4_BYTES= to measure again (qr_kernels_avx512.c has the measurements).
 * Only for files that include immintrin.h. */
#ifndef QR_PREFETCH_BYTES
#define QR_PREFETCH_BYTES 4096
#endif
#ifndef QR_PREFETCH4_BYTES
#define QR_PREFETCH4_BYTES 2048
#endif
#ifndef QR_PREFETCH_HINT
#define QR_PREFETCH_HINT _MM_HINT_T1
#endif
#ifdef QR_NO_PREFETCH
#define QR_PREFETCH(p) ((void)(p))
#else
#define QR_PREFETCH(p) _mm_prefetch((p), QR_PREFETCH_HINT)
#endif

/* Decode (qr_block.decode) walks a block's W rows as four streams, the quarters of the block side by side
 * (row i of each quarter together, ROW4(i)), then the 0-3 rows left over one by one (ROW1(r)); blocks whose
 * quarters are shorter than QR_STREAM_MIN_BYTES go row by row. The SIMD variants share this walk. A
 * threshold above 256 KiB leaves too many of a model's blocks to one stream
 * (docs/perf/2026-11-28-source-comments.md). */
#ifndef QR_STREAM_MIN_BYTES
#define QR_STREAM_MIN_BYTES (16u << 10)
#endif
#define QR_DECODE_QUARTERS(b, q_, ROW4, ROW1)                                                                   \
    do {                                                                                                      \
        const size_t q_ = (b)->nr / 4 * (b)->w_stride >= QR_STREAM_MIN_BYTES ? (b)->nr / 4 : 0;              \
        for (size_t i = 0; i < q_; i++) ROW4(i);                                                              \
        for (size_t r = 4 * q_; r < (b)->nr; r++) ROW1(r);                                                    \
    } while (0)

/* decode_float of a SIMD file: a float decode block (F32, F16, Q8_ROW widened; `scaled`: times the row's
 * scale) walked by QR_DECODE_QUARTERS through that file's rows4_float and row_float, which have the same
 * names and parameters in every file and its own vector types. `pf` = 0 drops their software prefetch. */
#define QR_FLOAT_ROW4_(i)                                                                                     \
    do {                                                                                                      \
        size_t r_[4];                                                                                         \
        const void *wr_[4];                                                                                   \
        float s_[4];                                                                                          \
        for (int u_ = 0; u_ < 4; u_++) {                                                                      \
            r_[u_] = (size_t)u_ * q + (i);                                                                    \
            wr_[u_] = (const uint8_t *)b->w + r_[u_] * b->w_stride;                                           \
        }                                                                                                     \
        rows4_float((const float *)b->x, wr_, b->k, load_w, load_w_tail, w_size, pf, s_);                     \
        for (int u_ = 0; u_ < 4; u_++) b->y[r_[u_]] = scaled ? s_[u_] * b->w_scales[r_[u_]] : s_[u_];        \
    } while (0)
#define QR_FLOAT_ROW1_(r)                                                                                     \
    do {                                                                                                      \
        const float s_ = row_float((const float *)b->x, (const uint8_t *)b->w + (r) * b->w_stride, b->k,      \
                                   load_w, load_w_tail, w_size, pf);                                          \
        b->y[r] = scaled ? s_ * b->w_scales[r] : s_;                                                          \
    } while (0)
#define QR_DEFINE_DECODE_FLOAT                                                                                \
    static inline __attribute__((always_inline)) void decode_float(const qr_block *b, load_w_fn *load_w,     \
                                                                   load_w_tail_fn *load_w_tail, int scaled,   \
                                                                   const int w_size, const int pf)            \
    {                                                                                                         \
        QR_DECODE_QUARTERS(b, q, QR_FLOAT_ROW4_, QR_FLOAT_ROW1_);                                             \
    }

/* The widest K slice of any variant (qr_kernels.k_slice_bytes): the AVX-512 variant's. */
#define QR_K_SLICE_BYTES 4096

struct qr_kernels {
    const char *name;
    qm_cpu_level level;
    /* The block kernel of each (W dtype, kind of X), as ggml's type_traits_cpu: [QM_DTYPE_F32][QR_XK_FLOAT]
     * F32 W, [QM_DTYPE_F16][QR_XK_FLOAT] F16 W, [QM_DTYPE_Q8_ROW][QR_XK_FLOAT] Q8_ROW W widened in
     * registers, [QM_DTYPE_Q8_ROW][QR_XK_INT8] Q8_ROW W against X from quantize_x ("q8_int8" below). The
     * portable table has a kernel for each pair a dtype's row lists (qr_dtype_traits.x_kinds), NULL
     * elsewhere; another may leave a float-X pair NULL, and qr_matmul then runs the portable kernel. */
    qr_block_fn *block[QM_DTYPE_ID_LIMIT][QR_XK_COUNT];
    /* q8_int8 multiplies a GEMM block whose rows are longer than this many bytes in K slices of at most
     * this width, so only a slice of the block needs to stay in cache, and qr_matmul sizes its int8
     * blocks by it; 0: rows are never sliced. At most QR_K_SLICE_BYTES. */
    size_t k_slice_bytes;
    /* The int8 terms of X that QR_ACT_AUTO uses when X has one row (decode): 0 widens W to float in
     * registers, 2 splits X into two int8 terms (the same float-X accuracy, two vpdpbusd per 64 weights
     * against about 12 instructions for widening) where widening cannot keep up with memory. */
    int auto_decode_terms;
    /* Non-zero: with more than one thread, a decode gives each thread its own contiguous run of every
     * product's W rows, taken from the front in pieces that follow one another (qr_pool_run_regions),
     * and marks its blocks one_stream (the AVX-512 two-term loop then reads them as one stream). Zero: a
     * decode's rows go out in chunks the threads claim in turn. */
    int decode_regions;
    /* Non-zero: q8_int8 multiplies GEMM blocks (at least QR_XG_ROWS X rows in the product; fewer go
     * through its row tiles) from X in row groups (qr_block.xg), which qr_matmul then writes beside the
     * rows quantize_x leaves. */
    int x_groups;
    /* Non-zero: q8_int8 takes both int8 terms of a GEMM of at most QR_SMALL_ROWS X rows in one block
     * (qr_block.x2), instead of qr_matmul running the block once per term and adding. */
    int gemm_x2;
    /* Quantize one X row of `cols` floats into kpad (multiple of 64, >= cols) bytes of this variant's
     * int8 encoding (signed, or signed + 128 for VNNI's unsigned operand; the padding encodes 0) and
     * return its scale (0 for an all-zero row, NaN if the row holds NaN or Inf). The int8 values are
     * the same in every variant (qr_quantize_x.h). */
    float (*quantize_x)(const float *x, size_t cols, size_t kpad, uint8_t *out);
    /* The same rule applied to the residual x − s1·q1 of a row quantize_x turned into (q1, s1): the
     * second int8 term of QR_ACT_INT8X2. */
    float (*quantize_x_residual)(const float *x, const uint8_t *q1, float s1, size_t cols, size_t kpad, uint8_t *out);
    /* The byte quantize_x XORs into each int8 value (qr_quantize_x.h's flip): 0, or 0x80 for VNNI's
     * unsigned operand. qr_matmul writes a tensor-parallel part of X by the portable rule with it. */
    uint8_t x_flip;
};

/* qr_kernels_avx512 widens in a decode (AMD Zen 5), qr_kernels_avx512_i8x2 decodes in two int8 terms
 * (Intel), qr_kernels_avx512_halves in two terms without prefetch and in regions (AMD Zen 4). */
extern const qr_kernels qr_kernels_ref, qr_kernels_avx2, qr_kernels_avx512, qr_kernels_avx512_i8x2,
    qr_kernels_avx512_halves;

#endif /* QR_KERNELS_H */
