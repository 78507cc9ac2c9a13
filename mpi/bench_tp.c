/* bench_tp.c — qmap-mpi bench: the pp and tg speed of a decoder LM split over the ranks of an MPI job, timed
 * by qmap bench's own code (bench_model_time_test) on each rank's shard, with what the collectives cost.
 *
 * Per tg run each rank takes the time of its tokens and the time it spent inside the collectives (tp.c's
 * counters, read before and after the run): its compute per token is the difference. The slowest rank's
 * compute plus what the links cost per token is the model of the speed over hosts: per token, compute +
 * 2 x layers x the latency of one all-reduce of the hidden vector + one gather of the logits (+ the MPI_MAX
 * all-reduces of int8 scales, where ranks share a Q8_ROW matrix's columns). The latencies in the model
 * are measured alone after the runs (the same calls through the shard, every rank
 * ready): inside the runs a call also waits for the slowest rank, which the slowest rank's compute already
 * counts.
 */
#define QMAP_EXPERIMENTAL /* qmap_session_counters, taken by bench_model_time_test */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_measure.h"
#include "bench_model.h"
#include "bench_tp.h"
#include "cli.h"
#include "json_out.h"
#include "opts.h"
#include "qr_matmul.h"
#include "qr_pool.h"

/* the calls timed alone for the model's latencies, after a few untimed */
#define ALONE_ALLREDUCES 200
#define ALONE_GATHERS 50
#define ALONE_WARMUP 10

static const char DESCRIPTION[] =
    "qmap bench's prompt processing (pp: -p tokens in one evaluation) and text generation (tg: -n tokens\n"
    "one at a time) of a decoder LM split over the N ranks of the MPI job, timed by qmap bench's code on\n"
    "every rank's part: tokens/s, median [min-max] of -r runs after one warm-up, as rank 0 times them.\n"
    "Beside them, from the tg runs, for each collective (the all-reduce of the hidden vector, the gather\n"
    "of the logits, and the MPI_MAX all-reduce of int8 scales where ranks share a Q8_ROW matrix's columns):\n"
    "calls and bytes per token, the mean latency inside the runs (which includes waiting for the slowest\n"
    "rank), and the same call timed alone after the runs (the median of 200, or 50 gathers, every rank\n"
    "ready; the slowest rank's). Per rank: its compute per token (the tg time minus its time inside the\n"
    "collectives), its time in the collectives per token, and the PSS and RSS of its mapping of\n"
    "MODEL.qmap after the runs. Last, the model of the speed over several hosts: per token, the slowest\n"
    "rank's compute + 2 x layers x the all-reduce latency + the logits gather's (+ the scale maxes'), the\n"
    "latencies timed alone here (put a link's in their place for another network), beside the time per\n"
    "token measured. No limit (memory bandwidth) is measured beside the runs, unlike qmap bench: ranks\n"
    "on one host share its bandwidth, and one rank's reading alone is not the runs' limit.\n"
    "--json prints one object: model, arch, file_type, n_layers, dim, vocab_size, n_ranks, threads,\n"
    "runs, act, kv, kernels; pp and tg (null for -p 0): tokens, tokens_per_second {median, min, max,\n"
    "runs, unit}, samples_ts; allreduce, gather and allreduce_max: calls_per_token, bytes_per_call,\n"
    "bytes_per_token, mean_latency_us (in the runs, over every rank), alone_latency_us; ranks, one\n"
    "object per rank: rank, compute_ms_per_token, collectives_ms_per_token, allreduce_mean_latency_us,\n"
    "mapping_pss_bytes, mapping_rss_bytes; multi_host_model: compute_ms_per_token, slowest_rank,\n"
    "allreduces_per_token, allreduce_latency_us, gathers_per_token, gather_latency_us,\n"
    "max_allreduces_per_token, max_allreduce_latency_us, ms_per_token, tokens_per_second,\n"
    "measured_ms_per_token.";

int tp_bench_parse(int argc, char **argv, tp_bench_cfg *cfg)
{
    *cfg = (tp_bench_cfg){ .pp = 128, .tg = 64, .runs = 3 };
    const cli_opt opts[] = {
        { "n-prompt", 'p', CLI_INT, &cfg->pp, "N", 0, 8192, NULL, "prompt tokens of the pp test; 0 skips it", false },
        { "n-gen", 'n', CLI_INT, &cfg->tg, "N", 1, 8192, NULL, "tokens of the tg test (the per-token figures come from it)", false },
        { "repetitions", 'r', CLI_INT, &cfg->runs, "N", 1, 1000, NULL, "timed runs of each test, after one warm-up", false },
        { "threads", 't', CLI_INT, &cfg->threads, "N", 0, 1024, NULL, "threads per rank; 0: one per CPU the rank may run on (one core when mpirun binds ranks to cores)", false },
        { "kv", 0, CLI_CHOICE, &cfg->kv, "TYPE", 0, 0, cli_kv_choices, "KV cache element type", false },
        { "act", 0, CLI_CHOICE, &cfg->act, "MODE", 0, 0, cli_act_choices, "Q8_ROW activations, as qmap run --act", false },
        { "json", 0, CLI_FLAG, &cfg->json, NULL, 0, 0, NULL, "print one JSON object", false },
    };
    const cli_command cmd = {
        "qmap-mpi bench", "mpirun -np N qmap-mpi bench MODEL.qmap [options]", DESCRIPTION, opts, sizeof opts / sizeof opts[0],
        "exit status: 0 done, 1 an error (on any rank), 2 usage error\n"
    };
    int first;
    int rc = cli_parse(&cmd, argc, argv, &first);
    if (rc != 0) return rc;
    if (argc - first != 1) {
        fprintf(stderr, "qmap-mpi bench: name one model (MODEL.qmap)\n");
        return 2;
    }
    cfg->model = argv[first];
    return 0;
}

/* tp.c's counters, read before and after a run. */
typedef struct coll_sample {
    tp_counter c[TP_N_COLL];
} coll_sample;

static coll_sample coll_now(const tp_ctx *ctx)
{
    coll_sample cs;
    memcpy(cs.c, ctx->coll, sizeof cs.c);
    return cs;
}

/* What one rank brings to rank 0 (one MPI_Gather of N_R doubles): per-token medians of the tg runs, the
 * mapping after them, and per collective (R_COLL + N_K x C_...) its calls, floats and seconds over the tg
 * runs and the median seconds of one call timed alone. */
enum { R_COMPUTE_S, R_COLL_S, R_PSS_KB, R_RSS_KB, R_COLL };
enum { K_CALLS, K_FLOATS, K_S, K_ALONE_S, N_K };
#define N_R (R_COLL + TP_N_COLL * N_K)
#define RI(c, k) (R_COLL + (c) * N_K + (k))

/* A test's runs on this rank: t/s of each run in order, and the seconds of each inside the collectives. */
typedef struct test_runs {
    double *tps, *coll_s;
} test_runs;

/* The warm-up and c->runs timed runs of test 0 (pp) or 1 (tg); for tg the collectives' totals over the
 * timed runs go into mine. 0 or -1 with *qe set. */
static int time_runs(qmap_session *s, const tp_bench_cfg *c, const int32_t *ids, int test, tp_ctx *ctx,
                     test_runs *out, double *mine, qmap_error *qe)
{
    const long n = test == 0 ? c->pp : c->tg;
    qmap_session_counters work;
    uint64_t kv_bytes;
    double tps;
    if (bench_model_time_test(s, test, ids, 0, n, &tps, &work, &kv_bytes, qe) != QMAP_OK) return -1; /* warm-up */
    const coll_sample start = coll_now(ctx);
    for (long r = 0; r < c->runs; r++) {
        const coll_sample before = coll_now(ctx);
        if (bench_model_time_test(s, test, ids, 0, n, &out->tps[r], &work, &kv_bytes, qe) != QMAP_OK) return -1;
        const coll_sample after = coll_now(ctx);
        out->coll_s[r] = 0;
        for (int k = 0; k < TP_N_COLL; k++) out->coll_s[r] += after.c[k].s - before.c[k].s;
    }
    const coll_sample end = coll_now(ctx);
    for (int k = 0; k < TP_N_COLL && test == 1; k++) {
        mine[RI(k, K_CALLS)] = (double)(end.c[k].calls - start.c[k].calls);
        mine[RI(k, K_FLOATS)] = (double)(end.c[k].floats - start.c[k].floats);
        mine[RI(k, K_S)] = end.c[k].s - start.c[k].s;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median seconds of `calls` calls of fn on buf[0..n) (after ALONE_WARMUP untimed), every rank
 * starting together; -1 if a call failed. Collective. */
static double alone_latency(tp_ctx *ctx, int (*fn)(void *, float *, size_t), float *buf, size_t n, int calls)
{
    double *t = malloc((size_t)calls * sizeof *t);
    if (!t) return -1;
    int rc = MPI_Barrier(ctx->comm) == MPI_SUCCESS ? 0 : -1;
    for (int i = 0; i < ALONE_WARMUP && rc == 0; i++) rc = fn(ctx, buf, n);
    for (int i = 0; i < calls && rc == 0; i++) {
        double t0 = MPI_Wtime();
        rc = fn(ctx, buf, n);
        t[i] = MPI_Wtime() - t0;
    }
    qsort(t, (size_t)calls, sizeof *t, cmp_double);
    double median = rc == 0 ? t[calls / 2] : -1;
    free(t);
    return median;
}

/* Each collective the runs made, timed alone (into mine): the sum all-reduce of the hidden vector, the
 * gather of the logits, and the scale max all-reduce at the runs' mean size. Every rank made the same calls,
 * so every rank times the same ones. Collective. */
static int time_links_alone(tp_ctx *ctx, const qmap_shard *shard, const qmap_model_info *in, double *mine)
{
    const double max_calls = mine[RI(TP_MAX, K_CALLS)];
    const size_t max_n = max_calls > 0 ? (size_t)fmax(1, round(mine[RI(TP_MAX, K_FLOATS)] / max_calls)) : 0;
    size_t n = in->vocab_size > in->dim ? in->vocab_size : in->dim;
    float *buf = calloc(n > max_n ? n : max_n, sizeof *buf);   /* zeros: the max all-reduce takes values >= 0 */
    if (!buf) return -1;
    int (*const fn[TP_N_COLL])(void *, float *, size_t) = { shard->allreduce_sum, shard->allgather, shard->allreduce_max };
    const size_t len[TP_N_COLL] = { in->dim, in->vocab_size, max_n };
    const int calls[TP_N_COLL] = { ALONE_ALLREDUCES, ALONE_GATHERS, ALONE_ALLREDUCES };
    int rc = 0;
    for (int k = 0; k < TP_N_COLL && rc == 0; k++) {
        mine[RI(k, K_ALONE_S)] = len[k] ? alone_latency(ctx, fn[k], buf, len[k], calls[k]) : 0;
        if (mine[RI(k, K_ALONE_S)] < 0) rc = -1;
    }
    free(buf);
    return rc;
}

/* Everything one rank measures, for rank 0's report. */
typedef struct bench_result {
    const tp_bench_cfg *c;
    qmap_model_info in;
    int ranks, threads;
    double *pp_tps, *tg_tps;   /* [runs], rank 0's, in the runs' order */
    double *all;               /* rank 0: [ranks][N_R] */
} bench_result;

/* This rank's per-token medians of the tg runs (into mine). */
static void per_token_figures(const tp_bench_cfg *c, const test_runs *tg, double *mine)
{
    double *compute = malloc((size_t)c->runs * sizeof *compute), *coll = malloc((size_t)c->runs * sizeof *coll);
    if (!compute || !coll) {
        mine[R_COMPUTE_S] = mine[R_COLL_S] = NAN;
    } else {
        for (long r = 0; r < c->runs; r++) {
            const double run_s = (double)c->tg / tg->tps[r];
            compute[r] = (run_s - tg->coll_s[r]) / (double)c->tg;
            coll[r] = tg->coll_s[r] / (double)c->tg;
        }
        mine[R_COMPUTE_S] = bm_stats_of(compute, (int)c->runs).median;
        mine[R_COLL_S] = bm_stats_of(coll, (int)c->runs).median;
    }
    free(compute);
    free(coll);
}

/* The multi-host model's terms from every rank's figures. */
typedef struct host_model {
    int slowest;
    double compute_s, per_token[TP_N_COLL], alone_s[TP_N_COLL], token_s, measured_s;
} host_model;

static host_model model_of(const bench_result *b, double tg_median_tps)
{
    host_model h = { 0 };
    const double tokens = (double)(b->c->tg * b->c->runs);
    for (int r = 0; r < b->ranks; r++) {
        const double *a = b->all + (size_t)r * N_R;
        if (a[R_COMPUTE_S] > h.compute_s) {
            h.compute_s = a[R_COMPUTE_S];
            h.slowest = r;
        }
        /* every rank is ready in the alone timing: the slowest rank's median is the link's */
        for (int k = 0; k < TP_N_COLL; k++) h.alone_s[k] = fmax(h.alone_s[k], a[RI(k, K_ALONE_S)]);
    }
    h.token_s = h.compute_s;
    for (int k = 0; k < TP_N_COLL; k++) {
        h.per_token[k] = b->all[RI(k, K_CALLS)] / tokens;   /* the same on every rank */
        h.token_s += h.per_token[k] * h.alone_s[k];
    }
    h.measured_s = 1.0 / tg_median_tps;
    return h;
}

/* One collective over the tg runs: its calls and bytes (rank 0's, as every rank's), the mean latency in
 * the runs over every rank, and the slowest rank's median alone. */
typedef struct coll_figures {
    double per_token, bytes_per_call, bytes_per_token, mean_s, alone_s;
} coll_figures;

static coll_figures coll_of(const bench_result *b, int k)
{
    const double tokens = (double)(b->c->tg * b->c->runs), calls = b->all[RI(k, K_CALLS)];
    const double bytes = b->all[RI(k, K_FLOATS)] * 4;
    double s = 0, alone = 0;
    for (int r = 0; r < b->ranks; r++) {
        s += b->all[(size_t)r * N_R + RI(k, K_S)];
        alone = fmax(alone, b->all[(size_t)r * N_R + RI(k, K_ALONE_S)]);
    }
    return (coll_figures){ calls / tokens, calls ? bytes / calls : 0, bytes / tokens,
                           calls ? s / b->ranks / calls : NAN, alone };
}

static void coll_json(json_out *j, const bench_result *b, int k)
{
    const coll_figures f = coll_of(b, k);
    jo_begin_object(j, TP_COLL_KEY[k]);
    jo_f64(j, "calls_per_token", f.per_token);
    jo_f64(j, "bytes_per_call", f.bytes_per_call);
    jo_f64(j, "bytes_per_token", f.bytes_per_token);
    jo_f64(j, "mean_latency_us", f.mean_s * 1e6);
    jo_f64(j, "alone_latency_us", f.alone_s * 1e6);
    jo_end_object(j);
}

static void test_json(json_out *j, const char *key, long tokens, const double *tps, long runs, double *scratch)
{
    if (tokens == 0) {
        jo_null(j, key);
        return;
    }
    memcpy(scratch, tps, (size_t)runs * sizeof *tps);
    const bm_stats st = bm_stats_of(scratch, (int)runs);
    jo_begin_object(j, key);
    jo_u64(j, "tokens", (uint64_t)tokens);
    jo_begin_object(j, "tokens_per_second");
    bm_json_stats(j, &st, "t/s");
    jo_end_object(j);
    jo_begin_array(j, "samples_ts");
    for (long r = 0; r < runs; r++) jo_f64(j, NULL, tps[r]);
    jo_end_array(j);
    jo_end_object(j);
}

static void print_json(const bench_result *b, const host_model *h, double *scratch)
{
    const tp_bench_cfg *c = b->c;
    json_out j = { .fp = stdout };
    jo_begin_object(&j, NULL);
    jo_cstring(&j, "model", c->model);
    jo_cstring(&j, "arch", b->in.arch);
    jo_cstring(&j, "file_type", b->in.file_type);
    jo_u64(&j, "n_layers", b->in.n_layers);
    jo_u64(&j, "dim", b->in.dim);
    jo_u64(&j, "vocab_size", b->in.vocab_size);
    jo_u64(&j, "n_ranks", (uint64_t)b->ranks);
    jo_u64(&j, "threads", (uint64_t)b->threads);
    jo_u64(&j, "runs", (uint64_t)c->runs);
    jo_cstring(&j, "act", cli_act_choices[c->act]);
    jo_cstring(&j, "kv", cli_kv_choices[c->kv]);
    jo_cstring(&j, "kernels", qr_kernels_name(qr_kernels_get()));
    test_json(&j, "pp", c->pp, b->pp_tps, c->runs, scratch);
    test_json(&j, "tg", c->tg, b->tg_tps, c->runs, scratch);
    for (int k = 0; k < TP_N_COLL; k++) coll_json(&j, b, k);
    jo_begin_array(&j, "ranks");
    for (int r = 0; r < b->ranks; r++) {
        const double *a = b->all + (size_t)r * N_R;
        jo_begin_object(&j, NULL);
        jo_u64(&j, "rank", (uint64_t)r);
        jo_f64(&j, "compute_ms_per_token", a[R_COMPUTE_S] * 1e3);
        jo_f64(&j, "collectives_ms_per_token", a[R_COLL_S] * 1e3);
        jo_f64(&j, "allreduce_mean_latency_us", a[RI(TP_SUM, K_CALLS)] ? a[RI(TP_SUM, K_S)] / a[RI(TP_SUM, K_CALLS)] * 1e6 : NAN);
        jo_f64(&j, "mapping_pss_bytes", a[R_PSS_KB] * 1024);
        jo_f64(&j, "mapping_rss_bytes", a[R_RSS_KB] * 1024);
        jo_end_object(&j);
    }
    jo_end_array(&j);
    jo_begin_object(&j, "multi_host_model");
    jo_f64(&j, "compute_ms_per_token", h->compute_s * 1e3);
    jo_u64(&j, "slowest_rank", (uint64_t)h->slowest);
    jo_f64(&j, "allreduces_per_token", h->per_token[TP_SUM]);
    jo_f64(&j, "allreduce_latency_us", h->alone_s[TP_SUM] * 1e6);
    jo_f64(&j, "gathers_per_token", h->per_token[TP_GATHER]);
    jo_f64(&j, "gather_latency_us", h->alone_s[TP_GATHER] * 1e6);
    jo_f64(&j, "max_allreduces_per_token", h->per_token[TP_MAX]);
    jo_f64(&j, "max_allreduce_latency_us", h->alone_s[TP_MAX] * 1e6);
    jo_f64(&j, "ms_per_token", h->token_s * 1e3);
    jo_f64(&j, "tokens_per_second", 1.0 / h->token_s);
    jo_f64(&j, "measured_ms_per_token", h->measured_s * 1e3);
    jo_end_object(&j);
    jo_end_object(&j);
    fputc('\n', stdout);
}

static void print_test(const char *name, long tokens, const double *tps, long runs, double *scratch)
{
    if (tokens == 0) return;
    memcpy(scratch, tps, (size_t)runs * sizeof *tps);
    const bm_stats st = bm_stats_of(scratch, (int)runs);
    char test[32];
    snprintf(test, sizeof test, "%s%ld", name, tokens);
    printf("  %-14s %9.2f t/s [%.2f-%.2f]\n", test, st.median, st.min, st.max);
}

/* One collective's line: per token, bytes, the in-run mean latency over every rank and the alone one. */
static void print_coll(const bench_result *b, int k)
{
    const coll_figures f = coll_of(b, k);
    if (f.per_token == 0) { /* one rank runs the whole model; no scale max without int8 activations */
        printf("  %-14s none in the runs\n", TP_COLL_LABEL[k]);
        return;
    }
    char per[48] = "";
    if (k == TP_SUM && f.per_token == 2.0 * b->in.n_layers) snprintf(per, sizeof per, " (2 x %u layers)", b->in.n_layers);
    printf("  %-14s %.4g per token%s, %.0f B each, %.0f B per token; %.1f us per call in the runs (mean over the "
           "ranks, waits for the slowest included), %.1f us alone\n", TP_COLL_LABEL[k], f.per_token, per,
           f.bytes_per_call, f.bytes_per_token, f.mean_s * 1e6, f.alone_s * 1e6);
}

static void print_text(const bench_result *b, const host_model *h, double *scratch)
{
    const tp_bench_cfg *c = b->c;
    const char *base = strrchr(c->model, '/');
    printf("qmap-mpi bench: %s (%s %s, %u layers, dim %u, vocab %u): %d rank%s x %d thread%s; KV %s; act %s; "
           "kernels %s; %ld run%s per figure after one warm-up; no limit measured\n", base ? base + 1 : c->model,
           b->in.arch, b->in.file_type, b->in.n_layers, b->in.dim, b->in.vocab_size, b->ranks, b->ranks > 1 ? "s" : "",
           b->threads, b->threads > 1 ? "s" : "", cli_kv_choices[c->kv], cli_act_choices[c->act],
           qr_kernels_name(qr_kernels_get()), c->runs, c->runs > 1 ? "s" : "");
    print_test("pp", c->pp, b->pp_tps, c->runs, scratch);
    print_test("tg", c->tg, b->tg_tps, c->runs, scratch);
    for (int k = 0; k < TP_N_COLL; k++) print_coll(b, k);
    for (int r = 0; r < b->ranks; r++) {
        const double *a = b->all + (size_t)r * N_R;
        printf("  rank %-5d compute %.4g ms/token, in collectives %.4g ms/token; mapping PSS %.1f MB, RSS %.1f MB\n",
               r, a[R_COMPUTE_S] * 1e3, a[R_COLL_S] * 1e3, a[R_PSS_KB] * 1024 / 1e6, a[R_RSS_KB] * 1024 / 1e6);
    }
    char terms[256] = "";
    size_t n = 0;
    for (int k = 0; k < TP_N_COLL && n < sizeof terms; k++)
        if (h->per_token[k] > 0)
            n += (size_t)snprintf(terms + n, sizeof terms - n, " + %.4g x %s %.1f us", h->per_token[k], TP_COLL_LABEL[k],
                                  h->alone_s[k] * 1e6);
    printf("multi-host model: per token = slowest rank's compute %.4g ms (rank %d)%s = %.4g ms (%.2f t/s); "
           "measured %.4g ms (%.2f t/s)\n", h->compute_s * 1e3, h->slowest, n ? terms : " + no collective",
           h->token_s * 1e3, 1.0 / h->token_s, h->measured_s * 1e3, 1.0 / h->measured_s);
}

/* -t 0: one thread per CPU the rank may run on (what qmap_session_new does with 0), named for the report. */
static int thread_count(const tp_bench_cfg *c)
{
    return c->threads > 0 ? (int)c->threads : qr_pool_cpus_available();
}

/* The model opened on this rank's shard and a session for the longer test; 0 or -1 with *qe set. */
static int open_lm(const tp_bench_cfg *c, const qmap_shard *shard, int threads, qmap_model **m, qmap_session **s,
                   qmap_model_info *in, qmap_error *qe)
{
    qmap_model_params mp;
    qmap_model_params_default(&mp);
    mp.shard = shard;   /* no large_pages: the rank maps only the pages of its part */
    cli_exit_on_model_change("qmap-mpi bench", c->model);
    if (qmap_model_open(c->model, &mp, m, qe) != QMAP_OK) return -1;
    qmap_model_get_info(*m, in);
    if (in->kind != QMAP_KIND_LM) {
        snprintf(qe->message, sizeof qe->message, "%s: a %s model is not a decoder LM: qmap-mpi runs gpt2, gpt_neo "
                 "and llama", c->model, in->arch);
        return -1;
    }
    qmap_session_params sp;
    qmap_session_params_default(&sp);
    sp.n_ctx = (uint32_t)(c->pp > c->tg ? c->pp : c->tg) + 1;
    sp.n_batch = (uint32_t)(c->pp > 0 ? c->pp : 1);
    sp.threads = threads;
    sp.kv_type = (qmap_kv_type)c->kv;
    sp.act = (qmap_act_mode)c->act;
    return qmap_session_new(*m, &sp, s, qe) == QMAP_OK ? 0 : -1;
}

/* pp and tg runs, then the per-token figures, the mapping and the links alone, into mine; rank 0's t/s
 * into b. 0 or -1 with *qe set. Collective. */
static int measure(const tp_bench_cfg *c, tp_ctx *ctx, const qmap_shard *shard, qmap_session *s, bench_result *b,
                   double *mine, qmap_error *qe)
{
    const long n_ids = c->pp > c->tg ? c->pp : c->tg;
    int32_t *ids = malloc((size_t)n_ids * sizeof *ids);
    double *coll = malloc((size_t)c->runs * sizeof *coll);
    int rc = ids && coll ? 0 : -1;
    if (rc == 0) bench_model_ids(ids, n_ids, b->in.vocab_size);
    else snprintf(qe->message, sizeof qe->message, "out of memory");
    test_runs pp = { b->pp_tps, coll }, tg = { b->tg_tps, coll };
    if (rc == 0 && c->pp > 0) rc = time_runs(s, c, ids, 0, ctx, &pp, mine, qe);
    if (rc == 0) rc = time_runs(s, c, ids, 1, ctx, &tg, mine, qe);
    if (rc == 0) {
        per_token_figures(c, &tg, mine);
        uint64_t pss = 0, rss = 0;
        tp_mapping_pss(c->model, &pss, &rss);   /* after the runs: every page the rank read is mapped */
        mine[R_PSS_KB] = (double)pss;
        mine[R_RSS_KB] = (double)rss;
        rc = time_links_alone(ctx, shard, &b->in, mine);
        if (rc != 0) snprintf(qe->message, sizeof qe->message, "a collective failed timing the links alone");
    }
    free(ids);
    free(coll);
    return rc;
}

int tp_bench_run(const tp_bench_cfg *c, tp_ctx *ctx)
{
    const qmap_shard shard = tp_shard(ctx);
    bench_result b = { .c = c, .ranks = ctx->size, .threads = thread_count(c) };
    qmap_model *m = NULL;
    qmap_session *s = NULL;
    qmap_error qe = { 0 };
    double mine[N_R] = { 0 };
    b.pp_tps = calloc((size_t)c->runs, sizeof *b.pp_tps);
    b.tg_tps = calloc((size_t)c->runs, sizeof *b.tg_tps);
    double *scratch = calloc((size_t)c->runs, sizeof *scratch);
    if (ctx->rank == 0) b.all = calloc((size_t)ctx->size * N_R, sizeof *b.all);
    int rc = b.pp_tps && b.tg_tps && scratch && (ctx->rank != 0 || b.all) ? 0 : -1;
    if (rc != 0) snprintf(qe.message, sizeof qe.message, "out of memory");
    if (rc == 0) rc = open_lm(c, &shard, b.threads, &m, &s, &b.in, &qe);
    if (rc == 0) rc = measure(c, ctx, &shard, s, &b, mine, &qe);
    if (rc == 0 && MPI_Gather(mine, N_R, MPI_DOUBLE, b.all, N_R, MPI_DOUBLE, 0, ctx->comm) != MPI_SUCCESS) {
        snprintf(qe.message, sizeof qe.message, "MPI_Gather of the ranks' figures failed");
        rc = -1;
    }
    if (rc == 0 && ctx->rank == 0) {
        memcpy(scratch, b.tg_tps, (size_t)c->runs * sizeof *scratch);
        const host_model h = model_of(&b, bm_stats_of(scratch, (int)c->runs).median);
        if (c->json) print_json(&b, &h, scratch);
        else print_text(&b, &h, scratch);
    }
    if (rc != 0) fprintf(stderr, "qmap-mpi bench: rank %d: %s\n", ctx->rank, qe.message);
    qmap_session_free(s);
    qmap_model_close(m);
    free(b.pp_tps);
    free(b.tg_tps);
    free(b.all);
    free(scratch);
    return rc == 0 ? 0 : 1;
}
