/* qc_json.h — the size rules every JSON file `qmap convert` reads goes through, checked before parsing.
 *
 * jansson builds the whole tree before any importer can look at it, and a tree costs far more than its
 * text: an empty array `[]` (3 bytes with its comma) takes about 136 bytes of heap, an empty object about
 * 232 (measured with jansson 2.14). So a 50 MB file of small nested arrays would take gigabytes before an
 * importer could refuse it. Two caps stop that, both before json_loadb runs:
 *
 *   1. the file's size, per kind of file (QC_JSON_DEFAULT_CAP_*: each well above the largest real one);
 *   2. an upper estimate of the tree's heap, counted by one pass over the text (containers, members,
 *      strings, values), at most QC_JSON_TREE_FACTOR × the size cap.
 *
 * `qmap convert --json-limit MIB` sets the size cap of every kind (the tree budget follows), for the rare
 * genuine file above a default. Nothing here keeps state; the functions only read their arguments.
 */
#ifndef QC_JSON_H
#define QC_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"

typedef enum qc_json_kind {
    QC_JSON_TOKENIZER,    /* tokenizer.json, vocab.json, tokenizer_config.json, special_tokens_map.json */
    QC_JSON_CONFIG,       /* config.json (and a config given with --config) */
    QC_JSON_INDEX,        /* model.safetensors.index.json, pytorch_model.bin.index.json */
    QC_JSON_MANIFEST,     /* a raw dump's manifest.json */
} qc_json_kind;

/* Largest real files seen: tokenizer.json ~35 MB (Gemma 3), config.json ~0.1 MB, an index of a 405B
 * model ~0.1 MB, a manifest of a 1,000-layer dump ~0.5 MB. */
#define QC_JSON_DEFAULT_CAP_TOKENIZER (64ull << 20)
#define QC_JSON_DEFAULT_CAP_CONFIG    (4ull << 20)
#define QC_JSON_DEFAULT_CAP_INDEX     (16ull << 20)
#define QC_JSON_DEFAULT_CAP_MANIFEST  (16ull << 20)
#define QC_JSON_TREE_FACTOR           8u
#define QC_JSON_MAX_LIMIT             (1ull << 40)   /* --json-limit above this is refused by the CLI */

/* The size cap in bytes for `kind`: `limit` if non-zero (the user's --json-limit, in bytes), else the
 * kind's default. */
uint64_t qc_json_cap(qc_json_kind kind, uint64_t limit);

/* Estimated heap bytes jansson needs to parse `text` (len bytes): an upper estimate within about 2× of
 * what jansson 2.14 allocates, from one pass that counts objects, arrays, members, strings and values
 * outside string literals. Never fails; malformed text gets an estimate too (the parser rejects it). */
uint64_t qc_json_tree_estimate(const char *text, size_t len);

/* Refuse `text` (len bytes, read from `path`) if it is above the cap of `kind` or its estimated tree is
 * above QC_JSON_TREE_FACTOR × that cap: QM_ERR_UNSUPPORTED naming the file, both figures and the flag
 * that raises them. QM_OK otherwise. */
qm_status qc_json_check(const char *path, const char *text, size_t len, qc_json_kind kind, uint64_t limit,
                        qm_error *err);

/* Read the whole regular file `path` (NUL-terminated, malloc'd; the caller frees *out) after checking
 * its size against the cap of `kind`, then qc_json_check it. Errors as qc_read_small_file and
 * qc_json_check. */
qm_status qc_json_read_file(const char *path, qc_json_kind kind, uint64_t limit, char **out, size_t *len,
                            qm_error *err);

#endif /* QC_JSON_H */
