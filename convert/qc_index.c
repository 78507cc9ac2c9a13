/* qc_index.c — sharded-checkpoint index files; see qc_index.h. */
#include "qc_index.h"
#include "qc_json.h"
#include "qm_fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Real indexes are a few MB even for the largest models; anything far above that is not an index. */

void qc_index_free(qc_index *ix)
{
    if (!ix) return;
    for (size_t i = 0; i < ix->n_shards; i++) {
        free(ix->shards[i]);
        free(ix->shard_names[i]);
    }
    for (size_t i = 0; i < ix->n_entries; i++) free(ix->entries[i].tensor);
    free(ix->shards);
    free(ix->shard_names);
    free(ix->entries);
    free(ix->by_name);
    free(ix->metadata_json);
    free(ix->path);
    free(ix);
}

/* A shard must name a file next to the index: no directory part, so an index cannot point elsewhere. */
static bool plain_file_name(const char *s)
{
    return s[0] && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/') && !strchr(s, '\\');
}

static char *join_dir(const char *index_path, const char *name)
{
    const char *slash = strrchr(index_path, '/');
    size_t dl = slash ? (size_t)(slash - index_path) + 1 : 0, nl = strlen(name);
    char *r = malloc(dl + nl + 1);
    if (!r) return NULL;
    memcpy(r, index_path, dl);
    memcpy(r + dl, name, nl + 1);
    return r;
}

typedef struct sort_item { const char *name; size_t i; } sort_item;

static int item_cmp(const void *a, const void *b)
{
    const sort_item *x = a, *y = b;
    return strcmp(x->name, y->name);   /* names are distinct: JSON_REJECT_DUPLICATES */
}

/* Entry indices in tensor-name order; NULL on allocation failure. */
static size_t *sort_entries(const qc_index_entry *e, size_t n)
{
    sort_item *it = malloc((n ? n : 1) * sizeof *it);
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!it || !order) {
        free(it);
        free(order);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) it[i] = (sort_item){ e[i].tensor, i };
    qsort(it, n, sizeof *it, item_cmp);
    for (size_t i = 0; i < n; i++) order[i] = it[i].i;
    free(it);
    return order;
}

static qm_status fill(qc_index *ix, json_t *root, qm_error *err)
{
    const char *path = ix->path;
    if (!json_is_object(root))
        return qm_fail(err, QM_ERR_BAD_SOURCE, path, NULL, 0, "index is not a JSON object");
    json_t *meta = json_object_get(root, "metadata");
    if (meta && !json_is_null(meta)) {
        if (!json_is_object(meta))
            return qm_fail(err, QM_ERR_BAD_SOURCE, path, "metadata", QM_NO_OFFSET, "is not an object");
        if (!(ix->metadata_json = json_dumps(meta, JSON_COMPACT | JSON_PRESERVE_ORDER)))
            return qm_fail(err, QM_ERR_NOMEM, path, "metadata", QM_NO_OFFSET, "cannot serialize");
    }
    json_t *wm = json_object_get(root, "weight_map");
    if (!wm) return qm_fail(err, QM_ERR_BAD_SOURCE, path, "weight_map", QM_NO_OFFSET, "index has no \"weight_map\"");
    if (!json_is_object(wm))
        return qm_fail(err, QM_ERR_BAD_SOURCE, path, "weight_map", QM_NO_OFFSET, "is not an object");

    size_t n = json_object_size(wm);
    ix->entries = calloc(n ? n : 1, sizeof *ix->entries);
    ix->shards = calloc(n ? n : 1, sizeof *ix->shards);
    ix->shard_names = calloc(n ? n : 1, sizeof *ix->shard_names);
    if (!ix->entries || !ix->shards || !ix->shard_names)
        return qm_fail(err, QM_ERR_NOMEM, path, "weight_map", QM_NO_OFFSET, "cannot allocate %zu entries", n);

    /* a JSON object serves as the shard-name → position hash, so a crafted index with many entries and
     * many shards stays linear */
    json_t *pos = json_object();
    if (!pos) return qm_fail(err, QM_ERR_NOMEM, path, "weight_map", QM_NO_OFFSET, "out of memory");
    qm_status st = QM_OK;
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val) {
        if (!key[0]) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, path, "weight_map", QM_NO_OFFSET, "empty tensor name");
            break;
        }
        if (!json_is_string(val)) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, path, "weight_map", QM_NO_OFFSET,
                         "shard of tensor '%s' is not a string", key);
            break;
        }
        const char *shard = json_string_value(val);
        if (!plain_file_name(shard)) {
            st = qm_fail(err, QM_ERR_BAD_SOURCE, path, "weight_map", QM_NO_OFFSET,
                         "shard '%s' of tensor '%s' is not a plain file name next to the index", shard, key);
            break;
        }
        json_t *known = json_object_get(pos, shard);
        size_t si = known ? (size_t)json_integer_value(known) : ix->n_shards;
        if (!known) {
            char *nm = strdup(shard), *full = join_dir(path, shard);
            if (!nm || !full || json_object_set_new(pos, shard, json_integer((json_int_t)si)) != 0) {
                free(nm);
                free(full);
                st = qm_fail(err, QM_ERR_NOMEM, path, "weight_map", QM_NO_OFFSET, "out of memory");
                break;
            }
            ix->shard_names[si] = nm;
            ix->shards[si] = full;
            ix->n_shards++;
        }
        if (!(ix->entries[ix->n_entries].tensor = strdup(key))) {
            st = qm_fail(err, QM_ERR_NOMEM, path, "weight_map", QM_NO_OFFSET, "out of memory");
            break;
        }
        ix->entries[ix->n_entries].shard = si;
        ix->n_entries++;
    }
    json_decref(pos);
    if (st != QM_OK) return st;
    ix->by_name = sort_entries(ix->entries, ix->n_entries);
    if (!ix->by_name) return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory");
    return QM_OK;
}

/* Parse `len` bytes of index text read from `path`; the caller has run qc_json_check on them. */
static qm_status parse_checked(const char *path, const char *buf, size_t len, qc_index **out, qm_error *err)
{
    qc_index *ix = calloc(1, sizeof *ix);
    if (!ix || !(ix->path = strdup(path))) {
        free(ix);
        return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory");
    }
    json_error_t jerr;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    qm_status st;
    if (!root) {
        st = qm_fail(err, QM_ERR_BAD_SOURCE, path, NULL, (uint64_t)jerr.position, "not valid JSON: %s", jerr.text);
    } else {
        st = fill(ix, root, err);
        json_decref(root);
    }
    if (st != QM_OK) {
        qc_index_free(ix);
        return st;
    }
    *out = ix;
    return QM_OK;
}

qm_status qc_index_parse(const char *path, const char *buf, size_t len, uint64_t json_limit, qc_index **out,
                         qm_error *err)
{
    *out = NULL;
    if (!buf && len)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, path, NULL, QM_NO_OFFSET, "no buffer for %zu bytes", len);
    if (!buf) buf = "";   /* an empty text: the checks and the parser never see a null pointer */
    qm_status st = qc_json_check(path, buf, len, QC_JSON_INDEX, json_limit, err);
    return st != QM_OK ? st : parse_checked(path, buf, len, out, err);
}

qm_status qc_index_read(const char *path, uint64_t json_limit, qc_index **out, qm_error *err)
{
    *out = NULL;
    char *buf = NULL;
    size_t len = 0;
    /* reads within the size cap, then qc_json_check, so parse_checked gets checked text as from
     * qc_index_parse */
    qm_status st = qc_json_read_file(path, QC_JSON_INDEX, json_limit, &buf, &len, err);
    if (st != QM_OK) return st;
    st = parse_checked(path, buf, len, out, err);
    free(buf);
    return st;
}

/* Position of `name` in the weight_map, or SIZE_MAX. */
static size_t find_entry(const qc_index *ix, const char *name)
{
    size_t lo = 0, hi = ix->n_entries;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ix->entries[ix->by_name[mid]].tensor, name);
        if (c == 0) return ix->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return SIZE_MAX;
}

qm_status qc_index_check(const qc_index *ix, qc_source *const *shards, size_t n, qm_error *err)
{
    if (n != ix->n_shards)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, ix->path, NULL, QM_NO_OFFSET,
                       "%zu shard sources given for %zu shards", n, ix->n_shards);
    bool *seen = calloc(ix->n_entries ? ix->n_entries : 1, sizeof *seen);
    if (!seen) return qm_fail(err, QM_ERR_NOMEM, ix->path, NULL, QM_NO_OFFSET, "out of memory");
    qm_status st = QM_OK;
    for (size_t s = 0; s < n && st == QM_OK; s++) {
        const qc_source *src = shards[s];
        for (uint64_t t = 0; t < src->n_tensors && st == QM_OK; t++) {
            const char *name = src->tensors[t].name;
            size_t e = find_entry(ix, name);
            if (e == SIZE_MAX)
                st = qm_fail(err, QM_ERR_BAD_SOURCE, ix->path, "weight_map", QM_NO_OFFSET,
                             "shard %s holds tensor '%s', which the weight_map does not list", ix->shards[s], name);
            else if (ix->entries[e].shard != s)
                st = qm_fail(err, QM_ERR_BAD_SOURCE, ix->path, "weight_map", QM_NO_OFFSET,
                             "shard %s holds tensor '%s', which the weight_map puts in %s", ix->shards[s], name,
                             ix->shard_names[ix->entries[e].shard]);
            else if (seen[e])
                st = qm_fail(err, QM_ERR_BAD_SOURCE, ix->path, "weight_map", QM_NO_OFFSET,
                             "shard %s holds tensor '%s' twice", ix->shards[s], name);
            else
                seen[e] = true;
        }
    }
    for (size_t e = 0; e < ix->n_entries && st == QM_OK; e++)
        if (!seen[e])
            st = qm_fail(err, QM_ERR_BAD_SOURCE, ix->path, "weight_map", QM_NO_OFFSET,
                         "tensor '%s' is listed in shard %s but missing from it", ix->entries[e].tensor,
                         ix->shards[ix->entries[e].shard]);
    free(seen);
    return st;
}
