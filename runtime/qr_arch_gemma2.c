/* qr_arch_gemma2.c — Gemma 2 (spec/ARCHITECTURES.md §6b).
 *
 * Llama's blocks with Gemma's changes: RMSNorm scaled by (1 + w), a norm before and after both attention
 * and the feed-forward, GeGLU (tanh GELU), the embedding scaled by √dim, scores scaled by
 * query_pre_attn_scalar^-1/2 and soft-capped, even layers over a sliding window and odd layers global,
 * the logits soft-capped. The forward pass mirrors HF's Gemma2ForCausalLM; the comments quote it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qr_model.h"
#include "qr_ops.h"
#include "qr_rows.h"

typedef struct gemma2_layer {
    const float *attn_norm;      /* (dim) 1 + input_layernorm.weight */
    const float *post_attn_norm; /* (dim) 1 + post_attention_layernorm.weight */
    const float *ffn_norm;       /* (dim) 1 + pre_feedforward_layernorm.weight */
    const float *post_ffn_norm;  /* (dim) 1 + post_feedforward_layernorm.weight */
    qr_matrix wq, wk, wv, wo;    /* q_proj (H·hd, dim), k_proj, v_proj (KV·hd, dim), o_proj (dim, H·hd) */
    qr_matrix w_gate, w_up;      /* (ffn_dim, dim) */
    qr_matrix w_down;            /* (dim, ffn_dim), or its column panels */
    size_t down_panels;
} gemma2_layer;

typedef struct gemma2_weights {
    qr_lm_hparams hp;
    float norm_eps, attn_scale, attn_softcap, final_softcap, embed_scale;
    qr_matrix tok_embd;          /* (vocab, dim) embed_tokens */
    gemma2_layer *layers;
    const float *out_norm;       /* (dim) 1 + norm.weight */
    qr_matrix output;            /* lm_head, or tok_embd when tied */
    bool tied;
    float *norms;                /* every (1 + w) above, computed once at load */
    uint32_t *window;            /* [n_layers]: sliding_window on even layers, 0 on odd ones */
    float *inv_freq;             /* [head_dim/2] */
} gemma2_weights;

static void gemma2_free(void *p)
{
    gemma2_weights *w = p;
    if (!w) return;
    free(w->layers);
    free(w->norms);
    free(w->window);
    free(w->inv_freq);
    free(w);
}

static bool gemma2_tied(const void *p) { return ((const gemma2_weights *)p)->tied; }

#define TRY(expr) do { qm_status st_ = (expr); if (st_ != QM_OK) { gemma2_free(w); return st_; } } while (0)

/* HF's Gemma2RMSNorm multiplies by (1 + weight): the stored weight plus one, into *slot (d floats). */
static qm_status load_norm(qr_loader *ld, qm_tensor_id id, unsigned layer, size_t d, float **slot, const float **out)
{
    const float *raw;
    qm_status st = qr_load_vector(ld, id, layer, d, &raw);
    if (st != QM_OK) return st;
    for (size_t i = 0; i < d; i++) (*slot)[i] = 1.0f + raw[i];
    *out = *slot;
    *slot += d;
    return QM_OK;
}

static qm_status gemma2_hparams(qr_loader *ld, gemma2_weights *w, uint32_t *window, float *theta)
{
    qr_lm_hparams *hp = &w->hp;
    float query_scale;
    qm_status st;
#define HP(expr) do { if ((st = (expr)) != QM_OK) return st; } while (0)
    HP(qr_load_u32(ld, QM_HP_VOCAB_SIZE, &hp->vocab));
    HP(qr_load_u32(ld, QM_HP_CONTEXT_LENGTH, &hp->ctx));
    HP(qr_load_u32(ld, QM_HP_DIM, &hp->dim));
    HP(qr_load_u32(ld, QM_HP_N_LAYERS, &hp->n_layers));
    HP(qr_load_u32(ld, QM_HP_N_HEADS, &hp->n_heads));
    HP(qr_load_u32_opt(ld, QM_HP_N_KV_HEADS, hp->n_heads, &hp->n_kv_heads));
    HP(qr_load_u32(ld, QM_HP_HEAD_DIM, &hp->head_dim));
    HP(qr_load_u32(ld, QM_HP_FFN_DIM, &hp->ffn_dim));
    HP(qr_load_u32_opt(ld, QM_HP_SLIDING_WINDOW, 0, window));
    HP(qr_load_f32(ld, QM_HP_NORM_EPS, &w->norm_eps));
    HP(qr_load_f32_opt(ld, QM_HP_ROPE_THETA, 10000.0f, theta));
    HP(qr_load_f32_opt(ld, QM_HP_ATTN_SOFTCAP, 0.0f, &w->attn_softcap));
    HP(qr_load_f32_opt(ld, QM_HP_FINAL_SOFTCAP, 0.0f, &w->final_softcap));
    HP(qr_load_bool_opt(ld, QM_HP_TIED_OUTPUT, true, &w->tied));
    HP(qr_check_range(ld, QM_HP_VOCAB_SIZE, hp->vocab, 1, 1u << 24));
    HP(qr_check_range(ld, QM_HP_CONTEXT_LENGTH, hp->ctx, 1, 1u << 24));
    HP(qr_check_range(ld, QM_HP_DIM, hp->dim, 1, 1u << 16));
    HP(qr_check_range(ld, QM_HP_N_LAYERS, hp->n_layers, 1, 4096));
    HP(qr_check_range(ld, QM_HP_N_HEADS, hp->n_heads, 1, 1024));
    HP(qr_check_range(ld, QM_HP_N_KV_HEADS, hp->n_kv_heads, 1, hp->n_heads));
    HP(qr_check_range(ld, QM_HP_HEAD_DIM, hp->head_dim, 2, 1024));
    HP(qr_check_range(ld, QM_HP_FFN_DIM, hp->ffn_dim, 1, 1u << 20));
    HP(qr_load_f32_opt(ld, QM_HP_QUERY_SCALE, (float)hp->head_dim, &query_scale));
#undef HP
    if (hp->n_heads % hp->n_kv_heads != 0 || hp->head_dim % 2 != 0)
        return qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, NULL, QM_NO_OFFSET,
                       "gemma2.n_heads %u is not a multiple of gemma2.n_kv_heads %u, or gemma2.head_dim %u is odd",
                       hp->n_heads, hp->n_kv_heads, hp->head_dim);
    if (!(w->norm_eps >= 0.0f) || !(*theta > 0.0f) || !isfinite(*theta) || !(query_scale > 0.0f) ||
        !isfinite(query_scale) || !(w->attn_softcap >= 0.0f) || !isfinite(w->attn_softcap) ||
        !(w->final_softcap >= 0.0f) || !isfinite(w->final_softcap))
        return qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, NULL, QM_NO_OFFSET,
                       "gemma2.norm_eps %g, rope_theta %g, query_pre_attn_scalar %g, attn_softcap %g or "
                       "final_softcap %g is out of range",
                       w->norm_eps, *theta, query_scale, w->attn_softcap, w->final_softcap);
    /* HF: self.scaling = query_pre_attn_scalar ** -0.5; normalizer = hidden_size ** 0.5 in the embedding's dtype */
    w->attn_scale = (float)(1.0 / sqrt((double)query_scale));
    w->embed_scale = (float)sqrt((double)hp->dim);
    return QM_OK;
}

static qm_status gemma2_load(qr_loader *ld, void **out, qr_lm_hparams *hp_out)
{
    gemma2_weights *w = calloc(1, sizeof *w);
    if (!w) return qm_fail(ld->err, QM_ERR_NOMEM, ld->path, NULL, QM_NO_OFFSET, "out of memory");
    qr_lm_hparams *hp = &w->hp;
    uint32_t window;
    float theta;
    TRY(gemma2_hparams(ld, w, &window, &theta));
    size_t d = hp->dim, q_dim = (size_t)hp->n_heads * hp->head_dim, kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    size_t f = hp->ffn_dim, V = hp->vocab;
    w->layers = calloc(hp->n_layers, sizeof *w->layers);
    w->norms = calloc(((size_t)hp->n_layers * 4 + 1) * d, sizeof *w->norms);
    w->window = calloc(hp->n_layers, sizeof *w->window);
    w->inv_freq = calloc(hp->head_dim / 2, sizeof *w->inv_freq);
    if (!w->layers || !w->norms || !w->window || !w->inv_freq)
        TRY(qm_fail(ld->err, QM_ERR_NOMEM, ld->path, NULL, QM_NO_OFFSET, "out of memory"));
    qr_rope_freqs(w->inv_freq, hp->head_dim, theta);
    hp->window = w->window;
    float *slot = w->norms;

    TRY(qr_load_matrix(ld, QM_TENSOR_TOK_EMBD, 0, V, d, &w->tok_embd));
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        gemma2_layer *L = &w->layers[l];
        /* HF: layer_types[i] = "sliding_attention" if (i + 1) % 2 else "full_attention" */
        w->window[l] = l % 2 == 0 ? window : 0;
        TRY(load_norm(ld, QM_TENSOR_BLK_ATTN_NORM, l, d, &slot, &L->attn_norm));
        TRY(qr_load_matrix(ld, QM_TENSOR_BLK_ATTN_Q, l, q_dim, d, &L->wq));
        TRY(qr_load_matrix(ld, QM_TENSOR_BLK_ATTN_K, l, kv_dim, d, &L->wk));
        TRY(qr_load_matrix(ld, QM_TENSOR_BLK_ATTN_V, l, kv_dim, d, &L->wv));
        TRY(qr_load_matrix(ld, QM_TENSOR_BLK_ATTN_O, l, d, q_dim, &L->wo));
        TRY(load_norm(ld, QM_TENSOR_BLK_POST_ATTN_NORM, l, d, &slot, &L->post_attn_norm));
        TRY(load_norm(ld, QM_TENSOR_BLK_FFN_NORM, l, d, &slot, &L->ffn_norm));
        TRY(qr_load_matrix(ld, QM_TENSOR_BLK_FFN_GATE, l, f, d, &L->w_gate));
        TRY(qr_load_matrix(ld, QM_TENSOR_BLK_FFN_UP, l, f, d, &L->w_up));
        TRY(qr_load_matrix_panels(ld, QM_TENSOR_BLK_FFN_DOWN, l, d, f, &L->w_down, &L->down_panels));
        TRY(load_norm(ld, QM_TENSOR_BLK_POST_FFN_NORM, l, d, &slot, &L->post_ffn_norm));
    }
    TRY(load_norm(ld, QM_TENSOR_OUT_NORM, 0, d, &slot, &w->out_norm));
    if (w->tied) w->output = w->tok_embd;
    else TRY(qr_load_matrix(ld, QM_TENSOR_OUTPUT, 0, V, d, &w->output));

    *hp_out = *hp;
    *out = w;
    return QM_OK;
}
#undef TRY

#define TRY(expr) do { qm_status st_ = (expr); if (st_ != QM_OK) return st_; } while (0)

/* y = cap · tanh(y / cap) over count values (cap > 0). */
static void softcap(float *y, size_t count, float cap)
{
    for (size_t i = 0; i < count; i++) y[i] = cap * tanhf(y[i] / cap);
}

static qm_status gemma2_forward(const void *p, qr_lm_state *s, const qr_lm_rows *r)
{
    const gemma2_weights *w = p;
    const qr_lm_hparams *hp = &w->hp;
    const size_t d = hp->dim, f = hp->ffn_dim, hd = hp->head_dim;
    const size_t q_dim = hp->n_heads * hd, kv_dim = hp->n_kv_heads * hd, ldqkv = s->qkv_stride;
    float *q = s->qkv, *k = s->qkv + q_dim, *v = s->qkv + q_dim + kv_dim;
    const qr_attn_shape shape = { hp->n_heads, hp->n_kv_heads, (uint32_t)hd, w->attn_scale, w->attn_softcap };
    const float eps = w->norm_eps;
    const size_t n = r->n;

    /* x = embed_tokens(input_ids) * hidden_size ** 0.5 */
    qr_embed_rows(&w->tok_embd, r->ids, n, s->x, d);
    qr_scale(s->x, w->embed_scale, n * d);

    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const gemma2_layer *L = &w->layers[l];
        /* h = input_layernorm(x); q, k, v = q_proj(h), k_proj(h), v_proj(h) */
        qr_rows_rmsnorm(s->pool, s->xb, s->x, L->attn_norm, n, d, eps);
        const qr_matrix *qkv_w[3] = { &L->wq, &L->wk, &L->wv };
        float *qkv_y[3] = { q, k, v };
        TRY(qr_linear_many(s, QR_X_NORMED, qkv_w, NULL, 3, n, s->xb, d, qkv_y, ldqkv));
        qr_lm_rope(s, r, q, ldqkv, hp->n_heads, hd, w->inv_freq);
        qr_lm_rope(s, r, k, ldqkv, hp->n_kv_heads, hd, w->inv_freq);
        /* softmax(softcap(q·kᵀ·scaling) + causal/sliding mask)·v */
        qr_lm_attend(s, r, l, &shape, q, k, v, ldqkv, s->att, q_dim);
        /* x = x + post_attention_layernorm(o_proj(attn)). The post-norms scale a branch's output, and its
         * rounding with it, up to the residual's size (llama adds the small branch as it is), so o_proj and
         * gate/up keep the session's act in a prompt: in one int8 term they moved the test model's logits
         * 1.5e-2 of their max from the token-by-token ones, against 1e-2 for the other families */
        TRY(qr_linear(s, QR_X_FLOAT, &L->wo, NULL, n, s->att, q_dim, s->xb, d));
        qr_rows_rmsnorm(s->pool, s->xb, s->xb, L->post_attn_norm, n, d, eps);
        qr_rows_add(s->pool, s->x, s->xb, n * d);
        /* h = pre_feedforward_layernorm(x); x = x + post_feedforward_layernorm(down(gelu_tanh(gate(h)) * up(h)))
         * (gate/up as o_proj above: QR_X_FLOAT) */
        qr_rows_rmsnorm(s->pool, s->xb, s->x, L->ffn_norm, n, d, eps);
        const qr_matrix *gate_up_w[2] = { &L->w_gate, &L->w_up };
        float *gate_up_y[2] = { s->hb, s->hb2 };
        TRY(qr_linear_many(s, QR_X_FLOAT, gate_up_w, NULL, 2, n, s->xb, d, gate_up_y, f));
        qr_rows_activate(s->pool, QR_ACTFN_GELU_TANH, s->hb, n * f);
        for (size_t i = 0; i < n * f; i++) s->hb[i] *= s->hb2[i];
        TRY(qr_linear_panels(s, QR_X_FLOAT, &L->w_down, NULL, L->down_panels, n, s->hb, f, s->xb, s->hb2));
        qr_rows_rmsnorm(s->pool, s->xb, s->xb, L->post_ffn_norm, n, d, eps);
        qr_rows_add(s->pool, s->x, s->xb, n * d);
    }

    /* logits = lm_head(norm(x)); logits = tanh(logits / cap) * cap */
    const size_t n_out = qr_lm_logit_count(r);
    for (size_t i = 0; i < n_out; i++) qr_rmsnorm(s->xb + i * d, s->x + qr_lm_logit_row(r, i) * d, w->out_norm, d, eps);
    TRY(qr_lm_logits(s, &w->output, NULL, n_out, d, hp->vocab));
    if (w->final_softcap > 0.0f) softcap(s->logits, n_out * hp->vocab, w->final_softcap);
    return QM_OK;
}

const qr_lm_family qr_family_gemma2 = {
    .arch = QM_ARCH_GEMMA2,
    .load = gemma2_load,
    .free = gemma2_free,
    .forward = gemma2_forward,
    .tied_output = gemma2_tied,
};
