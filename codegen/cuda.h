/* cuda.h -- the CUDA target's kernel library and its compilation to cubin.
 *
 *   cuda.c    the CUDA C source of every device-side kernel of rtlib/rt_kernels.h
 *   nvrtc.c   NVRTC: that source to one cubin per GPU architecture
 *
 * The compiler links NVRTC (when CMake found the toolkit: NNSC_HAVE_NVRTC);
 * rtlib never does.  Design, launch configurations and what is verified
 * without a GPU: docs/cuda.md.
 */
#ifndef NNSC_CUDA_H
#define NNSC_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "ir.h"

/* ---------------------------------------------------------------- cuda.c */

/* Name of the generated source: NVRTC's messages say "nnsc_kernels.cu(LINE)". */
#define CG_CUDA_SRC_NAME "nnsc_kernels.cu"

#define CG_CUDA_MAXBUF 9    /* most buffer arguments of a kernel (attention_bwd) */
#define CG_CUDA_MAXINT 26   /* most int arguments (slice/place, 8 dims: 2 + 3 * 8) */
#define CG_CUDA_MAXFLT 6    /* float arguments (adamw: 5), one more for an 8-byte size */

/* Device-side errors, in cg_cuda_state.err. */
enum {
    CG_CUDA_ERR_NONE = 0,    /* no error */
    CG_CUDA_ERR_TARGET = 1,  /* xent / xent_bwd: a target outside [0, Vreal);
                                err_a = the target, err_b = its row */
};

/* The rank's device-side state (nnsc_state in the CUDA source): one per
 * rank in device memory, zeroed at start-up.  The field order leaves no
 * padding, so the host and device layouts cannot differ. */
typedef struct cg_cuda_state {
    double lr_scale;      /* this step's lr multiplier: written by the host at step begin */
    double grad_norm;     /* this step's gradient norm: written by nnsc_gradclip */
    float grad_scale;     /* the optimizers' gradient multiplier: 1 from the host at step
                             begin, then nnsc_gradclip's */
    uint32_t red_count;   /* blocks finished in the running grid reduction; 0 between kernels */
    int32_t err;          /* first device-side error of the step, CG_CUDA_ERR_* */
    int32_t err_pad;      /* unused (keeps err_a 8-byte aligned) */
    int64_t err_a;        /* first argument of the error */
    int64_t err_b;        /* second argument of the error */
} cg_cuda_state;

/* The one parameter of every entry point (nnsc_args), passed by value:
 * rt_k_<name>(ctx, b, i, f) becomes b, i and f copied in, plus the device
 * addresses of the rank's state and workspace. */
typedef struct cg_cuda_args {
    uint64_t b[CG_CUDA_MAXBUF];   /* device pointers: rt_kernels.h's b[] */
    uint64_t st;                  /* device address of the rank's cg_cuda_state */
    uint64_t ws;                  /* device address of the workspace (grid reductions) */
    int64_t i[CG_CUDA_MAXINT];    /* rt_kernels.h's i[] */
    float f[CG_CUDA_MAXFLT];      /* rt_kernels.h's f[] */
} cg_cuda_args;

/* The CUDA source asserts the same sizes (static_assert in its prelude). */
_Static_assert(sizeof(cg_cuda_state) == 48, "cg_cuda_state must match nnsc_state");
_Static_assert(offsetof(cg_cuda_state, red_count) == 20, "cg_cuda_state layout");
_Static_assert(offsetof(cg_cuda_state, err_a) == 32, "cg_cuda_state layout");
_Static_assert(sizeof(cg_cuda_args) == 320, "cg_cuda_args must match nnsc_args");
_Static_assert(offsetof(cg_cuda_args, i) == 88, "cg_cuda_args layout");
_Static_assert(offsetof(cg_cuda_args, f) == 296, "cg_cuda_args layout");

/* One entry point of the library. */
typedef struct cg_cuda_entry {
    const char *symbol;   /* its name in the cubin, e.g. "nnsc_matmul" */
    int kernel;           /* the RT_K_* it implements */
    const char *inputs;   /* element type of its float inputs: "f32", "bf16" or "f16" */
} cg_cuda_entry;

/* Every entry point, and how many. */
extern const cg_cuda_entry cg_cuda_entries[];
extern const int cg_cuda_nentries;

/* The f32 entry point of rtlib kernel `kernel` (RT_K_*), or NULL for the
 * kernels that run on the host: init_param, data and the collectives. */
const cg_cuda_entry *cg_cuda_entry_of(int kernel);

/* Append the library's CUDA C source (CG_CUDA_SRC_NAME) to out. */
void cg_cuda_source(ir_buf *out);

/* --------------------------------------------------------------- nvrtc.c */

/* What cg_nvrtc_compile and cg_nvrtc_version return. */
enum {
    CG_NVRTC_OK = 0,       /* compiled */
    CG_NVRTC_ERROR = 1,    /* failed: the message is in err */
    CG_NVRTC_MISSING = 2,  /* built without the CUDA toolkit: "CUDA toolkit not found" */
};

/* One compiled image. */
typedef struct cg_cubin {
    char arch[16];        /* the architecture it is for, e.g. "sm_90" */
    unsigned char *data;  /* the cubin: an ELF image for cuModuleLoadData */
    size_t size;          /* its size in bytes */
    char *log;            /* NVRTC's log of the compilation ("" when clean: no warnings) */
} cg_cubin;

/* Compile the CUDA C text src (named CG_CUDA_SRC_NAME) with NVRTC once per
 * architecture archs[0 .. narch) ("sm_80", "sm_90", ...) into out[0 .. narch).
 * The options are fixed, so the same source gives byte-identical cubins.
 * Returns CG_NVRTC_OK; or CG_NVRTC_ERROR with a message in err (the failing
 * call with file:line and NVRTC's message, for a compilation error NVRTC's
 * log and the generated source's lines it points at); or CG_NVRTC_MISSING
 * ("CUDA toolkit not found") when the compiler was built without NVRTC.
 * After a failure out[] holds nothing to free.  err may be NULL. */
int cg_nvrtc_compile(const char *src, const char *const *archs, int narch, cg_cubin *out,
                     char *err, size_t errsz);

/* Free the images c[0 .. n) and clear them. */
void cg_cubin_free(cg_cubin *c, int n);

/* NVRTC's version: CG_NVRTC_OK with *major, *minor set, CG_NVRTC_MISSING
 * without the toolkit, CG_NVRTC_ERROR if NVRTC fails to answer. */
int cg_nvrtc_version(int *major, int *minor);

#endif
