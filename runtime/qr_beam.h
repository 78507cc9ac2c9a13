/* qr_beam.h — beam search bookkeeping, independent of the model: which hypotheses continue, with which token,
 * from whose prefix; which have finished; how they rank. The model side (runtime/qr_arch_seq2seq.h) runs
 * the active hypotheses as one batch and reorders its caches by the parents this module hands back.
 *
 * The rule (OpenNMT / CTranslate2 style, stated so an independent implementation gives the same result):
 *   - A hypothesis' score is the sum of its tokens' log-probabilities (log-softmax of the logits).
 *   - Each step, every active hypothesis b extends by every token v: candidate score cum[b] + logp[b][v].
 *     Candidates are taken best first (ties: lower hypothesis index, then lower token id) until `beam`
 *     hypotheses continue; a candidate whose token is EOS met on the way finishes instead (it does not take
 *     a place in the beam).
 *   - Finished hypotheses rank by score / length^length_penalty, length = generated tokens including EOS.
 *   - The search ends when `beam` hypotheses have finished, or after max_steps tokens: hypotheses still
 *     active then finish as they are (length = max_steps, no EOS).
 *   With beam = 1 this is greedy decoding: the arg-max token each step, stopping at the first EOS.
 *
 * Ownership: qr_beam_new allocates everything a search needs; start/step/result allocate nothing. One
 * qr_beam per thread. Token lists handed out point into the qr_beam and stay valid until the next start.
 */
#ifndef QR_BEAM_H
#define QR_BEAM_H

#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"

typedef struct qr_beam qr_beam;

typedef struct qr_beam_params {
    uint32_t beam;            /* hypotheses kept per step, >= 1 */
    uint32_t max_steps;       /* tokens generated at most, >= 1 */
    uint32_t vocab;           /* logits per row */
    int32_t eos;              /* the token that finishes a hypothesis (< vocab), or -1 for none */
    float length_penalty;     /* α >= 0 */
} qr_beam_params;

qm_status qr_beam_new(const qr_beam_params *p, qr_beam **out, qm_error *err);
void qr_beam_free(qr_beam *b);

/* Begin a search: one active hypothesis, empty. */
void qr_beam_start(qr_beam *b);
/* Active hypotheses (rows the next logits must have). */
uint32_t qr_beam_active(const qr_beam *b);
/* The last token of each active hypothesis (the decoder's next input), active entries. */
const int32_t *qr_beam_last_tokens(const qr_beam *b);

/* One step: logits[r * vocab + v] for each active hypothesis r. Afterwards hypothesis i continues
 * parent[i] (i < the new qr_beam_active; the caller reorders its caches so) and its last token is
 * qr_beam_last_tokens()[i]. Returns 1 when the search is over (no step should follow), else 0. The logits
 * are overwritten (log-probabilities). */
int qr_beam_step(qr_beam *b, float *logits, const uint32_t **parent);

/* Finished hypotheses, best first: how many (at most beam + 2·beam), and the i-th's tokens (EOS not
 * included), its length-normalized score and its summed log-probability. */
uint32_t qr_beam_n_finished(const qr_beam *b);
const int32_t *qr_beam_result(const qr_beam *b, uint32_t i, uint32_t *n_tokens, float *score, float *log_prob);

#endif /* QR_BEAM_H */
