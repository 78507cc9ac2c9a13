/* test_spm.c — SentencePiece tokenizer.model in the tokenizer importer (convert/qc_spm.c, qc_tokenizer.c)
 * against spec/TOKENIZER.md §2.6, on ModelProto bytes built here field by field: the merge list derived
 * from scores (order, eligibility), the stored keys, skipped unknown fields, and every wire-format error
 * with the field and byte offset its message must name. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_spm.h"
#include "qc_tokenizer.h"

#define SP "\xE2\x96\x81"   /* U+2581 */

/* ---- a protobuf writer, from the wire format alone ------------------------------------------------ */

typedef struct pb { uint8_t b[4096]; size_t n; } pb;

static void pb_raw(pb *p, const void *d, size_t n)
{
    assert_true(p->n + n <= sizeof p->b);
    memcpy(p->b + p->n, d, n);
    p->n += n;
}

static void pb_varint(pb *p, uint64_t v)
{
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) c |= 0x80;
        pb_raw(p, &c, 1);
    } while (v);
}

static void pb_key(pb *p, uint32_t field, unsigned wire) { pb_varint(p, (uint64_t)field << 3 | wire); }
static void pb_uint(pb *p, uint32_t field, uint64_t v) { pb_key(p, field, 0); pb_varint(p, v); }
static void pb_int32(pb *p, uint32_t field, int32_t v) { pb_uint(p, field, (uint64_t)(int64_t)v); }   /* sign-extended */

static void pb_bytes(pb *p, uint32_t field, const void *d, size_t n)
{
    pb_key(p, field, 2);
    pb_varint(p, n);
    pb_raw(p, d, n);
}

static void pb_str(pb *p, uint32_t field, const char *s) { pb_bytes(p, field, s, strlen(s)); }
static void pb_sub(pb *p, uint32_t field, const pb *sub) { pb_bytes(p, field, sub->b, sub->n); }

static void pb_float(pb *p, uint32_t field, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint8_t le[4] = { (uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24) };
    pb_key(p, field, 5);
    pb_raw(p, le, 4);
}

static void piece(pb *m, const char *s, float score, int type)
{
    pb sp = { .n = 0 };
    pb_str(&sp, 1, s);
    pb_float(&sp, 2, score);
    if (type != QC_SPM_NORMAL) pb_uint(&sp, 3, (uint64_t)type);
    pb_sub(m, 1, &sp);
}

/* trainer_spec: BPE with these ids; normalizer_spec as Llama 2 has it */
static void specs(pb *m, bool byte_fallback, int32_t bos, int32_t pad, bool rmws)
{
    pb t = { .n = 0 }, nz = { .n = 0 };
    pb_uint(&t, 3, QC_SPM_BPE);
    pb_uint(&t, 35, byte_fallback);
    pb_int32(&t, 40, 0);
    pb_int32(&t, 41, bos);
    pb_int32(&t, 42, 2);
    pb_int32(&t, 43, pad);
    pb_sub(m, 2, &t);
    pb_str(&nz, 1, "identity");
    pb_uint(&nz, 3, 1);
    pb_uint(&nz, 4, rmws);
    pb_uint(&nz, 5, 1);
    pb_sub(m, 3, &nz);
}

/* The pieces of the main model: merges by score, a user-defined piece, a piece with no cut into pieces. */
static void base_pieces(pb *m)
{
    piece(m, "<unk>", 0, QC_SPM_UNKNOWN);       /* 0 */
    piece(m, "<s>", 0, QC_SPM_CONTROL);         /* 1 */
    piece(m, "</s>", 0, QC_SPM_CONTROL);        /* 2 */
    piece(m, "<0x41>", 0, QC_SPM_BYTE);         /* 3 */
    piece(m, SP "a", -0.0f, QC_SPM_NORMAL);     /* 4: ▁ a */
    piece(m, "ab", -1, QC_SPM_NORMAL);          /* 5: a b */
    piece(m, SP "ab", -2, QC_SPM_NORMAL);       /* 6: ▁ ab (left 3 bytes), ▁a b (left 4) */
    piece(m, "ba", -2, QC_SPM_NORMAL);          /* 7: same score as 6, higher id: after it */
    piece(m, SP, -4, QC_SPM_NORMAL);            /* 8 */
    piece(m, "a", -5, QC_SPM_NORMAL);           /* 9 */
    piece(m, "b", -6, QC_SPM_NORMAL);           /* 10 */
    piece(m, "c", 0, QC_SPM_USER_DEFINED);      /* 11: never a merge part */
    piece(m, "ac", -7, QC_SPM_NORMAL);          /* 12: a + user-defined c: no merge */
    piece(m, "xb", -8, QC_SPM_NORMAL);          /* 13: x is not a piece: no merge */
    piece(m, "<sep>", 0, QC_SPM_USER_DEFINED);  /* 14 */
}

static char *write_model(const char *dir, const char *name, const pb *m, char out[TU_PATH_MAX])
{
    char d[TU_PATH_MAX], rel[128];
    tu_mkdir(d, dir);
    snprintf(rel, sizeof rel, "%s/%s", dir, name);
    tu_path(out, rel);
    tu_write_file(out, m->b, m->n);
    return out;
}

static qm_error load_fails(const pb *m, qm_status code, const char *needle)
{
    char path[TU_PATH_MAX];
    write_model("bad", "tokenizer.model", m, path);
    qc_tokenizer *t = (qc_tokenizer *)&t;
    qm_error err;
    qm_error_clear(&err);
    qm_status s = qc_tokenizer_load(path, 0, &t, &err);
    if (s != code) fail_msg("expected %s, got %s: %s", qm_status_name(code), qm_status_name(s), err.message);
    assert_null(t);
    if (!tu_contains(err.message, needle)) fail_msg("message \"%s\" does not mention \"%s\"", err.message, needle);
    assert_true(tu_contains(err.message, "tokenizer.model"));
    return err;
}

/* qc_spm_parse on raw bytes must fail with BAD_SOURCE and name `needle` (field and offset). */
static void parse_fails(const void *bytes, size_t n, const char *needle)
{
    qc_spm m;
    qm_error err;
    qm_error_clear(&err);
    qm_status s = qc_spm_parse("x.model", bytes, n, &m, &err);
    if (s != QM_ERR_BAD_SOURCE) fail_msg("expected QM_ERR_BAD_SOURCE, got %s: %s", qm_status_name(s), err.message);
    assert_null(m.pieces);
    if (!tu_contains(err.message, needle)) fail_msg("message \"%s\" does not mention \"%s\"", err.message, needle);
}

/* ---- tests ------------------------------------------------------------------------------------------ */

static void test_spm_keys_and_merges(void **state)
{
    (void)state;
    pb m = { .n = 0 };
    pb_uint(&m, 99, 7);                        /* unknown fields of each wire type are skipped */
    pb_str(&m, 100, "ignored");
    pb_key(&m, 101, 1); pb_raw(&m, "12345678", 8);
    base_pieces(&m);
    specs(&m, false, 1, -1, false);
    pb t2 = { .n = 0 };                        /* a second trainer_spec merges into the first */
    pb_uint(&t2, 35, 1);
    pb_sub(&m, 2, &t2);
    char path[TU_PATH_MAX];
    write_model("ok", "tokenizer.model", &m, path);
    qc_tokenizer *t = NULL;
    qm_error err;
    if (qc_tokenizer_load(path, 0, &t, &err) != QM_OK) fail_msg("load: %s", err.message);
    assert_string_equal(qc_tokenizer_kind(t), "bpe_sentencepiece");
    assert_string_equal(qc_tokenizer_source(t), "tokenizer.model");
    assert_int_equal(qc_tokenizer_vocab_size(t), 15);

    char out[TU_PATH_MAX];
    tu_path(out, "spm.qmap");
    qm_writer *w = NULL;
    assert_int_equal(qm_writer_create(out, NULL, &w, &err), QM_OK);
    if (qc_tokenizer_write_meta(t, w, "tokenizer.", &err) != QM_OK) fail_msg("meta: %s", err.message);
    assert_int_equal(qm_writer_finish(w, &err), QM_OK);
    qc_tokenizer_free(t);
    qm_file *f = NULL;
    assert_int_equal(qm_open(out, &f, &err), QM_OK);

    static const char *const want[] = { SP " a", "a b", SP " ab", SP "a b", "b a" };
    const qm_meta *mg = qm_find_meta(f, "tokenizer.merges");
    assert_non_null(mg);
    assert_int_equal(mg->count, 5);
    for (size_t i = 0; i < 5; i++) {
        const char *s;
        uint64_t n;
        assert_int_equal(qm_meta_array_string(mg, i, &s, &n), QM_OK);
        if (n != strlen(want[i]) || memcmp(s, want[i], n)) fail_msg("merge %zu = \"%.*s\", want \"%s\"", i, (int)n, s, want[i]);
    }
    static const uint32_t added[] = { 1, 2, 11, 14 }, special[] = { 1, 2 };
    const qm_meta *a = qm_find_meta(f, "tokenizer.added_ids"), *sp = qm_find_meta(f, "tokenizer.special_ids");
    assert_int_equal(a->count, 4);
    assert_int_equal(sp->count, 2);
    for (size_t i = 0; i < 4; i++) { uint32_t v; qm_meta_array_get(a, i, &v); assert_int_equal(v, added[i]); }
    for (size_t i = 0; i < 2; i++) { uint32_t v; qm_meta_array_get(sp, i, &v); assert_int_equal(v, special[i]); }
    assert_int_equal(qm_find_meta(f, "tokenizer.bos_id")->v.u32, 1);
    assert_int_equal(qm_find_meta(f, "tokenizer.eos_id")->v.u32, 2);
    assert_int_equal(qm_find_meta(f, "tokenizer.unk_id")->v.u32, 0);
    assert_null(qm_find_meta(f, "tokenizer.pad_id"));
    assert_true(qm_find_meta(f, "tokenizer.add_bos")->v.b);
    assert_false(qm_find_meta(f, "tokenizer.add_eos")->v.b);
    assert_true(qm_find_meta(f, "tokenizer.add_prefix_space")->v.b);
    assert_true(qm_find_meta(f, "tokenizer.byte_fallback")->v.b);   /* from the second trainer_spec */
    const qm_meta *ps = qm_find_meta(f, "tokenizer.prepend_scheme");
    assert_true(ps && ps->str_len == 5 && !memcmp(ps->str, "first", 5));
    assert_null(qm_find_meta(f, "tokenizer.normalizer"));
    assert_null(qm_find_meta(f, "tokenizer.pre_split"));
    qm_close(f);
}

static void test_spm_no_bos(void **state)
{
    (void)state;
    pb m = { .n = 0 };
    base_pieces(&m);
    specs(&m, true, -1, 14, false);   /* bos -1 (a 10-byte varint), pad at a piece */
    char path[TU_PATH_MAX];
    write_model("nobos", "spm.model", &m, path);
    qc_tokenizer *t = NULL;
    qm_error err;
    if (qc_tokenizer_load(path, 0, &t, &err) != QM_OK) fail_msg("load: %s", err.message);
    assert_string_equal(qc_tokenizer_source(t), "spm.model");
    char out[TU_PATH_MAX];
    tu_path(out, "nobos.qmap");
    qm_writer *w = NULL;
    assert_int_equal(qm_writer_create(out, NULL, &w, &err), QM_OK);
    assert_int_equal(qc_tokenizer_write_meta(t, w, "tokenizer.", &err), QM_OK);
    assert_int_equal(qm_writer_finish(w, &err), QM_OK);
    qc_tokenizer_free(t);
    qm_file *f = NULL;
    assert_int_equal(qm_open(out, &f, &err), QM_OK);
    assert_null(qm_find_meta(f, "tokenizer.bos_id"));   /* no by-name rule: "<s>" is there but the model says -1 */
    assert_false(qm_find_meta(f, "tokenizer.add_bos")->v.b);
    assert_int_equal(qm_find_meta(f, "tokenizer.pad_id")->v.u32, 14);
    qm_close(f);
}

static void test_spm_wire_errors(void **state)
{
    (void)state;
    parse_fails("\x0a", 1, "pieces at offset 1: a varint runs past the end");
    parse_fails("\x0b", 1, "ModelProto at offset 0: field 1 is a group (wire type 3)");
    parse_fails("\x12\x00\x0c", 3, "field 1 is a group (wire type 4)");
    parse_fails("\x0f", 1, "wire type 7 does not exist");
    parse_fails("\x02\x00", 2, "ModelProto at offset 0: field number 0");
    parse_fails("\x30\x80\x80\x80\x80\x80\x80\x80\x80\x80\x02", 11, "longer than 64 bits");
    parse_fails("\x30\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", 12, "longer than 64 bits");
    parse_fails("\x12\x05\x08", 3, "trainer_spec at offset 1: length 5 runs past the end of its message (1 bytes left)");
    parse_fails("\x0a\x02\x10\x01", 4, "pieces[0].score at offset 2: has wire type 0, expected 5");
    parse_fails("\x0a\x02\x18\x07", 4, "pieces[0].type at offset 2: piece type 7");
    parse_fails("\x0a\x03\x15\x00\x00", 5, "pieces[0].score at offset 3: a float runs past the end");
    parse_fails("\x12\x02\x18\x09", 4, "trainer_spec.model_type at offset 2: model type 9");
    parse_fails("\x1a\x02\x0a\x05", 4, "normalizer_spec.name at offset 3: length 5 runs past");
    parse_fails("\x0a\x00\x0a\x03\x0a\x05\x41", 7, "pieces[1].piece at offset 5: length 5 runs past");
    /* a sub-message's length fits the file but a field inside runs past the sub-message */
    parse_fails("\x0a\x02\x0a\x05", 4, "pieces[0].piece at offset 3: length 5 runs past the end of its message (0 bytes left)");
    qc_spm m;
    qm_error err;
    assert_int_equal(qc_spm_parse("x.model", (const uint8_t *)"", 0, &m, &err), QM_OK);   /* all defaults */
    assert_int_equal(m.n_pieces, 0);
    assert_int_equal(m.model_type, QC_SPM_UNIGRAM);
    assert_int_equal(m.pad_id, -1);
    qc_spm_free(&m);
}

static void test_spm_refusals(void **state)
{
    (void)state;
    pb m;
    pb t;
#define FRESH() do { m.n = 0; base_pieces(&m); } while (0)
    FRESH();
    t.n = 0;
    pb_uint(&t, 3, QC_SPM_UNIGRAM);
    pb_sub(&m, 2, &t);
    load_fails(&m, QM_ERR_UNSUPPORTED, "trainer_spec.model_type at offset");
    load_fails(&m, QM_ERR_UNSUPPORTED, "unigram models are not supported (Viterbi encoding is not implemented)");
    FRESH();
    t.n = 0;
    pb_uint(&t, 3, QC_SPM_CHAR);
    pb_sub(&m, 2, &t);
    load_fails(&m, QM_ERR_UNSUPPORTED, "char models are not supported; only BPE");
    FRESH();
    specs(&m, true, 1, -1, true);
    load_fails(&m, QM_ERR_UNSUPPORTED, "normalizer_spec.remove_extra_whitespaces");
    FRESH();
    specs(&m, true, 1, -1, false);
    pb nz = { .n = 0 };
    pb_str(&nz, 1, "nmt_nfkc");
    pb_sub(&m, 3, &nz);
    load_fails(&m, QM_ERR_UNSUPPORTED, "normalizer \"nmt_nfkc\" is not supported; only \"identity\"");
    FRESH();
    specs(&m, true, 1, -1, false);
    nz.n = 0;
    pb_bytes(&nz, 2, "\x01\x02\x03", 3);
    pb_sub(&m, 3, &nz);
    load_fails(&m, QM_ERR_UNSUPPORTED, "a 3-byte normalization map is not supported");
    FRESH();
    specs(&m, true, 1, -1, false);
    nz.n = 0;
    pb_uint(&nz, 5, 0);
    pb_sub(&m, 3, &nz);
    load_fails(&m, QM_ERR_UNSUPPORTED, "normalizer_spec.escape_whitespaces");
    FRESH();
    specs(&m, true, 1, -1, false);
    t.n = 0;
    pb_uint(&t, 24, 1);
    pb_sub(&m, 2, &t);
    load_fails(&m, QM_ERR_UNSUPPORTED, "trainer_spec.treat_whitespace_as_suffix");
    FRESH();
    specs(&m, true, 1, -1, false);
    piece(&m, "zz", -9, QC_SPM_UNUSED);
    load_fails(&m, QM_ERR_UNSUPPORTED, "pieces[15] at offset");
    FRESH();
    specs(&m, true, 1, -1, false);
    piece(&m, SP "x", 0, QC_SPM_USER_DEFINED);
    load_fails(&m, QM_ERR_UNSUPPORTED, "holds a space or U+2581");
    FRESH();
    specs(&m, true, 1, -1, false);
    piece(&m, "<0x4g>", 0, QC_SPM_BYTE);
    load_fails(&m, QM_ERR_BAD_SOURCE, "is not <0xXX>");
    FRESH();
    specs(&m, true, 1, -1, false);
    piece(&m, "ab", -9, QC_SPM_NORMAL);
    load_fails(&m, QM_ERR_BAD_SOURCE, "piece \"ab\" is already piece 5");
    FRESH();
    specs(&m, true, 1, -1, false);
    piece(&m, "", -9, QC_SPM_NORMAL);
    load_fails(&m, QM_ERR_BAD_SOURCE, "empty piece");
    FRESH();
    specs(&m, true, 1, -1, false);
    piece(&m, "zz", NAN, QC_SPM_NORMAL);
    load_fails(&m, QM_ERR_BAD_SOURCE, "not a finite number");
    FRESH();
    specs(&m, true, 99, -1, false);
    load_fails(&m, QM_ERR_BAD_SOURCE, "trainer_spec.bos_id");
    FRESH();
    specs(&m, true, 1, -1, false);
    piece(&m, "<unk2>", 0, QC_SPM_UNKNOWN);
    load_fails(&m, QM_ERR_BAD_SOURCE, "a second UNKNOWN piece");
    m.n = 0;
    piece(&m, "a", 0, QC_SPM_NORMAL);
    specs(&m, true, -1, -1, false);
    load_fails(&m, QM_ERR_BAD_SOURCE, "no piece has type UNKNOWN");
#undef FRESH
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_keys_and_merges),
        cmocka_unit_test(test_spm_no_bos),
        cmocka_unit_test(test_spm_wire_errors),
        cmocka_unit_test(test_spm_refusals),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
