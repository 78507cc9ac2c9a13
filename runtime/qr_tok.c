/* qr_tok.c — placeholder until the runtime tokenizer lands (issue 12): every stored tokenizer is reported
 * as not yet supported, so models still open and run on token ids. */
#include "qr_tok.h"

#include <stddef.h>

qm_status qr_tok_load(const qm_file *f, const char *prefix, qr_tokenizer **out, qm_error *err)
{
    *out = NULL;
    return qm_fail(err, QM_ERR_UNSUPPORTED, qm_file_path(f), prefix, QM_NO_OFFSET,
                   "the runtime tokenizer is not built yet; run on token ids (--tokens)");
}

void qr_tok_free(qr_tokenizer *t) { (void)t; }

uint32_t qr_tok_n_tokens(const qr_tokenizer *t) { (void)t; return 0; }
