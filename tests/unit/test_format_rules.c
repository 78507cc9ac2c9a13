/* test_format_rules.c — status codes, UTF-8, shape/size/layout rules (spec sections 1, 5, 6, 7),
 * qm_open's refusals, and the golden files in tests/golden/{valid,invalid}. */
#include "test_util.h"

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------------ */
/* Status codes */

typedef struct status_row { int value; const char *name; const char *desc; } status_row;
static const status_row k_statuses[] = {
#define ROW(name, value, desc) {value, #name, desc},
    QM_STATUS_LIST(ROW)
#undef ROW
};
#define N_STATUSES (sizeof k_statuses / sizeof k_statuses[0])

static void test_status_names(void **state) {
    (void)state;
    assert_int_equal(N_STATUSES, 49); /* 0..39 container errors, 40..48 input errors (convert) */
    for (size_t i = 0; i < N_STATUSES; i++) {
        qm_status s = (qm_status)k_statuses[i].value;
        const char *name = qm_status_name(s);
        assert_non_null(name);
        assert_string_equal(name, k_statuses[i].name);
        assert_non_null(qm_status_string(s));
        assert_string_equal(qm_status_string(s), k_statuses[i].desc);
        for (size_t j = 0; j < i; j++) {
            assert_int_not_equal(k_statuses[j].value, k_statuses[i].value);
            assert_string_not_equal(qm_status_name((qm_status)k_statuses[j].value), name);
        }
    }
    assert_string_equal(qm_status_name((qm_status)9999), "QM_ERR_UNKNOWN");
    assert_string_equal(qm_status_name((qm_status)-1), "QM_ERR_UNKNOWN");
    assert_non_null(qm_status_string((qm_status)9999));
    assert_non_null(qm_status_string((qm_status)40));
}

static void test_status_from_name(void **state) {
    (void)state;
    for (size_t i = 0; i < N_STATUSES; i++) {
        const char *name = k_statuses[i].name;
        assert_int_equal(qm_status_from_name(name), k_statuses[i].value);
        assert_int_equal(qm_status_from_name(qm_status_name((qm_status)k_statuses[i].value)),
                         k_statuses[i].value);
        if (strncmp(name, "QM_ERR_", 7) == 0) assert_int_equal(qm_status_from_name(name + 7), k_statuses[i].value);
    }
    assert_int_equal(qm_status_from_name("BAD_MAGIC"), QM_ERR_BAD_MAGIC);
    assert_int_equal(qm_status_from_name("QM_ERR_NO_SUCH_ERROR"), -1);
    assert_int_equal(qm_status_from_name("NO_SUCH_ERROR"), -1);
    assert_int_equal(qm_status_from_name(""), -1);
    assert_int_equal(qm_status_from_name("QM_ERR_"), -1);
    assert_int_equal(qm_status_from_name("QM_ERR_UNKNOWN"), -1);
    assert_int_equal(qm_status_from_name("BAD_MAGIC_"), -1);
    assert_int_equal(qm_status_from_name("QM_ERR_BAD_MAGICX"), -1);
}

static void test_fail_and_clear(void **state) {
    (void)state;
    qm_error err;
    qm_status s = qm_fail(&err, QM_ERR_BAD_DIM, "model.qmap", "tensor[3].dims[1]", 1234, "dim is %d", 0);
    assert_int_equal(s, QM_ERR_BAD_DIM);
    assert_int_equal(err.code, QM_ERR_BAD_DIM);
    assert_int_equal(err.offset, 1234);
    assert_string_equal(err.field, "tensor[3].dims[1]");
    assert_true(tu_contains(err.message, "model.qmap"));
    assert_true(tu_contains(err.message, "tensor[3].dims[1]"));
    assert_true(tu_contains(err.message, "1234"));
    assert_true(tu_contains(err.message, "dim is 0"));
    assert_int_equal(qm_fail(NULL, QM_ERR_IO, NULL, NULL, QM_NO_OFFSET, "x"), QM_ERR_IO);
    s = qm_fail(&err, QM_ERR_IO, NULL, NULL, QM_NO_OFFSET, "plain %s", "text");
    assert_int_equal(s, QM_ERR_IO);
    assert_int_equal(err.offset, QM_NO_OFFSET);
    assert_string_equal(err.field, "");
    assert_true(tu_contains(err.message, "plain text"));
    /* messages stay one line of valid UTF-8 whatever a quoted name holds */
    s = qm_fail(&err, QM_ERR_DUPLICATE_NAME, "m.qmap", NULL, 7, "name \"%s\" appears twice", "a\nb\x1b[2Jc");
    assert_null(strchr(err.message, '\n'));
    assert_null(strchr(err.message, '\x1b'));
    assert_true(tu_contains(err.message, "a?b?[2Jc"));
    s = qm_fail(&err, QM_ERR_BAD_NAME, NULL, NULL, QM_NO_OFFSET, "%.4s|", "ab\xc3\xa9"); /* cut inside é */
    assert_true(tu_contains(err.message, "ab\xc3\xa9|"));
    s = qm_fail(&err, QM_ERR_BAD_NAME, NULL, NULL, QM_NO_OFFSET, "%.3s|", "ab\xc3\xa9");
    assert_true(tu_contains(err.message, "ab?|"));
    assert_true(qm_utf8_valid(err.message, strlen(err.message), false));
    qm_error_clear(&err);
    assert_int_equal(err.code, QM_OK);
    assert_string_equal(err.field, "");
    assert_string_equal(err.message, "");
}

/* ------------------------------------------------------------------------------------------------ */
/* UTF-8 */

#define U8(lit, nul) qm_utf8_valid(lit, sizeof(lit) - 1, nul)

static void test_utf8_valid_sequences(void **state) {
    (void)state;
    assert_true(qm_utf8_valid("", 0, false));
    assert_true(U8("hello, world ~\x7f", false));
    assert_true(U8("\xC2\x80", false));             /* U+0080, smallest 2-byte */
    assert_true(U8("\xC3\xA9t\xC3\xA9", false));    /* été */
    assert_true(U8("\xDF\xBF", false));             /* U+07FF */
    assert_true(U8("\xE0\xA0\x80", false));         /* U+0800, smallest 3-byte */
    assert_true(U8("\xE2\x82\xAC", false));         /* € */
    assert_true(U8("\xED\x9F\xBF", false));         /* U+D7FF, just below surrogates */
    assert_true(U8("\xEE\x80\x80", false));         /* U+E000, just above surrogates */
    assert_true(U8("\xEF\xBF\xBF", false));         /* U+FFFF */
    assert_true(U8("\xF0\x90\x80\x80", false));     /* U+10000, smallest 4-byte */
    assert_true(U8("\xF0\x9F\x98\x80", false));     /* 😀 */
    assert_true(U8("\xF4\x8F\xBF\xBF", false));     /* U+10FFFF */
    assert_true(U8("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z", false));
    /* only len bytes are looked at */
    assert_true(qm_utf8_valid("ab\xFF", 2, false));
    assert_true(qm_utf8_valid("\xE2\x82\xAC\x80", 3, false));
}

static void test_utf8_invalid_sequences(void **state) {
    (void)state;
    /* overlong */
    assert_false(U8("\xC0\x80", true));
    assert_false(U8("\xC0\xAF", true));
    assert_false(U8("\xC1\xBF", true));
    assert_false(U8("\xE0\x80\x80", true));
    assert_false(U8("\xE0\x9F\xBF", true));
    assert_false(U8("\xF0\x80\x80\x80", true));
    assert_false(U8("\xF0\x8F\xBF\xBF", true));
    /* surrogates */
    assert_false(U8("\xED\xA0\x80", true));
    assert_false(U8("\xED\xBF\xBF", true));
    assert_false(U8("\xED\xB0\x80", true));
    /* above U+10FFFF, and lead bytes that can never appear */
    assert_false(U8("\xF4\x90\x80\x80", true));
    assert_false(U8("\xF5\x80\x80\x80", true));
    assert_false(U8("\xF7\xBF\xBF\xBF", true));
    assert_false(U8("\xF8\x88\x80\x80\x80", true));
    assert_false(U8("\xFE", true));
    assert_false(U8("\xFF", true));
    /* truncated sequences, at the end and followed by other bytes */
    assert_false(U8("\xC3", true));
    assert_false(U8("\xE2\x82", true));
    assert_false(U8("\xE2", true));
    assert_false(U8("\xF0\x9F\x98", true));
    assert_false(U8("\xF0\x9F", true));
    assert_false(U8("abc\xC3", true));
    assert_false(U8("\xE2\x82" "A", true));
    assert_false(U8("\xF0\x9F\x98" "A", true));
    assert_false(U8("\xC3\xC3\xA9", true));
    assert_false(qm_utf8_valid("\xE2\x82\xAC", 2, true)); /* cut by len */
    /* stray continuation bytes */
    assert_false(U8("\x80", true));
    assert_false(U8("\xBF", true));
    assert_false(U8("a\x80" "b", true));
    assert_false(U8("\xC3\xA9\xA9", true));
    assert_false(U8("\xF0\x9F\x98\x80\x80", true));
}

static void test_utf8_nul(void **state) {
    (void)state;
    assert_true(qm_utf8_valid("a\0b", 3, true));
    assert_false(qm_utf8_valid("a\0b", 3, false));
    assert_true(qm_utf8_valid("\0", 1, true));
    assert_false(qm_utf8_valid("\0", 1, false));
    assert_false(qm_utf8_valid("abc\0", 4, false));
    assert_true(qm_utf8_valid("abc\0", 3, false));
    assert_true(qm_utf8_valid("\xC3\xA9\0\xE2\x82\xAC", 6, true));
    assert_false(qm_utf8_valid("\xC3\xA9\0\xE2\x82\xAC", 6, false));
}

/* ------------------------------------------------------------------------------------------------ */
/* Shapes, sizes, layouts (spec sections 5, 6, 6.1; R-TENSOR-6..8) */

#define P32 (1ull << 32)
#define P40 (1ull << 40)

static void test_shape_elements(void **state) {
    (void)state;
    uint64_t n = 12345;
    uint64_t d[4] = {2, 3, 4, 5};
    assert_int_equal(qm_shape_elements(1, d, &n), QM_OK); assert_int_equal(n, 2);
    assert_int_equal(qm_shape_elements(2, d, &n), QM_OK); assert_int_equal(n, 6);
    assert_int_equal(qm_shape_elements(3, d, &n), QM_OK); assert_int_equal(n, 24);
    assert_int_equal(qm_shape_elements(4, d, &n), QM_OK); assert_int_equal(n, 120);

    uint64_t one[4] = {1, 1, 1, 1};
    assert_int_equal(qm_shape_elements(4, one, &n), QM_OK); assert_int_equal(n, 1);

    assert_int_equal(qm_shape_elements(0, d, &n), QM_ERR_BAD_RANK);
    assert_int_equal(qm_shape_elements(5, d, &n), QM_ERR_BAD_RANK);
    assert_int_equal(qm_shape_elements(UINT32_MAX, d, &n), QM_ERR_BAD_RANK);

    uint64_t z[2] = {0, 3};
    assert_int_equal(qm_shape_elements(1, z, &n), QM_ERR_BAD_DIM);
    uint64_t z2[2] = {3, 0};
    assert_int_equal(qm_shape_elements(2, z2, &n), QM_ERR_BAD_DIM);
    uint64_t big[1] = {P32 + 1};
    assert_int_equal(qm_shape_elements(1, big, &n), QM_ERR_BAD_DIM);
    uint64_t huge[1] = {UINT64_MAX};
    assert_int_equal(qm_shape_elements(1, huge, &n), QM_ERR_BAD_DIM);
    uint64_t exact[1] = {P32};
    assert_int_equal(qm_shape_elements(1, exact, &n), QM_OK); assert_int_equal(n, P32);
    uint64_t d4z[4] = {2, 2, 2, 0};
    assert_int_equal(qm_shape_elements(4, d4z, &n), QM_ERR_BAD_DIM);

    /* 2^40 elements is allowed; 2^40 + 1 = 257 * 4278255361 is not */
    uint64_t e40a[2] = {P32, 256};
    assert_int_equal(qm_shape_elements(2, e40a, &n), QM_OK); assert_int_equal(n, P40);
    uint64_t e40b[4] = {1u << 10, 1u << 10, 1u << 10, 1u << 10};
    assert_int_equal(qm_shape_elements(4, e40b, &n), QM_OK); assert_int_equal(n, P40);
    uint64_t e40p1[2] = {257, 4278255361ull};
    assert_int_equal(257ull * 4278255361ull, P40 + 1);
    assert_int_equal(qm_shape_elements(2, e40p1, &n), QM_ERR_TOO_MANY_ELEMENTS);
    uint64_t e41[3] = {1u << 20, 1u << 20, 2};
    assert_int_equal(qm_shape_elements(3, e41, &n), QM_ERR_TOO_MANY_ELEMENTS);
    /* products that wrap 64 bits must not come out small (R-GEN-1) */
    uint64_t wrap2[2] = {P32, P32};              /* 2^64 wraps to 0 */
    assert_int_equal(qm_shape_elements(2, wrap2, &n), QM_ERR_TOO_MANY_ELEMENTS);
    uint64_t wrap4[4] = {P32, P32, P32, P32};    /* 2^128 */
    assert_int_equal(qm_shape_elements(4, wrap4, &n), QM_ERR_TOO_MANY_ELEMENTS);
    uint64_t wrap3[3] = {P32, P32, 1};
    assert_int_equal(qm_shape_elements(3, wrap3, &n), QM_ERR_TOO_MANY_ELEMENTS);
}

static void test_tensor_nbytes_plain(void **state) {
    (void)state;
    uint64_t d[2] = {3, 5}, nb = 0;
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_F32, 2, d, 4096, &nb), QM_OK); assert_int_equal(nb, 60);
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_F16, 2, d, 4096, &nb), QM_OK); assert_int_equal(nb, 30);
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_BF16, 2, d, 4096, &nb), QM_OK); assert_int_equal(nb, 30);
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_I32, 2, d, 4096, &nb), QM_OK); assert_int_equal(nb, 60);
    /* alignment does not change plain sizes */
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_F32, 2, d, 64, &nb), QM_OK); assert_int_equal(nb, 60);
    uint64_t one[1] = {1};
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_F16, 1, one, 64, &nb), QM_OK); assert_int_equal(nb, 2);
    uint64_t e40[2] = {P32, 256};
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_F32, 2, e40, 4096, &nb), QM_OK); assert_int_equal(nb, 4 * P40);
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_BF16, 2, e40, 4096, &nb), QM_OK); assert_int_equal(nb, 2 * P40);

    assert_int_equal(qm_tensor_nbytes(0, 2, d, 4096, &nb), QM_ERR_UNKNOWN_DTYPE);
    assert_int_equal(qm_tensor_nbytes(6, 2, d, 4096, &nb), QM_ERR_UNKNOWN_DTYPE);
    assert_int_equal(qm_tensor_nbytes(UINT32_MAX, 2, d, 4096, &nb), QM_ERR_UNKNOWN_DTYPE);
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_F32, 0, d, 4096, &nb), QM_ERR_BAD_RANK);
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_F32, 5, d, 4096, &nb), QM_ERR_BAD_RANK);
    uint64_t z[1] = {0};
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_F32, 1, z, 4096, &nb), QM_ERR_BAD_DIM);
    uint64_t big[1] = {P32 + 1};
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_I32, 1, big, 4096, &nb), QM_ERR_BAD_DIM);
    uint64_t e40p1[2] = {257, 4278255361ull};
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_F32, 2, e40p1, 4096, &nb), QM_ERR_TOO_MANY_ELEMENTS);
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_Q8_ROW, 2, e40p1, 4096, &nb), QM_ERR_TOO_MANY_ELEMENTS);
    uint64_t wrap[2] = {P32, P32};
    assert_int_equal(qm_tensor_nbytes(QM_DTYPE_F32, 2, wrap, 4096, &nb), QM_ERR_TOO_MANY_ELEMENTS);
}

/* Q8_ROW layouts computed by hand from spec 6.1. */
typedef struct q8_case {
    uint32_t rank; uint64_t dims[4]; uint64_t alignment;
    uint64_t rows, cols, row_stride, scales_offset, sums_offset, size;
} q8_case;

static const q8_case k_q8_cases[] = {
    /* cols 1: stride 64 */
    {1, {1}, 64,         1, 1, 64, 64, 128, 132},
    {1, {1}, 4096,       1, 1, 64, 4096, 4160, 4164},
    {2, {17, 1}, 64,     17, 1, 64, 1088, 1216, 1284},     /* 4*17 = 68 -> 128 */
    {2, {17, 1}, 4096,   17, 1, 64, 4096, 4224, 4292},
    /* cols 63 */
    {2, {3, 63}, 64,     3, 63, 64, 192, 256, 268},
    {2, {3, 63}, 4096,   3, 63, 64, 4096, 4160, 4172},
    /* cols 64 */
    {2, {5, 64}, 64,     5, 64, 64, 320, 384, 404},
    {2, {5, 64}, 4096,   5, 64, 64, 4096, 4160, 4180},
    {1, {64}, 64,        1, 64, 64, 64, 128, 132},
    /* cols 65: stride 128 */
    {3, {2, 3, 65}, 64,  6, 65, 128, 768, 832, 856},
    {3, {2, 3, 65}, 4096, 6, 65, 128, 4096, 4160, 4184},
    /* cols 784: stride 832 */
    {1, {784}, 64,       1, 784, 832, 832, 896, 900},
    {1, {784}, 4096,     1, 784, 832, 4096, 4160, 4164},
    {2, {100, 784}, 64,  100, 784, 832, 83200, 83648, 84048},  /* 4*100 = 400 -> 448 */
    {2, {100, 784}, 4096, 100, 784, 832, 86016, 86464, 86864}, /* 83200 -> 21 pages */
    {4, {2, 2, 2, 784}, 64,   8, 784, 832, 6656, 6720, 6752},
    {4, {2, 2, 2, 784}, 4096, 8, 784, 832, 8192, 8256, 8288},
    /* larger alignment */
    {2, {3, 63}, 1u << 21, 3, 63, 64, 1u << 21, (1u << 21) + 64, (1u << 21) + 76},
};

static void test_q8row_layout(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_q8_cases / sizeof k_q8_cases[0]; i++) {
        const q8_case *c = &k_q8_cases[i];
        qm_q8row_layout l;
        memset(&l, 0xAB, sizeof l);
        qm_status s = qm_q8row_layout_of(c->rank, c->dims, c->alignment, &l);
        if (s != QM_OK) fail_msg("case %zu: %s", i, qm_status_name(s));
        assert_int_equal(l.rows, c->rows);
        assert_int_equal(l.cols, c->cols);
        assert_int_equal(l.row_stride, c->row_stride);
        assert_int_equal(l.scales_offset, c->scales_offset);
        assert_int_equal(l.sums_offset, c->sums_offset);
        assert_int_equal(l.size, c->size);
        uint64_t nb = 0;
        assert_int_equal(qm_tensor_nbytes(QM_DTYPE_Q8_ROW, c->rank, c->dims, c->alignment, &nb), QM_OK);
        assert_int_equal(nb, c->size);
        /* the test's own spec formula agrees with the hand values */
        tu_q8 t = tu_q8_layout(c->rank, c->dims, c->alignment);
        assert_int_equal(t.size, c->size);
        assert_int_equal(t.scales_offset, c->scales_offset);
    }
}

static void test_q8row_layout_errors(void **state) {
    (void)state;
    qm_q8row_layout l;
    uint64_t d[2] = {3, 63}, nb;
    assert_int_equal(qm_q8row_layout_of(0, d, 4096, &l), QM_ERR_BAD_RANK);
    assert_int_equal(qm_q8row_layout_of(5, d, 4096, &l), QM_ERR_BAD_RANK);
    uint64_t z[2] = {3, 0};
    assert_int_equal(qm_q8row_layout_of(2, z, 4096, &l), QM_ERR_BAD_DIM);
    uint64_t big[2] = {3, P32 + 1};
    assert_int_equal(qm_q8row_layout_of(2, big, 4096, &l), QM_ERR_BAD_DIM);
    uint64_t e40p1[2] = {257, 4278255361ull};
    assert_int_equal(qm_q8row_layout_of(2, e40p1, 4096, &l), QM_ERR_TOO_MANY_ELEMENTS);
    const uint64_t bad_align[] = {0, 1, 32, 63, 65, 100, 3000, 4097, 1ull << 31, 1ull << 63, UINT64_MAX};
    for (size_t i = 0; i < sizeof bad_align / sizeof bad_align[0]; i++) {
        assert_int_equal(qm_q8row_layout_of(2, d, bad_align[i], &l), QM_ERR_BAD_ALIGNMENT);
        assert_int_equal(qm_tensor_nbytes(QM_DTYPE_Q8_ROW, 2, d, bad_align[i], &nb), QM_ERR_BAD_ALIGNMENT);
    }
    /* the largest alignment is fine */
    assert_int_equal(qm_q8row_layout_of(2, d, 1ull << 30, &l), QM_OK);
    assert_int_equal(l.scales_offset, 1ull << 30);
    assert_int_equal(l.size, (1ull << 30) + 64 + 12);
    /* 2^40 elements in one row of 2^32 ... rows 256: still fits */
    uint64_t e40[2] = {256, P32};
    assert_int_equal(qm_q8row_layout_of(2, e40, 4096, &l), QM_OK);
    assert_int_equal(l.rows, 256);
    assert_int_equal(l.row_stride, P32);
    assert_int_equal(l.scales_offset, 256 * P32);
    assert_int_equal(l.sums_offset, 256 * P32 + 1024);
    assert_int_equal(l.size, 256 * P32 + 2048);
}

static void test_alignment_valid(void **state) {
    (void)state;
    assert_true(qm_alignment_valid(64));
    assert_true(qm_alignment_valid(128));
    assert_true(qm_alignment_valid(4096));
    assert_true(qm_alignment_valid(1u << 21));
    assert_true(qm_alignment_valid(1ull << 30));
    const uint64_t bad[] = {0, 1, 2, 32, 63, 65, 96, 100, 4095, 4097, 1ull << 31, 1ull << 63, UINT64_MAX,
                            (1ull << 30) + 64};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) assert_false(qm_alignment_valid(bad[i]));
}

static void test_dtype_and_meta_tables(void **state) {
    (void)state;
    const struct { uint32_t id; const char *name; uint32_t elem; } dt[] = {
        {1, "F32", 4}, {2, "F16", 2}, {3, "BF16", 2}, {4, "I32", 4}, {5, "Q8_ROW", 0}};
    for (size_t i = 0; i < 5; i++) {
        const qm_dtype_traits *t = qm_dtype_info(dt[i].id);
        assert_non_null(t);
        assert_int_equal(t->id, dt[i].id);
        assert_string_equal(t->name, dt[i].name);
        assert_int_equal(t->elem_size, dt[i].elem);
        assert_int_equal(qm_dtype_from_name(dt[i].name), dt[i].id);
        /* a layout that is not plain must say its size (qm_tensor_nbytes has no other way to know it) */
        assert_int_equal(t->elem_size == 0, t->layout_size != NULL);
    }
    assert_true(qm_dtype_info(QM_DTYPE_Q8_ROW)->is_quantized);
    assert_false(qm_dtype_info(QM_DTYPE_F32)->is_quantized);
    assert_false(qm_dtype_info(QM_DTYPE_I32)->is_float);
    assert_true(qm_dtype_info(QM_DTYPE_BF16)->is_float);
    assert_null(qm_dtype_info(0));
    assert_null(qm_dtype_info(6));
    assert_null(qm_dtype_info(UINT32_MAX));
    assert_int_equal(qm_dtype_from_name("q8_row"), QM_DTYPE_Q8_ROW);
    assert_int_equal(qm_dtype_from_name("bf16"), QM_DTYPE_BF16);
    assert_int_equal(qm_dtype_from_name("F64"), 0);
    assert_int_equal(qm_dtype_from_name(""), 0);

    const struct { uint32_t id; const char *name; uint32_t size; } mt[] = {
        {1, "U32", 4}, {2, "I32", 4}, {3, "U64", 8}, {4, "I64", 8}, {5, "F32", 4},
        {6, "F64", 8}, {7, "BOOL", 1}, {8, "STRING", 0}, {9, "ARRAY", 0}};
    for (size_t i = 0; i < 9; i++) {
        assert_non_null(qm_meta_type_name(mt[i].id));
        assert_string_equal(qm_meta_type_name(mt[i].id), mt[i].name);
        assert_int_equal(qm_meta_scalar_size(mt[i].id), mt[i].size);
    }
    assert_null(qm_meta_type_name(0));
    assert_null(qm_meta_type_name(10));
    assert_int_equal(qm_meta_scalar_size(0), 0);
    assert_int_equal(qm_meta_scalar_size(10), 0);
}

/* ------------------------------------------------------------------------------------------------ */
/* qm_open refusals outside the golden set */

static void expect_open_fails(const char *path, qm_status want) {
    qm_file *f = (qm_file *)(uintptr_t)1;
    qm_error err;
    memset(&err, 0, sizeof err);
    qm_status s = qm_open(path, &f, &err);
    if (s != want)
        fail_msg("qm_open(%s): expected %s, got %s (%s)", path, qm_status_name(want), qm_status_name(s),
                 err.message);
    assert_null(f);
    assert_int_equal(err.code, want);
    assert_true(err.message[0] != '\0');
}

static void test_open_missing(void **state) {
    (void)state;
    char p[TU_PATH_MAX];
    tu_path(p, "does-not-exist.qmap");
    expect_open_fails(p, QM_ERR_IO);
    qm_file *f = NULL;
    qm_error err;
    assert_int_equal(qm_open(p, &f, &err), QM_ERR_IO);
    assert_true(tu_contains(err.message, p));
}

static void test_open_directory(void **state) {
    (void)state;
    char p[TU_PATH_MAX];
    tu_mkdir(p, "a-directory.qmap");
    qm_file *f = (qm_file *)(uintptr_t)1;
    qm_error err;
    memset(&err, 0, sizeof err);
    qm_status s = qm_open(p, &f, &err);
    assert_int_not_equal(s, QM_OK);
    assert_null(f);
    if (s != QM_ERR_IO && s != QM_ERR_BAD_MAGIC && s != QM_ERR_INVALID_ARGUMENT)
        fail_msg("qm_open(directory): got %s (%s)", qm_status_name(s), err.message);
    assert_true(tu_contains(err.message, p));
}

static void test_open_short_files(void **state) {
    (void)state;
    char p[TU_PATH_MAX];
    uint8_t buf[200];
    memset(buf, 0, sizeof buf);
    tu_path(p, "empty.qmap");
    tu_write_file(p, buf, 0);
    expect_open_fails(p, QM_ERR_BAD_MAGIC); /* R-HDR-1: shorter than 8 bytes -> bad magic */
    {
        qm_file *f = NULL;
        qm_error err;
        qm_open(p, &f, &err);
        assert_true(tu_contains(err.message, "empty.qmap"));
    }
    tu_path(p, "seven.qmap");
    tu_write_file(p, "QMAP\r\n\x1a", 7);
    expect_open_fails(p, QM_ERR_BAD_MAGIC);
    tu_path(p, "magic-only.qmap");
    tu_write_file(p, "QMAP\r\n\x1a\n", 8);
    expect_open_fails(p, QM_ERR_TRUNCATED);
    memcpy(buf, "QMAP\r\n\x1a\n", 8);
    tu_path(p, "magic-127.qmap");
    tu_write_file(p, buf, 127);
    expect_open_fails(p, QM_ERR_TRUNCATED);
    tu_path(p, "wrong-magic.qmap");
    buf[4] = '\n'; /* line-ending conversion: "\r\n" -> "\n\n" */
    tu_write_file(p, buf, 200);
    expect_open_fails(p, QM_ERR_BAD_MAGIC);
    tu_path(p, "ascii.qmap");
    tu_write_file(p, "hello", 5);
    expect_open_fails(p, QM_ERR_BAD_MAGIC);
}

/* Build a small valid file with the library's writer to mutate. */
static void write_small(const char *path, uint64_t alignment) {
    qm_writer *w = NULL;
    qm_error err;
    qm_writer_opts o = {alignment};
    assert_int_equal(qm_writer_create(path, &o, &w, &err), QM_OK);
    assert_int_equal(qm_writer_meta_string(w, "general.name", "tiny", 4, &err), QM_OK);
    tu_tensor t[2];
    uint64_t d1[2] = {3, 5}, d2[1] = {7};
    tu_tensor_make(&t[0], "a", QM_DTYPE_F32, 2, d1, alignment, 1);
    tu_tensor_make(&t[1], "b", QM_DTYPE_I32, 1, d2, alignment, 2);
    tu_write_tensors(w, t, 2, 0);
    qm_status s = qm_writer_finish(w, &err);
    if (s != QM_OK) fail_msg("finish: %s: %s", qm_status_name(s), err.message);
    tu_tensor_free(&t[0]);
    tu_tensor_free(&t[1]);
}

static void mutate_u64(const char *src, const char *dst, uint64_t off, uint64_t v, bool fix_checksum) {
    tu_copy_file(src, dst);
    uint8_t b[8];
    tu_wr64(b, v);
    tu_pwrite(dst, off, b, 8);
    if (fix_checksum) tu_fix_header_checksum(dst);
}

static void test_open_header_mutations(void **state) {
    (void)state;
    char good[TU_PATH_MAX], p[TU_PATH_MAX];
    tu_path(good, "mut-good.qmap");
    write_small(good, 64);
    {
        qm_file *f = NULL;
        qm_error err;
        assert_int_equal(qm_open(good, &f, &err), QM_OK);
        qm_close(f);
    }
    size_t n;
    uint8_t *img = tu_read_file(good, &n);
    tu_path(p, "mut.qmap");

    /* R-HDR-2 */
    tu_copy_file(good, p);
    tu_pwrite(p, 8, "\x02\x00", 2);
    expect_open_fails(p, QM_ERR_UNSUPPORTED_VERSION);
    tu_copy_file(good, p);
    tu_pwrite(p, 8, "\x00\x00", 2);
    expect_open_fails(p, QM_ERR_UNSUPPORTED_VERSION);
    /* newer minor: readable (spec 3, Versions) once the checksum matches; R-HDR-9 otherwise */
    tu_copy_file(good, p);
    tu_pwrite(p, 10, "\x07\x00", 2);
    expect_open_fails(p, QM_ERR_HEADER_CHECKSUM);
    tu_fix_header_checksum(p);
    {
        qm_file *f = NULL;
        qm_error err;
        qm_status s = qm_open(p, &f, &err);
        if (s != QM_OK) fail_msg("minor 7: %s (%s)", qm_status_name(s), err.message);
        assert_int_equal(qm_file_header(f)->minor_version, 7);
        qm_close(f);
    }
    /* R-HDR-3 / R-HDR-4 */
    tu_write_file(p, img, n - 1);
    expect_open_fails(p, QM_ERR_TRUNCATED);
    {
        uint8_t *longer = calloc(1, n + 1);
        memcpy(longer, img, n);
        tu_write_file(p, longer, n + 1);
        expect_open_fails(p, QM_ERR_TRAILING_BYTES);
        free(longer);
    }
    /* R-HDR-5 */
    mutate_u64(good, p, 16, 100, false);
    expect_open_fails(p, QM_ERR_BAD_ALIGNMENT);
    mutate_u64(good, p, 16, 32, false);
    expect_open_fails(p, QM_ERR_BAD_ALIGNMENT);
    mutate_u64(good, p, 16, 1ull << 31, false);
    expect_open_fails(p, QM_ERR_BAD_ALIGNMENT);
    /* R-HDR-6 */
    tu_copy_file(good, p);
    tu_pwrite(p, 12, "\x01", 1);
    expect_open_fails(p, QM_ERR_RESERVED_NONZERO);
    mutate_u64(good, p, 112, 1, false);
    expect_open_fails(p, QM_ERR_RESERVED_NONZERO);
    /* R-HDR-7 */
    mutate_u64(good, p, 48, QM_MAX_COUNT + 1, false);
    expect_open_fails(p, QM_ERR_TOO_MANY);
    mutate_u64(good, p, 72, QM_MAX_COUNT + 1, false);
    expect_open_fails(p, QM_ERR_TOO_MANY);
    /* R-HDR-8 */
    mutate_u64(good, p, 32, 129, false);
    expect_open_fails(p, QM_ERR_BAD_LAYOUT);
    mutate_u64(good, p, 56, tu_rd64(img + 56) + 1, false);
    expect_open_fails(p, QM_ERR_BAD_LAYOUT);
    mutate_u64(good, p, 80, tu_rd64(img + 80) + 64, false);
    expect_open_fails(p, QM_ERR_BAD_LAYOUT);
    /* R-HDR-9: any byte of [0,120) or [128, data_offset) */
    tu_copy_file(good, p);
    tu_xor_byte(p, 120, 0x01);
    expect_open_fails(p, QM_ERR_HEADER_CHECKSUM);
    tu_copy_file(good, p);
    tu_xor_byte(p, 130, 0x01); /* inside the first metadata key_len... */
    expect_open_fails(p, QM_ERR_HEADER_CHECKSUM);
    /* R-HDR-10: padding before data_offset, checked after the checksum */
    uint64_t table_end = tu_rd64(img + 56) + tu_rd64(img + 64);
    assert_true(table_end < tu_rd64(img + 80)); /* there is padding with alignment 64 here */
    tu_copy_file(good, p);
    tu_pwrite(p, table_end, "\x01", 1);
    expect_open_fails(p, QM_ERR_HEADER_CHECKSUM);
    tu_fix_header_checksum(p);
    expect_open_fails(p, QM_ERR_PADDING_NONZERO);
    free(img);
}

/* ------------------------------------------------------------------------------------------------ */
/* Golden files */

static const char *const k_rules[] = {
    "R-GEN-1",
    "R-HDR-1", "R-HDR-2", "R-HDR-3", "R-HDR-4", "R-HDR-5", "R-HDR-6", "R-HDR-7", "R-HDR-8", "R-HDR-9",
    "R-HDR-10",
    "R-META-1", "R-META-2", "R-META-3", "R-META-4", "R-META-5", "R-META-6", "R-META-7", "R-META-8",
    "R-META-9",
    "R-TENSOR-1", "R-TENSOR-2", "R-TENSOR-3", "R-TENSOR-4", "R-TENSOR-5", "R-TENSOR-6", "R-TENSOR-7",
    "R-TENSOR-8", "R-TENSOR-9", "R-TENSOR-10", "R-TENSOR-11", "R-TENSOR-12", "R-TENSOR-13", "R-TENSOR-14",
};
#define N_RULES (sizeof k_rules / sizeof k_rules[0])
/* Data rules are checked by verification, not at open. */
static const char *const k_data_rules[] = {"R-DATA-1", "R-DATA-2"};

static const char *golden_dir(void) {
    const char *d = getenv("QM_GOLDEN_DIR");
    return (d && d[0]) ? d : "tests/golden";
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted list of "*.qmap" file names in dir; NULL with *n = 0 if the directory is missing. */
static char **list_qmap(const char *dir, size_t *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    size_t cap = 64;
    char **v = malloc(cap * sizeof *v);
    assert_non_null(v);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".qmap") != 0) continue;
        if (*n == cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof *v);
            assert_non_null(v);
        }
        v[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(v, *n, sizeof *v, cmp_str);
    return v;
}

static void free_list(char **v, size_t n) {
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* Which rule a golden file name belongs to ("<RULE-ID>[-<variant>].<ERROR>.qmap"); NULL if none. */
static const char *rule_of(const char *fname) {
    const char *best = NULL;
    size_t best_len = 0;
    for (size_t pass = 0; pass < 2; pass++) {
        const char *const *list = pass ? k_data_rules : k_rules;
        size_t cnt = pass ? 2 : N_RULES;
        for (size_t i = 0; i < cnt; i++) {
            size_t l = strlen(list[i]);
            if (strncmp(fname, list[i], l) == 0 && (fname[l] == '.' || fname[l] == '-') && l > best_len) {
                best = list[i];
                best_len = l;
            }
        }
    }
    return best;
}

/* Expected status from "<...>.<ERROR_NAME>.qmap"; -1 if the name does not parse. */
static int expected_of(const char *fname) {
    char buf[512];
    size_t l = strlen(fname);
    if (l >= sizeof buf || l < 6) return -1;
    memcpy(buf, fname, l - 5); /* strip ".qmap" */
    buf[l - 5] = '\0';
    char *dot = strrchr(buf, '.');
    if (!dot || dot[1] == '\0') return -1;
    char full[600];
    snprintf(full, sizeof full, "QM_ERR_%s", dot + 1);
    return qm_status_from_name(full);
}

/* List the .qmap files of tests/golden/<kind> into *n names (dir receives the folder); an empty or missing folder fails
 * the test, so a golden test can never pass by checking nothing. */
static char **golden_files(const char *kind, char *dir, size_t dir_size, size_t *n) {
    snprintf(dir, dir_size, "%s/%s", golden_dir(), kind);
    char **files = list_qmap(dir, n);
    if (*n == 0) {
        free_list(files, *n);
        fail_msg("no golden %s files in %s (directory missing or empty)", kind, dir);
    }
    return files;
}

static void test_golden_invalid(void **state) {
    (void)state;
    char dir[TU_PATH_MAX];
    size_t n;
    char **files = golden_files("invalid", dir, sizeof dir, &n);
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        const char *fn = files[i];
        char path[TU_PATH_MAX * 2];
        snprintf(path, sizeof path, "%s/%s", dir, fn);
        const char *rule = rule_of(fn);
        int want = expected_of(fn);
        if (!rule || want <= 0) {
            print_error("golden %s: name does not follow <RULE-ID>[-variant].<ERROR>.qmap (rule %s, error %d)\n",
                        fn, rule ? rule : "?", want);
            failures++;
            continue;
        }
        qm_file *f = (qm_file *)(uintptr_t)1;
        qm_error err;
        memset(&err, 0, sizeof err);
        qm_status s = qm_open(path, &f, &err);
        bool data_rule = strncmp(rule, "R-DATA-", 7) == 0;
        if (data_rule) {
            /* R-DATA rules are not checked at open: the file opens and verification reports it */
            if (s != QM_OK) {
                print_error("golden %s: qm_open: expected QM_OK (data rule), got %s: %s\n", fn,
                            qm_status_name(s), err.message);
                failures++;
                continue;
            }
            qm_verify_opts o = {1, true};
            memset(&err, 0, sizeof err);
            s = qm_verify(f, &o, NULL, NULL, &err);
            qm_close(f);
            f = NULL;
        }
        if ((int)s != want) {
            print_error("golden %s: expected %s, got %s: %s\n", fn, qm_status_name((qm_status)want),
                        qm_status_name(s), err.message);
            failures++;
            if (s == QM_OK && !data_rule) qm_close(f);
            continue;
        }
        if (!data_rule && f != NULL) {
            print_error("golden %s: *out is not NULL after a failed open\n", fn);
            failures++;
        }
        if (err.code != s) {
            print_error("golden %s: err.code is %s, return value %s\n", fn, qm_status_name(err.code),
                        qm_status_name(s));
            failures++;
        }
        if (err.message[0] == '\0' || !tu_contains(err.message, fn)) {
            print_error("golden %s: message does not name the file: \"%s\"\n", fn, err.message);
            failures++;
        }
        if (!data_rule) {
            /* the in-memory reader must agree */
            size_t len;
            uint8_t *img = tu_read_file(path, &len);
            qm_file *g = NULL;
            qm_error e2;
            qm_status s2 = qm_open_buffer(img, len, fn, &g, &e2);
            if (s2 != s || g != NULL) {
                print_error("golden %s: qm_open_buffer gives %s, qm_open %s\n", fn, qm_status_name(s2),
                            qm_status_name(s));
                failures++;
            } else if (!tu_contains(e2.message, fn)) {
                print_error("golden %s: qm_open_buffer message does not name the file: \"%s\"\n", fn,
                            e2.message);
                failures++;
            }
            if (g) qm_close(g);
            free(img);
        }
    }
    print_message("golden invalid: %zu files, %d failures\n", n, failures);
    free_list(files, n);
    assert_int_equal(failures, 0);
}

static void test_golden_rule_coverage(void **state) {
    (void)state;
    char dir[TU_PATH_MAX];
    size_t n;
    char **files = golden_files("invalid", dir, sizeof dir, &n);
    int missing = 0;
    for (size_t r = 0; r < N_RULES; r++) {
        bool found = false;
        for (size_t i = 0; i < n && !found; i++) {
            const char *rule = rule_of(files[i]);
            found = rule != NULL && strcmp(rule, k_rules[r]) == 0;
        }
        if (!found) {
            print_error("no golden invalid file for %s in %s\n", k_rules[r], dir);
            missing++;
        }
    }
    free_list(files, n);
    assert_int_equal(missing, 0);
}

static void test_golden_valid(void **state) {
    (void)state;
    char dir[TU_PATH_MAX];
    size_t n;
    char **files = golden_files("valid", dir, sizeof dir, &n);
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        char path[TU_PATH_MAX * 2];
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        qm_file *f = NULL;
        qm_error err;
        qm_status s = qm_open(path, &f, &err);
        if (s != QM_OK) {
            print_error("golden valid %s: qm_open: %s: %s\n", files[i], qm_status_name(s), err.message);
            failures++;
            continue;
        }
        uint64_t nt = qm_tensor_count(f);
        qm_status *st = calloc(nt ? nt : 1, sizeof *st);
        qm_verify_opts o = {0, true};
        qm_verify_report rep;
        memset(&rep, 0, sizeof rep);
        s = qm_verify(f, &o, st, &rep, &err);
        if (s != QM_OK) {
            print_error("golden valid %s: qm_verify(full): %s: %s\n", files[i], qm_status_name(s), err.message);
            failures++;
        } else if (rep.tensors_checked != nt || rep.tensors_bad != 0) {
            print_error("golden valid %s: report %llu checked / %llu bad, %llu tensors\n", files[i],
                        (unsigned long long)rep.tensors_checked, (unsigned long long)rep.tensors_bad,
                        (unsigned long long)nt);
            failures++;
        }
        free(st);
        qm_close(f);
    }
    print_message("golden valid: %zu files, %d failures\n", n, failures);
    free_list(files, n);
    assert_int_equal(failures, 0);
}

/* tests/golden/verify: files that open, and whose data breaks R-DATA-1 (plain verification fails) or
 * R-DATA-2 (plain verification passes, full verification fails). */
static void test_golden_verify(void **state) {
    (void)state;
    char dir[TU_PATH_MAX];
    size_t n;
    char **files = golden_files("verify", dir, sizeof dir, &n);
    int failures = 0;
    bool seen1 = false, seen2 = false;
    for (size_t i = 0; i < n; i++) {
        const char *fn = files[i];
        char path[TU_PATH_MAX * 2];
        snprintf(path, sizeof path, "%s/%s", dir, fn);
        const char *rule = rule_of(fn);
        int want = expected_of(fn);
        if (!rule || want <= 0 || strncmp(rule, "R-DATA-", 7) != 0) {
            print_error("golden verify %s: name does not follow R-DATA-<n>[-variant].<ERROR>.qmap\n", fn);
            failures++;
            continue;
        }
        bool full_only = strcmp(rule, "R-DATA-2") == 0;
        seen1 |= !full_only;
        seen2 |= full_only;
        qm_file *f = NULL;
        qm_error err;
        qm_status s = qm_open(path, &f, &err);
        if (s != QM_OK) {
            print_error("golden verify %s: qm_open: %s: %s\n", fn, qm_status_name(s), err.message);
            failures++;
            continue;
        }
        for (int full = 0; full <= 1; full++) {
            for (int threads = 1; threads <= 2; threads++) {
                qm_verify_opts o = {threads, full != 0};
                qm_verify_report rep;
                memset(&rep, 0, sizeof rep);
                memset(&err, 0, sizeof err);
                uint64_t nt = qm_tensor_count(f);
                qm_status *st = calloc(nt ? nt : 1, sizeof *st);
                s = qm_verify(f, &o, st, &rep, &err);
                qm_status exp = (full_only && !full) ? QM_OK : (qm_status)want;
                uint64_t marked = 0;
                for (uint64_t k = 0; k < nt; k++) marked += st[k] != QM_OK;
                free(st);
                if (s != exp) {
                    print_error("golden verify %s (full=%d threads=%d): expected %s, got %s: %s\n", fn, full,
                                threads, qm_status_name(exp), qm_status_name(s), err.message);
                    failures++;
                } else if (exp != QM_OK && (!tu_contains(err.message, fn) || rep.tensors_bad < 1 ||
                                            marked != rep.tensors_bad)) {
                    print_error("golden verify %s: message \"%s\", tensors_bad %llu, marked %llu\n", fn,
                                err.message, (unsigned long long)rep.tensors_bad, (unsigned long long)marked);
                    failures++;
                } else if (exp == QM_OK && (rep.tensors_bad != 0 || marked != 0)) {
                    print_error("golden verify %s: passes but reports %llu bad\n", fn,
                                (unsigned long long)rep.tensors_bad);
                    failures++;
                }
            }
        }
        qm_close(f);
    }
    print_message("golden verify: %zu files, %d failures\n", n, failures);
    free_list(files, n);
    assert_true(seen1);
    assert_true(seen2);
    assert_int_equal(failures, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_status_from_name),
        cmocka_unit_test(test_fail_and_clear),
        cmocka_unit_test(test_utf8_valid_sequences),
        cmocka_unit_test(test_utf8_invalid_sequences),
        cmocka_unit_test(test_utf8_nul),
        cmocka_unit_test(test_shape_elements),
        cmocka_unit_test(test_tensor_nbytes_plain),
        cmocka_unit_test(test_q8row_layout),
        cmocka_unit_test(test_q8row_layout_errors),
        cmocka_unit_test(test_alignment_valid),
        cmocka_unit_test(test_dtype_and_meta_tables),
        cmocka_unit_test(test_open_missing),
        cmocka_unit_test(test_open_directory),
        cmocka_unit_test(test_open_short_files),
        cmocka_unit_test(test_open_header_mutations),
        cmocka_unit_test(test_golden_invalid),
        cmocka_unit_test(test_golden_rule_coverage),
        cmocka_unit_test(test_golden_valid),
        cmocka_unit_test(test_golden_verify),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
