/* http.c — libmicrohttpd glue for qmap serve (see http.h). */
#define _GNU_SOURCE
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "classify.h"
#include "http.h"
#include "openai.h"
#include "translate.h"

#define WAIT_SLICE_MS 50   /* how often a waiting connection checks that its client is still there */

struct serve_http {
    serve_http_config cfg;
    const qmap_model *model;
    serve_sched *sched;
    struct MHD_Daemon *daemon;
    int64_t started;
    atomic_ullong next_id, next_seed;
    atomic_int in_flight;      /* generation responses not yet fully sent (or abandoned) */
    pthread_mutex_t log_mu;
    pthread_mutex_t classify_mu;   /* one qmap_classify at a time on the one classifier */
    pthread_mutex_t translate_mu;  /* one qmap_translate at a time; guards translators[] */
    qmap_translator *translators[SERVE_MAX_BEAM + 1];   /* by beam size, made on first use */
};

/* Per connection: the body as it arrives, and what the log line needs. */
typedef struct conn {
    char *body;
    size_t len, cap;
    bool too_large;
    uint64_t dropped;          /* body bytes dropped after the limit */
    int status;
    double t0;
    char path[64], method[8];
} conn;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- responses ----------------------------------------------------------------------------------------- */

static enum MHD_Result send_text(struct MHD_Connection *c, conn *cn, int status, const char *type, char *text)
{
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
        text = strdup(oom);
        status = 500;
        if (!text) return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) { free(text); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", type);
    if (status == 503) MHD_add_response_header(r, "Retry-After", "1");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    cn->status = status;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, conn *cn, int status, char *json)
{
    return send_text(c, cn, status, "application/json", json);
}

static enum MHD_Result send_error(struct MHD_Connection *c, conn *cn, const serve_error *e)
{
    return send_json(c, cn, e->status, serve_error_json(e));
}

static enum MHD_Result send_fail(struct MHD_Connection *c, conn *cn, int status, const char *type, const char *code,
                                 const char *msg)
{
    serve_error e;
    serve_fail(&e, status, type, code, NULL, "%s", msg);
    return send_error(c, cn, &e);
}

/* ---- authentication and liveness ----------------------------------------------------------------------- */

/* Compare in time that depends on the lengths only, never on where the first difference is. */
static bool same_secret(const char *a, size_t alen, const char *b, size_t blen)
{
    unsigned char diff = alen != blen;
    for (size_t i = 0; i < blen; i++) diff |= (unsigned char)(i < alen ? a[i] : 0) ^ (unsigned char)b[i];
    return diff == 0;
}

static bool authorized(const serve_http *h, struct MHD_Connection *c)
{
    const char *key = h->cfg.api_key;
    if (!key || !*key) return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!auth || strncmp(auth, "Bearer ", 7)) return false;
    auth += 7;
    return same_secret(auth, strlen(auth), key, strlen(key));
}

/* Whether the client has closed its end: a waiting request stops its generation then. */
static bool client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = { .fd = ci->connect_fd, .events = POLLIN | POLLRDHUP };
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    char b;
    return (p.revents & POLLIN) && recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* ---- generation ---------------------------------------------------------------------------------------- */

/* The request's prompt as ids: a chat rendered through the template, text tokenized (BOS as the tokenizer
 * says), ids taken as given. A prompt the context cannot hold is refused here, naming both lengths. */
static bool prompt_ids(const serve_http *h, const serve_request *rq, int32_t **ids, size_t *n, serve_error *err)
{
    if (rq->prompt_ids) {
        *ids = malloc(rq->n_prompt_ids * sizeof **ids);
        if (!*ids) return serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(*ids, rq->prompt_ids, rq->n_prompt_ids * sizeof **ids);
        *n = rq->n_prompt_ids;
        return true;
    }
    size_t len = rq->prompt_len;
    char *rendered = NULL;
    const char *text = rq->prompt;
    if (rq->chat) {
        rendered = serve_template_render(h->cfg.chat_template, rq->messages, rq->n_messages, &len);
        if (!rendered) return serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        text = rendered;
    }
    size_t cap = (size_t)h->cfg.n_ctx + 1, need = 0;
    *ids = malloc(cap * sizeof **ids);
    qmap_error qe;
    qmap_status st = *ids ? qmap_tokenize(h->model, text, len, true, *ids, cap, &need, &qe) : QMAP_ERR_NOMEM;
    free(rendered);
    if (st == QMAP_OK) { *n = need; return true; }
    free(*ids);
    *ids = NULL;
    if (st == QMAP_ERR_INVALID_ARGUMENT && need > cap)
        return serve_fail(err, 400, "invalid_request_error", "context_length_exceeded", rq->chat ? "messages" : "prompt",
                          "the prompt is %zu tokens; the context of each sequence holds %u", need, h->cfg.n_ctx);
    if (st == QMAP_ERR_NOMEM) return serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    return serve_fail(err, 400, "invalid_request_error", "invalid_value", rq->chat ? "messages" : "prompt", "%s", qe.message);
}

/* A request without "seed" samples differently each time, as OpenAI's and llama.cpp's servers do. */
static uint64_t fresh_seed(serve_http *h)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t z = ((uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec) ^ (atomic_fetch_add(&h->next_seed, 1) << 32);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;   /* splitmix64's finaliser */
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void gen_params(serve_http *h, const serve_request *rq, serve_gen_params *gp)
{
    memset(gp, 0, sizeof *gp);
    qmap_sampler_params_default(&gp->sampling);
    gp->sampling.temp = rq->temperature;
    gp->sampling.top_k = rq->top_k;
    gp->sampling.top_p = rq->top_p;
    gp->sampling.min_p = rq->min_p;
    gp->sampling.repeat_penalty = rq->repeat_penalty;
    gp->sampling.seed = rq->has_seed ? rq->seed : fresh_seed(h);
    gp->presence_penalty = rq->presence_penalty;
    gp->frequency_penalty = rq->frequency_penalty;
    gp->max_tokens = rq->max_tokens;
    for (size_t i = 0; i < rq->n_stop; i++) gp->stop[gp->n_stop++] = rq->stop[i];
    if (rq->chat) gp->stop[gp->n_stop++] = serve_template_end_of_turn(h->cfg.chat_template);
    gp->logprobs = rq->logprobs;
    gp->top_logprobs = rq->top_logprobs;
}

/* A streaming response's state, owned by libmicrohttpd's callback from the moment it is created. */
typedef struct stream {
    serve_http *h;
    struct MHD_Connection *c;
    serve_job *job;
    serve_response_head head;
    char id[48];
    bool logprobs, include_usage, first, ended;
    char *out;                 /* the event being sent */
    size_t out_len, out_at;
} stream;

static void stream_free(void *cls)
{
    stream *st = cls;
    serve_job_release(st->h->sched, st->job);
    atomic_fetch_sub(&st->h->in_flight, 1);
    free(st->out);
    free(st);
}

static char *sse_event(const char *json)
{
    if (!json) return NULL;
    char *ev = NULL;
    return asprintf(&ev, "data: %s\n\n", json) < 0 ? NULL : ev;
}

/* The next event to send: a piece, or the end of the stream. False when the client is gone. */
static bool stream_refill(stream *st)
{
    for (;;) {
        if (client_gone(st->c)) return false;
        serve_chunk ch;
        serve_next r = serve_job_next(st->h->sched, st->job, WAIT_SLICE_MS, &ch);
        if (r == SERVE_NEXT_TIMEOUT) continue;
        char *json = NULL;
        if (r == SERVE_NEXT_PIECE) {
            if (ch.len == 0 && !(st->logprobs && ch.n_tokens)) { serve_chunk_free(&ch); continue; }
            json = openai_chunk(&st->head, st->h->model, &ch, st->logprobs, st->first);
            st->first = false;
            serve_chunk_free(&ch);
            st->out = sse_event(json);
            free(json);
        } else {
            serve_outcome o;
            serve_job_outcome(st->h->sched, st->job, &o);
            if (o.error.status) {
                char *e = serve_error_json(&o.error), *ev = sse_event(e);
                free(e);
                st->out = ev ? ev : NULL;
                if (ev && asprintf(&st->out, "%sdata: [DONE]\n\n", ev) < 0) st->out = NULL;
                free(ev);
            } else {
                st->out = openai_stream_end(&st->head, &o, st->include_usage);
            }
            st->ended = true;
        }
        if (!st->out) return false;
        st->out_len = strlen(st->out);
        st->out_at = 0;
        return true;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *st = cls;
    if (st->out_at == st->out_len) {
        free(st->out);
        st->out = NULL;
        if (st->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!stream_refill(st)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = st->out_len - st->out_at < max ? st->out_len - st->out_at : max;
    memcpy(buf, st->out + st->out_at, n);
    st->out_at += n;
    return (ssize_t)n;
}

static enum MHD_Result start_stream(serve_http *h, struct MHD_Connection *c, conn *cn, const serve_request *rq,
                                    serve_job *job, const serve_response_head *head)
{
    stream *st = calloc(1, sizeof *st);
    if (!st) {
        serve_job_release(h->sched, job);
        atomic_fetch_sub(&h->in_flight, 1);
        return send_fail(c, cn, 500, "server_error", NULL, "out of memory");
    }
    *st = (stream){ .h = h, .c = c, .job = job, .head = *head, .logprobs = rq->logprobs,
                    .include_usage = rq->include_usage, .first = true };
    snprintf(st->id, sizeof st->id, "%s", head->id);
    st->head.id = st->id;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free);
    if (!r) { stream_free(st); return MHD_NO; }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    cn->status = 200;
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* Collect every piece of a non-streaming request; NULL text when the client left first. */
static enum MHD_Result finish_whole(serve_http *h, struct MHD_Connection *c, conn *cn, const serve_request *rq,
                                    serve_job *job, const serve_response_head *head)
{
    char *text = NULL;
    size_t len = 0, n_toks = 0;
    serve_token_info *toks = NULL;
    bool ok = true, gone = false;
    for (;;) {
        serve_chunk ch;
        serve_next r = serve_job_next(h->sched, job, WAIT_SLICE_MS, &ch);
        if (r == SERVE_NEXT_DONE) break;
        if (r == SERVE_NEXT_TIMEOUT) {
            if (client_gone(c)) { gone = true; break; }
            continue;
        }
        char *nt = realloc(text, len + ch.len + 1);
        serve_token_info *nk = realloc(toks, (n_toks + ch.n_tokens + 1) * sizeof *toks);
        if (nt) text = nt;
        if (nk) toks = nk;
        ok = ok && nt && nk;
        if (ok) {
            memcpy(text + len, ch.text, ch.len);
            len += ch.len;
            text[len] = 0;
            if (ch.n_tokens) memcpy(toks + n_toks, ch.tokens, ch.n_tokens * sizeof *toks);
            n_toks += ch.n_tokens;
        }
        serve_chunk_free(&ch);
    }
    serve_outcome o;
    serve_job_outcome(h->sched, job, &o);
    serve_job_release(h->sched, job);
    atomic_fetch_sub(&h->in_flight, 1);
    enum MHD_Result ret;
    if (gone) ret = MHD_NO;
    else if (o.error.status) ret = send_error(c, cn, &o.error);
    else if (!ok) ret = send_fail(c, cn, 500, "server_error", NULL, "out of memory");
    else ret = send_json(c, cn, 200, openai_completion(head, h->model, text ? text : "", len, toks, n_toks, rq->logprobs, &o));
    free(text);
    free(toks);
    return ret;
}

static enum MHD_Result handle_generate(serve_http *h, struct MHD_Connection *c, conn *cn, bool chat)
{
    serve_defaults def;
    qmap_sampler_params sd;
    qmap_sampler_params_default(&sd);
    def = (serve_defaults){ sd.temp, sd.top_p, sd.min_p, sd.repeat_penalty, sd.top_k };
    serve_request rq;
    serve_error err;
    if (!serve_request_parse(cn->body ? cn->body : "", cn->len, chat, &def, &rq, &err)) return send_error(c, cn, &err);
    int32_t *ids = NULL;
    size_t n = 0;
    serve_job *job = NULL;
    if (prompt_ids(h, &rq, &ids, &n, &err)) {
        serve_gen_params gp;
        gen_params(h, &rq, &gp);
        job = serve_sched_submit(h->sched, ids, n, &gp, &err);
    }
    free(ids);
    enum MHD_Result ret;
    if (!job) {
        ret = send_error(c, cn, &err);
    } else {
        /* No idle timeout while the answer is made: a request may wait its turn in the queue longer than
         * --timeout, and a client that leaves is noticed (client_gone). on_completed restores it. */
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        atomic_fetch_add(&h->in_flight, 1);
        char id[48];
        snprintf(id, sizeof id, "%s-%llu", chat ? "chatcmpl" : "cmpl", (unsigned long long)atomic_fetch_add(&h->next_id, 1));
        serve_response_head head = { id, (int64_t)time(NULL), h->cfg.model_id, chat };
        ret = rq.stream ? start_stream(h, c, cn, &rq, job, &head) : finish_whole(h, c, cn, &rq, job, &head);
    }
    serve_request_free(&rq);
    return ret;
}

/* ---- tokenizer endpoints ------------------------------------------------------------------------------- */

static enum MHD_Result handle_tokenize(serve_http *h, struct MHD_Connection *c, conn *cn)
{
    serve_tokenize_request tr;
    serve_error err;
    if (!serve_tokenize_parse(cn->body ? cn->body : "", cn->len, &tr, &err)) return send_error(c, cn, &err);
    size_t need = tr.len + 8, cap = 0;
    int32_t *ids = NULL;
    qmap_error qe;
    qmap_status st = QMAP_ERR_INVALID_ARGUMENT;
    /* a first guess, then the count the tokenizer says it needs */
    for (int tries = 0; tries < 2 && st == QMAP_ERR_INVALID_ARGUMENT && need > cap; tries++) {
        cap = need;
        free(ids);
        ids = malloc(cap * sizeof *ids);
        st = ids ? qmap_tokenize(h->model, tr.content, tr.len, tr.add_special, ids, cap, &need, &qe) : QMAP_ERR_NOMEM;
    }
    free(tr.content);
    if (st != QMAP_OK) {
        free(ids);
        return send_fail(c, cn, st == QMAP_ERR_NOMEM ? 500 : 400, st == QMAP_ERR_NOMEM ? "server_error" : "invalid_request_error",
                         NULL, st == QMAP_ERR_NOMEM ? "out of memory" : qe.message);
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < need; i++) json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    json_t *root = json_pack("{s:o}", "tokens", arr);
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return send_json(c, cn, 200, s);
}

static enum MHD_Result handle_detokenize(serve_http *h, struct MHD_Connection *c, conn *cn)
{
    int32_t *ids;
    size_t n;
    serve_error err;
    if (!serve_detokenize_parse(cn->body ? cn->body : "", cn->len, &ids, &n, &err)) return send_error(c, cn, &err);
    char *text = NULL, piece[4096];
    size_t len = 0;
    qmap_detok dt;
    qmap_detok_init(&dt);
    bool ok = true;
    for (size_t i = 0; ok && i <= n; i++) {
        size_t k = 0;
        qmap_error qe;
        if (i < n) {
            if (qmap_detokenize(h->model, &dt, ids[i], piece, sizeof piece, &k, &qe) != QMAP_OK) {
                serve_fail(&err, 400, "invalid_request_error", "invalid_value", "tokens", "tokens[%zu]: %s", i, qe.message);
                ok = false;
                break;
            }
        } else {
            k = qmap_detok_flush(&dt, piece, sizeof piece);
        }
        char *nt = realloc(text, len + k + 1);
        if (!nt) { serve_fail(&err, 500, "server_error", NULL, NULL, "out of memory"); ok = false; break; }
        text = nt;
        memcpy(text + len, piece, k);
        len += k;
        text[len] = 0;
    }
    free(ids);
    if (!ok) { free(text); return send_error(c, cn, &err); }
    json_t *root = json_pack("{s:s%}", "content", text ? text : "", len);
    free(text);
    char *s = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return send_json(c, cn, 200, s);
}

/* ---- classifier endpoint ------------------------------------------------------------------------------ */

static enum MHD_Result handle_classify(serve_http *h, struct MHD_Connection *c, conn *cn)
{
    qmap_model_info in;
    qmap_model_get_info(h->model, &in);
    float *x = NULL;
    size_t n = 0;
    serve_error err;
    if (!serve_classify_parse(cn->body ? cn->body : "", cn->len, in.input_dim, in.input_scale, in.input_offset, &x, &n, &err))
        return send_error(c, cn, &err);
    float *scores = malloc(n * in.vocab_size * sizeof *scores);
    qmap_error qe;
    atomic_fetch_add(&h->in_flight, 1);
    pthread_mutex_lock(&h->classify_mu);
    qmap_status st = scores ? qmap_classify(h->cfg.classifier, x, n, scores, &qe) : QMAP_ERR_NOMEM;
    pthread_mutex_unlock(&h->classify_mu);
    atomic_fetch_sub(&h->in_flight, 1);
    free(x);
    enum MHD_Result ret = st == QMAP_OK
        ? send_json(c, cn, 200, openai_classify(h->model, h->cfg.model_id, scores, n, in.vocab_size))
        : send_fail(c, cn, 500, "server_error", NULL, st == QMAP_ERR_NOMEM ? "out of memory" : qe.message);
    free(scores);
    return ret;
}

/* ---- encoder-decoder endpoint -------------------------------------------------------------------------- */

/* Source ids of every sentence packed one after another; false with *err naming the sentence. */
static bool translate_sources(serve_http *h, const serve_translate_request *tr, int32_t **ids, uint32_t *lens,
                              serve_error *err)
{
    qmap_model_info in;
    qmap_model_get_info(h->model, &in);
    size_t max_src = in.context_length, total = 0;
    if (!(*ids = malloc(tr->n * max_src * sizeof **ids))) return serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < tr->n; i++) {
        size_t n = 0;
        qmap_error qe;
        qmap_status st = qmap_tokenize(h->model, tr->text[i], strlen(tr->text[i]), true, *ids + total, max_src, &n, &qe);
        if (st == QMAP_ERR_INVALID_ARGUMENT && n > max_src)
            return serve_fail(err, 400, "invalid_request_error", "context_length_exceeded", "text",
                              "text[%zu] is %zu source tokens; the model takes at most %zu", i, n, max_src);
        if (st != QMAP_OK) return serve_fail(err, 400, "invalid_request_error", "invalid_value", "text", "text[%zu]: %s", i, qe.message);
        if (n == 0) return serve_fail(err, 400, "invalid_request_error", "invalid_value", "text", "text[%zu] has no source tokens", i);
        lens[i] = (uint32_t)n;
        total += n;
    }
    return true;
}

/* Under translate_mu: the translator of this beam size, made the first time it is asked for. */
static qmap_translator *translator_for(serve_http *h, unsigned beam, serve_error *err)
{
    if (h->translators[beam]) return h->translators[beam];
    qmap_translate_params tp;
    qmap_translate_params_default(&tp);
    tp.beam_size = beam;
    tp.max_batch = SERVE_MAX_SENTENCES;
    tp.threads = h->cfg.threads;
    qmap_error qe;
    if (qmap_translator_new(h->model, &tp, &h->translators[beam], &qe) != QMAP_OK) {
        serve_fail(err, 500, "server_error", NULL, NULL, "%s", qe.message);
        return NULL;
    }
    return h->translators[beam];
}

static enum MHD_Result handle_translate(serve_http *h, struct MHD_Connection *c, conn *cn)
{
    serve_translate_request tr;
    serve_error err;
    if (!serve_translate_parse(cn->body ? cn->body : "", cn->len, &tr, &err)) return send_error(c, cn, &err);
    int32_t *ids = NULL;
    uint32_t lens[SERVE_MAX_SENTENCES];
    qmap_hypothesis hyp[SERVE_MAX_SENTENCES];
    bool ok = translate_sources(h, &tr, &ids, lens, &err);
    char *json = NULL;
    if (ok) {
        atomic_fetch_add(&h->in_flight, 1);
        pthread_mutex_lock(&h->translate_mu);
        qmap_translator *t = translator_for(h, tr.beam, &err);
        qmap_error qe;
        ok = t && qmap_translate(t, ids, lens, tr.n, hyp, &qe) == QMAP_OK;
        if (t && !ok) serve_fail(&err, 500, "server_error", NULL, NULL, "%s", qe.message);
        /* the hypotheses' ids belong to the translator until its next call: written out under the lock */
        if (ok && !(json = openai_translate(h->model, h->cfg.model_id, hyp, tr.n)))
            ok = serve_fail(&err, 500, "server_error", NULL, NULL, "out of memory");
        pthread_mutex_unlock(&h->translate_mu);
        atomic_fetch_sub(&h->in_flight, 1);
    }
    free(ids);
    serve_translate_request_free(&tr);
    return ok ? send_json(c, cn, 200, json) : send_error(c, cn, &err);
}

/* ---- routing ------------------------------------------------------------------------------------------- */

typedef enum route { R_HEALTH, R_MODELS, R_METRICS, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE, R_CLASSIFY, R_TRANSLATE, R_NONE } route;
static const struct { const char *path, *method; route r; } routes[] = {
    { "/health", "GET", R_HEALTH },           { "/v1/models", "GET", R_MODELS },
    { "/metrics", "GET", R_METRICS },         { "/v1/completions", "POST", R_COMPLETIONS },
    { "/v1/chat/completions", "POST", R_CHAT }, { "/tokenize", "POST", R_TOKENIZE },
    { "/detokenize", "POST", R_DETOKENIZE },  { "/v1/classify", "POST", R_CLASSIFY },
    { "/v1/translate", "POST", R_TRANSLATE },
};

static enum MHD_Result dispatch(serve_http *h, struct MHD_Connection *c, conn *cn, const char *url, const char *method)
{
    route r = R_NONE;
    bool path_known = false;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) {
            path_known = true;
            if (!strcmp(method, routes[i].method)) r = routes[i].r;
        }
    if (r != R_HEALTH && !authorized(h, c))
        return send_fail(c, cn, 401, "authentication_error", "invalid_api_key", "a valid API key is needed: Authorization: Bearer KEY");
    if (r == R_NONE) {
        char msg[160];
        snprintf(msg, sizeof msg, path_known ? "%s %.64s: method not allowed" : "%s %.64s: no such endpoint", method, url);
        return send_fail(c, cn, path_known ? 405 : 404, "invalid_request_error", path_known ? "method_not_allowed" : "not_found", msg);
    }
    bool lm_route = r == R_COMPLETIONS || r == R_CHAT || r == R_TOKENIZE || r == R_DETOKENIZE;
    if ((lm_route && !h->sched) || (r == R_CLASSIFY && !h->cfg.classifier) || (r == R_TRANSLATE && !h->cfg.seq2seq)) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s %.64s: this server runs a%s; it serves %s", method, url,
                 h->sched ? " language model" : h->cfg.classifier ? " classifier" : "n encoder-decoder",
                 h->sched ? "/v1/completions, /v1/chat/completions, /tokenize and /detokenize"
                          : h->cfg.classifier ? "POST /v1/classify" : "POST /v1/translate");
        return send_fail(c, cn, 404, "invalid_request_error", "not_found", msg);
    }
    if (cn->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes (--max-body)", h->cfg.max_body);
        return send_fail(c, cn, 413, "invalid_request_error", "request_too_large", msg);
    }
    qmap_model_info in;
    serve_metrics mt;
    switch (r) {
    case R_HEALTH: return send_json(c, cn, 200, strdup("{\"status\":\"ok\"}"));
    case R_MODELS:
        qmap_model_get_info(h->model, &in);
        return send_json(c, cn, 200, openai_models(h->cfg.model_id, h->started, &in));
    case R_METRICS:
        memset(&mt, 0, sizeof mt);
        if (h->sched) serve_sched_get_metrics(h->sched, &mt);
        return send_text(c, cn, 200, "text/plain; version=0.0.4", openai_metrics(&mt));
    case R_COMPLETIONS: return handle_generate(h, c, cn, false);
    case R_CHAT: return handle_generate(h, c, cn, true);
    case R_TOKENIZE: return handle_tokenize(h, c, cn);
    case R_DETOKENIZE: return handle_detokenize(h, c, cn);
    case R_CLASSIFY: return handle_classify(h, c, cn);
    case R_TRANSLATE: return handle_translate(h, c, cn);
    default: return MHD_NO;
    }
}

/* Gather the body (at most max_body bytes: past that it is dropped and the request answered 413), then route. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    serve_http *h = cls;
    conn *cn = *con_cls;
    if (!cn) {
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        cn->t0 = now_s();
        snprintf(cn->path, sizeof cn->path, "%s", url);
        snprintf(cn->method, sizeof cn->method, "%s", method);
        *con_cls = cn;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
        cn->too_large = declared > h->cfg.max_body;
        /* Far over the limit: answered at once, the body unread (libmicrohttpd then closes the connection).
         * A little over: read and dropped, then answered, since many clients cannot read a response while
         * the server refuses the rest of their body. */
        if (declared > 4 * (unsigned long long)h->cfg.max_body) return dispatch(h, c, cn, url, method);
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (cn->too_large || cn->len + n > h->cfg.max_body) {
            /* a chunked body past the limit is read and dropped, to answer 413 at its end; a client that
             * keeps sending far past it is cut off */
            cn->too_large = true;
            cn->dropped += n;
            return cn->dropped > 4 * (uint64_t)h->cfg.max_body ? MHD_NO : MHD_YES;
        }
        if (cn->len + n + 1 > cn->cap) {
            size_t cap = cn->cap ? cn->cap : 4096;
            while (cap < cn->len + n + 1) cap *= 2;
            char *nb = realloc(cn->body, cap);
            if (!nb) return MHD_NO;
            cn->body = nb;
            cn->cap = cap;
        }
        memcpy(cn->body + cn->len, upload, n);
        cn->len += n;
        return MHD_YES;
    }
    return dispatch(h, c, cn, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    serve_http *h = cls;
    conn *cn = *con_cls;
    if (!cn) return;
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned int)h->cfg.timeout_s);
    if (h->cfg.log) {
        double ms = (now_s() - cn->t0) * 1e3;
        pthread_mutex_lock(&h->log_mu);
        if (h->cfg.log_json)
            fprintf(h->cfg.log, "{\"method\":\"%s\",\"path\":\"%s\",\"status\":%d,\"ms\":%.1f,\"completed\":%s}\n",
                    cn->method, cn->path[0] == '/' ? cn->path : "?", cn->status, ms,
                    toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "true" : "false");
        else
            fprintf(h->cfg.log, "qmap serve: %s %s %d %.1f ms%s\n", cn->method, cn->path, cn->status, ms,
                    toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection ended early)");
        fflush(h->cfg.log);
        pthread_mutex_unlock(&h->log_mu);
    }
    free(cn->body);
    free(cn);
    *con_cls = NULL;
}

/* ---- the daemon ---------------------------------------------------------------------------------------- */

serve_http *serve_http_start(const serve_http_config *cfg, const qmap_model *m, serve_sched *sched, char *errbuf,
                             size_t errcap)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV }, *ai = NULL;
    char port[8];
    snprintf(port, sizeof port, "%u", cfg->port);
    int gai = getaddrinfo(cfg->host, port, &hints, &ai);
    if (gai != 0) {
        snprintf(errbuf, errcap, "--host %s: %s", cfg->host, gai_strerror(gai));
        return NULL;
    }
    serve_http *h = calloc(1, sizeof *h);
    if (!h) { freeaddrinfo(ai); snprintf(errbuf, errcap, "out of memory"); return NULL; }
    h->cfg = *cfg;
    h->model = m;
    h->sched = sched;
    h->started = (int64_t)time(NULL);
    atomic_init(&h->next_id, 1);
    atomic_init(&h->next_seed, 0);
    atomic_init(&h->in_flight, 0);
    pthread_mutex_init(&h->log_mu, NULL);
    pthread_mutex_init(&h->classify_mu, NULL);
    pthread_mutex_init(&h->translate_mu, NULL);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    h->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h,
                                 MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)cfg->timeout_s,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned int)256,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                                 MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->daemon) {
        snprintf(errbuf, errcap, "cannot listen on %s:%u (in use, or not an address of this machine)", cfg->host, cfg->port);
        pthread_mutex_destroy(&h->log_mu);
        pthread_mutex_destroy(&h->classify_mu);
        pthread_mutex_destroy(&h->translate_mu);
        free(h);
        return NULL;
    }
    return h;
}

uint16_t serve_http_port(const serve_http *h)
{
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    return di ? di->port : h->cfg.port;
}

void serve_http_quiesce(serve_http *h)
{
    MHD_socket fd = MHD_quiesce_daemon(h->daemon);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void serve_http_wait_idle(serve_http *h)
{
    const struct timespec tick = { 0, 10 * 1000000L };
    for (unsigned i = 0; i < h->cfg.timeout_s * 100u && atomic_load(&h->in_flight) > 0; i++) nanosleep(&tick, NULL);
}

void serve_http_stop(serve_http *h)
{
    if (!h) return;
    MHD_stop_daemon(h->daemon);
    pthread_mutex_destroy(&h->log_mu);
    pthread_mutex_destroy(&h->classify_mu);
    pthread_mutex_destroy(&h->translate_mu);
    for (int i = 0; i <= SERVE_MAX_BEAM; i++) qmap_translator_free(h->translators[i]);
    free(h);
}
