/* Many kernels at once: grids of specs, acquired by a pool of worker threads
 * (NVRTC compiles run in parallel; each worker holds no lock while compiling).
 * Used by mlajit_warmup and by `mlajit pack build`. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/abi.h"
#include "common/alloc.h"
#include "common/error.h"
#include "runtime/runtime.h"

#define MAX_WORKERS 256

int mlajit_grid_expand(const mlajit_kernel_grid *grid, const char *default_arch, mlajit_kernel_spec **specs,
                       int *count)
{
    *specs = NULL;
    *count = 0;
    if (!grid)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "grid: NULL");
    /* the model axis: the named models, then the custom layouts */
    const int num_models = grid->models && grid->num_models > 0 ? grid->num_models : 0;
    const int num_layouts = grid->layouts && grid->num_layouts > 0 ? grid->num_layouts : 0;
    if (num_models + num_layouts <= 0 || !grid->head_counts || grid->num_head_counts <= 0 || !grid->page_sizes ||
        grid->num_page_sizes <= 0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "grid: models (or layouts), head_counts and page_sizes are required (a list and a count > 0 "
                           "each)");
    static const int no_extra[] = {0};
    static const unsigned no_features[] = {0};
    static const char *const context_arch[] = {""};
    const int *extras = grid->extra_page_sizes && grid->num_extra_page_sizes > 0 ? grid->extra_page_sizes : no_extra;
    int n_extras = grid->extra_page_sizes && grid->num_extra_page_sizes > 0 ? grid->num_extra_page_sizes : 1;
    const unsigned *features = grid->feature_sets && grid->num_feature_sets > 0 ? grid->feature_sets : no_features;
    int n_features = grid->feature_sets && grid->num_feature_sets > 0 ? grid->num_feature_sets : 1;
    const char *const *archs = grid->archs && grid->num_archs > 0 ? grid->archs : context_arch;
    int n_archs = grid->archs && grid->num_archs > 0 ? grid->num_archs : 1;

    long long total = (long long)(num_models + num_layouts) * grid->num_head_counts * grid->num_page_sizes * n_extras *
                      n_features * n_archs;
    if (total > 1000000)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "grid: %lld kernels; at most 1000000", total);
    /* room for each spec's walk alternatives too (see below) */
    mlajit_kernel_spec *out = mlajit_calloc((size_t)total * (1 + MLAJIT_WALK_ALTERNATIVES), sizeof *out);
    if (!out)
        return mlajit_fail_oom("a grid of %lld kernels", total);
    int n = 0;
    for (int a = 0; a < n_archs; a++)
        for (int m = 0; m < num_models + num_layouts; m++)
            for (int h = 0; h < grid->num_head_counts; h++)
                for (int p = 0; p < grid->num_page_sizes; p++)
                    for (int e = 0; e < n_extras; e++)
                        for (int f = 0; f < n_features; f++) {
                            mlajit_kernel_spec *s = &out[n];
                            s->struct_size = sizeof *s;
                            int rc = m < num_models
                                         ? mlajit_spec_init(s, grid->models[m], grid->head_counts[h],
                                                            grid->page_sizes[p])
                                         : mlajit_spec_init_layout(s, &grid->layouts[m - num_models],
                                                                   grid->head_counts[h], grid->page_sizes[p]);
                            if (rc == MLAJIT_OK) {
                                s->extra_page_size = extras[e];
                                s->features = features[f];
                                const char *arch = archs[a] && archs[a][0] ? archs[a] : default_arch;
                                if (strlen(arch) >= sizeof s->arch)
                                    rc = mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "arch \"%s\" is too long", arch);
                                else
                                    snprintf(s->arch, sizeof s->arch, "%s", arch);
                            }
                            if (rc == MLAJIT_OK)
                                rc = mlajit_spec_validate(s);
                            if (rc != MLAJIT_OK) {
                                free(out);
                                return mlajit_fail_prefix(rc,
                                                          "grid kernel (%s[%d], head_counts[%d], page_sizes[%d], "
                                                          "extra_page_sizes[%d], feature_sets[%d], archs[%d]): ",
                                                          m < num_models ? "models" : "layouts",
                                                          m < num_models ? m : m - num_models, h, p, e, f, a);
                            }
                            n++;
                            /* the kernels auto's plans may take instead, so a warmed-up
                             * context or a pack covers every plan of the spec */
                            n += mlajit_spec_walk_alternatives(s, s->arch, &out[n]);
                        }
    *specs = out;
    *count = n;
    return MLAJIT_OK;
}

typedef struct batch {
    mlajit_context *ctx;
    const mlajit_kernel_spec *specs;
    int count;
    const mlajit_kernel **kernels;
    atomic_int next;
    pthread_mutex_t lock; /* guards everything below */
    int done;
    mlajit_warmup_report report;
    int status;
    char message[1024];
    mlajit_batch_progress_fn progress;
    void *progress_arg;
} batch;

static void *batch_worker(void *arg)
{
    batch *b = arg;
    for (;;) {
        int i = atomic_fetch_add(&b->next, 1);
        if (i >= b->count)
            return NULL;
        const mlajit_kernel_spec *spec = &b->specs[i];
        char arch[MLAJIT_ARCH_LEN];
        snprintf(arch, sizeof arch, "%s", spec->arch[0] ? spec->arch : b->ctx->arch);
        int load = b->ctx->drv && mlajit_arch_runs_on(arch, b->ctx->arch);
        const mlajit_kernel *k = NULL;
        mlajit_kernel_report rep = MLAJIT_KERNEL_REPORT_INIT;
        mlajit_clear_error();
        int loaded_here = 0;
        int rc = mlajit_kernel_acquire_ex(b->ctx, spec, load, &k, &rep, &loaded_here);
        if (b->kernels)
            b->kernels[i] = rc == MLAJIT_OK ? k : NULL;

        pthread_mutex_lock(&b->lock);
        b->done++;
        if (rc == MLAJIT_OK) {
            switch (rep.source) {
            case MLAJIT_SOURCE_MEMORY: b->report.from_memory++; break;
            case MLAJIT_SOURCE_PACK: b->report.from_packs++; break;
            case MLAJIT_SOURCE_DISK: b->report.from_disk++; break;
            default:
                b->report.compiled++;
                b->report.compile_ms += rep.compile_ms;
                break;
            }
            b->report.loaded += loaded_here;
        } else if (b->status == MLAJIT_OK) {
            char name[128] = "";
            if (mlajit_spec_string(spec, name, sizeof name) != MLAJIT_OK)
                snprintf(name, sizeof name, "kernel %d of the batch", i);
            b->status = rc;
            snprintf(b->message, sizeof b->message, "%s: %s", name, mlajit_last_error());
        }
        if (b->progress)
            b->progress(b->progress_arg, b->done, b->count, rc == MLAJIT_OK ? &rep : NULL);
        pthread_mutex_unlock(&b->lock);
    }
}

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int mlajit_acquire_batch(mlajit_context *ctx, const mlajit_kernel_spec *specs, int count, int threads,
                         mlajit_batch_progress_fn progress, void *progress_arg, const mlajit_kernel **kernels,
                         mlajit_warmup_report *report)
{
    double t0 = mlajit_now_ms();
    batch b;
    memset(&b, 0, sizeof b);
    b.ctx = ctx;
    b.specs = specs;
    b.count = count;
    b.kernels = kernels;
    b.progress = progress;
    b.progress_arg = progress_arg;
    atomic_init(&b.next, 0);
    pthread_mutex_init(&b.lock, NULL);
    b.report.struct_size = sizeof b.report;
    b.report.kernels = count;

    int workers = threads > 0 ? threads : online_cpus();
    if (workers > count)
        workers = count;
    if (workers > MAX_WORKERS)
        workers = MAX_WORKERS;
    pthread_t tids[MAX_WORKERS];
    int started = 0;
    /* The calling thread is a worker too, so a failed pthread_create only slows things down. */
    for (int i = 1; i < workers; i++) {
        if (pthread_create(&tids[started], NULL, batch_worker, &b) != 0)
            break;
        started++;
    }
    if (count > 0)
        batch_worker(&b);
    for (int i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    pthread_mutex_destroy(&b.lock);

    b.report.wall_ms = mlajit_now_ms() - t0;
    if (report)
        *report = b.report;
    if (b.status != MLAJIT_OK)
        return mlajit_fail(b.status, "%s", b.message);
    return MLAJIT_OK;
}

/* mlajit_warmup on whole structs; report is always written (the counts so far). */
static int warmup(mlajit_context *ctx, const mlajit_kernel_grid *caller_grid, int threads,
                  mlajit_warmup_report *report, double t0)
{
    if (!ctx || !caller_grid)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "ctx or grid: NULL");
    mlajit_kernel_grid grid_local;
    const mlajit_kernel_grid *grid = mlajit_abi_in(MLAJIT_ABI_KERNEL_GRID, "grid", caller_grid, &grid_local);
    if (!grid)
        return MLAJIT_ERR_INVALID_ARGUMENT;
    if (threads < 0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "threads = %d; allowed 0 (one per CPU) or more", threads);
    int takes_device_arch = !grid->archs || grid->num_archs <= 0;
    for (int i = 0; i < grid->num_archs && grid->archs; i++)
        takes_device_arch |= !grid->archs[i] || !grid->archs[i][0];
    int rc = takes_device_arch ? mlajit_device_arch_check(ctx) : MLAJIT_OK;
    if (rc)
        return mlajit_fail_prefix(rc, "warmup: ");
    mlajit_kernel_spec *specs;
    int count;
    rc = mlajit_grid_expand(grid, ctx->arch, &specs, &count);
    if (rc)
        return mlajit_fail_prefix(rc, "warmup: ");
    rc = mlajit_acquire_batch(ctx, specs, count, threads, NULL, NULL, NULL, report);
    free(specs);
    report->wall_ms = mlajit_now_ms() - t0;
    if (rc)
        return mlajit_fail_prefix(rc, "warmup: ");
    return MLAJIT_OK;
}

int mlajit_warmup(mlajit_context *ctx, const mlajit_kernel_grid *caller_grid, int threads,
                  mlajit_warmup_report *caller_report)
{
    mlajit_clear_error();
    double t0 = mlajit_now_ms();
    if (caller_report && mlajit_abi_check(MLAJIT_ABI_WARMUP_REPORT, "report", caller_report))
        return MLAJIT_ERR_INVALID_ARGUMENT;
    mlajit_warmup_report report = MLAJIT_WARMUP_REPORT_INIT;
    int rc = warmup(ctx, caller_grid, threads, &report, t0);
    if (caller_report)
        mlajit_abi_out(MLAJIT_ABI_WARMUP_REPORT, caller_report, &report);
    return rc;
}
