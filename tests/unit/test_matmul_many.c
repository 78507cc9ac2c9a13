/* test_matmul_many.c — qr_matmul_many (runtime/qr_matmul.h): several matrices that read the same X as one
 * product, in every kernel variant this CPU has.
 *
 * What must hold (each check can fail, and names the variant, dtype, activation mode, shape, threads and
 * element):
 *   - Each Y_p equals, bit for bit, qr_matmul of w[p] alone with the same X, variant, activation mode and
 *     thread count: for F32, F16 and Q8_ROW (float X, one and two int8 terms), n = 1 (decode, four
 *     streams per chunk), 3 and 70 (GEMM; 70 > the two-term X chunk of 64), on 1, 2 and 3 threads, with
 *     parts whose row counts are and are not multiples of the 16-row unit the threads split (so a chunk
 *     ends inside one part and goes on in the next), and Y_p laid side by side in one array as a layer's
 *     q, k and v are.
 *   - Matrices of different dtypes or row lengths run one by one, each still its own bits.
 *   - opts.kernels picks the variant of a call that passes k = NULL.
 *   - QR_ACT_AUTO with one X row follows the variant's auto_decode_terms: the bits of QR_ACT_F32 when it
 *     is 0 and of QR_ACT_INT8X2 when it is 2 (in every variant, each table copied with either value);
 *     with 3 rows, two terms whatever it says; the work size for one row is enough for either.
 *   - opts.row_invariant: a row's bits do not depend on the row count of its product (test_row_invariant).
 *   - Argument errors (count 0 or above QR_MATMUL_MAX_PARTS, a NULL matrix or Y, ldy below a part's
 *     rows, a work buffer too small for any part) return QM_ERR_INVALID_ARGUMENT and write no Y.
 * PRNG: splitmix64 (tu_rng) with fixed seeds. */
#include "test_mat.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qm_half.h"
#include "qq_kernels.h"
#include "qr_kernels.h"
#include "qr_matmul.h"
#include "test_pools.h"

#define GUARD_BITS 0x7fc0dead /* a NaN no product writes: any Y element left with it was not written */



static float *guarded(size_t count)
{
    float *y = malloc(count * sizeof *y);
    assert_non_null(y);
    const uint32_t g = GUARD_BITS;
    for (size_t i = 0; i < count; i++) memcpy(&y[i], &g, 4);
    return y;
}

static bool is_guard(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u == GUARD_BITS;
}

static const char *act_name(qr_act a)
{
    return a == QR_ACT_INT8 ? "int8" : a == QR_ACT_INT8X2 ? "int8x2" : a == QR_ACT_F32 ? "f32" : "auto";
}

/* The parts of a group (rows each; all with `cols` columns), laid side by side in one Y of row width
 * Σ rows (+ 3, a gap that must stay unwritten), against each part alone into its own array. */
static void check_group(const qr_kernels *k, qm_dtype dtype, const size_t *rows, size_t count, size_t cols,
                        uint64_t seed)
{
    mat m[QR_MATMUL_MAX_PARTS];
    const qr_matrix *w[QR_MATMUL_MAX_PARTS];
    size_t ldy = 3, off[QR_MATMUL_MAX_PARTS];
    for (size_t p = 0; p < count; p++) {
        m[p] = mat_new(dtype, rows[p], cols, seed + p);
        w[p] = &m[p].m;
        off[p] = ldy - 3;
        ldy += rows[p];
    }
    static const size_t ns[3] = { 1, 3, 70 };
    static const qr_act acts[4] = { QR_ACT_AUTO, QR_ACT_F32, QR_ACT_INT8, QR_ACT_INT8X2 };
    for (int ni = 0; ni < 3; ni++) {
        const size_t n = ns[ni];
        uint64_t s = seed * 7 + (uint64_t)n;
        float *x = malloc(n * cols * sizeof *x);
        assert_non_null(x);
        for (size_t i = 0; i < n * cols; i++) x[i] = tm_sym(&s);
        for (int ai = 0; ai < (dtype == QM_DTYPE_Q8_ROW ? 4 : 1); ai++)
            for (int threads = 1; threads <= 3; threads++) {
                const qr_matmul_opts o = { .pool = pools_get(threads), .act = acts[ai], .kernels = NULL, .row_invariant = false };
                size_t ws = 0;
                for (size_t p = 0; p < count; p++) {
                    size_t need = qr_matmul_work_size(w[p], n, &o);
                    if (need > ws) ws = need;
                }
                void *work = ws ? malloc(ws) : NULL;
                float *y = guarded(n * ldy), *yp[QR_MATMUL_MAX_PARTS];
                for (size_t p = 0; p < count; p++) yp[p] = y + off[p];
                char ctx[200];
                snprintf(ctx, sizeof ctx, "%s %s act %s, %zu parts (rows %zu, %zu, ...) x %zu cols, n %zu, %d thread(s)",
                         qr_kernels_name(k), dtype == QM_DTYPE_F32 ? "F32" : dtype == QM_DTYPE_F16 ? "F16" : "Q8_ROW",
                         act_name(acts[ai]), count, rows[0], count > 1 ? rows[1] : 0, cols, n, threads);
                qm_status st = qr_matmul_many(k, w, count, n, x, cols, yp, ldy, work, ws, &o);
                if (st != QM_OK) fail_msg("%s: qr_matmul_many: %s", ctx, qm_status_name(st));
                for (size_t p = 0; p < count; p++) {
                    float *alone = guarded(n * rows[p]);
                    st = qr_matmul(k, w[p], n, x, cols, alone, rows[p], work, ws, &o);
                    if (st != QM_OK) fail_msg("%s: qr_matmul of part %zu: %s", ctx, p, qm_status_name(st));
                    for (size_t i = 0; i < n; i++)
                        for (size_t r = 0; r < rows[p]; r++) {
                            float a = alone[i * rows[p] + r], g = yp[p][i * ldy + r];
                            if (memcmp(&a, &g, 4) != 0 || is_guard(a))
                                fail_msg("%s: part %zu Y[%zu][%zu] is %.9g in the group, %.9g alone", ctx, p, i, r,
                                         (double)g, (double)a);
                        }
                    free(alone);
                }
                for (size_t i = 0; i < n; i++)
                    for (size_t c = ldy - 3; c < ldy; c++)
                        if (!is_guard(y[i * ldy + c])) fail_msg("%s: the gap after the parts, Y[%zu][%zu], was written", ctx, i, c);
                free(y);
                free(work);
            }
        free(x);
    }
    for (size_t p = 0; p < count; p++) mat_free(&m[p]);
}

static size_t variants(const qr_kernels *out[3])
{
    static const qm_cpu_level levels[3] = { QM_CPU_GENERIC, QM_CPU_AVX2, QM_CPU_AVX512 };
    size_t nv = 0;
    for (int i = 0; i < 3; i++)
        if (qr_kernels_for(levels[i])) out[nv++] = qr_kernels_for(levels[i]);
    return nv;
}

static void test_same_bits(void **state)
{
    (void)state;
    static const qm_dtype dts[3] = { QM_DTYPE_F32, QM_DTYPE_F16, QM_DTYPE_Q8_ROW };
    /* q/k/v of a GQA layer (a large part, two small ones), parts off the 16-row unit, two equal parts
     * (gate/up), rows of an odd length (Q8_ROW pads them), and one part alone */
    static const struct { size_t count, cols, rows[3]; } groups[5] = {
        { 3, 256, { 512, 64, 64 } }, { 3, 100, { 37, 5, 19 } }, { 2, 784, { 130, 130, 0 } },
        { 3, 4095, { 33, 17, 16 } }, { 1, 64, { 700, 0, 0 } },
    };
    const qr_kernels *ks[3];
    size_t nv = variants(ks);
    for (size_t v = 0; v < nv; v++)
        for (int d = 0; d < 3; d++)
            for (int g = 0; g < 5; g++)
                check_group(ks[v], dts[d], groups[g].rows, groups[g].count, groups[g].cols,
                            1000 + (uint64_t)(100 * v + 10 * (size_t)d + (size_t)g));
}

/* F16 beside Q8_ROW, and two row lengths: one by one, each its own bits (and each its own work layout). */
static void test_mixed(void **state)
{
    (void)state;
    mat a = mat_new(QM_DTYPE_F16, 40, 96, 1), b = mat_new(QM_DTYPE_Q8_ROW, 24, 96, 2), c = mat_new(QM_DTYPE_Q8_ROW, 24, 160, 3);
    const qr_matrix *w[2] = { &a.m, &b.m }, *w2[2] = { &b.m, &c.m };
    const size_t n = 5;
    uint64_t s = 9;
    float x[5 * 160];
    for (size_t i = 0; i < 5 * 160; i++) x[i] = tm_sym(&s);
    for (int threads = 1; threads <= 2; threads++) {
        const qr_matmul_opts o = { .pool = pools_get(threads), .act = QR_ACT_AUTO, .kernels = NULL, .row_invariant = false };
        const size_t ws = qr_matmul_work_size(&c.m, n, &o) + qr_matmul_work_size(&b.m, n, &o);
        void *work = malloc(ws);
        float *y = guarded(n * 64), *ya = guarded(n * 40), *yb = guarded(n * 24);
        float *yp[2] = { y, y + 40 };
        assert_int_equal(qr_matmul_many(NULL, w, 2, n, x, 160, yp, 64, work, ws, &o), QM_OK);
        assert_int_equal(qr_matmul(NULL, &a.m, n, x, 160, ya, 40, work, ws, &o), QM_OK);
        assert_int_equal(qr_matmul(NULL, &b.m, n, x, 160, yb, 24, work, ws, &o), QM_OK);
        for (size_t i = 0; i < n; i++) {
            assert_memory_equal(y + i * 64, ya + i * 40, 40 * sizeof(float));
            assert_memory_equal(y + i * 64 + 40, yb + i * 24, 24 * sizeof(float));
        }
        float *yc = guarded(n * 24), *yq[2] = { y, y + 24 };
        assert_int_equal(qr_matmul_many(NULL, w2, 2, n, x, 160, yq, 64, work, ws, &o), QM_OK);
        assert_int_equal(qr_matmul(NULL, &c.m, n, x, 160, yc, 24, work, ws, &o), QM_OK);
        for (size_t i = 0; i < n; i++) assert_memory_equal(y + i * 64 + 24, yc + i * 24, 24 * sizeof(float));
        free(y), free(ya), free(yb), free(yc), free(work);
    }
    mat_free(&a), mat_free(&b), mat_free(&c);
}

static void expect_untouched(const char *what, qm_status st, const float *y, size_t count)
{
    if (st != QM_ERR_INVALID_ARGUMENT) fail_msg("%s: %s, expected QM_ERR_INVALID_ARGUMENT", what, qm_status_name(st));
    for (size_t i = 0; i < count; i++)
        if (!is_guard(y[i])) fail_msg("%s: Y[%zu] was written", what, i);
}

static void test_errors(void **state)
{
    (void)state;
    mat a = mat_new(QM_DTYPE_Q8_ROW, 32, 64, 4), b = mat_new(QM_DTYPE_Q8_ROW, 48, 64, 5), f = mat_new(QM_DTYPE_F32, 16, 128, 6);
    const qr_matrix *w[5] = { &a.m, &b.m, &a.m, &b.m, &a.m };
    const size_t n = 3, ldy = 80;
    float x[3 * 128] = { 0 };
    float *y = guarded(n * ldy), *yp[5] = { y, y + 32, y, y + 32, y };
    const qr_matmul_opts o = { .pool = NULL, .act = QR_ACT_AUTO, .kernels = NULL, .row_invariant = false };
    const size_t ws = qr_matmul_work_size(&b.m, n, &o);
    void *work = malloc(ws);
    expect_untouched("count 0", qr_matmul_many(NULL, w, 0, n, x, 64, yp, ldy, work, ws, &o), y, n * ldy);
    expect_untouched("count above the maximum",
                     qr_matmul_many(NULL, w, QR_MATMUL_MAX_PARTS + 1, n, x, 64, yp, ldy, work, ws, &o), y, n * ldy);
    const qr_matrix *wnull[2] = { &a.m, NULL };
    expect_untouched("a NULL matrix", qr_matmul_many(NULL, wnull, 2, n, x, 64, yp, ldy, work, ws, &o), y, n * ldy);
    float *ynull[2] = { y, NULL };
    expect_untouched("a NULL Y", qr_matmul_many(NULL, w, 2, n, x, 64, ynull, ldy, work, ws, &o), y, n * ldy);
    expect_untouched("ldy below the second part's rows", qr_matmul_many(NULL, w, 2, n, x, 64, yp, 40, work, ws, &o), y,
                     n * ldy);
    expect_untouched("no work buffer", qr_matmul_many(NULL, w, 2, n, x, 64, yp, ldy, NULL, 0, &o), y, n * ldy);
    /* mixed kinds run one by one: a work buffer too small for the second must fail before the first runs */
    const qr_matrix *wm[2] = { &f.m, &b.m };
    expect_untouched("mixed kinds, work too small for the Q8_ROW part",
                     qr_matmul_many(NULL, wm, 2, n, x, 128, yp, ldy, work, 16, &o), y, n * ldy);
    assert_int_equal(qr_matmul_many(NULL, w, 2, 0, x, 64, yp, ldy, NULL, 0, &o), QM_OK);   /* n = 0: nothing */
    for (size_t i = 0; i < n * ldy; i++)
        if (!is_guard(y[i])) fail_msg("n = 0: Y[%zu] was written", i);
    free(work);
    free(y);
    mat_free(&a), mat_free(&b), mat_free(&f);
}

/* opts.kernels picks the variant of a call with k = NULL (a session sets it once instead of reading
 * QMAP_CPU per product): with an F32 decode, whose float sums run in another order in each variant, the
 * result is the bits of that variant, not of qr_kernels_get()'s. */
static void test_opts_kernels(void **state)
{
    (void)state;
    const qr_kernels *ks[3];
    size_t nv = variants(ks);
    if (nv < 2) {
        printf("(one kernel variant on this CPU: opts.kernels cannot be told apart)\n");
        return;
    }
    mat a = mat_new(QM_DTYPE_F32, 64, 4095, 11);
    uint64_t s = 12;
    float *x = malloc(4095 * sizeof *x), y0[64], y1[64], yo[64];
    assert_non_null(x);
    for (size_t i = 0; i < 4095; i++) x[i] = tm_sym(&s);
    const qr_kernels *first = ks[0], *last = ks[nv - 1];
    assert_int_equal(qr_matvec(first, &a.m, x, y0, NULL, 0, NULL), QM_OK);
    assert_int_equal(qr_matvec(last, &a.m, x, y1, NULL, 0, NULL), QM_OK);
    if (memcmp(y0, y1, sizeof y0) == 0) fail_msg("%s and %s sum this F32 decode to the same bits: pick another case",
                                                 qr_kernels_name(first), qr_kernels_name(last));
    const qr_matmul_opts o = { .pool = NULL, .act = QR_ACT_AUTO, .kernels = first, .row_invariant = false };
    assert_int_equal(qr_matvec(NULL, &a.m, x, yo, NULL, 0, &o), QM_OK);
    assert_memory_equal(yo, y0, sizeof y0);
    free(x);
    mat_free(&a);
}

/* QR_ACT_AUTO's decode follows the table's auto_decode_terms (a core where widening cannot keep up with
 * memory decodes in two int8 terms): each variant's table copied with 0 and with 2. */
static void test_auto_decode_terms(void **state)
{
    (void)state;
    const qr_kernels *ks[3];
    size_t nv = variants(ks);
    enum { ROWS = 48, COLS = 300, N = 3 };
    mat a = mat_new(QM_DTYPE_Q8_ROW, ROWS, COLS, 21);
    uint64_t s = 22;
    float x[N * COLS], want[N * ROWS], got[N * ROWS], other[N * ROWS];
    for (size_t i = 0; i < N * COLS; i++) x[i] = tm_sym(&s);
    const qr_matmul_opts auto_o = { .pool = NULL, .act = QR_ACT_AUTO, .kernels = NULL, .row_invariant = false };
    const qr_matmul_opts f32_o = { .pool = NULL, .act = QR_ACT_F32, .kernels = NULL, .row_invariant = false };
    const qr_matmul_opts x2_o = { .pool = NULL, .act = QR_ACT_INT8X2, .kernels = NULL, .row_invariant = false };
    const size_t ws = qr_matmul_work_size(&a.m, 1, &auto_o), ws3 = qr_matmul_work_size(&a.m, N, &auto_o);
    assert_true(ws >= qr_matmul_work_size(&a.m, 1, &x2_o) && ws3 >= ws);
    void *work = aligned_alloc(64, (ws3 + 63) / 64 * 64);
    assert_non_null(work);
    for (size_t v = 0; v < nv; v++)
        for (int terms = 0; terms <= 2; terms += 2) {
            qr_kernels t = *ks[v];
            t.auto_decode_terms = terms;
            const qr_matmul_opts *like = terms ? &x2_o : &f32_o, *unlike = terms ? &f32_o : &x2_o;
            assert_int_equal(qr_matmul(&t, &a.m, 1, x, COLS, want, ROWS, work, ws3, like), QM_OK);
            assert_int_equal(qr_matmul(&t, &a.m, 1, x, COLS, other, ROWS, work, ws3, unlike), QM_OK);
            if (memcmp(want, other, ROWS * sizeof *want) == 0)
                fail_msg("%s: float X and two int8 terms give the same bits here: pick another case",
                         qr_kernels_name(ks[v]));
            assert_int_equal(qr_matmul(&t, &a.m, 1, x, COLS, got, ROWS, work, ws, &auto_o), QM_OK);
            if (memcmp(got, want, ROWS * sizeof *got) != 0)
                fail_msg("%s with auto_decode_terms %d: QR_ACT_AUTO's decode is not the bits of %s",
                         qr_kernels_name(ks[v]), terms, terms ? "QR_ACT_INT8X2" : "QR_ACT_F32");
            /* more than one row: two terms, whatever the table says for decode */
            assert_int_equal(qr_matmul(&t, &a.m, N, x, COLS, want, ROWS, work, ws3, &x2_o), QM_OK);
            assert_int_equal(qr_matmul(&t, &a.m, N, x, COLS, got, ROWS, work, ws3, &auto_o), QM_OK);
            assert_memory_equal(got, want, sizeof got);
        }
    free(work);
    mat_free(&a);
}

/* opts.row_invariant: every row of X gives the bits it gives in a product of any other row count, on
 * every variant, thread count and dtype (a batch of sequences: runtime/qr_model.h). Rows 0..N-1 of one
 * product of N rows against the same rows as products of 1, 2 and 15 rows (1: the decode's row count, 15:
 * below the AVX-512 row groups, N = 20: in them), for F32, F16 and Q8_ROW with QR_ACT_AUTO, QR_ACT_F32,
 * QR_ACT_INT8 and QR_ACT_INT8X2. Without the flag an F32 row alone is seen to differ (the check can fail). */
static void test_row_invariant(void **state)
{
    (void)state;
    const qr_kernels *ks[3];
    size_t nv = variants(ks);
    enum { ROWS = 96, COLS = 1000, N = 20 };
    static const qm_dtype dtypes[3] = { QM_DTYPE_F32, QM_DTYPE_F16, QM_DTYPE_Q8_ROW };
    static const qr_act acts[4] = { QR_ACT_AUTO, QR_ACT_F32, QR_ACT_INT8, QR_ACT_INT8X2 };
    static const size_t pieces[3] = { 1, 2, 15 };
    uint64_t s = 31;
    float *x = malloc(N * COLS * sizeof *x), *all = malloc(N * ROWS * sizeof *all), *part = malloc(N * ROWS * sizeof *part);
    assert_true(x && all && part);
    for (size_t i = 0; i < N * COLS; i++) x[i] = tm_sym(&s);
    bool seen_differ = false;
    for (int d = 0; d < 3; d++) {
        mat a = mat_new(dtypes[d], ROWS, COLS, 40 + (uint64_t)d);
        for (int ai = 0; ai < (dtypes[d] == QM_DTYPE_Q8_ROW ? 4 : 1); ai++)
            for (int threads = 1; threads <= 2; threads++) {
                qr_matmul_opts o = { .pool = pools_get(threads), .act = acts[ai], .kernels = NULL, .row_invariant = true };
                const size_t ws = qr_matmul_work_size(&a.m, N, &o);
                void *work = ws ? aligned_alloc(64, (ws + 63) / 64 * 64) : NULL;
                for (size_t v = 0; v < nv; v++) {
                    assert_int_equal(qr_matmul(ks[v], &a.m, N, x, COLS, all, ROWS, work, ws, &o), QM_OK);
                    for (int pi = 0; pi < 3; pi++) {
                        for (size_t i0 = 0; i0 < N; i0 += pieces[pi]) {
                            const size_t n = N - i0 < pieces[pi] ? N - i0 : pieces[pi];
                            assert_int_equal(qr_matmul(ks[v], &a.m, n, x + i0 * COLS, COLS, part + i0 * ROWS, ROWS,
                                                       work, ws, &o), QM_OK);
                        }
                        if (memcmp(all, part, N * ROWS * sizeof *all) != 0)
                            fail_msg("%s, dtype %d, act %d, %d thread(s): rows in products of %zu rows differ from "
                                     "one product of %d", qr_kernels_name(ks[v]), (int)dtypes[d], (int)acts[ai],
                                     threads, pieces[pi], N);
                    }
                    if (dtypes[d] == QM_DTYPE_F32) {   /* the flag matters: a lone F32 row in the decode order */
                        o.row_invariant = false;
                        assert_int_equal(qr_matmul(ks[v], &a.m, 1, x, COLS, part, ROWS, work, ws, &o), QM_OK);
                        seen_differ = seen_differ || memcmp(all, part, ROWS * sizeof *all) != 0;
                        o.row_invariant = true;
                    }
                }
                free(work);
            }
        mat_free(&a);
    }
    if (!seen_differ) printf("(no variant sums a lone F32 row in another order here: the flag is not seen to matter)\n");
    free(x);
    free(all);
    free(part);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_bits),
        cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_opts_kernels),
        cmocka_unit_test(test_auto_decode_terms),
        cmocka_unit_test(test_row_invariant),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
