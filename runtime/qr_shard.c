/* qr_shard.c — the rank's slices of a decoder LM's matrices, and the sums across ranks (qr_shard.h). */
#include <stdlib.h>
#include <string.h>

#include "qr_shard.h"
#include "qr_dtype.h"

void qr_shard_store_free(qr_shard_store *st)
{
    if (!st) return;
    for (size_t i = 0; i < st->n; i++) free(st->bufs[i]);
    free(st->bufs);
    memset(st, 0, sizeof *st);
}

/* Room for `more` buffers in st. */
static bool store_reserve(qr_shard_store *st, size_t more)
{
    if (st->n + more <= st->cap) return true;
    size_t cap = st->cap ? 2 * st->cap : 16;
    while (cap < st->n + more) cap *= 2;
    void **b = realloc(st->bufs, cap * sizeof *b);
    if (!b) return false;
    st->bufs = b;
    st->cap = cap;
    return true;
}

static size_t pad64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* The Q8_ROW slice copied: each row's cn int8 values, zero padding to 64, and their exact sum (FORMAT 6.1). */
static qm_status q8_cols_copy(qr_shard_store *st, const qr_matrix *w, size_t c0, size_t cn, qr_matrix *out,
                              const char *path, const char *tensor, qm_error *err)
{
    const size_t stride = pad64(cn);
    if (w->rows > (SIZE_MAX - 64) / (stride + 4))
        return qm_fail(err, QM_ERR_OVERFLOW, path, tensor, QM_NO_OFFSET, "the rank's column slice is too large");
    int8_t *data = aligned_alloc(64, w->rows * stride);
    int32_t *sums = malloc(w->rows * sizeof *sums);
    if (!data || !sums || !store_reserve(st, 2)) {
        free(data);
        free(sums);
        return qm_fail(err, QM_ERR_NOMEM, path, tensor, QM_NO_OFFSET,
                       "out of memory for the rank's %zu x %zu slice", w->rows, cn);
    }
    st->bufs[st->n++] = data;
    st->bufs[st->n++] = sums;
    memset(data, 0, w->rows * stride);
    for (size_t r = 0; r < w->rows; r++) {
        const int8_t *src = (const int8_t *)w->data + r * w->row_stride + c0;
        int8_t *dst = data + r * stride;
        int32_t sum = 0;
        for (size_t c = 0; c < cn; c++) sum += dst[c] = src[c];
        sums[r] = sum;
    }
    *out = *w;
    out->cols = cn;
    out->data = data;
    out->row_stride = stride;
    out->row_sums = sums;
    return QM_OK;
}

qm_status qr_shard_cols(qr_shard_store *st, const qr_matrix *w, size_t c0, size_t cn, qr_matrix *out,
                        const char *path, const char *tensor, qm_error *err)
{
    /* a row sum covers all of a row's columns (Q8_ROW): a slice needs rows and sums of its own */
    if (w->row_sums) return q8_cols_copy(st, w, c0, cn, out, path, tensor, err);
    const qr_dtype_traits *dt = qr_dtype_get(w->dtype);
    if (!dt || c0 % dt->block_elems || cn % dt->block_elems)
        return qm_fail(err, QM_ERR_BAD_CONFIG, path, tensor, QM_NO_OFFSET,
                       "columns %zu..%zu do not fall on whole storage blocks", c0, c0 + cn);
    *out = *w;
    out->cols = cn;
    out->data = (const uint8_t *)w->data + c0 / dt->block_elems * dt->block_bytes;
    return QM_OK;
}

qm_status qr_shard_row_parallel(const qr_shard *sh, qr_shard_store *st, const qr_matrix *w, size_t rows,
                                size_t panels, qr_matrix *out, size_t *out_panels, qr_shard_part *part,
                                const char *path, const char *tensor, qm_error *err)
{
    const uint32_t N = sh->n_ranks, r = sh->rank;
    if (panels % N == 0) {
        /* panel p is rows p·rows .. of the view: the rank's panels are one contiguous run of the tensor */
        const size_t per = panels / N;
        *out = qr_matrix_rows(w, r * per * rows, per * rows);
        *out_panels = per;
        *part = (qr_shard_part){ sh, 0, 0 };
        return QM_OK;
    }
    if (N % panels != 0)
        return qm_fail(err, QM_ERR_BAD_CONFIG, path, tensor, QM_NO_OFFSET,
                       "stored in %zu column panels, which %u ranks cannot share out: requantize with qmap "
                       "quantize --panel-cols C so that the panel count is a multiple or a divisor of %u, or "
                       "--panel-cols 0", panels, N, N);
    /* N / panels ranks share each panel: rank r takes its part of panel r / (N / panels) */
    const size_t per = N / panels, k = r % per;
    const qr_matrix panel = qr_matrix_rows(w, r / per * rows, rows);
    const size_t c0 = qr_shard_begin(panel.cols, (uint32_t)k, (uint32_t)per);
    const size_t c1 = qr_shard_begin(panel.cols, (uint32_t)k + 1, (uint32_t)per);
    *out_panels = 1;
    *part = (qr_shard_part){ sh, (uint32_t)(r / per), (uint32_t)panels };
    return qr_shard_cols(st, &panel, c0, c1 - c0, out, path, tensor, err);
}

qm_status qr_shard_check_divides(const qr_shard *sh, const char *path, const char *key, uint64_t value,
                                 qm_error *err)
{
    if (value % sh->n_ranks == 0) return QM_OK;
    return qm_fail(err, QM_ERR_BAD_CONFIG, path, key, QM_NO_OFFSET,
                   "%s is %llu, not a multiple of the %u ranks: tensor parallelism gives each rank a whole "
                   "share of it (run with a rank count that divides it)", key, (unsigned long long)value,
                   sh->n_ranks);
}

qm_status qr_shard_sum(const qr_shard *sh, float *buf, size_t n)
{
    if (!qr_shard_active(sh)) return QM_OK;
    return sh->allreduce(sh->ctx, buf, n) == 0 ? QM_OK : QM_ERR_IO;
}

int qr_shard_amax(void *ctx, float *amax, size_t n)
{
    const qr_shard_part *part = ctx;
    const size_t total = (size_t)part->groups * n;
    if (part->groups == 0 || total / part->groups != n) return -1;
    /* each group's maxima in its own place, zeros (max's identity here: every max|x| is >= 0) elsewhere */
    float local[256];
    float *buf = total <= sizeof local / sizeof local[0] ? memset(local, 0, sizeof local) : calloc(total, sizeof *buf);
    if (!buf) return -1;
    memcpy(buf + (size_t)part->group * n, amax, n * sizeof *amax);
    int rc = part->shard->allreduce_max(part->shard->ctx, buf, total);
    if (rc == 0) memcpy(amax, buf + (size_t)part->group * n, n * sizeof *amax);
    if (buf != local) free(buf);
    return rc;
}
