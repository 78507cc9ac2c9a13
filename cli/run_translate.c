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

int run_translate(qmap_model *m, const translate_args *a)
{
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    qmap_translate_params tp;
    qmap_translate_params_default(&tp);
    tp.beam_size = (uint32_t)a->beam;
    tp.n_best = (uint32_t)a->n_best;
    tp.length_penalty = a->length_penalty;
    tp.max_len = (uint32_t)a->max_len;
    tp.max_batch = (uint32_t)(a->batch ? a->batch : 64);
    tp.threads = (int)a->threads;
    tp.act = a->act;
    tp.kv_type = a->kv;
    int status = 1;
    char *file_text = NULL, **lines = NULL;
    int32_t *ids = NULL;
    uint32_t *lens = NULL;
    qmap_hypothesis *hyp = NULL;
    qmap_translator *t = NULL;
    char *out_text = NULL;
    qmap_error err;
    if (tp.n_best > tp.beam_size) {
        fprintf(stderr, "qmap run: --n-best %u is more than --beam %u\n", tp.n_best, tp.beam_size);
        return 1;
    }
    /* the sentences */
    size_t n_sent = 1;
    char *one[1] = { (char *)a->prompt };
    if (a->file) {
        size_t len;
        qm_error fe;
        if (!(file_text = cli_read_text(a->file, &len, &fe))) {
            fprintf(stderr, "qmap run: -f: %s\n", fe.message);
            goto done;
        }
        n_sent = split_lines(file_text, len, &lines);
        if (n_sent == SIZE_MAX) { fprintf(stderr, "qmap run: out of memory\n"); goto done; }
        if (n_sent == 0) {
            fprintf(stderr, "qmap run: %s has no lines to translate\n", a->file);
            goto done;
        }
    }
    char **text = lines ? lines : one;
    size_t max_src = in.context_length;
    if (!(ids = malloc(n_sent * max_src * sizeof *ids)) || !(lens = malloc(n_sent * sizeof *lens)) ||
        !(hyp = malloc(n_sent * tp.n_best * sizeof *hyp)) || !(out_text = malloc(65536))) {
        fprintf(stderr, "qmap run: out of memory\n");
        goto done;
    }
    size_t total = 0, n_unk = 0;
    int32_t unk = qmap_token_unk(m);
    for (size_t i = 0; i < n_sent; i++) {
        size_t n = 0;
        if (a->tokens) {
            if (parse_ids(a->tokens, ids + total, max_src, &n, in.src_vocab_size)) goto done;
        } else {
            qmap_status ts = qmap_tokenize(m, text[i], strlen(text[i]), true, ids + total, max_src, &n, &err);
            if (ts == QMAP_ERR_INVALID_ARGUMENT && n > max_src) {
                fprintf(stderr, "qmap run: %s%zu: %zu source tokens; the model takes at most %zu\n",
                        a->file ? "line " : "sentence ", i + 1, n, max_src);
                goto done;
            }
            if (ts != QMAP_OK) {
                fprintf(stderr, "qmap run: %s\n", err.message);
                if (ts == QMAP_ERR_NOT_FOUND || ts == QMAP_ERR_UNSUPPORTED)
                    fprintf(stderr, "qmap run: give the source as ids with --tokens\n");
                goto done;
            }
        }
        if (n == 0) {
            fprintf(stderr, "qmap run: %s%zu has no source tokens\n", a->file ? "line " : "sentence ", i + 1);
            goto done;
        }
        for (size_t k = 0; k < n; k++) n_unk += unk >= 0 && ids[total + k] == unk;
        lens[i] = (uint32_t)n;
        total += n;
    }
    if (n_unk && !a->quiet)
        fprintf(stderr, "qmap run: %zu source token%s not in the model's source vocabulary; read as the unknown token\n",
                n_unk, n_unk == 1 ? " is" : "s are");
    /* --json lists every translation at the end: one call's results must hold them all */
    if (a->json) {
        if (n_sent > 65536) {
            fprintf(stderr, "qmap run: --json takes at most 65536 sentences (this file has %zu)\n", n_sent);
            goto done;
        }
        if (n_sent > tp.max_batch) tp.max_batch = (uint32_t)n_sent;
    }
    if (qmap_translator_new(m, &tp, &t, &err) != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        goto done;
    }
    /* translate, a batch of sentences per call */
    double t0 = now_s();
    size_t n_out_tokens = 0;
    for (size_t i = 0, off = 0; i < n_sent;) {
        size_t k = n_sent - i < tp.max_batch ? n_sent - i : tp.max_batch;
        if (qmap_translate(t, ids + off, lens + i, k, hyp + i * tp.n_best, &err) != QMAP_OK) {
            fprintf(stderr, "qmap run: %s\n", err.message);
            goto done;
        }
        for (size_t s = i; s < i + k; s++) {
            off += lens[s];
            n_out_tokens += hyp[s * tp.n_best].n_ids + 1;
        }
        /* the ids of this batch are overwritten by the next call: print now */
        for (size_t s = i; s < i + k; s++) {
            for (uint32_t j = 0; j < tp.n_best; j++) {
                const qmap_hypothesis *h = &hyp[s * tp.n_best + j];
                if (a->json) continue;
                if (in.has_tokenizer) decode_text(m, h->ids, h->n_ids, out_text, 65536);
                if (tp.n_best > 1) printf("%s%zu.%u\t%.4f\t", j == 0 && s ? "\n" : "", s + 1, j + 1, (double)h->score);
                if (in.has_tokenizer) fputs(out_text, stdout);
                else
                    for (size_t q = 0; q < h->n_ids; q++) printf("%s%d", q ? " " : "", h->ids[q]);
                putchar('\n');
            }
        }
        i += k;
    }
    double secs = now_s() - t0;
    if (a->json) {
        /* one object: figures only when translating a file; hypotheses for -p / --tokens */
        json_out j = { .fp = stdout };
        json_begin_object(&j, NULL);
        json_cstring(&j, "model", in.path);
        json_u64(&j, "sentences", n_sent);
        json_u64(&j, "beam", tp.beam_size);
        {
            json_begin_array(&j, "translations");
            for (size_t s = 0; s < n_sent; s++) {
                json_begin_array(&j, NULL);
                for (uint32_t q = 0; q < tp.n_best; q++) {
                    const qmap_hypothesis *h = &hyp[s * tp.n_best + q];
                    json_begin_object(&j, NULL);
                    if (in.has_tokenizer) {
                        decode_text(m, h->ids, h->n_ids, out_text, 65536);
                        json_cstring(&j, "text", out_text);
                    }
                    json_begin_array(&j, "ids");
                    for (size_t k = 0; k < h->n_ids; k++) json_i64(&j, NULL, h->ids[k]);
                    json_end_array(&j);
                    json_f64(&j, "score", h->score);
                    json_f64(&j, "log_prob", h->log_prob);
                    json_end_object(&j);
                }
                json_end_array(&j);
            }
            json_end_array(&j);
        }
        json_u64(&j, "target_tokens", n_out_tokens);
        json_f64(&j, "seconds", secs);
        json_f64(&j, "sentences_per_s", secs > 0 ? (double)n_sent / secs : 0);
        json_f64(&j, "target_tokens_per_s", secs > 0 ? (double)n_out_tokens / secs : 0);
        json_end_object(&j);
        fputc('\n', stdout);
    } else if (!a->quiet) {
        fprintf(stderr, "qmap run: %zu sentence%s in %.1f ms: %.1f sentences/s, %.0f target tokens/s (beam %u, %s)\n",
                n_sent, n_sent == 1 ? "" : "s", secs * 1e3, secs > 0 ? (double)n_sent / secs : 0.0,
                secs > 0 ? (double)n_out_tokens / secs : 0.0, tp.beam_size, in.file_type);
    }
    status = 0;
done:
    qmap_translator_free(t);
    free(file_text);
    free(lines);
    free(ids);
    free(lens);
    free(hyp);
    free(out_text);
    return status;
}
