/* qr_attn.c — causal attention over a KV cache layer (contract in qr_attn.h).
 *
 * One (head, query) pair at a time: scores = scale·q·k over the keys the query sees, a max-subtracted
 * softmax, then out = Σ p_j·v_j. The pairs of a call are split between threads in one parallel region;
 * each pair's row is computed by one thread in a fixed order, so the thread count never changes a bit.
 * The inner loops (dot, axpy; F32 or F16 rows) come from a small per-ISA table (qr_attn_kernels.h).
 */
#include "qr_attn.h"

#include <math.h>
#include <stdbool.h>
#include <omp.h>
#include <string.h>

#include "qm_cpu.h"
#include "qm_half.h"
#include "qr_attn_kernels.h"

/* ---- portable inner loops ---------------------------------------------------------------------------- */

/* Eight partial sums: the same association whatever the compiler does with them, and room to vectorise. */
static float dot_f32_ref(const float *q, const float *k, size_t n)
{
    float a[8] = { 0 };
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) a[l] += q[i + l] * k[i + l];
    float s = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
    for (; i < n; i++) s += q[i] * k[i];
    return s;
}

static float dot_f16_ref(const float *q, const uint16_t *k, size_t n)
{
    float a[8] = { 0 };
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) a[l] += q[i + l] * qm_f16_to_f32(k[i + l]);
    float s = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
    for (; i < n; i++) s += q[i] * qm_f16_to_f32(k[i]);
    return s;
}

static void axpy_f32_ref(float *y, float a, const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] += a * v[i];
}

static void axpy_f16_ref(float *y, float a, const uint16_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] += a * qm_f16_to_f32(v[i]);
}

static const qr_attn_kernels kernels_ref = { dot_f32_ref, dot_f16_ref, axpy_f32_ref, axpy_f16_ref };

static const qr_attn_kernels *pick_kernels(void)
{
    if (qm_cpu_level_get() >= QM_CPU_AVX2 && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return &qr_attn_kernels_avx2;
    return &kernels_ref;
}

/* ---- attention ---------------------------------------------------------------------------------------- */

static int resolve_threads(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

size_t qr_attn_scratch_floats(const qr_kv_layer *kv, int threads)
{
    return (size_t)resolve_threads(threads) * kv->cap;
}

/* Below this many multiply-adds a parallel region costs more than it saves. */
#define QR_ATTN_PARALLEL_MIN ((uint64_t)1 << 16)

/* Head h of query row at position p: out_h = softmax(scale·q_h·K_gᵀ)·V_g over keys lo..p. */
static void attend_one(const qr_attn_kernels *kr, const qr_attn_shape *s, const qr_kv_layer *kv, uint32_t p,
                       const float *qh, float *oh, uint32_t g, float *sc)
{
    const size_t hd = s->head_dim, cap = kv->cap;
    const uint32_t lo = (kv->window > 0 && p >= kv->window) ? p - kv->window + 1 : 0;
    const size_t nk = (size_t)(p - lo) + 1;
    const size_t head_off = (size_t)g * cap * hd;
    const bool f16 = kv->type == QR_KV_F16;
    const uint16_t *k16 = (const uint16_t *)kv->k + head_off, *v16 = (const uint16_t *)kv->v + head_off;
    const float *k32 = (const float *)kv->k + head_off, *v32 = (const float *)kv->v + head_off;

    float m = -INFINITY;
    for (size_t t = 0; t < nk; t++) {
        size_t slot = ((size_t)lo + t) % cap;
        float d = f16 ? kr->dot_f16(qh, k16 + slot * hd, hd) : kr->dot_f32(qh, k32 + slot * hd, hd);
        sc[t] = s->scale * d;
        m = sc[t] > m ? sc[t] : m;
    }
    double sum = 0.0;
    for (size_t t = 0; t < nk; t++) {
        sc[t] = expf(sc[t] - m);
        sum += sc[t];
    }
    memset(oh, 0, hd * sizeof *oh);
    for (size_t t = 0; t < nk; t++) {
        size_t slot = ((size_t)lo + t) % cap;
        if (f16) kr->axpy_f16(oh, sc[t], v16 + slot * hd, hd);
        else kr->axpy_f32(oh, sc[t], v32 + slot * hd, hd);
    }
    float inv = (float)(1.0 / sum);
    for (size_t d = 0; d < hd; d++) oh[d] *= inv;
}

void qr_attn_causal(const qr_attn_shape *s, const qr_kv_layer *kv, uint32_t pos0, size_t n_q, const float *q,
                    size_t ldq, float *out, size_t ldo, float *scratch, int threads)
{
    if (n_q == 0) return;
    const qr_attn_kernels *kr = pick_kernels();
    const uint32_t group = s->n_heads / s->n_kv_heads;
    const size_t hd = s->head_dim, n_pairs = (size_t)s->n_heads * n_q;
    int nt = resolve_threads(threads);

    /* work: Σ over queries of keys seen, × heads × head_dim × 2 (scores and values) */
    uint64_t work = 0;
    for (size_t i = 0; i < n_q; i++) {
        uint32_t p = pos0 + (uint32_t)i;
        uint64_t nk = (kv->window > 0 && p >= kv->window) ? kv->window : (uint64_t)p + 1;
        work += nk;
    }
    work *= (uint64_t)s->n_heads * hd * 2;
    if (work < QR_ATTN_PARALLEL_MIN || n_pairs < 2) nt = 1;

    /* pairs t = i·n_heads + h: neighbours share a query position, so a cyclic split balances the causal
     * triangle */
#pragma omp parallel for num_threads(nt) schedule(static, 1) if (nt > 1)
    for (size_t t = 0; t < n_pairs; t++) {
        size_t i = t / s->n_heads, h = t % s->n_heads;
        float *sc = scratch + (size_t)omp_get_thread_num() * kv->cap;
        attend_one(kr, s, kv, pos0 + (uint32_t)i, q + i * ldq + h * hd, out + i * ldo + h * hd,
                   (uint32_t)(h / group), sc);
    }
}
