/* qmap_batch.c — several sequences of a decoder LM in one forward pass (include/qmap.h, batches).
 *
 * A batch is a qr_lm_state with n_seq KV slots and row-invariant products (runtime/qr_model.h): each call
 * turns its items into one qr_lm_rows (a span per item, the ids packed one after another) and runs the
 * family's forward pass once; the logits of each item's last row are copied to its sequence's own row,
 * where they stay until that sequence is evaluated again or reset. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "qa_model.h"

/* Above this many slots a batch is a misuse (each slot is a whole KV cache), not a workload. */
#define QA_BATCH_MAX_SEQ 4096u

struct qmap_batch {
    const qmap_model *m;
    qr_lm_state *st;           /* n_seq KV slots, n_batch rows, n_seq rows of logits */
    uint32_t n_seq;
    uint32_t *pos;             /* [n_seq] positions in each slot's cache */
    bool *have_logits;         /* [n_seq] */
    float *logits;             /* [n_seq][vocab] each sequence's last logits */
    int32_t *ids;              /* [n_batch] the rows' ids of one call, packed */
    qr_lm_span *spans;         /* [n_seq] the spans of one call */
    uint64_t *seen;            /* [n_seq] the call that last named each slot (duplicate check) */
    uint64_t calls;
};

void qmap_batch_params_default(qmap_batch_params *p)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->kv_type = QMAP_KV_F16;
    p->act = QMAP_ACT_AUTO;
}

/* The runtime's act for a batch: the session's modes, except that AUTO and PRECISE mean two int8 terms at
 * every row count (their session forms change kernels with the row count); AUTO's products of normed rows
 * take one term (one_term_prompts), at every row count too. */
static bool batch_act(qmap_act_mode a, qr_act *out)
{
    if (a == QMAP_ACT_AUTO || a == QMAP_ACT_PRECISE) {
        *out = QR_ACT_INT8X2;
        return true;
    }
    return qa_act_of(a, out);
}

/* Check p against the model and fill the runtime's parameters. */
static qmap_status batch_state_params(const qmap_model *m, const qmap_batch_params *p, qr_lm_state_params *sp,
                                      qmap_error *err)
{
    const qr_lm_hparams *hp = &m->hp;
    const uint32_t n_seq = p->n_seq ? p->n_seq : 1;
    const uint32_t n_ctx = p->n_ctx ? p->n_ctx : (hp->ctx < 4096 ? hp->ctx : 4096);
    if (n_seq > QA_BATCH_MAX_SEQ)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_new: n_seq %u is above the cap of %u", n_seq,
                       QA_BATCH_MAX_SEQ);
    qmap_status st = qa_check_lm_params(m, "qmap_batch_new", n_ctx, p->kv_type, p->threads, err);
    if (st != QMAP_OK) return st;
    qr_act act;
    if (!batch_act(p->act, &act))
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_new: unknown act mode %d", (int)p->act);
    *sp = (qr_lm_state_params){
        .n_ctx = n_ctx,
        .n_batch = p->n_batch ? p->n_batch : 512,
        .n_seq = n_seq,
        .row_invariant = true,
        .threads = p->threads ? p->threads : omp_get_max_threads(),
        .act = act,
        .one_term_prompts = p->act == QMAP_ACT_AUTO,
        .kv_type = p->kv_type == QMAP_KV_F32 ? QR_KV_F32 : QR_KV_F16,
        .logits_all = false,
    };
    return QMAP_OK;
}

qmap_status qmap_batch_new(const qmap_model *m, const qmap_batch_params *p, qmap_batch **out, qmap_error *err)
{
    qmap_batch_params defaults;
    if (!p) {
        qmap_batch_params_default(&defaults);
        p = &defaults;
    }
    if (!out) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_new: out is NULL");
    *out = NULL;
    if (!m) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_new: model is NULL");
    if (!m->lm)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT,
                       "%s: a %s container is not a language model; a batch runs gpt2, gpt_neo and llama models",
                       m->info.path, m->arch_name);
    qr_lm_state_params sp;
    qmap_status st = batch_state_params(m, p, &sp, err);
    if (st != QMAP_OK) return st;

    qmap_batch *b = calloc(1, sizeof *b);
    if (!b) return qa_fail(err, QMAP_ERR_NOMEM, "%s: out of memory", m->info.path);
    b->m = m;
    b->n_seq = sp.n_seq;
    b->pos = calloc(sp.n_seq, sizeof *b->pos);
    b->have_logits = calloc(sp.n_seq, sizeof *b->have_logits);
    b->logits = calloc((size_t)sp.n_seq * m->hp.vocab, sizeof *b->logits);
    b->ids = calloc(sp.n_batch, sizeof *b->ids);
    b->spans = calloc(sp.n_seq, sizeof *b->spans);
    b->seen = calloc(sp.n_seq, sizeof *b->seen);
    if (!b->pos || !b->have_logits || !b->logits || !b->ids || !b->spans || !b->seen) {
        qmap_batch_free(b);
        return qa_fail(err, QMAP_ERR_NOMEM, "%s: out of memory for a batch of %u sequences", m->info.path, sp.n_seq);
    }
    qm_error e;
    qm_error_clear(&e);
    if (qr_lm_state_new(&m->hp, m->mats, m->n_mats, &sp, &b->st, &e) != QM_OK) {
        qmap_batch_free(b);
        return qa_error_export(err, &e);
    }
    *out = b;
    return QMAP_OK;
}

void qmap_batch_free(qmap_batch *b)
{
    if (!b) return;
    qr_lm_state_free(b->st);
    free(b->pos);
    free(b->have_logits);
    free(b->logits);
    free(b->ids);
    free(b->spans);
    free(b->seen);
    free(b);
}

/* Item i against the batch: a free slot of this call, ids in the vocabulary, room in the slot's cache. */
static qmap_status check_item(qmap_batch *b, const qmap_batch_item *it, size_t i, qmap_error *err)
{
    const char *path = b->m->info.path;
    if (it->seq >= b->n_seq)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_eval: item %zu: seq %u is not below n_seq %u", i,
                       it->seq, b->n_seq);
    if (b->seen[it->seq] == b->calls)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_eval: item %zu: seq %u has an item already", i,
                       it->seq);
    b->seen[it->seq] = b->calls;
    if (it->n == 0 || !it->ids)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_eval: item %zu (seq %u) has no tokens", i, it->seq);
    for (uint32_t j = 0; j < it->n; j++)
        if (it->ids[j] < 0 || (uint32_t)it->ids[j] >= b->m->hp.vocab)
            return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT,
                           "%s: item %zu (seq %u): token id %d (at %u) is outside the vocabulary of %u", path, i,
                           it->seq, it->ids[j], j, b->m->hp.vocab);
    if (it->n > b->st->n_ctx - b->pos[it->seq])
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT,
                       "%s: item %zu (seq %u): %u tokens at position %u pass the context of %u positions", path, i,
                       it->seq, it->n, b->pos[it->seq], b->st->n_ctx);
    return QMAP_OK;
}

/* Every item checked and the call's rows laid out (ids packed, a span per item), nothing else touched. */
static qmap_status layout_rows(qmap_batch *b, const qmap_batch_item *items, size_t n_items, qr_lm_rows *r,
                               qmap_error *err)
{
    if (n_items == 0 || n_items > b->n_seq)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_eval: %zu items for a batch of %u sequences",
                       n_items, b->n_seq);
    size_t total = 0;
    for (size_t i = 0; i < n_items; i++) total += items[i].n;   /* <= n_seq * 2^32: no wrap in 64 bits */
    if (total > b->st->n_batch)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_eval: %zu tokens in one call; n_batch is %u",
                       total, b->st->n_batch);
    b->calls++;
    size_t row = 0;
    for (size_t i = 0; i < n_items; i++) {
        const qmap_batch_item *it = &items[i];
        qmap_status st = check_item(b, it, i, err);
        if (st != QMAP_OK) return st;
        memcpy(b->ids + row, it->ids, (size_t)it->n * sizeof *it->ids);
        b->spans[i] = (qr_lm_span){ .seq = it->seq, .pos0 = b->pos[it->seq], .row0 = row, .n = it->n };
        row += it->n;
    }
    *r = (qr_lm_rows){ .ids = b->ids, .n = row, .spans = b->spans, .n_spans = n_items, .all_logits = false };
    return QMAP_OK;
}

qmap_status qmap_batch_eval(qmap_batch *b, const qmap_batch_item *items, size_t n_items, qmap_error *err)
{
    if (!b || (!items && n_items)) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_batch_eval: NULL argument");
    const qmap_model *m = b->m;
    qr_lm_rows rows;
    qmap_status vst = layout_rows(b, items, n_items, &rows, err);
    if (vst != QMAP_OK) return vst;
    qm_status st = m->lm->forward(m->weights, b->st, &rows);
    if (st != QM_OK) {
        qm_error e;
        qm_error_clear(&e);
        qm_fail(&e, st, m->info.path, NULL, QM_NO_OFFSET, "evaluation of a batch of %zu sequences failed", n_items);
        return qa_error_export(err, &e);
    }
    qr_lm_count_attention(b->st, &rows);
    const size_t vocab = m->hp.vocab;
    for (size_t i = 0; i < n_items; i++) {
        const uint32_t seq = items[i].seq;
        memcpy(b->logits + seq * vocab, b->st->logits + i * vocab, vocab * sizeof(float));
        b->have_logits[seq] = true;
        b->pos[seq] += items[i].n;
    }
    return QMAP_OK;
}

const float *qmap_batch_logits(const qmap_batch *b, uint32_t seq)
{
    if (!b || seq >= b->n_seq || !b->have_logits[seq]) return NULL;
    return b->logits + (size_t)seq * b->m->hp.vocab;
}

uint32_t qmap_batch_pos(const qmap_batch *b, uint32_t seq) { return b && seq < b->n_seq ? b->pos[seq] : 0; }

void qmap_batch_reset(qmap_batch *b, uint32_t seq)
{
    if (!b || seq >= b->n_seq) return;
    b->pos[seq] = 0;
    b->have_logits[seq] = false;
}

uint32_t qmap_batch_n_seq(const qmap_batch *b) { return b ? b->n_seq : 0; }
