/* qr_sample.c — logits -> id (contract and order of the steps in qr_sample.h).
 *
 * Every buffer is allocated in qr_sampler_new; qr_sampler_sample only writes into them, and its sorting is
 * our own heap (libc's qsort may allocate), so a decode loop allocates nothing.
 */
#include "qr_sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct qr_cand {
    float logit;
    int32_t id;
} qr_cand;

struct qr_sampler {
    qr_sampler_params p;
    uint32_t n_vocab;
    float *work;             /* [n_vocab] logits after the penalty */
    qr_cand *cand;           /* [n_vocab] candidates */
    double *prob;            /* [n_vocab] probabilities of the candidates */
    uint8_t *mark;           /* [n_vocab] 1 while an id's penalty is applied (zero between calls) */
    int32_t *hist;           /* [repeat_last_n] ring of accepted ids */
    uint32_t hist_len, hist_head;
    uint64_t rng[4];         /* xoshiro256** state */
};

/* ---- random numbers: xoshiro256** (Blackman & Vigna), seeded through splitmix64 ------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* uniform in [0, 1) with 53 random bits */
static double uniform01(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

static void seed_rng(qr_sampler *s)
{
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);   /* never all zero: splitmix64 is a bijection */
}

/* ---- parameters and lifetime -------------------------------------------------------------------------- */

void qr_sampler_params_default(qr_sampler_params *p)
{
    p->temp = 0.8f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->seed = 0;
}

#define QR_SAMPLER_MAX_HISTORY (1u << 20)

qm_status qr_sampler_new(const qr_sampler_params *p, uint32_t n_vocab, qr_sampler **out, qm_error *err)
{
    *out = NULL;
    const char *bad = NULL;
    if (n_vocab == 0 || n_vocab > (uint32_t)INT32_MAX) bad = "n_vocab must be in [1, 2^31)";
    else if (isnan(p->temp)) bad = "temp is NaN";
    else if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) bad = "top_p must be in (0, 1]";
    else if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) bad = "min_p must be in [0, 1]";
    else if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty)) bad = "repeat_penalty must be finite and > 0";
    else if (p->repeat_last_n > QR_SAMPLER_MAX_HISTORY) bad = "repeat_last_n above 2^20";
    if (bad) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, "sampler", QM_NO_OFFSET, "%s", bad);

    qr_sampler *s = calloc(1, sizeof *s);
    if (!s) return qm_fail(err, QM_ERR_NOMEM, NULL, "sampler", QM_NO_OFFSET, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->prob = malloc((size_t)n_vocab * sizeof *s->prob);
    s->mark = calloc(n_vocab, 1);
    s->hist = malloc(((size_t)p->repeat_last_n + 1) * sizeof *s->hist);
    if (!s->work || !s->cand || !s->prob || !s->mark || !s->hist) {
        qr_sampler_free(s);
        return qm_fail(err, QM_ERR_NOMEM, NULL, "sampler", QM_NO_OFFSET, "out of memory for %u logits", n_vocab);
    }
    seed_rng(s);
    *out = s;
    return QM_OK;
}

void qr_sampler_free(qr_sampler *s)
{
    if (!s) return;
    free(s->work);
    free(s->cand);
    free(s->prob);
    free(s->mark);
    free(s->hist);
    free(s);
}

void qr_sampler_reset(qr_sampler *s)
{
    s->hist_len = s->hist_head = 0;
    seed_rng(s);
}

void qr_sampler_accept(qr_sampler *s, int32_t id)
{
    if (id < 0 || (uint32_t)id >= s->n_vocab || s->p.repeat_last_n == 0) return;
    s->hist[s->hist_head] = id;
    s->hist_head = (s->hist_head + 1) % s->p.repeat_last_n;
    if (s->hist_len < s->p.repeat_last_n) s->hist_len++;
}

/* ---- the steps ---------------------------------------------------------------------------------------- */

/* Candidate a ranks before b: larger logit, then smaller id (a total order, so every step is deterministic). */
static inline bool before(const qr_cand *a, const qr_cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/* Sift down in a heap whose root is the candidate that ranks last. */
static void sift_down(qr_cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && before(&h[w], &h[l])) w = l;
        if (r < n && before(&h[w], &h[r])) w = r;
        if (w == i) return;
        qr_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Sift down in a heap whose root is the candidate that ranks first. */
static void sift_down_best(qr_cand *h, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && before(&h[l], &h[w])) w = l;
        if (r < n && before(&h[r], &h[w])) w = r;
        if (w == i) return;
        qr_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Keep the k best of c[0..n) in c[0..k), sorted best first. A heap of k whose root is the worst kept:
 * each other candidate costs one comparison unless it displaces the root (O(n log k)); then heapsort
 * of the k. */
static void top_k_sorted(qr_cand *c, size_t n, size_t k)
{
    for (size_t i = k / 2; i-- > 0;) sift_down(c, k, i);
    for (size_t i = k; i < n; i++) {
        if (before(&c[i], &c[0])) {
            c[0] = c[i];
            sift_down(c, k, 0);
        }
    }
    for (size_t end = k; end > 1; end--) {   /* worst to the back: best-first order */
        qr_cand t = c[0];
        c[0] = c[end - 1];
        c[end - 1] = t;
        sift_down(c, end - 1, 0);
    }
}

static void apply_penalty(qr_sampler *s)
{
    float pen = s->p.repeat_penalty;
    if (pen == 1.0f || s->hist_len == 0) return;
    for (uint32_t i = 0; i < s->hist_len; i++) {
        int32_t id = s->hist[i];
        if (s->mark[id]) continue;            /* once per distinct id, as llama.cpp */
        s->mark[id] = 1;
        float l = s->work[id];
        s->work[id] = l > 0.0f ? l / pen : l * pen;
    }
    for (uint32_t i = 0; i < s->hist_len; i++) s->mark[s->hist[i]] = 0;
}

static int32_t argmax(const float *x, uint32_t n)
{
    int32_t best = 0;
    float bv = -INFINITY;
    for (uint32_t i = 0; i < n; i++) {
        if (x[i] > bv) {           /* strict: lowest id wins ties; NaN never wins */
            bv = x[i];
            best = (int32_t)i;
        }
    }
    return best;
}

int32_t qr_sampler_sample(qr_sampler *s, const float *logits)
{
    const uint32_t n = s->n_vocab;
    memcpy(s->work, logits, (size_t)n * sizeof *s->work);
    apply_penalty(s);

    int32_t id;
    if (!(s->p.temp > 0.0f)) {
        id = argmax(s->work, n);
        qr_sampler_accept(s, id);
        return id;
    }

    /* 3. top-k (NaN counts as -inf) */
    for (uint32_t i = 0; i < n; i++) {
        float l = s->work[i];
        s->cand[i].logit = isnan(l) ? -INFINITY : l;
        s->cand[i].id = (int32_t)i;
    }
    size_t k = (s->p.top_k <= 0 || (uint32_t)s->p.top_k >= n) ? n : (size_t)s->p.top_k;
    /* top-p over the whole vocabulary: a heap with the best at the root, popped only until the prefix
     * reaches top_p (O(n + kept·log n)) instead of sorting every id */
    const bool lazy_top_p = k == n && s->p.top_p < 1.0f;
    if (k < n) {
        top_k_sorted(s->cand, n, k);
    } else if (lazy_top_p) {
        for (size_t i = n / 2; i-- > 0;) sift_down_best(s->cand, n, i);
    } else { /* no truncation needs the order: keep the best at [0] only, for the softmax maximum */
        size_t b = 0;
        for (size_t i = 1; i < n; i++) if (before(&s->cand[i], &s->cand[b])) b = i;
        qr_cand t = s->cand[0]; s->cand[0] = s->cand[b]; s->cand[b] = t;
    }

    /* 4. probabilities of the candidates at temperature 1: top-p and min-p truncate by these, and the
     * temperature shapes only the final draw (llama.cpp's chain: penalties, top-k, top-p, min-p, temp,
     * dist), so a sampler configured as there keeps the same set. cand[0] holds the largest logit. */
    const double inv_t = 1.0, m = s->cand[0].logit;
    double sum = 0.0;
    if (isinf(m)) {   /* every logit -inf or NaN: nothing to prefer; a +inf: it takes all the mass. The best-ranked. */
        id = s->cand[0].id;
        qr_sampler_accept(s, id);
        return id;
    }
    if (lazy_top_p) {
        for (size_t i = 0; i < n; i++) sum += exp(((double)s->cand[i].logit - m) * inv_t);
        /* 5. pop the best into the back of the array until the popped ones reach top_p */
        double target = (double)s->p.top_p * sum, cum = 0.0;
        size_t end = n, kept = 0;
        while (end > 0) {
            qr_cand best = s->cand[0];
            s->cand[0] = s->cand[end - 1];
            s->cand[--end] = best;
            sift_down_best(s->cand, end, 0);
            kept++;
            cum += exp(((double)best.logit - m) * inv_t);
            if (cum >= target) break;
        }
        /* the kept ids sit at [n - kept, n), best last: reversing the array puts them best first at [0, kept) */
        for (size_t i = 0; i < n / 2; i++) {
            qr_cand t = s->cand[i];
            s->cand[i] = s->cand[n - 1 - i];
            s->cand[n - 1 - i] = t;
        }
        k = kept;
        for (size_t i = 0; i < k; i++) s->prob[i] = exp(((double)s->cand[i].logit - m) * inv_t);
    } else {
        for (size_t i = 0; i < k; i++) {
            double e = exp(((double)s->cand[i].logit - m) * inv_t);
            s->prob[i] = e;
            sum += e;
        }
        /* 5. top-p over the sorted candidates: the smallest prefix reaching top_p */
        if (s->p.top_p < 1.0f) {
            double target = (double)s->p.top_p * sum, cum = 0.0;
            size_t keep = k;
            for (size_t i = 0; i < k; i++) {
                cum += s->prob[i];
                if (cum >= target) { keep = i + 1; break; }
            }
            k = keep;
        }
    }

    /* 6. min-p: p_i >= min_p · p_max (prob[0] is p_max, relative to the same sum); then draw */
    double floor_p = (double)s->p.min_p * s->prob[0];
    double total = 0.0;
    for (size_t i = 0; i < k; i++) {
        if (s->prob[i] < floor_p) s->prob[i] = 0.0;
        total += s->prob[i];
    }
    /* 7. the temperature: the kept candidates reweighted to softmax(logit / temp) */
    if (s->p.temp != 1.0f) {
        const double inv_temp = 1.0 / (double)s->p.temp;
        total = 0.0;
        for (size_t i = 0; i < k; i++) {
            if (s->prob[i] == 0.0) continue;
            s->prob[i] = exp(((double)s->cand[i].logit - m) * inv_temp);
            total += s->prob[i];
        }
    }
    double u = uniform01(s->rng) * total, cum = 0.0;
    id = s->cand[0].id;
    for (size_t i = 0; i < k; i++) {
        if (s->prob[i] == 0.0) continue;
        cum += s->prob[i];
        id = s->cand[i].id;
        if (u < cum) break;
    }
    qr_sampler_accept(s, id);
    return id;
}
