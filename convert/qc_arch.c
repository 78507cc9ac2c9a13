/* qc_arch.c — canonical layouts of the architectures qmap runs (spec/ARCHITECTURES.md).
 *
 * Each transformer architecture is a table of rules: a source-name pattern (with "{i}" for the layer
 * index), the canonical name, flags (per layer, transposed, optional, skipped, size-1 dims dropped) and
 * the expected container shape in terms of hyperparameters. Hyperparameters come from the config when it
 * states them and from anchor tensors' shapes otherwise; then every tensor is checked against them, so a
 * config that disagrees with the weights fails naming the tensor and both shapes. The MLP has no fixed
 * names and is handled by its own code below. */
#include "qc_arch.h"

#include <ctype.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qm_format.h"
#include "qm_names.h"

#define MAX_LAYERS 4096
#define NO_DST QM_TENSOR_COUNT            /* a rule that maps to no container tensor */

/* ---- hyperparameters and shape symbols ---- */

typedef enum sym { X_NONE = 0, X_V, X_CTX, X_D, X_3D, X_FF, X_Q, X_KV, X_SV, X_TV, X_ML, X_HD, X_COUNT } sym;
static const char *const sym_name[X_COUNT] = {
    "", "vocab_size", "context_length", "dim", "3*dim", "ffn_dim", "n_heads*head_dim",
    "n_kv_heads*head_dim", "src_vocab_size", "tgt_vocab_size", "max_len",
    "head_dim",
};

typedef struct hparams {
    uint64_t v[X_COUNT];                  /* resolved values of the shape symbols */
    bool known[X_COUNT];                  /* resolved: from the config, or read off an anchor tensor */
} hparams;

/* ---- rules ---- */
enum {
    PL = 1,      /* per layer: patterns contain {i} */
    TR = 2,      /* source is [in, out]: transpose into [out, in] */
    OPT = 4,     /* may be absent */
    IGN = 8,     /* recognised and skipped (buffers) */
    SQZ = 16,    /* drop size-1 dims of the source */
    HEAD = 32,   /* the output head: dropped when tied to the token embedding */
    DEC = 64,    /* per decoder layer (seq2seq): counted by n_dec_layers */
    NOPFX = 128, /* matched against the full source name (no model prefix) */
    PART = 256,  /* one part of a fused source: rows split[0] .., split[1] .., ... of it; this is part `part` */
};

typedef struct rule {
    const char *src;
    qm_tensor_id dst;                     /* container tensor (format/qm_names.h); NO_DST: skipped */
    unsigned flags;
    sym s0, s1;                           /* expected container shape; X_NONE ends it */
} rule;

/* Where a PART rule's container tensor lies in its fused source: rows split[0], then split[1], ... */
typedef struct part_def {
    qm_tensor_id dst;
    unsigned part;                        /* which part it is (its rows: split[part]) */
    sym split[3];                         /* the rows of each part in order; X_NONE ends it */
} part_def;

struct ctx;

/* One source layout: the names that choose it (a canonical name of format/qm_names.h and the HF
 * model_types that share it), the container architecture it becomes, its tensor rules and its plan. */
typedef struct arch_def {
    const char *names[5];                 /* model_type / --arch values; NULL ends the list */
    qm_arch arch;
    const char *markers[2];               /* a source tensor name containing one of these guesses this row */
    const char *prefix;                   /* optional model prefix on source names */
    const rule *rules;
    size_t n_rules;
    qm_tensor_id embd;                    /* the token embedding (for tying); NO_DST: none */
    const part_def *parts;                /* [n_parts]: the PART rules' places in their fused sources */
    size_t n_parts;
    qm_status (*plan)(struct ctx *c, const struct arch_def *a);
} arch_def;

static const rule gpt2_rules[] = {
    { "wte.weight", QM_TENSOR_TOK_EMBD, 0, X_V, X_D },
    { "wpe.weight", QM_TENSOR_POS_EMBD, 0, X_CTX, X_D },
    { "h.{i}.ln_1.weight", QM_TENSOR_BLK_LN1, PL, X_D, 0 },
    { "h.{i}.ln_1.bias", QM_TENSOR_BLK_LN1_B, PL, X_D, 0 },
    { "h.{i}.attn.c_attn.weight", QM_TENSOR_BLK_ATTN_QKV, PL | TR, X_3D, X_D },
    { "h.{i}.attn.c_attn.bias", QM_TENSOR_BLK_ATTN_QKV_B, PL, X_3D, 0 },
    { "h.{i}.attn.c_proj.weight", QM_TENSOR_BLK_ATTN_OUT, PL | TR, X_D, X_D },
    { "h.{i}.attn.c_proj.bias", QM_TENSOR_BLK_ATTN_OUT_B, PL, X_D, 0 },
    { "h.{i}.ln_2.weight", QM_TENSOR_BLK_LN2, PL, X_D, 0 },
    { "h.{i}.ln_2.bias", QM_TENSOR_BLK_LN2_B, PL, X_D, 0 },
    { "h.{i}.mlp.c_fc.weight", QM_TENSOR_BLK_FFN_UP, PL | TR, X_FF, X_D },
    { "h.{i}.mlp.c_fc.bias", QM_TENSOR_BLK_FFN_UP_B, PL, X_FF, 0 },
    { "h.{i}.mlp.c_proj.weight", QM_TENSOR_BLK_FFN_DOWN, PL | TR, X_D, X_FF },
    { "h.{i}.mlp.c_proj.bias", QM_TENSOR_BLK_FFN_DOWN_B, PL, X_D, 0 },
    { "h.{i}.attn.bias", NO_DST, PL | IGN | OPT, 0, 0 },
    { "h.{i}.attn.masked_bias", NO_DST, PL | IGN | OPT, 0, 0 },
    { "ln_f.weight", QM_TENSOR_OUT_NORM, 0, X_D, 0 },
    { "ln_f.bias", QM_TENSOR_OUT_NORM_B, 0, X_D, 0 },
    { "lm_head.weight", QM_TENSOR_OUTPUT, HEAD | OPT | NOPFX, X_V, X_D },
};

static const rule gpt_neo_rules[] = {
    { "wte.weight", QM_TENSOR_TOK_EMBD, 0, X_V, X_D },
    { "wpe.weight", QM_TENSOR_POS_EMBD, 0, X_CTX, X_D },
    { "h.{i}.ln_1.weight", QM_TENSOR_BLK_LN1, PL, X_D, 0 },
    { "h.{i}.ln_1.bias", QM_TENSOR_BLK_LN1_B, PL, X_D, 0 },
    { "h.{i}.attn.attention.q_proj.weight", QM_TENSOR_BLK_ATTN_Q, PL, X_D, X_D },
    { "h.{i}.attn.attention.k_proj.weight", QM_TENSOR_BLK_ATTN_K, PL, X_D, X_D },
    { "h.{i}.attn.attention.v_proj.weight", QM_TENSOR_BLK_ATTN_V, PL, X_D, X_D },
    { "h.{i}.attn.attention.out_proj.weight", QM_TENSOR_BLK_ATTN_OUT, PL, X_D, X_D },
    { "h.{i}.attn.attention.out_proj.bias", QM_TENSOR_BLK_ATTN_OUT_B, PL, X_D, 0 },
    { "h.{i}.ln_2.weight", QM_TENSOR_BLK_LN2, PL, X_D, 0 },
    { "h.{i}.ln_2.bias", QM_TENSOR_BLK_LN2_B, PL, X_D, 0 },
    { "h.{i}.mlp.c_fc.weight", QM_TENSOR_BLK_FFN_UP, PL, X_FF, X_D },
    { "h.{i}.mlp.c_fc.bias", QM_TENSOR_BLK_FFN_UP_B, PL, X_FF, 0 },
    { "h.{i}.mlp.c_proj.weight", QM_TENSOR_BLK_FFN_DOWN, PL, X_D, X_FF },
    { "h.{i}.mlp.c_proj.bias", QM_TENSOR_BLK_FFN_DOWN_B, PL, X_D, 0 },
    { "h.{i}.attn.attention.bias", NO_DST, PL | IGN | OPT, 0, 0 },
    { "h.{i}.attn.attention.masked_bias", NO_DST, PL | IGN | OPT, 0, 0 },
    { "ln_f.weight", QM_TENSOR_OUT_NORM, 0, X_D, 0 },
    { "ln_f.bias", QM_TENSOR_OUT_NORM_B, 0, X_D, 0 },
    { "lm_head.weight", QM_TENSOR_OUTPUT, HEAD | OPT | NOPFX, X_V, X_D },
};

static const rule llama_rules[] = {
    { "embed_tokens.weight", QM_TENSOR_TOK_EMBD, 0, X_V, X_D },
    { "layers.{i}.input_layernorm.weight", QM_TENSOR_BLK_ATTN_NORM, PL, X_D, 0 },
    { "layers.{i}.self_attn.q_proj.weight", QM_TENSOR_BLK_ATTN_Q, PL, X_Q, X_D },
    { "layers.{i}.self_attn.q_proj.bias", QM_TENSOR_BLK_ATTN_Q_B, PL | OPT, X_Q, 0 },
    { "layers.{i}.self_attn.k_proj.weight", QM_TENSOR_BLK_ATTN_K, PL, X_KV, X_D },
    { "layers.{i}.self_attn.k_proj.bias", QM_TENSOR_BLK_ATTN_K_B, PL | OPT, X_KV, 0 },
    { "layers.{i}.self_attn.v_proj.weight", QM_TENSOR_BLK_ATTN_V, PL, X_KV, X_D },
    { "layers.{i}.self_attn.v_proj.bias", QM_TENSOR_BLK_ATTN_V_B, PL | OPT, X_KV, 0 },
    { "layers.{i}.self_attn.q_norm.weight", QM_TENSOR_BLK_ATTN_Q_NORM, PL | OPT, X_HD, 0 },
    { "layers.{i}.self_attn.k_norm.weight", QM_TENSOR_BLK_ATTN_K_NORM, PL | OPT, X_HD, 0 },
    { "layers.{i}.self_attn.o_proj.weight", QM_TENSOR_BLK_ATTN_O, PL, X_D, X_Q },
    { "layers.{i}.post_attention_layernorm.weight", QM_TENSOR_BLK_FFN_NORM, PL, X_D, 0 },
    { "layers.{i}.mlp.gate_proj.weight", QM_TENSOR_BLK_FFN_GATE, PL, X_FF, X_D },
    { "layers.{i}.mlp.up_proj.weight", QM_TENSOR_BLK_FFN_UP, PL, X_FF, X_D },
    { "layers.{i}.mlp.down_proj.weight", QM_TENSOR_BLK_FFN_DOWN, PL, X_D, X_FF },
    { "layers.{i}.self_attn.rotary_emb.inv_freq", NO_DST, PL | IGN | OPT, 0, 0 },
    { "norm.weight", QM_TENSOR_OUT_NORM, 0, X_D, 0 },
    { "lm_head.weight", QM_TENSOR_OUTPUT, HEAD | OPT | NOPFX, X_V, X_D },
};

/* Phi-3's fused projections are split at convert time into llama's q/k/v and gate/up: the runtime already
 * runs q/k/v (and gate/up) as one product over the same rows (qr_linear_many), so a fused matrix would
 * gain nothing there, while split ones keep one container layout, one runtime family and quantize's
 * per-tensor rules; Q8_ROW scales are per row, so a part quantizes exactly as its rows of the fused one. */
static const rule phi3_rules[] = {
    { "embed_tokens.weight", QM_TENSOR_TOK_EMBD, 0, X_V, X_D },
    { "layers.{i}.input_layernorm.weight", QM_TENSOR_BLK_ATTN_NORM, PL, X_D, 0 },
    { "layers.{i}.self_attn.qkv_proj.weight", QM_TENSOR_BLK_ATTN_Q, PL | PART, X_Q, X_D },
    { "layers.{i}.self_attn.qkv_proj.weight", QM_TENSOR_BLK_ATTN_K, PL | PART, X_KV, X_D },
    { "layers.{i}.self_attn.qkv_proj.weight", QM_TENSOR_BLK_ATTN_V, PL | PART, X_KV, X_D },
    { "layers.{i}.self_attn.o_proj.weight", QM_TENSOR_BLK_ATTN_O, PL, X_D, X_Q },
    { "layers.{i}.post_attention_layernorm.weight", QM_TENSOR_BLK_FFN_NORM, PL, X_D, 0 },
    { "layers.{i}.mlp.gate_up_proj.weight", QM_TENSOR_BLK_FFN_GATE, PL | PART, X_FF, X_D },
    { "layers.{i}.mlp.gate_up_proj.weight", QM_TENSOR_BLK_FFN_UP, PL | PART, X_FF, X_D },
    { "layers.{i}.mlp.down_proj.weight", QM_TENSOR_BLK_FFN_DOWN, PL, X_D, X_FF },
    { "layers.{i}.self_attn.rotary_emb.inv_freq", NO_DST, PL | IGN | OPT, 0, 0 },
    { "norm.weight", QM_TENSOR_OUT_NORM, 0, X_D, 0 },
    { "lm_head.weight", QM_TENSOR_OUTPUT, HEAD | OPT | NOPFX, X_V, X_D },
};
/* HF's Phi3Attention: q, k, v = qkv[:, :H·h], qkv[:, H·h : H·h + K·h], the rest; Phi3MLP: gate, up =
 * gate_up.chunk(2) */
static const part_def phi3_parts[] = {
    { QM_TENSOR_BLK_ATTN_Q, 0, { X_Q, X_KV, X_KV } },
    { QM_TENSOR_BLK_ATTN_K, 1, { X_Q, X_KV, X_KV } },
    { QM_TENSOR_BLK_ATTN_V, 2, { X_Q, X_KV, X_KV } },
    { QM_TENSOR_BLK_FFN_GATE, 0, { X_FF, X_FF, X_NONE } },
    { QM_TENSOR_BLK_FFN_UP, 1, { X_FF, X_FF, X_NONE } },
};

/* Gemma 2: llama's names plus a norm after attention and a pair around the feed-forward (stored as HF
 * stores them: the runtime multiplies by 1 + w) */
static const rule gemma2_rules[] = {
    { "embed_tokens.weight", QM_TENSOR_TOK_EMBD, 0, X_V, X_D },
    { "layers.{i}.input_layernorm.weight", QM_TENSOR_BLK_ATTN_NORM, PL, X_D, 0 },
    { "layers.{i}.self_attn.q_proj.weight", QM_TENSOR_BLK_ATTN_Q, PL, X_Q, X_D },
    { "layers.{i}.self_attn.k_proj.weight", QM_TENSOR_BLK_ATTN_K, PL, X_KV, X_D },
    { "layers.{i}.self_attn.v_proj.weight", QM_TENSOR_BLK_ATTN_V, PL, X_KV, X_D },
    { "layers.{i}.self_attn.o_proj.weight", QM_TENSOR_BLK_ATTN_O, PL, X_D, X_Q },
    { "layers.{i}.post_attention_layernorm.weight", QM_TENSOR_BLK_POST_ATTN_NORM, PL, X_D, 0 },
    { "layers.{i}.pre_feedforward_layernorm.weight", QM_TENSOR_BLK_FFN_NORM, PL, X_D, 0 },
    { "layers.{i}.mlp.gate_proj.weight", QM_TENSOR_BLK_FFN_GATE, PL, X_FF, X_D },
    { "layers.{i}.mlp.up_proj.weight", QM_TENSOR_BLK_FFN_UP, PL, X_FF, X_D },
    { "layers.{i}.mlp.down_proj.weight", QM_TENSOR_BLK_FFN_DOWN, PL, X_D, X_FF },
    { "layers.{i}.post_feedforward_layernorm.weight", QM_TENSOR_BLK_POST_FFN_NORM, PL, X_D, 0 },
    { "layers.{i}.self_attn.rotary_emb.inv_freq", NO_DST, PL | IGN | OPT, 0, 0 },
    { "norm.weight", QM_TENSOR_OUT_NORM, 0, X_D, 0 },
    { "lm_head.weight", QM_TENSOR_OUTPUT, HEAD | OPT | NOPFX, X_V, X_D },
};

#define ENC "transformer.encoder.layers.{i}."
#define DECL "transformer.decoder.layers.{i}."
static const rule seq2seq_rules[] = {
    { "src_tok_emb.embedding.weight", QM_TENSOR_ENC_EMBD, 0, X_SV, X_D },
    { "tgt_tok_emb.embedding.weight", QM_TENSOR_DEC_EMBD, 0, X_TV, X_D },
    { "positional_encoding.pos_embedding", QM_TENSOR_POS_ENC, SQZ, X_ML, X_D },
    { ENC "self_attn.in_proj_weight", QM_TENSOR_ENC_ATTN_QKV, PL, X_3D, X_D },
    { ENC "self_attn.in_proj_bias", QM_TENSOR_ENC_ATTN_QKV_B, PL, X_3D, 0 },
    { ENC "self_attn.out_proj.weight", QM_TENSOR_ENC_ATTN_OUT, PL, X_D, X_D },
    { ENC "self_attn.out_proj.bias", QM_TENSOR_ENC_ATTN_OUT_B, PL, X_D, 0 },
    { ENC "linear1.weight", QM_TENSOR_ENC_FFN_UP, PL, X_FF, X_D },
    { ENC "linear1.bias", QM_TENSOR_ENC_FFN_UP_B, PL, X_FF, 0 },
    { ENC "linear2.weight", QM_TENSOR_ENC_FFN_DOWN, PL, X_D, X_FF },
    { ENC "linear2.bias", QM_TENSOR_ENC_FFN_DOWN_B, PL, X_D, 0 },
    { ENC "norm1.weight", QM_TENSOR_ENC_LN1, PL, X_D, 0 },
    { ENC "norm1.bias", QM_TENSOR_ENC_LN1_B, PL, X_D, 0 },
    { ENC "norm2.weight", QM_TENSOR_ENC_LN2, PL, X_D, 0 },
    { ENC "norm2.bias", QM_TENSOR_ENC_LN2_B, PL, X_D, 0 },
    { "transformer.encoder.norm.weight", QM_TENSOR_ENC_NORM, 0, X_D, 0 },
    { "transformer.encoder.norm.bias", QM_TENSOR_ENC_NORM_B, 0, X_D, 0 },
    { DECL "self_attn.in_proj_weight", QM_TENSOR_DEC_ATTN_QKV, PL | DEC, X_3D, X_D },
    { DECL "self_attn.in_proj_bias", QM_TENSOR_DEC_ATTN_QKV_B, PL | DEC, X_3D, 0 },
    { DECL "self_attn.out_proj.weight", QM_TENSOR_DEC_ATTN_OUT, PL | DEC, X_D, X_D },
    { DECL "self_attn.out_proj.bias", QM_TENSOR_DEC_ATTN_OUT_B, PL | DEC, X_D, 0 },
    { DECL "multihead_attn.in_proj_weight", QM_TENSOR_DEC_CROSS_QKV, PL | DEC, X_3D, X_D },
    { DECL "multihead_attn.in_proj_bias", QM_TENSOR_DEC_CROSS_QKV_B, PL | DEC, X_3D, 0 },
    { DECL "multihead_attn.out_proj.weight", QM_TENSOR_DEC_CROSS_OUT, PL | DEC, X_D, X_D },
    { DECL "multihead_attn.out_proj.bias", QM_TENSOR_DEC_CROSS_OUT_B, PL | DEC, X_D, 0 },
    { DECL "linear1.weight", QM_TENSOR_DEC_FFN_UP, PL | DEC, X_FF, X_D },
    { DECL "linear1.bias", QM_TENSOR_DEC_FFN_UP_B, PL | DEC, X_FF, 0 },
    { DECL "linear2.weight", QM_TENSOR_DEC_FFN_DOWN, PL | DEC, X_D, X_FF },
    { DECL "linear2.bias", QM_TENSOR_DEC_FFN_DOWN_B, PL | DEC, X_D, 0 },
    { DECL "norm1.weight", QM_TENSOR_DEC_LN1, PL | DEC, X_D, 0 },
    { DECL "norm1.bias", QM_TENSOR_DEC_LN1_B, PL | DEC, X_D, 0 },
    { DECL "norm2.weight", QM_TENSOR_DEC_LN2, PL | DEC, X_D, 0 },
    { DECL "norm2.bias", QM_TENSOR_DEC_LN2_B, PL | DEC, X_D, 0 },
    { DECL "norm3.weight", QM_TENSOR_DEC_LN3, PL | DEC, X_D, 0 },
    { DECL "norm3.bias", QM_TENSOR_DEC_LN3_B, PL | DEC, X_D, 0 },
    { "transformer.decoder.norm.weight", QM_TENSOR_DEC_NORM, 0, X_D, 0 },
    { "transformer.decoder.norm.bias", QM_TENSOR_DEC_NORM_B, 0, X_D, 0 },
    { "generator.weight", QM_TENSOR_OUTPUT, 0, X_TV, X_D },
    { "generator.bias", QM_TENSOR_OUTPUT_B, 0, X_TV, 0 },
};

#define N(a) (sizeof a / sizeof a[0])

/* The architectures convert plans, from the names table. */
const char *qc_arch_list(void)
{
    return qm_arch_list();
}

/* ---- source tensor index: every tensor of every shard, by name ---- */

typedef struct ref { const char *name; uint32_t src; uint64_t tensor; } ref;

typedef struct ctx {
    qc_source *const *srcs;
    uint32_t n_srcs;
    ref *refs; uint64_t n_refs;
    uint8_t *used;                        /* per ref: 1 mapped, 2 skipped */
    json_t *config;                       /* may be NULL */
    const char *config_name;
    json_t *manifest;                     /* may be NULL */
    qc_plan *plan;
    qm_error *err;
} ctx;

static int ref_cmp(const void *a, const void *b) { return strcmp(((const ref *)a)->name, ((const ref *)b)->name); }

static const qc_tensor *ref_tensor(const ctx *c, uint64_t r) { return &c->srcs[c->refs[r].src]->tensors[c->refs[r].tensor]; }
static const char *ref_file(const ctx *c, uint64_t r) { return c->srcs[c->refs[r].src]->path; }

static qm_status index_sources(ctx *c)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < c->n_srcs; i++) n += c->srcs[i]->n_tensors;
    c->refs = calloc(n ? n : 1, sizeof *c->refs);
    c->used = calloc(n ? n : 1, 1);
    if (!c->refs || !c->used) return qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    for (uint32_t i = 0; i < c->n_srcs; i++)
        for (uint64_t t = 0; t < c->srcs[i]->n_tensors; t++)
            c->refs[c->n_refs++] = (ref){ c->srcs[i]->tensors[t].name, i, t };
    qsort(c->refs, c->n_refs, sizeof *c->refs, ref_cmp);
    for (uint64_t r = 1; r < c->n_refs; r++)
        if (!strcmp(c->refs[r - 1].name, c->refs[r].name))
            return qm_fail(c->err, QM_ERR_BAD_SOURCE, ref_file(c, r), c->refs[r].name, QM_NO_OFFSET,
                           "tensor '%s' appears twice (also in %s)", c->refs[r].name, ref_file(c, r - 1));
    return QM_OK;
}

static int64_t find_ref(const ctx *c, const char *name)
{
    uint64_t lo = 0, hi = c->n_refs;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int d = strcmp(c->refs[mid].name, name);
        if (!d) return (int64_t)mid;
        if (d < 0) lo = mid + 1; else hi = mid;
    }
    return -1;
}

/* ---- config access ---- */

static json_t *cfg_get(const ctx *c, const char *const *keys)
{
    if (!c->config) return NULL;
    for (; *keys; keys++) {
        json_t *v = json_object_get(c->config, *keys);
        if (v && !json_is_null(v)) return v;
    }
    return NULL;
}

/* An unsigned count from the first present key; *found false if none. */
static qm_status cfg_u64(ctx *c, const char *const *keys, uint64_t *out, bool *found)
{
    json_t *v = cfg_get(c, keys);
    *found = false;
    if (!v) return QM_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (json_int_t)UINT32_MAX)
        return qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name, keys[0], QM_NO_OFFSET,
                       "\"%s\" must be an integer in [0, 2^32)", keys[0]);
    *out = (uint64_t)json_integer_value(v);
    *found = true;
    return QM_OK;
}

static qm_status cfg_f64(ctx *c, const char *const *keys, double dflt, double *out)
{
    json_t *v = cfg_get(c, keys);
    *out = dflt;
    if (!v) return QM_OK;
    if (!json_is_number(v))
        return qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name, keys[0], QM_NO_OFFSET, "\"%s\" must be a number",
                       keys[0]);
    *out = json_number_value(v);
    return QM_OK;
}

static const char *cfg_str(ctx *c, const char *const *keys, const char *dflt)
{
    json_t *v = cfg_get(c, keys);
    return json_is_string(v) ? json_string_value(v) : dflt;
}

static int cfg_bool(ctx *c, const char *const *keys, int dflt)
{
    json_t *v = cfg_get(c, keys);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

#define KEYS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* ---- metadata items ---- */

static qc_meta_item *meta_add(ctx *c, qm_hparam key, uint32_t type)
{
    qc_plan *p = c->plan;
    qc_meta_item *m = realloc(p->meta, (p->n_meta + 1) * sizeof *m);
    if (!m) return NULL;
    p->meta = m;
    m = &p->meta[p->n_meta++];
    memset(m, 0, sizeof *m);
    snprintf(m->key, sizeof m->key, "%s.%s", p->arch, qm_hparam_suffix(key));
    m->type = type;
    return m;
}

static qm_status meta_u32(ctx *c, qm_hparam key, uint64_t v)
{
    qc_meta_item *m = meta_add(c, key, QM_META_U32);
    if (!m) return qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    m->u32 = (uint32_t)v;
    return QM_OK;
}
static qm_status meta_f32(ctx *c, qm_hparam key, double v)
{
    qc_meta_item *m = meta_add(c, key, QM_META_F32);
    if (!m) return qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    m->f32 = (float)v;
    return QM_OK;
}
static qm_status meta_bool(ctx *c, qm_hparam key, bool v)
{
    qc_meta_item *m = meta_add(c, key, QM_META_BOOL);
    if (!m) return qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    m->b = v;
    return QM_OK;
}
static qm_status meta_str(ctx *c, qm_hparam key, const char *v)
{
    qc_meta_item *m = meta_add(c, key, QM_META_STRING);
    if (!m || !(m->str = strdup(v))) return qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    return QM_OK;
}
/* Takes ownership of strs (n strings) whatever happens. */
static qm_status meta_strs(ctx *c, qm_hparam key, char **strs, uint64_t n)
{
    qc_meta_item *m = meta_add(c, key, QM_META_ARRAY);
    if (!m) {
        for (uint64_t i = 0; i < n; i++) free(strs[i]);
        free(strs);
        return qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    }
    m->strs = strs;
    m->n_strs = n;
    return QM_OK;
}

/* ---- shapes ---- */

static void shape_str(uint32_t rank, const uint64_t *dims, char *buf, size_t size)
{
    size_t o = (size_t)snprintf(buf, size, "[");
    for (uint32_t i = 0; i < rank && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%llu", i ? ", " : "", (unsigned long long)dims[i]);
    if (o < size) snprintf(buf + o, size - o, "]");
}

/* The container shape of source tensor t under the rule's transpose / squeeze. */
static qm_status container_shape(ctx *c, uint64_t r, unsigned flags, uint32_t *rank, uint64_t *dims)
{
    const qc_tensor *t = ref_tensor(c, r);
    uint32_t n = 0;
    for (uint32_t i = 0; i < t->rank; i++) {
        if ((flags & SQZ) && t->shape[i] == 1) continue;
        if (n == QM_MAX_RANK)
            return qm_fail(c->err, QM_ERR_SHAPE, ref_file(c, r), t->name, QM_NO_OFFSET,
                           "tensor '%s' has %u dimensions; a weight has at most 4", t->name, t->rank);
        dims[n++] = t->shape[i];
    }
    if (flags & TR) {
        if (n != 2)
            return qm_fail(c->err, QM_ERR_SHAPE, ref_file(c, r), t->name, QM_NO_OFFSET,
                           "tensor '%s' must be 2-D (it is stored transposed), has %u dimensions", t->name, n);
        uint64_t x = dims[0]; dims[0] = dims[1]; dims[1] = x;
    }
    if (n == 0) { dims[0] = 1; n = 1; }    /* a scalar is stored as one element */
    *rank = n;
    return QM_OK;
}

/* ---- the generic transformer mapper ---- */

static bool match_pattern(const char *pat, const char *name, long *layer)
{
    const char *brace = strstr(pat, "{i}");
    if (!brace) return !strcmp(pat, name);
    size_t pre = (size_t)(brace - pat);
    if (strncmp(pat, name, pre) != 0) return false;
    const char *p = name + pre;
    if (!isdigit((unsigned char)*p) || (p[0] == '0' && isdigit((unsigned char)p[1]))) return false;
    long v = 0;
    while (isdigit((unsigned char)*p)) {
        v = v * 10 + (*p - '0');
        if (v >= MAX_LAYERS) return false;
        p++;
    }
    if (strcmp(p, brace + 3) != 0) return false;
    *layer = v;
    return true;
}

static void expand(const char *pat, long layer, char *out, size_t size)
{
    const char *brace = strstr(pat, "{i}");
    if (!brace) { snprintf(out, size, "%s", pat); return; }
    snprintf(out, size, "%.*s%ld%s", (int)(brace - pat), pat, layer, brace + 3);
}

static qm_status add_out(ctx *c, const char *name, uint64_t r, unsigned flags)
{
    qc_plan *p = c->plan;
    qc_out *o = realloc(p->out, (p->n_out + 1) * sizeof *o);
    if (!o) return qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    p->out = o;
    o = &p->out[p->n_out];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->src = c->refs[r].src;
    o->tensor = c->refs[r].tensor;
    o->transpose = (flags & TR) != 0;
    qm_status st = container_shape(c, r, flags, &o->rank, o->dims);
    if (st != QM_OK) return st;
    const qc_tensor *t = ref_tensor(c, r);
    if (!qc_dtype_is_float(t->dtype))
        return qm_fail(c->err, QM_ERR_UNSUPPORTED, ref_file(c, r), t->name, QM_NO_OFFSET,
                       "tensor '%s' holds %s values; weights must be floating point", t->name, qc_dtype_name(t->dtype));
    p->n_out++;
    return QM_OK;
}

/* slot[rule * (layers+1) + layer]: the ref mapped there, or -1 */
typedef struct matched { int64_t *slot; long max_layer[2]; } matched;

static int64_t *slot_at(matched *m, size_t k, long layer)
{
    return &m->slot[k * (MAX_LAYERS + 1) + (size_t)layer];
}

static qm_status match_all(ctx *c, const arch_def *a, matched *m)
{
    m->slot = malloc(a->n_rules * (MAX_LAYERS + 1) * sizeof *m->slot);
    if (!m->slot) return qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    for (size_t i = 0; i < a->n_rules * (MAX_LAYERS + 1); i++) m->slot[i] = -1;
    m->max_layer[0] = m->max_layer[1] = -1;
    size_t plen = strlen(a->prefix);
    for (uint64_t r = 0; r < c->n_refs; r++) {
        const char *full = c->refs[r].name;
        const char *bare = (plen && !strncmp(full, a->prefix, plen)) ? full + plen : full;
        for (size_t k = 0; k < a->n_rules; k++) {
            const rule *ru = &a->rules[k];
            long layer = 0;
            if (!match_pattern(ru->src, (ru->flags & NOPFX) ? full : bare, &layer)) continue;
            int64_t *s = slot_at(m, k, layer);
            if (*s >= 0)
                return qm_fail(c->err, QM_ERR_UNEXPECTED_TENSOR, ref_file(c, r), full, QM_NO_OFFSET,
                               "tensors '%s' and '%s' both map to the same weight", c->refs[*s].name, full);
            *s = (int64_t)r;
            if (ru->flags & PL) {
                long *ml = &m->max_layer[(ru->flags & DEC) ? 1 : 0];
                if (layer > *ml) *ml = layer;
            }
            if (!(ru->flags & PART)) break;   /* the other parts of a fused source match it too */
        }
    }
    return QM_OK;
}

/* Fill unknown symbols from an anchor: the source tensor of rule `k` (layer 0) gives dims 0/1. */
static void infer(const ctx *c, const arch_def *a, matched *m, hparams *hp, qm_tensor_id canon, sym s, int dim)
{
    if (hp->known[s]) return;
    for (size_t k = 0; k < a->n_rules; k++) {
        if (a->rules[k].dst != canon || (a->rules[k].flags & PART)) continue;
        int64_t r = *slot_at(m, k, 0);
        if (r < 0) return;
        const qc_tensor *t = ref_tensor(c, (uint64_t)r);
        uint64_t dims[QC_MAX_RANK] = { 0 };
        uint32_t n = 0;
        for (uint32_t i = 0; i < t->rank; i++) if (!((a->rules[k].flags & SQZ) && t->shape[i] == 1)) dims[n++] = t->shape[i];
        if (a->rules[k].flags & TR) { uint64_t x = dims[0]; dims[0] = dims[1]; dims[1] = x; }
        if ((uint32_t)dim < n) { hp->v[s] = dims[dim]; hp->known[s] = true; }
        return;
    }
}

/* A PART rule's place in its fused source: *row0 = the rows of the parts before it, *rows = its own,
 * *total = the rows of all its parts (what the source must have). */
static void part_rows(const arch_def *a, const rule *ru, const hparams *hp, uint64_t *row0, uint64_t *rows,
                      uint64_t *total)
{
    const part_def *pd = NULL;
    for (size_t i = 0; i < a->n_parts; i++) if (a->parts[i].dst == ru->dst) pd = &a->parts[i];
    *row0 = *rows = *total = 0;
    for (unsigned j = 0; pd && j < N(pd->split) && pd->split[j] != X_NONE; j++) {
        if (j < pd->part) *row0 += hp->v[pd->split[j]];
        if (j == pd->part) *rows = hp->v[pd->split[j]];
        *total += hp->v[pd->split[j]];
    }
}

static qm_status check_and_emit(ctx *c, const arch_def *a, matched *m, const hparams *hp, uint32_t n_layers,
                                uint32_t n_dec)
{
    /* order: globals before the first per-layer rule, layers (encoder then decoder), remaining globals */
    size_t first_pl = a->n_rules;
    for (size_t k = 0; k < a->n_rules; k++) if (a->rules[k].flags & PL) { first_pl = k; break; }
    for (int pass = 0; pass < 4; pass++) {
        long layers = pass == 1 ? (long)n_layers : pass == 2 ? (long)n_dec : 1;
        for (long l = 0; l < layers; l++) {
            for (size_t k = 0; k < a->n_rules; k++) {
                const rule *ru = &a->rules[k];
                bool pl = ru->flags & PL, dec = ru->flags & DEC;
                if (pass == 0 && (pl || k > first_pl)) continue;
                if (pass == 1 && (!pl || dec)) continue;
                if (pass == 2 && (!pl || !dec)) continue;
                if (pass == 3 && (pl || k < first_pl)) continue;
                int64_t r = *slot_at(m, k, l);
                char src_name[QC_NAME_MAX * 2], dst[QC_NAME_MAX];
                expand(ru->src, l, src_name, sizeof src_name);
                if (r < 0) {
                    if (ru->flags & OPT) continue;
                    qm_tensor_name(dst, sizeof dst, ru->dst, (unsigned)l);
                    return qm_fail(c->err, QM_ERR_MISSING_TENSOR, c->srcs[0]->path, src_name, QM_NO_OFFSET,
                                   "tensor '%s%s' (container '%s') is missing", (ru->flags & NOPFX) ? "" : a->prefix,
                                   src_name, dst);
                }
                c->used[r] = (ru->flags & IGN) ? 2 : 1;
                if (ru->flags & IGN) { c->plan->n_skipped++; continue; }
                qm_tensor_name(dst, sizeof dst, ru->dst, (unsigned)l);
                uint32_t rank;
                uint64_t dims[QM_MAX_RANK];
                qm_status st = container_shape(c, (uint64_t)r, ru->flags, &rank, dims);
                if (st != QM_OK) return st;
                uint64_t row0 = 0, part = 0, fused = 0;
                uint64_t want[2] = { hp->v[ru->s0], ru->s1 ? hp->v[ru->s1] : 0 };
                if (ru->flags & PART) {   /* the fused source is checked whole, then this part taken */
                    part_rows(a, ru, hp, &row0, &part, &fused);
                    want[0] = fused;
                }
                uint32_t want_rank = ru->s1 ? 2 : 1;
                if (rank != want_rank || dims[0] != want[0] || (want_rank == 2 && dims[1] != want[1])) {
                    const qc_tensor *t = ref_tensor(c, (uint64_t)r);
                    char have_s[96], want_s[96];
                    shape_str(t->rank, t->shape, have_s, sizeof have_s);
                    if (ru->flags & TR) { uint64_t sw[2] = { want[1], want[0] }; shape_str(want_rank, sw, want_s, sizeof want_s); }
                    else shape_str(want_rank, want, want_s, sizeof want_s);
                    return qm_fail(c->err, QM_ERR_SHAPE, ref_file(c, (uint64_t)r), t->name, QM_NO_OFFSET,
                                   "tensor '%s' (container '%s') has shape %s but the model needs %s (%s%s%s%s%s)",
                                   t->name, dst, have_s, want_s, (ru->flags & TR) ? "transposed: " : "",
                                   (ru->flags & PART) ? "the rows of all its parts" : sym_name[ru->s0], ru->s1 ? " x " : "", ru->s1 ? sym_name[ru->s1] : "",
                                   c->config ? ", from the config and the other tensors" : "");
                }
                if ((st = add_out(c, dst, (uint64_t)r, ru->flags)) != QM_OK) return st;
                if (ru->flags & PART) {
                    c->plan->out[c->plan->n_out - 1].row0 = row0;
                    c->plan->out[c->plan->n_out - 1].dims[0] = part;
                }
            }
        }
    }
    return QM_OK;
}

/* The output head is tied when it is absent or holds exactly the embedding's values. */
static qm_status resolve_head(ctx *c, const arch_def *a, matched *m, bool tie_default, bool *tied)
{
    size_t head = a->n_rules, embd = a->n_rules;
    for (size_t k = 0; k < a->n_rules; k++) {
        if (a->rules[k].flags & HEAD) head = k;
        if (a->embd != NO_DST && a->rules[k].dst == a->embd) embd = k;
    }
    *tied = false;
    if (head == a->n_rules) return QM_OK;
    int64_t rh = *slot_at(m, head, 0), re = embd < a->n_rules ? *slot_at(m, embd, 0) : -1;
    if (rh < 0) {
        if (!tie_default)
            return qm_fail(c->err, QM_ERR_MISSING_TENSOR, c->srcs[0]->path, "lm_head.weight", QM_NO_OFFSET,
                           "tensor 'lm_head.weight' is missing and the config says tie_word_embeddings=false");
        *tied = true;
        return QM_OK;
    }
    if (re < 0) return QM_OK;
    const qc_tensor *th = ref_tensor(c, (uint64_t)rh), *te = ref_tensor(c, (uint64_t)re);
    bool same_shape = th->rank == te->rank && th->dtype == te->dtype;
    for (uint32_t i = 0; same_shape && i < th->rank; i++)
        same_shape = th->shape[i] == te->shape[i] && th->stride[i] == te->stride[i];
    if (!same_shape) return QM_OK;
    bool equal;
    if (c->refs[rh].src == c->refs[re].src && th->storage == te->storage && th->offset == te->offset) {
        equal = true;                      /* torch.save stores tied weights once: same storage, same view */
    } else {
        /* compare values; zip storages share one load buffer, so copy the first */
        qc_source *sh = c->srcs[c->refs[rh].src], *se = c->srcs[c->refs[re].src];
        const uint8_t *ph, *pe;
        qm_status st = qc_source_load(sh, th->storage, &ph, c->err);
        if (st != QM_OK) return st;
        uint64_t nb = sh->storages[th->storage].nbytes;
        uint8_t *copy = malloc(nb ? nb : 1);
        if (!copy) return qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
        memcpy(copy, ph, nb);
        st = qc_source_load(se, te->storage, &pe, c->err);
        if (st != QM_OK) { free(copy); return st; }
        equal = qc_tensor_is_contiguous(th) && qc_tensor_is_contiguous(te);
        if (equal) {
            uint64_t bytes = qc_tensor_elements(th) * qc_dtype_size(th->dtype);
            uint64_t es = qc_dtype_size(th->dtype);
            equal = !memcmp(copy + th->offset * es, pe + te->offset * es, bytes);
        }
        free(copy);
    }
    if (equal) {
        *tied = true;
        *slot_at(m, head, 0) = -1;
        c->used[rh] = 2;
        c->plan->n_skipped++;
    }
    return QM_OK;
}

static qm_status unexpected(ctx *c)
{
    for (uint64_t r = 0; r < c->n_refs; r++)
        if (!c->used[r])
            return qm_fail(c->err, QM_ERR_UNEXPECTED_TENSOR, ref_file(c, r), c->refs[r].name, QM_NO_OFFSET,
                           "tensor '%s' is not part of a %s model", c->refs[r].name, c->plan->arch);
    return QM_OK;
}

static qm_status layer_count(ctx *c, const char *const *keys, long seen_max, uint32_t *n)
{
    uint64_t v;
    bool found;
    qm_status st = cfg_u64(c, keys, &v, &found);
    if (st != QM_OK) return st;
    if (!found) { *n = (uint32_t)(seen_max + 1); return QM_OK; }
    if ((long)v <= seen_max) {
        *n = (uint32_t)v;                  /* tensors of layer ≥ v stay unused: reported as unexpected */
        return QM_OK;
    }
    if (v > MAX_LAYERS)
        return qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name, keys[0], QM_NO_OFFSET, "%s = %llu is above %d",
                       keys[0], (unsigned long long)v, MAX_LAYERS);
    *n = (uint32_t)v;                      /* missing layers are reported by check_and_emit */
    return QM_OK;
}

static qm_status need_heads(ctx *c, const char *const *keys, uint64_t dim, uint32_t *heads)
{
    uint64_t v;
    bool found;
    qm_status st = cfg_u64(c, keys, &v, &found);
    if (st != QM_OK) return st;
    if (!found)
        return qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name ? c->config_name : c->srcs[0]->path, keys[0],
                       QM_NO_OFFSET, "the number of attention heads (\"%s\") is not in the config (give --config)",
                       keys[0]);
    if (v == 0 || (dim && dim % v))
        return qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name, keys[0], QM_NO_OFFSET,
                       "%s = %llu does not divide the hidden size %llu", keys[0], (unsigned long long)v,
                       (unsigned long long)dim);
    *heads = (uint32_t)v;
    return QM_OK;
}

/* Take a config value into a shape symbol (known) when present. */
static qm_status sym_from_cfg(ctx *c, hparams *hp, sym s, const char *const *keys)
{
    bool found;
    uint64_t v;
    qm_status st = cfg_u64(c, keys, &v, &found);
    if (st == QM_OK && found) { hp->v[s] = v; hp->known[s] = true; }
    return st;
}

#define TRY(x) do { qm_status st_ = (x); if (st_ != QM_OK) return st_; } while (0)

static qm_status plan_gpt(ctx *c, const arch_def *a, bool neo)
{
    matched m = { 0 };
    qm_status st = match_all(c, a, &m);
    hparams hp = { 0 };
    if (st != QM_OK) goto out;
    if ((st = sym_from_cfg(c, &hp, X_V, KEYS("vocab_size"))) != QM_OK) goto out;
    if ((st = sym_from_cfg(c, &hp, X_CTX, neo ? KEYS("max_position_embeddings") : KEYS("n_positions", "n_ctx")))) goto out;
    if ((st = sym_from_cfg(c, &hp, X_D, neo ? KEYS("hidden_size") : KEYS("n_embd", "hidden_size")))) goto out;
    if ((st = sym_from_cfg(c, &hp, X_FF, neo ? KEYS("intermediate_size") : KEYS("n_inner")))) goto out;
    infer(c, a, &m, &hp, QM_TENSOR_TOK_EMBD, X_V, 0);
    infer(c, a, &m, &hp, QM_TENSOR_TOK_EMBD, X_D, 1);
    infer(c, a, &m, &hp, QM_TENSOR_POS_EMBD, X_CTX, 0);
    if (!hp.known[X_FF] && hp.known[X_D] && c->config) { hp.v[X_FF] = 4 * hp.v[X_D]; hp.known[X_FF] = true; }
    infer(c, a, &m, &hp, QM_TENSOR_BLK_FFN_UP, X_FF, 0);
    hp.v[X_3D] = 3 * hp.v[X_D];
    uint32_t n_layers;
    if ((st = layer_count(c, neo ? KEYS("num_layers") : KEYS("n_layer", "num_hidden_layers"), m.max_layer[0], &n_layers))) goto out;
    uint32_t heads;
    if ((st = need_heads(c, neo ? KEYS("num_heads") : KEYS("n_head", "num_attention_heads"), hp.v[X_D], &heads))) goto out;
    bool tied;
    if ((st = resolve_head(c, a, &m, cfg_bool(c, KEYS("tie_word_embeddings"), 1), &tied))) goto out;
    if ((st = check_and_emit(c, a, &m, &hp, n_layers, 0))) goto out;
    if ((st = unexpected(c))) goto out;
    double eps;
    if ((st = cfg_f64(c, KEYS("layer_norm_epsilon", "layer_norm_eps"), 1e-5, &eps))) goto out;
    c->plan->tied_output = tied;
    if ((st = meta_u32(c, QM_HP_VOCAB_SIZE, hp.v[X_V])) || (st = meta_u32(c, QM_HP_CONTEXT_LENGTH, hp.v[X_CTX])) ||
        (st = meta_u32(c, QM_HP_DIM, hp.v[X_D])) || (st = meta_u32(c, QM_HP_N_LAYERS, n_layers)) ||
        (st = meta_u32(c, QM_HP_N_HEADS, heads)) || (st = meta_u32(c, QM_HP_FFN_DIM, hp.v[X_FF])) ||
        (st = meta_f32(c, QM_HP_NORM_EPS, eps)) ||
        (st = meta_str(c, QM_HP_ACTIVATION, cfg_str(c, KEYS("activation_function"), "gelu_new"))) ||
        (st = meta_bool(c, QM_HP_TIED_OUTPUT, tied)))
        goto out;
    if (neo) {
        /* attention_types: [[["global", "local"], 2]] repeats the inner list n times */
        char **kinds = calloc(n_layers ? n_layers : 1, sizeof *kinds);
        uint32_t got = 0;
        if (!kinds) { st = qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory"); goto out; }
        json_t *layers = cfg_get(c, KEYS("attention_layers")), *types = cfg_get(c, KEYS("attention_types"));
        bool bad = false;
        if (json_is_array(layers)) {
            for (size_t i = 0; i < json_array_size(layers) && !bad; i++) {
                const char *k = json_string_value(json_array_get(layers, i));
                if (!k || got >= n_layers) bad = true;
                else kinds[got++] = strdup(k);
            }
        } else if (json_is_array(types)) {
            for (size_t i = 0; i < json_array_size(types) && !bad; i++) {
                json_t *pair = json_array_get(types, i), *pat = json_array_get(pair, 0), *rep = json_array_get(pair, 1);
                if (!json_is_array(pat) || !json_is_integer(rep) || json_integer_value(rep) < 0) { bad = true; break; }
                /* an empty pattern names no layer however often it repeats: skipped, as HF's list product does,
                 * so that a huge count cannot spin; a non-empty one stops at n_layers below */
                if (json_array_size(pat) == 0) continue;
                for (json_int_t r = 0; r < json_integer_value(rep) && !bad; r++)
                    for (size_t j = 0; j < json_array_size(pat) && !bad; j++) {
                        const char *k = json_string_value(json_array_get(pat, j));
                        if (!k || got >= n_layers) bad = true;
                        else kinds[got++] = strdup(k);
                    }
            }
        }
        for (uint32_t i = 0; i < got && !bad; i++)
            if (!kinds[i] || (strcmp(kinds[i], "global") && strcmp(kinds[i], "local"))) bad = true;
        if (bad || got != n_layers) {
            for (uint32_t i = 0; i < got; i++) free(kinds[i]);
            free(kinds);
            st = qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name ? c->config_name : c->srcs[0]->path,
                         "attention_types", QM_NO_OFFSET,
                         "GPT-Neo needs \"attention_types\" (or \"attention_layers\") naming global/local for each "
                         "of its %u layers", n_layers);
            goto out;
        }
        if ((st = meta_strs(c, QM_HP_ATTENTION_LAYERS, kinds, n_layers))) goto out;
        uint64_t win;
        bool found;
        if ((st = cfg_u64(c, KEYS("window_size"), &win, &found))) goto out;
        if ((st = meta_u32(c, QM_HP_WINDOW_SIZE, found ? win : 256))) goto out;
    }
out:
    free(m.slot);
    return st;
}

/* Whether the optional per-layer tensors `ids` are present: in every layer (true) or in none (false); some
 * layers with them and some without is an error naming `what`. */
static qm_status all_or_none(ctx *c, const arch_def *a, matched *m, uint32_t n_layers, const qm_tensor_id *ids,
                             size_t n_ids, const char *what, bool *present)
{
    uint64_t with = 0, without = 0;
    for (size_t k = 0; k < a->n_rules; k++)
        for (size_t j = 0; j < n_ids; j++)
            if (a->rules[k].dst == ids[j])
                for (uint32_t l = 0; l < n_layers; l++) {
                    if (*slot_at(m, k, l) >= 0) with++;
                    else without++;
                }
    *present = with > 0;
    if (with && without)
        return qm_fail(c->err, QM_ERR_MISSING_TENSOR, c->srcs[0]->path, qm_tensor_pattern(ids[0]), QM_NO_OFFSET,
                       "some layers have %s and some do not (%llu present, %llu missing)", what,
                       (unsigned long long)with, (unsigned long long)without);
    return QM_OK;
}

static qm_status plan_llama(ctx *c, const arch_def *a)
{
    matched m = { 0 };
    hparams hp = { 0 };
    qm_status st = match_all(c, a, &m);
    if (st != QM_OK) goto out;
    if ((st = sym_from_cfg(c, &hp, X_V, KEYS("vocab_size"))) || (st = sym_from_cfg(c, &hp, X_D, KEYS("hidden_size"))) ||
        (st = sym_from_cfg(c, &hp, X_FF, KEYS("intermediate_size"))) ||
        (st = sym_from_cfg(c, &hp, X_CTX, KEYS("max_position_embeddings"))))
        goto out;
    infer(c, a, &m, &hp, QM_TENSOR_TOK_EMBD, X_V, 0);
    infer(c, a, &m, &hp, QM_TENSOR_TOK_EMBD, X_D, 1);
    infer(c, a, &m, &hp, QM_TENSOR_BLK_FFN_GATE, X_FF, 0);
    uint32_t n_layers, heads;
    if ((st = layer_count(c, KEYS("num_hidden_layers"), m.max_layer[0], &n_layers))) goto out;
    if ((st = need_heads(c, KEYS("num_attention_heads"), 0, &heads))) goto out;
    uint64_t head_dim, kv;
    bool found;
    if ((st = cfg_u64(c, KEYS("head_dim"), &head_dim, &found))) goto out;
    if (!found) {
        if (hp.v[X_D] % heads) {
            st = qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name, "num_attention_heads", QM_NO_OFFSET,
                         "num_attention_heads = %u does not divide hidden_size %llu", heads,
                         (unsigned long long)hp.v[X_D]);
            goto out;
        }
        head_dim = hp.v[X_D] / heads;
    }
    if ((st = cfg_u64(c, KEYS("num_key_value_heads"), &kv, &found))) goto out;
    if (!found) kv = heads;
    if (kv == 0 || heads % kv) {
        st = qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name, "num_key_value_heads", QM_NO_OFFSET,
                     "num_key_value_heads = %llu must divide num_attention_heads = %u", (unsigned long long)kv, heads);
        goto out;
    }
    hp.v[X_Q] = heads * head_dim;
    hp.v[X_KV] = kv * head_dim;
    const char *variant = cfg_str(c, KEYS("model_type"), "llama");
    if (cfg_get(c, KEYS("rope_scaling"))) {
        st = qm_fail(c->err, QM_ERR_UNSUPPORTED, c->config_name, "rope_scaling", QM_NO_OFFSET,
                     "rope_scaling is not supported (plain RoPE only)");
        goto out;
    }
    double rotary_part;
    if ((st = cfg_f64(c, KEYS("partial_rotary_factor"), 1.0, &rotary_part))) goto out;
    if (rotary_part != 1.0) {
        st = qm_fail(c->err, QM_ERR_UNSUPPORTED, c->config_name, "partial_rotary_factor", QM_NO_OFFSET,
                     "partial_rotary_factor = %g is not supported (RoPE over the whole head only)", rotary_part);
        goto out;
    }
    bool tied;
    /* HF's Gemma2Config ties by default, LlamaConfig does not */
    bool tie_default = cfg_bool(c, KEYS("tie_word_embeddings"), a->arch == QM_ARCH_GEMMA2);
    if ((st = resolve_head(c, a, &m, tie_default, &tied))) goto out;
    /* q/k/v biases (Qwen2) and per-head q/k norms (Qwen3): each all layers or none */
    static const qm_tensor_id biases[] = { QM_TENSOR_BLK_ATTN_Q_B, QM_TENSOR_BLK_ATTN_K_B, QM_TENSOR_BLK_ATTN_V_B };
    static const qm_tensor_id qk_norms[] = { QM_TENSOR_BLK_ATTN_Q_NORM, QM_TENSOR_BLK_ATTN_K_NORM };
    bool with_bias, with_qk_norm;
    if ((st = all_or_none(c, a, &m, n_layers, biases, N(biases), "q/k/v biases", &with_bias)) ||
        (st = all_or_none(c, a, &m, n_layers, qk_norms, N(qk_norms), "q_norm/k_norm", &with_qk_norm)))
        goto out;
    hp.v[X_HD] = head_dim;
    hp.known[X_HD] = true;
    if (!hp.known[X_CTX]) hp.v[X_CTX] = 2048;
    if ((st = check_and_emit(c, a, &m, &hp, n_layers, 0)) || (st = unexpected(c))) goto out;
    double eps, theta;
    uint64_t window = 0;
    if ((st = cfg_f64(c, KEYS("rms_norm_eps"), 1e-6, &eps)) || (st = cfg_f64(c, KEYS("rope_theta"), 10000.0, &theta)))
        goto out;
    if (cfg_bool(c, KEYS("use_sliding_window"), 1) && (st = cfg_u64(c, KEYS("sliding_window"), &window, &found))) goto out;
    c->plan->tied_output = tied;
    if ((st = meta_str(c, QM_HP_VARIANT, variant)) || (st = meta_u32(c, QM_HP_VOCAB_SIZE, hp.v[X_V])) ||
        (st = meta_u32(c, QM_HP_CONTEXT_LENGTH, hp.v[X_CTX])) || (st = meta_u32(c, QM_HP_DIM, hp.v[X_D])) ||
        (st = meta_u32(c, QM_HP_N_LAYERS, n_layers)) || (st = meta_u32(c, QM_HP_N_HEADS, heads)) ||
        (st = meta_u32(c, QM_HP_N_KV_HEADS, kv)) || (st = meta_u32(c, QM_HP_HEAD_DIM, head_dim)) ||
        (st = meta_u32(c, QM_HP_FFN_DIM, hp.v[X_FF])) || (st = meta_f32(c, QM_HP_NORM_EPS, eps)) ||
        (st = meta_f32(c, QM_HP_ROPE_THETA, theta)) || (st = meta_str(c, QM_HP_ROPE_STYLE, "half")) ||
        (st = meta_u32(c, QM_HP_SLIDING_WINDOW, window)) || (st = meta_bool(c, QM_HP_QKV_BIAS, with_bias)) ||
        (st = meta_bool(c, QM_HP_QK_NORM, with_qk_norm)) ||
        (st = meta_str(c, QM_HP_ACTIVATION, cfg_str(c, KEYS("hidden_activation", "hidden_act"), "silu"))) ||
        (st = meta_bool(c, QM_HP_TIED_OUTPUT, tied)))
        goto out;
out:
    free(m.slot);
    return st;
}

/* Gemma 2: llama's plan, then its scalars (absent soft caps are 0: none) */
static qm_status plan_gemma2(ctx *c, const arch_def *a)
{
    qm_status st = plan_llama(c, a);
    double attn_cap, final_cap, query_scale;
    uint64_t head_dim;
    bool found;
    if (st || (st = cfg_f64(c, KEYS("attn_logit_softcapping"), 0.0, &attn_cap)) ||
        (st = cfg_f64(c, KEYS("final_logit_softcapping"), 0.0, &final_cap)) ||
        (st = cfg_u64(c, KEYS("head_dim"), &head_dim, &found)) ||
        (st = cfg_f64(c, KEYS("query_pre_attn_scalar"), found ? (double)head_dim : 0.0, &query_scale)))
        return st;
    if (!(query_scale > 0.0))
        return qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name, "query_pre_attn_scalar", QM_NO_OFFSET,
                       "query_pre_attn_scalar (or head_dim) must be given and positive");
    if ((st = meta_f32(c, QM_HP_ATTN_SOFTCAP, attn_cap)) || (st = meta_f32(c, QM_HP_FINAL_SOFTCAP, final_cap)) ||
        (st = meta_f32(c, QM_HP_QUERY_SCALE, query_scale)))
        return st;
    return QM_OK;
}

static qm_status plan_seq2seq(ctx *c, const arch_def *a)
{
    matched m = { 0 };
    hparams hp = { 0 };
    qm_status st = match_all(c, a, &m);
    if (st != QM_OK) goto out;
    if ((st = sym_from_cfg(c, &hp, X_D, KEYS("d_model"))) || (st = sym_from_cfg(c, &hp, X_SV, KEYS("src_vocab_size"))) ||
        (st = sym_from_cfg(c, &hp, X_TV, KEYS("tgt_vocab_size"))) ||
        (st = sym_from_cfg(c, &hp, X_FF, KEYS("dim_feedforward"))) || (st = sym_from_cfg(c, &hp, X_ML, KEYS("max_len"))))
        goto out;
    infer(c, a, &m, &hp, QM_TENSOR_ENC_EMBD, X_SV, 0);
    infer(c, a, &m, &hp, QM_TENSOR_ENC_EMBD, X_D, 1);
    infer(c, a, &m, &hp, QM_TENSOR_DEC_EMBD, X_TV, 0);
    infer(c, a, &m, &hp, QM_TENSOR_POS_ENC, X_ML, 0);
    infer(c, a, &m, &hp, QM_TENSOR_ENC_FFN_UP, X_FF, 0);
    hp.v[X_3D] = 3 * hp.v[X_D];
    uint32_t n_enc, n_dec, heads;
    if ((st = layer_count(c, KEYS("num_encoder_layers"), m.max_layer[0], &n_enc)) ||
        (st = layer_count(c, KEYS("num_decoder_layers"), m.max_layer[1], &n_dec)) ||
        (st = need_heads(c, KEYS("nhead", "num_heads"), hp.v[X_D], &heads)))
        goto out;
    if ((st = check_and_emit(c, a, &m, &hp, n_enc, n_dec)) || (st = unexpected(c))) goto out;
    double eps, scale = sqrt((double)hp.v[X_D]);
    if ((st = cfg_f64(c, KEYS("layer_norm_eps"), 1e-5, &eps))) goto out;
    json_t *es = cfg_get(c, KEYS("embed_scale"));
    if (json_is_number(es)) scale = json_number_value(es);
    else if (json_is_false(es)) scale = 1.0;
    const char *act = cfg_str(c, KEYS("activation"), "relu");
    if (strcmp(act, "relu") && strcmp(act, "gelu")) {
        st = qm_fail(c->err, QM_ERR_UNSUPPORTED, c->config_name, "activation", QM_NO_OFFSET,
                     "activation \"%s\": nn.Transformer layers use relu or gelu", act);
        goto out;
    }
    if ((st = meta_u32(c, QM_HP_SRC_VOCAB_SIZE, hp.v[X_SV])) || (st = meta_u32(c, QM_HP_TGT_VOCAB_SIZE, hp.v[X_TV])) ||
        (st = meta_u32(c, QM_HP_DIM, hp.v[X_D])) || (st = meta_u32(c, QM_HP_N_HEADS, heads)) ||
        (st = meta_u32(c, QM_HP_N_ENC_LAYERS, n_enc)) || (st = meta_u32(c, QM_HP_N_DEC_LAYERS, n_dec)) ||
        (st = meta_u32(c, QM_HP_FFN_DIM, hp.v[X_FF])) || (st = meta_u32(c, QM_HP_MAX_LEN, hp.v[X_ML])) ||
        (st = meta_f32(c, QM_HP_NORM_EPS, eps)) || (st = meta_str(c, QM_HP_ACTIVATION, act)) ||
        (st = meta_bool(c, QM_HP_NORM_FIRST, cfg_bool(c, KEYS("norm_first"), 0))) || (st = meta_f32(c, QM_HP_EMBED_SCALE, scale)))
        goto out;
out:
    free(m.slot);
    return st;
}

/* ---- MLP: an nn.Sequential of Linear layers and activations ---- */

/* How integer inputs (uint8 images) become the features the network was trained on:
 * feature = value * input_scale + input_offset (spec/ARCHITECTURES.md §3). Written only when the config
 * sets them, so a container without them means "values as they are". */
static qm_status plan_mlp_input_map(ctx *c)
{
    double scale, offset;
    qm_status st;
    if ((st = cfg_f64(c, KEYS("input_scale"), 1.0, &scale)) || (st = cfg_f64(c, KEYS("input_offset"), 0.0, &offset)))
        return st;
    if (!(fabs(scale) <= FLT_MAX) || scale == 0 || !(fabs(offset) <= FLT_MAX))
        return qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name, "input_scale", QM_NO_OFFSET,
                       "input_scale %g / input_offset %g: the scale must be a finite non-zero float32 and the "
                       "offset a finite float32", scale, offset);
    if (scale == 1.0 && offset == 0.0) return QM_OK;
    if ((st = meta_f32(c, QM_HP_INPUT_SCALE, scale))) return st;
    return meta_f32(c, QM_HP_INPUT_OFFSET, offset);
}

/* HF's "id2label": {"0": "cat", "1": "dog", ...} -> mlp.class_names, one per output in order. Optional;
 * when present it must name every class exactly once. */
static qm_status plan_mlp_class_names(ctx *c, uint64_t n_classes)
{
    json_t *map = cfg_get(c, KEYS("id2label"));
    if (!map) return QM_OK;
    if (!json_is_object(map) || json_object_size(map) != n_classes)
        return qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name, "id2label", QM_NO_OFFSET,
                       "\"id2label\" must map each of the %llu classes (\"0\" .. \"%llu\") to a name; it has %zu "
                       "entries", (unsigned long long)n_classes, (unsigned long long)(n_classes - 1),
                       json_is_object(map) ? json_object_size(map) : (size_t)0);
    char **names = calloc(n_classes, sizeof *names);
    if (!names) return qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    qm_status st = QM_OK;
    for (uint64_t i = 0; i < n_classes && st == QM_OK; i++) {
        char key[24];
        snprintf(key, sizeof key, "%llu", (unsigned long long)i);
        const char *name = json_string_value(json_object_get(map, key));
        if (!name)
            st = qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name, "id2label", QM_NO_OFFSET,
                         "\"id2label\" has no name (a string) for class \"%s\"", key);
        else if (!(names[i] = strdup(name)))
            st = qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    }
    if (st != QM_OK) {
        for (uint64_t i = 0; i < n_classes; i++) free(names[i]);
        free(names);
        return st;
    }
    return meta_strs(c, QM_HP_CLASS_NAMES, names, n_classes);
}

static bool is_activation(const char *t)
{
    static const char *const acts[] = { "relu", "gelu", "tanh", "sigmoid", "silu", NULL };
    for (const char *const *a = acts; *a; a++) if (!strcmp(*a, t)) return true;
    return false;
}

/* Natural order: "2.weight" < "10.weight". */
static int natural_cmp(const char *a, const char *b)
{
    while (*a && *b) {
        if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
            const char *ea = a, *eb = b;
            while (*a == '0') a++;
            while (*b == '0') b++;
            while (isdigit((unsigned char)*ea)) ea++;
            while (isdigit((unsigned char)*eb)) eb++;
            size_t la = (size_t)(ea - a), lb = (size_t)(eb - b);
            if (la != lb) return la < lb ? -1 : 1;
            int d = strncmp(a, b, la);
            if (d) return d;
            a = ea; b = eb;
            continue;
        }
        if (*a != *b) return (unsigned char)*a - (unsigned char)*b;
        a++; b++;
    }
    return (unsigned char)*a - (unsigned char)*b;
}

typedef struct mlp_layer { int64_t w, b; char act[16]; } mlp_layer;

/* The linear layers of a "layers" list in the manifest (with their activations), and the output. */
static qm_status mlp_layers_listed(ctx *c, json_t *layers, mlp_layer *L, uint32_t *n, const char **output)
{
    size_t i;
    json_t *e;
    json_array_foreach(layers, i, e) {
        const char *type = json_string_value(json_object_get(e, "type"));
        if (!type) {
            return qm_fail(c->err, QM_ERR_BAD_SOURCE, c->srcs[0]->path, "layers", QM_NO_OFFSET,
                         "layers[%zu] has no \"type\"", i);
        }
        if (!strcmp(type, "linear")) {
            const char *w = json_string_value(json_object_get(e, "weight"));
            const char *b = json_string_value(json_object_get(e, "bias"));
            int64_t rw = w ? find_ref(c, w) : -1, rb = b ? find_ref(c, b) : -1;
            if (rw < 0 || (b && rb < 0)) {
                return qm_fail(c->err, QM_ERR_MISSING_TENSOR, c->srcs[0]->path, w ? w : "layers", QM_NO_OFFSET,
                             "layers[%zu]: tensor '%s' is missing", i, rw < 0 ? (w ? w : "(no weight)") : b);
            }
            L[(*n)++] = (mlp_layer){ rw, rb, "identity" };
        } else if (is_activation(type)) {
            if (!*n || strcmp(L[*n - 1].act, "identity")) {
                return qm_fail(c->err, QM_ERR_UNSUPPORTED, c->srcs[0]->path, "layers", QM_NO_OFFSET,
                             "layers[%zu] (%s) must follow a linear layer directly", i, type);
            }
            snprintf(L[*n - 1].act, sizeof L[*n - 1].act, "%s", type);
        } else if (!strcmp(type, "softmax") || !strcmp(type, "log_softmax")) {
            if (i + 1 != json_array_size(layers)) {
                return qm_fail(c->err, QM_ERR_UNSUPPORTED, c->srcs[0]->path, "layers", QM_NO_OFFSET,
                             "layers[%zu] (%s) is only supported as the last layer", i, type);
            }
            *output = type;
        } else if (strcmp(type, "flatten") && strcmp(type, "dropout") && strcmp(type, "identity")) {
            return qm_fail(c->err, QM_ERR_UNSUPPORTED, c->srcs[0]->path, "layers", QM_NO_OFFSET,
                         "layers[%zu] has type \"%s\"; an MLP has linear, relu, gelu, tanh, sigmoid, silu, "
                         "flatten, dropout, identity, softmax, log_softmax", i, type);
        }
    }
    return QM_OK;
}

/* No layer list: every 2-D "<x>weight" is a Linear, in natural name order; "<x>bias" its bias. */
static qm_status mlp_layers_by_name(ctx *c, mlp_layer *L, uint32_t *n, const char **output)
{
    int64_t *ws = calloc(c->n_refs ? c->n_refs : 1, sizeof *ws);
    if (!ws) return qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    uint32_t nw = 0;
    for (uint64_t r = 0; r < c->n_refs; r++) {
        size_t len = strlen(c->refs[r].name);
        if (ref_tensor(c, r)->rank == 2 && len >= 6 && !strcmp(c->refs[r].name + len - 6, "weight")) ws[nw++] = (int64_t)r;
    }
    for (uint32_t i = 1; i < nw; i++)          /* insertion sort: layer counts are small */
        for (uint32_t j = i; j > 0 && natural_cmp(c->refs[ws[j - 1]].name, c->refs[ws[j]].name) > 0; j--) {
            int64_t x = ws[j]; ws[j] = ws[j - 1]; ws[j - 1] = x;
        }
    json_t *al = cfg_get(c, KEYS("activations"));
    const char *act = cfg_str(c, KEYS("activation"), "relu");
    if (al && (!json_is_array(al) || json_array_size(al) != nw)) {
        free(ws);
        return qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name, "activations", QM_NO_OFFSET,
                     "\"activations\" must list one activation per linear layer (%u)", nw);
    }
    for (uint32_t i = 0; i < nw; i++) {
        char bname[QC_NAME_MAX * 2];
        const char *wn = c->refs[ws[i]].name;
        snprintf(bname, sizeof bname, "%.*sbias", (int)(strlen(wn) - 6), wn);
        const char *a = al ? json_string_value(json_array_get(al, i)) : (i + 1 < nw ? act : "identity");
        if (!a || (!is_activation(a) && strcmp(a, "identity"))) {
            free(ws);
            return qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name, "activation", QM_NO_OFFSET,
                         "unknown activation \"%s\" (relu, gelu, tanh, sigmoid, silu, identity)", a ? a : "(not a string)");
        }
        L[*n] = (mlp_layer){ ws[i], find_ref(c, bname), "" };
        snprintf(L[*n].act, sizeof L[*n].act, "%s", a);
        (*n)++;
    }
    free(ws);
    *output = cfg_str(c, KEYS("output"), "logits");
    return QM_OK;
}

static qm_status plan_mlp(ctx *c, const arch_def *row)
{
    (void)row;   /* no fixed names: the layers come from the manifest or the tensor names */
    json_t *layers = c->manifest ? json_object_get(c->manifest, "layers") : NULL;
    /* one slot per linear layer: a layer list may name one weight in several layers, so it can hold more
     * linear layers than there are tensors */
    size_t cap = json_is_array(layers) && json_array_size(layers) > c->n_refs ? json_array_size(layers) : c->n_refs;
    mlp_layer *L = calloc(cap ? cap : 1, sizeof *L);
    char **acts = NULL;
    uint32_t n = 0;
    qm_status st = QM_OK;
    const char *output = "logits";
    if (!L) return qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory");
    st = json_is_array(layers) ? mlp_layers_listed(c, layers, L, &n, &output) : mlp_layers_by_name(c, L, &n, &output);
    if (st) goto out;
    if (n == 0) {
        st = qm_fail(c->err, QM_ERR_MISSING_TENSOR, c->srcs[0]->path, NULL, QM_NO_OFFSET,
                     "an MLP needs at least one linear layer (a 2-D '<name>.weight' tensor)");
        goto out;
    }
    acts = calloc(n, sizeof *acts);
    if (!acts) { st = qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory"); goto out; }
    uint64_t in_dim = 0, prev_out = 0;
    for (uint32_t i = 0; i < n; i++) {
        const qc_tensor *w = ref_tensor(c, (uint64_t)L[i].w);
        char name[QC_NAME_MAX];
        if (w->rank != 2) {
            st = qm_fail(c->err, QM_ERR_SHAPE, ref_file(c, (uint64_t)L[i].w), w->name, QM_NO_OFFSET,
                         "tensor '%s' (linear layer %u) must be 2-D [out, in]", w->name, i);
            goto out;
        }
        if (i == 0) in_dim = w->shape[1];
        else if (w->shape[1] != prev_out) {
            char have[64];
            shape_str(2, w->shape, have, sizeof have);
            st = qm_fail(c->err, QM_ERR_SHAPE, ref_file(c, (uint64_t)L[i].w), w->name, QM_NO_OFFSET,
                         "tensor '%s' has shape %s but the previous layer outputs %llu features: needs [%llu, %llu]",
                         w->name, have, (unsigned long long)prev_out, (unsigned long long)w->shape[0],
                         (unsigned long long)prev_out);
            goto out;
        }
        prev_out = w->shape[0];
        qm_tensor_name(name, sizeof name, QM_TENSOR_MLP_WEIGHT, i);
        c->used[L[i].w] = 1;
        if ((st = add_out(c, name, (uint64_t)L[i].w, 0))) goto out;
        if (L[i].b >= 0) {
            const qc_tensor *b = ref_tensor(c, (uint64_t)L[i].b);
            if (b->rank != 1 || b->shape[0] != w->shape[0]) {
                char have[64];
                shape_str(b->rank, b->shape, have, sizeof have);
                st = qm_fail(c->err, QM_ERR_SHAPE, ref_file(c, (uint64_t)L[i].b), b->name, QM_NO_OFFSET,
                             "tensor '%s' has shape %s but its layer has %llu outputs: needs [%llu]", b->name, have,
                             (unsigned long long)w->shape[0], (unsigned long long)w->shape[0]);
                goto out;
            }
            qm_tensor_name(name, sizeof name, QM_TENSOR_MLP_BIAS, i);
            c->used[L[i].b] = 1;
            if ((st = add_out(c, name, (uint64_t)L[i].b, 0))) goto out;
        }
        if (!(acts[i] = strdup(L[i].act))) { st = qm_fail(c->err, QM_ERR_NOMEM, NULL, NULL, QM_NO_OFFSET, "out of memory"); goto out; }
    }
    if ((st = unexpected(c))) goto out;
    if (strcmp(output, "logits") && strcmp(output, "softmax") && strcmp(output, "log_softmax")) {
        st = qm_fail(c->err, QM_ERR_BAD_CONFIG, c->config_name, "output", QM_NO_OFFSET,
                     "\"output\" must be logits, softmax or log_softmax");
        goto out;
    }
    if ((st = meta_u32(c, QM_HP_N_LAYERS, n)) || (st = meta_u32(c, QM_HP_INPUT_DIM, in_dim)) ||
        (st = meta_u32(c, QM_HP_OUTPUT_DIM, prev_out)) || (st = meta_str(c, QM_HP_OUTPUT, output)))
        goto out;
    st = meta_strs(c, QM_HP_ACTIVATIONS, acts, n);
    acts = NULL;
    if (st == QM_OK) st = plan_mlp_input_map(c);
    if (st == QM_OK) st = plan_mlp_class_names(c, prev_out);
out:
    if (acts) { for (uint32_t i = 0; i < n; i++) free(acts[i]); free(acts); }
    free(L);
    return st;
}

/* ---- "none": a plain tensor store (ARCHITECTURES.md §1b) ---- */

/* Every source tensor under its own name and shape, no architecture rules, no hyperparameters. Only float
 * tensors: a container holds weights, and a non-float buffer is refused by name. */
static qm_status plan_none(ctx *c, const arch_def *row)
{
    (void)row;
    for (uint64_t r = 0; r < c->n_refs; r++) {
        const char *name = c->refs[r].name;
        size_t n = strlen(name);
        if (n == 0 || n >= sizeof c->plan->out[0].name)
            return qm_fail(c->err, QM_ERR_UNSUPPORTED, ref_file(c, r), NULL, QM_NO_OFFSET,
                           "tensor name of %zu bytes cannot be a container name", n);
        qm_status st = add_out(c, name, r, 0);
        if (st != QM_OK) return st;
        c->used[r] = 1;
    }
    return QM_OK;
}

/* ---- choosing the architecture ---- */

static qm_status plan_gpt2(ctx *c, const arch_def *a) { return plan_gpt(c, a, false); }
static qm_status plan_gpt_neo(ctx *c, const arch_def *a) { return plan_gpt(c, a, true); }

/* Every source layout convert reads, in guessing order (Gemma 2's extra norms and Phi-3's fused qkv_proj
 * before llama's names, which both also have). */
static const arch_def archs[] = {
    { { "none" }, QM_ARCH_NONE, { NULL }, "", NULL, 0, NO_DST, NULL, 0, plan_none },
    { { "mlp" }, QM_ARCH_MLP, { NULL }, "", NULL, 0, NO_DST, NULL, 0, plan_mlp },
    { { "gpt2" }, QM_ARCH_GPT2, { "attn.c_attn." }, "transformer.", gpt2_rules, N(gpt2_rules), QM_TENSOR_TOK_EMBD,
      NULL, 0, plan_gpt2 },
    { { "gpt_neo", "gpt-neo" }, QM_ARCH_GPT_NEO, { "attn.attention.q_proj." }, "transformer.", gpt_neo_rules,
      N(gpt_neo_rules), QM_TENSOR_TOK_EMBD, NULL, 0, plan_gpt_neo },
    { { "gemma2" }, QM_ARCH_GEMMA2, { "pre_feedforward_layernorm." }, "model.", gemma2_rules, N(gemma2_rules),
      QM_TENSOR_TOK_EMBD, NULL, 0, plan_gemma2 },
    { { "phi3" }, QM_ARCH_LLAMA, { "self_attn.qkv_proj." }, "model.", phi3_rules, N(phi3_rules), QM_TENSOR_TOK_EMBD,
      phi3_parts, N(phi3_parts), plan_llama },
    { { "llama", "mistral", "qwen2", "qwen3", "tinyllama" }, QM_ARCH_LLAMA, { "self_attn.q_proj.", "embed_tokens." },
      "model.", llama_rules, N(llama_rules), QM_TENSOR_TOK_EMBD, NULL, 0, plan_llama },
    { { "seq2seq", "transformer" }, QM_ARCH_SEQ2SEQ, { "transformer.encoder.layers." }, "", seq2seq_rules,
      N(seq2seq_rules), NO_DST, NULL, 0, plan_seq2seq },
};

/* The row a config's model_type (or --arch, or the manifest) names; NULL if none. */
static const arch_def *arch_named(const char *name)
{
    for (size_t i = 0; i < N(archs); i++)
        for (size_t k = 0; k < N(archs[i].names) && archs[i].names[k]; k++)
            if (!strcmp(archs[i].names[k], name)) return &archs[i];
    return NULL;
}

/* The first row (in table order) one of whose markers some source tensor name contains; NULL if none. */
static const arch_def *arch_guessed(const ctx *c)
{
    for (size_t i = 0; i < N(archs); i++)
        for (size_t k = 0; k < N(archs[i].markers) && archs[i].markers[k]; k++)
            for (uint64_t r = 0; r < c->n_refs; r++)
                if (strstr(c->refs[r].name, archs[i].markers[k])) return &archs[i];
    return NULL;
}

qm_status qc_plan_build(const char *arch, qc_source *const *srcs, uint32_t n_srcs, const char *config_json,
                        const char *config_name, const char *manifest_json, qc_plan *plan, qm_error *err)
{
    memset(plan, 0, sizeof *plan);
    ctx c = { .srcs = srcs, .n_srcs = n_srcs, .config_name = config_name, .plan = plan, .err = err };
    qm_status st = QM_OK;
    json_error_t je;
    if (config_json && !(c.config = json_loads(config_json, JSON_REJECT_DUPLICATES, &je))) {
        st = qm_fail(err, QM_ERR_BAD_CONFIG, config_name, NULL, (uint64_t)je.position, "not valid JSON: %s", je.text);
        goto out;
    }
    if (c.config && !json_is_object(c.config)) {
        st = qm_fail(err, QM_ERR_BAD_CONFIG, config_name, NULL, QM_NO_OFFSET, "the config must be a JSON object");
        goto out;
    }
    if (manifest_json) c.manifest = json_loads(manifest_json, 0, NULL);
    if ((st = index_sources(&c))) goto out;
    const char *how = "--arch";
    if (!arch && c.manifest) { arch = json_string_value(json_object_get(c.manifest, "arch")); how = "the manifest's \"arch\""; }
    if (!arch && c.config) { arch = json_string_value(json_object_get(c.config, "model_type")); how = "the config's \"model_type\""; }
    const arch_def *row = NULL;
    if (!arch) { row = arch_guessed(&c); how = "the tensor names"; }
    if (!arch && !row && c.manifest && json_is_array(json_object_get(c.manifest, "layers"))) row = arch_named("mlp");
    if (!arch && !row) {
        st = qm_fail(err, QM_ERR_UNKNOWN_ARCH, srcs[0]->path, NULL, QM_NO_OFFSET,
                     "cannot tell the architecture from the config or the tensor names; give --arch (%s; "
                     "--arch none stores the tensors as they are)",
                     qc_arch_list());
        goto out;
    }
    if (arch) row = arch_named(arch);
    if (!row) {
        st = qm_fail(err, QM_ERR_UNKNOWN_ARCH, srcs[0]->path, NULL, QM_NO_OFFSET,
                     "architecture \"%s\" (from %s) is not one qmap knows: %s (--arch none stores the tensors "
                     "as they are)", arch, how, qc_arch_list());
        goto out;
    }
    plan->arch = qm_arch_name(row->arch);
    st = row->plan(&c, row);
out:
    json_decref(c.config);
    json_decref(c.manifest);
    free(c.refs);
    free(c.used);
    if (st != QM_OK) qc_plan_free(plan);
    return st;
}

qm_status qc_plan_write_meta(const qc_plan *plan, qm_writer *w, qm_error *err)
{
    qm_status st = qm_writer_meta_string(w, QM_KEY_ARCHITECTURE, plan->arch, strlen(plan->arch), err);
    for (uint64_t i = 0; i < plan->n_meta && st == QM_OK; i++) {
        const qc_meta_item *m = &plan->meta[i];
        switch (m->type) {
        case QM_META_U32: st = qm_writer_meta_u32(w, m->key, m->u32, err); break;
        case QM_META_F32: st = qm_writer_meta_f32(w, m->key, m->f32, err); break;
        case QM_META_BOOL: st = qm_writer_meta_bool(w, m->key, m->b, err); break;
        case QM_META_STRING: st = qm_writer_meta_string(w, m->key, m->str, strlen(m->str), err); break;
        default:
            st = qm_writer_meta_string_array(w, m->key, (const char *const *)m->strs, NULL, m->n_strs, err);
        }
    }
    return st;
}

void qc_plan_free(qc_plan *plan)
{
    if (!plan) return;
    for (uint64_t i = 0; i < plan->n_meta; i++) {
        free(plan->meta[i].str);
        for (uint64_t j = 0; j < plan->meta[i].n_strs; j++) free(plan->meta[i].strs[j]);
        free(plan->meta[i].strs);
    }
    free(plan->meta);
    free(plan->out);
    memset(plan, 0, sizeof *plan);
}
