/* fuzz_reader.c — libFuzzer target for the .qmap reader (qm_open_buffer and every accessor).
 *
 * What must hold, for ANY input bytes:
 *   - The reader never crashes, never reads outside the buffer and never leaks (ASan/UBSan/LSan check
 *     this: the input is copied into a malloc'd block of exactly `size` bytes, so a one-byte overread is
 *     reported).
 *   - Every failure is a known qm_status (qm_status_name() is not "QM_ERR_UNKNOWN", the code is not QM_OK),
 *     err->code equals the returned code, and err->message is a non-empty NUL-terminated string.
 *   - A file that opens passes its own accessors: the header agrees with the buffer and the spec's layout
 *     rules; every tensor returned by qm_tensor_at() is found again (same pointer) by qm_find_tensor() on
 *     its name, has a shape/dtype/size/offset the spec allows, and its first and last data byte lie inside
 *     the buffer; every metadata entry is found again by qm_find_meta(), its typed getters agree with the
 *     entry, and every array element (capped, see MAX_ARRAY_WALK) can be fetched; qm_verify() (full, one
 *     thread) returns a verification code and a per-tensor status array consistent with its report and
 *     with qm_tensor_verify().
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 * Besides the input itself, the same checks run on the input with its header checksum repaired (and, if
 * it then opens, with its tensor checksums repaired): otherwise nearly every mutation stops at R-HDR-9
 * and the metadata/table parser and R-DATA-2 would hardly be fuzzed.
 *
 * Build (fuzzer): the library sources must be compiled with the same sanitizers and with coverage
 * (-fsanitize=fuzzer-no-link), or ASan cannot see the library's reads and libFuzzer has no guidance:
 * each format/ source with `clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link` (plus its ISA flags), then
 *   clang -std=c11 -D_DEFAULT_SOURCE -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
 *         -fopenmp -Iformat tests/fuzz/fuzz_reader.c <those objects> -lxxhash -lm     (make build/fuzz/fuzz_reader)
 * Build (replay, no libFuzzer): add tests/fuzz/replay_main.c, drop "fuzzer," (or use plain gcc).
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qm_error.h"
#include "qm_format.h"
#include "qm_reader.h"

/* Arrays are walked up to this many elements from the front, plus their last element, to keep runs fast. */
#define MAX_ARRAY_WALK 4096u

#define FUZZ_TARGET "fuzz_reader"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t g_sink; /* keeps the touched bytes from being optimised away */

static void touch(const void *p, uint64_t len)
{
    if (len == 0)
        return;
    const volatile uint8_t *b = (const volatile uint8_t *)p;
    g_sink ^= b[0];
    g_sink ^= b[len - 1];
}

static bool in_buffer(const uint8_t *buf, size_t size, const void *p, uint64_t len)
{
    const uint8_t *q = (const uint8_t *)p;
    if (q < buf || q > buf + size)
        return false;
    return len <= (uint64_t)(buf + size - q);
}

/* A failure report must be a known, non-OK status with a non-empty, terminated message. */
static void check_call_failure(qm_status st, const qm_error *err, const char *call)
{
    if (st == QM_OK)
        die("failure reported as QM_OK", call);
    const char *name = qm_status_name(st);
    if (name == NULL || strcmp(name, "QM_ERR_UNKNOWN") == 0)
        die("unknown status code", call);
    if (qm_status_string(st) == NULL)
        die("qm_status_string returned NULL", call);
    if (err != NULL) {
        if (err->code != st)
            die("err->code differs from the returned status", call);
        if (memchr(err->message, '\0', sizeof err->message) == NULL)
            die("err->message is not NUL-terminated", call);
        if (err->message[0] == '\0')
            die("empty error message", call);
        if (memchr(err->field, '\0', sizeof err->field) == NULL)
            die("err->field is not NUL-terminated", call);
    }
}

static void check_header(const qm_file *f, const uint8_t *buf, size_t size)
{
    const qm_header_info *h = qm_file_header(f);
    CHECK(h != NULL, "qm_file_header");
    CHECK(qm_file_bytes(f) == buf, "qm_file_bytes must be the caller's buffer (not copied)");
    CHECK(h->major_version == QM_MAJOR_VERSION, "header.major_version");
    CHECK(qm_alignment_valid(h->alignment), "header.alignment");
    CHECK(size >= QM_HEADER_SIZE, "an opened file holds a whole header");
    CHECK(h->file_size == size, "header.file_size == buffer size");
    CHECK(h->metadata_offset == QM_HEADER_SIZE, "header.metadata_offset");
    CHECK(h->metadata_count <= QM_MAX_COUNT, "header.metadata_count cap");
    CHECK(h->tensor_count <= QM_MAX_COUNT, "header.tensor_count cap");
    CHECK(h->metadata_size <= size - QM_HEADER_SIZE, "metadata section inside the file");
    CHECK(h->table_offset == h->metadata_offset + h->metadata_size, "header.table_offset");
    CHECK(h->table_size <= size - h->table_offset, "tensor table inside the file");
    CHECK(h->data_offset >= h->table_offset + h->table_size, "header.data_offset after the table");
    CHECK(h->data_offset - (h->table_offset + h->table_size) < h->alignment, "header.data_offset padding");
    CHECK(h->data_offset % h->alignment == 0, "header.data_offset aligned");
    CHECK(h->data_offset <= size, "header.data_offset inside the file");
    CHECK(qm_meta_count(f) == h->metadata_count, "qm_meta_count == header.metadata_count");
    CHECK(qm_tensor_count(f) == h->tensor_count, "qm_tensor_count == header.tensor_count");
    (void)qm_file_path(f);
}

static void check_tensors(const qm_file *f, const uint8_t *buf, size_t size)
{
    const qm_header_info *h = qm_file_header(f);
    uint64_t n = qm_tensor_count(f);
    uint64_t prev_end = h->data_offset;
    for (uint64_t i = 0; i < n; i++) {
        const qm_tensor *t = qm_tensor_at(f, i);
        CHECK(t != NULL, "qm_tensor_at(i < count)");
        CHECK(t->name != NULL, "tensor.name");
        CHECK(t->name_len >= 1 && t->name_len <= QM_MAX_NAME_LEN, "tensor.name_len range");
        CHECK(strlen(t->name) == t->name_len, "tensor.name is NUL-terminated at name_len, no inner NUL");
        CHECK(qm_utf8_valid(t->name, t->name_len, false), "tensor.name is UTF-8");
        CHECK(qm_find_tensor(f, t->name) == t, "qm_find_tensor(name) returns the same tensor");
        CHECK(qm_dtype_info(t->dtype) != NULL, "tensor.dtype known");
        CHECK(t->rank >= 1 && t->rank <= QM_MAX_RANK, "tensor.rank");
        for (uint32_t d = t->rank; d < QM_MAX_RANK; d++)
            CHECK(t->dims[d] == 0, "tensor.dims[rank..4) zero");
        /* The element count, computed here independently of the library (exact, no wrap-around). */
        uint64_t prod = 1;
        for (uint32_t d = 0; d < t->rank; d++) {
            CHECK(t->dims[d] >= 1 && t->dims[d] <= QM_MAX_DIM, "tensor dim in [1, 2^32]");
            CHECK(prod <= QM_MAX_ELEMENTS / t->dims[d], "tensor element count <= 2^40 (exact product)");
            prod *= t->dims[d];
        }
        CHECK(t->n_elements == prod, "tensor.n_elements == exact product of dims");
        uint64_t elems = 0;
        CHECK(qm_shape_elements(t->rank, t->dims, &elems) == QM_OK, "tensor shape valid");
        CHECK(elems == t->n_elements, "tensor.n_elements == product of dims");
        uint64_t nbytes = 0;
        CHECK(qm_tensor_nbytes(t->dtype, t->rank, t->dims, h->alignment, &nbytes) == QM_OK, "tensor nbytes");
        CHECK(nbytes == t->size, "tensor.size == qm_tensor_nbytes");
        CHECK(t->size > 0, "tensor.size > 0");
        CHECK(t->offset % h->alignment == 0, "tensor.offset aligned");
        CHECK(t->offset >= prev_end, "tensor.offset after the previous tensor / data_offset");
        CHECK(t->offset <= size && t->size <= size - t->offset, "tensor data inside the file");
        CHECK(t->data == (const void *)(buf + t->offset), "tensor.data == buffer + offset");
        CHECK(t->entry_offset >= h->table_offset && t->entry_offset < h->table_offset + h->table_size,
              "tensor.entry_offset inside the table");
        touch(t->data, t->size);
        prev_end = t->offset + t->size;

        /* R-DATA-1 on demand must agree with the checksum function. */
        qm_error err;
        qm_error_clear(&err);
        qm_status st = qm_tensor_verify(f, t, &err);
        bool match = qm_checksum(t->data, (size_t)t->size) == t->checksum;
        if (st != QM_OK) {
            check_call_failure(st, &err, "qm_tensor_verify");
            CHECK(st == QM_ERR_TENSOR_CHECKSUM, "qm_tensor_verify code");
        }
        CHECK((st == QM_OK) == match, "qm_tensor_verify agrees with qm_checksum");
    }
    CHECK(n == 0 ? h->data_offset == h->file_size : prev_end == h->file_size, "last tensor ends at file_size");
    CHECK(qm_tensor_at(f, n) == NULL, "qm_tensor_at(count) is NULL");
    CHECK(qm_tensor_at(f, UINT64_MAX) == NULL, "qm_tensor_at(UINT64_MAX) is NULL");
    /* A NUL-containing or invalid-UTF-8 name can never be in the table. */
    CHECK(qm_find_tensor(f, "\xff") == NULL, "qm_find_tensor(invalid UTF-8) is NULL");
    CHECK(qm_find_tensor(f, "") == NULL, "qm_find_tensor(\"\") is NULL");
}

/* The typed getters that do NOT accept `type` must say QM_ERR_TYPE_MISMATCH. */
static void check_getters(const qm_file *f, const qm_meta *m)
{
    const char *k = m->key;
    uint32_t u32; uint64_t u64; int64_t i64; double f64; bool b; const char *s; uint64_t slen;
    qm_status st;

    st = qm_meta_get_u32(f, k, &u32);
    if (m->type == QM_META_U32) {
        CHECK(st == QM_OK && u32 == m->v.u32, "get_u32 on U32");
    } else {
        CHECK(st == QM_ERR_TYPE_MISMATCH, "get_u32 on another type");
    }
    st = qm_meta_get_u64(f, k, &u64);
    if (m->type == QM_META_U64) {
        CHECK(st == QM_OK && u64 == m->v.u64, "get_u64 on U64");
    } else if (m->type == QM_META_U32) {
        CHECK(st == QM_OK && u64 == m->v.u32, "get_u64 on U32");
    } else {
        CHECK(st == QM_ERR_TYPE_MISMATCH, "get_u64 on another type");
    }
    st = qm_meta_get_i64(f, k, &i64);
    if (m->type == QM_META_I64) {
        CHECK(st == QM_OK && i64 == m->v.i64, "get_i64 on I64");
    } else if (m->type == QM_META_I32) {
        CHECK(st == QM_OK && i64 == m->v.i32, "get_i64 on I32");
    } else {
        CHECK(st == QM_ERR_TYPE_MISMATCH, "get_i64 on another type");
    }
    st = qm_meta_get_f64(f, k, &f64);
    if (m->type == QM_META_F64) {
        CHECK(st == QM_OK && memcmp(&f64, &m->v.f64, sizeof f64) == 0, "get_f64 on F64 (bit-exact)");
    } else if (m->type == QM_META_F32) {
        CHECK(st == QM_OK, "get_f64 on F32");
        CHECK(isnan(m->v.f32) ? isnan(f64) : f64 == (double)m->v.f32, "get_f64 on F32 value");
    } else {
        CHECK(st == QM_ERR_TYPE_MISMATCH, "get_f64 on another type");
    }
    st = qm_meta_get_bool(f, k, &b);
    if (m->type == QM_META_BOOL) {
        CHECK(st == QM_OK && b == m->v.b, "get_bool on BOOL");
    } else {
        CHECK(st == QM_ERR_TYPE_MISMATCH, "get_bool on another type");
    }
    st = qm_meta_get_string(f, k, &s, &slen);
    if (m->type == QM_META_STRING) {
        CHECK(st == QM_OK && s == m->str && slen == m->str_len, "get_string on STRING");
    } else {
        CHECK(st == QM_ERR_TYPE_MISMATCH, "get_string on another type");
    }
}

static void check_array(const qm_meta *m, const uint8_t *buf, size_t size)
{
    CHECK(m->elem_type != QM_META_ARRAY && qm_meta_type_name(m->elem_type) != NULL, "array elem_type");
    CHECK(m->count <= QM_MAX_ARRAY_COUNT, "array count cap");
    uint64_t walk = m->count < MAX_ARRAY_WALK ? m->count : MAX_ARRAY_WALK;
    const char *s; uint64_t slen;
    union { uint32_t u32; int32_t i32; uint64_t u64; int64_t i64; float f32; double f64; bool b;
            unsigned char raw[16]; } v;
    for (uint64_t j = 0; j <= walk; j++) {
        uint64_t i = j < walk ? j : m->count - 1; /* the last round fetches the last element */
        if (m->count == 0)
            break;
        if (m->elem_type == QM_META_STRING) {
            s = NULL; slen = 0;
            CHECK(qm_meta_array_string(m, i, &s, &slen) == QM_OK, "qm_meta_array_string(i < count)");
            CHECK(slen <= QM_MAX_STRING_LEN, "array string length cap");
            CHECK(slen == 0 || s != NULL, "array string pointer");
            if (slen > 0) {
                CHECK(in_buffer(buf, size, s, slen), "array string inside the buffer");
                touch(s, slen);
                CHECK(qm_utf8_valid(s, slen, true), "array string is UTF-8");
            }
        } else {
            memset(&v, 0xAA, sizeof v);
            CHECK(qm_meta_array_get(m, i, &v) == QM_OK, "qm_meta_array_get(i < count)");
            if (m->elem_type == QM_META_BOOL)
                CHECK(v.raw[0] == 0 || v.raw[0] == 1, "bool array element is 0 or 1");
            g_sink ^= v.raw[0];
        }
    }
    /* Out of range and wrong-kind calls. */
    if (m->elem_type == QM_META_STRING) {
        CHECK(qm_meta_array_string(m, m->count, &s, &slen) == QM_ERR_INVALID_ARGUMENT,
              "qm_meta_array_string(count) is INVALID_ARGUMENT");
        CHECK(qm_meta_array_get(m, 0, &v) != QM_OK, "qm_meta_array_get on a string array fails");
    } else {
        CHECK(qm_meta_array_get(m, m->count, &v) == QM_ERR_INVALID_ARGUMENT,
              "qm_meta_array_get(count) is INVALID_ARGUMENT");
        CHECK(qm_meta_array_string(m, 0, &s, &slen) == QM_ERR_TYPE_MISMATCH,
              "qm_meta_array_string on a numeric array is TYPE_MISMATCH");
    }
}

static void check_meta(const qm_file *f, const uint8_t *buf, size_t size)
{
    const qm_header_info *h = qm_file_header(f);
    uint64_t n = qm_meta_count(f);
    uint64_t prev_end = h->metadata_offset;
    for (uint64_t i = 0; i < n; i++) {
        const qm_meta *m = qm_meta_at(f, i);
        CHECK(m != NULL, "qm_meta_at(i < count)");
        CHECK(m->key != NULL, "meta.key");
        size_t klen = strlen(m->key);
        CHECK(klen >= 1 && klen <= QM_MAX_KEY_LEN, "meta key length");
        CHECK(qm_utf8_valid(m->key, klen, false), "meta key is UTF-8");
        CHECK(qm_find_meta(f, m->key) == m, "qm_find_meta(key) returns the same entry");
        CHECK(qm_meta_type_name(m->type) != NULL, "meta.type known");
        CHECK(m->entry_offset == prev_end, "meta entries are back to back, in file order");
        CHECK(m->value_offset > m->entry_offset && m->value_offset <= h->table_offset, "meta.value_offset");
        CHECK(m->value_size <= h->table_offset - m->value_offset, "meta value inside the metadata section");
        prev_end = m->value_offset + m->value_size;
        if (m->type != QM_META_ARRAY) {
            CHECK(m->elem_type == 0, "meta.elem_type is 0 for non-arrays");
            CHECK(m->count == 1, "meta.count is 1 for non-arrays");
        }
        if (m->type == QM_META_BOOL) {
            unsigned char raw;
            memcpy(&raw, &m->v.b, 1);
            CHECK(raw == 0 || raw == 1, "meta.v.b is 0 or 1");
        }
        if (m->type == QM_META_STRING) {
            CHECK(m->str_len <= QM_MAX_STRING_LEN, "meta string length cap");
            CHECK(m->str_len == 0 || m->str != NULL, "meta.str");
            if (m->str_len > 0) {
                CHECK(in_buffer(buf, size, m->str, m->str_len), "meta string inside the buffer");
                touch(m->str, m->str_len);
                CHECK(qm_utf8_valid(m->str, m->str_len, true), "meta string is UTF-8");
            }
        }
        check_getters(f, m);
        if (m->type == QM_META_ARRAY) {
            check_array(m, buf, size);
        } else {
            union { uint64_t u64; unsigned char raw[16]; } v;
            const char *s; uint64_t slen;
            CHECK(qm_meta_array_get(m, 0, &v) != QM_OK, "qm_meta_array_get on a non-array fails");
            CHECK(qm_meta_array_string(m, 0, &s, &slen) != QM_OK, "qm_meta_array_string on a non-array fails");
        }
    }
    CHECK(n == 0 || prev_end == h->table_offset, "meta entries fill the metadata section");
    CHECK(qm_meta_at(f, n) == NULL, "qm_meta_at(count) is NULL");
    CHECK(qm_find_meta(f, "\xff") == NULL, "qm_find_meta(invalid UTF-8) is NULL");
    uint32_t u32;
    CHECK(qm_meta_get_u32(f, "\xff", &u32) == QM_ERR_NOT_FOUND, "getter on an absent key is NOT_FOUND");
}

static void check_verify(const qm_file *f, bool full)
{
    uint64_t n = qm_tensor_count(f);
    qm_status *status = malloc((size_t)(n ? n : 1) * sizeof *status);
    if (status == NULL)
        return; /* cannot happen for inputs under -max_len */
    for (uint64_t i = 0; i < n; i++)
        status[i] = (qm_status)-1;
    qm_verify_opts opts = { .threads = 1, .full = full };
    qm_verify_report rep;
    memset(&rep, 0, sizeof rep);
    qm_error err;
    qm_error_clear(&err);
    qm_status st = qm_verify(f, &opts, status, &rep, &err);
    uint64_t bad = 0, first_bad = n;
    for (uint64_t i = 0; i < n; i++) {
        qm_status s = status[i];
        if (s == QM_OK)
            continue;
        CHECK(s == QM_ERR_TENSOR_CHECKSUM ||
                  (full && (s == QM_ERR_BAD_TENSOR_DATA || s == QM_ERR_PADDING_NONZERO || s == QM_ERR_NONFINITE)),
              "qm_verify per-tensor status is a verification code");
        if (bad++ == 0)
            first_bad = i;
        const qm_tensor *t = qm_tensor_at(f, i);
        bool match = qm_checksum(t->data, (size_t)t->size) == t->checksum;
        if (s == QM_ERR_TENSOR_CHECKSUM)
            CHECK(!match, "TENSOR_CHECKSUM reported for a tensor whose checksum matches");
        else
            CHECK(match, "a tensor with a bad checksum must not pass (or be reported otherwise)");
    }
    for (uint64_t i = 0; i < n; i++) {
        const qm_tensor *t = qm_tensor_at(f, i);
        if (qm_checksum(t->data, (size_t)t->size) != t->checksum)
            CHECK(status[i] != QM_OK, "qm_verify passed a tensor whose checksum does not match");
    }
    CHECK(rep.tensors_checked == n, "report.tensors_checked == tensor count");
    CHECK(rep.tensors_bad == bad, "report.tensors_bad == failing entries in status[]");
    if (st == QM_OK) {
        CHECK(bad == 0, "qm_verify OK but a tensor failed");
    } else {
        check_call_failure(st, &err, full ? "qm_verify(full)" : "qm_verify");
        CHECK(bad > 0, "qm_verify failed but every tensor passed");
        CHECK(st == status[first_bad], "qm_verify returns the first failing tensor's code");
    }
    free(status);
}

/* Open one image (copied into a heap block of exactly `size` bytes) and check every property.
 * Returns true if it opened; *sums_bad is set if some tensor's stored checksum does not match its data. */
static bool run_image(const uint8_t *data, size_t size, bool *sums_bad)
{
    *sums_bad = false;
    /* Exactly `size` bytes on the heap, so ASan reports any read past the end. */
    uint8_t *buf = malloc(size);
    if (buf == NULL && size != 0)
        return false;
    if (size != 0)
        memcpy(buf, data, size);

    qm_file *f = (qm_file *)(uintptr_t)1; /* must be set to NULL on failure */
    qm_error err;
    memset(&err, 0x5A, sizeof err);
    qm_status st = qm_open_buffer(buf, size, "fuzz-input", &f, &err);
    if (st != QM_OK) {
        check_call_failure(st, &err, "qm_open_buffer");
        if (f != NULL)
            die("qm_open_buffer failed but *out is not NULL", qm_status_name(st));
        free(buf);
        return false;
    }
    if (f == NULL)
        die("qm_open_buffer returned QM_OK with *out NULL", NULL);

    check_header(f, buf, size);
    check_tensors(f, buf, size);
    check_meta(f, buf, size);
    check_verify(f, false);
    check_verify(f, true);
    for (uint64_t i = 0; i < qm_tensor_count(f); i++) {
        const qm_tensor *t = qm_tensor_at(f, i);
        if (qm_checksum(t->data, (size_t)t->size) != t->checksum)
            *sums_bad = true;
    }

    qm_close(f);
    free(buf);
    return true;
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Rewrite the header checksum (spec section 3) so that the image gets past R-HDR-9. Returns true if the
 * stored value changed. Only done when the header's data_offset lies inside the image. */
static bool fix_header_checksum(uint8_t *b, size_t size)
{
    if (size < QM_HEADER_SIZE)
        return false;
    uint64_t data_offset = get_le64(b + 80);
    if (data_offset < QM_HEADER_SIZE || data_offset > size)
        return false;
    size_t n = 120 + (size_t)(data_offset - QM_HEADER_SIZE);
    uint8_t *tmp = malloc(n);
    if (tmp == NULL)
        return false;
    memcpy(tmp, b, 120);
    memcpy(tmp + 120, b + QM_HEADER_SIZE, (size_t)(data_offset - QM_HEADER_SIZE));
    uint64_t sum = qm_checksum(tmp, n);
    free(tmp);
    if (get_le64(b + 120) == sum)
        return false;
    put_le64(b + 120, sum);
    return true;
}

/* Rewrite every tensor's stored checksum (at entry_offset + 60 + name_len, spec section 5) from its
 * data, then the header checksum, so that full verification gets past R-DATA-1 into R-DATA-2. */
static bool fix_tensor_checksums(uint8_t *b, size_t size)
{
    qm_file *f = NULL;
    if (qm_open_buffer(b, size, "fuzz-fixup", &f, NULL) != QM_OK)
        return false;
    uint64_t n = qm_tensor_count(f);
    uint64_t *pos = malloc((size_t)(n ? n : 1) * sizeof *pos);
    uint64_t *sum = malloc((size_t)(n ? n : 1) * sizeof *sum);
    bool ok = pos != NULL && sum != NULL;
    for (uint64_t i = 0; ok && i < n; i++) {
        const qm_tensor *t = qm_tensor_at(f, i);
        pos[i] = t->entry_offset + 60 + t->name_len;
        sum[i] = qm_checksum(t->data, (size_t)t->size);
        if (pos[i] + 8 > size)
            ok = false;
    }
    qm_close(f); /* before writing: the qm_file may hold pointers into b */
    for (uint64_t i = 0; ok && i < n; i++)
        put_le64(b + pos[i], sum[i]);
    free(pos);
    free(sum);
    if (ok)
        fix_header_checksum(b, size);
    return ok;
}

/* Checked on three images: the input as is (the real contract), then — since almost every mutation of a
 * valid file breaks the header checksum and would stop at R-HDR-9 — the input with its header checksum
 * repaired, and, when an image opens with a tensor whose checksum does not match, one with the tensor
 * checksums repaired too, so that mutations reach the metadata/table parser and R-DATA-2. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bool sums_bad = false;
    bool opened = run_image(data, size, &sums_bad);
    if (size < QM_HEADER_SIZE)
        return 0;
    uint8_t *w = malloc(size);
    if (w == NULL)
        return 0;
    memcpy(w, data, size);
    if (!opened && fix_header_checksum(w, size))
        opened = run_image(w, size, &sums_bad);
    if (opened && sums_bad && fix_tensor_checksums(w, size)) {
        bool again = false;
        if (!run_image(w, size, &again))
            die("an image that opened no longer opens once its checksums are repaired", NULL);
        if (again)
            die("tensor checksums still mismatch after repair", NULL);
    }
    free(w);
    return 0;
}
