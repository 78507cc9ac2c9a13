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

qm_status qc_open_raw_dump(const char *dir, uint64_t json_limit, qc_source **out, qm_error *err)
{
    *out = NULL;
    qc_source *s = qc_source_new("raw float32 dump", dir);
    if (!s) return qm_fail(err, QM_ERR_NOMEM, dir, NULL, QM_NO_OFFSET, "out of memory");
    qm_status st = QM_OK;
    json_t *root = NULL;
    char *real_dir = NULL;
    char *mpath = join(dir, "manifest.json");
    if (!mpath) { st = qm_fail(err, QM_ERR_NOMEM, dir, NULL, QM_NO_OFFSET, "out of memory"); goto done; }

    uint32_t mf;
    if ((st = qc_source_map_file(s, mpath, &mf, err)) != QM_OK) goto done;
    /* an empty file is mapped as NULL: give the checks and the parser an empty text, not a null pointer */
    const char *text = s->files[mf].data ? (const char *)s->files[mf].data : "";
    if ((st = qc_json_check(mpath, text, (size_t)s->files[mf].size, QC_JSON_MANIFEST, json_limit, err)) != QM_OK)
        goto done;
    json_error_t je;
    root = json_loadb(text, (size_t)s->files[mf].size, JSON_REJECT_DUPLICATES, &je);
    if (!root || !json_is_object(root)) {
        st = qm_fail(err, QM_ERR_BAD_SOURCE, mpath, NULL, root ? QM_NO_OFFSET : (uint64_t)je.position,
                     "not a JSON object: %s", root ? "top level has another type" : je.text);
        goto done;
    }
    const char *format = json_string_value(json_object_get(root, "format"));
    if (!format || strcmp(format, "qmap-raw-dump") != 0) {
        st = qm_fail(err, QM_ERR_BAD_SOURCE, mpath, "format", QM_NO_OFFSET,
                     "\"format\" must be \"qmap-raw-dump\" (convert/export_torch.py writes it)");
        goto done;
    }
    json_t *ver = json_object_get(root, "version");
    if (!json_is_integer(ver) || json_integer_value(ver) != 1) {
        st = qm_fail(err, QM_ERR_UNSUPPORTED, mpath, "version", QM_NO_OFFSET,
                     "manifest version must be 1 (this qmap reads version 1)");
        goto done;
    }
    /* Keys are checked, not skipped: an ignored "offset": -1 would convert something else than meant. */
    static const char *const top_keys[] = { "format", "version", "tensors", "arch", "config", "layers", "skipped", NULL };
    static const char *const tensor_keys[] = { "file", "shape", "dtype", NULL };
    if ((st = known_keys(root, top_keys, mpath, "")) != QM_OK) goto done;
    json_t *tensors = json_object_get(root, "tensors");
    if (!json_is_object(tensors)) {
        st = qm_fail(err, QM_ERR_BAD_SOURCE, mpath, "tensors", QM_NO_OFFSET, "\"tensors\" must be an object");
        goto done;
    }
    real_dir = realpath(dir, NULL);
    const char *key;
    json_t *e;
    json_object_foreach(tensors, key, e) {
        char field[64];
        snprintf(field, sizeof field, "tensors.%.50s", key);
        const char *file = json_string_value(json_object_get(e, "file"));
        const char *dtype = json_string_value(json_object_get(e, "dtype"));
        json_t *shape = json_object_get(e, "shape");
        if (!json_is_object(e) || !file || !json_is_array(shape)) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, mpath, field, QM_NO_OFFSET,
                         "each tensor needs \"file\" (string) and \"shape\" (array)");
            goto done;
        }
        if ((st = known_keys(e, tensor_keys, mpath, field)) != QM_OK) goto done;
        if (dtype && strcmp(dtype, "float32") != 0) {
            st = qm_fail(err, QM_ERR_UNSUPPORTED, mpath, field, QM_NO_OFFSET,
                         "dtype \"%.32s\": raw dumps hold float32 only", dtype);
            goto done;
        }
        if (!plain_file_name(file)) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, mpath, field, QM_NO_OFFSET,
                         "file \"%.200s\" is not a plain file name inside the dump directory", file);
            goto done;
        }
        size_t rank = json_array_size(shape);
        if (rank > QC_MAX_RANK) {
            st = qm_fail(err, QM_ERR_UNSUPPORTED, mpath, field, QM_NO_OFFSET, "rank %zu; at most %d", rank,
                         QC_MAX_RANK);
            goto done;
        }
        uint64_t dims[QC_MAX_RANK], n = 1;
        for (size_t i = 0; i < rank; i++) {
            json_t *d = json_array_get(shape, i);
            if (!json_is_integer(d) || json_integer_value(d) < 0) {
                st = qm_fail(err, QM_ERR_BAD_SOURCE, mpath, field, QM_NO_OFFSET,
                             "shape[%zu] is not a non-negative integer", i);
                goto done;
            }
            dims[i] = (uint64_t)json_integer_value(d);
            if (!qm_mul_u64(n, dims[i], &n)) {
                st = qm_fail(err, QM_ERR_BAD_SOURCE, mpath, field, QM_NO_OFFSET, "element count overflows");
                goto done;
            }
        }
        uint64_t nbytes;
        if (!qm_mul_u64(n, 4, &nbytes)) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, mpath, field, QM_NO_OFFSET, "byte size overflows");
            goto done;
        }
        char *path = join(dir, file);
        if (!path) { st = qm_fail(err, QM_ERR_NOMEM, dir, NULL, QM_NO_OFFSET, "out of memory"); goto done; }
        uint32_t fi, si;
        /* the name is plain, but a symlink could still lead out of the dump directory: resolve both */
        char *real = realpath(path, NULL);
        bool resolved = real != NULL;
        bool inside = resolved && real_dir && !strncmp(real, real_dir, strlen(real_dir)) && real[strlen(real_dir)] == '/';
        free(real);
        if (!inside) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, path, field, QM_NO_OFFSET, "%s",
                         resolved ? "leads outside the dump directory (a symbolic link?)" : "cannot be resolved");
            free(path);
            goto done;
        }
        st = qc_source_map_file(s, path, &fi, err);
        if (st == QM_OK && s->files[fi].size != nbytes)
            st = qm_fail(err, QM_ERR_BAD_SOURCE, path, key, QM_NO_OFFSET,
                         "file holds %llu bytes; shape needs %llu (%llu float32 values)",
                         (unsigned long long)s->files[fi].size, (unsigned long long)nbytes, (unsigned long long)n);
        free(path);
        if (st != QM_OK) goto done;
        if ((st = qc_source_add_storage(s, key, QC_STORAGE_MAPPED, fi, 0, 0, nbytes, &si, err)) != QM_OK) goto done;
        if ((st = qc_source_add_tensor(s, key, QC_F32, (uint32_t)rank, dims, NULL, 0, si, err)) != QM_OK) goto done;
        if ((st = qc_tensor_check(s, &s->tensors[s->n_tensors - 1], err)) != QM_OK) goto done;
    }
    json_t *config = json_object_get(root, "config");
    if (config && !json_is_null(config)) {
        if (!json_is_object(config)) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, mpath, "config", QM_NO_OFFSET, "\"config\" must be an object");
            goto done;
        }
        s->config_json = json_dumps(config, JSON_COMPACT | JSON_PRESERVE_ORDER);
    }
    s->manifest_json = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!s->manifest_json || (config && !json_is_null(config) && !s->config_json))
        st = qm_fail(err, QM_ERR_NOMEM, mpath, NULL, QM_NO_OFFSET, "out of memory");
done:
    json_decref(root);
    free(mpath);
    free(real_dir);
    if (st != QM_OK) qc_source_free(s);
    else *out = s;
    return st;
}
