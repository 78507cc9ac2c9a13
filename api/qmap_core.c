/* qmap_core.c — version, status names and the error plumbing of the public API. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "qa_internal.h"
#include "qm_guard.h"
#include "qm_version.h"

const char *qmap_version(void) { return QMAP_VERSION; }

typedef struct { qmap_status code; const char *name; } status_row;

/* The public spelling of each code's name (QMAP_ERR_…); the descriptions are format/'s. */
static const status_row status_rows[] = {
#define QA_X_ROW(name, value, desc) { name, #name },
    QMAP_STATUS_LIST(QA_X_ROW, QMAP_)
#undef QA_X_ROW
};

static const status_row *find_row(qmap_status s)
{
    for (size_t i = 0; i < sizeof status_rows / sizeof status_rows[0]; i++)
        if (status_rows[i].code == s) return &status_rows[i];
    return NULL;
}

const char *qmap_status_name(qmap_status s)
{
    const status_row *r = find_row(s);
    return r ? r->name : "QMAP_ERR_UNKNOWN";
}

const char *qmap_status_string(qmap_status s)
{
    return qm_status_string((qm_status)s);   /* one list, one description table */
}

/* The two lists are one (qmap_errors.h), so a qm_status converts by value. */
qmap_status qa_error_export(qmap_error *err, const qm_error *e)
{
    qmap_status code = (qmap_status)e->code;
    if (err) {
        err->code = code;
        snprintf(err->message, sizeof err->message, "%s", e->message);
    }
    return code;
}

qmap_status qmap_exit_on_mapped_file_change(const char *message, int exit_status)
{
    qm_guard_exit_on_unguarded(message ? message : QMAP_MAPPED_FILE_CHANGED, exit_status);
    return QMAP_OK;
}

bool qa_act_of(qmap_act_mode a, qr_act *out)
{
    switch (a) {
    case QMAP_ACT_AUTO: *out = QR_ACT_AUTO; return true;
    case QMAP_ACT_INT8: *out = QR_ACT_INT8; return true;
    case QMAP_ACT_F32: *out = QR_ACT_F32; return true;
    case QMAP_ACT_INT8X2: *out = QR_ACT_INT8X2; return true;
    case QMAP_ACT_PRECISE: *out = QR_ACT_AUTO; return true; /* differs from AUTO in an LM session's prompts
                                                              * only (qmap_session.c: one_term_prompts) */
    }
    return false;
}

qmap_status qa_fail(qmap_error *err, qmap_status code, const char *fmt, ...)
{
    if (!err) return code;
    err->code = code;
    char detail[560];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    /* same shape as the library's other messages: "...: detail [QM_ERR_NAME]" */
    qm_error tmp;
    qm_fail(&tmp, (qm_status)code, NULL, NULL, QM_NO_OFFSET, "%s", detail);
    snprintf(err->message, sizeof err->message, "%s", tmp.message);
    return code;
}
