/* qm_fileio.c — see qm_fileio.h. */
#define _GNU_SOURCE /* O_TMPFILE */
#include "qm_fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *qm_file_kind(mode_t mode)
{
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISLNK(mode)) return "a symlink";
    return "not a regular file";
}

int qm_open_regular(const char *path, struct stat *out, qm_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        qm_fail(err, QM_ERR_IO, path, NULL, QM_NO_OFFSET, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        qm_fail(err, QM_ERR_IO, path, NULL, QM_NO_OFFSET, "cannot stat: %s", strerror(e));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        qm_fail(err, QM_ERR_IO, path, NULL, QM_NO_OFFSET, "not a regular file (it is %s)", qm_file_kind(st.st_mode));
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        qm_fail(err, QM_ERR_IO, path, NULL, QM_NO_OFFSET, "cannot clear O_NONBLOCK: %s", strerror(e));
        return -1;
    }
    if (out) *out = st;
    return fd;
}

static qm_status too_large(const char *path, uint64_t size, uint64_t max_bytes, qm_error *err)
{
    return qm_fail(err, QM_ERR_UNSUPPORTED, path, NULL, QM_NO_OFFSET,
                   "%llu bytes%s, above the cap of %llu bytes (%llu MiB) for this input",
                   (unsigned long long)size, size > max_bytes ? "" : " or more", (unsigned long long)max_bytes,
                   (unsigned long long)(max_bytes >> 20));
}

/* Read until end of file or until more than max_bytes have arrived; the size from fstat is only the first
 * guess (the file can grow or shrink while it is read). */
static qm_status read_all(int fd, const char *path, uint64_t size_hint, uint64_t max_bytes, char **out, size_t *len,
                          qm_error *err)
{
    size_t cap = (size_t)(size_hint < max_bytes ? size_hint : max_bytes) + 1, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory for %zu bytes", cap);
    for (;;) {
        if (n == cap) {
            if (n > max_bytes) { free(buf); return too_large(path, n, max_bytes, err); }
            size_t next = cap > (size_t)max_bytes / 2 ? (size_t)max_bytes + 1 : cap * 2;
            char *nb = realloc(buf, next + 1);
            if (!nb) { free(buf); return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory for %zu bytes", next); }
            buf = nb;
            cap = next;
        }
        ssize_t k = read(fd, buf + n, cap - n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { int e = errno; free(buf); return qm_fail(err, QM_ERR_IO, path, NULL, n, "read failed: %s", strerror(e)); }
        if (k == 0) break;
        n += (size_t)k;
    }
    if (n > max_bytes) { free(buf); return too_large(path, n, max_bytes, err); }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return QM_OK;
}

qm_status qm_read_file(const char *path, uint64_t max_bytes, char **out, size_t *len, qm_error *err)
{
    *out = NULL;
    *len = 0;
    if (max_bytes > SIZE_MAX / 2) max_bytes = SIZE_MAX / 2;
    struct stat st;
    int fd = qm_open_regular(path, &st, err);
    if (fd < 0) return err ? err->code : QM_ERR_IO;
    qm_status s = (uint64_t)st.st_size > max_bytes ? too_large(path, (uint64_t)st.st_size, max_bytes, err)
                                                   : read_all(fd, path, (uint64_t)st.st_size, max_bytes, out, len, err);
    close(fd);
    return s;
}

qm_status qm_check_destination(const char *path, qm_error *err)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return QM_OK;
        return qm_fail(err, QM_ERR_IO, path, NULL, QM_NO_OFFSET, "cannot stat the destination: %s", strerror(errno));
    }
    if (S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) return QM_OK;
    return qm_fail(err, QM_ERR_IO, path, NULL, QM_NO_OFFSET,
                   "refusing to replace it: it is %s, not a regular file (writers only replace regular files)",
                   qm_file_kind(st.st_mode));
}

/* A file without a name in the destination's directory (Linux O_TMPFILE): a writer killed at any moment
 * leaves nothing behind, since the file only gets a name once it is complete. -1 (errno) where the
 * filesystem or kernel refuses it; the caller then falls back to a named temporary file. */
static int open_anonymous(const char *path)
{
#ifdef O_TMPFILE
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (slash) {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir) { errno = ENAMETOOLONG; return -1; }
        memcpy(dir, path, n ? n : 1);
        dir[n ? n : 1] = 0;
    } else {
        dir[0] = '.';
        dir[1] = 0;
    }
    return open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
#else
    (void)path;
    errno = EOPNOTSUPP;
    return -1;
#endif
}

/* Create "<dir>/.<base>.tmp.XXXXXX" exclusively (O_EXCL|O_NOFOLLOW: an existing name, a planted symlink
 * included, is never opened; another random name is tried); mode 0666 so the umask applies as for any new
 * file. With fd >= 0, the name is given to that open (anonymous) file with linkat, which also fails on an
 * existing name. */
static int open_temp_as(const char *path, char **tmp_out, int fd_to_link)
{
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path + 1) : 0;
    const char *base = slash ? slash + 1 : path;
    size_t n = strlen(path) + 16;
    char *tmp = malloc(n);
    if (!tmp) { errno = ENOMEM; return -1; }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t seed = (uint64_t)now.tv_sec ^ ((uint64_t)now.tv_nsec << 24) ^ ((uint64_t)getpid() << 20) ^
                    (uint64_t)(uintptr_t)tmp;
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    for (int attempt = 0; attempt < 100; attempt++) {
        char suffix[7];
        for (int i = 0; i < 6; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            suffix[i] = alphabet[(seed >> 33) % 36];
        }
        suffix[6] = 0;
        snprintf(tmp, n, "%.*s.%s.tmp.%s", (int)dir_len, path, base, suffix);
        if (fd_to_link >= 0) {
            char proc[64];
            snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd_to_link);
            if (linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) == 0) { *tmp_out = tmp; return fd_to_link; }
        } else {
            int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
            if (fd >= 0) { *tmp_out = tmp; return fd; }
        }
        if (errno != EEXIST) { int e = errno; free(tmp); errno = e; return -1; }
    }
    free(tmp);
    errno = EEXIST;
    return -1;
}

static void outfile_release(qm_outfile *o)
{
    if (o->fd >= 0) close(o->fd);
    free(o->path);
    free(o->tmp_path);
    o->fd = -1;
    o->path = o->tmp_path = NULL;
    o->anonymous = false;
}

void qm_outfile_abort(qm_outfile *o)
{
    if (!o) return;
    if (o->tmp_path) unlink(o->tmp_path);
    outfile_release(o);
}

const char *qm_outfile_name(const qm_outfile *o) { return o->tmp_path ? o->tmp_path : o->path; }

qm_status qm_outfile_create(qm_outfile *o, const char *path, qm_error *err)
{
    memset(o, 0, sizeof *o);
    o->fd = -1;
    qm_status s = qm_check_destination(path, err);
    if (s != QM_OK) return s;
    if (!(o->path = strdup(path))) return qm_fail(err, QM_ERR_NOMEM, path, NULL, QM_NO_OFFSET, "out of memory");
    o->fd = open_anonymous(path);
    if (o->fd >= 0) {
        o->anonymous = true;
        /* O_TMPFILE ignores the umask on some filesystems: give it the mode a new file would get */
        mode_t um = umask(0);
        umask(um);
        fchmod(o->fd, 0666 & ~um);
    } else {
        o->fd = open_temp_as(path, &o->tmp_path, -1);
    }
    if (o->fd < 0) {
        int e = errno;
        outfile_release(o);
        return qm_fail(err, QM_ERR_IO, path, NULL, QM_NO_OFFSET, "cannot create a temporary file beside it: %s", strerror(e));
    }
    return QM_OK;
}

qm_status qm_outfile_write(qm_outfile *o, const void *buf, size_t len, qm_error *err)
{
    const unsigned char *b = buf;
    while (len) {
        ssize_t k = write(o->fd, b, len);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return qm_fail(err, QM_ERR_IO, qm_outfile_name(o), NULL, QM_NO_OFFSET, "write failed: %s", strerror(errno));
        b += k;
        len -= (size_t)k;
    }
    return QM_OK;
}

static qm_status fsync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path + (slash == path))) : strdup(".");
    if (!dir) return QM_ERR_NOMEM;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0) return QM_ERR_IO;
    int r = fsync(fd);
    close(fd);
    return r == 0 ? QM_OK : QM_ERR_IO;
}

/* Durable before visible: data on disk, then the name, then the directory entry. */
static qm_status outfile_rename(qm_outfile *o, qm_error *err)
{
    if (fsync(o->fd) != 0)
        return qm_fail(err, QM_ERR_IO, qm_outfile_name(o), NULL, QM_NO_OFFSET, "fsync failed: %s", strerror(errno));
    if (o->anonymous && open_temp_as(o->path, &o->tmp_path, o->fd) < 0)   /* rename cannot take an fd */
        return qm_fail(err, QM_ERR_IO, o->path, NULL, QM_NO_OFFSET, "cannot name the finished file: %s", strerror(errno));
    int r = close(o->fd);
    o->fd = -1;
    if (r != 0) return qm_fail(err, QM_ERR_IO, qm_outfile_name(o), NULL, QM_NO_OFFSET, "close failed: %s", strerror(errno));
    qm_status s = qm_check_destination(o->path, err);   /* it may have become a device since create */
    if (s != QM_OK) return s;
    if (rename(o->tmp_path, o->path) != 0)
        return qm_fail(err, QM_ERR_IO, o->path, NULL, QM_NO_OFFSET, "cannot rename the temporary file into place: %s",
                       strerror(errno));
    free(o->tmp_path);
    o->tmp_path = NULL;   /* renamed: nothing to remove any more */
    if (fsync_dir(o->path) != QM_OK)
        return qm_fail(err, QM_ERR_IO, o->path, NULL, QM_NO_OFFSET, "the file is complete but its directory could not be synced");
    return QM_OK;
}

qm_status qm_outfile_commit(qm_outfile *o, qm_error *err)
{
    qm_status s = outfile_rename(o, err);
    qm_outfile_abort(o);   /* removes the temporary file if it still exists */
    return s;
}
