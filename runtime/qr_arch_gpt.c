/* qr_arch_gpt.c — GPT-2 and GPT-Neo (spec/ARCHITECTURES.md §4 and §5).
 *
 * Both are pre-LayerNorm transformers with learned positions, a GELU feed-forward and (normally) the token
 * embedding as output head. They differ in the attention block:
 *   gpt2     one fused q/k/v projection with bias; scores scaled by 1/√head_dim; every layer global.
 *   gpt_neo  separate q, k, v projections without bias; scores NOT scaled (HF GPT-Neo computes them so);
 *            layers alternate global and local, a local layer seeing the last window_size positions.
 * The forward pass follows HF's GPT2LMHeadModel / GPTNeoForCausalLM; comments quote the PyTorch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qr_model.h"
#include "qr_ops.h"
#include "qr_rows.h"

typedef struct gpt_layer {
    const float *ln1_w, *ln1_b;   /* (dim)            ln_1 */
    qr_matrix wqkv;               /* (3*dim, dim)     gpt2: attn.c_attn (transposed by convert), rows q, k, v */
    const float *bqkv;            /* (3*dim)          gpt2 */
    qr_matrix wq, wk, wv;         /* (dim, dim)       gpt_neo: attn.attention.{q,k,v}_proj; gpt2 sharded:
                                   *                  the rank's rows of wqkv's q, k and v parts */
    const float *bq, *bk, *bv;    /*                  gpt2 sharded: the rank's parts of bqkv, else NULL */
    qr_matrix wo;                 /* (dim, dim)       attn.c_proj / attn.attention.out_proj, or its column */
    size_t o_panels;              /*   panels (o_panels·dim, dim/o_panels), panel p the columns p·dim/o_panels.. */
    const float *bo;              /* (dim) */
    const float *ln2_w, *ln2_b;   /* (dim)            ln_2 */
    qr_matrix w_up;               /* (ffn_dim, dim)   mlp.c_fc */
    const float *b_up;            /* (ffn_dim) */
    qr_matrix w_down;             /* (dim, ffn_dim)   mlp.c_proj, or its column panels: */
    size_t down_panels;           /*   (panels·dim, ffn_dim/panels), panel p the columns p·ffn_dim/panels.. */
    const float *b_down;          /* (dim) */
    qr_shard_part o_part, down_part; /* tensor parallel: how the rank holds wo's and w_down's columns */
} gpt_layer;

typedef struct gpt_weights {
    qr_lm_hparams hp;
    bool neo;                     /* gpt_neo's attention block */
    float norm_eps;
    float attn_scale;             /* 1/√head_dim (gpt2), 1 (gpt_neo) */
    qr_actfn act;                 /* the feed-forward activation, "gelu_new" normally */
    qr_matrix tok_embd;           /* (vocab, dim)     wte */
    qr_matrix pos_embd;           /* (ctx, dim)       wpe */
    gpt_layer *layers;            /* [n_layers] */
    const float *ln_f_w, *ln_f_b; /* (dim)            ln_f */
    qr_matrix output;             /* (vocab, dim)     lm_head, or wte when tied */
    bool tied;
    uint32_t *window;             /* [n_layers]: 0 for global layers, window_size for local ones */
    qr_shard shard;               /* tensor parallel: hp, the layers and output_part are this rank's part */
    qr_matrix output_part;        /* the rank's vocabulary rows of output (all of them unsharded) */
    qr_shard_store store;         /* slices the rank copied (Q8_ROW columns) */
} gpt_weights;

static void gpt_free(void *p)
{
    gpt_weights *w = p;
    if (!w) return;
    free(w->layers);
    free(w->window);
    qr_shard_store_free(&w->store);
    free(w);
}

static bool gpt_tied(const void *p) { return ((const gpt_weights *)p)->tied; }

#define TRY(expr) do { qm_status st_ = (expr); if (st_ != QM_OK) return st_; } while (0)

/* Layer L cut down to rank sh's heads h0.. and FFN units f0.. (qr_shard.h): q/k/v/up keep the rank's rows
 * (gpt2's fused c_attn becomes three views), c_proj and mlp.c_proj its columns; their biases are added by
 * rank 0 only, since the ranks' partial sums are added. */
static qm_status gpt_shard_layer(qr_loader *ld, gpt_weights *w, gpt_layer *L, uint32_t l)
{
    const qr_shard *sh = &w->shard;
    const size_t N = sh->n_ranks, d = w->hp.dim, nq = d / N, nf = w->hp.ffn_dim / N;
    const size_t q0 = sh->rank * nq, f0 = sh->rank * nf;
    char name[QM_KEY_NAME_MAX];
    if (!w->neo) {
        L->wq = qr_matrix_rows(&L->wqkv, q0, nq);
        L->wk = qr_matrix_rows(&L->wqkv, d + q0, nq);
        L->wv = qr_matrix_rows(&L->wqkv, 2 * d + q0, nq);
        L->bq = L->bqkv + q0;
        L->bk = L->bqkv + d + q0;
        L->bv = L->bqkv + 2 * d + q0;
    } else {
        L->wq = qr_matrix_rows(&L->wq, q0, nq);
        L->wk = qr_matrix_rows(&L->wk, q0, nq);
        L->wv = qr_matrix_rows(&L->wv, q0, nq);
    }
    L->w_up = qr_matrix_rows(&L->w_up, f0, nf);
    L->b_up += f0;
    if (sh->rank != 0) L->bo = L->b_down = NULL;
    qm_tensor_name(name, sizeof name, QM_TENSOR_BLK_ATTN_OUT, l);
    TRY(qr_shard_row_parallel(sh, &w->store, &L->wo, d, L->o_panels, &L->wo, &L->o_panels, &L->o_part, ld->path,
                              name, ld->err));
    qm_tensor_name(name, sizeof name, QM_TENSOR_BLK_FFN_DOWN, l);
    return qr_shard_row_parallel(sh, &w->store, &L->w_down, d, L->down_panels, &L->w_down, &L->down_panels,
                                 &L->down_part, ld->path, name, ld->err);
}

/* The whole model, loaded, cut down to rank ld->shard's part (see llama_shard). */
static qm_status gpt_shard(qr_loader *ld, gpt_weights *w)
{
    w->shard = *ld->shard;   /* first: the layers' parts point at it */
    const qr_shard *sh = &w->shard;
    qr_lm_hparams *hp = &w->hp;
    const char *arch = qm_arch_name(ld->arch);
    char key[QM_KEY_NAME_MAX];
    snprintf(key, sizeof key, "%s.n_heads", arch);
    TRY(qr_shard_check_divides(sh, ld->path, key, hp->n_heads, ld->err));
    snprintf(key, sizeof key, "%s.ffn_dim", arch);
    TRY(qr_shard_check_divides(sh, ld->path, key, hp->ffn_dim, ld->err));
    for (uint32_t l = 0; l < hp->n_layers; l++) TRY(gpt_shard_layer(ld, w, &w->layers[l], l));
    const size_t v0 = qr_shard_begin(hp->vocab, sh->rank, sh->n_ranks);
    w->output_part = qr_matrix_rows(&w->output, v0, qr_shard_begin(hp->vocab, sh->rank + 1, sh->n_ranks) - v0);
    hp->n_heads /= sh->n_ranks;
    hp->n_kv_heads = hp->n_heads;
    hp->ffn_dim /= sh->n_ranks;
    return QM_OK;
}
#undef TRY

#define TRY(expr) do { qm_status st_ = (expr); if (st_ != QM_OK) { gpt_free(w); return st_; } } while (0)

static qm_status gpt_load(qr_loader *ld, void **out, qr_lm_hparams *hp_out, bool neo)
{
    gpt_weights *w = calloc(1, sizeof *w);
    if (!w) return qm_fail(ld->err, QM_ERR_NOMEM, ld->path, NULL, QM_NO_OFFSET, "out of memory");
    qr_lm_hparams *hp = &w->hp;
    w->neo = neo;
    const char *s;
    uint64_t len;
    TRY(qr_load_u32(ld, QM_HP_VOCAB_SIZE, &hp->vocab));
    TRY(qr_load_u32(ld, QM_HP_CONTEXT_LENGTH, &hp->ctx));
    TRY(qr_load_u32(ld, QM_HP_DIM, &hp->dim));
    TRY(qr_load_u32(ld, QM_HP_N_LAYERS, &hp->n_layers));
    TRY(qr_load_u32(ld, QM_HP_N_HEADS, &hp->n_heads));
    TRY(qr_load_u32(ld, QM_HP_FFN_DIM, &hp->ffn_dim));
    TRY(qr_load_f32(ld, QM_HP_NORM_EPS, &w->norm_eps));
    TRY(qr_load_bool_opt(ld, QM_HP_TIED_OUTPUT, true, &w->tied));
    TRY(qr_check_range(ld, QM_HP_VOCAB_SIZE, hp->vocab, 1, 1u << 24));
    TRY(qr_check_range(ld, QM_HP_CONTEXT_LENGTH, hp->ctx, 1, 1u << 24));
    TRY(qr_check_range(ld, QM_HP_DIM, hp->dim, 1, 1u << 16));
    TRY(qr_check_range(ld, QM_HP_N_LAYERS, hp->n_layers, 1, 4096));
    TRY(qr_check_range(ld, QM_HP_N_HEADS, hp->n_heads, 1, hp->dim));
    TRY(qr_check_range(ld, QM_HP_FFN_DIM, hp->ffn_dim, 1, 1u << 20));
    if (hp->dim % hp->n_heads != 0)
        TRY(qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, NULL, QM_NO_OFFSET,
                    "%s.dim %u is not a multiple of %s.n_heads %u", qm_arch_name(ld->arch), hp->dim,
                    qm_arch_name(ld->arch), hp->n_heads));
    hp->n_kv_heads = hp->n_heads;
    hp->head_dim = hp->dim / hp->n_heads;
    hp->learned_positions = true;
    w->attn_scale = neo ? 1.0f : 1.0f / sqrtf((float)hp->head_dim);
    TRY(qr_load_string_opt(ld, QM_HP_ACTIVATION, "gelu_new", &s, &len));
    if (!qr_actfn_from_name(s, (size_t)len, &w->act))
        TRY(qm_fail(ld->err, QM_ERR_UNSUPPORTED, ld->path, NULL, QM_NO_OFFSET,
                    "%s.activation \"%.*s\" is not supported", qm_arch_name(ld->arch), (int)(len > 64 ? 64 : len), s));

    w->layers = calloc(hp->n_layers, sizeof *w->layers);
    w->window = calloc(hp->n_layers, sizeof *w->window);
    if (!w->layers || !w->window) TRY(qm_fail(ld->err, QM_ERR_NOMEM, ld->path, NULL, QM_NO_OFFSET, "out of memory"));
    hp->window = w->window;
    if (neo) {
        /* attention_layers[l] is "global" or "local"; local layers see the last window_size positions */
        uint32_t window_size;
        const qm_meta *types;
        TRY(qr_load_u32(ld, QM_HP_WINDOW_SIZE, &window_size));
        TRY(qr_check_range(ld, QM_HP_WINDOW_SIZE, window_size, 1, 1u << 24));
        TRY(qr_load_string_array(ld, QM_HP_ATTENTION_LAYERS, hp->n_layers, &types));
        for (uint32_t l = 0; l < hp->n_layers; l++) {
            TRY(qm_meta_array_string(types, l, &s, &len));
            if (len == 5 && !memcmp(s, "local", 5)) w->window[l] = window_size;
            else if (len == 6 && !memcmp(s, "global", 6)) w->window[l] = 0;
            else
                TRY(qm_fail(ld->err, QM_ERR_BAD_CONFIG, ld->path, types->key, types->entry_offset,
                            "gpt_neo.attention_layers[%u] is \"%.*s\", expected \"global\" or \"local\"", l,
                            (int)(len > 64 ? 64 : len), s));
        }
    }

    size_t d = hp->dim, f = hp->ffn_dim;
    TRY(qr_load_matrix(ld, QM_TENSOR_TOK_EMBD, 0, hp->vocab, d, &w->tok_embd));
    TRY(qr_load_matrix(ld, QM_TENSOR_POS_EMBD, 0, hp->ctx, d, &w->pos_embd));
    for (uint32_t l = 0; l < hp->n_layers; l++) {
        gpt_layer *L = &w->layers[l];
        TRY(qr_load_vector(ld, QM_TENSOR_BLK_LN1, l, d, &L->ln1_w));
        TRY(qr_load_vector(ld, QM_TENSOR_BLK_LN1_B, l, d, &L->ln1_b));
        if (neo) {
            TRY(qr_load_matrix(ld, QM_TENSOR_BLK_ATTN_Q, l, d, d, &L->wq));
            TRY(qr_load_matrix(ld, QM_TENSOR_BLK_ATTN_K, l, d, d, &L->wk));
            TRY(qr_load_matrix(ld, QM_TENSOR_BLK_ATTN_V, l, d, d, &L->wv));
        } else {
            TRY(qr_load_matrix(ld, QM_TENSOR_BLK_ATTN_QKV, l, 3 * d, d, &L->wqkv));
            TRY(qr_load_vector(ld, QM_TENSOR_BLK_ATTN_QKV_B, l, 3 * d, &L->bqkv));
        }
        TRY(qr_load_matrix_panels(ld, QM_TENSOR_BLK_ATTN_OUT, l, d, d, &L->wo, &L->o_panels));
        TRY(qr_load_vector(ld, QM_TENSOR_BLK_ATTN_OUT_B, l, d, &L->bo));
        TRY(qr_load_vector(ld, QM_TENSOR_BLK_LN2, l, d, &L->ln2_w));
        TRY(qr_load_vector(ld, QM_TENSOR_BLK_LN2_B, l, d, &L->ln2_b));
        TRY(qr_load_matrix(ld, QM_TENSOR_BLK_FFN_UP, l, f, d, &L->w_up));
        TRY(qr_load_vector(ld, QM_TENSOR_BLK_FFN_UP_B, l, f, &L->b_up));
        TRY(qr_load_matrix_panels(ld, QM_TENSOR_BLK_FFN_DOWN, l, d, f, &L->w_down, &L->down_panels));
        TRY(qr_load_vector(ld, QM_TENSOR_BLK_FFN_DOWN_B, l, d, &L->b_down));
    }
    TRY(qr_load_vector(ld, QM_TENSOR_OUT_NORM, 0, d, &w->ln_f_w));
    TRY(qr_load_vector(ld, QM_TENSOR_OUT_NORM_B, 0, d, &w->ln_f_b));
    if (w->tied) w->output = w->tok_embd;
    else TRY(qr_load_matrix(ld, QM_TENSOR_OUTPUT, 0, hp->vocab, d, &w->output));

    w->output_part = w->output;
    if (qr_shard_active(ld->shard)) TRY(gpt_shard(ld, w));

    *hp_out = *hp;
    *out = w;
    return QM_OK;
}
#undef TRY

static qm_status gpt2_load(qr_loader *ld, void **out, qr_lm_hparams *hp) { return gpt_load(ld, out, hp, false); }
static qm_status gpt_neo_load(qr_loader *ld, void **out, qr_lm_hparams *hp) { return gpt_load(ld, out, hp, true); }

#define TRY(expr) do { qm_status st_ = (expr); if (st_ != QM_OK) return st_; } while (0)

static qm_status gpt_forward(const void *p, qr_lm_state *s, const qr_lm_rows *r)
{
    const gpt_weights *w = p;
    const qr_lm_hparams *hp = &w->hp;
    /* q_dim: the heads this process runs (d, or d / N for a rank of a tensor-parallel run) */
    const size_t d = hp->dim, f = hp->ffn_dim, ldqkv = s->qkv_stride, q_dim = (size_t)hp->n_heads * hp->head_dim;
    float *q = s->qkv, *k = s->qkv + q_dim, *v = s->qkv + 2 * q_dim;
    const qr_attn_shape shape = { hp->n_heads, hp->n_heads, hp->head_dim, w->attn_scale, 0.0f };
    const float eps = w->norm_eps;
    const size_t n = r->n;   /* every row of every sequence: the products run once over all of them */

    /* x = wte(input_ids) + wpe(position_ids), each sequence's rows at its own positions */
    qr_embed_rows(&w->tok_embd, r->ids, n, s->x, d);
    qr_lm_add_positions(s, r, &w->pos_embd, s->x, d);

    for (uint32_t l = 0; l < hp->n_layers; l++) {
        const gpt_layer *L = &w->layers[l];
        /* h = ln_1(x) */
        qr_rows_layernorm(s->pool, s->xb, s->x, L->ln1_w, L->ln1_b, n, d, eps);
        if (w->neo || qr_shard_active(&w->shard)) {
            /* q, k, v = q_proj(h), k_proj(h), v_proj(h) (gpt2 sharded: the rank's heads of c_attn) */
            const qr_matrix *qkv_w[3] = { &L->wq, &L->wk, &L->wv };
            const float *qkv_b[3] = { L->bq, L->bk, L->bv };
            float *qkv_y[3] = { q, k, v };
            TRY(qr_linear_many(s, QR_X_NORMED, qkv_w, qkv_b, 3, n, s->xb, d, qkv_y, ldqkv));
        } else {
            /* q, k, v = c_attn(h).split(n_embd, dim=2) */
            TRY(qr_linear(s, QR_X_NORMED, &L->wqkv, L->bqkv, n, s->xb, d, s->qkv, ldqkv));
        }
        /* attn = softmax(scale·q·kᵀ + causal mask (window on local layers))·v, each sequence over its cache */
        qr_lm_attend(s, r, l, &shape, q, k, v, ldqkv, s->att, q_dim);
        /* x = x + c_proj(attn) */
        TRY(qr_linear_part(s, QR_X_NORMED, &L->o_part, &L->wo, L->bo, L->o_panels, n, s->att, q_dim, s->xb, s->hb2));
        TRY(qr_shard_sum(&w->shard, s->xb, n * d));   /* tensor parallel: the ranks' heads added */
        qr_rows_add(s->pool, s->x, s->xb, n * d);
        /* x = x + mlp.c_proj(act(mlp.c_fc(ln_2(x)))) */
        qr_rows_layernorm(s->pool, s->xb, s->x, L->ln2_w, L->ln2_b, n, d, eps);
        TRY(qr_linear(s, QR_X_NORMED, &L->w_up, L->b_up, n, s->xb, d, s->hb, f));
        qr_rows_activate(s->pool, w->act, s->hb, n * f);
        TRY(qr_linear_part(s, QR_X_FLOAT, &L->down_part, &L->w_down, L->b_down, L->down_panels, n, s->hb, f, s->xb,
                           s->hb2));
        TRY(qr_shard_sum(&w->shard, s->xb, n * d));   /* and their FFN units */
        qr_rows_add(s->pool, s->x, s->xb, n * d);
    }

    /* logits = lm_head(ln_f(x)), for every token or each sequence's last */
    const size_t n_out = qr_lm_logit_count(r);
    for (size_t i = 0; i < n_out; i++)
        qr_layernorm(s->xb + i * d, s->x + qr_lm_logit_row(r, i) * d, w->ln_f_w, w->ln_f_b, d, eps);
    return qr_lm_logits_shard(s, &w->shard, &w->output_part, n_out, d, hp->vocab);
}

const qr_lm_family qr_family_gpt2 = {
    .arch = QM_ARCH_GPT2,
    .load = gpt2_load,
    .free = gpt_free,
    .forward = gpt_forward,
    .tied_output = gpt_tied,
};

const qr_lm_family qr_family_gpt_neo = {
    .arch = QM_ARCH_GPT_NEO,
    .load = gpt_neo_load,
    .free = gpt_free,
    .forward = gpt_forward,
    .tied_output = gpt_tied,
};
