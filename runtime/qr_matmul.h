/* qr_matmul.h — Y = X·Wᵀ over weights read in place (F32, F16, Q8_ROW), one kernel variant per ISA.
 *
 * W is a rows × cols matrix viewed where it lies — normally inside a mapped container — and is never
 * converted into a copy: F16 halves and Q8_ROW int8 values are widened or multiplied in registers.
 * X is n × cols float32 (n = 1 is the matrix-vector product of one decode step), Y is n × rows.
 *
 * Ownership: the caller owns every buffer. A call allocates nothing; the only scratch it needs (for
 * Q8_ROW with int8 activations: the int8 copies of X — with 16 X rows or more, each also in groups of
 * 16 rows for the AVX-512 GEMM — and, with two terms, a float block per thread) lives in the caller's
 * `work` buffer of qr_matmul_work_size() bytes, so a model sizes it once for its largest batch and
 * thread count. Y must not overlap W, X or the work buffer.
 *
 * Errors come back as a qm_status: QM_ERR_INVALID_ARGUMENT for a bad view, stride, dtype or a work buffer
 * that is too small (nothing is written to Y then). There is no global state; a qr_kernels table is
 * immutable, so any number of threads may call these functions at once on their own buffers.
 *
 * Threads: the threads of opts->pool (runtime/qr_pool.h) share the rows of W, cut into a few chunks per
 * thread and claimed as threads come by (each chunk streams its own part of W and reuses every weight it
 * loads across all n rows of X), or the rows of X when W has too few rows; problems too small to pay for
 * spreading run on the calling thread. Without a pool every product runs on the calling thread.
 */
#ifndef QR_MATMUL_H
#define QR_MATMUL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qm_cpu.h"
#include "qm_error.h"
#include "qm_format.h"
#include "qm_reader.h"
#include "qr_pool.h"

/* A weight matrix where it lies. Row r of W starts at data + r·row_stride (bytes).
 * F32: row_stride >= 4·cols, data and row_stride multiples of 4. F16: row_stride >= 2·cols, data and
 * row_stride even. (Any view of a container tensor is: tensor data starts on the file's alignment.)
 * Q8_ROW (spec/FORMAT.md 6.1): row_stride = align_up(cols, 64), the padding bytes of each row are zero,
 * values are in [-127, 127]; scales[r] and row_sums[r] as the spec defines them. A -128, non-zero
 * padding or a wrong row sum (a file that breaks the spec) gives wrong numbers, never a fault. */
typedef struct qr_matrix {
    qm_dtype dtype;          /* a dtype of the runtime's table (qr_dtype.h): F32, F16 or Q8_ROW */
    size_t rows, cols;       /* both >= 1 */
    const void *data;
    size_t row_stride;
    const float *scales;     /* Q8_ROW only: rows values */
    const int32_t *row_sums; /* Q8_ROW only: rows values */
} qr_matrix;

/* Rows first .. first + count of w as a matrix of their own: a view (nothing copied) — one layer of a
 * stack, or the q / kv parts of a fused projection. first + count <= w->rows, count >= 1. */
qr_matrix qr_matrix_rows(const qr_matrix *w, size_t first, size_t count);

/* View tensor `t` of the open file `f` as a matrix: cols = last dim, rows = product of the others
 * (rank 1 is one row). QM_ERR_TYPE_MISMATCH if its dtype has no row in qr_dtype.h (F32/F16/Q8_ROW; the
 * message names the tensor). */
qm_status qr_matrix_from_tensor(const qm_file *f, const qm_tensor *t, qr_matrix *out, qm_error *err);

/* How a Q8_ROW product treats X.
 * QR_ACT_INT8: each row of X is quantized on the fly to int8 with one scale (amax/127, round to nearest
 *   even, as spec 6.1 does for weights) and the dot products run on integers (AVX-512 VNNI vpdpbusd,
 *   AVX2 maddubs): the fastest GEMM, but adds X's rounding error (runtime/README.md has both).
 * QR_ACT_INT8X2: X as two int8 terms, X ≈ s₁q₁ + s₂q₂, the second quantizing the residual X − s₁q₁ by
 *   the same rule (so s₂ <= s₁/254); both run through the integer kernels and are added. Twice the int8
 *   work, about 250x less activation error than QR_ACT_INT8: float-X accuracy at half int8 speed (faster than QR_ACT_F32).
 * QR_ACT_F32: int8 weights are widened to float in registers and multiplied with X as given: only
 *   the weights' own quantization error remains. Also used whenever cols > QR_INT8_MAX_COLS.
 * QR_ACT_AUTO (the default): float-X accuracy, the faster way: QR_ACT_INT8X2 when n > 1, where the
 *   product is bound by arithmetic; when n = 1, where it should be bound by memory bandwidth, what the
 *   variant says (qr_kernels.auto_decode_terms): QR_ACT_F32 where widening keeps up with memory, or
 *   QR_ACT_INT8X2 where it does not (AVX2; AVX-512 on a core that runs 512-bit operations in two halves, Zen 4).
 *   QR_ACT_INT8 is the opt-in for speed over accuracy.
 * Ignored for F32/F16 weights. */
typedef enum qr_act {
    QR_ACT_AUTO = 0,
    QR_ACT_INT8 = 1,
    QR_ACT_F32 = 2,
    QR_ACT_INT8X2 = 3,
} qr_act;

/* Above this row length an int32 dot of int8 values could overflow; QR_ACT_F32 is used instead. */
#define QR_INT8_MAX_COLS ((size_t)1 << 17)

/* One kernel variant: a table of functions for one instruction set (opaque; see qr_kernels.h). */
typedef struct qr_kernels qr_kernels;

typedef struct qr_matmul_opts {
    qr_pool *pool;           /* the threads to run on; NULL: the calling thread only */
    qr_act act;              /* Q8_ROW only; QR_ACT_AUTO = 0 */
    const qr_kernels *kernels; /* the variant when a call passes k = NULL; NULL: qr_kernels_get() on every
                              * call (which reads QMAP_CPU each time). A session sets it once. */
    bool row_invariant;      /* every row of X gives the bits it gives in a product of any other row count:
                              * a one-row float product is summed as a GEMM's rows are (not in the decode
                              * order), and QR_ACT_AUTO takes two int8 terms at n = 1 too. For a batch of
                              * sequences (runtime/qr_model.h), whose row count is not a sequence's business */
    /* Tensor parallel (runtime/qr_shard.h): X holds this process's part of each row's columns and W the
     * same columns, and int8 X must be the whole row's (so the parts' products add up to one process's).
     * Called when X is quantized, once per int8 term, with n values: this part's max|x| of each row (+Inf
     * for a row holding NaN or Inf); it replaces each by the max over every part of the row and returns 0.
     * Every part must make the same calls. Non-zero fails the product (QM_ERR_IO, nothing defined in Y).
     * NULL: X's rows are whole. */
    int (*x_amax_reduce)(void *ctx, float *amax, size_t n);
    void *x_amax_ctx;
} qr_matmul_opts;

/* The int8 terms a product of n rows of X by w runs with: 0 (float X: F32/F16 weights, QR_ACT_F32, rows
 * longer than QR_INT8_MAX_COLS, or an n = 1 product the variant widens), 1 or 2. What qr_matmul does for
 * the same arguments; for counting the work done (qmap bench). */
int qr_matmul_int8_terms(const qr_matrix *w, size_t n, const qr_matmul_opts *opts);

/* The widest variant this CPU runs, capped by QMAP_CPU (format/qm_cpu.h). Never NULL. */
const qr_kernels *qr_kernels_get(void);
/* The variant of `level`, or NULL if this build or this CPU lacks it (tests and benchmarks). The AVX-512
 * variant needs AVX-512 F+BW+VL+VNNI; the AVX2 variant AVX2+FMA+F16C. */
const qr_kernels *qr_kernels_for(qm_cpu_level level);
/* "generic", "avx2", "avx512-vnni" (AMD Zen 5 and later: QR_ACT_AUTO decodes by widening W to float),
 * "avx512-vnni-i8x2" (the same kernels for Intel: QR_ACT_AUTO decodes in two int8 terms) or
 * "avx512-vnni-2x256" (for a core that runs 512-bit operations in halves, AMD Zen 4: two terms, and the
 * two-term and F16 decodes go without software prefetch and in regions). */
const char *qr_kernels_name(const qr_kernels *k);

/* Bytes of work buffer qr_matmul needs for n rows of X against w with these opts (0 when it needs none:
 * F32, F16, QR_ACT_F32; SIZE_MAX if the size overflows, which qr_matmul then refuses). QR_ACT_AUTO is
 * sized as QR_ACT_INT8X2, with n = 1 too, whichever way the variant decodes. For QR_ACT_INT8X2 it
 * depends on the pool's thread count too (a scratch block per thread). */
size_t qr_matmul_work_size(const qr_matrix *w, size_t n, const qr_matmul_opts *opts);

/* Y[i][r] = Σ_c X[i][c]·W[r][c] for i < n, r < w->rows. X row i starts at x + i·ldx floats (ldx >= cols),
 * Y row i at y + i·ldy floats (ldy >= rows). `k` = NULL means opts->kernels, or qr_kernels_get() when
 * that is NULL too; opts = NULL means { no pool, QR_ACT_AUTO, NULL }. n = 0 is allowed and does nothing.
 * Accuracy (tests/unit/test_matmul.c holds it): F32/F16 and Q8_ROW with QR_ACT_F32 are within
 * (cols+2)·2⁻²⁴·Σ_c|W[r][c]·X[i][c]| of the exact product of the stored weights (any summation order
 * has this bound). Q8_ROW with QR_ACT_INT8 equals ((float)d·s_i)·scale_r exactly, d the integer dot
 * of the int8 rows and s_i = max|X[i]|/127; against the exact product with X as given that is within
 * (s_i/2)·Σ_c|W[r][c]| + 2⁻²²·|Y[i][r]|.
 * Determinism: the result does not depend on the thread count or on how X is split into calls, except
 * that a float product with n = 1 (decode) may be summed in another order than the rows of a product
 * with n > 1, so the last bits can differ between the two (not with opts->row_invariant). Int8 products
 * (one or two terms, decode or not) are the same bits at every n, and the same in every kernel variant. */
qm_status qr_matmul(const qr_kernels *k, const qr_matrix *w, size_t n, const float *x, size_t ldx, float *y,
                    size_t ldy, void *work, size_t work_size, const qr_matmul_opts *opts);

/* The most matrices one qr_matmul_many call takes. */
#define QR_MATMUL_MAX_PARTS 4

/* Y_p = X·W_pᵀ for the `count` matrices w[0..count) (1 .. QR_MATMUL_MAX_PARTS) that read the same X:
 * Y_p row i at y[p] + i·ldy floats (ldy >= every w[p]->rows; the Y_p may be columns of one array, as q,
 * k and v of a layer are). Each Y_p is the same bits qr_matmul gives for w[p] alone. When the matrices
 * share dtype and row length they run as one job: X is quantized once and the pool's threads take one
 * hand-off instead of `count` (a layer's q/k/v and gate/up projections); otherwise they run one by one.
 * work: as for qr_matmul, sized for the largest of them. Errors as qr_matmul's (no Y written). */
qm_status qr_matmul_many(const qr_kernels *k, const qr_matrix *const *w, size_t count, size_t n, const float *x,
                         size_t ldx, float *const *y, size_t ldy, void *work, size_t work_size,
                         const qr_matmul_opts *opts);

/* y = W·x: qr_matmul with n = 1. */
qm_status qr_matvec(const qr_kernels *k, const qr_matrix *w, const float *x, float *y, void *work, size_t work_size,
                    const qr_matmul_opts *opts);

#endif /* QR_MATMUL_H */
