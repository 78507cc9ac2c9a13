/* test_tokenizer.c — the tokenizer importer (convert/qc_tokenizer.h) against spec/TOKENIZER.md: small
 * tokenizer files of every supported kind are loaded, written into a container, read back with the reader
 * and compared key by key; malformed and unsupported inputs must fail with their specific code. */
#include "test_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qc_json.h"
#include "qc_tokenizer.h"

#define G "\xC4\xA0"        /* U+0120 'Ġ', GPT-2's byte-level space */
#define SP "\xE2\x96\x81"   /* U+2581 '▁', sentencepiece's space */

static const char k_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------------------------------------------ */
/* helpers */

static char *join(char out[TU_PATH_MAX], const char *dir, const char *name)
{
    int n = snprintf(out, TU_PATH_MAX, "%s/%s", dir, name);
    assert_true(n > 0 && n < TU_PATH_MAX);
    return out;
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char p[TU_PATH_MAX];
    join(p, dir, name);
    tu_write_file(p, text, strlen(text));
}

static qc_tokenizer *load_ok(const char *dir, const char *name)
{
    char p[TU_PATH_MAX];
    join(p, dir, name);
    qc_tokenizer *t = NULL;
    qm_error err;
    qm_status s = qc_tokenizer_load(p, 0, &t, &err);
    if (s != QM_OK) fail_msg("qc_tokenizer_load(%s): %s", p, err.message);
    assert_non_null(t);
    return t;
}

/* Load must fail with `code`; the message must mention `needle`. Returns err for further checks. */
static qm_error load_fails(const char *dir, const char *name, qm_status code, const char *needle)
{
    char p[TU_PATH_MAX];
    join(p, dir, name);
    qc_tokenizer *t = (qc_tokenizer *)&t; /* must be reset to NULL */
    qm_error err;
    qm_error_clear(&err);
    qm_status s = qc_tokenizer_load(p, 0, &t, &err);
    if (s != code) fail_msg("%s: expected %s, got %s: %s", p, qm_status_name(code), qm_status_name(s), err.message);
    assert_null(t);
    assert_int_equal(err.code, code);
    if (!tu_contains(err.message, needle)) fail_msg("message \"%s\" does not mention \"%s\"", err.message, needle);
    assert_true(tu_contains(err.message, dir));   /* names the file at fault (maybe a sibling of `name`) */
    return err;
}

/* Write the tokenizer into a container with `prefix` and open it. */
static qm_file *roundtrip(const qc_tokenizer *t, const char *prefix, const char *fname)
{
    char path[TU_PATH_MAX];
    tu_path(path, fname);
    qm_writer *w = NULL;
    qm_error err;
    if (qm_writer_create(path, NULL, &w, &err) != QM_OK) fail_msg("create: %s", err.message);
    if (qc_tokenizer_write_meta(t, w, prefix, &err) != QM_OK) {
        qm_writer_abort(w);
        fail_msg("write_meta: %s", err.message);
    }
    if (qm_writer_finish(w, &err) != QM_OK) fail_msg("finish: %s", err.message);
    qm_file *f = NULL;
    if (qm_open(path, &f, &err) != QM_OK) fail_msg("open: %s", err.message);
    return f;
}

static const qm_meta *meta(const qm_file *f, const char *prefix, const char *name)
{
    char key[300];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    return qm_find_meta(f, key);
}

static void expect_str(const qm_file *f, const char *prefix, const char *name, const char *want)
{
    const qm_meta *m = meta(f, prefix, name);
    if (!m) fail_msg("missing %s%s", prefix, name);
    assert_int_equal(m->type, QM_META_STRING);
    if (m->str_len != strlen(want) || memcmp(m->str, want, m->str_len) != 0)
        fail_msg("%s%s = \"%.*s\", want \"%s\"", prefix, name, (int)m->str_len, m->str, want);
}

static void expect_strs(const qm_file *f, const char *prefix, const char *name, const char *const *want, size_t n)
{
    const qm_meta *m = meta(f, prefix, name);
    if (!m) fail_msg("missing %s%s", prefix, name);
    assert_int_equal(m->type, QM_META_ARRAY);
    assert_int_equal(m->elem_type, QM_META_STRING);
    assert_int_equal(m->count, n);
    for (size_t i = 0; i < n; i++) {
        const char *s;
        uint64_t len;
        assert_int_equal(qm_meta_array_string(m, i, &s, &len), QM_OK);
        if (len != strlen(want[i]) || memcmp(s, want[i], len) != 0)
            fail_msg("%s%s[%zu] = \"%.*s\", want \"%s\"", prefix, name, i, (int)len, s, want[i]);
    }
}

static void expect_u32s(const qm_file *f, const char *prefix, const char *name, const uint32_t *want, size_t n)
{
    const qm_meta *m = meta(f, prefix, name);
    if (!m) fail_msg("missing %s%s", prefix, name);
    assert_int_equal(m->type, QM_META_ARRAY);
    assert_int_equal(m->elem_type, QM_META_U32);
    assert_int_equal(m->count, n);
    for (size_t i = 0; i < n; i++) {
        uint32_t v;
        assert_int_equal(qm_meta_array_get(m, i, &v), QM_OK);
        assert_int_equal(v, want[i]);
    }
}

static void expect_u32(const qm_file *f, const char *prefix, const char *name, uint32_t want)
{
    const qm_meta *m = meta(f, prefix, name);
    if (!m) fail_msg("missing %s%s", prefix, name);
    assert_int_equal(m->type, QM_META_U32);
    assert_int_equal(m->v.u32, want);
}

static void expect_bool(const qm_file *f, const char *prefix, const char *name, bool want)
{
    const qm_meta *m = meta(f, prefix, name);
    if (!m) fail_msg("missing %s%s", prefix, name);
    assert_int_equal(m->type, QM_META_BOOL);
    assert_int_equal(m->v.b, want);
}

static void expect_absent(const qm_file *f, const char *prefix, const char *name)
{
    if (meta(f, prefix, name)) fail_msg("%s%s should be absent", prefix, name);
}

/* ------------------------------------------------------------------------------------------------ */
/* fixtures */

/* GPT-2 style: ByteLevel pre-tokenizer with use_regex, merges in both encodings, one special token. */
static const char k_gpt2_json[] =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,"
    "\"added_tokens\":[{\"id\":11,\"content\":\"<|endoftext|>\",\"single_word\":false,\"lstrip\":false,"
    "\"rstrip\":false,\"normalized\":true,\"special\":true}],"
    "\"normalizer\":null,"
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
    "\"post_processor\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":false,\"use_regex\":true},"
    "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,\"use_regex\":true},"
    "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"continuing_subword_prefix\":\"\","
    "\"end_of_word_suffix\":\"\",\"fuse_unk\":false,\"byte_fallback\":false,"
    "\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"" G "\":3,\"ab\":4,\"" G "a\":5,\"abc\":6,\"" G "ab\":7,"
    "\"h\":8,\"i\":9,\"hi\":10,\"<|endoftext|>\":11},"
    "\"merges\":[\"a b\",[\"ab\",\"c\"],\"" G " a\",[\"" G "a\",\"b\"],\"h i\"]}}";

static const char *const k_gpt2_tokens[] = { "a", "b", "c", G, "ab", G "a", "abc", G "ab", "h", "i", "hi",
                                             "<|endoftext|>" };
static const char *const k_gpt2_merges[] = { "a b", "ab c", G " a", G "a b", "h i" };

static void test_gpt2_json(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "gpt2");
    write_text(dir, "tokenizer.json", k_gpt2_json);
    qc_tokenizer *t = load_ok(dir, "tokenizer.json");
    assert_int_equal(qc_tokenizer_vocab_size(t), 12);
    assert_string_equal(qc_tokenizer_kind(t), "bpe_bytelevel");
    assert_string_equal(qc_tokenizer_source(t), "tokenizer.json");

    const char *P = "tokenizer.";
    qm_file *f = roundtrip(t, P, "gpt2.qmap");
    expect_str(f, P, "kind", "bpe_bytelevel");
    expect_str(f, P, "source", "tokenizer.json");
    expect_strs(f, P, "tokens", k_gpt2_tokens, 12);
    expect_strs(f, P, "merges", k_gpt2_merges, 5);
    const uint32_t sp[] = { 11 };
    expect_u32s(f, P, "special_ids", sp, 1);
    expect_u32s(f, P, "added_ids", sp, 1);
    expect_u32(f, P, "bos_id", 11);
    expect_u32(f, P, "eos_id", 11);
    expect_absent(f, P, "unk_id");
    expect_absent(f, P, "pad_id");
    expect_absent(f, P, "add_bos");
    expect_absent(f, P, "add_eos");
    expect_str(f, P, "pre_split", k_gpt2_pattern);
    expect_absent(f, P, "normalizer");
    expect_bool(f, P, "add_prefix_space", false);
    expect_absent(f, P, "prepend_scheme");
    expect_absent(f, P, "byte_fallback");
    expect_bool(f, P, "ignore_merges", false);
    assert_int_equal(qm_meta_count(f), 11);
    qm_close(f);
    qc_tokenizer_free(t);
}

/* Llama-3 style: Sequence[Split regex, ByteLevel(use_regex false)], template post-processor, config file. */
#define L3_REGEX_JSON "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define L3_REGEX "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const char k_split_json_head[] =
    "{\"added_tokens\":["
    "{\"id\":12,\"content\":\"<|begin_of_text|>\",\"special\":true},"
    "{\"id\":13,\"content\":\"<|end_of_text|>\",\"special\":true},"
    "{\"id\":14,\"content\":\"<|user|>\",\"special\":false}],"
    "\"normalizer\":null,"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
    "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"";
static const char k_split_json_tail[] =
    "\"},\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]},"
    "\"post_processor\":{\"type\":\"Sequence\",\"processors\":["
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":false,\"use_regex\":true},"
    "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|begin_of_text|>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{\"<|begin_of_text|>\":"
    "{\"id\":\"<|begin_of_text|>\",\"ids\":[12],\"tokens\":[\"<|begin_of_text|>\"]}}}]},"
    "\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"byte_fallback\":false,"
    "\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"" G "\":3,\"ab\":4,\"" G "a\":5,\"abc\":6,\"" G "ab\":7,"
    "\"h\":8,\"i\":9,\"hi\":10,\"!\":11},"
    "\"merges\":[[\"a\",\"b\"],[\"ab\",\"c\"],[\"" G "\",\"a\"],[\"" G "a\",\"b\"],[\"h\",\"i\"]]}}";

static void write_split_json(const char *dir, const char *regex_json)
{
    size_t n = strlen(k_split_json_head) + strlen(regex_json) + strlen(k_split_json_tail) + 1;
    char *buf = malloc(n);
    assert_non_null(buf);
    snprintf(buf, n, "%s%s%s", k_split_json_head, regex_json, k_split_json_tail);
    write_text(dir, "tokenizer.json", buf);
    free(buf);
}

static void test_split_regex_json(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "split");
    write_split_json(dir, L3_REGEX_JSON);
    write_text(dir, "tokenizer_config.json",
               "{\"add_bos_token\":true,\"eos_token\":\"<|end_of_text|>\","
               "\"pad_token\":{\"content\":\"<|end_of_text|>\",\"lstrip\":false},\"unk_token\":null}");
    qc_tokenizer *t = load_ok(dir, "tokenizer.json");

    const char *P = "tokenizer.src.";
    qm_file *f = roundtrip(t, P, "split.qmap");
    static const char *const toks[] = { "a", "b", "c", G, "ab", G "a", "abc", G "ab", "h", "i", "hi", "!",
                                        "<|begin_of_text|>", "<|end_of_text|>", "<|user|>" };
    expect_str(f, P, "kind", "bpe_bytelevel");
    expect_str(f, P, "source", "tokenizer.json,tokenizer_config.json");
    expect_strs(f, P, "tokens", toks, 15);
    expect_strs(f, P, "merges", k_gpt2_merges, 5);
    const uint32_t sp[] = { 12, 13 }, added[] = { 12, 13, 14 };
    expect_u32s(f, P, "special_ids", sp, 2);
    expect_u32s(f, P, "added_ids", added, 3);
    expect_u32(f, P, "bos_id", 12);  /* post-processor template */
    expect_u32(f, P, "eos_id", 13);  /* tokenizer_config.json */
    expect_u32(f, P, "pad_id", 13);  /* tokenizer_config.json, object form */
    expect_absent(f, P, "unk_id");
    expect_bool(f, P, "add_bos", true);
    expect_bool(f, P, "add_eos", false);
    expect_str(f, P, "pre_split", L3_REGEX);
    expect_bool(f, P, "add_prefix_space", false);
    expect_bool(f, P, "ignore_merges", true);
    expect_absent(f, P, "byte_fallback");
    assert_int_equal(qm_meta_count(f), 14);
    qm_close(f);
    qc_tokenizer_free(t);
}

/* Llama/Mistral style: sentencepiece BPE with byte fallback, legacy normalizer, special added tokens. */
static const char k_spm_json[] =
    "{\"added_tokens\":["
    "{\"id\":0,\"content\":\"<unk>\",\"special\":true},{\"id\":1,\"content\":\"<s>\",\"special\":true},"
    "{\"id\":2,\"content\":\"</s>\",\"special\":true},{\"id\":11,\"content\":\"<|im_start|>\",\"special\":true}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"" SP "\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" SP "\"}]},"
    "\"pre_tokenizer\":null,"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[],"
    "\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"" SP "\"},"
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \","
    "\"start\":1,\"stop\":0}]},"
    "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"continuing_subword_prefix\":null,"
    "\"end_of_word_suffix\":null,\"fuse_unk\":true,\"byte_fallback\":true,"
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x0A>\":3,\"<0x41>\":4,\"" SP "\":5,\"a\":6,\"b\":7,"
    "\"" SP "a\":8,\"ab\":9,\"" SP "ab\":10},"
    "\"merges\":[\"" SP " a\",\"a b\",\"" SP "a b\"]}}";

static void test_sentencepiece_json(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "spm");
    write_text(dir, "tokenizer.json", k_spm_json);
    qc_tokenizer *t = load_ok(dir, "tokenizer.json");
    assert_string_equal(qc_tokenizer_kind(t), "bpe_sentencepiece");
    const char *P = "tokenizer.";
    qm_file *f = roundtrip(t, P, "spm.qmap");
    static const char *const toks[] = { "<unk>", "<s>", "</s>", "<0x0A>", "<0x41>", SP, "a", "b", SP "a", "ab",
                                        SP "ab", "<|im_start|>" };
    static const char *const merges[] = { SP " a", "a b", SP "a b" };
    expect_str(f, P, "kind", "bpe_sentencepiece");
    expect_str(f, P, "source", "tokenizer.json");
    expect_strs(f, P, "tokens", toks, 12);
    expect_strs(f, P, "merges", merges, 3);
    const uint32_t sp[] = { 0, 1, 2, 11 };
    expect_u32s(f, P, "special_ids", sp, 4);
    expect_u32s(f, P, "added_ids", sp, 4);
    expect_u32(f, P, "bos_id", 1);
    expect_u32(f, P, "eos_id", 2);
    expect_u32(f, P, "unk_id", 0);
    expect_absent(f, P, "pad_id");
    expect_bool(f, P, "add_bos", true);
    expect_bool(f, P, "add_eos", false);
    expect_absent(f, P, "pre_split");
    expect_absent(f, P, "normalizer");
    expect_bool(f, P, "add_prefix_space", true);
    expect_absent(f, P, "prepend_scheme");
    expect_bool(f, P, "byte_fallback", true);
    expect_bool(f, P, "ignore_merges", false);
    assert_int_equal(qm_meta_count(f), 14);
    qm_close(f);
    qc_tokenizer_free(t);
}

/* The newer serialisation of the same tokenizer: a Metaspace pre-tokenizer instead of the normalizer. */
static void test_sentencepiece_metaspace(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "spm2");
    write_text(dir, "tokenizer.json",
               "{\"added_tokens\":[],\"normalizer\":null,"
               "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"" SP "\",\"prepend_scheme\":\"first\","
               "\"split\":false},\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"" SP "\"},"
               "\"model\":{\"type\":\"BPE\",\"vocab\":{\"" SP "\":0,\"a\":1,\"" SP "a\":2},\"merges\":[[\"" SP "\",\"a\"]]}}");
    qc_tokenizer *t = load_ok(dir, "tokenizer.json");
    const char *P = "tokenizer.";
    qm_file *f = roundtrip(t, P, "spm2.qmap");
    expect_str(f, P, "kind", "bpe_sentencepiece");
    expect_bool(f, P, "add_prefix_space", true);
    expect_str(f, P, "prepend_scheme", "first");
    expect_bool(f, P, "byte_fallback", false);
    expect_absent(f, P, "bos_id");
    expect_absent(f, P, "unk_id");
    qm_close(f);
    qc_tokenizer_free(t);

    /* split: true cuts at every U+2581, which sentencepiece BPE does not do */
    write_text(dir, "tokenizer.json",
               "{\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"" SP "\",\"add_prefix_space\":true},"
               "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}");
    load_fails(dir, "tokenizer.json", QM_ERR_UNSUPPORTED, "split");
}

/* Gemma's serialisation: the spaces become U+2581 in the normalizer, so its Split on the string " " never
 * matches and is read as no pre-tokenizer. Without that normalizer, or inverted, the Split is refused. */
#define GEMMA_SPLIT(behavior, invert) \
    "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"" behavior "\"," \
    "\"invert\":" invert "},"
#define GEMMA_MODEL \
    "\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"" SP "\":0,\"a\":1,\"" SP "a\":2}," \
    "\"merges\":[\"" SP " a\"]}}"
#define GEMMA_NORMALIZER "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" SP "\"},"

static void test_sentencepiece_split_space(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "spm-split");
    write_text(dir, "tokenizer.json", "{" GEMMA_NORMALIZER GEMMA_SPLIT("MergedWithPrevious", "false") GEMMA_MODEL);
    qc_tokenizer *t = load_ok(dir, "tokenizer.json");
    const char *P = "tokenizer.";
    qm_file *f = roundtrip(t, P, "spm-split.qmap");
    expect_str(f, P, "kind", "bpe_sentencepiece");
    expect_absent(f, P, "pre_split");
    expect_absent(f, P, "add_prefix_space");
    expect_bool(f, P, "byte_fallback", true);
    qm_close(f);
    qc_tokenizer_free(t);

    write_text(dir, "tokenizer.json", "{" GEMMA_SPLIT("MergedWithPrevious", "false") GEMMA_MODEL);
    load_fails(dir, "tokenizer.json", QM_ERR_UNSUPPORTED, "Regex");
    write_text(dir, "tokenizer.json", "{" GEMMA_NORMALIZER GEMMA_SPLIT("Isolated", "true") GEMMA_MODEL);
    load_fails(dir, "tokenizer.json", QM_ERR_UNSUPPORTED, "invert");
}

/* GPT-2 slow tokenizer: vocab.json + merges.txt with a #version line and trailing empty lines. */
static void test_vocab_json_merges(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "slow");
    write_text(dir, "vocab.json", "{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4,\"<|endoftext|>\":5,\"" G "\":6,"
                                  "\"" G "a\":7}");
    write_text(dir, "merges.txt", "#version: 0.2\na b\r\nab c\n" G " a\n\n\n");
    qc_tokenizer *t = NULL;
    qm_error err;
    assert_int_equal(qc_tokenizer_find(dir, 0, &t, &err), QM_OK);
    assert_non_null(t);
    assert_string_equal(qc_tokenizer_source(t), "vocab.json,merges.txt");
    const char *P = "tokenizer.";
    qm_file *f = roundtrip(t, P, "slow.qmap");
    static const char *const toks[] = { "a", "b", "c", "ab", "abc", "<|endoftext|>", G, G "a" };
    static const char *const merges[] = { "a b", "ab c", G " a" };
    expect_str(f, P, "kind", "bpe_bytelevel");
    expect_str(f, P, "source", "vocab.json,merges.txt");
    expect_strs(f, P, "tokens", toks, 8);
    expect_strs(f, P, "merges", merges, 3);
    const uint32_t sp[] = { 5 };
    expect_u32s(f, P, "special_ids", sp, 1);
    expect_u32s(f, P, "added_ids", sp, 1);
    expect_u32(f, P, "bos_id", 5);
    expect_u32(f, P, "eos_id", 5);
    expect_absent(f, P, "unk_id");
    expect_absent(f, P, "pad_id");
    expect_str(f, P, "pre_split", k_gpt2_pattern);
    expect_absent(f, P, "add_prefix_space");
    expect_bool(f, P, "ignore_merges", false);
    assert_int_equal(qm_meta_count(f), 10);
    qm_close(f);
    qc_tokenizer_free(t);

    /* a slow tokenizer's config states add_prefix_space */
    write_text(dir, "tokenizer_config.json", "{\"add_prefix_space\":true,\"unk_token\":\"<|endoftext|>\"}");
    t = load_ok(dir, "vocab.json");
    f = roundtrip(t, P, "slow2.qmap");
    expect_bool(f, P, "add_prefix_space", true);
    expect_u32(f, P, "unk_id", 5);
    expect_str(f, P, "source", "vocab.json,merges.txt,tokenizer_config.json");
    qm_close(f);
    qc_tokenizer_free(t);
    char cfg[TU_PATH_MAX];
    unlink(join(cfg, dir, "tokenizer_config.json"));

    /* merges.txt with three parts on a line: field names the line, offset is the line's first byte */
    write_text(dir, "merges.txt", "#version: 0.2\na b\nab c d\n");
    qm_error e = load_fails(dir, "vocab.json", QM_ERR_BAD_SOURCE, "found 3");
    assert_string_equal(e.field, "line 3");
    assert_int_equal(e.offset, 18);
    assert_true(tu_contains(e.message, "merges.txt"));

    /* a merge whose result is not in the vocabulary */
    write_text(dir, "merges.txt", "a c\n");
    load_fails(dir, "vocab.json", QM_ERR_BAD_SOURCE, "\"ac\" is not in the vocabulary");

    /* vocab.json without merges.txt */
    char p[TU_PATH_MAX];
    join(p, dir, "merges.txt");
    unlink(p);
    load_fails(dir, "vocab.json", QM_ERR_BAD_SOURCE, "merges.txt");
    t = (qc_tokenizer *)&t;
    assert_int_equal(qc_tokenizer_find(dir, 0, &t, &err), QM_ERR_BAD_SOURCE);
    assert_null(t);
}

/* Plain list: one token per line, names give unk/pad; special tokens from tokenizer_config.json's
 * added_tokens_decoder. */
static void test_vocab_txt(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "list");
    write_text(dir, "vocab.txt", "<pad>\n<unk>\nhello\nworld\nh\xC3\xA9\n \n");
    qc_tokenizer *t = NULL;
    qm_error err;
    assert_int_equal(qc_tokenizer_find(dir, 0, &t, &err), QM_OK);
    assert_non_null(t);
    assert_string_equal(qc_tokenizer_kind(t), "wordlevel");
    const char *P = "tokenizer.";
    qm_file *f = roundtrip(t, P, "list.qmap");
    static const char *const toks[] = { "<pad>", "<unk>", "hello", "world", "h\xC3\xA9", " " };
    expect_str(f, P, "kind", "wordlevel");
    expect_str(f, P, "source", "vocab.txt");
    expect_strs(f, P, "tokens", toks, 6);
    expect_absent(f, P, "merges");
    expect_u32s(f, P, "special_ids", NULL, 0);
    expect_u32s(f, P, "added_ids", NULL, 0);
    expect_u32(f, P, "unk_id", 1);
    expect_u32(f, P, "pad_id", 0);
    expect_absent(f, P, "bos_id");
    expect_absent(f, P, "eos_id");
    expect_absent(f, P, "pre_split");
    expect_absent(f, P, "ignore_merges");
    assert_int_equal(qm_meta_count(f), 7);
    qm_close(f);
    qc_tokenizer_free(t);

    write_text(dir, "tokenizer_config.json",
               "{\"added_tokens_decoder\":{\"1\":{\"content\":\"<unk>\",\"special\":true},"
               "\"6\":{\"content\":\"[MASK]\",\"special\":true},\"7\":{\"content\":\"<x>\",\"special\":false}}}");
    t = load_ok(dir, "vocab.txt");
    assert_int_equal(qc_tokenizer_vocab_size(t), 8);
    f = roundtrip(t, P, "list2.qmap");
    const uint32_t sp[] = { 1, 6 }, added[] = { 1, 6, 7 };
    expect_u32s(f, P, "special_ids", sp, 2);
    expect_u32s(f, P, "added_ids", added, 3);
    expect_str(f, P, "source", "vocab.txt,tokenizer_config.json");
    qm_close(f);
    qc_tokenizer_free(t);
}

/* tokenizer_config.json's chat_template: a string is stored as is, a list keeps the entry named "default"
 * (none without one), any other value is refused naming the key. */
static void test_chat_template(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "chat");
    write_text(dir, "vocab.txt", "<unk>\nhello\n");
    const char *P = "tokenizer.";
    write_text(dir, "tokenizer_config.json", "{\"chat_template\":\"{{ '<|im_start|>' }}\\n\"}");
    qc_tokenizer *t = load_ok(dir, "vocab.txt");
    qm_file *f = roundtrip(t, P, "chat1.qmap");
    expect_str(f, P, "chat_template", "{{ '<|im_start|>' }}\n");
    qm_close(f);
    qc_tokenizer_free(t);
    write_text(dir, "tokenizer_config.json",
               "{\"chat_template\":[{\"name\":\"tool_use\",\"template\":\"T\"},{\"name\":\"default\",\"template\":\"D\"}]}");
    t = load_ok(dir, "vocab.txt");
    f = roundtrip(t, P, "chat2.qmap");
    expect_str(f, P, "chat_template", "D");
    qm_close(f);
    qc_tokenizer_free(t);
    write_text(dir, "tokenizer_config.json", "{\"chat_template\":[{\"name\":\"rag\",\"template\":\"R\"}]}");
    t = load_ok(dir, "vocab.txt");
    f = roundtrip(t, P, "chat3.qmap");
    expect_absent(f, P, "chat_template");
    qm_close(f);
    qc_tokenizer_free(t);
    write_text(dir, "tokenizer_config.json", "{\"chat_template\":7}");
    qm_error e = load_fails(dir, "vocab.txt", QM_ERR_BAD_SOURCE, "neither a string");
    assert_string_equal(e.field, "chat_template");
}

/* WordLevel tokenizer.json with a Whitespace pre-tokenizer and a Unicode normalizer. */
static void test_wordlevel_json(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "wl");
    write_text(dir, "tokenizer.json",
               "{\"added_tokens\":[{\"id\":0,\"content\":\"[UNK]\",\"special\":true}],"
               "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},{\"type\":\"Lowercase\"}]},"
               "\"pre_tokenizer\":{\"type\":\"Whitespace\"},"
               "\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"[UNK]\":0,\"the\":1,\"cat\":2},\"unk_token\":\"[UNK]\"}}");
    qc_tokenizer *t = load_ok(dir, "tokenizer.json");
    const char *P = "tokenizer.";
    qm_file *f = roundtrip(t, P, "wl.qmap");
    static const char *const toks[] = { "[UNK]", "the", "cat" };
    expect_str(f, P, "kind", "wordlevel");
    expect_strs(f, P, "tokens", toks, 3);
    expect_u32(f, P, "unk_id", 0);
    expect_str(f, P, "pre_split", "\\w+|[^\\w\\s]+");
    expect_str(f, P, "normalizer", "nfkc,lowercase");
    expect_absent(f, P, "merges");
    expect_absent(f, P, "add_prefix_space");
    qm_close(f);
    qc_tokenizer_free(t);
}

/* find: nothing → NULL; tokenizer.json wins over the other files. */
static void test_find(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "find");
    qc_tokenizer *t = (qc_tokenizer *)&t;
    qm_error err;
    assert_int_equal(qc_tokenizer_find(dir, 0, &t, &err), QM_OK);
    assert_null(t);
    write_text(dir, "vocab.txt", "x\ny\n");
    write_text(dir, "tokenizer.json", k_gpt2_json);
    assert_int_equal(qc_tokenizer_find(dir, 0, &t, &err), QM_OK);
    assert_non_null(t);
    assert_string_equal(qc_tokenizer_source(t), "tokenizer.json");
    qc_tokenizer_free(t);
}

/* ------------------------------------------------------------------------------------------------ */
/* refusals */

static void test_refuse_ids(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "ids");
    write_text(dir, "tokenizer.json", "{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":0,\"b\":2,\"c\":3}}}");
    load_fails(dir, "tokenizer.json", QM_ERR_BAD_SOURCE, "token id 1 is missing");
    /* a gap that only an id beyond the entry count reveals */
    write_text(dir, "tokenizer.json", "{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":0,\"b\":1,\"c\":7}}}");
    load_fails(dir, "tokenizer.json", QM_ERR_BAD_SOURCE, "token id 2 is missing");
    write_text(dir, "tokenizer.json", "{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":0,\"b\":1,\"c\":1}}}");
    load_fails(dir, "tokenizer.json", QM_ERR_BAD_SOURCE, "duplicate token id 1");
    /* an added token may not take a vocabulary id with another string */
    write_text(dir, "tokenizer.json", "{\"added_tokens\":[{\"id\":1,\"content\":\"<s>\",\"special\":true}],"
                                      "\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":0,\"b\":1}}}");
    load_fails(dir, "tokenizer.json", QM_ERR_BAD_SOURCE, "duplicate token id 1");
    write_text(dir, "tokenizer.json", "{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":0,\"b\":-1}}}");
    load_fails(dir, "tokenizer.json", QM_ERR_BAD_SOURCE, "negative");
    write_text(dir, "tokenizer.json", "{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":0,\"b\":16777216}}}");
    load_fails(dir, "tokenizer.json", QM_ERR_UNSUPPORTED, "cap");
    /* the same key twice in a JSON object */
    write_text(dir, "tokenizer.json", "{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":0,\"a\":1}}}");
    load_fails(dir, "tokenizer.json", QM_ERR_BAD_SOURCE, "duplicate");
    write_text(dir, "tokenizer.json", "{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":0,}}}");
    qm_error e = load_fails(dir, "tokenizer.json", QM_ERR_BAD_SOURCE, "invalid JSON");
    assert_true(e.offset != QM_NO_OFFSET);
}

static void test_refuse_models(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "models");
    write_text(dir, "tokenizer.json", "{\"model\":{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"a\",0.0]]}}");
    qm_error e = load_fails(dir, "tokenizer.json", QM_ERR_UNSUPPORTED, "Unigram");
    assert_string_equal(e.field, "model.type");
    write_text(dir, "tokenizer.json", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}");
    load_fails(dir, "tokenizer.json", QM_ERR_UNSUPPORTED, "WordPiece");
    /* BPE with word suffixes (CLIP) cannot be described by the metadata */
    write_text(dir, "tokenizer.json", "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
                                      "\"end_of_word_suffix\":\"</w>\",\"vocab\":{\"a\":0},\"merges\":[]}}");
    load_fails(dir, "tokenizer.json", QM_ERR_UNSUPPORTED, "end_of_word_suffix");
    write_text(dir, "tokenizer.json", "{\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
                                      "\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":0}}}");
    load_fails(dir, "tokenizer.json", QM_ERR_UNSUPPORTED, "BertPreTokenizer");
    /* merges: three parts in the string form; a part missing from the vocabulary */
    write_text(dir, "tokenizer.json", "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
                                      "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b c\"]}}");
    load_fails(dir, "tokenizer.json", QM_ERR_BAD_SOURCE, "two space-separated");
    write_text(dir, "tokenizer.json", "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
                                      "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[[\"a\",\"z\"]]}}");
    load_fails(dir, "tokenizer.json", QM_ERR_BAD_SOURCE, "\"z\" is not in the vocabulary");
    write_text(dir, "tokenizer.json", "{\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
                                      "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[[\"a\",\"b\",\"c\"]]}}");
    load_fails(dir, "tokenizer.json", QM_ERR_BAD_SOURCE, "array of two strings");
    /* a special token named by the config but absent from the vocabulary */
    write_text(dir, "tokenizer.json", k_gpt2_json);
    write_text(dir, "tokenizer_config.json", "{\"eos_token\":\"</s>\"}");
    load_fails(dir, "tokenizer.json", QM_ERR_BAD_SOURCE, "eos token \"</s>\" is not in the vocabulary");
}

static void test_refuse_regex(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "regex");
    write_split_json(dir, "(?i:'s|\\\\p{L}+");
    qm_error e = load_fails(dir, "tokenizer.json", QM_ERR_UNSUPPORTED, "PCRE2");
    if (!tu_contains(e.message, "pattern offset 13")) fail_msg("%s", e.message);
    assert_string_equal(e.field, "pre_tokenizer.pattern.Regex");
    write_split_json(dir, "\\\\p{NotAProperty}");
    load_fails(dir, "tokenizer.json", QM_ERR_UNSUPPORTED, "PCRE2");
}

static void test_refuse_text(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "text");
    write_text(dir, "vocab.txt", "ok\nbad\xC3(\nfine\n");
    qm_error e = load_fails(dir, "vocab.txt", QM_ERR_BAD_SOURCE, "UTF-8");
    assert_string_equal(e.field, "line 2");
    assert_int_equal(e.offset, 3);
    write_text(dir, "vocab.txt", "ok\n\xED\xA0\x80\n");   /* a surrogate */
    load_fails(dir, "vocab.txt", QM_ERR_BAD_SOURCE, "UTF-8");
    write_text(dir, "vocab.txt", "ok\n\nafter-empty\n");
    load_fails(dir, "vocab.txt", QM_ERR_BAD_SOURCE, "empty line");

    size_t big = QC_TOKENIZER_MAX_TOKEN + 1;
    char *buf = malloc(big + 4);
    assert_non_null(buf);
    memcpy(buf, "a\n", 2);
    memset(buf + 2, 'x', big);
    buf[2 + big] = '\n';
    char p[TU_PATH_MAX];
    join(p, dir, "vocab.txt");
    tu_write_file(p, buf, big + 3);
    free(buf);
    e = load_fails(dir, "vocab.txt", QM_ERR_UNSUPPORTED, "65537 bytes");
    assert_int_equal(e.offset, 2);
    /* exactly at the cap is fine */
    buf = malloc(QC_TOKENIZER_MAX_TOKEN);
    assert_non_null(buf);
    memset(buf, 'y', QC_TOKENIZER_MAX_TOKEN);
    tu_write_file(p, buf, QC_TOKENIZER_MAX_TOKEN);
    free(buf);
    qc_tokenizer *t = load_ok(dir, "vocab.txt");
    assert_int_equal(qc_tokenizer_vocab_size(t), 1);
    qc_tokenizer_free(t);

    /* files above the 64 MiB default cap are refused before they are read (a sparse file costs nothing) */
    int fd = open(p, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)QC_JSON_DEFAULT_CAP_TOKENIZER + 1), 0);
    close(fd);
    load_fails(dir, "vocab.txt", QM_ERR_UNSUPPORTED, "cap");
    unlink(p);
}

/* An oversized token in a tokenizer.json is refused like one in a text list. */
static void test_refuse_big_json_token(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "bigjson");
    size_t big = QC_TOKENIZER_MAX_TOKEN + 1;
    const char *head = "{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":0,\"";
    const char *tail = "\":1}}}";
    char *buf = malloc(strlen(head) + big + strlen(tail) + 1);
    assert_non_null(buf);
    strcpy(buf, head);
    memset(buf + strlen(head), 'x', big);
    strcpy(buf + strlen(head) + big, tail);
    write_text(dir, "tokenizer.json", buf);
    free(buf);
    load_fails(dir, "tokenizer.json", QM_ERR_UNSUPPORTED, "65537 bytes");
}

static void test_prefix_too_long(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "prefix");
    write_text(dir, "vocab.txt", "a\n");
    qc_tokenizer *t = load_ok(dir, "vocab.txt");
    char prefix[260];
    memset(prefix, 'p', 252);
    prefix[252] = '\0';
    char path[TU_PATH_MAX];
    tu_path(path, "prefix.qmap");
    qm_writer *w = NULL;
    qm_error err;
    assert_int_equal(qm_writer_create(path, NULL, &w, &err), QM_OK);
    assert_int_equal(qc_tokenizer_write_meta(t, w, prefix, &err), QM_ERR_BAD_KEY); /* 252 + "kind" fits, 252 + "source" does not */
    qm_writer_abort(w);
    qc_tokenizer_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2_json),
        cmocka_unit_test(test_split_regex_json),
        cmocka_unit_test(test_sentencepiece_json),
        cmocka_unit_test(test_sentencepiece_metaspace),
        cmocka_unit_test(test_sentencepiece_split_space),
        cmocka_unit_test(test_vocab_json_merges),
        cmocka_unit_test(test_vocab_txt),
        cmocka_unit_test(test_chat_template),
        cmocka_unit_test(test_wordlevel_json),
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_refuse_ids),
        cmocka_unit_test(test_refuse_models),
        cmocka_unit_test(test_refuse_regex),
        cmocka_unit_test(test_refuse_text),
        cmocka_unit_test(test_refuse_big_json_token),
        cmocka_unit_test(test_prefix_too_long),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
