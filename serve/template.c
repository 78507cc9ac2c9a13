/* template.c — the built-in chat templates (see template.h). Each renders what the model's own Jinja
 * template renders for system / user / assistant turns with add_generation_prompt, BOS left to the
 * tokenizer (tests/serve/test_templates.py compares them with jinja2 on the published templates). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "template.h"

static const char *const names[SERVE_TEMPLATE_COUNT] = { "chatml", "llama2", "llama3", "mistral", "phi3", "gemma", "zephyr" };
static const char *const end_of_turn[SERVE_TEMPLATE_COUNT] = { "<|im_end|>", "</s>", "<|eot_id|>", "</s>", "<|end|>",
                                                               "<end_of_turn>", "</s>" };

const char *serve_template_name(serve_template t)
{
    return (unsigned)t < SERVE_TEMPLATE_COUNT ? names[t] : NULL;
}

int serve_template_by_name(const char *name)
{
    for (int i = 0; i < SERVE_TEMPLATE_COUNT; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

const char *serve_template_end_of_turn(serve_template t)
{
    return (unsigned)t < SERVE_TEMPLATE_COUNT ? end_of_turn[t] : "";
}

static bool has(const char *s, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= len; i++)
        if (!memcmp(s + i, needle, n)) return true;
    return false;
}

int serve_template_detect(const char *j, size_t len)
{
    if (!j || !len) return -1;
    if (has(j, len, "<|im_start|>")) return SERVE_TEMPLATE_CHATML;
    if (has(j, len, "<|start_header_id|>")) return SERVE_TEMPLATE_LLAMA3;
    if (has(j, len, "<start_of_turn>")) return SERVE_TEMPLATE_GEMMA;
    if (has(j, len, "<|assistant|>") && has(j, len, "<|end|>")) return SERVE_TEMPLATE_PHI3;
    if (has(j, len, "<|assistant|>") || has(j, len, "<|user|>")) return SERVE_TEMPLATE_ZEPHYR;
    if (has(j, len, "[INST]")) return has(j, len, "<<SYS>>") ? SERVE_TEMPLATE_LLAMA2 : SERVE_TEMPLATE_MISTRAL;
    return -1;
}

/* A growing text; `failed` makes every later append a no-op so render checks once at the end. */
typedef struct text_buf { char *s; size_t len, cap; bool failed; } text_buf;

static void put(text_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) { b->failed = true; return; }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void put_all(text_buf *b, int n, ...)
{
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) put(b, va_arg(ap, const char *));
    va_end(ap);
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Append s without its leading and trailing whitespace, as Jinja's trim and Python's strip() give it. */
static void put_trimmed(text_buf *b, const char *s)
{
    size_t n = strlen(s);
    while (n && is_space(*s)) { s++; n--; }
    while (n && is_space(s[n - 1])) n--;
    char *copy = malloc(n + 1);
    if (!copy) { b->failed = true; return; }
    memcpy(copy, s, n);
    copy[n] = 0;
    put(b, copy);
    free(copy);
}

static void render_chatml(text_buf *b, const serve_message *m, size_t n)
{
    for (size_t i = 0; i < n; i++) put_all(b, 5, "<|im_start|>", m[i].role, "\n", m[i].content, "<|im_end|>\n");
    put(b, "<|im_start|>assistant\n");
}

/* Meta's Llama 3 Instruct: every content trimmed. */
static void render_llama3(text_buf *b, const serve_message *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        put_all(b, 3, "<|start_header_id|>", m[i].role, "<|end_header_id|>\n\n");
        put_trimmed(b, m[i].content);
        put(b, "<|eot_id|>");
    }
    put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Meta's Llama 2 chat: "<s>[INST] user [/INST] assistant </s>" per turn (the first <s> is the tokenizer's),
 * contents stripped; a system message opens the first user turn in <<SYS>> markers. */
static void render_llama2(text_buf *b, const serve_message *m, size_t n)
{
    const char *system = NULL;
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(m[i].role, "system")) { system = m[i].content; continue; }
        if (!strcmp(m[i].role, "assistant")) {
            put(b, " ");
            put_trimmed(b, m[i].content);
            put(b, " </s>");
            continue;
        }
        put(b, first ? "[INST] " : "<s>[INST] ");
        first = false;
        text_buf turn = { 0 };
        if (system) put_all(&turn, 3, "<<SYS>>\n", system, "\n<</SYS>>\n\n");
        system = NULL;
        put(&turn, m[i].content);
        if (turn.failed) b->failed = true;
        else put_trimmed(b, turn.s);
        free(turn.s);
        put(b, " [/INST]");
    }
}

/* Mistral Instruct (v0.2): "[INST] user [/INST]assistant</s>" with no system role; a system message opens
 * the next user turn followed by a newline (llama.cpp's choice). */
static void render_mistral(text_buf *b, const serve_message *m, size_t n)
{
    const char *system = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(m[i].role, "system")) { system = m[i].content; continue; }
        if (!strcmp(m[i].role, "assistant")) { put_all(b, 2, m[i].content, "</s>"); continue; }
        put(b, "[INST] ");
        if (system) put_all(b, 2, system, "\n");
        system = NULL;
        put_all(b, 2, m[i].content, " [/INST]");
    }
}

static void render_tagged(text_buf *b, const serve_message *m, size_t n, const char *end)
{
    for (size_t i = 0; i < n; i++) put_all(b, 6, "<|", m[i].role, "|>\n", m[i].content, end, "\n");
    put(b, "<|assistant|>\n");
}

/* gemma: no system role (it opens the first user turn); the assistant is "model". */
static void render_gemma(text_buf *b, const serve_message *m, size_t n)
{
    const char *system = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(m[i].role, "system")) { system = m[i].content; continue; }
        put_all(b, 3, "<start_of_turn>", strcmp(m[i].role, "assistant") ? "user" : "model", "\n");
        if (system) { put_all(b, 2, system, "\n\n"); system = NULL; }
        put_trimmed(b, m[i].content);
        put(b, "<end_of_turn>\n");
    }
    put(b, "<start_of_turn>model\n");
}

char *serve_template_render(serve_template t, const serve_message *m, size_t n, size_t *len)
{
    text_buf b = { 0 };
    put(&b, "");
    switch (t) {
    case SERVE_TEMPLATE_LLAMA2: render_llama2(&b, m, n); break;
    case SERVE_TEMPLATE_LLAMA3: render_llama3(&b, m, n); break;
    case SERVE_TEMPLATE_MISTRAL: render_mistral(&b, m, n); break;
    case SERVE_TEMPLATE_PHI3: render_tagged(&b, m, n, "<|end|>"); break;
    case SERVE_TEMPLATE_GEMMA: render_gemma(&b, m, n); break;
    case SERVE_TEMPLATE_ZEPHYR: render_tagged(&b, m, n, "</s>"); break;
    default: render_chatml(&b, m, n); break;
    }
    if (b.failed) { free(b.s); return NULL; }
    *len = b.len;
    return b.s;
}
