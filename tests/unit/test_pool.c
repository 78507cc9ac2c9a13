/* test_pool.c — runtime/qr_pool: every chunk of every job runs exactly once, its writes are seen by the
 * caller when qr_pool_run returns, worker numbers stay below the thread count, and a pool survives many
 * jobs in a row (the generation and chunk counters race with late workers), being freed while its workers
 * sleep or spin, and the back-off (a worker that holds a chunk for a long time). Built also with
 * ThreadSanitizer by `make pool-tsan`, which checks the memory ordering the caller relies on.
 * Nothing here is timed: the back-off is exercised, and its only observable effect — who runs the chunks
 * — is allowed either way. Pinning: a pool of as many threads as the process has CPUs runs worker i on the
 * i-th of them and nowhere else; with QMAP_PIN=0, or with more threads than CPUs, a worker may run on all.
 * Region jobs: every unit once, in ranges that follow one another in the region a thread owns, and a
 * stalled worker's region taken over from its back. */
#define _GNU_SOURCE /* sched_getaffinity, pthread_getaffinity_np */
#include "test_util.h"

#include <pthread.h>
#include <sched.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qr_pool.h"

typedef struct count_job {
    _Atomic uint32_t *runs;   /* [n] times chunk c ran */
    uint64_t *value;          /* [n] written by chunk c, plainly: the caller must see it */
    size_t n;
    int threads;
    _Atomic int bad_worker;
} count_job;

static void count_chunk(void *ctx, size_t c, int worker)
{
    count_job *j = ctx;
    if (c >= j->n || worker < 0 || worker >= j->threads) {
        atomic_store(&j->bad_worker, 1);
        return;
    }
    atomic_fetch_add_explicit(&j->runs[c], 1, memory_order_relaxed);
    j->value[c] = c * 2654435761u + 1;
}

static qr_pool *new_pool(int threads)
{
    qr_pool *p = NULL;
    qm_error err;
    if (qr_pool_new(threads, &p, &err) != QM_OK) fail_msg("qr_pool_new(%d): %s", threads, err.message);
    return p;
}

/* Run jobs of sizes 1..max_n in turn on p, many times; check each. */
static void run_jobs(qr_pool *p, int threads, size_t max_n, int rounds)
{
    count_job j = { .threads = threads };
    j.runs = calloc(max_n, sizeof *j.runs);
    j.value = calloc(max_n, sizeof *j.value);
    assert_non_null(j.runs);
    assert_non_null(j.value);
    for (int r = 0; r < rounds; r++)
        for (size_t n = 1; n <= max_n; n = n < 20 ? n + 1 : n * 3) {
            for (size_t c = 0; c < n; c++) atomic_store(&j.runs[c], 0), j.value[c] = 0;
            j.n = n;
            qr_pool_run(p, n, count_chunk, &j);
            assert_int_equal(atomic_load(&j.bad_worker), 0);
            for (size_t c = 0; c < n; c++) {
                if (atomic_load(&j.runs[c]) != 1)
                    fail_msg("threads %d, job of %zu chunks, round %d: chunk %zu ran %u times", threads, n, r, c,
                             atomic_load(&j.runs[c]));
                if (j.value[c] != c * 2654435761u + 1)
                    fail_msg("threads %d, job of %zu chunks: chunk %zu's write is not seen by the caller", threads,
                             n, c);
            }
        }
    free(j.runs);
    free(j.value);
}

static void test_every_chunk_once(void **state)
{
    (void)state;
    static const int counts[] = { 1, 2, 3, 4, 8 };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        qr_pool *p = new_pool(counts[i]);
        assert_int_equal(qr_pool_threads(p), counts[i]);
        run_jobs(p, counts[i], 2000, 20);
        qr_pool_free(p);
    }
}

/* The default size is one thread per CPU the process may use, at least 1. */
static void test_default_size(void **state)
{
    (void)state;
    qr_pool *p = new_pool(0);
    int t = qr_pool_threads(p);
    assert_true(t >= 1 && t <= 256);
    run_jobs(p, t, 500, 3);
    qr_pool_free(p);
}

/* A NULL pool runs every chunk on the calling thread, in order, as worker 0. */
typedef struct order_job {
    size_t next;
    int ok;
} order_job;

static void order_chunk(void *ctx, size_t c, int worker)
{
    order_job *j = ctx;
    if (c != j->next || worker != 0) j->ok = 0;
    j->next++;
}

static void test_null_pool_in_order(void **state)
{
    (void)state;
    order_job j = { 0, 1 };
    qr_pool_run(NULL, 1000, order_chunk, &j);
    assert_int_equal(j.ok, 1);
    assert_int_equal(j.next, 1000);
    assert_int_equal(qr_pool_threads(NULL), 1);
    qr_pool_run(NULL, 0, order_chunk, &j);   /* nothing to do */
    assert_int_equal(j.next, 1000);
}

/* Tens of thousands of tiny jobs back to back: workers often arrive after the job they woke for is
 * finished and must neither run a chunk twice nor run one of the next job with the old function. */
static void test_many_tiny_jobs(void **state)
{
    (void)state;
    qr_pool *p = new_pool(3);
    run_jobs(p, 3, 3, 20000);
    qr_pool_free(p);
}

/* Workers go to sleep after QR_POOL_SPIN_NS without work; posting must wake them (a lost wake-up would
 * not hang the caller, who runs every chunk itself, so the check is that jobs still complete and are
 * correct), and freeing a pool whose workers sleep must join them. */
static void test_sleep_and_wake(void **state)
{
    (void)state;
    qr_pool *p = new_pool(2);
    for (int r = 0; r < 5; r++) {
        run_jobs(p, 2, 64, 1);
        struct timespec ts = { 0, 3 * QR_POOL_SPIN_NS };
        nanosleep(&ts, NULL);
    }
    qr_pool_free(p);
    qr_pool_free(NULL);
}

/* Chunks that take long on some threads (a preempted worker looks like this to the caller): the caller
 * waits for them, may enter its back-off and run the next jobs alone; every job stays exact. */
typedef struct slow_job {
    count_job inner;
    int slow_worker;
    _Atomic int slow_ran;     /* chunks the slow worker ran */
    long caller_ns;           /* the caller spins this long in each chunk it runs (0: none) */
} slow_job;

static long elapsed_ns(const struct timespec *a, const struct timespec *b)
{
    return (b->tv_sec - a->tv_sec) * 1000000000L + (b->tv_nsec - a->tv_nsec);
}

static void slow_chunk(void *ctx, size_t c, int worker)
{
    slow_job *j = ctx;
    if (worker == 0 && j->caller_ns) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        do clock_gettime(CLOCK_MONOTONIC, &b); while (elapsed_ns(&a, &b) < j->caller_ns);
    }
    if (worker == j->slow_worker) {
        atomic_fetch_add(&j->slow_ran, 1);
        struct timespec ts = { 0, 1000000 };   /* 1 ms: the caller waits most of each job, and backs off */
        nanosleep(&ts, NULL);
    }
    count_chunk(&j->inner, c, worker);
}

static void test_slow_worker(void **state)
{
    (void)state;
    qr_pool *p = new_pool(2);
    slow_job j = { .inner = { .threads = 2 }, .slow_worker = 1 };
    size_t n = 16;
    j.inner.runs = calloc(n, sizeof *j.inner.runs);
    j.inner.value = calloc(n, sizeof *j.inner.value);
    assert_non_null(j.inner.runs);
    assert_non_null(j.inner.value);
    j.inner.n = n;
    /* The caller spends 20 µs in each chunk it runs, so the worker always gets to take some, and each
     * one it takes costs the caller a wait of about 1 ms: the back-off's windows (50 ms) see the caller
     * waiting most of the time, and it should run jobs alone in spells (20 ms, then 40, ...). 250 jobs:
     * without the back-off about 1 ms each, every one with a slow chunk; with it, about 45 slow jobs per
     * window, then spells of 320 µs jobs that the worker has no part in. */
    j.caller_ns = 20000;
    int alone = 0;
    for (int r = 0; r < 250; r++) {
        for (size_t c = 0; c < n; c++) atomic_store(&j.inner.runs[c], 0), j.inner.value[c] = 0;
        int before = atomic_load(&j.slow_ran);
        qr_pool_run(p, n, slow_chunk, &j);
        if (r >= 50 && atomic_load(&j.slow_ran) == before) alone++;
        for (size_t c = 0; c < n; c++) {
            assert_int_equal(atomic_load(&j.inner.runs[c]), 1);
            assert_true(j.inner.value[c] == c * 2654435761u + 1);
        }
    }
    assert_int_equal(atomic_load(&j.inner.bad_worker), 0);
    if (alone < 50)
        fail_msg("only %d of jobs 50-249 ran without the slow worker: the caller did not back off", alone);
    free(j.inner.runs);
    free(j.inner.value);
    run_jobs(p, 2, 200, 3);   /* and the pool still works for normal jobs */
    qr_pool_free(p);
}

static void test_chunks(void **state)
{
    (void)state;
    qr_pool *p = new_pool(2);
    assert_int_equal(qr_pool_chunks(p, 1000, 8), 16);
    assert_int_equal(qr_pool_chunks(p, 5, 8), 5);
    assert_int_equal(qr_pool_chunks(p, 0, 8), 1);
    assert_int_equal(qr_pool_chunks(p, 1000, 0), 2);
    assert_int_equal(qr_pool_chunks(NULL, 1000, 4), 4);
    qr_pool_free(p);
}

/* What each worker's affinity mask is while it runs a chunk. */
#define MASK_MAX 65   /* threads: up to 64 CPUs, and one more */

typedef struct mask_job {
    cpu_set_t mask[MASK_MAX];
    _Atomic int seen[MASK_MAX];
} mask_job;

static void mask_chunk(void *ctx, size_t c, int worker)
{
    (void)c;
    mask_job *j = ctx;
    if (worker < MASK_MAX && !atomic_load(&j->seen[worker])) {
        cpu_set_t m;
        if (pthread_getaffinity_np(pthread_self(), sizeof m, &m) == 0) {
            j->mask[worker] = m;
            atomic_store(&j->seen[worker], 1);
        }
    }
    struct timespec ts = { 0, 200 * 1000 };   /* long enough that every worker takes some chunks */
    nanosleep(&ts, NULL);
}

/* Runs jobs on a pool of `threads` until every worker has reported its mask (bounded), and checks it. */
static void check_masks(int threads, bool expect_pinned)
{
    cpu_set_t all;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    int cpus[MASK_MAX], n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < MASK_MAX; c++)
        if (CPU_ISSET(c, &all)) cpus[n++] = c;
    qr_pool *p = NULL;
    qm_error err;
    assert_int_equal(qr_pool_new(threads, &p, &err), QM_OK);
    mask_job *j = calloc(1, sizeof *j);
    assert_non_null(j);
    for (int tries = 0; tries < 200; tries++) {
        qr_pool_run(p, 4 * (size_t)threads, mask_chunk, j);
        bool all_seen = true;
        for (int w = 1; w < threads; w++) all_seen = all_seen && atomic_load(&j->seen[w]);
        if (all_seen) break;
    }
    for (int w = 1; w < threads; w++) {
        if (!atomic_load(&j->seen[w])) fail_msg("worker %d of %d never ran a chunk", w, threads);
        if (expect_pinned) {
            assert_int_equal(CPU_COUNT(&j->mask[w]), 1);
            assert_true(CPU_ISSET(cpus[w], &j->mask[w]));
        } else {
            assert_true(CPU_EQUAL(&j->mask[w], &all));
        }
    }
    qr_pool_free(p);
    free(j);
}

static void test_pinning(void **state)
{
    (void)state;
    cpu_set_t all;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    const int cpus = CPU_COUNT(&all);
    if (cpus < 2 || cpus + 1 > MASK_MAX) {
        print_message("test_pinning: %d CPUs, checked with 2-%d only\n", cpus, MASK_MAX - 1);
        return;
    }
    unsetenv("QMAP_PIN");
    check_masks(cpus, true);
    check_masks(cpus + 1, false);   /* more threads than CPUs: nothing pinned */
    setenv("QMAP_PIN", "0", 1);
    check_masks(cpus, false);
    unsetenv("QMAP_PIN");
}

/* ---- region jobs (qr_pool_run_regions) ---- */

#define RANGE_LOG 4096

/* What a region job saw: how often each unit ran (and its plain write), and each thread's ranges in the
 * order it ran them (only that thread appends to its own log). */
typedef struct region_seen {
    _Atomic uint32_t *runs;
    uint64_t *value;
    size_t units;
    int threads;
    _Atomic int bad;
    size_t n_log[8];
    size_t log_first[8][RANGE_LOG], log_count[8][RANGE_LOG];
    int slow_worker;          /* >= 0: this worker stalls in its first range of the job until worker 0 has
                               * run a range in the second half of the units (at most 2 s) */
    _Atomic int slept;
    _Atomic int caller_stole; /* worker 0 has run a range at or past units / 2 */
} region_seen;

static void region_range(void *ctx, size_t first, size_t count, int worker)
{
    region_seen *j = ctx;
    if (worker < 0 || worker >= j->threads || worker >= 8 || count == 0 || first + count > j->units ||
        j->n_log[worker] >= RANGE_LOG) {
        atomic_store(&j->bad, 1);
        return;
    }
    j->log_first[worker][j->n_log[worker]] = first;
    j->log_count[worker][j->n_log[worker]++] = count;
    if (worker == 0 && first >= j->units / 2) atomic_store(&j->caller_stole, 1);
    if (worker == j->slow_worker && !atomic_exchange(&j->slept, 1)) {
        /* wait for the caller to take over (not a fixed sleep: a caller preempted for longer than a sleep
         * would find the region done by its owner, and the test would fail on a busy machine) */
        struct timespec ts = { 0, 50 * 1000 };
        for (int i = 0; i < 40000 && !atomic_load(&j->caller_stole); i++) nanosleep(&ts, NULL);
    }
    for (size_t u = first; u < first + count; u++) {
        atomic_fetch_add_explicit(&j->runs[u], 1, memory_order_relaxed);
        j->value[u] = u * 2654435761u + 7;
    }
}

/* One region job of `units` on p; checks every unit once and seen, and that each thread's ranges in its own
 * region start at the region's start and each begin where the one before ended (one stream). */
static void check_region_job(qr_pool *p, int threads, size_t units, region_seen *j)
{
    j->units = units;
    j->threads = threads;
    atomic_store(&j->bad, 0);
    atomic_store(&j->slept, 0);
    atomic_store(&j->caller_stole, 0);
    memset(j->n_log, 0, sizeof j->n_log);
    for (size_t u = 0; u < units; u++) atomic_store(&j->runs[u], 0), j->value[u] = 0;
    qr_pool_run_regions(p, units, region_range, j);
    if (atomic_load(&j->bad)) fail_msg("threads %d, %zu units: a range out of bounds or a bad worker", threads, units);
    for (size_t u = 0; u < units; u++) {
        if (atomic_load(&j->runs[u]) != 1)
            fail_msg("threads %d, %zu units: unit %zu ran %u times", threads, units, u, atomic_load(&j->runs[u]));
        if (j->value[u] != u * 2654435761u + 7)
            fail_msg("threads %d, %zu units: unit %zu's write is not seen by the caller", threads, units, u);
    }
    for (int w = 0; w < threads && units; w++) {
        const size_t start = units * (size_t)w / (size_t)threads, end = units * (size_t)(w + 1) / (size_t)threads;
        size_t expect = start;
        for (size_t i = 0; i < j->n_log[w]; i++) {
            const size_t f = j->log_first[w][i];
            if (f < start || f >= end) continue;   /* stolen from another region */
            if (f != expect)
                fail_msg("threads %d, %zu units: worker %d's range %zu in its own region [%zu, %zu) starts at %zu, "
                         "not where its last one ended (%zu)", threads, units, w, i, start, end, f, expect);
            expect = f + j->log_count[w][i];
        }
    }
}

static region_seen *seen_new(size_t max_units, int slow_worker)
{
    region_seen *j = calloc(1, sizeof *j);
    assert_non_null(j);
    j->runs = calloc(max_units, sizeof *j->runs);
    j->value = calloc(max_units, sizeof *j->value);
    assert_non_null(j->runs);
    assert_non_null(j->value);
    j->slow_worker = slow_worker;
    return j;
}

static void seen_free(region_seen *j)
{
    free(j->runs);
    free(j->value);
    free(j);
}

static void test_regions(void **state)
{
    (void)state;
    static const int counts[] = { 1, 2, 3, 4, 8 };
    static const size_t sizes[] = { 0, 1, 2, 3, 7, 64, 1000, 4097 };
    region_seen *j = seen_new(4097, -1);
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        qr_pool *p = new_pool(counts[i]);
        for (int r = 0; r < 20; r++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) check_region_job(p, counts[i], sizes[s], j);
        qr_pool_free(p);
    }
    check_region_job(NULL, 1, 1000, j);
    assert_int_equal(j->n_log[0], 1);   /* no pool: one range, all of it */
    assert_int_equal(j->log_count[0][0], 1000);
    seen_free(j);
}

/* A worker that stalls in its first range (until the caller has taken some of its region, or 2 s): the
 * caller takes the rest of the worker's region from its back (whether the worker woke before the caller
 * finished its own region or not), and every unit still runs once. Without stealing the worker waits its
 * 2 s out and the check below fails. */
static void test_regions_slow_worker(void **state)
{
    (void)state;
    region_seen *j = seen_new(1000, 1);
    qr_pool *p = new_pool(2);
    for (int r = 0; r < 20; r++) {
        check_region_job(p, 2, 1000, j);
        size_t stolen = 0;
        for (size_t i = 0; i < j->n_log[0]; i++)
            if (j->log_first[0][i] >= 500) stolen += j->log_count[0][i];
        if (stolen == 0) fail_msg("round %d: the caller took nothing of the stalled worker's region", r);
    }
    qr_pool_free(p);
    seen_free(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_chunk_once),
        cmocka_unit_test(test_default_size),
        cmocka_unit_test(test_null_pool_in_order),
        cmocka_unit_test(test_many_tiny_jobs),
        cmocka_unit_test(test_sleep_and_wake),
        cmocka_unit_test(test_slow_worker),
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_pinning),
        cmocka_unit_test(test_regions),
        cmocka_unit_test(test_regions_slow_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
