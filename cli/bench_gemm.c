/* bench_gemm.c — section 4 of `qmap bench kernels`: GEMM at n = 512 on model-sized matrices beside the
 * instruction peak, and the generic kernels once for scale. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_sections.h"

/* ---- 4. GEMM -------------------------------------------------------------------------------------- */

static int time_gemm(const qr_kernels *k, const qr_matrix *w, size_t n, const float *x, float *y, void *work,
                     size_t work_size, const qr_matmul_opts *o, double *seconds)
{
    double t0 = bm_now();
    qm_status st = qr_matmul(k, w, n, x, w->cols, y, w->rows, work, work_size, o);
    *seconds = bm_now() - t0;
    if (st != QM_OK) {
        set_error("qr_matmul (n = %zu) on %s %zux%zu failed: %s", n, dtype_label(w->dtype), w->rows, w->cols,
                  qm_status_name(st));
        return -1;
    }
    return 0;
}

typedef struct gemm_case {
    qm_dtype dtype;
    size_t rows, cols;
} gemm_case;

/* One timed GEMM run with the peak read just before and just after it (the larger counts): a
 * bm_ratio_run_fn, its fraction of the peak. */
typedef struct gemm_run {
    bench_call call;
    const qr_matrix *w;
    size_t n;
    const baseline *base;
    bool int8;
    int threads;
    double ops, executed;        /* the product's operations; multiply-adds run per one of them */
    double rate, peak;           /* out: GOP/s, the peak beside it */
    bool failed;                 /* out: set_error said why */
} gemm_run;

static double gemm_run_once(void *p)
{
    gemm_run *g = p;
    double s;
    const double before = peak_once(g->base, g->int8, g->threads);
    const bench_call *c = &g->call;
    if (time_gemm(c->k, g->w, g->n, c->x, c->y, c->work, c->work_size, c->o, &s) != 0) {
        g->failed = true;
        return NAN;
    }
    g->rate = g->ops / s / 1e9;
    g->peak = fmax(before, peak_once(g->base, g->int8, g->threads));
    return bm_ratio(g->rate * g->executed, g->peak);
}

/* The figure of the generic baseline's reference: the variant in use, Q8_ROW 4096x4096 act int8, 1 thread. */
typedef struct gemm_ref {
    bool have;
    double gops;
    int threads;
} gemm_ref;

/* What one configuration (weights, activations, threads) measured. */
typedef struct gemm_figures {
    bm_stats rate, peak, ratio;  /* GOP/s of the product, the peak beside each run, the per-run fraction */
    int reruns;
    bool have_peak, int8;        /* the CPU has the peak loop; measured against the int8 (else FMA) peak */
    double executed;             /* multiply-adds run per one of the product (2 for two int8 terms) */
    qr_act act;
    int threads;
} gemm_figures;

static void gemm_print_text(const gemm_case *gc, const bench_tensor *t, const gemm_figures *f)
{
    char shape[48];
    snprintf(shape, sizeof shape, "%zux%zu", gc->rows, gc->cols);
    printf("   %-6s %-11s act %-4s threads %-2d  ", dtype_label(gc->dtype), shape, act_name(&t->view, f->act), f->threads);
    bm_print_stats(&f->rate, "GOP/s");
    if (f->have_peak) {
        printf("  %.2f x %s peak%s [%.2f-%.2f] (peak beside it %.0f)", f->ratio.median, f->int8 ? "int8" : "FMA",
               f->executed > 1.0 ? " (2 terms)" : "", f->ratio.min, f->ratio.max, f->peak.median);
        print_reruns(f->reruns);
        printf("\n");
    } else {
        printf("  (no %s peak on this CPU)\n", f->int8 ? "int8" : "FMA");
    }
    fflush(stdout);
}

static void gemm_print_json(json_out *j, const gemm_case *gc, const bench_tensor *t, size_t n, const gemm_figures *f)
{
    jo_begin_object(j, NULL);
    jo_cstring(j, "dtype", dtype_label(gc->dtype));
    if (gc->dtype == QM_DTYPE_Q8_ROW) jo_cstring(j, "act", act_name(&t->view, f->act));
    else jo_null(j, "act");
    jo_u64(j, "rows", gc->rows);
    jo_u64(j, "cols", gc->cols);
    jo_u64(j, "n", n);
    jo_u64(j, "threads", (uint64_t)f->threads);
    bm_json_stats(j, &f->rate, "GOP/s");
    jo_cstring(j, "peak", f->int8 ? "int8" : "fma_f32");
    jo_u64(j, "executed_per_op", (uint64_t)f->executed);   /* ratio_to_peak counts GOP/s × this */
    jo_u64(j, "reruns", (uint64_t)f->reruns);
    if (f->have_peak) {
        jo_begin_object(j, "peak_beside");
        bm_json_stats(j, &f->peak, f->int8 ? "GOP/s" : "GFLOP/s");
        jo_end_object(j);
        jo_begin_object(j, "ratio_to_peak");
        bm_json_stats(j, &f->ratio, "ratio");
        jo_end_object(j);
    } else {
        jo_null(j, "ratio_to_peak");
    }
    jo_end_object(j);
}

static int bench_gemm_one(const bench_cfg *c, const qr_kernels *k, const baseline *base, const gemm_case *gc,
                          gemm_ref *ref, json_out *j)
{
    bench_tensor t;
    size_t n = c->gemm_n;
    float *x = NULL, *y = NULL;
    void *work = NULL;
    double *rates = NULL, *peaks = NULL, *ratios = NULL;
    int rc = -1;
    if (tensor_make(&t, gc->dtype, gc->rows, gc->cols, 0x7f4a7c159e3779b9ull + gc->rows * 3 + gc->cols) != 0) return -1;
    x = random_floats(n * gc->cols, 11);
    y = malloc(n * gc->rows * sizeof *y);
    rates = malloc((size_t)c->runs * sizeof *rates);
    peaks = malloc((size_t)c->runs * sizeof *peaks);
    ratios = malloc((size_t)c->runs * sizeof *ratios);
    if (!x || !y || !rates || !peaks || !ratios) { set_error("out of memory"); goto out; }
    /* Q8_ROW: int8 X, float X, two-term int8 X (whose GOP/s count the product's operations, not the
     * twice as many it executes; its fraction of the peak counts what it executes, as qmap bench MODEL
     * does, so that 1.0 is the peak and the check above BM_RATIO_LIMIT can catch a wrong one) */
    static const qr_act acts[3] = { QR_ACT_INT8, QR_ACT_F32, QR_ACT_INT8X2 };
    const int n_act = gc->dtype == QM_DTYPE_Q8_ROW ? 3 : 1;
    size_t work_size = 0;
    for (int ai = 0; ai < n_act; ai++)
        for (int ti = 0; ti < c->n_threads; ti++) {
            qr_matmul_opts o = { .pool = c->pools[ti], .act = acts[ai], .kernels = NULL, .row_invariant = false };
            size_t s = qr_matmul_work_size(&t.view, n, &o);
            if (s > work_size) work_size = s;
        }
    if (work_size && !(work = aligned_alloc(64, (work_size + 63) / 64 * 64))) { set_error("out of memory"); goto out; }
    double ops = 2.0 * (double)n * (double)gc->rows * (double)gc->cols;
    for (int ai = 0; ai < n_act; ai++) {
        qr_act act = gc->dtype == QM_DTYPE_Q8_ROW ? acts[ai] : QR_ACT_F32;
        bool int8 = gc->dtype == QM_DTYPE_Q8_ROW && act != QR_ACT_F32;
        const double executed = act == QR_ACT_INT8X2 ? 2.0 : 1.0;   /* multiply-adds run per one of the product */
        for (int ti = 0; ti < c->n_threads; ti++) {
            qr_matmul_opts o = { .pool = c->pools[ti], .act = act, .kernels = NULL, .row_invariant = false };
            double s;
            if (time_gemm(k, &t.view, n, x, y, work, work_size, &o, &s) != 0) goto out; /* warm-up */
            /* each run times the peak loop just before and just after the GEMM and takes the larger (as
             * qmap bench MODEL does): the ratio is per run, so drift of the host's clock between runs
             * cancels, and a peak loop that lost part of its time to another process on a shared host
             * (seen: 771 GOP/s beside 930) does not pass for the CPU's limit; a run still above
             * BM_RATIO_LIMIT x it is taken again (bm_run_beside_limit) */
            const bool have_peak = bm_peak_label(int8 ? BM_PEAK_INT8 : BM_PEAK_FMA) != NULL;
            gemm_run g = { .call = { k, x, y, work, work_size, &o }, .w = &t.view, .n = n, .base = base,
                           .int8 = int8, .threads = c->threads[ti], .ops = ops, .executed = executed };
            int reruns = 0;
            for (int r = 0; r < c->runs; r++) {
                ratios[r] = bm_run_beside_limit(gemm_run_once, &g, BM_MAX_RERUNS, &reruns);
                if (g.failed) goto out;
                /* a GEMM cannot run more multiply-adds than the CPU issues: above the peak in every try,
                 * the peak is wrong */
                if (have_peak && ratios[r] > BM_RATIO_LIMIT) {
                    set_error("GEMM %s %zux%zu act %s threads %d ran at %.2f x the %s peak measured beside it in %d "
                              "tries: the peak baseline is wrong (a kernel cannot exceed it), so no ratio is printed",
                              dtype_label(gc->dtype), gc->rows, gc->cols, act_name(&t.view, act), c->threads[ti],
                              ratios[r], int8 ? "int8" : "FMA", BM_MAX_RERUNS + 1);
                    goto out;
                }
                rates[r] = g.rate;
                peaks[r] = g.peak;
            }
            bm_stats st = bm_stats_of(rates, c->runs), spk = bm_stats_of(peaks, c->runs), sr = bm_stats_of(ratios, c->runs);
            if (int8 && gc->rows == 4096 && gc->cols == 4096 && (!ref->have || c->threads[ti] == 1)) {
                ref->have = true;
                ref->gops = st.median;
                ref->threads = c->threads[ti];
            }
            const gemm_figures fig = { .rate = st, .peak = spk, .ratio = sr, .reruns = reruns, .have_peak = have_peak,
                                       .int8 = int8, .executed = executed, .act = act, .threads = c->threads[ti] };
            if (c->json) gemm_print_json(j, gc, &t, n, &fig);
            else gemm_print_text(gc, &t, &fig);
        }
    }
    rc = 0;
out:
    free(work);
    free(ratios);
    free(peaks);
    free(rates);
    free(y);
    free(x);
    tensor_free(&t);
    return rc;
}

/* The generic (portable C) variant once: Q8_ROW 4096x4096, act int8, 1 thread, one timed run. */
static int bench_gemm_generic(const bench_cfg *c, const qr_kernels *k, const gemm_ref *ref, json_out *j)
{
    const qr_kernels *g = qr_kernels_for(QM_CPU_GENERIC);
    if (!g) { set_error("the generic kernels are missing from this build"); return -1; }
    bench_tensor t;
    size_t n = c->generic_n, rows = 4096, cols = 4096;
    float *x = NULL, *y = NULL;
    void *work = NULL;
    int rc = -1;
    if (tensor_make(&t, QM_DTYPE_Q8_ROW, rows, cols, 0x7f4a7c159e3779b9ull + rows * 3 + cols) != 0) return -1;
    qr_matmul_opts o = { .pool = NULL, .act = QR_ACT_INT8, .kernels = NULL, .row_invariant = false };   /* one thread */
    size_t work_size = qr_matmul_work_size(&t.view, n, &o);
    x = random_floats(n * cols, 11);
    y = malloc(n * rows * sizeof *y);
    if (!x || !y || (work_size && !(work = aligned_alloc(64, (work_size + 63) / 64 * 64)))) {
        set_error("out of memory");
        goto out;
    }
    double s;
    if (time_gemm(g, &t.view, n, x, y, work, work_size, &o, &s) != 0) goto out;
    double gops = 2.0 * (double)n * (double)rows * (double)cols / s / 1e9;
    double speedup = ref->have ? bm_ratio(ref->gops, gops) : 0.0 / 0.0;
    if (!c->json) {
        printf("   naive baseline: %s kernels, Q8_ROW 4096x4096 act int8, n = %zu, threads 1, a single run: "
               "%.2f GOP/s", qr_kernels_name(g), n, gops);
        if (ref->have)
            printf("; %s at n = %zu, threads %d is %.0fx faster\n", qr_kernels_name(k), c->gemm_n, ref->threads,
                   speedup);
        else printf("\n");
    } else {
        jo_begin_object(j, "gemm_generic");
        jo_cstring(j, "kernels", qr_kernels_name(g));
        jo_cstring(j, "dtype", "Q8_ROW");
        jo_cstring(j, "act", "int8");
        jo_u64(j, "rows", rows);
        jo_u64(j, "cols", cols);
        jo_u64(j, "n", n);
        jo_u64(j, "threads", 1);
        jo_u64(j, "runs", 1);
        jo_f64(j, "value", gops);
        jo_cstring(j, "unit", "GOP/s");
        jo_f64(j, "speedup_of_selected_kernels", speedup);
        jo_end_object(j);
    }
    rc = 0;
out:
    free(work);
    free(y);
    free(x);
    tensor_free(&t);
    return rc;
}

int bench_gemm(const bench_cfg *c, const qr_kernels *k, const baseline *base, json_out *j)
{
    static const gemm_case cases[] = {
        { QM_DTYPE_Q8_ROW, 4096, 4096 },  { QM_DTYPE_Q8_ROW, 11008, 4096 }, { QM_DTYPE_Q8_ROW, 4096, 11008 },
        { QM_DTYPE_F16, 4096, 4096 },     { QM_DTYPE_F32, 4096, 4096 },
    };
    gemm_ref ref = { 0 };
    if (!c->json)
        printf("\n4. GEMM, n = %zu rows of X, anonymous memory: GOP/s = 2*n*rows*cols / time; \"x peak\" = median of "
               "per-run ratios to the\n   peak loop of section 2 timed beside each run, same threads (int8 for act "
               "int8 and i8x2, FMA otherwise)\n", c->gemm_n);
    else jo_begin_array(j, "gemm");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (bench_gemm_one(c, k, base, &cases[i], &ref, j) != 0) return -1;
    if (c->json) jo_end_array(j);
    return bench_gemm_generic(c, k, &ref, j);
}

