/* qr_arch_llama.c — Llama 2/3, TinyLlama, Mistral, Qwen2 and Qwen3 (spec/ARCHITECTURES.md §6).
 *
 * RMSNorm, rotary positions in HF's rotate-half layout, grouped-query attention (optionally over a sliding
 * window: Mistral), optional q/k/v biases (Qwen2), optional RMSNorm of each query and key head before the
 * rotation (Qwen3, whose head_dim is set on its own), a SwiGLU feed-forward, tied or untied output head.
 * The forward pass mirrors HF's LlamaForCausalLM line by line; the comments quote the PyTorch it follows.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qr_model.h"
#include "qr_ops.h"
#include "qr_rows.h"

typedef struct llama_layer {
    const float *attn_norm;     /* (dim)                      input_layernorm.weight */
    qr_attn_proj attn;          /* q_proj, k_proj, v_proj, o_proj */
    const float *bq, *bk, *bv;  /* their biases (Qwen2), else NULL */
    const float *q_norm, *k_norm; /* (head_dim)               q_norm, k_norm (Qwen3), else NULL */
    const float *ffn_norm;      /* (dim)                      post_attention_layernorm.weight */
    qr_glu_ffn ffn;             /* gate_proj, up_proj, down_proj (or its column panels: (panels·dim,
                                 * ffn_dim/panels), panel p the columns p·ffn_dim/panels..) */
    qr_shard_part o_part, down_part; /* tensor parallel: how the rank holds o's and down's columns */
} llama_layer;

typedef struct llama_weights {
    qr_lm_hparams hp;
    float norm_eps;
    qr_matrix tok_embd;         /* (vocab, dim)               embed_tokens */
    llama_layer *layers;        /* [n_layers] */
    const float *out_norm;      /* (dim)                      norm.weight */
    qr_matrix output;           /* (vocab, dim)               lm_head, or tok_embd when tied */
    bool tied;
    uint32_t *window;           /* [n_layers]: the sliding window (0 = none), the same for every layer */
    float *inv_freq;            /* [head_dim/2]               rotary_emb.inv_freq */
    qr_shard shard;             /* tensor parallel: hp, the layers and output_part are this rank's part */
    qr_matrix output_part;      /* the rank's vocabulary rows of output (all of them unsharded) */
    qr_shard_store store;       /* slices the rank copied (Q8_ROW columns) */
} llama_weights;

static void llama_free(void *p)
{
    llama_weights *w = p;
    if (!w) return;
    free(w->layers);
    free(w->window);
    free(w->inv_freq);
    qr_shard_store_free(&w->store);
    free(w);
}

static bool llama_tied(const void *p) { return ((const llama_weights *)p)->tied; }

#define TRY(expr) do { qm_status st_ = (expr); if (st_ != QM_OK) return st_; } while (0)

/* Layer L cut down to rank sh's heads (q: heads h0.., k/v: KV heads kv0..) and FFN units f0.. (qr_shard.h):
 * q/k/v/gate/up keep the rank's rows, o and down its columns. */
static qm_status llama_shard_layer(qr_loader *ld, llama_weights *w, llama_layer *L, uint32_t l)
{
    const qr_shard *sh = &w->shard;
    const qr_lm_hparams *hp = &w->hp;   /* still the whole model's */
    const size_t N = sh->n_ranks, hd = hp->head_dim, d = hp->dim;
    const size_t nq = hp->n_heads / N * hd, nkv = hp->n_kv_heads / N * hd, nf = hp->ffn_dim / N;
    const size_t q0 = sh->rank * nq, kv0 = sh->rank * nkv, f0 = sh->rank * nf;
    char name[QM_KEY_NAME_MAX];
    L->attn.wq = qr_matrix_rows(&L->attn.wq, q0, nq);
    L->attn.wk = qr_matrix_rows(&L->attn.wk, kv0, nkv);
    L->attn.wv = qr_matrix_rows(&L->attn.wv, kv0, nkv);
    if (L->bq) { L->bq += q0; L->bk += kv0; L->bv += kv0; }
    L->ffn.w_gate = qr_matrix_rows(&L->ffn.w_gate, f0, nf);
    L->ffn.w_up = qr_matrix_rows(&L->ffn.w_up, f0, nf);
    qm_tensor_name(name, sizeof name, QM_TENSOR_BLK_ATTN_O, l);
    TRY(qr_shard_row_parallel(sh, &w->store, &L->attn.wo, d, L->attn.o_panels, &L->attn.wo, &L->attn.o_panels,
                              &L->o_part, ld->path, name, ld->err));
    qm_tensor_name(name, sizeof name, QM_TENSOR_BLK_FFN_DOWN, l);
    return qr_shard_row_parallel(sh, &w->store, &L->ffn.w_down, d, L->ffn.down_panels, &L->ffn.w_down, &L->ffn.down_panels,
                                 &L->down_part, ld->path, name, ld->err);
}

/* The whole model, loaded, cut down to rank ld->shard's part: hp then gives the rank's head and FFN
 * counts (so the run state and KV cache hold only its heads), output_part its vocabulary rows. */
static qm_status llama_shard(qr_loader *ld, llama_weights *w)
{
    w->shard = *ld->shard;   /* first: the layers' parts point at it */
    const qr_shard *sh = &w->shard;
    qr_lm_hparams *hp = &w->hp;
    TRY(qr_shard_check_divides(sh, ld->path, "llama.n_kv_heads", hp->n_kv_heads, ld->err));
    TRY(qr_shard_check_divides(sh, ld->path, "llama.n_heads", hp->n_heads, ld->err));
    TRY(qr_shard_check_divides(sh, ld->path, "llama.ffn_dim", hp->ffn_dim, ld->err));
    for (uint32_t l = 0; l < hp->n_layers; l++) TRY(llama_shard_layer(ld, w, &w->layers[l], l));
    const size_t v0 = qr_shard_begin(hp->vocab, sh->rank, sh->n_ranks);
    w->output_part = qr_matrix_rows(&w->output, v0, qr_shard_begin(hp->vocab, sh->rank + 1, sh->n_ranks) - v0);
    hp->n_heads /= sh->n_ranks;
    hp->n_kv_heads /= sh->n_ranks;
    hp->ffn_dim /= sh->n_ranks;
    return QM_OK;
}
#undef TRY

#define TRY(expr) do { qm_status st_ = (expr); if (st_ != QM_OK) { llama_free(w); return st_; } } while (0)

static qm_status llama_load(qr_loader *ld, void **out, qr_lm_hparams *hp_out)
{
    llama_weights *w = calloc(1, sizeof *w);
    if (!w) return qm_fail(ld->err, QM_ERR_NOMEM, ld->path, NULL, QM_NO_OFFSET, "out of memory");
    qr_lm_hparams *hp = &w->hp;
    qr_rope_lm_config c;
    bool qkv_bias, qk_norm;
    const char *s;
    uint64_t len;
    TRY(qr_load_rope_lm_hparams(ld, false, hp, &c));
    w->norm_eps = c.norm_eps;
    TRY(qr_load_bool_opt(ld, QM_HP_QKV_BIAS, false, &qkv_bias));
    TRY(qr_load_bool_opt(ld, QM_HP_QK_NORM, false, &qk_norm));
    TRY(qr_load_bool_opt(ld, QM_HP_TIED_OUTPUT, false, &w->tied));
    TRY(qr_load_string_opt(ld, QM_HP_ROPE_STYLE, "half", &s, &len));
    if (len != 4 || memcmp(s, "half", 4) != 0)
        TRY(qm_fail(ld->err, QM_ERR_UNSUPPORTED, ld->path, "llama.rope_style", QM_NO_OFFSET,
                    "llama.rope_style \"%.*s\" is not supported (only \"half\", HF's layout)", (int)(len > 64 ? 64 : len), s));
    TRY(qr_load_string_opt(ld, QM_HP_ACTIVATION, "silu", &s, &len));
    if (len != 4 || memcmp(s, "silu", 4) != 0)
        TRY(qm_fail(ld->err, QM_ERR_UNSUPPORTED, ld->path, "llama.activation", QM_NO_OFFSET,
                    "llama.activation \"%.*s\" is not supported (SwiGLU needs \"silu\")", (int)(len > 64 ? 64 : len), s));

    size_t d = hp->dim, q_dim = (size_t)hp->n_heads * hp->head_dim, kv_dim = (size_t)hp->n_kv_heads * hp->head_dim;
    TRY(qr_rope_lm_alloc(ld, hp, &c, &w->window, &w->inv_freq));
    if (!(w->layers = calloc(hp->n_layers, sizeof *w->layers)))
        TRY(qm_fail(ld->err, QM_ERR_NOMEM, ld->path, NULL, QM_NO_OFFSET, "out of memory"));

    TRY(qr_load_matrix(ld, QM_TENSOR_TOK_EMBD, 0, hp->vocab, d, &w->tok_embd));
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        llama_layer *L = &w->layers[l];
        TRY(qr_load_vector(ld, QM_TENSOR_BLK_ATTN_NORM, l, d, &L->attn_norm));
        TRY(qr_load_attn_proj(ld, l, hp, &L->attn));
        if (qkv_bias) {
            TRY(qr_load_vector(ld, QM_TENSOR_BLK_ATTN_Q_B, l, q_dim, &L->bq));
            TRY(qr_load_vector(ld, QM_TENSOR_BLK_ATTN_K_B, l, kv_dim, &L->bk));
            TRY(qr_load_vector(ld, QM_TENSOR_BLK_ATTN_V_B, l, kv_dim, &L->bv));
        }
        if (qk_norm) {
            TRY(qr_load_vector(ld, QM_TENSOR_BLK_ATTN_Q_NORM, l, hp->head_dim, &L->q_norm));
            TRY(qr_load_vector(ld, QM_TENSOR_BLK_ATTN_K_NORM, l, hp->head_dim, &L->k_norm));
        }
        TRY(qr_load_vector(ld, QM_TENSOR_BLK_FFN_NORM, l, d, &L->ffn_norm));
        TRY(qr_load_glu_ffn(ld, l, hp, &L->ffn));
    }
    TRY(qr_load_vector(ld, QM_TENSOR_OUT_NORM, 0, d, &w->out_norm));
    TRY(qr_load_lm_head(ld, hp, w->tied, &w->tok_embd, &w->output));

    w->output_part = w->output;
    if (qr_shard_active(ld->shard)) TRY(llama_shard(ld, w));

    *hp_out = *hp;
    *out = w;
    return QM_OK;
}
#undef TRY

#define TRY(expr) do { qm_status st_ = (expr); if (st_ != QM_OK) return st_; } while (0)

/* Each of the first `heads` heads (hd values) of n rows (ld apart) RMS-normed in place with weight w. */
static void heads_rmsnorm(float *x, size_t ld, size_t n, size_t heads, size_t hd, const float *w, float eps)
{
    for (size_t i = 0; i < n; i++)
        for (size_t h = 0; h < heads; h++) {
            float *y = x + i * ld + h * hd;
            qr_rmsnorm(y, y, w, hd, eps);
        }
}

static qm_status llama_forward(const void *p, qr_lm_state *s, const qr_lm_rows *r)
{
    const llama_weights *w = p;
    const qr_lm_hparams *hp = &w->hp;
    const size_t d = hp->dim, f = hp->ffn_dim, hd = hp->head_dim;
    const size_t q_dim = hp->n_heads * hd, kv_dim = hp->n_kv_heads * hd, ldqkv = s->qkv_stride;
    float *q = s->qkv, *k = s->qkv + q_dim, *v = s->qkv + q_dim + kv_dim;
    const qr_attn_shape shape = { hp->n_heads, hp->n_kv_heads, (uint32_t)hd, 1.0f / sqrtf((float)hd), 0.0f };
    const float eps = w->norm_eps;
    const size_t n = r->n;   /* every row of every sequence: the products run once over all of them */

    /* x = embed_tokens(input_ids) */
    qr_embed_rows(&w->tok_embd, r->ids, n, s->x, d);

    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const llama_layer *L = &w->layers[l];
        /* h = input_layernorm(x) */
        qr_rows_rmsnorm(s->pool, s->xb, s->x, L->attn_norm, n, d, eps);
        /* q, k, v = q_proj(h), k_proj(h), v_proj(h) */
        const qr_matrix *qkv_w[3] = { &L->attn.wq, &L->attn.wk, &L->attn.wv };
        const float *qkv_b[3] = { L->bq, L->bk, L->bv };
        float *qkv_y[3] = { q, k, v };
        TRY(qr_linear_many(s, QR_X_NORMED, qkv_w, qkv_b, 3, n, s->xb, d, qkv_y, ldqkv));
        /* Qwen3: q, k = q_norm(q.view(.., heads, head_dim)), k_norm(k.view(..)), per head before the rotation */
        if (L->q_norm) {
            heads_rmsnorm(q, ldqkv, n, hp->n_heads, hd, L->q_norm, eps);
            heads_rmsnorm(k, ldqkv, n, hp->n_kv_heads, hd, L->k_norm, eps);
        }
        /* q, k = apply_rotary_pos_emb(q, k, cos, sin), each sequence's rows at its own positions */
        qr_lm_rope(s, r, q, ldqkv, hp->n_heads, hd, w->inv_freq);
        qr_lm_rope(s, r, k, ldqkv, hp->n_kv_heads, hd, w->inv_freq);
        /* past_key_value.update(k, v); attn = softmax(q·kᵀ/√hd + causal/window mask)·v, kv heads repeated;
         * each sequence over its own cache */
        qr_lm_attend(s, r, l, &shape, q, k, v, ldqkv, s->att, q_dim);
        /* x = x + o_proj(attn) */
        TRY(qr_linear_part(s, QR_X_NORMED, &L->o_part, &L->attn.wo, NULL, L->attn.o_panels, n, s->att, q_dim, s->xb,
                           s->hb2));
        TRY(qr_shard_sum(&w->shard, s->xb, n * d));   /* tensor parallel: the ranks' heads added */
        qr_rows_add(s->pool, s->x, s->xb, n * d);
        /* h = post_attention_layernorm(x) */
        qr_rows_rmsnorm(s->pool, s->xb, s->x, L->ffn_norm, n, d, eps);
        /* x = x + down_proj(silu(gate_proj(h)) * up_proj(h)) */
        const qr_matrix *gate_up_w[2] = { &L->ffn.w_gate, &L->ffn.w_up };
        float *gate_up_y[2] = { s->hb, s->hb2 };
        TRY(qr_linear_many(s, QR_X_NORMED, gate_up_w, NULL, 2, n, s->xb, d, gate_up_y, f));
        qr_rows_swiglu(s->pool, s->hb, s->hb2, n * f);
        TRY(qr_linear_part(s, QR_X_FLOAT, &L->down_part, &L->ffn.w_down, NULL, L->ffn.down_panels, n, s->hb, f, s->xb,
                           s->hb2));
        TRY(qr_shard_sum(&w->shard, s->xb, n * d));   /* and their FFN units */
        qr_rows_add(s->pool, s->x, s->xb, n * d);
    }

    /* logits = lm_head(norm(x)), for every token or each sequence's last */
    const size_t n_out = qr_lm_logit_count(r);
    for (size_t i = 0; i < n_out; i++) qr_rmsnorm(s->xb + i * d, s->x + qr_lm_logit_row(r, i) * d, w->out_norm, d, eps);
    return qr_lm_logits_shard(s, &w->shard, &w->output_part, n_out, d, hp->vocab);
}

const qr_lm_family qr_family_llama = {
    .arch = QM_ARCH_LLAMA,
    .load = llama_load,
    .free = llama_free,
    .forward = llama_forward,
    .tied_output = llama_tied,
};
