/* qc_source.h — what every importer of `qmap convert` produces: named tensors viewing byte storages.
 *
 * An importer (safetensors, torch.save zip, .npy/.npz, raw float32 dumps) validates its input file and
 * fills a qc_source: a list of tensors (name, element type, shape, strides, offset) each viewing one
 * storage (a run of bytes in the input). Storages are read on demand with qc_source_load(), so memory
 * stays O(largest storage), never O(model): a storage that lies uncompressed in a mapped file is handed
 * out as a pointer into the mapping; one inside a zip archive is read into a buffer the source owns.
 *
 * The generic code, not the importers, checks that every tensor's view lies inside its storage
 * (qc_tensor_check); importers check their own headers (lengths, offsets, counts) against the file
 * before using them, and report problems as QM_ERR_BAD_SOURCE / QM_ERR_UNSUPPORTED / QM_ERR_FORBIDDEN
 * with a message naming the file, the field and the offset.
 *
 * Ownership: a qc_source owns its tensors' names, its storages, its mapped files, its zip handle and its
 * load buffer; qc_source_free() releases them all. Pointers from qc_source_load() stay valid until the
 * next qc_source_load() on the same source or qc_source_free(). One source is used by one thread at a time.
 */
#ifndef QC_SOURCE_H
#define QC_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"

/* Element types an input may hold. Only the float ones can become weights; the others are accepted so
 * that buffers such as HF's int64 position_ids can be recognised and skipped. */
typedef enum qc_dtype {
    QC_F32 = 1, QC_F16, QC_BF16, QC_F64,
    QC_I8, QC_U8, QC_I16, QC_I32, QC_I64, QC_BOOL,
} qc_dtype;

size_t qc_dtype_size(qc_dtype t);            /* 0 for an unknown value */
const char *qc_dtype_name(qc_dtype t);       /* "F32", "BF16", …; "?" for an unknown value */
bool qc_dtype_is_float(qc_dtype t);

#define QC_MAX_RANK 8

typedef struct qc_tensor {
    char *name;                      /* owned by the source; UTF-8 */
    qc_dtype dtype;
    uint32_t rank;                   /* 0 (scalar) .. QC_MAX_RANK */
    uint64_t shape[QC_MAX_RANK];
    int64_t stride[QC_MAX_RANK];     /* in elements; importers with no strides fill row-major ones */
    uint64_t offset;                 /* in elements, from the start of the storage */
    uint32_t storage;                /* index into qc_source.storages */
} qc_tensor;

typedef enum qc_storage_kind {
    QC_STORAGE_MAPPED = 1,           /* bytes at files[file].data + file_offset */
    QC_STORAGE_ZIP = 2,              /* entry zip_index of the source's zip archive (stored or deflated) */
} qc_storage_kind;

typedef struct qc_storage {
    char *key;                       /* owned; for messages: "data/3", "model.embed.weight" */
    uint64_t nbytes;                 /* size of the storage in bytes (checked against the file) */
    qc_storage_kind kind;
    uint32_t file;                   /* index into qc_source.files */
    uint64_t file_offset;            /* QC_STORAGE_MAPPED */
    uint64_t zip_index;              /* QC_STORAGE_ZIP */
    uint64_t zip_skip;               /* QC_STORAGE_ZIP: bytes at the start of the entry that precede the
                                      * storage (an .npy header inside an .npz); 0 unless set after
                                      * qc_source_add_storage. The entry must hold exactly zip_skip + nbytes. */
    /* QC_STORAGE_MAPPED of a stored zip entry, used in place rather than through libzip: nothing has
     * checked its bytes yet, so the first qc_source_load compares their CRC-32 with crc32 (the central
     * directory's) and fails on a mismatch; later loads of the same storage skip the check. Set after
     * qc_source_add_storage; false/0 for every other storage. */
    bool check_crc;
    bool crc_checked;                /* the check ran and passed */
    uint32_t crc32;
} qc_storage;

/* The input formats, one importer row each (qc_import.c). The values name kinds in code, never in files. */
typedef enum qc_input_kind {
    QC_INPUT_UNKNOWN = 0,
    QC_INPUT_RAW_DUMP,               /* a directory with manifest.json (convert/export_torch.py) */
    QC_INPUT_TORCH_ZIP,              /* torch.save >= 1.6: a zip with data.pkl */
    QC_INPUT_NPZ,                    /* a zip of NAME.npy entries */
    QC_INPUT_ZIP_OTHER,              /* a zip that is neither: refused with a reason */
    QC_INPUT_NPY,
    QC_INPUT_LEGACY_TORCH,           /* a pre-1.6 pickle: the torch importer refuses it with a remedy */
    QC_INPUT_SAFETENSORS,
    QC_INPUT_SHARD_INDEX,            /* a JSON object: a sharded checkpoint's index (qc_index.h) */
} qc_input_kind;

/* A read-only mapping of one input file. */
typedef struct qc_file {
    char *path;                      /* owned */
    const uint8_t *data;             /* the mapping (or caller's buffer if !owned); NULL for an empty file */
    uint64_t size;
    bool owned;                      /* true: munmap on free */
} qc_file;

typedef struct qc_source {
    const char *kind;                /* static: the importer row's display name ("safetensors", …) */
    qc_input_kind input;             /* the importer row that read it */
    char *path;                      /* owned: the path the user gave */
    qc_file *files;  uint32_t n_files;
    qc_storage *storages; uint64_t n_storages;
    qc_tensor *tensors;   uint64_t n_tensors;
    char *config_json;               /* owned, may be NULL: a model config carried by the input itself
                                      * (a raw dump's manifest "config", safetensors "__metadata__") */
    char *manifest_json;             /* owned, may be NULL: a raw dump's whole manifest (MLP layer list) */
    void *zip;                       /* zip_t * (libzip) when storages are QC_STORAGE_ZIP, else NULL */
    void *zip_source;                /* zip_source_t * backing `zip` (owned by `zip` once opened) */
    uint8_t *buf; uint64_t buf_cap;  /* load buffer for zip storages */
} qc_source;

/* Importers end with this: on success *out = s, on failure s is freed. Returns st. */
qm_status qc_source_hand_over(qc_source *s, qm_status st, qc_source **out);

/* Read a whole small file (config, tokenizer, manifest-sized) into a NUL-terminated malloc'd buffer.
 * Files above max_bytes are refused before reading (QM_ERR_UNSUPPORTED, naming `what`), non-regular
 * files are QM_ERR_BAD_SOURCE, read failures QM_ERR_IO. */
qm_status qc_read_small_file(const char *path, uint64_t max_bytes, const char *what, char **out, size_t *len,
                             qm_error *err);

/* An empty source (kind and path set) or NULL on allocation failure. */
qc_source *qc_source_new(const char *kind, const char *path);
void qc_source_free(qc_source *s);   /* NULL allowed */

/* Map `path` read-only and append it to s->files; *index receives its position. */
qm_status qc_source_map_file(qc_source *s, const char *path, uint32_t *index, qm_error *err);
/* Append a caller-owned buffer as a file (for fuzzing and tests): it must outlive the source. */
qm_status qc_source_add_buffer(qc_source *s, const char *name, const void *data, uint64_t size,
                               uint32_t *index, qm_error *err);

/* Append a storage / a tensor; the source copies `key` / `name`. Tensors get row-major strides from
 * their shape when `stride` is NULL. */
qm_status qc_source_add_storage(qc_source *s, const char *key, qc_storage_kind kind, uint32_t file,
                                uint64_t file_offset, uint64_t zip_index, uint64_t nbytes,
                                uint32_t *index, qm_error *err);
qm_status qc_source_add_tensor(qc_source *s, const char *name, qc_dtype dtype, uint32_t rank,
                               const uint64_t *shape, const int64_t *stride, uint64_t offset,
                               uint32_t storage, qm_error *err);

/* Check that tensor `t`'s view lies within its storage (shape/stride/offset arithmetic overflow-checked,
 * negative strides refused, mapped storages inside their file). QM_ERR_BAD_SOURCE on failure. */
qm_status qc_tensor_check(const qc_source *s, const qc_tensor *t, qm_error *err);
/* Element count of `t` (product of shape; 1 for rank 0). Only valid after qc_tensor_check. */
uint64_t qc_tensor_elements(const qc_tensor *t);
/* True if the tensor is C-contiguous (strides are row-major for its shape, size-1 dims ignored; a tensor
 * with no element always is). */
bool qc_tensor_is_contiguous(const qc_tensor *t);

/* Bytes of storage `index` (nbytes long). Mapped: a pointer into the file (a stored zip entry's CRC-32
 * checked on its first load when check_crc is set). Zip: read (inflated if need be) into the source's
 * buffer, its length checked against nbytes and its CRC by libzip. */
qm_status qc_source_load(qc_source *s, uint32_t index, const uint8_t **bytes, qm_error *err);

/* ---- importers: one row per input format (convert/qc_import.c) ----
 *
 * A new source format is one row in qc_import.c's table plus its parse function: `qmap convert` opens
 * each input once (qc_open_input maps the file), the rows' sniff functions look at the bytes already
 * mapped, and the first row that recognises them parses the same mapping. */

typedef struct qc_importer {
    qc_input_kind kind;
    const char *name;                /* display name, also qc_source.kind: "safetensors", "numpy .npy" */
    /* true if the `len` bytes at `data` (the whole file, mapped) are this format; NULL for a directory
     * format. Sniffs judge as little as they can, so that the parser can say what is wrong. */
    bool (*sniff)(const uint8_t *data, size_t len);
    /* read the file s->files[file] into s's storages and tensors; NULL if the format is not a source */
    qm_status (*parse)(qc_source *s, uint32_t file, qm_error *err);
    /* a directory format's reader (raw dump); NULL for file formats */
    qm_status (*open_dir)(const char *dir, uint64_t json_limit, qc_source **out, qm_error *err);
    const char *refusal;             /* non-NULL: recognised only to be refused with this reason */
} qc_importer;

/* The row of `kind`, or NULL. */
const qc_importer *qc_importer_of(qc_input_kind kind);
/* The first row whose sniff recognises the `len` bytes at `data` (a whole file), or NULL. */
const qc_importer *qc_importer_sniff(const void *data, size_t len);

struct qc_index;
/* Open the input at `path` once and read it with the importer its bytes name (a directory is a raw dump
 * if it holds manifest.json). A source comes back in *out; a shard index in *index (the caller opens its
 * shards); the other is NULL. *kind (may be NULL) receives the row read, also on some failures (the
 * importer's own error). Unknown input: QM_ERR_BAD_SOURCE listing the formats read. json_limit: as
 * --json-limit, for a raw dump's manifest and an index. */
qm_status qc_open_input(const char *path, uint64_t json_limit, qc_source **out, struct qc_index **index,
                        const qc_importer **kind, qm_error *err);

/* Read `path` / a caller-owned buffer as `kind`, without sniffing (tests, fuzz targets, `qmap run
 * --input x.npy`). The buffer must outlive the source; `name` is used in messages. Not for directory or
 * index kinds (QM_ERR_INVALID_ARGUMENT). */
qm_status qc_open_file(qc_input_kind kind, const char *path, qc_source **out, qm_error *err);
qm_status qc_open_buffer(qc_input_kind kind, const void *data, size_t len, const char *name, qc_source **out,
                         qm_error *err);

/* Each importer's parse (each validates everything before use) and the raw dump's directory reader, whose
 * manifest is checked against the caps of qc_json.h (kind QC_JSON_MANIFEST; json_limit: --json-limit in
 * bytes, 0 for the default) before it is parsed. */
qm_status qc_parse_safetensors(qc_source *s, uint32_t file, qm_error *err);
qm_status qc_parse_torch_zip(qc_source *s, uint32_t file, qm_error *err);
qm_status qc_parse_npy(qc_source *s, uint32_t file, qm_error *err);
qm_status qc_parse_npz(qc_source *s, uint32_t file, qm_error *err);
qm_status qc_open_raw_dump(const char *dir, uint64_t json_limit, qc_source **out, qm_error *err);

#endif /* QC_SOURCE_H */
