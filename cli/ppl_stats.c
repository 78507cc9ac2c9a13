/* ppl_stats.c — per-token log-probabilities, KL divergence and their summary (see ppl_stats.h). */
#include "ppl_stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

bool ppl_stats_init(ppl_stats *s, size_t cap, bool with_base)
{
    memset(s, 0, sizeof *s);
    s->cap = cap;
    s->with_base = with_base;
    size_t c = cap ? cap : 1;
    s->nll = malloc(c * sizeof *s->nll);
    if (with_base) {
        s->nll_base = malloc(c * sizeof *s->nll_base);
        s->kl = malloc(c * sizeof *s->kl);
        s->same_top = malloc(c);
    }
    return s->nll && (!with_base || (s->nll_base && s->kl && s->same_top));
}

void ppl_stats_free(ppl_stats *s)
{
    free(s->nll);
    free(s->nll_base);
    free(s->kl);
    free(s->same_top);
    memset(s, 0, sizeof *s);
}

/* log Σ exp(x), in double; *argmax gets the first index of the largest entry. */
static double log_sum_exp(const float *x, uint32_t n, uint32_t *argmax)
{
    float mx = x[0];
    uint32_t am = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > mx) { mx = x[i]; am = i; }
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    *argmax = am;
    return mx + log(sum);
}

void ppl_stats_add(ppl_stats *s, const float *logits, const float *base_logits, uint32_t n_vocab, int32_t target)
{
    if (s->n >= s->cap) return;
    uint32_t top, top_base;
    double lse = log_sum_exp(logits, n_vocab, &top);
    s->nll[s->n] = lse - logits[target];
    if (s->with_base) {
        double lse_b = log_sum_exp(base_logits, n_vocab, &top_base);
        s->nll_base[s->n] = lse_b - base_logits[target];
        /* KL(base || model) = Σ p_b (log p_b − log p); log p = logit − lse */
        double kl = 0;
        for (uint32_t i = 0; i < n_vocab; i++) {
            double lpb = base_logits[i] - lse_b;
            kl += exp(lpb) * (lpb - (logits[i] - lse));
        }
        s->kl[s->n] = kl > 0 ? kl : 0;   /* rounding can leave −1e-17 for identical distributions */
        s->same_top[s->n] = top == top_base;
    }
    s->n++;
}

/* Mean and standard error of the mean: sqrt(population variance / (n − 1)), as llama.cpp's
 * mean_and_uncertainty (two passes here, which rounds less than its running sums). */
static void mean_err(const double *x, size_t n, double *mean, double *err)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m += x[i];
    m = n ? m / (double)n : 0;
    double v = 0;
    for (size_t i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    *mean = m;
    *err = n > 1 ? sqrt(v / (double)n / (double)(n - 1)) : 0;
}

/* Population covariance of x and y over n − 1 (the covariance of their means), as llama.cpp's covariance. */
static double mean_covariance(const double *x, const double *y, size_t n, double mx, double my)
{
    if (n < 2) return 0;
    double c = 0;
    for (size_t i = 0; i < n; i++) c += (x[i] - mx) * (y[i] - my);
    return c / (double)n / (double)(n - 1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ppl_percentile(const double *sorted, size_t n, double f)
{
    if (!n) return 0;
    if (f <= 0) return sorted[0];
    if (f >= 1) return sorted[n - 1];
    double at = f * (double)(n - 1);
    size_t lo = (size_t)at;
    if (lo + 1 >= n) return sorted[n - 1];
    double w = at - (double)lo;
    return (1 - w) * sorted[lo] + w * sorted[lo + 1];
}

/* Sort x in place and fill every reported percentile. */
static void percentiles(double *x, size_t n, ppl_percentiles *p)
{
    qsort(x, n, sizeof *x, cmp_double);
    p->min = ppl_percentile(x, n, 0);
    p->p0_1 = ppl_percentile(x, n, 0.001);
    p->p1 = ppl_percentile(x, n, 0.01);
    p->p5 = ppl_percentile(x, n, 0.05);
    p->p10 = ppl_percentile(x, n, 0.10);
    p->p25 = ppl_percentile(x, n, 0.25);
    p->median = ppl_percentile(x, n, 0.5);
    p->p75 = ppl_percentile(x, n, 0.75);
    p->p90 = ppl_percentile(x, n, 0.90);
    p->p95 = ppl_percentile(x, n, 0.95);
    p->p99 = ppl_percentile(x, n, 0.99);
    p->p99_9 = ppl_percentile(x, n, 0.999);
    p->max = ppl_percentile(x, n, 1);
}

/* ln(PPL/PPL_base), PPL/PPL_base and PPL − PPL_base with their errors, and the nll correlation. */
static void ratio_stats(const ppl_stats *s, ppl_summary *o, double e_nll, double m_base, double e_base)
{
    double cov = mean_covariance(s->nll, s->nll_base, s->n, o->nll_mean, m_base);
    o->ln_ratio = o->nll_mean - m_base;
    double v = e_nll * e_nll + e_base * e_base - 2 * cov;
    o->ln_ratio_err = v > 0 ? sqrt(v) : 0;
    o->ratio = exp(o->ln_ratio);
    o->ratio_err = o->ratio * o->ln_ratio_err;
    o->diff = o->ppl - o->ppl_base;
    v = o->ppl_err * o->ppl_err + o->ppl_base_err * o->ppl_base_err - 2 * o->ppl * o->ppl_base * cov;
    o->diff_err = v > 0 ? sqrt(v) : 0;
    o->nll_cor = e_nll > 0 && e_base > 0 ? cov / (e_nll * e_base) : 0;
}

/* Δp = p(target) − p_base(target) per token into d: its mean, RMS and percentiles (sorts d). */
static void delta_p_stats(const ppl_stats *s, double *d, double *d2, ppl_summary *o)
{
    size_t n = s->n;
    for (size_t i = 0; i < n; i++) {
        d[i] = exp(-s->nll[i]) - exp(-s->nll_base[i]);
        d2[i] = d[i] * d[i];
    }
    mean_err(d, n, &o->dp_mean, &o->dp_err);
    double mse, mse_err;
    mean_err(d2, n, &mse, &mse_err);
    o->dp_rms = sqrt(mse);
    o->dp_rms_err = o->dp_rms > 0 ? 0.5 / o->dp_rms * mse_err : 0;
    percentiles(d, n, &o->dp);
}

bool ppl_stats_summary(const ppl_stats *s, ppl_summary *out)
{
    memset(out, 0, sizeof *out);
    size_t n = s->n;
    out->n = n;
    double m, e_nll, e_base;
    mean_err(s->nll, n, &m, &e_nll);
    out->nll_mean = m;
    out->ppl = exp(m);
    out->ppl_err = out->ppl * e_nll;
    if (!s->with_base || !n) return true;
    mean_err(s->nll_base, n, &m, &e_base);
    out->ppl_base = exp(m);
    out->ppl_base_err = out->ppl_base * e_base;
    ratio_stats(s, out, e_nll, m, e_base);
    double *d = malloc(2 * n * sizeof *d);
    if (!d) return false;
    mean_err(s->kl, n, &out->kl_mean, &out->kl_err);
    memcpy(d, s->kl, n * sizeof *d);
    percentiles(d, n, &out->kl);
    delta_p_stats(s, d, d + n, out);
    free(d);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += s->same_top[i];
    out->top1 = (double)same / (double)n;
    out->top1_err = n > 1 ? sqrt(out->top1 * (1 - out->top1) / (double)(n - 1)) : 0;
    return true;
}
