/* libFuzzer harness: a whole cache data file (data.mdb), as LMDB lays out its
 * pages, through everything that reads or writes one: mlajit's checked reader
 * (meta pages, the structural check, look-ups, the leaf scan), the store (open,
 * every entry, stats, counters, its check, a put and a delete), setting a
 * damaged file aside, and salvage. Nothing may crash or read out of bounds,
 * and three properties must hold:
 *  - the check and a look-up agree: every entry the check visits is found by
 *    a look-up with the same bytes;
 *  - LMDB never writes a file that failed the check (the put is refused);
 *  - a write on a file that passed the check leaves a file that passes it,
 *    holding what was written (else the check missed something LMDB trips on).
 * The corpus (tests/fuzz/corpus/fuzz_cache_file) holds small files written
 * through the store by cache_file_corpus.c: an empty one, inline and overflow
 * values, a two-level tree, freelist records. */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/lmdb_check.h"
#include "cache/store.h"
#include "mlajit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[96];

/* A scratch cache directory, emptied for each input (tmpfs when there is one:
 * LMDB syncs each commit). */
static void reset_dir(void)
{
    if (!dir[0]) {
        setenv("MLAJIT_LOG", "quiet", 1);
        struct stat st;
        snprintf(dir, sizeof dir, "%s/mlajit-fuzz-file-XXXXXX", stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(dir))
            abort();
    }
    DIR *d = opendir(dir);
    if (!d)
        abort();
    struct dirent *e;
    char path[256];
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
}

static void write_data(const uint8_t *data, size_t size)
{
    char path[256];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
        abort();
    close(fd);
}

enum { MAX_KEYS = 8 };

typedef struct seen {
    uint8_t key[MAX_KEYS][16];
    uint8_t *value[MAX_KEYS];
    size_t len[MAX_KEYS];
    int count;
    int leaves;
} seen;

static int keep_entry(const void *key, size_t key_len, const void *value, size_t len, int value_ok, void *arg)
{
    seen *s = arg;
    if (key_len != 16 || !value_ok || !value || s->count == MAX_KEYS)
        return 0;
    memcpy(s->key[s->count], key, 16);
    s->value[s->count] = malloc(len ? len : 1);
    if (!s->value[s->count])
        abort();
    memcpy(s->value[s->count], value, len);
    s->len[s->count++] = len;
    return 0;
}

static int count_leaf_entry(const void *key, size_t key_len, const void *value, size_t len, int value_ok, void *arg)
{
    (void)key;
    (void)key_len;
    (void)len;
    seen *s = arg;
    if (value_ok && value)
        s->leaves++;
    return 0;
}

static void free_seen(seen *s)
{
    for (int i = 0; i < s->count; i++)
        free(s->value[i]);
    memset(s, 0, sizeof *s);
}

/* The reader alone, on the file as given. */
static void read_file_checked(seen *s)
{
    char path[256];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        abort();
    mlajit_lmdb_meta m;
    if (mlajit_lmdb_read_meta(fd, (int64_t)st.st_size, &m) == MLAJIT_OK) {
        mlajit_lmdb_report rep;
        int clean = mlajit_lmdb_check(fd, &m, MLAJIT_LMDB_VALUES, keep_entry, s, &rep) == MLAJIT_OK;
        for (int i = 0; i < s->count; i++) {
            void *v = NULL;
            size_t n = 0;
            int rc = mlajit_lmdb_lookup(fd, &m, s->key[i], 16, &v, &n);
            /* what a clean check visited, a look-up finds with the same bytes */
            if (clean && (rc != MLAJIT_OK || n != s->len[i] || memcmp(v, s->value[i], n) != 0))
                abort();
            free(v);
        }
        seen salvage = {0};
        mlajit_lmdb_check(fd, &m, MLAJIT_LMDB_VALUES | MLAJIT_LMDB_SALVAGE, count_leaf_entry, &salvage, NULL);
        uint8_t absent[16] = {0xff, 1, 2, 3};
        void *v = NULL;
        size_t n = 0;
        mlajit_lmdb_lookup(fd, &m, absent, sizeof absent, &v, &n);
        free(v);
    }
    seen scan = {0};
    mlajit_lmdb_scan_leaves(fd, (int64_t)st.st_size, 4096, 16, count_leaf_entry, &scan);
    close(fd);
}

static int decode_visit(const mlajit_cache_key *key, const void *value, size_t len, void *arg)
{
    (void)key;
    (void)arg;
    mlajit_cache_entry e;
    if (value && mlajit_cache_entry_decode(value, len, &e) == MLAJIT_OK)
        mlajit_cache_entry_clear(&e);
    return 0;
}

static mlajit_cache_entry new_entry(uint8_t *cubin, size_t size)
{
    mlajit_cache_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.spec_string, sizeof e.spec_string, "v32.h16.p64.t64.hc16.sm90-narrow.sm_90a");
    snprintf(e.entry_names, sizeof e.entry_names, "main,combine");
    for (size_t i = 0; i < size; i++)
        cubin[i] = (uint8_t)(i * 13 + 7);
    e.cubin = cubin;
    e.cubin_size = size;
    return e;
}

/* The store on the file: reads, its check, and a put and a delete where the
 * check passed. */
static void use_store(const seen *s)
{
    mlajit_store *st = NULL;
    if (mlajit_store_open_ex(dir, MLAJIT_STORE_KEEP_DAMAGED, &st) != MLAJIT_OK)
        return; /* not a regular file, ...: refused with a message */
    mlajit_store_foreach(st, decode_visit, NULL);
    mlajit_store_stats stats;
    mlajit_store_stats_get(st, &stats);
    mlajit_store_counters c;
    mlajit_store_counters_get(st, &c);
    for (int i = 0; i < s->count; i++) {
        mlajit_cache_entry e;
        if (mlajit_store_get(st, &(mlajit_cache_key){0}, &e) == MLAJIT_OK)
            mlajit_cache_entry_clear(&e);
        mlajit_cache_key k = mlajit_cache_key_from_bytes(s->key[i]);
        if (mlajit_store_get(st, &k, &e) == MLAJIT_OK)
            mlajit_cache_entry_clear(&e);
    }
    mlajit_store_check_report rep;
    mlajit_store_check(st, &rep);
    static uint8_t cubin[6000];
    mlajit_cache_entry e = new_entry(cubin, sizeof cubin);
    mlajit_cache_key fresh = {0x0123456789abcdefull, 0xfedcba9876543210ull};
    mlajit_store_counters delta = {.disk_hits = 1, .contexts = 1};
    int put = mlajit_store_put_counted(st, &fresh, &e, &delta);
    if (rep.damaged && put == MLAJIT_OK)
        abort(); /* LMDB wrote into a file that failed the check */
    if (put == MLAJIT_OK) {
        if (mlajit_store_check(st, &rep) != MLAJIT_OK)
            abort(); /* a write on a checked file must leave a checked file */
        mlajit_cache_entry got;
        if (mlajit_store_get(st, &fresh, &got) != MLAJIT_OK || got.cubin_size != sizeof cubin ||
            memcmp(got.cubin, cubin, sizeof cubin) != 0)
            abort(); /* and hold what was written */
        mlajit_cache_entry_clear(&got);
        if (s->count) {
            mlajit_cache_key gone = mlajit_cache_key_from_bytes(s->key[0]);
            size_t deleted;
            if (mlajit_store_delete_many(st, &gone, 1, &deleted) == MLAJIT_OK && mlajit_store_check(st, &rep) != MLAJIT_OK)
                abort();
        }
    }
    mlajit_store_close(st);
}

/* A library context's view: a damaged file is set aside, then salvaged. */
static void set_aside_and_salvage(const uint8_t *data, size_t size)
{
    reset_dir();
    write_data(data, size);
    mlajit_store *st = NULL;
    if (mlajit_store_open(dir, 0, &st) != MLAJIT_OK)
        return;
    char aside[256];
    snprintf(aside, sizeof aside, "%s/data.mdb.damaged.1", dir);
    struct stat sb;
    if (stat(aside, &sb) == 0) {
        mlajit_store_salvage_report rep;
        mlajit_store_salvage(st, aside, &rep);
        mlajit_store_check_report check;
        if (mlajit_store_check(st, &check) == MLAJIT_ERR_CORRUPT)
            abort(); /* salvage writes through LMDB into a fresh file: it must check clean */
    }
    mlajit_store_close(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reset_dir();
    write_data(data, size);
    seen s = {0};
    read_file_checked(&s);
    use_store(&s);
    free_seen(&s);
    set_aside_and_salvage(data, size);
    return 0;
}
