/* json_names.h — jansson's json_string() and json_null() under names nothing else in the qmap binary takes.
 *
 * The qmap command also links cli/json_out.c, a streaming writer whose json_string(json_out *, ...) and
 * json_null(json_out *, ...) carry the same names as jansson's constructors; a call from serve/ to either
 * binds to the command's own definition (the executable's symbol wins) and crashes. serve/ calls these
 * instead. (jansson's internal calls are not affected: the library binds them to itself.) */
#ifndef QS_JSON_NAMES_H
#define QS_JSON_NAMES_H

#include <jansson.h>
#include <string.h>

static inline json_t *qs_json_null(void) { return json_pack("n"); }
static inline json_t *qs_json_str(const char *s) { return json_stringn(s, strlen(s)); }

#endif /* QS_JSON_NAMES_H */
