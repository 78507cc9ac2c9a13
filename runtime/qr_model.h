/* qr_model.h — what every model family shares: the loader helpers that check a container against a
 * family's needs, the family table, and the run state of a decoder language model.
 *
 * A family (runtime/qr_arch_<name>.c) holds its hyperparameters, its weights as views into the mapping and
 * its forward pass, and nothing else: no byte layout (qr_matmul and qr_dtype read the dtypes), no kernel
 * code, no allocation in the forward pass. Adding a family means one file and one row in qr_families.
 *
 * Ownership: qr_lm_load allocates the family's weight struct once, at open; its views point into the
 * qm_file, which must outlive it. A qr_lm_state (every activation buffer, the KV cache, the matmul work
 * buffer) is allocated once by qr_lm_state_new from the hyperparameters and the session's sizes; a
 * forward pass only writes into it. Errors come back as qm_status with err naming the file and the key or
 * tensor (QM_ERR_NOT_FOUND / QM_ERR_BAD_CONFIG for a key, QM_ERR_MISSING_TENSOR / QM_ERR_SHAPE /
 * QM_ERR_TYPE_MISMATCH for a tensor).
 */
#ifndef QR_MODEL_H
#define QR_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"
#include "qm_names.h"
#include "qm_reader.h"
#include "qr_attn.h"
#include "qr_kv.h"
#include "qr_matmul.h"
#include "qr_shard.h"

/* ---- loader helpers -------------------------------------------------------------------------------- */

/* Reads one container for one architecture and remembers every matrix it hands out (so a session can size
 * the matmul work buffer for the largest, and a benchmark can count the bytes a token reads). */
typedef struct qr_loader {
    const qm_file *f;
    const char *path;        /* for messages */
    qm_arch arch;            /* keys are "<arch>.<suffix>" */
    qm_error *err;
    qr_matrix *mats;         /* every matrix loaded, in load order (owned by the loader's user) */
    size_t n_mats, cap_mats;
    const qr_shard *shard;   /* tensor parallel: the part a family loads (qr_shard.h); NULL = all of it.
                              * A family that cannot shard refuses an active one. Set after qr_loader_init */
} qr_loader;

void qr_loader_init(qr_loader *ld, const qm_file *f, qm_arch arch, qm_error *err);
void qr_loader_free(qr_loader *ld);

/* Hyperparameters "<arch>.<suffix>". A required key that is absent or of another type is an error naming
 * it; the _opt forms return `def` when the key is absent (another type is still an error). */
qm_status qr_load_u32(qr_loader *ld, qm_hparam hp, uint32_t *out);
qm_status qr_load_u32_opt(qr_loader *ld, qm_hparam hp, uint32_t def, uint32_t *out);
qm_status qr_load_f32(qr_loader *ld, qm_hparam hp, float *out);
qm_status qr_load_f32_opt(qr_loader *ld, qm_hparam hp, float def, float *out);
qm_status qr_load_bool_opt(qr_loader *ld, qm_hparam hp, bool def, bool *out);
/* A STRING value (not NUL-terminated; points into the mapping). */
qm_status qr_load_string(qr_loader *ld, qm_hparam hp, const char **s, uint64_t *len);
qm_status qr_load_string_opt(qr_loader *ld, qm_hparam hp, const char *def, const char **s, uint64_t *len);

/* An ARRAY of STRING with exactly `count` elements (read them with qm_meta_array_string). */
qm_status qr_load_string_array(qr_loader *ld, qm_hparam hp, uint64_t count, const qm_meta **out);
/* The same when the key may be absent (*out = NULL then); `per` names what each element is for messages. */
qm_status qr_load_string_array_opt(qr_loader *ld, qm_hparam hp, uint64_t count, const char *per, const qm_meta **out);

/* A weight matrix of exactly rows x cols (F32, F16 or Q8_ROW), viewed in place. Absent, another shape or
 * another dtype: an error naming the tensor, its shape or dtype and what the model needs. */
qm_status qr_load_matrix(qr_loader *ld, qm_tensor_id id, unsigned layer, size_t rows, size_t cols, qr_matrix *out);
/* As qr_load_matrix, or the same matrix in column panels (spec/ARCHITECTURES.md §6): a tensor of shape
 * [P, rows, cols / P], panel p holding columns [p·cols/P, (p+1)·cols/P). *out views all P·rows rows of
 * cols / P (panel p = rows p·rows .. (p+1)·rows, qr_matrix_rows) and *panels = P (1 for a [rows, cols]). */
qm_status qr_load_matrix_panels(qr_loader *ld, qm_tensor_id id, unsigned layer, size_t rows, size_t cols,
                                qr_matrix *out, size_t *panels);
/* As qr_load_matrix, but absent is allowed: *present says which. */
qm_status qr_load_matrix_opt(qr_loader *ld, qm_tensor_id id, unsigned layer, size_t rows, size_t cols,
                             qr_matrix *out, bool *present);
/* A vector (norm weight, bias) of n F32 values: rank 1, [n]. */
qm_status qr_load_vector(qr_loader *ld, qm_tensor_id id, unsigned layer, size_t n, const float **out);
/* As qr_load_vector; absent gives *out = NULL. */
qm_status qr_load_vector_opt(qr_loader *ld, qm_tensor_id id, unsigned layer, size_t n, const float **out);

/* A hyperparameter that must be >= 1 and <= max; error naming the key otherwise. */
qm_status qr_check_range(qr_loader *ld, qm_hparam hp, uint64_t v, uint64_t lo, uint64_t hi);

/* ---- decoder language models ---------------------------------------------------------------------- */

/* The sizes every decoder LM's run state is made of. */
typedef struct qr_lm_hparams {
    uint32_t vocab;          /* rows of tok_embd */
    uint32_t ctx;            /* trained context length */
    uint32_t dim;
    uint32_t n_layers;
    uint32_t n_heads, n_kv_heads, head_dim;
    uint32_t ffn_dim;
    const uint32_t *window;  /* [n_layers]: attention window of each layer, 0 = full causal (owned by the weights) */
    bool learned_positions;  /* a position table of ctx rows: no position at or past ctx can be run */
} qr_lm_hparams;

/* ---- the loader pieces every rotary decoder shares (qr_lm_load.c): llama and its descendants ---- */

/* The hyperparameters of a rotary decoder beyond its sizes. */
typedef struct qr_rope_lm_config {
    float norm_eps;          /* RMSNorm epsilon */
    float rope_theta;        /* rotary base (default 10000) */
    uint32_t window;         /* sliding_window, 0 = none; the family says which layers use it */
} qr_rope_lm_config;

/* Read and range-check hp's sizes and *c: vocab, context, dim, layers, heads, kv heads (default: heads),
 * head_dim (required, or dim / heads when absent if !head_dim_required), ffn_dim, sliding window,
 * norm_eps, rope_theta. Errors name the "<arch>.<key>". */
qm_status qr_load_rope_lm_hparams(qr_loader *ld, bool head_dim_required, qr_lm_hparams *hp, qr_rope_lm_config *c);

/* Every layer's window (c->window on each; the family changes the ones it needs) and the rotary inverse
 * frequencies, allocated (free them) and filled; hp->window points at the windows. */
qm_status qr_rope_lm_alloc(qr_loader *ld, qr_lm_hparams *hp, const qr_rope_lm_config *c, uint32_t **window,
                           float **inv_freq);

/* A layer's attention projections: q (H·hd, dim), k, v (KV·hd, dim), o (dim, H·hd) or its column panels
 * (o_panels·dim, H·hd/o_panels), panel p the columns p·H·hd/o_panels.. (qmap quantize --shards). */
typedef struct qr_attn_proj {
    qr_matrix wq, wk, wv, wo;
    size_t o_panels;
} qr_attn_proj;
/* A layer's gated feed-forward: gate, up (ffn_dim, dim); down (dim, ffn_dim), or its column panels. */
typedef struct qr_glu_ffn {
    qr_matrix w_gate, w_up, w_down;
    size_t down_panels;
} qr_glu_ffn;
qm_status qr_load_attn_proj(qr_loader *ld, unsigned layer, const qr_lm_hparams *hp, qr_attn_proj *a);
qm_status qr_load_glu_ffn(qr_loader *ld, unsigned layer, const qr_lm_hparams *hp, qr_glu_ffn *f);
/* The output head: the embedding itself when tied, else output.weight (vocab, dim). */
qm_status qr_load_lm_head(qr_loader *ld, const qr_lm_hparams *hp, bool tied, const qr_matrix *tok_embd,
                          qr_matrix *out);

/* What a product's input rows tolerate in a prompt (n > 1) when the session lets prompts use one int8 term
 * (qr_lm_state_params.one_term_prompts: QMAP_ACT_AUTO). One int8 term costs little on rows out of a norm
 * or out of attention (Q/K/V, the attention output, gate/up), about ten times as much on the FFN's down
 * projection (its gated hidden rows are heavy-tailed) and measurably on the head (its rounding lands in the
 * logits): docs/BENCHMARKS.md, Accuracy, has the per-group KL divergences. */
typedef enum qr_x_kind {
    QR_X_NORMED,  /* a norm's or attention's output rows: one int8 term in a prompt */
    QR_X_FLOAT,   /* the session's act as given (float-X accuracy unless the caller chose otherwise) */
} qr_x_kind;

/* One sequence's part of a forward pass: rows row0 .. row0+n-1 of the pass are its tokens at positions
 * pos0 .. pos0+n-1, their keys and values going into KV slot `seq` (whose cache holds every earlier
 * position of that sequence). */
typedef struct qr_lm_span {
    uint32_t seq;            /* KV slot, < the state's n_seq */
    uint32_t pos0;
    size_t row0, n;          /* n >= 1 */
} qr_lm_span;

/* The rows of one forward pass: the tokens of one or more sequences (a session's chunk is one span; a
 * batch has a span per sequence it advances), each sequence's rows contiguous, spans in row order
 * covering rows 0 .. n-1, at most one span per slot. Every weight product runs once over all n rows;
 * positions, the cache and attention go span by span. */
typedef struct qr_lm_rows {
    const int32_t *ids;      /* [n] the token of every row */
    size_t n;                /* 1 .. the state's n_batch */
    const qr_lm_span *spans; /* [n_spans] */
    size_t n_spans;          /* 1 .. the state's n_seq */
    bool all_logits;         /* logits of every row (s->logits row i = row i; needs logits_all), else of each
                              * span's last row (s->logits row k = span k) */
} qr_lm_rows;

/* Buffers of one session or batch, sized once. Rows are tokens of one forward pass (<= n_batch). */
typedef struct qr_lm_state {
    uint32_t n_batch;        /* most tokens per forward call */
    uint32_t n_ctx;          /* positions each slot's cache holds */
    uint32_t n_seq;          /* KV slots (sequences) */
    qr_pool *pool;           /* the session's threads (owned), started once */
    qr_matmul_opts mm;       /* the pool, activation mode and kernel variant (chosen once) of every product */
    qr_act normed_prompt_act; /* act of a QR_X_NORMED product (any row count): QR_ACT_INT8 with
                              * one_term_prompts, else mm.act */
    uint64_t int8_madds;     /* multiply-adds the products ran on int8 (each term counted) since creation */
    uint64_t float_madds;    /* and on float (F32/F16 weights, Q8_ROW widened) */
    uint64_t kv_bytes;       /* bytes of the KV cache attention read since creation (qr_lm_count_attention) */
    float *x;                /* [n_batch][dim] residual stream */
    float *xb;               /* [n_batch][dim] normed input of a sub-layer / scratch row */
    float *qkv;              /* [n_batch][qkv_stride]: q (n_heads*head_dim), k, v (n_kv_heads*head_dim each) */
    size_t qkv_stride;
    float *att;              /* [n_batch][n_heads*head_dim] attention output */
    float *hb;               /* [n_batch][ffn_dim] feed-forward hidden */
    float *hb2;              /* [n_batch][max(ffn_dim, dim)] the second hidden, or a panel's product */
    float *logits;           /* [n_logits_cap][vocab]: the rows qr_lm_rows.all_logits says */
    size_t n_logits_cap;
    void *work;              /* matmul scratch, work_size bytes */
    size_t work_size;
    float *attn_scratch;
    qr_kv_layer *kv;         /* [n_seq][n_layers]: qr_lm_kv */
    uint32_t n_layers;
} qr_lm_state;

/* Layer l of slot seq's cache. */
static inline qr_kv_layer *qr_lm_kv(const qr_lm_state *s, uint32_t seq, uint32_t l)
{
    return &s->kv[(size_t)seq * s->n_layers + l];
}

typedef struct qr_lm_state_params {
    uint32_t n_ctx, n_batch;
    uint32_t n_seq;          /* KV slots; 0 counts as 1 */
    bool row_invariant;      /* a row's logits do not depend on the pass's other rows (qr_matmul_opts) */
    int threads;             /* the pool's size (<= 0: one per CPU this process may use) */
    qr_act act;
    bool one_term_prompts;   /* QR_X_NORMED products in one int8 term, in a prompt and a decode step alike
                              * (so a row's bits do not depend on the row count); the API sets it for
                              * QMAP_ACT_AUTO only */
    qr_kv_type kv_type;
    bool logits_all;
} qr_lm_state_params;

/* Allocate every buffer of a session (or a batch: n_seq slots) for hyperparameters hp; `mats` are the
 * model's matrices (the work buffer is sized for the largest product). QM_ERR_NOMEM / QM_ERR_OVERFLOW if
 * it does not fit. */
qm_status qr_lm_state_new(const qr_lm_hparams *hp, const qr_matrix *mats, size_t n_mats,
                          const qr_lm_state_params *p, qr_lm_state **out, qm_error *err);
void qr_lm_state_free(qr_lm_state *s);
/* Count in s->kv_bytes what the causal attention of a forward pass over these rows read from every
 * layer's cache (qr_kv_attended_bytes, span by span); the caller calls it once per forward call. */
void qr_lm_count_attention(qr_lm_state *s, const qr_lm_rows *r);

/* A decoder-LM family. */
typedef struct qr_lm_family {
    qm_arch arch;
    /* Check the container's keys and tensors; allocate *weights and fill *hp (whose window array belongs
     * to *weights). */
    qm_status (*load)(qr_loader *ld, void **weights, qr_lm_hparams *hp);
    void (*free)(void *weights);
    /* Run the rows r describes (their logits into s->logits as r->all_logits says). Allocates nothing. */
    qm_status (*forward)(const void *weights, qr_lm_state *s, const qr_lm_rows *r);
    /* Whether the output head is the token embedding (for the bytes-per-token count). */
    bool (*tied_output)(const void *weights);
} qr_lm_family;

/* The family that runs `arch`, or NULL. */
const qr_lm_family *qr_lm_family_for(qm_arch arch);

/* ---- shared blocks of the forward passes -------------------------------------------------------------
 * Written once here, used by every family: they are the "layers" of CTranslate2's split. */

/* x[i] = row ids[i] of the embedding matrix (any dtype), for i < n. */
void qr_embed_rows(const qr_matrix *embd, const int32_t *ids, size_t n, float *x, size_t ldx);
/* x[i] += row (pos0 + i) of a position table. */
void qr_add_position_rows(const qr_matrix *pos, uint32_t pos0, size_t n, float *x, size_t ldx, float *tmp);
/* Every row's position-table row added, each span from its own pos0 (s->xb is the scratch row: x must
 * not be s->xb). */
void qr_lm_add_positions(qr_lm_state *s, const qr_lm_rows *r, const qr_matrix *pos, float *x, size_t ldx);
/* Rotary positions (qr_rows_rope_half) of every row's first n_heads heads, each span from its own pos0. */
void qr_lm_rope(qr_lm_state *s, const qr_lm_rows *r, float *x, size_t ldx, size_t n_heads, size_t head_dim,
                const float *inv_freq);
/* Layer l's attention for every span: its K and V rows into its slot's cache, then its query rows
 * against that cache (qr_attn_causal), out row i of the pass at out + i·ldo. */
void qr_lm_attend(qr_lm_state *s, const qr_lm_rows *r, uint32_t l, const qr_attn_shape *shape, const float *q,
                  const float *k, const float *v, size_t ldqkv, float *out, size_t ldo);
/* Rows whose logits the pass computes (qr_lm_rows.all_logits), and the pass's row of logits row i. */
size_t qr_lm_logit_count(const qr_lm_rows *r);
size_t qr_lm_logit_row(const qr_lm_rows *r, size_t i);
/* y = x·Wᵀ (+ b) for n rows, with the session's threads, work buffer and the activation mode for rows of
 * this kind (qr_x_kind); the multiply-adds are added to the session's counters. */
qm_status qr_linear(qr_lm_state *s, qr_x_kind kind, const qr_matrix *w, const float *b, size_t n, const float *x,
                    size_t ldx, float *y, size_t ldy);
/* qr_linear of a matrix loaded by qr_load_matrix_panels: y = Σ_p x[:, panel p's columns]·W[p]ᵀ (+ b), a
 * product per panel (the bias added by the first), the later ones added from `tmp` (n × w->rows / panels
 * floats); y and tmp have ld = w->rows / panels. With one panel, a qr_linear. */
qm_status qr_linear_panels(qr_lm_state *s, qr_x_kind kind, const qr_matrix *w, const float *b, size_t panels,
                           size_t n, const float *x, size_t ldx, float *y, float *tmp);
/* qr_linear_panels of a rank's part of a row-parallel matrix (qr_shard_row_parallel's out, out_panels and
 * part): when the part's columns share their panel with other ranks, X's int8 rows are quantized with the
 * whole panel row's maxima (qr_shard_amax, a collective: every rank makes the same calls). part NULL, or
 * whole panels: qr_linear_panels. */
qm_status qr_linear_part(qr_lm_state *s, qr_x_kind kind, const qr_shard_part *part, const qr_matrix *w,
                         const float *b, size_t panels, size_t n, const float *x, size_t ldx, float *y, float *tmp);
/* y[p] = x·W[p]ᵀ (+ b[p]) for the `count` matrices (<= QR_MATMUL_MAX_PARTS) that read the same rows x, as one
 * product where they can be (qr_matmul_many: q/k/v, gate/up); b may be NULL, or hold NULL entries. */
qm_status qr_linear_many(qr_lm_state *s, qr_x_kind kind, const qr_matrix *const *w, const float *const *b, size_t count, size_t n,
                         const float *x, size_t ldx, float *const *y, size_t ldy);
/* s->logits rows 0 .. n-1 = the head over the final normed rows xb 0 .. n-1 (the family norms the rows
 * qr_lm_logit_row names into them; QR_X_FLOAT: the head's rounding would land in the logits). */
qm_status qr_lm_logits(qr_lm_state *s, const qr_matrix *head, const float *head_bias, size_t n, size_t dim,
                       size_t vocab);
/* As qr_lm_logits with the rank's rows of the head (vocabulary rows qr_shard_begin(vocab, rank, N) ..):
 * its part of every logits row, then the rest from the other ranks (sh->allgather). A plain qr_lm_logits
 * without an active shard. QM_ERR_IO if the transport fails. */
qm_status qr_lm_logits_shard(qr_lm_state *s, const qr_shard *sh, const qr_matrix *head_part, size_t n, size_t dim,
                             size_t vocab);

#endif /* QR_MODEL_H */
