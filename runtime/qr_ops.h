/* qr_ops.h — elementwise and per-row operations on float32 arrays: the arithmetic every model family
 * shares (norms, activations, softmax, rotary positions), written once.
 *
 * Contract: pure functions over caller-owned arrays; no allocation, no state, no threads (the families
 * call them between the matmuls that carry the work; qr_rows.h splits a batch of rows between a pool's
 * threads). Every output may alias its input (y == x)
 * and is computed in place when it does; partial overlaps other than y == x are not allowed.
 * Accuracy: each op is held to a double-precision reference written from the math in
 * tests/unit/test_ops.c; reductions (sums of squares, softmax denominators) accumulate in double, so a
 * row of any length is within a few float roundings of the exact result.
 * Non-finite inputs propagate as IEEE arithmetic does (a NaN in a row makes that row's norm NaN).
 * Sigmoid, SiLU, tanh-GELU and SwiGLU run through AVX2 versions (qr_ops_avx2.c) when the CPU has AVX2 + FMA
 * and QMAP_CPU allows; the last bits may then differ from the portable loops, both within the tests' bounds.
 */
#ifndef QR_OPS_H
#define QR_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* torch.nn.LayerNorm over d values: (x - mean) / sqrt(var + eps) * w + b, var the biased variance
 * (divided by d). b may be NULL (no bias). d >= 1. */
void qr_layernorm(float *y, const float *x, const float *w, const float *b, size_t d, float eps);
/* HF LlamaRMSNorm: x * rsqrt(mean(x^2) + eps) * w. d >= 1. */
void qr_rmsnorm(float *y, const float *x, const float *w, size_t d, float eps);

typedef enum qr_actfn {
    QR_ACTFN_IDENTITY = 0,
    QR_ACTFN_RELU,
    QR_ACTFN_GELU_TANH,   /* 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): HF gelu_new / gelu_pytorch_tanh */
    QR_ACTFN_GELU_ERF,    /* 0.5·x·(1 + erf(x/√2)): torch's exact GELU, HF "gelu" */
    QR_ACTFN_SILU,        /* x·sigmoid(x) */
    QR_ACTFN_TANH,
    QR_ACTFN_SIGMOID,
} qr_actfn;

/* HF/torch activation names -> qr_actfn: "relu"; "gelu_new", "gelu_pytorch_tanh", "gelu_fast" -> GELU_TANH;
 * "gelu" -> GELU_ERF; "silu", "swish" -> SILU; "tanh"; "sigmoid"; "identity", "linear" -> IDENTITY.
 * `name` is `len` bytes, not NUL-terminated (a metadata string in the mapping). False if unknown (*out
 * untouched). */
bool qr_actfn_from_name(const char *name, size_t len, qr_actfn *out);
/* The canonical name of f ("gelu_new" for GELU_TANH, "gelu" for GELU_ERF, ...), for messages. */
const char *qr_actfn_name(qr_actfn f);
/* x[i] = f(x[i]) for i < n. An unknown f leaves x as it is (identity). */
void qr_activate(qr_actfn f, float *x, size_t n);
/* gate[i] = silu(gate[i]) * up[i] (SwiGLU: HF LlamaMLP's act_fn(gate_proj(x)) * up_proj(x)). */
void qr_swiglu(float *gate, const float *up, size_t n);
/* softmax in place: x[i] = exp(x[i] - max) / Σ exp(x[j] - max). n >= 1. -inf entries get 0 (an all -inf
 * row gives NaN, as torch does). */
void qr_softmax(float *x, size_t n);
/* y[i] += x[i]. */
void qr_add(float *y, const float *x, size_t n);
/* y[i·ldy + j] += b[j] for i < n_rows, j < d (a bias on every row of a batch). */
void qr_add_bias_rows(float *y, size_t ldy, size_t n_rows, const float *b, size_t d);
/* x[i] *= s. */
void qr_scale(float *x, float s, size_t n);

/* Rotary embedding frequencies as HF's LlamaRotaryEmbedding computes them in float32:
 * inv_freq[j] = 1 / theta^((float)(2j) / (float)head_dim), j < head_dim/2. head_dim even, >= 2. */
void qr_rope_freqs(float *inv_freq, size_t head_dim, float theta);
/* HF "rotate half" RoPE on one row of n_heads heads of head_dim floats, at position pos, in place: for each
 * head and j < head_dim/2, with a = (float)pos·inv_freq[j] (a float32 product, as HF's matmul of positions
 * by inv_freq), c = cos(a), s = sin(a) (computed in double, rounded to float, as torch's float32 cos/sin
 * within an ulp):
 *   x'[j] = x[j]·c − x[j + head_dim/2]·s,   x'[j + head_dim/2] = x[j + head_dim/2]·c + x[j]·s. */
void qr_rope_half(float *x, size_t n_heads, size_t head_dim, uint32_t pos, const float *inv_freq);

#endif /* QR_OPS_H */
