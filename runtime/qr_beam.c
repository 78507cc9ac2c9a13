/* qr_beam.c — beam search bookkeeping (qr_beam.h has the rule). */
#include "qr_beam.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    float score;
    uint32_t hyp;
    int32_t tok;
} cand;

struct qr_beam {
    qr_beam_params p;
    uint32_t n_active, step, n_fin, fin_cap, n_cand_cap;
    bool done;
    int32_t *hist, *hist_alt;        /* [beam][max_steps] */
    float *cum, *cum_alt;            /* [beam] */
    int32_t *last;                   /* [beam] */
    uint32_t *parent;                /* [beam] */
    cand *heap;                      /* [n_cand_cap] min-heap of the best candidates */
    int32_t *fin_tok;                /* [fin_cap][max_steps] */
    uint32_t *fin_len, *order;       /* [fin_cap] */
    float *fin_score, *fin_lp;       /* [fin_cap] */
};

void qr_beam_free(qr_beam *b)
{
    if (!b) return;
    free(b->hist);
    free(b->hist_alt);
    free(b->cum);
    free(b->cum_alt);
    free(b->last);
    free(b->parent);
    free(b->heap);
    free(b->fin_tok);
    free(b->fin_len);
    free(b->order);
    free(b->fin_score);
    free(b->fin_lp);
    free(b);
}

qm_status qr_beam_new(const qr_beam_params *p, qr_beam **out, qm_error *err)
{
    *out = NULL;
    if (p->beam < 1 || p->beam > 1024 || p->max_steps < 1 || p->max_steps > (1u << 20) || p->vocab < 1 ||
        p->eos >= (int64_t)p->vocab || !(p->length_penalty >= 0) || !isfinite(p->length_penalty))
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET,
                       "beam search: beam %u (1 .. 1024), %u steps, vocabulary %u, eos %d, length penalty %g",
                       p->beam, p->max_steps, p->vocab, p->eos, (double)p->length_penalty);
    qr_beam *b = calloc(1, sizeof *b);
    if (!b) return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    b->p = *p;
    size_t K = p->beam, T = p->max_steps;
    b->n_cand_cap = 2 * p->beam;     /* enough: at most beam EOS candidates can come before beam others */
    b->fin_cap = 3 * p->beam;
    b->hist = malloc(K * T * sizeof *b->hist);
    b->hist_alt = malloc(K * T * sizeof *b->hist_alt);
    b->cum = malloc(K * sizeof *b->cum);
    b->cum_alt = malloc(K * sizeof *b->cum_alt);
    b->last = malloc(K * sizeof *b->last);
    b->parent = malloc(K * sizeof *b->parent);
    b->heap = malloc(b->n_cand_cap * sizeof *b->heap);
    b->fin_tok = malloc((size_t)b->fin_cap * T * sizeof *b->fin_tok);
    b->fin_len = malloc(b->fin_cap * sizeof *b->fin_len);
    b->order = malloc(b->fin_cap * sizeof *b->order);
    b->fin_score = malloc(b->fin_cap * sizeof *b->fin_score);
    b->fin_lp = malloc(b->fin_cap * sizeof *b->fin_lp);
    if (!b->hist || !b->hist_alt || !b->cum || !b->cum_alt || !b->last || !b->parent || !b->heap || !b->fin_tok ||
        !b->fin_len || !b->order || !b->fin_score || !b->fin_lp) {
        qr_beam_free(b);
        return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    }
    *out = b;
    return QM_OK;
}

void qr_beam_start(qr_beam *b)
{
    b->n_active = 1;
    b->step = 0;
    b->n_fin = 0;
    b->done = false;
    b->cum[0] = 0;
    b->last[0] = -1;
}

uint32_t qr_beam_active(const qr_beam *b) { return b->n_active; }
const int32_t *qr_beam_last_tokens(const qr_beam *b) { return b->last; }

/* a ranks before c: higher score; ties: lower hypothesis, then lower token */
static bool better(const cand *a, const cand *c)
{
    if (a->score != c->score) return a->score > c->score;
    if (a->hyp != c->hyp) return a->hyp < c->hyp;
    return a->tok < c->tok;
}

/* min-heap by `better`: the root is the worst kept candidate */
static void sift_down(cand *h, uint32_t n, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(&h[w], &h[l])) w = l;
        if (r < n && better(&h[w], &h[r])) w = r;
        if (w == i) return;
        cand t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

static void sift_up(cand *h, uint32_t i)
{
    while (i > 0) {
        uint32_t up = (i - 1) / 2;
        if (!better(&h[up], &h[i])) return;
        cand t = h[i]; h[i] = h[up]; h[up] = t;
        i = up;
    }
}

static int by_rank(const void *x, const void *y)
{
    const cand *a = x, *c = y;
    return better(a, c) ? -1 : better(c, a) ? 1 : 0;
}

static void finish(qr_beam *b, const int32_t *tokens, uint32_t len, uint32_t norm_len, float lp)
{
    if (b->n_fin == b->fin_cap) return;  /* cannot happen with the caps above; kept as a guard */
    uint32_t f = b->n_fin++;
    memcpy(b->fin_tok + (size_t)f * b->p.max_steps, tokens, len * sizeof *tokens);
    b->fin_len[f] = len;
    b->fin_lp[f] = lp;
    b->fin_score[f] = lp / powf((float)(norm_len ? norm_len : 1), b->p.length_penalty);
}

int qr_beam_step(qr_beam *b, float *logits, const uint32_t **parent)
{
    const uint32_t V = b->p.vocab, K = b->p.beam, T = b->p.max_steps;
    uint32_t n_heap = 0;
    for (uint32_t h = 0; h < b->n_active; h++) {
        float *row = logits + (size_t)h * V;
        /* log-softmax: x − max − log Σ exp(x − max) */
        float mx = row[0];
        for (uint32_t v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
        double sum = 0;
        for (uint32_t v = 0; v < V; v++) sum += exp((double)row[v] - mx);
        float lse = (float)(mx + log(sum));
        for (uint32_t v = 0; v < V; v++) {
            cand c = { b->cum[h] + (row[v] - lse), h, (int32_t)v };
            if (n_heap < b->n_cand_cap) {
                b->heap[n_heap] = c;
                sift_up(b->heap, n_heap++);
            } else if (better(&c, &b->heap[0])) {
                b->heap[0] = c;
                sift_down(b->heap, n_heap, 0);
            }
        }
    }
    qsort(b->heap, n_heap, sizeof *b->heap, by_rank);
    uint32_t n_next = 0;
    for (uint32_t i = 0; i < n_heap && n_next < K; i++) {
        const cand *c = &b->heap[i];
        const int32_t *prefix = b->hist + (size_t)c->hyp * T;
        if (c->tok == b->p.eos) {
            finish(b, prefix, b->step, b->step + 1, c->score);
            continue;
        }
        int32_t *dst = b->hist_alt + (size_t)n_next * T;
        memcpy(dst, prefix, b->step * sizeof *dst);
        dst[b->step] = c->tok;
        b->cum_alt[n_next] = c->score;
        b->last[n_next] = c->tok;
        b->parent[n_next] = c->hyp;
        n_next++;
    }
    int32_t *th = b->hist; b->hist = b->hist_alt; b->hist_alt = th;
    float *tc = b->cum; b->cum = b->cum_alt; b->cum_alt = tc;
    b->n_active = n_next;
    b->step++;
    *parent = b->parent;
    if (b->n_fin >= K || n_next == 0) b->done = true;
    else if (b->step >= T) {
        for (uint32_t h = 0; h < n_next; h++) finish(b, b->hist + (size_t)h * T, T, T, b->cum[h]);
        b->done = true;
    }
    if (b->done) {
        /* rank the finished ones once */
        for (uint32_t i = 0; i < b->n_fin; i++) b->order[i] = i;
        for (uint32_t i = 1; i < b->n_fin; i++)      /* insertion sort: a few entries; stable on ties */
            for (uint32_t j = i; j > 0 && b->fin_score[b->order[j]] > b->fin_score[b->order[j - 1]]; j--) {
                uint32_t t = b->order[j]; b->order[j] = b->order[j - 1]; b->order[j - 1] = t;
            }
    }
    return b->done ? 1 : 0;
}

uint32_t qr_beam_n_finished(const qr_beam *b) { return b->done ? b->n_fin : 0; }

const int32_t *qr_beam_result(const qr_beam *b, uint32_t i, uint32_t *n_tokens, float *score, float *log_prob)
{
    if (!b->done || i >= b->n_fin) return NULL;
    uint32_t f = b->order[i];
    if (n_tokens) *n_tokens = b->fin_len[f];
    if (score) *score = b->fin_score[f];
    if (log_prob) *log_prob = b->fin_lp[f];
    return b->fin_tok + (size_t)f * b->p.max_steps;
}
