/* openai.c — OpenAI response bodies (see openai.h), through jansson. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "openai.h"

static json_t *token_string(const qmap_model *m, int32_t id)
{
    size_t len = 0;
    const char *p = qmap_token_piece(m, id, &len);
    json_t *s = p ? json_stringn(p, len) : NULL;
    return s ? s : json_string("");
}

/* Legacy completions logprobs: parallel lists of tokens, their logprobs and {token: logprob} alternatives. */
static json_t *completion_logprobs(const qmap_model *m, const serve_token_info *t, size_t n)
{
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(tokens, token_string(m, t[i].id));
        json_array_append_new(lps, json_real(t[i].logprob));
        json_t *alt = json_object();
        for (int k = 0; k < t[i].n_top; k++) {
            size_t len = 0;
            const char *p = qmap_token_piece(m, t[i].top_id[k], &len);
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)(len < 255 ? len : 255), p ? p : "");
            json_object_set_new(alt, key, json_real(t[i].top_logprob[k]));
        }
        json_array_append_new(tops, alt);
        json_array_append_new(offs, json_integer((json_int_t)t[i].text_offset));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

static json_t *chat_token(const qmap_model *m, int32_t id, float lp)
{
    json_t *tok = token_string(m, id), *bytes = json_array();
    const char *s = json_string_value(tok);
    for (size_t i = 0; s && s[i]; i++) json_array_append_new(bytes, json_integer((unsigned char)s[i]));
    return json_pack("{s:o, s:f, s:o}", "token", tok, "logprob", (double)lp, "bytes", bytes);
}

/* Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}. */
static json_t *chat_logprobs(const qmap_model *m, const serve_token_info *t, size_t n)
{
    json_t *content = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *e = chat_token(m, t[i].id, t[i].logprob), *top = json_array();
        for (int k = 0; k < t[i].n_top; k++) json_array_append_new(top, chat_token(m, t[i].top_id[k], t[i].top_logprob[k]));
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(content, e);
    }
    return json_pack("{s:o}", "content", content);
}

static json_t *logprobs_of(const serve_response_head *h, const qmap_model *m, const serve_token_info *t, size_t n,
                           bool logprobs)
{
    if (!logprobs) return json_null();
    return h->chat ? chat_logprobs(m, t, n) : completion_logprobs(m, t, n);
}

static json_t *usage(const serve_outcome *o)
{
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)o->n_prompt, "completion_tokens",
                     (json_int_t)o->n_gen, "total_tokens", (json_int_t)(o->n_prompt + o->n_gen));
}

static json_t *head_object(const serve_response_head *h, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", h->id, "object", object, "created", (json_int_t)h->created,
                     "model", h->model);
}

static char *dump(json_t *root)
{
    if (!root) return NULL;
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

char *openai_completion(const serve_response_head *h, const qmap_model *m, const char *text, size_t len,
                        const serve_token_info *toks, size_t n_toks, bool logprobs, const serve_outcome *o)
{
    json_t *root = head_object(h, h->chat ? "chat.completion" : "text_completion");
    json_t *txt = json_stringn(text, len);
    if (!root || !txt) { json_decref(root); json_decref(txt); return NULL; }
    json_t *choice = h->chat ? json_pack("{s:i, s:{s:s, s:o}}", "index", 0, "message", "role", "assistant", "content", txt)
                             : json_pack("{s:i, s:o}", "index", 0, "text", txt);
    json_object_set_new(choice, "logprobs", logprobs_of(h, m, toks, n_toks, logprobs));
    json_object_set_new(choice, "finish_reason", json_string(o->finish_reason ? o->finish_reason : "stop"));
    json_object_set_new(root, "choices", json_pack("[o]", choice));
    json_object_set_new(root, "usage", usage(o));
    return dump(root);
}

char *openai_chunk(const serve_response_head *h, const qmap_model *m, const serve_chunk *c, bool logprobs,
                   bool first)
{
    json_t *root = head_object(h, h->chat ? "chat.completion.chunk" : "text_completion");
    json_t *txt = json_stringn(c->text, c->len);
    if (!root || !txt) { json_decref(root); json_decref(txt); return NULL; }
    json_t *choice;
    if (h->chat) {
        json_t *delta = json_pack("{s:o}", "content", txt);
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        choice = json_pack("{s:i, s:o}", "index", 0, "delta", delta);
    } else {
        choice = json_pack("{s:i, s:o}", "index", 0, "text", txt);
    }
    json_object_set_new(choice, "logprobs", logprobs_of(h, m, c->tokens, c->n_tokens, logprobs));
    json_object_set_new(choice, "finish_reason", json_null());
    json_object_set_new(root, "choices", json_pack("[o]", choice));
    return dump(root);
}

static bool append(char **buf, size_t *len, const char *s)
{
    size_t n = strlen(s);
    char *nb = realloc(*buf, *len + n + 1);
    if (!nb) return false;
    memcpy(nb + *len, s, n + 1);
    *buf = nb;
    *len += n;
    return true;
}

char *openai_stream_end(const serve_response_head *h, const serve_outcome *o, bool include_usage)
{
    json_t *last = head_object(h, h->chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = h->chat ? json_pack("{s:i, s:{}}", "index", 0, "delta") : json_pack("{s:i, s:s}", "index", 0, "text", "");
    json_object_set_new(choice, "logprobs", json_null());
    json_object_set_new(choice, "finish_reason", json_string(o->finish_reason ? o->finish_reason : "stop"));
    json_object_set_new(last, "choices", json_pack("[o]", choice));
    char *a = dump(last), *b = NULL;
    if (include_usage) {
        json_t *u = head_object(h, h->chat ? "chat.completion.chunk" : "text_completion");
        json_object_set_new(u, "choices", json_array());
        json_object_set_new(u, "usage", usage(o));
        b = dump(u);
    }
    char *out = NULL;
    size_t len = 0;
    bool ok = a && (!include_usage || b) && append(&out, &len, "data: ") && append(&out, &len, a) &&
              append(&out, &len, "\n\n") && (!b || (append(&out, &len, "data: ") && append(&out, &len, b) &&
                                                   append(&out, &len, "\n\n"))) &&
              append(&out, &len, "data: [DONE]\n\n");
    free(a);
    free(b);
    if (!ok) { free(out); return NULL; }
    return out;
}

char *openai_models(const char *model, int64_t created, const qmap_model_info *in)
{
    json_t *meta = json_pack("{s:s, s:s, s:s, s:i, s:I, s:I}", "arch", in->arch, "variant", in->variant, "file_type",
                             in->file_type, "n_ctx_train", (int)in->context_length, "n_params", (json_int_t)in->n_params,
                             "size", (json_int_t)in->file_size);
    return dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:o}]}", "object", "list", "data", "id", model, "object", "model",
                          "created", (json_int_t)created, "owned_by", "qmap", "meta", meta));
}

char *openai_metrics(const serve_metrics *mt)
{
    const double tps = mt->gen_seconds > 0 ? (double)mt->gen_tokens / mt->gen_seconds : 0.0;
    char *out = NULL;
    int n = asprintf(&out,
        "# HELP qmap_requests_total Generation requests accepted into the queue.\n"
        "# TYPE qmap_requests_total counter\nqmap_requests_total %llu\n"
        "# HELP qmap_requests_refused_total Generation requests refused because the queue was full or the server stopping.\n"
        "# TYPE qmap_requests_refused_total counter\nqmap_requests_refused_total %llu\n"
        "# HELP qmap_prompt_tokens_total Prompt tokens evaluated.\n"
        "# TYPE qmap_prompt_tokens_total counter\nqmap_prompt_tokens_total %llu\n"
        "# HELP qmap_tokens_generated_total Tokens generated.\n"
        "# TYPE qmap_tokens_generated_total counter\nqmap_tokens_generated_total %llu\n"
        "# HELP qmap_steps_total Batched evaluation steps run.\n"
        "# TYPE qmap_steps_total counter\nqmap_steps_total %llu\n"
        "# HELP qmap_queue_depth Requests waiting for a slot.\n"
        "# TYPE qmap_queue_depth gauge\nqmap_queue_depth %u\n"
        "# HELP qmap_slots_busy Slots holding a request.\n"
        "# TYPE qmap_slots_busy gauge\nqmap_slots_busy %u\n"
        "# HELP qmap_slots_total Slots (--parallel).\n"
        "# TYPE qmap_slots_total gauge\nqmap_slots_total %u\n"
        "# HELP qmap_tokens_per_second Tokens generated per second of the steps that generated.\n"
        "# TYPE qmap_tokens_per_second gauge\nqmap_tokens_per_second %.3f\n",
        (unsigned long long)mt->requests_total, (unsigned long long)mt->requests_refused,
        (unsigned long long)mt->prompt_tokens, (unsigned long long)mt->gen_tokens, (unsigned long long)mt->steps,
        mt->queue_depth, mt->slots_busy, mt->n_slots, tps);
    return n < 0 ? NULL : out;
}

char *openai_classify(const qmap_model *m, const char *model_id, const float *scores, size_t n, uint32_t n_classes)
{
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++) {
        const float *s = scores + i * n_classes;
        uint32_t best = 0;
        json_t *arr = json_array();
        for (uint32_t k = 0; k < n_classes; k++) {
            if (s[k] > s[best]) best = k;
            json_array_append_new(arr, json_real(s[k]));
        }
        size_t name_len = 0;
        const char *name = qmap_model_class_name(m, best, &name_len);
        json_t *label = name ? json_stringn(name, name_len) : NULL;
        json_array_append_new(data, json_pack("{s:I, s:I, s:o, s:o}", "index", (json_int_t)i, "class", (json_int_t)best,
                                              "label", label ? label : json_null(), "scores", arr));
    }
    json_t *root = json_pack("{s:s, s:s, s:o}", "object", "list", "model", model_id, "data", data);
    char *out = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return out;
}

/* The text of target ids: a word-level vocabulary joins with spaces, so the one in front is dropped. */
static json_t *target_text(const qmap_model *m, const int32_t *ids, size_t n)
{
    qmap_detok st;
    qmap_detok_init(&st);
    char *buf = NULL, piece[4096];
    size_t len = 0;
    for (size_t i = 0; i <= n; i++) {
        size_t k = 0;
        if (i < n && qmap_detokenize(m, &st, ids[i], piece, sizeof piece, &k, NULL) != QMAP_OK) continue;
        if (i == n) k = qmap_detok_flush(&st, piece, sizeof piece);
        char *nb = realloc(buf, len + k + 1);
        if (!nb) { free(buf); return NULL; }
        buf = nb;
        memcpy(buf + len, piece, k);
        len += k;
    }
    size_t start = len && buf[0] == ' ' ? 1 : 0;
    json_t *s = json_stringn(buf ? buf + start : "", len - start);
    free(buf);
    return s;
}

char *openai_translate(const qmap_model *m, const char *model_id, const qmap_hypothesis *hyp, size_t n)
{
    json_t *data = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *ids = json_array(), *text = target_text(m, hyp[i].ids, hyp[i].n_ids);
        for (size_t k = 0; k < hyp[i].n_ids; k++) json_array_append_new(ids, json_integer(hyp[i].ids[k]));
        /* a sentence with no finished hypothesis has score -inf, which JSON cannot hold: null */
        bool found = isfinite(hyp[i].score);
        json_array_append_new(data, json_pack("{s:I, s:o, s:o, s:o, s:o}", "index", (json_int_t)i, "text",
                                              text ? text : json_string(""), "ids", ids,
                                              "score", found ? json_real(hyp[i].score) : json_null(),
                                              "log_prob", found ? json_real(hyp[i].log_prob) : json_null()));
    }
    json_t *root = json_pack("{s:s, s:s, s:o}", "object", "list", "model", model_id, "data", data);
    char *out = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    return out;
}
