/* input_rows.h — the rows `qmap run` gives a classifier: an .npy file or an IDX file (plain or gzip).
 *
 * An .npy is read through convert's hardened importer and stays mapped (its rows are used in place). An
 * IDX file is read front to back, a slice of rows at a time (input_rows_slice), never whole, through
 * convert's IDX reader (convert/qc_idx.h: the header checks and the gzip reading): memory is one slice of
 * rows whatever the file's size (a 1 GiB uint8 IDX used to cost 5.8 GB: the elements, all of them again
 * as float32, and every output).
 *
 * IDX (MNIST's format, described in qc_idx.h): a header, then the elements, big-endian, row-major, and
 * nothing after them. A plain file's size must be exactly that; a gzip stream that ends early or goes on
 * past the last element is refused when the reading gets there (so after some rows were classified:
 * nothing is printed then). A gzip IDX may inflate to at most
 * INPUT_MAX_INFLATION times its compressed size or INPUT_INFLATE_FREE bytes, whichever is more — the bound
 * `qmap convert` puts on compressed zip entries, which a real data set (MNIST: 9.9 MB to 47 MB, 4.8x) is
 * far below and a gzip bomb (1 MB to 1 GiB) far above — unless allow_large; the header's dimensions are
 * checked against it before any element is read. Inputs open through qm_open_regular: FIFOs, devices and
 * directories are refused. Errors are printed ("qmap run: --input: …") and reported as a return value.
 */
#ifndef QM_CLI_INPUT_ROWS_H
#define QM_CLI_INPUT_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qc_source.h"

#define INPUT_MAX_INFLATION 32u
#define INPUT_INFLATE_FREE (64ull << 20)

typedef struct input_array {
    const char *path, *what;         /* the file, and the option that named it (for messages) */
    qc_source *src;                  /* .npy: mapped */
    const uint8_t *bytes;            /* .npy: every element, row-major, host byte order */
    struct gzFile_s *gz;             /* IDX (gzip or plain: zlib reads both): read front to back */
    uint8_t *held;                   /* IDX: the elements of the last slice read, host byte order */
    size_t held_cap;
    uint64_t next_row;               /* IDX: the first row not read yet */
    qc_dtype dtype;
    size_t esize;                    /* bytes per element */
    uint32_t rank;
    uint64_t shape[QC_MAX_RANK];
    uint64_t row_elems;              /* elements per row: the product of shape[1..] (1 for rank 1) */
} input_array;

/* Open `path` (given as option `what`) and read its header. Returns 0, or 1 after printing the error. */
int input_rows_open(const char *path, const char *what, bool allow_large, input_array *a);
void input_rows_free(input_array *a);   /* a zeroed input_array is allowed */

/* The elements of rows [first, first + count) in host byte order (aligned for their type), valid until
 * the next call; or NULL after printing the error. IDX rows are read in order: `first` must be the row
 * after the last slice's. */
const uint8_t *input_rows_slice(input_array *a, uint64_t first, uint64_t count);

/* Integer element i of elements of type dt at p as int64 (false if dt is not an integer type). */
bool input_rows_int_at(qc_dtype dt, const uint8_t *p, uint64_t i, int64_t *v);

/* True if the elements can become features: float32, float64 or an integer type. */
bool input_rows_numeric(const input_array *a);

/* `count` rows of a slice as float32 features into dst: float values as they are, integer values
 * (pixels) as value * scale + offset, the mapping the model was trained with. */
void input_rows_features(const input_array *a, const uint8_t *slice, uint64_t count, float scale, float offset,
                         float *dst);

#endif
