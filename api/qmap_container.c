/* qmap_container.c — the public view of a container without a model (include/qmap.h, "containers"):
 * format/'s validated reader (qm_reader.h) behind qmap_* names, and format/'s verification. */
#include <stdlib.h>
#include <string.h>

#include "qa_internal.h"
#include "qm_bytes.h"
#include "qm_format.h"
#include "qm_reader.h"

struct qmap_container {
    qm_file *file;             /* the mapping and everything validated in it */
};

qmap_status qmap_container_open(const char *path, qmap_container **out, qmap_error *err)
{
    if (!out) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_container_open: out is NULL");
    *out = NULL;
    if (!path) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_container_open: path is NULL");
    qmap_container *c = calloc(1, sizeof *c);
    if (!c) return qa_fail(err, QMAP_ERR_NOMEM, "%s: out of memory", path);
    qm_error e;
    qm_error_clear(&e);
    if (qm_open(path, &c->file, &e) != QM_OK) {   /* qm_open refuses FIFOs and devices (qm_fileio.h) */
        free(c);
        return qa_error_export(err, &e);
    }
    *out = c;
    return QMAP_OK;
}

void qmap_container_close(qmap_container *c)
{
    if (!c) return;
    qm_close(c->file);
    free(c);
}

void qmap_container_get_info(const qmap_container *c, qmap_container_info *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!c) return;
    const qm_header_info *h = qm_file_header(c->file);
    out->path = qm_file_path(c->file);
    out->major_version = h->major_version;
    out->minor_version = h->minor_version;
    out->alignment = h->alignment;
    out->file_size = h->file_size;
    out->metadata_count = h->metadata_count;
    out->tensor_count = h->tensor_count;
}

/* ---- metadata ---------------------------------------------------------------------------------------- */

/* The public entry for a validated one. An array's elements follow its u32 element type and u64 count
 * (spec section 4), so they start 12 bytes into the encoded value. */
static void export_meta(const qm_meta *m, qmap_meta_entry *out)
{
    memset(out, 0, sizeof *out);
    out->key = m->key;
    out->type = (qmap_meta_type)m->type;
    out->elem_type = (qmap_meta_type)m->elem_type;
    out->count = m->count;
    if (m->type == QM_META_STRING) {
        out->str = m->str;
        out->str_len = m->str_len;
    } else if (m->type == QM_META_ARRAY) {
        if (m->elem_type != QM_META_STRING) {
            out->elems = m->value + 12;
            out->elems_size = m->count * qm_meta_scalar_size(m->elem_type);
        }
    } else {
        memcpy(&out->v, &m->v, sizeof out->v < sizeof m->v ? sizeof out->v : sizeof m->v);
    }
}

qmap_status qmap_container_meta(const qmap_container *c, uint64_t i, qmap_meta_entry *out, qmap_error *err)
{
    if (!c || !out) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_container_meta: %s is NULL", c ? "out" : "c");
    const qm_meta *m = qm_meta_at(c->file, i);
    if (!m)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "%s: metadata entry %llu: the file has %llu",
                       qm_file_path(c->file), (unsigned long long)i, (unsigned long long)qm_meta_count(c->file));
    export_meta(m, out);
    return QMAP_OK;
}

qmap_status qmap_container_find_meta(const qmap_container *c, const char *key, qmap_meta_entry *out, qmap_error *err)
{
    if (!c || !key || !out)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_container_find_meta: %s is NULL",
                       !c ? "c" : !key ? "key" : "out");
    const qm_meta *m = qm_find_meta(c->file, key);
    if (!m) return qa_fail(err, QMAP_ERR_NOT_FOUND, "%s: no metadata key \"%.256s\"", qm_file_path(c->file), key);
    export_meta(m, out);
    return QMAP_OK;
}

qmap_status qmap_meta_array_get(const qmap_meta_entry *e, uint64_t i, void *out, qmap_error *err)
{
    if (!e || !out) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_meta_array_get: %s is NULL", e ? "out" : "e");
    if (e->type != QMAP_META_ARRAY || !e->elems)
        return qa_fail(err, QMAP_ERR_TYPE_MISMATCH, "metadata key \"%s\": not an array of numbers or booleans", e->key);
    if (i >= e->count)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "metadata key \"%s\": element %llu of %llu", e->key,
                       (unsigned long long)i, (unsigned long long)e->count);
    const uint8_t *p = (const uint8_t *)e->elems + i * qm_meta_scalar_size(e->elem_type);
    switch (e->elem_type) {
    case QMAP_META_U32: case QMAP_META_I32: case QMAP_META_F32: {
        uint32_t u = qm_load_u32(p);
        memcpy(out, &u, 4);
        break;
    }
    case QMAP_META_U64: case QMAP_META_I64: case QMAP_META_F64: {
        uint64_t u = qm_load_u64(p);
        memcpy(out, &u, 8);
        break;
    }
    case QMAP_META_BOOL: *(bool *)out = *p != 0; break;
    default:
        return qa_fail(err, QMAP_ERR_TYPE_MISMATCH, "metadata key \"%s\": not an array of numbers or booleans", e->key);
    }
    return QMAP_OK;
}

qmap_status qmap_meta_array_string(const qmap_container *c, const qmap_meta_entry *e, uint64_t i, const char **s,
                                   size_t *len, qmap_error *err)
{
    if (!c || !e || !s || !len)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_meta_array_string: %s is NULL",
                       !c ? "c" : !e ? "e" : !s ? "s" : "len");
    /* the entry is found again by key: the public struct does not carry the reader's string index */
    const qm_meta *m = e->key ? qm_find_meta(c->file, e->key) : NULL;
    if (!m || m->type != QM_META_ARRAY || m->elem_type != QM_META_STRING)
        return qa_fail(err, QMAP_ERR_TYPE_MISMATCH, "%s: metadata key \"%.256s\": not an array of strings",
                       qm_file_path(c->file), e->key ? e->key : "(null)");
    if (i >= m->count)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "%s: metadata key \"%s\": element %llu of %llu",
                       qm_file_path(c->file), m->key, (unsigned long long)i, (unsigned long long)m->count);
    uint64_t n;
    (void)qm_meta_array_string(m, i, s, &n);   /* in range and a string array: cannot fail */
    *len = (size_t)n;
    return QMAP_OK;
}

/* ---- tensors ------------------------------------------------------------------------------------------- */

static void export_tensor(const qm_file *f, const qm_tensor *t, qmap_tensor_info *out)
{
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->dtype = (qmap_dtype)t->dtype;
    out->rank = t->rank;
    memcpy(out->dims, t->dims, sizeof out->dims);
    out->n_elements = t->n_elements;
    out->data = t->data;
    out->size = t->size;
    out->offset = t->offset;
    out->checksum = t->checksum;
    qm_q8row_layout q;
    uint64_t alignment = qm_file_header(f)->alignment;
    /* the layout of a tensor that passed validation (R-TENSOR-10) always computes */
    if (t->dtype == QM_DTYPE_Q8_ROW && qm_q8row_layout_of(t->rank, t->dims, alignment, &q) == QM_OK) {
        out->rows = q.rows;
        out->cols = q.cols;
        out->row_stride = q.row_stride;
        out->scales_offset = q.scales_offset;
        out->sums_offset = q.sums_offset;
    }
}

qmap_status qmap_container_tensor(const qmap_container *c, uint64_t i, qmap_tensor_info *out, qmap_error *err)
{
    if (!c || !out)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_container_tensor: %s is NULL", c ? "out" : "c");
    const qm_tensor *t = qm_tensor_at(c->file, i);
    if (!t)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "%s: tensor %llu: the file has %llu", qm_file_path(c->file),
                       (unsigned long long)i, (unsigned long long)qm_tensor_count(c->file));
    export_tensor(c->file, t, out);
    return QMAP_OK;
}

qmap_status qmap_container_find_tensor(const qmap_container *c, const char *name, qmap_tensor_info *out,
                                       qmap_error *err)
{
    if (!c || !name || !out)
        return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_container_find_tensor: %s is NULL",
                       !c ? "c" : !name ? "name" : "out");
    const qm_tensor *t = qm_find_tensor(c->file, name);
    if (!t) return qa_fail(err, QMAP_ERR_NOT_FOUND, "%s: no tensor \"%.1024s\"", qm_file_path(c->file), name);
    export_tensor(c->file, t, out);
    return QMAP_OK;
}

/* ---- verification --------------------------------------------------------------------------------------- */

qmap_status qmap_container_verify(const qmap_container *c, int threads, bool full, qmap_status *status, qmap_error *err)
{
    if (!c) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_container_verify: c is NULL");
    if (threads < 0) return qa_fail(err, QMAP_ERR_INVALID_ARGUMENT, "qmap_container_verify: threads %d < 0", threads);
    uint64_t n = qm_tensor_count(c->file);
    /* format/ reports in its own enum; the values are the same list (qmap_errors.h), copied one by one */
    qm_status *st = status ? calloc(n ? n : 1, sizeof *st) : NULL;
    if (status && !st) return qa_fail(err, QMAP_ERR_NOMEM, "%s: out of memory", qm_file_path(c->file));
    qm_verify_opts o = { .threads = threads, .full = full };
    qm_error e;
    qm_error_clear(&e);
    qm_status s = qm_verify(c->file, &o, st, NULL, &e);
    if (st) {
        for (uint64_t i = 0; i < n; i++) status[i] = (qmap_status)st[i];
        free(st);
    }
    return s == QM_OK ? QMAP_OK : qa_error_export(err, &e);
}
