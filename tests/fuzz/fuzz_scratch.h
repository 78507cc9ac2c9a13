/* fuzz_scratch.h — the scratch directory a fuzz target writes its files into: made once per process with
 * mkdtemp as $TMPDIR/qmap-fuzz-NAME-XXXXXX (/tmp when TMPDIR is unset or empty), with `cleanup` (the
 * target's own: it knows which files it leaves) registered with atexit so that a run leaves nothing behind.
 * Returns false when the path does not fit in `size` or mkdtemp fails; `dir` then holds no directory. */
#ifndef FUZZ_SCRATCH_H
#define FUZZ_SCRATCH_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

static inline bool fuzz_scratch_dir(char *dir, size_t size, const char *name, void (*cleanup)(void))
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !tmp[0]) tmp = "/tmp";
    if ((size_t)snprintf(dir, size, "%s/qmap-fuzz-%s-XXXXXX", tmp, name) >= size || !mkdtemp(dir)) return false;
    atexit(cleanup);
    return true;
}

#endif /* FUZZ_SCRATCH_H */
