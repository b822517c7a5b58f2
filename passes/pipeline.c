/* pipeline.c -- op-order across micro-batches: pipeline schedules, and
 * the check that they cannot deadlock.
 *
 * With pp stages (plan.c assigns every op to one), a rank's mb-section
 * items form tasks: its forward items (schedule positions before seq_bwd)
 * and its backward items -- under a zero-bubble schedule the backward is
 * split further into B, the items on the path of the input gradients, and
 * W, the weight-gradient items nothing in the backward waits for (their
 * results are accumulated into param gradients, read after the step's
 * micro-batches).  A schedule lists, per stage, the tasks F(mb), B(mb)
 * (and W(mb)) of one step in the order the stage runs them:
 *
 *   gpipe   F0 F1 .. F(m-1) B0 B1 .. B(m-1)
 *   1f1b    stage s: min(pp - s - 1, m) forwards (warm-up), then F, B
 *           alternating, then the remaining backwards (PipeDream-flush)
 *   zb-h1   B and W split; built by list scheduling on unit costs: a stage
 *           runs an F while fewer than pp - s micro-batches wait for their
 *           B (1F1B's activations) and fewer than pp for their W (1F1B's
 *           peak, on the first stage), else a ready B, else a W -- the W's
 *           fill what would be bubbles: (p-1)/(3m+p-1) of the step for
 *           equal F, B, W instead of (p-1)/(m+p-1) (this rule meets the
 *           formula exactly for every p and m >= p tried, test_passes)
 *   kfkb    1f1b over groups of k micro-batches ([plan] schedule = 2f2b ...)
 *   interleaved  with chunks = v model chunks per stage (virtual stage j on
 *           stage j % pp, its chunk j / pp): a task per chunk and
 *           micro-batch; Megatron's order (groups of pp micro-batches
 *           through chunk 0 .. v-1, (pp - s - 1) 2 + (v - 1) pp warm-up
 *           forwards): (p-1)/(vm+p-1)
 *   interlaced  nnScaler's: the ops before and after the layers split over
 *           every device, in two more chunks whose tasks every stage runs
 *           together between its 1f1b tasks (build_interlaced)
 *   order   the user's ([plan] order = TASKS; TASKS; ... one list per stage;
 *           W tasks in it split the backward; F3.1: micro-batch 3, chunk 1)
 *
 * Every stage runs each kind of task in micro-batch order (accumulated
 * gradients start on micro-batch 0), F(i) before B(i) before W(i).  A
 * micro-batch between its F and its last task holds its stash (what a
 * later task reads of an earlier one's buffers, and the buffers of
 * transfers between stages) in a slot; a stage needs as many slots as it
 * has micro-batches in flight (memplan.c lays out that many copies, lower.c
 * unrolls the tasks with each copy's offsets).
 *
 * Which task waits for which comes from the transfers between stages the
 * comm pass derived (ir_pipe.dep): forward to the next stage, gradients
 * back, and whatever else the model needs (a tied embedding's gradient
 * from the last stage to the first).  The cost model's simulation and the
 * zb-h1 builder use those dependencies.
 *
 * Transfers between stages are blocking (a send returns once the receiver
 * took the data, the same on the shared-memory and NCCL backends).  A task
 * receives from other stages first and sends to them last (their buffers
 * are stash, so moving them is safe); where one task's sends meet the next
 * task's receives, a rank does those with a lower stage receive-first and
 * those with a higher stage send-first, so two neighbours never both wait
 * to send (1F1B's steady state: F(i) sends forward while the next stage's
 * B(j) sends back).  The check then simulates every rank's sequence of
 * collectives and transfers over one step and proves that each one finds
 * all its members: no deadlock, the same collective order in every group.
 * Where a rank would wait to send to a rank that sits between two tasks
 * but takes the transfer only in a later task, that receive is posted
 * early there (ir_pipe.hoist; its buffer is stash), and the check runs
 * again; before that, sends whose receiver comes later on the cost model
 * are made late (late_sends).  The transfers of one call go in the order
 * their sender makes them (the runtimes match them in call order), and the
 * check holds a transfer back until those before it are done.  A transfer
 * moves to its task's start or end only where it passes no transfer that
 * stays between the same two ranks in the same direction (under sequence
 * parallelism a stage may take one tensor twice from a rank: its sum,
 * received with acc, which stays, and its piece).  Interlaced: what a
 * staged op makes and other stages take only in a task of every stage is
 * sent in that task too, and a transfer whose peer takes it in the same
 * such task stays in the schedule's order (the meeting's ranks keep one
 * order); a receive may be posted early before such a task.  A run of more
 * transfers than one call takes is cut into calls in that order; where the
 * check fails so, the build is retried with the receives from a sender
 * posted early ahead of the sends to it (cut_recv).  And where a task starts
 * with such sums from a lower stage, the task before's sends to a lower
 * stage go after them, so that the rank receives first there too.  An order
 * that fails is rejected with the two ranks and tasks that wait on each
 * other.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

static const char kind_ch[] = "FBW";

/* Stage of device dev. */
static int stage_of(const ir_dist *d, int dev) { return dev / (d->ndev / d->mesh_pp); }

/* Tasks per stage. */
static int ntask(const ir_pipe *p) { return (p->split_w ? 3 : 2) * p->m * p->nch; }

int pass_pipe_kind(const ir_dist *d, int n)
{
    if (n < d->seq_bwd) return IR_TASK_F;
    return d->pipe && d->pipe->split_w && d->item_w && d->item_w[n] ? IR_TASK_W : IR_TASK_B;
}

int pass_pipe_class(const ir_dist *d, int n, int s)
{
    int c = d->item_chunk ? d->item_chunk[(size_t)n * (size_t)d->mesh_pp + (size_t)s] : 0;
    return c < 0 ? -1 : pass_pipe_kind(d, n) + 3 * c;
}

const char *pass_pipe_task_name(const ir_pipe *p, const ir_task *t, char *buf, size_t n)
{
    if (p->nch > 1) snprintf(buf, n, "%c%d.%d", kind_ch[t->kind], t->mb, t->chunk);
    else snprintf(buf, n, "%c%d", kind_ch[t->kind], t->mb);
    return buf;
}

/* Interlaced: the chunk of every stage's shared task in which comm c runs
 * on all its members when it takes a staged op's result (its producer on
 * one stage) to other stages that read it only in that shared task (rd:
 * per tensor and stage, the first chunk reading it); else -1.  The shared
 * tasks meet on every stage, so the sender's side of such a transfer goes
 * there too, after its producer's task: a transfer made in the producer's
 * task but taken in the shared one has every meeting between the two to
 * pass -- a head's forward for the next micro-batch before the embedding's
 * backward takes its input gradient -- and a receive that assembles pieces
 * (acc) cannot be posted earlier. */
static int shared_reader_chunk(const ir_dist *d, const ir_comm *c, const signed char *rd, int v)
{
    const ir_graph *g = d->g;
    int pp = d->mesh_pp, pr = g->t[c->tensor].producer, ch = -1;
    if (pr < 0 || d->op_stage[pr] == IR_STAGE_ALL(d)) return -1;
    const int *mem = d->ints + d->grp[c->group].devs;
    for (int k = 0; k < c->n; k++) {
        int s = stage_of(d, mem[k]);
        if (s == d->op_stage[pr] % pp) continue;
        int r = rd[(size_t)c->tensor * (size_t)pp + (size_t)s];
        if (r < v || r > v + 1 || (ch >= 0 && r != ch)) return -1;
        ch = r;
    }
    return ch;
}

/* ---- the chunk of every item on every stage (interleaved schedules)
 *
 * With pp x v virtual stages, virtual stage j runs on stage j % pp as its
 * chunk j / pp, and a stage's F, B and W tasks are one per chunk and
 * micro-batch.  A sub-op runs in its op's chunk.  A comm runs, on each
 * stage it touches, in the chunk of its tensor's producer when that is on
 * the stage (what it sends or reduces was made there), else in the first
 * chunk there that reads the tensor (a receive, in time for every reader;
 * a later chunk reads it from the stash); interlaced: a staged op's result
 * that other stages read only in a shared task goes there on every member
 * (shared_reader_chunk). */
static void item_chunks(ir_dist *d)
{
    const ir_graph *g = d->g;
    int pp = d->mesh_pp, all = IR_STAGE_ALL(d), v = d->mesh_v;
    size_t n0 = (size_t)d->nseq * (size_t)pp;
    d->item_chunk = ir_xmalloc(n0 + 1);
    memset(d->item_chunk, 0xff, n0 + 1);
    /* interlaced: the ops of every stage before the pipeline's (chunk v: the
       embedding's forward, and the backward ops that wait for the
       pipeline's backward) and after it (chunk v + 1: head and loss, and
       their backward, which the pipeline's waits for) */
    int *order = ir_xmalloc(sizeof(int) * ((size_t)g->nop + 1)), cyc;
    IR_ASSERT(!ir_topo(g, order, &cyc));
    signed char *och = ir_xmalloc((size_t)g->nop + 1);   /* per op: its chunk (on its stage) */
    for (int n = 0; n < g->nop; n++) {
        int op = order[n];
        const ir_op *o = &g->op[op];
        if (d->op_stage[op] != all) {
            och[op] = (signed char)(d->op_stage[op] / pp);
            continue;
        }
        int after = o->phase == IR_PH_FWD ? 0 : 1, bwd = o->phase != IR_PH_FWD;
        for (int k = 0; k < o->nin; k++) {
            int q = g->t[o->in[k]].producer;
            if (q < 0) continue;
            int qa = d->op_stage[q] == all, qb = g->op[q].phase != IR_PH_FWD;
            if (!bwd && ((!qa && !qb) || (qa && och[q] == v + 1))) after = 1;   /* reads the pipeline's forward */
            if (bwd && qb && (!qa || och[q] == v)) after = 0;   /* waits for the pipeline's backward */
        }
        och[op] = (signed char)(v + after);
    }
    free(order);
    /* per tensor and stage: the first chunk reading it (non-update readers) */
    signed char *rd = ir_xmalloc((size_t)g->nt * (size_t)pp + 1);
    memset(rd, 0x7f, (size_t)g->nt * (size_t)pp + 1);
    for (int op = 0; op < g->nop; op++) {
        if (g->op[op].phase == IR_PH_OPT) continue;
        int vs = d->op_stage[op];
        for (int k = 0; k < g->op[op].nin; k++)
            for (int s = 0; s < pp; s++) {
                if (vs != all && vs % pp != s) continue;
                signed char *r = &rd[(size_t)g->op[op].in[k] * (size_t)pp + (size_t)s];
                if (och[op] < *r) *r = och[op];
            }
    }
    for (int n = 0; n < d->nseq; n++) {
        const ir_item *it = &d->seq[n];
        signed char *ic = d->item_chunk + (size_t)n * (size_t)pp;
        if (!it->comm) {
            int op = d->sop[it->id].op, vs = d->op_stage[op];
            if (vs == all) ic[d->sop[it->id].dev / (d->ndev / pp)] = och[op];
            else ic[vs % pp] = och[op];
            continue;
        }
        const ir_comm *c = &d->comm[it->id];
        const int *mem = d->ints + d->grp[c->group].devs;
        int pr = g->t[c->tensor].producer;
        int sh = shared_reader_chunk(d, c, rd, v);
        for (int k = 0; k < c->n && sh >= 0; k++) ic[stage_of(d, mem[k])] = (signed char)sh;
        for (int k = 0; k < c->n; k++) {
            int s = stage_of(d, mem[k]);
            if (ic[s] >= 0) continue;
            int here = pr >= 0 && (d->op_stage[pr] == all || d->op_stage[pr] % pp == s);
            int ch = here ? och[pr] : rd[(size_t)c->tensor * (size_t)pp + (size_t)s];
            ic[s] = (signed char)(ch < d->pipe->nch ? ch : 0);
        }
    }
    free(rd);
    free(och);
}

/* ---- the weight-gradient items (W) */

/* A backward op is W when every output is accumulated (a param's gradient)
 * or read only by W ops of its own stage and by optimizer updates; a comm
 * item is W when every reader of its tensor in the micro-batch is and it
 * stays within a stage.  What crosses stages is B: a stage's W tasks never
 * wait for another stage's, so they can go wherever the bubbles are (a
 * tied embedding's gradient contribution is computed and sent in the last
 * stage's B, received in the first stage's B, summed in its W). */
static void classify_w(ir_dist *d)
{
    const ir_graph *g = d->g;
    int *c0 = ir_xcalloc((size_t)g->nt + 2, sizeof(int)), *cs, *fill;
    for (int op = 0; op < g->nop; op++)
        for (int k = 0; k < g->op[op].nin; k++) c0[g->op[op].in[k] + 1]++;
    for (int t = 0; t < g->nt; t++) c0[t + 1] += c0[t];
    cs = ir_xmalloc(sizeof(int) * ((size_t)c0[g->nt] + 1));
    fill = ir_xcalloc((size_t)g->nt + 1, sizeof(int));
    for (int op = 0; op < g->nop; op++)
        for (int k = 0; k < g->op[op].nin; k++) cs[c0[g->op[op].in[k]] + fill[g->op[op].in[k]]++] = op;
    free(fill);
    int *order = ir_xmalloc(sizeof(int) * ((size_t)g->nop + 1)), cyc;
    IR_ASSERT(!ir_topo(g, order, &cyc));
    char *w = ir_xcalloc((size_t)g->nop + 1, 1);
    for (int n = g->nop - 1; n >= 0; n--) {
        int op = order[n];
        if (g->op[op].phase != IR_PH_BWD) continue;
        int all = 1;
        for (int k = 0; k < g->op[op].nout && all; k++) {
            int t = g->op[op].out[k];
            if (d->accum[t]) continue;
            for (int q = c0[t]; q < c0[t + 1]; q++)
                if (g->op[cs[q]].phase != IR_PH_OPT && (!w[cs[q]] || d->op_stage[cs[q]] != d->op_stage[op])) all = 0;
        }
        w[op] = (char)all;
    }
    /* tensors some comm moves between stages: all their comms stay in B (a
       received sum and the zeroing before it in one task) */
    char *xs = ir_xcalloc((size_t)g->nt + 1, 1);
    for (int n = d->seq_bwd; n < d->nseq; n++) {
        const ir_item *it = &d->seq[n];
        if (it->sec != IR_SEC_MB || !it->comm) continue;
        const ir_comm *c = &d->comm[it->id];
        const int *mem = d->ints + d->grp[c->group].devs;
        if (stage_of(d, mem[0]) != stage_of(d, mem[c->n - 1])) xs[c->tensor] = 1;
    }
    d->item_w = ir_xcalloc((size_t)d->nseq + 1, 1);
    for (int n = d->seq_bwd; n < d->nseq; n++) {
        const ir_item *it = &d->seq[n];
        if (it->sec != IR_SEC_MB) continue;
        if (!it->comm) {
            d->item_w[n] = w[d->sop[it->id].op];
            continue;
        }
        const ir_comm *c = &d->comm[it->id];
        int t = c->tensor, any = 0, all = !xs[t];
        for (int q = c0[t]; q < c0[t + 1]; q++)
            if (g->op[cs[q]].phase != IR_PH_OPT) any = 1, all &= w[cs[q]];
        /* read by nothing in the micro-batch (ZeRO 2's reduce-scatter of a gradient): with its maker */
        if (!any) any = g->t[t].producer >= 0 && w[g->t[t].producer];
        d->item_w[n] = (char)(any && all);
    }
    free(c0);
    free(cs);
    free(order);
    free(w);
    free(xs);
}

/* ---- dependencies between the stages' tasks */

static void add_dep(ir_pipe *p, int s, int kind, int chunk, int from_s, int from_kind, int from_chunk)
{
    ir_pdep x = {s, kind, from_s, from_kind, chunk, from_chunk};
    for (int i = 0; i < p->ndep; i++)
        if (!memcmp(&p->dep[i], &x, sizeof x)) return;
    p->dep = ir_xrealloc(p->dep, sizeof *p->dep * ((size_t)p->ndep + 1));
    p->dep[p->ndep++] = x;
}

/* From every comm of the mb section whose members sit on several stages:
 * a send/recv or broadcast makes the receivers' task wait for the root's;
 * any other collective makes each member's wait for every other's. */
static void derive_deps(ir_dist *d)
{
    ir_pipe *p = d->pipe;
    for (int n = 0; n < d->nseq; n++) {
        const ir_item *it = &d->seq[n];
        if (it->sec != IR_SEC_MB || !it->comm) continue;
        const ir_comm *c = &d->comm[it->id];
        const int *mem = d->ints + d->grp[c->group].devs;
        if (stage_of(d, mem[0]) == stage_of(d, mem[c->n - 1])) continue;   /* members ascend */
        int kind = pass_pipe_kind(d, n);
        int p2p = c->kind == IR_COMM_SENDRECV || c->kind == IR_COMM_BROADCAST;
        for (int a = 0; a < c->n; a++)
            for (int b = 0; b < c->n; b++) {
                int sa = stage_of(d, mem[a]), sb = stage_of(d, mem[b]);
                if (sa == sb || (p2p && (a != c->root || b == c->root))) continue;
                add_dep(p, sb, kind, d->item_chunk[(size_t)n * (size_t)d->mesh_pp + (size_t)sb], sa, kind,
                        d->item_chunk[(size_t)n * (size_t)d->mesh_pp + (size_t)sa]);
            }
    }
}

/* ---- the schedules */

/* The k-th forward (backward: bwd) task of stage s under Megatron's
 * interleaved order: micro-batches in groups of pp, each group through
 * chunk 0, 1, .. v-1 (backwards v-1 .. 0). */
static ir_task ilv(const ir_pipe *p, int k, int bwd)
{
    int pv = p->pp * p->v, r = k % pv, c = r / p->pp;
    return (ir_task){bwd ? IR_TASK_B : IR_TASK_F, k / pv * p->pp + r % p->pp, 0, bwd ? p->v - 1 - c : c};
}

/* The tasks of stage s under gpipe, 1f1b, kFkB or interleaved.  Returns 0,
 * or 2 when interleaved needs m a multiple of pp. */
static int builtin(const ir_pipe *p, int s, ir_task *t)
{
    int n = 0, pp = p->pp, m = p->m, v = p->v;
    if (p->sched == IR_SCHED_GPIPE) {   /* with chunks: breadth first, chunk by chunk */
        for (int c = 0; c < v; c++)
            for (int i = 0; i < m; i++) t[n++] = (ir_task){IR_TASK_F, i, 0, c};
        for (int c = v - 1; c >= 0; c--)
            for (int i = 0; i < m; i++) t[n++] = (ir_task){IR_TASK_B, i, 0, c};
        return 0;
    }
    if (v > 1) {
        /* interleaved 1F1B: (pp - s - 1) x 2 + (v - 1) x pp warm-up forwards
           (all of them when m = pp), then a forward and a backward in turn */
        if (m % pp) return 2;
        int tot = m * v, w = m == pp ? tot : (pp - s - 1) * 2 + (v - 1) * pp;
        if (w > tot) w = tot;
        for (int k = 0; k < w; k++) t[n++] = ilv(p, k, 0);
        for (int k = 0; k < tot - w; k++) {
            t[n++] = ilv(p, w + k, 0);
            t[n++] = ilv(p, k, 1);
        }
        for (int k = tot - w; k < tot; k++) t[n++] = ilv(p, k, 1);
        return 0;
    }
    /* 1f1b over groups of k micro-batches (k = 1: 1f1b): the warm-up
       forwards of pp - s - 1 groups, then a group's forwards and a group's
       backwards in turn, then the remaining backwards */
    int k = p->sched == IR_SCHED_KFKB ? p->k : 1, ng = (m + k - 1) / k;
    int wg = pp - s - 1 < ng ? pp - s - 1 : ng, w = wg * k < m ? wg * k : m, f = 0, b = 0;
    while (f < w) t[n++] = (ir_task){IR_TASK_F, f++, 0, 0};
    while (f < m) {
        for (int j = 0; j < k && f < m; j++) t[n++] = (ir_task){IR_TASK_F, f++, 0, 0};
        for (int j = 0; j < k && b < f; j++) t[n++] = (ir_task){IR_TASK_B, b++, 0, 0};
    }
    while (b < m) t[n++] = (ir_task){IR_TASK_B, b++, 0, 0};
    return 0;
}

/* Finish time of stage s's task (chunk, kind, mb) in a list schedule, -1:
 * not yet. */
#define DONEC(p, tdone, s, chunk, kind, mb) (tdone)[(size_t)PASS_PIPE_C(p, s, chunk, kind) * (size_t)(p)->m + (size_t)(mb)]

/* May stage s start its task (kind, mb) of chunk 0 at time t (zb-h1): has
 * every task it depends on finished by then? */
static int deps_met(const ir_pipe *p, const double *tdone, int s, int kind, int mb, double t)
{
    for (int i = 0; i < p->ndep; i++) {
        const ir_pdep *e = &p->dep[i];
        if (e->s != s || e->kind != kind) continue;
        double f = DONEC(p, tdone, e->from_s, e->from_chunk, e->from_kind, mb);
        if (f < 0 || f > t) return 0;
    }
    return 1;
}

/* zb-h1 by list scheduling (see the header), transfers taken as free: on
 * unit costs (dur NULL) the order whose step meets (p-1)/(3m+p-1); with
 * dur[3 s + kind] (the cost model's task times in small integer units) the
 * same rule on the stages' real F, B and W.  Returns 0, or 1 when some
 * stage could never go on (dependencies no schedule of this kind
 * satisfies). */
static int build_zb(ir_pipe *p, const int *dur)
{
    int pp = p->pp, m = p->m;
    double *tdone = ir_xmalloc(sizeof(double) * (size_t)pp * 3 * (size_t)m);
    for (size_t i = 0; i < (size_t)pp * 3 * (size_t)m; i++) tdone[i] = -1;
    int *cnt = ir_xcalloc((size_t)pp * 3, sizeof(int)), *len = ir_xcalloc((size_t)pp, sizeof(int));
    int left = 3 * m * pp, rc = 0;
    for (int t = 0; left; t++) {
        int moved = 0;
        for (int s = 0; s < pp; s++) {
            int nf = cnt[3 * s], nb = cnt[3 * s + 1], nw = cnt[3 * s + 2], kind = -1, mb = 0;
            if (len[s] && DONEC(p, tdone, s, 0, p->task[p->task0[s] + len[s] - 1].kind,
                               p->task[p->task0[s] + len[s] - 1].mb) > t)
                continue;   /* busy */
            if (nf < m && nf - nb < pp - s && nf - nw < pp && deps_met(p, tdone, s, IR_TASK_F, nf, t))
                kind = IR_TASK_F, mb = nf;
            else if (nb < nf && DONEC(p, tdone, s, 0, IR_TASK_F, nb) <= t && deps_met(p, tdone, s, IR_TASK_B, nb, t))
                kind = IR_TASK_B, mb = nb;
            else if (nw < nb && DONEC(p, tdone, s, 0, IR_TASK_B, nw) <= t && deps_met(p, tdone, s, IR_TASK_W, nw, t))
                kind = IR_TASK_W, mb = nw;
            if (kind < 0) continue;
            p->task[p->task0[s] + len[s]++] = (ir_task){kind, mb, 0, 0};
            DONEC(p, tdone, s, 0, kind, mb) = t + (dur ? dur[3 * s + kind] : 1);
            cnt[3 * s + kind]++;
            left--;
            moved = 1;
        }
        /* nothing started and nothing running: stuck */
        int running = 0;
        for (int s = 0; s < pp && !moved; s++)
            running |= len[s] && DONEC(p, tdone, s, 0, p->task[p->task0[s] + len[s] - 1].kind,
                                      p->task[p->task0[s] + len[s] - 1].mb) > t;
        if (!moved && !running) {
            rc = 1;
            break;
        }
    }
    free(tdone);
    free(cnt);
    free(len);
    return rc;
}

/* zb-h1 on unit costs with the transfers as lower.c makes them: a task's
 * sends to other stages and the next task's receives are one batch between
 * the two tasks, so a stage starts its next task only once every stage its
 * last task sends to has started the task that receives it (at the same
 * moment counts: the batches meet).  A stage runs a ready B first, else an
 * F within the same bounds, else a W: on chains of 2 to 8 stages and m = p
 * .. 4p this never stalls and stays within 24 % of the formula's step
 * (1f1b: up to 3x the formula's bubble).  Returns 0, or 1 when the stages
 * would wait on each other. */
static int build_zb_rdv(ir_pipe *p)
{
    int pp = p->pp, m = p->m, rc = 0;
    size_t nt = (size_t)pp * 3 * (size_t)m;
    double *tdone = ir_xmalloc(sizeof(double) * nt);
    char *started = ir_xcalloc(nt, 1);
    for (size_t i = 0; i < nt; i++) tdone[i] = -1;
    int *cnt = ir_xcalloc((size_t)pp * 3, sizeof(int)), *len = ir_xcalloc((size_t)pp, sizeof(int));
    int *pk = ir_xmalloc(sizeof(int) * (size_t)pp), *pmb = ir_xmalloc(sizeof(int) * (size_t)pp);
    char *valid = ir_xmalloc((size_t)pp);
    int *busy_until = ir_xcalloc((size_t)pp, sizeof(int));
#define STARTED(S_, K_, M_) started[((size_t)(S_) * 3 + (size_t)(K_)) * (size_t)m + (size_t)(M_)]
    /* the receivers stage s's last task still waits to hand its outputs to:
       deps from (s, last kind) whose receiving task has not started */
#define WAITS_FOR(S_, Q_)                                                                     \
    (len[S_] && p->dep[Q_].from_s == (S_) &&                                                  \
     p->dep[Q_].from_kind == p->task[p->task0[S_] + len[S_] - 1].kind &&                      \
     !STARTED(p->dep[Q_].s, p->dep[Q_].kind, p->task[p->task0[S_] + len[S_] - 1].mb))
    int left = 3 * m * pp;
    for (int t = 0; left; t++) {
        /* each free stage's pick: a task another stage waits to send to, else F, B, W */
        for (int s = 0; s < pp; s++) {
            pk[s] = -1;
            if (busy_until[s] > t) continue;
            int nf = cnt[3 * s], nb = cnt[3 * s + 1], nw = cnt[3 * s + 2];
            int ok[3] = {nf < m && nf - nb < pp - s && nf - nw < pp && deps_met(p, tdone, s, IR_TASK_F, nf, t),
                         nb < nf && DONEC(p, tdone, s, 0, IR_TASK_F, nb) >= 0 && DONEC(p, tdone, s, 0, IR_TASK_F, nb) <= t &&
                             deps_met(p, tdone, s, IR_TASK_B, nb, t),
                         nw < nb && DONEC(p, tdone, s, 0, IR_TASK_B, nw) >= 0 && DONEC(p, tdone, s, 0, IR_TASK_B, nw) <= t &&
                             deps_met(p, tdone, s, IR_TASK_W, nw, t)};
            int next[3] = {nf, nb, nw};
            static const int prio[3] = {IR_TASK_B, IR_TASK_F, IR_TASK_W};
            for (int q = 0; q < 3 && pk[s] < 0; q++)
                if (ok[prio[q]]) pk[s] = prio[q], pmb[s] = next[prio[q]];
        }
        /* a pick stands when everything its stage still sends goes to a task
           that has started or starts now (greatest fixpoint) */
        for (int s = 0; s < pp; s++) valid[s] = pk[s] >= 0;
        for (int changed = 1; changed;) {
            changed = 0;
            for (int s = 0; s < pp; s++) {
                if (!valid[s]) continue;
                for (int q = 0; q < p->ndep && valid[s]; q++) {
                    if (!WAITS_FOR(s, q)) continue;
                    int r = p->dep[q].s, mb = p->task[p->task0[s] + len[s] - 1].mb;
                    if (!(valid[r] && pk[r] == p->dep[q].kind && pmb[r] == mb)) valid[s] = 0, changed = 1;
                }
            }
        }
        int moved = 0, running = 0;
        for (int s = 0; s < pp; s++) {
            running |= busy_until[s] > t;
            if (!valid[s]) continue;
            p->task[p->task0[s] + len[s]++] = (ir_task){pk[s], pmb[s], 0, 0};
            STARTED(s, pk[s], pmb[s]) = 1;
            DONEC(p, tdone, s, 0, pk[s], pmb[s]) = t + 1;
            busy_until[s] = t + 1;
            cnt[3 * s + pk[s]]++;
            left--;
            moved = 1;
        }
        if (!moved && !running) {
            rc = 1;
            break;
        }
    }
#undef WAITS_FOR
#undef STARTED
    free(tdone);
    free(started);
    free(cnt);
    free(len);
    free(pk);
    free(pmb);
    free(valid);
    free(busy_until);
    return rc;
}

/* interlaced (nnScaler): the stages run 1f1b on the layers, and every
 * stage runs the tasks of the ops split over all devices together: E(i)
 * (chunk v, forward: the embedding) before the first stage's F(i), H(i)
 * (chunk v + 1: head and loss, forward then backward) once the last stage's
 * F(i) is done and before its B(i), e(i) (chunk v, backward) once the
 * first stage's B(i) is done.  Built by list scheduling on unit costs (F 1,
 * B 2, a shared task 1): a shared task that is due waits until every stage
 * is free and then runs on all of them at once (due first: H's backward,
 * H's forward, e, then E, which is due only when the first stage would
 * start that micro-batch, so the embedding's outputs wait in no more slots
 * than 1f1b's).  Returns 0, or 1 when it stalls. */
static int build_interlaced(ir_pipe *p)
{
    int pp = p->pp, m = p->m, v = p->v, rc = 0;
    ir_task *base = ir_xmalloc(sizeof *base * 2 * (size_t)m * (size_t)pp);
    ir_pipe q = *p;
    q.sched = IR_SCHED_1F1B;
    q.nch = 1;
    for (int s = 0; s < pp; s++) builtin(&q, s, base + (size_t)2 * m * s);
    int *pos = ir_xcalloc((size_t)pp, sizeof(int)), *len = ir_xcalloc((size_t)pp, sizeof(int));
    int *busy = ir_xcalloc((size_t)pp, sizeof(int));
    int *fdone = ir_xmalloc(sizeof(int) * 2 * (size_t)pp * (size_t)m);   /* staged (s, kind, mb): finish, -1 */
    int *sdone = ir_xmalloc(sizeof(int) * 4 * (size_t)m);   /* shared E, HF, HB, e per mb */
    for (int i = 0; i < 2 * pp * m; i++) fdone[i] = -1;
    for (int i = 0; i < 4 * m; i++) sdone[i] = -1;
#define FD(s_, k_, i_) fdone[((size_t)(s_) * 2 + (size_t)(k_)) * (size_t)m + (size_t)(i_)]
#define SD(k_, i_) sdone[(size_t)(k_) * (size_t)m + (size_t)(i_)]
    int nxt[4] = {0, 0, 0, 0}, left = 6 * m * pp;
    for (int t = 0; left; t++) {
        /* the shared task due now, if any: HB, HF, e, E */
        int due = -1;
        if (nxt[2] < nxt[1] && SD(1, nxt[2]) <= t) due = 2;
        else if (nxt[1] < m && FD(pp - 1, IR_TASK_F, nxt[1]) >= 0 && FD(pp - 1, IR_TASK_F, nxt[1]) <= t) due = 1;
        else if (nxt[3] < m && FD(0, IR_TASK_B, nxt[3]) >= 0 && FD(0, IR_TASK_B, nxt[3]) <= t) due = 3;
        else if (nxt[0] < m && pos[0] < 2 * m && base[pos[0]].kind == IR_TASK_F && base[pos[0]].mb == nxt[0]) due = 0;
        int moved = 0, running = 0;
        for (int s = 0; s < pp; s++) running |= busy[s] > t;
        if (due >= 0) {
            if (running) continue;   /* every stage free first */
            int i = nxt[due]++;
            static const int kinds[4] = {IR_TASK_F, IR_TASK_F, IR_TASK_B, IR_TASK_B};
            int ch = due == 1 || due == 2 ? v + 1 : v;
            for (int s = 0; s < pp; s++) {
                p->task[p->task0[s] + len[s]++] = (ir_task){kinds[due], i, 0, ch};
                busy[s] = t + 1;
                left--;
            }
            SD(due, i) = t + 1;
            continue;
        }
        for (int s = 0; s < pp; s++) {
            if (busy[s] > t || pos[s] == 2 * m) continue;
            const ir_task *x = &base[(size_t)2 * m * s + pos[s]];
            int i = x->mb, ok;
            if (x->kind == IR_TASK_F)
                ok = SD(0, i) >= 0 && SD(0, i) <= t && (s == 0 || (FD(s - 1, IR_TASK_F, i) >= 0 && FD(s - 1, IR_TASK_F, i) <= t));
            else
                ok = s == pp - 1 ? SD(2, i) >= 0 && SD(2, i) <= t
                                 : FD(s + 1, IR_TASK_B, i) >= 0 && FD(s + 1, IR_TASK_B, i) <= t;
            if (!ok) continue;
            p->task[p->task0[s] + len[s]++] = (ir_task){x->kind, i, 0, 0};
            FD(s, x->kind, i) = busy[s] = t + (x->kind == IR_TASK_F ? 1 : 2);
            pos[s]++, left--, moved = 1;
        }
        if (!moved && !running && left) {
            rc = 1;
            break;
        }
    }
#undef FD
#undef SD
    free(base);
    free(pos);
    free(len);
    free(busy);
    free(fdone);
    free(sdone);
    return rc;
}

int pass_pipe_schedule(ir_pipe *p, const double *cost)
{
    if (p->v < 1) p->v = 1;
    if (p->nch < p->v) p->nch = p->v;
    if (p->k < 1) p->k = 1;
    if (p->sched == IR_SCHED_ZBH1) {
        if (!cost) return build_zb(p, NULL);
        /* the costs in units of 1/32 of the largest task (at least 1) */
        double top = 0;
        int *dur = ir_xmalloc(sizeof(int) * 3 * (size_t)p->pp);
        for (int k = 0; k < 3 * p->pp; k++)
            if (cost[k] > top) top = cost[k];
        for (int k = 0; k < 3 * p->pp; k++) {
            int u = top > 0 ? (int)(cost[k] / top * 32 + 0.5) : 1;
            dur[k] = u < 1 ? 1 : u;
        }
        int rc = build_zb(p, dur);
        free(dur);
        return rc;
    }
    if (p->sched == IR_SCHED_INTERLACED) return build_interlaced(p);
    for (int s = 0; s < p->pp; s++)
        if (builtin(p, s, p->task + p->task0[s])) return 2;
    return 0;
}

/* Parse the user's order: one list of tasks (F3, B0, W1 ...) per stage,
 * separated by ';'.  Returns 0 or 2 after a message. */
static int user_order(const ir_dist *d, ir_pipe *p)
{
    const ir_graph *g = d->g;
    const char *s = g->req.order;
    int line = g->req.order_line;
    static const char hint1[] = "write order = TASKS; TASKS; ... with one list per stage, each task F<mb>, B<mb> "
                                "(or, splitting the backward, also W<mb>) (e.g. for pp 2, micro_batches 2: "
                                "order = F0 F1 B0 B1; F0 B0 F1 B1)";
    static const char hintv[] = "write order = TASKS; TASKS; ... with one list per stage, each task F<mb>.<chunk>, "
                                "B<mb>.<chunk> (or, splitting the backward, also W<mb>.<chunk>) (e.g. for pp 2, "
                                "chunks 2, micro_batches 2: order = F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0; ...)";
    const char *hint = p->nch > 1 ? hintv : hint1;
    p->split_w = strchr(s, 'W') != NULL;
    int nt = ntask(p);
    for (int st = 0; st < p->pp; st++) {
        const char *e = strchr(s, ';');
        if (!e && st < p->pp - 1)
            return pass_error(g, line, hint, "[plan] order: %d task lists for pp %d stages", st + 1, p->pp);
        if (e && st == p->pp - 1)
            return pass_error(g, line, hint, "[plan] order: more task lists than pp %d stages", p->pp);
        const char *end = e ? e : s + strlen(s);
        int n = 0;
        ir_task *t = p->task + p->task0[st];
        while (s < end) {
            while (s < end && (*s == ' ' || *s == '\t')) s++;
            if (s == end) break;
            char *q = (char *)s;
            const char *k = strchr(kind_ch, *s);
            long mb = k && *s ? strtol(s + 1, &q, 10) : -1, ch = 0;
            if (mb >= 0 && q > s + 1 && p->nch > 1) {   /* .chunk */
                char *q2 = q;
                ch = *q == '.' && q[1] >= '0' && q[1] <= '9' ? strtol(q + 1, &q2, 10) : -1;
                if (ch < 0) mb = -1;
                q = q2;
            }
            if (mb < 0 || q == s + 1 || (q < end && *q != ' ' && *q != '\t'))
                return pass_error(g, line, hint, "[plan] order: stage %d: '%.*s' is not a task", st,
                                  (int)strcspn(s, " \t;"), s);
            if (mb >= p->m)
                return pass_error(g, line, hint, "[plan] order: stage %d: %c%ld, but micro_batches is %d", st, *s, mb,
                                  p->m);
            if (ch >= p->nch)
                return pass_error(g, line, hint, "[plan] order: stage %d: %c%ld.%ld, but the chunks are 0 .. %d", st,
                                  *s, mb, ch, p->nch - 1);
            if (n == nt)
                return pass_error(g, line, hint, "[plan] order: stage %d has more than the %d tasks of %d micro-batches",
                                  st, nt, p->m);
            t[n++] = (ir_task){(int)(k - kind_ch), (int)mb, 0, (int)ch};
            s = q;
        }
        if (n != nt)
            return pass_error(g, line, hint, "[plan] order: stage %d has %d tasks, not the %d of F0..F%d, B0..B%d%s%s",
                              st, n, nt, p->m - 1, p->m - 1, p->split_w ? ", W0.." : "",
                              p->nch > 1 ? " for every chunk" : "");
        s = e ? e + 1 : end;
    }
    return 0;
}

/* Check stage st's tasks (each once; each kind and chunk in micro-batch
 * order; F(i) before B(i) before W(i) in a chunk) and give every
 * micro-batch a slot from its first task to its last (one slot holds the
 * stash of all the stage's chunks).  Returns 0 or 2. */
static int slots(const ir_dist *d, ir_pipe *p, int st)
{
    const ir_graph *g = d->g;
    ir_task *t = p->task + p->task0[st];
    int ncls = 3 * p->nch, *cnt = ir_xcalloc((size_t)ncls, sizeof(int)), inflight = 0;
    int *slot = ir_xmalloc(sizeof(int) * (size_t)p->m), *done = ir_xcalloc((size_t)p->m, sizeof(int));
    int per = (p->split_w ? 3 : 2) * p->nch;   /* tasks of a micro-batch on the stage */
    char *used = ir_xcalloc((size_t)p->m + 1, 1), n1[24], n2[24];
    int rc = 0;
    p->nslot[st] = 0;
    for (int k = 0; k < ntask(p) && !rc; k++) {
        int kd = t[k].kind, mb = t[k].mb, cl = kd + 3 * t[k].chunk;
        ir_task want = t[k], prev = t[k];
        want.mb = cnt[cl];
        prev.kind = kd - 1;
        if (mb != cnt[cl])
            rc = pass_error(g, g->req.order_line, "a stage runs each kind of task in micro-batch order",
                            "[plan] order: stage %d runs %s where %s is next", st, pass_pipe_task_name(p, &t[k], n1, sizeof n1),
                            pass_pipe_task_name(p, &want, n2, sizeof n2));
        else if (kd > IR_TASK_F && mb >= cnt[cl - 1])
            rc = pass_error(g, g->req.order_line, "a micro-batch runs F, then B, then W",
                            "[plan] order: stage %d runs %s before %s", st, pass_pipe_task_name(p, &t[k], n1, sizeof n1),
                            pass_pipe_task_name(p, &prev, n2, sizeof n2));
        if (rc) break;
        cnt[cl]++;
        if (done[mb]++ == 0) {
            int s = 0;
            while (used[s]) s++;
            used[s] = 1;
            slot[mb] = s;
            if (++inflight > p->nslot[st]) p->nslot[st] = inflight;
        }
        t[k].slot = slot[mb];
        if (done[mb] == per) used[t[k].slot] = 0, inflight--;
    }
    free(cnt);
    free(slot);
    free(done);
    free(used);
    return rc;
}

/* ---- each rank's items in pipeline order */

/* Is item n (a schedule position) a transfer between stages that may move
 * within its task (not a receive that adds into its output: what it adds to
 * is written by the task's other items)?  *peer: the stage it talks to,
 * *recv: this rank receives (member k). */
static int transfer(const ir_dist *d, int n, int k, int my, int *peer, int *recv)
{
    const ir_item *it = &d->seq[n];
    if (!it->comm) return 0;
    const ir_comm *c = &d->comm[it->id];
    if (c->kind != IR_COMM_SENDRECV && c->kind != IR_COMM_BROADCAST) return 0;
    if (k != c->root && c->acc) return 0;   /* adds into what the task's other items write: stays */
    const int *m = d->ints + d->grp[c->group].devs;
    int other = k == c->root ? (c->root == 0 ? 1 : 0) : c->root;
    if (other >= c->n) return 0;
    *peer = stage_of(d, m[other]);
    *recv = k != c->root;
    return *peer != my;
}

/* Is item n a send/recv that rank (member k) lowers to the one call alone,
 * without packing through scratch?  *nf: its floats (words: bf16 in pairs). */
static int direct(const ir_dist *d, int n, int k, int64_t *nf)
{
    const ir_item *it = &d->seq[n];
    if (!it->comm) return 0;
    const ir_comm *c = &d->comm[it->id];
    if (c->kind != IR_COMM_SENDRECV || c->n != 2) return 0;
    int pt = k == c->root ? d->ints[c->in + k] : d->ints[c->out + k];
    if (pt < 0 || (k != c->root && c->acc) || !ir_box_eq(&c->region, &d->pt[pt].box, d->g->t[c->tensor].ndim))
        return 0;
    /* a bf16 tensor: one call only on the bf16 wire (else lower.c widens and narrows around it) */
    int w16 = pass_comm_wire16(d, it->id);
    if (d->t16 && d->t16[c->tensor] && !w16) return 0;
    ir_box r = pass_mbbox(d, c->tensor, &c->region, IR_SEC_MB);
    int64_t e = ir_box_numel(&r, d->g->t[c->tensor].ndim);
    *nf = w16 ? (e + 1) / 2 : e * pass_elsize(&d->g->t[c->tensor]) / 4;
    return 1;
}

/* Does item n (member k of a comm, or a sub-op) touch pTensor pt (wr: only
 * writes count)? */
static int touches(const ir_dist *d, int n, int k, int pt, int wr)
{
    const ir_item *it = &d->seq[n];
    if (it->comm) {
        const ir_comm *c = &d->comm[it->id];
        return d->ints[c->out + k] == pt || (!wr && d->ints[c->in + k] == pt);
    }
    const ir_subop *so = &d->sop[it->id];
    const ir_op *o = &d->g->op[so->op];
    for (int j = 0; j < o->nout; j++)
        if (so->out[j] == pt) return 1;
    for (int j = 0; j < o->nin && !wr; j++)
        if (so->in[j] == pt) return 1;
    return 0;
}

/* May transfer item q of the rank (on stage st, in task class cls) move
 * to the start of its task (a receive) or the end (a send)?  Not when an
 * item it passes touches what it writes (a receive) or writes what it reads
 * (a send), or is a comm the other rank takes part in. */
static int movable(const ir_dist *d, const int *item, const int *mem, int nitem, int q, int st, int cls, int recv)
{
    const ir_comm *c = &d->comm[d->seq[item[q]].id];
    int k = mem[q], pt = recv ? d->ints[c->out + k] : d->ints[c->in + k];
    const int *gm = d->ints + d->grp[c->group].devs;
    for (int j = recv ? 0 : q + 1; j < (recv ? q : nitem); j++) {
        if (d->seq[item[j]].sec != IR_SEC_MB || pass_pipe_class(d, item[j], st) != cls) continue;
        if (touches(d, item[j], mem[j], pt, !recv)) return 0;
        /* nor past a collective the other rank takes part in (the tasks of ops
           on every stage, interlaced): the two would meet them in other orders */
        const ir_item *it = &d->seq[item[j]];
        if (!it->comm || c->n != 2) continue;
        const ir_comm *c2 = &d->comm[it->id];
        if (c2->kind == IR_COMM_SENDRECV || (c2->kind == IR_COMM_BROADCAST && c2->n == 2)) continue;
        const int *g2 = d->ints + d->grp[c2->group].devs;
        for (int a = 0; a < c2->n; a++)
            if (g2[a] == gm[k == 0 ? 1 : 0]) return 0;
    }
    return 1;
}

/* Item n, of which this rank is member k, as a transfer between two ranks
 * (a send or receive, a broadcast of two): 1 this rank receives, 0 it
 * sends, *other the other rank; -1 not such a transfer. */
static int p2p_dir(const ir_dist *d, int n, int k, int *other)
{
    const ir_item *it = &d->seq[n];
    if (!it->comm) return -1;
    const ir_comm *c = &d->comm[it->id];
    if ((c->kind != IR_COMM_SENDRECV && c->kind != IR_COMM_BROADCAST) || c->n != 2) return -1;
    *other = d->ints[d->grp[c->group].devs + (k == 0 ? 1 : 0)];
    return k != c->root;
}

/* The index in stage ss's task list of the task that runs item n of
 * micro-batch mb there. */
static int task_of(const ir_dist *d, int n, int mb, int ss)
{
    const ir_pipe *p = d->pipe;
    int cls = pass_pipe_class(d, n, ss);
    for (int k = 0; k < ntask(p); k++) {
        const ir_task *t = &p->task[p->task0[ss] + k];
        if (t->mb == mb && t->kind + 3 * t->chunk == cls) return k;
    }
    return -1;
}

/* In one call, does transfer x go before y?  By peer stage, receive before
 * send, then as the sender sends them: by its task, schedule position (the
 * runtimes match the transfers between two ranks in one direction in call
 * order; a receive posted early may share a call with a later one the
 * sender makes in an earlier call). */
static int p2p_before(const ir_dist *d, const int *item, const int *mem, int st, const pass_pipe_ent *x,
                      const pass_pipe_ent *y)
{
    int px, rx, py, ry;
    transfer(d, item[x->q], mem[x->q], st, &px, &rx);
    transfer(d, item[y->q], mem[y->q], st, &py, &ry);
    if (px != py) return px < py;
    if (rx != ry) return rx > ry;
    int tx = task_of(d, item[x->q], x->mb, rx ? px : st), ty = task_of(d, item[y->q], y->mb, ry ? py : st);
    if (tx != ty) return tx < ty;
    return item[x->q] < item[y->q];
}

/* Receive x in the run e[a .. b) where two tasks meet: does the run hold a
 * receive posted early from x's sender, and send it something that the
 * sender takes only in a later task than the one that makes that receive's
 * transfer (tpeer: per item, its peer stage)?  Then the receives from that
 * sender go before those sends: the sender waits in them and reaches the
 * sends' receives only after them. */
static int recv_first(const ir_dist *d, const int *item, const int *mem, const int *tpeer, const pass_pipe_ent *e,
                      int a, int b, const pass_pipe_ent *x)
{
    int ox, o;
    if (p2p_dir(d, item[x->q], mem[x->q], &ox) != 1) return 0;
    for (int i = a; i < b; i++) {
        if (!e[i].hoisted || p2p_dir(d, item[e[i].q], mem[e[i].q], &o) != 1 || o != ox) continue;
        int ki = task_of(d, item[e[i].q], e[i].mb, tpeer[e[i].q]);
        for (int j = a; j < b; j++)
            if (p2p_dir(d, item[e[j].q], mem[e[j].q], &o) == 0 && o == ox &&
                task_of(d, item[e[j].q], e[j].mb, tpeer[e[j].q]) > ki)
                return 1;
    }
    return 0;
}

/* Rank's order (pass_pipe_order); lean: a run of items that are not comms
 * as its first alone (the check's use: the comms in the same order, the
 * same runs of transfers in one call); with qrun (the span's, lean), *qrun
 * gets per item of the rank the cost of the run of compute it stands for (0
 * for the others). */
static int order(const ir_dist *d, int rank, int lean, pass_pipe_ent **out, double **qrun)
{
    const ir_pipe *p = d->pipe;
    IR_ASSERT(p && d->rank_item0);
    const int *item = d->rank_item + d->rank_item0[rank], *mem = d->rank_member + d->rank_item0[rank];
    int nitem = d->rank_item0[rank + 1] - d->rank_item0[rank], st = stage_of(d, rank), nmb = 0;
    for (int q = 0; q < nitem; q++) nmb += d->seq[item[q]].sec == IR_SEC_MB;
    pass_pipe_ent *e = ir_xmalloc(sizeof *e * ((size_t)nmb * (size_t)p->m + 1));
    int n = 0;
    const ir_task *t = p->task + p->task0[st];
    /* this rank's moved transfers (pass_pipeline): item q of micro-batch mb
       at the start of task hk (a receive posted early) or at its end (hl: a
       send made late) */
    size_t hn = (size_t)p->nhoist + 1;
    int nh = 0, *hq = ir_xmalloc(sizeof(int) * hn), *hmb = ir_xmalloc(sizeof(int) * hn);
    int *hk = ir_xmalloc(sizeof(int) * hn), *hl = ir_xmalloc(sizeof(int) * hn);
    for (int h = 0; h < p->nhoist; h++) {
        const ir_hoist *x = &p->hoist[h];
        if (x->rank != rank) continue;
        /* schedule position -> this rank's first item there (item[] ascends) */
        int lo = 0, hi = nitem;
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (item[mid] < x->n) lo = mid + 1;
            else hi = mid;
        }
        IR_ASSERT(lo < nitem && item[lo] == x->n);
        hq[nh] = lo;
        hmb[nh] = x->mb, hl[nh] = x->late, hk[nh++] = x->task;
    }
    /* per item, once (not per task): its task class, and whether it is a
       transfer that may move (0 stays, 1 a receive that moves, 2 a send; in
       a task of every stage, interlaced's, one its peer takes in the same
       task stays: every rank of the meeting keeps the schedule's order,
       which cannot deadlock);
       the mb items bucketed by class, in a task's order within one */
    int ncls = 3 * (p->nch + 2) + 1;
    int *mv = ir_xmalloc(sizeof(int) * ((size_t)nitem + 1)), *cls0 = ir_xcalloc((size_t)ncls + 1, sizeof(int));
    int *byc = ir_xmalloc(sizeof(int) * ((size_t)nitem + 1)), *qcls = ir_xmalloc(sizeof(int) * ((size_t)nitem + 1));
    /* per item, once: a transfer between stages (tx: 1, 3 when also direct), its peer stage, a receive */
    int *tx = ir_xmalloc(sizeof(int) * 3 * ((size_t)nitem + 1)), *tpeer = tx + nitem + 1, *trecv = tpeer + nitem + 1;
    for (int q = 0; q < nitem; q++) {
        int peer, recv, c = d->seq[item[q]].sec == IR_SEC_MB ? pass_pipe_class(d, item[q], st) : -1;
        IR_ASSERT(c < ncls);
        qcls[q] = c;
        mv[q] = tx[q] = 0;
        if (c < 0) continue;
        cls0[c + 1]++;
        int64_t nf;
        if (!transfer(d, item[q], mem[q], st, &peer, &recv)) continue;
        tx[q] = 1 | (direct(d, item[q], mem[q], &nf) ? 2 : 0), tpeer[q] = peer, trecv[q] = recv;
        /* (in a task of every stage whose peer takes it in the same task: stays) */
        int meet = c / 3 >= p->v && d->item_chunk[(size_t)item[q] * (size_t)d->mesh_pp + (size_t)peer] == c / 3;
        if (!meet && movable(d, item, mem, nitem, q, st, c, recv)) mv[q] = recv ? 1 : 2;
    }
    /* a transfer moves only with those of its task between the same two ranks in the same direction
       that stay: a receive not before an earlier one from its sender, a send not after a later one to
       its receiver (the runtimes match them in call order, and the other rank keeps them in schedule
       order); until nothing changes */
    {   /* (the transfers between two ranks of each class, by class and position: pq[p0[c] ..]) */
        int *p0 = ir_xcalloc((size_t)ncls + 2, sizeof(int)), *pq = ir_xmalloc(sizeof(int) * ((size_t)nitem + 1));
        int *pdir = ir_xmalloc(sizeof(int) * 2 * ((size_t)nitem + 1)), *poth = pdir + nitem + 1;
        for (int q = 0; q < nitem; q++) {
            pdir[q] = qcls[q] >= 0 ? p2p_dir(d, item[q], mem[q], &poth[q]) : -1;
            if (pdir[q] >= 0) p0[qcls[q] + 1]++;
        }
        for (int c = 0; c < ncls; c++) p0[c + 1] += p0[c];
        int *at = ir_xmalloc(sizeof(int) * ((size_t)ncls + 1));
        memcpy(at, p0, sizeof(int) * (size_t)ncls);
        for (int q = 0; q < nitem; q++)
            if (pdir[q] >= 0) pq[at[qcls[q]]++] = q;
        free(at);
        for (int changed = 1; changed;) {
            changed = 0;
            for (int c = 0; c < ncls; c++)
                for (int i = p0[c]; i < p0[c + 1]; i++) {
                    int q = pq[i];
                    if (!mv[q]) continue;
                    for (int x = pdir[q] ? p0[c] : i + 1; x < (pdir[q] ? i : p0[c + 1]) && mv[q]; x++) {
                        int j = pq[x];
                        if (!mv[j] && pdir[j] == pdir[q] && poth[j] == poth[q]) mv[q] = 0, changed = 1;
                    }
                }
        }
        free(p0), free(pq), free(pdir);
    }
    for (int c = 0; c < ncls; c++) cls0[c + 1] += cls0[c];
    {   /* within a class: the receives that move, the items that stay, the sends that move (a task's order) */
        int *at = ir_xmalloc(sizeof(int) * ((size_t)ncls + 1));
        memcpy(at, cls0, sizeof(int) * (size_t)ncls);
        for (int pass = 0; pass < 3; pass++)
            for (int q = 0; q < nitem; q++)
                if (qcls[q] >= 0 && pass == (mv[q] == 0 ? 1 : mv[q] == 1 ? 0 : 2)) byc[at[qcls[q]]++] = q;
        free(at);
    }
    if (lean) {   /* (in place: w <= j) */
        int w = 0;
        double *rc = qrun ? ir_xcalloc((size_t)nitem + 1, sizeof(double)) : NULL;
        for (int c = 0; c < ncls; c++) {
            int a = cls0[c], b = cls0[c + 1], rep = -1;   /* rep: the run's first */
            cls0[c] = w;
            for (int j = a; j < b; j++) {
                int q = byc[j], comm = d->seq[item[q]].comm;
                if (comm || j == a || d->seq[item[byc[j - 1]]].comm) byc[w++] = q, rep = comm ? -1 : q;
                if (rc && !comm) rc[rep] += pass_item_time(d, item[q]);
            }
        }
        cls0[ncls] = w;
        if (qrun) *qrun = rc;
    }
    /* which item of which micro-batch moved (moved[q * m + mb]); the moved
       transfers by task and side, in hoist order (hby[hat[2k + late] ...]);
       each micro-batch's slot */
    int nt = ntask(p);
    char *moved = ir_xcalloc((size_t)nitem * (size_t)p->m + 1, 1);
    int *hat = ir_xcalloc(2 * (size_t)nt + 2, sizeof(int)), *hby = ir_xmalloc(sizeof(int) * hn);
    int *mbslot = ir_xmalloc(sizeof(int) * ((size_t)p->m + 1));
    for (int h = 0; h < nh; h++) {
        IR_ASSERT(hmb[h] >= 0 && hmb[h] < p->m && hk[h] >= 0 && hk[h] < nt);
        moved[(size_t)hq[h] * (size_t)p->m + (size_t)hmb[h]] = 1;
        hat[2 * hk[h] + hl[h] + 1]++;
    }
    for (int i = 0; i < 2 * nt; i++) hat[i + 1] += hat[i];
    {
        int *at = ir_xmalloc(sizeof(int) * (2 * (size_t)nt + 1));
        memcpy(at, hat, sizeof(int) * 2 * (size_t)nt);
        for (int h = 0; h < nh; h++) hby[at[2 * hk[h] + hl[h]]++] = h;
        free(at);
    }
    for (int mb = 0; mb < p->m; mb++) mbslot[mb] = -1;
    for (int j = nt - 1; j >= 0; j--)
        if (t[j].mb >= 0 && t[j].mb < p->m) mbslot[t[j].mb] = t[j].slot;
    for (int k = 0; k < nt; k++) {
        int start = n, cls = t[k].kind + 3 * t[k].chunk;
        /* the task's items: its receives from other stages first, its sends
           to other stages last, everything else in schedule order between
           (the buffers of transfers are stash, which nothing else shares);
           receives hoisted here from later tasks first of all */
        for (int late = 0; late < 2; late++) {
            for (int j = cls0[cls]; j < cls0[cls + 1] && !late; j++) {
                int q = byc[j];
                if (!moved[(size_t)q * (size_t)p->m + (size_t)t[k].mb])
                    e[n++] = (pass_pipe_ent){q, t[k].mb, t[k].slot, k, 0, 0, mv[q] != 0};
            }
            /* early receives first (before the task's own items, the last
               moved first), late sends last */
            int h0 = hat[2 * k + late], nk = hat[2 * k + late + 1] - h0;
            if (!late && nk) {
                memmove(e + start + nk, e + start, sizeof *e * (size_t)(n - start));
                for (int i = 0; i < nk; i++) {
                    int h = hby[h0 + nk - 1 - i];
                    e[start + i] = (pass_pipe_ent){hq[h], hmb[h], mbslot[hmb[h]], k, 0, 1, 1};
                }
                n += nk;
            }
            for (int i = 0; late && i < nk; i++) {
                int h = hby[h0 + i];
                e[n++] = (pass_pipe_ent){hq[h], hmb[h], mbslot[hmb[h]], k, 0, 1, 1};
            }
        }
        if (k == 0) continue;
        /* the boundary: the previous task's trailing transfers and this one's
           leading ones; with a lower stage receive first, with a higher send first */
        int a = start, b = start;
#define MOVES(x) (tx[e[x].q] && (e[x].hoisted || mv[e[x].q]))
        while (a > 0 && e[a - 1].task == k - 1 && MOVES(a - 1)) a--;
        while (b < n && MOVES(b)) b++;
#undef MOVES
        if (a == start || b == start) continue;
        /* a stable insertion sort by (lower peer: recv 0 send 1; higher peer: send 3 recv 4); where
           the run is longer than one call and cut_recv (pass_pipeline's retry where the order fails
           without), the receives from a higher peer go before the sends (2, as
           the sender makes them) where one is posted early and the peer takes one of the sends only
           after it makes that one: the peer waits in it, and could not reach that send's receive
           (recv_first) */
        int nd = 0;
        for (int i = a; i < b; i++) nd += tx[e[i].q] == 3;
        for (int i = a + 1; i < b; i++) {
            pass_pipe_ent x = e[i];
#define KIND(x_) (tpeer[(x_).q] < st ? trecv[(x_).q] ? 0 : 1 : !trecv[(x_).q] ? 3                           \
                  : p->cut_recv && nd > PASS_P2P_MAX && recv_first(d, item, mem, tpeer, e, a, b, &(x_)) ? 2 : 4)
            int kx = KIND(x), j = i;
            while (j > a) {
                int kj = KIND(e[j - 1]);
                if (kj < kx || (kj == kx && (kx != 2 || !p2p_before(d, item, mem, st, &x, &e[j - 1])))) break;
                e[j] = e[j - 1];
                j--;
            }
            e[j] = x;
        }
#undef KIND
    }
    /* where a task starts with sums it receives from a lower stage (a zeroing and receives that add:
       they stay in their task) and the task before ends with sends to a lower stage, those sends go
       after the sums: with a lower stage receive first (above), or the two ranks both send first
       (their buffers are stash, the sums' their own micro-batch's) -- where that stage makes the
       sums before it takes the sends */
    for (int k = 1, start = 0; k < nt; k++) {   /* (e by task) */
        while (start < n && e[start].task < k) start++;
        if (start == n || e[start].task != k) continue;
        int g = start, sums = 0;
        for (; g < n && e[g].task == k && d->seq[item[e[g].q]].comm; g++) {
            const ir_comm *c = &d->comm[d->seq[item[e[g].q]].id];
            int o;
            if (c->kind == IR_COMM_ZERO) continue;
            if (c->kind != IR_COMM_SENDRECV || !c->acc || p2p_dir(d, item[e[g].q], mem[e[g].q], &o) != 1 ||
                stage_of(d, o) >= st)
                break;
            sums++;
        }
        if (!sums) continue;
        int a = start;   /* the task before's trailing sends to a lower stage */
        while (a > 0 && e[a - 1].task == k - 1 && tx[e[a - 1].q] && !trecv[e[a - 1].q] && tpeer[e[a - 1].q] < st &&
               (e[a - 1].hoisted || mv[e[a - 1].q]))
            a--;
        /* not where that stage takes those sends before it makes the sums (in the task that sends
           them or an earlier one): there it waits for them, and they go first */
        int first = 1;
        for (int y = start; y < g && first; y++) {
            int o;
            if (p2p_dir(d, item[e[y].q], mem[e[y].q], &o) != 1) continue;
            int so = stage_of(d, o), ky = task_of(d, item[e[y].q], e[y].mb, so);
            for (int x = a; x < start && first; x++)
                if (tpeer[e[x].q] == so && task_of(d, item[e[x].q], e[x].mb, so) <= ky) first = 0;
        }
        if (a == start || !first) continue;
        pass_pipe_ent *tmp = ir_xmalloc(sizeof *tmp * (size_t)(start - a));
        memcpy(tmp, e + a, sizeof *tmp * (size_t)(start - a));
        memmove(e + a, e + start, sizeof *e * (size_t)(g - start));
        memcpy(e + a + (g - start), tmp, sizeof *tmp * (size_t)(start - a));
        for (int i = a + (g - start); i < g; i++) e[i].task = k, e[i].merge = 0;
        free(tmp);
        start = g;
    }
    /* every run of transfers that may move (a task's first receives, its last
       sends, and where two tasks meet, both) goes in one call (rt_k_p2p, at
       most PASS_P2P_MAX each): they progress together, so ranks that both
       send before they receive do not wait for each other */
    int run = 0;
    for (int i = 0; i < n; i++) {
        if (tx[e[i].q] != 3 || (!e[i].hoisted && !mv[e[i].q])) {
            run = 0;
            continue;
        }
        if (run > 0 && run < PASS_P2P_MAX) e[i].merge = 1, run++;
        else run = 1;
    }
    /* one call's transfers in an order both sides agree on: the runtimes
       (shared memory, NCCL groups) match transfers between two ranks in one
       direction in call order; by peer, direction, micro-batch, position */
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && e[j].merge) j++;
        for (int a = i + 1; a < j; a++) {
            pass_pipe_ent x = e[a];
            int b = a;
            while (b > i && p2p_before(d, item, mem, st, &x, &e[b - 1])) e[b] = e[b - 1], b--;
            e[b] = x;
        }
        for (int a = i; a < j; a++) e[a].merge = a > i;
        i = j;
    }
    free(hq);
    free(hmb);
    free(hk);
    free(hl);
    free(mv);
    free(tx);
    free(moved);
    free(hat);
    free(hby);
    free(mbslot);
    free(cls0);
    free(byc);
    free(qcls);
    *out = e;
    return n;
}

int pass_pipe_order(const ir_dist *d, int rank, pass_pipe_ent **out) { return order(d, rank, 0, out, NULL); }

/* ---- the deadlock check */

/* Instances i, i + 1, ... joined to i (before end): the length of the step at i. */
static int steplen(const char *joined, int i, int end)
{
    int n = 1;
    while (i + n < end && joined[i + n]) n++;
    return n;
}

/* A comm instance: comm id and micro-batch. */
typedef struct inst {
    int comm, mb;
} inst;

/* Every rank's collectives and transfers of one step (the mb section in
 * pipeline order; the other sections follow the global order, deadlock-free
 * by construction) must each find all its members.  Returns 0 or 2 after a
 * message naming two ranks that wait on each other.
 *
 * With hoist (not NULL), where ranks wait on each other, a rank that sends
 * to a rank waiting between two tasks gets that rank's receive posted
 * there (*hoist, *nhoist grow): the receive's buffer is its micro-batch's
 * stash, which nothing else touches before it, so it may be received early
 * (Megatron's interleaved schedule posts its receives so); with oc it then
 * goes on from where the ranks wait (below), and returns 1 (check again
 * from the start) only where it cannot; 2 with no receive possible. */
typedef struct ord_cache {   /* settle's rounds: each rank's order, made again only after its hoists change */
    pass_pipe_ent **e;
    int *n;
    char *stale;
    double **qrun;   /* per rank: its order's run costs (order's *qrun), for the span */
} ord_cache;

/* The comm instances of ranks' orders, rank after rank. */
typedef struct ilist {
    inst *seq;
    int *task;      /* per instance: the task index (messages) */
    char *joined;   /* per instance: in one call with the previous one (a step of two) */
    int *nat;       /* per instance: its schedule position */
    char *flag;     /* per instance: 1 a transfer between tasks (moved to a task's edge), 2 a receive, 4 direct */
    double *pre;    /* span: per instance, the compute before it since the rank's previous instance */
    int n, cap, tcap;
} ilist;

static void ilist_free(ilist *L)
{
    free(L->seq);
    free(L->task);
    free(L->joined);
    free(L->nat);
    free(L->flag);
    free(L->pre);
}

/* Rank r's instances in its order e (n entries) appended to L: with flags,
 * their transfer flags (the hoists' use); with qrun (span: e lean, qrun per
 * item of the rank the cost of the run of compute it stands for, order's),
 * the compute before each and after the last (*tail). */
static void rank_insts(const ir_dist *d, int r, const pass_pipe_ent *e, int n, int flags, const double *qrun, ilist *L,
                       double *tail)
{
    const int *item = d->rank_item + d->rank_item0[r], *mem = d->rank_member + d->rank_item0[r];
    int st = stage_of(d, r), nitem = d->rank_item0[r + 1] - d->rank_item0[r];
    signed char *qflag = ir_xmalloc((size_t)nitem + 1);
    int *qid = ir_xmalloc(sizeof(int) * ((size_t)nitem + 1));   /* per item: its comm, or -1 */
    memset(qflag, -1, (size_t)nitem + 1);
    for (int q = 0; q < nitem; q++) qid[q] = d->seq[item[q]].comm ? d->seq[item[q]].id : -1;
    double run = 0;   /* (span) compute since the previous instance */
    for (int i = 0; i < n; i++) {
        int q = e[i].q;
        if (qid[q] < 0) {
            if (qrun) run += qrun[q];
            continue;
        }
        int c = L->n;
        *IR_PUSH(L->seq, L->n, L->cap) = (inst){qid[q], e[i].mb};
        if (L->tcap < L->cap) {
            L->task = ir_xrealloc(L->task, sizeof(int) * (size_t)L->cap);
            L->joined = ir_xrealloc(L->joined, (size_t)L->cap);
            L->nat = ir_xrealloc(L->nat, sizeof(int) * (size_t)L->cap);
            L->flag = ir_xrealloc(L->flag, (size_t)L->cap);
            if (qrun) L->pre = ir_xrealloc(L->pre, sizeof(double) * (size_t)L->cap);
            L->tcap = L->cap;
        }
        if (qrun) L->pre[c] = run, run = 0;
        L->task[c] = e[i].task;
        L->joined[c] = (char)e[i].merge;
        L->nat[c] = item[q];
        L->flag[c] = 0;
        if (!flags || !e[i].moves) continue;   /* (the flags serve the hoists alone) */
        signed char *f = &qflag[q];   /* the item's flags, once per rank */
        if (*f < 0) {
            int peer, recv;
            int64_t nf;
            int tr = transfer(d, item[q], mem[q], st, &peer, &recv);
            *f = (signed char)(tr | (tr && recv ? 2 : 0) | (tr && direct(d, item[q], mem[q], &nf) ? 4 : 0));
        }
        L->flag[c] = (char)*f;
    }
    free(qflag);
    free(qid);
    if (tail) *tail = run;
}

/* Union-find: x's root (roots are their sets' smallest members), halving the path. */
static int uf_find(int *uf, int x)
{
    while (uf[x] != x) x = uf[x] = uf[uf[x]];
    return x;
}

static int check(const ir_dist *d, int quiet, ir_hoist **hoist, int *nhoist, ord_cache *oc, double *span)
{
    const ir_graph *g = d->g;
    const ir_pipe *p = d->pipe;
    int W = d->ndev, m = p->m;
    int *at0 = ir_xcalloc((size_t)W + 1, sizeof(int)), *ptr = ir_xcalloc((size_t)W + 1, sizeof(int));
    ilist L = {0};
    double *tail = span ? ir_xcalloc((size_t)W + 1, sizeof(double)) : NULL;   /* per rank: after its last */
    char *mask = NULL;      /* span: the ranks rank 0's collectives and transfers of the micro-batches reach
                               (the others, dp replicas of them, run the same) */
    if (span) {
        /* the ranks joined to rank 0 by the micro-batches' comms: one pass, union-find */
        int *uf = ir_xmalloc(sizeof(int) * ((size_t)W + 1));
        for (int r = 0; r < W; r++) uf[r] = r;
        for (int n = 0; n < d->nseq; n++) {
            const ir_item *it = &d->seq[n];
            if (!it->comm || it->sec != IR_SEC_MB) continue;
            const ir_comm *c = &d->comm[it->id];
            const int *mm = d->ints + d->grp[c->group].devs;
            for (int k = 1; k < c->n; k++) {
                int a = uf_find(uf, mm[0]), b = uf_find(uf, mm[k]);
                if (a != b) uf[a > b ? a : b] = a < b ? a : b;
            }
        }
        mask = ir_xcalloc((size_t)W + 1, 1);
        for (int r = 0; r < W; r++) mask[r] = uf_find(uf, r) == 0;
        free(uf);
    }
    for (int r = 0; r < W; r++) {
        pass_pipe_ent *e;
        int n;
        if (mask && !mask[r]) {   /* (not timed: done at once) */
            at0[r] = L.n;
            continue;
        }
        double *qrun = NULL;
        if (oc && !oc->stale[r]) e = oc->e[r], n = oc->n[r], qrun = oc->qrun[r];
        else {
            n = order(d, r, 1, &e, span || oc ? &qrun : NULL);
            if (oc) {
                free(oc->e[r]), free(oc->qrun[r]);
                oc->e[r] = e, oc->n[r] = n, oc->qrun[r] = qrun, oc->stale[r] = 0;
            }
        }
        at0[r] = L.n;
        rank_insts(d, r, e, n, hoist != NULL, span ? qrun : NULL, &L, span ? &tail[r] : NULL);
        if (!oc) free(e), free(qrun);
    }
    at0[W] = L.n;
    int nseq = L.n;
    inst *seq = L.seq;
    int *task = L.task, *nat = L.nat;
    char *joined = L.joined, *flag = L.flag;
    double *pre = L.pre;
    /* A rank is at a step: one instance, or two joined in one call.  An
       instance completes once every member is at a step holding it; a rank
       moves on when its step's instances are complete. */
    int *cnt = ir_xcalloc((size_t)d->ncomm * (size_t)m + 1, sizeof(int));
    int *cn = ir_xmalloc(sizeof(int) * ((size_t)d->ncomm + 1));   /* per comm: its members (d->comm's, dense) */
    for (int i = 0; i < d->ncomm; i++) cn[i] = d->comm[i].n;
    int *left = ir_xcalloc((size_t)W + 1, sizeof(int));   /* per rank: incomplete instances of its step */
    /* span: an instance starts once its last member arrives and takes its cost; a rank's step ends
       with its last instance, and it arrives at the next after the compute between */
    double *clock = span ? ir_xcalloc((size_t)W + 1, sizeof(double)) : NULL;   /* per rank: its step's end */
    double *tin = span ? ir_xcalloc((size_t)d->ncomm * (size_t)m + 1, sizeof(double)) : NULL;   /* per instance:
                                                                                      the last member's arrival */
    double *ccost = NULL;   /* span: per comm, one execution's seconds (-1: not yet) */
    if (span) {
        ccost = ir_xmalloc(sizeof(double) * ((size_t)d->ncomm + 1));
        for (int i = 0; i < d->ncomm; i++) ccost[i] = -1;
    }
    inst *ready = ir_xmalloc(sizeof(inst) * ((size_t)nseq + 1));
    int nready = 0;
    for (int r = 0; r < W; r++) ptr[r] = at0[r];
    /* step length at position i of rank r */
#define STEPLEN(r, i) steplen(joined, i, at0[(r) + 1])
#define ARRIVE(r)                                                                              \
    do {                                                                                       \
        if (ptr[r] < at0[(r) + 1]) {                                                           \
            left[r] = STEPLEN(r, ptr[r]);                                                      \
            for (int j_ = 0; clock && j_ < left[r]; j_++) clock[r] += pre[ptr[r] + j_];       \
            for (int j_ = 0; j_ < left[r]; j_++) {                                             \
                inst a_ = seq[ptr[r] + j_];                                                    \
                if (tin) {                                                                     \
                    double *t_ = &tin[(size_t)a_.comm * (size_t)m + (size_t)a_.mb];            \
                    if (clock[r] > *t_) *t_ = clock[r];                                        \
                }                                                                              \
                if (++cnt[(size_t)a_.comm * (size_t)m + (size_t)a_.mb] == cn[a_.comm])        \
                    ready[nready++] = a_;                                                      \
            }                                                                                  \
        }                                                                                      \
    } while (0)
    for (int r = 0; r < W; r++) ARRIVE(r);
    /* a transfer between two ranks completes only after the ones before it
       in the same direction in both calls (the runtimes match them in call
       order); one that would overtake waits (deferred) */
    char *fin = ir_xcalloc((size_t)d->ncomm * (size_t)m + 1, 1);
    inst *defer = ir_xmalloc(sizeof(inst) * ((size_t)nseq + 1));
    int ndefer = 0;
#define FIN(a_) fin[(size_t)(a_).comm * (size_t)m + (size_t)(a_).mb]
    int rc = 0, added = 0;
    char *patched = oc && hoist ? ir_xmalloc((size_t)W + 1) : NULL;   /* resumed: the ranks on new orders */
resume:
    for (int h = 0;;) {
        int progress = 0;
        for (; h < nready; h++) {
            inst x = ready[h];
            const ir_comm *c = &d->comm[x.comm];
            int ok = 1;
            for (int k = 0; k < c->n && ok && c->kind == IR_COMM_SENDRECV && c->n == 2; k++) {
                int r = d->ints[d->grp[c->group].devs + k];
                for (int i = ptr[r]; i < at0[r + 1] && i < ptr[r] + steplen(joined, ptr[r], at0[r + 1]); i++) {
                    if (seq[i].comm == x.comm && seq[i].mb == x.mb) break;
                    const ir_comm *c2 = &d->comm[seq[i].comm];
                    if (!FIN(seq[i]) && c2->kind == IR_COMM_SENDRECV && c2->group == c->group && c2->root == c->root)
                        ok = 0;
                }
            }
            if (!ok) {
                defer[ndefer++] = x;
                continue;
            }
            FIN(x) = 1;
            progress = 1;
            double done = 0;
            if (tin) {
                if (ccost[x.comm] < 0) ccost[x.comm] = pass_cost_comm(d, c);
                done = tin[(size_t)x.comm * (size_t)m + (size_t)x.mb] + ccost[x.comm];
            }
            for (int k = 0; k < c->n; k++) {
                int r = d->ints[d->grp[c->group].devs + k];
                IR_ASSERT(ptr[r] < at0[r + 1] && left[r] > 0);
                if (clock && done > clock[r]) clock[r] = done;   /* (the step ends with its last instance) */
                if (--left[r] == 0) {
                    ptr[r] += STEPLEN(r, ptr[r]);
                    ARRIVE(r);
                }
            }
        }
        /* the deferred go again once something completed since they were */
        if (!ndefer || !progress) break;
        memcpy(ready, defer, sizeof(inst) * (size_t)ndefer);
        nready = ndefer, ndefer = 0, h = 0;
    }
    if (span) {   /* every rank through its order: the slowest's end */
        int all = 1;
        *span = 0;
        for (int r = 0; r < W; r++) {
            if (!mask[r]) continue;
            all &= ptr[r] == at0[r + 1];
            if (clock[r] + tail[r] > *span) *span = clock[r] + tail[r];
        }
        if (!all) *span = 0;
    }
    for (int r = 0; r < W && hoist; r++) {
        if (ptr[r] == at0[r + 1]) continue;
        int len = steplen(joined, ptr[r], at0[r + 1]);
        for (int j = ptr[r]; j < ptr[r] + len; j++) {
            inst x = seq[j];
            const ir_comm *c = &d->comm[x.comm];
            if (FIN(x) || c->kind != IR_COMM_SENDRECV || c->n != 2)
                continue;
            int o = d->ints[d->grp[c->group].devs + (c->root == 0 ? 1 : 0)];
            if (d->ints[d->grp[c->group].devs + c->root] != r || ptr[o] == at0[o + 1]) continue;   /* r sends */
            /* o waits between two tasks (every transfer of its step moves to a task edge), or in a
               task of every stage (interlaced), whose transfers and collectives stay: then the edge
               before that task */
            int ol = steplen(joined, ptr[o], at0[o + 1]), ok = ol < PASS_P2P_MAX, po = -1, so = stage_of(d, o);
            int inside = ol == 1 && !(flag[ptr[o]] & 1) && p->task[p->task0[so] + task[ptr[o]]].chunk >= p->v;
            for (int i = ptr[o]; i < ptr[o] + ol && !inside; i++) ok &= flag[i] & 1;
            for (int i = ptr[o] + ol; i < at0[o + 1] && ok && po < 0; i++)
                if (seq[i].comm == x.comm && seq[i].mb == x.mb) po = i;
            if (!ok || po < 0 || (flag[po] & 7) != 7) continue;
            /* the edge: before the task of o's last instance there if a receive, else after it */
            int last = ptr[o] + ol - 1;
            int tt = task[last] + ((inside || (flag[last] & 2)) ? 0 : 1), first = -1;
            for (int k = 0; k < ntask(p) && first < 0; k++)
                if (p->task[p->task0[so] + k].mb == x.mb) first = k;
            if (tt > task[po] || tt < first) continue;   /* before its micro-batch has a slot */
            int dup = 0;
            for (int h = 0; h < *nhoist && !dup; h++)
                dup = (*hoist)[h].rank == o && (*hoist)[h].n == nat[po] && (*hoist)[h].mb == x.mb;
            if (dup) {   /* moved already: to an earlier edge */
                for (int h = 0; h < *nhoist; h++)
                    if ((*hoist)[h].rank == o && (*hoist)[h].n == nat[po] && (*hoist)[h].mb == x.mb && (*hoist)[h].task > tt) {
                        (*hoist)[h].task = tt, added = 1;
                        if (oc) oc->stale[o] = 1;
                    }
                continue;
            }
            *hoist = ir_xrealloc(*hoist, sizeof **hoist * ((size_t)*nhoist + 1));
            (*hoist)[(*nhoist)++] = (ir_hoist){o, nat[po], x.mb, tt, 0};
            added = 1;
            if (oc) oc->stale[o] = 1;
        }
    }
    /* Where moves were added: on from where the ranks wait, each rank that
     * has new moves on its new order, rather than the check again from the
     * start (settle's next round).  Where the new order is the old one up
     * to the rank's step, and the new step holds what of the old one is
     * done with no transfer it waits for before it, what is done stays
     * done -- an instance completes once its members are at it and the
     * transfers before it are done, whatever completes first -- so the
     * check stops where it would from the start; otherwise 1: settle checks
     * again. */
    if (added && patched) {
        int ok = 1;
        memset(patched, 0, (size_t)W);
        for (int r = 0; r < W && ok; r++) {
            if (!oc->stale[r]) continue;
            pass_pipe_ent *e;
            double *qrun = NULL;
            int n = order(d, r, 1, &e, &qrun);
            free(oc->e[r]), free(oc->qrun[r]);
            oc->e[r] = e, oc->n[r] = n, oc->qrun[r] = qrun, oc->stale[r] = 0;
            ilist T = {0};
            rank_insts(d, r, e, n, 1, NULL, &T, NULL);
            int len = at0[r + 1] - at0[r], done = ptr[r] - at0[r];
            const inst *o = seq + at0[r];
            ok = T.n == len && done < len && !T.joined[done];
            for (int i = 0; i < done && ok; i++)
                ok = T.seq[i].comm == o[i].comm && T.seq[i].mb == o[i].mb && T.joined[i] == joined[at0[r] + i];
            int sl = ok ? steplen(joined, ptr[r], at0[r + 1]) : 0, nl = ok ? steplen(T.joined, done, len) : 0, live = 0;
            const inst *os = seq + ptr[r], *ns = T.seq + done;
            for (int j = 0; j < sl && ok; j++) {   /* the old step's done in the new one */
                int in = !FIN(os[j]);
                for (int i = 0; i < nl && !in; i++) in = ns[i].comm == os[j].comm && ns[i].mb == os[j].mb;
                ok = in;
            }
            for (int j = 0; j < nl && ok; j++) {   /* no transfer waited for before one done */
                const ir_comm *cj = &d->comm[ns[j].comm];
                live += !FIN(ns[j]);
                for (int i = 0; i < j && ok && FIN(ns[j]) && cj->kind == IR_COMM_SENDRECV; i++) {
                    const ir_comm *ci = &d->comm[ns[i].comm];
                    ok = FIN(ns[i]) || ci->kind != IR_COMM_SENDRECV || ci->group != cj->group || ci->root != cj->root;
                }
            }
            ok &= live > 0;
            if (ok) {   /* off its old step, onto the new order */
                for (int j = 0; j < sl; j++)
                    if (!FIN(os[j])) cnt[(size_t)os[j].comm * (size_t)m + (size_t)os[j].mb]--;
                memcpy(seq + at0[r], T.seq, sizeof(inst) * (size_t)len);
                memcpy(task + at0[r], T.task, sizeof(int) * (size_t)len);
                memcpy(nat + at0[r], T.nat, sizeof(int) * (size_t)len);
                memcpy(joined + at0[r], T.joined, (size_t)len);
                memcpy(flag + at0[r], T.flag, (size_t)len);
                patched[r] = 1;
            }
            ilist_free(&T);
        }
        if (ok) {
            /* the deferred wait on where no member changed its order; the others arrive again */
            nready = 0;
            for (int i = 0; i < ndefer; i++) {
                const ir_comm *c = &d->comm[defer[i].comm];
                int keep = 1;
                for (int k = 0; k < c->n; k++) keep &= !patched[d->ints[d->grp[c->group].devs + k]];
                if (keep) ready[nready++] = defer[i];
            }
            ndefer = 0;
            for (int r = 0; r < W; r++) {   /* (what of the step is done stays done) */
                if (!patched[r]) continue;
                int sl = steplen(joined, ptr[r], at0[r + 1]);
                left[r] = 0;
                for (int j = 0; j < sl; j++) {
                    inst a = seq[ptr[r] + j];
                    if (FIN(a)) continue;
                    left[r]++;
                    if (++cnt[(size_t)a.comm * (size_t)m + (size_t)a.mb] == cn[a.comm]) ready[nready++] = a;
                }
            }
            added = 0;
            goto resume;
        }
    }
    free(patched);
    free(defer);
#undef ARRIVE
#undef STEPLEN
    if (added) rc = 1;
    for (int r = 0; r < W && !rc; r++) {
        if (ptr[r] == at0[r + 1]) continue;
        /* r waits at x for a member that waits elsewhere */
        inst x = seq[ptr[r]];
        const ir_comm *c = &d->comm[x.comm];
        /* an incomplete instance of r's step, and a member not at it */
        int r2 = -1;
        int at_r = ptr[r];
        for (int j = 0; j < steplen(joined, ptr[r], at0[r + 1]) && r2 < 0; j++) {
            x = seq[ptr[r] + j];
            c = &d->comm[x.comm];
            if (FIN(x)) continue;   /* done */
            at_r = ptr[r] + j;
            for (int k = 0; k < c->n && r2 < 0; k++) {
                int o = d->ints[d->grp[c->group].devs + k], at = 0;
                for (int i = ptr[o]; i < at0[o + 1] && i < ptr[o] + steplen(joined, ptr[o], at0[o + 1]); i++)
                    at |= seq[i].comm == x.comm && seq[i].mb == x.mb;
                if (!at) r2 = o;
            }
        }
        char w2[300] = "has finished its step";
        int same = r2 < 0;
        if (same) {
            /* every member is there: a transfer the two calls order differently */
            for (int j = 0; j < steplen(joined, ptr[r], at0[r + 1]) && r2 < 0; j++) {
                x = seq[ptr[r] + j];
                c = &d->comm[x.comm];
                if (FIN(x)) continue;
                at_r = ptr[r] + j;
                for (int k = 0; k < c->n && r2 < 0; k++)
                    if (d->ints[d->grp[c->group].devs + k] != r) r2 = d->ints[d->grp[c->group].devs + k];
            }
            IR_ASSERT(r2 >= 0);
            snprintf(w2, sizeof w2, "has it in the same call after another transfer between the two");
        }
        const ir_task *t1 = p->task + p->task0[stage_of(d, r)] + task[at_r];
        if (!same && ptr[r2] < at0[r2 + 1]) {
            int a2 = ptr[r2];   /* its first transfer not done */
            while (a2 + 1 < ptr[r2] + steplen(joined, ptr[r2], at0[r2 + 1]) &&
                   FIN(seq[a2]))
                a2++;
            inst y = seq[a2];
            const ir_task *t2 = p->task + p->task0[stage_of(d, r2)] + task[a2];
            char n2[24];
            snprintf(w2, sizeof w2, "waits in its task %s (stage %d) at the %s of %s", pass_pipe_task_name(p, t2, n2, sizeof n2),
                     stage_of(d, r2), ir_comm_name(d->comm[y.comm].kind), g->t[d->comm[y.comm].tensor].name);
        }
        if (quiet) {
            rc = 2;
            break;
        }
        char n1[24];
        rc = pass_error(g, g->req.order_line ? g->req.order_line : g->req.pp_line,
                        "every rank of a group must reach its collectives and transfers in the same order; "
                        "change the order of these tasks, or use schedule = 1f1b, gpipe or zb-h1",
                        "[plan] the pipeline schedule deadlocks: rank %d waits in its task %s (stage %d) at the %s "
                        "of %s, but rank %d %s", r, pass_pipe_task_name(p, t1, n1, sizeof n1), stage_of(d, r),
                        ir_comm_name(c->kind), g->t[c->tensor].name, r2, w2);
    }
    free(clock);
    free(ccost);
    free(tin);
    free(tail);
    free(mask);
    free(at0);
    free(ptr);
    ilist_free(&L);
#undef FIN
    free(fin);
    free(cnt);
    free(cn);
    free(left);
    free(ready);
    return rc;
}

/* Sends made late: on the cost model's step (pass_pipe_simulate), a send
 * whose receiver starts the task that takes it after the sender's task
 * ends would hold the sender there (the sends block); it moves to the end
 * of the sender's last task that ends by then, as long as its micro-batch
 * keeps its slot there and nothing of that micro-batch on the way writes
 * what it sends.  The check then proves the new order (and posts receives
 * early where it needs to). */
static void late_sends(ir_dist *d)
{
    ir_pipe *p = d->pipe;
    int nt = ntask(p);
    double *cost = ir_xmalloc(sizeof(double) * 3 * (size_t)p->pp * (size_t)p->nch), bubble;
    double *start = ir_xmalloc(sizeof(double) * ((size_t)p->task0[p->pp] + 1));
    pass_pipe_costs(d, cost);
    if (pass_pipe_simulate(p, cost, start, &bubble) < 0) {   /* an order no step completes: the check says why */
        free(cost);
        free(start);
        return;
    }
#define END(s_, k_) (start[p->task0[s_] + (k_)] + \
                     cost[PASS_PIPE_C(p, s_, p->task[p->task0[s_] + (k_)].chunk, p->task[p->task0[s_] + (k_)].kind)])
    for (int r = 0; r < d->ndev; r++) {
        pass_pipe_ent *e;
        int n = order(d, r, 1, &e, NULL), st = stage_of(d, r);
        const int *item = d->rank_item + d->rank_item0[r], *mem = d->rank_member + d->rank_item0[r];
        int nitem = d->rank_item0[r + 1] - d->rank_item0[r];
        const ir_task *t = p->task + p->task0[st];
        for (int i = 0; i < n; i++) {
            int peer, recv;
            int64_t nf;
            if (!transfer(d, item[e[i].q], mem[e[i].q], st, &peer, &recv) || recv || !e[i].moves ||
                !direct(d, item[e[i].q], mem[e[i].q], &nf))
                continue;
            int kr = task_of(d, item[e[i].q], e[i].mb, peer);
            if (kr < 0) continue;
            double tr = start[p->task0[peer] + kr];
            int last = e[i].task;   /* the micro-batch's last task here */
            for (int k = e[i].task + 1; k < nt; k++)
                if (t[k].mb == e[i].mb) last = k;
            const ir_comm *c = &d->comm[d->seq[item[e[i].q]].id];
            int pt = d->ints[c->in + mem[e[i].q]], to = e[i].task;
            for (int k = e[i].task + 1; k < last && END(st, k) <= tr + 1e-9 * (1 + tr); k++) {
                int wr = 0;   /* what it sends, written by this micro-batch's items of task k? */
                for (int q = 0; q < nitem && !wr && t[k].mb == e[i].mb; q++)
                    wr = d->seq[item[q]].sec == IR_SEC_MB && pass_pipe_class(d, item[q], st) == t[k].kind + 3 * t[k].chunk &&
                         touches(d, item[q], mem[q], pt, 1);
                if (wr) break;
                to = k;
            }
            if (to == e[i].task) continue;
            p->hoist = ir_xrealloc(p->hoist, sizeof *p->hoist * ((size_t)p->nhoist + 1));
            p->hoist[p->nhoist++] = (ir_hoist){r, item[e[i].q], e[i].mb, to, 1};
        }
        free(e);
    }
#undef END
    free(cost);
    free(start);
}

/* The check, posting receives early where ranks wait on each other until
 * none do (0) or no receive can move (2, after the check's message unless
 * quiet). */
static int settle(ir_dist *d, int quiet)
{
    ir_pipe *p = d->pipe;
    int W = d->ndev, rc = 2;
    ord_cache oc = {ir_xcalloc((size_t)W + 1, sizeof(pass_pipe_ent *)), ir_xcalloc((size_t)W + 1, sizeof(int)),
                    ir_xmalloc((size_t)W + 1), ir_xcalloc((size_t)W + 1, sizeof(double *))};
    double span = 0;
    memset(oc.stale, 1, (size_t)W + 1);
    for (int round = 0; round < 100000; round++) {
        rc = check(d, 1, &p->hoist, &p->nhoist, &oc, NULL);
        if (rc != 1) break;
    }
    /* (the orders as they are, timed: the last round's, each run of compute at its cost) */
    if (rc == 0 && check(d, 1, NULL, NULL, &oc, &span) != 0) span = 0;
    for (int r = 0; r < W; r++) free(oc.e[r]), free(oc.qrun[r]);
    free(oc.qrun);
    free(oc.e);
    free(oc.n);
    free(oc.stale);
    p->span = rc == 0 ? span : 0;
    if (rc == 0) return 0;
    return quiet ? 2 : check(d, 0, NULL, NULL, NULL, NULL);
}

int pass_pipeline(ir_dist *d)
{
    const ir_graph *g = d->g;
    if (d->mesh_pp <= 1) {
        if (g->req.order && d->ndev > 1)
            return pass_error(g, g->req.order_line, "an order is a pipeline's: set pp", "[plan] order without pp > 1");
        return 0;
    }
    ir_pipe *p = d->pipe = ir_xcalloc(1, sizeof *p);
    p->pp = d->mesh_pp;
    p->v = d->mesh_v;
    p->nch = p->v;
    for (int i = 0; i < g->nop; i++)
        if (d->op_stage[i] == IR_STAGE_ALL(d)) p->nch = p->v + 2;   /* interlaced: chunks v, v + 1 */
    if (p->nch > p->v && g->req.schedule != IR_SCHED_INTERLACED && !g->req.order) {
        free(p);
        d->pipe = NULL;
        return pass_error(g, g->req.stage_line ? g->req.stage_line : g->req.pp_line,
                          "ops on every stage run in tasks of their own: use schedule = interlaced, or an order",
                          "[plan] stage: ops on every stage with schedule %s", g->req.schedule == IR_SCHED_GPIPE ? "gpipe"
                          : g->req.schedule == IR_SCHED_ZBH1 ? "zb-h1" : g->req.schedule == IR_SCHED_KFKB ? "kFkB"
                          : g->req.schedule == IR_SCHED_INTERLEAVED ? "interleaved" : "1f1b");
    }
    p->k = g->req.group > 0 ? g->req.group : 1;
    p->recycle = g->train.recycle > 1 && p->v == g->train.recycle ? p->v : 0;
    p->m = (int)g->train.micro_batches;
    p->sched = g->req.order ? -1 : g->req.schedule;
    if (p->nch == p->v && p->sched == IR_SCHED_INTERLACED) {
        free(p);
        d->pipe = NULL;
        return pass_error(g, g->req.pp_line, "interlaced runs the ops before and after the blocks' layers on every "
                          "stage; a model without blocks names them: stage = OP all",
                          "[plan] schedule interlaced: no op runs on every stage");
    }
    p->split_w = p->sched == IR_SCHED_ZBH1 || (g->req.order && strchr(g->req.order, 'W'));
    p->task0 = ir_xmalloc(sizeof(int) * ((size_t)p->pp + 1));
    for (int s = 0; s <= p->pp; s++) p->task0[s] = ntask(p) * s;
    p->task = ir_xcalloc((size_t)p->task0[p->pp] + 1, sizeof(ir_task));
    p->nslot = ir_xcalloc((size_t)p->pp, sizeof(int));
    item_chunks(d);
    if (p->split_w) classify_w(d);
    derive_deps(d);
    int rc = 0;
    double *cost = NULL;
    if (p->sched == IR_SCHED_ZBH1) {   /* zb-h1 orders its tasks by the cost model's times */
        cost = ir_xmalloc(sizeof(double) * 3 * (size_t)p->pp * (size_t)p->nch);
        pass_pipe_costs(d, cost);
    }
    if (p->sched < 0) rc = user_order(d, p);
    else if ((rc = pass_pipe_schedule(p, cost)) == 2)
        rc = pass_error(g, g->req.chunks_line ? g->req.chunks_line : g->req.pp_line,
                        "Megatron's interleaved order takes the micro-batches in groups of pp: make micro_batches a "
                        "multiple of pp, or use schedule = gpipe with chunks",
                        "[plan] interleaved schedule: micro_batches %d is not a multiple of pp %d", p->m, p->pp);
    else if (rc)
        rc = pass_error(g, g->req.pp_line, "use schedule = 1f1b or gpipe",
                        "[plan] schedule %s: the stages' dependencies leave no order of this kind",
                        p->sched == IR_SCHED_ZBH1 ? "zb-h1" : "interlaced");
    for (int s = 0; s < p->pp && !rc; s++) rc = slots(d, p, s);
    int settled = 0;   /* zb-h1's order settled (its moves and span): not again unless late sends change it */
    if (!rc && p->sched == IR_SCHED_ZBH1) settled = settle(d, 1) == 0;
    if (!rc && p->sched == IR_SCHED_ZBH1 && !settled) {
        /* the bubble-optimal order needs transfers the blocking sends cannot
           make in that order: build it again with the sends' waits */
        free(p->hoist);
        p->hoist = NULL, p->nhoist = 0;
        if (build_zb_rdv(p))
            rc = pass_error(g, g->req.pp_line, "use schedule = 1f1b or gpipe",
                            "[plan] schedule zb-h1: no order of this kind whose transfers can be made");
        for (int s = 0; s < p->pp && !rc; s++) rc = slots(d, p, s);
    }
    free(cost);
    if (rc) return rc;
    /* sends made late where the cost model says the receiver comes later;
       if the transfers can then not be made, the order without them */
    int nh0 = p->nhoist;
    late_sends(d);
    /* (a settle that returns 0 has timed the span, and settle(d, 0) on the same moves would do all of it
       again: the check is a function of the order and its moves) */
    if (settled && p->nhoist == nh0) return 0;
    if (p->nhoist) {
        if (settle(d, 1) == 0) return 0;
        free(p->hoist);
        p->hoist = NULL, p->nhoist = 0;
    }
    if (settle(d, 1) == 0) return 0;
    /* where that fails: the runs of transfers that take several calls with the receives from a sender
       before the sends to it (order, cut_recv), with and without late sends again; else the message
       of the first order's wait */
    for (int retry = 0; retry < 3; retry++) {
        free(p->hoist);
        p->hoist = NULL, p->nhoist = 0;
        p->cut_recv = retry < 2;
        if (retry == 0) late_sends(d);
        if (retry == 0 && !p->nhoist) continue;
        if (retry < 2 && settle(d, 1) == 0) return 0;
    }
    return settle(d, 0);
}

/* ---- the cost model */

void pass_pipe_costs(const ir_dist *d, double *cost)
{
    const ir_graph *g = d->g;
    const ir_pipe *p = d->pipe;
    IR_ASSERT(p);
    int sd = d->ndev / d->mesh_pp;
    for (int s = 0; s < 3 * p->pp * p->nch; s++) cost[s] = 0;
    for (int n = 0; n < d->nseq; n++) {
        const ir_item *it = &d->seq[n];
        if (it->comm || it->sec != IR_SEC_MB) continue;
        const ir_subop *so = &d->sop[it->id];
        if (so->dev % sd) continue;
        cost[3 * (so->dev / sd) * p->nch + pass_pipe_class(d, n, so->dev / sd)] +=
            (d->iflops ? d->iflops[n] : pass_subop_flops(g, so, IR_SEC_MB)) / (double)p->m;
    }
}

/* Is dependency e a meeting: the same task of two stages waiting on each
 * other (a collective of ops on every stage), which start together? */
/* (meeting, above) When may stage s start its next task t (kind, chunk,
 * mb) on the cost model: *ready from its own stage and the tasks it waits
 * for on others; 0 when one has not finished.  Meetings are skipped here
 * (the caller starts such a task on every stage at once). */
static int meeting(const ir_pipe *p, const ir_pdep *e)
{
    if (e->from_kind != e->kind || e->from_chunk != e->chunk) return 0;
    for (int i = 0; i < p->ndep; i++) {
        const ir_pdep *r = &p->dep[i];
        if (r->s == e->from_s && r->from_s == e->s && r->kind == e->kind && r->chunk == e->chunk &&
            r->from_kind == e->kind && r->from_chunk == e->chunk)
            return 1;
    }
    return 0;
}

static int sim_ready(const ir_pipe *p, const double *tdone, const double *free_at, int s, const ir_task *t,
                     double *ready)
{
    *ready = free_at[s];
    for (int i = 0; i < p->ndep; i++) {
        const ir_pdep *e = &p->dep[i];
        if (e->s != s || e->kind != t->kind || e->chunk != t->chunk) continue;
        if (meeting(p, e)) continue;
        double f = DONEC(p, tdone, e->from_s, e->from_chunk, e->from_kind, t->mb);
        if (f < 0) return 0;
        if (f > *ready) *ready = f;
    }
    return 1;
}

double pass_pipe_simulate(const ir_pipe *p, const double *cost, double *start, double *bubble)
{
    /* list scheduling in task order; once the check proved the orders
       deadlock-free, every sweep over the stages starts a task.  A task
       that meets the same task of other stages (a collective across them)
       starts on all of them together, once each is at it and ready */
    int pp = p->pp, m = p->m, nt = ntask(p);
    size_t ndone = (size_t)pp * (size_t)p->nch * 3 * (size_t)m;
    double *tdone = ir_xmalloc(sizeof(double) * ndone);
    for (size_t i = 0; i < ndone; i++) tdone[i] = -1;
    int *next = ir_xcalloc((size_t)pp, sizeof(int)), left = nt * pp;
    char *meet = ir_xmalloc((size_t)pp);
    double *free_at = ir_xcalloc((size_t)pp, sizeof(double)), span = 0, busy = 0;
    while (left) {
        int moved = 0;
        for (int s = 0; s < pp; s++)
            while (next[s] < nt) {
                const ir_task *t = p->task + p->task0[s] + next[s];
                double ready;
                if (!sim_ready(p, tdone, free_at, s, t, &ready)) break;
                /* the stages it meets: each at the same task and ready */
                memset(meet, 0, (size_t)pp);
                meet[s] = 1;
                int ok = 1;
                for (int grow = 1; grow && ok;) {
                    grow = 0;
                    for (int i = 0; i < p->ndep && ok; i++) {
                        const ir_pdep *e = &p->dep[i];
                        if (!meet[e->s] || meet[e->from_s] || e->kind != t->kind || e->chunk != t->chunk ||
                            !meeting(p, e))
                            continue;
                        int o = e->from_s;
                        double r2;
                        const ir_task *t2 = next[o] < nt ? p->task + p->task0[o] + next[o] : NULL;
                        if (!t2 || t2->kind != t->kind || t2->chunk != t->chunk || t2->mb != t->mb ||
                            !sim_ready(p, tdone, free_at, o, t2, &r2)) {
                            ok = 0;
                            break;
                        }
                        if (r2 > ready) ready = r2;
                        meet[o] = 1, grow = 1;
                    }
                }
                if (!ok) break;
                for (int o = 0; o < pp; o++) {
                    if (!meet[o]) continue;
                    double c = cost[PASS_PIPE_C(p, o, t->chunk, t->kind)];
                    if (start) start[p->task0[o] + next[o]] = ready;
                    free_at[o] = DONEC(p, tdone, o, t->chunk, t->kind, t->mb) = ready + c;
                    if (free_at[o] > span) span = free_at[o];
                    busy += c;
                    next[o]++, left--, moved = 1;
                }
            }
        if (!moved) {   /* the order waits on itself */
            span = -1;
            break;
        }
    }
    *bubble = span > 0 ? 1 - busy / (span * pp) : 0;   /* (span -1: stuck) */
    free(tdone);
    free(next);
    free(meet);
    free(free_at);
    return span;
}
