/* qr_tok_bpe.c — the tokenizer's tables (string → id, merge ranks) and the one BPE merge engine. */
#include <stdlib.h>
#include <string.h>

#include "qr_tok_internal.h"

/* FNV-1a 64: token strings are short, and the table is built once. */
static uint64_t hash_str(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t hash_pair(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static uint32_t table_size(uint64_t n)
{
    uint32_t s = 16;
    while (s < 2 * n && s < (1u << 30)) s <<= 1;
    return s;
}

int32_t qr_tok_lookup(const qr_tokenizer *t, const char *s, size_t n)
{
    for (uint64_t i = hash_str(s, n) & t->table_mask;; i = (i + 1) & t->table_mask) {
        uint32_t id = t->table[i];
        if (id == UINT32_MAX) return -1;
        if (t->len[id] == n && !memcmp(t->str[id], s, n)) return (int32_t)id;
    }
}

/* The slot of pair k in the merge table (where it is, or the empty slot where it would go). */
static uint32_t merge_slot(const qr_tokenizer *t, uint64_t k)
{
    uint32_t i = (uint32_t)(hash_pair(k) & t->merge_mask);
    while (t->merge_key[i] != UINT64_MAX && t->merge_key[i] != k) i = (i + 1) & t->merge_mask;
    return i;
}

qm_status qr_tok_build_tables(qr_tokenizer *t, const qm_meta *merges, const char *path, qm_error *err)
{
    uint32_t size = table_size(t->n);
    t->table = malloc((size_t)size * sizeof *t->table);
    if (!t->table) return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory");
    memset(t->table, 0xff, (size_t)size * sizeof *t->table);
    t->table_mask = size - 1;
    for (uint32_t id = 0; id < t->n; id++) {   /* ascending: a string given twice keeps its lowest id */
        uint64_t i = hash_str(t->str[id], t->len[id]) & t->table_mask;
        for (;; i = (i + 1) & t->table_mask) {
            uint32_t o = t->table[i];
            if (o == UINT32_MAX) { t->table[i] = id; break; }
            if (t->len[o] == t->len[id] && !memcmp(t->str[o], t->str[id], t->len[id])) break;
        }
    }
    uint64_t n_merges = merges ? merges->count : 0;
    uint32_t msize = table_size(n_merges);
    t->merge_key = malloc((size_t)msize * sizeof *t->merge_key);
    t->merge_rank = malloc((size_t)msize * sizeof *t->merge_rank);
    t->merge_result = malloc((size_t)msize * sizeof *t->merge_result);
    if (!t->merge_key || !t->merge_rank || !t->merge_result)
        return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory");
    memset(t->merge_key, 0xff, (size_t)msize * sizeof *t->merge_key);
    t->merge_mask = msize - 1;
    char buf[1 << 17];
    for (uint64_t r = 0; r < n_merges; r++) {
        const char *s;
        uint64_t n;
        qm_status st = qm_meta_array_string(merges, r, &s, &n);
        if (st != QM_OK) return qm_fail(err, st, path, merges->key, merges->entry_offset, "merge %llu unreadable",
                                        (unsigned long long)r);
        const char *sp = memchr(s, ' ', (size_t)n);
        int32_t a = -1, b = -1, c = -1;
        if (sp && sp > s && sp + 1 < s + n && n <= sizeof buf) {
            a = qr_tok_lookup(t, s, (size_t)(sp - s));
            b = qr_tok_lookup(t, sp + 1, (size_t)(s + n - sp - 1));
            memcpy(buf, s, (size_t)(sp - s));
            memcpy(buf + (sp - s), sp + 1, (size_t)(s + n - sp - 1));
            c = qr_tok_lookup(t, buf, (size_t)n - 1);
        }
        if (a < 0 || b < 0 || c < 0)
            return qm_fail(err, QM_ERR_BAD_CONFIG, path, merges->key, merges->entry_offset,
                           "merge %llu \"%.*s\" is not two tokens whose concatenation is a token (spec/TOKENIZER.md §1)",
                           (unsigned long long)r, (int)(n > 80 ? 80 : n), s);
        uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        uint32_t i = merge_slot(t, k);
        if (t->merge_key[i] == k) continue;   /* a repeated merge keeps its first (lowest) rank */
        t->merge_key[i] = k;
        t->merge_rank[i] = (uint32_t)r;
        t->merge_result[i] = (uint32_t)c;
    }
    return QM_OK;
}

bool qr_bpe_reserve(qr_bpe_work *w, size_t n)
{
    if (n <= w->cap) return true;
    size_t cap = w->cap ? w->cap : 256;
    while (cap < n) cap *= 2;
    int32_t *id = realloc(w->id, cap * sizeof *id);
    if (id) w->id = id;
    int32_t *prev = realloc(w->prev, cap * sizeof *prev);
    if (prev) w->prev = prev;
    int32_t *next = realloc(w->next, cap * sizeof *next);
    if (next) w->next = next;
    uint64_t *heap = realloc(w->heap, 3 * cap * sizeof *heap);   /* n - 1 pairs, then at most 2 per merge */
    if (heap) w->heap = heap;
    if (!id || !prev || !next || !heap) return false;
    w->cap = cap;
    return true;
}

void qr_bpe_free(qr_bpe_work *w)
{
    free(w->id);
    free(w->prev);
    free(w->next);
    free(w->heap);
    memset(w, 0, sizeof *w);
}

/* A binary min-heap of (rank << 32 | position): the lowest rank first, then the leftmost pair, as the
 * reference BPE merges. Stale entries (a side already merged away) are skipped when popped. */
static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i && h[(i - 1) / 2] > v) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

/* Push the pair starting at symbol p if it has a merge. */
static void push_pair(const qr_tokenizer *t, qr_bpe_work *w, size_t *hn, int32_t p)
{
    int32_t q = w->next[p];
    if (q < 0) return;
    uint64_t k = (uint64_t)(uint32_t)w->id[p] << 32 | (uint32_t)w->id[q];
    uint32_t i = merge_slot(t, k);
    if (t->merge_key[i] == k) heap_push(w->heap, hn, (uint64_t)t->merge_rank[i] << 32 | (uint32_t)p);
}

size_t qr_bpe_merge(const qr_tokenizer *t, qr_bpe_work *w, size_t n)
{
    if (n < 2) return n;
    for (size_t i = 0; i < n; i++) {
        w->prev[i] = (int32_t)i - 1;
        w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, w, &hn, (int32_t)i);
    while (hn) {
        uint64_t top = heap_pop(w->heap, &hn);
        int32_t p = (int32_t)(uint32_t)top, q = w->next[p];
        if (w->id[p] < 0 || q < 0) continue;                 /* p was merged into its left neighbour */
        uint64_t k = (uint64_t)(uint32_t)w->id[p] << 32 | (uint32_t)w->id[q];
        uint32_t i = merge_slot(t, k);
        if (t->merge_key[i] != k || t->merge_rank[i] != (uint32_t)(top >> 32)) continue;   /* stale */
        w->id[p] = (int32_t)t->merge_result[i];
        w->id[q] = -1;
        w->next[p] = w->next[q];
        if (w->next[q] >= 0) w->prev[w->next[q]] = p;
        if (w->prev[p] >= 0) push_pair(t, w, &hn, w->prev[p]);
        push_pair(t, w, &hn, p);
    }
    size_t m = 0;
    for (int32_t p = 0; p >= 0; p = w->next[p]) w->id[m++] = w->id[p];
    return m;
}
