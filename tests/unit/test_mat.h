/* test_mat.h — a random weight matrix with its own buffers, for the unit tests of products (header-only:
 * the quantize kernels it calls are not linked into every test that links test_util.c).
 * F32 or F16 rows of `cols` values, or Q8_ROW rows padded to 64 bytes with scales and row sums, quantized
 * by the quantize kernels (spec 6.1); wf keeps the values as float (Q8_ROW: before quantizing). */
#ifndef QM_TEST_MAT_H
#define QM_TEST_MAT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "qm_half.h"
#include "qq_kernels.h"
#include "qr_matmul.h"
#include "test_util.h"

typedef struct mat {
    qr_matrix m;
    void *data;
    float *scales;
    int32_t *sums;
    float *wf;
} mat;

static inline float tm_sym(uint64_t *s) { return (float)((double)(tu_rng(s) >> 11) * 0x1p-52 - 1.0); } /* (-1, 1) */

/* Values 0.05·U(-1, 1) from `seed`. */
static inline mat mat_new(qm_dtype dtype, size_t rows, size_t cols, uint64_t seed)
{
    mat t;
    memset(&t, 0, sizeof t);
    uint64_t s = seed;
    t.wf = malloc(rows * cols * sizeof *t.wf);
    assert_non_null(t.wf);
    for (size_t i = 0; i < rows * cols; i++) t.wf[i] = 0.05f * tm_sym(&s);
    t.m.dtype = dtype;
    t.m.rows = rows;
    t.m.cols = cols;
    if (dtype == QM_DTYPE_F32) {
        t.data = malloc(rows * cols * 4);
        assert_non_null(t.data);
        memcpy(t.data, t.wf, rows * cols * 4);
        t.m.row_stride = cols * 4;
    } else if (dtype == QM_DTYPE_F16) {
        uint16_t *h = malloc(rows * cols * sizeof *h);
        assert_non_null(h);
        for (size_t i = 0; i < rows * cols; i++) h[i] = qm_f32_to_f16(t.wf[i]);
        t.m.row_stride = cols * 2;
        t.data = h;
    } else {
        const size_t stride = (cols + 63) / 64 * 64;
        uint8_t *q = calloc(rows, stride);
        t.scales = malloc(rows * sizeof *t.scales);
        t.sums = malloc(rows * sizeof *t.sums);
        assert_true(q && t.scales && t.sums);
        const qq_kernels *qk = qq_kernels_get();
        for (size_t r = 0; r < rows; r++)
            if (!qk->q8row(t.wf + r * cols, cols, (int8_t *)(q + r * stride), &t.scales[r], &t.sums[r]))
                fail_msg("q8row refused row %zu", r);
        t.m.row_stride = stride;
        t.m.scales = t.scales;
        t.m.row_sums = t.sums;
        t.data = q;
    }
    t.m.data = t.data;
    return t;
}

static inline void mat_free(mat *t)
{
    free(t->data);
    free(t->scales);
    free(t->sums);
    free(t->wf);
}

#endif /* QM_TEST_MAT_H */
