/* run_translate.h — `qmap run` on an encoder-decoder (seq2seq): text or ids in, translations out.
 *
 * -p TEXT translates one sentence, -f FILE every line of FILE (as many lines per qmap_translate call as -b
 * says, encoded together), --tokens IDS one sentence given as source ids. Prints the best hypothesis (or
 * --n-best of them with their scores) per sentence, decoded with the target vocabulary, and sentences/s and
 * target tokens/s on stderr; --json prints one object instead. Source text the vocabulary does not cover
 * becomes its unknown token, said once on stderr.
 */
#ifndef QM_CLI_RUN_TRANSLATE_H
#define QM_CLI_RUN_TRANSLATE_H

#include <stdbool.h>

#include "qmap.h"

typedef struct translate_args {
    const char *prompt, *file, *tokens;
    long beam, n_best, max_len, batch, threads;
    float length_penalty;
    qmap_act_mode act;
    qmap_kv_type kv;
    bool json, quiet;
} translate_args;

/* Returns the exit status (0 done, 1 bad model or input). Prints its own errors. */
int run_translate(qmap_model *m, const translate_args *a);

#endif
