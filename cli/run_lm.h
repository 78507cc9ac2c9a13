/* run_lm.h — `qmap run` on a decoder language model: a prompt in, generated text out.
 *
 * The prompt (-p TEXT, -f FILE, or --tokens IDS) is tokenized and evaluated in batches of -b, then tokens are
 * sampled, printed as they come and evaluated one at a time until the end-of-sequence token, -n tokens, the
 * context's end or Ctrl-C. The figures go to stderr; --json prints one object instead.
 */
#ifndef QM_CLI_RUN_LM_H
#define QM_CLI_RUN_LM_H

#include <stdbool.h>
#include <stdint.h>

#include "qmap.h"

typedef struct lm_args {
    const char *prompt, *file, *tokens;
    long n_predict, top_k, repeat_last_n, ctx, threads, batch;
    float temp, top_p, min_p, repeat_penalty;
    uint64_t seed;
    int kv, act;          /* indexes into cli_kv_choices / cli_act_choices */
    bool no_bos, json, quiet;
    bool batch_invariant; /* F32/F16 weights: the bits a qmap_batch (qmap serve) gives */
    double load_s;        /* how long opening the model took, for the figures */
} lm_args;

/* Returns the exit status (0 done, 1 bad model or input). Prints its own errors. */
int run_lm(qmap_model *m, const lm_args *a);

#endif
