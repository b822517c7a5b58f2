/* split.c -- op-trans and op-assign made concrete: for every op, its
 * sub-ops, and for every sub-op the pTensors it consumes and produces.
 *
 * Sub-op s of an op with nested splits (id_j, n_j) has coordinates c_j (s in
 * mixed radix, first split most significant).  Every operand dim holding
 * id_j is cut into n_j equal parts and the sub-op takes part c_j (nested
 * splits cut the part again).  When id_j is a reduction identifier, the
 * outputs are value-split: part c_j of n_j, except a co-shard's pieces of an
 * accumulated output (a param's gradient), which all add into the one
 * pTensor (ir_trans.cosacc).  An inner identifier of a merged dim (attention's
 * r in (h r d)) splits only once the outer one is down to one part; outputs
 * without it are value-split too.  A replicate split (-1) only changes the device.  Inputs are always needed as full values.
 */
#include <string.h>

#include "passes.h"

/* Coordinates of sub-op s. */
static void coords(const ir_trans *tr, int s, int *c)
{
    for (int j = tr->nsplit - 1; j >= 0; j--) {
        c[j] = s % tr->n[j];
        s /= tr->n[j];
    }
}

/* The pTensor of operand k of op for a sub-op at coordinates c on dev. */
static int operand_pt(ir_dist *d, int op, int k, const int *c, int dev)
{
    const ir_graph *g = d->g;
    const ir_op *o = &g->op[op];
    const ir_trans *tr = &d->trans[op];
    int t = k < o->nin ? o->in[k] : o->out[k - o->nin];
    ir_ptensor p;
    memset(&p, 0, sizeof p);
    p.tensor = t;
    p.dev = dev;
    p.box = ir_box_full(&g->t[t]);
    p.vpart = 0;
    p.vn = 1;
    for (int j = 0; j < tr->nsplit; j++) {
        int id = tr->id[j];
        if (id == IR_VALUE) {
            p.vpart = p.vpart * tr->n[j] + c[j];
            p.vn *= tr->n[j];
            continue;
        }
        if (id < 0) continue;
        int hit = 0;
        for (int q = 0; q < o->anno.ndim[k]; q++) {
            const ir_adim *a = &o->anno.dim[k][q];
            int inner = a->id != id && a->nsub > 0 && a->sub[0] == id;
            if (a->id != id && !inner) continue;
            /* a merged dim "(h d)" split on h: contiguous blocks of h/n * d; "(h r d)" split
               on r (attention's query heads of a key/value head) once h is down to one:
               blocks of r/n * d, contiguous too */
            int64_t len = p.box.hi[q] - p.box.lo[q];
            IR_ASSERT(len % tr->n[j] == 0);
            if (inner) {
                int64_t in = 1;   /* the extent of the identifiers merged inside h */
                for (int u = 0; u < a->nsub; u++) in *= o->ext[a->sub[u]];
                IR_ASSERT(len <= in);   /* (h already split to one) */
            }
            int64_t part = len / tr->n[j];
            p.box.lo[q] += part * c[j];
            p.box.hi[q] = p.box.lo[q] + part;
            hit = 1;
        }
        /* an output without a split identifier sums over it: value-split -- a reduction
           identifier, or an inner one (attention's backward: dk and dv sum over the query
           heads of their key/value head) */
        if (!hit && k >= o->nin && (o->anno.id_reduce[id] || o->anno.id_inner[id]) &&
            !(tr->cosacc && j == tr->nsplit - 1)) {
            p.vpart = p.vpart * tr->n[j] + c[j];
            p.vn *= tr->n[j];
        }
    }
    return ir_dist_pt(d, &p);
}

void pass_split(ir_dist *d)
{
    const ir_graph *g = d->g;
    int64_t nsop = 0, npt = 0;   /* at most: every operand of every sub-op a new pTensor */
    for (int i = 0; i < g->nop; i++) {
        nsop += d->trans[i].nsub;
        npt += (int64_t)d->trans[i].nsub * (g->op[i].nin + g->op[i].nout);
    }
    ir_dist_reserve(d, d->npt + npt, d->nsop + nsop);
    for (int i = 0; i < g->nop; i++) {
        const ir_op *o = &g->op[i];
        const ir_trans *tr = &d->trans[i];
        IR_ASSERT(tr->nsub >= 1);
        /* extents of every identifier in a sub-op: split ones divided */
        int64_t ext0[IR_MAXID];
        memcpy(ext0, o->ext, sizeof ext0);
        for (int j = 0; j < tr->nsplit; j++)
            if (tr->id[j] >= 0) ext0[tr->id[j]] /= tr->n[j];
        for (int s = 0; s < tr->nsub; s++) {
            int c[IR_MAXSPLIT] = {0};
            coords(tr, s, c);
            ir_subop so;
            memset(&so, 0, sizeof so);
            so.op = i;
            so.sub = s;
            so.dev = d->ints[tr->devs + s];
            so.order = -1;
            memcpy(so.ext, ext0, sizeof so.ext);
            for (int k = 0; k < o->nin; k++) so.in[k] = operand_pt(d, i, k, c, so.dev);
            for (int k = 0; k < o->nout; k++) so.out[k] = operand_pt(d, i, o->nin + k, c, so.dev);
            *IR_PUSH(d->sop, d->nsop, d->sopcap) = so;
        }
    }
    ir_dist_index_sops(d);
}
