/* qr_ops.c — norms, activations, softmax and rotary positions (contract in qr_ops.h).
 *
 * Reductions accumulate in double: a row is at most a few thousand values, so the cost is nothing next to
 * the matmuls around it, and the result is then within a few float roundings of the exact one whatever
 * the row length (tests/unit/test_ops.c holds each op to a double reference). Elementwise loops are kept
 * simple enough for -O3 to vectorise.
 */
#include "qr_ops.h"

#include <math.h>
#include <string.h>

#include "qm_cpu.h"
#include "qr_ops_simd.h"

/* The exponential-based activations have AVX2 versions (qr_ops_avx2.c); the others are plain loops. */
static bool use_avx2(void)
{
    return qm_cpu_level_get() >= QM_CPU_AVX2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* Σ (x_i − c) or Σ (x_i − c)² in double, four partial sums: the add latency, not the loads, bounds a single
 * chain of dependent double adds. */
static double sum_d(const float *x, size_t n, double c, bool square)
{
    double a[4] = { 0, 0, 0, 0 };
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int l = 0; l < 4; l++) {
            double t = (double)x[i + l] - c;
            a[l] += square ? t * t : t;
        }
    for (; i < n; i++) {
        double t = (double)x[i] - c;
        a[0] += square ? t * t : t;
    }
    return (a[0] + a[1]) + (a[2] + a[3]);
}

void qr_layernorm(float *y, const float *x, const float *w, const float *b, size_t d, float eps)
{
    /* torch: mean, then the biased variance of (x - mean) — two passes, as the one-pass E[x²] − mean²
     * loses every digit when |mean| dominates the spread */
    double sum = sum_d(x, d, 0.0, false);
    double mean = sum / (double)d;
    double ss = sum_d(x, d, mean, true);
    double rstd = 1.0 / sqrt(ss / (double)d + (double)eps);
    for (size_t i = 0; i < d; i++) {
        double t = ((double)x[i] - mean) * rstd * (double)w[i];
        y[i] = (float)(b ? t + (double)b[i] : t);
    }
}

void qr_rmsnorm(float *y, const float *x, const float *w, size_t d, float eps)
{
    double ss = sum_d(x, d, 0.0, true);
    /* HF: hidden_states * torch.rsqrt(variance + eps), then weight * that, in float32 */
    float r = (float)(1.0 / sqrt(ss / (double)d + (double)eps));
    for (size_t i = 0; i < d; i++) y[i] = w[i] * (x[i] * r);
}

static const struct { const char *name; qr_actfn f; } act_names[] = {
    { "identity", QR_ACTFN_IDENTITY }, { "linear", QR_ACTFN_IDENTITY },
    { "relu", QR_ACTFN_RELU },
    { "gelu_new", QR_ACTFN_GELU_TANH }, { "gelu_pytorch_tanh", QR_ACTFN_GELU_TANH }, { "gelu_fast", QR_ACTFN_GELU_TANH },
    { "gelu", QR_ACTFN_GELU_ERF },
    { "silu", QR_ACTFN_SILU }, { "swish", QR_ACTFN_SILU },
    { "tanh", QR_ACTFN_TANH },
    { "sigmoid", QR_ACTFN_SIGMOID },
};

bool qr_actfn_from_name(const char *name, size_t len, qr_actfn *out)
{
    if (!name) return false;
    for (size_t i = 0; i < sizeof act_names / sizeof act_names[0]; i++) {
        if (strlen(act_names[i].name) == len && memcmp(act_names[i].name, name, len) == 0) {
            *out = act_names[i].f;
            return true;
        }
    }
    return false;
}

const char *qr_actfn_name(qr_actfn f)
{
    /* the first name of each function in the table is its canonical one, except GELU_TANH's HF name */
    switch (f) {
    case QR_ACTFN_IDENTITY: return "identity";
    case QR_ACTFN_RELU: return "relu";
    case QR_ACTFN_GELU_TANH: return "gelu_new";
    case QR_ACTFN_GELU_ERF: return "gelu";
    case QR_ACTFN_SILU: return "silu";
    case QR_ACTFN_TANH: return "tanh";
    case QR_ACTFN_SIGMOID: return "sigmoid";
    }
    return "unknown";
}

/* 1/(1 + e) for x >= 0, e/(1 + e) for x < 0, with e = e^-|x| in (0, 1]: no overflow, and full relative
 * accuracy for very negative x. */
static inline float sigmoidf(float x)
{
    float e = expf(-fabsf(x));
    return (x < 0.0f ? e : 1.0f) / (1.0f + e);
}

/* 0.5·x·(1 + tanh(u)) = x·sigmoid(2u), u = √(2/π)·(x + 0.044715·x³): the same function without the
 * cancellation of 1 + tanh(u) for negative x (and an exp instead of a tanh). */
static inline float gelu_tanh(float x)
{
    const float k2 = 2.0f * 0.7978845608028654f;
    return x * sigmoidf(k2 * (x + 0.044715f * x * x * x));
}

static inline float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

void qr_activate(qr_actfn f, float *x, size_t n)
{
    switch (f) {
    case QR_ACTFN_RELU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case QR_ACTFN_GELU_TANH:
        if (use_avx2()) { qr_ops_gelu_tanh_avx2(x, n); break; }
        for (size_t i = 0; i < n; i++) x[i] = gelu_tanh(x[i]);
        break;
    case QR_ACTFN_GELU_ERF:
        for (size_t i = 0; i < n; i++) x[i] = gelu_erf(x[i]);
        break;
    case QR_ACTFN_SILU:
        if (use_avx2()) { qr_ops_silu_avx2(x, n); break; }
        for (size_t i = 0; i < n; i++) x[i] = x[i] * sigmoidf(x[i]);
        break;
    case QR_ACTFN_TANH:
        for (size_t i = 0; i < n; i++) x[i] = tanhf(x[i]);
        break;
    case QR_ACTFN_SIGMOID:
        if (use_avx2()) { qr_ops_sigmoid_avx2(x, n); break; }
        for (size_t i = 0; i < n; i++) x[i] = sigmoidf(x[i]);
        break;
    case QR_ACTFN_IDENTITY:
    default:
        break;
    }
}

void qr_swiglu(float *gate, const float *up, size_t n)
{
    if (use_avx2()) {
        qr_ops_swiglu_avx2(gate, up, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g * sigmoidf(g) * up[i];
    }
}

void qr_softmax(float *x, size_t n)
{
    float m = -INFINITY;
    for (size_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    /* all -inf, or a +inf present: x - m is NaN somewhere and the row comes out NaN, as torch's does */
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        float e = expf(x[i] - m);
        x[i] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (size_t i = 0; i < n; i++) x[i] *= inv;
}

void qr_add(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void qr_add_bias_rows(float *y, size_t ldy, size_t n_rows, const float *b, size_t d)
{
    for (size_t r = 0; r < n_rows; r++) {
        float *row = y + r * ldy;
        for (size_t j = 0; j < d; j++) row[j] += b[j];
    }
}

void qr_scale(float *x, float s, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void qr_rope_freqs(float *inv_freq, size_t head_dim, float theta)
{
    /* HF: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)): the exponent a float32 quotient, the
     * power a float32 result (computed in double and rounded once: correctly rounded in all but rare
     * ties), the reciprocal a float32 division. */
    for (size_t j = 0; j < head_dim / 2; j++) {
        float e = (float)(2 * j) / (float)head_dim;
        float p = (float)pow((double)theta, (double)e);
        inv_freq[j] = 1.0f / p;
    }
}

void qr_rope_half(float *x, size_t n_heads, size_t head_dim, uint32_t pos, const float *inv_freq)
{
    size_t half = head_dim / 2;
    for (size_t j = 0; j < half; j++) {
        float a = (float)pos * inv_freq[j];          /* float32 product, as HF's position·inv_freq */
        float c = (float)cos((double)a), s = (float)sin((double)a);
        for (size_t h = 0; h < n_heads; h++) {
            float *xh = x + h * head_dim;
            float x0 = xh[j], x1 = xh[j + half];
            /* q*cos + rotate_half(q)*sin, rotate_half(q) = cat(-q[half:], q[:half]) */
            xh[j] = x0 * c - x1 * s;
            xh[j + half] = x1 * c + x0 * s;
        }
    }
}
