/* A fake CUDA driver for the runtime suite: a libcuda.so.1 that implements the
 * Driver API entry points mlajit opens (src/runtime/driver.c) on the host, so
 * the runtime's driver-facing code (device discovery, loading, launching,
 * context push/pop, error paths) runs and is checked on a machine without a GPU.
 *
 * It launches nothing: a launch is recorded (grid, block, shared memory, the
 * programmatic-dependent attribute, the parameter block's bytes) and checked the
 * way the real driver checks it (a current context, a loaded function, dynamic
 * shared memory within the function's attribute, grid limits, a live stream).
 * While a stream captures, the calls that would synchronize or allocate fail with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, as in global capture mode. Device memory
 * is host memory. Images must be ELF files for the CUDA machine; a function exists
 * when its name is in the image.
 *
 * The test links this library (its soname is libcuda.so.1), so mlajit's
 * dlopen("libcuda.so.1") gets it. Two builds: the full one (the CUDA 12 entry
 * points) and FAKE_CUDA_11 (no cuLibrary*, no cuLaunchKernelEx), for the
 * fallbacks an older driver takes. Control functions are fake_cuda_*. */
#ifndef MLAJIT_TESTS_FAKE_CUDA_H
#define MLAJIT_TESTS_FAKE_CUDA_H
#include <stddef.h>

/* Driver results the tests name (values as cuda.h). */
enum {
    FAKE_CUDA_SUCCESS = 0,
    FAKE_CUDA_ERROR_INVALID_VALUE = 1,
    FAKE_CUDA_ERROR_OUT_OF_MEMORY = 2,
    FAKE_CUDA_ERROR_NO_DEVICE = 100,
    FAKE_CUDA_ERROR_INVALID_CONTEXT = 201,
    FAKE_CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    FAKE_CUDA_ERROR_NOT_FOUND = 500,
    FAKE_CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    FAKE_CUDA_ERROR_NOT_SUPPORTED = 801,
    FAKE_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
};

/* The device every ordinal reports. */
typedef struct fake_cuda_device {
    const char *name;
    int cc_major, cc_minor;
    int sm_count;
    int l2_bytes;
    int max_smem_optin; /* per block, opt-in */
    int clock_khz;      /* CU_DEVICE_ATTRIBUTE_CLOCK_RATE, the max SM clock; 0: the attribute fails */
} fake_cuda_device;

/* One recorded launch. */
typedef struct fake_cuda_launch {
    char function[96];      /* the entry's name */
    unsigned grid[3], block[3];
    unsigned shared_bytes;
    void *stream;
    int extended;           /* through cuLaunchKernelEx */
    int programmatic;       /* the programmatic stream serialization attribute, set to 1 */
    int captured;           /* recorded into a graph under stream capture, not run */
    _Alignas(16) unsigned char params[512]; /* the first fake_cuda_set_param_bytes() bytes of *kernelParams[0] */
} fake_cuda_launch;

/* Live-object counts, to check that everything made is released. */
typedef struct fake_cuda_counts {
    int images_loaded, images_live;     /* cuLibraryLoadData + cuModuleLoadData */
    int primary_retained;               /* retains minus releases */
    int context_depth;                  /* this thread's context stack */
    int allocations_live;
    int streams_live, events_live, graphs_live, execs_live;
    int launches;                       /* launches recorded (fake_cuda_launch_at) */
    int launch_ex_calls;                /* cuLaunchKernelEx calls, refused ones included */
} fake_cuda_counts;

/* The state starts with one default device (an H200: sm_90, 132 SMs, 50 MiB L2,
 * 227 KiB opt-in shared memory, 1980 MHz), no failures, nothing recorded; each
 * test runs in its own process, so it starts there. */

/* count devices (0..8), all like *device (NULL: the default). */
void fake_cuda_set_devices(int count, const fake_cuda_device *device);

/* Make `entry` (a Driver API name as libcuda exports it, e.g. "cuLibraryLoadData",
 * "cuMemAlloc_v2") return `result` from its (skip + 1)-th call on; result 0
 * removes the failure. At most 8 at once. */
void fake_cuda_fail(const char *entry, int result, int skip);

/* cuLaunchKernelEx refuses the programmatic-dependent attribute with
 * CUDA_ERROR_NOT_SUPPORTED (as a driver or device without it may). */
void fake_cuda_refuse_programmatic(int refuse);

/* How many bytes of the parameter block each launch copies (<= 512). */
void fake_cuda_set_param_bytes(size_t bytes);

fake_cuda_counts fake_cuda_counts_get(void);
const fake_cuda_launch *fake_cuda_launch_at(int i); /* NULL past the last */
void fake_cuda_forget_launches(void);

/* The value cuFuncSetAttribute gave `attribute` of the function named `name`
 * in the last image that holds it; -1 when never set. */
int fake_cuda_function_attribute(const char *name, int attribute);

#endif
