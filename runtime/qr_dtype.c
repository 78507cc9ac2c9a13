/* qr_dtype.c — the runtime's dtype table (contract in qr_dtype.h). */
#include "qr_dtype.h"

#include <stdio.h>
#include <string.h>

#include "qm_half.h"

static bool aligned(const void *p, size_t a)
{
    return (uintptr_t)p % a == 0;
}

static const void *row_at(const qr_matrix *w, size_t r)
{
    return (const uint8_t *)w->data + r * w->row_stride;
}

/* ---- F32 and F16: rows of plain elements -------------------------------------------------------- */

static size_t plain_elem_bytes(qm_dtype dtype)
{
    return qr_dtype_get(dtype)->block_bytes; /* blocks of one element */
}

static qm_status plain_view(const qm_file *f, const qm_tensor *t, qr_matrix *out, qm_error *err)
{
    (void)f, (void)t, (void)err;
    out->row_stride = out->cols * plain_elem_bytes(out->dtype);
    return QM_OK;
}

/* Element-aligned views only: kernels read floats and halves as such (the generic one with plain C
 * loads, where a misaligned float is undefined behaviour). */
static bool plain_valid(const qr_matrix *w)
{
    const size_t e = plain_elem_bytes(w->dtype);
    return w->row_stride / e >= w->cols && w->row_stride % e == 0 && aligned(w->data, e);
}

static void f32_row(const qr_matrix *w, size_t r, float *out)
{
    memcpy(out, row_at(w, r), w->cols * sizeof(float));
}

static void f16_row(const qr_matrix *w, size_t r, float *out)
{
    const uint16_t *h = row_at(w, r);
    for (size_t i = 0; i < w->cols; i++) out[i] = qm_f16_to_f32(h[i]);
}

/* ---- Q8_ROW (spec/FORMAT.md 6.1): int8 rows of align_up(cols, 64) bytes, a scale and a sum per row ---- */

static qm_status q8_view(const qm_file *f, const qm_tensor *t, qr_matrix *out, qm_error *err)
{
    qm_q8row_layout lay;
    qm_status st = qm_q8row_layout_of(t->rank, t->dims, qm_file_header(f)->alignment, &lay);
    if (st != QM_OK || lay.size != t->size)  /* the reader checked this already (R-TENSOR-10) */
        return qm_fail(err, QM_ERR_SIZE_MISMATCH, qm_file_path(f), "tensor size", t->entry_offset,
                       "tensor '%s': Q8_ROW size does not match its shape", t->name);
    const uint8_t *base = (const uint8_t *)t->data;
    out->row_stride = (size_t)lay.row_stride;
    out->scales = (const float *)(const void *)(base + lay.scales_offset);
    out->row_sums = (const int32_t *)(const void *)(base + lay.sums_offset);
    return QM_OK;
}

static bool q8_valid(const qr_matrix *w)
{
    return w->cols <= SIZE_MAX - 63 && w->row_stride == ((w->cols + 63) & ~(size_t)63) && w->scales &&
           w->row_sums && aligned(w->scales, 4) && aligned(w->row_sums, 4);
}

static void q8_row(const qr_matrix *w, size_t r, float *out)
{
    /* spec 6.1: the value of element (r, j) is q[r][j] · scale[r], computed in f32 */
    const int8_t *q = row_at(w, r);
    const float scale = w->scales[r];
    for (size_t i = 0; i < w->cols; i++) out[i] = (float)q[i] * scale;
}

/* ---- the table ---------------------------------------------------------------------------------- */

#define FLOAT_X QR_XK_BIT(QR_XK_FLOAT)
#define INT8_X QR_XK_BIT(QR_XK_INT8)

static const qr_dtype_traits traits[] = {
    { QM_DTYPE_F32, "f32", 1, 4, 1, FLOAT_X, plain_view, plain_valid, f32_row },
    { QM_DTYPE_F16, "f16", 1, 2, 1, FLOAT_X, plain_view, plain_valid, f16_row },
    { QM_DTYPE_Q8_ROW, "q8_row", 1, 1, 64, FLOAT_X | INT8_X, q8_view, q8_valid, q8_row },
};
#define N_TRAITS (sizeof traits / sizeof traits[0])

const qr_dtype_traits *qr_dtype_get(qm_dtype dtype)
{
    for (size_t i = 0; i < N_TRAITS; i++)
        if (traits[i].dtype == dtype) return &traits[i];
    return NULL;
}

const char *qr_dtype_list(char *buf, size_t len)
{
    size_t used = 0;
    if (len) buf[0] = '\0';
    for (size_t i = 0; i < N_TRAITS && used < len; i++) {
        const char *sep = i == 0 ? "" : i + 1 == N_TRAITS ? " or " : ", ";
        int n = snprintf(buf + used, len - used, "%s%s", sep, qm_dtype_info(traits[i].dtype)->name);
        if (n < 0) break;
        used += (size_t)n;
    }
    return buf;
}

size_t qr_dtype_row_bytes(qm_dtype dtype, size_t cols)
{
    const qr_dtype_traits *t = qr_dtype_get(dtype);
    if (!t || cols > SIZE_MAX - t->row_align) return 0;
    size_t blocks = (cols + t->row_align - 1) / t->row_align * t->row_align / t->block_elems;
    if (blocks > SIZE_MAX / t->block_bytes) return 0;
    return blocks * t->block_bytes;
}

void qr_matrix_row_f32(const qr_matrix *w, size_t r, float *out)
{
    const qr_dtype_traits *t = qr_dtype_get(w->dtype);
    if (t) t->row_to_f32(w, r, out);   /* qr_matrix views hold only the dtypes of the table */
}
