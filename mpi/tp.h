/* tp.h — the collectives of a tensor-parallel run over MPI (the functions of a qmap_shard), their
 * counters, and a watchdog that ends a rank stuck in one. Only mpi/ includes mpi.h: libqmap never links MPI. */
#ifndef QMAP_MPI_TP_H
#define QMAP_MPI_TP_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "qmap.h"

/* The collectives of a token: the sum all-reduce of the hidden vector (twice a layer), the gather of the
 * logits, the MPI_MAX all-reduce of int8 activation maxima where ranks share a Q8_ROW matrix's columns
 * (qmap_shard.allreduce_max). */
enum { TP_SUM, TP_GATHER, TP_MAX, TP_N_COLL };
/* Their names in qmap-mpi's reports, indexed by the enum: the --json key and the label people read. */
static const char *const TP_COLL_KEY[TP_N_COLL] = { "allreduce", "gather", "allreduce_max" };
static const char *const TP_COLL_LABEL[TP_N_COLL] = { "all-reduce", "gather", "int8-scale max" };

/* One collective's calls, floats moved and seconds spent in it (waits for the other ranks included). */
typedef struct tp_counter {
    uint64_t calls, floats;
    double s;
} tp_counter;

typedef struct tp_ctx {
    MPI_Comm comm;
    int rank, size;
    int *counts, *displs;          /* [size]: Allgatherv's parts, recomputed per call */
    tp_counter coll[TP_N_COLL];    /* what each collective cost (QMAP_MPI_STATS, qmap-mpi bench) */
    /* the watchdog: ms since the epoch when the collective in progress began, 0 when none is */
    _Atomic int64_t busy_since_ms;
    int timeout_s;
    atomic_bool stop;
    pthread_t watchdog;
    bool watchdog_running;
    /* the model file's mapping, measured once per token when `measure_pss` is set */
    const char *model_path;
    bool measure_pss;
    uint64_t max_pss_kb, max_rss_kb;
} tp_ctx;

/* ctx for `comm`, with a watchdog that exits the process (status 1, a message on stderr) when one
 * collective has waited timeout_s seconds (a rank died or stopped calling: MPI has no timeout of its own).
 * Returns 0, or -1 (out of memory, no thread). */
int tp_init(tp_ctx *ctx, MPI_Comm comm, int timeout_s);
void tp_free(tp_ctx *ctx);

/* A qmap_shard running this rank's part over ctx. */
qmap_shard tp_shard(tp_ctx *ctx);

/* The largest PSS and RSS (kB) of the mappings of `path` in this process (from /proc/self/smaps), into
 * *pss_kb and *rss_kb; -1 if smaps cannot be read. */
int tp_mapping_pss(const char *path, uint64_t *pss_kb, uint64_t *rss_kb);

#endif /* QMAP_MPI_TP_H */
