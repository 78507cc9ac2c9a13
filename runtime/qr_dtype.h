/* qr_dtype.h — the runtime's row per dtype (ggml's type_traits idea): what generic runtime code needs to
 * know about a weight dtype, in one table, so a new dtype is one row here (plus its matmul kernels).
 *
 * Row -> f32 is what an embedding lookup (and a position table) needs: after `quantize --q8` the token
 * embedding is Q8_ROW, and only the rows of the tokens at hand are decoded, in place from the mapping.
 * Pure functions over caller-owned memory; the table is immutable.
 */
#ifndef QR_DTYPE_H
#define QR_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "qm_format.h"
#include "qr_matmul.h"

typedef struct qr_dtype_traits {
    qm_dtype dtype;
    const char *name;                 /* "f32", "f16", "q8_row" (general.file_type spelling) */
    size_t elem_bytes;                /* bytes of one stored element */
    size_t row_align;                 /* rows of a container tensor start on multiples of this many elements */
    /* cols values of one stored row -> float. `scale` is the row's scale (Q8_ROW), ignored otherwise. */
    void (*row_to_f32)(const void *row, size_t cols, float scale, float *out);
} qr_dtype_traits;

/* The row of a dtype qr_matrix can view (F32, F16, Q8_ROW), or NULL. */
const qr_dtype_traits *qr_dtype_get(qm_dtype dtype);
/* Bytes of one stored row of `cols` elements as a container lays it out (Q8_ROW: align_up(cols, 64));
 * 0 for a dtype without a row or on overflow. */
size_t qr_dtype_row_bytes(qm_dtype dtype, size_t cols);

/* Row r of w as float32 (w->cols floats): F32 copied, F16 widened exactly, Q8_ROW q·scale[r] in f32 (spec
 * 6.1's value of an element). r < w->rows (not checked: the caller bounds ids against the vocabulary). */
void qr_matrix_row_f32(const qr_matrix *w, size_t r, float *out);

#endif /* QR_DTYPE_H */
