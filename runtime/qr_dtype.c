/* qr_dtype.c — the runtime's dtype table (contract in qr_dtype.h). */
#include "qr_dtype.h"

#include <string.h>

#include "qm_half.h"

static void f32_row(const void *row, size_t cols, float scale, float *out)
{
    (void)scale;
    memcpy(out, row, cols * sizeof(float));
}

static void f16_row(const void *row, size_t cols, float scale, float *out)
{
    (void)scale;
    const uint16_t *h = row;
    for (size_t i = 0; i < cols; i++) out[i] = qm_f16_to_f32(h[i]);
}

static void q8_row(const void *row, size_t cols, float scale, float *out)
{
    /* spec 6.1: the value of element (r, j) is q[r][j] · scale[r], computed in f32 */
    const int8_t *q = row;
    for (size_t i = 0; i < cols; i++) out[i] = (float)q[i] * scale;
}

static const qr_dtype_traits traits[] = {
    { QM_DTYPE_F32, "f32", 4, 1, f32_row },
    { QM_DTYPE_F16, "f16", 2, 1, f16_row },
    { QM_DTYPE_Q8_ROW, "q8_row", 1, 64, q8_row },
};

const qr_dtype_traits *qr_dtype_get(qm_dtype dtype)
{
    for (size_t i = 0; i < sizeof traits / sizeof traits[0]; i++)
        if (traits[i].dtype == dtype) return &traits[i];
    return NULL;
}

size_t qr_dtype_row_bytes(qm_dtype dtype, size_t cols)
{
    const qr_dtype_traits *t = qr_dtype_get(dtype);
    if (!t || cols > SIZE_MAX - t->row_align) return 0;
    size_t padded = (cols + t->row_align - 1) / t->row_align * t->row_align;
    if (padded > SIZE_MAX / t->elem_bytes) return 0;
    return padded * t->elem_bytes;
}

void qr_matrix_row_f32(const qr_matrix *w, size_t r, float *out)
{
    const qr_dtype_traits *t = qr_dtype_get(w->dtype);
    if (!t) return;   /* qr_matrix views hold only the dtypes of the table */
    const void *row = (const uint8_t *)w->data + r * w->row_stride;
    t->row_to_f32(row, w->cols, w->dtype == QM_DTYPE_Q8_ROW ? w->scales[r] : 0.0f, out);
}
