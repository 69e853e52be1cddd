/* tests/test_cache_damage.c - damaged cache files, met as a library user meets
 * them: `mlajit compile` and `mlajit cache verify` run as child processes on
 * copies of a cache filled once with kernels NVRTC really compiled, each copy
 * damaged. Issue 50's three byte flips (94221, bit 7 of 98317, 94222: fields of
 * the main and free databases' root leaves in a cache holding one
 * v32.h16.p64 kernel, which crashed every command) and 200 random page-damage
 * seeds. Every run must end without a signal, with a warning where damage was
 * met, with an intact or set-aside cache, and with the right kernel (the same
 * key, cubin size and registers as the undamaged cache gives) or, with JIT off,
 * a refusal that says so. The seeds run mostly with MLAJIT_DISABLE_JIT=1, so
 * they cost no compile; every tenth compiles. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/lmdb_check.h"
#include "mlajit.h"
#include "temp_tree.h"

#define PAGE 4096
/* 200 seeds; the sanitizer build runs fewer (tests/meson.build sets
 * MLAJIT_DAMAGE_SEEDS): its every child process starts slowly. */
static int seeds(void)
{
    const char *v = getenv("MLAJIT_DAMAGE_SEEDS");
    int n = v ? atoi(v) : 0;
    return n > 0 ? n : 200;
}

static char root[64];

static void make_root(void)
{
    temp_tree_make(root, sizeof root, "mlajit-test-damage");
    unsetenv("MLAJIT_PACKS");
    unsetenv("MLAJIT_DISABLE_JIT");
}

static void remove_root(void) { temp_tree_remove(root); }

TestSuite(damage_cli, .init = make_root, .fini = remove_root, .timeout = 900);

static const char *in_root(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static const char *in_root(const char *fmt, ...)
{
    static char bufs[8][512];
    static int next;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    char *b = bufs[next++ & 7];
    snprintf(b, sizeof bufs[0], "%s/%s", root, name);
    return b;
}

static uint8_t *read_all(const char *path, size_t *len) { return read_whole_file(path, len); }

static int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* ---- the CLI as a child process ------------------------------------------------ */

typedef struct run {
    int signaled, code;
    char out[8192], err[8192];
} run;

/* mlajit ARGS... with MLAJIT_CACHE_DIR=dir (and MLAJIT_DISABLE_JIT=1 when
 * no_jit); a watchdog turns a hang into a signal. */
static run cli(const char *dir, int no_jit, const char *const *args)
{
    const char *exe = getenv("MLAJIT_CLI");
    cr_assert_not_null(exe, "MLAJIT_CLI is not set (tests/meson.build sets it)");
    char out_path[600], err_path[600];
    snprintf(out_path, sizeof out_path, "%s/out.txt", root);
    snprintf(err_path, sizeof err_path, "%s/err.txt", root);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0)
            _exit(120);
        dup2(o, 1);
        dup2(e, 2);
        setenv("MLAJIT_CACHE_DIR", dir, 1);
        setenv("MLAJIT_LOG", "warn", 1);
        if (no_jit)
            setenv("MLAJIT_DISABLE_JIT", "1", 1);
        alarm(120);
        const char *argv[16] = {exe};
        int n = 1;
        for (; args[n - 1] && n < 15; n++)
            argv[n] = args[n - 1];
        argv[n] = NULL;
        execv(exe, (char *const *)argv);
        _exit(121);
    }
    int status;
    waitpid(pid, &status, 0);
    run r;
    memset(&r, 0, sizeof r);
    r.signaled = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    size_t n;
    uint8_t *b = read_all(out_path, &n);
    snprintf(r.out, sizeof r.out, "%s", (char *)b);
    free(b);
    b = read_all(err_path, &n);
    snprintf(r.err, sizeof r.err, "%s", (char *)b);
    free(b);
    return r;
}

static const char *const COMPILE[] = {"compile", "--model", "v32", "--heads", "16", "--page", "64", NULL};
static const char *const VERIFY[] = {"cache", "verify", NULL};
static const char *const REPAIR[] = {"cache", "verify", "--repair", NULL};

/* The lines of `mlajit compile` that name the kernel: key, registers, cubin
 * size (the "cache" line says where it came from, which damage may change). */
static void kernel_lines(const char *out, char *buf, size_t len)
{
    buf[0] = '\0';
    const char *keep[] = {"spec ", "key ", "registers ", "cubin "};
    for (const char *line = out; *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++)
            if (strncmp(line, keep[k], strlen(keep[k])) == 0)
                snprintf(buf + strlen(buf), len - strlen(buf), "%.*s\n", (int)n, line);
        line += n + (end != NULL);
    }
}

/* ---- the fixtures -------------------------------------------------------------- */

/* A cache holding the kernels of `mlajit compile` for specs, compiled by NVRTC
 * in this process, then one more transaction (the counters), as the issue's
 * cache was: a compile, then a process's exit-time counters commit. */
static void fill(const char *dir, const mlajit_kernel_spec *specs, int n)
{
    mlajit_context_options o = {.struct_size = sizeof o,
                                .cache_dir = dir, .flags = MLAJIT_CONTEXT_NO_DEVICE, .packs = ""};
    mlajit_context *ctx;
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
    for (int i = 0; i < n; i++) {
        mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
        cr_assert_eq(mlajit_kernel_prepare(ctx, &specs[i], &r), MLAJIT_OK, "%s", mlajit_last_error());
        cr_assert_eq(mlajit_kernel_prepare(ctx, &specs[i], &r), MLAJIT_OK); /* a memory hit: a count to flush */
    }
    cr_assert_eq(mlajit_context_flush_counters(ctx), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_context_destroy(ctx);
}

static mlajit_kernel_spec spec_of(mlajit_model model, int h_q)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, model, h_q, 64), MLAJIT_OK);
    strcpy(s.arch, "sm_90a");
    return s;
}

/* The newest meta of a data file, read with mlajit's reader. */
static mlajit_lmdb_meta meta_of(const char *path)
{
    int fd = open(path, O_RDONLY);
    cr_assert_geq(fd, 0);
    struct stat st;
    fstat(fd, &st);
    mlajit_lmdb_meta m;
    cr_assert_eq(mlajit_lmdb_read_meta(fd, (int64_t)st.st_size, &m), MLAJIT_OK, "%s", mlajit_last_error());
    close(fd);
    return m;
}

/* A fresh directory holding a copy of the pristine file. */
static const char *copy_of(const char *pristine, const char *name)
{
    const char *dir = in_root("%s", name);
    cr_assert_eq(mkdir(dir, 0755), 0, "%s: %s", dir, strerror(errno));
    size_t n;
    uint8_t *b = read_all(pristine, &n);
    char path[600];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    write_whole_file(path, b, n);
    free(b);
    return dir;
}

static void flip(const char *dir, size_t offset, uint8_t mask)
{
    char path[600];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    size_t n;
    uint8_t *b = read_all(path, &n);
    cr_assert_lt(offset, n);
    b[offset] ^= mask;
    write_whole_file(path, b, n);
    free(b);
}

/* The issue's cache: one v32.h16.p64 kernel, then a second transaction. Its
 * directory; data (600 bytes) receives its data file's path. */
static const char *one_kernel_fixture(char *data)
{
    const char *fixture = in_root("fixture");
    mlajit_kernel_spec s = spec_of(MLAJIT_MODEL_V32, 16);
    fill(fixture, &s, 1);
    snprintf(data, 600, "%s/data.mdb", fixture);
    return fixture;
}

/* ---- issue 50's three byte flips ------------------------------------------------ */

Test(damage_cli, the_issues_three_byte_flips_are_set_aside_and_recompiled)
{
    char pristine[600];
    one_kernel_fixture(pristine);
    /* The issue's offsets are bytes 13 and 14 (mp_lower's high byte and mp_upper's low
     * byte) of page 23, the main database's root leaf, and byte 13 of page 24, the
     * freelist's: wherever this NVRTC's cubin puts those pages, the same fields. */
    mlajit_lmdb_meta m = meta_of(pristine);
    size_t main_leaf = (size_t)m.main_db.root * PAGE, free_leaf = (size_t)m.free_db.root * PAGE;
    fprintf(stderr, "main root leaf at page %zu, freelist root leaf at page %zu (the issue's cache: 23 and 24)\n",
                main_leaf / PAGE, free_leaf / PAGE);
    if (main_leaf / PAGE == 23 && free_leaf / PAGE == 24)
        cr_expect(main_leaf + 13 == 94221 && free_leaf + 13 == 98317 && main_leaf + 14 == 94222);
    struct { size_t offset; uint8_t mask; const char *what; } flips[] = {
        {main_leaf + 13, 0xff, "94221: the main leaf's lower bound"},
        {free_leaf + 13, 0x80, "98317 bit 7: the freelist leaf's lower bound"},
        {main_leaf + 14, 0xff, "94222: the main leaf's upper bound"},
    };

    run good = cli(copy_of(pristine, "good"), 0, COMPILE);
    cr_assert_eq(good.code, 0, "%s", good.err);
    cr_assert(strstr(good.out, "cache         hit"), "the fixture serves the kernel: %s", good.out);
    char want[1024], got[1024];
    kernel_lines(good.out, want, sizeof want);

    for (size_t f = 0; f < sizeof flips / sizeof flips[0]; f++) {
        char name[32];
        snprintf(name, sizeof name, "flip%zu", f);
        const char *dir = copy_of(pristine, name);
        flip(dir, flips[f].offset, flips[f].mask);
        size_t damaged_len;
        char data[600], aside[600];
        snprintf(data, sizeof data, "%s/data.mdb", dir);
        snprintf(aside, sizeof aside, "%s/data.mdb.damaged.1", dir);
        uint8_t *damaged = read_all(data, &damaged_len);

        run v = cli(dir, 0, VERIFY);
        cr_expect_eq(v.signaled, 0, "%s: verify died of signal %d", flips[f].what, v.signaled);
        cr_expect_eq(v.code, 1, "%s: verify finds the damage: %s", flips[f].what, v.out);
        cr_expect(strstr(v.out, "structure is damaged"), "%s: %s", flips[f].what, v.out);

        run c = cli(dir, 0, COMPILE);
        cr_expect_eq(c.signaled, 0, "%s: compile died of signal %d", flips[f].what, c.signaled);
        cr_expect_eq(c.code, 0, "%s: %s", flips[f].what, c.err);
        cr_expect_eq(count_of(c.err, "warning:"), 1, "%s: one warning: %s", flips[f].what, c.err);
        cr_expect(strstr(c.err, "data.mdb.damaged.1"), "%s: %s", flips[f].what, c.err);
        kernel_lines(c.out, got, sizeof got);
        cr_expect_str_eq(got, want, "%s: the right kernel", flips[f].what);
        cr_expect(path_exists(aside), "%s: set aside", flips[f].what);
        size_t aside_len;
        uint8_t *kept = read_all(aside, &aside_len);
        cr_expect(aside_len == damaged_len && memcmp(kept, damaged, aside_len) == 0,
                  "%s: the set-aside file is the damaged one, untouched", flips[f].what);
        free(kept);
        free(damaged);

        run v2 = cli(dir, 0, VERIFY);
        cr_expect_eq(v2.code, 0, "%s: the fresh cache verifies: %s", flips[f].what, v2.out);
        run hit = cli(dir, 0, COMPILE);
        cr_expect(strstr(hit.out, "cache         hit"), "%s: the recompiled kernel is served: %s", flips[f].what,
                  hit.out);
        /* the damaged file's intact entry can be recovered */
        const char *from[] = {"cache", "verify", "--repair", "--from", aside, NULL};
        run rep = cli(dir, 0, from);
        cr_expect_eq(rep.code, 0, "%s: %s %s", flips[f].what, rep.out, rep.err);
        cr_expect(strstr(rep.out, "recovered 0 entries") && strstr(rep.out, "1 already present"), "%s: %s",
                  flips[f].what, rep.out);
    }

    /* A second damage event sets the new file aside under a new name. */
    const char *dir = in_root("flip0");
    mlajit_lmdb_meta again = meta_of(in_root("flip0/data.mdb"));
    flip(dir, (size_t)again.main_db.root * PAGE + 13, 0xff);
    uint8_t *first;
    size_t first_len;
    first = read_all(in_root("flip0/data.mdb.damaged.1"), &first_len);
    run c = cli(dir, 0, COMPILE);
    cr_expect_eq(c.code, 0, "%s", c.err);
    cr_expect(strstr(c.err, "data.mdb.damaged.2"), "%s", c.err);
    size_t len;
    uint8_t *still = read_all(in_root("flip0/data.mdb.damaged.1"), &len);
    cr_expect(len == first_len && memcmp(still, first, len) == 0, "the first set-aside file was not overwritten");
    free(still);
    free(first);
}

/* A hit writes nothing: the file's bytes and time stay as they were. */
Test(damage_cli, a_cli_hit_writes_nothing)
{
    char data[600];
    const char *fixture = one_kernel_fixture(data);
    size_t before_len, after_len;
    uint8_t *before = read_all(data, &before_len);
    struct stat st0, st1;
    stat(data, &st0);
    for (int i = 0; i < 3; i++) {
        run r = cli(fixture, 0, COMPILE);
        cr_assert_eq(r.code, 0, "%s", r.err);
        cr_expect(strstr(r.out, "cache         hit"), "%s", r.out);
    }
    stat(data, &st1);
    uint8_t *after = read_all(data, &after_len);
    cr_expect(before_len == after_len && memcmp(before, after, before_len) == 0, "data.mdb changed");
    cr_expect(st0.st_mtim.tv_sec == st1.st_mtim.tv_sec && st0.st_mtim.tv_nsec == st1.st_mtim.tv_nsec);
    free(before);
    free(after);
}

/* ---- random page damage ------------------------------------------------------------ */

static uint64_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Damage one page of the file in one of six ways; returns a description. */
static void damage_page(const char *dir, uint64_t seed, char *what, size_t what_len)
{
    char path[600];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    size_t n;
    uint8_t *b = read_all(path, &n);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    size_t pages = n / PAGE, pg = (size_t)(next_random(&s) % pages), at = pg * PAGE;
    int kind = (int)(next_random(&s) % 6);
    static const char *kinds[] = {"1-8 flipped bits", "a random header", "zeroed", "random bytes",
                                  "a copy of another page", "a byte in its first 64"};
    switch (kind) {
    case 0:
        for (int k = 1 + (int)(next_random(&s) % 8); k > 0; k--)
            b[at + next_random(&s) % PAGE] ^= (uint8_t)(1u << (next_random(&s) % 8));
        break;
    case 1:
        for (int k = 0; k < 16; k++)
            b[at + k] = (uint8_t)next_random(&s);
        break;
    case 2:
        memset(b + at, 0, PAGE);
        break;
    case 3:
        for (int k = 0; k < PAGE; k++)
            b[at + k] = (uint8_t)next_random(&s);
        break;
    case 4:
        memcpy(b + at, b + (next_random(&s) % pages) * PAGE, PAGE);
        break;
    default:
        b[at + next_random(&s) % 64] ^= (uint8_t)(1 + next_random(&s) % 255);
        break;
    }
    write_whole_file(path, b, n);
    free(b);
    snprintf(what, what_len, "seed %llu: page %zu of %zu, %s", (unsigned long long)seed, pg, pages, kinds[kind]);
}

Test(damage_cli, two_hundred_random_page_damages_never_crash_and_serve_the_right_kernel)
{
    const char *fixture = in_root("fixture");
    /* four kernels: the one looked up and three others whose pages the damage hits too */
    mlajit_kernel_spec specs[4] = {spec_of(MLAJIT_MODEL_V32, 16), spec_of(MLAJIT_MODEL_V32, 8),
                                   spec_of(MLAJIT_MODEL_DSV4, 16), spec_of(MLAJIT_MODEL_DSV4, 8)};
    fill(fixture, specs, 4);
    char pristine[600];
    snprintf(pristine, sizeof pristine, "%s/data.mdb", fixture);
    run good = cli(copy_of(pristine, "good"), 1, COMPILE);
    cr_assert_eq(good.code, 0, "%s", good.err);
    char want[1024], got[1024];
    kernel_lines(good.out, want, sizeof want);

    int clean = 0, hit = 0, refused = 0, recompiled = 0, set_aside = 0, entry_damage = 0;
    const int count = seeds();
    for (uint64_t seed = 1; seed <= (uint64_t)count; seed++) {
        char name[32], what[160];
        snprintf(name, sizeof name, "seed%llu", (unsigned long long)seed);
        const char *dir = copy_of(pristine, name);
        damage_page(dir, seed, what, sizeof what);
        int no_jit = seed % 10 != 0;

        run v1 = cli(dir, 0, VERIFY);
        cr_assert_eq(v1.signaled, 0, "%s: verify died of signal %d", what, v1.signaled);
        cr_assert(v1.code == 0 || v1.code == 1, "%s: verify exit %d: %s", what, v1.code, v1.err);

        run c = cli(dir, no_jit, COMPILE);
        cr_assert_eq(c.signaled, 0, "%s: compile died of signal %d", what, c.signaled);
        int warned = count_of(c.err, "warning:");
        if (c.code == 0) {
            kernel_lines(c.out, got, sizeof got);
            cr_assert_str_eq(got, want, "%s: a wrong kernel was served", what);
            hit += strstr(c.out, "cache         hit") != NULL;
            recompiled += strstr(c.out, "miss: compiled") != NULL;
        } else {
            cr_assert(no_jit && c.code == 1 && strstr(c.err, "JIT is disabled"),
                      "%s: compile exit %d: %s", what, c.code, c.err);
            cr_assert_geq(warned, 1, "%s: a refusal after damage comes with a warning: %s", what, c.err);
            refused++;
        }
        cr_assert_leq(warned, 1, "%s: at most one warning: %s", what, c.err);
        if (v1.code == 0) { /* undamaged as far as anything reads: a plain hit */
            cr_assert(c.code == 0 && warned == 0 && strstr(c.out, "cache         hit"), "%s: %s %s", what, c.out,
                      c.err);
            clean++;
        }

        /* Afterwards the cache is intact, or its damaged file is set aside. */
        int aside = path_exists(in_root("%s/data.mdb.damaged.1", name));
        set_aside += aside;
        if (aside && !path_exists(in_root("%s/data.mdb", name))) { /* set aside, and nothing stored since (JIT off) */
            cr_assert(no_jit, "%s: a compile stores its kernel in a fresh file", what);
        } else {
            run v2 = cli(dir, 0, VERIFY);
            cr_assert_eq(v2.signaled, 0, "%s: verify died of signal %d", what, v2.signaled);
            cr_assert(!strstr(v2.out, "structure is damaged"), "%s: the damaged file is still in use: %s", what,
                      v2.out);
            if (v2.code != 0) { /* another kernel's entry fails its checksum: a miss when used; repair drops it */
            cr_assert(strstr(v2.out, "DAMAGED"), "%s: %s", what, v2.out);
            entry_damage++;
            run r = cli(dir, 0, REPAIR);
            cr_assert_eq(r.code, 0, "%s: %s %s", what, r.out, r.err);
            run v3 = cli(dir, 0, VERIFY);
            cr_assert_eq(v3.code, 0, "%s: %s", what, v3.out);
            }
        }
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        cr_assert_eq(system(cmd), 0);
    }
    fprintf(stderr, "%d seeds: %d untouched by any read, %d hits, %d recompiled, %d refused (JIT off), %d set aside, "
                "%d left a damaged entry of another kernel (repaired)\n",
                count, clean, hit, recompiled, refused, set_aside, entry_damage);
    cr_expect_gt(set_aside, 0, "some seeds hit the trees");
    cr_expect_gt(refused + recompiled, 0, "some seeds hit the kernel looked up");
}
