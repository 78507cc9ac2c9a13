/* translate.c — /v1/translate bodies (see translate.h). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "translate.h"

void serve_translate_request_free(serve_translate_request *r)
{
    for (size_t i = 0; i < r->n; i++) free(r->text[i]);
    free(r->text);
    memset(r, 0, sizeof *r);
}

bool serve_translate_parse(const char *body, size_t len, serve_translate_request *out, serve_error *err)
{
    memset(out, 0, sizeof *out);
    out->beam = 1;
    json_t *root = serve_load_object(body, len, err);
    if (!root) return false;
    json_t *text = json_object_get(root, "text"), *beam = json_object_get(root, "beam");
    json_t *one[1] = { text };
    size_t n = json_is_string(text) ? 1 : json_array_size(text);
    bool ok = true;
    if ((!json_is_string(text) && !json_is_array(text)) || n == 0 || n > SERVE_MAX_SENTENCES)
        ok = serve_fail(err, 400, "invalid_request_error", "invalid_value", "text",
                        "'text' must be a string or a list of 1 to %d strings", SERVE_MAX_SENTENCES);
    if (ok && beam && !json_is_null(beam)) {
        if (!json_is_integer(beam) || json_integer_value(beam) < 1 || json_integer_value(beam) > SERVE_MAX_BEAM)
            ok = serve_fail(err, 400, "invalid_request_error", "invalid_value", "beam", "'beam' must be an integer from 1 to %d",
                            SERVE_MAX_BEAM);
        else
            out->beam = (unsigned)json_integer_value(beam);
    }
    if (ok && !(out->text = calloc(n, sizeof *out->text))) ok = serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; ok && i < n; i++) {
        json_t *s = json_is_string(text) ? one[0] : json_array_get(text, i);
        if (!json_is_string(s) || json_string_length(s) == 0) {
            ok = serve_fail(err, 400, "invalid_request_error", "invalid_value", "text", "text[%zu] must be a non-empty string", i);
            break;
        }
        if (!(out->text[i] = strdup(json_string_value(s)))) ok = serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        out->n = i + 1;
    }
    json_decref(root);
    if (!ok) serve_translate_request_free(out);
    return ok;
}
