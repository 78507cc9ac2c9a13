/* bench_util.h — what the sections of `qmap bench kernels` share, below them: the settings, the baselines
 * kept for the run, the test matrices (bench_tensors.c), and the command's error and temporary-file state
 * (bench_util.c). The sections (bench_sections.h) and the command (bench_kernels.c) include this; this
 * includes neither. CLI code, not library code: the first failure's message and the temporary container's
 * path are process-level state of this one command, so that a deep helper can fail with one call and a
 * signal handler can delete the file. */
#ifndef QM_BENCH_UTIL_H
#define QM_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>

#include "bench_measure.h"
#include "json_out.h"
#include "qm_format.h"
#include "qm_reader.h"
#include "qr_matmul.h"

#define MAX_THREAD_COUNTS 16
#define MAX_MATVEC_COLS 8
#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)

typedef struct bench_cfg {
    int runs;
    int threads[MAX_THREAD_COUNTS];
    qr_pool *pools[MAX_THREAD_COUNTS];   /* pools[i]: threads[i] threads, for the kernels (started once) */
    int n_threads;
    const char *dir;
    bool quick, json;
    /* sizes, set from quick */
    size_t bw_bytes;         /* section 1 buffer */
    size_t mv_scale;         /* section 3 matrices: dims divided by this */
    long mv_cols[MAX_MATVEC_COLS]; /* section 3 row lengths (--cols; default 4096) */
    int n_mv_cols;
    size_t gemm_n, generic_n;
    uint64_t peak_iters;     /* section 2 loop trips per thread */
    bool only_matvec, only_gemm, only_rows, only_accuracy, only; /* --only: sections 3-5 to run */
} bench_cfg;

/* Sections 1 and 2 (bench_baseline.c) fill it: the baselines kept for the whole run, timed again beside
 * every run of a kernel in sections 3 and 4 (bandwidth_once, peak_once: bench_util.c). */
typedef struct baseline {
    uint8_t *buf;            /* anonymous, first touched by the reading threads */
    size_t len;
    uint64_t peak_iters;
} baseline;
double bandwidth_once(const baseline *b, int threads);
double peak_once(const baseline *b, bool int8, int threads);

/* The first failure's message (printf-style), kept for the command to print; the message ("" if none),
 * and clearing it. */
void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *bench_error(void);
void bench_error_clear(void);
/* The temporary container of a mapped test matrix: register its path (the signal handler deletes it;
 * returns the stored copy), its path (empty if none), and its removal. */
const char *tmp_register(const char *path);
const char *tmp_path(void);
void tmp_remove(void);
/* Install the handler that deletes the temporary container on SIGINT, SIGTERM and SIGHUP (and then dies
 * of the signal), keeping the handlers it replaces in old[3]; and put those back. */
void tmp_guard_signals(struct sigaction old[3]);
void tmp_restore_signals(const struct sigaction old[3]);

/* Test matrices (bench_tensors.c): random weights in the container layout, in anonymous memory, and the
 * same bytes written to a container in DIR and mapped. */
typedef struct bench_tensor {
    qm_dtype dtype;
    size_t rows, cols;
    uint8_t *bytes;          /* anonymous copy: size bytes (bm_anon_buffer; tensor_free unmaps it) */
    size_t size;
    size_t read_bytes;       /* what one product reads: rows·row_stride (+ scales and row sums) */
    qr_matrix view;          /* of `bytes` */
} bench_tensor;

typedef struct mapped {
    qm_file *f;
    qr_matrix view;
} mapped;

uint64_t splitmix64(uint64_t *s);
const char *dtype_label(qm_dtype d);
int tensor_make(bench_tensor *t, qm_dtype dtype, size_t rows, size_t cols, uint64_t seed);
void tensor_free(bench_tensor *t);
float *random_floats(size_t n, uint64_t seed);   /* malloc'd; NULL when out of memory */
int mapped_make(const char *dir, const bench_tensor *t, mapped *m);
void mapped_free(mapped *m);
const char *act_name(const qr_matrix *w, qr_act act);

/* What one timed product call needs beside its matrix: the variant, X, Y, the work buffer and the options
 * (the matvec and GEMM sections' run contexts hold one). Nothing owned. */
typedef struct bench_call {
    const qr_kernels *k;
    const float *x;
    float *y;
    void *work;
    size_t work_size;
    const qr_matmul_opts *o;
} bench_call;

/* " (N runs taken again)" on stdout when reruns > 0: runs that came out above BM_RATIO_LIMIT x the limit
 * read beside them and were measured again (bm_run_beside_limit). */
void print_reruns(int reruns);

#endif /* QM_BENCH_UTIL_H */
