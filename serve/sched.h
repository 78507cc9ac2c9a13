/* sched.h — continuous batching: requests wait in a bounded queue for one of n_slots sequences of a
 * qmap_batch; one scheduler thread runs the steps. Each step is one qmap_batch_eval over every busy slot:
 * one decode row per generating sequence plus a chunk of a waiting prompt (chunked prefill, so the others'
 * streams keep flowing while a long prompt is read). After the step each generating slot samples with its own
 * seeded qmap_sampler, detokenizes (UTF-8 never split), checks its stop strings, max_tokens and the context,
 * and publishes the new text as one piece. A job released by its client (gone) frees its slot at the start
 * of the next step.
 *
 * Threads: the HTTP threads call submit / next / release; only the scheduler thread touches the batch and
 * the samplers. One mutex guards the queue, the slots' job pointers and every job's published output.
 */
#ifndef QS_SCHED_H
#define QS_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qmap.h"
#include "request.h"

typedef struct serve_sched serve_sched;
typedef struct serve_job serve_job;

typedef struct serve_sched_config {
    uint32_t n_slots;          /* sequences decoded together (--parallel) */
    uint32_t n_ctx;            /* positions per sequence (-c) */
    uint32_t step_tokens;      /* most tokens one step evaluates (decode rows + a prompt chunk) */
    uint32_t max_queue;        /* requests waiting beyond the slots; more get 503 */
    int threads;
} serve_sched_config;

/* What one request asks of the generation (copied at submit). */
typedef struct serve_gen_params {
    qmap_sampler_params sampling;
    float presence_penalty, frequency_penalty;
    long max_tokens;                        /* 0: until end of sequence or the context */
    const char *stop[SERVE_MAX_STOP + 1];   /* the request's, plus the chat template's end of turn */
    size_t n_stop;
    bool logprobs;
    int top_logprobs;
} serve_gen_params;

typedef struct serve_token_info {
    int32_t id;
    uint32_t text_offset;                   /* where the token's text starts in the generated text */
    float logprob;                          /* log-softmax of the model's logits (before any sampling change) */
    int n_top;
    int32_t top_id[SERVE_MAX_LOGPROBS];
    float top_logprob[SERVE_MAX_LOGPROBS];
} serve_token_info;

/* One published piece: text new since the previous piece, and the tokens that made it. Owned by the caller
 * after serve_job_next (free with serve_chunk_free). */
typedef struct serve_chunk {
    char *text;
    size_t len;
    serve_token_info *tokens;
    size_t n_tokens;
} serve_chunk;
void serve_chunk_free(serve_chunk *c);

typedef struct serve_outcome {
    const char *finish_reason;              /* "stop" or "length"; NULL if the job failed */
    size_t n_prompt, n_gen;
    serve_error error;                      /* status 0 unless it failed */
} serve_outcome;

typedef struct serve_metrics {
    uint64_t requests_total, requests_refused, prompt_tokens, gen_tokens, steps;
    uint32_t queue_depth, slots_busy, n_slots;
    double gen_seconds;                     /* wall time of the steps that generated tokens */
} serve_metrics;

/* Make the batch and start the scheduler thread. */
qmap_status serve_sched_new(const qmap_model *m, const serve_sched_config *cfg, serve_sched **out, qmap_error *err);
/* Stop taking requests, let the queued and running ones finish, stop the thread, free everything. Every
 * job must have been released. */
void serve_sched_free(serve_sched *s);
/* Refuse new requests from now on (503) and return once nothing is queued or running. */
void serve_sched_drain(serve_sched *s);

/* Queue a request for `n` prompt ids (copied). NULL with *err set: 400 when the prompt leaves no room in
 * the context (both lengths named), 503 when the queue is full or the server is stopping. */
serve_job *serve_sched_submit(serve_sched *s, const int32_t *prompt, size_t n, const serve_gen_params *gp,
                              serve_error *err);

typedef enum serve_next { SERVE_NEXT_PIECE, SERVE_NEXT_DONE, SERVE_NEXT_TIMEOUT } serve_next;
/* The job's next piece (SERVE_NEXT_PIECE, *out filled), or SERVE_NEXT_DONE once every piece has been taken
 * and the job has ended, or SERVE_NEXT_TIMEOUT after timeout_ms without either. One reader per job. */
serve_next serve_job_next(serve_sched *s, serve_job *j, int timeout_ms, serve_chunk *out);
/* How the job ended; valid after SERVE_NEXT_DONE. */
void serve_job_outcome(serve_sched *s, const serve_job *j, serve_outcome *out);
/* The caller is done with the job: a running one is cancelled (its slot freed within one step). */
void serve_job_release(serve_sched *s, serve_job *j);

void serve_sched_get_metrics(serve_sched *s, serve_metrics *out);

#endif /* QS_SCHED_H */
