/* ppl_stats.h — the statistics `qmap perplexity` reports, from per-token values: perplexity with its
 * standard error, and against a base model the figures llama-perplexity prints in its KL-divergence mode
 * (llama.cpp tools/perplexity/perplexity.cpp, kl_divergence()), defined as it defines them, so results can
 * be set beside theirs:
 *
 *   - mean ± standard error of a per-token value x over n tokens: mean(x) ± sqrt(var(x) / (n − 1)) with
 *     var the population variance (= the sample standard error of the mean);
 *   - ln(PPL(Q)/PPL(base)) = mean(nll − nll_base), its error from both variances and their covariance
 *     (= the standard error of the per-token difference); PPL(Q)/PPL(base) = exp of it, error × the ratio;
 *     PPL(Q) − PPL(base) with the error sqrt(e_Q² + e_base² − 2 PPL(Q) PPL(base) cov); the correlation of
 *     the two per-token nll series;
 *   - KL(base || Q) per token over the whole vocabulary, its mean ± error and its percentiles;
 *   - Δp = p_Q(target) − p_base(target) per token: mean ± error, RMS = sqrt(mean(Δp²)) ± 0.5 / RMS × the
 *     error of mean(Δp²), and its percentiles;
 *   - same top: the fraction of tokens whose argmax (first index of the largest logit) agrees, ± sqrt(f (1 −
 *     f) / (n − 1));
 *   - percentile f of n sorted values: linear interpolation at rank f (n − 1), the lowest value at f = 0, the
 *     highest at 1 (llama.cpp's `percentile`, numpy's default); the median is the middle value or the mean
 *     of the two middle ones, which is the same rule at f = 0.5.
 *
 * One difference: llama.cpp's KL skips the vocabulary entries whose base log-probability is below −16 (its
 * logits file stores 16-bit log-probabilities over a 16-nat range); qmap sums every entry, since its base
 * log-probabilities are float32 or come from the base model itself. The skipped terms are below 1.2e-7 each.
 *
 * The caller sizes the store once (every scored token of the run) and adds one record per token; nothing
 * is allocated per token. Ownership: ppl_stats owns its arrays; ppl_stats_free releases them.
 */
#ifndef QM_CLI_PPL_STATS_H
#define QM_CLI_PPL_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ppl_stats {
    size_t n, cap;
    bool with_base;
    double *nll;        /* -log p(target) of the model, per scored token */
    double *nll_base;   /* the same for the base model (with_base) */
    double *kl;         /* KL(base || model) over the whole vocabulary, nats (with_base) */
    uint8_t *same_top;  /* 1 where both models' argmax agree (with_base) */
} ppl_stats;

/* The percentiles reported of a per-token distribution (KL and Δp alike). */
typedef struct ppl_percentiles {
    double min, p0_1, p1, p5, p10, p25, median, p75, p90, p95, p99, p99_9, max;
} ppl_percentiles;

typedef struct ppl_summary {
    size_t n;
    double ppl, ppl_err;            /* exp(mean nll) and ppl × standard error of the mean nll */
    double nll_mean;
    /* with a base: */
    double ppl_base, ppl_base_err;
    double ln_ratio, ln_ratio_err;  /* ln(PPL / PPL_base) = mean(nll − nll_base) */
    double ratio, ratio_err;        /* PPL / PPL_base */
    double diff, diff_err;          /* PPL − PPL_base */
    double nll_cor;                 /* correlation of the per-token nll of model and base */
    double kl_mean, kl_err;
    ppl_percentiles kl;
    double dp_mean, dp_err;         /* Δp = p(target) − p_base(target) */
    double dp_rms, dp_rms_err;
    ppl_percentiles dp;
    double top1, top1_err;          /* same top: fraction of tokens whose argmax agrees */
} ppl_summary;

/* Allocate room for `cap` tokens. false if out of memory (nothing to free then but ppl_stats_free). */
bool ppl_stats_init(ppl_stats *s, size_t cap, bool with_base);
void ppl_stats_free(ppl_stats *s);

/* One scored token. `logits` and (with a base) `base_logits`: n_vocab floats each (logits or
 * log-probabilities: only their softmax counts); `target` the id that follows. Ignores the call when the
 * store is full. */
void ppl_stats_add(ppl_stats *s, const float *logits, const float *base_logits, uint32_t n_vocab, int32_t target);

/* The summary of every token added so far. With a base the percentiles sort a copy: allocates, returns
 * false if it cannot; without one nothing is allocated. */
bool ppl_stats_summary(const ppl_stats *s, ppl_summary *out);

/* Percentile f (0..1) of n ascending values, as defined above (0 for n = 0). */
double ppl_percentile(const double *sorted, size_t n, double f);

#endif
