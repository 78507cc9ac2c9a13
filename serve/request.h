/* request.h — an OpenAI request body (JSON bytes) -> a validated request, or an OpenAI error object with its
 * HTTP status. No HTTP, no model: a body is judged on its own (the prompt's length against the context is
 * the scheduler's check, once it is tokenized), so tests/fuzz/fuzz_request.c can drive it with any bytes.
 *
 * Fields (OpenAI's completions and chat completions, and llama.cpp's extensions): prompt (string, list of
 * one string, or list of token ids), messages, max_tokens / max_completion_tokens, temperature, top_p,
 * top_k, min_p, repeat_penalty, presence_penalty, frequency_penalty, seed, stop (string or list of up to
 * SERVE_MAX_STOP), stream, stream_options.include_usage, n (1 only), logprobs / top_logprobs (up to
 * SERVE_MAX_LOGPROBS); model and user are accepted and ignored, as are fields it does not know.
 */
#ifndef QS_REQUEST_H
#define QS_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SERVE_MAX_STOP 4
#define SERVE_MAX_STOP_BYTES 256
#define SERVE_MAX_LOGPROBS 5
#define SERVE_MAX_TOKENS_LIMIT (1L << 20)   /* above this max_tokens is refused as absurd */
#define SERVE_MAX_MESSAGES 1024
#define SERVE_MAX_PROMPT_IDS (1u << 20)

/* An OpenAI error: {"error": {"message", "type", "param", "code"}} sent with `status`. */
typedef struct serve_error {
    int status;                /* HTTP status: 400, 401, 404, 413, 503, 500 */
    const char *type;          /* "invalid_request_error", "authentication_error", "server_error", ... */
    const char *code;          /* short machine code ("invalid_json", "invalid_value", ...) or NULL */
    char param[64];            /* the field at fault, or "" */
    char message[512];
} serve_error;

/* Fill *e (message printf-style); returns false so a parser can `return serve_fail(...)`. */
bool serve_fail(serve_error *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The error as a NUL-terminated JSON text (malloc'd; NULL on out of memory). */
char *serve_error_json(const serve_error *e);

/* A request body parsed as one JSON object (jansson's json_t, the caller's to json_decref), or NULL with
 * *err a 400 invalid_json: not JSON (where it breaks), or JSON but not an object. jansson refuses invalid
 * UTF-8, NUL inside strings and (here) a key given twice. Every endpoint reads its body through this. */
struct json_t *serve_load_object(const char *body, size_t len, serve_error *err);

typedef struct serve_message {
    char *role;                /* "system", "user", "assistant" ("developer" is read as "system") */
    char *content;             /* UTF-8, NUL-terminated (a list of text parts is joined) */
} serve_message;

typedef struct serve_request {
    bool chat;                 /* /v1/chat/completions (messages) rather than /v1/completions (prompt) */
    char *prompt;              /* completions: the prompt text, or NULL when given as ids */
    size_t prompt_len;
    int32_t *prompt_ids;       /* completions: the prompt as token ids (checked against the vocabulary later) */
    size_t n_prompt_ids;
    serve_message *messages;   /* chat */
    size_t n_messages;
    long max_tokens;           /* 0 = not given: until the end of sequence or the context */
    float temperature, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    int32_t top_k;
    bool has_seed;
    uint64_t seed;
    char *stop[SERVE_MAX_STOP];
    size_t n_stop;
    bool stream, include_usage;
    bool logprobs;             /* report each sampled token's log-probability */
    int top_logprobs;          /* and this many most likely alternatives, 0 .. SERVE_MAX_LOGPROBS (completions:
                                * "logprobs": N; chat: "logprobs": true, "top_logprobs": N) */
} serve_request;

/* Defaults for the fields a body may leave out: the sampling ones are qmap's (llama.cpp's) defaults, which
 * the caller passes in so that this module needs no model or library. */
typedef struct serve_defaults {
    float temperature, top_p, min_p, repeat_penalty;
    int32_t top_k;
} serve_defaults;

/* Parse and validate `len` bytes of JSON. On success fills *out (free it with serve_request_free) and
 * returns true; otherwise *out holds nothing to free and *err says why (status 400). */
bool serve_request_parse(const char *body, size_t len, bool chat, const serve_defaults *def, serve_request *out,
                         serve_error *err);
void serve_request_free(serve_request *r);

/* POST /tokenize {"content": TEXT, "add_special": BOOL (default true)} */
typedef struct serve_tokenize_request { char *content; size_t len; bool add_special; } serve_tokenize_request;
bool serve_tokenize_parse(const char *body, size_t len, serve_tokenize_request *out, serve_error *err);
/* POST /detokenize {"tokens": [ID, ...]}; *ids malloc'd (NULL when empty) */
bool serve_detokenize_parse(const char *body, size_t len, int32_t **ids, size_t *n_ids, serve_error *err);

#endif /* QS_REQUEST_H */
