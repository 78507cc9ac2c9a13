/* bench_measure.h — the measuring that qmap's benchmarks share (`qmap bench kernels`, `qmap bench MODEL`):
 * a clock, run statistics and their printing, and the two baselines every ratio is taken against — the
 * memory read bandwidth (the limit of a decode step) and the multiply-add peak (the limit of a prompt's
 * GEMMs).
 *
 * The bandwidth baseline is the best of several ways to read memory, each timed once per measurement:
 * vector loads of the widest kind the CPU has with several independent accumulators, with and without a
 * software prefetch ahead of the loads, one stream or four per thread. A kernel reads its weights with one
 * of these patterns, so whatever trick helps it helps one of the readers too: a kernel measured above the
 * best reader (by more than noise) means the baseline is wrong, and the benchmarks say so instead of
 * printing the ratio. Each reader is tested against bm_read_reference (tests/unit/test_bench_measure.c).
 *
 * Ownership: buffers from bm_anon_buffer are the caller's (munmap them, len bytes). Nothing here keeps
 * state between calls; the result of every read goes to a volatile sink so no loop can be optimised away.
 */
#ifndef BENCH_MEASURE_H
#define BENCH_MEASURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json_out.h"

double bm_now(void);                         /* CLOCK_MONOTONIC, seconds */

/* Parse a comma-separated list of integers "2048,5632", each in lo..hi and a multiple of step, into
 * out[0..*n), at most cap entries; -1 if malformed (then *n is untouched). */
int bm_parse_list(const char *s, long lo, long hi, long step, long *out, int cap, int *n);
#define BM_MAX_LIST 64 /* the longest list bm_parse_threads takes */
/* A thread-count list "1,2,8" (each 1..1024), as bm_parse_list; cap <= BM_MAX_LIST. */
int bm_parse_threads(const char *s, int *out, int cap, int *n);

typedef struct bm_stats {
    double median, min, max;
    int runs;
} bm_stats;

bm_stats bm_stats_of(double *v, int n);      /* median, min, max of n >= 1 values (v is sorted in place) */
double bm_ratio(double a, double b);         /* a / b, NaN unless b > 0 */
void bm_json_stats(json_out *j, const bm_stats *s, const char *unit);   /* members of the open object */
void bm_print_stats(const bm_stats *s, const char *unit);               /* "41.23 GB/s  [40.10-42.00]" */

/* ---- a figure beside its limit ---------------------------------------------------------------- */

/* A figure above this many times the limit measured beside it is impossible (a kernel cannot read faster
 * than memory, nor multiply faster than the instruction peak): the limit is mismeasured. 5% is the noise
 * of single readings. The benchmarks never print a ratio above it. */
#define BM_RATIO_LIMIT 1.05

/* A run's limit held when the readings just before and just after it agree within this fraction of the
 * larger. Otherwise the host changed state around the run (a shared host's bandwidth can double within
 * seconds: docs/perf/2026-11-27-zen4.md), and the run's fraction of the better reading says more about the
 * host than about the code: the benchmarks count such runs and give the fraction over the others beside
 * the median of all. */
#define BM_STEADY_SPREAD 0.10

/* Whether a limit read before (>0) and after (>0) a run held (bm_limit_steady(b, a): both above 0 and the
 * smaller at least (1 - BM_STEADY_SPREAD) x the larger); false for a missing (0 or NaN) reading. */
bool bm_limit_steady(double before, double after);

/* How many times the benchmarks take a run above BM_RATIO_LIMIT again (bm_run_beside_limit). */
#define BM_MAX_RERUNS 3

/* One timed run with its limit read beside it: returns the run's figure / that limit, or NaN when there is
 * no ratio (the run failed: ctx says so and why; or the CPU has no such limit). */
typedef double bm_ratio_run_fn(void *ctx);

/* Runs fn once, and again while its ratio is above BM_RATIO_LIMIT, at most max_reruns more times. On a
 * shared host the limit can change between its readings and the run (the readings can both come from a
 * slower moment than the run's): then that run is mismeasured, and a new one with new readings
 * settles it; a limit that is wrong stays wrong in every try. Returns the last ratio (still above the
 * limit when every try was: the caller reports the limit as wrong), or NaN as soon as a run gives it;
 * *reruns (if not NULL) is increased by the runs taken again. */
double bm_run_beside_limit(bm_ratio_run_fn *fn, void *ctx, int max_reruns, int *reruns);

/* ---- threads ------------------------------------------------------------------------------------ */

/* One thread's part of a measurement: thread t of nt (0 is the caller). */
typedef void bm_thread_fn(void *ctx, int t, int nt);
/* Runs fn on `threads` threads at once — the calling thread and threads - 1 started for this call — and
 * returns the seconds from the moment all of them were running to the moment the last one finished. Every
 * thread it started has been joined when it returns, so nothing of a measurement runs on (or spins on) a
 * core during the next one. When the process may use at least `threads` CPUs, each thread is pinned to
 * one of its own (the caller to the CPU it is on) for the call, and the caller's mask is put back after.
 * NaN with errno set when a thread cannot start (then fn runs on none). */
double bm_run_threads(int threads, bm_thread_fn *fn, void *ctx);

/* ---- memory read bandwidth ------------------------------------------------------------------------ */

typedef struct bm_reader {
    const char *name;                        /* "avx512+pf", ... */
    uint64_t (*fn)(const uint8_t *p, size_t n);   /* sum of n bytes as 64-bit words; n a multiple of granule */
    size_t granule;                          /* bytes; p must be 64-byte aligned */
    size_t chunk;                            /* 0: each thread reads one contiguous part of a buffer; else
                                              * the buffer goes in chunks of this many bytes (the last may
                                              * be shorter), each split among the threads like a buffer;
                                              * bm_readers' chunked readers run a plain one's loop */
} bm_reader;

/* The readers this CPU can run. */
size_t bm_readers(const bm_reader **out);
/* Whether r reads a buffer of len bytes in its own way: false for a chunked reader whose chunk is no
 * shorter than len (the buffer is then one chunk, and r reads it exactly as its plain twin). */
bool bm_reader_applies(const bm_reader *r, size_t len);
/* The sum every reader must return: the n/8 little-endian 64-bit words of p, wrapping. */
uint64_t bm_read_reference(const uint8_t *p, size_t n);
/* One timed pass of reader r: `threads` threads each read their own contiguous part of buf[0..len), or
 * of each r->chunk bytes of it (each part rounded down to the granule); a buffer under 64 MiB is read as
 * many times as make 64 MiB, in the same timed region (bm_run_threads). GB/s (1e9 bytes/s) of the bytes
 * actually read. */
double bm_read_once(const bm_reader *r, const uint8_t *buf, size_t len, int threads);
/* The baseline: one pass of every reader that applies to len (bm_reader_applies), the best GB/s; *best (if
 * not NULL) names the winner. */
double bm_bandwidth(const uint8_t *buf, size_t len, int threads, const char **best);

/* ---- a limit no cache can serve ------------------------------------------------------------------- */

/* A decode's limit is memory's: a reading the last-level cache can serve part of is too high, and flatters
 * the kernels measured beside it. A buffer several times the LLC cannot stay in it (a replacement policy
 * that resists scans keeps at most the LLC's size of a cyclic read, 1/BM_LLC_MULTIPLE of it), and a
 * mapping whose lines were just flushed (bm_bandwidth_memory) finds nothing of its own in the cache. */

/* The memory buffer is at least this many times the last-level cache. */
#define BM_LLC_MULTIPLE 4
/* The LLC assumed where neither the level-3 nor the level-2 size can be told. */
#define BM_LLC_UNKNOWN ((size_t)256 << 20)

/* The last-level cache's bytes: sysconf's level-3 size, else level-2's; 0 when neither can be told. */
size_t bm_llc_bytes(void);

/* The length of the anonymous buffer a decode's limit is read from: at least BM_LLC_MULTIPLE x llc
 * (BM_LLC_UNKNOWN for llc 0) and never shorter than the model's bytes per token, in whole 2 MiB pages. */
size_t bm_memory_buffer_len(size_t llc, size_t model_bytes);

/* Whether the last-level cache may hold much of len bytes: len at most twice llc (BM_LLC_UNKNOWN for llc
 * 0). A decode of such weights reads part of them from the cache, faster than memory's limit. */
bool bm_cache_may_hold(size_t llc, size_t len);

/* Memory's read bandwidth, two ways, with every reader that applies: one timed pass over anon (anon_len
 * from bm_memory_buffer_len: no cache serves it), then one timed pass over map (the model's file mapping)
 * after its lines were flushed from every cache level (clflushopt/clflush on x86: a pass over a larger
 * buffer alone leaves a mapping read often in a scan-resistant LLC). The best GB/s of each: *anon_gbps,
 * *map_gbps. A map shorter than a few MiB reads low (starting the threads is a share of one pass): there
 * anon is the limit. */
void bm_bandwidth_memory(const uint8_t *anon, size_t anon_len, const uint8_t *map, size_t map_len, int threads,
                         double *anon_gbps, double *map_gbps);

/* ---- a buffer to read ------------------------------------------------------------------------------- */

/* len bytes of anonymous memory (64-byte aligned, in 2 MiB pages where the kernel gives them), filled with
 * non-zero bytes by `threads` threads, each touching first the part it will read. NULL (errno set) on
 * failure. */
uint8_t *bm_anon_buffer(size_t len, int threads);

/* ---- instruction peak -------------------------------------------------------------------------------- */

/* BM_PEAK_INT8: unsigned × signed bytes summed into 32 bits, vpdpbusd zmm with AVX-512 VNNI, else
 * vpmaddubsw + vpmaddwd ymm with AVX2 (what the AVX2 int8 kernels run); BM_PEAK_FMA: vfmadd ps, zmm with
 * AVX-512, else ymm with AVX2 + FMA. The widest the CPU has, whatever QMAP_CPU caps the kernels to. */
typedef enum bm_peak_kind {
    BM_PEAK_INT8 = 0,
    BM_PEAK_FMA = 1,
    BM_PEAK_INT8_AVX2 = 2,   /* the AVX2 int8 loop even where VNNI is there (tests, comparisons) */
} bm_peak_kind;

/* What the CPU can run: the loop's label ("vpdpbusd zmm (int8)") or NULL when it lacks the instructions. */
const char *bm_peak_label(bm_peak_kind k);
/* Multiply-adds per loop trip of one thread, each counting as 2 operations. */
double bm_peak_ops_per_trip(bm_peak_kind k);
/* Instructions one thread issues in `iters` trips (for reports). */
uint64_t bm_peak_instructions(bm_peak_kind k, uint64_t iters);
/* All `threads` threads run `iters` trips of independent multiply-add chains at once: total operations
 * per second / 1e9 (GOP/s or GFLOP/s); NaN when the CPU lacks the instruction. */
double bm_peak_once(bm_peak_kind k, uint64_t iters, int threads);

#endif /* BENCH_MEASURE_H */
