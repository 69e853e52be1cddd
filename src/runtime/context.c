/* The context: device discovery, the disk cache, and the kernel map that turns
 * a spec into loaded functions (process map -> disk cache -> NVRTC). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/error.h"
#include "runtime/nvrtc.h"
#include "runtime/runtime.h"

static void device_arch_name(int major, int minor, char *buf, size_t len)
{
    /* Arch-specific targets ("a") where the generator knows them: they are
     * supersets of the plain ones on the same chip. */
    snprintf(buf, len, "sm_%d%d%s", major, minor, (major == 9 || major == 10 || major == 12) ? "a" : "");
    if (!mlajit_arch_known(buf))
        snprintf(buf, len, "sm_%d%d", major, minor);
}

static int open_device(mlajit_context *ctx)
{
    int status = 0;
    const mlajit_driver *drv = mlajit_driver_get(&status);
    if (!drv)
        return status;
    int count = 0;
    CUresult r = drv->cuDeviceGetCount(&count);
    if (r != MLAJIT_CU_SUCCESS)
        return mlajit_cuda_fail(drv, r, "cuDeviceGetCount");
    if (ctx->device_ordinal < 0 || ctx->device_ordinal >= count)
        return mlajit_fail(MLAJIT_ERR_NO_DEVICE, "options.device = %d; this machine has %d CUDA device(s)",
                           ctx->device_ordinal, count);
    if ((r = drv->cuDeviceGet(&ctx->device, ctx->device_ordinal)) != MLAJIT_CU_SUCCESS)
        return mlajit_cuda_fail(drv, r, "cuDeviceGet");
    int major = 0, minor = 0;
    drv->cuDeviceGetAttribute(&major, MLAJIT_CU_ATTR_CC_MAJOR, ctx->device);
    drv->cuDeviceGetAttribute(&minor, MLAJIT_CU_ATTR_CC_MINOR, ctx->device);
    drv->cuDeviceGetAttribute(&ctx->sm_count, MLAJIT_CU_ATTR_MULTIPROCESSOR_COUNT, ctx->device);
    drv->cuDeviceGetAttribute(&ctx->max_smem_optin, MLAJIT_CU_ATTR_MAX_SMEM_OPTIN, ctx->device);
    drv->cuDeviceGetName(ctx->device_name, sizeof ctx->device_name, ctx->device);
    drv->cuDriverGetVersion(&ctx->driver_version);
    if ((r = drv->cuDevicePrimaryCtxRetain(&ctx->primary, ctx->device)) != MLAJIT_CU_SUCCESS)
        return mlajit_cuda_fail(drv, r, "cuDevicePrimaryCtxRetain");
    device_arch_name(major, minor, ctx->arch, sizeof ctx->arch);
    ctx->drv = drv;
    return MLAJIT_OK;
}

static void open_disk_cache(mlajit_context *ctx, const char *dir)
{
    char def[1024];
    if (!dir) {
        if (mlajit_cache_default_dir(def, sizeof def) != MLAJIT_OK) {
            mlajit_warn("no cache directory (set MLAJIT_CACHE_DIR or HOME); kernels stay in memory only");
            return;
        }
        dir = def;
    }
    snprintf(ctx->cache_dir, sizeof ctx->cache_dir, "%s", dir);
    if (mlajit_store_open(ctx->cache_dir, 0, &ctx->store) != MLAJIT_OK) {
        mlajit_warn("cache %s unusable (%s); kernels stay in memory only", ctx->cache_dir, mlajit_last_error());
        ctx->store = NULL;
        ctx->cache_dir[0] = '\0';
    }
}

int mlajit_context_create(const mlajit_context_options *opts, mlajit_context **out)
{
    mlajit_clear_error();
    if (!out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "out: NULL; pass the address of a mlajit_context *");
    *out = NULL;
    mlajit_context_options defaults = {0};
    if (!opts)
        opts = &defaults;
    if (opts->flags & ~(MLAJIT_CONTEXT_NO_DEVICE | MLAJIT_CONTEXT_NO_DISK_CACHE))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "options.flags = 0x%x has unknown bits; allowed MLAJIT_CONTEXT_NO_DEVICE | "
                           "MLAJIT_CONTEXT_NO_DISK_CACHE", opts->flags);
    if (opts->device < 0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "options.device = %d; allowed >= 0", opts->device);
    mlajit_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "context");
    ctx->device_ordinal = opts->device;
    ctx->flags = opts->flags;
    pthread_mutex_init(&ctx->lock, NULL);
    mlajit_nvrtc_version(&ctx->nvrtc_major, &ctx->nvrtc_minor);
    ctx->templates_hash = mlajit_templates_hash();
    strcpy(ctx->arch, "sm_90a");
    if (!(opts->flags & MLAJIT_CONTEXT_NO_DEVICE)) {
        int rc = open_device(ctx);
        if (rc != MLAJIT_OK && rc != MLAJIT_ERR_NO_DEVICE) {
            mlajit_context_destroy(ctx);
            return rc;
        }
    }
    if (!(opts->flags & MLAJIT_CONTEXT_NO_DISK_CACHE))
        open_disk_cache(ctx, opts->cache_dir);
    mlajit_clear_error();
    *out = ctx;
    return MLAJIT_OK;
}

static void kernel_free(const mlajit_driver *drv, mlajit_kernel *k)
{
    if (!k)
        return;
    if (drv && k->library)
        drv->cuLibraryUnload(k->library);
    if (drv && k->module)
        drv->cuModuleUnload(k->module);
    free(k->cubin);
    free(k);
}

void mlajit_context_destroy(mlajit_context *ctx)
{
    if (!ctx)
        return;
    int pushed = ctx->drv ? mlajit_context_enter(ctx) : 0;
    for (size_t i = 0; i < ctx->kernel_count; i++)
        kernel_free(ctx->drv, ctx->kernels[i]);
    mlajit_context_leave(ctx, pushed);
    free(ctx->kernels);
    if (ctx->drv && ctx->primary)
        ctx->drv->cuDevicePrimaryCtxRelease(ctx->device);
    mlajit_store_close(ctx->store);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

int mlajit_context_enter(mlajit_context *ctx)
{
    CUcontext cur = NULL;
    if (!ctx->drv)
        return 0;
    ctx->drv->cuCtxGetCurrent(&cur);
    if (cur == ctx->primary)
        return 0;
    return ctx->drv->cuCtxPushCurrent(ctx->primary) == MLAJIT_CU_SUCCESS;
}

void mlajit_context_leave(mlajit_context *ctx, int pushed)
{
    CUcontext popped;
    if (pushed)
        ctx->drv->cuCtxPopCurrent(&popped);
}

int mlajit_context_get_info(mlajit_context *ctx, mlajit_context_info *info)
{
    mlajit_clear_error();
    if (!ctx || !info)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "ctx or info: NULL");
    memset(info, 0, sizeof *info);
    info->has_device = ctx->drv != NULL;
    snprintf(info->device_name, sizeof info->device_name, "%s", ctx->drv ? ctx->device_name : "");
    snprintf(info->device_arch, sizeof info->device_arch, "%s", ctx->arch);
    info->sm_count = ctx->sm_count;
    info->driver_version = ctx->driver_version;
    info->nvrtc_major = ctx->nvrtc_major;
    info->nvrtc_minor = ctx->nvrtc_minor;
    snprintf(info->cache_dir, sizeof info->cache_dir, "%s", ctx->cache_dir);
    if (ctx->store) {
        mlajit_store_stats st;
        if (mlajit_store_stats_get(ctx->store, &st) == MLAJIT_OK) {
            info->cache_bytes = st.data_file_bytes;
            info->cache_entries = st.entries;
        }
    }
    return MLAJIT_OK;
}

/* ---- the kernel map -------------------------------------------------------- */

static mlajit_kernel *map_find(mlajit_context *ctx, const mlajit_cache_key *key)
{
    for (size_t i = 0; i < ctx->kernel_count; i++)
        if (ctx->kernels[i]->key.hi == key->hi && ctx->kernels[i]->key.lo == key->lo)
            return ctx->kernels[i];
    return NULL;
}

static int map_insert(mlajit_context *ctx, mlajit_kernel *k)
{
    if (ctx->kernel_count == ctx->kernel_cap) {
        size_t cap = ctx->kernel_cap ? ctx->kernel_cap * 2 : 16;
        mlajit_kernel **p = realloc(ctx->kernels, cap * sizeof *p);
        if (!p)
            return mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "kernel map");
        ctx->kernels = p;
        ctx->kernel_cap = cap;
    }
    ctx->kernels[ctx->kernel_count++] = k;
    return MLAJIT_OK;
}

/* A cubin for arch can run on the device when it is the device's own target, or
 * a plain (non-"a") target of the same major and no higher minor. */
static int arch_runs_on_device(const char *arch, const char *device_arch)
{
    if (strcmp(arch, device_arch) == 0)
        return 1;
    size_t n = strlen(arch);
    if (n < 5 || arch[n - 1] == 'a')
        return 0;
    int a = atoi(arch + 3), d = atoi(device_arch + 3);
    return a / 10 == d / 10 && a <= d;
}

static int kernel_load(mlajit_context *ctx, mlajit_kernel *k)
{
    const mlajit_driver *drv = ctx->drv;
    CUresult r;
    int pushed = mlajit_context_enter(ctx);
    int rc = MLAJIT_OK;
    if (drv->cuLibraryLoadData) {
        CUkernel km, kc;
        if ((r = drv->cuLibraryLoadData(&k->library, k->cubin, NULL, NULL, 0, NULL, NULL, 0)) != MLAJIT_CU_SUCCESS)
            rc = mlajit_cuda_fail(drv, r, "cuLibraryLoadData");
        else if ((r = drv->cuLibraryGetKernel(&km, k->library, MLAJIT_ENTRY_MAIN)) != MLAJIT_CU_SUCCESS ||
                 (r = drv->cuLibraryGetKernel(&kc, k->library, MLAJIT_ENTRY_COMBINE)) != MLAJIT_CU_SUCCESS)
            rc = mlajit_cuda_fail(drv, r, "cuLibraryGetKernel");
        else if ((r = drv->cuKernelGetFunction(&k->main_fn, km)) != MLAJIT_CU_SUCCESS ||
                 (r = drv->cuKernelGetFunction(&k->combine_fn, kc)) != MLAJIT_CU_SUCCESS)
            rc = mlajit_cuda_fail(drv, r, "cuKernelGetFunction");
    } else {
        if ((r = drv->cuModuleLoadData(&k->module, k->cubin)) != MLAJIT_CU_SUCCESS)
            rc = mlajit_cuda_fail(drv, r, "cuModuleLoadData");
        else if ((r = drv->cuModuleGetFunction(&k->main_fn, k->module, MLAJIT_ENTRY_MAIN)) != MLAJIT_CU_SUCCESS ||
                 (r = drv->cuModuleGetFunction(&k->combine_fn, k->module, MLAJIT_ENTRY_COMBINE)) !=
                     MLAJIT_CU_SUCCESS)
            rc = mlajit_cuda_fail(drv, r, "cuModuleGetFunction");
    }
    /* Set once per function: the dynamic shared memory the launch will ask for. */
    if (rc == MLAJIT_OK &&
        (r = drv->cuFuncSetAttribute(k->main_fn, MLAJIT_CU_FUNC_ATTR_MAX_DYNAMIC_SMEM, k->layout.smem_bytes)) !=
            MLAJIT_CU_SUCCESS)
        rc = mlajit_cuda_fail(drv, r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    if (rc == MLAJIT_OK) {
        int regs = 0;
        if (drv->cuFuncGetAttribute(&regs, MLAJIT_CU_FUNC_ATTR_NUM_REGS, k->main_fn) == MLAJIT_CU_SUCCESS &&
            k->report.registers < 0)
            k->report.registers = regs;
        k->loaded = 1;
        k->report.loaded = 1;
    }
    mlajit_context_leave(ctx, pushed);
    return rc;
}

/* Build a kernel record from the disk cache or NVRTC (no lock held). */
static int kernel_build(mlajit_context *ctx, const mlajit_kernel_spec *r, const mlajit_cache_key *key,
                        const char *spec_string, mlajit_kernel **out)
{
    mlajit_kernel *k = calloc(1, sizeof *k);
    if (!k)
        return mlajit_fail(MLAJIT_ERR_OUT_OF_MEMORY, "kernel record");
    k->key = *key;
    k->spec = *r;
    mlajit_codegen_layout(r, &k->layout);
    snprintf(k->report.spec, sizeof k->report.spec, "%s", spec_string);
    mlajit_cache_key_hex(key, k->report.key);

    double t0 = mlajit_now_ms();
    if (ctx->store) {
        mlajit_cache_entry e;
        int rc = mlajit_store_get(ctx->store, key, &e);
        if (rc == MLAJIT_OK) {
            k->cubin = e.cubin;
            k->cubin_size = e.cubin_size;
            k->report.cache_hit = 1;
            k->report.compile_ms = e.compile_ms;
            k->report.registers = e.registers;
            k->report.shared_bytes = e.shared_bytes;
            k->report.spill_bytes = e.spill_bytes;
            k->report.cubin_bytes = e.cubin_size;
            k->report.lookup_ms = mlajit_now_ms() - t0;
            e.cubin = NULL;
            mlajit_cache_entry_clear(&e);
            *out = k;
            return MLAJIT_OK;
        }
        if (rc == MLAJIT_ERR_CORRUPT)
            mlajit_warn("cache entry %s for %s is corrupt (%s); recompiling", k->report.key, spec_string,
                        mlajit_last_error());
    }
    k->report.lookup_ms = mlajit_now_ms() - t0;

    char *source = NULL;
    double g0 = mlajit_now_ms();
    int rc = mlajit_generate_source(r, &source);
    k->report.generate_ms = mlajit_now_ms() - g0;
    if (rc) {
        free(k);
        return rc;
    }
    mlajit_compiled c;
    rc = mlajit_nvrtc_compile(source, spec_string, r->arch, &c);
    free(source);
    if (rc) {
        free(k);
        return rc;
    }
    k->cubin = c.cubin;
    k->cubin_size = c.cubin_size;
    c.cubin = NULL;
    k->report.compile_ms = c.compile_ms;
    k->report.registers = c.registers;
    k->report.shared_bytes = c.shared_bytes + k->layout.smem_bytes;
    k->report.spill_bytes = c.spill_bytes;
    k->report.cubin_bytes = c.cubin_size;
    mlajit_compiled_free(&c);
    if (getenv("MLAJIT_LOG") && strcmp(getenv("MLAJIT_LOG"), "info") == 0)
        fprintf(stderr, "mlajit: compiled %s in %.0f ms\n", spec_string, k->report.compile_ms);
    if (ctx->store) {
        mlajit_cache_entry e;
        memset(&e, 0, sizeof e);
        snprintf(e.spec_string, sizeof e.spec_string, "%s", spec_string);
        snprintf(e.entry_names, sizeof e.entry_names, "%s,%s", MLAJIT_ENTRY_MAIN, MLAJIT_ENTRY_COMBINE);
        e.compile_ms = k->report.compile_ms;
        e.registers = k->report.registers;
        e.shared_bytes = k->report.shared_bytes;
        e.spill_bytes = k->report.spill_bytes;
        e.created_unix = (uint64_t)time(NULL);
        e.cubin = k->cubin;
        e.cubin_size = k->cubin_size;
        /* A cache that cannot be written never fails the call. */
        if (mlajit_store_put(ctx->store, key, &e) != MLAJIT_OK)
            mlajit_warn("could not store %s in %s: %s", spec_string, ctx->cache_dir, mlajit_last_error());
    }
    *out = k;
    return MLAJIT_OK;
}

int mlajit_kernel_acquire(mlajit_context *ctx, const mlajit_kernel_spec *spec, int load, const mlajit_kernel **out,
                          mlajit_kernel_report *report)
{
    double t0 = mlajit_now_ms();
    mlajit_kernel_spec with_arch = *spec, r;
    if (!with_arch.arch[0])
        snprintf(with_arch.arch, sizeof with_arch.arch, "%s", ctx->arch);
    int rc = mlajit_spec_resolve(&with_arch, &r);
    if (rc)
        return rc;
    if (load && !ctx->drv)
        return mlajit_fail(MLAJIT_ERR_NO_DEVICE, "no GPU to load %s on: %s", r.arch,
                           (ctx->flags & MLAJIT_CONTEXT_NO_DEVICE) ? "the context was made with MLAJIT_CONTEXT_NO_DEVICE"
                                                                   : "no CUDA driver or device was found");
    if (load && !arch_runs_on_device(r.arch, ctx->arch))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec.arch = %s cannot run on this %s device; use \"\" or %s",
                           r.arch, ctx->arch, ctx->arch);
    char spec_string[128], options[256];
    if ((rc = mlajit_spec_string(&r, spec_string, sizeof spec_string)))
        return rc;
    mlajit_nvrtc_options_string(r.arch, options, sizeof options);
    mlajit_key_inputs in = {
        .generator_version = MLAJIT_GENERATOR_VERSION, .templates_hash = ctx->templates_hash,
        .spec_string = spec_string, .arch = r.arch,
        .nvrtc_major = ctx->nvrtc_major, .nvrtc_minor = ctx->nvrtc_minor, .compile_options = options,
    };
    mlajit_cache_key key = mlajit_cache_key_make(&in);

    pthread_mutex_lock(&ctx->lock);
    mlajit_kernel *k = map_find(ctx, &key);
    pthread_mutex_unlock(&ctx->lock);
    int from_map = k != NULL;
    if (!k) {
        mlajit_kernel *built = NULL;
        if ((rc = kernel_build(ctx, &r, &key, spec_string, &built)))
            return rc;
        pthread_mutex_lock(&ctx->lock);
        k = map_find(ctx, &key); /* another thread may have won the race */
        if (!k && (rc = map_insert(ctx, built)) == MLAJIT_OK)
            k = built;
        pthread_mutex_unlock(&ctx->lock);
        if (rc) {
            kernel_free(NULL, built);
            return rc;
        }
        if (k != built)
            kernel_free(NULL, built);
    }
    if (load) {
        pthread_mutex_lock(&ctx->lock); /* loads are rare: serialize them */
        if (!k->loaded)
            rc = kernel_load(ctx, k);
        pthread_mutex_unlock(&ctx->lock);
        if (rc)
            return rc;
    }
    if (report) {
        *report = k->report;
        if (from_map) {
            report->cache_hit = 1;
            report->generate_ms = 0;
        }
        report->loaded = k->loaded;
        report->lookup_ms = mlajit_now_ms() - t0;
    }
    *out = k;
    return MLAJIT_OK;
}

int mlajit_kernel_prepare(mlajit_context *ctx, const mlajit_kernel_spec *spec, mlajit_kernel_report *report)
{
    mlajit_clear_error();
    if (!ctx || !spec)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "ctx or spec: NULL");
    int rc = mlajit_spec_validate(spec);
    if (rc)
        return rc;
    const mlajit_kernel *k;
    mlajit_kernel_spec s = *spec;
    if (!s.arch[0])
        snprintf(s.arch, sizeof s.arch, "%s", ctx->arch);
    int load = ctx->drv && arch_runs_on_device(s.arch, ctx->arch);
    return mlajit_kernel_acquire(ctx, &s, load, &k, report);
}
