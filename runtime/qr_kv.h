/* qr_kv.h — one layer of the KV cache: the keys and values of every position a layer's attention can still
 * see, stored as F16 (the default: half the memory and half the bytes attention reads) or F32.
 *
 * Layout: position p lives in slot p % cap, so a layer with a window keeps only the slots its attention can
 * reach (a ring buffer when cap < n_ctx) and a layer without one has cap = n_ctx (slot = position). Slots
 * are grouped by QR_KV_GROUP (16), and each head has cap16 = cap rounded up to a multiple of 16 of them:
 *   V: [n_kv_heads][cap16][head_dim] — a row per slot, as the weighted sum reads it;
 *   K: [n_kv_heads][cap16 / 16][head_dim][16] — each group of 16 slots transposed, so the scores put 16 keys
 *      across a vector's lanes (no lane sums per key, and a key element converted from F16 once serves every
 *      query row of a block): key element d of slot s at ((s / 16)·head_dim + d)·16 + s % 16.
 *
 * Ownership: the caller allocates K and V (qr_kv_bytes each, any alignment of the element type) and keeps
 * them alive as long as the layer; the struct only points at them. No allocation, no state besides the
 * caller's memory, no threads.
 */
#ifndef QR_KV_H
#define QR_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum qr_kv_type { QR_KV_F16 = 0, QR_KV_F32 = 1 } qr_kv_type;

typedef struct qr_kv_layer {
    qr_kv_type type;
    uint32_t n_kv_heads, head_dim;
    uint32_t cap;        /* slots per head: position p is slot p % cap */
    uint32_t window;     /* 0: full causal attention; else a query at p sees keys j with p - j < window */
    void *k, *v;         /* as the layout above says, of uint16_t (F16 bits) or float */
    bool f16c;           /* F16 stores convert with F16C (chosen at init: the CPU has it, QMAP_CPU allows AVX2) */
} qr_kv_layer;

/* Slots a layer needs. window == 0 (full causal attention): n_ctx. Otherwise min(n_ctx, window + n_batch - 1):
 * a batch stores all its keys before its queries attend, so the ring must still hold the oldest key the
 * first query of the batch sees. n_batch is the most positions one qr_kv_store + qr_attn_causal pair
 * handles (0 counts as 1). Never more than n_ctx. */
uint32_t qr_kv_capacity(uint32_t n_ctx, uint32_t window, uint32_t n_batch);
#define QR_KV_GROUP 16
/* Slots a head holds: cap rounded up to a multiple of QR_KV_GROUP (as a 64-bit count: no wrap). */
static inline uint64_t qr_kv_slots(uint32_t cap)
{
    return ((uint64_t)cap + QR_KV_GROUP - 1) / QR_KV_GROUP * QR_KV_GROUP;
}
/* Bytes of K (V the same) for that shape, qr_kv_slots(cap) slots a head; SIZE_MAX if the product overflows. */
size_t qr_kv_bytes(qr_kv_type type, uint32_t n_kv_heads, uint32_t head_dim, uint32_t cap);
/* Fill *l (k_mem and v_mem of qr_kv_bytes each, owned by the caller). Writes nothing into the memory. */
void qr_kv_layer_init(qr_kv_layer *l, qr_kv_type type, uint32_t n_kv_heads, uint32_t head_dim, uint32_t cap,
                      uint32_t window, void *k_mem, void *v_mem);
/* Store the K and V rows (n_kv_heads*head_dim floats each, head-major as the projections produce them) of
 * n positions pos0..pos0+n-1; row i at k + i*ldk and v + i*ldv. F16 rounds to nearest even
 * (format/qm_half.h). n <= cap (a larger n would overwrite its own first rows). */
void qr_kv_store(qr_kv_layer *l, uint32_t pos0, size_t n, const float *k, size_t ldk, const float *v, size_t ldv);

/* Bytes of K and V that causal attention over this layer reads for the queries at positions pos0 ..
 * pos0+n-1 (n >= 1): every position one of them sees (the window's last `window` before and at it, or all
 * from 0), once, for every KV head — a decode step's cache traffic, as benchmarks count it. */
uint64_t qr_kv_attended_bytes(const qr_kv_layer *l, uint32_t pos0, size_t n);

/* Make dst hold what src holds for positions 0..n_pos-1 (only the last cap of them, as the ring keeps):
 * a beam search copies the cache of the hypothesis a beam continues. Same type, heads, head_dim and cap;
 * dst and src do not overlap. */
void qr_kv_copy(qr_kv_layer *dst, const qr_kv_layer *src, uint32_t n_pos);

/* The stored key / value of position p, head g as float (head_dim values); for tests and debugging. */
void qr_kv_read(const qr_kv_layer *l, uint32_t p, uint32_t g, float *k_out, float *v_out);

#endif /* QR_KV_H */
