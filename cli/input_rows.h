/* input_rows.h — the rows `qmap run` gives a classifier: an .npy file or an IDX file (plain or gzip).
 *
 * An .npy is read through convert's hardened importer (mapped: its float32 rows are used in place); an IDX
 * through convert/qc_idx.h into memory, in its own element type. Nothing else is held: the rows become
 * float features a batch at a time (input_rows_features), so memory is the file's elements once, not
 * also as float32 (which made a 1 GiB uint8 IDX cost 5.8 GB).
 *
 * A gzip IDX may inflate to at most INPUT_MAX_INFLATION times its compressed size or INPUT_INFLATE_FREE
 * bytes, whichever is more — the bound `qmap convert` puts on compressed zip entries, which a real data
 * set (MNIST: 9.9 MB to 47 MB, 4.8x) is far below and a gzip bomb (1 MB to 1 GiB) far above — unless
 * allow_large. Inputs are opened through qm_open_regular: FIFOs, devices and directories are refused.
 */
#ifndef QM_CLI_INPUT_ROWS_H
#define QM_CLI_INPUT_ROWS_H

#include <stdbool.h>
#include <stdint.h>

#include "qc_idx.h"
#include "qc_source.h"

#define INPUT_MAX_INFLATION 32u
#define INPUT_INFLATE_FREE (64ull << 20)

typedef struct input_array {
    qc_source *src;                  /* .npy */
    qc_idx idx;                      /* IDX */
    qc_dtype dtype;
    uint32_t rank;
    const uint64_t *shape;
    const uint8_t *bytes;            /* the elements, row-major, host byte order */
} input_array;

/* Open `path` (given as option `what`, for messages). Returns 0, or 1 after printing the error. */
int input_rows_open(const char *path, const char *what, bool allow_large, input_array *a);
void input_rows_free(input_array *a);

/* Element i of an integer array as int64 (false for a dtype that is not an integer one). */
bool input_rows_int_at(const input_array *a, uint64_t i, int64_t *v);

/* True if the rows can become features: float32, float64 or an integer type. */
bool input_rows_numeric(const input_array *a);

/* Rows [first, first + count) of d features each as float32 features into dst: float values as they are,
 * integer values (pixels) as value * scale + offset, the mapping the model was trained with. */
void input_rows_features(const input_array *a, uint64_t first, uint64_t count, uint64_t d, float scale,
                         float offset, float *dst);

#endif
