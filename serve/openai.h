/* openai.h — the JSON of OpenAI responses: whole completions, stream chunks, the model list, and the
 * Prometheus text of /metrics. Pure formatting: no HTTP, no scheduling. Every function returns a malloc'd
 * NUL-terminated text, or NULL on out of memory. */
#ifndef QS_OPENAI_H
#define QS_OPENAI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qmap.h"
#include "sched.h"

typedef struct serve_response_head {
    const char *id;            /* "cmpl-7" / "chatcmpl-7" */
    int64_t created;           /* Unix seconds */
    const char *model;
    bool chat;
} serve_response_head;

/* The whole response of a finished request: text, its tokens (logprobs when asked) and the outcome. */
char *openai_completion(const serve_response_head *h, const qmap_model *m, const char *text, size_t len,
                        const serve_token_info *toks, size_t n_toks, bool logprobs, const serve_outcome *o);
/* One stream chunk with a piece of text (chat: the first one also carries role "assistant"). */
char *openai_chunk(const serve_response_head *h, const qmap_model *m, const serve_chunk *c, bool logprobs,
                   bool first);
/* The last chunk of a stream, with finish_reason; with usage, the chunk after it (choices []) too, as
 * "data: ...\n\n" lines ready to send, followed by "data: [DONE]\n\n". */
char *openai_stream_end(const serve_response_head *h, const serve_outcome *o, bool include_usage);
/* POST /v1/classify: each row's class, label (NULL without class names) and the n_classes scores. */
char *openai_classify(const qmap_model *m, const char *model_id, const float *scores, size_t n, uint32_t n_classes);
/* POST /v1/translate: each sentence's best hypothesis as text (target vocabulary), ids, score, log_prob. */
char *openai_translate(const qmap_model *m, const char *model_id, const qmap_hypothesis *hyp, size_t n);
char *openai_models(const char *model, int64_t created, const qmap_model_info *in);
char *openai_metrics(const serve_metrics *mt);

#endif /* QS_OPENAI_H */
