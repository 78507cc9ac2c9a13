/* qmap_tokenizer.c — the public tokenizer functions of include/qmap.h over runtime/qr_tok.h. */
#include <string.h>

#include "qa_model.h"
#include "qr_tok.h"

/* The public streaming state and the runtime's are one layout. */
_Static_assert(sizeof(qmap_detok) == sizeof(qr_detok), "qmap_detok and qr_detok must match");

/* Text in goes through the source vocabulary of a seq2seq model; text out (and everything else) through its
 * target vocabulary, which is the model's tokenizer. */
static const qr_tokenizer *need_tok_side(const qmap_model *m, bool source, qmap_error *err, qmap_status *st)
{
    bool src = source && m->s2s;
    const qr_tokenizer *t = src ? m->tok_src : qa_model_tokenizer(m);
    if (t) return t;
    const char *why = src ? (m->tok_src_error[0] ? m->tok_src_error : NULL) : qa_model_tokenizer_error(m);
    if (why) *st = qa_fail(err, QMAP_ERR_UNSUPPORTED, "%s: the stored tokenizer cannot be used: %s", m->info.path, why);
    else *st = qa_fail(err, QMAP_ERR_NOT_FOUND, "%s: the container has no tokenizer", m->info.path);
    return NULL;
}

static const qr_tokenizer *need_tok(const qmap_model *m, qmap_error *err, qmap_status *st)
{
    return need_tok_side(m, false, err, st);
}

qmap_status qmap_tokenize(const qmap_model *m, const char *text, size_t len, bool add_special, int32_t *ids,
                          size_t cap, size_t *n_ids, qmap_error *err)
{
    size_t dummy;
    if (!n_ids) n_ids = &dummy;
    *n_ids = 0;
    if (!m || (!text && len) || (!ids && cap)) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_tokenize: NULL argument");
    qmap_status st = QMAP_OK;
    const qr_tokenizer *t = need_tok_side(m, true, err, &st);
    if (!t) return st;
    qm_error e;
    qm_error_clear(&e);
    if (qr_tok_encode(t, text ? text : "", len, add_special, ids, cap, n_ids, &e) != QM_OK) return qa_error_export(err, &e);
    return QMAP_OK;
}

void qmap_detok_init(qmap_detok *st)
{
    if (st) memset(st, 0, sizeof *st);
}

qmap_status qmap_detokenize(const qmap_model *m, qmap_detok *st, int32_t id, char *out, size_t cap, size_t *n_out,
                            qmap_error *err)
{
    size_t dummy;
    if (!n_out) n_out = &dummy;
    *n_out = 0;
    if (!m || !st || (!out && cap)) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_detokenize: NULL argument");
    qmap_status s = QMAP_OK;
    const qr_tokenizer *t = need_tok(m, err, &s);
    if (!t) return s;
    qm_error e;
    qm_error_clear(&e);
    if (qr_tok_decode(t, (qr_detok *)st, id, out, cap, n_out, &e) != QM_OK) return qa_error_export(err, &e);
    return QMAP_OK;
}

size_t qmap_detok_flush(qmap_detok *st, char *out, size_t cap)
{
    return st && out ? qr_tok_decode_flush((qr_detok *)st, out, cap) : 0;
}

const char *qmap_token_piece(const qmap_model *m, int32_t id, size_t *len)
{
    return qr_tok_piece(qa_model_tokenizer(m), id, len);
}

const char *qmap_token_source_piece(const qmap_model *m, int32_t id, size_t *len)
{
    return qr_tok_piece(m && m->s2s ? m->tok_src : qa_model_tokenizer(m), id, len);
}

static int32_t special_id(const qmap_model *m, const char *key)
{
    uint32_t v;
    if (!m || qm_meta_get_u32(m->file, key, &v) != QM_OK || v > INT32_MAX) return -1;
    return (int32_t)v;
}

/* Read from the metadata, so they are known even when the tokenizer itself cannot be used. */
int32_t qmap_token_bos(const qmap_model *m)
{
    return special_id(m, m && m->s2s ? QM_TOK_PREFIX "tgt.bos_id" : QM_TOK_PREFIX "bos_id");
}
int32_t qmap_token_eos(const qmap_model *m)
{
    return special_id(m, m && m->s2s ? QM_TOK_PREFIX "tgt.eos_id" : QM_TOK_PREFIX "eos_id");
}
int32_t qmap_token_unk(const qmap_model *m)
{
    return special_id(m, m && m->s2s ? QM_TOK_PREFIX "src.unk_id" : QM_TOK_PREFIX "unk_id");
}

const char *qmap_model_chat_template(const qmap_model *m, size_t *len)
{
    const char *s = NULL;
    size_t n = 0;
    if (!m || qm_meta_get_string(m->file, QM_TOK_PREFIX "chat_template", &s, &n) != QM_OK) return NULL;
    if (len) *len = n;
    return s;
}
