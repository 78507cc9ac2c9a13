/* bench_rows.c — section 4b of `qmap bench kernels`: a batch's decode step, a few rows of X (one per
 * sequence) over the same stack of weights as section 3's matvec. Batching pays when n rows cost much
 * less than n single-row passes: the weights are read once for all of them, and the step becomes bound by
 * the multiply-adds instead (the peak of section 2, timed beside each run). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_sections.h"

/* The row counts measured: one sequence, then what `qmap serve --parallel` runs, up to one row group. */
static const size_t k_rows[] = { 1, 2, 4, 8, 15 };
#define N_ROWS (sizeof k_rows / sizeof k_rows[0])
#define STACK_LAYER_ROWS 4096

/* One pass: a product of n rows with each layer of the stack, as a batched decode step does. */
static int time_pass(const bench_call *c, const qr_matrix *w, size_t n, double *seconds)
{
    qm_status st = QM_OK;
    const double t0 = bm_now();
    for (size_t r = 0; r < w->rows && st == QM_OK; r += STACK_LAYER_ROWS) {
        const size_t nr = w->rows - r < STACK_LAYER_ROWS ? w->rows - r : STACK_LAYER_ROWS;
        qr_matrix v = qr_matrix_rows(w, r, nr);
        st = qr_matmul(c->k, &v, n, c->x, w->cols, c->y, STACK_LAYER_ROWS, c->work, c->work_size, c->o);
    }
    *seconds = bm_now() - t0;
    if (st != QM_OK) {
        set_error("qr_matmul (n = %zu) on Q8_ROW %zux%zu failed: %s", n, w->rows, w->cols, qm_status_name(st));
        return -1;
    }
    return 0;
}

/* What one (act, threads) configuration measured: per row count, the pass time and the int8 peak beside. */
typedef struct rows_figures {
    bm_stats seconds[N_ROWS], peak[N_ROWS];
} rows_figures;

/* The warm-up, then c->runs runs of every row count in turn (so a drift of the host hits them alike). */
static int rows_measure(const bench_cfg *c, const bench_call *call, const baseline *base, const qr_matrix *w,
                        int threads, rows_figures *f)
{
    double *s = malloc(N_ROWS * (size_t)c->runs * 2 * sizeof *s), t;
    if (!s) {
        set_error("out of memory");
        return -1;
    }
    double *pk = s + N_ROWS * (size_t)c->runs;
    int rc = 0;
    for (size_t i = 0; i < N_ROWS && rc == 0; i++) rc = time_pass(call, w, k_rows[i], &t);
    for (int r = 0; r < c->runs && rc == 0; r++)
        for (size_t i = 0; i < N_ROWS && rc == 0; i++) {
            const double before = peak_once(base, true, threads);
            rc = time_pass(call, w, k_rows[i], &s[i * (size_t)c->runs + (size_t)r]);
            pk[i * (size_t)c->runs + (size_t)r] = fmax(before, peak_once(base, true, threads));
        }
    for (size_t i = 0; i < N_ROWS && rc == 0; i++) {
        f->seconds[i] = bm_stats_of(s + i * (size_t)c->runs, c->runs);
        f->peak[i] = bm_stats_of(pk + i * (size_t)c->runs, c->runs);
    }
    free(s);
    return rc;
}

/* GOP/s of the multiply-adds executed (two terms run each twice) over the int8 peak beside it. */
static double of_peak(const qr_matrix *w, size_t n, int terms, double seconds, double peak)
{
    return bm_ratio(2.0 * (double)n * (double)w->rows * (double)w->cols * terms / seconds / 1e9, peak);
}

static void rows_print_text(const bench_tensor *t, qr_act act, int terms, int threads, const rows_figures *f)
{
    const qr_matrix *w = &t->view;
    for (size_t i = 0; i < N_ROWS; i++) {
        const double s = f->seconds[i].median, cost = s / f->seconds[0].median;
        printf("   Q8_ROW act %-4s threads %-2d n %2zu  %8.2f ms/pass  %6.2f GB/s  cost %5.2f x n=1  "
               "rows/time %5.2f x n=1  %.2f x int8 peak\n",
               act_name(w, act), threads, k_rows[i], s * 1e3, (double)t->read_bytes / s / 1e9, cost,
               (double)k_rows[i] / cost, of_peak(w, k_rows[i], terms, s, f->peak[i].median));
    }
    fflush(stdout);
}

static void rows_print_json(json_out *j, const qr_matrix *w, qr_act act, int terms, int threads,
                            const rows_figures *f)
{
    for (size_t i = 0; i < N_ROWS; i++) {
        jo_begin_object(j, NULL);
        jo_cstring(j, "act", act_name(w, act));
        jo_u64(j, "threads", (uint64_t)threads);
        jo_u64(j, "n", k_rows[i]);
        jo_u64(j, "rows", w->rows);
        jo_u64(j, "cols", w->cols);
        bm_json_stats(j, &f->seconds[i], "s");
        jo_f64(j, "cost_vs_n1", f->seconds[i].median / f->seconds[0].median);
        jo_f64(j, "ratio_to_int8_peak", of_peak(w, k_rows[i], terms, f->seconds[i].median, f->peak[i].median));
        jo_end_object(j);
    }
}

int bench_rows(const bench_cfg *c, const qr_kernels *k, const baseline *base, json_out *j)
{
    const size_t cols = (size_t)c->mv_cols[0];
    size_t layers = GIB / c->mv_scale / cols / STACK_LAYER_ROWS;
    bench_tensor t;
    if (tensor_make(&t, QM_DTYPE_Q8_ROW, (layers ? layers : 1) * STACK_LAYER_ROWS, cols, 0x6a09e667f3bcc909ull) != 0)
        return -1;
    float *x = random_floats(k_rows[N_ROWS - 1] * cols, 11);
    float *y = calloc(k_rows[N_ROWS - 1] * STACK_LAYER_ROWS, sizeof *y);
    void *work = NULL;
    size_t work_size = 0;
    static const qr_act acts[] = { QR_ACT_INT8, QR_ACT_INT8X2 };
    for (int a = 0; a < 2; a++)
        for (int ti = 0; ti < c->n_threads; ti++) {
            qr_matmul_opts o = { .pool = c->pools[ti], .act = acts[a], .kernels = NULL, .row_invariant = true };
            size_t sz = qr_matmul_work_size(&t.view, k_rows[N_ROWS - 1], &o);
            if (sz > work_size) work_size = sz;
        }
    int rc = -1;
    if (!x || !y || (work_size && !(work = aligned_alloc(64, (work_size + 63) / 64 * 64)))) {
        set_error("out of memory");
        goto out;
    }
    if (!c->json)
        printf("\n4b. a batch's decode step: n rows of X (one per sequence) over the stack of section 3 (Q8_ROW, "
               "%zu cols, %zu MB), as `qmap serve` runs them\n    (row-invariant); cost = time of the pass / "
               "time at n = 1; rows/time = n / cost, the most a batch of n can decode per time of one\n",
               cols, t.read_bytes >> 20);
    else jo_begin_array(j, "batch_rows");
    for (int a = 0; a < 2; a++)
        for (int ti = 0; ti < c->n_threads; ti++) {
            qr_matmul_opts o = { .pool = c->pools[ti], .act = acts[a], .kernels = NULL, .row_invariant = true };
            bench_call call = { k, x, y, work, work_size, &o };
            rows_figures f;
            if (rows_measure(c, &call, base, &t.view, c->threads[ti], &f) != 0) goto out;
            const int terms = qr_matmul_int8_terms(&t.view, 2, &o);
            if (c->json) rows_print_json(j, &t.view, acts[a], terms, c->threads[ti], &f);
            else rows_print_text(&t, acts[a], terms, c->threads[ti], &f);
        }
    if (c->json) jo_end_array(j);
    rc = 0;
out:
    free(work);
    free(y);
    free(x);
    tensor_free(&t);
    return rc;
}
