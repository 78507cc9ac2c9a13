/* test_json_caps.c — convert/qc_json.h: the tree estimate holds against what jansson really allocates,
 * and the caps refuse by size and by estimate with a message naming the flag.
 *
 * The estimate is the guard against a small file of small containers taking gigabytes to parse, so it
 * must not fall below the real cost: for each shape that real and hostile files are made of, parse a
 * million of them and compare the heap growth (mallinfo2) with qc_json_tree_estimate — it must be at least
 * the real figure and at most 2.5 times it. Under ASan the allocator is not glibc's and mallinfo2 says
 * nothing, so that comparison is skipped there (the cap tests still run). */
#include <stdarg.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_json.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#define N 200000

#ifndef UNDER_ASAN
/* "[" + n copies of `item` joined by "," + "]", or with keys "k<i>": item for an object. */
static char *repeat(const char *item, bool object, size_t *len)
{
    size_t cap = 16 + (size_t)N * (strlen(item) + 16), p = 0;
    char *b = malloc(cap);
    assert_non_null(b);
    b[p++] = object ? '{' : '[';
    for (size_t i = 0; i < N; i++) {
        if (object) p += (size_t)sprintf(b + p, "\"k%zu\":", i);
        p += (size_t)sprintf(b + p, "%s%s", item, i + 1 < N ? "," : "");
    }
    b[p++] = object ? '}' : ']';
    b[p] = '\0';
    *len = p;
    return b;
}
#endif

static void test_estimate_bounds_real_cost(void **state)
{
    (void)state;
#ifdef UNDER_ASAN
    skip();
#else
    static const struct { const char *item; bool object; } shapes[] = {
        { "[]", false }, { "[1]", false }, { "{}", false }, { "\"a b\"", false }, { "1", false },
        { "[\"ab\",\"cd\"]", false }, { "7", true }, { "\"abcdefghijklmnopqrstuvwxyz\"", false },
        { "{\"type\":\"x\",\"id\":3}", false }, { "[[[]]]", false },
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t len;
        char *text = repeat(shapes[i].item, shapes[i].object, &len);
        malloc_trim(0);
        struct mallinfo2 a = mallinfo2();
        json_error_t je;
        json_t *root = json_loadb(text, len, 0, &je);
        struct mallinfo2 b = mallinfo2();
        assert_non_null(root);
        double real = (double)(b.uordblks + b.hblkhd) - (double)(a.uordblks + a.hblkhd);
        double est = (double)qc_json_tree_estimate(text, len);
        print_message("%-36s %s: %8.1f MB parsed, estimate %8.1f MB (%.2fx)\n", shapes[i].item,
                      shapes[i].object ? "members" : "elements", real / 1e6, est / 1e6, est / real);
        if (!(est >= real && est <= 2.5 * real))
            fail_msg("estimate %.0f for %s is not within [1, 2.5] x the %.0f bytes jansson took", est,
                     shapes[i].item, real);
        json_decref(root);
        free(text);
    }
#endif
}

/* Quotes, escapes and brackets inside strings are not structure; an unterminated string ends the scan. */
static void test_estimate_ignores_strings(void **state)
{
    (void)state;
    const char *plain = "[\"aaaaaaaaa\"]";
    const char *tricky = "[\"[[{,:\\\"]]\"]";   /* one string holding brackets and an escaped quote */
    assert_int_equal(strlen(plain), strlen(tricky));
    assert_int_equal(qc_json_tree_estimate(plain, strlen(plain)), qc_json_tree_estimate(tricky, strlen(tricky)));
    uint64_t open = qc_json_tree_estimate("[\"abc", 5), lone = qc_json_tree_estimate("\\", 1);
    assert_true(open > 0 && lone > 0);
    assert_int_equal(qc_json_tree_estimate("", 0), 48);   /* one (absent) value: never zero, never a crash */
}

static void test_caps(void **state)
{
    (void)state;
    qm_error err;
    assert_int_equal(qc_json_cap(QC_JSON_TOKENIZER, 0), QC_JSON_DEFAULT_CAP_TOKENIZER);
    assert_int_equal(qc_json_cap(QC_JSON_CONFIG, 0), QC_JSON_DEFAULT_CAP_CONFIG);
    assert_int_equal(qc_json_cap(QC_JSON_INDEX, 5), 5);
    /* by size: 11 bytes against a 10-byte limit */
    assert_int_equal(qc_json_check("x.json", "{\"a\":12345}", 11, QC_JSON_CONFIG, 10, &err), QM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "--json-limit"));
    assert_non_null(strstr(err.message, "x.json"));
    assert_int_equal(qc_json_check("x.json", "{\"a\":12345}", 11, QC_JSON_CONFIG, 64, &err), QM_OK);
    /* by estimate: 1,000 empty arrays fit a 4 KiB limit by size but not 8 x 4 KiB of tree */
    size_t len;
    char *text = malloc(3 * 1000 + 2);
    assert_non_null(text);
    len = 0;
    text[len++] = '[';
    for (int i = 0; i < 1000; i++) { memcpy(text + len, "[],", 3); len += 3; }
    text[len - 1] = ']';
    assert_int_equal(qc_json_check("t.json", text, len, QC_JSON_TOKENIZER, 4096, &err), QM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.message, "memory"));
    assert_int_equal(qc_json_check("t.json", text, len, QC_JSON_TOKENIZER, 64 << 10, &err), QM_OK);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_estimate_bounds_real_cost),
        cmocka_unit_test(test_estimate_ignores_strings),
        cmocka_unit_test(test_caps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
