/* cuda_drv.h -- the part of the CUDA driver API (libcuda) that rtlib's CUDA
 * backend (dev_cuda.c) uses, declared by hand so that rtlib builds without
 * the CUDA toolkit: the driver is opened with dlopen at run time and never
 * linked, so nothing here needs the toolkit's cuda.h.
 *
 * Every value and function type below is the toolkit's (CUDA 13,
 * include/cuda.h).  The lists are X-macros so that tests/test_rt_cuda.c can
 * check each entry against cuda.h: when cuda.h has been included before this
 * header (CUDA_VERSION is defined), the types and constants are taken from
 * it instead of being declared here, and the test compares the constants'
 * values and the function types (cu_fn_*) with the real prototypes.
 *
 * Function names are the symbols libcuda exports (cuMemAlloc_v2, not the
 * cuMemAlloc macro of cuda.h): dlsym needs the exported name.  The test
 * double of the driver (tests/mock/) implements exactly the functions of
 * CU_DRV_FUNCS, so the backend uses no others.
 */
#ifndef NNSC_CUDA_DRV_H
#define NNSC_CUDA_DRV_H

#include <stddef.h>

/* CUresult values the backend tests for or names in messages. */
#define CU_DRV_RESULTS(X)                                                                  \
    X(CUDA_SUCCESS, 0)                      /* no error */                                 \
    X(CUDA_ERROR_INVALID_VALUE, 1)          /* an argument out of range */                 \
    X(CUDA_ERROR_OUT_OF_MEMORY, 2)          /* device (or pinned host) memory exhausted */ \
    X(CUDA_ERROR_NOT_INITIALIZED, 3)        /* cuInit has not run or failed */             \
    X(CUDA_ERROR_STUB_LIBRARY, 34)          /* this libcuda is the toolkit's link stub */  \
    X(CUDA_ERROR_NO_DEVICE, 100)            /* no CUDA-capable device is visible */        \
    X(CUDA_ERROR_INVALID_IMAGE, 200)        /* cuModuleLoadData: not a usable image */     \
    X(CUDA_ERROR_NO_BINARY_FOR_GPU, 209)    /* cuModuleLoadData: no code for this GPU */   \
    X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222) /* the image is newer than the driver */    \
    X(CUDA_ERROR_NOT_FOUND, 500)            /* cuModuleGetFunction: no such kernel */      \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, 700)      /* first of the errors a kernel raises ... */  \
    X(CUDA_ERROR_NOT_PERMITTED, 800)        /* ... which end before this one */

/* CUdevice_attribute values the backend reads (cuDeviceGetAttribute). */
#define CU_DRV_ATTRIBUTES(X)                                                               \
    X(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 5)             /* largest gridDim.x */           \
    X(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 6)             /* largest gridDim.y */           \
    X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 16)      /* SMs */                         \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 75)  /* compute capability X of X.Y */ \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 76)  /* and Y */

/* CUfunction_attribute values (cuFuncSetAttribute). */
#define CU_DRV_FUNC_ATTRIBUTES(X) \
    X(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8)   /* dynamic shared memory allowed */

/* Flags of cuStreamCreate (CUstream_flags) and cuEventCreate (CUevent_flags). */
#define CU_DRV_FLAGS(X)                                                                    \
    X(CU_STREAM_DEFAULT, 0)         /* a stream ordered with the legacy NULL stream */     \
    X(CU_STREAM_NON_BLOCKING, 1)    /* a stream not ordered with the NULL stream */        \
    X(CU_EVENT_DEFAULT, 0)          /* an event that records timing */                     \
    X(CU_EVENT_DISABLE_TIMING, 2)   /* an event for ordering only (cheaper) */

#ifndef CUDA_VERSION   /* the toolkit's cuda.h is not included: declare what it would */

/* Every driver call's status: CUDA_SUCCESS or an error code. */
typedef enum cudaError_enum {
#define CU_DRV_ENUM(name, value) name = value,
    CU_DRV_RESULTS(CU_DRV_ENUM)
} CUresult;

/* A device attribute for cuDeviceGetAttribute. */
typedef enum CUdevice_attribute_enum {
    CU_DRV_ATTRIBUTES(CU_DRV_ENUM)
} CUdevice_attribute;

/* A kernel attribute for cuFuncSetAttribute. */
typedef enum CUfunction_attribute_enum {
    CU_DRV_FUNC_ATTRIBUTES(CU_DRV_ENUM)
} CUfunction_attribute;

/* Stream and event creation flags. */
enum {
    CU_DRV_FLAGS(CU_DRV_ENUM)
};
#undef CU_DRV_ENUM

typedef int CUdevice;                         /* a device ordinal handle */
typedef unsigned long long CUdeviceptr;       /* a device address (64-bit hosts) */
typedef struct CUctx_st *CUcontext;           /* a context */
typedef struct CUmod_st *CUmodule;            /* a loaded image */
typedef struct CUfunc_st *CUfunction;         /* a kernel of a module */
typedef struct CUstream_st *CUstream;         /* a stream */
typedef struct CUevent_st *CUevent;           /* an event */

#endif /* CUDA_VERSION */

/* The driver functions the backend uses: X(exported name, parameter list).
 * All return CUresult. */
#define CU_DRV_FUNCS(X)                                                                    \
    X(cuInit, (unsigned int flags))                                                        \
    X(cuDriverGetVersion, (int *version))                                                  \
    X(cuGetErrorName, (CUresult error, const char **str))                                  \
    X(cuGetErrorString, (CUresult error, const char **str))                                \
    X(cuDeviceGetCount, (int *count))                                                      \
    X(cuDeviceGet, (CUdevice *device, int ordinal))                                        \
    X(cuDeviceGetAttribute, (int *value, CUdevice_attribute attrib, CUdevice dev))         \
    X(cuDeviceGetName, (char *name, int len, CUdevice dev))                                \
    X(cuDeviceTotalMem_v2, (size_t *bytes, CUdevice dev))                                  \
    X(cuDevicePrimaryCtxRetain, (CUcontext *pctx, CUdevice dev))                           \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice dev))                                        \
    X(cuCtxSetCurrent, (CUcontext ctx))                                                    \
    X(cuCtxSynchronize, (void))                                                            \
    X(cuModuleLoadData, (CUmodule *module, const void *image))                             \
    X(cuModuleUnload, (CUmodule module))                                                   \
    X(cuModuleGetFunction, (CUfunction *func, CUmodule module, const char *name))          \
    X(cuFuncSetAttribute, (CUfunction func, CUfunction_attribute attrib, int value))       \
    X(cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytes))                                    \
    X(cuMemFree_v2, (CUdeviceptr dptr))                                                    \
    X(cuMemAllocHost_v2, (void **pp, size_t bytes))                                        \
    X(cuMemFreeHost, (void *p))                                                            \
    X(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void *src, size_t bytes,               \
                             CUstream stream))                                             \
    X(cuMemcpyDtoHAsync_v2, (void *dst, CUdeviceptr src, size_t bytes, CUstream stream))   \
    X(cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t bytes,               \
                             CUstream stream))                                             \
    X(cuMemsetD8Async, (CUdeviceptr dst, unsigned char value, size_t n, CUstream stream))  \
    X(cuStreamCreate, (CUstream *stream, unsigned int flags))                              \
    X(cuStreamDestroy_v2, (CUstream stream))                                               \
    X(cuStreamSynchronize, (CUstream stream))                                              \
    X(cuEventCreate, (CUevent *event, unsigned int flags))                                 \
    X(cuEventDestroy_v2, (CUevent event))                                                  \
    X(cuEventRecord, (CUevent event, CUstream stream))                                     \
    X(cuEventSynchronize, (CUevent event))                                                 \
    X(cuEventElapsedTime, (float *ms, CUevent start, CUevent end))                         \
    X(cuLaunchKernel, (CUfunction func, unsigned int grid_x, unsigned int grid_y,          \
                       unsigned int grid_z, unsigned int block_x, unsigned int block_y,    \
                       unsigned int block_z, unsigned int shared_bytes, CUstream stream,   \
                       void **params, void **extra))

/* One pointer type per function: cu_fn_cuInit, cu_fn_cuMemAlloc_v2, ... */
#define CU_DRV_TYPEDEF(name, params) typedef CUresult (*cu_fn_##name) params;
CU_DRV_FUNCS(CU_DRV_TYPEDEF)
#undef CU_DRV_TYPEDEF

/* The driver's entry points, as dlsym found them (fields named like the
 * exported symbols). */
typedef struct cu_driver {
#define CU_DRV_FIELD(name, params) cu_fn_##name name;
    CU_DRV_FUNCS(CU_DRV_FIELD)
#undef CU_DRV_FIELD
} cu_driver;

#endif
