/* qm_names.h — every canonical tensor name and metadata key of spec/ARCHITECTURES.md and
 * spec/TOKENIZER.md, written once. convert/ writes them, quantize/ selects by them, runtime/ reads them:
 * all three spell a name only through this table, so the spellings cannot drift apart (llama.cpp's
 * llama-arch.cpp plays this part there). qm_format.c is FORMAT.md in code; qm_names.c is ARCHITECTURES.md
 * and TOKENIZER.md section 1 in code.
 *
 * Nothing here allocates or keeps state; every function is a pure lookup.
 */
#ifndef QM_NAMES_H
#define QM_NAMES_H

#include <stdbool.h>
#include <stddef.h>

/* ---- architectures (spec/ARCHITECTURES.md §3–§7; "none" is the plain tensor store) ------------------
 * One row per container architecture: its id, its name, and what kind of model it is (the api's
 * qmap_model_kind has the same values). convert/qc_arch.c's archs[] adds the source layouts and HF
 * model_types of each; runtime/qr_model.c's family table its forward pass. */
typedef enum qm_arch_kind { QM_KIND_NONE = 0, QM_KIND_LM = 1, QM_KIND_CLASSIFIER = 2, QM_KIND_SEQ2SEQ = 3 } qm_arch_kind;

#define QM_ARCH_LIST(X) \
    X(NONE, "none", QM_KIND_NONE) \
    X(MLP, "mlp", QM_KIND_CLASSIFIER) \
    X(GPT2, "gpt2", QM_KIND_LM) \
    X(GPT_NEO, "gpt_neo", QM_KIND_LM) \
    X(LLAMA, "llama", QM_KIND_LM) \
    X(GEMMA2, "gemma2", QM_KIND_LM) \
    X(SEQ2SEQ, "seq2seq", QM_KIND_SEQ2SEQ)

typedef enum qm_arch {
#define QM_X(id, name, kind) QM_ARCH_##id,
    QM_ARCH_LIST(QM_X)
#undef QM_X
    QM_ARCH_COUNT
} qm_arch;

/* "llama"; NULL for a value outside the list. */
const char *qm_arch_name(qm_arch a);
/* Every architecture's name, ", "-separated, in the list's order: "none, mlp, gpt2, ..." (for messages). */
const char *qm_arch_list(void);
/* What kind of model `a` is; QM_KIND_NONE for a value outside the list. */
qm_arch_kind qm_arch_kind_of(qm_arch a);
/* The architecture called `name` (len bytes, need not be NUL-terminated); QM_ARCH_COUNT if none is. */
qm_arch qm_arch_from_name(const char *name, size_t len);

/* ---- tensors ---------------------------------------------------------------------------------------
 * Each id has one printf pattern; per-layer patterns hold one %u, the layer index. */
#define QM_TENSOR_LIST(X) \
    /* global tensors */ \
    X(TOK_EMBD,        "tok_embd.weight") \
    X(POS_EMBD,        "pos_embd.weight") \
    X(OUT_NORM,        "out_norm.weight") \
    X(OUT_NORM_B,      "out_norm.bias") \
    X(OUTPUT,          "output.weight") \
    X(OUTPUT_B,        "output.bias") \
    X(ENC_EMBD,        "enc_embd.weight") \
    X(DEC_EMBD,        "dec_embd.weight") \
    X(POS_ENC,         "pos_enc") \
    X(ENC_NORM,        "enc_norm.weight") \
    X(ENC_NORM_B,      "enc_norm.bias") \
    X(DEC_NORM,        "dec_norm.weight") \
    X(DEC_NORM_B,      "dec_norm.bias") \
    /* decoder-LM blocks: gpt2, gpt_neo, llama, gemma2 */ \
    X(BLK_LN1,         "blk.%u.ln1.weight") \
    X(BLK_LN1_B,       "blk.%u.ln1.bias") \
    X(BLK_LN2,         "blk.%u.ln2.weight") \
    X(BLK_LN2_B,       "blk.%u.ln2.bias") \
    X(BLK_ATTN_NORM,   "blk.%u.attn_norm.weight") \
    X(BLK_FFN_NORM,    "blk.%u.ffn_norm.weight") \
    X(BLK_POST_ATTN_NORM, "blk.%u.post_attn_norm.weight") \
    X(BLK_POST_FFN_NORM,  "blk.%u.post_ffn_norm.weight") \
    X(BLK_ATTN_QKV,    "blk.%u.attn_qkv.weight") \
    X(BLK_ATTN_QKV_B,  "blk.%u.attn_qkv.bias") \
    X(BLK_ATTN_Q,      "blk.%u.attn_q.weight") \
    X(BLK_ATTN_Q_B,    "blk.%u.attn_q.bias") \
    X(BLK_ATTN_K,      "blk.%u.attn_k.weight") \
    X(BLK_ATTN_K_B,    "blk.%u.attn_k.bias") \
    X(BLK_ATTN_V,      "blk.%u.attn_v.weight") \
    X(BLK_ATTN_V_B,    "blk.%u.attn_v.bias") \
    X(BLK_ATTN_Q_NORM, "blk.%u.attn_q_norm.weight") \
    X(BLK_ATTN_K_NORM, "blk.%u.attn_k_norm.weight") \
    X(BLK_ATTN_OUT,    "blk.%u.attn_out.weight") \
    X(BLK_ATTN_OUT_B,  "blk.%u.attn_out.bias") \
    X(BLK_ATTN_O,      "blk.%u.attn_o.weight") \
    X(BLK_FFN_GATE,    "blk.%u.ffn_gate.weight") \
    X(BLK_FFN_UP,      "blk.%u.ffn_up.weight") \
    X(BLK_FFN_UP_B,    "blk.%u.ffn_up.bias") \
    X(BLK_FFN_DOWN,    "blk.%u.ffn_down.weight") \
    X(BLK_FFN_DOWN_B,  "blk.%u.ffn_down.bias") \
    /* seq2seq encoder layers */ \
    X(ENC_ATTN_QKV,    "enc.%u.attn_qkv.weight") \
    X(ENC_ATTN_QKV_B,  "enc.%u.attn_qkv.bias") \
    X(ENC_ATTN_OUT,    "enc.%u.attn_out.weight") \
    X(ENC_ATTN_OUT_B,  "enc.%u.attn_out.bias") \
    X(ENC_FFN_UP,      "enc.%u.ffn_up.weight") \
    X(ENC_FFN_UP_B,    "enc.%u.ffn_up.bias") \
    X(ENC_FFN_DOWN,    "enc.%u.ffn_down.weight") \
    X(ENC_FFN_DOWN_B,  "enc.%u.ffn_down.bias") \
    X(ENC_LN1,         "enc.%u.ln1.weight") \
    X(ENC_LN1_B,       "enc.%u.ln1.bias") \
    X(ENC_LN2,         "enc.%u.ln2.weight") \
    X(ENC_LN2_B,       "enc.%u.ln2.bias") \
    /* seq2seq decoder layers */ \
    X(DEC_ATTN_QKV,    "dec.%u.attn_qkv.weight") \
    X(DEC_ATTN_QKV_B,  "dec.%u.attn_qkv.bias") \
    X(DEC_ATTN_OUT,    "dec.%u.attn_out.weight") \
    X(DEC_ATTN_OUT_B,  "dec.%u.attn_out.bias") \
    X(DEC_CROSS_QKV,   "dec.%u.cross_qkv.weight") \
    X(DEC_CROSS_QKV_B, "dec.%u.cross_qkv.bias") \
    X(DEC_CROSS_OUT,   "dec.%u.cross_out.weight") \
    X(DEC_CROSS_OUT_B, "dec.%u.cross_out.bias") \
    X(DEC_FFN_UP,      "dec.%u.ffn_up.weight") \
    X(DEC_FFN_UP_B,    "dec.%u.ffn_up.bias") \
    X(DEC_FFN_DOWN,    "dec.%u.ffn_down.weight") \
    X(DEC_FFN_DOWN_B,  "dec.%u.ffn_down.bias") \
    X(DEC_LN1,         "dec.%u.ln1.weight") \
    X(DEC_LN1_B,       "dec.%u.ln1.bias") \
    X(DEC_LN2,         "dec.%u.ln2.weight") \
    X(DEC_LN2_B,       "dec.%u.ln2.bias") \
    X(DEC_LN3,         "dec.%u.ln3.weight") \
    X(DEC_LN3_B,       "dec.%u.ln3.bias") \
    /* mlp */ \
    X(MLP_WEIGHT,      "layers.%u.weight") \
    X(MLP_BIAS,        "layers.%u.bias")

typedef enum qm_tensor_id {
#define QM_X(id, pattern) QM_TENSOR_##id,
    QM_TENSOR_LIST(QM_X)
#undef QM_X
    QM_TENSOR_COUNT
} qm_tensor_id;

/* The pattern of `id` ("blk.%u.attn_q.weight"); NULL for a value outside the list. */
const char *qm_tensor_pattern(qm_tensor_id id);
/* Whether the pattern holds a layer index. */
bool qm_tensor_per_layer(qm_tensor_id id);
/* Write the name of tensor `id` (of layer `layer` when it is per layer; ignored otherwise) into buf
 * (cap bytes, NUL-terminated). Returns the length, or -1 if it does not fit or id is out of range.
 * QM_TENSOR_NAME_MAX is always enough. */
int qm_tensor_name(char *buf, size_t cap, qm_tensor_id id, unsigned layer);
#define QM_TENSOR_NAME_MAX 64

/* ---- metadata keys --------------------------------------------------------------------------------- */

/* Keys every container has (ARCHITECTURES.md §1) and the ones quantize appends (§1a). */
#define QM_KEY_ARCHITECTURE     "general.architecture"
#define QM_KEY_FILE_TYPE        "general.file_type"
#define QM_KEY_CONVERTER        "general.converter"
#define QM_KEY_SOURCE_KIND      "general.source.kind"
#define QM_KEY_SOURCE_FILES     "general.source.files"
#define QM_KEY_SOURCE_SIZES     "general.source.sizes"
#define QM_KEY_SOURCE_XXH3      "general.source.xxh3"
#define QM_KEY_CONFIG_JSON      "general.config_json"
#define QM_KEY_QUANTIZE_PREFIX  "quantize."
#define QM_KEY_QUANTIZE_SCHEME  "quantize.scheme"
#define QM_KEY_QUANTIZE_VERSION "quantize.version"
#define QM_KEY_QUANTIZE_SOURCE  "quantize.source_xxh3"
#define QM_KEY_QUANTIZE_KEEP    "quantize.keep"
#define QM_KEY_QUANTIZE_SHARDS  "quantize.shards"

/* Hyperparameter keys: "<arch>.<suffix>", e.g. "llama.n_heads". Which architecture has which key, and
 * of which type, is spec/ARCHITECTURES.md §3–§7. */
#define QM_HPARAM_LIST(X) \
    X(VOCAB_SIZE,       "vocab_size") \
    X(CONTEXT_LENGTH,   "context_length") \
    X(DIM,              "dim") \
    X(N_LAYERS,         "n_layers") \
    X(N_HEADS,          "n_heads") \
    X(N_KV_HEADS,       "n_kv_heads") \
    X(HEAD_DIM,         "head_dim") \
    X(FFN_DIM,          "ffn_dim") \
    X(NORM_EPS,         "norm_eps") \
    X(ACTIVATION,       "activation") \
    X(TIED_OUTPUT,      "tied_output") \
    X(VARIANT,          "variant") \
    X(ROPE_THETA,       "rope_theta") \
    X(ROPE_STYLE,       "rope_style") \
    X(SLIDING_WINDOW,   "sliding_window") \
    X(QKV_BIAS,         "qkv_bias") \
    X(QK_NORM,          "qk_norm") \
    X(ATTN_SOFTCAP,     "attn_softcap") \
    X(FINAL_SOFTCAP,    "final_softcap") \
    X(QUERY_SCALE,      "query_pre_attn_scalar") \
    X(ATTENTION_LAYERS, "attention_layers") \
    X(WINDOW_SIZE,      "window_size") \
    X(ACTIVATIONS,      "activations") \
    X(INPUT_DIM,        "input_dim") \
    X(OUTPUT_DIM,       "output_dim") \
    X(OUTPUT,           "output") \
    X(INPUT_SCALE,      "input_scale") \
    X(INPUT_OFFSET,     "input_offset") \
    X(CLASS_NAMES,      "class_names") \
    X(SRC_VOCAB_SIZE,   "src_vocab_size") \
    X(TGT_VOCAB_SIZE,   "tgt_vocab_size") \
    X(N_ENC_LAYERS,     "n_enc_layers") \
    X(N_DEC_LAYERS,     "n_dec_layers") \
    X(MAX_LEN,          "max_len") \
    X(EMBED_SCALE,      "embed_scale") \
    X(NORM_FIRST,       "norm_first")

typedef enum qm_hparam {
#define QM_X(id, suffix) QM_HP_##id,
    QM_HPARAM_LIST(QM_X)
#undef QM_X
    QM_HPARAM_COUNT
} qm_hparam;

/* "n_heads"; NULL for a value outside the list. */
const char *qm_hparam_suffix(qm_hparam hp);
/* Write "<arch name>.<suffix>" into buf (cap bytes, NUL-terminated). Returns the length, or -1 if it does
 * not fit or an argument is out of range. QM_KEY_NAME_MAX is always enough. */
int qm_hparam_key(char *buf, size_t cap, qm_arch arch, qm_hparam hp);
#define QM_KEY_NAME_MAX 96

/* ---- tokenizer keys (spec/TOKENIZER.md §1): "<prefix><suffix>", prefix normally QM_TOK_PREFIX ---------- */
#define QM_TOK_PREFIX      "tokenizer."
#define QM_TOK_SRC_PREFIX  "tokenizer.src."
#define QM_TOK_TGT_PREFIX  "tokenizer.tgt."
#define QM_TOK_KEY_LIST(X) \
    X(KIND,             "kind") \
    X(SOURCE,           "source") \
    X(TOKENS,           "tokens") \
    X(MERGES,           "merges") \
    X(SPECIAL_IDS,      "special_ids") \
    X(ADDED_IDS,        "added_ids") \
    X(BOS_ID,           "bos_id") \
    X(EOS_ID,           "eos_id") \
    X(UNK_ID,           "unk_id") \
    X(PAD_ID,           "pad_id") \
    X(ADD_BOS,          "add_bos") \
    X(ADD_EOS,          "add_eos") \
    X(PRE_SPLIT,        "pre_split") \
    X(NORMALIZER,       "normalizer") \
    X(ADD_PREFIX_SPACE, "add_prefix_space") \
    X(PREPEND_SCHEME,   "prepend_scheme") \
    X(BYTE_FALLBACK,    "byte_fallback") \
    X(IGNORE_MERGES,    "ignore_merges")

typedef enum qm_tok_key_id {
#define QM_X(id, suffix) QM_TOK_##id,
    QM_TOK_KEY_LIST(QM_X)
#undef QM_X
    QM_TOK_KEY_COUNT
} qm_tok_key_id;

/* "tokens"; NULL for a value outside the list. */
const char *qm_tok_key_suffix(qm_tok_key_id k);
/* Write "<prefix><suffix>" into buf; as qm_hparam_key. */
int qm_tok_key(char *buf, size_t cap, const char *prefix, qm_tok_key_id k);

/* Tokenizer kinds (TOKENIZER.md §2). */
#define QM_TOK_KIND_BPE_BYTELEVEL     "bpe_bytelevel"
#define QM_TOK_KIND_BPE_SENTENCEPIECE "bpe_sentencepiece"
#define QM_TOK_KIND_WORDLEVEL         "wordlevel"

#endif /* QM_NAMES_H */
