/* test_sample.c — the sampler (runtime/qr_sample.h) and its public face (qmap_sampler_* of include/qmap.h).
 *
 * What must hold, each against a reference computed here (argmax, softmax in double, the sets top-p and
 * min-p must keep worked out from the probabilities):
 *   - temp <= 0 is the argmax, lowest id on ties, NaN never chosen; top_k = 1 is the argmax at any temp;
 *   - the same seed gives the same ids, another seed another sequence;
 *   - with temp T and no truncation, 20,000 draws follow softmax(l/T): Pearson's χ² against the expected
 *     counts stays under the 1 − 10⁻⁶ quantile of χ²(V − 1) (Wilson–Hilferty); fixed seeds make it
 *     deterministic, and the bound is loose only by chance of 10⁻⁶ for a correct sampler, while a wrong
 *     temperature or a missing token lands far above it;
 *   - top-k, top-p and min-p draw from exactly the support they should (every kept id seen, no other), and
 *     in proportion to the renormalised probabilities;
 *   - the repetition penalty divides positive and multiplies negative logits of ids among the last
 *     repeat_last_n accepted, once per id, and changes the argmax when it should;
 *   - qr_sampler_sample allocates nothing: malloc/calloc/realloc are counted around 240 calls (this
 *     binary interposes them over glibc's; skipped under ASan, which owns the allocator);
 *   - bad parameters are refused with QM_ERR_INVALID_ARGUMENT naming the parameter. */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qmap.h"
#include "qr_sample.h"

/* ---- allocation counting ---------------------------------------------------------------------------- */

#if defined(__SANITIZE_ADDRESS__)
#define COUNT_ALLOCS 0
#else
#define COUNT_ALLOCS 1
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t a, size_t b);
extern void *__libc_realloc(void *p, size_t n);
extern void __libc_free(void *p);
static volatile int counting;
static volatile size_t n_allocs;
void *malloc(size_t n) { if (counting) n_allocs++; return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { if (counting) n_allocs++; return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { if (counting) n_allocs++; return __libc_realloc(p, n); }
void free(void *p) { __libc_free(p); }
#endif

/* ---- helpers ---------------------------------------------------------------------------------------- */

static float frand(uint64_t *st, float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(tu_rng(st) >> 11) * 0x1.0p-53);
}

static qr_sampler *make(float temp, int32_t top_k, float top_p, float min_p, float pen, uint32_t last_n,
                        uint64_t seed, uint32_t n_vocab)
{
    qr_sampler_params p = { temp, top_k, top_p, min_p, pen, last_n, seed };
    qr_sampler *s = NULL;
    qm_error err;
    if (qr_sampler_new(&p, n_vocab, &s, &err) != QM_OK) fail_msg("qr_sampler_new: %s", err.message);
    return s;
}

static int32_t ref_argmax(const float *l, uint32_t n)
{
    int32_t b = -1;
    for (uint32_t i = 0; i < n; i++)
        if (!isnan(l[i]) && (b < 0 || l[i] > l[b])) b = (int32_t)i;
    return b < 0 ? 0 : b;
}

/* 1 − 10⁻⁶ quantile of χ²(d), Wilson–Hilferty: d·(1 − 2/(9d) + z·√(2/(9d)))³ with z = 4.7534. */
static double chi2_bound(int d)
{
    double a = 2.0 / (9.0 * d), c = 1.0 - a + 4.7534 * sqrt(a);
    return d * c * c * c;
}

/* Draw `n` ids and compare their counts with probabilities `p` (0 = must never appear). */
static void check_distribution(const char *what, qr_sampler *s, const float *logits, const double *p, uint32_t V,
                               int n)
{
    int *cnt = calloc(V, sizeof *cnt);
    for (int i = 0; i < n; i++) {
        int32_t id = qr_sampler_sample(s, logits);
        assert_true(id >= 0 && (uint32_t)id < V);
        cnt[id]++;
    }
    double chi = 0;
    int cells = 0;
    for (uint32_t i = 0; i < V; i++) {
        if (p[i] == 0) {
            if (cnt[i] != 0) fail_msg("%s: id %u is outside the support but was drawn %d times", what, i, cnt[i]);
            continue;
        }
        double e = p[i] * n;
        if (cnt[i] == 0 && e > 30) fail_msg("%s: id %u expected %.0f times, never drawn", what, i, e);
        chi += (cnt[i] - e) * (cnt[i] - e) / e;
        cells++;
    }
    if (cells > 1 && chi > chi2_bound(cells - 1))
        fail_msg("%s: chi-square %.1f over %d cells above the 1e-6 bound %.1f", what, chi, cells, chi2_bound(cells - 1));
    free(cnt);
}

/* softmax(l/T) in double over the ids with keep[i] (NULL: all) */
static void ref_softmax(const float *l, uint32_t V, double T, const bool *keep, double *p)
{
    double m = -INFINITY, sum = 0;
    for (uint32_t i = 0; i < V; i++) if (!keep || keep[i]) m = fmax(m, l[i]);
    for (uint32_t i = 0; i < V; i++) {
        p[i] = (!keep || keep[i]) ? exp((l[i] - m) / T) : 0;
        sum += p[i];
    }
    for (uint32_t i = 0; i < V; i++) p[i] /= sum;
}

/* ---- tests ------------------------------------------------------------------------------------------ */

static void test_greedy(void **state)
{
    (void)state;
    uint64_t st = 1;
    const uint32_t V = 1000;
    float *l = malloc(V * sizeof *l);
    qr_sampler *s = make(0.0f, 40, 0.95f, 0.05f, 1.0f, 0, 9, V);
    qr_sampler *k1 = make(1.5f, 1, 1.0f, 0.0f, 1.0f, 0, 9, V);
    for (int r = 0; r < 50; r++) {
        for (uint32_t i = 0; i < V; i++) l[i] = frand(&st, -10, 10);
        int32_t want = ref_argmax(l, V);
        assert_int_equal(qr_sampler_sample(s, l), want);
        assert_int_equal(qr_sampler_sample(k1, l), want);   /* top_k = 1 keeps only the argmax */
    }
    /* ties: the lowest id; NaN is never chosen */
    for (uint32_t i = 0; i < V; i++) l[i] = 1.0f;
    l[3] = l[700] = 5.0f;
    l[0] = NAN;
    assert_int_equal(qr_sampler_sample(s, l), 3);
    assert_int_equal(qr_sampler_sample(k1, l), 3);
    /* sampling with an infinite logit: it takes all the mass (lowest id among several); all -inf/NaN: id 0 */
    qr_sampler *t1 = make(1.0f, 0, 0.9f, 0.05f, 1.0f, 0, 9, V);
    l[9] = l[600] = INFINITY;
    for (int i = 0; i < 20; i++) assert_int_equal(qr_sampler_sample(t1, l), 9);
    for (uint32_t i = 0; i < V; i++) l[i] = (i % 2) ? -INFINITY : NAN;
    assert_int_equal(qr_sampler_sample(t1, l), 0);
    qr_sampler_free(t1);
    l[0] = NAN;
    for (uint32_t i = 1; i < V; i++) l[i] = 1.0f;
    l[3] = l[700] = 5.0f;
    /* a negative temperature is greedy too */
    qr_sampler *neg = make(-1.0f, 0, 1.0f, 0.0f, 1.0f, 0, 9, V);
    assert_int_equal(qr_sampler_sample(neg, l), 3);
    qr_sampler_free(s);
    qr_sampler_free(k1);
    qr_sampler_free(neg);
    free(l);
}

static void test_seed(void **state)
{
    (void)state;
    const uint32_t V = 300;
    float l[300];
    uint64_t st = 2;
    for (uint32_t i = 0; i < V; i++) l[i] = frand(&st, -3, 3);
    qr_sampler *a = make(1.0f, 0, 1.0f, 0.0f, 1.0f, 64, 1234, V), *b = make(1.0f, 0, 1.0f, 0.0f, 1.0f, 64, 1234, V);
    qr_sampler *c = make(1.0f, 0, 1.0f, 0.0f, 1.0f, 64, 1235, V);
    int32_t first[200];
    int differ = 0;
    for (int i = 0; i < 200; i++) {
        first[i] = qr_sampler_sample(a, l);
        assert_int_equal(qr_sampler_sample(b, l), first[i]);
        differ += qr_sampler_sample(c, l) != first[i];
    }
    assert_true(differ > 100);     /* another seed: mostly other ids over 300 near-uniform choices */
    /* reset goes back to the seed's sequence */
    qr_sampler_reset(a);
    for (int i = 0; i < 200; i++) assert_int_equal(qr_sampler_sample(a, l), first[i]);
    qr_sampler_free(a);
    qr_sampler_free(b);
    qr_sampler_free(c);
}

static void test_softmax_distribution(void **state)
{
    (void)state;
    const uint32_t V = 12;
    float l[12];
    double p[12];
    uint64_t st = 3;
    for (uint32_t i = 0; i < V; i++) l[i] = frand(&st, -2, 2);
    static const float temps[] = { 1.0f, 0.7f, 2.0f };
    for (size_t t = 0; t < 3; t++) {
        qr_sampler *s = make(temps[t], 0, 1.0f, 0.0f, 1.0f, 0, 100 + t, V);
        ref_softmax(l, V, temps[t], NULL, p);
        char what[48];
        snprintf(what, sizeof what, "softmax temp %.1f", (double)temps[t]);
        check_distribution(what, s, l, p, V, 20000);
        qr_sampler_free(s);
    }
    /* top-k = 4 of 12: softmax over the four largest, nothing else */
    bool keep[12] = { 0 };
    for (int r = 0; r < 4; r++) {
        int b = -1;
        for (uint32_t i = 0; i < V; i++) if (!keep[i] && (b < 0 || l[i] > l[b])) b = (int)i;
        keep[b] = true;
    }
    ref_softmax(l, V, 1.0, keep, p);
    qr_sampler *s = make(1.0f, 4, 1.0f, 0.0f, 1.0f, 0, 200, V);
    check_distribution("top-k 4", s, l, p, V, 20000);
    qr_sampler_free(s);
}

/* Probabilities 0.5, 0.3, 0.15, 0.05 (and, for the sets, nothing else), shuffled over the ids. */
static void four_way(float *l, uint32_t V)
{
    for (uint32_t i = 0; i < V; i++) l[i] = -INFINITY;
    l[7] = logf(0.5f);
    l[2] = logf(0.3f);
    l[9] = logf(0.15f);
    l[0] = logf(0.05f);
}

static void test_top_p_min_p(void **state)
{
    (void)state;
    const uint32_t V = 10;
    float l[10];
    double p[10];
    four_way(l, V);
    /* top-p: cumulative 0.5, 0.8, 0.95, 1.0 — the smallest prefix reaching top_p */
    static const struct { float top_p, min_p; bool keep[10]; } cases[] = {
        { 0.40f, 0.0f, { [7] = 1 } },                          /* 0.5 >= 0.4: one */
        { 0.75f, 0.0f, { [7] = 1, [2] = 1 } },
        { 0.90f, 0.0f, { [7] = 1, [2] = 1, [9] = 1 } },
        { 0.99f, 0.0f, { [7] = 1, [2] = 1, [9] = 1, [0] = 1 } },
        /* min-p: keep p >= min_p · 0.5 */
        { 1.0f, 0.2f, { [7] = 1, [2] = 1, [9] = 1 } },       /* floor 0.1 */
        { 1.0f, 0.5f, { [7] = 1, [2] = 1 } },                /* floor 0.25 */
        { 1.0f, 0.05f, { [7] = 1, [2] = 1, [9] = 1, [0] = 1 } }, /* floor 0.025 */
        { 1.0f, 1.0f, { [7] = 1 } },
        /* both: top-p keeps three, min-p then drops the 0.15 */
        { 0.90f, 0.4f, { [7] = 1, [2] = 1 } },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        qr_sampler *s = make(1.0f, 0, cases[c].top_p, cases[c].min_p, 1.0f, 0, 300 + c, V);
        ref_softmax(l, V, 1.0, cases[c].keep, p);
        char what[64];
        snprintf(what, sizeof what, "top_p %.2f min_p %.2f", (double)cases[c].top_p, (double)cases[c].min_p);
        check_distribution(what, s, l, p, V, 5000);
        qr_sampler_free(s);
    }
    /* the temperature shapes only the draw: top-p and min-p keep the set they keep at temperature 1 (as in
     * llama.cpp's chain), and the kept ids are drawn by softmax(l/T) renormalised over that set */
    static const float temps[] = { 0.5f, 2.0f };
    for (size_t t = 0; t < 2; t++)
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            qr_sampler *s = make(temps[t], 0, cases[c].top_p, cases[c].min_p, 1.0f, 0, 700 + c, V);
            ref_softmax(l, V, temps[t], cases[c].keep, p);
            char what[80];
            snprintf(what, sizeof what, "temp %.1f top_p %.2f min_p %.2f", (double)temps[t], (double)cases[c].top_p,
                     (double)cases[c].min_p);
            check_distribution(what, s, l, p, V, 5000);
            qr_sampler_free(s);
        }
    /* with a top-k in front: the same sets out of a large vocabulary (the heap path) */
    const uint32_t BV = 50000;
    float *bl = malloc(BV * sizeof *bl);
    uint64_t st = 4;
    for (uint32_t i = 0; i < BV; i++) bl[i] = frand(&st, -30, -20);   /* ~e^-20 each: never kept below */
    bl[40000] = logf(0.5f); bl[123] = logf(0.3f); bl[49999] = logf(0.15f); bl[0] = logf(0.05f);
    for (int lazy = 0; lazy < 2; lazy++) {   /* top-k 40 then top-p; top-p alone (ids popped from a heap) */
        qr_sampler *s = make(1.0f, lazy ? 0 : 40, 0.75f, 0.0f, 1.0f, 0, 400, BV);
        int seen[2] = { 0, 0 };
        for (int i = 0; i < 300; i++) {
            int32_t id = qr_sampler_sample(s, bl);
            assert_true(id == 40000 || id == 123);
            seen[id == 123]++;
        }
        assert_true(seen[0] > 0 && seen[1] > 0);
        qr_sampler_free(s);
    }
    free(bl);
}

static void test_penalty(void **state)
{
    (void)state;
    const uint32_t V = 8;
    float l[8] = { 2.0f, 1.7f, -1.0f, -1.05f, -5, -5, -5, -5 };
    /* positive logit divided: 2.0/1.1 = 1.82 still beats 1.7; divided twice it would not (1.65): the
     * penalty applies once per id however often it occurs */
    qr_sampler *s = make(0.0f, 0, 1.0f, 0.0f, 1.1f, 4, 1, V);
    qr_sampler_accept(s, 0);
    qr_sampler_accept(s, 0);
    assert_int_equal(qr_sampler_sample(s, l), 0);   /* records 0 again */
    qr_sampler_free(s);
    /* 1.3: 2.0/1.3 = 1.54 < 1.7: the argmax moves to 1 */
    s = make(0.0f, 0, 1.0f, 0.0f, 1.3f, 4, 1, V);
    qr_sampler_accept(s, 0);
    assert_int_equal(qr_sampler_sample(s, l), 1);
    /* history of 4: after four other ids, 0 has left it */
    qr_sampler_accept(s, 5);
    qr_sampler_accept(s, 6);
    qr_sampler_accept(s, 7);
    qr_sampler_accept(s, 4);
    assert_int_equal(qr_sampler_sample(s, l), 0);
    qr_sampler_free(s);
    /* negative logits multiplied: -1.0·1.1 = -1.1 < -1.05 */
    float n[4] = { -1.0f, -1.05f, -3, -3 };
    s = make(0.0f, 0, 1.0f, 0.0f, 1.1f, 8, 1, 4);
    assert_int_equal(qr_sampler_sample(s, n), 0);   /* no history yet; records 0 */
    assert_int_equal(qr_sampler_sample(s, n), 1);   /* 0 now penalised */
    qr_sampler_free(s);
    /* penalty 1: off; repeat_last_n 0: off */
    s = make(0.0f, 0, 1.0f, 0.0f, 1.0f, 8, 1, V);
    qr_sampler_accept(s, 0);
    assert_int_equal(qr_sampler_sample(s, l), 0);
    qr_sampler_free(s);
    s = make(0.0f, 0, 1.0f, 0.0f, 1.5f, 0, 1, V);
    qr_sampler_accept(s, 0);
    assert_int_equal(qr_sampler_sample(s, l), 0);
    qr_sampler_free(s);
    /* ids out of range are ignored by accept */
    s = make(0.0f, 0, 1.0f, 0.0f, 1.5f, 8, 1, V);
    qr_sampler_accept(s, -1);
    qr_sampler_accept(s, 8);
    assert_int_equal(qr_sampler_sample(s, l), 0);
    qr_sampler_free(s);
    /* penalised distribution: l[0] becomes 2/2 = 1 when sampling at temp 1 */
    float d[3] = { 2.0f, 1.0f, 0.0f }, dp[3] = { 1.0f, 1.0f, 0.0f };
    double p[3];
    s = make(1.0f, 0, 1.0f, 0.0f, 2.0f, 1000000, 5, 3);
    qr_sampler_accept(s, 0);
    /* every draw is recorded too, so penalise all three up front: 1 → 0.5, 0 stays 0 */
    qr_sampler_accept(s, 1);
    qr_sampler_accept(s, 2);
    dp[1] = 0.5f;
    ref_softmax(dp, 3, 1.0, NULL, p);
    check_distribution("penalised softmax", s, d, p, 3, 20000);
    qr_sampler_free(s);
}

static void test_no_alloc(void **state)
{
    (void)state;
#if COUNT_ALLOCS
    const uint32_t V = 32000;
    float *l = malloc(V * sizeof *l);
    uint64_t st = 5;
    for (uint32_t i = 0; i < V; i++) l[i] = frand(&st, -10, 10);
    qr_sampler *ss[4] = { make(0.8f, 40, 0.95f, 0.05f, 1.1f, 64, 1, V), make(0.0f, 0, 1.0f, 0.0f, 1.3f, 64, 1, V),
                          make(1.0f, 0, 0.9f, 0.0f, 1.0f, 64, 1, V), make(1.0f, 0, 1.0f, 0.1f, 1.2f, 64, 1, V) };
    n_allocs = 0;
    counting = 1;
    for (int i = 0; i < 60; i++)
        for (int k = 0; k < 4; k++) {
            qr_sampler_accept(ss[k], i % 100);
            (void)qr_sampler_sample(ss[k], l);
        }
    counting = 0;
    assert_int_equal(n_allocs, 0);
    /* the counter works: a malloc inside the window is seen */
    counting = 1;
    void *probe = malloc(16);
    counting = 0;
    assert_int_equal(n_allocs, 1);
    free(probe);
    for (int k = 0; k < 4; k++) qr_sampler_free(ss[k]);
    free(l);
#else
    skip();   /* under ASan the sanitizer owns malloc; the plain unit build counts */
#endif
}

static void test_bad_params(void **state)
{
    (void)state;
    static const struct { qr_sampler_params p; uint32_t V; const char *needle; } bad[] = {
        { { 0.8f, 40, 0.0f, 0.05f, 1.0f, 64, 0 }, 10, "top_p" },
        { { 0.8f, 40, 1.5f, 0.05f, 1.0f, 64, 0 }, 10, "top_p" },
        { { 0.8f, 40, NAN, 0.05f, 1.0f, 64, 0 }, 10, "top_p" },
        { { 0.8f, 40, 0.9f, -0.1f, 1.0f, 64, 0 }, 10, "min_p" },
        { { 0.8f, 40, 0.9f, 1.1f, 1.0f, 64, 0 }, 10, "min_p" },
        { { NAN, 40, 0.9f, 0.1f, 1.0f, 64, 0 }, 10, "temp" },
        { { 0.8f, 40, 0.9f, 0.1f, 0.0f, 64, 0 }, 10, "repeat_penalty" },
        { { 0.8f, 40, 0.9f, 0.1f, INFINITY, 64, 0 }, 10, "repeat_penalty" },
        { { 0.8f, 40, 0.9f, 0.1f, 1.0f, (1u << 20) + 1, 0 }, 10, "repeat_last_n" },
        { { 0.8f, 40, 0.9f, 0.1f, 1.0f, 64, 0 }, 0, "n_vocab" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        qr_sampler *s = (qr_sampler *)&bad;
        qm_error err;
        assert_int_equal(qr_sampler_new(&bad[i].p, bad[i].V, &s, &err), QM_ERR_INVALID_ARGUMENT);
        assert_null(s);
        if (!tu_contains(err.message, bad[i].needle)) fail_msg("case %zu: message \"%s\" lacks %s", i, err.message, bad[i].needle);
    }
}

static void test_public_api(void **state)
{
    (void)state;
    qmap_sampler_params p;
    qmap_sampler_params_default(&p);
    /* llama.cpp's defaults, as include/qmap.h lists them */
    assert_true(p.temp == 0.8f && p.top_k == 40 && p.top_p == 0.95f && p.min_p == 0.05f && p.repeat_penalty == 1.0f &&
                p.repeat_last_n == 64);
    qmap_sampler *a = NULL;
    qmap_error err;
    p.seed = 77;
    assert_int_equal(qmap_sampler_new(&p, 500, &a, &err), QMAP_OK);
    /* the same ids as the runtime sampler with the same parameters */
    qr_sampler *b = make(p.temp, p.top_k, p.top_p, p.min_p, p.repeat_penalty, p.repeat_last_n, p.seed, 500);
    float l[500];
    uint64_t st = 6;
    for (int i = 0; i < 500; i++) l[i] = frand(&st, -4, 4);
    qmap_sampler_accept(a, 3);
    qr_sampler_accept(b, 3);
    for (int i = 0; i < 100; i++) assert_int_equal(qmap_sample(a, l), qr_sampler_sample(b, l));
    qmap_sampler_free(a);
    qr_sampler_free(b);
    qmap_sampler_free(NULL);
    /* errors come back as a public code and message */
    p.top_p = 2.0f;
    a = (qmap_sampler *)&p;
    assert_int_equal(qmap_sampler_new(&p, 500, &a, &err), QMAP_ERR_INVALID_ARGUMENT);
    assert_null(a);
    assert_int_equal(err.code, QMAP_ERR_INVALID_ARGUMENT);
    assert_true(tu_contains(err.message, "top_p"));
    /* NULL params: the defaults */
    assert_int_equal(qmap_sampler_new(NULL, 10, &a, NULL), QMAP_OK);
    qmap_sampler_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_seed),
        cmocka_unit_test(test_softmax_distribution),
        cmocka_unit_test(test_top_p_min_p),
        cmocka_unit_test(test_penalty),
        cmocka_unit_test(test_no_alloc),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_public_api),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
