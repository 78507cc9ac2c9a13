/* test_format_rw.c — writer -> reader round trips, metadata, writer refusals, atomicity, determinism
 * and verification (spec sections 2-6, 8, 9; qm_writer.h / qm_reader.h contracts). */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static uint64_t f64_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static double bits_f64(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }

static void ok_or_fail(qm_status s, const qm_error *err, const char *what) {
    if (s != QM_OK) fail_msg("%s: %s: %s", what, qm_status_name(s), err ? err->message : "");
}

static qm_writer *new_writer(const char *path, uint64_t alignment) {
    qm_writer *w = NULL;
    qm_error err;
    qm_writer_opts o = {alignment};
    ok_or_fail(qm_writer_create(path, &o, &w, &err), &err, "qm_writer_create");
    assert_non_null(w);
    return w;
}

static void finish_ok(qm_writer *w) {
    qm_error err;
    ok_or_fail(qm_writer_finish(w, &err), &err, "qm_writer_finish");
}

static qm_file *open_ok(const char *path) {
    qm_file *f = NULL;
    qm_error err;
    ok_or_fail(qm_open(path, &f, &err), &err, path);
    assert_non_null(f);
    return f;
}

/* ------------------------------------------------------------------------------------------------ */
/* Round trips of every dtype and rank */

static const uint64_t k_shapes[4][4] = {{37}, {3, 65}, {2, 3, 17}, {2, 1, 3, 64}};
static const uint32_t k_dtypes[5] = {QM_DTYPE_F32, QM_DTYPE_F16, QM_DTYPE_BF16, QM_DTYPE_I32, QM_DTYPE_Q8_ROW};

/* 20 tensors (every dtype x rank 1..4) plus Q8_ROW [4, 784]. Returns the count. */
static size_t make_all_tensors(tu_tensor *ts, uint64_t alignment, uint64_t seed) {
    size_t n = 0;
    for (size_t d = 0; d < 5; d++) {
        for (uint32_t r = 1; r <= 4; r++) {
            char name[64];
            snprintf(name, sizeof name, "%s.rank%u", qm_dtype_info(k_dtypes[d]) ? qm_dtype_info(k_dtypes[d])->name
                                                                                 : "dtype", r);
            tu_tensor_make(&ts[n], name, k_dtypes[d], r, k_shapes[r - 1], alignment, seed + n);
            n++;
        }
    }
    uint64_t big[2] = {4, 784};
    tu_tensor_make(&ts[n], "blk.0.ffn_up.weight", QM_DTYPE_Q8_ROW, 2, big, alignment, seed + n);
    n++;
    return n;
}

static void roundtrip(uint64_t alignment, size_t chunk, const char *fname) {
    char path[TU_PATH_MAX];
    tu_path(path, fname);
    tu_tensor ts[24];
    size_t n = make_all_tensors(ts, alignment, 100);
    qm_writer *w = new_writer(path, alignment);
    tu_write_tensors(w, ts, n, chunk);
    finish_ok(w);

    size_t len;
    uint8_t *img = tu_read_file(path, &len);
    tu_check_image(img, len, alignment);

    qm_file *f = open_ok(path);
    const qm_header_info *h = qm_file_header(f);
    assert_non_null(h);
    assert_int_equal(h->major_version, 1);
    assert_int_equal(h->minor_version, 0);
    assert_int_equal(h->alignment, alignment);
    assert_int_equal(h->file_size, len);
    assert_int_equal(h->metadata_offset, 128);
    assert_int_equal(h->metadata_size, 0);
    assert_int_equal(h->metadata_count, 0);
    assert_int_equal(h->tensor_count, n);
    uint64_t table_size = 0;
    for (size_t i = 0; i < n; i++) table_size += 76 + strlen(ts[i].name);
    assert_int_equal(h->table_offset, 128);
    assert_int_equal(h->table_size, table_size);
    assert_int_equal(h->data_offset, tu_align_up(128 + table_size, alignment));
    assert_int_equal(h->header_checksum, tu_rd64(img + 120));
    assert_string_equal(qm_file_path(f), path);
    assert_memory_equal(qm_file_bytes(f), img, len);
    assert_int_equal(qm_tensor_count(f), n);
    assert_int_equal(qm_meta_count(f), 0);

    const uint8_t *base = qm_file_bytes(f);
    uint64_t prev_end = h->data_offset;
    for (size_t i = 0; i < n; i++) {
        const qm_tensor *t = qm_tensor_at(f, i);
        assert_non_null(t);
        assert_string_equal(t->name, ts[i].name);
        assert_int_equal(t->name_len, strlen(ts[i].name));
        assert_int_equal(t->dtype, ts[i].dtype);
        assert_int_equal(t->rank, ts[i].rank);
        uint64_t ne = 1;
        for (uint32_t k = 0; k < 4; k++) {
            assert_int_equal(t->dims[k], k < ts[i].rank ? ts[i].dims[k] : 0);
            if (k < ts[i].rank) ne *= ts[i].dims[k];
        }
        assert_int_equal(t->n_elements, ne);
        assert_int_equal(t->size, ts[i].size);
        assert_int_equal(t->offset % alignment, 0);
        assert_int_equal(t->offset, tu_align_up(prev_end, alignment));
        prev_end = t->offset + t->size;
        assert_ptr_equal(t->data, base + t->offset);
        assert_int_equal((uintptr_t)t->data % 64, 0);
        assert_memory_equal(t->data, ts[i].data, ts[i].size);
        assert_int_equal(t->checksum, XXH3_64bits(ts[i].data, ts[i].size));
        assert_int_equal(t->checksum, qm_checksum(t->data, t->size));
        assert_int_equal(t->entry_offset >= h->table_offset && t->entry_offset < h->table_offset + table_size, 1);
        assert_int_equal(tu_rd32(img + t->entry_offset), t->name_len);
        assert_ptr_equal(qm_find_tensor(f, ts[i].name), t);
        qm_error err;
        assert_int_equal(qm_tensor_verify(f, t, &err), QM_OK);
    }
    assert_int_equal(prev_end, len);
    assert_null(qm_tensor_at(f, n));
    assert_null(qm_tensor_at(f, UINT64_MAX));
    assert_null(qm_find_tensor(f, "no.such.tensor"));
    assert_null(qm_find_tensor(f, ""));
    assert_null(qm_find_tensor(f, "F32.rank")); /* prefix of a name */

    qm_verify_opts o = {2, true};
    qm_verify_report rep;
    memset(&rep, 0, sizeof rep);
    qm_error err;
    qm_status st[24];
    ok_or_fail(qm_verify(f, &o, st, &rep, &err), &err, "qm_verify");
    assert_int_equal(rep.tensors_checked, n);
    assert_int_equal(rep.tensors_bad, 0);
    for (size_t i = 0; i < n; i++) assert_int_equal(st[i], QM_OK);
    qm_close(f);

    /* the in-memory reader sees the same */
    qm_file *g = NULL;
    ok_or_fail(qm_open_buffer(img, len, "mem", &g, &err), &err, "qm_open_buffer");
    assert_int_equal(qm_tensor_count(g), n);
    assert_ptr_equal(qm_file_bytes(g), img);
    for (size_t i = 0; i < n; i++) assert_ptr_equal(qm_tensor_at(g, i)->data, img + qm_tensor_at(g, i)->offset);
    qm_close(g);

    /* the copying reader (qmap run --no-mmap): the same table, tensor bytes equal, in its own memory */
    ok_or_fail(qm_open_copy(path, &g, &err), &err, "qm_open_copy");
    assert_int_equal(qm_tensor_count(g), n);
    assert_true(qm_file_bytes(g) != img);
    assert_memory_equal(qm_file_bytes(g), img, len);
    for (size_t i = 0; i < n; i++) {
        const qm_tensor *t = qm_tensor_at(g, i);
        assert_ptr_equal(t->data, qm_file_bytes(g) + t->offset);
        assert_int_equal((uintptr_t)t->data % 64, 0);
        assert_memory_equal(t->data, ts[i].data, ts[i].size);
    }
    qm_close(g);

    free(img);
    for (size_t i = 0; i < n; i++) tu_tensor_free(&ts[i]);
    unlink(path);
    /* and its errors: a missing file names it */
    g = (qm_file *)&err;
    assert_int_equal(qm_open_copy(path, &g, &err), QM_ERR_IO);
    assert_null(g);
    assert_true(tu_contains(err.message, path));
}

static void test_roundtrip_align64(void **state) { (void)state; roundtrip(64, 1000, "rt64.qmap"); }
static void test_roundtrip_align4096(void **state) { (void)state; roundtrip(4096, 0, "rt4096.qmap"); }
static void test_roundtrip_align2m(void **state) { (void)state; roundtrip(1u << 21, 65536, "rt2m.qmap"); }

static void test_roundtrip_default_alignment(void **state) {
    (void)state;
    char path[TU_PATH_MAX];
    tu_path(path, "default-align.qmap");
    qm_writer *w = NULL;
    qm_error err;
    ok_or_fail(qm_writer_create(path, NULL, &w, &err), &err, "create(NULL opts)");
    tu_tensor t;
    uint64_t d[1] = {5};
    tu_tensor_make(&t, "x", QM_DTYPE_F32, 1, d, 4096, 9);
    tu_write_tensors(w, &t, 1, 0);
    finish_ok(w);
    qm_file *f = open_ok(path);
    assert_int_equal(qm_file_header(f)->alignment, 4096); /* spec 9 */
    assert_int_equal(qm_tensor_at(f, 0)->offset, 4096);
    assert_int_equal(qm_file_header(f)->file_size, 4096 + 20);
    qm_close(f);
    tu_tensor_free(&t);
}

static void test_roundtrip_limits(void **state) {
    (void)state;
    char path[TU_PATH_MAX];
    tu_path(path, "limits.qmap");
    char key[257], name[1025], uname[1025];
    memset(key, 'k', 256); key[256] = '\0';
    memset(name, 'n', 1024); name[1024] = '\0';
    /* 1024 bytes of 2-byte "é" */
    for (int i = 0; i < 1024; i += 2) { uname[i] = (char)0xC3; uname[i + 1] = (char)0xA9; }
    uname[1024] = '\0';
    qm_writer *w = new_writer(path, 64);
    qm_error err;
    ok_or_fail(qm_writer_meta_u32(w, key, 7, &err), &err, "256-byte key");
    tu_tensor t[2];
    uint64_t d1[1] = {1}, d2[4] = {1, 1, 1, 1};
    tu_tensor_make(&t[0], "", QM_DTYPE_F32, 1, d1, 64, 1);
    tu_tensor_make(&t[1], "", QM_DTYPE_Q8_ROW, 4, d2, 64, 2);
    ok_or_fail(qm_writer_add_tensor(w, name, t[0].dtype, t[0].rank, t[0].dims, &err), &err, "1024-byte name");
    ok_or_fail(qm_writer_add_tensor(w, uname, t[1].dtype, t[1].rank, t[1].dims, &err), &err, "utf8 name");
    ok_or_fail(qm_writer_write(w, t[0].data, t[0].size, &err), &err, "write");
    ok_or_fail(qm_writer_write(w, t[1].data, t[1].size, &err), &err, "write");
    finish_ok(w);
    size_t len;
    uint8_t *img = tu_read_file(path, &len);
    tu_check_image(img, len, 64);
    qm_file *f = open_ok(path);
    uint32_t v = 0;
    assert_int_equal(qm_meta_get_u32(f, key, &v), QM_OK);
    assert_int_equal(v, 7);
    assert_string_equal(qm_tensor_at(f, 0)->name, name);
    assert_int_equal(qm_tensor_at(f, 0)->name_len, 1024);
    assert_string_equal(qm_tensor_at(f, 1)->name, uname);
    assert_ptr_equal(qm_find_tensor(f, uname), qm_tensor_at(f, 1));
    assert_int_equal(qm_tensor_at(f, 1)->size, 132);
    qm_close(f);
    free(img);
    tu_tensor_free(&t[0]);
    tu_tensor_free(&t[1]);
}

/* ------------------------------------------------------------------------------------------------ */
/* Metadata */

#define BIG_N 200000u

static size_t big_str(uint32_t i, char *buf) {
    if (i % 1000 == 7) { buf[0] = '\0'; return 0; }
    if (i == 123456) return (size_t)sprintf(buf, "\xC3\xA9t\xC3\xA9-%u", i);
    return (size_t)sprintf(buf, "tok%u", i);
}

typedef struct meta_exp {
    const char *key;
    uint32_t type, elem_type;
    uint64_t count, value_size;
} meta_exp;

static const uint32_t a_u32[3] = {0, 1, UINT32_MAX};
static const int32_t a_i32[4] = {INT32_MIN, -1, 0, INT32_MAX};
static const uint64_t a_u64[3] = {0, UINT64_MAX, 1ull << 40};
static const int64_t a_i64[3] = {INT64_MIN, -1, INT64_MAX};
static const bool a_bool[4] = {true, false, true, true};
static const char k_str_nul[4] = {'a', '\0', 'b', '\0'};
static const char k_str_utf8[] = "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80";
static const char k_key_utf8[] = "\xD0\xBA\xD0\xBB\xD1\x8E\xD1\x87.\xE2\x82\xAC"; /* ключ.€ */

#define F32_NAN_BITS 0x7FC01234u
#define F32_NEGNAN_BITS 0xFFC00001u
#define F64_NAN_BITS 0x7FF8DEADBEEF0001ull

/* Writes the metadata set and fills exp[] (returns its length). */
static size_t write_meta_set(qm_writer *w, meta_exp *exp) {
    qm_error err;
    size_t n = 0;
#define EXP(k, t, et, c, vs) (exp[n++] = (meta_exp){k, t, et, c, vs})
    ok_or_fail(qm_writer_meta_u32(w, "u32.max", UINT32_MAX, &err), &err, "u32");      EXP("u32.max", 1, 0, 1, 4);
    ok_or_fail(qm_writer_meta_u32(w, "u32.zero", 0, &err), &err, "u32");              EXP("u32.zero", 1, 0, 1, 4);
    ok_or_fail(qm_writer_meta_i32(w, "i32.min", INT32_MIN, &err), &err, "i32");       EXP("i32.min", 2, 0, 1, 4);
    ok_or_fail(qm_writer_meta_i32(w, "i32.max", INT32_MAX, &err), &err, "i32");       EXP("i32.max", 2, 0, 1, 4);
    ok_or_fail(qm_writer_meta_u64(w, "u64.max", UINT64_MAX, &err), &err, "u64");      EXP("u64.max", 3, 0, 1, 8);
    ok_or_fail(qm_writer_meta_i64(w, "i64.min", INT64_MIN, &err), &err, "i64");       EXP("i64.min", 4, 0, 1, 8);
    ok_or_fail(qm_writer_meta_i64(w, "i64.max", INT64_MAX, &err), &err, "i64");       EXP("i64.max", 4, 0, 1, 8);
    ok_or_fail(qm_writer_meta_f32(w, "f32.nan", bits_f32(F32_NAN_BITS), &err), &err, "f32");
    EXP("f32.nan", 5, 0, 1, 4);
    ok_or_fail(qm_writer_meta_f32(w, "f32.negnan", bits_f32(F32_NEGNAN_BITS), &err), &err, "f32");
    EXP("f32.negnan", 5, 0, 1, 4);
    ok_or_fail(qm_writer_meta_f32(w, "f32.negzero", -0.0f, &err), &err, "f32");       EXP("f32.negzero", 5, 0, 1, 4);
    ok_or_fail(qm_writer_meta_f32(w, "f32.inf", INFINITY, &err), &err, "f32");        EXP("f32.inf", 5, 0, 1, 4);
    ok_or_fail(qm_writer_meta_f64(w, "f64.nan", bits_f64(F64_NAN_BITS), &err), &err, "f64");
    EXP("f64.nan", 6, 0, 1, 8);
    ok_or_fail(qm_writer_meta_f64(w, "f64.negzero", -0.0, &err), &err, "f64");        EXP("f64.negzero", 6, 0, 1, 8);
    ok_or_fail(qm_writer_meta_f64(w, "f64.denorm", bits_f64(1), &err), &err, "f64");  EXP("f64.denorm", 6, 0, 1, 8);
    ok_or_fail(qm_writer_meta_bool(w, "bool.true", true, &err), &err, "bool");        EXP("bool.true", 7, 0, 1, 1);
    ok_or_fail(qm_writer_meta_bool(w, "bool.false", false, &err), &err, "bool");      EXP("bool.false", 7, 0, 1, 1);
    ok_or_fail(qm_writer_meta_string(w, "str.hello", "hello", 5, &err), &err, "str"); EXP("str.hello", 8, 0, 1, 13);
    ok_or_fail(qm_writer_meta_string(w, "str.empty", "", 0, &err), &err, "str");      EXP("str.empty", 8, 0, 1, 8);
    ok_or_fail(qm_writer_meta_string(w, "str.nul", k_str_nul, 4, &err), &err, "str"); EXP("str.nul", 8, 0, 1, 12);
    ok_or_fail(qm_writer_meta_string(w, "str.utf8", k_str_utf8, strlen(k_str_utf8), &err), &err, "str");
    EXP("str.utf8", 8, 0, 1, 8 + strlen(k_str_utf8));
    ok_or_fail(qm_writer_meta_string(w, k_key_utf8, "v", 1, &err), &err, "utf8 key");
    EXP(k_key_utf8, 8, 0, 1, 9);
    ok_or_fail(qm_writer_meta_array(w, "arr.u32", QM_META_U32, a_u32, 3, &err), &err, "arr");
    EXP("arr.u32", 9, 1, 3, 12 + 12);
    ok_or_fail(qm_writer_meta_array(w, "arr.i32", QM_META_I32, a_i32, 4, &err), &err, "arr");
    EXP("arr.i32", 9, 2, 4, 12 + 16);
    ok_or_fail(qm_writer_meta_array(w, "arr.u64", QM_META_U64, a_u64, 3, &err), &err, "arr");
    EXP("arr.u64", 9, 3, 3, 12 + 24);
    ok_or_fail(qm_writer_meta_array(w, "arr.i64", QM_META_I64, a_i64, 3, &err), &err, "arr");
    EXP("arr.i64", 9, 4, 3, 12 + 24);
    float af32[3] = {1.5f, -0.0f, bits_f32(0x7FC0BEEFu)};
    ok_or_fail(qm_writer_meta_array(w, "arr.f32", QM_META_F32, af32, 3, &err), &err, "arr");
    EXP("arr.f32", 9, 5, 3, 12 + 12);
    double af64[3] = {3.25, -0.0, bits_f64(F64_NAN_BITS)};
    ok_or_fail(qm_writer_meta_array(w, "arr.f64", QM_META_F64, af64, 3, &err), &err, "arr");
    EXP("arr.f64", 9, 6, 3, 12 + 24);
    ok_or_fail(qm_writer_meta_array(w, "arr.bool", QM_META_BOOL, a_bool, 4, &err), &err, "arr");
    EXP("arr.bool", 9, 7, 4, 12 + 4);
    ok_or_fail(qm_writer_meta_array(w, "arr.empty", QM_META_U32, NULL, 0, &err), &err, "empty arr");
    EXP("arr.empty", 9, 1, 0, 12);
    ok_or_fail(qm_writer_meta_string_array(w, "arr.str.empty", NULL, NULL, 0, &err), &err, "empty str arr");
    EXP("arr.str.empty", 9, 8, 0, 12);
    const char *small[3] = {"a", "", "\xE2\x82\xAC"};
    ok_or_fail(qm_writer_meta_string_array(w, "arr.str.small", small, NULL, 3, &err), &err, "str arr");
    EXP("arr.str.small", 9, 8, 3, 12 + 9 + 8 + 11);
    /* 200,000 strings, with explicit lengths (one holds a NUL) */
    char **strs = malloc(BIG_N * sizeof *strs);
    size_t *lens = malloc(BIG_N * sizeof *lens);
    assert_non_null(strs);
    assert_non_null(lens);
    uint64_t vs = 12;
    for (uint32_t i = 0; i < BIG_N; i++) {
        char buf[64];
        lens[i] = big_str(i, buf);
        strs[i] = malloc(lens[i] + 1);
        memcpy(strs[i], buf, lens[i] + 1);
        vs += 8 + lens[i];
    }
    ok_or_fail(qm_writer_meta_string_array(w, "tokenizer.tokens", (const char *const *)strs, lens, BIG_N, &err),
               &err, "big str arr");
    EXP("tokenizer.tokens", 9, 8, BIG_N, vs);
    for (uint32_t i = 0; i < BIG_N; i++) free(strs[i]);
    free(strs);
    free(lens);
    ok_or_fail(qm_writer_meta_string(w, "general.architecture", "llama", 5, &err), &err, "str");
    EXP("general.architecture", 8, 0, 1, 13);
#undef EXP
    return n;
}

static void write_meta_file(const char *path, meta_exp *exp, size_t *n_exp) {
    qm_writer *w = new_writer(path, 4096);
    *n_exp = write_meta_set(w, exp);
    tu_tensor t;
    uint64_t d[2] = {2, 3};
    tu_tensor_make(&t, "w", QM_DTYPE_F32, 2, d, 4096, 5);
    tu_write_tensors(w, &t, 1, 0);
    finish_ok(w);
    tu_tensor_free(&t);
}

/* Entries in declaration order, each right after the previous, found by key. */
static void check_meta_layout(qm_file *f, const meta_exp *exp, size_t ne) {
    assert_int_equal(qm_meta_count(f), ne);
    assert_int_equal(qm_file_header(f)->metadata_count, ne);
    uint64_t off = 128, total = 0;
    for (size_t i = 0; i < ne; i++) {
        const qm_meta *m = qm_meta_at(f, i);
        assert_non_null(m);
        assert_string_equal(m->key, exp[i].key); /* file order = declaration order */
        assert_int_equal(m->type, exp[i].type);
        assert_int_equal(m->elem_type, exp[i].elem_type);
        assert_int_equal(m->count, exp[i].count);
        assert_int_equal(m->value_size, exp[i].value_size);
        assert_int_equal(m->entry_offset, off);
        assert_int_equal(m->value_offset, off + 4 + strlen(exp[i].key) + 4);
        assert_ptr_equal(qm_find_meta(f, exp[i].key), m);
        off = m->value_offset + m->value_size;
        total += 8 + strlen(exp[i].key) + exp[i].value_size;
    }
    assert_int_equal(qm_file_header(f)->metadata_size, total);
    assert_int_equal(off, 128 + total);
    assert_null(qm_meta_at(f, ne));
    assert_null(qm_find_meta(f, "no.such.key"));
    assert_null(qm_find_meta(f, ""));
    assert_null(qm_find_meta(f, "u32"));
}

static void check_meta_scalars(qm_file *f, const uint8_t *img) {
    /* scalar values through the union */
    assert_int_equal(qm_find_meta(f, "u32.max")->v.u32, UINT32_MAX);
    assert_int_equal(qm_find_meta(f, "i32.min")->v.i32, INT32_MIN);
    assert_int_equal(qm_find_meta(f, "u64.max")->v.u64, UINT64_MAX);
    assert_true(qm_find_meta(f, "i64.min")->v.i64 == INT64_MIN);
    assert_true(qm_find_meta(f, "i64.max")->v.i64 == INT64_MAX);
    assert_int_equal(f32_bits(qm_find_meta(f, "f32.nan")->v.f32), F32_NAN_BITS);
    assert_int_equal(f32_bits(qm_find_meta(f, "f32.negnan")->v.f32), F32_NEGNAN_BITS);
    assert_int_equal(f32_bits(qm_find_meta(f, "f32.negzero")->v.f32), 0x80000000u);
    assert_int_equal(f32_bits(qm_find_meta(f, "f32.inf")->v.f32), 0x7F800000u);
    assert_int_equal(f64_bits(qm_find_meta(f, "f64.nan")->v.f64), F64_NAN_BITS);
    assert_int_equal(f64_bits(qm_find_meta(f, "f64.negzero")->v.f64), 0x8000000000000000ull);
    assert_int_equal(f64_bits(qm_find_meta(f, "f64.denorm")->v.f64), 1);
    assert_true(qm_find_meta(f, "bool.true")->v.b);
    assert_false(qm_find_meta(f, "bool.false")->v.b);
    /* raw encodings in the file (little-endian, spec 1 and 4) */
    assert_int_equal(tu_rd32(img + qm_find_meta(f, "f32.nan")->value_offset), F32_NAN_BITS);
    assert_int_equal(tu_rd64(img + qm_find_meta(f, "i64.min")->value_offset), 0x8000000000000000ull);
    assert_int_equal(img[qm_find_meta(f, "bool.true")->value_offset], 1);
    assert_int_equal(img[qm_find_meta(f, "bool.false")->value_offset], 0);
    assert_int_equal(tu_rd64(img + qm_find_meta(f, "str.nul")->value_offset), 4);
}

static void check_meta_strings(qm_file *f) {
    /* strings */
    const qm_meta *m = qm_find_meta(f, "str.nul");
    assert_int_equal(m->str_len, 4);
    assert_memory_equal(m->str, k_str_nul, 4);
    m = qm_find_meta(f, "str.empty");
    assert_int_equal(m->str_len, 0);
    m = qm_find_meta(f, "str.utf8");
    assert_int_equal(m->str_len, strlen(k_str_utf8));
    assert_memory_equal(m->str, k_str_utf8, strlen(k_str_utf8));
    assert_ptr_equal(m->str, (const char *)qm_file_bytes(f) + m->value_offset + 8);
}

static void check_meta_arrays(qm_file *f) {
    /* arrays of every element type */
    for (uint64_t i = 0; i < 3; i++) {
        uint32_t u; assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.u32"), i, &u), QM_OK);
        assert_int_equal(u, a_u32[i]);
        uint64_t u6; assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.u64"), i, &u6), QM_OK);
        assert_int_equal(u6, a_u64[i]);
        int64_t i6; assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.i64"), i, &i6), QM_OK);
        assert_true(i6 == a_i64[i]);
    }
    for (uint64_t i = 0; i < 4; i++) {
        int32_t v; assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.i32"), i, &v), QM_OK);
        assert_int_equal(v, a_i32[i]);
        bool b; assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.bool"), i, &b), QM_OK);
        assert_int_equal(b, a_bool[i]);
    }
    float fv;
    assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.f32"), 0, &fv), QM_OK); assert_true(fv == 1.5f);
    assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.f32"), 1, &fv), QM_OK);
    assert_int_equal(f32_bits(fv), 0x80000000u);
    assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.f32"), 2, &fv), QM_OK);
    assert_int_equal(f32_bits(fv), 0x7FC0BEEFu);
    double dv;
    assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.f64"), 0, &dv), QM_OK); assert_true(dv == 3.25);
    assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.f64"), 1, &dv), QM_OK);
    assert_int_equal(f64_bits(dv), 0x8000000000000000ull);
    assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.f64"), 2, &dv), QM_OK);
    assert_int_equal(f64_bits(dv), F64_NAN_BITS);
}

static void check_meta_array_errors(qm_file *f) {
    /* out of range, wrong kind */
    uint32_t u;
    assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.u32"), 3, &u), QM_ERR_INVALID_ARGUMENT);
    assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.u32"), UINT64_MAX, &u), QM_ERR_INVALID_ARGUMENT);
    assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.empty"), 0, &u), QM_ERR_INVALID_ARGUMENT);
    assert_int_equal(qm_meta_array_get(qm_find_meta(f, "u32.max"), 0, &u), QM_ERR_TYPE_MISMATCH);
    char sink[16];
    assert_int_equal(qm_meta_array_get(qm_find_meta(f, "arr.str.small"), 0, sink), QM_ERR_TYPE_MISMATCH);
    const char *s;
    uint64_t sl;
    assert_int_equal(qm_meta_array_string(qm_find_meta(f, "arr.u32"), 0, &s, &sl), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_array_string(qm_find_meta(f, "str.hello"), 0, &s, &sl), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_array_string(qm_find_meta(f, "arr.str.empty"), 0, &s, &sl), QM_ERR_INVALID_ARGUMENT);
    assert_int_equal(qm_meta_array_string(qm_find_meta(f, "arr.str.small"), 3, &s, &sl), QM_ERR_INVALID_ARGUMENT);
    assert_int_equal(qm_meta_array_string(qm_find_meta(f, "arr.str.small"), 1, &s, &sl), QM_OK);
    assert_int_equal(sl, 0);
    assert_int_equal(qm_meta_array_string(qm_find_meta(f, "arr.str.small"), 2, &s, &sl), QM_OK);
    assert_int_equal(sl, 3);
    assert_memory_equal(s, "\xE2\x82\xAC", 3);
}

static void check_meta_big_string_array(qm_file *f) {
    /* the 200,000-string array: first, middle, last, and a sample */
    const qm_meta *m = qm_find_meta(f, "tokenizer.tokens");
    const char *s;
    uint64_t sl;
    assert_int_equal(m->count, BIG_N);
    const uint32_t idx[] = {0, 1, 7, 1007, 99999, 100000, 123456, 150000, BIG_N - 2, BIG_N - 1};
    for (size_t k = 0; k < sizeof idx / sizeof idx[0]; k++) {
        char buf[64];
        size_t l = big_str(idx[k], buf);
        assert_int_equal(qm_meta_array_string(m, idx[k], &s, &sl), QM_OK);
        assert_int_equal(sl, l);
        assert_memory_equal(s, buf, l);
        assert_true(s >= (const char *)qm_file_bytes(f) + m->value_offset &&
                    s + sl <= (const char *)qm_file_bytes(f) + m->value_offset + m->value_size);
    }
    assert_int_equal(qm_meta_array_string(m, 0, &s, &sl), QM_OK);
    assert_memory_equal(s, "tok0", 4);
    assert_int_equal(qm_meta_array_string(m, BIG_N - 1, &s, &sl), QM_OK);
    assert_int_equal(sl, 9);
    assert_memory_equal(s, "tok199999", 9);
    assert_int_equal(qm_meta_array_string(m, BIG_N, &s, &sl), QM_ERR_INVALID_ARGUMENT);
    for (uint32_t i = 0; i < BIG_N; i += 997) {
        char buf[64];
        size_t l = big_str(i, buf);
        assert_int_equal(qm_meta_array_string(m, i, &s, &sl), QM_OK);
        assert_int_equal(sl, l);
        assert_memory_equal(s, buf, l);
    }
}

static void test_metadata_roundtrip(void **state) {
    (void)state;
    char path[TU_PATH_MAX];
    tu_path(path, "meta.qmap");
    meta_exp exp[64];
    size_t ne;
    write_meta_file(path, exp, &ne);
    size_t len;
    uint8_t *img = tu_read_file(path, &len);
    tu_check_image(img, len, 4096);
    qm_file *f = open_ok(path);
    check_meta_layout(f, exp, ne);
    check_meta_scalars(f, img);
    check_meta_strings(f);
    check_meta_arrays(f);
    check_meta_array_errors(f);
    check_meta_big_string_array(f);
    qm_close(f);
    free(img);
}

static void test_metadata_getters(void **state) {
    (void)state;
    char path[TU_PATH_MAX];
    tu_path(path, "meta-get.qmap");
    meta_exp exp[64];
    size_t ne;
    write_meta_file(path, exp, &ne);
    qm_file *f = open_ok(path);
    uint32_t u32 = 0;
    uint64_t u64 = 0;
    int64_t i64 = 0;
    double f64 = 0;
    bool b = false;
    const char *s = NULL;
    uint64_t sl = 99;

    assert_int_equal(qm_meta_get_u32(f, "u32.max", &u32), QM_OK); assert_int_equal(u32, UINT32_MAX);
    assert_int_equal(qm_meta_get_u32(f, "u32.zero", &u32), QM_OK); assert_int_equal(u32, 0);
    assert_int_equal(qm_meta_get_u32(f, "u64.max", &u32), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_u32(f, "i32.max", &u32), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_u32(f, "bool.true", &u32), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_u32(f, "missing", &u32), QM_ERR_NOT_FOUND);

    assert_int_equal(qm_meta_get_u64(f, "u64.max", &u64), QM_OK); assert_int_equal(u64, UINT64_MAX);
    assert_int_equal(qm_meta_get_u64(f, "u32.max", &u64), QM_OK); assert_int_equal(u64, 4294967295ull);
    assert_int_equal(qm_meta_get_u64(f, "i64.max", &u64), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_u64(f, "i32.max", &u64), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_u64(f, "arr.u64", &u64), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_u64(f, "missing", &u64), QM_ERR_NOT_FOUND);

    assert_int_equal(qm_meta_get_i64(f, "i64.min", &i64), QM_OK); assert_true(i64 == INT64_MIN);
    assert_int_equal(qm_meta_get_i64(f, "i64.max", &i64), QM_OK); assert_true(i64 == INT64_MAX);
    assert_int_equal(qm_meta_get_i64(f, "i32.min", &i64), QM_OK); assert_true(i64 == -2147483648ll);
    assert_int_equal(qm_meta_get_i64(f, "u32.max", &i64), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_i64(f, "u64.max", &i64), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_i64(f, "f64.negzero", &i64), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_i64(f, "missing", &i64), QM_ERR_NOT_FOUND);

    assert_int_equal(qm_meta_get_f64(f, "f64.negzero", &f64), QM_OK);
    assert_int_equal(f64_bits(f64), 0x8000000000000000ull);
    assert_int_equal(qm_meta_get_f64(f, "f64.nan", &f64), QM_OK);
    assert_int_equal(f64_bits(f64), F64_NAN_BITS);
    assert_int_equal(qm_meta_get_f64(f, "f32.negzero", &f64), QM_OK); /* F32 widens */
    assert_int_equal(f64_bits(f64), 0x8000000000000000ull);
    assert_int_equal(qm_meta_get_f64(f, "f32.inf", &f64), QM_OK);
    assert_true(isinf(f64) && f64 > 0);
    assert_int_equal(qm_meta_get_f64(f, "f32.nan", &f64), QM_OK);
    assert_true(isnan(f64));
    assert_int_equal(qm_meta_get_f64(f, "i64.min", &f64), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_f64(f, "u32.zero", &f64), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_f64(f, "missing", &f64), QM_ERR_NOT_FOUND);

    assert_int_equal(qm_meta_get_bool(f, "bool.true", &b), QM_OK); assert_true(b);
    assert_int_equal(qm_meta_get_bool(f, "bool.false", &b), QM_OK); assert_false(b);
    assert_int_equal(qm_meta_get_bool(f, "u32.zero", &b), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_bool(f, "arr.bool", &b), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_bool(f, "missing", &b), QM_ERR_NOT_FOUND);

    assert_int_equal(qm_meta_get_string(f, "str.hello", &s, &sl), QM_OK);
    assert_int_equal(sl, 5); assert_memory_equal(s, "hello", 5);
    assert_int_equal(qm_meta_get_string(f, "str.nul", &s, &sl), QM_OK);
    assert_int_equal(sl, 4); assert_memory_equal(s, k_str_nul, 4);
    assert_int_equal(qm_meta_get_string(f, "str.empty", &s, &sl), QM_OK);
    assert_int_equal(sl, 0);
    assert_int_equal(qm_meta_get_string(f, k_key_utf8, &s, &sl), QM_OK);
    assert_int_equal(sl, 1); assert_memory_equal(s, "v", 1);
    assert_int_equal(qm_meta_get_string(f, "arr.str.small", &s, &sl), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_string(f, "u32.max", &s, &sl), QM_ERR_TYPE_MISMATCH);
    assert_int_equal(qm_meta_get_string(f, "missing", &s, &sl), QM_ERR_NOT_FOUND);
    assert_int_equal(qm_meta_get_string(f, "", &s, &sl), QM_ERR_NOT_FOUND);
    qm_close(f);
}

/* ------------------------------------------------------------------------------------------------ */
/* Writer refusals */

static void expect_code(qm_status got, qm_status want, const qm_error *err, const char *what) {
    if (got != want)
        fail_msg("%s: expected %s, got %s (%s)", what, qm_status_name(want), qm_status_name(got), err->message);
    assert_int_equal(err->code, want);
    assert_true(err->message[0] != '\0');
}

/* After a failed call: every further call is QM_ERR_STATE; finishing fails and leaves no file.
 * The writer is always released (finish or abort) before a mismatch is reported. */
static void expect_poisoned(qm_writer *w, const char *target, bool use_finish) {
    qm_error err;
    uint64_t d[1] = {4};
    uint8_t bytes[16] = {0};
    char bad[512] = "";
    qm_status got[3];
    qm_error_clear(&err);
    got[0] = qm_writer_meta_u32(w, "another.key", 1, &err);
    qm_error_clear(&err);
    got[1] = qm_writer_add_tensor(w, "another.tensor", QM_DTYPE_F32, 1, d, &err);
    qm_error_clear(&err);
    got[2] = qm_writer_write(w, bytes, 1, &err);
    const char *what[3] = {"meta", "add_tensor", "write"};
    for (int i = 0; i < 3; i++) {
        if (got[i] != QM_ERR_STATE) {
            size_t l = strlen(bad);
            snprintf(bad + l, sizeof bad - l, " %s after failure -> %s;", what[i], qm_status_name(got[i]));
        }
    }
    qm_status fin = QM_ERR_STATE;
    if (use_finish) fin = qm_writer_finish(w, &err);
    else qm_writer_abort(w);
    if (fin == QM_OK) {
        size_t l = strlen(bad);
        snprintf(bad + l, sizeof bad - l, " finish after failure -> QM_OK;");
    }
    if (bad[0] != '\0') fail_msg("writer not poisoned (expected QM_ERR_STATE):%s", bad);
    assert_false(tu_exists(target));
}

static void test_writer_refuses_keys(void **state) {
    (void)state;
    char dir[TU_PATH_MAX], target[TU_PATH_MAX * 2];
    tu_mkdir(dir, "refuse-keys");
    snprintf(target, sizeof target, "%s/out.qmap", dir);
    qm_error err;
    char k257[258], k256[257];
    memset(k257, 'x', 257); k257[257] = '\0';
    memset(k256, 'x', 256); k256[256] = '\0';

    qm_writer *w = new_writer(target, 64);
    ok_or_fail(qm_writer_meta_u32(w, "dup", 1, &err), &err, "first");
    expect_code(qm_writer_meta_string(w, "dup", "x", 1, &err), QM_ERR_DUPLICATE_KEY, &err, "duplicate key");
    expect_poisoned(w, target, true);

    w = new_writer(target, 64);
    expect_code(qm_writer_meta_u32(w, "", 1, &err), QM_ERR_BAD_KEY, &err, "empty key");
    expect_poisoned(w, target, false);

    w = new_writer(target, 64);
    ok_or_fail(qm_writer_meta_u32(w, k256, 1, &err), &err, "256-byte key");
    expect_code(qm_writer_meta_u32(w, k257, 1, &err), QM_ERR_BAD_KEY, &err, "257-byte key");
    expect_poisoned(w, target, true);

    const char *bad_keys[] = {"\xC0\x80x", "a\xED\xA0\x80", "\xF4\x90\x80\x80", "trunc\xE2\x82", "\x80"};
    for (size_t i = 0; i < sizeof bad_keys / sizeof bad_keys[0]; i++) {
        w = new_writer(target, 64);
        expect_code(qm_writer_meta_bool(w, bad_keys[i], true, &err), QM_ERR_BAD_UTF8, &err, "bad utf8 key");
        expect_poisoned(w, target, i % 2 == 0);
    }

    w = new_writer(target, 64);
    expect_code(qm_writer_meta_string(w, "s", "ok\xC3", 3, &err), QM_ERR_BAD_UTF8, &err, "bad utf8 string");
    expect_poisoned(w, target, false);

    w = new_writer(target, 64);
    expect_code(qm_writer_meta_string(w, "s", "\xED\xBF\xBF", 3, &err), QM_ERR_BAD_UTF8, &err, "surrogate string");
    expect_poisoned(w, target, true);

    w = new_writer(target, 64);
    const char *sa[3] = {"good", "bad\xFF", "good"};
    expect_code(qm_writer_meta_string_array(w, "sa", sa, NULL, 3, &err), QM_ERR_BAD_UTF8, &err,
                "bad utf8 in string array");
    expect_poisoned(w, target, false);

    /* array element types must be U32..BOOL */
    const uint32_t bad_types[] = {0, QM_META_STRING, QM_META_ARRAY, 10, UINT32_MAX};
    uint32_t vals[2] = {1, 2};
    for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
        w = new_writer(target, 64);
        qm_status s = qm_writer_meta_array(w, "arr", bad_types[i], vals, 2, &err);
        if (s != QM_ERR_UNKNOWN_META_TYPE && s != QM_ERR_INVALID_ARGUMENT)
            fail_msg("meta_array elem type %u: got %s", bad_types[i], qm_status_name(s));
        expect_poisoned(w, target, true);
    }
    assert_int_equal(tu_dir_count(dir), 0); /* no temporary file left behind */
}

static void test_writer_refuses_tensors(void **state) {
    (void)state;
    char dir[TU_PATH_MAX], target[TU_PATH_MAX * 2];
    tu_mkdir(dir, "refuse-tensors");
    snprintf(target, sizeof target, "%s/out.qmap", dir);
    qm_error err;
    uint64_t d2[2] = {2, 3};
    char n1025[1026];
    memset(n1025, 'n', 1025); n1025[1025] = '\0';

    qm_writer *w = new_writer(target, 64);
    ok_or_fail(qm_writer_add_tensor(w, "t", QM_DTYPE_F32, 2, d2, &err), &err, "first");
    expect_code(qm_writer_add_tensor(w, "t", QM_DTYPE_I32, 2, d2, &err), QM_ERR_DUPLICATE_NAME, &err, "dup name");
    expect_poisoned(w, target, true);

    w = new_writer(target, 64);
    expect_code(qm_writer_add_tensor(w, "", QM_DTYPE_F32, 2, d2, &err), QM_ERR_BAD_NAME, &err, "empty name");
    expect_poisoned(w, target, false);

    w = new_writer(target, 64);
    expect_code(qm_writer_add_tensor(w, n1025, QM_DTYPE_F32, 2, d2, &err), QM_ERR_BAD_NAME, &err, "1025 name");
    expect_poisoned(w, target, true);

    w = new_writer(target, 64);
    expect_code(qm_writer_add_tensor(w, "bad\xC0\xAF", QM_DTYPE_F32, 2, d2, &err), QM_ERR_BAD_UTF8, &err,
                "bad utf8 name");
    expect_poisoned(w, target, false);

    struct { uint32_t dtype, rank; uint64_t dims[4]; qm_status want; const char *what; } cases[] = {
        {QM_DTYPE_F32, 0, {2}, QM_ERR_BAD_RANK, "rank 0"},
        {QM_DTYPE_F32, 5, {2, 2, 2, 2}, QM_ERR_BAD_RANK, "rank 5"},
        {QM_DTYPE_F32, 2, {2, 0}, QM_ERR_BAD_DIM, "dim 0"},
        {QM_DTYPE_Q8_ROW, 1, {0}, QM_ERR_BAD_DIM, "q8 dim 0"},
        {QM_DTYPE_F32, 1, {(1ull << 32) + 1}, QM_ERR_BAD_DIM, "dim 2^32+1"},
        {QM_DTYPE_F16, 2, {257, 4278255361ull}, QM_ERR_TOO_MANY_ELEMENTS, "2^40+1 elements"},
        {QM_DTYPE_F32, 3, {1u << 20, 1u << 20, 2}, QM_ERR_TOO_MANY_ELEMENTS, "2^41 elements"},
        {0, 1, {4}, QM_ERR_UNKNOWN_DTYPE, "dtype 0"},
        {6, 1, {4}, QM_ERR_UNKNOWN_DTYPE, "dtype 6"},
        {UINT32_MAX, 1, {4}, QM_ERR_UNKNOWN_DTYPE, "dtype max"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        w = new_writer(target, 64);
        expect_code(qm_writer_add_tensor(w, "t", cases[i].dtype, cases[i].rank, cases[i].dims, &err),
                    cases[i].want, &err, cases[i].what);
        expect_poisoned(w, target, i % 2 == 1);
    }
    assert_int_equal(tu_dir_count(dir), 0);
}

#define STATE_SETUP(dirname)                                                                                 \
    char dir[TU_PATH_MAX], target[TU_PATH_MAX * 2];                                                          \
    tu_mkdir(dir, dirname);                                                                                  \
    snprintf(target, sizeof target, "%s/out.qmap", dir);                                                     \
    qm_error err;                                                                                            \
    uint64_t d[2] = {3, 5}; /* F32: 60 bytes */                                                              \
    uint8_t buf[128];                                                                                        \
    memset(buf, 0x11, sizeof buf);                                                                           \
    qm_writer *w = NULL;                                                                                     \
    (void)d; (void)buf; (void)w

static void test_writer_meta_after_write(void **state) {
    (void)state;
    STATE_SETUP("state-meta-after-write");
    w = new_writer(target, 64);
    ok_or_fail(qm_writer_add_tensor(w, "t", QM_DTYPE_F32, 2, d, &err), &err, "add");
    ok_or_fail(qm_writer_write(w, buf, 10, &err), &err, "write");
    expect_code(qm_writer_meta_u32(w, "late", 1, &err), QM_ERR_STATE, &err, "meta after write");
    expect_poisoned(w, target, true);
    assert_int_equal(tu_dir_count(dir), 0);
}

/* qm_writer.h: metadata comes "before the first qm_writer_add_tensor/qm_writer_write" */
static void test_writer_meta_after_add_tensor(void **state) {
    (void)state;
    STATE_SETUP("state-meta-after-add");
    w = new_writer(target, 64);
    ok_or_fail(qm_writer_add_tensor(w, "t", QM_DTYPE_F32, 2, d, &err), &err, "add");
    expect_code(qm_writer_meta_string(w, "late", "x", 1, &err), QM_ERR_STATE, &err, "meta after add_tensor");
    expect_poisoned(w, target, false);
    assert_int_equal(tu_dir_count(dir), 0);
}

/* qm_writer.h: "The first call [to qm_writer_write] ends the declaration phase." */
static void test_writer_add_after_write(void **state) {
    (void)state;
    STATE_SETUP("state-add-after-write");
    w = new_writer(target, 64);
    ok_or_fail(qm_writer_add_tensor(w, "t", QM_DTYPE_F32, 2, d, &err), &err, "add");
    ok_or_fail(qm_writer_write(w, buf, 4, &err), &err, "write");
    expect_code(qm_writer_add_tensor(w, "u", QM_DTYPE_F32, 2, d, &err), QM_ERR_STATE, &err, "add after write");
    expect_poisoned(w, target, true);
    assert_int_equal(tu_dir_count(dir), 0);
}

/* more bytes than declared: in one call, after an exact fill, as zeros, and with nothing declared */
static void test_writer_overwrite(void **state) {
    (void)state;
    STATE_SETUP("state-overwrite");
    w = new_writer(target, 64);
    ok_or_fail(qm_writer_add_tensor(w, "t", QM_DTYPE_F32, 2, d, &err), &err, "add");
    expect_code(qm_writer_write(w, buf, 61, &err), QM_ERR_INVALID_ARGUMENT, &err, "61 of 60 bytes");
    expect_poisoned(w, target, false);

    w = new_writer(target, 64);
    ok_or_fail(qm_writer_add_tensor(w, "t", QM_DTYPE_F32, 2, d, &err), &err, "add");
    ok_or_fail(qm_writer_write(w, buf, 60, &err), &err, "60 bytes");
    expect_code(qm_writer_write(w, buf, 1, &err), QM_ERR_INVALID_ARGUMENT, &err, "byte 61");
    expect_poisoned(w, target, true);

    w = new_writer(target, 64);
    ok_or_fail(qm_writer_add_tensor(w, "t", QM_DTYPE_F32, 2, d, &err), &err, "add");
    ok_or_fail(qm_writer_write_zeros(w, 59, &err), &err, "59 zeros");
    expect_code(qm_writer_write_zeros(w, 2, &err), QM_ERR_INVALID_ARGUMENT, &err, "zeros past the end");
    expect_poisoned(w, target, false);

    w = new_writer(target, 64);
    expect_code(qm_writer_write(w, buf, 1, &err), QM_ERR_INVALID_ARGUMENT, &err, "write with no tensors");
    expect_poisoned(w, target, true);

    /* a NULL source is refused, not taken as zeros (that is qm_writer_write_zeros) */
    w = new_writer(target, 64);
    ok_or_fail(qm_writer_add_tensor(w, "t", QM_DTYPE_F32, 2, d, &err), &err, "add");
    expect_code(qm_writer_write(w, NULL, 4, &err), QM_ERR_INVALID_ARGUMENT, &err, "NULL data");
    expect_poisoned(w, target, false);
    assert_int_equal(tu_dir_count(dir), 0);
}

/* finish before every declared byte was written: an error, and no file at the target */
static void test_writer_finish_incomplete(void **state) {
    (void)state;
    STATE_SETUP("state-incomplete");
    w = new_writer(target, 64);
    ok_or_fail(qm_writer_add_tensor(w, "t", QM_DTYPE_F32, 2, d, &err), &err, "add");
    ok_or_fail(qm_writer_add_tensor(w, "u", QM_DTYPE_F32, 2, d, &err), &err, "add");
    ok_or_fail(qm_writer_write(w, buf, 100, &err), &err, "100 of 120");
    memset(&err, 0, sizeof err);
    qm_status s = qm_writer_finish(w, &err);
    assert_int_not_equal(s, QM_OK);
    assert_int_equal(err.code, s);
    assert_true(err.message[0] != '\0');
    assert_false(tu_exists(target));

    w = new_writer(target, 64);
    ok_or_fail(qm_writer_add_tensor(w, "t", QM_DTYPE_F32, 2, d, &err), &err, "add");
    assert_int_not_equal(qm_writer_finish(w, &err), QM_OK); /* declared, nothing written */
    assert_false(tu_exists(target));
    assert_int_equal(tu_dir_count(dir), 0);
}

static void test_writer_create_errors(void **state) {
    (void)state;
    STATE_SETUP("state-create");
    const uint64_t bad_align[] = {1, 32, 63, 100, 4097, 1ull << 31};
    for (size_t i = 0; i < sizeof bad_align / sizeof bad_align[0]; i++) {
        qm_writer_opts o = {bad_align[i]};
        qm_writer *x = (qm_writer *)(uintptr_t)1;
        qm_status s = qm_writer_create(target, &o, &x, &err);
        if (s != QM_ERR_BAD_ALIGNMENT && s != QM_ERR_INVALID_ARGUMENT)
            fail_msg("create alignment %llu: got %s", (unsigned long long)bad_align[i], qm_status_name(s));
        assert_null(x);
    }
    char p[TU_PATH_MAX * 2 + 32];
    snprintf(p, sizeof p, "%s/no/such/dir/out.qmap", dir);
    qm_writer *x = (qm_writer *)(uintptr_t)1;
    expect_code(qm_writer_create(p, NULL, &x, &err), QM_ERR_IO, &err, "create in missing dir");
    assert_null(x);
    assert_true(tu_contains(err.message, "out.qmap"));
    qm_writer_abort(NULL);
    assert_int_equal(tu_dir_count(dir), 0);
}

/* ------------------------------------------------------------------------------------------------ */
/* Atomicity, zero tensors, determinism */

static void write_version(const char *path, const char *tname, uint64_t seed) {
    qm_writer *w = new_writer(path, 64);
    qm_error err;
    ok_or_fail(qm_writer_meta_string(w, "general.name", tname, strlen(tname), &err), &err, "meta");
    tu_tensor t;
    uint64_t d[2] = {4, 100};
    tu_tensor_make(&t, tname, QM_DTYPE_F32, 2, d, 64, seed);
    tu_write_tensors(w, &t, 1, 0);
    finish_ok(w);
    tu_tensor_free(&t);
}

static void assert_file_equals(const char *path, const uint8_t *want, size_t want_len) {
    size_t len;
    uint8_t *b = tu_read_file(path, &len);
    assert_int_equal(len, want_len);
    assert_memory_equal(b, want, len);
    free(b);
}

static void test_atomic_replace(void **state) {
    (void)state;
    char dir[TU_PATH_MAX], target[TU_PATH_MAX * 2];
    tu_mkdir(dir, "atomic");
    snprintf(target, sizeof target, "%s/model.qmap", dir);
    write_version(target, "v1", 1);
    size_t old_len;
    uint8_t *old = tu_read_file(target, &old_len);
    assert_int_equal(tu_dir_count(dir), 1);
    qm_error err;
    uint64_t d[2] = {4, 100};
    uint8_t buf[1600];
    tu_fill_random(buf, sizeof buf, 77);

    /* aborted writer, part-way through the data */
    qm_writer *w = new_writer(target, 64);
    ok_or_fail(qm_writer_meta_u32(w, "k", 1, &err), &err, "meta");
    ok_or_fail(qm_writer_add_tensor(w, "v2", QM_DTYPE_F32, 2, d, &err), &err, "add");
    ok_or_fail(qm_writer_write(w, buf, 800, &err), &err, "write");
    assert_file_equals(target, old, old_len); /* untouched while writing */
    qm_writer_abort(w);
    assert_file_equals(target, old, old_len);
    assert_int_equal(tu_dir_count(dir), 1);

    /* finish that fails: bytes missing */
    w = new_writer(target, 64);
    ok_or_fail(qm_writer_add_tensor(w, "v2", QM_DTYPE_F32, 2, d, &err), &err, "add");
    ok_or_fail(qm_writer_write(w, buf, 1599, &err), &err, "write");
    assert_int_not_equal(qm_writer_finish(w, &err), QM_OK);
    assert_file_equals(target, old, old_len);
    assert_int_equal(tu_dir_count(dir), 1);

    /* finish after a failed call */
    w = new_writer(target, 64);
    ok_or_fail(qm_writer_meta_u32(w, "k", 1, &err), &err, "meta");
    assert_int_equal(qm_writer_meta_u32(w, "k", 2, &err), QM_ERR_DUPLICATE_KEY);
    assert_int_not_equal(qm_writer_finish(w, &err), QM_OK);
    assert_file_equals(target, old, old_len);
    assert_int_equal(tu_dir_count(dir), 1);

    /* a successful finish replaces the file */
    write_version(target, "v2", 2);
    assert_int_equal(tu_dir_count(dir), 1);
    qm_file *f = open_ok(target);
    assert_int_equal(qm_tensor_count(f), 1);
    assert_string_equal(qm_tensor_at(f, 0)->name, "v2");
    assert_null(qm_find_tensor(f, "v1"));
    const char *s;
    uint64_t sl;
    assert_int_equal(qm_meta_get_string(f, "general.name", &s, &sl), QM_OK);
    assert_int_equal(sl, 2);
    assert_memory_equal(s, "v2", 2);
    qm_close(f);
    free(old);
}

static void test_zero_tensors(void **state) {
    (void)state;
    char path[TU_PATH_MAX];
    qm_error err;

    /* nothing at all: data_offset = align_up(128, 4096) = 4096 = file_size */
    tu_path(path, "empty-4096.qmap");
    qm_writer *w = new_writer(path, 4096);
    finish_ok(w);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 4096);
    size_t len;
    uint8_t *img = tu_read_file(path, &len);
    tu_check_image(img, len, 4096);
    free(img);
    qm_file *f = open_ok(path);
    assert_int_equal(qm_tensor_count(f), 0);
    assert_int_equal(qm_meta_count(f), 0);
    assert_null(qm_tensor_at(f, 0));
    assert_null(qm_meta_at(f, 0));
    assert_null(qm_find_tensor(f, "x"));
    assert_int_equal(qm_file_header(f)->data_offset, 4096);
    assert_int_equal(qm_file_header(f)->file_size, 4096);
    qm_verify_report rep;
    memset(&rep, 0xFF, sizeof rep);
    qm_verify_opts o = {1, true};
    assert_int_equal(qm_verify(f, &o, NULL, &rep, &err), QM_OK);
    assert_int_equal(rep.tensors_checked, 0);
    assert_int_equal(rep.tensors_bad, 0);
    assert_int_equal(rep.bytes_hashed, 0);
    qm_close(f);

    /* metadata only, alignment 64: "x" U32 entry = 4+1+4+4 = 13 bytes -> data_offset 192 */
    tu_path(path, "meta-only-64.qmap");
    w = new_writer(path, 64);
    ok_or_fail(qm_writer_meta_u32(w, "x", 42, &err), &err, "meta");
    finish_ok(w);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 192);
    img = tu_read_file(path, &len);
    tu_check_image(img, len, 64);
    free(img);
    f = open_ok(path);
    assert_int_equal(qm_tensor_count(f), 0);
    assert_int_equal(qm_meta_count(f), 1);
    assert_int_equal(qm_file_header(f)->metadata_size, 13);
    assert_int_equal(qm_file_header(f)->table_offset, 141);
    assert_int_equal(qm_file_header(f)->table_size, 0);
    assert_int_equal(qm_file_header(f)->data_offset, 192);
    uint32_t v;
    assert_int_equal(qm_meta_get_u32(f, "x", &v), QM_OK);
    assert_int_equal(v, 42);
    assert_int_equal(qm_verify(f, NULL, NULL, NULL, &err), QM_OK);
    qm_close(f);
}

static void write_det(const char *path, size_t chunk) {
    qm_writer *w = new_writer(path, 64);
    meta_exp exp[64];
    (void)write_meta_set(w, exp);
    tu_tensor ts[24];
    size_t n = make_all_tensors(ts, 64, 500);
    tu_write_tensors(w, ts, n, chunk);
    finish_ok(w);
    for (size_t i = 0; i < n; i++) tu_tensor_free(&ts[i]);
}

static void test_deterministic(void **state) {
    (void)state;
    char a[TU_PATH_MAX], b[TU_PATH_MAX], dir[TU_PATH_MAX], c[TU_PATH_MAX * 2];
    tu_path(a, "det-a.qmap");
    tu_path(b, "det-b.qmap");
    tu_mkdir(dir, "det-dir");
    snprintf(c, sizeof c, "%s/other-name.qmap", dir);
    write_det(a, 0);
    write_det(b, 0);
    write_det(c, 333); /* other chunking and another path: same bytes */
    size_t la, lb, lc;
    uint8_t *ia = tu_read_file(a, &la), *ib = tu_read_file(b, &lb), *ic = tu_read_file(c, &lc);
    assert_int_equal(la, lb);
    assert_memory_equal(ia, ib, la);
    assert_int_equal(la, lc);
    assert_memory_equal(ia, ic, la);
    tu_check_image(ia, la, 64);
    free(ia); free(ib); free(ic);
}

/* ------------------------------------------------------------------------------------------------ */
/* Verification */

#define NV 6
static const char *const k_vnames[NV] = {"tok_embd", "blk.0.attn_q", "blk.0.attn_k", "blk.0.ffn", "norm", "out"};

/* 6 tensors, alignment 4096 (so there are gaps between tensors and inside Q8_ROW); tensor 3 is
 * Q8_ROW [3, 65]. Returns the sum of the sizes. */
static uint64_t write_verify_file(const char *path) {
    tu_tensor ts[NV];
    uint64_t d0[2] = {10, 16}, d1[2] = {8, 8}, d2[1] = {100}, d3[2] = {3, 65}, d4[1] = {33}, d5[3] = {2, 3, 7};
    tu_tensor_make(&ts[0], k_vnames[0], QM_DTYPE_F32, 2, d0, 4096, 1);
    tu_tensor_make(&ts[1], k_vnames[1], QM_DTYPE_F16, 2, d1, 4096, 2);
    tu_tensor_make(&ts[2], k_vnames[2], QM_DTYPE_BF16, 1, d2, 4096, 3);
    tu_tensor_make(&ts[3], k_vnames[3], QM_DTYPE_Q8_ROW, 2, d3, 4096, 4);
    tu_tensor_make(&ts[4], k_vnames[4], QM_DTYPE_I32, 1, d4, 4096, 5);
    tu_tensor_make(&ts[5], k_vnames[5], QM_DTYPE_F32, 3, d5, 4096, 6);
    qm_writer *w = new_writer(path, 4096);
    tu_write_tensors(w, ts, NV, 100);
    finish_ok(w);
    uint64_t total = 0;
    for (int i = 0; i < NV; i++) {
        total += ts[i].size;
        tu_tensor_free(&ts[i]);
    }
    return total;
}

static void run_verify(const char *path, int threads, bool full, qm_status want, const qm_status *want_st,
                       uint64_t want_bad, const char *want_name) {
    qm_file *f = open_ok(path); /* opening never reads tensor data */
    qm_status st[NV];
    for (int i = 0; i < NV; i++) st[i] = (qm_status)-7;
    qm_verify_opts o = {threads, full};
    qm_verify_report rep;
    memset(&rep, 0, sizeof rep);
    qm_error err;
    memset(&err, 0, sizeof err);
    qm_status s = qm_verify(f, &o, st, &rep, &err);
    if (s != want)
        fail_msg("verify(threads=%d, full=%d): expected %s, got %s (%s)", threads, full, qm_status_name(want),
                 qm_status_name(s), err.message);
    for (int i = 0; i < NV; i++) {
        if (st[i] != want_st[i])
            fail_msg("verify(threads=%d, full=%d): status[%d] expected %s, got %s", threads, full, i,
                     qm_status_name(want_st[i]), qm_status_name(st[i]));
    }
    assert_int_equal(rep.tensors_checked, NV);
    assert_int_equal(rep.tensors_bad, want_bad);
    assert_true(rep.seconds >= 0.0);
    if (want != QM_OK) {
        assert_int_equal(err.code, want);
        assert_true(tu_contains(err.message, want_name));
    }
    qm_close(f);
}

static void test_verify_good(void **state) {
    (void)state;
    char path[TU_PATH_MAX];
    tu_path(path, "verify-good.qmap");
    uint64_t total = write_verify_file(path);
    qm_status ok[NV] = {QM_OK, QM_OK, QM_OK, QM_OK, QM_OK, QM_OK};
    for (int threads = 0; threads <= 2; threads++) {
        run_verify(path, threads, false, QM_OK, ok, 0, NULL);
        run_verify(path, threads, true, QM_OK, ok, 0, NULL);
    }
    qm_file *f = open_ok(path);
    qm_verify_report rep;
    qm_error err;
    qm_verify_opts o = {1, false};
    assert_int_equal(qm_verify(f, &o, NULL, &rep, &err), QM_OK);
    assert_int_equal(rep.bytes_hashed, total);
    assert_int_equal(qm_verify(f, NULL, NULL, NULL, NULL), QM_OK);
    for (uint64_t i = 0; i < NV; i++) assert_int_equal(qm_tensor_verify(f, qm_tensor_at(f, i), &err), QM_OK);
    qm_close(f);
}

static void test_verify_flipped_data_byte(void **state) {
    (void)state;
    char good[TU_PATH_MAX], bad[TU_PATH_MAX];
    tu_path(good, "verify-src.qmap");
    tu_path(bad, "verify-flip.qmap");
    write_verify_file(good);
    qm_file *f = open_ok(good);
    uint64_t off2 = qm_tensor_at(f, 2)->offset + qm_tensor_at(f, 2)->size / 2;
    uint64_t off1 = qm_tensor_at(f, 1)->offset;
    uint64_t off5 = qm_tensor_at(f, 5)->offset + qm_tensor_at(f, 5)->size - 1;
    qm_close(f);

    tu_copy_file(good, bad);
    tu_xor_byte(bad, off2, 0x40);
    qm_status one[NV] = {QM_OK, QM_OK, QM_ERR_TENSOR_CHECKSUM, QM_OK, QM_OK, QM_OK};
    for (int threads = 1; threads <= 2; threads++) {
        run_verify(bad, threads, false, QM_ERR_TENSOR_CHECKSUM, one, 1, k_vnames[2]);
        run_verify(bad, threads, true, QM_ERR_TENSOR_CHECKSUM, one, 1, k_vnames[2]);
    }
    f = open_ok(bad);
    qm_error err;
    memset(&err, 0, sizeof err);
    assert_int_equal(qm_tensor_verify(f, qm_tensor_at(f, 2), &err), QM_ERR_TENSOR_CHECKSUM);
    assert_int_equal(err.code, QM_ERR_TENSOR_CHECKSUM);
    assert_true(tu_contains(err.message, k_vnames[2]));
    assert_int_equal(qm_tensor_verify(f, qm_tensor_at(f, 1), &err), QM_OK);
    assert_int_equal(qm_tensor_verify(f, qm_tensor_at(f, 3), &err), QM_OK);
    qm_close(f);

    /* two bad tensors: the first in table order is reported */
    tu_copy_file(good, bad);
    tu_xor_byte(bad, off5, 0x01);
    tu_xor_byte(bad, off1, 0x80);
    qm_status two[NV] = {QM_OK, QM_ERR_TENSOR_CHECKSUM, QM_OK, QM_OK, QM_OK, QM_ERR_TENSOR_CHECKSUM};
    for (int threads = 1; threads <= 2; threads++)
        run_verify(bad, threads, false, QM_ERR_TENSOR_CHECKSUM, two, 2, k_vnames[1]);
}

/* Copy good -> bad, overwrite bytes at tensor ti's offset + rel, re-checksum the tensor and header. */
static void corrupt_q8(const char *good, const char *bad, uint64_t rel, const void *bytes, size_t len) {
    qm_file *f = open_ok(good);
    const qm_tensor *t = qm_tensor_at(f, 3);
    assert_int_equal(t->dtype, QM_DTYPE_Q8_ROW);
    assert_true(rel + len <= t->size);
    uint64_t off = t->offset, entry = t->entry_offset;
    qm_close(f);
    tu_copy_file(good, bad);
    tu_pwrite(bad, off + rel, bytes, len);
    tu_fix_tensor_checksum(bad, entry);
}

/* The file opens, passes checksum verification, and full verification flags tensor 3 only. */
static void expect_full_flags_q8(const char *bad, qm_status want1, qm_status want2, const char *what) {
    qm_status ok[NV] = {QM_OK, QM_OK, QM_OK, QM_OK, QM_OK, QM_OK};
    run_verify(bad, 1, false, QM_OK, ok, 0, NULL);
    for (int threads = 1; threads <= 2; threads++) {
        qm_file *f = open_ok(bad);
        qm_status st[NV];
        qm_verify_opts o = {threads, true};
        qm_verify_report rep;
        qm_error err;
        memset(&err, 0, sizeof err);
        qm_status s = qm_verify(f, &o, st, &rep, &err);
        if (s != want1 && s != want2)
            fail_msg("%s (threads=%d): expected %s%s%s, got %s (%s)", what, threads, qm_status_name(want1),
                     want2 != want1 ? " or " : "", want2 != want1 ? qm_status_name(want2) : "", qm_status_name(s),
                     err.message);
        for (int i = 0; i < NV; i++) {
            if (i == 3) assert_int_equal(st[i], s);
            else if (st[i] != QM_OK) fail_msg("%s: status[%d] = %s", what, i, qm_status_name(st[i]));
        }
        assert_int_equal(rep.tensors_bad, 1);
        assert_true(tu_contains(err.message, k_vnames[3]));
        qm_close(f);
    }
}

static void test_verify_full_q8(void **state) {
    (void)state;
    char good[TU_PATH_MAX], bad[TU_PATH_MAX];
    tu_path(good, "verify-q8-src.qmap");
    tu_path(bad, "verify-q8.qmap");
    write_verify_file(good);
    /* Q8_ROW [3, 65] at alignment 4096: stride 128, q 384 bytes, scales at 4096, sums at 4160, size 4172 */
    tu_q8 l;
    uint64_t d3[2] = {3, 65};
    l = tu_q8_layout(2, d3, 4096);
    assert_int_equal(l.size, 4172);
    size_t qsz;
    uint8_t *q = tu_q8_build(2, d3, 4096, 4, &qsz); /* same bytes the file holds (seed 4) */
    uint8_t one = 1;

    /* row padding (row 1, byte 100 of 128) */
    corrupt_q8(good, bad, 1 * 128 + 100, &one, 1);
    expect_full_flags_q8(bad, QM_ERR_PADDING_NONZERO, QM_ERR_BAD_TENSOR_DATA, "q8 row padding");
    /* between q and scales */
    corrupt_q8(good, bad, 2000, &one, 1);
    expect_full_flags_q8(bad, QM_ERR_PADDING_NONZERO, QM_ERR_BAD_TENSOR_DATA, "q8 gap q/scales");
    /* between scales and sums */
    corrupt_q8(good, bad, 4096 + 12 + 5, &one, 1);
    expect_full_flags_q8(bad, QM_ERR_PADDING_NONZERO, QM_ERR_BAD_TENSOR_DATA, "q8 gap scales/sums");
    /* wrong row sum */
    {
        uint8_t b = q[l.sums_offset + 4] ^ 0x01;
        corrupt_q8(good, bad, l.sums_offset + 4, &b, 1);
        expect_full_flags_q8(bad, QM_ERR_BAD_TENSOR_DATA, QM_ERR_BAD_TENSOR_DATA, "q8 row sum");
    }
    /* scales: negative, NaN, +Inf */
    const uint32_t bad_scales[] = {0xBF800000u /* -1 */, 0x7FC00000u, 0x7F800000u, 0xFF800000u};
    for (size_t i = 0; i < 4; i++) {
        uint8_t b[4];
        for (int k = 0; k < 4; k++) b[k] = (uint8_t)(bad_scales[i] >> (8 * k));
        corrupt_q8(good, bad, l.scales_offset + 4 * 2, b, 4);
        expect_full_flags_q8(bad, QM_ERR_BAD_TENSOR_DATA, QM_ERR_BAD_TENSOR_DATA, "q8 bad scale");
    }
    /* q = -128, with the row sum kept consistent */
    {
        int8_t old = (int8_t)q[0 * 128 + 10];
        int32_t sum;
        memcpy(&sum, q + l.sums_offset, 4);
        sum = sum - old + (-128);
        uint8_t patch[4];
        memcpy(patch, &sum, 4);
        uint8_t m128 = 0x80;
        corrupt_q8(good, bad, 10, &m128, 1);
        qm_file *f = open_ok(good);
        uint64_t off = qm_tensor_at(f, 3)->offset, entry = qm_tensor_at(f, 3)->entry_offset;
        qm_close(f);
        tu_pwrite(bad, off + l.sums_offset, patch, 4);
        tu_fix_tensor_checksum(bad, entry);
        expect_full_flags_q8(bad, QM_ERR_BAD_TENSOR_DATA, QM_ERR_BAD_TENSOR_DATA, "q8 value -128");
    }
    free(q);
}

static void test_verify_full_gap(void **state) {
    (void)state;
    char good[TU_PATH_MAX], bad[TU_PATH_MAX];
    tu_path(good, "verify-gap-src.qmap");
    tu_path(bad, "verify-gap.qmap");
    write_verify_file(good);
    qm_file *f = open_ok(good);
    uint64_t gap = qm_tensor_at(f, 1)->offset + qm_tensor_at(f, 1)->size + 3; /* between tensors 1 and 2 */
    assert_true(gap < qm_tensor_at(f, 2)->offset);
    qm_close(f);
    tu_copy_file(good, bad);
    tu_pwrite(bad, gap, "\x5A", 1);
    /* the gap is not covered by any checksum: opens, checksum verification passes */
    qm_status ok[NV] = {QM_OK, QM_OK, QM_OK, QM_OK, QM_OK, QM_OK};
    run_verify(bad, 2, false, QM_OK, ok, 0, NULL);
    for (int threads = 1; threads <= 2; threads++) {
        f = open_ok(bad);
        qm_status st[NV];
        qm_verify_opts o = {threads, true};
        qm_verify_report rep;
        qm_error err;
        assert_int_equal(qm_verify(f, &o, st, &rep, &err), QM_ERR_PADDING_NONZERO);
        assert_int_equal(rep.tensors_bad, 1);
        /* the gap belongs to the tensor before or after it */
        int marked = -1;
        for (int i = 0; i < NV; i++)
            if (st[i] != QM_OK) { assert_int_equal(marked, -1); marked = i; }
        assert_true(marked == 1 || marked == 2);
        assert_int_equal(st[marked], QM_ERR_PADDING_NONZERO);
        qm_close(f);
    }
}

static void test_header_byte_flip(void **state) {
    (void)state;
    char good[TU_PATH_MAX], bad[TU_PATH_MAX];
    tu_path(good, "hdr-src.qmap");
    tu_path(bad, "hdr-flip.qmap");
    write_verify_file(good);
    qm_file *f = open_ok(good);
    uint64_t name_byte = qm_tensor_at(f, 2)->entry_offset + 4 + 3; /* inside "blk.0.attn_k" */
    uint64_t table_end = qm_file_header(f)->table_offset + qm_file_header(f)->table_size;
    qm_close(f);
    struct { uint64_t off; uint8_t mask; } flips[] = {
        {name_byte, 0x01},    /* name[3] "." -> "/": still valid UTF-8 and unique */
        {name_byte, 0x80},    /* makes it invalid UTF-8: the checksum is still reported first */
        {table_end + 1, 0x01}, /* padding before data_offset (R-HDR-9 is checked before R-HDR-10) */
        {10, 0x01},            /* minor_version 0 -> 1: only the checksum catches it */
    };
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        tu_copy_file(good, bad);
        tu_xor_byte(bad, flips[i].off, flips[i].mask);
        qm_file *g = (qm_file *)(uintptr_t)1;
        qm_error err;
        memset(&err, 0, sizeof err);
        qm_status s = qm_open(bad, &g, &err);
        if (s != QM_ERR_HEADER_CHECKSUM)
            fail_msg("flip at %llu: expected QM_ERR_HEADER_CHECKSUM, got %s (%s)", (unsigned long long)flips[i].off,
                     qm_status_name(s), err.message);
        assert_null(g);
        assert_true(tu_contains(err.message, "hdr-flip.qmap"));
    }
}


/* The writer's bytes do not depend on how the caller cuts its writes: it buffers them so that every
 * write() starts and ends at a multiple of 4 MiB (for the page cache's large folios, qm_writer.c emit),
 * and pieces of 1 byte, of just under and over 4 MiB, and of whole tensors across that boundary must give
 * the file that one call gives. */
static void test_write_split_same_bytes(void **state) {
    (void)state;
    char a[TU_PATH_MAX], b[TU_PATH_MAX];
    tu_path(a, "split-a.qmap");
    tu_path(b, "split-b.qmap");
    const uint64_t d1[1] = { 25000 }, d2[1] = { 3000001 }, d3[1] = { 7 };   /* 0.1 MB, 12 MB, 28 bytes */
    size_t len = (25000 + 3000001 + 7) * 4;
    uint8_t *bytes = malloc(len);
    assert_non_null(bytes);
    tu_fill_random(bytes, len, 7);
    const size_t M4 = (size_t)4 << 20;
    const size_t pieces[] = { 1, 3, 99996, M4 - 5, 1, M4 + 7, 12, 100001 };
    for (int k = 0; k < 2; k++) {
        qm_writer *w;
        qm_error err;
        assert_int_equal(qm_writer_create(k ? b : a, NULL, &w, &err), QM_OK);
        assert_int_equal(qm_writer_add_tensor(w, "t1", QM_DTYPE_F32, 1, d1, &err), QM_OK);
        assert_int_equal(qm_writer_add_tensor(w, "t2", QM_DTYPE_F32, 1, d2, &err), QM_OK);
        assert_int_equal(qm_writer_add_tensor(w, "t3", QM_DTYPE_F32, 1, d3, &err), QM_OK);
        if (k == 0) {
            assert_int_equal(qm_writer_write(w, bytes, len, &err), QM_OK);
        } else {
            size_t off = 0;
            for (size_t i = 0; i < sizeof pieces / sizeof pieces[0] && off < len; i++) {
                size_t n = pieces[i] < len - off ? pieces[i] : len - off;
                assert_int_equal(qm_writer_write(w, bytes + off, n, &err), QM_OK);
                off += n;
            }
            if (off < len) assert_int_equal(qm_writer_write(w, bytes + off, len - off, &err), QM_OK);
        }
        assert_int_equal(qm_writer_finish(w, &err), QM_OK);
    }
    size_t la, lb;
    uint8_t *fa = tu_read_file(a, &la), *fb = tu_read_file(b, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(fa, fb, la);
    free(fa);
    free(fb);
    qm_file *f;
    qm_error err;
    ok_or_fail(qm_open(b, &f, &err), &err, "qm_open");
    ok_or_fail(qm_verify(f, NULL, NULL, NULL, &err), &err, "qm_verify");
    assert_memory_equal(qm_tensor_at(f, 1)->data, bytes + 25000 * 4, 3000001 * 4);
    qm_close(f);
    free(bytes);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_align64),
        cmocka_unit_test(test_roundtrip_align4096),
        cmocka_unit_test(test_roundtrip_align2m),
        cmocka_unit_test(test_roundtrip_default_alignment),
        cmocka_unit_test(test_roundtrip_limits),
        cmocka_unit_test(test_metadata_roundtrip),
        cmocka_unit_test(test_metadata_getters),
        cmocka_unit_test(test_writer_refuses_keys),
        cmocka_unit_test(test_writer_refuses_tensors),
        cmocka_unit_test(test_writer_meta_after_write),
        cmocka_unit_test(test_writer_meta_after_add_tensor),
        cmocka_unit_test(test_writer_add_after_write),
        cmocka_unit_test(test_writer_overwrite),
        cmocka_unit_test(test_writer_finish_incomplete),
        cmocka_unit_test(test_writer_create_errors),
        cmocka_unit_test(test_atomic_replace),
        cmocka_unit_test(test_zero_tensors),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_verify_good),
        cmocka_unit_test(test_verify_flipped_data_byte),
        cmocka_unit_test(test_verify_full_q8),
        cmocka_unit_test(test_verify_full_gap),
        cmocka_unit_test(test_header_byte_flip),
        cmocka_unit_test(test_write_split_same_bytes),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
