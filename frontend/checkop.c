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
#include "frontend.h"

typedef void kfn(void *ctx, void *const *b, const int64_t *i, const float *f);

/* One op instance to run: the annotation instantiated for the operands. */
typedef struct co_op {
    const ir_custom *c;
    kfn *fn;
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

/* Call the kernel on buffers buf[] of the given shapes. */
static void call(const co_op *op, float **buf, int64_t shape[][IR_MAXDIM], int acc)
{
    int64_t iv[4 + 2 * IR_MAXIO * (1 + IR_MAXDIM)];
    int p = 0;
    iv[p++] = 0, iv[p++] = op->nin, iv[p++] = op->n - op->nin, iv[p++] = acc;
    for (int k = 0; k < op->n; k++) {
        iv[p++] = op->ndim[k];
        for (int j = 0; j < op->ndim[k]; j++) iv[p++] = shape[k][j];
    }
    op->fn(NULL, (void *const *)buf, iv, op->attr);
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
                "every element of every output", op->c->name, (long long)unwritten, which + 1,
                op->opname[op->nin + which]);
    else verdict(1, "%s: writes every output element", op->c->name);
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
    verdict(worst <= 1e-5, "%s: acc = 1 adds into the outputs (max rel diff %.2g)", op->c->name, worst);
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
                    op->c->name, nm, op->a.id_reduce[id] ? "+" : "", (long long)e, (long long)cut,
                    (long long)(e - cut), d);
        } else {
            char where[160] = "";
            if (worst_out >= 0)
                snprintf(where, sizeof where, " output %d '%s'", worst_out + 1, op->opname[op->nin + worst_out]);
            /* '+' is a cure only where the output lacks the dim */
            int lacks = worst_out < 0 || !has[op->nin + worst_out];
            verdict(0, "%s: dim '%s' is marked splittable, but splitting it (%lld -> %lld + %lld) changes%s by %.3g "
                    "(relative); mark it '%s^' in the annotation if it must stay whole%s", op->c->name, nm,
                    (long long)e, (long long)cut, (long long)(e - cut), where[0] ? where : " an output", d, nm,
                    op->a.id_reduce[id] || !lacks ? "" : ", or '+' if the parts' outputs are partial sums");
        }
    }
    if (!any) verdict(1, "%s: no dim the planner may split (every one is '^', merged inside or of extent 1)",
                      op->c->name);
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
                "err %.2g%s)", bw->c->name, k + 1, fw->opname[k], samples, worst,
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
    co_op fw, bw;
    int main_id = user, back = g.cust[user].bwd;
    printf("check-op %s (%s:%d), on the shapes of op %s:", o->check_name, o->spec, g.cust[cid].line, io->name);
    for (int k = 0; k < io->nin; k++) {
        printf("%s %s [", k ? "," : "", names[k]);
        for (int j = 0; j < ndim[k]; j++) printf("%s%lld", j ? "," : "", (long long)sh[k][j]);
        printf("]");
    }
    printf("\n");
    rc = instantiate(&g, main_id, io->nin, ndim, sh, names, &fw);
    for (int k = 0; k < IR_MAXFATTR; k++) fw.attr[k] = (float)io->fattr[k];
    if (!rc && !(fw.fn = load(&g, main_id, dir, handles, &nh))) rc = 2;
    float *in[IR_MAXIO + 1], *out[IR_MAXIO];
    for (int k = 0; k < io->nin; k++) in[k] = fill(numel(&fw, k), 0);
    if (!rc && cid == main_id) {
        check_splits(&fw, in, out);
        for (int k = 0; k < fw.n - fw.nin; k++) free(out[k]);
    }
    if (!rc && back >= 0) {   /* the backward: its own splits, then the gradients */
        int all = g.cust[main_id].bwd_all, ng = all ? fw.n - fw.nin : 1;   /* gradients it takes */
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
        if (!rc) {
            float *bin[2 * IR_MAXIO], *bout[IR_MAXIO];
            for (int k = 0; k < ng; k++) bin[k] = fill(numel(&bw, k), 0);
            for (int k = 0; k < fw.nin; k++) bin[ng + k] = in[k];
            check_splits(&bw, bin, bout);
            for (int k = 0; k < bw.n - bw.nin; k++) free(bout[k]);
            for (int k = 0; k < ng; k++) free(bin[k]);
            if (cid == main_id) check_grads(&fw, &bw, in, all);
            else printf("  (the gradients against finite differences: nnsc-aot check-op %s %s)\n", o->spec,
                        g.cust[main_id].name);
        }
    } else if (!rc && g.cust[main_id].ngrad > 0) {
        printf("  (the backward is built-in ops, grad =: check-op does not run them; nnsc-aot verify checks the "
               "training they give)\n");
    } else if (!rc) {
        printf("  (no backward: no gradient check)\n");
    }
    for (int k = 0; k < io->nin; k++) free(in[k]);
    for (int k = 0; k < nh; k++) dlclose(handles[k]);
    if (fe_rm_tree(dir)) fprintf(stderr, "nnsc-aot: warning: could not remove %s\n", dir);
    if (!rc) {
        printf("check-op: %s\n", failed ? "FAILED" : "OK");
        rc = failed ? 1 : 0;
    }
out:
    ir_graph_free(&g);
    return rc;
}
