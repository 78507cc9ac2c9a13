/* qr_model.c — loader helpers, the decoder-LM run state, and the blocks every forward pass shares. */
#include "qr_model.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qr_dtype.h"
#include "qr_ops.h"
#include "qr_rows.h"

/* ---- loader ---------------------------------------------------------------------------------------- */

void qr_loader_init(qr_loader *ld, const qm_file *f, qm_arch arch, qm_error *err)
{
    memset(ld, 0, sizeof *ld);
    ld->f = f;
    ld->path = qm_file_path(f);
    ld->arch = arch;
    ld->err = err;
}

void qr_loader_free(qr_loader *ld)
{
    free(ld->mats);
    ld->mats = NULL;
    ld->n_mats = ld->cap_mats = 0;
}

static const char *type_name(uint32_t t)
{
    const char *n = qm_meta_type_name(t);
    return n ? n : "?";
}

/* The entry of key hp, NULL if absent; an entry of another type than `want` is an error. */
static qm_status find_key(qr_loader *ld, qm_hparam hp, uint32_t want, bool required, const qm_meta **out)
{
    char key[QM_KEY_NAME_MAX];
    *out = NULL;
    if (qm_hparam_key(key, sizeof key, ld->arch, hp) < 0)
        return qm_fail(ld->err, QM_ERR_INVALID_ARGUMENT, ld->path, NULL, QM_NO_OFFSET, "bad hyperparameter id %d", (int)hp);
    const qm_meta *m = qm_find_meta(ld->f, key);
    if (!m) {
        if (!required) return QM_OK;
        return qm_fail(ld->err, QM_ERR_NOT_FOUND, ld->path, key, QM_NO_OFFSET,
                       "metadata key missing; a %s model needs it (spec/ARCHITECTURES.md)",
                       qm_arch_name(ld->arch));
    }
    if (m->type != want)
        return qm_fail(ld->err, QM_ERR_TYPE_MISMATCH, ld->path, key, m->entry_offset,
                       "metadata value is %s, expected %s", type_name(m->type), type_name(want));
    *out = m;
    return QM_OK;
}

qm_status qr_load_u32(qr_loader *ld, qm_hparam hp, uint32_t *out)
{
    const qm_meta *m;
    qm_status st = find_key(ld, hp, QM_META_U32, true, &m);
    if (st == QM_OK) *out = m->v.u32;
    return st;
}

qm_status qr_load_u32_opt(qr_loader *ld, qm_hparam hp, uint32_t def, uint32_t *out)
{
    const qm_meta *m;
    qm_status st = find_key(ld, hp, QM_META_U32, false, &m);
    if (st == QM_OK) *out = m ? m->v.u32 : def;
    return st;
}

/* The values each float hyperparameter may take, for every family (spec/ARCHITECTURES.md §9): outside
 * them a model runs to NaN or noise instead of failing. An epsilon is added to a variance under a square
 * root (positive and normal: a denormal one vanishes beside any variance); RoPE's base is raised to
 * negative powers (below 1 the frequencies grow instead of fall); the scales multiply every activation.
 * A key not listed needs only be finite. */
typedef struct f32_range { qm_hparam hp; float lo, hi; } f32_range;
static const f32_range k_f32_ranges[] = {
    { QM_HP_NORM_EPS, FLT_MIN, 1.0f },
    { QM_HP_ROPE_THETA, 1.0f, 1e12f },
    { QM_HP_EMBED_SCALE, FLT_MIN, 1e6f },
    { QM_HP_INPUT_SCALE, -1e6f, 1e6f },
    { QM_HP_INPUT_OFFSET, -1e6f, 1e6f },
};

/* QM_OK when entry m (key hp) holds a value in the key's range; else an error naming the key and value. */
static qm_status check_f32_range(qr_loader *ld, qm_hparam hp, const qm_meta *m)
{
    float v = m->v.f32, lo = -FLT_MAX, hi = FLT_MAX;
    for (size_t i = 0; i < sizeof k_f32_ranges / sizeof k_f32_ranges[0]; i++)
        if (k_f32_ranges[i].hp == hp) {
            lo = k_f32_ranges[i].lo;
            hi = k_f32_ranges[i].hi;
        }
    if (v >= lo && v <= hi) return QM_OK;   /* false for NaN */
    return qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, m->key, m->entry_offset,
                   "value %g is outside the range this hyperparameter allows, [%g, %g]", (double)v, (double)lo,
                   (double)hi);
}

qm_status qr_load_f32(qr_loader *ld, qm_hparam hp, float *out)
{
    const qm_meta *m;
    qm_status st = find_key(ld, hp, QM_META_F32, true, &m);
    if (st == QM_OK) st = check_f32_range(ld, hp, m);
    if (st == QM_OK) *out = m->v.f32;
    return st;
}

qm_status qr_load_f32_opt(qr_loader *ld, qm_hparam hp, float def, float *out)
{
    const qm_meta *m;
    qm_status st = find_key(ld, hp, QM_META_F32, false, &m);
    if (st == QM_OK && m) st = check_f32_range(ld, hp, m);
    if (st == QM_OK) *out = m ? m->v.f32 : def;
    return st;
}

qm_status qr_load_bool_opt(qr_loader *ld, qm_hparam hp, bool def, bool *out)
{
    const qm_meta *m;
    qm_status st = find_key(ld, hp, QM_META_BOOL, false, &m);
    if (st == QM_OK) *out = m ? m->v.b : def;
    return st;
}

qm_status qr_load_string(qr_loader *ld, qm_hparam hp, const char **s, uint64_t *len)
{
    const qm_meta *m;
    qm_status st = find_key(ld, hp, QM_META_STRING, true, &m);
    if (st == QM_OK) { *s = m->str; *len = m->str_len; }
    return st;
}

qm_status qr_load_string_opt(qr_loader *ld, qm_hparam hp, const char *def, const char **s, uint64_t *len)
{
    const qm_meta *m;
    qm_status st = find_key(ld, hp, QM_META_STRING, false, &m);
    if (st != QM_OK) return st;
    if (m) { *s = m->str; *len = m->str_len; }
    else { *s = def; *len = def ? strlen(def) : 0; }
    return QM_OK;
}

static qm_status load_string_array(qr_loader *ld, qm_hparam hp, uint64_t count, bool required, const char *per,
                                   const qm_meta **out)
{
    qm_status st = find_key(ld, hp, QM_META_ARRAY, required, out);
    if (st != QM_OK || !*out) return st;
    if ((*out)->elem_type != QM_META_STRING || (*out)->count != count)
        return qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, (*out)->key, (*out)->entry_offset,
                       "must be an array of %llu strings (one per %s)", (unsigned long long)count, per);
    return QM_OK;
}

qm_status qr_load_string_array(qr_loader *ld, qm_hparam hp, uint64_t count, const qm_meta **out)
{
    return load_string_array(ld, hp, count, true, "layer", out);
}

qm_status qr_load_string_array_opt(qr_loader *ld, qm_hparam hp, uint64_t count, const char *per, const qm_meta **out)
{
    *out = NULL;
    return load_string_array(ld, hp, count, false, per, out);
}

qm_status qr_check_range(qr_loader *ld, qm_hparam hp, uint64_t v, uint64_t lo, uint64_t hi)
{
    if (v >= lo && v <= hi) return QM_OK;
    char key[QM_KEY_NAME_MAX];
    qm_hparam_key(key, sizeof key, ld->arch, hp);
    return qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, key, QM_NO_OFFSET,
                   "value %llu is outside [%llu, %llu]", (unsigned long long)v,
                   (unsigned long long)lo, (unsigned long long)hi);
}

static const char *dtype_name(uint32_t d)
{
    const qm_dtype_traits *tr = qm_dtype_info(d);
    return tr ? tr->name : "?";
}

static void shape_string(const qm_tensor *t, char *buf, size_t cap)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (uint32_t i = 0; i < t->rank && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%llu", i ? ", " : "", (unsigned long long)t->dims[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static qm_status find_tensor(qr_loader *ld, qm_tensor_id id, unsigned layer, bool required, const qm_tensor **out,
                             char *name, size_t name_cap)
{
    *out = NULL;
    if (qm_tensor_name(name, name_cap, id, layer) < 0)
        return qm_fail(ld->err, QM_ERR_INVALID_ARGUMENT, ld->path, NULL, QM_NO_OFFSET, "bad tensor id %d", (int)id);
    *out = qm_find_tensor(ld->f, name);
    if (!*out && required)
        return qm_fail(ld->err, QM_ERR_MISSING_TENSOR, ld->path, name, QM_NO_OFFSET,
                       "tensor missing; a %s model needs it (spec/ARCHITECTURES.md)", qm_arch_name(ld->arch));
    return QM_OK;
}

static qm_status remember(qr_loader *ld, const qr_matrix *m)
{
    if (ld->n_mats == ld->cap_mats) {
        size_t cap = ld->cap_mats ? 2 * ld->cap_mats : 64;
        qr_matrix *p = realloc(ld->mats, cap * sizeof *p);
        if (!p) return qm_fail(ld->err, QM_ERR_NOMEM, ld->path, NULL, QM_NO_OFFSET, "out of memory");
        ld->mats = p;
        ld->cap_mats = cap;
    }
    ld->mats[ld->n_mats++] = *m;
    return QM_OK;
}

/* The matrix view of a tensor whose shape the caller has checked: a dtype of the runtime's table
 * (qr_dtype.h), else an error. */
static qm_status matrix_view(qr_loader *ld, const qm_tensor *t, const char *name, qr_matrix *out)
{
    if (!qr_dtype_get(t->dtype)) {
        char list[64];
        return qm_fail(ld->err, QM_ERR_TYPE_MISMATCH, ld->path, name, t->entry_offset,
                       "tensor is %s; weight matrices must be %s", dtype_name(t->dtype),
                       qr_dtype_list(list, sizeof list));
    }
    qm_status st = qr_matrix_from_tensor(ld->f, t, out, ld->err);
    if (st != QM_OK) return st;
    return remember(ld, out);
}

static qm_status matrix_common(qr_loader *ld, const qm_tensor *t, const char *name, size_t rows, size_t cols,
                               qr_matrix *out)
{
    if (t->rank != 2 || t->dims[0] != rows || t->dims[1] != cols) {
        char have[96];
        shape_string(t, have, sizeof have);
        return qm_fail(ld->err, QM_ERR_SHAPE, ld->path, name, t->entry_offset,
                       "tensor has shape %s, the model needs [%zu, %zu]", have, rows, cols);
    }
    return matrix_view(ld, t, name, out);
}

qm_status qr_load_matrix(qr_loader *ld, qm_tensor_id id, unsigned layer, size_t rows, size_t cols, qr_matrix *out)
{
    char name[QM_TENSOR_NAME_MAX];
    const qm_tensor *t;
    qm_status st = find_tensor(ld, id, layer, true, &t, name, sizeof name);
    if (st != QM_OK) return st;
    return matrix_common(ld, t, name, rows, cols, out);
}

qm_status qr_load_matrix_panels(qr_loader *ld, qm_tensor_id id, unsigned layer, size_t rows, size_t cols,
                                qr_matrix *out, size_t *panels)
{
    char name[QM_TENSOR_NAME_MAX];
    const qm_tensor *t;
    qm_status st = find_tensor(ld, id, layer, true, &t, name, sizeof name);
    if (st != QM_OK) return st;
    *panels = 1;
    if (t->rank != 3) return matrix_common(ld, t, name, rows, cols, out);
    /* [P, rows, cols / P], P >= 2: dims are >= 1 and their product at most 2^40 (FORMAT.md §5), so the
     * product below is exact */
    const uint64_t p = t->dims[0], pc = t->dims[2];
    if (t->dims[1] != rows || p < 2 || p * pc != cols) {
        char have[96];
        shape_string(t, have, sizeof have);
        return qm_fail(ld->err, QM_ERR_SHAPE, ld->path, name, t->entry_offset,
                       "tensor has shape %s, the model needs [%zu, %zu] or its column panels [P, %zu, %zu / P] "
                       "(P >= 2)", have, rows, cols, rows, cols);
    }
    *panels = (size_t)p;
    return matrix_view(ld, t, name, out);
}

qm_status qr_load_matrix_opt(qr_loader *ld, qm_tensor_id id, unsigned layer, size_t rows, size_t cols,
                             qr_matrix *out, bool *present)
{
    char name[QM_TENSOR_NAME_MAX];
    const qm_tensor *t;
    qm_status st = find_tensor(ld, id, layer, false, &t, name, sizeof name);
    *present = t != NULL;
    if (st != QM_OK || !t) {
        memset(out, 0, sizeof *out);
        return st;
    }
    return matrix_common(ld, t, name, rows, cols, out);
}

static qm_status vector_common(qr_loader *ld, const qm_tensor *t, const char *name, size_t n, const float **out)
{
    if (t->rank != 1 || t->dims[0] != n) {
        char have[96];
        shape_string(t, have, sizeof have);
        return qm_fail(ld->err, QM_ERR_SHAPE, ld->path, name, t->entry_offset,
                       "tensor has shape %s, the model needs [%zu]", have, n);
    }
    if (t->dtype != QM_DTYPE_F32)
        return qm_fail(ld->err, QM_ERR_TYPE_MISMATCH, ld->path, name, t->entry_offset,
                       "tensor is %s; norm weights and biases must be F32", dtype_name(t->dtype));
    *out = (const float *)t->data;
    return QM_OK;
}

qm_status qr_load_vector(qr_loader *ld, qm_tensor_id id, unsigned layer, size_t n, const float **out)
{
    char name[QM_TENSOR_NAME_MAX];
    const qm_tensor *t;
    qm_status st = find_tensor(ld, id, layer, true, &t, name, sizeof name);
    if (st != QM_OK) return st;
    return vector_common(ld, t, name, n, out);
}

qm_status qr_load_vector_opt(qr_loader *ld, qm_tensor_id id, unsigned layer, size_t n, const float **out)
{
    char name[QM_TENSOR_NAME_MAX];
    const qm_tensor *t;
    *out = NULL;
    qm_status st = find_tensor(ld, id, layer, false, &t, name, sizeof name);
    if (st != QM_OK || !t) return st;
    return vector_common(ld, t, name, n, out);
}

/* ---- run state ------------------------------------------------------------------------------------- */

/* a * b + c with overflow checks, in bytes */
static bool mul_ok(size_t a, size_t b, size_t *out)
{
    if (a && b > SIZE_MAX / a) return false;
    *out = a * b;
    return true;
}

static void *alloc_floats(size_t rows, size_t cols, bool *ok)
{
    size_t n, bytes;
    if (!mul_ok(rows, cols, &n) || !mul_ok(n, sizeof(float), &bytes)) { *ok = false; return NULL; }
    void *p = NULL;
    /* 64-byte rows start on cache lines when cols is a multiple of 16; the kernels need only 4-byte alignment */
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) { *ok = false; return NULL; }
    memset(p, 0, bytes);
    return p;
}

qm_status qr_lm_state_new(const qr_lm_hparams *hp, const qr_matrix *mats, size_t n_mats,
                          const qr_lm_state_params *p, qr_lm_state **out, qm_error *err)
{
    *out = NULL;
    if (p->n_batch == 0 || p->n_ctx == 0)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "n_ctx and n_batch must be >= 1");
    qr_lm_state *s = calloc(1, sizeof *s);
    if (!s) return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    s->n_batch = p->n_batch;
    s->n_ctx = p->n_ctx;
    s->n_seq = p->n_seq ? p->n_seq : 1;
    qm_status pst = qr_pool_new(p->threads, &s->pool, err);
    if (pst != QM_OK) {
        free(s);
        return pst;
    }
    s->mm.pool = s->pool;
    s->mm.act = p->act;
    s->normed_prompt_act = p->one_term_prompts ? QR_ACT_INT8 : p->act;
    s->mm.kernels = qr_kernels_get();
    s->mm.row_invariant = p->row_invariant;
    size_t nb = p->n_batch;
    size_t q_dim = (size_t)hp->n_heads * hp->head_dim, kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    s->qkv_stride = q_dim + 2 * kv_dim;
    s->n_logits_cap = p->logits_all ? nb : s->n_seq;
    bool ok = true;
    s->x = alloc_floats(nb, hp->dim, &ok);
    s->xb = alloc_floats(nb, hp->dim > q_dim ? hp->dim : q_dim, &ok);
    s->qkv = alloc_floats(nb, s->qkv_stride, &ok);
    s->att = alloc_floats(nb, q_dim, &ok);
    s->hb = alloc_floats(nb, hp->ffn_dim, &ok);
    /* hb2 also holds a later column panel's product of the down projection (qr_linear_panels' tmp, n x dim) */
    s->hb2 = alloc_floats(nb, hp->ffn_dim > hp->dim ? hp->ffn_dim : hp->dim, &ok);
    s->logits = alloc_floats(s->n_logits_cap, hp->vocab, &ok);
    const size_t n_kv = (size_t)s->n_seq * hp->n_layers;
    s->kv = calloc(n_kv ? n_kv : 1, sizeof *s->kv);
    s->n_layers = s->kv ? hp->n_layers : 0;
    if (!ok || !s->kv) goto nomem;

    /* The matmul scratch: the largest any product of this model needs, for a full batch and for one row. */
    size_t work = 0;
    for (size_t i = 0; i < n_mats; i++) {
        size_t a = qr_matmul_work_size(&mats[i], nb, &s->mm), b = qr_matmul_work_size(&mats[i], 1, &s->mm);
        if (a == SIZE_MAX || b == SIZE_MAX) goto nomem;
        if (a > work) work = a;
        if (b > work) work = b;
    }
    s->work_size = work;
    if (work && posix_memalign(&s->work, 64, work) != 0) { s->work = NULL; goto nomem; }

    size_t scratch = 0;
    for (size_t i = 0; i < n_kv; i++) {
        const uint32_t l = (uint32_t)(i % hp->n_layers);
        uint32_t win = hp->window ? hp->window[l] : 0;
        uint32_t cap = qr_kv_capacity(p->n_ctx, win, p->n_batch);
        size_t bytes = qr_kv_bytes(p->kv_type, hp->n_kv_heads, hp->head_dim, cap);
        if (bytes == SIZE_MAX) goto nomem;
        void *k = NULL, *v = NULL;
        if (posix_memalign(&k, 64, bytes ? bytes : 64) != 0) goto nomem;
        if (posix_memalign(&v, 64, bytes ? bytes : 64) != 0) { free(k); goto nomem; }
        /* zeroed, so a bug that read an unwritten slot would read zeros rather than garbage */
        memset(k, 0, bytes);
        memset(v, 0, bytes);
        qr_kv_layer_init(&s->kv[i], p->kv_type, hp->n_kv_heads, hp->head_dim, cap, win, k, v);
        size_t sc = qr_attn_scratch_floats(&s->kv[i], qr_pool_threads(s->pool));
        if (sc > scratch) scratch = sc;
    }
    s->attn_scratch = alloc_floats(scratch ? scratch : 1, 1, &ok);
    if (!ok) goto nomem;
    *out = s;
    return QM_OK;
nomem:
    {
        /* kv layers not yet initialised have NULL pointers: free(NULL) is fine */
        qr_lm_state_free(s);
        return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET,
                       "cannot allocate the buffers of %u sequence(s) (n_ctx %u, n_batch %u); try a smaller -c or -b",
                       s->n_seq, p->n_ctx, p->n_batch);
    }
}

void qr_lm_count_attention(qr_lm_state *s, const qr_lm_rows *r)
{
    for (size_t i = 0; i < r->n_spans; i++) {
        const qr_lm_span *sp = &r->spans[i];
        for (uint32_t l = 0; l < s->n_layers; l++)
            s->kv_bytes += qr_kv_attended_bytes(qr_lm_kv(s, sp->seq, l), sp->pos0, sp->n);
    }
}

void qr_lm_state_free(qr_lm_state *s)
{
    if (!s) return;
    free(s->x);
    free(s->xb);
    free(s->qkv);
    free(s->att);
    free(s->hb);
    free(s->hb2);
    free(s->logits);
    free(s->work);
    free(s->attn_scratch);
    if (s->kv)
        for (size_t i = 0; i < (size_t)s->n_seq * s->n_layers; i++) {  /* those a failed new did not reach are zeroed */
            free(s->kv[i].k);
            free(s->kv[i].v);
        }
    free(s->kv);
    qr_pool_free(s->pool);
    free(s);
}

/* ---- shared blocks --------------------------------------------------------------------------------- */

void qr_embed_rows(const qr_matrix *embd, const int32_t *ids, size_t n, float *x, size_t ldx)
{
    for (size_t i = 0; i < n; i++) qr_matrix_row_f32(embd, (size_t)ids[i], x + i * ldx);
}

void qr_add_position_rows(const qr_matrix *pos, uint32_t pos0, size_t n, float *x, size_t ldx, float *tmp)
{
    for (size_t i = 0; i < n; i++) {
        qr_matrix_row_f32(pos, (size_t)pos0 + i, tmp);
        qr_add(x + i * ldx, tmp, pos->cols);
    }
}

void qr_lm_add_positions(qr_lm_state *s, const qr_lm_rows *r, const qr_matrix *pos, float *x, size_t ldx)
{
    for (size_t i = 0; i < r->n_spans; i++) {
        const qr_lm_span *sp = &r->spans[i];
        qr_add_position_rows(pos, sp->pos0, sp->n, x + sp->row0 * ldx, ldx, s->xb);
    }
}

void qr_lm_rope(qr_lm_state *s, const qr_lm_rows *r, float *x, size_t ldx, size_t n_heads, size_t head_dim,
                const float *inv_freq)
{
    for (size_t i = 0; i < r->n_spans; i++) {
        const qr_lm_span *sp = &r->spans[i];
        qr_rows_rope_half(s->pool, x + sp->row0 * ldx, ldx, sp->n, n_heads, head_dim, sp->pos0, inv_freq);
    }
}

void qr_lm_attend(qr_lm_state *s, const qr_lm_rows *r, uint32_t l, const qr_attn_shape *shape, const float *q,
                  const float *k, const float *v, size_t ldqkv, float *out, size_t ldo)
{
    for (size_t i = 0; i < r->n_spans; i++) {
        const qr_lm_span *sp = &r->spans[i];
        qr_kv_layer *kv = qr_lm_kv(s, sp->seq, l);
        const size_t o = sp->row0 * ldqkv;
        qr_kv_store(kv, sp->pos0, sp->n, k + o, ldqkv, v + o, ldqkv);
        qr_attn_causal(shape, kv, sp->pos0, sp->n, q + o, ldqkv, out + sp->row0 * ldo, ldo, s->attn_scratch, s->pool);
    }
}

size_t qr_lm_logit_count(const qr_lm_rows *r) { return r->all_logits ? r->n : r->n_spans; }

size_t qr_lm_logit_row(const qr_lm_rows *r, size_t i)
{
    if (r->all_logits) return i;
    return r->spans[i].row0 + r->spans[i].n - 1;
}

/* The options of a product of n rows of this kind: the session's, or its one-term mode, at every row
 * count (a decode step's row gets the bits a prompt's would). */
static const qr_matmul_opts *opts_for(const qr_lm_state *s, qr_x_kind kind, size_t n, qr_matmul_opts *tmp)
{
    (void)n;
    if (kind != QR_X_NORMED || s->normed_prompt_act == s->mm.act) return &s->mm;
    *tmp = s->mm;
    tmp->act = s->normed_prompt_act;
    return tmp;
}

static void count_madds(qr_lm_state *s, const qr_matrix *w, size_t n, const qr_matmul_opts *o)
{
    const uint64_t madds = (uint64_t)n * w->rows * w->cols;
    const int terms = qr_matmul_int8_terms(w, n, o);
    if (terms) s->int8_madds += madds * (uint64_t)terms;
    else s->float_madds += madds;
}

/* y = x·Wᵀ (+ b) with the options o. */
static qm_status linear_with(qr_lm_state *s, const qr_matmul_opts *o, const qr_matrix *w, const float *b, size_t n,
                             const float *x, size_t ldx, float *y, size_t ldy)
{
    qm_status st = qr_matmul(NULL, w, n, x, ldx, y, ldy, s->work, s->work_size, o);
    if (st != QM_OK) return st;
    count_madds(s, w, n, o);
    if (b) qr_add_bias_rows(y, ldy, n, b, w->rows);
    return QM_OK;
}

qm_status qr_linear(qr_lm_state *s, qr_x_kind kind, const qr_matrix *w, const float *b, size_t n, const float *x,
                    size_t ldx, float *y, size_t ldy)
{
    qr_matmul_opts tmp;
    return linear_with(s, opts_for(s, kind, n, &tmp), w, b, n, x, ldx, y, ldy);
}

qm_status qr_linear_part(qr_lm_state *s, qr_x_kind kind, const qr_shard_part *part, const qr_matrix *w,
                         const float *b, size_t panels, size_t n, const float *x, size_t ldx, float *y, float *tmp)
{
    qr_matmul_opts t;
    const qr_matmul_opts *o = opts_for(s, kind, n, &t);
    if (part && part->groups) { /* X's rows are parts of the panel's rows other ranks hold the rest of */
        if (o != &t) t = *o;
        t.x_amax_reduce = qr_shard_amax;
        t.x_amax_ctx = (void *)part;
        o = &t;
    }
    const size_t rows = w->rows / panels;
    for (size_t p = 0; p < panels; p++) {
        const qr_matrix pw = qr_matrix_rows(w, p * rows, rows);
        qm_status st = linear_with(s, o, &pw, p ? NULL : b, n, x + p * w->cols, ldx, p ? tmp : y, rows);
        if (st != QM_OK) return st;
        if (p) qr_rows_add(s->pool, y, tmp, n * rows);
    }
    return QM_OK;
}

qm_status qr_linear_panels(qr_lm_state *s, qr_x_kind kind, const qr_matrix *w, const float *b, size_t panels,
                           size_t n, const float *x, size_t ldx, float *y, float *tmp)
{
    return qr_linear_part(s, kind, NULL, w, b, panels, n, x, ldx, y, tmp);
}

qm_status qr_linear_many(qr_lm_state *s, qr_x_kind kind, const qr_matrix *const *w, const float *const *b,
                         size_t count, size_t n, const float *x, size_t ldx, float *const *y, size_t ldy)
{
    qr_matmul_opts tmp;
    const qr_matmul_opts *o = opts_for(s, kind, n, &tmp);
    qm_status st = qr_matmul_many(NULL, w, count, n, x, ldx, y, ldy, s->work, s->work_size, o);
    if (st != QM_OK) return st;
    for (size_t p = 0; p < count; p++) count_madds(s, w[p], n, o);
    for (size_t p = 0; b && p < count; p++)
        if (b[p]) qr_add_bias_rows(y[p], ldy, n, b[p], w[p]->rows);
    return QM_OK;
}

qm_status qr_lm_logits(qr_lm_state *s, const qr_matrix *head, const float *head_bias, size_t n, size_t dim,
                       size_t vocab)
{
    return qr_linear(s, QR_X_FLOAT, head, head_bias, n, s->xb, dim, s->logits, vocab);
}

qm_status qr_lm_logits_shard(qr_lm_state *s, const qr_shard *sh, const qr_matrix *head_part, size_t n, size_t dim,
                             size_t vocab)
{
    if (!qr_shard_active(sh)) return qr_lm_logits(s, head_part, NULL, n, dim, vocab);
    const size_t v0 = qr_shard_begin(vocab, sh->rank, sh->n_ranks);
    qm_status st = qr_linear(s, QR_X_FLOAT, head_part, NULL, n, s->xb, dim, s->logits + v0, vocab);
    for (size_t i = 0; st == QM_OK && i < n; i++)
        if (sh->allgather(sh->ctx, s->logits + i * vocab, vocab) != 0) st = QM_ERR_IO;
    return st;
}

/* ---- the family table ------------------------------------------------------------------------------ */
/* Each defined in its own qr_arch_*.c; a new family is its file and one name here. */
extern const qr_lm_family qr_family_gpt2, qr_family_gpt_neo, qr_family_llama, qr_family_gemma2;

const qr_lm_family *qr_lm_family_for(qm_arch arch)
{
    static const qr_lm_family *const families[] = { &qr_family_gpt2, &qr_family_gpt_neo, &qr_family_llama,
                                                    &qr_family_gemma2 };
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (families[i]->arch == arch) return families[i];
    return NULL;
}
