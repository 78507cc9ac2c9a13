/* bench_parallel.h — `qmap bench MODEL --parallel 1,4,8` (cli/bench_parallel.c): llama-batched-bench's
 * measure of a qmap_batch. For each P: P sequences each read a prompt of pp tokens (all prompts through
 * qmap_batch_eval calls of up to n_batch tokens: pp), then tg decode steps of P tokens each (tg); the
 * aggregate tokens/s of both, and tg per sequence. */
#ifndef QM_BENCH_PARALLEL_H
#define QM_BENCH_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json_out.h"

typedef struct bp_cfg {
    long pp, tg, runs;        /* prompt tokens per sequence, decode steps, timed runs (after one warm-up) */
    const long *parallel;     /* the P values, in the order given */
    int n_parallel;
    int threads;
    int kv, act;              /* indices into cli_kv_choices / cli_act_choices */
    uint32_t n_batch;         /* most tokens one qmap_batch_eval call takes */
    bool json;                /* rows as objects into j (an open array); else a table on stdout */
    int name_width;           /* the table's model column */
} bp_cfg;

/* The table's header (not for --json). */
void bench_parallel_header(const bp_cfg *c);
/* Every P of c for one model at c->threads. Returns 0, or -1 with err set. */
int bench_parallel(const bp_cfg *c, const char *path, json_out *j, char *err, size_t err_size);

#endif
