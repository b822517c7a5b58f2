/* codegen.h -- per-rank Program to a standalone executable.
 *
 *   host.c   LLVM C API: build the rank's module (main, train loop, kernel and
 *            collective calls, a function per body of repeated layers and a
 *            loop over its table per call, the embedded manifest), verify it,
 *            optimise it with the new pass manager, emit an object file (and,
 *            on request, textual IR)
 *   link.c   link the object with rtlib (libnnsc_rt.a) into out/rankN
 *   emit.c   out/launch and out/plan.txt
 *   svg.c    out/plan.svg: the plan drawn (mesh, memory, op-trans,
 *            collectives, a pipeline's timeline)
 *
 * The cuda target (--target cuda) differs in host.c only: the rank's module
 * also embeds the build's cubins (cuda.h: compiled once per build, the same
 * images in every rank), main() starts with rt_init_cuda and every kernel
 * call is rt_cuda_k(ctx, RT_K_<name>, ...).  Ranks of both targets link the
 * same way (rtlib dlopens the CUDA driver and NCCL at run time).
 */
#ifndef NNSC_CODEGEN_H
#define NNSC_CODEGEN_H

#include "cuda.h"
#include "ir.h"

typedef struct cg_opts {
    const char *cpu;        /* target CPU for rank code, e.g. "x86-64-v3" */
    const char *features;   /* extra target features, "" for none */
    int opt_level;          /* 0..3 */
    int emit_llvm;          /* also write rankN.ll */
    int prog_id;            /* a shared program (p->nmember > 0): its function is
                               nnsc_prog<prog_id>, called by the dispatcher's main */
} cg_opts;

/* What the cuda target adds to a build: the images every rank embeds. */
typedef struct cg_gpu {
    const cg_cubin *cubin;  /* one image per --arch, in --arch order (cuda.h) */
    int ncubin;             /* how many (>= 1) */
    int64_t src_bytes;      /* size of the CUDA C source they were compiled from */
    int nfused;             /* generated kernels of fused chains (nnsc_ew_<id>) in it */
} cg_gpu;

/* Build rank p's module and write OBJ_PATH (and LL_PATH if not NULL).
 * Returns 0, or 1 after printing a message (LLVM failures).  o may be NULL
 * (defaults: x86-64-v3, -O2). */
int cg_host(const ir_prog *p, const cg_opts *o, const char *obj_path, const char *ll_path);
/* The same for the cuda target: the module embeds gpu's images. */
int cg_host_cuda(const ir_prog *p, const cg_opts *o, const cg_gpu *gpu, const char *obj_path,
                 const char *ll_path);

/* Link obj into exe with rtlib.  rtlib_path: the static library.
 * Returns 0, or 1 after printing a message. */
int cg_link(const char *obj, const char *rtlib_path, const char *exe);
/* The same for nobj objects. */
/* Compile a custom op's C kernel src into obj (-march=cpu); 0, or 2 after a message (1: obj cannot be written). */
int cg_compile_c(const char *src, const char *obj, const char *cpu);
/* Compile it into a shared object instead (check-op); 0, or 2 after a message. */
int cg_compile_shared(const char *src, const char *so);
/* Whether object file obj defines symbol sym: 1, 0, or -1 (unreadable). */
int cg_object_defines(const char *obj, const char *sym);
/* Where nnsc_custom.h is ($NNSC_INCLUDE, else include/ beside nnsc-aot). */
const char *cg_include_dir(void);
int cg_link_objs(const char *const *objs, int nobj, const char *rtlib_path, const char *exe);

/* A build's shared programs (passes/share.c) are functions nnsc_prog<k>(argc,
 * argv, row), one object each; the dispatcher's object holds main(): the
 * rank from the environment (rt_rank_select, rtlib/rt.h), then
 * nnsc_prog<cls_of[rank]>(argc, argv, row_of[rank]).  Writes obj_path;
 * 0, or 1 after a message. */
int cg_dispatch(int world, int nprog, const int *cls_of, const int *row_of, const char *model, const cg_opts *o,
                const char *const *cust, int ncust,
                const char *obj_path);

/* emit.c: write DIR/launch (runs all ranks here, forwards their output,
 * fails when any rank fails), DIR/plan.txt and DIR/plan.svg (svg.c).  gpu: NULL for the cpu
 * target; for cuda, the images (plan.txt lists them, launch gives every
 * rank a GPU and the rendezvous address).  progs: per rank, what plan.txt
 * reports (arena, persistent, flops, comm_bytes, staging); nprog: the
 * distinct programs built for them (0: not said).  Returns 0 or 1. */
int cg_emit(const char *dir, const char *spec, const ir_dist *d, const ir_prog *progs, int nprog,
            const cg_gpu *gpu);

/* emit.c: the bytes the cpu target's matmul_bf16 stages its operands in on
 * rank r running program p (its matmul_bf16 calls, in bodies too): three
 * buffers, each its largest call's need rounded to the allocation unit
 * (rtlib/cpu/rt_lowp.h, lowp.c), allocated outside the arena and kept. */
int64_t cg_bf16_staging(const ir_prog *p, int r);

/* The helpers plan.txt and plan.svg share (emit.c). */
/* A list of devices, runs of 3 or more with one stride as "a-b" (stride 1)
 * or "a-b/s": "0-1023", "3-1019/8", "0,4". */
void cg_devlist(ir_buf *b, const int *v, int n);
/* Do comms a and b differ only in their groups (one line in plan.txt)? */
int cg_same_but_group(const ir_comm *a, const ir_comm *b);
/* Comm i in a gradient bucket (passes/bucket.c): 0 none, 1 its first, 2 another. */
int cg_bucket_role(const ir_dist *d, int i);
/* A pipeline's step on the cost model. */
typedef struct cg_pipe_step {
    double *cost;   /* per stage and task kind (pass_pipe_costs) */
    double *start;  /* per task of d->pipe */
    double span;    /* the step */
    double bubble;  /* its idle fraction */
} cg_pipe_step;
/* d->pipe's step (d has a pipeline); free with cg_step_free. */
cg_pipe_step cg_step_of(const ir_dist *d);
void cg_step_free(cg_pipe_step *s);
/* The schedule's name ("1f1b", "interleaved 1f1b, 2 chunks"; buf holds a made one). */
const char *cg_sched_name(const ir_pipe *p, char *buf, size_t n);
/* The bubble formula of a built-in schedule for equal stages: its text,
 * and *den with the fraction (p-1)/den; NULL for a user order. */
const char *cg_bubble_formula(const ir_pipe *p, int *den);

/* svg.c: plan.svg into b, for any plan: the mesh (stages, dp x tp, which
 * layers each stage holds), memory per rank (ranks with equal figures drawn
 * once), how each op is split on which devices (repeated layers grouped),
 * the collectives per step and, for a pipeline, its step on the cost model.
 * progs: per rank, as cg_emit's.  Plain SVG 1.1, deterministic; the size
 * grows with the plan's distinct parts, not with devices x layers. */
void cg_plan_svg(const ir_dist *d, const ir_prog *progs, ir_buf *b);

/* Where libnnsc_rt.a is: $NNSC_RTLIB, else next to the running compiler. */
const char *cg_rtlib_path(void);

/* Kernel names by RT_K_* id (ir.h, from rtlib/rt_kernels.h). */
extern const char *const cg_kernel_names[RT_K_COUNT];

/* host.c: --cpu.  Can rank code be compiled for the CPU named cpu (an LLVM CPU name, not
 * "native")?  Checked by compiling an empty function for it in a child
 * process.  Returns 0 yes; 1 LLVM does not know the name; 2 it does but
 * cannot compile x86-64 code for it (a 32-bit CPU such as i686); -1 the
 * check could not run.  why gets LLVM's message or what failed (one line). */
int cg_cpu_check(const char *cpu, char *why, size_t whysz);

/* The CPU names LLVM knows for this host's target, in its (alphabetical)
 * order, NULL-terminated; NULL when LLVM did not list them.  Free with
 * cg_cpu_names_free. */
char **cg_cpu_names(void);
void cg_cpu_names_free(char **names);

#endif
