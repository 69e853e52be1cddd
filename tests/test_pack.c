/* tests/test_pack.c - cubin packs and a cache that survives many processes,
 * read-only disks and bad bytes: the shared LMDB environment, the pack format,
 * the lookup order (map -> packs -> cache -> NVRTC), JIT disabled, damaged
 * files, processes and threads racing, unwritable caches, warm-up and the CLI.
 *
 * Most tests plant entries with made-up cubins under the real content keys, so
 * they need no compiler (a context without a device never loads a cubin); the
 * races, one recompile, one warm-up and the CLI test run NVRTC for real. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/env_registry.h"
#include "cache/pack.h"
#include "cache/store.h"
#include "common/error.h"
#include "mlajit.h"
#include "runtime/runtime.h"
#include "temp_tree.h"

#define LOOKUP_FIXTURE_ROOT "/tmp/mlajit-test-pack-XXXXXX"
#include "lookup_fixture.h"

static mlajit_kernel_spec spec_of(mlajit_model model, int h_q, int page, unsigned features)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, model, h_q, page), MLAJIT_OK);
    s.features = features;
    strcpy(s.arch, "sm_90a");
    return s;
}

/* The key and canonical string a context gives a spec. */
static mlajit_cache_key key_for(mlajit_context *ctx, const mlajit_kernel_spec *s, char spec_string[128])
{
    mlajit_kernel_spec r = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_resolve(s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_cache_key key;
    cr_assert_eq(mlajit_kernel_key(ctx, &r, &key, spec_string, 128), MLAJIT_OK);
    return key;
}

/* A made-up cubin of size bytes for spec_string (owned by the caller), with the
 * launch record this generator expects for the spec. */
static mlajit_cache_entry fake_entry(const char *spec_string, unsigned seed, size_t size)
{
    mlajit_cache_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.spec_string, sizeof e.spec_string, "%s", spec_string);
    snprintf(e.entry_names, sizeof e.entry_names, "%s", MLAJIT_ENTRY_NAMES);
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT, r = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_parse(spec_string, &s), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_spec_launch_record(&r, &e.launch), MLAJIT_OK, "%s", mlajit_last_error());
    e.compile_ms = 500 + seed;
    e.registers = 100 + (int)seed % 50;
    e.created_unix = 1700000000u + seed;
    e.cubin_size = size;
    e.cubin = malloc(size);
    cr_assert_not_null(e.cubin);
    for (size_t i = 0; i < size; i++)
        ((uint8_t *)e.cubin)[i] = (uint8_t)(i * 131u + seed * 17u + (i >> 9));
    return e;
}

/* Plant a made-up kernel for spec in the cache at dir. */
static void plant_in_cache(const char *dir, mlajit_context *keyer, const mlajit_kernel_spec *s, unsigned seed)
{
    char spec_string[128];
    mlajit_cache_key key = key_for(keyer, s, spec_string);
    mlajit_store *st;
    cr_assert_eq(mlajit_store_open(dir, 0, &st), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_cache_entry e = fake_entry(spec_string, seed, 3000 + seed * 10);
    cr_assert_eq(mlajit_store_put(st, &key, &e), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_cache_entry_clear(&e);
    mlajit_store_close(st);
}

/* This build's key recipe. */
static mlajit_pack_manifest this_recipe(mlajit_context *ctx)
{
    mlajit_pack_manifest m;
    memset(&m, 0, sizeof m);
    snprintf(m.tool, sizeof m.tool, "mlajit %s", MLAJIT_VERSION_STRING);
    snprintf(m.key_recipe, sizeof m.key_recipe, "%s", MLAJIT_KEY_RECIPE);
    m.nvrtc_major = ctx->nvrtc_major;
    m.nvrtc_minor = ctx->nvrtc_minor;
    return m;
}

/* Write a pack at path holding made-up kernels for specs, under recipe (NULL:
 * this build's). Keys are always this build's. */
static void write_fake_pack(const char *path, mlajit_context *keyer, const mlajit_kernel_spec *specs, int n,
                            const mlajit_pack_manifest *recipe)
{
    mlajit_pack_item items[32];
    mlajit_cache_entry entries[32];
    cr_assert_leq(n, 32);
    for (int i = 0; i < n; i++) {
        char spec_string[128];
        items[i].key = key_for(keyer, &specs[i], spec_string);
        entries[i] = fake_entry(spec_string, 40u + (unsigned)i, 5000 + (size_t)i * 1000);
        items[i].entry = &entries[i];
    }
    mlajit_pack_manifest mine = this_recipe(keyer);
    cr_assert_eq(mlajit_pack_write(path, recipe ? recipe : &mine, items, (size_t)n, NULL, 0), MLAJIT_OK, "%s",
                 mlajit_last_error());
    for (int i = 0; i < n; i++)
        mlajit_cache_entry_clear(&entries[i]);
}

static mlajit_context *keyer(void) { return context_on(NULL, "", 0); }
static const mlajit_kernel_spec *three_specs(void);

static void read_file(const char *path, uint8_t **bytes, size_t *len) { *bytes = read_whole_file(path, len); }

/* ------------------------------------------------------------------------- */
/* One MDB_env per cache directory per process                                */
/* ------------------------------------------------------------------------- */

TestSuite(registry, .init = make_root, .fini = remove_root);

/* A store holds no LMDB environment between writes: reads are mlajit's own
 * checked reads, and each write opens the process's one environment for the
 * directory (shared by concurrent writers) and closes it again. */
Test(registry, handles_on_one_directory_hold_no_environment_between_writes)
{
    const char *dir = path_in_root("cache");
    int before = mlajit_env_open_count();
    mlajit_store *a, *b, *c;
    cr_assert_eq(mlajit_store_open(dir, 0, &a), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_store_open(dir, 0, &b), MLAJIT_OK, "%s", mlajit_last_error());
    /* the same directory by another name */
    cr_assert_eq(symlink(dir, path_in_root("alias")), 0);
    cr_assert_eq(mlajit_store_open(path_in_root("alias"), 1, &c), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(mlajit_env_open_count(), before, "three handles, no environment held");

    mlajit_context *k = keyer();
    mlajit_kernel_spec s = spec_of(MLAJIT_MODEL_V32, 8, 64, 0);
    char spec_string[128];
    mlajit_cache_key key = key_for(k, &s, spec_string);
    mlajit_cache_entry e = fake_entry(spec_string, 1, 4096), got;
    cr_assert_eq(mlajit_store_put(a, &key, &e), MLAJIT_OK);
    cr_expect_eq(mlajit_env_open_count(), before, "the write closed the environment it opened");
    cr_assert_eq(mlajit_store_get(b, &key, &got), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_cache_entry_clear(&got);
    mlajit_store_close(a); /* closing one handle must not disturb the others */
    cr_assert_eq(mlajit_store_get(c, &key, &got), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(got.cubin_size, 4096u);
    mlajit_cache_entry_clear(&got);
    cr_assert_eq(mlajit_store_put(b, &key, &e), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_neq(mlajit_store_put(c, &key, &e), MLAJIT_OK, "a read-only handle stays read-only");
    mlajit_store_close(b);
    mlajit_store_close(c);
    cr_expect_eq(mlajit_env_open_count(), before);
    mlajit_cache_entry_clear(&e);
    mlajit_context_destroy(k);
}

/* The counters the cache at dir holds. */
static mlajit_store_counters stored_counters(const char *dir)
{
    mlajit_store *st;
    mlajit_store_counters c;
    cr_assert_eq(mlajit_store_open(dir, 1, &st), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_store_counters_get(st, &c), MLAJIT_OK);
    mlajit_store_close(st);
    return c;
}

Test(registry, two_contexts_on_one_cache_directory)
{
    const char *dir = path_in_root("cache");
    mlajit_context *k = keyer();
    mlajit_kernel_spec s1 = spec_of(MLAJIT_MODEL_V32, 8, 64, 0), s2 = spec_of(MLAJIT_MODEL_DSV4, 16, 64, 0);
    mlajit_context *a = context_on(dir, "", MLAJIT_CONTEXT_NO_JIT);
    mlajit_context *b = context_on(dir, "", MLAJIT_CONTEXT_NO_JIT);
    plant_in_cache(dir, k, &s1, 1); /* a third handle, while both contexts hold theirs */
    mlajit_kernel_report ra = MLAJIT_KERNEL_REPORT_INIT, rb = MLAJIT_KERNEL_REPORT_INIT;
    cr_assert_eq(mlajit_kernel_prepare(a, &s1, &ra), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_kernel_prepare(b, &s1, &rb), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(ra.source, MLAJIT_SOURCE_DISK);
    cr_expect_eq(rb.source, MLAJIT_SOURCE_DISK);
    cr_expect_str_eq(ra.key, rb.key);
    mlajit_context_destroy(a);
    plant_in_cache(dir, k, &s2, 2);
    cr_assert_eq(mlajit_kernel_prepare(b, &s2, &rb), MLAJIT_OK, "b still works after a is gone: %s",
                 mlajit_last_error());
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(b, &info);
    cr_expect_eq(info.disk_hits, 2);
    cr_expect_eq(info.compiles, 0);
    cr_expect_eq(info.cache_entries, 2);
    /* Hits never write: b's counts reach the cache only when asked. */
    cr_assert_eq(mlajit_context_flush_counters(b), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_context_flush_counters(b), MLAJIT_OK, "nothing pending is no error");
    mlajit_context_destroy(b);
    mlajit_context_destroy(k);

    mlajit_store_counters c = stored_counters(dir);
    cr_expect_eq(c.disk_hits, 2, "b flushed its two hits; a, which only read, recorded nothing");
    cr_expect_eq(c.contexts, 1);
}

/* A process that only reads leaves the cache's files exactly as they were. */
Test(registry, contexts_that_only_hit_write_nothing)
{
    const char *dir = path_in_root("cache");
    mlajit_context *k = keyer();
    plant_in_cache(dir, k, &three_specs()[0], 1);
    struct stat before, after;
    cr_assert_eq(stat(path_in_root("cache/data.mdb"), &before), 0);
    uint8_t *bytes_before, *bytes_after;
    size_t len_before, len_after;
    read_file(path_in_root("cache/data.mdb"), &bytes_before, &len_before);
    for (int i = 0; i < 3; i++) {
        mlajit_context *ctx = context_on(dir, "", MLAJIT_CONTEXT_NO_JIT);
        mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
        cr_assert_eq(mlajit_kernel_prepare(ctx, &three_specs()[0], &r), MLAJIT_OK, "%s", mlajit_last_error());
        cr_expect_eq(r.source, MLAJIT_SOURCE_DISK);
        cr_assert_eq(mlajit_kernel_prepare(ctx, &three_specs()[0], &r), MLAJIT_OK);
        cr_expect_eq(r.source, MLAJIT_SOURCE_MEMORY);
        mlajit_context_destroy(ctx);
    }
    cr_assert_eq(stat(path_in_root("cache/data.mdb"), &after), 0);
    read_file(path_in_root("cache/data.mdb"), &bytes_after, &len_after);
    cr_expect(before.st_mtim.tv_sec == after.st_mtim.tv_sec && before.st_mtim.tv_nsec == after.st_mtim.tv_nsec,
              "data.mdb was modified by processes that only hit");
    cr_expect(len_before == len_after && memcmp(bytes_before, bytes_after, len_before) == 0,
              "data.mdb's bytes changed");
    free(bytes_before);
    free(bytes_after);
    cr_expect_eq(stored_counters(dir).contexts, 0, "no context recorded anything");
    mlajit_context_destroy(k);
}

/* Read-only and writable handles on one directory coexist in a process:
 * neither holds an environment (LMDB's one-per-process rule is the writes'). */
Test(registry, read_only_and_writable_handles_coexist)
{
    const char *dir = path_in_root("cache");
    mlajit_store *r, *w;
    cr_assert_eq(mkdir(dir, 0755), 0);
    cr_assert_eq(mlajit_store_open(dir, 1, &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_store_open(dir, 0, &w), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_cache_key key = {7, 8};
    mlajit_cache_entry e = {.cubin = "abc", .cubin_size = 3}, got;
    cr_expect_eq(mlajit_store_get(r, &key, &got), MLAJIT_ERR_NOT_FOUND, "no data file yet is a miss");
    cr_assert_eq(mlajit_store_put(w, &key, &e), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_store_get(r, &key, &got), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(got.cubin_size, 3u);
    mlajit_cache_entry_clear(&got);
    cr_expect_neq(mlajit_store_put(r, &key, &e), MLAJIT_OK);
    mlajit_store_close(r);
    mlajit_store_close(w);
}

Test(registry, a_forked_child_opens_its_own_environment)
{
    const char *dir = path_in_root("cache");
    mlajit_store *st;
    cr_assert_eq(mlajit_store_open(dir, 0, &st), MLAJIT_OK);
    int before = mlajit_env_open_count();
    pid_t pid = fork();
    if (pid == 0) {
        mlajit_store *mine;
        int ok = mlajit_store_open(dir, 0, &mine) == MLAJIT_OK && mlajit_env_open_count() == 0;
        mlajit_cache_key key = {1, 2};
        mlajit_cache_entry e = {.cubin = "x", .cubin_size = 1};
        ok = ok && mlajit_store_put(mine, &key, &e) == MLAJIT_OK && mlajit_env_open_count() == 0;
        mlajit_store_close(mine);
        _exit(ok ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child used its own environment");
    cr_expect_eq(mlajit_env_open_count(), before);
    mlajit_cache_key key = {1, 2};
    mlajit_cache_entry got;
    cr_expect_eq(mlajit_store_get(st, &key, &got), MLAJIT_OK, "the child's write is visible: %s",
                 mlajit_last_error());
    mlajit_cache_entry_clear(&got);
    mlajit_store_close(st);
}

/* ------------------------------------------------------------------------- */
/* The pack format                                                            */
/* ------------------------------------------------------------------------- */

TestSuite(pack, .init = make_root, .fini = remove_root);

static const mlajit_kernel_spec *three_specs(void)
{
    static mlajit_kernel_spec s[3];
    s[0] = spec_of(MLAJIT_MODEL_V32, 8, 64, 0);
    s[1] = spec_of(MLAJIT_MODEL_DSV4, 16, 64, MLAJIT_FEATURE_SINK);
    s[2] = spec_of(MLAJIT_MODEL_V32, 128, 64, 0);
    return s;
}

Test(pack, write_open_get_and_verify_round_trip)
{
    mlajit_context *k = keyer();
    const char *path = path_in_root("a.pack");
    write_fake_pack(path, k, three_specs(), 3, NULL);
    cr_expect(!path_exists(path_in_root("a.pack-lock")), "reading needs no lock file, writing leaves none");

    mlajit_pack *pack;
    cr_assert_eq(mlajit_pack_open(path, &pack), MLAJIT_OK, "%s", mlajit_last_error());
    const mlajit_pack_manifest *m = mlajit_pack_manifest_of(pack);
    cr_expect_eq(m->kernel_count, 3u);
    cr_expect_str_eq(m->archs, "sm_90a");
    cr_expect_str_eq(m->key_recipe, MLAJIT_KEY_RECIPE);
    cr_expect(strstr(m->tool, MLAJIT_VERSION_STRING) != NULL);
    cr_expect_gt(m->created_unix, 1700000000u);
    cr_expect(mlajit_pack_has_arch(pack, "sm_90a"));
    cr_expect(!mlajit_pack_has_arch(pack, "sm_90"));
    for (int i = 0; i < 3; i++) {
        char spec_string[128];
        mlajit_cache_key key = key_for(k, &three_specs()[i], spec_string);
        mlajit_cache_entry got;
        cr_assert_eq(mlajit_pack_get(pack, &key, &got), MLAJIT_OK, "%s", mlajit_last_error());
        cr_expect_str_eq(got.spec_string, spec_string);
        cr_expect_eq(got.cubin_size, 5000u + (size_t)i * 1000);
        mlajit_cache_entry_clear(&got);
    }
    mlajit_cache_key absent = {42, 42};
    mlajit_cache_entry got;
    cr_expect_eq(mlajit_pack_get(pack, &absent, &got), MLAJIT_ERR_NOT_FOUND);
    size_t checked = 0;
    cr_expect_eq(mlajit_pack_verify(pack, &checked), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(checked, 3u);

    /* a second open of the same file shares the environment */
    int envs = mlajit_env_open_count();
    mlajit_pack *again;
    cr_assert_eq(mlajit_pack_open(path, &again), MLAJIT_OK);
    cr_expect_eq(mlajit_env_open_count(), envs);
    mlajit_pack_close(again);
    mlajit_pack_close(pack);
    mlajit_context_destroy(k);
}

Test(pack, manifest_round_trip_and_strict_parsing)
{
    mlajit_pack_kernel kernels[2] = {{{1, 2}, "v32.h8.p64.t64.hc16.portable.sm_90a"},
                                     {{3, 4}, "dsv4.h16.p64.t64.hc16.portable.sm_90a"}};
    mlajit_pack_manifest m = {.format_version = MLAJIT_PACK_FORMAT_VERSION, .tool = "mlajit 0.1.0",
                              .key_recipe = "mlajit-key-0",
                              .nvrtc_major = 13, .nvrtc_minor = 0, .created_unix = 1764522000u,
                              .archs = "sm_90a", .kernel_count = 2, .kernels = kernels};
    char *text;
    size_t len;
    cr_assert_eq(mlajit_pack_manifest_format(&m, &text, &len), MLAJIT_OK);
    cr_expect(strstr(text, "created 1764522000 2025-11-30T17:00:00Z\n") != NULL, "%s", text);
    mlajit_pack_manifest back;
    cr_assert_eq(mlajit_pack_manifest_parse(text, len, &back), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect(mlajit_pack_manifest_same_recipe(&m, &back));
    cr_expect_str_eq(back.tool, m.tool);
    cr_expect_str_eq(back.archs, m.archs);
    cr_expect_eq(back.created_unix, m.created_unix);
    cr_assert_eq(back.kernel_count, 2u);
    cr_expect_eq(back.kernels[1].key.lo, 4u);
    cr_expect_str_eq(back.kernels[1].spec_string, kernels[1].spec_string);
    mlajit_pack_manifest_clear(&back);

    /* every truncation, every single-byte change and any trailing byte is refused */
    for (size_t n = 0; n < len; n++) {
        mlajit_clear_error();
        cr_expect_eq(mlajit_pack_manifest_parse(text, n, &back), MLAJIT_ERR_CORRUPT, "truncated to %zu", n);
        cr_expect_neq(mlajit_last_error()[0], '\0');
    }
    for (size_t i = 0; i < len; i++) {
        char saved = text[i];
        text[i] = (char)(saved ^ 0x01);
        cr_expect_eq(mlajit_pack_manifest_parse(text, len, &back), MLAJIT_ERR_CORRUPT, "byte %zu flipped", i);
        text[i] = saved;
    }
    char *longer = malloc(len + 2);
    memcpy(longer, text, len);
    memcpy(longer + len, "x\n", 2);
    cr_expect_eq(mlajit_pack_manifest_parse(longer, len + 2, &back), MLAJIT_ERR_CORRUPT);
    free(longer);
    /* another format version is named in the message */
    cr_assert_eq(text[12], '0' + MLAJIT_PACK_FORMAT_VERSION, "%.16s", text);
    text[12] = '1';
    cr_expect_eq(mlajit_pack_manifest_parse(text, len, &back), MLAJIT_ERR_CORRUPT);
    cr_expect(strstr(mlajit_last_error(), "format version 1") != NULL, "%s", mlajit_last_error());
    free(text);
}

/* Expect a damaged pack file to be refused with a message (in a child, so a
 * crash is a failure of this test, not of the suite). */
static void expect_refused(const char *path, const char *what)
{
    pid_t pid = fork();
    if (pid == 0) {
        mlajit_pack *p = NULL;
        mlajit_clear_error();
        int rc = mlajit_pack_open(path, &p);
        if (rc == MLAJIT_OK) {
            size_t checked;
            rc = mlajit_pack_verify(p, &checked);
            mlajit_pack_close(p);
            _exit(rc == MLAJIT_OK ? 10 : 0);
        }
        _exit(mlajit_last_error()[0] ? 0 : 11);
    }
    int status;
    waitpid(pid, &status, 0);
    cr_expect(!WIFSIGNALED(status), "%s: the reader crashed (signal %d)", what, WTERMSIG(status));
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) != 10, "%s: accepted", what);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) != 11, "%s: refused without a message", what);
}

Test(pack, damaged_files_are_refused_never_crash, .timeout = 120)
{
    mlajit_context *k = keyer();
    const char *good = path_in_root("good.pack"), *bad = path_in_root("bad.pack");
    write_fake_pack(good, k, three_specs(), 3, NULL);
    uint8_t *bytes;
    size_t len;
    read_file(good, &bytes, &len);
    char what[64];
    /* a flipped bit anywhere: LMDB pages, values, the manifest, the trailer */
    for (size_t off = 0; off < len; off += len / 97 + 1) {
        bytes[off] ^= 0x10;
        write_whole_file(bad, bytes, len);
        bytes[off] ^= 0x10;
        snprintf(what, sizeof what, "bit flipped at %zu", off);
        expect_refused(bad, what);
    }
    /* truncated, extended, zeroed, empty, random, and an LMDB file that is no pack */
    size_t cuts[] = {0, 1, 63, 64, 4096, 8192, len / 2, len - 65, len - 64, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        write_whole_file(bad, bytes, cuts[i]);
        snprintf(what, sizeof what, "truncated to %zu", cuts[i]);
        expect_refused(bad, what);
    }
    uint8_t *longer = malloc(len + 100);
    memcpy(longer, bytes, len);
    memset(longer + len, 0, 100);
    write_whole_file(bad, longer, len + 100);
    expect_refused(bad, "extended by 100 bytes");
    memset(longer, 0, len);
    write_whole_file(bad, longer, len);
    expect_refused(bad, "all zero");
    for (size_t i = 0; i < len; i++)
        longer[i] = (uint8_t)(rand() >> 7);
    write_whole_file(bad, longer, len);
    expect_refused(bad, "random bytes");
    memcpy(longer, bytes, len);
    memset(longer + 3 * 4096, 0xEE, 4096); /* an overwritten page, with the trailer intact */
    write_whole_file(bad, longer, len);
    expect_refused(bad, "overwritten page");
    free(longer);
    mlajit_store *st;
    cr_assert_eq(mlajit_store_open(path_in_root("plain"), 0, &st), MLAJIT_OK);
    mlajit_store_close(st);
    expect_refused(path_in_root("plain/data.mdb"), "a cache's data file");
    expect_refused(path_in_root("missing.pack"), "a missing file");
    free(bytes);
    mlajit_context_destroy(k);
}

/* ------------------------------------------------------------------------- */
/* Lookup order and JIT disabled                                              */
/* ------------------------------------------------------------------------- */

TestSuite(lookup, .init = make_root, .fini = remove_root);

Test(lookup, packs_come_before_the_cache_and_hits_are_counted)
{
    mlajit_context *k = keyer();
    const char *pack = path_in_root("a.pack"), *dir = path_in_root("cache");
    write_fake_pack(pack, k, three_specs(), 2, NULL);
    plant_in_cache(dir, k, &three_specs()[0], 7); /* also in the cache: the pack must win */
    plant_in_cache(dir, k, &three_specs()[2], 8); /* only in the cache */
    mlajit_context *ctx = context_on(dir, pack, MLAJIT_CONTEXT_NO_JIT);
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    cr_assert_eq(mlajit_kernel_prepare(ctx, &three_specs()[0], &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.source, MLAJIT_SOURCE_PACK);
    cr_expect_eq(r.cubin_bytes, 5000u, "the pack's cubin, not the cache's");
    cr_expect_eq(r.cache_hit, 1);
    cr_assert_eq(mlajit_kernel_prepare(ctx, &three_specs()[1], &r), MLAJIT_OK);
    cr_expect_eq(r.source, MLAJIT_SOURCE_PACK);
    cr_assert_eq(mlajit_kernel_prepare(ctx, &three_specs()[2], &r), MLAJIT_OK);
    cr_expect_eq(r.source, MLAJIT_SOURCE_DISK);
    cr_assert_eq(mlajit_kernel_prepare(ctx, &three_specs()[0], &r), MLAJIT_OK);
    cr_expect_eq(r.source, MLAJIT_SOURCE_MEMORY);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    cr_assert_eq(mlajit_context_get_info(ctx, &info), MLAJIT_OK);
    cr_expect_eq(info.pack_count, 1);
    cr_expect_eq(info.pack_hits, 2);
    cr_expect_eq(info.disk_hits, 1);
    cr_expect_eq(info.memory_hits, 1);
    cr_expect_eq(info.compiles, 0);
    cr_expect_eq(info.jit_disabled, 1);
    cr_expect_eq(info.cache_writable, 1);
    mlajit_context_destroy(ctx);

    /* MLAJIT_PACKS is read when options.packs is NULL; empty parts are skipped */
    char list[600];
    snprintf(list, sizeof list, "::%s:", pack);
    setenv("MLAJIT_PACKS", list, 1);
    mlajit_context_options o = {.struct_size = sizeof o,
                                .flags = MLAJIT_CONTEXT_NO_DEVICE | MLAJIT_CONTEXT_NO_DISK_CACHE};
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK);
    mlajit_context_get_info(ctx, &info);
    cr_expect_eq(info.pack_count, 1);
    mlajit_context_destroy(ctx);
    mlajit_context_destroy(k);
}

/* A miss with JIT off: the message names the spec and what would serve it, in
 * the library's terms (the CLI adds the pack build line: Test(cli, ...) below). */
static void expect_miss_in_library_terms(mlajit_context *ctx, const mlajit_kernel_spec *spec, const char *name)
{
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    cr_assert_eq(mlajit_kernel_prepare(ctx, spec, &r), MLAJIT_ERR_NOT_FOUND);
    const char *msg = mlajit_last_error();
    cr_expect(strstr(msg, name) != NULL, "%s", msg);
    cr_expect(strstr(msg, "add a pack that holds") && strstr(msg, "MLAJIT_PACKS or mlajit_context_options.packs"),
              "%s", msg);
    cr_expect(strstr(msg, "mlajit pack") == NULL && strstr(msg, "--") == NULL, "no CLI syntax: %s", msg);
}

Test(lookup, jit_disabled_without_the_kernel_names_spec_and_what_serves_it)
{
    mlajit_kernel_spec s = spec_of(MLAJIT_MODEL_V32, 24, 64, MLAJIT_FEATURE_SINK | MLAJIT_FEATURE_TOPK_LENGTH);
    mlajit_context *ctx = context_on(path_in_root("cache"), "", MLAJIT_CONTEXT_NO_JIT);
    expect_miss_in_library_terms(ctx, &s, "no kernel for v32.h24.p64.");
    cr_expect(strstr(mlajit_last_error(), "MLAJIT_CONTEXT_NO_JIT") != NULL, "%s", mlajit_last_error());
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_eq(info.jit_refusals, 1);
    cr_expect_eq(info.compiles, 0);
    mlajit_context_destroy(ctx);

    /* the same from the environment; a walk's kernel is named as itself */
    setenv("MLAJIT_DISABLE_JIT", "1", 1);
    ctx = context_on(NULL, "", 0);
    s.tile = 32;
    expect_miss_in_library_terms(ctx, &s, "no kernel for v32.h24.p64.fsl.t32.");
    cr_expect(strstr(mlajit_last_error(), "MLAJIT_DISABLE_JIT=1") != NULL, "%s", mlajit_last_error());
    mlajit_kernel_spec h128 = spec_of(MLAJIT_MODEL_V32, 128, 64, 0), h128_short = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert(mlajit_spec_short_walk_alternative(&h128, "sm_90a", &h128_short));
    expect_miss_in_library_terms(ctx, &h128_short, "no kernel for v32.h128.p64.t64.hc64.sm90-staged.sm_90a");
    mlajit_context_destroy(ctx);
    setenv("MLAJIT_DISABLE_JIT", "0", 1);
    ctx = context_on(NULL, "", 0);
    mlajit_context_get_info(ctx, &info);
    cr_expect_eq(info.jit_disabled, 0, "MLAJIT_DISABLE_JIT=0 leaves JIT on");
    mlajit_context_destroy(ctx);
}

Test(lookup, jit_disabled_with_the_pack_serves_every_kernel)
{
    mlajit_context *k = keyer();
    const char *pack = path_in_root("prod.pack");
    write_fake_pack(pack, k, three_specs(), 3, NULL);
    setenv("MLAJIT_DISABLE_JIT", "1", 1);
    setenv("MLAJIT_PACKS", pack, 1);
    mlajit_context_options o = {.struct_size = sizeof o,
                                .flags = MLAJIT_CONTEXT_NO_DEVICE | MLAJIT_CONTEXT_NO_DISK_CACHE};
    mlajit_context *ctx;
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK);
    for (int i = 0; i < 3; i++) {
        mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
        cr_expect_eq(mlajit_kernel_prepare(ctx, &three_specs()[i], &r), MLAJIT_OK, "%s", mlajit_last_error());
        cr_expect_eq(r.source, MLAJIT_SOURCE_PACK);
    }
    mlajit_kernel_spec other = spec_of(MLAJIT_MODEL_V32, 16, 64, 0);
    cr_expect_eq(mlajit_kernel_prepare(ctx, &other, NULL), MLAJIT_ERR_NOT_FOUND);
    cr_expect(strstr(mlajit_last_error(), pack) != NULL, "the message lists the packs: %s", mlajit_last_error());
    mlajit_context_destroy(ctx);
    mlajit_context_destroy(k);
}

Test(lookup, pack_from_another_recipe_or_arch_is_skipped_with_a_warning)
{
    mlajit_context *k = keyer();
    mlajit_pack_manifest other = this_recipe(k);
    snprintf(other.key_recipe, sizeof other.key_recipe, "mlajit-key-1");
    write_fake_pack(path_in_root("old-recipe.pack"), k, three_specs(), 1, &other);
    mlajit_kernel_spec blackwell = spec_of(MLAJIT_MODEL_V32, 8, 64, 0);
    strcpy(blackwell.arch, "sm_100a");
    write_fake_pack(path_in_root("sm100.pack"), k, &blackwell, 1, NULL);
    write_whole_file(path_in_root("junk.pack"), (const uint8_t *)"not a pack", 10);

    char list[2600];
    snprintf(list, sizeof list, "%s:%s:%s:%s", path_in_root("old-recipe.pack"), path_in_root("sm100.pack"),
             path_in_root("junk.pack"), path_in_root("missing.pack"));
    capture_begin();
    mlajit_context *ctx = context_on(NULL, list, MLAJIT_CONTEXT_NO_JIT);
    const char *err = capture_end();
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_eq(info.pack_count, 0, "no pack can serve this context");
    cr_expect_eq(count_of(err, "warning:"), 4, "one warning per pack:\n%s", err);
    cr_expect(strstr(err, "key recipe mlajit-key-1") != NULL, "%s", err);
    cr_expect(strstr(err, "holds kernels for sm_100a; this context targets sm_90a") != NULL, "%s", err);
    cr_expect(strstr(err, "junk.pack") != NULL, "%s", err);
    cr_expect_eq(mlajit_kernel_prepare(ctx, &three_specs()[0], NULL), MLAJIT_ERR_NOT_FOUND,
                 "its kernels are not used");
    mlajit_context_destroy(ctx);
    mlajit_context_destroy(k);
}

/* A cubin needs a driver, not the NVRTC that built it: a pack made by another
 * NVRTC serves, looked up with the keys that NVRTC's version gives (its
 * manifest's); a pack whose keys do not follow its own manifest serves nothing. */
Test(lookup, pack_from_another_nvrtc_serves_under_its_own_keys)
{
    mlajit_context *k = keyer();
    k->nvrtc_minor += 1; /* the pack's NVRTC: keys and manifest both say it */
    mlajit_pack_manifest newer = this_recipe(k);
    write_fake_pack(path_in_root("newer-nvrtc.pack"), k, three_specs(), 1, &newer);
    k->nvrtc_minor -= 1; /* keys of this build's NVRTC under the newer manifest */
    write_fake_pack(path_in_root("mislabelled.pack"), k, three_specs(), 1, &newer);

    mlajit_context *ctx = context_on(NULL, path_in_root("newer-nvrtc.pack"), MLAJIT_CONTEXT_NO_JIT);
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    cr_expect_eq(mlajit_kernel_prepare(ctx, &three_specs()[0], &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.source, MLAJIT_SOURCE_PACK);
    mlajit_context_destroy(ctx);

    ctx = context_on(NULL, path_in_root("mislabelled.pack"), MLAJIT_CONTEXT_NO_JIT);
    cr_expect_eq(mlajit_kernel_prepare(ctx, &three_specs()[0], NULL), MLAJIT_ERR_NOT_FOUND,
                 "keys made by another NVRTC than the manifest names match nothing");
    mlajit_context_destroy(ctx);
    mlajit_context_destroy(k);
}

Test(lookup, damaged_entry_in_a_pack_falls_through_to_the_cache)
{
    mlajit_context *k = keyer();
    const char *pack = path_in_root("a.pack"), *dir = path_in_root("cache");
    write_fake_pack(pack, k, three_specs(), 1, NULL);
    /* Damage the entry's cubin, then re-seal the file checksum and trailer, as
     * a faulty writer would: only the entry's own checksum can catch this. */
    uint8_t *bytes;
    size_t len;
    read_file(pack, &bytes, &len);
    size_t lmdb_len = len - MLAJIT_PACK_TRAILER_BYTES;
    uint8_t pattern[16];
    for (size_t i = 0; i < sizeof pattern; i++)
        pattern[i] = (uint8_t)((i + 100) * 131u + 40u * 17u + ((i + 100) >> 9));
    uint8_t *hit = memmem(bytes, lmdb_len, pattern, sizeof pattern);
    cr_assert_not_null(hit, "the cubin's bytes are in the file");
    hit[0] ^= 0xFF;
    pack_reseal(bytes, len);
    write_whole_file(pack, bytes, len);
    free(bytes);
    plant_in_cache(dir, k, &three_specs()[0], 9);

    capture_begin();
    mlajit_context *ctx = context_on(dir, pack, MLAJIT_CONTEXT_NO_JIT);
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    int rc = mlajit_kernel_prepare(ctx, &three_specs()[0], &r);
    const char *err = capture_end();
    cr_assert_eq(rc, MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.source, MLAJIT_SOURCE_DISK);
    cr_expect(strstr(err, "checksum") != NULL, "the warning says why: %s", err);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_eq(info.corrupt, 1);
    mlajit_context_destroy(ctx);
    mlajit_context_destroy(k);
}

Test(lookup, keys_are_content_not_places)
{
    mlajit_context *k = keyer();
    char dir[512], moved[512];
    snprintf(dir, sizeof dir, "%s", path_in_root("cache"));
    snprintf(moved, sizeof moved, "%s", path_in_root("moved-cache"));
    plant_in_cache(dir, k, &three_specs()[0], 3);
    write_fake_pack(path_in_root("a.pack"), k, three_specs() + 1, 1, NULL);
    cr_assert_eq(rename(dir, moved), 0);
    cr_assert_eq(mkdir(path_in_root("elsewhere"), 0755), 0);
    cr_assert_eq(rename(path_in_root("a.pack"), path_in_root("elsewhere/b.pack")), 0);
    mlajit_context *ctx = context_on(moved, path_in_root("elsewhere/b.pack"), MLAJIT_CONTEXT_NO_JIT);
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    cr_expect_eq(mlajit_kernel_prepare(ctx, &three_specs()[0], &r), MLAJIT_OK, "moved cache: %s",
                 mlajit_last_error());
    cr_expect_eq(r.source, MLAJIT_SOURCE_DISK);
    cr_expect_eq(mlajit_kernel_prepare(ctx, &three_specs()[1], &r), MLAJIT_OK, "moved pack: %s",
                 mlajit_last_error());
    cr_expect_eq(r.source, MLAJIT_SOURCE_PACK);

    /* what the kernel is made from does change the key */
    char spec_string[128];
    mlajit_cache_key base = key_for(ctx, &three_specs()[0], spec_string), changed;
    ctx->nvrtc_minor += 1; /* another NVRTC */
    changed = key_for(ctx, &three_specs()[0], spec_string);
    cr_expect(changed.hi != base.hi || changed.lo != base.lo, "the NVRTC version enters the key");
    ctx->nvrtc_minor -= 1;
    mlajit_kernel_spec other_arch = three_specs()[0];
    strcpy(other_arch.arch, "sm_90");
    changed = key_for(ctx, &other_arch, spec_string);
    cr_expect(changed.hi != base.hi || changed.lo != base.lo, "the arch (and its -arch option) enters the key");
    mlajit_context_destroy(ctx);
    mlajit_context_destroy(k);
}

/* ------------------------------------------------------------------------- */
/* Bad bytes in the writable cache                                            */
/* ------------------------------------------------------------------------- */

TestSuite(damage, .init = make_root, .fini = remove_root);

/* A cache of n made-up entries big enough to span many pages. */
static void fill_cache(const char *dir, mlajit_context *k, int n)
{
    mlajit_store *st;
    cr_assert_eq(mlajit_store_open(dir, 0, &st), MLAJIT_OK);
    for (int i = 0; i < n; i++) {
        mlajit_kernel_spec s = spec_of(MLAJIT_MODEL_V32, 1 + i, 64, 0);
        char spec_string[128];
        mlajit_cache_key key = key_for(k, &s, spec_string);
        mlajit_cache_entry e = fake_entry(spec_string, (unsigned)i, 20000 + (size_t)i * 333);
        cr_assert_eq(mlajit_store_put(st, &key, &e), MLAJIT_OK);
        mlajit_cache_entry_clear(&e);
    }
    mlajit_store_close(st);
}

Test(damage, truncated_data_file_is_set_aside_and_the_kernel_recompiled, .timeout = 120)
{
    mlajit_context *k = keyer();
    const char *dir = path_in_root("cache");
    fill_cache(dir, k, 12);
    char data[600];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    struct stat st;
    cr_assert_eq(stat(data, &st), 0);
    cr_assert_eq(truncate(data, st.st_size / 2), 0);

    capture_begin();
    mlajit_context *ctx = context_on(dir, "", 0);
    mlajit_kernel_spec s = spec_of(MLAJIT_MODEL_V32, 3, 64, 0);
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    int rc = mlajit_kernel_prepare(ctx, &s, &r);
    const char *err = capture_end();
    cr_assert_eq(rc, MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.source, MLAJIT_SOURCE_COMPILED, "the planted entry went with the damaged file");
    cr_expect(strstr(err, "truncated") != NULL && strstr(err, "data.mdb.damaged.1") != NULL, "%s", err);
    cr_expect_eq(count_of(err, "warning:"), 1, "%s", err);
    char aside[600];
    snprintf(aside, sizeof aside, "%s/data.mdb.damaged.1", dir);
    cr_expect(path_exists(aside));
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_eq(info.cache_writable, 1, "a fresh cache was started");
    cr_expect_eq(info.cache_entries, 1, "and the recompiled kernel stored in it");
    mlajit_context_destroy(ctx);
    mlajit_context_destroy(k);
}

Test(damage, overwritten_data_file_is_set_aside)
{
    mlajit_context *k = keyer();
    const char *dir = path_in_root("cache");
    fill_cache(dir, k, 4);
    char data[600];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    uint8_t *bytes;
    size_t len;
    read_file(data, &bytes, &len);
    for (size_t i = 0; i < len; i++)
        bytes[i] = (uint8_t)(i * 7 + 3);
    write_whole_file(data, bytes, len);
    free(bytes);
    capture_begin();
    mlajit_context *ctx = context_on(dir, "", MLAJIT_CONTEXT_NO_JIT);
    const char *err = capture_end();
    cr_expect(strstr(err, "data.mdb.damaged") != NULL, "%s", err);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_eq(info.cache_writable, 1);
    cr_expect_eq(info.cache_entries, 0);
    mlajit_context_destroy(ctx);
    plant_in_cache(dir, k, &three_specs()[0], 1); /* the fresh cache works */
    mlajit_context_destroy(k);
}

Test(damage, damaged_cache_in_use_elsewhere_is_left_alone)
{
    mlajit_context *k = keyer();
    const char *dir = path_in_root("cache");
    fill_cache(dir, k, 4);
    int go[2], ready[2];
    cr_assert_eq(pipe(go), 0);
    cr_assert_eq(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) { /* another process with LMDB's environment open: a write in flight, or an older mlajit */
        mlajit_env_request req = {.path = dir, .map_size = (size_t)1 << 30};
        mlajit_shared_env *env = NULL;
        char c = mlajit_env_acquire(&req, &env, NULL) == MLAJIT_OK ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) < 0)
            _exit(1);
        mlajit_env_release(env);
        _exit(0);
    }
    char c = 0;
    cr_assert_eq(read(ready[0], &c, 1), 1);
    cr_assert_eq(c, 'y');
    char data[600];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    struct stat st;
    cr_assert_eq(stat(data, &st), 0);
    cr_assert_eq(truncate(data, st.st_size / 2), 0);
    capture_begin();
    mlajit_context *ctx = context_on(dir, "", MLAJIT_CONTEXT_NO_JIT);
    const char *err = capture_end();
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_eq(info.cache_writable, 0, "not repaired under another process");
    cr_expect(strstr(err, "in use by another process") != NULL, "%s", err);
    cr_expect_eq(count_of(err, "warning:"), 1, "%s", err);
    cr_expect(!path_exists(path_in_root("cache/data.mdb.damaged.1")));
    mlajit_context_destroy(ctx);
    cr_assert_eq(write(go[1], "x", 1), 1);
    int status;
    waitpid(pid, &status, 0);
    mlajit_context_destroy(k);
}

Test(damage, flipped_byte_in_an_entry_is_a_miss_with_a_warning)
{
    mlajit_context *k = keyer();
    const char *dir = path_in_root("cache");
    plant_in_cache(dir, k, &three_specs()[0], 5);
    char data[600];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    uint8_t *bytes;
    size_t len;
    read_file(data, &bytes, &len);
    uint8_t pattern[16];
    for (size_t i = 0; i < sizeof pattern; i++)
        pattern[i] = (uint8_t)((i + 200) * 131u + 5u * 17u + ((i + 200) >> 9));
    uint8_t *hit = memmem(bytes, len, pattern, sizeof pattern);
    cr_assert_not_null(hit);
    hit[3] ^= 0x04;
    write_whole_file(data, bytes, len);
    free(bytes);
    write_fake_pack(path_in_root("a.pack"), k, three_specs(), 1, NULL);

    capture_begin();
    mlajit_context *ctx = context_on(dir, "", MLAJIT_CONTEXT_NO_JIT);
    int rc = mlajit_kernel_prepare(ctx, &three_specs()[0], NULL);
    const char *err = capture_end();
    cr_expect_eq(rc, MLAJIT_ERR_NOT_FOUND, "a damaged entry is a miss (JIT off here)");
    cr_expect(strstr(err, "checksum") != NULL, "%s", err);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_eq(info.corrupt, 1);
    mlajit_context_destroy(ctx);
    /* with a pack holding it, the pack serves it first */
    ctx = context_on(dir, path_in_root("a.pack"), MLAJIT_CONTEXT_NO_JIT);
    cr_expect_eq(mlajit_kernel_prepare(ctx, &three_specs()[0], NULL), MLAJIT_OK);
    mlajit_context_destroy(ctx);
    mlajit_context_destroy(k);
}

Test(damage, value_size_past_the_end_of_the_file_is_caught_before_reading)
{
    mlajit_context *k = keyer();
    const char *dir = path_in_root("cache");
    mlajit_kernel_spec s = three_specs()[0];
    plant_in_cache(dir, k, &s, 6);
    char spec_string[128];
    mlajit_cache_key key = key_for(k, &s, spec_string);
    uint8_t key_bytes[16];
    mlajit_cache_key_to_bytes(&key, key_bytes);
    char data[600];
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    uint8_t *bytes;
    size_t len;
    read_file(data, &bytes, &len);
    /* LMDB's leaf node: u16 size low, u16 size high, u16 flags, u16 key size, key */
    uint8_t *node_key = memmem(bytes, len, key_bytes, sizeof key_bytes);
    cr_assert_not_null(node_key);
    cr_assert_eq(node_key[-2], 16);
    node_key[-6] = 0x40; /* the value now claims 4 MiB more than the file holds */
    write_whole_file(data, bytes, len);
    free(bytes);
    pid_t pid = fork();
    if (pid == 0) {
        /* read-only: the checked read finds it (the overflow run is too short for the size) */
        mlajit_store *st;
        mlajit_cache_entry e;
        if (mlajit_store_open(dir, 1, &st) != MLAJIT_OK)
            _exit(2);
        int rc = mlajit_store_get(st, &key, &e);
        if (rc != MLAJIT_ERR_NOT_FOUND || !strstr(mlajit_last_error(), "overflow page"))
            _exit(3);
        mlajit_store_close(st);
        /* writable: the open's check finds it and sets the file aside */
        if (mlajit_store_open(dir, 0, &st) != MLAJIT_OK)
            _exit(4);
        rc = mlajit_store_get(st, &key, &e);
        mlajit_store_close(st);
        _exit(rc == MLAJIT_ERR_NOT_FOUND && path_exists(path_in_root("cache/data.mdb.damaged.1")) ? 0 : 5);
    }
    int status;
    waitpid(pid, &status, 0);
    cr_expect(!WIFSIGNALED(status), "reading the value crashed (signal %d)", WTERMSIG(status));
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit %d", WEXITSTATUS(status));
    mlajit_context_destroy(k);
}

/* ------------------------------------------------------------------------- */
/* Many processes and threads                                                 */
/* ------------------------------------------------------------------------- */

TestSuite(race, .init = make_root, .fini = remove_root);

enum { RACE_PROCESSES = 8, RACE_SPECS = 2 };

typedef struct race_result {
    int status;
    int compiled;
    char keys[RACE_SPECS][33];
    uint64_t cubin_hash[RACE_SPECS];
    char message[256];
} race_result;

static const mlajit_kernel_spec *race_specs(void)
{
    static mlajit_kernel_spec s[RACE_SPECS];
    s[0] = spec_of(MLAJIT_MODEL_V32, 8, 64, 0);
    s[1] = spec_of(MLAJIT_MODEL_DSV4, 8, 64, 0);
    return s;
}

static void race_child(const char *dir, int go_fd, int out_fd)
{
    race_result res;
    memset(&res, 0, sizeof res);
    char c;
    if (read(go_fd, &c, 1) < 0) /* blocks until the parent lets every child go at once */
        _exit(1);
    mlajit_context_options o = {.struct_size = sizeof o,
                                .cache_dir = dir, .flags = MLAJIT_CONTEXT_NO_DEVICE, .packs = ""};
    mlajit_context *ctx = NULL;
    res.status = mlajit_context_create(&o, &ctx);
    for (int i = 0; i < RACE_SPECS && res.status == MLAJIT_OK; i++) {
        const mlajit_kernel *k;
        mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
        res.status = mlajit_kernel_acquire(ctx, &race_specs()[i], 0, &k, &r);
        if (res.status == MLAJIT_OK) {
            snprintf(res.keys[i], sizeof res.keys[i], "%s", r.key);
            res.cubin_hash[i] = mlajit_hash64(k->cubin, k->cubin_size);
            res.compiled += r.source == MLAJIT_SOURCE_COMPILED;
        }
    }
    if (res.status != MLAJIT_OK)
        snprintf(res.message, sizeof res.message, "%s", mlajit_last_error());
    mlajit_context_destroy(ctx);
    if (write(out_fd, &res, sizeof res) != (ssize_t)sizeof res)
        _exit(1);
    _exit(0);
}

static int verify_visit(const mlajit_cache_key *key, const void *value, size_t len, void *arg)
{
    (void)key;
    mlajit_cache_entry e;
    int *bad = arg;
    if (!value || mlajit_cache_entry_decode(value, len, &e) != MLAJIT_OK)
        (*bad)++;
    else
        mlajit_cache_entry_clear(&e);
    return 0;
}

Test(race, eight_processes_start_together_on_an_empty_cache, .timeout = 300)
{
    const char *dir = path_in_root("cache"); /* does not exist yet: they all create it */
    int go[2];
    cr_assert_eq(pipe(go), 0);
    int out[RACE_PROCESSES][2];
    pid_t pids[RACE_PROCESSES];
    for (int p = 0; p < RACE_PROCESSES; p++) {
        cr_assert_eq(pipe(out[p]), 0);
        pids[p] = fork();
        cr_assert_geq(pids[p], 0);
        if (pids[p] == 0) {
            close(go[1]);
            race_child(dir, go[0], out[p][1]);
        }
        close(out[p][1]);
    }
    close(go[0]);
    close(go[1]); /* every child's read returns now */
    race_result res[RACE_PROCESSES];
    int compiled = 0;
    for (int p = 0; p < RACE_PROCESSES; p++) {
        cr_assert_eq(read(out[p][0], &res[p], sizeof res[p]), (ssize_t)sizeof res[p], "child %d sent no result", p);
        int status;
        waitpid(pids[p], &status, 0);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d exited badly", p);
        cr_expect_eq(res[p].status, MLAJIT_OK, "child %d: %s", p, res[p].message);
        compiled += res[p].compiled;
        for (int i = 0; i < RACE_SPECS; i++) {
            cr_expect_str_eq(res[p].keys[i], res[0].keys[i], "same key in every process");
            cr_expect_eq(res[p].cubin_hash[i], res[0].cubin_hash[i], "same cubin in every process");
        }
    }
    cr_expect_eq(compiled, RACE_SPECS, "one compile per new kernel across the processes (the compile lock)");
    mlajit_store *st;
    cr_assert_eq(mlajit_store_open(dir, 1, &st), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_store_stats stats;
    cr_assert_eq(mlajit_store_stats_get(st, &stats), MLAJIT_OK);
    cr_expect_eq(stats.entries, RACE_SPECS, "one entry per kernel");
    int bad = 0;
    cr_assert_eq(mlajit_store_foreach(st, verify_visit, &bad), MLAJIT_OK);
    cr_expect_eq(bad, 0, "no entry is damaged");
    mlajit_store_counters c;
    mlajit_store_counters_get(st, &c);
    /* Each compile's put carried its process's counts; processes that only hit wrote nothing. */
    cr_expect_eq(c.compiles, (uint64_t)RACE_SPECS, "the compiles were recorded with the kernels they stored");
    cr_expect_geq(c.contexts, 1);
    cr_expect_leq(c.contexts, (uint64_t)RACE_SPECS);
    mlajit_store_close(st);
}

typedef struct thread_args {
    mlajit_context *ctx;
    const mlajit_kernel_spec *spec;
    const mlajit_kernel *kernel;
    int status;
    pthread_barrier_t *barrier;
} thread_args;

static void *thread_main(void *arg)
{
    thread_args *a = arg;
    pthread_barrier_wait(a->barrier);
    a->status = mlajit_kernel_acquire(a->ctx, a->spec, 0, &a->kernel, NULL);
    return NULL;
}

static void run_threads(mlajit_context *ctx, const mlajit_kernel_spec *specs, int nspecs, int nthreads,
                        thread_args *args)
{
    pthread_t t[16];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)nthreads);
    for (int i = 0; i < nthreads; i++) {
        args[i] = (thread_args){.ctx = ctx, .spec = &specs[i % nspecs], .barrier = &barrier};
        cr_assert_eq(pthread_create(&t[i], NULL, thread_main, &args[i]), 0);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&barrier);
}

Test(race, sixteen_threads_one_context_from_cache_and_pack)
{
    mlajit_context *k = keyer();
    const char *dir = path_in_root("cache");
    plant_in_cache(dir, k, &three_specs()[0], 1);
    write_fake_pack(path_in_root("a.pack"), k, three_specs() + 1, 2, NULL);
    mlajit_context *ctx = context_on(dir, path_in_root("a.pack"), MLAJIT_CONTEXT_NO_JIT);
    thread_args args[16];
    run_threads(ctx, three_specs(), 3, 16, args);
    for (int i = 0; i < 16; i++) {
        cr_expect_eq(args[i].status, MLAJIT_OK);
        cr_expect_eq(args[i].kernel, args[i % 3].kernel, "one kernel record per spec");
    }
    cr_expect_eq(ctx->map_count, 3u);
    mlajit_context_destroy(ctx);
    mlajit_context_destroy(k);
}

Test(race, four_threads_compile_the_same_new_kernel, .timeout = 300)
{
    const char *dir = path_in_root("cache");
    mlajit_context *ctx = context_on(dir, "", 0);
    mlajit_kernel_spec s = spec_of(MLAJIT_MODEL_V32, 4, 32, 0);
    thread_args args[4];
    run_threads(ctx, &s, 1, 4, args);
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(args[i].status, MLAJIT_OK, "thread %d", i);
        cr_expect_eq(args[i].kernel, args[0].kernel, "the map keeps one record");
    }
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_eq(info.compiles, 1, "the other threads waited on the compile lock and read the cache");
    cr_expect_eq(info.disk_hits, 3);
    cr_expect_eq(info.cache_entries, 1);
    mlajit_context_destroy(ctx);
}

/* ------------------------------------------------------------------------- */
/* A cache that cannot be written, or no HOME                                 */
/* ------------------------------------------------------------------------- */

TestSuite(unwritable, .init = make_root, .fini = remove_root);

/* Run fn in a child as a user without write access (nobody when we are root,
 * whom permission bits do not stop). The child's exit status is the result. */
static int run_unprivileged(int (*fn)(void))
{
    pid_t pid = fork();
    if (pid == 0) {
        if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
            _exit(90);
        _exit(fn());
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

static int unwritable_child(void)
{
    snprintf(capture_path, sizeof capture_path, "%s", path_in_root("scratch/stderr.txt"));
    /* an empty directory, and one holding a cache, neither writable */
    const char *dirs[2] = {path_in_root("empty-ro"), path_in_root("full-ro")};
    for (int d = 0; d < 2; d++) {
        capture_begin();
        mlajit_context *ctx;
        mlajit_context_options o = {.struct_size = sizeof o,
                                    .cache_dir = dirs[d], .flags = MLAJIT_CONTEXT_NO_DEVICE, .packs = ""};
        if (mlajit_context_create(&o, &ctx) != MLAJIT_OK)
            return 10 + d;
        mlajit_kernel_spec s = spec_of(MLAJIT_MODEL_V32, 2, 16, 0);
        mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
        int rc = d == 0 ? mlajit_kernel_prepare(ctx, &s, &r) : MLAJIT_OK; /* one real compile is enough */
        int rc2 = d == 0 ? mlajit_kernel_prepare(ctx, &s, &r) : MLAJIT_OK;
        mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
        mlajit_context_get_info(ctx, &info);
        mlajit_context_destroy(ctx);
        const char *err = capture_end();
        if (rc != MLAJIT_OK || rc2 != MLAJIT_OK)
            return 20 + d;
        if (info.cache_writable)
            return 30 + d;
        if (count_of(err, "warning:") != 1) {
            fprintf(stderr, "expected one warning, got:\n%s", err);
            return 40 + d;
        }
    }
    return 0;
}

Test(unwritable, cache_dir_that_cannot_be_written_is_one_warning_then_memory, .timeout = 120)
{
    cr_assert_eq(mkdir(path_in_root("empty-ro"), 0555), 0);
    cr_assert_eq(mkdir(path_in_root("scratch"), 0777), 0);
    chmod(path_in_root("scratch"), 0777);
    mlajit_context *k = keyer();
    fill_cache(path_in_root("full-ro"), k, 2);
    mlajit_context_destroy(k);
    chmod(path_in_root("full-ro"), 0555);
    chmod(path_in_root("full-ro/data.mdb"), 0444);
    chmod(path_in_root("full-ro/lock.mdb"), 0444);
    int rc = run_unprivileged(unwritable_child);
    cr_expect_eq(rc, 0, "child result %d (see unwritable_child)", rc);
}

/* A cache a fleet shares read-only: the kernels it holds are served as disk
 * hits by a user who cannot write it, with no lock file and nothing written. */
static int read_only_hit_child(void)
{
    snprintf(capture_path, sizeof capture_path, "%s", path_in_root("scratch/stderr-hit.txt"));
    capture_begin();
    mlajit_context *ctx;
    mlajit_context_options o = {.struct_size = sizeof o,
                                .cache_dir = path_in_root("shared-ro"), .flags = MLAJIT_CONTEXT_NO_DEVICE | MLAJIT_CONTEXT_NO_JIT,
                                .packs = ""};
    if (mlajit_context_create(&o, &ctx) != MLAJIT_OK)
        return 10;
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    int rc = mlajit_kernel_prepare(ctx, &three_specs()[0], &r);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    mlajit_context_destroy(ctx);
    const char *err = capture_end();
    if (rc != MLAJIT_OK)
        return 20;
    if (r.source != MLAJIT_SOURCE_DISK)
        return 30;
    if (info.cache_writable || info.cache_entries != 1)
        return 40;
    if (count_of(err, "warning:") != 1 || !strstr(err, "reading it"))
        return 50;
    return 0;
}

Test(unwritable, a_read_only_cache_serves_its_kernels_to_another_user)
{
    cr_assert_eq(mkdir(path_in_root("scratch"), 0777), 0);
    chmod(path_in_root("scratch"), 0777);
    mlajit_context *k = keyer();
    plant_in_cache(path_in_root("shared-ro"), k, &three_specs()[0], 3);
    mlajit_context_destroy(k);
    unlink(path_in_root("shared-ro/lock.mdb")); /* published as the data file alone */
    unlink(path_in_root("shared-ro/compile.lock"));
    chmod(path_in_root("shared-ro"), 0555);
    chmod(path_in_root("shared-ro/data.mdb"), 0444);
    uint8_t *before, *after;
    size_t before_len, after_len;
    read_file(path_in_root("shared-ro/data.mdb"), &before, &before_len);
    int rc = run_unprivileged(read_only_hit_child);
    if (rc == 90)
        cr_skip_test("cannot drop to the user nobody here, so an unwritable cache cannot be tried");
    cr_expect_eq(rc, 0, "child result %d (see read_only_hit_child)", rc);
    cr_expect(!path_exists(path_in_root("shared-ro/lock.mdb")), "no lock file was made");
    read_file(path_in_root("shared-ro/data.mdb"), &after, &after_len);
    cr_expect(before_len == after_len && memcmp(before, after, before_len) == 0, "nothing was written");
    free(before);
    free(after);
}

/* A pack list naming a FIFO (or a directory) must not hang a library's
 * start-up: refused at open, one warning each. */
Test(unwritable, a_fifo_or_directory_as_a_pack_is_refused_at_once)
{
    cr_assert_eq(mkfifo(path_in_root("fifo.pack"), 0644), 0);
    cr_assert_eq(mkdir(path_in_root("dir.pack"), 0755), 0);
    char packs[1200];
    snprintf(packs, sizeof packs, "%s:%s", path_in_root("fifo.pack"), path_in_root("dir.pack"));
    alarm(30); /* a blocking open would hang: the alarm fails the test instead */
    capture_begin();
    mlajit_context *ctx = context_on(NULL, packs, MLAJIT_CONTEXT_NO_JIT);
    const char *err = capture_end();
    alarm(0);
    cr_expect_eq(count_of(err, "warning:"), 2, "%s", err);
    cr_expect(strstr(err, "is a FIFO, not a regular file") && strstr(err, "is a directory, not a regular file"),
              "%s", err);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_eq(info.pack_count, 0);
    mlajit_context_destroy(ctx);
}

/* A cache directory too long to hold says why, not "not set". */
Test(unwritable, a_very_long_cache_dir_says_why)
{
    char longdir[1500];
    memset(longdir, 'x', sizeof longdir - 1);
    longdir[0] = '/';
    longdir[sizeof longdir - 1] = '\0';
    setenv("MLAJIT_CACHE_DIR", longdir, 1);
    capture_begin();
    mlajit_context_options o = {.struct_size = sizeof o,
                                .flags = MLAJIT_CONTEXT_NO_DEVICE | MLAJIT_CONTEXT_NO_JIT, .packs = ""};
    mlajit_context *ctx;
    int rc = mlajit_context_create(&o, &ctx);
    const char *err = capture_end();
    unsetenv("MLAJIT_CACHE_DIR");
    cr_assert_eq(rc, MLAJIT_OK);
    cr_expect_eq(count_of(err, "warning:"), 1, "%s", err);
    cr_expect(strstr(err, "MLAJIT_CACHE_DIR is 1499 characters") && strstr(err, "at most 1023"), "%s", err);
    mlajit_context_destroy(ctx);
    /* and through options.cache_dir */
    capture_begin();
    ctx = context_on(longdir, "", MLAJIT_CONTEXT_NO_JIT);
    err = capture_end();
    cr_expect(strstr(err, "1499 characters") && strstr(err, "at most 1023"), "%s", err);
    mlajit_context_destroy(ctx);
}

Test(unwritable, cache_dir_that_is_a_file_is_one_warning)
{
    write_whole_file(path_in_root("file"), (const uint8_t *)"x", 1);
    capture_begin();
    mlajit_context *ctx = context_on(path_in_root("file"), "", MLAJIT_CONTEXT_NO_JIT);
    const char *err = capture_end();
    cr_expect_eq(count_of(err, "warning:"), 1, "%s", err);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_str_eq(info.cache_dir, "");
    mlajit_context_destroy(ctx);
}

Test(unwritable, no_home_is_one_warning_then_packs)
{
    mlajit_context *k = keyer();
    write_fake_pack(path_in_root("a.pack"), k, three_specs(), 1, NULL);
    mlajit_context_destroy(k);
    unsetenv("HOME");
    unsetenv("MLAJIT_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    setenv("MLAJIT_PACKS", path_in_root("a.pack"), 1);
    capture_begin();
    mlajit_context_options o = {.struct_size = sizeof o, .flags = MLAJIT_CONTEXT_NO_DEVICE | MLAJIT_CONTEXT_NO_JIT};
    mlajit_context *ctx;
    int rc = mlajit_context_create(&o, &ctx);
    const char *err = capture_end();
    cr_assert_eq(rc, MLAJIT_OK);
    cr_expect_eq(count_of(err, "warning:"), 1, "%s", err);
    cr_expect(strstr(err, "HOME") != NULL, "%s", err);
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    cr_expect_eq(mlajit_kernel_prepare(ctx, &three_specs()[0], &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.source, MLAJIT_SOURCE_PACK);
    mlajit_context_destroy(ctx);
}

/* ------------------------------------------------------------------------- */
/* Warm-up and the log                                                        */
/* ------------------------------------------------------------------------- */

TestSuite(warmup, .init = make_root, .fini = remove_root);

Test(warmup, counts_what_each_layer_served_and_names_a_missing_kernel)
{
    mlajit_context *k = keyer();
    const char *dir = path_in_root("cache");
    /* grid: dots3_swa x heads 40, 48, 56, 64 x page 64 (past 32 heads: sm90-split,
     * no walk alternatives) */
    mlajit_kernel_spec h40 = spec_of(MLAJIT_MODEL_DOTS3_SWA, 40, 64, 0), h48 = spec_of(MLAJIT_MODEL_DOTS3_SWA, 48, 64, 0),
                       h56 = spec_of(MLAJIT_MODEL_DOTS3_SWA, 56, 64, 0), h64 = spec_of(MLAJIT_MODEL_DOTS3_SWA, 64, 64, 0);
    mlajit_kernel_spec in_pack[2] = {h40, h56};
    write_fake_pack(path_in_root("a.pack"), k, in_pack, 2, NULL);
    plant_in_cache(dir, k, &h48, 1);
    mlajit_context *ctx = context_on(dir, path_in_root("a.pack"), MLAJIT_CONTEXT_NO_JIT);
    mlajit_model models[] = {MLAJIT_MODEL_DOTS3_SWA};
    int heads[] = {40, 48, 56, 64}, pages[] = {64};
    mlajit_kernel_grid grid = {.struct_size = sizeof grid,
                               .models = models, .num_models = 1, .head_counts = heads, .num_head_counts = 4,
                               .page_sizes = pages, .num_page_sizes = 1};
    mlajit_warmup_report rep = MLAJIT_WARMUP_REPORT_INIT;
    cr_expect_eq(mlajit_warmup(ctx, &grid, 2, &rep), MLAJIT_ERR_NOT_FOUND, "h64 is nowhere and JIT is off");
    cr_expect(strstr(mlajit_last_error(), "dots3_swa.h64.p64") != NULL, "%s", mlajit_last_error());
    cr_expect_eq(rep.kernels, 4);
    cr_expect_eq(rep.from_packs, 2);
    cr_expect_eq(rep.from_disk, 1);
    cr_expect_eq(rep.compiled, 0);
    plant_in_cache(dir, k, &h64, 3);
    cr_expect_eq(mlajit_warmup(ctx, &grid, 0, &rep), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(rep.from_memory, 3);
    cr_expect_eq(rep.from_disk, 1);
    cr_expect_eq(rep.loaded, 0, "no device here");
    cr_expect_gt(rep.wall_ms, 0.0);

    int bad_heads[] = {12, 129};
    grid.head_counts = bad_heads;
    cr_expect_eq(mlajit_warmup(ctx, &grid, 0, &rep), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(mlajit_last_error(), "h_q = 129") != NULL, "%s", mlajit_last_error());
    cr_expect_eq(rep.kernels, 0, "nothing is done when the grid is invalid");
    grid.head_counts = NULL;
    cr_expect_eq(mlajit_warmup(ctx, &grid, 0, &rep), MLAJIT_ERR_INVALID_ARGUMENT);
    mlajit_context_destroy(ctx);
    mlajit_context_destroy(k);
}

/* A grid brings along the kernels auto's plans switch to (auto's own at 32 heads
 * and fewer being sm90-narrow): the long-walk kernel (sm90-narrow-long) where its
 * third producer group fits (V3.2 and GLM_NSA at 8 and 16 heads), the head-split
 * kernel (sm90-narrow with its head group halved) at 9-32 heads; above 32 heads
 * with power-of-two scales the head-split and head-groups kernels
 * (sm90-narrow in groups of 16 and 32) and the short-walk kernel (sm90-staged), with
 * arbitrary scales the short-walk kernel alone; so a pack covers every plan. */
Test(warmup, grid_brings_every_walk_alternative_along)
{
    mlajit_model models[] = {MLAJIT_MODEL_V32, MLAJIT_MODEL_DSV4, MLAJIT_MODEL_GLM_NSA};
    int heads[] = {8, 16, 32, 64, 128}, pages[] = {64};
    mlajit_kernel_grid grid = {.struct_size = sizeof grid,
                               .models = models, .num_models = 3, .head_counts = heads, .num_head_counts = 5,
                               .page_sizes = pages, .num_page_sizes = 1};
    mlajit_kernel_spec *specs = NULL;
    int n = 0;
    cr_assert_eq(mlajit_grid_expand(&grid, "sm_90a", &specs, &n), MLAJIT_OK, "%s", mlajit_last_error());
    const char *expected[] = {
        "v32.h8.p64.t64.hc8.sm90-narrow.sm_90a", "v32.h8.p64.t64.hc8.sm90-narrow-scores.sm_90a",
        "v32.h8.p64.t64.hc8.sm90-narrow-long.sm_90a",
        "v32.h16.p64.t64.hc16.sm90-narrow.sm_90a", "v32.h16.p64.t64.hc16.sm90-narrow-long.sm_90a",
        "v32.h16.p64.t64.hc8.sm90-narrow.sm_90a",
        "v32.h32.p64.t64.hc32.sm90-narrow.sm_90a", "v32.h32.p64.t64.hc16.sm90-narrow.sm_90a",
        "v32.h64.p64.t64.hc64.sm90.sm_90a", "v32.h64.p64.t64.hc16.sm90-narrow.sm_90a",
        "v32.h64.p64.t64.hc32.sm90-narrow.sm_90a", "v32.h64.p64.t64.hc64.sm90-staged.sm_90a",
        "v32.h128.p64.t64.hc64.sm90.sm_90a", "v32.h128.p64.t64.hc16.sm90-narrow.sm_90a",
        "v32.h128.p64.t64.hc32.sm90-narrow.sm_90a", "v32.h128.p64.t64.hc64.sm90-staged.sm_90a",
        "dsv4.h8.p64.t64.hc8.sm90-narrow.sm_90a", "dsv4.h16.p64.t64.hc16.sm90-narrow.sm_90a",
        "dsv4.h16.p64.t64.hc8.sm90-narrow.sm_90a",
        "dsv4.h32.p64.t64.hc32.sm90-narrow.sm_90a", "dsv4.h32.p64.t64.hc16.sm90-narrow.sm_90a",
        "dsv4.h64.p64.t64.hc64.sm90.sm_90a", "dsv4.h64.p64.t64.hc16.sm90-narrow.sm_90a",
        "dsv4.h64.p64.t64.hc32.sm90-narrow.sm_90a", "dsv4.h64.p64.t64.hc64.sm90-staged.sm_90a",
        "dsv4.h128.p64.t64.hc64.sm90.sm_90a", "dsv4.h128.p64.t64.hc16.sm90-narrow.sm_90a",
        "dsv4.h128.p64.t64.hc32.sm90-narrow.sm_90a", "dsv4.h128.p64.t64.hc64.sm90-staged.sm_90a",
        "glm_nsa.h8.p64.t64.hc8.sm90-narrow.sm_90a", "glm_nsa.h8.p64.t64.hc8.sm90-narrow-long.sm_90a",
        "glm_nsa.h16.p64.t64.hc16.sm90-narrow.sm_90a", "glm_nsa.h16.p64.t64.hc16.sm90-narrow-long.sm_90a",
        "glm_nsa.h16.p64.t64.hc8.sm90-narrow.sm_90a",
        "glm_nsa.h32.p64.t64.hc32.sm90-narrow.sm_90a", "glm_nsa.h32.p64.t64.hc16.sm90-narrow.sm_90a",
        "glm_nsa.h64.p64.t64.hc64.sm90.sm_90a", "glm_nsa.h64.p64.t64.hc64.sm90-staged.sm_90a",
        "glm_nsa.h128.p64.t64.hc64.sm90.sm_90a", "glm_nsa.h128.p64.t64.hc64.sm90-staged.sm_90a",
    };
    cr_assert_eq(n, (int)(sizeof expected / sizeof expected[0]));
    for (int i = 0; i < n; i++) {
        char name[128];
        cr_assert_eq(mlajit_spec_string(&specs[i], name, sizeof name), MLAJIT_OK, "%s", mlajit_last_error());
        cr_expect_str_eq(name, expected[i], "grid kernel %d", i);
    }
    free(specs);
}

Test(warmup, compiles_in_parallel_and_logs_one_line_per_compile_and_pack, .timeout = 300)
{
    mlajit_context *k = keyer();
    write_fake_pack(path_in_root("a.pack"), k, three_specs(), 1, NULL);
    mlajit_context_destroy(k);
    setenv("MLAJIT_LOG", "info", 1);
    capture_begin();
    mlajit_context *ctx = context_on(path_in_root("cache"), path_in_root("a.pack"), 0);
    mlajit_model models[] = {MLAJIT_MODEL_V32};
    int heads[] = {8, 3, 12}, pages[] = {64};
    mlajit_kernel_grid grid = {.struct_size = sizeof grid,
                               .models = models, .num_models = 1, .head_counts = heads, .num_head_counts = 3,
                               .page_sizes = pages, .num_page_sizes = 1};
    mlajit_warmup_report rep = MLAJIT_WARMUP_REPORT_INIT;
    int rc = mlajit_warmup(ctx, &grid, 2, &rep);
    const char *err = capture_end();
    cr_assert_eq(rc, MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(rep.from_packs, 1);
    cr_expect_eq(rep.compiled, 8, "h3 and h12, the long-walk kernels of h3, h8 and h12, the scores kernels of h3 "
                                  "and h8, and h12's head split (not in the pack)");
    cr_expect_gt(rep.compile_ms, 0.0);
    cr_expect_eq(count_of(err, "mlajit: pack "), 1, "%s", err);
    cr_expect_eq(count_of(err, "mlajit: compiled v32.h3.p64.t64.hc8.sm90-narrow.sm_90a"), 1, "%s", err);
    cr_expect_eq(count_of(err, "mlajit: compiled v32.h3.p64.t64.hc8.sm90-narrow-long.sm_90a"), 1, "%s", err);
    cr_expect_eq(count_of(err, "mlajit: compiled v32.h8.p64.t64.hc8.sm90-narrow-long.sm_90a"), 1, "%s", err);
    cr_expect_eq(count_of(err, "mlajit: compiled v32.h8.p64.t64.hc8.sm90-narrow-scores.sm_90a"), 1, "%s", err);
    cr_expect_eq(count_of(err, "mlajit: compiled v32.h3.p64.t64.hc8.sm90-narrow-scores.sm_90a"), 1, "%s", err);
    cr_expect_eq(count_of(err, "mlajit: compiled v32.h12.p64.t64.hc16.sm90-narrow.sm_90a"), 1, "%s", err);
    cr_expect_eq(count_of(err, "mlajit: compiled v32.h12.p64.t64.hc16.sm90-narrow-long.sm_90a"), 1, "%s", err);
    cr_expect_eq(count_of(err, "mlajit: compiled v32.h12.p64.t64.hc8.sm90-narrow.sm_90a"), 1, "%s", err);
    cr_expect_eq(count_of(err, "mlajit: compiled "), 8, "%s", err);
    cr_expect(strstr(err, "for sm_90a in ") != NULL && strstr(err, " ms") != NULL, "%s", err);
    mlajit_context_destroy(ctx);
}

/* ------------------------------------------------------------------------- */
/* The CLI, end to end                                                        */
/* ------------------------------------------------------------------------- */

TestSuite(cli, .init = make_root, .fini = remove_root);

Test(cli, pack_build_ls_verify_merge_bench_and_jit_disabled, .timeout = 300)
{
    const char *cli = cli_path();
    setenv("MLAJIT_LOG", "quiet", 1);
    cr_assert_eq(sh("MLAJIT_CACHE_DIR=cache %s pack build --models v32,dsv4 --heads 16 --pages 64 --archs sm_90a "
                    "--out prod.pack",
                    cli),
                 0, "%s", out_text());
    cr_expect(strstr(out_text(), "5 kernels") != NULL, "%s", out_text());
    cr_expect(strstr(out_text(), "sm90-staged") == NULL, "no short-walk kernel at 16 heads: %s", out_text());
    cr_assert_eq(sh("%s pack ls prod.pack", cli), 0, "%s", out_text());
    cr_expect(strstr(out_text(), "v32.h16.p64.t64.hc16.sm90-narrow.") && strstr(out_text(), "dsv4.h16.p64") &&
                  strstr(out_text(), "v32.h16.p64.t64.hc16.sm90-narrow-long.") &&
                  strstr(out_text(), "v32.h16.p64.t64.hc8.sm90-narrow.") &&
                  strstr(out_text(), "dsv4.h16.p64.t64.hc8.sm90-narrow."),
              "the grid's kernels, V3.2's long-walk one and both head splits: %s", out_text());
    cr_expect(strstr(out_text(), "nvrtc") != NULL, "%s", out_text());
    cr_assert_eq(sh("%s pack verify prod.pack", cli), 0, "%s", out_text());
    cr_expect(strstr(out_text(), "usable here") != NULL, "%s", out_text());

    /* a spec list file; the kernel comes from the cache the first build filled */
    write_whole_file(path_in_root("specs.txt"), (const uint8_t *)"# one kernel\nv32.h16.p64.t64.hc16.sm90-narrow.sm_90a\n\n",
               strlen("# one kernel\nv32.h16.p64.t64.hc16.sm90-narrow.sm_90a\n\n"));
    cr_assert_eq(sh("MLAJIT_CACHE_DIR=cache %s pack build --specs specs.txt --out one.pack", cli), 0, "%s",
                 out_text());
    cr_expect(strstr(out_text(), "1 kernels") && strstr(out_text(), "0 compiled") &&
                  strstr(out_text(), "1 from the cache"),
              "%s", out_text());

    /* JIT disabled: with the pack it serves, without it names the build line */
    cr_expect_eq(sh("MLAJIT_DISABLE_JIT=1 MLAJIT_CACHE_DIR=empty MLAJIT_PACKS=prod.pack %s compile --model dsv4 "
                    "--heads 16 --page 64",
                    cli),
                 0, "%s", out_text());
    cr_expect_eq(sh("MLAJIT_DISABLE_JIT=1 MLAJIT_CACHE_DIR=empty %s compile --model dsv4 --heads 16 --page 64", cli),
                 1, "%s", out_text());
    cr_expect(strstr(out_text(), "build a pack that holds it with `mlajit pack build --models dsv4 --heads 16 "
                                 "--pages 64 --archs sm_90a --out FILE` and add FILE to MLAJIT_PACKS") != NULL,
              "%s", out_text());
    /* the grid form names the features; a spec off the generator's choices needs --spec; a walk's kernel comes
     * with its auto spec's grid (the short-walk kernel, sm90-staged) */
    cr_expect_eq(sh("MLAJIT_DISABLE_JIT=1 MLAJIT_CACHE_DIR=empty %s compile --model v32 --heads 24 --page 64 "
                    "--features sink,topk-length",
                    cli),
                 1, "%s", out_text());
    cr_expect(strstr(out_text(), "mlajit pack build --models v32 --heads 24 --pages 64 --features sink+topk-length "
                                 "--archs sm_90a --out FILE") != NULL,
              "%s", out_text());
    cr_expect_eq(sh("MLAJIT_DISABLE_JIT=1 MLAJIT_CACHE_DIR=empty %s compile --model v32 --heads 24 --page 64 --tile 32",
                    cli),
                 1, "%s", out_text());
    cr_expect(strstr(out_text(), "mlajit pack build --spec v32.h24.p64.t32.") != NULL, "%s", out_text());
    cr_expect_eq(sh("MLAJIT_DISABLE_JIT=1 MLAJIT_CACHE_DIR=empty %s compile --model v32 --heads 128 --page 64 "
                    "--variant sm90-staged",
                    cli),
                 1, "%s", out_text());
    cr_expect(strstr(out_text(), "no kernel for v32.h128.p64.t64.hc64.sm90-staged.sm_90a") &&
                  strstr(out_text(), "mlajit pack build --models v32 --heads 128 --pages 64 --archs sm_90a"),
              "%s", out_text());
    cr_expect_eq(sh("MLAJIT_DISABLE_JIT=1 MLAJIT_CACHE_DIR=empty %s compile --model v32 --heads 8 --page 64 "
                    "--arch sm_90",
                    cli),
                 1, "%s", out_text());
    cr_expect(strstr(out_text(), "mlajit pack build --models v32 --heads 8 --pages 64 --archs sm_90 --out FILE"),
              "the arch asked for: %s", out_text());

    /* merge with a pack of made-up kernels (same recipe) */
    mlajit_context *k = keyer();
    write_fake_pack(path_in_root("extra.pack"), k, three_specs() + 2, 1, NULL);
    mlajit_context_destroy(k);
    cr_assert_eq(sh("%s pack merge all.pack prod.pack extra.pack", cli), 0, "%s", out_text());
    cr_expect(strstr(out_text(), "6 kernels and 0 tactic records from 2 packs") != NULL, "%s", out_text());
    cr_expect_eq(sh("%s pack bench prod.pack --repeat 1000", cli), 0, "%s", out_text()); /* real kernels: a GPU loads them */
    cr_expect(strstr(out_text(), "pack open") && strstr(out_text(), "repeat lookup"), "%s", out_text());

    /* a damaged copy fails verify and is skipped at run time */
    uint8_t *bytes;
    size_t len;
    read_file(path_in_root("prod.pack"), &bytes, &len);
    bytes[len / 3] ^= 1;
    write_whole_file(path_in_root("bad.pack"), bytes, len);
    free(bytes);
    cr_expect_eq(sh("%s pack verify bad.pack", cli), 1, "%s", out_text());
    cr_expect(strstr(out_text(), "checksum mismatch") != NULL, "%s", out_text());
    cr_expect_eq(sh("MLAJIT_LOG=warn MLAJIT_DISABLE_JIT=1 MLAJIT_CACHE_DIR=empty MLAJIT_PACKS=bad.pack:prod.pack "
                    "%s compile --model v32 --heads 16 --page 64",
                    cli),
                 0, "%s", out_text());
    cr_expect(strstr(out_text(), "warning: pack skipped") != NULL, "%s", out_text());
    cr_expect_eq(sh("%s pack build --models v32 --heads 16", cli), 2, "a grid needs pages: %s", out_text());
}

/* A pack made before sliced and sm90-unpaired were retired may hold their kernels:
 * no plan asks for them, the pack's other kernels serve as before (their keys did
 * not change), and verify says why such an entry does not key. */
Test(cli, pack_with_a_retired_kernel_serves_the_rest)
{
    const char *cli = cli_path();
    mlajit_context *k = keyer();
    const mlajit_kernel_spec *s = three_specs();
    mlajit_pack_item items[2];
    mlajit_cache_entry entries[2];
    char spec_string[128];
    items[0].key = key_for(k, &s[0], spec_string);
    entries[0] = fake_entry(spec_string, 40, 5000);
    items[1].key = key_for(k, &s[2], spec_string); /* sm90's at 128 heads, renamed as the unpaired kernel was */
    items[1].key.lo ^= 1;
    entries[1] = fake_entry(spec_string, 41, 6000);
    snprintf(entries[1].spec_string, sizeof entries[1].spec_string, "v32.h128.p64.t64.hc64.sm90-unpaired.sm_90a");
    for (int i = 0; i < 2; i++)
        items[i].entry = &entries[i];
    mlajit_pack_manifest mine = this_recipe(k);
    cr_assert_eq(mlajit_pack_write(path_in_root("old.pack"), &mine, items, 2, NULL, 0), MLAJIT_OK, "%s",
                 mlajit_last_error());
    for (int i = 0; i < 2; i++)
        mlajit_cache_entry_clear(&entries[i]);
    mlajit_context_destroy(k);

    cr_expect_eq(sh("%s pack verify old.pack", cli), 1, "%s", out_text());
    cr_expect(strstr(out_text(), "spec string 'v32.h128.p64.t64.hc64.sm90-unpaired.sm_90a': variant sm90-unpaired "
                                 "was retired"),
              "%s", out_text());
    mlajit_context *ctx = context_on(NULL, path_in_root("old.pack"), MLAJIT_CONTEXT_NO_JIT);
    mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
    cr_assert_eq(mlajit_kernel_prepare(ctx, &s[0], &r), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(r.source, MLAJIT_SOURCE_PACK);
    cr_expect_eq(r.cubin_bytes, 5000u);
    mlajit_context_destroy(ctx);
}

Test(cli, cache_ls_stats_gc_verify)
{
    const char *cli = cli_path();
    mlajit_context *k = keyer();
    const char *dir = path_in_root("cache");
    fill_cache(dir, k, 5);
    /* one entry with a bad cubin checksum */
    mlajit_store *st;
    cr_assert_eq(mlajit_store_open(dir, 0, &st), MLAJIT_OK);
    mlajit_kernel_spec s = spec_of(MLAJIT_MODEL_V32, 100, 64, 0);
    char spec_string[128];
    mlajit_cache_key key = key_for(k, &s, spec_string);
    mlajit_cache_entry e = fake_entry(spec_string, 1, 1000);
    void *value;
    size_t len;
    cr_assert_eq(mlajit_cache_entry_encode(&e, &value, &len), MLAJIT_OK);
    ((uint8_t *)value)[len - 1] ^= 1;
    cr_assert_eq(mlajit_store_put_raw(st, &key, value, len), MLAJIT_OK);
    free(value);
    mlajit_cache_entry_clear(&e);
    mlajit_store_close(st);
    mlajit_context_destroy(k);

    cr_assert_eq(sh("%s cache ls --dir cache", cli), 0, "%s", out_text());
    cr_expect(strstr(out_text(), "6 entries") && strstr(out_text(), "DAMAGED"), "%s", out_text());
    cr_assert_eq(sh("%s cache stats --dir cache", cli), 0, "%s", out_text());
    cr_expect(strstr(out_text(), "(1 damaged)") && strstr(out_text(), "compile time"), "%s", out_text());
    cr_expect(strstr(out_text(), "disk hits"), "%s", out_text());
    cr_expect_eq(sh("%s cache verify --dir cache", cli), 1, "%s", out_text());
    cr_expect_eq(sh("%s cache verify --dir cache --repair", cli), 0, "%s", out_text());
    cr_expect_eq(sh("%s cache verify --dir cache", cli), 0, "%s", out_text());
    cr_expect_eq(sh("%s cache gc --dir cache --older-than 0 --dry-run", cli), 0, "%s", out_text());
    cr_expect(strstr(out_text(), "would remove 5 of 5"), "%s", out_text());
    cr_expect_eq(sh("%s cache gc --dir cache --max-bytes 50K", cli), 0, "%s", out_text());
    cr_expect(strstr(out_text(), "removed 3 of 5"), "oldest first down to 50 KiB: %s", out_text());
    cr_expect_eq(sh("%s cache gc --dir cache --all", cli), 0, "%s", out_text());
    cr_expect(strstr(out_text(), "2 remain") == NULL && strstr(out_text(), "0 remain"), "%s", out_text());
    cr_expect_eq(sh("%s cache gc --dir cache", cli), 2, "gc needs a rule: %s", out_text());
}
