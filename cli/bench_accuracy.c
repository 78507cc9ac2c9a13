/* bench_accuracy.c — section 5 of `qmap bench kernels`: the relative error of each weight/activation path
 * against the exact product with the float weights. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_sections.h"
#include "qm_half.h"
#include "qq_kernels.h"

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

int bench_accuracy(const bench_cfg *c, const qr_kernels *k, json_out *j)
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
    const qr_matmul_opts o_int8 = { .pool = 0, .act = QR_ACT_INT8, .kernels = NULL, .row_invariant = false };
    const qr_matmul_opts o_f32 = { .pool = 0, .act = QR_ACT_F32, .kernels = NULL, .row_invariant = false };
    const qr_matmul_opts o_x2 = { .pool = 0, .act = QR_ACT_INT8X2, .kernels = NULL, .row_invariant = false };
    size_t ws = qr_matmul_work_size(&mq, n, &o_x2); /* the largest of the three */
    if (!(work = malloc(ws))) { set_error("out of memory"); goto out; }
    static const char *const kinds[3] = { "uniform", "gaussian", "gaussian+outliers" };
    if (!c->json)
        printf("\n5. accuracy (not speed): relative error ||Y - Y_exact|| / ||Y_exact|| of Y = X W^T, W %zux%zu "
               "Gaussian floats,\n   n = %zu; Y_exact in f64 with the float W; outliers: 8 channels of X 30x "
               "larger\n", rows, cols, n);
    else jo_begin_array(j, "accuracy");
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
            jo_begin_object(j, NULL);
            jo_cstring(j, "x", kinds[kind]);
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
            else jo_f64(j, paths[p].key, rel);
        }
        if (!c->json) printf("\n");
        else jo_end_object(j);
    }
    if (c->json) jo_end_array(j);
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

