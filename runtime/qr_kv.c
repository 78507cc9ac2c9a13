/* qr_kv.c — KV cache layer: sizes, ring-buffer slots, stores (contract in qr_kv.h). */
#include "qr_kv.h"

#include <string.h>

#include "qm_cpu.h"
#include "qm_half.h"
#include "qr_ops_simd.h"

uint32_t qr_kv_capacity(uint32_t n_ctx, uint32_t window, uint32_t n_batch)
{
    if (window == 0) return n_ctx;
    if (n_batch == 0) n_batch = 1;
    uint64_t need = (uint64_t)window + n_batch - 1;    /* no wrap in 64 bits */
    return need < n_ctx ? (uint32_t)need : n_ctx;
}

static size_t elem_bytes(qr_kv_type type) { return type == QR_KV_F32 ? 4 : 2; }

size_t qr_kv_bytes(qr_kv_type type, uint32_t n_kv_heads, uint32_t head_dim, uint32_t cap)
{
    /* three factors and the element size: check each product against SIZE_MAX */
    const uint64_t slots = qr_kv_slots(cap);
    size_t e = elem_bytes(type), n = n_kv_heads;
    if (head_dim && n > SIZE_MAX / head_dim) return SIZE_MAX;
    n *= head_dim;
    if (slots > SIZE_MAX || (slots && n > SIZE_MAX / (size_t)slots)) return SIZE_MAX;
    n *= (size_t)slots;
    if (n > SIZE_MAX / e) return SIZE_MAX;
    return n * e;
}

uint64_t qr_kv_attended_bytes(const qr_kv_layer *l, uint32_t pos0, size_t n)
{
    if (n == 0) return 0;
    /* the first query sees from pos0 - window + 1 (or 0), the last up to pos0 + n - 1 */
    const uint64_t last = (uint64_t)pos0 + n - 1;
    const uint64_t first = l->window && (uint64_t)pos0 + 1 > l->window ? (uint64_t)pos0 + 1 - l->window : 0;
    return (last - first + 1) * 2u * l->n_kv_heads * l->head_dim * elem_bytes(l->type);
}

void qr_kv_layer_init(qr_kv_layer *l, qr_kv_type type, uint32_t n_kv_heads, uint32_t head_dim, uint32_t cap,
                      uint32_t window, void *k_mem, void *v_mem)
{
    l->type = type;
    l->n_kv_heads = n_kv_heads;
    l->head_dim = head_dim;
    l->cap = cap;
    l->window = window;
    l->k = k_mem;
    l->v = v_mem;
    l->f16c = qm_cpu_level_get() >= QM_CPU_AVX2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}

/* Element offsets of slot `slot`, head g: its V row, and its key element 0 (element d at + d·QR_KV_GROUP). */
static size_t v_offset(const qr_kv_layer *l, uint32_t g, uint32_t slot)
{
    return ((size_t)g * (size_t)qr_kv_slots(l->cap) + slot) * l->head_dim;
}
static size_t k_offset(const qr_kv_layer *l, uint32_t g, uint32_t slot)
{
    return ((size_t)g * (size_t)qr_kv_slots(l->cap) + (size_t)slot / QR_KV_GROUP * QR_KV_GROUP) * l->head_dim +
           slot % QR_KV_GROUP;
}

/* F16 bits of n floats (F16C when the layer may use it). */
static void to_f16(const qr_kv_layer *l, const float *s, uint16_t *d, size_t n)
{
    if (l->f16c) qr_ops_f32_to_f16_f16c(s, d, n);   /* 2% of a small model's decode, done scalar */
    else for (size_t i = 0; i < n; i++) d[i] = qm_f32_to_f16(s[i]);
}

/* One position's K (every head: n_kv_heads·head_dim floats) into its slot, each head's row spread over the
 * slot's lane of its group. */
static void store_k(const qr_kv_layer *l, uint32_t slot, const float *src)
{
    const size_t hd = l->head_dim;
    for (uint32_t g = 0; g < l->n_kv_heads; g++) {
        const size_t off = k_offset(l, g, slot);
        const float *s = src + (size_t)g * hd;
        if (l->type == QR_KV_F32) {
            float *d = (float *)l->k + off;
            for (size_t i = 0; i < hd; i++) d[i * QR_KV_GROUP] = s[i];
        } else {
            uint16_t h[64], *d = (uint16_t *)l->k + off;
            for (size_t i0 = 0; i0 < hd; i0 += 64) {   /* converted 64 at a time, then spread */
                const size_t m = hd - i0 < 64 ? hd - i0 : 64;
                to_f16(l, s + i0, h, m);
                for (size_t i = 0; i < m; i++) d[(i0 + i) * QR_KV_GROUP] = h[i];
            }
        }
    }
}

static void store_v(const qr_kv_layer *l, uint32_t slot, const float *src)
{
    const size_t hd = l->head_dim;
    for (uint32_t g = 0; g < l->n_kv_heads; g++) {
        const size_t off = v_offset(l, g, slot);
        const float *s = src + (size_t)g * hd;
        if (l->type == QR_KV_F32) memcpy((float *)l->v + off, s, hd * sizeof(float));
        else to_f16(l, s, (uint16_t *)l->v + off, hd);
    }
}

void qr_kv_store(qr_kv_layer *l, uint32_t pos0, size_t n, const float *k, size_t ldk, const float *v, size_t ldv)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t slot = (uint32_t)(((uint64_t)pos0 + i) % l->cap);
        store_k(l, slot, k + i * ldk);
        store_v(l, slot, v + i * ldv);
    }
}

void qr_kv_copy(qr_kv_layer *dst, const qr_kv_layer *src, uint32_t n_pos)
{
    const size_t esz = elem_bytes(src->type), hd = src->head_dim;
    uint32_t first = n_pos > src->cap ? n_pos - src->cap : 0;
    /* the slots of positions first..n_pos-1: one run, or two when the ring wraps */
    for (uint32_t g = 0; g < src->n_kv_heads; g++) {
        for (uint32_t x = first; x < n_pos;) {
            uint32_t slot = x % src->cap, run = n_pos - x;
            if (run > src->cap - slot) run = src->cap - slot;
            size_t off = v_offset(src, g, slot) * esz, len = (size_t)run * hd * esz;
            memcpy((char *)dst->v + off, (const char *)src->v + off, len);
            for (uint32_t s = slot; s < slot + run;) {   /* K: whole groups at once, the lanes of a partial one */
                if (s % QR_KV_GROUP == 0 && slot + run - s >= QR_KV_GROUP) {
                    size_t ko = k_offset(src, g, s) * esz;
                    memcpy((char *)dst->k + ko, (const char *)src->k + ko, hd * QR_KV_GROUP * esz);
                    s += QR_KV_GROUP;
                } else {
                    const size_t k0 = k_offset(src, g, s);
                    for (size_t d = 0; d < hd; d++) {
                        const size_t ko = (k0 + d * QR_KV_GROUP) * esz;
                        memcpy((char *)dst->k + ko, (const char *)src->k + ko, esz);
                    }
                    s++;
                }
            }
            x += run;
        }
    }
}

void qr_kv_read(const qr_kv_layer *l, uint32_t p, uint32_t g, float *k_out, float *v_out)
{
    const size_t hd = l->head_dim;
    const uint32_t slot = p % l->cap;
    const size_t ko = k_offset(l, g, slot), vo = v_offset(l, g, slot);
    for (size_t i = 0; i < hd; i++) {
        if (l->type == QR_KV_F32) {
            k_out[i] = ((const float *)l->k)[ko + i * QR_KV_GROUP];
            v_out[i] = ((const float *)l->v)[vo + i];
        } else {
            k_out[i] = qm_f16_to_f32(((const uint16_t *)l->k)[ko + i * QR_KV_GROUP]);
            v_out[i] = qm_f16_to_f32(((const uint16_t *)l->v)[vo + i]);
        }
    }
}
