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

#include "bench_kernels.h"

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

static int bench_matvec_one(const bench_cfg *c, const qr_kernels *k, const baseline *base, qm_dtype dtype, size_t rows,
                            size_t cols, json_out *j)
{
    bench_tensor t;
    mapped m = { 0 };
    float *x = NULL, *y = NULL, *y2 = NULL;
    void *work = NULL;
    double *ra = NULL, *rm = NULL, *rb = NULL, *qa = NULL, *qmp = NULL, *mo = NULL;
    int rc = -1;
    if (tensor_make(&t, dtype, rows, cols, 0x51ed270b27e14f2dull + (uint64_t)dtype) != 0) return -1;
    if (mapped_make(c->dir, &t, &m) != 0) goto out;
    x = random_floats(cols, 7);
    y = calloc(rows, sizeof *y);
    y2 = calloc(rows, sizeof *y2);
    ra = malloc((size_t)c->runs * sizeof *ra);
    rm = malloc((size_t)c->runs * sizeof *rm);
    rb = malloc((size_t)c->runs * sizeof *rb);
    qa = malloc((size_t)c->runs * sizeof *qa);
    qmp = malloc((size_t)c->runs * sizeof *qmp);
    mo = malloc((size_t)c->runs * sizeof *mo);
    if (!x || !y || !y2 || !ra || !rm || !rb || !qa || !qmp || !mo) { set_error("out of memory"); goto out; }
    /* one work buffer, sized for the largest need of every configuration measured below */
    size_t work_size = 0;
    static const qr_act acts[] = { QR_ACT_INT8, QR_ACT_INT8X2, QR_ACT_F32 };
    for (int act = 0; act < 3; act++)
        for (int ti = 0; ti < c->n_threads; ti++) {
            qr_matmul_opts o = { c->pools[ti], acts[act], NULL, false };
            size_t s = qr_matmul_work_size(&t.view, 1, &o);
            if (s > work_size) work_size = s;
        }
    if (work_size && !(work = aligned_alloc(64, (work_size + 63) / 64 * 64))) { set_error("out of memory"); goto out; }

    int n_act = dtype == QM_DTYPE_Q8_ROW ? 3 : 1;
    for (int ai = 0; ai < n_act; ai++) {
        qr_act act = dtype == QM_DTYPE_Q8_ROW ? acts[ai] : QR_ACT_F32;
        for (int ti = 0; ti < c->n_threads; ti++) {
            qr_matmul_opts o = { c->pools[ti], act, NULL, false };
            double first_a, first_m;
            /* untimed warm-ups (kept as "first run": the mapped one includes the page faults) */
            if (time_matvec(k, &t.view, x, y, work, work_size, &o, &first_a) != 0) goto out;
            if (time_matvec(k, &m.view, x, y2, work, work_size, &o, &first_m) != 0) goto out;
            /* the same bytes through the same kernel: the two placements must agree exactly */
            if (memcmp(y, y2, rows * sizeof *y) != 0)
                fprintf(stderr, "qmap bench: warning: %s %zux%zu act %s threads %d: mapped and anonymous results "
                        "differ\n", dtype_label(dtype), rows, cols, act_name(&t.view, act), c->threads[ti]);
            /* Each run times the streaming read, the anonymous copy and the mapping back to back
             * (matvec_run_once); the ratios are per run, and a run above BM_RATIO_LIMIT x the read beside
             * it is taken again (bm_run_beside_limit) */
            matvec_run mv = { .call = { k, x, y, work, work_size, &o }, .t = &t, .m = &m, .base = base,
                              .threads = c->threads[ti] };
            int reruns = 0;
            for (int r = 0; r < c->runs; r++) {
                mv.run = r;
                double worst = bm_run_beside_limit(matvec_run_once, &mv, BM_MAX_RERUNS, &reruns);
                if (mv.failed) goto out;
                /* a kernel cannot read memory faster than the best plain read of it: above it in every try,
                 * the baseline is wrong */
                if (worst > BM_RATIO_LIMIT) {
                    set_error("matvec %s %zux%zu act %s threads %d read at %.2f (anonymous) / %.2f (mapped) x the "
                              "bandwidth measured beside it in %d tries: the bandwidth baseline is wrong (a kernel "
                              "cannot read faster than memory), so no ratio is printed", dtype_label(dtype), rows,
                              cols, act_name(&t.view, act), c->threads[ti], bm_ratio(mv.anon, mv.bw),
                              bm_ratio(mv.map, mv.bw), BM_MAX_RERUNS + 1);
                    goto out;
                }
                ra[r] = mv.anon;
                rm[r] = mv.map;
                rb[r] = mv.bw;
                qa[r] = bm_ratio(ra[r], rb[r]);
                qmp[r] = bm_ratio(rm[r], rb[r]);
            }
            for (int r = 0; r < c->runs; r++) mo[r] = bm_ratio(rm[r], ra[r]);
            bm_stats sa = bm_stats_of(ra, c->runs), sm = bm_stats_of(rm, c->runs), sb = bm_stats_of(rb, c->runs);
            bm_stats sqa = bm_stats_of(qa, c->runs), sqm = bm_stats_of(qmp, c->runs), smo = bm_stats_of(mo, c->runs);
            char head[96], shape[48];
            snprintf(shape, sizeof shape, "%zux%zu", rows, cols);
            snprintf(head, sizeof head, "%-6s %-11s act %-4s threads %-2d", dtype_label(dtype), shape,
                     act_name(&t.view, act), c->threads[ti]);
            if (!c->json) {
                printf("   %s  bandwidth ", head);
                bm_print_stats(&sb, "GB/s");
                printf("\n   %*s  anonymous ", (int)strlen(head), "");
                bm_print_stats(&sa, "GB/s");
                printf("  %.2f x bw [%.2f-%.2f]  (first run %.2f GB/s)\n", sqa.median, sqa.min, sqa.max,
                       (double)t.read_bytes / first_a / 1e9);
                printf("   %*s  mapped    ", (int)strlen(head), "");
                bm_print_stats(&sm, "GB/s");
                printf("  %.2f x bw [%.2f-%.2f]  (first run %.2f GB/s)  mapped/anonymous %.2f [%.2f-%.2f]",
                       sqm.median, sqm.min, sqm.max, (double)t.read_bytes / first_m / 1e9, smo.median, smo.min,
                       smo.max);
                print_reruns(reruns);
                printf("\n");
                fflush(stdout);
            } else {
                json_begin_object(j, NULL);
                json_cstring(j, "dtype", dtype_label(dtype));
                if (dtype == QM_DTYPE_Q8_ROW) json_cstring(j, "act", act_name(&t.view, act));
                else json_null(j, "act");
                json_u64(j, "rows", rows);
                json_u64(j, "cols", cols);
                json_u64(j, "layer_rows", MATVEC_LAYER_ROWS);
                json_u64(j, "bytes_read", t.read_bytes);
                json_u64(j, "threads", (uint64_t)c->threads[ti]);
                json_u64(j, "reruns", (uint64_t)reruns);
                json_begin_object(j, "bandwidth");
                bm_json_stats(j, &sb, "GB/s");
                json_end_object(j);
                json_begin_object(j, "anonymous");
                bm_json_stats(j, &sa, "GB/s");
                json_begin_object(j, "ratio_to_bandwidth");
                bm_json_stats(j, &sqa, "ratio");
                json_end_object(j);
                json_f64(j, "first_run", (double)t.read_bytes / first_a / 1e9);
                json_end_object(j);
                json_begin_object(j, "mapped");
                bm_json_stats(j, &sm, "GB/s");
                json_begin_object(j, "ratio_to_bandwidth");
                bm_json_stats(j, &sqm, "ratio");
                json_end_object(j);
                json_f64(j, "first_run", (double)t.read_bytes / first_m / 1e9);
                json_end_object(j);
                json_begin_object(j, "mapped_over_anonymous");
                bm_json_stats(j, &smo, "ratio");
                json_end_object(j);
                json_end_object(j);
            }
        }
    }
    rc = 0;
out:
    free(work);
    free(mo);
    free(qmp);
    free(qa);
    free(rb);
    free(rm);
    free(ra);
    free(y2);
    free(y);
    free(x);
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
    else json_begin_array(j, "matvec");
    int rc = 0;
    for (int ci = 0; ci < c->n_mv_cols && rc == 0; ci++) {
        size_t cols = (size_t)c->mv_cols[ci];
        rc = bench_matvec_one(c, k, base, QM_DTYPE_Q8_ROW, matvec_rows(c, cols, 1), cols, j);
        if (rc == 0) rc = bench_matvec_one(c, k, base, QM_DTYPE_F16, matvec_rows(c, cols, 2), cols, j);
        if (rc == 0) rc = bench_matvec_one(c, k, base, QM_DTYPE_F32, matvec_rows(c, cols, 4), cols, j);
    }
    if (c->json) json_end_array(j);
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
    else json_begin_array(j, "first_pass");
    for (int ti = 0; ti < c->n_threads; ti++) {
        qr_matmul_opts o = { c->pools[ti], QR_ACT_F32, NULL, false };
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
                json_begin_object(j, NULL);
                json_u64(j, "threads", (uint64_t)c->threads[ti]);
                json_cstring(j, "advice", modes[mode]);
                json_begin_object(j, "first_pass");
                bm_json_stats(j, &sp, "GB/s");
                json_end_object(j);
                json_begin_object(j, "madvise_seconds");
                bm_json_stats(j, &sq, "s");
                json_end_object(j);
                json_end_object(j);
            }
        }
    }
    if (c->json) json_end_array(j);
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

