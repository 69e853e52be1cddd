/* Opening files from outside without blocking; see file.h. */
#include "common/file.h"

#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

const char *mlajit_file_kind(mode_t mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

int mlajit_open_regular(const char *path, int flags, int mode, const char *what, int *fd, struct stat *st)
{
    *fd = -1;
    struct stat sb;
    int f = open(path, flags | O_NONBLOCK | O_CLOEXEC, mode);
    if (f < 0) {
        int err = errno;
        if (err == EISDIR) {
            mlajit_fail(MLAJIT_ERR_IO, "%s: is a directory, not a regular file", what);
            errno = EINVAL;
        } else {
            mlajit_fail(MLAJIT_ERR_IO, "%s: cannot open: %s", what, strerror(err));
            errno = err;
        }
        return MLAJIT_ERR_IO;
    }
    if (fstat(f, &sb) != 0) {
        int err = errno;
        close(f);
        mlajit_fail(MLAJIT_ERR_IO, "%s: cannot stat: %s", what, strerror(err));
        errno = err;
        return MLAJIT_ERR_IO;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        mlajit_fail(MLAJIT_ERR_IO, "%s: is %s, not a regular file; mlajit reads only regular files", what,
                    mlajit_file_kind(sb.st_mode));
        errno = EINVAL;
        return MLAJIT_ERR_IO;
    }
    /* Back to blocking reads: the flag means nothing for a regular file, but
     * leave nothing surprising on the descriptor. */
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0)
        fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    if (st)
        *st = sb;
    return MLAJIT_OK;
}
