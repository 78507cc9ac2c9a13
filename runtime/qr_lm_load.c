/* qr_lm_load.c — the loader pieces every rotary decoder shares (llama, Qwen, Mistral, Phi-3, Gemma 2): their
 * hyperparameters, a layer's attention projections and gated feed-forward, and the output head. A family
 * file keeps only what is its own (Gemma's (1 + w) norms, Qwen's q/k norms and biases). */
#include <math.h>
#include <stdlib.h>

#include "qr_model.h"
#include "qr_ops.h"
#include "qm_names.h"

#define TRY(expr) do { qm_status st_ = (expr); if (st_ != QM_OK) return st_; } while (0)

static qm_status load_sizes(qr_loader *ld, bool head_dim_required, qr_lm_hparams *hp)
{
    TRY(qr_load_u32(ld, QM_HP_VOCAB_SIZE, &hp->vocab));
    TRY(qr_load_u32(ld, QM_HP_CONTEXT_LENGTH, &hp->ctx));
    TRY(qr_load_u32(ld, QM_HP_DIM, &hp->dim));
    TRY(qr_load_u32(ld, QM_HP_N_LAYERS, &hp->n_layers));
    TRY(qr_load_u32(ld, QM_HP_N_HEADS, &hp->n_heads));
    TRY(qr_load_u32_opt(ld, QM_HP_N_KV_HEADS, hp->n_heads, &hp->n_kv_heads));
    if (head_dim_required) TRY(qr_load_u32(ld, QM_HP_HEAD_DIM, &hp->head_dim));
    else TRY(qr_load_u32_opt(ld, QM_HP_HEAD_DIM, hp->n_heads ? hp->dim / hp->n_heads : 0, &hp->head_dim));
    TRY(qr_load_u32(ld, QM_HP_FFN_DIM, &hp->ffn_dim));
    TRY(qr_check_range(ld, QM_HP_VOCAB_SIZE, hp->vocab, 1, 1u << 24));
    TRY(qr_check_range(ld, QM_HP_CONTEXT_LENGTH, hp->ctx, 1, 1u << 24));
    TRY(qr_check_range(ld, QM_HP_DIM, hp->dim, 1, 1u << 16));
    TRY(qr_check_range(ld, QM_HP_N_LAYERS, hp->n_layers, 1, 4096));
    TRY(qr_check_range(ld, QM_HP_N_HEADS, hp->n_heads, 1, 1024));
    TRY(qr_check_range(ld, QM_HP_N_KV_HEADS, hp->n_kv_heads, 1, hp->n_heads));
    TRY(qr_check_range(ld, QM_HP_HEAD_DIM, hp->head_dim, 2, 1024));
    TRY(qr_check_range(ld, QM_HP_FFN_DIM, hp->ffn_dim, 1, 1u << 20));
    return QM_OK;
}

qm_status qr_load_rope_lm_hparams(qr_loader *ld, bool head_dim_required, qr_lm_hparams *hp, qr_rope_lm_config *c)
{
    const char *arch = qm_arch_name(ld->arch);
    TRY(load_sizes(ld, head_dim_required, hp));
    TRY(qr_load_u32_opt(ld, QM_HP_SLIDING_WINDOW, 0, &c->window));
    TRY(qr_load_f32(ld, QM_HP_NORM_EPS, &c->norm_eps));
    TRY(qr_load_f32_opt(ld, QM_HP_ROPE_THETA, 10000.0f, &c->rope_theta));
    if (hp->n_heads % hp->n_kv_heads != 0 || hp->head_dim % 2 != 0)
        return qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, NULL, QM_NO_OFFSET,
                       "%s.n_heads %u is not a multiple of %s.n_kv_heads %u, or %s.head_dim %u is odd", arch,
                       hp->n_heads, arch, hp->n_kv_heads, arch, hp->head_dim);
    if (!(c->norm_eps >= 0.0f) || !(c->rope_theta > 0.0f) || !isfinite(c->rope_theta))
        return qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, NULL, QM_NO_OFFSET,
                       "%s.norm_eps %g or %s.rope_theta %g is out of range", arch, c->norm_eps, arch, c->rope_theta);
    return QM_OK;
}

qm_status qr_rope_lm_alloc(qr_loader *ld, qr_lm_hparams *hp, const qr_rope_lm_config *c, uint32_t **window,
                           float **inv_freq)
{
    *window = calloc(hp->n_layers, sizeof **window);
    *inv_freq = calloc(hp->head_dim / 2, sizeof **inv_freq);
    if (!*window || !*inv_freq) return qm_fail(ld->err, QM_ERR_NOMEM, ld->path, NULL, QM_NO_OFFSET, "out of memory");
    for (uint32_t l = 0; l < hp->n_layers; l++) (*window)[l] = c->window;
    qr_rope_freqs(*inv_freq, hp->head_dim, c->rope_theta);
    hp->window = *window;
    return QM_OK;
}

qm_status qr_load_attn_proj(qr_loader *ld, unsigned layer, const qr_lm_hparams *hp, qr_attn_proj *a)
{
    size_t d = hp->dim, q_dim = (size_t)hp->n_heads * hp->head_dim, kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    TRY(qr_load_matrix(ld, QM_TENSOR_BLK_ATTN_Q, layer, q_dim, d, &a->wq));
    TRY(qr_load_matrix(ld, QM_TENSOR_BLK_ATTN_K, layer, kv_dim, d, &a->wk));
    TRY(qr_load_matrix(ld, QM_TENSOR_BLK_ATTN_V, layer, kv_dim, d, &a->wv));
    return qr_load_matrix_panels(ld, QM_TENSOR_BLK_ATTN_O, layer, d, q_dim, &a->wo, &a->o_panels);
}

qm_status qr_load_glu_ffn(qr_loader *ld, unsigned layer, const qr_lm_hparams *hp, qr_glu_ffn *f)
{
    TRY(qr_load_matrix(ld, QM_TENSOR_BLK_FFN_GATE, layer, hp->ffn_dim, hp->dim, &f->w_gate));
    TRY(qr_load_matrix(ld, QM_TENSOR_BLK_FFN_UP, layer, hp->ffn_dim, hp->dim, &f->w_up));
    return qr_load_matrix_panels(ld, QM_TENSOR_BLK_FFN_DOWN, layer, hp->dim, hp->ffn_dim, &f->w_down,
                                 &f->down_panels);
}

qm_status qr_load_lm_head(qr_loader *ld, const qr_lm_hparams *hp, bool tied, const qr_matrix *tok_embd,
                          qr_matrix *out)
{
    if (!tied) return qr_load_matrix(ld, QM_TENSOR_OUTPUT, 0, hp->vocab, hp->dim, out);
    *out = *tok_embd;
    return QM_OK;
}
