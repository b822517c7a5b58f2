/* bucket.c -- gradient buckets: the collectives of one section that
 * follow one another on every member of one group run as one collective
 * (docs/comm.md, Gradient buckets).
 *
 * After the micro-batch loop every rank all-reduces its accumulated
 * gradients (schedule.c places every comm the updates read before the
 * updates), or under ZeRO 1 reduce-scatters them, and under ZeRO 1 and 2
 * gathers the updated params: one collective per param, and a layernorm's
 * weight or a bias costs the collective's latency for a few hundred
 * bytes.  A bucket is a run of such comms of one kind and group that
 * follow one another on every member, with nothing between:
 *   - all-reduces, each in place (its input neither read nor written on
 *     that rank after it, and not an all-reduce's result: memplan.c then
 *     gives the result the input's buffer).  memplan.c lays a bucket's
 *     buffers out one after another, so the first comm's lowering reduces
 *     the whole range, the 64-byte alignment gaps included (zeros: the
 *     arena starts zeroed and nothing else writes them); no copies;
 *   - reduce-scatters made once a step (ZeRO 1's and 3's) and all-gathers,
 *     each where packing it costs less than the latency it saves (the cost
 *     model's); lower.c packs them into the scratch, member j's block
 *     holding every comm's tile j, at most bucket_cap bytes of whole boxes
 *     a bucket.
 * In the micro-batches (without a pipeline) ZeRO 2's reduce-scatters (which
 * add into the update's shard) and ZeRO 3's gathers join buckets the same
 * way; mb_order (below) first moves them together.
 * The same sums element by element (the CPU collectives add the members'
 * values in member order, whatever the buffer's length; NCCL may pick
 * another algorithm for the larger buffer, within floating-point
 * tolerance).
 *
 * pass_bucket_order (below) first reorders the items before the updates
 * so that each group's comms of one kind follow one another.
 *
 * Every member decides alike: the conditions are checked on every member
 * and a comm joins a bucket only where all of them allow it, so every
 * member runs the same collectives.  [plan] grad_buckets = false keeps one
 * collective per comm.
 *
 * The cost model prices a bucket as one collective of its bytes
 * (ir_comm.bbytes, on the first comm; the others cost nothing) and the
 * packing's copies.
 *
 * Cost: linear in the ranks' items; the reorders, n log n in the items
 * of the micro-batches and before the updates. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* Do the micro-batches' collectives join buckets?  Not in a pipeline,
 * whose stages' tasks order them (pipeline.c). */
static int mb_buckets(const ir_dist *d)
{
    return d->mesh_pp <= 1;
}

/* May comm c join a bucket, as far as c alone goes?  After the
 * micro-batches: an all-reduce (not in the prologue), a reduce-scatter
 * (ZeRO 1's) or an all-gather (ZeRO 1's and 2's params after the updates,
 * and in the prologue).  In the micro-batches (mb_buckets), of a tensor
 * without a batch dim: a reduce-scatter (ZeRO 2's gradient shards, which
 * accumulate) or an all-gather (ZeRO 3's params, for the forward and again
 * for the backward). */
static int candidate(const ir_dist *d, int c)
{
    const ir_comm *cm = &d->comm[c];
    const ir_tensor *t = &d->g->t[cm->tensor];
    if (cm->n < 2 || pass_elsize(t) != 4) return 0;
    if (cm->sec == IR_SEC_MB) {   /* in the micro-batches: ZeRO 2's and 3's, without a pipeline */
        if (!mb_buckets(d) || t->batch_dim >= 0 || cm->kind == IR_COMM_ALLREDUCE) return 0;
    } else if (cm->sec != IR_SEC_POST) {
        return 0;
    }
    if (cm->kind == IR_COMM_ALLREDUCE) return !cm->prologue;
    if (cm->kind != IR_COMM_REDUCESCATTER && cm->kind != IR_COMM_ALLGATHER) return 0;
    /* packed: only where the copies cost less than the latency they save (the cost model's) */
    const ir_profile *pf = &d->g->prof;
    const int *m = d->ints + d->grp[cm->group].devs;
    int spans = 0;
    for (int k = 1; k < cm->n; k++) spans |= m[k] / pf->per_node != m[0] / pf->per_node;
    int a = d->ints[cm->in], b = d->ints[cm->out];
    if (a < 0 || b < 0) return 0;
    double by = (double)(ir_box_numel(&d->pt[a].box, t->ndim) + ir_box_numel(&d->pt[b].box, t->ndim)) * 4;
    return 2 * by / pf->mem_bw < (cm->n - 1) * (spans ? pf->net_lat : pf->link_lat);
}

/* The bucket class of comm c: its group and kind, or -1 when it cannot join one. */
static int bclass(const ir_dist *d, int c)
{
    const ir_comm *cm = &d->comm[c];
    int k = cm->kind == IR_COMM_ALLREDUCE ? 0 : cm->kind == IR_COMM_REDUCESCATTER ? 1 : 2;
    return candidate(d, c) ? cm->group * 3 + k : -1;
}

/* The most bytes a bucket of reduce-scatters or all-gathers packs (the
 * whole boxes of its comms): the scratch takes about as much again. */
#define BUCKET_PACK (32LL << 20)

/* The most bytes a bucket packs on the plan's devices: BUCKET_PACK, or a
 * 64th of a device's memory where that is less (the bucket's boxes live
 * while it runs, and its scratch takes about as much again). */
int64_t pass_bucket_cap(const ir_profile *pf)
{
    double m = pf->mem / 64;
    return m < (double)BUCKET_PACK ? (int64_t)m : BUCKET_PACK;
}

static int64_t bucket_cap(const ir_dist *d)
{
    return pass_bucket_cap(&d->g->prof);
}

/* The bytes comm c adds to its bucket's packing: a reduce-scatter's or
 * all-gather's whole box (an all-reduce's bucket packs nothing). */
static int64_t packed_bytes(const ir_dist *d, int c)
{
    const ir_comm *cm = &d->comm[c];
    if (cm->kind == IR_COMM_ALLREDUCE) return 0;
    int pt = d->ints[(cm->kind == IR_COMM_REDUCESCATTER ? cm->in : cm->out)];
    return ir_box_numel(&d->pt[pt].box, d->g->t[cm->tensor].ndim) * 4;
}

/* ---- the order of the comms before the updates
 *
 * The schedule places the comms the updates read param by param, so where a
 * rank is a member of two groups after the loop (dp x tp with sequence
 * parallelism: the tp-split params' gradients over dp, the sequence-parallel
 * ones over dp x tp) its all-reduces alternate between them and the buckets
 * break at every change.  pass_bucket_order reorders the post items before
 * the first update: a list schedule that keeps every two items touching one
 * pTensor in their order, and takes, of the items whose predecessors are
 * placed, one of the class (group and kind) it took last where there is
 * one, else the first in the old order.  One global order still, so every group meets its
 * collectives in one order on every member. */

/* The pTensors item it touches, into pt (cap entries); how many. */
static int item_pts(const ir_dist *d, const ir_item *it, int *pt, int cap)
{
    int n = 0;
    if (it->comm) {
        const ir_comm *c = &d->comm[it->id];
        for (int k = 0; k < c->n; k++) {
            int a = d->ints[c->in + k], b = d->ints[c->out + k];
            if (a >= 0 && n < cap) pt[n++] = a;
            if (b >= 0 && n < cap) pt[n++] = b;
        }
    } else {
        const ir_subop *s = &d->sop[it->id];
        const ir_op *o = &d->g->op[s->op];
        for (int k = 0; k < o->nin && n < cap; k++) pt[n++] = s->in[k];
        for (int k = 0; k < o->nout && n < cap; k++) pt[n++] = s->out[k];
    }
    return n;
}

typedef struct bedge {
    int s, t;   /* item s before item t (positions in the region) */
} bedge;

/* The list schedule's ready items. */
typedef struct bready {
    int *heap, nh;        /* by old position */
    int *gnext;           /* per item: the next ready comm of its class (bclass), -1: none */
    int *ghead, *gtail;   /* per class: its list of ready comms */
} bready;

/* Item it's bucket class (bclass), or -1. */
static int item_class(const ir_dist *d, const ir_item *it)
{
    return it->comm ? bclass(d, it->id) : -1;
}

/* Item i of the region from a is ready. */
static void ready(const ir_dist *d, bready *r, int a, int i)
{
    ir_heap_push(r->heap, &r->nh, i);
    int g = item_class(d, &d->seq[a + i]);
    if (g < 0) return;
    r->gnext[i] = -1;
    if (r->ghead[g] < 0) r->ghead[g] = i;
    else r->gnext[r->gtail[g]] = i;
    r->gtail[g] = i;
}

/* ---- the order of the micro-batches' collectives
 *
 * In the micro-batches the schedule places ZeRO 3's gathers of the params
 * each before the op that reads it, and ZeRO 2's reduce-scatters of the
 * gradients each after the op that makes it, compute between every two.
 * mb_order moves them together: an all-gather up to the one before it of
 * its class (hoist), a reduce-scatter down to the one after it (sink),
 * where no item between touches what it writes or writes what it reads, and
 * while the bucket it joins packs at most bucket_cap bytes.  The gathered
 * params then live from their bucket's collective on, the gradients until
 * theirs: at most about bucket_cap bytes more, which the memory plan
 * counts.  Positions are the old order's; an item that moved is still
 * counted where it was (conservative), and items only move towards their
 * bucket's first (hoist) or last (sink) comm.  A sort by (anchor, side,
 * position) then lays each bucket's comms next to its anchor.  Within the
 * forward [a, seq_bwd) and the backward [seq_bwd, end) apart (pipeline.c's
 * tasks need no such order, but the items stay in their half). */
static void mb_order(ir_dist *d, int a, int b, int sink, int *lw, int *lt, int *head, int64_t *hb)
{
    int n = b - a;
    if (n < 3) return;
    int64_t *key = ir_xmalloc(sizeof(int64_t) * (size_t)n);
    int *cpin = ir_xmalloc(sizeof(int) * (size_t)n);   /* per position: a copy's input's last write or
                                                           output's last touch before it (-1: none),
                                                           -2: not a copy */
    int moved = 0;
    for (int q = 0; q < 3 * d->ngrp; q++) head[q] = -1, hb[q] = 0;
    for (int s = 0; s < n; s++) {
        int i = sink ? n - 1 - s : s;   /* (sink: from the last back; positions mirrored, p) */
        const ir_item *it = &d->seq[a + i];
        int p = sink ? n - 1 - i : i;
        int side = 1, anchor = i;   /* (key: 4 anchor + side; side 1: where it was) */
        int cls = -1;
        if (it->comm && d->comm[it->id].kind == (sink ? IR_COMM_REDUCESCATTER : IR_COMM_ALLGATHER) &&
            d->comm[it->id].sec == IR_SEC_MB)
            cls = bclass(d, it->id);
        if (cls >= 0) {
            const ir_comm *c = &d->comm[it->id];
            int h = head[cls];
            int64_t pb = packed_bytes(d, it->id);
            int ok = h >= 0 && hb[cls] + pb <= bucket_cap(d);
            for (int k = 0; k < c->n && ok; k++) {   /* nothing between writes its inputs or touches its outputs */
                int in = d->ints[c->in + k], out = d->ints[c->out + k];
                if (out >= 0 && lt[out] > h) ok = 0;
                /* (hoist: an input a copy made since, from what nothing wrote since h, and nothing touched
                   since -- ZeRO 3's shard copied for the backward, pass_zero3_regather -- moves with it) */
                if (in >= 0 && lw[in] > h && (sink || lt[in] != lw[in] || cpin[lw[in]] < -1 || cpin[lw[in]] >= h))
                    ok = 0;
            }
            for (int k = 0; k < c->n && ok && !sink; k++) {   /* (the copies go just before h's comm) */
                int in = d->ints[c->in + k];
                if (in >= 0 && lw[in] > h) key[lw[in]] = ((int64_t)(4 * h) << 32) | lw[in];
            }
            if (ok) {
                anchor = sink ? n - 1 - h : h;
                side = sink ? 0 : 2;
                hb[cls] += pb;
                moved++;
            } else {
                head[cls] = p;
                hb[cls] = pb;
            }
        }
        /* its touches, at its old position (p grows as the walk goes) */
        if (it->comm) {
            const ir_comm *c = &d->comm[it->id];
            for (int k = 0; k < c->n; k++) {
                int in = d->ints[c->in + k], out = d->ints[c->out + k];
                if (in >= 0) lt[in] = p;
                if (out >= 0) lw[out] = lt[out] = p;
            }
        } else {
            const ir_subop *so = &d->sop[it->id];
            const ir_op *o = &d->g->op[so->op];
            cpin[p] = -2;
            if (o->kind == IR_OP_COPY && o->nin == 1 && o->nout == 1)   /* (the later of the two) */
                cpin[p] = lw[so->in[0]] > lt[so->out[0]] ? lw[so->in[0]] : lt[so->out[0]];
            for (int k = 0; k < o->nin; k++) lt[so->in[k]] = p;
            for (int k = 0; k < o->nout; k++) lw[so->out[k]] = lt[so->out[k]] = p;
        }
        key[i] = ((int64_t)(4 * anchor + side) << 32) | i;
    }
    /* reset the touches (the next segment's positions start again at 0) */
    int *pts = NULL, ptcap = 0;
    for (int i = 0; i < n; i++) {
        const ir_item *it = &d->seq[a + i];
        int need = it->comm ? 2 * d->comm[it->id].n : 2 * IR_MAXIO;
        if (need > ptcap) ptcap = need, pts = ir_xrealloc(pts, sizeof(int) * (size_t)ptcap);
        for (int k = item_pts(d, it, pts, ptcap) - 1; k >= 0; k--) lw[pts[k]] = lt[pts[k]] = -1;
    }
    free(pts);
    if (moved) {
        qsort(key, (size_t)n, sizeof *key, ir_cmp_i64);
        ir_item *out = ir_xmalloc(sizeof(ir_item) * (size_t)n);
        for (int k = 0; k < n; k++) out[k] = d->seq[a + (int)(key[k] & 0xffffffff)];
        pass_seq_put(d, a, out, n);
        free(out);
    }
    free(key);
    free(cpin);
}

void pass_bucket_order(ir_dist *d)
{
    if (d->g->req.no_grad_buckets || d->ndev < 2) return;
    if (mb_buckets(d)) {
        int e = 0;
        while (e < d->nseq && d->seq[e].sec != IR_SEC_MB) e++;
        int s0 = e;
        while (e < d->nseq && d->seq[e].sec == IR_SEC_MB) e++;
        int bw = d->seq_bwd < s0 ? s0 : d->seq_bwd > e ? e : d->seq_bwd;
        int *lw = ir_xmalloc(sizeof(int) * ((size_t)d->npt + 1)), *lt = ir_xmalloc(sizeof(int) * ((size_t)d->npt + 1));
        for (int i = 0; i < d->npt; i++) lw[i] = lt[i] = -1;
        int *head = ir_xmalloc(sizeof(int) * (3 * (size_t)d->ngrp + 1));
        int64_t *hb = ir_xmalloc(sizeof(int64_t) * (3 * (size_t)d->ngrp + 1));
        for (int sink = 0; sink < 2; sink++) {
            mb_order(d, s0, bw, sink, lw, lt, head, hb);
            mb_order(d, bw, e, sink, lw, lt, head, hb);
        }
        free(lw), free(lt), free(head), free(hb);
    }
    int a = 0;
    while (a < d->nseq && d->seq[a].sec != IR_SEC_POST) a++;
    int b = a;
    while (b < d->nseq && d->seq[b].sec == IR_SEC_POST &&
           (d->seq[b].comm || d->g->op[d->sop[d->seq[b].id].op].phase != IR_PH_OPT))
        b++;
    int n = b - a;
    if (n < 3) return;
    /* edges: each item to the next item touching one of its pTensors (CSR by source), from the
       region's touches (pTensor, item) sorted: consecutive touches of one pTensor */
    int *pts = NULL, ptcap = 0, ne = 0, ecap = 0, nt = 0, tcap = 0;
    int64_t *tch = NULL;
    bedge *ed = NULL;
    int *indeg = ir_xcalloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < n; i++) {
        const ir_item *it = &d->seq[a + i];
        int need = it->comm ? 2 * d->comm[it->id].n : 2 * IR_MAXIO;
        if (need > ptcap) ptcap = need, pts = ir_xrealloc(pts, sizeof(int) * (size_t)ptcap);
        int np = item_pts(d, it, pts, ptcap);
        for (int k = 0; k < np; k++) *IR_PUSH(tch, nt, tcap) = (int64_t)pts[k] << 32 | i;
    }
    qsort(tch, (size_t)nt, sizeof *tch, ir_cmp_i64);
    for (int x = 1; x < nt; x++) {
        int p = (int)(tch[x - 1] & 0xffffffff), i = (int)(tch[x] & 0xffffffff);
        if (tch[x] >> 32 == tch[x - 1] >> 32 && p != i) *IR_PUSH(ed, ne, ecap) = (bedge){p, i}, indeg[i]++;
    }
    free(tch);
    int *e0 = ir_xcalloc((size_t)n + 2, sizeof(int)), *adj = ir_xmalloc(sizeof(int) * ((size_t)ne + 1));
    for (int e = 0; e < ne; e++) e0[ed[e].s + 1]++;
    for (int i = 0; i < n; i++) e0[i + 1] += e0[i];
    int *fill = ir_xcalloc((size_t)n + 1, sizeof(int));
    for (int e = 0; e < ne; e++) adj[e0[ed[e].s] + fill[ed[e].s]++] = ed[e].t;
    /* the list schedule: ready items in a heap by old position, and the ready comms of each class
       (group and kind) in a list in the order they became ready */
    bready r;
    r.heap = ir_xmalloc(sizeof(int) * ((size_t)n + 1)), r.nh = 0;
    r.gnext = ir_xmalloc(sizeof(int) * ((size_t)n + 1));
    r.ghead = ir_xmalloc(sizeof(int) * (3 * (size_t)d->ngrp + 1)), r.gtail = ir_xmalloc(sizeof(int) * (3 * (size_t)d->ngrp + 1));
    for (int q = 0; q < 3 * d->ngrp; q++) r.ghead[q] = r.gtail[q] = -1;
    char *taken = ir_xcalloc((size_t)n + 1, 1);
    ir_item *out = ir_xmalloc(sizeof(ir_item) * (size_t)n);
    for (int i = 0; i < n; i++)
        if (!indeg[i]) ready(d, &r, a, i);
    int no = 0, cur = -1;
    while (no < n) {
        int pick = -1;
        if (cur >= 0) {   /* the class taken last, where it has a ready comm */
            while (r.ghead[cur] >= 0 && taken[r.ghead[cur]]) r.ghead[cur] = r.gnext[r.ghead[cur]];
            if (r.ghead[cur] >= 0) pick = r.ghead[cur], r.ghead[cur] = r.gnext[pick];
        }
        if (pick < 0) {   /* else the first ready in the old order */
            while (r.nh && taken[r.heap[0]]) ir_heap_pop(r.heap, &r.nh);
            IR_ASSERT(r.nh);   /* (the edges go forward: no cycle) */
            pick = ir_heap_pop(r.heap, &r.nh);
        }
        taken[pick] = 1;
        out[no++] = d->seq[a + pick];
        cur = item_class(d, &d->seq[a + pick]);
        for (int e = e0[pick]; e < e0[pick + 1]; e++)
            if (!--indeg[adj[e]]) ready(d, &r, a, adj[e]);
    }
    memcpy(d->seq + a, out, sizeof(ir_item) * (size_t)n);
    free(pts), free(ed), free(indeg), free(e0), free(adj), free(fill);
    free(r.heap), free(r.gnext), free(r.ghead), free(r.gtail), free(taken), free(out);
}

/* Mark (v 1) or unmark (v 0) the pTensors comm c makes, every member's
 * (made NULL: nothing to mark). */
static void mark_made(const ir_dist *d, int c, char *made, char v)
{
    for (int k = 0; made && k < d->comm[c].n; k++) {
        int o = d->ints[d->comm[c].out + k];
        if (o >= 0) made[o] = v;
    }
}

/* Does comm c read a pTensor marked made (NULL: none marked)? */
static int reads_made(const ir_dist *d, int c, const char *made)
{
    for (int k = 0; made && k < d->comm[c].n; k++) {
        int i = d->ints[d->comm[c].in + k];
        if (i >= 0 && made[i]) return 1;
    }
    return 0;
}

void pass_bucket(ir_dist *d)
{
    for (int i = 0; i < d->ncomm; i++) d->comm[i].bucket = -1, d->comm[i].bnext = -1, d->comm[i].bbytes = 0;
    if (d->g->req.no_grad_buckets || d->ndev < 2) return;
    IR_ASSERT(d->rank_item0);   /* ir_dist_index_ranks */
    char *bad = ir_xcalloc((size_t)d->ncomm + 1, 1);
    int *cls = ir_xmalloc(sizeof(int) * ((size_t)d->ncomm + 1));   /* bclass, once a comm (O(members)) */
    for (int i = 0; i < d->ncomm; i++) {
        cls[i] = bclass(d, i);
        if (cls[i] < 0) bad[i] = 1;
    }
    /* per pTensor of one rank at a time (pt_local): used later on the rank; an all-reduce's result */
    int nloc = 1;
    for (int r = 0; r < d->ndev; r++)
        if (d->rank_pt0[r + 1] - d->rank_pt0[r] > nloc) nloc = d->rank_pt0[r + 1] - d->rank_pt0[r];
    char *later = ir_xmalloc((size_t)nloc), *arout = ir_xmalloc((size_t)nloc);
    const int *loc = d->pt_local;
    /* each rank's items in the micro-batches (mb_buckets) and after them: the last ones (seq keeps
       the sections in order) */
    int *post0 = ir_xmalloc(sizeof(int) * ((size_t)d->ndev + 1));
    for (int r = 0; r < d->ndev; r++) {
        int q = d->rank_item0[r + 1];
        while (q > d->rank_item0[r] && (d->seq[d->rank_item[q - 1]].sec == IR_SEC_POST ||
                                        (d->seq[d->rank_item[q - 1]].sec == IR_SEC_MB && mb_buckets(d))))
            q--;
        post0[r] = q;
    }
    /* in place on every member: each rank's items after the micro-batches from its last back */
    for (int r = 0; r < d->ndev; r++) {
        int nl = d->rank_pt0[r + 1] - d->rank_pt0[r];
        memset(later, 0, (size_t)nl);
        memset(arout, 0, (size_t)nl);
        for (int q = d->rank_item0[r]; q < d->rank_item0[r + 1]; q++) {   /* the rank's all-reduces' results */
            const ir_item *it = &d->seq[d->rank_item[q]];
            if (!it->comm || d->comm[it->id].kind != IR_COMM_ALLREDUCE) continue;
            int o = d->ints[d->comm[it->id].out + d->rank_member[q]];
            if (o >= 0) arout[loc[o]] = 1;
        }
        for (int q = d->rank_item0[r + 1] - 1; q >= post0[r]; q--) {
            const ir_item *it = &d->seq[d->rank_item[q]];
            if (it->comm) {
                const ir_comm *cm = &d->comm[it->id];
                int k = d->rank_member[q];
                int in = d->ints[cm->in + k], out = d->ints[cm->out + k];
                int ar = cm->kind == IR_COMM_ALLREDUCE;   /* (in place: an all-reduce's only) */
                if (!bad[it->id] &&
                    (in < 0 || out < 0 || in == out || (ar && (later[loc[in]] || arout[loc[in]]))))
                    bad[it->id] = 1;
                if (in >= 0) later[loc[in]] = 1;
                if (out >= 0) later[loc[out]] = 1;
            } else {
                const ir_subop *s = &d->sop[it->id];
                const ir_op *o = &d->g->op[s->op];
                for (int k = 0; k < o->nin; k++) later[loc[s->in[k]]] = 1;
                for (int k = 0; k < o->nout; k++) later[loc[s->out[k]]] = 1;
            }
        }
    }
    /* links: c -> the comm after it on every member */
    int *nx = ir_xmalloc(sizeof(int) * ((size_t)d->ncomm + 1));
    int *cnt = ir_xcalloc((size_t)d->ncomm + 1, sizeof(int));
    for (int i = 0; i < d->ncomm; i++) nx[i] = -1;
    for (int r = 0; r < d->ndev; r++)
        for (int q = post0[r]; q < d->rank_item0[r + 1]; q++) {
            const ir_item *it = &d->seq[d->rank_item[q]];
            if (!it->comm || bad[it->id]) continue;
            int next = -1;
            if (q + 1 < d->rank_item0[r + 1]) {
                const ir_item *nt = &d->seq[d->rank_item[q + 1]];
                if (nt->comm && !bad[nt->id] && cls[nt->id] == cls[it->id] && nt->sec == it->sec &&
                    d->comm[nt->id].prologue == d->comm[it->id].prologue)
                    next = nt->id;
            }
            if (cnt[it->id] == 0) nx[it->id] = next;
            else if (nx[it->id] != next) nx[it->id] = -1;
            cnt[it->id]++;
        }
    char *has_prev = ir_xcalloc((size_t)d->ncomm + 1, 1);
    for (int i = 0; i < d->ncomm; i++) {
        if (bad[i] || cnt[i] != d->comm[i].n || nx[i] < 0) nx[i] = -1;   /* (every member saw it) */
        else has_prev[nx[i]] = 1;
    }
    /* the chains, cut where a comm reads what one before it in the chain
       makes (its packing would run before the collective that makes it) */
    char *made = NULL;   /* per pTensor, made by the chain so far (allocated for a chain that packs) */
    for (int i = 0; i < d->ncomm; i++) {
        if (bad[i] || has_prev[i]) continue;
        /* (an all-reduce's chain needs no marks: no input of one is an all-reduce's result, above) */
        char *mk = d->comm[i].kind == IR_COMM_ALLREDUCE ? NULL : made;
        if (!mk && d->comm[i].kind != IR_COMM_ALLREDUCE) mk = made = ir_xcalloc((size_t)d->npt + 1, 1);
        for (int h = i; h >= 0;) {   /* a bucket from h */
            int last = h;
            int64_t packed = packed_bytes(d, h);
            mark_made(d, h, mk, 1);
            while (nx[last] >= 0 && !reads_made(d, nx[last], mk) && packed + packed_bytes(d, nx[last]) <= bucket_cap(d))
                last = nx[last], packed += packed_bytes(d, last), mark_made(d, last, mk, 1);
            int next = nx[last];
            for (int c = h; mk; c = nx[c]) {   /* (clear the marks) */
                mark_made(d, c, mk, 0);
                if (c == last) break;
            }
            if (last != h) {   /* two or more */
                int64_t by = 0;
                for (int c = h;; c = nx[c]) {
                    d->comm[c].bucket = h;
                    d->comm[c].bnext = c == last ? -1 : nx[c];
                    by += d->comm[c].bytes;
                    if (c == last) break;
                }
                d->comm[h].bbytes = by;
            }
            h = next;
        }
    }
    free(made);
    free(cls);
    free(post0);
    free(bad);
    free(later);
    free(arout);
    free(nx);
    free(cnt);
    free(has_prev);
}
