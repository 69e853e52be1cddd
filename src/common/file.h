/* Internal: opening files that come from outside (packs, cases, the cache's
 * own files) without ever blocking on one that is not a regular file. */
#ifndef MLAJIT_COMMON_FILE_H
#define MLAJIT_COMMON_FILE_H

#include <sys/stat.h>

/* open(path, flags | O_NONBLOCK | O_CLOEXEC, mode), then fstat: a FIFO or a
 * device opens at once instead of waiting for a writer, and anything but a
 * regular file is refused. MLAJIT_OK with *fd (and *st when not NULL);
 * otherwise MLAJIT_ERR_IO with a message that starts with what (e.g. "pack
 * a.pack") and says what the path is, and errno kept (ENOENT, EACCES, ...;
 * EINVAL for a file that is not regular). */
int mlajit_open_regular(const char *path, int flags, int mode, const char *what, int *fd, struct stat *st);

/* "a FIFO", "a directory", "a character device", ... for a stat mode. */
const char *mlajit_file_kind(mode_t mode);

#endif
