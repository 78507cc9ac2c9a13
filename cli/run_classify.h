/* run_classify.h — `qmap run` on a classifier (mlp): rows of an .npy file in, classes out.
 *
 * Reads X (float32, float64 or integer .npy or IDX of [n, features...], trailing dimensions flattened;
 * input_rows.h: an .npy mapped, an IDX read a slice of rows at a time; float32 rows used where they are,
 * others turned into features a slice at a time), classifies it in batches through the public API, and prints the predicted class per row (a per-class summary when n is
 * large), accuracy and a confusion matrix when labels are given, and rows/s. --output writes the model's
 * outputs as a float32 .npy [n, classes] (qm_outfile: temporary file, fsync, rename; never into a device).
 */
#ifndef QM_CLI_RUN_CLASSIFY_H
#define QM_CLI_RUN_CLASSIFY_H

#include <stdbool.h>

#include "qmap.h"

typedef struct classify_args {
    const char *input, *labels, *output;
    long batch, threads, top;
    qmap_act_mode act;
    bool json, quiet;
    bool allow_large;   /* a gzip IDX may inflate beyond input_rows.h's bound */
} classify_args;

/* Returns the exit status (0 done, 1 bad input). Prints its own errors. */
int run_classifier(qmap_model *m, const classify_args *a);

#endif
