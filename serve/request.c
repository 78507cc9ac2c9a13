/* request.c — OpenAI request bodies -> validated serve_request (see request.h). Every refusal names the field
 * and says what it needs, as the OpenAI API does, with status 400. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "request.h"

/* The length of the valid UTF-8 sequence at s (RFC 3629: no overlong forms, no surrogates, at most
 * U+10FFFF), 0 if none starts there. */
static size_t utf8_sequence(const unsigned char *s)
{
    if (s[0] < 0x80) return 1;
    const size_t n = s[0] >= 0xC2 && s[0] <= 0xDF   ? 2
                     : s[0] >= 0xE0 && s[0] <= 0xEF ? 3
                     : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4
                                                    : 0;
    unsigned char lo = 0x80, hi = 0xBF;   /* the second byte's range */
    if (s[0] == 0xE0) lo = 0xA0;
    if (s[0] == 0xED) hi = 0x9F;
    if (s[0] == 0xF0) lo = 0x90;
    if (s[0] == 0xF4) hi = 0x8F;
    for (size_t i = 1; i < n; i++)
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xBF)) return 0;
    return n;
}

/* Every byte of s that does not belong to a valid UTF-8 sequence becomes '?': an error message quotes the
 * client's bytes (jansson's parse errors, names) and may cut a character in two, and a JSON string (the
 * error object) must be valid UTF-8. */
static void keep_utf8(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        size_t n = utf8_sequence(p);
        if (n) p += n;
        else *p++ = '?';
    }
}

bool serve_fail(serve_error *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    keep_utf8(e->param);
    keep_utf8(e->message);
    return false;
}

char *serve_error_json(const serve_error *e)
{
    json_t *inner = json_pack("{s:s, s:s, s:o, s:o}", "message", e->message, "type", e->type ? e->type : "server_error",
                              "param", e->param[0] ? json_string(e->param) : json_null(),
                              "code", e->code ? json_string(e->code) : json_null());
    if (!inner) return NULL;
    json_t *root = json_pack("{s:o}", "error", inner);
    if (!root) return NULL;
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

static bool bad(serve_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool bad(serve_error *e, const char *param, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return serve_fail(e, 400, "invalid_request_error", "invalid_value", param, "%s", msg);
}

json_t *serve_load_object(const char *body, size_t len, serve_error *err)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        serve_fail(err, 400, "invalid_request_error", "invalid_json", NULL,
                   "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        serve_fail(err, 400, "invalid_request_error", "invalid_json", NULL, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

static char *dup_json_string(const json_t *s, size_t *len)
{
    size_t n = json_string_length(s);
    char *out = malloc(n + 1);
    if (!out) return NULL;
    memcpy(out, json_string_value(s), n);
    out[n] = 0;
    if (len) *len = n;
    return out;
}

/* A number field within [lo, hi]; absent or null keeps *out. */
static bool get_number(json_t *root, const char *key, double lo, double hi, float *out, serve_error *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_number(v)) return bad(err, key, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi) return bad(err, key, "'%s' is %g; it must be between %g and %g", key, d, lo, hi);
    *out = (float)d;
    return true;
}

/* An integer field within [lo, hi]; absent or null keeps *out. */
static bool get_int(json_t *root, const char *key, long lo, long hi, long *out, serve_error *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_integer(v)) return bad(err, key, "'%s' must be an integer", key);
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi) return bad(err, key, "'%s' is %lld; it must be between %ld and %ld", key, (long long)i, lo, hi);
    *out = (long)i;
    return true;
}

static bool get_bool(json_t *root, const char *key, bool *out, serve_error *err)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return true;
    if (!json_is_boolean(v)) return bad(err, key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return true;
}

static bool parse_ids(json_t *arr, const char *key, int32_t **ids, size_t *n_ids, serve_error *err)
{
    size_t n = json_array_size(arr);
    if (n > SERVE_MAX_PROMPT_IDS) return bad(err, key, "'%s' has %zu token ids, more than %u", key, n, SERVE_MAX_PROMPT_IDS);
    int32_t *out = n ? malloc(n * sizeof *out) : NULL;
    if (n && !out) return serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            free(out);
            return bad(err, key, "'%s'[%zu] must be a token id (a non-negative integer)", key, i);
        }
        out[i] = (int32_t)json_integer_value(v);
    }
    *ids = out;
    *n_ids = n;
    return true;
}

/* prompt: a string, a list of one string, or a list of token ids. */
static bool parse_prompt(json_t *root, serve_request *r, serve_error *err)
{
    json_t *p = json_object_get(root, "prompt");
    if (!p) return bad(err, "prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
    if (json_is_string(p)) {
        r->prompt = dup_json_string(p, &r->prompt_len);
        return r->prompt ? true : serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (json_is_array(p) && json_array_size(p) > 0 && json_is_integer(json_array_get(p, 0)))
        return parse_ids(p, "prompt", &r->prompt_ids, &r->n_prompt_ids, err);
    if (json_is_array(p) && json_array_size(p) > 1 && json_is_string(json_array_get(p, 0)))
        return bad(err, "prompt", "'prompt' lists %zu prompts; this server takes one per request", json_array_size(p));
    return bad(err, "prompt", "'prompt' must be a string or a list of token ids");
}

/* A message's content: a string, or a list of {"type": "text", "text": ...} parts, joined. */
static bool message_content(json_t *c, size_t i, char **out, serve_error *err)
{
    char param[48];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (!c || json_is_null(c)) {
        *out = calloc(1, 1);
        return *out ? true : serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (json_is_string(c)) {
        *out = dup_json_string(c, NULL);
        return *out ? true : serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (!json_is_array(c)) return bad(err, param, "'%s' must be a string or a list of text parts", param);
    size_t total = 0, k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") || !json_is_string(text))
            return bad(err, param, "'%s'[%zu] must be {\"type\": \"text\", \"text\": STRING}", param, k);
        total += json_string_length(text);
    }
    char *s = malloc(total + 1);
    if (!s) return serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    size_t at = 0;
    json_array_foreach(c, k, part) {
        json_t *text = json_object_get(part, "text");
        memcpy(s + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    s[at] = 0;
    *out = s;
    return true;
}

static bool parse_messages(json_t *root, serve_request *r, serve_error *err)
{
    json_t *m = json_object_get(root, "messages");
    if (!m) return bad(err, "messages", "'messages' is required");
    if (!json_is_array(m) || json_array_size(m) == 0) return bad(err, "messages", "'messages' must be a non-empty list");
    size_t n = json_array_size(m);
    if (n > SERVE_MAX_MESSAGES) return bad(err, "messages", "'messages' has %zu entries, more than %d", n, SERVE_MAX_MESSAGES);
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages) return serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(m, i);
        char param[48];
        snprintf(param, sizeof param, "messages[%zu].role", i);
        json_t *role = json_object_get(msg, "role");
        if (!json_is_object(msg) || !json_is_string(role))
            return bad(err, param, "'messages[%zu]' must be an object with a string 'role'", i);
        const char *rv = json_string_value(role);
        if (!strcmp(rv, "developer")) rv = "system";
        if (strcmp(rv, "system") && strcmp(rv, "user") && strcmp(rv, "assistant"))
            return bad(err, param, "'%s' is '%.32s'; it must be system, user or assistant", param, rv);
        r->messages[i].role = strdup(rv);
        r->n_messages = i + 1;
        if (!r->messages[i].role) return serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        if (!message_content(json_object_get(msg, "content"), i, &r->messages[i].content, err)) return false;
    }
    return true;
}

static bool parse_stop(json_t *root, serve_request *r, serve_error *err)
{
    json_t *s = json_object_get(root, "stop");
    if (!s || json_is_null(s)) return true;
    json_t *one[1] = { s };
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(s)) {
        n = json_array_size(s);
        if (n > SERVE_MAX_STOP) return bad(err, "stop", "'stop' lists %zu strings; at most %d", n, SERVE_MAX_STOP);
        items = NULL;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = items ? items[i] : json_array_get(s, i);
        if (!json_is_string(v)) return bad(err, "stop", "'stop' must be a string or a list of strings");
        size_t len = json_string_length(v);
        if (len == 0 || len > SERVE_MAX_STOP_BYTES)
            return bad(err, "stop", "each 'stop' string must have 1 to %d bytes", SERVE_MAX_STOP_BYTES);
        r->stop[r->n_stop] = dup_json_string(v, NULL);
        if (!r->stop[r->n_stop]) return serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        r->n_stop++;
    }
    return true;
}

static bool parse_logprobs(json_t *root, serve_request *r, serve_error *err)
{
    json_t *lp = json_object_get(root, "logprobs");
    long top = 0;
    if (r->chat) {
        if (!get_bool(root, "logprobs", &r->logprobs, err)) return false;
        if (!get_int(root, "top_logprobs", 0, SERVE_MAX_LOGPROBS, &top, err)) return false;
        if (top > 0 && !r->logprobs) return bad(err, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    } else if (lp && !json_is_null(lp)) {
        if (!get_int(root, "logprobs", 0, SERVE_MAX_LOGPROBS, &top, err)) return false;
        r->logprobs = true;
    }
    r->top_logprobs = (int)top;
    return true;
}

static bool parse_sampling(json_t *root, serve_request *r, serve_error *err)
{
    long top_k = r->top_k, n = 1, seed = 0;
    if (!get_number(root, "temperature", 0, 2, &r->temperature, err)) return false;
    if (!get_number(root, "top_p", 0, 1, &r->top_p, err)) return false;
    if (!get_number(root, "min_p", 0, 1, &r->min_p, err)) return false;
    if (!get_number(root, "repeat_penalty", 0.01, 100, &r->repeat_penalty, err)) return false;
    if (!get_number(root, "presence_penalty", -2, 2, &r->presence_penalty, err)) return false;
    if (!get_number(root, "frequency_penalty", -2, 2, &r->frequency_penalty, err)) return false;
    if (!get_int(root, "top_k", 0, 1 << 24, &top_k, err)) return false;
    r->top_k = (int32_t)top_k;
    if (!get_int(root, "n", 1, 1 << 20, &n, err)) return false;
    if (n != 1) return bad(err, "n", "'n' is %ld; this server returns one choice per request, so 'n' must be 1", n);
    json_t *sv = json_object_get(root, "seed");
    if (sv && !json_is_null(sv)) {
        if (!json_is_integer(sv)) return bad(err, "seed", "'seed' must be an integer");
        seed = (long)json_integer_value(sv);
        r->has_seed = true;
        r->seed = (uint64_t)seed;
    }
    return true;
}

static bool parse_limits(json_t *root, serve_request *r, serve_error *err)
{
    const char *key = json_object_get(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (!get_int(root, key, 1, SERVE_MAX_TOKENS_LIMIT, &r->max_tokens, err)) return false;
    if (!get_bool(root, "stream", &r->stream, err)) return false;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return bad(err, "stream_options", "'stream_options' must be an object");
        if (!get_bool(so, "include_usage", &r->include_usage, err)) return false;
    }
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model) && !json_is_string(model)) return bad(err, "model", "'model' must be a string");
    return true;
}

void serve_request_free(serve_request *r)
{
    free(r->prompt);
    free(r->prompt_ids);
    for (size_t i = 0; i < r->n_messages; i++) {
        free(r->messages[i].role);
        free(r->messages[i].content);
    }
    free(r->messages);
    for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

bool serve_request_parse(const char *body, size_t len, bool chat, const serve_defaults *def, serve_request *out,
                         serve_error *err)
{
    memset(out, 0, sizeof *out);
    out->chat = chat;
    out->temperature = def->temperature;
    out->top_p = def->top_p;
    out->min_p = def->min_p;
    out->repeat_penalty = def->repeat_penalty;
    out->top_k = def->top_k;
    json_t *root = serve_load_object(body, len, err);
    if (!root) return false;
    bool ok = (chat ? parse_messages(root, out, err) : parse_prompt(root, out, err)) && parse_sampling(root, out, err) &&
              parse_limits(root, out, err) && parse_stop(root, out, err) && parse_logprobs(root, out, err);
    json_decref(root);
    if (!ok) serve_request_free(out);
    return ok;
}

bool serve_tokenize_parse(const char *body, size_t len, serve_tokenize_request *out, serve_error *err)
{
    memset(out, 0, sizeof *out);
    out->add_special = true;
    json_t *root = serve_load_object(body, len, err);
    if (!root) return false;
    json_t *c = json_object_get(root, "content");
    bool ok = json_is_string(c) ? true : bad(err, "content", "'content' must be a string");
    ok = ok && get_bool(root, "add_special", &out->add_special, err);
    if (ok && !(out->content = dup_json_string(c, &out->len))) ok = serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    json_decref(root);
    return ok;
}

bool serve_detokenize_parse(const char *body, size_t len, int32_t **ids, size_t *n_ids, serve_error *err)
{
    *ids = NULL;
    *n_ids = 0;
    json_t *root = serve_load_object(body, len, err);
    if (!root) return false;
    json_t *t = json_object_get(root, "tokens");
    bool ok = json_is_array(t) ? parse_ids(t, "tokens", ids, n_ids, err) : bad(err, "tokens", "'tokens' must be a list of token ids");
    json_decref(root);
    return ok;
}
