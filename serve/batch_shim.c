/* batch_shim.c — qmap_batch over one qmap_session per sequence (see batch_shim.h): each item is its own
 * qmap_eval, so the weights are read once per item, not once per step. Only the scheduler's contract is kept:
 * items are checked before any is evaluated, so a refused call changes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_shim.h"

struct qmap_batch {
    const qmap_model *model;
    qmap_session **sessions;   /* n_seq */
    uint32_t *last_n;          /* tokens of each sequence's last eval: its logits are token last_n - 1 */
    uint32_t n_seq, n_ctx, n_batch, vocab;
};

void qmap_batch_params_default(qmap_batch_params *p)
{
    memset(p, 0, sizeof *p);
    p->kv_type = QMAP_KV_F16;
    p->act = QMAP_ACT_AUTO;
}

static qmap_status fail(qmap_error *err, qmap_status code, const char *msg)
{
    if (err) {
        err->code = code;
        snprintf(err->message, sizeof err->message, "%s", msg);
    }
    return code;
}

void qmap_batch_free(qmap_batch *b)
{
    if (!b) return;
    for (uint32_t i = 0; b->sessions && i < b->n_seq; i++) qmap_session_free(b->sessions[i]);
    free(b->sessions);
    free(b->last_n);
    free(b);
}

qmap_status qmap_batch_new(const qmap_model *m, const qmap_batch_params *p, qmap_batch **out, qmap_error *err)
{
    *out = NULL;
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    if (in.kind != QMAP_KIND_LM) return fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_new: the model is not an LM");
    qmap_batch_params d;
    qmap_batch_params_default(&d);
    if (!p) p = &d;
    qmap_batch *b = calloc(1, sizeof *b);
    if (!b) return fail(err, QMAP_ERR_NOMEM, "qmap_batch_new: out of memory");
    b->model = m;
    b->vocab = in.vocab_size;
    b->n_seq = p->n_seq ? p->n_seq : 1;
    b->n_ctx = p->n_ctx ? p->n_ctx : (in.context_length < 4096 ? in.context_length : 4096);
    b->n_batch = p->n_batch ? p->n_batch : 512;
    b->sessions = calloc(b->n_seq, sizeof *b->sessions);
    b->last_n = calloc(b->n_seq, sizeof *b->last_n);
    if (!b->sessions || !b->last_n) {
        qmap_batch_free(b);
        return fail(err, QMAP_ERR_NOMEM, "qmap_batch_new: out of memory");
    }
    qmap_session_params sp;
    qmap_session_params_default(&sp);
    sp.n_ctx = b->n_ctx;
    sp.n_batch = b->n_batch;
    sp.threads = p->threads;
    sp.kv_type = p->kv_type;
    sp.act = p->act;
    for (uint32_t i = 0; i < b->n_seq; i++) {
        qmap_status st = qmap_session_new(m, &sp, &b->sessions[i], err);
        if (st != QMAP_OK) {
            qmap_batch_free(b);
            return st;
        }
    }
    *out = b;
    return QMAP_OK;
}

static qmap_status check_items(const qmap_batch *b, const qmap_batch_item *items, size_t n_items, qmap_error *err)
{
    size_t total = 0;
    for (size_t i = 0; i < n_items; i++) {
        const qmap_batch_item *it = &items[i];
        if (it->seq >= b->n_seq || it->n == 0 || !it->ids)
            return fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_eval: an item names no valid sequence or no tokens");
        if ((uint64_t)qmap_session_pos(b->sessions[it->seq]) + it->n > b->n_ctx)
            return fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_eval: an item would pass its sequence's context");
        for (uint32_t k = 0; k < it->n; k++)
            if (it->ids[k] < 0 || (uint32_t)it->ids[k] >= b->vocab)
                return fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_eval: a token id is outside the vocabulary");
        for (size_t j = 0; j < i; j++)
            if (items[j].seq == it->seq)
                return fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_eval: a sequence appears twice in one call");
        total += it->n;
    }
    if (total > b->n_batch) return fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_eval: more tokens than n_batch");
    return QMAP_OK;
}

qmap_status qmap_batch_eval(qmap_batch *b, const qmap_batch_item *items, size_t n_items, qmap_error *err)
{
    qmap_status st = check_items(b, items, n_items, err);
    if (st != QMAP_OK) return st;
    for (size_t i = 0; i < n_items; i++) {
        st = qmap_eval(b->sessions[items[i].seq], items[i].ids, items[i].n, err);
        if (st != QMAP_OK) return st;
        b->last_n[items[i].seq] = items[i].n;
    }
    return QMAP_OK;
}

const float *qmap_batch_logits(const qmap_batch *b, uint32_t seq)
{
    if (seq >= b->n_seq || b->last_n[seq] == 0) return NULL;
    return qmap_logits(b->sessions[seq], b->last_n[seq] - 1);
}

uint32_t qmap_batch_pos(const qmap_batch *b, uint32_t seq)
{
    return seq < b->n_seq ? qmap_session_pos(b->sessions[seq]) : 0;
}

void qmap_batch_reset(qmap_batch *b, uint32_t seq)
{
    if (seq >= b->n_seq) return;
    qmap_session_reset(b->sessions[seq]);
    b->last_n[seq] = 0;
}
