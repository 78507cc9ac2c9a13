/* qc_index.h — sharded-checkpoint index files (`model.safetensors.index.json`,
 * `pytorch_model.bin.index.json`).
 *
 * An index is a JSON object {"metadata": {…} (optional), "weight_map": {tensor name: shard file name}}.
 * qc_index_read() validates it (duplicate keys refused; shard names must be plain file names: not empty,
 * no '/' or '\\', not "." or "..") and resolves each shard against the index file's directory. The caller
 * opens the shards (in ix->shards order) with the importer of their kind, then calls qc_index_check()
 * to make sure the shards hold exactly the tensors the weight_map lists, each in its named shard.
 *
 * Ownership: a qc_index owns every string and array it points to; qc_index_free() releases them all.
 * It does not own or keep the shards passed to qc_index_check(). Fields are read-only for callers.
 */
#ifndef QC_INDEX_H
#define QC_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "qc_source.h"
#include "qm_error.h"

typedef struct qc_index_entry {
    char *tensor;                    /* tensor name, UTF-8 */
    size_t shard;                    /* index into qc_index.shards */
} qc_index_entry;

typedef struct qc_index {
    char *path;                      /* the index file as given */
    char **shards;                   /* resolved shard paths, distinct, in order of first appearance */
    char **shard_names;              /* the same shards as written in the weight_map (for messages) */
    size_t n_shards;
    qc_index_entry *entries;         /* the weight_map, in file order */
    size_t n_entries;
    char *metadata_json;             /* compact JSON of "metadata", or NULL when absent */
    size_t *by_name;                 /* internal: entry indices sorted by tensor name */
} qc_index;

/* Read and validate the index at `path`. On success *out receives a new index (free with
 * qc_index_free); on failure *out is NULL and err says why (QM_ERR_IO, QM_ERR_BAD_SOURCE, QM_ERR_NOMEM, and
 * QM_ERR_UNSUPPORTED above the caps of qc_json.h, kind QC_JSON_INDEX; json_limit: --json-limit in bytes or 0). */
qm_status qc_index_read(const char *path, uint64_t json_limit, qc_index **out, qm_error *err);

/* The same over `len` bytes of index text already in memory (fuzz targets, tests): checked by
 * qc_json_check (kind QC_JSON_INDEX) before parsing, as qc_index_read does; `path` is where the index
 * lives (shards are resolved against its directory) and names it in messages. The buffer need not be
 * NUL-terminated and is not kept; it may be NULL when len is 0 (else QM_ERR_INVALID_ARGUMENT). Errors as
 * qc_index_read but for QM_ERR_IO. */
qm_status qc_index_parse(const char *path, const char *buf, size_t len, uint64_t json_limit, qc_index **out,
                         qm_error *err);

/* shards[i] must be the source opened from ix->shards[i], and n == ix->n_shards. QM_ERR_BAD_SOURCE if a
 * weight_map tensor is missing from its shard, a shard holds a tensor the weight_map does not list, or
 * lists under another shard; QM_ERR_INVALID_ARGUMENT if n differs from ix->n_shards. */
qm_status qc_index_check(const qc_index *ix, qc_source *const *shards, size_t n, qm_error *err);

void qc_index_free(qc_index *ix);    /* NULL allowed */

#endif /* QC_INDEX_H */
