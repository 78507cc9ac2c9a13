/* fuzz_safetensors.c — libFuzzer target for the safetensors importer (qc_open_buffer, QC_INPUT_SAFETENSORS).
 *
 * What must hold, for ANY input bytes:
 *   - The importer never crashes, never reads outside the buffer and never leaks (ASan/UBSan/LSan; the
 *     input is copied into a malloc'd block of exactly `size` bytes so a one-byte overread is reported).
 *   - A failure is a known, non-OK qm_status equal to err.code, with a non-empty message, and *out NULL.
 *   - An accepted file obeys the format as the reference reads it: the header length N ≤ 100,000,000,
 *     one storage per tensor, and the storages sorted by offset tile [8 + N, size) exactly — contiguous,
 *     no gap, no overlap, the last one ending at the end of the buffer; each tensor is row-major over its
 *     whole storage (nbytes == elements × dtype size), passes qc_tensor_check, and qc_source_load hands
 *     out a pointer into the buffer whose first and last bytes can be read.
 *   - Opening the same bytes twice gives the same status (no hidden state).
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 *
 * Build: make BUILD=… BUILD/fuzz/fuzz_safetensors (libFuzzer), BUILD/fuzz/replay_safetensors (replays
 * tests/fuzz/seeds/safetensors/ under gcc ASan+UBSan without libFuzzer).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_source.h"

#define FUZZ_TARGET "fuzz_safetensors"
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
    qm_status st = qc_open_buffer(QC_INPUT_SAFETENSORS, size ? buf : NULL, size, "fuzz.safetensors", &s, &err);
    if (st != QM_OK) {
        check_open_failure(st, &err, s);
    } else {
        CHECK(size >= 8, "accepted input holds the length field");
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = (n << 8) | buf[i];
        CHECK(n <= 100000000u && n <= size - 8, "header length within limits and file");
        CHECK(s->n_tensors == s->n_storages, "one storage per tensor");
        CHECK(strcmp(s->kind, "safetensors") == 0, "kind");
        uint64_t at = 8 + n;
        for (uint64_t i = 0; i < s->n_tensors; i++) {
            const qc_tensor *t = &s->tensors[i];
            CHECK(t->storage == i, "tensors in storage order");
            const qc_storage *sg = &s->storages[i];
            CHECK(sg->kind == QC_STORAGE_MAPPED, "mapped storage");
            CHECK(sg->file_offset == at, "storages contiguous from the end of the header");
            CHECK(sg->nbytes <= size - at, "storage inside the buffer");
            CHECK(qc_tensor_check(s, t, &err) == QM_OK, "qc_tensor_check");
            CHECK(t->offset == 0 && qc_tensor_is_contiguous(t), "row-major view");
            CHECK(qc_tensor_elements(t) * qc_dtype_size(t->dtype) == sg->nbytes, "nbytes == elements × size");
            const uint8_t *p = NULL;
            CHECK(qc_source_load(s, (uint32_t)i, &p, &err) == QM_OK, "qc_source_load");
            if (sg->nbytes) {
                CHECK(p == buf + sg->file_offset, "load points into the buffer");
                g_sink ^= p[0];
                g_sink ^= p[sg->nbytes - 1];
            }
            at += sg->nbytes;
        }
        CHECK(at == size, "tensors end at the end of the buffer");
        qc_source_free(s);
    }
    /* the same bytes again: same answer */
    qc_source *s2 = NULL;
    qm_error err2;
    qm_status st2 = qc_open_buffer(QC_INPUT_SAFETENSORS, size ? buf : NULL, size, "fuzz.safetensors", &s2, &err2);
    CHECK(st2 == st, "deterministic status");
    qc_source_free(s2);
    free(buf);
    return 0;
}
