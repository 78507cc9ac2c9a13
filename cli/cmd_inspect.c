/* qmap inspect — header, metadata, tensor table and totals, as text or JSON. Reads no tensor data. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json_out.h"
#include "opts.h"
#include "qm_reader.h"

static void shape_str(const qm_tensor *t, char *buf, size_t size)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, size - n, "[");
    for (uint32_t d = 0; d < t->rank && n < size; d++)
        n += (size_t)snprintf(buf + n, size - n, d ? ", %" PRIu64 : "%" PRIu64, t->dims[d]);
    if (n < size) snprintf(buf + n, size - n, "]");
}

/* Print a string for people: escape control characters, cut after `max` bytes (0 = all). */
static void print_text(const char *s, uint64_t len, uint64_t max)
{
    putchar('"');
    uint64_t lim = (max && len > max) ? max : len;
    for (uint64_t i = 0; i < lim; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
    if (lim < len) printf("… (%" PRIu64 " bytes)", len);
}

static void print_scalar(uint32_t type, const void *v)
{
    switch (type) {
    case QM_META_U32: printf("%" PRIu32, *(const uint32_t *)v); break;
    case QM_META_I32: printf("%" PRId32, *(const int32_t *)v); break;
    case QM_META_U64: printf("%" PRIu64, *(const uint64_t *)v); break;
    case QM_META_I64: printf("%" PRId64, *(const int64_t *)v); break;
    case QM_META_F32: printf("%.9g", (double)*(const float *)v); break;
    case QM_META_F64: printf("%.17g", *(const double *)v); break;
    case QM_META_BOOL: printf("%s", *(const bool *)v ? "true" : "false"); break;
    }
}

static void type_str(const qm_meta *m, char *buf, size_t size)
{
    if (m->type == QM_META_ARRAY) snprintf(buf, size, "ARRAY[%s]", qm_meta_type_name(m->elem_type));
    else snprintf(buf, size, "%s", qm_meta_type_name(m->type));
}

static void text_meta_value(const qm_meta *m, uint64_t max_items)
{
    if (m->type == QM_META_STRING) { print_text(m->str, m->str_len, max_items ? 120 : 0); return; }
    if (m->type != QM_META_ARRAY) { print_scalar(m->type, &m->v); return; }
    uint64_t lim = (max_items && m->count > max_items) ? max_items : m->count;
    printf("(%" PRIu64 ") [", m->count);
    for (uint64_t i = 0; i < lim; i++) {
        if (i) printf(", ");
        if (m->elem_type == QM_META_STRING) {
            const char *s; uint64_t len;
            qm_meta_array_string(m, i, &s, &len);
            print_text(s, len, max_items ? 40 : 0);
        } else {
            union { uint64_t u; double d; } v;
            qm_meta_array_get(m, i, &v);
            print_scalar(m->elem_type, &v);
        }
    }
    printf(lim < m->count ? ", …]" : "]");
}

static void json_meta_value(json_out *j, const qm_meta *m, uint64_t max_items)
{
    union { uint32_t u32; int32_t i32; uint64_t u64; int64_t i64; float f32; double f64; bool b; } v;
    if (m->type == QM_META_STRING) { jo_string(j, "value", m->str, m->str_len); return; }
    if (m->type != QM_META_ARRAY) {
        memcpy(&v, &m->v, sizeof v);
        switch (m->type) {
        case QM_META_U32: jo_u64(j, "value", v.u32); break;
        case QM_META_I32: jo_i64(j, "value", v.i32); break;
        case QM_META_U64: jo_u64(j, "value", v.u64); break;
        case QM_META_I64: jo_i64(j, "value", v.i64); break;
        case QM_META_F32: jo_f64(j, "value", v.f32); break;
        case QM_META_F64: jo_f64(j, "value", v.f64); break;
        case QM_META_BOOL: jo_bool(j, "value", v.b); break;
        }
        return;
    }
    uint64_t lim = (max_items && m->count > max_items) ? max_items : m->count;
    jo_u64(j, "count", m->count);
    jo_bool(j, "truncated", lim < m->count);
    jo_begin_array(j, "value");
    for (uint64_t i = 0; i < lim; i++) {
        if (m->elem_type == QM_META_STRING) {
            const char *s; uint64_t len;
            qm_meta_array_string(m, i, &s, &len);
            jo_string(j, NULL, s, len);
            continue;
        }
        qm_meta_array_get(m, i, &v);
        switch (m->elem_type) {
        case QM_META_U32: jo_u64(j, NULL, v.u32); break;
        case QM_META_I32: jo_i64(j, NULL, v.i32); break;
        case QM_META_U64: jo_u64(j, NULL, v.u64); break;
        case QM_META_I64: jo_i64(j, NULL, v.i64); break;
        case QM_META_F32: jo_f64(j, NULL, v.f32); break;
        case QM_META_F64: jo_f64(j, NULL, v.f64); break;
        case QM_META_BOOL: jo_bool(j, NULL, v.b); break;
        }
    }
    jo_end_array(j);
}

typedef struct { uint64_t tensors, elements, bytes; } dtype_total;

/* Tensor counts, elements and bytes per dtype, and over all of them. */
typedef struct totals {
    dtype_total by_dtype[QM_DTYPE_ID_LIMIT];
    uint64_t elements, bytes;
} totals;

static void count_totals(const qm_file *f, totals *t)
{
    memset(t, 0, sizeof *t);
    for (uint64_t i = 0; i < qm_tensor_count(f); i++) {
        const qm_tensor *x = qm_tensor_at(f, i);
        t->by_dtype[x->dtype].tensors++;
        t->by_dtype[x->dtype].elements += x->n_elements;
        t->by_dtype[x->dtype].bytes += x->size;
        t->elements += x->n_elements;
        t->bytes += x->size;
    }
}

/* ---- JSON ---------------------------------------------------------------------------------------- */

static void json_header(json_out *j, const qm_header_info *h)
{
    jo_begin_object(j, "header");
    jo_u64(j, "major_version", h->major_version);
    jo_u64(j, "minor_version", h->minor_version);
    jo_u64(j, "alignment", h->alignment);
    jo_u64(j, "file_size", h->file_size);
    jo_u64(j, "metadata_offset", h->metadata_offset);
    jo_u64(j, "metadata_size", h->metadata_size);
    jo_u64(j, "metadata_count", h->metadata_count);
    jo_u64(j, "table_offset", h->table_offset);
    jo_u64(j, "table_size", h->table_size);
    jo_u64(j, "tensor_count", h->tensor_count);
    jo_u64(j, "data_offset", h->data_offset);
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, h->header_checksum);
    jo_cstring(j, "header_checksum", hex);
    jo_end_object(j);
}

static void json_metadata(json_out *j, const qm_file *f, uint64_t max_items)
{
    jo_begin_array(j, "metadata");
    for (uint64_t i = 0; i < qm_meta_count(f); i++) {
        const qm_meta *m = qm_meta_at(f, i);
        char ts[32];
        type_str(m, ts, sizeof ts);
        jo_begin_object(j, NULL);
        jo_cstring(j, "key", m->key);
        jo_cstring(j, "type", ts);
        json_meta_value(j, m, max_items);
        jo_end_object(j);
    }
    jo_end_array(j);
}

static void json_tensors(json_out *j, const qm_file *f)
{
    jo_begin_array(j, "tensors");
    for (uint64_t i = 0; i < qm_tensor_count(f); i++) {
        const qm_tensor *t = qm_tensor_at(f, i);
        jo_begin_object(j, NULL);
        jo_cstring(j, "name", t->name);
        jo_cstring(j, "dtype", qm_dtype_info(t->dtype)->name);
        jo_begin_array(j, "shape");
        for (uint32_t d = 0; d < t->rank; d++) jo_u64(j, NULL, t->dims[d]);
        jo_end_array(j);
        jo_u64(j, "elements", t->n_elements);
        jo_u64(j, "offset", t->offset);
        jo_u64(j, "size", t->size);
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, t->checksum);
        jo_cstring(j, "checksum", hex);
        jo_end_object(j);
    }
    jo_end_array(j);
}

static void json_totals(json_out *j, const totals *t, uint64_t file_size)
{
    jo_begin_object(j, "totals");
    for (uint32_t d = 1; d < QM_DTYPE_ID_LIMIT; d++) {
        if (!t->by_dtype[d].tensors) continue;
        jo_begin_object(j, qm_dtype_info(d)->name);
        jo_u64(j, "tensors", t->by_dtype[d].tensors);
        jo_u64(j, "elements", t->by_dtype[d].elements);
        jo_u64(j, "bytes", t->by_dtype[d].bytes);
        jo_end_object(j);
    }
    jo_u64(j, "elements", t->elements);
    jo_u64(j, "tensor_bytes", t->bytes);
    jo_u64(j, "file_size", file_size);
    jo_end_object(j);
}

static void print_json(const char *path, const qm_file *f, const totals *t, uint64_t max_items)
{
    json_out j = { .fp = stdout };
    jo_begin_object(&j, NULL);
    jo_cstring(&j, "file", path);
    json_header(&j, qm_file_header(f));
    json_metadata(&j, f, max_items);
    json_tensors(&j, f);
    json_totals(&j, t, qm_file_header(f)->file_size);
    jo_end_object(&j);
    putchar('\n');
}

/* ---- text ---------------------------------------------------------------------------------------- */

static void text_header(const char *path, const qm_header_info *h)
{
    char hb[32];
    printf("file       %s  (%s, %" PRIu64 " bytes)\n", path, cli_human_bytes(h->file_size, hb, sizeof hb), h->file_size);
    printf("format     %u.%u  (this reader: %d.%d)   alignment %" PRIu64 "\n", h->major_version, h->minor_version,
           QM_MAJOR_VERSION, QM_MINOR_VERSION, h->alignment);
    printf("sections   header 0+128 | metadata %" PRIu64 "+%" PRIu64 " (%" PRIu64 " entries) | table %" PRIu64 "+%" PRIu64
           " (%" PRIu64 " tensors) | data %" PRIu64 "+%" PRIu64 "\n",
           h->metadata_offset, h->metadata_size, h->metadata_count, h->table_offset, h->table_size, h->tensor_count,
           h->data_offset, h->file_size - h->data_offset);
    printf("checksum   %016" PRIx64 " (header, metadata, table: valid)\n", h->header_checksum);
}

static void text_metadata(const qm_file *f, uint64_t max_items)
{
    uint64_t nm = qm_meta_count(f);
    printf("\nmetadata (%" PRIu64 ")\n", nm);
    size_t kw = 4;
    for (uint64_t i = 0; i < nm; i++) { size_t l = strlen(qm_meta_at(f, i)->key); if (l > kw) kw = l; }
    if (kw > 48) kw = 48;
    for (uint64_t i = 0; i < nm; i++) {
        const qm_meta *m = qm_meta_at(f, i);
        char ts[32];
        type_str(m, ts, sizeof ts);
        printf("  %-*s  %-14s ", (int)kw, m->key, ts);
        text_meta_value(m, max_items);
        putchar('\n');
    }
}

static void text_tensors(const qm_file *f)
{
    uint64_t nt = qm_tensor_count(f);
    printf("\ntensors (%" PRIu64 ")\n", nt);
    size_t nw = 4;
    for (uint64_t i = 0; i < nt; i++) { size_t l = qm_tensor_at(f, i)->name_len; if (l > nw) nw = l; }
    if (nw > 48) nw = 48;
    if (nt) printf("  %5s  %-*s  %-6s  %-22s  %12s  %12s  %s\n", "#", (int)nw, "name", "dtype", "shape", "offset", "bytes", "checksum");
    for (uint64_t i = 0; i < nt; i++) {
        const qm_tensor *t = qm_tensor_at(f, i);
        char shape[96];
        shape_str(t, shape, sizeof shape);
        printf("  %5" PRIu64 "  %-*s  %-6s  %-22s  %12" PRIu64 "  %12" PRIu64 "  %016" PRIx64 "\n", i, (int)nw, t->name,
               qm_dtype_info(t->dtype)->name, shape, t->offset, t->size, t->checksum);
    }
}

static void text_totals(const totals *t, uint64_t n_tensors, uint64_t file_size)
{
    char hb[32], hb2[32];
    printf("\ntotals\n");
    for (uint32_t d = 1; d < QM_DTYPE_ID_LIMIT; d++) {
        const dtype_total *x = &t->by_dtype[d];
        if (!x->tensors) continue;
        printf("  %-6s  %6" PRIu64 " tensors  %14" PRIu64 " elements  %s\n", qm_dtype_info(d)->name, x->tensors,
               x->elements, cli_human_bytes(x->bytes, hb, sizeof hb));
    }
    printf("  %-6s  %6" PRIu64 " tensors  %14" PRIu64 " elements  %s of tensor data, file %s\n", "all", n_tensors,
           t->elements, cli_human_bytes(t->bytes, hb, sizeof hb), cli_human_bytes(file_size, hb2, sizeof hb2));
}

/* ---- the command ----------------------------------------------------------------------------------- */

/* Parse argv into the options and the one FILE; 0, 1 (help printed) or 2 (usage error, printed). */
static int inspect_parse(int argc, char **argv, bool *json, long *max_items, const char **path)
{
    const cli_opt opts[] = {
        { "json", 0, CLI_FLAG, json, NULL, 0, 0, NULL, "print the same as one JSON object: {\"file\", \"header\", "
          "\"metadata\", \"tensors\", \"totals\"}", false },
        { "max-items", 0, CLI_INT, max_items, "N", 0, 1L << 40, NULL, "show at most N elements of each metadata array "
          "and cut long strings (120 characters, 40 in arrays); 0 = everything", false },
    };
    const cli_command cmd = {
        "inspect", "qmap inspect [--json] [--max-items N] FILE",
        "Print the container's header (versions, alignment, section sizes), its metadata, its tensor\n"
        "table (name, dtype, shape, offset, bytes, checksum) and totals by dtype. Opening validates\n"
        "everything but tensor data; use 'qmap verify' to check the data.\n",
        opts, sizeof opts / sizeof opts[0], "exit status: 0 ok, 1 the file is not a valid container, 2 usage error\n"
    };
    int first;
    int rc = cli_parse(&cmd, argc, argv, &first);
    if (rc != 0) return rc;
    if (first != argc - 1) {
        fprintf(stderr, "qmap inspect: %s\nusage: %s\n", first >= argc ? "no FILE given" : "one FILE only", cmd.usage);
        return 2;
    }
    *path = argv[first];
    return 0;
}

int cmd_inspect(int argc, char **argv)
{
    bool json = false;
    long max_items = 8;
    const char *path = NULL;
    int prc = inspect_parse(argc, argv, &json, &max_items, &path);
    if (prc != 0) return prc == 1 ? 0 : 2;
    qm_file *f;
    qm_error err;
    if (qm_open(path, &f, &err) != QM_OK) {
        fprintf(stderr, "qmap inspect: %s\n", err.message);
        return 1;
    }
    totals t;
    count_totals(f, &t);
    if (json) print_json(path, f, &t, (uint64_t)max_items);
    else {
        text_header(path, qm_file_header(f));
        text_metadata(f, (uint64_t)max_items);
        text_tensors(f);
        text_totals(&t, qm_tensor_count(f), qm_file_header(f)->file_size);
    }
    qm_close(f);
    return 0;
}
