/* translate.h — POST /v1/translate for an encoder-decoder (seq2seq) container: {"text": [STRING, ...],
 * "beam": K} (a single string is one sentence; K 1 .. SERVE_MAX_BEAM, default 1) -> each sentence's best
 * translation, its target ids and score. Parsing is pure (fuzzed by tests/fuzz/fuzz_request.c); http.c runs
 * the sentences through one qmap_translator per beam size, one request at a time. */
#ifndef QS_TRANSLATE_H
#define QS_TRANSLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "request.h"

#define SERVE_MAX_BEAM 8
#define SERVE_MAX_SENTENCES 64

typedef struct serve_translate_request {
    char **text;               /* NUL-terminated UTF-8 sentences */
    size_t n;
    unsigned beam;
} serve_translate_request;

bool serve_translate_parse(const char *body, size_t len, serve_translate_request *out, serve_error *err);
void serve_translate_request_free(serve_translate_request *r);

#endif /* QS_TRANSLATE_H */
