/* qr_pool.c — a job queue of one job, claimed chunk by chunk (contract in qr_pool.h).
 *
 * The job lives in the pool: fn, ctx and n are written by the caller before it publishes the job, and
 * `state` holds the job's generation (high 32 bits) and the next unclaimed chunk (low 32 bits). A thread
 * claims chunk k by a compare-and-swap of (g, k) to (g, k + 1), so it can only claim a chunk of the job
 * whose fields it read. Between jobs the caller first closes the old one — stores (g, QR_POOL_CLOSED) —
 * and only then rewrites fn, ctx and n (release stores; workers load them with acquire), then opens
 * (g + 1, 0). A worker that read the old state (g, n_old) and then the new, larger n has seen the close
 * (acquire on n), so its swap from (g, n_old) fails. Without the close it succeeded: the late worker
 * claimed chunk n_old of the new job under the old generation, and that chunk ran twice (found by
 * test_pool's many-jobs test, which hung with done = 6 of 5). Finished chunks are counted in `done`; the
 * caller waits for it to reach n — that is, only for chunks somebody took.
 *
 * Sleeping is the usual Dekker pair: a worker counts itself in `sleepers` and then rechecks `state` (under
 * the mutex, before it waits); the caller publishes `state` and then reads `sleepers`, and broadcasts if it
 * is not zero. Both pairs are sequentially consistent, so one of the two sees the other.
 */
#define _GNU_SOURCE
#include "qr_pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define QR_POOL_MAX_THREADS 256
#define QR_POOL_CLOSED UINT32_MAX   /* the low half of `state` between jobs: above every n */

struct qr_pool {
    int n_threads;                     /* the caller included */
    int n_started;                     /* workers running */
    pthread_t *workers;

    /* the current job (written by the caller between jobs; see above) */
    _Atomic(qr_pool_fn *) fn;
    _Atomic(void *) ctx;
    _Atomic uint32_t n;
    _Atomic uint64_t state;            /* generation << 32 | next chunk */
    _Atomic uint32_t done;             /* chunks of this generation finished */
    uint32_t generation;               /* the caller's copy */

    /* the caller's back-off (see after_job): run alone until solo_until; solo_ns is the last such spell */
    uint64_t solo_until, solo_ns;
    uint64_t window_start, window_wait; /* the current window: when its first job started, ns spent waiting */

    _Atomic int sleepers;
    _Atomic bool quit;
    pthread_mutex_t mu;
    pthread_cond_t wake;
};

typedef struct worker_arg {
    qr_pool *pool;
    int id;
} worker_arg;

static uint32_t gen_of(uint64_t st) { return (uint32_t)(st >> 32); }

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Claim and run chunks of generation g until none is left; how many this thread ran. */
static size_t take_chunks(qr_pool *p, uint32_t g, int worker)
{
    size_t ran = 0;
    for (;;) {
        uint64_t st = atomic_load_explicit(&p->state, memory_order_acquire);
        if (gen_of(st) != g) return ran;
        uint32_t k = (uint32_t)st;
        qr_pool_fn *fn = atomic_load_explicit(&p->fn, memory_order_acquire);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_acquire);
        uint32_t n = atomic_load_explicit(&p->n, memory_order_acquire);
        if (k >= n) return ran;
        if (!atomic_compare_exchange_weak_explicit(&p->state, &st, st + 1, memory_order_acquire,
                                                   memory_order_relaxed))
            continue;
        fn(ctx, k, worker);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
        ran++;
    }
}

/* Wait until a generation other than `seen` is posted (or the pool quits); return it. */
static uint32_t wait_for_job(qr_pool *p, uint32_t seen)
{
    uint64_t start = 0;
    for (unsigned spins = 0;; spins++) {
        if (atomic_load_explicit(&p->quit, memory_order_acquire)) return seen;
        uint32_t g = gen_of(atomic_load_explicit(&p->state, memory_order_acquire));
        if (g != seen) return g;
        cpu_relax();
        if ((spins & 255) != 255) continue;
        uint64_t t = now_ns();
        if (!start) start = t;
        if (t - start < QR_POOL_SPIN_NS) continue;
        /* sleep: count ourselves, then look again under the mutex (the caller broadcasts under it) */
        pthread_mutex_lock(&p->mu);
        atomic_fetch_add(&p->sleepers, 1);
        while (!atomic_load(&p->quit) && gen_of(atomic_load(&p->state)) == seen) pthread_cond_wait(&p->wake, &p->mu);
        atomic_fetch_sub(&p->sleepers, 1);
        pthread_mutex_unlock(&p->mu);
        start = 0;
    }
}

static void *worker_main(void *arg)
{
    worker_arg a = *(worker_arg *)arg;
    free(arg);
    qr_pool *p = a.pool;
    uint32_t seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load_explicit(&p->quit, memory_order_acquire)) return NULL;
        take_chunks(p, seen, a.id);
    }
}

int qr_pool_cpus_available(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int c = CPU_COUNT(&set);
        if (c > 0) return c;
    }
    return 1;
}

/* The CPU worker i (1 .. threads-1) is pinned to, or -1 for none: the i-th CPU this process may run on,
 * when the pool takes all of them (qr_pool.h says why) and QMAP_PIN is not "0". */
static void worker_cpus(int threads, int *cpu)
{
    for (int i = 0; i < threads; i++) cpu[i] = -1;
    const char *env = getenv("QMAP_PIN");
    cpu_set_t set;
    if ((env && strcmp(env, "0") == 0) || threads < 2 || sched_getaffinity(0, sizeof set, &set) != 0 ||
        CPU_COUNT(&set) != threads)
        return;
    for (int c = 0, i = 0; c < CPU_SETSIZE && i < threads; c++)
        if (CPU_ISSET(c, &set)) cpu[i++] = c;
}

qm_status qr_pool_new(int threads, qr_pool **out, qm_error *err)
{
    *out = NULL;
    if (threads <= 0) threads = qr_pool_cpus_available();
    if (threads > QR_POOL_MAX_THREADS) threads = QR_POOL_MAX_THREADS;
    qr_pool *p = calloc(1, sizeof *p);
    if (!p) return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory for a thread pool");
    p->n_threads = threads;
    atomic_init(&p->fn, NULL);
    atomic_init(&p->ctx, NULL);
    atomic_init(&p->n, 0);
    atomic_init(&p->state, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->quit, false);
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "cannot create a thread pool's mutex");
    }
    if (pthread_cond_init(&p->wake, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "cannot create a thread pool's condition");
    }
    if (threads > 1) {
        p->workers = calloc((size_t)threads - 1, sizeof *p->workers);
        if (!p->workers) {
            qr_pool_free(p);
            return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory for a thread pool");
        }
    }
    int cpu[QR_POOL_MAX_THREADS];
    worker_cpus(threads, cpu);
    for (int i = 1; i < threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        pthread_attr_t attr;
        int rc = !a ? ENOMEM : pthread_attr_init(&attr);
        if (rc != 0) {
            free(a);
            a = NULL;
        }
        if (a) {
            a->pool = p;
            a->id = i;
            if (cpu[i] >= 0) {
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(cpu[i], &one);
                (void)pthread_attr_setaffinity_np(&attr, sizeof one, &one);
            }
            rc = pthread_create(&p->workers[i - 1], &attr, worker_main, a);
            if (rc != 0 && cpu[i] >= 0)   /* the pin is a preference: refused (the CPU set changed), go unpinned */
                rc = pthread_create(&p->workers[i - 1], NULL, worker_main, a);
            pthread_attr_destroy(&attr);
            if (rc != 0) free(a);
        }
        if (rc != 0) {
            qr_pool_free(p);
            return qm_fail(err, rc == ENOMEM ? QM_ERR_NOMEM : QM_ERR_IO, NULL, NULL, QM_NO_OFFSET,
                           "cannot start thread %d of %d: %s; try fewer threads (-t)", i + 1, threads, strerror(rc));
        }
        p->n_started++;
    }
    *out = p;
    return QM_OK;
}

void qr_pool_free(qr_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i], NULL);
    free(p->workers);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int qr_pool_threads(const qr_pool *p)
{
    return p ? p->n_threads : 1;
}

size_t qr_pool_chunks(const qr_pool *p, size_t units, size_t per_thread)
{
    size_t want = (size_t)qr_pool_threads(p) * (per_thread ? per_thread : 1);
    if (want > units) want = units;
    if (want > QR_POOL_MAX_CHUNKS) want = QR_POOL_MAX_CHUNKS;
    return want ? want : 1;
}

/* The back-off. After its own chunks, the caller waits for the chunks a worker has claimed. On an idle
 * machine that wait is the tail of a chunk; when another process holds the worker's core, it is the rest
 * of a scheduler slice (2-4 ms seen), job after job. So the caller adds up its waits over windows of
 * QR_POOL_WINDOW_NS of wall time, and when they exceed 1/QR_POOL_WAIT_SHARE of a window it runs jobs alone
 * for QR_POOL_SOLO_MIN_NS, doubling while it keeps happening (up to QR_POOL_SOLO_MAX_NS): one thread that
 * keeps its core beats two that wait for each other. A window after QR_POOL_CALM_NS of calm resets it.
 * A rule that fires on fewer waits also fires on a shared host's ordinary hiccups and costs a 2-thread
 * decode its second thread (docs/perf/2026-11-28-source-comments.md). */
#define QR_POOL_WINDOW_NS 50000000u
#define QR_POOL_WAIT_SHARE 4
#define QR_POOL_SOLO_MIN_NS 20000000u
#define QR_POOL_SOLO_MAX_NS 1000000000u
#define QR_POOL_CALM_NS 1000000000u

static void after_job(qr_pool *p, uint64_t start, uint64_t end, uint64_t waited)
{
    if (!p->window_start) p->window_start = start;
    p->window_wait += waited;
    const uint64_t span = end - p->window_start;
    if (span < QR_POOL_WINDOW_NS) return;
    if (p->window_wait * QR_POOL_WAIT_SHARE > span) {
        p->solo_ns = p->solo_ns ? p->solo_ns * 2 : QR_POOL_SOLO_MIN_NS;
        if (p->solo_ns > QR_POOL_SOLO_MAX_NS) p->solo_ns = QR_POOL_SOLO_MAX_NS;
        p->solo_until = end + p->solo_ns;
    } else if (p->solo_ns && end - p->solo_until > QR_POOL_CALM_NS) {
        p->solo_ns = p->solo_until = 0;
    }
    p->window_start = p->window_wait = 0;
}

static void run_alone(size_t n_chunks, qr_pool_fn *fn, void *ctx)
{
    for (size_t c = 0; c < n_chunks; c++) fn(ctx, c, 0);
}

void qr_pool_run(qr_pool *p, size_t n_chunks, qr_pool_fn *fn, void *ctx)
{
    if (n_chunks == 0) return;
    /* more chunks than `state` can count (a broken contract, never the library's own): still run them all */
    if (!p || p->n_threads == 1 || n_chunks == 1 || n_chunks > QR_POOL_MAX_CHUNKS ||
        (p->solo_until && now_ns() < p->solo_until)) {
        run_alone(n_chunks, fn, ctx);
        return;
    }
    /* Every chunk of the previous job is done (we waited for it), but a late worker may still hold its
     * state: close it before the fields change (see the top of this file). */
    atomic_store(&p->state, ((uint64_t)p->generation << 32) | QR_POOL_CLOSED);
    atomic_store_explicit(&p->fn, fn, memory_order_release);
    atomic_store_explicit(&p->ctx, ctx, memory_order_release);
    atomic_store_explicit(&p->n, (uint32_t)n_chunks, memory_order_release);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    uint32_t g = ++p->generation;
    if (g == 0) g = ++p->generation;   /* workers start having "seen" 0 */
    atomic_store(&p->state, (uint64_t)g << 32);   /* seq_cst: the Dekker pair with `sleepers` */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    const uint32_t n = (uint32_t)n_chunks;
    uint64_t t0 = now_ns();
    take_chunks(p, g, 0);
    if (atomic_load_explicit(&p->done, memory_order_acquire) == n) {
        after_job(p, t0, t0, 0);   /* no wait; the job's start is end enough for the window */
        return;
    }
    /* Only chunks that were claimed are outstanding now; a worker that was preempted while running one
     * is waited for, yielding the core after a while in case it is waiting for this one. */
    uint64_t t1 = now_ns();
    for (unsigned spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) != n; spins++) {
        cpu_relax();
        if (spins > 4096) sched_yield();
    }
    uint64_t t2 = now_ns();
    after_job(p, t0, t2, t2 - t1);
}

/* ---- region jobs (qr_pool_run_regions) ------------------------------------------------------------
 * Why regions: two threads reading each its own contiguous half of every matrix read as fast as a plain
 * read, while chunks taken in turn read slower at a host's high-bandwidth moments, the more so the
 * smaller they are (docs/perf/2026-11-27-zen4.md, "Decode regions"). A chunk taken in turn starts a new
 * stream for the thread that takes it, and the hardware prefetcher has to find it again; a region's
 * pieces follow one another.
 *
 * Each region is one 64-bit word, the next unit to hand out (low half) and the end (high half), on a cache
 * line of its own: the owner's front takes touch only its own line until somebody steals. A front take and
 * a back take of the same region are compare-and-swaps of that one word, so no unit is handed out twice. */
typedef struct pool_region {
    alignas(64) _Atomic uint64_t span;
} pool_region;

typedef struct region_job {
    pool_region region[QR_POOL_MAX_REGIONS];
    size_t n_regions;
    qr_pool_range_fn *fn;
    void *ctx;
} region_job;

/* Take units from g: from the front ceil(left / piece), or (piece = 0) the back half. false: none left. */
static bool region_take(pool_region *g, unsigned piece, uint32_t *first, uint32_t *count)
{
    uint64_t v = atomic_load_explicit(&g->span, memory_order_relaxed);
    for (;;) {
        const uint32_t next = (uint32_t)v, end = (uint32_t)(v >> 32);
        if (next >= end) return false;
        const uint32_t left = end - next, k = piece ? (left + piece - 1) / piece : (left + 1) / 2;
        const uint64_t nv = piece ? v + k : ((uint64_t)(end - k) << 32) | next;
        if (atomic_compare_exchange_weak_explicit(&g->span, &v, nv, memory_order_relaxed, memory_order_relaxed)) {
            *first = piece ? next : end - k;
            *count = k;
            return true;
        }
    }
}

/* One chunk of the pool job behind a region job: the thread's own region, then the backs of the others
 * until nothing is left. Which chunk it is does not matter; a thread that runs a second finds nothing. The
 * takes need no ordering: the ranges' writes reach the caller through the pool's `done` count. */
static void region_chunk(void *ctx, size_t c, int worker)
{
    region_job *j = ctx;
    (void)c;
    pool_region *own = &j->region[(size_t)worker % j->n_regions];
    uint32_t first, count;
    while (region_take(own, QR_POOL_REGION_PIECE, &first, &count)) j->fn(j->ctx, first, count, worker);
    for (;;) {
        pool_region *fullest = NULL;
        uint32_t most = 0;
        for (size_t r = 0; r < j->n_regions; r++) {
            const uint64_t v = atomic_load_explicit(&j->region[r].span, memory_order_relaxed);
            const uint32_t next = (uint32_t)v, end = (uint32_t)(v >> 32);
            if (next < end && end - next > most) {
                most = end - next;
                fullest = &j->region[r];
            }
        }
        if (!fullest) return;
        if (region_take(fullest, 0, &first, &count)) j->fn(j->ctx, first, count, worker);
    }
}

void qr_pool_run_regions(qr_pool *p, size_t units, qr_pool_range_fn *fn, void *ctx)
{
    if (units == 0) return;
    const size_t threads = (size_t)qr_pool_threads(p);
    if (threads == 1 || units > QR_POOL_MAX_UNITS) {
        fn(ctx, 0, units, 0);
        return;
    }
    /* not an initializer: that would clear all QR_POOL_MAX_REGIONS lines (4 KiB) on every decode product */
    region_job j;
    j.n_regions = threads < QR_POOL_MAX_REGIONS ? threads : QR_POOL_MAX_REGIONS;
    j.fn = fn;
    j.ctx = ctx;
    for (size_t r = 0; r < j.n_regions; r++) {
        const uint64_t first = units * r / j.n_regions, end = units * (r + 1) / j.n_regions;
        atomic_init(&j.region[r].span, first | end << 32);
    }
    qr_pool_run(p, threads, region_chunk, &j);
}
