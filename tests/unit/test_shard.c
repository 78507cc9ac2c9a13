/* test_shard.c — the rank's slices of a row-parallel matrix (runtime/qr_shard.h), against the whole matrix.
 *
 * What must hold (each check names the dtype, shape, rank count and rank):
 *   - The ranks' column slices (qr_shard_row_parallel of a matrix in one panel), each multiplied by its
 *     columns of X, add up to the product of the whole matrix, within the float bound of any summation
 *     order: F32 and F16 (strided views), Q8_ROW (copies, with QR_ACT_F32 so that X is not requantized).
 *   - A Q8_ROW copy is a valid Q8_ROW matrix of its own (spec/FORMAT.md 6.1): rows padded to 64 bytes
 *     with zeros, each row's sum the exact sum of its int8 values, the scales the whole matrix's.
 *   - Column panels: with N dividing the panel count the rank's panels are a view (nothing copied) of
 *     consecutive panels; with the panel count dividing N a rank takes its share of one panel; otherwise
 *     QM_ERR_BAD_CONFIG naming the tensor.
 *   - qr_shard_check_divides names the key and the rank count.
 * PRNG: splitmix64 (tu_rng) with fixed seeds. */
#include "test_mat.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qm_half.h"
#include "qq_kernels.h"
#include "qr_matmul.h"
#include "qr_shard.h"



static const char *dtype_name(qm_dtype d)
{
    return d == QM_DTYPE_F32 ? "F32" : d == QM_DTYPE_F16 ? "F16" : "Q8_ROW";
}

/* A Q8_ROW slice as the spec wants it: zero padding, exact row sums, the whole matrix's scales. */
static void check_q8_slice(const qr_matrix *w, const qr_matrix *part, size_t c0, const char *what)
{
    assert_int_equal(part->row_stride, (part->cols + 63) / 64 * 64);
    for (size_t r = 0; r < part->rows; r++) {
        const int8_t *row = (const int8_t *)part->data + r * part->row_stride;
        const int8_t *src = (const int8_t *)w->data + r * w->row_stride + c0;
        int32_t sum = 0;
        for (size_t c = 0; c < part->row_stride; c++) {
            if (c < part->cols && row[c] != src[c]) fail_msg("%s: row %zu col %zu differs from the matrix", what, r, c);
            if (c >= part->cols && row[c] != 0) fail_msg("%s: row %zu padding byte %zu is not zero", what, r, c);
            sum += row[c];
        }
        if (sum != part->row_sums[r]) fail_msg("%s: row %zu sum %d, the row's values add to %d", what, r, part->row_sums[r], sum);
        if (part->scales[r] != w->scales[r]) fail_msg("%s: row %zu scale differs", what, r);
    }
}

/* Σ over ranks of slice_r · x[c0_r .. c1_r) = W · x, for one dtype, shape and rank count. */
static void check_sum_of_slices(qm_dtype dtype, size_t rows, size_t cols, uint32_t N)
{
    char what[128];
    mat t = mat_new(dtype, rows, cols, 1000 + cols + N);
    uint64_t s = 77 + N;
    float *x = malloc(cols * sizeof *x), *full = malloc(rows * sizeof *full), *sum = calloc(rows, sizeof *sum);
    float *part_y = malloc(rows * sizeof *part_y);
    assert_true(x && full && sum && part_y);
    for (size_t c = 0; c < cols; c++) x[c] = tm_sym(&s);
    const qr_matmul_opts o = { NULL, QR_ACT_F32, NULL, false };
    assert_int_equal(qr_matmul(NULL, &t.m, 1, x, cols, full, rows, NULL, 0, &o), QM_OK);
    for (uint32_t r = 0; r < N; r++) {
        qr_shard sh = { r, N, NULL, NULL, NULL };
        qr_shard_store st = { 0 };
        qm_error err;
        qr_matrix part;
        size_t panels = 0;
        snprintf(what, sizeof what, "%s %zux%zu, rank %u of %u", dtype_name(dtype), rows, cols, r, N);
        assert_int_equal(qr_shard_row_parallel(&sh, &st, &t.m, rows, 1, &part, &panels, "m.qmap", "w", &err), QM_OK);
        const size_t c0 = qr_shard_begin(cols, r, N), c1 = qr_shard_begin(cols, r + 1, N);
        assert_int_equal(panels, 1);
        assert_int_equal(part.cols, c1 - c0);
        if (dtype == QM_DTYPE_Q8_ROW) check_q8_slice(&t.m, &part, c0, what);
        else assert_int_equal(st.n, 0);   /* a view */
        assert_int_equal(qr_matmul(NULL, &part, 1, x + c0, part.cols, part_y, rows, NULL, 0, &o), QM_OK);
        for (size_t i = 0; i < rows; i++) sum[i] += part_y[i];
        qr_shard_store_free(&st);
    }
    for (size_t i = 0; i < rows; i++) {
        double bound = 0;   /* (cols + 2)·2⁻²⁴·Σ|w·x|, as for any order of the sum (qr_matmul.h), twice */
        for (size_t c = 0; c < cols; c++) bound += fabs((double)t.wf[i * cols + c] * x[c]);
        bound = bound * 1.2 * 2 * (double)(cols + 2) * 0x1p-24 + 1e-30;
        if (fabs((double)sum[i] - full[i]) > bound)
            fail_msg("%s: row %zu: slices add to %.9g, the whole product is %.9g", what, i, sum[i], full[i]);
    }
    free(x), free(full), free(sum), free(part_y);
    mat_free(&t);
}

static void test_slices_add_up(void **state)
{
    (void)state;
    static const qm_dtype dtypes[3] = { QM_DTYPE_F32, QM_DTYPE_F16, QM_DTYPE_Q8_ROW };
    static const uint32_t ranks[3] = { 2, 3, 4 };
    for (int d = 0; d < 3; d++)
        for (int n = 0; n < 3; n++) {
            check_sum_of_slices(dtypes[d], 24, 256, ranks[n]);
            check_sum_of_slices(dtypes[d], 7, 200, ranks[n]);   /* slices not multiples of 64 */
        }
}

/* A matrix of P panels (rows·P rows of cols/P): which rows and columns rank r of N gets. */
static void test_panels(void **state)
{
    (void)state;
    const size_t rows = 8, width = 128;
    for (uint32_t P = 1; P <= 4; P++) {
        mat t = mat_new(QM_DTYPE_Q8_ROW, rows * P, width, 5 + P);
        for (uint32_t N = 2; N <= 4; N++)
            for (uint32_t r = 0; r < N; r++) {
                qr_shard sh = { r, N, NULL, NULL, NULL };
                qr_shard_store st = { 0 };
                qm_error err;
                qr_matrix part;
                size_t panels = 0;
                qm_status rc = qr_shard_row_parallel(&sh, &st, &t.m, rows, P, &part, &panels, "m.qmap", "blk.0.w", &err);
                if (P % N == 0) {
                    assert_int_equal(rc, QM_OK);
                    assert_int_equal(panels, P / N);
                    assert_int_equal(st.n, 0);   /* a view of consecutive panels */
                    assert_ptr_equal(part.data, (const uint8_t *)t.m.data + (size_t)r * (P / N) * rows * t.m.row_stride);
                    assert_int_equal(part.rows, P / N * rows);
                } else if (N % P == 0) {
                    assert_int_equal(rc, QM_OK);
                    assert_int_equal(panels, 1);
                    const size_t per = N / P, k = r % per, c0 = width * k / per;
                    const qr_matrix panel = qr_matrix_rows(&t.m, r / per * rows, rows);
                    assert_int_equal(part.cols, width * (k + 1) / per - c0);
                    check_q8_slice(&panel, &part, c0, "a share of one panel");
                } else {
                    assert_int_equal(rc, QM_ERR_BAD_CONFIG);
                    assert_true(tu_contains(err.message, "blk.0.w"));
                    assert_true(tu_contains(err.message, "column panels"));
                }
                qr_shard_store_free(&st);
            }
        mat_free(&t);
    }
}

static void test_check_divides(void **state)
{
    (void)state;
    qr_shard sh = { 0, 3, NULL, NULL, NULL };
    qm_error err;
    assert_int_equal(qr_shard_check_divides(&sh, "m.qmap", "llama.n_kv_heads", 6, &err), QM_OK);
    assert_int_equal(qr_shard_check_divides(&sh, "m.qmap", "llama.n_kv_heads", 4, &err), QM_ERR_BAD_CONFIG);
    assert_true(tu_contains(err.message, "llama.n_kv_heads is 4, not a multiple of the 3 ranks"));
    assert_true(tu_contains(err.message, "m.qmap"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slices_add_up),
        cmocka_unit_test(test_panels),
        cmocka_unit_test(test_check_divides),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
