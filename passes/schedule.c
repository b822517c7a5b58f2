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
    char *opt_read = ir_xcalloc((size_t)g->nt + 1, 1);
    for (int i = 0; i < g->nop; i++)
        if (g->op[i].phase == IR_PH_OPT)
            for (int k = 0; k < g->op[i].nin; k++) opt_read[g->op[i].in[k]] = 1;
    for (int t = 0; t < g->nt; t++) {
        int p = g->t[t].producer;
        if (p < 0 || g->op[p].phase == IR_PH_OPT) continue;
        d->accum[t] = (char)(t == g->train.loss || opt_read[t]);
    }
    free(opt_read);
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
                int opsec = g->op[op].phase == IR_PH_OPT ? IR_SEC_POST : IR_SEC_MB;
                if (opsec != sec) continue;
                if (sec == IR_SEC_MB && (g->op[op].phase == IR_PH_BWD) != (pass == 2)) continue;
                if (sec == IR_SEC_MB && pass == 2 && d->seq_bwd < 0) d->seq_bwd = d->nseq;
                if (g->op[op].recomp) continue;   /* placed with its first reader */
                if (pass == 0) {
                    for (int i = d->op_sop[op]; i < d->op_sop[op + 1]; i++)
                        for (int k = 0; k < g->op[op].nin; k++) place_maker(&c, d->sop[i].in[k], sec);
                    continue;
                }
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
    if (d->ndev > 1) {
        int *all = ir_xmalloc(sizeof(int) * (size_t)d->ndev);
        for (int i = 0; i < d->ndev; i++) all[i] = i;
        d->world_group = ir_dist_group(d, all, d->ndev);
        free(all);
    }
    for (int i = 0; i < d->ncomm; i++)
        for (int k = 0; k < d->comm[i].n && !c.comm_done[i]; k++) place_maker(&c, d->ints[d->comm[i].out + k], IR_SEC_POST);
    ir_dist_index_ranks(d);
    /* the step's FLOPs over all ranks, once per build (every rank's manifest states it) */
    d->step_flops = 0;
    for (int n = 0; n < d->nseq; n++)
        if (!d->seq[n].comm) d->step_flops += pass_subop_flops(g, &d->sop[d->seq[n].id], d->seq[n].sec);
    free(order);
    free(placed);
    free(c.tcomm0);
    free(c.tcomm);
    free(c.comm_done);
    free(c.first);
    free(c.makers);
}
