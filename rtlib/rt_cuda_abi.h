/* rt_cuda_abi.h -- the host side of the ABI between rtlib's CUDA backend
 * (dev_cuda.c) and the device kernels the compiler generates (codegen/cuda.c).
 * Both sides include this header; the CUDA source states the same layouts
 * and asserts the sizes.  docs/cuda.md explains every field.
 */
#ifndef NNSC_RT_CUDA_ABI_H
#define NNSC_RT_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

#define RT_CUDA_MAXBUF 10   /* most buffer arguments of a kernel (attention_vl_bwd) */
#define RT_CUDA_MAXINT 88   /* most int arguments (a custom op: 4 + 9 operands x (1 + 8 dims)) */
#define RT_CUDA_CUSTOM_MAXOPS 9   /* a custom op's operands, inputs and outputs together */
#define RT_CUDA_MAXFLT 6    /* float arguments (adamw: 5), one more for an 8-byte size */

/* Device-side errors, in rt_cuda_state.err. */
enum {
    RT_CUDA_ERR_NONE = 0,    /* no error */
    RT_CUDA_ERR_TARGET = 1,  /* xent_stats / xent_vp_bwd: a target outside [0, Vreal);
                                err_a = the target, err_b = its row */
};

/* The rank's device-side state (nnsc_state in the CUDA source): one per
 * rank in device memory, zeroed at start-up.  The field order leaves no
 * padding, so the host and device layouts cannot differ. */
typedef struct rt_cuda_state {
    double lr_scale;      /* this step's lr multiplier: written by the host at step begin */
    double grad_norm;     /* this step's gradient norm: written by nnsc_gradclip */
    float grad_scale;     /* the optimizers' gradient multiplier: 1 from the host at step
                             begin, then nnsc_gradclip's */
    uint32_t red_count;   /* blocks finished in the running grid reduction; 0 between kernels */
    int32_t err;          /* first device-side error of the step, RT_CUDA_ERR_* */
    int32_t err_pad;      /* unused (keeps err_a 8-byte aligned) */
    int64_t err_a;        /* first argument of the error */
    int64_t err_b;        /* second argument of the error */
} rt_cuda_state;

/* The one parameter of every entry point (nnsc_args), passed by value:
 * rt_cuda_k(ctx, K, b, i, f) becomes b, i and f copied in, plus the device
 * addresses of the rank's state and workspace. */
typedef struct rt_cuda_args {
    uint64_t b[RT_CUDA_MAXBUF];   /* device pointers: rt_kernels.h's b[] */
    uint64_t st;                  /* device address of the rank's rt_cuda_state */
    uint64_t ws;                  /* device address of the workspace (grid reductions) */
    int64_t i[RT_CUDA_MAXINT];    /* rt_kernels.h's i[] */
    float f[RT_CUDA_MAXFLT];      /* rt_kernels.h's f[] */
} rt_cuda_args;

_Static_assert(sizeof(rt_cuda_state) == 48, "rt_cuda_state must match nnsc_state");
_Static_assert(offsetof(rt_cuda_state, red_count) == 20, "rt_cuda_state layout");
_Static_assert(offsetof(rt_cuda_state, err_a) == 32, "rt_cuda_state layout");
_Static_assert(sizeof(rt_cuda_args) == 824, "rt_cuda_args must match nnsc_args");
_Static_assert(offsetof(rt_cuda_args, i) == 96, "rt_cuda_args layout");
_Static_assert(offsetof(rt_cuda_args, f) == 800, "rt_cuda_args layout");

#endif
