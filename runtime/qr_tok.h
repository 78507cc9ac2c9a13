/* qr_tok.h — the tokenizer stored in a container (spec/TOKENIZER.md §3), at run time.
 *
 * Contract used by api/qmap_model.c (the model loads its tokenizer through qr_tok_load) and api/
 * qmap_tokenizer.c (the public tokenize/detokenize functions). Helper T12 owns this module.
 */
#ifndef QR_TOK_H
#define QR_TOK_H

#include <stdint.h>

#include "qm_error.h"
#include "qm_reader.h"

typedef struct qr_tokenizer qr_tokenizer;

/* Load the tokenizer stored under key prefix `prefix` ("tokenizer.") of the open container f.
 * QM_ERR_NOT_FOUND if <prefix>kind is absent. Strings may point into f's mapping: f must outlive the
 * tokenizer. Immutable afterwards. */
qm_status qr_tok_load(const qm_file *f, const char *prefix, qr_tokenizer **out, qm_error *err);
void qr_tok_free(qr_tokenizer *t);                 /* NULL allowed */
uint32_t qr_tok_n_tokens(const qr_tokenizer *t);

#endif /* QR_TOK_H */
