/* nccl_api.h -- the part of NCCL's C interface that nccl.c uses, declared
 * here so that rtlib builds without the CUDA toolkit (libnccl.so.2 is
 * opened with dlopen at run time; nothing links against it).
 *
 * Only what nccl.c needs: the handle and id types, the result, data type
 * and reduction values, and one function-pointer type per NCCL function of
 * the backend.  Values and signatures follow NCCL 2.18+'s nccl.h (checked
 * against /usr/local/cuda/include/nccl.h, NCCL 2.28.9); enums are passed as
 * int, which is their ABI.  A cudaStream_t is a CUstream is a pointer:
 * void * here.
 */
#ifndef NNSC_NCCL_API_H
#define NNSC_NCCL_API_H

#include <stddef.h>

#define NCCL_UNIQUE_ID_BYTES 128   /* size of ncclUniqueId */
#define NCCL_SPLIT_NOCOLOR (-1)    /* ncclCommSplit color: this rank joins no new communicator */

/* The id rank 0 makes and every rank passes to ncclCommInitRank. */
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];   /* opaque bytes */
} ncclUniqueId;

/* A communicator (opaque handle). */
typedef struct ncclComm *ncclComm_t;
/* Per-communicator options of ncclCommSplit; nccl.c passes NULL (the parent's). */
typedef struct nnsc_nccl_config ncclConfig_t;

/* Result of every NCCL call (ncclResult_t). */
enum {
    ncclSuccess = 0,              /* no error */
    ncclUnhandledCudaError = 1,   /* a CUDA call inside NCCL failed */
    ncclSystemError = 2,          /* a system call failed (sockets, shm, ...) */
    ncclInternalError = 3,        /* NCCL bug or corrupted state */
    ncclInvalidArgument = 4,      /* a bad argument */
    ncclInvalidUsage = 5,         /* wrong use of the API */
    ncclRemoteError = 6,          /* a remote peer failed */
    ncclInProgress = 7,           /* non-blocking call not finished yet */
};
typedef int ncclResult_t;

/* ncclDataType_t values used here. */
enum {
    ncclFloat32 = 7,   /* 32-bit float */
    ncclBfloat16 = 9,  /* bfloat16 (nccl.h's value) */
};
typedef int ncclDataType_t;

/* ncclRedOp_t values used here. */
enum {
    ncclSum = 0,   /* elementwise sum */
};
typedef int ncclRedOp_t;

/* The NCCL functions nccl.c resolves with dlsym (same names, nccl.h signatures). */
typedef ncclResult_t nccl_GetVersion_fn(int *version);
typedef ncclResult_t nccl_GetUniqueId_fn(ncclUniqueId *id);
typedef ncclResult_t nccl_CommInitRank_fn(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
typedef ncclResult_t nccl_CommSplit_fn(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                       ncclConfig_t *config);
typedef ncclResult_t nccl_CommDestroy_fn(ncclComm_t comm);
typedef ncclResult_t nccl_CommAbort_fn(ncclComm_t comm);
typedef ncclResult_t nccl_CommGetAsyncError_fn(ncclComm_t comm, ncclResult_t *async_error);
typedef const char *nccl_GetErrorString_fn(ncclResult_t result);
typedef ncclResult_t nccl_AllReduce_fn(const void *sendbuf, void *recvbuf, size_t count,
                                       ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                       void *stream);
typedef ncclResult_t nccl_AllGather_fn(const void *sendbuf, void *recvbuf, size_t sendcount,
                                       ncclDataType_t type, ncclComm_t comm, void *stream);
typedef ncclResult_t nccl_ReduceScatter_fn(const void *sendbuf, void *recvbuf, size_t recvcount,
                                           ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                           void *stream);
typedef ncclResult_t nccl_Broadcast_fn(const void *sendbuf, void *recvbuf, size_t count,
                                       ncclDataType_t type, int root, ncclComm_t comm,
                                       void *stream);
typedef ncclResult_t nccl_Send_fn(const void *sendbuf, size_t count, ncclDataType_t type, int peer,
                                  ncclComm_t comm, void *stream);
typedef ncclResult_t nccl_Recv_fn(void *recvbuf, size_t count, ncclDataType_t type, int peer,
                                  ncclComm_t comm, void *stream);
typedef ncclResult_t nccl_GroupStart_fn(void);
typedef ncclResult_t nccl_GroupEnd_fn(void);

#endif
