/* test_importers.c — the safetensors, .npy/.npz importers and sharded-checkpoint indexes (convert/).
 *
 * Inputs are built here from bytes (a header string plus data) so each case shows exactly what it feeds
 * the importer; a few files written by NumPy itself (tests/fuzz/seeds/, made by
 * tests/fuzz/make_import_seeds.py) check that real writers' output is accepted. Run from the repo root.
 */
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "qc_index.h"
#include "qc_source.h"

#define SEEDS "tests/fuzz/seeds"

/* ---- helpers ----------------------------------------------------------------------------------- */

typedef struct bytes { uint8_t *p; size_t n; } bytes;

static void bappend(bytes *b, const void *p, size_t n)
{
    b->p = realloc(b->p, b->n + n + 1);
    assert_non_null(b->p);
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}

/* A safetensors file: the given JSON header (used byte for byte), then `data`. */
static bytes st_file(const char *json, const void *data, size_t dlen)
{
    bytes b = { 0 };
    uint8_t n[8];
    tu_wr64(n, strlen(json));
    bappend(&b, n, 8);
    bappend(&b, json, strlen(json));
    bappend(&b, data, dlen);
    return b;
}

/* An .npy file: preamble of version major.0 (header length field as the version wants), the dict text
 * as given, then `data`. */
static bytes npy_file(unsigned major, const char *dict, const void *data, size_t dlen)
{
    bytes b = { 0 };
    uint8_t pre[12] = { 0x93, 'N', 'U', 'M', 'P', 'Y', (uint8_t)major, 0 };
    size_t hl = strlen(dict);
    if (major == 1) {
        pre[8] = (uint8_t)hl;
        pre[9] = (uint8_t)(hl >> 8);
        bappend(&b, pre, 10);
    } else {
        for (int i = 0; i < 4; i++) pre[8 + i] = (uint8_t)(hl >> (8 * i));
        bappend(&b, pre, 12);
    }
    bappend(&b, dict, hl);
    bappend(&b, data, dlen);
    return b;
}

static uint8_t g_pattern[4096];

static void fill_pattern(void)
{
    for (size_t i = 0; i < sizeof g_pattern; i++) g_pattern[i] = (uint8_t)(i * 7 + 3);
}

static qm_status open_st(const bytes *b, qc_source **s, qm_error *err)
{
    qm_error_clear(err);
    return qc_open_buffer(QC_INPUT_SAFETENSORS, b->p, b->n, "t.safetensors", s, err);
}

/* The call failed with `code`, *s stayed NULL, and the message mentions `needle`. */
/* `sp` is read after the call (argument evaluation order is unspecified). */
static void expect_fail(qm_status st, qc_source **sp, const qm_error *err, qm_status code, const char *needle)
{
    qc_source *s = *sp;
    if (st != code || s != NULL || (needle && !tu_contains(err->message, needle)))
        fprintf(stderr, "expected %s mentioning '%s'; got %s: %s\n", qm_status_name(code), needle ? needle : "",
                qm_status_name(st), err->message);
    assert_int_equal(st, code);
    assert_null(s);
    assert_int_equal(err->code, code);
    if (needle) assert_true(tu_contains(err->message, needle));
}

static void st_expect(const char *json, size_t dlen, qm_status code, const char *needle)
{
    fill_pattern();
    bytes b = st_file(json, g_pattern, dlen);
    qc_source *s = (qc_source *)1;
    qm_error err;
    qm_status st = open_st(&b, &s, &err);
    expect_fail(st, &s, &err, code, needle);
    free(b.p);
}

static void npy_expect(unsigned major, const char *dict, size_t dlen, qm_status code, const char *needle)
{
    fill_pattern();
    bytes b = npy_file(major, dict, g_pattern, dlen);
    qc_source *s = (qc_source *)1;
    qm_error err;
    qm_error_clear(&err);
    qm_status st = qc_open_buffer(QC_INPUT_NPY, b.p, b.n, "x.npy", &s, &err);
    expect_fail(st, &s, &err, code, needle);
    free(b.p);
}

static const qc_tensor *find(const qc_source *s, const char *name)
{
    for (uint64_t i = 0; i < s->n_tensors; i++)
        if (!strcmp(s->tensors[i].name, name)) return &s->tensors[i];
    fail_msg("no tensor '%s'", name);
    return NULL;
}

static void check_shape(const qc_tensor *t, qc_dtype dt, uint32_t rank, const uint64_t *shape)
{
    assert_int_equal(t->dtype, dt);
    assert_int_equal(t->rank, rank);
    for (uint32_t i = 0; i < rank; i++) assert_int_equal(t->shape[i], shape[i]);
}

/* Element i (in the tensor's logical row-major order) of an F32 tensor, read through its strides. */
static float f32_at(qc_source *s, const qc_tensor *t, uint64_t i)
{
    const uint8_t *p;
    qm_error err;
    assert_int_equal(qc_source_load(s, t->storage, &p, &err), QM_OK);
    uint64_t off = t->offset;
    for (int d = (int)t->rank - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * (uint64_t)t->stride[d];
        i /= t->shape[d];
    }
    float f;
    memcpy(&f, p + off * 4, 4);
    return f;
}

/* ---- safetensors: valid ------------------------------------------------------------------------ */

/* Every accepted dtype, ranks 0..4, listed in the header out of data order. */
static void test_st_all_dtypes(void **state)
{
    (void)state;
    fill_pattern();
    const char *json =
        "{\"b\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[94,96]},"
        "\"f32\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
        "\"f16\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[4,10]},"
        "\"bf16\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[10,18]},"
        "\"f64\":{\"dtype\":\"F64\",\"shape\":[1,2,1],\"data_offsets\":[18,34]},"
        "\"i64\":{\"dtype\":\"I64\",\"shape\":[1,1,1,2],\"data_offsets\":[34,50]},"
        "\"i32\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[50,66]},"
        "\"i16\":{\"dtype\":\"I16\",\"shape\":[3],\"data_offsets\":[66,72]},"
        "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[72,72]},"
        "\"i8\":{\"dtype\":\"I8\",\"shape\":[2,3,1,1],\"data_offsets\":[72,78]},"
        "\"u8\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[78,94]}}";
    bytes b = st_file(json, g_pattern, 96);
    qc_source *s;
    qm_error err;
    assert_int_equal(open_st(&b, &s, &err), QM_OK);
    assert_string_equal(s->kind, "safetensors");
    assert_null(s->config_json);
    assert_int_equal(s->n_tensors, 11);
    assert_int_equal(s->n_storages, 11);
    /* data order, not header order */
    const char *order[] = { "f32", "f16", "bf16", "f64", "i64", "i32", "i16", "empty", "i8", "u8", "b" };
    for (size_t i = 0; i < 11; i++) assert_string_equal(s->tensors[i].name, order[i]);
    check_shape(find(s, "f32"), QC_F32, 0, NULL);
    check_shape(find(s, "f16"), QC_F16, 1, (uint64_t[]){ 3 });
    check_shape(find(s, "bf16"), QC_BF16, 2, (uint64_t[]){ 2, 2 });
    check_shape(find(s, "f64"), QC_F64, 3, (uint64_t[]){ 1, 2, 1 });
    check_shape(find(s, "i64"), QC_I64, 4, (uint64_t[]){ 1, 1, 1, 2 });
    check_shape(find(s, "i32"), QC_I32, 2, (uint64_t[]){ 2, 2 });
    check_shape(find(s, "i16"), QC_I16, 1, (uint64_t[]){ 3 });
    check_shape(find(s, "i8"), QC_I8, 4, (uint64_t[]){ 2, 3, 1, 1 });
    check_shape(find(s, "u8"), QC_U8, 1, (uint64_t[]){ 16 });
    check_shape(find(s, "b"), QC_BOOL, 1, (uint64_t[]){ 2 });
    check_shape(find(s, "empty"), QC_F32, 2, (uint64_t[]){ 0, 5 });
    const qc_tensor *t = find(s, "i32");
    assert_int_equal(t->stride[0], 2);
    assert_int_equal(t->stride[1], 1);
    assert_true(qc_tensor_is_contiguous(t));
    uint64_t hdr = 8 + strlen(json);
    for (uint64_t i = 0; i < s->n_tensors; i++) {
        const qc_tensor *ti = &s->tensors[i];
        const qc_storage *st = &s->storages[ti->storage];
        assert_int_equal(st->kind, QC_STORAGE_MAPPED);
        const uint8_t *p;
        assert_int_equal(qc_source_load(s, ti->storage, &p, &err), QM_OK);
        assert_int_equal(st->nbytes, qc_tensor_elements(ti) * qc_dtype_size(ti->dtype));
        if (st->nbytes) assert_memory_equal(p, b.p + st->file_offset, st->nbytes);
        assert_true(st->file_offset >= hdr);
    }
    const qc_storage *u8 = &s->storages[find(s, "u8")->storage];
    assert_int_equal(u8->file_offset, hdr + 78);
    assert_memory_equal(b.p + u8->file_offset, g_pattern + 78, 16);
    qc_source_free(s);
    free(b.p);
}

static void test_st_padding_and_metadata(void **state)
{
    (void)state;
    fill_pattern();
    bytes b = st_file("{\"__metadata__\":{\"format\":\"pt\",\"note\":\"x\"},"
                      "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}       ",
                      g_pattern, 8);
    qc_source *s;
    qm_error err;
    assert_int_equal(open_st(&b, &s, &err), QM_OK);
    assert_int_equal(s->n_tensors, 1);
    assert_non_null(s->config_json);
    assert_string_equal(s->config_json, "{\"format\":\"pt\",\"note\":\"x\"}");
    qc_source_free(s);
    free(b.p);
    /* an empty file: "{}" and no data */
    b = st_file("{}      ", NULL, 0);
    assert_int_equal(open_st(&b, &s, &err), QM_OK);
    assert_int_equal(s->n_tensors, 0);
    qc_source_free(s);
    free(b.p);
}

/* A file written by a few lines of Python from the format description (make_import_seeds.py). */
static void test_st_seed_files(void **state)
{
    (void)state;
    qc_source *s;
    qm_error err;
    assert_int_equal(qc_open_file(QC_INPUT_SAFETENSORS, SEEDS "/safetensors/model.safetensors", &s, &err), QM_OK);
    assert_int_equal(s->n_tensors, 5);
    assert_string_equal(s->tensors[0].name, "model.embed.weight");
    const qc_tensor *t = find(s, "model.embed.weight");
    check_shape(t, QC_F32, 2, (uint64_t[]){ 4, 3 });
    for (uint64_t i = 0; i < 12; i++) assert_true(f32_at(s, t, i) == (float)i);
    check_shape(find(s, "scale"), QC_F32, 0, NULL);
    assert_true(f32_at(s, find(s, "scale"), 0) == 2.0f);
    check_shape(find(s, "position_ids"), QC_I64, 2, (uint64_t[]){ 1, 4 });
    assert_string_equal(s->config_json, "{\"format\":\"pt\"}");
    qc_source_free(s);

    assert_int_equal(qc_open_file(QC_INPUT_SAFETENSORS, SEEDS "/safetensors/dtypes.safetensors", &s, &err), QM_OK);
    assert_int_equal(s->n_tensors, 6);
    check_shape(find(s, "t.i32"), QC_I32, 4, (uint64_t[]){ 2, 2, 2, 2 });
    check_shape(find(s, "t.bool"), QC_BOOL, 1, (uint64_t[]){ 2 });
    qc_source_free(s);

    assert_int_equal(qc_open_file(QC_INPUT_SAFETENSORS, SEEDS "/safetensors/bf16.safetensors", &s, &err), QM_OK);
    check_shape(find(s, "w"), QC_BF16, 2, (uint64_t[]){ 2, 2 });
    const uint8_t *p;
    assert_int_equal(qc_source_load(s, 0, &p, &err), QM_OK);
    assert_int_equal(p[2] | (p[3] << 8), 0x3f80); /* bf16(1.0) */
    qc_source_free(s);
}

/* ---- safetensors: refusals --------------------------------------------------------------------- */

#define W_OK_TENSOR "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

static void test_st_header_length(void **state)
{
    (void)state;
    qc_source *s = NULL;
    qm_error err;
    /* N > 1e8, even with that many bytes claimed */
    uint8_t big[16] = { 0 };
    tu_wr64(big, 100000001ull);
    big[8] = '{';
    qm_error_clear(&err);
    expect_fail(qc_open_buffer(QC_INPUT_SAFETENSORS, big, sizeof big, "t", &s, &err), &s, &err, QM_ERR_BAD_SOURCE,
                "above the limit");
    /* N beyond the file */
    tu_wr64(big, 9);
    expect_fail(qc_open_buffer(QC_INPUT_SAFETENSORS, big, sizeof big, "t", &s, &err), &s, &err, QM_ERR_BAD_SOURCE,
                "past the end");
    tu_wr64(big, UINT64_MAX);
    expect_fail(qc_open_buffer(QC_INPUT_SAFETENSORS, big, sizeof big, "t", &s, &err), &s, &err, QM_ERR_BAD_SOURCE, NULL);
    /* shorter than the length field */
    expect_fail(qc_open_buffer(QC_INPUT_SAFETENSORS, big, 7, "t", &s, &err), &s, &err, QM_ERR_BAD_SOURCE, "too short");
    expect_fail(qc_open_buffer(QC_INPUT_SAFETENSORS, NULL, 0, "t", &s, &err), &s, &err, QM_ERR_BAD_SOURCE, "too short");
}

static void test_st_bad_json(void **state)
{
    (void)state;
    st_expect("{\"w\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, QM_ERR_BAD_SOURCE,
              "not valid JSON");                                                  /* invalid UTF-8 */
    st_expect("{\"w\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, QM_ERR_BAD_SOURCE,
              "not valid JSON");                                                  /* overlong UTF-8 */
    st_expect("{" W_OK_TENSOR ",}", 8, QM_ERR_BAD_SOURCE, "not valid JSON");      /* not JSON */
    st_expect("{" W_OK_TENSOR "} x", 8, QM_ERR_BAD_SOURCE, "not valid JSON");     /* junk after */
    st_expect("{\"w\\u0000\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, QM_ERR_BAD_SOURCE,
              "not valid JSON");                                                  /* NUL in a name */
    st_expect("{" W_OK_TENSOR "," W_OK_TENSOR "}", 8, QM_ERR_BAD_SOURCE, "duplicate");
    st_expect("{\"w\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
              QM_ERR_BAD_SOURCE, "duplicate");
    st_expect(" {" W_OK_TENSOR "}", 8, QM_ERR_BAD_SOURCE, "start with '{'");
    st_expect("[1,2]", 0, QM_ERR_BAD_SOURCE, "start with '{'");
    st_expect("{\"w\":[]}", 0, QM_ERR_BAD_SOURCE, "not an object");
    /* padding with NUL instead of spaces: not JSON */
    fill_pattern();
    bytes b = st_file("{" W_OK_TENSOR "}", g_pattern, 8);
    uint8_t nul[2] = { 0, 0 };
    b.n -= 8;
    bappend(&b, nul, 2);
    bappend(&b, g_pattern, 8);
    tu_wr64(b.p, tu_rd64(b.p) + 2);
    qc_source *s = NULL;
    qm_error err;
    expect_fail(open_st(&b, &s, &err), &s, &err, QM_ERR_BAD_SOURCE, "not valid JSON");
    free(b.p);
    st_expect("{\"__metadata__\":{\"a\":1}}", 0, QM_ERR_BAD_SOURCE, "not a string");
    st_expect("{\"__metadata__\":[]}", 0, QM_ERR_BAD_SOURCE, "__metadata__");
}

static void test_st_bad_fields(void **state)
{
    (void)state;
    st_expect("{\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, QM_ERR_BAD_SOURCE, "no \"dtype\"");
    st_expect("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, QM_ERR_BAD_SOURCE, "no \"shape\"");
    st_expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, QM_ERR_BAD_SOURCE, "no \"data_offsets\"");
    st_expect("{\"w\":{\"dtype\":\"float32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, QM_ERR_BAD_SOURCE,
              "unknown dtype");
    st_expect("{\"w\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, QM_ERR_BAD_SOURCE, "dtype");
    st_expect("{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2, QM_ERR_UNSUPPORTED,
              "F8_E4M3");
    st_expect("{\"w\":{\"dtype\":\"U32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, QM_ERR_UNSUPPORTED, "'w'");
    st_expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, QM_ERR_BAD_SOURCE, "shape[0]");
    st_expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, QM_ERR_BAD_SOURCE, "shape[0]");
    st_expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,\"2\"],\"data_offsets\":[0,8]}}", 8, QM_ERR_BAD_SOURCE,
              "shape[1]");
    st_expect("{\"w\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, QM_ERR_BAD_SOURCE, "not an array");
    st_expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8,
              QM_ERR_UNSUPPORTED, "dimensions");
    st_expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, QM_ERR_BAD_SOURCE, "data_offsets");
    st_expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-1,8]}}", 8, QM_ERR_BAD_SOURCE,
              "data_offsets");
    st_expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, QM_ERR_BAD_SOURCE, "before");
}

static void test_st_bad_layout(void **state)
{
    (void)state;
    /* gap at the start */
    st_expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, QM_ERR_BAD_SOURCE, "gap");
    /* gap between */
    st_expect("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, QM_ERR_BAD_SOURCE, "gap");
    /* overlapping */
    st_expect("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, QM_ERR_BAD_SOURCE, "overlaps");
    /* the same range twice */
    st_expect("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16, QM_ERR_BAD_SOURCE, "overlaps");
    /* size ≠ dtype × shape */
    st_expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, QM_ERR_BAD_SOURCE, "needs 12");
    st_expect("{\"w\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, QM_ERR_BAD_SOURCE, "needs 4");
    /* trailing bytes, and data short of the last end */
    st_expect("{" W_OK_TENSOR "}", 9, QM_ERR_BAD_SOURCE, "1 more bytes");
    st_expect("{" W_OK_TENSOR "}", 7, QM_ERR_BAD_SOURCE, "past the end");
    st_expect("{}", 1, QM_ERR_BAD_SOURCE, "more bytes");
    /* shape product overflows 64 bits (and × 4 would too) */
    st_expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
              QM_ERR_BAD_SOURCE, "overflows");
    st_expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}", 0,
              QM_ERR_BAD_SOURCE, "overflows");
    /* offsets far past the file */
    st_expect("{\"w\":{\"dtype\":\"U8\",\"shape\":[9223372036854775807],"
              "\"data_offsets\":[0,9223372036854775807]}}", 8, QM_ERR_BAD_SOURCE, "past the end");
}

/* ---- npy --------------------------------------------------------------------------------------- */

/* The source points into *b, which the caller frees after the source. */
static qc_source *npy_ok(unsigned major, const char *dict, size_t dlen, bytes *bp)
{
    fill_pattern();
    bytes b = *bp = npy_file(major, dict, g_pattern, dlen);
    qc_source *s;
    qm_error err;
    qm_error_clear(&err);
    qm_status st = qc_open_buffer(QC_INPUT_NPY, b.p, b.n, "dir/weights.npy", &s, &err);
    if (st != QM_OK) fail_msg("npy refused: %s", err.message);
    assert_string_equal(s->kind, "numpy .npy");
    assert_int_equal(s->n_tensors, 1);
    assert_string_equal(s->tensors[0].name, "weights");
    return s;
}

static void test_npy_dtypes_and_ranks(void **state)
{
    (void)state;
    static const struct { const char *descr; qc_dtype t; } d[] = {
        { "<f4", QC_F32 }, { "<f2", QC_F16 }, { "<f8", QC_F64 }, { "|b1", QC_BOOL }, { "<i8", QC_I64 },
        { "<i4", QC_I32 }, { "<i2", QC_I16 }, { "|i1", QC_I8 },  { "|u1", QC_U8 },   { "=f4", QC_F32 },
    };
    static const char *shapes[] = { "()", "(3,)", "(2, 3)", "(2,1,3)", "(1, 2, 1, 3)" };
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        for (uint32_t r = 0; r < 5; r++) {
            char dict[128];
            snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }\n", d[i].descr,
                     shapes[r]);
            size_t n = (r ? 6 : 1) * qc_dtype_size(d[i].t);
            if (r == 1) n = 3 * qc_dtype_size(d[i].t);
            bytes b;
            qc_source *s = npy_ok(1, dict, n, &b);
            const qc_tensor *t = &s->tensors[0];
            assert_int_equal(t->dtype, d[i].t);
            assert_int_equal(t->rank, r);
            assert_true(qc_tensor_is_contiguous(t));
            const uint8_t *p;
            qm_error err;
            assert_int_equal(qc_source_load(s, t->storage, &p, &err), QM_OK);
            assert_int_equal(s->storages[0].nbytes, n);
            assert_memory_equal(p, g_pattern, n);
            qc_source_free(s);
            free(b.p);
        }
}

static void test_npy_dict_syntax(void **state)
{
    (void)state;
    qc_source *s;
    bytes b;
    /* any key order, any blanks, no trailing comma, double quotes, version 2.0 and 3.0 */
    s = npy_ok(1, "{'shape':(2,3),'fortran_order':False,'descr':'<f4'}", 24, &b);
    check_shape(&s->tensors[0], QC_F32, 2, (uint64_t[]){ 2, 3 });
    qc_source_free(s);
    free(b.p);
    s = npy_ok(2, "{ \"descr\" : \"<i4\" ,\n\t'fortran_order' : False , 'shape' : ( 4 , ) , }      \n", 16, &b);
    check_shape(&s->tensors[0], QC_I32, 1, (uint64_t[]){ 4 });
    qc_source_free(s);
    free(b.p);
    s = npy_ok(3, "{'descr': '<f2', 'fortran_order': False, 'shape': (0, 5), }", 0, &b);
    check_shape(&s->tensors[0], QC_F16, 2, (uint64_t[]){ 0, 5 });
    qc_source_free(s);
    free(b.p);
}

static void test_npy_seed_files(void **state)
{
    (void)state;
    static const struct { const char *file, *name; qc_dtype t; uint32_t rank; uint64_t shape[4]; } c[] = {
        { "f4_2x3", "f4_2x3", QC_F32, 2, { 2, 3 } },      { "f2_4", "f2_4", QC_F16, 1, { 4 } },
        { "f8_scalar", "f8_scalar", QC_F64, 0, { 0 } },   { "i8_2x2x2", "i8_2x2x2", QC_I64, 3, { 2, 2, 2 } },
        { "i4_1x2x3x4", "i4_1x2x3x4", QC_I32, 4, { 1, 2, 3, 4 } },
        { "i2_3", "i2_3", QC_I16, 1, { 3 } },             { "i1_5", "i1_5", QC_I8, 1, { 5 } },
        { "u1_5", "u1_5", QC_U8, 1, { 5 } },              { "b1_4", "b1_4", QC_BOOL, 1, { 4 } },
        { "f4_empty_0x3", "f4_empty_0x3", QC_F32, 2, { 0, 3 } },
        { "f4_v2", "f4_v2", QC_F32, 2, { 2, 2 } },        { "f4_v3", "f4_v3", QC_F32, 2, { 2, 2 } },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, SEEDS "/npy/%s.npy", c[i].file);
        qc_source *s;
        qm_error err;
        if (qc_open_file(QC_INPUT_NPY, path, &s, &err) != QM_OK) fail_msg("%s: %s", path, err.message);
        assert_string_equal(s->tensors[0].name, c[i].name);
        check_shape(&s->tensors[0], c[i].t, c[i].rank, c[i].shape);
        if (c[i].t == QC_F32)
            for (uint64_t k = 0; k < qc_tensor_elements(&s->tensors[0]); k++)
                assert_true(f32_at(s, &s->tensors[0], k) == (float)k);
        qc_source_free(s);
    }
    qc_source *s = (qc_source *)1;
    qm_error err;
    expect_fail(qc_open_file(QC_INPUT_NPY, SEEDS "/npy/bad_big_endian.npy", &s, &err), &s, &err, QM_ERR_UNSUPPORTED, "big-endian");
    expect_fail(qc_open_file(QC_INPUT_NPY, SEEDS "/npy/bad_object.npy", &s, &err), &s, &err, QM_ERR_UNSUPPORTED, "unpickle");
    expect_fail(qc_open_file(QC_INPUT_NPY, "tests/no/such.npy", &s, &err), &s, &err, QM_ERR_IO, NULL);
}

/* fortran_order True keeps the bytes and gives column-major strides: element [i][j] is at i + j*rows. */
static void test_npy_fortran(void **state)
{
    (void)state;
    float col_major[6] = { 0, 3, 1, 4, 2, 5 }; /* the 2×3 matrix [[0,1,2],[3,4,5]] stored by columns */
    bytes b = npy_file(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", col_major, sizeof col_major);
    qc_source *s;
    qm_error err;
    assert_int_equal(qc_open_buffer(QC_INPUT_NPY, b.p, b.n, "m.npy", &s, &err), QM_OK);
    const qc_tensor *t = &s->tensors[0];
    assert_int_equal(t->stride[0], 1);
    assert_int_equal(t->stride[1], 2);
    assert_false(qc_tensor_is_contiguous(t));
    for (uint64_t k = 0; k < 6; k++) assert_true(f32_at(s, t, k) == (float)k);
    qc_source_free(s);
    free(b.p);
    /* the same from NumPy */
    assert_int_equal(qc_open_file(QC_INPUT_NPY, SEEDS "/npy/f4_fortran_2x3.npy", &s, &err), QM_OK);
    t = &s->tensors[0];
    check_shape(t, QC_F32, 2, (uint64_t[]){ 2, 3 });
    for (uint64_t k = 0; k < 6; k++) assert_true(f32_at(s, t, k) == (float)k);
    qc_source_free(s);
    /* rank 3: strides 1, d0, d0*d1 */
    fill_pattern();
    b = npy_file(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3, 4), }", g_pattern, 96);
    assert_int_equal(qc_open_buffer(QC_INPUT_NPY, b.p, b.n, "m.npy", &s, &err), QM_OK);
    assert_int_equal(s->tensors[0].stride[0], 1);
    assert_int_equal(s->tensors[0].stride[1], 2);
    assert_int_equal(s->tensors[0].stride[2], 6);
    qc_source_free(s);
    free(b.p);
}

#define NPY_OK_DICT "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"

static void test_npy_refusals(void **state)
{
    (void)state;
    qc_source *s = (qc_source *)1;
    qm_error err;
    qm_error_clear(&err);
    /* bad magic */
    bytes b = npy_file(1, NPY_OK_DICT, g_pattern, 8);
    b.p[1] = 'n';
    expect_fail(qc_open_buffer(QC_INPUT_NPY, b.p, b.n, "x.npy", &s, &err), &s, &err, QM_ERR_BAD_SOURCE, "magic");
    expect_fail(qc_open_buffer(QC_INPUT_NPY, b.p, 5, "x.npy", &s, &err), &s, &err, QM_ERR_BAD_SOURCE, "magic");
    /* unknown version */
    b.p[1] = 'N';
    b.p[6] = 4;
    expect_fail(qc_open_buffer(QC_INPUT_NPY, b.p, b.n, "x.npy", &s, &err), &s, &err, QM_ERR_UNSUPPORTED, "version 4.0");
    b.p[6] = 1;
    b.p[7] = 1;
    expect_fail(qc_open_buffer(QC_INPUT_NPY, b.p, b.n, "x.npy", &s, &err), &s, &err, QM_ERR_UNSUPPORTED, "version 1.1");
    b.p[7] = 0;
    /* truncated: inside the length field, inside the header */
    expect_fail(qc_open_buffer(QC_INPUT_NPY, b.p, 9, "x.npy", &s, &err), &s, &err, QM_ERR_BAD_SOURCE, "header length");
    expect_fail(qc_open_buffer(QC_INPUT_NPY, b.p, 30, "x.npy", &s, &err), &s, &err, QM_ERR_BAD_SOURCE, "ends inside");
    free(b.p);
    /* malformed dicts */
    npy_expect(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,) ", 8, QM_ERR_BAD_SOURCE, "malformed");
    npy_expect(1, "{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", 8, QM_ERR_BAD_SOURCE, "malformed");
    npy_expect(1, "{'descr': '<f4', 'fortran_order': false, 'shape': (2,)}", 8, QM_ERR_BAD_SOURCE, "True or False");
    npy_expect(1, "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,)}", 8, QM_ERR_BAD_SOURCE, "True or False");
    npy_expect(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", 8, QM_ERR_BAD_SOURCE, "not a tuple");
    npy_expect(1, "{'descr': '<f4', 'fortran_order': False, 'shape': [2]}", 8, QM_ERR_BAD_SOURCE, "not a tuple");
    npy_expect(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", 8, QM_ERR_BAD_SOURCE, "integer");
    npy_expect(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (02,)}", 8, QM_ERR_BAD_SOURCE, "leading zero");
    npy_expect(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}", 8, QM_ERR_BAD_SOURCE, "integer");
    npy_expect(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", 8,
               QM_ERR_BAD_SOURCE, "64 bits");
    npy_expect(1, "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}", 8, QM_ERR_BAD_SOURCE, "malformed");
    npy_expect(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", 8, QM_ERR_BAD_SOURCE, "after");
    npy_expect(1, "", 8, QM_ERR_BAD_SOURCE, "malformed");
    npy_expect(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, QM_ERR_BAD_SOURCE,
               "unknown key");
    npy_expect(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8, QM_ERR_BAD_SOURCE,
               "duplicate");
    /* missing keys */
    npy_expect(1, "{'descr': '<f4', 'fortran_order': False}", 8, QM_ERR_BAD_SOURCE, "no 'shape'");
    npy_expect(1, "{'fortran_order': False, 'shape': (2,)}", 8, QM_ERR_BAD_SOURCE, "no 'descr'");
    npy_expect(1, "{'descr': '<f4', 'shape': (2,)}", 8, QM_ERR_BAD_SOURCE, "no 'fortran_order'");
    /* dtypes */
    npy_expect(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,)}", 8, QM_ERR_UNSUPPORTED, "big-endian");
    npy_expect(1, "{'descr': '>i8', 'fortran_order': False, 'shape': (1,)}", 8, QM_ERR_UNSUPPORTED, "big-endian");
    npy_expect(1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,)}", 16, QM_ERR_UNSUPPORTED,
               "pickled object array; refusing to unpickle");
    npy_expect(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (1,)}", 8, QM_ERR_UNSUPPORTED, "<c8");
    npy_expect(1, "{'descr': '<u4', 'fortran_order': False, 'shape': (2,)}", 8, QM_ERR_UNSUPPORTED, "<u4");
    npy_expect(1, "{'descr': '|f4', 'fortran_order': False, 'shape': (2,)}", 8, QM_ERR_UNSUPPORTED, "|f4");
    npy_expect(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", 8, QM_ERR_UNSUPPORTED,
               "structured");
    /* data size */
    npy_expect(1, NPY_OK_DICT, 7, QM_ERR_BAD_SOURCE, "truncated");
    npy_expect(1, NPY_OK_DICT, 9, QM_ERR_BAD_SOURCE, "trailing bytes");
    npy_expect(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,)}", 8,
               QM_ERR_BAD_SOURCE, "overflows");
    npy_expect(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1)}", 4, QM_ERR_UNSUPPORTED,
               "dimensions");
}

/* ---- npz --------------------------------------------------------------------------------------- */

typedef struct zentry { const char *name; bytes data; bool deflate; } zentry;

static void write_zip(const char *path, const zentry *e, size_t n)
{
    int zerr = 0;
    zip_t *z = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &zerr);
    assert_non_null(z);
    for (size_t i = 0; i < n; i++) {
        zip_source_t *src = zip_source_buffer(z, e[i].data.p, e[i].data.n, 0);
        assert_non_null(src);
        zip_int64_t idx = zip_file_add(z, e[i].name, src, ZIP_FL_ENC_UTF_8);
        assert_true(idx >= 0);
        assert_int_equal(zip_set_file_compression(z, (zip_uint64_t)idx, e[i].deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE,
                                                  0), 0);
    }
    assert_int_equal(zip_close(z), 0);
}

static void check_npz_pair(qc_source *s)
{
    assert_string_equal(s->kind, "numpy .npz");
    assert_int_equal(s->n_tensors, 2);
    const qc_tensor *a = find(s, "a"), *w = find(s, "layer/w");
    check_shape(a, QC_F32, 1, (uint64_t[]){ 3 });
    check_shape(w, QC_F32, 2, (uint64_t[]){ 2, 2 });
    for (uint64_t k = 0; k < 3; k++) assert_true(f32_at(s, a, k) == (float)k);
    for (uint64_t k = 0; k < 4; k++) assert_true(f32_at(s, w, k) == (float)(10 + k));
    for (uint64_t i = 0; i < s->n_storages; i++) assert_int_equal(s->storages[i].kind, QC_STORAGE_ZIP);
}

static void test_npz_libzip(void **state)
{
    (void)state;
    float a[3] = { 0, 1, 2 }, w[4] = { 10, 11, 12, 13 };
    for (int deflate = 0; deflate < 2; deflate++) {
        zentry e[2] = {
            { "a.npy", npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\n", a, sizeof a),
              deflate },
            { "layer/w.npy", npy_file(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }\n", w, sizeof w),
              !deflate },
        };
        char path[TU_PATH_MAX];
        tu_path(path, deflate ? "d.npz" : "s.npz");
        write_zip(path, e, 2);
        qc_source *s;
        qm_error err;
        if (qc_open_file(QC_INPUT_NPZ, path, &s, &err) != QM_OK) fail_msg("%s", err.message);
        check_npz_pair(s);
        /* loads in any order, repeatedly: zip_skip drops the header each time */
        check_npz_pair(s);
        qc_source_free(s);
        size_t len;
        uint8_t *img = tu_read_file(path, &len);
        assert_int_equal(qc_open_buffer(QC_INPUT_NPZ, img, len, "mem.npz", &s, &err), QM_OK);
        check_npz_pair(s);
        qc_source_free(s);
        free(img);
        free(e[0].data.p);
        free(e[1].data.p);
    }
}

static void npz_expect(const zentry *e, size_t n, qm_status code, const char *needle)
{
    char path[TU_PATH_MAX];
    tu_path(path, "bad.npz");
    write_zip(path, e, n);
    qc_source *s = (qc_source *)1;
    qm_error err;
    qm_error_clear(&err);
    expect_fail(qc_open_file(QC_INPUT_NPZ, path, &s, &err), &s, &err, code, needle);
}

static void test_npz_refusals(void **state)
{
    (void)state;
    float a[3] = { 0, 1, 2 };
    bytes good = npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", a, sizeof a);
    bytes longer = npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", a, sizeof a);
    bytes big = npy_file(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (3,), }", a, sizeof a);
    bytes text = { (uint8_t *)"hello", 5 };
    npz_expect((zentry[]){ { "a.npy", good, false }, { "notes.txt", text, false } }, 2, QM_ERR_BAD_SOURCE,
               "is not NAME.npy");
    npz_expect((zentry[]){ { ".npy", good, false } }, 1, QM_ERR_BAD_SOURCE, "is not NAME.npy");
    npz_expect((zentry[]){ { "a.npy", longer, true } }, 1, QM_ERR_BAD_SOURCE, "trailing bytes");
    npz_expect((zentry[]){ { "a.npy", big, true } }, 1, QM_ERR_UNSUPPORTED, "big-endian");
    npz_expect((zentry[]){ { "a.npy", text, false } }, 1, QM_ERR_BAD_SOURCE, "magic");
    free(good.p);
    free(longer.p);
    free(big.p);

    qc_source *s = (qc_source *)1;
    qm_error err;
    uint8_t junk[64] = "PK\x03\x04 not really a zip";
    expect_fail(qc_open_buffer(QC_INPUT_NPZ, junk, sizeof junk, "j.npz", &s, &err), &s, &err, QM_ERR_BAD_SOURCE, "zip");
    expect_fail(qc_open_buffer(QC_INPUT_NPZ, junk, 0, "j.npz", &s, &err), &s, &err, QM_ERR_BAD_SOURCE, "empty");
}

/* A stored entry whose bytes were changed after the archive was written: the CRC check catches it when
 * the storage is loaded (the header still parses). */
static void test_npz_corrupt_data(void **state)
{
    (void)state;
    float a[3] = { 0, 1, 2 };
    zentry e = { "a.npy", npy_file(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", a, sizeof a),
                 false };
    char path[TU_PATH_MAX];
    tu_path(path, "crc.npz");
    write_zip(path, &e, 1);
    size_t len;
    uint8_t *img = tu_read_file(path, &len);
    uint8_t *hit = NULL;
    for (size_t i = 0; i + 12 <= len && !hit; i++)
        if (!memcmp(img + i, e.data.p + e.data.n - 12, 12)) hit = img + i;
    assert_non_null(hit);
    hit[11] ^= 1;
    qc_source *s;
    qm_error err;
    assert_int_equal(qc_open_buffer(QC_INPUT_NPZ, img, len, "crc.npz", &s, &err), QM_OK);
    const uint8_t *p;
    assert_int_equal(qc_source_load(s, 0, &p, &err), QM_ERR_BAD_SOURCE);
    assert_true(tu_contains(err.message, "CRC"));
    qc_source_free(s);
    free(img);
    free(e.data.p);
}

static void test_npz_seed_files(void **state)
{
    (void)state;
    static const char *files[] = { SEEDS "/npz/stored.npz", SEEDS "/npz/deflated.npz" };
    for (size_t i = 0; i < 2; i++) {
        qc_source *s;
        qm_error err;
        if (qc_open_file(QC_INPUT_NPZ, files[i], &s, &err) != QM_OK) fail_msg("%s", err.message);
        assert_int_equal(s->n_tensors, 3);
        const qc_tensor *w = find(s, "w");
        check_shape(w, QC_F32, 2, (uint64_t[]){ 2, 3 });
        for (uint64_t k = 0; k < 6; k++) assert_true(f32_at(s, w, k) == (float)k);
        check_shape(find(s, "b"), QC_F16, 1, (uint64_t[]){ 3 });
        check_shape(find(s, "n"), QC_I64, 2, (uint64_t[]){ 2, 2 });
        const uint8_t *p;
        assert_int_equal(qc_source_load(s, find(s, "n")->storage, &p, &err), QM_OK);
        int64_t v;
        memcpy(&v, p + 24, 8);
        assert_int_equal(v, 3);
        qc_source_free(s);
    }
    qc_source *s;
    qm_error err;
    assert_int_equal(qc_open_file(QC_INPUT_NPZ, SEEDS "/npz/positional.npz", &s, &err), QM_OK);
    check_shape(find(s, "arr_0"), QC_F32, 1, (uint64_t[]){ 4 });
    const qc_tensor *t = find(s, "arr_1");
    check_shape(t, QC_F64, 2, (uint64_t[]){ 2, 3 });
    assert_int_equal(t->stride[0], 1);
    assert_int_equal(t->stride[1], 2);
    qc_source_free(s);
}

/* ---- sharded-checkpoint index ----------------------------------------------------------------- */

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[TU_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tu_write_file(path, text, strlen(text));
}

static void write_st_shard(const char *dir, const char *name, const char *json, size_t dlen)
{
    fill_pattern();
    bytes b = st_file(json, g_pattern, dlen);
    char path[TU_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tu_write_file(path, b.p, b.n);
    free(b.p);
}

/* Open the index's shards and run qc_index_check. */
static qm_status check_index(const char *dir, const char *index_json, qm_error *err, qc_index **keep)
{
    write_text(dir, "model.safetensors.index.json", index_json);
    char path[TU_PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    qc_index *ix;
    qm_status st = qc_index_read(path, 0, &ix, err);
    if (st != QM_OK) return st;
    qc_source *src[8] = { 0 };
    assert_true(ix->n_shards <= 8);
    for (size_t i = 0; i < ix->n_shards; i++) {
        qm_error e2;
        if (qc_open_file(QC_INPUT_SAFETENSORS, ix->shards[i], &src[i], &e2) != QM_OK) fail_msg("%s", e2.message);
    }
    st = qc_index_check(ix, src, ix->n_shards, err);
    for (size_t i = 0; i < ix->n_shards; i++) qc_source_free(src[i]);
    if (keep) *keep = ix;
    else qc_index_free(ix);
    return st;
}

static void test_index(void **state)
{
    (void)state;
    char dir[TU_PATH_MAX];
    tu_mkdir(dir, "sharded");
    write_st_shard(dir, "m-1.safetensors",
                   "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
    write_st_shard(dir, "m-2.safetensors", "{\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    qm_error err;
    qc_index *ix;
    assert_int_equal(check_index(dir,
                                 "{\"metadata\": {\"total_size\": 12}, \"weight_map\": {\"c\": \"m-2.safetensors\","
                                 " \"a\": \"m-1.safetensors\", \"b\": \"m-1.safetensors\"}}",
                                 &err, &ix),
                     QM_OK);
    assert_int_equal(ix->n_shards, 2);
    assert_true(tu_contains(ix->shards[0], "/sharded/m-2.safetensors"));
    assert_string_equal(ix->shard_names[1], "m-1.safetensors");
    assert_int_equal(ix->n_entries, 3);
    assert_string_equal(ix->entries[0].tensor, "c");
    assert_int_equal(ix->entries[2].shard, 1);
    assert_string_equal(ix->metadata_json, "{\"total_size\":12}");
    qc_index_free(ix);

    /* shard names must be plain file names */
    assert_int_equal(check_index(dir, "{\"weight_map\": {\"a\": \"sub/m-1.safetensors\"}}", &err, NULL),
                     QM_ERR_BAD_SOURCE);
    assert_true(tu_contains(err.message, "plain file name"));
    assert_int_equal(check_index(dir, "{\"weight_map\": {\"a\": \"..\"}}", &err, NULL), QM_ERR_BAD_SOURCE);
    assert_int_equal(check_index(dir, "{\"weight_map\": {\"a\": \"\"}}", &err, NULL), QM_ERR_BAD_SOURCE);
    assert_int_equal(check_index(dir, "{\"weight_map\": {\"a\": 3}}", &err, NULL), QM_ERR_BAD_SOURCE);
    assert_int_equal(check_index(dir, "{\"weight_map\": []}", &err, NULL), QM_ERR_BAD_SOURCE);
    assert_int_equal(check_index(dir, "{\"metadata\": {}}", &err, NULL), QM_ERR_BAD_SOURCE);
    assert_true(tu_contains(err.message, "weight_map"));
    assert_int_equal(check_index(dir, "{\"weight_map\": {\"a\": \"x\", \"a\": \"y\"}}", &err, NULL),
                     QM_ERR_BAD_SOURCE);
    assert_int_equal(check_index(dir, "{\"weight_map\": {", &err, NULL), QM_ERR_BAD_SOURCE);

    /* a weight_map tensor missing from its shard */
    assert_int_equal(check_index(dir,
                                 "{\"weight_map\": {\"a\": \"m-1.safetensors\", \"b\": \"m-1.safetensors\","
                                 " \"c\": \"m-2.safetensors\", \"d\": \"m-2.safetensors\"}}",
                                 &err, NULL),
                     QM_ERR_BAD_SOURCE);
    assert_true(tu_contains(err.message, "'d'") && tu_contains(err.message, "missing"));
    /* a shard tensor the weight_map does not list */
    assert_int_equal(check_index(dir,
                                 "{\"weight_map\": {\"a\": \"m-1.safetensors\", \"c\": \"m-2.safetensors\"}}",
                                 &err, NULL),
                     QM_ERR_BAD_SOURCE);
    assert_true(tu_contains(err.message, "'b'") && tu_contains(err.message, "does not list"));
    /* listed under the other shard */
    assert_int_equal(check_index(dir,
                                 "{\"weight_map\": {\"a\": \"m-1.safetensors\", \"b\": \"m-2.safetensors\","
                                 " \"c\": \"m-2.safetensors\"}}",
                                 &err, NULL),
                     QM_ERR_BAD_SOURCE);
    assert_true(tu_contains(err.message, "'b'") && tu_contains(err.message, "m-2.safetensors"));

    qc_index *none;
    assert_int_equal(qc_index_read("tests/no/such/index.json", 0, &none, &err), QM_ERR_IO);
    assert_null(none);
}

/* ---- the importer table: qc_open_input sniffs once and reads with the row the bytes name ---- */

/* Open `path` through the table; the row it chose, or UNKNOWN. */
static qc_input_kind open_kind(const char *path, qm_status want, const char *needle)
{
    qc_source *s = NULL;
    qc_index *ix = NULL;
    const qc_importer *imp = NULL;
    qm_error err = { 0 };
    qm_status st = qc_open_input(path, 0, &s, &ix, &imp, &err);
    if (st != want || (needle && !tu_contains(err.message, needle)))
        fail_msg("%s: expected %s mentioning '%s'; got %s: %s", path, qm_status_name(want), needle ? needle : "",
                 qm_status_name(st), err.message);
    if (st == QM_OK) {
        assert_true((s != NULL) != (ix != NULL));       /* a source or an index, never both */
        if (s) assert_string_equal(s->kind, imp->name);
        if (s) assert_int_equal(s->input, imp->kind);
    }
    qc_source_free(s);
    qc_index_free(ix);
    return imp ? imp->kind : QC_INPUT_UNKNOWN;
}

static void write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
}

static void test_input_table(void **state)
{
    (void)state;
    assert_int_equal(open_kind(SEEDS "/safetensors/model.safetensors", QM_OK, NULL), QC_INPUT_SAFETENSORS);
    assert_int_equal(open_kind(SEEDS "/torchzip/linear.pt", QM_OK, NULL), QC_INPUT_TORCH_ZIP);
    assert_int_equal(open_kind(SEEDS "/npz/stored.npz", QM_OK, NULL), QC_INPUT_NPZ);
    assert_int_equal(open_kind(SEEDS "/npy/f4_fortran_2x3.npy", QM_OK, NULL), QC_INPUT_NPY);
    assert_int_equal(open_kind(SEEDS "/index/model.safetensors.index.json", QM_OK, NULL), QC_INPUT_SHARD_INDEX);
    /* recognised to be refused with the remedy or the reason */
    assert_int_equal(open_kind(SEEDS "/torchzip/legacy.pt", QM_ERR_UNSUPPORTED, "torch >= 1.6"), QC_INPUT_LEGACY_TORCH);
    char dir[] = "/tmp/qmap-input-table-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    static const uint8_t empty_zip[22] = { 'P', 'K', 5, 6 };   /* an end-of-central-directory record only */
    snprintf(path, sizeof path, "%s/empty.zip", dir);
    write_bytes(path, empty_zip, sizeof empty_zip);
    assert_int_equal(open_kind(path, QM_ERR_BAD_SOURCE, "neither a torch.save file"), QC_INPUT_ZIP_OTHER);
    unlink(path);
    /* unknown bytes: the message lists every format the table reads */
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    write_bytes(path, "plain words, no magic", 21);
    assert_int_equal(open_kind(path, QM_ERR_BAD_SOURCE, "safetensors"), QC_INPUT_UNKNOWN);
    assert_int_equal(open_kind(path, QM_ERR_BAD_SOURCE, "numpy .npz"), QC_INPUT_UNKNOWN);
    unlink(path);
    /* a FIFO is refused before a byte is read (the open would block); a directory needs manifest.json */
    snprintf(path, sizeof path, "%s/fifo", dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(open_kind(path, QM_ERR_IO, "not a regular file"), QC_INPUT_UNKNOWN);
    unlink(path);
    assert_int_equal(open_kind(dir, QM_ERR_BAD_SOURCE, "manifest.json"), QC_INPUT_UNKNOWN);
    assert_int_equal(open_kind("tests/no/such/file", QM_ERR_IO, NULL), QC_INPUT_UNKNOWN);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_st_all_dtypes),
        cmocka_unit_test(test_st_padding_and_metadata),
        cmocka_unit_test(test_st_seed_files),
        cmocka_unit_test(test_st_header_length),
        cmocka_unit_test(test_st_bad_json),
        cmocka_unit_test(test_st_bad_fields),
        cmocka_unit_test(test_st_bad_layout),
        cmocka_unit_test(test_npy_dtypes_and_ranks),
        cmocka_unit_test(test_npy_dict_syntax),
        cmocka_unit_test(test_npy_seed_files),
        cmocka_unit_test(test_npy_fortran),
        cmocka_unit_test(test_npy_refusals),
        cmocka_unit_test(test_npz_libzip),
        cmocka_unit_test(test_npz_refusals),
        cmocka_unit_test(test_npz_corrupt_data),
        cmocka_unit_test(test_npz_seed_files),
        cmocka_unit_test(test_index),
        cmocka_unit_test(test_input_table),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
