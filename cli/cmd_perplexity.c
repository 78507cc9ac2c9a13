/* qmap perplexity — perplexity of a language model over a text, and its divergence from a base model, on
 * llama-perplexity's windows and with its statistics (so the figures can be set beside llama.cpp's),
 * through include/qmap.h only.
 *
 * The text is tokenized once, with the BOS the tokenizer adds; the stream is cut into non-overlapping
 * windows of -c tokens; each window is evaluated from an empty cache with its first token replaced by BOS
 * (when the tokenizer adds one); only the second half of each window is scored — position j's logits
 * against token j + 1 for j from c/2 to c − 2 — so every scored token sees at least c/2 tokens of context.
 * This is llama.cpp's perplexity() (tools/perplexity/perplexity.cpp): tokenizing without BOS and then
 * writing BOS into slot 0 would start every window one token later than theirs. With --kl-base, a second
 * model with the same vocabulary is evaluated on the same windows in the same pass (or its saved
 * log-probabilities are read), and each scored token adds its KL divergence, argmax agreement and both
 * log-probabilities (cli/ppl_stats.h).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "json_out.h"
#include "opts.h"
#include "ppl_logits.h"
#include "ppl_stats.h"
#include "qmap.h"


static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One model and its session, sized for one window. */
typedef struct evaluator {
    const char *path;
    qmap_model *m;
    qmap_session *s;
    qmap_model_info info;
} evaluator;

static int open_evaluator(evaluator *e, const char *path, const qmap_session_params *sp, const qmap_shard *shard,
                          qmap_error *err)
{
    e->path = path;
    qmap_model_params mp;
    qmap_model_params_default(&mp);
    mp.large_pages = !shard; /* every window streams every weight (a rank of qmap-mpi: only its part) */
    mp.shard = shard;
    if (qmap_model_open(path, &mp, &e->m, err) != QMAP_OK) return 1;
    qmap_model_get_info(e->m, &e->info);
    if (e->info.kind != QMAP_KIND_LM) {
        snprintf(err->message, sizeof err->message, "%s: a %s model, not a language model: perplexity needs one",
                 path, e->info.arch);
        return 1;
    }
    if (qmap_session_new(e->m, sp, &e->s, err) != QMAP_OK) return 1;
    return 0;
}

static void close_evaluator(evaluator *e)
{
    qmap_session_free(e->s);
    qmap_model_close(e->m);
}

/* Tokenize the whole text without special tokens, into a malloc'd array with `lead` free slots in front. */
static int32_t *tokenize_all(const qmap_model *m, const char *text, size_t len, size_t lead, size_t *n,
                             qmap_error *err)
{
    size_t cap = len / 2 + 16;
    int32_t *ids = malloc((lead + cap) * sizeof *ids);
    if (!ids) return NULL;
    qmap_status st = qmap_tokenize(m, text, len, false, ids + lead, cap, n, err);
    if (st == QMAP_ERR_INVALID_ARGUMENT && *n > cap) {
        int32_t *more = realloc(ids, (lead + *n) * sizeof *ids);
        if (!more) { free(ids); return NULL; }
        ids = more;
        cap = *n;
        st = qmap_tokenize(m, text, len, false, ids + lead, cap, n, err);
    }
    if (st != QMAP_OK) { free(ids); return NULL; }
    return ids;
}

/* True when the tokenizer puts BOS in front of a text (llama.cpp then starts every window with it). */
static bool adds_bos(const qmap_model *m)
{
    int32_t ids[4];
    size_t n = 0;
    return qmap_token_bos(m) >= 0 && qmap_tokenize(m, "", 0, true, ids, 4, &n, NULL) == QMAP_OK && n >= 1 &&
           ids[0] == qmap_token_bos(m);
}

/* The token stream llama-perplexity scores: the text's ids after the BOS the tokenizer adds, if it adds
 * one (llama.cpp's common_tokenize(..., add_special = true); no EOS, which it refuses). */
static int32_t *token_stream(const qmap_model *m, bool bos, const char *text, size_t len, size_t *n,
                             qmap_error *err)
{
    int32_t *ids = tokenize_all(m, text, len, bos ? 1 : 0, n, err);
    if (ids && bos) {
        ids[0] = qmap_token_bos(m);
        (*n)++;
    }
    return ids;
}

/* Window k as evaluated: tokens k·c .. k·c + c − 1 of the stream, slot 0 replaced by BOS when the tokenizer
 * adds one (window 0 already starts with it). */
static void fill_window(int32_t *win, const int32_t *ids, size_t k, uint32_t c, int32_t bos)
{
    memcpy(win, ids + k * c, c * sizeof *win);
    if (bos >= 0) win[0] = bos;
}

/* What the run reports, for the text and the JSON output. */
typedef struct ppl_report {
    const char *model, *file, *base, *saved, *kv, *act;
    size_t n_tok, n_chunks;
    uint32_t ctx, batch;
    bool bos;
    double t_eval, tokens_per_s;
    ppl_summary su;
} ppl_report;

static void json_percentiles(json_out *j, const char *prefix, const ppl_percentiles *p)
{
    const struct { const char *name; double v; } q[] = {
        { "min", p->min }, { "p0_1", p->p0_1 }, { "p1", p->p1 }, { "p5", p->p5 }, { "p10", p->p10 },
        { "p25", p->p25 }, { "median", p->median }, { "p75", p->p75 }, { "p90", p->p90 }, { "p95", p->p95 },
        { "p99", p->p99 }, { "p99_9", p->p99_9 }, { "max", p->max },
    };
    char key[32];
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        snprintf(key, sizeof key, "%s_%s", prefix, q[i].name);
        jo_f64(j, key, q[i].v);
    }
}

static void print_json(const ppl_report *r)
{
    const ppl_summary *su = &r->su;
    json_out j = { .fp = stdout };
    jo_begin_object(&j, NULL);
    jo_cstring(&j, "model", r->model);
    jo_cstring(&j, "file", r->file);
    jo_u64(&j, "text_tokens", r->n_tok);
    jo_u64(&j, "ctx", r->ctx);
    jo_u64(&j, "batch", r->batch);
    jo_cstring(&j, "kv", r->kv);
    jo_cstring(&j, "act", r->act);
    jo_u64(&j, "chunks", r->n_chunks);
    jo_u64(&j, "scored_tokens", su->n);
    jo_bool(&j, "bos_first", r->bos);
    jo_f64(&j, "ppl", su->ppl);
    jo_f64(&j, "ppl_err", su->ppl_err);
    jo_f64(&j, "nll_mean", su->nll_mean);
    jo_f64(&j, "eval_seconds", r->t_eval);
    jo_f64(&j, "tokens_per_s", r->tokens_per_s);
    if (r->base) {
        jo_begin_object(&j, "base");
        jo_cstring(&j, "model", r->base);
        jo_f64(&j, "ppl", su->ppl_base);
        jo_f64(&j, "ppl_err", su->ppl_base_err);
        jo_f64(&j, "nll_correlation", su->nll_cor);
        jo_f64(&j, "ln_ppl_ratio", su->ln_ratio);
        jo_f64(&j, "ln_ppl_ratio_err", su->ln_ratio_err);
        jo_f64(&j, "ppl_ratio", su->ratio);
        jo_f64(&j, "ppl_ratio_err", su->ratio_err);
        jo_f64(&j, "ppl_diff", su->diff);
        jo_f64(&j, "ppl_diff_err", su->diff_err);
        jo_f64(&j, "kl_mean", su->kl_mean);
        jo_f64(&j, "kl_mean_err", su->kl_err);
        json_percentiles(&j, "kl", &su->kl);
        jo_f64(&j, "dp_mean", su->dp_mean);
        jo_f64(&j, "dp_mean_err", su->dp_err);
        jo_f64(&j, "dp_rms", su->dp_rms);
        jo_f64(&j, "dp_rms_err", su->dp_rms_err);
        json_percentiles(&j, "dp", &su->dp);
        jo_f64(&j, "top1", su->top1);
        jo_f64(&j, "top1_err", su->top1_err);
        jo_end_object(&j);
    }
    jo_end_object(&j);
    fputc('\n', stdout);
}

/* The base comparison as llama-perplexity prints it in KL-divergence mode (Δp in percent). */
static void print_base_text(const ppl_report *r)
{
    const ppl_summary *su = &r->su;
    const ppl_percentiles *k = &su->kl, *d = &su->dp;
    printf("%s: PPL = %.4f +/- %.4f (base)\n", r->base, su->ppl_base, su->ppl_base_err);
    printf("  Cor(ln(PPL(Q)), ln(PPL(base)))  %.2f%%\n", 100 * su->nll_cor);
    printf("  ln(PPL(Q)/PPL(base))            %.6f +/- %.6f\n", su->ln_ratio, su->ln_ratio_err);
    printf("  PPL(Q)/PPL(base)                %.6f +/- %.6f\n", su->ratio, su->ratio_err);
    printf("  PPL(Q)-PPL(base)                %.6f +/- %.6f\n", su->diff, su->diff_err);
    printf("  KL divergence  mean %.6g +/- %.6g\n", su->kl_mean, su->kl_err);
    printf("    max %.6g  p99.9 %.6g  p99 %.6g  p95 %.6g  p90 %.6g  median %.6g\n", k->max, k->p99_9, k->p99,
           k->p95, k->p90, k->median);
    printf("    p10 %.6g  p5 %.6g  p1 %.6g  min %.6g\n", k->p10, k->p5, k->p1, k->min);
    printf("  Δp (p(target) - p_base(target))  mean %.3f%% +/- %.3f%%  RMS %.3f%% +/- %.3f%%\n",
           100 * su->dp_mean, 100 * su->dp_err, 100 * su->dp_rms, 100 * su->dp_rms_err);
    printf("    max %.3f%%  p99.9 %.3f%%  p99 %.3f%%  p95 %.3f%%  p90 %.3f%%  p75 %.3f%%  median %.3f%%\n",
           100 * d->max, 100 * d->p99_9, 100 * d->p99, 100 * d->p95, 100 * d->p90, 100 * d->p75, 100 * d->median);
    printf("    p25 %.3f%%  p10 %.3f%%  p5 %.3f%%  p1 %.3f%%  p0.1 %.3f%%  min %.3f%%\n", 100 * d->p25,
           100 * d->p10, 100 * d->p5, 100 * d->p1, 100 * d->p0_1, 100 * d->min);
    printf("  same top       %.3f%% +/- %.3f%%\n", 100 * su->top1, 100 * su->top1_err);
}

static void print_text(const ppl_report *r, double t_all)
{
    printf("%s: PPL = %.4f +/- %.4f over %zu tokens (%zu windows of %u, second halves scored)\n", r->model,
           r->su.ppl, r->su.ppl_err, r->su.n, r->n_chunks, r->ctx);
    if (r->saved) printf("  log-probabilities saved to %s\n", r->saved);
    if (r->base) print_base_text(r);
    printf("  %.0f tokens/s evaluated (%.1f s), %.1f s in all\n", r->tokens_per_s, r->t_eval, t_all);
}

/* One window's evaluation: both models (or the model and the base file) and what each scored token adds. */
typedef struct window_pass {
    evaluator *ev, *base;                /* base->s NULL without a base model */
    ppl_logits_reader *base_file;
    ppl_logits_writer *saver;
    ppl_stats *stats;
    uint32_t c, nb, first, n_vocab;
    bool with_base;
} window_pass;

/* Evaluate one window from an empty cache and add its scored tokens: the logits at position j against
 * token j + 1 for j = first .. c − 2. Each batch's scored positions are taken right after it is evaluated
 * (they lie in the last batch only when the window is one batch). */
static int score_window(const window_pass *p, const int32_t *win, qmap_error *err)
{
    qmap_session_reset(p->ev->s);
    if (p->base->s) qmap_session_reset(p->base->s);
    for (uint32_t start = 0; start < p->c; start += p->nb) {
        uint32_t len = p->c - start < p->nb ? p->c - start : p->nb;
        if (qmap_eval(p->ev->s, win + start, len, err) != QMAP_OK) return 1;
        if (p->base->s && qmap_eval(p->base->s, win + start, len, err) != QMAP_OK) return 1;
        for (uint32_t j = start > p->first ? start : p->first; j < start + len && j < p->c - 1; j++) {
            const float *lg = qmap_logits(p->ev->s, j - start), *lb = NULL;
            if (p->base->s) lb = qmap_logits(p->base->s, j - start);
            else if (p->base_file && !(lb = ppl_logits_next(p->base_file, err->message, sizeof err->message)))
                return 1;
            if (!lg || (p->with_base && !lb)) {
                snprintf(err->message, sizeof err->message, "no logits for position %u", j);
                return 1;
            }
            if (p->saver && !ppl_logits_put(p->saver, lg, err->message, sizeof err->message)) return 1;
            ppl_stats_add(p->stats, lg, lb, p->n_vocab, win[j + 1]);
        }
    }
    return 0;
}

static void print_progress(const ppl_stats *stats, size_t k, size_t n_chunks, uint32_t c, double t_eval,
                           bool two_models, bool with_base)
{
    ppl_summary so;
    ppl_stats_summary(stats, &so);
    double tps = t_eval > 0 ? (double)((k + 1) * c) * (two_models ? 2 : 1) / t_eval : 0;
    fprintf(stderr, "[%zu/%zu] ppl %.4f +/- %.4f", k + 1, n_chunks, so.ppl, so.ppl_err);
    if (with_base)
        fprintf(stderr, "  base %.4f  KL %.6f  same top %.2f%%", so.ppl_base, so.kl_mean, 100 * so.top1);
    fprintf(stderr, "  %.0f tok/s  ETA %.0f s\n", tps, t_eval / (double)(k + 1) * (double)(n_chunks - k - 1));
}

/* The command line, parsed. */
typedef struct ppl_args {
    const char *model, *file, *base, *save;
    uint32_t ctx, batch;
    size_t max_chunks;                   /* 0: every window */
    int kv, act, threads;
    bool json, quiet;
    const qmap_shard *shard;             /* qmap-mpi: this rank's part; NULL: the whole model */
} ppl_args;

static int run_perplexity(const ppl_args *pa)
{
    const char *base_path = pa->base, *save_path = pa->save, *file = pa->file;
    uint32_t c = pa->ctx, nb = pa->batch;
    qmap_session_params sp;
    qmap_session_params_default(&sp);
    sp.n_ctx = c;
    sp.n_batch = nb;
    sp.threads = pa->threads;
    sp.kv_type = (qmap_kv_type)pa->kv;
    sp.act = (qmap_act_mode)pa->act;
    sp.logits_all = true;

    int status = 1;
    qmap_error err = { 0 };
    evaluator ev = { 0 }, base = { 0 };
    char *text = NULL;
    int32_t *ids = NULL, *win = NULL;
    ppl_stats stats = { 0 };
    ppl_logits_reader *base_file = NULL;
    ppl_logits_writer *saver = NULL;
    double t_start = now_s();
    char both[2048];
    snprintf(both, sizeof both, "%.900s%s%.900s", pa->model, pa->base ? " or " : "", pa->base ? pa->base : "");
    cli_exit_on_model_change("qmap perplexity", both);
    if (open_evaluator(&ev, pa->model, &sp, pa->shard, &err)) goto fail;
    if (!ev.info.has_tokenizer) {
        snprintf(err.message, sizeof err.message, "%s has no tokenizer: perplexity needs one to read the text",
                 ev.path);
        goto fail;
    }
    bool base_is_file = base_path && ppl_logits_sniff(base_path);
    if (base_path && !base_is_file) {
        if (open_evaluator(&base, base_path, &sp, pa->shard, &err)) goto fail;
        if (base.info.vocab_size != ev.info.vocab_size) {
            snprintf(err.message, sizeof err.message,
                     "%s has a vocabulary of %u tokens, %s of %u: a KL divergence needs the same vocabulary",
                     base_path, base.info.vocab_size, ev.path, ev.info.vocab_size);
            goto fail;
        }
    }
    size_t text_len = 0, n_tok = 0;
    qm_error fe;
    if (!(text = cli_read_text(file, &text_len, &fe))) {
        snprintf(err.message, sizeof err.message, "-f: %.600s", fe.message);
        goto fail;
    }
    bool bos = adds_bos(ev.m);
    int32_t bos_id = bos ? qmap_token_bos(ev.m) : -1;
    double t_tok = now_s();
    if (!(ids = token_stream(ev.m, bos, text, text_len, &n_tok, &err))) {
        if (!err.message[0]) snprintf(err.message, sizeof err.message, "out of memory");
        goto fail;
    }
    t_tok = now_s() - t_tok;
    if (n_tok < 2 * (size_t)c) {
        snprintf(err.message, sizeof err.message,
                 "%s is %zu tokens; perplexity with -c %u needs at least %u (two windows): give a longer text or "
                 "a smaller -c", file, n_tok, c, 2 * c);
        goto fail;
    }
    size_t n_chunks = n_tok / c;
    if (pa->max_chunks > 0 && pa->max_chunks < n_chunks) n_chunks = pa->max_chunks;
    uint32_t first = c / 2, per_chunk = c - 1 - first;
    if (!(win = malloc(c * sizeof *win)) || !ppl_stats_init(&stats, n_chunks * per_chunk, base_path != NULL)) {
        snprintf(err.message, sizeof err.message, "out of memory");
        goto fail;
    }
    /* what a logits file must have been computed on: every window's ids as evaluated */
    ppl_logits_meta meta = { ev.info.vocab_size, c, first, n_chunks, PPL_FNV_START };
    for (size_t k = 0; k < n_chunks; k++) {
        fill_window(win, ids, k, c, bos_id);
        meta.tokens_hash = ppl_hash_ids(meta.tokens_hash, win, c);
    }
    if (base_is_file && !(base_file = ppl_logits_open(base_path, &meta, err.message, sizeof err.message))) goto fail;
    if (save_path && !(saver = ppl_logits_create(save_path, &meta, err.message, sizeof err.message))) goto fail;
    if (!pa->quiet)
        fprintf(stderr, "qmap perplexity: %zu tokens%s (tokenized in %.2f s), %zu windows of %u, %u scored each%s\n",
                n_tok, bos ? " with the BOS" : "", t_tok, n_chunks, c, per_chunk, bos ? ", BOS first" : "");
    const window_pass pass = { &ev, &base, base_file, saver, &stats, c, nb, first, ev.info.vocab_size,
                               base_path != NULL };
    double t_eval = 0;
    for (size_t k = 0; k < n_chunks; k++) {
        fill_window(win, ids, k, c, bos_id);
        double t0 = now_s();
        if (score_window(&pass, win, &err)) goto fail;
        t_eval += now_s() - t0;
        if (!pa->quiet) print_progress(&stats, k, n_chunks, c, t_eval, base.s != NULL, base_path != NULL);
    }
    ppl_report rep = { ev.path, file, base_path, save_path, cli_kv_choices[pa->kv], cli_act_choices[pa->act], n_tok,
                       n_chunks, c, nb, bos, t_eval, 0, { 0 } };
    if (!ppl_stats_summary(&stats, &rep.su)) {
        snprintf(err.message, sizeof err.message, "out of memory");
        goto fail;
    }
    if (saver) {
        bool saved = ppl_logits_finish(saver, err.message, sizeof err.message);
        saver = NULL;
        if (!saved) goto fail;
    }
    rep.tokens_per_s = t_eval > 0 ? (double)(n_chunks * c) * (base.s ? 2 : 1) / t_eval : 0;
    if (pa->json) print_json(&rep);
    else print_text(&rep, now_s() - t_start);
    status = 0;
    goto done;
fail:
    fprintf(stderr, "qmap perplexity: %s\n", err.message[0] ? err.message : "failed");
done:
    ppl_logits_abort(saver);
    ppl_logits_close(base_file);
    ppl_stats_free(&stats);
    free(win);
    free(ids);
    free(text);
    close_evaluator(&base);
    close_evaluator(&ev);
    return status;
}

int cmd_perplexity(int argc, char **argv)
{
    return cmd_perplexity_shard(argc, argv, NULL);
}

int cmd_perplexity_shard(int argc, char **argv, const qmap_shard *shard)
{
    const char *file = NULL, *base_path = NULL, *save_path = NULL;
    long ctx = 512, batch = 0, threads = 0, max_chunks = 0;
    int kv = 0, act = 0;
    bool json = false, quiet = false;
    const cli_opt opts[] = {
        { "file", 'f', CLI_STRING, &file, "FILE", 0, 0, NULL, "the text to score (UTF-8; " CLI_TEXT_MAX_HELP ")", true },
        { "ctx-size", 'c', CLI_INT, &ctx, "N", 8, 1 << 20, NULL, "tokens per window; the second half of each is scored", false },
        { "batch-size", 'b', CLI_INT, &batch, "N", 0, 1 << 20, NULL,
          "tokens per evaluation call (0: the whole window)", false },
        { "threads", 't', CLI_INT, &threads, "N", 0, 1024, NULL, "threads (0: all the process may use)", false },
        { "chunks", 0, CLI_INT, &max_chunks, "N", 0, 1 << 30, NULL, "score at most N windows, the first ones (0: all)", false },
        { "kl-base", 0, CLI_STRING, &base_path, "BASE", 0, 0, NULL,
          "compare with a base: a .qmap (same tokenizer) evaluated on the same windows, or a file of "
          "--save-logits: KL divergence, delta-p, same top, PPL ratio", true },
        { "save-logits", 0, CLI_STRING, &save_path, "FILE", 0, 0, NULL,
          "save every scored token's log-probabilities (n_vocab float32 each) for a later --kl-base (replaced by rename; an existing FILE that is not a regular file is refused)", true },
        { "kv", 0, CLI_CHOICE, &kv, "TYPE", 0, 0, cli_kv_choices, "KV cache element type", false },
        { "act", 0, CLI_CHOICE, &act, "MODE", 0, 0, cli_act_choices,
          "Q8_ROW activations: auto (products after a norm or attention in one int8 term, the rest at float accuracy), precise (float accuracy everywhere), int8 (one term everywhere: fastest), f32, int8x2 (two terms, also for one row)", false },
        { "json", 0, CLI_FLAG, &json, NULL, 0, 0, NULL, "print the result as one JSON object", true },
        { "quiet", 'q', CLI_FLAG, &quiet, NULL, 0, 0, NULL, "no running estimate on stderr", true },
    };
    const cli_command cmd = {
        .name = "perplexity",
        .usage = "qmap perplexity MODEL.qmap -f TEXT [-c 512] [-b N] [-t N] [--kl-base BASE] [--save-logits FILE] [--json]",
        .description =
            "Perplexity of a language model over a text on llama-perplexity's windows (llama.cpp's perplexity\n"
            "tool without --ppl-stride): the whole text is tokenized once, with the BOS the tokenizer adds (none\n"
            "for GPT-2-style vocabularies), and the token stream is cut into floor(n / c) non-overlapping\n"
            "windows of -c tokens (the tail shorter than c is not scored). Each window is evaluated from an\n"
            "empty cache with its first token replaced by BOS when the tokenizer adds one (the first window\n"
            "already starts with it); only its second half is scored: the logits at position j against token\n"
            "j+1, for j from c/2 to c-2 (c-1-c/2 tokens per window). Prints a running estimate per window,\n"
            "then PPL = exp(mean negative log-likelihood) +/- its standard error, and tokens/s. The text needs\n"
            "at least 2 x c tokens.\n"
            "\n"
            "With --kl-base, a base model with the same vocabulary (e.g. the F32 container a Q8_ROW one came\n"
            "from) runs on the same windows, and the run prints what llama-perplexity --kl-divergence prints,\n"
            "defined the same way: PPL of both, the correlation of their per-token log-likelihoods,\n"
            "ln(PPL/PPL_base), PPL/PPL_base and PPL-PPL_base each +/- error; KL(base || model) per token over\n"
            "the whole vocabulary: mean +/- error, max, 99.9, 99, 95, 90th percentile, median, 10, 5, 1st, min;\n"
            "delta-p = p(target) - p_base(target): mean +/- error, RMS +/- error and its percentiles; same top\n"
            "(argmax agreement) +/- error. Percentiles interpolate linearly at rank f x (n-1). (llama.cpp's KL\n"
            "skips the vocabulary entries the base gives a log-probability below -16; qmap sums all.)\n"
            "--save-logits FILE keeps the model's log-probabilities (n_vocab x 4 bytes per scored token: 32 MB\n"
            "per 255 tokens of a 32k vocabulary) so that a later run can take FILE as its --kl-base without\n"
            "loading both models; the file records the vocabulary, -c, the window count and a hash of the\n"
            "windows' ids as evaluated, and a run on another text, tokenizer, context or window layout is\n"
            "refused.\n",
        .opts = opts,
        .n_opts = sizeof opts / sizeof opts[0],
        .epilog = "exit status: 0 done, 1 a bad model or text (too short, another vocabulary) or a model file truncated or\n"
                  "overwritten in place while it ran, 2 usage error\n",
    };
    int first_arg;
    int rc = cli_parse(&cmd, argc, argv, &first_arg);
    if (rc) return rc == 1 ? 0 : 2;
    if (first_arg != argc - 1 || !file) {
        fprintf(stderr, "qmap perplexity: give one MODEL.qmap and -f TEXT\nusage: %s\n", cmd.usage);
        return 2;
    }
    const ppl_args pa = {
        .model = argv[first_arg], .file = file, .base = base_path, .save = save_path, .ctx = (uint32_t)ctx,
        .batch = batch > 0 && batch < ctx ? (uint32_t)batch : (uint32_t)ctx, .max_chunks = (size_t)max_chunks,
        .kv = kv, .act = act, .threads = (int)threads, .json = json, .quiet = quiet, .shard = shard,
    };
    return run_perplexity(&pa);
}
