/* Host allocation failures, SQLite-style: every allocation the library and the
 * harness make goes through src/common/alloc.c, whose test hook fails the Nth
 * one. Each operation below runs with N = 1, 2, ... until a run makes fewer than
 * N allocations (it ran to the end untouched), twice: with only the Nth
 * allocation failing, and with it and every one after it failing. Every run in
 * which an allocation failed must return MLAJIT_ERR_OUT_OF_MEMORY with a message
 * saying so (no other status, no crash, nothing half made), leak nothing
 * (LeakSanitizer, in the sanitizer build: tools/ci-extra.sh) and leave the disk
 * cache whole (mlajit_store_check). */
#include <criterion/criterion.h>
#include <criterion/hooks.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/pack.h"
#include "cache/store.h"
#include "cache/tactics.h"
#include "common/alloc.h"
#include "common/error.h"
#include "harness/harness.h"
#include "mlajit.h"
#include "runtime/runtime.h"
#include "temp_tree.h"

#if defined(__SANITIZE_ADDRESS__)
#define OOM_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OOM_LSAN 1
#endif
#endif
#ifdef OOM_LSAN
#include <sanitizer/allocator_interface.h>
#include <sanitizer/lsan_interface.h>
#else
#include <malloc.h>
#endif

/* Bytes of heap in use now (the sanitizer's count, else glibc's). A run that
 * frees all it made, in the library or in LMDB, leaves it where it was: unlike
 * LeakSanitizer's scan, this also sees memory still reachable that should have
 * been released (a reference never dropped), and a pointer a dead stack slot
 * still holds does not hide a leak. */
static size_t heap_in_use(void)
{
#ifdef OOM_LSAN
    return __sanitizer_get_current_allocated_bytes();
#else
    return mallinfo2().uordblks;
#endif
}

/* glibc's count holds its per-thread caches of freed chunks as in use, so it
 * is exact only with them off (tests/meson.build runs this suite with
 * GLIBC_TUNABLES=glibc.malloc.tcache_count=0); else only the sanitizer build
 * compares. */
static int heap_count_exact(void)
{
#ifdef OOM_LSAN
    return 1;
#else
    const char *t = getenv("GLIBC_TUNABLES");
    return t && strstr(t, "glibc.malloc.tcache_count=0") != NULL;
#endif
}

/* ---- the loop ------------------------------------------------------------------ */

/* The message of the call under test, kept before anything else can replace it. */
static char under_test_message[1024];

/* Run `call` (an expression giving a status) with allocation n failing (mode),
 * keep its message, and turn injection off again. */
#define UNDER_TEST(rc, n, mode, call)                                                                              \
    do {                                                                                                           \
        mlajit_alloc_fault_set((n), (mode));                                                                       \
        (rc) = (call);                                                                                             \
        mlajit_alloc_fault_set(0, (mode));                                                                         \
        snprintf(under_test_message, sizeof under_test_message, "%s", mlajit_last_error());                       \
    } while (0)

/* One run of an operation with the fault at allocation n (0: none). The run
 * sets the hook itself around the calls under test (mlajit_alloc_fault_set) and
 * frees whatever it made, whatever they returned. */
typedef int (*oom_run_fn)(void *state, long n, mlajit_alloc_fault_mode mode);
/* After each run: the state it leaves must hold (the cache checks, ...). */
typedef void (*oom_after_fn)(void *state, long n);

static const char *mode_name(mlajit_alloc_fault_mode m)
{
    return m == MLAJIT_ALLOC_FAULT_ONCE ? "only the Nth" : "the Nth and later";
}

/* Run op until a run goes through untouched; returns the allocations the
 * untouched run made (the operation's allocation count). */
static long oom_loop(const char *what, oom_run_fn run, oom_after_fn after, void *state)
{
    long allocations = 0;
    /* one untouched run first: what stays allocated for good (NVRTC, the loader's
     * and libc's first-use state) is made before the baseline */
    cr_assert_eq(run(state, 0, MLAJIT_ALLOC_FAULT_ONCE), MLAJIT_OK, "%s: %s", what, under_test_message);
    const size_t baseline = heap_in_use();
    for (int m = 0; m < 2; m++) {
        const mlajit_alloc_fault_mode mode = m ? MLAJIT_ALLOC_FAULT_FROM : MLAJIT_ALLOC_FAULT_ONCE;
        for (long n = 1;; n++) {
            cr_assert_lt(n, 100000, "%s: no end to the allocations", what);
            mlajit_clear_error();
            under_test_message[0] = '\0';
            int rc = run(state, n, mode);
            const long failed = mlajit_alloc_fault_failures(), made = mlajit_alloc_fault_count();
            mlajit_alloc_fault_set(0, MLAJIT_ALLOC_FAULT_ONCE);
            const size_t in_use = heap_in_use();
            if (heap_count_exact() && in_use != baseline) {
                cr_expect_fail("%s: the run failing allocation %ld (%s) left %lld bytes more on the heap than it "
                               "found (a leak, or a reference never released)",
                               what, n, mode_name(mode), (long long)in_use - (long long)baseline);
                return -1;
            }
            if (after)
                after(state, n);
            const char *msg = under_test_message;
            if (failed == 0) { /* fewer than n allocations: the whole operation ran */
                cr_expect_eq(rc, MLAJIT_OK, "%s: untouched run %ld: %s (%s)", what, n, mlajit_status_string(rc), msg);
                allocations = made;
                break;
            }
            if (rc != MLAJIT_ERR_OUT_OF_MEMORY || !strstr(msg, "out of host memory")) {
                cr_expect_fail("%s: allocation %ld failing (%s) gave %s: '%s'; want MLAJIT_ERR_OUT_OF_MEMORY "
                               "saying 'out of host memory'",
                               what, n, mode_name(mode), mlajit_status_string(rc), msg);
                return -1;
            }
        }
    }
    cr_expect_gt(allocations, 0, "%s allocates (else this loop tests nothing)", what);
    fprintf(stderr, "oom: %s: %ld allocations, each failed in turn, alone and with all after it\n", what,
            allocations);
#ifdef OOM_LSAN
    cr_expect_eq(__lsan_do_recoverable_leak_check(), 0, "%s: LeakSanitizer found leaks (above)", what);
#endif
    return allocations;
}

/* ---- fixtures: a cache with real kernels, a pack of them, a case --------------- */

static char root[256];

static void make_tree(void) { temp_tree_make(root, sizeof root, "mlajit-test-oom"); }

static void remove_tree(void) { temp_tree_remove(root); }

/* root/name, the same buffer for the same name while the test runs */
static const char *path_in(const char *name)
{
    static char names[16][64], paths[16][512];
    static int used;
    for (int i = 0; i < used; i++)
        if (strcmp(names[i], name) == 0)
            return paths[i];
    cr_assert_lt(used, 16, "path_in: more than 16 names");
    snprintf(names[used], sizeof names[0], "%s", name);
    snprintf(paths[used], sizeof paths[0], "%s/%s", root, name);
    return paths[used++];
}

TestSuite(oom, .init = make_tree, .fini = remove_tree, .timeout = 600);

/* Two small kernels that compile quickly (the portable family at two tiles), for
 * sm_90a: what a context without a device targets, so a pack of them serves it. */
static const char *const kSpecs[] = {"v32.h8.p64.t64.hc16.portable.sm_90a", "v32.h8.p64.t32.hc16.portable.sm_90a"};
enum { kNumSpecs = 2 };

static mlajit_kernel_spec spec_from(const char *text)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_parse(text, &s), MLAJIT_OK, "%s", mlajit_last_error());
    return s;
}

static mlajit_context *context_on(const char *cache_dir, const char *packs, unsigned flags)
{
    mlajit_context_options o = {.struct_size = sizeof o, .cache_dir = cache_dir, .packs = packs,
                                .flags = MLAJIT_CONTEXT_NO_DEVICE | flags |
                                         (cache_dir ? 0u : MLAJIT_CONTEXT_NO_DISK_CACHE)};
    mlajit_context *ctx = NULL;
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
    return ctx;
}

/* A cache directory holding kSpecs' kernels (compiled once, no injection). */
static const char *filled_cache(void)
{
    const char *dir = path_in("cache");
    mlajit_context *ctx = context_on(dir, "", 0);
    for (int i = 0; i < kNumSpecs; i++) {
        mlajit_kernel_spec s = spec_from(kSpecs[i]);
        cr_assert_eq(mlajit_kernel_prepare(ctx, &s, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    }
    mlajit_context_destroy(ctx);
    return dir;
}

/* The disk cache is whole: its structure checks, and every kernel still hits. */
static void expect_cache_whole(const char *dir, const char *when)
{
    mlajit_store *store = NULL;
    cr_assert_eq(mlajit_store_open(dir, 0, &store), MLAJIT_OK, "%s: %s", when, mlajit_last_error());
    mlajit_store_check_report report;
    memset(&report, 0, sizeof report);
    int rc = mlajit_store_check(store, &report);
    cr_expect(rc == MLAJIT_OK || rc == MLAJIT_ERR_NOT_FOUND /* nothing stored yet */, "%s: the cache checks: %s (%s)",
              when, mlajit_last_error(), report.problem);
    mlajit_store_close(store);
}

typedef struct cache_state {
    const char *dir;
    const char *packs;
    unsigned flags;
    int check_cache;
    const char *remove_first; /* a folder removed before each run (NULL: none) */
} cache_state;

static void after_check_cache(void *arg, long n)
{
    cache_state *st = arg;
    if (!st->check_cache)
        return;
    char when[64];
    snprintf(when, sizeof when, "after the run failing allocation %ld", n);
    expect_cache_whole(st->dir, when);
}

/* ---- context creation ------------------------------------------------------------- */

static int run_context_create(void *arg, long n, mlajit_alloc_fault_mode mode)
{
    cache_state *st = arg;
    mlajit_context_options o = {.struct_size = sizeof o, .cache_dir = st->dir, .packs = st->packs,
                                .flags = MLAJIT_CONTEXT_NO_DEVICE | st->flags};
    if (st->remove_first) {
        char copy[512];
        snprintf(copy, sizeof copy, "%s", st->remove_first);
        temp_tree_remove(copy);
    }
    mlajit_context *ctx = (mlajit_context *)1;
    int rc;
    UNDER_TEST(rc, n, mode, mlajit_context_create(&o, &ctx));
    if (rc)
        cr_expect_null(ctx, "a failed create leaves no handle");
    mlajit_context_destroy(rc ? NULL : ctx);
    return rc;
}

/* A pack at path of specs' kernels, taken from (or compiled into) the cache. */
static const char *pack_of(const char *path, const char *cache_dir, const mlajit_kernel_spec *specs, int n)
{
    mlajit_context *ctx = context_on(cache_dir, "", 0);
    mlajit_pack_item items[16];
    mlajit_cache_entry entries[16];
    cr_assert_leq(n, 16);
    for (int i = 0; i < n; i++) {
        const mlajit_kernel *k = NULL;
        cr_assert_eq(mlajit_kernel_acquire(ctx, &specs[i], 0, &k, NULL), MLAJIT_OK, "%s", mlajit_last_error());
        mlajit_kernel_entry_of(k, &entries[i]);
        items[i] = (mlajit_pack_item){.key = k->key, .entry = &entries[i]};
    }
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    mlajit_pack_manifest recipe = {.key_recipe = MLAJIT_KEY_RECIPE, .nvrtc_major = info.nvrtc_major,
                                   .nvrtc_minor = info.nvrtc_minor};
    snprintf(recipe.tool, sizeof recipe.tool, "mlajit %s", MLAJIT_VERSION_STRING);
    cr_assert_eq(mlajit_pack_write(path, &recipe, items, (size_t)n, NULL, 0), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_context_destroy(ctx);
    return path;
}

/* A pack of kSpecs' kernels. */
static const char *built_pack(const char *cache_dir)
{
    mlajit_kernel_spec specs[kNumSpecs];
    for (int i = 0; i < kNumSpecs; i++)
        specs[i] = spec_from(kSpecs[i]);
    return pack_of(path_in("kernels.pack"), cache_dir, specs, kNumSpecs);
}

Test(oom, context_creation_with_a_disk_cache_and_packs)
{
    cache_state st = {.dir = filled_cache(), .check_cache = 1};
    st.packs = built_pack(st.dir);
    char packs[1024];
    snprintf(packs, sizeof packs, "%s:%s", st.packs, path_in("missing.pack")); /* one skipped */
    st.packs = packs;
    oom_loop("mlajit_context_create", run_context_create, after_check_cache, &st);
    /* a new cache directory, its parents too: created under the hook */
    cache_state fresh = {.dir = path_in("new/cache/dir"), .packs = "", .remove_first = path_in("new")};
    oom_loop("mlajit_context_create (a new cache)", run_context_create, NULL, &fresh);
}

/* ---- plan creation: from the disk cache, from a pack, and compiling ------------- */

static int run_plan_create(void *arg, long n, mlajit_alloc_fault_mode mode)
{
    cache_state *st = arg;
    /* a fresh context each run, so the kernel is looked up again (not the map's) */
    mlajit_context *ctx = context_on(st->dir, st->packs, st->flags);
    mlajit_kernel_spec s = spec_from(kSpecs[0]);
    mlajit_decode_shape shape = {.struct_size = sizeof shape, .batch = 2, .s_q = 1, .topk = 128};
    mlajit_plan *plan = (mlajit_plan *)1;
    int rc;
    UNDER_TEST(rc, n, mode, mlajit_plan_create(ctx, &s, &shape, &plan));
    if (rc)
        cr_expect_null(plan, "a failed plan leaves no handle");
    else
        mlajit_plan_destroy(plan);
    mlajit_context_destroy(ctx);
    return rc;
}

Test(oom, plan_creation_from_the_disk_cache)
{
    cache_state st = {.dir = filled_cache(), .packs = "", .check_cache = 1};
    oom_loop("mlajit_plan_create (disk cache)", run_plan_create, after_check_cache, &st);
}

Test(oom, plan_creation_from_a_pack)
{
    const char *cache = filled_cache();
    cache_state st = {.dir = NULL, .packs = built_pack(cache), .flags = MLAJIT_CONTEXT_NO_JIT};
    oom_loop("mlajit_plan_create (pack)", run_plan_create, NULL, &st);
}

Test(oom, plan_creation_compiling_and_storing)
{
    /* an empty cache each run, so every run generates, compiles and stores */
    cache_state st = {.dir = path_in("jit-cache"), .packs = "", .check_cache = 1};
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", st.dir);
    for (int m = 0; m < 2; m++) {
        const mlajit_alloc_fault_mode mode = m ? MLAJIT_ALLOC_FAULT_FROM : MLAJIT_ALLOC_FAULT_ONCE;
        for (long n = 1;; n++) {
            cr_assert_eq(system(cmd), 0);
            mlajit_context *ctx = context_on(st.dir, "", 0);
            mlajit_kernel_spec s = spec_from(kSpecs[0]);
            mlajit_kernel_report r = MLAJIT_KERNEL_REPORT_INIT;
            int rc;
            UNDER_TEST(rc, n, mode, mlajit_kernel_prepare(ctx, &s, &r));
            const long failed = mlajit_alloc_fault_failures();
            mlajit_context_destroy(ctx);
            after_check_cache(&st, n);
            if (!failed) {
                cr_expect_eq(rc, MLAJIT_OK, "%s", under_test_message);
                cr_expect_eq(r.source, MLAJIT_SOURCE_COMPILED);
                if (m)
                    fprintf(stderr, "oom: mlajit_kernel_prepare (compiling and storing): %ld allocations, each "
                            "failed in turn, alone and with all after it\n", n - 1);
                break;
            }
            cr_expect(rc == MLAJIT_ERR_OUT_OF_MEMORY && strstr(under_test_message, "out of host memory"),
                      "compile, allocation %ld failing (%s): %s: %s", n, mode_name(mode), mlajit_status_string(rc),
                      under_test_message);
            if (rc != MLAJIT_ERR_OUT_OF_MEMORY)
                break;
            /* nothing half stored: a fresh context compiles or hits a whole entry */
            ctx = context_on(st.dir, "", MLAJIT_CONTEXT_NO_JIT);
            int again = mlajit_kernel_prepare(ctx, &s, NULL);
            cr_expect(again == MLAJIT_OK || again == MLAJIT_ERR_NOT_FOUND, "after the failed run: %s",
                      mlajit_last_error());
            mlajit_context_destroy(ctx);
        }
    }
#ifdef OOM_LSAN
    cr_expect_eq(__lsan_do_recoverable_leak_check(), 0, "LeakSanitizer found leaks (above)");
#endif
}

/* ---- pack open and pack build ----------------------------------------------------------- */

static int open_verify_get(const char *path, mlajit_pack **out)
{
    mlajit_pack *pack = NULL;
    int rc = mlajit_pack_open(path, &pack);
    *out = pack;
    if (rc)
        return rc;
    size_t checked = 0;
    rc = mlajit_pack_verify(pack, &checked);
    mlajit_cache_entry e;
    mlajit_cache_key key = mlajit_pack_manifest_of(pack)->kernels[0].key;
    if (rc == MLAJIT_OK && (rc = mlajit_pack_get(pack, &key, &e)) == MLAJIT_OK)
        mlajit_cache_entry_clear(&e);
    mlajit_pack_close(pack);
    *out = NULL;
    return rc;
}

static int run_pack_open(void *arg, long n, mlajit_alloc_fault_mode mode)
{
    const char *path = arg;
    mlajit_pack *pack = (mlajit_pack *)1;
    int rc;
    UNDER_TEST(rc, n, mode, open_verify_get(path, &pack));
    if (rc && pack)
        cr_expect_fail("a failed open leaves no handle");
    return rc;
}

Test(oom, pack_open_verify_and_get)
{
    const char *path = built_pack(filled_cache());
    oom_loop("mlajit_pack_open", run_pack_open, NULL, (void *)path);
}

typedef struct build_state {
    const char *cache_dir, *out;
} build_state;

/* What `mlajit pack build` does with the library: acquire a batch from the
 * cache, then write the pack. */
static int acquire_and_write(mlajit_context *ctx, const char *out, const mlajit_pack_manifest *recipe)
{
    mlajit_kernel_spec specs[kNumSpecs];
    for (int i = 0; i < kNumSpecs; i++)
        specs[i] = spec_from(kSpecs[i]);
    const mlajit_kernel *kernels[kNumSpecs] = {0};
    int rc = mlajit_acquire_batch(ctx, specs, kNumSpecs, 1, NULL, NULL, kernels, NULL);
    if (rc)
        return rc;
    mlajit_pack_item items[kNumSpecs];
    mlajit_cache_entry entries[kNumSpecs];
    for (int i = 0; i < kNumSpecs; i++) {
        mlajit_kernel_entry_of(kernels[i], &entries[i]);
        items[i] = (mlajit_pack_item){.key = kernels[i]->key, .entry = &entries[i]};
    }
    return mlajit_pack_write(out, recipe, items, kNumSpecs, NULL, 0);
}

static int run_pack_build(void *arg, long n, mlajit_alloc_fault_mode mode)
{
    build_state *st = arg;
    unlink(st->out);
    mlajit_context *ctx = context_on(st->cache_dir, "", 0);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    mlajit_pack_manifest recipe = {.key_recipe = MLAJIT_KEY_RECIPE, .nvrtc_major = info.nvrtc_major,
                                   .nvrtc_minor = info.nvrtc_minor};
    snprintf(recipe.tool, sizeof recipe.tool, "mlajit %s", MLAJIT_VERSION_STRING);
    int rc;
    UNDER_TEST(rc, n, mode, acquire_and_write(ctx, st->out, &recipe));
    mlajit_context_destroy(ctx);
    return rc;
}

static void after_pack_build(void *arg, long n)
{
    build_state *st = arg;
    char when[64];
    snprintf(when, sizeof when, "after the run failing allocation %ld", n);
    expect_cache_whole(st->cache_dir, when);
    /* the pack is whole or absent: written to a temporary file, then renamed */
    struct stat sb;
    if (stat(st->out, &sb) == 0) {
        mlajit_pack *pack = NULL;
        size_t checked = 0;
        cr_expect_eq(mlajit_pack_open(st->out, &pack), MLAJIT_OK, "%s: %s", when, mlajit_last_error());
        if (pack) {
            cr_expect_eq(mlajit_pack_verify(pack, &checked), MLAJIT_OK, "%s: %s", when, mlajit_last_error());
            mlajit_pack_close(pack);
        }
    }
    /* and no temporary file is left beside it */
    char listing[1400];
    snprintf(listing, sizeof listing, "ls -a '%s' | grep -v -e '^\\.\\.\\?$' -e '^built.pack$' -e '^cache$' -e "
                                      "'^kernels.pack$'",
             path_in(""));
    FILE *p = popen(listing, "r");
    char left[256] = "";
    if (p) {
        if (!fgets(left, sizeof left, p))
            left[0] = '\0';
        pclose(p);
    }
    cr_expect_str_eq(left, "", "%s: a temporary file is left: %s", when, left);
}

Test(oom, pack_build_from_the_cache)
{
    build_state st = {.cache_dir = filled_cache(), .out = path_in("built.pack")};
    oom_loop("pack build (mlajit_acquire_batch + mlajit_pack_write)", run_pack_build, after_pack_build, &st);
}

/* ---- warm-up ------------------------------------------------------------------------------- */

/* V3.2 at 8 heads, page 64, for the context's sm_90a: sm90-narrow and the
 * kernels its plans switch to (docs/kernels.md) */
static const mlajit_model warm_models[] = {MLAJIT_MODEL_V32};
static const int warm_heads[] = {8}, warm_pages[] = {64};
static const mlajit_kernel_grid warm_grid = {.struct_size = sizeof warm_grid, .models = warm_models,
                                             .num_models = 1, .head_counts = warm_heads, .num_head_counts = 1,
                                             .page_sizes = warm_pages, .num_page_sizes = 1};

static int run_warmup(void *arg, long n, mlajit_alloc_fault_mode mode)
{
    cache_state *st = arg;
    mlajit_context *ctx = context_on(st->dir, st->packs, 0);
    mlajit_warmup_report report = MLAJIT_WARMUP_REPORT_INIT;
    int rc;
    UNDER_TEST(rc, n, mode, mlajit_warmup(ctx, &warm_grid, 1, &report));
    if (rc == MLAJIT_OK)
        cr_expect(report.kernels >= 2 && report.compiled == 0, "%d kernels, %d compiled", report.kernels,
                  report.compiled);
    mlajit_context_destroy(ctx);
    return rc;
}

Test(oom, warmup_from_the_cache_and_a_pack)
{
    /* the grid's kernels compiled into the cache once, untouched */
    cache_state st = {.dir = path_in("warm-cache"), .packs = "", .check_cache = 1};
    mlajit_context *ctx = context_on(st.dir, "", 0);
    cr_assert_eq(mlajit_warmup(ctx, &warm_grid, 0, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_context_destroy(ctx);
    oom_loop("mlajit_warmup (disk cache)", run_warmup, after_check_cache, &st);
    /* and from a pack of them, the cache empty */
    mlajit_kernel_spec *specs = NULL;
    int count = 0;
    cr_assert_eq(mlajit_grid_expand(&warm_grid, "sm_90a", &specs, &count), MLAJIT_OK, "%s", mlajit_last_error());
    cache_state from_pack = {.dir = path_in("empty-cache"), .check_cache = 1};
    from_pack.packs = pack_of(path_in("warm.pack"), st.dir, specs, count);
    free(specs);
    oom_loop("mlajit_warmup (pack)", run_warmup, after_check_cache, &from_pack);
}

/* ---- case loading ---------------------------------------------------------------------------- */

static int run_case_load(void *arg, long n, mlajit_alloc_fault_mode mode)
{
    mlajit_case c;
    int rc;
    UNDER_TEST(rc, n, mode, mlajit_case_load(arg, &c));
    if (rc == MLAJIT_OK)
        mlajit_case_free(&c);
    return rc;
}

Test(oom, case_loading)
{
    /* a small case with every optional input: the dual cache, sink, lengths */
    const mlajit_synth_params p = {.model = MLAJIT_MODEL_DSV4, .b = 2, .s_q = 1, .h_q = 8, .topk = 64,
                                   .extra_topk = 64, .page_size = 64, .extra_page_size = 64, .seqlen = 256,
                                   .extra_seqlen = 128, .with_sink = 1, .with_topk_length = 1,
                                   .with_extra_topk_length = 1, .seed = 7};
    mlajit_case c;
    cr_assert_eq(mlajit_case_synthesize(&p, &c), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_case_compute_expected(&c), MLAJIT_OK, "%s", mlajit_last_error());
    const char *dir = path_in("case");
    cr_assert_eq(mlajit_case_save(dir, &c), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_case_free(&c);
    oom_loop("mlajit_case_load", run_case_load, NULL, (void *)dir);
}

/* ---- beyond the six: the context's info and counters, the cache's listing and
 * salvage, and the harness's synthesis and reference ------------------------- */

static int info_and_flush(mlajit_context *ctx)
{
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    int rc = mlajit_context_get_info(ctx, &info);
    if (rc == MLAJIT_OK && info.cache_entries != kNumSpecs)
        return mlajit_fail(MLAJIT_ERR_INTERNAL, "info counts %lld cache entries; the cache holds %d",
                           (long long)info.cache_entries, kNumSpecs);
    return rc ? rc : mlajit_context_flush_counters(ctx);
}

static int run_info_and_flush(void *arg, long n, mlajit_alloc_fault_mode mode)
{
    cache_state *st = arg;
    mlajit_context *ctx = context_on(st->dir, "", 0);
    mlajit_kernel_spec s = spec_from(kSpecs[0]);
    int rc = mlajit_kernel_prepare(ctx, &s, NULL); /* a hit to count */
    if (rc == MLAJIT_OK)
        UNDER_TEST(rc, n, mode, info_and_flush(ctx));
    mlajit_context_destroy(ctx);
    return rc;
}

Test(oom, context_info_and_counters)
{
    cache_state st = {.dir = filled_cache(), .packs = "", .check_cache = 1};
    oom_loop("mlajit_context_get_info + mlajit_context_flush_counters", run_info_and_flush, after_check_cache, &st);
}

static int count_entry(const mlajit_cache_key *key, const void *value, size_t len, void *arg)
{
    (*(int *)arg)++;
    return 0;
}

static int list_and_salvage(const char *dir, const char *copy)
{
    mlajit_store *store = NULL;
    int rc = mlajit_store_open(dir, 0, &store);
    if (rc)
        return rc;
    int entries = 0;
    mlajit_store_salvage_report report;
    memset(&report, 0, sizeof report);
    if ((rc = mlajit_store_foreach(store, count_entry, &entries)) == MLAJIT_OK && entries != kNumSpecs)
        rc = mlajit_fail(MLAJIT_ERR_INTERNAL, "listed %d entries of %d", entries, kNumSpecs);
    if (rc == MLAJIT_OK && (rc = mlajit_store_salvage(store, copy, &report)) == MLAJIT_OK &&
        report.present != kNumSpecs)
        rc = mlajit_fail(MLAJIT_ERR_INTERNAL, "the salvage found %llu of the %d entries present",
                         (unsigned long long)report.present, kNumSpecs);
    mlajit_store_close(store);
    return rc;
}

static int run_list_and_salvage(void *arg, long n, mlajit_alloc_fault_mode mode)
{
    cache_state *st = arg;
    int rc;
    UNDER_TEST(rc, n, mode, list_and_salvage(st->dir, path_in("data-copy.mdb")));
    return rc;
}

Test(oom, cache_listing_and_salvage)
{
    cache_state st = {.dir = filled_cache(), .packs = "", .check_cache = 1};
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s/data.mdb' '%s'", st.dir, path_in("data-copy.mdb"));
    cr_assert_eq(system(cmd), 0);
    oom_loop("mlajit_store_foreach + mlajit_store_salvage", run_list_and_salvage, after_check_cache, &st);
}

static int synthesize_and_reference(void)
{
    const mlajit_synth_params p = {.model = MLAJIT_MODEL_V32, .b = 2, .s_q = 2, .h_q = 4, .topk = 48,
                                   .page_size = 16, .seqlen = 100, .with_sink = 1, .with_topk_length = 1,
                                   .invalid_fraction = 0.1, .seed = 11};
    mlajit_case c;
    int rc = mlajit_case_synthesize(&p, &c);
    if (rc)
        return rc;
    float *out = NULL, *lse = NULL;
    rc = mlajit_case_reference(&c, c.b, &out, &lse);
    free(out);
    free(lse);
    mlajit_case_free(&c);
    return rc;
}

/* ---- tactic records: the store, salvage and packs ---------------------------------- */

static mlajit_tactic_record tactic_at(int rows, int topk)
{
    mlajit_tactic_record r;
    memset(&r, 0, sizeof r);
    snprintf(r.gpu.name, sizeof r.gpu.name, "NVIDIA H200");
    r.gpu.sm_count = 132;
    r.gpu.clock_class_mhz = 2000;
    snprintf(r.spec, sizeof r.spec, "v32.h8.p64.t0.hc0.auto.sm_90a");
    r.bucket = (mlajit_tactic_bucket){rows, topk, 0};
    snprintf(r.kernel, sizeof r.kernel, "%s", kSpecs[0]);
    r.tuned_us = 10;
    r.candidates = 4;
    snprintf(r.version, sizeof r.version, "%s", MLAJIT_VERSION_STRING);
    snprintf(r.key_recipe, sizeof r.key_recipe, "%s", MLAJIT_TACTIC_KEY_RECIPE);
    return r;
}

static int count_tactic(const uint8_t *key, size_t key_len, const mlajit_tactic_record *record, int status,
                        const char *why, void *arg)
{
    (void)key, (void)key_len, (void)status, (void)why;
    *(int *)arg += record != NULL;
    return 0;
}

typedef struct tactic_state {
    cache_state cache;
    const char *copy, *pack;
} tactic_state;

/* Put, look up, list and delete records; salvage them from a copy of the
 * file; write a pack of them, open it, look up, list and verify. */
static int tactic_ops(const tactic_state *st)
{
    mlajit_tactic_record rs[3] = {tactic_at(1, 128), tactic_at(64, 2048), tactic_at(4096, 2048)};
    mlajit_tactic_bucket shape = {128, 4096, 0};
    mlajit_store *store = NULL;
    int rc = mlajit_store_open(st->cache.dir, 0, &store), listed = 0;
    if (rc)
        return rc;
    mlajit_tactic_chooser c = {.gpu = &rs[0].gpu, .spec = rs[0].spec, .shape = &shape};
    mlajit_store_salvage_report report;
    if ((rc = mlajit_tactic_put(store, rs, 3)) == MLAJIT_OK && (rc = mlajit_tactic_nearest(store, &c)) == MLAJIT_OK &&
        (rc = mlajit_tactic_foreach(store, count_tactic, &listed)) == MLAJIT_OK && listed != 3)
        rc = mlajit_fail(MLAJIT_ERR_INTERNAL, "listed %d of 3 tactic records", listed);
    if (rc == MLAJIT_OK && c.best.bucket.rows != 64)
        rc = mlajit_fail(MLAJIT_ERR_INTERNAL, "the nearest bucket is %d rows, not 64", c.best.bucket.rows);
    uint8_t key[MLAJIT_TACTIC_KEY_BYTES];
    mlajit_tactic_key_of(&rs[2], key);
    const uint8_t *keys[] = {key};
    if (rc == MLAJIT_OK)
        rc = mlajit_tactic_delete(store, keys, NULL, 1, NULL);
    if (rc == MLAJIT_OK && (rc = mlajit_store_salvage_ex(store, st->copy, &mlajit_tactic_record_kind, 1, &report)) ==
                               MLAJIT_OK && report.records_recovered + report.records_present != 3)
        rc = mlajit_fail(MLAJIT_ERR_INTERNAL, "the salvage found %llu tactic records of 3",
                         (unsigned long long)(report.records_recovered + report.records_present));
    mlajit_store_close(store);
    if (rc)
        return rc;
    mlajit_pack_manifest recipe = {.tool = "mlajit", .key_recipe = MLAJIT_KEY_RECIPE};
    if ((rc = mlajit_pack_write(st->pack, &recipe, NULL, 0, rs, 3)))
        return rc;
    mlajit_pack *pack = NULL;
    if ((rc = mlajit_pack_open(st->pack, &pack)))
        return rc;
    listed = 0;
    mlajit_tactic_chooser p = {.gpu = &rs[0].gpu, .spec = rs[0].spec, .shape = &shape};
    if ((rc = mlajit_pack_tactic_nearest(pack, &p)) == MLAJIT_OK &&
        (rc = mlajit_pack_tactic_foreach(pack, count_tactic, &listed)) == MLAJIT_OK)
        rc = mlajit_pack_verify(pack, NULL);
    mlajit_pack_close(pack);
    return rc;
}

static int run_tactic_ops(void *arg, long n, mlajit_alloc_fault_mode mode)
{
    const tactic_state *st = arg;
    int rc;
    UNDER_TEST(rc, n, mode, tactic_ops(st));
    return rc;
}

Test(oom, tactic_records_in_the_cache_salvage_and_a_pack)
{
    tactic_state st = {.cache = {.dir = path_in("tactics-cache"), .packs = "", .check_cache = 1},
                       .copy = path_in("tactics-copy.mdb"), .pack = path_in("tactics.pack")};
    mlajit_tactic_record rs[3] = {tactic_at(1, 128), tactic_at(64, 2048), tactic_at(4096, 2048)};
    mlajit_store *store = NULL;
    cr_assert_eq(mlajit_store_open(st.cache.dir, 0, &store), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_tactic_put(store, rs, 3), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_store_close(store);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s/data.mdb' '%s'", st.cache.dir, st.copy);
    cr_assert_eq(system(cmd), 0);
    oom_loop("tactic put/nearest/foreach/delete, salvage, pack write/open/nearest/verify", run_tactic_ops,
             after_check_cache, &st.cache);
}

static int run_synthesize(void *arg, long n, mlajit_alloc_fault_mode mode)
{
    int rc;
    UNDER_TEST(rc, n, mode, synthesize_and_reference());
    return rc;
}

Test(oom, case_synthesis_and_the_reference)
{
    oom_loop("mlajit_case_synthesize + mlajit_case_reference", run_synthesize, NULL, NULL);
}
