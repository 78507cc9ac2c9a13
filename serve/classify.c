/* classify.c — /v1/classify bodies in and out (see classify.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classify.h"
#include <jansson.h>

bool serve_classify_parse(const char *body, size_t len, uint32_t input_dim, float input_scale, float input_offset,
                          float **x, size_t *n, serve_error *err)
{
    *x = NULL;
    *n = 0;
    json_t *root = serve_load_object(body, len, err);
    if (!root) return false;
    json_t *rows = json_object_get(root, "inputs"), *px = json_object_get(root, "pixels");
    size_t nr = json_array_size(rows);
    bool ok = true;
    if (!json_is_array(rows) || nr == 0 || nr > SERVE_MAX_CLASSIFY_ROWS)
        ok = serve_fail(err, 400, "invalid_request_error", "invalid_value", "inputs",
                        "'inputs' must be a list of 1 to %d rows of %u numbers", SERVE_MAX_CLASSIFY_ROWS, input_dim);
    if (ok && px && !json_is_boolean(px))
        ok = serve_fail(err, 400, "invalid_request_error", "invalid_value", "pixels", "'pixels' must be true or false");
    bool pixels = json_is_true(px);
    float *out = ok ? malloc(nr * input_dim * sizeof *out) : NULL;
    if (ok && !out) ok = serve_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; ok && i < nr; i++) {
        json_t *row = json_array_get(rows, i);
        if (!json_is_array(row) || json_array_size(row) != input_dim) {
            ok = serve_fail(err, 400, "invalid_request_error", "invalid_value", "inputs",
                            "inputs[%zu] must be a list of %u numbers (the model's input size)", i, input_dim);
            break;
        }
        for (uint32_t k = 0; ok && k < input_dim; k++) {
            json_t *v = json_array_get(row, k);
            double d = json_number_value(v);
            if (!json_is_number(v) || !isfinite(d))
                ok = serve_fail(err, 400, "invalid_request_error", "invalid_value", "inputs", "inputs[%zu][%u] is not a finite number", i, k);
            out[i * input_dim + k] = pixels ? (float)d * input_scale + input_offset : (float)d;
        }
    }
    json_decref(root);
    if (!ok) { free(out); return false; }
    *x = out;
    *n = nr;
    return true;
}
