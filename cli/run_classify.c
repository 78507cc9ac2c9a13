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
#include "qc_idx.h"
#include "qc_source.h"
#include "qm_fileio.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One array of input: an .npy file (through convert's hardened importer, mapped) or an IDX file, plain or
 * gzip (convert/qc_idx.h, read into memory). */
typedef struct input_array {
    qc_source *src;                  /* .npy */
    qc_idx idx;                      /* IDX */
    qc_dtype dtype;
    uint32_t rank;
    const uint64_t *shape;
    const uint8_t *bytes;            /* the elements, row-major, host byte order */
} input_array;

static void input_free(input_array *a)
{
    qc_source_free(a->src);
    qc_idx_free(&a->idx);
}

static int open_input(const char *path, const char *what, input_array *a)
{
    memset(a, 0, sizeof *a);
    qm_error e;
    qm_error_clear(&e);
    uint8_t head[8] = { 0 };
    ssize_t got = -1;
    int fd = qm_open_regular(path, NULL, &e);
    if (fd >= 0) {
        got = read(fd, head, sizeof head);
        close(fd);
    }
    if (fd < 0 || got < 0) {
        fprintf(stderr, "qmap run: %s: %s\n", what, fd < 0 ? e.message : strerror(errno));
        return 1;
    }
    if (qc_idx_sniff(head, (size_t)got) && memcmp(head, "\x93NUMPY", got >= 6 ? 6 : (size_t)got)) {
        if (qc_idx_read(path, 0, &a->idx, &e) != QM_OK) {
            fprintf(stderr, "qmap run: %s: %s\n", what, e.message);
            return 1;
        }
        a->dtype = a->idx.dtype;
        a->rank = a->idx.rank;
        a->shape = a->idx.shape;
        a->bytes = a->idx.data;
        return 0;
    }
    if (got < 6 || memcmp(head, "\x93NUMPY", 6)) {
        fprintf(stderr, "qmap run: %s: %s is neither an .npy file nor an IDX file (plain or .gz)%s\n", what, path,
                got >= 2 && head[0] == 'P' && head[1] == 'K' ? "; for an .npz, save the one array as .npy" : "");
        return 1;
    }
    if (qc_open_npy(path, &a->src, &e) != QM_OK) {
        fprintf(stderr, "qmap run: %s: %s\n", what, e.message);
        return 1;
    }
    const qc_tensor *t = &a->src->tensors[0];
    if (!qc_tensor_is_contiguous(t)) {
        fprintf(stderr, "qmap run: %s: %s: a Fortran-order array; save it C-contiguous (np.ascontiguousarray)\n", what,
                path);
        return 1;
    }
    if (qc_source_load(a->src, t->storage, &a->bytes, &e) != QM_OK) {
        fprintf(stderr, "qmap run: %s: %s\n", what, e.message);
        return 1;
    }
    a->bytes += t->offset * qc_dtype_size(t->dtype);
    a->dtype = t->dtype;
    a->rank = t->rank;
    a->shape = t->shape;
    return 0;
}

/* Element i of an integer array as int64 (false for a dtype that is not an integer one). */
static bool int_at(const input_array *a, uint64_t i, int64_t *v)
{
    switch (a->dtype) {
    case QC_I64: memcpy(v, a->bytes + 8 * i, 8); return true;
    case QC_I32: { int32_t w; memcpy(&w, a->bytes + 4 * i, 4); *v = w; return true; }
    case QC_I16: { int16_t w; memcpy(&w, a->bytes + 2 * i, 2); *v = w; return true; }
    case QC_I8: *v = (int8_t)a->bytes[i]; return true;
    case QC_U8: *v = a->bytes[i]; return true;
    default: return false;
    }
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

static size_t argmax(const float *x, size_t n)
{
    size_t b = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

int run_classifier(qmap_model *m, const classify_args *a)
{
    qmap_model_info in;
    qmap_model_get_info(m, &in);
    size_t d = in.input_dim, k = in.vocab_size;
    input_array xs = { 0 }, ys = { 0 };
    float *x = NULL, *out = NULL;
    int64_t *labels = NULL;
    uint64_t *confusion = NULL, *per_class = NULL;
    uint32_t *pred = NULL;           /* the predicted class of each row, computed once */
    qmap_classifier *c = NULL;
    int status = 1;
    if (open_input(a->input, "--input", &xs)) goto done;
    /* rows = the first dimension; the others are flattened into the features */
    uint64_t n = xs.rank ? xs.shape[0] : 1, feats = 1;
    for (uint32_t i = 1; i < xs.rank; i++) feats *= xs.shape[i];
    if (xs.rank < 2 || feats != d || n == 0) {
        fprintf(stderr, "qmap run: --input: %s holds %llu rows of %llu features; the model takes rows of %zu\n",
                a->input, (unsigned long long)n, (unsigned long long)feats, d);
        goto done;
    }
    if (xs.dtype == QC_F32 && (uintptr_t)xs.bytes % _Alignof(float) == 0) {
        x = NULL;   /* used in place */
    } else if (xs.dtype == QC_F32) {
        if (!(x = malloc(n * d * sizeof *x))) { fprintf(stderr, "qmap run: out of memory\n"); goto done; }
        memcpy(x, xs.bytes, n * d * sizeof *x);
    } else if (xs.dtype == QC_F64) {
        if (!(x = malloc(n * d * sizeof *x))) { fprintf(stderr, "qmap run: out of memory\n"); goto done; }
        for (uint64_t i = 0; i < n * d; i++) {
            double v;
            memcpy(&v, xs.bytes + 8 * i, 8);
            x[i] = (float)v;
        }
    } else if (xs.dtype == QC_U8 || xs.dtype == QC_I8 || xs.dtype == QC_I16 || xs.dtype == QC_I32) {
        /* raw values (pixels): the model's features are value * input_scale + input_offset, as trained */
        if (!(x = malloc(n * d * sizeof *x))) { fprintf(stderr, "qmap run: out of memory\n"); goto done; }
        for (uint64_t i = 0; i < n * d; i++) {
            int64_t v;
            int_at(&xs, i, &v);
            x[i] = (float)v * in.input_scale + in.input_offset;
        }
    } else {
        fprintf(stderr, "qmap run: --input: %s is %s; give float32, float64 or integer (uint8 images) rows\n",
                a->input, qc_dtype_name(xs.dtype));
        goto done;
    }
    const float *xf = x ? x : (const float *)(const void *)xs.bytes;
    if (a->labels) {
        if (open_input(a->labels, "--labels", &ys)) goto done;
        uint64_t ny = 1;
        for (uint32_t i = 0; i < ys.rank; i++) ny *= ys.shape[i];
        int64_t probe;
        if (ny != n || !int_at(&ys, 0, &probe)) {
            fprintf(stderr, "qmap run: --labels: %s holds %llu %s values; give %llu integer labels\n", a->labels,
                    (unsigned long long)ny, qc_dtype_name(ys.dtype), (unsigned long long)n);
            goto done;
        }
        if (!(labels = malloc(n * sizeof *labels)) || !(confusion = calloc(k * k, sizeof *confusion))) {
            fprintf(stderr, "qmap run: out of memory\n");
            goto done;
        }
        for (uint64_t i = 0; i < n; i++) {
            int64_t v = 0;
            int_at(&ys, i, &v);
            if (v < 0 || (uint64_t)v >= k) {
                fprintf(stderr, "qmap run: --labels: row %llu has label %lld; the model has %zu classes\n",
                        (unsigned long long)i, (long long)v, k);
                goto done;
            }
            labels[i] = v;
        }
    }
    if (!(out = malloc(n * k * sizeof *out))) { fprintf(stderr, "qmap run: out of memory\n"); goto done; }
    qmap_error err;
    if (qmap_classifier_new(m, (size_t)a->batch, (int)a->threads, a->act, &c, &err) != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        goto done;
    }
    double t0 = now_s();
    if (qmap_classify(c, xf, (size_t)n, out, &err) != QMAP_OK) {
        fprintf(stderr, "qmap run: %s\n", err.message);
        goto done;
    }
    double secs = now_s() - t0;
    uint64_t right = 0;
    if (!(per_class = calloc(k, sizeof *per_class)) || !(pred = malloc(n * sizeof *pred))) {
        fprintf(stderr, "qmap run: out of memory\n");
        goto done;
    }
    for (uint64_t i = 0; i < n; i++) {
        size_t p = argmax(out + i * k, k);
        pred[i] = (uint32_t)p;
        per_class[p]++;
        if (labels) {
            right += (int64_t)p == labels[i];
            confusion[(size_t)labels[i] * k + p]++;
        }
    }
    if (a->output && write_npy(a->output, out, (size_t)n, k)) goto done;
    double acc = labels ? (double)right / (double)n : 0;
    if (a->json) {
        json_out j = { .fp = stdout };
        json_begin_object(&j, NULL);
        json_cstring(&j, "model", in.path);
        json_u64(&j, "rows", n);
        json_u64(&j, "classes", k);
        if (in.has_class_names) {
            json_begin_array(&j, "class_names");
            for (size_t q = 0; q < k; q++) {
                size_t len;
                const char *name = qmap_model_class_name(m, (uint32_t)q, &len);
                json_string(&j, NULL, name, len);
            }
            json_end_array(&j);
        }
        json_begin_array(&j, "predictions");
        for (uint64_t i = 0; i < n; i++) json_u64(&j, NULL, pred[i]);
        json_end_array(&j);
        if (labels) {
            json_f64(&j, "accuracy", acc);
            json_begin_array(&j, "confusion");
            for (size_t r = 0; r < k; r++) {
                json_begin_array(&j, NULL);
                for (size_t q = 0; q < k; q++) json_u64(&j, NULL, confusion[r * k + q]);
                json_end_array(&j);
            }
            json_end_array(&j);
        }
        json_f64(&j, "seconds", secs);
        json_f64(&j, "rows_per_s", secs > 0 ? (double)n / secs : 0);
        json_end_object(&j);
        fputc('\n', stdout);
    } else {
        if (n <= 20) {
            for (uint64_t i = 0; i < n; i++) {
                const float *o = out + i * k;
                printf("row %llu: class %u", (unsigned long long)i, pred[i]);
                print_class_name(stdout, m, pred[i]);
                /* the top classes with their scores */
                long top = a->top > 0 ? (a->top < (long)k ? a->top : (long)k) : 1;
                bool used[4096] = { false };
                printf("  [");
                for (long t = 0; t < top && k <= 4096; t++) {
                    size_t b = SIZE_MAX;
                    for (size_t q = 0; q < k; q++)
                        if (!used[q] && (b == SIZE_MAX || o[q] > o[b])) b = q;
                    used[b] = true;
                    printf("%s%zu: %.4g", t ? ", " : "", b, (double)o[b]);
                }
                printf("]");
                if (labels) printf("  label %lld%s", (long long)labels[i], pred[i] == labels[i] ? "" : "  WRONG");
                printf("\n");
            }
        } else {
            printf("%llu rows classified; rows predicted per class:\n", (unsigned long long)n);
            for (size_t q = 0; q < k && q < 64; q++) {
                printf("  %3zu%s", q, in.has_class_names ? "" : ":");
                print_class_name(stdout, m, q);
                printf("%s %llu\n", in.has_class_names ? ":" : "", (unsigned long long)per_class[q]);
            }
            if (k > 64) printf("  (%zu more classes)\n", k - 64);
        }
        if (labels) {
            printf("accuracy %.2f%% (%llu of %llu)\nconfusion matrix (rows: label, columns: predicted):\n", 100 * acc,
                   (unsigned long long)right, (unsigned long long)n);
            for (size_t r = 0; r < k && k <= 64; r++) {
                printf("  %3zu |", r);
                for (size_t q = 0; q < k; q++) printf(" %5llu", (unsigned long long)confusion[r * k + q]);
                print_class_name(stdout, m, r);
                printf("\n");
            }
        }
        if (a->output) printf("outputs written to %s (float32 [%llu, %zu])\n", a->output, (unsigned long long)n, k);
        if (!a->quiet)
            fprintf(stderr, "qmap run: %llu rows in %.3f ms: %.0f rows/s (batch %ld, %s)\n", (unsigned long long)n,
                    secs * 1e3, secs > 0 ? (double)n / secs : 0.0, a->batch ? a->batch : 256L, in.file_type);
    }
    status = 0;
done:
    qmap_classifier_free(c);
    free(x);
    free(out);
    free(labels);
    free(confusion);
    free(per_class);
    free(pred);
    input_free(&xs);
    input_free(&ys);
    return status;
}
