/* qc_tokenizer.h — the tokenizer importer of `qmap convert`.
 *
 * Reads the tokenizer files that sit beside a model (a HF fast-tokenizer tokenizer.json, a SentencePiece
 * tokenizer.model, a GPT-2 slow tokenizer vocab.json + merges.txt, or a plain one-token-per-line
 * vocabulary) and stores the tokenizer as container metadata, so that a .qmap can be run without the
 * original files. spec/TOKENIZER.md defines the
 * metadata keys; a runtime tokenizer is written from that document, not from this code.
 *
 * Everything the metadata will claim is checked at load time (ids 0..n-1 without gaps or duplicates, merges
 * whose parts and results are in the vocabulary, the pre-split pattern compiling under PCRE2), so that a
 * container never carries a tokenizer the runtime would have to reject. Input problems are reported as
 * QM_ERR_BAD_SOURCE (malformed), QM_ERR_UNSUPPORTED (a feature or size qmap does not handle) or
 * QM_ERR_NOMEM, naming the file, the field and, for text files, the byte offset.
 *
 * Ownership: a qc_tokenizer owns all its strings; qc_tokenizer_free() releases them. It is immutable after
 * loading, so any number of threads may read it.
 */
#ifndef QC_TOKENIZER_H
#define QC_TOKENIZER_H

#include <stdint.h>

#include "qm_error.h"
#include "qm_writer.h"

typedef struct qc_tokenizer qc_tokenizer;

/* Caps on inputs (QM_ERR_UNSUPPORTED above them). */
#define QC_TOKENIZER_MAX_VOCAB (1ull << 24)     /* tokens */
#define QC_TOKENIZER_MAX_TOKEN (64u << 10)      /* bytes in one token string */

/* path: a tokenizer.json (HF fast tokenizer: a .json file whose top-level object has "model"), a
 * vocab.json (GPT-2 slow tokenizer: any other .json file; merges.txt must be beside it), a SentencePiece
 * tokenizer.model (any name ending in ".model": a protobuf ModelProto, BPE only, read by qc_spm.h), or a
 * plain text vocabulary (any other name: one token per line, id = line number, e.g. vocab.txt). A
 * tokenizer_config.json and/or special_tokens_map.json beside `path` are read for the special token ids.
 * Every file is read under the size caps of qc_json.h (kind QC_JSON_TOKENIZER; json_limit: the user's
 * --json-limit in bytes, 0 for the defaults), JSON files also under its tree-size estimate.
 * On failure *out is NULL. */
qm_status qc_tokenizer_load(const char *path, uint64_t json_limit, qc_tokenizer **out, qm_error *err);

/* Look in directory `dir` for tokenizer.json, else tokenizer.model, else vocab.json + merges.txt, else
 * vocab.txt, and load the first found. *out = NULL and QM_OK if none is there; QM_ERR_BAD_SOURCE if the only candidate is a
 * vocab.json without its merges.txt. */
qm_status qc_tokenizer_find(const char *dir, uint64_t json_limit, qc_tokenizer **out, qm_error *err);

/* Write the metadata entries of spec/TOKENIZER.md with key prefix `prefix` (e.g. "tokenizer." or
 * "tokenizer.src."), in the order that document lists them. QM_ERR_BAD_KEY if prefix + key would exceed
 * the format's 256-byte key cap; writer errors are passed through. */
qm_status qc_tokenizer_write_meta(const qc_tokenizer *t, qm_writer *w, const char *prefix, qm_error *err);

uint64_t qc_tokenizer_vocab_size(const qc_tokenizer *t);
/* "bpe_bytelevel", "bpe_sentencepiece" or "wordlevel", as in the "kind" key. */
const char *qc_tokenizer_kind(const qc_tokenizer *t);
/* The base names of the files it came from, comma-separated, as in the "source" key. */
const char *qc_tokenizer_source(const qc_tokenizer *t);
void qc_tokenizer_free(qc_tokenizer *t);   /* NULL allowed */

#endif /* QC_TOKENIZER_H */
