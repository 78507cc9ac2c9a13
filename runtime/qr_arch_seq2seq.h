/* qr_arch_seq2seq.h — the `seq2seq` family (spec/ARCHITECTURES.md §7): torch.nn.Transformer's encoder-decoder,
 * post-norm (nn.Transformer's default) or pre-norm (norm_first), ReLU or GELU, scaled embeddings and a
 * sinusoidal position table.
 *
 * The pieces a translator drives, CTranslate2-style: encode a batch of source sentences once (their tokens
 * packed one after another, no padding: every product runs over all of them, attention within each);
 * compute one sentence's cross-attention keys and values once per layer; then run decoder steps for
 * several hypotheses at a time (the beams of a search, one row each, through the same GEMMs), each with its
 * own self-attention KV cache; reorder those caches when beams continue other beams' prefixes. Teacher
 * forcing (one hypothesis, many positions at once) uses the same decoder call.
 *
 * Ownership: qr_s2s_load allocates a qr_s2s whose weight views point into the qm_file (which must outlive
 * it). qr_s2s_state_new allocates every buffer a translation needs for the sizes it is given — encoder
 * activations, memory, cross K/V, decoder activations, two sets of KV caches, logits, matmul work — so
 * encode, decode and reorder allocate nothing. One state is used by one thread at a time (its products use
 * a pool of `threads` threads); one qr_s2s may serve many states.
 */
#ifndef QR_ARCH_SEQ2SEQ_H
#define QR_ARCH_SEQ2SEQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qr_model.h"
#include "qr_ops.h"

typedef struct qr_s2s_layer {
    qr_matrix attn_qkv, attn_out;    /* [3d, d] (rows q, k, v), [d, d] */
    qr_matrix cross_q, cross_kv;     /* decoder: rows 0..d and d..3d of cross_qkv [3d, d] */
    qr_matrix cross_out;             /* decoder: [d, d] */
    qr_matrix ffn_up, ffn_down;      /* [F, d], [d, F] */
    const float *attn_qkv_b, *attn_out_b, *cross_q_b, *cross_kv_b, *cross_out_b, *ffn_up_b, *ffn_down_b;
    const float *ln1, *ln1_b, *ln2, *ln2_b, *ln3, *ln3_b;   /* ln3: decoder only */
} qr_s2s_layer;

typedef struct qr_s2s {
    uint32_t src_vocab, tgt_vocab, dim, n_heads, head_dim, n_enc, n_dec, ffn_dim, max_len;
    float norm_eps, embed_scale;
    qr_actfn act;
    bool norm_first;
    qr_matrix enc_embd, dec_embd;    /* [SV, d], [TV, d] */
    qr_matrix pos_enc;               /* [max_len, d] */
    qr_s2s_layer *enc, *dec;         /* [n_enc], [n_dec] */
    const float *enc_norm, *enc_norm_b, *dec_norm, *dec_norm_b;
    qr_matrix output;                /* [TV, d] */
    const float *output_b;
} qr_s2s;

/* Check the container (seq2seq.* keys, every tensor's shape and dtype) and view the weights; every matrix
 * is also recorded in the loader (work-buffer sizing). */
qm_status qr_s2s_load(qr_loader *ld, qr_s2s **out);
void qr_s2s_free(qr_s2s *m);

typedef struct qr_s2s_params {
    uint32_t max_src;        /* source tokens of all sentences encoded together (>= 1) */
    uint32_t max_tgt;        /* target positions, BOS included (1 .. max_len) */
    uint32_t max_seqs;       /* hypotheses decoded together (the beam size, >= 1) */
    int threads;             /* the state's thread pool (<= 0: one per CPU) */
    qr_act act;
    qr_kv_type kv_type;
} qr_s2s_params;

typedef struct qr_s2s_state {
    qr_s2s_params p;
    qr_pool *pool;                   /* owned */
    qr_matmul_opts mm;
    void *work;
    size_t work_size;
    float *attn_scratch;
    /* encoder: [max_src] rows */
    float *ex, *exb, *eqkv, *eatt, *eh;
    float *mem;                      /* [max_src][d]: the encoded sentences, packed */
    uint32_t n_mem;                  /* rows of mem in use */
    /* cross-attention keys and values of the current sentence: [n_dec][max_src][2d] (k then v per row) */
    float *ckv;
    uint32_t n_ckv;                  /* source length of the current sentence (0: none set) */
    /* decoder: [dec_rows] rows, dec_rows = max(max_seqs, max_tgt) */
    uint32_t dec_rows;
    float *dx, *dxb, *dqkv, *datt, *dh;
    float *logits;                   /* [dec_rows][tgt_vocab] */
    qr_kv_layer *kv, *kv_alt;        /* [max_seqs][n_dec] each: hypothesis b, layer l at [b * n_dec + l] */
    void *kv_mem;
    float *pos_tmp;                  /* [d] */
} qr_s2s_state;

/* `mats` are the model's matrices (from the loader) for sizing the work buffer. QM_ERR_INVALID_ARGUMENT for
 * sizes out of range, QM_ERR_NOMEM / QM_ERR_OVERFLOW when the buffers do not fit. */
qm_status qr_s2s_state_new(const qr_s2s *m, const qr_matrix *mats, size_t n_mats, const qr_s2s_params *p,
                           qr_s2s_state **out, qm_error *err);
void qr_s2s_state_free(qr_s2s_state *s);

/* Encode n_sent sentences: sentence i is lens[i] >= 1 ids (each < src_vocab, at most max_len), all of them
 * packed in `ids` (sum of lens <= max_src). The result stays in s->mem until the next encode. */
qm_status qr_s2s_encode(const qr_s2s *m, qr_s2s_state *s, const int32_t *ids, const uint32_t *lens, size_t n_sent,
                        qm_error *err);

/* Make sentence `sent` of the last encode the one the decoder attends to: its rows of s->mem
 * (mem_row0 .. mem_row0 + len) through every decoder layer's cross-attention key and value projections. */
qm_status qr_s2s_set_source(const qr_s2s *m, qr_s2s_state *s, uint32_t mem_row0, uint32_t len, qm_error *err);

/* Decoder: n_seqs hypotheses x n_pos positions (one of the two is 1), ids row-major [seq][pos], at
 * positions pos0 .. pos0 + n_pos - 1; hypothesis b reads and extends KV cache set b, which must hold
 * positions 0 .. pos0 - 1. Writes the logits of every row to s->logits (row b * n_pos + i). */
qm_status qr_s2s_decode(const qr_s2s *m, qr_s2s_state *s, const int32_t *ids, size_t n_seqs, size_t n_pos,
                        uint32_t pos0, qm_error *err);

/* Beam reordering: hypothesis b continues hypothesis parent[b] (b < n_seqs): cache set b gets parent[b]'s
 * positions 0 .. n_pos - 1. */
void qr_s2s_reorder(const qr_s2s *m, qr_s2s_state *s, const uint32_t *parent, size_t n_seqs, uint32_t n_pos);

#endif /* QR_ARCH_SEQ2SEQ_H */
