/* qr_dtype.h — the runtime's row per weight dtype (ggml's type_traits idea): what generic runtime code
 * needs to know about a weight dtype, in one table. qr_matmul views, checks and dispatches through it and
 * the model loader asks it which dtypes a weight matrix may have, so a new weight dtype is its format row
 * (format/qm_format.c), one row here and its portable block kernels (qr_kernels_ref.c; a SIMD table adds
 * its own when it has them, and must for int8 X: qr_kernels.block).
 *
 * Row -> f32 is what an embedding lookup (and a position table) needs: after `quantize --q8` the token
 * embedding is Q8_ROW, and only the rows of the tokens at hand are decoded, in place from the mapping.
 * Pure functions over caller-owned memory; the table is immutable.
 */
#ifndef QR_DTYPE_H
#define QR_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qm_format.h"
#include "qr_kernels.h"
#include "qr_matmul.h"

typedef struct qr_dtype_traits {
    qm_dtype dtype;                   /* also its index in qr_kernels.block */
    const char *name;                 /* "f32", "f16", "q8_row" (general.file_type spelling) */
    size_t block_elems, block_bytes;  /* a row is stored in blocks of block_elems elements, block_bytes each
                                       * (1 and the element's size for F32, F16 and Q8_ROW) */
    size_t row_align;                 /* rows of a container tensor start on multiples of this many elements
                                       * (a multiple of block_elems) */
    unsigned x_kinds;                 /* QR_XK_BIT(kind) for each kind of X its block kernels take; always
                                       * QR_XK_FLOAT (QR_ACT_F32, and rows too long for int8, use it) */
    /* The rest of a view of container tensor t (qr_matrix_from_tensor set dtype, rows, cols and data):
     * row_stride and the per-row arrays. An error names the tensor. */
    qm_status (*view)(const qm_file *f, const qm_tensor *t, qr_matrix *out, qm_error *err);
    /* Whether a view (from a tensor or built by hand) holds what the block kernels read: strides,
     * alignment, the per-row arrays. rows, cols and data are checked before. */
    bool (*valid)(const qr_matrix *w);
    /* Row r of w as float32 (w->cols floats), r < w->rows. */
    void (*row_to_f32)(const qr_matrix *w, size_t r, float *out);
} qr_dtype_traits;

/* The row of a dtype qr_matrix can view (F32, F16, Q8_ROW), or NULL. */
const qr_dtype_traits *qr_dtype_get(qm_dtype dtype);
/* The container names of the table's dtypes as a list for a message ("F32, F16 or Q8_ROW"), into buf
 * (truncated to len - 1 characters); returns buf. */
const char *qr_dtype_list(char *buf, size_t len);
/* Bytes of one stored row of `cols` elements as a container lays it out (Q8_ROW: align_up(cols, 64));
 * 0 for a dtype without a row or on overflow. */
size_t qr_dtype_row_bytes(qm_dtype dtype, size_t cols);

/* Row r of w as float32 (w->cols floats): F32 copied, F16 widened exactly, Q8_ROW q·scale[r] in f32 (spec
 * 6.1's value of an element). r < w->rows (not checked: the caller bounds ids against the vocabulary). */
void qr_matrix_row_f32(const qr_matrix *w, size_t r, float *out);

#endif /* QR_DTYPE_H */
