/* qmap inspect — header, metadata, tensor table and totals, as text or JSON. Reads no tensor data. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json_out.h"
#include "qm_reader.h"

static void help(FILE *fp)
{
    fprintf(fp,
            "usage: qmap inspect [--json] [--max-items N] FILE\n"
            "\n"
            "Print the container's header (versions, alignment, section sizes), its metadata, its tensor\n"
            "table (name, dtype, shape, offset, bytes, checksum) and totals by dtype. Opening validates\n"
            "everything but tensor data; use 'qmap verify' to check the data.\n"
            "\n"
            "  --json          print the same as one JSON object: {\"file\", \"header\", \"metadata\",\n"
            "                  \"tensors\", \"totals\"}\n"
            "  --max-items N   show at most N elements of each metadata array and characters of\n"
            "                  long strings (default 8 elements / 120 characters; 0 = everything)\n"
            "  -h, --help      this text\n"
            "\n"
            "exit status: 0 ok, 1 the file is not a valid container, 2 usage error\n");
}

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
    if (m->type == QM_META_STRING) { json_string(j, "value", m->str, m->str_len); return; }
    if (m->type != QM_META_ARRAY) {
        memcpy(&v, &m->v, sizeof v);
        switch (m->type) {
        case QM_META_U32: json_u64(j, "value", v.u32); break;
        case QM_META_I32: json_i64(j, "value", v.i32); break;
        case QM_META_U64: json_u64(j, "value", v.u64); break;
        case QM_META_I64: json_i64(j, "value", v.i64); break;
        case QM_META_F32: json_f64(j, "value", v.f32); break;
        case QM_META_F64: json_f64(j, "value", v.f64); break;
        case QM_META_BOOL: json_bool(j, "value", v.b); break;
        }
        return;
    }
    uint64_t lim = (max_items && m->count > max_items) ? max_items : m->count;
    json_u64(j, "count", m->count);
    json_bool(j, "truncated", lim < m->count);
    json_begin_array(j, "value");
    for (uint64_t i = 0; i < lim; i++) {
        if (m->elem_type == QM_META_STRING) {
            const char *s; uint64_t len;
            qm_meta_array_string(m, i, &s, &len);
            json_string(j, NULL, s, len);
            continue;
        }
        qm_meta_array_get(m, i, &v);
        switch (m->elem_type) {
        case QM_META_U32: json_u64(j, NULL, v.u32); break;
        case QM_META_I32: json_i64(j, NULL, v.i32); break;
        case QM_META_U64: json_u64(j, NULL, v.u64); break;
        case QM_META_I64: json_i64(j, NULL, v.i64); break;
        case QM_META_F32: json_f64(j, NULL, v.f32); break;
        case QM_META_F64: json_f64(j, NULL, v.f64); break;
        case QM_META_BOOL: json_bool(j, NULL, v.b); break;
        }
    }
    json_end_array(j);
}

typedef struct { uint64_t tensors, elements, bytes; } dtype_total;

int cmd_inspect(int argc, char **argv)
{
    bool json = false;
    long max_items = 8;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { help(stdout); return 0; }
        else if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--max-items") && i + 1 < argc) {
            if ((max_items = cli_parse_count(argv[++i])) < 0) { fprintf(stderr, "qmap inspect: --max-items needs a number\n"); return 2; }
        } else if (argv[i][0] == '-' && argv[i][1]) { fprintf(stderr, "qmap inspect: unknown option '%s'\n", argv[i]); help(stderr); return 2; }
        else if (!path) path = argv[i];
        else { fprintf(stderr, "qmap inspect: one FILE only\n"); return 2; }
    }
    if (!path) { help(stderr); return 2; }

    qm_file *f;
    qm_error err;
    if (qm_open(path, &f, &err) != QM_OK) {
        fprintf(stderr, "qmap inspect: %s\n", err.message);
        return 1;
    }
    const qm_header_info *h = qm_file_header(f);
    uint64_t nt = qm_tensor_count(f), nm = qm_meta_count(f);
    dtype_total totals[QM_DTYPE_ID_LIMIT] = { { 0 } };
    for (uint64_t i = 0; i < nt; i++) {
        const qm_tensor *t = qm_tensor_at(f, i);
        totals[t->dtype].tensors++;
        totals[t->dtype].elements += t->n_elements;
        totals[t->dtype].bytes += t->size;
    }
    uint64_t all_elems = 0, all_bytes = 0;
    for (int d = 0; d < QM_DTYPE_ID_LIMIT; d++) { all_elems += totals[d].elements; all_bytes += totals[d].bytes; }
    char hb[32], hb2[32];

    if (json) {
        json_out j = { .fp = stdout };
        json_begin_object(&j, NULL);
        json_cstring(&j, "file", path);
        json_begin_object(&j, "header");
        json_u64(&j, "major_version", h->major_version);
        json_u64(&j, "minor_version", h->minor_version);
        json_u64(&j, "alignment", h->alignment);
        json_u64(&j, "file_size", h->file_size);
        json_u64(&j, "metadata_offset", h->metadata_offset);
        json_u64(&j, "metadata_size", h->metadata_size);
        json_u64(&j, "metadata_count", h->metadata_count);
        json_u64(&j, "table_offset", h->table_offset);
        json_u64(&j, "table_size", h->table_size);
        json_u64(&j, "tensor_count", h->tensor_count);
        json_u64(&j, "data_offset", h->data_offset);
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, h->header_checksum);
        json_cstring(&j, "header_checksum", hex);
        json_end_object(&j);
        json_begin_array(&j, "metadata");
        for (uint64_t i = 0; i < nm; i++) {
            const qm_meta *m = qm_meta_at(f, i);
            char ts[32];
            type_str(m, ts, sizeof ts);
            json_begin_object(&j, NULL);
            json_cstring(&j, "key", m->key);
            json_cstring(&j, "type", ts);
            json_meta_value(&j, m, (uint64_t)max_items);
            json_end_object(&j);
        }
        json_end_array(&j);
        json_begin_array(&j, "tensors");
        for (uint64_t i = 0; i < nt; i++) {
            const qm_tensor *t = qm_tensor_at(f, i);
            json_begin_object(&j, NULL);
            json_cstring(&j, "name", t->name);
            json_cstring(&j, "dtype", qm_dtype_info(t->dtype)->name);
            json_begin_array(&j, "shape");
            for (uint32_t d = 0; d < t->rank; d++) json_u64(&j, NULL, t->dims[d]);
            json_end_array(&j);
            json_u64(&j, "elements", t->n_elements);
            json_u64(&j, "offset", t->offset);
            json_u64(&j, "size", t->size);
            snprintf(hex, sizeof hex, "%016" PRIx64, t->checksum);
            json_cstring(&j, "checksum", hex);
            json_end_object(&j);
        }
        json_end_array(&j);
        json_begin_object(&j, "totals");
        for (uint32_t d = 1; d < QM_DTYPE_ID_LIMIT; d++) {
            if (!totals[d].tensors) continue;
            json_begin_object(&j, qm_dtype_info(d)->name);
            json_u64(&j, "tensors", totals[d].tensors);
            json_u64(&j, "elements", totals[d].elements);
            json_u64(&j, "bytes", totals[d].bytes);
            json_end_object(&j);
        }
        json_u64(&j, "elements", all_elems);
        json_u64(&j, "tensor_bytes", all_bytes);
        json_u64(&j, "file_size", h->file_size);
        json_end_object(&j);
        json_end_object(&j);
        putchar('\n');
        qm_close(f);
        return 0;
    }

    printf("file       %s  (%s, %" PRIu64 " bytes)\n", path, cli_human_bytes(h->file_size, hb, sizeof hb), h->file_size);
    printf("format     %u.%u  (this reader: %d.%d)   alignment %" PRIu64 "\n", h->major_version, h->minor_version,
           QM_MAJOR_VERSION, QM_MINOR_VERSION, h->alignment);
    printf("sections   header 0+128 | metadata %" PRIu64 "+%" PRIu64 " (%" PRIu64 " entries) | table %" PRIu64 "+%" PRIu64
           " (%" PRIu64 " tensors) | data %" PRIu64 "+%" PRIu64 "\n",
           h->metadata_offset, h->metadata_size, h->metadata_count, h->table_offset, h->table_size, h->tensor_count,
           h->data_offset, h->file_size - h->data_offset);
    printf("checksum   %016" PRIx64 " (header, metadata, table: valid)\n", h->header_checksum);

    printf("\nmetadata (%" PRIu64 ")\n", nm);
    size_t kw = 4;
    for (uint64_t i = 0; i < nm; i++) { size_t l = strlen(qm_meta_at(f, i)->key); if (l > kw) kw = l; }
    if (kw > 48) kw = 48;
    for (uint64_t i = 0; i < nm; i++) {
        const qm_meta *m = qm_meta_at(f, i);
        char ts[32];
        type_str(m, ts, sizeof ts);
        printf("  %-*s  %-14s ", (int)kw, m->key, ts);
        text_meta_value(m, (uint64_t)max_items);
        putchar('\n');
    }

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

    printf("\ntotals\n");
    for (uint32_t d = 1; d < QM_DTYPE_ID_LIMIT; d++) {
        if (!totals[d].tensors) continue;
        printf("  %-6s  %6" PRIu64 " tensors  %14" PRIu64 " elements  %s\n", qm_dtype_info(d)->name, totals[d].tensors,
               totals[d].elements, cli_human_bytes(totals[d].bytes, hb, sizeof hb));
    }
    printf("  %-6s  %6" PRIu64 " tensors  %14" PRIu64 " elements  %s of tensor data, file %s\n", "all", nt, all_elems,
           cli_human_bytes(all_bytes, hb, sizeof hb), cli_human_bytes(h->file_size, hb2, sizeof hb2));
    qm_close(f);
    return 0;
}
