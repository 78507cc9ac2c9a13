/* qm_error.h — status codes and error reports shared by every qmap module.
 *
 * Contract: every fallible qmap function returns a qm_status. QM_OK (0) is success; any other value is
 * an error whose name and generic description never change once released (codes are append-only).
 * Functions that take a `qm_error *err` fill it on failure (when err is not NULL) with the code, the
 * file offset the problem was found at, the field, and a one-line message that names the file, the field
 * and the offset. The library never prints and never exits.
 */
#ifndef QM_ERROR_H
#define QM_ERROR_H

#include <stdint.h>

#include "qmap_errors.h"

/* The list lives in include/qmap_errors.h (the public header); here each code is QM_<NAME>. */
#define QM_STATUS_LIST(X) QMAP_STATUS_LIST(X, QM_)

typedef enum qm_status {
#define QM_X_ENUM(name, value, desc) name = value,
    QM_STATUS_LIST(QM_X_ENUM)
#undef QM_X_ENUM
} qm_status;

#define QM_NO_OFFSET UINT64_MAX

typedef struct qm_error {
    qm_status code;
    uint64_t offset;     /* file offset the error refers to, or QM_NO_OFFSET */
    char field[64];      /* e.g. "header.alignment", "tensor[3].dims[1]" ("" if none) */
    char message[640];   /* "FILE: FIELD at offset N: what is wrong [QM_ERR_NAME]": one line of valid
                          * UTF-8 (control bytes from quoted names become '?'), truncated to fit */
} qm_error;

/* "QM_ERR_BAD_MAGIC"; "QM_ERR_UNKNOWN" for a value outside the list. Never NULL. */
const char *qm_status_name(qm_status s);
/* The short description from the list. Never NULL. */
const char *qm_status_string(qm_status s);
/* Look a status up by its name ("QM_ERR_BAD_MAGIC" or "BAD_MAGIC"); -1 if unknown. For tests and tools. */
int qm_status_from_name(const char *name);

/* Fill *err (if not NULL) and return `code`. `file` may be NULL, `field` may be NULL or "",
 * `offset` may be QM_NO_OFFSET. The message is printf-formatted and appended after the location. */
qm_status qm_fail(qm_error *err, qm_status code, const char *file, const char *field, uint64_t offset,
                  const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;

/* Reset *err to "no error" (code QM_OK, empty strings). */
void qm_error_clear(qm_error *err);

#endif /* QM_ERROR_H */
