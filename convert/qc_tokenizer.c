/* qc_tokenizer.c — tokenizer files → a validated in-memory tokenizer → container metadata.
 *
 * Loading has two halves. The sources (tokenizer.json, vocab.json + merges.txt, a text list, and the
 * optional tokenizer_config.json / special_tokens_map.json) each place tokens into id slots and state
 * properties (kind, merges, pre-split pattern, special tokens). Then one finalisation step checks the ids
 * cover 0..n-1 exactly and resolves the special token ids by the precedence rule of spec/TOKENIZER.md.
 */
#include "qc_tokenizer.h"
#include "qc_source.h"
#include "qc_json.h"
#include "qc_spm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "qm_format.h"

/* HF's ByteLevel pre-tokenizer pattern (GPT-2), as PCRE2 source. */
static const char k_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
/* HF's Whitespace and WhitespaceSplit pre-tokenizers, as PCRE2 source (matches are the pieces). */
static const char k_whitespace_pattern[] = "\\w+|[^\\w\\s]+";
static const char k_whitespace_split_pattern[] = "\\S+";
static const char k_metaspace[] = "\xE2\x96\x81"; /* U+2581, sentencepiece's visible space */

/* Nesting of Sequence normalizers / pre-tokenizers / processors we follow; real files use 1 or 2. */
#define MAX_DEPTH 8

enum { SP_BOS, SP_EOS, SP_UNK, SP_PAD, SP_N };
static const char *const k_sp_names[SP_N] = { "bos", "eos", "unk", "pad" };

/* Per-slot flags while ids are being placed. */
enum { TF_SET = 1, TF_ADDED = 2, TF_SPECIAL = 4 };

typedef int8_t tri; /* -1: the source does not say; 0/1: false/true */

struct qc_tokenizer {
    const char *kind;                /* static */
    char *source;                    /* base names, comma-separated */

    uint64_t n_tokens;               /* after finalisation; slots [0, cap) before */
    uint64_t cap;
    char **tokens;                   /* [cap], owned, NUL-terminated copies (may hold inner NULs) */
    size_t *token_lens;
    uint8_t *flags;                  /* [cap] TF_*; freed by finalisation */
    int64_t max_id;                  /* largest id seen, including ones beyond cap */

    char **merges;                   /* "left right", rank = index */
    size_t *merge_lens;
    uint64_t n_merges, merges_cap;

    uint32_t *special_ids; uint64_t n_special;
    uint32_t *added_ids;   uint64_t n_added;

    bool has_sp[SP_N];
    uint32_t sp[SP_N];
    tri add_bos, add_eos;

    char *pre_split; size_t pre_split_len;
    char *chat_template; size_t chat_template_len;   /* tokenizer_config.json's, or NULL (2.4) */
    char *normalizer;                /* "nfkc,lowercase", or NULL */
    const char *prepend_scheme;      /* static, NULL if not stated */
    tri add_prefix_space, byte_fallback, ignore_merges;
};

/* Special-token statements gathered before ids are final; resolved in precedence order. */
typedef struct sp_claim {
    bool set;
    bool by_id;                      /* id given directly (post-processor ids) */
    uint32_t id;
    const char *name; size_t name_len; /* borrowed from a JSON document that outlives resolution */
    char field[48];                  /* for messages */
} sp_claim;

/* ---------------------------------------------------------------------------------------------- */
/* small helpers */

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static qm_status nomem(qm_error *err, const char *file)
{
    return qm_fail(err, QM_ERR_NOMEM, file, NULL, QM_NO_OFFSET, "out of memory reading the tokenizer");
}

/* dir + "/" + name, malloc'd. */
static char *join_path(const char *dir, size_t dir_len, const char *name)
{
    size_t n = strlen(name);
    char *p = malloc(dir_len + 1 + n + 1);
    if (!p) return NULL;
    memcpy(p, dir, dir_len);
    p[dir_len] = '/';
    memcpy(p + dir_len + 1, name, n + 1);
    return p;
}

/* The file `name` beside `path` (in the same directory). */
static char *sibling(const char *path, const char *name)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return join_path(".", 1, name);
    return join_path(path, (size_t)(slash - path), name);
}

static bool is_regular_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* merges.txt and vocab.txt: the tokenizer files' size cap; JSON files also get qc_json_check. */
static qm_status read_whole(const char *path, uint64_t json_limit, char **out, size_t *len, qm_error *err)
{
    return qc_read_small_file(path, qc_json_cap(QC_JSON_TOKENIZER, json_limit),
                              "tokenizer files (if it is genuine, --json-limit MIB raises the cap)", out, len, err);
}

/* Duplicate object keys are refused: a vocabulary with two entries for one string is ambiguous.
 * `extra` adds decode flags (JSON_DECODE_INT_AS_REAL for files whose integers qmap never reads). */
static qm_status parse_json(const char *path, const char *buf, size_t len, size_t extra, json_t **out, qm_error *err)
{
    json_error_t je;
    *out = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | extra, &je);
    if (!*out)
        return qm_fail(err, QM_ERR_BAD_SOURCE, path, NULL, (uint64_t)je.position,
                       "invalid JSON (line %d, column %d): %s", je.line, je.column, je.text);
    return QM_OK;
}

static qm_status load_json(const char *path, uint64_t json_limit, size_t extra, json_t **out, qm_error *err)
{
    char *buf;
    size_t len;
    qm_status s = qc_json_read_file(path, QC_JSON_TOKENIZER, json_limit, &buf, &len, err);
    if (s != QM_OK) return s;
    s = parse_json(path, buf, len, extra, out, err);
    free(buf);
    return s;
}

static const char *json_type_name(const json_t *v)
{
    const char *t = json_string_value(json_object_get(v, "type"));
    return t ? t : "";
}

/* A JSON bool, or -1 when absent or null (any other type is an error). */
static qm_status get_tri(const char *file, const json_t *obj, const char *key, const char *field, tri *out,
                         qm_error *err)
{
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) { *out = -1; return QM_OK; }
    if (!json_is_boolean(v))
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, field, QM_NO_OFFSET, "\"%s\" is not a boolean", key);
    *out = json_is_true(v) ? 1 : 0;
    return QM_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* id slots */

/* `entries` counts every statement of a token (vocabulary + added); more slots than that, or than the cap,
 * can never be filled without a gap, so ids beyond them are only noted (put_token). */
static qm_status alloc_slots(qc_tokenizer *t, uint64_t entries, const char *file, qm_error *err)
{
    uint64_t cap = entries < QC_TOKENIZER_MAX_VOCAB ? entries : QC_TOKENIZER_MAX_VOCAB;
    size_t n = cap ? (size_t)cap : 1;
    t->tokens = calloc(n, sizeof *t->tokens);
    t->token_lens = calloc(n, sizeof *t->token_lens);
    t->flags = calloc(n, 1);
    if (!t->tokens || !t->token_lens || !t->flags) return nomem(err, file);
    t->cap = cap;
    t->max_id = -1;
    return QM_OK;
}

static qm_status check_vocab_count(const json_t *vocab, const char *file, const char *field, qm_error *err)
{
    if (json_object_size(vocab) > QC_TOKENIZER_MAX_VOCAB)
        return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET,
                       "%zu vocabulary entries, above the cap of %llu tokens", json_object_size(vocab),
                       (unsigned long long)QC_TOKENIZER_MAX_VOCAB);
    return QM_OK;
}

/* Place token `s` at `id`. An added token may restate a vocabulary entry (same id, same string) — HF
 * serialises Llama's <s>, </s>, <unk> both ways — which only adds its flags; any other reuse of an id is
 * an error. */
static qm_status put_token(qc_tokenizer *t, const char *file, const char *field, int64_t id, const char *s,
                           size_t len, uint8_t flags, qm_error *err)
{
    if (id < 0)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, field, QM_NO_OFFSET, "negative token id %lld",
                       (long long)id);
    if ((uint64_t)id >= QC_TOKENIZER_MAX_VOCAB)
        return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET,
                       "token id %lld is above the cap of %llu tokens", (long long)id,
                       (unsigned long long)QC_TOKENIZER_MAX_VOCAB);
    if (len > QC_TOKENIZER_MAX_TOKEN)
        return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET,
                       "token id %lld is %zu bytes long, above the %u-byte cap", (long long)id, len,
                       QC_TOKENIZER_MAX_TOKEN);
    if (!qm_utf8_valid(s, len, true))
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, field, QM_NO_OFFSET, "token id %lld is not valid UTF-8",
                       (long long)id);
    if (id > t->max_id) t->max_id = id;
    /* An id at or beyond the slot count means some id below it is missing; finalisation names it. */
    if ((uint64_t)id >= t->cap) return QM_OK;
    size_t i = (size_t)id;
    if (t->flags[i] & TF_SET) {
        if (t->token_lens[i] == len && memcmp(t->tokens[i], s, len) == 0 && (flags & TF_ADDED)) {
            t->flags[i] |= flags;
            return QM_OK;
        }
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, field, QM_NO_OFFSET,
                       "duplicate token id %lld (\"%.40s\" and \"%.40s\")", (long long)id, t->tokens[i], s);
    }
    char *copy = malloc(len + 1);
    if (!copy) return nomem(err, file);
    memcpy(copy, s, len);
    copy[len] = '\0';
    t->tokens[i] = copy;
    t->token_lens[i] = len;
    t->flags[i] = (uint8_t)(flags | TF_SET);
    return QM_OK;
}

/* Ids must be exactly 0..n-1: the first empty slot is n, and nothing may sit above it. */
static qm_status finish_ids(qc_tokenizer *t, const char *file, qm_error *err)
{
    uint64_t n = 0;
    while (n < t->cap && (t->flags[n] & TF_SET)) n++;
    if (t->max_id >= 0 && (uint64_t)t->max_id >= n)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "vocab", QM_NO_OFFSET,
                       "token id %llu is missing (ids must cover 0..%lld without gaps)", (unsigned long long)n,
                       (long long)t->max_id);
    if (n == 0)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "vocab", QM_NO_OFFSET, "the vocabulary is empty");
    if (n > QC_TOKENIZER_MAX_VOCAB)   /* unreachable: put_token caps ids; kept next to the count it guards */
        return qm_fail(err, QM_ERR_UNSUPPORTED, file, "vocab", QM_NO_OFFSET, "too many tokens");
    t->n_tokens = n;

    uint64_t ns = 0, na = 0;
    for (uint64_t i = 0; i < n; i++) {
        ns += (t->flags[i] & TF_SPECIAL) != 0;
        na += (t->flags[i] & TF_ADDED) != 0;
    }
    t->special_ids = malloc((size_t)(ns ? ns : 1) * sizeof *t->special_ids);
    t->added_ids = malloc((size_t)(na ? na : 1) * sizeof *t->added_ids);
    if (!t->special_ids || !t->added_ids) return nomem(err, file);
    for (uint64_t i = 0; i < n; i++) {
        if (t->flags[i] & TF_SPECIAL) t->special_ids[t->n_special++] = (uint32_t)i;
        if (t->flags[i] & TF_ADDED) t->added_ids[t->n_added++] = (uint32_t)i;
    }
    free(t->flags);
    t->flags = NULL;
    return QM_OK;
}

/* Lowest id whose string is exactly s[0..len), or -1. A handful of calls per load, so a scan is enough. */
static int64_t find_token(const qc_tokenizer *t, const char *s, size_t len)
{
    for (uint64_t i = 0; i < t->n_tokens; i++)
        if (t->token_lens[i] == len && memcmp(t->tokens[i], s, len) == 0) return (int64_t)i;
    return -1;
}

/* ---------------------------------------------------------------------------------------------- */
/* merges */

static qm_status push_merge(qc_tokenizer *t, const char *file, const char *a, size_t alen, const char *b,
                            size_t blen, qm_error *err);

/* Append merge (a, b) after checking, as HF's BPE builder does, that a, b and a+b are in `vocab`. */
static qm_status add_merge(qc_tokenizer *t, const char *file, const char *field, uint64_t offset,
                           const json_t *vocab, const char *a, size_t alen, const char *b, size_t blen,
                           char **scratch, size_t *scratch_cap, qm_error *err)
{
    if (alen == 0 || blen == 0)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, field, offset, "merge %llu has an empty part",
                       (unsigned long long)t->n_merges);
    /* "left right" cannot carry a part that holds a space. */
    if (memchr(a, ' ', alen) || memchr(b, ' ', blen))
        return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, offset,
                       "merge %llu has a part containing a space", (unsigned long long)t->n_merges);
    if (alen > QC_TOKENIZER_MAX_TOKEN || blen > QC_TOKENIZER_MAX_TOKEN)
        return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, offset, "merge %llu has a part above %u bytes",
                       (unsigned long long)t->n_merges, QC_TOKENIZER_MAX_TOKEN);
    size_t mlen = alen + 1 + blen;
    if (*scratch_cap < mlen + 1) {
        char *p = realloc(*scratch, mlen + 1);
        if (!p) return nomem(err, file);
        *scratch = p;
        *scratch_cap = mlen + 1;
    }
    char *sc = *scratch;
    const char *parts[3] = { a, b, sc };
    size_t lens[3] = { alen, blen, alen + blen };
    memcpy(sc, a, alen);
    memcpy(sc + alen, b, blen);
    for (int k = 0; k < 3; k++) {
        if (!json_object_getn(vocab, parts[k], lens[k]))
            return qm_fail(err, QM_ERR_BAD_SOURCE, file, field, offset,
                           "merge %llu (\"%.*s %.*s\"): \"%.*s\" is not in the vocabulary",
                           (unsigned long long)t->n_merges, (int)(alen > 40 ? 40 : alen), a,
                           (int)(blen > 40 ? 40 : blen), b, (int)(lens[k] > 80 ? 80 : lens[k]), parts[k]);
    }
    return push_merge(t, file, a, alen, b, blen, err);
}

/* Append "a b" to the merge list (the caller has checked the parts). */
static qm_status push_merge(qc_tokenizer *t, const char *file, const char *a, size_t alen, const char *b,
                            size_t blen, qm_error *err)
{
    size_t mlen = alen + 1 + blen;
    if (t->n_merges == t->merges_cap) {
        uint64_t nc = t->merges_cap ? t->merges_cap * 2 : 256;
        char **m = realloc(t->merges, (size_t)nc * sizeof *m);
        if (!m) return nomem(err, file);
        t->merges = m;
        size_t *ml = realloc(t->merge_lens, (size_t)nc * sizeof *ml);
        if (!ml) return nomem(err, file);
        t->merge_lens = ml;
        t->merges_cap = nc;
    }
    char *m = malloc(mlen + 1);
    if (!m) return nomem(err, file);
    memcpy(m, a, alen);
    m[alen] = ' ';
    memcpy(m + alen + 1, b, blen);
    m[mlen] = '\0';
    t->merges[t->n_merges] = m;
    t->merge_lens[t->n_merges] = mlen;
    t->n_merges++;
    return QM_OK;
}

/* model.merges of a tokenizer.json: ["a b", …] (older) or [["a", "b"], …] (newer). */
static qm_status json_merges(qc_tokenizer *t, const char *file, const json_t *model, const json_t *vocab,
                             qm_error *err)
{
    const json_t *merges = json_object_get(model, "merges");
    if (!merges || json_is_null(merges)) return QM_OK;
    if (!json_is_array(merges))
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "model.merges", QM_NO_OFFSET, "is not an array");
    char *scratch = NULL;
    size_t scratch_cap = 0;
    qm_status s = QM_OK;
    for (size_t i = 0; i < json_array_size(merges) && s == QM_OK; i++) {
        const json_t *e = json_array_get(merges, i);
        char fld[48];
        snprintf(fld, sizeof fld, "model.merges[%zu]", i);
        if (json_is_string(e)) {
            const char *str = json_string_value(e);
            size_t len = json_string_length(e);
            const char *sp = memchr(str, ' ', len);
            if (!sp || memchr(sp + 1, ' ', len - (size_t)(sp + 1 - str))) {
                s = qm_fail(err, QM_ERR_BAD_SOURCE, file, fld, QM_NO_OFFSET,
                            "merge \"%.60s\" is not two space-separated parts", str);
                break;
            }
            s = add_merge(t, file, fld, QM_NO_OFFSET, vocab, str, (size_t)(sp - str), sp + 1,
                          len - (size_t)(sp + 1 - str), &scratch, &scratch_cap, err);
        } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
                   json_is_string(json_array_get(e, 1))) {
            const json_t *a = json_array_get(e, 0), *b = json_array_get(e, 1);
            s = add_merge(t, file, fld, QM_NO_OFFSET, vocab, json_string_value(a), json_string_length(a),
                          json_string_value(b), json_string_length(b), &scratch, &scratch_cap, err);
        } else {
            s = qm_fail(err, QM_ERR_BAD_SOURCE, file, fld, QM_NO_OFFSET,
                        "is neither a string \"a b\" nor an array of two strings");
        }
    }
    free(scratch);
    return s;
}

/* Calls fn(ctx, line, len, offset, lineno) for each line; a trailing "\r" is dropped, and empty lines at
 * the end of the file are not passed. A leading UTF-8 byte-order mark is skipped. */
typedef qm_status (*line_fn)(void *ctx, const char *line, size_t len, uint64_t offset, uint64_t lineno,
                             qm_error *err);

static qm_status for_each_line(const char *buf, size_t size, void *ctx, line_fn fn, qm_error *err)
{
    size_t pos = 0;
    if (size >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) pos = 3;
    /* Trailing empty lines are formatting, not entries. */
    size_t end = size;
    while (end > pos && (buf[end - 1] == '\n' || buf[end - 1] == '\r')) end--;
    uint64_t lineno = 1;
    while (pos < end) {
        const char *nl = memchr(buf + pos, '\n', end - pos);
        size_t stop = nl ? (size_t)(nl - buf) : end;
        size_t len = stop - pos;
        if (len > 0 && buf[pos + len - 1] == '\r') len--;
        qm_status s = fn(ctx, buf + pos, len, pos, lineno, err);
        if (s != QM_OK) return s;
        pos = stop + 1;
        lineno++;
    }
    return QM_OK;
}

typedef struct merges_ctx {
    qc_tokenizer *t;
    const char *file;
    const json_t *vocab;
    char *scratch;
    size_t scratch_cap;
} merges_ctx;

static qm_status merges_line(void *vctx, const char *line, size_t len, uint64_t off, uint64_t lineno,
                             qm_error *err)
{
    merges_ctx *c = vctx;
    char fld[48];
    snprintf(fld, sizeof fld, "line %llu", (unsigned long long)lineno);
    if (lineno == 1 && len >= 8 && memcmp(line, "#version", 8) == 0) return QM_OK;
    if (!qm_utf8_valid(line, len, false))
        return qm_fail(err, QM_ERR_BAD_SOURCE, c->file, fld, off, "not valid UTF-8 (or holds a NUL byte)");
    if (len == 0)
        return qm_fail(err, QM_ERR_BAD_SOURCE, c->file, fld, off, "empty line among the merges");
    size_t parts = 1;
    for (size_t i = 0; i < len; i++) parts += line[i] == ' ';
    const char *sp = memchr(line, ' ', len);
    if (parts != 2 || sp == line || sp == line + len - 1)
        return qm_fail(err, QM_ERR_BAD_SOURCE, c->file, fld, off,
                       "expected two space-separated parts, found %zu", parts);
    return add_merge(c->t, c->file, fld, off, c->vocab, line, (size_t)(sp - line), sp + 1,
                     len - (size_t)(sp + 1 - line), &c->scratch, &c->scratch_cap, err);
}

/* ---------------------------------------------------------------------------------------------- */
/* pre-split pattern */

/* Refuse a pattern PCRE2 cannot compile now, rather than ship it to a runtime that would. */
static qm_status check_pattern(const char *file, const char *field, const char *pat, size_t len, qm_error *err)
{
    int code;
    PCRE2_SIZE eoff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, PCRE2_UTF | PCRE2_UCP, &code, &eoff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        if (pcre2_get_error_message(code, msg, sizeof msg) < 0) snprintf((char *)msg, sizeof msg, "error %d", code);
        return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET,
                       "pattern does not compile with PCRE2 at pattern offset %zu: %s", (size_t)eoff,
                       (const char *)msg);
    }
    pcre2_code_free(re);
    return QM_OK;
}

static qm_status set_pre_split(qc_tokenizer *t, const char *file, const char *field, const char *pat,
                               size_t len, qm_error *err)
{
    qm_status s = check_pattern(file, field, pat, len, err);
    if (s != QM_OK) return s;
    t->pre_split = malloc(len + 1);
    if (!t->pre_split) return nomem(err, file);
    memcpy(t->pre_split, pat, len);
    t->pre_split[len] = '\0';
    t->pre_split_len = len;
    return QM_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* tokenizer.json pipeline: normalizer, pre_tokenizer, decoder, post_processor */

typedef struct pipeline {
    bool pre_bytelevel, pre_bytelevel_regex, pre_metaspace;
    bool norm_replace_space, norm_prepend;
    bool dec_bytelevel, dec_metaspace;
    const json_t *split_regex;       /* the string of a Split pre-tokenizer's {"Regex": …} */
    const char *ws_pattern;          /* Whitespace / WhitespaceSplit */
    const char *split_field;
} pipeline;

static bool json_str_eq(const json_t *v, const char *s)
{
    return json_is_string(v) && json_string_length(v) == strlen(s) && memcmp(json_string_value(v), s, strlen(s)) == 0;
}

static qm_status append_normalizer(qc_tokenizer *t, const char *file, const char *name, qm_error *err)
{
    size_t old = t->normalizer ? strlen(t->normalizer) : 0, add = strlen(name);
    char *p = realloc(t->normalizer, old + (old ? 1 : 0) + add + 1);
    if (!p) return nomem(err, file);
    if (old) p[old++] = ',';
    memcpy(p + old, name, add + 1);
    t->normalizer = p;
    return QM_OK;
}

static qm_status walk_normalizer(qc_tokenizer *t, pipeline *p, const char *file, const json_t *n,
                                 const char *field, int depth, qm_error *err)
{
    if (!n || json_is_null(n)) return QM_OK;
    if (!json_is_object(n) || depth > MAX_DEPTH)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, field, QM_NO_OFFSET, "is not a normalizer object");
    const char *type = json_type_name(n);
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list))
            return qm_fail(err, QM_ERR_BAD_SOURCE, file, field, QM_NO_OFFSET, "Sequence without \"normalizers\"");
        for (size_t i = 0; i < json_array_size(list); i++) {
            char fld[64];
            snprintf(fld, sizeof fld, "%.40s[%zu]", field, i);
            qm_status s = walk_normalizer(t, p, file, json_array_get(list, i), fld, depth + 1, err);
            if (s != QM_OK) return s;
        }
        return QM_OK;
    }
    static const char *const unicode[] = { "NFC", "nfc", "NFD", "nfd", "NFKC", "nfkc", "NFKD", "nfkd",
                                           "Lowercase", "lowercase" };
    for (size_t i = 0; i < sizeof unicode / sizeof unicode[0]; i += 2)
        if (strcmp(type, unicode[i]) == 0) return append_normalizer(t, file, unicode[i + 1], err);
    /* sentencepiece's space handling, as HF writes it for Llama-style tokenizers */
    if (strcmp(type, "Prepend") == 0 && json_str_eq(json_object_get(n, "prepend"), k_metaspace)) {
        p->norm_prepend = true;
        return QM_OK;
    }
    if (strcmp(type, "Replace") == 0 &&
        json_str_eq(json_object_get(json_object_get(n, "pattern"), "String"), " ") &&
        json_str_eq(json_object_get(n, "content"), k_metaspace)) {
        p->norm_replace_space = true;
        return QM_OK;
    }
    return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET,
                   "normalizer type \"%.40s\" (with these settings) is not supported", type);
}

/* A Split on a literal string that contains a space, after a normalizer that has replaced every space by
 * U+2581 (Gemma's tokenizer.json), finds nothing to split at: whatever its behavior, each text piece stays
 * whole, as if there were no Split. The normalizers are walked before the pre-tokenizer. */
static bool split_never_matches(const pipeline *p, const json_t *literal)
{
    return p->norm_replace_space && json_is_string(literal) &&
           memchr(json_string_value(literal), ' ', json_string_length(literal)) != NULL;
}

static qm_status walk_pre(qc_tokenizer *t, pipeline *p, const char *file, const json_t *n, const char *field,
                          int depth, qm_error *err)
{
    if (!n || json_is_null(n)) return QM_OK;
    if (!json_is_object(n) || depth > MAX_DEPTH)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, field, QM_NO_OFFSET, "is not a pre-tokenizer object");
    const char *type = json_type_name(n);
    qm_status s;
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "pretokenizers");
        if (!json_is_array(list))
            return qm_fail(err, QM_ERR_BAD_SOURCE, file, field, QM_NO_OFFSET, "Sequence without \"pretokenizers\"");
        for (size_t i = 0; i < json_array_size(list); i++) {
            char fld[64];
            snprintf(fld, sizeof fld, "%.40s[%zu]", field, i);
            s = walk_pre(t, p, file, json_array_get(list, i), fld, depth + 1, err);
            if (s != QM_OK) return s;
        }
        return QM_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        tri use_regex, aps;
        if ((s = get_tri(file, n, "use_regex", field, &use_regex, err)) != QM_OK) return s;
        if ((s = get_tri(file, n, "add_prefix_space", field, &aps, err)) != QM_OK) return s;
        p->pre_bytelevel = true;
        if (use_regex != 0) p->pre_bytelevel_regex = true;
        if (aps >= 0) t->add_prefix_space = aps;
        return QM_OK;
    }
    if (strcmp(type, "Split") == 0) {
        const json_t *pat = json_object_get(n, "pattern");
        const json_t *rx = json_object_get(pat, "Regex");
        tri invert;
        if ((s = get_tri(file, n, "invert", field, &invert, err)) != QM_OK) return s;
        if (invert == 1)
            return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET, "Split with invert is not supported");
        if (split_never_matches(p, json_object_get(pat, "String"))) return QM_OK;
        if (!json_is_string(rx))
            return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET,
                           "Split pre-tokenizer without a {\"Regex\": …} pattern");
        if (!json_str_eq(json_object_get(n, "behavior"), "Isolated"))
            return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET,
                           "Split behavior other than \"Isolated\" is not supported");
        if (p->split_regex)
            return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET, "more than one Split pre-tokenizer");
        p->split_regex = rx;
        p->split_field = "pre_tokenizer.pattern.Regex";
        return QM_OK;
    }
    if (strcmp(type, "Metaspace") == 0) {
        const json_t *rep = json_object_get(n, "replacement");
        if (rep && !json_str_eq(rep, k_metaspace))
            return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET,
                           "Metaspace replacement other than U+2581 is not supported");
        tri split, aps;
        if ((s = get_tri(file, n, "split", field, &split, err)) != QM_OK) return s;
        if ((s = get_tri(file, n, "add_prefix_space", field, &aps, err)) != QM_OK) return s;
        /* split (the default before tokenizers 0.15 added the flag) cuts the text at every U+2581, which
         * sentencepiece BPE does not do; it belongs to Unigram tokenizers. */
        if (split != 0)
            return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET,
                           "Metaspace with \"split\": true (or absent) is not supported");
        const json_t *scheme = json_object_get(n, "prepend_scheme");
        if (scheme && !json_is_null(scheme)) {
            static const char *const schemes[] = { "always", "first", "never" };
            size_t k = 0;
            while (k < 3 && !json_str_eq(scheme, schemes[k])) k++;
            if (k == 3)
                return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET, "unknown prepend_scheme");
            t->prepend_scheme = schemes[k];
            if (aps < 0) aps = k != 2;
        }
        if (aps >= 0) t->add_prefix_space = aps;
        p->pre_metaspace = true;
        return QM_OK;
    }
    if (strcmp(type, "Whitespace") == 0 || strcmp(type, "WhitespaceSplit") == 0) {
        if (p->ws_pattern)
            return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET, "more than one whitespace pre-tokenizer");
        p->ws_pattern = strcmp(type, "Whitespace") == 0 ? k_whitespace_pattern : k_whitespace_split_pattern;
        return QM_OK;
    }
    return qm_fail(err, QM_ERR_UNSUPPORTED, file, field, QM_NO_OFFSET,
                   "pre-tokenizer type \"%.40s\" is not supported", type);
}

/* Decoders only hint at the kind (a tokenizer.json may state byte-level-ness only there); unknown ones are
 * ignored because decoding rules follow from the kind. */
static void walk_decoder(pipeline *p, const json_t *n, int depth)
{
    if (!json_is_object(n) || depth > MAX_DEPTH) return;
    const char *type = json_type_name(n);
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "decoders");
        for (size_t i = 0; i < json_array_size(list); i++) walk_decoder(p, json_array_get(list, i), depth + 1);
    } else if (strcmp(type, "ByteLevel") == 0) {
        p->dec_bytelevel = true;
    } else if (strcmp(type, "Metaspace") == 0) {
        p->dec_metaspace = true;
    } else if (strcmp(type, "Replace") == 0 &&
               json_str_eq(json_object_get(json_object_get(n, "pattern"), "String"), k_metaspace)) {
        p->dec_metaspace = true;
    }
}

static void claim_name(sp_claim *c, const char *field, const char *name, size_t len)
{
    if (c->set) return;
    c->set = true;
    c->by_id = false;
    c->name = name;
    c->name_len = len;
    snprintf(c->field, sizeof c->field, "%s", field);
}

static void claim_id(sp_claim *c, const char *field, uint32_t id)
{
    if (c->set) return;
    c->set = true;
    c->by_id = true;
    c->id = id;
    snprintf(c->field, sizeof c->field, "%s", field);
}

/* A processor's special token: its single id from special_tokens when given, else its name. */
static void claim_template_token(sp_claim *c, const json_t *proc, const json_t *name)
{
    if (!json_is_string(name)) return;
    const json_t *ids = json_object_get(json_object_get(json_object_get(proc, "special_tokens"),
                                                        json_string_value(name)), "ids");
    if (json_array_size(ids) == 1 && json_is_integer(json_array_get(ids, 0))) {
        json_int_t v = json_integer_value(json_array_get(ids, 0));
        if (v >= 0 && v <= (json_int_t)UINT32_MAX) { claim_id(c, "post_processor", (uint32_t)v); return; }
    }
    claim_name(c, "post_processor", json_string_value(name), json_string_length(name));
}

/* bos/eos and add_bos/add_eos from the post-processor: in the single-sequence template, a special token
 * before $A is the bos, one after it the eos (Roberta/Bert processors: cls and sep). */
static void walk_processor(sp_claim *claims, const json_t *n, int depth,
                           tri *add_bos, tri *add_eos)
{
    if (!json_is_object(n) || depth > MAX_DEPTH) return;
    const char *type = json_type_name(n);
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(n, "processors");
        for (size_t i = 0; i < json_array_size(list); i++)
            walk_processor(claims, json_array_get(list, i), depth + 1, add_bos, add_eos);
    } else if (strcmp(type, "TemplateProcessing") == 0) {
        const json_t *single = json_object_get(n, "single");
        if (!json_is_array(single)) return;
        bool seen_a = false;
        const json_t *before = NULL, *after = NULL;
        for (size_t i = 0; i < json_array_size(single); i++) {
            const json_t *piece = json_array_get(single, i);
            const json_t *st = json_object_get(json_object_get(piece, "SpecialToken"), "id");
            if (json_object_get(piece, "Sequence")) seen_a = true;
            else if (st && !seen_a && !before) before = st;
            else if (st && seen_a) after = st;
        }
        *add_bos = before != NULL;
        *add_eos = after != NULL;
        if (before) claim_template_token(&claims[SP_BOS], n, before);
        if (after) claim_template_token(&claims[SP_EOS], n, after);
    } else if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        const json_t *cls = json_object_get(n, "cls"), *sep = json_object_get(n, "sep");
        const json_t *cid = json_array_get(cls, 1), *sid = json_array_get(sep, 1);
        if (json_is_integer(cid) && json_integer_value(cid) >= 0 && json_integer_value(cid) <= (json_int_t)UINT32_MAX) {
            claim_id(&claims[SP_BOS], "post_processor.cls", (uint32_t)json_integer_value(cid));
            *add_bos = 1;
        }
        if (json_is_integer(sid) && json_integer_value(sid) >= 0 && json_integer_value(sid) <= (json_int_t)UINT32_MAX) {
            claim_id(&claims[SP_EOS], "post_processor.sep", (uint32_t)json_integer_value(sid));
            *add_eos = 1;
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* tokenizer_config.json / special_tokens_map.json */

typedef struct side_files {
    json_t *config;                  /* tokenizer_config.json, or NULL */
    json_t *map;                     /* special_tokens_map.json, or NULL */
    char *config_path, *map_path;
    uint64_t json_limit;             /* --json-limit in bytes (0: the default caps), for every file read */
} side_files;

static void side_free(side_files *sf)
{
    json_decref(sf->config);
    json_decref(sf->map);
    free(sf->config_path);
    free(sf->map_path);
}

static qm_status side_load(const char *path, uint64_t json_limit, side_files *sf, qm_error *err)
{
    memset(sf, 0, sizeof *sf);
    sf->json_limit = json_limit;
    sf->config_path = sibling(path, "tokenizer_config.json");
    sf->map_path = sibling(path, "special_tokens_map.json");
    if (!sf->config_path || !sf->map_path) return nomem(err, path);
    qm_status s;
    /* qmap reads only strings, booleans and objects from these two: integers are decoded as reals, so one
     * out of jansson's range (real Llama configs hold "model_max_length": int(1e30)) cannot fail the load */
    if (is_regular_file(sf->config_path) &&
        (s = load_json(sf->config_path, json_limit, JSON_DECODE_INT_AS_REAL, &sf->config, err)) != QM_OK)
        return s;
    if (is_regular_file(sf->map_path) && (s = load_json(sf->map_path, json_limit, JSON_DECODE_INT_AS_REAL, &sf->map, err)) != QM_OK)
        return s;
    if (sf->config && !json_is_object(sf->config))
        return qm_fail(err, QM_ERR_BAD_SOURCE, sf->config_path, NULL, QM_NO_OFFSET, "is not a JSON object");
    if (sf->map && !json_is_object(sf->map))
        return qm_fail(err, QM_ERR_BAD_SOURCE, sf->map_path, NULL, QM_NO_OFFSET, "is not a JSON object");
    return QM_OK;
}

/* "bos_token": "<s>" or {"content": "<s>", …}; null means "none" and states nothing. */
static qm_status side_claims(const json_t *root, const char *path, sp_claim *claims, qm_error *err)
{
    if (!root) return QM_OK;
    for (int k = 0; k < SP_N; k++) {
        char key[16];
        snprintf(key, sizeof key, "%s_token", k_sp_names[k]);
        const json_t *v = json_object_get(root, key);
        if (!v || json_is_null(v)) continue;
        if (json_is_object(v)) v = json_object_get(v, "content");
        if (!json_is_string(v))
            return qm_fail(err, QM_ERR_BAD_SOURCE, path, key, QM_NO_OFFSET,
                           "is neither a string nor an object with a string \"content\"");
        claim_name(&claims[k], key, json_string_value(v), json_string_length(v));
    }
    return QM_OK;
}

/* chat_template of tokenizer_config.json (kept for servers, which recognise it): a string, or a list of
 * {"name", "template"} of which the one named "default" is kept. Other shapes are a bad source. */
static qm_status config_chat_template(qc_tokenizer *t, const side_files *sf, qm_error *err)
{
    const json_t *v = sf->config ? json_object_get(sf->config, "chat_template") : NULL;
    if (!v || json_is_null(v)) return QM_OK;
    if (json_is_array(v)) {
        const json_t *found = NULL, *e;
        size_t i;
        json_array_foreach((json_t *)v, i, e) {
            const json_t *name = json_object_get(e, "name");
            if (json_is_string(name) && !strcmp(json_string_value(name), "default")) found = json_object_get(e, "template");
        }
        if (!found) return QM_OK;   /* only named variants (tool use, RAG): none is the plain chat */
        v = found;
    }
    if (!json_is_string(v))
        return qm_fail(err, QM_ERR_BAD_SOURCE, sf->config_path, "chat_template", QM_NO_OFFSET,
                       "is neither a string nor a list of {\"name\", \"template\"}");
    t->chat_template_len = json_string_length(v);
    t->chat_template = malloc(t->chat_template_len + 1);
    if (!t->chat_template) return nomem(err, sf->config_path);
    memcpy(t->chat_template, json_string_value(v), t->chat_template_len + 1);
    return QM_OK;
}

/* added_tokens_decoder of tokenizer_config.json ({"50256": {"content": …, "special": …}}): the added tokens
 * of a slow tokenizer, which has no tokenizer.json to list them. */
static qm_status config_added_tokens(qc_tokenizer *t, const side_files *sf, qm_error *err)
{
    const json_t *dec = sf->config ? json_object_get(sf->config, "added_tokens_decoder") : NULL;
    if (!dec || json_is_null(dec)) return QM_OK;
    const char *file = sf->config_path;
    if (!json_is_object(dec))
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "added_tokens_decoder", QM_NO_OFFSET, "is not an object");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)dec, key, v) {
        char fld[64];
        snprintf(fld, sizeof fld, "added_tokens_decoder[%.40s]", key);
        char *end;
        errno = 0;
        long long id = strtoll(key, &end, 10);
        const json_t *content = json_object_get(v, "content");
        if (!*key || *end || errno || !json_is_string(content))
            return qm_fail(err, QM_ERR_BAD_SOURCE, file, fld, QM_NO_OFFSET,
                           "expected a decimal id mapping to {\"content\": string}");
        tri special;
        qm_status s = get_tri(file, v, "special", fld, &special, err);
        if (s != QM_OK) return s;
        s = put_token(t, file, fld, id, json_string_value(content), json_string_length(content),
                      (uint8_t)(TF_ADDED | (special == 1 ? TF_SPECIAL : 0)), err);
        if (s != QM_OK) return s;
    }
    return QM_OK;
}

static size_t config_added_count(const side_files *sf)
{
    const json_t *dec = sf->config ? json_object_get(sf->config, "added_tokens_decoder") : NULL;
    return json_is_object(dec) ? json_object_size(dec) : 0;
}

/* Resolve bos/eos/unk/pad: for each, the first of the config files, the tokenizer's own statements
 * (already in `claims`), then (`by_name`) a conventional name among the tokens. A named token must exist. */
static qm_status resolve_specials(qc_tokenizer *t, const char *file, const side_files *sf,
                                  const sp_claim *own, bool by_name, qm_error *err)
{
    sp_claim from_config[SP_N], from_map[SP_N];
    memset(from_config, 0, sizeof from_config);
    memset(from_map, 0, sizeof from_map);
    qm_status s = side_claims(sf->config, sf->config_path, from_config, err);
    if (s != QM_OK) return s;
    s = side_claims(sf->map, sf->map_path, from_map, err);
    if (s != QM_OK) return s;

    static const char *const fallback[SP_N][2] = {
        { "<s>", "<|endoftext|>" }, { "</s>", "<|endoftext|>" }, { "<unk>", NULL }, { "<pad>", NULL },
    };
    for (int k = 0; k < SP_N; k++) {
        const sp_claim *c = from_config[k].set ? &from_config[k] : from_map[k].set ? &from_map[k]
                          : own[k].set ? &own[k] : NULL;
        const char *cfile = c && c == &from_config[k] ? sf->config_path
                          : c && c == &from_map[k] ? sf->map_path : file;
        if (c && c->by_id) {
            if (c->id >= t->n_tokens)
                return qm_fail(err, QM_ERR_BAD_SOURCE, cfile, c->field, QM_NO_OFFSET,
                               "%s token id %u is not below the vocabulary size %llu", k_sp_names[k], c->id,
                               (unsigned long long)t->n_tokens);
            t->has_sp[k] = true;
            t->sp[k] = c->id;
        } else if (c) {
            int64_t id = find_token(t, c->name, c->name_len);
            if (id < 0)
                return qm_fail(err, QM_ERR_BAD_SOURCE, cfile, c->field, QM_NO_OFFSET,
                               "%s token \"%.60s\" is not in the vocabulary", k_sp_names[k], c->name);
            t->has_sp[k] = true;
            t->sp[k] = (uint32_t)id;
        } else if (by_name) {
            for (int j = 0; j < 2 && !t->has_sp[k] && fallback[k][j]; j++) {
                int64_t id = find_token(t, fallback[k][j], strlen(fallback[k][j]));
                if (id >= 0) { t->has_sp[k] = true; t->sp[k] = (uint32_t)id; }
            }
        }
    }
    if (sf->config) {
        tri v;
        if ((s = get_tri(sf->config_path, sf->config, "add_bos_token", "add_bos_token", &v, err)) != QM_OK) return s;
        if (v >= 0) t->add_bos = v;
        if ((s = get_tri(sf->config_path, sf->config, "add_eos_token", "add_eos_token", &v, err)) != QM_OK) return s;
        if (v >= 0) t->add_eos = v;
    }
    return QM_OK;
}

static qm_status set_source(qc_tokenizer *t, const char *const *paths, size_t n, qm_error *err)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) if (paths[i]) len += strlen(base_name(paths[i])) + 1;
    t->source = malloc(len + 1);
    if (!t->source) return nomem(err, paths[0]);
    t->source[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (!paths[i]) continue;
        if (t->source[0]) strcat(t->source, ",");
        strcat(t->source, base_name(paths[i]));
    }
    return QM_OK;
}

static qm_status set_source_with_sides(qc_tokenizer *t, const char *main1, const char *main2,
                                       const side_files *sf, qm_error *err)
{
    const char *paths[4] = { main1, main2, sf->config ? sf->config_path : NULL, sf->map ? sf->map_path : NULL };
    return set_source(t, paths, 4, err);
}

/* ---------------------------------------------------------------------------------------------- */
/* the three source kinds */

/* model and model.type of a tokenizer.json; *bpe tells BPE from WordLevel, the only two supported. */
static qm_status hf_model_type(const char *path, const json_t *root, const json_t **model_out, bool *bpe,
                               qm_error *err)
{
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        return qm_fail(err, QM_ERR_BAD_SOURCE, path, "model", QM_NO_OFFSET, "missing or not an object");
    const char *type = json_string_value(json_object_get(model, "type"));
    /* Files written before "type" was serialised are recognised by their merges. */
    if (!type && json_object_get(model, "merges")) type = "BPE";
    if (!type) return qm_fail(err, QM_ERR_BAD_SOURCE, path, "model.type", QM_NO_OFFSET, "missing");
    *bpe = strcmp(type, "BPE") == 0;
    if (!*bpe && strcmp(type, "WordLevel") != 0)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "model.type", QM_NO_OFFSET,
                       "tokenizer model type \"%.40s\" is not supported (only BPE and WordLevel)", type);
    *model_out = model;
    return QM_OK;
}

static qm_status hf_put_added_tokens(qc_tokenizer *t, const char *path, const json_t *added, qm_error *err)
{
    qm_status s;
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        char fld[48];
        snprintf(fld, sizeof fld, "added_tokens[%zu]", i);
        const json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        if (!json_is_integer(id) || !json_is_string(content))
            return qm_fail(err, QM_ERR_BAD_SOURCE, path, fld, QM_NO_OFFSET,
                           "needs an integer \"id\" and a string \"content\"");
        tri special;
        if ((s = get_tri(path, a, "special", fld, &special, err)) != QM_OK) return s;
        if ((s = put_token(t, path, fld, json_integer_value(id), json_string_value(content),
                           json_string_length(content), (uint8_t)(TF_ADDED | (special == 1 ? TF_SPECIAL : 0)),
                           err)) != QM_OK)
            return s;
    }
    return QM_OK;
}

/* Every token of model.vocab and added_tokens into t's slots; *vocab_out is model.vocab for the merges. */
static qm_status hf_load_tokens(qc_tokenizer *t, const char *path, const json_t *root, const json_t *model,
                                const json_t **vocab_out, qm_error *err)
{
    qm_status s;
    const json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab))
        return qm_fail(err, QM_ERR_BAD_SOURCE, path, "model.vocab", QM_NO_OFFSET, "missing or not an object");
    const json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added))
        return qm_fail(err, QM_ERR_BAD_SOURCE, path, "added_tokens", QM_NO_OFFSET, "is not an array");
    if ((s = check_vocab_count(vocab, path, "model.vocab", err)) != QM_OK) return s;
    if ((s = alloc_slots(t, (uint64_t)json_object_size(vocab) + json_array_size(added), path, err)) != QM_OK)
        return s;

    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)vocab, key, v) {
        char fld[64];
        snprintf(fld, sizeof fld, "model.vocab[\"%.40s\"]", key);
        if (!json_is_integer(v))
            return qm_fail(err, QM_ERR_BAD_SOURCE, path, fld, QM_NO_OFFSET, "id is not an integer");
        if ((s = put_token(t, path, fld, json_integer_value(v), key, strlen(key), 0, err)) != QM_OK) return s;
    }
    if ((s = hf_put_added_tokens(t, path, added, err)) != QM_OK) return s;
    if ((s = finish_ids(t, path, err)) != QM_OK) return s;
    *vocab_out = vocab;
    return QM_OK;
}

/* Walks normalizer, pre_tokenizer, decoder and post_processor into p, the specials the file names into own. */
static qm_status hf_walk_pipeline(qc_tokenizer *t, const char *path, const json_t *root, const json_t *model,
                                  pipeline *p, sp_claim own[SP_N], qm_error *err)
{
    qm_status s;
    memset(own, 0, SP_N * sizeof own[0]);
    const json_t *unk = json_object_get(model, "unk_token");
    if (json_is_string(unk)) claim_name(&own[SP_UNK], "model.unk_token", json_string_value(unk),
                                        json_string_length(unk));

    memset(p, 0, sizeof *p);
    if ((s = walk_normalizer(t, p, path, json_object_get(root, "normalizer"), "normalizer", 0, err)) != QM_OK)
        return s;
    if ((s = walk_pre(t, p, path, json_object_get(root, "pre_tokenizer"), "pre_tokenizer", 0, err)) != QM_OK)
        return s;
    walk_decoder(p, json_object_get(root, "decoder"), 0);
    if (p->norm_prepend) t->add_prefix_space = 1;
    tri add_bos = -1, add_eos = -1;
    walk_processor(own, json_object_get(root, "post_processor"), 0, &add_bos, &add_eos);
    t->add_bos = add_bos;
    t->add_eos = add_eos;
    return QM_OK;
}

/* The BPE model's options; refuses those the encoder does not implement. */
static qm_status hf_bpe_options(qc_tokenizer *t, const char *path, const json_t *model, qm_error *err)
{
    qm_status s;
    const json_t *sfx = json_object_get(model, "end_of_word_suffix");
    const json_t *pfx = json_object_get(model, "continuing_subword_prefix");
    if ((json_is_string(sfx) && json_string_length(sfx) > 0) || (json_is_string(pfx) && json_string_length(pfx) > 0))
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "model", QM_NO_OFFSET,
                       "BPE with end_of_word_suffix or continuing_subword_prefix is not supported");
    const json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "model.dropout", QM_NO_OFFSET,
                       "BPE dropout is not supported");
    if ((s = get_tri(path, model, "byte_fallback", "model.byte_fallback", &t->byte_fallback, err)) != QM_OK)
        return s;
    return get_tri(path, model, "ignore_merges", "model.ignore_merges", &t->ignore_merges, err);
}

/* BPE is either byte-level (GPT-2 style) or sentencepiece-style (Metaspace, byte fallback), never both. */
static qm_status hf_setup_bpe(qc_tokenizer *t, const char *path, const json_t *model, const json_t *vocab,
                              const pipeline *p, qm_error *err)
{
    qm_status s;
    if ((s = hf_bpe_options(t, path, model, err)) != QM_OK) return s;
    if ((s = json_merges(t, path, model, vocab, err)) != QM_OK) return s;

    bool bytelevel = p->pre_bytelevel || (!p->pre_metaspace && p->dec_bytelevel);
    bool spiece = p->pre_metaspace || p->norm_replace_space || p->dec_metaspace || t->byte_fallback == 1;
    if (bytelevel && spiece)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "pre_tokenizer", QM_NO_OFFSET,
                       "BPE that is both byte-level and sentencepiece-style is not supported");
    if (!bytelevel && !spiece)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "pre_tokenizer", QM_NO_OFFSET,
                       "BPE with neither a ByteLevel nor a Metaspace/sentencepiece setup is not supported");
    if (p->ws_pattern)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "pre_tokenizer", QM_NO_OFFSET,
                       "Whitespace pre-tokenizers are only supported with WordLevel");
    if (bytelevel) {
        t->kind = "bpe_bytelevel";
        t->byte_fallback = -1;
        if (p->split_regex && p->pre_bytelevel_regex)
            return qm_fail(err, QM_ERR_UNSUPPORTED, path, "pre_tokenizer", QM_NO_OFFSET,
                           "a Split pre-tokenizer together with ByteLevel use_regex is not supported");
        if (p->split_regex)
            s = set_pre_split(t, path, p->split_field, json_string_value(p->split_regex),
                              json_string_length(p->split_regex), err);
        else if (p->pre_bytelevel_regex)
            s = set_pre_split(t, path, "pre_tokenizer", k_gpt2_pattern, strlen(k_gpt2_pattern), err);
        if (s != QM_OK) return s;
    } else {
        t->kind = "bpe_sentencepiece";
        if (p->split_regex)
            return qm_fail(err, QM_ERR_UNSUPPORTED, path, "pre_tokenizer", QM_NO_OFFSET,
                           "a Split pre-tokenizer with sentencepiece-style BPE is not supported");
        if (t->byte_fallback < 0) t->byte_fallback = 0;
    }
    if (t->ignore_merges < 0) t->ignore_merges = 0;
    return QM_OK;
}

/* WordLevel splits on a Split regex or a Whitespace pattern and has none of BPE's options. */
static qm_status hf_setup_wordlevel(qc_tokenizer *t, const char *path, const pipeline *p, qm_error *err)
{
    qm_status s = QM_OK;
    t->kind = "wordlevel";
    if (p->pre_bytelevel || p->pre_metaspace || p->norm_prepend || p->norm_replace_space)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "pre_tokenizer", QM_NO_OFFSET,
                       "WordLevel with ByteLevel or Metaspace processing is not supported");
    if (p->split_regex && p->ws_pattern)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "pre_tokenizer", QM_NO_OFFSET,
                       "Split together with a Whitespace pre-tokenizer is not supported");
    if (p->split_regex)
        s = set_pre_split(t, path, p->split_field, json_string_value(p->split_regex),
                          json_string_length(p->split_regex), err);
    else if (p->ws_pattern)
        s = set_pre_split(t, path, "pre_tokenizer", p->ws_pattern, strlen(p->ws_pattern), err);
    if (s != QM_OK) return s;
    t->add_prefix_space = -1;
    t->byte_fallback = -1;
    t->ignore_merges = -1;
    return QM_OK;
}

static qm_status load_hf_json(qc_tokenizer *t, const char *path, const json_t *root, const side_files *sf,
                              qm_error *err)
{
    qm_status s;
    const json_t *model = NULL, *vocab = NULL;
    bool bpe = false;
    if ((s = hf_model_type(path, root, &model, &bpe, err)) != QM_OK) return s;
    if ((s = hf_load_tokens(t, path, root, model, &vocab, err)) != QM_OK) return s;
    sp_claim own[SP_N];
    pipeline p;
    if ((s = hf_walk_pipeline(t, path, root, model, &p, own, err)) != QM_OK) return s;
    s = bpe ? hf_setup_bpe(t, path, model, vocab, &p, err) : hf_setup_wordlevel(t, path, &p, err);
    if (s != QM_OK) return s;
    if ((s = resolve_specials(t, path, sf, own, true, err)) != QM_OK) return s;
    return set_source_with_sides(t, path, NULL, sf, err);
}

static qm_status load_vocab_json(qc_tokenizer *t, const char *path, const json_t *vocab, const side_files *sf,
                                 qm_error *err)
{
    qm_status s;
    char *merges_path = sibling(path, "merges.txt");
    if (!merges_path) return nomem(err, path);
    if (!is_regular_file(merges_path)) {
        s = qm_fail(err, QM_ERR_BAD_SOURCE, path, NULL, QM_NO_OFFSET,
                    "a vocab.json needs a merges.txt beside it (GPT-2 BPE tokenizer)");
        free(merges_path);
        return s;
    }
    char *buf = NULL;
    size_t len = 0;
    merges_ctx mc = { t, merges_path, vocab, NULL, 0 };
    s = check_vocab_count(vocab, path, NULL, err);
    if (s == QM_OK) s = alloc_slots(t, (uint64_t)json_object_size(vocab) + config_added_count(sf), path, err);
    const char *key;
    const json_t *v;
    if (s == QM_OK) {
        json_object_foreach((json_t *)vocab, key, v) {
            char fld[64];
            snprintf(fld, sizeof fld, "[\"%.40s\"]", key);
            if (!json_is_integer(v)) {
                s = qm_fail(err, QM_ERR_BAD_SOURCE, path, fld, QM_NO_OFFSET, "id is not an integer");
                break;
            }
            /* GPT-2's one special token is part of vocab.json itself. */
            uint8_t fl = strcmp(key, "<|endoftext|>") == 0 ? TF_ADDED | TF_SPECIAL : 0;
            if ((s = put_token(t, path, fld, json_integer_value(v), key, strlen(key), fl, err)) != QM_OK) break;
        }
    }
    if (s == QM_OK) s = config_added_tokens(t, sf, err);
    if (s == QM_OK) s = finish_ids(t, path, err);
    if (s == QM_OK) s = read_whole(merges_path, sf->json_limit, &buf, &len, err);
    if (s == QM_OK) s = for_each_line(buf, len, &mc, merges_line, err);
    if (s == QM_OK) {
        t->kind = "bpe_bytelevel";
        t->ignore_merges = 0;
        s = set_pre_split(t, path, "pre_split", k_gpt2_pattern, strlen(k_gpt2_pattern), err);
    }
    /* A slow GPT-2 tokenizer keeps its add_prefix_space in the config (tokenizer.json states its own). */
    if (s == QM_OK && sf->config) {
        s = get_tri(sf->config_path, sf->config, "add_prefix_space", "add_prefix_space", &t->add_prefix_space,
                    err);
    }
    if (s == QM_OK) {
        sp_claim none[SP_N];
        memset(none, 0, sizeof none);
        s = resolve_specials(t, path, sf, none, true, err);
    }
    if (s == QM_OK) s = set_source_with_sides(t, path, merges_path, sf, err);
    free(mc.scratch);
    free(buf);
    free(merges_path);
    return s;
}

typedef struct list_ctx {
    qc_tokenizer *t;
    const char *file;
} list_ctx;

static qm_status list_line(void *vctx, const char *line, size_t len, uint64_t off, uint64_t lineno,
                           qm_error *err)
{
    list_ctx *c = vctx;
    char fld[48];
    snprintf(fld, sizeof fld, "line %llu", (unsigned long long)lineno);
    if (len > QC_TOKENIZER_MAX_TOKEN)
        return qm_fail(err, QM_ERR_UNSUPPORTED, c->file, fld, off, "token is %zu bytes long, above the %u-byte cap",
                       len, QC_TOKENIZER_MAX_TOKEN);
    if (!qm_utf8_valid(line, len, false))
        return qm_fail(err, QM_ERR_BAD_SOURCE, c->file, fld, off, "token is not valid UTF-8 (or holds a NUL byte)");
    if (len == 0)
        return qm_fail(err, QM_ERR_BAD_SOURCE, c->file, fld, off, "empty line: every line must hold a token");
    return put_token(c->t, c->file, fld, (int64_t)(lineno - 1), line, len, 0, err);
}

static qm_status load_text_list(qc_tokenizer *t, const char *path, const side_files *sf, qm_error *err)
{
    char *buf;
    size_t len;
    qm_status s = read_whole(path, sf->json_limit, &buf, &len, err);
    if (s != QM_OK) return s;
    /* every token takes at least two bytes ("x\n") except the last */
    uint64_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
    if (lines > QC_TOKENIZER_MAX_VOCAB + 1)
        s = qm_fail(err, QM_ERR_UNSUPPORTED, path, NULL, QM_NO_OFFSET, "more than %llu lines",
                    (unsigned long long)QC_TOKENIZER_MAX_VOCAB);
    if (s == QM_OK) s = alloc_slots(t, lines + config_added_count(sf), path, err);
    list_ctx lc = { t, path };
    if (s == QM_OK) s = for_each_line(buf, len, &lc, list_line, err);
    free(buf);
    if (s == QM_OK) s = config_added_tokens(t, sf, err);
    if (s == QM_OK) s = finish_ids(t, path, err);
    if (s != QM_OK) return s;
    t->kind = "wordlevel";
    sp_claim none[SP_N];
    memset(none, 0, sizeof none);
    if ((s = resolve_specials(t, path, sf, none, true, err)) != QM_OK) return s;
    return set_source_with_sides(t, path, NULL, sf, err);
}

/* ---------------------------------------------------------------------------------------------- */
/* tokenizer.model (SentencePiece ModelProto), spec/TOKENIZER.md §2.6 */

/* What the runtime's bpe_sentencepiece reproduces: BPE, no normalization map, spaces escaped to U+2581
 * and kept as they are. Anything else is refused naming the field, so a model is never stored with
 * settings the runtime would silently ignore. */
static qm_status spm_check_spec(const char *path, const qc_spm *m, qm_error *err)
{
    if (m->model_type == QC_SPM_UNIGRAM)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "trainer_spec.model_type", m->trainer_offset,
                       "unigram models are not supported (Viterbi encoding is not implemented); only BPE");
    if (m->model_type != QC_SPM_BPE)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "trainer_spec.model_type", m->trainer_offset,
                       "%s models are not supported; only BPE", m->model_type == QC_SPM_WORD ? "word" : "char");
    if (m->norm_name && !(m->norm_name_len == 8 && memcmp(m->norm_name, "identity", 8) == 0))
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "normalizer_spec.name", m->normalizer_offset,
                       "normalizer \"%.*s\" is not supported; only \"identity\" (no normalization)",
                       (int)(m->norm_name_len > 60 ? 60 : m->norm_name_len), m->norm_name);
    if (m->charsmap_len)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "normalizer_spec.precompiled_charsmap", m->normalizer_offset,
                       "a %llu-byte normalization map is not supported; only identity (an empty map)",
                       (unsigned long long)m->charsmap_len);
    if (m->remove_extra_whitespaces)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "normalizer_spec.remove_extra_whitespaces", m->normalizer_offset,
                       "true is not supported; only false (spaces kept as they are, as in Llama 2 and Mistral)");
    if (!m->escape_whitespaces)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "normalizer_spec.escape_whitespaces", m->normalizer_offset,
                       "false is not supported; only true (spaces become U+2581)");
    if (m->treat_whitespace_as_suffix)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "trainer_spec.treat_whitespace_as_suffix", m->trainer_offset,
                       "true is not supported; only false (U+2581 starts a word)");
    if (m->denorm_charsmap_len)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, "denormalizer_spec.precompiled_charsmap", QM_NO_OFFSET,
                       "a %llu-byte denormalization map is not supported; only none",
                       (unsigned long long)m->denorm_charsmap_len);
    return QM_OK;
}

static bool has_metaspace(const char *s, size_t n)
{
    for (size_t i = 0; i + 3 <= n; i++)
        if (memcmp(s + i, k_metaspace, 3) == 0) return true;
    return false;
}

/* "pieces[i]" into fld (at least 32 bytes) without printf: it is made for every piece of a 32,000-piece
 * model, where snprintf cost a fifth of the load. */
static const char *piece_name(char *fld, uint64_t i)
{
    char digits[24];
    size_t n = 0;
    do { digits[n++] = (char)('0' + i % 10); i /= 10; } while (i);
    memcpy(fld, "pieces[", 7);
    for (size_t k = 0; k < n; k++) fld[7 + k] = digits[n - 1 - k];
    fld[7 + n] = ']';
    fld[8 + n] = '\0';
    return fld;
}

/* One piece's own checks, before it takes its id. */
static qm_status spm_check_piece(const char *path, const qc_spm_piece *p, uint64_t i, qm_error *err)
{
    char fld[48];
    piece_name(fld, i);
    if (p->len == 0)
        return qm_fail(err, QM_ERR_BAD_SOURCE, path, fld, p->offset, "empty piece");
    if (!isfinite(p->score))
        return qm_fail(err, QM_ERR_BAD_SOURCE, path, fld, p->offset, "score is not a finite number");
    if (p->type == QC_SPM_UNUSED)
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, fld, p->offset,
                       "UNUSED piece \"%.40s\" is not supported (sentencepiece merges through it, then splits it "
                       "again, which a merge list cannot express)", p->str);
    if (p->type == QC_SPM_BYTE) {
        static const char hex[] = "0123456789ABCDEF";
        if (p->len != 6 || memcmp(p->str, "<0x", 3) != 0 || p->str[5] != '>' || !memchr(hex, p->str[3], 16) ||
            !memchr(hex, p->str[4], 16))
            return qm_fail(err, QM_ERR_BAD_SOURCE, path, fld, p->offset,
                           "BYTE piece \"%.*s\" is not <0xXX> with two upper-case hex digits",
                           (int)(p->len > 40 ? 40 : p->len), p->str);
    }
    /* sentencepiece matches user-defined pieces in the text after spaces became U+2581; qmap matches added
     * tokens in the text itself, so a piece holding either would be matched differently */
    if (p->type == QC_SPM_USER_DEFINED &&
        (memchr(p->str, ' ', p->len) || has_metaspace(p->str, p->len)))
        return qm_fail(err, QM_ERR_UNSUPPORTED, path, fld, p->offset,
                       "user-defined piece \"%.40s\" holds a space or U+2581, which is not supported", p->str);
    return QM_OK;
}

/* Piece string → id: open addressing over ids (UINT32_MAX empty), FNV-1a. Also refuses a string given
 * twice, as sentencepiece does. */
typedef struct spm_index {
    uint32_t *slot;
    size_t mask;
} spm_index;

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

static int64_t spm_find(const qc_tokenizer *t, const spm_index *ix, const char *s, size_t n)
{
    for (size_t i = (size_t)fnv1a(s, n) & ix->mask;; i = (i + 1) & ix->mask) {
        uint32_t id = ix->slot[i];
        if (id == UINT32_MAX) return -1;
        if (t->token_lens[id] == n && memcmp(t->tokens[id], s, n) == 0) return id;
    }
}

static qm_status spm_build_index(const qc_tokenizer *t, const qc_spm *m, const char *path, spm_index *ix,
                                 qm_error *err)
{
    size_t size = 16;
    while (size < 2 * t->n_tokens) size <<= 1;
    ix->slot = malloc(size * sizeof *ix->slot);
    if (!ix->slot) return nomem(err, path);
    memset(ix->slot, 0xff, size * sizeof *ix->slot);
    ix->mask = size - 1;
    for (uint64_t id = 0; id < t->n_tokens; id++) {
        for (size_t i = (size_t)fnv1a(t->tokens[id], t->token_lens[id]) & ix->mask;; i = (i + 1) & ix->mask) {
            uint32_t o = ix->slot[i];
            if (o == UINT32_MAX) { ix->slot[i] = (uint32_t)id; break; }
            if (t->token_lens[o] == t->token_lens[id] && memcmp(t->tokens[o], t->tokens[id], t->token_lens[id]) == 0) {
                char fld[48];
                return qm_fail(err, QM_ERR_BAD_SOURCE, path, piece_name(fld, id), m->pieces[id].offset,
                               "piece \"%.40s\" is already piece %u", t->tokens[id], o);
            }
        }
    }
    return QM_OK;
}

typedef struct spm_merge {
    float score;                 /* of the result */
    uint32_t c, a, b;            /* result, left, right ids */
    uint32_t k;                  /* bytes in the left part */
} spm_merge;

/* Rank order of spec §2.6: the result's score descending, then its id, then the shorter left part. */
static int spm_merge_cmp(const void *x, const void *y)
{
    const spm_merge *p = x, *q = y;
    if (p->score != q->score) return p->score > q->score ? -1 : 1;
    if (p->c != q->c) return p->c < q->c ? -1 : 1;
    return p->k < q->k ? -1 : p->k > q->k;
}

/* SentencePiece BPE has no merge list: it merges the adjacent pair whose concatenation is a piece of the
 * highest score. Every way of cutting a NORMAL piece into two NORMAL pieces is such a pair; listing them
 * by the result's score gives the runtime's rank order. Each piece is cut at each character boundary and
 * both halves looked up in the hash index: linear in the total length of the pieces. */
static qm_status spm_derive_merges(qc_tokenizer *t, const qc_spm *m, const char *path, qm_error *err)
{
    spm_index ix = { NULL, 0 };
    spm_merge *list = NULL;
    size_t n = 0, cap = 0;
    qm_status s = spm_build_index(t, m, path, &ix, err);
    for (uint64_t c = 0; c < t->n_tokens && s == QM_OK; c++) {
        if (m->pieces[c].type != QC_SPM_NORMAL) continue;
        const char *w = t->tokens[c];
        size_t len = t->token_lens[c];
        /* a part holding a space can never be formed: every space of the text became U+2581 */
        if (memchr(w, ' ', len)) continue;
        for (size_t k = 1; k < len && s == QM_OK; k++) {
            if (((uint8_t)w[k] & 0xc0) == 0x80) continue;   /* not a character boundary */
            int64_t a = spm_find(t, &ix, w, k), b = spm_find(t, &ix, w + k, len - k);
            if (a < 0 || b < 0 || m->pieces[a].type != QC_SPM_NORMAL || m->pieces[b].type != QC_SPM_NORMAL) continue;
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 1024;
                spm_merge *p = realloc(list, nc * sizeof *p);
                if (!p) { s = nomem(err, path); break; }
                list = p;
                cap = nc;
            }
            list[n++] = (spm_merge){ m->pieces[c].score, (uint32_t)c, (uint32_t)a, (uint32_t)b, (uint32_t)k };
        }
    }
    if (s == QM_OK && n) qsort(list, n, sizeof *list, spm_merge_cmp);
    for (size_t i = 0; i < n && s == QM_OK; i++)
        s = push_merge(t, path, t->tokens[list[i].a], t->token_lens[list[i].a], t->tokens[list[i].b],
                       t->token_lens[list[i].b], err);
    free(list);
    free(ix.slot);
    return s;
}

static qm_status load_spm(qc_tokenizer *t, const char *path, const side_files *sf, qm_error *err)
{
    char *buf;
    size_t len;
    qm_status s = read_whole(path, sf->json_limit, &buf, &len, err);
    if (s != QM_OK) return s;
    qc_spm m;
    s = qc_spm_parse(path, (const uint8_t *)buf, len, &m, err);
    if (s == QM_OK) s = spm_check_spec(path, &m, err);
    if (s == QM_OK) s = alloc_slots(t, m.n_pieces + config_added_count(sf), path, err);
    int64_t unk = -1;
    for (uint64_t i = 0; i < m.n_pieces && s == QM_OK; i++) {
        const qc_spm_piece *p = &m.pieces[i];
        if ((s = spm_check_piece(path, p, i, err)) != QM_OK) break;
        char fld[48];
        piece_name(fld, i);
        if (p->type == QC_SPM_UNKNOWN) {
            if (unk >= 0) {
                s = qm_fail(err, QM_ERR_BAD_SOURCE, path, fld, p->offset, "a second UNKNOWN piece (the first is %lld)",
                            (long long)unk);
                break;
            }
            unk = (int64_t)i;
        }
        /* control pieces (<s>, </s>) are special added tokens, user-defined ones added tokens: both are matched
         * whole in the text before anything else, as sentencepiece does for user-defined ones */
        uint8_t fl = p->type == QC_SPM_CONTROL ? TF_ADDED | TF_SPECIAL : p->type == QC_SPM_USER_DEFINED ? TF_ADDED : 0;
        s = put_token(t, path, fld, (int64_t)i, p->str, p->len, fl, err);
    }
    if (s == QM_OK) s = config_added_tokens(t, sf, err);
    if (s == QM_OK) s = finish_ids(t, path, err);
    if (s == QM_OK && unk < 0)
        s = qm_fail(err, QM_ERR_BAD_SOURCE, path, "pieces", QM_NO_OFFSET, "no piece has type UNKNOWN");
    if (s == QM_OK && m.unk_id != unk)
        s = qm_fail(err, QM_ERR_BAD_SOURCE, path, "trainer_spec.unk_id", m.trainer_offset,
                    "unk_id %d is not the UNKNOWN piece %lld", m.unk_id, (long long)unk);
    sp_claim own[SP_N];
    memset(own, 0, sizeof own);
    const int32_t ids[SP_N] = { m.bos_id, m.eos_id, m.unk_id, m.pad_id };
    static const char *const fields[SP_N] = { "trainer_spec.bos_id", "trainer_spec.eos_id", "trainer_spec.unk_id",
                                              "trainer_spec.pad_id" };
    for (int k = 0; k < SP_N && s == QM_OK; k++) {
        if (ids[k] < 0) continue;   /* -1: the model has none */
        if ((uint64_t)ids[k] >= t->n_tokens)
            s = qm_fail(err, QM_ERR_BAD_SOURCE, path, fields[k], m.trainer_offset, "id %d is not below the %llu pieces",
                        ids[k], (unsigned long long)t->n_tokens);
        else
            claim_id(&own[k], fields[k], (uint32_t)ids[k]);
    }
    if (s == QM_OK) {
        t->kind = "bpe_sentencepiece";
        t->byte_fallback = m.byte_fallback;
        t->ignore_merges = 0;
        t->add_prefix_space = m.add_dummy_prefix;
        if (m.add_dummy_prefix) t->prepend_scheme = "first";   /* one U+2581 before the whole input */
        /* as HF's LlamaTokenizer and llama.cpp: a bos when there is one; tokenizer_config.json may say otherwise */
        t->add_bos = m.bos_id >= 0;
        t->add_eos = 0;
        s = resolve_specials(t, path, sf, own, false, err);
    }
    if (s == QM_OK) s = spm_derive_merges(t, &m, path, err);
    if (s == QM_OK) s = set_source_with_sides(t, path, NULL, sf, err);
    qc_spm_free(&m);
    free(buf);
    return s;
}

/* ---------------------------------------------------------------------------------------------- */
/* public API */

void qc_tokenizer_free(qc_tokenizer *t)
{
    if (!t) return;
    for (uint64_t i = 0; i < t->cap; i++) free(t->tokens ? t->tokens[i] : NULL);
    free(t->tokens);
    free(t->token_lens);
    free(t->flags);
    for (uint64_t i = 0; i < t->n_merges; i++) free(t->merges[i]);
    free(t->merges);
    free(t->merge_lens);
    free(t->special_ids);
    free(t->added_ids);
    free(t->pre_split);
    free(t->chat_template);
    free(t->normalizer);
    free(t->source);
    free(t);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

qm_status qc_tokenizer_load(const char *path, uint64_t json_limit, qc_tokenizer **out, qm_error *err)
{
    if (!out) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "out is NULL");
    *out = NULL;
    if (!path) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "path is NULL");
    qc_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return nomem(err, path);
    t->add_bos = t->add_eos = t->add_prefix_space = t->byte_fallback = t->ignore_merges = -1;

    side_files sf;
    json_t *root = NULL;
    qm_status s = side_load(path, json_limit, &sf, err);
    if (s == QM_OK && ends_with(path, ".json")) {
        s = load_json(path, json_limit, 0, &root, err);
        if (s == QM_OK && !json_is_object(root))
            s = qm_fail(err, QM_ERR_BAD_SOURCE, path, NULL, QM_NO_OFFSET, "is not a JSON object");
        /* Told apart by structure, never by a key that can be data (GPT-2's own vocab.json holds the token
         * "model", id 19849): a tokenizer.json's "model" is an object with a "vocab". */
        const json_t *model = s == QM_OK ? json_object_get(root, "model") : NULL;
        if (s == QM_OK && json_is_object(model) && json_object_get(model, "vocab"))
            s = load_hf_json(t, path, root, &sf, err);
        else if (s == QM_OK)
            s = load_vocab_json(t, path, root, &sf, err);
    } else if (s == QM_OK && ends_with(path, ".model")) {
        s = load_spm(t, path, &sf, err);   /* SentencePiece's tokenizer.model, told by its name */
    } else if (s == QM_OK) {
        s = load_text_list(t, path, &sf, err);
    }
    if (s == QM_OK) s = config_chat_template(t, &sf, err);
    json_decref(root);
    side_free(&sf);
    if (s != QM_OK) { qc_tokenizer_free(t); return s; }
    *out = t;
    return QM_OK;
}

qm_status qc_tokenizer_find(const char *dir, uint64_t json_limit, qc_tokenizer **out, qm_error *err)
{
    if (!out) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "out is NULL");
    *out = NULL;
    if (!dir) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "dir is NULL");
    static const char *const names[] = { "tokenizer.json", "vocab.json", "merges.txt", "vocab.txt", "tokenizer.model" };
    char *p[5];
    for (int i = 0; i < 5; i++) p[i] = join_path(dir, strlen(dir), names[i]);
    qm_status s = QM_OK;
    if (!p[0] || !p[1] || !p[2] || !p[3] || !p[4]) s = nomem(err, dir);
    else if (is_regular_file(p[0])) s = qc_tokenizer_load(p[0], json_limit, out, err);
    else if (is_regular_file(p[4])) s = qc_tokenizer_load(p[4], json_limit, out, err);
    else if (is_regular_file(p[1]) && is_regular_file(p[2])) s = qc_tokenizer_load(p[1], json_limit, out, err);
    else if (is_regular_file(p[3])) s = qc_tokenizer_load(p[3], json_limit, out, err);
    else if (is_regular_file(p[1]))
        s = qm_fail(err, QM_ERR_BAD_SOURCE, p[1], NULL, QM_NO_OFFSET,
                    "vocab.json without merges.txt beside it (GPT-2 BPE needs both)");
    for (int i = 0; i < 5; i++) free(p[i]);
    return s;
}

uint64_t qc_tokenizer_vocab_size(const qc_tokenizer *t) { return t ? t->n_tokens : 0; }
const char *qc_tokenizer_kind(const qc_tokenizer *t) { return t ? t->kind : NULL; }
const char *qc_tokenizer_source(const qc_tokenizer *t) { return t ? t->source : NULL; }

/* ---------------------------------------------------------------------------------------------- */
/* metadata */

typedef struct meta_ctx {
    qm_writer *w;
    const char *prefix;
    size_t prefix_len;
    char key[QM_MAX_KEY_LEN + 1];
    qm_error *err;
} meta_ctx;

static qm_status mkey(meta_ctx *m, const char *name)
{
    size_t n = strlen(name);
    if (m->prefix_len + n > QM_MAX_KEY_LEN)
        return qm_fail(m->err, QM_ERR_BAD_KEY, NULL, name, QM_NO_OFFSET,
                       "metadata key prefix \"%.60s\" makes the key longer than %u bytes", m->prefix,
                       QM_MAX_KEY_LEN);
    memcpy(m->key, m->prefix, m->prefix_len);
    memcpy(m->key + m->prefix_len, name, n + 1);
    return QM_OK;
}

static qm_status meta_str(meta_ctx *m, const char *name, const char *s, size_t len)
{
    qm_status st = mkey(m, name);
    return st != QM_OK ? st : qm_writer_meta_string(m->w, m->key, s, len, m->err);
}

static qm_status meta_bool(meta_ctx *m, const char *name, tri v)
{
    if (v < 0) return QM_OK;
    qm_status st = mkey(m, name);
    return st != QM_OK ? st : qm_writer_meta_bool(m->w, m->key, v == 1, m->err);
}

qm_status qc_tokenizer_write_meta(const qc_tokenizer *t, qm_writer *w, const char *prefix, qm_error *err)
{
    if (!t || !w || !prefix)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "NULL tokenizer, writer or prefix");
    meta_ctx m = { .w = w, .prefix = prefix, .prefix_len = strlen(prefix), .err = err };
    bool bpe = strncmp(t->kind, "bpe_", 4) == 0;
    qm_status s;
#define TRY(expr) do { if ((s = (expr)) != QM_OK) return s; } while (0)
    TRY(meta_str(&m, "kind", t->kind, strlen(t->kind)));
    TRY(meta_str(&m, "source", t->source, strlen(t->source)));
    TRY(mkey(&m, "tokens"));
    TRY(qm_writer_meta_string_array(w, m.key, (const char *const *)t->tokens, t->token_lens, t->n_tokens, err));
    if (bpe) {
        TRY(mkey(&m, "merges"));
        TRY(qm_writer_meta_string_array(w, m.key, (const char *const *)t->merges, t->merge_lens, t->n_merges, err));
    }
    TRY(mkey(&m, "special_ids"));
    TRY(qm_writer_meta_array(w, m.key, QM_META_U32, t->special_ids, t->n_special, err));
    TRY(mkey(&m, "added_ids"));
    TRY(qm_writer_meta_array(w, m.key, QM_META_U32, t->added_ids, t->n_added, err));
    for (int k = 0; k < SP_N; k++) {
        if (!t->has_sp[k]) continue;
        char name[16];
        snprintf(name, sizeof name, "%s_id", k_sp_names[k]);
        TRY(mkey(&m, name));
        TRY(qm_writer_meta_u32(w, m.key, t->sp[k], err));
    }
    TRY(meta_bool(&m, "add_bos", t->add_bos));
    TRY(meta_bool(&m, "add_eos", t->add_eos));
    if (t->pre_split) TRY(meta_str(&m, "pre_split", t->pre_split, t->pre_split_len));
    if (t->normalizer) TRY(meta_str(&m, "normalizer", t->normalizer, strlen(t->normalizer)));
    TRY(meta_bool(&m, "add_prefix_space", t->add_prefix_space));
    if (t->prepend_scheme) TRY(meta_str(&m, "prepend_scheme", t->prepend_scheme, strlen(t->prepend_scheme)));
    TRY(meta_bool(&m, "byte_fallback", t->byte_fallback));
    TRY(meta_bool(&m, "ignore_merges", t->ignore_merges));
    if (t->chat_template) TRY(meta_str(&m, "chat_template", t->chat_template, t->chat_template_len));
#undef TRY
    return QM_OK;
}
