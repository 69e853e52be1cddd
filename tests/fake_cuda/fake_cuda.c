/* The fake CUDA driver (fake_cuda.h says what it is for). Every entry point is
 * defined against cuda.h's own prototype, so a signature that drifts from the
 * real driver's fails to compile here. One lock guards the state; the context
 * stack is per thread, as the driver's is. */
#include "fake_cuda.h"

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DEVICES 8
#define MAX_FAILURES 8
#define MAX_LAUNCHES 256
#define MAX_FUNCTIONS 8
#define MAX_CONTEXT_DEPTH 16
#define ELF_MACHINE_CUDA 190

typedef struct fake_function {
    struct fake_image *image;
    char name[96];
    int max_dynamic_smem; /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 48 KiB until set */
} fake_function;

/* A loaded image: cuLibraryLoadData's library or cuModuleLoadData's module.
 * Its functions are its kernels, CUkernel and CUfunction alike. */
typedef struct fake_image {
    unsigned char *bytes;
    size_t size;
    int live;
    fake_function functions[MAX_FUNCTIONS];
    int function_count;
    struct fake_image *next; /* every image ever loaded, for fake_cuda_function_attribute */
} fake_image;

typedef struct fake_stream {
    int capturing;
    struct fake_graph *capture;
    struct fake_stream *next; /* the live streams, to refuse a handle that is not one */
} fake_stream;

/* Graphs and their instances hold nothing the tests read (a captured launch is
 * recorded with `captured` set); the tag tells a handle from any other pointer. */
enum { kGraphTag = 0x47524150, kExecTag = 0x45584543 };
typedef struct fake_graph {
    unsigned tag;
} fake_graph;

typedef struct fake_exec {
    unsigned tag;
} fake_exec;

typedef struct fake_event {
    struct timespec when;
    int recorded;
} fake_event;

typedef struct allocation {
    void *host;
    struct allocation *next;
} allocation;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int device_count = 1;
static fake_cuda_device device;
static char device_name[128];
static struct {
    char entry[64];
    int result, skip;
} failures[MAX_FAILURES];
static int refuse_programmatic;
static size_t param_bytes;
static fake_cuda_launch launches[MAX_LAUNCHES];
static fake_cuda_counts counts;
static fake_image *images;
static allocation *allocations;
static fake_stream *streams;
static int captures_open; /* streams capturing now: the calls that would sync fail, as in global capture mode */
static int primary_contexts[MAX_DEVICES]; /* the CUcontext handles point at these */

static __thread CUcontext context_stack[MAX_CONTEXT_DEPTH];
static __thread int context_depth;

static const fake_cuda_device default_device = {
    .name = "Fake NVIDIA H200", .cc_major = 9, .cc_minor = 0, .sm_count = 132,
    .l2_bytes = 50 * 1024 * 1024, .max_smem_optin = 232448, .clock_khz = 1980000,
};

static void set_device_locked(const fake_cuda_device *d)
{
    device = d ? *d : default_device;
    snprintf(device_name, sizeof device_name, "%s", device.name ? device.name : "Fake GPU");
    device.name = device_name;
}

__attribute__((constructor)) static void fake_cuda_start(void) { set_device_locked(NULL); }

void fake_cuda_set_devices(int count, const fake_cuda_device *d)
{
    pthread_mutex_lock(&lock);
    device_count = count < 0 ? 0 : count > MAX_DEVICES ? MAX_DEVICES : count;
    set_device_locked(d);
    pthread_mutex_unlock(&lock);
}

void fake_cuda_fail(const char *entry, int result, int skip)
{
    pthread_mutex_lock(&lock);
    int slot = -1;
    for (int i = 0; i < MAX_FAILURES; i++)
        if (strcmp(failures[i].entry, entry) == 0 || (slot < 0 && !failures[i].entry[0]))
            slot = i;
    if (slot >= 0) {
        if (result == 0)
            memset(&failures[slot], 0, sizeof failures[slot]);
        else {
            snprintf(failures[slot].entry, sizeof failures[slot].entry, "%s", entry);
            failures[slot].result = result;
            failures[slot].skip = skip;
        }
    }
    pthread_mutex_unlock(&lock);
}

void fake_cuda_refuse_programmatic(int refuse)
{
    pthread_mutex_lock(&lock);
    refuse_programmatic = refuse;
    pthread_mutex_unlock(&lock);
}

void fake_cuda_set_param_bytes(size_t bytes)
{
    pthread_mutex_lock(&lock);
    param_bytes = bytes > sizeof launches[0].params ? sizeof launches[0].params : bytes;
    pthread_mutex_unlock(&lock);
}

fake_cuda_counts fake_cuda_counts_get(void)
{
    pthread_mutex_lock(&lock);
    fake_cuda_counts c = counts;
    pthread_mutex_unlock(&lock);
    c.context_depth = context_depth;
    return c;
}

const fake_cuda_launch *fake_cuda_launch_at(int i)
{
    pthread_mutex_lock(&lock);
    const fake_cuda_launch *l = i >= 0 && i < counts.launches && i < MAX_LAUNCHES ? &launches[i] : NULL;
    pthread_mutex_unlock(&lock);
    return l;
}

void fake_cuda_forget_launches(void)
{
    pthread_mutex_lock(&lock);
    counts.launches = 0;
    counts.launch_ex_calls = 0;
    pthread_mutex_unlock(&lock);
}

int fake_cuda_function_attribute(const char *name, int attribute)
{
    int value = -1;
    pthread_mutex_lock(&lock);
    for (fake_image *im = images; im && value < 0; im = im->next)
        for (int i = 0; i < im->function_count; i++)
            if (strcmp(im->functions[i].name, name) == 0 &&
                attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
                value = im->functions[i].max_dynamic_smem;
    pthread_mutex_unlock(&lock);
    return value;
}

/* The injected result for this call of `entry`, or CUDA_SUCCESS. Lock held. */
static CUresult injected(const char *entry)
{
    for (int i = 0; i < MAX_FAILURES; i++)
        if (strcmp(failures[i].entry, entry) == 0) {
            if (failures[i].skip > 0) {
                failures[i].skip--;
                return CUDA_SUCCESS;
            }
            return (CUresult)failures[i].result;
        }
    return CUDA_SUCCESS;
}

#define ENTER(name)                                                                                                    \
    pthread_mutex_lock(&lock);                                                                                         \
    CUresult injected_result = injected(name);                                                                         \
    if (injected_result != CUDA_SUCCESS) {                                                                             \
        pthread_mutex_unlock(&lock);                                                                                   \
        return injected_result;                                                                                        \
    }
#define LEAVE(result)                                                                                                  \
    do {                                                                                                               \
        pthread_mutex_unlock(&lock);                                                                                   \
        return (result);                                                                                               \
    } while (0)

/* ---- init, devices, errors ------------------------------------------------ */

CUresult cuInit(unsigned int flags)
{
    ENTER("cuInit");
    LEAVE(flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS);
}

CUresult cuDriverGetVersion(int *version)
{
    ENTER("cuDriverGetVersion");
    *version = 13000;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuGetErrorString(CUresult error, const char **str)
{
    static const struct { CUresult code; const char *text; } texts[] = {
        {CUDA_SUCCESS, "no error"},
        {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
        {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
        {CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"},
        {CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"},
        {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
        {CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"},
        {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"},
        {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
        {CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"},
        {CUDA_ERROR_NOT_SUPPORTED, "operation not supported"},
        {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"},
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        if (texts[i].code == error) {
            *str = texts[i].text;
            return CUDA_SUCCESS;
        }
    *str = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* NVRTC opens libcuda.so.1 too (the fake, in this process) and asks it for the
 * driver's private tables, which a fake has none of. */
CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
    *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult cuDeviceGetCount(int *count)
{
    ENTER("cuDeviceGetCount");
    *count = device_count;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
    ENTER("cuDeviceGet");
    if (ordinal < 0 || ordinal >= device_count)
        LEAVE(CUDA_ERROR_INVALID_DEVICE);
    *dev = ordinal;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    ENTER("cuDeviceGetName");
    if (dev < 0 || dev >= device_count || len <= 0)
        LEAVE(CUDA_ERROR_INVALID_VALUE);
    snprintf(name, (size_t)len, "%s", device.name);
    LEAVE(CUDA_SUCCESS);
}

CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice dev)
{
    ENTER("cuDeviceGetAttribute");
    if (dev < 0 || dev >= device_count)
        LEAVE(CUDA_ERROR_INVALID_DEVICE);
    switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = device.cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = device.cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = device.sm_count; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *value = device.l2_bytes; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = device.max_smem_optin; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        if (!device.clock_khz)
            LEAVE(CUDA_ERROR_INVALID_VALUE);
        *value = device.clock_khz;
        break;
    default: LEAVE(CUDA_ERROR_INVALID_VALUE);
    }
    LEAVE(CUDA_SUCCESS);
}

/* ---- contexts ------------------------------------------------------------- */

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    ENTER("cuDevicePrimaryCtxRetain");
    if (dev < 0 || dev >= device_count)
        LEAVE(CUDA_ERROR_INVALID_DEVICE);
    counts.primary_retained++;
    *ctx = (CUcontext)(void *)&primary_contexts[dev];
    LEAVE(CUDA_SUCCESS);
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    ENTER("cuDevicePrimaryCtxRelease_v2");
    if (dev < 0 || dev >= device_count)
        LEAVE(CUDA_ERROR_INVALID_DEVICE);
    if (counts.primary_retained <= 0)
        LEAVE(CUDA_ERROR_INVALID_CONTEXT);
    counts.primary_retained--;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuCtxGetCurrent(CUcontext *ctx)
{
    ENTER("cuCtxGetCurrent");
    *ctx = context_depth ? context_stack[context_depth - 1] : NULL;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
    ENTER("cuCtxSetCurrent");
    if (!ctx) {
        if (context_depth)
            context_depth--;
    } else if (context_depth) {
        context_stack[context_depth - 1] = ctx;
    } else {
        context_stack[context_depth++] = ctx;
    }
    LEAVE(CUDA_SUCCESS);
}

CUresult cuCtxPushCurrent(CUcontext ctx)
{
    ENTER("cuCtxPushCurrent_v2");
    if (!ctx || context_depth == MAX_CONTEXT_DEPTH)
        LEAVE(CUDA_ERROR_INVALID_VALUE);
    context_stack[context_depth++] = ctx;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuCtxPopCurrent(CUcontext *ctx)
{
    ENTER("cuCtxPopCurrent_v2");
    if (!context_depth)
        LEAVE(CUDA_ERROR_INVALID_CONTEXT);
    context_depth--;
    if (ctx)
        *ctx = context_stack[context_depth];
    LEAVE(CUDA_SUCCESS);
}

CUresult cuCtxSynchronize(void)
{
    ENTER("cuCtxSynchronize");
    if (captures_open)
        LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    LEAVE(context_depth ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT);
}

/* ---- images and functions ----------------------------------------------- */

/* Copy an ELF image for the CUDA machine; its size comes from the section
 * headers' end, as the driver reads it (the image is not length-prefixed).
 * Lock held. */
static CUresult image_load(const void *data, fake_image **out)
{
    const unsigned char *e = data;
    if (!context_depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!e || memcmp(e, "\x7f" "ELF", 4) != 0 || e[4] != 2 || e[5] != 1)
        return CUDA_ERROR_INVALID_IMAGE;
    uint16_t machine;
    uint64_t shoff;
    uint16_t shentsize, shnum;
    memcpy(&machine, e + 0x12, 2);
    memcpy(&shoff, e + 0x28, 8);
    memcpy(&shentsize, e + 0x3a, 2);
    memcpy(&shnum, e + 0x3c, 2);
    if (machine != ELF_MACHINE_CUDA || shentsize < 64 || shnum == 0 || shoff > (64u << 20))
        return CUDA_ERROR_INVALID_IMAGE;
    fake_image *im = calloc(1, sizeof *im);
    if (!im)
        return CUDA_ERROR_OUT_OF_MEMORY;
    im->size = (size_t)shoff + (size_t)shentsize * shnum;
    im->bytes = malloc(im->size);
    if (!im->bytes) {
        free(im);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(im->bytes, e, im->size);
    im->live = 1;
    im->next = images;
    images = im;
    counts.images_loaded++;
    counts.images_live++;
    *out = im;
    return CUDA_SUCCESS;
}

static CUresult image_unload(fake_image *im)
{
    fake_image *known = images;
    while (known && known != im)
        known = known->next;
    if (!known || !im->live)
        return CUDA_ERROR_INVALID_HANDLE;
    im->live = 0;
    counts.images_live--;
    return CUDA_SUCCESS;
}

/* The function named `name` of a live image: found when the name, NUL-ended,
 * is in its bytes (a symbol string). Lock held. */
static CUresult image_function(fake_image *im, const char *name, fake_function **out)
{
    if (!im || !im->live)
        return CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < im->function_count; i++)
        if (strcmp(im->functions[i].name, name) == 0) {
            *out = &im->functions[i];
            return CUDA_SUCCESS;
        }
    size_t n = strlen(name) + 1;
    if (!memmem(im->bytes, im->size, name, n) || n > sizeof im->functions[0].name ||
        im->function_count == MAX_FUNCTIONS)
        return CUDA_ERROR_NOT_FOUND;
    fake_function *f = &im->functions[im->function_count++];
    f->image = im;
    memcpy(f->name, name, n);
    f->max_dynamic_smem = 48 * 1024;
    *out = f;
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    ENTER("cuModuleLoadData");
    fake_image *im = NULL;
    CUresult r = image_load(image, &im);
    if (r == CUDA_SUCCESS)
        *module = (CUmodule)(void *)im;
    LEAVE(r);
}

CUresult cuModuleUnload(CUmodule module)
{
    ENTER("cuModuleUnload");
    LEAVE(image_unload((fake_image *)(void *)module));
}

CUresult cuModuleGetFunction(CUfunction *fn, CUmodule module, const char *name)
{
    ENTER("cuModuleGetFunction");
    fake_function *f = NULL;
    CUresult r = image_function((fake_image *)(void *)module, name, &f);
    if (r == CUDA_SUCCESS)
        *fn = (CUfunction)(void *)f;
    LEAVE(r);
}

#ifndef FAKE_CUDA_11
CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jit_options, void **jit_values,
                           unsigned int jit_count, CUlibraryOption *library_options, void **library_values,
                           unsigned int library_count)
{
    ENTER("cuLibraryLoadData");
    if (jit_count || library_count)
        LEAVE(CUDA_ERROR_INVALID_VALUE);
    fake_image *im = NULL;
    CUresult r = image_load(code, &im);
    if (r == CUDA_SUCCESS)
        *library = (CUlibrary)(void *)im;
    LEAVE(r);
}

CUresult cuLibraryUnload(CUlibrary library)
{
    ENTER("cuLibraryUnload");
    LEAVE(image_unload((fake_image *)(void *)library));
}

CUresult cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name)
{
    ENTER("cuLibraryGetKernel");
    fake_function *f = NULL;
    CUresult r = image_function((fake_image *)(void *)library, name, &f);
    if (r == CUDA_SUCCESS)
        *kernel = (CUkernel)(void *)f;
    LEAVE(r);
}

CUresult cuKernelGetFunction(CUfunction *fn, CUkernel kernel)
{
    ENTER("cuKernelGetFunction");
    if (!context_depth)
        LEAVE(CUDA_ERROR_INVALID_CONTEXT);
    fake_function *f = (fake_function *)(void *)kernel;
    if (!f || !f->image->live)
        LEAVE(CUDA_ERROR_INVALID_HANDLE);
    *fn = (CUfunction)(void *)f;
    LEAVE(CUDA_SUCCESS);
}
#endif

static int function_usable(const fake_function *f) { return f && f->image && f->image->live; }

CUresult cuFuncSetAttribute(CUfunction fn, CUfunction_attribute attribute, int value)
{
    ENTER("cuFuncSetAttribute");
    fake_function *f = (fake_function *)(void *)fn;
    if (!function_usable(f))
        LEAVE(CUDA_ERROR_INVALID_HANDLE);
    if (attribute != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (value < 0 || value > device.max_smem_optin)
        LEAVE(CUDA_ERROR_INVALID_VALUE);
    f->max_dynamic_smem = value;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attribute, CUfunction fn)
{
    ENTER("cuFuncGetAttribute");
    const fake_function *f = (const fake_function *)(void *)fn;
    if (!function_usable(f))
        LEAVE(CUDA_ERROR_INVALID_HANDLE);
    switch (attribute) {
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = 128; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *value = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = f->max_dynamic_smem; break;
    default: LEAVE(CUDA_ERROR_INVALID_VALUE);
    }
    LEAVE(CUDA_SUCCESS);
}

/* ---- launches ------------------------------------------------------------- */

/* 1 when s is a stream cuStreamCreate made and cuStreamDestroy has not ended.
 * Lock held. */
static int stream_live(const fake_stream *s)
{
    for (const fake_stream *t = streams; t; t = t->next)
        if (t == s)
            return 1;
    return 0;
}

/* Check a launch as the driver does, then record it. Lock held. */
static CUresult launch(const fake_function *f, const unsigned grid[3], const unsigned block[3], unsigned smem,
                       CUstream stream, void **params, void **extra, int extended, int programmatic)
{
    if (!context_depth)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!function_usable(f))
        return CUDA_ERROR_INVALID_HANDLE;
    if (extra || !params)
        return CUDA_ERROR_INVALID_VALUE;
    if (!grid[0] || !grid[1] || !grid[2] || grid[0] > 0x7fffffffu || grid[1] > 65535 || grid[2] > 65535)
        return CUDA_ERROR_INVALID_VALUE;
    if (!block[0] || !block[1] || !block[2] || (unsigned long)block[0] * block[1] * block[2] > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    if (smem > (unsigned)f->max_dynamic_smem)
        return CUDA_ERROR_INVALID_VALUE;
    fake_stream *s = (fake_stream *)(void *)stream;
    if (s && !stream_live(s))
        return CUDA_ERROR_INVALID_HANDLE;
    if (counts.launches < MAX_LAUNCHES) {
        fake_cuda_launch *l = &launches[counts.launches];
        memset(l, 0, sizeof *l);
        snprintf(l->function, sizeof l->function, "%s", f->name);
        memcpy(l->grid, grid, sizeof l->grid);
        memcpy(l->block, block, sizeof l->block);
        l->shared_bytes = smem;
        l->stream = stream;
        l->extended = extended;
        l->programmatic = programmatic;
        l->captured = s && s->capturing;
        if (param_bytes)
            memcpy(l->params, params[0], param_bytes);
    }
    counts.launches++;
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                        unsigned int by, unsigned int bz, unsigned int smem, CUstream stream, void **params,
                        void **extra)
{
    ENTER("cuLaunchKernel");
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    LEAVE(launch((const fake_function *)(void *)fn, grid, block, smem, stream, params, extra, 0, 0));
}

#ifndef FAKE_CUDA_11
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction fn, void **params, void **extra)
{
    ENTER("cuLaunchKernelEx");
    counts.launch_ex_calls++;
    if (!config)
        LEAVE(CUDA_ERROR_INVALID_VALUE);
    int programmatic = 0;
    for (unsigned i = 0; i < config->numAttrs; i++) {
        const CUlaunchAttribute *a = &config->attrs[i];
        if (a->id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
            LEAVE(CUDA_ERROR_INVALID_VALUE);
        if (refuse_programmatic)
            LEAVE(CUDA_ERROR_NOT_SUPPORTED);
        programmatic = a->value.programmaticStreamSerializationAllowed != 0;
    }
    const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
    const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
    LEAVE(launch((const fake_function *)(void *)fn, grid, block, config->sharedMemBytes, config->hStream, params, extra,
                 1, programmatic));
}
#endif

/* ---- memory ----------------------------------------------------------------- */

CUresult cuMemAlloc(CUdeviceptr *ptr, size_t bytes)
{
    ENTER("cuMemAlloc_v2");
    if (captures_open)
        LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    if (!context_depth)
        LEAVE(CUDA_ERROR_INVALID_CONTEXT);
    if (!bytes)
        LEAVE(CUDA_ERROR_INVALID_VALUE);
    allocation *a = malloc(sizeof *a);
    void *host = aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!a || !host) {
        free(a);
        free(host);
        LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    }
    a->host = host;
    a->next = allocations;
    allocations = a;
    counts.allocations_live++;
    *ptr = (CUdeviceptr)(uintptr_t)host;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuMemFree(CUdeviceptr ptr)
{
    ENTER("cuMemFree_v2");
    if (captures_open)
        LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    for (allocation **p = &allocations; *p; p = &(*p)->next)
        if ((uintptr_t)(*p)->host == ptr) {
            allocation *a = *p;
            *p = a->next;
            free(a->host);
            free(a);
            counts.allocations_live--;
            LEAVE(CUDA_SUCCESS);
        }
    LEAVE(CUDA_ERROR_INVALID_VALUE);
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t bytes)
{
    ENTER("cuMemcpyHtoD_v2");
    if (captures_open)
        LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    memcpy((void *)(uintptr_t)dst, src, bytes);
    LEAVE(CUDA_SUCCESS);
}

CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t bytes)
{
    ENTER("cuMemcpyDtoH_v2");
    if (captures_open)
        LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    LEAVE(CUDA_SUCCESS);
}

CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
    ENTER("cuMemcpyDtoD_v2");
    if (captures_open)
        LEAVE(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
    LEAVE(CUDA_SUCCESS);
}

CUresult cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t bytes)
{
    ENTER("cuMemsetD8_v2");
    memset((void *)(uintptr_t)dst, value, bytes);
    LEAVE(CUDA_SUCCESS);
}

/* ---- streams, graphs, events ------------------------------------------------ */

CUresult cuStreamCreate(CUstream *stream, unsigned int flags)
{
    ENTER("cuStreamCreate");
    fake_stream *s = calloc(1, sizeof *s);
    if (!s)
        LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    s->next = streams;
    streams = s;
    counts.streams_live++;
    *stream = (CUstream)(void *)s;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuStreamDestroy(CUstream stream)
{
    ENTER("cuStreamDestroy_v2");
    fake_stream *s = (fake_stream *)(void *)stream;
    if (!s || !stream_live(s))
        LEAVE(CUDA_ERROR_INVALID_HANDLE);
    for (fake_stream **p = &streams; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    free(s->capture);
    free(s);
    counts.streams_live--;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuStreamSynchronize(CUstream stream)
{
    ENTER("cuStreamSynchronize");
    LEAVE(captures_open ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS);
}

CUresult cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode mode)
{
    ENTER("cuStreamBeginCapture_v2");
    fake_stream *s = (fake_stream *)(void *)stream;
    if (!s || !stream_live(s) || s->capturing)
        LEAVE(CUDA_ERROR_INVALID_VALUE);
    if (!(s->capture = calloc(1, sizeof *s->capture)))
        LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    s->capture->tag = kGraphTag;
    s->capturing = 1;
    captures_open++;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph)
{
    ENTER("cuStreamEndCapture");
    fake_stream *s = (fake_stream *)(void *)stream;
    if (!s || !stream_live(s) || !s->capturing)
        LEAVE(CUDA_ERROR_INVALID_VALUE);
    s->capturing = 0;
    captures_open--;
    *graph = (CUgraph)(void *)s->capture;
    s->capture = NULL;
    counts.graphs_live++;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
    ENTER("cuGraphInstantiateWithFlags");
    if (!graph || ((fake_graph *)(void *)graph)->tag != kGraphTag)
        LEAVE(CUDA_ERROR_INVALID_HANDLE);
    fake_exec *e = calloc(1, sizeof *e);
    if (!e)
        LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    e->tag = kExecTag;
    counts.execs_live++;
    *exec = (CUgraphExec)(void *)e;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream)
{
    ENTER("cuGraphLaunch");
    LEAVE(exec && ((fake_exec *)(void *)exec)->tag == kExecTag ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE);
}

CUresult cuGraphExecDestroy(CUgraphExec exec)
{
    ENTER("cuGraphExecDestroy");
    if (!exec || ((fake_exec *)(void *)exec)->tag != kExecTag)
        LEAVE(CUDA_ERROR_INVALID_HANDLE);
    free(exec);
    counts.execs_live--;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuGraphDestroy(CUgraph graph)
{
    ENTER("cuGraphDestroy");
    if (!graph || ((fake_graph *)(void *)graph)->tag != kGraphTag)
        LEAVE(CUDA_ERROR_INVALID_HANDLE);
    free(graph);
    counts.graphs_live--;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuEventCreate(CUevent *event, unsigned int flags)
{
    ENTER("cuEventCreate");
    fake_event *e = calloc(1, sizeof *e);
    if (!e)
        LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
    counts.events_live++;
    *event = (CUevent)(void *)e;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuEventDestroy(CUevent event)
{
    ENTER("cuEventDestroy_v2");
    free(event);
    counts.events_live--;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuEventRecord(CUevent event, CUstream stream)
{
    ENTER("cuEventRecord");
    fake_event *e = (fake_event *)(void *)event;
    clock_gettime(CLOCK_MONOTONIC, &e->when);
    e->recorded = 1;
    LEAVE(CUDA_SUCCESS);
}

CUresult cuEventSynchronize(CUevent event)
{
    ENTER("cuEventSynchronize");
    LEAVE(captures_open ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS);
}

/* CUDA 13's cuda.h maps the name to _v2; the driver exports both, and mlajit
 * opens the first. */
#undef cuEventElapsedTime
CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end);
CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    ENTER("cuEventElapsedTime");
    const fake_event *a = (const fake_event *)(void *)start, *b = (const fake_event *)(void *)end;
    if (!a->recorded || !b->recorded)
        LEAVE(CUDA_ERROR_INVALID_HANDLE);
    *ms = (float)((double)(b->when.tv_sec - a->when.tv_sec) * 1e3 + (double)(b->when.tv_nsec - a->when.tv_nsec) * 1e-6);
    LEAVE(CUDA_SUCCESS);
}
