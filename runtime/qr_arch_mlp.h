/* qr_arch_mlp.h — the `mlp` family (spec/ARCHITECTURES.md §3): a stack of Linear layers, each followed by
 * its activation, then optionally softmax / log_softmax; batches of rows through the GEMM kernels.
 *
 * Ownership: qr_mlp_load allocates a qr_mlp whose weight views point into the qm_file (which must outlive
 * it). A qr_mlp_run holds every buffer a forward pass needs for up to max_batch rows (two activation
 * buffers of the widest layer, the matmul work buffer), allocated once by qr_mlp_run_new; qr_mlp_forward
 * only writes into it and the caller's output, so batch after batch allocates nothing. One run is used by
 * one thread at a time (its products use the run's pool of `threads` threads); a qr_mlp may be shared by many runs.
 */
#ifndef QR_ARCH_MLP_H
#define QR_ARCH_MLP_H

#include <stddef.h>
#include <stdint.h>

#include "qr_model.h"
#include "qr_ops.h"

typedef enum qr_mlp_output { QR_MLP_LOGITS = 0, QR_MLP_SOFTMAX, QR_MLP_LOG_SOFTMAX } qr_mlp_output;

typedef struct qr_mlp {
    uint32_t n_layers, input_dim, output_dim;
    uint32_t max_width;          /* the widest layer output (activation buffer rows) */
    qr_matrix *w;                /* [n_layers]: layer i is [out_i, in_i] */
    const float **b;             /* [n_layers]: bias or NULL */
    qr_actfn *act;               /* [n_layers]: activation after layer i (IDENTITY after the last, usually) */
    qr_mlp_output output;
    float input_scale, input_offset; /* integer inputs become features value * scale + offset (1, 0 unset) */
    const qm_meta *class_names;      /* mlp.class_names: output_dim strings, or NULL */
} qr_mlp;

/* Check the container (mlp.* keys, layers.{i}.weight/bias shapes and dtypes) and view the weights. */
qm_status qr_mlp_load(qr_loader *ld, qr_mlp **out);
void qr_mlp_free(qr_mlp *m);

typedef struct qr_mlp_run {
    size_t max_batch;
    qr_pool *pool;               /* the run's threads (owned) */
    qr_matmul_opts mm;
    float *a, *b;                /* max_batch x max_width floats each: ping-pong activations, a layer's rows packed */
    void *work;
    size_t work_size;
} qr_mlp_run;

/* Buffers and a thread pool for batches of up to max_batch rows with `threads` threads (<= 0: one per CPU) and activation mode `act`.
 * QM_ERR_NOMEM / QM_ERR_OVERFLOW when they do not fit. */
qm_status qr_mlp_run_new(const qr_mlp *m, size_t max_batch, int threads, qr_act act, qr_mlp_run **out,
                         qm_error *err);
void qr_mlp_run_free(qr_mlp_run *r);

/* out[i][0..output_dim) = the network on x[i][0..input_dim) for i < n (1 <= n <= r->max_batch); x rows
 * are ldx floats apart. Allocates nothing. */
qm_status qr_mlp_forward(const qr_mlp *m, qr_mlp_run *r, const float *x, size_t n, size_t ldx, float *out);

#endif /* QR_ARCH_MLP_H */
