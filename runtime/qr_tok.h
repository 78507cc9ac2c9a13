/* qr_tok.h — the tokenizer stored in a container (spec/TOKENIZER.md), at run time: written from §3 of that
 * document, reading its keys through format/qm_names.h.
 *
 * Kinds: bpe_bytelevel (GPT-2, Llama-3/Qwen style: the pre-split pattern is data), bpe_sentencepiece
 * (▁ for spaces, prepend scheme, byte fallback <0xXX>) and wordlevel. One BPE merge engine serves both BPE
 * kinds: symbols in a linked list, candidate pairs in a min-heap by (rank, position), merge ranks in a hash
 * table built at load — O(n log n) per piece, never a rescan of the piece per merge.
 *
 * Ownership: qr_tok_load allocates the tokenizer (hash tables, the compiled pattern); token strings point
 * into f's mapping, so f must outlive it. A loaded tokenizer is immutable: qr_tok_encode and
 * qr_tok_decode may run in many threads at once (each encode call allocates its own scratch).
 * Normalizer steps (spec §3.1: NFC/NFD/NFKC/NFKD, lowercase) are qr_tok_norm.c's, over utf8proc's tables.
 * Errors: QM_ERR_NOT_FOUND (no tokenizer under the prefix), QM_ERR_UNSUPPORTED (a kind or normalizer step
 * this runtime does not implement), QM_ERR_BAD_CONFIG (keys that break the spec's rules), QM_ERR_BAD_UTF8
 * (input text, naming the byte offset), QM_ERR_NOMEM; each message names the key or offset.
 */
#ifndef QR_TOK_H
#define QR_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qm_error.h"
#include "qm_reader.h"

typedef struct qr_tokenizer qr_tokenizer;

/* Load the tokenizer stored under key prefix `prefix` ("tokenizer.") of the open container f. */
qm_status qr_tok_load(const qm_file *f, const char *prefix, qr_tokenizer **out, qm_error *err);
void qr_tok_free(qr_tokenizer *t);                 /* NULL allowed */
uint32_t qr_tok_n_tokens(const qr_tokenizer *t);
int32_t qr_tok_bos(const qr_tokenizer *t);         /* -1 when not stated */
int32_t qr_tok_eos(const qr_tokenizer *t);
/* The stored string of token id (not NUL-terminated), or NULL if out of range. */
const char *qr_tok_piece(const qr_tokenizer *t, int32_t id, size_t *len);

/* Encode len bytes of UTF-8 text (spec §3.1: added tokens split out first, then the kind's encoding; bos/eos
 * per add_bos/add_eos when add_special). Writes at most cap ids and sets *n_ids to the count the text
 * needs; more than cap is QM_ERR_INVALID_ARGUMENT with *n_ids set. */
qm_status qr_tok_encode(const qr_tokenizer *t, const char *text, size_t len, bool add_special, int32_t *ids,
                        size_t cap, size_t *n_ids, qm_error *err);

/* Streaming decode state (the public qmap_detok has the same layout). */
typedef struct qr_detok { uint8_t pending[8]; uint32_t n_pending; uint32_t flags; } qr_detok;

/* Append the text of token id to out (cap bytes): valid UTF-8 only — bytes of a character split across
 * tokens wait in st; bytes that can never form a character come out as U+FFFD (EF BF BD). cap >= 64 + the
 * longest token's bytes is enough. QM_ERR_INVALID_ARGUMENT for an id out of range or a short buffer
 * (nothing written, st unchanged). */
qm_status qr_tok_decode(const qr_tokenizer *t, qr_detok *st, int32_t id, char *out, size_t cap, size_t *n_out,
                        qm_error *err);
/* Whatever is still pending at the end of a text, as U+FFFD per byte. cap >= 32 is enough. */
size_t qr_tok_decode_flush(qr_detok *st, char *out, size_t cap);

#endif /* QR_TOK_H */
