/* qm_error.c — status names and error formatting. */
#include "qm_error.h"
#include "qm_format.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct { qm_status code; const char *name; const char *desc; } status_row;

static const status_row status_rows[] = {
#define QM_X_ROW(name, value, desc) { name, #name, desc },
    QM_STATUS_LIST(QM_X_ROW)
#undef QM_X_ROW
};
#define N_STATUS (sizeof status_rows / sizeof status_rows[0])

static const status_row *find_row(qm_status s)
{
    for (size_t i = 0; i < N_STATUS; i++)
        if (status_rows[i].code == s) return &status_rows[i];
    return NULL;
}

const char *qm_status_name(qm_status s)
{
    const status_row *r = find_row(s);
    return r ? r->name : "QM_ERR_UNKNOWN";
}

const char *qm_status_string(qm_status s)
{
    const status_row *r = find_row(s);
    return r ? r->desc : "unknown error";
}

int qm_status_from_name(const char *name)
{
    if (!name) return -1;
    for (size_t i = 0; i < N_STATUS; i++) {
        const char *full = status_rows[i].name;
        if (strcmp(full, name) == 0) return (int)status_rows[i].code;
        if (strncmp(full, "QM_ERR_", 7) == 0 && strcmp(full + 7, name) == 0) return (int)status_rows[i].code;
    }
    return -1;
}

/* Keep a message one printable line of valid UTF-8: names and keys quoted from a file may hold control
 * characters, and a %.200s cut may split a multi-byte character. Offending bytes become '?'. */
static void sanitize(char *m)
{
    unsigned char *p = (unsigned char *)m;
    while (*p) {
        if (*p < 0x20 || *p == 0x7F) { *p++ = '?'; continue; }
        if (*p < 0x80) { p++; continue; }
        size_t len = *p >= 0xF0 ? 4 : *p >= 0xE0 ? 3 : *p >= 0xC0 ? 2 : 1;
        size_t avail = strnlen((const char *)p, len);
        if (avail == len && qm_utf8_valid(p, len, false)) p += len;
        else *p++ = '?';
    }
}

void qm_error_clear(qm_error *err)
{
    if (!err) return;
    err->code = QM_OK;
    err->offset = QM_NO_OFFSET;
    err->field[0] = '\0';
    err->message[0] = '\0';
}

qm_status qm_fail(qm_error *err, qm_status code, const char *file, const char *field, uint64_t offset,
                  const char *fmt, ...)
{
    if (!err) return code;
    err->code = code;
    err->offset = offset;
    snprintf(err->field, sizeof err->field, "%s", field ? field : "");

    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);

    /* "FILE: FIELD at offset N: detail [NAME]" — each part only when known. */
    char file_part[256] = "", loc_part[128] = "";
    if (file && *file) snprintf(file_part, sizeof file_part, "%s: ", file);
    bool has_field = field && *field, has_off = offset != QM_NO_OFFSET;
    if (has_field && has_off)
        snprintf(loc_part, sizeof loc_part, "%s at offset %llu: ", field, (unsigned long long)offset);
    else if (has_field)
        snprintf(loc_part, sizeof loc_part, "%s: ", field);
    else if (has_off)
        snprintf(loc_part, sizeof loc_part, "offset %llu: ", (unsigned long long)offset);
    /* truncation is acceptable: the message is for people */
    if (snprintf(err->message, sizeof err->message, "%s%s%s [%s]", file_part, loc_part, detail, qm_status_name(code)) < 0)
        err->message[0] = 0;
    sanitize(err->message);
    sanitize(err->field);
    return code;
}
