/* ppl_stats.h — the statistics `qmap perplexity` reports, from per-token values: perplexity with its
 * standard error, and against a base model the KL divergence distribution, top-1 agreement and the
 * perplexity ratio — the figures llama.cpp's perplexity tool prints, computed the same way, so results can
 * be set beside theirs.
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

typedef struct ppl_summary {
    size_t n;
    double ppl, ppl_err;            /* exp(mean nll) and ppl × standard error of the mean nll */
    double nll_mean;
    /* with a base: */
    double ppl_base, ppl_base_err;
    double ln_ratio, ln_ratio_err;  /* mean(nll - nll_base) = ln(PPL / PPL_base), standard error of the mean */
    double kl_mean, kl_err, kl_median, kl_p90, kl_p99, kl_p999, kl_max;
    double top1, top1_err;          /* fraction of tokens whose argmax agrees, binomial standard error */
} ppl_summary;

/* Allocate room for `cap` tokens. false if out of memory (nothing to free then but ppl_stats_free). */
bool ppl_stats_init(ppl_stats *s, size_t cap, bool with_base);
void ppl_stats_free(ppl_stats *s);

/* One scored token. `logits` and (with a base) `base_logits`: n_vocab floats each; `target` the id that
 * follows. Ignores the call when the store is full. */
void ppl_stats_add(ppl_stats *s, const float *logits, const float *base_logits, uint32_t n_vocab, int32_t target);

/* The summary of every token added so far (percentiles sort a copy: allocates, returns false if it cannot;
 * without a base nothing is allocated). */
bool ppl_stats_summary(const ppl_stats *s, ppl_summary *out);

#endif
