/* qmap_translator.c — the public encoder-decoder API (include/qmap.h) over runtime/qr_arch_seq2seq.h (the
 * model) and runtime/qr_beam.h (the search). */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "qa_model.h"
#include "qr_beam.h"

struct qmap_translator {
    const qmap_model *m;
    qmap_translate_params p;
    uint32_t max_tgt;                /* decoder positions: BOS + max_len generated */
    int32_t bos, eos;
    qr_s2s_state *s;
    qr_beam *beam;
    int32_t *res;                    /* [max_batch][n_best][max_len] result ids */
};

void qmap_translate_params_default(qmap_translate_params *p)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->beam_size = 1;
    p->n_best = 1;
    p->length_penalty = 1.0f;
}

void qmap_translator_free(qmap_translator *t)
{
    if (!t) return;
    qr_s2s_state_free(t->s);
    qr_beam_free(t->beam);
    free(t->res);
    free(t);
}


qmap_status qmap_translator_new(const qmap_model *m, const qmap_translate_params *params, qmap_translator **out,
                                qmap_error *err)
{
    if (!out) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_translator_new: out is NULL");
    *out = NULL;
    if (!m) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_translator_new: model is NULL");
    if (!m->s2s)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "%s: a %s container is not an encoder-decoder (seq2seq)",
                       m->info.path, m->arch_name);
    qmap_translate_params p;
    qmap_translate_params_default(&p);
    if (params) p = *params;
    const qr_s2s *s2s = m->s2s;
    if (p.beam_size == 0) p.beam_size = 1;
    if (p.n_best == 0) p.n_best = 1;
    if (p.max_len == 0) p.max_len = s2s->max_len - 1;
    if (p.max_batch == 0) p.max_batch = 64;
    if (p.max_batch_tokens == 0) p.max_batch_tokens = 4096;
    if (p.max_batch_tokens < s2s->max_len) p.max_batch_tokens = s2s->max_len;
    if (p.beam_size > 256 || p.n_best > p.beam_size || p.max_len >= s2s->max_len || p.max_batch > 65536 ||
        p.max_batch_tokens > (1u << 24) || p.threads < 0 || !(p.length_penalty >= 0) || !isfinite(p.length_penalty))
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT,
                       "qmap_translator_new: beam %u (1 .. 256), n_best %u (1 .. beam), max_len %u (1 .. %u), "
                       "max_batch %u, max_batch_tokens %u, threads %d, length penalty %g (>= 0)",
                       p.beam_size, p.n_best, p.max_len, s2s->max_len - 1, p.max_batch, p.max_batch_tokens, p.threads,
                       (double)p.length_penalty);
    qr_act act;
    if (!qa_act_of(p.act, &act))
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_translator_new: unknown act mode %d", (int)p.act);
    qmap_translator *t = calloc(1, sizeof *t);
    if (!t) return qa_fail(err, QMAP_ERR_NOMEM, "%s: out of memory", m->info.path);
    t->m = m;
    t->p = p;
    t->max_tgt = p.max_len + 1;
    t->bos = qmap_token_bos(m);
    t->eos = qmap_token_eos(m);
    if (t->bos < 0 || t->eos < 0 || (uint32_t)t->bos >= s2s->tgt_vocab || (uint32_t)t->eos >= s2s->tgt_vocab) {
        qmap_translator_free(t);
        return qa_fail(err, QMAP_ERR_NOT_FOUND,
                       "%s: tokenizer.tgt.bos_id and tokenizer.tgt.eos_id (below %u) are needed to start and end a "
                       "translation; store the target vocabulary with its bos/eos tokens (qmap convert "
                       "--tgt-tokenizer)", m->info.path, s2s->tgt_vocab);
    }
    qm_error e;
    qm_error_clear(&e);
    qr_s2s_params sp = { .max_src = p.max_batch_tokens, .max_tgt = t->max_tgt, .max_seqs = p.beam_size,
                         .threads = p.threads ? p.threads : omp_get_max_threads(), .act = act,
                         .kv_type = p.kv_type == QMAP_KV_F32 ? QR_KV_F32 : QR_KV_F16 };
    qr_beam_params bp = { .beam = p.beam_size, .max_steps = p.max_len, .vocab = s2s->tgt_vocab, .eos = t->eos,
                          .length_penalty = p.length_penalty };
    if (qr_s2s_state_new(s2s, m->mats, m->n_mats, &sp, &t->s, &e) != QM_OK || qr_beam_new(&bp, &t->beam, &e) != QM_OK) {
        qmap_translator_free(t);
        return qa_error_export(err, &e);
    }
    t->res = malloc((size_t)p.max_batch * p.n_best * p.max_len * sizeof *t->res);
    if (!t->res) {
        qmap_translator_free(t);
        return qa_fail(err, QMAP_ERR_NOMEM, "%s: out of memory for %u x %u results", m->info.path, p.max_batch,
                       p.n_best);
    }
    *out = t;
    return QMAP_OK;
}

/* Beam search (greedy for beam 1) over the source set in the state; results into out[0 .. n_best). */
static qm_status search(qmap_translator *t, int32_t *res, qmap_hypothesis *out, qm_error *e)
{
    const qr_s2s *s2s = t->m->s2s;
    qr_beam_start(t->beam);
    int32_t ids[256];
    ids[0] = t->bos;
    uint32_t pos = 0;
    for (;;) {
        uint32_t n = qr_beam_active(t->beam);
        qm_status st = qr_s2s_decode(s2s, t->s, ids, n, 1, pos, e);
        if (st != QM_OK) return st;
        const uint32_t *parent;
        int done = qr_beam_step(t->beam, t->s->logits, &parent);
        pos++;
        if (done) break;
        uint32_t n_next = qr_beam_active(t->beam);
        /* the hypotheses that go on continue their parents' caches */
        qr_s2s_reorder(s2s, t->s, parent, n_next, pos);
        memcpy(ids, qr_beam_last_tokens(t->beam), n_next * sizeof *ids);
    }
    uint32_t n_fin = qr_beam_n_finished(t->beam);
    for (uint32_t j = 0; j < t->p.n_best; j++) {
        qmap_hypothesis *h = &out[j];
        int32_t *dst = res + (size_t)j * t->p.max_len;
        uint32_t len = 0;
        float score = -INFINITY, lp = -INFINITY;
        const int32_t *src = j < n_fin ? qr_beam_result(t->beam, j, &len, &score, &lp) : NULL;
        if (src) memcpy(dst, src, len * sizeof *dst);
        *h = (qmap_hypothesis){ dst, src ? len : 0, score, lp };
    }
    return QM_OK;
}

qmap_status qmap_translate(qmap_translator *t, const int32_t *src, const uint32_t *lens, size_t n_sent,
                           qmap_hypothesis *out, qmap_error *err)
{
    if (!t || !src || !lens || !out) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_translate: NULL argument");
    if (n_sent == 0 || n_sent > t->p.max_batch)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_translate: %zu sentences (this translator takes 1 .. %u)",
                       n_sent, t->p.max_batch);
    const qr_s2s *s2s = t->m->s2s;
    for (size_t i = 0; i < n_sent; i++)
        if (lens[i] < 1 || lens[i] > s2s->max_len)
            return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "%s: sentence %zu has %u source tokens; the model takes 1 .. %u",
                           t->m->info.path, i, lens[i], s2s->max_len);
    qm_error e;
    qm_error_clear(&e);
    /* encode as many sentences as the encoder buffers hold, then decode each of them */
    size_t i = 0, off = 0;
    while (i < n_sent) {
        size_t j = i, tokens = 0;
        while (j < n_sent && tokens + lens[j] <= t->p.max_batch_tokens) tokens += lens[j++];
        if (qr_s2s_encode(s2s, t->s, src + off, lens + i, j - i, &e) != QM_OK) return qa_error_export(err, &e);
        uint32_t row = 0;
        for (size_t k = i; k < j; k++) {
            if (qr_s2s_set_source(s2s, t->s, row, lens[k], &e) != QM_OK ||
                search(t, t->res + k * t->p.n_best * t->p.max_len, out + k * t->p.n_best, &e) != QM_OK)
                return qa_error_export(err, &e);
            row += lens[k];
        }
        off += tokens;
        i = j;
    }
    return QMAP_OK;
}

qmap_status qmap_translator_logits(qmap_translator *t, const int32_t *src, size_t n_src, const int32_t *tgt,
                                   size_t n_tgt, float *logits, qmap_error *err)
{
    if (!t || !src || !tgt || !logits) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_translator_logits: NULL argument");
    const qr_s2s *s2s = t->m->s2s;
    if (n_src < 1 || n_src > s2s->max_len || n_tgt < 1 || n_tgt > t->max_tgt)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT,
                       "qmap_translator_logits: %zu source ids (1 .. %u), %zu target ids (1 .. %u)", n_src,
                       s2s->max_len, n_tgt, t->max_tgt);
    qm_error e;
    qm_error_clear(&e);
    uint32_t len = (uint32_t)n_src;
    if (qr_s2s_encode(s2s, t->s, src, &len, 1, &e) != QM_OK || qr_s2s_set_source(s2s, t->s, 0, len, &e) != QM_OK ||
        qr_s2s_decode(s2s, t->s, tgt, 1, n_tgt, 0, &e) != QM_OK)
        return qa_error_export(err, &e);
    memcpy(logits, t->s->logits, n_tgt * s2s->tgt_vocab * sizeof *logits);
    return QMAP_OK;
}
