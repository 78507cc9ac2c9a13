/* test_bench_measure.c — the benchmarks' baselines (cli/bench_measure.c) against their reference.
 *
 * Every read method the CPU has must return exactly bm_read_reference's sum (the 64-bit words of the
 * buffer, wrapping) on buffers of every multiple of its granule up to 8 granules and on a large one, so
 * that each reads every byte once and nothing else; bm_read_once over 1, 2 and 4 threads must read every
 * byte of the buffer once, in parts no longer than a thread's share of the reader's chunk when it has one
 * (a reader that sums what it is given, against the whole buffer's sum), and a chunked reader applies only
 * to buffers longer than its chunk; the anonymous buffer is filled;
 * the statistics are the median, min and max; a limit held (bm_limit_steady) when its readings before
 * and after a run agree within BM_STEADY_SPREAD, and never with one missing.
 * bm_run_threads runs its function on as many threads as asked, all at once (each waits, with a time
 * limit, until all have arrived: run one after another, they would time out), each on its own thread,
 * and leaves no thread behind; the time it returns covers the slowest thread's work. bm_run_beside_limit
 * takes a run again exactly while its ratio is above BM_RATIO_LIMIT, at most the reruns it was given,
 * counts them, and stops at a failed run (NaN). The buffer a decode's limit is read from is at least 4 x
 * the LLC and never shorter than the model, for any LLC and model size given (bm_memory_buffer_len), and
 * memory's two readings (bm_bandwidth_memory) come back. */
#include <stdarg.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bench_measure.h"

static uint8_t *random_buffer(size_t n, uint64_t seed)
{
    uint8_t *p = aligned_alloc(64, n + 4096);   /* + the prefetch distance: prefetches may look past the end */
    assert_non_null(p);
    for (size_t i = 0; i < n + 4096; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t)(seed >> 56);
    }
    return p;
}

static void readers_equal_reference(void **state)
{
    (void)state;
    const bm_reader *r;
    size_t n = bm_readers(&r);
    assert_true(n >= 1);
    for (size_t k = 0; k < n; k++) {
        for (size_t m = 1; m <= 8; m++) {
            size_t len = m * r[k].granule;
            uint8_t *p = random_buffer(len, 17 * m + k);
            assert_int_equal(r[k].fn(p, len), bm_read_reference(p, len));
            free(p);
        }
        size_t big = (size_t)3 << 20;
        uint8_t *p = random_buffer(big, 99);
        p[big - 1] ^= 0xff;   /* the last byte counts */
        assert_int_equal(r[k].fn(p, big), bm_read_reference(p, big));
        /* all-ones words: the sums wrap, and must wrap the same way */
        memset(p, 0xff, big);
        assert_int_equal(r[k].fn(p, big), bm_read_reference(p, big));
        free(p);
    }
}

/* A reader that adds what it read to g_read_sum and notes the longest part it was given. */
static _Atomic uint64_t g_read_sum;
static _Atomic size_t g_longest_part;
static uint64_t summing_reader(const uint8_t *p, size_t n)
{
    const uint64_t s = bm_read_reference(p, n);
    atomic_fetch_add(&g_read_sum, s);
    size_t seen = atomic_load(&g_longest_part);
    while (n > seen && !atomic_compare_exchange_weak(&g_longest_part, &seen, n)) {}
    return s;
}

static void parts_cover_the_buffer_once(void **state)
{
    (void)state;
    const size_t len = (size_t)67 << 20;   /* one pass (64 MiB or more); 4 MiB and 64 MiB chunks and a 3 MiB tail */
    uint8_t *p = random_buffer(len, 5);
    const uint64_t want = bm_read_reference(p, len);
    const size_t chunks[] = { 0, (size_t)4 << 20, (size_t)64 << 20 };
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++)
        for (int nt = 1; nt <= 4; nt *= 2) {
            const bm_reader r = { "summing", summing_reader, 64, chunks[c] };
            atomic_store(&g_read_sum, 0);
            atomic_store(&g_longest_part, 0);
            assert_true(bm_read_once(&r, p, len, nt) > 0);
            assert_true(atomic_load(&g_read_sum) == want);
            assert_true(atomic_load(&g_longest_part) == (chunks[c] ? chunks[c] : len) / (size_t)nt);
        }
    free(p);
}

/* A chunked reader applies only where its chunk is shorter than the buffer (else it reads as its plain
 * twin); a plain one everywhere. */
static void chunked_reader_applies_past_its_chunk(void **state)
{
    (void)state;
    const size_t mib = (size_t)1 << 20;
    const bm_reader plain = { "plain", bm_read_reference, 64, 0 };
    const bm_reader chunked = { "chunked", bm_read_reference, 64, 4 * mib };
    assert_true(bm_reader_applies(&plain, 64));
    assert_true(bm_reader_applies(&plain, 64 * mib));
    assert_false(bm_reader_applies(&chunked, 4 * mib));
    assert_false(bm_reader_applies(&chunked, 64));
    assert_true(bm_reader_applies(&chunked, 4 * mib + 64));
}

static void reference_is_the_word_sum(void **state)
{
    (void)state;
    uint8_t b[16] = { 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0x80 };
    assert_int_equal(bm_read_reference(b, 16), 1u + 0x8000000000000100ull);
}

static void bandwidth_and_buffer(void **state)
{
    (void)state;
    size_t len = (size_t)8 << 20;
    uint8_t *buf = bm_anon_buffer(len, 2);
    assert_non_null(buf);
    assert_int_equal(buf[0], 0x5a);
    assert_int_equal(buf[len / 2], 0x5a);
    assert_int_equal(buf[len - 1], 0x5a);
    const bm_reader *r;
    bm_readers(&r);
    for (int t = 1; t <= 3; t++) assert_true(bm_read_once(&r[0], buf, len, t) > 0);
    const char *best = NULL;
    double g = bm_bandwidth(buf, len, 2, &best);
    assert_true(g > 0 && isfinite(g));
    assert_non_null(best);
    munmap(buf, len);
}

static void statistics(void **state)
{
    (void)state;
    double v[5] = { 5, 1, 4, 2, 3 };
    bm_stats s = bm_stats_of(v, 5);
    assert_true(s.median == 3 && s.min == 1 && s.max == 5 && s.runs == 5);
    double w[4] = { 4, 1, 3, 2 };
    s = bm_stats_of(w, 4);
    assert_true(s.median == 2.5 && s.min == 1 && s.max == 4);
    assert_true(isnan(bm_ratio(1, 0)));
    assert_true(bm_ratio(3, 2) == 1.5);
}

/* A limit held when its readings before and after a run agree within BM_STEADY_SPREAD of the larger, in
 * either order; a missing reading (0, NaN) never holds. */
static void limit_steady(void **state)
{
    (void)state;
    const double hi = 60.0, edge = (1.0 - BM_STEADY_SPREAD) * hi;
    assert_true(bm_limit_steady(hi, hi));
    assert_true(bm_limit_steady(hi, edge) && bm_limit_steady(edge, hi));
    assert_false(bm_limit_steady(hi, edge * 0.999) || bm_limit_steady(edge * 0.999, hi));
    assert_false(bm_limit_steady(60.0, 32.0));   /* the host's two states */
    assert_false(bm_limit_steady(0, 0) || bm_limit_steady(NAN, hi) || bm_limit_steady(hi, NAN) ||
                 bm_limit_steady(-hi, -hi));
}

static void peak(void **state)
{
    (void)state;
    for (int k = 0; k <= BM_PEAK_INT8_AVX2; k++) {
        double g = bm_peak_once((bm_peak_kind)k, 1000, 2);
        if (bm_peak_label((bm_peak_kind)k)) assert_true(g > 0 && isfinite(g) && bm_peak_ops_per_trip((bm_peak_kind)k) > 0);
        else assert_true(isnan(g));
    }
#if defined(__x86_64__) || defined(__i386__)
    /* the AVX2 int8 loop runs wherever AVX2 does, and is the int8 peak of a CPU without VNNI */
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) {
        assert_non_null(bm_peak_label(BM_PEAK_INT8_AVX2));
        assert_non_null(bm_peak_label(BM_PEAK_INT8));
        if (!__builtin_cpu_supports("avx512vnni"))
            assert_string_equal(bm_peak_label(BM_PEAK_INT8), bm_peak_label(BM_PEAK_INT8_AVX2));
    }
#endif
}

/* Threads of this process now (/proc/self/task). */
static int task_count(void)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

typedef struct meet {
    atomic_int arrived;
    atomic_int all_met;     /* threads that saw every thread arrive */
    pthread_t self[8];
    int seen[8];
    int nt_seen[8];
} meet;

static void meet_part(void *ctx, int t, int nt)
{
    meet *m = ctx;
    m->self[t] = pthread_self();
    m->seen[t]++;
    m->nt_seen[t] = nt;
    atomic_fetch_add(&m->arrived, 1);
    double t0 = bm_now();
    while (atomic_load(&m->arrived) < nt && bm_now() - t0 < 5.0) {}
    if (atomic_load(&m->arrived) == nt) atomic_fetch_add(&m->all_met, 1);
    if (t == nt - 1) {   /* the slowest: the returned time must cover it */
        struct timespec ts = { 0, 30 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

static void threads_run_at_once(void **state)
{
    (void)state;
    const int before = task_count();
    for (int nt = 1; nt <= 4; nt++) {
        meet m;
        memset(&m, 0, sizeof m);
        atomic_init(&m.arrived, 0);
        atomic_init(&m.all_met, 0);
        double s = bm_run_threads(nt, meet_part, &m);
        assert_true(s >= 0.030 && s < 4.0);
        assert_int_equal(atomic_load(&m.all_met), nt);
        assert_true(pthread_equal(m.self[0], pthread_self()));   /* thread 0 is the caller */
        for (int t = 0; t < nt; t++) {
            assert_int_equal(m.seen[t], 1);
            assert_int_equal(m.nt_seen[t], nt);
            for (int u = 0; u < t; u++) assert_false(pthread_equal(m.self[t], m.self[u]));
        }
        assert_int_equal(task_count(), before);   /* every started thread was joined */
    }
}

/* A run whose ratios come from a script: ratios[i] for the i-th call. */
typedef struct scripted {
    const double *ratios;
    int calls;
} scripted;

static double scripted_run(void *ctx)
{
    scripted *sc = ctx;
    return sc->ratios[sc->calls++];
}

static void reruns_above_the_limit(void **state)
{
    (void)state;
    /* in the limit (1.05 itself included): one run, no rerun */
    const double ok[] = { BM_RATIO_LIMIT, 9.0 };
    scripted sc = { ok, 0 };
    int reruns = 0;
    assert_true(bm_run_beside_limit(scripted_run, &sc, 3, &reruns) == BM_RATIO_LIMIT);
    assert_int_equal(sc.calls, 1);
    assert_int_equal(reruns, 0);
    /* a state change mid-run: two runs above, the third in the limit; reruns add to the count given */
    const double change[] = { 1.3, 1.06, 0.91, 9.0 };
    sc = (scripted){ change, 0 };
    reruns = 5;
    assert_true(bm_run_beside_limit(scripted_run, &sc, 3, &reruns) == 0.91);
    assert_int_equal(sc.calls, 3);
    assert_int_equal(reruns, 7);
    /* a wrong limit: above in every try, the last ratio comes back for the caller to report */
    const double wrong[] = { 1.4, 1.5, 1.6, 1.7, 9.0 };
    sc = (scripted){ wrong, 0 };
    reruns = 0;
    assert_true(bm_run_beside_limit(scripted_run, &sc, 3, &reruns) == 1.7);
    assert_int_equal(sc.calls, 4);
    assert_int_equal(reruns, 3);
    /* no reruns allowed; and reruns may be NULL */
    sc = (scripted){ wrong, 0 };
    assert_true(bm_run_beside_limit(scripted_run, &sc, 0, NULL) == 1.4);
    assert_int_equal(sc.calls, 1);
    /* a failed run (NaN) is not taken again, not even after a rerun */
    const double failed[] = { 1.2, NAN, 0.5 };
    sc = (scripted){ failed, 0 };
    reruns = 0;
    assert_true(isnan(bm_run_beside_limit(scripted_run, &sc, 3, &reruns)));
    assert_int_equal(sc.calls, 2);
    assert_int_equal(reruns, 1);
}

/* The memory buffer a decode's limit is read from, for a given LLC and model: no cache can hold it — at
 * least 4 x the LLC (the bound; a cache that resists scans keeps at most its own size of a cyclic
 * read), and where the LLC cannot be told 4 x BM_LLC_UNKNOWN —, never shorter than the model, in whole
 * 2 MiB pages and no longer than needed; the cache may hold weights of at most twice the LLC. */
static void memory_buffer_rule(void **state)
{
    (void)state;
    const size_t mib = (size_t)1 << 20, page = 2 * mib;
    const size_t llcs[] = { 0, 2 * mib, 32 * mib, 480 * mib, 1024 * mib, 33 * mib + 4096 };
    const size_t models[] = { 0, 1, 110767104, 1104467968, (size_t)5 << 30, 4 * 480 * mib + 1 };
    for (size_t i = 0; i < sizeof llcs / sizeof llcs[0]; i++)
        for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
            const size_t llc = llcs[i], model = models[k], len = bm_memory_buffer_len(llc, model);
            const size_t cache = llc ? llc : BM_LLC_UNKNOWN, need = 4 * cache > model ? 4 * cache : model;
            assert_true(len >= 4 * cache);
            assert_true(len >= model);
            assert_true(len % page == 0);
            assert_true(len < need + page);
            assert_true(bm_cache_may_hold(llc, 2 * cache));
            assert_false(bm_cache_may_hold(llc, 2 * cache + 1));
            assert_false(bm_cache_may_hold(llc, len));   /* the buffer itself never */
        }
    /* the host's own LLC as the C library reports it */
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 <= 0) l3 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    assert_true(bm_llc_bytes() == (l3 > 0 ? (size_t)l3 : 0));
}

/* Both readings of memory's bandwidth come back: over the anonymous buffer and over a second buffer read
 * after it (as a model's mapping), also one shorter than some readers' chunks. */
static void memory_readings(void **state)
{
    (void)state;
    const size_t len = (size_t)8 << 20, map_len = (size_t)3 << 20;
    uint8_t *anon = bm_anon_buffer(len, 1), *map = bm_anon_buffer(map_len, 1);
    assert_non_null(anon);
    assert_non_null(map);
    double a = 0, m = 0;
    bm_bandwidth_memory(anon, len, map, map_len, 2, &a, &m);
    assert_true(a > 0 && isfinite(a));
    assert_true(m > 0 && isfinite(m));
    munmap(anon, len);
    munmap(map, map_len);
}

/* The flag lists: every value in range and a multiple of the step, commas only between values; a bad list
 * leaves the count as it was. */
static void lists(void **state)
{
    (void)state;
    long v[4];
    int n = -7, ti[4];
    assert_int_equal(bm_parse_list("2048,5632,64", 64, 65536, 64, v, 4, &n), 0);
    assert_int_equal(n, 3);
    assert_true(v[0] == 2048 && v[1] == 5632 && v[2] == 64);
    assert_int_equal(bm_parse_list("65536", 64, 65536, 64, v, 4, &n), 0);
    assert_int_equal(n, 1);
    assert_true(v[0] == 65536);
    static const char *const bad[] = { "", ",", "2048,", ",2048", "2048,,64", "100", "0", "-64", "65600",
                                       "64 ", "x", "64,128,192,256,320", "99999999999999999999" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        n = -7;
        assert_int_equal(bm_parse_list(bad[i], 64, 65536, 64, v, 4, &n), -1);
        assert_int_equal(n, -7);
    }
    assert_int_equal(bm_parse_threads("1,2,1024", ti, 4, &n), 0);
    assert_true(n == 3 && ti[0] == 1 && ti[1] == 2 && ti[2] == 1024);
    assert_int_equal(bm_parse_threads("0", ti, 4, &n), -1);
    assert_int_equal(bm_parse_threads("1025", ti, 4, &n), -1);
    assert_int_equal(bm_parse_threads("1,2", ti, BM_MAX_LIST + 1, &n), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reference_is_the_word_sum),
        cmocka_unit_test(readers_equal_reference),
        cmocka_unit_test(bandwidth_and_buffer),
        cmocka_unit_test(parts_cover_the_buffer_once),
        cmocka_unit_test(chunked_reader_applies_past_its_chunk),
        cmocka_unit_test(statistics),
        cmocka_unit_test(limit_steady),
        cmocka_unit_test(peak),
        cmocka_unit_test(threads_run_at_once),
        cmocka_unit_test(reruns_above_the_limit),
        cmocka_unit_test(memory_buffer_rule),
        cmocka_unit_test(memory_readings),
        cmocka_unit_test(lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
