/* qmap perplexity — perplexity of a language model over a text, and its divergence from a base model,
 * by llama.cpp's method (so the figures can be compared with theirs), through include/qmap.h only.
 *
 * The text is tokenized once; it is cut into non-overlapping windows of -c tokens; each window is
 * evaluated from an empty cache with its first token replaced by BOS (when the tokenizer adds one); only
 * the second half of each window is scored — position j's logits against token j + 1 for j from c/2 to
 * c − 2 — so every scored token sees at least c/2 tokens of context. With --kl-base, a second model with
 * the same vocabulary is evaluated on the same windows in the same pass, and each scored token adds its
 * KL divergence, top-1 agreement and both log-probabilities (cli/ppl_stats.h).
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

static int open_evaluator(evaluator *e, const char *path, const qmap_session_params *sp, qmap_error *err)
{
    e->path = path;
    if (qmap_model_open(path, NULL, &e->m, err) != QMAP_OK) return 1;
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

/* Tokenize the whole text without special tokens, into a malloc'd array. */
static int32_t *tokenize_all(const qmap_model *m, const char *text, size_t len, size_t *n, qmap_error *err)
{
    size_t cap = len / 2 + 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return NULL;
    qmap_status st = qmap_tokenize(m, text, len, false, ids, cap, n, err);
    if (st == QMAP_ERR_INVALID_ARGUMENT && *n > cap) {
        int32_t *more = realloc(ids, *n * sizeof *ids);
        if (!more) { free(ids); return NULL; }
        ids = more;
        cap = *n;
        st = qmap_tokenize(m, text, len, false, ids, cap, n, err);
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

int cmd_perplexity(int argc, char **argv)
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
        { "chunks", 0, CLI_INT, &max_chunks, "N", 0, 1 << 30, NULL, "score at most N windows (0: all)", false },
        { "kl-base", 0, CLI_STRING, &base_path, "BASE", 0, 0, NULL,
          "compare with a base: a .qmap (same tokenizer) evaluated on the same windows, or a file of "
          "--save-logits: KL divergence, top-1 agreement, ln(PPL/PPL_base)", true },
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
            "Perplexity of a language model over a text, as llama.cpp's perplexity tool computes it: the text\n"
            "is tokenized once and cut into non-overlapping windows of -c tokens; each window is evaluated from\n"
            "an empty cache, its first token replaced by BOS when the tokenizer adds one, and only its second\n"
            "half is scored (the logits at position j against token j+1, for j from c/2 to c-2). Prints a\n"
            "running estimate per window, then PPL = exp(mean negative log-likelihood) +/- its standard\n"
            "error, and tokens/s. The text needs at least 2 x c tokens.\n"
            "\n"
            "With --kl-base, a base model with the same vocabulary (e.g. the F32 container a Q8_ROW one came\n"
            "from) runs on the same windows: mean KL(base || model) +/- error, its median, 90th, 99th and\n"
            "99.9th percentile and maximum, top-1 agreement, and ln(PPL/PPL_base) +/- error (from the\n"
            "per-token differences, so correlated noise cancels). --save-logits FILE keeps the model's\n"
            "log-probabilities (n_vocab x 4 bytes per scored token: 32 MB per 255 tokens of a 32k vocabulary)\n"
            "so that a later run can take FILE as its --kl-base without loading both models; the file records\n"
            "the vocabulary, -c, the window count and a hash of the windows' ids, and a run on another text,\n"
            "tokenizer or context is refused.\n",
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
    uint32_t c = (uint32_t)ctx, nb = batch > 0 && batch < ctx ? (uint32_t)batch : c;
    qmap_session_params sp;
    qmap_session_params_default(&sp);
    sp.n_ctx = c;
    sp.n_batch = nb;
    sp.threads = (int)threads;
    sp.kv_type = (qmap_kv_type)kv;
    sp.act = (qmap_act_mode)act;
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
    snprintf(both, sizeof both, "%.900s%s%.900s", argv[first_arg], base_path ? " or " : "", base_path ? base_path : "");
    cli_exit_on_model_change("qmap perplexity", both);
    if (open_evaluator(&ev, argv[first_arg], &sp, &err)) goto fail;
    if (!ev.info.has_tokenizer) {
        snprintf(err.message, sizeof err.message, "%s has no tokenizer: perplexity needs one to read the text",
                 ev.path);
        goto fail;
    }
    bool base_is_file = base_path && ppl_logits_sniff(base_path);
    if (base_path && !base_is_file) {
        if (open_evaluator(&base, base_path, &sp, &err)) goto fail;
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
    double t_tok = now_s();
    if (!(ids = tokenize_all(ev.m, text, text_len, &n_tok, &err))) {
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
    if (max_chunks > 0 && (size_t)max_chunks < n_chunks) n_chunks = (size_t)max_chunks;
    uint32_t first = c / 2, per_chunk = c - 1 - first;
    bool bos = adds_bos(ev.m);
    if (!(win = malloc(c * sizeof *win)) || !ppl_stats_init(&stats, n_chunks * per_chunk, base_path != NULL)) {
        snprintf(err.message, sizeof err.message, "out of memory");
        goto fail;
    }
    /* what a logits file must have been computed on: every window's ids as evaluated */
    ppl_logits_meta meta = { ev.info.vocab_size, c, first, n_chunks, PPL_FNV_START };
    for (size_t k = 0; k < n_chunks; k++) {
        memcpy(win, ids + k * c, c * sizeof *win);
        if (bos) win[0] = qmap_token_bos(ev.m);
        meta.tokens_hash = ppl_hash_ids(meta.tokens_hash, win, c);
    }
    if (base_is_file && !(base_file = ppl_logits_open(base_path, &meta, err.message, sizeof err.message))) goto fail;
    if (save_path && !(saver = ppl_logits_create(save_path, &meta, err.message, sizeof err.message))) goto fail;
    if (!quiet)
        fprintf(stderr, "qmap perplexity: %zu tokens (tokenized in %.2f s), %zu windows of %u, %u scored each%s\n",
                n_tok, t_tok, n_chunks, c, per_chunk, bos ? ", BOS first" : "");
    double t_eval = 0;
    for (size_t k = 0; k < n_chunks; k++) {
        memcpy(win, ids + k * c, c * sizeof *win);
        if (bos) win[0] = qmap_token_bos(ev.m);
        double t0 = now_s();
        /* The scored positions all lie in the last batch only when the window is one batch; otherwise
         * each batch's scored positions are taken right after it is evaluated. */
        qmap_session_reset(ev.s);
        if (base.s) qmap_session_reset(base.s);
        for (uint32_t start = 0; start < c; start += nb) {
            uint32_t len = c - start < nb ? c - start : nb;
            if (qmap_eval(ev.s, win + start, len, &err) != QMAP_OK) goto fail;
            if (base.s && qmap_eval(base.s, win + start, len, &err) != QMAP_OK) goto fail;
            for (uint32_t j = start > first ? start : first; j < start + len && j < c - 1; j++) {
                const float *lg = qmap_logits(ev.s, j - start), *lb = NULL;
                if (base.s) lb = qmap_logits(base.s, j - start);
                else if (base_file && !(lb = ppl_logits_next(base_file, err.message, sizeof err.message))) goto fail;
                if (!lg || (base_path && !lb)) {
                    snprintf(err.message, sizeof err.message, "no logits for position %u", j);
                    goto fail;
                }
                if (saver && !ppl_logits_put(saver, lg, err.message, sizeof err.message)) goto fail;
                ppl_stats_add(&stats, lg, lb, ev.info.vocab_size, win[j + 1]);
            }
        }
        t_eval += now_s() - t0;
        if (!quiet) {
            ppl_summary so;
            ppl_stats_summary(&stats, &so);
            double tps = t_eval > 0 ? (double)((k + 1) * c) * (base.s ? 2 : 1) / t_eval : 0;
            fprintf(stderr, "[%zu/%zu] ppl %.4f +/- %.4f", k + 1, n_chunks, so.ppl, so.ppl_err);
            if (base_path)
                fprintf(stderr, "  base %.4f  KL %.6f  top-1 %.2f%%", so.ppl_base, so.kl_mean, 100 * so.top1);
            fprintf(stderr, "  %.0f tok/s  ETA %.0f s\n", tps,
                    t_eval / (double)(k + 1) * (double)(n_chunks - k - 1));
        }
    }
    ppl_summary su;
    if (!ppl_stats_summary(&stats, &su)) {
        snprintf(err.message, sizeof err.message, "out of memory");
        goto fail;
    }
    if (saver) {
        bool saved = ppl_logits_finish(saver, err.message, sizeof err.message);
        saver = NULL;
        if (!saved) goto fail;
    }
    double evaluated = (double)(n_chunks * c) * (base.s ? 2 : 1);
    if (json) {
        json_out j = { .fp = stdout };
        json_begin_object(&j, NULL);
        json_cstring(&j, "model", ev.path);
        json_cstring(&j, "file", file);
        json_u64(&j, "text_tokens", n_tok);
        json_u64(&j, "ctx", c);
        json_u64(&j, "batch", nb);
        json_cstring(&j, "kv", cli_kv_choices[kv]);
        json_cstring(&j, "act", cli_act_choices[act]);
        json_u64(&j, "chunks", n_chunks);
        json_u64(&j, "scored_tokens", su.n);
        json_bool(&j, "bos_first", bos);
        json_f64(&j, "ppl", su.ppl);
        json_f64(&j, "ppl_err", su.ppl_err);
        json_f64(&j, "nll_mean", su.nll_mean);
        json_f64(&j, "eval_seconds", t_eval);
        json_f64(&j, "tokens_per_s", t_eval > 0 ? evaluated / t_eval : 0);
        if (base_path) {
            json_begin_object(&j, "base");
            json_cstring(&j, "model", base_path);
            json_f64(&j, "ppl", su.ppl_base);
            json_f64(&j, "ppl_err", su.ppl_base_err);
            json_f64(&j, "ln_ppl_ratio", su.ln_ratio);
            json_f64(&j, "ln_ppl_ratio_err", su.ln_ratio_err);
            json_f64(&j, "kl_mean", su.kl_mean);
            json_f64(&j, "kl_mean_err", su.kl_err);
            json_f64(&j, "kl_median", su.kl_median);
            json_f64(&j, "kl_p90", su.kl_p90);
            json_f64(&j, "kl_p99", su.kl_p99);
            json_f64(&j, "kl_p99_9", su.kl_p999);
            json_f64(&j, "kl_max", su.kl_max);
            json_f64(&j, "top1", su.top1);
            json_f64(&j, "top1_err", su.top1_err);
            json_end_object(&j);
        }
        json_end_object(&j);
        fputc('\n', stdout);
    } else {
        printf("%s: PPL = %.4f +/- %.4f over %zu tokens (%zu windows of %u, second halves scored)\n", ev.path, su.ppl,
               su.ppl_err, su.n, n_chunks, c);
        if (save_path) printf("  log-probabilities saved to %s\n", save_path);
        if (base_path) {
            printf("%s: PPL = %.4f +/- %.4f (base)\n", base_path, su.ppl_base, su.ppl_base_err);
            printf("  ln(PPL/PPL_base) = %.6f +/- %.6f  (%+.3f%%)\n", su.ln_ratio, su.ln_ratio_err,
                   100 * (exp(su.ln_ratio) - 1));
            printf("  KL divergence    mean %.6f +/- %.6f  median %.6f  p90 %.6f  p99 %.6f  p99.9 %.6f  max %.6f\n",
                   su.kl_mean, su.kl_err, su.kl_median, su.kl_p90, su.kl_p99, su.kl_p999, su.kl_max);
            printf("  top-1 agreement  %.3f%% +/- %.3f%%\n", 100 * su.top1, 100 * su.top1_err);
        }
        printf("  %.0f tokens/s evaluated (%.1f s), %.1f s in all\n", t_eval > 0 ? evaluated / t_eval : 0, t_eval,
               now_s() - t_start);
    }
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
