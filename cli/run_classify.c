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
#include "qc_source.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The one array of an .npy file, through convert's importer (every header field checked). */
static int open_npy(const char *path, const char *what, qc_source **src, const qc_tensor **t, const uint8_t **bytes)
{
    qm_error e;
    qm_error_clear(&e);
    if (qc_open_npy(path, src, &e) != QM_OK) {
        fprintf(stderr, "qmap run: %s: %s\n", what, e.message);
        return 1;
    }
    *t = &(*src)->tensors[0];
    if (!qc_tensor_is_contiguous(*t)) {
        fprintf(stderr, "qmap run: %s: %s: a Fortran-order array; save it C-contiguous (np.ascontiguousarray)\n", what,
                path);
        return 1;
    }
    if (qc_source_load(*src, (*t)->storage, bytes, &e) != QM_OK) {
        fprintf(stderr, "qmap run: %s: %s\n", what, e.message);
        return 1;
    }
    *bytes += (*t)->offset * qc_dtype_size((*t)->dtype);
    return 0;
}

/* Write out [n][k] float32 as an .npy (version 1.0) through a temporary file, fsync and rename. */
static int write_npy(const char *path, const float *v, size_t n, size_t k)
{
    char header[128];
    int hl = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu, %zu), }", n, k);
    size_t total = 10 + (size_t)hl + 1, pad = (64 - total % 64) % 64;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        fprintf(stderr, "qmap run: --output: %s: %s\n", tmp, strerror(errno));
        return 1;
    }
    uint16_t hlen = (uint16_t)((size_t)hl + pad + 1);
    unsigned char pre[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8) };
    bool ok = fwrite(pre, 1, 10, fp) == 10 && fwrite(header, 1, (size_t)hl, fp) == (size_t)hl;
    for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', fp) != EOF;
    ok = ok && fputc('\n', fp) != EOF && fwrite(v, sizeof *v, n * k, fp) == n * k;
    ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    ok = (fclose(fp) == 0) && ok && rename(tmp, path) == 0;
    if (!ok) {
        fprintf(stderr, "qmap run: --output: cannot write %s: %s\n", path, strerror(errno));
        unlink(tmp);
        return 1;
    }
    return 0;
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
    qc_source *xs = NULL, *ys = NULL;
    const qc_tensor *xt, *yt = NULL;
    const uint8_t *xb, *yb = NULL;
    float *x = NULL, *out = NULL;
    int64_t *labels = NULL;
    uint64_t *confusion = NULL;
    qmap_classifier *c = NULL;
    int status = 1;
    if (open_npy(a->input, "--input", &xs, &xt, &xb)) goto done;
    /* rows = the first dimension; the others are flattened into the features */
    uint64_t n = xt->rank ? xt->shape[0] : 1, feats = 1;
    for (uint32_t i = 1; i < xt->rank; i++) feats *= xt->shape[i];
    if (xt->rank < 2 || feats != d || n == 0) {
        fprintf(stderr, "qmap run: --input: %s holds %llu rows of %llu features; the model takes rows of %zu\n",
                a->input, (unsigned long long)n, (unsigned long long)feats, d);
        goto done;
    }
    if (xt->dtype == QC_F32) {
        x = NULL;   /* used in place, from the mapping */
    } else if (xt->dtype == QC_F64 || xt->dtype == QC_U8) {
        if (!(x = malloc(n * d * sizeof *x))) { fprintf(stderr, "qmap run: out of memory\n"); goto done; }
        for (uint64_t i = 0; i < n * d; i++) {
            double v;
            if (xt->dtype == QC_F64) memcpy(&v, xb + 8 * i, 8);
            else v = xb[i];
            x[i] = (float)v;
        }
    } else {
        fprintf(stderr, "qmap run: --input: %s is %s; give float32, float64 or uint8 rows\n", a->input,
                qc_dtype_name(xt->dtype));
        goto done;
    }
    const float *xf = x ? x : (const float *)(const void *)xb;
    if (a->labels) {
        if (open_npy(a->labels, "--labels", &ys, &yt, &yb)) goto done;
        uint64_t ny = 1;
        for (uint32_t i = 0; i < yt->rank; i++) ny *= yt->shape[i];
        if (ny != n || (yt->dtype != QC_I64 && yt->dtype != QC_I32 && yt->dtype != QC_U8 && yt->dtype != QC_I16)) {
            fprintf(stderr, "qmap run: --labels: %s holds %llu %s values; give %llu integer labels\n", a->labels,
                    (unsigned long long)ny, qc_dtype_name(yt->dtype), (unsigned long long)n);
            goto done;
        }
        if (!(labels = malloc(n * sizeof *labels)) || !(confusion = calloc(k * k, sizeof *confusion))) {
            fprintf(stderr, "qmap run: out of memory\n");
            goto done;
        }
        for (uint64_t i = 0; i < n; i++) {
            int64_t v = 0;
            switch (yt->dtype) {
            case QC_I64: memcpy(&v, yb + 8 * i, 8); break;
            case QC_I32: { int32_t w; memcpy(&w, yb + 4 * i, 4); v = w; break; }
            case QC_I16: { int16_t w; memcpy(&w, yb + 2 * i, 2); v = w; break; }
            default: v = yb[i]; break;
            }
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
    uint64_t right = 0, *per_class = calloc(k, sizeof *per_class);
    if (!per_class) { fprintf(stderr, "qmap run: out of memory\n"); goto done; }
    for (uint64_t i = 0; i < n; i++) {
        size_t p = argmax(out + i * k, k);
        per_class[p]++;
        if (labels) {
            right += (int64_t)p == labels[i];
            confusion[(size_t)labels[i] * k + p]++;
        }
    }
    if (a->output && write_npy(a->output, out, (size_t)n, k)) { free(per_class); goto done; }
    double acc = labels ? (double)right / (double)n : 0;
    if (a->json) {
        json_out j = { .fp = stdout };
        json_begin_object(&j, NULL);
        json_cstring(&j, "model", in.path);
        json_u64(&j, "rows", n);
        json_u64(&j, "classes", k);
        json_begin_array(&j, "predictions");
        for (uint64_t i = 0; i < n; i++) json_u64(&j, NULL, argmax(out + i * k, k));
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
                printf("row %llu: class %zu", (unsigned long long)i, argmax(o, k));
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
                if (labels) printf("  label %lld%s", (long long)labels[i], argmax(o, k) == (size_t)labels[i] ? "" : "  WRONG");
                printf("\n");
            }
        } else {
            printf("%llu rows classified; predicted per class:", (unsigned long long)n);
            for (size_t q = 0; q < k; q++) printf(" %zu:%llu", q, (unsigned long long)per_class[q]);
            printf("\n");
        }
        if (labels) {
            printf("accuracy %.2f%% (%llu of %llu)\nconfusion matrix (rows: label, columns: predicted):\n", 100 * acc,
                   (unsigned long long)right, (unsigned long long)n);
            for (size_t r = 0; r < k && k <= 64; r++) {
                printf("  %3zu |", r);
                for (size_t q = 0; q < k; q++) printf(" %5llu", (unsigned long long)confusion[r * k + q]);
                printf("\n");
            }
        }
        if (a->output) printf("outputs written to %s (float32 [%llu, %zu])\n", a->output, (unsigned long long)n, k);
        if (!a->quiet)
            fprintf(stderr, "qmap run: %llu rows in %.3f ms: %.0f rows/s (batch %ld, %s)\n", (unsigned long long)n,
                    secs * 1e3, secs > 0 ? (double)n / secs : 0.0, a->batch, in.file_type);
    }
    free(per_class);
    status = 0;
done:
    qmap_classifier_free(c);
    free(x);
    free(out);
    free(labels);
    free(confusion);
    qc_source_free(xs);
    qc_source_free(ys);
    return status;
}
