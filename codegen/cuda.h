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
#include "rt_cuda_abi.h"

/* ---------------------------------------------------------------- cuda.c */

/* Name of the generated source: NVRTC's messages say "nnsc_kernels.cu(LINE)". */
#define CG_CUDA_SRC_NAME "nnsc_kernels.cu"

/* The ABI shared with rtlib's CUDA backend (nnsc_args, nnsc_state). */
#define CG_CUDA_MAXBUF RT_CUDA_MAXBUF
#define CG_CUDA_MAXINT RT_CUDA_MAXINT
#define CG_CUDA_MAXFLT RT_CUDA_MAXFLT
#define CG_CUDA_ERR_NONE RT_CUDA_ERR_NONE
#define CG_CUDA_ERR_TARGET RT_CUDA_ERR_TARGET
typedef rt_cuda_state cg_cuda_state;
typedef rt_cuda_args cg_cuda_args;

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

/* The CUDA C source of a build: the library (cg_cuda_source) plus one
 * generated kernel nnsc_ew_<id> per distinct fused chain (RT_K_ew, id = its
 * i[0]) found in progs[0 .. nprogs). */
void cg_cuda_build_source(ir_buf *out, const ir_prog *progs, int nprogs);

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
