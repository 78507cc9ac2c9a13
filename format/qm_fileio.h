/* qm_fileio.h — opening files so that nothing can hang, be misread or be clobbered: the one helper every
 * module uses to open a file it will read (a container, a checkpoint, a config, a tokenizer, a manifest, a
 * text), and the one every writer uses to replace a file (a container, an .npy of outputs, saved logits,
 * a report).
 *
 * Reading. open() of a FIFO blocks until a writer appears, and a tar-extracted model directory can hold
 * one: the file is opened with O_NONBLOCK (which makes that open return at once), fstat must then say it is
 * a regular file, and only then is O_NONBLOCK cleared for the reads. Errors: QM_ERR_IO naming the path,
 * with the system's reason, or "not a regular file (it is a directory)" (a FIFO, a character device, …).
 * The caller owns the returned descriptor (close it).
 *
 * Writing. A destination is only ever replaced by rename, never written into, and only if it does not
 * exist, is a regular file or is a symlink (rename replaces the link, never what it points to): an existing
 * device node, FIFO, socket or directory is refused before anything is written and again just before the
 * rename, so `-o /dev/null` can never replace the machine's /dev/null. The new file is written without a
 * name (O_TMPFILE in the destination's directory) and named ".<name>.tmp.XXXXXX" with linkat only once
 * complete and fsynced; where the filesystem refuses O_TMPFILE that name is created at the start with
 * O_CREAT|O_EXCL|O_NOFOLLOW. Both fail on any existing name, so a symlink planted at a temporary name is
 * never followed (another random name is tried). Then rename onto the destination and fsync the directory.
 */
#ifndef QM_FILEIO_H
#define QM_FILEIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "qm_error.h"

/* A read-only descriptor (O_CLOEXEC) of the regular file at path, or -1 with err filled. *st (may be NULL)
 * receives its fstat. */
int qm_open_regular(const char *path, struct stat *st, qm_error *err);

/* "a directory", "a FIFO", "a character device", "a block device", "a socket", "a symlink", "a regular
 * file", or "not a regular file" for anything else: for messages. */
const char *qm_file_kind(mode_t mode);

/* The whole regular file at path in a malloc'd buffer with a NUL after its *len bytes (not counted), if it
 * holds at most max_bytes; else QM_ERR_UNSUPPORTED naming the file, its size and the cap (also for a file
 * that grows past the cap while it is read). FIFOs, devices and directories are refused as
 * qm_open_regular does, without reading a byte. On failure *out is NULL. */
qm_status qm_read_file(const char *path, uint64_t max_bytes, char **out, size_t *len, qm_error *err);

/* QM_OK if path may be replaced by a writer: it does not exist, is a regular file or is a symlink;
 * otherwise QM_ERR_IO "refusing to replace it: it is a character device, not a regular file". */
qm_status qm_check_destination(const char *path, qm_error *err);

/* A file being written to replace `path` (see Writing above). Zero-initialise, then create; every created
 * qm_outfile ends in exactly one qm_outfile_commit or qm_outfile_abort, which release it. */
typedef struct qm_outfile {
    int fd;            /* the temporary file being written; -1 once closed */
    char *path;        /* the destination (owned copy) */
    char *tmp_path;    /* the temporary file's name; NULL while it has none (an O_TMPFILE file) */
    bool anonymous;    /* written through O_TMPFILE: named by linkat at commit */
} qm_outfile;

/* Check the destination and create the temporary file beside it (mode 0666 less the umask). */
qm_status qm_outfile_create(qm_outfile *o, const char *path, qm_error *err);
/* Append len bytes (retrying short writes). */
qm_status qm_outfile_write(qm_outfile *o, const void *buf, size_t len, qm_error *err);
/* fsync, name the file if it has no name, check the destination again, rename onto it, fsync the directory.
 * Releases `o` whether or not it succeeds (on failure the temporary file is removed). */
qm_status qm_outfile_commit(qm_outfile *o, qm_error *err);
/* Remove the temporary file and release `o`. A zeroed or released qm_outfile is allowed. */
void qm_outfile_abort(qm_outfile *o);
/* The name to put in a message about the file being written (its temporary name once it has one). */
const char *qm_outfile_name(const qm_outfile *o);

#endif /* QM_FILEIO_H */
