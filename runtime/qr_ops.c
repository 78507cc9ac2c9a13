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

void qr_layernorm(float *y, const float *x, const float *w, const float *b, size_t d, float eps)
{
    /* torch: mean, then the biased variance of (x - mean) — two passes, as the one-pass E[x²] − mean²
     * loses every digit when |mean| dominates the spread */
    double sum = 0.0;
    for (size_t i = 0; i < d; i++) sum += x[i];
    double mean = sum / (double)d;
    double ss = 0.0;
    for (size_t i = 0; i < d; i++) {
        double t = (double)x[i] - mean;
        ss += t * t;
    }
    double rstd = 1.0 / sqrt(ss / (double)d + (double)eps);
    for (size_t i = 0; i < d; i++) {
        double t = ((double)x[i] - mean) * rstd * (double)w[i];
        y[i] = (float)(b ? t + (double)b[i] : t);
    }
}

void qr_rmsnorm(float *y, const float *x, const float *w, size_t d, float eps)
{
    double ss = 0.0;
    for (size_t i = 0; i < d; i++) ss += (double)x[i] * (double)x[i];
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

/* 1/(1+e^-x) with expf: for x < -88, e^-x is +inf and the result a correct 0; for large x, 1. */
static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static inline float gelu_tanh(float x)
{
    const float k = 0.7978845608028654f;   /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

static inline float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

void qr_activate(qr_actfn f, float *x, size_t n)
{
    switch (f) {
    case QR_ACTFN_RELU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case QR_ACTFN_GELU_TANH:
        for (size_t i = 0; i < n; i++) x[i] = gelu_tanh(x[i]);
        break;
    case QR_ACTFN_GELU_ERF:
        for (size_t i = 0; i < n; i++) x[i] = gelu_erf(x[i]);
        break;
    case QR_ACTFN_SILU:
        for (size_t i = 0; i < n; i++) x[i] = x[i] * sigmoidf(x[i]);
        break;
    case QR_ACTFN_TANH:
        for (size_t i = 0; i < n; i++) x[i] = tanhf(x[i]);
        break;
    case QR_ACTFN_SIGMOID:
        for (size_t i = 0; i < n; i++) x[i] = sigmoidf(x[i]);
        break;
    case QR_ACTFN_IDENTITY:
    default:
        break;
    }
}

void qr_swiglu(float *gate, const float *up, size_t n)
{
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
