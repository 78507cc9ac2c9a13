/* fuzz_npz.c — libFuzzer target for the .npz importer (qc_open_buffer, QC_INPUT_NPZ), then qc_source_load of every
 * storage (libzip inflate, CRC check, zip_skip of each entry's .npy header).
 *
 * What must hold, for ANY input bytes:
 *   - Neither the importer nor the loads crash, read outside the buffer or leak (ASan/UBSan/LSan; the
 *     input is copied into a malloc'd block of exactly `size` bytes).
 *   - Every failure (open or load) is a known, non-OK qm_status equal to err.code, with a non-empty
 *     message; a failed open leaves *out NULL.
 *   - An accepted archive yields one zip storage per tensor, tensor names unique and non-empty, each
 *     tensor passing qc_tensor_check with nbytes == elements × dtype size and zip_skip at least the
 *     10-byte .npy preamble; a storage loads either exactly (then its first and last bytes can be read)
 *     or with QM_ERR_BAD_SOURCE (entry shorter/longer than its header says, CRC mismatch, bad deflate).
 *   - No load allocates more than 1032 × the input size (the importer refuses entries claiming more
 *     than deflate can produce), so a tiny input cannot ask for gigabytes.
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 *
 * Build: make BUILD=… BUILD/fuzz/fuzz_npz (libFuzzer), BUILD/fuzz/replay_npz (gcc ASan+UBSan replay).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_source.h"

#define FUZZ_TARGET "fuzz_npz"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    qc_source *s = (qc_source *)&g_sink;
    qm_error err;
    qm_error_clear(&err);
    qm_status st = qc_open_buffer(QC_INPUT_NPZ, size ? buf : NULL, size, "fuzz.npz", &s, &err);
    if (st != QM_OK) {
        check_open_failure(st, &err, s);
        free(buf);
        return 0;
    }
    CHECK(s->zip != NULL, "archive kept open");
    CHECK(s->n_tensors == s->n_storages, "one storage per tensor");
    for (uint64_t i = 0; i < s->n_tensors; i++) {
        const qc_tensor *t = &s->tensors[i];
        const qc_storage *sg = &s->storages[t->storage];
        CHECK(t->name[0] != 0, "non-empty name");
        for (uint64_t j = 0; j < i; j++) CHECK(strcmp(s->tensors[j].name, t->name) != 0, "unique names");
        CHECK(sg->kind == QC_STORAGE_ZIP && sg->zip_skip >= 10, "zip storage after a .npy header");
        CHECK(qc_tensor_check(s, t, &err) == QM_OK, "qc_tensor_check");
        CHECK(qc_tensor_elements(t) * qc_dtype_size(t->dtype) == sg->nbytes, "nbytes == elements × size");
        CHECK(sg->nbytes / 1032 <= size, "claimed size bounded by deflate's ratio");
    }
    for (uint64_t i = 0; i < s->n_storages; i++) {
        const uint8_t *p = NULL;
        qm_status ls = qc_source_load(s, (uint32_t)i, &p, &err);
        if (ls != QM_OK) {
            check_failure(ls, &err);
            CHECK(ls == QM_ERR_BAD_SOURCE, "load fails only as BAD_SOURCE");
            continue;
        }
        uint64_t n = s->storages[i].nbytes;
        if (n) {
            g_sink ^= p[0];
            g_sink ^= p[n - 1];
        }
    }
    qc_source_free(s);
    free(buf);
    return 0;
}
