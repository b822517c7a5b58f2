/* search.c -- [plan] policy = auto: the plan chosen by the cost model
 * (docs/plan-search.md), a pass over the Graph: each candidate is a plan
 * record (mesh, schedule, micro-batches, ZeRO, recompute, stage cut, op-trans
 * lists: ir_planreq) written into a graph the frontend's source gives it
 * (pass_src: the spec loaded with the dp replicas and layers folded), which
 * the passes below take as it is.
 *
 * Build and price: every candidate is planned by the real passes (plan,
 * split, comm, schedule, the pipeline's order and deadlock check), priced
 * by the cost model (passes/cost.c) on the cluster's profile, and its
 * memory is the memory planner's arena of each stage's first rank.  The
 * candidates: every dp x tp x pp making the devices (tp within a node),
 * micro-batches dividing the batch (without a pipeline 1 to 16: gradient
 * accumulation), and with pp > 1 the schedules 1f1b,
 * zb-h1, interleaved and interlaced; pipeline stages cut on the layers'
 * costs where that beats the even cut (passes/balance.c); for each, the
 * first rung of a memory ladder that fits: nothing, ZeRO 1, ZeRO 3, ZeRO 3
 * with sequence parallelism (tp > 1), then also the first quarter, half,
 * three quarters of the layers recomputed, then all of them, then also the
 * blocks' MLP chains co-sharded (the fastest that fits then bisected in
 * sixteenths of the layers recomputed: finer_recompute).  The
 * candidates of one dp x tp x pp and schedule form a chain over the
 * micro-batch counts, which stops once the step stops falling (without a
 * pipeline, once a count fits on the ladder's first rung); the chains of
 * one pp and schedule form a group over tp, priced in increasing tp, which
 * beyond 64 devices stops for pipelines too deep for the layer fold once
 * the step stops falling (tp_group); groups are priced in threads, the
 * most work first.  Then the 3 fastest with tp > 1 are priced again with
 * sequence parallelism, with the ops outside the blocks whole on each tp
 * device, and with the blocks' MLP chains on their tokens over tp (per-op
 * op-trans refinements).  What the
 * spec sets (pp, dp, tp, zero, schedule, recompute, chunks, balance, its
 * trans and stage constraints) binds every candidate.  The fastest that
 * fits wins; plan.txt lists it, the runner-ups and why each lost.
 *
 * Beyond 64 devices the dp replicas are folded: a candidate is built as
 * one replica (tp x pp devices, the batch / dp), the dp all-reduce and
 * ZeRO's memory by formula.  Layers are folded where a pipeline part holds
 * many: a candidate is estimated from two builds of k and 2k layers per
 * stage, and the fastest estimates are then built on every layer until the
 * fastest plan is one so built (assess, pass_search). */
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "passes.h"

#define SEARCH_MAX_DEVICES 64
/* Z3's work for one balanced cut (its resource units; on the build machine
 * about 2e6 a second): a count, so the cuts and the plan are the same on
 * every run */
#define SEARCH_Z3_WORK 100000
/* Z3's work for one block's op-trans (optrans.c), as SEARCH_Z3_WORK */
#define SEARCH_OT_WORK 4000000

/* the most micro-batches x stages a candidate beyond 64 micro-batches takes (Megatron's rows: 192 x 16,
   280 x 35) */
#define SEARCH_MAX_MB_STAGES 10240

#define RC_ALL 16   /* cand.rc: sixteenths of each block's repeats recomputed, the first ones */

/* A balanced cut of the layers into (virtual) stages (passes/balance.c's): the layers
   cut[k] .. cut[k + 1] - 1 on stage k, and as the report writes it ("h.0-5 0, h.6-11 1") */
typedef struct stagecut {
    int parts;
    int *cut;
    char *text;
} stagecut;

typedef struct cand {
    int dp, tp, pp, m, sched, zero, rc;
    const stagecut *stage; /* balanced stages (the plan record's op-assign), or NULL: the even cut */
    int rep;               /* 1: the ops outside the blocks split by dp alone, whole on each tp
                              device (op-trans `*0 DP replicate TP`) */
    int cos;               /* 1: the blocks' MLP chains co-sharded 4 ways on their tokens (mlp_coshard) */
    int rung;              /* the memory ladder's rung (ladder_z, ladder_rc, ladder_sp) */
    int sp;                /* 1: sequence parallel ([plan] sequence_parallel) */
    int est;               /* 1: step and mem extrapolated from two builds with the layers folded */
    int ok;                /* 1: built and priced */
    double step;           /* seconds (cost model) */
    int64_t mem;           /* bytes, the largest stage-first rank's arena */
    char why[600];         /* not ok: why */
    int rcdrop, rc2;       /* rcdrop > 0: block rcdrop - 1 recomputes rc2 sixteenths (0: none), the others rc */
    int tok;               /* 1: the blocks' MLP chains split on their tokens over the tp devices, their
                              params whole on each (op-trans `*0 DP *1 TP`: data parallel there) */
    const pass_otlist *ot; /* the blocks' forward ops' op-trans searched per block (passes/optrans.c:
                              an item per op, owned by the search; replaces tok's), or NULL */
    double sratio;         /* with stage: the cut's slowest stage over the even cut's on the layers'
                              costs (a folded estimate, built on the even cut, is scaled by it) */
    int st0, stl;          /* > 0: the first (st0) and last (stl) stage's own tp ([plan] stage_tp), the
                              others tp; 0: every stage tp */
    int died;              /* 1: not ok because a pass hit an internal error (ir_die) building it: why
                              says where; skipped, the search goes on (build_guarded) */
    double dom, domlb;     /* dom > 0: its ladder stopped at this rung, which does not fit, where no
                              rung above can be faster than domlb, slower than dom, the incumbent
                              (search_ctx.U; climb) */
    double spgain;         /* seconds: without sequence parallelism, the most it could take off the step
                              (sp_gain) */
    double zgain;          /* seconds: the most a higher ZeRO level could take off the step (its time
                              outside the micro-batches: ZeRO shards the updates there, and its
                              collectives move the all-reduce's bytes or more) */
} cand;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Schedule s's name as a spec writes it (kFkB: its k, group, as "2f2b"). */
static const char *sched_name(int s, int group, char buf[24])
{
    switch (s) {
    case IR_SCHED_GPIPE: return "gpipe";
    case IR_SCHED_ZBH1: return "zb-h1";
    case IR_SCHED_INTERLEAVED: return "interleaved";
    case IR_SCHED_INTERLACED: return "interlaced";
    case IR_SCHED_KFKB: return snprintf(buf, 24, "%df%db", group, group), buf;
    default: return "1f1b";
    }
}

/* The layers of block b that q sixteenths of its repeats recompute: at
 * least one, none for q = 0. */
static int blk_layers(const ir_graph *g, int b, int q)
{
    int r = g->blk[b].repeat, k = r * q / RC_ALL;
    return q <= 0 ? 0 : k < 1 ? 1 : k > r ? r : k;
}

/* The layers recomputed where q sixteenths (1 .. RC_ALL) of each block's
 * repeats are, the first ones (the first stages', which keep the most
 * micro-batches' stash), at least one of each block; drop > 0: block
 * drop - 1 takes q2 sixteenths instead (0: none of it).  g non-NULL: also
 * set them as g's plan record's recompute items, and its recompute text
 * (plan.txt's: "h.0-5, e.0-1" for q 8; RC_ALL: every block whole, "h, e"). */
static int all_blocks(const ir_graph *cg, ir_graph *g, int q, int drop, int q2)
{
    int nl = 0, n = 0;
    ir_rcitem *it = g ? ir_galloc(g, sizeof *it * ((size_t)cg->nblk + 1)) : NULL;
    ir_buf tb = {0};
    for (int b = 0; b < cg->nblk; b++) {
        int r = cg->blk[b].repeat, k = blk_layers(cg, b, b + 1 == drop ? q2 : q);
        if (!k) continue;
        nl += k;
        if (!g) continue;
        it[n] = (ir_rcitem){b, 0, k < r ? k - 1 : -1, 0, NULL};
        if (k < r && k > 1) ir_bprintf(&tb, "%s%s.0-%d", n ? ", " : "", cg->blk[b].name, k - 1);
        else if (k < r) ir_bprintf(&tb, "%s%s.0", n ? ", " : "", cg->blk[b].name);
        else ir_bprintf(&tb, "%s%s", n ? ", " : "", cg->blk[b].name);
        n++;
    }
    if (g) {
        g->req.L.rc = it, g->req.L.nrc = n;
        g->req.recompute = n ? ir_str(g, tb.s) : NULL;
    }
    ir_buf_free(&tb);
    return nl;
}

/* The blocks' MLP chains, as the block-generic names of their ops ("h.fc",
 * every repeat's; *names and its strings malloc'd, *n of them): in each
 * block's first repeat, every activation (gelu, relu, silu) with the matmul
 * and bias_add that feed it, a gate (mul) reading it with the matmul and
 * bias_add making its other input (SwiGLU), and the matmul and bias_add
 * that read the result.  0, or 1 (nothing in *names): no such chain, or
 * one without tokens (an op without the identifier `*1`: [B, C]
 * activations). */
static int mlp_ops(const ir_graph *g, char ***names, int *n)
{
    int cap = 0;
    *names = NULL, *n = 0;
    char *in = ir_xcalloc((size_t)g->nop + 1, 1);
    for (int i = 0; i < g->nop; i++) {
        const ir_op *o = &g->op[i];
        if (o->phase != IR_PH_FWD || o->block < 0 || o->rep != 0 || (o->kind != IR_OP_GELU && o->kind != IR_OP_RELU && o->kind != IR_OP_SILU))
            continue;
        in[i] = 1;
        /* back: the bias_add and the matmul that feed it */
        for (int p = g->t[o->in[0]].producer, k = 0; p >= 0 && k < 2; k++) {
            if (g->op[p].block != o->block || (g->op[p].kind != IR_OP_BIAS_ADD && g->op[p].kind != IR_OP_MATMUL)) break;
            in[p] = 1;
            if (g->op[p].kind == IR_OP_MATMUL) break;
            p = g->t[g->op[p].in[0]].producer;
        }
        /* on: a gate (mul: SwiGLU's, with the matmul and bias_add making its other input), then
           the matmul that reads it and the bias_add after that */
        int t = o->out[0];
        for (int j = 0; j < g->nop; j++) {
            const ir_op *m = &g->op[j];
            if (m->phase != IR_PH_FWD || m->block != o->block || m->kind != IR_OP_MUL || m->nin != 2) continue;
            int side = m->in[0] == t ? 1 : m->in[1] == t ? 0 : -1;
            if (side < 0) continue;
            in[j] = 1;
            for (int p = g->t[m->in[side]].producer, k = 0; p >= 0 && k < 2; k++) {
                if (g->op[p].block != o->block || (g->op[p].kind != IR_OP_BIAS_ADD && g->op[p].kind != IR_OP_MATMUL)) break;
                in[p] = 1;
                if (g->op[p].kind == IR_OP_MATMUL) break;
                p = g->t[g->op[p].in[0]].producer;
            }
            t = m->out[0];
            break;
        }
        for (int k = 0; k < 2; k++) {
            int next = -1;
            for (int j = 0; j < g->nop && next < 0; j++)
                if (g->op[j].phase == IR_PH_FWD && g->op[j].block == o->block && g->op[j].nin && g->op[j].in[0] == t &&
                    g->op[j].kind == (k ? IR_OP_BIAS_ADD : IR_OP_MATMUL))
                    next = j;
            if (next < 0) break;
            in[next] = 1;
            t = g->op[next].out[0];
        }
    }
    int bad = 0;
    for (int i = 0; i < g->nop && !bad; i++) {
        if (!in[i]) continue;
        const char *bn = g->blk[g->op[i].block].name, *on = g->op[i].name;
        size_t bl = strlen(bn);
        const char *tail = strchr(on + bl + 1, '.');   /* "h.0.fc" -> "fc" */
        if (strncmp(on, bn, bl) || on[bl] != '.' || !tail) continue;
        bad = ir_anno_find(&g->op[i].anno, "*1") < 0;   /* no tokens to split ([B, C] activations) */
        char nm[512];
        snprintf(nm, sizeof nm, "%s.%s", bn, tail + 1);
        *IR_PUSH(*names, *n, cap) = ir_xstrdup(nm);
    }
    free(in);
    if (bad || !*n) {
        for (int k = 0; k < *n; k++) free((*names)[k]);
        free(*names);
        *names = NULL, *n = 0;
        return 1;
    }
    return 0;
}

static void free_names(char **v, int n)
{
    for (int k = 0; k < n; k++) free(v[k]);
    free(v);
}

/* Does g have an MLP chain to split on its tokens (mlp_ops)? */
static int has_mlp(const ir_graph *g)
{
    char **v;
    int n;
    if (mlp_ops(g, &v, &n)) return 0;
    free_names(v, n);
    return 1;
}

/* g's plan record's coshard: the blocks' MLP chains in 4 pieces of their
 * tokens a device ("h.fc *1 4, ..."); 0, or 1: no such chain. */
static int mlp_coshard(ir_graph *g)
{
    char **v;
    int n;
    if (mlp_ops(g, &v, &n)) return 1;
    ir_cosh *c = ir_galloc(g, sizeof *c * (size_t)n);
    for (int k = 0; k < n; k++) {
        c[k].pat = ir_str(g, v[k]);
        snprintf(c[k].id, sizeof c[k].id, "*1");
        c[k].k = 4;
    }
    g->req.L.cos = c, g->req.L.ncos = n;
    free_names(v, n);
    return 0;
}

/* The passes from autograd to the pipeline's order on a loaded graph; d is
 * initialised either way (the caller frees it).  0, or 2 (the message in
 * pass_last_error when pass_quiet).  die: the test hook NNSC_SEARCH_FAIL
 * (docs/testing.md) -- an internal error after the comm pass, in the middle
 * of the build, as a pass's own would be. */
static int plan_all(ir_graph *g, ir_dist *d, int die)
{
    int rc = pass_autograd(g) || pass_recompute(g);
    if (!rc) pass_zero3_regather(g);
    ir_dist_init(d, g, g->req.devices);
    if (!rc) rc = pass_plan(d);
    if (!rc) {
        pass_split(d);
        pass_comm(d);
        if (die) ir_die(__FILE__, __LINE__, "NNSC_SEARCH_FAIL: this candidate's build dies here (a test hook)");
        pass_schedule(d);
        rc = pass_pipeline(d);
    }
    return rc;
}

/* Op-trans item pat with splits (id, parts) ... (nsplit of them) appended
 * to v (*n of *cap; pat copied into g's pool). */
static void ot_push(ir_graph *g, ir_optrans **v, int *n, int *cap, const char *pat, int nsplit, const char *id0,
                    int p0, const char *id1, int p1)
{
    ir_optrans *u = IR_PUSH(*v, *n, *cap);
    memset(u, 0, sizeof *u);
    u->pat = ir_str(g, pat);
    const char *id[2] = {id0, id1};
    const int pt[2] = {p0, p1};
    for (int k = 0; k < nsplit; k++) {
        snprintf(u->id[k], sizeof u->id[k], "%s", id[k]);
        u->parts[k] = pt[k];
    }
    u->n = nsplit;
}

/* c's op-trans as g's plan record's trans (dp: the dp of the build), and
 * as its text for plan.txt: with rep, the forward ops outside the blocks
 * split by dp alone, whole on each of the tp devices ("lm_head *0 4
 * replicate 2, ..."); with tok, the blocks' MLP chains split by dp and then
 * on their tokens over the tp devices ("h.fc *0 4 *1 2, ...": data
 * parallel on the tp axis, the chain's params whole on each device, their
 * gradients summed over tp); with ot, the blocks' forward ops as the
 * per-block search chose them (in place of tok's: each op's batch
 * identifier split by dp, replicate where it has none, then what tp
 * splits).
 * Returns 0, or 1: tok and no MLP chain. */
static int plan_trans(ir_graph *g, const cand *c, int dp)
{
    ir_optrans *v = NULL;
    int n = 0, cap = 0, rc = 0;
    for (int i = 0; i < g->nop && c->rep; i++) {
        const ir_op *op = &g->op[i];
        if (op->phase != IR_PH_FWD || op->block >= 0) continue;
        if (dp > 1) ot_push(g, &v, &n, &cap, op->name, 2, "*0", dp, "replicate", c->tp);
        else ot_push(g, &v, &n, &cap, op->name, 1, "replicate", c->tp, NULL, 0);
    }
    for (int k = 0; c->ot && k < c->ot->n; k++) {
        const pass_otchoice *o = &c->ot->v[k];
        if (dp > 1) ot_push(g, &v, &n, &cap, o->pat, 2, o->batch[0] ? o->batch : "replicate", dp, o->split, c->tp);
        else ot_push(g, &v, &n, &cap, o->pat, 1, o->split, c->tp, NULL, 0);
    }
    if (!c->ot && c->tok) {
        char **nm;
        int nn;
        rc = mlp_ops(g, &nm, &nn);
        for (int k = 0; k < nn; k++) {
            if (dp > 1) ot_push(g, &v, &n, &cap, nm[k], 2, "*0", dp, "*1", c->tp);
            else ot_push(g, &v, &n, &cap, nm[k], 1, "*1", c->tp, NULL, 0);
        }
        if (!rc) free_names(nm, nn);
    }
    if (n) {
        ir_buf tb = {0};
        for (int k = 0; k < n; k++) {
            ir_bprintf(&tb, "%s%s", k ? ", " : "", v[k].pat);
            for (int j = 0; j < v[k].n; j++) ir_bprintf(&tb, " %s %d", v[k].id[j], v[k].parts[j]);
        }
        g->req.trans = ir_str(g, tb.s);
        ir_buf_free(&tb);
        g->req.L.trans = ir_galloc(g, sizeof *v * (size_t)n);
        memcpy(g->req.L.trans, v, sizeof *v * (size_t)n);
        g->req.L.ntrans = n;
    }
    free(v);
    return rc;
}

/* Stage s's tp in candidate c. */
static int tp_at(const cand *c, int s)
{
    return s == 0 && c->st0 ? c->st0 : s == c->pp - 1 && c->stl ? c->stl : c->tp;
}

/* g's plan record's stage_tp from candidate c's first and last stage's
 * own tp (st0, stl; the others tp); 0, or 1: c has none. */
static int rec_stage_tp(ir_graph *g, const cand *c)
{
    if (!c->st0 && !c->stl) return 0;
    int *t = ir_galloc(g, sizeof(int) * (size_t)c->pp);
    for (int s = 0; s < c->pp; s++) t[s] = tp_at(c, s);
    g->req.L.stage_tp = t, g->req.L.nstage_tp = c->pp;
    return 1;
}

/* g's plan record's op-assign from the balanced cut sc: each block's
 * layers on their stage (cut's layers count the blocks' repeats in
 * order). */
static void rec_stage(ir_graph *g, const stagecut *sc)
{
    ir_assign *a = ir_galloc(g, sizeof *a * ((size_t)sc->parts * ((size_t)g->nblk + 1)));
    int n = 0;
    for (int k = 0; k < sc->parts; k++) {
        int l0 = 0;
        for (int bl = 0; bl < g->nblk; bl++) {
            int r = g->blk[bl].repeat, lo = sc->cut[k] > l0 ? sc->cut[k] : l0,
                hi = sc->cut[k + 1] < l0 + r ? sc->cut[k + 1] : l0 + r;
            if (lo < hi) a[n++] = (ir_assign){NULL, k, 0, bl, lo - l0, hi - 1 - l0};
            l0 += r;
        }
    }
    g->req.L.stage = a, g->req.L.nstage = n;
}

/* q sixteenths as a spec's reader says them: 1/4, half, 3/4, 5/16, all. */
static int rc_text(int q, char *buf, size_t n)
{
    if (q == RC_ALL / 2) return snprintf(buf, n, "half");
    if (q == RC_ALL) return snprintf(buf, n, "all");
    int num = q, den = RC_ALL;
    while (num % 2 == 0 && den % 2 == 0) num /= 2, den /= 2;
    return snprintf(buf, n, "%d/%d", num, den);
}

/* Candidate c's [plan] stage_tp ("4 2 2 1"), or 0 without. */
static int stp_text(const cand *c, char *buf, size_t n)
{
    if (!c->st0 && !c->stl) return 0;
    size_t u = 0;
    for (int s = 0; s < c->pp && u < n; s++) u += (size_t)snprintf(buf + u, n - u, "%s%d", s ? " " : "", tp_at(c, s));
    return 1;
}

static void cand_text(const ir_graph *g, const cand *c, char *buf, size_t n)
{
    int group = g->req.group;
    int u = snprintf(buf, n, "dp %d x tp %d x pp %d, micro_batches %d", c->dp, c->tp, c->pp, c->m);
    char sn[24];
    if (c->pp > 1) u += snprintf(buf + u, n - (size_t)u, ", %s", sched_name(c->sched, group, sn));
    if (c->stage) u += snprintf(buf + u, n - (size_t)u, ", balanced stages");
    char stb[160];
    if (stp_text(c, stb, sizeof stb) && u < (int)n) u += snprintf(buf + u, n - (size_t)u, ", stage tp %s", stb);
    if (c->rep) u += snprintf(buf + u, n - (size_t)u, ", ops outside the blocks whole on tp");
    if (c->tok && !c->ot) u += snprintf(buf + u, n - (size_t)u, ", MLP on tokens over tp");
    if (c->ot) u += snprintf(buf + u, n - (size_t)u, ", op-trans searched per block");
    if (c->zero) u += snprintf(buf + u, n - (size_t)u, ", zero %d", c->zero);
    if (c->sp) u += snprintf(buf + u, n - (size_t)u, ", sequence parallel");
    char q[16];
    if (c->rc == RC_ALL && !c->rcdrop) u += snprintf(buf + u, n - (size_t)u, ", recompute");
    else if (c->rc) u += (rc_text(c->rc, q, sizeof q), snprintf(buf + u, n - (size_t)u, ", recompute %s", q));
    if (c->rcdrop) {   /* one block otherwise: "recompute 3/4 (e 1/2)", "(e none)" */
        if (c->rc2) rc_text(c->rc2, q, sizeof q);
        u += snprintf(buf + u, n - (size_t)u, " (%s %s)", g->blk[c->rcdrop - 1].name, c->rc2 ? q : "none");
    }
    if (c->cos) snprintf(buf + u, n - (size_t)u, ", coshard MLP x4");
}

/* ---- the candidates' graphs: each (batch_div, layers) the source loads
 * once, kept for the search (the spec parsed and lowered again per
 * candidate was ~6 % of GPT-3's search on 1024 devices), and every load a
 * clone of it (ir_graph_clone: its own arrays, the source's strings and
 * lists, which the search replaces and never writes).  Thread-safe; loads
 * of a key not kept yet run outside the lock, the first to finish kept.
 * Past GCACHE_BYTES of kept arrays a load is the source's own. */
#define GCACHE_BYTES ((size_t)512 << 20)
typedef struct gkept {
    int64_t div;
    int layers;
    ir_graph g;
} gkept;
typedef struct gcache {
    const pass_src *src;
    pthread_mutex_t mu;
    gkept **e;
    int n, cap;
    size_t bytes;
} gcache;

static gkept *gcache_find(gcache *c, int64_t div, int layers)
{
    for (int i = 0; i < c->n; i++)
        if (c->e[i]->div == div && c->e[i]->layers == layers) return c->e[i];
    return NULL;
}

static int gcache_load(void *ctx, int64_t div, int layers, ir_graph *g)
{
    gcache *c = ctx;
    pthread_mutex_lock(&c->mu);
    gkept *k = gcache_find(c, div, layers);
    if (k) ir_graph_clone(g, &k->g);
    pthread_mutex_unlock(&c->mu);
    if (k) return 0;
    ir_graph s;
    if (c->src->load(c->src->ctx, div, layers, &s)) return 1;
    size_t by = sizeof(ir_tensor) * (size_t)s.nt + sizeof(ir_op) * (size_t)s.nop + sizeof(ir_block) * (size_t)s.nblk;
    pthread_mutex_lock(&c->mu);
    if ((k = gcache_find(c, div, layers))) ir_graph_clone(g, &k->g);   /* (another thread's, first) */
    else if (c->bytes + by <= GCACHE_BYTES) {
        k = ir_xmalloc(sizeof *k);
        k->div = div, k->layers = layers, k->g = s;
        *IR_PUSH(c->e, c->n, c->cap) = k;
        c->bytes += by;
        ir_graph_clone(g, &k->g);
    } else *g = s;
    pthread_mutex_unlock(&c->mu);
    if (k && k->g.t != s.t) ir_graph_free(&s);
    return 0;
}

static void gcache_free(gcache *c)
{
    for (int i = 0; i < c->n; i++) ir_graph_free(&c->e[i]->g), free(c->e[i]);
    free(c->e);
    pthread_mutex_destroy(&c->mu);
}

/* Build and price candidate c; fills c->ok, step, mem or why.  layers > 0:
 * built with the blocks' repeats scaled to that many layers in all (the
 * layer fold, below).  fold: the
 * dp replicas folded -- the candidate is built on its tp x pp devices
 * alone (dp 1, no ZeRO) for one replica's batch (the inputs' batch / dp;
 * fold 2, recycling: the whole batch, its micro-batch work and activations
 * divided by dp), and the dp gradient collectives (all-reduces in one
 * bucket of a rank's params, bucket.c; under ZeRO 2 and 3 the micro-batches'
 * reduce-scatters and gathers too; ring, over the network once the cluster
 * spans nodes) and ZeRO's memory by formula. */
/* Load the spec as candidate c builds it (price's graph: fold and layers as
 * there), its plan request set; *N0 and *pn0 the spec's devices and devices
 * per node (a folded build holds fewer).  0, or 1 with why in c->why. */
static int setup(const pass_src *o, cand *c, int fold, int layers, ir_graph *gp, int *N0, int *pn0)
{
    ir_graph g;
    if (o->load(o->ctx, fold == 1 ? c->dp : 1, layers, &g)) {
        snprintf(c->why, sizeof c->why, "the spec does not load");
        return 1;
    }
    ir_planreq *r = &g.req;
    r->policy = ir_str(&g, "hybrid");
    r->dp = fold ? 1 : c->dp;
    r->tp = c->tp;
    r->pp = c->pp;
    r->schedule = c->sched;
    r->zero = fold ? 0 : c->zero;
    if (c->sp) r->seq_par = 1;
    const int per_node = g.prof.per_node, wsd = c->dp * c->tp;   /* (the whole plan's devices per stage) */
    *N0 = g.req.devices, *pn0 = per_node;
    if (fold) {
        g.req.devices = c->tp * c->pp;
        /* the nodes as the whole plan has them: stage s's tp group of the first replica is
           devices s sd .. s sd + tp - 1 there, s tp .. s tp + tp - 1 here, so per_node / dp
           of these make a node (tp: a stage, or more, per node) */
        g.prof.per_node = wsd >= per_node ? c->tp : per_node / c->dp > c->tp ? per_node / c->dp : c->tp;
    }
    g.train.micro_batches = c->m;
    /* the candidate's plan record, over the spec's (what it binds is in the candidate already) */
    rec_stage_tp(&g, c);
    if (r->L.nstage_tp) r->dp = r->tp = 0;   /* (stage_tp sets each stage's; the spec's, or the candidate's) */
    if (c->stage) rec_stage(&g, c->stage);
    if ((c->rep || c->tok || c->ot) && plan_trans(&g, c, r->dp)) {
        snprintf(c->why, sizeof c->why, "no MLP chain to split on its tokens");
        ir_graph_free(&g);
        return 1;
    }
    if (c->cos) mlp_coshard(&g);
    if (c->rc) all_blocks(&g, &g, c->rc, c->rcdrop, c->rc2);
    *gp = g;
    return 0;
}

/* What one build of a candidate measures, before the dp fold's formula:
 * the cost model's step and its part outside the micro-batches, and per
 * stage its first rank's arena, persistent bytes, and the params it holds
 * (bytes, count).  Where the dp replicas fold, the build is the same for
 * every ZeRO level (one replica, dp 1, no ZeRO: price_fold's formula adds
 * ZeRO), so the memory ladder's rungs that differ in ZeRO alone share one
 * (a bcache). */
typedef struct stage_meas {
    double arena, persistent, f;
    int np;
} stage_meas;
typedef struct meas {
    int ok, died;          /* built (else why), a pass died (ir_die) */
    char why[600];
    double step, outside;
    int N, per_node;       /* the spec's devices and devices a node (setup's) */
    ir_profile pf;         /* the build's profile (its name not kept) */
    int optimizer, no_grad_buckets;
    int nst;               /* stages */
    stage_meas *st;
    double spgain;         /* without sequence parallelism, on tp: at most what it could take off the
                              step (sp_gain) */
} meas;

static void meas_free(meas *m)
{
    free(m->st);
    memset(m, 0, sizeof *m);
}

/* The most sequence parallelism could take off the step of the built plan d
 * (tp > 1, without it): it splits the blocks' ops that tp leaves whole (the
 * layernorms, residual adds) on the sequence, so their work can fall to a
 * tp-th, and it makes the activations that cross stages, and local copies,
 * a tp-th; the tp collectives stay the same bytes and steps (an all-reduce
 * becomes a reduce-scatter and an all-gather) and it adds its gradients'
 * all-reduce.  So the step falls by at most what those items cost: summed
 * per step over one rank of every stage (a path through the pipeline meets
 * each stage's). */
static double sp_gain(const ir_dist *d)
{
    const ir_graph *g = d->g;
    int sd = d->ndev / d->mesh_pp;
    double m = g->train.micro_batches, sum = 0;
    for (int n = 0; n < d->nseq; n++) {
        const ir_item *it = &d->seq[n];
        double t = 0, k = it->sec == IR_SEC_MB ? m : it->sec == IR_SEC_PROLOGUE ? 0 : 1;
        if (it->comm) {
            const ir_comm *c = &d->comm[it->id];
            if (c->kind != IR_COMM_SENDRECV && c->kind != IR_COMM_COPY) continue;
            const int *mem = d->ints + d->grp[c->group].devs;
            int on = 0;   /* (members that are a stage's first rank) */
            for (int j = 0; j < c->n; j++) on += mem[j] % sd == 0;
            if (on) t = on * pass_cost_comm(d, c);
        } else {
            const ir_subop *so = &d->sop[it->id];
            const ir_op *o = &g->op[so->op];
            int fo = o->phase == IR_PH_FWD ? so->op : o->fwd, whole = 0;
            if (so->dev % sd || fo < 0 || g->op[fo].block < 0 || o->phase == IR_PH_OPT) continue;
            const ir_trans *tr = &d->trans[fo];
            for (int j = 0; j < tr->nsplit; j++) whole |= tr->id[j] == IR_REPLICATE;
            if (whole || tr->nsplit == 0) t = pass_cost_subop(d, so, it->sec);
        }
        sum += k * t;
    }
    return sum;
}

/* price's build of c on its loaded graph g into d, measured into *r (die: plan_all's). */
static void measure_built(int fold, ir_graph *g, ir_dist *d, int die, meas *r)
{
    int rc = plan_all(g, d, die);
    if (rc) {
        snprintf(r->why, sizeof r->why, "%s", pass_last_error[0] ? pass_last_error : "not buildable");
        return;
    }
    pass_estimate e;
    pass_cost_step(d, &e);
    r->step = e.step, r->outside = e.outside;
    if (!g->req.seq_par) r->spgain = sp_gain(d);
    int sd = d->ndev / d->mesh_pp;
    r->st = ir_xcalloc((size_t)d->mesh_pp + 1, sizeof *r->st);
    for (int s = 0; s < d->mesh_pp; s++) {
        pass_mem m;
        pass_memplan(d, s * sd, &m);
        stage_meas *q = &r->st[r->nst++];
        q->arena = (double)m.arena, q->persistent = (double)m.persistent;
        for (int t = 0; t < g->nt && fold; t++) {   /* (the params this stage's first rank holds) */
            int held = 0;
            for (int k = 0; k < d->nstore[t] && g->t[t].kind == IR_T_PARAM; k++) {
                const ir_ptensor *p = &d->pt[d->ints[d->store[t] + k]];
                if (p->dev == s * sd) q->f += (double)ir_box_numel(&p->box, g->t[t].ndim) * 4, held = 1;
            }
            q->np += held;
        }
        pass_mem_free(&m);
    }
    r->ok = 1;
}

/* c's step and memory from its build's measures r: as built, or where the
 * dp replicas fold (fold), one replica's arena with params, gradients and
 * state by c's ZeRO level, and its step with the dp gradient collectives. */
static void price_fold(cand *c, int fold, const meas *r)
{
    const ir_profile *pf = &r->pf;
    const int optimizer = r->optimizer, no_grad_buckets = r->no_grad_buckets;
    c->spgain = r->spgain, c->zgain = r->outside;
    const int wsd = c->dp * c->tp;   /* (the whole plan's devices per stage) */
    const int N = r->N, per_node = r->per_node;
    c->step = r->step;
    c->mem = 0;
    double dp = fold ? c->dp : 1, adiv = fold == 2 ? dp : 1;   /* (fold 1: one replica's batch built) */
    for (int s = 0; s < r->nst; s++) {
        const stage_meas *m = &r->st[s];
        double mem = m->arena;
        if (fold) {   /* one replica's arena; params, gradients and state by ZeRO level */
            double f = m->f;
            int np = m->np;   /* the params this stage's first rank holds (one collective each, unbucketed) */
            double st = optimizer == IR_OP_ADAMW ? 2 * f : 0, pgs = 2 * f + st;
            double z = c->zero == 0 ? pgs : c->zero == 1 ? 2 * f + st / dp : c->zero == 2 ? f + (f + st) / dp
                                                                                            : pgs / dp;
            mem = (m->arena - m->persistent) / adiv + m->persistent - pgs + z;
            /* the step: one replica's micro-batches, then the slowest stage's gradient all-reduce */
            int spans = wsd > per_node || (N > per_node && per_node % wsd);   /* (a stage's dp group) */
            if (spans) {   /* its members on one node (their ports carry it: pass_cost_collective) */
                int on = (wsd < per_node ? wsd : per_node) / c->tp;
                spans = on > 1 ? on : 1;
            }
            /* (without ZeRO one bucket of every gradient, bucket.c: a ring all-reduce's 2 rounds;
               ZeRO 1 reduce-scatters and gathers them once, 2 rounds too; ZeRO 2 reduce-scatters
               them in every micro-batch and gathers them once, ZeRO 3 gathers them twice in every
               micro-batch and reduce-scatters them once: m + 1 and 2 m + 1 rounds; a round moves
               (dp - 1) / dp of them, packed in buckets of at most pass_bucket_cap bytes -- the
               micro-batches' without a pipeline, else one by one) */
            int nb = no_grad_buckets ? np : c->zero == 0 ? 1 : c->pp > 1 && c->zero >= 2 ? np
                                                           : (int)ceil(f / (double)pass_bucket_cap(pf));
            if (nb > np) nb = np;
            double rounds = c->zero <= 1 ? 2 : c->zero == 2 ? c->m + 1 : 2 * c->m + 1;
            double ar = rounds * nb * pass_cost_collective(pf, IR_COMM_ALLGATHER, c->dp, 0, spans) +
                        pass_cost_collective(pf, IR_COMM_ALLGATHER, c->dp, rounds * (dp - 1) / dp * f, spans);
            double st_step = (r->step - r->outside) / adiv + r->outside / (c->zero ? dp : 1) + ar;
            if (s == 0 || st_step > c->step) c->step = st_step;
        }
        if (mem > (double)c->mem) c->mem = (int64_t)mem;
    }
    c->ok = 1;
}

/* Run measure_built under a recovery point (ir_recover): 0, or 1 where a pass
 * died (ir_die), the message in rv->msg.  (This function's only locals are its
 * parameters: what the build changes lives in the caller's frame.) */
static int build_guarded(ir_recover *rv, int fold, ir_graph *g, ir_dist *d, int die, meas *r)
{
    ir_recover_push(rv);
    if (setjmp(rv->jb) == 0) {
        measure_built(fold, g, d, die, r);
        ir_recover_pop(rv);
        return 0;
    }
    return 1;
}

/* Do a and b build the same graph and plan, at the given layers (what differs
 * between them is priced by formula: ZeRO, where the dp replicas fold)? */
static int same_build(const cand *a, const cand *b, int fold)
{
    return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && a->m == b->m && a->sched == b->sched &&
           (fold || a->zero == b->zero) && a->rc == b->rc && a->stage == b->stage && a->rep == b->rep &&
           a->cos == b->cos && a->sp == b->sp && a->rcdrop == b->rcdrop && a->rc2 == b->rc2 && a->tok == b->tok &&
           a->ot == b->ot && a->st0 == b->st0 && a->stl == b->stl;
}

/* The builds one climb of the memory ladder made (its rungs that differ in
 * ZeRO alone share them where the dp replicas fold): one per layer count
 * (the layer fold's two, or every layer). */
typedef struct bcache {
    int n;
    struct {
        cand key;
        int layers;
        meas r;
    } e[3];
} bcache;

static void bcache_free(bcache *b)
{
    for (int i = 0; b && i < b->n; i++) meas_free(&b->e[i].r);
    if (b) b->n = 0;
}

/* Build (or find in bc, when given) and price c; fills c->ok, step, mem or
 * why.  layers > 0: built with the blocks' repeats scaled to that many
 * layers in all (the layer fold).  A candidate a pass cannot build (an
 * internal error: a bug, never the user's) is reported and skipped, not the
 * search's end: c->died, why "not buildable: internal error at FILE:LINE:
 * ...".  Its graph and dist are freed (every array they own was linked in
 * when grown); what the dying pass held in its own locals (its scratch: the
 * comm pass's indexes, a memory plan, a Z3 context) is lost, one pass's
 * worth per such candidate.  No lock is held across it: the spec is loaded
 * (inih's lock) before the recovery point.  fail: NNSC_SEARCH_FAIL's
 * pattern, the test hook (a candidate whose text, on the search's graph g0,
 * contains it dies). */
static void price(const pass_src *o, const ir_graph *g0, cand *c, int fold, int layers, const char *fail, bcache *bc)
{
    c->died = 0;
    const meas *r = NULL;
    for (int i = 0; bc && i < bc->n && !r; i++)
        if (bc->e[i].layers == layers && same_build(&bc->e[i].key, c, fold)) r = &bc->e[i].r;
    int die = 0;
    if (fail && *fail) {   /* (the hook's candidates are built, to die) */
        char ct[240];
        cand_text(g0, c, ct, sizeof ct);
        die = strstr(ct, fail) != NULL;
    }
    meas nr;
    memset(&nr, 0, sizeof nr);
    if (!r || die) {
        ir_graph g;
        if (setup(o, c, fold, layers, &g, &nr.N, &nr.per_node)) return;
        ir_dist d;
        memset(&d, 0, sizeof d);   /* (ir_dist_free of a build that died before ir_dist_init) */
        ir_recover rv;
        if (build_guarded(&rv, fold, &g, &d, die, &nr)) {
            free(nr.st);
            nr.st = NULL, nr.nst = 0, nr.ok = 0, nr.died = 1;
            snprintf(nr.why, sizeof nr.why, "not buildable: internal error at %s", rv.msg);
        }
        nr.pf = g.prof;   /* (setup's: a folded build's nodes) */
        nr.pf.name = NULL;
        nr.optimizer = g.train.optimizer, nr.no_grad_buckets = g.req.no_grad_buckets;
        ir_dist_free(&d);
        ir_graph_free(&g);
        r = &nr;
    }
    if (r->ok) price_fold(c, fold, r);
    else {
        c->ok = 0, c->died = r->died;
        snprintf(c->why, sizeof c->why, "%s", r->why);
    }
    if (r != &nr) return;
    if (bc && bc->n < 3 && !die) {   /* (kept for the rungs after it) */
        bc->e[bc->n].key = *c;
        bc->e[bc->n].layers = layers;
        bc->e[bc->n++].r = nr;
    } else meas_free(&nr);
}

/* ---- the search's context, and the layer fold
 *
 * A candidate whose pipeline parts (stages, or virtual stages) hold many
 * layers each is priced from two builds with the blocks' repeats scaled
 * down to k and 2k layers per part, extrapolated to the spec's layers:
 * each part's work, activations, params and collectives grow by a layer's
 * at every layer, and the step and memory are taken as affine in the layers
 * per part.  The fastest estimates are then built on every layer (pass_search),
 * so the plan chosen is priced exactly. */
typedef struct chain chain;
typedef struct search_ctx {
    const pass_src *o;
    const ir_graph *g;
    chain *ch;
    int nch, fold, fz, frc;
    int fsp;             /* 1: the spec sets sequence_parallel (it binds every candidate) */
    char rcq[5];         /* per quarters q (1 .. 3): the ladder's rung recomputing them (it recomputes
                            more layers than the rung before, and fewer than all) */
    int lfold;           /* 1: layers may be folded */
    int cos;             /* 1: the ladder's coshard rung (the blocks have an MLP chain, the spec no coshard) */
    int nl;              /* the blocks' layers */
    int next;            /* the next group to take (atomic) */
    int *grp, ngrp;      /* the groups' heads (tp_group), the most work first */
    const char *fail;    /* NNSC_SEARCH_FAIL (a test hook, docs/testing.md): the candidates whose text
                            contains it die in their build (price), or NULL */
    int spfirst;         /* 1: the incumbent needed the sequence-parallel rung or more (memory is short):
                            each group's first climb prices that rung first (climb) */
    double U;            /* > 0: the incumbent, the step of a plan that fits built on every layer (the
                            groups without a pipeline, priced first where the dp replicas fold):
                            a ladder stops at a rung slower than it once no rung above can be
                            faster (climb); 0: none */
} search_ctx;

/* The layers in all of the smaller folded build for a candidate of `parts`
 * pipeline parts, or 0: built on every layer.  k layers per part (1, 2 or
 * 4, the smallest that works): every block's repeat must scale exactly to
 * k and 2k layers per part, each to at least 2 (the ladder's partial rungs
 * recompute the first quarters of a block's repeats: with 2, half means
 * the same; a quarter and three quarters are then estimates the full
 * builds correct), and the two builds must hold at most half the layers
 * the spec's one would. */
static int fold_layers(const search_ctx *x, int parts)
{
    if (!x->lfold || parts < 1) return 0;
    for (int k = 1; k <= 4; k *= 2) {
        int n1 = k * parts, ok = 2 * (n1 + 2 * n1) <= x->nl;
        for (int b = 0; b < x->g->nblk && ok; b++) {
            int64_t r = x->g->blk[b].repeat;
            ok = (r * n1) % x->nl == 0 && r * n1 / x->nl >= 2;
        }
        if (ok) return n1;
    }
    return 0;
}

/* Price c: on every layer (full), or where fold_layers allows, estimated
 * from the two folded builds (c->est); bc (or NULL): the builds of the
 * climb so far, reused where only ZeRO differs (price).  With -v a line on stderr: the
 * candidate, its price, the time taken. */
static void assess(const search_ctx *x, cand *c, int full, bcache *bc)
{
    double tc = now_s();
    const pass_src *o = x->o;
    int parts = c->pp * (c->sched == IR_SCHED_INTERLEAVED ? 2 : 1);
    int n1 = full ? 0 : fold_layers(x, parts);
    c->est = c->died = 0;
    if (n1) {
        cand a = *c, b = *c;
        a.stage = b.stage = NULL;   /* (balanced cuts are for the spec's layers: the even cut) */
        price(o, x->g, &a, x->fold, n1, x->fail, bc);
        if (a.ok) price(o, x->g, &b, x->fold, 2 * n1, x->fail, bc);
        if (a.ok && b.ok) {   /* affine in the layers per part: n1 / parts at a, twice that at b */
            double f = ((double)x->nl - n1) / n1;
            c->step = a.step + (b.step - a.step) * f;
            /* (built on the even cut: a balanced one's gain on the layers' costs, which the builds on
               every layer then correct) */
            if (c->stage && c->sratio > 0) c->step *= c->sratio;
            c->mem = (int64_t)((double)a.mem + (double)(b.mem - a.mem) * f);
            c->spgain = a.spgain + (b.spgain - a.spgain) * f;
            if (c->spgain < b.spgain) c->spgain = b.spgain;
            c->zgain = a.zgain + (b.zgain - a.zgain) * f;
            if (c->zgain < b.zgain) c->zgain = b.zgain;
            c->ok = c->est = 1;
        } else if (a.died || b.died) {   /* (an internal error: the same passes on every layer would cost
                                              the most of any build to meet it again; skipped, reported) */
            const cand *f = a.died ? &a : &b;
            c->ok = c->est = 0, c->died = 1;
            snprintf(c->why, sizeof c->why, "%.560s (layers folded to %d)", f->why, a.died ? n1 : 2 * n1);
            n1 = -1;
        } else n1 = 0;   /* (a folded build that fails: on every layer) */
    }
    if (!n1) price(o, x->g, c, x->fold, 0, x->fail, bc);
    if (!o->verbose) return;
    char ct[240];
    cand_text(x->g, c, ct, sizeof ct);
    if (c->ok) fprintf(stderr, "search: %s: step %s%.3f ms, memory %.4g MiB, priced in %.3f s%s\n", ct,
                       c->est ? "~" : "", c->step * 1e3, (double)c->mem / 1048576.0, now_s() - tc,
                       c->est ? " (layers folded)" : "");
    else if (c->died) fprintf(stderr, "search: %s: %s, in %.3f s\n", ct, c->why, now_s() - tc);
    else fprintf(stderr, "search: %s: not buildable in %.3f s: %s\n", ct, now_s() - tc, c->why);
}

int pass_search_estimate(ir_graph *g, double *step)
{
    ir_dist d;
    int rc = plan_all(g, &d, 0);
    if (!rc) {
        pass_estimate e;
        pass_cost_step(&d, &e);
        *step = e.step;
    }
    ir_dist_free(&d);
    return rc ? 2 : 0;
}



/* Fitting on profile pf first (fastest first), then by memory. */
static int cmp_fit(const void *a, const void *b, void *pf)
{
    const cand *x = a, *y = b;
    double mem = ((const ir_profile *)pf)->mem;
    int fx = x->ok && (double)x->mem <= mem, fy = y->ok && (double)y->mem <= mem;
    if (fx != fy) return fy - fx;
    if (fx && x->step != y->step) return x->step < y->step ? -1 : 1;
    if (x->ok != y->ok) return y->ok - x->ok;
    return (x->mem > y->mem) - (x->mem < y->mem);
}

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->ok != y->ok) return y->ok - x->ok;
    if (!x->ok) return 0;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return (x->mem > y->mem) - (x->mem < y->mem);
}

/* plan_all under a recovery point, as build_guarded: 0 (*rc plan_all's), or
 * 1 where a pass died (the message in r->msg). */
static int plan_guarded(ir_recover *r, ir_graph *g, ir_dist *d, int *rc)
{
    ir_recover_push(r);
    if (setjmp(r->jb) == 0) {
        *rc = plan_all(g, d, 0);
        ir_recover_pop(r);
        return 0;
    }
    return 1;
}

/* ---- balanced stages (passes/balance.c)
 *
 * The cost model's time of each layer of the blocks (in block order) on one
 * device, forward and backward (and its recomputed forward), and of the ops
 * outside the blocks before the layers (pre: the embedding) and after them
 * (post: the head and the loss); from the 1-device build.  0, or 1 (no
 * blocks, recycling, or it does not build). */
static int layer_costs(const pass_src *o, int *nl_out, double **cost_out, double *pre, double *post)
{
    ir_graph g;
    if (o->load(o->ctx, 1, 0, &g)) return 1;
    int rc = 1, nl = 0, *lb = ir_xcalloc((size_t)g.nblk + 1, sizeof(int));
    for (int b = 0; b < g.nblk; b++) lb[b] = nl, nl += g.blk[b].repeat;
    if (nl == 0 || g.train.recycle > 1) {
        free(lb);
        ir_graph_free(&g);
        return 1;
    }
    ir_planreq *r = &g.req;
    r->policy = ir_str(&g, "hybrid");
    r->dp = r->tp = r->pp = 1;
    r->zero = 0;
    r->stage = NULL, r->L.nstage = 0;
    g.req.devices = 1;
    g.train.micro_batches = 1;
    ir_dist d;
    memset(&d, 0, sizeof d);
    pass_quiet = 1;
    ir_recover rv;
    int brc = 2;
    if (plan_guarded(&rv, &g, &d, &brc) && o->verbose)   /* (a pass died: no balanced cuts, as where it fails) */
        fprintf(stderr, "search: the layers' costs: not buildable: internal error at %s\n", rv.msg);
    pass_quiet = 0;
    if (!brc) {
        /* forward ops after a layer (what the head reads descends from the blocks) */
        int *order = ir_xmalloc(sizeof(int) * ((size_t)g.nop + 1)), cyc;
        char *after = ir_xcalloc((size_t)g.nop + 1, 1);
        IR_ASSERT(!ir_topo(&g, order, &cyc));
        for (int n = 0; n < g.nop; n++) {
            const ir_op *op = &g.op[order[n]];
            if (op->phase != IR_PH_FWD || op->block >= 0) continue;
            for (int k = 0; k < op->nin; k++) {
                int p = g.t[op->in[k]].producer;
                if (p >= 0 && g.op[p].phase == IR_PH_FWD && (g.op[p].block >= 0 || after[p])) after[order[n]] = 1;
            }
        }
        double *cost = ir_xcalloc((size_t)nl, sizeof(double));
        *pre = *post = 0;
        for (int n = 0; n < d.nseq; n++) {
            const ir_item *it = &d.seq[n];
            if (it->comm) continue;
            const ir_subop *so = &d.sop[it->id];
            int op = so->op, fo = g.op[op].phase == IR_PH_FWD ? op : g.op[op].fwd;
            if (fo < 0 || g.op[op].phase == IR_PH_OPT) continue;
            double t = pass_cost_subop(&d, so, it->sec);
            const ir_op *f = &g.op[fo];
            if (f->block >= 0) cost[lb[f->block] + f->rep] += t;
            else if (after[fo]) *post += t;
            else *pre += t;
        }
        free(order);
        free(after);
        *nl_out = nl;
        *cost_out = cost;
        rc = 0;
    }
    ir_dist_free(&d);
    free(lb);
    ir_graph_free(&g);
    return rc;
}

/* cut (parts + 1 first layers) as a [plan] stage value: "h.0-4 0, h.5-11 1". */
static char *cuts_text(const ir_graph *g, const int *cut, int parts)
{
    ir_buf b = {0};
    int first = 1;
    for (int k = 0; k < parts; k++) {
        int l0 = 0;
        for (int bl = 0; bl < g->nblk; bl++) {
            int lo = cut[k] > l0 ? cut[k] : l0, hi = cut[k + 1] < l0 + g->blk[bl].repeat ? cut[k + 1] : l0 + g->blk[bl].repeat;
            if (lo < hi) {
                if (hi - 1 > lo) ir_bprintf(&b, "%s%s.%d-%d %d", first ? "" : ", ", g->blk[bl].name, lo - l0, hi - 1 - l0, k);
                else ir_bprintf(&b, "%s%s.%d %d", first ? "" : ", ", g->blk[bl].name, lo - l0, k);
                first = 0;
            }
            l0 += g->blk[bl].repeat;
        }
    }
    return b.s;   /* (malloc'd by ir_buf) */
}

/* One balanced cut per virtual-stage count. */
typedef struct balanced {
    int pp, parts;
    stagecut *stage;         /* NULL: the even cut is as good (within 3 %) */
    double best_ms, even_ms; /* the slowest stage, layers' costs alone */
    double secs;             /* the time the cut took */
} balanced;

/* The cuts to make, taken by threads (cut_worker). */
typedef struct cutjobs {
    const ir_graph *g;
    int nl;
    const double *lc;
    double pre, post;
    balanced *bal;
    int n, next;   /* (next: atomic) */
} cutjobs;

static void *cut_worker(void *arg)
{
    cutjobs *j = arg;
    for (;;) {
        int k = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (k >= j->n) break;
        balanced *z = &j->bal[k];
        int *cut = ir_xmalloc(sizeof(int) * ((size_t)z->parts + 1));
        double tb = now_s();
        if (!pass_balance_cuts(j->nl, j->lc, j->pre, j->post, z->pp, z->parts, 1.0, SEARCH_Z3_WORK, cut, &z->best_ms,
                               &z->even_ms) &&
            z->best_ms < 0.97 * z->even_ms)
        {
            z->stage = ir_xcalloc(1, sizeof *z->stage);
            z->stage->parts = z->parts, z->stage->cut = cut, cut = NULL;
            z->stage->text = cuts_text(j->g, z->stage->cut, z->parts);
        }
        z->secs = now_s() - tb;
        free(cut);
    }
    return NULL;
}

static void free_bal(balanced *bal, int nbal)
{
    for (int k = 0; k < nbal; k++)
        if (bal[k].stage) free(bal[k].stage->cut), free(bal[k].stage->text), free(bal[k].stage);
    free(bal);
}

/* One chain: a dp x tp x pp and schedule, its micro-batch counts in
 * increasing order.  Its candidates are priced one after another, and the
 * chain stops once a count's step is no faster than the one before (both
 * fitting): more micro-batches shrink the bubble and grow the per-micro-
 * batch overhead, and the search takes the step as unimodal in them. */
struct chain {
    int dp, tp, pp, sched;
    const stagecut *stage;   /* balanced stages, or NULL */
    double sratio;       /* with stage: its slowest stage over the even cut's, on the layers' costs */
    int nm, ms[16];
    int nout, skipped;   /* priced, and left unpriced by the stop */
    int tpnext;          /* the chain of the same pp and schedule at the next larger tp, or -1 */
    int head;            /* 1: the first (smallest tp) of its pp and schedule */
    int tpskip;          /* 1: left unpriced by the tp stop (tp_group) */
    int n1;              /* the layer fold's smaller build (fold_layers), 0: built on every layer */
    double work;         /* the build work it is expected to take (search order) */
    int bal;             /* its balanced cut (pass_search's bal), or -1 */
    cand out[8];
};

static int fits(const cand *c, const ir_profile *pf) { return c->ok && (double)c->mem <= pf->mem; }

/* The memory ladder: nothing, ZeRO 1, ZeRO 3, then with sequence
   parallelism (ladder_sp: with tp), then also with the first quarter, half,
   three quarters of each block's layers recomputed, then all of them
   (ladder_rc: quarters). */
static const int ladder_z[] = {0, 1, 3, 3, 3, 3, 3, 3, 3}, ladder_rc[] = {0, 0, 0, 0, 1, 2, 3, 4, 4},
                 ladder_sp[] = {0, 0, 0, 1, 1, 1, 1, 1, 1};
#define LADDER 9   /* (the last rung: all recomputed, and the MLP chains co-sharded) */

/* The ZeRO level of rung k for t: a pipeline of more than 64 micro-batches
   (micro-batches of a few samples: Megatron's counts) keeps ZeRO 1 where the
   ladder says 3 -- ZeRO 3 gathers every param twice in every micro-batch,
   hundreds of times a step, where recompute costs a third more work once:
   GPT-3's dp 9 x tp 8 x pp 35 at 70 micro-batches took 96 s a step with
   ZeRO 3, Megatron's plan of it, ZeRO 1 with everything recomputed, 53 s. */
static int rung_zero(const cand *t, int k)
{
    return ladder_z[k] == 3 && t->pp > 1 && t->m > 64 ? 1 : ladder_z[k];
}

/* Rung k of the memory ladder for t, in *u: 0 where it does not apply. */
static int rung_cand(const search_ctx *x, const cand *t, int k, cand *u)
{
    if (k && t->dp == 1 && ladder_z[k] && !ladder_rc[k] && !ladder_sp[k]) return 0;   /* (ZeRO needs dp) */
    if (k == 2 && rung_zero(t, k) == 1) return 0;   /* (rung 1 again) */
    /* sequence parallelism: with tp, where the spec does not say */
    if (ladder_sp[k] && !ladder_rc[k] && (t->tp == 1 || x->fsp)) return 0;
    if (x->fz >= 0 && k && !ladder_rc[k] && !ladder_sp[k]) return 0;   /* (the spec's ZeRO level on every rung) */
    if (x->frc < 0 && ladder_rc[k]) return 0;
    if (ladder_rc[k] && x->g->nblk == 0) return 0;
    if (ladder_rc[k] && ladder_rc[k] < 4 && !x->rcq[ladder_rc[k]]) return 0;   /* (what the rung before, or all,
                                                                                  recomputes) */
    if (k == LADDER - 1 && !x->cos) return 0;      /* (no MLP chain, or the spec's coshard) */
    *u = *t;
    u->zero = t->dp == 1 ? 0 : x->fz >= 0 ? x->fz : rung_zero(t, k);   /* (ZeRO shards on dp: none on dp 1) */
    u->rc = x->frc < 0 ? 0 : ladder_rc[k] * (RC_ALL / 4);
    u->sp = t->sp || (t->tp > 1 && !x->fsp && ladder_sp[k]);   /* (t.sp: the refinement's, kept) */
    u->rung = k, u->ok = u->est = 0, u->why[0] = '\0', u->dom = u->domlb = 0;
    u->cos = k == LADDER - 1;
    return 1;
}

/* t on the ladder from rung k0: the first rung that fits, or none fitting,
 * the last priced (the smallest).  With an incumbent (x->U) the ladder
 * stops at a rung that does not fit once no rung above can be faster than
 * the incumbent (dom).  With spfirst (and an incumbent, where the dp
 * replicas fold, whose ZeRO is by formula) it prices the sequence-parallel rung
 * first: where that does not fit, no rung below it does (sequence
 * parallelism and ZeRO 3 only take memory off: measured on the 113 pairs
 * of GPT-3's search, none the other way), so those are not built; where it
 * fits, the rungs below it are priced as without. */
static cand climb(const search_ctx *x, cand t, int k0, int full, int spfirst)
{
    const ir_profile *pf = &x->g->prof;
    cand best = t;   /* (no rung applies: not buildable, and why) */
    best.ok = 0;
    snprintf(best.why, sizeof best.why, "no rung of the memory ladder applies from rung %d", k0);
    bcache bc = {0};   /* (the rungs that differ in ZeRO alone share a build where the dp replicas fold) */
    const int ksp = 3;   /* (the sequence-parallel rung: ZeRO 3 and sequence parallelism) */
    int kend = LADDER, have = 0;
    cand u, v;
    if (spfirst && x->U > 0 && x->fold && k0 < ksp && rung_cand(x, &t, ksp, &v)) {
        assess(x, &v, full, &bc);
        if (v.ok && !fits(&v, pf)) {   /* the rungs below do not fit either: on from the one above */
            best = v;
            if (v.step > x->U) {   /* (the rungs above only add work: recompute, coshard) */
                best.dom = x->U, best.domlb = v.step;
                bcache_free(&bc);
                return best;
            }
            k0 = ksp + 1;
        } else if (v.ok) kend = ksp, have = 1;   /* (it fits: the first rung below it that fits, else it) */
    }
    for (int k = k0; k < kend; k++) {
        if (!rung_cand(x, &t, k, &u)) continue;
        assess(x, &u, full, &bc);
        if (u.ok || !best.ok) best = u;   /* (the last priced, or the smallest) */
        if (fits(&u, pf) || !u.ok) {
            have = 0;
            break;
        }
        /* dominated: the rungs above add ZeRO (which takes at most u.zgain off the step), sequence
           parallelism (at most u.spgain) and then only work (more layers recomputed, the MLP chains
           in pieces), so none is faster than this one's step less what they could take off; slower
           than the incumbent even so, none can be chosen */
        int zset = rung_zero(&t, k) == rung_zero(&t, LADDER - 1) || x->fz >= 0 || t.dp == 1, spset = ladder_sp[k] || t.tp == 1 || x->fsp || t.sp;
        double lb = u.step - (spset ? 0 : u.spgain) - (zset ? 0 : u.zgain);
        if (!have && x->U > 0 && lb > x->U && k + 1 < LADDER) {
            best.dom = x->U, best.domlb = lb;
            break;
        }
    }
    if (have) best = v;   /* (no rung below the sequence-parallel one fits) */
    bcache_free(&bc);
    return best;
}

/* Recompute finer than the ladder's quarters: the fastest candidate that
 * fits, built on every layer, recomputing part of its blocks' layers (a
 * quarter, half, three quarters or all, the rung below it not fitting)
 * again with fewer of them, in sixteenths of each block: the fewest that
 * fit, by bisection (memory falls as more layers are recomputed), each
 * built on every layer.  Then, with several blocks, per block: each block
 * in turn at the level below that (one that does not fit for all), the
 * others where they are; the fastest of those that fit.  Fitting ones are
 * added to the candidates, to win or lose on their step.  Returns the
 * builds made. */
static int finer_recompute(const search_ctx *x, cand **cs, int *nc, int *cap)
{
    const ir_profile *pf = &x->g->prof;
    int bi = -1;
    for (int i = 0; i < *nc; i++)
        if (!(*cs)[i].est && fits(&(*cs)[i], pf) && (bi < 0 || (*cs)[i].step < (*cs)[bi].step)) bi = i;
    if (bi < 0 || !(*cs)[bi].rc || (*cs)[bi].cos || x->frc < 0) return 0;
    cand top = (*cs)[bi], found = top;
    int lo = top.rc - RC_ALL / 4, hi = top.rc, builds = 0;   /* lo: does not fit; hi: fits */
    int nlo = all_blocks(x->g, NULL, lo, 0, 0), nhi = all_blocks(x->g, NULL, hi, 0, 0);
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2, nmid = all_blocks(x->g, NULL, mid, 0, 0);
        if (nmid == nhi) {   /* the same layers as hi: fits */
            hi = mid;
            continue;
        }
        if (nmid <= nlo) {   /* no more layers than lo: does not */
            lo = mid;
            continue;
        }
        cand u = top;
        u.rc = mid, u.ok = u.est = 0, u.why[0] = '\0';
        assess(x, &u, 1, NULL);
        builds++;
        if (fits(&u, pf)) hi = mid, nhi = nmid, found = u;
        else lo = mid, nlo = nmid;
    }
    if (found.rc != top.rc) *IR_PUSH(*cs, *nc, *cap) = found;
    /* per block, with several: one block's layers at the level below (lo), the others' at hi */
    cand best = found;
    best.ok = 0;
    for (int b = 0; x->g->nblk > 1 && b < x->g->nblk; b++) {
        if (blk_layers(x->g, b, lo) == blk_layers(x->g, b, hi)) continue;
        cand u = found;
        u.rcdrop = b + 1, u.rc2 = lo, u.ok = u.est = 0, u.why[0] = '\0';
        assess(x, &u, 1, NULL);
        builds++;
        if (fits(&u, pf) && (!best.ok || u.step < best.step)) best = u;
    }
    if (best.ok) *IR_PUSH(*cs, *nc, *cap) = best;
    return builds;
}

/* Price chain c: per micro-batch count, the memory ladder's first rung that fits (each from
 * the sequence-parallel rung where *short_mem: the candidate priced before it in its group
 * needed that rung or more, or fits on none; set for the next).  Without a
 * pipeline a count that fits on the ladder's first rung ends the chain: more micro-batches
 * (gradient accumulation) do the same work in more pieces and save only memory, which that
 * count does not need. */
static void price_chain(const search_ctx *x, chain *c, int *short_mem)
{
    const ir_profile *pf = &x->g->prof;
    for (int i = 0; i < c->nm; i++) {
        cand t = {c->dp, c->tp, c->pp, c->ms[i], c->sched, 0, 0, c->stage, 0, 0, 0, 0, 0, 0, 0, 0, "", 0, 0, 0, NULL,
                  c->sratio, 0, 0, 0, 0, 0, 0, 0};
        cand best = climb(x, t, 0, 0, *short_mem);
        c->out[c->nout++] = best;
        *short_mem = !fits(&best, pf) || best.rung >= 3;   /* (the next starts at sequence parallelism) */
        if ((i > 0 && fits(&best, pf) && fits(&c->out[i - 1], pf) && best.step >= c->out[i - 1].step) ||
            (c->pp == 1 && fits(&best, pf) && best.rung == 0)) {
            c->skipped = c->nm - i - 1;
            break;
        }
    }
}

/* The fastest fitting candidate of a priced chain, or NULL. */
static const cand *chain_best(const chain *c, const ir_profile *pf)
{
    const cand *b = NULL;
    for (int k = 0; k < c->nout; k++)
        if (fits(&c->out[k], pf) && (!b || c->out[k].step < b->step)) b = &c->out[k];
    return b;
}

/* Price the chains of one pp and schedule, head first, in increasing tp.
 * Where the dp replicas fold, a pipeline too deep for the layer fold
 * (built on every layer at every micro-batch count: the search's costliest
 * candidates, its time growing with the layers squared) stops at a larger
 * tp (the tp stop) once a tp's fastest is no faster than the tp before's,
 * both fitting and that tp's on the ladder's first rung: more tp splits
 * each layer's work finer and adds collectives of its activations to each
 * pass, and the search takes the step as unimodal in tp there, where the
 * memory ladder no longer climbs (a larger tp fits on the same rung).  A
 * dp of 1 is still priced: its gradients need no dp all-reduce at all.
 * (Small graphs on few devices are not unimodal so: examples/mlp.ini on
 * 32 devices is fastest at tp 32 after a slower tp 2, so the stop is kept
 * to where its builds cost.) */
static void tp_group(const search_ctx *x, int head)
{
    const ir_profile *pf = &x->g->prof;
    const cand *prev = NULL;
    int stop = 0, short_mem = x->spfirst;
    for (int i = head; i >= 0; i = x->ch[i].tpnext) {
        chain *c = &x->ch[i];
        if (stop && x->fold && c->pp > 1 && !c->n1 && c->dp > 1) {
            c->tpskip = 1;
            continue;
        }
        price_chain(x, c, &short_mem);
        const cand *b = chain_best(c, pf);
        if (prev && b && b->rung == 0 && b->step >= prev->step) stop = 1;
        prev = b;
    }
}

static void *search_worker(void *arg)
{
    search_ctx *x = arg;
    pass_quiet = 1;
    for (;;) {
        int i = __atomic_fetch_add(&x->next, 1, __ATOMIC_RELAXED);
        if (i >= x->ngrp) break;
        tp_group(x, x->grp[i]);
    }
    pass_quiet = 0;
    return NULL;
}

/* Candidates to price in threads: each from rung k0 of the ladder, on every
 * layer (full), or once as it is (climb 0, estimated where it folds). */
typedef struct jobs {
    const search_ctx *x;
    cand *c;
    int n, full, climb;
    int next;   /* (atomic) */
} jobs;

static void *jobs_worker(void *arg)
{
    jobs *j = arg;
    pass_quiet = 1;
    for (;;) {
        int i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (i >= j->n) break;
        cand *c = &j->c[i];
        if (j->climb) *c = climb(j->x, *c, c->rung, j->full, j->x->spfirst);
        else {
            c->ok = c->est = 0, c->why[0] = '\0';
            assess(j->x, c, j->full, NULL);
        }
    }
    pass_quiet = 0;
    return NULL;
}

/* Run worker over arg in nth threads (this one among them). */
static void in_threads(void *(*worker)(void *), void *arg, int nth)
{
    pthread_t th[16];
    int started = 0;
    if (nth > 16) nth = 16;
    for (int i = 1; i < nth; i++, started++)
        if (pthread_create(&th[i], NULL, worker, arg)) break;
    worker(arg);
    for (int i = 1; i <= started; i++) pthread_join(th[i], NULL);
}

/* Threads for the search: the CPUs this process may use, at most 16. */
static int search_threads(void)
{
    cpu_set_t cs;
    int n = sched_getaffinity(0, sizeof cs, &cs) == 0 ? CPU_COUNT(&cs) : 1;
    return n < 1 ? 1 : n > 16 ? 16 : n;
}

/* Price the 3 fastest fitting candidates of cs with tp > 1 (and no
 * sequence parallelism, for what 0; no co-shard, for what 2) again with
 * sequence parallelism (what 0), the ops outside the blocks whole on tp
 * (what 1) or the blocks' MLP chains on their tokens over tp (what 2), or
 * the 3 fastest with balanced stages with the even cut (what 4: the cut is
 * balanced on the layers' costs of the 1-device build, which tp and
 * sequence parallelism change), at the same rung, and add them to cs. */
/* The fastest fitting candidate of cs, not among taken[0 .. nt), that
 * refinement what may change: with tp > 1 (0: without sequence
 * parallelism, 1: the ops outside the blocks split by the policy, 2: the
 * MLP chains too and not co-sharded, 3: no op-trans searched and not
 * co-sharded), or (4) with balanced stages; or -1. */
static int fastest_tp(const cand *cs, int nc, const ir_profile *pf, const int *taken, int nt, int what)
{
    int bi = -1;
    for (int i = 0; i < nc; i++) {
        const cand *c = &cs[i];
        int was = 0;
        for (int k = 0; k < nt; k++) was |= taken[k] == i;
        int ok = what == 0 ? !c->sp : what == 1 ? !c->rep : what == 2 ? !c->tok && !c->cos : what == 3 ? !c->ot && !c->cos
                                                                                                      : c->stage != NULL;
        if (!was && ok && fits(c, pf) && (c->tp > 1 || what == 4) && (bi < 0 || c->step < cs[bi].step)) bi = i;
    }
    return bi;
}

static void refine(const search_ctx *x, cand **cs, int *nc, int *cap, int nth, int what)
{
    const ir_profile *pf = &x->g->prof;
    cand top[3];   /* (the chains' candidates are distinct: one per chain and count) */
    int nt = 0, taken[3];
    for (int pick = 0; pick < 3; pick++) {
        int bi = fastest_tp(*cs, *nc, pf, taken, nt, what);
        if (bi < 0) break;
        taken[nt] = bi;
        top[nt] = (*cs)[bi];
        if (what == 4) top[nt++].stage = NULL;
        else if (what == 2) top[nt++].tok = 1;
        else if (what) top[nt++].rep = 1;
        else top[nt++].sp = 1;
    }
    jobs j = {x, top, nt, 0, 0, 0};
    in_threads(jobs_worker, &j, nth < nt ? nth : nt);
    for (int k = 0; k < nt; k++) *IR_PUSH(*cs, *nc, *cap) = top[k];
}

/* The incumbent after the groups without a pipeline (pass_search): the fastest
 * of their candidates that fits, built on every layer -- estimates (the
 * layer fold) are built so, fastest first, until the fastest that fits is
 * one so built (at most 8 builds, counted in *builds; in place: resolve
 * then finds them built).  Its step (*rung its rung of the memory ladder),
 * or 0: none fits. */
static double incumbent(const search_ctx *x, chain *chs, int nchs, int *builds, int *rung)
{
    const ir_profile *pf = &x->g->prof;
    for (int round = 0; round < 8; round++) {
        cand *b = NULL;
        for (int i = 0; i < nchs; i++)
            for (int k = 0; chs[i].pp == 1 && k < chs[i].nout; k++) {
                cand *c = &chs[i].out[k];
                if (fits(c, pf) && (!b || c->step < b->step)) b = c;
            }
        if (!b) return 0;
        if (!b->est) {
            *rung = b->rung;
            return b->step;
        }
        *b = climb(x, *b, b->rung, 1, 0);
        (*builds)++;
    }
    return 0;
}

/* The layer fold's estimates among cs: the fastest fitting ones (or none
 * fitting, the smallest) built on every layer, 4 at first, then the
 * estimates that still come first, until the first is built on every layer
 * (it climbs the ladder where it does not fit).  cs ends sorted (cmp_fit);
 * returns the builds made. */
static int resolve(const search_ctx *x, cand *cs, int nc, int nth)
{
    const ir_profile *pf = &x->g->prof;
    int nest = 0, nfull = 0;
    for (int i = 0; i < nc; i++) nest += cs[i].est;
    for (int round = 0; nest; round++) {
        qsort_r(cs, (size_t)nc, sizeof *cs, cmp_fit, (void *)pf);
        if (round && !cs[0].est) break;
        cand top[16];
        int nt = 0, at[16], lim = round ? (nth < 16 ? nth : 16) : 4;
        for (int i = 0; i < nc && nt < lim; i++) {
            if (!cs[i].est) {
                if (round) break;
                continue;
            }
            at[nt] = i;
            top[nt++] = cs[i];
        }
        if (!nt) break;
        jobs j = {x, top, nt, 1, 1, 0};
        in_threads(jobs_worker, &j, nth < nt ? nth : nt);
        for (int k = 0; k < nt; k++) cs[at[k]] = top[k], nest--, nfull++;
    }
    return nfull;
}


/* The same op-trans choices? */
static int ot_eq(const pass_otlist *a, const pass_otlist *b)
{
    if (a == b) return 1;
    if (!a || !b || a->n != b->n) return 0;
    for (int k = 0; k < a->n; k++)
        if (strcmp(a->v[k].pat, b->v[k].pat) || strcmp(a->v[k].batch, b->v[k].batch) ||
            strcmp(a->v[k].split, b->v[k].split))
            return 0;
    return 1;
}

/* Do a and b build the same plan (each stage's tp alike, whatever their dp x tp says)? */
static int same_plan(const cand *a, const cand *b)
{
    if (a->pp != b->pp || a->m != b->m || a->sched != b->sched || a->zero != b->zero || a->rc != b->rc ||
        a->rcdrop != b->rcdrop || a->rc2 != b->rc2 || a->sp != b->sp || a->rep != b->rep || a->tok != b->tok ||
        a->cos != b->cos || a->stage != b->stage || !ot_eq(a->ot, b->ot))
        return 0;
    for (int s = 0; s < a->pp; s++)
        if (tp_at(a, s) != tp_at(b, s)) return 0;
    return 1;
}

/* Stages with their own tp (DP over stage boundaries: [plan] stage_tp):
 * the 3 fastest fitting pipelines (not interlaced, not folded, the
 * policy's op-trans) again with the first or the last stage at half or
 * twice the others' tp (its dp the rest of its devices: the embedding's
 * stage, the head's), where that divides the stage, fits a node and
 * divides the batch; at the same rung.  Returns the candidates added. */
static int stage_refine(const search_ctx *x, cand **cs, int *nc, int *cap, int nth, int64_t B)
{
    const ir_profile *pf = &x->g->prof;
    int N = x->g->req.devices;
    cand top[12];
    int nt = 0, taken[3], ntk = 0;
    for (int pick = 0; pick < 3; pick++) {
        int bi = -1;
        for (int i = 0; i < *nc; i++) {
            const cand *c = &(*cs)[i];
            int was = 0;
            for (int k = 0; k < ntk; k++) was |= taken[k] == i;
            if (!was && fits(c, pf) && c->pp > 1 && c->sched != IR_SCHED_INTERLACED && !c->rep && !c->tok && !c->ot &&
                !c->cos && !c->st0 && !c->stl && (bi < 0 || c->step < (*cs)[bi].step))
                bi = i;
        }
        if (bi < 0) break;
        taken[ntk++] = bi;
        const cand *c = &(*cs)[bi];
        int sd = N / c->pp;
        for (int end = 0; end < 2; end++)
            for (int f = 0; f < 2; f++) {
                int t = f ? c->tp * 2 : c->tp / 2;
                if (t < 1 || (!f && c->tp % 2) || sd % t || t > pf->per_node || (B && B % ((int64_t)(sd / t) * c->m)))
                    continue;
                cand u = *c;
                if (end) u.stl = t;
                else u.st0 = t;
                u.ok = u.est = 0, u.why[0] = '\0';
                int dup = 0;   /* (another candidate's stages: dp 2 x tp 2 with stage tp 2 1 is dp 4 x tp 1's 2 1) */
                for (int i = 0; i < *nc && !dup; i++) dup = same_plan(&(*cs)[i], &u);
                for (int k = 0; k < nt && !dup; k++) dup = same_plan(&top[k], &u);
                if (!dup) top[nt++] = u;
            }
    }
    jobs j = {x, top, nt, 0, 0, 0};
    if (nt) in_threads(jobs_worker, &j, nth < nt ? nth : nt);
    for (int k = 0; k < nt; k++) *IR_PUSH(*cs, *nc, *cap) = top[k];
    return nt;
}

/* Do a and b build the same plan but for their op-trans (tok, ot)? */
static int same_but_ot(const cand *a, const cand *b)
{
    return a->dp == b->dp && a->tp == b->tp && a->pp == b->pp && a->m == b->m && a->sched == b->sched &&
           a->zero == b->zero && a->rc == b->rc && a->rcdrop == b->rcdrop && a->rc2 == b->rc2 && a->sp == b->sp &&
           a->rep == b->rep && a->cos == b->cos && a->stage == b->stage;
}

/* ot_refine's build of candidate t (loaded in g, into d) to its op-trans,
 * and each block's op-trans searched: every block's choices appended to ob,
 * the blocks with a change counted in *changed, *nblk the blocks searched. */
static void ot_build(const search_ctx *x, const cand *tp_, ir_graph *g, ir_dist *d, int N, int pn, pass_otlist *ob,
                     int *changed, int *nblk)
{
    const ir_profile *pf = &x->g->prof;
    const cand t = *tp_;
    pass_quiet = 1;
    int rc = pass_autograd(g) || pass_recompute(g);
    if (!rc) pass_zero3_regather(g);
    ir_dist_init(d, g, g->req.devices);
    if (!rc) rc = pass_plan(d);
    pass_quiet = 0;
    if (rc && x->o->verbose) fprintf(stderr, "search: op-trans per block: the plan does not build: %s\n", pass_last_error);
    int wsd = t.dp * t.tp;
    pass_otreq q = {t.dp, t.tp, t.m, t.zero, x->fold == 1 ? 1 : t.dp, wsd > pn || (N > pn && pn % wsd),
                    t.pp > 1 ? (t.m < t.pp ? t.m : t.pp) : 1,
                    ((double)pf->mem - (double)t.mem) / ((double)x->nl / t.pp), SEARCH_OT_WORK};
    if (t.rc == RC_ALL && !t.rcdrop) q.stash = 0;   /* (every layer recomputed: no activations kept) */
    if (q.mem_room < 0) q.mem_room = 0;
    for (int b = 0; b < g->nblk && !rc; b++) {
        pass_otres res;
        int was = ob->n;
        if (!pass_optrans(d, b, &q, ob, &res)) (*changed)++;
        (*nblk)++;
        if (x->o->verbose && res.nop) {
            char ct[240];
            cand_text(x->g, &t, ct, sizeof ct);
            ir_buf ch = {0};   /* the block's choices: "h.fc *0 n, ..." (its batch identifier or -, what tp splits) */
            for (int k = was; k < ob->n; k++)
                ir_bprintf(&ch, "%s%s %s %s", k > was ? ", " : "", ob->v[k].pat, ob->v[k].batch[0] ? ob->v[k].batch : "-",
                           ob->v[k].split);
            fprintf(stderr, "search: op-trans of block %s for %s: %d ops, %.3g combinations; the model's step %.4g "
                    "ms a layer, %.4g ms with %d ops changed (%s)%s%s\n", g->blk[b].name, ct, res.nop,
                    res.space, res.model0 * 1e3, res.model * 1e3, res.changed, res.proved ? "the optimum" :
                    "the best in Z3's budget", ch.n ? ": " : "", ch.n ? ch.s : "");
            ir_buf_free(&ch);
        }
    }
}

/* ot_build under a recovery point, as build_guarded: 0, or 1 where a pass
 * died (the message in r->msg; a Z3 context the op-trans search had open is
 * lost with it). */
static int ot_guarded(ir_recover *r, const search_ctx *x, const cand *t, ir_graph *g, ir_dist *d, int N, int pn,
                      pass_otlist *ob, int *changed, int *nblk)
{
    ir_recover_push(r);
    if (setjmp(r->jb) == 0) {
        ot_build(x, t, g, d, N, pn, ob, changed, nblk);
        ir_recover_pop(r);
        return 0;
    }
    return 1;
}

/* Op-trans searched per block (passes/optrans.c): the 3 fastest fitting
 * candidates with tp > 1 (not co-sharded, not searched already), each
 * block's forward ops priced on optrans's model from the candidate's own
 * op-trans on, within SEARCH_OT_WORK of Z3's work a block; where the model
 * finds cheaper choices, a candidate with them joins, priced by the real
 * passes like any other.  The choices the candidates point to go in *ots.
 * Returns the candidates added; *nblk the blocks searched. */
static int ot_refine(const search_ctx *x, cand **cs, int *nc, int *cap, int nth, pass_otlist ***ots, int *nots,
                     int *otcap, int *nblk)
{
    const ir_profile *pf = &x->g->prof;
    cand top[3];
    int nt = 0, ntk = 0, taken[3];
    for (int pick = 0; pick < 3; pick++) {
        int bi = fastest_tp(*cs, *nc, pf, taken, ntk, 3);
        if (bi < 0) break;
        taken[ntk++] = bi;
        cand t = (*cs)[bi];
        double t0 = now_s();
        int parts = t.pp * (t.sched == IR_SCHED_INTERLEAVED ? 2 : 1), n1 = fold_layers(x, parts), N, pn;
        ir_graph g;
        cand u = t;
        if (n1) u.stage = NULL;   /* (balanced cuts are for the spec's layers) */
        if (setup(x->o, &u, x->fold, n1, &g, &N, &pn)) continue;
        ir_dist d;
        memset(&d, 0, sizeof d);
        pass_otlist ob = {0};
        int changed = 0;
        ir_recover r;
        if (ot_guarded(&r, x, &t, &g, &d, N, pn, &ob, &changed, nblk)) {   /* (a pass died: this pick skipped) */
            if (x->o->verbose) fprintf(stderr, "search: op-trans per block: not buildable: internal error at %s\n", r.msg);
            changed = 0;
        }
        pass_quiet = 0;
        ir_dist_free(&d);
        ir_graph_free(&g);
        /* (the same plan as one already among the candidates: 2 of the picks may reach it) */
        for (int i = 0; i < *nc && changed; i++) {
            const cand *c = &(*cs)[i];
            if (c->ot && ot_eq(c->ot, &ob) && same_but_ot(c, &t)) changed = 0;
        }
        for (int k = 0; k < nt && changed; k++)
            if (ot_eq(top[k].ot, &ob) && same_but_ot(&top[k], &t)) changed = 0;
        if (changed) {
            pass_otlist *sv = ir_xmalloc(sizeof *sv);
            *sv = ob;
            ob = (pass_otlist){0};
            *IR_PUSH(*ots, *nots, *otcap) = sv;
            t.ot = sv, t.tok = 0, t.ok = t.est = 0, t.why[0] = '\0';
            top[nt++] = t;
        }
        free(ob.v);
        if (x->o->verbose) fprintf(stderr, "search: op-trans searched per block in %.3f s\n", now_s() - t0);
    }
    jobs j = {x, top, nt, 0, 0, 0};
    if (nt) in_threads(jobs_worker, &j, nth < nt ? nth : nt);
    for (int k = 0; k < nt; k++) *IR_PUSH(*cs, *nc, *cap) = top[k];
    return nt;
}

static int search(const pass_src *o, ir_graph *g)
{
    const ir_planreq *r0 = &g->req;
    int N = r0->devices;
    const ir_profile *pf = &g->prof;
    /* more devices: the dp replicas folded (price); 1: one replica's batch built, 2 (recycling, whose
       zeros input keeps the whole batch): the whole batch built and divided by formula */
    const int fold = N <= SEARCH_MAX_DEVICES ? 0 : g->train.recycle > 1 ? 2 : 1;
    /* the batch the micro-batches and dp split */
    int64_t B = 0;
    for (int t = 0; t < g->nt && !B; t++)
        if (g->t[t].kind == IR_T_INPUT && g->t[t].batch_dim >= 0) B = g->t[t].shape[g->t[t].batch_dim];
    int nl = 0;
    for (int b = 0; b < g->nblk; b++) nl += g->blk[b].repeat;
    if (nl == 0) nl = 1;
    /* constraints the spec sets */
    int fpp = r0->pp_given ? r0->pp : 0, fdp = r0->dp, ftp = r0->tp, fz = r0->zero_given ? r0->zero : -1;
    int frc = r0->recompute ? -1 : 0;   /* -1: the spec's recompute stays */
    /* the spec's stage_tp: each stage's tp (it sets the stages' dp and tp: a candidate's dp x tp
       is stage 0's, its batch rule the largest dp's) */
    int sts[64], nsts = 0;
    for (int k = 0; k < r0->L.nstage_tp && nsts < 64; k++) sts[nsts++] = r0->L.stage_tp[k];
    int fsch = r0->schedule_given ? r0->schedule : -1;
    double t0 = now_s();
    /* balanced stages: the layers' costs once, a cut per virtual-stage count */
    double *lc = NULL, lpre = 0, lpost = 0;
    int nlc = 0;
    if (!r0->no_balance && !r0->stage && !r0->order && (fpp == 0 || fpp > 1) &&
        layer_costs(o, &nlc, &lc, &lpre, &lpost))
        lc = NULL;
    if (o->verbose && lc) fprintf(stderr, "search: the layers' costs (1-device build) in %.3f s\n", now_s() - t0);
    if (lc && nlc != nl) {
        free(lc);
        lc = NULL;
    }
    balanced *bal = NULL;
    int nbal = 0, balcap = 0;
    chain *chs = NULL;
    int nchs = 0, chcap = 0, space = 0;
    /* the combinations ruled out, by the first rule each breaks: the batch, the layers, the nodes,
       the pipeline's micro-batches, the micro-batches without one, interleaved's, the spec's */
    enum { WHY_BATCH, WHY_LAYERS, WHY_NODES, WHY_BUBBLE, WHY_ACCUM, WHY_INTER, WHY_SPEC, WHY_N };
    int why[WHY_N] = {0};
    for (int pp = 1; pp <= N; pp++) {
        if (N % pp) continue;
        for (int tp = 1; tp <= N / pp; tp++) {
            if ((N / pp) % tp) continue;
            int dp = N / pp / tp;
            for (int s = 0; s < 4; s++) {
                int sched = s == 0 ? IR_SCHED_1F1B : s == 1 ? IR_SCHED_ZBH1 : s == 2 ? IR_SCHED_INTERLEAVED
                                                                                     : IR_SCHED_INTERLACED;
                if (pp == 1 && s) continue;
                /* interlaced: the ops before and after the layers on every stage (a model with blocks);
                   up to 8 stages (more: the shared ops' collectives over every device cost more than
                   the stages they relieve, and building such a plan takes seconds: 35 s at pp 64) */
                if (sched == IR_SCHED_INTERLACED && (!g->nblk || r0->stage_tp || r0->stage || pp > 8)) continue;
                if (pp > 1 && fsch >= 0) {   /* the spec's schedule, alone */
                    if (s) continue;
                    sched = fsch;
                }
                chain c;
                memset(&c, 0, sizeof c);
                c.dp = dp, c.tp = tp, c.pp = pp, c.sched = sched;
                int bdp = dp, stok = 1;   /* (the spec's stage_tp: stage 0's tp, the largest stage dp) */
                for (int k = 0; nsts && k < nsts; k++) {
                    int sd = N / pp;
                    if (sts[k] < 1 || sd % sts[k]) stok = 0;
                    else if (sd / sts[k] > bdp) bdp = sd / sts[k];
                }
                if (nsts && (nsts != pp || tp != sts[0])) stok = 0;
                /* the counts: powers of two up to 64, then with a pipeline the counts of micro-batches
                   of 4, 2 and 1 samples per replica beyond them (Megatron's: 192 at pp 16, 280 at pp 35;
                   the 1F1B bubble falls as (pp - 1) / m while the stash stays pp deep) */
                int mcs[16], nmc = 0;
                for (int m = 1; m <= 64; m *= 2) mcs[nmc++] = m;
                /* (1f1b alone, and at most SEARCH_MAX_MB_STAGES stage micro-batches: the
                   pipeline pass's build grows with pp x m, zb-h1's and interleaved's the fastest: zb-h1 150 s at pp 64, m 768) */
                for (int k = 4; k >= 1 && pp > 1 && B && sched == IR_SCHED_1F1B; k /= 2) {
                    int64_t m = B / ((int64_t)bdp * k);
                    if (m > 64 && m * pp <= SEARCH_MAX_MB_STAGES && m * bdp * k == B && m > mcs[nmc - 1])
                        mcs[nmc++] = (int)m;
                }
                for (int mi = 0; mi < nmc; mi++) {
                    int m = mcs[mi];
                    space++;
                    /* what cannot be built, or what the spec rules out */
                    int w = !stok ? WHY_SPEC : B && (B % ((int64_t)bdp * m)) ? WHY_BATCH : pp > nl ? WHY_LAYERS
                          : tp > pf->per_node || (N > pf->per_node && pf->per_node % tp) ? WHY_NODES   /* (a tp group within a node) */
                          : pp > 1 && (m < pp || m > 16 * pp) ? WHY_BUBBLE   /* (fewer: mostly bubble; more: little gain) */
                          /* (without a pipeline micro-batches only save activations: gradient accumulation, up
                             to 16, a lever for memory beside the ladder's, unless the spec says accumulate = false) */
                          : pp == 1 && m > (r0->no_accum ? 1 : 16) ? WHY_ACCUM
                          : sched == IR_SCHED_INTERLEAVED && (m % pp || nl < 2 * pp) ? WHY_INTER
                          : (fpp && pp != fpp) || (fdp && dp != fdp) || (ftp && tp != ftp) ? WHY_SPEC : -1;
                    if (w >= 0) {
                        why[w]++;
                        continue;
                    }
                    c.ms[c.nm++] = m;
                }
                if (c.nm && pp > 1 && lc && (sched == IR_SCHED_1F1B || sched == IR_SCHED_ZBH1 || sched == IR_SCHED_GPIPE ||
                                             sched == IR_SCHED_KFKB || sched == IR_SCHED_INTERLEAVED)) {
                    int parts = sched == IR_SCHED_INTERLEAVED ? 2 * pp : pp, k = 0;
                    while (k < nbal && (bal[k].pp != pp || bal[k].parts != parts)) k++;
                    if (k == nbal && parts <= nl) {   /* a new count: cut below */
                        balanced z = {pp, parts, NULL, 0, 0, 0};
                        *IR_PUSH(bal, nbal, balcap) = z;
                    }
                    c.bal = k < nbal ? k : -1;
                } else c.bal = -1;
                if (c.nm) *IR_PUSH(chs, nchs, chcap) = c;
            }
        }
    }
    /* the cuts, one per virtual-stage count, in threads (with chunks Z3, SEARCH_Z3_WORK each) */
    if (nbal) {
        cutjobs cj = {g, nl, lc, lpre, lpost, bal, nbal, 0};
        int nt = search_threads();
        in_threads(cut_worker, &cj, nt < nbal ? nt : nbal);
        for (int k = 0; k < nbal && o->verbose; k++)
            fprintf(stderr, "search: stages cut for pp %d, %d virtual: slowest %.4g ms, even %.4g ms; %s in %.3f s\n",
                    bal[k].pp, bal[k].parts, bal[k].best_ms, bal[k].even_ms,
                    bal[k].stage ? bal[k].stage->text : "the even cut kept", bal[k].secs);
    }
    for (int i = 0; i < nchs; i++)
        if (chs[i].bal >= 0)
            chs[i].stage = bal[chs[i].bal].stage, chs[i].sratio = bal[chs[i].bal].best_ms / bal[chs[i].bal].even_ms;

    /* the layer fold: not where the spec names layers or ops (its stage, order, recompute, trans,
       coshard, stage_tp, chunks), nor for recycling */
    int lfold = !r0->no_fold_layers && g->nblk && !r0->stage && !r0->order && !r0->recompute && !r0->trans &&
                !r0->coshard && !r0->stage_tp && !r0->chunks && g->train.recycle <= 1;
    const int mlp = has_mlp(g);   /* the blocks have an MLP chain with tokens */
    int cos = N > 1 && !r0->coshard && frc >= 0 && mlp && !r0->no_cos_rung;   /* (one device: no coshard, plan.c) */
    /* (the test hook read once, before the threads: getenv beside them is not safe) */
    search_ctx x = {o, g, chs, nchs, fold, fz, frc, r0->seq_par_given, {0, 0, 0, 0, 1}, lfold, cos, nl, 0, NULL, 0,
                    getenv("NNSC_SEARCH_FAIL"), 0, 0};
    for (int q = 1, prev = 0; q < 4 && g->nblk; q++) {   /* the partial rungs that recompute more than the one before */
        int n = all_blocks(g, NULL, q * (RC_ALL / 4), 0, 0);
        x.rcq[q] = n > prev && n < nl;
        if (x.rcq[q]) prev = n;
    }
    /* the groups of one pp and schedule (tp_group), the ones with the most
       work first: each chain's tp x the layers it builds x its first two
       micro-batch counts (a build's items and their micro-batch copies) */
    x.grp = ir_xmalloc(sizeof(int) * ((size_t)nchs + 1));
    for (int i = nchs - 1; i >= 0; i--) {
        chain *c = &chs[i];
        c->tpnext = -1, c->head = 1;
        for (int j = i + 1; j < nchs && c->tpnext < 0; j++)
            if (chs[j].pp == c->pp && chs[j].sched == c->sched && chs[j].stage == c->stage) c->tpnext = j;
        if (c->tpnext >= 0) chs[c->tpnext].head = 0;
        c->n1 = fold_layers(&x, c->pp * (c->sched == IR_SCHED_INTERLEAVED ? 2 : 1));
        c->work = (double)c->tp * (c->n1 ? 3 * c->n1 : nl) * (c->ms[0] + (c->nm > 1 ? c->ms[1] : 0));
    }
    double *gwork = ir_xcalloc((size_t)nchs + 1, sizeof(double));
    for (int i = 0; i < nchs; i++)
        if (chs[i].head) {
            for (int j = i; j >= 0; j = chs[j].tpnext) gwork[x.ngrp] += chs[j].work;
            x.grp[x.ngrp++] = i;
        }
    for (int a = 1; a < x.ngrp; a++)   /* (insertion sort, stable: the most work first) */
        for (int b = a; b > 0 && gwork[b] > gwork[b - 1]; b--) {
            double tw = gwork[b];
            int ti = x.grp[b];
            gwork[b] = gwork[b - 1], x.grp[b] = x.grp[b - 1];
            gwork[b - 1] = tw, x.grp[b - 1] = ti;
        }
    free(gwork);
    int nth = search_threads();
    /* the groups without a pipeline first (cheap builds), and the fastest of them that fits built on
       every layer: the incumbent that the pipelines' ladders stop at (climb).  Two phases, so that
       the report does not depend on the threads' timing. */
    int *all = x.grp, nall = x.ngrp, n1g = 0, nib = 0;
    double ti0 = now_s();
    {
        x.grp = ir_xmalloc(sizeof(int) * ((size_t)nall + 1));
        for (int i = 0; i < nall; i++)
            if (chs[all[i]].pp == 1) x.grp[n1g++] = all[i];
        int k = n1g;
        for (int i = 0; i < nall; i++)
            if (chs[all[i]].pp != 1) x.grp[k++] = all[i];
        free(all);
        x.ngrp = n1g;
        in_threads(search_worker, &x, nth < x.ngrp ? nth : x.ngrp);
        int irung = 0;
        x.U = incumbent(&x, chs, nchs, &nib, &irung);
        x.spfirst = irung >= 3;   /* (memory is short: the ladders climb) */
        if (o->verbose && x.U > 0)
            fprintf(stderr, "search: the groups without a pipeline priced in %.3f s; the incumbent's step %.3f ms\n",
                    now_s() - ti0, x.U * 1e3);
        else if (o->verbose) fprintf(stderr, "search: no plan without a pipeline fits: no incumbent\n");
        x.grp += n1g, x.ngrp = nall - n1g, x.next = 0;
        in_threads(search_worker, &x, nth < x.ngrp ? nth : x.ngrp);
        x.grp -= n1g;
    }
    free(x.grp);
    cand *cs = NULL;
    int nc = 0, cap = 0, skipped = 0, tpskipped = 0;
    for (int i = 0; i < nchs; i++) {
        for (int k = 0; k < chs[i].nout; k++) *IR_PUSH(cs, nc, cap) = chs[i].out[k];
        skipped += chs[i].skipped;
        if (chs[i].tpskip) tpskipped += chs[i].nm;
    }
    free(chs);
    free(lc);
    /* the layer fold's estimates resolved first, so that the refinements start from prices */
    int nfull = nib + resolve(&x, cs, nc, nth);
    /* refinements: the 3 fastest fitting candidates with tp > 1 again,
       first with sequence parallelism where they have none (the spec does not
       say, a model with blocks: the layernorms' work and activations a tp-th,
       at the price of one bucketed all-reduce of their gradients), then with
       the ops outside the blocks (embedding, head, loss) whole on each tp
       device, split by dp alone -- no vocabulary-parallel collectives, the
       head's work tp times over -- then with the blocks' MLP chains split on
       their tokens over tp (per-op op-trans: data parallel there, their
       params whole on each tp device: one collective of their gradients a
       step instead of the chain's two in every micro-batch) */
    if (!x.fsp && g->nblk) refine(&x, &cs, &nc, &cap, nth, 0);
    if (!r0->trans && !r0->no_per_op && !r0->stage_tp && g->nblk) refine(&x, &cs, &nc, &cap, nth, 1);
    if (!r0->trans && !r0->no_per_op && !r0->coshard && !r0->stage_tp && g->nblk && mlp)
        refine(&x, &cs, &nc, &cap, nth, 2);
    /* stages with their own tp, for the 3 fastest pipelines (not where the dp replicas fold: a stage's
       dp would differ from the replica's) */
    int nstp = 0;
    if (!r0->stage_tp && !fold && !r0->trans && !r0->no_balance) nstp = stage_refine(&x, &cs, &nc, &cap, nth, B);
    /* the even cut for the 3 fastest with balanced stages (not where the spec cuts them) */
    if (!r0->no_balance && !r0->stage) refine(&x, &cs, &nc, &cap, nth, 4);
    /* op-trans searched per block: every forward op of a block on any split its annotation allows */
    pass_otlist **ots = NULL;
    int nots = 0, otcap = 0, notc = 0, notb = 0;
    if (!r0->trans && !r0->no_per_op && !r0->coshard && !r0->stage_tp && g->nblk && g->train.recycle <= 1)
        notc = ot_refine(&x, &cs, &nc, &cap, nth, &ots, &nots, &otcap, &notb);
    nfull += resolve(&x, cs, nc, nth);
    int nfiner = finer_recompute(&x, &cs, &nc, &cap);
    double secs = now_s() - t0;
    if (!nc) {   /* every combination ruled out: say by what */
        free(cs);
        free_bal(bal, nbal);
        for (int k = 0; k < nots; k++) free(ots[k]->v), free(ots[k]);
        free(ots);
        ir_buf w = {0};
        for (int k = 0; k < WHY_N; k++) {
            if (!why[k]) continue;
            ir_bprintf(&w, "%s%d: ", w.n ? "; " : "", why[k]);
            if (k == WHY_BATCH) ir_bprintf(&w, "the batch (%lld) does not divide by dp x micro-batches", (long long)B);
            if (k == WHY_LAYERS) ir_bprintf(&w, "more pipeline stages than the %d layers", nl);
            if (k == WHY_NODES) ir_bprintf(&w, "a tp group larger than a node, or beyond one node not dividing it (%d devices)", pf->per_node);
            if (k == WHY_BUBBLE) ir_bprintf(&w, "micro-batches outside pp .. 16 pp in a pipeline");
            if (k == WHY_ACCUM) ir_bprintf(&w, "more than %d micro-batch%s without a pipeline%s", r0->no_accum ? 1 : 16,
                                           r0->no_accum ? "" : "es", r0->no_accum ? " (accumulate = false)" : "");
            if (k == WHY_INTER) ir_bprintf(&w, "interleaved with micro-batches not a multiple of pp, or fewer than 2 pp layers");
            if (k == WHY_SPEC) ir_bprintf(&w, "not the spec's pp, dp or tp");
        }
        ir_buf h = {0};
        if (why[WHY_BATCH]) ir_bprintf(&h, "a larger batch (%lld now: at least one sample per dp replica and micro-batch), ",
                                       (long long)B);
        ir_bprintf(&h, "fewer devices%s", why[WHY_SPEC] || fsch >= 0 || r0->no_accum ? ", or looser [plan] constraints" : "");
        int rc = pass_error(g, r0->policy_line, h.s, "[plan] policy auto: no candidate plan on %d devices: every one of "
                            "the %d dp x tp x pp x micro-batches x schedule combinations breaks a rule (counted by the "
                            "first it breaks) -- %s", N, space, w.n ? w.s : "none");
        ir_buf_free(&w);
        ir_buf_free(&h);
        return rc;
    }
    /* fits first, fastest first */
    for (int i = 0; i < nc; i++)
        if (cs[i].ok && (double)cs[i].mem > pf->mem) {
            ir_buf w = {0};
            ir_bprintf(&w, "does not fit: ");
            ir_bprint_bytes(&w, (double)cs[i].mem);
            ir_bprintf(&w, " of ");
            ir_bprint_bytes(&w, pf->mem);
            if (cs[i].dom > 0)   /* (climb: the rungs above cannot be faster than the incumbent) */
                ir_bprintf(&w, " per device; the memory ladder's rungs above it left unpriced: none can be faster "
                           "than %.3f ms, and a plan without a pipeline that fits takes %.3f ms", cs[i].domlb * 1e3,
                           cs[i].dom * 1e3);
            else
                ir_bprintf(&w, " per device%s", cs[i].rc || cs[i].zero || cs[i].sp ? " (with the rungs of the memory ladder tried)" : "");
            cs[i].ok = 0;
            snprintf(cs[i].why, sizeof cs[i].why, "%s", w.s);
            ir_buf_free(&w);
        }
    qsort(cs, (size_t)nc, sizeof *cs, cmp_cand);
    ir_buf b = {0};
    char t[200];
    int nout = 0;
    for (int k = 0; k < WHY_N; k++) nout += why[k];
    ir_bprintf(&b, "search    policy auto on %d x %s: %d candidate plans priced in %.2f s, %d thread%s (of %d dp x tp x "
               "pp x micro-batches x schedule combinations, %d ruled out", N, pf->name, nc, secs, nth, nth > 1 ? "s" : "",
               space, nout);
    static const char *const wn[WHY_N] = {"batch", "layers", "nodes", "bubble", "micro-batches without a pipeline",
                                          "interleaved", "the spec"};
    for (int k = 0, first = 1; k < WHY_N; k++)
        if (why[k]) ir_bprintf(&b, "%s%s %d", first ? ": " : ", ", wn[k], why[k]), first = 0;
    if (skipped) ir_bprintf(&b, "; %d left unpriced: more micro-batches than a count whose step was no faster than the "
                                "count before, or, without a pipeline, than one that fits without the memory ladder",
                            skipped);
    if (tpskipped)
        ir_bprintf(&b, "; %d left unpriced by the tp stop: at a larger tp than one whose fastest, on the memory "
                       "ladder's first rung, was no faster than the tp before's at the same pp and schedule", tpskipped);
    if (fpp || fdp || ftp || fz >= 0 || frc < 0 || fsch >= 0 || r0->no_per_op || r0->no_accum || r0->no_cos_rung ||
        r0->stage_tp) {
        ir_bprintf(&b, ", and the spec's");
        if (fsch >= 0) ir_bprintf(&b, " schedule = %s", sched_name(fsch, r0->group, t));
        if (fpp) ir_bprintf(&b, " pp = %d", fpp);
        if (fdp) ir_bprintf(&b, " dp = %d", fdp);
        if (ftp) ir_bprintf(&b, " tp = %d", ftp);
        if (fz >= 0) ir_bprintf(&b, " zero = %d", fz);
        if (frc < 0) ir_bprintf(&b, " recompute");
        if (r0->no_per_op) ir_bprintf(&b, " per_op_trans = false");
        if (r0->no_accum) ir_bprintf(&b, " accumulate = false");
        if (r0->no_cos_rung) ir_bprintf(&b, " coshard_rung = false");
        if (r0->stage_tp) ir_bprintf(&b, " stage_tp = %s", r0->stage_tp);
    }
    ir_bprintf(&b, ")%s", fold ? "; dp folded: each candidate built on its tp x pp devices, its micro-batch work / "
                               "dp, the dp gradient all-reduce and ZeRO's memory by formula" : "");
    int nest = 0;   /* (the estimates not built on every layer) */
    for (int i = 0; i < nc; i++) nest += cs[i].est;
    if (nfull + nest)
        ir_bprintf(&b, "; layers folded: %d candidates estimated from builds of k and 2k layers per stage, the %d "
                   "estimated fastest then built on every layer (~: an estimate)", nfull + nest, nfull);
    if (nstp)
        ir_bprintf(&b, "; %d candidate%s with the first or last stage's own tp (stage_tp)", nstp, nstp > 1 ? "s" : "");
    if (notb)
        ir_bprintf(&b, "; op-trans searched per block (Z3) for the 3 fastest with tp: %d block%s, %d new op-trans priced",
                   notb, notb > 1 ? "s" : "", notc);
    int ndied = 0, ndom = 0;
    for (int i = 0; i < nc; i++) ndied += cs[i].died, ndom += cs[i].dom > 0;
    if (ndom)
        ir_bprintf(&b, "; %d candidate%s' memory ladder stopped where it could give nothing faster than the "
                   "plan without a pipeline that fits (%.3f ms, priced first)", ndom, ndom > 1 ? "s" : "", x.U * 1e3);
    if (ndied)
        ir_bprintf(&b, "; %d candidate%s not buildable (an internal error in a pass: skipped, listed below as lost)",
                   ndied, ndied > 1 ? "s" : "");
    if (nfiner)
        ir_bprintf(&b, "; recompute refined in sixteenths of the blocks' layers for the fastest that fits: %d more "
                   "build%s", nfiner, nfiner > 1 ? "s" : "");
    ir_bprintf(&b, "\n");
    int shown = 0;
    for (int i = 0; i < nc && shown < 8; i++, shown++) {
        cand_text(g, &cs[i], t, sizeof t);
        if (cs[i].ok) {
            ir_bprintf(&b, "  %-8s %s: step %s%.3f ms", i ? "" : "chosen", t, cs[i].est ? "~" : "", cs[i].step * 1e3);
            if (i) ir_bprintf(&b, " (+%.1f %%, slower)", 100 * (cs[i].step / cs[0].step - 1));
            ir_bprintf(&b, ", memory ");
            ir_bprint_bytes(&b, (double)cs[i].mem);
            ir_bprintf(&b, "\n");
        } else {
            ir_bprintf(&b, "  %-8s %s: %s\n", "lost", t, cs[i].why);
        }
    }
    if (nc > shown) ir_bprintf(&b, "  (%d more%s)\n", nc - shown, cs[shown].ok ? ", slower" : "");
    /* the candidates a pass could not build (an internal error, skipped), where the list above left them
       out: each is a bug to report, never a plan the search silently did without */
    for (int i = shown, k = 0; i < nc; i++) {
        if (!cs[i].died) continue;
        if (k++ == 8) {
            int left = 0;
            for (int j = i; j < nc; j++) left += cs[j].died;
            ir_bprintf(&b, "  (%d more not buildable)\n", left);
            break;
        }
        cand_text(g, &cs[i], t, sizeof t);
        ir_bprintf(&b, "  %-8s %s: %s\n", "lost", t, cs[i].why);
    }
    for (int k = 0; k < nbal && cs[0].ok && cs[0].stage; k++)
        if (bal[k].stage == cs[0].stage)
            ir_bprintf(&b, "  stages   %s (balanced on the layers' costs, Z3: slowest stage %.3f ms, %.3f ms with "
                           "even counts)\n", cs[0].stage->text, bal[k].best_ms, bal[k].even_ms);
    if (!cs[0].ok) {
        fprintf(stderr, "%s", b.s);
        ir_buf_free(&b);
        free(cs);
        free_bal(bal, nbal);
        for (int k = 0; k < nots; k++) free(ots[k]->v), free(ots[k]);
        free(ots);
        return pass_error(g, r0->policy_line, "more devices, a larger device (cluster.device, cluster.memory), or "
                          "a smaller model", "[plan] policy auto: no candidate plan fits");
    }
    if (o->verbose) fprintf(stderr, "%s", b.s);
    /* the chosen plan, for the build that follows */
    ir_planreq *r = &g->req;
    const cand *c = &cs[0];
    r->policy = ir_str(g, "hybrid");
    r->dp = c->dp;
    r->tp = c->tp;
    r->pp = c->pp;
    r->schedule = c->sched;
    r->zero = c->zero;
    if (c->sp) r->seq_par = 1;
    /* its plan record, for the passes (and its text, for plan.txt) */
    if (c->rc) all_blocks(g, g, c->rc, c->rcdrop, c->rc2);
    g->train.micro_batches = c->m;
    if (c->stage) rec_stage(g, c->stage), r->stage = ir_str(g, c->stage->text);
    char stb[512];
    if (rec_stage_tp(g, c) && stp_text(c, stb, sizeof stb)) r->stage_tp = ir_str(g, stb);
    if (r->L.nstage_tp) r->dp = r->tp = 0;
    if (c->rep || c->tok || c->ot) {
        plan_trans(g, c, c->dp);
        r->trans_auto = 1;
    }
    if (c->cos) mlp_coshard(g);
    r->search = ir_str(g, b.s);
    ir_buf_free(&b);
    free(cs);
    free_bal(bal, nbal);
    for (int k = 0; k < nots; k++) free(ots[k]->v), free(ots[k]);
    free(ots);
    return 0;
}

int pass_search(const pass_src *src, ir_graph *g)
{
    gcache gc = {.src = src};
    pthread_mutex_init(&gc.mu, NULL);
    const pass_src kept = {gcache_load, &gc, src->verbose};
    int rc = search(&kept, g);
    gcache_free(&gc);
    return rc;
}
