/* host.c -- a rank's Program to an LLVM module, then to an object file.
 *
 * The module holds one function, main(), which is in C terms exactly the
 * program sketched in rtlib/rt.h: rt_init with the embedded manifest, the
 * prologue kernels, the step loop (pre kernels, the micro-batch loop, post
 * kernels, rt_step_end with the loss), the epilogue kernels, rt_finish.
 * Each Program instruction becomes one call rt_k_<name>(ctx, bufs, ints,
 * flts): bufs and ints are stack arrays filled right before the call, flts a
 * constant global.  The instruction's note names those arrays and is
 * attached to the call as !nnsc.note metadata, so rankN.ll reads like the
 * `--dump=lower` output.
 *
 * Repeated layers (passes/outline.c) are functions: each body of the
 * Program becomes an internal function nnsc_body<k>(ctx, arena, row, step,
 * mb) holding its instructions, built as main's are, an operand that is a
 * slot loaded from row[slot]; each call instruction becomes a counted loop
 * over its table (a private constant int64_t array, row after row) calling
 * that function with the loop variables of the place of the call.  The
 * optimiser may inline a body called once; the loop stays, so the code
 * grows with the distinct layers, not with the layers.
 *
 * A section (or body) of more than CG_PART instructions is cut into part
 * functions nnsc_part<k> of CG_PART instructions each, called in order and
 * left unoptimised (cg_run says why), so that the time LLVM takes grows
 * linearly with the instructions.
 *
 * The cuda target (cg_host_cuda) builds the same main() with two
 * differences (rtlib/rt.h): it starts with rt_init_cuda(argc, argv,
 * MANIFEST, images, n), where images is a constant table of rt_image {arch,
 * data, size} over the build's cubins, each embedded as an internal
 * constant nnsc_cubin_<arch> (16-byte aligned); and every instruction is a
 * call rt_cuda_k(ctx, RT_K_<name>, bufs, ints, flts), the kernel number an
 * i32 constant (the row of rt_kernels.h, which rtlib numbers RT_KN_<name>).
 *
 * The output depends only on the Program, the options and the images: the
 * module and its source file are named rankN, nothing records paths, times
 * or pointers, and the target is the portable CPU named in the options, not
 * the host's (unless the options ask for "native").
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "codegen.h"

/* Target CPU when the options name none: a portable x86-64 level, so the
 * executables run on any machine of the cluster, not just the build host. */
#define CG_DEFAULT_CPU "x86-64-v3"

/* Longest prefix of a note used in value names. */
#define CG_NAME_MAX 48

/* Most instructions in one function's straight-line run (cg_run). */
#define CG_PART 256

/* ------------------------------------------------------------ LLVM errors */

/* The one check for LLVM calls that can fail: when failed, print file:line,
 * what was attempted and LLVM's message *msg.  Frees *msg (an
 * LLVMDisposeMessage string or NULL) either way; returns failed. */
static int cg_check(const char *file, int line, const char *what, int failed, char **msg) {
    if (failed)
        fprintf(stderr, "%s:%d: LLVM: %s failed: %s\n", file, line, what,
                *msg && (*msg)[0] ? *msg : "(no message)");
    if (*msg) LLVMDisposeMessage(*msg);
    *msg = NULL;
    return failed;
}

/* Run call, which reports failure as non-zero and may set the char *
 * variable msg to LLVM's message, and check it.  msg is cleared first and
 * read only after the call (so the order of argument evaluation is moot). */
#define CG_CHECK(what, call, msg) \
    cg_check(__FILE__, __LINE__, (what), ((msg) = NULL, (call)) != 0, &(msg))

/* The same for calls that return an LLVMErrorRef (consumed here). */
static int cg_check_err(const char *file, int line, const char *what, LLVMErrorRef err) {
    char *msg = NULL;
    if (err) {
        char *m = LLVMGetErrorMessage(err);
        msg = LLVMCreateMessage(m);
        LLVMDisposeErrorMessage(m);
    }
    return cg_check(file, line, what, err != NULL, &msg);
}
#define CG_CHECK_ERR(what, call) cg_check_err(__FILE__, __LINE__, (what), (call))

/* ------------------------------------------------------- output files */

/* Write data[0 .. n) to path (a file under the user's -o): 0, or 1 after
 * "cannot write PATH: REASON" (the system's, as for the driver's other
 * outputs).  LLVM writes into memory and this does the system calls, so a
 * failure names the path and the reason, not this file's line. */
static int cg_write(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    int bad = !f || fwrite(data, 1, n, f) != n;
    int err = errno;
    if (f && fclose(f) != 0 && !bad) bad = 1, err = errno;
    if (bad) fprintf(stderr, "nnsc-aot: error: cannot write %s: %s\n", path, strerror(err));
    return bad;
}

/* Module m's object code for tm, written to path: 0, or 1 after a message. */
static int cg_emit_object(LLVMTargetMachineRef tm, LLVMModuleRef m, const char *what, const char *path) {
    char *msg;
    LLVMMemoryBufferRef buf = NULL;
    if (CG_CHECK(what, LLVMTargetMachineEmitToMemoryBuffer(tm, m, LLVMObjectFile, &msg, &buf), msg)) return 1;
    int rc = cg_write(path, LLVMGetBufferStart(buf), LLVMGetBufferSize(buf));
    LLVMDisposeMemoryBuffer(buf);
    return rc;
}

/* ------------------------------------------------------- module building */

/* The rtlib entry points main() calls around the kernels. */
enum {
    CG_RT_INIT,        /* rt_ctx *rt_init(int, char **, const char *), or for cuda
                          rt_init_cuda(int, char **, const char *, const rt_image *, int) */
    CG_RT_ARENA,       /* char *rt_arena(rt_ctx *) */
    CG_RT_FIRST_STEP,  /* int64_t rt_first_step(rt_ctx *) */
    CG_RT_STEPS,       /* int64_t rt_steps(rt_ctx *) */
    CG_RT_STEP_BEGIN,  /* void rt_step_begin(rt_ctx *, int64_t) */
    CG_RT_STEP_END,    /* void rt_step_end(rt_ctx *, int64_t, const float *) */
    CG_RT_FINISH,      /* int rt_finish(rt_ctx *) */
    CG_RT_EVAL_DUE,    /* int rt_eval_due(rt_ctx *, int64_t) */
    CG_RT_EVAL_STEPS,  /* int64_t rt_eval_steps(rt_ctx *) */
    CG_RT_EVAL_END,    /* void rt_eval_end(rt_ctx *, int64_t, const float *) */
    CG_RT_COUNT
};

/* State while building one rank's module. */
typedef struct cg_host_ctx {
    const ir_prog *p;              /* the Program */
    const cg_gpu *gpu;             /* the cuda target's images; NULL for the cpu target */
    LLVMContextRef c;              /* LLVM context (owned) */
    LLVMModuleRef m;               /* module rankN */
    LLVMTargetDataRef td;          /* data layout of the target (owned) */
    LLVMBuilderRef b;              /* builder at the current point of main */
    LLVMBuilderRef ab;             /* builder at the end of main's entry block (allocas) */
    LLVMTypeRef i8, i32, i64, f32, ptr, vd;  /* types used throughout */
    LLVMTypeRef kty;               /* void (ptr, ptr, ptr, ptr): every rt_k_* */
    LLVMValueRef kfn[RT_K_COUNT];  /* rt_k_* declarations, NULL until first used (cpu) */
    LLVMTypeRef cuda_kty;          /* void (ptr, i32, ptr, ptr, ptr): rt_cuda_k (cuda) */
    LLVMValueRef cuda_k;           /* rt_cuda_k's declaration (cuda), else NULL */
    LLVMTypeRef rty[CG_RT_COUNT];  /* types of the CG_RT_* functions */
    LLVMValueRef rfn[CG_RT_COUNT]; /* their declarations */
    LLVMTypeRef life_ty;           /* type of llvm.lifetime.start/end */
    LLVMValueRef life[2];          /* llvm.lifetime.start, llvm.lifetime.end */
    unsigned md_note;              /* metadata kind "nnsc.note" */
    LLVMValueRef ctx;              /* main's rt_ctx * */
    LLVMValueRef arena;            /* main's arena base (char *) */
    LLVMValueRef step;             /* the step index, or NULL outside the step loop */
    LLVMValueRef mb;               /* the micro-batch index, or NULL outside its loop */
    LLVMValueRef row;              /* in a body's function: its row of slot values (const
                                      int64_t *); NULL in main */
    LLVMTypeRef body_ty;           /* void (ptr ctx, ptr arena, ptr row, i64 step, i64 mb) */
    LLVMValueRef *body_fn;         /* per body of the Program: its function (owned array) */
    LLVMValueRef rvg;              /* a shared program's internal global nnsc_rv: the running
                                      rank's row of rank variables (const int64_t *); else NULL */
    const char *cpu, *features;    /* the target's, for the functions added (cg_fn_attrs) */
    int nparts;                    /* part functions made so far (cg_run), for their names */
} cg_host_ctx;

/* Declare an external function, marked nounwind (rtlib is plain C). */
static LLVMValueRef cg_declare(cg_host_ctx *h, const char *name, LLVMTypeRef ty) {
    LLVMValueRef f = LLVMAddFunction(h->m, name, ty);
    unsigned k = LLVMGetEnumAttributeKindForName("nounwind", 8);
    LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(h->c, k, 0));
    return f;
}

/* Declare the rtlib entry points and the lifetime intrinsics (for the cuda
 * target rt_init_cuda and rt_cuda_k in place of rt_init and the rt_k_*). */
static void cg_declare_runtime(cg_host_ctx *h) {
    const char *names[CG_RT_COUNT] = {
        "rt_init", "rt_arena", "rt_first_step", "rt_steps",
        "rt_step_begin", "rt_step_end", "rt_finish", "rt_eval_due", "rt_eval_steps", "rt_eval_end",
    };
    LLVMTypeRef p1[] = {h->ptr}, init[] = {h->i32, h->ptr, h->ptr, h->ptr, h->i32};
    LLVMTypeRef begin[] = {h->ptr, h->i64}, end[] = {h->ptr, h->i64, h->ptr};
    if (h->gpu) names[CG_RT_INIT] = "rt_init_cuda";
    h->rty[CG_RT_INIT] = LLVMFunctionType(h->ptr, init, h->gpu ? 5 : 3, 0);
    h->rty[CG_RT_ARENA] = LLVMFunctionType(h->ptr, p1, 1, 0);
    h->rty[CG_RT_FIRST_STEP] = LLVMFunctionType(h->i64, p1, 1, 0);
    h->rty[CG_RT_STEPS] = LLVMFunctionType(h->i64, p1, 1, 0);
    h->rty[CG_RT_STEP_BEGIN] = LLVMFunctionType(h->vd, begin, 2, 0);
    h->rty[CG_RT_STEP_END] = LLVMFunctionType(h->vd, end, 3, 0);
    h->rty[CG_RT_FINISH] = LLVMFunctionType(h->i32, p1, 1, 0);
    h->rty[CG_RT_EVAL_DUE] = LLVMFunctionType(h->i32, begin, 2, 0);
    h->rty[CG_RT_EVAL_STEPS] = LLVMFunctionType(h->i64, p1, 1, 0);
    h->rty[CG_RT_EVAL_END] = LLVMFunctionType(h->vd, end, 3, 0);
    for (int k = 0; k < CG_RT_COUNT; k++) h->rfn[k] = cg_declare(h, names[k], h->rty[k]);

    LLVMTypeRef kargs[] = {h->ptr, h->ptr, h->ptr, h->ptr};
    h->kty = LLVMFunctionType(h->vd, kargs, 4, 0);
    if (h->gpu) {
        LLVMTypeRef cargs[] = {h->ptr, h->i32, h->ptr, h->ptr, h->ptr};
        h->cuda_kty = LLVMFunctionType(h->vd, cargs, 5, 0);
        h->cuda_k = cg_declare(h, "rt_cuda_k", h->cuda_kty);
    }

    static const char *const life[2] = {"llvm.lifetime.start", "llvm.lifetime.end"};
    for (int k = 0; k < 2; k++) {
        unsigned id = LLVMLookupIntrinsicID(life[k], strlen(life[k]));
        h->life[k] = LLVMGetIntrinsicDeclaration(h->m, id, &h->ptr, 1);
        h->life_ty = LLVMIntrinsicGetType(h->c, id, &h->ptr, 1);
    }
}

/* Call a CG_RT_* function. */
static LLVMValueRef cg_call_rt(cg_host_ctx *h, int k, LLVMValueRef *args, unsigned n,
                               const char *name) {
    return LLVMBuildCall2(h->b, h->rty[k], h->rfn[k], args, n, name);
}

/* The declaration of rt_k_<name>, added on first use. */
static LLVMValueRef cg_kernel(cg_host_ctx *h, int kernel) {
    if (!h->kfn[kernel]) {
        char name[64];
        snprintf(name, sizeof name, "rt_k_%s", cg_kernel_names[kernel]);
        h->kfn[kernel] = cg_declare(h, name, h->kty);
    }
    return h->kfn[kernel];
}

/* The user's kernel of a custom op, nnsc_custom_<name> (its row is the
 * instruction's first int), declared on first use. */
static LLVMValueRef cg_custom(cg_host_ctx *h, const pg_instr *in) {
    IR_ASSERT(in->nint > 0 && !in->islot[0] && !in->ivar[0] && in->ints[0].c >= 0 && in->ints[0].c < h->p->ncust);
    char name[160];
    snprintf(name, sizeof name, "nnsc_custom_%s", h->p->cust[in->ints[0].c].name);
    LLVMValueRef f = LLVMGetNamedFunction(h->m, name);
    return f ? f : cg_declare(h, name, h->kty);
}

/* A value-name stem for an instruction: its note with characters outside
 * [A-Za-z0-9_.] turned into '_', cut short; the kernel name if it has none. */
static void cg_stem(const pg_instr *in, char *out, size_t cap) {
    const char *s = in->note && in->note[0] ? in->note : cg_kernel_names[in->kernel];
    size_t n = 0;
    for (; s[n] && n + 1 < cap && n < CG_NAME_MAX; n++) {
        char ch = s[n];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9') || ch == '_' || ch == '.';
        out[n] = ok ? ch : '_';
    }
    out[n] = 0;
}

/* A stack array of n elements of type el in main's entry block, its
 * lifetime started here; *size gets its size in bytes. */
static LLVMValueRef cg_stack_array(cg_host_ctx *h, LLVMTypeRef el, unsigned n, const char *name,
                                   LLVMValueRef *size) {
    LLVMTypeRef at = LLVMArrayType2(el, n);
    LLVMValueRef a = LLVMBuildAlloca(h->ab, at, name);
    LLVMSetAlignment(a, 8);
    *size = LLVMConstInt(h->i64, LLVMABISizeOfType(h->td, at), 0);
    LLVMValueRef args[2] = {*size, a};
    LLVMBuildCall2(h->b, h->life_ty, h->life[0], args, 2, "");
    return a;
}

/* End the lifetime of a stack array from cg_stack_array. */
static void cg_stack_end(cg_host_ctx *h, LLVMValueRef a, LLVMValueRef size) {
    LLVMValueRef args[2] = {size, a};
    LLVMBuildCall2(h->b, h->life_ty, h->life[1], args, 2, "");
}

/* Store v into element j of the stack array a of type [n x el]. */
static void cg_store_elem(cg_host_ctx *h, LLVMValueRef a, LLVMTypeRef el, unsigned n, unsigned j,
                          LLVMValueRef v) {
    LLVMValueRef idx[2] = {LLVMConstInt(h->i64, 0, 0), LLVMConstInt(h->i64, j, 0)};
    LLVMValueRef slot = LLVMBuildInBoundsGEP2(h->b, LLVMArrayType2(el, n), a, idx, 2, "");
    LLVMBuildStore(h->b, v, slot);
}

/* Slot k of the body's row: row[k] (i64), loaded where it is used. */
static LLVMValueRef cg_slot(cg_host_ctx *h, int k) {
    IR_ASSERT(h->row && k >= 0);
    LLVMValueRef idx = LLVMConstInt(h->i64, (unsigned long long)k, 0);
    LLVMValueRef at = LLVMBuildInBoundsGEP2(h->b, h->i64, h->row, &idx, 1, "");
    LLVMValueRef v = LLVMBuildLoad2(h->b, h->i64, at, "slot");
    LLVMSetAlignment(v, 8);
    return v;
}

/* Rank variable v of a shared program: nnsc_rv[v] (i64), loaded where it
 * is used. */
static LLVMValueRef cg_rankvar(cg_host_ctx *h, int v) {
    IR_ASSERT(h->rvg && v >= 0 && v < h->p->nvar);
    LLVMValueRef row = LLVMBuildLoad2(h->b, h->ptr, h->rvg, "rv");
    LLVMValueRef idx = LLVMConstInt(h->i64, (unsigned long long)v, 0);
    LLVMValueRef at = LLVMBuildInBoundsGEP2(h->b, h->i64, row, &idx, 1, "");
    LLVMValueRef x = LLVMBuildLoad2(h->b, h->i64, at, "rvar");
    LLVMSetAlignment(x, 8);
    return x;
}

/* The value of an integer argument: c + s * step + m * mb, where c is
 * slot islot - 1 of the row when islot is not 0, rank variable ivar - 1
 * when ivar is not 0. */
static LLVMValueRef cg_int_value(cg_host_ctx *h, pg_int v, int islot, int ivar) {
    LLVMValueRef r = NULL;
    if (v.s) {
        IR_ASSERT(h->step);
        r = LLVMBuildMul(h->b, h->step, LLVMConstInt(h->i64, (unsigned long long)v.s, 1), "");
    }
    if (v.m) {
        IR_ASSERT(h->mb);
        LLVMValueRef t = LLVMBuildMul(h->b, h->mb, LLVMConstInt(h->i64, (unsigned long long)v.m, 1), "");
        r = r ? LLVMBuildAdd(h->b, r, t, "") : t;
    }
    if (islot || ivar) {
        LLVMValueRef c = islot ? cg_slot(h, islot - 1) : cg_rankvar(h, ivar - 1);
        return r ? LLVMBuildAdd(h->b, r, c, "") : c;
    }
    LLVMValueRef c = LLVMConstInt(h->i64, (unsigned long long)v.c, 1);
    if (!r) return c;
    return v.c ? LLVMBuildAdd(h->b, r, c, "") : r;
}

/* A private constant global `name` holding init, unnamed_addr (its address
 * is not compared), aligned to align bytes (0: the type's). */
static LLVMValueRef cg_private_const(LLVMModuleRef m, LLVMValueRef init, const char *name, unsigned align) {
    LLVMValueRef g = LLVMAddGlobal(m, LLVMTypeOf(init), name);
    LLVMSetInitializer(g, init);
    LLVMSetGlobalConstant(g, 1);
    LLVMSetLinkage(g, LLVMPrivateLinkage);
    LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
    if (align) LLVMSetAlignment(g, align);
    return g;
}

/* The constant array of n integers v (signed) of type ty. */
static LLVMValueRef cg_const_ints(LLVMTypeRef ty, const int64_t *v, size_t n) {
    LLVMValueRef *c = ir_xmalloc(sizeof *c * (n + 1));
    for (size_t j = 0; j < n; j++) c[j] = LLVMConstInt(ty, (unsigned long long)v[j], 1);
    LLVMValueRef init = LLVMConstArray2(ty, c, (uint64_t)n);
    free(c);
    return init;
}

/* A private constant array of the instruction's floats. */
static LLVMValueRef cg_float_array(cg_host_ctx *h, const pg_instr *in, const char *name) {
    LLVMValueRef v[PG_MAXFLT];
    for (int j = 0; j < in->nflt; j++) v[j] = LLVMConstReal(h->f32, (double)in->flt[j]);
    return cg_private_const(h->m, LLVMConstArray2(h->f32, v, (uint64_t)in->nflt), name, 4);
}

/* One instruction: fill its argument arrays and call rt_k_<name> (cpu) or
 * rt_cuda_k with the kernel's number (cuda). */
static void cg_instr(cg_host_ctx *h, const pg_instr *in) {
    char stem[CG_NAME_MAX + 1], name[CG_NAME_MAX + 8];
    cg_stem(in, stem, sizeof stem);
    LLVMValueRef null = LLVMConstNull(h->ptr);
    LLVMValueRef args[4] = {h->ctx, null, null, null};
    LLVMValueRef size[2] = {NULL, NULL};

    if (in->nbuf) {  /* void *b[nbuf] = {A + off, ...} */
        snprintf(name, sizeof name, "%s.b", stem);
        args[1] = cg_stack_array(h, h->ptr, (unsigned)in->nbuf, name, &size[0]);
        for (int j = 0; j < in->nbuf; j++) {
            LLVMValueRef off = in->bslot[j] ? cg_slot(h, in->bslot[j] - 1)
                               : in->bvar[j] ? cg_rankvar(h, in->bvar[j] - 1)
                                             : LLVMConstInt(h->i64, (unsigned long long)in->buf[j], 1);
            LLVMValueRef ptr = LLVMBuildInBoundsGEP2(h->b, h->i8, h->arena, &off, 1, "");
            cg_store_elem(h, args[1], h->ptr, (unsigned)in->nbuf, (unsigned)j, ptr);
        }
    }
    if (in->nint) {  /* int64_t i[nint] = {c + s * step + m * mb, ...} */
        snprintf(name, sizeof name, "%s.i", stem);
        args[2] = cg_stack_array(h, h->i64, (unsigned)in->nint, name, &size[1]);
        for (int j = 0; j < in->nint; j++)
            cg_store_elem(h, args[2], h->i64, (unsigned)in->nint, (unsigned)j,
                          cg_int_value(h, in->ints[j], in->islot[j], in->ivar[j]));
    }
    if (in->nflt) {  /* static const float f[nflt] = {...} */
        snprintf(name, sizeof name, "%s.f", stem);
        args[3] = cg_float_array(h, in, name);
    }

    LLVMValueRef call;
    if (h->gpu) {
        LLVMValueRef cargs[5] = {args[0], LLVMConstInt(h->i32, (unsigned long long)in->kernel, 0),
                                 args[1], args[2], args[3]};
        call = LLVMBuildCall2(h->b, h->cuda_kty, h->cuda_k, cargs, 5, "");
    } else {
        call = LLVMBuildCall2(h->b, h->kty, in->kernel == RT_K_custom ? cg_custom(h, in) : cg_kernel(h, in->kernel),
                              args, 4, "");
    }
    if (in->note && in->note[0]) {
        LLVMMetadataRef s = LLVMMDStringInContext2(h->c, in->note, strlen(in->note));
        LLVMSetMetadata(call, h->md_note, LLVMMetadataAsValue(h->c, LLVMMDNodeInContext2(h->c, &s, 1)));
    }
    if (size[0]) cg_stack_end(h, args[1], size[0]);
    if (size[1]) cg_stack_end(h, args[2], size[1]);
}

/* A new block of function fn (main or a body's), appended at the end. */
static LLVMBasicBlockRef cg_block(cg_host_ctx *h, LLVMValueRef fn, const char *name) {
    return LLVMAppendBasicBlockInContext(h->c, fn, name);
}

/* Mark function fn as main() is: nounwind, unwind tables, the target CPU
 * and features. */
static void cg_fn_attrs(cg_host_ctx *h, LLVMValueRef fn, const char *cpu, const char *features) {
    unsigned uw = LLVMGetEnumAttributeKindForName("uwtable", 7);
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(h->c, uw, 2));
    LLVMAddTargetDependentFunctionAttr(fn, "target-cpu", cpu);
    if (features[0]) LLVMAddTargetDependentFunctionAttr(fn, "target-features", features);
}

/* A call instruction: its table as a private constant int64_t[nrows *
 * nslots], and for (r = 0; r < nrows; r++) nnsc_body<k>(ctx, arena, tab +
 * r * nslots, step, mb), step and mb 0 where there are none. */
static void cg_call(cg_host_ctx *h, const pg_instr *in) {
    const ir_prog *p = h->p;
    int ns = p->body[in->body].nslots;
    int64_t nv = (int64_t)in->nrows * ns;
    LLVMValueRef tab = LLVMConstNull(h->ptr);
    if (nv) {
        char name[48];
        snprintf(name, sizeof name, "body%d.tab", in->body);
        tab = cg_private_const(h->m, cg_const_ints(h->i64, p->tab + in->tab, (size_t)nv), name, 8);
        int vars = 0;   /* entries that are rank variables: stored before the loop */
        for (int64_t j = 0; p->tabvar && j < nv; j++) vars |= p->tabvar[in->tab + j] != 0;
        if (vars) {   /* then the table is written: a plain private global */
            LLVMSetGlobalConstant(tab, 0);
            LLVMSetUnnamedAddress(tab, LLVMNoUnnamedAddr);
        }
        for (int64_t j = 0; vars && j < nv; j++) {
            int var = p->tabvar[in->tab + j];
            if (!var) continue;
            LLVMValueRef idx = LLVMConstInt(h->i64, (unsigned long long)j, 0);
            LLVMValueRef at = LLVMBuildInBoundsGEP2(h->b, h->i64, tab, &idx, 1, "");
            LLVMSetAlignment(LLVMBuildStore(h->b, cg_rankvar(h, var - 1), at), 8);
        }
    }
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(h->b));
    LLVMBasicBlockRef from = LLVMGetInsertBlock(h->b), cond = cg_block(h, fn, "call.cond"),
                      body = cg_block(h, fn, "call.body"), exit = cg_block(h, fn, "call.exit");
    LLVMBuildBr(h->b, cond);
    LLVMPositionBuilderAtEnd(h->b, cond);
    LLVMValueRef r = LLVMBuildPhi(h->b, h->i64, "row");
    LLVMValueRef n = LLVMConstInt(h->i64, (unsigned long long)in->nrows, 0);
    LLVMBuildCondBr(h->b, LLVMBuildICmp(h->b, LLVMIntSLT, r, n, "more"), body, exit);
    LLVMPositionBuilderAtEnd(h->b, body);
    LLVMValueRef at = LLVMBuildNSWMul(h->b, r, LLVMConstInt(h->i64, (unsigned long long)ns, 0), "");
    LLVMValueRef zero = LLVMConstInt(h->i64, 0, 0);
    LLVMValueRef args[5] = {h->ctx, h->arena, LLVMBuildInBoundsGEP2(h->b, h->i64, tab, &at, 1, "rowp"),
                            h->step ? h->step : zero, h->mb ? h->mb : zero};
    LLVMValueRef call = LLVMBuildCall2(h->b, h->body_ty, h->body_fn[in->body], args, 5, "");
    if (in->note && in->note[0]) {
        LLVMMetadataRef s = LLVMMDStringInContext2(h->c, in->note, strlen(in->note));
        LLVMSetMetadata(call, h->md_note, LLVMMetadataAsValue(h->c, LLVMMDNodeInContext2(h->c, &s, 1)));
    }
    LLVMValueRef next = LLVMBuildNSWAdd(h->b, r, LLVMConstInt(h->i64, 1, 0), "row.next");
    LLVMBasicBlockRef end = LLVMGetInsertBlock(h->b);
    LLVMBuildBr(h->b, cond);
    LLVMValueRef inc[2] = {zero, next};
    LLVMBasicBlockRef incb[2] = {from, end};
    LLVMAddIncoming(r, inc, incb, 2);
    LLVMPositionBuilderAtEnd(h->b, exit);
}

/* An internal function of the bodies' type (cg_host_ctx.body_ty),
 * nounwind, marked as main() is, with its parameters named; its blocks are
 * the caller's to add. */
static LLVMValueRef cg_internal_fn(cg_host_ctx *h, const char *name) {
    LLVMValueRef fn = LLVMAddFunction(h->m, name, h->body_ty);
    LLVMSetLinkage(fn, LLVMInternalLinkage);
    unsigned nu = LLVMGetEnumAttributeKindForName("nounwind", 8);
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(h->c, nu, 0));
    cg_fn_attrs(h, fn, h->cpu, h->features);
    static const char *const pn[5] = {"ctx", "arena", "row", "s", "mb"};
    for (unsigned j = 0; j < 5; j++) LLVMSetValueName2(LLVMGetParam(fn, j), pn[j], strlen(pn[j]));
    return fn;
}

/* Instructions ins[0 .. n) at the builder's point, in order.  A run longer
 * than CG_PART goes into part functions of CG_PART instructions each,
 * nnsc_part<k>(ctx, arena, row, step, mb), internal, called in order,
 * noinline and optnone.  Why: LLVM's passes take time that grows faster
 * than a function's length (the SLP vectorizer's spill cost, instruction
 * numbering in a block), so a long straight-line section made one huge
 * main() that took minutes for 10,000 ops; parts keep every function short.
 * And -O2 on a part still cost about 1 ms per kernel call for nothing: a
 * part only stores each call's arguments and calls the kernel (rtlib's code,
 * compiled by cc), and the optimised stores ran no faster (a 1,000-op chain:
 * 0.2 ms per step either way), so the parts are left unoptimised. */
static void cg_run(cg_host_ctx *h, const pg_instr *ins, int n) {
    if (n <= CG_PART) {
        for (int i = 0; i < n; i++) {
            if (ins[i].kernel == PG_CALL) cg_call(h, &ins[i]);
            else cg_instr(h, &ins[i]);
        }
        return;
    }
    LLVMValueRef zero = LLVMConstInt(h->i64, 0, 0);
    for (int i0 = 0; i0 < n; i0 += CG_PART) {
        char name[32];
        snprintf(name, sizeof name, "nnsc_part%d", h->nparts++);
        LLVMValueRef fn = cg_internal_fn(h, name);
        static const char *const attr[2] = {"noinline", "optnone"};
        for (int a = 0; a < 2; a++) {
            unsigned k = LLVMGetEnumAttributeKindForName(attr[a], strlen(attr[a]));
            LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(h->c, k, 0));
        }
        /* the caller's place and values, restored after the part */
        LLVMBasicBlockRef at = LLVMGetInsertBlock(h->b), aat = LLVMGetInsertBlock(h->ab);
        LLVMValueRef ctx = h->ctx, arena = h->arena, row = h->row, step = h->step, mb = h->mb;
        LLVMBasicBlockRef entry = cg_block(h, fn, "entry"), code = cg_block(h, fn, "code");
        LLVMPositionBuilderAtEnd(h->ab, entry);
        LLVMPositionBuilderAtEnd(h->b, code);
        h->ctx = LLVMGetParam(fn, 0);
        h->arena = LLVMGetParam(fn, 1);
        h->row = row ? LLVMGetParam(fn, 2) : NULL;
        h->step = step ? LLVMGetParam(fn, 3) : NULL;
        h->mb = mb ? LLVMGetParam(fn, 4) : NULL;
        int i1 = n - i0 < CG_PART ? n : i0 + CG_PART;
        for (int i = i0; i < i1; i++) {
            if (ins[i].kernel == PG_CALL) cg_call(h, &ins[i]);
            else cg_instr(h, &ins[i]);
        }
        LLVMBuildRetVoid(h->b);
        LLVMBuildBr(h->ab, code);   /* the entry block holds the argument arrays */
        h->ctx = ctx, h->arena = arena, h->row = row, h->step = step, h->mb = mb;
        LLVMPositionBuilderAtEnd(h->b, at);
        LLVMPositionBuilderAtEnd(h->ab, aat);
        LLVMValueRef args[5] = {ctx, arena, row ? row : LLVMConstNull(h->ptr), step ? step : zero,
                                mb ? mb : zero};
        LLVMBuildCall2(h->b, h->body_ty, fn, args, 5, "");
    }
}

/* Body k's function, internal:
 *   void nnsc_body<k>(rt_ctx *ctx, char *arena, const int64_t *row, int64_t step, int64_t mb)
 * which calls its kernels as main() does, slot operands loaded from row
 * (step and mb are main's loop variables where the call is; an evaluation
 * passes its batch as step; outside the loops 0). */
static void cg_body(cg_host_ctx *h, int k) {
    const pg_body *bd = &h->p->body[k];
    char name[32];
    snprintf(name, sizeof name, "nnsc_body%d", k);
    LLVMValueRef fn = cg_internal_fn(h, name);
    h->body_fn[k] = fn;
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(h->c, fn, "entry");
    LLVMBasicBlockRef code = LLVMAppendBasicBlockInContext(h->c, fn, "code");
    LLVMPositionBuilderAtEnd(h->ab, entry);
    LLVMPositionBuilderAtEnd(h->b, code);
    h->ctx = LLVMGetParam(fn, 0);
    h->arena = LLVMGetParam(fn, 1);
    h->row = LLVMGetParam(fn, 2);
    h->step = LLVMGetParam(fn, 3);
    h->mb = LLVMGetParam(fn, 4);
    cg_run(h, bd->ins, bd->nins);
    LLVMBuildRetVoid(h->b);
    LLVMBuildBr(h->ab, code);   /* the entry block holds the argument arrays */
    h->ctx = h->arena = h->row = h->step = h->mb = NULL;
}

/* All instructions of one section, in order. */
static void cg_section(cg_host_ctx *h, int sec) {
    cg_run(h, h->p->ins[sec], h->p->nins[sec]);
}

/* The manifest as a private constant NUL-terminated string. */
static LLVMValueRef cg_manifest(cg_host_ctx *h) {
    const char *s = h->p->manifest.s ? h->p->manifest.s : "";
    return cg_private_const(h->m, LLVMConstStringInContext2(h->c, s, strlen(s), 0), "manifest", 0);
}

/* The cuda target's images: each cubin as an internal constant
 * nnsc_cubin_<arch>, 16-byte aligned (internal, not private, so that the
 * symbol stays in the executable's symbol table: `nm -S rankN | grep
 * nnsc_cubin` lists the images and their sizes), and the table
 * rt_image nnsc_images[n] = {{"sm_80", nnsc_cubin_sm_80, size}, ...} that
 * main() hands to rt_init_cuda.  Returns the table. */
static LLVMValueRef cg_images(cg_host_ctx *h) {
    const cg_gpu *gpu = h->gpu;
    IR_ASSERT(gpu->ncubin >= 1);
    LLVMTypeRef img = LLVMStructCreateNamed(h->c, "rt_image");  /* rtlib/rt.h */
    LLVMTypeRef fields[3] = {h->ptr, h->ptr, h->i64};
    LLVMStructSetBody(img, fields, 3, 0);
    LLVMValueRef *rows = ir_xcalloc((size_t)gpu->ncubin, sizeof *rows);
    for (int k = 0; k < gpu->ncubin; k++) {
        const cg_cubin *cb = &gpu->cubin[k];
        char name[64];
        snprintf(name, sizeof name, "nnsc_cubin_%s", cb->arch);
        LLVMValueRef data = LLVMConstStringInContext2(h->c, (const char *)cb->data, cb->size, 1);
        LLVMValueRef g = LLVMAddGlobal(h->m, LLVMTypeOf(data), name);
        LLVMSetInitializer(g, data);
        LLVMSetGlobalConstant(g, 1);
        LLVMSetLinkage(g, LLVMInternalLinkage);
        LLVMSetAlignment(g, 16);
        snprintf(name, sizeof name, "nnsc_arch_%s", cb->arch);
        LLVMValueRef a = cg_private_const(h->m, LLVMConstStringInContext2(h->c, cb->arch, strlen(cb->arch), 0), name, 0);
        LLVMValueRef row[3] = {a, g, LLVMConstInt(h->i64, (unsigned long long)cb->size, 0)};
        rows[k] = LLVMConstNamedStruct(img, row, 3);
    }
    LLVMValueRef init = LLVMConstArray2(img, rows, (uint64_t)gpu->ncubin);
    free(rows);
    LLVMValueRef t = LLVMAddGlobal(h->m, LLVMTypeOf(init), "nnsc_images");
    LLVMSetInitializer(t, init);
    LLVMSetGlobalConstant(t, 1);
    LLVMSetLinkage(t, LLVMPrivateLinkage);
    LLVMSetAlignment(t, 8);
    return t;
}

/* A counted loop for (v = 0; v < n; v++) { body(v) } at the builder's
 * point; *var is the loop variable while body runs.  Returns with the
 * builder after the loop. */
static void cg_loop(cg_host_ctx *h, LLVMValueRef fn, LLVMValueRef n, LLVMValueRef *var, const char *nm,
                    void (*body)(cg_host_ctx *, LLVMValueRef), LLVMValueRef arg) {
    char b1[32], b2[32], b3[32];
    snprintf(b1, sizeof b1, "%s.cond", nm);
    snprintf(b2, sizeof b2, "%s.body", nm);
    snprintf(b3, sizeof b3, "%s.exit", nm);
    LLVMBasicBlockRef from = LLVMGetInsertBlock(h->b), cond = cg_block(h, fn, b1), bodyb = cg_block(h, fn, b2),
                      exit = cg_block(h, fn, b3);
    LLVMBuildBr(h->b, cond);
    LLVMPositionBuilderAtEnd(h->b, cond);
    LLVMValueRef v = LLVMBuildPhi(h->b, h->i64, nm);
    LLVMBuildCondBr(h->b, LLVMBuildICmp(h->b, LLVMIntSLT, v, n, "more"), bodyb, exit);
    LLVMPositionBuilderAtEnd(h->b, bodyb);
    LLVMValueRef saved = *var;
    *var = v;
    body(h, arg);
    *var = saved;
    LLVMValueRef next = LLVMBuildNSWAdd(h->b, v, LLVMConstInt(h->i64, 1, 0), "next");
    LLVMBasicBlockRef end = LLVMGetInsertBlock(h->b);
    LLVMBuildBr(h->b, cond);
    LLVMValueRef in[2] = {LLVMConstInt(h->i64, 0, 0), next};
    LLVMBasicBlockRef inb[2] = {from, end};
    LLVMAddIncoming(v, in, inb, 2);
    LLVMPositionBuilderAtEnd(h->b, exit);
}

/* The pipeline's steady-state loop body (cg_loop's, h->mb its iteration). */
static void cg_steady(cg_host_ctx *h, LLVMValueRef unused) {
    (void)unused;
    cg_run(h, h->p->ins[IR_SEC_MB] + h->p->loop_lo, h->p->loop_hi - h->p->loop_lo);
}

static void cg_eval_mb(cg_host_ctx *h, LLVMValueRef unused) {
    (void)unused;
    cg_section(h, IR_SEC_EVAL);
}

/* for (mb ...) { eval section } */
static void cg_eval_batch(cg_host_ctx *h, LLVMValueRef fn) {
    LLVMValueRef nmb = LLVMConstInt(h->i64, (unsigned long long)h->p->micro_batches, 1);
    cg_loop(h, fn, nmb, &h->mb, "emb", cg_eval_mb, NULL);
}

/* if (rt_eval_due(ctx, s)) { eval_pre; for e: for mb: eval; eval_post;
 * rt_eval_end(ctx, s, loss) } -- inside the eval loops the "step" variable
 * of integer arguments is the evaluation batch e. */
static void cg_eval(cg_host_ctx *h, LLVMValueRef fn, LLVMValueRef loss) {
    LLVMValueRef a2[2] = {h->ctx, h->step};
    LLVMValueRef due = cg_call_rt(h, CG_RT_EVAL_DUE, a2, 2, "eval.due");
    LLVMBasicBlockRef yes = cg_block(h, fn, "eval"), no = cg_block(h, fn, "eval.done");
    LLVMBuildCondBr(h->b, LLVMBuildICmp(h->b, LLVMIntNE, due, LLVMConstInt(h->i32, 0, 0), "due"), yes, no);
    LLVMPositionBuilderAtEnd(h->b, yes);
    cg_section(h, IR_SEC_EVAL_PRE);
    LLVMValueRef ne = cg_call_rt(h, CG_RT_EVAL_STEPS, &h->ctx, 1, "eval.steps");
    LLVMValueRef s = h->step;
    cg_loop(h, fn, ne, &h->step, "e", (void (*)(cg_host_ctx *, LLVMValueRef))cg_eval_batch, fn);
    h->step = s;
    cg_section(h, IR_SEC_EVAL_POST);
    LLVMValueRef a3[3] = {h->ctx, h->step, loss};
    cg_call_rt(h, CG_RT_EVAL_END, a3, 3, "");
    LLVMBuildBr(h->b, no);
    LLVMPositionBuilderAtEnd(h->b, no);
}

/* int main(int argc, char **argv): the rank program of rtlib/rt.h. */
static void cg_main(cg_host_ctx *h, const char *cpu, const char *features, int prog_id) {
    const ir_prog *p = h->p;
    int shared = p->nmember > 0;
    LLVMTypeRef margs[3] = {h->i32, h->ptr, h->i64};
    char fname[32] = "main";
    if (shared) snprintf(fname, sizeof fname, "nnsc_prog%d", prog_id);
    LLVMValueRef fn = LLVMAddFunction(h->m, fname, LLVMFunctionType(h->i32, margs, shared ? 3 : 2, 0));
    /* Unwind tables (async, as C compilers emit them) keep debuggers' and
     * profilers' backtraces through main() working. */
    cg_fn_attrs(h, fn, cpu, features);
    LLVMValueRef argc = LLVMGetParam(fn, 0), argv = LLVMGetParam(fn, 1);
    LLVMSetValueName2(argc, "argc", 4);
    LLVMSetValueName2(argv, "argv", 4);

    LLVMBasicBlockRef entry = cg_block(h, fn, "entry"), init = cg_block(h, fn, "init");
    LLVMBasicBlockRef step_cond = cg_block(h, fn, "step.cond"), step_body = cg_block(h, fn, "step.body");
    LLVMBasicBlockRef mb_cond = cg_block(h, fn, "mb.cond"), mb_body = cg_block(h, fn, "mb.body");
    LLVMBasicBlockRef mb_exit = cg_block(h, fn, "mb.exit"), step_exit = cg_block(h, fn, "step.exit");
    LLVMPositionBuilderAtEnd(h->ab, entry);

    /* rt_ctx *ctx = rt_init(argc, argv, MANIFEST) (cuda: rt_init_cuda(argc, argv,
       MANIFEST, nnsc_images, N)); char *A = rt_arena(ctx); prologue */
    LLVMPositionBuilderAtEnd(h->b, init);
    LLVMValueRef man = cg_manifest(h);
    if (shared) {
        /* nnsc_rv = nnsc_rv_tab + row * NVAR; the manifest is the template filled in */
        LLVMValueRef row = LLVMGetParam(fn, 2);
        LLVMSetValueName2(row, "row", 3);
        LLVMValueRef tab = LLVMConstNull(h->ptr);
        if (p->nvar)
            tab = cg_private_const(h->m, cg_const_ints(h->i64, p->rv, (size_t)p->nmember * (size_t)p->nvar),
                                   "nnsc_rv_tab", 8);
        LLVMValueRef at = LLVMBuildNSWMul(h->b, row, LLVMConstInt(h->i64, (unsigned long long)p->nvar, 0), "");
        LLVMValueRef rowp = LLVMBuildInBoundsGEP2(h->b, h->i64, tab, &at, 1, "rv.row");
        LLVMBuildStore(h->b, rowp, h->rvg);
        if (p->manifest.s && strchr(p->manifest.s, PG_VAR_MARK)) {
            LLVMValueRef fa[2] = {man, rowp};
            LLVMTypeRef fty = LLVMFunctionType(h->ptr, (LLVMTypeRef[]){h->ptr, h->ptr}, 2, 0);
            LLVMValueRef fill = cg_declare(h, "rt_manifest_fill", fty);
            man = LLVMBuildCall2(h->b, fty, fill, fa, 2, "manifest.rank");
        }
    }
    LLVMValueRef a5[5] = {argc, argv, man, NULL, NULL};
    if (h->gpu) {
        a5[3] = cg_images(h);
        a5[4] = LLVMConstInt(h->i32, (unsigned long long)h->gpu->ncubin, 0);
    }
    h->ctx = cg_call_rt(h, CG_RT_INIT, a5, h->gpu ? 5 : 3, "ctx");
    h->arena = cg_call_rt(h, CG_RT_ARENA, &h->ctx, 1, "arena");
    cg_section(h, IR_SEC_PROLOGUE);
    LLVMValueRef first = cg_call_rt(h, CG_RT_FIRST_STEP, &h->ctx, 1, "first");
    LLVMBasicBlockRef pro_end = LLVMGetInsertBlock(h->b);
    LLVMBuildBr(h->b, step_cond);

    /* for (int64_t s = first; s < rt_steps(ctx); s++) */
    LLVMPositionBuilderAtEnd(h->b, step_cond);
    h->step = LLVMBuildPhi(h->b, h->i64, "s");
    LLVMValueRef nsteps = cg_call_rt(h, CG_RT_STEPS, &h->ctx, 1, "steps");
    LLVMBuildCondBr(h->b, LLVMBuildICmp(h->b, LLVMIntSLT, h->step, nsteps, "more"), step_body, step_exit);

    /* rt_step_begin(ctx, s); pre */
    LLVMPositionBuilderAtEnd(h->b, step_body);
    LLVMValueRef a2[2] = {h->ctx, h->step};
    cg_call_rt(h, CG_RT_STEP_BEGIN, a2, 2, "");
    cg_section(h, IR_SEC_PRE);
    LLVMBasicBlockRef pre_end = LLVMGetInsertBlock(h->b);
    LLVMBuildBr(h->b, mb_cond);

    /* for (int64_t mb = 0; mb < MB_TRIPS; mb++) { mb section } (1 trip: a pipeline's tasks unrolled) */
    LLVMPositionBuilderAtEnd(h->b, mb_cond);
    h->mb = LLVMBuildPhi(h->b, h->i64, "mb");
    LLVMValueRef mb_more = LLVMBuildICmp(h->b, LLVMIntSLT, h->mb,
                                         LLVMConstInt(h->i64, p->pipelined ? 1 : (unsigned long long)p->micro_batches, 1), "mb.more");
    LLVMBuildCondBr(h->b, mb_more, mb_body, mb_exit);
    LLVMPositionBuilderAtEnd(h->b, mb_body);
    if (p->loop_iters > 0) {
        /* a pipeline's steady state: for (it = 0; it < ITERS; it++) { [lo, hi) } between the
           warm-up and the cool-down, the iteration as those instructions' mb */
        cg_run(h, p->ins[IR_SEC_MB], p->loop_lo);
        cg_loop(h, fn, LLVMConstInt(h->i64, (unsigned long long)p->loop_iters, 0), &h->mb, "steady",
                cg_steady, NULL);
        cg_run(h, p->ins[IR_SEC_MB] + p->loop_hi, p->nins[IR_SEC_MB] - p->loop_hi);
    } else {
        cg_section(h, IR_SEC_MB);
    }
    LLVMValueRef mb_next = LLVMBuildNSWAdd(h->b, h->mb, LLVMConstInt(h->i64, 1, 0), "mb.next");
    LLVMBasicBlockRef mb_end = LLVMGetInsertBlock(h->b);
    LLVMBuildBr(h->b, mb_cond);
    LLVMValueRef mb_in[2] = {LLVMConstInt(h->i64, 0, 0), mb_next};
    LLVMBasicBlockRef mb_from[2] = {pre_end, mb_end};
    LLVMAddIncoming(h->mb, mb_in, mb_from, 2);
    h->mb = NULL;

    /* post; rt_step_end(ctx, s, (float *)(A + LOSS_OFF) or NULL) */
    LLVMPositionBuilderAtEnd(h->b, mb_exit);
    cg_section(h, IR_SEC_POST);
    LLVMValueRef loss = LLVMConstNull(h->ptr);
    if (p->loss_off >= 0) {
        LLVMValueRef off = p->loss_var ? cg_rankvar(h, p->loss_var - 1)
                                       : LLVMConstInt(h->i64, (unsigned long long)p->loss_off, 1);
        loss = LLVMBuildInBoundsGEP2(h->b, h->i8, h->arena, &off, 1, "loss");
    }
    LLVMValueRef a3e[3] = {h->ctx, h->step, loss};
    cg_call_rt(h, CG_RT_STEP_END, a3e, 3, "");
    if (p->nins[IR_SEC_EVAL]) cg_eval(h, fn, loss);
    LLVMValueRef s_next = LLVMBuildNSWAdd(h->b, h->step, LLVMConstInt(h->i64, 1, 0), "s.next");
    LLVMBasicBlockRef post_end = LLVMGetInsertBlock(h->b);
    LLVMBuildBr(h->b, step_cond);
    LLVMValueRef s_in[2] = {first, s_next};
    LLVMBasicBlockRef s_from[2] = {pro_end, post_end};
    LLVMAddIncoming(h->step, s_in, s_from, 2);
    h->step = NULL;

    /* epilogue; return rt_finish(ctx) */
    LLVMPositionBuilderAtEnd(h->b, step_exit);
    cg_section(h, IR_SEC_EPILOGUE);
    LLVMBuildRet(h->b, cg_call_rt(h, CG_RT_FINISH, &h->ctx, 1, "rc"));

    /* The entry block holds the argument arrays; it ends by entering init. */
    LLVMBuildBr(h->ab, init);
}

/* ------------------------------------------------------------ the target */

/* What the rank code is compiled for; every string is LLVM-allocated
 * (LLVMDisposeMessage). */
typedef struct cg_target {
    char *triple;    /* the host's target triple */
    char *cpu;       /* CPU name (the build host's for "native") */
    char *features;  /* target features, "" for the CPU's own */
} cg_target;

/* Resolve the options' CPU and features: the default CPU when none is
 * named, and the build host's CPU and features for "native" (the options'
 * features then come after the host's, so they can override them). */
static void cg_target_init(cg_target *t, const cg_opts *o) {
    const char *cpu = o->cpu && o->cpu[0] ? o->cpu : CG_DEFAULT_CPU;
    const char *features = o->features ? o->features : "";
    t->triple = LLVMGetDefaultTargetTriple();
    if (strcmp(cpu, "native") != 0) {
        t->cpu = LLVMCreateMessage(cpu);
        t->features = LLVMCreateMessage(features);
        return;
    }
    t->cpu = LLVMGetHostCPUName();
    char *host = LLVMGetHostCPUFeatures();
    ir_buf b = {0};
    ir_bprintf(&b, "%s%s%s", host, host[0] && features[0] ? "," : "", features);
    t->features = LLVMCreateMessage(b.s);
    ir_buf_free(&b);
    LLVMDisposeMessage(host);
}

/* Free what cg_target_init made. */
static void cg_target_free(cg_target *t) {
    LLVMDisposeMessage(t->triple);
    LLVMDisposeMessage(t->cpu);
    LLVMDisposeMessage(t->features);
}

/* LLVM's target registry, set up once for the process (the driver
 * generates ranks on several threads). */
static pthread_once_t cg_init_once = PTHREAD_ONCE_INIT;
static int cg_init_failed;
static void cg_init_targets(void) {
    cg_init_failed = LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter();
}

/* A PIC target machine for t at the options' level; NULL after printing a
 * message. */
static LLVMTargetMachineRef cg_target_machine(const cg_target *t, int opt_level) {
    static const LLVMCodeGenOptLevel levels[4] = {
        LLVMCodeGenLevelNone, LLVMCodeGenLevelLess, LLVMCodeGenLevelDefault, LLVMCodeGenLevelAggressive,
    };
    char *msg;
    pthread_once(&cg_init_once, cg_init_targets);
    if (CG_CHECK("native target initialisation", cg_init_failed, msg)) return NULL;
    LLVMTargetRef target;
    if (CG_CHECK("target lookup", LLVMGetTargetFromTriple(t->triple, &target, &msg), msg))
        return NULL;
    LLVMTargetMachineRef tm;
    CG_CHECK("target machine creation",
             !(tm = LLVMCreateTargetMachine(target, t->triple, t->cpu, t->features, levels[opt_level],
                                            LLVMRelocPIC, LLVMCodeModelDefault)),
             msg);
    return tm;
}

/* t for o, and its target machine; NULL (t freed) after printing a message. */
static LLVMTargetMachineRef cg_target_open(cg_target *t, const cg_opts *o) {
    cg_target_init(t, o);
    LLVMTargetMachineRef tm = cg_target_machine(t, o->opt_level);
    if (!tm) cg_target_free(t);
    return tm;
}

/* Default options: the portable CPU, no extra features, -O2. */
static const cg_opts cg_default_opts = {CG_DEFAULT_CPU, "", 2, 0, 0};

/* Build rank p's module (for the cuda target when gpu is not NULL) and
 * write obj_path (and ll_path if not NULL). */
static int cg_host_build(const ir_prog *p, const cg_opts *o, const cg_gpu *gpu, const char *obj_path,
                         const char *ll_path) {
    if (!o) o = &cg_default_opts;
    IR_ASSERT(o->opt_level >= 0 && o->opt_level <= 3);
    ir_prog_verify(p);
    cg_target t;
    LLVMTargetMachineRef tm = cg_target_open(&t, o);
    if (!tm) return 1;

    cg_host_ctx h = {.p = p, .gpu = gpu};
    char modname[32];
    if (p->nmember > 0) snprintf(modname, sizeof modname, "prog%d", o->prog_id);
    else snprintf(modname, sizeof modname, "rank%d", p->rank);
    h.c = LLVMContextCreate();
    h.m = LLVMModuleCreateWithNameInContext(modname, h.c);
    LLVMSetSourceFileName(h.m, modname, strlen(modname));
    LLVMSetTarget(h.m, t.triple);
    h.td = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(h.m, h.td);
    h.b = LLVMCreateBuilderInContext(h.c);
    h.ab = LLVMCreateBuilderInContext(h.c);
    h.i8 = LLVMInt8TypeInContext(h.c);
    h.i32 = LLVMInt32TypeInContext(h.c);
    h.i64 = LLVMInt64TypeInContext(h.c);
    h.f32 = LLVMFloatTypeInContext(h.c);
    h.ptr = LLVMPointerTypeInContext(h.c, 0);
    h.vd = LLVMVoidTypeInContext(h.c);
    h.md_note = LLVMGetMDKindIDInContext(h.c, "nnsc.note", 9);
    cg_declare_runtime(&h);
    LLVMTypeRef bargs[5] = {h.ptr, h.ptr, h.ptr, h.i64, h.i64};
    h.body_ty = LLVMFunctionType(h.vd, bargs, 5, 0);
    h.body_fn = ir_xcalloc((size_t)p->nbody + 1, sizeof *h.body_fn);
    if (p->nmember > 0) {   /* a shared program: the running rank's row of variables */
        h.rvg = LLVMAddGlobal(h.m, h.ptr, "nnsc_rv");
        LLVMSetInitializer(h.rvg, LLVMConstNull(h.ptr));
        LLVMSetLinkage(h.rvg, LLVMInternalLinkage);
        LLVMSetAlignment(h.rvg, 8);
    }
    h.cpu = t.cpu;
    h.features = t.features;
    for (int k = 0; k < p->nbody; k++) cg_body(&h, k);
    cg_main(&h, t.cpu, t.features, o->prog_id);
    free(h.body_fn);
    LLVMDisposeBuilder(h.b);
    LLVMDisposeBuilder(h.ab);

    int rc = 1;
    char *msg, pipeline[32], what[48];
    snprintf(pipeline, sizeof pipeline, "default<O%d>", o->opt_level);
    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    if (CG_CHECK("module verification", LLVMVerifyModule(h.m, LLVMReturnStatusAction, &msg), msg))
        goto done;
    if (CG_CHECK_ERR(pipeline, LLVMRunPasses(h.m, pipeline, tm, po))) goto done;
    /* Textual IR before code generation, which rewrites the module. */
    if (ll_path) {
        char *ll = LLVMPrintModuleToString(h.m);
        int bad = cg_write(ll_path, ll, strlen(ll));
        LLVMDisposeMessage(ll);
        if (bad) goto done;
    }
    snprintf(what, sizeof what, "generating %s.o", modname);
    if (cg_emit_object(tm, h.m, what, obj_path)) goto done;
    rc = 0;

done:
    LLVMDisposePassBuilderOptions(po);
    LLVMDisposeModule(h.m);
    LLVMDisposeTargetData(h.td);
    LLVMContextDispose(h.c);
    LLVMDisposeTargetMachine(tm);
    cg_target_free(&t);
    return rc;
}

/* Build rank p's module and write obj_path (and ll_path if not NULL). */
int cg_host(const ir_prog *p, const cg_opts *o, const char *obj_path, const char *ll_path) {
    return cg_host_build(p, o, NULL, obj_path, ll_path);
}

/* The same for the cuda target, embedding gpu's images. */
int cg_host_cuda(const ir_prog *p, const cg_opts *o, const cg_gpu *gpu, const char *obj_path,
                 const char *ll_path) {
    IR_ASSERT(gpu && gpu->ncubin >= 1);
    return cg_host_build(p, o, gpu, obj_path, ll_path);
}

/* ------------------------------------------------------------ dispatch */

/* A private constant i32 array of the n ints v. */
static LLVMValueRef cg_i32_table(LLVMModuleRef m, LLVMTypeRef i32, const int *v, int n, const char *name) {
    int64_t *w = ir_xmalloc(sizeof *w * ((size_t)n + 1));
    for (int i = 0; i < n; i++) w[i] = v[i];
    LLVMValueRef g = cg_private_const(m, cg_const_ints(i32, w, (size_t)n), name, 4);
    free(w);
    return g;
}

/* int main(int argc, char **argv) {
 *     int r = rt_rank_select(argc, argv, WORLD, MODEL);
 *     switch (cls_of[r]) { case k: return nnsc_prog<k>(argc, argv, row_of[r]); ... }
 * }
 * and, with ncust custom sections (a cuda build's), the table of their C
 * kernels in section order, NULL-terminated: nnsc_custom_fns, which the
 * link exports (the CUDA driver double of the tests runs them in place of
 * the device kernels). */
int cg_dispatch(int world, int nprog, const int *cls_of, const int *row_of, const char *model, const cg_opts *o,
                const char *const *cust, int ncust, const char *obj_path) {
    if (!o) o = &cg_default_opts;
    cg_target t;
    LLVMTargetMachineRef tm = cg_target_open(&t, o);
    if (!tm) return 1;
    LLVMContextRef c = LLVMContextCreate();
    LLVMModuleRef m = LLVMModuleCreateWithNameInContext("dispatch", c);
    LLVMSetSourceFileName(m, "dispatch", 8);
    LLVMSetTarget(m, t.triple);
    LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(m, td);
    LLVMTypeRef i32 = LLVMInt32TypeInContext(c), i64 = LLVMInt64TypeInContext(c), ptr = LLVMPointerTypeInContext(c, 0);
    LLVMTypeRef sel_args[4] = {i32, ptr, i32, ptr}, prog_args[3] = {i32, ptr, i64}, main_args[2] = {i32, ptr};
    LLVMTypeRef sel_ty = LLVMFunctionType(i32, sel_args, 4, 0), prog_ty = LLVMFunctionType(i32, prog_args, 3, 0);
    LLVMValueRef sel = LLVMAddFunction(m, "rt_rank_select", sel_ty);
    LLVMValueRef fn = LLVMAddFunction(m, "main", LLVMFunctionType(i32, main_args, 2, 0));
    unsigned uw = LLVMGetEnumAttributeKindForName("uwtable", 7);
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(c, uw, 2));
    LLVMAddTargetDependentFunctionAttr(fn, "target-cpu", t.cpu);
    if (t.features[0]) LLVMAddTargetDependentFunctionAttr(fn, "target-features", t.features);
    LLVMBuilderRef b = LLVMCreateBuilderInContext(c);
    LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(c, fn, "entry");
    LLVMBasicBlockRef bad = LLVMAppendBasicBlockInContext(c, fn, "bad");
    LLVMPositionBuilderAtEnd(b, entry);
    LLVMValueRef mg = cg_private_const(m, LLVMConstStringInContext2(c, model, strlen(model), 0), "model", 0);
    LLVMValueRef argc = LLVMGetParam(fn, 0), argv = LLVMGetParam(fn, 1);
    LLVMValueRef sa[4] = {argc, argv, LLVMConstInt(i32, (unsigned long long)world, 0), mg};
    LLVMValueRef r = LLVMBuildCall2(b, sel_ty, sel, sa, 4, "rank");
    LLVMValueRef r64 = LLVMBuildSExt(b, r, i64, "");
    LLVMValueRef cls = cg_i32_table(m, i32, cls_of, world, "cls_of");
    LLVMValueRef rows = cg_i32_table(m, i32, row_of, world, "row_of");
    LLVMValueRef k = LLVMBuildLoad2(b, i32, LLVMBuildInBoundsGEP2(b, i32, cls, &r64, 1, ""), "class");
    LLVMValueRef row = LLVMBuildLoad2(b, i32, LLVMBuildInBoundsGEP2(b, i32, rows, &r64, 1, ""), "row");
    LLVMValueRef row64 = LLVMBuildSExt(b, row, i64, "");
    LLVMValueRef sw = LLVMBuildSwitch(b, k, bad, (unsigned)nprog);
    for (int j = 0; j < nprog; j++) {
        char pn[32];
        snprintf(pn, sizeof pn, "nnsc_prog%d", j);
        LLVMValueRef pf = LLVMAddFunction(m, pn, prog_ty);
        LLVMBasicBlockRef bb = LLVMAppendBasicBlockInContext(c, fn, pn);
        LLVMAddCase(sw, LLVMConstInt(i32, (unsigned long long)j, 0), bb);
        LLVMPositionBuilderAtEnd(b, bb);
        LLVMValueRef pa[3] = {argc, argv, row64};
        LLVMBuildRet(b, LLVMBuildCall2(b, prog_ty, pf, pa, 3, ""));
    }
    LLVMPositionBuilderAtEnd(b, bad);
    LLVMBuildUnreachable(b);
    LLVMDisposeBuilder(b);
    if (ncust > 0) {   /* void (*nnsc_custom_fns[])(...) = {nnsc_custom_<name>, ..., NULL} */
        LLVMTypeRef kargs[4] = {ptr, ptr, ptr, ptr};
        LLVMTypeRef kty = LLVMFunctionType(LLVMVoidTypeInContext(c), kargs, 4, 0);
        LLVMValueRef *fv = ir_xmalloc(sizeof *fv * ((size_t)ncust + 1));
        for (int j = 0; j < ncust; j++) {
            char fnm[160];
            snprintf(fnm, sizeof fnm, "nnsc_custom_%s", cust[j]);
            fv[j] = LLVMAddFunction(m, fnm, kty);
        }
        fv[ncust] = LLVMConstPointerNull(ptr);
        LLVMTypeRef at = LLVMArrayType2(ptr, (uint64_t)ncust + 1);
        LLVMValueRef tab = LLVMAddGlobal(m, at, "nnsc_custom_fns");
        LLVMSetInitializer(tab, LLVMConstArray2(ptr, fv, (uint64_t)ncust + 1));
        LLVMSetGlobalConstant(tab, 1);
        free(fv);
    }
    int rc = 1;
    char *msg;
    if (CG_CHECK("dispatcher verification", LLVMVerifyModule(m, LLVMReturnStatusAction, &msg), msg)) goto done;
    if (cg_emit_object(tm, m, "generating the dispatcher's object", obj_path)) goto done;
    rc = 0;
done:
    LLVMDisposeModule(m);
    LLVMDisposeTargetData(td);
    LLVMContextDispose(c);
    LLVMDisposeTargetMachine(tm);
    cg_target_free(&t);
    return rc;
}

/* ------------------------------------------------------------ --cpu */

/* LLVM says that it does not know a CPU only as a line on stderr (and then
 * compiles for a generic 32-bit x86), and that a CPU cannot run 64-bit code
 * only by aborting ("LLVM ERROR: 64-bit code requested on a subtarget that
 * doesn't support it"), and its C API has no call to ask.  So --cpu is
 * checked by doing what a build does, in a child process: create the
 * target machine and compile an empty function, stderr into a pipe.  The
 * compiler is single-threaded when it checks (before the codegen threads). */

/* What a probe child does with its CPU name. */
typedef enum cg_probe {
    CG_PROBE_COMPILE,  /* create the target machine and compile an empty function */
    CG_PROBE_LIST,     /* create the target machine for CPU "help": LLVM lists the CPUs */
} cg_probe;

/* The child's work: exit 0 when it got through, 3 when an LLVM call failed
 * (its message is on stderr); LLVM itself may abort on the way. */
static void cg_probe_run(cg_probe what, const char *cpu) {
    cg_opts o = {what == CG_PROBE_LIST ? "help" : cpu, "", 2, 0, 0};
    cg_target t;
    cg_target_init(&t, &o);
    LLVMTargetMachineRef tm = cg_target_machine(&t, o.opt_level);
    if (!tm) _exit(3);
    if (what == CG_PROBE_LIST) _exit(0);
    LLVMContextRef c = LLVMContextCreate();
    LLVMModuleRef m = LLVMModuleCreateWithNameInContext("cpu_probe", c);
    LLVMSetTarget(m, t.triple);
    LLVMTypeRef fty = LLVMFunctionType(LLVMVoidTypeInContext(c), NULL, 0, 0);
    LLVMValueRef fn = LLVMAddFunction(m, "cpu_probe", fty);
    LLVMBuilderRef b = LLVMCreateBuilderInContext(c);
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(c, fn, "entry"));
    LLVMBuildRetVoid(b);
    char *msg;
    LLVMMemoryBufferRef obj;
    if (CG_CHECK("compiling a probe function", LLVMTargetMachineEmitToMemoryBuffer(tm, m, LLVMObjectFile, &msg, &obj),
                 msg))
        _exit(3);
    _exit(0);
}

/* Run cg_probe_run(what, cpu) in a child; its stderr goes to *out (owned
 * by the caller, NUL-terminated).  Returns the child's exit status, 128 +
 * the signal that ended it, or -1 (out then says why) when it could not run. */
static int cg_probe_child(cg_probe what, const char *cpu, ir_buf *out) {
    int fd[2];
    if (pipe(fd)) {
        ir_bprintf(out, "pipe: %s", strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        ir_bprintf(out, "fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        close(fd[0]);
        if (dup2(fd[1], 2) < 0) _exit(4);
        close(fd[1]);
        cg_probe_run(what, cpu);
        _exit(0);
    }
    close(fd[1]);
    ir_bprintf(out, "%s", "");
    char chunk[4096];
    for (;;) {
        ssize_t n = read(fd[0], chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        ir_bprintf(out, "%.*s", (int)n, chunk);
    }
    close(fd[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            ir_bprintf(out, "waitpid: %s", strerror(errno));
            return -1;
        }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Can rank code be compiled for cpu?  0 yes, 1 an unknown name, 2 a CPU
 * LLVM cannot compile x86-64 code for, -1 no answer (declared in
 * frontend/fe_priv.h for the command line's check). */
int cg_cpu_check(const char *cpu, char *why, size_t whysz) {
    ir_buf out = {0};
    int st = cg_probe_child(CG_PROBE_COMPILE, cpu, &out);
    int rc = st == 0 ? 0 : st < 0 ? -1 : 2;
    if (strstr(out.s, "is not a recognized processor")) rc = 1;
    /* LLVM's own words, first line: "LLVM ERROR: 64-bit code requested ..." */
    const char *line = out.s;
    const char *err = strstr(out.s, "LLVM ERROR:");
    if (err) line = err;
    snprintf(why, whysz, "%.*s", (int)strcspn(line, "\n"), line);
    if (rc == 2 && !why[0]) snprintf(why, whysz, "the compiler's probe ended with status %d", st);
    ir_buf_free(&out);
    return rc;
}

/* The CPU names LLVM lists for the host's target (NULL-terminated), or NULL. */
char **cg_cpu_names(void) {
    ir_buf out = {0};
    char **names = NULL;
    int n = 0, cap = 0;
    if (cg_probe_child(CG_PROBE_LIST, NULL, &out) == 0) {
        /* "Available CPUs for this target:", a blank line, then per CPU
         * "  NAME  - Select the NAME processor.", then a blank line */
        const char *p = strstr(out.s, "Available CPUs for this target:");
        if (p) p = strchr(p, '\n');
        for (; p && p[1]; p = strchr(p + 1, '\n')) {
            const char *ln = p + 1, *end = ln + strcspn(ln, "\n");
            if (ln == end && n > 0) break;
            if (ln == end) continue;
            while (*ln == ' ') ln++;
            size_t len = strcspn(ln, " \n");
            const char *sel = strstr(ln, "- Select the ");
            if (!len || !sel || sel > end) break;
            char *name = ir_xmalloc(len + 1);
            memcpy(name, ln, len);
            name[len] = '\0';
            *IR_PUSH(names, n, cap) = name;
        }
    }
    ir_buf_free(&out);
    if (!n) return NULL;
    *IR_PUSH(names, n, cap) = NULL;
    return names;
}

/* Free what cg_cpu_names returned. */
void cg_cpu_names_free(char **names) {
    for (int i = 0; names && names[i]; i++) free(names[i]);
    free(names);
}
