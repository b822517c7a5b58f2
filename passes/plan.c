/* plan.c -- choose op-trans and op-assign for every op, by policy.
 *
 * Policy dp: every op that carries the batch is split on the annotation
 * identifier of its batch dimension into one part per device, sub-op i on
 * device i; ops that do not carry the batch (optimizer updates) are
 * replicated on every device.  Nothing here knows about gradients or
 * all-reduces: the split of a weight-gradient matmul on its reduction
 * dimension makes its output a value-split pTensor, and passes/comm.c
 * derives the all-reduce from that.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

int pass_error(const ir_graph *g, int line, const char *hint, const char *fmt, ...)
{
    va_list ap;
    if (line > 0) fprintf(stderr, "%s:%d: error: ", g->file ? g->file : "?", line);
    else fprintf(stderr, "%s: error: ", g->file ? g->file : "?");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (hint) fprintf(stderr, "  hint: %s\n", hint);
    return 2;
}

int pass_elsize(const ir_tensor *t) { return t->dtype == IR_F32 || t->dtype == IR_I32 ? 4 : 4; }

int pass_batch_id(const ir_graph *g, int op)
{
    const ir_op *o = &g->op[op];
    for (int k = 0; k < o->nin + o->nout; k++) {
        const ir_tensor *t = &g->t[k < o->nin ? o->in[k] : o->out[k - o->nin]];
        if (t->batch_dim >= 0) return o->anno.dim[k][t->batch_dim].id;
    }
    return -1;
}

/* Extent of identifier id in op (from its operands). */
static int64_t id_extent(const ir_graph *g, int op, int id)
{
    const ir_op *o = &g->op[op];
    for (int k = 0; k < o->nin + o->nout; k++) {
        const ir_tensor *t = &g->t[k < o->nin ? o->in[k] : o->out[k - o->nin]];
        for (int j = 0; j < o->anno.ndim[k]; j++)
            if (o->anno.dim[k][j].id == id) return t->shape[j];
    }
    return -1;
}

/* Set op's trans to one split (id, or -1 to replicate) over devices 0..n-1. */
static void set_trans(ir_dist *d, int op, int id, int n, const char *why)
{
    ir_trans *tr = &d->trans[op];
    memset(tr, 0, sizeof *tr);
    int *devs = ir_xmalloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++) devs[i] = i;
    if (n > 1 || id >= 0) {
        tr->nsplit = 1;
        tr->id[0] = id;
        tr->n[0] = n;
    }
    tr->nsub = n;
    tr->devs = ir_dist_ints(d, devs, n);
    free(devs);
    tr->why = why ? ir_dist_str(d, why) : NULL;
}

/* Inputs' batch dims must divide by devices x micro-batches. */
static int check_batch(ir_dist *d)
{
    const ir_graph *g = d->g;
    int64_t parts = (int64_t)d->ndev * g->train.micro_batches;
    for (int i = 0; i < g->nt; i++) {
        const ir_tensor *t = &g->t[i];
        if (t->kind != IR_T_INPUT || t->batch_dim < 0) continue;
        int64_t b = t->shape[t->batch_dim];
        if (b % parts == 0) continue;
        char hint[256];
        snprintf(hint, sizeof hint,
                 "make the batch a multiple of %lld, or use a device count and micro_batches whose product divides %lld",
                 (long long)parts, (long long)b);
        return pass_error(g, t->line, hint,
                          "batch dim %d of input '%s' (%lld) does not divide by devices x micro_batches = %d x %lld",
                          t->batch_dim, t->name, (long long)b, d->ndev, (long long)g->train.micro_batches);
    }
    return 0;
}

/* dp: split on the batch identifier, else replicate. */
static void plan_dp(ir_dist *d)
{
    const ir_graph *g = d->g;
    for (int i = 0; i < g->nop; i++) {
        int b = pass_batch_id(g, i);
        char why[160];
        if (b >= 0) {
            snprintf(why, sizeof why, "dp: batch dim '%s' (%lld) split %d ways%s", g->op[i].anno.idname[b],
                     (long long)id_extent(g, i, b), d->ndev,
                     g->op[i].anno.id_reduce[b] && d->ndev > 1 ? ", a reduction: outputs are partial sums" : "");
            set_trans(d, i, b, d->ndev, why);
        } else {
            snprintf(why, sizeof why, "dp: no batch dim, replicated on all %d devices", d->ndev);
            set_trans(d, i, -1, d->ndev, why);
        }
    }
}

int pass_plan(ir_dist *d)
{
    const ir_graph *g = d->g;
    int rc = check_batch(d);
    if (rc) return rc;
    const char *pol = g->req.policy ? g->req.policy : "dp";
    if (strcmp(pol, "dp") == 0) {
        plan_dp(d);
        return 0;
    }
    return pass_error(g, 0, "use policy = dp", "plan policy '%s' is not supported", pol);
}
