/* dist.c -- the DistGraph: sub-ops on devices over pTensors, comm ops,
 * device groups; boxes; printer and verifier. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

void ir_dist_init(ir_dist *d, const ir_graph *g, int ndev)
{
    memset(d, 0, sizeof *d);
    d->g = g;
    d->ndev = ndev;
    d->trans = ir_xcalloc((size_t)g->nop + 1, sizeof *d->trans);
    d->accum = ir_xcalloc((size_t)g->nt + 1, 1);
    d->world_group = -1;
    d->mesh_dp = d->mesh_tp = 1;
    d->store = ir_xmalloc(sizeof(int) * ((size_t)g->nt + 1));
    d->nstore = ir_xcalloc((size_t)g->nt + 1, sizeof(int));
    for (int i = 0; i < g->nt; i++) d->store[i] = -1;
}

void ir_dist_free(ir_dist *d)
{
    for (int i = 0; i < d->npool; i++) free(d->pool[i]);
    free(d->pool);
    free(d->trans);
    free(d->pt);
    free(d->sop);
    free(d->comm);
    free(d->grp);
    free(d->ints);
    free(d->store);
    free(d->nstore);
    free(d->seq);
    free(d->accum);
    memset(d, 0, sizeof *d);
}

const char *ir_dist_str(ir_dist *d, const char *s)
{
    char **slot = IR_PUSH(d->pool, d->npool, d->poolcap);
    *slot = ir_xstrdup(s);
    return *slot;
}

int ir_dist_ints(ir_dist *d, const int *v, int n)
{
    ir_grow((void **)&d->ints, &d->intscap, d->nints + n + 1, sizeof *d->ints);
    int at = d->nints;
    if (n) memcpy(d->ints + at, v, sizeof(int) * (size_t)n);
    d->nints += n;
    return at;
}

static int pt_eq(const ir_dist *d, const ir_ptensor *a, const ir_ptensor *b)
{
    return a->tensor == b->tensor && a->dev == b->dev && a->vpart == b->vpart && a->vn == b->vn &&
           ir_box_eq(&a->box, &b->box, d->g->t[a->tensor].ndim);
}

int ir_dist_pt(ir_dist *d, const ir_ptensor *p)
{
    for (int i = 0; i < d->npt; i++)
        if (pt_eq(d, &d->pt[i], p)) return i;
    ir_ptensor *n = IR_PUSH(d->pt, d->npt, d->ptcap);
    *n = *p;
    /* unused dims stay zero so boxes compare with memcmp-free loops only */
    return d->npt - 1;
}

int ir_dist_group(ir_dist *d, const int *devs, int n)
{
    for (int i = 0; i < d->ngrp; i++)
        if (d->grp[i].n == n && memcmp(d->ints + d->grp[i].devs, devs, sizeof(int) * (size_t)n) == 0)
            return i;
    for (int i = 1; i < n; i++) IR_ASSERT(devs[i] > devs[i - 1]);
    ir_group *g = IR_PUSH(d->grp, d->ngrp, d->grpcap);
    g->n = n;
    g->devs = ir_dist_ints(d, devs, n);
    return d->ngrp - 1;
}

int64_t ir_box_numel(const ir_box *b, int ndim)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= b->hi[i] - b->lo[i];
    return n;
}

int ir_box_eq(const ir_box *a, const ir_box *b, int ndim)
{
    for (int i = 0; i < ndim; i++)
        if (a->lo[i] != b->lo[i] || a->hi[i] != b->hi[i]) return 0;
    return 1;
}

int ir_box_contains(const ir_box *a, const ir_box *b, int ndim)
{
    for (int i = 0; i < ndim; i++)
        if (b->lo[i] < a->lo[i] || b->hi[i] > a->hi[i]) return 0;
    return 1;
}

int ir_box_and(const ir_box *a, const ir_box *b, int ndim, ir_box *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 0; i < ndim; i++) {
        o->lo[i] = a->lo[i] > b->lo[i] ? a->lo[i] : b->lo[i];
        o->hi[i] = a->hi[i] < b->hi[i] ? a->hi[i] : b->hi[i];
        if (o->lo[i] >= o->hi[i]) return 0;
    }
    return 1;
}

ir_box ir_box_full(const ir_tensor *t)
{
    ir_box b;
    memset(&b, 0, sizeof b);
    for (int i = 0; i < t->ndim; i++) b.hi[i] = t->shape[i];
    return b;
}

void ir_box_print(const ir_box *b, int ndim, ir_buf *buf)
{
    ir_bprintf(buf, "[");
    for (int i = 0; i < ndim; i++)
        ir_bprintf(buf, "%s%lld:%lld", i ? "," : "", (long long)b->lo[i], (long long)b->hi[i]);
    ir_bprintf(buf, "]");
}

/* p3 = d.fc1.w[0:64,0:128]/2of4@1 */
void ir_pt_print(const ir_dist *d, int pt, ir_buf *b)
{
    const ir_ptensor *p = &d->pt[pt];
    const ir_tensor *t = &d->g->t[p->tensor];
    ir_bprintf(b, "p%d=%s", pt, t->name);
    ir_box_print(&p->box, t->ndim, b);
    if (p->vn > 1) ir_bprintf(b, "/%dof%d", p->vpart, p->vn);
    ir_bprintf(b, "@%d", p->dev);
}

const char *ir_comm_name(ir_commkind k)
{
    static const char *n[IR_COMM_COUNT] = {"allreduce", "allgather", "reducescatter", "alltoall",
                                           "broadcast", "sendrecv", "slice", "copy", "zero"};
    return (unsigned)k < IR_COMM_COUNT ? n[k] : "?";
}

static const char *sec_name(int s)
{
    static const char *n[IR_SEC_COUNT] = {"prologue", "pre", "mb", "post", "epilogue", "eval_pre", "eval", "eval_post"};
    return (unsigned)s < IR_SEC_COUNT ? n[s] : "?";
}

static void print_trans(const ir_dist *d, int op, ir_buf *b)
{
    const ir_trans *tr = &d->trans[op];
    const ir_op *o = &d->g->op[op];
    if (tr->nsplit == 0) ir_bprintf(b, "whole");
    for (int j = 0; j < tr->nsplit; j++) {
        if (tr->id[j] == IR_VALUE) ir_bprintf(b, "%svalue %d", j ? " x " : "", tr->n[j]);
        else if (tr->id[j] < 0) ir_bprintf(b, "%sreplicate %d", j ? " x " : "", tr->n[j]);
        else ir_bprintf(b, "%ssplit %s %d", j ? " x " : "", o->anno.idname[tr->id[j]], tr->n[j]);
    }
    ir_bprintf(b, " on devs");
    for (int s = 0; s < tr->nsub; s++) ir_bprintf(b, "%s%d", s ? "," : " ", d->ints[tr->devs + s]);
}

void ir_dist_print(const ir_dist *d, ir_buf *b)
{
    const ir_graph *g = d->g;
    ir_bprintf(b, "dist %s devices %d\n", g->model ? g->model : "?", d->ndev);
    for (int i = 0; i < d->ngrp; i++) {
        ir_bprintf(b, "  group g%d {", i);
        for (int k = 0; k < d->grp[i].n; k++) ir_bprintf(b, "%s%d", k ? "," : "", d->ints[d->grp[i].devs + k]);
        ir_bprintf(b, "}\n");
    }
    for (int i = 0; i < g->nop; i++) {
        ir_bprintf(b, "  trans %s: ", g->op[i].name);
        print_trans(d, i, b);
        if (d->trans[i].why) ir_bprintf(b, "  ; %s", d->trans[i].why);
        ir_bprintf(b, "\n");
    }
    for (int i = 0; i < d->nsop; i++) {
        const ir_subop *s = &d->sop[i];
        const ir_op *o = &g->op[s->op];
        ir_bprintf(b, "  s%d %s.%d dev %d", i, o->name, s->sub, s->dev);
        if (s->order >= 0) ir_bprintf(b, " %s#%d", sec_name(s->sec), s->order);
        ir_bprintf(b, " (");
        for (int k = 0; k < o->nin; k++) {
            if (k) ir_bprintf(b, ", ");
            ir_pt_print(d, s->in[k], b);
        }
        ir_bprintf(b, ") ->");
        for (int k = 0; k < o->nout; k++) {
            ir_bprintf(b, " ");
            ir_pt_print(d, s->out[k], b);
        }
        ir_bprintf(b, "\n");
    }
    for (int i = 0; i < d->ncomm; i++) {
        const ir_comm *c = &d->comm[i];
        ir_bprintf(b, "  c%d %s %s g%d %s bytes %lld:", i, ir_comm_name(c->kind), g->t[c->tensor].name, c->group,
                   sec_name(c->sec), (long long)c->bytes);
        if (c->kind == IR_COMM_BROADCAST || c->kind == IR_COMM_SENDRECV || c->kind == IR_COMM_COPY) {
            ir_bprintf(b, " region ");
            ir_box_print(&c->region, g->t[c->tensor].ndim, b);
            if (c->acc) ir_bprintf(b, " acc");
        }
        for (int k = 0; k < c->n; k++) {
            int pi = d->ints[c->in + k], po = d->ints[c->out + k];
            ir_bprintf(b, " ");
            if (pi >= 0) ir_pt_print(d, pi, b);
            else ir_bprintf(b, "-");
            ir_bprintf(b, " => ");
            if (po >= 0) ir_pt_print(d, po, b);
            else ir_bprintf(b, "-");
            ir_bprintf(b, k + 1 < c->n ? ";" : "");
        }
        if (c->why) ir_bprintf(b, "  ; %s", c->why);
        ir_bprintf(b, "\n");
    }
}

void ir_dist_verify(const ir_dist *d)
{
    const ir_graph *g = d->g;
    for (int i = 0; i < d->npt; i++) {
        const ir_ptensor *p = &d->pt[i];
        IR_ASSERT(p->tensor >= 0 && p->tensor < g->nt);
        IR_ASSERT(p->dev >= 0 && p->dev < d->ndev);
        IR_ASSERT(p->vn >= 1 && p->vpart >= 0 && p->vpart < p->vn);
        const ir_tensor *t = &g->t[p->tensor];
        for (int k = 0; k < t->ndim; k++)
            if (!(0 <= p->box.lo[k] && p->box.lo[k] < p->box.hi[k] && p->box.hi[k] <= t->shape[k]))
                ir_die(__FILE__, __LINE__, "pTensor p%d of %s: bad box in dim %d", i, t->name, k);
    }
    for (int i = 0; i < d->nsop; i++) {
        const ir_subop *s = &d->sop[i];
        const ir_op *o = &g->op[s->op];
        for (int k = 0; k < o->nin; k++) {
            const ir_ptensor *p = &d->pt[s->in[k]];
            IR_ASSERT(p->tensor == o->in[k] && p->dev == s->dev);
            int valsplit = 0;
            for (int j = 0; j < d->trans[s->op].nsplit; j++) valsplit |= d->trans[s->op].id[j] == IR_VALUE;
            if (p->vn != 1 && !((ir_ops[o->kind].flags & OPF_LINEAR) && valsplit))
                ir_die(__FILE__, __LINE__, "sub-op s%d (%s) consumes a partial value", i, o->name);
        }
        for (int k = 0; k < o->nout; k++) IR_ASSERT(d->pt[s->out[k]].tensor == o->out[k]);
    }
    for (int i = 0; i < d->ncomm; i++) {
        const ir_comm *c = &d->comm[i];
        IR_ASSERT(c->group >= 0 && c->group < d->ngrp && d->grp[c->group].n == c->n);
        const int *devs = d->ints + d->grp[c->group].devs;
        for (int k = 0; k < c->n; k++) {
            int pi = d->ints[c->in + k], po = d->ints[c->out + k];
            IR_ASSERT(pi < 0 || (d->pt[pi].tensor == c->tensor && d->pt[pi].dev == devs[k]));
            IR_ASSERT(po < 0 || (d->pt[po].tensor == c->tensor && d->pt[po].dev == devs[k]));
        }
    }
}
