/* qmap bench kernels — the matmul kernels against what this machine can do at best.
 *
 * Four sections, each a baseline before the figure it explains:
 *   1. memory read bandwidth (streaming vector loads over ≥ 1 GiB): the limit of matvec;
 *   2. instruction peak (independent vpdpbusd / FMA chains): the limit of GEMM;
 *   3. matvec over ≥ 1 GiB of weights, from anonymous memory and from the mapped container, same bytes,
 *      each run timed back to back with a streaming read (1's loop), ratios taken per run; then the
 *      first pass through a freshly opened mapping, with and without madvise;
 *   4. GEMM at n = 512 on model-sized Q8_ROW / F16 / F32 matrices, each run timed beside 2's peak loop,
 *      ratios per run; and the generic (portable C) kernels once for scale.
 * Sections 1 and 2 alone describe the machine; the ratios come from the paired measurements, because
 * this shared host's bandwidth and clock drift by up to 2x within minutes.
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
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BENCH_X86 1
#else
#define BENCH_X86 0
#endif

#include "cli.h"
#include "bench_measure.h"
#include "bench_model.h"
#include "json_out.h"
#include "qm_format.h"
#include "qm_reader.h"
#include "qm_writer.h"
#include "qm_half.h"
#include "qq_kernels.h"
#include "qr_matmul.h"

#define MAX_THREAD_COUNTS 16
/* A kernel's median ratio to the limit measured beside it above this means the limit is mismeasured:
 * the benchmark stops with an error instead of printing it (5% for the noise of single runs). */
#define RATIO_LIMIT 1.05
#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)

static void help(FILE *fp)
{
    fprintf(fp,
            "usage: qmap bench kernels [--runs N] [--threads LIST] [--dir DIR] [--only LIST] [--quick] [--json]\n"
            "       qmap bench MODEL.qmap [MODEL2.qmap ...] [-p N] [-n N] [-t LIST] [-r N] [--kv f16|f32] [--json|--csv]\n"
            "\n"
            "qmap bench MODEL: prompt (pp) and generation (tg) tokens/s of decoder LMs beside the speed of light\n"
            "measured in the same run, as llama-bench prints them ('qmap bench MODEL.qmap --help').\n"
            "\n"
            "qmap bench kernels:\n"
            "Measure the matmul kernels against this machine's limits:\n"
            "  1. memory read bandwidth: 1 GiB read by each of several methods (vector loads with 8\n"
            "     accumulators, with and without software prefetch, 1 or 4 streams per thread), over\n"
            "     anonymous memory and over a file mapping; the best method of each moment is the\n"
            "     baseline of section 3, and a kernel measured above 1.05 x it is an error (exit 1)\n"
            "  2. instruction peak: independent AVX-512 VNNI vpdpbusd (int8, GOP/s) and FMA (GFLOP/s)\n"
            "     chains on every thread at once (the FMA loop is AVX2 on CPUs without AVX-512)\n"
            "  3. matvec over 1 GiB of weights, a stack of 4096x4096 matrices as in a model (Q8_ROW with\n"
            "     int8 and f32 activations, F16, F32): GB/s of weight bytes read and the fraction of (1)\n"
            "     timed beside each run, from anonymous memory and from the same bytes mapped from a .qmap\n"
            "     file written in DIR (deleted afterwards), with the mapped/anonymous throughput ratio;\n"
            "     then the first pass through a freshly opened mapping, as is and after madvise\n"
            "     (MADV_WILLNEED, MADV_POPULATE_READ)\n"
            "  4. GEMM with n = 512 rows of X on Q8_ROW 4096x4096, 11008x4096, 4096x11008 (both activation\n"
            "     modes) and F16/F32 4096x4096: GOP/s and the fraction of (2) timed beside each run; and\n"
            "     the generic kernels once\n"
            "  5. accuracy (not speed): relative error of F16 weights and of Q8_ROW with float and with\n"
            "     int8 activations against the exact product with the float weights, for uniform,\n"
            "     Gaussian and outlier-channel activations\n"
            "\n"
            "  --runs N         timed runs per figure, after one untimed warm-up (default 7, at least 5);\n"
            "                   each figure is the median with the min and max\n"
            "  --threads LIST   thread counts to measure, comma-separated (default 1,2)\n"
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
            "exit status: 0 done, 1 a measurement failed, 2 usage error\n");
}

/* ---- options, errors, clean-up -------------------------------------------------------------- */

typedef struct bench_cfg {
    int runs;
    int threads[MAX_THREAD_COUNTS];
    int n_threads;
    const char *dir;
    bool quick, json;
    /* sizes, set from quick */
    size_t bw_bytes;         /* section 1 buffer */
    size_t mv_scale;         /* section 3 matrices: dims divided by this */
    size_t gemm_n, generic_n;
    uint64_t peak_iters;     /* section 2 loop trips per thread */
    bool only_matvec, only_gemm, only_accuracy, only; /* --only: sections 3-5 to run */
} bench_cfg;

/* Process-level state of this one command (never library code): the message of the first failure, so
 * that deep helpers can fail with one call, and the temporary file the signal handler must delete. */
static char g_error[768];

static void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_error, sizeof g_error, fmt, ap);
    va_end(ap);
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

static void tmp_remove(void)
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
typedef struct baseline {
    uint8_t *buf;            /* anonymous, first touched by the reading threads */
    size_t len;
    uint64_t peak_iters;
} baseline;

static double bandwidth_once(const baseline *b, int threads) { return bm_bandwidth(b->buf, b->len, threads, NULL); }

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

#define BW_MAX_READERS 8

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
        printf("\n1. memory read bandwidth: %zu MiB read by each method (each thread its own contiguous part), "
               "anonymous memory and a file mapping of the same size;\n   the baseline of sections 3-4 is the "
               "best method of each moment, timed beside each run\n", len / MIB);
    else {
        json_begin_object(j, "bandwidth");
        json_u64(j, "buffer_bytes", len);
        json_begin_array(j, "results");
    }
    for (int ti = 0; ti < c->n_threads; ti++) {
        int t = c->threads[ti];
        for (int where = 0; where < 2; where++) {
            const uint8_t *buf = where ? file : anon;
            bm_stats st[BW_MAX_READERS + 1];
            for (size_t m = 0; m <= n_rd && m <= BW_MAX_READERS; m++) {
                if (m < n_rd) bm_read_once(&rd[m], buf, len, t);   /* warm-up */
                for (int r = 0; r < c->runs; r++)
                    rates[r] = m < n_rd ? bm_read_once(&rd[m], buf, len, t) : bm_bandwidth(buf, len, t, NULL);
                st[m] = bm_stats_of(rates, c->runs);
                const char *name = m < n_rd ? rd[m].name : "best of each run";
                if (!c->json) {
                    printf("   %-9s threads %-3d %-16s ", where ? "file map" : "anonymous", t, name);
                    bm_print_stats(&st[m], "GB/s");
                    printf("\n");
                } else {
                    json_begin_object(j, NULL);
                    json_cstring(j, "memory", where ? "file_mapping" : "anonymous");
                    json_u64(j, "threads", (uint64_t)t);
                    json_cstring(j, "method", m < n_rd ? rd[m].name : "best");
                    bm_json_stats(j, &st[m], "GB/s");
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

static double peak_once(const baseline *b, bool vnni, int threads)
{
    return bm_peak_once(vnni ? BM_PEAK_INT8 : BM_PEAK_FMA, b->peak_iters, threads);
}

static int bench_peak(const bench_cfg *c, baseline *base, json_out *j)
{
    static const struct { bm_peak_kind kind; const char *key, *unit, *lacks; } kinds[2] = {
        { BM_PEAK_INT8, "vnni_int8", "GOP/s", "AVX-512 VNNI" }, { BM_PEAK_FMA, "fma_f32", "GFLOP/s", "FMA" },
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

/* ---- test matrices -------------------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A weight tensor whose bytes are laid out exactly as in a .qmap file (spec/FORMAT.md 6.1 for Q8_ROW). */
typedef struct bench_tensor {
    qm_dtype dtype;
    size_t rows, cols;
    uint8_t *bytes;          /* anonymous copy: size bytes, 4096-aligned */
    size_t size;
    size_t read_bytes;       /* what one product reads: rows·row_stride (+ scales and row sums) */
    qr_matrix view;          /* of `bytes` */
} bench_tensor;

static const char *dtype_label(qm_dtype d)
{
    return d == QM_DTYPE_Q8_ROW ? "Q8_ROW" : d == QM_DTYPE_F16 ? "F16" : "F32";
}

static void tensor_free(bench_tensor *t)
{
    free(t->bytes);
    t->bytes = NULL;
}

/* Random contents: int8 in [-127, 127] with valid row sums and positive scales, or floats/halves in
 * [-1, 1]. Rows are filled in parallel from per-row seeds (the same bytes for any thread count). */
static int tensor_make(bench_tensor *t, qm_dtype dtype, size_t rows, size_t cols, uint64_t seed)
{
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->rows = rows;
    t->cols = cols;
    uint64_t dims[2] = { rows, cols }, size;
    qm_q8row_layout lay = { 0 };
    if (qm_tensor_nbytes(dtype, 2, dims, QM_DEFAULT_ALIGNMENT, &size) != QM_OK ||
        (dtype == QM_DTYPE_Q8_ROW && qm_q8row_layout_of(2, dims, QM_DEFAULT_ALIGNMENT, &lay) != QM_OK)) {
        set_error("%s %zux%zu: bad shape", dtype_label(dtype), rows, cols);
        return -1;
    }
    t->size = (size_t)size;
    t->bytes = aligned_alloc(4096, (t->size + 4095) / 4096 * 4096);
    if (!t->bytes) {
        set_error("cannot allocate %zu MiB for the %s %zux%zu matrix", t->size / MIB, dtype_label(dtype), rows, cols);
        return -1;
    }
    memset(t->bytes, 0, t->size); /* Q8_ROW padding; faults every page in */
    qr_matrix *v = &t->view;
    v->dtype = dtype;
    v->rows = rows;
    v->cols = cols;
    v->data = t->bytes;
    if (dtype == QM_DTYPE_Q8_ROW) {
        v->row_stride = (size_t)lay.row_stride;
        v->scales = (const float *)(t->bytes + lay.scales_offset);
        v->row_sums = (const int32_t *)(t->bytes + lay.sums_offset);
        t->read_bytes = rows * v->row_stride + 8 * rows;
    } else {
        v->row_stride = cols * (dtype == QM_DTYPE_F16 ? 2 : 4);
        t->read_bytes = rows * v->row_stride;
    }
    uint8_t *base = t->bytes;
    size_t stride = v->row_stride;
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        uint64_t s = seed ^ (r * 0x2545f4914f6cdd1dull), x = 0;
        uint8_t *row = base + r * stride;
        if (dtype == QM_DTYPE_Q8_ROW) {
            int32_t sum = 0;
            for (size_t j = 0; j < cols; j++) {
                if (j % 8 == 0) x = splitmix64(&s);
                int8_t q = (int8_t)(uint8_t)(x >> (8 * (j % 8)));
                if (q == -128) q = -127;
                row[j] = (uint8_t)q;
                sum += q;
            }
            float scale = (1.0f + (float)(splitmix64(&s) & 255) / 256.0f) / 127.0f;
            memcpy(base + lay.scales_offset + 4 * r, &scale, 4);
            memcpy(base + lay.sums_offset + 4 * r, &sum, 4);
        } else if (dtype == QM_DTYPE_F16) {
            for (size_t j = 0; j < cols; j++) {
                if (j % 4 == 0) x = splitmix64(&s);
                uint16_t b = (uint16_t)(x >> (16 * (j % 4)));
                /* sign, exponent 11..14 (|h| in [2^-4, 1)), mantissa: all finite normals */
                uint16_t h = (uint16_t)((b & 0x83ffu) | ((11u + ((b >> 10) & 3u)) << 10));
                memcpy(row + 2 * j, &h, 2);
            }
        } else {
            for (size_t j = 0; j < cols; j++) {
                float f = (float)((int64_t)(splitmix64(&s) >> 40) - (1 << 23)) / (float)(1 << 23);
                memcpy(row + 4 * j, &f, 4);
            }
        }
    }
    return 0;
}

static float *random_floats(size_t n, uint64_t seed)
{
    float *x = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!x) { set_error("out of memory (%zu floats)", n); return NULL; }
    for (size_t i = 0; i < n; i++) x[i] = (float)((int64_t)(splitmix64(&seed) >> 40) - (1 << 23)) / (float)(1 << 23);
    return x;
}

/* The mapped copy: t written as tensor "w" of a container at g_tmp_path, opened and viewed. */
typedef struct mapped {
    qm_file *f;
    qr_matrix view;
} mapped;

static int mapped_make(const char *dir, const bench_tensor *t, mapped *m)
{
    memset(m, 0, sizeof *m);
    snprintf(g_tmp_path, sizeof g_tmp_path, "%s/qmap-bench-%ld-%s.qmap", dir, (long)getpid(), dtype_label(t->dtype));
    qm_error err;
    qm_writer *w = NULL;
    uint64_t dims[2] = { t->rows, t->cols };
    g_tmp_live = 1;
    if (qm_writer_create(g_tmp_path, NULL, &w, &err) != QM_OK) goto fail;
    if (qm_writer_meta_string(w, "general.name", "qmap bench kernels", 18, &err) != QM_OK ||
        qm_writer_add_tensor(w, "w", t->dtype, 2, dims, &err) != QM_OK)
        goto fail_abort;
    for (size_t off = 0; off < t->size;) {
        size_t len = t->size - off < 64 * MIB ? t->size - off : 64 * MIB;
        if (qm_writer_write(w, t->bytes + off, len, &err) != QM_OK) goto fail_abort;
        off += len;
    }
    if (qm_writer_finish(w, &err) != QM_OK) goto fail;
    if (qm_open(g_tmp_path, &m->f, &err) != QM_OK) goto fail;
    const qm_tensor *qt = qm_find_tensor(m->f, "w");
    if (!qt) {
        set_error("%s: tensor 'w' missing after writing it", g_tmp_path);
        goto fail_close;
    }
    if (qr_matrix_from_tensor(m->f, qt, &m->view, &err) != QM_OK) goto fail;
    return 0;
fail_abort:
    qm_writer_abort(w);
fail:
    set_error("%s", err.message);
fail_close:
    qm_close(m->f);
    m->f = NULL;
    tmp_remove();
    return -1;
}

static void mapped_free(mapped *m)
{
    qm_close(m->f);
    m->f = NULL;
    tmp_remove();
}

/* ---- 3. matvec ------------------------------------------------------------------------------------- */

static const char *act_name(const qr_matrix *w, qr_act act)
{
    return w->dtype != QM_DTYPE_Q8_ROW ? "-" : act == QR_ACT_INT8 ? "int8" : act == QR_ACT_INT8X2 ? "i8x2" : "f32";
}

/* W is a stack of MATVEC_LAYER_ROWS x cols matrices, one after another as a model's layers lie in a
 * container: one timed pass is a matvec with each of them, as a decode step does. */
#define MATVEC_LAYER_ROWS 4096

static int time_matvec(const qr_kernels *k, const qr_matrix *w, const float *x, float *y, void *work, size_t work_size,
                       const qr_matmul_opts *o, double *seconds)
{
    qm_status st = QM_OK;
    double t0 = bm_now();
    for (size_t r = 0; r < w->rows && st == QM_OK; r += MATVEC_LAYER_ROWS) {
        qr_matrix v = qr_matrix_rows(w, r, w->rows - r < MATVEC_LAYER_ROWS ? w->rows - r : MATVEC_LAYER_ROWS);
        st = qr_matvec(k, &v, x, y + r, work, work_size, o);
    }
    *seconds = bm_now() - t0;
    if (st != QM_OK) {
        set_error("qr_matvec on %s %zux%zu failed: %s", dtype_label(w->dtype), w->rows, w->cols, qm_status_name(st));
        return -1;
    }
    return 0;
}

static int bench_matvec_one(const bench_cfg *c, const qr_kernels *k, const baseline *base, qm_dtype dtype, size_t rows,
                            size_t cols, json_out *j)
{
    bench_tensor t;
    mapped m = { 0 };
    float *x = NULL, *y = NULL, *y2 = NULL;
    void *work = NULL;
    double *ra = NULL, *rm = NULL, *rb = NULL, *qa = NULL, *qmp = NULL, *mo = NULL;
    int rc = -1;
    if (tensor_make(&t, dtype, rows, cols, 0x51ed270b27e14f2dull + (uint64_t)dtype) != 0) return -1;
    if (mapped_make(c->dir, &t, &m) != 0) goto out;
    x = random_floats(cols, 7);
    y = calloc(rows, sizeof *y);
    y2 = calloc(rows, sizeof *y2);
    ra = malloc((size_t)c->runs * sizeof *ra);
    rm = malloc((size_t)c->runs * sizeof *rm);
    rb = malloc((size_t)c->runs * sizeof *rb);
    qa = malloc((size_t)c->runs * sizeof *qa);
    qmp = malloc((size_t)c->runs * sizeof *qmp);
    mo = malloc((size_t)c->runs * sizeof *mo);
    if (!x || !y || !y2 || !ra || !rm || !rb || !qa || !qmp || !mo) { set_error("out of memory"); goto out; }
    /* one work buffer, sized for the largest need of every configuration measured below */
    size_t work_size = 0;
    for (int act = 0; act < 2; act++)
        for (int ti = 0; ti < c->n_threads; ti++) {
            qr_matmul_opts o = { c->threads[ti], act ? QR_ACT_F32 : QR_ACT_INT8 };
            size_t s = qr_matmul_work_size(&t.view, 1, &o);
            if (s > work_size) work_size = s;
        }
    if (work_size && !(work = aligned_alloc(64, (work_size + 63) / 64 * 64))) { set_error("out of memory"); goto out; }

    int n_act = dtype == QM_DTYPE_Q8_ROW ? 2 : 1;
    for (int ai = 0; ai < n_act; ai++) {
        qr_act act = ai == 0 ? QR_ACT_INT8 : QR_ACT_F32;
        for (int ti = 0; ti < c->n_threads; ti++) {
            qr_matmul_opts o = { c->threads[ti], act };
            double first_a, first_m, s;
            /* untimed warm-ups (kept as "first run": the mapped one includes the page faults) */
            if (time_matvec(k, &t.view, x, y, work, work_size, &o, &first_a) != 0) goto out;
            if (time_matvec(k, &m.view, x, y2, work, work_size, &o, &first_m) != 0) goto out;
            /* the same bytes through the same kernel: the two placements must agree exactly */
            if (memcmp(y, y2, rows * sizeof *y) != 0)
                fprintf(stderr, "qmap bench: warning: %s %zux%zu act %s threads %d: mapped and anonymous results "
                        "differ\n", dtype_label(dtype), rows, cols, act_name(&t.view, act), c->threads[ti]);
            /* Each run times the streaming read, the anonymous copy and the mapping back to back, in an
             * order that rotates, so no measurement always follows another; the ratios are per run. */
            for (int r = 0; r < c->runs; r++) {
                for (int p = 0; p < 3; p++) {
                    int which = (p + r) % 3;
                    if (which == 0) {
                        rb[r] = bandwidth_once(base, c->threads[ti]);
                        continue;
                    }
                    bool anon = which == 1;
                    if (time_matvec(k, anon ? &t.view : &m.view, x, y, work, work_size, &o, &s) != 0) goto out;
                    (anon ? ra : rm)[r] = (double)t.read_bytes / s / 1e9;
                }
                qa[r] = bm_ratio(ra[r], rb[r]);
                qmp[r] = bm_ratio(rm[r], rb[r]);
            }
            for (int r = 0; r < c->runs; r++) mo[r] = bm_ratio(rm[r], ra[r]);
            bm_stats sa = bm_stats_of(ra, c->runs), sm = bm_stats_of(rm, c->runs), sb = bm_stats_of(rb, c->runs);
            bm_stats sqa = bm_stats_of(qa, c->runs), sqm = bm_stats_of(qmp, c->runs), smo = bm_stats_of(mo, c->runs);
            /* a kernel cannot read memory faster than the best plain read of it: above, the baseline is wrong */
            if (sqa.median > RATIO_LIMIT || sqm.median > RATIO_LIMIT) {
                set_error("matvec %s %zux%zu act %s threads %d read at %.2f (anonymous) / %.2f (mapped) x the "
                          "bandwidth measured beside it: the bandwidth baseline is wrong (a kernel cannot read "
                          "faster than memory), so no ratio is printed", dtype_label(dtype), rows, cols,
                          act_name(&t.view, act), c->threads[ti], sqa.median, sqm.median);
                goto out;
            }
            char head[96], shape[48];
            snprintf(shape, sizeof shape, "%zux%zu", rows, cols);
            snprintf(head, sizeof head, "%-6s %-11s act %-4s threads %-2d", dtype_label(dtype), shape,
                     act_name(&t.view, act), c->threads[ti]);
            if (!c->json) {
                printf("   %s  bandwidth ", head);
                bm_print_stats(&sb, "GB/s");
                printf("\n   %*s  anonymous ", (int)strlen(head), "");
                bm_print_stats(&sa, "GB/s");
                printf("  %.2f x bw [%.2f-%.2f]  (first run %.2f GB/s)\n", sqa.median, sqa.min, sqa.max,
                       (double)t.read_bytes / first_a / 1e9);
                printf("   %*s  mapped    ", (int)strlen(head), "");
                bm_print_stats(&sm, "GB/s");
                printf("  %.2f x bw [%.2f-%.2f]  (first run %.2f GB/s)  mapped/anonymous %.2f [%.2f-%.2f]\n",
                       sqm.median, sqm.min, sqm.max, (double)t.read_bytes / first_m / 1e9, smo.median, smo.min,
                       smo.max);
                fflush(stdout);
            } else {
                json_begin_object(j, NULL);
                json_cstring(j, "dtype", dtype_label(dtype));
                if (dtype == QM_DTYPE_Q8_ROW) json_cstring(j, "act", act_name(&t.view, act));
                else json_null(j, "act");
                json_u64(j, "rows", rows);
                json_u64(j, "cols", cols);
                json_u64(j, "layer_rows", MATVEC_LAYER_ROWS);
                json_u64(j, "bytes_read", t.read_bytes);
                json_u64(j, "threads", (uint64_t)c->threads[ti]);
                json_begin_object(j, "bandwidth");
                bm_json_stats(j, &sb, "GB/s");
                json_end_object(j);
                json_begin_object(j, "anonymous");
                bm_json_stats(j, &sa, "GB/s");
                json_begin_object(j, "ratio_to_bandwidth");
                bm_json_stats(j, &sqa, "ratio");
                json_end_object(j);
                json_f64(j, "first_run", (double)t.read_bytes / first_a / 1e9);
                json_end_object(j);
                json_begin_object(j, "mapped");
                bm_json_stats(j, &sm, "GB/s");
                json_begin_object(j, "ratio_to_bandwidth");
                bm_json_stats(j, &sqm, "ratio");
                json_end_object(j);
                json_f64(j, "first_run", (double)t.read_bytes / first_m / 1e9);
                json_end_object(j);
                json_begin_object(j, "mapped_over_anonymous");
                bm_json_stats(j, &smo, "ratio");
                json_end_object(j);
                json_end_object(j);
            }
        }
    }
    rc = 0;
out:
    free(work);
    free(mo);
    free(qmp);
    free(qa);
    free(rb);
    free(rm);
    free(ra);
    free(y2);
    free(y);
    free(x);
    mapped_free(&m);
    tensor_free(&t);
    return rc;
}

static int bench_matvec(const bench_cfg *c, const qr_kernels *k, const baseline *base, json_out *j)
{
    size_t q8_rows = 262144 / c->mv_scale, f16_rows = 131072 / c->mv_scale, f32_rows = 65536 / c->mv_scale;
    if (!c->json)
        printf("\n3. matvec (n = 1) over a stack of %dx4096 matrices (1 GiB; a decode step's matvecs, layer after "
               "layer):\n   GB/s of weight bytes read (Q8_ROW: int8 rows + scales + row sums); "
               "\"x bw\" = median of per-run\n   ratios to the streaming read of section 1 timed beside each "
               "run (same threads); anonymous = malloc'd copy, mapped = the same\n   bytes in a .qmap in %s "
               "(qm_open); the three are timed back to back in rotating order; mapped/anonymous: 1.0 = parity\n",
               MATVEC_LAYER_ROWS, c->dir);
    else json_begin_array(j, "matvec");
    int rc = bench_matvec_one(c, k, base, QM_DTYPE_Q8_ROW, q8_rows, 4096, j);
    if (rc == 0) rc = bench_matvec_one(c, k, base, QM_DTYPE_F16, f16_rows, 4096, j);
    if (rc == 0) rc = bench_matvec_one(c, k, base, QM_DTYPE_F32, f32_rows, 4096, j);
    if (c->json) json_end_array(j);
    return rc;
}

/* ---- 3b. the first pass through a freshly opened mapping ------------------------------------------ */
/* Section 3 reads a mapping whose page tables are already filled. A model that has just opened its file
 * pays one page fault per 4 KiB page on its first pass (the file's pages are in the page cache here, so
 * this is the mapping's cost, not the disk's). Each run opens the container again and times the first
 * matvec pass over it: as is, after madvise(MADV_WILLNEED), and after madvise(MADV_POPULATE_READ), which
 * fills the page tables up front (its own time is reported too). */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

static int bench_first_pass(const bench_cfg *c, const qr_kernels *k, json_out *j)
{
    bench_tensor t;
    mapped m = { 0 };
    float *x = NULL, *y = NULL;
    double *pass = NULL, *prep = NULL;
    int rc = -1;
    size_t rows = 262144 / c->mv_scale;
    if (tensor_make(&t, QM_DTYPE_Q8_ROW, rows, 4096, 0x51ed270b27e14f2dull) != 0) return -1;
    if (mapped_make(c->dir, &t, &m) != 0) goto out;
    x = random_floats(4096, 7);
    y = calloc(rows, sizeof *y);
    pass = malloc((size_t)c->runs * sizeof *pass);
    prep = malloc((size_t)c->runs * sizeof *prep);
    if (!x || !y || !pass || !prep) { set_error("out of memory"); goto out; }
    static const char *const modes[3] = { "as opened", "MADV_WILLNEED", "MADV_POPULATE_READ" };
    if (!c->json)
        printf("\n3b. first matvec pass through a freshly opened mapping (Q8_ROW %zux4096, float X; page "
               "cache warm): GB/s of the pass,\n    and the time of the madvise call itself\n", rows);
    else json_begin_array(j, "first_pass");
    for (int ti = 0; ti < c->n_threads; ti++) {
        qr_matmul_opts o = { c->threads[ti], QR_ACT_F32 };
        for (int mode = 0; mode < 3; mode++) {
            for (int r = 0; r < c->runs; r++) {
                qm_close(m.f);
                m.f = NULL;
                qm_error err;
                if (qm_open(g_tmp_path, &m.f, &err) != QM_OK ||
                    qr_matrix_from_tensor(m.f, qm_find_tensor(m.f, "w"), &m.view, &err) != QM_OK) {
                    set_error("%s", err.message);
                    goto out;
                }
                void *base_addr = (void *)qm_file_bytes(m.f);
                size_t len = (size_t)qm_file_header(m.f)->file_size;
                double t0 = bm_now();
                if (mode > 0 && madvise(base_addr, len, mode == 1 ? MADV_WILLNEED : MADV_POPULATE_READ) != 0) {
                    set_error("madvise(%s): %s", modes[mode], strerror(errno));
                    goto out;
                }
                prep[r] = bm_now() - t0;
                double s;
                if (time_matvec(k, &m.view, x, y, NULL, 0, &o, &s) != 0) goto out;
                pass[r] = (double)t.read_bytes / s / 1e9;
            }
            bm_stats sp = bm_stats_of(pass, c->runs), sq = bm_stats_of(prep, c->runs);
            if (!c->json) {
                printf("   threads %-2d %-20s first pass ", c->threads[ti], modes[mode]);
                bm_print_stats(&sp, "GB/s");
                if (mode > 0) printf("   madvise %.1f ms [%.1f-%.1f]", sq.median * 1e3, sq.min * 1e3, sq.max * 1e3);
                printf("\n");
            } else {
                json_begin_object(j, NULL);
                json_u64(j, "threads", (uint64_t)c->threads[ti]);
                json_cstring(j, "advice", modes[mode]);
                json_begin_object(j, "first_pass");
                bm_json_stats(j, &sp, "GB/s");
                json_end_object(j);
                json_begin_object(j, "madvise_seconds");
                bm_json_stats(j, &sq, "s");
                json_end_object(j);
                json_end_object(j);
            }
        }
    }
    if (c->json) json_end_array(j);
    rc = 0;
out:
    free(prep);
    free(pass);
    free(y);
    free(x);
    mapped_free(&m);
    tensor_free(&t);
    return rc;
}

/* ---- 4. GEMM -------------------------------------------------------------------------------------- */

static int time_gemm(const qr_kernels *k, const qr_matrix *w, size_t n, const float *x, float *y, void *work,
                     size_t work_size, const qr_matmul_opts *o, double *seconds)
{
    double t0 = bm_now();
    qm_status st = qr_matmul(k, w, n, x, w->cols, y, w->rows, work, work_size, o);
    *seconds = bm_now() - t0;
    if (st != QM_OK) {
        set_error("qr_matmul (n = %zu) on %s %zux%zu failed: %s", n, dtype_label(w->dtype), w->rows, w->cols,
                  qm_status_name(st));
        return -1;
    }
    return 0;
}

typedef struct gemm_case {
    qm_dtype dtype;
    size_t rows, cols;
} gemm_case;

/* The figure of the generic baseline's reference: the variant in use, Q8_ROW 4096x4096 act int8, 1 thread. */
typedef struct gemm_ref {
    bool have;
    double gops;
    int threads;
} gemm_ref;

static int bench_gemm_one(const bench_cfg *c, const qr_kernels *k, const baseline *base, const gemm_case *gc,
                          gemm_ref *ref, json_out *j)
{
    bench_tensor t;
    size_t n = c->gemm_n;
    float *x = NULL, *y = NULL;
    void *work = NULL;
    double *rates = NULL, *peaks = NULL, *ratios = NULL;
    int rc = -1;
    if (tensor_make(&t, gc->dtype, gc->rows, gc->cols, 0x7f4a7c159e3779b9ull + gc->rows * 3 + gc->cols) != 0) return -1;
    x = random_floats(n * gc->cols, 11);
    y = malloc(n * gc->rows * sizeof *y);
    rates = malloc((size_t)c->runs * sizeof *rates);
    peaks = malloc((size_t)c->runs * sizeof *peaks);
    ratios = malloc((size_t)c->runs * sizeof *ratios);
    if (!x || !y || !rates || !peaks || !ratios) { set_error("out of memory"); goto out; }
    /* Q8_ROW: int8 X, float X, two-term int8 X (whose GOP/s count the product's operations, not the
     * twice as many it executes) */
    static const qr_act acts[3] = { QR_ACT_INT8, QR_ACT_F32, QR_ACT_INT8X2 };
    const int n_act = gc->dtype == QM_DTYPE_Q8_ROW ? 3 : 1;
    size_t work_size = 0;
    for (int ai = 0; ai < n_act; ai++)
        for (int ti = 0; ti < c->n_threads; ti++) {
            qr_matmul_opts o = { c->threads[ti], acts[ai] };
            size_t s = qr_matmul_work_size(&t.view, n, &o);
            if (s > work_size) work_size = s;
        }
    if (work_size && !(work = aligned_alloc(64, (work_size + 63) / 64 * 64))) { set_error("out of memory"); goto out; }
    double ops = 2.0 * (double)n * (double)gc->rows * (double)gc->cols;
    for (int ai = 0; ai < n_act; ai++) {
        qr_act act = gc->dtype == QM_DTYPE_Q8_ROW ? acts[ai] : QR_ACT_F32;
        bool int8 = gc->dtype == QM_DTYPE_Q8_ROW && act != QR_ACT_F32;
        for (int ti = 0; ti < c->n_threads; ti++) {
            qr_matmul_opts o = { c->threads[ti], act };
            double s;
            if (time_gemm(k, &t.view, n, x, y, work, work_size, &o, &s) != 0) goto out; /* warm-up */
            /* each run times the peak loop and the GEMM back to back (alternating which goes first): the
             * ratio is per run, so drift of the host's clock between runs cancels */
            for (int r = 0; r < c->runs; r++) {
                for (int p = 0; p < 2; p++) {
                    if ((p == 0) == (r % 2 == 0)) {
                        peaks[r] = peak_once(base, int8, c->threads[ti]);
                        continue;
                    }
                    if (time_gemm(k, &t.view, n, x, y, work, work_size, &o, &s) != 0) goto out;
                    rates[r] = ops / s / 1e9;
                }
                ratios[r] = bm_ratio(rates[r], peaks[r]);
            }
            bm_stats st = bm_stats_of(rates, c->runs), spk = bm_stats_of(peaks, c->runs), sr = bm_stats_of(ratios, c->runs);
            const bool have_peak = bm_peak_label(int8 ? BM_PEAK_INT8 : BM_PEAK_FMA) != NULL;
            /* a GEMM cannot run more multiply-adds than the CPU issues: above the peak, the peak is wrong */
            if (have_peak && sr.median > RATIO_LIMIT) {
                set_error("GEMM %s %zux%zu act %s threads %d ran at %.2f x the %s peak measured beside it: the "
                          "peak baseline is wrong (a kernel cannot exceed it), so no ratio is printed",
                          dtype_label(gc->dtype), gc->rows, gc->cols, act_name(&t.view, act), c->threads[ti],
                          sr.median, int8 ? "VNNI" : "FMA");
                goto out;
            }
            if (int8 && gc->rows == 4096 && gc->cols == 4096 && (!ref->have || c->threads[ti] == 1)) {
                ref->have = true;
                ref->gops = st.median;
                ref->threads = c->threads[ti];
            }
            if (!c->json) {
                char shape[48];
                snprintf(shape, sizeof shape, "%zux%zu", gc->rows, gc->cols);
                printf("   %-6s %-11s act %-4s threads %-2d  ", dtype_label(gc->dtype), shape, act_name(&t.view, act),
                       c->threads[ti]);
                bm_print_stats(&st, "GOP/s");
                if (have_peak)
                    printf("  %.2f x %s peak [%.2f-%.2f] (peak beside it %.0f)\n", sr.median, int8 ? "VNNI" : "FMA",
                           sr.min, sr.max, spk.median);
                else printf("  (no %s peak on this CPU)\n", int8 ? "VNNI" : "FMA");
                fflush(stdout);
            } else {
                json_begin_object(j, NULL);
                json_cstring(j, "dtype", dtype_label(gc->dtype));
                if (gc->dtype == QM_DTYPE_Q8_ROW) json_cstring(j, "act", act_name(&t.view, act));
                else json_null(j, "act");
                json_u64(j, "rows", gc->rows);
                json_u64(j, "cols", gc->cols);
                json_u64(j, "n", n);
                json_u64(j, "threads", (uint64_t)c->threads[ti]);
                bm_json_stats(j, &st, "GOP/s");
                json_cstring(j, "peak", int8 ? "vnni_int8" : "fma_f32");
                if (have_peak) {
                    json_begin_object(j, "peak_beside");
                    bm_json_stats(j, &spk, int8 ? "GOP/s" : "GFLOP/s");
                    json_end_object(j);
                    json_begin_object(j, "ratio_to_peak");
                    bm_json_stats(j, &sr, "ratio");
                    json_end_object(j);
                } else {
                    json_null(j, "ratio_to_peak");
                }
                json_end_object(j);
            }
        }
    }
    rc = 0;
out:
    free(work);
    free(ratios);
    free(peaks);
    free(rates);
    free(y);
    free(x);
    tensor_free(&t);
    return rc;
}

/* The generic (portable C) variant once: Q8_ROW 4096x4096, act int8, 1 thread, one timed run. */
static int bench_gemm_generic(const bench_cfg *c, const qr_kernels *k, const gemm_ref *ref, json_out *j)
{
    const qr_kernels *g = qr_kernels_for(QM_CPU_GENERIC);
    if (!g) { set_error("the generic kernels are missing from this build"); return -1; }
    bench_tensor t;
    size_t n = c->generic_n, rows = 4096, cols = 4096;
    float *x = NULL, *y = NULL;
    void *work = NULL;
    int rc = -1;
    if (tensor_make(&t, QM_DTYPE_Q8_ROW, rows, cols, 0x7f4a7c159e3779b9ull + rows * 3 + cols) != 0) return -1;
    qr_matmul_opts o = { 1, QR_ACT_INT8 };
    size_t work_size = qr_matmul_work_size(&t.view, n, &o);
    x = random_floats(n * cols, 11);
    y = malloc(n * rows * sizeof *y);
    if (!x || !y || (work_size && !(work = aligned_alloc(64, (work_size + 63) / 64 * 64)))) {
        set_error("out of memory");
        goto out;
    }
    double s;
    if (time_gemm(g, &t.view, n, x, y, work, work_size, &o, &s) != 0) goto out;
    double gops = 2.0 * (double)n * (double)rows * (double)cols / s / 1e9;
    double speedup = ref->have ? bm_ratio(ref->gops, gops) : 0.0 / 0.0;
    if (!c->json) {
        printf("   naive baseline: %s kernels, Q8_ROW 4096x4096 act int8, n = %zu, threads 1, a single run: "
               "%.2f GOP/s", qr_kernels_name(g), n, gops);
        if (ref->have)
            printf("; %s at n = %zu, threads %d is %.0fx faster\n", qr_kernels_name(k), c->gemm_n, ref->threads,
                   speedup);
        else printf("\n");
    } else {
        json_begin_object(j, "gemm_generic");
        json_cstring(j, "kernels", qr_kernels_name(g));
        json_cstring(j, "dtype", "Q8_ROW");
        json_cstring(j, "act", "int8");
        json_u64(j, "rows", rows);
        json_u64(j, "cols", cols);
        json_u64(j, "n", n);
        json_u64(j, "threads", 1);
        json_u64(j, "runs", 1);
        json_f64(j, "value", gops);
        json_cstring(j, "unit", "GOP/s");
        json_f64(j, "speedup_of_selected_kernels", speedup);
        json_end_object(j);
    }
    rc = 0;
out:
    free(work);
    free(y);
    free(x);
    tensor_free(&t);
    return rc;
}

static int bench_gemm(const bench_cfg *c, const qr_kernels *k, const baseline *base, json_out *j)
{
    static const gemm_case cases[] = {
        { QM_DTYPE_Q8_ROW, 4096, 4096 },  { QM_DTYPE_Q8_ROW, 11008, 4096 }, { QM_DTYPE_Q8_ROW, 4096, 11008 },
        { QM_DTYPE_F16, 4096, 4096 },     { QM_DTYPE_F32, 4096, 4096 },
    };
    gemm_ref ref = { 0 };
    if (!c->json)
        printf("\n4. GEMM, n = %zu rows of X, anonymous memory: GOP/s = 2*n*rows*cols / time; \"x peak\" = median of "
               "per-run ratios to the\n   peak loop of section 2 timed beside each run, same threads (VNNI for act int8, "
               "FMA otherwise)\n", c->gemm_n);
    else json_begin_array(j, "gemm");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (bench_gemm_one(c, k, base, &cases[i], &ref, j) != 0) return -1;
    if (c->json) json_end_array(j);
    return bench_gemm_generic(c, k, &ref, j);
}

/* ---- 5. accuracy of the stored weights and of int8 activations ------------------------------------ */
/* Not a speed: what each path costs in error, against the exact product with the float weights (f64).
 * W is float (Gaussian), stored as F16 and as Q8_ROW (quantized with qmap quantize's own row kernel);
 * X comes in three shapes: uniform, Gaussian, and Gaussian with a few outlier channels 30x larger (as
 * transformer activations have), where one scale per row of X hurts int8 the most. */

static double gaussian(uint64_t *s)
{
    double u1 = ((double)(splitmix64(s) >> 11) + 0.5) * 0x1p-53, u2 = (double)(splitmix64(s) >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static int bench_accuracy(const bench_cfg *c, const qr_kernels *k, json_out *j)
{
    const size_t rows = 1024, cols = 4096, n = 32, rs = (cols + 63) / 64 * 64;
    int rc = -1;
    float *w = malloc(rows * cols * sizeof *w), *x = malloc(n * cols * sizeof *x), *y = malloc(n * rows * sizeof *y);
    uint16_t *wh = malloc(rows * cols * sizeof *wh);
    int8_t *wq = aligned_alloc(64, rows * rs);
    float *sc = malloc(rows * sizeof *sc);
    int32_t *sums = malloc(rows * sizeof *sums);
    double *ref = malloc(n * rows * sizeof *ref);
    void *work = NULL;
    if (!w || !x || !y || !wh || !wq || !sc || !sums || !ref) { set_error("out of memory"); goto out; }
    uint64_t seed = 0x1234abcdull;
    for (size_t i = 0; i < rows * cols; i++) w[i] = (float)(0.02 * gaussian(&seed));
    memset(wq, 0, rows * rs);
    const qq_kernels *qk = qq_kernels_get();
    for (size_t r = 0; r < rows; r++) {
        qk->q8row(w + r * cols, cols, wq + r * rs, &sc[r], &sums[r]);
        for (size_t col = 0; col < cols; col++) wh[r * cols + col] = qm_f32_to_f16(w[r * cols + col]);
    }
    const qr_matrix mh = { QM_DTYPE_F16, rows, cols, wh, 2 * cols, NULL, NULL };
    const qr_matrix mq = { QM_DTYPE_Q8_ROW, rows, cols, wq, rs, sc, sums };
    const qr_matmul_opts o_int8 = { 0, QR_ACT_INT8 }, o_f32 = { 0, QR_ACT_F32 }, o_x2 = { 0, QR_ACT_INT8X2 };
    size_t ws = qr_matmul_work_size(&mq, n, &o_x2); /* the largest of the three */
    if (!(work = malloc(ws))) { set_error("out of memory"); goto out; }
    static const char *const kinds[3] = { "uniform", "gaussian", "gaussian+outliers" };
    if (!c->json)
        printf("\n5. accuracy (not speed): relative error ||Y - Y_exact|| / ||Y_exact|| of Y = X W^T, W %zux%zu "
               "Gaussian floats,\n   n = %zu; Y_exact in f64 with the float W; outliers: 8 channels of X 30x "
               "larger\n", rows, cols, n);
    else json_begin_array(j, "accuracy");
    for (int kind = 0; kind < 3; kind++) {
        uint64_t xs = 99 + (uint64_t)kind;
        for (size_t i = 0; i < n * cols; i++) {
            size_t col = i % cols;
            double v = kind == 0 ? (double)(splitmix64(&xs) >> 11) * 0x1p-52 - 1.0 : gaussian(&xs);
            if (kind == 2 && col % 512 == 7) v *= 30.0;
            x[i] = (float)v;
        }
        double norm = 0;
        for (size_t i = 0; i < n; i++)
            for (size_t r = 0; r < rows; r++) {
                double a = 0;
                for (size_t col = 0; col < cols; col++) a += (double)x[i * cols + col] * (double)w[r * cols + col];
                ref[i * rows + r] = a;
                norm += a * a;
            }
        struct { const char *name, *key; const qr_matrix *m; const qr_matmul_opts *o; } paths[4] = {
            { "F16 weights", "f16", &mh, &o_f32 }, { "Q8_ROW, act f32", "q8_act_f32", &mq, &o_f32 },
            { "Q8_ROW, act int8", "q8_act_int8", &mq, &o_int8 }, { "act int8x2", "q8_act_int8x2", &mq, &o_x2 },
        };
        if (!c->json) printf("   X %-18s", kinds[kind]);
        else {
            json_begin_object(j, NULL);
            json_cstring(j, "x", kinds[kind]);
        }
        for (int p = 0; p < 4; p++) {
            if (qr_matmul(k, paths[p].m, n, x, cols, y, rows, work, ws, paths[p].o) != QM_OK) {
                set_error("accuracy: qr_matmul failed");
                goto out;
            }
            double e = 0;
            for (size_t i = 0; i < n * rows; i++) e += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]);
            double rel = sqrt(e / norm);
            if (!c->json) printf("  %s %.2e", paths[p].name, rel);
            else json_f64(j, paths[p].key, rel);
        }
        if (!c->json) printf("\n");
        else json_end_object(j);
    }
    if (c->json) json_end_array(j);
    rc = 0;
out:
    free(work);
    free(ref);
    free(sums);
    free(sc);
    free(wq);
    free(wh);
    free(y);
    free(x);
    free(w);
    return rc;
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

int cmd_bench(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "qmap bench: name a benchmark (kernels)\n\n");
        help(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) { help(stdout); return 0; }
    if (strcmp(argv[1], "kernels") != 0) return bench_model(argc, argv);   /* qmap bench MODEL.qmap … */
    bench_cfg c = { .runs = 0, .threads = { 1, 2 }, .n_threads = 2 };
    const char *tmp = getenv("TMPDIR");
    c.dir = tmp && *tmp ? tmp : "/tmp";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { help(stdout); return 0; }
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
    int rc = run_kernels(&c, &j);
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
    help(stderr);
    return 2;
}
