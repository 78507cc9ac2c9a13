/* qm_fileio.c — see qm_fileio.h. */
#include "qm_fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

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
        qm_fail(err, QM_ERR_IO, path, NULL, QM_NO_OFFSET, "not a regular file (a FIFO, device, socket or directory)");
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
