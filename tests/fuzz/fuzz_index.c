/* fuzz_index.c — libFuzzer target for the sharded-checkpoint index reader of `qmap convert`
 * (convert/qc_index.c: qc_index_parse, the buffer twin of qc_index_read, then qc_index_check).
 *
 * The input is the text of a model.safetensors.index.json / pytorch_model.bin.index.json, parsed as if it
 * lay at FUZZ_INDEX_PATH (nothing is read from or written to disk). What must hold, for ANY input bytes:
 *   - The reader never crashes, never reads outside the input and never leaks (ASan/UBSan/LSan; the
 *     input is copied into a malloc'd block of exactly `size` bytes, not NUL-terminated).
 *   - It accepts exactly the valid indexes, judged independently with jansson: a JSON object (duplicate
 *     keys refused) whose "metadata" is absent, null or an object and whose "weight_map" is an object of
 *     non-empty tensor names → strings that are plain file names (not empty, ".", ".."; no '/' or '\\').
 *     A failure is QM_ERR_BAD_SOURCE (or QM_ERR_NOMEM), equal to err.code, with a non-empty message, and
 *     *out NULL. (64 KiB inputs stay far below the caps of qc_json.h, so QM_ERR_UNSUPPORTED cannot occur.)
 *   - An accepted index is the weight_map, in file order: entry i is key i with the shard of value i;
 *     shards are distinct, in order of first appearance, each used by some entry and resolved next to the
 *     index; by_name lists every entry once, in strictly increasing name order; metadata_json is the
 *     "metadata" object (equal once parsed back), NULL when absent or null.
 *   - qc_index_check passes on sources holding exactly the listed tensors in their listed shards, and
 *     fails with QM_ERR_BAD_SOURCE when one tensor is missing, an unlisted one is added, one sits in
 *     another shard or one appears twice; with QM_ERR_INVALID_ARGUMENT for a wrong number of shards.
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 *
 * Build: make BUILD=… BUILD/fuzz/fuzz_index (libFuzzer), BUILD/fuzz/replay_index (replays
 * tests/fuzz/seeds/index/ under gcc ASan+UBSan without libFuzzer).
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_index.h"
#include "qc_source.h"

#define FUZZ_TARGET "fuzz_index"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_INDEX_DIR "/fuzz-index-dir/"
#define FUZZ_INDEX_PATH FUZZ_INDEX_DIR "model.safetensors.index.json"

static bool plain_name(const char *s)
{
    return s[0] && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/') && !strchr(s, '\\');
}

/* The reference judgement: is `root` (NULL when not JSON) a valid index? */
static bool oracle_valid(json_t *root)
{
    if (!json_is_object(root)) return false;
    json_t *meta = json_object_get(root, "metadata"), *wm = json_object_get(root, "weight_map");
    if (meta && !json_is_null(meta) && !json_is_object(meta)) return false;
    if (!json_is_object(wm)) return false;
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        if (!k[0] || !json_is_string(v) || !plain_name(json_string_value(v))) return false;
    }
    return true;
}

/* Sources for the shards of ix: shard s holds the tensors the weight_map puts in it, except entry `skip`
 * (SIZE_MAX: none); entry `move` (SIZE_MAX: none) goes into shard (its own + 1) % n instead, entry `dup`
 * (SIZE_MAX: none) is added twice, and `extra` (NULL: none) is added to shard 0. Every tensor views one
 * 4-byte storage of its source. Returns false if an allocation failed (the caller then skips the case). */
static const uint8_t g_four[4];

static bool make_shards(const qc_index *ix, size_t skip, size_t move, size_t dup, const char *extra,
                        qc_source **srcs)
{
    qm_error err;
    for (size_t s = 0; s < ix->n_shards; s++) srcs[s] = NULL;
    for (size_t s = 0; s < ix->n_shards; s++) {
        uint32_t fi, si;
        if (!(srcs[s] = qc_source_new("safetensors", ix->shards[s]))) return false;
        if (qc_source_add_buffer(srcs[s], ix->shards[s], g_four, sizeof g_four, &fi, &err) != QM_OK ||
            qc_source_add_storage(srcs[s], "data", QC_STORAGE_MAPPED, fi, 0, 0, sizeof g_four, &si, &err) != QM_OK)
            return false;
    }
    const uint64_t one = 1;
    for (size_t e = 0; e < ix->n_entries; e++) {
        if (e == skip) continue;
        size_t s = ix->entries[e].shard;
        if (e == move) s = (s + 1) % ix->n_shards;
        for (int k = 0; k < (e == dup ? 2 : 1); k++)
            if (qc_source_add_tensor(srcs[s], ix->entries[e].tensor, QC_F32, 1, &one, NULL, 0, 0, &err) != QM_OK)
                return false;
    }
    if (extra && ix->n_shards && qc_source_add_tensor(srcs[0], extra, QC_F32, 1, &one, NULL, 0, 0, &err) != QM_OK)
        return false;
    return true;
}

static void free_shards(qc_source **srcs, size_t n)
{
    for (size_t s = 0; s < n; s++) qc_source_free(srcs[s]);
}

/* Run qc_index_check on shards made as make_shards says; `want` is the status it must give. */
static void check_case(const qc_index *ix, size_t skip, size_t move, size_t dup, const char *extra, qm_status want,
                       const char *what)
{
    qc_source **srcs = calloc(ix->n_shards ? ix->n_shards : 1, sizeof *srcs);
    if (!srcs) return;
    if (make_shards(ix, skip, move, dup, extra, srcs)) {
        qm_error err;
        qm_error_clear(&err);
        qm_status st = qc_index_check(ix, srcs, ix->n_shards, &err);
        if (st != want && st != QM_ERR_NOMEM) {
            fprintf(stderr, "fuzz_index: qc_index_check gave %s (%s)\n", qm_status_name(st), err.message);
            die(what, NULL);
        }
        if (st != QM_OK) check_failure(st, &err);
    }
    free_shards(srcs, ix->n_shards);
    free(srcs);
}

static void check_accepted(const qc_index *ix, json_t *root)
{
    CHECK(ix->path && !strcmp(ix->path, FUZZ_INDEX_PATH), "path kept");
    json_t *wm = json_object_get(root, "weight_map"), *meta = json_object_get(root, "metadata");
    CHECK(ix->n_entries == json_object_size(wm), "one entry per weight_map member");
    CHECK(ix->n_shards <= ix->n_entries, "no more shards than entries");

    /* entries in file order, each naming its shard as written */
    size_t e = 0;
    const char *k;
    json_t *v;
    json_object_foreach(wm, k, v) {
        CHECK(e < ix->n_entries, "entry count");
        CHECK(ix->entries[e].tensor && !strcmp(ix->entries[e].tensor, k), "entry name in file order");
        CHECK(ix->entries[e].shard < ix->n_shards, "entry's shard in range");
        CHECK(!strcmp(ix->shard_names[ix->entries[e].shard], json_string_value(v)), "entry's shard as written");
        e++;
    }

    /* shards: distinct plain names in order of first appearance, each resolved next to the index */
    size_t next = 0;
    for (e = 0; e < ix->n_entries; e++) {
        CHECK(ix->entries[e].shard <= next, "shards in order of first appearance");
        if (ix->entries[e].shard == next) next++;
    }
    CHECK(next == ix->n_shards, "every shard used by an entry");
    for (size_t s = 0; s < ix->n_shards; s++) {
        CHECK(plain_name(ix->shard_names[s]), "shard name plain");
        size_t dl = strlen(FUZZ_INDEX_DIR);
        CHECK(!strncmp(ix->shards[s], FUZZ_INDEX_DIR, dl) && !strcmp(ix->shards[s] + dl, ix->shard_names[s]),
              "shard resolved next to the index");
    }
    if (ix->n_shards <= 64)   /* quadratic: only for the sizes seeds and mutations usually have */
        for (size_t a = 0; a < ix->n_shards; a++)
            for (size_t b = a + 1; b < ix->n_shards; b++)
                CHECK(strcmp(ix->shard_names[a], ix->shard_names[b]) != 0, "shards distinct");

    /* by_name: a permutation, strictly increasing (names are distinct) */
    if (ix->n_entries) {
        bool *seen = calloc(ix->n_entries, sizeof *seen);
        if (seen) {
            for (size_t i = 0; i < ix->n_entries; i++) {
                CHECK(ix->by_name[i] < ix->n_entries && !seen[ix->by_name[i]], "by_name is a permutation");
                seen[ix->by_name[i]] = true;
                if (i)
                    CHECK(strcmp(ix->entries[ix->by_name[i - 1]].tensor, ix->entries[ix->by_name[i]].tensor) < 0,
                          "by_name strictly increasing");
            }
            free(seen);
        }
    }

    /* metadata carried as compact JSON of the same object */
    if (meta && !json_is_null(meta)) {
        CHECK(ix->metadata_json != NULL, "metadata kept");
        json_t *back = json_loads(ix->metadata_json, 0, NULL);
        CHECK(back && json_equal(back, meta), "metadata_json parses back to the metadata object");
        json_decref(back);
    } else {
        CHECK(ix->metadata_json == NULL, "no metadata_json without metadata");
    }

    /* the shard check against sources made from the index itself */
    check_case(ix, SIZE_MAX, SIZE_MAX, SIZE_MAX, NULL, QM_OK, "exact shards pass qc_index_check");
    if (ix->n_entries) {
        check_case(ix, ix->n_entries - 1, SIZE_MAX, SIZE_MAX, NULL, QM_ERR_BAD_SOURCE, "a missing tensor is refused");
        check_case(ix, SIZE_MAX, SIZE_MAX, 0, NULL, QM_ERR_BAD_SOURCE, "a tensor held twice is refused");
    }
    if (ix->n_shards >= 2)
        check_case(ix, SIZE_MAX, 0, SIZE_MAX, NULL, QM_ERR_BAD_SOURCE, "a tensor in another shard is refused");
    if (ix->n_shards) {
        char extra[64] = "qmap.fuzz.unlisted";
        size_t n = strlen(extra);
        while (json_object_get(wm, extra) && n + 1 < sizeof extra) { extra[n++] = 'x'; extra[n] = 0; }
        if (!json_object_get(wm, extra))
            check_case(ix, SIZE_MAX, SIZE_MAX, SIZE_MAX, extra, QM_ERR_BAD_SOURCE, "an unlisted tensor is refused");
    }
    qm_error err;
    qm_error_clear(&err);
    qm_status st = qc_index_check(ix, NULL, ix->n_shards + 1, &err);
    CHECK(st == QM_ERR_INVALID_ARGUMENT, "a wrong shard count is refused before any shard is read");
    check_failure(st, &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);

    static qc_index poison;
    qc_index *ix = &poison;   /* must be overwritten with NULL on failure */
    qm_error err;
    qm_error_clear(&err);
    qm_status st = qc_index_parse(FUZZ_INDEX_PATH, buf, size, 0, &ix, &err);

    json_t *root = json_loadb(buf, size, JSON_REJECT_DUPLICATES, NULL);
    bool valid = oracle_valid(root);
    if (st == QM_OK) {
        CHECK(valid, "accepted only if the reference judges it a valid index");
        CHECK(ix != NULL, "*out set on success");
        check_accepted(ix, root);
        qc_index_free(ix);
    } else {
        check_failure(st, &err);
        CHECK(ix == NULL, "*out is NULL on failure");
        CHECK(st == QM_ERR_BAD_SOURCE || st == QM_ERR_NOMEM, "documented status");
        CHECK(!valid || st == QM_ERR_NOMEM, "a valid index is accepted");
    }
    json_decref(root);
    free(buf);
    return 0;
}
