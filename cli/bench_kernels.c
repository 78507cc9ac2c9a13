/* bench_kernels.c — `qmap bench kernels`: the command (flags, the run in order, the JSON or the error), the
 * error and temporary-file state the sections share, and sections 1 and 2, the baselines.
 *
 * Five sections, each limit before the figure it explains:
 *   1. memory read bandwidth: the best of several ways to read memory (bench_measure.h), over anonymous
 *      memory and a file mapping: the limit of matvec;
 *   2. instruction peak (independent vpdpbusd / FMA chains): the limit of GEMM;
 *   3. matvec over ≥ 1 GiB of weights, from anonymous memory and from the mapped container, same bytes,
 *      each run timed back to back with section 1's best read, ratios taken per run; then the first pass
 *      through a freshly opened mapping, with and without madvise (bench_matvec.c);
 *   4. GEMM at n = 512 on model-sized Q8_ROW / F16 / F32 matrices, each run timed beside 2's peak loop,
 *      ratios per run; and the generic (portable C) kernels once for scale (bench_gemm.c);
 *   5. the accuracy of each weight/activation path (bench_accuracy.c).
 * The ratios come from the paired measurements, because this shared host's bandwidth and clock drift by up
 * to 2x within minutes; a run above BM_RATIO_LIMIT x its limit is taken again (bm_run_beside_limit), and
 * one above it in every try stops the command with an error (the limit is wrong).
 * Every figure is the median of N timed runs (CLOCK_MONOTONIC) with min and max, after one untimed
 * warm-up. Buffers are allocated and filled outside the timing; the temporary container is deleted at
 * the end, on error and on SIGINT/SIGTERM/SIGHUP.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define BENCH_X86 1
#else
#define BENCH_X86 0
#endif

#include "bench_kernels.h"
#include "cli.h"
#include "qq_kernels.h"

void bench_kernels_help(FILE *fp)
{
    fprintf(fp,
            "usage: qmap bench kernels [--runs N] [--threads LIST] [--cols LIST] [--dir DIR] [--only LIST] [--quick]\n"
            "                          [--json]\n"
            "       qmap bench MODEL.qmap [MODEL2.qmap ...] [-p N] [-n N] [-d N] [-t LIST] [-r N] [--kv f16|f32] [--act MODE]\n"
            "                  [--json|--csv]\n"
            "\n"
            "qmap bench MODEL: prompt (pp) and generation (tg) tokens/s of decoder LMs beside the speed of light\n"
            "measured in the same run, as llama-bench prints them ('qmap bench MODEL.qmap --help').\n"
            "\n"
            "qmap bench kernels:\n"
            "Measure the matmul kernels against this machine's limits:\n"
            "  1. memory read bandwidth: 1 GiB read by each of several methods (vector loads with 8\n"
            "     accumulators, with and without software prefetch, 1 or 4 streams per thread, each\n"
            "     thread its own part of the buffer or of each 256 MiB of it; that last method only on\n"
            "     buffers over 256 MiB, so not with --quick), over anonymous memory and over a file\n"
            "     mapping; the best method of each moment is the baseline of section 3; a run above\n"
            "     1.05 x its limit is taken again (up to 3 times), and one above it in every try is an\n"
            "     error (exit 1)\n"
            "  2. instruction peak: independent int8 (GOP/s) and FMA (GFLOP/s) multiply-add chains on\n"
            "     every thread at once: AVX-512 VNNI vpdpbusd, or on CPUs without it the AVX2\n"
            "     vpmaddubsw+vpmaddwd pair; the FMA loop is AVX2 on CPUs without AVX-512\n"
            "  3. matvec over 1 GiB of weights, a stack of 4096xCOLS matrices as in a model, for each\n"
            "     row length COLS of --cols (Q8_ROW with int8, two-term int8 (i8x2) and f32 activations,\n"
            "     F16, F32): GB/s of weight bytes read and the fraction of (1) timed beside each run, from\n"
            "     anonymous memory and from the same bytes mapped from a .qmap file written in DIR\n"
            "     (deleted afterwards), with the mapped/anonymous throughput ratio;\n"
            "     then the first pass through a freshly opened mapping, as is and after madvise\n"
            "     (MADV_WILLNEED, MADV_POPULATE_READ)\n"
            "  4. GEMM with n = 512 rows of X on Q8_ROW 4096x4096, 11008x4096, 4096x11008 (int8, two-term\n"
            "     int8 and f32 activations) and F16/F32 4096x4096: GOP/s of the product and the fraction\n"
            "     of (2) timed beside each run (two terms execute each multiply-add twice, and their\n"
            "     fraction counts both); and the generic kernels once\n"
            "  5. accuracy (not speed): relative error of F16 weights and of Q8_ROW with float and with\n"
            "     int8 activations against the exact product with the float weights, for uniform,\n"
            "     Gaussian and outlier-channel activations\n"
            "\n"
            "  --runs N         timed runs per figure, after one untimed warm-up (default 7, at least 5);\n"
            "                   each figure is the median with the min and max\n"
            "  --threads LIST   thread counts to measure, comma-separated (default 1,2)\n"
            "  --cols LIST      section 3's row lengths, comma-separated multiples of 64 in 64..65536\n"
            "                   (default 4096): a decode reads all of X once per row of W, and where\n"
            "                   it reads two lines of X per four of W (two int8 terms, F16) the same\n"
            "                   weight bytes stream slower here once X passes about 8 KiB (5632:\n"
            "                   TinyLlama's FFN down projection; 11008: Llama 2 7B's)\n"
            "  --dir DIR        where the temporary container goes (default $TMPDIR or /tmp); needs about\n"
            "                   1.1 GB free\n"
            "  --only LIST      run only these of sections 3-5: matvec, gemm, accuracy (1 and 2 always\n"
            "                   run: the others measure against them)\n"
            "  --quick          a smoke test: 256 MiB instead of 1 GiB, n = 64, 3 runs\n"
            "  --json           print every figure as one JSON object instead of the table\n"
            "  -h, --help       this text\n"
            "\n"
            "The kernel variant is qmap's (QMAP_CPU=generic|avx2|avx512 caps it); the baselines use the\n"
            "widest instructions the CPU has. Rates are decimal: 1 GB/s = 1e9 bytes/s, 1 GOP/s = 1e9\n"
            "operations/s (a multiply-add counts as 2).\n"
            "\n"
            "exit status: 0 done, 1 a measurement failed (or MODEL was truncated or overwritten in place while it ran),\n"
            "2 usage error\n");
}


/* ---- options, errors, clean-up -------------------------------------------------------------- */

/* Process-level state of this one command (never library code): the message of the first failure, so
 * that deep helpers can fail with one call, and the temporary file the signal handler must delete. */
static char g_error[768];

void set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
}

void print_reruns(int reruns)
{
    if (reruns > 0) printf(" (%d run%s above %.2f x taken again)", reruns, reruns > 1 ? "s" : "", BM_RATIO_LIMIT);
}

/* The temporary container, deleted by the signal handler if the run is interrupted. */
static char g_tmp_path[4096];
static volatile sig_atomic_t g_tmp_live;

static void on_signal(int sig)
{
    if (g_tmp_live) unlink(g_tmp_path);
    signal(sig, SIG_DFL);
    raise(sig);
}

const char *tmp_path(void) { return g_tmp_live ? g_tmp_path : ""; }

const char *tmp_register(const char *path)
{
    snprintf(g_tmp_path, sizeof g_tmp_path, "%s", path);
    g_tmp_live = 1;
    return g_tmp_path;
}

void tmp_remove(void)
{
    if (g_tmp_live) {
        g_tmp_live = 0;
        unlink(g_tmp_path);
    }
}

/* ---- CPU ---------------------------------------------------------------------------------------- */

typedef struct cpu_flags {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni;
} cpu_flags;

static cpu_flags cpu_detect(void)
{
    cpu_flags c = { 0 };
#if BENCH_X86
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2");
    c.fma = __builtin_cpu_supports("fma");
    c.f16c = __builtin_cpu_supports("f16c");
    c.avx512f = __builtin_cpu_supports("avx512f");
    c.avx512bw = __builtin_cpu_supports("avx512bw");
    c.avx512vl = __builtin_cpu_supports("avx512vl");
    c.avx512vnni = __builtin_cpu_supports("avx512vnni");
#endif
    return c;
}

/* The bracketed mode of /sys/kernel/mm/transparent_hugepage/enabled ("always", "madvise", "never"). */
static void thp_mode(char *buf, size_t size)
{
    snprintf(buf, size, "unknown");
    FILE *fp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!fp) return;
    char line[128];
    if (fgets(line, sizeof line, fp)) {
        char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
        if (a && b) snprintf(buf, size, "%.*s", (int)(b - a - 1), a + 1);
    }
    fclose(fp);
}

/* ---- 1. memory read bandwidth ------------------------------------------------------------------- */
/* The baselines of sections 3 and 4, kept for the whole run: each is timed again beside every run of a
 * kernel (this host's bandwidth and clock drift by 2x over minutes, so a ratio is only meaningful between
 * measurements taken moments apart). The bandwidth is bench_measure's best of several readers. */
double bandwidth_once(const baseline *b, int threads) { return bm_bandwidth(b->buf, b->len, threads, NULL); }

/* len bytes of a file in dir, mapped read-only and unlinked at once (nothing to clean up after a signal). */
static uint8_t *file_mapping(const char *dir, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/qmap-bench-bw-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    unlink(path);
    uint8_t *block = malloc(MIB);
    bool ok = block != NULL;
    if (ok) memset(block, 0x5a, MIB);
    for (size_t off = 0; ok && off < len; off += MIB) {
        size_t n = len - off < MIB ? len - off : MIB;
        ok = write(fd, block, n) == (ssize_t)n;
    }
    free(block);
    uint8_t *m = ok ? mmap(NULL, len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0) : MAP_FAILED;
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

static int bench_bandwidth(const bench_cfg *c, baseline *base, json_out *j)
{
    size_t len = c->bw_bytes;
    int max_t = 1;
    for (int ti = 0; ti < c->n_threads; ti++) if (c->threads[ti] > max_t) max_t = c->threads[ti];
    uint8_t *anon = bm_anon_buffer(len, max_t);
    if (!anon) {
        set_error("bandwidth: cannot map %zu MiB of anonymous memory: %s", len / MIB, strerror(errno));
        return -1;
    }
    uint8_t *file = file_mapping(c->dir, len);
    if (!file) {
        set_error("bandwidth: cannot write and map a %zu MiB file in %s: %s", len / MIB, c->dir, strerror(errno));
        munmap(anon, len);
        return -1;
    }
    const bm_reader *rd;
    size_t n_rd = bm_readers(&rd);
    double *rates = malloc((size_t)c->runs * sizeof *rates);
    if (!rates) { munmap(anon, len); munmap(file, len); set_error("out of memory"); return -1; }
    if (!c->json)
        printf("\n1. memory read bandwidth: %zu MiB read by each method (each thread its own part of the buffer, "
               "or of each 256 MiB for '/256M'), anonymous memory and a file mapping of the same size;\n   the "
               "baseline of sections 3-4 is the best method of each moment, timed beside each run\n", len / MIB);
    else {
        json_begin_object(j, "bandwidth");
        json_u64(j, "buffer_bytes", len);
        json_begin_array(j, "results");
    }
    for (int ti = 0; ti < c->n_threads; ti++) {
        int t = c->threads[ti];
        for (int where = 0; where < 2; where++) {
            const uint8_t *buf = where ? file : anon;
            for (size_t m = 0; m <= n_rd; m++) {   /* every reader, then (m = n_rd) the baseline */
                if (m < n_rd && !bm_reader_applies(&rd[m], len)) continue;   /* its plain twin's row */
                if (m < n_rd) bm_read_once(&rd[m], buf, len, t);   /* warm-up */
                for (int r = 0; r < c->runs; r++)
                    rates[r] = m < n_rd ? bm_read_once(&rd[m], buf, len, t) : bm_bandwidth(buf, len, t, NULL);
                const bm_stats st = bm_stats_of(rates, c->runs);
                const char *name = m < n_rd ? rd[m].name : "best of each run";
                if (!c->json) {
                    printf("   %-9s threads %-3d %-21s ", where ? "file map" : "anonymous", t, name);
                    bm_print_stats(&st, "GB/s");
                    printf("\n");
                } else {
                    json_begin_object(j, NULL);
                    json_cstring(j, "memory", where ? "file_mapping" : "anonymous");
                    json_u64(j, "threads", (uint64_t)t);
                    json_cstring(j, "method", m < n_rd ? rd[m].name : "best");
                    bm_json_stats(j, &st, "GB/s");
                    json_end_object(j);
                }
            }
            if (!c->json) fflush(stdout);
        }
    }
    if (c->json) {
        json_end_array(j);
        json_end_object(j);
    }
    free(rates);
    munmap(file, len);
    base->buf = anon; /* unmapped by run_kernels */
    base->len = len;
    return 0;
}

/* ---- 2. instruction peak ------------------------------------------------------------------------ */

double peak_once(const baseline *b, bool int8, int threads)
{
    return bm_peak_once(int8 ? BM_PEAK_INT8 : BM_PEAK_FMA, b->peak_iters, threads);
}

static int bench_peak(const bench_cfg *c, baseline *base, json_out *j)
{
    static const struct { bm_peak_kind kind; const char *key, *unit, *lacks; } kinds[2] = {
        { BM_PEAK_INT8, "int8", "GOP/s", "AVX2" }, { BM_PEAK_FMA, "fma_f32", "GFLOP/s", "FMA" },
    };
    base->peak_iters = c->peak_iters;
    double *rates = malloc((size_t)c->runs * sizeof *rates);
    if (!rates) { set_error("out of memory"); return -1; }
    if (!c->json)
        printf("\n2. instruction peak: independent multiply-add chains on every thread at once (total); "
               "a multiply-add counts as 2 operations\n");
    else json_begin_array(j, "peak");
    for (int k = 0; k < 2; k++) {
        const char *label = bm_peak_label(kinds[k].kind);
        for (int ti = 0; ti < c->n_threads; ti++) {
            int t = c->threads[ti];
            bm_stats rate = { 0 };
            if (label) {
                bm_peak_once(kinds[k].kind, c->peak_iters, t); /* warm-up */
                for (int r = 0; r < c->runs; r++) rates[r] = bm_peak_once(kinds[k].kind, c->peak_iters, t);
                rate = bm_stats_of(rates, c->runs);
            }
            if (!c->json) {
                printf("   %-22s threads %-3d  ", label ? label : kinds[k].key, t);
                if (label) bm_print_stats(&rate, kinds[k].unit);
                else printf("     n/a (the CPU lacks %s)", kinds[k].lacks);
                printf("\n");
            } else {
                json_begin_object(j, NULL);
                json_cstring(j, "kind", kinds[k].key);
                if (label) json_cstring(j, "instruction", label);
                else json_null(j, "instruction");
                json_u64(j, "threads", (uint64_t)t);
                if (label) {
                    json_u64(j, "instructions_per_thread", bm_peak_instructions(kinds[k].kind, c->peak_iters));
                    bm_json_stats(j, &rate, kinds[k].unit);
                } else {
                    json_null(j, "median");
                    json_cstring(j, "unit", kinds[k].unit);
                }
                json_end_object(j);
            }
        }
    }
    if (c->json) json_end_array(j);
    free(rates);
    return 0;
}

/* ---- the command ------------------------------------------------------------------------------------ */

static int run_kernels(const bench_cfg *c, json_out *j)
{
    cpu_flags cpu = cpu_detect();
    const qr_kernels *k = qr_kernels_get();
    const char *force = getenv("QMAP_CPU");
    char thp[32];
    thp_mode(thp, sizeof thp);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (!c->json) {
        printf("qmap bench kernels: kernel variant %s (QMAP_CPU%s%s); CPU: avx2 %s, fma %s, avx512f %s, "
               "avx512bw %s, avx512vl %s, avx512vnni %s; %ld cores; transparent hugepages: %s\n",
               qr_kernels_name(k), force ? "=" : " ", force ? force : "unset", cpu.avx2 ? "yes" : "no",
               cpu.fma ? "yes" : "no", cpu.avx512f ? "yes" : "no", cpu.avx512bw ? "yes" : "no",
               cpu.avx512vl ? "yes" : "no", cpu.avx512vnni ? "yes" : "no", cores, thp);
        printf("each figure: median [min-max] of %d timed runs after one untimed warm-up%s\n", c->runs,
               c->quick ? " (--quick: reduced sizes)" : "");
        fflush(stdout);
    } else {
        json_begin_object(j, NULL);
        json_cstring(j, "benchmark", "kernels");
        json_cstring(j, "kernels", qr_kernels_name(k));
        if (force) json_cstring(j, "qmap_cpu", force);
        else json_null(j, "qmap_cpu");
        json_begin_object(j, "cpu");
        json_bool(j, "avx2", cpu.avx2);
        json_bool(j, "fma", cpu.fma);
        json_bool(j, "f16c", cpu.f16c);
        json_bool(j, "avx512f", cpu.avx512f);
        json_bool(j, "avx512bw", cpu.avx512bw);
        json_bool(j, "avx512vl", cpu.avx512vl);
        json_bool(j, "avx512vnni", cpu.avx512vnni);
        json_i64(j, "cores", cores);
        json_end_object(j);
        json_cstring(j, "transparent_hugepage", thp);
        json_bool(j, "quick", c->quick);
        json_u64(j, "runs", (uint64_t)c->runs);
        json_begin_array(j, "threads");
        for (int i = 0; i < c->n_threads; i++) json_u64(j, NULL, (uint64_t)c->threads[i]);
        json_end_array(j);
        json_begin_array(j, "matvec_cols");
        for (int i = 0; i < c->n_mv_cols; i++) json_u64(j, NULL, (uint64_t)c->mv_cols[i]);
        json_end_array(j);
    }
    baseline base = { 0 };
    int rc = -1;
    if (bench_bandwidth(c, &base, j) == 0 && bench_peak(c, &base, j) == 0 &&
        (c->only && !c->only_matvec ? 1 : bench_matvec(c, k, &base, j) == 0 && bench_first_pass(c, k, j) == 0) &&
        (c->only && !c->only_gemm ? 1 : bench_gemm(c, k, &base, j) == 0) &&
        (c->only && !c->only_accuracy ? 1 : bench_accuracy(c, k, j) == 0))
        rc = 0;
    if (base.buf) munmap(base.buf, base.len);
    if (rc == 0 && c->json) json_end_object(j);
    return rc;
}

static int make_dir(const char *dir)
{
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return 0;
        set_error("%s: not a directory", dir);
        return -1;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        set_error("%s: cannot create the directory: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

int bench_kernels(int argc, char **argv)
{
    bench_cfg c = { .runs = 0, .threads = { 1, 2 }, .n_threads = 2, .mv_cols = { 4096 }, .n_mv_cols = 1 };
    const char *tmp = getenv("TMPDIR");
    c.dir = tmp && *tmp ? tmp : "/tmp";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { bench_kernels_help(stdout); return 0; }
        else if (!strcmp(a, "--runs") && has_val) {
            long n = cli_parse_count(argv[++i]);
            if (n < 5 || n > 1000) { fprintf(stderr, "qmap bench: --runs needs a number in 5..1000\n\n"); goto usage; }
            c.runs = (int)n;
        } else if (!strcmp(a, "--threads") && has_val) {
            if (bm_parse_threads(argv[++i], c.threads, MAX_THREAD_COUNTS, &c.n_threads) != 0) {
                fprintf(stderr, "qmap bench: --threads needs a list like 1,2 (each 1..1024, at most %d)\n\n",
                        MAX_THREAD_COUNTS);
                goto usage;
            }
        } else if (!strcmp(a, "--cols") && has_val) {
            if (bm_parse_list(argv[++i], 64, 65536, 64, c.mv_cols, MAX_MATVEC_COLS, &c.n_mv_cols) != 0) {
                fprintf(stderr, "qmap bench: --cols needs a list like 2048,5632 (multiples of 64 in 64..65536, at "
                        "most %d)\n\n", MAX_MATVEC_COLS);
                goto usage;
            }
        } else if (!strcmp(a, "--dir") && has_val) c.dir = argv[++i];
        else if (!strcmp(a, "--only") && has_val) {
            c.only = true;
            for (char *list = argv[++i], *tok; (tok = strsep(&list, ","));) {
                if (!strcmp(tok, "matvec")) c.only_matvec = true;
                else if (!strcmp(tok, "gemm")) c.only_gemm = true;
                else if (!strcmp(tok, "accuracy")) c.only_accuracy = true;
                else { fprintf(stderr, "qmap bench: --only takes matvec, gemm, accuracy\n\n"); goto usage; }
            }
        } else if (!strcmp(a, "--quick")) c.quick = true;
        else if (!strcmp(a, "--json")) c.json = true;
        else { fprintf(stderr, "qmap bench: unknown option or missing value: '%s'\n\n", a); goto usage; }
    }
    if (!c.runs) c.runs = c.quick ? 3 : 7;
    c.bw_bytes = c.quick ? 256 * MIB : GIB;
    c.mv_scale = c.quick ? 2 : 1;
    c.gemm_n = c.quick ? 64 : 512;
    c.generic_n = c.quick ? 8 : 64;
    c.peak_iters = c.quick ? 4000000 : 32000000;

    g_error[0] = 0;
    if (make_dir(c.dir) != 0) goto fail;
    struct sigaction sa = { .sa_handler = on_signal }, old[3];
    static const int sigs[3] = { SIGINT, SIGTERM, SIGHUP };
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &sa, &old[i]);

    /* JSON goes to memory first so that a failure half-way prints the error object alone. */
    char *jbuf = NULL;
    size_t jlen = 0;
    FILE *mem = c.json ? open_memstream(&jbuf, &jlen) : NULL;
    if (c.json && !mem) { set_error("out of memory"); goto fail_sig; }
    json_out j = { .fp = mem };
    int rc = 0;
    for (int i = 0; i < c.n_threads && rc == 0; i++) {
        qm_error perr;
        if (qr_pool_new(c.threads[i], &c.pools[i], &perr) != QM_OK) {
            set_error("%s", perr.message);
            rc = -1;
        }
    }
    if (rc == 0) rc = run_kernels(&c, &j);
    for (int i = 0; i < c.n_threads; i++) qr_pool_free(c.pools[i]);
    if (mem) fclose(mem);
    tmp_remove();
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &old[i], NULL);
    if (rc == 0) {
        if (c.json) {
            fwrite(jbuf, 1, jlen, stdout);
            fputc('\n', stdout);
        }
        free(jbuf);
        return 0;
    }
    free(jbuf);
    goto fail;
fail_sig:
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &old[i], NULL);
fail:
    fprintf(stderr, "qmap bench: %s\n", g_error[0] ? g_error : "failed");
    if (c.json) {
        json_out e = { .fp = stdout };
        json_begin_object(&e, NULL);
        json_bool(&e, "ok", false);
        json_cstring(&e, "message", g_error);
        json_end_object(&e);
        fputc('\n', stdout);
    }
    return 1;
usage:
    bench_kernels_help(stderr);
    return 2;
}

