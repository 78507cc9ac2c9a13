/* qc_raw.c — the raw float32 dump importer: a directory of little-endian float32 files (one per tensor)
 * and a manifest.json naming each file, its shape and dtype, plus the model config (convert/export_torch.py
 * writes it; spec/ARCHITECTURES.md section 2 describes it). */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "qc_json.h"
#include "qc_source.h"
#include "qm_bytes.h"


/* A manifest file name must stay inside the directory: no separators, not "." or "..". */
static bool plain_file_name(const char *s)
{
    if (!*s || !strcmp(s, ".") || !strcmp(s, "..")) return false;
    for (const char *p = s; *p; p++) if (*p == '/' || *p == '\\') return false;
    return true;
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Every key of object o must be one of `known` (NULL-terminated): an unknown one is refused by name. */
static qm_status known_keys_in(const json_t *o, const char *const *known, const char *path, const char *where,
                               qm_error *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        bool ok = false;
        for (size_t i = 0; known[i] && !ok; i++) ok = !strcmp(known[i], k);
        if (!ok)
            return qm_fail(err, QM_ERR_BAD_SOURCE, path, where[0] ? where : NULL, QM_NO_OFFSET,
                           "unknown key \"%.64s\" (spec/ARCHITECTURES.md §2 lists the keys a manifest may hold)", k);
    }
    return QM_OK;
}
#define known_keys(o, known, path, where) known_keys_in(o, known, path, where, err)

/* Maps and parses dir/manifest.json and checks its format, version and top-level keys; *root owns the
 * parsed object (NULL on failure). */
static qm_status load_manifest(qc_source *s, const char *mpath, uint64_t json_limit, json_t **root,
                               qm_error *err)
{
    qm_status st;
    uint32_t mf;
    *root = NULL;
    if ((st = qc_source_map_file(s, mpath, &mf, err)) != QM_OK) return st;
    /* an empty file is mapped as NULL: give the checks and the parser an empty text, not a null pointer */
    const char *text = s->files[mf].data ? (const char *)s->files[mf].data : "";
    if ((st = qc_json_check(mpath, text, (size_t)s->files[mf].size, QC_JSON_MANIFEST, json_limit, err)) != QM_OK)
        return st;
    json_error_t je;
    json_t *r = json_loadb(text, (size_t)s->files[mf].size, JSON_REJECT_DUPLICATES, &je);
    if (!r || !json_is_object(r)) {
        st = qm_fail(err, QM_ERR_BAD_SOURCE, mpath, NULL, r ? QM_NO_OFFSET : (uint64_t)je.position,
                     "not a JSON object: %s", r ? "top level has another type" : je.text);
        json_decref(r);
        return st;
    }
    *root = r;
    const char *format = json_string_value(json_object_get(r, "format"));
    if (!format || strcmp(format, "qmap-raw-dump") != 0)
        return qm_fail(err, QM_ERR_BAD_SOURCE, mpath, "format", QM_NO_OFFSET,
                       "\"format\" must be \"qmap-raw-dump\" (convert/export_torch.py writes it)");
    json_t *ver = json_object_get(r, "version");
    if (!json_is_integer(ver) || json_integer_value(ver) != 1)
        return qm_fail(err, QM_ERR_UNSUPPORTED, mpath, "version", QM_NO_OFFSET,
                       "manifest version must be 1 (this qmap reads version 1)");
    /* Keys are checked, not skipped: an ignored "offset": -1 would convert something else than meant. */
    static const char *const top_keys[] = { "format", "version", "tensors", "arch", "config", "layers", "skipped", NULL };
    return known_keys(r, top_keys, mpath, "");
}

/* A tensor's "shape" into dims; *n is its element count. */
static qm_status read_shape(const json_t *shape, const char *mpath, const char *field, uint64_t dims[QC_MAX_RANK],
                            size_t *rank_out, uint64_t *n_out, qm_error *err)
{
    size_t rank = json_array_size(shape);
    if (rank > QC_MAX_RANK)
        return qm_fail(err, QM_ERR_UNSUPPORTED, mpath, field, QM_NO_OFFSET, "rank %zu; at most %d", rank,
                       QC_MAX_RANK);
    uint64_t n = 1;
    for (size_t i = 0; i < rank; i++) {
        json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return qm_fail(err, QM_ERR_BAD_SOURCE, mpath, field, QM_NO_OFFSET,
                           "shape[%zu] is not a non-negative integer", i);
        dims[i] = (uint64_t)json_integer_value(d);
        if (!qm_mul_u64(n, dims[i], &n))
            return qm_fail(err, QM_ERR_BAD_SOURCE, mpath, field, QM_NO_OFFSET, "element count overflows");
    }
    *rank_out = rank;
    *n_out = n;
    return QM_OK;
}

/* Maps dir/file, which must resolve inside real_dir and hold exactly nbytes (n float32 values). */
static qm_status map_tensor_file(qc_source *s, const char *dir, const char *real_dir, const char *file,
                                 const char *key, const char *field, uint64_t n, uint64_t nbytes, uint32_t *fi,
                                 qm_error *err)
{
    char *path = join(dir, file);
    if (!path) return qm_fail(err, QM_ERR_NOMEM, dir, NULL, QM_NO_OFFSET, "out of memory");
    /* the name is plain, but a symlink could still lead out of the dump directory: resolve both */
    char *real = realpath(path, NULL);
    bool resolved = real != NULL;
    bool inside = resolved && real_dir && !strncmp(real, real_dir, strlen(real_dir)) && real[strlen(real_dir)] == '/';
    free(real);
    qm_status st;
    if (!inside) {
        st = qm_fail(err, QM_ERR_BAD_SOURCE, path, field, QM_NO_OFFSET, "%s",
                     resolved ? "leads outside the dump directory (a symbolic link?)" : "cannot be resolved");
        free(path);
        return st;
    }
    st = qc_source_map_file(s, path, fi, err);
    if (st == QM_OK && s->files[*fi].size != nbytes)
        st = qm_fail(err, QM_ERR_BAD_SOURCE, path, key, QM_NO_OFFSET,
                     "file holds %llu bytes; shape needs %llu (%llu float32 values)",
                     (unsigned long long)s->files[*fi].size, (unsigned long long)nbytes, (unsigned long long)n);
    free(path);
    return st;
}

/* One entry of "tensors": checks it, maps its file and adds it to s as a float32 tensor. */
static qm_status add_manifest_tensor(qc_source *s, const char *dir, const char *real_dir, const char *mpath,
                                     const char *key, const json_t *e, qm_error *err)
{
    static const char *const tensor_keys[] = { "file", "shape", "dtype", NULL };
    qm_status st;
    char field[64];
    snprintf(field, sizeof field, "tensors.%.50s", key);
    const char *file = json_string_value(json_object_get(e, "file"));
    const char *dtype = json_string_value(json_object_get(e, "dtype"));
    json_t *shape = json_object_get(e, "shape");
    if (!json_is_object(e) || !file || !json_is_array(shape))
        return qm_fail(err, QM_ERR_BAD_SOURCE, mpath, field, QM_NO_OFFSET,
                       "each tensor needs \"file\" (string) and \"shape\" (array)");
    if ((st = known_keys(e, tensor_keys, mpath, field)) != QM_OK) return st;
    if (dtype && strcmp(dtype, "float32") != 0)
        return qm_fail(err, QM_ERR_UNSUPPORTED, mpath, field, QM_NO_OFFSET,
                       "dtype \"%.32s\": raw dumps hold float32 only", dtype);
    if (!plain_file_name(file))
        return qm_fail(err, QM_ERR_BAD_SOURCE, mpath, field, QM_NO_OFFSET,
                       "file \"%.200s\" is not a plain file name inside the dump directory", file);
    uint64_t dims[QC_MAX_RANK] = { 0 }, n = 0;
    size_t rank = 0;
    if ((st = read_shape(shape, mpath, field, dims, &rank, &n, err)) != QM_OK) return st;
    uint64_t nbytes;
    if (!qm_mul_u64(n, 4, &nbytes))
        return qm_fail(err, QM_ERR_BAD_SOURCE, mpath, field, QM_NO_OFFSET, "byte size overflows");
    uint32_t fi, si;
    if ((st = map_tensor_file(s, dir, real_dir, file, key, field, n, nbytes, &fi, err)) != QM_OK) return st;
    if ((st = qc_source_add_storage(s, key, QC_STORAGE_MAPPED, fi, 0, 0, nbytes, &si, err)) != QM_OK) return st;
    if ((st = qc_source_add_tensor(s, key, QC_F32, (uint32_t)rank, dims, NULL, 0, si, err)) != QM_OK) return st;
    return qc_tensor_check(s, &s->tensors[s->n_tensors - 1], err);
}

static qm_status add_manifest_tensors(qc_source *s, const char *dir, const char *mpath, const json_t *root,
                                      qm_error *err)
{
    json_t *tensors = json_object_get(root, "tensors");
    if (!json_is_object(tensors))
        return qm_fail(err, QM_ERR_BAD_SOURCE, mpath, "tensors", QM_NO_OFFSET, "\"tensors\" must be an object");
    char *real_dir = realpath(dir, NULL);
    qm_status st = QM_OK;
    const char *key;
    json_t *e;
    json_object_foreach(tensors, key, e) {
        if ((st = add_manifest_tensor(s, dir, real_dir, mpath, key, e, err)) != QM_OK) break;
    }
    free(real_dir);
    return st;
}

/* Keeps the manifest and its "config" as compact JSON text in s. */
static qm_status keep_manifest_text(qc_source *s, const char *mpath, const json_t *root, qm_error *err)
{
    json_t *config = json_object_get(root, "config");
    if (config && !json_is_null(config)) {
        if (!json_is_object(config))
            return qm_fail(err, QM_ERR_BAD_SOURCE, mpath, "config", QM_NO_OFFSET, "\"config\" must be an object");
        s->config_json = json_dumps(config, JSON_COMPACT | JSON_PRESERVE_ORDER);
    }
    s->manifest_json = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!s->manifest_json || (config && !json_is_null(config) && !s->config_json))
        return qm_fail(err, QM_ERR_NOMEM, mpath, NULL, QM_NO_OFFSET, "out of memory");
    return QM_OK;
}

qm_status qc_open_raw_dump(const char *dir, uint64_t json_limit, qc_source **out, qm_error *err)
{
    *out = NULL;
    qc_source *s = qc_source_new("raw float32 dump", dir);
    if (!s) return qm_fail(err, QM_ERR_NOMEM, dir, NULL, QM_NO_OFFSET, "out of memory");
    qm_status st;
    json_t *root = NULL;
    char *mpath = join(dir, "manifest.json");
    if (!mpath)
        st = qm_fail(err, QM_ERR_NOMEM, dir, NULL, QM_NO_OFFSET, "out of memory");
    else if ((st = load_manifest(s, mpath, json_limit, &root, err)) == QM_OK &&
             (st = add_manifest_tensors(s, dir, mpath, root, err)) == QM_OK)
        st = keep_manifest_text(s, mpath, root, err);
    json_decref(root);
    free(mpath);
    if (st != QM_OK) qc_source_free(s);
    else *out = s;
    return st;
}
