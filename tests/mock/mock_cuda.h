/* mock_cuda.h -- what the two files of the CUDA driver double share
 * (mock_cuda.c: the driver API; mock_kernels.c: cubins, launch shapes and
 * running the references).  Nothing here is exported from libcuda.so.1:
 * the functions are hidden (MOCK_HIDDEN). */
#ifndef NNSC_MOCK_CUDA_H
#define NNSC_MOCK_CUDA_H

#include <cuda.h>
#include <stdint.h>

#include "rt_cuda_abi.h"
#include "rt_internal.h"

/* A symbol shared by the double's files, not exported. */
#define MOCK_HIDDEN __attribute__((visibility("hidden")))

/* A kernel entry of a loaded cubin. */
typedef struct mock_entry {
    char name[96];          /* its symbol, e.g. "nnsc_matmul" */
    int kernel;             /* RT_KN_* it implements, or -1 (not modelled) */
    int64_t ew_id;          /* nnsc_ew_<id>: the id; else -1 */
    int max_threads;        /* __launch_bounds__ (.nv.info EIATTR_MAX_THREADS); 0: none */
    int param_bytes;        /* parameter bytes (.nv.info EIATTR_CBANK_PARAM_SIZE); -1: none */
    int64_t static_smem;    /* static shared memory (.nv.shared.<name> size) */
} mock_entry;

/* A function handle: one per entry of a module. */
struct CUfunc_st {
    struct CUmod_st *mod;   /* its module */
    mock_entry *e;          /* its entry */
    int max_dyn_smem;       /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
};

/* A loaded cubin. */
struct CUmod_st {
    int dev;                    /* the device it was loaded on */
    int sm;                     /* its architecture, e.g. 90 */
    int loaded;                 /* 0 after cuModuleUnload (handles stay invalid) */
    mock_entry *e;              /* its kernel entries */
    struct CUfunc_st *fn;       /* one handle per entry */
    int ne;                     /* how many */
};

/* What a queued operation does. */
typedef enum mock_op_kind {
    MOCK_OP_LAUNCH,     /* a kernel */
    MOCK_OP_COPY,       /* memcpy(dst, src, bytes) */
    MOCK_OP_MEMSET,     /* memset(dst, val, bytes) */
    MOCK_OP_EVENT,      /* an event record */
} mock_op_kind;

/* One queued operation: stream work not yet run. */
typedef struct mock_op {
    mock_op_kind kind;          /* what */
    struct CUfunc_st *fn;       /* LAUNCH: the kernel */
    rt_cuda_args args;          /* LAUNCH: the parameter, copied at launch as the driver does */
    void *dst;                  /* COPY, MEMSET: destination */
    const void *src;            /* COPY: source */
    uint64_t bytes;             /* COPY, MEMSET: bytes */
    unsigned char val;          /* MEMSET: the byte */
    struct CUevent_st *ev;      /* EVENT: the event */
} mock_op;

/* How a kernel's grid is determined (docs/cuda.md, "Launch configurations"). */
enum {
    MOCK_GRID_STRIDE,   /* grid-stride loop: any 1-D grid of at least one block */
    MOCK_GRID_FIXED,    /* exactly (gx, gy) */
    MOCK_GRID_REDUCE,   /* grid reduction: 1 to 1024 blocks, a double of workspace each */
};

/* What a launch must look like, from its kernel and integer arguments. */
typedef struct mock_shape {
    int64_t bytes[RT_CUDA_MAXBUF];   /* bytes of each buffer argument; -1: not an argument */
    int block;                       /* the declared block size */
    int grid;                        /* MOCK_GRID_* */
    int64_t gx, gy;                  /* MOCK_GRID_FIXED: the grid */
    int ws_per_block;                /* bytes of workspace each block needs (0: none) */
} mock_shape;

#define MOCK_UNUSED (-1)   /* mock_shape.bytes: not a buffer argument of the kernel */
#define MOCK_BAD (-2)      /* mock_shape.bytes: a negative or overflowing size */

/* ---- mock_cuda.c */

/* Print "nnsc mock cuda: <who>: <what>" to stderr and return code: every
 * failure the double reports says why on one line. */
MOCK_HIDDEN CUresult mock_fail(CUresult code, const char *who, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Grow array *p of *cap elements of size sz to hold n + 1 (aborts when out of memory). */
MOCK_HIDDEN void mock_grow(void *p, int n, int *cap, size_t sz);

/* ---- mock_kernels.c */

/* Parse cubin d into m (architecture, entries); CUDA_SUCCESS or the error
 * (with a message). */
MOCK_HIDDEN CUresult mock_parse_cubin(const unsigned char *d, struct CUmod_st *m);
/* The buffer extents and launch configuration kernel K (RT_KN_*; ew_id for
 * nnsc_ew_<id>) must have with arguments a.  0, or -1 with the reason in why. */
MOCK_HIDDEN int mock_shape_of(int K, int64_t ew_id, const rt_cuda_args *a, mock_shape *s,
                              char *why, size_t wl);
/* Run a launch now (device memory accessible); CUDA_ERROR_LAUNCH_FAILED
 * (after a message) for a fault the device would have. */
MOCK_HIDDEN CUresult mock_run_launch(const mock_op *op);

#endif
