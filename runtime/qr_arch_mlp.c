/* qr_arch_mlp.c — the `mlp` family (spec/ARCHITECTURES.md §3), for nn.Sequential classifiers.
 *
 * The forward pass is torch's, layer by layer:  h = act_i(h @ W_iᵀ + b_i)  for i = 0 .. n_layers − 1,
 * then softmax / log_softmax over the last layer's outputs when the container says so. A batch of rows
 * goes through each layer as one product (the GEMM kernels reuse every weight they load across the batch);
 * one row is a matrix-vector product read straight from the mapping.
 */
#include "qr_arch_mlp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qr_rows.h"

#define MLP_MAX_LAYERS 1024u
#define MLP_MAX_WIDTH (1u << 24)

void qr_mlp_free(qr_mlp *m)
{
    if (!m) return;
    free(m->w);
    free(m->b);
    free(m->act);
    free(m);
}

#define TRY(expr) do { qm_status st_ = (expr); if (st_ != QM_OK) { qr_mlp_free(m); return st_; } } while (0)

qm_status qr_mlp_load(qr_loader *ld, qr_mlp **out)
{
    *out = NULL;
    qr_mlp *m = calloc(1, sizeof *m);
    if (!m) return qm_fail(ld->err, QM_ERR_NOMEM, ld->path, NULL, QM_NO_OFFSET, "out of memory");
    TRY(qr_load_u32(ld, QM_HP_N_LAYERS, &m->n_layers));
    TRY(qr_check_range(ld, QM_HP_N_LAYERS, m->n_layers, 1, MLP_MAX_LAYERS));
    TRY(qr_load_u32(ld, QM_HP_INPUT_DIM, &m->input_dim));
    TRY(qr_check_range(ld, QM_HP_INPUT_DIM, m->input_dim, 1, MLP_MAX_WIDTH));
    TRY(qr_load_u32(ld, QM_HP_OUTPUT_DIM, &m->output_dim));
    TRY(qr_check_range(ld, QM_HP_OUTPUT_DIM, m->output_dim, 1, MLP_MAX_WIDTH));
    const char *s;
    uint64_t len;
    TRY(qr_load_string_opt(ld, QM_HP_OUTPUT, "logits", &s, &len));
    if (len == 6 && !memcmp(s, "logits", 6)) m->output = QR_MLP_LOGITS;
    else if (len == 7 && !memcmp(s, "softmax", 7)) m->output = QR_MLP_SOFTMAX;
    else if (len == 11 && !memcmp(s, "log_softmax", 11)) m->output = QR_MLP_LOG_SOFTMAX;
    else {
        char key[QM_KEY_NAME_MAX];
        qm_hparam_key(key, sizeof key, QM_ARCH_MLP, QM_HP_OUTPUT);
        qm_status st = qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, key, QM_NO_OFFSET,
                               "\"%.*s\" is not an output this runtime knows (logits, softmax, log_softmax)",
                               (int)(len > 32 ? 32 : len), s);
        qr_mlp_free(m);
        return st;
    }
    TRY(qr_load_f32_opt(ld, QM_HP_INPUT_SCALE, 1.0f, &m->input_scale));
    TRY(qr_load_f32_opt(ld, QM_HP_INPUT_OFFSET, 0.0f, &m->input_offset));
    if (!isfinite(m->input_scale) || m->input_scale == 0 || !isfinite(m->input_offset)) {
        char key[QM_KEY_NAME_MAX];
        qm_hparam_key(key, sizeof key, QM_ARCH_MLP, QM_HP_INPUT_SCALE);
        qm_status st = qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, key, QM_NO_OFFSET,
                               "input scale %g / offset %g: must be finite, the scale non-zero",
                               (double)m->input_scale, (double)m->input_offset);
        qr_mlp_free(m);
        return st;
    }
    TRY(qr_load_string_array_opt(ld, QM_HP_CLASS_NAMES, m->output_dim, "class", &m->class_names));
    const qm_meta *acts;
    TRY(qr_load_string_array(ld, QM_HP_ACTIVATIONS, m->n_layers, &acts));
    m->w = calloc(m->n_layers, sizeof *m->w);
    m->b = calloc(m->n_layers, sizeof *m->b);
    m->act = calloc(m->n_layers, sizeof *m->act);
    if (!m->w || !m->b || !m->act) {
        qr_mlp_free(m);
        return qm_fail(ld->err, QM_ERR_NOMEM, ld->path, NULL, QM_NO_OFFSET, "out of memory");
    }
    /* Each layer's shape follows from the previous one's; only the widths of the tensors themselves say
     * the hidden sizes, so read the weight's rows from the tensor table before checking it. */
    uint32_t in = m->input_dim;
    for (uint32_t i = 0; i < m->n_layers; i++) {
        char name[QM_TENSOR_NAME_MAX];
        qm_tensor_name(name, sizeof name, QM_TENSOR_MLP_WEIGHT, i);
        const qm_tensor *t = qm_find_tensor(ld->f, name);
        uint64_t rows = t && t->rank == 2 ? t->dims[0] : 1;
        if (i + 1 == m->n_layers) rows = m->output_dim;
        if (rows == 0 || rows > MLP_MAX_WIDTH) rows = 1;   /* qr_load_matrix then names the bad shape */
        TRY(qr_load_matrix(ld, QM_TENSOR_MLP_WEIGHT, i, (size_t)rows, in, &m->w[i]));
        TRY(qr_load_vector_opt(ld, QM_TENSOR_MLP_BIAS, i, (size_t)rows, &m->b[i]));
        const char *a;
        uint64_t alen;
        TRY(qm_meta_array_string(acts, i, &a, &alen));
        if (!qr_actfn_from_name(a, (size_t)alen, &m->act[i])) {
            char key[QM_KEY_NAME_MAX];
            qm_hparam_key(key, sizeof key, QM_ARCH_MLP, QM_HP_ACTIVATIONS);
            qm_status st = qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, key, QM_NO_OFFSET,
                                   "layer %u: activation \"%.*s\" is not one this runtime knows", i,
                                   (int)(alen > 32 ? 32 : alen), a);
            qr_mlp_free(m);
            return st;
        }
        if (rows > m->max_width) m->max_width = (uint32_t)rows;
        in = (uint32_t)rows;
    }
    *out = m;
    return QM_OK;
}

void qr_mlp_run_free(qr_mlp_run *r)
{
    if (!r) return;
    free(r->a);
    free(r->b);
    free(r->work);
    qr_pool_free(r->pool);
    free(r);
}

qm_status qr_mlp_run_new(const qr_mlp *m, size_t max_batch, int threads, qr_act act, qr_mlp_run **out,
                         qm_error *err)
{
    *out = NULL;
    if (max_batch == 0) return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "max_batch is 0");
    qr_mlp_run *r = calloc(1, sizeof *r);
    if (!r) return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    r->max_batch = max_batch;
    qm_status pst = qr_pool_new(threads, &r->pool, err);
    if (pst != QM_OK) {
        free(r);
        return pst;
    }
    r->mm = (qr_matmul_opts){ .pool = r->pool, .act = act, .kernels = qr_kernels_get() };
    if (max_batch > SIZE_MAX / sizeof(float) / m->max_width) {
        qr_mlp_run_free(r);
        return qm_fail(err, QM_ERR_OVERFLOW, NULL, NULL, QM_NO_OFFSET, "a batch of %zu rows overflows", max_batch);
    }
    size_t floats = max_batch * m->max_width;
    for (uint32_t i = 0; i < m->n_layers; i++) {
        size_t ws = qr_matmul_work_size(&m->w[i], max_batch, &r->mm);
        if (ws == SIZE_MAX) {
            qr_mlp_run_free(r);
            return qm_fail(err, QM_ERR_OVERFLOW, NULL, NULL, QM_NO_OFFSET, "work buffer size overflows");
        }
        if (ws > r->work_size) r->work_size = ws;
    }
    r->a = malloc(floats * sizeof *r->a);
    r->b = malloc(floats * sizeof *r->b);
    r->work = r->work_size ? aligned_alloc(64, (r->work_size + 63) / 64 * 64) : NULL;
    if (!r->a || !r->b || (r->work_size && !r->work)) {
        qr_mlp_run_free(r);
        return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "cannot allocate buffers for %zu rows",
                       max_batch);
    }
    *out = r;
    return QM_OK;
}

/* out = log(softmax(out)), row by row: x − max − log Σ exp(x − max). */
static void log_softmax_row(float *x, size_t n)
{
    float mx = x[0];
    for (size_t i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    float lse = (float)(mx + log(sum));
    for (size_t i = 0; i < n; i++) x[i] -= lse;
}

qm_status qr_mlp_forward(const qr_mlp *m, qr_mlp_run *r, const float *x, size_t n, size_t ldx, float *out)
{
    if (n == 0 || n > r->max_batch)
        return qm_fail(NULL, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "batch of %zu rows", n);
    const float *h = x;          /* the current layer's input, rows ld_in floats apart */
    size_t ld_in = ldx;
    for (uint32_t i = 0; i < m->n_layers; i++) {
        const qr_matrix *w = &m->w[i];
        bool last = i + 1 == m->n_layers;
        float *y = last ? out : (h == r->a ? r->b : r->a);
        size_t ld_out = last ? m->output_dim : w->rows; /* rows packed: one block for the activation */
        /* h = h @ W_iᵀ + b_i */
        qm_status st = qr_matmul(NULL, w, n, h, ld_in, y, ld_out, r->work, r->work_size, &r->mm);
        if (st != QM_OK) return st;
        if (m->b[i]) qr_add_bias_rows(y, ld_out, n, m->b[i], w->rows);
        /* h = act_i(h) */
        if (m->act[i] != QR_ACTFN_IDENTITY) qr_rows_activate(r->pool, m->act[i], y, n * w->rows);
        h = y;
        ld_in = ld_out;
    }
    if (m->output == QR_MLP_SOFTMAX)
        for (size_t row = 0; row < n; row++) qr_softmax(out + row * m->output_dim, m->output_dim);
    else if (m->output == QR_MLP_LOG_SOFTMAX)
        for (size_t row = 0; row < n; row++) log_softmax_row(out + row * m->output_dim, m->output_dim);
    return QM_OK;
}
