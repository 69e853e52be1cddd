/* The context: device discovery, the packs, the disk cache, and the kernel map
 * that turns a spec into loaded functions (the context's map -> packs -> disk
 * cache -> NVRTC). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/abi.h"
#include "common/alloc.h"
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
    if (count == 0)
        return mlajit_fail(MLAJIT_ERR_NO_DEVICE, "the CUDA driver reports no device");
    /* A machine with GPUs and an ordinal past them is the caller's mistake, not a
     * machine without a GPU: an error, not a context that cannot launch. */
    if (ctx->device_ordinal >= count)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "options.device = %d; this machine has %d CUDA device%s: "
                           "allowed 0..%d", ctx->device_ordinal, count, count == 1 ? "" : "s", count - 1);
    if ((r = drv->cuDeviceGet(&ctx->device, ctx->device_ordinal)) != MLAJIT_CU_SUCCESS)
        return mlajit_cuda_fail(drv, r, "cuDeviceGet");
    int major = 0, minor = 0;
    drv->cuDeviceGetAttribute(&major, MLAJIT_CU_ATTR_CC_MAJOR, ctx->device);
    drv->cuDeviceGetAttribute(&minor, MLAJIT_CU_ATTR_CC_MINOR, ctx->device);
    drv->cuDeviceGetAttribute(&ctx->sm_count, MLAJIT_CU_ATTR_MULTIPROCESSOR_COUNT, ctx->device);
    drv->cuDeviceGetAttribute(&ctx->l2_bytes, MLAJIT_CU_ATTR_L2_CACHE_SIZE, ctx->device);
    drv->cuDeviceGetAttribute(&ctx->max_smem_optin, MLAJIT_CU_ATTR_MAX_SMEM_OPTIN, ctx->device);
    drv->cuDeviceGetName(ctx->device_name, sizeof ctx->device_name, ctx->device);
    int clock_khz = 0;
    if (drv->cuDeviceGetAttribute(&clock_khz, MLAJIT_CU_ATTR_CLOCK_RATE, ctx->device) != MLAJIT_CU_SUCCESS)
        clock_khz = 0; /* unknown: the clocks class is 0 */
    mlajit_context_gpu_set(ctx, clock_khz);
    drv->cuDriverGetVersion(&ctx->driver_version);
    if ((r = drv->cuDevicePrimaryCtxRetain(&ctx->primary, ctx->device)) != MLAJIT_CU_SUCCESS)
        return mlajit_cuda_fail(drv, r, "cuDevicePrimaryCtxRetain");
    device_arch_name(major, minor, ctx->arch, sizeof ctx->arch);
    ctx->drv = drv;
    return MLAJIT_OK;
}

/* ---- packs ----------------------------------------------------------------- */

/* 1 when one of the pack's archs runs on a device of device_arch. */
static int pack_serves_arch(const mlajit_pack *pack, const char *device_arch)
{
    char archs[sizeof mlajit_pack_manifest_of(pack)->archs];
    snprintf(archs, sizeof archs, "%s", mlajit_pack_manifest_of(pack)->archs);
    for (char *save = NULL, *a = strtok_r(archs, ",", &save); a; a = strtok_r(NULL, ",", &save))
        if (mlajit_arch_runs_on(a, device_arch))
            return 1;
    return 0;
}

typedef struct gpu_count {
    const mlajit_gpu_identity *gpu;
    size_t count;
} gpu_count;

static int count_gpu_visit(const uint8_t *key, size_t key_len, const mlajit_tactic_record *record, int status,
                           const char *why, void *arg)
{
    (void)key, (void)key_len, (void)status, (void)why;
    gpu_count *c = arg;
    c->count += record && mlajit_gpu_identity_equal(&record->gpu, c->gpu);
    return 0;
}

/* The pack's tactic records measured on this context's GPU; a pack whose
 * tactics are all another GPU's says so once (its kernels still serve). */
static size_t pack_tactics_for_this_gpu(mlajit_context *ctx, mlajit_pack *pack)
{
    const mlajit_pack_manifest *m = mlajit_pack_manifest_of(pack);
    if (!m->tactic_count || !ctx->drv)
        return 0;
    gpu_count c = {.gpu = &ctx->gpu};
    if (mlajit_pack_tactic_foreach(pack, count_gpu_visit, &c) != MLAJIT_OK)
        return 0; /* a look-up meets the damage and warns */
    if (!c.count) {
        char gpu[200];
        mlajit_gpu_identity_describe(&ctx->gpu, gpu, sizeof gpu);
        mlajit_warn("pack %s: its %zu tactic records were measured on other GPUs than this one (%s), so plans here "
                    "use the default rules (tune on this GPU to measure its own)", mlajit_pack_path(pack),
                    m->tactic_count, gpu);
    }
    return c.count;
}

/* Open one pack and decide whether this context can use it; a pack that
 * cannot serve it is a warning, never an error. MLAJIT_OK when it was added. */
int mlajit_context_attach_pack(mlajit_context *ctx, const char *path)
{
    double t0 = mlajit_now_ms();
    mlajit_pack *pack = NULL;
    int rc = mlajit_pack_open(path, &pack);
    if (rc == MLAJIT_ERR_OUT_OF_MEMORY) /* the machine's state, not the pack's: fail, do not skip it */
        return rc;
    if (rc != MLAJIT_OK) {
        if (rc == MLAJIT_ERR_CORRUPT)
            atomic_fetch_add(&ctx->corrupt, 1);
        mlajit_warn("pack skipped: %s", mlajit_last_error());
        return rc;
    }
    const mlajit_pack_manifest *m = mlajit_pack_manifest_of(pack);
    if (strcmp(m->key_recipe, MLAJIT_KEY_RECIPE) != 0) {
        /* Its keys were made by another recipe, so none can match: say why. */
        mlajit_warn("pack %s skipped: it was built by %s with key recipe %s; this is mlajit %s with key recipe %s; "
                    "rebuild it with this mlajit",
                    path, m->tool, m->key_recipe, MLAJIT_VERSION_STRING, MLAJIT_KEY_RECIPE);
        mlajit_pack_close(pack);
        return MLAJIT_ERR_UNSUPPORTED;
    }
    if (!pack_serves_arch(pack, ctx->arch)) {
        mlajit_warn("pack %s skipped: it holds kernels for %s; this context targets %s (a pack built for %s "
                    "serves it)",
                    path, m->archs, ctx->arch, ctx->arch);
        mlajit_pack_close(pack);
        return MLAJIT_ERR_UNSUPPORTED;
    }
    mlajit_pack **grown = mlajit_realloc(ctx->packs, (size_t)(ctx->pack_count + 1) * sizeof *grown);
    if (!grown) {
        mlajit_pack_close(pack);
        return mlajit_fail_oom("the context's pack list");
    }
    ctx->packs = grown;
    ctx->packs[ctx->pack_count++] = pack;
    size_t ours = pack_tactics_for_this_gpu(ctx, pack);
    mlajit_info("pack %s: %zu kernels for %s, %zu tactic records (%zu for this GPU), %lld bytes, opened and checked "
                "in %.2f ms", path, m->kernel_count, m->archs, m->tactic_count, ours,
                (long long)mlajit_pack_file_bytes(pack), mlajit_now_ms() - t0);
    return MLAJIT_OK;
}

/* A pack that cannot serve the context is skipped with a warning; running out
 * of memory fails the context (MLAJIT_ERR_OUT_OF_MEMORY), as it would any call. */
static int open_packs(mlajit_context *ctx, const char *list)
{
    if (!list)
        list = getenv("MLAJIT_PACKS");
    if (!list || !list[0])
        return MLAJIT_OK;
    char *copy = mlajit_strdup(list);
    if (!copy)
        return mlajit_fail_oom("the pack list");
    int rc = MLAJIT_OK;
    for (char *save = NULL, *path = strtok_r(copy, ":", &save); path && rc != MLAJIT_ERR_OUT_OF_MEMORY;
         path = strtok_r(NULL, ":", &save))
        rc = mlajit_context_attach_pack(ctx, path);
    free(copy);
    return rc == MLAJIT_ERR_OUT_OF_MEMORY ? rc : MLAJIT_OK;
}

/* ---- the disk cache ----------------------------------------------------- */

/* Open the writable cache; when it cannot be written, read it if that works.
 * Either way at most one warning, and the context comes up, unless memory ran
 * out (MLAJIT_ERR_OUT_OF_MEMORY). */
static int open_disk_cache(mlajit_context *ctx, const char *dir)
{
    const char *packs_and = ctx->pack_count ? "the packs and " : "";
    char def[sizeof ctx->cache_dir];
    if (!dir) {
        if (mlajit_cache_default_dir(def, sizeof def) != MLAJIT_OK) {
            mlajit_warn("no cache directory: %s; using %sin-memory compiles", mlajit_last_error(), packs_and);
            return MLAJIT_OK;
        }
        dir = def;
    }
    if (strlen(dir) >= sizeof ctx->cache_dir) {
        mlajit_warn("cache directory \"%.48s...\" is %zu characters; mlajit takes at most %zu "
                    "(mlajit_context_info.cache_dir holds %zu bytes); using %sin-memory compiles",
                    dir, strlen(dir), sizeof ctx->cache_dir - 1, sizeof ctx->cache_dir, packs_and);
        return MLAJIT_OK;
    }
    snprintf(ctx->cache_dir, sizeof ctx->cache_dir, "%s", dir);
    int rc = mlajit_store_open(ctx->cache_dir, 0, &ctx->store);
    if (rc == MLAJIT_OK) {
        ctx->store_writable = 1;
        return MLAJIT_OK;
    }
    if (rc == MLAJIT_ERR_OUT_OF_MEMORY)
        return rc;
    char why[512];
    snprintf(why, sizeof why, "%s", mlajit_last_error());
    ctx->store = NULL;
    struct stat st;
    char data_path[sizeof ctx->cache_dir + 16];
    snprintf(data_path, sizeof data_path, "%s/data.mdb", ctx->cache_dir);
    /* A read-only store reads with checks alone: no lock file, nothing written. */
    if (stat(data_path, &st) == 0 && (rc = mlajit_store_open(ctx->cache_dir, 1, &ctx->store)) == MLAJIT_OK) {
        mlajit_warn("cache %s cannot be written (%s); reading it, and new kernels stay in memory", ctx->cache_dir,
                    why);
        return MLAJIT_OK;
    }
    ctx->store = NULL;
    if (rc == MLAJIT_ERR_OUT_OF_MEMORY)
        return rc;
    mlajit_warn("cache %s unusable (%s); using %sin-memory compiles", ctx->cache_dir, why, packs_and);
    ctx->cache_dir[0] = '\0';
    return MLAJIT_OK;
}

static int env_flag_set(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0;
}

int mlajit_context_create(const mlajit_context_options *opts, mlajit_context **out)
{
    mlajit_clear_error();
    if (!out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "out: NULL; pass the address of a mlajit_context *");
    *out = NULL;
    mlajit_context_options defaults = MLAJIT_CONTEXT_OPTIONS_INIT, local;
    if (!opts)
        opts = &defaults;
    else if (!(opts = mlajit_abi_in(MLAJIT_ABI_CONTEXT_OPTIONS, "options", opts, &local)))
        return MLAJIT_ERR_INVALID_ARGUMENT;
    const unsigned known = MLAJIT_CONTEXT_NO_DEVICE | MLAJIT_CONTEXT_NO_DISK_CACHE | MLAJIT_CONTEXT_NO_JIT;
    if (opts->flags & ~known)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "options.flags = 0x%x has unknown bits; allowed MLAJIT_CONTEXT_NO_DEVICE | "
                           "MLAJIT_CONTEXT_NO_DISK_CACHE | MLAJIT_CONTEXT_NO_JIT", opts->flags);
    if (opts->device < 0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "options.device = %d; allowed >= 0", opts->device);
    mlajit_context *ctx = mlajit_calloc(1, sizeof *ctx);
    if (!ctx)
        return mlajit_fail_oom("the context");
    ctx->device_ordinal = opts->device;
    ctx->flags = opts->flags;
    pthread_mutex_init(&ctx->lock, NULL);
    pthread_mutex_init(&ctx->counters_lock, NULL);
    pthread_rwlock_init(&ctx->map_lock, NULL);
    mlajit_nvrtc_version(&ctx->nvrtc_major, &ctx->nvrtc_minor);
    ctx->jit_disabled = (opts->flags & MLAJIT_CONTEXT_NO_JIT) || env_flag_set("MLAJIT_DISABLE_JIT");
    const char *tactics = getenv("MLAJIT_TACTICS"); /* "0": plans take the rules, not tactics */
    atomic_init(&ctx->tactics_off, tactics && strcmp(tactics, "0") == 0);
    strcpy(ctx->arch, MLAJIT_DEFAULT_ARCH); /* the target without a device */
    if (!(opts->flags & MLAJIT_CONTEXT_NO_DEVICE)) {
        int rc = open_device(ctx);
        if (rc != MLAJIT_OK && rc != MLAJIT_ERR_NO_DEVICE) {
            mlajit_context_destroy(ctx);
            return rc;
        }
        if (rc == MLAJIT_ERR_NO_DEVICE) /* kept for the errors of later calls that need the GPU */
            snprintf(ctx->no_device_reason, sizeof ctx->no_device_reason, "%s", mlajit_last_error());
    } else {
        snprintf(ctx->no_device_reason, sizeof ctx->no_device_reason, "the context was made with MLAJIT_CONTEXT_NO_DEVICE");
    }
    int rc = open_packs(ctx, opts->packs);
    if (rc == MLAJIT_OK && !(opts->flags & MLAJIT_CONTEXT_NO_DISK_CACHE))
        rc = open_disk_cache(ctx, opts->cache_dir);
    if (rc) {
        mlajit_context_destroy(ctx);
        return mlajit_fail_prefix(rc, "context: ");
    }
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

/* ---- counters: recorded only in writes made anyway, or when asked ----------- */

/* The counts not yet recorded in the cache, marked recorded (the caller puts
 * them back with counters_unrecord when its write fails). Under counters_lock
 * so two writers never record the same counts. 0 when there is nothing. */
static int counters_take(mlajit_context *ctx, mlajit_store_counters *delta)
{
    mlajit_store_counters now = {
        .memory_hits = atomic_load(&ctx->memory_hits), .pack_hits = atomic_load(&ctx->pack_hits),
        .disk_hits = atomic_load(&ctx->disk_hits),     .compiles = atomic_load(&ctx->compiles),
        .compile_us = atomic_load(&ctx->compile_us),   .corrupt = atomic_load(&ctx->corrupt),
        .jit_refusals = atomic_load(&ctx->jit_refusals), .contexts = 1,
    };
    pthread_mutex_lock(&ctx->counters_lock);
    const mlajit_store_counters *was = &ctx->recorded;
    delta->memory_hits = now.memory_hits - was->memory_hits;
    delta->pack_hits = now.pack_hits - was->pack_hits;
    delta->disk_hits = now.disk_hits - was->disk_hits;
    delta->compiles = now.compiles - was->compiles;
    delta->compile_us = now.compile_us - was->compile_us;
    delta->corrupt = now.corrupt - was->corrupt;
    delta->jit_refusals = now.jit_refusals - was->jit_refusals;
    delta->contexts = now.contexts - was->contexts; /* 1 the first time this context records */
    ctx->recorded = now;
    pthread_mutex_unlock(&ctx->counters_lock);
    return delta->memory_hits + delta->pack_hits + delta->disk_hits + delta->compiles + delta->corrupt +
               delta->jit_refusals != 0;
}

static void counters_unrecord(mlajit_context *ctx, const mlajit_store_counters *delta)
{
    pthread_mutex_lock(&ctx->counters_lock);
    mlajit_store_counters *r = &ctx->recorded;
    r->memory_hits -= delta->memory_hits;
    r->pack_hits -= delta->pack_hits;
    r->disk_hits -= delta->disk_hits;
    r->compiles -= delta->compiles;
    r->compile_us -= delta->compile_us;
    r->corrupt -= delta->corrupt;
    r->jit_refusals -= delta->jit_refusals;
    r->contexts -= delta->contexts;
    pthread_mutex_unlock(&ctx->counters_lock);
}

int mlajit_context_flush_counters(mlajit_context *ctx)
{
    mlajit_clear_error();
    if (!ctx)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
    if (!ctx->store || !ctx->store_writable)
        return mlajit_fail(MLAJIT_ERR_CACHE, "no writable disk cache to record the counters in (%s)",
                           ctx->cache_dir[0] ? ctx->cache_dir : "the cache is off");
    mlajit_store_counters delta;
    if (!counters_take(ctx, &delta))
        return MLAJIT_OK;
    int rc = mlajit_store_counters_add(ctx->store, &delta);
    if (rc != MLAJIT_OK)
        counters_unrecord(ctx, &delta);
    return rc;
}

void mlajit_context_destroy(mlajit_context *ctx)
{
    if (!ctx)
        return;
    /* Nothing is written here: a process that only read leaves the cache as it
     * found it (its counts went with the writes it made, if any). */
    int pushed = ctx->drv ? mlajit_context_enter(ctx) : 0;
    for (size_t i = 0; i < ctx->map_cap; i++)
        kernel_free(ctx->drv, ctx->map_slots[i]);
    mlajit_context_leave(ctx, pushed);
    free(ctx->map_slots);
    free(ctx->memo_slots);
    mlajit_tactic_memo_free(ctx);
    if (ctx->drv && ctx->primary)
        ctx->drv->cuDevicePrimaryCtxRelease(ctx->device);
    mlajit_store_close(ctx->store);
    for (int i = 0; i < ctx->pack_count; i++)
        mlajit_pack_close(ctx->packs[i]);
    free(ctx->packs);
    pthread_rwlock_destroy(&ctx->map_lock);
    pthread_mutex_destroy(&ctx->counters_lock);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

const mlajit_driver *mlajit_context_driver(const mlajit_context *ctx) { return ctx ? ctx->drv : NULL; }

const char *mlajit_context_arch(const mlajit_context *ctx) { return ctx ? ctx->arch : ""; }

const mlajit_pack *mlajit_context_pack(const mlajit_context *ctx, int i)
{
    return ctx && i >= 0 && i < ctx->pack_count ? ctx->packs[i] : NULL;
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

/* The cache's size and entry count for get_info: a walk of every entry (about
 * 10 ms on a 1 GB cache), remembered with the data file's settled stamp, so
 * asking again (an engine's counter checks, Python's capture check) costs one
 * stat until the file changes. A failed walk is not remembered. */
static int cache_counts(mlajit_context *ctx, int64_t *bytes, int64_t *entries)
{
    mlajit_store_stamp now;
    mlajit_store_file_stamp(ctx->store, &now);
    pthread_mutex_lock(&ctx->lock);
    int known = ctx->stats_memo_valid && mlajit_store_stamp_equal(&now, &ctx->stats_memo_stamp);
    if (known) {
        *bytes = ctx->stats_memo_bytes;
        *entries = ctx->stats_memo_entries;
    }
    pthread_mutex_unlock(&ctx->lock);
    if (known)
        return MLAJIT_OK;
    mlajit_store_stats st;
    int rc = mlajit_store_stats_get(ctx->store, &st);
    if (rc)
        return rc;
    *bytes = st.data_file_bytes;
    *entries = st.entries;
    if (now.ino && mlajit_store_stamp_settled(&now)) {
        pthread_mutex_lock(&ctx->lock);
        ctx->stats_memo_valid = 1;
        ctx->stats_memo_stamp = now;
        ctx->stats_memo_bytes = *bytes;
        ctx->stats_memo_entries = *entries;
        pthread_mutex_unlock(&ctx->lock);
    }
    return MLAJIT_OK;
}

int mlajit_context_get_info(mlajit_context *ctx, mlajit_context_info *caller_info)
{
    mlajit_clear_error();
    if (!ctx)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "ctx: NULL");
    int rc = mlajit_abi_check(MLAJIT_ABI_CONTEXT_INFO, "info", caller_info);
    if (rc)
        return rc;
    mlajit_context_info whole = MLAJIT_CONTEXT_INFO_INIT, *info = &whole;
    info->has_device = ctx->drv != NULL;
    snprintf(info->device_name, sizeof info->device_name, "%s", ctx->drv ? ctx->device_name : "");
    snprintf(info->device_arch, sizeof info->device_arch, "%s", ctx->arch);
    info->sm_count = ctx->sm_count;
    info->l2_bytes = ctx->l2_bytes;
    snprintf(info->no_device_reason, sizeof info->no_device_reason, "%s", ctx->drv ? "" : ctx->no_device_reason);
    info->driver_version = ctx->driver_version;
    info->nvrtc_major = ctx->nvrtc_major;
    info->nvrtc_minor = ctx->nvrtc_minor;
    snprintf(info->cache_dir, sizeof info->cache_dir, "%s", ctx->cache_dir);
    if (ctx->store) {
        int64_t bytes, entries;
        /* a cache that cannot be read now reads as empty; no memory fails the call */
        if ((rc = cache_counts(ctx, &bytes, &entries)) == MLAJIT_OK) {
            info->cache_bytes = bytes;
            info->cache_entries = entries;
        } else if (rc == MLAJIT_ERR_OUT_OF_MEMORY) {
            return rc;
        }
    }
    info->cache_writable = ctx->store != NULL && ctx->store_writable;
    info->pack_count = ctx->pack_count;
    info->jit_disabled = ctx->jit_disabled;
    info->memory_hits = (int64_t)atomic_load(&ctx->memory_hits);
    info->pack_hits = (int64_t)atomic_load(&ctx->pack_hits);
    info->disk_hits = (int64_t)atomic_load(&ctx->disk_hits);
    info->compiles = (int64_t)atomic_load(&ctx->compiles);
    info->corrupt = (int64_t)atomic_load(&ctx->corrupt);
    info->stale = (int64_t)atomic_load(&ctx->stale);
    info->jit_refusals = (int64_t)atomic_load(&ctx->jit_refusals);
    info->compile_ms = (double)atomic_load(&ctx->compile_us) / 1000.0;
    mlajit_abi_out(MLAJIT_ABI_CONTEXT_INFO, caller_info, info);
    mlajit_clear_error();
    return MLAJIT_OK;
}

/* ---- the kernel map -------------------------------------------------------- */

/* Keys are XXH3-128 digests, so their low bits are already uniform. */
static size_t map_home(const mlajit_cache_key *key, size_t cap) { return (size_t)key->lo & (cap - 1); }

/* Caller holds map_lock (read or write). */
static mlajit_kernel *map_find(const mlajit_context *ctx, const mlajit_cache_key *key)
{
    if (!ctx->map_cap)
        return NULL;
    for (size_t i = map_home(key, ctx->map_cap);; i = (i + 1) & (ctx->map_cap - 1)) {
        mlajit_kernel *k = ctx->map_slots[i];
        if (!k)
            return NULL;
        if (k->key.hi == key->hi && k->key.lo == key->lo)
            return k;
    }
}

static void map_place(mlajit_kernel **slots, size_t cap, mlajit_kernel *k)
{
    size_t i = map_home(&k->key, cap);
    while (slots[i])
        i = (i + 1) & (cap - 1);
    slots[i] = k;
}

/* Caller holds map_lock for writing; k's key is not in the map. Kept at most
 * half full so probes stay short. */
static int map_insert(mlajit_context *ctx, mlajit_kernel *k)
{
    if (2 * (ctx->map_count + 1) > ctx->map_cap) {
        size_t cap = ctx->map_cap ? ctx->map_cap * 2 : 64;
        mlajit_kernel **slots = mlajit_calloc(cap, sizeof *slots);
        if (!slots)
            return mlajit_fail_oom("the kernel map");
        for (size_t i = 0; i < ctx->map_cap; i++)
            if (ctx->map_slots[i])
                map_place(slots, cap, ctx->map_slots[i]);
        free(ctx->map_slots);
        ctx->map_slots = slots;
        ctx->map_cap = cap;
    }
    map_place(ctx->map_slots, ctx->map_cap, k);
    ctx->map_count++;
    return MLAJIT_OK;
}

/* ---- the spec memo: the spec as asked -> its kernel ------------------------- */

/* Every field a spec is looked up by, with no padding and a zero-filled arch,
 * so equal specs have equal bytes. */
typedef struct spec_bytes {
    int32_t model, h_q, page_size, extra_page_size, features, tile, heads_per_cta, variant;
    char arch[MLAJIT_ARCH_LEN];
    mlajit_layout layout; /* ints only: no padding; zero for a named model */
} spec_bytes;

typedef struct mlajit_spec_memo {
    spec_bytes spec;
    uint64_t hash;
    mlajit_kernel *kernel; /* NULL = empty slot; owned by the kernel map */
} mlajit_spec_memo;

static void spec_bytes_of(const mlajit_kernel_spec *s, spec_bytes *b)
{
    /* every byte written (no memset): this is the repeat look-up's path */
    memset(b->arch, 0, sizeof b->arch);
    b->model = (int32_t)s->model;
    b->h_q = s->h_q;
    b->page_size = s->page_size;
    b->extra_page_size = s->extra_page_size;
    b->features = (int32_t)s->features;
    b->tile = s->tile;
    b->heads_per_cta = s->heads_per_cta;
    b->variant = (int32_t)s->variant;
    memcpy(b->arch, s->arch, strnlen(s->arch, sizeof b->arch - 1));
    b->layout = s->layout; /* validated: all zero unless the model is MLAJIT_MODEL_CUSTOM */
}

/* Caller holds map_lock. */
static mlajit_kernel *memo_find(const mlajit_context *ctx, const spec_bytes *b, uint64_t hash)
{
    if (!ctx->memo_cap)
        return NULL;
    for (size_t i = (size_t)hash & (ctx->memo_cap - 1);; i = (i + 1) & (ctx->memo_cap - 1)) {
        const mlajit_spec_memo *m = &ctx->memo_slots[i];
        if (!m->kernel)
            return NULL;
        if (m->hash == hash && memcmp(&m->spec, b, sizeof *b) == 0)
            return m->kernel;
    }
}

static void memo_place(mlajit_spec_memo *slots, size_t cap, const mlajit_spec_memo *m)
{
    size_t i = (size_t)m->hash & (cap - 1);
    while (slots[i].kernel)
        i = (i + 1) & (cap - 1);
    slots[i] = *m;
}

/* Caller holds map_lock for writing. MLAJIT_ERR_OUT_OF_MEMORY leaves the memo
 * as it was (the kernel is still in the map). */
static int memo_insert(mlajit_context *ctx, const spec_bytes *b, uint64_t hash, mlajit_kernel *k)
{
    if (memo_find(ctx, b, hash))
        return MLAJIT_OK;
    if (2 * (ctx->memo_count + 1) > ctx->memo_cap) {
        size_t cap = ctx->memo_cap ? ctx->memo_cap * 2 : 64;
        mlajit_spec_memo *slots = mlajit_calloc(cap, sizeof *slots);
        if (!slots)
            return mlajit_fail_oom("the kernel map's spec memo");
        for (size_t i = 0; i < ctx->memo_cap; i++)
            if (ctx->memo_slots[i].kernel)
                memo_place(slots, cap, &ctx->memo_slots[i]);
        free(ctx->memo_slots);
        ctx->memo_slots = slots;
        ctx->memo_cap = cap;
    }
    mlajit_spec_memo m = {.spec = *b, .hash = hash, .kernel = k};
    memo_place(ctx->memo_slots, ctx->memo_cap, &m);
    ctx->memo_count++;
    return MLAJIT_OK;
}

/* A cubin for arch can run on the device when it is the device's own target, or
 * a plain (non-"a") target of the same major and no higher minor. */
int mlajit_arch_runs_on(const char *arch, const char *device_arch)
{
    if (strcmp(arch, device_arch) == 0)
        return 1;
    size_t n = strlen(arch);
    if (n < 5 || strncmp(arch, "sm_", 3) != 0 || strncmp(device_arch, "sm_", 3) != 0 || arch[n - 1] == 'a')
        return 0;
    int a = atoi(arch + 3), d = atoi(device_arch + 3);
    return a / 10 == d / 10 && a <= d;
}

int mlajit_kernel_key_and_source(const mlajit_context *ctx, const mlajit_kernel_spec *r, mlajit_cache_key *key,
                                 char *spec_string, size_t spec_string_len, char **source)
{
    *source = NULL;
    int rc = mlajit_spec_string(r, spec_string, spec_string_len);
    if (rc || (rc = mlajit_generate_source(r, source)))
        return rc;
    *key = mlajit_kernel_key_for_nvrtc(r, *source, ctx->nvrtc_major, ctx->nvrtc_minor);
    return MLAJIT_OK;
}

mlajit_cache_key mlajit_kernel_key_for_nvrtc(const mlajit_kernel_spec *r, const char *source, int nvrtc_major,
                                             int nvrtc_minor)
{
    char options[256];
    mlajit_nvrtc_options_string(r->arch, options, sizeof options);
    mlajit_key_inputs in = {
        .source = source, .arch = r->arch,
        .nvrtc_major = nvrtc_major, .nvrtc_minor = nvrtc_minor, .compile_options = options,
    };
    return mlajit_cache_key_make(&in);
}

int mlajit_kernel_key(const mlajit_context *ctx, const mlajit_kernel_spec *r, mlajit_cache_key *key,
                      char *spec_string, size_t spec_string_len)
{
    char *source;
    int rc = mlajit_kernel_key_and_source(ctx, r, key, spec_string, spec_string_len, &source);
    free(source);
    return rc;
}

static const char *source_name(int source)
{
    switch (source) {
    case MLAJIT_SOURCE_PACK: return "a pack";
    case MLAJIT_SOURCE_DISK: return "the disk cache";
    default: return "NVRTC";
    }
}

/* A failed load step as MLAJIT_ERR_CUDA, naming the kernel, where its cubin came
 * from and the two versions that must agree on it. */
static int load_fail(const mlajit_context *ctx, const mlajit_kernel *k, CUresult r, const char *what)
{
    const char *text = NULL;
    ctx->drv->cuGetErrorString(r, &text);
    return mlajit_fail(MLAJIT_ERR_CUDA,
                       "%s failed: CUDA error %d (%s), loading %s for %s (cubin from %s, NVRTC %d.%d, driver %d); a "
                       "driver older than the NVRTC that built a cubin may refuse it",
                       what, r, text ? text : "unknown", k->report.spec, k->spec.arch, source_name(k->report.source),
                       ctx->nvrtc_major, ctx->nvrtc_minor, ctx->driver_version);
}

/* Load the cubin and take both entries. Any step that fails unloads what the
 * steps before it made, so a later call can try again from the start. */
static int kernel_load(mlajit_context *ctx, mlajit_kernel *k)
{
    const mlajit_driver *drv = ctx->drv;
    CUresult r = MLAJIT_CU_SUCCESS;
    const char *what = NULL;
    int pushed = mlajit_context_enter(ctx);
    if (drv->cuLibraryLoadData) {
        CUkernel km, kc;
        if ((r = drv->cuLibraryLoadData(&k->library, k->cubin, NULL, NULL, 0, NULL, NULL, 0)) != MLAJIT_CU_SUCCESS) {
            k->library = NULL;
            what = "cuLibraryLoadData";
        } else if ((r = drv->cuLibraryGetKernel(&km, k->library, MLAJIT_ENTRY_MAIN)) != MLAJIT_CU_SUCCESS ||
                   (r = drv->cuLibraryGetKernel(&kc, k->library, MLAJIT_ENTRY_COMBINE)) != MLAJIT_CU_SUCCESS) {
            what = "cuLibraryGetKernel";
        } else if ((r = drv->cuKernelGetFunction(&k->main_fn, km)) != MLAJIT_CU_SUCCESS ||
                   (r = drv->cuKernelGetFunction(&k->combine_fn, kc)) != MLAJIT_CU_SUCCESS) {
            what = "cuKernelGetFunction";
        }
    } else {
        if ((r = drv->cuModuleLoadData(&k->module, k->cubin)) != MLAJIT_CU_SUCCESS) {
            k->module = NULL;
            what = "cuModuleLoadData";
        } else if ((r = drv->cuModuleGetFunction(&k->main_fn, k->module, MLAJIT_ENTRY_MAIN)) != MLAJIT_CU_SUCCESS ||
                   (r = drv->cuModuleGetFunction(&k->combine_fn, k->module, MLAJIT_ENTRY_COMBINE)) !=
                       MLAJIT_CU_SUCCESS) {
            what = "cuModuleGetFunction";
        }
    }
    /* Set once per function: the most dynamic shared memory a launch will ask for
     * (the combine's: its staged split rows, at most a full round of them). */
    if (!what &&
        ((r = drv->cuFuncSetAttribute(k->main_fn, MLAJIT_CU_FUNC_ATTR_MAX_DYNAMIC_SMEM, k->layout.smem_bytes)) !=
             MLAJIT_CU_SUCCESS ||
         (r = drv->cuFuncSetAttribute(k->combine_fn, MLAJIT_CU_FUNC_ATTR_MAX_DYNAMIC_SMEM,
                                      mlajit_combine_smem_bytes(&k->layout, MLAJIT_MAX_SPLITS))) !=
             MLAJIT_CU_SUCCESS))
        what = "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)";
    int rc = MLAJIT_OK;
    if (what) {
        rc = load_fail(ctx, k, r, what);
        if (k->library)
            drv->cuLibraryUnload(k->library);
        if (k->module)
            drv->cuModuleUnload(k->module);
        k->library = NULL;
        k->module = NULL;
        k->main_fn = k->combine_fn = NULL;
    } else {
        int regs = 0;
        if (drv->cuFuncGetAttribute(&regs, MLAJIT_CU_FUNC_ATTR_NUM_REGS, k->main_fn) == MLAJIT_CU_SUCCESS &&
            k->report.registers < 0)
            k->report.registers = regs;
        /* Published last: a thread that sees loaded == 1 sees the functions too
         * (reports take their "loaded" from here, not from k->report). */
        __atomic_store_n(&k->loaded, 1, __ATOMIC_RELEASE);
    }
    mlajit_context_leave(ctx, pushed);
    return rc;
}

/* A miss with JIT disabled, said in the library's terms: the spec, where it was
 * looked for and what would serve it (the CLI adds the `pack build` line). */
static int jit_refused(mlajit_context *ctx, const char *spec_string)
{
    atomic_fetch_add(&ctx->jit_refusals, 1);
    char packs[256] = "";
    for (int i = 0; i < ctx->pack_count; i++) {
        size_t used = strlen(packs);
        snprintf(packs + used, sizeof packs - used, "%s%s", i ? ":" : "", mlajit_pack_path(ctx->packs[i]));
    }
    return mlajit_fail(MLAJIT_ERR_NOT_FOUND,
                       "no kernel for %s in the packs (%s) or the cache (%s), and JIT is disabled (%s); add a pack "
                       "that holds %s to MLAJIT_PACKS or mlajit_context_options.packs, or allow JIT",
                       spec_string, ctx->pack_count ? packs : "none open", ctx->cache_dir[0] ? ctx->cache_dir : "off",
                       (ctx->flags & MLAJIT_CONTEXT_NO_JIT) ? "MLAJIT_CONTEXT_NO_JIT" : "MLAJIT_DISABLE_JIT=1",
                       spec_string);
}

/* Take a looked-up entry into the kernel record, if it is the kernel asked
 * for (a content key names its spec, so a mismatch is damage) and its launch
 * record is what this generator expects for it (else it is stale). */
static int kernel_take_entry(mlajit_kernel *k, mlajit_cache_entry *e, const char *spec_string, int source)
{
    if (strcmp(e->spec_string, spec_string) != 0) {
        mlajit_fail(MLAJIT_ERR_CORRUPT, "the entry for key %s holds %s", k->report.key, e->spec_string);
        mlajit_cache_entry_clear(e);
        return MLAJIT_ERR_CORRUPT;
    }
    int rc = mlajit_entry_launch_check(e, &k->layout);
    if (rc) {
        mlajit_cache_entry_clear(e);
        return rc;
    }
    k->cubin = e->cubin;
    k->cubin_size = e->cubin_size;
    k->report.cache_hit = 1;
    k->report.source = source;
    k->report.compile_ms = e->compile_ms;
    k->report.registers = e->registers;
    k->report.shared_bytes = e->shared_bytes;
    k->report.spill_bytes = e->spill_bytes;
    k->report.cubin_bytes = e->cubin_size;
    e->cubin = NULL;
    mlajit_cache_entry_clear(e);
    return MLAJIT_OK;
}

/* The key of the kernel in a pack: its cubins were compiled by the pack's NVRTC,
 * which need not be this process's (a cubin needs only a driver to run, so a
 * host with another NVRTC, or none, still serves from a pack). */
static mlajit_cache_key pack_key(const mlajit_context *ctx, const mlajit_pack *pack, const mlajit_kernel *k,
                                 const char *source)
{
    const mlajit_pack_manifest *m = mlajit_pack_manifest_of(pack);
    if (m->nvrtc_major == ctx->nvrtc_major && m->nvrtc_minor == ctx->nvrtc_minor)
        return k->key;
    return mlajit_kernel_key_for_nvrtc(&k->spec, source, m->nvrtc_major, m->nvrtc_minor);
}

/* The packs, in order. MLAJIT_OK when one held the kernel. */
static int lookup_packs(mlajit_context *ctx, mlajit_kernel *k, const char *spec_string, const char *source)
{
    for (int i = 0; i < ctx->pack_count; i++) {
        mlajit_cache_entry e;
        mlajit_cache_key key = pack_key(ctx, ctx->packs[i], k, source);
        int rc = mlajit_pack_get(ctx->packs[i], &key, &e);
        if (rc == MLAJIT_OK)
            rc = kernel_take_entry(k, &e, spec_string, MLAJIT_SOURCE_PACK);
        if (rc == MLAJIT_OK) {
            atomic_fetch_add(&ctx->pack_hits, 1);
            return MLAJIT_OK;
        }
        if (rc == MLAJIT_ERR_NOT_FOUND)
            continue;
        if (rc == MLAJIT_ERR_OUT_OF_MEMORY) /* not the entry's fault: fail the call */
            return rc;
        atomic_fetch_add(rc == MLAJIT_CACHE_STALE ? &ctx->stale : &ctx->corrupt, 1);
        mlajit_warn("pack %s: the entry for %s is %s (%s); trying the next layer", mlajit_pack_path(ctx->packs[i]),
                    spec_string, rc == MLAJIT_CACHE_STALE ? "stale" : "unusable", mlajit_last_error());
    }
    return MLAJIT_ERR_NOT_FOUND;
}

static int lookup_disk(mlajit_context *ctx, mlajit_kernel *k, const char *spec_string)
{
    if (!ctx->store)
        return MLAJIT_ERR_NOT_FOUND;
    mlajit_cache_entry e;
    int rc = mlajit_store_get(ctx->store, &k->key, &e);
    if (rc == MLAJIT_OK)
        rc = kernel_take_entry(k, &e, spec_string, MLAJIT_SOURCE_DISK);
    if (rc == MLAJIT_OK) {
        atomic_fetch_add(&ctx->disk_hits, 1);
        return MLAJIT_OK;
    }
    if (rc == MLAJIT_ERR_OUT_OF_MEMORY)
        return rc;
    if (rc == MLAJIT_ERR_CORRUPT) {
        atomic_fetch_add(&ctx->corrupt, 1);
        mlajit_warn("cache entry %s for %s is corrupt (%s); recompiling", k->report.key, spec_string,
                    mlajit_last_error());
    } else if (rc == MLAJIT_CACHE_STALE) {
        atomic_fetch_add(&ctx->stale, 1);
        mlajit_warn("cache entry %s for %s is stale (%s); recompiling it", k->report.key, spec_string,
                    mlajit_last_error());
    } else if (rc != MLAJIT_ERR_NOT_FOUND) {
        mlajit_warn("cache %s: lookup of %s failed (%s); compiling", ctx->cache_dir, spec_string,
                    mlajit_last_error());
    }
    return MLAJIT_ERR_NOT_FOUND;
}

/* MLAJIT_OK also when the cache cannot take it (one warning); only running out
 * of memory fails the call. */
static int store_compiled(mlajit_context *ctx, const mlajit_kernel *k, const char *spec_string)
{
    if (!ctx->store || !ctx->store_writable)
        return MLAJIT_OK;
    mlajit_cache_entry e;
    mlajit_kernel_entry_of(k, &e);
    /* The context's counts so far go into the same transaction: recording
     * them costs no write of its own. */
    mlajit_store_counters delta;
    int counted = counters_take(ctx, &delta);
    /* A cache that cannot be written never fails the call: one warning. */
    int rc = mlajit_store_put_counted(ctx->store, &k->key, &e, counted ? &delta : NULL);
    if (rc != MLAJIT_OK) {
        if (counted)
            counters_unrecord(ctx, &delta);
        if (rc == MLAJIT_ERR_OUT_OF_MEMORY)
            return rc;
        if (atomic_exchange(&ctx->warned_store_write, 1) == 0)
            mlajit_warn("could not store %s in %s (%s); new kernels stay in memory", spec_string, ctx->cache_dir,
                        mlajit_last_error());
    }
    return MLAJIT_OK;
}

/* How long a compile waits for another process (or thread) compiling the
 * same kernel: MLAJIT_COMPILE_WAIT_MS, default two minutes; 0 never waits. */
static int compile_wait_ms(void)
{
    const char *v = getenv("MLAJIT_COMPILE_WAIT_MS");
    if (!v || !v[0])
        return 120000;
    char *end;
    long ms = strtol(v, &end, 10);
    if (*end || ms < 0 || ms > 24L * 3600 * 1000) {
        static atomic_int warned;
        if (atomic_exchange(&warned, 1) == 0)
            mlajit_warn("MLAJIT_COMPILE_WAIT_MS=%s is not a number of milliseconds in 0..86400000; waiting the "
                        "default 120000", v);
        return 120000;
    }
    return (int)ms;
}

/* Build a kernel record from a pack, the disk cache or NVRTC, which compiles
 * source, the source the key was made of (no lock of the context held; the
 * compile lock below keeps threads and processes from compiling one new kernel
 * twice where the cache is writable, else the map keeps the first). */
static int kernel_build(mlajit_context *ctx, const mlajit_kernel_spec *r, const mlajit_cache_key *key,
                        const char *spec_string, const char *source, double generate_ms, mlajit_kernel **out)
{
    mlajit_kernel *k = mlajit_calloc(1, sizeof *k);
    if (!k)
        return mlajit_fail_oom("the kernel record");
    k->key = *key;
    k->spec = *r;
    mlajit_codegen_layout(r, &k->layout);
    k->report.struct_size = sizeof k->report; /* mlajit_plan_report hands it out */
    snprintf(k->report.spec, sizeof k->report.spec, "%s", spec_string);
    mlajit_cache_key_hex(key, k->report.key);
    k->report.generate_ms = generate_ms;

    double t0 = mlajit_now_ms();
    int rc = lookup_packs(ctx, k, spec_string, source);
    if (rc == MLAJIT_ERR_NOT_FOUND)
        rc = lookup_disk(ctx, k, spec_string);
    k->report.lookup_ms = mlajit_now_ms() - t0;
    if (rc != MLAJIT_ERR_NOT_FOUND) { /* found, or out of memory */
        if (rc == MLAJIT_OK)
            *out = k;
        else
            kernel_free(NULL, k);
        return rc;
    }
    if (ctx->jit_disabled) {
        free(k);
        return jit_refused(ctx, spec_string);
    }

    /* One compile per new kernel across processes and threads: the first to
     * miss holds the key's lock while NVRTC runs and the entry is stored; the
     * others wait (bounded), then find it on disk. A holder that dies drops
     * the lock with it; a waiter that times out compiles too. */
    mlajit_compile_lock *compile_lock = NULL;
    if (ctx->store && ctx->store_writable) {
        int waited = 0;
        if ((rc = mlajit_compile_lock_take(ctx->store, key, compile_wait_ms(), &compile_lock, &waited)) ==
            MLAJIT_ERR_OUT_OF_MEMORY) {
            kernel_free(NULL, k);
            return rc;
        }
        if (rc != MLAJIT_OK)
            mlajit_info("%s", mlajit_last_error());
        if (waited && (rc = lookup_disk(ctx, k, spec_string)) != MLAJIT_ERR_NOT_FOUND) {
            mlajit_compile_lock_release(compile_lock);
            k->report.lookup_ms = mlajit_now_ms() - t0;
            if (rc == MLAJIT_OK)
                *out = k;
            else
                kernel_free(NULL, k);
            return rc;
        }
    }

    mlajit_compiled c;
    if ((rc = mlajit_nvrtc_compile(source, spec_string, r->arch, &c))) {
        mlajit_compile_lock_release(compile_lock);
        free(k);
        return rc;
    }
    k->cubin = c.cubin;
    k->cubin_size = c.cubin_size;
    c.cubin = NULL;
    k->report.source = MLAJIT_SOURCE_COMPILED;
    k->report.compile_ms = c.compile_ms;
    k->report.registers = c.registers;
    k->report.shared_bytes = c.shared_bytes + k->layout.smem_bytes;
    k->report.spill_bytes = c.spill_bytes;
    k->report.cubin_bytes = c.cubin_size;
    if (c.wgmma_serialized)
        mlajit_warn("%s for %s: ptxas serialized its wgmma instructions (%d notes in its log): the kernel runs, "
                    "slower than it should; please report the spec", spec_string, r->arch, c.wgmma_serialized);
    mlajit_compiled_free(&c);
    atomic_fetch_add(&ctx->compiles, 1);
    atomic_fetch_add(&ctx->compile_us, (uint64_t)(k->report.compile_ms * 1000.0));
    mlajit_info("compiled %s for %s in %.0f ms (%zu-byte cubin)", spec_string, r->arch, k->report.compile_ms,
                k->cubin_size);
    rc = store_compiled(ctx, k, spec_string);
    mlajit_compile_lock_release(compile_lock);
    if (rc) {
        kernel_free(NULL, k);
        return rc;
    }
    *out = k;
    return MLAJIT_OK;
}

int mlajit_device_arch_check(const mlajit_context *ctx)
{
    if (mlajit_arch_known(ctx->arch))
        return MLAJIT_OK;
    return mlajit_fail(MLAJIT_ERR_UNSUPPORTED, "the device (%s) is %s; mlajit generates kernels for %s only. "
                       "Name one of them in spec.arch to compile without loading",
                       ctx->device_name, ctx->arch, mlajit_arch_list());
}

/* The spec memo's answer for a spec as asked ("" arch: the context's), with
 * the bytes and hash it was looked up by. */
static mlajit_kernel *memo_lookup(mlajit_context *ctx, const mlajit_kernel_spec *spec, spec_bytes *asked,
                                  uint64_t *asked_hash)
{
    spec_bytes_of(spec, asked);
    if (!spec->arch[0])
        memcpy(asked->arch, ctx->arch, strnlen(ctx->arch, sizeof asked->arch - 1));
    *asked_hash = mlajit_hash64(asked, sizeof *asked);
    pthread_rwlock_rdlock(&ctx->map_lock);
    mlajit_kernel *known = memo_find(ctx, asked, *asked_hash);
    pthread_rwlock_unlock(&ctx->map_lock);
    return known;
}

/* The fast path: a spec asked for before, already loaded when it must be. */
static int memo_serves(mlajit_context *ctx, mlajit_kernel *known, int load, const mlajit_kernel **out,
                       mlajit_kernel_report *report, double t0)
{
    if (!known)
        return 0;
    int known_loaded = __atomic_load_n(&known->loaded, __ATOMIC_ACQUIRE);
    if (!known_loaded && load)
        return 0;
    atomic_fetch_add(&ctx->memory_hits, 1);
    if (report) {
        *report = known->report;
        report->cache_hit = 1;
        report->source = MLAJIT_SOURCE_MEMORY;
        report->generate_ms = 0;
        report->loaded = known_loaded;
        report->lookup_ms = mlajit_now_ms() - t0;
    }
    *out = known;
    return 1;
}

int mlajit_kernel_acquire(mlajit_context *ctx, const mlajit_kernel_spec *spec, int load, const mlajit_kernel **out,
                          mlajit_kernel_report *report)
{
    return mlajit_kernel_acquire_ex(ctx, spec, load, out, report, NULL);
}

int mlajit_kernel_acquire_ex(mlajit_context *ctx, const mlajit_kernel_spec *spec, int load,
                             const mlajit_kernel **out, mlajit_kernel_report *report, int *loaded_here)
{
    if (loaded_here)
        *loaded_here = 0;
    double t0 = report ? mlajit_now_ms() : 0;
    spec_bytes asked;
    uint64_t asked_hash;
    mlajit_kernel *known = memo_lookup(ctx, spec, &asked, &asked_hash);
    if (memo_serves(ctx, known, load, out, report, t0))
        return MLAJIT_OK;
    mlajit_kernel_spec with_arch = *spec, r = MLAJIT_KERNEL_SPEC_INIT;
    if (!with_arch.arch[0])
        snprintf(with_arch.arch, sizeof with_arch.arch, "%s", ctx->arch);

    int rc;
    if (!spec->arch[0] && (rc = mlajit_device_arch_check(ctx)))
        return rc;
    rc = mlajit_spec_resolve(&with_arch, &r);
    if (rc)
        return rc;
    if (load && !ctx->drv)
        return mlajit_fail(MLAJIT_ERR_NO_DEVICE, "no GPU to load %s on: %s", r.arch, ctx->no_device_reason);
    if (load && !mlajit_arch_runs_on(r.arch, ctx->arch))
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "spec.arch = %s cannot run on this %s device; use \"\" or %s",
                           r.arch, ctx->arch, ctx->arch);
    /* A spec not asked for before (a known one is here to be loaded): its key is
     * the generated source's. */
    char spec_string[128], *source = NULL;
    mlajit_cache_key key;
    double generate_ms = 0;
    mlajit_kernel *k = known;
    if (!k) {
        double g0 = mlajit_now_ms();
        if ((rc = mlajit_kernel_key_and_source(ctx, &r, &key, spec_string, sizeof spec_string, &source))) {
            free(source);
            return rc;
        }
        generate_ms = mlajit_now_ms() - g0;
        pthread_rwlock_rdlock(&ctx->map_lock);
        k = map_find(ctx, &key);
        pthread_rwlock_unlock(&ctx->map_lock);
    }
    int from_map = k != NULL;
    if (from_map) {
        free(source);
        atomic_fetch_add(&ctx->memory_hits, 1);
        if (!known) { /* the same kernel asked for another way: remember this way too */
            pthread_rwlock_wrlock(&ctx->map_lock);
            rc = memo_insert(ctx, &asked, asked_hash, k);
            pthread_rwlock_unlock(&ctx->map_lock);
            if (rc)
                return rc;
        }
    } else {
        mlajit_kernel *built = NULL;
        rc = kernel_build(ctx, &r, &key, spec_string, source, generate_ms, &built);
        free(source);
        if (rc)
            return rc;
        pthread_rwlock_wrlock(&ctx->map_lock);
        k = map_find(ctx, &key); /* another thread may have won the race */
        if (!k && (rc = map_insert(ctx, built)) == MLAJIT_OK)
            k = built;
        if (k)
            rc = memo_insert(ctx, &asked, asked_hash, k);
        pthread_rwlock_unlock(&ctx->map_lock);
        if (k != built) /* the race's loser, or a map with no room for it */
            kernel_free(NULL, built);
        if (rc)
            return rc;
    }
    if (load && !__atomic_load_n(&k->loaded, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&ctx->lock); /* loads are rare: serialize them */
        if (!k->loaded && (rc = kernel_load(ctx, k)) == MLAJIT_OK && loaded_here)
            *loaded_here = 1;
        pthread_mutex_unlock(&ctx->lock);
        if (rc)
            return rc;
    }
    if (report) {
        *report = k->report;
        if (from_map) {
            report->cache_hit = 1;
            report->source = MLAJIT_SOURCE_MEMORY;
            report->generate_ms = 0;
        }
        report->loaded = __atomic_load_n(&k->loaded, __ATOMIC_ACQUIRE);
        report->lookup_ms = mlajit_now_ms() - t0;
    }
    *out = k;
    return MLAJIT_OK;
}

int mlajit_kernel_prepare(mlajit_context *ctx, const mlajit_kernel_spec *caller_spec,
                          mlajit_kernel_report *caller_report)
{
    mlajit_clear_error();
    if (!ctx || !caller_spec)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "ctx or spec: NULL");
    mlajit_kernel_spec local;
    const mlajit_kernel_spec *spec = mlajit_abi_in(MLAJIT_ABI_KERNEL_SPEC, "spec", caller_spec, &local);
    if (!spec || (caller_report && mlajit_abi_check(MLAJIT_ABI_KERNEL_REPORT, "report", caller_report)))
        return MLAJIT_ERR_INVALID_ARGUMENT;
    const mlajit_kernel *k;
    /* arch "" stays for acquire, which fills in the device's (and checks it) */
    int load = ctx->drv && mlajit_arch_runs_on(spec->arch[0] ? spec->arch : ctx->arch, ctx->arch);
    mlajit_kernel_report report;
    /* A spec the memo holds was validated when it was first asked for (the memo
     * is keyed by every field validation reads), so a repeat skips it. */
    double t0 = caller_report ? mlajit_now_ms() : 0;
    spec_bytes asked;
    uint64_t asked_hash;
    if (!memo_serves(ctx, memo_lookup(ctx, spec, &asked, &asked_hash), load, &k, caller_report ? &report : NULL,
                     t0)) {
        int rc = mlajit_spec_validate(spec);
        if (rc)
            return rc;
        if ((rc = mlajit_kernel_acquire(ctx, spec, load, &k, caller_report ? &report : NULL)))
            return rc;
    }
    if (caller_report)
        mlajit_abi_out(MLAJIT_ABI_KERNEL_REPORT, caller_report, &report);
    return MLAJIT_OK;
}
