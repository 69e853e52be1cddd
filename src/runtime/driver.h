/* Internal: the CUDA Driver API, opened with dlopen("libcuda.so.1") at first use
 * so that the library loads, generates, compiles and caches on machines without
 * a driver. Only the few types used here are declared (no cuda.h). */
#ifndef MLAJIT_RUNTIME_DRIVER_H
#define MLAJIT_RUNTIME_DRIVER_H
#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUlib_st *CUlibrary;
typedef struct CUkern_st *CUkernel;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef unsigned long long CUdeviceptr;

enum {
    MLAJIT_CU_SUCCESS = 0,
    MLAJIT_CU_ATTR_CLOCK_RATE = 13, /* the max SM clock, kHz: a tactic's GPU identity (cache/tactics.h) */
    MLAJIT_CU_ATTR_MULTIPROCESSOR_COUNT = 16,
    MLAJIT_CU_ATTR_L2_CACHE_SIZE = 38,
    MLAJIT_CU_ATTR_CC_MAJOR = 75,
    MLAJIT_CU_ATTR_CC_MINOR = 76,
    MLAJIT_CU_ATTR_MAX_SMEM_OPTIN = 97,
    MLAJIT_CU_FUNC_ATTR_LOCAL_SIZE = 3,
    MLAJIT_CU_FUNC_ATTR_NUM_REGS = 4,
    MLAJIT_CU_FUNC_ATTR_MAX_DYNAMIC_SMEM = 8,
    MLAJIT_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    MLAJIT_CU_STREAM_NON_BLOCKING = 1,
};

/* cuLaunchKernelEx's config and attributes, laid out as cuda.h declares them
 * (CUlaunchConfig, CUlaunchAttribute; tests/test_nvrtc.c pins the offsets, taken
 * from CUDA 13.0's header). Only the attribute used here is named. */
enum { MLAJIT_CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6 };

typedef struct mlajit_cu_launch_attribute {
    int id;
    char pad[4];
    union {
        char bytes[64];
        unsigned long long align; /* the union holds pointers and size_t in cuda.h */
        int programmatic_stream_serialization_allowed;
    } value;
} mlajit_cu_launch_attribute;

typedef struct mlajit_cu_launch_config {
    unsigned grid_x, grid_y, grid_z;
    unsigned block_x, block_y, block_z;
    unsigned shared_bytes;
    CUstream stream;
    mlajit_cu_launch_attribute *attrs;
    unsigned num_attrs;
} mlajit_cu_launch_config;

typedef struct mlajit_driver {
    CUresult (*cuInit)(unsigned);
    CUresult (*cuDriverGetVersion)(int *);
    CUresult (*cuGetErrorString)(CUresult, const char **);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetName)(char *, int, CUdevice);
    CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxPushCurrent)(CUcontext);
    CUresult (*cuCtxPopCurrent)(CUcontext *);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuLibraryLoadData)(CUlibrary *, const void *, void *, void **, unsigned, void *, void **, unsigned);
    CUresult (*cuLibraryUnload)(CUlibrary);
    CUresult (*cuLibraryGetKernel)(CUkernel *, CUlibrary, const char *);
    CUresult (*cuKernelGetFunction)(CUfunction *, CUkernel);
    CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
    CUresult (*cuFuncGetAttribute)(int *, int, CUfunction);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               CUstream, void **, void **);
    /* optional (CUDA 12.0 on): NULL where the driver lacks it */
    CUresult (*cuLaunchKernelEx)(const mlajit_cu_launch_config *, CUfunction, void **, void **);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
    CUresult (*cuStreamCreate)(CUstream *, unsigned);
    CUresult (*cuStreamDestroy)(CUstream);
    CUresult (*cuStreamSynchronize)(CUstream);
    CUresult (*cuStreamBeginCapture)(CUstream, int);
    CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
    CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
    CUresult (*cuGraphExecDestroy)(CUgraphExec);
    CUresult (*cuGraphDestroy)(CUgraph);
    CUresult (*cuEventCreate)(CUevent *, unsigned);
    CUresult (*cuEventDestroy)(CUevent);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
} mlajit_driver;

/* The driver table, opened and cuInit'ed once per process. NULL (with the
 * reason in mlajit_last_error and MLAJIT_ERR_NO_DEVICE in *status) when there
 * is no libcuda.so.1 or cuInit fails. */
const mlajit_driver *mlajit_driver_get(int *status);

/* Turn a failed driver call into MLAJIT_ERR_CUDA with "what: CUDA_ERROR_..." */
int mlajit_cuda_fail(const mlajit_driver *drv, CUresult r, const char *what);

#endif
