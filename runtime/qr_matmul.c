/* qr_matmul.c — argument checks, the int8 copy of X, cache blocking and the split between threads.
 * The arithmetic itself is in the variant's block kernels (qr_kernels.h). */
#include "qr_matmul.h"

#include <omp.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "qr_kernels.h"

/* ---- variant choice ------------------------------------------------------------------------- */

const qr_kernels *qr_kernels_for(qm_cpu_level level)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (level == QM_CPU_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")
                   ? &qr_kernels_avx512
                   : NULL;
    if (level == QM_CPU_AVX2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c")
                   ? &qr_kernels_avx2
                   : NULL;
#else
    if (level != QM_CPU_GENERIC) return NULL;
#endif
    return &qr_kernels_ref;
}

const qr_kernels *qr_kernels_get(void)
{
    /* An AVX-512 CPU without VNNI (Skylake-SP) runs the AVX2 kernels. */
    for (int level = (int)qm_cpu_level_get(); level > QM_CPU_GENERIC; level--) {
        const qr_kernels *k = qr_kernels_for((qm_cpu_level)level);
        if (k) return k;
    }
    return &qr_kernels_ref;
}

const char *qr_kernels_name(const qr_kernels *k)
{
    return k ? k->name : "none";
}

/* ---- views ---------------------------------------------------------------------------------- */

qm_status qr_matrix_from_tensor(const qm_file *f, const qm_tensor *t, qr_matrix *out, qm_error *err)
{
    if (!f || !t || !out) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "NULL argument");
    const char *path = qm_file_path(f);
    uint64_t cols = t->dims[t->rank - 1], rows = 1;
    for (uint32_t d = 0; d + 1 < t->rank; d++) rows *= t->dims[d]; /* the reader capped n_elements at 2^40 */
    memset(out, 0, sizeof *out);
    out->rows = (size_t)rows;
    out->cols = (size_t)cols;
    out->data = t->data;
    switch (t->dtype) {
    case QM_DTYPE_F32:
        out->dtype = QM_DTYPE_F32;
        out->row_stride = (size_t)cols * 4;
        return QM_OK;
    case QM_DTYPE_F16:
        out->dtype = QM_DTYPE_F16;
        out->row_stride = (size_t)cols * 2;
        return QM_OK;
    case QM_DTYPE_Q8_ROW: {
        qm_q8row_layout lay;
        qm_status st = qm_q8row_layout_of(t->rank, t->dims, qm_file_header(f)->alignment, &lay);
        if (st != QM_OK || lay.size != t->size)  /* the reader checked this already (R-TENSOR-10) */
            return qm_fail(err, QM_ERR_SIZE_MISMATCH, path, "tensor size", t->entry_offset,
                           "tensor '%s': Q8_ROW size does not match its shape", t->name);
        const uint8_t *base = (const uint8_t *)t->data;
        out->dtype = QM_DTYPE_Q8_ROW;
        out->row_stride = (size_t)lay.row_stride;
        out->scales = (const float *)(const void *)(base + lay.scales_offset);
        out->row_sums = (const int32_t *)(const void *)(base + lay.sums_offset);
        return QM_OK;
    }
    default:
        return qm_fail(err, QM_ERR_TYPE_MISMATCH, path, "tensor dtype", t->entry_offset,
                       "tensor '%s' has dtype %u; matmul takes F32, F16 or Q8_ROW weights", t->name,
                       (unsigned)t->dtype);
    }
}

/* ---- the product ---------------------------------------------------------------------------- */

static const qr_matmul_opts default_opts = {0, QR_ACT_AUTO};

static size_t pad64(size_t cols)
{
    return (cols + 63) & ~(size_t)63;
}

/* QR_ACT_AUTO picks by what bounds the product (measured by qmap bench kernels, runtime/README.md): one
 * row of X reads every weight once, so memory bandwidth sets the pace and widening the int8 weights to
 * float (about 50 GB/s per thread from cache here, above one thread's ~41 GB/s of bandwidth) costs
 * nothing while keeping X exact; with more rows each weight is reused from cache, and VNNI's 4x the
 * multiply-adds per instruction pays. */
static bool uses_int8(const qr_matrix *w, size_t n, const qr_matmul_opts *opts)
{
    bool int8 = opts->act == QR_ACT_INT8 || (opts->act == QR_ACT_AUTO && n > 1);
    return w->dtype == QM_DTYPE_Q8_ROW && int8 && w->cols <= QR_INT8_MAX_COLS;
}

/* The int8 copy of X: n rows of pad64(cols) bytes, then n float scales, 64-byte aligned in `work`
 * (qr_matmul_work_size checked that this fits in a size_t). */
static size_t int8_rows_bytes(size_t n, size_t cols)
{
    return n * pad64(cols);
}

size_t qr_matmul_work_size(const qr_matrix *w, size_t n, const qr_matmul_opts *opts)
{
    if (!opts) opts = &default_opts;
    if (!w || n == 0 || !uses_int8(w, n, opts)) return 0;
    /* cols <= QR_INT8_MAX_COLS here, so only n can make this overflow: then no buffer can be big enough */
    const size_t per_row = pad64(w->cols) + sizeof(float);
    if (n > (SIZE_MAX - 64) / per_row) return SIZE_MAX;
    return 64 + n * per_row;
}

/* Element-aligned views only: kernels read floats and halves as such (the generic one with plain C
 * loads, where a misaligned float is undefined behaviour). */
static bool aligned(const void *p, size_t a)
{
    return (uintptr_t)p % a == 0;
}

static bool valid_matrix(const qr_matrix *w)
{
    if (!w || !w->data || w->rows == 0 || w->cols == 0) return false;
    switch (w->dtype) {
    case QM_DTYPE_F32: return w->row_stride / 4 >= w->cols && w->row_stride % 4 == 0 && aligned(w->data, 4);
    case QM_DTYPE_F16: return w->row_stride / 2 >= w->cols && w->row_stride % 2 == 0 && aligned(w->data, 2);
    case QM_DTYPE_Q8_ROW:
        return w->cols <= SIZE_MAX - 63 && w->row_stride == pad64(w->cols) && w->scales && w->row_sums &&
               aligned(w->scales, 4) &&
               aligned(w->row_sums, 4);
    default: return false;
    }
}

/* Rows [begin, end) of `total` for part `p` of `parts`, boundaries on multiples of `grain`. */
static void split(size_t total, size_t parts, size_t p, size_t grain, size_t *begin, size_t *end)
{
    size_t units = (total + grain - 1) / grain;
    size_t b = units * p / parts * grain, e = units * (p + 1) / parts * grain;
    *begin = b < total ? b : total;
    *end = e < total ? e : total;
}

/* A thread's share: X rows [i0, i1) against W rows [r0, r1), in blocks of W rows that stay in L2 while
 * every X row passes over them. */
#define QR_L2_BLOCK_BYTES (256u * 1024u)
#define QR_ROW_GRAIN 16 /* W rows per unit of work between threads (a multiple of every tile width) */

typedef struct job {
    qr_block_fn *fn;
    const qr_matrix *w;
    const uint8_t *x;         /* float X, or the int8 copy */
    size_t x_stride;          /* bytes */
    const float *x_scales;
    size_t k;
    float *y;
    size_t ldy;
    int decode;               /* n == 1 */
} job;

static void run_share(const job *jb, size_t i0, size_t i1, size_t r0, size_t r1)
{
    if (i0 >= i1 || r0 >= r1) return;
    size_t block_rows = QR_L2_BLOCK_BYTES / jb->w->row_stride;
    block_rows = block_rows < QR_ROW_GRAIN ? QR_ROW_GRAIN : block_rows / QR_ROW_GRAIN * QR_ROW_GRAIN;
    for (size_t rb = r0; rb < r1; rb += block_rows) {
        size_t nr = r1 - rb < block_rows ? r1 - rb : block_rows;
        qr_block b = {
            .x = jb->x + i0 * jb->x_stride,
            .x_stride = jb->x_stride,
            .x_scales = jb->x_scales ? jb->x_scales + i0 : NULL,
            .w = (const uint8_t *)jb->w->data + rb * jb->w->row_stride,
            .w_stride = jb->w->row_stride,
            .w_scales = jb->w->scales ? jb->w->scales + rb : NULL,
            .w_sums = jb->w->row_sums ? jb->w->row_sums + rb : NULL,
            .m = i1 - i0,
            .nr = nr,
            .k = jb->k,
            .y = jb->y + i0 * jb->ldy + rb,
            .y_stride = jb->ldy,
            .decode = jb->decode,
        };
        jb->fn(&b);
    }
}

/* Below this many multiply-adds a parallel region costs more than it saves. */
#define QR_PARALLEL_MIN_MACS ((size_t)1 << 18)

qm_status qr_matmul(const qr_kernels *k, const qr_matrix *w, size_t n, const float *x, size_t ldx, float *y,
                    size_t ldy, void *work, size_t work_size, const qr_matmul_opts *opts)
{
    if (!k) k = qr_kernels_get();
    if (!opts) opts = &default_opts;
    if (!valid_matrix(w) || (opts->act != QR_ACT_AUTO && opts->act != QR_ACT_INT8 && opts->act != QR_ACT_F32))
        return QM_ERR_INVALID_ARGUMENT;
    if (n == 0) return QM_OK;
    if (!x || !y || ldx < w->cols || ldy < w->rows) return QM_ERR_INVALID_ARGUMENT;

    const bool int8 = uses_int8(w, n, opts);
    job jb = {.w = w, .y = y, .ldy = ldy, .k = w->cols, .decode = n == 1};
    uint8_t *xq = NULL;
    float *xs = NULL;
    if (int8) {
        size_t need = qr_matmul_work_size(w, n, opts);
        if (!work || work_size < need || need == SIZE_MAX) return QM_ERR_INVALID_ARGUMENT;
        uintptr_t p = ((uintptr_t)work + 63) & ~(uintptr_t)63;
        xq = (uint8_t *)p;
        xs = (float *)(void *)(xq + int8_rows_bytes(n, w->cols));
        jb.fn = k->q8_int8;
        jb.x = xq;
        jb.x_stride = pad64(w->cols);
        jb.x_scales = xs;
        jb.k = pad64(w->cols);
    } else {
        jb.fn = w->dtype == QM_DTYPE_F32 ? k->f32 : w->dtype == QM_DTYPE_F16 ? k->f16 : k->q8_f32;
        jb.x = (const uint8_t *)x;
        jb.x_stride = ldx * sizeof(float);
    }

    int threads = opts->threads > 0 ? opts->threads : omp_get_max_threads();
    if (threads < 1) threads = 1;
    if ((double)n * (double)w->rows * (double)w->cols < (double)QR_PARALLEL_MIN_MACS) threads = 1;
    /* Split W's rows (each thread streams its own part of W, the weights are the big operand); with too
     * few rows for that, split X's rows instead. */
    const bool split_rows = w->rows >= (size_t)threads * QR_ROW_GRAIN || n == 1;
    const size_t xq_stride = pad64(w->cols);

#pragma omp parallel num_threads(threads) if (threads > 1)
    {
        size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        if (int8) {
            size_t a, b;
            split(n, nt, t, 1, &a, &b);
            for (size_t i = a; i < b; i++) xs[i] = k->quantize_x(x + i * ldx, w->cols, xq_stride, xq + i * xq_stride);
#pragma omp barrier
        }
        size_t a, b;
        if (split_rows) {
            split(w->rows, nt, t, QR_ROW_GRAIN, &a, &b);
            run_share(&jb, 0, n, a, b);
        } else {
            split(n, nt, t, 1, &a, &b);
            run_share(&jb, a, b, 0, w->rows);
        }
    }
    return QM_OK;
}

qm_status qr_matvec(const qr_kernels *k, const qr_matrix *w, const float *x, float *y, void *work, size_t work_size,
                    const qr_matmul_opts *opts)
{
    return qr_matmul(k, w, 1, x, w ? w->cols : 0, y, w ? w->rows : 0, work, work_size, opts);
}
