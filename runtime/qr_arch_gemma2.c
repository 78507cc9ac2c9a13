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
    qr_attn_proj attn;           /* q_proj, k_proj, v_proj, o_proj */
    qr_glu_ffn ffn;              /* gate_proj, up_proj, down_proj */
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

/* Gemma 2's own hyperparameters beyond a rotary decoder's (qr_load_rope_lm_hparams). */
static qm_status gemma2_hparams(qr_loader *ld, gemma2_weights *w, qr_rope_lm_config *c)
{
    qr_lm_hparams *hp = &w->hp;
    float query_scale;
    qm_status st;
#define HP(expr) do { if ((st = (expr)) != QM_OK) return st; } while (0)
    HP(qr_load_rope_lm_hparams(ld, true, hp, c));
    HP(qr_load_f32_opt(ld, QM_HP_ATTN_SOFTCAP, 0.0f, &w->attn_softcap));
    HP(qr_load_f32_opt(ld, QM_HP_FINAL_SOFTCAP, 0.0f, &w->final_softcap));
    HP(qr_load_bool_opt(ld, QM_HP_TIED_OUTPUT, true, &w->tied));
    HP(qr_load_f32_opt(ld, QM_HP_QUERY_SCALE, (float)hp->head_dim, &query_scale));
#undef HP
    if (!(query_scale > 0.0f) || !isfinite(query_scale) || !(w->attn_softcap >= 0.0f) || !isfinite(w->attn_softcap) ||
        !(w->final_softcap >= 0.0f) || !isfinite(w->final_softcap))
        return qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, NULL, QM_NO_OFFSET,
                       "gemma2.query_pre_attn_scalar %g, attn_softcap %g or final_softcap %g is out of range",
                       query_scale, w->attn_softcap, w->final_softcap);
    w->norm_eps = c->norm_eps;
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
    qr_rope_lm_config c;
    TRY(gemma2_hparams(ld, w, &c));
    size_t d = hp->dim;
    TRY(qr_rope_lm_alloc(ld, hp, &c, &w->window, &w->inv_freq));
    w->layers = calloc(hp->n_layers, sizeof *w->layers);
    w->norms = calloc(((size_t)hp->n_layers * 4 + 1) * d, sizeof *w->norms);
    if (!w->layers || !w->norms) TRY(qm_fail(ld->err, QM_ERR_NOMEM, ld->path, NULL, QM_NO_OFFSET, "out of memory"));
    float *slot = w->norms;

    TRY(qr_load_matrix(ld, QM_TENSOR_TOK_EMBD, 0, hp->vocab, d, &w->tok_embd));
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        gemma2_layer *L = &w->layers[l];
        /* HF: layer_types[i] = "sliding_attention" if (i + 1) % 2 else "full_attention" */
        if (l % 2) w->window[l] = 0;
        TRY(load_norm(ld, QM_TENSOR_BLK_ATTN_NORM, l, d, &slot, &L->attn_norm));
        TRY(qr_load_attn_proj(ld, l, hp, &L->attn));
        TRY(load_norm(ld, QM_TENSOR_BLK_POST_ATTN_NORM, l, d, &slot, &L->post_attn_norm));
        TRY(load_norm(ld, QM_TENSOR_BLK_FFN_NORM, l, d, &slot, &L->ffn_norm));
        TRY(qr_load_glu_ffn(ld, l, hp, &L->ffn));
        TRY(load_norm(ld, QM_TENSOR_BLK_POST_FFN_NORM, l, d, &slot, &L->post_ffn_norm));
    }
    TRY(load_norm(ld, QM_TENSOR_OUT_NORM, 0, d, &slot, &w->out_norm));
    TRY(qr_load_lm_head(ld, hp, w->tied, &w->tok_embd, &w->output));

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
        const qr_matrix *qkv_w[3] = { &L->attn.wq, &L->attn.wk, &L->attn.wv };
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
        TRY(qr_linear_panels(s, QR_X_FLOAT, &L->attn.wo, NULL, L->attn.o_panels, n, s->att, q_dim, s->xb, s->hb2));
        qr_rows_rmsnorm(s->pool, s->xb, s->xb, L->post_attn_norm, n, d, eps);
        qr_rows_add(s->pool, s->x, s->xb, n * d);
        /* h = pre_feedforward_layernorm(x); x = x + post_feedforward_layernorm(down(gelu_tanh(gate(h)) * up(h)))
         * (gate/up as o_proj above: QR_X_FLOAT) */
        qr_rows_rmsnorm(s->pool, s->xb, s->x, L->ffn_norm, n, d, eps);
        const qr_matrix *gate_up_w[2] = { &L->ffn.w_gate, &L->ffn.w_up };
        float *gate_up_y[2] = { s->hb, s->hb2 };
        TRY(qr_linear_many(s, QR_X_FLOAT, gate_up_w, NULL, 2, n, s->xb, d, gate_up_y, f));
        qr_rows_activate(s->pool, QR_ACTFN_GELU_TANH, s->hb, n * f);
        for (size_t i = 0; i < n * f; i++) s->hb[i] *= s->hb2[i];
        TRY(qr_linear_panels(s, QR_X_FLOAT, &L->ffn.w_down, NULL, L->ffn.down_panels, n, s->hb, f, s->xb, s->hb2));
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
