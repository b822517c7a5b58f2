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
 *   order   the user's ([plan] order = TASKS; TASKS; ... one list per stage;
 *           W tasks in it split the backward)
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
 * An order that fails is rejected with the two ranks and tasks that wait on
 * each other.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

static const char kind_ch[] = "FBW";

/* Stage of device dev. */
static int stage_of(const ir_dist *d, int dev) { return dev / (d->ndev / d->mesh_pp); }

/* Tasks per stage. */
static int ntask(const ir_pipe *p) { return (p->split_w ? 3 : 2) * p->m; }

int pass_pipe_kind(const ir_dist *d, int n)
{
    if (n < d->seq_bwd) return IR_TASK_F;
    return d->pipe && d->pipe->split_w && d->item_w && d->item_w[n] ? IR_TASK_W : IR_TASK_B;
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

static void add_dep(ir_pipe *p, int s, int kind, int from_s, int from_kind)
{
    for (int i = 0; i < p->ndep; i++)
        if (p->dep[i].s == s && p->dep[i].kind == kind && p->dep[i].from_s == from_s &&
            p->dep[i].from_kind == from_kind)
            return;
    p->dep = ir_xrealloc(p->dep, sizeof *p->dep * ((size_t)p->ndep + 1));
    p->dep[p->ndep++] = (ir_pdep){s, kind, from_s, from_kind};
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
                add_dep(p, sb, kind, sa, kind);
            }
    }
}

/* ---- the schedules */

/* The tasks of stage s under gpipe or 1f1b. */
static void builtin(int sched, int pp, int m, int s, ir_task *t)
{
    int n = 0;
    if (sched == IR_SCHED_GPIPE) {
        for (int i = 0; i < m; i++) t[n++] = (ir_task){IR_TASK_F, i, 0};
        for (int i = 0; i < m; i++) t[n++] = (ir_task){IR_TASK_B, i, 0};
        return;
    }
    int w = pp - s - 1 < m ? pp - s - 1 : m;   /* 1f1b: warm-up forwards */
    for (int i = 0; i < w; i++) t[n++] = (ir_task){IR_TASK_F, i, 0};
    for (int i = 0; i < m - w; i++) {
        t[n++] = (ir_task){IR_TASK_F, w + i, 0};
        t[n++] = (ir_task){IR_TASK_B, i, 0};
    }
    for (int i = m - w; i < m; i++) t[n++] = (ir_task){IR_TASK_B, i, 0};
}

/* Finish time of stage s's task (kind, mb) in a list schedule, -1: not yet. */
#define DONE(tdone, m, s, kind, mb) (tdone)[((size_t)(s) * 3 + (size_t)(kind)) * (size_t)(m) + (size_t)(mb)]

/* May stage s start its task (kind, mb) at time t: has every task it
 * depends on finished by then? */
static int deps_met(const ir_pipe *p, const double *tdone, int s, int kind, int mb, double t)
{
    for (int i = 0; i < p->ndep; i++) {
        const ir_pdep *e = &p->dep[i];
        if (e->s != s || e->kind != kind) continue;
        double f = DONE(tdone, p->m, e->from_s, e->from_kind, mb);
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
            if (len[s] && DONE(tdone, m, s, p->task[p->task0[s] + len[s] - 1].kind,
                               p->task[p->task0[s] + len[s] - 1].mb) > t)
                continue;   /* busy */
            if (nf < m && nf - nb < pp - s && nf - nw < pp && deps_met(p, tdone, s, IR_TASK_F, nf, t))
                kind = IR_TASK_F, mb = nf;
            else if (nb < nf && DONE(tdone, m, s, IR_TASK_F, nb) <= t && deps_met(p, tdone, s, IR_TASK_B, nb, t))
                kind = IR_TASK_B, mb = nb;
            else if (nw < nb && DONE(tdone, m, s, IR_TASK_B, nw) <= t && deps_met(p, tdone, s, IR_TASK_W, nw, t))
                kind = IR_TASK_W, mb = nw;
            if (kind < 0) continue;
            p->task[p->task0[s] + len[s]++] = (ir_task){kind, mb, 0};
            DONE(tdone, m, s, kind, mb) = t + (dur ? dur[3 * s + kind] : 1);
            cnt[3 * s + kind]++;
            left--;
            moved = 1;
        }
        /* nothing started and nothing running: stuck */
        int running = 0;
        for (int s = 0; s < pp && !moved; s++)
            running |= len[s] && DONE(tdone, m, s, p->task[p->task0[s] + len[s] - 1].kind,
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
                         nb < nf && DONE(tdone, m, s, IR_TASK_F, nb) >= 0 && DONE(tdone, m, s, IR_TASK_F, nb) <= t &&
                             deps_met(p, tdone, s, IR_TASK_B, nb, t),
                         nw < nb && DONE(tdone, m, s, IR_TASK_B, nw) >= 0 && DONE(tdone, m, s, IR_TASK_B, nw) <= t &&
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
            p->task[p->task0[s] + len[s]++] = (ir_task){pk[s], pmb[s], 0};
            STARTED(s, pk[s], pmb[s]) = 1;
            DONE(tdone, m, s, pk[s], pmb[s]) = t + 1;
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

int pass_pipe_schedule(ir_pipe *p, const double *cost)
{
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
    for (int s = 0; s < p->pp; s++) builtin(p->sched, p->pp, p->m, s, p->task + p->task0[s]);
    return 0;
}

/* Parse the user's order: one list of tasks (F3, B0, W1 ...) per stage,
 * separated by ';'.  Returns 0 or 2 after a message. */
static int user_order(const ir_dist *d, ir_pipe *p)
{
    const ir_graph *g = d->g;
    const char *s = g->req.order;
    int line = g->req.order_line;
    static const char hint[] = "write order = TASKS; TASKS; ... with one list per stage, each task F<mb>, B<mb> "
                               "(or, splitting the backward, also W<mb>) (e.g. for pp 2, micro_batches 2: "
                               "order = F0 F1 B0 B1; F0 B0 F1 B1)";
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
            long mb = k && *s ? strtol(s + 1, &q, 10) : -1;
            if (mb < 0 || q == s + 1 || (q < end && *q != ' ' && *q != '\t'))
                return pass_error(g, line, hint, "[plan] order: stage %d: '%.*s' is not a task", st,
                                  (int)strcspn(s, " \t;"), s);
            if (mb >= p->m)
                return pass_error(g, line, hint, "[plan] order: stage %d: %c%ld, but micro_batches is %d", st, *s, mb,
                                  p->m);
            if (n == nt)
                return pass_error(g, line, hint, "[plan] order: stage %d has more than the %d tasks of %d micro-batches",
                                  st, nt, p->m);
            t[n++] = (ir_task){(int)(k - kind_ch), (int)mb, 0};
            s = q;
        }
        if (n != nt)
            return pass_error(g, line, hint, "[plan] order: stage %d has %d tasks, not the %d of F0..F%d, B0..B%d%s", st,
                              n, nt, p->m - 1, p->m - 1, p->split_w ? ", W0.." : "");
        s = e ? e + 1 : end;
    }
    return 0;
}

/* Check stage st's tasks (each once; each kind in micro-batch order; F(i)
 * before B(i) before W(i)) and give every micro-batch a slot from its F to
 * its last task.  Returns 0 or 2. */
static int slots(const ir_dist *d, ir_pipe *p, int st)
{
    const ir_graph *g = d->g;
    ir_task *t = p->task + p->task0[st];
    int cnt[3] = {0, 0, 0}, inflight = 0, *slot = ir_xmalloc(sizeof(int) * (size_t)p->m);
    int last = p->split_w ? IR_TASK_W : IR_TASK_B;
    char *used = ir_xcalloc((size_t)p->m + 1, 1);
    int rc = 0;
    p->nslot[st] = 0;
    for (int k = 0; k < ntask(p) && !rc; k++) {
        int kd = t[k].kind, mb = t[k].mb;
        if (mb != cnt[kd])
            rc = pass_error(g, g->req.order_line, "a stage runs each kind of task in micro-batch order",
                            "[plan] order: stage %d runs %c%d where %c%d is next", st, kind_ch[kd], mb, kind_ch[kd],
                            cnt[kd]);
        else if (kd > IR_TASK_F && mb >= cnt[kd - 1])
            rc = pass_error(g, g->req.order_line, "a micro-batch runs F, then B, then W",
                            "[plan] order: stage %d runs %c%d before %c%d", st, kind_ch[kd], mb, kind_ch[kd - 1], mb);
        if (rc) break;
        cnt[kd]++;
        if (kd == IR_TASK_F) {
            int s = 0;
            while (used[s]) s++;
            used[s] = 1;
            slot[mb] = t[k].slot = s;
            if (++inflight > p->nslot[st]) p->nslot[st] = inflight;
        } else {
            t[k].slot = slot[mb];
            if (kd == last) used[t[k].slot] = 0, inflight--;
        }
    }
    free(slot);
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
 * without packing through scratch?  *nf: its floats. */
static int direct(const ir_dist *d, int n, int k, int64_t *nf)
{
    const ir_item *it = &d->seq[n];
    if (!it->comm) return 0;
    const ir_comm *c = &d->comm[it->id];
    if (c->kind != IR_COMM_SENDRECV || c->n != 2) return 0;
    int pt = k == c->root ? d->ints[c->in + k] : d->ints[c->out + k];
    if (pt < 0 || (k != c->root && c->acc) || !ir_box_eq(&c->region, &d->pt[pt].box, d->g->t[c->tensor].ndim))
        return 0;
    ir_box r = pass_mbbox(d, c->tensor, &c->region, IR_SEC_MB);
    *nf = ir_box_numel(&r, d->g->t[c->tensor].ndim) * pass_elsize(&d->g->t[c->tensor]) / 4;
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

/* May transfer item q of the rank (in task kind `kind`) move to the start of
 * its task (a receive) or the end (a send)?  Not when an item it passes
 * touches what it writes (a receive) or writes what it reads (a send). */
static int movable(const ir_dist *d, const int *item, const int *mem, int nitem, int q, int kind, int recv)
{
    const ir_comm *c = &d->comm[d->seq[item[q]].id];
    int k = mem[q], pt = recv ? d->ints[c->out + k] : d->ints[c->in + k];
    for (int j = recv ? 0 : q + 1; j < (recv ? q : nitem); j++)
        if (d->seq[item[j]].sec == IR_SEC_MB && pass_pipe_kind(d, item[j]) == kind &&
            touches(d, item[j], mem[j], pt, !recv))
            return 0;
    return 1;
}

int pass_pipe_order(const ir_dist *d, int rank, pass_pipe_ent **out)
{
    const ir_pipe *p = d->pipe;
    IR_ASSERT(p && d->rank_item0);
    const int *item = d->rank_item + d->rank_item0[rank], *mem = d->rank_member + d->rank_item0[rank];
    int nitem = d->rank_item0[rank + 1] - d->rank_item0[rank], st = stage_of(d, rank), nmb = 0;
    for (int q = 0; q < nitem; q++) nmb += d->seq[item[q]].sec == IR_SEC_MB;
    pass_pipe_ent *e = ir_xmalloc(sizeof *e * ((size_t)nmb * (size_t)p->m + 1));
    int n = 0;
    const ir_task *t = p->task + p->task0[st];
    for (int k = 0; k < ntask(p); k++) {
        int start = n, peer, recv;
        /* the task's items: its receives from other stages first, its sends
           to other stages last, everything else in schedule order between
           (the buffers of transfers are stash, which nothing else shares) */
        for (int pass = 0; pass < 3; pass++)
            for (int q = 0; q < nitem; q++) {
                if (d->seq[item[q]].sec != IR_SEC_MB || pass_pipe_kind(d, item[q]) != t[k].kind) continue;
                int x = transfer(d, item[q], mem[q], st, &peer, &recv) &&
                        movable(d, item, mem, nitem, q, t[k].kind, recv);
                if (pass != (!x ? 1 : recv ? 0 : 2)) continue;
                e[n++] = (pass_pipe_ent){q, t[k].mb, t[k].slot, k, 0};
            }
        if (k == 0) continue;
        /* the boundary: the previous task's trailing transfers and this one's
           leading ones; with a lower stage receive first, with a higher send first */
        int a = start, b = start;
#define MOVES(x) (transfer(d, item[e[x].q], mem[e[x].q], st, &peer, &recv) && \
                  movable(d, item, mem, nitem, e[x].q, t[e[x].task].kind, recv))
        while (a > 0 && e[a - 1].task == k - 1 && MOVES(a - 1)) a--;
        while (b < n && MOVES(b)) b++;
#undef MOVES
        if (a == start || b == start) continue;
        /* a stable insertion sort by (lower peer: recv 0 send 1; higher peer: send 2 recv 3) */
        for (int i = a + 1; i < b; i++) {
            pass_pipe_ent x = e[i];
            transfer(d, item[x.q], mem[x.q], st, &peer, &recv);
            int kx = peer < st ? recv ? 0 : 1 : recv ? 3 : 2, j = i;
            while (j > a) {
                transfer(d, item[e[j - 1].q], mem[e[j - 1].q], st, &peer, &recv);
                int kj = peer < st ? recv ? 0 : 1 : recv ? 3 : 2;
                if (kj <= kx) break;
                e[j] = e[j - 1];
                j--;
            }
            e[j] = x;
        }
    }
    /* every run of transfers that may move (a task's first receives, its last
       sends, and where two tasks meet, both) goes in one call (rt_k_p2p, at
       most PASS_P2P_MAX each): they progress together, so ranks that both
       send before they receive do not wait for each other */
    int run = 0, peer, recv;
    for (int i = 0; i < n; i++) {
        int64_t nf;
        if (!transfer(d, item[e[i].q], mem[e[i].q], st, &peer, &recv) ||
            !movable(d, item, mem, nitem, e[i].q, t[e[i].task].kind, recv) || !direct(d, item[e[i].q], mem[e[i].q], &nf)) {
            run = 0;
            continue;
        }
        if (run > 0 && run < PASS_P2P_MAX) e[i].merge = 1, run++;
        else run = 1;
    }
    *out = e;
    return n;
}

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
 * message naming two ranks that wait on each other. */
static int check(const ir_dist *d, int quiet)
{
    const ir_graph *g = d->g;
    const ir_pipe *p = d->pipe;
    int W = d->ndev, m = p->m;
    int *at0 = ir_xcalloc((size_t)W + 1, sizeof(int)), *ptr = ir_xcalloc((size_t)W + 1, sizeof(int));
    inst *seq = NULL;
    int *task = NULL;   /* per instance: the task index (messages) */
    char *joined = NULL;/* per instance: in one call with the previous one (a step of two) */
    int nseq = 0, cap = 0, tcap = 0;
    for (int r = 0; r < W; r++) {
        pass_pipe_ent *e;
        int n = pass_pipe_order(d, r, &e);
        const int *item = d->rank_item + d->rank_item0[r];
        at0[r] = nseq;
        for (int i = 0; i < n; i++) {
            const ir_item *it = &d->seq[item[e[i].q]];
            if (!it->comm) continue;
            int c = nseq;
            *IR_PUSH(seq, nseq, cap) = (inst){it->id, e[i].mb};
            if (tcap < cap) {
                task = ir_xrealloc(task, sizeof(int) * (size_t)cap);
                joined = ir_xrealloc(joined, (size_t)cap);
                tcap = cap;
            }
            task[c] = e[i].task;
            joined[c] = (char)e[i].merge;
        }
        free(e);
    }
    at0[W] = nseq;
    /* A rank is at a step: one instance, or two joined in one call.  An
       instance completes once every member is at a step holding it; a rank
       moves on when its step's instances are complete. */
    int *cnt = ir_xcalloc((size_t)d->ncomm * (size_t)m + 1, sizeof(int));
    int *left = ir_xcalloc((size_t)W + 1, sizeof(int));   /* per rank: incomplete instances of its step */
    inst *ready = ir_xmalloc(sizeof(inst) * ((size_t)nseq + 1));
    int nready = 0;
    for (int r = 0; r < W; r++) ptr[r] = at0[r];
    /* step length at position i of rank r */
#define STEPLEN(r, i) steplen(joined, i, at0[(r) + 1])
#define ARRIVE(r)                                                                              \
    do {                                                                                       \
        if (ptr[r] < at0[(r) + 1]) {                                                           \
            left[r] = STEPLEN(r, ptr[r]);                                                      \
            for (int j_ = 0; j_ < left[r]; j_++) {                                             \
                inst a_ = seq[ptr[r] + j_];                                                    \
                if (++cnt[(size_t)a_.comm * (size_t)m + (size_t)a_.mb] == d->comm[a_.comm].n) \
                    ready[nready++] = a_;                                                      \
            }                                                                                  \
        }                                                                                      \
    } while (0)
    for (int r = 0; r < W; r++) ARRIVE(r);
    for (int h = 0; h < nready; h++) {
        inst x = ready[h];
        const ir_comm *c = &d->comm[x.comm];
        for (int k = 0; k < c->n; k++) {
            int r = d->ints[d->grp[c->group].devs + k];
            IR_ASSERT(ptr[r] < at0[r + 1] && left[r] > 0);
            if (--left[r] == 0) {
                ptr[r] += STEPLEN(r, ptr[r]);
                ARRIVE(r);
            }
        }
    }
#undef ARRIVE
#undef STEPLEN
    int rc = 0;
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
            if (cnt[(size_t)x.comm * (size_t)m + (size_t)x.mb] == c->n) continue;   /* done */
            at_r = ptr[r] + j;
            for (int k = 0; k < c->n && r2 < 0; k++) {
                int o = d->ints[d->grp[c->group].devs + k], at = 0;
                for (int i = ptr[o]; i < at0[o + 1] && i < ptr[o] + steplen(joined, ptr[o], at0[o + 1]); i++)
                    at |= seq[i].comm == x.comm && seq[i].mb == x.mb;
                if (!at) r2 = o;
            }
        }
        IR_ASSERT(r2 >= 0);
        const ir_task *t1 = p->task + p->task0[stage_of(d, r)] + task[at_r];
        char w2[300] = "has finished its step";
        if (ptr[r2] < at0[r2 + 1]) {
            int a2 = ptr[r2];   /* its first transfer not done */
            while (a2 + 1 < ptr[r2] + steplen(joined, ptr[r2], at0[r2 + 1]) &&
                   cnt[(size_t)seq[a2].comm * (size_t)m + (size_t)seq[a2].mb] == d->comm[seq[a2].comm].n)
                a2++;
            inst y = seq[a2];
            const ir_task *t2 = p->task + p->task0[stage_of(d, r2)] + task[a2];
            snprintf(w2, sizeof w2, "waits in its task %c%d (stage %d) at the %s of %s", kind_ch[t2->kind], t2->mb,
                     stage_of(d, r2), ir_comm_name(d->comm[y.comm].kind), g->t[d->comm[y.comm].tensor].name);
        }
        if (quiet) {
            rc = 2;
            break;
        }
        rc = pass_error(g, g->req.order_line ? g->req.order_line : g->req.pp_line,
                        "every rank of a group must reach its collectives and transfers in the same order; "
                        "change the order of these tasks, or use schedule = 1f1b, gpipe or zb-h1",
                        "[plan] the pipeline schedule deadlocks: rank %d waits in its task %c%d (stage %d) at the %s "
                        "of %s, but rank %d %s", r, kind_ch[t1->kind], t1->mb, stage_of(d, r),
                        ir_comm_name(c->kind), g->t[c->tensor].name, r2, w2);
    }
    free(at0);
    free(ptr);
    free(seq);
    free(task);
    free(joined);
    free(cnt);
    free(left);
    free(ready);
    return rc;
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
    p->m = (int)g->train.micro_batches;
    p->sched = g->req.order ? -1 : g->req.schedule;
    p->split_w = p->sched == IR_SCHED_ZBH1 || (g->req.order && strchr(g->req.order, 'W'));
    p->task0 = ir_xmalloc(sizeof(int) * ((size_t)p->pp + 1));
    for (int s = 0; s <= p->pp; s++) p->task0[s] = ntask(p) * s;
    p->task = ir_xcalloc((size_t)p->task0[p->pp] + 1, sizeof(ir_task));
    p->nslot = ir_xcalloc((size_t)p->pp, sizeof(int));
    if (p->split_w) classify_w(d);
    derive_deps(d);
    int rc = 0;
    double *cost = NULL;
    if (p->sched == IR_SCHED_ZBH1) {   /* zb-h1 orders its tasks by the cost model's times */
        cost = ir_xmalloc(sizeof(double) * 3 * (size_t)p->pp);
        pass_pipe_costs(d, cost);
    }
    if (p->sched < 0) rc = user_order(d, p);
    else if (pass_pipe_schedule(p, cost))
        rc = pass_error(g, g->req.pp_line, "use schedule = 1f1b or gpipe",
                        "[plan] schedule zb-h1: the stages' dependencies leave no order of this kind");
    for (int s = 0; s < p->pp && !rc; s++) rc = slots(d, p, s);
    if (!rc && p->sched == IR_SCHED_ZBH1 && check(d, 1)) {
        /* the bubble-optimal order needs transfers the blocking sends cannot
           make in that order: build it again with the sends' waits */
        if (build_zb_rdv(p))
            rc = pass_error(g, g->req.pp_line, "use schedule = 1f1b or gpipe",
                            "[plan] schedule zb-h1: no order of this kind whose transfers can be made");
        for (int s = 0; s < p->pp && !rc; s++) rc = slots(d, p, s);
    }
    free(cost);
    return rc ? rc : check(d, 0);
}

/* ---- the cost model */

void pass_pipe_costs(const ir_dist *d, double *cost)
{
    const ir_graph *g = d->g;
    const ir_pipe *p = d->pipe;
    IR_ASSERT(p);
    int sd = d->ndev / d->mesh_pp;
    for (int s = 0; s < 3 * p->pp; s++) cost[s] = 0;
    for (int n = 0; n < d->nseq; n++) {
        const ir_item *it = &d->seq[n];
        if (it->comm || it->sec != IR_SEC_MB) continue;
        const ir_subop *so = &d->sop[it->id];
        if (so->dev % sd) continue;
        cost[3 * (so->dev / sd) + pass_pipe_kind(d, n)] += pass_subop_flops(g, so, IR_SEC_MB) / (double)p->m;
    }
}

double pass_pipe_simulate(const ir_pipe *p, const double *cost, double *start, double *bubble)
{
    /* list scheduling in task order; the check proved the orders
       deadlock-free, so every sweep over the stages starts a task */
    int pp = p->pp, m = p->m, nt = ntask(p);
    double *tdone = ir_xmalloc(sizeof(double) * (size_t)pp * 3 * (size_t)m);
    for (size_t i = 0; i < (size_t)pp * 3 * (size_t)m; i++) tdone[i] = -1;
    int *next = ir_xcalloc((size_t)pp, sizeof(int)), left = nt * pp;
    double *free_at = ir_xcalloc((size_t)pp, sizeof(double)), span = 0, busy = 0;
    while (left) {
        int moved = 0;
        for (int s = 0; s < pp; s++)
            while (next[s] < nt) {
                const ir_task *t = p->task + p->task0[s] + next[s];
                double ready = free_at[s];
                int ok = 1;
                for (int i = 0; i < p->ndep && ok; i++) {
                    const ir_pdep *e = &p->dep[i];
                    if (e->s != s || e->kind != t->kind) continue;
                    double f = DONE(tdone, m, e->from_s, e->from_kind, t->mb);
                    if (f < 0) ok = 0;
                    else if (f > ready) ready = f;
                }
                if (!ok) break;
                double c = cost[3 * s + t->kind];
                if (start) start[p->task0[s] + next[s]] = ready;
                free_at[s] = DONE(tdone, m, s, t->kind, t->mb) = ready + c;
                if (free_at[s] > span) span = free_at[s];
                busy += c;
                next[s]++, left--, moved = 1;
            }
        IR_ASSERT(moved);
    }
    *bubble = span > 0 ? 1 - busy / (span * pp) : 0;
    free(tdone);
    free(next);
    free(free_at);
    return span;
}
