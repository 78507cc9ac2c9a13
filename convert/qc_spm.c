/* qc_spm.c — protobuf wire format → qc_spm (see qc_spm.h).
 *
 * A protobuf message is a sequence of (key, value): key = field << 3 | wire type, a varint; the value is a
 * varint (wire 0), 8 bytes (1), a varint length and that many bytes (2), or 4 bytes (5). Wire types 3/4
 * (groups) are proto1 leftovers that sentencepiece_model.proto never uses: refused. Every read is checked
 * against the end of the enclosing message, which is itself checked against the end of the file, so a
 * length can never take the cursor outside the buffer. proto2 rules followed: the last value of a scalar
 * field wins, a sub-message given twice is merged (we parse both into the same struct), unknown fields are
 * skipped.
 */
#include "qc_spm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { W_VARINT = 0, W_I64 = 1, W_LEN = 2, W_SGROUP = 3, W_EGROUP = 4, W_I32 = 5 };

typedef struct rd {
    const char *file;
    const uint8_t *buf;
    qm_error *err;
} rd;

static qm_status bad(const rd *r, const char *field, uint64_t off, const char *what)
{
    return qm_fail(r->err, QM_ERR_BAD_SOURCE, r->file, field, off, "%s (not a valid SentencePiece model)", what);
}

/* A varint at *pos, before `end`. At most 10 bytes, the 10th holding only the top bit of 64. */
static qm_status get_varint(const rd *r, size_t *pos, size_t end, const char *field, uint64_t *out)
{
    uint64_t v = 0;
    size_t start = *pos;
    for (unsigned i = 0; i < 10; i++) {
        if (*pos >= end) return bad(r, field, start, "a varint runs past the end of its message");
        uint8_t c = r->buf[(*pos)++];
        if (i == 9 && c > 1) return bad(r, field, start, "a varint is longer than 64 bits");
        v |= (uint64_t)(c & 0x7f) << (7 * i);
        if (c < 0x80) { *out = v; return QM_OK; }
    }
    return bad(r, field, start, "a varint is longer than 10 bytes");
}

/* The next key of a message: field number and wire type, both checked. */
static qm_status get_key(const rd *r, size_t *pos, size_t end, const char *msg, uint32_t *field, unsigned *wire)
{
    size_t at = *pos;
    uint64_t k;
    qm_status s = get_varint(r, pos, end, msg, &k);
    if (s != QM_OK) return s;
    *wire = (unsigned)(k & 7);
    uint64_t f = k >> 3;
    if (f == 0 || f > 536870911u) {   /* 1 .. 2^29 - 1 */
        char what[96];
        snprintf(what, sizeof what, "field number %llu is outside 1..536870911", (unsigned long long)f);
        return bad(r, msg, at, what);
    }
    if (*wire == W_SGROUP || *wire == W_EGROUP)
        return qm_fail(r->err, QM_ERR_BAD_SOURCE, r->file, msg, at,
                       "field %llu is a group (wire type %u), which no SentencePiece model holds",
                       (unsigned long long)f, *wire);
    if (*wire == 6 || *wire == 7) {
        char what[64];
        snprintf(what, sizeof what, "wire type %u does not exist", *wire);
        return bad(r, msg, at, what);
    }
    *field = (uint32_t)f;
    return QM_OK;
}

/* A length-delimited value's extent [*start, *start + *n), checked against `end`; *pos moves past it. */
static qm_status get_len(const rd *r, size_t *pos, size_t end, const char *field, size_t *start, size_t *n)
{
    size_t at = *pos;
    uint64_t len;
    qm_status s = get_varint(r, pos, end, field, &len);
    if (s != QM_OK) return s;
    if (len > end - *pos)
        return qm_fail(r->err, QM_ERR_BAD_SOURCE, r->file, field, at,
                       "length %llu runs past the end of its message (%zu bytes left)", (unsigned long long)len,
                       end - *pos);
    *start = *pos;
    *n = (size_t)len;
    *pos += (size_t)len;
    return QM_OK;
}

static qm_status skip(const rd *r, size_t *pos, size_t end, const char *field, unsigned wire)
{
    uint64_t v;
    size_t a, n;
    switch (wire) {
    case W_VARINT: return get_varint(r, pos, end, field, &v);
    case W_LEN: return get_len(r, pos, end, field, &a, &n);
    case W_I64:
    case W_I32: {
        size_t w = wire == W_I64 ? 8 : 4;
        if (end - *pos < w) return bad(r, field, *pos, "a fixed-size value runs past the end of its message");
        *pos += w;
        return QM_OK;
    }
    default: return bad(r, field, *pos, "unknown wire type");   /* get_key refused the others */
    }
}

static qm_status want_wire(const rd *r, const char *field, size_t at, unsigned wire, unsigned expected)
{
    if (wire == expected) return QM_OK;
    return qm_fail(r->err, QM_ERR_BAD_SOURCE, r->file, field, at,
                   "has wire type %u, expected %u (not a valid SentencePiece model)", wire, expected);
}

/* A varint scalar for a known field: check the wire type, read it. */
static qm_status scalar(const rd *r, size_t *pos, size_t end, const char *field, size_t at, unsigned wire,
                        uint64_t *v)
{
    qm_status s = want_wire(r, field, at, wire, W_VARINT);
    return s != QM_OK ? s : get_varint(r, pos, end, field, v);
}

/* ---- ModelProto.SentencePiece ------------------------------------------------------------------- */

/* fld = "pieces[idx]" + suffix; the prefix is formatted once per piece (base_len), the suffix copied. */
static const char *piece_field(char *fld, size_t base_len, const char *suffix)
{
    size_t n = strlen(suffix);
    memcpy(fld + base_len, suffix, n + 1);
    return fld;
}

/* The piece message [pos, end) whose key is at `key_at` (the offset messages name). */
static qm_status parse_piece(const rd *r, size_t pos, size_t end, uint64_t idx, size_t key_at, qc_spm_piece *p)
{
    char fld[48];
    int base = snprintf(fld, sizeof fld, "pieces[%llu]", (unsigned long long)idx);
    size_t bl = base > 0 && (size_t)base < sizeof fld - 8 ? (size_t)base : 0;
    p->str = "";
    p->len = 0;
    p->type = QC_SPM_NORMAL;
    p->score = 0.0f;
    p->offset = key_at;
    while (pos < end) {
        size_t at = pos;
        uint32_t f;
        unsigned w;
        qm_status s = get_key(r, &pos, end, piece_field(fld, bl, ""), &f, &w);
        if (s != QM_OK) return s;
        if (f == 1) {
            size_t a, n;
            if ((s = want_wire(r, piece_field(fld, bl, ".piece"), at, w, W_LEN)) != QM_OK ||
                (s = get_len(r, &pos, end, fld, &a, &n)) != QM_OK)
                return s;
            if (n > UINT32_MAX) return bad(r, fld, at, "piece longer than 4 GiB");
            p->str = (const char *)r->buf + a;
            p->len = (uint32_t)n;
        } else if (f == 2) {
            if ((s = want_wire(r, piece_field(fld, bl, ".score"), at, w, W_I32)) != QM_OK) return s;
            if (end - pos < 4) return bad(r, fld, pos, "a float runs past the end of its message");
            uint32_t u = (uint32_t)r->buf[pos] | (uint32_t)r->buf[pos + 1] << 8 | (uint32_t)r->buf[pos + 2] << 16 |
                         (uint32_t)r->buf[pos + 3] << 24;   /* little-endian, as the wire format says */
            memcpy(&p->score, &u, 4);
            pos += 4;
        } else if (f == 3) {
            uint64_t v;
            if ((s = scalar(r, &pos, end, piece_field(fld, bl, ".type"), at, w, &v)) != QM_OK) return s;
            if (v < 1 || v > 6)
                return qm_fail(r->err, QM_ERR_BAD_SOURCE, r->file, fld, at,
                               "piece type %llu is not one of NORMAL..BYTE (1..6)", (unsigned long long)v);
            p->type = (uint8_t)v;
        } else if ((s = skip(r, &pos, end, piece_field(fld, bl, ""), w)) != QM_OK) {
            return s;
        }
    }
    return QM_OK;
}

/* ---- TrainerSpec and NormalizerSpec --------------------------------------------------------------- */

static qm_status parse_trainer(const rd *r, size_t pos, size_t end, qc_spm *m)
{
    while (pos < end) {
        size_t at = pos;
        uint32_t f;
        unsigned w;
        qm_status s = get_key(r, &pos, end, "trainer_spec", &f, &w);
        if (s != QM_OK) return s;
        uint64_t v;
        switch (f) {
        case 3:
            if ((s = scalar(r, &pos, end, "trainer_spec.model_type", at, w, &v)) != QM_OK) return s;
            if (v < 1 || v > 4)
                return qm_fail(r->err, QM_ERR_BAD_SOURCE, r->file, "trainer_spec.model_type", at,
                               "model type %llu is not one of UNIGRAM, BPE, WORD, CHAR (1..4)", (unsigned long long)v);
            m->model_type = (int32_t)v;
            break;
        case 24:
            if ((s = scalar(r, &pos, end, "trainer_spec.treat_whitespace_as_suffix", at, w, &v)) != QM_OK) return s;
            m->treat_whitespace_as_suffix = v != 0;
            break;
        case 35:
            if ((s = scalar(r, &pos, end, "trainer_spec.byte_fallback", at, w, &v)) != QM_OK) return s;
            m->byte_fallback = v != 0;
            break;
        case 40: case 41: case 42: case 43: {
            static const char *const names[] = { "trainer_spec.unk_id", "trainer_spec.bos_id", "trainer_spec.eos_id",
                                                 "trainer_spec.pad_id" };
            if ((s = scalar(r, &pos, end, names[f - 40], at, w, &v)) != QM_OK) return s;
            /* int32 on the wire: negative values are 64-bit two's complement; proto truncates to 32 bits */
            int32_t id = (int32_t)(uint32_t)v;
            if (f == 40) m->unk_id = id;
            else if (f == 41) m->bos_id = id;
            else if (f == 42) m->eos_id = id;
            else m->pad_id = id;
            break;
        }
        default:
            if ((s = skip(r, &pos, end, "trainer_spec", w)) != QM_OK) return s;
        }
    }
    return QM_OK;
}

static qm_status parse_normalizer(const rd *r, size_t pos, size_t end, qc_spm *m, bool denorm)
{
    const char *msg = denorm ? "denormalizer_spec" : "normalizer_spec";
    char fld[64];
    while (pos < end) {
        size_t at = pos;
        uint32_t f;
        unsigned w;
        qm_status s = get_key(r, &pos, end, msg, &f, &w);
        if (s != QM_OK) return s;
        uint64_t v;
        size_t a, n;
        switch (f) {
        case 1:
        case 2:
            snprintf(fld, sizeof fld, "%s.%s", msg, f == 1 ? "name" : "precompiled_charsmap");
            if ((s = want_wire(r, fld, at, w, W_LEN)) != QM_OK || (s = get_len(r, &pos, end, fld, &a, &n)) != QM_OK)
                return s;
            if (denorm) {
                if (f == 2) m->denorm_charsmap_len = n;
            } else if (f == 1) {
                m->norm_name = (const char *)r->buf + a;
                m->norm_name_len = n;
            } else {
                m->charsmap_len = n;
            }
            break;
        case 3: case 4: case 5:
            snprintf(fld, sizeof fld, "%s.%s", msg,
                     f == 3 ? "add_dummy_prefix" : f == 4 ? "remove_extra_whitespaces" : "escape_whitespaces");
            if ((s = scalar(r, &pos, end, fld, at, w, &v)) != QM_OK) return s;
            if (!denorm) {
                if (f == 3) m->add_dummy_prefix = v != 0;
                else if (f == 4) m->remove_extra_whitespaces = v != 0;
                else m->escape_whitespaces = v != 0;
            }
            break;
        default:
            if ((s = skip(r, &pos, end, msg, w)) != QM_OK) return s;
        }
    }
    return QM_OK;
}

/* ---- ModelProto ---------------------------------------------------------------------------------- */

void qc_spm_free(qc_spm *m)
{
    if (!m) return;
    free(m->pieces);
    memset(m, 0, sizeof *m);
}

/* ModelProto's fields by number, for messages (0 names the message itself; self_test_data, 4, is skipped). */
static const char *const k_top_names[6] = { "ModelProto", "pieces", "trainer_spec", "normalizer_spec",
                                            "self_test_data", "denormalizer_spec" };

/* Pass 1 counts the pieces (so the array is allocated once, and its size capped before any allocation);
 * pass 2 parses everything. Both passes check the same structure, so pass 2 cannot fail where 1 passed
 * except inside a sub-message. */
static qm_status count_pieces(const rd *r, size_t len, uint64_t *count)
{
    size_t pos = 0;
    *count = 0;
    while (pos < len) {
        size_t at = pos;
        uint32_t f;
        unsigned w;
        qm_status s = get_key(r, &pos, len, "ModelProto", &f, &w);
        if (s != QM_OK) return s;
        if (f == 1) {
            if ((s = want_wire(r, "pieces", at, w, W_LEN)) != QM_OK) return s;
            if (++*count > QC_SPM_MAX_PIECES)
                return qm_fail(r->err, QM_ERR_UNSUPPORTED, r->file, "pieces", at,
                               "more than %llu pieces, above the tokenizer cap",
                               (unsigned long long)QC_SPM_MAX_PIECES);
        }
        if ((s = skip(r, &pos, len, f <= 5 ? k_top_names[f] : "ModelProto", w)) != QM_OK) return s;
    }
    return QM_OK;
}

qm_status qc_spm_parse(const char *file, const uint8_t *buf, size_t len, qc_spm *out, qm_error *err)
{
    memset(out, 0, sizeof *out);
    rd r = { file, buf, err };
    uint64_t count;
    qm_status s = count_pieces(&r, len, &count);
    if (s != QM_OK) return s;
    qc_spm m;
    memset(&m, 0, sizeof m);
    m.model_type = QC_SPM_UNIGRAM;
    m.unk_id = 0;
    m.bos_id = 1;
    m.eos_id = 2;
    m.pad_id = -1;
    m.add_dummy_prefix = m.remove_extra_whitespaces = m.escape_whitespaces = true;
    m.trainer_offset = m.normalizer_offset = QM_NO_OFFSET;
    m.pieces = malloc((size_t)(count ? count : 1) * sizeof *m.pieces);
    if (!m.pieces) return qm_fail(err, QM_ERR_NOMEM, file, NULL, QM_NO_OFFSET, "out of memory reading the model");
    size_t pos = 0;
    while (pos < len && s == QM_OK) {
        size_t at = pos, a, n;
        uint32_t f;
        unsigned w;
        if ((s = get_key(&r, &pos, len, "ModelProto", &f, &w)) != QM_OK) break;
        if (f >= 1 && f <= 5 && f != 4) {
            if ((s = want_wire(&r, k_top_names[f], at, w, W_LEN)) != QM_OK) break;
            if ((s = get_len(&r, &pos, len, k_top_names[f], &a, &n)) != QM_OK) break;
            if (f == 1) {
                if (m.n_pieces >= count) { s = bad(&r, "pieces", at, "piece count changed"); break; }   /* unreachable */
                s = parse_piece(&r, a, a + n, m.n_pieces, at, &m.pieces[m.n_pieces]);
                m.n_pieces++;
            } else if (f == 2) {
                if (m.trainer_offset == QM_NO_OFFSET) m.trainer_offset = at;
                s = parse_trainer(&r, a, a + n, &m);
            } else if (f == 3) {
                if (m.normalizer_offset == QM_NO_OFFSET) m.normalizer_offset = at;
                s = parse_normalizer(&r, a, a + n, &m, false);
            } else {
                s = parse_normalizer(&r, a, a + n, &m, true);
            }
        } else {
            s = skip(&r, &pos, len, "ModelProto", w);
        }
    }
    if (s != QM_OK) { free(m.pieces); return s; }
    *out = m;
    return QM_OK;
}
