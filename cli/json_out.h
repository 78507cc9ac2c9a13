/* json_out.h — a minimal streaming JSON emitter for the CLI's --json output.
 * Not jansson: jansson's integers are signed 64-bit, and qmap prints u64 offsets, sizes and metadata
 * values exactly. Commas are tracked per nesting level; the caller emits keys and values in order. */
#ifndef QM_JSON_OUT_H
#define QM_JSON_OUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct json_out {
    FILE *fp;
    int depth;
    bool need_comma[64];
} json_out;

void json_begin_object(json_out *j, const char *key); /* key is NULL inside arrays / at top level */
void json_end_object(json_out *j);
void json_begin_array(json_out *j, const char *key);
void json_end_array(json_out *j);
void json_string(json_out *j, const char *key, const char *s, uint64_t len);
void json_cstring(json_out *j, const char *key, const char *s);
void json_u64(json_out *j, const char *key, uint64_t v);
void json_i64(json_out *j, const char *key, int64_t v);
void json_f64(json_out *j, const char *key, double v); /* NaN/Inf become null */
void json_bool(json_out *j, const char *key, bool v);
void json_null(json_out *j, const char *key);

#endif
