/* qm_reader.h — open a .qmap file zero-copy and look at its header, metadata and tensors.
 *
 * Ownership: qm_open() maps the whole file read-only once; every pointer the reader hands out (tensor
 * data, metadata strings and arrays, names) stays valid until qm_close() and is owned by the qm_file.
 * Opening validates everything outside tensor data (spec section 7, R-GEN/R-HDR/R-META/R-TENSOR) and
 * reads no tensor byte, so open time depends on the size of the metadata and table, not of the file.
 * Tensor checksums (R-DATA-1) are checked on demand by qm_verify().
 *
 * A qm_file is immutable after open: any number of threads may read it at once.
 *
 * The mapping is shared with the file: if another program truncates or rewrites the file in place while
 * it is open, reads may see the new bytes or fault (SIGBUS). qmap's writers never do that (they rename a
 * new file over the old one, and an open mapping keeps the old file's pages).
 */
#ifndef QM_READER_H
#define QM_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"
#include "qm_format.h"

typedef struct qm_file qm_file;

typedef struct qm_header_info {
    uint16_t major_version, minor_version;
    uint64_t alignment;
    uint64_t file_size;
    uint64_t metadata_offset, metadata_size, metadata_count;
    uint64_t table_offset, table_size, tensor_count;
    uint64_t data_offset;
    uint64_t header_checksum;
} qm_header_info;

typedef struct qm_tensor {
    const char *name;        /* NUL-terminated, owned by the qm_file */
    uint32_t name_len;
    uint32_t dtype;          /* a qm_dtype */
    uint32_t rank;           /* 1..4 */
    uint64_t dims[QM_MAX_RANK]; /* dims[rank..4) are 0 */
    uint64_t n_elements;
    uint64_t offset;         /* file offset of the data */
    uint64_t size;           /* byte size of the data */
    uint64_t checksum;       /* XXH3-64 of the data, as stored */
    uint64_t entry_offset;   /* file offset of this tensor's table entry (for messages) */
    const void *data;        /* == mapping + offset; never NULL */
} qm_tensor;

typedef struct qm_meta {
    const char *key;         /* NUL-terminated, owned by the qm_file */
    uint32_t type;           /* a qm_meta_type */
    uint32_t elem_type;      /* for ARRAY: the element type; 0 otherwise */
    uint64_t count;          /* for ARRAY: number of elements; 1 for scalars and STRING */
    uint64_t entry_offset;   /* file offset of the entry (its key_len field) */
    uint64_t value_offset;   /* file offset of the encoded value */
    uint64_t value_size;     /* encoded size of the value in bytes, prefixes included (a STRING's u64
                              * length; an ARRAY's element type and count): the entry ends at
                              * value_offset + value_size */
    union {                  /* for scalar types */
        uint32_t u32; int32_t i32; uint64_t u64; int64_t i64; float f32; double f64; bool b;
    } v;
    const char *str;         /* for STRING: points into the mapping, NOT NUL-terminated */
    uint64_t str_len;
    const uint8_t *value;    /* the encoded value in the mapping (value_size bytes) */
    const uint64_t *str_index; /* internal: for STRING arrays, each element's offset from `value` */
} qm_meta;

/* Open and validate `path`. On success *out owns the mapping; release it with qm_close().
 * On failure *out is NULL and err says why (one code per spec rule). */
qm_status qm_open(const char *path, qm_file **out, qm_error *err);

/* As qm_open, but the file is read into anonymous memory the qm_file owns instead of being mapped: the
 * same bytes and the same validation, at the cost of reading the whole file now and of RAM (not shared
 * page cache) as large as the file. For comparisons only (qmap run/bench --no-mmap), as llama.cpp's
 * --no-mmap: qmap's premise is the mapping. A file that shrinks while it is read is QM_ERR_IO. */
qm_status qm_open_copy(const char *path, qm_file **out, qm_error *err);

/* Validate a file image already in memory (for fuzzing and tests). The buffer must outlive the qm_file
 * and is not copied or freed by it. `name` is used in messages (may be NULL). */
qm_status qm_open_buffer(const void *buf, size_t len, const char *name, qm_file **out, qm_error *err);

/* Release a qm_file; NULL is allowed. Every pointer obtained from it becomes invalid. */
void qm_close(qm_file *f);

const qm_header_info *qm_file_header(const qm_file *f);
const char *qm_file_path(const qm_file *f);
const uint8_t *qm_file_bytes(const qm_file *f);   /* start of the mapping (file_size bytes) */

uint64_t qm_tensor_count(const qm_file *f);
const qm_tensor *qm_tensor_at(const qm_file *f, uint64_t i);        /* NULL if i is out of range */
const qm_tensor *qm_find_tensor(const qm_file *f, const char *name); /* NULL if absent; O(log n) */

uint64_t qm_meta_count(const qm_file *f);
const qm_meta *qm_meta_at(const qm_file *f, uint64_t i);             /* in file order; NULL if out of range */
const qm_meta *qm_find_meta(const qm_file *f, const char *key);      /* NULL if absent; O(log n) */

/* Typed getters: QM_ERR_NOT_FOUND if the key is absent, QM_ERR_TYPE_MISMATCH if it has another type.
 * qm_meta_get_u64 also accepts a U32 value, qm_meta_get_i64 an I32, qm_meta_get_f64 an F32. */
qm_status qm_meta_get_u32(const qm_file *f, const char *key, uint32_t *out);
qm_status qm_meta_get_u64(const qm_file *f, const char *key, uint64_t *out);
qm_status qm_meta_get_i64(const qm_file *f, const char *key, int64_t *out);
qm_status qm_meta_get_f64(const qm_file *f, const char *key, double *out);
qm_status qm_meta_get_bool(const qm_file *f, const char *key, bool *out);
/* *out points into the mapping and is not NUL-terminated. */
qm_status qm_meta_get_string(const qm_file *f, const char *key, const char **out, uint64_t *len);

/* Array elements. For a numeric/bool array, copies element i into *out (of the element type's native C
 * type: uint32_t, int32_t, uint64_t, int64_t, float, double, bool). For a string array, returns a
 * pointer into the mapping (not NUL-terminated) in O(1). Errors: QM_ERR_TYPE_MISMATCH if `m` is not an
 * array of the kind the function reads (a string array for qm_meta_array_get, or the reverse);
 * QM_ERR_INVALID_ARGUMENT if i >= count or a pointer is NULL. */
qm_status qm_meta_array_get(const qm_meta *m, uint64_t i, void *out);
qm_status qm_meta_array_string(const qm_meta *m, uint64_t i, const char **s, uint64_t *len);

/* Verification of tensor data (spec section 8). */
typedef struct qm_verify_opts {
    int threads;     /* 0: OpenMP's default; otherwise the number of threads */
    bool full;       /* also check R-DATA-2 (padding, Q8_ROW sums/scales) */
} qm_verify_opts;

typedef struct qm_verify_report {
    uint64_t tensors_checked;
    uint64_t tensors_bad;
    uint64_t bytes_hashed;
    double seconds;          /* wall time of the verification */
} qm_verify_report;

/* Check one tensor's checksum (R-DATA-1). QM_OK or QM_ERR_TENSOR_CHECKSUM (err names the tensor). */
qm_status qm_tensor_verify(const qm_file *f, const qm_tensor *t, qm_error *err);

/* Check every tensor, in parallel. `status` (may be NULL) receives one code per tensor, in table order
 * (caller-owned array of qm_tensor_count(f) elements; QM_ERR_TENSOR_CHECKSUM or, with opts->full,
 * QM_ERR_BAD_TENSOR_DATA / QM_ERR_PADDING_NONZERO). Returns QM_OK if every tensor passed, otherwise the
 * code of the first failing tensor in table order, with err describing it. `opts` may be NULL. */
qm_status qm_verify(const qm_file *f, const qm_verify_opts *opts, qm_status *status,
                    qm_verify_report *report, qm_error *err);

/* XXH3-64 (seed 0) of a byte range, the checksum the format uses; the widest vector variant the CPU
 * runs (QMAP_CPU=generic|avx2|avx512 caps it). All variants give the same value. */
uint64_t qm_checksum(const void *data, size_t len);
/* Name of the variant qm_checksum uses here: "generic", "avx2" or "avx512". */
const char *qm_checksum_impl(void);

#endif /* QM_READER_H */
