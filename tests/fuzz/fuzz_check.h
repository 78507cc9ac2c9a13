/* fuzz_check.h — how a fuzz target reports a violated property, and what every target checks of a
 * failure. Define FUZZ_TARGET (the target's name, "fuzz_npy") before including it.
 *
 * die() prints "FUZZ_TARGET: property violated: WHAT: DETAIL" and aborts, so that libFuzzer records the
 * input as a crash; CHECK(cond, what) dies naming the condition when it does not hold.
 */
#ifndef FUZZ_CHECK_H
#define FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qm_error.h"

#ifndef FUZZ_TARGET
#error "define FUZZ_TARGET before including fuzz_check.h"
#endif

static inline __attribute__((noreturn)) void die(const char *what, const char *detail)
{
    fprintf(stderr, FUZZ_TARGET ": property violated: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

#define CHECK(cond, what) do { if (!(cond)) die((what), #cond); } while (0)

/* A failure: a known status other than QM_OK, equal to err->code, with a non-empty terminated message. */
static inline void check_failure(qm_status st, const qm_error *err)
{
    CHECK(st != QM_OK, "failure reported as QM_OK");
    CHECK(strcmp(qm_status_name(st), "QM_ERR_UNKNOWN") != 0, "known status");
    CHECK(err->code == st, "err.code == returned status");
    CHECK(memchr(err->message, 0, sizeof err->message) && err->message[0], "non-empty terminated message");
}

/* A failed open: check_failure, and the out pointer it was given set to NULL. */
static inline void check_open_failure(qm_status st, const qm_error *err, const void *out)
{
    check_failure(st, err);
    CHECK(out == NULL, "*out is NULL on failure");
}

#endif /* FUZZ_CHECK_H */
