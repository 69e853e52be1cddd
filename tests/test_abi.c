/* The public ABI as a program built against include/mlajit.h sees it: the
 * library's version against the header's, and the struct_size rule at every
 * entry point. The suite is built twice (tests/meson.build): `abi` against this
 * library, and `abi_older_program` against one built from a pretend next minor
 * version's header whose structs are each 64 bytes longer
 * (tests/abi_grow_header.py), so this file's structs are an older program's:
 * the library must fill them up to their struct_size, touch nothing past it
 * (canary bytes, and a guard page right after each struct), and read their
 * later fields as the defaults. tests/abi_exports.py checks the shared
 * library's exports against the header. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/abi.h" /* this library's sizes, and the reader under test */
#include "mlajit.h"
#include "shared_cache.h"

#ifdef MLAJIT_TEST_OLDER_PROGRAM
#define OLDER 1 /* the library's structs are 64 bytes longer than ours */
#else
#define OLDER 0
#endif

Test(version, the_library_reports_the_header_it_was_built_with)
{
    int major = -1, minor = -1, patch = -1;
    const char *s = mlajit_version(&major, &minor, &patch);
    cr_assert_not_null(s);
    cr_expect_eq(major, MLAJIT_VERSION_MAJOR);
    cr_expect_eq(minor, MLAJIT_VERSION_MINOR);
    cr_expect_eq(patch, MLAJIT_VERSION_PATCH);
    cr_expect_str_eq(s, MLAJIT_VERSION_STRING);
    char joined[32];
    snprintf(joined, sizeof joined, "%d.%d.%d", major, minor, patch);
    cr_expect_str_eq(s, joined, "the string is the numbers");
    cr_expect_str_eq(mlajit_version(NULL, NULL, NULL), s, "each number may be NULL");
}

/* ---- memory with a canary and a guard page after a struct -------------------- */

enum { kCanary = 64, kCanaryByte = 0xA5 };

/* `size` bytes ending where an inaccessible page starts, so a read or write past
 * them faults whatever the build; kCanary bytes before the struct are not used. */
typedef struct guarded {
    unsigned char *map;
    size_t map_len;
    void *p;
} guarded;

static void *guarded_alloc(guarded *g, size_t size)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t pages = (size + page - 1) / page + 1;
    g->map_len = (pages + 1) * page;
    g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(g->map, MAP_FAILED);
    cr_assert_eq(mprotect(g->map + pages * page, page, PROT_NONE), 0);
    cr_assert_eq(size % 8, 0u, "structs end 8-byte aligned");
    g->p = g->map + pages * page - size;
    memset(g->map, 0, pages * page);
    return g->p;
}

static void guarded_free(guarded *g) { munmap(g->map, g->map_len); }

/* A struct of `size` bytes with kCanary canary bytes after it. */
static void *with_canary(size_t size)
{
    unsigned char *p = malloc(size + kCanary);
    cr_assert_not_null(p);
    memset(p, 0, size);
    memset(p + size, kCanaryByte, kCanary);
    return p;
}

static void expect_canary(const void *p, size_t size, const char *what)
{
    const unsigned char *c = (const unsigned char *)p + size;
    for (int i = 0; i < kCanary; i++)
        if (c[i] != kCanaryByte) {
            cr_expect_fail("%s: byte %d past its struct_size (%zu) was written (0x%02x)", what, i, size, c[i]);
            return;
        }
}

static void set_size(void *p, size_t struct_size) { memcpy(p, &struct_size, sizeof struct_size); }

/* ---- a context, a kernel and a plan to call the entry points with ----------- */

static mlajit_context *ctx;

static void make_context(void)
{
    const char *dir = shared_cache_dir();
    mlajit_context_options o = {.struct_size = sizeof o, .cache_dir = dir, .packs = "",
                                .flags = MLAJIT_CONTEXT_NO_DEVICE | (dir ? 0u : MLAJIT_CONTEXT_NO_DISK_CACHE)};
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
}

static void destroy_context(void) { mlajit_context_destroy(ctx); }

TestSuite(struct_size, .init = make_context, .fini = destroy_context, .timeout = 300);

/* The suite's kernel: small and quick to compile (the portable family on sm_80). */
static void small_spec(mlajit_kernel_spec *s)
{
    set_size(s, sizeof *s);
    cr_assert_eq(mlajit_spec_init(s, MLAJIT_MODEL_V32, 8, 64), MLAJIT_OK, "%s", mlajit_last_error());
    strcpy(s->arch, "sm_80");
}

static void small_shape(mlajit_decode_shape *shape)
{
    *shape = (mlajit_decode_shape){.struct_size = sizeof *shape, .batch = 1, .s_q = 1, .topk = 64};
}

#define FAKE(addr) ((void *)(uintptr_t)(addr)) /* never dereferenced: nothing launches */

/* Valid decode arguments for small_spec's plan (device pointers stand-ins: the
 * context has no device, so mlajit_decode validates them, then says so). */
static void small_args(mlajit_decode_args *a, const mlajit_plan *plan)
{
    memset(a, 0, sizeof *a);
    a->struct_size = sizeof *a;
    a->q = FAKE(0x100000);
    a->kv = (mlajit_cache_view){FAKE(0x200000), mlajit_min_page_stride(MLAJIT_MODEL_V32, 64), 4};
    a->indices = FAKE(0x300000);
    a->sm_scale = 0.04f;
    a->out = FAKE(0x400000);
    a->workspace = mlajit_plan_workspace_size(plan) ? FAKE(0x500000) : NULL;
    a->workspace_size = mlajit_plan_workspace_size(plan);
}

static mlajit_plan *small_plan(void)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
    small_spec(&s);
    small_shape(&shape);
    mlajit_plan *plan = NULL;
    cr_assert_eq(mlajit_plan_create(ctx, &s, &shape, &plan), MLAJIT_OK, "%s", mlajit_last_error());
    return plan;
}

/* ---- 0 and too small: refused, naming the struct, nothing written ---------------- */

/* status MLAJIT_ERR_INVALID_ARGUMENT, and the message names the argument's
 * struct_size and its initialiser. */
static void expect_refused(int rc, const char *arg, const char *init)
{
    const char *msg = mlajit_last_error();
    cr_expect_eq(rc, MLAJIT_ERR_INVALID_ARGUMENT, "%s: got %d (%s)", arg, rc, msg);
    char want[64];
    snprintf(want, sizeof want, "%s.struct_size = ", arg);
    cr_expect(strstr(msg, want) && strstr(msg, init), "%s: the message names %s and %s: %s", arg, want, init, msg);
}

Test(struct_size, zero_or_too_small_is_refused_at_every_entry_point)
{
    mlajit_plan *plan = small_plan();
    for (int round = 0; round < 2; round++) {
        const size_t bad = round == 0 ? 0 : sizeof(size_t) + 4; /* unset, then too small */
        mlajit_kernel_spec spec = MLAJIT_KERNEL_SPEC_INIT, good_spec = MLAJIT_KERNEL_SPEC_INIT;
        mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT, good_shape = MLAJIT_DECODE_SHAPE_INIT;
        small_spec(&good_spec);
        small_shape(&good_shape);
        spec = good_spec;
        shape = good_shape;
        spec.struct_size = bad;
        shape.struct_size = bad;
        char buf[128];
        char *source = NULL;
        expect_refused(mlajit_spec_validate(&spec), "spec", "MLAJIT_KERNEL_SPEC_INIT");
        expect_refused(mlajit_spec_string(&spec, buf, sizeof buf), "spec", "MLAJIT_KERNEL_SPEC_INIT");
        expect_refused(mlajit_generate_source(&spec, &source), "spec", "MLAJIT_KERNEL_SPEC_INIT");
        cr_expect_null(source);
        expect_refused(mlajit_envelope_check(&spec, NULL), "spec", "MLAJIT_KERNEL_SPEC_INIT");
        expect_refused(mlajit_envelope_check(&good_spec, &shape), "shape", "MLAJIT_DECODE_SHAPE_INIT");
        expect_refused(mlajit_kernel_prepare(ctx, &spec, NULL), "spec", "MLAJIT_KERNEL_SPEC_INIT");
        mlajit_plan *p = FAKE(1);
        expect_refused(mlajit_plan_create(ctx, &spec, &good_shape, &p), "spec", "MLAJIT_KERNEL_SPEC_INIT");
        cr_expect_null(p, "no plan on a failure");
        expect_refused(mlajit_plan_create(ctx, &good_spec, &shape, &p), "shape", "MLAJIT_DECODE_SHAPE_INIT");
        mlajit_context *c = FAKE(1);
        mlajit_context_options opts = {.struct_size = bad};
        expect_refused(mlajit_context_create(&opts, &c), "options", "MLAJIT_CONTEXT_OPTIONS_INIT");
        cr_expect_null(c, "no context on a failure");
        const mlajit_model models[] = {MLAJIT_MODEL_V32};
        const int heads[] = {8}, pages[] = {64};
        mlajit_kernel_grid grid = {.struct_size = bad, .models = models, .num_models = 1, .head_counts = heads,
                                   .num_head_counts = 1, .page_sizes = pages, .num_page_sizes = 1};
        expect_refused(mlajit_warmup(ctx, &grid, 1, NULL), "grid", "MLAJIT_KERNEL_GRID_INIT");
        mlajit_decode_args args = MLAJIT_DECODE_ARGS_INIT;
        small_args(&args, plan);
        args.struct_size = bad;
        expect_refused(mlajit_decode(plan, &args, NULL), "args", "MLAJIT_DECODE_ARGS_INIT");
        double out_ref[8 * 512], lse_ref[8];
        expect_refused(mlajit_reference_decode(&spec, &good_shape, &args, out_ref, lse_ref), "spec",
                       "MLAJIT_KERNEL_SPEC_INIT");

        /* outputs: refused before a byte is written */
        unsigned char *out = with_canary(sizeof(mlajit_context_info));
        memset(out, 0x3c, sizeof(mlajit_context_info));
        set_size(out, bad);
        expect_refused(mlajit_context_get_info(ctx, (mlajit_context_info *)out), "info", "MLAJIT_CONTEXT_INFO_INIT");
        for (size_t i = sizeof(size_t); i < sizeof(mlajit_context_info); i++)
            if (out[i] != 0x3c) {
                cr_expect_fail("info: byte %zu written on a refused call", i);
                break;
            }
        free(out);
        mlajit_kernel_spec s_out = MLAJIT_KERNEL_SPEC_INIT;
        memset(&s_out, 0x3c, sizeof s_out);
        s_out.struct_size = bad;
        const mlajit_kernel_spec before = s_out;
        expect_refused(mlajit_spec_init(&s_out, MLAJIT_MODEL_V32, 8, 64), "spec", "MLAJIT_KERNEL_SPEC_INIT");
        expect_refused(mlajit_spec_parse("v32.h8.p64", &s_out), "out", "MLAJIT_KERNEL_SPEC_INIT");
        expect_refused(mlajit_spec_resolve(&good_spec, &s_out), "resolved", "MLAJIT_KERNEL_SPEC_INIT");
        cr_expect_eq(memcmp(&s_out, &before, sizeof s_out), 0, "a refused spec output is left as it was");
        mlajit_kernel_report rep = {.struct_size = bad};
        expect_refused(mlajit_kernel_prepare(ctx, &good_spec, &rep), "report", "MLAJIT_KERNEL_REPORT_INIT");
        mlajit_warmup_report wrep = {.struct_size = bad};
        grid.struct_size = sizeof grid;
        expect_refused(mlajit_warmup(ctx, &grid, 1, &wrep), "report", "MLAJIT_WARMUP_REPORT_INIT");
        mlajit_plan_outline o = {.struct_size = bad};
        expect_refused(mlajit_plan_describe(&good_spec, &good_shape, 0, &o), "out", "MLAJIT_PLAN_OUTLINE_INIT");
        mlajit_tune_report trep = {.struct_size = bad};
        expect_refused(mlajit_tune(ctx, NULL, 10, &trep), "report", "MLAJIT_TUNE_REPORT_INIT");
        const mlajit_tune_grid tgrid = {.struct_size = bad};
        expect_refused(mlajit_tune(ctx, &tgrid, 10, NULL), "grid", "MLAJIT_TUNE_GRID_INIT");
    }
    mlajit_plan_destroy(plan);
}

/* ---- an older program's structs: filled up to their size, nothing past it ------ */

Test(struct_size, outputs_are_filled_up_to_struct_size_and_untouched_past_it)
{
    if (OLDER)
        cr_expect_gt(mlajit_abi_size(MLAJIT_ABI_CONTEXT_INFO), sizeof(mlajit_context_info),
                     "the library's structs are the grown header's");
    mlajit_kernel_spec good = MLAJIT_KERNEL_SPEC_INIT;
    small_spec(&good);

    mlajit_kernel_spec *spec = with_canary(sizeof *spec);
    spec->struct_size = sizeof *spec;
    cr_assert_eq(mlajit_spec_init(spec, MLAJIT_MODEL_DSV4, 16, 256), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect(spec->model == MLAJIT_MODEL_DSV4 && spec->h_q == 16 && spec->page_size == 256 && spec->arch[0] == 0);
    cr_expect_eq(spec->struct_size, sizeof *spec, "struct_size is the caller's, never written");
    expect_canary(spec, sizeof *spec, "mlajit_spec_init");
    cr_assert_eq(mlajit_spec_parse("v32.h24.p32.fs.t64.hc24.sm90-narrow.sm_90a", spec), MLAJIT_OK, "%s",
                 mlajit_last_error());
    cr_expect(spec->h_q == 24 && spec->heads_per_cta == 24 && spec->features == MLAJIT_FEATURE_SINK &&
              strcmp(spec->arch, "sm_90a") == 0);
    expect_canary(spec, sizeof *spec, "mlajit_spec_parse");
    cr_assert_eq(mlajit_spec_resolve(&good, spec), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect(spec->variant == MLAJIT_VARIANT_PORTABLE && spec->tile > 0 && spec->heads_per_cta > 0);
    expect_canary(spec, sizeof *spec, "mlajit_spec_resolve");
    free(spec);

    mlajit_context_info *info = with_canary(sizeof *info);
    info->struct_size = sizeof *info;
    cr_assert_eq(mlajit_context_get_info(ctx, info), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect(info->has_device == 0 && strcmp(info->device_arch, "sm_90a") == 0 && info->no_device_reason[0]);
    expect_canary(info, sizeof *info, "mlajit_context_get_info");
    free(info);

    mlajit_kernel_report *rep = with_canary(sizeof *rep);
    rep->struct_size = sizeof *rep;
    cr_assert_eq(mlajit_kernel_prepare(ctx, &good, rep), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect(strncmp(rep->spec, "v32.h8.p64.", 11) == 0 && strlen(rep->key) == 32 && rep->cubin_bytes > 0, "%s",
              rep->spec);
    expect_canary(rep, sizeof *rep, "mlajit_kernel_prepare");
    free(rep);

    const mlajit_model models[] = {MLAJIT_MODEL_V32};
    const int heads[] = {8}, pages[] = {64};
    const char *const archs[] = {"sm_80"};
    const mlajit_kernel_grid grid = {.struct_size = sizeof grid, .models = models, .num_models = 1,
                                     .head_counts = heads, .num_head_counts = 1, .page_sizes = pages,
                                     .num_page_sizes = 1, .archs = archs, .num_archs = 1};
    mlajit_warmup_report *wrep = with_canary(sizeof *wrep);
    wrep->struct_size = sizeof *wrep;
    cr_assert_eq(mlajit_warmup(ctx, &grid, 1, wrep), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect(wrep->kernels == 1 && wrep->from_memory == 1 && wrep->wall_ms > 0);
    expect_canary(wrep, sizeof *wrep, "mlajit_warmup");
    free(wrep);

    mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
    small_shape(&shape);
    mlajit_plan_outline *o = with_canary(sizeof *o);
    o->struct_size = sizeof *o;
    cr_assert_eq(mlajit_plan_describe(&good, &shape, 0, o), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect(strncmp(o->kernel, "v32.h8.p64.", 11) == 0 && o->variant == MLAJIT_VARIANT_PORTABLE && o->rows == 1 &&
              o->num_splits >= 1, "%s", o->kernel);
    expect_canary(o, sizeof *o, "mlajit_plan_describe");
    free(o);

    /* written on failure too (this context has no device): up to its size */
    mlajit_tune_report *trep = with_canary(sizeof *trep);
    trep->struct_size = sizeof *trep;
    cr_expect_eq(mlajit_tune(ctx, NULL, 10, trep), MLAJIT_ERR_NO_DEVICE, "%s", mlajit_last_error());
    cr_expect(trep->buckets == 0 && trep->stored == 0 && trep->struct_size == sizeof *trep);
    expect_canary(trep, sizeof *trep, "mlajit_tune");
    free(trep);
}

/* The same with each output struct ending at a guard page: a byte written past
 * struct_size faults. */
Test(struct_size, outputs_ending_at_a_guard_page)
{
    mlajit_kernel_spec good = MLAJIT_KERNEL_SPEC_INIT;
    small_spec(&good);
    guarded g;
    mlajit_kernel_spec *spec = guarded_alloc(&g, sizeof *spec);
    spec->struct_size = sizeof *spec;
    cr_expect_eq(mlajit_spec_init(spec, MLAJIT_MODEL_V32, 8, 64), MLAJIT_OK);
    cr_expect_eq(mlajit_spec_parse("dsv4.h16.p64", spec), MLAJIT_OK);
    cr_expect_eq(mlajit_spec_resolve(&good, spec), MLAJIT_OK);
    guarded_free(&g);
    mlajit_context_info *info = guarded_alloc(&g, sizeof *info);
    info->struct_size = sizeof *info;
    cr_expect_eq(mlajit_context_get_info(ctx, info), MLAJIT_OK);
    guarded_free(&g);
    mlajit_kernel_report *rep = guarded_alloc(&g, sizeof *rep);
    rep->struct_size = sizeof *rep;
    cr_expect_eq(mlajit_kernel_prepare(ctx, &good, rep), MLAJIT_OK, "%s", mlajit_last_error());
    guarded_free(&g);
    mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
    small_shape(&shape);
    mlajit_plan_outline *o = guarded_alloc(&g, sizeof *o);
    o->struct_size = sizeof *o;
    cr_expect_eq(mlajit_plan_describe(&good, &shape, 0, o), MLAJIT_OK, "%s", mlajit_last_error());
    guarded_free(&g);
    mlajit_tune_report *trep = guarded_alloc(&g, sizeof *trep);
    trep->struct_size = sizeof *trep;
    cr_expect_eq(mlajit_tune(ctx, NULL, 10, trep), MLAJIT_ERR_NO_DEVICE, "%s", mlajit_last_error());
    guarded_free(&g);
}

/* Inputs ending at a guard page: the library reads nothing past struct_size. */
Test(struct_size, inputs_are_read_up_to_struct_size_only)
{
    guarded gs, gh, ga, gg, go;
    mlajit_kernel_spec *spec = guarded_alloc(&gs, sizeof *spec);
    small_spec(spec);
    mlajit_decode_shape *shape = guarded_alloc(&gh, sizeof *shape);
    small_shape(shape);
    char name[128];
    char *source = NULL;
    cr_expect_eq(mlajit_spec_validate(spec), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(mlajit_spec_string(spec, name, sizeof name), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(mlajit_generate_source(spec, &source), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_free(source);
    cr_expect_eq(mlajit_envelope_check(spec, shape), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(mlajit_kernel_prepare(ctx, spec, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_kernel_spec resolved = MLAJIT_KERNEL_SPEC_INIT;
    cr_expect_eq(mlajit_spec_resolve(spec, &resolved), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_plan_outline o = MLAJIT_PLAN_OUTLINE_INIT;
    cr_expect_eq(mlajit_plan_describe(spec, shape, 0, &o), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_plan *plan = NULL;
    cr_assert_eq(mlajit_plan_create(ctx, spec, shape, &plan), MLAJIT_OK, "%s", mlajit_last_error());

    mlajit_decode_args *args = guarded_alloc(&ga, sizeof *args);
    small_args(args, plan);
    cr_expect_eq(mlajit_decode(plan, args, NULL), MLAJIT_ERR_NO_DEVICE, "validated, then no device: %s",
                 mlajit_last_error());
    mlajit_plan_destroy(plan);

    const mlajit_model models[] = {MLAJIT_MODEL_V32};
    const int heads[] = {8}, pages[] = {64};
    const char *const archs[] = {"sm_80"};
    mlajit_kernel_grid *grid = guarded_alloc(&gg, sizeof *grid);
    *grid = (mlajit_kernel_grid){.struct_size = sizeof *grid, .models = models, .num_models = 1,
                                 .head_counts = heads, .num_head_counts = 1, .page_sizes = pages,
                                 .num_page_sizes = 1, .archs = archs, .num_archs = 1};
    cr_expect_eq(mlajit_warmup(ctx, grid, 1, NULL), MLAJIT_OK, "%s", mlajit_last_error());

    mlajit_context_options *opts = guarded_alloc(&go, sizeof *opts);
    *opts = (mlajit_context_options){.struct_size = sizeof *opts, .packs = "",
                                     .flags = MLAJIT_CONTEXT_NO_DEVICE | MLAJIT_CONTEXT_NO_DISK_CACHE};
    mlajit_context *c = NULL;
    cr_expect_eq(mlajit_context_create(opts, &c), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_context_destroy(c);

    /* the reference on host memory: one token, one candidate */
    const mlajit_model_desc *m = mlajit_model_describe(MLAJIT_MODEL_V32);
    uint16_t q[8 * 576] = {0}, values[576] = {0};
    unsigned char *page = calloc(1, (size_t)mlajit_min_page_stride(MLAJIT_MODEL_V32, 64));
    cr_assert_not_null(page);
    cr_assert_eq(mlajit_quantize_token(MLAJIT_MODEL_V32, values, page, 64, 0), MLAJIT_OK);
    const int32_t indices[64] = {0};
    args->q = q;
    args->kv = (mlajit_cache_view){page, mlajit_min_page_stride(MLAJIT_MODEL_V32, 64), 1};
    args->indices = indices;
    double out_ref[8 * 512], lse_ref[8];
    cr_expect_eq(mlajit_reference_decode(spec, shape, args, out_ref, lse_ref), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(m->d_v, 512);
    free(page);
    guarded_free(&gs);
    guarded_free(&gh);
    guarded_free(&ga);
    guarded_free(&gg);
    guarded_free(&go);
}

/* A newer program's larger structs: accepted; the fields this library does not
 * have are ignored going in and left as they were coming out. */
Test(struct_size, a_newer_programs_larger_structs_are_fine)
{
    const size_t lib_spec = mlajit_abi_size(MLAJIT_ABI_KERNEL_SPEC), newer_spec = lib_spec + 32;
    unsigned char *spec_bytes = with_canary(newer_spec);
    memset(spec_bytes + lib_spec, 0x77, newer_spec - lib_spec); /* the newer fields, set */
    mlajit_kernel_spec *spec = (mlajit_kernel_spec *)spec_bytes;
    set_size(spec, newer_spec);
    cr_assert_eq(mlajit_spec_init(spec, MLAJIT_MODEL_V32, 8, 64), MLAJIT_OK, "%s", mlajit_last_error());
    strcpy(spec->arch, "sm_80");
    for (size_t i = lib_spec; i < newer_spec; i++)
        if (spec_bytes[i] != 0x77) {
            cr_expect_fail("spec byte %zu, a field this library does not have, was written", i);
            break;
        }
    expect_canary(spec, newer_spec, "mlajit_spec_init");
    cr_expect_eq(mlajit_spec_validate(spec), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(mlajit_kernel_prepare(ctx, spec, NULL), MLAJIT_OK, "%s", mlajit_last_error());

    const size_t lib_info = mlajit_abi_size(MLAJIT_ABI_CONTEXT_INFO), newer_info = lib_info + 32;
    unsigned char *info_bytes = with_canary(newer_info);
    memset(info_bytes + lib_info, 0x77, newer_info - lib_info);
    mlajit_context_info *info = (mlajit_context_info *)info_bytes;
    set_size(info, newer_info);
    cr_assert_eq(mlajit_context_get_info(ctx, info), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_str_eq(info->device_arch, "sm_90a");
    for (size_t i = lib_info; i < newer_info; i++)
        if (info_bytes[i] != 0x77) {
            cr_expect_fail("info byte %zu, a field this library does not have, was written", i);
            break;
        }
    cr_expect_eq(info->struct_size, newer_info, "struct_size is the caller's");
    free(spec_bytes);
    free(info_bytes);
}

/* The library's own structs carry its size, so a newer program can tell which
 * fields are there. */
Test(struct_size, returned_structs_carry_the_librarys_size)
{
    const mlajit_model_desc *m = mlajit_model_describe(MLAJIT_MODEL_DSV4);
    cr_assert_not_null(m);
    if (OLDER)
        cr_expect_gt(m->struct_size, sizeof *m, "the grown library's descriptor is larger");
    else
        cr_expect_eq(m->struct_size, sizeof *m);
    cr_expect_eq(m->d_qk, 512, "the older program reads its fields where it knows them");
    mlajit_plan *plan = small_plan();
    const mlajit_kernel_report *r = mlajit_plan_report(plan);
    cr_assert_not_null(r);
    cr_expect_eq(r->struct_size, mlajit_abi_size(MLAJIT_ABI_KERNEL_REPORT));
    if (OLDER)
        cr_expect_gt(r->struct_size, sizeof *r);
    cr_expect(strncmp(r->spec, "v32.h8.p64.", 11) == 0, "%s", r->spec);
    mlajit_plan_destroy(plan);
}

/* mlajit_abi_in itself: a struct shorter than this library's is copied, its
 * later fields at their default (0), with this library's struct_size; one as
 * long or longer is used in place. */
Test(struct_size, fields_past_struct_size_read_as_their_defaults)
{
    for (int which = 0; which < MLAJIT_ABI_STRUCTS; which++) {
        const size_t lib = mlajit_abi_size(which), min = mlajit_abi_min_size(which);
        cr_assert(min > sizeof(size_t) && min <= lib, "struct %d: 1.0 fields %zu, this build %zu", which, min, lib);
        unsigned char *caller = malloc(lib + 64), *local = malloc(lib);
        cr_assert(caller && local);
        memset(caller, 0x5a, lib + 64);
        memset(local, 0xee, lib);
        set_size(caller, min);
        const unsigned char *got = mlajit_abi_in(which, "x", caller, local);
        cr_assert(got != NULL, "struct %d: %s", which, mlajit_last_error());
        if (min < lib) {
            cr_expect(got == local, "struct %d: copied", which);
            size_t size;
            memcpy(&size, got, sizeof size);
            cr_expect_eq(size, lib, "struct %d: this library's struct_size", which);
            for (size_t i = sizeof size; i < lib; i++)
                if (got[i] != (i < min ? 0x5a : 0)) {
                    cr_expect_fail("struct %d: byte %zu is 0x%02x (the caller's up to %zu, then 0)", which, i,
                                   got[i], min);
                    break;
                }
        } else {
            cr_expect(got == caller, "struct %d: as long as this library's: used in place", which);
        }
        set_size(caller, lib + 64);
        cr_expect(mlajit_abi_in(which, "x", caller, local) == caller, "struct %d: a longer one is used in place",
                  which);
        free(caller);
        free(local);
    }
    if (OLDER) /* every struct: the older program's sizeof is shorter than the library's */
        cr_expect_lt(sizeof(mlajit_kernel_spec), mlajit_abi_size(MLAJIT_ABI_KERNEL_SPEC));
}
