/* schedule.c -- sections and op-order.
 *
 * Forward and backward sub-ops run once per micro-batch (section mb),
 * optimizer sub-ops once per step after all micro-batches (post).  A tensor
 * made in mb and read in post (a param's gradient), or the loss, is summed
 * over the micro-batches of a step: it is "accumulated" (zeroed in pre, its
 * producers add into it).  A comm runs in the section of its first
 * consumer, just before it; comms nobody reads in mb (the loss) run in post.
 *
 * The schedule is ONE global order of sub-ops and comms; each device runs
 * the items placed on it in that order, so the members of every group call
 * their collectives in the same order (no deadlock by construction).
 * Once complete, the order is indexed by rank (ir_dist_index_ranks): the
 * per-rank passes after it walk only their own rank's items.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct sctx {
    ir_dist *d;
    int *tcomm0, *tcomm;  /* per tensor + 1: CSR of its comms (ZeRO 2) */
    char *comm_done;  /* per comm: already placed */
    int *first;       /* per pTensor + 1: CSR start of the comms that write it */
    int *makers;      /* comm ids, in creation order */
} sctx;

static void place(ir_dist *d, int sec, int comm, int id)
{
    ir_item *it = IR_PUSH(d->seq, d->nseq, d->seqcap);
    it->sec = sec;
    it->comm = comm;
    it->id = id;
}

/* Place the comms writing pTensor pt, in creation order (and, first, the
 * comms making their inputs). */
static void place_maker(sctx *c, int pt, int sec)
{
    if (pt < 0) return;
    for (int m = c->first[pt]; m < c->first[pt + 1]; m++) {
        int ci = c->makers[m];
        if (c->comm_done[ci]) continue;
        c->comm_done[ci] = 1;
        const ir_comm *cm = &c->d->comm[ci];
        for (int k = 0; k < cm->n; k++) place_maker(c, c->d->ints[cm->in + k], sec);
        c->d->comm[ci].sec = sec;
        place(c->d, sec, 1, ci);
    }
}

/* Place op's sub-ops in section sec, each after the comms making its inputs. */
static void place_op(sctx *c, int op, int sec)
{
    ir_dist *d = c->d;
    for (int i = d->op_sop[op]; i < d->op_sop[op + 1]; i++) {
        ir_subop *s = &d->sop[i];
        for (int k = 0; k < d->g->op[op].nin; k++) place_maker(c, s->in[k], sec);
        s->sec = sec;
        s->order = d->nseq;
        place(d, sec, 0, i);
    }
}

/* ZeRO 2: the reduce-scatters of op's outputs that are reduced in every
 * micro-batch, right after op (their shards accumulate over the step). */
static void place_zero2(sctx *c, int op)
{
    ir_dist *d = c->d;
    const ir_op *o = &d->g->op[op];
    for (int k = 0; k < o->nout && c->tcomm0; k++) {
        int t = o->out[k];
        if (!d->zgrad[t]) continue;
        for (int q = c->tcomm0[t]; q < c->tcomm0[t + 1]; q++) {
            int ci = c->tcomm[q];
            if (c->comm_done[ci] || d->comm[ci].kind != IR_COMM_REDUCESCATTER) continue;
            c->comm_done[ci] = 1;
            d->comm[ci].acc = 1;
            d->comm[ci].sec = IR_SEC_MB;
            place(d, IR_SEC_MB, 1, ci);
        }
    }
}

/* Place the recomputation copies op's inputs need that are not placed yet
 * (and, first, the copies they read): a copy runs just before the first
 * backward op that reads it (recompute.c). */
static void place_copies(sctx *c, int op, char *placed)
{
    const ir_graph *g = c->d->g;
    for (int k = 0; k < g->op[op].nin; k++) {
        int p = g->t[g->op[op].in[k]].producer;
        if (p < 0 || !g->op[p].recomp || placed[p]) continue;
        placed[p] = 1;
        place_copies(c, p, placed);
        place_op(c, p, IR_SEC_MB);
    }
}

/* ---- co-shard: piece-major op-order
 *
 * A co-sharded op's pieces (ir_trans.cosk) are placed op by op like any
 * sub-ops: every piece of the first op, then every piece of the next, so
 * the pieces' intermediates all live at once.  This pass redoes the order
 * of the forward and of the backward (each a segment of the micro-batch
 * section) so that a piece goes through the whole chain of co-sharded ops
 * (a recomputed forward, then its backward) before the next piece starts:
 *
 * - a chain is a set of pieces joined by what one reads of another
 *   (directly, or through one comm: a slice, a local copy);
 * - the items are requested in their order, a chain at its first item,
 *   its pieces then by piece (0 first), each piece's items in order;
 * - an item is placed when requested, after the items it depends on
 *   (through pTensors: read after write, write after read or write), which
 *   are placed first, in their order.
 *
 * Whole ops a piece needs are so pulled in just before it; the comms that
 * slice a piece's input out of a whole tensor run just before the piece.
 * Comms between devices keep their order (a pipeline's transfers and the
 * deadlock check see what they saw before).
 * Without chains this is the identity.  The result is still one global
 * order, so every group still meets its collectives in one order. */

/* The pTensors item it reads (r) and writes (w); returns counts in *nr, *nw. */
static void item_pts(const ir_dist *d, const ir_item *it, int *r, int *nr, int *w, int *nw)
{
    *nr = *nw = 0;
    if (!it->comm) {
        const ir_subop *so = &d->sop[it->id];
        const ir_op *o = &d->g->op[so->op];
        for (int k = 0; k < o->nin; k++) r[(*nr)++] = so->in[k];
        for (int k = 0; k < o->nout; k++) w[(*nw)++] = so->out[k];
        return;
    }
    const ir_comm *cm = &d->comm[it->id];
    for (int k = 0; k < cm->n; k++) {
        int a = cm->in >= 0 ? d->ints[cm->in + k] : -1, b = cm->out >= 0 ? d->ints[cm->out + k] : -1;
        if (a >= 0) r[(*nr)++] = a;
        if (b >= 0) w[(*nw)++] = b;
    }
}

/* The piece of a sub-op item, -1 when it is whole (or a comm). */
static int item_piece(const ir_dist *d, const ir_item *it)
{
    if (it->comm) return -1;
    const ir_subop *so = &d->sop[it->id];
    int k = d->trans[so->op].cosk;
    return k > 1 ? so->sub % k : -1;   /* (the co-shard split is the last: least significant) */
}

typedef struct pm_edge {
    int i, j;   /* item j (later) depends on item i */
    int raw;    /* j reads what i writes */
} pm_edge;

typedef struct pm_reader {
    int item, next;   /* a reader of a pTensor since its last write; next reader or -1 */
} pm_reader;

static void pm_dep(pm_edge **e, int *ne, int *cap, int i, int j, int raw)
{
    pm_edge *x = IR_PUSH(*e, *ne, *cap);
    x->i = i, x->j = j, x->raw = raw;
}

static int pm_find(int *uf, int x)
{
    while (uf[x] != x) x = uf[x] = uf[uf[x]];
    return x;
}

static void pm_union(int *uf, int a, int b)
{
    a = pm_find(uf, a), b = pm_find(uf, b);
    if (a != b) uf[a > b ? a : b] = a < b ? a : b;   /* the root: the chain's first item */
}

static int pm_cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

static const int *pm_piece;   /* (qsort's context) */
static int pm_cmp(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    if (pm_piece[a] != pm_piece[b]) return pm_piece[a] < pm_piece[b] ? -1 : 1;
    return (a > b) - (a < b);
}

void pass_seq_put(ir_dist *d, int a, const ir_item *out, int n)
{
    for (int k = 0; k < n; k++) {
        d->seq[a + k] = out[k];
        if (!out[k].comm) d->sop[out[k].id].order = a + k;
    }
}

/* Reorder items [a, b) of d->seq. */
static void piece_segment(ir_dist *d, int a, int b)
{
    int n = b - a, maxio = IR_MAXIO;
    if (n < 2) return;
    for (int i = a; i < b; i++)
        if (d->seq[i].comm && d->comm[d->seq[i].id].n > maxio) maxio = d->comm[d->seq[i].id].n;
    int *r = ir_xmalloc(sizeof(int) * (size_t)maxio), *w = ir_xmalloc(sizeof(int) * (size_t)maxio);
    /* the edges, found per pTensor: its last writer, and its readers since */
    int *lastw = ir_xmalloc(sizeof(int) * (size_t)d->npt), *rhead = ir_xmalloc(sizeof(int) * (size_t)d->npt);
    pm_reader *rd = NULL;
    pm_edge *e = NULL;
    int nrd = 0, rcap = 0, ne = 0, ecap = 0;
    for (int i = 0; i < n; i++) {
        int nr, nw;
        item_pts(d, &d->seq[a + i], r, &nr, w, &nw);
        for (int q = 0; q < nr; q++) lastw[r[q]] = -1, rhead[r[q]] = -1;
        for (int q = 0; q < nw; q++) lastw[w[q]] = -1, rhead[w[q]] = -1;
    }
    int lastx = -1;   /* the last comm between devices: those keep their order */
    for (int j = 0; j < n; j++) {
        int nr, nw;
        const ir_item *it = &d->seq[a + j];
        if (it->comm && d->comm[it->id].n > 1) {
            if (lastx >= 0) pm_dep(&e, &ne, &ecap, lastx, j, 0);
            lastx = j;
        }
        item_pts(d, it, r, &nr, w, &nw);
        for (int q = 0; q < nr; q++)
            if (lastw[r[q]] >= 0) pm_dep(&e, &ne, &ecap, lastw[r[q]], j, 1);
        for (int q = 0; q < nw; q++) {
            int p = w[q];
            if (lastw[p] >= 0) pm_dep(&e, &ne, &ecap, lastw[p], j, 0);
            for (int x = rhead[p]; x >= 0; x = rd[x].next)
                if (rd[x].item != j) pm_dep(&e, &ne, &ecap, rd[x].item, j, 0);
        }
        for (int q = 0; q < nw; q++) lastw[w[q]] = j, rhead[w[q]] = -1;
        for (int q = 0; q < nr; q++) {
            pm_reader *x = IR_PUSH(rd, nrd, rcap);
            x->item = j;
            x->next = rhead[r[q]];
            rhead[r[q]] = nrd - 1;
        }
    }
    /* each item's predecessors (CSR, ascending after the sort below) */
    int *p0 = ir_xcalloc((size_t)n + 2, sizeof(int)), *pred = ir_xmalloc(sizeof(int) * ((size_t)ne + 1));
    int *fill = ir_xcalloc((size_t)n + 1, sizeof(int));
    for (int x = 0; x < ne; x++) p0[e[x].j + 1]++;
    for (int i = 0; i < n; i++) p0[i + 1] += p0[i];
    for (int x = 0; x < ne; x++) pred[p0[e[x].j] + fill[e[x].j]++] = e[x].i;
    for (int i = 0; i < n; i++) qsort(pred + p0[i], (size_t)(p0[i + 1] - p0[i]), sizeof(int), pm_cmp_int);
    /* chains: pieces joined by a read, direct or through one comm */
    int *piece = ir_xmalloc(sizeof(int) * (size_t)n), *uf = ir_xmalloc(sizeof(int) * (size_t)n);
    int *via = ir_xmalloc(sizeof(int) * (size_t)n);   /* per comm: a piece it reads, or -1 */
    for (int i = 0; i < n; i++) piece[i] = item_piece(d, &d->seq[a + i]), uf[i] = i, via[i] = -1;
    for (int x = 0; x < ne; x++) {   /* (edges come in order of j: a comm's preds before its readers) */
        int i = e[x].i, j = e[x].j;
        if (!e[x].raw) continue;
        int src = piece[i] >= 0 ? i : d->seq[a + i].comm ? via[i] : -1;
        if (src < 0) continue;
        if (piece[j] >= 0) pm_union(uf, src, j);
        else if (d->seq[a + j].comm && piece[i] >= 0) {
            if (via[j] >= 0) pm_union(uf, via[j], i);
            else via[j] = i;
        }
    }
    /* the requests: items in order, a chain's pieces at its first item */
    int *req = ir_xmalloc(sizeof(int) * (size_t)n), nreq = 0;
    int *mem0 = ir_xcalloc((size_t)n + 2, sizeof(int)), *mem = ir_xmalloc(sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++)
        if (piece[i] >= 0) mem0[pm_find(uf, i) + 1]++;
    for (int i = 0; i < n; i++) mem0[i + 1] += mem0[i];
    memset(fill, 0, sizeof(int) * (size_t)n);
    for (int i = 0; i < n; i++)
        if (piece[i] >= 0) {
            int c = pm_find(uf, i);
            mem[mem0[c] + fill[c]++] = i;
        }
    pm_piece = piece;
    for (int i = 0; i < n; i++) {
        if (piece[i] < 0) {
            req[nreq++] = i;
            continue;
        }
        if (pm_find(uf, i) != i) continue;
        qsort(mem + mem0[i], (size_t)(mem0[i + 1] - mem0[i]), sizeof(int), pm_cmp);
        for (int k = mem0[i]; k < mem0[i + 1]; k++) req[nreq++] = mem[k];
    }
    /* place each request after what it depends on (depth first, in order) */
    ir_item *out = ir_xmalloc(sizeof(ir_item) * (size_t)n);
    char *done = ir_xcalloc((size_t)n + 1, 1);
    int *stack = ir_xmalloc(sizeof(int) * (size_t)n), *cur = ir_xmalloc(sizeof(int) * (size_t)n), m = 0;
    for (int i = 0; i < n; i++) cur[i] = p0[i];
    for (int q = 0; q < nreq; q++) {
        if (done[req[q]]) continue;
        int sp = 0;
        stack[sp++] = req[q];
        while (sp) {
            int t = stack[sp - 1];
            while (cur[t] < p0[t + 1] && done[pred[cur[t]]]) cur[t]++;
            if (cur[t] < p0[t + 1]) {
                stack[sp++] = pred[cur[t]];   /* (a pred comes before t: no cycle, depth < n) */
                continue;
            }
            sp--;
            if (!done[t]) done[t] = 1, out[m++] = d->seq[a + t];
        }
    }
    IR_ASSERT(m == n);
    pass_seq_put(d, a, out, n);
    free(stack);
    free(cur);
    free(out);
    free(done);
    free(req);
    free(mem0);
    free(mem);
    free(piece);
    free(uf);
    free(via);
    free(p0);
    free(pred);
    free(fill);
    free(e);
    free(rd);
    free(lastw);
    free(rhead);
    free(r);
    free(w);
}

/* Piece-major order within the micro-batch section's forward [0, seq_bwd)
 * and backward [seq_bwd, end). */
static void piece_major(ir_dist *d)
{
    int any = 0;
    for (int i = 0; i < d->g->nop; i++) any |= d->trans[i].cosk > 1;
    if (!any) return;
    int end = 0;
    while (end < d->nseq && d->seq[end].sec == IR_SEC_MB) end++;
    piece_segment(d, 0, d->seq_bwd < end ? d->seq_bwd : end);
    if (d->seq_bwd < end) piece_segment(d, d->seq_bwd, end);
}

/* Does op sum a param's gradient contributions made on different pipeline
 * stages (a tied embedding's: the embedding's on the first, the head's on
 * the last)?  Such a sum runs once per step, after the micro-batches
 * (post): each stage accumulates its own contribution over them, and the
 * transfer between the stages is made once, not per micro-batch. */
static int post_sum(const ir_dist *d, int op)
{
    const ir_graph *g = d->g;
    const ir_op *o = &g->op[op];
    if (d->mesh_pp <= 1 || !d->op_stage || o->phase != IR_PH_BWD || o->kind != IR_OP_ADD || o->nout != 1)
        return 0;
    const ir_tensor *t = &g->t[o->out[0]];
    if (t->kind != IR_T_GRAD || t->grad_of < 0 || g->t[t->grad_of].kind != IR_T_PARAM) return 0;
    int s0 = -1;
    for (int k = 0; k < o->nin; k++) {
        int p = g->t[o->in[k]].producer;
        if (p < 0 || g->op[p].phase != IR_PH_BWD || post_sum(d, p)) return 0;
        if (k == 0) s0 = d->op_stage[p];
        else if (d->op_stage[p] != s0) return 1;
    }
    return 0;
}

void pass_schedule(ir_dist *d)
{
    const ir_graph *g = d->g;
    IR_ASSERT(d->op_sop && d->op_sop[g->nop] == d->nsop);   /* pass_split's index: each op's sub-ops */
    sctx c = {d, NULL, NULL, ir_xcalloc((size_t)d->ncomm + 1, 1), ir_xcalloc((size_t)d->npt + 2, sizeof(int)), NULL};
    int nw = 0;
    for (int i = 0; i < d->ncomm; i++)
        for (int k = 0; k < d->comm[i].n; k++)
            if (d->ints[d->comm[i].out + k] >= 0) c.first[d->ints[d->comm[i].out + k] + 1]++, nw++;
    for (int i = 0; i < d->npt; i++) c.first[i + 1] += c.first[i];
    c.makers = ir_xmalloc(sizeof(int) * ((size_t)nw + 1));
    int *fill = ir_xcalloc((size_t)d->npt + 1, sizeof(int));
    for (int i = 0; i < d->ncomm; i++)
        for (int k = 0; k < d->comm[i].n; k++) {
            int o = d->ints[d->comm[i].out + k];
            if (o >= 0) c.makers[c.first[o] + fill[o]++] = i;   /* members write distinct pTensors */
        }
    free(fill);
    /* accumulated tensors: made per micro-batch, read per step (by the
       optimizer, or the loss) */
    char *opt_read = ir_xcalloc((size_t)g->nt + 1, 1), *post = ir_xcalloc((size_t)g->nop + 1, 1);
    for (int i = 0; i < g->nop; i++) post[i] = g->op[i].phase == IR_PH_OPT || post_sum(d, i);
    for (int i = 0; i < g->nop; i++)
        if (post[i])
            for (int k = 0; k < g->op[i].nin; k++) opt_read[g->op[i].in[k]] = 1;
    for (int t = 0; t < g->nt; t++) {
        int p = g->t[t].producer;
        if (p < 0 || post[p]) continue;
        d->accum[t] = (char)(t == g->train.loss || opt_read[t]);
    }
    free(opt_read);
    /* ZeRO 2 reduce-scatters a gradient in each micro-batch only where every
       comm of it is a reduce-scatter: a sequence-parallel param's gradient,
       partial over dp x tp and summed by sends (comm.c), accumulates over the
       micro-batches (pass_pt_accum) and is summed once a step, as under ZeRO 1 */
    for (int i = 0; i < d->ncomm && g->req.zero == 2; i++)
        if (d->comm[i].kind != IR_COMM_REDUCESCATTER) d->zgrad[d->comm[i].tensor] = 0;
    /* each tensor's comms (ZeRO 2 places some by tensor) */
    if (g->req.zero == 2) {
        c.tcomm0 = ir_xcalloc((size_t)g->nt + 2, sizeof(int));
        for (int i = 0; i < d->ncomm; i++) c.tcomm0[d->comm[i].tensor + 1]++;
        for (int t = 0; t < g->nt; t++) c.tcomm0[t + 1] += c.tcomm0[t];
        c.tcomm = ir_xmalloc(sizeof(int) * ((size_t)d->ncomm + 1));
        int *f2 = ir_xcalloc((size_t)g->nt + 1, sizeof(int));
        for (int i = 0; i < d->ncomm; i++) c.tcomm[c.tcomm0[d->comm[i].tensor] + f2[d->comm[i].tensor]++] = i;
        free(f2);
    }
    /* ZeRO 1, 2: a param stored as dp shards is gathered once a step, after the
       updates (and once after its initialisation), not before each use */
    int zero12 = g->req.zero == 1 || g->req.zero == 2;
    for (int i = 0; i < d->ncomm && zero12; i++)
        if (g->t[d->comm[i].tensor].kind == IR_T_PARAM) c.comm_done[i] = 1;
    int *order = ir_xmalloc(sizeof(int) * ((size_t)g->nop + 1));
    char *placed = ir_xcalloc((size_t)g->nop + 1, 1);   /* recomputation copies placed */
    int cyc;
    IR_ASSERT(!ir_topo(g, order, &cyc));
    /* mb: forward and backward in topological order */
    for (int sec = IR_SEC_MB; sec <= IR_SEC_POST; sec += IR_SEC_POST - IR_SEC_MB) {
        if (sec == IR_SEC_POST) {
            /* the loss: reduced once per step, before the updates */
            for (int i = 0; i < d->ncomm; i++)
                if (!c.comm_done[i] && d->comm[i].tensor == g->train.loss)
                    for (int k = 0; k < d->comm[i].n; k++) place_maker(&c, d->ints[d->comm[i].out + k], sec);
        }
        /* post: every comm the updates read first (the gradient norm needs
           all gradients), then the updates */
        /* mb: every forward op before every backward op (a rank's forward
           items form its forward task, the rest its backward task: the
           pipeline schedules order the two per micro-batch, pipeline.c) */
        for (int pass = sec == IR_SEC_POST ? 0 : 1; pass < (sec == IR_SEC_MB ? 3 : 2); pass++)
            for (int n = 0; n < g->nop; n++) {
                int op = order[n];
                int opsec = post[op] ? IR_SEC_POST : IR_SEC_MB;
                if (opsec != sec) continue;
                if (sec == IR_SEC_MB && (g->op[op].phase == IR_PH_BWD) != (pass == 2)) continue;
                if (sec == IR_SEC_MB && pass == 2 && d->seq_bwd < 0) d->seq_bwd = d->nseq;
                if (g->op[op].recomp) continue;   /* placed with its first reader */
                if (pass == 0 && g->op[op].phase != IR_PH_OPT) {   /* a post sum: whole, before the comms the
                                                                      updates read (some read what it makes) */
                    place_op(&c, op, sec);
                    continue;
                }
                if (pass == 0) {
                    for (int i = d->op_sop[op]; i < d->op_sop[op + 1]; i++)
                        for (int k = 0; k < g->op[op].nin; k++) place_maker(&c, d->sop[i].in[k], sec);
                    continue;
                }
                if (sec == IR_SEC_POST && g->op[op].phase != IR_PH_OPT) continue;   /* (placed in pass 0) */
                if (sec == IR_SEC_MB && pass == 2) place_copies(&c, op, placed);
                place_op(&c, op, sec);
                if (sec == IR_SEC_MB && pass == 2) place_zero2(&c, op);
            }
    }
    for (int i = 0; i < g->nop; i++) IR_ASSERT(!g->op[i].recomp || placed[i]);   /* every copy is read */
    for (int i = 0; i < d->ncomm && zero12; i++)
        if (g->t[d->comm[i].tensor].kind == IR_T_PARAM) {
            d->comm[i].sec = IR_SEC_POST;
            d->comm[i].prologue = 1;
            place(d, IR_SEC_POST, 1, i);
        }
    if (d->seq_bwd < 0) d->seq_bwd = d->nseq;
    piece_major(d);
    if (d->ndev > 1) {
        int *all = ir_xmalloc(sizeof(int) * (size_t)d->ndev);
        for (int i = 0; i < d->ndev; i++) all[i] = i;
        d->world_group = ir_dist_group(d, all, d->ndev);
        free(all);
    }
    for (int i = 0; i < d->ncomm; i++)
        for (int k = 0; k < d->comm[i].n && !c.comm_done[i]; k++) place_maker(&c, d->ints[d->comm[i].out + k], IR_SEC_POST);
    pass_bucket_order(d);
    ir_dist_index_ranks(d);
    pass_bucket(d);
    pass_precision(d);   /* which tensors are stored in bf16 (it reads the comms and accum) */
    /* (the items' times, priced as the cost model asks: nothing they depend on changes from here) */
    free(d->itime);
    free(d->iflops);
    d->itime = ir_xmalloc(sizeof(double) * ((size_t)d->nseq + 1));
    d->iflops = ir_xcalloc((size_t)d->nseq + 1, sizeof(double));
    for (int n = 0; n < d->nseq; n++) d->itime[n] = -1;
    /* the step's FLOPs over all ranks, once per build (every rank's manifest states it) */
    d->step_flops = 0;
    for (int n = 0; n < d->nseq; n++)
        if (!d->seq[n].comm)
            d->step_flops += d->iflops[n] = pass_subop_flops(g, &d->sop[d->seq[n].id], d->seq[n].sec);
    free(order);
    free(placed);
    free(post);
    free(c.tcomm0);
    free(c.tcomm);
    free(c.comm_done);
    free(c.first);
    free(c.makers);
}
