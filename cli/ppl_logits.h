/* ppl_logits.h — the log-probabilities `qmap perplexity --save-logits` keeps for a later --kl-base.
 *
 * A run saves, for every scored token, the log-softmax of its logits (n_vocab float32), so that a later run
 * of another model (a quantized copy) on the same text can be compared without loading both models at
 * once. The file says what it was computed on, and a reader refuses another text, tokenizer, context or
 * vocabulary:
 *
 *   offset  size  field (little-endian)
 *   0       8     magic "QMAPLOGP"
 *   8       4     version, 1
 *   12      4     n_vocab
 *   16      4     ctx: tokens per window
 *   20      4     first: the first scored position of a window (ctx / 2); positions first .. ctx-2 are scored
 *   24      8     n_chunks: windows
 *   32      8     tokens_hash: FNV-1a 64 over the little-endian int32 ids of every window as evaluated
 *                 (BOS substitution included): the same text, tokenizer, ctx and window count, or not
 *   40      24    reserved, zero
 *   64      ...   n_chunks × (ctx − 1 − first) × n_vocab float32 log-probabilities, window by window
 *
 * The writer writes a temporary file beside the target, fsyncs it and renames it over the target; a failed
 * or interrupted run leaves no file. Ownership: each handle owns its FILE and buffers; close/abort free it.
 */
#ifndef QM_CLI_PPL_LOGITS_H
#define QM_CLI_PPL_LOGITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PPL_LOGITS_HEADER 64u

typedef struct ppl_logits_meta {
    uint32_t n_vocab, ctx, first;
    uint64_t n_chunks, tokens_hash;
} ppl_logits_meta;

/* FNV-1a 64 of n ids, continuing from h (start with PPL_FNV_START). */
#define PPL_FNV_START 0xcbf29ce484222325ull
uint64_t ppl_hash_ids(uint64_t h, const int32_t *ids, size_t n);

typedef struct ppl_logits_writer ppl_logits_writer;

/* Start writing `path` (through a temporary file). NULL with a message in msg (msg_cap bytes) on failure. */
ppl_logits_writer *ppl_logits_create(const char *path, const ppl_logits_meta *meta, char *msg, size_t msg_cap);
/* Append one token's log-softmax of `logits` (n_vocab floats). false with msg on a write error. */
bool ppl_logits_put(ppl_logits_writer *w, const float *logits, char *msg, size_t msg_cap);
/* Check every token was written, fsync, rename over the target; frees w. false with msg. */
bool ppl_logits_finish(ppl_logits_writer *w, char *msg, size_t msg_cap);
/* Drop the temporary file and free w; NULL allowed. */
void ppl_logits_abort(ppl_logits_writer *w);

typedef struct ppl_logits_reader ppl_logits_reader;

/* True if `path` starts with the magic (so --kl-base can take a file of either kind). */
bool ppl_logits_sniff(const char *path);
/* Open and check the header against `want` (every field) and the file size against the counts. NULL with
 * a message saying what differs. */
ppl_logits_reader *ppl_logits_open(const char *path, const ppl_logits_meta *want, char *msg, size_t msg_cap);
/* The next token's n_vocab log-probabilities (owned by the reader, valid until the next call). NULL with
 * msg on a read error. */
const float *ppl_logits_next(ppl_logits_reader *r, char *msg, size_t msg_cap);
void ppl_logits_close(ppl_logits_reader *r);

#endif
