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
    /* three 32-bit factors and the element size: check each product against SIZE_MAX */
    size_t e = elem_bytes(type), n = n_kv_heads;
    if (head_dim && n > SIZE_MAX / head_dim) return SIZE_MAX;
    n *= head_dim;
    if (cap && n > SIZE_MAX / cap) return SIZE_MAX;
    n *= cap;
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

static void store_row(const qr_kv_layer *l, void *dst_base, uint32_t slot, const float *src)
{
    size_t hd = l->head_dim;
    for (uint32_t g = 0; g < l->n_kv_heads; g++) {
        size_t off = ((size_t)g * l->cap + slot) * hd;
        const float *s = src + (size_t)g * hd;
        if (l->type == QR_KV_F32) {
            memcpy((float *)dst_base + off, s, hd * sizeof(float));
        } else {
            uint16_t *d = (uint16_t *)dst_base + off;
            if (l->f16c) qr_ops_f32_to_f16_f16c(s, d, hd);   /* 2% of a small model's decode, done scalar */
            else for (size_t i = 0; i < hd; i++) d[i] = qm_f32_to_f16(s[i]);
        }
    }
}

void qr_kv_store(qr_kv_layer *l, uint32_t pos0, size_t n, const float *k, size_t ldk, const float *v, size_t ldv)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t slot = (uint32_t)(((uint64_t)pos0 + i) % l->cap);
        store_row(l, l->k, slot, k + i * ldk);
        store_row(l, l->v, slot, v + i * ldv);
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
            size_t off = (((size_t)g * src->cap + slot) * hd) * esz, len = (size_t)run * hd * esz;
            memcpy((char *)dst->k + off, (const char *)src->k + off, len);
            memcpy((char *)dst->v + off, (const char *)src->v + off, len);
            x += run;
        }
    }
}

void qr_kv_read(const qr_kv_layer *l, uint32_t p, uint32_t g, float *k_out, float *v_out)
{
    size_t hd = l->head_dim, off = ((size_t)g * l->cap + p % l->cap) * hd;
    for (size_t i = 0; i < hd; i++) {
        if (l->type == QR_KV_F32) {
            k_out[i] = ((const float *)l->k)[off + i];
            v_out[i] = ((const float *)l->v)[off + i];
        } else {
            k_out[i] = qm_f16_to_f32(((const uint16_t *)l->k)[off + i]);
            v_out[i] = qm_f16_to_f32(((const uint16_t *)l->v)[off + i]);
        }
    }
}
