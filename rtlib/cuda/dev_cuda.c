/* dev_cuda.c -- the CUDA backend: the device of a cuda-target rank and the
 * launcher of its kernels (rt_cuda_k).
 *
 * The driver (libcuda.so.1) is opened with dlopen, never linked, so a rank
 * executable starts on a machine without one and says so: no driver, the
 * toolkit's stub driver, no device, or no cubin for the device's
 * architecture each give one line and exit 2.  The device is the local rank
 * modulo the devices visible; its primary context is made current on the
 * calling thread, which then does every CUDA call (kernels are launched from
 * the thread that runs the rank's program).
 *
 * Device memory, allocated once in rt_dev_init:
 *   arena      the manifest's arena; b[] of every kernel point into it
 *   state      the rank's rt_cuda_state (rt_cuda_abi.h), zeroed
 *   workspace  8 * max(1024, largest xent_loss M seen) bytes: one double per
 *              block of the grid reductions (grown, after a wait, when an
 *              xent_loss needs more)
 * and one stream, on which every kernel, copy and collective of the rank
 * runs in program order.  ctx->arena, the host arena, stays allocated as the
 * device arena's mirror: init_param and data run the CPU kernels on the
 * mirror and upload the bytes they wrote; checkpoints download to it.
 *
 * Launches: cu_launches, one row per kernel of rt_kernels.h, says where the
 * kernel runs and how its grid follows from its int arguments (the table
 * "Launch configurations" of docs/cuda.md, block sizes equal to each entry
 * point's __launch_bounds__ in codegen/cuda.c).  rt_cuda_launch_config
 * checks the host-side preconditions (what the CPU kernels stop on that is
 * known from the arguments) and computes the grid; rt_cuda_k fills the
 * rt_cuda_args block and calls cuLaunchKernel.
 *
 * Errors: every driver call goes through cu_check (the CU macro), which
 * names file:line, the call and the driver's error name and text, and exits
 * 1.  Kernels report bad data (a cross-entropy target outside [0, Vreal)) in the
 * state; rt_dev_step_end reads it after each step and stops with the CPU
 * target's message.  NNSC_CUDA_SYNC=1 waits after every launch, so that a
 * kernel that faults is named; NNSC_VERBOSE=1 prints the device chosen.
 */
#define _GNU_SOURCE   /* dladdr */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_drv.h"
#include "rt_cuda_abi.h"
#include "rt_ew.h"
#include "cuda/rt_cuda.h"

/* Shared with tests/test_rt_cuda.c only (which declares them itself):
 *
 * The image of images[0 .. nimages) for a device of compute capability
 * major.minor: an sm_XY image runs on devices of the same major X and a
 * minor not below Y, so the one with the same major and the highest minor
 * not above the device's; an arch-specific image (sm_90a) runs only on
 * exactly its own capability and is preferred to the plain one there.
 * Returns its index, or -1 when none fits. */
int rt_cuda_pick_image(int major, int minor, const rt_image *images, int nimages);

/* The launch of device kernel `kernel` (RT_KN_*) with arguments b and i:
 * checks the preconditions the host can check and computes the
 * configuration of docs/cuda.md.  Returns 1 to launch with grid (*gx, *gy)
 * and *block threads per block, needing *ws workspace bytes; 0 when there is
 * nothing to launch (an empty grid); -1 with a message in err when the
 * arguments are refused or the kernel does not run on the device. */
int rt_cuda_launch_config(int kernel, void *const *b, const int64_t *i, unsigned *gx,
                          unsigned *gy, unsigned *block, int64_t *ws, char *err, size_t errlen);

/* ---------------------------------------------------------------- kernels */

/* Kernel names and argument counts, from rt_kernels.h. */
static const char *const cu_names[RT_KN_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) #name,
#include "rt_kernels.h"
#undef RT_K
};
static const unsigned char cu_nbuf[RT_KN_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) nbuf,
#include "rt_kernels.h"
#undef RT_K
};
static const unsigned char cu_nint[RT_KN_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) nint,
#include "rt_kernels.h"
#undef RT_K
};
static const unsigned char cu_nflt[RT_KN_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) nflt,
#include "rt_kernels.h"
#undef RT_K
};

/* Every kernel's fixed arguments fit the device's parameter block, and so
 * do the variable ones at their largest. */
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext)                                                    \
    _Static_assert(nbuf <= RT_CUDA_MAXBUF && nint <= RT_CUDA_MAXINT && nflt <= RT_CUDA_MAXFLT, \
                   "rt_cuda_args cannot hold the arguments of " #name);
#include "rt_kernels.h"
#undef RT_K
_Static_assert(2 + 3 * RT_MAXDIM <= RT_CUDA_MAXINT, "slice/place with RT_MAXDIM dims");
_Static_assert(RT_EW_HEAD + 4 * RT_EW_MAXOPS <= RT_CUDA_MAXINT, "ew with RT_EW_MAXOPS ops");
_Static_assert(RT_EW_NBUF <= RT_CUDA_MAXBUF, "ew buffers");

/* Where a kernel runs. */
typedef enum cu_where {
    CU_DEV = 1,   /* on the device: the library's entry point nnsc_<name> */
    CU_EW,        /* on the device: the build's generated chain nnsc_ew_<i[0]> */
    CU_CUSTOM,    /* on the device: the build's custom op entry nnsc_custom_<i[0]> */
    CU_HOST,      /* on the host, into the mirror, then uploaded (rt_k_<name>) */
    CU_COLL,      /* a collective: NCCL on the rank's stream (nccl.c) */
} cu_where;

/* How the grid follows from the size n (the product of the ints the row names). */
typedef enum cu_grid {
    CU_GRID_NONE,     /* host-side and collective kernels: no grid */
    CU_GRID_STRIDE,   /* grid-stride loop over n: min(ceil(n / block), 65535) blocks */
    CU_GRID_ROWS,     /* a block per row: n blocks */
    CU_GRID_COLS,     /* 32 columns per block: ceil(n / 32) blocks */
    CU_GRID_MATMUL,   /* 64x64 tiles of C: (ceil(N / 64), ceil(M / 64)) */
    CU_GRID_REDUCE,   /* a scalar sum: min(ceil(n / 2048), 1024) blocks, at least 1 */
    CU_GRID_XENT,     /* a block per row and a scalar sum: max(n, 1) blocks (xent_loss) */
    CU_GRID_ONE,      /* one block */
    CU_GRID_WARPS,    /* a warp per row: ceil(n / (block / 32)) blocks */
    CU_GRID_BOX,      /* slice/place: grid-stride over the box's elements */
} cu_grid;

/* Host-side preconditions (what the CPU kernel stops on that the arguments
 * already show), and extra work around a launch. */
enum {
    CU_CHK_ATT = 2,       /* attention: B, T, H, D >= 0, causal 0 or 1, D <= 256, Hkv >= 1 divides H,
                             S >= 1 keys (= T when causal; S = 0 only with T = 0), bwd: P = max(T, S);
                             alibi 0 or 1, with hoff + H <= Htot */
    CU_CHK_BOX = 4,       /* slice/place: ndim <= 8, 0 <= lo < hi <= extent */
    CU_CHK_COPY = 8,      /* copy: X and Y equal or disjoint */
    CU_CHK_EW = 16,       /* ew: the op list is well formed */
    CU_ZERO_FIRST = 32,   /* embedding_bwd: acc = 0 zeroes the table (nnsc_zero) first */
    CU_CHK_CUSTOM = 64,   /* custom: the operands' ranks and extents fit the argument block */
    CU_CHK_VREAL = 1,     /* xent_stats, xent_vp_bwd: i[3] is the whole vocabulary's Vreal (the
                             rank may hold fewer columns): 1 <= Vreal, kept for the message */
};

/* One row of the launch table. */
typedef struct cu_launch {
    cu_where where;       /* where the kernel runs */
    cu_grid grid;         /* how its grid follows from n */
    short block;          /* threads per block: the entry point's __launch_bounds__ */
    signed char n[3];     /* n = the product of i[n[k]] over n[k] >= 0 (matmul: M, N) */
    signed char acc;      /* reductions: the index of acc (an empty sum with acc = 0 still
                             runs, to write 0); else -1 */
    unsigned char flags;  /* CU_CHK_* and CU_ZERO_FIRST */
} cu_launch;

#define CU_NO_N {-1, -1, -1}

/* The launch table: docs/cuda.md, "Launch configurations".  Every row of
 * rt_kernels.h has an entry here (rt_dev_init asserts it), except the
 * elementwise kernels: those whose every buffer holds n = i[0] elements
 * (their formula in rt_kernels.h is "i0 i0 ..."; zero, add, mul, relu,
 * gelu, silu and their backwards, mse_bwd, sgd, adamw) run grid-stride
 * over n in blocks of 256 (cu_row), unless a row here says otherwise. */
static const cu_launch cu_launches[RT_KN_COUNT] = {
    /* init_param: the counter-based RNG on the host */
    [RT_KN_init_param] = {CU_HOST, CU_GRID_NONE, 0, CU_NO_N, -1, 0},
    /* data: synthetic inputs and token files on the host */
    [RT_KN_data] = {CU_HOST, CU_GRID_NONE, 0, CU_NO_N, -1, 0},
    /* matmul: C[M, N], a 64x64 tile per block; M = i[0], N = i[2] */
    [RT_KN_matmul] = {CU_DEV, CU_GRID_MATMUL, 256, {0, 2, -1}, -1, 0},
    /* bias_add: M * N elements */
    [RT_KN_bias_add] = {CU_DEV, CU_GRID_STRIDE, 256, {0, 1, -1}, -1, 0},
    /* bias_grad: N columns; M = 0 still writes zeros when acc = 0 */
    [RT_KN_bias_grad] = {CU_DEV, CU_GRID_COLS, 256, {1, -1, -1}, -1, 0},
    /* copy: n elements; a partial overlap is refused */
    [RT_KN_copy] = {CU_DEV, CU_GRID_STRIDE, 256, {0, -1, -1}, -1, CU_CHK_COPY},
    /* cvt_f32, cvt_bf16: n = i[0] elements (the bf16 side holds i[1] words) */
    [RT_KN_cvt_f32] = {CU_DEV, CU_GRID_STRIDE, 256, {0, -1, -1}, -1, 0},
    [RT_KN_cvt_bf16] = {CU_DEV, CU_GRID_STRIDE, 256, {0, -1, -1}, -1, 0},
    /* mse_loss: a scalar sum over n = i[0]; acc = i[1] */
    [RT_KN_mse_loss] = {CU_DEV, CU_GRID_REDUCE, 256, {0, -1, -1}, 1, 0},
    /* xent_stats, xent_vp_bwd: a block per row of M = i[0]; xent_loss: and a scalar sum, acc = i[2] */
    [RT_KN_xent_stats] = {CU_DEV, CU_GRID_ROWS, 256, {0, -1, -1}, -1, CU_CHK_VREAL},
    [RT_KN_xent_loss] = {CU_DEV, CU_GRID_XENT, 256, {0, -1, -1}, 2, 0},
    [RT_KN_xent_vp_bwd] = {CU_DEV, CU_GRID_ROWS, 256, {0, -1, -1}, -1, CU_CHK_VREAL},
    /* sumsq: a scalar sum over n = i[0]; acc = i[1] */
    [RT_KN_sumsq] = {CU_DEV, CU_GRID_REDUCE, 256, {0, -1, -1}, 1, 0},
    /* gradclip: one thread writes the state's grad_norm and grad_scale */
    [RT_KN_gradclip] = {CU_DEV, CU_GRID_ONE, 32, CU_NO_N, -1, 0},
    /* the collectives: NCCL (nccl.c) */
    [RT_KN_allreduce] = {CU_COLL, CU_GRID_NONE, 0, CU_NO_N, -1, 0},
    [RT_KN_allreduce_bf16] = {CU_COLL, CU_GRID_NONE, 0, CU_NO_N, -1, 0},
    [RT_KN_allgather] = {CU_COLL, CU_GRID_NONE, 0, CU_NO_N, -1, 0},
    [RT_KN_reducescatter] = {CU_COLL, CU_GRID_NONE, 0, CU_NO_N, -1, 0},
    [RT_KN_reducescatter_bf16] = {CU_COLL, CU_GRID_NONE, 0, CU_NO_N, -1, 0},
    [RT_KN_broadcast] = {CU_COLL, CU_GRID_NONE, 0, CU_NO_N, -1, 0},
    [RT_KN_sendrecv] = {CU_COLL, CU_GRID_NONE, 0, CU_NO_N, -1, 0},
    [RT_KN_alltoall] = {CU_COLL, CU_GRID_NONE, 0, CU_NO_N, -1, 0},
    [RT_KN_p2p] = {CU_COLL, CU_GRID_NONE, 0, CU_NO_N, -1, 0},
    /* mark: a trace event, on the host */
    [RT_KN_mark] = {CU_HOST, CU_GRID_NONE, 0, CU_NO_N, -1, 0},
    /* mean_mid: R * C outputs; mean_mid_bwd: R * T * C elements */
    [RT_KN_mean_mid] = {CU_DEV, CU_GRID_STRIDE, 256, {0, 2, -1}, -1, 0},
    [RT_KN_mean_mid_bwd] = {CU_DEV, CU_GRID_STRIDE, 256, {0, 1, 2}, -1, 0},
    /* transpose: R * A * B elements */
    [RT_KN_transpose] = {CU_DEV, CU_GRID_STRIDE, 256, {0, 1, 2}, -1, 0},
    /* relpos_bias: H * T * S elements; relpos_bias_bwd: a thread per (bucket, head), NB * H */
    [RT_KN_relpos_bias] = {CU_DEV, CU_GRID_STRIDE, 256, {2, 0, 1}, -1, 0},
    [RT_KN_relpos_bias_bwd] = {CU_DEV, CU_GRID_STRIDE, 256, {3, 2, -1}, -1, 0},
    /* custom: the spec's CUDA kernel of the section i[0] (nnsc_custom_<i[0]>), a grid-stride
       loop over output 1's elements (cu_custom_decode) */
    [RT_KN_custom] = {CU_CUSTOM, CU_GRID_STRIDE, 256, CU_NO_N, -1, CU_CHK_CUSTOM},
    /* embedding: R * C = i[0] * i[3] elements */
    [RT_KN_embedding] = {CU_DEV, CU_GRID_STRIDE, 256, {0, 3, -1}, -1, 0},
    /* embedding_bwd: a block per token position R = i[0]; acc = 0 zeroes the
       Vext * C table first */
    [RT_KN_embedding_bwd] = {CU_DEV, CU_GRID_ROWS, 256, {0, -1, -1}, -1, CU_ZERO_FIRST},
    /* layernorm, layernorm_bwd: a block per row of R = i[0] */
    [RT_KN_layernorm] = {CU_DEV, CU_GRID_ROWS, 256, {0, -1, -1}, -1, 0},
    [RT_KN_layernorm_bwd] = {CU_DEV, CU_GRID_ROWS, 256, {0, -1, -1}, -1, 0},
    /* layernorm_wgrad: C = i[1] columns; R = 0 still writes zeros when acc = 0 */
    [RT_KN_layernorm_wgrad] = {CU_DEV, CU_GRID_COLS, 256, {1, -1, -1}, -1, 0},
    /* rope: grid-stride over the B T H rows (each thread loops over pairs) */
    [RT_KN_rope] = {CU_DEV, CU_GRID_STRIDE, 256, {0, 1, 2}, -1, 0},
    /* rmsnorm, rmsnorm_bwd: a block per row of R = i[0]; rmsnorm_wgrad: C = i[1] columns */
    [RT_KN_rmsnorm] = {CU_DEV, CU_GRID_ROWS, 256, {0, -1, -1}, -1, 0},
    [RT_KN_rmsnorm_bwd] = {CU_DEV, CU_GRID_ROWS, 256, {0, -1, -1}, -1, 0},
    [RT_KN_rmsnorm_wgrad] = {CU_DEV, CU_GRID_COLS, 256, {1, -1, -1}, -1, 0},
    /* softmax, softmax_bwd: a block per row of R = i[0] */
    [RT_KN_softmax] = {CU_DEV, CU_GRID_ROWS, 256, {0, -1, -1}, -1, 0},
    [RT_KN_softmax_bwd] = {CU_DEV, CU_GRID_ROWS, 256, {0, -1, -1}, -1, 0},
    /* attention: a warp per query row (b, h, t), B * T * H rows; attention_bwd: B * P * H rows,
       P = max(T, S) (a row of dq and, for a key, of dk and dv) */
    [RT_KN_attention] = {CU_DEV, CU_GRID_WARPS, 128, {0, 1, 2}, -1, CU_CHK_ATT},
    [RT_KN_attention_bwd] = {CU_DEV, CU_GRID_WARPS, 128, {0, 8, 2}, -1, CU_CHK_ATT},
    /* attention_vl, attention_vl_bwd: as attention, attention_bwd (the ints the same, lens a buffer) */
    [RT_KN_attention_vl] = {CU_DEV, CU_GRID_WARPS, 128, {0, 1, 2}, -1, CU_CHK_ATT},
    [RT_KN_attention_vl_bwd] = {CU_DEV, CU_GRID_WARPS, 128, {0, 8, 2}, -1, CU_CHK_ATT},
    /* attention_ab, attention_ab_bwd: the same (bias a buffer); attention_dbias: a warp per
       element of dbias, H * T * S */
    [RT_KN_attention_ab] = {CU_DEV, CU_GRID_WARPS, 128, {0, 1, 2}, -1, CU_CHK_ATT},
    [RT_KN_attention_ab_bwd] = {CU_DEV, CU_GRID_WARPS, 128, {0, 8, 2}, -1, CU_CHK_ATT},
    [RT_KN_attention_dbias] = {CU_DEV, CU_GRID_WARPS, 128, {2, 1, 7}, -1, CU_CHK_ATT},
    /* place, slice: the box's elements */
    [RT_KN_place] = {CU_DEV, CU_GRID_BOX, 256, CU_NO_N, -1, CU_CHK_BOX},
    [RT_KN_slice] = {CU_DEV, CU_GRID_BOX, 256, CU_NO_N, -1, CU_CHK_BOX},
    /* ew: a generated chain, n = i[1] elements */
    [RT_KN_ew] = {CU_EW, CU_GRID_STRIDE, 256, {1, -1, -1}, -1, CU_CHK_EW},
    /* matmul_bf16: as matmul on the tensor cores, a 64x64 tile per block of 4 warps */
    [RT_KN_matmul_bf16] = {CU_DEV, CU_GRID_MATMUL, 128, {0, 2, -1}, -1, 0},
};

/* Kernel k's launch row: its entry in cu_launches, or for an elementwise
 * kernel without one (every buffer of its formula "i0"), grid-stride over
 * n = i[0] in blocks of 256; a row with where 0 when neither. */
static const cu_launch *cu_row(int k)
{
    static const cu_launch eltw = {CU_DEV, CU_GRID_STRIDE, 256, {0, -1, -1}, -1, 0};
    static const char *const ext[RT_KN_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) ext,
#include "rt_kernels.h"
#undef RT_K
    };
    if (cu_launches[k].where) return &cu_launches[k];
    const char *e = ext[k];
    if (!*e) return &cu_launches[k];
    for (; *e; e += e[2] ? 3 : 2)
        if (e[0] != 'i' || e[1] != '0' || (e[2] && e[2] != ' ')) return &cu_launches[k];
    return &eltw;
}

#define CU_MAX_GRID_X 2147483647LL   /* gridDim.x limit (every GPU since sm_30) */
#define CU_MAX_GRID_Y 65535LL        /* gridDim.y limit */
#define CU_STRIDE_BLOCKS 65535LL     /* most blocks of a grid-stride launch */
#define CU_REDUCE_PER_BLOCK 2048     /* elements per block of a scalar sum, at least */
#define CU_REDUCE_BLOCKS 1024        /* most blocks of a scalar sum */
#define CU_ATT_DMAX 256              /* attention: largest head size (NNSC_ATT_DMAX) */
#define CU_EW_MAX_ID (1 << 20)       /* ew: chain ids are below this */
#define CU_WS_MIN 1024               /* workspace: doubles, at least */

/* ceil(a / b) for a >= 0, b > 0, without overflow. */
static int64_t cu_ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

/* Format a refusal into err; returns -1. */
static int cu_refuse(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int cu_refuse(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

#define CU_CUSTOM_MAX 32   /* custom: sections (the compiler's IR_MAXCUSTOM) */

/* Check a custom op's ints (id nin nout acc, then per operand ndim and its
 * extents: rtlib/nnsc_custom.h) against the argument block: *nbuf buffers,
 * *nint ints, *n the elements of output 1 (the grid-stride loop's size).
 * 0, or -1 with a message in err. */
static int cu_custom_decode(const int64_t *i, int *nbuf, int *nint, int64_t *n, char *err, size_t errlen)
{
    if (i[0] < 0 || i[0] >= CU_CUSTOM_MAX)
        return cu_refuse(err, errlen, "custom: section %lld outside [0, %d)", (long long)i[0], CU_CUSTOM_MAX);
    if (i[1] < 1 || i[2] < 1 || i[1] > 6 || i[2] > 6 || i[1] + i[2] > RT_CUDA_CUSTOM_MAXOPS)
        return cu_refuse(err, errlen, "custom %lld: %lld inputs and %lld outputs (on the cuda target at most "
                         "%d operands, 6 of each)", (long long)i[0], (long long)i[1], (long long)i[2],
                         RT_CUDA_CUSTOM_MAXOPS);
    int pos = 4;
    for (int k = 0; k < i[1] + i[2]; k++) {
        int64_t nd = pos < RT_CUDA_MAXINT ? i[pos] : -1, numel = 1;
        if (nd < 0 || nd > 8 || pos + 1 + nd > RT_CUDA_MAXINT)
            return cu_refuse(err, errlen, "custom %lld: operand %d's rank and extents do not fit the %d ints of "
                             "a launch", (long long)i[0], k + 1, RT_CUDA_MAXINT);
        for (int j = 1; j <= nd; j++)
            if (i[pos + j] < 0 || __builtin_mul_overflow(numel, i[pos + j], &numel))
                return cu_refuse(err, errlen, "custom %lld: operand %d has a bad extent %lld", (long long)i[0],
                                 k + 1, (long long)i[pos + j]);
        if (k == i[1])
            *n = numel;
        pos += 1 + (int)nd;
    }
    *nbuf = (int)(i[1] + i[2]);
    *nint = pos;
    return 0;
}

/* Check an ew instruction's ints (rt_ew.h) and count the buffers its
 * operands name: *nbuf = the highest buffer slot + 1.  0, or -1 with a
 * message in err. */
static int cu_ew_decode(const int64_t *i, int *nbuf, char *err, size_t errlen)
{
    if (i[0] < 0 || i[0] >= CU_EW_MAX_ID)
        return cu_refuse(err, errlen, "ew: chain id %lld outside [0, %d)", (long long)i[0],
                         CU_EW_MAX_ID);
    if (i[1] < 0 || i[2] < 1)
        return cu_refuse(err, errlen, "ew: chain %lld: bad n %lld or N %lld (need n >= 0, "
                         "N >= 1)", (long long)i[0], (long long)i[1], (long long)i[2]);
    if (i[3] < 1 || i[3] > RT_EW_MAXOPS)
        return cu_refuse(err, errlen, "ew: chain %lld has %lld ops, outside [1, %d]",
                         (long long)i[0], (long long)i[3], RT_EW_MAXOPS);
    int top = 0;
    for (int o = 0; o < i[3]; o++) {
        const int64_t *op = i + RT_EW_HEAD + 4 * o;
        int binary = rt_ew_nsrc(op[0]) == 2;
        if (op[0] < 0 || op[0] >= RT_EW_NOPS_KIND)
            return cu_refuse(err, errlen, "ew: chain %lld op %d: unknown op code %lld",
                             (long long)i[0], o, (long long)op[0]);
        for (int k = 1; k < (binary ? 4 : 3); k++) {
            int64_t x = op[k];
            /* dst: a register, a buffer element or an accumulation into
               one; a, c: a register, a buffer element or a row broadcast */
            int ok = x >= 0 && (k == 1 ? x < RT_EW_ROW || (x >= RT_EW_ACC &&
                                                           x < RT_EW_ACC + RT_EW_NBUF)
                                       : x < RT_EW_ACC);
            if (!ok)
                return cu_refuse(err, errlen, "ew: chain %lld op %d: bad %s operand %lld",
                                 (long long)i[0], o, k == 1 ? "dst" : k == 2 ? "a" : "c",
                                 (long long)x);
            int slot = x >= RT_EW_ACC   ? (int)(x - RT_EW_ACC)
                       : x >= RT_EW_ROW ? (int)(x - RT_EW_ROW)
                       : x >= RT_EW_MEM ? (int)(x - RT_EW_MEM)
                                        : -1;
            if (slot + 1 > top)
                top = slot + 1;
        }
    }
    *nbuf = top;
    return 0;
}

/* Check slice/place's box (the CPU kernels' checks, same messages); *n =
 * its elements.  0, or -1 with a message in err. */
static int cu_box_check(const char *what, const int64_t *i, int64_t *n, char *err,
                        size_t errlen)
{
    if (i[0] < 0 || i[0] > RT_MAXDIM)
        return cu_refuse(err, errlen, "%s: ndim %lld outside [0, %d]", what, (long long)i[0],
                         RT_MAXDIM);
    *n = 1;
    for (int d = 0; d < i[0]; d++) {
        int64_t ext = i[2 + 3 * d], lo = i[3 + 3 * d], hi = i[4 + 3 * d];
        if (lo < 0 || hi <= lo || hi > ext)
            return cu_refuse(err, errlen, "%s: dim %d range [%lld, %lld) outside [0, %lld)",
                             what, d, (long long)lo, (long long)hi, (long long)ext);
        *n *= hi - lo;   /* no overflow: the box lies inside tensors that exist */
    }
    return 0;
}

/* The kernel-specific preconditions of row L. */
static int cu_preconditions(int kernel, const cu_launch *L, void *const *b, const int64_t *i,
                            char *err, size_t errlen)
{
    const char *name = cu_names[kernel];
    if ((L->flags & CU_CHK_VREAL) && i[3] < 1)
        return cu_refuse(err, errlen, "%s: Vreal %lld below 1", name, (long long)i[3]);
    if (L->flags & CU_CHK_ATT) {
        int fw = kernel == RT_KN_attention || kernel == RT_KN_attention_vl || kernel == RT_KN_attention_ab;
        int64_t hkv = i[fw ? 5 : 6], s = i[fw ? 6 : 7];
        const int64_t *al = i + (fw ? 7 : 9);   /* alibi, hoff, Htot */
        if (i[0] < 0 || i[1] < 0 || i[2] < 0 || i[3] < 0 || (i[4] != 0 && i[4] != 1) || hkv < 1 ||
            i[2] % hkv || s < 0 || (i[4] && s != i[1]) || (s == 0 && i[1] > 0) ||
            (!fw && i[8] != (i[1] > s ? i[1] : s)) || (al[0] != 0 && al[0] != 1) || al[1] < 0 ||
            (al[0] && al[1] + i[2] > al[2]))
            return cu_refuse(err, errlen, "%s: bad B %lld T %lld H %lld D %lld causal %lld Hkv %lld S %lld "
                             "alibi %lld %lld %lld", name, (long long)i[0], (long long)i[1], (long long)i[2],
                             (long long)i[3], (long long)i[4], (long long)hkv, (long long)s, (long long)al[0],
                             (long long)al[1], (long long)al[2]);
        if (i[3] > CU_ATT_DMAX)
            return cu_refuse(err, errlen, "%s: head size D = %lld is above %d, the largest "
                             "the CUDA kernel takes", name, (long long)i[3], CU_ATT_DMAX);
    }
    if (L->flags & CU_CHK_COPY) {
        uintptr_t x = (uintptr_t)b[0], y = (uintptr_t)b[1];
        uintptr_t bytes = i[0] > 0 ? (uintptr_t)i[0] * 4 : 0;
        if (x != y && x < y + bytes && y < x + bytes)
            return cu_refuse(err, errlen, "copy: X and Y overlap without being the same "
                             "(%lld floats, Y - X = %lld floats): the CUDA kernel needs them "
                             "equal or disjoint", (long long)i[0],
                             (long long)((intptr_t)(y - x) / 4));
    }
    if (L->flags & CU_CHK_EW) {
        int nbuf;
        return cu_ew_decode(i, &nbuf, err, errlen);
    }
    if (L->flags & CU_CHK_CUSTOM) {
        int nbuf, nint;
        int64_t n;
        return cu_custom_decode(i, &nbuf, &nint, &n, err, errlen);
    }
    return 0;
}

int rt_cuda_launch_config(int kernel, void *const *b, const int64_t *i, unsigned *gx,
                          unsigned *gy, unsigned *block, int64_t *ws, char *err, size_t errlen)
{
    *gx = *gy = *block = 0;
    *ws = 0;
    if (kernel < 0 || kernel >= RT_KN_COUNT)
        return cu_refuse(err, errlen, "kernel number %d outside [0, %d)", kernel, RT_KN_COUNT);
    const cu_launch *L = cu_row(kernel);
    const char *name = cu_names[kernel];
    if (!L->where)
        return cu_refuse(err, errlen, "%s has no row in dev_cuda.c's launch table", name);
    if (L->where != CU_DEV && L->where != CU_EW && L->where != CU_CUSTOM)
        return cu_refuse(err, errlen, "%s does not run on the device", name);
    if (cu_preconditions(kernel, L, b, i, err, errlen))
        return -1;

    /* the size: the product of the ints the row names, or the box */
    int64_t n = 1;
    if (L->grid == CU_GRID_BOX) {
        if (cu_box_check(name, i, &n, err, errlen))
            return -1;
    } else if (L->where == CU_CUSTOM) {
        int nbuf, nint;
        if (cu_custom_decode(i, &nbuf, &nint, &n, err, errlen))
            return -1;
    } else {
        for (int k = 0; k < 3 && L->n[k] >= 0; k++) {
            int64_t v = i[L->n[k]];
            if (v < 0)
                return cu_refuse(err, errlen, "%s: size argument i[%d] = %lld is negative",
                                 name, L->n[k], (long long)v);
            if (L->grid != CU_GRID_MATMUL && __builtin_mul_overflow(n, v, &n))
                return cu_refuse(err, errlen, "%s: sizes too large (i[%d] = %lld)", name,
                                 L->n[k], (long long)v);
        }
    }

    int64_t x = 1, y = 1;   /* blocks in x and y */
    int reduce = 0;         /* a grid reduction: one workspace double per block */
    switch (L->grid) {
    case CU_GRID_STRIDE:
    case CU_GRID_BOX:
        x = cu_ceil_div(n, L->block);
        x = x < CU_STRIDE_BLOCKS ? x : CU_STRIDE_BLOCKS;
        break;
    case CU_GRID_ROWS:
        x = n;
        break;
    case CU_GRID_COLS:
        x = cu_ceil_div(n, 32);
        break;
    case CU_GRID_MATMUL: {
        int64_t M = i[L->n[0]], N = i[L->n[1]];
        x = cu_ceil_div(N, 64);
        y = cu_ceil_div(M, 64);
        if (y > CU_MAX_GRID_Y)
            return cu_refuse(err, errlen, "%s: M = %lld is above %lld, the most rows the CUDA "
                             "kernel's grid covers", name, (long long)M, 64 * CU_MAX_GRID_Y);
        break;
    }
    case CU_GRID_REDUCE:
        if (n == 0 && i[L->acc])
            return 0;   /* adds 0 */
        x = cu_ceil_div(n, CU_REDUCE_PER_BLOCK);
        x = x < 1 ? 1 : x > CU_REDUCE_BLOCKS ? CU_REDUCE_BLOCKS : x;
        reduce = 1;
        break;
    case CU_GRID_XENT:
        if (n == 0 && i[L->acc])
            return 0;
        x = n > 1 ? n : 1;
        reduce = 1;
        break;
    case CU_GRID_ONE:
        x = 1;
        break;
    case CU_GRID_WARPS:
        x = cu_ceil_div(n, L->block / 32);
        break;
    case CU_GRID_NONE:
        RT_ASSERT(!"a device kernel without a grid");
    }
    if (x > CU_MAX_GRID_X)
        return cu_refuse(err, errlen, "%s: %lld blocks are above the CUDA grid limit %lld",
                         name, (long long)x, CU_MAX_GRID_X);
    *gx = (unsigned)x;
    *gy = (unsigned)y;
    *block = (unsigned)L->block;
    *ws = reduce ? 8 * x : 0;
    return x > 0 && y > 0;
}

/* ----------------------------------------------------------------- images */

/* Parse an architecture name "sm_XY" or "sm_XYZ" with an optional letter
 * ("sm_90a"): compute capability XY / 10 . XY % 10 and the letter (0 if
 * none).  0, or -1 if it is not such a name. */
static int cu_arch_parse(const char *arch, int *major, int *minor, char *letter)
{
    if (!arch || strncmp(arch, "sm_", 3) != 0)
        return -1;
    const char *p = arch + 3;
    int v = 0, digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 4; p++, digits++)
        v = v * 10 + (*p - '0');
    if (digits < 2 || digits > 3)
        return -1;
    *letter = 0;
    if (*p >= 'a' && *p <= 'z')
        *letter = *p++;
    if (*p)
        return -1;
    *major = v / 10;
    *minor = v % 10;
    return 0;
}

void rt_cuda_probe(rt_cuda_found *out)
{
    rt_cuda_found p;
    memset(&p, 0, sizeof p);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(p.why, sizeof p.why, "no CUDA driver (libcuda.so.1) on the library path");
        goto done;
    }
    cu_fn_cuInit init;
    cu_fn_cuDeviceGetCount count;
    cu_fn_cuDeviceGet get;
    cu_fn_cuDeviceGetAttribute attr;
    cu_fn_cuDeviceGetName name;
    void *s[5] = {dlsym(h, "cuInit"), dlsym(h, "cuDeviceGetCount"), dlsym(h, "cuDeviceGet"),
                  dlsym(h, "cuDeviceGetAttribute"), dlsym(h, "cuDeviceGetName")};
    if (!s[0] || !s[1] || !s[2] || !s[3] || !s[4]) {
        snprintf(p.why, sizeof p.why, "libcuda.so.1 lacks the driver API (cuInit, ...)");
        goto done;
    }
    memcpy(&init, &s[0], sizeof init);
    memcpy(&count, &s[1], sizeof count);
    memcpy(&get, &s[2], sizeof get);
    memcpy(&attr, &s[3], sizeof attr);
    memcpy(&name, &s[4], sizeof name);
    p.is_double = dlsym(h, "nnsc_mock_check") != NULL;
    CUresult r = init(0);
    if (r != CUDA_SUCCESS) {
        snprintf(p.why, sizeof p.why, "cuInit fails with CUresult %d (%s)", (int)r,
                 r == CUDA_ERROR_NO_DEVICE ? "no device" : "see rank start-up for the message");
        goto done;
    }
    p.present = 1;
    CUdevice d0;
    if (count(&p.count) != CUDA_SUCCESS || p.count < 1) {
        p.count = 0;
        snprintf(p.why, sizeof p.why, "the driver sees no CUDA device");
        goto done;
    }
    if (get(&d0, 0) || attr(&p.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d0) ||
        attr(&p.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d0) ||
        name(p.name, sizeof p.name, d0)) {
        p.count = 0;
        snprintf(p.why, sizeof p.why, "cannot query device 0");
    }
done:
    *out = p;
}

int rt_cuda_pick_image(int major, int minor, const rt_image *images, int nimages)
{
    int best = -1, best_minor = -1, best_exact = 0;
    for (int k = 0; k < nimages; k++) {
        int ma, mi;
        char letter;
        if (cu_arch_parse(images[k].arch, &ma, &mi, &letter) || ma != major || mi > minor)
            continue;
        /* 'a': arch-specific code, for exactly that capability; 'f' (family)
           and none: every minor from its own up; other letters: unknown */
        int exact = letter == 'a';
        if ((exact && mi != minor) || (letter && letter != 'a' && letter != 'f'))
            continue;
        if (mi > best_minor || (mi == best_minor && exact && !best_exact)) {
            best = k;
            best_minor = mi;
            best_exact = exact;
        }
    }
    return best;
}

/* ----------------------------------------------------------------- device */

/* What the host reads and writes through pinned memory: the fields of the
 * state it sets at step begin, and what it reads back at step end. */
typedef struct cu_host {
    rt_cuda_state up;     /* step begin: lr_scale, grad_norm, grad_scale to upload */
    rt_cuda_state down;   /* step end: the state read back */
    float loss;           /* step end: the loss read back */
} cu_host;

/* The bytes of rt_cuda_state the host writes at step begin: lr_scale,
 * grad_norm and grad_scale, which come first (red_count is the device's). */
#define CU_STATE_HOST_BYTES offsetof(rt_cuda_state, red_count)

/* The rank's device (rt_internal.h: rt_dev). */
struct rt_dev {
    void *lib;                    /* the driver library (dlopen) */
    cu_driver drv;                /* its functions */
    int version;                  /* driver's CUDA version, e.g. 12040 (0: unknown) */
    int count;                    /* devices visible */
    int ordinal;                  /* the one this rank uses */
    CUdevice device;              /* its handle */
    int major, minor;             /* its compute capability */
    int sms;                      /* its multiprocessors */
    size_t mem;                   /* its memory in bytes */
    char name[128];               /* its name */
    const rt_image *image;        /* the cubin loaded */
    CUcontext cuctx;              /* the device's primary context (retained) */
    CUmodule module;              /* the loaded cubin */
    CUfunction fn[RT_KN_COUNT];   /* nnsc_<name> of every CU_DEV kernel */
    CUfunction *ew;               /* nnsc_ew_<id>, looked up on first use (NULL: not yet) */
    CUfunction cust[CU_CUSTOM_MAX]; /* nnsc_custom_<row>, looked up on first use (NULL: not yet) */
    int64_t ew_cap;               /* entries of ew */
    CUstream stream;              /* the rank's stream */
    CUevent up_done;              /* recorded after the step-begin upload of host->up */
    CUdeviceptr arena;            /* the device arena */
    int64_t arena_bytes;          /* its size (the manifest's) */
    CUdeviceptr state;            /* the rt_cuda_state */
    CUdeviceptr ws;               /* the workspace */
    int64_t ws_bytes;             /* its size */
    cu_host *host;                /* pinned host memory for the state and the loss */
    int sync_each;                /* NNSC_CUDA_SYNC: wait after every launch */
    int64_t vreal;                /* Vreal of the cross-entropy kernels since the last step end (0: none) */
    int vreal_mixed;              /* they had different Vreal */
};

/* The exit status of a device-side data error: the CPU kernels' (rows.c). */
#define CU_DATA_ERROR_EXIT 1

/* file without the directories before rtlib/ (messages stay short and do not
 * carry the build machine's paths). */
static const char *cu_file(const char *file)
{
    const char *r = strstr(file, "rtlib/");
    const char *s = strrchr(file, '/');
    return r ? r : s ? s + 1 : file;
}

/* "CUDA_ERROR_NAME (text)" for r, into buf. */
static const char *cu_errtext(const rt_dev *d, CUresult r, char *buf, size_t len)
{
    const char *name = NULL, *text = NULL;
    if (d->drv.cuGetErrorName && d->drv.cuGetErrorName(r, &name) != CUDA_SUCCESS)
        name = NULL;
    if (d->drv.cuGetErrorString && d->drv.cuGetErrorString(r, &text) != CUDA_SUCCESS)
        text = NULL;
    if (name)
        snprintf(buf, len, "%s (%s)", name, text ? text : "no description");
    else
        snprintf(buf, len, "CUDA error %d", (int)r);
    return buf;
}

/* The result r of driver call `call` at file:line: nothing when it is
 * CUDA_SUCCESS; else the message, and exit 1 (fatal) or a warning on
 * stderr (returns 1). */
static int cu_check(rt_ctx *ctx, CUresult r, const char *call, const char *file, int line,
                    int fatal)
{
    if (r == CUDA_SUCCESS)
        return 0;
    char text[256];
    cu_errtext(ctx->dev, r, text, sizeof text);
    /* errors a kernel raises are sticky and surface at the next call */
    const char *hint = r >= CUDA_ERROR_ILLEGAL_ADDRESS && r < CUDA_ERROR_NOT_PERMITTED
                           ? "; a kernel failed (NNSC_CUDA_SYNC=1 names it)"
                           : "";
    if (fatal)
        rt_fatal(ctx, 1, "%s:%d: CUDA: %s failed: %s%s", cu_file(file), line, call, text, hint);
    rt_warn(ctx, "%s:%d: CUDA: %s failed: %s%s", cu_file(file), line, call, text, hint);
    return 1;
}

/* Call driver function fn(args...) of ctx's device through cu_check: exit 1
 * on failure (CU), or warn and go on (CU_WARN, for teardown). */
#define CU(ctx, fn, ...) \
    cu_check((ctx), (ctx)->dev->drv.fn(__VA_ARGS__), #fn "(" #__VA_ARGS__ ")", __FILE__, __LINE__, 1)
#define CU_WARN(ctx, fn, ...) \
    cu_check((ctx), (ctx)->dev->drv.fn(__VA_ARGS__), #fn "(" #__VA_ARGS__ ")", __FILE__, __LINE__, 0)

/* "CUDA X.Y" of the driver, or "CUDA version unknown". */
static const char *cu_version(const rt_dev *d, char *buf, size_t len)
{
    if (d->version > 0)
        snprintf(buf, len, "CUDA %d.%d", d->version / 1000, d->version % 1000 / 10);
    else
        snprintf(buf, len, "CUDA version unknown");
    return buf;
}

/* No device visible: message (with CUDA_VISIBLE_DEVICES when it is set), exit 2. */
static void cu_no_device(rt_ctx *ctx, const rt_dev *d)
{
    char ver[64];
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    rt_fatal(ctx, 2, "no CUDA device: the driver (%s) sees no GPU%s%s",
             cu_version(d, ver, sizeof ver), vis ? "; CUDA_VISIBLE_DEVICES=" : "",
             vis ? vis : "");
}

/* Open libcuda, find its functions and start it (cuInit).  No driver, the
 * toolkit's stub, a driver without our functions or one that will not
 * start: message, exit 2. */
static void cu_open_driver(rt_ctx *ctx, rt_dev *d)
{
    d->lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!d->lib) {
        char why[512];
        const char *e = dlerror();
        snprintf(why, sizeof why, "%s", e ? e : "unknown reason");
        /* the unversioned name is what a stub on LD_LIBRARY_PATH provides:
           open it to say so (cuInit below) rather than "not found" */
        d->lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
        if (!d->lib) {
            if (strstr(why, "No such file"))
                rt_fatal(ctx, 2, "no CUDA driver: libcuda.so.1 not found (it comes with the "
                         "NVIDIA driver: install the driver, or add the directory holding "
                         "libcuda.so.1 to LD_LIBRARY_PATH)");
            rt_fatal(ctx, 2, "cannot load the CUDA driver libcuda.so.1: %s", why);
        }
    }
    static const struct {
        const char *name;   /* exported symbol */
        size_t off;         /* its field in cu_driver */
    } syms[] = {
#define CU_DRV_SYM(name, params) {#name, offsetof(cu_driver, name)},
        CU_DRV_FUNCS(CU_DRV_SYM)
#undef CU_DRV_SYM
    };
    for (size_t k = 0; k < sizeof syms / sizeof syms[0]; k++) {
        void *p = dlsym(d->lib, syms[k].name);
        if (!p)
            rt_fatal(ctx, 2, "the CUDA driver libcuda.so.1 has no %s: it is too old for this "
                     "program; update the NVIDIA driver", syms[k].name);
        memcpy((char *)&d->drv + syms[k].off, &p, sizeof p);   /* POSIX: data -> function */
    }
    if (d->drv.cuDriverGetVersion(&d->version) != CUDA_SUCCESS)
        d->version = 0;

    CUresult r = d->drv.cuInit(0);
    char text[256], ver[64];
    if (r == CUDA_ERROR_STUB_LIBRARY) {
        Dl_info info;
        const char *path = dladdr((void *)d->drv.cuInit, &info) && info.dli_fname
                               ? info.dli_fname
                               : "libcuda.so";
        rt_fatal(ctx, 2, "the CUDA driver found is the toolkit's stub (%s), which only serves "
                 "linking: install the NVIDIA driver (libcuda.so.1), and take the toolkit's "
                 "stubs directory out of LD_LIBRARY_PATH", path);
    }
    if (r == CUDA_ERROR_NO_DEVICE)
        cu_no_device(ctx, d);
    if (r != CUDA_SUCCESS)
        rt_fatal(ctx, 2, "the CUDA driver (%s) does not start: cuInit failed: %s",
                 cu_version(d, ver, sizeof ver), cu_errtext(d, r, text, sizeof text));
}

/* Choose the device (local rank modulo the count) and read what it is. */
static void cu_open_device(rt_ctx *ctx, rt_dev *d)
{
    CUresult r = d->drv.cuDeviceGetCount(&d->count);
    if (r == CUDA_ERROR_NO_DEVICE || (r == CUDA_SUCCESS && d->count < 1))
        cu_no_device(ctx, d);
    cu_check(ctx, r, "cuDeviceGetCount(&d->count)", __FILE__, __LINE__, 1);
    d->ordinal = ctx->local_rank % d->count;
    CU(ctx, cuDeviceGet, &d->device, d->ordinal);
    CU(ctx, cuDeviceGetAttribute, &d->major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
       d->device);
    CU(ctx, cuDeviceGetAttribute, &d->minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
       d->device);
    CU(ctx, cuDeviceGetAttribute, &d->sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->device);
    CU(ctx, cuDeviceGetName, d->name, (int)sizeof d->name, d->device);
    d->name[sizeof d->name - 1] = 0;
    CU(ctx, cuDeviceTotalMem_v2, &d->mem, d->device);
}

/* Choose the image for the device; none: message (with the images there
 * are), exit 2. */
static void cu_choose_image(rt_ctx *ctx, rt_dev *d, const rt_image *images, int nimages)
{
    int k = rt_cuda_pick_image(d->major, d->minor, images, nimages);
    if (k < 0) {
        char have[256] = "";
        size_t len = 0;
        for (int j = 0; j < nimages && len < sizeof have - 1; j++)
            len += (size_t)snprintf(have + len, sizeof have - len, "%s%s", j ? " " : "",
                                    images[j].arch ? images[j].arch : "?");
        rt_fatal(ctx, 2, "no cubin for sm_%d%d in this executable (it has %s): rebuild with "
                 "nnsc-aot --arch sm_%d%d", d->major, d->minor, nimages ? have : "none",
                 d->major, d->minor);
    }
    d->image = &images[k];
    if (!d->image->data || !d->image->size)
        rt_fatal(ctx, 1, "the %s cubin in this executable is empty", d->image->arch);
}

/* Load the image; a driver that cannot (too old for it): message, exit 2. */
static void cu_load_module(rt_ctx *ctx, rt_dev *d)
{
    CUresult r = d->drv.cuModuleLoadData(&d->module, d->image->data);
    if (r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_NO_BINARY_FOR_GPU ||
        r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
        char text[256], ver[64];
        rt_fatal(ctx, 2, "the CUDA driver (%s) cannot load this executable's %s cubin on "
                 "device %d (%s, sm_%d%d): %s; update the NVIDIA driver (it may be older than "
                 "the CUDA toolkit that built the program)", cu_version(d, ver, sizeof ver),
                 d->image->arch, d->ordinal, d->name, d->major, d->minor,
                 cu_errtext(d, r, text, sizeof text));
    }
    cu_check(ctx, r, "cuModuleLoadData(&d->module, d->image->data)", __FILE__, __LINE__, 1);
}

/* The kernel called name in the module; exit 1 when the image lacks it. */
static CUfunction cu_function(rt_ctx *ctx, const char *name)
{
    rt_dev *d = ctx->dev;
    CUfunction f = NULL;
    CUresult r = d->drv.cuModuleGetFunction(&f, d->module, name);
    if (r == CUDA_ERROR_NOT_FOUND)
        rt_fatal(ctx, 1, "the %s cubin of this executable has no kernel %s: it does not match "
                 "the program (rebuild it with nnsc-aot)", d->image->arch, name);
    cu_check(ctx, r, "cuModuleGetFunction(&f, d->module, name)", __FILE__, __LINE__, 1);
    return f;
}

/* cuMemAlloc of bytes for `what`; out of memory: a message with the device's
 * size, exit 1. */
static CUdeviceptr cu_alloc(rt_ctx *ctx, int64_t bytes, const char *what)
{
    rt_dev *d = ctx->dev;
    CUdeviceptr p = 0;
    CUresult r = d->drv.cuMemAlloc_v2(&p, (size_t)(bytes > 0 ? bytes : 1));
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        rt_fatal(ctx, 1, "out of device memory: %s needs %lld bytes; device %d (%s) has %lld "
                 "MiB in all", what, (long long)bytes, d->ordinal, d->name,
                 (long long)(d->mem >> 20));
    cu_check(ctx, r, "cuMemAlloc_v2(&p, bytes)", __FILE__, __LINE__, 1);
    return p;
}

void rt_dev_open(rt_ctx *ctx, const rt_image *images, int nimages)
{
    for (int k = 0; k < RT_KN_COUNT; k++)
        RT_ASSERT(cu_row(k)->where != 0);   /* a row of rt_kernels.h missing in cu_launches */
    rt_dev *d = calloc(1, sizeof *d);
    if (!d)
        rt_fatal(ctx, 1, "out of memory");
    ctx->dev = d;
    const char *sync = getenv("NNSC_CUDA_SYNC");
    d->sync_each = sync && *sync && strcmp(sync, "0") != 0;

    cu_open_driver(ctx, d);
    cu_open_device(ctx, d);
    cu_choose_image(ctx, d, images, nimages);
}

void rt_dev_init(rt_ctx *ctx, const rt_image *images, int nimages)
{
    if (!ctx->dev)
        rt_dev_open(ctx, images, nimages);
    rt_dev *d = ctx->dev;
    ctx->dev_sync = rt_dev_sync;   /* trace marks wait for the device's work */
    CU(ctx, cuDevicePrimaryCtxRetain, &d->cuctx, d->device);
    CU(ctx, cuCtxSetCurrent, d->cuctx);
    cu_load_module(ctx, d);
    for (int k = 0; k < RT_KN_COUNT; k++)
        if (cu_row(k)->where == CU_DEV) {
            char name[64];
            snprintf(name, sizeof name, "nnsc_%s", cu_names[k]);
            d->fn[k] = cu_function(ctx, name);
        }

    CU(ctx, cuStreamCreate, &d->stream, CU_STREAM_NON_BLOCKING);
    CU(ctx, cuEventCreate, &d->up_done, CU_EVENT_DISABLE_TIMING);
    d->arena_bytes = ctx->man.arena;
    d->arena = cu_alloc(ctx, d->arena_bytes, "the arena");
    d->state = cu_alloc(ctx, sizeof(rt_cuda_state), "the device state");
    d->ws_bytes = 8 * CU_WS_MIN;
    d->ws = cu_alloc(ctx, d->ws_bytes, "the workspace");
    void *host = NULL;
    CU(ctx, cuMemAllocHost_v2, &host, sizeof(cu_host));
    d->host = host;
    memset(d->host, 0, sizeof *d->host);
    /* the arena starts zeroed, as its mirror does; the state zeroed */
    CU(ctx, cuMemsetD8Async, d->arena, 0, (size_t)d->arena_bytes, d->stream);
    CU(ctx, cuMemsetD8Async, d->state, 0, sizeof(rt_cuda_state), d->stream);
    CU(ctx, cuStreamSynchronize, d->stream);

    const char *verbose = getenv("NNSC_VERBOSE");
    if (verbose && *verbose && strcmp(verbose, "0") != 0) {
        char ver[64];
        rt_warn(ctx, "CUDA device %d of %d: %s, sm_%d%d, %d SMs, %lld MiB; driver %s; cubin %s",
                d->ordinal, d->count, d->name, d->major, d->minor, d->sms,
                (long long)(d->mem >> 20), cu_version(d, ver, sizeof ver), d->image->arch);
    }
}

void rt_dev_free(rt_ctx *ctx)
{
    rt_dev *d = ctx->dev;
    if (!d)
        return;
    /* whatever was made, in reverse; errors are reported and the rest
       still released.  The driver library stays loaded until exit
       (unloading it under its own threads is not safe). */
    if (d->cuctx) {
        if (d->stream)
            CU_WARN(ctx, cuStreamSynchronize, d->stream);
        if (d->host)
            CU_WARN(ctx, cuMemFreeHost, d->host);
        if (d->ws)
            CU_WARN(ctx, cuMemFree_v2, d->ws);
        if (d->state)
            CU_WARN(ctx, cuMemFree_v2, d->state);
        if (d->arena)
            CU_WARN(ctx, cuMemFree_v2, d->arena);
        if (d->up_done)
            CU_WARN(ctx, cuEventDestroy_v2, d->up_done);
        if (d->stream)
            CU_WARN(ctx, cuStreamDestroy_v2, d->stream);
        if (d->module)
            CU_WARN(ctx, cuModuleUnload, d->module);
        CU_WARN(ctx, cuDevicePrimaryCtxRelease_v2, d->device);
    }
    free(d->ew);
    free(d);
    ctx->dev = NULL;
}

char *rt_dev_arena(rt_ctx *ctx)
{
    return (char *)(uintptr_t)ctx->dev->arena;
}

const char *rt_dev_name(const rt_ctx *ctx)
{
    return ctx->dev ? ctx->dev->name : "";
}

void *rt_dev_stream(rt_ctx *ctx)
{
    return ctx->dev->stream;
}

/* Arena bytes [off, off + bytes) must lie inside the arena. */
static void cu_range(rt_ctx *ctx, const char *what, int64_t off, int64_t bytes)
{
    if (off < 0 || bytes < 0 || off > ctx->dev->arena_bytes ||
        bytes > ctx->dev->arena_bytes - off)
        rt_fatal(ctx, 1, "%s: bytes [%lld, %lld) are outside the %lld-byte arena", what,
                 (long long)off, (long long)off + bytes, (long long)ctx->dev->arena_bytes);
}

void rt_dev_upload(rt_ctx *ctx, int64_t off, int64_t bytes)
{
    rt_dev *d = ctx->dev;
    cu_range(ctx, "upload", off, bytes);
    if (!bytes)
        return;
    CU(ctx, cuMemcpyHtoDAsync_v2, d->arena + (CUdeviceptr)off, ctx->arena + off, (size_t)bytes,
       d->stream);
    CU(ctx, cuStreamSynchronize, d->stream);
}

void rt_dev_download(rt_ctx *ctx, int64_t off, int64_t bytes)
{
    rt_dev *d = ctx->dev;
    cu_range(ctx, "download", off, bytes);
    if (!bytes)
        return;
    CU(ctx, cuMemcpyDtoHAsync_v2, ctx->arena + off, d->arena + (CUdeviceptr)off, (size_t)bytes,
       d->stream);
    CU(ctx, cuStreamSynchronize, d->stream);
}

void rt_dev_sync(rt_ctx *ctx)
{
    CU(ctx, cuStreamSynchronize, ctx->dev->stream);
}

void rt_dev_step_begin(rt_ctx *ctx)
{
    rt_dev *d = ctx->dev;
    /* the pinned source of the last upload must have been read before it
       changes (normally long ago: the step end waited for the stream) */
    CU(ctx, cuEventSynchronize, d->up_done);
    d->host->up.lr_scale = ctx->lr_scale;
    d->host->up.grad_norm = NAN;   /* as ctx->grad_norm: unknown until gradclip runs */
    d->host->up.grad_scale = 1.0f;
    CU(ctx, cuMemcpyHtoDAsync_v2, d->state, &d->host->up, CU_STATE_HOST_BYTES, d->stream);
    CU(ctx, cuEventRecord, d->up_done, d->stream);
}

/* A device-side error recorded in the state: the CPU target's message. */
static void cu_device_error(rt_ctx *ctx, const rt_cuda_state *st)
{
    rt_dev *d = ctx->dev;
    if (st->err == RT_CUDA_ERR_TARGET) {
        if (d->vreal > 0 && !d->vreal_mixed)
            rt_fatal(ctx, CU_DATA_ERROR_EXIT, "xent: target %lld of row %lld is outside "
                     "[0, %lld)", (long long)st->err_a, (long long)st->err_b,
                     (long long)d->vreal);
        rt_fatal(ctx, CU_DATA_ERROR_EXIT, "xent: target %lld of row %lld is outside [0, Vreal)",
                 (long long)st->err_a, (long long)st->err_b);
    }
    rt_fatal(ctx, 1, "a kernel reported device-side error %d (%lld, %lld)", (int)st->err,
             (long long)st->err_a, (long long)st->err_b);
}

float rt_dev_step_end(rt_ctx *ctx, const void *dloss)
{
    rt_dev *d = ctx->dev;
    CU(ctx, cuMemcpyDtoHAsync_v2, &d->host->down, d->state, sizeof(rt_cuda_state), d->stream);
    if (dloss) {
        uintptr_t p = (uintptr_t)dloss;
        if (p < d->arena || p - d->arena + 4 > (uint64_t)d->arena_bytes)
            rt_fatal(ctx, 1, "the loss at device address %p is outside the arena", dloss);
        CU(ctx, cuMemcpyDtoHAsync_v2, &d->host->loss, (CUdeviceptr)p, 4, d->stream);
    }
    CU(ctx, cuStreamSynchronize, d->stream);
    if (d->host->down.err != RT_CUDA_ERR_NONE)
        cu_device_error(ctx, &d->host->down);
    d->vreal = 0;
    d->vreal_mixed = 0;
    ctx->grad_norm = d->host->down.grad_norm;
    ctx->grad_scale = d->host->down.grad_scale;
    return dloss ? d->host->loss : NAN;
}

/* ---------------------------------------------------------------- launches */

/* Run init_param or data on the host: the CPU kernel writes the mirror of
 * b[0], then exactly the bytes it wrote go to the device. */
static void cu_host_kernel(rt_ctx *ctx, int kernel, void *const *b, const int64_t *i,
                           const float *f)
{
    rt_dev *d = ctx->dev;
    const rt_manifest *m = &ctx->man;
    int64_t bytes = 0;
    if (kernel == RT_KN_mark) {
        rt_trace_mark(ctx, i[0], i[1], i[2]);
        return;
    }
    if (kernel == RT_KN_init_param) {
        if (i[0] < 0 || i[0] >= m->nparams)
            rt_fatal(ctx, 1, "init_param: param index %lld out of range (manifest has %d)",
                     (long long)i[0], m->nparams);
        const rt_param *p = &m->params[i[0]];
        bytes = 4 * rt_box_numel(p->ndim, p->lo, p->hi);   /* f32 and i32 alike */
    } else {
        if (i[0] < 0 || i[0] >= m->ninputs)
            rt_fatal(ctx, 1, "data: input index %lld out of range (manifest has %d)",
                     (long long)i[0], m->ninputs);
        const rt_input *in = &m->inputs[i[0]];
        if (i[2] != in->ndim)
            rt_fatal(ctx, 1, "data: input %s: step %lld, ndim %lld (manifest says %d)",
                     in->name, (long long)i[1], (long long)i[2], in->ndim);
        bytes = 4;
        for (int k = 0; k < in->ndim; k++) {
            int64_t lo = i[3 + 2 * k], hi = i[4 + 2 * k];
            if (lo < 0 || hi <= lo || hi > in->shape[k])
                rt_fatal(ctx, 1, "data: input %s: box [%lld, %lld) of dim %d outside "
                         "[0, %lld)", in->name, (long long)lo, (long long)hi, k,
                         (long long)in->shape[k]);
            bytes *= hi - lo;
        }
    }
    uintptr_t p = (uintptr_t)b[0];
    if (p < d->arena)
        rt_fatal(ctx, 1, "%s: destination %p is below the arena", cu_names[kernel], b[0]);
    int64_t off = (int64_t)(p - d->arena);
    cu_range(ctx, cu_names[kernel], off, bytes);
    void *mirror[1] = {ctx->arena + off};
    if (kernel == RT_KN_init_param)
        rt_k_init_param(ctx, mirror, i, f);
    else
        rt_k_data(ctx, mirror, i, f);
    rt_dev_upload(ctx, off, bytes);
}

/* nnsc_ew_<id>, looked up the first time the chain runs. */
static CUfunction cu_ew_function(rt_ctx *ctx, int64_t id)
{
    rt_dev *d = ctx->dev;
    if (id >= d->ew_cap) {
        int64_t n = d->ew_cap ? d->ew_cap : 16;
        while (n <= id)
            n *= 2;
        CUfunction *ew = realloc(d->ew, (size_t)n * sizeof *ew);
        if (!ew)
            rt_fatal(ctx, 1, "out of memory");
        memset(ew + d->ew_cap, 0, (size_t)(n - d->ew_cap) * sizeof *ew);
        d->ew = ew;
        d->ew_cap = n;
    }
    if (!d->ew[id]) {
        char name[48];
        snprintf(name, sizeof name, "nnsc_ew_%lld", (long long)id);
        d->ew[id] = cu_function(ctx, name);
    }
    return d->ew[id];
}

/* Make the workspace at least bytes long (after the kernels queued that use
 * the old one). */
static void cu_grow_ws(rt_ctx *ctx, int64_t bytes)
{
    rt_dev *d = ctx->dev;
    CU(ctx, cuStreamSynchronize, d->stream);
    CU(ctx, cuMemFree_v2, d->ws);
    d->ws = 0;
    d->ws = cu_alloc(ctx, bytes, "the workspace");
    d->ws_bytes = bytes;
}

/* Launch fn (the kernel nnsc_<name>) on the rank's stream with args. */
static void cu_launch_args(rt_ctx *ctx, CUfunction fn, const char *name, unsigned gx,
                           unsigned gy, unsigned block, rt_cuda_args *args)
{
    rt_dev *d = ctx->dev;
    void *params[1] = {args};
    CUresult r = d->drv.cuLaunchKernel(fn, gx, gy, 1, block, 1, 1, 0, d->stream, params, NULL);
    if (r == CUDA_SUCCESS && d->sync_each)
        r = d->drv.cuStreamSynchronize(d->stream);
    if (r != CUDA_SUCCESS) {
        char call[160];
        snprintf(call, sizeof call, "cuLaunchKernel(nnsc_%s, grid %ux%u, block %u)%s", name, gx,
                 gy, block, d->sync_each ? " or the wait after it" : "");
        cu_check(ctx, r, call, __FILE__, __LINE__, 1);
    }
}

/* acc = 0 embedding_bwd: dtable (b[2], Vext * C floats) = 0 first. */
static void cu_zero_table(rt_ctx *ctx, void *const *b, const int64_t *i)
{
    int64_t n;
    if (i[2] < 0 || i[3] < 0 || __builtin_mul_overflow(i[2], i[3], &n))
        rt_fatal(ctx, 1, "embedding_bwd: bad Vext %lld or C %lld", (long long)i[2],
                 (long long)i[3]);
    void *zb[1] = {b[2]};
    int64_t zi[1] = {n};
    unsigned gx, gy, block;
    int64_t ws;
    char err[256];
    if (rt_cuda_launch_config(RT_KN_zero, zb, zi, &gx, &gy, &block, &ws, err, sizeof err) <= 0)
        return;   /* an empty table */
    rt_cuda_args a;
    memset(&a, 0, sizeof a);
    a.b[0] = (uint64_t)(uintptr_t)b[2];
    a.st = ctx->dev->state;
    a.ws = ctx->dev->ws;
    a.i[0] = n;
    cu_launch_args(ctx, ctx->dev->fn[RT_KN_zero], cu_names[RT_KN_zero], gx, gy, block, &a);
}

void rt_cuda_k(rt_ctx *ctx, int kernel, void *const *b, const int64_t *i, const float *f)
{
    rt_dev *d = ctx->dev;
    RT_ASSERT(d && kernel >= 0 && kernel < RT_KN_COUNT);
    const cu_launch *L = cu_row(kernel);
    if (L->where == CU_HOST) {
        cu_host_kernel(ctx, kernel, b, i, f);
        return;
    }
    if (L->where == CU_COLL) {
        rt_nccl_k(ctx, kernel, b, i);
        return;
    }

    unsigned gx, gy, block;
    int64_t ws;
    char err[320];
    int go = rt_cuda_launch_config(kernel, b, i, &gx, &gy, &block, &ws, err, sizeof err);
    if (go < 0)
        rt_fatal(ctx, 1, "%s", err);
    if ((L->flags & CU_ZERO_FIRST) && !i[4])
        cu_zero_table(ctx, b, i);
    if (L->flags & CU_CHK_VREAL) {   /* for the message of a bad target */
        if (d->vreal && d->vreal != i[3])
            d->vreal_mixed = 1;
        d->vreal = i[3];
    }
    if (!go)
        return;
    if (ws > d->ws_bytes)
        cu_grow_ws(ctx, ws > 8 * CU_WS_MIN ? ws : 8 * CU_WS_MIN);

    /* the parameter block: only the arguments this kernel takes */
    int nbuf = cu_nbuf[kernel], nint = cu_nint[kernel], nflt = cu_nflt[kernel];
    CUfunction fn = d->fn[kernel];
    const char *name = cu_names[kernel];
    char ew_name[32];
    if (kernel == RT_KN_slice || kernel == RT_KN_place)
        nint = 2 + 3 * (int)i[0];
    if (L->where == CU_EW) {
        RT_ASSERT(cu_ew_decode(i, &nbuf, err, sizeof err) == 0);   /* checked above */
        nint = RT_EW_HEAD + 4 * (int)i[3];
        fn = cu_ew_function(ctx, i[0]);
        snprintf(ew_name, sizeof ew_name, "ew_%lld", (long long)i[0]);
        name = ew_name;
    }
    if (L->where == CU_CUSTOM) {   /* the section's entry; its attrs (6 floats) where given */
        int64_t n;
        RT_ASSERT(cu_custom_decode(i, &nbuf, &nint, &n, err, sizeof err) == 0);   /* checked above */
        nflt = f ? 6 : 0;
        snprintf(ew_name, sizeof ew_name, "custom_%lld", (long long)i[0]);
        name = ew_name;
        if (!d->cust[i[0]]) {
            char fname[48];
            snprintf(fname, sizeof fname, "nnsc_custom_%lld", (long long)i[0]);
            d->cust[i[0]] = cu_function(ctx, fname);
        }
        fn = d->cust[i[0]];
    }
    RT_ASSERT(nbuf <= RT_CUDA_MAXBUF && nint <= RT_CUDA_MAXINT && nflt <= RT_CUDA_MAXFLT);
    rt_cuda_args a;
    memset(&a, 0, sizeof a);
    for (int k = 0; k < nbuf; k++)
        a.b[k] = (uint64_t)(uintptr_t)b[k];
    a.st = d->state;
    a.ws = d->ws;
    for (int k = 0; k < nint; k++)
        a.i[k] = i[k];
    for (int k = 0; k < nflt; k++)
        a.f[k] = f[k];
    cu_launch_args(ctx, fn, name, gx, gy, block, &a);
}
