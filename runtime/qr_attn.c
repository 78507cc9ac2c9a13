/* qr_attn.c — causal attention over a KV cache layer (contract in qr_attn.h).
 *
 * Blocks: the query rows of a call are grouped into blocks of up to QR_ATTN_MAX_ROWS rows that share a KV
 * head — the heads of a GQA group at one position, and for small groups several positions — so each key
 * and value row read from the cache serves every row of the block (decode reads the cache once per KV
 * head, not once per query head). The blocks of a call are one job of the session's thread pool
 * (runtime/qr_pool.h), a chunk per block.
 *
 * Tiles: each block walks its keys in tiles of QR_ATTN_TILE positions with an online softmax (running
 * max and sum, the partial output rescaled when the max grows), so the scratch is one tile of scores per
 * thread whatever the context. Tiles start at multiples of QR_ATTN_TILE in absolute positions and keys a
 * row does not see weigh exactly 0, so a row's result depends only on its own query and keys: not on the
 * block it landed in, the batch it came with, or the thread count.
 */
#include "qr_attn.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "qm_cpu.h"
#include "qm_half.h"
#include "qr_attn_kernels.h"

#define QR_ATTN_TILE 64

/* ---- portable inner loops ---------------------------------------------------------------------------- */

/* Eight partial sums: a fixed association, and room for the compiler to vectorise. Key rows are F32 here
 * (rows given directly). */
static void scores_f32_ref(const float *const *q, size_t nr, const float *k, size_t ld, size_t nk, size_t hd,
                           float scale, float *sc, size_t ldsc)
{
    for (size_t t = 0; t < nk; t++) {
        const float *kt = k + t * ld;
        for (size_t r = 0; r < nr; r++) {
            float a[8] = { 0 };
            size_t d = 0;
            for (; d + 8 <= hd; d += 8)
                for (int l = 0; l < 8; l++) a[l] += q[r][d + l] * kt[d + l];
            float s = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
            for (; d < hd; d++) s += q[r][d] * kt[d];
            sc[r * ldsc + t] = scale * s;
        }
    }
}

/* The cache's transposed keys: per key, even dims and odd dims in two chains, as the contract says. */
#define DEFINE_REF(SUFFIX, T, ELEM)                                                                          \
    static void scores_kt_##SUFFIX##_ref(const float *const *q, size_t nr, const T *kt, size_t s0, size_t n,   \
                                         size_t hd, float scale, float *sc, size_t ldsc)                     \
    {                                                                                                        \
        for (size_t i = 0; i < n; i++) {                                                                     \
            const size_t slot = s0 + i;                                                                      \
            const T *k = kt + slot / QR_KV_GROUP * QR_KV_GROUP * hd + slot % QR_KV_GROUP;                    \
            for (size_t r = 0; r < nr; r++) {                                                                \
                float a0 = 0.0f, a1 = 0.0f;                                                                  \
                size_t d = 0;                                                                                \
                for (; d + 2 <= hd; d += 2) {                                                                \
                    a0 += q[r][d] * ELEM(k[d * QR_KV_GROUP]);                                                \
                    a1 += q[r][d + 1] * ELEM(k[(d + 1) * QR_KV_GROUP]);                                      \
                }                                                                                            \
                if (d < hd) a0 += q[r][d] * ELEM(k[d * QR_KV_GROUP]);                                        \
                sc[r * ldsc + i] = scale * (a0 + a1);                                                        \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    static void wsum_##SUFFIX##_ref(const float *p, size_t ldp, size_t nr, const T *v, size_t ld, size_t nk, \
                                    size_t hd, float *const *o)                                              \
    {                                                                                                        \
        for (size_t r = 0; r < nr; r++)                                                                      \
            for (size_t t = 0; t < nk; t++) {                                                                \
                float w = p[r * ldp + t];                                                                    \
                const T *vt = v + t * ld;                                                                    \
                for (size_t d = 0; d < hd; d++) o[r][d] += w * ELEM(vt[d]);                                  \
            }                                                                                                \
    }

#define ELEM_F32(x) (x)
#define ELEM_F16(x) qm_f16_to_f32(x)
DEFINE_REF(f32, float, ELEM_F32)
DEFINE_REF(f16, uint16_t, ELEM_F16)

static void exp_sub_ref(float *s, size_t n, float m)
{
    for (size_t t = 0; t < n; t++) s[t] = expf(s[t] - m);
}

static const qr_attn_kernels kernels_ref = { scores_f32_ref, scores_kt_f32_ref, scores_kt_f16_ref,
                                              wsum_f32_ref,   wsum_f16_ref,      exp_sub_ref };

const qr_attn_kernels *qr_attn_kernels_generic(void) { return &kernels_ref; }

static const qr_attn_kernels *pick_kernels(void)
{
    const qm_cpu_level level = qm_cpu_level_get();
    if (level >= QM_CPU_AVX512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return &qr_attn_kernels_avx512;
    if (level >= QM_CPU_AVX2 && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return &qr_attn_kernels_avx2;
    return &kernels_ref;
}

/* ---- blocks ------------------------------------------------------------------------------------------- */

static int resolve_threads(int threads) { return threads > 0 ? threads : 1; }

size_t qr_attn_scratch_floats(const qr_kv_layer *kv, int threads)
{
    (void)kv;   /* tiles make the scratch independent of the context */
    return (size_t)resolve_threads(threads) * QR_ATTN_MAX_ROWS * QR_ATTN_TILE;
}

/* Below this many multiply-adds a parallel region costs more than it saves. */
#define QR_ATTN_PARALLEL_MIN ((uint64_t)1 << 16)

typedef struct block_rows {
    size_t nr;
    const float *q[QR_ATTN_MAX_ROWS];
    float *o[QR_ATTN_MAX_ROWS];
    uint32_t lo[QR_ATTN_MAX_ROWS], hi[QR_ATTN_MAX_ROWS];   /* keys a row sees: positions lo..hi */
} block_rows;

/* Where the keys and values of one KV head are. The cache (cap > 0): position x in slot x % cap, its value
 * row at v + slot·ldv, its key in the transposed groups from k (runtime/qr_kv.h). Rows given directly (cap
 * = 0, always F32): the key of position x at k + x·ldk, its value at v + x·ldv. */
typedef struct kv_view {
    qr_kv_type type;
    const void *k, *v;
    size_t ldk, ldv, hd;
    uint32_t cap;
} kv_view;

/* Scores, or weighted sums, over positions a..b: one kernel call per run of contiguous rows (a ring wraps once
 * at most per tile). */
static void tile_scores(const qr_attn_kernels *kr, const kv_view *w, const block_rows *B, uint32_t a, uint32_t b,
                        float scale, float *sc)
{
    for (uint32_t x = a; x <= b;) {
        uint32_t row = w->cap ? x % w->cap : x, run = b - x + 1;
        if (w->cap && run > w->cap - row) run = w->cap - row;
        if (!w->cap)
            kr->scores_f32(B->q, B->nr, (const float *)w->k + (size_t)row * w->ldk, w->ldk, run, w->hd, scale,
                           sc + (x - a), QR_ATTN_TILE);
        else if (w->type == QR_KV_F16)
            kr->scores_kt_f16(B->q, B->nr, (const uint16_t *)w->k, row, run, w->hd, scale, sc + (x - a), QR_ATTN_TILE);
        else
            kr->scores_kt_f32(B->q, B->nr, (const float *)w->k, row, run, w->hd, scale, sc + (x - a), QR_ATTN_TILE);
        x += run;
    }
}

static void tile_wsum(const qr_attn_kernels *kr, const kv_view *w, const block_rows *B, uint32_t a, uint32_t b,
                      const float *p)
{
    for (uint32_t x = a; x <= b;) {
        uint32_t row = w->cap ? x % w->cap : x, run = b - x + 1;
        if (w->cap && run > w->cap - row) run = w->cap - row;
        size_t off = (size_t)row * w->ldv;
        if (w->type == QR_KV_F16)
            kr->wsum_f16(p + (x - a), QR_ATTN_TILE, B->nr, (const uint16_t *)w->v + off, w->ldv, run, w->hd, B->o);
        else
            kr->wsum_f32(p + (x - a), QR_ATTN_TILE, B->nr, (const float *)w->v + off, w->ldv, run, w->hd, B->o);
        x += run;
    }
}

/* Largest of x[0..n), n >= 1: eight running maxima (one vector), then their maximum. */
static float max_range(const float *x, size_t n)
{
    float mx[8] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY };
    size_t t = 0;
    for (; t + 8 <= n; t += 8)
        for (int j = 0; j < 8; j++) mx[j] = x[t + j] > mx[j] ? x[t + j] : mx[j];
    for (; t < n; t++) mx[0] = x[t] > mx[0] ? x[t] : mx[0];
    float m = mx[0];
    for (int j = 1; j < 8; j++) m = mx[j] > m ? mx[j] : m;
    return m;
}

/* Σ x[0..n) in double, four partial sums (a fixed order: the same bits on every call). */
static double sum_range(const float *x, size_t n)
{
    double a[4] = { 0, 0, 0, 0 };
    size_t t = 0;
    for (; t + 4 <= n; t += 4)
        for (int j = 0; j < 4; j++) a[j] += x[t + j];
    for (; t < n; t++) a[0] += x[t];
    return (a[0] + a[1]) + (a[2] + a[3]);
}

/* Gemma 2's soft cap of the scores of a tile: cap·tanh(s / cap), before the mask and the softmax. */
static void softcap_tile(float *sc, size_t nr, size_t n, float cap)
{
    for (size_t r = 0; r < nr; r++)
        for (size_t t = 0; t < n; t++) sc[r * QR_ATTN_TILE + t] = cap * tanhf(sc[r * QR_ATTN_TILE + t] / cap);
}

static void attend_block(const qr_attn_kernels *kr, const kv_view *w, float scale, float softcap, const block_rows *B,
                         float *sc)
{
    const size_t hd = w->hd;
    float m[QR_ATTN_MAX_ROWS];
    double l[QR_ATTN_MAX_ROWS];
    uint32_t lo = B->lo[0], hi = B->hi[0];
    for (size_t r = 0; r < B->nr; r++) {
        memset(B->o[r], 0, hd * sizeof(float));
        m[r] = -INFINITY;
        l[r] = 0.0;
        lo = B->lo[r] < lo ? B->lo[r] : lo;
        hi = B->hi[r] > hi ? B->hi[r] : hi;
    }
    for (uint32_t t0 = lo / QR_ATTN_TILE * QR_ATTN_TILE; t0 <= hi; t0 += QR_ATTN_TILE) {
        uint32_t a = t0 > lo ? t0 : lo, b = t0 + (QR_ATTN_TILE - 1) < hi ? t0 + (QR_ATTN_TILE - 1) : hi;
        size_t n = (size_t)(b - a) + 1;
        tile_scores(kr, w, B, a, b, scale, sc);
        if (softcap > 0.0f) softcap_tile(sc, B->nr, n, softcap);
        for (size_t r = 0; r < B->nr; r++) {
            float *s = sc + r * QR_ATTN_TILE;
            /* the keys of this tile row r sees: [va, vb] as offsets into the tile (empty when va > vb) */
            size_t va = B->lo[r] > a ? B->lo[r] - a : 0;
            size_t vb = B->hi[r] < b ? (B->hi[r] >= a ? B->hi[r] - a : 0) : n - 1;
            bool any = B->hi[r] >= a && B->lo[r] <= b;
            float tm = any ? max_range(s + va, vb - va + 1) : -INFINITY;
            if (tm > m[r]) {   /* a larger max: rescale what was summed so far */
                if (m[r] > -INFINITY) {
                    float f = expf(m[r] - tm);
                    for (size_t d = 0; d < hd; d++) B->o[r][d] *= f;
                    l[r] *= f;
                }
                m[r] = tm;
            }
            double sum = 0.0;
            if (any) {
                for (size_t t = 0; t < va; t++) s[t] = -INFINITY;   /* keys row r does not see weigh 0 */
                for (size_t t = vb + 1; t < n; t++) s[t] = -INFINITY;
                kr->exp_sub(s, n, m[r]);
                /* over the visible keys only, grouped from the first of them: the grouping then does not
                 * depend on where the block's tile starts */
                sum = sum_range(s + va, vb - va + 1);
            } else {
                memset(s, 0, n * sizeof *s);
            }
            l[r] += sum;
        }
        tile_wsum(kr, w, B, a, b, sc);
    }
    for (size_t r = 0; r < B->nr; r++) {
        float inv = (float)(1.0 / l[r]);
        for (size_t d = 0; d < hd; d++) B->o[r][d] *= inv;
    }
}

/* One call: which keys row i sees, and where KV head g's rows are. */
typedef struct attn_job {
    const qr_attn_shape *s;
    size_t n_q;
    const float *q, *k, *v;    /* k, v: rows given directly (qr_attn_full) */
    size_t ldq, ldo, ldk, ldv;
    float *out;
    const qr_kv_layer *kv;     /* the cache (qr_attn_causal), else NULL */
    uint32_t pos0, n_k;        /* causal: row i at position pos0 + i; full: keys 0..n_k-1 */
} attn_job;

static void row_range(const attn_job *J, size_t i, uint32_t *lo, uint32_t *hi)
{
    if (!J->kv) {
        *lo = 0;
        *hi = J->n_k - 1;
        return;
    }
    uint32_t p = J->pos0 + (uint32_t)i, w = J->kv->window;
    *lo = (w > 0 && p >= w) ? p - w + 1 : 0;
    *hi = p;
}

static kv_view head_view(const attn_job *J, size_t g)
{
    const size_t hd = J->s->head_dim;
    kv_view w;
    w.hd = hd;
    if (J->kv) {   /* qr_kv_slots(cap) slots a head, K and V alike */
        size_t off = g * (size_t)qr_kv_slots(J->kv->cap) * hd, esz = J->kv->type == QR_KV_F16 ? 2 : 4;
        w.type = J->kv->type;
        w.k = (const char *)J->kv->k + off * esz;
        w.v = (const char *)J->kv->v + off * esz;
        w.ldk = w.ldv = hd;
        w.cap = J->kv->cap;
    } else {       /* rows of n_kv_heads·head_dim floats */
        w.type = QR_KV_F32;
        w.k = J->k + g * hd;
        w.v = J->v + g * hd;
        w.ldk = J->ldk;
        w.ldv = J->ldv;
        w.cap = 0;
    }
    return w;
}

typedef struct block_job {
    const attn_job *J;
    const qr_attn_kernels *kr;
    size_t G, hc, n_hchunks, P;
    float *scratch;
} block_job;

/* Block bi: heads h0..h1 of KV head g (chunk c of its group) at positions i0..i1. */
static void run_block(void *ctx, size_t bi, int worker)
{
    const block_job *bj = ctx;
    const attn_job *J = bj->J;
    const qr_attn_shape *s = J->s;
    const size_t hd = s->head_dim, G = bj->G, hc = bj->hc, n_hchunks = bj->n_hchunks, P = bj->P;
    size_t c = bi % n_hchunks, g = (bi / n_hchunks) % s->n_kv_heads, pb = bi / (n_hchunks * s->n_kv_heads);
    size_t h0 = g * G + c * hc, h1 = h0 + hc < (g + 1) * G ? h0 + hc : (g + 1) * G;
    size_t i0 = pb * P, i1 = i0 + P < J->n_q ? i0 + P : J->n_q;
    block_rows B;
    B.nr = 0;
    for (size_t i = i0; i < i1; i++) {
        uint32_t lo, hi;
        row_range(J, i, &lo, &hi);
        for (size_t h = h0; h < h1; h++) {
            B.q[B.nr] = J->q + i * J->ldq + h * hd;
            B.o[B.nr] = J->out + i * J->ldo + h * hd;
            B.lo[B.nr] = lo;
            B.hi[B.nr] = hi;
            B.nr++;
        }
    }
    kv_view w = head_view(J, g);
    float *sc = bj->scratch + (size_t)worker * QR_ATTN_MAX_ROWS * QR_ATTN_TILE;
    attend_block(bj->kr, &w, s->scale, s->softcap, &B, sc);
}

static void run_job(const attn_job *J, float *scratch, qr_pool *pool)
{
    const qr_attn_shape *s = J->s;
    const size_t G = s->n_heads / s->n_kv_heads, n_q = J->n_q;
    /* a block: hc heads of one group (a chunk of it when the group is larger than a block) at P positions */
    const size_t hc = G < QR_ATTN_MAX_ROWS ? G : QR_ATTN_MAX_ROWS, n_hchunks = (G + hc - 1) / hc;
    const size_t P = QR_ATTN_MAX_ROWS / hc, n_pblocks = (n_q + P - 1) / P;
    const size_t n_blocks = n_pblocks * s->n_kv_heads * n_hchunks;
    block_job bj = { .J = J, .kr = pick_kernels(), .G = G, .hc = hc, .n_hchunks = n_hchunks, .P = P,
                     .scratch = scratch };

    uint64_t work = 0;   /* Σ keys seen × heads × head_dim × 2 (scores and values) */
    for (size_t i = 0; i < n_q; i++) {
        uint32_t lo, hi;
        row_range(J, i, &lo, &hi);
        work += (uint64_t)(hi - lo) + 1;
    }
    work *= (uint64_t)s->n_heads * s->head_dim * 2;
    if (work < QR_ATTN_PARALLEL_MIN) pool = NULL;
    qr_pool_run(pool, n_blocks, run_block, &bj);
}

void qr_attn_causal(const qr_attn_shape *s, const qr_kv_layer *kv, uint32_t pos0, size_t n_q, const float *q,
                    size_t ldq, float *out, size_t ldo, float *scratch, qr_pool *pool)
{
    if (n_q == 0) return;
    attn_job J = { .s = s, .n_q = n_q, .q = q, .ldq = ldq, .out = out, .ldo = ldo, .kv = kv, .pos0 = pos0 };
    run_job(&J, scratch, pool);
}

size_t qr_attn_full_scratch_floats(int threads)
{
    return (size_t)resolve_threads(threads) * QR_ATTN_MAX_ROWS * QR_ATTN_TILE;
}

void qr_attn_full(const qr_attn_shape *s, size_t n_q, const float *q, size_t ldq, size_t n_k, const float *k,
                  size_t ldk, const float *v, size_t ldv, float *out, size_t ldo, float *scratch, qr_pool *pool)
{
    if (n_q == 0 || n_k == 0) return;
    attn_job J = { .s = s, .n_q = n_q, .q = q, .ldq = ldq, .k = k, .ldk = ldk, .v = v, .ldv = ldv, .out = out,
                   .ldo = ldo, .n_k = (uint32_t)n_k };
    run_job(&J, scratch, pool);
}
