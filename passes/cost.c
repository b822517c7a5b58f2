/* cost.c -- the cost model: a plan's estimated step time on a profile
 * (g->prof, [cluster] device; ir/profile.c).
 *
 * A sub-op takes the longer of its FLOPs at the device's rate and its
 * operands' bytes at the memory bandwidth (a roofline).  The rate is the
 * f32 peak, or under dtype = bf16 for matmuls and attention the tensor
 * cores': mm_eff of the bf16 peak (what large GEMMs reach, where the
 * profile says), times a matmul's wave efficiency on the profile's sms
 * (pass_cost_wave_eff).  In the micro-batches it also takes its operands
 * without a batch dim (weights, weight gradients) at the profile's
 * weight_bw, where set: a CPU matmul packs its weight panel on every call
 * and a weight gradient is read and written by every micro-batch, whatever
 * the micro-batch's size, so K micro-batches cost more than one of K times
 * the rows.  Under tp each rank goes over its shard only.  A collective takes alpha-beta time for its
 * algorithm: its steps times the latency plus the bytes its busiest member
 * sends (ir_comm.bytes, which the comm pass counts per algorithm: 2(n-1)/n
 * S for a ring all-reduce, (n-1)/n S for all-gather and reduce-scatter, S
 * for a send) over the bandwidth -- the link's within a node; when its
 * group spans nodes, the network's per device times the group's members
 * on its busiest node (their ports), at most the link's; a gradient bucket (bucket.c) is one
 * collective of its comms' bytes (a bucket of reduce-scatters or
 * all-gathers and its packing: each comm's input and output read and
 * written once at memory bandwidth).  Local slices, copies and zeroing
 * move their bytes at memory bandwidth.  Steps: ring all-reduce 2(n-1),
 * all-gather, reduce-scatter and all-to-all n-1, broadcast ceil(log2 n), a
 * send 1.
 *
 * A rank runs its items one after another (transfers and collectives
 * block; nothing overlaps, as in Megatron-LM's 1F1B with its dp
 * all-reduce after the backward), so without a pipeline its step is the sum of
 * its items' times, each micro-batch item m times; the step is the
 * slowest rank's.  With a pipeline every rank's order of its micro-batch
 * items is run with these times by the pipeline's check (ir_pipe.span): a
 * collective or transfer starts once its last member reaches it (a send
 * blocks until its receiver takes it), so a transfer placed in a task
 * other than the one that needs it waits there.  The tasks' times (per
 * stage, chunk and kind, from the stage's first rank) also go through
 * plan.txt's timeline (pass_pipe_simulate), which gives the bubble and
 * the step where the span is not known.  The ranks' items outside the
 * micro-batches (the gradients' collectives, the updates) follow. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* Bytes of pTensor pt one execution in section sec touches. */
static double pt_bytes(const ir_dist *d, int pt, int sec)
{
    const ir_ptensor *p = &d->pt[pt];
    const ir_tensor *t = &d->g->t[p->tensor];
    double n = (double)ir_box_numel(&p->box, t->ndim) * pass_t_elsize(d, p->tensor);
    if (t->batch_dim >= 0 && sec == IR_SEC_MB) n /= (double)d->g->train.micro_batches;
    return n;
}

/* The fraction of a wave of SMs that a GEMM's output of rows x cols
 * keeps busy: cuBLAS tiles the output (256 x 128 on Ampere: NVIDIA's Matrix
 * Multiplication Background guide) and runs the tiles in waves of one per
 * SM, so a partial last tile or a partial last wave computes for nothing.
 * The better of the two orientations of the tile; 1 without sms. */
double pass_cost_wave_eff(int sms, double rows, double cols)
{
    if (sms <= 0 || rows <= 0 || cols <= 0) return 1;
    double best = 0;
    for (int k = 0; k < 2; k++) {
        double tm = k ? 128 : 256, tn = k ? 256 : 128;
        double tiles = ceil(rows / tm) * ceil(cols / tn), waves = ceil(tiles / sms);
        double e = rows * cols / (waves * sms * tm * tn);
        if (e > best) best = e;
    }
    return best;
}

/* FLOP/s of sub-op s of op o whose execution does fl FLOPs: a matmul under
 * bf16 at the tensor cores' achieved rate (mm_eff of the peak) times its
 * wave efficiency, attention under bf16 at that rate (its two products
 * run on the tensor cores: Megatron's batched GEMMs, or a fused kernel),
 * the rest at the f32 peak. */
static double subop_rate(const ir_graph *g, const ir_op *o, const ir_subop *s, double fl)
{
    const ir_profile *pf = &g->prof;
    double eff = pf->mm_eff > 0 ? pf->mm_eff : 1;
    int mm = o->kind == IR_OP_MATMUL || o->kind == IR_OP_MATMUL_NT || o->kind == IR_OP_MATMUL_TN;
    int att = o->kind == IR_OP_ATTENTION || o->kind == IR_OP_ATTENTION_BWD;
    if (!g->train.bf16 || !(mm || att)) return pf->flops;
    if (att || fl <= 0) return pf->flops_bf16 * eff;
    /* the GEMM's output: the rows of its leading dims (fl / (2 k n)) by n (matmul), by k (matmul_nt: dx), or
       k by n (matmul_tn: dw, the leading dims summed) */
    int ik = ir_anno_find(&o->anno, "k"), in = ir_anno_find(&o->anno, "n");
    if (ik < 0 || in < 0 || s->ext[ik] <= 0 || s->ext[in] <= 0) return pf->flops_bf16 * eff;
    double k = (double)s->ext[ik], n = (double)s->ext[in], lead = fl / (2 * k * n);
    double rows = o->kind == IR_OP_MATMUL_TN ? k : lead, cols = o->kind == IR_OP_MATMUL_NT ? k : n;
    return pf->flops_bf16 * eff * pass_cost_wave_eff(pf->sms, rows, cols);
}

/* Attention as a framework that stores its scores runs it ([cluster]
 * attention = unfused; Megatron-LM's of 2021, counted from its kernels):
 * the batched GEMMs compute every score, causal or not (the FLOPs twice the
 * causal count), and each score goes through memory in es-byte elements
 * (the activations' storage): the forward writes it (baddbmm), the fused
 * scale-mask-softmax reads and writes it, dropout reads and writes it and
 * writes its 1-byte mask, the product with v reads it: 6 es + 1 bytes; the
 * backward writes dP (dY v^T), reads the dropped probabilities (dV), reads
 * dP and the mask and writes (dropout's backward), reads that and the
 * probabilities and writes dS (softmax's backward), and reads dS twice (dQ,
 * dK): 9 es + 1.  The kernels run one after another: the GEMMs' time plus
 * the scores' bytes at the streaming bandwidth.  *fl: the execution's FLOPs
 * (doubled where causal); returns the scores' seconds, or 0 for an op that
 * is not attention's forward or backward. */
static double unfused_scores(const ir_graph *g, const ir_op *o, const ir_subop *s, double *fl)
{
    int fwd = o->kind == IR_OP_ATTENTION || o->kind == IR_OP_ATTENTION_VL || o->kind == IR_OP_ATTENTION_AB;
    int bwd = o->kind == IR_OP_ATTENTION_BWD || o->kind == IR_OP_ATTENTION_VL_BWD ||
              o->kind == IR_OP_ATTENTION_AB_BWD;
    if (!g->prof.attn_unfused || !(fwd || bwd)) return 0;
    if (o->iattr[IR_IA_CAUSAL]) *fl *= 2;
    int id = ir_anno_find(&o->anno, "d");
    double dh = id >= 0 && s->ext[id] > 0 ? (double)s->ext[id] : 1;
    double scores = *fl / ((fwd ? 4 : 8) * dh), es = g->train.store16 ? 2 : 4;
    return scores * (fwd ? 6 * es + 1 : 9 * es + 1) / g->prof.mem_bw;
}

/* pass_cost_subop with the sub-op's FLOPs per step fl. */
static double cost_subop(const ir_dist *d, const ir_subop *s, int sec, double fl)
{
    const ir_graph *g = d->g;
    const ir_op *o = &g->op[s->op];
    double execs = sec == IR_SEC_MB ? (double)g->train.micro_batches : 1, by = 0;
    fl /= execs;
    double tsc = unfused_scores(g, o, s, &fl);
    for (int k = 0; k < o->nin; k++) by += pt_bytes(d, s->in[k], sec);
    for (int k = 0; k < o->nout; k++) by += pt_bytes(d, s->out[k], sec);
    double t = fl / subop_rate(g, o, s, fl), tb = by / g->prof.mem_bw, tw = 0;
    if (sec == IR_SEC_MB && g->prof.weight_bw > 0) {   /* the operands every micro-batch goes over again */
        double w = 0;
        for (int k = 0; k < o->nin; k++)
            if (g->t[d->pt[s->in[k]].tensor].batch_dim < 0) w += pt_bytes(d, s->in[k], sec);
        for (int k = 0; k < o->nout; k++)
            if (g->t[d->pt[s->out[k]].tensor].batch_dim < 0) w += pt_bytes(d, s->out[k], sec);
        tw = w / g->prof.weight_bw;
    }
    return (t > tb ? t : tb) + tw + tsc;
}

double pass_cost_subop(const ir_dist *d, const ir_subop *s, int sec)
{
    return cost_subop(d, s, sec, pass_subop_flops(d->g, s, sec));
}

double pass_cost_collective(const ir_profile *pf, ir_commkind kind, int n, double bytes, int spans_nodes)
{
    /* spans_nodes: the most members on one node; a ring (NCCL's channels) crosses each node's boundary with
       the whole of the busiest member's bytes, spread over the ports of the node's members, so k members on
       a node move them at k ports' bandwidth -- within the node's links */
    double bw = pf->link_bw, lat = spans_nodes ? pf->net_lat : pf->link_lat, steps;
    if (spans_nodes && spans_nodes * pf->net_bw < bw) bw = spans_nodes * pf->net_bw;
    switch (kind) {
    case IR_COMM_ALLREDUCE: steps = 2.0 * (n - 1); break;
    case IR_COMM_ALLGATHER: case IR_COMM_REDUCESCATTER: case IR_COMM_ALLTOALL: steps = n - 1; break;
    case IR_COMM_BROADCAST: steps = n > 1 ? ceil(log2((double)n)) : 0; break;
    case IR_COMM_SENDRECV: steps = 1; break;
    default: return 2 * bytes / pf->mem_bw;   /* local: read and write */
    }
    return steps * lat + bytes / bw;
}

/* Seconds of one execution of comm c (its busiest member's). */
double pass_cost_comm(const ir_dist *d, const ir_comm *c)
{
    const ir_profile *pf = &d->g->prof;
    const int *m = d->ints + d->grp[c->group].devs;
    int spans = 0, most = 1;   /* spans nodes; the most members on one node */
    for (int k = 1; k < c->n; k++) spans |= m[k] / pf->per_node != m[0] / pf->per_node;
    if (spans) {   /* (counted per node: a pairwise count took minutes on a 1024-rank dp all-reduce,
                      priced once per rank) */
        int nn = d->ndev / pf->per_node + 1, small[256];
        int *cnt = nn <= 256 ? small : ir_xcalloc((size_t)nn, sizeof *cnt);
        if (cnt == small) memset(small, 0, sizeof small);
        for (int k = 0; k < c->n; k++) {
            int on = ++cnt[m[k] / pf->per_node];
            if (on > most) most = on;
        }
        if (cnt != small) free(cnt);
    }
    double bytes = (double)pass_comm_bytes(d, (int)(c - d->comm));   /* (halved on the bf16 wire) */
    double copies = 0;   /* a bucket of reduce-scatters or all-gathers: its packing, bytes */
    if (c->bucket >= 0) {   /* a bucket: one collective of every comm's bytes, on its first */
        if (c->bucket != (int)(c - d->comm)) return 0;
        bytes = (double)c->bbytes;
        for (int x = c->bucket; x >= 0 && c->kind != IR_COMM_ALLREDUCE; x = d->comm[x].bnext) {
            const ir_comm *cx = &d->comm[x];   /* (member 0's: every member's are alike) */
            const ir_tensor *t = &d->g->t[cx->tensor];
            copies += (double)(ir_box_numel(&d->pt[d->ints[cx->in]].box, t->ndim) +
                               ir_box_numel(&d->pt[d->ints[cx->out]].box, t->ndim)) * pass_elsize(t);
        }
    }
    /* ir_comm.bytes counts the tensor's box, which spans the whole step's batch: a collective of a
       batched tensor in the micro-batches moves 1/m of it each time (as pt_bytes) */
    if (c->sec == IR_SEC_MB && d->g->t[c->tensor].batch_dim >= 0) bytes /= (double)d->g->train.micro_batches;
    if (c->kind == IR_COMM_SLICE || c->kind == IR_COMM_COPY || c->kind == IR_COMM_ZERO) {
        int o = c->out >= 0 ? d->ints[c->out] : -1;
        bytes = o >= 0 ? pt_bytes(d, o, c->sec) : 0;
        if (c->kind == IR_COMM_SLICE) bytes = 0;   /* a view (lower.c points into the piece) */
    }
    return pass_cost_collective(pf, c->kind, c->n, bytes, spans ? most : 0) + 2 * copies / pf->mem_bw;
}

double pass_item_time(const ir_dist *d, int n)
{
    if (d->itime && d->itime[n] >= 0) return d->itime[n];
    const ir_item *it = &d->seq[n];
    double t = it->comm      ? pass_cost_comm(d, &d->comm[it->id])
               : d->iflops ? cost_subop(d, &d->sop[it->id], it->sec, d->iflops[n])
                           : pass_cost_subop(d, &d->sop[it->id], it->sec);
    if (d->itime) d->itime[n] = t;
    return t;
}

void pass_cost_step(const ir_dist *d, pass_estimate *e)
{
    const ir_graph *g = d->g;
    double m = (double)g->train.micro_batches;
    memset(e, 0, sizeof *e);
    e->rank = 0;
    /* per rank: compute and comm inside and outside the micro-batches */
    int W = d->ndev;
    for (int r = 0; r < W; r++) {
        double cm = 0, cc = 0, om = 0;   /* mb compute, mb comm (per micro-batch), outside the mb */
        for (int q = d->rank_item0[r]; q < d->rank_item0[r + 1]; q++) {
            int n = d->rank_item[q];
            const ir_item *it = &d->seq[n];
            if (it->sec == IR_SEC_PROLOGUE || it->sec == IR_SEC_EPILOGUE) continue;
            double t = pass_item_time(d, n);
            if (it->sec == IR_SEC_MB) {
                if (it->comm) cc += t;
                else cm += t;
            } else om += t;
        }
        double step = (cm + cc) * m + om;
        if (r == 0 || step > e->step) {
            e->step = step, e->rank = r;
            e->compute = cm * m, e->comm = cc * m, e->outside = om;
        }
    }
    if (!d->pipe) return;
    /* a pipeline: its tasks' times on the cost model's timeline */
    const ir_pipe *p = d->pipe;
    int sd = d->ndev / d->mesh_pp;
    double *cost = ir_xcalloc(3 * (size_t)p->pp * (size_t)p->nch + 1, sizeof(double));
    double *start = ir_xmalloc(sizeof(double) * ((size_t)p->task0[p->pp] + 1)), bubble = 0;
    double out = 0;
    for (int s = 0; s < p->pp; s++) {
        int r = s * sd;
        double o = 0;
        for (int q = d->rank_item0[r]; q < d->rank_item0[r + 1]; q++) {
            int n = d->rank_item[q];
            const ir_item *it = &d->seq[n];
            if (it->sec == IR_SEC_PROLOGUE || it->sec == IR_SEC_EPILOGUE) continue;
            if (it->sec != IR_SEC_MB) {
                o += pass_item_time(d, n);
                continue;
            }
            int cls = pass_pipe_class(d, n, s);
            if (cls >= 0) cost[3 * s * p->nch + cls] += pass_item_time(d, n);
        }
        if (o > out) out = o;
    }
    double span = pass_pipe_simulate(p, cost, start, &bubble);
    if (span >= 0) {
        /* the step: every rank's order with its blocking transfers (the check's progress, timed), where
           known; the tasks' timeline gives the bubble */
        e->step = (p->span > 0 ? p->span : span) + out;
        e->tasks = span;
        e->outside = out;
        e->bubble = bubble;
    }
    free(cost);
    free(start);
}
