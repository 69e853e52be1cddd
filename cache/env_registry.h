/* cache/env_registry.h - one MDB_env per file or directory per process.
 *
 * LMDB forbids opening the same environment twice in one process: its locks are
 * POSIX fcntl locks, which belong to the process, so closing a second MDB_env
 * on the same files silently drops the locks the first one holds. Every store
 * and pack therefore gets its environment from this registry, which hands out
 * one shared, reference-counted MDB_env per (device, inode) of the real path.
 * Internal to cache/. */
#ifndef MLAJIT_CACHE_ENV_REGISTRY_H
#define MLAJIT_CACHE_ENV_REGISTRY_H

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MLAJIT_ENV_MAX_DBS 4

/* A shared environment. Read-only for users after it is handed out. */
typedef struct mlajit_shared_env {
    MDB_env *env;
    unsigned env_flags;              /* the flags mdb_env_open was given */
    MDB_dbi dbi[MLAJIT_ENV_MAX_DBS]; /* opened by the init callback, in its order */
    char *real_path;                 /* realpath() of what was opened, for messages */
    dev_t dev;
    ino_t ino;
    pid_t owner_pid;                 /* an environment is never used across fork() */
    uintptr_t map_base;              /* where the data file is mapped; 0 when unknown */
    int refs;                        /* guarded by the registry mutex */
    struct mlajit_shared_env *next;
} mlajit_shared_env;

/* Called once, under the registry mutex, right after mdb_env_open succeeded
 * for a new environment: open the databases into shared->dbi and check the
 * files. Returns 0 or an LMDB / errno code (the environment is then closed and
 * not registered); may set a message with mlajit_fail first. */
typedef int (*mlajit_env_init_fn)(mlajit_shared_env *shared, void *arg);

typedef struct mlajit_env_request {
    const char *path;       /* a directory, or a file with MDB_NOSUBDIR */
    unsigned env_flags;     /* MDB_RDONLY, MDB_NOSUBDIR, MDB_NOLOCK, ... (MDB_NOTLS is always added) */
    size_t map_size;        /* 0 = leave LMDB's */
    unsigned max_readers;   /* 0 = leave LMDB's */
    unsigned max_dbs;       /* named databases; 0 for the unnamed one only */
    int trusted_bytes;      /* 1: the caller verified every byte (a pack's checksum), so values
                               need no bounds check and the map's address is not looked up */
    mlajit_env_init_fn init;
    void *init_arg;
} mlajit_env_request;

/* Get the process's environment for req->path, opening it when this process
 * has none. An environment already open read-only cannot serve a request for
 * writing: that is refused (MLAJIT_ERR_CACHE) rather than opened twice.
 * Returns an mlajit status with a message naming the path; *lmdb_rc (may be
 * NULL) receives the LMDB / errno code of a failed open (0 otherwise), so the
 * caller can tell a damaged file (MDB_INVALID, ...) from a permission problem. */
int mlajit_env_acquire(const mlajit_env_request *req, mlajit_shared_env **out, int *lmdb_rc);

/* Drop one reference; the last one closes the environment. NULL is allowed. */
void mlajit_env_release(mlajit_shared_env *shared);

/* 1 when the value's bytes lie within the first file_bytes bytes of the data
 * file's mapping (also 1 when the mapping's address is unknown: nothing to
 * check against). A damaged leaf can claim a size that runs past the end of
 * the file, and touching that is SIGBUS, so values are checked before use. */
int mlajit_env_value_in_file(const mlajit_shared_env *shared, const MDB_val *v, int64_t file_bytes);

/* Run fn(arg) under the registry's lock when this process holds no
 * environment on path, so none can be opened meanwhile; returns fn's result,
 * or -1 (fn not run) when one is open. For work on LMDB's files that must not
 * overlap this process's own use of them: opening and closing lock.mdb drops
 * every POSIX lock the process holds on it, LMDB's included. */
int mlajit_env_run_if_unused(const char *path, int (*fn)(void *arg), void *arg);

/* How many environments this process holds open (for tests). */
int mlajit_env_open_count(void);

#endif
