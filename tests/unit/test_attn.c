/* test_attn.c — the KV cache layer (runtime/qr_kv.h) and causal attention (runtime/qr_attn.h) against an
 * f64 reference that recomputes full attention from every K/V row of the sequence (the floats as the
 * projections produced them, before any F16 rounding), with the causal mask and, for a window w, the mask
 * p - j < w written here from HF's definition (GPT-Neo local layers, Mistral's sliding window).
 *
 * Cases: n_q = 1 decode steps and batches with pos0 > 0; GQA (8 heads over 2 and over 1 KV head); windows
 * whose ring (qr_kv_capacity) is smaller than the context and than the sequence, filled batch by batch with
 * batches of every size up to n_batch; F32 and F16 caches; scale 1/√d and 1 (GPT-Neo); head_dim around
 * the vector widths (1, 3, 17, 64, 128); strided q and out rows whose gaps must stay untouched; exactly
 * sized scratch (an over-run shows under ASan); threads 1 and 2 giving the same bits; the same row computed
 * in a batch and token by token giving the same bits. qr_attn_full (no mask, K/V rows given directly) against
 * the same reference with every key visible.
 *
 * Tolerance (att_tol): a score error ε_j moves each probability by at most a factor e^{±2ε} (ε = max ε_j),
 * so the output moves by (e^{2ε} − 1)·Σ_j p_j|v_j| plus the error of the values themselves, plus the float
 * sums. ε_j: the float dot product (hd + 2)·u·scale·Σ|q||k|, the roundings of s_j − max (2u·(|s_j| +
 * |max|)) and of the running rescale, and the exponential itself (within 2 ulp: 4u); F16 keys add scale·Σ|q|·(2^-11|k| + 2^-25) (round to nearest binary16: 2^-11 relative for
 * normal halves, 2^-25 absolute below). Values: F16 adds 2^-11·|v| + 2^-25 to every v. The weighted sum
 * of nk rows in float adds (nk + 4)·u·max|v|. u = 2^-24. PRNG: splitmix64 (tu_rng), fixed seeds. */
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qm_half.h"
#include "qr_attn.h"
#include "qr_attn_kernels.h"
#include "qr_kv.h"
#include "test_pools.h"

#define U 0x1.0p-24
#define GUARD 12345.0f

static float frand(uint64_t *st, float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(tu_rng(st) >> 11) * 0x1.0p-53);
}

typedef struct attn_case {
    const char *name;
    uint32_t n_heads, n_kv_heads, head_dim;
    uint32_t window, n_ctx, n_batch;
    uint32_t T;                 /* positions run */
    const uint32_t *batches;    /* sizes of the successive batches, cycled (each <= n_batch) */
    size_t n_batches;
    qr_kv_type type;
    float scale;                /* 0: 1/sqrt(head_dim) */
    uint64_t seed;
} attn_case;

/* Reference output of query position p, head h (hd values into ref[]) and its tolerance (tol[]). */
static void reference(const attn_case *c, float scale, const float *Q, const float *K, const float *V, uint32_t p,
                      uint32_t h, double *ref, double *tol)
{
    const uint32_t hd = c->head_dim, g = h / (c->n_heads / c->n_kv_heads);
    const size_t ldq = (size_t)c->n_heads * hd, ldk = (size_t)c->n_kv_heads * hd;
    const uint32_t lo = (c->window > 0 && p + 1 > c->window) ? p + 1 - c->window : 0;
    const size_t nk = p - lo + 1;
    double *s = malloc(nk * sizeof *s), *eps = malloc(nk * sizeof *eps);
    const float *q = Q + p * ldq + (size_t)h * hd;
    double m = -INFINITY, emax = 0;
    const bool f16 = c->type == QR_KV_F16;
    for (size_t t = 0; t < nk; t++) {
        const float *k = K + (lo + t) * ldk + (size_t)g * hd;
        double d = 0, a = 0, aq = 0;
        for (uint32_t i = 0; i < hd; i++) {
            d += (double)q[i] * k[i];
            a += fabs((double)q[i] * k[i]);
            aq += fabs(q[i]);
        }
        s[t] = scale * d;
        eps[t] = scale * ((hd + 2) * U * a + (f16 ? 0x1.0p-11 * a + 0x1.0p-25 * aq : 0));
        m = fmax(m, s[t]);
    }
    double sum = 0;
    for (size_t t = 0; t < nk; t++) {
        eps[t] += 2 * U * (fabs(s[t]) + fabs(m)) + 8 * U;
        emax = fmax(emax, eps[t]);
        s[t] = exp(s[t] - m);
        sum += s[t];
    }
    for (uint32_t i = 0; i < hd; i++) {
        double o = 0, pav = 0, vmax = 0;
        for (size_t t = 0; t < nk; t++) {
            double v = V[(lo + t) * ldk + (size_t)g * hd + i];
            o += s[t] / sum * v;
            pav += s[t] / sum * fabs(v);
            vmax = fmax(vmax, fabs(v));
        }
        ref[i] = o;
        tol[i] = expm1(2 * emax) * pav + (f16 ? 0x1.0p-11 * vmax + 0x1.0p-25 : 0) + (nk + 4) * U * vmax + 1e-30;
    }
    free(s);
    free(eps);
}

static void run_case(const attn_case *c)
{
    const uint32_t nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim;
    const float scale = c->scale > 0 ? c->scale : 1.0f / sqrtf((float)hd);
    const size_t qw = (size_t)nh * hd, kw = (size_t)nkv * hd;
    const size_t ldq = qw + 5, ldo = qw + 3;   /* gaps between rows: strides are honoured */
    uint64_t st = c->seed;

    float *Q = malloc(c->T * qw * sizeof *Q), *K = malloc(c->T * kw * sizeof *K), *V = malloc(c->T * kw * sizeof *V);
    for (size_t i = 0; i < c->T * qw; i++) Q[i] = frand(&st, -1.0f, 1.0f);
    for (size_t i = 0; i < c->T * kw; i++) K[i] = frand(&st, -1.0f, 1.0f);
    for (size_t i = 0; i < c->T * kw; i++) V[i] = frand(&st, -1.0f, 1.0f);

    uint32_t cap = qr_kv_capacity(c->n_ctx, c->window, c->n_batch);
    size_t kvb = qr_kv_bytes(c->type, nkv, hd, cap);
    void *kmem = malloc(kvb), *vmem = malloc(kvb);
    qr_kv_layer kv;
    qr_kv_layer_init(&kv, c->type, nkv, hd, cap, c->window, kmem, vmem);

    size_t sc1 = qr_attn_scratch_floats(&kv, 1), sc2 = qr_attn_scratch_floats(&kv, 2);
    float *scr1 = malloc(sc1 * sizeof(float)), *scr2 = malloc(sc2 * sizeof(float));
    size_t nb_max = c->n_batch;
    float *qb = malloc(nb_max * ldq * sizeof *qb), *kb = malloc(nb_max * (kw + 1) * sizeof *kb),
          *vb = malloc(nb_max * (kw + 2) * sizeof *vb);
    float *o1 = malloc(nb_max * ldo * sizeof *o1), *o2 = malloc(nb_max * ldo * sizeof *o2);
    double *ref = malloc(hd * sizeof *ref), *tol = malloc(hd * sizeof *tol);

    uint32_t pos = 0;
    size_t bi = 0, checked = 0;
    while (pos < c->T) {
        uint32_t n = c->batches[bi++ % c->n_batches];
        if (n > c->T - pos) n = c->T - pos;
        assert_true(n >= 1 && n <= c->n_batch);
        /* the batch's rows as the projections would leave them: strided buffers */
        for (uint32_t i = 0; i < n; i++) {
            memcpy(qb + i * ldq, Q + (pos + i) * qw, qw * sizeof *qb);
            memcpy(kb + i * (kw + 1), K + (pos + i) * kw, kw * sizeof *kb);
            memcpy(vb + i * (kw + 2), V + (pos + i) * kw, kw * sizeof *vb);
        }
        qr_kv_store(&kv, pos, n, kb, kw + 1, vb, kw + 2);
        for (size_t i = 0; i < nb_max * ldo; i++) o1[i] = o2[i] = GUARD;
        qr_attn_causal(&(qr_attn_shape){ nh, nkv, hd, scale, 0.0f }, &kv, pos, n, qb, ldq, o1, ldo, scr1, pools_get(1));
        qr_attn_causal(&(qr_attn_shape){ nh, nkv, hd, scale, 0.0f }, &kv, pos, n, qb, ldq, o2, ldo, scr2, pools_get(2));
        if (memcmp(o1, o2, nb_max * ldo * sizeof *o1) != 0)
            fail_msg("%s: pos0 %u n %u: threads 1 and 2 differ", c->name, pos, n);
        for (uint32_t i = 0; i < n; i++) {
            for (uint32_t h = 0; h < nh; h++) {
                reference(c, scale, Q, K, V, pos + i, h, ref, tol);
                for (uint32_t d = 0; d < hd; d++) {
                    double got = o1[i * ldo + (size_t)h * hd + d];
                    if (!(fabs(got - ref[d]) <= tol[d]))
                        fail_msg("%s: pos0 %u n %u: query %u head %u dim %u: got %.9g, reference %.9g, |diff| %.3g > "
                                 "tol %.3g", c->name, pos, n, pos + i, h, d, got, ref[d], fabs(got - ref[d]), tol[d]);
                    checked++;
                }
            }
            for (size_t d = qw; d < ldo; d++) assert_true(o1[i * ldo + d] == GUARD);   /* row gaps untouched */
        }
        for (size_t i = n * ldo; i < nb_max * ldo; i++) assert_true(o1[i] == GUARD); /* rows past n untouched */
        pos += n;
    }
    assert_true(checked == (size_t)c->T * nh * hd);
    free(Q); free(K); free(V); free(kmem); free(vmem); free(scr1); free(scr2);
    free(qb); free(kb); free(vb); free(o1); free(o2); free(ref); free(tol);
}

static const uint32_t prefill_then_decode[] = { 13, 1, 1, 9, 1, 16, 1, 1, 1 };
static const uint32_t all_at_once[] = { 64 };
static const uint32_t ones[] = { 1 };
static const uint32_t mixed[] = { 4, 3, 1, 2, 4, 4, 1 };

static void both_types(attn_case c)
{
    char name[96];
    const char *base = c.name;
    for (int t = 0; t < 2; t++) {
        c.type = t ? QR_KV_F32 : QR_KV_F16;
        snprintf(name, sizeof name, "%s/%s", base, t ? "f32" : "f16");
        c.name = name;
        run_case(&c);
    }
}

static void test_mha_batches(void **state)
{
    (void)state;
    /* n_q > 1 with pos0 > 0, and n_q = 1 decode steps, full causal attention */
    both_types((attn_case){ "mha prefill+decode", 4, 4, 32, 0, 96, 16, 70, prefill_then_decode, 9, 0, 0, 1 });
    both_types((attn_case){ "mha one batch", 4, 4, 64, 0, 64, 64, 64, all_at_once, 1, 0, 0, 2 });
    both_types((attn_case){ "mha decode only", 2, 2, 16, 0, 40, 1, 40, ones, 1, 0, 0, 3 });
}

static void test_gqa(void **state)
{
    (void)state;
    both_types((attn_case){ "gqa 8/2", 8, 2, 64, 0, 80, 16, 60, prefill_then_decode, 9, 0, 0, 4 });
    both_types((attn_case){ "gqa 8/1", 8, 1, 64, 0, 80, 16, 60, prefill_then_decode, 9, 0, 0, 5 });
}

static void test_window(void **state)
{
    (void)state;
    /* window 6, batches up to 4: a ring of 9 slots in a context of 64, over 50 positions */
    both_types((attn_case){ "window 6 ring 9", 4, 2, 32, 6, 64, 4, 50, mixed, 7, 0, 0, 6 });
    /* decode steps only: a ring of exactly the window */
    both_types((attn_case){ "window 5 decode", 4, 4, 16, 5, 64, 1, 30, ones, 1, 0, 0, 7 });
    /* GPT-Neo's local layers: scale 1 (no 1/√d), window 8, GQA-free, batches of 16 then decode */
    both_types((attn_case){ "gpt-neo local", 4, 4, 16, 8, 128, 16, 70, prefill_then_decode, 9, 0, 1.0f, 8 });
    /* a window larger than the context: the ring is the context, nothing is ever cut */
    both_types((attn_case){ "window > ctx", 2, 1, 16, 100, 40, 8, 40, mixed, 7, 0, 0, 9 });
}

static void test_head_dims(void **state)
{
    (void)state;
    static const uint32_t dims[] = { 1, 3, 17, 64, 128 };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "head_dim %u", dims[i]);
        both_types((attn_case){ name, 4, 2, dims[i], 0, 48, 8, 30, mixed, 7, 0, 0, 10 + i });
    }
}

static void test_threads_large(void **state)
{
    (void)state;
    /* enough work for the parallel region (run_case compares threads 1 and 2 bit for bit) */
    both_types((attn_case){ "threads", 8, 2, 64, 0, 200, 64, 192, all_at_once, 1, 0, 0, 20 });
}


/* A row's output depends only on its query and its keys: the whole sequence in one batch (a cache sized for
 * it) and the same sequence one token at a time (a ring of only the window) give the same bits. */
static void batch_vs_decode(uint32_t nh, uint32_t nkv, uint32_t hd, uint32_t window, uint32_t T, qr_kv_type type,
                            float q_range, uint64_t seed)
{
    const size_t qw = (size_t)nh * hd, kw = (size_t)nkv * hd;
    uint64_t st = seed;
    float *Q = malloc(T * qw * sizeof *Q), *K = malloc(T * kw * sizeof *K), *V = malloc(T * kw * sizeof *V);
    for (size_t i = 0; i < T * qw; i++) Q[i] = frand(&st, -q_range, q_range);
    for (size_t i = 0; i < T * kw; i++) K[i] = frand(&st, -2.0f, 2.0f);
    for (size_t i = 0; i < T * kw; i++) V[i] = frand(&st, -1.0f, 1.0f);
    qr_attn_shape sh = { nh, nkv, hd, 1.0f / sqrtf((float)hd), 0.0f };
    float *ob = malloc(T * qw * sizeof *ob), *od = malloc(T * qw * sizeof *od);
    for (int mode = 0; mode < 2; mode++) {
        uint32_t nb = mode == 0 ? T : 1;
        uint32_t cap = qr_kv_capacity(T, window, nb);
        size_t b = qr_kv_bytes(type, nkv, hd, cap);
        void *km = malloc(b), *vm = malloc(b);
        qr_kv_layer kv;
        qr_kv_layer_init(&kv, type, nkv, hd, cap, window, km, vm);
        float *scr = malloc(qr_attn_scratch_floats(&kv, 2) * sizeof(float));
        if (mode == 0) {
            qr_kv_store(&kv, 0, T, K, kw, V, kw);
            qr_attn_causal(&sh, &kv, 0, T, Q, qw, ob, qw, scr, pools_get(2));
        } else {
            for (uint32_t p = 0; p < T; p++) {
                qr_kv_store(&kv, p, 1, K + p * kw, kw, V + p * kw, kw);
                qr_attn_causal(&sh, &kv, p, 1, Q + p * qw, qw, od + p * qw, qw, scr, pools_get(1));
            }
        }
        free(km); free(vm); free(scr);
    }
    for (size_t i = 0; i < T * qw; i++)
        if (memcmp(&ob[i], &od[i], sizeof(float)) != 0)
            fail_msg("heads %u/%u hd %u window %u %s: element %zu: batch %.9g, token by token %.9g", nh, nkv, hd, window,
                     type == QR_KV_F16 ? "f16" : "f32", i, ob[i], od[i]);
    free(Q); free(K); free(V); free(ob); free(od);
}

static void test_batch_equals_decode(void **state)
{
    (void)state;
    for (int t = 0; t < 2; t++) {
        qr_kv_type type = t ? QR_KV_F32 : QR_KV_F16;
        batch_vs_decode(4, 4, 64, 0, 150, type, 2.0f, 30);    /* MHA: blocks of 8 positions vs 1 */
        batch_vs_decode(8, 2, 64, 0, 150, type, 2.0f, 31);    /* GQA 4: 2 positions per block */
        batch_vs_decode(8, 1, 17, 0, 100, type, 2.0f, 32);    /* group of 8, odd head_dim */
        batch_vs_decode(12, 1, 16, 0, 70, type, 2.0f, 33);    /* group of 12: chunks of 8 and 4 */
        batch_vs_decode(4, 2, 32, 37, 200, type, 2.0f, 34);   /* window 37: a ring of 37 slots vs the whole context */
        /* scores spread over ±100: softmax weights over many binades, where the order of the sums shows */
        batch_vs_decode(4, 2, 32, 37, 200, type, 12.0f, 35);
        batch_vs_decode(4, 4, 64, 0, 150, type, 8.0f, 36);
    }
}

/* The kernel tables this CPU can run: generic, avx2, avx512 (NULL where it lacks the instructions). */
static const char *const table_names[3] = { "generic", "avx2", "avx512" };
static void kernel_tables(const qr_attn_kernels *tables[3])
{
    tables[0] = qr_attn_kernels_generic();
    tables[1] = tables[2] = NULL;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        tables[1] = &qr_attn_kernels_avx2;
    else
        printf("(the CPU lacks AVX2+FMA+F16C: the avx2 table is not checked)\n");
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        tables[2] = &qr_attn_kernels_avx512;
    else
        printf("(the CPU lacks AVX-512 F/BW/VL: the avx512 table is not checked)\n");
}

/* The exponential of every kernel table this CPU has against exp() in double: within 2 ulp (the bound the
 * tolerance above counts), exactly 0 for -inf, NaN kept. */
static void test_exp_kernels(void **state)
{
    (void)state;
    const qr_attn_kernels *tables[3];
    kernel_tables(tables);
    enum { N = 4003 };
    static float s[N], x[N];
    for (int ti = 0; ti < 3; ti++) {
        if (!tables[ti]) continue;
        uint64_t st = 40;
        const float m = 3.25f;
        for (size_t i = 0; i < N; i++) {
            /* differences s - m over [-87.3, 0]: every binade of the result down to 2^-126 */
            s[i] = i < 5 ? m : m + frand(&st, -87.3f, 0.0f);
            if (i % 97 == 0) s[i] = m - (float)(i / 97) * 2.0f;   /* spaced points down to -82 */
        }
        memcpy(x, s, sizeof s);
        tables[ti]->exp_sub(x, N, m);
        for (size_t i = 0; i < N; i++) {
            double ref = exp((double)(s[i] - m));
            double ulp = ldexp(1.0, ilogb(ref) - 23);
            if (!(fabs(x[i] - ref) <= 2 * ulp))
                fail_msg("exp %s: exp(%.9g) = %.9g, reference %.9g (%.2f ulp)", table_names[ti], (double)(s[i] - m), x[i], ref,
                         fabs(x[i] - ref) / ulp);
        }
        float special[11] = { -INFINITY, NAN, m, m, m, m, m, m, m, m, -INFINITY };
        tables[ti]->exp_sub(special, 11, m);
        assert_true(special[0] == 0.0f && special[10] == 0.0f && isnan(special[1]) && special[2] == 1.0f);
    }
}

/* scores_kt of every kernel table this CPU has, over the cache's transposed keys (runtime/qr_kv.h): runs
 * that start and end inside a group (a window's first key, the newest key), whole groups, odd head sizes;
 * each score within the float dot-product bound of the f64 value, nothing written outside the run, and each
 * row's scores the same bits whatever the block height and its place in the block. */
static void test_scores_kt_kernels(void **state)
{
    (void)state;
    const qr_attn_kernels *tables[3];
    kernel_tables(tables);
    enum { SLOTS = 96, LD = 100 };   /* LD > the longest run */
    const size_t hds[3] = { 64, 7, 33 };
    const size_t runs[][2] = { { 0, 64 }, { 0, 96 }, { 5, 1 }, { 5, 30 }, { 16, 16 }, { 17, 47 }, { 3, 90 }, { 31, 2 },
                               { 64, 32 }, { 90, 6 } };
    static float kt32[SLOTS * 64], qb[8][64], sc[8 * LD], one[LD];
    static uint16_t kt16[SLOTS * 64];
    uint64_t st = 51;
    for (size_t i = 0; i < SLOTS * 64; i++) {
        kt16[i] = qm_f32_to_f16(frand(&st, -2, 2));
        kt32[i] = qm_f16_to_f32(kt16[i]);   /* the same values in both types */
    }
    for (int r = 0; r < 8; r++)
        for (int d = 0; d < 64; d++) qb[r][d] = frand(&st, -1, 1);
    for (int ti = 0; ti < 3; ti++) {
        if (!tables[ti]) continue;
        for (size_t hi = 0; hi < 3; hi++) {
            const size_t hd = hds[hi];
            for (size_t ri = 0; ri < sizeof runs / sizeof runs[0]; ri++) {
                const size_t s0 = runs[ri][0], n = runs[ri][1];
                for (int ty = 0; ty < 2; ty++)
                    for (size_t nr = 1; nr <= 8; nr++) {
                        const float *q[8];
                        for (size_t r = 0; r < nr; r++) q[r] = qb[(r + nr) % 8];   /* rows land in other places */
                        for (size_t i = 0; i < 8 * LD; i++) sc[i] = 1234.5f;
                        if (ty) tables[ti]->scores_kt_f16(q, nr, kt16, s0, n, hd, 0.5f, sc, LD);
                        else tables[ti]->scores_kt_f32(q, nr, kt32, s0, n, hd, 0.5f, sc, LD);
                        for (size_t r = 0; r < nr; r++) {
                            for (size_t i = 0; i < LD; i++) {
                                if (i >= n) {
                                    if (sc[r * LD + i] != 1234.5f)
                                        fail_msg("scores_kt %s wrote past the run", table_names[ti]);
                                    continue;
                                }
                                const size_t slot = s0 + i, base = slot / 16 * 16 * hd + slot % 16;
                                double ref = 0, mag = 0;
                                for (size_t d = 0; d < hd; d++) {
                                    ref += (double)q[r][d] * kt32[base + d * 16];
                                    mag += fabs((double)q[r][d] * kt32[base + d * 16]);
                                }
                                ref *= 0.5;
                                if (!(fabs(sc[r * LD + i] - ref) <= 0.5 * mag * (double)(hd + 2) * 0x1.0p-24))
                                    fail_msg("scores_kt %s hd %zu run %zu+%zu nr %zu row %zu key %zu: %.9g, reference %.9g",
                                             table_names[ti], hd, s0, n, nr, r, i, sc[r * LD + i], ref);
                            }
                            /* the same row alone: the same bits */
                            const float *q1[1] = { q[r] };
                            if (ty) tables[ti]->scores_kt_f16(q1, 1, kt16, s0, n, hd, 0.5f, one, LD);
                            else tables[ti]->scores_kt_f32(q1, 1, kt32, s0, n, hd, 0.5f, one, LD);
                            if (memcmp(one, sc + r * LD, n * sizeof(float)) != 0)
                                fail_msg("scores_kt %s: row %zu of a %zu-row block differs from the row alone",
                                         table_names[ti], r, nr);
                        }
                    }
            }
        }
    }
}

/* qr_attn_full: every query over every key (no mask), K/V rows given as float32 with their own strides,
 * against the same f64 reference and F32 tolerance as above; threads 1 and 2 give the same bits. */
static void full_case(uint32_t nh, uint32_t nkv, uint32_t hd, size_t n_q, size_t n_k, uint64_t seed)
{
    const size_t qw = (size_t)nh * hd, kw = (size_t)nkv * hd, ldq = qw + 1, ldk = kw + 3, ldv = kw + 5, ldo = qw + 2;
    const float scale = 1.0f / sqrtf((float)hd);
    uint64_t st = seed;
    float *Q = malloc(n_q * ldq * sizeof *Q), *K = malloc(n_k * ldk * sizeof *K), *V = malloc(n_k * ldv * sizeof *V);
    for (size_t i = 0; i < n_q * ldq; i++) Q[i] = frand(&st, -1.5f, 1.5f);
    for (size_t i = 0; i < n_k * ldk; i++) K[i] = frand(&st, -1.5f, 1.5f);
    for (size_t i = 0; i < n_k * ldv; i++) V[i] = frand(&st, -1.0f, 1.0f);
    float *o1 = malloc(n_q * ldo * sizeof *o1), *o2 = malloc(n_q * ldo * sizeof *o2);
    for (size_t i = 0; i < n_q * ldo; i++) o1[i] = o2[i] = GUARD;
    float *s1 = malloc(qr_attn_full_scratch_floats(1) * sizeof(float)), *s2 = malloc(qr_attn_full_scratch_floats(2) * sizeof(float));
    qr_attn_shape sh = { nh, nkv, hd, scale, 0.0f };
    qr_attn_full(&sh, n_q, Q, ldq, n_k, K, ldk, V, ldv, o1, ldo, s1, pools_get(1));
    qr_attn_full(&sh, n_q, Q, ldq, n_k, K, ldk, V, ldv, o2, ldo, s2, pools_get(2));
    assert_memory_equal(o1, o2, n_q * ldo * sizeof *o1);
    double *sc = malloc(n_k * sizeof *sc), *eps = malloc(n_k * sizeof *eps);
    for (size_t i = 0; i < n_q; i++) {
        for (uint32_t h = 0; h < nh; h++) {
            const uint32_t g = h / (nh / nkv);
            const float *q = Q + i * ldq + (size_t)h * hd;
            double m = -INFINITY, emax = 0, sum = 0;
            for (size_t j = 0; j < n_k; j++) {
                const float *k = K + j * ldk + (size_t)g * hd;
                double d = 0, a = 0;
                for (uint32_t e = 0; e < hd; e++) { d += (double)q[e] * k[e]; a += fabs((double)q[e] * k[e]); }
                sc[j] = scale * d;
                eps[j] = scale * (hd + 2) * U * a;
                m = fmax(m, sc[j]);
            }
            for (size_t j = 0; j < n_k; j++) {
                emax = fmax(emax, eps[j] + 2 * U * (fabs(sc[j]) + fabs(m)) + 8 * U);
                sc[j] = exp(sc[j] - m);
                sum += sc[j];
            }
            for (uint32_t e = 0; e < hd; e++) {
                double ref = 0, pav = 0, vmax = 0;
                for (size_t j = 0; j < n_k; j++) {
                    double v = V[j * ldv + (size_t)g * hd + e];
                    ref += sc[j] / sum * v;
                    pav += sc[j] / sum * fabs(v);
                    vmax = fmax(vmax, fabs(v));
                }
                double tol = expm1(2 * emax) * pav + (n_k + 4) * U * vmax + 1e-30;
                double got = o1[i * ldo + (size_t)h * hd + e];
                if (!(fabs(got - ref) <= tol))
                    fail_msg("full heads %u/%u hd %u n_q %zu n_k %zu: query %zu head %u dim %u: got %.9g, reference %.9g, "
                             "tol %.3g", nh, nkv, hd, n_q, n_k, i, h, e, got, ref, tol);
            }
            for (size_t e = qw; e < ldo; e++) assert_true(o1[i * ldo + e] == GUARD);
        }
    }
    free(Q); free(K); free(V); free(o1); free(o2); free(s1); free(s2); free(sc); free(eps);
}

static void test_full(void **state)
{
    (void)state;
    static const size_t nks[] = { 1, 63, 64, 65, 130 };
    for (size_t i = 0; i < sizeof nks / sizeof nks[0]; i++) {
        full_case(4, 4, 64, 7, nks[i], 50 + i);    /* MHA: blocks of 8 query rows */
        full_case(8, 2, 17, 20, nks[i], 60 + i);   /* GQA, odd head_dim */
        full_case(2, 1, 32, 1, nks[i], 70 + i);    /* one query (a decode step's cross-attention) */
    }
    full_case(8, 8, 64, 64, 96, 80);               /* enough work for two threads */
}

static void test_kv_sizes(void **state)
{
    (void)state;
    assert_int_equal(qr_kv_capacity(1000, 0, 512), 1000);
    assert_int_equal(qr_kv_capacity(1000, 256, 512), 767);
    assert_int_equal(qr_kv_capacity(1000, 256, 1), 256);
    assert_int_equal(qr_kv_capacity(1000, 256, 0), 256);
    assert_int_equal(qr_kv_capacity(300, 256, 512), 300);
    assert_int_equal(qr_kv_capacity(UINT32_MAX, UINT32_MAX, UINT32_MAX), UINT32_MAX);
    /* slots rounded up to whole groups of 16 */
    assert_int_equal(qr_kv_bytes(QR_KV_F16, 4, 64, 100), 4 * 64 * 112 * 2);
    assert_int_equal(qr_kv_bytes(QR_KV_F32, 4, 64, 100), 4 * 64 * 112 * 4);
    assert_int_equal(qr_kv_bytes(QR_KV_F32, 4, 64, 112), 4 * 64 * 112 * 4);
    assert_int_equal(qr_kv_bytes(QR_KV_F32, 4, 64, 1), 4 * 64 * 16 * 4);
    assert_int_equal(qr_kv_bytes(QR_KV_F32, 0, 64, 100), 0);
    if (sizeof(size_t) == 8) {
        assert_true(qr_kv_bytes(QR_KV_F32, UINT32_MAX, UINT32_MAX, UINT32_MAX) == SIZE_MAX);
        assert_true(qr_kv_bytes(QR_KV_F32, 1u << 31, 1u << 31, 2) == SIZE_MAX);   /* 2^63 · 4 */
        assert_true(qr_kv_bytes(QR_KV_F16, 1u << 31, 1u << 31, 2) == SIZE_MAX);   /* 2^63 · 2 */
        assert_true(qr_kv_bytes(QR_KV_F16, 1u << 31, 1u << 27, 16) == (size_t)1 << 63);   /* 2^62 · 2 */
        assert_true(qr_kv_bytes(QR_KV_F16, 1u << 31, 1u << 27, 1) == (size_t)1 << 63);    /* 1 slot -> 16 */
        assert_true(qr_kv_bytes(QR_KV_F16, 1u << 31, 1u << 31, 1) == SIZE_MAX);           /* 2^66 · 2 */
        assert_true(qr_kv_bytes(QR_KV_F16, 1, 1, UINT32_MAX) == ((size_t)1 << 32) * 2);  /* rounded up, no wrap */
    }
}

/* qr_kv_attended_bytes against a count made position by position: the keys some query of pos0..pos0+n-1
 * sees (j <= p, and p - j < window when there is one), K and V, every head. */
static void test_kv_attended_bytes(void **state)
{
    (void)state;
    const uint32_t windows[] = { 0, 1, 7, 64 };
    const uint32_t starts[] = { 0, 1, 6, 7, 8, 63, 64, 100 };
    const size_t counts[] = { 1, 2, 9, 70 };
    static bool seen[256];
    for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++)
        for (size_t si = 0; si < sizeof starts / sizeof starts[0]; si++)
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
                for (int type = 0; type < 2; type++) {
                    const uint32_t w = windows[wi], pos0 = starts[si];
                    const size_t n = counts[ci];
                    qr_kv_layer l;
                    qr_kv_layer_init(&l, type ? QR_KV_F32 : QR_KV_F16, 3, 8, 256, w, NULL, NULL);
                    memset(seen, 0, sizeof seen);
                    uint64_t keys = 0;
                    for (uint32_t p = pos0; p < pos0 + n; p++)
                        for (uint32_t j = 0; j <= p; j++)
                            if ((w == 0 || p - j < w) && !seen[j]) seen[j] = true, keys++;
                    const uint64_t want = keys * 2 * 3 * 8 * (type ? 4 : 2);
                    if (qr_kv_attended_bytes(&l, pos0, n) != want)
                        fail_msg("window %u, positions %u..%zu: %llu bytes, counted %llu", w, pos0, pos0 + n - 1,
                                 (unsigned long long)qr_kv_attended_bytes(&l, pos0, n), (unsigned long long)want);
                }
}

static void test_kv_store_read(void **state)
{
    (void)state;
    /* a ring of 5 slots: position p is slot p % 5, and the newest write wins */
    const uint32_t nkv = 3, hd = 7, cap = 5;
    for (int t = 0; t < 2; t++) {
        qr_kv_type type = t ? QR_KV_F32 : QR_KV_F16;
        size_t b = qr_kv_bytes(type, nkv, hd, cap);
        void *km = malloc(b), *vm = malloc(b);
        qr_kv_layer kv;
        qr_kv_layer_init(&kv, type, nkv, hd, cap, 5, km, vm);
        float rows_k[12][21], rows_v[12][21], k[7], v[7];
        uint64_t st = 77;
        for (int p = 0; p < 12; p++)
            for (int i = 0; i < 21; i++) {
                rows_k[p][i] = frand(&st, -4, 4);
                rows_v[p][i] = frand(&st, -4, 4);
            }
        qr_kv_store(&kv, 0, 4, rows_k[0], 21, rows_v[0], 21);
        qr_kv_store(&kv, 4, 3, rows_k[4], 21, rows_v[4], 21);
        qr_kv_store(&kv, 7, 5, rows_k[7], 21, rows_v[7], 21);
        for (uint32_t p = 7; p < 12; p++)
            for (uint32_t g = 0; g < nkv; g++) {
                qr_kv_read(&kv, p, g, k, v);
                for (uint32_t i = 0; i < hd; i++) {
                    double ek = rows_k[p][g * hd + i], ev = rows_v[p][g * hd + i];
                    double tk = t ? 0 : 0x1.0p-11 * fabs(ek), tv = t ? 0 : 0x1.0p-11 * fabs(ev);
                    assert_true(fabs(k[i] - ek) <= tk && fabs(v[i] - ev) <= tv);
                }
            }
        /* the layout (runtime/qr_kv.h), checked on the F32 memory directly, 16 slots a head (cap 5 rounded up):
         * V row of head g, slot s at (g·16 + s)·hd; K element d at (g·16·hd + (s / 16)·16·hd) + d·16 + s % 16 */
        if (type == QR_KV_F32) {
            const size_t s11 = 11 % cap;
            assert_true(((float *)vm)[((size_t)2 * 16 + s11) * hd + 6] == rows_v[11][2 * hd + 6]);
            assert_true(((float *)km)[(size_t)2 * 16 * hd + 6 * 16 + s11] == rows_k[11][2 * hd + 6]);
        }
        free(km); free(vm);
    }
}

/* qr_kv_copy: the destination then reads back exactly what the source holds for the positions the ring
 * keeps, and attention over it gives the same bits; slots outside the copied positions stay untouched. */
static void test_kv_copy(void **state)
{
    (void)state;
    const uint32_t nkv = 2, hd = 9, cap = 7;
    for (int t = 0; t < 2; t++) {
        qr_kv_type type = t ? QR_KV_F32 : QR_KV_F16;
        size_t b = qr_kv_bytes(type, nkv, hd, cap);
        void *km = malloc(b), *vm = malloc(b), *km2 = malloc(b), *vm2 = malloc(b);
        memset(km2, 0x5a, b);
        memset(vm2, 0x5a, b);
        qr_kv_layer a, c;
        qr_kv_layer_init(&a, type, nkv, hd, cap, 7, km, vm);
        qr_kv_layer_init(&c, type, nkv, hd, cap, 7, km2, vm2);
        float rows[2][20][18];
        uint64_t st = 90;
        for (int p = 0; p < 20; p++)
            for (int i = 0; i < 18; i++) {
                rows[0][p][i] = frand(&st, -1, 1);
                rows[1][p][i] = frand(&st, -1, 1);
            }
        /* 3 positions: only slots 0..2 are copied, the rest keeps its bytes */
        qr_kv_store(&a, 0, 3, rows[0][0], 18, rows[1][0], 18);
        qr_kv_copy(&c, &a, 3);
        /* 16 slots a head (cap 7 rounded up): V rows at (g·16 + s)·hd, K element d of slot s at g·16·hd + d·16 + s */
        size_t esz = t ? 4 : 2;
        for (uint32_t g = 0; g < nkv; g++) {
            assert_memory_equal((char *)vm2 + (size_t)g * 16 * hd * esz, (char *)vm + (size_t)g * 16 * hd * esz, 3 * hd * esz);
            assert_true(((unsigned char *)vm2)[((size_t)g * 16 + 3) * hd * esz] == 0x5a);
            for (uint32_t d = 0; d < hd; d++) {
                const size_t e = (size_t)g * 16 * hd + (size_t)d * 16;
                assert_memory_equal((char *)km2 + e * esz, (char *)km + e * esz, 3 * esz);
                assert_true(((unsigned char *)km2)[(e + 3) * esz] == 0x5a);
            }
        }
        /* 17 positions through a ring of 7: the last 7 (slots wrap) */
        qr_kv_store(&a, 3, 7, rows[0][3], 18, rows[1][3], 18);
        qr_kv_store(&a, 10, 7, rows[0][10], 18, rows[1][10], 18);
        qr_kv_copy(&c, &a, 17);
        float k1[9], v1[9], k2[9], v2[9];
        for (uint32_t p = 10; p < 17; p++)
            for (uint32_t g = 0; g < nkv; g++) {
                qr_kv_read(&a, p, g, k1, v1);
                qr_kv_read(&c, p, g, k2, v2);
                assert_memory_equal(k1, k2, sizeof k1);
                assert_memory_equal(v1, v2, sizeof v1);
            }
        float q[4 * 9], o1[4 * 9], o2[4 * 9];
        for (int i = 0; i < 36; i++) q[i] = frand(&st, -1, 1);
        float *scr = malloc(qr_attn_scratch_floats(&a, 1) * sizeof(float));
        qr_attn_shape sh = { 4, nkv, hd, 0.3f, 0.0f };
        qr_attn_causal(&sh, &a, 16, 1, q, 36, o1, 36, scr, pools_get(1));
        qr_attn_causal(&sh, &c, 16, 1, q, 36, o2, 36, scr, pools_get(1));
        assert_memory_equal(o1, o2, sizeof o1);
        free(km); free(vm); free(km2); free(vm2); free(scr);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_sizes),
        cmocka_unit_test(test_kv_attended_bytes),
        cmocka_unit_test(test_kv_store_read),
        cmocka_unit_test(test_mha_batches),
        cmocka_unit_test(test_gqa),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_head_dims),
        cmocka_unit_test(test_threads_large),
        cmocka_unit_test(test_batch_equals_decode),
        cmocka_unit_test(test_exp_kernels),
        cmocka_unit_test(test_scores_kt_kernels),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_kv_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
