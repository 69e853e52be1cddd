/* cache/env_registry.c - the process-wide registry of open LMDB environments.
 *
 * This list and its mutex are the one piece of process-wide state in cache/,
 * and it is there because LMDB requires it: an environment must be opened at
 * most once per process (its fcntl locks are per process, and closing any
 * descriptor of the lock file drops all of them). Two contexts on the same
 * cache directory, or two packs naming the same file, share one MDB_env here. */
#include "cache/env_registry.h"

#include "common/alloc.h"
#include "common/error.h"
#include "mlajit.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static mlajit_shared_env *registry_head;

/* An entry made before a fork() belongs to the parent: LMDB environments must
 * not be used across fork, so the child opens its own. */
static mlajit_shared_env *registry_find(dev_t dev, ino_t ino)
{
    pid_t self = getpid();
    for (mlajit_shared_env *e = registry_head; e; e = e->next)
        if (e->dev == dev && e->ino == ino && e->owner_pid == self)
            return e;
    return NULL;
}

static void registry_unlink(mlajit_shared_env *target)
{
    for (mlajit_shared_env **p = &registry_head; *p; p = &(*p)->next) {
        if (*p == target) {
            *p = target->next;
            return;
        }
    }
}

/* Where LMDB mapped the data file: LMDB does not say (mdb_env_info's
 * me_mapaddr is only set with MDB_FIXEDMAP), so find the mapping of that file
 * in /proc/self/maps, by device and inode, else by path. 0 when not found. */
static uintptr_t find_map_base(MDB_env *env, const char *data_path)
{
    int fd = -1;
    struct stat st;
    if (mdb_env_get_fd(env, &fd) != 0 || fd < 0 || fstat(fd, &st) != 0)
        return 0;
    FILE *maps = fopen("/proc/self/maps", "re");
    if (!maps)
        return 0;
    uintptr_t by_inode = 0, by_path = 0;
    char line[4096 + 128];
    while (fgets(line, sizeof line, maps)) {
        uintptr_t start, end;
        unsigned long long offset, inode;
        unsigned dev_major, dev_minor;
        char perms[8];
        int path_at = 0;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %llx %x:%x %llu %n", &start, &end, perms, &offset,
                   &dev_major, &dev_minor, &inode, &path_at) < 7 ||
            offset != 0)
            continue;
        if (inode == (unsigned long long)st.st_ino && dev_major == major(st.st_dev) &&
            dev_minor == minor(st.st_dev) && !by_inode)
            by_inode = start;
        char *path = line + path_at;
        path[strcspn(path, "\n")] = '\0';
        if (path_at > 0 && data_path && strcmp(path, data_path) == 0 && !by_path)
            by_path = start;
    }
    fclose(maps);
    return by_inode ? by_inode : by_path;
}

int mlajit_env_value_in_file(const mlajit_shared_env *shared, const MDB_val *v, int64_t file_bytes)
{
    if (!shared || !v || file_bytes < 0)
        return 0;
    if (!shared->map_base)
        return 1;
    uintptr_t p = (uintptr_t)v->mv_data;
    return p >= shared->map_base && (uint64_t)v->mv_size <= (uint64_t)file_bytes &&
           (uint64_t)(p - shared->map_base) <= (uint64_t)file_bytes - v->mv_size;
}

static int open_new_env(const mlajit_env_request *req, const char *real_path, const struct stat *st,
                        mlajit_shared_env **out, int *lmdb_rc)
{
    mlajit_shared_env *shared = mlajit_calloc(1, sizeof *shared);
    char *path_copy = mlajit_strdup(real_path);
    if (!shared || !path_copy) {
        free(shared);
        free(path_copy);
        return mlajit_fail_oom("the LMDB environment of %s", real_path);
    }
    shared->real_path = path_copy;
    shared->dev = st->st_dev;
    shared->ino = st->st_ino;
    shared->owner_pid = getpid();
    shared->env_flags = req->env_flags | MDB_NOTLS;
    shared->refs = 1;

    const char *step = "mdb_env_create";
    int rc = mdb_env_create(&shared->env);
    if (rc != 0)
        shared->env = NULL;
    if (rc == 0 && req->map_size) {
        step = "mdb_env_set_mapsize";
        rc = mdb_env_set_mapsize(shared->env, req->map_size);
    }
    if (rc == 0 && req->max_readers) {
        step = "mdb_env_set_maxreaders";
        rc = mdb_env_set_maxreaders(shared->env, req->max_readers);
    }
    if (rc == 0 && req->max_dbs) {
        step = "mdb_env_set_maxdbs";
        rc = mdb_env_set_maxdbs(shared->env, req->max_dbs);
    }
    if (rc == 0) {
        step = "mdb_env_open";
        rc = mdb_env_open(shared->env, req->path, shared->env_flags, 0644);
    }
    int status = MLAJIT_OK;
    if (rc == 0 && !req->trusted_bytes) {
        char data_path[PATH_MAX + sizeof "/data.mdb"];
        snprintf(data_path, sizeof data_path, (req->env_flags & MDB_NOSUBDIR) ? "%s" : "%s/data.mdb", real_path);
        shared->map_base = find_map_base(shared->env, data_path);
    }
    if (rc != 0) {
        status = mlajit_fail(MLAJIT_ERR_CACHE, "lmdb %s: %s failed: %s", real_path, step, mdb_strerror(rc));
    } else if (req->init) {
        mlajit_clear_error();
        rc = req->init(shared, req->init_arg);
        if (rc != 0) {
            if (mlajit_last_error()[0])
                status = MLAJIT_ERR_CACHE;
            else
                status = mlajit_fail(MLAJIT_ERR_CACHE, "lmdb %s: opening its databases failed: %s", real_path,
                                     mdb_strerror(rc));
        }
    }
    if (lmdb_rc)
        *lmdb_rc = rc;
    if (status != MLAJIT_OK) {
        if (shared->env)
            mdb_env_close(shared->env); /* required even after a failed mdb_env_open */
        free(shared->real_path);
        free(shared);
        return status;
    }
    *out = shared;
    return MLAJIT_OK;
}

int mlajit_env_acquire(const mlajit_env_request *req, mlajit_shared_env **out, int *lmdb_rc)
{
    if (lmdb_rc)
        *lmdb_rc = 0;
    if (!req || !req->path || !out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "lmdb open: request, path and out must not be NULL");
    *out = NULL;

    struct stat st;
    if (stat(req->path, &st) != 0) {
        if (lmdb_rc)
            *lmdb_rc = errno;
        return mlajit_fail(MLAJIT_ERR_IO, "lmdb %s: %s", req->path, strerror(errno));
    }
    char real_path[PATH_MAX]; /* not realpath's own malloc: every allocation is mlajit_malloc's */
    if (!realpath(req->path, real_path)) {
        if (lmdb_rc)
            *lmdb_rc = errno;
        return mlajit_fail(MLAJIT_ERR_IO, "lmdb %s: cannot resolve the real path: %s", req->path, strerror(errno));
    }

    int status = MLAJIT_OK;
    pthread_mutex_lock(&registry_lock);
    mlajit_shared_env *shared = registry_find(st.st_dev, st.st_ino);
    if (shared) {
        int have_rdonly = (shared->env_flags & MDB_RDONLY) != 0;
        int want_rdonly = (req->env_flags & MDB_RDONLY) != 0;
        if (have_rdonly && !want_rdonly)
            status = mlajit_fail(MLAJIT_ERR_CACHE,
                                 "lmdb %s: already open read-only in this process, and LMDB allows one "
                                 "environment per process; open it writable first or close the read-only handles",
                                 real_path);
        else if ((shared->env_flags & MDB_NOSUBDIR) != (req->env_flags & MDB_NOSUBDIR))
            status = mlajit_fail(MLAJIT_ERR_CACHE,
                                 "lmdb %s: already open in this process as a %s", real_path,
                                 (shared->env_flags & MDB_NOSUBDIR) ? "single file" : "directory");
        else
            shared->refs++;
    } else {
        status = open_new_env(req, real_path, &st, &shared, lmdb_rc);
        if (status == MLAJIT_OK) {
            shared->next = registry_head;
            registry_head = shared;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    if (status != MLAJIT_OK)
        return status;
    *out = shared;
    return MLAJIT_OK;
}

void mlajit_env_release(mlajit_shared_env *shared)
{
    if (!shared)
        return;
    pthread_mutex_lock(&registry_lock);
    int last = --shared->refs == 0;
    if (last)
        registry_unlink(shared);
    pthread_mutex_unlock(&registry_lock);
    if (!last)
        return;
    mdb_env_close(shared->env);
    free(shared->real_path);
    free(shared);
}

int mlajit_env_run_if_unused(const char *path, int (*fn)(void *arg), void *arg)
{
    struct stat st;
    int have = stat(path, &st) == 0;
    pthread_mutex_lock(&registry_lock);
    int rc = have && registry_find(st.st_dev, st.st_ino) ? -1 : fn(arg);
    pthread_mutex_unlock(&registry_lock);
    return rc;
}

int mlajit_env_open_count(void)
{
    int n = 0;
    pthread_mutex_lock(&registry_lock);
    pid_t self = getpid();
    for (mlajit_shared_env *e = registry_head; e; e = e->next)
        n += e->owner_pid == self;
    pthread_mutex_unlock(&registry_lock);
    return n;
}
