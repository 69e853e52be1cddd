/* The Driver API table, opened with dlopen at first use. The one process-wide
 * state of the library: the driver itself is process-wide. */
#include "runtime/driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static mlajit_driver driver_table;
static int driver_status = MLAJIT_ERR_NO_DEVICE;
static char driver_message[512];

#define REQUIRED(field, symbol) {(void **)&driver_table.field, symbol, 1}
#define OPTIONAL(field, symbol) {(void **)&driver_table.field, symbol, 0}

static void driver_open(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(driver_message, sizeof driver_message, "no CUDA driver: dlopen(libcuda.so.1) failed: %s", dlerror());
        return;
    }
    const struct { void **slot; const char *name; int required; } symbols[] = {
        REQUIRED(cuInit, "cuInit"),
        REQUIRED(cuDriverGetVersion, "cuDriverGetVersion"),
        REQUIRED(cuGetErrorString, "cuGetErrorString"),
        REQUIRED(cuDeviceGetCount, "cuDeviceGetCount"),
        REQUIRED(cuDeviceGet, "cuDeviceGet"),
        REQUIRED(cuDeviceGetName, "cuDeviceGetName"),
        REQUIRED(cuDeviceGetAttribute, "cuDeviceGetAttribute"),
        REQUIRED(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
        REQUIRED(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
        REQUIRED(cuCtxGetCurrent, "cuCtxGetCurrent"),
        REQUIRED(cuCtxSetCurrent, "cuCtxSetCurrent"),
        REQUIRED(cuCtxPushCurrent, "cuCtxPushCurrent_v2"),
        REQUIRED(cuCtxPopCurrent, "cuCtxPopCurrent_v2"),
        REQUIRED(cuCtxSynchronize, "cuCtxSynchronize"),
        REQUIRED(cuModuleLoadData, "cuModuleLoadData"),
        REQUIRED(cuModuleUnload, "cuModuleUnload"),
        REQUIRED(cuModuleGetFunction, "cuModuleGetFunction"),
        OPTIONAL(cuLibraryLoadData, "cuLibraryLoadData"),
        OPTIONAL(cuLibraryUnload, "cuLibraryUnload"),
        OPTIONAL(cuLibraryGetKernel, "cuLibraryGetKernel"),
        OPTIONAL(cuKernelGetFunction, "cuKernelGetFunction"),
        REQUIRED(cuFuncSetAttribute, "cuFuncSetAttribute"),
        REQUIRED(cuFuncGetAttribute, "cuFuncGetAttribute"),
        REQUIRED(cuLaunchKernel, "cuLaunchKernel"),
        OPTIONAL(cuLaunchKernelEx, "cuLaunchKernelEx"),
        REQUIRED(cuMemAlloc, "cuMemAlloc_v2"),
        REQUIRED(cuMemFree, "cuMemFree_v2"),
        REQUIRED(cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
        REQUIRED(cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
        REQUIRED(cuMemcpyDtoD, "cuMemcpyDtoD_v2"),
        REQUIRED(cuMemsetD8, "cuMemsetD8_v2"),
        REQUIRED(cuStreamCreate, "cuStreamCreate"),
        REQUIRED(cuStreamDestroy, "cuStreamDestroy_v2"),
        REQUIRED(cuStreamSynchronize, "cuStreamSynchronize"),
        REQUIRED(cuStreamBeginCapture, "cuStreamBeginCapture_v2"),
        REQUIRED(cuStreamEndCapture, "cuStreamEndCapture"),
        REQUIRED(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags"),
        REQUIRED(cuGraphLaunch, "cuGraphLaunch"),
        REQUIRED(cuGraphExecDestroy, "cuGraphExecDestroy"),
        REQUIRED(cuGraphDestroy, "cuGraphDestroy"),
        REQUIRED(cuEventCreate, "cuEventCreate"),
        REQUIRED(cuEventDestroy, "cuEventDestroy_v2"),
        REQUIRED(cuEventRecord, "cuEventRecord"),
        REQUIRED(cuEventSynchronize, "cuEventSynchronize"),
        REQUIRED(cuEventElapsedTime, "cuEventElapsedTime"),
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        *symbols[i].slot = dlsym(lib, symbols[i].name);
        if (!*symbols[i].slot && symbols[i].required) {
            snprintf(driver_message, sizeof driver_message, "CUDA driver too old: libcuda.so.1 lacks %s",
                     symbols[i].name);
            return;
        }
    }
    /* The library-based loader needs all four entry points; else modules. */
    if (!driver_table.cuLibraryLoadData || !driver_table.cuLibraryGetKernel || !driver_table.cuKernelGetFunction ||
        !driver_table.cuLibraryUnload)
        driver_table.cuLibraryLoadData = NULL;
    CUresult r = driver_table.cuInit(0);
    if (r != MLAJIT_CU_SUCCESS) {
        const char *s = NULL;
        driver_table.cuGetErrorString(r, &s);
        snprintf(driver_message, sizeof driver_message, "no usable GPU: cuInit failed with %d (%s)", r,
                 s ? s : "unknown");
        return;
    }
    driver_status = MLAJIT_OK;
}

const mlajit_driver *mlajit_driver_get(int *status)
{
    pthread_once(&driver_once, driver_open);
    if (status)
        *status = driver_status;
    if (driver_status != MLAJIT_OK) {
        mlajit_fail(driver_status, "%s", driver_message);
        return NULL;
    }
    return &driver_table;
}

int mlajit_cuda_fail(const mlajit_driver *drv, CUresult r, const char *what)
{
    const char *s = NULL;
    if (drv && drv->cuGetErrorString)
        drv->cuGetErrorString(r, &s);
    return mlajit_fail(MLAJIT_ERR_CUDA, "%s failed: CUDA error %d (%s)", what, r, s ? s : "unknown");
}
