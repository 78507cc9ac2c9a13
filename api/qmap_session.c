/* qmap_session.c — sessions of a decoder LM: every buffer sized at creation, tokens in, logits out. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "qa_model.h"

struct qmap_session {
    const qmap_model *m;
    qr_lm_state *st;
    uint32_t pos;              /* positions in the cache */
    bool logits_all;
    size_t last_n;             /* tokens of the last qmap_eval */
    size_t last_chunk_start;   /* index (within the last eval) of the first token of its last chunk */
    bool have_logits;
};

void qmap_session_params_default(qmap_session_params *p)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->n_batch = 512;
    p->kv_type = QMAP_KV_F16;
    p->act = QMAP_ACT_AUTO;
}

qmap_status qa_check_lm_params(const qmap_model *m, const char *fn, uint32_t n_ctx, qmap_kv_type kv_type,
                               int threads, qmap_error *err)
{
    const char *path = m->info.path;
    if (m->hp.learned_positions && n_ctx > m->hp.ctx)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT,
                       "%s: %s has learned positions for %u tokens; a context of %u is more than it can run", path,
                       m->arch_name, m->hp.ctx, n_ctx);
    if (n_ctx > (1u << 24))
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "%s: context %u is above the cap of 2^24", path, n_ctx);
    if (kv_type != QMAP_KV_F16 && kv_type != QMAP_KV_F32)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "%s: unknown kv_type %d", fn, (int)kv_type);
    if (threads < 0) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "%s: threads %d is negative", fn, threads);
    return QMAP_OK;
}

qmap_status qmap_session_new(const qmap_model *m, const qmap_session_params *params, qmap_session **out,
                             qmap_error *err)
{
    qmap_session_params defaults;
    if (!params) {
        qmap_session_params_default(&defaults);
        params = &defaults;
    }
    if (!out) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_session_new: out is NULL");
    *out = NULL;
    if (!m) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_session_new: model is NULL");
    const char *path = m->info.path;
    if (!m->lm)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT,
                       "%s: a %s container is not a language model; a session runs gpt2, gpt_neo and llama models",
                       path, m->arch_name);
    const qr_lm_hparams *hp = &m->hp;
    uint32_t n_ctx = params->n_ctx ? params->n_ctx : hp->ctx < QMAP_DEFAULT_N_CTX ? hp->ctx : QMAP_DEFAULT_N_CTX;
    qmap_status st = qa_check_lm_params(m, "qmap_session_new", n_ctx, params->kv_type, params->threads, err);
    if (st != QMAP_OK) return st;
    uint32_t n_batch = params->n_batch ? params->n_batch : 512;
    if (n_batch > n_ctx) n_batch = n_ctx;
    qr_act act;
    if (!qa_act_of(params->act, &act))
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_session_new: unknown act mode %d", (int)params->act);

    qmap_session *s = calloc(1, sizeof *s);
    if (!s) return qa_fail(err, QMAP_ERR_NOMEM, "%s: out of memory", path);
    s->m = m;
    s->logits_all = params->logits_all;
    qr_lm_state_params sp = {
        .n_ctx = n_ctx,
        .n_batch = n_batch,
        .threads = params->threads ? params->threads : omp_get_max_threads(),
        /* a batch of one's bits (qmap_batch.c): `qmap run` and `qmap serve` give the same tokens */
        .row_invariant = params->batch_invariant, /* int8 products have a batch's bits without it */
        .act = params->act == QMAP_ACT_AUTO || params->act == QMAP_ACT_PRECISE ? QR_ACT_INT8X2 : act,
        .one_term_prompts = params->act == QMAP_ACT_AUTO,
        .kv_type = params->kv_type == QMAP_KV_F32 ? QR_KV_F32 : QR_KV_F16,
        .logits_all = params->logits_all,
    };
    qm_error e;
    qm_error_clear(&e);
    if (qr_lm_state_new(hp, m->mats, m->n_mats, &sp, &s->st, &e) != QM_OK) {
        free(s);
        return qa_error_export(err, &e);
    }
    *out = s;
    return QMAP_OK;
}

void qmap_session_free(qmap_session *s)
{
    if (!s) return;
    qr_lm_state_free(s->st);
    free(s);
}

qmap_status qmap_eval(qmap_session *s, const int32_t *ids, size_t n, qmap_error *err)
{
    if (!s || (!ids && n)) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_eval: NULL argument");
    if (n == 0) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_eval: no tokens");
    const qmap_model *m = s->m;
    const char *path = m->info.path;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= m->hp.vocab)
            return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "%s: token id %d (at %zu) is outside the vocabulary of %u",
                           path, ids[i], i, m->hp.vocab);
    if (n > s->st->n_ctx - s->pos)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT,
                       "%s: %zu tokens at position %u pass the context of %u positions", path, n, s->pos,
                       s->st->n_ctx);

    size_t nb = s->st->n_batch;
    s->have_logits = false;
    for (size_t off = 0; off < n; off += nb) {
        size_t c = n - off < nb ? n - off : nb;
        qm_error e;
        qm_error_clear(&e);
        const qr_lm_span span = { .seq = 0, .pos0 = s->pos, .row0 = 0, .n = c };
        const qr_lm_rows rows = { .ids = ids + off, .n = c, .spans = &span, .n_spans = 1, .all_logits = s->logits_all };
        qm_status st = m->lm->forward(m->weights, s->st, &rows);
        if (st != QM_OK) {
            qm_fail(&e, st, path, NULL, QM_NO_OFFSET, "evaluation failed at position %u", s->pos);
            return qa_error_export(err, &e);
        }
        qr_lm_count_attention(s->st, &rows);
        s->pos += (uint32_t)c;
        s->last_chunk_start = off;
    }
    s->last_n = n;
    s->have_logits = true;
    return QMAP_OK;
}

const float *qmap_logits(const qmap_session *s, size_t i)
{
    if (!s || !s->have_logits || i >= s->last_n) return NULL;
    size_t vocab = s->m->hp.vocab;
    if (s->logits_all) {
        if (i < s->last_chunk_start) return NULL;
        return s->st->logits + (i - s->last_chunk_start) * vocab;
    }
    return i == s->last_n - 1 ? s->st->logits : NULL;
}

uint32_t qmap_session_pos(const qmap_session *s) { return s ? s->pos : 0; }

void qmap_session_get_counters(const qmap_session *s, qmap_session_counters *out)
{
    if (!out) return;
    *out = (qmap_session_counters){ s ? s->st->int8_madds : 0, s ? s->st->float_madds : 0 };
}

uint64_t qmap_session_kv_bytes_read(const qmap_session *s)
{
    return s ? s->st->kv_bytes : 0;
}

void qmap_session_reset(qmap_session *s)
{
    if (!s) return;
    s->pos = 0;
    s->have_logits = false;
    s->last_n = 0;
}
