/* test_ppl_stats.c — the statistics of `qmap perplexity --kl-base` (cli/ppl_stats.c) against the same
 * figures computed here, directly from their definitions (llama-perplexity's KL-divergence mode, see
 * cli/ppl_stats.h): the percentile rule on an arithmetic sequence, whose percentiles are known in closed
 * form; KL, Δp and same top on distributions whose values follow from the construction (a uniform base);
 * and every summary figure on pseudo-random logits, recomputed token by token in this file.
 * tests/run/test_perplexity.py checks the same figures against numpy on a real run. */
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "ppl_stats.c"   /* the CLI is not a library: its statistics are compiled into the test */

#define V 16             /* vocabulary of the synthetic cases */
#define N_TOK 301        /* tokens of the random case: odd, and more than the 100 llama.cpp wants */

static void assert_near(double got, double want, double rel)
{
    if (!(fabs(got - want) <= rel * fabs(want) + 1e-15)) fail_msg("got %.17g, want %.17g", got, want);
}

/* Percentile f of x_i = a + h·i (i < n) is a + h·f·(n − 1) by the rank-interpolation rule; the median
 * of an even count is the mean of the two middle values. */
static void test_percentile_rule(void **state)
{
    (void)state;
    const double a = -3.25, h = 0.125, fs[] = { 0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1 };
    for (size_t n = 1; n <= 40; n++) {
        double x[40];
        for (size_t i = 0; i < n; i++) x[i] = a + h * (double)i;
        for (size_t k = 0; k < sizeof fs / sizeof fs[0]; k++)
            assert_near(ppl_percentile(x, n, fs[k]), a + h * fs[k] * (double)(n - 1), 1e-12);
        double median = n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
        assert_near(ppl_percentile(x, n, 0.5), median, 1e-12);
        assert_true(ppl_percentile(x, n, 0) == x[0] && ppl_percentile(x, n, 1) == x[n - 1]);
    }
    assert_true(ppl_percentile(NULL, 0, 0.5) == 0);
}

/* A uniform base against q_i ∝ i + 1: KL(uniform || q) = Σ (1/V)(ln(1/V) − ln q_i), nll_base = ln V,
 * Δp = q_t − 1/V; the base's argmax is its first index, the model's the last. A second token where both
 * are the same distribution (one shifted by a constant): KL 0, Δp 0, same top. */
static void test_known_distributions(void **state)
{
    (void)state;
    float base[V], model[V], shifted[V];
    double zq = 0, kl = 0;
    for (int i = 0; i < V; i++) zq += i + 1;
    for (int i = 0; i < V; i++) {
        base[i] = 0.75f;
        model[i] = (float)log(i + 1.0);
        shifted[i] = model[i] + 4.0f;
        kl += (1.0 / V) * (log(1.0 / V) - log((i + 1) / zq));
    }
    ppl_stats s;
    assert_true(ppl_stats_init(&s, 2, true));
    const int32_t t = 5;
    ppl_stats_add(&s, model, base, V, t);
    ppl_stats_add(&s, shifted, model, V, t);
    ppl_stats_add(&s, shifted, model, V, t);   /* the store is full: ignored */
    assert_int_equal(s.n, 2);
    assert_near(s.nll[0], -log((t + 1) / zq), 1e-6);
    assert_near(s.nll_base[0], log((double)V), 1e-6);
    assert_near(s.kl[0], kl, 1e-5);
    assert_true(s.kl[1] < 1e-6);
    assert_int_equal(s.same_top[0], 0);
    assert_int_equal(s.same_top[1], 1);
    ppl_summary su;
    assert_true(ppl_stats_summary(&s, &su));
    double dp0 = (t + 1) / zq - 1.0 / V;
    /* the second token's Δp is zero up to float rounding of the shifted logits */
    assert_true(fabs(su.dp.max - (0.0 > dp0 ? 0.0 : dp0)) < 1e-6);
    assert_true(fabs(su.dp.min - (0.0 < dp0 ? 0.0 : dp0)) < 1e-6);
    assert_near(su.kl.max, kl, 1e-5);
    assert_near(su.top1, 0.5, 0);
    ppl_stats_free(&s);
}

/* Deterministic pseudo-random logits (an LCG), spread like a trained model's. */
static float next_logit(uint64_t *st)
{
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*st >> 11) / 9007199254740992.0 * 6.0 - 3.0);
}

static void log_softmax_ref(const float *x, double *out)
{
    double z = 0;
    for (int i = 0; i < V; i++) z += exp((double)x[i]);
    for (int i = 0; i < V; i++) out[i] = (double)x[i] - log(z);
}

static int argmax_ref(const float *x)
{
    int m = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[m]) m = i;
    return m;
}

static double mean_ref(const double *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    return s / (double)n;
}

/* Sample standard deviation over √n: the standard error of the mean. */
static double sem_ref(const double *x, size_t n)
{
    double m = mean_ref(x, n), v = 0;
    for (size_t i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    return sqrt(v / (double)(n - 1)) / sqrt((double)n);
}

static double pearson_ref(const double *x, const double *y, size_t n)
{
    double mx = mean_ref(x, n), my = mean_ref(y, n), sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < n; i++) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
        syy += (y[i] - my) * (y[i] - my);
    }
    return sxy / sqrt(sxx * syy);
}

/* Insertion sort, then the value at rank f·(n − 1) interpolated: the percentile written out again. */
static double percentile_ref(const double *x, size_t n, double f)
{
    double *y = malloc(n * sizeof *y);
    assert_non_null(y);
    for (size_t i = 0; i < n; i++) {
        size_t j = i;
        for (; j > 0 && y[j - 1] > x[i]; j--) y[j] = y[j - 1];
        y[j] = x[i];
    }
    double r = f * (double)(n - 1), w = r - floor(r);
    size_t lo = (size_t)floor(r), hi = lo + 1 < n ? lo + 1 : lo;
    double v = (1 - w) * y[lo] + w * y[hi];
    free(y);
    return v;
}

typedef struct per_token {
    double nll[N_TOK], nll_base[N_TOK], d_nll[N_TOK], kl[N_TOK], dp[N_TOK], dp2[N_TOK];
    size_t same;
} per_token;

/* Feed N_TOK random token pairs (the model a perturbed copy of the base) to s and recompute each token's
 * figures here. */
static void random_case(ppl_stats *s, per_token *r)
{
    uint64_t st = 44;
    r->same = 0;
    for (size_t k = 0; k < N_TOK; k++) {
        float base[V], model[V];
        double lb[V], lm[V];
        for (int i = 0; i < V; i++) {
            base[i] = next_logit(&st);
            model[i] = base[i] + 0.3f * next_logit(&st);
        }
        int32_t t = (int32_t)(st >> 40) % V;
        ppl_stats_add(s, model, base, V, t);
        log_softmax_ref(base, lb);
        log_softmax_ref(model, lm);
        r->nll[k] = -lm[t];
        r->nll_base[k] = -lb[t];
        r->d_nll[k] = r->nll[k] - r->nll_base[k];
        r->kl[k] = 0;
        for (int i = 0; i < V; i++) r->kl[k] += exp(lb[i]) * (lb[i] - lm[i]);
        r->dp[k] = exp(lm[t]) - exp(lb[t]);
        r->dp2[k] = r->dp[k] * r->dp[k];
        r->same += argmax_ref(model) == argmax_ref(base);
    }
}

static void check_percentiles(const ppl_percentiles *p, const double *x, size_t n)
{
    const double got[] = { p->min, p->p0_1, p->p1, p->p5, p->p10, p->p25, p->median, p->p75, p->p90, p->p95,
                           p->p99, p->p99_9, p->max };
    const double fs[] = { 0, 0.001, 0.01, 0.05, 0.10, 0.25, 0.5, 0.75, 0.90, 0.95, 0.99, 0.999, 1 };
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) assert_near(got[i], percentile_ref(x, n, fs[i]), 1e-6);
}

static void test_summary_random(void **state)
{
    (void)state;
    ppl_stats s;
    static per_token r;
    assert_true(ppl_stats_init(&s, N_TOK, true));
    random_case(&s, &r);
    ppl_summary su;
    assert_true(ppl_stats_summary(&s, &su));
    const size_t n = N_TOK;
    double ppl = exp(mean_ref(r.nll, n)), ppl_b = exp(mean_ref(r.nll_base, n));
    assert_int_equal(su.n, n);
    assert_near(su.ppl, ppl, 1e-6);
    assert_near(su.ppl_err, ppl * sem_ref(r.nll, n), 1e-5);
    assert_near(su.ppl_base, ppl_b, 1e-6);
    assert_near(su.ppl_base_err, ppl_b * sem_ref(r.nll_base, n), 1e-5);
    /* the ln-ratio error from two variances and a covariance is the standard error of the difference */
    assert_near(su.ln_ratio, mean_ref(r.d_nll, n), 1e-5);
    assert_near(su.ln_ratio_err, sem_ref(r.d_nll, n), 1e-5);
    assert_near(su.ratio, ppl / ppl_b, 1e-5);
    assert_near(su.ratio_err, ppl / ppl_b * sem_ref(r.d_nll, n), 1e-5);
    assert_near(su.diff, ppl - ppl_b, 1e-5);
    double cor = pearson_ref(r.nll, r.nll_base, n), e = sem_ref(r.nll, n), eb = sem_ref(r.nll_base, n);
    assert_near(su.nll_cor, cor, 1e-6);
    assert_near(su.diff_err, sqrt(ppl * ppl * e * e + ppl_b * ppl_b * eb * eb - 2 * ppl * ppl_b * cor * e * eb),
                1e-5);
    assert_near(su.kl_mean, mean_ref(r.kl, n), 1e-5);
    assert_near(su.kl_err, sem_ref(r.kl, n), 1e-4);
    check_percentiles(&su.kl, r.kl, n);
    assert_near(su.dp_mean, mean_ref(r.dp, n), 1e-5);
    assert_near(su.dp_err, sem_ref(r.dp, n), 1e-5);
    double rms = sqrt(mean_ref(r.dp2, n));
    assert_near(su.dp_rms, rms, 1e-5);
    assert_near(su.dp_rms_err, 0.5 / rms * sem_ref(r.dp2, n), 1e-5);
    check_percentiles(&su.dp, r.dp, n);
    double f = (double)r.same / (double)n;
    assert_true(r.same > 0 && r.same < n);
    assert_near(su.top1, f, 1e-15);
    assert_near(su.top1_err, sqrt(f * (1 - f) / (double)(n - 1)), 1e-12);
    ppl_stats_free(&s);
}

/* Without a base only the perplexity is summarized, and nothing needs memory. */
static void test_no_base(void **state)
{
    (void)state;
    ppl_stats s;
    assert_true(ppl_stats_init(&s, 4, false));
    float lg[V];
    for (int i = 0; i < V; i++) lg[i] = 0;
    for (int k = 0; k < 4; k++) ppl_stats_add(&s, lg, NULL, V, k);
    ppl_summary su;
    assert_true(ppl_stats_summary(&s, &su));
    assert_near(su.ppl, (double)V, 1e-6);   /* a uniform model's perplexity is its vocabulary size */
    assert_near(su.ppl_err, 0, 0);
    ppl_stats_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_percentile_rule),
        cmocka_unit_test(test_known_distributions),
        cmocka_unit_test(test_summary_random),
        cmocka_unit_test(test_no_base),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
