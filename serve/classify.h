/* classify.h — POST /v1/classify for a classifier (mlp) container: {"inputs": [[f, ...], ...]} (rows of the
 * model's input_dim features; "pixels": true maps raw values as the model was trained, value * input_scale +
 * input_offset) -> each row's class, its name when the container has names, and every class's score (the
 * model's output: logits, or probabilities when it ends in softmax; openai_classify writes it). Parsing is
 * pure (fuzzed by tests/fuzz/fuzz_request.c); http.c runs the rows through one qmap_classifier. */
#ifndef QS_CLASSIFY_H
#define QS_CLASSIFY_H

#include <stdbool.h>
#include <stddef.h>

#include <stdint.h>
#include "request.h"

#define SERVE_MAX_CLASSIFY_ROWS 4096

/* The rows as input_dim floats each, malloc'd in *x (*n rows). False with *err (400) otherwise. */
bool serve_classify_parse(const char *body, size_t len, uint32_t input_dim, float input_scale, float input_offset,
                          float **x, size_t *n, serve_error *err);

#endif /* QS_CLASSIFY_H */
