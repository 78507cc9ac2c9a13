/* test_names.c — the names table (format/qm_names.h) against the documents it puts in code.
 *
 * Every tensor name in the tables of spec/ARCHITECTURES.md (backticked, with {i} for the layer) must be a
 * pattern of the table, and every pattern of the table must appear in the spec: so the spec, convert,
 * quantize and the runtime cannot spell a name differently. Every "<arch>.<key>" the spec lists must be
 * formable from the hyperparameter suffixes, and every key of spec/TOKENIZER.md §1 from the tokenizer
 * suffixes. Also: formatting, bounds and round trips of the lookups. The spec directory comes from
 * QM_SPEC_DIR (default "spec", the repository root being the working directory of make unit). */
#include <stdarg.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qm_names.h"

static char *read_spec(const char *name)
{
    const char *dir = getenv("QM_SPEC_DIR");
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir ? dir : "spec", name);
    FILE *fp = fopen(path, "rb");
    if (!fp) fail_msg("cannot open %s (set QM_SPEC_DIR)", path);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[n] = 0;
    char *copy = malloc(n + 1);
    memcpy(copy, buf, n + 1);
    return copy;
}

/* The table's pattern with %u written as {i}, as the spec spells it. */
static void spec_form(qm_tensor_id id, char *out, size_t cap)
{
    const char *p = qm_tensor_pattern(id), *hole = strstr(p, "%u");
    if (hole) snprintf(out, cap, "%.*s{i}%s", (int)(hole - p), p, hole + 2);
    else snprintf(out, cap, "%s", p);
}

static bool in_table(const char *name)
{
    char buf[96];
    for (int id = 0; id < QM_TENSOR_COUNT; id++) {
        spec_form((qm_tensor_id)id, buf, sizeof buf);
        if (!strcmp(buf, name)) return true;
    }
    return false;
}

static int checked_names;
static char spec_names[256][96];   /* every name the spec's tables give, expanded */

static void check_one(const char *name)
{
    if (!in_table(name)) fail_msg("spec/ARCHITECTURES.md names tensor `%s`, which format/qm_names.h lacks", name);
    if (checked_names < 256) snprintf(spec_names[checked_names], sizeof spec_names[0], "%s", name);
    checked_names++;
}

/* One entry of a table's first cell, in the spec's shorthand: "`.bias`" after "`out_norm.weight`" is
 * out_norm.bias; "`attn_k`" after "`blk.{i}.attn_q.weight`" is blk.{i}.attn_k.weight ("`attn_k.bias`"
 * likewise); "`enc.{i}.ln1.*`" is its .weight and .bias. */
static void check_entry(const char *tok, char *prev, size_t prev_cap)
{
    char name[128];
    if (tok[0] == '.') {
        const char *dot = strrchr(prev, '.');
        snprintf(name, sizeof name, "%.*s%s", (int)(dot - prev), prev, tok);
    } else if (!strchr(tok, '{') && strchr(prev, '}') && strncmp(tok, "out", 3) && strncmp(tok, "enc_", 4) &&
               strncmp(tok, "dec_", 4) && strncmp(tok, "tok_", 4) && strncmp(tok, "pos_", 4)) {
        const char *after = strchr(prev, '}') + 2, *suffix = strrchr(prev, '.');
        snprintf(name, sizeof name, "%.*s%s%s", (int)(after - prev), prev, tok, strchr(tok, '.') ? "" : suffix);
    } else {
        snprintf(name, sizeof name, "%s", tok);
        snprintf(prev, prev_cap, "%s", tok);
    }
    size_t n = strlen(name);
    if (n > 2 && !strcmp(name + n - 2, ".*")) {
        char w[136];
        snprintf(w, sizeof w, "%.*s.weight", (int)(n - 2), name);
        check_one(w);
        snprintf(w, sizeof w, "%.*s.bias", (int)(n - 2), name);
        check_one(w);
    } else {
        check_one(name);
    }
}

/* The first cell of every table row of sections 3 to 7 lists container tensors ("| `name`, `…` |"). */
static int check_spec_tensors(const char *spec)
{
    checked_names = 0;
    const char *p = strstr(spec, "## 3."), *stop = strstr(spec, "## 8.");
    if (!p || !stop) fail_msg("spec/ARCHITECTURES.md: sections 3 and 8 not found");
    bool in_tensor_table = false;   /* inside a table whose first column is "container tensor" */
    for (; p && p < stop; p = strchr(p, '\n')) {
        p++;
        if (!strncmp(p, "| container tensor", 18)) in_tensor_table = true;
        else if (*p != '|') in_tensor_table = false;
        if (!in_tensor_table || strncmp(p, "| `", 3) != 0) continue;
        const char *cell_end = strchr(p + 1, '|');
        char prev[96] = "";
        for (const char *q = p + 2; q < cell_end;) {
            const char *a = strchr(q, '`');
            if (!a || a >= cell_end) break;
            const char *b = strchr(a + 1, '`');
            char tok[96];
            snprintf(tok, sizeof tok, "%.*s", (int)(b - a - 1), a + 1);
            check_entry(tok, prev, sizeof prev);
            q = b + 1;
        }
    }
    return checked_names;
}

static void test_tensor_names(void **state)
{
    (void)state;
    char *spec = read_spec("ARCHITECTURES.md");
    int checked = check_spec_tensors(spec);
    assert_true(checked >= 60);   /* the tables hold about seventy names: the scan must not go blind */
    char buf[96];
    for (int id = 0; id < QM_TENSOR_COUNT; id++) {   /* and the reverse: no name the spec does not define */
        spec_form((qm_tensor_id)id, buf, sizeof buf);
        bool found = false;
        for (int i = 0; i < checked_names && i < 256; i++) found |= !strcmp(spec_names[i], buf);
        if (!found) fail_msg("format/qm_names.h has %s, which spec/ARCHITECTURES.md's tables do not name", buf);
    }
    free(spec);
}

static void test_keys(void **state)
{
    (void)state;
    char *spec = read_spec("ARCHITECTURES.md");
    char key[QM_KEY_NAME_MAX], quoted[QM_KEY_NAME_MAX + 2];
    int found = 0;
    for (int a = QM_ARCH_MLP; a < QM_ARCH_COUNT; a++)
        for (int h = 0; h < QM_HPARAM_COUNT; h++) {
            assert_true(qm_hparam_key(key, sizeof key, (qm_arch)a, (qm_hparam)h) > 0);
            snprintf(quoted, sizeof quoted, "`%s`", key);
            found += strstr(spec, quoted) != NULL;
        }
    assert_true(found >= 20);   /* the keys spelled out in full in the spec come from the table */
    for (const char *k = QM_KEY_ARCHITECTURE; k; k = NULL) assert_non_null(strstr(spec, k));
    assert_non_null(strstr(spec, QM_KEY_FILE_TYPE));
    assert_non_null(strstr(spec, QM_KEY_QUANTIZE_SCHEME));
    free(spec);
    char *tok = read_spec("TOKENIZER.md");
    for (int k = 0; k < QM_TOK_KEY_COUNT; k++) {
        char q[64];
        snprintf(q, sizeof q, "`<P>%s`", qm_tok_key_suffix((qm_tok_key_id)k));
        if (!strstr(tok, q)) fail_msg("spec/TOKENIZER.md has no key %s", q);
    }
    free(tok);
}

static void test_lookups(void **state)
{
    (void)state;
    char buf[QM_TENSOR_NAME_MAX];
    assert_int_equal(qm_tensor_name(buf, sizeof buf, QM_TENSOR_BLK_ATTN_Q, 17), (int)strlen("blk.17.attn_q.weight"));
    assert_string_equal(buf, "blk.17.attn_q.weight");
    assert_int_equal(qm_tensor_name(buf, sizeof buf, QM_TENSOR_TOK_EMBD, 5), (int)strlen("tok_embd.weight"));
    assert_string_equal(buf, "tok_embd.weight");
    assert_int_equal(qm_tensor_name(buf, 8, QM_TENSOR_BLK_ATTN_Q, 1), -1);           /* does not fit */
    assert_int_equal(qm_tensor_name(buf, sizeof buf, QM_TENSOR_COUNT, 1), -1);       /* out of range */
    assert_true(qm_tensor_per_layer(QM_TENSOR_DEC_CROSS_QKV) && !qm_tensor_per_layer(QM_TENSOR_POS_ENC));
    for (int id = 0; id < QM_TENSOR_COUNT; id++)   /* the longest name at the largest layer fits the bound */
        assert_true(qm_tensor_name(buf, sizeof buf, (qm_tensor_id)id, 4095) > 0);
    for (int a = 0; a < QM_ARCH_COUNT; a++) {
        const char *n = qm_arch_name((qm_arch)a);
        assert_int_equal(qm_arch_from_name(n, strlen(n)), a);
    }
    assert_int_equal(qm_arch_from_name("llam", 4), QM_ARCH_COUNT);
    assert_int_equal(qm_arch_from_name("llama2", 6), QM_ARCH_COUNT);
    assert_null(qm_arch_name(QM_ARCH_COUNT));
    char key[QM_KEY_NAME_MAX];
    assert_true(qm_hparam_key(key, sizeof key, QM_ARCH_LLAMA, QM_HP_N_KV_HEADS) > 0);
    assert_string_equal(key, "llama.n_kv_heads");
    assert_int_equal(qm_hparam_key(key, 4, QM_ARCH_LLAMA, QM_HP_N_KV_HEADS), -1);
    assert_true(qm_tok_key(key, sizeof key, QM_TOK_SRC_PREFIX, QM_TOK_BYTE_FALLBACK) > 0);
    assert_string_equal(key, "tokenizer.src.byte_fallback");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensor_names),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_lookups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
