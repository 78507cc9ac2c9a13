/* qmap bench MODEL --parallel LIST — llama-batched-bench's measure over a qmap_batch (bench_parallel.h).
 *
 * For each P in the list, -r timed runs after one warm-up, each from empty slots:
 *   pp: every sequence's prompt of -p tokens, packed into qmap_batch_eval calls of up to n_batch tokens
 *       (a call takes whole prompts while they fit, and cuts the one that does not): aggregate tokens/s;
 *   tg: -n decode steps, each one qmap_batch_eval of P items of one token: aggregate tokens/s (P·n over the
 *       time) and per sequence (the aggregate / P: the speed each user sees).
 * Figures are medians with min and max of the runs; the last column is the median aggregate tg over that
 * of the first P in the list, so that its ratio comes from one process on one host state. Token ids are
 * fixed and spread over the vocabulary: speed does not depend on the text. No limit is measured beside
 * the runs (qmap bench without --parallel does that for one sequence).
 */
#include "bench_parallel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_measure.h"
#include "cli.h"
#include "qmap.h"
#include "qr_matmul.h"

/* The 1-minute load average (NaN if unreadable): a shared host's state, printed beside the figures. */
static double load_average(void)
{
    double l = NAN;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = NAN;
        fclose(f);
    }
    return l;
}

void bench_parallel_header(const bp_cfg *c)
{
    printf("qmap bench --parallel: %ld runs per figure after one warm-up; n_batch %u; KV cache %s; Q8_ROW "
           "activations %s (a batch: batch-invariant); kernels %s; load average %.2f\n\n",
           c->runs, c->n_batch, cli_kv_choices[c->kv], cli_act_choices[c->act], qr_kernels_name(qr_kernels_get()),
           load_average());
    printf("| %-*s | %3s | %4s | %10s | %-26s | %-26s | %10s | %9s |\n", c->name_width, "model", "thr", "P", "tokens",
           "pp t/s median [min-max]", "tg t/s median [min-max]", "tg/seq t/s", "tg x P1");
    printf("|");
    for (int i = 0; i < c->name_width + 2; i++) putchar('-');
    printf("|-----|------|------------|----------------------------|----------------------------|------------|"
           "-----------|\n");
}

/* The token of sequence q at position t: fixed, spread over the vocabulary. */
static int32_t spread_id(uint32_t vocab, long q, long t)
{
    return (int32_t)(((uint64_t)t * 7919u + (uint64_t)q * 104729u + 1u) % vocab);
}

/* One run at P sequences: every slot reset, then pp (timed), then tg (timed). ids holds P rows of pp + tg
 * tokens; items has room for P. */
static qmap_status one_run(const bp_cfg *c, qmap_batch *b, long P, const int32_t *ids, qmap_batch_item *items,
                           double *pp_tps, double *tg_tps, qmap_error *qe)
{
    const long row = c->pp + c->tg;
    for (long q = 0; q < P; q++) qmap_batch_reset(b, (uint32_t)q);
    qmap_status st = QMAP_OK;
    double t0 = bm_now();
    for (long q = 0, done = 0; q < P && st == QMAP_OK && c->pp > 0;) {   /* done: of sequence q's prompt */
        size_t n = 0;
        long budget = c->n_batch;
        while (q < P && budget > 0) {
            long take = c->pp - done < budget ? c->pp - done : budget;
            items[n++] = (qmap_batch_item){ (uint32_t)q, ids + q * row + done, (uint32_t)take };
            budget -= take;
            done += take;
            if (done == c->pp) q++, done = 0;
        }
        st = qmap_batch_eval(b, items, n, qe);
    }
    *pp_tps = (double)(P * c->pp) / (bm_now() - t0);
    t0 = bm_now();
    for (long t = 0; t < c->tg && st == QMAP_OK; t++) {
        for (long q = 0; q < P; q++) items[q] = (qmap_batch_item){ (uint32_t)q, ids + q * row + c->pp + t, 1 };
        st = qmap_batch_eval(b, items, (size_t)P, qe);
    }
    *tg_tps = (double)(P * c->tg) / (bm_now() - t0);
    return st;
}

typedef struct bp_row {
    long P;
    bm_stats pp, tg;
    const double *s_pp, *s_tg;  /* each run in order */
    double tg_ratio;             /* median aggregate tg over the first P's */
} bp_row;

static void print_row(const bp_cfg *c, json_out *j, const char *path, const bp_row *r)
{
    if (c->json) {
        jo_begin_object(j, NULL);
        jo_cstring(j, "model", path);
        jo_cstring(j, "kernels", qr_kernels_name(qr_kernels_get()));
        jo_cstring(j, "act", cli_act_choices[c->act]);
        jo_u64(j, "threads", (uint64_t)c->threads);
        jo_u64(j, "P", (uint64_t)r->P);
        jo_u64(j, "n_batch", c->n_batch);
        jo_u64(j, "pp_tokens", (uint64_t)(r->P * c->pp));
        jo_u64(j, "tg_tokens", (uint64_t)(r->P * c->tg));
        jo_u64(j, "runs", (uint64_t)r->tg.runs);
        jo_f64(j, "pp_tok_s", r->pp.median);
        jo_f64(j, "tg_tok_s", r->tg.median);
        jo_f64(j, "tg_tok_s_per_seq", r->tg.median / (double)r->P);
        jo_f64(j, "tg_ratio_to_first", r->tg_ratio);
        jo_f64(j, "load_average", load_average());
        jo_begin_object(j, "pp");
        bm_json_stats(j, &r->pp, "t/s");
        jo_end_object(j);
        jo_begin_object(j, "tg");
        bm_json_stats(j, &r->tg, "t/s");
        jo_end_object(j);
        jo_begin_array(j, "samples_pp");
        for (int i = 0; i < r->pp.runs; i++) jo_f64(j, NULL, r->s_pp[i]);
        jo_end_array(j);
        jo_begin_array(j, "samples_tg");
        for (int i = 0; i < r->tg.runs; i++) jo_f64(j, NULL, r->s_tg[i]);
        jo_end_array(j);
        jo_end_object(j);
        return;
    }
    const char *base = strrchr(path, '/');
    char tokens[32], pp[64], tg[64];
    snprintf(tokens, sizeof tokens, "%ld+%ld", r->P * c->pp, r->P * c->tg);
    if (c->pp) snprintf(pp, sizeof pp, "%.2f [%.2f-%.2f]", r->pp.median, r->pp.min, r->pp.max);
    else snprintf(pp, sizeof pp, "-");
    if (c->tg) snprintf(tg, sizeof tg, "%.2f [%.2f-%.2f]", r->tg.median, r->tg.min, r->tg.max);
    else snprintf(tg, sizeof tg, "-");
    printf("| %-*.*s | %3d | %4ld | %10s | %-26s | %-26s | %10.2f | %9.2f |\n", c->name_width, c->name_width,
           base ? base + 1 : path, c->threads, r->P, tokens, pp, tg, r->tg.median / (double)r->P, r->tg_ratio);
    fflush(stdout);
}

/* The runs of one P on a batch of P slots. */
static int bench_p(const bp_cfg *c, const qmap_model *m, const char *path, long P, double *tg_first, json_out *j,
                   char *err, size_t err_size)
{
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    qmap_batch_params bp;
    qmap_batch_params_default(&bp);
    bp.n_seq = (uint32_t)P;
    bp.n_ctx = (uint32_t)(c->pp + c->tg > 0 ? c->pp + c->tg : 1);
    bp.n_batch = c->n_batch > (uint32_t)P ? c->n_batch : (uint32_t)P;   /* a decode step of P tokens fits */
    bp.threads = c->threads;
    bp.kv_type = (qmap_kv_type)c->kv;
    bp.act = (qmap_act_mode)c->act;
    qmap_batch *b = NULL;
    qmap_error qe = { 0 };
    const long row = c->pp + c->tg, runs = c->runs;
    int32_t *ids = malloc((size_t)(P * row + 1) * sizeof *ids);
    qmap_batch_item *items = malloc((size_t)P * sizeof *items);
    double *s = malloc((size_t)(4 * runs) * sizeof *s);
    int rc = -1;
    if (!ids || !items || !s) {
        snprintf(err, err_size, "out of memory");
        goto out;
    }
    for (long q = 0; q < P; q++)
        for (long t = 0; t < row; t++) ids[q * row + t] = spread_id(in.vocab_size, q, t);
    if (qmap_batch_new(m, &bp, &b, &qe) != QMAP_OK) goto failed;
    double pp_tps, tg_tps;
    if (one_run(c, b, P, ids, items, &pp_tps, &tg_tps, &qe) != QMAP_OK) goto failed;   /* warm-up */
    for (long r = 0; r < runs; r++)
        if (one_run(c, b, P, ids, items, &s[r], &s[runs + r], &qe) != QMAP_OK) goto failed;
    memcpy(s + 2 * runs, s, (size_t)(2 * runs) * sizeof *s);   /* bm_stats_of sorts: keep the run order */
    bp_row br = { .P = P, .pp = bm_stats_of(s + 2 * runs, (int)runs), .tg = bm_stats_of(s + 3 * runs, (int)runs),
                  .s_pp = s, .s_tg = s + runs };
    if (isnan(*tg_first)) *tg_first = br.tg.median;
    br.tg_ratio = bm_ratio(br.tg.median, *tg_first);
    print_row(c, j, path, &br);
    rc = 0;
    goto out;
failed:
    snprintf(err, err_size, "%s (P = %ld)", qe.message, P);
out:
    qmap_batch_free(b);
    free(ids);
    free(items);
    free(s);
    return rc;
}

int bench_parallel(const bp_cfg *c, const char *path, json_out *j, char *err, size_t err_size)
{
    qmap_model *m = NULL;
    qmap_error qe = { 0 };
    if (qmap_model_open(path, NULL, &m, &qe) != QMAP_OK) {
        snprintf(err, err_size, "%s", qe.message);
        return -1;
    }
    double tg_first = NAN;
    int rc = 0;
    for (int i = 0; i < c->n_parallel && rc == 0; i++)
        rc = bench_p(c, m, path, c->parallel[i], &tg_first, j, err, err_size);
    qmap_model_close(m);
    return rc;
}
