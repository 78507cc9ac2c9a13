/* qr_attn.h — the only attention code: query rows against a KV cache layer (runtime/qr_kv.h).
 *
 * Causal self-attention with grouped-query heads, an optional window (HF Mistral's sliding window and
 * GPT-Neo's local layers), a free score scale (1/√head_dim, or 1 for GPT-Neo); F16 or F32 keys/values.
 * Query rows that share a KV head (the heads of a GQA group, or several positions of one head) run as one
 * block, so each key and value row read serves all of them; keys are walked in tiles of 64 positions with
 * an online softmax. The blocks of a call are spread over a thread pool (runtime/qr_pool.h), one job per call.
 *
 * Ownership: the caller owns q, out, the cache and the scratch (qr_attn_scratch_floats floats, sized once
 * per session). No allocation, no state. A row's result depends only on its query and the keys and values
 * it sees: not on the thread count, nor on the other rows of the call (the same token evaluated in a batch
 * or alone gives the same bits). It may differ in the last bits between QMAP_CPU levels (the AVX2 + FMA
 * + F16C loops of qr_attn_avx2.c against the portable ones). Accuracy: tests/unit/test_attn.c holds every
 * output to an f64 reference within a bound derived there (float dot products, exp within 2 ulp, F16
 * rounding of the cache).
 */
#ifndef QR_ATTN_H
#define QR_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "qr_kv.h"
#include "qr_pool.h"

typedef struct qr_attn_shape {
    uint32_t n_heads, n_kv_heads, head_dim;   /* n_heads a multiple of n_kv_heads; head_dim as the cache's */
    float scale;                               /* scores = scale·q·k: 1/sqrt(head_dim) normally, 1 for GPT-Neo */
    float softcap;                             /* > 0: scores = softcap·tanh(scores / softcap) (Gemma 2); 0: none */
} qr_attn_shape;

/* Floats of scratch qr_attn_causal needs for a pool of `threads` threads (qr_pool_threads; <= 0 counts as
 * 1): one tile of scores per thread (8 rows × 64 keys), whatever the context length. */
size_t qr_attn_scratch_floats(const qr_kv_layer *kv, int threads);

/* For each query row i < n_q at position p = pos0 + i (q row i at q + i*ldq, n_heads*head_dim floats; out
 * row i at out + i*ldo, the same layout): head h attends over kv head h / (n_heads / n_kv_heads), keys j
 * with j <= p and, when kv->window > 0, p - j < window; scores scale·q·k, softmax, weighted sum of V.
 * The K/V of every needed position (including pos0..pos0+n_q-1) must already be stored and still in the
 * ring: kv->cap >= n_q + window - 1 for a windowed layer (qr_kv_capacity), cap >= pos0 + n_q otherwise.
 * out must not overlap q or the cache. pool: the threads to spread the blocks over (NULL: the calling
 * thread), one job for the whole call (over heads x queries), the calling thread alone when the work is
 * small; scratch sized for its thread count. */
void qr_attn_causal(const qr_attn_shape *s, const qr_kv_layer *kv, uint32_t pos0, size_t n_q, const float *q,
                    size_t ldq, float *out, size_t ldo, float *scratch, qr_pool *pool);

/* Floats of scratch qr_attn_full needs for a pool of `threads` threads. */
size_t qr_attn_full_scratch_floats(int threads);

/* Attention without a mask or a cache — an encoder's self-attention, and a decoder's cross-attention over
 * the encoder's keys and values: each of n_q query rows (q + i*ldq, n_heads*head_dim floats) attends over
 * all n_k >= 1 key and value rows given as float32 (k + j*ldk and v + j*ldv, n_kv_heads*head_dim floats
 * each, head g at offset g*head_dim: as the K and V projections leave them); head h reads kv head
 * h / (n_heads / n_kv_heads); out row i at out + i*ldo. n_k < 2^32. Same blocks, tiles, threads and
 * determinism as qr_attn_causal. */
void qr_attn_full(const qr_attn_shape *s, size_t n_q, const float *q, size_t ldq, size_t n_k, const float *k,
                  size_t ldk, const float *v, size_t ldv, float *out, size_t ldo, float *scratch, qr_pool *pool);

#endif /* QR_ATTN_H */
