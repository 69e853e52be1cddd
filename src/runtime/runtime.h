/* Internal: the context, its kernel map and plans. */
#ifndef MLAJIT_RUNTIME_RUNTIME_H
#define MLAJIT_RUNTIME_RUNTIME_H
#include <pthread.h>

#include "cache/store.h"
#include "codegen/codegen.h"
#include "mlajit.h"
#include "runtime/driver.h"

/* A kernel the context has seen: its cubin, and once loaded its functions. */
typedef struct mlajit_kernel {
    mlajit_cache_key key;
    mlajit_kernel_spec spec;     /* resolved */
    mlajit_kernel_layout layout;
    mlajit_kernel_report report; /* as first prepared */
    void *cubin;
    size_t cubin_size;
    int loaded;
    CUlibrary library;           /* one of library / module is set once loaded */
    CUmodule module;
    CUfunction main_fn, combine_fn;
} mlajit_kernel;

struct mlajit_context {
    int device_ordinal;
    unsigned flags;
    const mlajit_driver *drv;    /* NULL without a device */
    CUdevice device;
    CUcontext primary;
    char arch[MLAJIT_ARCH_LEN];  /* default target: the device's, else sm_90a */
    char device_name[128];
    int sm_count;
    int max_smem_optin;
    int driver_version;
    int nvrtc_major, nvrtc_minor;
    uint64_t templates_hash;
    mlajit_store *store;         /* NULL when the disk cache is off or unusable */
    char cache_dir[1024];
    pthread_mutex_t lock;        /* guards kernels / kernel_count */
    mlajit_kernel **kernels;
    size_t kernel_count, kernel_cap;
};

struct mlajit_plan {
    mlajit_context *ctx;
    const mlajit_kernel *kernel;
    mlajit_decode_shape shape;
    const mlajit_model_desc *model;
    int head_groups, rows, num_tiles, num_splits, tiles_per_split;
    size_t partial_out_bytes, workspace_bytes;
};

/* Look up or build the kernel for spec (arch "" = the context's). With load,
 * also load it onto the device (needs a device whose arch matches). */
int mlajit_kernel_acquire(mlajit_context *ctx, const mlajit_kernel_spec *spec, int load,
                          const mlajit_kernel **out, mlajit_kernel_report *report);

/* Make the context's primary CUDA context current on this thread if no context
 * is; returns 1 when it pushed one (pop it with mlajit_context_leave). */
int mlajit_context_enter(mlajit_context *ctx);
void mlajit_context_leave(mlajit_context *ctx, int pushed);

#endif
