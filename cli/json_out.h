/* json_out.h — a minimal streaming JSON emitter for the CLI's --json output.
 * Not jansson: jansson's integers are signed 64-bit, and qmap prints u64 offsets, sizes and metadata
 * values exactly. Commas are tracked per nesting level; the caller emits keys and values in order.
 * The functions are jo_*, not json_*: the qmap binary also links jansson, and a definition here named like
 * one of jansson's (json_string, json_null) would take the place of jansson's for every caller in it. */
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

void jo_begin_object(json_out *j, const char *key); /* key is NULL inside arrays / at top level */
void jo_end_object(json_out *j);
void jo_begin_array(json_out *j, const char *key);
void jo_end_array(json_out *j);
void jo_string(json_out *j, const char *key, const char *s, uint64_t len);
void jo_cstring(json_out *j, const char *key, const char *s);
void jo_u64(json_out *j, const char *key, uint64_t v);
void jo_i64(json_out *j, const char *key, int64_t v);
void jo_f64(json_out *j, const char *key, double v); /* NaN/Inf become null */
void jo_bool(json_out *j, const char *key, bool v);
void jo_null(json_out *j, const char *key);

#endif
