/* qmap_tokenizer.c — placeholder for the public tokenizer functions until the runtime tokenizer lands
 * (issue 12): tokenizing reports that it is not available, so `qmap run` works on token ids (--tokens);
 * the special ids are read from the stored metadata. */
#include <string.h>

#include "qa_model.h"

qmap_status qmap_tokenize(const qmap_model *m, const char *text, size_t len, bool add_special, int32_t *ids,
                          size_t cap, size_t *n_ids, qmap_error *err)
{
    (void)text; (void)len; (void)add_special; (void)ids; (void)cap;
    if (n_ids) *n_ids = 0;
    if (!m) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_tokenize: model is NULL");
    if (!qm_find_meta(m->file, QM_TOK_PREFIX "kind"))
        return qa_fail(err, QMAP_ERR_NOT_FOUND, "%s: the container has no tokenizer", m->info.path);
    return qa_fail(err, QMAP_ERR_UNSUPPORTED, "%s: this build cannot encode text yet (the runtime tokenizer is not built)",
                   m->info.path);
}

void qmap_detok_init(qmap_detok *st) { memset(st, 0, sizeof *st); }

qmap_status qmap_detokenize(const qmap_model *m, qmap_detok *st, int32_t id, char *out, size_t cap, size_t *n_out,
                            qmap_error *err)
{
    (void)m; (void)st; (void)id; (void)out; (void)cap;
    if (n_out) *n_out = 0;
    return qa_fail(err, QMAP_ERR_UNSUPPORTED, "this build cannot decode tokens yet (the runtime tokenizer is not built)");
}

size_t qmap_detok_flush(qmap_detok *st, char *out, size_t cap)
{
    (void)out; (void)cap;
    memset(st, 0, sizeof *st);
    return 0;
}

const char *qmap_token_piece(const qmap_model *m, int32_t id, size_t *len)
{
    (void)m; (void)id;
    if (len) *len = 0;
    return NULL;
}

static int32_t special_id(const qmap_model *m, const char *key)
{
    uint32_t v;
    if (!m || qm_meta_get_u32(m->file, key, &v) != QM_OK || v > INT32_MAX) return -1;
    return (int32_t)v;
}

int32_t qmap_token_bos(const qmap_model *m) { return special_id(m, QM_TOK_PREFIX "bos_id"); }
int32_t qmap_token_eos(const qmap_model *m) { return special_id(m, QM_TOK_PREFIX "eos_id"); }
