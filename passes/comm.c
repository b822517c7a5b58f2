/* comm.c -- derive communication from pTensor mismatches.
 *
 * For every vTensor, the pTensors its producers made (or, for params and
 * optimizer state, the pieces each device stores) are compared with the
 * pTensors each consumer needs (a box, as a full value, on its device):
 *
 *   - the same pTensor is there                 -> nothing
 *   - a full-value pTensor on the same device
 *     covers the box                            -> slice (local, no bytes)
 *   - the box is held as value parts 0..k-1 on
 *     k devices including the consumer's        -> all-reduce over them
 *
 * Rules for the other transitions (all-gather, reduce-scatter, all-to-all,
 * broadcast, send/recv) come with the policies that need them; a transition
 * without a rule is a planner error, never a silent wrong program.
 * docs/comm.md lists the rules and their byte costs.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct list {
    int *v; int n, cap;
} list;

static void lpush(list *l, int x)
{
    for (int i = 0; i < l->n; i++)
        if (l->v[i] == x) return;
    *IR_PUSH(l->v, l->n, l->cap) = x;
}

/* Add a comm op; returns its id. */
static int add_comm(ir_dist *d, ir_commkind k, int t, const int *devs, int n, const int *in,
                    const int *out, int64_t bytes, const char *why)
{
    ir_comm c;
    memset(&c, 0, sizeof c);
    c.kind = k;
    c.tensor = t;
    c.group = ir_dist_group(d, devs, n);
    c.n = n;
    c.in = ir_dist_ints(d, in, n);
    c.out = ir_dist_ints(d, out, n);
    c.bytes = bytes;
    c.sec = -1;
    c.why = why ? ir_dist_str(d, why) : NULL;
    *IR_PUSH(d->comm, d->ncomm, d->commcap) = c;
    return d->ncomm - 1;
}

/* Has a comm already made pTensor pt? */
static int made(const ir_dist *d, int pt)
{
    for (int i = 0; i < d->ncomm; i++)
        for (int k = 0; k < d->comm[i].n; k++)
            if (d->ints[d->comm[i].out + k] == pt) return 1;
    return 0;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* All-reduce of the value parts in src that hold exactly need's box. */
static int try_allreduce(ir_dist *d, const list *src, int need)
{
    const ir_ptensor nn = d->pt[need];   /* a copy: d->pt moves as pTensors are added */
    const ir_ptensor *n = &nn;
    const ir_tensor *t = &d->g->t[n->tensor];
    int *parts = ir_xmalloc(sizeof(int) * 4 * ((size_t)src->n + 1));
    int *devs = parts + src->n + 1, *in = devs + src->n + 1, *out = in + src->n + 1;
    int k = 0, vn = 0, ok = 1, mine = 0;
    for (int i = 0; i < src->n && ok; i++) {
        const ir_ptensor *s = &d->pt[src->v[i]];
        if (s->vn == 1 || !ir_box_eq(&s->box, &n->box, t->ndim)) continue;
        ok = !vn || s->vn == vn;
        vn = s->vn;
        parts[k++] = src->v[i];
    }
    ok = ok && k > 0 && k == vn;
    /* one part per device, and the consumer's device among them */
    for (int i = 0; i < k; i++) devs[i] = d->pt[parts[i]].dev;
    qsort(devs, (size_t)k, sizeof devs[0], cmp_int);
    for (int i = 0; i < k && ok; i++) {
        ok = !(i && devs[i] == devs[i - 1]);
        mine |= devs[i] == n->dev;
    }
    ok = ok && mine;
    if (ok) {
        for (int i = 0; i < k; i++) {
            for (int j = 0; j < k; j++)
                if (d->pt[parts[j]].dev == devs[i]) in[i] = parts[j];
            ir_ptensor full = d->pt[in[i]];
            full.vpart = 0;
            full.vn = 1;
            out[i] = ir_dist_pt(d, &full);
        }
        if (!made(d, out[0])) {
            int64_t bytes = ir_box_numel(&n->box, t->ndim) * pass_elsize(t) * 2 * (k - 1) / k;
            char why[200];
            snprintf(why, sizeof why, "%s is a sum of %d partial values; consumers need the full value",
                     t->name, k);
            add_comm(d, IR_COMM_ALLREDUCE, n->tensor, devs, k, in, out, bytes, why);
        }
    }
    free(parts);
    return ok;
}

/* Local slice from a full-value pTensor on the consumer's device. */
static int try_slice(ir_dist *d, const list *src, int need)
{
    const ir_ptensor *n = &d->pt[need];
    const ir_tensor *t = &d->g->t[n->tensor];
    for (int i = 0; i < src->n; i++) {
        const ir_ptensor *s = &d->pt[src->v[i]];
        if (s->dev != n->dev || s->vn != 1 || !ir_box_contains(&s->box, &n->box, t->ndim)) continue;
        if (made(d, need)) return 1;
        int dev = n->dev, in = src->v[i];
        add_comm(d, IR_COMM_SLICE, n->tensor, &dev, 1, &in, &need, 0, "consumer needs a sub-box of a local piece");
        return 1;
    }
    return 0;
}

/* Sources of tensor t: what producers made, or what devices store. */
static void sources(ir_dist *d, int t, list *src)
{
    const ir_graph *g = d->g;
    for (int i = 0; i < d->nsop; i++) {
        const ir_subop *s = &d->sop[i];
        const ir_op *o = &g->op[s->op];
        if (g->t[t].producer == s->op)
            for (int k = 0; k < o->nout; k++)
                if (o->out[k] == t) lpush(src, s->out[k]);
    }
    if (g->t[t].producer >= 0) return;
    /* params and optimizer state live where the optimizer updates them;
       an untrained param, and data, where their consumers need them */
    for (int i = 0; i < d->nsop; i++) {
        const ir_subop *s = &d->sop[i];
        const ir_op *o = &g->op[s->op];
        if (o->phase != IR_PH_OPT) continue;
        for (int k = 0; k < o->nin; k++)
            if (o->in[k] == t && (k == 0 || k >= 2)) lpush(src, s->in[k]);
    }
    if (src->n) return;
    for (int i = 0; i < d->nsop; i++) {
        const ir_subop *s = &d->sop[i];
        const ir_op *o = &g->op[s->op];
        for (int k = 0; k < o->nin; k++)
            if (o->in[k] == t) lpush(src, s->in[k]);
    }
}

void pass_comm(ir_dist *d)
{
    const ir_graph *g = d->g;
    list src = {0}, need = {0};
    for (int t = 0; t < g->nt; t++) {
        src.n = need.n = 0;
        sources(d, t, &src);
        if (g->t[t].kind == IR_T_PARAM || g->t[t].kind == IR_T_OPTSTATE) {
            d->store[t] = ir_dist_ints(d, src.v, src.n);
            d->nstore[t] = src.n;
        }
        for (int i = 0; i < d->nsop; i++) {
            const ir_subop *s = &d->sop[i];
            const ir_op *o = &g->op[s->op];
            for (int k = 0; k < o->nin; k++)
                if (o->in[k] == t) lpush(&need, s->in[k]);
        }
        /* the loss is reported by every device that holds a part of it */
        if (t == g->train.loss)
            for (int i = 0; i < src.n; i++) {
                ir_ptensor full = d->pt[src.v[i]];
                full.vpart = 0;
                full.vn = 1;
                lpush(&need, ir_dist_pt(d, &full));
            }
        for (int i = 0; i < need.n; i++) {
            int nd = need.v[i];
            int have = 0;
            for (int j = 0; j < src.n; j++) have |= src.v[j] == nd;
            if (have || g->t[t].kind == IR_T_INPUT) continue;
            if (try_slice(d, &src, nd) || try_allreduce(d, &src, nd)) continue;
            ir_buf b = {0};
            ir_pt_print(d, nd, &b);
            ir_die(__FILE__, __LINE__, "no communication rule produces %s from the pieces of %s", b.s,
                   g->t[t].name);
        }
    }
    free(src.v);
    free(need.v);
}
