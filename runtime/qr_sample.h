/* qr_sample.h — logits -> token id: repetition penalty, greedy or top-k / top-p / min-p sampling with
 * temperature, drawn from a seeded generator of our own (xoshiro256**), so the same seed and the same
 * logits give the same ids on every machine and build.
 *
 * Order (llama.cpp's chain: the temperature shapes only the final draw, so the kept set is the one
 * llama.cpp keeps with the same settings):
 *   1. repetition penalty on every distinct id among the last repeat_last_n accepted ids: a positive
 *      logit is divided by repeat_penalty, a negative one multiplied (once per id, however often it occurs);
 *   2. temp <= 0: argmax (lowest id on ties) — steps 3..6 are skipped;
 *   3. top-k: the k largest logits by a bounded heap over the vocabulary (O(n log k), no full sort when
 *      top_k bounds it), then those k sorted (descending logit, ascending id on ties); without a top-k,
 *      top-p pops ids from a heap of the whole vocabulary only until its prefix is complete;
 *   4. softmax of the candidates' logits (temperature 1);
 *   5. top-p: the smallest prefix whose cumulative probability is >= top_p (at least one);
 *   6. min-p: keep p_i >= min_p · p_max;
 *   7. temperature: the kept candidates reweighted to softmax(logit/temp); draw one.
 * NaN logits count as -inf.
 *
 * Ownership: qr_sampler_new allocates every buffer (a copy of the logits, candidates, probabilities, a
 * mark per id, the history ring); sampling and accepting allocate nothing and only write into them.
 * A sampler is used by one thread at a time. Errors: QM_ERR_INVALID_ARGUMENT naming the bad parameter,
 * QM_ERR_NOMEM.
 */
#ifndef QR_SAMPLE_H
#define QR_SAMPLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"

/* The fields of qmap_sampler_params (include/qmap.h), which api/qmap_sampler.c copies in. */
typedef struct qr_sampler_params {
    float temp;                /* <= 0: greedy */
    int32_t top_k;             /* <= 0 or >= n_vocab: every id */
    float top_p;               /* in (0, 1]; 1: off */
    float min_p;               /* in [0, 1]; 0: off */
    float repeat_penalty;      /* > 0; 1: off */
    uint32_t repeat_last_n;    /* history length (0: off); at most 1<<20 */
    uint64_t seed;
} qr_sampler_params;

typedef struct qr_sampler qr_sampler;

/* llama.cpp's defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1.0, repeat_last_n 64,
 * seed 0 — the values include/qmap.h documents. */
void qr_sampler_params_default(qr_sampler_params *p);

/* A sampler for logits of n_vocab >= 1 entries (n_vocab < 2^31). */
qm_status qr_sampler_new(const qr_sampler_params *p, uint32_t n_vocab, qr_sampler **out, qm_error *err);
/* NULL is allowed. */
void qr_sampler_free(qr_sampler *s);
/* Choose an id from `logits` (n_vocab floats, not modified) and record it in the penalty history.
 * Allocates nothing. */
int32_t qr_sampler_sample(qr_sampler *s, const float *logits);
/* Record an id (a prompt token, or one chosen elsewhere) in the penalty history. Ids outside
 * [0, n_vocab) are ignored. */
void qr_sampler_accept(qr_sampler *s, int32_t id);
/* Forget the history; the random state goes back to the seed's. */
void qr_sampler_reset(qr_sampler *s);

#endif /* QR_SAMPLE_H */
