/* qr_tok.c — the stored tokenizer at run time (spec/TOKENIZER.md §3): loading from the metadata, the
 * kinds' front ends around the BPE engine of qr_tok_bpe.c, and streaming decoding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qm_names.h"
#include "qr_tok_internal.h"

/* ---- loading ------------------------------------------------------------------------------------- */

typedef struct loader { const qm_file *f; const char *prefix, *path; qm_error *err; } loader;

static const qm_meta *key(const loader *L, qm_tok_key_id k, char *name, size_t cap)
{
    qm_tok_key(name, cap, L->prefix, k);
    return qm_find_meta(L->f, name);
}

static qm_status get_bool(const loader *L, qm_tok_key_id k, bool def, bool *out)
{
    char name[QM_KEY_NAME_MAX];
    const qm_meta *m = key(L, k, name, sizeof name);
    *out = def;
    if (!m) return QM_OK;
    if (m->type != QM_META_BOOL) return qm_fail(L->err, QM_ERR_BAD_CONFIG, L->path, name, m->entry_offset, "must be BOOL");
    *out = m->v.b;
    return QM_OK;
}

static qm_status get_id(const loader *L, qm_tok_key_id k, uint32_t n, int32_t *out)
{
    char name[QM_KEY_NAME_MAX];
    const qm_meta *m = key(L, k, name, sizeof name);
    *out = -1;
    if (!m) return QM_OK;
    if (m->type != QM_META_U32 || m->v.u32 >= n)
        return qm_fail(L->err, QM_ERR_BAD_CONFIG, L->path, name, m->entry_offset, "must be a U32 below %u", n);
    *out = (int32_t)m->v.u32;
    return QM_OK;
}

static bool str_is(const char *s, uint64_t n, const char *lit) { return n == strlen(lit) && !memcmp(s, lit, n); }

/* Added tokens are matched longest first, then lowest id (spec §3.1): an insertion sort, as they are few. */
static void sort_added(qr_tokenizer *t)
{
    for (uint32_t i = 1; i < t->n_added; i++) {
        uint32_t v = t->added[i], j = i;
        while (j > 0 && (t->len[t->added[j - 1]] < t->len[v] ||
                         (t->len[t->added[j - 1]] == t->len[v] && t->added[j - 1] > v))) {
            t->added[j] = t->added[j - 1];
            j--;
        }
        t->added[j] = v;
    }
}

/* GPT-2's byte → character table: bytes '!'..'~', '¡'..'¬', '®'..'ÿ' are themselves; the other 68, in
 * increasing order, are U+0100, U+0101, … (spec §3.2). Returns the code point. */
static uint32_t byte_char(unsigned b)
{
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) return b;
    uint32_t k = 0;
    for (unsigned c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff))) k++;
    return 0x100 + k;
}

static size_t put_utf8(uint32_t cp, char *out)
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xc0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12); out[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18); out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static qm_status load_ids(const loader *L, qm_tok_key_id k, uint32_t n, uint32_t **ids, uint32_t *count)
{
    char name[QM_KEY_NAME_MAX];
    const qm_meta *m = key(L, k, name, sizeof name);
    *count = 0;
    if (!m) return QM_OK;
    if (m->type != QM_META_ARRAY || m->elem_type != QM_META_U32)
        return qm_fail(L->err, QM_ERR_BAD_CONFIG, L->path, name, m->entry_offset, "must be ARRAY[U32]");
    *ids = malloc((m->count ? m->count : 1) * sizeof **ids);
    if (!*ids) return qm_fail(L->err, QM_ERR_NOMEM, L->path, name, QM_NO_OFFSET, "out of memory");
    for (uint64_t i = 0; i < m->count; i++) {
        uint32_t v;
        qm_meta_array_get(m, i, &v);
        if (v >= n) return qm_fail(L->err, QM_ERR_BAD_CONFIG, L->path, name, m->entry_offset, "id %u is not below %u", v, n);
        (*ids)[i] = v;
    }
    *count = (uint32_t)m->count;
    return QM_OK;
}

qm_status qr_tok_load(const qm_file *f, const char *prefix, qr_tokenizer **out, qm_error *err)
{
    *out = NULL;
    loader L = { f, prefix, qm_file_path(f), err };
    char name[QM_KEY_NAME_MAX];
    const qm_meta *kind = key(&L, QM_TOK_KIND, name, sizeof name);
    if (!kind) return qm_fail(err, QM_ERR_NOT_FOUND, L.path, name, QM_NO_OFFSET, "the container has no tokenizer");
    qr_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return qm_fail(err, QM_ERR_NOMEM, L.path, NULL, QM_NO_OFFSET, "out of memory");
    qm_status st = QM_OK;
#define TRY(e) do { if ((st = (e)) != QM_OK) goto fail; } while (0)
    if (kind->type != QM_META_STRING) TRY(qm_fail(err, QM_ERR_BAD_CONFIG, L.path, name, kind->entry_offset, "must be STRING"));
    if (str_is(kind->str, kind->str_len, QM_TOK_KIND_BPE_BYTELEVEL)) t->kind = QR_TOK_BYTELEVEL;
    else if (str_is(kind->str, kind->str_len, QM_TOK_KIND_BPE_SENTENCEPIECE)) t->kind = QR_TOK_SENTENCEPIECE;
    else if (str_is(kind->str, kind->str_len, QM_TOK_KIND_WORDLEVEL)) t->kind = QR_TOK_WORDLEVEL;
    else TRY(qm_fail(err, QM_ERR_UNSUPPORTED, L.path, name, kind->entry_offset, "tokenizer kind \"%.*s\" is not supported",
                     (int)(kind->str_len > 40 ? 40 : kind->str_len), kind->str));

    const qm_meta *tokens = key(&L, QM_TOK_TOKENS, name, sizeof name);
    if (!tokens || tokens->type != QM_META_ARRAY || tokens->elem_type != QM_META_STRING || tokens->count == 0 ||
        tokens->count > (1u << 24))
        TRY(qm_fail(err, QM_ERR_BAD_CONFIG, L.path, name, QM_NO_OFFSET, "must be a non-empty ARRAY[STRING] of at most 2^24"));
    t->n = (uint32_t)tokens->count;
    t->str = malloc(t->n * sizeof *t->str);
    t->len = malloc(t->n * sizeof *t->len);
    t->is_added = calloc(t->n, 1);
    if (!t->str || !t->len || !t->is_added) TRY(qm_fail(err, QM_ERR_NOMEM, L.path, NULL, QM_NO_OFFSET, "out of memory"));
    for (uint32_t i = 0; i < t->n; i++) {
        uint64_t n;
        TRY(qm_meta_array_string(tokens, i, &t->str[i], &n));
        if (n > (1u << 16)) TRY(qm_fail(err, QM_ERR_BAD_CONFIG, L.path, name, QM_NO_OFFSET, "token %u is longer than 65,536 bytes", i));
        t->len[i] = (uint32_t)n;
    }
    const qm_meta *norm = key(&L, QM_TOK_NORMALIZER, name, sizeof name);
    if (norm) {
        if (norm->type != QM_META_STRING)
            TRY(qm_fail(err, QM_ERR_BAD_CONFIG, L.path, name, norm->entry_offset, "must be STRING"));
        TRY(qr_norm_parse(norm->str, norm->str_len, t->norm, &t->n_norm, L.path, name, norm->entry_offset, err));
    }
    const qm_meta *merges = key(&L, QM_TOK_MERGES, name, sizeof name);
    if (merges && (merges->type != QM_META_ARRAY || merges->elem_type != QM_META_STRING))
        TRY(qm_fail(err, QM_ERR_BAD_CONFIG, L.path, name, merges->entry_offset, "must be ARRAY[STRING]"));
    TRY(qr_tok_build_tables(t, t->kind == QR_TOK_WORDLEVEL ? NULL : merges, L.path, err));

    TRY(load_ids(&L, QM_TOK_ADDED_IDS, t->n, &t->added, &t->n_added));
    for (uint32_t i = 0; i < t->n_added; i++) t->is_added[t->added[i]] = 1;
    sort_added(t);
    for (uint32_t i = 0; i < t->n_added; i++)
        if (t->len[t->added[i]]) t->added_first[(uint8_t)t->str[t->added[i]][0]] = 1;
    TRY(get_id(&L, QM_TOK_BOS_ID, t->n, &t->bos));
    TRY(get_id(&L, QM_TOK_EOS_ID, t->n, &t->eos));
    TRY(get_id(&L, QM_TOK_UNK_ID, t->n, &t->unk));
    TRY(get_bool(&L, QM_TOK_ADD_BOS, false, &t->add_bos));
    TRY(get_bool(&L, QM_TOK_ADD_EOS, false, &t->add_eos));
    TRY(get_bool(&L, QM_TOK_ADD_PREFIX_SPACE, false, &t->add_prefix_space));
    TRY(get_bool(&L, QM_TOK_BYTE_FALLBACK, false, &t->byte_fallback));
    TRY(get_bool(&L, QM_TOK_IGNORE_MERGES, false, &t->ignore_merges));
    if ((t->add_bos && t->bos < 0) || (t->add_eos && t->eos < 0))
        TRY(qm_fail(err, QM_ERR_BAD_CONFIG, L.path, NULL, QM_NO_OFFSET, "add_bos/add_eos is set but bos_id/eos_id is absent"));
    t->prepend = t->add_prefix_space ? QR_PREPEND_ALWAYS : QR_PREPEND_NEVER;
    const qm_meta *scheme = key(&L, QM_TOK_PREPEND_SCHEME, name, sizeof name);
    if (scheme && scheme->type == QM_META_STRING) {
        if (str_is(scheme->str, scheme->str_len, "first")) t->prepend = QR_PREPEND_FIRST;
        else if (str_is(scheme->str, scheme->str_len, "never")) t->prepend = QR_PREPEND_NEVER;
        else if (str_is(scheme->str, scheme->str_len, "always")) t->prepend = QR_PREPEND_ALWAYS;
        else TRY(qm_fail(err, QM_ERR_BAD_CONFIG, L.path, name, scheme->entry_offset, "must be always, first or never"));
    }

    /* the symbols a piece starts from: a byte's GPT-2 character, or SentencePiece's <0xXX> */
    memset(t->char_byte, 0xff, sizeof t->char_byte);
    for (unsigned b = 0; b < 256; b++) {
        char buf[8];
        uint32_t cp = byte_char(b);
        t->char_byte[cp] = (uint16_t)b;
        size_t n = t->kind == QR_TOK_BYTELEVEL ? put_utf8(cp, buf) : (size_t)snprintf(buf, sizeof buf, "<0x%02X>", b);
        t->byte_id[b] = qr_tok_lookup(t, buf, n);
    }

    if (t->kind == QR_TOK_SENTENCEPIECE) {
        t->sp_word_split = true;
        for (uint32_t i = 0; i < t->n && t->sp_word_split; i++)
            for (uint32_t k = 1; k + 3 <= t->len[i]; k++)
                if (!memcmp(t->str[i] + k, "\xe2\x96\x81", 3) && !(k >= 3 && !memcmp(t->str[i] + k - 3, "\xe2\x96\x81", 3))) {
                    t->sp_word_split = false;
                    break;
                }
    }
    const qm_meta *split = key(&L, QM_TOK_PRE_SPLIT, name, sizeof name);
    if (split && split->type == QM_META_STRING) {
        int code;
        PCRE2_SIZE off;
        t->re = pcre2_compile((PCRE2_SPTR)split->str, split->str_len, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
        if (!t->re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(code, msg, sizeof msg);
            TRY(qm_fail(err, QM_ERR_BAD_CONFIG, L.path, name, split->entry_offset, "pattern does not compile at %zu: %s",
                        (size_t)off, (const char *)msg));
        }
        pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE);   /* without the JIT, the interpreter runs it */
        t->re_src = split->str;
        t->re_len = (size_t)split->str_len;
        snprintf(t->re_key, sizeof t->re_key, "%s", name);
    }
#undef TRY
    *out = t;
    return QM_OK;
fail:
    qr_tok_free(t);
    return st;
}

void qr_tok_free(qr_tokenizer *t)
{
    if (!t) return;
    free(t->str);
    free(t->len);
    free(t->table);
    free(t->merge_key);
    free(t->merge_rank);
    free(t->merge_result);
    free(t->added);
    free(t->is_added);
    pcre2_code_free(t->re);
    free(t);
}

uint32_t qr_tok_n_tokens(const qr_tokenizer *t) { return t ? t->n : 0; }
int32_t qr_tok_bos(const qr_tokenizer *t) { return t ? t->bos : -1; }
int32_t qr_tok_eos(const qr_tokenizer *t) { return t ? t->eos : -1; }

const char *qr_tok_piece(const qr_tokenizer *t, int32_t id, size_t *len)
{
    if (!t || id < 0 || (uint32_t)id >= t->n) return NULL;
    if (len) *len = t->len[id];
    return t->str[id];
}
