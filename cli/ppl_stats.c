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

/* Mean and standard error of the mean (sample variance over n − 1). */
static void mean_err(const double *x, size_t n, double *mean, double *err)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m += x[i];
    m = n ? m / (double)n : 0;
    double v = 0;
    for (size_t i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    *mean = m;
    *err = n > 1 ? sqrt(v / (double)(n - 1) / (double)n) : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile of sorted x by linear interpolation between the closest ranks. */
static double quantile(const double *x, size_t n, double q)
{
    if (!n) return 0;
    double at = q * (double)(n - 1);
    size_t lo = (size_t)at;
    if (lo + 1 >= n) return x[n - 1];
    return x[lo] + (at - (double)lo) * (x[lo + 1] - x[lo]);
}

bool ppl_stats_summary(const ppl_stats *s, ppl_summary *out)
{
    memset(out, 0, sizeof *out);
    size_t n = s->n;
    out->n = n;
    double m, e;
    mean_err(s->nll, n, &m, &e);
    out->nll_mean = m;
    out->ppl = exp(m);
    out->ppl_err = out->ppl * e;
    if (!s->with_base || !n) return true;
    mean_err(s->nll_base, n, &m, &e);
    out->ppl_base = exp(m);
    out->ppl_base_err = out->ppl_base * e;
    double *d = malloc(n * sizeof *d);
    if (!d) return false;
    for (size_t i = 0; i < n; i++) d[i] = s->nll[i] - s->nll_base[i];
    mean_err(d, n, &out->ln_ratio, &out->ln_ratio_err);
    mean_err(s->kl, n, &out->kl_mean, &out->kl_err);
    memcpy(d, s->kl, n * sizeof *d);
    qsort(d, n, sizeof *d, cmp_double);
    out->kl_median = quantile(d, n, 0.5);
    out->kl_p90 = quantile(d, n, 0.90);
    out->kl_p99 = quantile(d, n, 0.99);
    out->kl_p999 = quantile(d, n, 0.999);
    out->kl_max = d[n - 1];
    free(d);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += s->same_top[i];
    out->top1 = (double)same / (double)n;
    out->top1_err = sqrt(out->top1 * (1 - out->top1) / (double)n);
    return true;
}
