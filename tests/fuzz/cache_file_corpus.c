/* Writes the seed corpus of fuzz_cache_file: small cache data files made
 * through the store, one per shape of LMDB file the cache has. Run it with the
 * corpus directory as its argument (it is built with -Dfuzzers=true):
 *   ./build-asan/tests/fuzz/cache_file_corpus tests/fuzz/corpus/fuzz_cache_file
 * Deterministic: the same files each time (made-up cubins, fixed keys). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/store.h"
#include "mlajit.h"

static mlajit_cache_key key_of(unsigned n)
{
    char source[64];
    snprintf(source, sizeof source, "constexpr int kCorpus = %u;", n);
    mlajit_key_inputs in = {.source = source, .arch = "sm_90a", .nvrtc_major = 12, .nvrtc_minor = 8};
    return mlajit_cache_key_make(&in);
}

static void put(mlajit_store *st, unsigned n, size_t cubin_size, const mlajit_store_counters *delta)
{
    mlajit_cache_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.spec_string, sizeof e.spec_string, "v32.h%u.p64.t64.hc16.sm90-narrow.sm_90a", 1 + n % 128);
    snprintf(e.entry_names, sizeof e.entry_names, "main,combine");
    e.compile_ms = 500;
    e.registers = 128;
    e.created_unix = 1700000000u + n;
    e.cubin_size = cubin_size;
    e.cubin = malloc(cubin_size ? cubin_size : 1);
    for (size_t i = 0; i < cubin_size; i++)
        ((unsigned char *)e.cubin)[i] = (unsigned char)(i * 31 + n);
    mlajit_cache_key k = key_of(n);
    if (mlajit_store_put_counted(st, &k, &e, delta) != MLAJIT_OK) {
        fprintf(stderr, "put: %s\n", mlajit_last_error());
        exit(1);
    }
    mlajit_cache_entry_clear(&e);
}

/* Make one file with fill() and copy its data.mdb to out/name. */
static void make(const char *out, const char *name, void (*fill)(mlajit_store *))
{
    char dir[] = "/tmp/mlajit-corpus-XXXXXX", cmd[512];
    if (!mkdtemp(dir))
        exit(1);
    mlajit_store *st;
    if (mlajit_store_open(dir, 0, &st) != MLAJIT_OK)
        exit(1);
    fill(st);
    mlajit_store_close(st);
    snprintf(cmd, sizeof cmd, "cp '%s/data.mdb' '%s/%s' && rm -rf '%s'", dir, out, name, dir);
    if (system(cmd) != 0)
        exit(1);
}

static void empty(mlajit_store *st)
{
    mlajit_store_counters c = {.disk_hits = 1, .contexts = 1};
    mlajit_store_counters_add(st, &c); /* the smallest file: two meta pages and one leaf */
}

static void one_inline(mlajit_store *st)
{
    mlajit_store_counters c = {.compiles = 1, .contexts = 1};
    put(st, 1, 1500, &c);
}

/* The shape: a compiled kernel with the counters, then a second
 * transaction (a freelist record and a new main root). */
static void one_overflow_then_counters(mlajit_store *st)
{
    mlajit_store_counters c = {.compiles = 1, .contexts = 1};
    put(st, 2, 9000, &c);
    mlajit_store_counters more = {.disk_hits = 3};
    mlajit_store_counters_add(st, &more);
}

/* Enough keys for a branch page over several leaves, and deletes for
 * freelist records of several transactions. */
static void two_levels(mlajit_store *st)
{
    for (unsigned i = 0; i < 90; i++)
        put(st, 100 + i, 200 + (i % 7) * 40, NULL);
    put(st, 300, 5000, NULL);
    mlajit_cache_key gone[12];
    for (unsigned i = 0; i < 12; i++)
        gone[i] = key_of(100 + 7 * i);
    size_t n;
    mlajit_store_delete_many(st, gone, 12, &n);
    put(st, 301, 300, NULL);
}

static void overwrites(mlajit_store *st)
{
    for (unsigned round = 0; round < 4; round++)
        for (unsigned i = 0; i < 3; i++)
            put(st, 400 + i, 4500 + round * 1000 + i, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: cache_file_corpus OUT_DIR\n");
        return 2;
    }
    setenv("MLAJIT_LOG", "quiet", 1);
    make(argv[1], "empty-counters.mdb", empty);
    make(argv[1], "one-inline.mdb", one_inline);
    make(argv[1], "one-overflow-then-counters.mdb", one_overflow_then_counters);
    make(argv[1], "two-levels-with-freelist.mdb", two_levels);
    make(argv[1], "overwrites.mdb", overwrites);
    return 0;
}
