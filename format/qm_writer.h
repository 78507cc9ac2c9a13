/* qm_writer.h — write a .qmap file, streaming, atomically.
 *
 * Use:
 *   1. qm_writer_create()            — opens a temporary file beside the target path.
 *   2. qm_writer_meta_*()            — metadata entries, in the order they will appear in the file.
 *   3. qm_writer_add_tensor()        — declare every tensor (name, dtype, shape), in data order.
 *   4. qm_writer_write() (repeatedly)— the tensors' bytes, in declaration order, any chunking; the writer
 *                                      pads between tensors itself and checksums as bytes stream through.
 *   5. qm_writer_finish()            — fills in the table and header checksums, fsyncs, renames the temp
 *                                      file onto the target path and fsyncs the directory.
 * Memory is O(metadata + table), never O(tensor data). The same calls give a byte-identical file.
 *
 * Ownership and errors: the qm_writer is owned by the caller until qm_writer_finish() or
 * qm_writer_abort(), each of which frees it (finish also on failure). After any failed call the writer
 * refuses further calls (QM_ERR_STATE) and the caller must finish or abort it. The target path is only
 * ever replaced, never partially written: until the rename, a crash or abort leaves the existing file at
 * the target intact. The file is written through qm_outfile (qm_fileio.h): on Linux without a name
 * (O_TMPFILE in the target's directory), named ".<name>.tmp.XXXXXX" (linkat) only once complete and
 * fsynced, just before the rename: a crash while writing leaves nothing behind, and only one in the
 * microseconds between naming and rename leaves that complete temporary file. Where the filesystem refuses
 * O_TMPFILE, the named temporary file is created at the start instead (abort deletes it; a crash leaves
 * it, safe to delete once no writer runs). A target that exists and is not a regular file (or a symlink)
 * — a device node, a FIFO, a directory — is refused with QM_ERR_IO by create, and again before the rename.
 */
#ifndef QM_WRITER_H
#define QM_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"
#include "qm_format.h"

typedef struct qm_writer qm_writer;

typedef struct qm_writer_opts {
    uint64_t alignment;   /* 0: QM_DEFAULT_ALIGNMENT; else a power of two in [64, 2^30] */
} qm_writer_opts;

/* `opts` may be NULL. */
qm_status qm_writer_create(const char *path, const qm_writer_opts *opts, qm_writer **out, qm_error *err);

/* Metadata (before the first qm_writer_add_tensor/qm_writer_write). Keys: UTF-8, 1..256 bytes, no NUL,
 * unique (QM_ERR_BAD_KEY, QM_ERR_BAD_UTF8, QM_ERR_DUPLICATE_KEY). */
qm_status qm_writer_meta_u32(qm_writer *w, const char *key, uint32_t v, qm_error *err);
qm_status qm_writer_meta_i32(qm_writer *w, const char *key, int32_t v, qm_error *err);
qm_status qm_writer_meta_u64(qm_writer *w, const char *key, uint64_t v, qm_error *err);
qm_status qm_writer_meta_i64(qm_writer *w, const char *key, int64_t v, qm_error *err);
qm_status qm_writer_meta_f32(qm_writer *w, const char *key, float v, qm_error *err);
qm_status qm_writer_meta_f64(qm_writer *w, const char *key, double v, qm_error *err);
qm_status qm_writer_meta_bool(qm_writer *w, const char *key, bool v, qm_error *err);
/* `s` need not be NUL-terminated; must be valid UTF-8 (NUL allowed). */
qm_status qm_writer_meta_string(qm_writer *w, const char *key, const char *s, size_t len, qm_error *err);
/* Numeric/bool array: `values` holds `count` elements of the element type's native C type (see
 * qm_meta_array_get). elem_type must be U32…BOOL. */
qm_status qm_writer_meta_array(qm_writer *w, const char *key, uint32_t elem_type, const void *values,
                               uint64_t count, qm_error *err);
/* String array: strs[i] of lens[i] bytes (lens may be NULL: strs are NUL-terminated). */
qm_status qm_writer_meta_string_array(qm_writer *w, const char *key, const char *const *strs,
                                      const size_t *lens, uint64_t count, qm_error *err);

/* Copy metadata entry `m` of an open qm_file (qm_meta_at / qm_find_meta) verbatim: same key, type and
 * encoded value. The entry was validated when its file was opened. */
struct qm_meta;
qm_status qm_writer_meta_copy(qm_writer *w, const struct qm_meta *m, qm_error *err);

/* Declare the next tensor. Its byte size follows from dtype and dims (qm_tensor_nbytes). */
qm_status qm_writer_add_tensor(qm_writer *w, const char *name, uint32_t dtype, uint32_t rank,
                               const uint64_t *dims, qm_error *err);

/* Append `len` bytes of tensor data; may span tensor boundaries. The first call ends the declaration
 * phase. QM_ERR_INVALID_ARGUMENT (which fails the writer) for bytes == NULL with len > 0 — zeros go
 * through qm_writer_write_zeros — and for writing more than was declared. */
qm_status qm_writer_write(qm_writer *w, const void *bytes, size_t len, qm_error *err);
/* Append `len` zero bytes of tensor data (e.g. Q8_ROW padding). */
qm_status qm_writer_write_zeros(qm_writer *w, uint64_t len, qm_error *err);

/* Complete the file (every declared byte must have been written) and free the writer. */
qm_status qm_writer_finish(qm_writer *w, qm_error *err);
/* Discard everything, remove the temporary file, free the writer. NULL is allowed. */
void qm_writer_abort(qm_writer *w);

#endif /* QM_WRITER_H */
