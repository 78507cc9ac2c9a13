/* fuzz_npy.c — libFuzzer target for the .npy importer (qc_open_buffer, QC_INPUT_NPY): header dict parser and data.
 *
 * What must hold, for ANY input bytes:
 *   - The importer never crashes, never reads outside the buffer and never leaks (ASan/UBSan/LSan; the
 *     input is copied into a malloc'd block of exactly `size` bytes so a one-byte overread is reported).
 *   - A failure is a known, non-OK qm_status equal to err.code, with a non-empty message, and *out NULL.
 *   - An accepted file starts with "\x93NUMPY" and version 1.0, 2.0 or 3.0, and yields exactly one tensor,
 *     named "fuzz" after the buffer's name, of rank ≤ QC_MAX_RANK, over one mapped storage that runs from
 *     the end of the header to the end of the buffer and holds exactly elements × dtype size bytes; the
 *     view passes qc_tensor_check and is row-major, or column-major (strides 1, d0, d0·d1, …) for
 *     fortran_order; qc_source_load points into the buffer and its first and last bytes can be read.
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 *
 * Build: make BUILD=… BUILD/fuzz/fuzz_npy (libFuzzer), BUILD/fuzz/replay_npy (gcc ASan+UBSan replay).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qc_source.h"

#define FUZZ_TARGET "fuzz_npy"
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
    qm_status st = qc_open_buffer(QC_INPUT_NPY, size ? buf : NULL, size, "dir/fuzz.npy", &s, &err);
    if (st != QM_OK) {
        check_open_failure(st, &err, s);
        free(buf);
        return 0;
    }
    CHECK(size >= 10 && memcmp(buf, "\x93NUMPY", 6) == 0, "magic");
    CHECK(buf[6] >= 1 && buf[6] <= 3 && buf[7] == 0, "version");
    CHECK(s->n_tensors == 1 && s->n_storages == 1, "one tensor, one storage");
    const qc_tensor *t = &s->tensors[0];
    const qc_storage *sg = &s->storages[0];
    CHECK(strcmp(t->name, "fuzz") == 0, "tensor named after the file");
    CHECK(t->rank <= QC_MAX_RANK, "rank");
    CHECK(sg->kind == QC_STORAGE_MAPPED, "mapped");
    CHECK(sg->file_offset <= size && sg->nbytes == size - sg->file_offset, "storage runs to the end");
    uint64_t hl = buf[6] == 1 ? 10u + (buf[8] | (buf[9] << 8))
                              : 12u + ((uint64_t)buf[8] | (uint64_t)buf[9] << 8 | (uint64_t)buf[10] << 16 |
                                       (uint64_t)buf[11] << 24);
    CHECK(sg->file_offset == hl, "data starts right after the header");
    CHECK(qc_tensor_check(s, t, &err) == QM_OK, "qc_tensor_check");
    uint64_t elems = qc_tensor_elements(t);
    CHECK(elems * qc_dtype_size(t->dtype) == sg->nbytes, "nbytes == elements × size");
    if (!qc_tensor_is_contiguous(t) && elems) {
        uint64_t run = 1;
        for (uint32_t i = 0; i < t->rank; i++) {
            CHECK((uint64_t)t->stride[i] == run, "column-major strides");
            run *= t->shape[i];
        }
    }
    const uint8_t *p = NULL;
    CHECK(qc_source_load(s, 0, &p, &err) == QM_OK, "qc_source_load");
    if (sg->nbytes) {
        CHECK(p == buf + sg->file_offset, "load points into the buffer");
        g_sink ^= p[0];
        g_sink ^= p[sg->nbytes - 1];
    }
    qc_source_free(s);
    free(buf);
    return 0;
}
