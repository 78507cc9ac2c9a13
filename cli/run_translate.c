/* run_translate.c — `qmap run` on an encoder-decoder: sentences in, translations out. */
#include "run_translate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "json_out.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The lines of text (without their newlines; a last line without one counts, empty lines are skipped):
 * pointers into text, which is modified (newlines become NULs). */
static size_t split_lines(char *text, size_t len, char ***lines)
{
    size_t n = 0, cap = 0;
    char **v = NULL;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && text[j] != '\n') j++;
        size_t e = j;
        if (e > i && text[e - 1] == '\r') e--;
        if (e > i) {
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                char **nv = realloc(v, cap * sizeof *v);
                if (!nv) { free(v); *lines = NULL; return SIZE_MAX; }
                v = nv;
            }
            text[e] = 0;
            v[n++] = text + i;
        }
        i = j + 1;
    }
    *lines = v;
    return n;
}

/* The text of ids through the target vocabulary into buf (NUL-terminated, cut to cap). */
static void decode_text(const qmap_model *m, const int32_t *ids, size_t n, char *buf, size_t cap)
{
    qmap_detok st;
    qmap_detok_init(&st);
    size_t len = 0;
    char piece[512];
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        if (qmap_detokenize(m, &st, ids[i], piece, sizeof piece, &k, NULL) != QMAP_OK) continue;
        if (len + k + 1 > cap) break;
        memcpy(buf + len, piece, k);
        len += k;
    }
    size_t k = qmap_detok_flush(&st, piece, sizeof piece);
    if (len + k + 1 <= cap) {
        memcpy(buf + len, piece, k);
        len += k;
    }
    /* a word-level vocabulary joins with spaces: drop the one in front */
    size_t start = len && buf[0] == ' ' ? 1 : 0;
    memmove(buf, buf + start, len - start);
    buf[len - start] = 0;
}

static int parse_ids(const char *s, int32_t *ids, size_t cap, size_t *n, uint32_t vocab)
{
    *n = 0;
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == '\t') s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v >= (long)vocab) {
            fprintf(stderr, "qmap run: --tokens: \"%.20s\" is not an id of the source vocabulary (0 .. %u)\n", s,
                    vocab - 1);
            return 1;
        }
        if (*n == cap) {
            fprintf(stderr, "qmap run: --tokens: more than %zu ids; the model takes sentences of at most that\n", cap);
            return 1;
        }
        ids[(*n)++] = (int32_t)v;
        s = end;
    }
    return 0;
}

/* One run: the sentences (one -p / --tokens sentence, or -f FILE's lines), their source ids end to end with a
 * length each, a hypothesis slot per sentence and rank, and a buffer for decoded text. */
typedef struct tr_job {
    qmap_model *m;
    const translate_args *a;
    qmap_model_info in;
    qmap_translate_params tp;
    char *file_text, **lines, *one[1];
    char **text;
    size_t n_sent, max_src;
    int32_t *ids;
    uint32_t *lens;
    qmap_hypothesis *hyp;
    char *out_text;
    size_t n_out_tokens;
    double secs;
} tr_job;

/* -p TEXT is one sentence, -f FILE one per line; --tokens is one sentence too (its text unused). */
static bool read_sentences(tr_job *j)
{
    j->n_sent = 1;
    j->one[0] = (char *)j->a->prompt;
    j->text = j->one;
    if (!j->a->file) return true;
    size_t len;
    qm_error fe;
    if (!(j->file_text = cli_read_text(j->a->file, &len, &fe))) {
        fprintf(stderr, "qmap run: -f: %s\n", fe.message);
        return false;
    }
    j->n_sent = split_lines(j->file_text, len, &j->lines);
    if (j->n_sent == SIZE_MAX) { fprintf(stderr, "qmap run: out of memory\n"); return false; }
    if (j->n_sent == 0) {
        fprintf(stderr, "qmap run: %s has no lines to translate\n", j->a->file);
        return false;
    }
    j->text = j->lines;
    return true;
}

/* Sentence i's source ids at ids, at most max_src of them; *n their count. */
static bool encode_sentence(tr_job *j, size_t i, int32_t *ids, size_t *n)
{
    const translate_args *a = j->a;
    if (a->tokens) return !parse_ids(a->tokens, ids, j->max_src, n, j->in.src_vocab_size);
    qmap_error err;
    qmap_status ts = qmap_tokenize(j->m, j->text[i], strlen(j->text[i]), true, ids, j->max_src, n, &err);
    if (ts == QMAP_ERR_INVALID_ARGUMENT && *n > j->max_src) {
        fprintf(stderr, "qmap run: %s%zu: %zu source tokens; the model takes at most %zu\n",
                a->file ? "line " : "sentence ", i + 1, *n, j->max_src);
        return false;
    }
    if (ts != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        if (ts == QMAP_ERR_NOT_FOUND || ts == QMAP_ERR_UNSUPPORTED)
            fprintf(stderr, "qmap run: give the source as ids with --tokens\n");
        return false;
    }
    return true;
}

/* Every sentence's source ids, end to end; the unknown tokens among them said once on stderr. */
static bool encode_sources(tr_job *j)
{
    size_t total = 0, n_unk = 0;
    int32_t unk = qmap_token_unk(j->m);
    for (size_t i = 0; i < j->n_sent; i++) {
        size_t n = 0;
        if (!encode_sentence(j, i, j->ids + total, &n)) return false;
        if (n == 0) {
            fprintf(stderr, "qmap run: %s%zu has no source tokens\n", j->a->file ? "line " : "sentence ", i + 1);
            return false;
        }
        for (size_t k = 0; k < n; k++) n_unk += unk >= 0 && j->ids[total + k] == unk;
        j->lens[i] = (uint32_t)n;
        total += n;
    }
    if (n_unk && !j->a->quiet)
        fprintf(stderr, "qmap run: %zu source token%s not in the model's source vocabulary; read as the unknown token\n",
                n_unk, n_unk == 1 ? " is" : "s are");
    return true;
}

/* The hypotheses of sentences i .. i+k-1, as text (ids without a tokenizer), with rank and score for --n-best. */
static void print_batch(tr_job *j, size_t i, size_t k)
{
    const uint32_t n_best = j->tp.n_best;
    for (size_t s = i; s < i + k; s++) {
        for (uint32_t r = 0; r < n_best; r++) {
            const qmap_hypothesis *h = &j->hyp[s * n_best + r];
            if (j->in.has_tokenizer) decode_text(j->m, h->ids, h->n_ids, j->out_text, 65536);
            if (n_best > 1) printf("%s%zu.%u\t%.4f\t", r == 0 && s ? "\n" : "", s + 1, r + 1, (double)h->score);
            if (j->in.has_tokenizer) fputs(j->out_text, stdout);
            else
                for (size_t q = 0; q < h->n_ids; q++) printf("%s%d", q ? " " : "", h->ids[q]);
            putchar('\n');
        }
    }
}

/* Translate a batch of sentences per call, printing each batch as it comes (the next call overwrites its ids). */
static bool translate_all(tr_job *j, qmap_translator *t)
{
    qmap_error err;
    const uint32_t n_best = j->tp.n_best;
    double t0 = now_s();
    for (size_t i = 0, off = 0; i < j->n_sent;) {
        size_t k = j->n_sent - i < j->tp.max_batch ? j->n_sent - i : j->tp.max_batch;
        if (qmap_translate(t, j->ids + off, j->lens + i, k, j->hyp + i * n_best, &err) != QMAP_OK) {
            fprintf(stderr, "qmap run: %s\n", err.message);
            return false;
        }
        for (size_t s = i; s < i + k; s++) {
            off += j->lens[s];
            j->n_out_tokens += j->hyp[s * n_best].n_ids + 1;
        }
        if (!j->a->json) print_batch(j, i, k);
        i += k;
    }
    j->secs = now_s() - t0;
    return true;
}

/* One object: the hypotheses of every sentence, then the figures. */
static void print_json(tr_job *j)
{
    const double secs = j->secs;
    json_out o = { .fp = stdout };
    jo_begin_object(&o, NULL);
    jo_cstring(&o, "model", j->in.path);
    jo_u64(&o, "sentences", j->n_sent);
    jo_u64(&o, "beam", j->tp.beam_size);
    jo_begin_array(&o, "translations");
    for (size_t s = 0; s < j->n_sent; s++) {
        jo_begin_array(&o, NULL);
        for (uint32_t q = 0; q < j->tp.n_best; q++) {
            const qmap_hypothesis *h = &j->hyp[s * j->tp.n_best + q];
            jo_begin_object(&o, NULL);
            if (j->in.has_tokenizer) {
                decode_text(j->m, h->ids, h->n_ids, j->out_text, 65536);
                jo_cstring(&o, "text", j->out_text);
            }
            jo_begin_array(&o, "ids");
            for (size_t k = 0; k < h->n_ids; k++) jo_i64(&o, NULL, h->ids[k]);
            jo_end_array(&o);
            jo_f64(&o, "score", h->score);
            jo_f64(&o, "log_prob", h->log_prob);
            jo_end_object(&o);
        }
        jo_end_array(&o);
    }
    jo_end_array(&o);
    jo_u64(&o, "target_tokens", j->n_out_tokens);
    jo_f64(&o, "seconds", secs);
    jo_f64(&o, "sentences_per_s", secs > 0 ? (double)j->n_sent / secs : 0);
    jo_f64(&o, "target_tokens_per_s", secs > 0 ? (double)j->n_out_tokens / secs : 0);
    jo_end_object(&o);
    fputc('\n', stdout);
}

static void translate_params(const translate_args *a, qmap_translate_params *tp)
{
    qmap_translate_params_default(tp);
    tp->beam_size = (uint32_t)a->beam;
    tp->n_best = (uint32_t)a->n_best;
    tp->length_penalty = a->length_penalty;
    tp->max_len = (uint32_t)a->max_len;
    tp->max_batch = (uint32_t)(a->batch ? a->batch : 64);
    tp->threads = (int)a->threads;
    tp->act = a->act;
    tp->kv_type = a->kv;
}

/* Read and encode the sentences, make the translator, translate, report. */
static bool translate_job(tr_job *j, qmap_translator **t)
{
    const translate_args *a = j->a;
    if (!read_sentences(j)) return false;
    j->max_src = j->in.context_length;
    if (!(j->ids = malloc(j->n_sent * j->max_src * sizeof *j->ids)) || !(j->lens = malloc(j->n_sent * sizeof *j->lens)) ||
        !(j->hyp = malloc(j->n_sent * j->tp.n_best * sizeof *j->hyp)) || !(j->out_text = malloc(65536))) {
        fprintf(stderr, "qmap run: out of memory\n");
        return false;
    }
    if (!encode_sources(j)) return false;
    /* --json lists every translation at the end: one call's results must hold them all */
    if (a->json) {
        if (j->n_sent > 65536) {
            fprintf(stderr, "qmap run: --json takes at most 65536 sentences (this file has %zu)\n", j->n_sent);
            return false;
        }
        if (j->n_sent > j->tp.max_batch) j->tp.max_batch = (uint32_t)j->n_sent;
    }
    qmap_error err;
    if (qmap_translator_new(j->m, &j->tp, t, &err) != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        return false;
    }
    if (!translate_all(j, *t)) return false;
    if (a->json) print_json(j);
    else if (!a->quiet)
        fprintf(stderr, "qmap run: %zu sentence%s in %.1f ms: %.1f sentences/s, %.0f target tokens/s (beam %u, %s)\n",
                j->n_sent, j->n_sent == 1 ? "" : "s", j->secs * 1e3, j->secs > 0 ? (double)j->n_sent / j->secs : 0.0,
                j->secs > 0 ? (double)j->n_out_tokens / j->secs : 0.0, j->tp.beam_size, j->in.file_type);
    return true;
}

int run_translate(qmap_model *m, const translate_args *a)
{
    tr_job j = { .m = m, .a = a };
    qmap_model_get_info(m, &j.in);
    translate_params(a, &j.tp);
    if (j.tp.n_best > j.tp.beam_size) {
        fprintf(stderr, "qmap run: --n-best %u is more than --beam %u\n", j.tp.n_best, j.tp.beam_size);
        return 1;
    }
    qmap_translator *t = NULL;
    int status = translate_job(&j, &t) ? 0 : 1;
    qmap_translator_free(t);
    free(j.file_text);
    free(j.lines);
    free(j.ids);
    free(j.lens);
    free(j.hyp);
    free(j.out_text);
    return status;
}
