/* qmap bench MODEL… — what llama-bench is to llama.cpp: prompt processing (pp) and text generation (tg)
 * speed of whole models, each beside the limit measured in the same run.
 *
 * For each model and thread count: -r timed runs after one warm-up, each run
 *   pp: a fresh session state, one qmap_eval of -p token ids (the GEMM path), timed; beside it the
 *       multiply-add peak (int8 for a Q8_ROW model, FMA otherwise): the fraction of the peak that the
 *       products' operations reach (2 per multiply-add the session counted: qmap_session_get_counters,
 *       each int8 term of X counted once, attention not at all);
 *   tg: a fresh state, -n qmap_eval calls of one token each (the decode path), timed; beside it memory's
 *       read bandwidth (bm_bandwidth_memory) with up to the same number of threads (qmap runs a small
 *       product on one), over an anonymous buffer no cache can hold (bm_memory_buffer_len: >= 4 x the
 *       LLC, never shorter than the model) and over a mapping of the model's own file just after its
 *       lines were flushed from the caches, read just before and just after the run (the better of two);
 *       the speed of light is the better reading divided by the bytes one decode step reads
 *       (qmap_model_info.bytes_per_token: every matrix once, one embedding row; and the KV cache its
 *       attention read, qmap_session_kv_bytes_read, averaged over the run), and the fraction reached.
 * With -d N (llama-bench's --n-depth) each run first evaluates N tokens, untimed, after the reset: the
 * tests then run at that context depth, with the cache's traffic in tg's speed of light.
 * With --mmap 0,1 the model is opened twice, over its mapping and as an anonymous copy (--no-mmap), and
 * every run of a test is taken on both in alternating order; the mapping/copy ratio is taken per run.
 * Figures are medians with min and max of the -r runs; ratios are taken per run, and a run above
 * BM_RATIO_LIMIT x its limit is taken again (bm_run_beside_limit) or stops the command; a run whose
 * readings before and after disagree (bm_limit_steady) is counted, and the fraction is also given over the
 * runs whose limit held. Token ids are
 * fixed and spread over the vocabulary: speed does not depend on the text.
 */
#define QMAP_EXPERIMENTAL /* the session counters, KV bytes and large-page gauges */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_model.h"
#include "bench_measure.h"
#include "bench_parallel.h"
#include "cli.h"
#include "json_out.h"
#include "opts.h"
#include "qm_format.h"
#include "qm_names.h"
#include "qm_reader.h"
#include "qmap.h"
#include "qr_matmul.h"

#define MAX_THREADS 16


typedef struct bm_cfg {
    long pp, tg, runs;
    long depth;               /* -d: tokens evaluated (untimed) before each run's test */
    int threads[MAX_THREADS], n_threads;
    int mmaps[2], n_mmaps;    /* 1: weights read over the file mapping (qmap's way), 0: an anonymous copy */
    int kv;                   /* qmap_kv_type (index into cli_kv_choices) */
    int act;                  /* qmap_act_mode (index into cli_act_choices): Q8_ROW activations */
    bool json, csv;
    int name_width;           /* the table's model column: "ARCH FILE" of the longest file name given */
    int test_width;           /* the test column: "pp512", or "pp512 @ d1024" at a depth */
} bm_cfg;

/* What a model is made of, from its tensor table: bytes per dtype and the multiply-adds of one token. */
typedef struct model_facts {
    uint64_t bytes_by_dtype[QM_DTYPE_ID_LIMIT];
    uint64_t matmul_params;   /* weights of every matrix a token goes through (the tied head included) */
    uint64_t head_params;     /* of which the output head's: a prompt computes only its last token's logits */
    char mix[96];             /* "q8_row 96%, f32 4%" */
} model_facts;

static int facts_of(const char *path, model_facts *mf, char *err, size_t err_size)
{
    memset(mf, 0, sizeof *mf);
    qm_file *f;
    qm_error e;
    if (qm_open(path, &f, &e) != QM_OK) {
        snprintf(err, err_size, "%s", e.message);
        return -1;
    }
    char tok[QM_TENSOR_NAME_MAX], pos[QM_TENSOR_NAME_MAX], out[QM_TENSOR_NAME_MAX];
    qm_tensor_name(tok, sizeof tok, QM_TENSOR_TOK_EMBD, 0);
    qm_tensor_name(pos, sizeof pos, QM_TENSOR_POS_EMBD, 0);
    qm_tensor_name(out, sizeof out, QM_TENSOR_OUTPUT, 0);
    bool has_output = qm_find_tensor(f, out) != NULL;
    uint64_t total = 0;
    for (uint64_t i = 0; i < qm_tensor_count(f); i++) {
        const qm_tensor *t = qm_tensor_at(f, i);
        if (t->dtype < QM_DTYPE_ID_LIMIT) mf->bytes_by_dtype[t->dtype] += t->size;
        total += t->size;
        if (t->rank < 2) continue;
        /* the token embedding is a matrix a token goes through only when it is also the output head */
        if (!strcmp(t->name, pos) || (!strcmp(t->name, tok) && has_output)) continue;
        mf->matmul_params += t->n_elements;   /* a matrix in column panels (rank 3): the same multiply-adds */
        if (!strcmp(t->name, has_output ? out : tok)) mf->head_params = t->dims[0] * t->dims[1];
    }
    size_t k = 0;
    for (unsigned d = 0; d < QM_DTYPE_ID_LIMIT && k < sizeof mf->mix; d++) {
        const qm_dtype_traits *tr = mf->bytes_by_dtype[d] ? qm_dtype_info(d) : NULL;
        if (!tr) continue;
        k += (size_t)snprintf(mf->mix + k, sizeof mf->mix - k, "%s%s %.0f%%", k ? ", " : "", tr->name,
                              100.0 * (double)mf->bytes_by_dtype[d] / (double)(total ? total : 1));
    }
    qm_close(f);
    return 0;
}

void bench_model_ids(int32_t *ids, long n, uint32_t vocab_size)
{
    for (long i = 0; i < n; i++) ids[i] = (int32_t)((uint64_t)(i * 7919 + 13) % vocab_size);
}

/* The model's file mapped read-only, as the runtime maps it (the pages are the same page-cache pages). */
static const uint8_t *map_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return NULL;
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
        *len = (size_t)st.st_size;
    }
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

typedef struct row {
    const char *test;         /* "pp" or "tg" */
    long n;
    int threads, mmap;
    bm_stats tps, limit, frac, bw_anon, bw_map;
    bool cache_holds;         /* tg: the weights fit in twice the LLC: the decode may beat memory's limit */
    int reruns;               /* runs taken again because they came out above BM_RATIO_LIMIT x their limit */
    int steady;               /* runs whose limit held (bm_limit_steady of the readings before and after) */
    bm_stats frac_steady;     /* the fraction over those runs (runs 0: none held) */
    /* each run in order (--json's samples_*, as llama-bench's samples_ts): t/s, fraction of the limit, the
     * limit's readings before and after (GB/s for tg, GOP/s or GFLOP/s for pp) */
    const double *s_tps, *s_frac, *s_before, *s_after;
    double kv_bytes;          /* tg: bytes of KV cache read per token (mean over the runs' tokens) */
    double int8_terms;        /* pp: int8 multiply-adds per weight multiply-add (0: float; 2: every product
                               * in two terms; between 1 and 2: some in one, some in two) */
    uint64_t large_pages;     /* tg over the mapping: its bytes in 2 MiB entries after the runs (UINT64_MAX unknown) */
    size_t llc, anon_len;     /* tg: the last-level cache (0 unknown) and the anonymous buffer read beside it */
} row;

/* Which of a tg row's two readings is its limit (the better median): "anonymous" or "mapping". */
static const char *limit_reading(const row *r)
{
    return r->bw_anon.median >= r->bw_map.median ? "anonymous" : "mapping";
}

static void print_header(const bm_cfg *c)
{
    if (c->csv) {
        printf("model,file_type,size_bytes,params,dtypes,threads,mmap,test,tokens,tps_median,tps_min,tps_max,runs,"
               "limit_median,limit_unit,fraction_median,fraction_min,fraction_max,bw_anon_gbps,bw_map_gbps,int8_terms,reruns,act,kernels,"
               "n_depth,kv_bytes_per_token,steady_runs,fraction_steady_median,limit_reading\n");
    } else if (!c->json) {
        printf("| %-*s | %9s | %8s | %-22s | %3s | %4s | %*s | %-22s | %-30s | %-16s |\n", c->name_width, "model", "size",
               "params", "dtypes", "thr", "mmap", c->test_width, "test", "t/s median [min-max]", "limit (measured beside)",
               "x limit");
        printf("|");
        for (int i = 0; i < c->name_width + 2; i++) putchar('-');
        printf("|%.11s|%.10s|%.24s|%.5s|%.6s|", "-----------", "----------", "------------------------", "-----", "------");
        for (int i = 0; i < c->test_width + 2; i++) putchar('-');
        printf("|%.24s|%.32s|%.18s|\n", "------------------------", "--------------------------------", "------------------");
    }
}

/* Whether a model's prompt products run on int8 (a Q8_ROW model, unless --act f32), measured against the
 * int8 peak, or on float, against the FMA peak. */
static bool pp_on_int8(const bm_cfg *c, const qmap_model_info *in)
{
    return strcmp(in->file_type, "q8_row") == 0 && c->act != QMAP_ACT_F32;
}

/* The size column's form: GiB with two decimals from 1 GiB, MiB with one below. */
static char *binary_size(uint64_t bytes, char *buf, size_t size)
{
    if (bytes >= (1ull << 30)) snprintf(buf, size, "%.2f GiB", (double)bytes / (1 << 30));
    else snprintf(buf, size, "%.1f MiB", (double)bytes / (1 << 20));
    return buf;
}

static void print_row(const bm_cfg *c, json_out *j, const qmap_model_info *in, const model_facts *mf, const char *label,
                      const row *r)
{
    char test[32], label_test[48], size[32], params[32], tps[64], limit[64], frac[48];
    snprintf(test, sizeof test, "%s%ld", r->test, r->n);
    if (c->depth) snprintf(label_test, sizeof label_test, "%s @ d%ld", test, c->depth);
    else snprintf(label_test, sizeof label_test, "%s", test);
    bool tg = r->test[0] == 't';
    const char *unit = tg ? "t/s" : pp_on_int8(c, in) ? "GOP/s int8" : "GFLOP/s fma";
    if (c->json) {
        jo_begin_object(j, NULL);
        jo_cstring(j, "model", in->path);
        jo_cstring(j, "arch", in->arch);
        jo_cstring(j, "file_type", in->file_type);
        jo_u64(j, "size_bytes", in->file_size);
        jo_u64(j, "params", in->n_params);
        jo_cstring(j, "dtypes", mf->mix);
        jo_u64(j, "bytes_per_token", in->bytes_per_token);
        jo_u64(j, "threads", (uint64_t)r->threads);
        jo_bool(j, "mmap", r->mmap != 0);
        jo_cstring(j, "act", cli_act_choices[c->act]);
        jo_cstring(j, "kernels", qr_kernels_name(qr_kernels_get()));
        jo_cstring(j, "test", test);
        jo_u64(j, "n_depth", (uint64_t)c->depth);
        jo_begin_object(j, "tokens_per_second");
        bm_json_stats(j, &r->tps, "t/s");
        jo_end_object(j);
        if (!tg) jo_f64(j, "int8_terms", r->int8_terms);
        jo_u64(j, "reruns", (uint64_t)r->reruns);
        jo_u64(j, "steady_runs", (uint64_t)r->steady);
        if (r->steady) {
            jo_begin_object(j, "fraction_steady");
            bm_json_stats(j, &r->frac_steady, "ratio");
            jo_end_object(j);
        } else jo_null(j, "fraction_steady");
        const char *sample_names[4] = { "samples_ts", "samples_fraction", "samples_limit_before", "samples_limit_after" };
        const double *samples[4] = { r->s_tps, r->s_frac, r->s_before, r->s_after };
        for (int k = 0; k < 4; k++) {
            jo_begin_array(j, sample_names[k]);
            for (int i = 0; i < r->tps.runs; i++) jo_f64(j, NULL, samples[k][i]);
            jo_end_array(j);
        }
        jo_begin_object(j, tg ? "speed_of_light" : "peak");
        bm_json_stats(j, &r->limit, unit);
        jo_end_object(j);
        jo_begin_object(j, tg ? "fraction_of_speed_of_light" : "fraction_of_peak");
        bm_json_stats(j, &r->frac, "ratio");
        jo_end_object(j);
        if (tg && r->mmap) {
            if (r->large_pages != UINT64_MAX) jo_u64(j, "mapping_2mib_bytes", r->large_pages);
            else jo_null(j, "mapping_2mib_bytes");
        }
        if (tg) {
            jo_f64(j, "kv_bytes_per_token", r->kv_bytes);
            jo_begin_object(j, "bandwidth_anonymous");
            bm_json_stats(j, &r->bw_anon, "GB/s");
            jo_end_object(j);
            jo_begin_object(j, "bandwidth_file_mapping");
            bm_json_stats(j, &r->bw_map, "GB/s");
            jo_end_object(j);
            jo_cstring(j, "limit_reading", limit_reading(r));
            jo_u64(j, "limit_buffer_bytes", r->anon_len);
            jo_u64(j, "llc_bytes", r->llc);
            jo_bool(j, "weights_fit_cache", r->cache_holds);
        }
        jo_end_object(j);
        return;
    }
    if (c->csv) {
        printf("%s,%s,%llu,%llu,\"%s\",%d,%d,%s,%ld,%.3f,%.3f,%.3f,%d,%.3f,%s,%.4f,%.4f,%.4f,%.3f,%.3f,%.6f,%d,%s,%s,%ld,%.0f,%d,%.4f,%s\n",
               in->path,
               in->file_type, (unsigned long long)in->file_size, (unsigned long long)in->n_params, mf->mix, r->threads,
               r->mmap, r->test, r->n, r->tps.median, r->tps.min, r->tps.max, r->tps.runs, r->limit.median, unit,
               r->frac.median, r->frac.min, r->frac.max, tg ? r->bw_anon.median : NAN, tg ? r->bw_map.median : NAN,
               tg ? NAN : r->int8_terms, r->reruns, cli_act_choices[c->act], qr_kernels_name(qr_kernels_get()), c->depth,
               tg ? r->kv_bytes : NAN, r->steady, r->steady ? r->frac_steady.median : NAN, tg ? limit_reading(r) : "");
        return;
    }
    binary_size(in->file_size, size, sizeof size);
    snprintf(params, sizeof params, in->n_params >= 1000000000 ? "%.2f B" : "%.1f M",
             (double)in->n_params / (in->n_params >= 1000000000 ? 1e9 : 1e6));
    /* whole tokens past 1000/s (a tiny model's figures), so the columns stay as wide as their header */
    int tps_dec = r->tps.max >= 1000 ? 0 : 2;
    snprintf(tps, sizeof tps, "%.*f [%.*f-%.*f]", tps_dec, r->tps.median, tps_dec, r->tps.min, tps_dec, r->tps.max);
    if (tg)
        snprintf(limit, sizeof limit, "%.*f t/s (%.1f GB/s %s)", r->limit.median >= 1000 ? 0 : 1, r->limit.median,
                 fmax(r->bw_anon.median, r->bw_map.median), r->bw_anon.median >= r->bw_map.median ? "anon" : "map");
    else if (isnan(r->limit.median)) snprintf(limit, sizeof limit, "n/a (no %s)", unit + 6);
    else if (r->int8_terms > 1.005) /* not every product in one term: say how many on average */
        snprintf(limit, sizeof limit, "%.0f %s, %.2f terms", r->limit.median, unit, r->int8_terms);
    else snprintf(limit, sizeof limit, "%.0f %s", r->limit.median, unit);
    if (isnan(r->frac.median)) snprintf(frac, sizeof frac, "-");
    else snprintf(frac, sizeof frac, "%.2f [%.2f-%.2f]", r->frac.median, r->frac.min, r->frac.max);
    printf("| %-*.*s | %9s | %8s | %-22.22s | %3d | %4d | %*s | %-22s | %-30s | %-16s |\n", c->name_width, c->name_width,
           label, size, params, mf->mix, r->threads, r->mmap, c->test_width, label_test, tps, limit, frac);
    fflush(stdout);
}

/* Memory's best read bandwidth with up to t threads (a decode step may run a small product on fewer): over
 * the anonymous buffer (*a) and over the mapping flushed from the caches (*b), bm_bandwidth_memory. */
static void limit_readings(const uint8_t *anon, size_t anon_len, const uint8_t *map, size_t map_len, int t,
                           double *a, double *b)
{
    *a = *b = 0;
    for (int q = 1; q <= t; q++) {
        double qa, qb;
        bm_bandwidth_memory(anon, anon_len, map, map_len, q, &qa, &qb);
        *a = fmax(*a, qa);
        *b = fmax(*b, qb);
    }
}

/* bm_stats_of over a copy of v in scratch (n values each): v keeps the runs' order for --json's samples. */
static bm_stats stats_of_copy(const double *v, int n, double *scratch)
{
    memcpy(scratch, v, (size_t)n * sizeof *v);
    return bm_stats_of(scratch, n);
}

/* bench_model.h; the tg baselines' readings are timed_run's, around it. */
qmap_status bench_model_time_test(qmap_session *s, int test, const int32_t *ids, long depth, long n, double *tps,
                                  qmap_session_counters *work, uint64_t *kv_bytes, qmap_error *qe)
{
    qmap_session_reset(s);
    qmap_status st = depth > 0 ? qmap_eval(s, ids, (size_t)depth, qe) : QMAP_OK;
    if (st != QMAP_OK) return st;
    ids += depth;
    qmap_session_counters before, after;
    qmap_session_get_counters(s, &before);
    const uint64_t kv0 = qmap_session_kv_bytes_read(s);
    double t0 = bm_now();
    if (test == 0) st = qmap_eval(s, ids, (size_t)n, qe);
    else for (long i = 0; i < n && st == QMAP_OK; i++) st = qmap_eval(s, ids + i, 1, qe);
    *tps = (double)n / (bm_now() - t0);
    qmap_session_get_counters(s, &after);
    work->int8_madds = after.int8_madds - before.int8_madds;
    work->float_madds = after.float_madds - before.float_madds;
    *kv_bytes = qmap_session_kv_bytes_read(s) - kv0;
    return st;
}

/* One measured run of a test and the limit read beside it (timed_run): what it needs, and what it gives. */
typedef struct run_ctx {
    qmap_session *s;
    int test;                      /* 0: pp, 1: tg */
    const int32_t *ids;
    long depth, n;
    int threads;
    const uint8_t *anon, *map;     /* tg: the bandwidth baselines' buffers */
    size_t anon_len, map_len;
    bm_peak_kind pk;               /* pp: the peak measured */
    uint64_t peak_iters;
    const model_facts *mf;
    uint64_t bytes_per_token;
    double tps, limit, frac, bw_anon, bw_map, int8_terms;   /* out */
    double before, after;          /* out: the limit's readings (GB/s or GOP/s) just before and just after */
    double kv_bytes;               /* out, tg: KV cache bytes read per token */
    bool failed;                   /* out: qe says why */
    qmap_error qe;
} run_ctx;

/* The limit both before and after the run, the better of the two: on a shared host it can change between
 * the run and one reading beside it (single runs of 1.2-1.4 x a 2-thread speed of light, and 1.09 x a
 * 2-thread FMA peak, were seen with one reading after). Returns the fraction of the limit (bm_ratio_run_fn). */
static double timed_run(void *p)
{
    run_ctx *r = p;
    double pre_a = 0, pre_b = 0, pre_peak = 0;
    if (r->test == 1) limit_readings(r->anon, r->anon_len, r->map, r->map_len, r->threads, &pre_a, &pre_b);
    else pre_peak = bm_peak_once(r->pk, r->peak_iters, r->threads);
    qmap_session_counters work;
    uint64_t kv_bytes;
    if (bench_model_time_test(r->s, r->test, r->ids, r->depth, r->n, &r->tps, &work, &kv_bytes, &r->qe) != QMAP_OK) {
        r->failed = true;
        return NAN;
    }
    if (r->test == 0) {
        r->before = pre_peak;
        r->after = bm_peak_once(r->pk, r->peak_iters, r->threads);
        r->limit = fmax(r->before, r->after);
        /* the work the session counted: each int8 term of X once (two terms run every multiply-add twice),
         * the head only for the last token (a prompt keeps the last logits; counting it n times put GPT-2's
         * F16 pp512, whose tied head is 31% of its weights, at 1.06 x the FMA peak) */
        const double ops = 2.0 * (double)(work.int8_madds + work.float_madds);
        r->frac = bm_ratio(ops / (double)r->n * r->tps / 1e9, r->limit);
        /* every token through the layers' matrices, the head once */
        const double weight_madds = (double)(r->mf->matmul_params - r->mf->head_params) * (double)r->n +
                                    (double)r->mf->head_params;
        r->int8_terms = (double)work.int8_madds / weight_madds;
    } else {
        double a, b;
        limit_readings(r->anon, r->anon_len, r->map, r->map_len, r->threads, &a, &b);
        r->bw_anon = fmax(a, pre_a);
        r->bw_map = fmax(b, pre_b);
        r->before = fmax(pre_a, pre_b);
        r->after = fmax(a, b);
        /* the weights once and the cache as far as each step's attention reached */
        r->kv_bytes = (double)kv_bytes / (double)r->n;
        r->limit = fmax(r->bw_anon, r->bw_map) * 1e9 / ((double)r->bytes_per_token + r->kv_bytes);
        r->frac = bm_ratio(r->tps, r->limit);
    }
    return r->frac;
}

/* Each run's figures, in the runs' order (--json's samples); statistics are taken over a scratch copy. */
enum { V_TPS, V_LIMIT, V_FRAC, V_BW_ANON, V_BW_MAP, V_BEFORE, V_AFTER, N_V };

/* One model under test: open over the mapping and/or an anonymous copy (both at once, their runs
 * interleaved), the tg baselines' buffers, the prompt ids and the per-run figures. bench_one's state. */
typedef struct model_bench {
    const bm_cfg *c;
    const char *path;
    qmap_model *m[2];
    qmap_session *s[2];
    qmap_model_info in;
    model_facts mf;
    char label[96];
    uint8_t *anon;               /* tg: anonymous buffer of the bandwidth baseline */
    const uint8_t *map;          /* tg: the model's file, mapped for the baseline */
    size_t anon_len, map_len;
    size_t llc;                  /* tg: the last-level cache's bytes (0 unknown: bm_llc_bytes) */
    int32_t *ids;
    double *v[2][N_V], *ratio, *scratch;
    bm_peak_kind pk;
    char *err;
    size_t err_size;
} model_bench;

static int mb_fail(model_bench *b, const char *msg)
{
    snprintf(b->err, b->err_size, "%s", msg);
    return -1;
}

static int mb_open_models(model_bench *b)
{
    qmap_error qe = { 0 };
    for (int mi = 0; mi < b->c->n_mmaps; mi++) {
        qmap_model_params mp;
        qmap_model_params_default(&mp);
        mp.no_mmap = b->c->mmaps[mi] == 0;
        mp.large_pages = true; /* as qmap run maps a model */
        cli_exit_on_model_change("qmap bench", b->path);
        if (qmap_model_open(b->path, &mp, &b->m[mi], &qe) != QMAP_OK) return mb_fail(b, qe.message);
    }
    qmap_model_get_info(b->m[0], &b->in);
    if (b->in.kind != QMAP_KIND_LM) {
        snprintf(b->err, b->err_size, "%s: a %s model is not a language model: qmap bench MODEL measures decoder LMs "
                 "(the classifier and encoder-decoder benchmarks are tests/bench/bench_mlp.py and bench_g2p.py)",
                 b->path, b->in.arch);
        return -1;
    }
    const char *base = strrchr(b->path, '/');
    snprintf(b->label, sizeof b->label, "%s %s", b->in.arch, base ? base + 1 : b->path);
    return 0;
}

/* The tg baselines' buffers, the ids and the per-run arrays. */
static int mb_alloc(model_bench *b)
{
    const bm_cfg *c = b->c;
    int max_t = 1;
    for (int i = 0; i < c->n_threads; i++) if (c->threads[i] > max_t) max_t = c->threads[i];
    if (c->tg > 0) { /* the bandwidth baselines of tg (a pp-only run needs neither) */
        b->llc = bm_llc_bytes();
        b->anon_len = bm_memory_buffer_len(b->llc, (size_t)b->in.bytes_per_token);
        b->anon = bm_anon_buffer(b->anon_len, max_t);
        b->map = map_file(b->path, &b->map_len);
    }
    long n_ids = c->depth + (c->pp > c->tg ? c->pp : c->tg);
    b->ids = malloc((size_t)(n_ids ? n_ids : 1) * sizeof *b->ids);
    b->ratio = malloc((size_t)c->runs * sizeof *b->ratio);
    b->scratch = malloc((size_t)c->runs * sizeof *b->scratch);
    bool ok = (c->tg == 0 || (b->anon && b->map)) && b->ids && b->ratio && b->scratch;
    for (int mi = 0; mi < c->n_mmaps; mi++)
        for (int i = 0; i < N_V; i++) ok = ok && (b->v[mi][i] = malloc((size_t)c->runs * sizeof(double))) != NULL;
    if (!ok) {
        snprintf(b->err, b->err_size, "%s: cannot set up the baselines (%zu bytes of memory, the file mapping): %s",
                 b->path, b->anon_len, strerror(errno));
        return -1;
    }
    bench_model_ids(b->ids, n_ids, b->in.vocab_size);
    b->pk = pp_on_int8(c, &b->in) ? BM_PEAK_INT8 : BM_PEAK_FMA;
    return 0;
}

static void mb_free(model_bench *b)
{
    for (int mi = 0; mi < 2; mi++) {
        for (int i = 0; i < N_V; i++) free(b->v[mi][i]);
        qmap_session_free(b->s[mi]);
        qmap_model_close(b->m[mi]);
    }
    free(b->ratio);
    free(b->scratch);
    free(b->ids);
    if (b->map) munmap((void *)b->map, b->map_len);
    if (b->anon) munmap(b->anon, b->anon_len);
}

/* A session of t threads on every open model, sized for the longest test. */
static int mb_sessions_new(model_bench *b, int t)
{
    const bm_cfg *c = b->c;
    qmap_session_params sp;
    qmap_session_params_default(&sp);
    sp.n_ctx = (uint32_t)(c->depth + (c->pp > c->tg ? c->pp : c->tg) + 1);
    /* a prompt in one evaluation; a depth without one in chunks of up to 512 */
    sp.n_batch = (uint32_t)(c->pp > 0 ? c->pp : c->depth > 0 ? (c->depth < 512 ? c->depth : 512) : 1);
    sp.threads = t;
    sp.kv_type = (qmap_kv_type)c->kv;
    sp.act = (qmap_act_mode)c->act;
    qmap_error qe = { 0 };
    for (int mi = 0; mi < c->n_mmaps; mi++)
        if (qmap_session_new(b->m[mi], &sp, &b->s[mi], &qe) != QMAP_OK) return mb_fail(b, qe.message);
    return 0;
}

static void mb_sessions_free(model_bench *b)
{
    for (int mi = 0; mi < 2; mi++) {
        qmap_session_free(b->s[mi]);
        b->s[mi] = NULL;
    }
}

/* What one test's runs leave beside the per-run arrays. */
typedef struct test_result {
    int reruns[2];
    double int8_terms;           /* pp: as run_ctx.int8_terms (the same in every run) */
    double kv_per_token;         /* tg: as run_ctx.kv_bytes (the same in every run: the same positions) */
} test_result;

/* One timed run of model mi (run >= 0) beside its limit, stored at index run; 0 or -1 with the error set. */
static int mb_one_run(model_bench *b, int mi, int t, int test, long n, int run, test_result *tr)
{
    run_ctx rx = { .s = b->s[mi], .test = test, .ids = b->ids, .depth = b->c->depth, .n = n, .threads = t,
                   .anon = b->anon, .map = b->map, .anon_len = b->anon_len, .map_len = b->map_len, .pk = b->pk,
                   .peak_iters = 4000000, .mf = &b->mf, .bytes_per_token = b->in.bytes_per_token };
    /* weights the cache holds can be read faster than memory: no rerun, no error above the limit */
    const bool cache_holds = test == 1 && bm_cache_may_hold(b->llc, (size_t)b->in.bytes_per_token);
    double f = bm_run_beside_limit(timed_run, &rx, cache_holds ? 0 : BM_MAX_RERUNS, &tr->reruns[mi]);
    if (rx.failed) return mb_fail(b, rx.qe.message);
    /* decoding cannot read the weights faster than memory, and a prompt cannot multiply faster than the
     * instruction peak: not a state change mid-run when every try came out above it */
    if (f > BM_RATIO_LIMIT && !cache_holds) {
        snprintf(b->err, b->err_size, "%s: %s%ld with %d threads ran at %.2f x the %s measured beside it, in %d "
                 "tries: that baseline is wrong (or the %s), so no fraction is printed", b->path,
                 test == 0 ? "pp" : "tg", n, t, f, test ? "speed of light" : "multiply-add peak", BM_MAX_RERUNS + 1,
                 test ? "bytes per token are" : "operations counted per token are");
        return -1;
    }
    double **w = b->v[mi];
    w[V_TPS][run] = rx.tps;
    w[V_LIMIT][run] = rx.limit;
    w[V_FRAC][run] = rx.frac;
    w[V_BEFORE][run] = rx.before;
    w[V_AFTER][run] = rx.after;
    if (test == 0) tr->int8_terms = rx.int8_terms;
    else {
        tr->kv_per_token = rx.kv_bytes;
        w[V_BW_ANON][run] = rx.bw_anon;
        w[V_BW_MAP][run] = rx.bw_map;
    }
    return 0;
}

/* The warm-up, then c->runs runs of one test on every open model, alternating which goes first. */
static int mb_run_test(model_bench *b, int t, int test, long n, test_result *tr)
{
    const bm_cfg *c = b->c;
    const int nm = c->n_mmaps;
    for (int mi = 0; mi < nm; mi++) {
        double tps;
        qmap_session_counters work;
        uint64_t kv_bytes;
        qmap_error qe = { 0 };
        if (bench_model_time_test(b->s[mi], test, b->ids, c->depth, n, &tps, &work, &kv_bytes, &qe) != QMAP_OK)
            return mb_fail(b, qe.message);
    }
    for (int run = 0; run < c->runs; run++) {
        for (int k = 0; k < nm; k++)
            if (mb_one_run(b, (k + run) % nm, t, test, n, run, tr) != 0) return -1;
        if (nm == 2) {
            const int over_map = c->mmaps[0] ? 0 : 1;
            b->ratio[run] = bm_ratio(b->v[over_map][V_TPS][run], b->v[1 - over_map][V_TPS][run]);
        }
    }
    return 0;
}

/* The row of model mi from its runs' figures. */
static row mb_row(model_bench *b, int mi, int t, int test, long n, const test_result *tr)
{
    const bm_cfg *c = b->c;
    row r = { .test = test == 0 ? "pp" : "tg", .n = n, .threads = t, .mmap = c->mmaps[mi],
              .int8_terms = tr->int8_terms, .kv_bytes = tr->kv_per_token, .reruns = tr->reruns[mi],
              /* tg rows only (the JSON's field): each call reads /proc/self/smaps */
              .large_pages = test == 1 && c->mmaps[mi] ? qmap_model_large_page_bytes(b->m[mi]) : UINT64_MAX,
              .cache_holds = test == 1 && bm_cache_may_hold(b->llc, (size_t)b->in.bytes_per_token),
              .llc = b->llc, .anon_len = b->anon_len };
    double *const *w = b->v[mi];
    const int runs = (int)c->runs;
    for (int k = 0; k < runs; k++)
        if (bm_limit_steady(w[V_BEFORE][k], w[V_AFTER][k])) b->scratch[r.steady++] = w[V_FRAC][k];
    if (r.steady) r.frac_steady = bm_stats_of(b->scratch, r.steady);
    r.tps = stats_of_copy(w[V_TPS], runs, b->scratch);
    r.limit = stats_of_copy(w[V_LIMIT], runs, b->scratch);
    r.frac = stats_of_copy(w[V_FRAC], runs, b->scratch);
    if (test == 1) {
        r.bw_anon = stats_of_copy(w[V_BW_ANON], runs, b->scratch);
        r.bw_map = stats_of_copy(w[V_BW_MAP], runs, b->scratch);
    }
    r.s_tps = w[V_TPS];
    r.s_frac = w[V_FRAC];
    r.s_before = w[V_BEFORE];
    r.s_after = w[V_AFTER];
    return r;
}

/* Below a table row, on stderr: runs taken again, and runs whose limit did not hold. */
static void print_row_notes(const bm_cfg *c, const row *r, int test)
{
    if (c->json || c->csv) return;
    if (test) {
        char llc[32] = "unknown";
        if (r->llc) snprintf(llc, sizeof llc, "%.0f MiB", (double)r->llc / (1 << 20));
        fprintf(stderr, "qmap bench: %s%ld, %d thr: limit from the %s reading: %.1f GB/s over %.0f MiB of anonymous "
                "memory (>= %d x the LLC, %s, and the model), %.1f GB/s over the model's mapping flushed from the "
                "caches (%.2f x)\n", r->test, r->n, r->threads, limit_reading(r), r->bw_anon.median,
                (double)r->anon_len / (1 << 20), BM_LLC_MULTIPLE, llc, r->bw_map.median,
                bm_ratio(r->bw_map.median, r->bw_anon.median));
        if (r->cache_holds)
            fprintf(stderr, "qmap bench: %s%ld, %d thr: the weights fit in twice the LLC: the decode reads part of "
                    "them from the cache, and 'x limit' (memory's) can pass 1\n", r->test, r->n, r->threads);
    }
    if (r->reruns)
        fprintf(stderr, "qmap bench: %s%ld, %d thr: %d run%s came out above %.2f x the limit read before and "
                "after %s and %s taken again (the host's %s changed during the run)\n", r->test, r->n, r->threads,
                r->reruns, r->reruns > 1 ? "s" : "", BM_RATIO_LIMIT, r->reruns > 1 ? "them" : "it",
                r->reruns > 1 ? "were" : "was", test ? "bandwidth" : "peak");
    if (r->steady < c->runs) {
        char over[96] = "no run's limit held";
        if (r->steady)
            snprintf(over, sizeof over, "over the %d whose limit held: x limit %.2f [%.2f-%.2f]", r->steady,
                     r->frac_steady.median, r->frac_steady.min, r->frac_steady.max);
        fprintf(stderr, "qmap bench: %s%ld, %d thr: the %s read before and after %ld of %ld runs differed by "
                "more than %.0f%% (the host changed state around them; their fractions say more about "
                "it than about the model); %s\n", r->test, r->n, r->threads, test ? "bandwidth" : "peak",
                c->runs - r->steady, c->runs, 100 * BM_STEADY_SPREAD, over);
    }
}

/* One test's rows (one per open model), their notes, and with both ways the mapping / copy ratio. */
static void mb_report_test(model_bench *b, json_out *j, int t, int test, long n, const test_result *tr)
{
    const bm_cfg *c = b->c;
    for (int mi = 0; mi < c->n_mmaps; mi++) {
        const row r = mb_row(b, mi, t, test, n, tr);
        print_row(c, j, &b->in, &b->mf, b->label, &r);
        print_row_notes(c, &r, test);
    }
    /* both ways measured: the figure that decides qmap's premise (the mapping as fast as a copy) */
    if (c->n_mmaps == 2 && !c->json && !c->csv) {
        bm_stats q = bm_stats_of(b->ratio, (int)c->runs);
        printf("|   %s%ld, %d thr: over the mapping / over an anonymous copy = %.2f [%.2f-%.2f] (per-run "
               "ratios, runs interleaved)\n", test == 0 ? "pp" : "tg", n, t, q.median, q.min, q.max);
    }
}

/* One model at every thread count, over the mapping and/or an anonymous copy (both open at once, their
 * runs interleaved in alternating order so that the machine's drift falls on both alike); *large_pages:
 * the mapping's bytes in 2 MiB entries after the runs (UINT64_MAX unknown or not mapped). Returns 0, or
 * -1 with err set. */
static int bench_one(const bm_cfg *c, const char *path, json_out *j, uint64_t *large_pages, uint64_t *file_size,
                     char *err, size_t err_size)
{
    model_bench b = { .c = c, .path = path, .err = err, .err_size = err_size };
    int rc = facts_of(path, &b.mf, err, err_size) != 0 || mb_open_models(&b) != 0 || mb_alloc(&b) != 0 ? -1 : 0;
    for (int ti = 0; ti < c->n_threads && rc == 0; ti++) {
        const int t = c->threads[ti];
        rc = mb_sessions_new(&b, t);
        for (int test = 0; test < 2 && rc == 0; test++) {
            const long n = test == 0 ? c->pp : c->tg;
            test_result tr = { { 0, 0 }, 0, 0 };
            if (n <= 0) continue;
            rc = mb_run_test(&b, t, test, n, &tr);
            if (rc == 0) mb_report_test(&b, j, t, test, n, &tr);
        }
        mb_sessions_free(&b);
    }
    /* after the runs: the page cache may have split some of the file's 2 MiB folios while they ran */
    for (int mi = 0; mi < c->n_mmaps && rc == 0; mi++)
        if (c->mmaps[mi]) {
            *large_pages = qmap_model_large_page_bytes(b.m[mi]);
            *file_size = b.in.file_size;
        }
    mb_free(&b);
    return rc;
}

static const char BENCH_MODEL_DESCRIPTION[] =
    "Prompt processing (pp: -p tokens in one evaluation, the GEMM path) and text generation (tg: -n\n"
    "tokens one at a time, the decode path) in tokens/s, median [min-max] of -r runs after a warm-up, one\n"
    "row per model, thread count and test, as llama.cpp's llama-bench prints them. Beside each tg run,\n"
    "just before and just after it, memory's best read bandwidth is measured two ways no cache can serve:\n"
    "a pass over anonymous memory of at least 4 x the last-level cache and never less than the model\n"
    "('anon'), and a pass over the model's file mapping right after its lines were flushed from the\n"
    "caches ('map'); a note on stderr gives both (--json: bandwidth_anonymous, bandwidth_file_mapping,\n"
    "limit_reading, limit_buffer_bytes, llc_bytes). The speed of light is the better reading divided by\n"
    "the bytes one token reads (every matrix once, one embedding row, and the KV cache its attention read, on average\n"
    "over the run: qmap_session_kv_bytes_read), and 'x limit' the fraction of it reached. With -d N each\n"
    "run first evaluates N tokens (untimed), so that pp and tg run at that context depth (the test column\n"
    "says '@ dN'), as llama-bench's -d does. Beside each pp run (before and after, the better reading)\n"
    "the multiply-add peak is measured (int8 for a Q8_ROW model: AVX-512 VNNI, or AVX2's\n"
    "vpmaddubsw+vpmaddwd without it; FMA otherwise or with --act f32): 'x limit' counts 2 operations per\n"
    "multiply-add the session ran (qmap_session_get_counters: a product in two int8 terms runs each\n"
    "multiply-add twice, and 'limit' says how many terms a weight took on average), the output head once\n"
    "per prompt (only the last token's logits are computed), and no attention.\n"
    "Weights that fit in twice the LLC (--json: weights_fit_cache) decode partly from the cache, and their\n"
    "'x limit' (memory's) can pass 1. Else no run is printed above 1.05 x its limit: such a run is taken\n"
    "again with new readings (the host changed during it; at most 3 times, counted as reruns), and one\n"
    "still above after that means the baseline is wrong: the command stops with an error instead. A run\n"
    "whose limit read before and after differs by more than 10% (the host changed state around it) is\n"
    "kept, but counted: after its row a\n"
    "line on stderr says how many and gives the fraction over the runs whose limit held (readings that\n"
    "agree do not prove that the host held between them; --json: steady_runs, fraction_steady; --csv:\n"
    "steady_runs, fraction_steady_median). --json also gives each run in order, as llama-bench's\n"
    "samples_ts: samples_ts, samples_fraction, samples_limit_before, samples_limit_after. Below the\n"
    "table, how much of each model's mapping is in 2 MiB pages (weights in 4 KiB pages can stream\n"
    "slower: qmap_model_params.large_pages).\n"
    "With --parallel 1,4,8 (llama-batched-bench's measure, on qmap_batch): for each P, P sequences each\n"
    "read a prompt of -p tokens (pp: all prompts through evaluations of up to 512 tokens together), then\n"
    "-n decode steps of P tokens each, one evaluation a step (tg: every weight read once for all P); per\n"
    "P and thread count, median [min-max] of -r runs after a warm-up of the aggregate pp and tg tokens/s,\n"
    "tg per sequence (the aggregate / P) and the aggregate tg over the first P's ('tg x P1'). The header\n"
    "gives the load average (a busy host moves the figures; ratios within one run hold better). No limit\n"
    "is measured beside these runs; -d, --mmap and --csv do not apply. --json: one object per row\n"
    "(P, pp_tokens, tg_tokens, pp_tok_s, tg_tok_s, tg_tok_s_per_seq, tg_ratio_to_first, samples_pp,\n"
    "samples_tg, load_average).";

/* qmap bench MODEL... --parallel LIST: every model, thread count and P (bench_parallel.c). */
static int bench_model_parallel(const bm_cfg *c, const char *list, int argc, char **argv, int first)
{
    long ps[BM_MAX_LIST];
    int n_ps = 0;
    if (bm_parse_list(list, 1, 4096, 1, ps, BM_MAX_LIST, &n_ps) != 0 || n_ps == 0) {
        fprintf(stderr, "qmap bench: --parallel needs a list like 1,4,8 (each 1..4096, at most %d)\n", BM_MAX_LIST);
        return 2;
    }
    if (c->csv || c->depth || c->n_mmaps != 1 || c->mmaps[0] != 1) {
        fprintf(stderr, "qmap bench: --parallel takes no --csv, -d or --mmap\n");
        return 2;
    }
    bp_cfg p = { .pp = c->pp, .tg = c->tg, .runs = c->runs, .parallel = ps, .n_parallel = n_ps, .kv = c->kv,
                 .act = c->act, .n_batch = 512, .json = c->json, .name_width = 20 };
    for (int i = first; i < argc; i++) {   /* the model column: the longest file name, cut at 60 */
        const char *base = strrchr(argv[i], '/');
        int w = (int)strlen(base ? base + 1 : argv[i]);
        if (w > p.name_width) p.name_width = w > 60 ? 60 : w;
    }
    json_out j = { .fp = stdout };
    if (c->json) jo_begin_array(&j, NULL);
    else bench_parallel_header(&p);
    char err[1024] = "";
    int rc = 0;
    for (int i = first; i < argc && rc == 0; i++)
        for (int t = 0; t < c->n_threads && rc == 0; t++) {
            p.threads = c->threads[t];
            if (bench_parallel(&p, argv[i], &j, err, sizeof err) != 0) rc = 1;
        }
    if (c->json) {
        jo_end_array(&j);
        fputc('\n', stdout);
    }
    if (rc) fprintf(stderr, "qmap bench: %s\n", err);
    return rc;
}

int bench_model(int argc, char **argv)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char def_threads[32];
    snprintf(def_threads, sizeof def_threads, cores > 1 ? "1,%ld" : "1", cores);
    bm_cfg c = { .pp = 512, .tg = 128, .runs = 5 };
    const char *threads = def_threads, *mmaps = "1", *parallel = NULL;
    bool no_mmap = false;
    const cli_opt opts[] = {
        { "n-prompt", 'p', CLI_INT, &c.pp, "N", 0, 8192, NULL, "prompt tokens of the pp test; 0 skips it", false },
        { "n-gen", 'n', CLI_INT, &c.tg, "N", 0, 8192, NULL, "tokens of the tg test; 0 skips it", false },
        { "n-depth", 'd', CLI_INT, &c.depth, "N", 0, 1 << 20, NULL, "context depth: N tokens evaluated (untimed) before each run, as llama-bench -d", false },
        { "threads", 't', CLI_STRING, &threads, "LIST", 0, 0, NULL, "thread counts, comma-separated (default: 1 and every core)", true },
        { "repetitions", 'r', CLI_INT, &c.runs, "N", 1, 1000, NULL, "timed runs of each test, after one warm-up", false },
        { "kv", 0, CLI_CHOICE, &c.kv, "TYPE", 0, 0, cli_kv_choices, "KV cache element type", false },
        { "act", 0, CLI_CHOICE, &c.act, "MODE", 0, 0, cli_act_choices, "Q8_ROW activations, as qmap run --act: auto (one int8 term after a norm or attention, two elsewhere), precise (float accuracy), int8 (one term), int8x2 (two terms always)", false },
        { "mmap", 0, CLI_STRING, &mmaps, "LIST", 0, 0, NULL, "1: over the file mapping, 0: over an anonymous copy; 0,1: both, and the ratio (default: 1)", true },
        { "no-mmap", 0, CLI_FLAG, &no_mmap, NULL, 0, 0, NULL, "the same as --mmap 0", false },
        { "json", 0, CLI_FLAG, &c.json, NULL, 0, 0, NULL, "print one JSON array of results", false },
        { "csv", 0, CLI_FLAG, &c.csv, NULL, 0, 0, NULL, "print CSV rows instead of the table", false },
        { "parallel", 0, CLI_STRING, &parallel, "LIST", 0, 0, NULL, "numbers of sequences decoded together, comma-separated: llama-batched-bench's measure instead (above)", true },
    };
    const cli_command cmd = {
        "bench", "qmap bench MODEL.qmap [MODEL2.qmap ...] [options]",
        BENCH_MODEL_DESCRIPTION,
        opts, sizeof opts / sizeof opts[0],
        "'qmap bench kernels --help' measures the kernels alone.\nexit status: 0 done, 1 a model or a measurement failed (or MODEL was truncated or overwritten in place\nwhile it ran), 2 usage error"
    };
    int first;
    int prc = cli_parse(&cmd, argc, argv, &first);
    if (prc == 1) return 0;
    if (prc != 0) return 2;
    if (bm_parse_threads(threads, c.threads, MAX_THREADS, &c.n_threads) != 0) {
        fprintf(stderr, "qmap bench: --threads needs a list like 1,2 (each 1..1024, at most %d)\n", MAX_THREADS);
        return 2;
    }
    if (no_mmap) mmaps = "0";
    if (!strcmp(mmaps, "1")) c.mmaps[c.n_mmaps++] = 1;
    else if (!strcmp(mmaps, "0")) c.mmaps[c.n_mmaps++] = 0;
    else if (!strcmp(mmaps, "0,1") || !strcmp(mmaps, "1,0")) {
        c.mmaps[0] = mmaps[0] - '0';
        c.mmaps[1] = mmaps[2] - '0';
        c.n_mmaps = 2;
    } else {
        fprintf(stderr, "qmap bench: --mmap takes 1, 0 or 0,1 (got '%s')\n", mmaps);
        return 2;
    }
    if (c.json && c.csv) { fprintf(stderr, "qmap bench: --json and --csv: choose one\n"); return 2; }
    if (first >= argc) { fprintf(stderr, "qmap bench: name a model (MODEL.qmap) or 'kernels'\n"); return 2; }
    if (c.pp == 0 && c.tg == 0) { fprintf(stderr, "qmap bench: -p 0 and -n 0 leave nothing to measure\n"); return 2; }
    if (parallel) return bench_model_parallel(&c, parallel, argc, argv, first);

    json_out j = { .fp = stdout };
    if (c.json) jo_begin_array(&j, NULL);
    else if (!c.csv)
        printf("qmap bench: %ld runs per figure after one warm-up; KV cache %s; Q8_ROW activations %s; kernels %s\n\n",
               c.runs, cli_kv_choices[c.kv], cli_act_choices[c.act], qr_kernels_name(qr_kernels_get()));
    /* The model column fits "ARCH FILE" for every file named (the architecture's name is at most 8 bytes
     * with its space; the label is cut at 95). */
    c.name_width = 28;
    for (int i = first; i < argc; i++) {
        const char *base = strrchr(argv[i], '/');
        size_t w = strlen(base ? base + 1 : argv[i]) + 8;
        if (w > 95) w = 95;
        if ((int)w > c.name_width) c.name_width = (int)w;
    }
    c.test_width = 6;
    if (c.depth) {
        char probe[64];
        int w = snprintf(probe, sizeof probe, "%s%ld @ d%ld", "pp", c.pp > c.tg ? c.pp : c.tg, c.depth);
        if (w > c.test_width) c.test_width = w;
    }
    print_header(&c);
    char err[1024] = "";
    int rc = 0, done = first;
    uint64_t *large = calloc((size_t)argc, sizeof *large), *size = calloc((size_t)argc, sizeof *size);
    if (!large || !size) {
        free(large);
        free(size);
        fprintf(stderr, "qmap bench: out of memory\n");
        return 1;
    }
    for (; done < argc && rc == 0; done++) {
        large[done] = UINT64_MAX;
        if (bench_one(&c, argv[done], &j, &large[done], &size[done], err, sizeof err) != 0) rc = 1;
    }
    if (c.json) {
        jo_end_array(&j);
        fputc('\n', stdout);
    } else if (!c.csv) {
        /* below the table, which stays a table: a decode streams weights in 4 KiB pages slower here */
        bool said = false;
        for (int i = first; i < done; i++) {
            if (large[i] == UINT64_MAX) continue;
            char a[32], b[32];
            if (!said) printf("\nthe mapping in 2 MiB pages after the runs (weights in 4 KiB pages stream slower):\n");
            said = true;
            printf("  %s: %s of %s\n", argv[i], binary_size(large[i], a, sizeof a), binary_size(size[i], b, sizeof b));
        }
    }
    free(large);
    free(size);
    if (rc) fprintf(stderr, "qmap bench: %s\n", err);
    return rc;
}
