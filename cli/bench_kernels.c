/* bench_kernels.c — `qmap bench kernels`: the command (its option table, the run in order, the JSON or the
 * error). The sections are below it (bench_sections.h), their shared helpers below them (bench_util.h).
 *
 * Five sections, each limit before the figure it explains:
 *   1. memory read bandwidth: the best of several ways to read memory (bench_measure.h), over anonymous
 *      memory and a file mapping: the limit of matvec (bench_baseline.c);
 *   2. instruction peak (independent vpdpbusd / FMA chains): the limit of GEMM (bench_baseline.c);
 *   3. matvec over ≥ 1 GiB of weights, from anonymous memory and from the mapped container, same bytes,
 *      each run timed back to back with section 1's best read, ratios taken per run; then the first pass
 *      through a freshly opened mapping, with and without madvise (bench_matvec.c);
 *   4. GEMM at n = 512 on model-sized Q8_ROW / F16 / F32 matrices, each run timed beside 2's peak loop,
 *      ratios per run; and the generic (portable C) kernels once for scale (bench_gemm.c); 4b. a batch's
 *      decode step, 1-15 rows over 3's stack, against the peak too (bench_rows.c);
 *   5. the accuracy of each weight/activation path (bench_accuracy.c).
 * The ratios come from the paired measurements, because a shared host's bandwidth and clock can drift by
 * up to 2x within minutes; a run above BM_RATIO_LIMIT x its limit is taken again (bm_run_beside_limit), and
 * one above it in every try stops the command with an error (the limit is wrong).
 * Every figure is the median of N timed runs (CLOCK_MONOTONIC) with min and max, after one untimed
 * warm-up. Buffers are allocated and filled outside the timing; the temporary container is deleted at
 * the end, on error and on SIGINT/SIGTERM/SIGHUP.
 */
#include <errno.h>
#include <signal.h>
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
#include "bench_sections.h"
#include "bench_util.h"
#include "opts.h"

/* ---- options ----------------------------------------------------------------------------------- */

/* What the option table writes: the settings, and the lists and the run count as given (checked and
 * turned into settings by settle_options). */
typedef struct kernels_args {
    bench_cfg cfg;
    long runs;                 /* 0: 7, or 3 with --quick */
    const char *threads, *cols, *only;
} kernels_args;

static const char KERNELS_DESCRIPTION[] =
    "Measure the matmul kernels against this machine's limits, measured in the same run:\n"
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
    "  4b. a batch's decode step: n = 1, 2, 4, 8, 15 rows of X (one per sequence, row-invariant as\n"
    "     qmap serve runs them) over the stack of (3) with the first COLS of --cols, int8 and\n"
    "     two-term int8: time per pass, its cost as a multiple of n = 1 and the fraction of (2)\n"
    "  5. accuracy (not speed): relative error of F16 weights and of Q8_ROW with float and with\n"
    "     int8 activations against the exact product with the float weights, for uniform,\n"
    "     Gaussian and outlier-channel activations\n"
    "Each figure is the median [min-max] of --runs timed runs after one untimed warm-up.\n"
    "'qmap bench MODEL.qmap --help': tokens/s of whole models beside the same limits.\n";

static const char KERNELS_EPILOG[] =
    "The kernel variant is qmap's (QMAP_CPU=generic|avx2|avx512 caps it); the baselines use the\n"
    "widest instructions the CPU has. Rates are decimal: 1 GB/s = 1e9 bytes/s, 1 GOP/s = 1e9\n"
    "operations/s (a multiply-add counts as 2).\n"
    "exit status: 0 done, 1 a measurement failed, 2 usage error\n";

/* The option table over a's fields; opts has room for KERNELS_N_OPTS. */
enum { KERNELS_N_OPTS = 7 };
static cli_command kernels_command(kernels_args *a, cli_opt opts[KERNELS_N_OPTS])
{
    const cli_opt table[KERNELS_N_OPTS] = {
        { "runs", 0, CLI_INT, &a->runs, "N", 5, 1000, NULL,
          "timed runs per figure, after one untimed warm-up (default: 7, 3 with --quick)", true },
        { "threads", 0, CLI_STRING, &a->threads, "LIST", 0, 0, NULL, "thread counts to measure, comma-separated", false },
        { "cols", 0, CLI_STRING, &a->cols, "LIST", 0, 0, NULL,
          "section 3's row lengths, comma-separated multiples of 64 in 64..65536 (5632: TinyLlama's FFN "
          "down projection; 11008: Llama 2 7B's)", false },
        { "dir", 0, CLI_STRING, &a->cfg.dir, "DIR", 0, 0, NULL,
          "where the temporary container goes ($TMPDIR or /tmp); needs about 1.1 GB free", false },
        { "only", 0, CLI_STRING, &a->only, "LIST", 0, 0, NULL,
          "run only these of sections 3-5: matvec, gemm, rows, accuracy (1 and 2 always run)", true },
        { "quick", 0, CLI_FLAG, &a->cfg.quick, NULL, 0, 0, NULL, "a smoke test: 256 MiB instead of 1 GiB, n = 64, 3 runs", false },
        { "json", 0, CLI_FLAG, &a->cfg.json, NULL, 0, 0, NULL, "print every figure as one JSON object instead of the table", false },
    };
    memcpy(opts, table, sizeof table);
    return (cli_command){ "bench kernels", "qmap bench kernels [options]", KERNELS_DESCRIPTION, opts, KERNELS_N_OPTS,
                          KERNELS_EPILOG };
}

static void kernels_defaults(kernels_args *a)
{
    memset(a, 0, sizeof *a);
    a->threads = "1,2";
    a->cols = "4096";
    const char *tmp = getenv("TMPDIR");
    a->cfg.dir = tmp && *tmp ? tmp : "/tmp";
}

/* --only's list into the flags; 0, or -1 for a word it does not know. */
static int parse_only(const char *list, bench_cfg *c)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    c->only = true;
    for (char *rest = buf, *tok; (tok = strsep(&rest, ","));) {
        if (!strcmp(tok, "matvec")) c->only_matvec = true;
        else if (!strcmp(tok, "gemm")) c->only_gemm = true;
        else if (!strcmp(tok, "rows")) c->only_rows = true;
        else if (!strcmp(tok, "accuracy")) c->only_accuracy = true;
        else return -1;
    }
    return 0;
}

/* The lists checked and every size set from --quick; 0, or 2 after a usage message. */
static int settle_options(kernels_args *a)
{
    bench_cfg *c = &a->cfg;
    const char *bad = NULL;
    if (bm_parse_threads(a->threads, c->threads, MAX_THREAD_COUNTS, &c->n_threads) != 0)
        bad = "--threads needs a list like 1,2 (each 1..1024, at most 16)";
    else if (bm_parse_list(a->cols, 64, 65536, 64, c->mv_cols, MAX_MATVEC_COLS, &c->n_mv_cols) != 0)
        bad = "--cols needs a list like 2048,5632 (multiples of 64 in 64..65536, at most 8)";
    else if (a->only && parse_only(a->only, c) != 0)
        bad = "--only takes matvec, gemm, rows, accuracy";
    if (bad) {
        fprintf(stderr, "qmap bench: %s\nusage: qmap bench kernels [options] ('qmap bench kernels --help')\n", bad);
        return 2;
    }
    c->runs = a->runs ? (int)a->runs : c->quick ? 3 : 7;
    c->bw_bytes = c->quick ? 256 * MIB : GIB;
    c->mv_scale = c->quick ? 2 : 1;
    c->gemm_n = c->quick ? 64 : 512;
    c->generic_n = c->quick ? 8 : 64;
    c->peak_iters = c->quick ? 4000000 : 32000000;
    return 0;
}

/* Parse argv (argv[0] "bench", argv[1] "kernels") into *a: 0, 1 (help printed) or 2 (usage error). */
static int parse_kernels_args(int argc, char **argv, kernels_args *a)
{
    _Static_assert(MAX_THREAD_COUNTS == 16 && MAX_MATVEC_COLS == 8, "settle_options' messages state the limits");
    kernels_defaults(a);
    cli_opt opts[KERNELS_N_OPTS];
    const cli_command cmd = kernels_command(a, opts);
    int first;
    int rc = cli_parse(&cmd, argc - 1, argv + 1, &first);
    if (rc != 0) return rc;
    if (first < argc - 1) {
        fprintf(stderr, "qmap bench kernels: unexpected argument '%s'\nusage: %s\n", argv[first + 1], cmd.usage);
        return 2;
    }
    return settle_options(a);
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
        jo_begin_object(j, NULL);
        jo_cstring(j, "benchmark", "kernels");
        jo_cstring(j, "kernels", qr_kernels_name(k));
        if (force) jo_cstring(j, "qmap_cpu", force);
        else jo_null(j, "qmap_cpu");
        jo_begin_object(j, "cpu");
        jo_bool(j, "avx2", cpu.avx2);
        jo_bool(j, "fma", cpu.fma);
        jo_bool(j, "f16c", cpu.f16c);
        jo_bool(j, "avx512f", cpu.avx512f);
        jo_bool(j, "avx512bw", cpu.avx512bw);
        jo_bool(j, "avx512vl", cpu.avx512vl);
        jo_bool(j, "avx512vnni", cpu.avx512vnni);
        jo_i64(j, "cores", cores);
        jo_end_object(j);
        jo_cstring(j, "transparent_hugepage", thp);
        jo_bool(j, "quick", c->quick);
        jo_u64(j, "runs", (uint64_t)c->runs);
        jo_begin_array(j, "threads");
        for (int i = 0; i < c->n_threads; i++) jo_u64(j, NULL, (uint64_t)c->threads[i]);
        jo_end_array(j);
        jo_begin_array(j, "matvec_cols");
        for (int i = 0; i < c->n_mv_cols; i++) jo_u64(j, NULL, (uint64_t)c->mv_cols[i]);
        jo_end_array(j);
    }
    baseline base = { 0 };
    int rc = -1;
    if (bench_bandwidth(c, &base, j) == 0 && bench_peak(c, &base, j) == 0 &&
        (c->only && !c->only_matvec ? 1 : bench_matvec(c, k, &base, j) == 0 && bench_first_pass(c, k, j) == 0) &&
        (c->only && !c->only_gemm ? 1 : bench_gemm(c, k, &base, j) == 0) &&
        (c->only && !c->only_rows ? 1 : bench_rows(c, k, &base, j) == 0) &&
        (c->only && !c->only_accuracy ? 1 : bench_accuracy(c, k, j) == 0))
        rc = 0;
    if (base.buf) munmap(base.buf, base.len);
    if (rc == 0 && c->json) jo_end_object(j);
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

/* Start the pools, run every section, stop the pools; 0 or -1 after set_error. JSON goes to `mem`. */
static int run_with_pools(bench_cfg *c, FILE *mem)
{
    json_out j = { .fp = mem };
    int rc = 0;
    for (int i = 0; i < c->n_threads && rc == 0; i++) {
        qm_error perr;
        if (qr_pool_new(c->threads[i], &c->pools[i], &perr) != QM_OK) {
            set_error("%s", perr.message);
            rc = -1;
        }
    }
    if (rc == 0) rc = run_kernels(c, &j);
    for (int i = 0; i < c->n_threads; i++) qr_pool_free(c->pools[i]);
    return rc;
}

/* The error on stderr, and with --json as the one object on stdout. */
static int report_failure(const bench_cfg *c)
{
    const char *msg = bench_error();
    fprintf(stderr, "qmap bench: %s\n", msg[0] ? msg : "failed");
    if (c->json) {
        json_out e = { .fp = stdout };
        jo_begin_object(&e, NULL);
        jo_bool(&e, "ok", false);
        jo_cstring(&e, "message", msg);
        jo_end_object(&e);
        fputc('\n', stdout);
    }
    return 1;
}

int bench_kernels(int argc, char **argv)
{
    kernels_args a;
    int prc = parse_kernels_args(argc, argv, &a);
    if (prc == 1) return 0;
    if (prc != 0) return 2;
    bench_cfg *c = &a.cfg;
    bench_error_clear();
    if (make_dir(c->dir) != 0) return report_failure(c);

    /* JSON goes to memory first so that a failure half-way prints the error object alone. */
    char *jbuf = NULL;
    size_t jlen = 0;
    FILE *mem = c->json ? open_memstream(&jbuf, &jlen) : NULL;
    if (c->json && !mem) {
        set_error("out of memory");
        return report_failure(c);
    }
    struct sigaction old[3];
    tmp_guard_signals(old);
    int rc = run_with_pools(c, mem);
    if (mem) fclose(mem);
    tmp_remove();
    tmp_restore_signals(old);
    if (rc == 0 && c->json) {
        fwrite(jbuf, 1, jlen, stdout);
        fputc('\n', stdout);
    }
    free(jbuf);
    return rc == 0 ? 0 : report_failure(c);
}
