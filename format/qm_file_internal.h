/* qm_file_internal.h — the qm_file struct, shared by the reader and verifier inside format/ only. */
#ifndef QM_FILE_INTERNAL_H
#define QM_FILE_INTERNAL_H

#include "qm_reader.h"

struct qm_file {
    char *path;                 /* owned copy, used in messages */
    const uint8_t *base;        /* the mapping (or the caller's buffer) */
    uint64_t size;
    bool mapped;                /* true: munmap(base, size) on close */
    qm_header_info hdr;
    qm_tensor *tensors;         /* [hdr.tensor_count], table order */
    const qm_tensor **tensors_by_name; /* sorted by name, for qm_find_tensor */
    qm_meta *meta;              /* [hdr.metadata_count], file order */
    const qm_meta **meta_by_key;/* sorted by key */
    char *strings;              /* pool of NUL-terminated key and name copies */
    uint64_t *str_index_pool;   /* element offsets of all string arrays */
};

#endif
