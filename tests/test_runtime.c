/* The runtime against a fake CUDA driver (tests/fake_cuda): device discovery,
 * loading a kernel's cubin, the launches mlajit_decode makes and the parameter
 * block it hands them, the caller's context kept, and every driver failure
 * turned into a status and a message with nothing left loaded. Runs on any
 * machine: the kernels are really generated and compiled by NVRTC; only the
 * driver is fake.
 *
 * Built twice: against the full fake (a CUDA 12+ driver: the library loader and
 * cuLaunchKernelEx) and, with FAKE_CUDA_11, against one without them, where the
 * runtime must take the module loader and plain launches. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/parameterized.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bad_decode_args.h"
#include "codegen/codegen.h"
#include "codegen/kernel_abi.h"
#include "fake_cuda/fake_cuda.h"
#include "mlajit.h"
#include "row_params.h"
#include "runtime/runtime.h" /* the plan's grid, to check the launches against */

#ifdef FAKE_CUDA_11
#define HAS_CUDA12_ENTRIES 0
#else
#define HAS_CUDA12_ENTRIES 1
#endif

#include "shared_cache.h" /* one disk cache for the run: each kernel compiles once */

static mlajit_context *open_context(int device)
{
    const char *dir = shared_cache_dir();
    mlajit_context_options o = {.struct_size = sizeof o, .device = device, .cache_dir = dir, .packs = ""};
    if (!dir)
        o.flags |= MLAJIT_CONTEXT_NO_DISK_CACHE;
    mlajit_context *ctx = NULL;
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
    return ctx;
}

/* Everything the runtime made on the driver is released. */
static void expect_all_released(void)
{
    fake_cuda_counts c = fake_cuda_counts_get();
    cr_expect_eq(c.streams_live, 0, "%d streams left", c.streams_live);
    cr_expect(c.graphs_live == 0 && c.execs_live == 0 && c.events_live == 0 && c.allocations_live == 0,
              "graphs %d, execs %d, events %d, allocations %d left", c.graphs_live, c.execs_live, c.events_live,
              c.allocations_live);
    cr_expect_eq(c.images_live, 0, "%d images still loaded", c.images_live);
    cr_expect_eq(c.primary_retained, 0, "primary context retained %d more times than released", c.primary_retained);
    cr_expect_eq(c.context_depth, 0, "%d contexts left pushed on this thread", c.context_depth);
}

static mlajit_kernel_spec v32_spec(int heads)
{
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    cr_assert_eq(mlajit_spec_init(&s, MLAJIT_MODEL_V32, heads, 64), MLAJIT_OK);
    return s;
}

#define FAKE(addr) ((void *)(uintptr_t)(addr)) /* device pointers: the fake launch never reads them */

/* ---- the device ------------------------------------------------------------ */

TestSuite(device, .timeout = 120);

Test(device, the_context_reads_the_device)
{
    mlajit_context *ctx = open_context(0);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    cr_assert_eq(mlajit_context_get_info(ctx, &info), MLAJIT_OK);
    cr_expect_eq(info.has_device, 1);
    cr_expect_str_eq(info.device_name, "Fake NVIDIA H200");
    cr_expect_str_eq(info.device_arch, "sm_90a");
    cr_expect_eq(info.sm_count, 132);
    cr_expect_eq(info.l2_bytes, 50 * 1024 * 1024);
    cr_expect_eq(info.driver_version, 13000);
    cr_expect_str_eq(info.no_device_reason, "");
    cr_expect_eq(fake_cuda_counts_get().primary_retained, 1);
    mlajit_context_destroy(ctx);
    expect_all_released();
}

Test(device, each_compute_capability_gets_its_target)
{
    static const struct { int major, minor; const char *arch; } rows[] = {
        {8, 0, "sm_80"},   {8, 6, "sm_86"},   {8, 9, "sm_89"},   {9, 0, "sm_90a"},
        {10, 0, "sm_100a"}, {10, 3, "sm_103a"}, {12, 0, "sm_120a"}, {7, 5, "sm_75"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fake_cuda_device d = {"Fake GPU", rows[i].major, rows[i].minor, 100, 40 << 20, 166912, 1500000};
        fake_cuda_set_devices(1, &d);
        mlajit_context *ctx = open_context(0);
        mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
        mlajit_context_get_info(ctx, &info);
        cr_expect_str_eq(info.device_arch, rows[i].arch, "compute capability %d.%d", rows[i].major, rows[i].minor);
        mlajit_context_destroy(ctx);
    }
    expect_all_released();
}

Test(device, a_gpu_older_than_every_target_is_refused_by_name)
{
    fake_cuda_device d = {"Fake T4", 7, 5, 40, 4 << 20, 65536, 1590000};
    fake_cuda_set_devices(1, &d);
    mlajit_context *ctx = open_context(0);
    mlajit_kernel_spec s = v32_spec(64);
    cr_expect_eq(mlajit_kernel_prepare(ctx, &s, NULL), MLAJIT_ERR_UNSUPPORTED);
    cr_expect(strstr(mlajit_last_error(), "Fake T4") && strstr(mlajit_last_error(), "sm_75") &&
                  strstr(mlajit_last_error(), "sm_80") && strstr(mlajit_last_error(), "spec.arch"),
              "%s", mlajit_last_error());
    const mlajit_model models[] = {MLAJIT_MODEL_V32};
    const int heads[] = {64}, pages[] = {64};
    mlajit_kernel_grid grid = {.struct_size = sizeof grid, models, 1, heads, 1, pages, 1, NULL, 0, NULL, 0, NULL, 0};
    cr_expect_eq(mlajit_warmup(ctx, &grid, 1, NULL), MLAJIT_ERR_UNSUPPORTED);
    cr_expect(strstr(mlajit_last_error(), "warmup: the device (Fake T4) is sm_75"), "%s", mlajit_last_error());
    /* Naming a target still compiles (for packs); nothing is loaded for it. */
    snprintf(s.arch, sizeof s.arch, "sm_80");
    mlajit_kernel_report rep = MLAJIT_KERNEL_REPORT_INIT;
    cr_expect_eq(mlajit_kernel_prepare(ctx, &s, &rep), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(rep.loaded, 0);
    mlajit_context_destroy(ctx);
    expect_all_released();
}

Test(device, an_ordinal_past_the_devices_is_an_error_naming_the_range)
{
    fake_cuda_set_devices(2, NULL);
    mlajit_context_options o = {.struct_size = sizeof o,
                                .device = 2, .flags = MLAJIT_CONTEXT_NO_DISK_CACHE, .packs = ""};
    mlajit_context *ctx = FAKE(1);
    cr_expect_eq(mlajit_context_create(&o, &ctx), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_null(ctx);
    cr_expect(strstr(mlajit_last_error(), "options.device = 2") && strstr(mlajit_last_error(), "0..1"), "%s",
              mlajit_last_error());
    o.device = 1;
    cr_expect_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_context_destroy(ctx);
    expect_all_released();
}

/* No usable GPU is not an error: the context compiles, and what needs the GPU
 * says why there is none. */
static void expect_no_device_says(const char *why)
{
    mlajit_context *ctx = open_context(0);
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect_eq(info.has_device, 0);
    cr_expect(strstr(info.no_device_reason, why), "info says '%s'", info.no_device_reason);
    mlajit_kernel_spec s = v32_spec(64);
    mlajit_decode_shape shape = {.struct_size = sizeof shape, .batch = 1, .s_q = 1, .topk = 64};
    mlajit_plan *plan = NULL;
    cr_assert_eq(mlajit_plan_create(ctx, &s, &shape, &plan), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_decode_args a = {
        .struct_size = sizeof a,
        .q = FAKE(0x100000), .kv = {FAKE(0x200000), mlajit_min_page_stride(MLAJIT_MODEL_V32, 64), 4},
        .indices = FAKE(0x300000), .sm_scale = 0.04f, .out = FAKE(0x400000),
    };
    cr_expect_eq(mlajit_decode(plan, &a, NULL), MLAJIT_ERR_NO_DEVICE);
    cr_expect(strstr(mlajit_last_error(), why), "'%s' should say '%s'", mlajit_last_error(), why);
    mlajit_plan_destroy(plan);
    mlajit_context_destroy(ctx);
    expect_all_released();
}

Test(device, a_failed_cuinit_leaves_a_context_that_says_why_it_has_no_gpu)
{
    fake_cuda_fail("cuInit", FAKE_CUDA_ERROR_NO_DEVICE, 0);
    expect_no_device_says("no CUDA-capable device is detected");
}

Test(device, a_driver_without_devices_leaves_a_context_that_says_so)
{
    fake_cuda_set_devices(0, NULL);
    expect_no_device_says("reports no device");
}

Test(device, a_failed_primary_context_is_an_error)
{
    fake_cuda_fail("cuDevicePrimaryCtxRetain", FAKE_CUDA_ERROR_OUT_OF_MEMORY, 0);
    mlajit_context_options o = {.struct_size = sizeof o, .flags = MLAJIT_CONTEXT_NO_DISK_CACHE, .packs = ""};
    mlajit_context *ctx = FAKE(1);
    cr_expect_eq(mlajit_context_create(&o, &ctx), MLAJIT_ERR_CUDA);
    cr_expect_null(ctx);
    cr_expect(strstr(mlajit_last_error(), "cuDevicePrimaryCtxRetain") && strstr(mlajit_last_error(), "out of memory"),
              "%s", mlajit_last_error());
    expect_all_released();
}

/* ---- loading --------------------------------------------------------------- */

TestSuite(load, .timeout = 300);

Test(load, prepare_loads_both_entries_with_their_shared_memory)
{
    mlajit_context *ctx = open_context(0);
    mlajit_kernel_spec s = v32_spec(64);
    mlajit_kernel_report rep = MLAJIT_KERNEL_REPORT_INIT;
    cr_assert_eq(mlajit_kernel_prepare(ctx, &s, &rep), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(rep.loaded, 1);
    fake_cuda_counts c = fake_cuda_counts_get();
    cr_expect_eq(c.images_loaded, 1);
    cr_expect_eq(c.images_live, 1);
    cr_expect_eq(c.context_depth, 0, "the load pushes the primary context and pops it");
    mlajit_kernel_spec r = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_kernel_layout layout;
    snprintf(s.arch, sizeof s.arch, "sm_90a");
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_codegen_layout(&r, &layout);
    cr_expect_eq(fake_cuda_function_attribute(MLAJIT_ENTRY_MAIN, 8), layout.smem_bytes);
    cr_expect_eq(fake_cuda_function_attribute(MLAJIT_ENTRY_COMBINE, 8),
                 mlajit_combine_smem_bytes(&layout, MLAJIT_MAX_SPLITS));
    /* A second prepare is a lookup: nothing is loaded again. */
    cr_assert_eq(mlajit_kernel_prepare(ctx, &s, &rep), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(fake_cuda_counts_get().images_loaded, 1);
    mlajit_context_destroy(ctx);
    expect_all_released();
}

/* A load step the driver fails: the call fails naming the step, the kernel and
 * where its cubin came from; what the steps before it loaded is unloaded; and
 * once the driver recovers, the same kernel loads. */
typedef struct load_failure {
    const char *entry; /* as libcuda exports it */
    int skip;          /* calls that succeed first */
    int result;
    const char *words; /* what the message names */
} load_failure;

static const load_failure load_failures[] = {
#ifdef FAKE_CUDA_11
    {"cuModuleLoadData", 0, FAKE_CUDA_ERROR_NO_BINARY_FOR_GPU, "cuModuleLoadData"},
    {"cuModuleGetFunction", 0, FAKE_CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction"},
    {"cuModuleGetFunction", 1, FAKE_CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction"},
#else
    {"cuLibraryLoadData", 0, FAKE_CUDA_ERROR_NO_BINARY_FOR_GPU, "cuLibraryLoadData"},
    {"cuLibraryGetKernel", 0, FAKE_CUDA_ERROR_NOT_FOUND, "cuLibraryGetKernel"},
    {"cuLibraryGetKernel", 1, FAKE_CUDA_ERROR_NOT_FOUND, "cuLibraryGetKernel"},
    {"cuKernelGetFunction", 1, FAKE_CUDA_ERROR_INVALID_CONTEXT, "cuKernelGetFunction"},
#endif
    {"cuFuncSetAttribute", 0, FAKE_CUDA_ERROR_INVALID_VALUE, "MAX_DYNAMIC_SHARED_SIZE_BYTES"},
    {"cuFuncSetAttribute", 1, FAKE_CUDA_ERROR_INVALID_VALUE, "MAX_DYNAMIC_SHARED_SIZE_BYTES"},
};
#define LOAD_FAILURE_COUNT (sizeof load_failures / sizeof load_failures[0])

ParameterizedTestParameters(load, a_failed_step_unloads_what_it_made_and_a_retry_loads)
{
    static size_t rows[LOAD_FAILURE_COUNT];
    return row_indices(rows, LOAD_FAILURE_COUNT);
}

ParameterizedTest(size_t *row, load, a_failed_step_unloads_what_it_made_and_a_retry_loads)
{
    const load_failure *f = &load_failures[*row];
    mlajit_context *ctx = open_context(0);
    mlajit_kernel_spec s = v32_spec(64);
    fake_cuda_fail(f->entry, f->result, f->skip);
    mlajit_kernel_report rep = MLAJIT_KERNEL_REPORT_INIT;
    cr_expect_eq(mlajit_kernel_prepare(ctx, &s, &rep), MLAJIT_ERR_CUDA, "%s (skip %d)", f->entry, f->skip);
    const char *msg = mlajit_last_error();
    char code[16];
    snprintf(code, sizeof code, "error %d", f->result);
    cr_expect(strstr(msg, f->words) && strstr(msg, code) && strstr(msg, "v32.h64") && strstr(msg, "sm_90a") &&
                  strstr(msg, "cubin from"),
              "%s", msg);
    cr_expect_eq(fake_cuda_counts_get().images_live, 0, "%s (skip %d) left an image loaded", f->entry, f->skip);
    cr_expect_eq(fake_cuda_counts_get().context_depth, 0);
    fake_cuda_fail(f->entry, 0, 0);
    cr_expect_eq(mlajit_kernel_prepare(ctx, &s, &rep), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(rep.loaded, 1);
    cr_expect_eq(fake_cuda_counts_get().images_live, 1);
    mlajit_context_destroy(ctx);
    expect_all_released();
}

Test(load, the_loader_matches_the_driver)
{
    mlajit_context *ctx = open_context(0);
    mlajit_kernel_spec s = v32_spec(64);
    /* A CUDA 12 driver's kernels come through the library loader: the module
     * loader's entry points fail here, so the prepare shows which one ran. (The
     * CUDA 11 fake has only the module loader.) */
    if (HAS_CUDA12_ENTRIES) {
        fake_cuda_fail("cuModuleLoadData", FAKE_CUDA_ERROR_NOT_SUPPORTED, 0);
        fake_cuda_fail("cuModuleGetFunction", FAKE_CUDA_ERROR_NOT_SUPPORTED, 0);
    }
    mlajit_kernel_report rep = MLAJIT_KERNEL_REPORT_INIT;
    cr_expect_eq(mlajit_kernel_prepare(ctx, &s, &rep), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(fake_cuda_counts_get().images_live, 1);
    mlajit_context_destroy(ctx);
    expect_all_released();
}

/* Warmup's workers compile in parallel and load under the context's lock: each
 * kernel of the grid is loaded once, and a second warmup loads nothing. */
Test(load, warmup_on_threads_loads_each_kernel_once)
{
    mlajit_context *ctx = open_context(0);
    const mlajit_model models[] = {MLAJIT_MODEL_V32};
    const int heads[] = {16, 32, 64, 128}, pages[] = {64};
    mlajit_kernel_grid grid = {.struct_size = sizeof grid, models, 1, heads, 4, pages, 1, NULL, 0, NULL, 0, NULL, 0};
    mlajit_warmup_report rep = MLAJIT_WARMUP_REPORT_INIT;
    cr_assert_eq(mlajit_warmup(ctx, &grid, 4, &rep), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_geq(rep.kernels, 4);
    cr_expect_eq(rep.loaded, rep.kernels);
    cr_expect_eq(fake_cuda_counts_get().images_loaded, rep.kernels);
    cr_expect_eq(fake_cuda_counts_get().images_live, rep.kernels);
    cr_assert_eq(mlajit_warmup(ctx, &grid, 4, &rep), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(rep.from_memory, rep.kernels);
    cr_expect_eq(rep.loaded, 0);
    cr_expect_eq(fake_cuda_counts_get().images_loaded, rep.kernels);
    mlajit_context_destroy(ctx);
    expect_all_released();
}

/* ---- launches ---------------------------------------------------------------- */

static void launch_setup(void) { fake_cuda_set_param_bytes(sizeof(mlajit_decode_params)); }

TestSuite(launch, .init = launch_setup, .timeout = 300);

static mlajit_plan *v32_plan(mlajit_context *ctx, int heads, int batch, int topk)
{
    mlajit_kernel_spec s = v32_spec(heads);
    mlajit_decode_shape shape = {.struct_size = sizeof shape, .batch = batch, .s_q = 1, .topk = topk};
    mlajit_plan *plan = NULL;
    cr_assert_eq(mlajit_plan_create(ctx, &s, &shape, &plan), MLAJIT_OK, "%s", mlajit_last_error());
    return plan;
}

static mlajit_decode_args v32_args(const mlajit_plan *plan)
{
    mlajit_decode_args a = {
        .struct_size = sizeof a,
        .q = FAKE(0x100000), .kv = {FAKE(0x200000), mlajit_min_page_stride(MLAJIT_MODEL_V32, 64), 1024},
        .indices = FAKE(0x300000), .sm_scale = 0.0625f, .out = FAKE(0x400000), .lse = FAKE(0x500000),
        .workspace = FAKE(0x600000), .workspace_size = mlajit_plan_workspace_size(plan),
    };
    return a;
}

/* The call most launch tests make: V3.2, 64 heads, b 1, topk 2048, a split plan
 * (main kernel and combine) with valid arguments. */
typedef struct split_call {
    mlajit_context *ctx;
    mlajit_plan *plan;
    mlajit_decode_args args;
} split_call;

static split_call split_call_open(void)
{
    split_call c;
    c.ctx = open_context(0);
    c.plan = v32_plan(c.ctx, 64, 1, 2048);
    c.args = v32_args(c.plan);
    return c;
}

static void split_call_close(split_call *c)
{
    mlajit_plan_destroy(c->plan);
    mlajit_context_destroy(c->ctx);
    expect_all_released();
}

static const mlajit_decode_params *params_of(const fake_cuda_launch *l)
{
    return (const mlajit_decode_params *)(const void *)l->params;
}

/* The launch is the plan's main kernel: its grid, block, shared memory, stream. */
static void expect_main_launch(const fake_cuda_launch *l, const mlajit_plan *plan, void *stream)
{
    cr_assert_not_null(l);
    const mlajit_kernel_layout *k = &plan->kernel->layout;
    cr_expect_str_eq(l->function, MLAJIT_ENTRY_MAIN);
    cr_expect(l->grid[0] == (unsigned)plan->rows && l->grid[1] == (unsigned)plan->head_groups &&
                  l->grid[2] == (unsigned)plan->num_splits,
              "grid %u x %u x %u, plan %d x %d x %d", l->grid[0], l->grid[1], l->grid[2], plan->rows,
              plan->head_groups, plan->num_splits);
    cr_expect(l->block[0] == (unsigned)k->threads && l->block[1] == 1 && l->block[2] == 1);
    cr_expect_eq(l->shared_bytes, (unsigned)k->smem_bytes);
    cr_expect_eq(l->stream, stream);
    cr_expect_eq(l->extended, HAS_CUDA12_ENTRIES && k->dependent_launch);
    cr_expect_eq(l->programmatic, HAS_CUDA12_ENTRIES && k->dependent_launch);
}

Test(launch, a_split_plan_launches_the_main_kernel_then_the_combine)
{
    split_call c = split_call_open();
    cr_assert_gt(c.plan->num_splits, 1, "b 1, topk 2048 splits on 132 SMs");
    cr_assert_eq(c.plan->kernel->layout.dependent_launch, 1, "sm_90a kernels wait for the grid before them");
    CUstream stream = NULL;
    cr_assert_eq(c.ctx->drv->cuStreamCreate(&stream, 0), 0);
    cr_assert_eq(mlajit_decode(c.plan, &c.args, stream), MLAJIT_OK, "%s", mlajit_last_error());
    fake_cuda_counts n = fake_cuda_counts_get();
    cr_assert_eq(n.launches, 2);
    expect_main_launch(fake_cuda_launch_at(0), c.plan, stream);
    const fake_cuda_launch *comb = fake_cuda_launch_at(1);
    cr_expect_str_eq(comb->function, MLAJIT_ENTRY_COMBINE);
    cr_expect(comb->grid[0] == (unsigned)c.plan->rows && comb->grid[1] == 64 && comb->grid[2] == 1);
    cr_expect_eq(comb->block[0], (unsigned)c.plan->kernel->layout.combine_threads);
    cr_expect_eq(comb->shared_bytes, (unsigned)c.plan->combine_smem_bytes);
    cr_expect_eq(comb->programmatic, HAS_CUDA12_ENTRIES);
    cr_expect_eq(comb->stream, stream);
    /* Both kernels get the same block; it points the partials into the workspace. */
    cr_expect_eq(memcmp(comb->params, fake_cuda_launch_at(0)->params, sizeof(mlajit_decode_params)), 0);
    const mlajit_decode_params *p = params_of(comb);
    cr_expect_eq((const void *)p->partial_out, c.args.workspace);
    cr_expect_eq((const void *)p->partial_lse,
                 (const void *)((const char *)c.args.workspace + c.plan->partial_out_bytes));
    cr_expect_eq(p->num_splits, c.plan->num_splits);
    cr_expect_eq(p->tiles_per_split, c.plan->tiles_per_split);
    cr_expect_eq(p->release_dependent_early, c.plan->release_dependent_early);
    cr_expect_eq(fake_cuda_counts_get().context_depth, 0);
    c.ctx->drv->cuStreamDestroy(stream);
    split_call_close(&c);
}

/* A cached kernel whose launch record is not the generator's (a real cubin under
 * the kernel's key with an older geometry, as a build before a layout change
 * stored it) is never loaded or launched: it is refused as stale, the kernel is
 * recompiled and stored over it, and the launch takes the generator's geometry. */
Test(launch, a_stale_cached_kernel_is_recompiled_never_loaded)
{
    char dir[] = "/tmp/mlajit-runtime-stale-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    mlajit_kernel_spec s = v32_spec(64), other = v32_spec(16), r = MLAJIT_KERNEL_SPEC_INIT;
    s.variant = MLAJIT_VARIANT_SM90;
    strcpy(s.arch, "sm_90a");
    strcpy(other.arch, "sm_90a");
    /* the forged entry: another kernel's real cubin, this kernel's key, 128 threads more */
    mlajit_context *shared = open_context(0);
    const mlajit_kernel *donor;
    cr_assert_eq(mlajit_kernel_acquire(shared, &other, 0, &donor, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_spec_resolve(&s, &r), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_cache_key key;
    char spec_string[128];
    cr_assert_eq(mlajit_kernel_key(shared, &r, &key, spec_string, sizeof spec_string), MLAJIT_OK);
    mlajit_cache_entry stale;
    mlajit_kernel_entry_of(donor, &stale);
    snprintf(stale.spec_string, sizeof stale.spec_string, "%s", spec_string);
    cr_assert_eq(mlajit_spec_launch_record(&r, &stale.launch), MLAJIT_OK);
    stale.launch.threads += 128;
    mlajit_store *st;
    cr_assert_eq(mlajit_store_open(dir, 0, &st), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(mlajit_store_put(st, &key, &stale), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_store_close(st);
    size_t stale_bytes = stale.cubin_size;
    mlajit_context_destroy(shared);
    fake_cuda_counts before = fake_cuda_counts_get();

    mlajit_context_options o = {.struct_size = sizeof o, .cache_dir = dir, .packs = ""};
    mlajit_context *ctx;
    cr_assert_eq(mlajit_context_create(&o, &ctx), MLAJIT_OK, "%s", mlajit_last_error());
    mlajit_decode_shape shape = {.struct_size = sizeof shape, .batch = 4, .s_q = 1, .topk = 2048};
    mlajit_plan *plan;
    cr_assert_eq(mlajit_plan_create(ctx, &s, &shape, &plan), MLAJIT_OK, "%s", mlajit_last_error());
    const mlajit_kernel *k = plan->kernel;
    cr_expect_str_eq(k->report.spec, spec_string);
    cr_expect_eq(k->report.source, MLAJIT_SOURCE_COMPILED, "the stale entry was not taken");
    cr_expect_neq(k->cubin_size, stale_bytes);
    cr_expect_eq(fake_cuda_counts_get().images_loaded - before.images_loaded, 1, "one image: the recompiled one");
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    cr_expect(info.stale == 1 && info.corrupt == 0 && info.compiles == 1, "stale %lld, corrupt %lld, compiles %lld",
              (long long)info.stale, (long long)info.corrupt, (long long)info.compiles);
    mlajit_decode_args a = v32_args(plan);
    cr_assert_eq(mlajit_decode(plan, &a, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    const fake_cuda_launch *l = fake_cuda_launch_at(0);
    cr_assert_not_null(l);
    cr_expect_eq(l->block[0], (unsigned)stale.launch.threads - 128u, "launched with the generator's threads");
    expect_main_launch(l, plan, NULL);
    mlajit_plan_destroy(plan);
    mlajit_context_destroy(ctx);
    /* the cache now holds the recompiled kernel with the generator's record */
    cr_assert_eq(mlajit_store_open(dir, 1, &st), MLAJIT_OK);
    mlajit_cache_entry e;
    cr_assert_eq(mlajit_store_get(st, &key, &e), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(e.launch.threads, stale.launch.threads - 128);
    cr_expect_neq(e.cubin_size, stale_bytes);
    mlajit_cache_entry_clear(&e);
    mlajit_store_close(st);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
    expect_all_released();
}

/* A decode can be captured in a graph: it launches into the capture and calls
 * nothing that would synchronize or allocate (the fake fails those while a stream
 * captures, as the sync below shows). */
Test(launch, a_decode_is_captured_into_a_graph)
{
    split_call c = split_call_open();
    const mlajit_driver *drv = c.ctx->drv;
    CUstream stream = NULL;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    cr_assert_eq(drv->cuStreamCreate(&stream, MLAJIT_CU_STREAM_NON_BLOCKING), 0);
    cr_assert_eq(drv->cuStreamBeginCapture(stream, MLAJIT_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), 0);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(mlajit_decode(c.plan, &c.args, stream), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(drv->cuStreamSynchronize(stream), FAKE_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    cr_assert_eq(drv->cuStreamEndCapture(stream, &graph), 0);
    cr_assert_eq(fake_cuda_counts_get().launches, 6);
    for (int i = 0; i < 6; i++)
        cr_expect(fake_cuda_launch_at(i)->captured, "launch %d", i);
    cr_expect_eq(drv->cuGraphInstantiateWithFlags(&exec, graph, 0), 0);
    drv->cuGraphExecDestroy(exec);
    drv->cuGraphDestroy(graph);
    drv->cuStreamDestroy(stream);
    split_call_close(&c);
}

/* The driver's refusal of a launch comes back as MLAJIT_ERR_CUDA with its text. */
Test(launch, a_stream_that_is_not_one_is_the_drivers_error)
{
    split_call c = split_call_open();
    static int not_a_stream;
    cr_expect_eq(mlajit_decode(c.plan, &c.args, &not_a_stream), MLAJIT_ERR_CUDA);
    cr_expect(strstr(mlajit_last_error(), "cuLaunchKernel") && strstr(mlajit_last_error(), "invalid resource handle"),
              "%s", mlajit_last_error());
    cr_expect_eq(fake_cuda_counts_get().launches, 0);
    cr_expect_eq(fake_cuda_counts_get().context_depth, 0);
    split_call_close(&c);
}

Test(launch, an_unsplit_plan_launches_one_kernel)
{
    mlajit_context *ctx = open_context(0);
    mlajit_plan *plan = v32_plan(ctx, 128, 64, 2048);
    cr_assert_eq(plan->num_splits, 1);
    cr_expect_eq(mlajit_plan_workspace_size(plan), 0u);
    mlajit_decode_args a = v32_args(plan);
    cr_assert_eq(mlajit_decode(plan, &a, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    cr_assert_eq(fake_cuda_counts_get().launches, 1);
    expect_main_launch(fake_cuda_launch_at(0), plan, NULL);
    cr_expect_null(params_of(fake_cuda_launch_at(0))->partial_out);
    mlajit_plan_destroy(plan);
    mlajit_context_destroy(ctx);
    expect_all_released();
}

/* Every argument reaches its field of the block, with 0 strides filled in as
 * the packed layout, on the plan of bad_decode_args.h (DSV4, an extra cache,
 * every feature, s_q 2, 2 splits). */
Test(launch, the_parameter_block_carries_every_argument)
{
    mlajit_context *ctx = open_context(0);
    mlajit_kernel_spec s = MLAJIT_KERNEL_SPEC_INIT;
    mlajit_decode_shape shape = MLAJIT_DECODE_SHAPE_INIT;
    cr_assert_eq(bad_args_plan_inputs(BAD_ARGS_BATCH, BAD_ARGS_SPLITS, &s, &shape), MLAJIT_OK);
    mlajit_plan *plan = NULL;
    cr_assert_eq(mlajit_plan_create(ctx, &s, &shape, &plan), MLAJIT_OK, "%s", mlajit_last_error());
    const int64_t kv_stride = mlajit_min_page_stride(BAD_ARGS_MODEL, BAD_ARGS_PAGE) + 64;
    const int64_t extra_stride = mlajit_min_page_stride(BAD_ARGS_MODEL, BAD_ARGS_EXTRA_PAGE);
    mlajit_decode_args a = {
        .struct_size = sizeof a,
        .q = FAKE(0x100000), .q_stride_h = BAD_ARGS_DQK + 64, /* padded heads; s and b packed */
        .kv = {FAKE(0x200000), kv_stride, 10},
        .indices = FAKE(0x300000), .indices_stride_s = BAD_ARGS_TOPK + 32,
        .topk_length = FAKE(0x310000), .attn_sink = FAKE(0x320000),
        .extra_kv = {FAKE(0x400000), extra_stride, 7},
        .extra_indices = FAKE(0x500000), .extra_topk_length = FAKE(0x510000),
        .sm_scale = 0.5f,
        .out = FAKE(0x600000), .lse = FAKE(0x700000), .lse_stride_h = 3,
        .workspace = FAKE(0x800000), .workspace_size = mlajit_plan_workspace_size(plan),
    };
    cr_assert_eq(mlajit_decode(plan, &a, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    const mlajit_decode_params *p = params_of(fake_cuda_launch_at(0));
    const int64_t h = BAD_ARGS_HEADS, sq = BAD_ARGS_SQ;
    cr_expect(p->q == a.q && p->q_stride_h == BAD_ARGS_DQK + 64 && p->q_stride_s == h * (BAD_ARGS_DQK + 64) &&
                  p->q_stride_b == sq * h * (BAD_ARGS_DQK + 64),
              "q strides %lld %lld %lld", (long long)p->q_stride_b, (long long)p->q_stride_s,
              (long long)p->q_stride_h);
    cr_expect(p->kv == a.kv.data && p->kv_page_stride == kv_stride && p->kv_num_slots == 10 * BAD_ARGS_PAGE);
    cr_expect(p->indices == a.indices && p->indices_stride_s == BAD_ARGS_TOPK + 32 &&
              p->indices_stride_b == sq * (BAD_ARGS_TOPK + 32));
    cr_expect(p->topk_length == a.topk_length && p->attn_sink == a.attn_sink);
    cr_expect(p->extra_kv == a.extra_kv.data && p->extra_page_stride == extra_stride &&
              p->extra_num_slots == 7 * BAD_ARGS_EXTRA_PAGE);
    cr_expect(p->extra_indices == a.extra_indices && p->extra_indices_stride_s == BAD_ARGS_EXTRA_TOPK &&
              p->extra_indices_stride_b == sq * BAD_ARGS_EXTRA_TOPK && p->extra_topk_length == a.extra_topk_length);
    cr_expect(p->out == a.out && p->out_stride_h == BAD_ARGS_DV && p->out_stride_s == h * BAD_ARGS_DV &&
              p->out_stride_b == sq * h * BAD_ARGS_DV);
    cr_expect(p->lse == a.lse && p->lse_stride_h == 3 && p->lse_stride_s == h * 3 && p->lse_stride_b == sq * h * 3,
              "lse strides %lld %lld %lld", (long long)p->lse_stride_b, (long long)p->lse_stride_s,
              (long long)p->lse_stride_h);
    cr_expect_float_eq(p->sm_scale_log2, 0.5f * 1.4426950408889634f, 1e-6f);
    cr_expect(p->batch == BAD_ARGS_BATCH && p->s_q == BAD_ARGS_SQ && p->topk == BAD_ARGS_TOPK &&
              p->extra_topk == BAD_ARGS_EXTRA_TOPK && p->num_splits == BAD_ARGS_SPLITS);
    cr_expect_eq(p->prefetch_evict_last, plan->prefetch_evict_last);
    mlajit_plan_destroy(plan);
    mlajit_context_destroy(ctx);
    expect_all_released();
}

/* The geometry engines send: a whole mixed batch of T tokens as (T, 1) rows up to
 * MLAJIT_MAX_ROWS, and speculative decoding's s_q up to MLAJIT_MAX_SQ. One main-grid
 * row per (batch row, token), the parameter block's batch and s_q as given, and a
 * split plan's combine over every row (64 splits forced at 65536 rows: its
 * workspace comes to 2^30 floats of partials, sized without overflow). */
Test(launch, every_row_of_the_largest_shapes_gets_its_ctas)
{
    mlajit_context *ctx = open_context(0);
    /* splits: forced (64 at topk 16384: 256 tiles), else 0 for the planner's, which
     * does not split once the rows fill the GPU (ctas_fill) */
    static const struct { int batch, s_q, topk, splits, ctas_fill; } shapes[] = {
        {MLAJIT_MAX_ROWS, 1, 2048, 0, 1}, {MLAJIT_MAX_ROWS / MLAJIT_MAX_SQ, MLAJIT_MAX_SQ, 2048, 0, 1},
        {1, MLAJIT_MAX_SQ, 2048, 0, 0}, {32768, 1, 2048, 0, 1}, {MLAJIT_MAX_ROWS, 1, 16384, MLAJIT_MAX_SPLITS, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        mlajit_kernel_spec s = v32_spec(16);
        mlajit_decode_shape shape = {.struct_size = sizeof shape,
                                     .batch = shapes[i].batch, .s_q = shapes[i].s_q, .topk = shapes[i].topk,
                                     .num_splits = shapes[i].splits};
        mlajit_plan *plan = NULL;
        cr_assert_eq(mlajit_plan_create(ctx, &s, &shape, &plan), MLAJIT_OK, "b %d s_q %d: %s", shape.batch, shape.s_q,
                     mlajit_last_error());
        const int rows = shape.batch * shape.s_q;
        cr_expect_eq(plan->rows, rows);
        if (shapes[i].splits) {
            cr_expect_eq(plan->num_splits, MLAJIT_MAX_SPLITS);
            const size_t partials = (size_t)MLAJIT_MAX_SPLITS * rows * 16;
            cr_expect_geq(mlajit_plan_workspace_size(plan), partials * (512 + 1) * sizeof(float));
        } else if (shapes[i].ctas_fill) {
            cr_expect_eq(plan->num_splits, 1, "b %d s_q %d: %d CTAs fill the GPU without splitting", shape.batch,
                         shape.s_q, plan->head_groups * rows);
        }
        mlajit_decode_args a = v32_args(plan);
        fake_cuda_forget_launches();
        cr_assert_eq(mlajit_decode(plan, &a, NULL), MLAJIT_OK, "b %d s_q %d: %s", shape.batch, shape.s_q,
                     mlajit_last_error());
        const fake_cuda_launch *main_launch = fake_cuda_launch_at(0);
        expect_main_launch(main_launch, plan, NULL);
        cr_expect_eq(main_launch->grid[0], (unsigned)rows);
        cr_expect(params_of(main_launch)->batch == shape.batch && params_of(main_launch)->s_q == shape.s_q);
        cr_expect_eq(fake_cuda_counts_get().launches, plan->num_splits > 1 ? 2 : 1);
        if (plan->num_splits > 1) {
            const fake_cuda_launch *comb = fake_cuda_launch_at(1);
            cr_expect(comb->grid[0] == (unsigned)rows && comb->grid[1] == 16 && comb->grid[2] == 1);
        }
        mlajit_plan_destroy(plan);
    }
    mlajit_context_destroy(ctx);
    expect_all_released();
}

/* No rows (s_q 0 or b 0): nothing to write, so no stride can overlap (the fuzzer's
 * seed 20261130 calls 44 and 60 were refused that way), and nothing launches. */
Test(launch, an_empty_shape_launches_nothing)
{
    mlajit_context *ctx = open_context(0);
    static const struct { int batch, s_q; } shapes[] = {{29, 0}, {0, 3}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        mlajit_kernel_spec s = v32_spec(64);
        mlajit_decode_shape shape = {.struct_size = sizeof shape,
                                     .batch = shapes[i].batch, .s_q = shapes[i].s_q, .topk = 64};
        mlajit_plan *plan = NULL;
        cr_assert_eq(mlajit_plan_create(ctx, &s, &shape, &plan), MLAJIT_OK, "%s", mlajit_last_error());
        mlajit_decode_args a = v32_args(plan);
        a.out_stride_h = 520; /* padded rows; stride_s and stride_b 0 */
        a.lse_stride_s = 1;
        a.lse_stride_h = shapes[i].s_q;
        cr_expect_eq(mlajit_decode(plan, &a, NULL), MLAJIT_OK, "b %d s_q %d: %s", shapes[i].batch, shapes[i].s_q,
                     mlajit_last_error());
        mlajit_plan_destroy(plan);
    }
    cr_expect_eq(fake_cuda_counts_get().launches, 0);
    mlajit_context_destroy(ctx);
}

/* A bad argument launches nothing. */
Test(launch, a_refused_argument_launches_nothing)
{
    split_call c = split_call_open();
    c.args.workspace_size -= 16;
    cr_expect_eq(mlajit_decode(c.plan, &c.args, NULL), MLAJIT_ERR_INVALID_ARGUMENT);
    cr_expect_eq(fake_cuda_counts_get().launches, 0);
    split_call_close(&c);
}

#ifndef FAKE_CUDA_11
Test(launch, a_refused_programmatic_launch_falls_back_once_and_is_remembered)
{
    split_call c = split_call_open();
    fake_cuda_refuse_programmatic(1);
    cr_assert_eq(mlajit_decode(c.plan, &c.args, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    fake_cuda_counts n = fake_cuda_counts_get();
    cr_expect_eq(n.launches, 2);
    cr_expect_eq(n.launch_ex_calls, 1, "after the first refusal the combine launches plainly");
    cr_expect(!fake_cuda_launch_at(0)->extended && !fake_cuda_launch_at(1)->extended);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(mlajit_decode(c.plan, &c.args, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(fake_cuda_counts_get().launch_ex_calls, 1, "later calls do not ask again");
    cr_expect_eq(fake_cuda_counts_get().launches, 8);
    split_call_close(&c);
}

Test(launch, a_failure_the_plain_launch_shares_is_not_taken_for_a_refusal)
{
    split_call c = split_call_open();
    fake_cuda_fail("cuLaunchKernelEx", FAKE_CUDA_ERROR_ILLEGAL_ADDRESS, 0);
    fake_cuda_fail("cuLaunchKernel", FAKE_CUDA_ERROR_ILLEGAL_ADDRESS, 0);
    cr_expect_eq(mlajit_decode(c.plan, &c.args, NULL), MLAJIT_ERR_CUDA);
    cr_expect(strstr(mlajit_last_error(), "cuLaunchKernel") && strstr(mlajit_last_error(), "illegal memory access"),
              "%s", mlajit_last_error());
    cr_expect_eq(fake_cuda_counts_get().context_depth, 0);
    fake_cuda_fail("cuLaunchKernelEx", 0, 0);
    fake_cuda_fail("cuLaunchKernel", 0, 0);
    cr_assert_eq(mlajit_decode(c.plan, &c.args, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect(fake_cuda_launch_at(0)->programmatic, "the context still launches programmatic dependents");
    split_call_close(&c);
}
#endif

Test(launch, a_failed_combine_launch_is_reported)
{
    split_call c = split_call_open();
    fake_cuda_fail(HAS_CUDA12_ENTRIES ? "cuLaunchKernelEx" : "cuLaunchKernel", FAKE_CUDA_ERROR_ILLEGAL_ADDRESS, 1);
    fake_cuda_fail("cuLaunchKernel", FAKE_CUDA_ERROR_ILLEGAL_ADDRESS, HAS_CUDA12_ENTRIES ? 0 : 1);
    cr_expect_eq(mlajit_decode(c.plan, &c.args, NULL), MLAJIT_ERR_CUDA);
    cr_expect_eq(fake_cuda_counts_get().launches, 1, "the main kernel was launched, the combine was not");
    cr_expect(strstr(mlajit_last_error(), "700"), "%s", mlajit_last_error());
    split_call_close(&c);
}

/* The caller's current context is kept: pushed over and popped back when it is
 * another, left alone when it is the device's primary one. */
Test(launch, the_callers_context_is_kept)
{
    mlajit_context *ctx = open_context(0);
    mlajit_plan *plan = v32_plan(ctx, 128, 64, 2048);
    mlajit_decode_args a = v32_args(plan);
    static int callers;
    CUcontext mine = (CUcontext)(void *)&callers, cur = NULL;
    cr_assert_eq(ctx->drv->cuCtxPushCurrent(mine), 0);
    cr_assert_eq(mlajit_decode(plan, &a, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    ctx->drv->cuCtxGetCurrent(&cur);
    cr_expect_eq(cur, mine);
    cr_expect_eq(fake_cuda_counts_get().context_depth, 1);
    ctx->drv->cuCtxPopCurrent(&cur);
    cr_assert_eq(ctx->drv->cuCtxPushCurrent(ctx->primary), 0);
    cr_assert_eq(mlajit_decode(plan, &a, NULL), MLAJIT_OK, "%s", mlajit_last_error());
    cr_expect_eq(fake_cuda_counts_get().context_depth, 1);
    ctx->drv->cuCtxPopCurrent(&cur);
    cr_expect_eq(cur, ctx->primary);
    mlajit_plan_destroy(plan);
    mlajit_context_destroy(ctx);
    expect_all_released();
}

/* The host's share of an eager call: mlajit_decode with launches that cost the
 * fake driver a few stores, on a split plan (two launches) and an unsplit one.
 * Logged (the figure bench/NOTES.md quotes), and bound far above it, so a
 * compile, an allocation or a lock on the call path fails. */
Test(launch, a_decode_call_costs_the_host_microseconds)
{
    mlajit_context *ctx = open_context(0);
    static const struct { int heads, batch; const char *what; } plans[] = {
        {64, 1, "split plan, 2 launches"}, {128, 64, "unsplit plan, 1 launch"}};
    fake_cuda_set_param_bytes(0);
    for (size_t p = 0; p < sizeof plans / sizeof plans[0]; p++) {
        mlajit_plan *plan = v32_plan(ctx, plans[p].heads, plans[p].batch, 2048);
        mlajit_decode_args a = v32_args(plan);
        enum { kCalls = 20000 };
        struct timespec t0, t1;
        double best_us = 1e9;
        for (int round = 0; round < 5; round++) {
            fake_cuda_forget_launches();
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int i = 0; i < kCalls; i++)
                if (mlajit_decode(plan, &a, NULL) != MLAJIT_OK)
                    cr_assert_fail("%s", mlajit_last_error());
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-3) / kCalls;
            if (us < best_us)
                best_us = us;
        }
        fprintf(stderr, "host time per mlajit_decode call (fake driver, %s): %.3f us (best of 5 x %d)\n",
                plans[p].what, best_us, (int)kCalls);
        cr_expect_lt(best_us, 20.0, "%s: %.3f us per call", plans[p].what, best_us);
        mlajit_plan_destroy(plan);
    }
    mlajit_context_destroy(ctx);
}
