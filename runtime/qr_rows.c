/* qr_rows.c — batch ops split between a pool's threads (contract in qr_rows.h). */
#include "qr_rows.h"

typedef enum rows_op { OP_RMSNORM, OP_LAYERNORM, OP_ROPE_HALF, OP_SWIGLU, OP_ADD, OP_ACTIVATE } rows_op;

/* One batch op over `units`: rows for the row ops, QR_ROWS_ALIGN-element pieces of `count` elements for
 * the elementwise ones. */
typedef struct rows_job {
    rows_op op;
    float *y;
    const float *x, *w, *b;
    size_t d, ld, n_heads, count, units, chunks;
    float eps;
    uint32_t pos0;
    qr_actfn f;
} rows_job;

/* Rows (or QR_ROWS_ALIGN-element units) [a, b) of the job. */
static void run_range(const rows_job *j, size_t a, size_t b)
{
    switch (j->op) {
    case OP_RMSNORM:
        for (size_t i = a; i < b; i++) qr_rmsnorm(j->y + i * j->d, j->x + i * j->d, j->w, j->d, j->eps);
        return;
    case OP_LAYERNORM:
        for (size_t i = a; i < b; i++) qr_layernorm(j->y + i * j->d, j->x + i * j->d, j->w, j->b, j->d, j->eps);
        return;
    case OP_ROPE_HALF:
        for (size_t i = a; i < b; i++) qr_rope_half(j->y + i * j->ld, j->n_heads, j->d, j->pos0 + (uint32_t)i, j->w);
        return;
    default: break;
    }
    /* elementwise: units of QR_ROWS_ALIGN elements, the last one short */
    const size_t e0 = a * QR_ROWS_ALIGN, e1 = b * QR_ROWS_ALIGN < j->count ? b * QR_ROWS_ALIGN : j->count;
    if (e0 >= e1) return;
    switch (j->op) {
    case OP_SWIGLU: qr_swiglu(j->y + e0, j->x + e0, e1 - e0); return;
    case OP_ADD: qr_add(j->y + e0, j->x + e0, e1 - e0); return;
    case OP_ACTIVATE: qr_activate(j->f, j->y + e0, e1 - e0); return;
    default: return;
    }
}

static void run_chunk(void *ctx, size_t c, int worker)
{
    (void)worker;
    const rows_job *j = ctx;
    /* chunk c of j->chunks: units [c·units/chunks, (c+1)·units/chunks) */
    run_range(j, j->units * c / j->chunks, j->units * (c + 1) / j->chunks);
}

/* Chunks per thread: a few, so that a worker that wakes late still finds some. */
#define QR_ROWS_CHUNKS 4

/* Runs the job's units on the pool when `work` floats are worth a hand-off, else on this thread. */
static void run_job(qr_pool *pool, rows_job *j, size_t work)
{
    if (j->units == 0) return;
    if (!pool || qr_pool_threads(pool) < 2 || work < QR_ROWS_PARALLEL_MIN || j->units < 2) {
        run_range(j, 0, j->units);
        return;
    }
    j->chunks = qr_pool_chunks(pool, j->units, QR_ROWS_CHUNKS);
    qr_pool_run(pool, j->chunks, run_chunk, j);
}

static size_t align_units(size_t count) { return (count + QR_ROWS_ALIGN - 1) / QR_ROWS_ALIGN; }

void qr_rows_rmsnorm(qr_pool *pool, float *y, const float *x, const float *w, size_t n, size_t d, float eps)
{
    rows_job j = { .op = OP_RMSNORM, .y = y, .x = x, .w = w, .d = d, .eps = eps, .units = n };
    run_job(pool, &j, n * d);
}

void qr_rows_layernorm(qr_pool *pool, float *y, const float *x, const float *w, const float *b, size_t n, size_t d,
                       float eps)
{
    rows_job j = { .op = OP_LAYERNORM, .y = y, .x = x, .w = w, .b = b, .d = d, .eps = eps, .units = n };
    run_job(pool, &j, n * d);
}

void qr_rows_rope_half(qr_pool *pool, float *x, size_t ldx, size_t n, size_t n_heads, size_t head_dim, uint32_t pos0,
                       const float *inv_freq)
{
    /* each rotated pair costs a sine and a cosine: weigh a row as four times its floats */
    rows_job j = { .op = OP_ROPE_HALF, .y = x, .w = inv_freq, .d = head_dim, .ld = ldx, .n_heads = n_heads,
                   .pos0 = pos0, .units = n };
    run_job(pool, &j, 4 * n * n_heads * head_dim);
}

void qr_rows_swiglu(qr_pool *pool, float *gate, const float *up, size_t count)
{
    rows_job j = { .op = OP_SWIGLU, .y = gate, .x = up, .count = count, .units = align_units(count) };
    run_job(pool, &j, count);
}

void qr_rows_add(qr_pool *pool, float *y, const float *x, size_t count)
{
    rows_job j = { .op = OP_ADD, .y = y, .x = x, .count = count, .units = align_units(count) };
    run_job(pool, &j, count);
}

void qr_rows_activate(qr_pool *pool, qr_actfn f, float *x, size_t count)
{
    rows_job j = { .op = OP_ACTIVATE, .y = x, .f = f, .count = count, .units = align_units(count) };
    run_job(pool, &j, count);
}
