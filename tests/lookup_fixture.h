/* The fixture of the suites that look kernels and tactics up through the layers
 * (test_pack.c, test_keys.c, test_tactics.c): a scratch directory per test,
 * stderr captured to read the warnings a call gives, contexts without a device,
 * and the CLI run in the directory. Include once per suite, after defining
 * LOOKUP_FIXTURE_ROOT, the mkdtemp template of the directory. */
#ifndef MLAJIT_TESTS_LOOKUP_FIXTURE_H
#define MLAJIT_TESTS_LOOKUP_FIXTURE_H
#include <criterion/criterion.h>

#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/pack.h"
#include "mlajit.h"
#include "temp_tree.h"

static char root[64];

static void make_root(void)
{
    strcpy(root, LOOKUP_FIXTURE_ROOT);
    cr_assert_not_null(mkdtemp(root));
    chmod(root, 0755); /* tests that drop to another user must reach inside */
    /* Warnings are what several tests check; the suite's environment silences them. */
    setenv("MLAJIT_LOG", "warn", 1);
    unsetenv("MLAJIT_PACKS");
    unsetenv("MLAJIT_DISABLE_JIT");
}

static void remove_root(void)
{
    if (root[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "chmod -R u+w '%s' 2>/dev/null", root);
        if (system(cmd) != 0) { /* best effort */
        }
    }
    temp_tree_remove(root);
}

/* A path under the test's root, in one of 16 rotating buffers (copy it to keep it longer). */
static const char *path_in_root(const char *name)
{
    static _Thread_local char bufs[16][512];
    static _Thread_local int next;
    char *b = bufs[next++ & 15];
    snprintf(b, sizeof bufs[0], "%s/%s", root, name);
    return b;
}

/* stderr into a file for the length of a block, to count warnings. */
static int saved_stderr = -1;
static char capture_path[600]; /* "" = root/stderr.txt */

static void capture_begin(void)
{
    fflush(stderr);
    if (!capture_path[0])
        snprintf(capture_path, sizeof capture_path, "%s", path_in_root("stderr.txt"));
    int fd = open(capture_path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    saved_stderr = dup(2);
    if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
    }
}

/* The captured text (static buffer). */
static const char *capture_end(void)
{
    static char text[16384];
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    FILE *f = fopen(capture_path, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    return text;
}

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* A context without a device: it compiles and caches, never loads. */
static mlajit_context *context_on(const char *cache_dir, const char *packs, unsigned flags)
{
    mlajit_context_options o = {
        .struct_size = sizeof o,
        .cache_dir = cache_dir,
        .flags = MLAJIT_CONTEXT_NO_DEVICE | flags | (cache_dir ? 0u : MLAJIT_CONTEXT_NO_DISK_CACHE),
        .packs = packs ? packs : "",
    };
    mlajit_context *ctx = NULL;
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
    return ctx;
}

/* Seal a pack's bytes (len of them) again after an edit, as a faulty writer
 * that checksums what it wrote would: the LMDB part's XXH3-64 and the
 * trailer's own, so only the checks inside the pack can catch the edit. */
static inline void pack_reseal(uint8_t *bytes, size_t len)
{
    size_t lmdb_len = len - MLAJIT_PACK_TRAILER_BYTES;
    uint8_t *t = bytes + lmdb_len;
    uint64_t h = mlajit_hash64(bytes, lmdb_len);
    for (int i = 0; i < 8; i++)
        t[24 + i] = (uint8_t)(h >> (8 * i));
    uint64_t th = mlajit_hash64(t, 56);
    for (int i = 0; i < 8; i++)
        t[56 + i] = (uint8_t)(th >> (8 * i));
}

/* The built CLI (tests/meson.build sets MLAJIT_CLI), or the test is skipped
 * (after removing its directory: a skipped test's fini does not run). */
static inline const char *cli_path(void)
{
    const char *cli = getenv("MLAJIT_CLI");
    if (!cli || !path_exists(cli)) {
        remove_root();
        cr_skip_test("MLAJIT_CLI is not set to the built mlajit (tests/meson.build sets it)");
    }
    return cli;
}

/* Run a shell command in the test's directory; its exit status. Output goes to
 * root/out.txt (out_text). */
static inline int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[4400];
    snprintf(full, sizeof full, "cd '%s' && (%s) >out.txt 2>&1", root, cmd);
    int status = system(full);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* What the last sh() printed (static buffer). */
static inline const char *out_text(void)
{
    static char text[65536];
    FILE *f = fopen(path_in_root("out.txt"), "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = '\0';
    return text;
}

#endif
