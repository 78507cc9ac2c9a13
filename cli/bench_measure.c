/* bench_measure.c — clock, statistics and the bandwidth and peak baselines of qmap's benchmarks
 * (bench_measure.h). */
#define _GNU_SOURCE /* CPU affinity: sched_getaffinity, pthread_attr_setaffinity_np */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BENCH_X86 1
#else
#define BENCH_X86 0
#endif

#include "bench_measure.h"

static volatile uint64_t g_sink;   /* every loop's result ends here, so none can be deleted */

double bm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int bm_parse_list(const char *s, long lo, long hi, long step, long *out, int cap, int *n)
{
    int count = 0;
    for (const char *p = s;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < lo || v > hi || v % step || count == cap) return -1;
        out[count++] = v;
        if (*end == 0) break;
        if (*end != ',') return -1;
        p = end + 1;
    }
    *n = count;
    return 0;
}

int bm_parse_threads(const char *s, int *out, int cap, int *n)
{
    long v[BM_MAX_LIST];
    int count;
    if (cap > BM_MAX_LIST || bm_parse_list(s, 1, 1024, 1, v, cap, &count) != 0) return -1;
    for (int i = 0; i < count; i++) out[i] = (int)v[i];
    *n = count;
    return 0;
}

/* ---- threads ------------------------------------------------------------------------------------- */
/* Each measurement starts its own threads and joins them before it returns. OpenMP's team (how this was
 * done before) stays alive after a parallel region and its idle threads spin for a while (libgomp's
 * default, several ms on Zen 4), on the cores the kernel timed next is running on: `qmap bench kernels`
 * put the 4096x4096 int8 GEMM at 0.67 of the VNNI peak with 2 threads against 0.82 with
 * OMP_WAIT_POLICY=passive (and 0.88 / 1 thread), the two-term one at 0.74 against 0.88. */

/* All nt threads arrive before any leaves. They spin (the threads are running, and a sleeping one would
 * add its wake-up to the timed region), yielding now and then in case there are more threads than CPUs. */
static void rendezvous(atomic_int *count, int nt)
{
    atomic_fetch_add(count, 1);
    for (unsigned spins = 0; atomic_load(count) < nt; spins++) {
#if BENCH_X86
        _mm_pause();
#endif
        if (spins % 1024 == 1023) sched_yield();
    }
}

typedef struct thread_run {
    bm_thread_fn *fn;
    void *ctx;
    int nt;
    atomic_int started, finished;
    double t0, t1;
} thread_run;

typedef struct thread_arg {
    thread_run *run;
    int t;
} thread_arg;

static void *thread_main(void *p)
{
    const thread_arg *a = p;
    thread_run *r = a->run;
    rendezvous(&r->started, r->nt);
    if (a->t == 0) r->t0 = bm_now();
    if (r->fn) r->fn(r->ctx, a->t, r->nt);
    rendezvous(&r->finished, r->nt);
    if (a->t == 0) r->t1 = bm_now();
    return NULL;
}

/* One CPU per thread: the caller's own first, then the others this process may use, in order. False when
 * there are fewer allowed CPUs than threads (then nothing is pinned). */
static bool cpus_for(int threads, int *cpu)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) < threads) return false;
    int self = sched_getcpu(), n = 0;
    if (self >= 0 && self < CPU_SETSIZE && CPU_ISSET(self, &set)) cpu[n++] = self;
    for (int c = 0; c < CPU_SETSIZE && n < threads; c++)
        if (CPU_ISSET(c, &set) && c != self) cpu[n++] = c;
    return n == threads;
}

static void set_one(cpu_set_t *set, int cpu)
{
    CPU_ZERO(set);
    CPU_SET(cpu, set);
}

double bm_run_threads(int threads, bm_thread_fn *fn, void *ctx)
{
    if (threads < 1) threads = 1;
    /* Each thread on a CPU of its own while it measures. Left to the scheduler, a thread started next to
     * a core still busy (the model's pool spins for 200 us after its last product) can share a core with
     * another for milliseconds: seen as single 2-thread peak readings of ~770 GOP/s beside 930, which
     * put a run at 0.90 of a "peak" it was at 0.75 of. The caller's own mask is put back afterwards. */
    int *cpu = malloc((size_t)threads * sizeof *cpu);
    cpu_set_t caller_mask, one;
    const bool pin = cpu && threads > 1 && cpus_for(threads, cpu) &&
                     pthread_getaffinity_np(pthread_self(), sizeof caller_mask, &caller_mask) == 0;
    if (pin) {
        set_one(&one, cpu[0]);
        (void)pthread_setaffinity_np(pthread_self(), sizeof one, &one);
    }
    thread_run r = { .fn = fn, .ctx = ctx, .nt = threads };
    atomic_init(&r.started, 0);
    atomic_init(&r.finished, 0);
    pthread_t *tid = malloc((size_t)threads * sizeof *tid);
    thread_arg *arg = malloc((size_t)threads * sizeof *arg);
    double seconds = NAN;
    if (!cpu || !tid || !arg) {
        errno = ENOMEM;
        goto out;
    }
    int started = 1;
    for (; started < threads; started++) {
        arg[started] = (thread_arg){ &r, started };
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) != 0) break;
        if (pin) {
            set_one(&one, cpu[started]);
            (void)pthread_attr_setaffinity_np(&attr, sizeof one, &one);
        }
        int rc = pthread_create(&tid[started], &attr, thread_main, &arg[started]);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
    }
    if (started < threads) {
        /* fewer threads than asked for would time the wrong thing: let the started ones through the
         * rendezvous without running fn, join them, and report no time */
        r.fn = NULL;
        atomic_fetch_add(&r.finished, threads - started + 1);   /* the caller and those never started */
        atomic_fetch_add(&r.started, threads - started + 1);
        for (int t = 1; t < started; t++) pthread_join(tid[t], NULL);
        errno = EAGAIN;
        goto out;
    }
    arg[0] = (thread_arg){ &r, 0 };
    thread_main(&arg[0]);
    for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
    seconds = r.t1 - r.t0;
out:
    if (pin) (void)pthread_setaffinity_np(pthread_self(), sizeof caller_mask, &caller_mask);
    free(cpu);
    free(tid);
    free(arg);
    return seconds;
}

/* ---- statistics ------------------------------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

bm_stats bm_stats_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    bm_stats s = { .min = v[0], .max = v[n - 1], .runs = n };
    s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return s;
}

double bm_ratio(double a, double b) { return b > 0 ? a / b : NAN; }

bool bm_limit_steady(double before, double after)
{
    if (!(before > 0) || !(after > 0)) return false;   /* NaN compares false */
    return fmin(before, after) >= (1.0 - BM_STEADY_SPREAD) * fmax(before, after);
}

void bm_json_stats(json_out *j, const bm_stats *s, const char *unit)
{
    jo_f64(j, "median", s->median);
    jo_f64(j, "min", s->min);
    jo_f64(j, "max", s->max);
    jo_u64(j, "runs", (uint64_t)s->runs);
    jo_cstring(j, "unit", unit);
}

static const char *fmt_rate(double v, char *buf, size_t size)
{
    snprintf(buf, size, v >= 100 ? "%.1f" : "%.2f", v);
    return buf;
}

void bm_print_stats(const bm_stats *s, const char *unit)
{
    char a[32], b[32], c[32];
    printf("%8s %-7s [%s-%s]", fmt_rate(s->median, a, sizeof a), unit, fmt_rate(s->min, b, sizeof b),
           fmt_rate(s->max, c, sizeof c));
}

/* ---- memory read bandwidth -------------------------------------------------------------------------- */
/* Every reader sums its bytes as 64-bit words into 8 independent accumulators, so that the loads, not the
 * adds, set the pace. The prefetching ones ask for each 64-byte line PF_AHEAD bytes before they load it,
 * as qmap's F16 and Q8_ROW matvec kernels do; the four-stream one reads four quarters of its part at once
 * (more pages open to the hardware prefetcher). */
#define PF_AHEAD 4096

uint64_t bm_read_reference(const uint8_t *p, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t v = 0;
        for (int k = 7; k >= 0; k--) v = v << 8 | p[i + (size_t)k];
        s += v;
    }
    return s;
}

static uint64_t read_c(const uint8_t *p, size_t n)
{
    uint64_t a[8] = { 0 };
    for (size_t i = 0; i < n; i += 64)
        for (int k = 0; k < 8; k++) {
            uint64_t v;
            memcpy(&v, p + i + 8 * (size_t)k, 8);
            a[k] += v;
        }
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

#if BENCH_X86
#define DEF_AVX2(NAME, PF)                                                                                  \
    __attribute__((target("avx2"))) static uint64_t NAME(const uint8_t *p, size_t n)                        \
    {                                                                                                       \
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0; \
        for (size_t i = 0; i < n; i += 256) {                                                              \
            const __m256i *q = (const __m256i *)(p + i);                                                   \
            if (PF)                                                                                         \
                for (int l = 0; l < 4; l++) _mm_prefetch((const char *)(p + i + PF_AHEAD + 64 * l), _MM_HINT_T0); \
            a0 = _mm256_add_epi64(a0, _mm256_load_si256(q + 0));                                            \
            a1 = _mm256_add_epi64(a1, _mm256_load_si256(q + 1));                                            \
            a2 = _mm256_add_epi64(a2, _mm256_load_si256(q + 2));                                            \
            a3 = _mm256_add_epi64(a3, _mm256_load_si256(q + 3));                                            \
            a4 = _mm256_add_epi64(a4, _mm256_load_si256(q + 4));                                            \
            a5 = _mm256_add_epi64(a5, _mm256_load_si256(q + 5));                                            \
            a6 = _mm256_add_epi64(a6, _mm256_load_si256(q + 6));                                            \
            a7 = _mm256_add_epi64(a7, _mm256_load_si256(q + 7));                                            \
        }                                                                                                   \
        __m256i s = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)),  \
                                     _mm256_add_epi64(_mm256_add_epi64(a4, a5), _mm256_add_epi64(a6, a7))); \
        uint64_t out[4];                                                                                    \
        _mm256_storeu_si256((__m256i *)out, s);                                                             \
        return out[0] + out[1] + out[2] + out[3];                                                           \
    }
DEF_AVX2(read_avx2, 0)
DEF_AVX2(read_avx2_pf, 1)

/* not _mm512_reduce_add_epi64: it adds in signed arithmetic, and these sums wrap */
__attribute__((target("avx512f"))) static uint64_t sum_zmm(__m512i s)
{
    uint64_t out[8];
    _mm512_storeu_si512(out, s);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

#define DEF_AVX512(NAME, PF)                                                                                \
    __attribute__((target("avx512f"))) static uint64_t NAME(const uint8_t *p, size_t n)                     \
    {                                                                                                       \
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0; \
        for (size_t i = 0; i < n; i += 512) {                                                              \
            const uint8_t *q = p + i;                                                                       \
            if (PF)                                                                                         \
                for (int l = 0; l < 8; l++) _mm_prefetch((const char *)(q + PF_AHEAD + 64 * l), _MM_HINT_T0); \
            a0 = _mm512_add_epi64(a0, _mm512_load_si512(q + 0));                                            \
            a1 = _mm512_add_epi64(a1, _mm512_load_si512(q + 64));                                           \
            a2 = _mm512_add_epi64(a2, _mm512_load_si512(q + 128));                                          \
            a3 = _mm512_add_epi64(a3, _mm512_load_si512(q + 192));                                          \
            a4 = _mm512_add_epi64(a4, _mm512_load_si512(q + 256));                                          \
            a5 = _mm512_add_epi64(a5, _mm512_load_si512(q + 320));                                          \
            a6 = _mm512_add_epi64(a6, _mm512_load_si512(q + 384));                                          \
            a7 = _mm512_add_epi64(a7, _mm512_load_si512(q + 448));                                          \
        }                                                                                                   \
        return sum_zmm(_mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)), \
                                        _mm512_add_epi64(_mm512_add_epi64(a4, a5), _mm512_add_epi64(a6, a7)))); \
    }
DEF_AVX512(read_avx512, 0)
DEF_AVX512(read_avx512_pf, 1)

/* Four streams: the quarters of p[0..n) read side by side, 128 bytes of each per trip, each prefetched
 * PF bytes ahead into L1 (HINT T0) or L2 (T1). qmap's decode kernels read four streams a thread with a
 * 2 KiB prefetch into L2 (qr_kernels_avx512.c), so that reader is one of the baselines; a shorter
 * distance than one stream's suits four streams since four are in flight
 * (docs/perf/2026-11-28-source-comments.md). */
#define DEF_AVX512_X4(NAME, PF, HINT)                                                                       \
    __attribute__((target("avx512f"))) static uint64_t NAME(const uint8_t *p, size_t n)                     \
    {                                                                                                       \
        size_t qn = n / 4;                                                                                  \
        const uint8_t *s0 = p, *s1 = p + qn, *s2 = p + 2 * qn, *s3 = p + 3 * qn;                            \
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0; \
        for (size_t i = 0; i < qn; i += 128) {                                                             \
            for (int l = 0; l < 2; l++) {                                                                   \
                _mm_prefetch((const char *)(s0 + i + PF + 64 * l), HINT);                                   \
                _mm_prefetch((const char *)(s1 + i + PF + 64 * l), HINT);                                   \
                _mm_prefetch((const char *)(s2 + i + PF + 64 * l), HINT);                                   \
                _mm_prefetch((const char *)(s3 + i + PF + 64 * l), HINT);                                   \
            }                                                                                               \
            a0 = _mm512_add_epi64(a0, _mm512_load_si512(s0 + i));                                          \
            a1 = _mm512_add_epi64(a1, _mm512_load_si512(s0 + i + 64));                                     \
            a2 = _mm512_add_epi64(a2, _mm512_load_si512(s1 + i));                                          \
            a3 = _mm512_add_epi64(a3, _mm512_load_si512(s1 + i + 64));                                     \
            a4 = _mm512_add_epi64(a4, _mm512_load_si512(s2 + i));                                          \
            a5 = _mm512_add_epi64(a5, _mm512_load_si512(s2 + i + 64));                                     \
            a6 = _mm512_add_epi64(a6, _mm512_load_si512(s3 + i));                                          \
            a7 = _mm512_add_epi64(a7, _mm512_load_si512(s3 + i + 64));                                     \
        }                                                                                                   \
        return sum_zmm(_mm512_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)), \
                                        _mm512_add_epi64(_mm512_add_epi64(a4, a5), _mm512_add_epi64(a6, a7)))); \
    }
DEF_AVX512_X4(read_avx512_x4, PF_AHEAD, _MM_HINT_T0)
DEF_AVX512_X4(read_avx512_x4_pf2k, 2048, _MM_HINT_T0)
DEF_AVX512_X4(read_avx512_x4_pf2k_l2, 2048, _MM_HINT_T1)
#endif

size_t bm_readers(const bm_reader **out)
{
    static const bm_reader c_only[] = { { "scalar", read_c, 64, 0 } };
#if BENCH_X86
    /* The last reads the buffer in 256 MiB chunks, the threads side by side in each (their four streams
     * 256 MiB / 8 apart when two read), as a decode's threads share each product. Where streams sit moves
     * a read by up to a fifth, and 256 MiB chunks read fastest of the layouts tried
     * (docs/perf/2026-11-27-zen4.md, "Is the limit itself wrong"). A limit that leaves out a faster way to
     * read is too low. */
    static const bm_reader avx512[] = {
        { "avx512", read_avx512, 512, 0 }, { "avx512+pf", read_avx512_pf, 512, 0 },
        { "avx512x4+pf", read_avx512_x4, 512, 0 }, { "avx512x4+pf2k", read_avx512_x4_pf2k, 512, 0 },
        { "avx512x4+pf2k-l2", read_avx512_x4_pf2k_l2, 512, 0 },
        { "avx512x4+pf2k-l2/256M", read_avx512_x4_pf2k_l2, 512, (size_t)256 << 20 },
    };
    static const bm_reader avx2[] = { { "avx2", read_avx2, 256, 0 }, { "avx2+pf", read_avx2_pf, 256, 0 } };
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) { *out = avx512; return sizeof avx512 / sizeof avx512[0]; }
    if (__builtin_cpu_supports("avx2")) { *out = avx2; return 2; }
#endif
    *out = c_only;
    return 1;
}

/* A buffer smaller than this is read several times in one timed region, so that starting the threads does
 * not count as time spent reading (a small model's weights: their speed of light is the cache's). */
#define MIN_READ_BYTES ((size_t)64 << 20)

typedef struct read_part_out {
    uint64_t total;   /* the reader's sums */
    size_t bytes;     /* what it was given to read */
} read_part_out;

typedef struct read_job {
    const bm_reader *r;
    const uint8_t *buf;
    size_t len, passes;
    read_part_out *out;   /* per thread */
} read_job;

/* Bytes each of nt threads reads of a span of len bytes: its part, rounded down to the granule. */
static size_t read_part_len(const bm_reader *r, size_t len, int nt)
{
    return len / (size_t)nt / r->granule * r->granule;
}

static void read_part(void *ctx, int t, int nt)
{
    const read_job *j = ctx;
    /* the spans split among the threads: the whole buffer, or each chunk of it */
    const size_t span = j->r->chunk && j->r->chunk < j->len ? j->r->chunk : j->len;
    read_part_out o = { 0, 0 };
    for (size_t p = 0; p < j->passes; p++)
        for (size_t at = 0; at < j->len; at += span) {
            const size_t n = read_part_len(j->r, j->len - at < span ? j->len - at : span, nt);
            if (n) o.total += j->r->fn(j->buf + at + (size_t)t * n, n);
            o.bytes += n;
        }
    j->out[t] = o;
}

/* `passes` timed passes of reader r over buf[0..len) (bm_read_once); GB/s of the bytes read. */
static double read_passes(const bm_reader *r, const uint8_t *buf, size_t len, int threads, size_t passes)
{
    if (threads < 1) threads = 1;
    read_part_out *out = calloc((size_t)threads, sizeof *out);
    if (!out) return NAN;
    read_job j = { r, buf, len, passes, out };
    const double s = bm_run_threads(threads, read_part, &j);
    size_t bytes = 0;
    for (int t = 0; t < threads; t++) {
        g_sink += out[t].total;
        bytes += out[t].bytes;
    }
    free(out);
    return (double)bytes / s / 1e9;
}

double bm_read_once(const bm_reader *r, const uint8_t *buf, size_t len, int threads)
{
    return read_passes(r, buf, len, threads, len >= MIN_READ_BYTES ? 1 : (MIN_READ_BYTES + len - 1) / (len ? len : 1));
}

bool bm_reader_applies(const bm_reader *r, size_t len) { return !r->chunk || r->chunk < len; }

double bm_bandwidth(const uint8_t *buf, size_t len, int threads, const char **best)
{
    const bm_reader *r;
    size_t n = bm_readers(&r);
    double top = 0;
    for (size_t i = 0; i < n; i++) {
        if (!bm_reader_applies(&r[i], len)) continue;
        double g = bm_read_once(&r[i], buf, len, threads);
        if (g > top) {
            top = g;
            if (best) *best = r[i].name;
        }
    }
    return top;
}

size_t bm_llc_bytes(void)
{
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return llc > 0 ? (size_t)llc : 0;
}

size_t bm_memory_buffer_len(size_t llc, size_t model_bytes)
{
    const size_t page = (size_t)2 << 20;
    size_t len = BM_LLC_MULTIPLE * (llc ? llc : BM_LLC_UNKNOWN);
    if (len < model_bytes) len = model_bytes;
    return (len + page - 1) / page * page;
}

bool bm_cache_may_hold(size_t llc, size_t len) { return len <= 2 * (llc ? llc : BM_LLC_UNKNOWN); }

/* Writes back and drops every line of p[0..len) from every cache level (clflushopt, else clflush), where the
 * CPU has an instruction for it. A pass over a larger buffer does not do this on every CPU: a replacement
 * policy that resists scans keeps lines read often (a model's mapping, read pass after pass) against a
 * buffer read once, and posix_fadvise or madvise act on the page cache, not on the CPU's. */
#if BENCH_X86
__attribute__((target("clflushopt"))) static void flush_lines_opt(const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i += 64) _mm_clflushopt((void *)(uintptr_t)(p + i));
    _mm_sfence();
}

static void flush_lines(const uint8_t *p, size_t len)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("clflushopt")) {
        flush_lines_opt(p, len);
        return;
    }
    for (size_t i = 0; i < len; i += 64) _mm_clflush((const void *)(p + i));
    _mm_mfence();
}
#else
static void flush_lines(const uint8_t *p, size_t len) { (void)p, (void)len; }   /* the pass over anon only */
#endif

void bm_bandwidth_memory(const uint8_t *anon, size_t anon_len, const uint8_t *map, size_t map_len, int threads,
                         double *anon_gbps, double *map_gbps)
{
    const bm_reader *r;
    const size_t n = bm_readers(&r);
    *anon_gbps = *map_gbps = 0;
    for (size_t i = 0; i < n; i++) {
        /* each mapping pass right after an anonymous one and its own flush: nothing of map in any cache */
        const bm_reader *evict = bm_reader_applies(&r[i], anon_len) ? &r[i] : &r[0];
        const double a = read_passes(evict, anon, anon_len, threads, 1);
        if (evict == &r[i]) *anon_gbps = fmax(*anon_gbps, a);
        if (!bm_reader_applies(&r[i], map_len)) continue;
        flush_lines(map, map_len);
        *map_gbps = fmax(*map_gbps, read_passes(&r[i], map, map_len, threads, 1));
    }
}

typedef struct touch_job {
    uint8_t *buf;
    size_t len;
} touch_job;

static void touch_part(void *ctx, int t, int nt)
{
    const touch_job *j = ctx;
    size_t chunk = j->len / (size_t)nt / 512 * 512;
    size_t end = t + 1 == nt ? j->len : ((size_t)t + 1) * chunk;
    memset(j->buf + (size_t)t * chunk, 0x5a, end - (size_t)t * chunk);
}

uint8_t *bm_anon_buffer(size_t len, int threads)
{
    uint8_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return NULL;
    /* 2 MiB pages where the kernel has them, as qmap maps a model (api/qa_pages.h): on some VMs,
     * memory in 4 KiB pages reads at a fraction of the speed once several GiB are in use, and a baseline
     * or a kernel slowed by its page size measures the page tables, not memory */
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, len, MADV_HUGEPAGE);
#endif
    /* the same split as bm_read_once at the coarsest granule, so each thread faults in what it reads */
    touch_job j = { buf, len };
    if (isnan(bm_run_threads(threads, touch_part, &j))) {
        int e = errno;
        munmap(buf, len);
        errno = e;
        return NULL;
    }
    return buf;
}

/* ---- instruction peak --------------------------------------------------------------------------------- */
/* Tight loops of independent multiply-adds: 16 accumulators for zmm (32 registers), 12 for ymm (16
 * registers), more than latency × throughput on current cores. The empty asm makes every accumulator
 * live in a register each trip (two asm statements: at most 30 operands each, in + out counting
 * twice), so the compiler can neither fold nor drop the chains; the result goes to g_sink. */

#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define REP16(X) REP12(X) X(12) X(13) X(14) X(15)
#define PEAK_ACC_ZMM 16
#define PEAK_ACC_YMM 12
/* `iters` trips of STEP on ymm accumulators c0..c11, every one live in a register each trip */
#define PEAK_LOOP_YMM12(STEP)                                                                               \
    for (uint64_t it = 0; it < iters; it++) {                                                               \
        REP12(STEP)                                                                                         \
        __asm__ volatile("" : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5), "+x"(c6), "+x"(c7), \
                         "+x"(c8), "+x"(c9), "+x"(c10), "+x"(c11));                                         \
    }
/* c0 + ... + c11 with the vector add ADD, as a tree */
#define SUM12(ADD)                                                                                          \
    ADD(ADD(ADD(ADD(c0, c1), ADD(c2, c3)), ADD(ADD(c4, c5), ADD(c6, c7))), ADD(ADD(c8, c9), ADD(c10, c11)))

#if BENCH_X86
__attribute__((target("avx512f,avx512vnni"))) static uint64_t peak_vnni(uint64_t iters, int seed)
{
    const __m512i a = _mm512_set1_epi32(0x01010101 * (seed % 64 + 1)), b = _mm512_set1_epi32(0x02fd03fc);
#define DECL(i) __m512i c##i = _mm512_set1_epi32(seed + i);
    REP16(DECL)
#undef DECL
    for (uint64_t it = 0; it < iters; it++) {
#define STEP(i) c##i = _mm512_dpbusd_epi32(c##i, a, b);
        REP16(STEP)
#undef STEP
        __asm__ volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7));
        __asm__ volatile("" : "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11), "+v"(c12), "+v"(c13), "+v"(c14), "+v"(c15));
    }
    __m512i s = _mm512_add_epi32(
        _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
                         _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7))),
        _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)),
                         _mm512_add_epi32(_mm512_add_epi32(c12, c13), _mm512_add_epi32(c14, c15))));
    uint32_t out[16], sum = 0; /* unsigned: the accumulators wrap by design */
    _mm512_storeu_si512(out, s);
    for (int i = 0; i < 16; i++) sum += out[i];
    return sum;
}

__attribute__((target("avx512f"))) static uint64_t peak_fma_zmm(uint64_t iters, int seed)
{
    const __m512 a = _mm512_set1_ps(1e-4f), b = _mm512_set1_ps(1e-4f * (float)(seed + 1));
#define DECL(i) __m512 c##i = _mm512_set1_ps((float)i);
    REP16(DECL)
#undef DECL
    for (uint64_t it = 0; it < iters; it++) {
#define STEP(i) c##i = _mm512_fmadd_ps(a, b, c##i);
        REP16(STEP)
#undef STEP
        __asm__ volatile("" : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7));
        __asm__ volatile("" : "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11), "+v"(c12), "+v"(c13), "+v"(c14), "+v"(c15));
    }
    __m512 s = _mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                      _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7))),
        _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)),
                      _mm512_add_ps(_mm512_add_ps(c12, c13), _mm512_add_ps(c14, c15))));
    return (uint64_t)_mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static uint64_t peak_fma_ymm(uint64_t iters, int seed)
{
    const __m256 a = _mm256_set1_ps(1e-4f), b = _mm256_set1_ps(1e-4f * (float)(seed + 1));
#define DECL(i) __m256 c##i = _mm256_set1_ps((float)i);
    REP12(DECL)
#undef DECL
#define STEP(i) c##i = _mm256_fmadd_ps(a, b, c##i);
    PEAK_LOOP_YMM12(STEP)
#undef STEP
    __m256 s = SUM12(_mm256_add_ps);
    float out[8];
    _mm256_storeu_ps(out, s);
    return (uint64_t)(out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7]);
}
/* The int8 peak of a CPU without VNNI: what qmap's AVX2 int8 kernels run per 32 multiply-adds of unsigned
 * by signed bytes, vpmaddubsw (pairs into 16 bits) then vpmaddwd by ones (pairs into 32 bits) and vpaddd
 * into the accumulator. Each chain feeds its accumulator's bytes back into the next vpmaddubsw, so no
 * trip's products can be computed once for all chains (with one operand pair shared by every chain the
 * compiler would), and 12 chains cover the three instructions' latency. The kernels' sign trick
 * (vpsignb, for X's signed bytes) is not in the loop: this is the instructions' limit, not the kernels'
 * (one Zen 4 core: 234 GOP/s, one pair per cycle; about 135 with a vpsignb in each chain). */
__attribute__((target("avx2"))) static uint64_t peak_maddubs_ymm(uint64_t iters, int seed)
{
    const __m256i b = _mm256_set1_epi8((char)(3 + seed % 64)), ones = _mm256_set1_epi16(1);
#define DECL(i) __m256i c##i = _mm256_set1_epi32(0x01010101 * (seed + i + 1));
    REP12(DECL)
#undef DECL
#define STEP(i) c##i = _mm256_add_epi32(c##i, _mm256_madd_epi16(_mm256_maddubs_epi16(c##i, b), ones));
    PEAK_LOOP_YMM12(STEP)
#undef STEP
    __m256i s = SUM12(_mm256_add_epi32);
    uint32_t out[8], sum = 0; /* unsigned: the accumulators wrap by design */
    _mm256_storeu_si256((__m256i *)(void *)out, s);
    for (int i = 0; i < 8; i++) sum += out[i];
    return sum;
}
#endif


typedef uint64_t peak_fn(uint64_t iters, int seed);

typedef struct peak_loop {
    const char *label;
    peak_fn *fn;
    int accumulators;
    int lanes;               /* multiply-adds per chain step */
    int step_instructions;   /* instructions per chain step */
} peak_loop;

/* The loop of kind k this CPU runs; fn NULL when it lacks the instruction. */
static peak_loop peak_loop_of(bm_peak_kind k)
{
    peak_loop p = { NULL, NULL, 0, 0, 0 };
#if BENCH_X86
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
    const bool vnni = avx512 && __builtin_cpu_supports("avx512vnni");
    if (k == BM_PEAK_INT8 && !vnni) k = BM_PEAK_INT8_AVX2;
    switch (k) {
    case BM_PEAK_INT8: p = (peak_loop){ "vpdpbusd zmm (int8)", peak_vnni, PEAK_ACC_ZMM, 64, 1 }; break;
    case BM_PEAK_INT8_AVX2:
        if (avx2) p = (peak_loop){ "vpmaddubsw+vpmaddwd ymm (int8)", peak_maddubs_ymm, PEAK_ACC_YMM, 32, 3 };
        break;
    case BM_PEAK_FMA:
        if (avx512) p = (peak_loop){ "vfmadd ps zmm (f32)", peak_fma_zmm, PEAK_ACC_ZMM, 16, 1 };
        else if (avx2 && __builtin_cpu_supports("fma"))
            p = (peak_loop){ "vfmadd ps ymm (f32)", peak_fma_ymm, PEAK_ACC_YMM, 8, 1 };
        break;
    }
#else
    (void)k;
#endif
    return p;
}

const char *bm_peak_label(bm_peak_kind k) { return peak_loop_of(k).label; }

double bm_peak_ops_per_trip(bm_peak_kind k)
{
    peak_loop p = peak_loop_of(k);
    return 2.0 * p.lanes * p.accumulators;
}

uint64_t bm_peak_instructions(bm_peak_kind k, uint64_t iters)
{
    const peak_loop p = peak_loop_of(k);
    return iters * (uint64_t)p.accumulators * (uint64_t)p.step_instructions;
}

typedef struct peak_job {
    peak_fn *fn;
    uint64_t iters;
    uint64_t *total;   /* per thread */
} peak_job;

static void peak_part(void *ctx, int t, int nt)
{
    (void)nt;
    const peak_job *j = ctx;
    j->total[t] = j->fn(j->iters, t);
}

double bm_peak_once(bm_peak_kind k, uint64_t iters, int threads)
{
    peak_loop p = peak_loop_of(k);
    if (!p.fn) return NAN;
    if (threads < 1) threads = 1;
    uint64_t *total = calloc((size_t)threads, sizeof *total);
    if (!total) return NAN;
    peak_job j = { p.fn, iters, total };
    double s = bm_run_threads(threads, peak_part, &j);
    for (int t = 0; t < threads; t++) g_sink += total[t];
    free(total);
    return 2.0 * p.lanes * p.accumulators * (double)iters * threads / s / 1e9;
}

/* ---- a figure beside its limit ------------------------------------------------------------------ */

double bm_run_beside_limit(bm_ratio_run_fn *fn, void *ctx, int max_reruns, int *reruns)
{
    double r = fn(ctx);
    for (int i = 0; i < max_reruns && r > BM_RATIO_LIMIT; i++) { /* NaN compares false: a failure stops */
        if (reruns) ++*reruns;
        r = fn(ctx);
    }
    return r;
}
