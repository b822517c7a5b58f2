/* rt_cuda.h -- the cuda target's device and its collectives.
 *
 *   dev_cuda.c  the driver via dlopen, launches, the host mirror of the arena
 *   nccl.c      the collectives with NCCL (dlopen)
 *
 * rt_init_cuda (train/runtime.c) calls, in order: rt_dev_open (before any
 * peer is waited for), rt_net_init (world > 1, comm/net.c), rt_dev_init,
 * rt_nccl_init (world > 1). */
#ifndef NNSC_RT_CUDA_H
#define NNSC_RT_CUDA_H

#include "io/rt_io.h"

/* ---- dev_cuda.c: the device.
 *
 * The driver (libcuda.so.1) is opened with dlopen; no driver, no device, a
 * stub driver or no cubin for the device's architecture: a clear message
 * and exit 2.  Device = local rank modulo the devices visible.  The host
 * arena (ctx->arena) stays as the device arena's mirror: host-side kernels
 * (init_param, data) and checkpoints work on the mirror, and rt_dev_upload /
 * rt_dev_download move byte ranges between the two.
 *
 * rt_dev_open: the local checks only (driver, device, cubin), so that a
 * rank without them says so at once, before the rendezvous; rt_dev_init:
 * the rest (context, module, arena, stream), after rt_dev_open if it has
 * not run. */
void rt_dev_open(rt_ctx *ctx, const rt_image *images, int nimages);
void rt_dev_init(rt_ctx *ctx, const rt_image *images, int nimages);
void rt_dev_free(rt_ctx *ctx);
/* The device arena's base address (what rt_arena returns on the cuda target). */
char *rt_dev_arena(rt_ctx *ctx);
/* Arena bytes [off, off + bytes): mirror -> device / device -> mirror
 * (both wait for the stream). */
void rt_dev_upload(rt_ctx *ctx, int64_t off, int64_t bytes);
void rt_dev_download(rt_ctx *ctx, int64_t off, int64_t bytes);
/* The device's name ("NVIDIA H100 80GB HBM3"; "" without a device). */
const char *rt_dev_name(const rt_ctx *ctx);
/* The rank's stream (a CUstream), for NCCL. */
void *rt_dev_stream(rt_ctx *ctx);
/* Step begin: this step's lr scale and grad scale 1 into the device state. */
void rt_dev_step_begin(rt_ctx *ctx);
/* Wait for the rank's stream (trace marks). */
void rt_dev_sync(rt_ctx *ctx);
/* Wait for the stream, stop on a device-side error (the CPU target's
 * message), copy ctx->grad_norm from the device state; returns the float
 * at device address dloss (NaN when dloss is NULL). */
float rt_dev_step_end(rt_ctx *ctx, const void *dloss);

/* What the driver on the library path offers, without starting a rank:
 * tools (the op test, check-op --target cuda) look before rt_init_cuda, to
 * skip or say why (no driver, no device) and to choose the architecture to
 * compile for.  The rank opens the same library again (dlopen gives the
 * same handle). */
typedef struct rt_cuda_found {
    int present;      /* libcuda.so.1 loads and cuInit succeeds */
    int is_double;    /* it is the test double (exports nnsc_mock_check) */
    int count;        /* devices visible */
    int major, minor; /* device 0's compute capability */
    char name[128];   /* device 0's name */
    char why[256];    /* !present or !count: why */
} rt_cuda_found;
void rt_cuda_probe(rt_cuda_found *p);
/* The image of images[0 .. nimages) a device of compute capability
 * major.minor runs (dev_cuda.c says how it chooses); -1 when none fits. */
int rt_cuda_pick_image(int major, int minor, const rt_image *images, int nimages);

/* ---- nccl.c: collectives on the device (world > 1).
 *
 * libnccl.so.2 is opened with dlopen (missing: message, exit 2).  The
 * world communicator comes from a unique id that rank 0 broadcasts with
 * rt_net_broadcast; one communicator per manifest group (ncclCommSplit, in
 * member order).  rt_nccl_k runs one collective kernel (RT_KN_allreduce,
 * allgather, reducescatter, broadcast, sendrecv, alltoall) with the same
 * arguments as rt_k_<name>, b[] being device addresses, on rt_dev_stream. */
void rt_nccl_init(rt_ctx *ctx);
void rt_nccl_free(rt_ctx *ctx, int failed);
void rt_nccl_k(rt_ctx *ctx, int kernel, void *const *b, const int64_t *i);

#endif
