/* fuzz_request.c — libFuzzer target for the request handler of qmap serve: a JSON body -> a validated
 * request (serve/request.c), and a chat request's messages -> a prompt through every built-in template
 * (serve/template.c). The same bytes are read as a completions body, a chat body, a /tokenize body, a
 * /detokenize body, a /v1/classify body (serve/classify.c; rows of 4 features) and a /v1/translate body
 * (serve/translate.c). What must hold, for ANY input bytes:
 *   - Nothing crashes, reads out of bounds or leaks (ASan/UBSan/LSan).
 *   - A refusal has status 400 (500 only for out of memory), a type and a non-empty message, and its
 *     error object is valid JSON of the form {"error": {"message", "type", "param", "code"}}.
 *   - An accepted request is within the limits request.h states: 1 <= max_tokens <= the limit or 0 (not
 *     given), temperature 0..2, top_p and min_p 0..1, penalties -2..2, at most SERVE_MAX_STOP stop strings
 *     of 1..SERVE_MAX_STOP_BYTES bytes, top_logprobs 0..SERVE_MAX_LOGPROBS; a completion has a prompt text or
 *     ids, a chat at least one message whose role is system, user or assistant; and every template renders
 *     it into a NUL-terminated text.
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 *
 * Build: make BUILD=… BUILD/fuzz/fuzz_request (libFuzzer), BUILD/fuzz/replay_request (replays
 * tests/fuzz/seeds/request/ under gcc ASan+UBSan without libFuzzer); make fuzz-import runs it bounded.
 */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classify.h"
#include "request.h"
#include "template.h"
#include "translate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void require(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_request: property violated: %s\n", what);
        abort();
    }
}

static void check_error(const serve_error *e)
{
    require(e->status == 400 || e->status == 500, "a refusal is 400 (or 500 out of memory)");
    require(e->type != NULL && e->message[0] != 0, "a refusal has a type and a message");
    char *s = serve_error_json(e);
    require(s != NULL, "the error object is made");
    json_error_t je;
    json_t *root = json_loads(s, 0, &je);
    json_t *inner = json_object_get(root, "error");
    require(json_is_object(inner) && json_is_string(json_object_get(inner, "message")) &&
            json_is_string(json_object_get(inner, "type")) && json_object_get(inner, "param") &&
            json_object_get(inner, "code"), "the error object is {\"error\": {message, type, param, code}}");
    json_decref(root);
    free(s);
}

static void check_request(const serve_request *r)
{
    require(r->max_tokens >= 0 && r->max_tokens <= SERVE_MAX_TOKENS_LIMIT, "max_tokens within limits");
    require(r->temperature >= 0 && r->temperature <= 2, "temperature 0..2");
    require(r->top_p >= 0 && r->top_p <= 1 && r->min_p >= 0 && r->min_p <= 1, "top_p, min_p 0..1");
    require(r->presence_penalty >= -2 && r->presence_penalty <= 2 && r->frequency_penalty >= -2 &&
            r->frequency_penalty <= 2, "penalties -2..2");
    require(r->n_stop <= SERVE_MAX_STOP, "at most SERVE_MAX_STOP stop strings");
    for (size_t i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        require(n >= 1 && n <= SERVE_MAX_STOP_BYTES, "a stop string has 1..SERVE_MAX_STOP_BYTES bytes");
    }
    require(r->top_logprobs >= 0 && r->top_logprobs <= SERVE_MAX_LOGPROBS, "top_logprobs 0..SERVE_MAX_LOGPROBS");
    if (!r->chat) {
        require((r->prompt != NULL) != (r->prompt_ids != NULL), "a completion has a prompt text or ids");
        return;
    }
    require(r->n_messages >= 1, "a chat has messages");
    for (size_t i = 0; i < r->n_messages; i++)
        require(!strcmp(r->messages[i].role, "system") || !strcmp(r->messages[i].role, "user") ||
                !strcmp(r->messages[i].role, "assistant"), "a role is system, user or assistant");
    for (int t = 0; t < SERVE_TEMPLATE_COUNT; t++) {
        size_t len = 0;
        char *s = serve_template_render((serve_template)t, r->messages, r->n_messages, &len);
        require(s != NULL && strlen(s) <= len, "every template renders the messages");
        free(s);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const serve_defaults def = { 0.8f, 0.95f, 0.05f, 1.0f, 40 };
    for (int chat = 0; chat < 2; chat++) {
        serve_request r;
        serve_error e;
        if (serve_request_parse((const char *)data, size, chat, &def, &r, &e)) {
            check_request(&r);
            serve_request_free(&r);
        } else {
            check_error(&e);
        }
    }
    serve_tokenize_request tr;
    serve_error e;
    if (serve_tokenize_parse((const char *)data, size, &tr, &e)) free(tr.content);
    else check_error(&e);
    int32_t *ids;
    size_t n;
    if (serve_detokenize_parse((const char *)data, size, &ids, &n, &e)) free(ids);
    else check_error(&e);
    float *x;
    if (serve_classify_parse((const char *)data, size, 4, 0.5f, 1.0f, &x, &n, &e)) {
        require(n >= 1 && n <= SERVE_MAX_CLASSIFY_ROWS, "a classify body has 1..SERVE_MAX_CLASSIFY_ROWS rows");
        for (size_t i = 0; i < 4 * n; i++) require(isfinite(x[i]), "classify features are finite");
        free(x);
    } else {
        check_error(&e);
    }
    serve_translate_request trq;
    if (serve_translate_parse((const char *)data, size, &trq, &e)) {
        require(trq.n >= 1 && trq.n <= SERVE_MAX_SENTENCES && trq.beam >= 1 && trq.beam <= SERVE_MAX_BEAM,
                "a translate body has 1..SERVE_MAX_SENTENCES sentences and a beam of 1..SERVE_MAX_BEAM");
        for (size_t i = 0; i < trq.n; i++) require(trq.text[i] && trq.text[i][0], "each sentence is non-empty");
        serve_translate_request_free(&trq);
    } else {
        check_error(&e);
    }
    require(serve_template_detect((const char *)data, size) < SERVE_TEMPLATE_COUNT, "detect names a template or none");
    return 0;
}
