/* fuzz_import.c — libFuzzer target for the importer table (convert/qc_import.c): the sniffs that pick a row
 * from a file's bytes, then that row's parser over the same bytes, as qc_open_input runs them on a file.
 *
 * What must hold, for ANY input bytes:
 *   - Sniffing never crashes or reads outside the buffer (the input is copied into a malloc'd block of
 *     exactly `size` bytes) and is deterministic: the same bytes pick the same row.
 *   - A row recognises its own magic: a chosen npy row means the bytes start with "\x93NUMPY", a zip row
 *     "PK\3\4" or "PK\5\6", safetensors a '{' at byte 8.
 *   - The chosen row's parser (when the row has one) returns a known status equal to err.code with a
 *     non-empty message and *out NULL on failure; on success the source records that row (kind, input)
 *     and every tensor's view passes qc_tensor_check and every storage loads.
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 *
 * Build: make BUILD=… BUILD/fuzz/fuzz_import (libFuzzer), BUILD/fuzz/replay_import (gcc ASan+UBSan replay).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_import: property violated: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

#define CHECK(cond, what) do { if (!(cond)) die((what), #cond); } while (0)

static void check_magic(const qc_importer *imp, const uint8_t *b, size_t size)
{
    bool zip = size >= 4 && (!memcmp(b, "PK\x03\x04", 4) || !memcmp(b, "PK\x05\x06", 4));
    if (imp->kind == QC_INPUT_NPY) CHECK(size >= 6 && !memcmp(b, "\x93NUMPY", 6), "npy magic");
    if (imp->kind == QC_INPUT_TORCH_ZIP || imp->kind == QC_INPUT_NPZ || imp->kind == QC_INPUT_ZIP_OTHER)
        CHECK(zip, "zip magic");
    if (imp->kind == QC_INPUT_SAFETENSORS) CHECK(size >= 9 && b[8] == '{', "safetensors header brace");
}

static void check_source(qc_source *s, const qc_importer *imp)
{
    qm_error err;
    CHECK(s->input == imp->kind && strcmp(s->kind, imp->name) == 0, "the source records its row");
    for (uint64_t i = 0; i < s->n_tensors; i++)
        CHECK(qc_tensor_check(s, &s->tensors[i], &err) == QM_OK, "every view lies inside its storage");
    for (uint64_t i = 0; i < s->n_storages; i++) {
        const uint8_t *bytes;
        qm_status st = qc_source_load(s, (uint32_t)i, &bytes, &err);
        CHECK(st == QM_OK || err.code == st, "a storage loads, or says why");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    const qc_importer *imp = qc_importer_sniff(size ? buf : NULL, size);
    CHECK(imp == qc_importer_sniff(size ? buf : NULL, size), "sniffing is deterministic");
    if (!imp || !imp->parse) {
        free(buf);
        return 0;
    }
    check_magic(imp, buf, size);
    qc_source *s = NULL;
    qm_error err;
    qm_error_clear(&err);
    qm_status st = qc_open_buffer(imp->kind, buf, size, "fuzz.bin", &s, &err);
    if (st != QM_OK) {
        CHECK(strcmp(qm_status_name(st), "QM_ERR_UNKNOWN") != 0, "known status");
        CHECK(err.code == st, "err.code == returned status");
        CHECK(memchr(err.message, 0, sizeof err.message) && err.message[0], "non-empty terminated message");
        CHECK(s == NULL, "*out is NULL on failure");
    } else {
        check_source(s, imp);
        qc_source_free(s);
    }
    free(buf);
    return 0;
}
