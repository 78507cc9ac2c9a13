/* qr_shard.h — tensor parallelism's seam in the runtime: which part of a decoder LM this process runs, and
 * the collectives it needs, as function pointers.
 *
 * A sharded process (rank r of N) holds whole attention heads and KV heads r·H/N .. (r+1)·H/N − 1, FFN
 * hidden units r·F/N .. (r+1)·F/N − 1 and vocabulary rows r·V/N .. (r+1)·V/N − 1 (qr_shard_begin). The
 * column-parallel products (q, k, v, gate, up, the head) read the rank's rows of W as views; the
 * row-parallel ones (attention output, FFN down) its columns, and the rank's partial sums are added across
 * ranks by `allreduce`: once after attention and once after the FFN in every layer. The head's logits are
 * completed on every rank by `allgather`, so sampling runs unchanged and every rank picks the same token.
 *
 * runtime/ and libqmap never call a transport: the caller (mpi/, over MPI) supplies the two functions.
 * With n_ranks = 1 (or no shard at all) nothing here is called and a forward pass is the ordinary one.
 */
#ifndef QR_SHARD_H
#define QR_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"
#include "qr_matmul.h"

/* buf[0 .. n) := the element-wise sum over every rank of its buf, in place. 0 on success. */
typedef int (*qr_allreduce_fn)(void *ctx, float *buf, size_t n);
/* Rank r holds buf[qr_shard_begin(n, r, N) .. qr_shard_begin(n, r + 1, N)); afterwards every rank holds
 * every part. 0 on success. */
typedef int (*qr_allgather_fn)(void *ctx, float *buf, size_t n);

/* buf[0 .. n) := the element-wise max over every rank of its buf (values >= 0 or +Inf), in place. */
typedef int (*qr_allreduce_max_fn)(void *ctx, float *buf, size_t n);

typedef struct qr_shard {
    uint32_t rank, n_ranks;      /* 0 <= rank < n_ranks */
    qr_allreduce_fn allreduce;
    qr_allgather_fn allgather;
    void *ctx;                   /* passed to all three */
    qr_allreduce_max_fn allreduce_max;
} qr_shard;

/* How a rank holds a row-parallel matrix (qr_shard_row_parallel). Whole column panels (groups = 0): X's
 * int8 scale per panel row is the rank's own, as one process's is per panel. Or the rank's columns of
 * panel `group` of `groups`, which the panel's other ranks share: then X's int8 rows are the whole panel
 * row's only with the maxima joined across them (qr_shard_amax). */
typedef struct qr_shard_part {
    const qr_shard *shard;
    uint32_t group, groups;
} qr_shard_part;

/* qr_matmul_opts.x_amax_reduce for a qr_shard_part (ctx) of groups > 0: amax[0 .. n) := the max over
 * the ranks of its group (one allreduce_max of groups × n floats). 0 on success. */
int qr_shard_amax(void *ctx, float *amax, size_t n);

/* Whether a shard splits anything (non-NULL and more than one rank). */
static inline bool qr_shard_active(const qr_shard *sh)
{
    return sh && sh->n_ranks > 1;
}

/* Where rank `rank`'s part of n units starts, of n_ranks parts (n·rank / n_ranks). */
static inline size_t qr_shard_begin(size_t n, uint32_t rank, uint32_t n_ranks)
{
    return n * rank / n_ranks;
}

/* Buffers a sharded model owns: Q8_ROW column slices repacked at load (qr_shard_cols). */
typedef struct qr_shard_store {
    void **bufs;
    size_t n, cap;
} qr_shard_store;

void qr_shard_store_free(qr_shard_store *st);

/* Columns c0 .. c0 + cn − 1 of w as a rows × cn matrix. F32 and F16: a view into w (nothing copied; the
 * rank still maps whole pages of rows). Q8_ROW rows must be padded to 64 bytes with their own row sums,
 * so the slice is copied into `st` (rows · align_up(cn, 64) bytes and the row sums; the scales are w's).
 * QM_ERR_NOMEM naming `path` and `tensor` if the copy does not fit. */
qm_status qr_shard_cols(qr_shard_store *st, const qr_matrix *w, size_t c0, size_t cn, qr_matrix *out,
                        const char *path, const char *tensor, qm_error *err);

/* The rank's part of a row-parallel matrix of `rows` output rows loaded by qr_load_matrix_panels (`panels`
 * column panels): its own panels, a view, when N divides `panels`; its columns of one panel
 * (qr_shard_cols) when `panels` divides N (one panel: the matrix); otherwise QM_ERR_BAD_CONFIG naming the
 * tensor and how to requantize it. *part says which (its shard is sh). */
qm_status qr_shard_row_parallel(const qr_shard *sh, qr_shard_store *st, const qr_matrix *w, size_t rows,
                                size_t panels, qr_matrix *out, size_t *out_panels, qr_shard_part *part,
                                const char *path, const char *tensor, qm_error *err);

/* QM_ERR_BAD_CONFIG naming `key` unless N divides `value` (heads, KV heads, FFN units). */
qm_status qr_shard_check_divides(const qr_shard *sh, const char *path, const char *key, uint64_t value,
                                 qm_error *err);

/* buf[0 .. n) summed over the ranks (sh->allreduce); nothing without an active shard. QM_ERR_IO if the
 * transport fails. */
qm_status qr_shard_sum(const qr_shard *sh, float *buf, size_t n);

#endif /* QR_SHARD_H */
