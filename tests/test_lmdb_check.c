/* tests/test_lmdb_check.c - mlajit's checked reader of LMDB data files
 * (cache/lmdb_check.c): it must accept every file LMDB writes (random puts,
 * overwrites and deletes in one or many operations per transaction, inline and
 * overflow values, trees of several levels, freelists), find every key LMDB
 * holds with the same bytes, and on a damaged file refuse or read within
 * bounds - never crash (the sanitizer build runs these too). */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <ftw.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/lmdb_check.h"
#include "mlajit.h"
#include "temp_tree.h"

static char root[64];

static void make_root(void) { temp_tree_make(root, sizeof root, "mlajit-test-lmdb"); }

static void remove_root(void) { temp_tree_remove(root); }

TestSuite(lmdb_check, .init = make_root, .fini = remove_root, .timeout = 300);

static uint64_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A model of what the database holds, to compare the reader with. */
enum { KEYS = 300 };

typedef struct model {
    uint8_t key[KEYS][40];
    unsigned key_len[KEYS];
    int present[KEYS];
    size_t value_len[KEYS];
    unsigned value_seed[KEYS];
} model;

static void fill_value(uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)(seed * 31u + i * 7u + (i >> 11));
}

/* A value size as a cache sees them, and the corners: tiny, just under and
 * over LMDB's inline limit, a few pages, a cubin's size. */
static size_t random_size(uint64_t *s)
{
    switch (next_random(s) % 10) {
    case 0: case 1: case 2: return next_random(s) % 100;
    case 3: case 4: return next_random(s) % 3000;
    case 5: return 1900 + next_random(s) % 400;
    case 6: case 7: return 4000 + next_random(s) % 12000;
    default: return 80000 + next_random(s) % 220000;
    }
}

static int count_visit(const void *key, size_t key_len, const void *value, size_t len, int value_ok, void *arg)
{
    (void)key;
    (void)key_len;
    (void)value;
    (void)len;
    cr_assert(value_ok, "the check visited an entry of a good file as damaged");
    (*(int *)arg)++;
    return 0;
}

static void expect_file_matches_model(const char *path, const model *m, int round)
{
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    struct stat st;
    fstat(fd, &st);
    mlajit_lmdb_meta meta;
    cr_assert_eq(mlajit_lmdb_read_meta(fd, (int64_t)st.st_size, &meta), MLAJIT_OK, "round %d: %s", round,
                 mlajit_last_error());
    int visits = 0;
    mlajit_lmdb_report rep;
    cr_assert_eq(mlajit_lmdb_check(fd, &meta, 0, count_visit, &visits, &rep), MLAJIT_OK,
                 "round %d: a file LMDB wrote failed the check: %s", round, mlajit_last_error());
    int present = 0;
    for (int i = 0; i < KEYS; i++)
        present += m->present[i];
    cr_assert_eq(visits, present, "round %d", round);
    cr_assert_leq(rep.tree_pages + rep.free_pages + 2, rep.pages, "round %d: more pages used than exist", round);
    uint8_t *want = malloc(400000);
    for (int i = 0; i < KEYS; i++) {
        void *v = NULL;
        size_t n = 0;
        int rc = mlajit_lmdb_lookup(fd, &meta, m->key[i], m->key_len[i], &v, &n);
        if (!m->present[i]) {
            cr_assert_eq(rc, MLAJIT_ERR_NOT_FOUND, "round %d: key %d is not there", round, i);
            continue;
        }
        cr_assert_eq(rc, MLAJIT_OK, "round %d: key %d: %s", round, i, mlajit_last_error());
        cr_assert_eq(n, m->value_len[i]);
        fill_value(want, n, m->value_seed[i]);
        cr_assert(n == 0 || memcmp(v, want, n) == 0, "round %d: key %d's bytes differ", round, i);
        free(v);
    }
    free(want);
    close(fd);
}

/* Random work on LMDB itself, the check after every commit. Keys of varying
 * length (the comparison and the branch separators), values from a few bytes to
 * 300 KB, one to 60 operations per transaction (so overflow runs are rewritten in
 * place and left longer than their value needs). */
static void random_workload(uint64_t seed, int rounds, int variable_keys)
{
    char dir[128], path[160];
    snprintf(dir, sizeof dir, "%s/w%llu-%d", root, (unsigned long long)seed, variable_keys);
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    model *m = calloc(1, sizeof *m);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
    for (int i = 0; i < KEYS; i++) {
        m->key_len[i] = variable_keys ? 2 + (unsigned)(next_random(&s) % 38) : 16;
        for (unsigned j = 0; j < m->key_len[i]; j++)
            m->key[i][j] = (uint8_t)next_random(&s);
        m->key[i][0] = (uint8_t)(i >> 8); /* distinct keys */
        m->key[i][1] = (uint8_t)i;
    }
    MDB_env *env;
    cr_assert_eq(mdb_env_create(&env), 0);
    mdb_env_set_mapsize(env, (size_t)1 << 31);
    cr_assert_eq(mdb_env_open(env, dir, MDB_NOSYNC, 0644), 0);
    uint8_t *buf = malloc(400000);
    for (int r = 0; r < rounds; r++) {
        MDB_txn *txn;
        MDB_dbi dbi;
        cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
        cr_assert_eq(mdb_dbi_open(txn, NULL, 0, &dbi), 0);
        int ops = next_random(&s) % 8 == 0 ? 1 + (int)(next_random(&s) % 60) : 1;
        for (int o = 0; o < ops; o++) {
            int i = (int)(next_random(&s) % KEYS);
            MDB_val k = {m->key_len[i], m->key[i]};
            if (next_random(&s) % 10 < 6) {
                size_t n = random_size(&s);
                unsigned vs = (unsigned)next_random(&s);
                fill_value(buf, n, vs);
                MDB_val v = {n, buf};
                cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
                m->present[i] = 1;
                m->value_len[i] = n;
                m->value_seed[i] = vs;
            } else {
                int rc = mdb_del(txn, dbi, &k, NULL);
                cr_assert(rc == 0 || rc == MDB_NOTFOUND);
                m->present[i] = 0;
            }
        }
        cr_assert_eq(mdb_txn_commit(txn), 0);
        if (r % 4 == 0 || r == rounds - 1)
            expect_file_matches_model(path, m, r);
    }
    mdb_env_close(env);
    free(buf);
    free(m);
}

Test(lmdb_check, accepts_every_file_lmdb_writes_and_finds_every_key)
{
    random_workload(1, 500, 0);
    random_workload(2, 500, 1);
}

/* ---- damage --------------------------------------------------------------------- */

typedef struct visit_copy {
    uint8_t key[64][16];
    uint8_t *value[64];
    size_t len[64];
    int count;
} visit_copy;

static int copy_visit(const void *key, size_t key_len, const void *value, size_t len, int value_ok, void *arg)
{
    visit_copy *c = arg;
    if (key_len != 16 || !value_ok || !value || c->count == 64)
        return 0;
    memcpy(c->key[c->count], key, 16);
    c->value[c->count] = malloc(len ? len : 1);
    memcpy(c->value[c->count], value, len);
    c->len[c->count++] = len;
    return 0;
}

static int ignore_visit(const void *key, size_t key_len, const void *value, size_t len, int value_ok, void *arg)
{
    (void)key;
    (void)key_len;
    (void)value;
    (void)len;
    (void)value_ok;
    (void)arg;
    return 0;
}

/* Everything the reader does, on a file that may be damaged: no crash, and
 * what a clean check visited a look-up finds with the same bytes. Returns 1
 * when the check passed. */
static int read_everything(const char *path)
{
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    struct stat st;
    fstat(fd, &st);
    mlajit_lmdb_meta m;
    int clean = 0;
    if (mlajit_lmdb_read_meta(fd, (int64_t)st.st_size, &m) == MLAJIT_OK) {
        visit_copy c = {0};
        clean = mlajit_lmdb_check(fd, &m, MLAJIT_LMDB_VALUES, copy_visit, &c, NULL) == MLAJIT_OK;
        if (!clean)
            cr_assert_neq(mlajit_last_error()[0], '\0', "a refusal says why");
        for (int i = 0; i < c.count; i++) {
            void *v = NULL;
            size_t n = 0;
            int rc = mlajit_lmdb_lookup(fd, &m, c.key[i], 16, &v, &n);
            if (clean)
                cr_assert(rc == MLAJIT_OK && n == c.len[i] && memcmp(v, c.value[i], n) == 0,
                          "the check and a look-up disagree");
            free(v);
            free(c.value[i]);
        }
        mlajit_lmdb_check(fd, &m, MLAJIT_LMDB_VALUES | MLAJIT_LMDB_SALVAGE, ignore_visit, NULL, NULL);
    }
    mlajit_lmdb_scan_leaves(fd, (int64_t)st.st_size, 4096, 16, ignore_visit, NULL);
    close(fd);
    return clean;
}

/* Every page of a file with a two-level tree, a freelist and overflow runs,
 * damaged six ways: the reader never crashes, and a zeroed tree page is
 * always refused (its header no longer names it). */
Test(lmdb_check, every_page_damaged_six_ways_is_read_safely, .timeout = 600)
{
    char dir[128], path[160];
    snprintf(dir, sizeof dir, "%s/d", root);
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    MDB_env *env;
    cr_assert_eq(mdb_env_create(&env), 0);
    mdb_env_set_mapsize(env, (size_t)1 << 28);
    cr_assert_eq(mdb_env_open(env, dir, MDB_NOSYNC, 0644), 0);
    uint64_t s = 99;
    uint8_t value[9000];
    for (int r = 0; r < 140; r++) {
        MDB_txn *txn;
        MDB_dbi dbi;
        mdb_txn_begin(env, NULL, 0, &txn);
        mdb_dbi_open(txn, NULL, 0, &dbi);
        uint8_t key[16];
        for (int j = 0; j < 16; j++)
            key[j] = (uint8_t)next_random(&s);
        size_t n = r % 13 == 0 ? 5000 + r * 20 : 100 + r * 3;
        fill_value(value, n, (unsigned)r);
        MDB_val k = {16, key}, v = {n, value};
        cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
        if (r % 9 == 0) { /* a delete: freelist records */
            MDB_cursor *c;
            mdb_cursor_open(txn, dbi, &c);
            MDB_val ck, cv;
            if (mdb_cursor_get(c, &ck, &cv, MDB_FIRST) == 0)
                mdb_cursor_del(c, 0);
            mdb_cursor_close(c);
        }
        cr_assert_eq(mdb_txn_commit(txn), 0);
    }
    mdb_env_close(env);
    cr_assert(read_everything(path), "the undamaged file checks clean: %s", mlajit_last_error());

    size_t size;
    uint8_t *pristine = read_whole_file(path, &size), *b = malloc(size);
    size_t pages = size / 4096;
    FILE *f;
    int fd = open(path, O_RDONLY);
    mlajit_lmdb_meta meta;
    cr_assert_eq(mlajit_lmdb_read_meta(fd, (int64_t)size, &meta), MLAJIT_OK);
    close(fd);
    cr_assert_gt(meta.main_db.depth, 1, "the fixture has a branch level");
    int refused = 0, runs = 0;
    for (size_t pg = 0; pg < pages; pg++) {
        /* pages the reader must read: the meta pages and both roots (others may be free) */
        int must_read = pg < 2 || pg == meta.main_db.root || pg == meta.free_db.root;
        for (int kind = 0; kind < 6; kind++) {
            memcpy(b, pristine, size);
            uint8_t *p = b + pg * 4096;
            switch (kind) {
            case 0: memset(p, 0, 4096); break;
            case 1: for (int k = 0; k < 16; k++) p[k] = (uint8_t)next_random(&s); break;
            case 2: for (int k = 0; k < 4096; k++) p[k] = (uint8_t)next_random(&s); break;
            case 3: p[12] ^= 0xff; break;                      /* lower */
            case 4: p[14] ^= 0x80; break;                      /* upper */
            default: p[16 + next_random(&s) % 48] ^= 0x55; break; /* a node offset or the meta's fields */
            }
            f = fopen(path, "wb");
            fwrite(b, 1, size, f);
            fclose(f);
            int clean = read_everything(path);
            runs++;
            refused += !clean;
            /* a zeroed root or meta page can never pass */
            if (kind == 0 && must_read)
                cr_assert(!clean, "page %zu zeroed, yet the file checked clean", pg);
        }
    }
    cr_assert_gt(refused, runs / 4, "%d of %d damaged files refused", refused, runs);
    free(pristine);
    free(b);
}

/* Files that are not LMDB files at all: empty, short, all zeros, all ones. */
Test(lmdb_check, files_that_are_not_lmdb_are_refused)
{
    char path[160];
    snprintf(path, sizeof path, "%s/junk.mdb", root);
    size_t sizes[] = {0, 1, 151, 152, 4096, 8191, 8192, 12288, 65536};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (int fill = 0; fill < 3; fill++) {
            uint8_t *b = malloc(sizes[i] + 1);
            for (size_t k = 0; k < sizes[i]; k++)
                b[k] = fill == 0 ? 0 : fill == 1 ? 0xff : (uint8_t)(k * 7);
            FILE *f = fopen(path, "wb");
            fwrite(b, 1, sizes[i], f);
            fclose(f);
            free(b);
            int fd = open(path, O_RDONLY);
            mlajit_lmdb_meta m;
            int rc = mlajit_lmdb_read_meta(fd, (int64_t)sizes[i], &m);
            cr_expect(sizes[i] == 0 ? rc == MLAJIT_ERR_NOT_FOUND : rc == MLAJIT_ERR_CORRUPT,
                      "%zu bytes of fill %d: %d (%s)", sizes[i], fill, rc, mlajit_last_error());
            mlajit_lmdb_scan_leaves(fd, (int64_t)sizes[i], 4096, 16, ignore_visit, NULL);
            close(fd);
        }
    }
}
