/* test_ops.c — runtime/qr_ops.h and qr_matrix_row_f32 (runtime/qr_dtype.h) against double-precision
 * references written here from the math (torch's definitions), never from the library's code.
 *
 * Tolerances are in units of u = 2^-24 (binary32 rounding) and say where they come from at each check:
 * an op made of k float roundings and libm calls (glibc's expf/tanhf/erff are within 2 ulp) is within a
 * few u of the exact value, relative to the size of the terms it adds. Sizes 1, 3, 15, 16, 17, 64, 100
 * and 4097 sit around every vector width (4, 8, 16 floats) and its tails. `make unit` runs this binary once
 * per QMAP_CPU level, so the portable loops and the AVX2 activations (runtime/qr_ops_avx2.c) are both held
 * to the same references. PRNG: splitmix64 (tu_rng). */
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qm_half.h"
#include "qr_dtype.h"
#include "qr_ops.h"
#include "qr_ops_simd.h"

_Static_assert(FLT_EVAL_METHOD == 0, "the float references below must evaluate in binary32");

#define U 0x1.0p-24

static const size_t sizes[] = { 1, 3, 15, 16, 17, 64, 100, 4097 };
#define N_SIZES (sizeof sizes / sizeof sizes[0])

/* uniform in [lo, hi) */
static float frand(uint64_t *st, float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(tu_rng(st) >> 11) * 0x1.0p-53);
}

static float *fill(size_t n, uint64_t seed, float lo, float hi)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    uint64_t st = seed;
    for (size_t i = 0; i < n; i++) x[i] = frand(&st, lo, hi);
    return x;
}

static void check_close(const char *what, size_t n, size_t i, double got, double ref, double tol)
{
    if (!(fabs(got - ref) <= tol))
        fail_msg("%s n=%zu i=%zu: got %.9g, reference %.9g, |diff| %.3g > tol %.3g", what, n, i, got, ref,
                 fabs(got - ref), tol);
}

/* ---- norms ------------------------------------------------------------------------------------------ */

static void test_layernorm(void **state)
{
    (void)state;
    for (size_t si = 0; si < N_SIZES; si++) {
        size_t d = sizes[si];
        /* an offset mean (3.0) with spread 1: the two-pass variance must not lose it */
        float *x = fill(d, 11 + d, 2.0f, 4.0f), *w = fill(d, 12 + d, -2.0f, 2.0f), *b = fill(d, 13 + d, -1.0f, 1.0f);
        float *y = malloc(d * sizeof *y);
        for (int with_b = 0; with_b < 2; with_b++) {
            for (int inplace = 0; inplace < 2; inplace++) {
                float *out = inplace ? malloc(d * sizeof *out) : y;
                if (inplace) memcpy(out, x, d * sizeof *out);
                qr_layernorm(out, inplace ? out : x, w, with_b ? b : NULL, d, 1e-5f);
                double mean = 0, var = 0;
                for (size_t i = 0; i < d; i++) mean += x[i];
                mean /= (double)d;
                for (size_t i = 0; i < d; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean);
                var /= (double)d;
                for (size_t i = 0; i < d; i++) {
                    double xh = ((double)x[i] - mean) / sqrt(var + 1e-5);
                    double ref = xh * w[i] + (with_b ? b[i] : 0.0);
                    /* a few roundings of the result, relative to the terms added: 4u·(|x̂·w| + |b|) */
                    double tol = 4 * U * (fabs(xh * w[i]) + (with_b ? fabs(b[i]) : 0.0)) + 1e-30;
                    check_close(with_b ? "layernorm+b" : "layernorm", d, i, out[i], ref, tol);
                }
                if (inplace) free(out);
            }
        }
        /* d = 1: the variance is 0 and the output is the bias (x̂ = 0) */
        free(x); free(w); free(b); free(y);
    }
}

static void test_rmsnorm(void **state)
{
    (void)state;
    for (size_t si = 0; si < N_SIZES; si++) {
        size_t d = sizes[si];
        float *x = fill(d, 21 + d, -3.0f, 3.0f), *w = fill(d, 22 + d, -2.0f, 2.0f);
        float *y = malloc(d * sizeof *y);
        for (int inplace = 0; inplace < 2; inplace++) {
            float *out = y;
            if (inplace) memcpy(out, x, d * sizeof *out);
            qr_rmsnorm(out, inplace ? out : x, w, d, 1e-6f);
            double ss = 0;
            for (size_t i = 0; i < d; i++) ss += (double)x[i] * x[i];
            double r = 1.0 / sqrt(ss / (double)d + 1e-6);
            for (size_t i = 0; i < d; i++) {
                double ref = (double)x[i] * r * w[i];
                /* three roundings (r, x·r, w·(x·r)): 4u relative */
                check_close("rmsnorm", d, i, out[i], ref, 4 * U * fabs(ref) + 1e-30);
            }
        }
        free(x); free(w); free(y);
    }
    /* large values: squares in double do not overflow where float squares would */
    float x[3] = { 3e30f, -4e30f, 0.0f }, w[3] = { 1, 1, 1 }, y[3];
    qr_rmsnorm(y, x, w, 3, 0.0f);
    double r = 1.0 / sqrt((9e60 + 16e60) / 3.0);
    for (int i = 0; i < 3; i++) check_close("rmsnorm large", 3, (size_t)i, y[i], (double)x[i] * r, 4 * U * fabs((double)x[i] * r));
}

/* ---- activations ------------------------------------------------------------------------------------ */

static double ref_act(qr_actfn f, double x)
{
    switch (f) {
    case QR_ACTFN_IDENTITY: return x;
    case QR_ACTFN_RELU: return x > 0 ? x : 0;
    case QR_ACTFN_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case QR_ACTFN_GELU_ERF: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    case QR_ACTFN_SILU: return x / (1 + exp(-x));
    case QR_ACTFN_TANH: return tanh(x);
    case QR_ACTFN_SIGMOID: return 1 / (1 + exp(-x));
    }
    return NAN;
}

/* The bound for one activation value:
 * - relu, identity: exact.
 * - silu, tanh, sigmoid: expf/tanhf within 2 ulp plus 2-3 float roundings: 8u relative. Below x = -88.7
 *   e^-x overflows float and sigmoid is 0, so a silu/sigmoid value under 1e-36 may come out as 0.
 * - GELU: 0.5·x·(1 + t) with t = tanh(u) or erf(..). The argument u carries a few roundings of its
 *   own terms (relative 4u of |x| + |0.044715x³|, and tanh' <= 1, erf' <= 2/√π), t another 2 ulp, and
 *   1 + t cancels for negative x: the absolute error is 0.5·|x|·(error of t) plus 4u of the result. */
static double act_tol(qr_actfn f, double x, double ref)
{
    switch (f) {
    case QR_ACTFN_IDENTITY:
    case QR_ACTFN_RELU: return 0;
    case QR_ACTFN_GELU_TANH: {
        double arg = 0.7978845608 * (fabs(x) + 0.044715 * fabs(x * x * x));
        return 0.5 * fabs(x) * (8 * U * arg + 4 * U) + 4 * U * fabs(ref) + 1e-38;
    }
    case QR_ACTFN_GELU_ERF:
        return 0.5 * fabs(x) * (8 * U * fabs(x) + 4 * U) + 4 * U * fabs(ref) + 1e-38;
    default: return 8 * U * fabs(ref) + 1e-36;
    }
}

static void test_activations(void **state)
{
    (void)state;
    static const qr_actfn fs[] = { QR_ACTFN_IDENTITY, QR_ACTFN_RELU, QR_ACTFN_GELU_TANH, QR_ACTFN_GELU_ERF,
                                   QR_ACTFN_SILU, QR_ACTFN_TANH, QR_ACTFN_SIGMOID };
    static const float extremes[] = { 0.0f, -0.0f, 1e-30f, -1e-30f, 0.5f, -0.5f, 5.0f, -5.0f, 10.0f, -10.0f,
                                      30.0f, -30.0f, 90.0f, -90.0f, 1000.0f, -1000.0f, 1e20f, -1e20f };
    for (size_t fi = 0; fi < sizeof fs / sizeof fs[0]; fi++) {
        qr_actfn f = fs[fi];
        for (size_t si = 0; si < N_SIZES; si++) {
            size_t n = sizes[si];
            float *x = fill(n, 31 + n + 100 * fi, -8.0f, 8.0f);
            float *y = malloc(n * sizeof *y);
            memcpy(y, x, n * sizeof *y);
            qr_activate(f, y, n);
            char what[64];
            snprintf(what, sizeof what, "activation %s", qr_actfn_name(f));
            for (size_t i = 0; i < n; i++) {
                double ref = ref_act(f, x[i]);
                check_close(what, n, i, y[i], ref, act_tol(f, x[i], ref));
            }
            free(x); free(y);
        }
        float y[sizeof extremes / sizeof extremes[0]];
        size_t ne = sizeof extremes / sizeof extremes[0];
        memcpy(y, extremes, sizeof y);
        qr_activate(f, y, ne);
        for (size_t i = 0; i < ne; i++) {
            double ref = ref_act(f, extremes[i]);
            char what[64];
            snprintf(what, sizeof what, "activation %s extreme", qr_actfn_name(f));
            check_close(what, ne, i, y[i], ref, act_tol(f, extremes[i], ref));
            assert_false(isnan(y[i]));
        }
    }
}

static void test_actfn_names(void **state)
{
    (void)state;
    static const struct { const char *name; qr_actfn f; } ok[] = {
        { "relu", QR_ACTFN_RELU }, { "gelu_new", QR_ACTFN_GELU_TANH }, { "gelu_pytorch_tanh", QR_ACTFN_GELU_TANH },
        { "gelu_fast", QR_ACTFN_GELU_TANH }, { "gelu", QR_ACTFN_GELU_ERF }, { "silu", QR_ACTFN_SILU },
        { "swish", QR_ACTFN_SILU }, { "tanh", QR_ACTFN_TANH }, { "sigmoid", QR_ACTFN_SIGMOID },
        { "identity", QR_ACTFN_IDENTITY }, { "linear", QR_ACTFN_IDENTITY },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        qr_actfn f = (qr_actfn)99;
        assert_true(qr_actfn_from_name(ok[i].name, strlen(ok[i].name), &f));
        assert_int_equal(f, ok[i].f);
    }
    qr_actfn f = QR_ACTFN_TANH;
    /* the length counts, not a NUL: "gelu_new" cut to 4 bytes is "gelu" */
    assert_true(qr_actfn_from_name("gelu_new", 4, &f));
    assert_int_equal(f, QR_ACTFN_GELU_ERF);
    f = QR_ACTFN_TANH;
    assert_false(qr_actfn_from_name("gelu_ne", 7, &f));
    assert_false(qr_actfn_from_name("Relu", 4, &f));
    assert_false(qr_actfn_from_name("relu ", 5, &f));
    assert_false(qr_actfn_from_name("", 0, &f));
    assert_false(qr_actfn_from_name("mish", 4, &f));
    assert_int_equal(f, QR_ACTFN_TANH);   /* untouched on failure */
}

static void test_swiglu(void **state)
{
    (void)state;
    for (size_t si = 0; si < N_SIZES; si++) {
        size_t n = sizes[si];
        float *g = fill(n, 41 + n, -12.0f, 12.0f), *u = fill(n, 42 + n, -3.0f, 3.0f);
        float *y = malloc(n * sizeof *y);
        memcpy(y, g, n * sizeof *y);
        qr_swiglu(y, u, n);
        for (size_t i = 0; i < n; i++) {
            double ref = (double)g[i] / (1 + exp(-(double)g[i])) * u[i];
            /* expf (2 ulp) and four roundings: 8u relative */
            check_close("swiglu", n, i, y[i], ref, 8 * U * fabs(ref) + 1e-38);
        }
        free(g); free(u); free(y);
    }
}

/* ---- softmax ---------------------------------------------------------------------------------------- */

static void check_softmax(const float *x, size_t n, const char *what)
{
    float *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    qr_softmax(y, n);
    double m = -INFINITY, sum = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, x[i]);
    for (size_t i = 0; i < n; i++) sum += exp((double)x[i] - m);
    double tot = 0;
    for (size_t i = 0; i < n; i++) {
        double ref = exp((double)x[i] - m) / sum;
        /* x - m in float rounds by u·|x - m| (an absolute error in the exponent, so a relative one in the
         * result); expf 2 ulp; the sum and the final scaling 2 more roundings */
        double tol = ref == 0 ? 0 : ((fabs((double)x[i] - m) + 8) * U) * ref + 1e-44;
        check_close(what, n, i, y[i], ref, tol);
        tot += y[i];
    }
    assert_true(fabs(tot - 1.0) <= 1e-5 + n * 2 * U);
    free(y);
}

static void test_softmax(void **state)
{
    (void)state;
    for (size_t si = 0; si < N_SIZES; si++) {
        size_t n = sizes[si];
        float *x = fill(n, 51 + n, -5.0f, 5.0f);
        check_softmax(x, n, "softmax");
        /* large positive values: without subtracting the max, exp would overflow */
        for (size_t i = 0; i < n; i++) x[i] = x[i] * 20.0f + 1000.0f;
        check_softmax(x, n, "softmax large");
        /* large negative values: without it, every exp would underflow to 0 */
        for (size_t i = 0; i < n; i++) x[i] -= 3000.0f;
        check_softmax(x, n, "softmax negative");
        free(x);
    }
    /* -inf entries (a masked score) get exactly 0 */
    float x[5] = { 1.0f, -INFINITY, 2.0f, -INFINITY, 0.5f };
    check_softmax(x, 5, "softmax -inf");
    qr_softmax(x, 5);
    assert_true(x[1] == 0.0f && x[3] == 0.0f);
    /* one element: 1 */
    float one = -77.0f;
    qr_softmax(&one, 1);
    assert_true(one == 1.0f);
}

/* ---- elementwise ------------------------------------------------------------------------------------ */

static void test_add_scale_bias(void **state)
{
    (void)state;
    for (size_t si = 0; si < N_SIZES; si++) {
        size_t n = sizes[si];
        float *x = fill(n, 61 + n, -100.0f, 100.0f), *y = fill(n, 62 + n, -1.0f, 1.0f);
        float *y0 = malloc(n * sizeof *y0);
        memcpy(y0, y, n * sizeof *y0);
        qr_add(y, x, n);
        /* one rounding of the exact sum: what (float)((double)a + b) gives, bit for bit */
        for (size_t i = 0; i < n; i++) assert_true(y[i] == (float)((double)y0[i] + (double)x[i]));
        memcpy(y, y0, n * sizeof *y);
        qr_scale(y, -0.37f, n);
        for (size_t i = 0; i < n; i++) assert_true(y[i] == (float)((double)y0[i] * (double)-0.37f));
        free(x); free(y); free(y0);
    }
    /* bias over rows with a stride: the gap between rows stays untouched */
    const size_t rows = 5, d = 17, ld = 20;
    float *b = fill(d, 71, -1.0f, 1.0f), *y = fill(rows * ld, 72, -1.0f, 1.0f);
    float *y0 = malloc(rows * ld * sizeof *y0);
    memcpy(y0, y, rows * ld * sizeof *y0);
    qr_add_bias_rows(y, ld, rows, b, d);
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < ld; j++) {
            float want = j < d ? (float)((double)y0[r * ld + j] + b[j]) : y0[r * ld + j];
            assert_true(y[r * ld + j] == want);
        }
    free(b); free(y); free(y0);
}

/* ---- rotary positions ------------------------------------------------------------------------------- */

static void test_rope_freqs(void **state)
{
    (void)state;
    static const size_t dims[] = { 2, 16, 64, 80, 128, 256 };
    static const float thetas[] = { 10000.0f, 500000.0f, 1e6f, 100.0f };
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        for (size_t ti = 0; ti < sizeof thetas / sizeof thetas[0]; ti++) {
            size_t hd = dims[di];
            float f[128];
            qr_rope_freqs(f, hd, thetas[ti]);
            for (size_t j = 0; j < hd / 2; j++) {
                double ref = pow((double)thetas[ti], -2.0 * (double)j / (double)hd);
                /* the exponent is a float32 quotient (HF): relative error u in e moves θ^-e by
                 * u·e·ln θ; then two float roundings */
                double tol = (log(thetas[ti]) + 3) * U * ref;
                check_close("rope_freqs", hd, j, f[j], ref, tol);
            }
            assert_true(f[0] == 1.0f);
        }
    }
}

static void test_rope_half(void **state)
{
    (void)state;
    static const struct { size_t n_heads, head_dim; } shapes[] = { { 1, 2 }, { 3, 16 }, { 4, 64 }, { 2, 34 }, { 5, 128 } };
    static const uint32_t positions[] = { 0, 1, 7, 100, 4095, 131071 };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        size_t nh = shapes[si].n_heads, hd = shapes[si].head_dim, n = nh * hd, half = hd / 2;
        float inv[64];
        qr_rope_freqs(inv, hd, 10000.0f);
        for (size_t pi = 0; pi < sizeof positions / sizeof positions[0]; pi++) {
            uint32_t pos = positions[pi];
            float *x = fill(n, 81 + n + pos, -2.0f, 2.0f), *y = malloc(n * sizeof *y);
            memcpy(y, x, n * sizeof *y);
            qr_rope_half(y, nh, hd, pos, inv);
            for (size_t h = 0; h < nh; h++) {
                for (size_t j = 0; j < half; j++) {
                    /* the pair (j, j + half) of a head is the complex number x_j + i·x_{j+half}, turned by
                     * the angle HF uses: the float32 product pos·inv_freq[j] */
                    double a = (double)((float)pos * inv[j]);
                    double re = x[h * hd + j], im = x[h * hd + j + half];
                    double rr = re * cos(a) - im * sin(a), ri = re * sin(a) + im * cos(a);
                    /* cos and sin each rounded once (u), then two products and a sum: 4u·(|re| + |im|) */
                    double tol = 4 * U * (fabs(re) + fabs(im));
                    check_close("rope re", n, h * hd + j, y[h * hd + j], rr, tol);
                    check_close("rope im", n, h * hd + j + half, y[h * hd + j + half], ri, tol);
                }
            }
            if (pos == 0)   /* angle 0: cos 1, sin 0, the row is unchanged bit for bit */
                assert_memory_equal(x, y, n * sizeof *y);
            free(x); free(y);
        }
    }
}

/* ---- qr_matrix_row_f32 ------------------------------------------------------------------------------ */

/* exact value of a binary16 from its fields (finite halves only) */
static double half_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return (h & 0x8000) ? -v : v;
}

static void test_matrix_row(void **state)
{
    (void)state;
    const size_t rows = 5, cols = 67;
    /* F32 with a row stride wider than the row */
    float *f = fill(rows * 72, 91, -10.0f, 10.0f), out[80];
    qr_matrix m = { .dtype = QM_DTYPE_F32, .rows = rows, .cols = cols, .data = f, .row_stride = 72 * sizeof(float) };
    for (size_t r = 0; r < rows; r++) {
        qr_matrix_row_f32(&m, r, out);
        assert_memory_equal(out, f + r * 72, cols * sizeof(float));
    }
    /* F16: every value widened exactly (random finite halves) */
    uint16_t *h = malloc(rows * 68 * sizeof *h);
    uint64_t st = 92;
    for (size_t i = 0; i < rows * 68; i++) {
        uint16_t v;
        do v = (uint16_t)tu_rng(&st); while (((v >> 10) & 31) == 31);
        h[i] = v;
    }
    m = (qr_matrix){ .dtype = QM_DTYPE_F16, .rows = rows, .cols = cols, .data = h, .row_stride = 68 * 2 };
    for (size_t r = 0; r < rows; r++) {
        qr_matrix_row_f32(&m, r, out);
        for (size_t c = 0; c < cols; c++) assert_true((double)out[c] == half_value(h[r * 68 + c]));
    }
    /* Q8_ROW (spec 6.1): q·scale in f32 — the exact product of an int8 and a float fits a double, so
     * rounding it to float once is the f32 product */
    size_t stride = 128;
    int8_t *q = calloc(rows * stride, 1);
    float scales[5];
    int32_t sums[5] = { 0 };
    for (size_t r = 0; r < rows; r++) {
        scales[r] = frand(&st, 1e-3f, 1.0f);
        for (size_t c = 0; c < cols; c++) q[r * stride + c] = (int8_t)((int)(tu_rng(&st) % 255) - 127);
    }
    m = (qr_matrix){ .dtype = QM_DTYPE_Q8_ROW, .rows = rows, .cols = cols, .data = q, .row_stride = stride,
                     .scales = scales, .row_sums = sums };
    for (size_t r = 0; r < rows; r++) {
        qr_matrix_row_f32(&m, r, out);
        for (size_t c = 0; c < cols; c++)
            assert_true(out[c] == (float)((double)q[r * stride + c] * (double)scales[r]));
    }
    /* the dtype table */
    assert_string_equal(qr_dtype_get(QM_DTYPE_Q8_ROW)->name, "q8_row");
    assert_null(qr_dtype_get(QM_DTYPE_I32));
    assert_int_equal(qr_dtype_row_bytes(QM_DTYPE_Q8_ROW, 65), 128);
    assert_int_equal(qr_dtype_row_bytes(QM_DTYPE_F16, 65), 130);
    assert_int_equal(qr_dtype_row_bytes(QM_DTYPE_F32, 3), 12);
    assert_int_equal(qr_dtype_row_bytes(QM_DTYPE_F32, SIZE_MAX / 2), 0);
    /* the list messages give: each row's container name, and a short buffer still ends in a NUL */
    char list[64], small[5];
    qr_dtype_list(list, sizeof list);
    for (uint32_t d = 0; d < QM_DTYPE_ID_LIMIT; d++)
        if (qr_dtype_get((qm_dtype)d)) assert_non_null(strstr(list, qm_dtype_info(d)->name));
    assert_int_equal(strlen(qr_dtype_list(small, sizeof small)), sizeof small - 1);
    free(f); free(h); free(q);
}

/* The KV cache's F16C conversion against the portable one, bit for bit: every sign, exponent and top
 * mantissa bits (19 bits), each with the low 13 bits (those binary16 drops) at 0, just below, at and just
 * above the rounding tie, and all ones; so every binade, subnormal halves, overflow to inf, Inf and NaNs.
 * Lengths 1..19 run the eight-wide loop and the scalar tail. */
static void test_f32_to_f16_f16c(void **state)
{
    (void)state;
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("f16c")) {
        printf("(the CPU lacks AVX2+F16C: the F16C conversion is not checked)\n");
        return;
    }
    static const uint32_t lows[5] = { 0, 0x0fff, 0x1000, 0x1001, 0x1fff };
    enum { N = 1 << 19 };
    float *src = malloc((size_t)N * 5 * sizeof *src);
    uint16_t *got = malloc((size_t)N * 5 * sizeof *got);
    assert_true(src && got);
    for (uint32_t hi = 0; hi < N; hi++)
        for (int l = 0; l < 5; l++) {
            uint32_t u = hi << 13 | lows[l];
            memcpy(&src[(size_t)hi * 5 + (size_t)l], &u, 4);
        }
    qr_ops_f32_to_f16_f16c(src, got, (size_t)N * 5);
    for (size_t i = 0; i < (size_t)N * 5; i++) {
        uint16_t want = qm_f32_to_f16(src[i]);
        if (got[i] != want) {
            uint32_t u;
            memcpy(&u, &src[i], 4);
            fail_msg("f32 bits 0x%08x: F16C gives 0x%04x, the portable conversion 0x%04x", u, got[i], want);
        }
    }
    for (size_t n = 1; n < 20; n++) {
        uint16_t out[20];
        memset(out, 0xee, sizeof out);
        qr_ops_f32_to_f16_f16c(src + 1000 * n + 3, out, n);
        for (size_t i = 0; i < n; i++) assert_int_equal(out[i], qm_f32_to_f16(src[1000 * n + 3 + i]));
        assert_int_equal(out[n], 0xeeee);
    }
    free(src);
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_actfn_names),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_add_scale_bias),
        cmocka_unit_test(test_rope_freqs),
        cmocka_unit_test(test_rope_half),
        cmocka_unit_test(test_matrix_row),
        cmocka_unit_test(test_f32_to_f16_f16c),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
