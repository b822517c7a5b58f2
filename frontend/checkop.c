/* checkop.c -- nnsc-aot check-op SPEC NAME: test a custom op's kernel and
 * annotation before a plan relies on them (docs/custom-ops.md, check-op).
 *
 * The kernel's C file is compiled as the ranks compile it, but into a
 * shared object that this process loads (dlopen) and calls directly.  The
 * shapes are those of the first [op] of kind NAME in the spec (for a
 * backward section: of the op whose backward it is).  Inputs are uniform in
 * [-1, 1) from a fixed seed.  The checks:
 *
 *   writes   with acc = 0 the kernel writes every output element (outputs
 *            are pre-filled with NaN); with acc = 1 it adds into them;
 *   splits   for every identifier the annotation lets the planner split
 *            (not `^`, not the inner part of a merged dim, extent >= 2):
 *            the kernel run on 2 parts of every operand holding it (the
 *            parts a 2-way op-trans gives), the outputs put back together
 *            (placed along the dim, summed where the dim is `+` and the
 *            output lacks it, else equal to the whole) against the
 *            unsplit run.  A dim marked splittable that is not fails here,
 *            with its name;
 *   grads    with a backward: the gradients it gives for L = sum(y1 * r)
 *            (r random) against central differences of L (Richardson
 *            extrapolated, in double over the f32 outputs) at up to 8
 *            elements of every input.
 *
 * Exit status 0 every check passed, 1 one failed, 2 bad input. */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen.h"
#include "cuda.h"
#include "cuda/rt_cuda.h"
#include "frontend.h"
#include "rt_internal.h"

typedef void kfn(void *ctx, void *const *b, const int64_t *i, const float *f);

/* One op instance to run: the annotation instantiated for the operands. */
typedef struct co_op {
    const ir_custom *c;
    kfn *fn;
    int row;                                /* its section's row (the launch's i[0]) */
    int cuda;                               /* run the CUDA kernel (co_cuda_call), not fn */
    char label[96];                         /* its name in messages: NAME, or NAME [cuda] */
    ir_anno a;
    int64_t ext[IR_MAXID];
    int n;                                  /* operands: inputs then outputs */
    int nin;
    int ndim[2 * IR_MAXIO];
    int64_t shape[2 * IR_MAXIO][IR_MAXDIM];
    const char *opname[2 * IR_MAXIO];       /* operand names, for messages */
    float attr[IR_MAXFATTR];                /* the op's attrs (a backward: its forward's) */
} co_op;

static int64_t numel(const co_op *op, int k)
{
    int64_t n = 1;
    for (int j = 0; j < op->ndim[k]; j++) n *= op->shape[k][j];
    return n;
}

static void co_cuda_call(const co_op *op, float **buf, int64_t shape[][IR_MAXDIM], const int64_t *iv);

/* What the calls of one round of checks did beyond their outputs: a kernel
 * must leave its inputs as they were (the C kernels' and the CUDA ones') and
 * write nothing outside its outputs (the CUDA ones': guard bytes). */
static struct {
    int64_t calls, guard_bad, input_bad;   /* calls; those that wrote outside their outputs, into an input */
    char first_bad[256];                   /* the first of those */
} st;

/* Record that a call of op (acc) changed input k. */
static void input_changed(const co_op *op, int acc, int k)
{
    if (!st.guard_bad && !st.input_bad)
        snprintf(st.first_bad, sizeof st.first_bad, "%s (acc %d) changed its input %d '%s'", op->label, acc, k + 1,
                 op->opname[k]);
    st.input_bad++;
}

/* Call the kernel (op->cuda: the CUDA kernel) on buffers buf[] of the given shapes. */
static void call(const co_op *op, float **buf, int64_t shape[][IR_MAXDIM], int acc)
{
    int64_t iv[4 + 2 * IR_MAXIO * (1 + IR_MAXDIM)];
    int p = 0;
    iv[p++] = op->row, iv[p++] = op->nin, iv[p++] = op->n - op->nin, iv[p++] = acc;
    for (int k = 0; k < op->n; k++) {
        iv[p++] = op->ndim[k];
        for (int j = 0; j < op->ndim[k]; j++) iv[p++] = shape[k][j];
    }
    if (op->cuda) {
        co_cuda_call(op, buf, shape, iv);
        return;
    }
    float *keep[IR_MAXIO * 2];
    int64_t n[IR_MAXIO * 2];
    for (int k = 0; k < op->nin; k++) {
        n[k] = 1;
        for (int j = 0; j < op->ndim[k]; j++) n[k] *= shape[k][j];
        keep[k] = ir_xmalloc(sizeof(float) * (size_t)(n[k] ? n[k] : 1));
        memcpy(keep[k], buf[k], sizeof(float) * (size_t)n[k]);
    }
    op->fn(NULL, (void *const *)buf, iv, op->attr);
    st.calls++;
    int changed = -1;
    for (int k = 0; k < op->nin; k++) {
        if (changed < 0 && memcmp(keep[k], buf[k], sizeof(float) * (size_t)n[k])) changed = k;
        free(keep[k]);
    }
    if (changed >= 0) input_changed(op, acc, changed);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float uniform(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *fill(int64_t n, int nan)
{
    float *x = ir_xmalloc(sizeof *x * (size_t)(n ? n : 1));
    for (int64_t k = 0; k < n; k++) x[k] = nan ? NAN : uniform();
    return x;
}

/* The largest |a - b| over max |b| (NaN anywhere: infinity). */
static double rel_diff(const float *a, const float *b, int64_t n)
{
    double d = 0, m = 1e-30;
    for (int64_t k = 0; k < n; k++) {
        if (isnan(a[k]) || isnan(b[k])) return INFINITY;
        d = fmax(d, fabs((double)a[k] - b[k]));
        m = fmax(m, fabs((double)b[k]));
    }
    return d / m;
}

/* Copy the part [lo, hi) of dim j of tensor src (shape sh, ndim nd) into dst
 * (dir 0), or dst's part back into src (dir 1: add when add). */
static void part_copy(float *full, const int64_t *sh, int nd, int j, int64_t lo, int64_t hi, float *part, int dir,
                      int add)
{
    int64_t outer = 1, inner = 1;
    for (int q = 0; q < j; q++) outer *= sh[q];
    for (int q = j + 1; q < nd; q++) inner *= sh[q];
    int64_t w = (hi - lo) * inner;
    for (int64_t o = 0; o < outer; o++) {
        float *f = full + (o * sh[j] + lo) * inner, *p = part + o * w;
        for (int64_t k = 0; k < w; k++) {
            if (!dir) p[k] = f[k];
            else f[k] = add ? f[k] + p[k] : p[k];
        }
    }
}

/* The dim of operand k that identifier id splits (as a plain dim or the
 * outer part of a merged one), its inner block size in *blk; -1: none. */
static int dim_of(const co_op *op, int k, int id, int64_t *blk)
{
    for (int j = 0; j < op->a.ndim[k]; j++) {
        const ir_adim *d = &op->a.dim[k][j];
        if (d->id != id) continue;
        *blk = 1;
        for (int q = 0; q < d->nsub; q++) *blk *= op->ext[d->sub[q]];
        return j;
    }
    return -1;
}

static int failed;

static void verdict(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verdict(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("  %-4s ", ok ? "ok" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    failed += !ok;
}

/* writes and splits of one op; inputs in[] (kept), the whole run's outputs
 * returned in out[] (caller frees). */
static void check_splits(const co_op *op, float **in, float **out)
{
    int nout = op->n - op->nin;
    float *buf[2 * IR_MAXIO];
    int64_t sh[2 * IR_MAXIO][IR_MAXDIM];
    memcpy(sh, op->shape, sizeof sh);
    for (int k = 0; k < op->nin; k++) buf[k] = in[k];
    /* writes: NaN-filled outputs all written */
    for (int k = 0; k < nout; k++) buf[op->nin + k] = out[k] = fill(numel(op, op->nin + k), 1);
    call(op, buf, sh, 0);
    int64_t unwritten = 0;
    int which = -1;
    for (int k = 0; k < nout; k++)
        for (int64_t e = 0; e < numel(op, op->nin + k); e++)
            if (isnan(out[k][e])) unwritten++, which = which < 0 ? k : which;
    if (unwritten)
        verdict(0, "%s: %lld output elements unwritten with acc = 0 (first in output %d '%s'); the kernel must write "
                "every element of every output", op->label, (long long)unwritten, which + 1,
                op->opname[op->nin + which]);
    else verdict(1, "%s: writes every output element", op->label);
    /* acc = 1 adds into the outputs */
    double worst = 0;
    for (int k = 0; k < nout; k++) {
        int64_t n = numel(op, op->nin + k);
        float *pre = fill(n, 0), *got = ir_xmalloc(sizeof *got * (size_t)(n ? n : 1));
        memcpy(got, pre, sizeof *got * (size_t)n);
        buf[op->nin + k] = got;
        for (int q = 0; q < nout; q++)
            if (q != k) buf[op->nin + q] = ir_xcalloc((size_t)numel(op, op->nin + q) + 1, sizeof(float));
        call(op, buf, sh, 1);
        for (int64_t e = 0; e < n; e++) pre[e] += out[k][e];
        worst = fmax(worst, rel_diff(got, pre, n));
        for (int q = 0; q < nout; q++)
            if (q != k) free(buf[op->nin + q]);
        free(pre), free(got);
    }
    verdict(worst <= 1e-5, "%s: acc = 1 adds into the outputs (max rel diff %.2g)", op->label, worst);
    /* splits */
    int any = 0;
    for (int id = 0; id < op->a.nid; id++) {
        if (op->a.id_frozen[id] || op->a.id_inner[id] || op->ext[id] < 2) continue;
        any = 1;
        int64_t e = op->ext[id], cut = e / 2;
        float *asm_[IR_MAXIO];
        int has[2 * IR_MAXIO], dj[2 * IR_MAXIO];
        int64_t blk[2 * IR_MAXIO];
        for (int k = 0; k < op->n; k++) has[k] = (dj[k] = dim_of(op, k, id, &blk[k])) >= 0;
        for (int k = 0; k < nout; k++) {
            int64_t n = numel(op, op->nin + k);
            asm_[k] = has[op->nin + k] || op->a.id_reduce[id] ? ir_xcalloc((size_t)n + 1, sizeof(float)) : NULL;
        }
        double repl = 0;   /* an output without the dim (not `+`): each part's own against the whole */
        for (int part = 0; part < 2; part++) {
            int64_t lo = part ? cut : 0, hi = part ? e : cut;
            float *pb[2 * IR_MAXIO];
            int64_t psh[2 * IR_MAXIO][IR_MAXDIM];
            memcpy(psh, op->shape, sizeof psh);
            for (int k = 0; k < op->n; k++) {
                if (has[k]) psh[k][dj[k]] = (hi - lo) * blk[k];
                int64_t n = 1;
                for (int j = 0; j < op->ndim[k]; j++) n *= psh[k][j];
                pb[k] = ir_xcalloc((size_t)n + 1, sizeof(float));
                if (k < op->nin && has[k])
                    part_copy(in[k], op->shape[k], op->ndim[k], dj[k], lo * blk[k], hi * blk[k], pb[k], 0, 0);
                else if (k < op->nin)
                    memcpy(pb[k], in[k], sizeof(float) * (size_t)n);
            }
            call(op, pb, psh, 0);
            for (int k = 0; k < nout; k++) {
                int ko = op->nin + k;
                if (has[ko]) {
                    part_copy(asm_[k], op->shape[ko], op->ndim[ko], dj[ko], lo * blk[ko], hi * blk[ko], pb[ko], 1, 0);
                } else if (op->a.id_reduce[id]) {
                    for (int64_t q = 0; q < numel(op, ko); q++) asm_[k][q] += pb[ko][q];
                } else {
                    repl = fmax(repl, rel_diff(pb[ko], out[k], numel(op, ko)));
                }
            }
            for (int k = 0; k < op->n; k++) free(pb[k]);
        }
        double d = repl;
        int worst_out = -1;
        for (int k = 0; k < nout; k++)
            if (asm_[k]) {
                double x = rel_diff(asm_[k], out[k], numel(op, op->nin + k));
                if (x > d) d = x, worst_out = k;
                free(asm_[k]);
            }
        const char *nm = op->a.idname[id];
        if (d <= 1e-4) {
            verdict(1, "%s: split %s%s (%lld -> %lld + %lld) gives the unsplit result (max rel diff %.2g)",
                    op->label, nm, op->a.id_reduce[id] ? "+" : "", (long long)e, (long long)cut,
                    (long long)(e - cut), d);
        } else {
            char where[160] = "";
            if (worst_out >= 0)
                snprintf(where, sizeof where, " output %d '%s'", worst_out + 1, op->opname[op->nin + worst_out]);
            /* '+' is a cure only where the output lacks the dim */
            int lacks = worst_out < 0 || !has[op->nin + worst_out];
            verdict(0, "%s: dim '%s' is marked splittable, but splitting it (%lld -> %lld + %lld) changes%s by %.3g "
                    "(relative); mark it '%s^' in the annotation if it must stay whole%s", op->label, nm,
                    (long long)e, (long long)cut, (long long)(e - cut), where[0] ? where : " an output", d, nm,
                    op->a.id_reduce[id] || !lacks ? "" : ", or '+' if the parts' outputs are partial sums");
        }
    }
    if (!any) verdict(1, "%s: no dim the planner may split (every one is '^', merged inside or of extent 1)",
                      op->label);
}

/* Instantiate custom op row cid over inputs of the given shapes (a scratch
 * graph does the binding and the output shapes); 0, or 2 with a message. */
static int instantiate(const ir_graph *g, int cid, int nin, const int *ndim, int64_t sh[][IR_MAXDIM],
                       const char *const *names, co_op *op)
{
    ir_graph s;
    ir_graph_init(&s);
    s.file = g->file;
    memcpy(s.cust, g->cust, sizeof s.cust);
    s.ncust = g->ncust;
    int in[IR_MAXIO];
    for (int k = 0; k < nin; k++) in[k] = ir_add_tensor(&s, names[k], IR_F32, IR_T_INPUT, ndim[k], sh[k], 0);
    const char *outs[IR_MAXIO];
    char on[IR_MAXIO][16];
    for (int k = 0; k < g->cust[cid].nout; k++) snprintf(on[k], sizeof on[k], "out%d", k + 1), outs[k] = on[k];
    int64_t ia[IR_MAXIATTR] = {0};
    ia[IR_IA_CUSTOM] = cid;
    char err[256];
    int o = ir_add_op_attr(&s, "check", IR_OP_CUSTOM, nin, in, outs, ia, NULL, 0, err, sizeof err);
    if (o < 0) {
        fprintf(stderr, "nnsc-aot: error: check-op %s: %s\n", g->cust[cid].name, err);
        ir_graph_free(&s);
        return 2;
    }
    memset(op, 0, sizeof *op);
    op->c = &g->cust[cid];
    op->row = cid;
    snprintf(op->label, sizeof op->label, "%s", g->cust[cid].name);
    op->a = s.op[o].anno;
    memcpy(op->ext, s.op[o].ext, sizeof op->ext);
    op->nin = nin;
    op->n = nin + s.op[o].nout;
    for (int k = 0; k < op->n; k++) {
        const ir_tensor *t = &s.t[k < nin ? in[k] : s.op[o].out[k - nin]];
        op->ndim[k] = t->ndim;
        memcpy(op->shape[k], t->shape, sizeof op->shape[k]);
        op->opname[k] = k < nin ? names[k] : (k == nin ? "y1" : "y");
    }
    ir_graph_free(&s);
    return 0;
}

static double loss_of(const float *y, const float *r, int64_t n)
{
    double l = 0;
    for (int64_t k = 0; k < n; k++) l += (double)y[k] * r[k];
    return l;
}

/* L = sum_k sum(y_k * r_k) over the first ng outputs. */
static double loss_all(const co_op *fw, float *const *outs, float *const *r, int ng)
{
    double l = 0;
    for (int k = 0; k < ng; k++) l += loss_of(outs[k], r[k], numel(fw, fw->nin + k));
    return l;
}

/* Gradients of fw's inputs from bw against finite differences of L = sum(y1 * r1)
 * (all: + sum(y_k * r_k) over every output, which bw takes the gradients of). */
static void check_grads(const co_op *fw, const co_op *bw, float **in, int all)
{
    int nout = fw->n - fw->nin, ng = all ? nout : 1;
    float *r[IR_MAXIO], *outs[IR_MAXIO], *buf[2 * IR_MAXIO];
    for (int k = 0; k < nout; k++) outs[k] = ir_xcalloc((size_t)numel(fw, fw->nin + k) + 1, sizeof(float));
    for (int k = 0; k < ng; k++) r[k] = fill(numel(fw, fw->nin + k), 0);
    /* the backward: dy_k = r_k, then the inputs */
    float *bb[3 * IR_MAXIO];
    for (int k = 0; k < ng; k++) bb[k] = r[k];
    for (int k = 0; k < fw->nin; k++) bb[ng + k] = in[k];
    for (int k = 0; k < fw->nin; k++) bb[ng + fw->nin + k] = ir_xcalloc((size_t)numel(fw, k) + 1, sizeof(float));
    int64_t bsh[2 * IR_MAXIO][IR_MAXDIM];
    memcpy(bsh, bw->shape, sizeof bsh);
    call(bw, bb, bsh, 0);
    int64_t sh[2 * IR_MAXIO][IR_MAXDIM];
    memcpy(sh, fw->shape, sizeof sh);
    for (int k = 0; k < fw->nin; k++) buf[k] = in[k];
    for (int k = 0; k < nout; k++) buf[fw->nin + k] = outs[k];
    for (int k = 0; k < fw->nin; k++) {
        int64_t n = numel(fw, k);
        const float *an = bb[ng + fw->nin + k];
        double rms = 0;
        for (int64_t e = 0; e < n; e++) rms += (double)an[e] * an[e];
        rms = sqrt(rms / (double)(n ? n : 1));
        double worst = 0;
        int64_t at = -1;
        int samples = n < 8 ? (int)n : 8;
        for (int s = 0; s < samples; s++) {
            int64_t e = s == 0 ? 0 : s == samples - 1 ? n - 1 : (int64_t)(((double)uniform() + 1) / 2 * (double)n) % n;
            float x0 = in[k][e];
            double D[2];
            for (int q = 0; q < 2; q++) {
                float h = (float)(q ? 5e-3 : 1e-2) * fmaxf(1.0f, fabsf(x0));
                double lp, lm;
                in[k][e] = x0 + h;
                call(fw, buf, sh, 0);
                lp = loss_all(fw, outs, r, ng);
                in[k][e] = x0 - h;
                call(fw, buf, sh, 0);
                lm = loss_all(fw, outs, r, ng);
                D[q] = (lp - lm) / (double)((x0 + h) - (x0 - h));
            }
            in[k][e] = x0;
            double fd = (4 * D[1] - D[0]) / 3;
            double err = fabs(fd - an[e]) / fmax(fmax(fabs(an[e]), rms), 1e-6);
            if (err > worst) worst = err, at = e;
        }
        verdict(worst <= 2e-2, "%s: gradient of input %d '%s' against finite differences (%d elements, worst rel "
                "err %.2g%s)", bw->label, k + 1, fw->opname[k], samples, worst,
                worst > 2e-2 && at >= 0 ? ", at its flat element" : "");
        if (worst > 2e-2 && at >= 0) printf("       element %lld: backward %.6g\n", (long long)at, (double)an[at]);
    }
    for (int k = 0; k < nout; k++) free(outs[k]);
    for (int k = 0; k < fw->nin; k++) free(bb[ng + fw->nin + k]);
    for (int k = 0; k < ng; k++) free(r[k]);
}

/* Compile src into a shared object in dir and find NAME's kernel in it. */
static kfn *load(const ir_graph *g, int cid, const char *dir, void **handles, int *nh)
{
    char so[4200], sym[160];
    snprintf(so, sizeof so, "%s/custom%d.so", dir, cid);
    if (access(so, R_OK) != 0 && cg_compile_shared(g->cust[cid].src, so)) {
        fprintf(stderr, "nnsc-aot: error: check-op: the kernel of custom op '%s' (%s) does not compile\n",
                g->cust[cid].name, g->cust[cid].src);
        return NULL;
    }
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "nnsc-aot: error: check-op: cannot load %s: %s\n", so, dlerror());
        return NULL;
    }
    handles[(*nh)++] = h;
    snprintf(sym, sizeof sym, "nnsc_custom_%s", g->cust[cid].name);
    kfn *f = (kfn *)(uintptr_t)dlsym(h, sym);
    if (!f)
        fprintf(stderr, "nnsc-aot: error: check-op: %s defines no kernel %s\n"
                        "  hint: #include \"nnsc_custom.h\", then NNSC_CUSTOM(%s) { ... } (docs/custom-ops.md)\n",
                g->cust[cid].src, sym, g->cust[cid].name);
    return f;
}


/* ------------------------------------------------- --target cuda */

/* The CUDA kernels run through rtlib's launcher (rt_cuda_k with
 * RT_KN_custom, as a rank launches them) in a rank of their own.  Each
 * call lays its operands out in the arena between guard bytes, uploads
 * them, runs one launch inside a step and downloads everything: the
 * outputs come back to the caller's buffers, and the guards and the inputs
 * must be as they were. */
#define CO_GUARD 256        /* guard bytes around each operand */
#define CO_SENTINEL 0xff    /* a guard byte: four of them are a NaN */
#define CO_CUDA_BOUND 1e-4  /* the CUDA kernel's outputs against the C kernel's, relative to the largest
                               (sums in other orders: the split check's bound) */

/* The C kernels by section row, NULL-terminated, as a cuda rank exports
 * them (codegen/host.c): the CUDA driver double (tests/mock) runs these in
 * place of the device kernels.  nnsc-aot exports the symbol
 * (frontend/exports.list). */
kfn *nnsc_custom_fns[IR_MAXCUSTOM + 1];

static struct {
    rt_ctx *ctx;            /* the rank, when the CUDA kernels run */
    char *dev;              /* its device arena */
    int64_t arena;          /* bytes */
    cg_cubin cub[FE_MAX_ARCH + 1];   /* the images, kept while the rank runs */
    int ncub;
} cu;

/* The arena bytes a call of op on operands of the given shapes lays out,
 * off[k] each operand's offset. */
static int64_t co_layout(const co_op *op, int64_t shape[][IR_MAXDIM], int64_t *off, int64_t *n)
{
    int64_t top = 0;
    for (int k = 0; k < op->n; k++) {
        n[k] = 1;
        for (int j = 0; j < op->ndim[k]; j++) n[k] *= shape[k][j];
        top = (top + CO_GUARD + 255) / 256 * 256;
        off[k] = top;
        top += 4 * n[k];
    }
    return top + CO_GUARD;
}

static void co_cuda_call(const co_op *op, float **buf, int64_t shape[][IR_MAXDIM], const int64_t *iv)
{
    int64_t off[2 * IR_MAXIO], n[2 * IR_MAXIO];
    int64_t top = co_layout(op, shape, off, n);
    if (top > cu.arena) {   /* fe_check_op sizes the arena for the largest call */
        fprintf(stderr, "nnsc-aot: internal error: check-op's arena (%lld bytes) is smaller than a call's %lld\n",
                (long long)cu.arena, (long long)top);
        exit(1);
    }
    unsigned char *mirror = (unsigned char *)cu.ctx->arena;
    memset(mirror, CO_SENTINEL, (size_t)top);
    void *b[2 * IR_MAXIO];
    for (int k = 0; k < op->n; k++) {
        memcpy(mirror + off[k], buf[k], 4 * (size_t)n[k]);
        b[k] = cu.dev + off[k];
    }
    rt_dev_upload(cu.ctx, 0, top);
    rt_dev_step_begin(cu.ctx);
    rt_cuda_k(cu.ctx, RT_KN_custom, b, iv, op->attr);
    rt_dev_step_end(cu.ctx, NULL);
    rt_dev_download(cu.ctx, 0, top);
    st.calls++;
    int64_t lo = 0, guard = -1, input = -1;
    for (int k = 0; k <= op->n; k++) {   /* the guards before operand k (and after the last) */
        int64_t hi = k < op->n ? off[k] : top;
        for (int64_t x = lo; x < hi && guard < 0; x++)
            if (mirror[x] != CO_SENTINEL) guard = x;
        if (k < op->n) lo = off[k] + 4 * n[k];
    }
    for (int k = 0; k < op->nin && input < 0; k++)
        if (memcmp(mirror + off[k], buf[k], 4 * (size_t)n[k])) input = k;
    if (guard < 0 && input >= 0) input_changed(op, (int)iv[3], (int)input);
    if (guard >= 0 && !st.guard_bad && !st.input_bad) {
        int after = -1;   /* the operand the bad byte follows */
        for (int k = 0; k < op->n; k++)
            if (off[k] <= guard) after = k;
        snprintf(st.first_bad, sizeof st.first_bad, "%s (acc %lld) wrote %s operand %d '%s' (the first changed byte "
                 "%lld bytes %s it)", op->label, (long long)iv[3], after < 0 ? "before" : "past the end of",
                 after < 0 ? 1 : after + 1, op->opname[after < 0 ? 0 : after],
                 (long long)(after < 0 ? off[0] - guard - 1 : guard - off[after] - 4 * n[after]),
                 after < 0 ? "before" : "after");
    }
    st.guard_bad += guard >= 0, st.input_bad += guard >= 0 && input >= 0;   /* (else counted above) */
    for (int k = op->nin; k < op->n; k++) memcpy(buf[k], mirror + off[k], 4 * (size_t)n[k]);
}

/* Compile the spec's CUDA kernels (with the library, as a build does) for
 * o->archs and, where the driver offers a device, start the rank that runs
 * them with an arena of `arena` bytes.  0: cu.ctx runs them; 3: compiled
 * but nothing runs them here (said why); 1 or 2 after a message. */
static int co_cuda_start(const fe_opts *o, const ir_graph *g, int64_t arena)
{
    rt_cuda_found p;
    rt_cuda_probe(&p);
    const char *archs[FE_MAX_ARCH + 1];
    char own[16];
    int narch = 0;
    for (int k = 0; k < o->narch; k++) archs[narch++] = o->archs[k];
    rt_image img[FE_MAX_ARCH + 1];
    for (int k = 0; k < narch; k++) img[k] = (rt_image){archs[k], NULL, 0};
    if (p.present && p.count && !p.is_double && rt_cuda_pick_image(p.major, p.minor, img, narch) < 0) {
        snprintf(own, sizeof own, "sm_%d%d", p.major, p.minor);   /* the device's own too, to run on it */
        archs[narch++] = own;
    }
    ir_prog pr;
    ir_prog_init(&pr, 0, 1);
    pr.cust = g->cust, pr.ncust = g->ncust;
    ir_buf src = {0};
    cg_cuda_build_source(&src, &pr, 1);
    pr.cust = NULL, pr.ncust = 0;
    ir_prog_free(&pr);
    fe_opts oa = *o;
    oa.archs = (char **)archs, oa.narch = narch;
    cg_cubin *cub = cu.cub;
    cu.ncub = narch;
    int rc = fe_nvrtc(&oa, src.s, g->cust, g->ncust, "the generated source, ", "nnsc-aot SPEC -o DIR --target cuda "
                      "--emit-kernels", cub);
    ir_buf_free(&src);
    int major = 0, minor = 0;
    cg_nvrtc_version(&major, &minor);
    if (!rc) {
        printf("cuda: the kernels compile for");
        for (int k = 0; k < narch; k++) printf("%s %s", k ? "," : "", archs[k]);
        printf(" (NVRTC %d.%d)\n", major, minor);
    }
    if (!rc && !(p.present && p.count)) {
        printf("  NOT RUN: %s; check-op --target cuda runs the CUDA kernels where a GPU is\n", p.why);
        rc = 3;
    }
    if (!rc) {
        printf("cuda: device %s, sm_%d%d (%s)\n", p.name, p.major, p.minor,
               p.is_double ? "the driver DOUBLE" : "a real GPU");
        if (p.is_double)
            printf("  note: under the driver double every launch runs the C kernel: what is checked is the host\n"
                   "        side (the launch's arguments, uploads and downloads), not the CUDA kernel's arithmetic\n");
        else setenv("NNSC_CUDA_SYNC", "1", 0);   /* a kernel that faults is named by the launcher */
        for (int k = 0; k < narch; k++) img[k] = (rt_image){cub[k].arch, cub[k].data, cub[k].size};
        cu.ctx = rt_init_cuda_alone("check-op", arena, img, narch);
        cu.dev = rt_arena(cu.ctx);
        cu.arena = arena;
    }
    return rc;
}

/* The checks of fw (when own: NAME is the forward, not its backward) and of
 * its backward bw (NULL: none): writes, acc and splits of each, then the
 * gradients.  in: fw's inputs; bin: bw's (the gradients, then in).  fo, bo:
 * the unsplit runs' outputs of fw (when own) and bw, which the caller frees. */
static void co_suite(const co_op *fw, const co_op *bw, int own, int all, float **in, float **bin, float **fo,
                     float **bo)
{
    memset(&st, 0, sizeof st);
    if (own) check_splits(fw, in, fo);
    if (bw) {
        check_splits(bw, bin, bo);
        if (own) check_grads(fw, bw, in, all);
    }
    const char *what = fw->cuda ? "cuda" : "C kernels";
    if (fw->cuda)
        verdict(!st.guard_bad && !st.input_bad, "%s: %lld launches, %lld wrote outside their outputs, %lld into an "
                "input%s%s", what, (long long)st.calls, (long long)st.guard_bad, (long long)st.input_bad,
                st.first_bad[0] ? "; the first: " : "", st.first_bad);
    else
        verdict(!st.input_bad, "%s: %lld calls, %lld changed an input%s%s", what, (long long)st.calls,
                (long long)st.input_bad, st.first_bad[0] ? "; the first: " : "", st.first_bad);
}

/* A row of nnsc_custom_fns that check-op does not launch. */
static void co_absent(void *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)ctx, (void)b, (void)f;
    fprintf(stderr, "nnsc-aot: internal error: check-op launched custom row %lld, which it does not check\n",
            (long long)i[0]);
    exit(1);
}

int fe_check_op(const fe_opts *o)
{
    ir_graph g;
    ir_graph_init(&g);
    int rc = fe_load(o->spec, o->sets, o->nset, &g);
    if (rc) goto out;
    int cid = -1, fwd = -1;
    for (int k = 0; k < g.ncust; k++)
        if (strcmp(g.cust[k].name, o->check_name) == 0) cid = k;
    if (cid < 0) {
        char have[512] = "";
        size_t u = 0;
        for (int k = 0; k < g.ncust && u < sizeof have; k++)
            u += (size_t)snprintf(have + u, sizeof have - u, "%s%s", k ? ", " : "", g.cust[k].name);
        fprintf(stderr, "nnsc-aot: error: %s has no [custom %s] section\n  hint: %s%s\n", o->spec, o->check_name,
                g.ncust ? "its custom ops: " : "it declares no custom op ([custom NAME], docs/custom-ops.md)", have);
        rc = 2;
        goto out;
    }
    for (int k = 0; k < g.ncust; k++)
        if (g.cust[k].bwd == cid) fwd = k;
    /* the shapes: the first [op] of kind NAME (or of the op it is the backward of) */
    int user = fwd >= 0 ? fwd : cid, inst = -1;
    for (int k = 0; k < g.nop && inst < 0; k++)
        if (g.op[k].kind == IR_OP_CUSTOM && g.op[k].iattr[IR_IA_CUSTOM] == user) inst = k;
    if (inst < 0) {
        fprintf(stderr, "%s:%d: error: no [op] is of kind %s, so check-op has no shapes to test it with\n"
                        "  hint: write an [op] of kind %s in the spec; check-op runs the kernel on its inputs' shapes\n",
                o->spec, g.cust[user].line, g.cust[user].name, g.cust[user].name);
        rc = 2;
        goto out;
    }
    char dir[4096];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/nnsc-checkop-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "nnsc-aot: error: cannot make a temporary directory: %s\n", strerror(errno));
        rc = 1;
        goto out;
    }
    void *handles[4];
    int nh = 0;
    const ir_op *io = &g.op[inst];
    int ndim[IR_MAXIO + 1];
    int64_t sh[IR_MAXIO + 1][IR_MAXDIM];
    const char *names[IR_MAXIO + 1];
    for (int k = 0; k < io->nin; k++) {
        const ir_tensor *t = &g.t[io->in[k]];
        ndim[k] = t->ndim, names[k] = t->name;
        memcpy(sh[k], t->shape, sizeof sh[k]);
    }
    co_op fw = {0}, bw = {0};
    int main_id = user, back = g.cust[user].bwd, all = g.cust[main_id].bwd_all;
    printf("check-op %s (%s:%d), on the shapes of op %s:", o->check_name, o->spec, g.cust[cid].line, io->name);
    for (int k = 0; k < io->nin; k++) {
        printf("%s %s [", k ? "," : "", names[k]);
        for (int j = 0; j < ndim[k]; j++) printf("%s%lld", j ? "," : "", (long long)sh[k][j]);
        printf("]");
    }
    printf("\n");
    int cuda = o->target == FE_TARGET_CUDA;
    for (int w = 0; cuda && w < 2 && !rc; w++) {   /* the sections that run need a device kernel */
        const ir_custom *x = w ? (back >= 0 ? &g.cust[back] : NULL) : &g.cust[main_id];
        if (x && !x->cuda) {
            fprintf(stderr, "%s:%d: error: check-op --target cuda: custom op '%s' has no CUDA kernel (no cuda = in "
                            "[custom %s])\n  hint: give it cuda = FILE.cu with NNSC_CUSTOM_CUDA(%s) "
                            "(docs/custom-ops.md), or check the C kernel alone (no --target)\n",
                    o->spec, x->line, x->name, x->name, x->name);
            rc = 2;
        }
    }
    if (!rc) rc = instantiate(&g, main_id, io->nin, ndim, sh, names, &fw);
    for (int k = 0; k < IR_MAXFATTR; k++) fw.attr[k] = (float)io->fattr[k];
    if (!rc && !(fw.fn = load(&g, main_id, dir, handles, &nh))) rc = 2;
    int ng = all ? fw.n - fw.nin : 1;   /* the gradients the backward takes */
    if (!rc && back >= 0) {
        int bnd[2 * IR_MAXIO];
        int64_t bsh[2 * IR_MAXIO][IR_MAXDIM];
        const char *bnames[2 * IR_MAXIO];
        static const char *const dyname[IR_MAXIO] = {"dy1", "dy2", "dy3", "dy4", "dy5", "dy6"};
        for (int k = 0; k < ng; k++) {
            bnd[k] = fw.ndim[fw.nin + k], bnames[k] = dyname[k];
            memcpy(bsh[k], fw.shape[fw.nin + k], sizeof bsh[k]);
        }
        for (int k = 0; k < fw.nin; k++)
            bnd[ng + k] = ndim[k], bnames[ng + k] = names[k], memcpy(bsh[ng + k], sh[k], sizeof bsh[k]);
        rc = instantiate(&g, back, ng + fw.nin, bnd, bsh, bnames, &bw);
        memcpy(bw.attr, fw.attr, sizeof bw.attr);
        if (!rc && !(bw.fn = load(&g, back, dir, handles, &nh))) rc = 2;
    }
    int own = cid == main_id, has_bw = !rc && back >= 0;
    float *in[IR_MAXIO + 1], *bin[2 * IR_MAXIO], *fo[2][IR_MAXIO], *bo[2][IR_MAXIO];
    int nfill = rc ? 0 : io->nin, suites = 0;   /* inputs made; rounds of checks run */
    for (int k = 0; k < nfill; k++) in[k] = fill(numel(&fw, k), 0);
    for (int k = 0; has_bw && k < ng; k++) bin[k] = fill(numel(&bw, k), 0);
    for (int k = 0; has_bw && k < fw.nin; k++) bin[ng + k] = in[k];
    if (!rc) co_suite(&fw, has_bw ? &bw : NULL, own, all, in, bin, fo[suites], bo[suites]), suites++;
    if (!rc && !has_bw && g.cust[main_id].ngrad > 0)
        printf("  (the backward is built-in ops, grad =: check-op does not run them; nnsc-aot verify checks the "
               "training they give)\n");
    else if (!rc && !has_bw)
        printf("  (no backward: no gradient check)\n");
    else if (!rc && !own)
        printf("  (the gradients against finite differences: nnsc-aot check-op %s %s)\n", o->spec,
               g.cust[main_id].name);
    int ran = 0;
    if (!rc && cuda) {   /* the same checks of the CUDA kernels, and their outputs against the C kernels' */
        for (int k = 0; k < g.ncust; k++) nnsc_custom_fns[k] = co_absent;
        nnsc_custom_fns[main_id] = fw.fn;
        if (has_bw) nnsc_custom_fns[back] = bw.fn;
        int64_t off[2 * IR_MAXIO], n[2 * IR_MAXIO];
        int64_t need = co_layout(&fw, fw.shape, off, n);
        if (has_bw) {
            int64_t nb = co_layout(&bw, bw.shape, off, n);
            need = nb > need ? nb : need;
        }
        rc = co_cuda_start(o, &g, need + (1 << 16));
        ran = rc == 0;
        if (rc == 3) rc = 0;
    }
    if (ran) {
        fw.cuda = bw.cuda = 1;
        snprintf(fw.label, sizeof fw.label, "%s [cuda]", fw.c->name);
        if (has_bw) snprintf(bw.label, sizeof bw.label, "%s [cuda]", bw.c->name);
        co_suite(&fw, has_bw ? &bw : NULL, own, all, in, bin, fo[suites], bo[suites]), suites++;
        for (int w = 0; w < 2; w++) {
            const co_op *op = w ? &bw : &fw;
            float **c0 = w ? bo[0] : fo[0], **c1 = w ? bo[1] : fo[1];
            if ((w && !has_bw) || (!w && !own)) continue;
            double d = 0;
            int at = 0;
            for (int k = 0; k < op->n - op->nin; k++) {
                double x = rel_diff(c1[k], c0[k], numel(op, op->nin + k));
                if (x > d) d = x, at = k;
            }
            verdict(d <= CO_CUDA_BOUND, "%s: the CUDA kernel's outputs against the C kernel's (max rel diff %.2g%s%s, "
                    "bound %.0e)", op->label, d, d > CO_CUDA_BOUND ? " in output " : "",
                    d > CO_CUDA_BOUND ? op->opname[op->nin + at] : "", CO_CUDA_BOUND);
        }
        rt_finish(cu.ctx);
        cu.ctx = NULL;
    }
    cg_cubin_free(cu.cub, cu.ncub);
    for (int w = 0; w < suites; w++) {
        for (int k = 0; own && k < fw.n - fw.nin; k++) free(fo[w][k]);
        for (int k = 0; has_bw && k < bw.n - bw.nin; k++) free(bo[w][k]);
    }
    for (int k = 0; has_bw && k < ng; k++) free(bin[k]);
    for (int k = 0; k < nfill; k++) free(in[k]);
    for (int k = 0; k < nh; k++) dlclose(handles[k]);
    if (fe_rm_tree(dir)) fprintf(stderr, "nnsc-aot: warning: could not remove %s\n", dir);
    if (!rc) {
        printf("check-op: %s%s\n", failed ? "FAILED" : "OK",
               cuda && !ran ? " (the C kernels; the CUDA kernels compiled, NOT RUN)" : "");
        rc = failed ? 1 : 0;
    }
out:
    ir_graph_free(&g);
    return rc;
}
