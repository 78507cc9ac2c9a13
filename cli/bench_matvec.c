/* bench_matvec.c — sections 3 and 3b of `qmap bench kernels`: matvec over a stack of model-sized matrices
 * beside the bandwidth baseline, from anonymous memory and from the mapped container, and the first pass
 * through a freshly opened mapping. */
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

/* ---- 3. matvec ------------------------------------------------------------------------------------- */


/* W is a stack of MATVEC_LAYER_ROWS x cols matrices, one after another as a model's layers lie in a
 * container: one timed pass is a matvec with each of them, as a decode step does. */
#define MATVEC_LAYER_ROWS 4096

static int time_matvec(const qr_kernels *k, const qr_matrix *w, const float *x, float *y, void *work, size_t work_size,
                       const qr_matmul_opts *o, double *seconds)
{
    qm_status st = QM_OK;
    double t0 = bm_now();
    for (size_t r = 0; r < w->rows && st == QM_OK; r += MATVEC_LAYER_ROWS) {
        qr_matrix v = qr_matrix_rows(w, r, w->rows - r < MATVEC_LAYER_ROWS ? w->rows - r : MATVEC_LAYER_ROWS);
        st = qr_matvec(k, &v, x, y + r, work, work_size, o);
    }
    *seconds = bm_now() - t0;
    if (st != QM_OK) {
        set_error("qr_matvec on %s %zux%zu failed: %s", dtype_label(w->dtype), w->rows, w->cols, qm_status_name(st));
        return -1;
    }
    return 0;
}

/* One run: the streaming read, the anonymous copy and the mapping timed back to back, in an order that
 * rotates with `run` so no measurement always follows another. A bm_ratio_run_fn: the larger of the two
 * kernels' fractions of the bandwidth read beside them. */
typedef struct matvec_run {
    bench_call call;
    const bench_tensor *t;
    const mapped *m;
    const baseline *base;
    int threads, run;
    double bw, anon, map;        /* out: GB/s */
    bool failed;                 /* out: set_error said why */
} matvec_run;

static double matvec_run_once(void *p)
{
    matvec_run *v = p;
    for (int q = 0; q < 3; q++) {
        int which = (q + v->run) % 3;
        if (which == 0) {
            v->bw = bandwidth_once(v->base, v->threads);
            continue;
        }
        bool anon = which == 1;
        double s;
        const bench_call *c = &v->call;
        if (time_matvec(c->k, anon ? &v->t->view : &v->m->view, c->x, c->y, c->work, c->work_size, c->o, &s) != 0) {
            v->failed = true;
            return NAN;
        }
        *(anon ? &v->anon : &v->map) = (double)v->t->read_bytes / s / 1e9;
    }
    return fmax(bm_ratio(v->anon, v->bw), bm_ratio(v->map, v->bw));
}

/* The buffers of one matrix's measurements: X, the two outputs, the work buffer, and each run's figures. */
typedef struct mv_bufs {
    float *x, *y, *y2;
    void *work;
    size_t work_size;
    double *anon, *map, *bw, *anon_ratio, *map_ratio, *map_over_anon;   /* [runs] */
} mv_bufs;

static void mv_bufs_free(mv_bufs *b)
{
    free(b->work);
    free(b->map_over_anon);
    free(b->map_ratio);
    free(b->anon_ratio);
    free(b->bw);
    free(b->map);
    free(b->anon);
    free(b->y2);
    free(b->y);
    free(b->x);
}

/* 0, or -1 after set_error. The work buffer is sized for the largest need of every configuration. */
static int mv_bufs_alloc(const bench_cfg *c, const bench_tensor *t, mv_bufs *b)
{
    const size_t runs = (size_t)c->runs;
    memset(b, 0, sizeof *b);
    b->x = random_floats(t->cols, 7);
    b->y = calloc(t->rows, sizeof *b->y);
    b->y2 = calloc(t->rows, sizeof *b->y2);
    double **series[] = { &b->anon, &b->map, &b->bw, &b->anon_ratio, &b->map_ratio, &b->map_over_anon };
    bool ok = b->x && b->y && b->y2;
    for (size_t i = 0; i < sizeof series / sizeof series[0]; i++) ok = ok && (*series[i] = malloc(runs * sizeof(double)));
    static const qr_act acts[] = { QR_ACT_INT8, QR_ACT_INT8X2, QR_ACT_F32 };
    for (int act = 0; act < 3; act++)
        for (int ti = 0; ti < c->n_threads; ti++) {
            qr_matmul_opts o = { .pool = c->pools[ti], .act = acts[act], .kernels = NULL, .row_invariant = false };
            size_t sz = qr_matmul_work_size(&t->view, 1, &o);
            if (sz > b->work_size) b->work_size = sz;
        }
    if (ok && b->work_size) ok = (b->work = aligned_alloc(64, (b->work_size + 63) / 64 * 64)) != NULL;
    if (!ok) {
        set_error("out of memory");
        return -1;
    }
    return 0;
}

/* What one configuration (weights, activations, threads) measured. */
typedef struct mv_figures {
    bm_stats bw, anon, map, anon_ratio, map_ratio, map_over_anon;
    double first_anon, first_map;   /* GB/s of the untimed first runs (the mapped one pays the page faults) */
    int reruns;
} mv_figures;

/* The warm-ups, then c->runs runs of t over anonymous memory and m over the mapping with act on thread
 * count index ti, each beside the bandwidth baseline; 0, or -1 after set_error. */
static int mv_measure(const bench_cfg *c, const qr_kernels *k, const baseline *base, bench_tensor *t, mapped *m,
                      mv_bufs *b, qr_act act, int ti, mv_figures *fig)
{
    qr_matmul_opts o = { .pool = c->pools[ti], .act = act, .kernels = NULL, .row_invariant = false };
    double first_a, first_m;
    if (time_matvec(k, &t->view, b->x, b->y, b->work, b->work_size, &o, &first_a) != 0) return -1;
    if (time_matvec(k, &m->view, b->x, b->y2, b->work, b->work_size, &o, &first_m) != 0) return -1;
    /* the same bytes through the same kernel: the two placements must agree exactly */
    if (memcmp(b->y, b->y2, t->rows * sizeof *b->y) != 0)
        fprintf(stderr, "qmap bench: warning: %s %zux%zu act %s threads %d: mapped and anonymous results differ\n",
                dtype_label(t->dtype), t->rows, t->cols, act_name(&t->view, act), c->threads[ti]);
    /* Each run times the streaming read, the anonymous copy and the mapping back to back (matvec_run_once);
     * the ratios are per run, and a run above BM_RATIO_LIMIT x the read beside it is taken again */
    matvec_run mv = { .call = { k, b->x, b->y, b->work, b->work_size, &o }, .t = t, .m = m, .base = base,
                      .threads = c->threads[ti] };
    fig->reruns = 0;
    for (int r = 0; r < c->runs; r++) {
        mv.run = r;
        double worst = bm_run_beside_limit(matvec_run_once, &mv, BM_MAX_RERUNS, &fig->reruns);
        if (mv.failed) return -1;
        /* a kernel cannot read memory faster than the best plain read of it: above it in every try, the
         * baseline is wrong */
        if (worst > BM_RATIO_LIMIT) {
            set_error("matvec %s %zux%zu act %s threads %d read at %.2f (anonymous) / %.2f (mapped) x the bandwidth "
                      "measured beside it in %d tries: the bandwidth baseline is wrong (a kernel cannot read faster "
                      "than memory), so no ratio is printed", dtype_label(t->dtype), t->rows, t->cols,
                      act_name(&t->view, act), c->threads[ti], bm_ratio(mv.anon, mv.bw), bm_ratio(mv.map, mv.bw),
                      BM_MAX_RERUNS + 1);
            return -1;
        }
        b->anon[r] = mv.anon;
        b->map[r] = mv.map;
        b->bw[r] = mv.bw;
        b->anon_ratio[r] = bm_ratio(mv.anon, mv.bw);
        b->map_ratio[r] = bm_ratio(mv.map, mv.bw);
        b->map_over_anon[r] = bm_ratio(mv.map, mv.anon);
    }
    fig->bw = bm_stats_of(b->bw, c->runs);
    fig->anon = bm_stats_of(b->anon, c->runs);
    fig->map = bm_stats_of(b->map, c->runs);
    fig->anon_ratio = bm_stats_of(b->anon_ratio, c->runs);
    fig->map_ratio = bm_stats_of(b->map_ratio, c->runs);
    fig->map_over_anon = bm_stats_of(b->map_over_anon, c->runs);
    fig->first_anon = (double)t->read_bytes / first_a / 1e9;
    fig->first_map = (double)t->read_bytes / first_m / 1e9;
    return 0;
}

static void mv_print_text(const bench_tensor *t, qr_act act, int threads, const mv_figures *f)
{
    char head[96], shape[48];
    snprintf(shape, sizeof shape, "%zux%zu", t->rows, t->cols);
    snprintf(head, sizeof head, "%-6s %-11s act %-4s threads %-2d", dtype_label(t->dtype), shape,
             act_name(&t->view, act), threads);
    printf("   %s  bandwidth ", head);
    bm_print_stats(&f->bw, "GB/s");
    printf("\n   %*s  anonymous ", (int)strlen(head), "");
    bm_print_stats(&f->anon, "GB/s");
    printf("  %.2f x bw [%.2f-%.2f]  (first run %.2f GB/s)\n", f->anon_ratio.median, f->anon_ratio.min,
           f->anon_ratio.max, f->first_anon);
    printf("   %*s  mapped    ", (int)strlen(head), "");
    bm_print_stats(&f->map, "GB/s");
    printf("  %.2f x bw [%.2f-%.2f]  (first run %.2f GB/s)  mapped/anonymous %.2f [%.2f-%.2f]", f->map_ratio.median,
           f->map_ratio.min, f->map_ratio.max, f->first_map, f->map_over_anon.median, f->map_over_anon.min,
           f->map_over_anon.max);
    print_reruns(f->reruns);
    printf("\n");
    fflush(stdout);
}

/* One placement's object: its GB/s, its ratio to the bandwidth and its first run. */
static void mv_json_placement(json_out *j, const char *key, const bm_stats *gbs, const bm_stats *ratio, double first)
{
    jo_begin_object(j, key);
    bm_json_stats(j, gbs, "GB/s");
    jo_begin_object(j, "ratio_to_bandwidth");
    bm_json_stats(j, ratio, "ratio");
    jo_end_object(j);
    jo_f64(j, "first_run", first);
    jo_end_object(j);
}

static void mv_print_json(json_out *j, const bench_tensor *t, qr_act act, int threads, const mv_figures *f)
{
    jo_begin_object(j, NULL);
    jo_cstring(j, "dtype", dtype_label(t->dtype));
    if (t->dtype == QM_DTYPE_Q8_ROW) jo_cstring(j, "act", act_name(&t->view, act));
    else jo_null(j, "act");
    jo_u64(j, "rows", t->rows);
    jo_u64(j, "cols", t->cols);
    jo_u64(j, "layer_rows", MATVEC_LAYER_ROWS);
    jo_u64(j, "bytes_read", t->read_bytes);
    jo_u64(j, "threads", (uint64_t)threads);
    jo_u64(j, "reruns", (uint64_t)f->reruns);
    jo_begin_object(j, "bandwidth");
    bm_json_stats(j, &f->bw, "GB/s");
    jo_end_object(j);
    mv_json_placement(j, "anonymous", &f->anon, &f->anon_ratio, f->first_anon);
    mv_json_placement(j, "mapped", &f->map, &f->map_ratio, f->first_map);
    jo_begin_object(j, "mapped_over_anonymous");
    bm_json_stats(j, &f->map_over_anon, "ratio");
    jo_end_object(j);
    jo_end_object(j);
}

/* One weight type at one shape: every activation mode it has, at every thread count. */
static int bench_matvec_one(const bench_cfg *c, const qr_kernels *k, const baseline *base, qm_dtype dtype, size_t rows,
                            size_t cols, json_out *j)
{
    bench_tensor t;
    mapped m = { 0 };
    mv_bufs b = { 0 };
    int rc = -1;
    if (tensor_make(&t, dtype, rows, cols, 0x51ed270b27e14f2dull + (uint64_t)dtype) != 0) return -1;
    if (mapped_make(c->dir, &t, &m) != 0 || mv_bufs_alloc(c, &t, &b) != 0) goto out;
    static const qr_act acts[] = { QR_ACT_INT8, QR_ACT_INT8X2, QR_ACT_F32 };
    const int n_act = dtype == QM_DTYPE_Q8_ROW ? 3 : 1;
    for (int ai = 0; ai < n_act; ai++) {
        const qr_act act = dtype == QM_DTYPE_Q8_ROW ? acts[ai] : QR_ACT_F32;
        for (int ti = 0; ti < c->n_threads; ti++) {
            mv_figures fig;
            if (mv_measure(c, k, base, &t, &m, &b, act, ti, &fig) != 0) goto out;
            if (c->json) mv_print_json(j, &t, act, c->threads[ti], &fig);
            else mv_print_text(&t, act, c->threads[ti], &fig);
        }
    }
    rc = 0;
out:
    mv_bufs_free(&b);
    mapped_free(&m);
    tensor_free(&t);
    return rc;
}

/* Rows of a stack of MATVEC_LAYER_ROWS x cols matrices of `elem` bytes per weight holding about 1 GiB (less
 * with --quick): whole layers, at least one. */
static size_t matvec_rows(const bench_cfg *c, size_t cols, size_t elem)
{
    size_t layers = GIB / c->mv_scale / (cols * elem) / MATVEC_LAYER_ROWS;
    return (layers ? layers : 1) * MATVEC_LAYER_ROWS;
}

int bench_matvec(const bench_cfg *c, const qr_kernels *k, const baseline *base, json_out *j)
{
    if (!c->json)
        printf("\n3. matvec (n = 1) over a stack of %dxCOLS matrices (1 GiB; a decode step's matvecs, layer after "
               "layer):\n   GB/s of weight bytes read (Q8_ROW: int8 rows + scales + row sums); "
               "\"x bw\" = median of per-run\n   ratios to the streaming read of section 1 timed beside each "
               "run (same threads); anonymous = malloc'd copy, mapped = the same\n   bytes in a .qmap in %s "
               "(qm_open); the three are timed back to back in rotating order; mapped/anonymous: 1.0 = parity\n",
               MATVEC_LAYER_ROWS, c->dir);
    else jo_begin_array(j, "matvec");
    int rc = 0;
    for (int ci = 0; ci < c->n_mv_cols && rc == 0; ci++) {
        size_t cols = (size_t)c->mv_cols[ci];
        rc = bench_matvec_one(c, k, base, QM_DTYPE_Q8_ROW, matvec_rows(c, cols, 1), cols, j);
        if (rc == 0) rc = bench_matvec_one(c, k, base, QM_DTYPE_F16, matvec_rows(c, cols, 2), cols, j);
        if (rc == 0) rc = bench_matvec_one(c, k, base, QM_DTYPE_F32, matvec_rows(c, cols, 4), cols, j);
    }
    if (c->json) jo_end_array(j);
    return rc;
}


/* ---- 3b. the first pass through a freshly opened mapping ------------------------------------------ */
/* Section 3 reads a mapping whose page tables are already filled. A model that has just opened its file
 * pays one page fault per 4 KiB page on its first pass (the file's pages are in the page cache here, so
 * this is the mapping's cost, not the disk's). Each run opens the container again and times the first
 * matvec pass over it: as is, after madvise(MADV_WILLNEED), and after madvise(MADV_POPULATE_READ), which
 * fills the page tables up front (its own time is reported too). */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

int bench_first_pass(const bench_cfg *c, const qr_kernels *k, json_out *j)
{
    bench_tensor t;
    mapped m = { 0 };
    float *x = NULL, *y = NULL;
    double *pass = NULL, *prep = NULL;
    int rc = -1;
    size_t rows = 262144 / c->mv_scale;
    if (tensor_make(&t, QM_DTYPE_Q8_ROW, rows, 4096, 0x51ed270b27e14f2dull) != 0) return -1;
    if (mapped_make(c->dir, &t, &m) != 0) goto out;
    x = random_floats(4096, 7);
    y = calloc(rows, sizeof *y);
    pass = malloc((size_t)c->runs * sizeof *pass);
    prep = malloc((size_t)c->runs * sizeof *prep);
    if (!x || !y || !pass || !prep) { set_error("out of memory"); goto out; }
    static const char *const modes[3] = { "as opened", "MADV_WILLNEED", "MADV_POPULATE_READ" };
    if (!c->json)
        printf("\n3b. first matvec pass through a freshly opened mapping (Q8_ROW %zux4096, float X; page "
               "cache warm): GB/s of the pass,\n    and the time of the madvise call itself\n", rows);
    else jo_begin_array(j, "first_pass");
    for (int ti = 0; ti < c->n_threads; ti++) {
        qr_matmul_opts o = { .pool = c->pools[ti], .act = QR_ACT_F32, .kernels = NULL, .row_invariant = false };
        for (int mode = 0; mode < 3; mode++) {
            for (int r = 0; r < c->runs; r++) {
                qm_close(m.f);
                m.f = NULL;
                qm_error err;
                if (qm_open(tmp_path(), &m.f, &err) != QM_OK ||
                    qr_matrix_from_tensor(m.f, qm_find_tensor(m.f, "w"), &m.view, &err) != QM_OK) {
                    set_error("%s", err.message);
                    goto out;
                }
                void *base_addr = (void *)qm_file_bytes(m.f);
                size_t len = (size_t)qm_file_header(m.f)->file_size;
                double t0 = bm_now();
                if (mode > 0 && madvise(base_addr, len, mode == 1 ? MADV_WILLNEED : MADV_POPULATE_READ) != 0) {
                    set_error("madvise(%s): %s", modes[mode], strerror(errno));
                    goto out;
                }
                prep[r] = bm_now() - t0;
                double s;
                if (time_matvec(k, &m.view, x, y, NULL, 0, &o, &s) != 0) goto out;
                pass[r] = (double)t.read_bytes / s / 1e9;
            }
            bm_stats sp = bm_stats_of(pass, c->runs), sq = bm_stats_of(prep, c->runs);
            if (!c->json) {
                printf("   threads %-2d %-20s first pass ", c->threads[ti], modes[mode]);
                bm_print_stats(&sp, "GB/s");
                if (mode > 0) printf("   madvise %.1f ms [%.1f-%.1f]", sq.median * 1e3, sq.min * 1e3, sq.max * 1e3);
                printf("\n");
            } else {
                jo_begin_object(j, NULL);
                jo_u64(j, "threads", (uint64_t)c->threads[ti]);
                jo_cstring(j, "advice", modes[mode]);
                jo_begin_object(j, "first_pass");
                bm_json_stats(j, &sp, "GB/s");
                jo_end_object(j);
                jo_begin_object(j, "madvise_seconds");
                bm_json_stats(j, &sq, "s");
                jo_end_object(j);
                jo_end_object(j);
            }
        }
    }
    if (c->json) jo_end_array(j);
    rc = 0;
out:
    free(prep);
    free(pass);
    free(y);
    free(x);
    mapped_free(&m);
    tensor_free(&t);
    return rc;
}

