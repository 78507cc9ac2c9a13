/* qm_fileio.h — opening an input file so that nothing can hang or be misread: the one helper every module
 * uses to open a file it will read (a container, a checkpoint, a config, a tokenizer, a manifest).
 *
 * open() of a FIFO blocks until a writer appears, and a tar-extracted model directory can hold one: the
 * file is opened with O_NONBLOCK (which makes that open return at once), fstat must then say it is a
 * regular file, and only then is O_NONBLOCK cleared for the reads. Errors: QM_ERR_IO naming the path, with
 * the system's reason, or "not a regular file (a FIFO, device, socket or directory)". The caller owns the
 * returned descriptor (close it).
 */
#ifndef QM_FILEIO_H
#define QM_FILEIO_H

#include <sys/stat.h>

#include "qm_error.h"

/* A read-only descriptor (O_CLOEXEC) of the regular file at path, or -1 with err filled. *st (may be NULL)
 * receives its fstat. */
int qm_open_regular(const char *path, struct stat *st, qm_error *err);

#endif /* QM_FILEIO_H */
