/* optrans.c -- per-op op-trans of a block's ops on the tp axis, for
 * policy = auto (passes/search.c; docs/plan-search.md, "Op-trans searched
 * per block").
 *
 * The policy gives every op Megatron's split on the tp axis (plan.c).  Here
 * each forward op of a block (its second repeat, whose input is the
 * first's output, or its only one; every repeat takes the same choice) may
 * take any split its annotation allows on the tp axis -- replicate, any
 * plain or `+` identifier whose size divides by tp (not the batch's, which
 * the dp axis splits), or for a linear op a value split -- and a small
 * model prices every combination:
 *
 *   each op: its forward and backward ops' time on the roofline (a tp-th
 *   of the work when split), and for each param it reads: its update (a
 *   tp-th when the op splits the param), its gradient's dp collectives,
 *   its gradient's sum over tp (when the op splits a dim the param does not
 *   have), its memory (params, gradients and AdamW state by ZeRO level) and
 *   its activations' memory;
 *
 *   each activation between two ops (and the block's output, which is the
 *   next repeat's input): in the forward, a conversion from the layout its
 *   producer makes to each layout its consumers need (all-reduce of a
 *   partial sum, reduce-scatter, all-gather, all-to-all; a slice of a
 *   whole tensor is free; one collective per distinct layout needed), and
 *   in the backward, from each distinct layout of the consumers' gradient
 *   contributions (partial sums where a consumer splits what the tensor
 *   does not have) to the layout the producer's backward needs.
 *
 * An op without a reduction identifier whose one activation input another
 * op of the block makes split follows that split (bias_add, gelu,
 * layernorm after a split: converting before or after it moves the same
 * bytes); after a whole or partial input it chooses freely.
 *
 * Layouts on the tp axis: whole (R), a partial sum (P), split along dim j
 * (S j).  That makes the problem one of choices per op with costs on ops
 * and on tensors (a tensor's term depends on its producer's choice and
 * its consumers'), and a memory bound: Z3 answers it as weighted MaxSAT
 * (pass_ot_solve), within a budget of Z3's work (its resource count: the
 * same answer on every machine and load); where the work runs out, the
 * best it has if cheaper than the candidate's own op-trans (the incumbent,
 * choice 0 of every op).  Costs are scaled to integers (1e6 units for the
 * incumbent's total).
 *
 * The model only proposes: the search builds the proposal with the real
 * passes and prices it with the cost model like any candidate, so it wins
 * or loses on the real price (the model leaves out what it cannot see: a
 * layout change the comm pass makes in several steps, the schedule). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <z3.h>

#include "passes.h"

#define OT_INF INT64_MAX   /* a conversion that cannot be made (to a partial sum) */

/* ---- the abstract problem: evaluation */

int64_t pass_ot_eval(const pass_otp *p, const int *x, int64_t *mem)
{
    int64_t c = 0, m = 0;
    for (int o = 0; o < p->nop; o++) {
        c += p->unary[o * PASS_OT_MAXC + x[o]];
        m += p->mem[o * PASS_OT_MAXC + x[o]];
    }
    for (int t = 0; t < p->nt; t++) {
        const pass_ott *T = &p->t[t];
        int cp = T->prod >= 0 ? x[T->prod] : 0;
        for (int dir = 0; dir < 2; dir++)
            for (int L = 0; L < PASS_OT_NL; L++) {
                int any = 0;
                for (int k = 0; k < T->nc && !any; k++) {
                    const pass_otc *q = &p->c[T->c0 + k];
                    any = (dir ? q->grad : q->need)[x[q->op]] == L;
                }
                if (!any) continue;
                int64_t v = (dir ? T->bcost : T->fcost)[cp][L];
                if (v == OT_INF) return OT_INF;
                c += v;
            }
    }
    if (mem) *mem = m;
    for (int i = 0; i < p->nimp; i++)
        if (x[p->imp[i][0]] == p->imp[i][1] && x[p->imp[i][2]] != p->imp[i][3]) return OT_INF;
    return p->mem_cap >= 0 && m > p->mem_cap ? OT_INF : c;
}

/* ---- Z3 */

static void on_z3_error(Z3_context c, Z3_error_code e)
{
    (void)c;
    (void)e;   /* (the answer is then unknown: the search keeps its best) */
}

/* A fresh Boolean. */
static Z3_ast mk_bool(Z3_context z, const char *pfx, int i, int j)
{
    char nm[48];
    snprintf(nm, sizeof nm, "%s%d_%d", pfx, i, j);
    return Z3_mk_const(z, Z3_mk_string_symbol(z, nm), Z3_mk_bool_sort(z));
}

static void clause2(Z3_context z, Z3_optimize op, Z3_ast a, Z3_ast b)
{
    Z3_ast v[2] = {a, b};
    Z3_optimize_assert(z, op, Z3_mk_or(z, 2, v));
}

/* A cost w for literal a: a soft constraint "not a" of weight w. */
static void cost(Z3_context z, Z3_optimize op, Z3_ast a, int64_t w)
{
    char ws[32];
    snprintf(ws, sizeof ws, "%lld", (long long)w);
    Z3_optimize_assert_soft(z, op, Z3_mk_not(z, a), ws, Z3_mk_string_symbol(z, "cost"));
}

/* The encoding: a Boolean b[o][c] per op and choice, exactly one true per
 * op; per tensor, direction and layout L that a consumer may need, y (some
 * consumer's choice needs L: clauses not b[q][c] or y), and per producer
 * choice with a cost, a z (y and b[p][c] imply z) carrying the cost.  The
 * costs are soft constraints (not b, not z, weighted), so the problem is a
 * weighted MaxSAT one that Z3's Optimize answers by its cores (maxres):
 * every core it finds raises a lower bound, so an answer is the optimum, and
 * it came out 5 to 20 times faster than a binary search on the total as a
 * pseudo-Boolean bound with the plain solver, which took longest to prove
 * the last bound (with the sum as integer if-then-else terms it proved
 * nothing in the same work).  The memory bound is a pseudo-Boolean
 * constraint on the b's (its units below 2^31). */
int pass_ot_solve(const pass_otp *p, uint64_t work, int *x, int64_t *best_out, int *proved)
{
    int64_t best = pass_ot_eval(p, x, NULL);   /* (x holds the incumbent) */
    *proved = 0;
    *best_out = best;
    if (best == OT_INF) return 1;
    Z3_config cfg = Z3_mk_config();
    Z3_context z = Z3_mk_context(cfg);
    Z3_del_config(cfg);
    Z3_set_error_handler(z, on_z3_error);
    Z3_optimize op = Z3_mk_optimize(z);
    Z3_optimize_inc_ref(z, op);
    Z3_ast *bv = ir_xmalloc(sizeof(Z3_ast) * ((size_t)p->nop * PASS_OT_MAXC + 1));
    int nm = 0, mcap = 0, nmc = 0, mccap = 0;
    Z3_ast *mlits = NULL;
    int *mcoef = NULL;
    for (int o = 0; o < p->nop; o++) {
        int one[PASS_OT_MAXC];
        for (int c = 0; c < p->nch[o]; c++) {
            Z3_ast b = bv[o * PASS_OT_MAXC + c] = mk_bool(z, "b", o, c);
            one[c] = 1;
            if (p->unary[o * PASS_OT_MAXC + c]) cost(z, op, b, p->unary[o * PASS_OT_MAXC + c]);
            int64_t mc = p->mem[o * PASS_OT_MAXC + c];
            if (p->mem_cap >= 0 && mc) {
                *IR_PUSH(mlits, nm, mcap) = b;
                *IR_PUSH(mcoef, nmc, mccap) = (int)(mc < INT32_MAX / 4 ? mc : INT32_MAX / 4);
            }
        }
        Z3_optimize_assert(z, op, Z3_mk_pbeq(z, (unsigned)p->nch[o], bv + o * PASS_OT_MAXC, one, 1));
    }
    if (p->mem_cap >= 0 && nm)
        Z3_optimize_assert(z, op, Z3_mk_pble(z, (unsigned)nm, mlits, mcoef,
                                             (int)(p->mem_cap < INT32_MAX ? p->mem_cap : INT32_MAX)));
    for (int i = 0; i < p->nimp; i++)
        clause2(z, op, Z3_mk_not(z, bv[p->imp[i][0] * PASS_OT_MAXC + p->imp[i][1]]),
                bv[p->imp[i][2] * PASS_OT_MAXC + p->imp[i][3]]);
    int nz = 0;
    for (int t = 0; t < p->nt; t++) {
        const pass_ott *T = &p->t[t];
        int np = T->prod >= 0 ? p->nch[T->prod] : 1;
        for (int dir = 0; dir < 2; dir++)
            for (int L = 0; L < PASS_OT_NL; L++) {
                int any = 0, can = 0;
                for (int k = 0; k < T->nc && !can; k++) {
                    const pass_otc *q = &p->c[T->c0 + k];
                    for (int c = 0; c < p->nch[q->op]; c++) can |= (dir ? q->grad : q->need)[c] == L;
                }
                for (int c = 0; c < np && can; c++) any |= (dir ? T->bcost : T->fcost)[c][L] != 0;
                if (!can || !any) continue;
                Z3_ast y = mk_bool(z, "y", t, dir * PASS_OT_NL + L);
                for (int k = 0; k < T->nc; k++) {
                    const pass_otc *q = &p->c[T->c0 + k];
                    for (int c = 0; c < p->nch[q->op]; c++)
                        if ((dir ? q->grad : q->need)[c] == L)
                            clause2(z, op, Z3_mk_not(z, bv[q->op * PASS_OT_MAXC + c]), y);
                }
                for (int c = 0; c < np; c++) {
                    int64_t w = (dir ? T->bcost : T->fcost)[c][L];
                    if (!w) continue;
                    Z3_ast pc = T->prod >= 0 ? bv[T->prod * PASS_OT_MAXC + c] : Z3_mk_true(z);
                    if (w == OT_INF) {   /* that conversion cannot be made */
                        clause2(z, op, Z3_mk_not(z, y), Z3_mk_not(z, pc));
                        continue;
                    }
                    Z3_ast zz = mk_bool(z, "z", nz++, 0), v[3] = {Z3_mk_not(z, y), Z3_mk_not(z, pc), zz};
                    Z3_optimize_assert(z, op, Z3_mk_or(z, 3, v));
                    cost(z, op, zz, w);
                }
            }
    }
    Z3_params prm = Z3_mk_params(z);
    Z3_params_inc_ref(z, prm);
    if (work) Z3_params_set_uint(z, prm, Z3_mk_string_symbol(z, "rlimit"), (unsigned)(work < UINT32_MAX ? work : UINT32_MAX));
    Z3_params_set_uint(z, prm, Z3_mk_string_symbol(z, "timeout"), 5000);   /* (a net for a far slower machine) */
    Z3_optimize_set_params(z, op, prm);
    Z3_lbool r = Z3_optimize_check(z, op, 0, NULL);
    int improved = 0;
    /* the optimum, or where Z3 ran out of work the best model it had (checked here, not taken
       from Z3) */
    Z3_model m = Z3_optimize_get_model(z, op);
    if (m) {
        Z3_model_inc_ref(z, m);
        int *tmp = ir_xmalloc(sizeof(int) * ((size_t)p->nop + 1)), ok = 1;
        for (int o = 0; o < p->nop && ok; o++) {
            int got = -1;
            for (int c = 0; c < p->nch[o]; c++) {
                Z3_ast val;
                if (Z3_model_eval(z, m, bv[o * PASS_OT_MAXC + c], true, &val) && Z3_get_bool_value(z, val) == Z3_L_TRUE)
                    got = c;
            }
            ok = got >= 0;
            tmp[o] = got;
        }
        Z3_model_dec_ref(z, m);
        int64_t got = ok ? pass_ot_eval(p, tmp, NULL) : OT_INF;
        if (ok && got < best) {
            memcpy(x, tmp, sizeof(int) * (size_t)p->nop);
            best = got;
            improved = 1;
        }
        free(tmp);
    }
    *proved = r == Z3_L_TRUE;
    Z3_params_dec_ref(z, prm);
    Z3_optimize_dec_ref(z, op);
    Z3_del_context(z);
    free(bv);
    free(mlits);
    free(mcoef);
    *best_out = best;
    return improved ? 0 : 1;
}

/* ---- the model of a block (pass_optrans) */

enum { LAY_R = 0, LAY_P = 1, LAY_S0 = 2 };   /* layout codes: whole, a partial sum, split along dim j: LAY_S0 + j */

/* One op's choice on the tp axis: IR_REPLICATE, IR_VALUE or an identifier. */
typedef struct otop {
    int op;                       /* graph op */
    int nch;
    int ch[PASS_OT_MAXC];
} otop;

/* Elements of operand k of op o over extents ext (a merged dim: the product of its members). */
static double operand_numel(const ir_op *o, int k, const int64_t *ext)
{
    double n = 1;
    for (int j = 0; j < o->anno.ndim[k]; j++) {
        const ir_adim *a = &o->anno.dim[k][j];
        if (a->id < 0) {
            n *= (double)a->lit;
            continue;
        }
        n *= (double)ext[a->id];
        for (int s = 0; s < a->nsub; s++) n *= (double)ext[a->sub[s]];
    }
    return n;
}

/* Operand k's layout when op o takes choice id. */
static int lay_of(const ir_op *o, int k, int id)
{
    if (id == IR_REPLICATE) return LAY_R;
    if (id == IR_VALUE) return LAY_P;
    for (int j = 0; j < o->anno.ndim[k]; j++)
        if (o->anno.dim[k][j].id == id) return LAY_S0 + j < PASS_OT_NL ? LAY_S0 + j : -1;
    return k >= o->nin && o->anno.id_reduce[id] ? LAY_P : LAY_R;
}

/* Seconds of op x on the roofline per step, its batch identifier a bdiv x m-th, the identifier
   named tpname (when it has one that divides) a tp-th. */
static double op_time(const ir_graph *g, const ir_op *x, int bdiv, int m, int tp, const char *tpname)
{
    int64_t ext[IR_MAXID];
    memcpy(ext, x->ext, sizeof ext);
    int b = pass_batch_id(g, (int)(x - g->op));
    if (b >= 0 && ext[b] % ((int64_t)bdiv * m) == 0) ext[b] /= (int64_t)bdiv * m;
    int id = tpname ? ir_anno_find(&x->anno, tpname) : -1;
    if (id >= 0 && id != b && !x->anno.id_frozen[id] && !x->anno.id_inner[id] && ext[id] % tp == 0) ext[id] /= tp;
    double fl = x->kind == IR_OP_CUSTOM ? 0 : pass_cost_formula(x, ir_ops[x->kind].cost, ext);
    if (!(fl >= 0)) fl = 0;
    double by = 0;
    for (int k = 0; k < x->nin + x->nout; k++) by += operand_numel(x, k, ext) * 4;
    int mm = x->kind == IR_OP_MATMUL || x->kind == IR_OP_MATMUL_NT || x->kind == IR_OP_MATMUL_TN;
    double peak = mm && g->train.bf16 ? g->prof.flops_bf16 : g->prof.flops;
    double t = fl / peak, tb = by / g->prof.mem_bw;
    return (t > tb ? t : tb) * m;
}

/* Seconds to take a tensor of S bytes (a dp replica's, one micro-batch) from layout a to b on tp
   devices; OT_INF-like -1 when it cannot be made. */
static double conv(const ir_profile *pf, int tp, int a, int b, double S)
{
    if (a == b) return 0;
    if (a == LAY_R) return b == LAY_P ? -1 : 0;
    if (b == LAY_P) return -1;
    double f = (double)(tp - 1) / tp;
    if (a == LAY_P)
        return b == LAY_R ? pass_cost_collective(pf, IR_COMM_ALLREDUCE, tp, 2 * f * S, 0)
                          : pass_cost_collective(pf, IR_COMM_REDUCESCATTER, tp, f * S, 0);
    return b == LAY_R ? pass_cost_collective(pf, IR_COMM_ALLGATHER, tp, f * S, 0)
                      : pass_cost_collective(pf, IR_COMM_ALLTOALL, tp, f * S / tp, 0);
}

/* The tp identifier of op's trans: its last split that is not the batch's (record_layout's), or
   -3 when it splits on the tp axis more than once (grouped-query attention's h then r). */
static int tp_choice(const ir_dist *d, int op)
{
    const ir_trans *tr = &d->trans[op];
    int b = pass_batch_id(d->g, op), id = IR_REPLICATE, n = 0;
    for (int j = 0; j < tr->nsplit; j++)
        if (tr->id[j] != b || tr->id[j] < 0) {
            if (tr->n[j] > 1 && tr->id[j] != IR_REPLICATE) n++;
            id = tr->id[j];
        }
    if (n > 1) return -3;
    return id;
}

/* The generic name of a block op ("h.0.fc" -> "h.fc") in buf. */
static int generic(const ir_graph *g, const ir_op *o, char *buf, size_t n)
{
    const char *bn = g->blk[o->block].name, *on = o->name;
    size_t bl = strlen(bn);
    const char *tail = strchr(on + bl + 1, '.');
    if (strncmp(on, bn, bl) || on[bl] != '.' || !tail) return 1;
    snprintf(buf, n, "%s.%s", bn, tail + 1);
    return 0;
}

/* The op of repeat rep of o's block with o's generic name, or -1. */
static int counterpart(const ir_graph *g, int o, int rep)
{
    char want[256], have[256];
    if (generic(g, &g->op[o], want, sizeof want)) return -1;
    for (int i = 0; i < g->nop; i++) {
        const ir_op *x = &g->op[i];
        if (x->block != g->op[o].block || x->rep != rep || x->phase != IR_PH_FWD || x->recomp) continue;
        if (!generic(g, x, have, sizeof have) && !strcmp(have, want)) return i;
    }
    return -1;
}

void pass_otp_free(pass_otp *p)
{
    free(p->nch);
    free(p->unary);
    free(p->mem);
    free(p->t);
    free(p->c);
    free(p->imp);
    memset(p, 0, sizeof *p);
}

/* One block's problem as it is built: the ops and their choices, the costs
 * in seconds and bytes (un, me per op and choice; fs, bs per tensor,
 * producer choice and layout), and the problem they scale into. */
typedef struct blockctx {
    const ir_dist *d;
    const ir_graph *g;
    const pass_otreq *q;
    int blk, R;              /* the block, the repeat modelled */
    otop *ops;
    int nop, cap;
    int *loc;                /* per graph op: its index in ops, or -1 */
    double *un, *me;         /* nop x PASS_OT_MAXC */
    double (*fs)[PASS_OT_MAXC][PASS_OT_NL], (*bs)[PASS_OT_MAXC][PASS_OT_NL];
    pass_otp p;
} blockctx;

static void blockctx_free(blockctx *b)
{
    free(b->ops);
    free(b->loc);
    free(b->un);
    free(b->me);
    free(b->fs);
    free(b->bs);
    pass_otp_free(&b->p);
}

/* The block's forward ops of the repeat modelled, each with its choices
 * (the incumbent first).  1: a block this model leaves out (an op split on
 * the tp axis twice, a custom op), or no op. */
static int block_choices(blockctx *b)
{
    const ir_graph *g = b->g;
    const int tp = b->q->tp;
    for (int i = 0; i < g->nop; i++) {
        b->loc[i] = -1;
        const ir_op *o = &g->op[i];
        if (o->block != b->blk || o->rep != b->R || o->phase != IR_PH_FWD || o->recomp) continue;
        int inc = tp_choice(b->d, i);
        if (inc == -3 || o->kind == IR_OP_CUSTOM) return 1;   /* (a split this model does not price) */
        otop *x = IR_PUSH(b->ops, b->nop, b->cap);
        b->loc[i] = b->nop - 1;
        x->op = i, x->nch = 0;
        x->ch[x->nch++] = inc;
        int bt = pass_batch_id(g, i);
        if (inc != IR_REPLICATE) x->ch[x->nch++] = IR_REPLICATE;
        if ((ir_ops[o->kind].flags & OPF_LINEAR) && inc != IR_VALUE && o->nin) x->ch[x->nch++] = IR_VALUE;
        for (int id = 0; id < o->anno.nid && x->nch < PASS_OT_MAXC; id++) {
            if (id == inc || id == bt || o->anno.id_frozen[id] || o->anno.id_inner[id] || o->ext[id] <= 0 ||
                o->ext[id] % tp)
                continue;
            int ok = 1;   /* (every operand's dim it splits within the model's layout codes) */
            for (int k = 0; k < o->nin + o->nout && ok; k++) ok = lay_of(o, k, id) >= 0;
            if (ok) x->ch[x->nch++] = id;
        }
    }
    return b->nop == 0;
}

/* Each op's cost and memory per choice: its forward and backward ops'
 * time, each param's update and collectives, params and activations kept. */
static void op_costs(blockctx *b)
{
    const ir_graph *g = b->g;
    const ir_profile *pf = &g->prof;
    const pass_otreq *q = b->q;
    const int tp = q->tp, dp = q->dp, m = q->m, z = q->zero;
    const int adam = g->train.optimizer == IR_OP_ADAMW;
    /* bytes per param element on a device: params, gradients, state by ZeRO level */
    const double per = adam ? (z == 0 ? 16 : z == 1 ? 8 + 8.0 / dp : z == 2 ? 4 + 12.0 / dp : 16.0 / dp)
                            : (z <= 1 ? 8 : z == 2 ? 4 + 4.0 / dp : 8.0 / dp);
    const double rounds = z <= 1 ? 2 : z == 2 ? m + 1 : 2.0 * m + 1;   /* (the dp gradient rounds: search.c's price) */
    const double dpbw = q->spans_dp ? pf->net_bw : pf->link_bw;
    b->un = ir_xcalloc((size_t)b->nop * PASS_OT_MAXC, sizeof(double));
    b->me = ir_xcalloc((size_t)b->nop * PASS_OT_MAXC, sizeof(double));
    for (int a = 0; a < b->nop; a++) {
        const ir_op *o = &g->op[b->ops[a].op];
        for (int c = 0; c < b->ops[a].nch; c++) {
            int id = b->ops[a].ch[c];
            const char *nm = id >= 0 ? o->anno.idname[id] : NULL;
            double t = op_time(g, o, q->bdiv, m, tp, nm), mem = 0;
            for (int i = 0; i < g->nop; i++)   /* its backward ops: the same identifier split */
                if (g->op[i].phase == IR_PH_BWD && g->op[i].fwd == b->ops[a].op && !g->op[i].recomp)
                    t += op_time(g, &g->op[i], q->bdiv, m, tp, nm);
            for (int k = 0; k < o->nin; k++) {
                const ir_tensor *pt = &g->t[o->in[k]];
                if (pt->kind != IR_T_PARAM) continue;
                double n = 1;
                for (int j = 0; j < pt->ndim; j++) n *= (double)pt->shape[j];
                int sh = lay_of(o, k, id) >= LAY_S0;
                double el = n / (sh ? tp : 1), by = 4 * el;
                t += (adam ? 28 : 12) * el / (z >= 1 ? dp : 1) / pf->mem_bw;   /* the update */
                if (dp > 1) t += rounds * (dp - 1.0) / dp * by / dpbw;    /* its gradient over dp */
                if (!sh && id != IR_REPLICATE) t += 2.0 * (tp - 1) / tp * 4 * n / pf->link_bw;   /* summed over tp */
                if (pf->weight_bw > 0) t += 3.0 * by * m / pf->weight_bw;   /* every micro-batch over it */
                mem += per * el;
            }
            for (int k = 0; k < o->nout; k++) {   /* the activations kept */
                const ir_tensor *ot = &g->t[o->out[k]];
                double n = 1;
                for (int j = 0; j < ot->ndim; j++) n *= (double)ot->shape[j];
                if (ot->batch_dim >= 0) n /= (double)q->bdiv * m;
                mem += q->stash * 4 * n / (lay_of(o, o->nin + k, id) >= LAY_S0 ? tp : 1);
            }
            b->un[a * PASS_OT_MAXC + c] = t;
            b->me[a * PASS_OT_MAXC + c] = mem;
        }
    }
}

/* The tensors: each activation a block op reads, from a block op (the
 * previous repeat's output is this one's, as it makes it for the next) or
 * from outside (whole), its conversions' costs by producer choice and
 * layout (forward: to the layout a consumer needs; backward: from a
 * consumer's gradient's layout to the one the producer's backward needs),
 * and its consumers' layouts by their choices. */
static void block_tensors(blockctx *b)
{
    const ir_graph *g = b->g;
    const ir_profile *pf = &g->prof;
    const int tp = b->q->tp, m = b->q->m;
    pass_otp *p = &b->p;
    int tcap = 0, fcap = 0, nfs = 0, bcap = 0, nbs = 0;
    int *tof = ir_xmalloc(sizeof(int) * ((size_t)g->nt + 1));   /* per graph tensor: its pass_ott, or -1 */
    for (int t = 0; t < g->nt; t++) tof[t] = -1;
    typedef struct cref { int t, a, k; } cref;   /* a read: the tensor, the op, its input */
    cref *cr = NULL;
    int ncr = 0, crcap = 0;
    for (int a = 0; a < b->nop; a++) {
        const ir_op *o = &g->op[b->ops[a].op];
        for (int k = 0; k < o->nin; k++) {
            int t = o->in[k];
            if (g->t[t].kind != IR_T_ACT) continue;
            int pr = g->t[t].producer;
            if (pr >= 0 && b->loc[pr] < 0 && b->R && g->op[pr].block == b->blk && g->op[pr].rep == b->R - 1) {
                int x = counterpart(g, pr, b->R);
                for (int j = 0; x >= 0 && j < g->op[pr].nout; j++)
                    if (g->op[pr].out[j] == t && b->loc[x] >= 0) t = g->op[x].out[j];
            }
            *IR_PUSH(cr, ncr, crcap) = (cref){t, a, k};
        }
    }
    for (int i = 0; i < ncr; i++) {
        int t = cr[i].t;
        if (tof[t] >= 0) continue;
        tof[t] = p->nt;
        pass_ott *T = IR_PUSH(p->t, p->nt, tcap);
        memset(T, 0, sizeof *T);
        int pr = g->t[t].producer;
        T->prod = pr >= 0 ? b->loc[pr] : -1;
        T->c0 = -1;
        memset(IR_PUSH(b->fs, nfs, fcap), 0, sizeof *b->fs);
        memset(IR_PUSH(b->bs, nbs, bcap), 0, sizeof *b->bs);
        const ir_tensor *tt = &g->t[t];
        double S = 4;   /* its bytes on a dp replica, one micro-batch */
        for (int j = 0; j < tt->ndim; j++) S *= (double)tt->shape[j];
        if (tt->batch_dim >= 0) S /= (double)b->q->bdiv * m;
        int np = T->prod >= 0 ? b->ops[T->prod].nch : 1, ko = 0;
        if (T->prod >= 0)
            for (int k = 0; k < g->op[pr].nout; k++)
                if (g->op[pr].out[k] == t) ko = g->op[pr].nin + k;
        for (int c = 0; c < np; c++) {
            int lp = T->prod >= 0 ? lay_of(&g->op[pr], ko, b->ops[T->prod].ch[c]) : LAY_R;
            int gp = lp >= LAY_S0 ? lp : LAY_R;   /* the gradient the producer's backward needs */
            for (int L = 0; L < PASS_OT_NL; L++) {
                b->fs[p->nt - 1][c][L] = conv(pf, tp, lp, L, S) * m;
                b->bs[p->nt - 1][c][L] = tt->dtype == IR_F32 ? conv(pf, tp, L, gp, S) * m : 0;
            }
        }
    }
    /* consumers, grouped by tensor */
    p->c = ir_xmalloc(sizeof(pass_otc) * ((size_t)ncr + 1));
    for (int T = 0; T < p->nt; T++) {
        p->t[T].c0 = p->ncons;
        for (int i = 0; i < ncr; i++) {
            if (tof[cr[i].t] != T) continue;
            pass_otc *c = &p->c[p->ncons++];
            const otop *x = &b->ops[cr[i].a];
            const ir_op *o = &g->op[x->op];
            int f32 = g->t[cr[i].t].dtype == IR_F32;
            c->op = cr[i].a;
            for (int h = 0; h < x->nch; h++) {
                int id = x->ch[h], l = lay_of(o, cr[i].k, id);
                c->need[h] = (int8_t)l;
                /* a split read gives its gradient split; a whole read by a split op, partial sums;
                   by a whole op, whole; a partial-sum read (a value split), whole */
                c->grad[h] = (int8_t)(!f32 ? -1 : l >= LAY_S0 ? l : l == LAY_P ? LAY_R : id == IR_REPLICATE ? LAY_R
                                                                                                          : LAY_P);
            }
            p->t[T].nc++;
        }
    }
    free(cr);
    free(tof);
}

/* Followers: an op without a reduction identifier whose one activation
 * input a block op makes split takes the same split (a split in, the same
 * split on; a whole input may be sliced for free, a partial sum converted
 * either way, so after those it chooses freely). */
static void block_followers(blockctx *b)
{
    const ir_graph *g = b->g;
    int impcap = 0;
    for (int a = 0; a < b->nop; a++) {
        const ir_op *o = &g->op[b->ops[a].op];
        int red = 0, nact = 0, kin = -1;
        for (int id = 0; id < o->anno.nid; id++) red |= o->anno.id_reduce[id];
        for (int k = 0; k < o->nin; k++)
            if (g->t[o->in[k]].kind == IR_T_ACT) nact++, kin = k;
        if (red || nact != 1) continue;
        int t = o->in[kin], pr = g->t[t].producer;
        if (pr < 0 || b->loc[pr] < 0) continue;
        int pa = b->loc[pr], ko = -1;
        for (int k = 0; k < g->op[pr].nout; k++)
            if (g->op[pr].out[k] == t) ko = g->op[pr].nin + k;
        for (int c = 0; c < b->ops[pa].nch && ko >= 0; c++) {
            int lp = lay_of(&g->op[pr], ko, b->ops[pa].ch[c]);
            if (lp < LAY_S0) continue;
            for (int h = 0; h < b->ops[a].nch; h++)
                if (lay_of(o, kin, b->ops[a].ch[h]) == lp) {
                    int *im = *IR_PUSH(b->p.imp, b->p.nimp, impcap);
                    im[0] = pa, im[1] = c, im[2] = a, im[3] = h;
                    break;
                }
        }
    }
}

/* The costs as integers: 1e6 units for the incumbent's total time (and for
 * its memory); the memory bound the incumbent's plus the room given (none
 * where no choice reaches it).  Returns the time unit (seconds). */
static double scale_costs(blockctx *b)
{
    pass_otp *p = &b->p;
    const int nop = b->nop;
    double tot = 0, mtot = 0;
    for (int a = 0; a < nop; a++) tot += b->un[a * PASS_OT_MAXC], mtot += b->me[a * PASS_OT_MAXC];
    for (int T = 0; T < p->nt; T++)   /* (the incumbent's conversions: every producer's choice 0) */
        for (int dir = 0; dir < 2; dir++)
            for (int L = 0; L < PASS_OT_NL; L++) {
                int any = 0;
                for (int k = 0; k < p->t[T].nc && !any; k++) {
                    const pass_otc *c = &p->c[p->t[T].c0 + k];
                    any = (dir ? c->grad : c->need)[0] == L;
                }
                double w = (dir ? b->bs : b->fs)[T][0][L];
                if (any && w > 0) tot += w;
            }
    double unit = tot > 0 ? tot / 1e6 : 1e-12, munit = mtot > 0 ? mtot / 1e6 : 1;
    p->unary = ir_xmalloc(sizeof(int64_t) * (size_t)nop * PASS_OT_MAXC);
    p->mem = ir_xmalloc(sizeof(int64_t) * (size_t)nop * PASS_OT_MAXC);
    int64_t m0 = 0, mmax = 0;
    for (int a = 0; a < nop; a++) {
        int64_t w = 0;
        for (int c = 0; c < PASS_OT_MAXC; c++) {
            int in = c < b->ops[a].nch;
            p->unary[a * PASS_OT_MAXC + c] = in ? llround(b->un[a * PASS_OT_MAXC + c] / unit) : 0;
            p->mem[a * PASS_OT_MAXC + c] = in ? llround(b->me[a * PASS_OT_MAXC + c] / munit) : 0;
            if (p->mem[a * PASS_OT_MAXC + c] > w) w = p->mem[a * PASS_OT_MAXC + c];
        }
        m0 += p->mem[a * PASS_OT_MAXC];
        mmax += w;
    }
    double mcap = b->q->mem_room >= 0 ? (double)m0 + floor(b->q->mem_room / munit) : -1;
    p->mem_cap = mcap < 0 || mcap >= (double)mmax ? -1 : (int64_t)mcap;
    for (int T = 0; T < p->nt; T++)
        for (int c = 0; c < PASS_OT_MAXC; c++)
            for (int L = 0; L < PASS_OT_NL; L++) {
                double f = b->fs[T][c][L], w = b->bs[T][c][L];
                p->t[T].fcost[c][L] = f < 0 ? OT_INF : llround(f / unit);
                p->t[T].bcost[c][L] = w < 0 ? OT_INF : llround(w / unit);
            }
    return unit;
}

int pass_optrans(const ir_dist *d, int blk, const pass_otreq *q, pass_otlist *out, pass_otres *res)
{
    const ir_graph *g = d->g;
    memset(res, 0, sizeof *res);
    if (q->tp < 2) return 1;
    /* the repeat modelled: the second (its input the first's output: the steady state, which the
       policy's choices may reach only there), or the only one */
    blockctx b = {d, g, q, blk, g->blk[blk].repeat >= 2 ? 1 : 0, NULL, 0, 0,
                  ir_xmalloc(sizeof(int) * ((size_t)g->nop + 1)), NULL, NULL, NULL, NULL, {0}};
    if (block_choices(&b)) {
        blockctx_free(&b);
        return 1;
    }
    b.p.nop = b.nop;
    b.p.nch = ir_xmalloc(sizeof(int) * (size_t)b.nop);
    for (int a = 0; a < b.nop; a++) b.p.nch[a] = b.ops[a].nch;
    op_costs(&b);
    block_tensors(&b);
    block_followers(&b);
    double unit = scale_costs(&b);
    int *x = ir_xcalloc((size_t)b.nop + 1, sizeof(int)), proved;
    int64_t best;
    res->model0 = (double)pass_ot_eval(&b.p, x, NULL) * unit;
    int rc = pass_ot_solve(&b.p, q->work, x, &best, &proved);
    res->model = (double)best * unit;
    res->proved = proved;
    res->nop = b.nop;
    res->space = 1;
    for (int a = 0; a < b.nop; a++) res->space *= b.ops[a].nch;
    for (int a = 0; a < b.nop && !rc; a++) {
        const ir_op *o = &g->op[b.ops[a].op];
        int id = b.ops[a].ch[x[a]], bt = pass_batch_id(g, b.ops[a].op);
        res->changed += x[a] != 0;
        pass_otchoice *c = IR_PUSH(out->v, out->n, out->cap);
        generic(g, o, c->pat, sizeof c->pat);
        snprintf(c->batch, sizeof c->batch, "%s", bt >= 0 ? o->anno.idname[bt] : "");
        snprintf(c->split, sizeof c->split, "%s",
                 id == IR_REPLICATE ? "replicate" : id == IR_VALUE ? "value" : o->anno.idname[id]);
    }
    free(x);
    blockctx_free(&b);
    return rc || !res->changed;
}
