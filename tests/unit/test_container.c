/* test_container.c — the public container API (include/qmap.h, "containers"): a file written through
 * format/'s writer read back through qmap_container_*: every metadata type, every dtype's bytes, the Q8_ROW
 * layout against spec 6.1 (test_util's independent tu_q8_layout), verification of a flipped byte, and
 * every NULL / out-of-range argument. */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmap.h"

static const uint32_t k_u32s[] = { 0, 7, 4000000000u };
static const double k_f64s[] = { -0.5, 1e300 };
static const bool k_bools[] = { true, false, true };
static const char *const k_strs[] = { "\xe2\x96\x81the", "", "a\0b" };
static const size_t k_str_lens[] = { 6, 0, 3 };
static const char k_text[] = "h\xc3\xa9llo";

#define N_TENSORS 4
static tu_tensor g_tensors[N_TENSORS];
static char g_path[TU_PATH_MAX];

static void ok(qm_status s, const qm_error *e) { if (s != QM_OK) fail_msg("%s", e->message); }

/* One of each metadata type and of each plain dtype, and a rank-3 Q8_ROW tensor whose rows are not a
 * multiple of 64 long (so row_stride > cols). */
static int write_container(void **state)
{
    if (tu_group_setup(state)) return -1;
    tu_path(g_path, "c.qmap");
    qm_writer *w;
    qm_error e;
    qm_writer_opts o = { 256 };
    ok(qm_writer_create(g_path, &o, &w, &e), &e);
    ok(qm_writer_meta_u32(w, "m.u32", 4000000000u, &e), &e);
    ok(qm_writer_meta_i32(w, "m.i32", -5, &e), &e);
    ok(qm_writer_meta_u64(w, "m.u64", UINT64_MAX, &e), &e);
    ok(qm_writer_meta_i64(w, "m.i64", INT64_MIN, &e), &e);
    ok(qm_writer_meta_f32(w, "m.f32", 0.1f, &e), &e);
    ok(qm_writer_meta_f64(w, "m.f64", -2.5e-300, &e), &e);
    ok(qm_writer_meta_bool(w, "m.bool", true, &e), &e);
    ok(qm_writer_meta_string(w, "m.str", k_text, strlen(k_text), &e), &e);
    ok(qm_writer_meta_array(w, "m.a_u32", QM_META_U32, k_u32s, 3, &e), &e);
    ok(qm_writer_meta_array(w, "m.a_f64", QM_META_F64, k_f64s, 2, &e), &e);
    ok(qm_writer_meta_array(w, "m.a_bool", QM_META_BOOL, k_bools, 3, &e), &e);
    ok(qm_writer_meta_string_array(w, "m.a_str", k_strs, k_str_lens, 3, &e), &e);
    static const uint64_t d1[] = { 5 }, d2[] = { 3, 70 }, d3[] = { 2, 3, 100 };
    tu_tensor_make(&g_tensors[0], "f32", QM_DTYPE_F32, 2, d2, 256, 1);
    tu_tensor_make(&g_tensors[1], "f16", QM_DTYPE_F16, 1, d1, 256, 2);
    tu_tensor_make(&g_tensors[2], "i32", QM_DTYPE_I32, 1, d1, 256, 3);
    tu_tensor_make(&g_tensors[3], "q8", QM_DTYPE_Q8_ROW, 3, d3, 256, 4);
    tu_write_tensors(w, g_tensors, N_TENSORS, 0);
    ok(qm_writer_finish(w, &e), &e);
    return 0;
}

static int remove_container(void **state)
{
    for (int i = 0; i < N_TENSORS; i++) tu_tensor_free(&g_tensors[i]);
    return tu_group_teardown(state);
}

static qmap_container *open_ok(const char *path)
{
    qmap_container *c = NULL;
    qmap_error err;
    qmap_status s = qmap_container_open(path, &c, &err);
    if (s != QMAP_OK) fail_msg("%s", err.message);
    assert_non_null(c);
    return c;
}

static qmap_meta_entry meta_ok(const qmap_container *c, const char *key, qmap_meta_type type)
{
    qmap_meta_entry m;
    qmap_error err;
    if (qmap_container_find_meta(c, key, &m, &err) != QMAP_OK) fail_msg("%s", err.message);
    assert_string_equal(m.key, key);
    assert_int_equal(m.type, type);
    return m;
}

static void test_info(void **state)
{
    (void)state;
    qmap_container *c = open_ok(g_path);
    qmap_container_info info;
    qmap_container_get_info(c, &info);
    assert_string_equal(info.path, g_path);
    assert_int_equal(info.major_version, 1);
    assert_int_equal(info.alignment, 256);
    assert_int_equal(info.metadata_count, 12);
    assert_int_equal(info.tensor_count, N_TENSORS);
    size_t len;
    uint8_t *img = tu_read_file(g_path, &len);
    assert_int_equal(info.file_size, len);
    free(img);
    qmap_container_close(c);
}

static void test_scalars_and_strings(void **state)
{
    (void)state;
    qmap_container *c = open_ok(g_path);
    assert_int_equal(meta_ok(c, "m.u32", QMAP_META_U32).v.u32, 4000000000u);
    assert_int_equal(meta_ok(c, "m.i32", QMAP_META_I32).v.i32, -5);
    assert_true(meta_ok(c, "m.u64", QMAP_META_U64).v.u64 == UINT64_MAX);
    assert_true(meta_ok(c, "m.i64", QMAP_META_I64).v.i64 == INT64_MIN);
    assert_true(meta_ok(c, "m.f32", QMAP_META_F32).v.f32 == 0.1f);
    assert_true(meta_ok(c, "m.f64", QMAP_META_F64).v.f64 == -2.5e-300);
    assert_true(meta_ok(c, "m.bool", QMAP_META_BOOL).v.b);
    qmap_meta_entry s = meta_ok(c, "m.str", QMAP_META_STRING);
    assert_int_equal(s.str_len, strlen(k_text));
    assert_memory_equal(s.str, k_text, strlen(k_text));
    assert_null(s.elems);
    /* entries in file order, as written */
    qmap_meta_entry first, last;
    assert_int_equal(qmap_container_meta(c, 0, &first, NULL), QMAP_OK);
    assert_string_equal(first.key, "m.u32");
    assert_int_equal(qmap_container_meta(c, 11, &last, NULL), QMAP_OK);
    assert_string_equal(last.key, "m.a_str");
    qmap_container_close(c);
}

static void test_arrays(void **state)
{
    (void)state;
    qmap_container *c = open_ok(g_path);
    qmap_meta_entry a = meta_ok(c, "m.a_u32", QMAP_META_ARRAY);
    assert_int_equal(a.elem_type, QMAP_META_U32);
    assert_int_equal(a.count, 3);
    assert_int_equal(a.elems_size, 12);
    for (uint64_t i = 0; i < 3; i++) {
        uint32_t v;
        assert_int_equal(qmap_meta_array_get(&a, i, &v, NULL), QMAP_OK);
        assert_int_equal(v, k_u32s[i]);
        assert_int_equal(tu_rd32((const uint8_t *)a.elems + 4 * i), k_u32s[i]);   /* little-endian, packed */
    }
    qmap_meta_entry f = meta_ok(c, "m.a_f64", QMAP_META_ARRAY);
    for (uint64_t i = 0; i < 2; i++) {
        double v;
        assert_int_equal(qmap_meta_array_get(&f, i, &v, NULL), QMAP_OK);
        assert_true(v == k_f64s[i]);
    }
    qmap_meta_entry b = meta_ok(c, "m.a_bool", QMAP_META_ARRAY);
    assert_int_equal(b.elems_size, 3);
    for (uint64_t i = 0; i < 3; i++) {
        bool v;
        assert_int_equal(qmap_meta_array_get(&b, i, &v, NULL), QMAP_OK);
        assert_int_equal(v, k_bools[i]);
    }
    qmap_meta_entry s = meta_ok(c, "m.a_str", QMAP_META_ARRAY);
    assert_int_equal(s.elem_type, QMAP_META_STRING);
    assert_null(s.elems);
    for (uint64_t i = 0; i < 3; i++) {
        const char *p;
        size_t n;
        assert_int_equal(qmap_meta_array_string(c, &s, i, &p, &n, NULL), QMAP_OK);
        assert_int_equal(n, k_str_lens[i]);
        assert_memory_equal(p, k_strs[i], n);
    }
    /* the wrong kind of array, and past the end */
    qmap_error err;
    uint32_t u;
    const char *p;
    size_t n;
    assert_int_equal(qmap_meta_array_get(&s, 0, &u, &err), QMAP_ERR_TYPE_MISMATCH);
    assert_true(tu_contains(err.message, "m.a_str"));
    assert_int_equal(qmap_meta_array_string(c, &a, 0, &p, &n, &err), QMAP_ERR_TYPE_MISMATCH);
    assert_int_equal(qmap_meta_array_get(&a, 3, &u, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_meta_array_string(c, &s, 3, &p, &n, &err), QMAP_ERR_INVALID_ARGUMENT);
    qmap_meta_entry scalar = meta_ok(c, "m.u32", QMAP_META_U32);
    assert_int_equal(qmap_meta_array_get(&scalar, 0, &u, &err), QMAP_ERR_TYPE_MISMATCH);
    qmap_container_close(c);
}

static void test_tensors(void **state)
{
    (void)state;
    qmap_container *c = open_ok(g_path);
    for (uint64_t i = 0; i < N_TENSORS; i++) {
        const tu_tensor *want = &g_tensors[i];
        qmap_tensor_info t, byname;
        assert_int_equal(qmap_container_tensor(c, i, &t, NULL), QMAP_OK);
        assert_int_equal(qmap_container_find_tensor(c, want->name, &byname, NULL), QMAP_OK);
        assert_ptr_equal(t.data, byname.data);
        assert_string_equal(t.name, want->name);
        assert_int_equal(t.dtype, want->dtype);
        assert_int_equal(t.rank, want->rank);
        assert_memory_equal(t.dims, want->dims, sizeof t.dims);
        assert_int_equal(t.size, want->size);
        assert_memory_equal(t.data, want->data, want->size);
        assert_int_equal(t.offset % 256, 0);
        assert_int_equal(t.checksum, qm_checksum(want->data, want->size));
        if (want->dtype != QM_DTYPE_Q8_ROW) {
            assert_int_equal(t.rows, 0);
            assert_int_equal(t.row_stride, 0);
            continue;
        }
        tu_q8 q = tu_q8_layout(want->rank, want->dims, 256);
        assert_int_equal(t.rows, q.rows);
        assert_int_equal(t.cols, q.cols);
        assert_int_equal(t.row_stride, q.row_stride);
        assert_int_equal(t.scales_offset, q.scales_offset);
        assert_int_equal(t.sums_offset, q.sums_offset);
        assert_true(t.row_stride > t.cols);
    }
    qmap_container_close(c);
}

static void test_verify(void **state)
{
    (void)state;
    char bad[TU_PATH_MAX];
    tu_copy_file(g_path, tu_path(bad, "bad.qmap"));
    qmap_container *c = open_ok(bad);
    qmap_tensor_info q8;
    assert_int_equal(qmap_container_find_tensor(c, "q8", &q8, NULL), QMAP_OK);
    qmap_status st[N_TENSORS];
    qmap_error err;
    assert_int_equal(qmap_container_verify(c, 0, true, st, &err), QMAP_OK);
    uint64_t off = q8.offset + q8.scales_offset;   /* a scale's byte: the sums still match the q bytes */
    qmap_container_close(c);

    tu_xor_byte(bad, off, 0x01);
    c = open_ok(bad);   /* opening reads no tensor byte: the damage shows only when verifying */
    assert_int_equal(qmap_container_verify(c, 2, false, st, &err), QMAP_ERR_TENSOR_CHECKSUM);
    assert_int_equal(err.code, QMAP_ERR_TENSOR_CHECKSUM);
    assert_true(tu_contains(err.message, "q8"));
    for (int i = 0; i < N_TENSORS; i++) assert_int_equal(st[i], i == 3 ? QMAP_ERR_TENSOR_CHECKSUM : QMAP_OK);
    assert_int_equal(qmap_container_verify(c, 1, false, NULL, NULL), QMAP_ERR_TENSOR_CHECKSUM);
    qmap_container_close(c);
}

static void test_open_errors(void **state)
{
    (void)state;
    qmap_container *c = (qmap_container *)&c;
    qmap_error err;
    char p[TU_PATH_MAX];
    assert_int_equal(qmap_container_open(tu_path(p, "absent.qmap"), &c, &err), QMAP_ERR_IO);
    assert_null(c);
    assert_true(tu_contains(err.message, "absent.qmap"));
    static const char text[] = "not a container, but long enough to hold a header? no.";
    tu_write_file(tu_path(p, "text.qmap"), text, sizeof text - 1);
    assert_true(qmap_container_open(p, &c, &err) != QMAP_OK);
    assert_null(c);
    assert_int_equal(qmap_container_open("/dev/null", &c, &err), QMAP_ERR_IO);   /* a device: refused */
    assert_int_equal(qmap_container_open(NULL, &c, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_open(g_path, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_open(NULL, NULL, NULL), QMAP_ERR_INVALID_ARGUMENT);
}

static void test_null_arguments(void **state)
{
    (void)state;
    qmap_container *c = open_ok(g_path);
    qmap_error err;
    qmap_meta_entry m;
    qmap_tensor_info t;
    qmap_container_info info;
    const char *s;
    size_t n;
    uint32_t u;
    qmap_container_close(NULL);
    qmap_container_get_info(NULL, &info);
    assert_null(info.path);
    assert_int_equal(info.tensor_count, 0);
    qmap_container_get_info(c, NULL);
    assert_int_equal(qmap_container_meta(NULL, 0, &m, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_meta(c, 0, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_meta(c, 12, &m, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_find_meta(NULL, "m.u32", &m, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_find_meta(c, NULL, &m, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_find_meta(c, "m.u32", NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_find_meta(c, "m.none", &m, &err), QMAP_ERR_NOT_FOUND);
    assert_true(tu_contains(err.message, "m.none"));
    assert_int_equal(qmap_meta_array_get(NULL, 0, &u, &err), QMAP_ERR_INVALID_ARGUMENT);
    m = meta_ok(c, "m.a_u32", QMAP_META_ARRAY);
    assert_int_equal(qmap_meta_array_get(&m, 0, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    m = meta_ok(c, "m.a_str", QMAP_META_ARRAY);
    assert_int_equal(qmap_meta_array_string(NULL, &m, 0, &s, &n, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_meta_array_string(c, NULL, 0, &s, &n, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_meta_array_string(c, &m, 0, NULL, &n, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_meta_array_string(c, &m, 0, &s, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_tensor(NULL, 0, &t, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_tensor(c, 0, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_tensor(c, N_TENSORS, &t, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_find_tensor(NULL, "q8", &t, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_find_tensor(c, NULL, &t, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_find_tensor(c, "q8", NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_find_tensor(c, "nope", &t, &err), QMAP_ERR_NOT_FOUND);
    assert_true(tu_contains(err.message, "nope"));
    assert_int_equal(qmap_container_verify(NULL, 0, false, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_int_equal(qmap_container_verify(c, -1, false, NULL, &err), QMAP_ERR_INVALID_ARGUMENT);
    /* a NULL err is allowed everywhere */
    assert_int_equal(qmap_container_find_tensor(c, "nope", &t, NULL), QMAP_ERR_NOT_FOUND);
    qmap_container_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info),
        cmocka_unit_test(test_scalars_and_strings),
        cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_tensors),
        cmocka_unit_test(test_verify),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_null_arguments),
    };
    return cmocka_run_group_tests(tests, write_container, remove_container);
}
