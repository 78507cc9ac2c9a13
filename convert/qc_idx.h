/* qc_idx.h — IDX files (the format MNIST and Fashion-MNIST ship in), plain or gzip-compressed.
 *
 * An IDX file is: two zero bytes, a type byte (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
 * 0x0E float64), a rank byte (1..QC_MAX_RANK here), `rank` big-endian uint32 dimensions, then the product
 * of the dimensions elements, big-endian, row-major, and nothing after them. The distributions gzip each
 * file (`t10k-images-idx3-ubyte.gz`); qc_idx_read takes either and tells them apart by the gzip magic.
 *
 * Every count is checked before it is used: a rank of 0 or above QC_MAX_RANK, a zero dimension, a product
 * that overflows or exceeds max_bytes, a stream that ends early or goes on past the last element, and a
 * corrupt gzip stream are each QM_ERR_BAD_SOURCE (QM_ERR_UNSUPPORTED for an unknown type or a size above
 * max_bytes) naming the file and the field. Memory grows with the bytes actually read, never with what a
 * header claims.
 *
 * Ownership: a qc_idx owns its data (host byte order, converted from big-endian); qc_idx_free releases it.
 */
#ifndef QC_IDX_H
#define QC_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "qc_source.h"
#include "qm_error.h"

/* What an IDX header says: its first 4 + 4 * rank bytes. */
typedef struct qc_idx_header {
    qc_dtype dtype;                  /* QC_U8, QC_I8, QC_I16, QC_I32, QC_F32 or QC_F64 */
    size_t esize;                    /* bytes per element */
    uint32_t rank;                   /* 1 .. QC_MAX_RANK */
    uint64_t shape[QC_MAX_RANK];     /* none 0 */
    uint64_t n_elements;             /* their product; n_elements * esize <= max_bytes */
} qc_idx_header;

typedef struct qc_idx {
    qc_dtype dtype;                  /* QC_U8, QC_I8, QC_I16, QC_I32, QC_F32 or QC_F64 */
    uint32_t rank;                   /* 1 .. QC_MAX_RANK */
    uint64_t shape[QC_MAX_RANK];
    uint64_t n_elements;
    void *data;                      /* owned: n_elements values in host byte order */
} qc_idx;

/* True if the first bytes look like an IDX file or a gzip stream (for telling IDX from .npy input). */
int qc_idx_sniff(const uint8_t *head, size_t len);

/* Read the IDX file at `path` (gzip or plain). max_bytes caps the decompressed size (0: 4 GiB). On failure
 * *out is zeroed. */
qm_status qc_idx_read(const char *path, uint64_t max_bytes, qc_idx *out, qm_error *err);

/* The same over an uncompressed IDX image in memory (fuzz targets, tests); `name` is used in messages. */
qm_status qc_idx_parse(const void *data, size_t len, const char *name, uint64_t max_bytes, qc_idx *out,
                       qm_error *err);

void qc_idx_free(qc_idx *x);         /* zeroes *x; NULL allowed */

struct gzFile_s;                      /* zlib's gzFile, so that this header needs no zlib.h */

/* Reading an IDX front to back a slice at a time, for `qmap run --input` (memory is one slice whatever
 * the file's size): the same header checks and gzip reading qc_idx_read is built on. `gz` is a zlib
 * stream (gzdopen reads a plain file as it is and inflates a gzip one) positioned at the file's start;
 * `name` is used in messages; max_bytes caps the size the dimensions describe (0: 4 GiB). The caller
 * checks that size against the file and reads the data. */
qm_status qc_idx_read_header(struct gzFile_s *gz, const char *name, uint64_t max_bytes, qc_idx_header *h,
                             qm_error *err);

/* Up to n bytes of the stream into dst: how many (fewer than n only at the end of the data), or -1 with
 * err set when the gzip stream is damaged or cut short. */
long long qc_idx_read_bytes(struct gzFile_s *gz, const char *name, void *dst, size_t n, qm_error *err);

/* n elements of esize bytes from the file's big-endian order to the host's, in place. */
void qc_idx_to_host(void *data, uint64_t n, size_t esize);

#endif /* QC_IDX_H */
