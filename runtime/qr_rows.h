/* qr_rows.h — qr_ops.h's per-row and elementwise operations over a batch of rows, split between the
 * threads of a session's pool (runtime/qr_pool.h) when the batch is large enough to pay for it.
 *
 * Why: in a prompt these ops run between the matmuls on every row of the batch; done by the calling
 * thread alone, the pool's other threads wait through them (1.1B Q8_ROW pp512, 2 threads: norms, RoPE,
 * SwiGLU and residual adds took ~3% of the samples, the worker idle meanwhile), and the share grows with
 * the thread count. A decode step (one row) is far below the threshold and runs inline, as before.
 *
 * Results: the same bits as the qr_ops.h call on the whole batch, whatever the pool. Row ops run each row
 * through the same function; elementwise ops are split at multiples of QR_ROWS_ALIGN elements, so a vector
 * loop's tail (the only place where its arithmetic may differ) falls on the same elements as in one call.
 *
 * Contract: as qr_ops.h (caller-owned arrays, y == x allowed, no allocation); pool may be NULL (inline).
 * The pool must not be running a job (these are called by the session's thread between products).
 */
#ifndef QR_ROWS_H
#define QR_ROWS_H

#include <stddef.h>
#include <stdint.h>

#include "qr_ops.h"
#include "qr_pool.h"

/* Elementwise splits fall on multiples of this many floats (a multiple of every vector width). */
#define QR_ROWS_ALIGN 64

/* Below this many floats of work a batch runs on the calling thread: a hand-off to the pool costs about
 * as much as a few microseconds of these ops. */
#define QR_ROWS_PARALLEL_MIN ((size_t)1 << 16)

/* y + i·d = rmsnorm(x + i·d) for rows i < n: qr_rmsnorm per row. */
void qr_rows_rmsnorm(qr_pool *pool, float *y, const float *x, const float *w, size_t n, size_t d, float eps);
/* y + i·d = layernorm(x + i·d) for rows i < n: qr_layernorm per row (b may be NULL). */
void qr_rows_layernorm(qr_pool *pool, float *y, const float *x, const float *w, const float *b, size_t n, size_t d,
                       float eps);
/* Row i of x (stride ldx floats) at position pos0 + i: qr_rope_half of its first n_heads heads. */
void qr_rows_rope_half(qr_pool *pool, float *x, size_t ldx, size_t n, size_t n_heads, size_t head_dim, uint32_t pos0,
                       const float *inv_freq);
/* qr_swiglu(gate, up, count), qr_add(y, x, count), qr_activate(f, x, count) over `count` elements. */
void qr_rows_swiglu(qr_pool *pool, float *gate, const float *up, size_t count);
void qr_rows_add(qr_pool *pool, float *y, const float *x, size_t count);
void qr_rows_activate(qr_pool *pool, qr_actfn f, float *x, size_t count);

#endif /* QR_ROWS_H */
