/* qmap.h — the public C API of libqmap: run models stored in .qmap containers straight from the mapping.
 *
 * This is the only header a program needs (with qmap_errors.h, which it includes). Link with
 * `pkg-config --cflags --libs qmap`. Every exported symbol starts with qmap_.
 *
 * Objects and ownership
 *   qmap_model    an opened container: one read-only mapping, validated, the architecture's weights
 *                 viewed in place (nothing copied or dequantized). Immutable after qmap_model_open():
 *                 any number of threads and sessions may use one model at once. The caller closes it
 *                 with qmap_model_close() after every session made from it has been freed.
 *   qmap_session  the mutable state of one sequence: KV cache, activations, logits. Every buffer is
 *                 allocated by qmap_session_new(); evaluating tokens allocates nothing. A session is used
 *                 by one thread at a time; its `threads` parameter sets the threads its evaluation
 *                 uses: the session starts threads - 1 workers once, at qmap_session_new, and keeps them
 *                 (spinning briefly between products, then asleep) until it is freed.
 *   qmap_batch    the same for up to n_seq sequences at once (a KV cache each), evaluated together: one
 *                 pass over the weights for all of them; made by qmap_batch_new(), as a session is.
 *   qmap_sampler  logits -> token id, with its own seeded random state and penalty history.
 *   Pointers returned by a getter (strings, logits) are owned by the object they came from and stay
 *   valid as the getter says.
 *
 * Errors
 *   Every fallible function returns a qmap_status: QMAP_OK (0) or one of the codes of qmap_errors.h,
 *   whose values never change. When `err` is not NULL it is filled on failure with the code and a one-line
 *   message naming the file, metadata key or tensor at fault. No function prints, exits, or keeps global
 *   mutable state. A function that fails leaves its outputs and the objects it was given as they were,
 *   unless it says otherwise.
 *
 * NULL pointers
 *   No function crashes on a NULL pointer argument. One that returns a qmap_status returns
 *   QMAP_ERR_INVALID_ARGUMENT, unless its comment gives NULL a meaning (params = the defaults, err = no
 *   message, an out-length = not wanted, a buffer of capacity 0). Every other function does nothing and
 *   returns its neutral value: NULL for a pointer, 0 for a count or size (or the "unknown" value its
 *   comment gives), -1 for a token id, nothing for void (tests/run/api_null.c calls each one with NULL in
 *   each pointer).
 */
#ifndef QMAP_H
#define QMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qmap_errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(QMAP_BUILDING_LIBRARY)
#define QMAP_API __attribute__((visibility("default")))
#else
#define QMAP_API
#endif

/* ---- versions and errors -------------------------------------------------------------------------- */

/* "0.3.0"-style version of the library. Never NULL. */
QMAP_API const char *qmap_version(void);

typedef struct qmap_error {
    qmap_status code;      /* QMAP_OK when there is no error */
    char message[640];     /* one line of UTF-8, e.g. "m.qmap: tensor blk.3.attn_q.weight: shape [64, 32], the
                            * model needs [64, 64] [QM_ERR_SHAPE]" */
} qmap_error;

/* "QMAP_ERR_SHAPE"; "QMAP_ERR_UNKNOWN" for a value outside the list. Never NULL. */
QMAP_API const char *qmap_status_name(qmap_status s);
/* The short description of a status ("tensor shape does not match the model"). Never NULL. */
QMAP_API const char *qmap_status_string(qmap_status s);

/* ---- models ------------------------------------------------------------------------------------------ */

typedef struct qmap_model qmap_model;

typedef enum qmap_model_kind {
    QMAP_KIND_NONE = 0,        /* a plain tensor store (general.architecture "none"): nothing to run */
    QMAP_KIND_LM = 1,          /* decoder language model: gpt2, gpt_neo, llama, gemma2 */
    QMAP_KIND_CLASSIFIER = 2,  /* mlp */
    QMAP_KIND_SEQ2SEQ = 3,     /* encoder-decoder */
} qmap_model_kind;

/* Tensor parallelism: this process runs rank `rank` of `n_ranks` processes that each open the same container
 * and together run one decoder LM (gpt2, gpt_neo, llama), each holding an n_ranks-th of every layer's heads,
 * KV cache and FFN units and of the vocabulary (the qmap-mpi command supplies the functions over MPI;
 * runtime/qr_shard.h has the split). n_ranks must divide the heads, the KV heads and the FFN size
 * (QMAP_ERR_BAD_CONFIG naming the key otherwise). Every rank must make the same calls with the same
 * arguments (a session each, the same tokens, the same sampling seed): every forward pass calls the
 * functions (all three required), and every rank then holds the same whole logits. Each function returns 0 on success; a failure
 * fails the forward pass with QMAP_ERR_IO. */
typedef struct qmap_shard {
    uint32_t rank, n_ranks;
    /* buf[0 .. n) := the element-wise sum over the ranks of their buf, in place */
    int (*allreduce_sum)(void *ctx, float *buf, size_t n);
    /* rank r holds buf[n·r/n_ranks .. n·(r+1)/n_ranks); afterwards every rank holds all n */
    int (*allgather)(void *ctx, float *buf, size_t n);
    void *ctx;
    /* buf[0 .. n) := the element-wise max over the ranks of their buf (values >= 0 or +Inf), in place: joins
     * the int8 activation scales of a matrix whose columns several ranks share (Q8_ROW at --act int8 or
     * auto), so a rank's int8 rows are one process's */
    int (*allreduce_max)(void *ctx, float *buf, size_t n);
} qmap_shard;

typedef struct qmap_model_params {
    bool verify;               /* hash every tensor at open (spec R-DATA-1); otherwise open reads no tensor byte */
    int threads;               /* threads for verify; 0 = all */
    bool no_mmap;              /* read the file into anonymous memory instead of mapping it: for comparison
                                * only (as llama.cpp's --no-mmap); costs RAM as large as the file, not shared
                                * between processes, and reading all of it at open */
    bool large_pages;          /* map every page at open, in 2 MiB pages where the kernel can, re-reading the
                                * file's cached pages if need be (see qmap_model_open). Off by default */
    const qmap_shard *shard;   /* tensor parallel: this process's part (copied at open); NULL = the whole model */
} qmap_model_params;

/* Fill *p with the defaults (verify false, threads 0, no_mmap false, large_pages false, shard NULL). */
QMAP_API void qmap_model_params_default(qmap_model_params *p);

/* Open `path`, validate the container (spec/FORMAT.md section 7) and the architecture's metadata keys and
 * every tensor's dtype and shape (spec/ARCHITECTURES.md), and view the weights in the mapping. `params`
 * may be NULL (defaults). On success *out owns the mapping; on failure *out is NULL and err names the file
 * and the key or tensor at fault (QMAP_ERR_UNKNOWN_ARCH for an architecture this library cannot run).
 *
 * Page cache. By default opening reads no tensor byte and changes nothing outside the process: the mapping
 * fills as the weights are read. With params->large_pages, every page of the mapping is mapped before
 * this returns (reading the file where it is not cached, as MAP_POPULATE does), in 2 MiB page-table
 * entries where the kernel can; if the page cache holds a file of 64 MiB or more with over a sixteenth of
 * it (and over 16 MiB) in 4 KiB pages, those cached pages that no process maps are dropped and read back
 * through the mapping. That costs a read of the whole file at open, and a file another process has cached
 * may be dropped and re-read: a library call does not do that unasked, so it is off by default. A program
 * that streams every weight per token should turn it on (qmap run, perplexity and bench do): decode
 * through 4 KiB entries can run far slower (docs/perf/2026-11-25-zen5.md). With params->no_mmap,
 * large_pages has no effect. */
QMAP_API qmap_status qmap_model_open(const char *path, const qmap_model_params *params, qmap_model **out,
                                     qmap_error *err);
/* Release the model and its mapping; NULL is allowed. Sessions made from it must be freed first. */
QMAP_API void qmap_model_close(qmap_model *m);

/* Replacing a model's file. The weights are read from the mapping of the file for as long as the model is
 * open, so a model file must only ever be replaced by writing a new file and renaming it over the old one
 * (as qmap's writers and `mv` do: the open model keeps the old file's pages). A file truncated or
 * overwritten in place while it is mapped (`truncate`, `cp` onto it, a download restarted into it) loses
 * pages, and the next read of one raises SIGBUS on whichever thread reads it, in the middle of a kernel
 * that cannot be unwound into an error code. By default that signal ends the process (or goes to the
 * program's own SIGBUS handler, if it set one before opening a model). A program that would rather end
 * with a message and an exit status calls qmap_exit_on_mapped_file_change once, before reading a model:
 * a SIGBUS that the library does not handle itself then writes `message` (NULL: "the model file changed
 * while mapped; replace files with rename, as qmap's writers do"; up to 1024 bytes, a newline added) to
 * standard error and calls _exit(exit_status). Calling it again replaces the message and status. The
 * `qmap` command does this for run, perplexity and bench (exit status 1). */
#define QMAP_MAPPED_FILE_CHANGED "the model file changed while mapped; replace files with rename, as qmap's writers do"
QMAP_API qmap_status qmap_exit_on_mapped_file_change(const char *message, int exit_status);

typedef struct qmap_model_info {
    const char *path;          /* as given to qmap_model_open */
    const char *arch;          /* "gpt2", "gpt_neo", "llama", "mlp", "seq2seq" (NUL-terminated) */
    const char *variant;       /* llama.variant ("llama", "mistral", "qwen2", "qwen3", "phi3", ...) or the arch */
    const char *file_type;     /* general.file_type: "f32", "f16", "q8_row" ("" if absent) */
    qmap_model_kind kind;
    uint32_t vocab_size;       /* rows of the token embedding (LM) / output classes (classifier) */
    uint32_t context_length;   /* trained context (LM) */
    uint32_t dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim;
    uint32_t input_dim;        /* classifier: features per input row */
    uint64_t n_params;         /* elements of every tensor */
    uint64_t weight_bytes;     /* bytes of tensor data in the file */
    uint64_t bytes_per_token;  /* LM: tensor bytes one decode step reads (every matrix once, one embedding row) */
    uint64_t file_size;
    bool has_tokenizer;
    /* classifier: how integer inputs (uint8 images) become features, feature = value * input_scale +
     * input_offset, as the model was trained (mlp.input_scale / mlp.input_offset; 1 and 0 if unset).
     * qmap_classify takes features: apply it to raw pixels first. */
    float input_scale, input_offset;
    bool has_class_names;      /* classifier: qmap_model_class_name gives names */
    /* seq2seq: vocab_size is the target vocabulary, n_layers the decoder's, context_length the longest
     * source or target (positions of the sinusoidal table); has_tokenizer means both vocabularies load */
    uint32_t src_vocab_size, n_enc_layers;
} qmap_model_info;

/* Fill *out; its strings are owned by the model. */
QMAP_API void qmap_model_get_info(const qmap_model *m, qmap_model_info *out);

/* Classifier: the name of class i from the container (mlp.class_names, from the config's id2label), its
 * length in *len (not NUL-terminated; it points into the mapping). NULL if the container names no classes,
 * i is out of range or m is not a classifier. */
QMAP_API const char *qmap_model_class_name(const qmap_model *m, uint32_t i, size_t *len);

/* ---- tokenizer (the one stored in the container, spec/TOKENIZER.md) ----------------------------------- */

/* Encode `len` bytes of UTF-8 `text` into ids. With add_special, bos/eos are added as the tokenizer's
 * add_bos/add_eos say. Writes at most `cap` ids to `ids` and sets *n_ids to the number the text needs:
 * if that is more than cap, returns QMAP_ERR_INVALID_ARGUMENT ("buffer too small") with *n_ids set, so a
 * caller can retry with a larger buffer. Text that is not valid UTF-8 is QMAP_ERR_BAD_UTF8 naming the byte
 * offset. QMAP_ERR_NOT_FOUND if the container has no tokenizer. Thread-safe on one model. */
QMAP_API qmap_status qmap_tokenize(const qmap_model *m, const char *text, size_t len, bool add_special,
                                   int32_t *ids, size_t cap, size_t *n_ids, qmap_error *err);

/* Streaming detokenizer state: zero it (or qmap_detok_init) before the first token of a text. A text's
 * first token loses the space a SentencePiece tokenizer put before it; to print only what follows a prompt,
 * feed the prompt's tokens (bos excepted) through the same state first and drop their text, so that the
 * continuation keeps its leading space (qmap run and examples/simple.c do this). */
typedef struct qmap_detok { uint8_t pending[8]; uint32_t n_pending; uint32_t flags; } qmap_detok;
QMAP_API void qmap_detok_init(qmap_detok *st);

/* Append the text of token `id` to `out` (cap bytes) and set *n_out. Text is valid UTF-8: bytes of a
 * character split across tokens wait in *st for the rest; bytes that can never form a character come out
 * as U+FFFD. `cap` >= 3 x (the token's bytes + 9) is always enough (every byte could become U+FFFD); 4096
 * covers every token of the common vocabularies. QMAP_ERR_INVALID_ARGUMENT for an id out of range or a
 * too small buffer (nothing written, *st unchanged). */
QMAP_API qmap_status qmap_detokenize(const qmap_model *m, qmap_detok *st, int32_t id, char *out, size_t cap,
                                     size_t *n_out, qmap_error *err);
/* Emit what is still pending in *st (as U+FFFD) at the end of a text. cap >= 32 is enough. */
QMAP_API size_t qmap_detok_flush(qmap_detok *st, char *out, size_t cap);

/* The stored string of token `id` (not NUL-terminated; *len bytes), or NULL if out of range. */
QMAP_API const char *qmap_token_piece(const qmap_model *m, int32_t id, size_t *len);
/* The stored string of id `id` as qmap_tokenize gives it: a seq2seq model's source vocabulary, every other
 * model's one tokenizer (then the same as qmap_token_piece). NULL if out of range or not loaded. */
QMAP_API const char *qmap_token_source_piece(const qmap_model *m, int32_t id, size_t *len);
/* Special ids; -1 when the container does not state them. */
QMAP_API int32_t qmap_token_bos(const qmap_model *m);
QMAP_API int32_t qmap_token_eos(const qmap_model *m);
/* The unknown token qmap_tokenize maps unmatched text to, or -1. (A seq2seq model: qmap_tokenize uses
 * the source vocabulary; detokenizing, pieces, bos and eos the target vocabulary.) */
QMAP_API int32_t qmap_token_unk(const qmap_model *m);

/* The chat template the model was published with (tokenizer_config.json's chat_template, a Jinja text,
 * stored by qmap convert as tokenizer.chat_template; spec/TOKENIZER.md), *len bytes, not NUL-terminated
 * (it points into the mapping); NULL when the container has none. */
QMAP_API const char *qmap_model_chat_template(const qmap_model *m, size_t *len);

/* ---- sessions: evaluate tokens into logits ------------------------------------------------------------ */

typedef struct qmap_session qmap_session;

typedef enum qmap_kv_type { QMAP_KV_F16 = 0, QMAP_KV_F32 = 1 } qmap_kv_type;

/* How Q8_ROW products treat activations (runtime/README.md). A value outside the enum is
 * QMAP_ERR_INVALID_ARGUMENT from qmap_session_new, qmap_classifier_new and qmap_translator_new. */
typedef enum qmap_act_mode {
    QMAP_ACT_AUTO = 0,           /* an LM session or batch: QMAP_ACT_PRECISE, except that products whose
                                  * input comes out of a norm or out of attention run in one int8 term
                                  * (Q/K/V, attention output, the FFN's gate/up or first matrix), in a
                                  * prompt and in a decode step alike; the FFN's down projection and the
                                  * head keep float accuracy (docs/BENCHMARKS.md, Accuracy: 1.6x the KL
                                  * divergence of PRECISE, a sixth of INT8's). Gemma 2 keeps its
                                  * attention output and gate/up at float accuracy too (its norms after
                                  * each branch undo the residual's dilution of their rounding:
                                  * runtime/qr_arch_gemma2.c). Classifiers and translators: QMAP_ACT_PRECISE */
    QMAP_ACT_INT8 = 1,           /* one int8 term per row: fastest, adds activation rounding error */
    QMAP_ACT_F32 = 2,            /* weights widened to float */
    QMAP_ACT_INT8X2 = 3,         /* two int8 terms per row for every product, one row or many (float accuracy) */
    QMAP_ACT_PRECISE = 4,        /* float accuracy: in an LM session or batch two int8 terms at every row
                                  * count (QMAP_ACT_INT8X2); in a classifier or translator two int8 terms
                                  * for batches, and for one row float X, or two terms on CPUs where
                                  * widening cannot keep up with memory (the library tells them apart) */
} qmap_act_mode;

/* The context a session gets when it asks for none: the model's, up to this many positions (as llama.cpp
 * does), so that a file's context_length does not decide how much memory its KV cache takes. */
#define QMAP_DEFAULT_N_CTX 4096u

typedef struct qmap_session_params {
    uint32_t n_ctx;            /* positions the KV cache holds; 0 = min(the model's context length,
                                * QMAP_DEFAULT_N_CTX); more than the model's: allowed for llama (RoPE) */
    uint32_t n_batch;          /* most tokens one qmap_eval call takes; 0 = 512 */
    int threads;               /* threads of its evaluation, the caller's included; 0 = one per CPU the process may use */
    qmap_kv_type kv_type;      /* QMAP_KV_F16 (default) or QMAP_KV_F32 */
    qmap_act_mode act;
    bool logits_all;           /* keep the logits of every token of a batch (n_batch x vocab floats) */
    bool batch_invariant;      /* a batch of one's bits (batches, below) for F32/F16 weights and
                                * QMAP_ACT_F32 too: a one-token step's float products summed as a
                                * batch's rows are, about 1.4x (F32) to 2x (F16) the time of each such
                                * product. A session whose products are all int8 (Q8_ROW weights, any
                                * other act mode) has a batch of one's bits anyway, at no cost */
} qmap_session_params;

/* Fill *p with the defaults above. */
QMAP_API void qmap_session_params_default(qmap_session_params *p);

/* Make a session for an LM. Every buffer is sized here from n_ctx and n_batch. QMAP_ERR_INVALID_ARGUMENT
 * for a model that is not an LM; QMAP_ERR_NOMEM when the buffers do not fit. `params` may be NULL. */
QMAP_API qmap_status qmap_session_new(const qmap_model *m, const qmap_session_params *params,
                                      qmap_session **out, qmap_error *err);
/* NULL is allowed. */
QMAP_API void qmap_session_free(qmap_session *s);

/* Evaluate n >= 1 tokens at positions pos .. pos+n-1, pos being qmap_session_pos(): their keys and values
 * join the cache and the position advances by n. n may exceed n_batch (the tokens then run in chunks of
 * n_batch). QMAP_ERR_INVALID_ARGUMENT for an id outside the vocabulary (naming it) or when pos + n would
 * pass n_ctx; the session is then unchanged. */
QMAP_API qmap_status qmap_eval(qmap_session *s, const int32_t *ids, size_t n, qmap_error *err);

/* Logits (vocab_size floats) of token i of the last qmap_eval call: i = n-1 always works; other i only
 * with logits_all (and i within the last chunk of n_batch tokens otherwise NULL). Valid until the next
 * qmap_eval or qmap_session_reset. NULL if there is none. */
QMAP_API const float *qmap_logits(const qmap_session *s, size_t i);

/* Number of positions evaluated so far. */
QMAP_API uint32_t qmap_session_pos(const qmap_session *s);
/* Forget every position (the next eval starts at 0). Allocates nothing. */
QMAP_API void qmap_session_reset(qmap_session *s);

/* ---- batches: several sequences through one pass over the weights ------------------------------------
 *
 * A qmap_batch holds up to n_seq sequences of one LM, each in its own slot with its own KV cache and
 * position. One qmap_batch_eval call advances any subset of them, each by one token (a decode step) or a
 * chunk of its prompt, in one forward pass: every weight matrix is read once for the rows of all of them
 * (one GEMM per matrix), and each row attends over its own sequence's cache. On a CPU whose decode is
 * bound by memory bandwidth, eight sequences decoded together cost little more than one.
 *
 * Batch invariance: a sequence's logits depend only on its own tokens, never on which other sequences
 * share a call, in which slot it sits, nor on how its prompt was cut into calls: the same bits alone and
 * under load (so greedy and seeded sampling give the same ids). To get that, every product of a batch
 * sums a row the same way whatever the row count: Q8_ROW weights take the act mode's int8 terms at every
 * row count (QMAP_ACT_PRECISE is QMAP_ACT_INT8X2; QMAP_ACT_AUTO the same except for the products of normed
 * rows, one term at every row count, which halves their int8 work in a decode step), float products
 * (F32/F16 weights, QMAP_ACT_F32) sum a lone row in the order of a GEMM's rows. Every act mode is
 * batch-invariant. A qmap_session of Q8_ROW weights (any act mode but QMAP_ACT_F32), or with
 * qmap_session_params.batch_invariant, is a batch of one: the same bits as a batch gives the sequence,
 * so `qmap run` and `qmap serve` produce the same tokens. The bits may differ between QMAP_CPU levels.
 *
 * Ownership: qmap_batch_new allocates every buffer (n_seq KV caches of n_ctx positions, activations for
 * n_batch rows, n_seq rows of logits) and starts the threads, as qmap_session_new does; evaluating
 * allocates nothing. One thread at a time uses a batch; the model must outlive it. Slots are the
 * caller's to schedule: a finished request's slot is freed with qmap_batch_reset and the next request
 * takes it between two calls. */

typedef struct qmap_batch qmap_batch;

typedef struct qmap_batch_params {
    uint32_t n_seq;            /* sequences (slots) the batch holds; 0 = 1 */
    uint32_t n_ctx;            /* positions each sequence's KV cache holds; 0 = min(model's context, 4096) */
    uint32_t n_batch;          /* most tokens one qmap_batch_eval call takes over all its items; 0 = 512 */
    int threads;               /* 0 = one per CPU the process may use */
    qmap_kv_type kv_type;      /* QMAP_KV_F16 (default) or QMAP_KV_F32 */
    qmap_act_mode act;         /* every mode is batch-invariant; PRECISE runs as INT8X2, AUTO as INT8X2
                                * with normed rows in one term (above) */
} qmap_batch_params;

/* Fill *p with the defaults above (all zero but kv_type F16 and act AUTO). */
QMAP_API void qmap_batch_params_default(qmap_batch_params *p);

/* Make a batch for an LM (`p` may be NULL: the defaults). QMAP_ERR_INVALID_ARGUMENT for a model that is
 * not an LM, an n_ctx past learned positions or 2^24, n_seq over 4096, an unknown kv_type or act mode,
 * negative threads; QMAP_ERR_NOMEM when the buffers do not fit (n_seq x n_ctx positions of cache). */
QMAP_API qmap_status qmap_batch_new(const qmap_model *m, const qmap_batch_params *p, qmap_batch **out,
                                    qmap_error *err);
/* NULL is allowed. */
QMAP_API void qmap_batch_free(qmap_batch *b);

/* Tokens for one sequence in a qmap_batch_eval call. */
typedef struct qmap_batch_item {
    uint32_t seq;              /* 0 .. n_seq-1; at most one item per sequence in one call */
    const int32_t *ids;        /* appended to the sequence at its current position */
    uint32_t n;                /* >= 1 */
} qmap_batch_item;

/* One forward pass for all items (sum of n <= n_batch, else QMAP_ERR_INVALID_ARGUMENT): every weight matrix
 * read once for all rows. On success each item's sequence advances by n; on failure nothing changes.
 * QMAP_ERR_INVALID_ARGUMENT (naming the item) also for n_items = 0, a seq out of range or given twice, n = 0,
 * an id outside the vocabulary, or a sequence whose position + n would pass n_ctx. Allocates nothing. */
QMAP_API qmap_status qmap_batch_eval(qmap_batch *b, const qmap_batch_item *items, size_t n_items, qmap_error *err);

/* vocab_size floats: the logits of the last token of `seq` in the last qmap_batch_eval that included it;
 * valid until the next qmap_batch_eval or qmap_batch_reset(b, seq); NULL if none. */
QMAP_API const float *qmap_batch_logits(const qmap_batch *b, uint32_t seq);
/* Positions evaluated in seq (0 for a seq out of range or b = NULL). */
QMAP_API uint32_t qmap_batch_pos(const qmap_batch *b, uint32_t seq);
/* Forget seq (a finished request): its position goes back to 0 and it has no logits. A seq out of range
 * or b = NULL does nothing. Allocates nothing. */
QMAP_API void qmap_batch_reset(qmap_batch *b, uint32_t seq);
/* The number of slots (n_seq as made); 0 for NULL. */
QMAP_API uint32_t qmap_batch_n_seq(const qmap_batch *b);

/* ---- classifiers (mlp): rows of features -> class scores --------------------------------------------- */

typedef struct qmap_classifier qmap_classifier;

/* Buffers to classify batches of up to max_batch rows (0 = 256) of a QMAP_KIND_CLASSIFIER model with
 * `threads` threads (started here, kept until freed; 0 = one per CPU the process may use) and activation mode `act` for Q8_ROW weights.
 * Every buffer is allocated here; classifying allocates nothing. QMAP_ERR_INVALID_ARGUMENT for a model
 * that is not a classifier. One classifier is used by one thread at a time; one model may have many. */
QMAP_API qmap_status qmap_classifier_new(const qmap_model *m, size_t max_batch, int threads, qmap_act_mode act,
                                         qmap_classifier **out, qmap_error *err);
/* NULL is allowed. Free it before closing its model. */
QMAP_API void qmap_classifier_free(qmap_classifier *c);

/* out[i][0 .. n_classes) = the model's output (logits, or probabilities / log-probabilities when the
 * model ends in softmax / log_softmax: qmap_model_info.vocab_size classes) for the n rows of x, each
 * input_dim floats. n may exceed max_batch (the rows then run in batches of max_batch). x and out are the
 * caller's; QMAP_ERR_INVALID_ARGUMENT for NULL buffers. */
QMAP_API qmap_status qmap_classify(qmap_classifier *c, const float *x, size_t n, float *out, qmap_error *err);

/* ---- encoder-decoder (seq2seq): source ids -> target ids ---------------------------------------------- */

typedef struct qmap_translator qmap_translator;

typedef struct qmap_translate_params {
    uint32_t beam_size;        /* hypotheses kept per step; 1 = greedy (default 1) */
    uint32_t n_best;           /* hypotheses returned per sentence, 1 .. beam_size (default 1) */
    float length_penalty;      /* α: finished hypotheses rank by log P / length^α, length counting EOS
                                * (CTranslate2's and OpenNMT's definition; default 1) */
    uint32_t max_len;          /* target tokens generated at most, EOS included; 0 = the model's max_len - 1 */
    uint32_t max_batch;        /* sentences one qmap_translate call takes; 0 = 64 */
    uint32_t max_batch_tokens; /* source tokens encoded together; 0 = 4096 (at least the model's max_len) */
    int threads;               /* threads of its evaluation, the caller's included; 0 = one per CPU the process may use */
    qmap_kv_type kv_type;      /* decoder self-attention cache: QMAP_KV_F16 (default) or QMAP_KV_F32 */
    qmap_act_mode act;
} qmap_translate_params;

QMAP_API void qmap_translate_params_default(qmap_translate_params *p);

/* Buffers to translate with a QMAP_KIND_SEQ2SEQ model: the encoder's for max_batch_tokens source tokens,
 * the decoder's and two sets of KV caches for beam_size hypotheses of max_len + 1 positions, the beam
 * search's, and the results'. Translating allocates nothing. Needs the target vocabulary's bos_id and
 * eos_id (QMAP_ERR_NOT_FOUND naming the key otherwise). One translator is used by one thread at a time;
 * free it before closing its model. `params` may be NULL. */
QMAP_API qmap_status qmap_translator_new(const qmap_model *m, const qmap_translate_params *params,
                                         qmap_translator **out, qmap_error *err);
QMAP_API void qmap_translator_free(qmap_translator *t);   /* NULL allowed */

typedef struct qmap_hypothesis {
    const int32_t *ids;        /* target ids, BOS and EOS not included; owned by the translator */
    size_t n_ids;
    float score;               /* log P / length^α (the rank) */
    float log_prob;            /* log P: the sum of the tokens' log-probabilities, EOS included */
} qmap_hypothesis;

/* Translate 1 <= n_sent <= max_batch sentences given as source ids packed one after another (sentence i
 * has lens[i] ids, 1 .. the model's max_len). The sentences are encoded together, as many per encoder pass
 * as max_batch_tokens holds, then each is decoded. out[i * n_best + j] receives hypothesis j
 * (best first) of sentence i; a sentence with fewer finished hypotheses than n_best gets n_ids 0 and
 * score -inf in the rest. The ids stay valid until the next call or qmap_translator_free.
 * QMAP_ERR_INVALID_ARGUMENT for an id outside the source vocabulary or a sentence too long (naming it). */
QMAP_API qmap_status qmap_translate(qmap_translator *t, const int32_t *src, const uint32_t *lens, size_t n_sent,
                                    qmap_hypothesis *out, qmap_error *err);

/* Teacher forcing, for checking against another implementation: logits[i * vocab .. ] = the decoder's
 * output at target position i (i < n_tgt, n_tgt <= max_len + 1) given source src (n_src ids) and target
 * prefix tgt[0 .. i] (tgt[0] is normally BOS). logits is the caller's, n_tgt x vocab_size floats. */
QMAP_API qmap_status qmap_translator_logits(qmap_translator *t, const int32_t *src, size_t n_src, const int32_t *tgt,
                                            size_t n_tgt, float *logits, qmap_error *err);

/* ---- sampling ------------------------------------------------------------------------------------------ */

typedef struct qmap_sampler qmap_sampler;

typedef struct qmap_sampler_params {
    float temp;                /* 0.8; <= 0: greedy (argmax, first on ties) */
    int32_t top_k;             /* 40; <= 0: whole vocabulary */
    float top_p;               /* 0.95; 1: off */
    float min_p;               /* 0.05; 0: off */
    float repeat_penalty;      /* 1.0 = off; > 1 divides positive logits (multiplies negative ones) of recent ids */
    uint32_t repeat_last_n;    /* 64: how many recent ids the penalty looks at */
    uint64_t seed;             /* same seed, same logits -> same ids */
} qmap_sampler_params;

/* llama.cpp's defaults, as listed above. */
QMAP_API void qmap_sampler_params_default(qmap_sampler_params *p);

/* A sampler for logits of n_vocab entries; its scratch is allocated here. */
QMAP_API qmap_status qmap_sampler_new(const qmap_sampler_params *p, uint32_t n_vocab, qmap_sampler **out,
                                      qmap_error *err);
QMAP_API void qmap_sampler_free(qmap_sampler *smp);
/* Choose an id from `logits` (n_vocab floats, not modified) and record it in the penalty history.
 * Allocates nothing. */
QMAP_API int32_t qmap_sample(qmap_sampler *smp, const float *logits);   /* -1 if smp or logits is NULL */
/* Record an id (e.g. a prompt token) in the penalty history without sampling. */
QMAP_API void qmap_sampler_accept(qmap_sampler *smp, int32_t id);

/* ---- containers: metadata and tensors without a model -------------------------------------------------- */

/* A .qmap file opened to look at, not to run: its metadata and tensors as the file stores them
 * (spec/FORMAT.md). Any container opens, whatever its architecture (or none). Opening validates everything
 * outside tensor data (spec section 7) and reads no tensor byte; qmap_container_verify hashes them. A
 * container is immutable after qmap_container_open: any number of threads may read it at once. Every
 * pointer it hands out (keys, names, strings, tensor data) points into its read-only mapping, is owned by
 * it and stays valid until qmap_container_close. */
typedef struct qmap_container qmap_container;

/* Dtype ids of spec/FORMAT.md section 6 (frozen, never reused). */
typedef enum qmap_dtype {
    QMAP_DTYPE_F32 = 1,
    QMAP_DTYPE_F16 = 2,
    QMAP_DTYPE_BF16 = 3,
    QMAP_DTYPE_I32 = 4,
    QMAP_DTYPE_Q8_ROW = 5,       /* int8 rows, one f32 scale per row (spec 6.1; qmap_tensor_info says where) */
} qmap_dtype;

/* Metadata value types of spec/FORMAT.md section 4 (frozen). */
typedef enum qmap_meta_type {
    QMAP_META_U32 = 1,
    QMAP_META_I32 = 2,
    QMAP_META_U64 = 3,
    QMAP_META_I64 = 4,
    QMAP_META_F32 = 5,
    QMAP_META_F64 = 6,
    QMAP_META_BOOL = 7,
    QMAP_META_STRING = 8,
    QMAP_META_ARRAY = 9,
} qmap_meta_type;

/* Open and validate `path` (a regular file; FIFOs and devices are refused) and map it read-only. On
 * success *out owns the mapping; on failure *out is NULL and err names the file and the rule it breaks
 * (the codes 1..39 of qmap_errors.h). QMAP_ERR_INVALID_ARGUMENT for a NULL path or out. */
QMAP_API qmap_status qmap_container_open(const char *path, qmap_container **out, qmap_error *err);
/* Release the container and its mapping; NULL is allowed. Every pointer obtained from it becomes invalid. */
QMAP_API void qmap_container_close(qmap_container *c);

typedef struct qmap_container_info {
    const char *path;            /* as given to qmap_container_open */
    uint16_t major_version, minor_version;
    uint64_t alignment;          /* every tensor's data starts on a multiple of it */
    uint64_t file_size;
    uint64_t metadata_count, tensor_count;
} qmap_container_info;

/* Fill *out (zeros and NULLs for c = NULL); its path is owned by the container. */
QMAP_API void qmap_container_get_info(const qmap_container *c, qmap_container_info *out);

typedef struct qmap_meta_entry {
    const char *key;             /* NUL-terminated */
    qmap_meta_type type;
    qmap_meta_type elem_type;    /* ARRAY: the type of its elements; 0 otherwise */
    uint64_t count;              /* ARRAY: its number of elements; 1 otherwise */
    union {                      /* the value of a scalar (U32 .. BOOL) */
        uint32_t u32; int32_t i32; uint64_t u64; int64_t i64; float f32; double f64; bool b;
    } v;
    const char *str;             /* STRING: its bytes (valid UTF-8, NOT NUL-terminated, may hold NUL) */
    uint64_t str_len;
    /* ARRAY of U32 .. BOOL: the `count` elements as the file encodes them, back to back, little-endian and
     * not aligned (spec section 4: 4 bytes each for U32/I32/F32, 8 for U64/I64/F64, 1 for BOOL); read
     * them with byte copies, or element by element with qmap_meta_array_get. NULL for other types. */
    const void *elems;
    uint64_t elems_size;         /* bytes at elems */
} qmap_meta_entry;

/* Metadata entry i (0 <= i < metadata_count, in file order) into *out. QMAP_ERR_INVALID_ARGUMENT for i
 * out of range or a NULL argument (*out unchanged). */
QMAP_API qmap_status qmap_container_meta(const qmap_container *c, uint64_t i, qmap_meta_entry *out,
                                         qmap_error *err);
/* The entry whose key is `key` (O(log n)); QMAP_ERR_NOT_FOUND naming the key if there is none. */
QMAP_API qmap_status qmap_container_find_meta(const qmap_container *c, const char *key, qmap_meta_entry *out,
                                              qmap_error *err);
/* Element i of a numeric or BOOL array, copied into *out as the element type's C type (uint32_t,
 * int32_t, uint64_t, int64_t, float, double, bool). QMAP_ERR_TYPE_MISMATCH if `e` is not such an array,
 * QMAP_ERR_INVALID_ARGUMENT for i >= count or a NULL argument. */
QMAP_API qmap_status qmap_meta_array_get(const qmap_meta_entry *e, uint64_t i, void *out, qmap_error *err);
/* Element i of a string array of container c (its bytes in *s, not NUL-terminated, *len of them), O(1).
 * `e` must come from c. QMAP_ERR_TYPE_MISMATCH if `e` is not a string array, QMAP_ERR_INVALID_ARGUMENT for
 * i >= count or a NULL argument. */
QMAP_API qmap_status qmap_meta_array_string(const qmap_container *c, const qmap_meta_entry *e, uint64_t i,
                                            const char **s, size_t *len, qmap_error *err);

typedef struct qmap_tensor_info {
    const char *name;            /* NUL-terminated */
    qmap_dtype dtype;
    uint32_t rank;               /* 1..4 */
    uint64_t dims[4];            /* dims[0..rank), outermost first as PyTorch's shape; dims[rank..4) are 0 */
    uint64_t n_elements;
    const void *data;            /* the tensor's bytes in the mapping, aligned to the container's alignment */
    uint64_t size;               /* bytes at data */
    uint64_t offset;             /* file offset of data */
    uint64_t checksum;           /* XXH3-64 of the bytes, as stored (qmap_container_verify compares) */
    /* Q8_ROW only (0 for other dtypes), spec 6.1: cols = dims[rank-1], rows = the product of the other
     * dims. Row r's cols int8 values are the bytes [r * row_stride, r * row_stride + cols) of data
     * (row_stride >= cols, a multiple of 64); its f32 scale is element r of the array at data +
     * scales_offset, its i32 sum element r of the array at data + sums_offset. Element (r, j) is
     * q[r][j] * scale[r], in f32. */
    uint64_t rows, cols, row_stride, scales_offset, sums_offset;
} qmap_tensor_info;

/* Tensor i (0 <= i < tensor_count, in table order, which is data order) into *out.
 * QMAP_ERR_INVALID_ARGUMENT for i out of range or a NULL argument (*out unchanged). */
QMAP_API qmap_status qmap_container_tensor(const qmap_container *c, uint64_t i, qmap_tensor_info *out,
                                           qmap_error *err);
/* The tensor named `name` (O(log n)); QMAP_ERR_NOT_FOUND naming it if there is none. */
QMAP_API qmap_status qmap_container_find_tensor(const qmap_container *c, const char *name, qmap_tensor_info *out,
                                                qmap_error *err);

/* Hash every tensor's data and compare it with the checksum in the table (spec R-DATA-1), in parallel,
 * as `qmap verify` does; with `full`, also the R-DATA-2 rules (padding bytes, Q8_ROW sums and scales, as
 * `qmap verify --full`). `threads` 0: one per CPU. `status` may be NULL, or receives one code per tensor
 * in table order (caller-owned, tensor_count elements: QMAP_OK, QMAP_ERR_TENSOR_CHECKSUM, with `full`
 * QMAP_ERR_BAD_TENSOR_DATA, QMAP_ERR_PADDING_NONZERO or QMAP_ERR_NONFINITE). Returns QMAP_OK if every tensor passed, else the
 * code of the first failing tensor in table order, with err naming it. */
QMAP_API qmap_status qmap_container_verify(const qmap_container *c, int threads, bool full, qmap_status *status,
                                           qmap_error *err);


/* ---- convert and quantize: write containers ------------------------------------------------------------ */

/* Both write the output atomically: a temporary file beside it, renamed over it once complete; on any
 * failure no output is left and err names the input file, tensor or key at fault. Neither prints. Memory is
 * O(the largest tensor). Their callbacks run on the calling thread, during the call. */

typedef struct qmap_progress {
    uint64_t tensor, n_tensors;          /* the tensor being written (0-based) and how many there are */
    uint64_t bytes_done, bytes_total;    /* tensor data bytes of the output written so far / in all */
    double seconds;                      /* since writing began */
} qmap_progress;

/* Called as the output is written (after each tensor, or more often); may be NULL. */
typedef void (*qmap_progress_fn)(void *user, const qmap_progress *p);

typedef struct qmap_convert_params {
    const char *config_path;             /* NULL: config.json beside the first source (or the dump's manifest) */
    const char *arch;                    /* NULL: from the config or the tensor names; "none": every tensor
                                          * as it is, no architecture (spec/ARCHITECTURES.md §1b) */
    const char *tokenizer_path;          /* NULL: look beside the first source */
    const char *src_tokenizer_path;      /* seq2seq: the source vocabulary (tokenizer.src.*), or NULL */
    const char *tgt_tokenizer_path;      /* seq2seq: the target vocabulary (tokenizer.tgt.*), or NULL */
    bool no_tokenizer;                   /* store no tokenizer */
    qmap_dtype dtype;                    /* of the matrices: QMAP_DTYPE_F32 (default) or QMAP_DTYPE_F16 (1-D
                                          * tensors stay F32); anything else is QMAP_ERR_INVALID_ARGUMENT */
    bool strict;                         /* NaN/Inf in a weight is QMAP_ERR_NONFINITE, not a warning */
    bool allow_large;                    /* accept compressed zip entries that inflate past 64 MiB at more
                                          * than 32x their size */
    uint64_t json_limit;                 /* size cap in bytes of every JSON file read; 0: the defaults (64 MiB
                                          * tokenizer files, 4 config, 16 shard index and manifest) */
    void (*warning)(void *user, const char *message);   /* one line per warning (NaN/Inf copied, ...); may be NULL */
    void *warning_user;
} qmap_convert_params;

/* Fill *p with the defaults above (every pointer NULL, every flag false, dtype F32, json_limit 0). */
QMAP_API void qmap_convert_params_default(qmap_convert_params *p);

/* The largest json_limit qmap_convert_params takes (1 TiB); above it is QMAP_ERR_INVALID_ARGUMENT. */
#define QMAP_CONVERT_JSON_LIMIT_MAX (1ull << 40)

/* The architectures qmap_convert_params.arch names, ", "-separated ("gpt2, gpt_neo, llama, ..."; static). */
QMAP_API const char *qmap_convert_arch_list(void);

typedef struct qmap_convert_result {
    const char *arch;                    /* the architecture written (static string) */
    char input_kind[160];                /* e.g. "safetensors (2 shards)" */
    char config[512];                    /* where the config came from ("" if none) */
    char tokenizer[160];                 /* what tokenizer was stored, and from where ("" if none) */
    uint64_t input_files, input_bytes;
    uint64_t n_tensors, n_params, n_skipped, output_bytes;
    uint64_t nonfinite_values;           /* NaN/Inf values copied (each warned about) */
    uint64_t compressed_bytes;           /* compressed zip entries read: their bytes */
    uint64_t inflated_bytes;             /* ... and what they inflated to */
    bool tied_output;                    /* the output head is the token embedding */
    double seconds, write_seconds;
} qmap_convert_result;

/* Convert a PyTorch export into the container `dst`, as `qmap convert` does: `src` holds n_src >= 1 paths:
 * one torch.save file, safetensors file, .npy/.npz, shard index JSON, model directory or raw dump
 * directory, or several shard files. Pickles are read by a restricted unpickler that runs no code.
 * `params` may be NULL (defaults), `progress` may be NULL, `result` may be NULL (else filled on success). */
QMAP_API qmap_status qmap_convert(const char *const *src, size_t n_src, const char *dst,
                                  const qmap_convert_params *params, qmap_progress_fn progress, void *progress_user,
                                  qmap_convert_result *result, qmap_error *err);

typedef enum qmap_quant_scheme {
    QMAP_QUANT_Q8_ROW = 1,               /* int8 with one f32 scale per row (spec/FORMAT.md 6.1) */
    QMAP_QUANT_F16 = 2,                  /* IEEE half, round to nearest even; a value beyond ±65504 is an error */
} qmap_quant_scheme;

/* qmap_quantize_params.panel_cols: the width each FFN down projection's panels get by default (`qmap
 * quantize --panel-cols auto`). */
#define QMAP_PANEL_COLS_AUTO UINT64_MAX
/* qmap_quantize_params.shards: the largest rank count a layout can be written for. */
#define QMAP_QUANTIZE_SHARDS_MAX 4096

typedef enum qmap_quant_action {
    QMAP_QUANT_QUANTIZED = 1,            /* written in the scheme */
    QMAP_QUANT_KEPT = 2,                 /* a weight matrix a `keep` glob left as it was */
    QMAP_QUANT_COPIED = 3,               /* not a weight matrix: copied byte for byte */
} qmap_quant_action;

/* What quantizing did to one tensor (qmap_quantize_params.on_tensor). */
typedef struct qmap_quantize_tensor {
    const char *name;                    /* valid during the callback only */
    qmap_quant_action action;
    qmap_dtype dtype_in, dtype_out;
    uint32_t rank;
    uint64_t dims[4];                    /* as written: [panels, dim, cols] for a matrix in column panels */
    uint64_t panels;                     /* 1, or the column panels a [dim, ffn] matrix was written in */
    uint64_t bytes_in, bytes_out;
    /* QMAP_QUANT_QUANTIZED only (0 otherwise): */
    uint64_t rows;
    double rel_rms_error;                /* ||w - w'|| / ||w|| (0 when w = 0) */
    double max_abs_error;
    uint64_t outlier_rows;               /* Q8_ROW: rows whose max|w| > 8 x the row's RMS */
} qmap_quantize_tensor;

typedef struct qmap_quantize_params {
    qmap_quant_scheme scheme;            /* default QMAP_QUANT_Q8_ROW */
    const char *const *keep;             /* fnmatch globs on whole tensor names: those tensors are copied */
    size_t n_keep;
    int threads;                         /* 0: one per CPU; the output is the same for any number */
    uint64_t panel_cols;                 /* decoder LMs: write FFN down projections with rows longer than this
                                          * in column panels of this many columns (a multiple of 64 dividing
                                          * ffn; spec/ARCHITECTURES.md §6), 0: as stored, QMAP_PANEL_COLS_AUTO
                                          * (default): as `qmap quantize --help` says */
    /* Called once per tensor, in table order, after the output is complete (the report `qmap quantize`
     * prints); may be NULL. */
    void (*on_tensor)(void *user, const qmap_quantize_tensor *t);
    void *tensor_user;
    uint32_t shards;                     /* decoder LMs: > 0 writes the layout for this many tensor-parallel
                                          * ranks (qmap-mpi), as `qmap quantize --shards` does: each attention
                                          * output in `shards` column panels, each FFN down projection in a
                                          * multiple of it, quantize.shards recorded (spec/ARCHITECTURES.md
                                          * §1a); 0 (default): none */
} qmap_quantize_params;

/* Fill *p with the defaults above. */
QMAP_API void qmap_quantize_params_default(qmap_quantize_params *p);

typedef struct qmap_quantize_result {
    uint64_t n_quantized, n_copied;      /* tensors quantized / copied (kept ones included) */
    uint64_t bytes_in, bytes_out;        /* tensor bytes of the input and of the output */
    double rel_rms_error;                /* ||w - w'|| / ||w|| over every quantized tensor together */
    int threads;
    const char *kernels;                 /* the kernel variant that ran ("avx512", ...; static string) */
    double seconds;
} qmap_quantize_result;

/* Quantize the container `src` into `dst`, as `qmap quantize` does: every tensor of rank >= 2 whose name
 * ends in ".weight" except pos_embd.weight and the `keep` matches becomes Q8_ROW or F16; the rest is copied
 * byte for byte. `params` may be NULL (Q8_ROW, defaults), `progress` and `result` may be NULL. */
QMAP_API qmap_status qmap_quantize(const char *src, const char *dst, const qmap_quantize_params *params,
                                   qmap_progress_fn progress, void *progress_user, qmap_quantize_result *result,
                                   qmap_error *err);

/* ---- experimental: benchmark gauges ------------------------------------------------------------------
 * What `qmap bench` and `qmap run` report beside their figures. Declared only where QMAP_EXPERIMENTAL is
 * defined before this header is included (as zstd's ZSTD_STATIC_LINKING_ONLY): these may change or go in
 * any release, and a program that uses them says so. libqmap always exports them. */
#ifdef QMAP_EXPERIMENTAL

/* Bytes of the model's mapping resident in memory right now (mincore), for reports; 0 if unknown. */
QMAP_API uint64_t qmap_model_resident_bytes(const qmap_model *m);

/* Bytes of the model's mapping mapped by 2 MiB page-table entries right now (Linux: the mapping's
 * FilePmdMapped in /proc/self/smaps), for reports (see qmap_model_open, large_pages). The page cache can
 * split a file's large pages while it runs, so this may fall below what opening gave. UINT64_MAX if unknown
 * (not Linux, no such field, or no mapping: params->no_mmap). */
QMAP_API uint64_t qmap_model_large_page_bytes(const qmap_model *m);

/* The work a session's weight products have done since it was made (qmap_session_reset keeps it), as
 * benchmarks count it: multiply-adds of weight by activation. Attention over the cache is not counted. */
typedef struct qmap_session_counters {
    uint64_t int8_madds;       /* run on int8 (Q8_ROW with int8 activations; two terms count twice) */
    uint64_t float_madds;      /* run on float (F32/F16 weights, Q8_ROW widened) */
} qmap_session_counters;
/* Fill *out (zeros for s = NULL). */
QMAP_API void qmap_session_get_counters(const qmap_session *s, qmap_session_counters *out);
/* Bytes of the KV cache the session's attention has read since it was made (qmap_session_reset keeps the
 * count): for each qmap_eval chunk, every cached position one of its tokens attends to (within a sliding
 * window where the model has one), K and V, once per layer and KV head. A decode step's cache traffic
 * beside its weights' (qmap_model_info.bytes_per_token), as benchmarks count it; 0 for NULL. */
QMAP_API uint64_t qmap_session_kv_bytes_read(const qmap_session *s);

#endif /* QMAP_EXPERIMENTAL */

#ifdef __cplusplus
}
#endif

#endif /* QMAP_H */
