/* qr_pool.h — the threads a session's products and attention run on, started once and kept warm.
 *
 * A job is n chunks of work, fn(ctx, chunk, worker) for chunk = 0 .. n-1. The calling thread posts it and
 * takes chunks itself; the pool's workers take chunks as they come by. (qr_pool_run_regions, below, hands
 * out contiguous runs of units instead, one per thread, on top of a job of one chunk per thread.)
 * qr_pool_run returns once every chunk has run, and it waits only for chunks a worker has already taken —
 * never for a worker that has not woken up. That is the point of this module: OpenMP's fork-join ends
 * every parallel region in a barrier that waits for every thread of the team, so when another process
 * holds a core, a 2-thread decode waits for a descheduled thread at each of its ~100 products per token
 * and runs slower than one thread alone.
 * Where a worker is preempted while it holds a chunk, the caller must wait for it; when that keeps
 * happening, the caller runs jobs alone for a while (the back-off in qr_pool.c). With both, a busy
 * neighbour costs about what losing the second thread costs, and an idle machine runs as fast as OpenMP
 * (docs/perf/2026-11-28-source-comments.md).
 *
 * Workers wait for a job by spinning for QR_POOL_SPIN_NS (the gaps between the products of one token are
 * shorter than that), then sleep on a condition variable; posting wakes sleepers only if there are any.
 * So a decode loop starts no thread and makes no system call per product while it runs.
 *
 * When a pool takes every CPU the process may run on, worker i is pinned to the i-th of them (the caller
 * stays free, and the scheduler keeps it on the one left). With all CPUs in use no idle one is lost as an
 * escape, and the workers stop moving between CPUs mid-decode, which kept a 2-vCPU VM's decode from its
 * slow runs at high-bandwidth moments (docs/perf/2026-11-26-zen4.md, "On the same Zen 4 host, 2026-11-26,
 * later"). A pool of fewer threads than CPUs is not pinned, and QMAP_PIN=0 turns pinning off.
 *
 * Ownership and threads: qr_pool_new allocates the pool and starts threads - 1 workers; qr_pool_free
 * stops and joins them. One thread at a time may call qr_pool_run on a pool (a session's thread); fn must
 * not call qr_pool_run on the same pool. A NULL pool, or one of 1 thread, runs every chunk on the
 * calling thread, in order. There is no global state.
 */
#ifndef QR_POOL_H
#define QR_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"

typedef struct qr_pool qr_pool;

/* One chunk of a job: `worker` is 0 for the calling thread and 1 .. threads-1 for the pool's workers, so
 * it indexes per-thread scratch; it says nothing about which chunks a thread gets. */
typedef void qr_pool_fn(void *ctx, size_t chunk, int worker);

/* The most chunks one job may have. */
#define QR_POOL_MAX_CHUNKS ((size_t)1 << 30)

/* How long an idle worker spins before it sleeps. */
#define QR_POOL_SPIN_NS 200000

/* A pool of `threads` threads, the caller included (threads - 1 are started). threads <= 0: one per CPU
 * this process may run on (sched_getaffinity). QM_ERR_NOMEM / QM_ERR_IO (a thread that cannot start) with
 * a message; *out is NULL then. threads is capped at 256. */
qm_status qr_pool_new(int threads, qr_pool **out, qm_error *err);

/* Stop and join the workers, free the pool. NULL is fine. Must not run while qr_pool_run does. */
void qr_pool_free(qr_pool *p);

/* Threads of the pool, the caller included; 1 for NULL. */
int qr_pool_threads(const qr_pool *p);
/* The CPUs this process may run on (its affinity mask), at least 1: the thread count a pool of 0 takes. */
int qr_pool_cpus_available(void);

/* Run fn(ctx, c, worker) once for every c < n_chunks (n_chunks <= QR_POOL_MAX_CHUNKS), spread over the
 * pool, and return when all have finished; their writes are then visible to the caller. Chunks may run in
 * any order and at the same time, so they must not write the same memory. */
void qr_pool_run(qr_pool *p, size_t n_chunks, qr_pool_fn *fn, void *ctx);

/* One range of a region job: units [first, first + count), run by thread `worker` (as for qr_pool_fn). */
typedef void qr_pool_range_fn(void *ctx, size_t first, size_t count, int worker);

/* Run fn over units 0 .. units-1 so that each thread reads a contiguous run of them in order: thread t
 * owns region t, units [t·units/T, (t+1)·units/T) (T = the pool's threads, at most QR_POOL_MAX_REGIONS;
 * above that threads share regions), and takes it from the front in pieces of a QR_POOL_REGION_PIECE-th
 * of what is left of it, each piece starting where its last one ended. A thread whose region is empty
 * takes half of what is left of the fullest region from its back, so the owner's run is not cut, a worker
 * that starts late costs nothing, and one preempted while it holds a piece makes the caller wait for that
 * piece only (at most a QR_POOL_REGION_PIECE-th of its region; qr_pool_run's back-off applies as usual).
 * Every unit runs exactly once, in one range; returns when all have run (their writes then visible to the
 * caller). What it is for: a decode product reads each thread's rows of W as one stream (qr_pool.c says
 * what that gains). A NULL pool, a pool of 1 thread, or more than QR_POOL_MAX_UNITS units: fn(ctx, 0,
 * units, 0) once on the calling thread (nothing if units is 0). Ranges may run at the same time, so they
 * must not write the same memory. */
void qr_pool_run_regions(qr_pool *p, size_t units, qr_pool_range_fn *fn, void *ctx);

#define QR_POOL_MAX_UNITS ((size_t)UINT32_MAX)
#define QR_POOL_MAX_REGIONS 64
#define QR_POOL_REGION_PIECE 4

/* How many chunks to cut `units` of work into for p: about `per_thread` per thread (so a thread that
 * starts late or is preempted leaves little for the others to wait on), at most `units`, at least 1. */
size_t qr_pool_chunks(const qr_pool *p, size_t units, size_t per_thread);

#endif /* QR_POOL_H */
