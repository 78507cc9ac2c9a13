/* sched.c — the continuous-batching scheduler (see sched.h). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched.h"

/* Published output: text[0 .. emitted) cut into pieces; tokens[] the records of every sampled token. */
typedef struct piece_end { size_t text_end, tok_end; } piece_end;

struct serve_job {
    int32_t *prompt;
    size_t n_prompt;
    serve_gen_params gp;
    char *stop_copy[SERVE_MAX_STOP + 1];
    size_t max_stop_len;
    /* written by the scheduler thread, read under the mutex */
    char *text;
    size_t text_len, text_cap, emitted;
    serve_token_info *tokens;
    size_t n_tokens, tokens_cap;
    piece_end *pieces;
    size_t n_pieces, pieces_cap;
    size_t next_piece;                 /* the reader's cursor */
    size_t n_gen;
    const char *finish_reason;
    serve_error error;
    bool done, released, in_sched;     /* in_sched: queued or in a slot (the scheduler holds a reference) */
    serve_job *next_queued;
};

typedef struct slot {
    serve_job *job;
    qmap_sampler *sampler;
    qmap_detok detok;
    size_t n_prefilled;                /* prompt ids evaluated so far */
    int32_t last;                      /* the id the next decode row evaluates */
    uint32_t *counts;                  /* per vocabulary id: times generated (presence/frequency penalties) */
    float *scratch;                    /* penalised logits */
} slot;

struct serve_sched {
    const qmap_model *model;
    serve_sched_config cfg;
    uint32_t vocab;
    int32_t eos, bos;
    qmap_batch *batch;
    slot *slots;
    qmap_batch_item *items;
    uint32_t *item_slot;
    pthread_t thread;
    bool thread_started, stopping, draining;
    pthread_mutex_t mu;
    pthread_cond_t work, progress;
    serve_job *queue_head, *queue_tail;
    uint32_t queue_len;
    serve_metrics metrics;
};

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void serve_chunk_free(serve_chunk *c)
{
    free(c->text);
    free(c->tokens);
    memset(c, 0, sizeof *c);
}

static void job_free(serve_job *j)
{
    if (!j) return;
    free(j->prompt);
    for (size_t i = 0; i < j->gp.n_stop; i++) free(j->stop_copy[i]);
    free(j->text);
    free(j->tokens);
    free(j->pieces);
    free(j);
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np) return false;
    *p = np;
    *cap = nc;
    return true;
}

/* ---- output of one job (scheduler thread, under the mutex) -------------------------------------------- */

/* The length of the longest suffix of text that is a proper prefix of a stop string: text that may still
 * become a stop string and so is held back. */
static size_t stop_holdback(const serve_job *j)
{
    size_t best = 0;
    for (size_t s = 0; s < j->gp.n_stop; s++) {
        const char *stop = j->gp.stop[s];
        size_t sl = strlen(stop);
        for (size_t k = sl - 1; k > best; k--)
            if (k <= j->text_len && !memcmp(j->text + j->text_len - k, stop, k)) { best = k; break; }
    }
    return best;
}

/* Where the earliest stop string starts in the text not yet published (and the few bytes before it that
 * a stop string could straddle), or SIZE_MAX. */
static size_t stop_match(const serve_job *j)
{
    size_t from = j->emitted, best = SIZE_MAX;
    for (size_t s = 0; s < j->gp.n_stop; s++) {
        const char *stop = j->gp.stop[s];
        size_t sl = strlen(stop);
        for (size_t i = from; i + sl <= j->text_len && i < best; i++)
            if (!memcmp(j->text + i, stop, sl)) { best = i; break; }
    }
    return best;
}

/* Publish text up to `upto` as one piece with the tokens sampled since the last one. A piece without new
 * text (a character still incomplete, or held back) is made only at the end, to carry those tokens. */
static void publish(serve_job *j, size_t upto, bool at_end)
{
    size_t toks_before = j->n_pieces ? j->pieces[j->n_pieces - 1].tok_end : 0;
    if (upto <= j->emitted && !(at_end && toks_before < j->n_tokens)) return;
    if (!grow((void **)&j->pieces, &j->pieces_cap, j->n_pieces + 1, sizeof *j->pieces)) return;
    j->emitted = upto > j->emitted ? upto : j->emitted;
    j->pieces[j->n_pieces++] = (piece_end){ j->emitted, j->n_tokens };
}

static void job_finish(serve_job *j, const char *reason)
{
    j->finish_reason = reason;
    j->done = true;
}

/* Append a token's text; publish what can no longer be part of a stop string. True if a stop string ended
 * the text. */
static bool job_add_text(serve_job *j, const char *piece, size_t n)
{
    if (!grow((void **)&j->text, &j->text_cap, j->text_len + n + 1, 1)) return false;
    memcpy(j->text + j->text_len, piece, n);
    j->text_len += n;
    j->text[j->text_len] = 0;
    size_t at = stop_match(j);
    if (at != SIZE_MAX) {
        j->text_len = at;
        j->text[at] = 0;
        publish(j, at, true);
        return true;
    }
    publish(j, j->text_len - stop_holdback(j), false);
    return false;
}

/* ---- sampling ------------------------------------------------------------------------------------------ */

static void fill_logprobs(const float *logits, uint32_t vocab, int32_t id, int n_top, serve_token_info *t)
{
    float mx = logits[0];
    for (uint32_t i = 1; i < vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (uint32_t i = 0; i < vocab; i++) sum += exp((double)(logits[i] - mx));
    const float lse = mx + (float)log(sum);
    t->id = id;
    t->logprob = logits[id] - lse;
    t->n_top = 0;
    for (int k = 0; k < n_top; k++) {
        int32_t best = -1;
        for (uint32_t i = 0; i < vocab; i++) {
            bool taken = false;
            for (int q = 0; q < k; q++) taken |= t->top_id[q] == (int32_t)i;
            if (!taken && (best < 0 || logits[i] > logits[best])) best = (int32_t)i;
        }
        t->top_id[k] = best;
        t->top_logprob[k] = logits[best] - lse;
        t->n_top++;
    }
}

static int32_t sample_slot(serve_sched *s, slot *sl, const float *logits)
{
    const serve_gen_params *gp = &sl->job->gp;
    if (gp->presence_penalty == 0 && gp->frequency_penalty == 0) return qmap_sample(sl->sampler, logits);
    for (uint32_t i = 0; i < s->vocab; i++) {
        float l = logits[i];
        if (sl->counts[i]) l -= gp->presence_penalty + gp->frequency_penalty * (float)sl->counts[i];
        sl->scratch[i] = l;
    }
    return qmap_sample(sl->sampler, sl->scratch);
}

/* One sampled token of a slot: record it, detokenize, check the ends. True while the slot generates on. */
static bool slot_take_token(serve_sched *s, slot *sl, const float *logits)
{
    serve_job *j = sl->job;
    int32_t id = sample_slot(s, sl, logits);
    if (sl->counts[id] < UINT32_MAX) sl->counts[id]++;
    if (id == s->eos) {
        publish(j, j->text_len, true);
        job_finish(j, "stop");
        return false;
    }
    j->n_gen++;
    if (grow((void **)&j->tokens, &j->tokens_cap, j->n_tokens + 1, sizeof *j->tokens)) {
        serve_token_info *t = &j->tokens[j->n_tokens++];
        memset(t, 0, sizeof *t);
        t->id = id;
        t->text_offset = (uint32_t)j->text_len;
        if (j->gp.logprobs) fill_logprobs(logits, s->vocab, id, j->gp.top_logprobs, t);
    }
    char piece[4096];
    size_t n = 0;
    qmap_detokenize(s->model, &sl->detok, id, piece, sizeof piece, &n, NULL);
    if (job_add_text(j, piece, n)) { job_finish(j, "stop"); return false; }
    bool at_limit = j->gp.max_tokens > 0 && (long)j->n_gen >= j->gp.max_tokens;
    if (at_limit || qmap_batch_pos(s->batch, (uint32_t)(sl - s->slots)) >= s->cfg.n_ctx) {
        publish(j, j->text_len, true);
        job_finish(j, "length");
        return false;
    }
    sl->last = id;
    return true;
}

/* ---- slots --------------------------------------------------------------------------------------------- */

static void slot_clear(serve_sched *s, slot *sl)
{
    serve_job *j = sl->job;
    qmap_sampler_free(sl->sampler);
    sl->sampler = NULL;
    sl->job = NULL;
    qmap_batch_reset(s->batch, (uint32_t)(sl - s->slots));
    if (!j) return;
    j->in_sched = false;
    if (!j->done) {
        j->done = true;
        if (!j->finish_reason && !j->error.status) j->finish_reason = "stop";
    }
    if (j->released) job_free(j);
}

static void fail_job(serve_job *j, int status, const char *msg)
{
    serve_fail(&j->error, status, "server_error", NULL, NULL, "%s", msg);
    j->done = true;
}

/* Give a queued job the free slot: its sampler, and the prompt fed through the detokenizer so the first
 * generated token keeps its leading space (as qmap run does). */
static void slot_start(serve_sched *s, slot *sl, serve_job *j)
{
    qmap_error err;
    sl->job = j;
    sl->n_prefilled = 0;
    memset(sl->counts, 0, s->vocab * sizeof *sl->counts);
    if (qmap_sampler_new(&j->gp.sampling, s->vocab, &sl->sampler, &err) != QMAP_OK) {
        fail_job(j, 500, err.message);
        return;
    }
    for (size_t i = 0; i < j->n_prompt; i++) qmap_sampler_accept(sl->sampler, j->prompt[i]);
    qmap_detok_init(&sl->detok);
    char piece[4096];
    for (size_t i = 0; i < j->n_prompt; i++) {
        size_t n = 0;
        if (j->prompt[i] != s->bos) qmap_detokenize(s->model, &sl->detok, j->prompt[i], piece, sizeof piece, &n, NULL);
    }
}

/* Under the mutex: free the slots of ended or abandoned jobs, then fill free slots from the queue. */
static void admit(serve_sched *s)
{
    for (uint32_t i = 0; i < s->cfg.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->job && (sl->job->done || sl->job->released)) slot_clear(s, sl);
    }
    for (uint32_t i = 0; i < s->cfg.n_slots && s->queue_head; i++) {
        slot *sl = &s->slots[i];
        if (sl->job) continue;
        serve_job *j = s->queue_head;
        s->queue_head = j->next_queued;
        if (!s->queue_head) s->queue_tail = NULL;
        s->queue_len--;
        if (j->released) { j->in_sched = false; job_free(j); i--; continue; }
        slot_start(s, sl, j);
        if (j->done) slot_clear(s, sl);
    }
}

/* The step's items: every generating slot's decode row first, then prompt chunks in slot order within
 * what is left of step_tokens. Returns the number of items. */
static size_t build_items(serve_sched *s)
{
    size_t n = 0;
    uint32_t budget = s->cfg.step_tokens;
    for (uint32_t i = 0; i < s->cfg.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->job || sl->n_prefilled < sl->job->n_prompt) continue;
        s->items[n] = (qmap_batch_item){ i, &sl->last, 1 };
        s->item_slot[n++] = i;
        budget--;
    }
    for (uint32_t i = 0; i < s->cfg.n_slots && budget > 0; i++) {
        slot *sl = &s->slots[i];
        if (!sl->job || sl->n_prefilled >= sl->job->n_prompt) continue;
        size_t left = sl->job->n_prompt - sl->n_prefilled;
        uint32_t take = left < budget ? (uint32_t)left : budget;
        s->items[n] = (qmap_batch_item){ i, sl->job->prompt + sl->n_prefilled, take };
        s->item_slot[n++] = i;
        budget -= take;
    }
    return n;
}

/* Under the mutex, after a successful eval: advance prefill, sample where a sequence has its logits. */
static void after_step(serve_sched *s, size_t n_items, double step_s)
{
    uint64_t generated = 0;
    for (size_t k = 0; k < n_items; k++) {
        slot *sl = &s->slots[s->item_slot[k]];
        serve_job *j = sl->job;
        bool prefill = sl->n_prefilled < j->n_prompt;
        if (prefill) {
            sl->n_prefilled += s->items[k].n;
            s->metrics.prompt_tokens += s->items[k].n;
            if (sl->n_prefilled < j->n_prompt) continue;
        }
        if (j->released || j->done) continue;
        slot_take_token(s, sl, qmap_batch_logits(s->batch, s->item_slot[k]));
        generated++;
    }
    s->metrics.gen_tokens += generated;
    s->metrics.steps++;
    if (generated) s->metrics.gen_seconds += step_s;
}

static void *sched_main(void *arg)
{
    serve_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        admit(s);
        size_t n_items = build_items(s);
        if (n_items == 0) {
            if (s->stopping && !s->queue_head) break;
            pthread_cond_broadcast(&s->progress);
            pthread_cond_wait(&s->work, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        /* the batch and the items belong to this thread; HTTP threads only touch jobs under the mutex */
        qmap_error err;
        double t0 = now_s();
        qmap_status st = qmap_batch_eval(s->batch, s->items, n_items, &err);
        double dt = now_s() - t0;
        pthread_mutex_lock(&s->mu);
        if (st == QMAP_OK) after_step(s, n_items, dt);
        else
            for (size_t k = 0; k < n_items; k++) fail_job(s->slots[s->item_slot[k]].job, 500, err.message);
        pthread_cond_broadcast(&s->progress);
    }
    pthread_cond_broadcast(&s->progress);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static uint32_t busy_slots(const serve_sched *s)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->cfg.n_slots; i++) n += s->slots[i].job != NULL;
    return n;
}

/* ---- the public side ----------------------------------------------------------------------------------- */

static void sched_free_parts(serve_sched *s)
{
    for (uint32_t i = 0; s->slots && i < s->cfg.n_slots; i++) {
        qmap_sampler_free(s->slots[i].sampler);
        free(s->slots[i].counts);
        free(s->slots[i].scratch);
    }
    free(s->slots);
    free(s->items);
    free(s->item_slot);
    qmap_batch_free(s->batch);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->progress);
    free(s);
}

qmap_status serve_sched_new(const qmap_model *m, const serve_sched_config *cfg, serve_sched **out, qmap_error *err)
{
    *out = NULL;
    serve_sched *s = calloc(1, sizeof *s);
    if (!s) return QMAP_ERR_NOMEM;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->progress, NULL);
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    s->model = m;
    s->cfg = *cfg;
    if (s->cfg.step_tokens < s->cfg.n_slots + 1) s->cfg.step_tokens = s->cfg.n_slots + 1;
    s->vocab = in.vocab_size;
    s->eos = qmap_token_eos(m);
    s->bos = qmap_token_bos(m);
    s->metrics.n_slots = cfg->n_slots;
    qmap_batch_params bp;
    qmap_batch_params_default(&bp);
    bp.n_seq = cfg->n_slots;
    bp.n_ctx = cfg->n_ctx;
    bp.n_batch = s->cfg.step_tokens;
    bp.threads = cfg->threads;
    qmap_status st = qmap_batch_new(m, &bp, &s->batch, err);
    s->slots = calloc(cfg->n_slots, sizeof *s->slots);
    s->items = calloc(cfg->n_slots, sizeof *s->items);
    s->item_slot = calloc(cfg->n_slots, sizeof *s->item_slot);
    bool ok = st == QMAP_OK && s->slots && s->items && s->item_slot;
    for (uint32_t i = 0; ok && i < cfg->n_slots; i++) {
        s->slots[i].counts = calloc(s->vocab, sizeof *s->slots[i].counts);
        s->slots[i].scratch = malloc(s->vocab * sizeof *s->slots[i].scratch);
        ok = s->slots[i].counts && s->slots[i].scratch;
    }
    if (ok && pthread_create(&s->thread, NULL, sched_main, s) != 0) ok = false;
    if (!ok) {
        if (st == QMAP_OK) st = QMAP_ERR_NOMEM;
        if (err && err->code != st) {
            err->code = st;
            snprintf(err->message, sizeof err->message, "serve: out of memory for %u slots", cfg->n_slots);
        }
        sched_free_parts(s);
        return st;
    }
    s->thread_started = true;
    *out = s;
    return QMAP_OK;
}

void serve_sched_drain(serve_sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    for (;;) {
        bool busy = s->queue_head != NULL;
        for (uint32_t i = 0; i < s->cfg.n_slots; i++) busy |= s->slots[i].job != NULL;
        if (!busy) break;
        pthread_cond_signal(&s->work);
        pthread_cond_wait(&s->progress, &s->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

void serve_sched_free(serve_sched *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = s->draining = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    if (s->thread_started) pthread_join(s->thread, NULL);
    for (uint32_t i = 0; i < s->cfg.n_slots; i++)
        if (s->slots[i].job) slot_clear(s, &s->slots[i]);
    sched_free_parts(s);
}

static serve_job *job_new(const int32_t *prompt, size_t n, const serve_gen_params *gp)
{
    serve_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->gp = *gp;
    j->prompt = malloc(n * sizeof *j->prompt);
    bool ok = j->prompt != NULL;
    if (ok) memcpy(j->prompt, prompt, n * sizeof *prompt);
    j->n_prompt = n;
    j->gp.n_stop = 0;
    for (size_t i = 0; ok && i < gp->n_stop; i++) {
        ok = (j->stop_copy[i] = strdup(gp->stop[i])) != NULL;
        if (ok) j->gp.stop[j->gp.n_stop++] = j->stop_copy[i];
    }
    if (!ok) { job_free(j); return NULL; }
    return j;
}

serve_job *serve_sched_submit(serve_sched *s, const int32_t *prompt, size_t n, const serve_gen_params *gp,
                              serve_error *err)
{
    if (n == 0) {
        serve_fail(err, 400, "invalid_request_error", "invalid_value", "prompt", "the prompt has no tokens");
        return NULL;
    }
    if (n >= s->cfg.n_ctx) {
        serve_fail(err, 400, "invalid_request_error", "context_length_exceeded", "prompt",
                   "the prompt is %zu tokens; the context of each sequence holds %u (and one more is needed to "
                   "generate)", n, s->cfg.n_ctx);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (prompt[i] < 0 || (uint32_t)prompt[i] >= s->vocab) {
            serve_fail(err, 400, "invalid_request_error", "invalid_value", "prompt",
                       "token id %d is outside the vocabulary of %u", prompt[i], s->vocab);
            return NULL;
        }
    serve_job *j = job_new(prompt, n, gp);
    if (!j) {
        serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    if (s->draining || s->queue_len >= s->cfg.max_queue + s->cfg.n_slots - busy_slots(s)) {
        bool stopping = s->draining;
        s->metrics.requests_refused++;
        pthread_mutex_unlock(&s->mu);
        job_free(j);
        serve_fail(err, 503, "server_error", stopping ? "shutting_down" : "queue_full", NULL,
                   stopping ? "the server is shutting down" : "every slot is busy and the queue is full; retry later");
        return NULL;
    }
    j->in_sched = true;
    if (s->queue_tail) s->queue_tail->next_queued = j;
    else s->queue_head = j;
    s->queue_tail = j;
    s->queue_len++;
    s->metrics.requests_total++;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    return j;
}

static bool timed_wait(serve_sched *s, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    return pthread_cond_timedwait(&s->progress, &s->mu, &ts) != ETIMEDOUT;
}

static bool copy_piece(const serve_job *j, size_t k, serve_chunk *out)
{
    size_t t0 = k ? j->pieces[k - 1].text_end : 0, t1 = j->pieces[k].text_end;
    size_t k0 = k ? j->pieces[k - 1].tok_end : 0, k1 = j->pieces[k].tok_end;
    out->len = t1 - t0;
    out->n_tokens = k1 - k0;
    out->text = malloc(out->len + 1);
    out->tokens = out->n_tokens ? malloc(out->n_tokens * sizeof *out->tokens) : NULL;
    if (!out->text || (out->n_tokens && !out->tokens)) { serve_chunk_free(out); return false; }
    memcpy(out->text, j->text + t0, out->len);
    out->text[out->len] = 0;
    if (out->n_tokens) memcpy(out->tokens, j->tokens + k0, out->n_tokens * sizeof *out->tokens);
    return true;
}

serve_next serve_job_next(serve_sched *s, serve_job *j, int timeout_ms, serve_chunk *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&s->mu);
    serve_next r = SERVE_NEXT_TIMEOUT;
    for (int tries = 0; tries < 2; tries++) {
        if (j->next_piece < j->n_pieces) {
            r = copy_piece(j, j->next_piece, out) ? SERVE_NEXT_PIECE : SERVE_NEXT_DONE;
            if (r == SERVE_NEXT_DONE) serve_fail(&j->error, 500, "server_error", NULL, NULL, "out of memory");
            j->next_piece++;
            break;
        }
        if (j->done) { r = SERVE_NEXT_DONE; break; }
        if (tries == 0) timed_wait(s, timeout_ms);
    }
    pthread_mutex_unlock(&s->mu);
    return r;
}

void serve_job_outcome(serve_sched *s, const serve_job *j, serve_outcome *out)
{
    pthread_mutex_lock(&s->mu);
    out->finish_reason = j->error.status ? NULL : j->finish_reason;
    out->n_prompt = j->n_prompt;
    out->n_gen = j->n_gen;
    out->error = j->error;
    pthread_mutex_unlock(&s->mu);
}

void serve_job_release(serve_sched *s, serve_job *j)
{
    if (!j) return;
    pthread_mutex_lock(&s->mu);
    j->released = true;
    bool free_now = !j->in_sched;
    if (!free_now) pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    if (free_now) job_free(j);
}

void serve_sched_get_metrics(serve_sched *s, serve_metrics *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->metrics;
    out->queue_depth = s->queue_len;
    out->slots_busy = busy_slots(s);
    pthread_mutex_unlock(&s->mu);
}
