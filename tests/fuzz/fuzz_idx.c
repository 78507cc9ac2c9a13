/* fuzz_idx.c — libFuzzer target for the IDX reader (convert/qc_idx.h), the input format of MNIST and
 * Fashion-MNIST that `qmap run --input` / `--labels` accept, plain and gzip.
 *
 * Each input is read twice: from memory (qc_idx_parse, the plain format) and as a file through zlib
 * (qc_idx_read on a memfd, so gzip streams — the seeds are real Fashion-MNIST files cut short — take the
 * inflate path). What must hold, for ANY input bytes:
 *   - Neither crashes, reads outside its buffer or leaks (ASan/UBSan/LSan; the buffer is an exact-size
 *     malloc copy), and memory stays bounded by the cap, not by what a header claims (max_bytes 1 MiB here).
 *   - A failure is a known, non-OK status equal to err.code, with a non-empty message, and *out zeroed.
 *   - A plain input accepted from memory: starts 00 00 TYPE RANK with rank in 1..QC_MAX_RANK, its size is
 *     exactly 4 + 4·rank + n_elements·element size, n_elements is the product of the shape, and the last
 *     element can be read. The file route accepts the same plain input with the same shape and bytes.
 *   - The streaming route of `qmap run --input` (qc_idx_read_header, qc_idx_read_bytes) accepts every
 *     header the file route accepts, with the same shape, and streams the same data.
 * A violated property calls abort() after printing why, so libFuzzer records the input as a crash.
 *
 * Build: make BUILD=… BUILD/fuzz/fuzz_idx (libFuzzer), BUILD/fuzz/replay_idx (gcc ASan+UBSan replay).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "qc_idx.h"

#define FUZZ_TARGET "fuzz_idx"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CAP ((uint64_t)1 << 20)

static volatile uint8_t g_sink;

static void check_idx_failure(qm_status st, const qm_error *err, const qc_idx *x)
{
    check_failure(st, err);
    CHECK(x->data == NULL && x->n_elements == 0 && x->rank == 0, "*out zeroed on failure");
}

static size_t elem_size(qc_dtype t)
{
    return qc_dtype_size(t);
}

/* The streaming route `qmap run --input` takes (cli/input_rows.c): the header alone, with no cap but 64
 * bits, then the data a piece at a time. Whatever the whole-file read accepted, it accepts with the same
 * shape, and the data it streams is the same bytes. */
static void check_stream(int fd, const char *path, qm_status whole, const qc_idx *file)
{
    int dup_fd = dup(fd);
    if (dup_fd < 0 || lseek(dup_fd, 0, SEEK_SET) != 0) { if (dup_fd >= 0) close(dup_fd); return; }
    gzFile gz = gzdopen(dup_fd, "rb");
    if (!gz) { close(dup_fd); return; }
    qc_idx_header h;
    qm_error err;
    qm_error_clear(&err);
    qm_status st = qc_idx_read_header(gz, path, UINT64_MAX, &h, &err);
    if (st != QM_OK) {
        CHECK(strcmp(qm_status_name(st), "QM_ERR_UNKNOWN") != 0 && err.code == st && err.message[0],
              "stream header: a known status with a message");
        CHECK(whole != QM_OK, "a header the whole read accepts streams too");
    } else if (whole == QM_OK) {
        CHECK(h.dtype == file->dtype && h.rank == file->rank && h.n_elements == file->n_elements &&
              h.esize == elem_size(file->dtype) && !memcmp(h.shape, file->shape, sizeof h.shape),
              "the stream header is the whole read's");
        uint8_t piece[4096];
        size_t total = file->n_elements * h.esize, at = 0;
        while (at < total) {
            size_t want = total - at < sizeof piece ? total - at : sizeof piece;
            long long got = qc_idx_read_bytes(gz, path, piece, want, &err);
            CHECK(got == (long long)want, "the stream gives the data the whole read did");
            qc_idx_to_host(piece, want / h.esize, h.esize);
            CHECK(!memcmp(piece, (const uint8_t *)file->data + at, want), "the same bytes both ways");
            at += want;
        }
    }
    gzclose(gz);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    if (size) memcpy(buf, data, size);
    qm_error err;
    qm_error_clear(&err);
    qc_idx mem;
    qm_status st = qc_idx_parse(size ? buf : NULL, size, "fuzz.idx", CAP, &mem, &err);
    if (st != QM_OK) {
        check_idx_failure(st, &err, &mem);
    } else {
        CHECK(size >= 4 && buf[0] == 0 && buf[1] == 0, "magic");
        CHECK(mem.rank == buf[3] && mem.rank >= 1 && mem.rank <= QC_MAX_RANK, "rank");
        uint64_t n = 1;
        for (uint32_t i = 0; i < mem.rank; i++) n *= mem.shape[i];
        CHECK(n == mem.n_elements, "n_elements is the product of the shape");
        size_t es = elem_size(mem.dtype);
        CHECK(es && size == 4 + 4 * (size_t)mem.rank + n * es, "size is header + data exactly");
        g_sink = ((const uint8_t *)mem.data)[n * es - 1];
    }

    /* the file route: zlib reads plain bytes as they are and inflates gzip */
    int fd = memfd_create("fuzz_idx", MFD_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, buf, size) == (ssize_t)size) {
            char path[64];
            snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
            qc_idx file;
            qm_error ferr;
            qm_error_clear(&ferr);
            qm_status fst = qc_idx_read(path, CAP, &file, &ferr);
            check_stream(fd, path, fst, &file);
            if (fst != QM_OK) {
                check_idx_failure(fst, &ferr, &file);
                CHECK(st != QM_OK || (size >= 2 && buf[0] == 0x1f && buf[1] == 0x8b), "plain input accepted both ways");
            } else if (st == QM_OK) {
                CHECK(file.rank == mem.rank && file.dtype == mem.dtype && file.n_elements == mem.n_elements &&
                      !memcmp(file.shape, mem.shape, sizeof mem.shape), "same shape both ways");
                CHECK(!memcmp(file.data, mem.data, mem.n_elements * elem_size(mem.dtype)), "same data both ways");
            } else {
                CHECK(size >= 2 && buf[0] == 0x1f && buf[1] == 0x8b, "only a gzip input is accepted as a file alone");
                g_sink = ((const uint8_t *)file.data)[file.n_elements * elem_size(file.dtype) - 1];
            }
            qc_idx_free(&file);
        }
        close(fd);
    }
    qc_idx_free(&mem);
    free(buf);
    return 0;
}
