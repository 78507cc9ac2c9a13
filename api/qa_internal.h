/* qa_internal.h — what the api/ files share and nobody outside the library sees.
 *
 * api/ implements include/qmap.h on top of format/ and runtime/. Its internal functions use the prefix qa_
 * and are hidden (only qmap_* symbols are exported from libqmap). A qmap_model owns one qm_file (the
 * mapping), the family's weight views into it, and the tokenizer read from its metadata.
 */
#ifndef QA_INTERNAL_H
#define QA_INTERNAL_H

#include <stdbool.h>

#include "qm_error.h"
/* The library implements the header's experimental section too. */
#ifndef QMAP_EXPERIMENTAL
#define QMAP_EXPERIMENTAL
#endif
#include "qmap.h"
#include "qr_matmul.h"

typedef struct qr_tokenizer qr_tokenizer;

/* The runtime's qr_act (runtime/qr_matmul.h) for a public qmap_act_mode: true and *out set, or false for a
 * value outside the enum. One table for every product the API runs (LM sessions, classifiers,
 * translators). */
bool qa_act_of(qmap_act_mode a, qr_act *out);

/* The model's tokenizer (runtime/qr_tok.h), or NULL when the container has none or it could not be
 * loaded; then qa_model_tokenizer_error says why (NULL when the container simply has none). A model whose
 * tokenizer fails to load still opens: it runs on token ids, and tokenizing reports this error. */
const qr_tokenizer *qa_model_tokenizer(const qmap_model *m);
const char *qa_model_tokenizer_error(const qmap_model *m);

/* Copy an internal error report into a public one (err may be NULL); returns the code. */
qmap_status qa_error_export(qmap_error *err, const qm_error *e);
/* Fill a public error report directly (err may be NULL); returns code. */
qmap_status qa_fail(qmap_error *err, qmap_status code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif /* QA_INTERNAL_H */
