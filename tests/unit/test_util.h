/* test_util.h — helpers shared by the format unit tests (tests/unit/test_format_*.c).
 *
 * Scratch directory: a fresh directory made with mkdtemp() inside $QM_TEST_TMPDIR (or /tmp when unset),
 * created by tu_group_setup() and removed recursively by tu_group_teardown().
 *
 * Everything here that re-derives the format (header fields, checksums, Q8_ROW layout) is written from
 * spec/FORMAT.md alone, so that the tests check the library against the spec and not against itself.
 */
#ifndef QM_TEST_UTIL_H
#define QM_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdbool.h>
#include <cmocka.h>

#include "qm_error.h"
#include "qm_format.h"
#include "qm_reader.h"
#include "qm_writer.h"

#define TU_PATH_MAX 4096

/* cmocka group setup/teardown: make and remove the scratch directory. */
int tu_group_setup(void **state);
int tu_group_teardown(void **state);
const char *tu_tmpdir(void);

/* out = <scratch>/<name> (name may contain '/'); returns out. */
char *tu_path(char out[TU_PATH_MAX], const char *name);
/* Make a fresh sub-directory <scratch>/<name> (removed first if it exists); out = its path. */
char *tu_mkdir(char out[TU_PATH_MAX], const char *name);
/* Number of entries in a directory, "." and ".." excluded (asserts the directory can be read). */
size_t tu_dir_count(const char *dir);
/* Remove a directory tree (best effort). */
void tu_rm_rf(const char *path);

bool tu_exists(const char *path);
uint8_t *tu_read_file(const char *path, size_t *len);        /* malloc'd; asserts on failure */
void tu_write_file(const char *path, const void *buf, size_t len);
void tu_copy_file(const char *src, const char *dst);
void tu_pwrite(const char *path, uint64_t off, const void *buf, size_t len);
uint8_t tu_pread_byte(const char *path, uint64_t off);
void tu_xor_byte(const char *path, uint64_t off, uint8_t mask);
bool tu_contains(const char *haystack, const char *needle);

/* Little-endian field access (spec section 1). */
uint16_t tu_rd16(const uint8_t *p);
uint32_t tu_rd32(const uint8_t *p);
uint64_t tu_rd64(const uint8_t *p);
void tu_wr64(uint8_t *p, uint64_t v);

uint64_t tu_align_up(uint64_t x, uint64_t a);
uint64_t tu_rng(uint64_t *state);                              /* splitmix64 */
void tu_fill_random(void *buf, size_t len, uint64_t seed);
/* Clear the top exponent bit of every F32/F16/BF16 element of buf (len bytes): no NaN or infinity. */
void tu_clear_nonfinite(void *buf, size_t len, uint32_t dtype);

/* Header checksum of a file image per spec section 3 (uses header's data_offset). */
uint64_t tu_header_checksum(const uint8_t *img, size_t len);
/* Rewrite the header checksum of the file at `path` so that R-HDR-9 passes again. */
void tu_fix_header_checksum(const char *path);
/* Recompute the checksum of the tensor whose table entry starts at entry_offset, store it in the entry,
 * then fix the header checksum. */
void tu_fix_tensor_checksum(const char *path, uint64_t entry_offset);

/* Q8_ROW layout from spec 6.1 (independent of the library). */
typedef struct tu_q8 {
    uint64_t rows, cols, row_stride, scales_offset, sums_offset, size;
} tu_q8;
tu_q8 tu_q8_layout(uint32_t rank, const uint64_t *dims, uint64_t alignment);
/* Valid Q8_ROW bytes for the shape: q in [-127, 127], zero padding, positive finite scales, exact
 * row sums. malloc'd; *size receives the byte size. */
uint8_t *tu_q8_build(uint32_t rank, const uint64_t *dims, uint64_t alignment, uint64_t seed, size_t *size);
/* Expected byte size of a tensor per spec section 6 (dtype must be known). */
uint64_t tu_expected_nbytes(uint32_t dtype, uint32_t rank, const uint64_t *dims, uint64_t alignment);

/* A tensor to write: name/dtype/shape and its bytes. */
typedef struct tu_tensor {
    char name[64];
    uint32_t dtype, rank;
    uint64_t dims[4];
    uint8_t *data;
    size_t size;
} tu_tensor;
/* Fill t (data malloc'd, random for plain dtypes, valid for Q8_ROW). */
void tu_tensor_make(tu_tensor *t, const char *name, uint32_t dtype, uint32_t rank, const uint64_t *dims,
                    uint64_t alignment, uint64_t seed);
void tu_tensor_free(tu_tensor *t);
/* Declare all tensors, then stream all their bytes concatenated in chunks of `chunk` bytes (0: one
 * write per tensor). Asserts every call succeeds; does not finish. */
void tu_write_tensors(qm_writer *w, const tu_tensor *ts, size_t n, size_t chunk);

/* Check a whole file image against spec sections 2, 3, 5 and 9 as a writer must produce it: magic,
 * versions, reserved fields, section positions, header checksum, zero padding, each tensor at
 * align_up(end of previous, alignment), zero gaps, tensor checksums, file ends at the last tensor. */
void tu_check_image(const uint8_t *img, size_t len, uint64_t alignment);

#endif /* QM_TEST_UTIL_H */
