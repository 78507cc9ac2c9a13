/* template.h — chat messages -> one prompt text, by a named built-in template. The container's stored
 * chat_template (a Jinja text from tokenizer_config.json) is not executed: it is recognised by the markers
 * it writes (as llama.cpp did before it had a Jinja engine) and the matching built-in one renders. */
#ifndef QS_TEMPLATE_H
#define QS_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "request.h"

typedef enum serve_template {
    SERVE_TEMPLATE_CHATML = 0,
    SERVE_TEMPLATE_LLAMA2,
    SERVE_TEMPLATE_LLAMA3,
    SERVE_TEMPLATE_MISTRAL,
    SERVE_TEMPLATE_PHI3,
    SERVE_TEMPLATE_GEMMA,
    SERVE_TEMPLATE_ZEPHYR,
    SERVE_TEMPLATE_COUNT
} serve_template;

/* "chatml", "llama2", ...; NULL for a value outside the enum. */
const char *serve_template_name(serve_template t);
/* The template of a name, or -1. */
int serve_template_by_name(const char *name);
/* The template whose markers the Jinja text shows, or -1 if none does. */
int serve_template_detect(const char *jinja, size_t len);
/* The text that ends an assistant turn in this template ("<|im_end|>", ...): generation stops there even if
 * the tokenizer has no single token for it. Never NULL. */
const char *serve_template_end_of_turn(serve_template t);

/* Render the messages, ending with the opening of the assistant's turn, as a malloc'd NUL-terminated text
 * (*len bytes). The BOS token is not written: the tokenizer adds it. NULL on out of memory. */
char *serve_template_render(serve_template t, const serve_message *msgs, size_t n, size_t *len);

#endif /* QS_TEMPLATE_H */
