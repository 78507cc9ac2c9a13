/* qc_import.c — the importer table: one row per input format `qmap convert` reads, and the one path
 * that opens an input, sniffs it and hands it to its row.
 *
 * An input is opened once: qc_open_input maps the file (through qm_open_regular, so a FIFO or device is
 * refused before a byte is read), every row's sniff looks at that mapping, and the chosen row's parser
 * reads the same mapping as the source's first file, under a guard (a file that shrinks meanwhile is an
 * error, not a SIGBUS). Rows are tried in table order; the zip rows come
 * first because a zip is recognised by its entries, not only by its first bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "qc_index.h"
#include "qc_source.h"
#include "qm_guard.h"

/* ---- sniffs: each judges as little as it can, so that the parser can say what is wrong ---- */

static bool starts_with(const uint8_t *d, size_t len, const void *magic, size_t n)
{
    return len >= n && !memcmp(d, magic, n);
}

static bool is_zip(const uint8_t *d, size_t len)
{
    return starts_with(d, len, "PK\x03\x04", 4) || starts_with(d, len, "PK\x05\x06", 4);
}

/* True if some entry name of the zip at d ends with `suffix`; *readable says whether libzip read it. */
static bool zip_has_entry_ending(const uint8_t *d, size_t len, const char *suffix, bool *readable)
{
    zip_error_t ze;
    zip_error_init(&ze);
    zip_source_t *zs = zip_source_buffer_create(d, len, 0, &ze);
    zip_t *z = zs ? zip_open_from_source(zs, ZIP_RDONLY, &ze) : NULL;
    zip_error_fini(&ze);
    *readable = z != NULL;
    if (!z) {
        zip_source_free(zs);
        return false;
    }
    bool found = false;
    size_t n_suffix = strlen(suffix);
    zip_int64_t n = zip_get_num_entries(z, 0);
    for (zip_int64_t i = 0; i < n && !found; i++) {
        const char *name = zip_get_name(z, (zip_uint64_t)i, 0);
        size_t nl = name ? strlen(name) : 0;
        found = nl >= n_suffix && !strcmp(name + nl - n_suffix, suffix);
    }
    zip_discard(z);                  /* frees zs too */
    return found;
}

/* A zip with data.pkl, or one libzip cannot read at all: the torch importer then reports libzip's reason. */
static bool sniff_torch_zip(const uint8_t *d, size_t len)
{
    bool readable;
    if (!is_zip(d, len)) return false;
    return zip_has_entry_ending(d, len, "data.pkl", &readable) || !readable;
}

static bool sniff_npz(const uint8_t *d, size_t len)
{
    bool readable;
    return is_zip(d, len) && zip_has_entry_ending(d, len, ".npy", &readable);
}

static bool sniff_npy(const uint8_t *d, size_t len) { return starts_with(d, len, "\x93NUMPY", 6); }

static bool sniff_legacy_torch(const uint8_t *d, size_t len)
{
    static const uint8_t magic[] = { 0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8,
                                     0x50, 0x19 };
    return starts_with(d, len, magic, sizeof magic);
}

/* A u64 length then the JSON header's '{'. The length is not judged here, so that the importer can say
 * what is wrong with it instead of "unknown input". */
static bool sniff_safetensors(const uint8_t *d, size_t len) { return len >= 9 && d[8] == '{'; }

/* A JSON object (blanks first allowed, within the first 64 bytes): a sharded checkpoint's index. */
static bool sniff_json_object(const uint8_t *d, size_t len)
{
    size_t i = 0, head = len < 64 ? len : 64;
    while (i < head && (d[i] == ' ' || d[i] == '\n' || d[i] == '\r' || d[i] == '\t')) i++;
    return i < head && d[i] == '{';
}

/* ---- the table ---- */

static const qc_importer importers[] = {
    { QC_INPUT_RAW_DUMP, "raw float32 dump", NULL, NULL, qc_open_raw_dump, NULL },
    { QC_INPUT_TORCH_ZIP, "torch.save zip", sniff_torch_zip, qc_parse_torch_zip, NULL, NULL },
    { QC_INPUT_NPZ, "numpy .npz", sniff_npz, qc_parse_npz, NULL, NULL },
    { QC_INPUT_ZIP_OTHER, "zip (neither torch.save nor .npz)", is_zip, NULL, NULL,
      "a zip archive that is neither a torch.save file (no data.pkl) nor an .npz (no .npy entries)" },
    { QC_INPUT_NPY, "numpy .npy", sniff_npy, qc_parse_npy, NULL, NULL },
    { QC_INPUT_LEGACY_TORCH, "legacy torch.save", sniff_legacy_torch, qc_parse_torch_zip, NULL, NULL },
    { QC_INPUT_SAFETENSORS, "safetensors", sniff_safetensors, qc_parse_safetensors, NULL, NULL },
    { QC_INPUT_SHARD_INDEX, "shard index JSON", sniff_json_object, NULL, NULL, NULL },
};
#define N_IMPORTERS (sizeof importers / sizeof importers[0])

const qc_importer *qc_importer_of(qc_input_kind kind)
{
    for (size_t i = 0; i < N_IMPORTERS; i++)
        if (importers[i].kind == kind) return &importers[i];
    return NULL;
}

const qc_importer *qc_importer_sniff(const void *data, size_t len)
{
    const uint8_t *d = data;
    if (len < 4 || !d) return NULL;  /* no format here is shorter than its magic */
    for (size_t i = 0; i < N_IMPORTERS; i++)
        if (importers[i].sniff && importers[i].sniff(d, len)) return &importers[i];
    return NULL;
}

/* The names of the formats read, from the table, for the message about an unknown input. */
static void list_formats(char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < N_IMPORTERS && used < size; i++) {
        if (importers[i].refusal) continue;
        int n = snprintf(out + used, size - used, "%s%s", used ? ", " : "", importers[i].name);
        if (n > 0) used += (size_t)n;
    }
}

/* ---- opening ---- */

static qm_status parse_as(const qc_importer *imp, qc_source *s, uint32_t fi, qm_error *err)
{
    if (imp->refusal) return qm_fail(err, QM_ERR_BAD_SOURCE, s->path, NULL, QM_NO_OFFSET, "%s", imp->refusal);
    if (!imp->parse)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, s->path, NULL, QM_NO_OFFSET, "%s is not a tensor source",
                       imp->name);
    s->kind = imp->name;
    s->input = imp->kind;
    return imp->parse(s, fi, err);
}

static qm_status open_directory(const char *path, uint64_t json_limit, qc_source **out,
                                const qc_importer **kind, qm_error *err)
{
    char manifest[4200];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", path);
    if (access(manifest, F_OK) != 0)
        return qm_fail(err, QM_ERR_BAD_SOURCE, path, NULL, QM_NO_OFFSET,
                       "directory has no manifest.json (a raw dump written by convert/export_torch.py); "
                       "give the checkpoint file itself");
    const qc_importer *imp = qc_importer_of(QC_INPUT_RAW_DUMP);
    *kind = imp;
    qm_status st = imp->open_dir(path, json_limit, out, err);
    if (st == QM_OK) (*out)->input = imp->kind;
    return st;
}

/* Sniff the mapped file s->files[fi] and read it with its row; for an index, read the index from it and
 * drop the source. Frees s on failure. */
static qm_status read_mapped(qc_source *s, uint32_t fi, uint64_t json_limit, qc_source **out, qc_index **index,
                             const qc_importer **kind, qm_error *err)
{
    const qc_file *f = &s->files[fi];
    const qc_importer *imp = qc_importer_sniff(f->data, (size_t)f->size);
    *kind = imp;
    if (!imp) {
        char formats[300];
        list_formats(formats, sizeof formats);
        qm_status st = qm_fail(err, QM_ERR_BAD_SOURCE, s->path, NULL, QM_NO_OFFSET, "not a checkpoint qmap reads (%s)",
                               formats);
        return qc_source_hand_over(s, st, out);
    }
    if (imp->kind == QC_INPUT_SHARD_INDEX) {
        qm_status st = qc_index_parse(s->path, (const char *)f->data, (size_t)f->size, json_limit, index, err);
        qc_source_free(s);
        return st;
    }
    return qc_source_hand_over(s, parse_as(imp, s, fi, err), out);
}

/* The file is mapped once, as the first file of a source of no kind yet, and everything after reads that
 * mapping: a file that shrinks meanwhile is an error naming it (format/qm_guard.h), not a SIGBUS. */
static qm_status open_file(const char *path, uint64_t json_limit, qc_source **out, qc_index **index,
                           const qc_importer **kind, qm_error *err)
{
    qc_source *s = qc_source_new("?", path);
    if (!s) return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory");
    uint32_t fi = 0;
    qm_status st = qc_source_map_file(s, path, &fi, err);
    if (st != QM_OK) return qc_source_hand_over(s, st, out);
    const uint8_t *base = s->files[fi].data;
    qm_guard g;
    qm_guard_push(&g, base, (size_t)s->files[fi].size);
    if (sigsetjmp(g.jump, 0)) {
        qm_guard_pop(&g);
        *out = NULL;                 /* what the parser had built is dropped with the source */
        qm_status gs = qm_guard_fail(&g, err, path, base);
        qc_source_free(s);
        return gs;
    }
    st = read_mapped(s, fi, json_limit, out, index, kind, err);
    qm_guard_pop(&g);
    return st;
}

qm_status qc_open_input(const char *path, uint64_t json_limit, qc_source **out, qc_index **index,
                        const qc_importer **kind, qm_error *err)
{
    const qc_importer *unused;
    if (!kind) kind = &unused;
    *out = NULL;
    *index = NULL;
    *kind = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return open_directory(path, json_limit, out, kind, err);
    return open_file(path, json_limit, out, index, kind, err);
}

/* A source of `kind` whose first file is the mapping of `path` (map) or the caller's buffer. */
static qm_status open_as(qc_input_kind kind, const char *path, bool map, const void *data, size_t len,
                         qc_source **out, qm_error *err)
{
    *out = NULL;
    const qc_importer *imp = qc_importer_of(kind);
    if (!imp || !imp->parse)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, path, NULL, QM_NO_OFFSET, "input kind %d is not a file importer",
                       (int)kind);
    qc_source *s = qc_source_new(imp->name, path);
    if (!s) return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory");
    uint32_t fi = 0;
    qm_status st = map ? qc_source_map_file(s, path, &fi, err) : qc_source_add_buffer(s, path, data, len, &fi, err);
    if (st == QM_OK) st = parse_as(imp, s, fi, err);
    return qc_source_hand_over(s, st, out);
}

qm_status qc_open_file(qc_input_kind kind, const char *path, qc_source **out, qm_error *err)
{
    return open_as(kind, path, true, NULL, 0, out, err);
}

qm_status qc_open_buffer(qc_input_kind kind, const void *data, size_t len, const char *name, qc_source **out,
                         qm_error *err)
{
    if (!data && len) {
        *out = NULL;
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, name, NULL, QM_NO_OFFSET, "no buffer for %zu bytes", len);
    }
    return open_as(kind, name ? name : "(buffer)", false, data, len, out, err);
}
