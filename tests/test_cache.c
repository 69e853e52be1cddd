/* tests/test_cache.c - the cubin store: keys, the value format, LMDB behaviour. */
#include <criterion/criterion.h>

#include "cache/store.h"
#include "common/error.h"
#include "mlajit.h"
#include "temp_tree.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------- */
/* Fixture: every test gets its own temporary directory (tests run in forked   */
/* processes, so this per-process state is not shared between tests).         */
/* ------------------------------------------------------------------------- */

static char test_root[64];

static void make_test_root(void) { temp_tree_make(test_root, sizeof test_root, "mlajit-test-cache"); }

static void remove_test_root(void) { temp_tree_remove(test_root); }

TestSuite(cache, .init = make_test_root, .fini = remove_test_root);

/* A path under this test's root. */
static void root_path(char *buf, size_t len, const char *name)
{
    int n = snprintf(buf, len, "%s/%s", test_root, name);
    cr_assert(n > 0 && (size_t)n < len, "path too long");
}

static mlajit_store *open_store(const char *name)
{
    char dir[256];
    root_path(dir, sizeof dir, name);
    mlajit_store *store = NULL;
    int status = mlajit_store_open(dir, 0, &store);
    cr_assert_eq(status, MLAJIT_OK, "open %s: %s", dir, mlajit_last_error());
    cr_assert_not_null(store);
    return store;
}

/* A deterministic entry whose every field depends on seed. The cubin is owned
 * by the caller (free with mlajit_cache_entry_clear). */
static mlajit_cache_entry make_entry(unsigned seed, size_t cubin_size)
{
    mlajit_cache_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.spec_string, sizeof e.spec_string, "v32.h%u.p64.t64.hc32.portable.sm_90a", seed);
    snprintf(e.entry_names, sizeof e.entry_names, "mlajit_decode_%u,mlajit_combine_%u", seed, seed);
    e.compile_ms = 123.456 + seed;
    e.registers = 168 + (int)seed;
    e.shared_bytes = 65536 + (int)seed;
    e.spill_bytes = (int)seed % 7;
    e.launch = (mlajit_launch_record){.threads = 384 + (int)seed, .smem_bytes = 201040 + (int)seed,
                                      .combine_threads = 128 + (int)seed, .combine_smem_bytes = 65536 - (int)seed,
                                      .cluster_dims = {1, 1 + (int)seed % 2, 1},
                                      .params_layout_hash = 0x0123456789abcdefull * (seed + 1)};
    e.created_unix = 1700000000ull + seed;
    e.cubin_size = cubin_size;
    e.cubin = malloc(cubin_size ? cubin_size : 1);
    cr_assert_not_null(e.cubin);
    uint8_t *bytes = e.cubin;
    for (size_t i = 0; i < cubin_size; i++)
        bytes[i] = (uint8_t)(i * 31u + seed * 7u + (i >> 8));
    return e;
}

static void assert_entries_equal(const mlajit_cache_entry *got, const mlajit_cache_entry *want)
{
    cr_assert_str_eq(got->spec_string, want->spec_string);
    cr_assert_str_eq(got->entry_names, want->entry_names);
    cr_assert_eq(memcmp(&got->compile_ms, &want->compile_ms, sizeof got->compile_ms), 0,
                 "compile_ms %f != %f", got->compile_ms, want->compile_ms);
    cr_assert_eq(got->registers, want->registers);
    cr_assert_eq(got->shared_bytes, want->shared_bytes);
    cr_assert_eq(got->spill_bytes, want->spill_bytes);
    cr_assert_eq(memcmp(&got->launch, &want->launch, sizeof got->launch), 0, "the launch record differs");
    cr_assert_eq(got->created_unix, want->created_unix);
    cr_assert_eq(got->cubin_size, want->cubin_size);
    cr_assert_not_null(got->cubin);
    cr_assert_eq(memcmp(got->cubin, want->cubin, want->cubin_size), 0, "cubin bytes differ");
}

static mlajit_cache_key key_of(unsigned n)
{
    char source[64];
    snprintf(source, sizeof source, "constexpr int kSource = %u;", n);
    mlajit_key_inputs in = {
        .source = source, .arch = "sm_90a", .nvrtc_major = 12, .nvrtc_minor = 8, .compile_options = "-O3",
    };
    return mlajit_cache_key_make(&in);
}

static int keys_equal(mlajit_cache_key a, mlajit_cache_key b) { return a.hi == b.hi && a.lo == b.lo; }

/* Byte offset of the header checksum (the header length is the u32 at 12). */
static size_t header_len_of(const uint8_t *value)
{
    return (size_t)value[12] | (size_t)value[13] << 8 | (size_t)value[14] << 16 | (size_t)value[15] << 24;
}

static void rewrite_header_checksum(uint8_t *value)
{
    size_t h = header_len_of(value);
    uint64_t sum = mlajit_hash64(value, h - 8);
    for (int i = 0; i < 8; i++)
        value[h - 8 + i] = (uint8_t)(sum >> (8 * i));
}

/* Plant raw bytes under key, expect the refusal (CORRUPT, or STALE for an intact
 * entry of another format) with a message, then repair with a put. */
static void expect_refused_then_repair(mlajit_store *store, const mlajit_cache_key *key, const void *raw,
                                       size_t raw_len, const mlajit_cache_entry *good, const char *what, int refusal)
{
    cr_assert_eq(mlajit_store_put_raw(store, key, raw, raw_len), MLAJIT_OK, "%s: put_raw: %s", what,
                 mlajit_last_error());
    mlajit_cache_entry got;
    mlajit_clear_error();
    int status = mlajit_store_get(store, key, &got);
    cr_assert_eq(status, refusal, "%s: get returned %d, want %d", what, status, refusal);
    cr_assert_gt(strlen(mlajit_last_error()), 0, "%s: no error message", what);
    cr_assert_null(got.cubin, "%s: a failed get must not hand back a cubin", what);

    cr_assert_eq(mlajit_store_put(store, key, good), MLAJIT_OK, "%s: repair put: %s", what,
                 mlajit_last_error());
    cr_assert_eq(mlajit_store_get(store, key, &got), MLAJIT_OK, "%s: get after repair: %s", what,
                 mlajit_last_error());
    assert_entries_equal(&got, good);
    mlajit_cache_entry_clear(&got);
}

static void expect_corrupt_then_repair(mlajit_store *store, const mlajit_cache_key *key, const void *raw,
                                       size_t raw_len, const mlajit_cache_entry *good, const char *what)
{
    expect_refused_then_repair(store, key, raw, raw_len, good, what, MLAJIT_ERR_CORRUPT);
}

/* ------------------------------------------------------------------------- */
/* Keys                                                                       */
/* ------------------------------------------------------------------------- */

static mlajit_key_inputs base_inputs(void)
{
    mlajit_key_inputs in = {
        .source = "#define MLAJIT_SPEC \"v32.h128.p64.t64.hc32.portable.sm_90a\"\nnamespace cfg {\n}\n",
        .arch = "sm_90a",
        .nvrtc_major = 12,
        .nvrtc_minor = 8,
        .compile_options = "--std=c++17 -arch=sm_90a",
    };
    return in;
}

Test(cache, key_equal_for_equal_inputs_at_distinct_pointers)
{
    mlajit_key_inputs a = base_inputs();
    char *source = strdup(a.source), *arch = strdup(a.arch), *opts = strdup(a.compile_options);
    cr_assert(source && arch && opts);
    mlajit_key_inputs b = a;
    b.source = source;
    b.arch = arch;
    b.compile_options = opts;
    cr_assert_neq(a.source, b.source);

    mlajit_cache_key ka = mlajit_cache_key_make(&a), kb = mlajit_cache_key_make(&b);
    cr_assert_eq(ka.hi, kb.hi);
    cr_assert_eq(ka.lo, kb.lo);
    cr_assert(ka.hi != 0 || ka.lo != 0);
    free(source);
    free(arch);
    free(opts);
}

Test(cache, key_changes_with_every_input)
{
    enum { VARIANTS = 8 };
    mlajit_key_inputs variants[VARIANTS];
    for (int i = 0; i < VARIANTS; i++)
        variants[i] = base_inputs();
    variants[1].source = "#define MLAJIT_SPEC \"v32.h128.p64.t64.hc16.portable.sm_90a\"\nnamespace cfg {\n}\n";
    variants[2].source = "#define MLAJIT_SPEC \"v32.h128.p64.t64.hc32.portable.sm_90a\"\nnamespace cfg {\n}\n\n";
    variants[3].source = "";
    variants[4].arch = "sm_80";
    variants[5].nvrtc_major = 13;
    variants[6].nvrtc_minor = 9;
    variants[7].compile_options = "--std=c++17 -arch=sm_90a -lineinfo";

    mlajit_cache_key keys[VARIANTS];
    for (int i = 0; i < VARIANTS; i++)
        keys[i] = mlajit_cache_key_make(&variants[i]);
    for (int i = 0; i < VARIANTS; i++)
        for (int j = i + 1; j < VARIANTS; j++)
            cr_assert(!keys_equal(keys[i], keys[j]), "variants %d and %d have the same key", i, j);
}

Test(cache, key_separates_adjacent_strings)
{
    mlajit_key_inputs a = base_inputs(), b = base_inputs();
    a.source = "ab";
    a.arch = "c";
    b.source = "a";
    b.arch = "bc";
    cr_assert(!keys_equal(mlajit_cache_key_make(&a), mlajit_cache_key_make(&b)));

    mlajit_key_inputs c = base_inputs(), d = base_inputs();
    c.arch = "ab";
    c.compile_options = "c";
    d.arch = "a";
    d.compile_options = "bc";
    cr_assert(!keys_equal(mlajit_cache_key_make(&c), mlajit_cache_key_make(&d)));

    mlajit_key_inputs e = base_inputs(), f = base_inputs();
    e.compile_options = "";
    f.compile_options = NULL;
    cr_assert(!keys_equal(mlajit_cache_key_make(&e), mlajit_cache_key_make(&f)), "NULL and \"\" must differ");
}

Test(cache, key_hex_is_hi_then_lo_lowercase)
{
    mlajit_cache_key key = {.hi = 0x0123456789abcdefull, .lo = 0xfedcba9876543210ull};
    char hex[33];
    memset(hex, 'x', sizeof hex);
    mlajit_cache_key_hex(&key, hex);
    cr_assert_str_eq(hex, "0123456789abcdeffedcba9876543210");

    mlajit_cache_key small = {.hi = 0, .lo = 0xa};
    mlajit_cache_key_hex(&small, hex);
    cr_assert_str_eq(hex, "0000000000000000000000000000000a");
}

Test(cache, hash64_is_deterministic_and_sensitive)
{
    const char text[] = "template text";
    uint64_t h1 = mlajit_hash64(text, sizeof text - 1);
    char copy[sizeof text];
    memcpy(copy, text, sizeof text);
    cr_assert_eq(mlajit_hash64(copy, sizeof text - 1), h1);
    copy[3] ^= 1;
    cr_assert_neq(mlajit_hash64(copy, sizeof text - 1), h1);
    cr_assert_neq(mlajit_hash64(text, sizeof text - 2), h1);
}

/* ------------------------------------------------------------------------- */
/* Encode / decode                                                            */
/* ------------------------------------------------------------------------- */

Test(cache, encode_decode_round_trip)
{
    mlajit_cache_entry e = make_entry(3, 5000);
    void *value;
    size_t len;
    cr_assert_eq(mlajit_cache_entry_encode(&e, &value, &len), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_gt(len, e.cubin_size);
    cr_assert_eq(memcmp(value, "MLAJITC1", 8), 0);
    cr_assert_eq(len - header_len_of(value), e.cubin_size);

    mlajit_cache_entry got;
    cr_assert_eq(mlajit_cache_entry_decode(value, len, &got), MLAJIT_OK, "%s", mlajit_last_error());
    assert_entries_equal(&got, &e);
    mlajit_cache_entry_clear(&got);
    free(value);
    mlajit_cache_entry_clear(&e);
}

Test(cache, encode_rejects_bad_entries)
{
    mlajit_cache_entry e = make_entry(1, 16);
    void *value = (void *)&e;
    size_t len = 99;

    mlajit_cache_entry unterminated = e;
    memset(unterminated.spec_string, 'a', sizeof unterminated.spec_string);
    cr_assert_eq(mlajit_cache_entry_encode(&unterminated, &value, &len), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_assert_null(value);
    cr_assert_eq(len, 0);

    mlajit_cache_entry no_cubin = e;
    no_cubin.cubin = NULL;
    cr_assert_eq(mlajit_cache_entry_encode(&no_cubin, &value, &len), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_assert_gt(strlen(mlajit_last_error()), 0);
    mlajit_cache_entry_clear(&e);
}

Test(cache, entry_clear_frees_and_zeroes)
{
    mlajit_cache_entry e = make_entry(2, 100);
    mlajit_cache_entry_clear(&e);
    mlajit_cache_entry zero;
    memset(&zero, 0, sizeof zero);
    cr_assert_eq(memcmp(&e, &zero, sizeof e), 0);
    mlajit_cache_entry_clear(&e); /* twice is harmless */
    mlajit_cache_entry_clear(NULL);
}

Test(cache, decode_rejects_every_single_byte_flip)
{
    mlajit_cache_entry e = make_entry(4, 64);
    void *value;
    size_t len;
    cr_assert_eq(mlajit_cache_entry_encode(&e, &value, &len), MLAJIT_OK);
    uint8_t *bytes = value;
    for (size_t pos = 0; pos < len; pos++) {
        for (unsigned mask = 0x01; mask <= 0x80; mask <<= 1) {
            bytes[pos] ^= (uint8_t)mask;
            mlajit_cache_entry got;
            mlajit_clear_error();
            int status = mlajit_cache_entry_decode(bytes, len, &got);
            bytes[pos] ^= (uint8_t)mask;
            cr_assert_eq(status, MLAJIT_ERR_CORRUPT, "flip of bit %#x at byte %zu accepted", mask, pos);
            cr_assert_gt(strlen(mlajit_last_error()), 0);
            cr_assert_null(got.cubin);
        }
    }
    free(value);
    mlajit_cache_entry_clear(&e);
}

Test(cache, decode_rejects_every_truncation_and_extension)
{
    mlajit_cache_entry e = make_entry(5, 40);
    void *value;
    size_t len;
    cr_assert_eq(mlajit_cache_entry_encode(&e, &value, &len), MLAJIT_OK);
    for (size_t cut = 0; cut < len; cut++) {
        mlajit_cache_entry got;
        /* A fresh exact-size copy, so ASan sees any read past the given length. */
        void *prefix = malloc(cut ? cut : 1);
        cr_assert_not_null(prefix);
        memcpy(prefix, value, cut);
        int status = mlajit_cache_entry_decode(prefix, cut, &got);
        free(prefix);
        cr_assert_eq(status, MLAJIT_ERR_CORRUPT, "truncation to %zu bytes accepted", cut);
    }
    uint8_t *longer = malloc(len + 1);
    cr_assert_not_null(longer);
    memcpy(longer, value, len);
    longer[len] = 0;
    mlajit_cache_entry got;
    cr_assert_eq(mlajit_cache_entry_decode(longer, len + 1, &got), MLAJIT_ERR_CORRUPT);
    free(longer);
    cr_assert_eq(mlajit_cache_entry_decode(NULL, 0, &got), MLAJIT_ERR_CORRUPT);
    free(value);
    mlajit_cache_entry_clear(&e);
}

Test(cache, decode_names_the_failed_check)
{
    mlajit_cache_entry e = make_entry(6, 32);
    void *value;
    size_t len;
    cr_assert_eq(mlajit_cache_entry_encode(&e, &value, &len), MLAJIT_OK);
    uint8_t *bytes = value;
    mlajit_cache_entry got;

    /* A newer format version with a valid header checksum is refused as stale;
     * without one, as damage. */
    bytes[8] = 3;
    rewrite_header_checksum(bytes);
    cr_assert_eq(mlajit_cache_entry_decode(bytes, len, &got), MLAJIT_CACHE_STALE);
    cr_assert_not_null(strstr(mlajit_last_error(), "format version 3 (written by a newer mlajit)"), "message: %s",
                       mlajit_last_error());
    bytes[20] ^= 0x01;
    cr_assert_eq(mlajit_cache_entry_decode(bytes, len, &got), MLAJIT_ERR_CORRUPT);
    cr_assert_not_null(strstr(mlajit_last_error(), "header checksum"), "message: %s", mlajit_last_error());
    bytes[20] ^= 0x01;
    bytes[8] = 2;
    rewrite_header_checksum(bytes);
    cr_assert_eq(mlajit_cache_entry_decode(bytes, len, &got), MLAJIT_OK);
    mlajit_cache_entry_clear(&got);

    bytes[0] = 'X';
    cr_assert_eq(mlajit_cache_entry_decode(bytes, len, &got), MLAJIT_ERR_CORRUPT);
    cr_assert_not_null(strstr(mlajit_last_error(), "magic"), "message: %s", mlajit_last_error());
    bytes[0] = 'M';

    bytes[len - 1] ^= 0x40;
    cr_assert_eq(mlajit_cache_entry_decode(bytes, len, &got), MLAJIT_ERR_CORRUPT);
    cr_assert_not_null(strstr(mlajit_last_error(), "cubin checksum"), "message: %s", mlajit_last_error());
    bytes[len - 1] ^= 0x40;

    bytes[20] ^= 0x01; /* inside spec_string */
    cr_assert_eq(mlajit_cache_entry_decode(bytes, len, &got), MLAJIT_ERR_CORRUPT);
    cr_assert_not_null(strstr(mlajit_last_error(), "header checksum"), "message: %s", mlajit_last_error());
    bytes[20] ^= 0x01;

    /* An extra byte inside the header (length and checksum made to agree). */
    size_t h = header_len_of(bytes);
    uint8_t *padded = malloc(len + 1);
    cr_assert_not_null(padded);
    memcpy(padded, bytes, h - 8);
    padded[h - 8] = 0;
    memcpy(padded + h - 7, bytes + h - 8, len - (h - 8));
    padded[12] = (uint8_t)(h + 1);
    padded[13] = (uint8_t)((h + 1) >> 8);
    rewrite_header_checksum(padded);
    cr_assert_eq(mlajit_cache_entry_decode(padded, len + 1, &got), MLAJIT_ERR_CORRUPT);
    cr_assert_not_null(strstr(mlajit_last_error(), "trailing"), "message: %s", mlajit_last_error());
    free(padded);

    /* A string length that runs past the header, with the checksum made to agree. */
    bytes[16] = 0xff;
    rewrite_header_checksum(bytes);
    cr_assert_eq(mlajit_cache_entry_decode(bytes, len, &got), MLAJIT_ERR_CORRUPT);
    cr_assert_not_null(strstr(mlajit_last_error(), "spec_string"), "message: %s", mlajit_last_error());

    free(value);
    mlajit_cache_entry_clear(&e);
}

/* xorshift64*: a seeded, reproducible byte source. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}

Test(cache, decode_survives_random_garbage)
{
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (size_t len = 0; len <= 4096; len++) {
        uint8_t *bytes = malloc(len ? len : 1);
        cr_assert_not_null(bytes);
        for (size_t i = 0; i < len; i++)
            bytes[i] = (uint8_t)next_random(&rng);
        /* Every other buffer gets a valid prefix so the parse goes deeper. */
        if (len >= 16 && len % 2 == 0) {
            memcpy(bytes, "MLAJITC1\x02\0\0\0", 12);
            size_t h = 16 + next_random(&rng) % (len - 15);
            bytes[12] = (uint8_t)h;
            bytes[13] = (uint8_t)(h >> 8);
            bytes[14] = 0;
            bytes[15] = 0;
            if (h >= 24 && len % 4 == 0)
                rewrite_header_checksum(bytes);
        }
        mlajit_cache_entry got;
        int status = mlajit_cache_entry_decode(bytes, len, &got);
        free(bytes);
        cr_assert_eq(status, MLAJIT_ERR_CORRUPT, "garbage of %zu bytes returned %d", len, status);
        cr_assert_null(got.cubin);
    }
}

Test(cache, decode_survives_random_mutations_of_valid_values)
{
    mlajit_cache_entry e = make_entry(7, 300);
    void *value;
    size_t len;
    cr_assert_eq(mlajit_cache_entry_encode(&e, &value, &len), MLAJIT_OK);
    uint64_t rng = 12345;
    for (int round = 0; round < 3000; round++) {
        size_t cut = len - next_random(&rng) % 8; /* sometimes truncated */
        uint8_t *copy = malloc(cut);
        cr_assert_not_null(copy);
        memcpy(copy, value, cut);
        int flips = 1 + (int)(next_random(&rng) % 4);
        size_t last = SIZE_MAX;
        for (int f = 0; f < flips; f++) {
            size_t pos = next_random(&rng) % cut;
            copy[pos] ^= (uint8_t)(1 + next_random(&rng) % 255);
            last = pos;
        }
        mlajit_cache_entry got;
        int status = mlajit_cache_entry_decode(copy, cut, &got);
        free(copy);
        cr_assert_eq(status, MLAJIT_ERR_CORRUPT, "round %d (last flip at %zu) returned %d", round, last, status);
    }
    free(value);
    mlajit_cache_entry_clear(&e);
}

/* ------------------------------------------------------------------------- */
/* The store                                                                  */
/* ------------------------------------------------------------------------- */

Test(cache, put_get_round_trip)
{
    mlajit_store *store = open_store("store");
    mlajit_cache_entry e = make_entry(10, 70000);
    mlajit_cache_key key = key_of(10);
    cr_assert_eq(mlajit_store_put(store, &key, &e), MLAJIT_OK, "%s", mlajit_last_error());

    mlajit_cache_entry got;
    cr_assert_eq(mlajit_store_get(store, &key, &got), MLAJIT_OK, "%s", mlajit_last_error());
    assert_entries_equal(&got, &e);
    cr_assert_neq(got.cubin, e.cubin, "get must return its own copy");
    mlajit_cache_entry_clear(&got);
    mlajit_cache_entry_clear(&e);
    mlajit_store_close(store);
}

Test(cache, empty_cubin_round_trip)
{
    mlajit_store *store = open_store("store");
    mlajit_cache_entry e = make_entry(11, 0);
    mlajit_cache_key key = key_of(11);
    cr_assert_eq(mlajit_store_put(store, &key, &e), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_cache_entry got;
    cr_assert_eq(mlajit_store_get(store, &key, &got), MLAJIT_OK, "%s", mlajit_last_error());
    assert_entries_equal(&got, &e);
    mlajit_cache_entry_clear(&got);
    mlajit_cache_entry_clear(&e);
    mlajit_store_close(store);
}

Test(cache, get_missing_key_is_not_found)
{
    mlajit_store *store = open_store("store");
    mlajit_cache_key key = key_of(1);
    mlajit_cache_entry got;
    mlajit_clear_error();
    cr_assert_eq(mlajit_store_get(store, &key, &got), MLAJIT_ERR_NOT_FOUND);
    cr_assert_gt(strlen(mlajit_last_error()), 0);
    cr_assert_null(got.cubin);

    /* A neighbour's presence does not make it found. */
    mlajit_cache_entry e = make_entry(2, 10);
    mlajit_cache_key other = key_of(2);
    cr_assert_eq(mlajit_store_put(store, &other, &e), MLAJIT_OK);
    cr_assert_eq(mlajit_store_get(store, &key, &got), MLAJIT_ERR_NOT_FOUND);
    mlajit_cache_entry_clear(&e);
    mlajit_store_close(store);
}

Test(cache, open_creates_nested_directories)
{
    char dir[256];
    root_path(dir, sizeof dir, "a/b/c");
    mlajit_store *store = NULL;
    cr_assert_eq(mlajit_store_open(dir, 0, &store), MLAJIT_OK, "%s", mlajit_last_error());
    struct stat st;
    cr_assert_eq(stat(dir, &st), 0, "no %s", dir);
    cr_assert(S_ISDIR(st.st_mode));
    /* the data file comes with the first write */
    mlajit_cache_entry e = make_entry(1, 100);
    mlajit_cache_key key = key_of(1);
    cr_assert_eq(mlajit_store_put(store, &key, &e), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_cache_entry_clear(&e);
    char data_path[300];
    snprintf(data_path, sizeof data_path, "%s/data.mdb", dir);
    cr_assert_eq(stat(data_path, &st), 0, "no %s", data_path);
    cr_assert(S_ISREG(st.st_mode));
    snprintf(data_path, sizeof data_path, "%s/a", test_root);
    cr_assert_eq(stat(data_path, &st), 0);
    cr_assert_eq(st.st_mode & 0777 & ~0755u, 0u, "created directories must not exceed 0755");
    mlajit_store_close(store);
}

Test(cache, open_over_a_regular_file_fails)
{
    char path[256];
    root_path(path, sizeof path, "file");
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("not a directory", f);
    fclose(f);
    mlajit_store *store = (mlajit_store *)path;
    int status = mlajit_store_open(path, 0, &store);
    cr_assert_eq(status, MLAJIT_ERR_IO, "status %d: %s", status, mlajit_last_error());
    cr_assert_null(store);
    cr_assert_not_null(strstr(mlajit_last_error(), path));
}

Test(cache, corrupted_entries_are_reported_and_repaired)
{
    mlajit_store *store = open_store("store");
    mlajit_cache_entry good = make_entry(20, 4096);
    mlajit_cache_key key = key_of(20);
    void *value;
    size_t len;
    cr_assert_eq(mlajit_cache_entry_encode(&good, &value, &len), MLAJIT_OK);
    const uint8_t *bytes = value;
    size_t header_len = header_len_of(bytes);
    uint8_t *bad = malloc(len + 1);
    cr_assert_not_null(bad);

    const struct {
        size_t pos;
        const char *what;
    } flips[] = {
        {0, "magic"},
        {9, "version byte"},
        {13, "header length"},
        {18, "spec length"},
        {22, "spec string"},
        {header_len - 40, "compile fields"},
        {header_len - 16, "cubin checksum"},
        {header_len - 1, "header checksum"},
        {header_len, "first cubin byte"},
        {header_len + 2048, "middle cubin byte"},
        {len - 1, "last cubin byte"},
    };
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        memcpy(bad, value, len);
        bad[flips[i].pos] ^= 0xff;
        expect_corrupt_then_repair(store, &key, bad, len, &good, flips[i].what);
    }

    expect_corrupt_then_repair(store, &key, value, len - 1, &good, "truncated by one byte");
    expect_corrupt_then_repair(store, &key, value, header_len, &good, "truncated to the header");
    expect_corrupt_then_repair(store, &key, value, 10, &good, "truncated into the prefix");
    memcpy(bad, value, len);
    bad[len] = 0xab;
    expect_corrupt_then_repair(store, &key, bad, len + 1, &good, "one byte appended");

    memcpy(bad, value, len);
    memcpy(bad, "MLAJITC2", 8);
    expect_corrupt_then_repair(store, &key, bad, len, &good, "wrong magic");

    memcpy(bad, value, len);
    bad[8] = 7;
    expect_corrupt_then_repair(store, &key, bad, len, &good, "wrong version, header checksum failing");
    rewrite_header_checksum(bad);
    expect_refused_then_repair(store, &key, bad, len, &good, "another version, intact", MLAJIT_CACHE_STALE);

    expect_corrupt_then_repair(store, &key, NULL, 0, &good, "zero-length value");

    free(bad);
    free(value);
    mlajit_cache_entry_clear(&good);
    mlajit_store_close(store);
}

Test(cache, readonly_open_of_missing_dir_is_io)
{
    char dir[256];
    root_path(dir, sizeof dir, "does-not-exist");
    mlajit_store *store = (mlajit_store *)dir;
    cr_assert_eq(mlajit_store_open(dir, 1, &store), MLAJIT_ERR_IO);
    cr_assert_null(store);
    cr_assert_not_null(strstr(mlajit_last_error(), dir), "message must name the directory: %s",
                       mlajit_last_error());
    struct stat st;
    cr_assert_neq(stat(dir, &st), 0, "a read-only open must not create the directory");
}

Test(cache, readonly_store_reads_but_refuses_writes)
{
    char dir[256];
    root_path(dir, sizeof dir, "store");
    mlajit_store *writer = open_store("store");
    mlajit_cache_entry e = make_entry(30, 1000);
    mlajit_cache_key key = key_of(30);
    cr_assert_eq(mlajit_store_put(writer, &key, &e), MLAJIT_OK);
    mlajit_store_close(writer);

    mlajit_store *reader = NULL;
    cr_assert_eq(mlajit_store_open(dir, 1, &reader), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_cache_entry got;
    cr_assert_eq(mlajit_store_get(reader, &key, &got), MLAJIT_OK, "%s", mlajit_last_error());
    assert_entries_equal(&got, &e);
    mlajit_cache_entry_clear(&got);

    mlajit_cache_key other = key_of(31);
    mlajit_clear_error();
    int status = mlajit_store_put(reader, &other, &e);
    cr_assert_neq(status, MLAJIT_OK);
    cr_assert_eq(status, MLAJIT_ERR_CACHE);
    cr_assert_gt(strlen(mlajit_last_error()), 0);
    cr_assert_neq(mlajit_store_delete(reader, &key), MLAJIT_OK);
    cr_assert_eq(mlajit_store_get(reader, &other, &got), MLAJIT_ERR_NOT_FOUND);

    mlajit_store_stats stats;
    cr_assert_eq(mlajit_store_stats_get(reader, &stats), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(stats.entries, 1);
    mlajit_store_close(reader);
    mlajit_cache_entry_clear(&e);
}

Test(cache, stats_count_entries_and_bytes)
{
    mlajit_store *store = open_store("store");
    mlajit_store_stats stats;
    cr_assert_eq(mlajit_store_stats_get(store, &stats), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(stats.entries, 0);
    cr_assert_eq(stats.value_bytes, 0);

    int64_t expected_bytes = 0;
    for (unsigned i = 0; i < 3; i++) {
        mlajit_cache_entry e = make_entry(40 + i, 1000 * (i + 1));
        void *value;
        size_t len;
        cr_assert_eq(mlajit_cache_entry_encode(&e, &value, &len), MLAJIT_OK);
        expected_bytes += (int64_t)len;
        free(value);
        mlajit_cache_key key = key_of(40 + i);
        cr_assert_eq(mlajit_store_put(store, &key, &e), MLAJIT_OK);
        mlajit_cache_entry_clear(&e);
    }
    cr_assert_eq(mlajit_store_stats_get(store, &stats), MLAJIT_OK);
    cr_assert_eq(stats.entries, 3);
    cr_assert_eq(stats.value_bytes, expected_bytes);
    cr_assert_geq(stats.data_file_bytes, expected_bytes);

    mlajit_cache_key first = key_of(40);
    cr_assert_eq(mlajit_store_delete(store, &first), MLAJIT_OK);
    cr_assert_eq(mlajit_store_stats_get(store, &stats), MLAJIT_OK);
    cr_assert_eq(stats.entries, 2);
    mlajit_store_close(store);
}

Test(cache, delete_removes_the_entry)
{
    mlajit_store *store = open_store("store");
    mlajit_cache_entry e = make_entry(50, 64);
    mlajit_cache_key key = key_of(50), keep = key_of(51);
    cr_assert_eq(mlajit_store_put(store, &key, &e), MLAJIT_OK);
    cr_assert_eq(mlajit_store_put(store, &keep, &e), MLAJIT_OK);
    cr_assert_eq(mlajit_store_delete(store, &key), MLAJIT_OK, "%s", mlajit_last_error());

    mlajit_cache_entry got;
    cr_assert_eq(mlajit_store_get(store, &key, &got), MLAJIT_ERR_NOT_FOUND);
    cr_assert_eq(mlajit_store_delete(store, &key), MLAJIT_ERR_NOT_FOUND);
    cr_assert_eq(mlajit_store_get(store, &keep, &got), MLAJIT_OK, "the other key must survive");
    mlajit_cache_entry_clear(&got);
    mlajit_cache_entry_clear(&e);
    mlajit_store_close(store);
}

Test(cache, overwrite_replaces_the_entry)
{
    mlajit_store *store = open_store("store");
    mlajit_cache_key key = key_of(60);
    mlajit_cache_entry first = make_entry(60, 5000), second = make_entry(61, 300);
    cr_assert_eq(mlajit_store_put(store, &key, &first), MLAJIT_OK);
    cr_assert_eq(mlajit_store_put(store, &key, &second), MLAJIT_OK);

    mlajit_cache_entry got;
    cr_assert_eq(mlajit_store_get(store, &key, &got), MLAJIT_OK);
    assert_entries_equal(&got, &second);
    mlajit_cache_entry_clear(&got);
    mlajit_store_stats stats;
    cr_assert_eq(mlajit_store_stats_get(store, &stats), MLAJIT_OK);
    cr_assert_eq(stats.entries, 1);
    mlajit_cache_entry_clear(&first);
    mlajit_cache_entry_clear(&second);
    mlajit_store_close(store);
}

Test(cache, reopen_finds_stored_entries)
{
    char dir[256];
    root_path(dir, sizeof dir, "store");
    mlajit_store *store = open_store("store");
    mlajit_cache_entry entries[5];
    for (unsigned i = 0; i < 5; i++) {
        entries[i] = make_entry(70 + i, 777 * (i + 1));
        mlajit_cache_key key = key_of(70 + i);
        cr_assert_eq(mlajit_store_put(store, &key, &entries[i]), MLAJIT_OK);
    }
    mlajit_store_close(store);

    store = NULL;
    cr_assert_eq(mlajit_store_open(dir, 0, &store), MLAJIT_OK, "%s", mlajit_last_error());
    for (unsigned i = 0; i < 5; i++) {
        mlajit_cache_key key = key_of(70 + i);
        mlajit_cache_entry got;
        cr_assert_eq(mlajit_store_get(store, &key, &got), MLAJIT_OK, "entry %u: %s", i, mlajit_last_error());
        assert_entries_equal(&got, &entries[i]);
        mlajit_cache_entry_clear(&got);
        mlajit_cache_entry_clear(&entries[i]);
    }
    mlajit_store_close(store);
}

/* ------------------------------------------------------------------------- */
/* Concurrency                                                                */
/* ------------------------------------------------------------------------- */

enum { WORKERS = 4, ITERATIONS = 200, SHARED_KEYS = 8 };

typedef struct worker_args {
    mlajit_store *store;
    unsigned id;
    int failures;
    char first_failure[512];
} worker_args;

static void note_failure(worker_args *w, const char *what, int status)
{
    if (w->failures++ == 0)
        snprintf(w->first_failure, sizeof w->first_failure, "worker %u: %s (status %d): %s", w->id, what,
                 status, mlajit_last_error());
}

/* An entry whose fields all follow from its seed, so a reader can check that a
 * value it got is whole (never a mix of two writers' values). */
static int entry_is_consistent(const mlajit_cache_entry *got, unsigned seed, size_t cubin_size)
{
    mlajit_cache_entry want = make_entry(seed, cubin_size);
    int same = strcmp(got->spec_string, want.spec_string) == 0 &&
               strcmp(got->entry_names, want.entry_names) == 0 && got->registers == want.registers &&
               got->created_unix == want.created_unix && got->cubin_size == want.cubin_size &&
               memcmp(got->cubin, want.cubin, cubin_size) == 0;
    mlajit_cache_entry_clear(&want);
    return same;
}

static void *worker_main(void *arg)
{
    worker_args *w = arg;
    for (unsigned i = 0; i < ITERATIONS; i++) {
        /* Own key: the value read back must be exactly the one written. */
        unsigned own_seed = 1000 + w->id * ITERATIONS + i;
        size_t own_size = 256 + (i % 17) * 64;
        mlajit_cache_entry e = make_entry(own_seed, own_size);
        mlajit_cache_key own_key = key_of(own_seed);
        int status = mlajit_store_put(w->store, &own_key, &e);
        if (status != MLAJIT_OK)
            note_failure(w, "put own", status);
        mlajit_cache_entry got;
        status = mlajit_store_get(w->store, &own_key, &got);
        if (status != MLAJIT_OK)
            note_failure(w, "get own", status);
        else if (!entry_is_consistent(&got, own_seed, own_size))
            note_failure(w, "own entry differs", status);
        mlajit_cache_entry_clear(&got);
        mlajit_cache_entry_clear(&e);

        /* Shared key: any writer's value may be there, but it must be whole. */
        unsigned slot = (i + w->id) % SHARED_KEYS;
        unsigned shared_seed = 100 + slot * 10 + w->id;
        mlajit_cache_key shared_key = key_of(100 + slot);
        e = make_entry(shared_seed, 512);
        status = mlajit_store_put(w->store, &shared_key, &e);
        if (status != MLAJIT_OK)
            note_failure(w, "put shared", status);
        mlajit_cache_entry_clear(&e);
        status = mlajit_store_get(w->store, &shared_key, &got);
        if (status != MLAJIT_OK) {
            note_failure(w, "get shared", status);
        } else {
            int whole = 0;
            for (unsigned writer = 0; writer < WORKERS && !whole; writer++)
                whole = entry_is_consistent(&got, 100 + slot * 10 + writer, 512);
            if (!whole)
                note_failure(w, "shared entry is not any writer's value", status);
        }
        mlajit_cache_entry_clear(&got);
    }
    return NULL;
}

Test(cache, concurrent_put_get_from_four_threads, .timeout = 60)
{
    mlajit_store *store = open_store("store");
    pthread_t threads[WORKERS];
    worker_args args[WORKERS];
    for (unsigned t = 0; t < WORKERS; t++) {
        memset(&args[t], 0, sizeof args[t]);
        args[t].store = store;
        args[t].id = t;
        cr_assert_eq(pthread_create(&threads[t], NULL, worker_main, &args[t]), 0);
    }
    for (unsigned t = 0; t < WORKERS; t++)
        cr_assert_eq(pthread_join(threads[t], NULL), 0);
    for (unsigned t = 0; t < WORKERS; t++)
        cr_assert_eq(args[t].failures, 0, "%d failures; first: %s", args[t].failures, args[t].first_failure);

    mlajit_store_stats stats;
    cr_assert_eq(mlajit_store_stats_get(store, &stats), MLAJIT_OK);
    cr_assert_eq(stats.entries, WORKERS * ITERATIONS + SHARED_KEYS);
    mlajit_store_close(store);
}

/* ------------------------------------------------------------------------- */
/* Default directory                                                          */
/* ------------------------------------------------------------------------- */

Test(cache, default_dir_precedence)
{
    char buf[512];
    cr_assert_eq(setenv("MLAJIT_CACHE_DIR", "/explicit/dir", 1), 0);
    cr_assert_eq(setenv("XDG_CACHE_HOME", "/xdg", 1), 0);
    cr_assert_eq(setenv("HOME", "/home/someone", 1), 0);
    cr_assert_eq(mlajit_cache_default_dir(buf, sizeof buf), MLAJIT_OK);
    cr_assert_str_eq(buf, "/explicit/dir");

    cr_assert_eq(setenv("MLAJIT_CACHE_DIR", "", 1), 0); /* empty counts as unset */
    cr_assert_eq(mlajit_cache_default_dir(buf, sizeof buf), MLAJIT_OK);
    cr_assert_str_eq(buf, "/xdg/mlajit");

    cr_assert_eq(unsetenv("MLAJIT_CACHE_DIR"), 0);
    cr_assert_eq(mlajit_cache_default_dir(buf, sizeof buf), MLAJIT_OK);
    cr_assert_str_eq(buf, "/xdg/mlajit");

    cr_assert_eq(unsetenv("XDG_CACHE_HOME"), 0);
    cr_assert_eq(mlajit_cache_default_dir(buf, sizeof buf), MLAJIT_OK);
    cr_assert_str_eq(buf, "/home/someone/.cache/mlajit");

    cr_assert_eq(setenv("XDG_CACHE_HOME", "relative/path", 1), 0); /* XDG: relative is ignored */
    cr_assert_eq(mlajit_cache_default_dir(buf, sizeof buf), MLAJIT_OK);
    cr_assert_str_eq(buf, "/home/someone/.cache/mlajit");

    cr_assert_eq(unsetenv("XDG_CACHE_HOME"), 0);
    cr_assert_eq(unsetenv("HOME"), 0);
    mlajit_clear_error();
    cr_assert_eq(mlajit_cache_default_dir(buf, sizeof buf), MLAJIT_ERR_NOT_FOUND);
    cr_assert_gt(strlen(mlajit_last_error()), 0);
    cr_assert_str_eq(buf, "");
}

Test(cache, default_dir_truncation_is_invalid_argument)
{
    char buf[16];
    cr_assert_eq(setenv("MLAJIT_CACHE_DIR", "/a/rather/long/cache/directory", 1), 0);
    cr_assert_eq(mlajit_cache_default_dir(buf, sizeof buf), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_assert_str_eq(buf, "");

    cr_assert_eq(unsetenv("MLAJIT_CACHE_DIR"), 0);
    cr_assert_eq(unsetenv("XDG_CACHE_HOME"), 0);
    cr_assert_eq(setenv("HOME", "/home/abcdef", 1), 0); /* "/home/abcdef/.cache/mlajit" needs 27 bytes */
    cr_assert_eq(mlajit_cache_default_dir(buf, sizeof buf), MLAJIT_ERR_INVALID_ARGUMENT);

    char exact[27];
    cr_assert_eq(mlajit_cache_default_dir(exact, sizeof exact), MLAJIT_OK);
    cr_assert_str_eq(exact, "/home/abcdef/.cache/mlajit");
    cr_assert_eq(mlajit_cache_default_dir(exact, sizeof exact - 1), MLAJIT_ERR_INVALID_ARGUMENT);
}

/* A store opened at the default dir lands where the environment says. */
Test(cache, default_dir_is_usable_for_open)
{
    char dir[256], buf[256];
    root_path(dir, sizeof dir, "xdg");
    cr_assert_eq(unsetenv("MLAJIT_CACHE_DIR"), 0);
    cr_assert_eq(setenv("XDG_CACHE_HOME", dir, 1), 0);
    cr_assert_eq(mlajit_cache_default_dir(buf, sizeof buf), MLAJIT_OK);
    mlajit_store *store = NULL;
    cr_assert_eq(mlajit_store_open(buf, 0, &store), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_store_close(store);
    char made[300];
    snprintf(made, sizeof made, "%s/mlajit", dir);
    struct stat st;
    cr_assert_eq(stat(made, &st), 0, "no %s", made);
    cr_assert(S_ISDIR(st.st_mode));
}

/* ------------------------------------------------------------------------- */
/* Damage, the stamp, read-only caches, the compile lock, odd files           */
/* ------------------------------------------------------------------------- */

static void read_bytes(const char *path, uint8_t **bytes, size_t *len) { *bytes = read_whole_file(path, len); }

/* Overwrite len bytes at offset of path in place (its size stays). */
static void poke(const char *path, size_t offset, const void *bytes, size_t len)
{
    int fd = open(path, O_WRONLY);
    cr_assert_geq(fd, 0);
    cr_assert_eq(pwrite(fd, bytes, len, (off_t)offset), (ssize_t)len);
    close(fd);
}

/* A cache of n entries (sizes alternating small and overflow) in test_root/name. */
static void fill_store(const char *name, unsigned n)
{
    mlajit_store *st = open_store(name);
    for (unsigned i = 0; i < n; i++) {
        mlajit_cache_entry e = make_entry(i, i % 3 == 0 ? 9000 : 300);
        mlajit_cache_key k = key_of(i);
        cr_assert_eq(mlajit_store_put(st, &k, &e), MLAJIT_OK, "%s", mlajit_last_error());
        mlajit_cache_entry_clear(&e);
    }
    mlajit_store_close(st);
}

/* The page number of the main database's root (a leaf, for small caches), from meta page 1 or 0. */
static uint64_t main_root(const char *path)
{
    uint8_t *b;
    size_t n;
    read_bytes(path, &b, &n);
    uint64_t t0, t1, root;
    memcpy(&t0, b + 144, 8);
    memcpy(&t1, b + 4096 + 144, 8);
    memcpy(&root, b + (t1 > t0 ? 4096 : 0) + 88 + 40, 8);
    free(b);
    return root;
}

/* Push a file's modification time into the past (so a stamp may vouch for it). */
static void age(const char *path, int seconds)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    times[1].tv_sec -= seconds;
    cr_assert_eq(utimensat(AT_FDCWD, path, times, 0), 0);
}

Test(cache, a_write_on_a_damaged_file_sets_it_aside_and_goes_to_a_fresh_one)
{
    fill_store("w", 6);
    char dir[256], data[300], aside[300];
    root_path(dir, sizeof dir, "w");
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    snprintf(aside, sizeof aside, "%s/data.mdb.damaged.1", dir);
    mlajit_store *st = open_store("w"); /* open before the damage: the write's own check must find it */
    uint64_t root = main_root(data);
    uint8_t junk[2] = {0xff, 0xff};
    poke(data, root * 4096 + 12, junk, 2); /* the root leaf's lower bound */
    uint8_t *damaged;
    size_t damaged_len;
    read_bytes(data, &damaged, &damaged_len);
    mlajit_cache_entry e = make_entry(77, 5000);
    mlajit_cache_key k = key_of(77);
    cr_assert_eq(mlajit_store_put(st, &k, &e), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert(path_exists(aside), "the damaged file was set aside");
    uint8_t *kept;
    size_t kept_len;
    read_bytes(aside, &kept, &kept_len);
    cr_expect(kept_len == damaged_len && memcmp(kept, damaged, kept_len) == 0, "and not written to");
    mlajit_cache_entry got;
    cr_assert_eq(mlajit_store_get(st, &k, &got), MLAJIT_OK, "%s", mlajit_last_error());
    assert_entries_equal(&got, &e);
    mlajit_cache_entry_clear(&got);
    mlajit_store_stats stats;
    cr_assert_eq(mlajit_store_stats_get(st, &stats), MLAJIT_OK);
    cr_expect_eq(stats.entries, 1, "the fresh file holds the new entry only");
    /* and salvage recovers the old file's entries that can still be read */
    mlajit_store_salvage_report rep;
    cr_assert_eq(mlajit_store_salvage(st, aside, &rep), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(rep.recovered, 6, "%llu recovered", (unsigned long long)rep.recovered);
    cr_assert_eq(mlajit_store_stats_get(st, &stats), MLAJIT_OK);
    cr_expect_eq(stats.entries, 7);
    mlajit_cache_entry_clear(&e);
    free(kept);
    free(damaged);
    mlajit_store_close(st);
}

Test(cache, each_damaged_file_gets_a_new_name)
{
    char dir[256], data[300], name[300];
    root_path(dir, sizeof dir, "n");
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    for (int round = 1; round <= 3; round++) {
        fill_store("n", 2);
        uint64_t root = main_root(data);
        uint8_t zero[16] = {0};
        poke(data, root * 4096, zero, sizeof zero);
        mlajit_store *st = open_store("n"); /* the open's check sets it aside */
        mlajit_store_close(st);
        for (int k = 1; k <= round; k++) {
            snprintf(name, sizeof name, "%s/data.mdb.damaged.%d", dir, k);
            cr_expect(path_exists(name), "round %d: %s", round, name);
        }
        snprintf(name, sizeof name, "%s/data.mdb.damaged.%d", dir, round + 1);
        cr_expect(!path_exists(name));
        cr_expect(!path_exists(data), "nothing written since");
    }
}

/* The stamp lets an unchanged file skip the open's check; any change to the
 * file (its time) makes the next writable open check it. Damage that keeps the
 * time is still met safely by the reads. */
Test(cache, the_stamp_skips_the_check_only_for_an_unchanged_settled_file)
{
    fill_store("s", 4);
    char dir[256], data[300], stamp[300], aside[300];
    root_path(dir, sizeof dir, "s");
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    snprintf(stamp, sizeof stamp, "%s/data.mdb.verified", dir);
    snprintf(aside, sizeof aside, "%s/data.mdb.damaged.1", dir);
    mlajit_store_close(open_store("s"));
    cr_expect(!path_exists(stamp), "a file changed within the last second is never stamped");
    age(data, 10);
    mlajit_store_close(open_store("s"));
    cr_assert(path_exists(stamp), "a clean settled file is stamped");

    /* damage that keeps the size and the time: the stamp vouches, the open skips */
    struct stat before;
    stat(data, &before);
    uint64_t root = main_root(data);
    uint8_t junk[2] = {0xff, 0xff};
    poke(data, root * 4096 + 12, junk, 2);
    struct timespec times[2] = {before.st_atim, before.st_mtim};
    utimensat(AT_FDCWD, data, times, 0);
    mlajit_store *st = open_store("s");
    cr_expect(!path_exists(aside), "the stamp matched: no check at open");
    /* a look-up through the damaged leaf is refused by the reader and sets the file aside */
    mlajit_cache_entry e;
    mlajit_cache_key k = key_of(1);
    cr_expect_eq(mlajit_store_get(st, &k, &e), MLAJIT_ERR_NOT_FOUND, "%s", mlajit_last_error());
    cr_expect(path_exists(aside), "the look-up met the damage and set the file aside");
    mlajit_store_close(st);

    /* a change the time shows is checked at open */
    fill_store("t", 3);
    char dir_t[256], data_t[300], aside_t[300];
    root_path(dir_t, sizeof dir_t, "t");
    snprintf(data_t, sizeof data_t, "%s/data.mdb", dir_t);
    snprintf(aside_t, sizeof aside_t, "%s/data.mdb.damaged.1", dir_t);
    age(data_t, 10);
    mlajit_store_close(open_store("t"));
    poke(data_t, main_root(data_t) * 4096 + 12, junk, 2);
    mlajit_store_close(open_store("t"));
    cr_expect(path_exists(aside_t), "the open checked the changed file");
}

/* Run fn in a child as nobody (when we are root, whom permission bits do not
 * stop); the child's exit status is the result, 77 when it cannot drop. */
static int as_nobody(int (*fn)(const char *), const char *dir)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
            _exit(77);
        _exit(fn(dir));
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

/* A read-only cache, opened as a fleet's process would: 0 when it served. */
static int serve_read_only(const char *dir)
{
    mlajit_store *st = NULL;
    if (mlajit_store_open(dir, 0, &st) == MLAJIT_OK) {
        mlajit_store_close(st);
        return 1; /* it should have said it cannot write */
    }
    if (mlajit_store_open(dir, 1, &st) != MLAJIT_OK)
        return 2;
    for (unsigned i = 0; i < 4; i++) {
        mlajit_cache_entry got, want = make_entry(i, i % 3 == 0 ? 9000 : 300);
        mlajit_cache_key k = key_of(i);
        int ok = mlajit_store_get(st, &k, &got) == MLAJIT_OK && got.cubin_size == want.cubin_size &&
                 memcmp(got.cubin, want.cubin, want.cubin_size) == 0;
        mlajit_cache_entry_clear(&want);
        if (!ok)
            return 3;
        mlajit_cache_entry_clear(&got);
    }
    mlajit_store_stats stats;
    if (mlajit_store_stats_get(st, &stats) != MLAJIT_OK || stats.entries != 4)
        return 4;
    mlajit_cache_entry e = make_entry(9, 10);
    mlajit_cache_key k = key_of(9);
    int refused = mlajit_store_put(st, &k, &e) != MLAJIT_OK;
    mlajit_cache_entry_clear(&e);
    mlajit_store_close(st);
    return refused ? 0 : 5;
}

static void expect_untouched_read_only_dir(const char *dir, const uint8_t *bytes, size_t len)
{
    char path[300];
    const char *made[] = {"lock.mdb", "compile.lock", "data.mdb.verified"};
    for (size_t i = 0; i < sizeof made / sizeof made[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, made[i]);
        cr_expect(!path_exists(path), "a read-only cache got %s", made[i]);
    }
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    uint8_t *now;
    size_t now_len;
    read_bytes(path, &now, &now_len);
    cr_expect(now_len == len && memcmp(now, bytes, len) == 0, "data.mdb changed");
    free(now);
}

/* A directory another user cannot write: served with no lock file and nothing written. */
Test(cache, an_unwritable_cache_serves_another_user_without_a_lock_file)
{
    fill_store("ro", 4);
    char dir[256], path[300];
    root_path(dir, sizeof dir, "ro");
    snprintf(path, sizeof path, "%s/lock.mdb", dir);
    unlink(path); /* as a published cache would be: the data file alone */
    snprintf(path, sizeof path, "%s/compile.lock", dir);
    unlink(path);
    chmod(test_root, 0755);
    chmod(dir, 0555);
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    chmod(path, 0444);
    uint8_t *bytes;
    size_t len;
    read_bytes(path, &bytes, &len);
    int rc = as_nobody(serve_read_only, dir);
    if (rc == 77)
        cr_skip_test("cannot drop to the user nobody here (not root), so an unwritable directory cannot be tried");
    cr_expect_eq(rc, 0, "serve_read_only step %d failed", rc);
    expect_untouched_read_only_dir(dir, bytes, len);
    chmod(dir, 0755);
    free(bytes);
}

/* A read-only bind mount: even root cannot write it. */
Test(cache, a_read_only_mount_serves_without_a_lock_file)
{
    fill_store("src", 4);
    char src[256], mnt[256], path[300];
    root_path(src, sizeof src, "src");
    root_path(mnt, sizeof mnt, "mnt");
    snprintf(path, sizeof path, "%s/lock.mdb", src);
    unlink(path);
    snprintf(path, sizeof path, "%s/compile.lock", src);
    unlink(path);
    cr_assert_eq(mkdir(mnt, 0755), 0);
    snprintf(path, sizeof path, "%s/data.mdb", src);
    uint8_t *bytes;
    size_t len;
    read_bytes(path, &bytes, &len);
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        /* a private mount namespace: the mount goes with this child */
        int ok = unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
                 mount(src, mnt, NULL, MS_BIND, NULL) == 0 &&
                 mount(NULL, mnt, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) == 0;
        char why[200];
        snprintf(why, sizeof why, "%s", ok ? "" : strerror(errno));
        if (write(pipefd[1], why, sizeof why) != (ssize_t)sizeof why)
            _exit(9);
        _exit(ok ? serve_read_only(mnt) : 77);
    }
    close(pipefd[1]);
    char why[200] = "";
    if (read(pipefd[0], why, sizeof why) < 0)
        why[0] = '\0';
    close(pipefd[0]);
    int status;
    waitpid(pid, &status, 0);
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
    if (rc == 77)
        cr_skip_test("this machine allows no read-only bind mount (%s)", why);
    cr_expect_eq(rc, 0, "serve_read_only step %d failed", rc);
    expect_untouched_read_only_dir(src, bytes, len);
    free(bytes);
}

/* ---- the compile lock ---------------------------------------------------------------- */

/* A child takes key's lock, says so, and waits for the word to die. */
static pid_t lock_holder(const char *dir, const mlajit_cache_key *key, int *ready_fd)
{
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]);
        mlajit_store *st;
        mlajit_compile_lock *lock;
        int waited;
        char c = mlajit_store_open(dir, 0, &st) == MLAJIT_OK &&
                         mlajit_compile_lock_take(st, key, 0, &lock, &waited) == MLAJIT_OK
                     ? 'y'
                     : 'n';
        if (write(ready[1], &c, 1) != 1)
            _exit(1);
        pause(); /* killed by the test */
        _exit(0);
    }
    close(ready[1]);
    *ready_fd = ready[0];
    return pid;
}

Test(cache, the_compile_lock_waits_bounded_and_dies_with_its_holder)
{
    mlajit_store *st = open_store("lock");
    char dir[256];
    root_path(dir, sizeof dir, "lock");
    mlajit_cache_key key = key_of(5), other = key_of(6);
    int ready;
    pid_t holder = lock_holder(dir, &key, &ready);
    char c = 0;
    cr_assert_eq(read(ready, &c, 1), 1);
    cr_assert_eq(c, 'y', "the child took the lock");

    mlajit_compile_lock *lock = NULL;
    int waited = 0;
    /* another key is not held up */
    cr_assert_eq(mlajit_compile_lock_take(st, &other, 0, &lock, &waited), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(waited, 0);
    mlajit_compile_lock_release(lock);
    /* the held key: a bounded wait, then the caller compiles itself */
    double t0 = mlajit_now_ms();
    cr_expect_eq(mlajit_compile_lock_take(st, &key, 300, &lock, &waited), MLAJIT_ERR_CACHE);
    double waited_ms = mlajit_now_ms() - t0;
    cr_expect_null(lock);
    cr_expect_eq(waited, 1);
    cr_expect(waited_ms >= 290 && waited_ms < 5000, "waited %.0f ms for a 300 ms bound", waited_ms);
    cr_expect(strstr(mlajit_last_error(), "MLAJIT_COMPILE_WAIT_MS"), "%s", mlajit_last_error());
    /* a holder that dies (SIGKILL: no cleanup of its own) releases it */
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    t0 = mlajit_now_ms();
    cr_assert_eq(mlajit_compile_lock_take(st, &key, 10000, &lock, &waited), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_lt(mlajit_now_ms() - t0, 1000.0, "the dead holder's lock went with it");
    /* within one process a second taker waits too (threads share one compile) */
    mlajit_compile_lock *second = NULL;
    cr_expect_eq(mlajit_compile_lock_take(st, &key, 50, &second, &waited), MLAJIT_ERR_CACHE);
    cr_expect_eq(waited, 1);
    mlajit_compile_lock_release(lock);
    cr_expect_eq(mlajit_compile_lock_take(st, &key, 0, &second, &waited), MLAJIT_OK);
    mlajit_compile_lock_release(second);
    close(ready);
    mlajit_store_close(st);
}

/* ---- files that are not regular files ------------------------------------------------ */

static void expect_refused_at_once(const char *dir, const char *kind)
{
    alarm(20); /* a blocking open would hang here: the alarm ends the test instead */
    mlajit_store *st = NULL;
    int rc = mlajit_store_open(dir, 0, &st);
    cr_expect_eq(rc, MLAJIT_ERR_IO, "%s: %d", kind, rc);
    cr_expect(strstr(mlajit_last_error(), kind) && strstr(mlajit_last_error(), "not a regular file"), "%s",
              mlajit_last_error());
    rc = mlajit_store_open(dir, 1, &st);
    cr_expect_eq(rc, MLAJIT_ERR_IO, "read-only, %s: %d", kind, rc);
    alarm(0);
}

Test(cache, a_data_file_that_is_not_a_regular_file_is_refused_at_once)
{
    char dir[256], path[300];
    root_path(dir, sizeof dir, "fifo");
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    cr_assert_eq(mkfifo(path, 0644), 0);
    expect_refused_at_once(dir, "a FIFO");

    root_path(dir, sizeof dir, "dir");
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    cr_assert_eq(mkdir(path, 0755), 0);
    expect_refused_at_once(dir, "a directory");

    root_path(dir, sizeof dir, "dev");
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    cr_assert_eq(symlink("/dev/zero", path), 0);
    expect_refused_at_once(dir, "a character device");

    /* and LMDB's lock file, for a writable open */
    root_path(dir, sizeof dir, "lockfifo");
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/lock.mdb", dir);
    cr_assert_eq(mkfifo(path, 0644), 0);
    mlajit_store *st;
    cr_expect_eq(mlajit_store_open(dir, 0, &st), MLAJIT_ERR_IO);
    cr_expect(strstr(mlajit_last_error(), "lock.mdb is a FIFO"), "%s", mlajit_last_error());
}
