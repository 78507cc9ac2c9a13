/* write_fixture.c — write a .qmap container through the public writer API only (format/qm_writer.h),
 * plus the expected contents, for tests/test_spec_reader.py to check with the independent reader.
 *
 *   write_fixture OUT.qmap EXPECTDIR [ALIGNMENT]
 *
 * EXPECTDIR/tensors/<i>.bin      exact bytes of tensor i's data
 * EXPECTDIR/tensors/<i>.src.bin  for Q8_ROW tensors: the f32 values they were quantized from (spec 6.1)
 * EXPECTDIR/expect.json          {"alignment", "metadata": [...], "tensors": [...]}; metadata values:
 *     integers as JSON numbers, BOOL as true/false, F32/F64 as "bits" (hex of the bit pattern),
 *     strings as "hex" (hex of the UTF-8 bytes); keys as "key" (JSON string) and "key_hex".
 * Everything is deterministic (splitmix64), so two runs give identical files.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "qm_error.h"
#include "qm_format.h"
#include "qm_writer.h"

/* ------------------------------------------------------------------------------------ utilities */

static uint64_t rng_state = 0x5EED0F1A2B3C4D5Eull;

static uint64_t splitmix64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [-scale, scale). */
static float rand_float(float scale) {
    double u = (double)(splitmix64() >> 40) / (double)(1u << 24);
    return (float)((u * 2.0 - 1.0) * scale);
}

static void die(const char *what, const qm_error *err) {
    fprintf(stderr, "write_fixture: %s: %s (%s)\n", what, err ? err->message : "",
            err ? qm_status_name(err->code) : "");
    exit(1);
}

static void *xmalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "write_fixture: out of memory\n");
        exit(1);
    }
    return p;
}

static void mkdir_p(const char *path) {
    if (mkdir(path, 0777) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
}

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static uint32_t f32_bits(float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    return b;
}
static float bits_f32(uint32_t b) {
    float v;
    memcpy(&v, &b, 4);
    return v;
}
static uint64_t f64_bits(double v) {
    uint64_t b;
    memcpy(&b, &v, 8);
    return b;
}
static double bits_f64(uint64_t b) {
    double v;
    memcpy(&v, &b, 8);
    return v;
}

/* ------------------------------------------------------------------------------------ expect.json */

static FILE *J;          /* expect.json */
static int j_first_meta = 1;

static void j_hex(const void *p, size_t n) {
    const unsigned char *b = p;
    fputc('"', J);
    for (size_t i = 0; i < n; i++) fprintf(J, "%02x", b[i]);
    fputc('"', J);
}

static void j_str(const char *s, size_t n) {
    fputc('"', J);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(J, "\\%c", c);
        else if (c < 0x20) fprintf(J, "\\u%04x", c);
        else fputc(c, J);
    }
    fputc('"', J);
}

static void j_meta_begin(const char *key, const char *type) {
    fprintf(J, "%s\n    {\"key\": ", j_first_meta ? "" : ",");
    j_first_meta = 0;
    j_str(key, strlen(key));
    fprintf(J, ", \"key_hex\": ");
    j_hex(key, strlen(key));
    fprintf(J, ", \"type\": \"%s\"", type);
}

/* ------------------------------------------------------------------------------------ metadata */

static qm_writer *W;
static qm_error E;

static void m_u32(const char *k, uint32_t v) {
    if (qm_writer_meta_u32(W, k, v, &E)) die(k, &E);
    j_meta_begin(k, "U32");
    fprintf(J, ", \"value\": %" PRIu32 "}", v);
}
static void m_i32(const char *k, int32_t v) {
    if (qm_writer_meta_i32(W, k, v, &E)) die(k, &E);
    j_meta_begin(k, "I32");
    fprintf(J, ", \"value\": %" PRId32 "}", v);
}
static void m_u64(const char *k, uint64_t v) {
    if (qm_writer_meta_u64(W, k, v, &E)) die(k, &E);
    j_meta_begin(k, "U64");
    fprintf(J, ", \"value\": %" PRIu64 "}", v);
}
static void m_i64(const char *k, int64_t v) {
    if (qm_writer_meta_i64(W, k, v, &E)) die(k, &E);
    j_meta_begin(k, "I64");
    fprintf(J, ", \"value\": %" PRId64 "}", v);
}
static void m_f32(const char *k, uint32_t bits) {
    if (qm_writer_meta_f32(W, k, bits_f32(bits), &E)) die(k, &E);
    j_meta_begin(k, "F32");
    fprintf(J, ", \"bits\": \"0x%08" PRIx32 "\"}", bits);
}
static void m_f64(const char *k, uint64_t bits) {
    if (qm_writer_meta_f64(W, k, bits_f64(bits), &E)) die(k, &E);
    j_meta_begin(k, "F64");
    fprintf(J, ", \"bits\": \"0x%016" PRIx64 "\"}", bits);
}
static void m_bool(const char *k, bool v) {
    if (qm_writer_meta_bool(W, k, v, &E)) die(k, &E);
    j_meta_begin(k, "BOOL");
    fprintf(J, ", \"value\": %s}", v ? "true" : "false");
}
static void m_string(const char *k, const char *s, size_t n) {
    if (qm_writer_meta_string(W, k, s, n, &E)) die(k, &E);
    j_meta_begin(k, "STRING");
    fprintf(J, ", \"hex\": ");
    j_hex(s, n);
    fputc('}', J);
}
static void m_string_array(const char *k, const char *const *strs, const size_t *lens, uint64_t n) {
    if (qm_writer_meta_string_array(W, k, strs, lens, n, &E)) die(k, &E);
    j_meta_begin(k, "ARRAY[STRING]");
    fprintf(J, ", \"hex\": [");
    for (uint64_t i = 0; i < n; i++) {
        if (i) fputc(',', J);
        if (i % 16 == 0) fputc('\n', J);
        j_hex(strs[i], lens ? lens[i] : strlen(strs[i]));
    }
    fprintf(J, "]}");
}

static void m_array(const char *k, uint32_t elem, const void *values, uint64_t n) {
    static const char *names[] = {"", "U32", "I32", "U64", "I64", "F32", "F64", "BOOL"};
    char type[32];
    if (qm_writer_meta_array(W, k, elem, values, n, &E)) die(k, &E);
    snprintf(type, sizeof type, "ARRAY[%s]", names[elem]);
    j_meta_begin(k, type);
    fprintf(J, elem == QM_META_F32 || elem == QM_META_F64 ? ", \"bits\": [" : ", \"values\": [");
    for (uint64_t i = 0; i < n; i++) {
        if (i) fputc(',', J);
        if (i % 16 == 0) fputc('\n', J);
        switch (elem) {
        case QM_META_U32: fprintf(J, "%" PRIu32, ((const uint32_t *)values)[i]); break;
        case QM_META_I32: fprintf(J, "%" PRId32, ((const int32_t *)values)[i]); break;
        case QM_META_U64: fprintf(J, "%" PRIu64, ((const uint64_t *)values)[i]); break;
        case QM_META_I64: fprintf(J, "%" PRId64, ((const int64_t *)values)[i]); break;
        case QM_META_F32: fprintf(J, "\"0x%08" PRIx32 "\"", f32_bits(((const float *)values)[i])); break;
        case QM_META_F64: fprintf(J, "\"0x%016" PRIx64 "\"", f64_bits(((const double *)values)[i])); break;
        case QM_META_BOOL: fprintf(J, "%s", ((const bool *)values)[i] ? "true" : "false"); break;
        default: break;
        }
    }
    fprintf(J, "]}");
}

static void write_metadata(void) {
    m_string("general.architecture", "fixture", 7);
    m_string("general.name", "write_fixture", 13);
    m_u32("fixture.u32", 0xDEADBEEFu);
    m_u32("fixture.u32.zero", 0);
    m_i32("fixture.i32", -123456789);
    m_i32("fixture.i32.min", INT32_MIN);
    m_u64("fixture.u64.max", UINT64_MAX);
    m_u64("fixture.u64", 0x0123456789ABCDEFull);
    m_i64("fixture.i64.min", INT64_MIN);
    m_i64("fixture.i64", -42);
    m_f32("fixture.f32.pi", f32_bits(3.14159265f));
    m_f32("fixture.f32.nan_payload", 0x7FC12345u);
    m_f32("fixture.f32.neg_zero", 0x80000000u);
    m_f32("fixture.f32.neg_inf", 0xFF800000u);
    m_f32("fixture.f32.denormal", 0x00000003u);
    m_f64("fixture.f64.e", f64_bits(2.718281828459045));
    m_f64("fixture.f64.nan_payload", 0xFFF800000000BEEFull);
    m_f64("fixture.f64.max", 0x7FEFFFFFFFFFFFFFull);
    m_bool("fixture.bool.true", true);
    m_bool("fixture.bool.false", false);
    m_string("fixture.str.empty", "", 0);
    m_string("fixture.str.nul", "a\0b\0c", 5);
    m_string("fixture.str.utf8", "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82 \xf4\x8f\xbf\xbf",
             strlen("h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x99\x82 \xf4\x8f\xbf\xbf"));
    m_string("fixture.str.quote", "say \"hi\"\\\n\t", 11);
    m_u32("fixture.\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87", 7); /* non-ASCII key */
    {
        char key[257];
        memset(key, 'k', 256);
        key[256] = 0;
        m_u32(key, 256); /* longest key */
    }

    /* numeric arrays of every element type */
    {
        uint32_t u32[37];
        int32_t i32[5] = {0, -1, INT32_MAX, INT32_MIN, 12345};
        uint64_t u64[4] = {0, 1, UINT64_MAX, 0x8000000000000000ull};
        int64_t i64[3] = {INT64_MIN, INT64_MAX, -7};
        float f32[6] = {1.5f, -0.0f, bits_f32(0x7FC00001u), bits_f32(0x7F800000u), bits_f32(1u), 0};
        double f64[4] = {1e300, -2.5, bits_f64(0x7FF0000000000001ull), bits_f64(0x8000000000000000ull)};
        bool bo[5] = {true, false, false, true, true};
        uint32_t dummy = 0;
        for (int i = 0; i < 37; i++) u32[i] = (uint32_t)splitmix64();
        f32[5] = rand_float(1000.0f);
        m_array("fixture.arr.u32", QM_META_U32, u32, 37);
        m_array("fixture.arr.i32", QM_META_I32, i32, 5);
        m_array("fixture.arr.u64", QM_META_U64, u64, 4);
        m_array("fixture.arr.i64", QM_META_I64, i64, 3);
        m_array("fixture.arr.f32", QM_META_F32, f32, 6);
        m_array("fixture.arr.f64", QM_META_F64, f64, 4);
        m_array("fixture.arr.bool", QM_META_BOOL, bo, 5);
        m_array("fixture.arr.u32.empty", QM_META_U32, &dummy, 0);
        m_array("fixture.arr.f64.empty", QM_META_F64, &dummy, 0);
    }

    /* string arrays: empty, small (with NUL and empty elements, explicit lengths), NUL-terminated, large */
    {
        const char *none[1] = {""};
        const char *small[4] = {"", "x\0y", "\xc3\xa9t\xc3\xa9", "\xf0\x9f\x99\x82"};
        size_t small_len[4] = {0, 3, 6, 4};
        const char *cstr[3] = {"alpha", "beta", "gamma"};
        m_string_array("fixture.arr.str.empty", none, small_len, 0);
        m_string_array("fixture.arr.str.small", small, small_len, 4);
        m_string_array("fixture.arr.str.cstr", cstr, NULL, 3);
    }
    {
        const uint64_t n = 200000;
        char *pool = xmalloc((size_t)n * 24);
        const char **strs = xmalloc((size_t)n * sizeof *strs);
        size_t *lens = xmalloc((size_t)n * sizeof *lens);
        size_t pos = 0;
        for (uint64_t i = 0; i < n; i++) {
            int len;
            if (i % 1000 == 999) len = 0;
            else if (i % 13 == 0) len = snprintf(pool + pos, 24, "\xf0\x9f\x99\x82%" PRIu64, i);
            else if (i % 7 == 0) len = snprintf(pool + pos, 24, "\xc3\xa9tok%" PRIu64, i);
            else len = snprintf(pool + pos, 24, "tok%" PRIu64, i);
            strs[i] = pool + pos;
            lens[i] = (size_t)len;
            pos += (size_t)len + 1;
        }
        m_string_array("tokenizer.tokens", strs, lens, n);
        free(pool);
        free(strs);
        free(lens);
    }
}

/* ------------------------------------------------------------------------------------ tensors */

typedef struct {
    const char *name;
    uint32_t dtype;
    uint32_t rank;
    uint64_t dims[4];
    unsigned char *data;
    uint64_t size;
    float *src;          /* Q8_ROW: source values (rows*cols) */
    uint64_t n_src;
} fixture_tensor;

/* Spec 6.1 quantization of one row, binary32 arithmetic, round half to even (rintf, default mode). */
static int32_t quantize_row(const float *w, uint64_t cols, int8_t *q, float *scale_out) {
    float amax = 0.0f;
    int32_t sum = 0;
    for (uint64_t j = 0; j < cols; j++) {
        float a = fabsf(w[j]);
        if (a > amax) amax = a;
    }
    if (amax == 0.0f) {
        *scale_out = 0.0f;
        memset(q, 0, (size_t)cols);
        return 0;
    }
    float scale = amax / 127.0f; /* binary32 division */
    for (uint64_t j = 0; j < cols; j++) {
        float x = w[j] / scale;
        float r = rintf(x);
        if (r > 127.0f) r = 127.0f;
        if (r < -127.0f) r = -127.0f;
        q[j] = (int8_t)r;
        sum += q[j];
    }
    *scale_out = scale;
    return sum;
}

static void make_q8(fixture_tensor *t, uint64_t alignment, int zero_row, int tie_row, int wide_row) {
    qm_q8row_layout L;
    qm_status st = qm_q8row_layout_of(t->rank, t->dims, alignment, &L);
    if (st) {
        fprintf(stderr, "write_fixture: qm_q8row_layout_of(%s): %s\n", t->name, qm_status_name(st));
        exit(1);
    }
    t->n_src = L.rows * L.cols;
    t->src = xmalloc((size_t)t->n_src * sizeof(float));
    for (uint64_t i = 0; i < t->n_src; i++) t->src[i] = rand_float(2.0f);
    if (zero_row >= 0 && (uint64_t)zero_row < L.rows)
        for (uint64_t j = 0; j < L.cols; j++) t->src[zero_row * L.cols + j] = 0.0f;
    if (tie_row >= 0 && (uint64_t)tie_row < L.rows) {
        /* amax 127 -> scale exactly 1: the .5 values exercise round-half-even */
        static const float ties[] = {127.0f, 63.5f, -63.5f, 0.5f, 1.5f, 2.5f, -2.5f, -0.5f, 126.5f, -127.0f};
        for (uint64_t j = 0; j < L.cols; j++)
            t->src[tie_row * L.cols + j] = j < sizeof ties / sizeof ties[0] ? ties[j] : 0.0f;
    }
    if (wide_row >= 0 && (uint64_t)wide_row < L.rows) {
        for (uint64_t j = 0; j < L.cols; j++)
            t->src[wide_row * L.cols + j] = (j % 3 == 0) ? rand_float(3.0e38f) : rand_float(1.0e-30f);
    }
    t->size = L.size;
    t->data = xmalloc((size_t)L.size);
    int8_t *q = xmalloc((size_t)L.cols);
    for (uint64_t r = 0; r < L.rows; r++) {
        float scale;
        int32_t sum = quantize_row(t->src + r * L.cols, L.cols, q, &scale);
        memcpy(t->data + r * L.row_stride, q, (size_t)L.cols);
        memcpy(t->data + L.scales_offset + 4 * r, &scale, 4); /* little-endian host assumed (x86-64) */
        memcpy(t->data + L.sums_offset + 4 * r, &sum, 4);
    }
    free(q);
}

static void make_plain(fixture_tensor *t) {
    uint64_t n = 1;
    for (uint32_t i = 0; i < t->rank; i++) n *= t->dims[i];
    uint32_t es = t->dtype == QM_DTYPE_F16 || t->dtype == QM_DTYPE_BF16 ? 2 : 4;
    t->size = n * es;
    t->data = xmalloc((size_t)t->size);
    for (uint64_t i = 0; i < n; i++) {
        unsigned char *p = t->data + i * es;
        if (t->dtype == QM_DTYPE_F32) {
            float v = rand_float(8.0f);
            memcpy(p, &v, 4);
        } else if (t->dtype == QM_DTYPE_I32) {
            uint32_t v = (uint32_t)splitmix64();
            memcpy(p, &v, 4);
        } else if (t->dtype == QM_DTYPE_BF16) {
            uint16_t v = (uint16_t)(f32_bits(rand_float(5.0f)) >> 16);
            memcpy(p, &v, 2);
        } else { /* F16: any finite half: sign, exponent 0..30, mantissa */
            uint16_t v = (uint16_t)splitmix64();
            if (((v >> 10) & 0x1F) == 0x1F) v &= 0xBFFF;
            memcpy(p, &v, 2);
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: write_fixture OUT.qmap EXPECTDIR [ALIGNMENT]\n");
        return 2;
    }
    uint64_t alignment = argc == 4 ? strtoull(argv[3], NULL, 0) : QM_DEFAULT_ALIGNMENT;
    const char *out = argv[1], *dir = argv[2];
    char path[4096];

    mkdir_p(dir);
    snprintf(path, sizeof path, "%s/tensors", dir);
    mkdir_p(path);
    snprintf(path, sizeof path, "%s/expect.json", dir);
    J = fopen(path, "w");
    if (!J) {
        perror(path);
        return 1;
    }

    qm_writer_opts opts = {alignment};
    qm_error_clear(&E);
    if (qm_writer_create(out, &opts, &W, &E)) die("qm_writer_create", &E);

    fprintf(J, "{\n  \"alignment\": %" PRIu64 ",\n  \"metadata\": [", alignment);
    write_metadata();
    fprintf(J, "\n  ],\n  \"tensors\": [");

    fixture_tensor T[] = {
        {"f32.r1", QM_DTYPE_F32, 1, {1000}, 0, 0, 0, 0},
        {"f32.r2", QM_DTYPE_F32, 2, {17, 33}, 0, 0, 0, 0},
        {"f32.r3", QM_DTYPE_F32, 3, {3, 4, 5}, 0, 0, 0, 0},
        {"f32.r4", QM_DTYPE_F32, 4, {2, 3, 4, 5}, 0, 0, 0, 0},
        {"f16.r2", QM_DTYPE_F16, 2, {31, 7}, 0, 0, 0, 0},
        {"f16.r1", QM_DTYPE_F16, 1, {1}, 0, 0, 0, 0},
        {"bf16.r3", QM_DTYPE_BF16, 3, {4, 5, 6}, 0, 0, 0, 0},
        {"bf16.r4", QM_DTYPE_BF16, 4, {1, 2, 1, 3}, 0, 0, 0, 0},
        {"i32.r1", QM_DTYPE_I32, 1, {77}, 0, 0, 0, 0},
        {"i32.r4", QM_DTYPE_I32, 4, {2, 2, 2, 2}, 0, 0, 0, 0},
        {"q8.r2", QM_DTYPE_Q8_ROW, 2, {7, 100}, 0, 0, 0, 0},
        {"q8.r1", QM_DTYPE_Q8_ROW, 1, {200}, 0, 0, 0, 0},
        {"q8.r3", QM_DTYPE_Q8_ROW, 3, {2, 3, 130}, 0, 0, 0, 0},
        {"q8.r4", QM_DTYPE_Q8_ROW, 4, {2, 2, 2, 64}, 0, 0, 0, 0},
        {"q8.r2.narrow", QM_DTYPE_Q8_ROW, 2, {3, 1}, 0, 0, 0, 0},
        {"\xc3\xbcnicode.\xe5\x90\x8d", QM_DTYPE_F32, 1, {3}, 0, 0, 0, 0},
    };
    const size_t nt = sizeof T / sizeof T[0];
    for (size_t i = 0; i < nt; i++) {
        fixture_tensor *t = &T[i];
        if (t->dtype == QM_DTYPE_Q8_ROW)
            make_q8(t, alignment, i == 10 ? 3 : i == 12 ? 0 : -1, i == 10 ? 5 : -1, i == 10 ? 6 : -1);
        else
            make_plain(t);
        if (qm_writer_add_tensor(W, t->name, t->dtype, t->rank, t->dims, &E)) die(t->name, &E);

        snprintf(path, sizeof path, "%s/tensors/%zu.bin", dir, i);
        write_file(path, t->data, (size_t)t->size);
        if (t->src) {
            snprintf(path, sizeof path, "%s/tensors/%zu.src.bin", dir, i);
            write_file(path, t->src, (size_t)t->n_src * sizeof(float));
        }
        fprintf(J, "%s\n    {\"index\": %zu, \"name\": ", i ? "," : "", i);
        j_str(t->name, strlen(t->name));
        fprintf(J, ", \"name_hex\": ");
        j_hex(t->name, strlen(t->name));
        fprintf(J, ", \"dtype\": \"%s\", \"shape\": [", qm_dtype_info(t->dtype)->name);
        for (uint32_t k = 0; k < t->rank; k++) fprintf(J, "%s%" PRIu64, k ? ", " : "", t->dims[k]);
        fprintf(J, "], \"size\": %" PRIu64 ", \"file\": \"tensors/%zu.bin\"", t->size, i);
        if (t->src) fprintf(J, ", \"source\": \"tensors/%zu.src.bin\"", i);
        fputc('}', J);
    }
    fprintf(J, "\n  ]\n}\n");
    if (fclose(J) != 0) {
        perror("expect.json");
        return 1;
    }

    /* Stream the data. Plain tensors go through a staging buffer flushed in 4099-byte chunks, so
     * writes span tensor boundaries; Q8_ROW tensors are written piecewise with write_zeros for their
     * padding. */
    unsigned char *stage = xmalloc(1 << 20);
    size_t staged = 0;
    for (size_t i = 0; i < nt; i++) {
        fixture_tensor *t = &T[i];
        if (t->dtype != QM_DTYPE_Q8_ROW) {
            memcpy(stage + staged, t->data, (size_t)t->size);
            staged += (size_t)t->size;
            continue;
        }
        for (size_t off = 0; off < staged; off += 4099) {
            size_t n = staged - off < 4099 ? staged - off : 4099;
            if (qm_writer_write(W, stage + off, n, &E)) die("qm_writer_write", &E);
        }
        staged = 0;
        qm_q8row_layout L;
        if (qm_q8row_layout_of(t->rank, t->dims, alignment, &L)) die("layout", NULL);
        for (uint64_t r = 0; r < L.rows; r++) {
            if (qm_writer_write(W, t->data + r * L.row_stride, (size_t)L.cols, &E)) die("q row", &E);
            if (qm_writer_write_zeros(W, L.row_stride - L.cols, &E)) die("q pad", &E);
        }
        if (qm_writer_write_zeros(W, L.scales_offset - L.rows * L.row_stride, &E)) die("q-scales gap", &E);
        if (qm_writer_write(W, t->data + L.scales_offset, (size_t)(4 * L.rows), &E)) die("scales", &E);
        if (qm_writer_write_zeros(W, L.sums_offset - L.scales_offset - 4 * L.rows, &E)) die("gap", &E);
        if (qm_writer_write(W, t->data + L.sums_offset, (size_t)(4 * L.rows), &E)) die("sums", &E);
    }
    for (size_t off = 0; off < staged; off += 4099) {
        size_t n = staged - off < 4099 ? staged - off : 4099;
        if (qm_writer_write(W, stage + off, n, &E)) die("qm_writer_write", &E);
    }
    if (qm_writer_finish(W, &E)) die("qm_writer_finish", &E);

    free(stage);
    for (size_t i = 0; i < nt; i++) {
        free(T[i].data);
        free(T[i].src);
    }
    return 0;
}
