/* test_tok_norm.c — the runtime tokenizer's normalizer steps (runtime/qr_tok_norm.c, spec/TOKENIZER.md §1).
 *
 * Parsing of the stored `normalizer` value: every step name, lists, and each refusal naming the step.
 * Applying: one known case per step (the Unicode data is utf8proc's; tests/tokenizer/test_normalizers.py
 * compares whole tokenizers against Python's unicodedata and the npm reference encoders), the lowercase
 * special case U+0130, a NUL kept as a character, growth beyond the input's length, and the order of steps. */
#include <stdarg.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "qr_tok_internal.h"

static void parse_ok(void **state)
{
    (void)state;
    qr_norm_step s[QR_NORM_MAX];
    uint32_t n = 99;
    qm_error e = { 0 };
    assert_int_equal(qr_norm_parse("nfc", 3, s, &n, "m.qmap", "tokenizer.normalizer", 7, &e), QM_OK);
    assert_int_equal(n, 1);
    assert_int_equal(s[0], QR_NORM_NFC);
    const char *all = "nfd,nfkc,nfkd,lowercase,nfc";
    assert_int_equal(qr_norm_parse(all, strlen(all), s, &n, "m.qmap", "k", 0, &e), QM_OK);
    assert_int_equal(n, 5);
    assert_int_equal(s[0], QR_NORM_NFD);
    assert_int_equal(s[1], QR_NORM_NFKC);
    assert_int_equal(s[2], QR_NORM_NFKD);
    assert_int_equal(s[3], QR_NORM_LOWERCASE);
    assert_int_equal(s[4], QR_NORM_NFC);
    assert_int_equal(qr_norm_parse("", 0, s, &n, "m.qmap", "k", 0, &e), QM_OK);   /* empty: no step */
    assert_int_equal(n, 0);
}

static void parse_refusals(void **state)
{
    (void)state;
    qr_norm_step s[QR_NORM_MAX];
    uint32_t n;
    qm_error e = { 0 };
    assert_int_equal(qr_norm_parse("nfc,strip", 9, s, &n, "m.qmap", "tokenizer.normalizer", 7, &e), QM_ERR_UNSUPPORTED);
    assert_non_null(strstr(e.message, "\"strip\""));
    assert_non_null(strstr(e.message, "tokenizer.normalizer"));
    assert_int_equal(qr_norm_parse("NFC", 3, s, &n, "m.qmap", "k", 0, &e), QM_ERR_UNSUPPORTED);   /* names are lower case */
    assert_int_equal(qr_norm_parse("nfc,", 4, s, &n, "m.qmap", "k", 0, &e), QM_ERR_UNSUPPORTED);
    assert_int_equal(qr_norm_parse("nfc,,nfd", 8, s, &n, "m.qmap", "k", 0, &e), QM_ERR_UNSUPPORTED);
    const char *nine = "nfc,nfc,nfc,nfc,nfc,nfc,nfc,nfc,nfc";
    assert_int_equal(qr_norm_parse(nine, strlen(nine), s, &n, "m.qmap", "k", 0, &e), QM_ERR_UNSUPPORTED);
    assert_non_null(strstr(e.message, "more than 8"));
}

static void expect(const qr_norm_step *steps, uint32_t n_steps, const char *in, size_t in_len, const char *want,
                   size_t want_len)
{
    size_t n = 12345;
    uint8_t *out = qr_norm_apply(steps, n_steps, (const uint8_t *)in, in_len, &n);
    assert_non_null(out);
    assert_int_equal(n, want_len);
    assert_memory_equal(out, want, want_len);
    free(out);
}

static void apply_steps(void **state)
{
    (void)state;
    const qr_norm_step nfc = QR_NORM_NFC, nfd = QR_NORM_NFD, nfkc = QR_NORM_NFKC, nfkd = QR_NORM_NFKD,
                       low = QR_NORM_LOWERCASE;
    expect(&nfc, 1, "e\xcc\x81", 3, "\xc3\xa9", 2);                   /* e + U+0301 -> é */
    expect(&nfd, 1, "\xc3\xa9", 2, "e\xcc\x81", 3);
    expect(&nfc, 1, "\xef\xac\x81", 3, "\xef\xac\x81", 3);            /* ﬁ: only compatibility maps it */
    expect(&nfkc, 1, "\xef\xac\x81", 3, "fi", 2);
    expect(&nfkd, 1, "\xe2\x84\xab", 3, "A\xcc\x8a", 3);              /* Å (angstrom) -> A + ring */
    expect(&nfd, 1, "\xed\x95\x9c", 3, "\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab", 9);   /* 한 -> three jamo */
    expect(&low, 1, "HeLLo \xc3\x84", 8, "hello \xc3\xa4", 8);
    expect(&low, 1, "\xc4\xb0", 2, "i\xcc\x87", 3);                   /* İ -> i + U+0307 (SpecialCasing) */
    expect(&low, 1, "\xc8\xba", 2, "\xe2\xb1\xa5", 3);                /* Ⱥ -> ⱥ: 2 bytes become 3 */
    expect(&low, 1, "\xce\xa3\xce\xa3", 4, "\xcf\x83\xcf\x83", 4);    /* no final-sigma rule, as HF's */
    expect(&nfkc, 1, "a\0b", 3, "a\0b", 3);                             /* NUL is a character */
    /* ﷺ (U+FDFA) is one of the longest compatibility expansions: 3 bytes to 33 */
    size_t n = 0;
    uint8_t *out = qr_norm_apply(&nfkc, 1, (const uint8_t *)"\xef\xb7\xba", 3, &n);
    assert_non_null(out);
    assert_true(n > 30);
    free(out);
    /* order matters: lowercase then NFKC differs from NFKC then lowercase on ℌ (U+210C -> H -> h) */
    const qr_norm_step kl[2] = { QR_NORM_NFKC, QR_NORM_LOWERCASE }, lk[2] = { QR_NORM_LOWERCASE, QR_NORM_NFKC };
    expect(kl, 2, "\xe2\x84\x8c", 3, "h", 1);
    expect(lk, 2, "\xe2\x84\x8c", 3, "H", 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parse_ok),
        cmocka_unit_test(parse_refusals),
        cmocka_unit_test(apply_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
