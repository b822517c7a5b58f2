/* pipeline.c -- op-order across micro-batches: pipeline schedules, and
 * the check that they cannot deadlock.
 *
 * With pp stages (plan.c assigns every op to one), a rank's mb-section
 * items are two tasks: its forward items (schedule positions before
 * seq_bwd) and its backward items.  A schedule lists, per stage, the
 * tasks F(mb) and B(mb) of one step in the order the stage runs them:
 *
 *   gpipe   F0 F1 .. F(m-1) B0 B1 .. B(m-1)
 *   1f1b    stage s: min(pp - s - 1, m) forwards (warm-up), then F, B
 *           alternating, then the remaining backwards (PipeDream-flush)
 *   order   the user's ([plan] order = TASKS; TASKS; ... one list per stage)
 *
 * Every stage runs F(i) before B(i), its forwards and its backwards in
 * micro-batch order (accumulated gradients start on micro-batch 0).  A
 * micro-batch between its F and its B holds its stash (what B reads of
 * F's buffers, and the buffers of transfers between stages) in a slot;
 * a stage needs as many slots as it has micro-batches in flight (memplan.c
 * lays out that many copies, lower.c unrolls the tasks with each copy's
 * offsets).
 *
 * Transfers between stages are blocking (a send returns once the receiver
 * took the data, the same on the shared-memory and NCCL backends).  Where
 * one task's trailing transfers meet the next task's leading ones, a rank
 * does those with a lower stage receive-first and those with a higher stage
 * send-first, so two neighbours never both wait to send (1F1B's steady
 * state: F(i) sends forward while the next stage's B(j) sends back).  The
 * check then simulates every rank's sequence of collectives and transfers
 * over one step and proves that each one finds all its members: no
 * deadlock, the same collective order in every group.  An order that fails
 * is rejected with the two ranks and tasks that wait on each other.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* Stage of device dev. */
static int stage_of(const ir_dist *d, int dev) { return dev / (d->ndev / d->mesh_pp); }

/* The tasks of stage s under a built-in schedule. */
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

/* Parse the user's order: one list of tasks (F3, B0 ...) per stage,
 * separated by ';'.  Returns 0 or 2 after a message. */
static int user_order(const ir_dist *d, ir_pipe *p)
{
    const ir_graph *g = d->g;
    const char *s = g->req.order;
    int line = g->req.order_line;
    static const char hint[] = "write order = TASKS; TASKS; ... with one list per stage, each task F<mb> or B<mb> "
                               "(e.g. for pp 2, micro_batches 2: order = F0 F1 B0 B1; F0 B0 F1 B1)";
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
            char *q;
            long mb = (*s == 'F' || *s == 'B') ? strtol(s + 1, &q, 10) : -1;
            if (mb < 0 || q == s + 1 || (q < end && *q != ' ' && *q != '\t'))
                return pass_error(g, line, hint, "[plan] order: stage %d: '%.*s' is not a task", st,
                                  (int)strcspn(s, " \t;"), s);
            if (mb >= p->m)
                return pass_error(g, line, hint, "[plan] order: stage %d: %c%ld, but micro_batches is %d", st, *s, mb,
                                  p->m);
            if (n == 2 * p->m)
                return pass_error(g, line, hint, "[plan] order: stage %d has more than the %d tasks F0..F%d, B0..B%d",
                                  st, 2 * p->m, p->m - 1, p->m - 1);
            t[n++] = (ir_task){*s == 'F' ? IR_TASK_F : IR_TASK_B, (int)mb, 0};
            s = q;
        }
        if (n != 2 * p->m)
            return pass_error(g, line, hint, "[plan] order: stage %d has %d tasks, not the %d of F0..F%d, B0..B%d", st,
                              n, 2 * p->m, p->m - 1, p->m - 1);
        s = e ? e + 1 : end;
    }
    return 0;
}

/* Check stage st's tasks (each once; F(i) before B(i); forwards and
 * backwards in micro-batch order) and give every micro-batch a slot.
 * Returns 0 or 2. */
static int slots(const ir_dist *d, ir_pipe *p, int st)
{
    const ir_graph *g = d->g;
    ir_task *t = p->task + p->task0[st];
    int nf = 0, nb = 0, inflight = 0, *slot = ir_xmalloc(sizeof(int) * (size_t)p->m);
    char *used = ir_xcalloc((size_t)p->m + 1, 1);
    int rc = 0;
    p->nslot[st] = 0;
    for (int k = 0; k < 2 * p->m && !rc; k++) {
        int want = t[k].kind == IR_TASK_F ? nf : nb;
        if (t[k].mb != want)
            rc = pass_error(g, d->g->req.order_line, "a stage runs its forwards in micro-batch order, and its backwards",
                            "[plan] order: stage %d runs %c%d where %c%d is next", st, t[k].kind ? 'B' : 'F', t[k].mb,
                            t[k].kind ? 'B' : 'F', want);
        else if (t[k].kind == IR_TASK_B && t[k].mb >= nf)
            rc = pass_error(g, d->g->req.order_line, "a micro-batch's backward follows its forward",
                            "[plan] order: stage %d runs B%d before F%d", st, t[k].mb, t[k].mb);
        else if (t[k].kind == IR_TASK_F) {
            int s = 0;
            while (used[s]) s++;
            used[s] = 1;
            slot[t[k].mb] = t[k].slot = s;
            nf++;
            if (++inflight > p->nslot[st]) p->nslot[st] = inflight;
        } else {
            t[k].slot = slot[t[k].mb];
            used[t[k].slot] = 0;
            nb++;
            inflight--;
        }
    }
    free(slot);
    free(used);
    return rc;
}

/* Is item n (a schedule position) a transfer between stages that may move
 * across a task boundary?  *peer: the stage it talks to, *recv: this rank
 * receives (member k). */
static int transfer(const ir_dist *d, int n, int k, int my, int *peer, int *recv)
{
    const ir_item *it = &d->seq[n];
    if (!it->comm) return 0;
    const ir_comm *c = &d->comm[it->id];
    if (c->kind != IR_COMM_SENDRECV && c->kind != IR_COMM_BROADCAST) return 0;
    const int *m = d->ints + d->grp[c->group].devs;
    int other = k == c->root ? (c->root == 0 ? 1 : 0) : c->root;
    if (other >= c->n) return 0;
    *peer = stage_of(d, m[other]);
    *recv = k != c->root;
    return *peer != my;
}

int pass_pipe_order(const ir_dist *d, int rank, pass_pipe_ent **out)
{
    const ir_pipe *p = d->pipe;
    IR_ASSERT(p && d->rank_item0);
    const int *item = d->rank_item + d->rank_item0[rank], *mem = d->rank_member + d->rank_item0[rank];
    int nitem = d->rank_item0[rank + 1] - d->rank_item0[rank], st = stage_of(d, rank);
    int nf = 0, nb = 0;
    for (int q = 0; q < nitem; q++)
        if (d->seq[item[q]].sec == IR_SEC_MB) {
            if (item[q] < d->seq_bwd) nf++;
            else nb++;
        }
    pass_pipe_ent *e = ir_xmalloc(sizeof *e * ((size_t)(nf + nb) * (size_t)p->m + 1));
    int n = 0;
    const ir_task *t = p->task + p->task0[st];
    for (int k = 0; k < 2 * p->m; k++) {
        int start = n;
        for (int q = 0; q < nitem; q++) {
            if (d->seq[item[q]].sec != IR_SEC_MB || (item[q] >= d->seq_bwd) != (t[k].kind == IR_TASK_B)) continue;
            e[n++] = (pass_pipe_ent){q, t[k].mb, t[k].slot, k};
        }
        if (k == 0) continue;
        /* the boundary: the previous task's trailing transfers and this one's
           leading ones; with a lower stage receive first, with a higher send first */
        int a = start, b = start, peer, recv;
        while (a > 0 && e[a - 1].task == k - 1 && transfer(d, item[e[a - 1].q], mem[e[a - 1].q], st, &peer, &recv)) a--;
        while (b < n && transfer(d, item[e[b].q], mem[e[b].q], st, &peer, &recv)) b++;
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
    *out = e;
    return n;
}

/* A comm instance: comm id and micro-batch. */
typedef struct inst {
    int comm, mb;
} inst;

/* The deadlock check: every rank's collectives and transfers of one step
 * (the mb section in pipeline order; the other sections follow the global
 * order, deadlock-free by construction) must each find all its members.
 * Returns 0 or 2 after a message naming two ranks that wait on each other. */
static int check(const ir_dist *d)
{
    const ir_graph *g = d->g;
    const ir_pipe *p = d->pipe;
    int W = d->ndev, m = p->m;
    int *at0 = ir_xcalloc((size_t)W + 1, sizeof(int)), *ptr = ir_xcalloc((size_t)W + 1, sizeof(int));
    inst *seq = NULL;
    int *task = NULL;   /* per instance: the task index (messages) */
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
            if (tcap < cap) task = ir_xrealloc(task, sizeof(int) * (size_t)(tcap = cap));
            task[c] = e[i].task;
        }
        free(e);
    }
    at0[W] = nseq;
    /* arrivals per instance; a queue of complete instances */
    int *cnt = ir_xcalloc((size_t)d->ncomm * (size_t)m + 1, sizeof(int));
    inst *ready = ir_xmalloc(sizeof(inst) * ((size_t)nseq + 1));
    int nready = 0;
    for (int r = 0; r < W; r++) ptr[r] = at0[r];
    /* rank r arrives at its current instance */
#define ARRIVE(r)                                                                          \
    do {                                                                                   \
        if (ptr[r] < at0[(r) + 1]) {                                                       \
            inst a_ = seq[ptr[r]];                                                         \
            if (++cnt[(size_t)a_.comm * (size_t)m + (size_t)a_.mb] == d->comm[a_.comm].n) \
                ready[nready++] = a_;                                                      \
        }                                                                                  \
    } while (0)
    for (int r = 0; r < W; r++) ARRIVE(r);
    for (int h = 0; h < nready; h++) {
        inst x = ready[h];
        const ir_comm *c = &d->comm[x.comm];
        for (int k = 0; k < c->n; k++) {
            int r = d->ints[d->grp[c->group].devs + k];
            IR_ASSERT(ptr[r] < at0[r + 1] && seq[ptr[r]].comm == x.comm && seq[ptr[r]].mb == x.mb);
            ptr[r]++;
            ARRIVE(r);
        }
    }
#undef ARRIVE
    int rc = 0;
    for (int r = 0; r < W && !rc; r++) {
        if (ptr[r] == at0[r + 1]) continue;
        /* r waits at x for a member that waits elsewhere */
        inst x = seq[ptr[r]];
        const ir_comm *c = &d->comm[x.comm];
        int r2 = -1;
        for (int k = 0; k < c->n && r2 < 0; k++) {
            int o = d->ints[d->grp[c->group].devs + k];
            if (ptr[o] == at0[o + 1] || seq[ptr[o]].comm != x.comm || seq[ptr[o]].mb != x.mb) r2 = o;
        }
        IR_ASSERT(r2 >= 0);
        const ir_task *t1 = p->task + p->task0[stage_of(d, r)] + task[ptr[r]];
        char w2[300] = "has finished its step";
        if (ptr[r2] < at0[r2 + 1]) {
            inst y = seq[ptr[r2]];
            const ir_task *t2 = p->task + p->task0[stage_of(d, r2)] + task[ptr[r2]];
            snprintf(w2, sizeof w2, "waits in its task %c%d (stage %d) at the %s of %s", t2->kind ? 'B' : 'F', t2->mb,
                     stage_of(d, r2), ir_comm_name(d->comm[y.comm].kind), g->t[d->comm[y.comm].tensor].name);
        }
        rc = pass_error(g, g->req.order_line ? g->req.order_line : g->req.pp_line,
                        "every rank of a group must reach its collectives and transfers in the same order; "
                        "change the order of these tasks, or use schedule = 1f1b or gpipe",
                        "[plan] the pipeline schedule deadlocks: rank %d waits in its task %c%d (stage %d) at the %s "
                        "of %s, but rank %d %s", r, t1->kind ? 'B' : 'F', t1->mb, stage_of(d, r),
                        ir_comm_name(c->kind), g->t[c->tensor].name, r2, w2);
    }
    free(at0);
    free(ptr);
    free(seq);
    free(task);
    free(cnt);
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
    p->task0 = ir_xmalloc(sizeof(int) * ((size_t)p->pp + 1));
    for (int s = 0; s <= p->pp; s++) p->task0[s] = 2 * p->m * s;
    p->task = ir_xcalloc((size_t)p->task0[p->pp] + 1, sizeof(ir_task));
    p->nslot = ir_xcalloc((size_t)p->pp, sizeof(int));
    int rc = 0;
    if (p->sched < 0) rc = user_order(d, p);
    else
        for (int s = 0; s < p->pp; s++) builtin(p->sched, p->pp, p->m, s, p->task + p->task0[s]);
    for (int s = 0; s < p->pp && !rc; s++) rc = slots(d, p, s);
    return rc ? rc : check(d);
}

void pass_pipe_costs(const ir_dist *d, double *fwd, double *bwd)
{
    const ir_graph *g = d->g;
    const ir_pipe *p = d->pipe;
    IR_ASSERT(p);
    int sd = d->ndev / d->mesh_pp;
    for (int s = 0; s < p->pp; s++) fwd[s] = bwd[s] = 0;
    for (int i = 0; i < d->nsop; i++) {
        const ir_subop *so = &d->sop[i];
        if (so->sec != IR_SEC_MB || so->dev % sd) continue;
        double f = pass_subop_flops(g, so, IR_SEC_MB) / (double)p->m;
        if (g->op[so->op].phase == IR_PH_BWD) bwd[so->dev / sd] += f;
        else fwd[so->dev / sd] += f;
    }
}

double pass_pipe_simulate(const ir_pipe *p, const double *fwd, const double *bwd, double *start, double *bubble)
{
    /* list scheduling in task order: F(s, i) after F(s - 1, i), B(s, i)
       after B(s + 1, i); the check proved the orders deadlock-free, so every
       sweep over the stages starts at least one task */
    int n = p->task0[p->pp];
    double *end = ir_xmalloc(sizeof(double) * (size_t)n), *fend = ir_xmalloc(sizeof(double) * (size_t)n),
           *bend = ir_xmalloc(sizeof(double) * (size_t)n);
    char *fdone = ir_xcalloc((size_t)n, 1), *bdone = ir_xcalloc((size_t)n, 1);
    int *next = ir_xcalloc((size_t)p->pp, sizeof(int)), left = n;
    double span = 0, busy = 0;
    while (left) {
        int moved = 0;
        for (int s = 0; s < p->pp; s++) {
            while (next[s] < 2 * p->m) {
                const ir_task *t = p->task + p->task0[s] + next[s];
                int ds = t->kind == IR_TASK_F ? s - 1 : s + 1;   /* the stage it waits for */
                double ready = next[s] ? end[p->task0[s] + next[s] - 1] : 0;
                if (ds >= 0 && ds < p->pp) {
                    size_t k = (size_t)ds * (size_t)p->m + (size_t)t->mb;
                    char *done = t->kind == IR_TASK_F ? fdone : bdone;
                    if (!done[k]) break;
                    double e = t->kind == IR_TASK_F ? fend[k] : bend[k];
                    if (e > ready) ready = e;
                }
                double cost = t->kind == IR_TASK_F ? fwd[s] : bwd[s];
                int at = p->task0[s] + next[s];
                if (start) start[at] = ready;
                end[at] = ready + cost;
                size_t k = (size_t)s * (size_t)p->m + (size_t)t->mb;
                if (t->kind == IR_TASK_F) fdone[k] = 1, fend[k] = end[at];
                else bdone[k] = 1, bend[k] = end[at];
                if (end[at] > span) span = end[at];
                busy += cost;
                next[s]++, left--, moved = 1;
            }
        }
        IR_ASSERT(moved);
    }
    *bubble = span > 0 ? 1 - busy / (span * p->pp) : 0;
    free(end);
    free(fend);
    free(bend);
    free(fdone);
    free(bdone);
    free(next);
    return span;
}
