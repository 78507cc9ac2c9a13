#include "json_out.h"

#include <math.h>
#include <string.h>

static void raw_string(FILE *fp, const char *s, uint64_t len)
{
    fputc('"', fp);
    for (uint64_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", fp); break;
        case '\\': fputs("\\\\", fp); break;
        case '\n': fputs("\\n", fp); break;
        case '\r': fputs("\\r", fp); break;
        case '\t': fputs("\\t", fp); break;
        default:
            if (c < 0x20) fprintf(fp, "\\u%04x", c); /* NUL included: strings may hold it */
            else fputc(c, fp);                      /* UTF-8 was validated by the reader */
        }
    }
    fputc('"', fp);
}

static void key_only(json_out *j, const char *key)
{
    if (j->need_comma[j->depth]) fputc(',', j->fp);
    j->need_comma[j->depth] = true;
    if (key) { raw_string(j->fp, key, strlen(key)); fputc(':', j->fp); }
}

void jo_string(json_out *j, const char *key, const char *s, uint64_t len)
{
    key_only(j, key);
    raw_string(j->fp, s, len);
}

void jo_cstring(json_out *j, const char *key, const char *s) { jo_string(j, key, s, strlen(s)); }
void jo_begin_object(json_out *j, const char *key) { key_only(j, key); fputc('{', j->fp); j->need_comma[++j->depth] = false; }
void jo_end_object(json_out *j) { j->depth--; fputc('}', j->fp); }
void jo_begin_array(json_out *j, const char *key) { key_only(j, key); fputc('[', j->fp); j->need_comma[++j->depth] = false; }
void jo_end_array(json_out *j) { j->depth--; fputc(']', j->fp); }
void jo_u64(json_out *j, const char *key, uint64_t v) { key_only(j, key); fprintf(j->fp, "%llu", (unsigned long long)v); }
void jo_i64(json_out *j, const char *key, int64_t v) { key_only(j, key); fprintf(j->fp, "%lld", (long long)v); }
void jo_bool(json_out *j, const char *key, bool v) { key_only(j, key); fputs(v ? "true" : "false", j->fp); }
void jo_null(json_out *j, const char *key) { key_only(j, key); fputs("null", j->fp); }
void jo_f64(json_out *j, const char *key, double v)
{
    key_only(j, key);
    if (isfinite(v)) fprintf(j->fp, "%.17g", v);
    else fputs("null", j->fp);
}
