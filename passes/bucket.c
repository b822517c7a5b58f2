/* bucket.c -- gradient buckets: the all-reduces after the micro-batches
 * that follow one another on every member of one group run as one
 * collective over one contiguous buffer.
 *
 * After the micro-batch loop every rank all-reduces its accumulated
 * gradients (schedule.c places every comm the updates read before the
 * updates), one collective per param: a layernorm's weight or a bias costs
 * the collective's latency, 2(n-1) steps of a ring, for a few hundred
 * bytes.  Under sequence parallelism every layernorm and row-parallel bias
 * of the blocks adds one such all-reduce over tp.  A bucket is a run of
 * those all-reduces that
 *   - are in the post section, of the same group, each in place: its input
 *     is neither read nor written on that rank after it (memplan.c then
 *     gives the result the input's buffer) and no all-reduce made its input
 *     (its buffer is its own, not an alias), of 4-byte elements;
 *   - follow one another on every member: on each member rank the next item
 *     after one is the next one, with nothing between.
 * memplan.c lays the buffers of a bucket out one after another (in the
 * bucket's order, each aligned as every buffer is), so the first comm's
 * lowering reduces the whole range, the 64-byte alignment gaps between the
 * buffers included (they hold zeros: the arena starts zeroed and nothing
 * else writes them), and the others lower to nothing.  No copies, no extra
 * memory; the same sums as one by one, element by element (the CPU
 * collectives add the members' values in member order, whatever the
 * buffer's length; NCCL may pick another algorithm for the larger buffer,
 * within floating-point tolerance).
 *
 * pass_bucket_order (below) first reorders the items before the updates
 * so that each group's all-reduces follow one another.
 *
 * Every member decides alike: the conditions are checked on every member
 * and a comm joins a bucket only where all of them allow it, so every
 * member runs the same collectives.  [plan] grad_buckets = false keeps one
 * collective per comm.
 *
 * The cost model prices a bucket as one collective of its bytes
 * (ir_comm.bbytes, on the first comm; the others cost nothing).
 *
 * Cost: linear in the ranks' items; the reorder, n log n in the items
 * before the updates. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* May comm c join a bucket, as far as c alone goes? */
static int candidate(const ir_dist *d, int c)
{
    const ir_comm *cm = &d->comm[c];
    return cm->kind == IR_COMM_ALLREDUCE && cm->sec == IR_SEC_POST && !cm->prologue && cm->n > 1 &&
           pass_elsize(&d->g->t[cm->tensor]) == 4;
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
 * placed, one of the group it took last where there is one, else the first
 * in the old order.  One global order still, so every group meets its
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

/* Min-heap of ints. */
static void heap_push(int *h, int *n, int v)
{
    int i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) h[i] = h[(i - 1) / 2], i = (i - 1) / 2;
    h[i] = v;
}

static int heap_pop(int *h, int *n)
{
    int top = h[0], v = h[--*n], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c], i = c;
    }
    if (*n) h[i] = v;
    return top;
}

typedef struct bedge {
    int s, t;   /* item s before item t (positions in the region) */
} bedge;

/* The list schedule's ready items. */
typedef struct bready {
    int *heap, nh;        /* by old position */
    int *gnext;           /* per item: the next ready all-reduce of its group, -1: none */
    int *ghead, *gtail;   /* per group: its list of ready all-reduces */
} bready;

/* Item it's group if it is an all-reduce, else -1. */
static int ar_group(const ir_dist *d, const ir_item *it)
{
    return it->comm && d->comm[it->id].kind == IR_COMM_ALLREDUCE ? d->comm[it->id].group : -1;
}

/* Item i of the region from a is ready. */
static void ready(const ir_dist *d, bready *r, int a, int i)
{
    heap_push(r->heap, &r->nh, i);
    int g = ar_group(d, &d->seq[a + i]);
    if (g < 0) return;
    r->gnext[i] = -1;
    if (r->ghead[g] < 0) r->ghead[g] = i;
    else r->gnext[r->gtail[g]] = i;
    r->gtail[g] = i;
}

void pass_bucket_order(ir_dist *d)
{
    if (d->g->req.no_grad_buckets || d->ndev < 2) return;
    int a = 0;
    while (a < d->nseq && d->seq[a].sec != IR_SEC_POST) a++;
    int b = a;
    while (b < d->nseq && d->seq[b].sec == IR_SEC_POST &&
           (d->seq[b].comm || d->g->op[d->sop[d->seq[b].id].op].phase != IR_PH_OPT))
        b++;
    int n = b - a;
    if (n < 3) return;
    /* edges: each item to the next item touching one of its pTensors (CSR by source) */
    int *last = ir_xmalloc(sizeof(int) * ((size_t)d->npt + 1));
    for (int i = 0; i < d->npt; i++) last[i] = -1;
    int *pts = NULL, ptcap = 0, ne = 0, ecap = 0;
    bedge *ed = NULL;
    int *indeg = ir_xcalloc((size_t)n + 1, sizeof(int));
    for (int i = 0; i < n; i++) {
        const ir_item *it = &d->seq[a + i];
        int need = it->comm ? 2 * d->comm[it->id].n : 2 * IR_MAXIO;
        if (need > ptcap) ptcap = need, pts = ir_xrealloc(pts, sizeof(int) * (size_t)ptcap);
        int np = item_pts(d, it, pts, ptcap);
        for (int k = 0; k < np; k++) {
            int p = last[pts[k]];
            if (p >= 0 && p != i) *IR_PUSH(ed, ne, ecap) = (bedge){p, i}, indeg[i]++;
            last[pts[k]] = i;
        }
    }
    int *e0 = ir_xcalloc((size_t)n + 2, sizeof(int)), *adj = ir_xmalloc(sizeof(int) * ((size_t)ne + 1));
    for (int e = 0; e < ne; e++) e0[ed[e].s + 1]++;
    for (int i = 0; i < n; i++) e0[i + 1] += e0[i];
    int *fill = ir_xcalloc((size_t)n + 1, sizeof(int));
    for (int e = 0; e < ne; e++) adj[e0[ed[e].s] + fill[ed[e].s]++] = ed[e].t;
    /* the list schedule: ready items in a heap by old position, and the ready all-reduces of each group
       in a list in the order they became ready */
    bready r;
    r.heap = ir_xmalloc(sizeof(int) * ((size_t)n + 1)), r.nh = 0;
    r.gnext = ir_xmalloc(sizeof(int) * ((size_t)n + 1));
    r.ghead = ir_xmalloc(sizeof(int) * ((size_t)d->ngrp + 1)), r.gtail = ir_xmalloc(sizeof(int) * ((size_t)d->ngrp + 1));
    for (int q = 0; q < d->ngrp; q++) r.ghead[q] = r.gtail[q] = -1;
    char *taken = ir_xcalloc((size_t)n + 1, 1);
    ir_item *out = ir_xmalloc(sizeof(ir_item) * (size_t)n);
    for (int i = 0; i < n; i++)
        if (!indeg[i]) ready(d, &r, a, i);
    int no = 0, cur = -1;
    while (no < n) {
        int pick = -1;
        if (cur >= 0) {   /* the group taken last, where it has a ready all-reduce */
            while (r.ghead[cur] >= 0 && taken[r.ghead[cur]]) r.ghead[cur] = r.gnext[r.ghead[cur]];
            if (r.ghead[cur] >= 0) pick = r.ghead[cur], r.ghead[cur] = r.gnext[pick];
        }
        if (pick < 0) {   /* else the first ready in the old order */
            while (r.nh && taken[r.heap[0]]) heap_pop(r.heap, &r.nh);
            IR_ASSERT(r.nh);   /* (the edges go forward: no cycle) */
            pick = heap_pop(r.heap, &r.nh);
        }
        taken[pick] = 1;
        out[no++] = d->seq[a + pick];
        cur = ar_group(d, &d->seq[a + pick]);
        for (int e = e0[pick]; e < e0[pick + 1]; e++)
            if (!--indeg[adj[e]]) ready(d, &r, a, adj[e]);
    }
    memcpy(d->seq + a, out, sizeof(ir_item) * (size_t)n);
    free(last), free(pts), free(ed), free(indeg), free(e0), free(adj), free(fill);
    free(r.heap), free(r.gnext), free(r.ghead), free(r.gtail), free(taken), free(out);
}

void pass_bucket(ir_dist *d)
{
    for (int i = 0; i < d->ncomm; i++) d->comm[i].bucket = -1, d->comm[i].bnext = -1, d->comm[i].bbytes = 0;
    if (d->g->req.no_grad_buckets || d->ndev < 2) return;
    IR_ASSERT(d->rank_item0);   /* ir_dist_index_ranks */
    char *bad = ir_xcalloc((size_t)d->ncomm + 1, 1);
    char *later = ir_xcalloc((size_t)d->npt + 1, 1);   /* per pTensor: used later on its rank */
    char *arout = ir_xcalloc((size_t)d->npt + 1, 1);   /* per pTensor: an all-reduce's result */
    for (int i = 0; i < d->ncomm; i++) {
        if (!candidate(d, i)) bad[i] = 1;
        if (d->comm[i].kind == IR_COMM_ALLREDUCE)
            for (int k = 0; k < d->comm[i].n; k++) {
                int o = d->ints[d->comm[i].out + k];
                if (o >= 0) arout[o] = 1;
            }
    }
    /* in place on every member: each rank's items from its last back
       (a pTensor lives on one rank, so one array serves every rank) */
    for (int r = 0; r < d->ndev; r++)
        for (int q = d->rank_item0[r + 1] - 1; q >= d->rank_item0[r]; q--) {
            const ir_item *it = &d->seq[d->rank_item[q]];
            if (it->comm) {
                const ir_comm *cm = &d->comm[it->id];
                int k = d->rank_member[q];
                int in = d->ints[cm->in + k], out = d->ints[cm->out + k];
                if (!bad[it->id] && (in < 0 || out < 0 || in == out || later[in] || arout[in])) bad[it->id] = 1;
                if (in >= 0) later[in] = 1;
                if (out >= 0) later[out] = 1;
            } else {
                const ir_subop *s = &d->sop[it->id];
                const ir_op *o = &d->g->op[s->op];
                for (int k = 0; k < o->nin; k++) later[s->in[k]] = 1;
                for (int k = 0; k < o->nout; k++) later[s->out[k]] = 1;
            }
        }
    /* links: c -> the comm after it on every member */
    int *nx = ir_xmalloc(sizeof(int) * ((size_t)d->ncomm + 1));
    int *cnt = ir_xcalloc((size_t)d->ncomm + 1, sizeof(int));
    for (int i = 0; i < d->ncomm; i++) nx[i] = -1;
    for (int r = 0; r < d->ndev; r++)
        for (int q = d->rank_item0[r]; q < d->rank_item0[r + 1]; q++) {
            const ir_item *it = &d->seq[d->rank_item[q]];
            if (!it->comm || bad[it->id]) continue;
            int next = -1;
            if (q + 1 < d->rank_item0[r + 1]) {
                const ir_item *nt = &d->seq[d->rank_item[q + 1]];
                if (nt->comm && !bad[nt->id] && d->comm[nt->id].group == d->comm[it->id].group) next = nt->id;
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
    for (int i = 0; i < d->ncomm; i++) {
        if (bad[i] || has_prev[i] || nx[i] < 0) continue;   /* a bucket's first, of two or more */
        int64_t by = 0;
        for (int c = i; c >= 0; c = nx[c]) {
            d->comm[c].bucket = i;
            d->comm[c].bnext = nx[c];
            by += d->comm[c].bytes;
        }
        d->comm[i].bbytes = by;
    }
    free(bad);
    free(later);
    free(arout);
    free(nx);
    free(cnt);
    free(has_prev);
}
