/* qr_arch_seq2seq.c — torch.nn.Transformer's encoder-decoder (spec/ARCHITECTURES.md §7), read in place.
 *
 * The math, as torch computes it in eval mode (d = dim, H heads of d/H, scores scaled by 1/√(d/H)):
 *
 *   encoder input   x = enc_embd[src]·embed_scale + pos_enc[0 .. S)
 *   encoder layer   post-norm:  x = LN1(x + SelfAttn(x));        x = LN2(x + FFN(x))
 *                   pre-norm:   x = x + SelfAttn(LN1(x));        x = x + FFN(LN2(x))
 *   memory          mem = enc_norm(x)
 *   decoder input   y = dec_embd[tgt]·embed_scale + pos_enc[pos]
 *   decoder layer   post-norm:  y = LN1(y + CausalSelfAttn(y)); y = LN2(y + CrossAttn(y, mem)); y = LN3(y + FFN(y))
 *                   pre-norm:   y = y + CausalSelfAttn(LN1(y)); y = y + CrossAttn(LN2(y), mem); y = y + FFN(LN3(y))
 *   logits          output(dec_norm(y))
 *   FFN(x) = W2·act(W1·x + b1) + b2;  attention projections through the stacked in_proj [3d, d] (q, k, v).
 *
 * Every product goes through qr_matmul over all rows at once (packed source sentences; the hypotheses of a
 * beam); attention is the shared qr_attn_full (encoder, cross) and qr_attn_causal over a KV cache (decoder).
 */
#include "qr_arch_seq2seq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qr_rows.h"

#define S2S_MAX_LAYERS 256u
#define S2S_MAX_DIM (1u << 16)
#define S2S_MAX_VOCAB (1u << 24)
#define S2S_MAX_LEN (1u << 16)

void qr_s2s_free(qr_s2s *m)
{
    if (!m) return;
    free(m->enc);
    free(m->dec);
    free(m);
}

#define TRY(expr) do { qm_status st_ = (expr); if (st_ != QM_OK) { qr_s2s_free(m); return st_; } } while (0)

static qm_status load_layer(qr_loader *ld, const qr_s2s *m, bool dec, unsigned i, qr_s2s_layer *L)
{
    size_t d = m->dim, F = m->ffn_dim;
    qm_status st;
#define REQ(expr) do { if ((st = (expr)) != QM_OK) return st; } while (0)
    qm_tensor_id qkv = dec ? QM_TENSOR_DEC_ATTN_QKV : QM_TENSOR_ENC_ATTN_QKV;
    REQ(qr_load_matrix(ld, qkv, i, 3 * d, d, &L->attn_qkv));
    REQ(qr_load_vector_opt(ld, dec ? QM_TENSOR_DEC_ATTN_QKV_B : QM_TENSOR_ENC_ATTN_QKV_B, i, 3 * d, &L->attn_qkv_b));
    REQ(qr_load_matrix(ld, dec ? QM_TENSOR_DEC_ATTN_OUT : QM_TENSOR_ENC_ATTN_OUT, i, d, d, &L->attn_out));
    REQ(qr_load_vector_opt(ld, dec ? QM_TENSOR_DEC_ATTN_OUT_B : QM_TENSOR_ENC_ATTN_OUT_B, i, d, &L->attn_out_b));
    REQ(qr_load_matrix(ld, dec ? QM_TENSOR_DEC_FFN_UP : QM_TENSOR_ENC_FFN_UP, i, F, d, &L->ffn_up));
    REQ(qr_load_vector_opt(ld, dec ? QM_TENSOR_DEC_FFN_UP_B : QM_TENSOR_ENC_FFN_UP_B, i, F, &L->ffn_up_b));
    REQ(qr_load_matrix(ld, dec ? QM_TENSOR_DEC_FFN_DOWN : QM_TENSOR_ENC_FFN_DOWN, i, d, F, &L->ffn_down));
    REQ(qr_load_vector_opt(ld, dec ? QM_TENSOR_DEC_FFN_DOWN_B : QM_TENSOR_ENC_FFN_DOWN_B, i, d, &L->ffn_down_b));
    REQ(qr_load_vector(ld, dec ? QM_TENSOR_DEC_LN1 : QM_TENSOR_ENC_LN1, i, d, &L->ln1));
    REQ(qr_load_vector_opt(ld, dec ? QM_TENSOR_DEC_LN1_B : QM_TENSOR_ENC_LN1_B, i, d, &L->ln1_b));
    REQ(qr_load_vector(ld, dec ? QM_TENSOR_DEC_LN2 : QM_TENSOR_ENC_LN2, i, d, &L->ln2));
    REQ(qr_load_vector_opt(ld, dec ? QM_TENSOR_DEC_LN2_B : QM_TENSOR_ENC_LN2_B, i, d, &L->ln2_b));
    if (!dec) return QM_OK;
    qr_matrix cross;
    const float *cross_b;
    REQ(qr_load_matrix(ld, QM_TENSOR_DEC_CROSS_QKV, i, 3 * d, d, &cross));
    REQ(qr_load_vector_opt(ld, QM_TENSOR_DEC_CROSS_QKV_B, i, 3 * d, &cross_b));
    L->cross_q = qr_matrix_rows(&cross, 0, d);
    L->cross_kv = qr_matrix_rows(&cross, d, 2 * d);
    L->cross_q_b = cross_b;
    L->cross_kv_b = cross_b ? cross_b + d : NULL;
    REQ(qr_load_matrix(ld, QM_TENSOR_DEC_CROSS_OUT, i, d, d, &L->cross_out));
    REQ(qr_load_vector_opt(ld, QM_TENSOR_DEC_CROSS_OUT_B, i, d, &L->cross_out_b));
    REQ(qr_load_vector(ld, QM_TENSOR_DEC_LN3, i, d, &L->ln3));
    REQ(qr_load_vector_opt(ld, QM_TENSOR_DEC_LN3_B, i, d, &L->ln3_b));
#undef REQ
    return QM_OK;
}

qm_status qr_s2s_load(qr_loader *ld, qr_s2s **out)
{
    *out = NULL;
    qr_s2s *m = calloc(1, sizeof *m);
    if (!m) return qm_fail(ld->err, QM_ERR_NOMEM, ld->path, NULL, QM_NO_OFFSET, "out of memory");
    TRY(qr_load_u32(ld, QM_HP_SRC_VOCAB_SIZE, &m->src_vocab));
    TRY(qr_check_range(ld, QM_HP_SRC_VOCAB_SIZE, m->src_vocab, 1, S2S_MAX_VOCAB));
    TRY(qr_load_u32(ld, QM_HP_TGT_VOCAB_SIZE, &m->tgt_vocab));
    TRY(qr_check_range(ld, QM_HP_TGT_VOCAB_SIZE, m->tgt_vocab, 1, S2S_MAX_VOCAB));
    TRY(qr_load_u32(ld, QM_HP_DIM, &m->dim));
    TRY(qr_check_range(ld, QM_HP_DIM, m->dim, 1, S2S_MAX_DIM));
    TRY(qr_load_u32(ld, QM_HP_N_HEADS, &m->n_heads));
    TRY(qr_check_range(ld, QM_HP_N_HEADS, m->n_heads, 1, m->dim));
    if (m->dim % m->n_heads) {
        char key[QM_KEY_NAME_MAX];
        qm_hparam_key(key, sizeof key, QM_ARCH_SEQ2SEQ, QM_HP_N_HEADS);
        qm_status st = qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, key, QM_NO_OFFSET,
                               "%u heads do not divide dim %u", m->n_heads, m->dim);
        qr_s2s_free(m);
        return st;
    }
    m->head_dim = m->dim / m->n_heads;
    TRY(qr_load_u32(ld, QM_HP_N_ENC_LAYERS, &m->n_enc));
    TRY(qr_check_range(ld, QM_HP_N_ENC_LAYERS, m->n_enc, 1, S2S_MAX_LAYERS));
    TRY(qr_load_u32(ld, QM_HP_N_DEC_LAYERS, &m->n_dec));
    TRY(qr_check_range(ld, QM_HP_N_DEC_LAYERS, m->n_dec, 1, S2S_MAX_LAYERS));
    TRY(qr_load_u32(ld, QM_HP_FFN_DIM, &m->ffn_dim));
    TRY(qr_check_range(ld, QM_HP_FFN_DIM, m->ffn_dim, 1, 1u << 20));
    TRY(qr_load_u32(ld, QM_HP_MAX_LEN, &m->max_len));
    TRY(qr_check_range(ld, QM_HP_MAX_LEN, m->max_len, 2, S2S_MAX_LEN));
    TRY(qr_load_f32_opt(ld, QM_HP_NORM_EPS, 1e-5f, &m->norm_eps));
    TRY(qr_load_f32(ld, QM_HP_EMBED_SCALE, &m->embed_scale));
    TRY(qr_load_bool_opt(ld, QM_HP_NORM_FIRST, false, &m->norm_first));
    const char *a;
    uint64_t alen;
    TRY(qr_load_string_opt(ld, QM_HP_ACTIVATION, "relu", &a, &alen));
    if (!qr_actfn_from_name(a, (size_t)alen, &m->act) || (m->act != QR_ACTFN_RELU && m->act != QR_ACTFN_GELU_ERF)) {
        char key[QM_KEY_NAME_MAX];
        qm_hparam_key(key, sizeof key, QM_ARCH_SEQ2SEQ, QM_HP_ACTIVATION);
        qm_status st = qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, key, QM_NO_OFFSET,
                               "\"%.*s\": nn.Transformer layers use relu or gelu", (int)(alen > 32 ? 32 : alen), a);
        qr_s2s_free(m);
        return st;
    }
    size_t d = m->dim;
    TRY(qr_load_matrix(ld, QM_TENSOR_ENC_EMBD, 0, m->src_vocab, d, &m->enc_embd));
    TRY(qr_load_matrix(ld, QM_TENSOR_DEC_EMBD, 0, m->tgt_vocab, d, &m->dec_embd));
    TRY(qr_load_matrix(ld, QM_TENSOR_POS_ENC, 0, m->max_len, d, &m->pos_enc));
    m->enc = calloc(m->n_enc, sizeof *m->enc);
    m->dec = calloc(m->n_dec, sizeof *m->dec);
    if (!m->enc || !m->dec) {
        qr_s2s_free(m);
        return qm_fail(ld->err, QM_ERR_NOMEM, ld->path, NULL, QM_NO_OFFSET, "out of memory");
    }
    for (unsigned i = 0; i < m->n_enc; i++) TRY(load_layer(ld, m, false, i, &m->enc[i]));
    for (unsigned i = 0; i < m->n_dec; i++) TRY(load_layer(ld, m, true, i, &m->dec[i]));
    TRY(qr_load_vector(ld, QM_TENSOR_ENC_NORM, 0, d, &m->enc_norm));
    TRY(qr_load_vector_opt(ld, QM_TENSOR_ENC_NORM_B, 0, d, &m->enc_norm_b));
    TRY(qr_load_vector(ld, QM_TENSOR_DEC_NORM, 0, d, &m->dec_norm));
    TRY(qr_load_vector_opt(ld, QM_TENSOR_DEC_NORM_B, 0, d, &m->dec_norm_b));
    TRY(qr_load_matrix(ld, QM_TENSOR_OUTPUT, 0, m->tgt_vocab, d, &m->output));
    TRY(qr_load_vector_opt(ld, QM_TENSOR_OUTPUT_B, 0, m->tgt_vocab, &m->output_b));
    *out = m;
    return QM_OK;
}

/* ---- state -------------------------------------------------------------------------------------------- */

void qr_s2s_state_free(qr_s2s_state *s)
{
    if (!s) return;
    free(s->work);
    qr_pool_free(s->pool);
    free(s->attn_scratch);
    free(s->ex);
    free(s->exb);
    free(s->eqkv);
    free(s->eatt);
    free(s->eh);
    free(s->mem);
    free(s->ckv);
    free(s->dx);
    free(s->dxb);
    free(s->dqkv);
    free(s->datt);
    free(s->dh);
    free(s->logits);
    free(s->kv);
    free(s->kv_alt);
    free(s->kv_mem);
    free(s->pos_tmp);
    free(s);
}

/* rows x cols floats, or NULL (also when the size overflows) */
static float *floats(size_t rows, size_t cols)
{
    if (rows && cols > SIZE_MAX / sizeof(float) / rows) return NULL;
    return malloc(rows * cols * sizeof(float));
}

qm_status qr_s2s_state_new(const qr_s2s *m, const qr_matrix *mats, size_t n_mats, const qr_s2s_params *p,
                           qr_s2s_state **out, qm_error *err)
{
    *out = NULL;
    if (p->max_src < 1 || p->max_src > (1u << 24) || p->max_tgt < 1 || p->max_tgt > m->max_len || p->max_seqs < 1 ||
        p->max_seqs > 1024)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET,
                       "seq2seq sizes out of range: %u source tokens (1 .. 2^24), %u target positions (1 .. %u), "
                       "%u hypotheses (1 .. 1024)", p->max_src, p->max_tgt, m->max_len, p->max_seqs);
    qr_s2s_state *s = calloc(1, sizeof *s);
    if (!s) return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    s->p = *p;
    qm_status pst = qr_pool_new(p->threads, &s->pool, err);
    if (pst != QM_OK) {
        free(s);
        return pst;
    }
    const int threads = qr_pool_threads(s->pool);
    s->mm = (qr_matmul_opts){ .pool = s->pool, .act = p->act, .kernels = qr_kernels_get() };
    size_t d = m->dim, F = m->ffn_dim, S = p->max_src;
    s->dec_rows = p->max_seqs > p->max_tgt ? p->max_seqs : p->max_tgt;
    size_t R = s->dec_rows, rows_max = S > R ? S : R;
    for (size_t i = 0; i < n_mats; i++) {
        size_t ws = qr_matmul_work_size(&mats[i], rows_max, &s->mm);
        if (ws == SIZE_MAX) {
            qr_s2s_state_free(s);
            return qm_fail(err, QM_ERR_OVERFLOW, NULL, NULL, QM_NO_OFFSET, "work buffer size overflows");
        }
        if (ws > s->work_size) s->work_size = ws;
    }
    s->work = s->work_size ? aligned_alloc(64, (s->work_size + 63) / 64 * 64) : NULL;
    s->ex = floats(S, d);
    s->exb = floats(S, d);
    s->eqkv = floats(S, 3 * d);
    s->eatt = floats(S, d);
    s->eh = floats(S, F);
    s->mem = floats(S, d);
    s->ckv = floats((size_t)m->n_dec * S, 2 * d);
    s->dx = floats(R, d);
    s->dxb = floats(R, d);
    s->dqkv = floats(R, 3 * d);
    s->datt = floats(R, d);
    s->dh = floats(R, F);
    s->logits = floats(R, m->tgt_vocab);
    s->pos_tmp = floats(1, d);
    size_t n_kv = (size_t)p->max_seqs * m->n_dec;
    s->kv = calloc(n_kv, sizeof *s->kv);
    s->kv_alt = calloc(n_kv, sizeof *s->kv_alt);
    size_t kvb = qr_kv_bytes(p->kv_type, m->n_heads, m->head_dim, p->max_tgt);
    size_t kvb_al = kvb == SIZE_MAX ? SIZE_MAX : (kvb + 63) / 64 * 64;
    bool kv_ok = kvb_al != SIZE_MAX && kvb_al <= SIZE_MAX / 4 / (n_kv ? n_kv : 1);
    s->kv_mem = kv_ok ? aligned_alloc(64, 4 * n_kv * kvb_al) : NULL;
    if (!s->ex || !s->exb || !s->eqkv || !s->eatt || !s->eh || !s->mem || !s->ckv || !s->dx || !s->dxb || !s->dqkv ||
        !s->datt || !s->dh || !s->logits || !s->pos_tmp || !s->kv || !s->kv_alt || !s->kv_mem ||
        (s->work_size && !s->work)) {
        qr_s2s_state_free(s);
        return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET,
                       "cannot allocate seq2seq buffers (%u source tokens, %u target positions, %u hypotheses)",
                       p->max_src, p->max_tgt, p->max_seqs);
    }
    uint8_t *kvp = s->kv_mem;
    for (size_t i = 0; i < n_kv; i++) {
        qr_kv_layer_init(&s->kv[i], p->kv_type, m->n_heads, m->head_dim, p->max_tgt, 0, kvp, kvp + kvb_al);
        kvp += 2 * kvb_al;
        qr_kv_layer_init(&s->kv_alt[i], p->kv_type, m->n_heads, m->head_dim, p->max_tgt, 0, kvp, kvp + kvb_al);
        kvp += 2 * kvb_al;
    }
    size_t sc1 = qr_attn_scratch_floats(&s->kv[0], threads), sc2 = qr_attn_full_scratch_floats(threads);
    s->attn_scratch = floats(1, sc1 > sc2 ? sc1 : sc2);
    if (!s->attn_scratch) {
        qr_s2s_state_free(s);
        return qm_fail(err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    }
    *out = s;
    return QM_OK;
}

/* ---- forward pieces ------------------------------------------------------------------------------------ */

/* y = x·Wᵀ + b over n rows */
static qm_status linear(qr_s2s_state *s, const qr_matrix *w, const float *b, size_t n, const float *x, size_t ldx,
                        float *y, size_t ldy)
{
    qm_status st = qr_matmul(NULL, w, n, x, ldx, y, ldy, s->work, s->work_size, &s->mm);
    if (st == QM_OK && b) qr_add_bias_rows(y, ldy, n, b, w->rows);
    return st;
}

/* The residual step of a sub-layer: post-norm x = LN(x + t), pre-norm x = x + t. */
static void residual(const qr_s2s *m, qr_pool *pool, float *x, const float *t, size_t n, const float *ln,
                     const float *ln_b)
{
    qr_rows_add(pool, x, t, n * m->dim);
    if (!m->norm_first) qr_rows_layernorm(pool, x, x, ln, ln_b, n, m->dim, m->norm_eps);
}

/* The input of a sub-layer: pre-norm LN(x) into xb, post-norm x itself. */
static const float *sublayer_input(const qr_s2s *m, qr_pool *pool, const float *x, float *xb, size_t n,
                                   const float *ln, const float *ln_b)
{
    if (!m->norm_first) return x;
    qr_rows_layernorm(pool, xb, x, ln, ln_b, n, m->dim, m->norm_eps);
    return xb;
}

/* FFN(in) into out (n rows): W2·act(W1·in + b1) + b2 */
static qm_status ffn(const qr_s2s *m, qr_s2s_state *s, const qr_s2s_layer *L, const float *in, float *h, float *out,
                     size_t n)
{
    qm_status st = linear(s, &L->ffn_up, L->ffn_up_b, n, in, m->dim, h, m->ffn_dim);
    if (st != QM_OK) return st;
    qr_rows_activate(s->pool, m->act, h, n * m->ffn_dim);
    return linear(s, &L->ffn_down, L->ffn_down_b, n, h, m->ffn_dim, out, m->dim);
}

static qr_attn_shape attn_shape(const qr_s2s *m)
{
    return (qr_attn_shape){ m->n_heads, m->n_heads, m->head_dim, 1.0f / sqrtf((float)m->head_dim), 0.0f };
}

qm_status qr_s2s_encode(const qr_s2s *m, qr_s2s_state *s, const int32_t *ids, const uint32_t *lens, size_t n_sent,
                        qm_error *err)
{
    size_t total = 0, d = m->dim;
    for (size_t i = 0; i < n_sent; i++) {
        if (lens[i] < 1 || lens[i] > m->max_len)
            return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET,
                           "source sentence %zu has %u tokens; the model takes 1 .. %u", i, lens[i], m->max_len);
        total += lens[i];
    }
    if (n_sent == 0 || total > s->p.max_src)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET,
                       "%zu source tokens in %zu sentences; this translator encodes 1 .. %u at a time", total, n_sent,
                       s->p.max_src);
    for (size_t i = 0; i < total; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= m->src_vocab)
            return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET,
                           "source id %d is outside the vocabulary (0 .. %u)", ids[i], m->src_vocab - 1);
    /* x = enc_embd[src]·embed_scale + pos_enc[0 .. len) per sentence */
    float *x = s->ex;
    qr_embed_rows(&m->enc_embd, ids, total, x, d);
    qr_scale(x, m->embed_scale, total * d);
    for (size_t i = 0, off = 0; i < n_sent; off += lens[i], i++)
        qr_add_position_rows(&m->pos_enc, 0, lens[i], x + off * d, d, s->pos_tmp);
    qr_attn_shape sh = attn_shape(m);
    for (uint32_t l = 0; l < m->n_enc; l++) {
        const qr_s2s_layer *L = &m->enc[l];
        /* self-attention, each sentence over its own tokens */
        const float *in = sublayer_input(m, s->pool, x, s->exb, total, L->ln1, L->ln1_b);
        qm_status st = linear(s, &L->attn_qkv, L->attn_qkv_b, total, in, d, s->eqkv, 3 * d);
        if (st != QM_OK) return st;
        for (size_t i = 0, off = 0; i < n_sent; off += lens[i], i++) {
            const float *q = s->eqkv + off * 3 * d;
            qr_attn_full(&sh, lens[i], q, 3 * d, lens[i], q + d, 3 * d, q + 2 * d, 3 * d, s->eatt + off * d, d,
                         s->attn_scratch, s->pool);
        }
        if ((st = linear(s, &L->attn_out, L->attn_out_b, total, s->eatt, d, s->exb, d)) != QM_OK) return st;
        residual(m, s->pool, x, s->exb, total, L->ln1, L->ln1_b);
        /* feed-forward */
        in = sublayer_input(m, s->pool, x, s->exb, total, L->ln2, L->ln2_b);
        if ((st = ffn(m, s, L, in, s->eh, s->eatt, total)) != QM_OK) return st;
        residual(m, s->pool, x, s->eatt, total, L->ln2, L->ln2_b);
    }
    qr_rows_layernorm(s->pool, s->mem, x, m->enc_norm, m->enc_norm_b, total, d, m->norm_eps);
    s->n_mem = (uint32_t)total;
    s->n_ckv = 0;
    return QM_OK;
}

qm_status qr_s2s_set_source(const qr_s2s *m, qr_s2s_state *s, uint32_t mem_row0, uint32_t len, qm_error *err)
{
    size_t d = m->dim;
    if (len == 0 || mem_row0 > s->n_mem || len > s->n_mem - mem_row0)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET,
                       "source rows %u .. %u are not in the last encode (%u rows)", mem_row0, mem_row0 + len, s->n_mem);
    for (uint32_t l = 0; l < m->n_dec; l++) {
        const qr_s2s_layer *L = &m->dec[l];
        float *ckv = s->ckv + (size_t)l * s->p.max_src * 2 * d;
        qm_status st = linear(s, &L->cross_kv, L->cross_kv_b, len, s->mem + (size_t)mem_row0 * d, d, ckv, 2 * d);
        if (st != QM_OK) return st;
    }
    s->n_ckv = len;
    return QM_OK;
}

qm_status qr_s2s_decode(const qr_s2s *m, qr_s2s_state *s, const int32_t *ids, size_t n_seqs, size_t n_pos,
                        uint32_t pos0, qm_error *err)
{
    size_t d = m->dim, rows = n_seqs * n_pos;
    if (n_seqs < 1 || n_pos < 1 || (n_seqs > 1 && n_pos > 1) || n_seqs > s->p.max_seqs ||
        pos0 > s->p.max_tgt || n_pos > s->p.max_tgt - pos0)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET,
                       "decoder call of %zu hypotheses x %zu positions at %u (at most %u hypotheses, %u positions)",
                       n_seqs, n_pos, pos0, s->p.max_seqs, s->p.max_tgt);
    if (!s->n_ckv)
        return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET, "no source set (qr_s2s_set_source)");
    for (size_t i = 0; i < rows; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= m->tgt_vocab)
            return qm_fail(err, QM_ERR_INVALID_ARGUMENT, NULL, NULL, QM_NO_OFFSET,
                           "target id %d is outside the vocabulary (0 .. %u)", ids[i], m->tgt_vocab - 1);
    /* y = dec_embd[tgt]·embed_scale + pos_enc[pos] */
    float *x = s->dx;
    qr_embed_rows(&m->dec_embd, ids, rows, x, d);
    qr_scale(x, m->embed_scale, rows * d);
    for (size_t b = 0; b < n_seqs; b++) qr_add_position_rows(&m->pos_enc, pos0, n_pos, x + b * n_pos * d, d, s->pos_tmp);
    qr_attn_shape sh = attn_shape(m);
    for (uint32_t l = 0; l < m->n_dec; l++) {
        const qr_s2s_layer *L = &m->dec[l];
        /* causal self-attention, each hypothesis over its own cache */
        const float *in = sublayer_input(m, s->pool, x, s->dxb, rows, L->ln1, L->ln1_b);
        qm_status st = linear(s, &L->attn_qkv, L->attn_qkv_b, rows, in, d, s->dqkv, 3 * d);
        if (st != QM_OK) return st;
        for (size_t b = 0; b < n_seqs; b++) {
            qr_kv_layer *kv = &s->kv[b * m->n_dec + l];
            const float *q = s->dqkv + b * n_pos * 3 * d;
            qr_kv_store(kv, pos0, n_pos, q + d, 3 * d, q + 2 * d, 3 * d);
            qr_attn_causal(&sh, kv, pos0, n_pos, q, 3 * d, s->datt + b * n_pos * d, d, s->attn_scratch, s->pool);
        }
        if ((st = linear(s, &L->attn_out, L->attn_out_b, rows, s->datt, d, s->dxb, d)) != QM_OK) return st;
        residual(m, s->pool, x, s->dxb, rows, L->ln1, L->ln1_b);
        /* cross-attention: every row over the current source's keys and values */
        in = sublayer_input(m, s->pool, x, s->dxb, rows, L->ln2, L->ln2_b);
        if ((st = linear(s, &L->cross_q, L->cross_q_b, rows, in, d, s->dqkv, d)) != QM_OK) return st;
        const float *ckv = s->ckv + (size_t)l * s->p.max_src * 2 * d;
        qr_attn_full(&sh, rows, s->dqkv, d, s->n_ckv, ckv, 2 * d, ckv + d, 2 * d, s->datt, d, s->attn_scratch,
                     s->pool);
        if ((st = linear(s, &L->cross_out, L->cross_out_b, rows, s->datt, d, s->dxb, d)) != QM_OK) return st;
        residual(m, s->pool, x, s->dxb, rows, L->ln2, L->ln2_b);
        /* feed-forward */
        in = sublayer_input(m, s->pool, x, s->dxb, rows, L->ln3, L->ln3_b);
        if ((st = ffn(m, s, L, in, s->dh, s->datt, rows)) != QM_OK) return st;
        residual(m, s->pool, x, s->datt, rows, L->ln3, L->ln3_b);
    }
    qr_rows_layernorm(s->pool, s->dxb, x, m->dec_norm, m->dec_norm_b, rows, d, m->norm_eps);
    return linear(s, &m->output, m->output_b, rows, s->dxb, d, s->logits, m->tgt_vocab);
}

void qr_s2s_reorder(const qr_s2s *m, qr_s2s_state *s, const uint32_t *parent, size_t n_seqs, uint32_t n_pos)
{
    for (size_t b = 0; b < n_seqs; b++)
        for (uint32_t l = 0; l < m->n_dec; l++)
            qr_kv_copy(&s->kv_alt[b * m->n_dec + l], &s->kv[(size_t)parent[b] * m->n_dec + l], n_pos);
    qr_kv_layer *t = s->kv;
    s->kv = s->kv_alt;
    s->kv_alt = t;
}
