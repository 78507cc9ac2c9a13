/* qc_safetensors.c — importer for Hugging Face .safetensors files.
 *
 * Layout: u64 little-endian N, N bytes of UTF-8 JSON (the header), then a byte buffer. The header maps
 * tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the buffer) plus
 * an optional "__metadata__" object of string → string.
 *
 * The header is validated the way the reference reader (huggingface/safetensors, Rust) validates it,
 * before any of it is used: N ≤ 100,000,000 and 8 + N ≤ file size; the header starts with '{', is valid
 * UTF-8 JSON (trailing spaces allowed: writers pad the header to a multiple of 8); every tensor's byte
 * range is exactly product(shape) × element size (overflow-checked); sorted by offsets, the ranges tile
 * the buffer from 0 with no gap or overlap and the last one ends at the end of the file. On top of the
 * reference we refuse duplicate keys (the reference keeps one silently; which one is not specified).
 * Tensor-info keys other than the three are ignored, as the reference ignores them.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "qc_source.h"
#include "qm_bytes.h"

#define ST_MAX_HEADER 100000000ull   /* the reference's MAX_HEADER_SIZE */
#define ST_HEADER_AT 8u              /* file offset of the JSON header */

/* Dtypes the reference knows. Those with t == 0 are valid safetensors but not something qmap imports. */
static const struct { const char *name; qc_dtype t; } st_dtypes[] = {
    { "F32", QC_F32 }, { "F16", QC_F16 }, { "BF16", QC_BF16 }, { "F64", QC_F64 },
    { "I64", QC_I64 }, { "I32", QC_I32 }, { "I16", QC_I16 }, { "I8", QC_I8 },
    { "U8", QC_U8 },   { "BOOL", QC_BOOL },
    { "F8_E5M2", 0 }, { "F8_E4M3", 0 }, { "F8_E8M0", 0 }, { "F6_E2M3", 0 }, { "F6_E3M2", 0 },
    { "F4", 0 }, { "U16", 0 }, { "U32", 0 }, { "U64", 0 }, { "C64", 0 },
};

typedef struct st_entry {
    const char *name;                /* borrowed from the JSON tree */
    qc_dtype dtype;
    uint32_t rank;
    uint64_t shape[QC_MAX_RANK];
    uint64_t begin, end;
    size_t order;                    /* position in the header: a stable tie-break for empty tensors */
} st_entry;

static int entry_cmp(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* A JSON integer ≥ 0, as the reference's usize. */
static bool json_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static qm_status parse_entry(const qc_source *s, const char *name, const json_t *info, st_entry *e,
                             qm_error *err)
{
    const char *file = s->path;
    if (!json_is_object(info))
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, name, ST_HEADER_AT,
                       "tensor '%s': header value is not an object", name);
    const json_t *dt = json_object_get(info, "dtype"), *shape = json_object_get(info, "shape"),
                 *offs = json_object_get(info, "data_offsets");
    const char *missing = !dt ? "dtype" : !shape ? "shape" : !offs ? "data_offsets" : NULL;
    if (missing)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, missing, ST_HEADER_AT, "tensor '%s' has no \"%s\"",
                       name, missing);

    if (!json_is_string(dt))
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "dtype", ST_HEADER_AT, "tensor '%s': dtype is not a string",
                       name);
    const char *dts = json_string_value(dt);
    size_t k = 0;
    while (k < sizeof st_dtypes / sizeof st_dtypes[0] && strcmp(st_dtypes[k].name, dts)) k++;
    if (k == sizeof st_dtypes / sizeof st_dtypes[0])
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "dtype", ST_HEADER_AT,
                       "tensor '%s': unknown dtype \"%s\"", name, dts);
    if (!st_dtypes[k].t)
        return qm_fail(err, QM_ERR_UNSUPPORTED, file, "dtype", ST_HEADER_AT,
                       "tensor '%s': dtype %s is not supported", name, dts);
    e->dtype = st_dtypes[k].t;

    if (!json_is_array(shape))
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "shape", ST_HEADER_AT, "tensor '%s': shape is not an array",
                       name);
    size_t rank = json_array_size(shape);
    if (rank > QC_MAX_RANK)
        return qm_fail(err, QM_ERR_UNSUPPORTED, file, "shape", ST_HEADER_AT,
                       "tensor '%s' has %zu dimensions; at most %d are supported", name, rank, QC_MAX_RANK);
    e->rank = (uint32_t)rank;
    for (size_t i = 0; i < rank; i++)
        if (!json_u64(json_array_get(shape, i), &e->shape[i]))
            return qm_fail(err, QM_ERR_BAD_SOURCE, file, "shape", ST_HEADER_AT,
                           "tensor '%s': shape[%zu] is not a non-negative integer", name, i);

    if (!json_is_array(offs) || json_array_size(offs) != 2 || !json_u64(json_array_get(offs, 0), &e->begin) ||
        !json_u64(json_array_get(offs, 1), &e->end))
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "data_offsets", ST_HEADER_AT,
                       "tensor '%s': data_offsets is not [begin, end] of non-negative integers", name);
    if (e->end < e->begin)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "data_offsets", ST_HEADER_AT,
                       "tensor '%s': data_offsets end %llu is before begin %llu", name,
                       (unsigned long long)e->end, (unsigned long long)e->begin);
    e->name = name;
    return QM_OK;
}

/* "__metadata__" must be an object of strings; it is kept as compact JSON for the converter. */
static qm_status take_metadata(qc_source *s, const json_t *meta, qm_error *err)
{
    if (json_is_null(meta)) return QM_OK;      /* the reference reads null as "no metadata" */
    if (!json_is_object(meta))
        return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, "__metadata__", ST_HEADER_AT, "is not an object");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)meta, k, v) {
        if (!json_is_string(v))
            return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, "__metadata__", ST_HEADER_AT,
                           "value of \"%s\" is not a string", k);
    }
    s->config_json = json_dumps(meta, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!s->config_json)
        return qm_fail(err, QM_ERR_NOMEM, s->path, "__metadata__", ST_HEADER_AT, "cannot serialize");
    return QM_OK;
}

qm_status qc_parse_safetensors(qc_source *s, uint32_t fi, qm_error *err)
{
    const char *file = s->path;
    const uint8_t *d = s->files[fi].data;
    uint64_t size = s->files[fi].size;
    if (size < 8)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "header_size", 0,
                       "file of %llu bytes is too short for the 8-byte header length", (unsigned long long)size);
    uint64_t n = qm_load_u64(d);
    if (n > ST_MAX_HEADER)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "header_size", 0,
                       "header length %llu is above the limit of %llu", (unsigned long long)n, ST_MAX_HEADER);
    if (n > size - 8)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "header_size", 0,
                       "header length %llu runs past the end of the file (%llu bytes)", (unsigned long long)n,
                       (unsigned long long)size);
    const uint64_t data_at = 8 + n, data_len = size - data_at;
    if (n == 0 || d[8] != '{')
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "header", ST_HEADER_AT, "header does not start with '{'");

    json_error_t jerr;
    /* jansson refuses invalid UTF-8, NUL bytes (also as \u0000) and anything after the value but blanks */
    json_t *root = json_loadb((const char *)d + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return qm_fail(err, QM_ERR_BAD_SOURCE, file, "header", ST_HEADER_AT + (uint64_t)jerr.position,
                       "header is not valid JSON: %s", jerr.text);
    qm_status st = QM_OK;
    st_entry *es = NULL;
    if (!json_is_object(root)) {
        st = qm_fail(err, QM_ERR_BAD_SOURCE, file, "header", ST_HEADER_AT, "header is not a JSON object");
        goto out;
    }
    size_t n_keys = json_object_size(root), ne = 0;
    es = calloc(n_keys ? n_keys : 1, sizeof *es);
    if (!es) {
        st = qm_fail(err, QM_ERR_NOMEM, file, "header", ST_HEADER_AT, "cannot allocate %zu tensor entries", n_keys);
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if ((st = take_metadata(s, val, err)) != QM_OK) goto out;
            continue;
        }
        if ((st = parse_entry(s, key, val, &es[ne], err)) != QM_OK) goto out;
        es[ne].order = ne;
        ne++;
    }

    qsort(es, ne, sizeof *es, entry_cmp);
    uint64_t at = 0;
    for (size_t i = 0; i < ne; i++) {
        const st_entry *e = &es[i];
        if (e->begin != at) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, file, "data_offsets", data_at + (e->begin < at ? e->begin : at),
                         "tensor '%s': data_offsets [%llu, %llu] %s the previous tensor, which ends at %llu",
                         e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                         e->begin < at ? "overlaps" : "leaves a gap after", (unsigned long long)at);
            goto out;
        }
        uint64_t nbytes = qc_dtype_size(e->dtype);
        for (uint32_t r = 0; r < e->rank; r++)
            if (!qm_mul_u64(nbytes, e->shape[r], &nbytes)) {
                st = qm_fail(err, QM_ERR_BAD_SOURCE, file, "shape", ST_HEADER_AT,
                             "tensor '%s': byte size of its shape overflows 64 bits", e->name);
                goto out;
            }
        if (e->end - e->begin != nbytes) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, file, "data_offsets", data_at + e->begin,
                         "tensor '%s': data_offsets span %llu bytes but %s × shape needs %llu", e->name,
                         (unsigned long long)(e->end - e->begin), qc_dtype_name(e->dtype),
                         (unsigned long long)nbytes);
            goto out;
        }
        if (e->end > data_len) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, file, "data_offsets", data_at + e->begin,
                         "tensor '%s': data_offsets end %llu runs past the end of the file (%llu data bytes)",
                         e->name, (unsigned long long)e->end, (unsigned long long)data_len);
            goto out;
        }
        at = e->end;
    }
    if (at != data_len) {
        st = qm_fail(err, QM_ERR_BAD_SOURCE, file, "data_offsets", data_at + at,
                     "tensors end at buffer offset %llu but the file has %llu more bytes after it",
                     (unsigned long long)at, (unsigned long long)(data_len - at));
        goto out;
    }

    for (size_t i = 0; i < ne; i++) {
        const st_entry *e = &es[i];
        uint32_t si;
        if ((st = qc_source_add_storage(s, e->name, QC_STORAGE_MAPPED, fi, data_at + e->begin, 0,
                                        e->end - e->begin, &si, err)) != QM_OK ||
            (st = qc_source_add_tensor(s, e->name, e->dtype, e->rank, e->shape, NULL, 0, si, err)) != QM_OK ||
            (st = qc_tensor_check(s, &s->tensors[s->n_tensors - 1], err)) != QM_OK)
            goto out;
    }
out:
    free(es);
    json_decref(root);
    return st;
}
