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
 *   - Int8 X (QR_ACT_INT8 and QR_ACT_INT8X2, Q8_ROW, every kernel table this CPU runs): when the ranks
 *     share a panel's columns, each rank's product with qr_matmul_opts.x_amax_reduce = qr_shard_amax
 *     (the ranks as threads, allreduce_max over a barrier) adds up to one process's product of the whole
 *     panel rows within the float bound of the summation order, at 1 and 5 rows; without the reduce
 *     (each rank's own scales) some row is off by more than that bound (the check can fail).
 *   - qr_shard_check_divides names the key and the rank count.
 * PRNG: splitmix64 (tu_rng) with fixed seeds. */
#include "test_mat.h"
#include "test_util.h"

#include <math.h>
#include <pthread.h>
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
    const qr_matmul_opts o = { .pool = NULL, .act = QR_ACT_F32, .kernels = NULL, .row_invariant = false };
    assert_int_equal(qr_matmul(NULL, &t.m, 1, x, cols, full, rows, NULL, 0, &o), QM_OK);
    for (uint32_t r = 0; r < N; r++) {
        qr_shard sh = { .rank = r, .n_ranks = N };
        qr_shard_store st = { 0 };
        qm_error err;
        qr_matrix part;
        size_t panels = 0;
        qr_shard_part sp;
        snprintf(what, sizeof what, "%s %zux%zu, rank %u of %u", dtype_name(dtype), rows, cols, r, N);
        assert_int_equal(qr_shard_row_parallel(&sh, &st, &t.m, rows, 1, &part, &panels, &sp, "m.qmap", "w", &err), QM_OK);
        assert_int_equal(sp.groups, 1);   /* every rank's columns come from the one panel */
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
                qr_shard sh = { .rank = r, .n_ranks = N };
                qr_shard_store st = { 0 };
                qm_error err;
                qr_matrix part;
                size_t panels = 0;
                qr_shard_part sp;
                qm_status rc = qr_shard_row_parallel(&sh, &st, &t.m, rows, P, &part, &panels, &sp, "m.qmap", "blk.0.w",
                                                     &err);
                if (P % N == 0) {
                    assert_int_equal(rc, QM_OK);
                    assert_int_equal(panels, P / N);
                    assert_int_equal(st.n, 0);   /* a view of consecutive panels */
                    assert_ptr_equal(part.data, (const uint8_t *)t.m.data + (size_t)r * (P / N) * rows * t.m.row_stride);
                    assert_int_equal(part.rows, P / N * rows);
                    assert_int_equal(sp.groups, 0);   /* whole panels: the rank's own int8 scales */
                } else if (N % P == 0) {
                    assert_int_equal(rc, QM_OK);
                    assert_int_equal(panels, 1);
                    const size_t per = N / P, k = r % per, c0 = width * k / per;
                    const qr_matrix panel = qr_matrix_rows(&t.m, r / per * rows, rows);
                    assert_int_equal(part.cols, width * (k + 1) / per - c0);
                    check_q8_slice(&panel, &part, c0, "a share of one panel");
                    assert_int_equal(sp.group, r / per);
                    assert_int_equal(sp.groups, P);
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

/* ---- int8 X across ranks: N threads stand for the ranks ------------------------------------------------ */

#define MAX_RANKS 4
#define MAX_FLOATS 64

/* allreduce_max over a barrier: every rank writes its buf, the last to arrive takes the max, all read it. */
typedef struct fake_comm {
    pthread_barrier_t bar;
    uint32_t n;
    float bufs[MAX_RANKS][MAX_FLOATS], out[MAX_FLOATS];
    size_t len;
} fake_comm;

typedef struct fake_rank {
    fake_comm *comm;
    uint32_t rank;
} fake_rank;

static int fake_allreduce_max(void *ctx, float *buf, size_t n)
{
    fake_rank *fr = ctx;
    fake_comm *c = fr->comm;
    if (n > MAX_FLOATS) return -1;
    memcpy(c->bufs[fr->rank], buf, n * sizeof *buf);
    c->len = n;
    if (pthread_barrier_wait(&c->bar) == PTHREAD_BARRIER_SERIAL_THREAD)
        for (size_t i = 0; i < n; i++) {
            float m = 0.0f;
            for (uint32_t r = 0; r < c->n; r++) m = c->bufs[r][i] > m ? c->bufs[r][i] : m;
            c->out[i] = m;
        }
    pthread_barrier_wait(&c->bar);
    memcpy(buf, c->out, n * sizeof *buf);
    pthread_barrier_wait(&c->bar);   /* no rank writes its next call's buf before every rank has read */
    return 0;
}

typedef struct rank_job {
    const qr_matrix *w;            /* the whole matrix: P panels of `rows` rows */
    size_t rows, panels, n;
    const float *x;                /* n rows of the whole X (panels · width columns) */
    const qr_kernels *k;
    qr_act act;
    bool reduce;
    fake_rank fr;
    float *y;                      /* n × rows: this rank's partial product */
    qm_status st;
} rank_job;

static void *rank_main(void *arg)
{
    rank_job *j = arg;
    const uint32_t N = j->fr.comm->n;
    qr_shard sh = { .rank = j->fr.rank, .n_ranks = N, .ctx = &j->fr, .allreduce_max = fake_allreduce_max };
    qr_shard_store st = { 0 };
    qm_error err;
    qr_matrix part;
    size_t out_panels;
    qr_shard_part sp;
    j->st = qr_shard_row_parallel(&sh, &st, j->w, j->rows, j->panels, &part, &out_panels, &sp, "m.qmap", "w", &err);
    if (j->st != QM_OK) return NULL;
    const size_t width = j->w->cols, per = N / j->panels, k = j->fr.rank % per;
    const size_t c0 = sp.group * width + qr_shard_begin(width, (uint32_t)k, (uint32_t)per);
    qr_matmul_opts o = { .act = j->act, .kernels = j->k };
    if (j->reduce) {
        o.x_amax_reduce = qr_shard_amax;
        o.x_amax_ctx = &sp;
    }
    const size_t ldx = j->panels * width, work_size = qr_matmul_work_size(&part, j->n, &o);
    void *work = work_size ? malloc(work_size) : NULL;
    j->st = qr_matmul(NULL, &part, j->n, j->x + c0, ldx, j->y, j->rows, work, work_size, &o);
    free(work);
    qr_shard_store_free(&st);
    return NULL;
}

/* The ranks' partial products summed, and the worst row's distance from one process's product over its
 * bound; *over is set if some row lies beyond its bound. */
static void ranks_vs_one(const mat *t, size_t rows, size_t panels, size_t n, const float *x, const float *whole,
                         const qr_kernels *k, qr_act act, uint32_t N, bool reduce, bool *over, const char *what)
{
    fake_comm comm = { .n = N };
    pthread_barrier_init(&comm.bar, NULL, N);
    rank_job jobs[MAX_RANKS];
    pthread_t th[MAX_RANKS];
    for (uint32_t r = 0; r < N; r++) {
        jobs[r] = (rank_job){ .w = &t->m, .rows = rows, .panels = panels, .n = n, .x = x, .k = k, .act = act,
                              .reduce = reduce, .fr = { &comm, r }, .y = malloc(n * rows * sizeof(float)) };
        assert_non_null(jobs[r].y);
        assert_int_equal(pthread_create(&th[r], NULL, rank_main, &jobs[r]), 0);
    }
    for (uint32_t r = 0; r < N; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&comm.bar);
    const size_t width = t->m.cols, ldx = panels * width;
    *over = false;
    for (size_t i = 0; i < n; i++)
        for (size_t o = 0; o < rows; o++) {
            double sum = 0, bound = 0;
            for (uint32_t r = 0; r < N; r++) sum += jobs[r].y[i * rows + o];
            for (size_t p = 0; p < panels; p++)   /* (N + 4)·2⁻²⁴·Σ|w·x|: a float sum of N parts, rounded */
                for (size_t c = 0; c < width; c++)
                    bound += fabs((double)t->wf[(p * rows + o) * width + c] * x[i * ldx + p * width + c]);
            bound = bound * 1.5 * (double)(N + 4) * 0x1p-24 + 1e-30;
            if (fabs(sum - whole[i * rows + o]) > bound) {
                if (reduce)
                    fail_msg("%s: row %zu output %zu: the ranks add to %.9g, one process %.9g (bound %.3g)", what, i, o,
                             sum, whole[i * rows + o], bound);
                *over = true;
            }
        }
    for (uint32_t r = 0; r < N; r++) {
        assert_int_equal(jobs[r].st, QM_OK);
        free(jobs[r].y);
    }
}

/* One process's product of the P-panel matrix: Σ_p panel p · X's columns of panel p (qr_linear_panels). */
static void one_process(const mat *t, size_t rows, size_t panels, size_t n, const float *x, const qr_kernels *k,
                        qr_act act, float *y)
{
    const size_t width = t->m.cols, ldx = panels * width;
    float *tmp = malloc(n * rows * sizeof *tmp);
    assert_non_null(tmp);
    const qr_matmul_opts o = { .act = act, .kernels = k };
    for (size_t p = 0; p < panels; p++) {
        const qr_matrix pw = qr_matrix_rows(&t->m, p * rows, rows);
        const size_t ws = qr_matmul_work_size(&pw, n, &o);
        void *work = ws ? malloc(ws) : NULL;
        assert_int_equal(qr_matmul(NULL, &pw, n, x + p * width, ldx, p ? tmp : y, rows, work, ws, &o), QM_OK);
        free(work);
        for (size_t i = 0; p && i < n * rows; i++) y[i] += tmp[i];
    }
    free(tmp);
}

static void test_int8_parts_equal_one_process(void **state)
{
    (void)state;
    static const struct { size_t panels; uint32_t N; } cases[] = { { 1, 2 }, { 1, 3 }, { 1, 4 }, { 2, 4 } };
    static const qr_act acts[2] = { QR_ACT_INT8, QR_ACT_INT8X2 };
    static const size_t ns[2] = { 1, 5 };
    const size_t rows = 16, width = 384;
    bool local_scales_differ = false;
    for (int level = QM_CPU_GENERIC; level <= QM_CPU_AVX512; level++) {
        const qr_kernels *k = qr_kernels_for((qm_cpu_level)level);
        if (!k) continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const size_t P = cases[c].panels;
            mat t = mat_new(QM_DTYPE_Q8_ROW, rows * P, width, 31 + P);
            for (int a = 0; a < 2; a++)
                for (int ni = 0; ni < 2; ni++) {
                    const size_t n = ns[ni];
                    float *x = malloc(n * P * width * sizeof *x), *whole = malloc(n * rows * sizeof *whole);
                    assert_true(x && whole);
                    uint64_t s = 900 + c * 10 + (uint64_t)n;
                    /* each rank's columns on their own scale, so that local maxima differ from the row's */
                    for (size_t i = 0; i < n * P * width; i++)
                        x[i] = tm_sym(&s) * (float)(1 + 7 * ((i % width) * cases[c].N / width));
                    one_process(&t, rows, P, n, x, k, acts[a], whole);
                    char what[160];
                    snprintf(what, sizeof what, "%s, %s, %zu panel(s), %u ranks, %zu row(s)", qr_kernels_name(k),
                             acts[a] == QR_ACT_INT8 ? "int8" : "int8x2", P, cases[c].N, n);
                    bool over;
                    ranks_vs_one(&t, rows, P, n, x, whole, k, acts[a], cases[c].N, true, &over, what);
                    ranks_vs_one(&t, rows, P, n, x, whole, k, acts[a], cases[c].N, false, &over, what);
                    local_scales_differ |= over;
                    free(x), free(whole);
                }
            mat_free(&t);
        }
    }
    if (!local_scales_differ) fail_msg("each rank's own int8 scales gave one process's product: the check cannot fail");
}

static void test_check_divides(void **state)
{
    (void)state;
    qr_shard sh = { .rank = 0, .n_ranks = 3 };
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
        cmocka_unit_test(test_int8_parts_equal_one_process),
        cmocka_unit_test(test_check_divides),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
