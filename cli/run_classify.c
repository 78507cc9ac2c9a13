/* run_classify.c — `qmap run` on a classifier: .npy rows in, classes, accuracy and rows/s out. */
#include "run_classify.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "json_out.h"
#include "input_rows.h"
#include "qm_fileio.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Labels: n integers in [0, k) from an .npy or IDX file; allocates the labels and a zeroed k x k confusion
 * matrix. Returns 0, or 1 after printing the error. */
static int read_labels(const char *path, uint64_t n, size_t k, bool allow_large, input_array *ys, int64_t **labels,
                       uint64_t **confusion)
{
    if (input_rows_open(path, "--labels", allow_large, ys)) return 1;
    uint64_t ny = ys->rank ? ys->shape[0] * ys->row_elems : 1;
    int64_t probe;
    static const uint8_t zero[8];
    if (ny != n || !input_rows_int_at(ys->dtype, zero, 0, &probe)) {
        fprintf(stderr, "qmap run: --labels: %s holds %llu %s values; give %llu integer labels\n", path,
                (unsigned long long)ny, qc_dtype_name(ys->dtype), (unsigned long long)n);
        return 1;
    }
    if (!(*labels = malloc(n * sizeof **labels)) || !(*confusion = calloc(k * k, sizeof **confusion))) {
        fprintf(stderr, "qmap run: out of memory\n");
        return 1;
    }
    const uint8_t *all = input_rows_slice(ys, 0, ys->rank ? ys->shape[0] : 1);
    if (!all) return 1;
    for (uint64_t i = 0; i < n; i++) {
        int64_t v = 0;
        input_rows_int_at(ys->dtype, all, i, &v);
        if (v < 0 || (uint64_t)v >= k) {
            fprintf(stderr, "qmap run: --labels: row %llu has label %lld; the model has %zu classes\n",
                    (unsigned long long)i, (long long)v, k);
            return 1;
        }
        (*labels)[i] = v;
    }
    return 0;
}

/* Rows read and turned into features this many at a time: large enough that a call's fixed costs vanish,
 * small enough (12.8 MB of features at 784) that memory does not grow with the input. */
#define ROWS_PER_CALL 4096u

static size_t argmax(const float *x, size_t n)
{
    size_t b = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Classify the n rows of xs, a slice of rows at a time: pred[i] the class of row i, and every output in
 * out[n][k] if out is not NULL (else only a slice's outputs are held). Float32 rows are used where they
 * are (in the .npy mapping, or the slice just read), others converted into a slice of features.
 * *secs: the time in qmap_classify (the rows/s reported), not in reading or converting. Returns 0, or 1
 * after printing the error. */
static int classify_rows(qmap_classifier *c, input_array *xs, uint64_t n, size_t d, const qmap_model_info *in,
                         float *out, uint32_t *pred, double *secs)
{
    size_t k = in->vocab_size;
    uint64_t per = n < ROWS_PER_CALL ? n : ROWS_PER_CALL;
    float *x = NULL, *slice = out ? NULL : malloc(per * k * sizeof *slice);
    qmap_error err;
    int status = out || slice ? 0 : 1;
    *secs = 0;
    for (uint64_t first = 0; first < n && !status; first += per) {
        uint64_t cnt = n - first < per ? n - first : per;
        const uint8_t *rows_in = input_rows_slice(xs, first, cnt);
        if (!rows_in) { status = 2; break; }
        const float *rows = (const float *)(const void *)rows_in;
        if (xs->dtype != QC_F32 || (uintptr_t)rows_in % _Alignof(float)) {
            if (!x && !(x = malloc(per * d * sizeof *x))) { status = 1; break; }
            input_rows_features(xs, rows_in, cnt, in->input_scale, in->input_offset, x);
            rows = x;
        }
        float *o = out ? out + first * k : slice;
        double t0 = now_s();
        if (qmap_classify(c, rows, (size_t)cnt, o, &err) != QMAP_OK) {
            fprintf(stderr, "qmap run: %s\n", err.message);
            status = 2;
        }
        *secs += now_s() - t0;
        for (uint64_t i = 0; i < cnt && !status; i++) pred[first + i] = (uint32_t)argmax(o + i * k, k);
    }
    if (status == 1) fprintf(stderr, "qmap run: out of memory\n");
    free(x);
    free(slice);
    return status != 0;
}

/* Write out [n][k] float32 as an .npy (version 1.0) through qm_outfile: a temporary file created
 * exclusively beside it, fsynced and renamed; a destination that is not a regular file is refused. */
static int write_npy(const char *path, const float *v, size_t n, size_t k)
{
    char header[256];
    int hl = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", n, k);
    size_t total = 10 + (size_t)hl + 1, pad = (64 - total % 64) % 64;
    uint16_t hlen = (uint16_t)((size_t)hl + pad + 1);
    unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8) };
    memset(header + hl, ' ', pad);
    header[(size_t)hl + pad] = '\n';
    qm_outfile o;
    qm_error e;
    qm_status st = qm_outfile_create(&o, path, &e);
    if (st == QM_OK) st = qm_outfile_write(&o, pre, sizeof pre, &e);
    if (st == QM_OK) st = qm_outfile_write(&o, header, (size_t)hl + pad + 1, &e);
    if (st == QM_OK) st = qm_outfile_write(&o, v, n * k * sizeof *v, &e);
    if (st == QM_OK) st = qm_outfile_commit(&o, &e);
    else qm_outfile_abort(&o);
    if (st != QM_OK) {
        fprintf(stderr, "qmap run: --output: %s\n", e.message);
        return 1;
    }
    return 0;
}

/* " (Ankle boot)" when the container names its classes, else "". */
static void print_class_name(FILE *fp, const qmap_model *m, size_t c)
{
    size_t len;
    const char *name = qmap_model_class_name(m, (uint32_t)c, &len);
    if (name) fprintf(fp, " (%.*s)", (int)(len > 64 ? 64 : len), name);
}

/* What a run found, for the printers. */
typedef struct classified {
    uint64_t n, right;           /* rows; rows whose prediction is the label */
    size_t k;                    /* classes */
    const float *out;            /* every row's outputs [n][k], when kept (NULL otherwise) */
    const uint32_t *pred;        /* the predicted class of each row */
    const int64_t *labels;       /* NULL without --labels */
    const uint64_t *confusion, *per_class;
    double secs;                 /* in qmap_classify */
} classified;

static void print_json(const qmap_model *m, const qmap_model_info *in, const classified *r)
{
    double acc = r->labels ? (double)r->right / (double)r->n : 0;
    json_out j = { .fp = stdout };
    jo_begin_object(&j, NULL);
    jo_cstring(&j, "model", in->path);
    jo_u64(&j, "rows", r->n);
    jo_u64(&j, "classes", r->k);
    if (in->has_class_names) {
        jo_begin_array(&j, "class_names");
        for (size_t q = 0; q < r->k; q++) {
            size_t len;
            const char *name = qmap_model_class_name(m, (uint32_t)q, &len);
            jo_string(&j, NULL, name, len);
        }
        jo_end_array(&j);
    }
    jo_begin_array(&j, "predictions");
    for (uint64_t i = 0; i < r->n; i++) jo_u64(&j, NULL, r->pred[i]);
    jo_end_array(&j);
    if (r->labels) {
        jo_f64(&j, "accuracy", acc);
        jo_begin_array(&j, "confusion");
        for (size_t row = 0; row < r->k; row++) {
            jo_begin_array(&j, NULL);
            for (size_t q = 0; q < r->k; q++) jo_u64(&j, NULL, r->confusion[row * r->k + q]);
            jo_end_array(&j);
        }
        jo_end_array(&j);
    }
    jo_f64(&j, "seconds", r->secs);
    jo_f64(&j, "rows_per_s", r->secs > 0 ? (double)r->n / r->secs : 0);
    jo_end_object(&j);
    fputc('\n', stdout);
}

static void print_text(const qmap_model *m, const qmap_model_info *in, const classify_args *a, const classified *r)
{
    double acc = r->labels ? (double)r->right / (double)r->n : 0;
    if (r->n <= 20) {
        for (uint64_t i = 0; i < r->n; i++) {
            const float *o = r->out + i * r->k;
            printf("row %llu: class %u", (unsigned long long)i, r->pred[i]);
            print_class_name(stdout, m, r->pred[i]);
            /* the top classes with their scores */
            long top = a->top > 0 ? (a->top < (long)r->k ? a->top : (long)r->k) : 1;
            bool used[4096] = { false };
            printf("  [");
            for (long t = 0; t < top && r->k <= 4096; t++) {
                size_t b = SIZE_MAX;
                for (size_t q = 0; q < r->k; q++)
                    if (!used[q] && (b == SIZE_MAX || o[q] > o[b])) b = q;
                used[b] = true;
                printf("%s%zu: %.4g", t ? ", " : "", b, (double)o[b]);
            }
            printf("]");
            if (r->labels) printf("  label %lld%s", (long long)r->labels[i], r->pred[i] == r->labels[i] ? "" : "  WRONG");
            printf("\n");
        }
    } else {
        printf("%llu rows classified; rows predicted per class:\n", (unsigned long long)r->n);
        for (size_t q = 0; q < r->k && q < 64; q++) {
            printf("  %3zu%s", q, in->has_class_names ? "" : ":");
            print_class_name(stdout, m, q);
            printf("%s %llu\n", in->has_class_names ? ":" : "", (unsigned long long)r->per_class[q]);
        }
        if (r->k > 64) printf("  (%zu more classes)\n", r->k - 64);
    }
    if (r->labels) {
        printf("accuracy %.2f%% (%llu of %llu)\nconfusion matrix (rows: label, columns: predicted):\n", 100 * acc,
               (unsigned long long)r->right, (unsigned long long)r->n);
        for (size_t row = 0; row < r->k && r->k <= 64; row++) {
            printf("  %3zu |", row);
            for (size_t q = 0; q < r->k; q++) printf(" %5llu", (unsigned long long)r->confusion[row * r->k + q]);
            print_class_name(stdout, m, row);
            printf("\n");
        }
    }
    if (a->output) printf("outputs written to %s (float32 [%llu, %zu])\n", a->output, (unsigned long long)r->n, r->k);
    if (!a->quiet)
        fprintf(stderr, "qmap run: %llu rows in %.3f ms: %.0f rows/s (batch %ld, %s)\n", (unsigned long long)r->n,
                r->secs * 1e3, r->secs > 0 ? (double)r->n / r->secs : 0.0, a->batch ? a->batch : 256L, in->file_type);
}

int run_classifier(qmap_model *m, const classify_args *a)
{
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    size_t d = in.input_dim, k = in.vocab_size;
    input_array xs = { 0 }, ys = { 0 };
    float *out = NULL;
    int64_t *labels = NULL;
    uint64_t *confusion = NULL, *per_class = NULL;
    uint32_t *pred = NULL;           /* the predicted class of each row, computed once */
    qmap_classifier *c = NULL;
    int status = 1;
    if (input_rows_open(a->input, "--input", a->allow_large, &xs)) goto done;
    /* rows = the first dimension; the others are flattened into the features */
    uint64_t n = xs.rank ? xs.shape[0] : 1, feats = 1;
    for (uint32_t i = 1; i < xs.rank; i++) feats *= xs.shape[i];
    if (xs.rank < 2 || feats != d || n == 0) {
        fprintf(stderr, "qmap run: --input: %s holds %llu rows of %llu features; the model takes rows of %zu\n",
                a->input, (unsigned long long)n, (unsigned long long)feats, d);
        goto done;
    }
    if (!input_rows_numeric(&xs)) {
        fprintf(stderr, "qmap run: --input: %s is %s; give float32, float64 or integer (uint8 images) rows\n",
                a->input, qc_dtype_name(xs.dtype));
        goto done;
    }
    if (a->labels && read_labels(a->labels, n, k, a->allow_large, &ys, &labels, &confusion)) goto done;
    /* every output only where they are written or shown; else a slice at a time */
    bool keep_outputs = a->output || (!a->json && n <= 20);
    if ((keep_outputs && !(out = malloc(n * k * sizeof *out))) || !(per_class = calloc(k, sizeof *per_class)) ||
        !(pred = malloc(n * sizeof *pred))) {
        fprintf(stderr, "qmap run: out of memory\n");
        goto done;
    }
    qmap_error err;
    if (qmap_classifier_new(m, (size_t)a->batch, (int)a->threads, a->act, &c, &err) != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        goto done;
    }
    double secs = 0;
    if (classify_rows(c, &xs, n, d, &in, out, pred, &secs)) goto done;
    uint64_t right = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t p = pred[i];
        per_class[p]++;
        if (labels) {
            right += (int64_t)p == labels[i];
            confusion[(size_t)labels[i] * k + p]++;
        }
    }
    if (a->output && write_npy(a->output, out, (size_t)n, k)) goto done;
    classified r = { n, right, k, out, pred, labels, confusion, per_class, secs };
    if (a->json) print_json(m, &in, &r);
    else print_text(m, &in, a, &r);
    status = 0;
done:
    qmap_classifier_free(c);
    free(out);
    free(labels);
    free(confusion);
    free(per_class);
    free(pred);
    input_rows_free(&xs);
    input_rows_free(&ys);
    return status;
}
