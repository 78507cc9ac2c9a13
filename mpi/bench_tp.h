/* bench_tp.h — qmap-mpi bench: qmap bench's prompt (pp) and decode (tg) timing (cli/bench_model.h) on
 * this rank's part of a tensor-parallel run, the collectives' share of each token, each rank's PSS/RSS of
 * the mapping, and the model of multi-host speed built from them. */
#ifndef QMAP_MPI_BENCH_TP_H
#define QMAP_MPI_BENCH_TP_H

#include <stdbool.h>

#include "tp.h"

typedef struct tp_bench_cfg {
    long pp, tg, runs;   /* -p, -n, -r as qmap bench's */
    long threads;        /* -t: one count; 0 = one per CPU the rank may run on */
    int kv, act;         /* indexes into cli_kv_choices / cli_act_choices (qmap_kv_type, qmap_act_mode) */
    bool json;
    const char *model;   /* the MODEL.qmap argument */
} tp_bench_cfg;

/* Parse argv (argv[0] is "bench"): 0 with *cfg filled; 1 after printing --help to stdout (exit 0); 2 after
 * a usage error on stderr. Every rank parses the same argv, so every rank returns the same. */
int tp_bench_parse(int argc, char **argv, tp_bench_cfg *cfg);

/* The runs on every rank of ctx (collective: every rank calls it with the same cfg); rank 0 prints the
 * figures (a table or --json's one object) on stdout and any error on stderr. 0, or 1 on failure. */
int tp_bench_run(const tp_bench_cfg *cfg, tp_ctx *ctx);

#endif /* QMAP_MPI_BENCH_TP_H */
