/* run_lm.c — generate text with a decoder language model, through the public API (include/qmap.h) only. */
#define QMAP_EXPERIMENTAL /* the resident and large-page gauges in the summary */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli.h"
#include "json_out.h"
#include "opts.h"
#include "run_lm.h"

/* Set by SIGINT: generation stops after the current token and the figures are still printed. The only
 * global of the command; the library has none. */
static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    g_interrupted = 1;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct run_stats {
    double load_s, prompt_s, gen_s;
    size_t n_prompt, n_gen;
    const char *stop;   /* "eos", "n_predict", "context", "interrupt" */
} run_stats;

/* One generation: the model, its session and sampler, the ids (the generated ones follow the prompt's in the
 * same buffer: a context never holds more), the text kept for --json, and the figures. */
typedef struct lm_run {
    qmap_model *m;
    const lm_args *a;
    qmap_model_info in;
    qmap_session *s;
    qmap_sampler *smp;
    qmap_detok dt;
    uint32_t n_ctx;
    int32_t *ids;
    size_t cap, n_prompt;
    char *text;         /* --json: the generated text */
    size_t text_len, text_cap;
    run_stats st;
} lm_run;

/* "1 2 3" or "1,2,3" -> ids. Returns the count, or -1 with a message. */
static long parse_ids(const char *s, int32_t *ids, size_t cap, uint32_t vocab)
{
    size_t n = 0;
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno) {
            fprintf(stderr, "qmap run: --tokens: '%.20s' is not a token id\n", s);
            return -1;
        }
        if (v < 0 || (uint64_t)v >= vocab) {
            fprintf(stderr, "qmap run: --tokens: id %ld is outside the vocabulary of %u\n", v, vocab);
            return -1;
        }
        if (n == cap) {
            fprintf(stderr, "qmap run: --tokens: more than %zu ids\n", cap);
            return -1;
        }
        ids[n++] = (int32_t)v;
        s = end;
    }
    return (long)n;
}

static void print_stats(const run_stats *st, const qmap_model *m, FILE *fp)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    char a[32], b[32];
    fprintf(fp, "\nqmap run: stopped: %s\n", st->stop);
    fprintf(fp, "  load      %8.1f ms\n", st->load_s * 1e3);
    fprintf(fp, "  prompt    %8zu tokens  %8.1f ms  %8.1f tok/s\n", st->n_prompt, st->prompt_s * 1e3,
            st->prompt_s > 0 ? (double)st->n_prompt / st->prompt_s : 0.0);
    fprintf(fp, "  generate  %8zu tokens  %8.1f ms  %8.2f tok/s\n", st->n_gen, st->gen_s * 1e3,
            st->gen_s > 0 ? (double)st->n_gen / st->gen_s : 0.0);
    fprintf(fp, "  memory    peak RSS %s, mapping resident %s of %s",
            cli_human_bytes((uint64_t)ru.ru_maxrss * 1024, a, sizeof a),
            cli_human_bytes(qmap_model_resident_bytes(m), b, sizeof b), cli_human_bytes(in.file_size, (char[32]){ 0 }, 32));
    const uint64_t large = qmap_model_large_page_bytes(m);
    if (large != UINT64_MAX) fprintf(fp, ", %s in 2 MiB pages", cli_human_bytes(large, a, sizeof a));
    fputc('\n', fp);
}

static void print_json(const run_stats *st, const qmap_model *m, const char *text, size_t text_len,
                       const int32_t *prompt, const int32_t *gen, int kv, int act)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    json_out j = { .fp = stdout };
    jo_begin_object(&j, NULL);
    jo_string(&j, "text", text ? text : "", text ? text_len : 0);
    jo_begin_array(&j, "prompt_ids");
    for (size_t i = 0; i < st->n_prompt; i++) jo_i64(&j, NULL, prompt[i]);
    jo_end_array(&j);
    jo_begin_array(&j, "ids");
    for (size_t i = 0; i < st->n_gen; i++) jo_i64(&j, NULL, gen[i]);
    jo_end_array(&j);
    jo_cstring(&j, "stop", st->stop);
    jo_f64(&j, "load_ms", st->load_s * 1e3);
    jo_u64(&j, "prompt_tokens", st->n_prompt);
    jo_f64(&j, "prompt_tok_per_s", st->prompt_s > 0 ? (double)st->n_prompt / st->prompt_s : 0.0);
    jo_u64(&j, "generated_tokens", st->n_gen);
    jo_f64(&j, "gen_tok_per_s", st->gen_s > 0 ? (double)st->n_gen / st->gen_s : 0.0);
    jo_u64(&j, "peak_rss_bytes", (uint64_t)ru.ru_maxrss * 1024);
    jo_u64(&j, "mapping_resident_bytes", qmap_model_resident_bytes(m));
    const uint64_t large = qmap_model_large_page_bytes(m);
    if (large != UINT64_MAX) jo_u64(&j, "mapping_2mib_bytes", large);
    else jo_null(&j, "mapping_2mib_bytes");
    jo_cstring(&j, "kv", cli_kv_choices[kv]);
    jo_cstring(&j, "act", cli_act_choices[act]);
    jo_end_object(&j);
    fputc('\n', stdout);
}

/* Append to a growing text buffer (for --json); false on out of memory. */
static bool text_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = (*cap ? *cap : 4096);
        while (nc < *len + n + 1) nc *= 2;
        char *nb = realloc(*buf, nc);
        if (!nb) return false;
        *buf = nb;
        *cap = nc;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return true;
}

/* -c, or the model's context capped at QMAP_DEFAULT_N_CTX; a llama may go beyond its trained context. */
static uint32_t context_size(const qmap_model_info *in, const lm_args *a)
{
    uint32_t n_ctx = a->ctx ? (uint32_t)a->ctx
                            : in->context_length < QMAP_DEFAULT_N_CTX ? in->context_length : QMAP_DEFAULT_N_CTX;
    if (n_ctx > in->context_length && !a->quiet && !strcmp(in->arch, "llama"))
        fprintf(stderr, "qmap run: warning: context %u is above the %u the model was trained with; quality may drop\n",
                n_ctx, in->context_length);
    return n_ctx;
}

/* -p TEXT or -f FILE through the model's tokenizer into r->ids. */
static bool tokenize_prompt(lm_run *r)
{
    const lm_args *a = r->a;
    const char *text = a->prompt;
    size_t len = a->prompt ? strlen(a->prompt) : 0;
    char *file_text = NULL;
    if (a->file) {
        qm_error fe;
        if (!(file_text = cli_read_text(a->file, &len, &fe))) {
            fprintf(stderr, "qmap run: -f: %s\n", fe.message);
            return false;
        }
        text = file_text;
    }
    qmap_error err;
    qmap_status ts = qmap_tokenize(r->m, text, len, !a->no_bos, r->ids, r->cap, &r->n_prompt, &err);
    free(file_text);
    if (ts == QMAP_ERR_INVALID_ARGUMENT && r->n_prompt > r->cap) {
        fprintf(stderr, "qmap run: the prompt is %zu tokens, more than the context of %u (-c)\n", r->n_prompt, r->n_ctx);
        return false;
    }
    if (ts != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        if (ts == QMAP_ERR_NOT_FOUND) fprintf(stderr, "qmap run: give the prompt as token ids with --tokens\n");
        return false;
    }
    return true;
}

/* The prompt as ids, within the context. */
static bool read_prompt(lm_run *r)
{
    if (r->a->tokens) {
        long n = parse_ids(r->a->tokens, r->ids, r->cap, r->in.vocab_size);
        if (n < 0) return false;
        r->n_prompt = (size_t)n;
    } else if (!tokenize_prompt(r)) {
        return false;
    }
    if (r->n_prompt == 0) {
        fprintf(stderr, "qmap run: the prompt has no tokens\n");
        return false;
    }
    if (r->n_prompt > r->n_ctx) {
        fprintf(stderr, "qmap run: the prompt is %zu tokens, more than the context of %u (-c)\n", r->n_prompt, r->n_ctx);
        return false;
    }
    return true;
}

static bool open_session(lm_run *r)
{
    const lm_args *a = r->a;
    qmap_error err;
    qmap_session_params sp;
    qmap_session_params_default(&sp);
    sp.n_ctx = r->n_ctx;
    sp.n_batch = (uint32_t)a->batch;
    sp.threads = (int)a->threads;
    sp.kv_type = (qmap_kv_type)a->kv;
    sp.act = (qmap_act_mode)a->act;
    sp.batch_invariant = a->batch_invariant;
    if (qmap_session_new(r->m, &sp, &r->s, &err) != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        return false;
    }
    qmap_sampler_params smpp = { a->temp, (int32_t)a->top_k, a->top_p, a->min_p, a->repeat_penalty,
                                 (uint32_t)a->repeat_last_n, a->seed };
    if (qmap_sampler_new(&smpp, r->in.vocab_size, &r->smp, &err) != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        return false;
    }
    return true;
}

/* Evaluate the prompt in batches; the sampler's repeat window and the detokenizer then start after it. */
static bool eval_prompt(lm_run *r)
{
    qmap_error err;
    double t0 = now_s();
    qmap_status es = qmap_eval(r->s, r->ids, r->n_prompt, &err);
    r->st.prompt_s = now_s() - t0;
    r->st.n_prompt = r->n_prompt;
    if (es != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        return false;
    }
    for (size_t i = 0; i < r->n_prompt; i++) qmap_sampler_accept(r->smp, r->ids[i]);
    /* The generated text continues the prompt's: the prompt's tokens go through the decoder first (their
     * text dropped), so that the first generated token keeps its leading space — only a text's very first
     * token loses the space SentencePiece put before it. */
    qmap_detok_init(&r->dt);
    char piece[4096];
    for (size_t i = 0; r->in.has_tokenizer && i < r->n_prompt; i++) {
        size_t n = 0;
        if (r->ids[i] != qmap_token_bos(r->m)) qmap_detokenize(r->m, &r->dt, r->ids[i], piece, sizeof piece, &n, &err);
    }
    return true;
}

/* Print a generated token's text (its id without a tokenizer), or keep it for --json; false on out of memory. */
static bool emit_token(lm_run *r, int32_t id)
{
    if (!r->in.has_tokenizer) {
        if (!r->a->json) {
            printf("%s%d", r->st.n_gen > 1 ? " " : "", id);
            fflush(stdout);
        }
        return true;
    }
    char piece[4096];
    size_t n = 0;
    qmap_error err;
    if (qmap_detokenize(r->m, &r->dt, id, piece, sizeof piece, &n, &err) != QMAP_OK || !n) return true;
    if (!r->a->json) {
        fwrite(piece, 1, n, stdout);
        fflush(stdout);
        return true;
    }
    if (text_append(&r->text, &r->text_len, &r->text_cap, piece, n)) return true;
    fprintf(stderr, "qmap run: out of memory\n");
    return false;
}

/* The generate loop: sample, print, evaluate the new token, until EOS, -n tokens, the context's end or
 * Ctrl-C. The prompt has been evaluated; the first token comes from its last position's logits. */
static bool generate(lm_run *r)
{
    qmap_error err;
    const int32_t eos = qmap_token_eos(r->m);
    int32_t *gen = r->ids + r->n_prompt;
    const size_t gen_cap = r->cap - r->n_prompt;
    double t0 = now_s();
    const float *logits = qmap_logits(r->s, r->n_prompt - 1);
    for (;;) {
        if ((long)r->st.n_gen >= r->a->n_predict) { r->st.stop = "n_predict"; break; }
        if (g_interrupted) { r->st.stop = "interrupt"; break; }
        int32_t id = qmap_sample(r->smp, logits);
        gen[r->st.n_gen++] = id;
        if (id == eos) { r->st.stop = "eos"; break; }
        if (!emit_token(r, id)) break;
        if (r->st.n_gen >= gen_cap || qmap_session_pos(r->s) >= r->n_ctx) { r->st.stop = "context"; break; }
        if (qmap_eval(r->s, &id, 1, &err) != QMAP_OK) {
            fprintf(stderr, "qmap run: %s\n", err.message);
            return false;
        }
        logits = qmap_logits(r->s, 0);
    }
    r->st.gen_s = now_s() - t0;
    return true;
}

/* The prompt and the generation under a SIGINT handler that stops the loop, not the process. */
static bool prompt_and_generate(lm_run *r)
{
    struct sigaction sa = { .sa_handler = on_sigint }, old_sa;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);
    bool ok = eval_prompt(r) && generate(r);
    sigaction(SIGINT, &old_sa, NULL);
    return ok;
}

/* The detokenizer's held-back bytes, then the JSON object or the closing newline and the figures. */
static void finish(lm_run *r)
{
    const lm_args *a = r->a;
    if (r->in.has_tokenizer) {
        char piece[4096];
        size_t n = qmap_detok_flush(&r->dt, piece, sizeof piece);
        if (a->json) text_append(&r->text, &r->text_len, &r->text_cap, piece, n);
        else fwrite(piece, 1, n, stdout);
    }
    if (a->json) {
        print_json(&r->st, r->m, r->text, r->text_len, r->ids, r->ids + r->n_prompt, a->kv, a->act);
        return;
    }
    fputc('\n', stdout);
    fflush(stdout);
    if (!a->quiet) print_stats(&r->st, r->m, stderr);
    if (!strcmp(r->st.stop, "context") && a->quiet)
        fprintf(stderr, "qmap run: stopped at the context limit (%u)\n", r->n_ctx);
}

int run_lm(qmap_model *m, const lm_args *a)
{
    lm_run r = { .m = m, .a = a, .st = { .load_s = a->load_s, .stop = "n_predict" } };
    qmap_model_get_info(m, &r.in);
    r.n_ctx = context_size(&r.in, a);
    r.cap = (size_t)r.n_ctx + 1;
    int status = 1;
    if (!(r.ids = malloc(r.cap * sizeof *r.ids))) fprintf(stderr, "qmap run: out of memory\n");
    else if (read_prompt(&r) && open_session(&r) && prompt_and_generate(&r)) {
        finish(&r);
        status = 0;
    }
    qmap_sampler_free(r.smp);
    qmap_session_free(r.s);
    free(r.ids);
    free(r.text);
    return status;
}
