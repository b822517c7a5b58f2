/* lower.c -- DistGraph + memory plan -> the Program of one rank.
 *
 * Walks the rank's items of the global schedule (the per-rank index
 * pass_schedule builds) and keeps their instructions: each
 * sub-op becomes one kernel call (the switch below maps op kinds to rtlib
 * kernels and their arguments), each comm one collective call.  Around
 * them: param initialisation (prologue), zeroing of accumulated tensors
 * (pre), data loading before the first reader of an input (mb).  Integer
 * arguments that depend on the step or micro-batch stay symbolic (pg_int).
 * The manifest handed to rt_init describes params, inputs and groups.
 * Under [train] dtype = bf16 every matmul, matmul_nt and matmul_tn becomes
 * a matmul_bf16 call (mixed precision: the products see bf16-rounded
 * inputs, everything else stays f32); the FLOP count is the same.
 */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "codegen.h"
#include "passes.h"

typedef struct lctx {
    const ir_dist *d;
    const pass_mem *m;
    ir_prog *p;
    int *pidx;       /* per pTensor of the rank (ir_dist.pt_local): manifest param index, or -1 */
    char *loaded;    /* per pTensor of the rank (ir_dist.pt_local): data already loaded in the mb section */
    int place;       /* section instructions go to, overriding theirs (-1: theirs) */
    int eval;        /* lowering the evaluation copy of the forward pass */
    ir_box *ib, *ob; /* lower_comm's scratch: the members' in / out boxes (bcap each) */
    const ir_box **tl;
    int bcap;
    int ncv;                           /* the sub-op being lowered: its operands stored in bf16 ... */
    int cv_pt[2 * IR_MAXIO];           /* ... (pTensors), which its kernel reads and writes ... */
    int64_t cv_at[2 * IR_MAXIO];       /* ... at these offsets of the f32 scratch (precision.c) */
} lctx;

/* Append an instruction to section sec (or to the overriding section). */
static pg_instr *add(lctx *c, int sec, int kernel, const char *note)
{
    return ir_prog_add(c->p, c->place >= 0 ? c->place : sec, kernel, note);
}

/* Provenance (block, repeat) of the instructions that touch tensor t: its
 * producer op's; a param's is its gradient's, optimizer state's its
 * param's (inputs, and tensors no op of a block makes: -1). */
static void prov_tensor(const ir_graph *g, int t, pg_instr *in)
{
    if (g->t[t].kind == IR_T_OPTSTATE && g->t[t].opt_of >= 0) t = g->t[t].opt_of;
    if (g->t[t].kind == IR_T_PARAM && g->t[t].grad >= 0) t = g->t[t].grad;
    int op = g->t[t].producer;
    in->blk = op >= 0 ? g->op[op].block : -1;
    in->rep = op >= 0 ? g->op[op].rep : -1;
}

static int64_t off(const lctx *c, int pt)
{
    for (int j = 0; j < c->ncv; j++)
        if (c->cv_pt[j] == pt) return c->cv_at[j];   /* stored in bf16: its f32 copy */
    int64_t o = pass_mem_off(c->d, c->m, pt);
    IR_ASSERT(o >= 0);
    return o;
}

/* Buffer bytes of pTensor pt (on the rank). */
static int64_t bytes(const lctx *c, int pt)
{
    IR_ASSERT(c->d->pt[pt].dev == c->m->rank);
    return c->m->bytes[c->d->pt_local[pt]];
}

/* Product of the sub-op's extents over operand k's dims [from, to). */
static int64_t ext_prod(const ir_op *o, const int64_t *ext, int k, int from, int to)
{
    int64_t n = 1;
    for (int j = from; j < to; j++) {
        n *= ir_adim_extent(&o->anno.dim[k][j], ext);
    }
    return n;
}

/* Emit the data load of input pTensor pt (once per micro-batch body). */
static void load_input(lctx *c, int pt)
{
    const ir_graph *g = c->d->g;
    const ir_ptensor *p = &c->d->pt[pt];
    const ir_tensor *t = &g->t[p->tensor];
    if (c->loaded[c->d->pt_local[pt]]) return;
    c->loaded[c->d->pt_local[pt]] = 1;
    int idx = 0;
    for (int i = 0; i < p->tensor; i++) idx += g->t[i].kind == IR_T_INPUT;
    pg_instr *in = add(c, IR_SEC_MB, RT_K_data, t->name);
    pg_buf(in, off(c, pt));
    pg_i(in, idx);
    if (c->eval) pg_iv(in, -1, -1, 0);   /* evaluation batch e: step -1-e */
    else pg_iv(in, 0, 1, 0);
    pg_i(in, t->ndim);
    for (int j = 0; j < t->ndim; j++) {
        if (j == t->batch_dim) {
            /* micro-batch mb is rows [mb B/m, (mb+1) B/m) of the step's batch; a
               device's box splits each micro-batch the same way it splits the batch */
            int64_t m = g->train.micro_batches, bm = t->shape[j] / m;
            pg_iv(in, p->box.lo[j] / m, 0, bm);
            pg_iv(in, p->box.hi[j] / m, 0, bm);
        } else {
            pg_i(in, p->box.lo[j]);
            pg_i(in, p->box.hi[j]);
        }
    }
}

/* The acc argument of a sub-op writing an accumulated tensor (summed over
 * the micro-batches of a step): the micro-batch index, so the first
 * micro-batch overwrites and the others add -- no zeroing pass over the
 * gradients each step.  Evaluation accumulates over its batches from a
 * zeroed loss, so it always adds; so does acc = 2 (a co-shard piece after
 * the first). */
static int box_acc(const lctx *c, int acc, int sec);

/* Append acc int a: -1 is the micro-batch loop's (0 on the first, then 1). */
static void pg_acc(pg_instr *in, int a)
{
    if (a < 0) pg_iv(in, 0, 0, 1);
    else pg_i(in, a);
}

static void put_acc(lctx *c, pg_instr *in, int acc, int sec)
{
    pg_acc(in, box_acc(c, acc, sec));
}

/* One factor of a cost formula (ir/ops.h): its value for op o with the
 * sub-op's extents ext, or NAN when the word is none. */
static double cost_factor(const ir_op *o, const int64_t *ext, const char *w, size_t n)
{
    char word[32];
    if (n == 0 || n >= sizeof word) return NAN;
    memcpy(word, w, n);
    word[n] = '\0';
    if (!strcmp(word, "causal/2")) return o->iattr[IR_IA_CAUSAL] ? 0.5 : 1.0;
    if (!strcmp(word, "*")) {   /* the leading dims of operand 0: the ids named *0, *1, ... */
        double p = 1;
        for (int j = 0; j < o->anno.ndim[0]; j++) {
            int id = o->anno.dim[0][j].id;
            if (id >= 0 && o->anno.idname[id][0] == '*') p *= (double)ext[id];
        }
        return p;
    }
    if (word[0] == '@') {   /* every element of operand K */
        char *end;
        long k = strtol(word + 1, &end, 10);
        if (*end || end == word + 1 || k < 0 || k >= o->nin + o->nout) return NAN;
        return (double)ext_prod(o, ext, (int)k, 0, o->anno.ndim[k]);
    }
    char *end;
    double v = strtod(word, &end);
    if (!*end) return v;
    int id = ir_anno_find(&o->anno, word);
    return id >= 0 ? (double)ext[id] : NAN;
}

double pass_cost_formula(const ir_op *o, const char *f, const int64_t *ext)
{
    if (!f || !*f) f = "4 @0";
    double p = 1;
    while (*f) {
        size_t n = strcspn(f, " ");
        if (n) p *= cost_factor(o, ext, f, n);
        f += n;
        f += strspn(f, " ");
    }
    return p;
}

/* Model FLOPs of sub-op s per step when it runs in section sec: its row's
 * cost formula (ir/ops.h) over the sub-op's extents, a custom op's FLOPs per
 * element of output 0 ([custom] flops), times its executions: this rank's
 * cost (ir_prog.flops) and, summed over every rank's sub-ops, the
 * manifest's flops_per_step. */
double pass_subop_flops(const ir_graph *g, const ir_subop *s, int sec)
{
    const ir_op *o = &g->op[s->op];
    int64_t ext[IR_MAXID];
    memcpy(ext, s->ext, sizeof ext);
    int b = pass_batch_id(g, s->op);
    if (b >= 0 && sec == IR_SEC_MB) ext[b] /= g->train.micro_batches;
    double execs = sec == IR_SEC_MB ? (double)g->train.micro_batches : 1;
    double fl = o->kind == IR_OP_CUSTOM
                    ? g->cust[o->iattr[IR_IA_CUSTOM]].flops * (double)ext_prod(o, ext, o->nin, 0, o->anno.ndim[o->nin])
                    : pass_cost_formula(o, ir_ops[o->kind].cost, ext);
    return fl * execs;
}

static pg_instr *emit_box(lctx *c, int sec, int dir, int64_t src, int64_t dst, const ir_box *full,
                          const ir_box *region, int nd, int acc, const char *note);

/* The acc int of an instruction writing a buffer that accumulates (acc as
 * pass_pt_accum gives it; 2: a co-shard piece after the first, which always
 * adds) in section sec (-1: the micro-batch loop's form, pg_acc). */
static int box_acc(const lctx *c, int acc, int sec)
{
    return acc == 2 ? 1 : acc && !c->eval && sec == IR_SEC_MB ? -1 : acc;
}

/* concat (two places into the output's column ranges) and split (two
 * slices of the input's): the [rows, groups, columns of a group] views of
 * the rank's boxes (a tp split of g leaves each rank whole groups). */
static void lower_cols(lctx *c, const ir_subop *s, const ir_op *o, const int64_t *ext, int sec, const char *note)
{
    int nd0 = o->anno.ndim[0];
    int64_t R = ext_prod(o, ext, 0, 0, nd0 - 1), G = ext[ir_anno_find(&o->anno, "g")];
    int64_t a = ext[ir_anno_find(&o->anno, "a")], b = ext[ir_anno_find(&o->anno, "b")];
    int64_t w = a + b, cut = a;   /* a group's columns; where its two parts meet */
    ir_box full = {{0, 0, 0}, {R, G, w}}, part[2] = {{{0, 0, 0}, {R, G, cut}}, {{0, 0, cut}, {R, G, w}}};
    for (int k = 0; k < 2; k++) {
        pg_instr *in;
        if (o->kind == IR_OP_CONCAT)
            in = emit_box(c, sec, 1, off(c, s->in[k]), off(c, s->out[0]), &full, &part[k], 3,
                          box_acc(c, pass_pt_accum(c->d, s->out[0]), sec), note);
        else
            in = emit_box(c, sec, 0, off(c, s->in[0]), off(c, s->out[k]), &full, &part[k], 3,
                          box_acc(c, pass_pt_accum(c->d, s->out[k]), sec), note);
        in->blk = o->block, in->rep = o->rep;
    }
}

/* slice (a box of the input) and pad (zeros, then the input placed in the
 * box; where the output accumulates, only the box added): the [rows, t, c]
 * views of the rank's boxes, the box start..stop along t. */
static void lower_slice(lctx *c, const ir_subop *s, const ir_op *o, const int64_t *ext, int sec, const char *note)
{
    int nd = o->anno.ndim[0], pad = o->kind == IR_OP_PAD, wide = pad ? 1 : 0;   /* wide: the operand with t */
    int ndw = o->anno.ndim[wide];
    int64_t R = ext_prod(o, ext, wide, 0, ndw - 2), T = ext_prod(o, ext, wide, ndw - 2, ndw - 1);
    int64_t C = ext_prod(o, ext, 0, nd - 1, nd);
    ir_box full = {{0, 0, 0}, {R, T, C}}, box = {{0, o->iattr[IR_IA_START], 0}, {R, o->iattr[IR_IA_STOP], C}};
    int acc = box_acc(c, pass_pt_accum(c->d, s->out[0]), sec);
    if (pad && !acc) {   /* the positions outside the box get zeros */
        pg_instr *z = add(c, sec, RT_K_zero, note);
        z->blk = o->block, z->rep = o->rep;
        pg_buf(z, off(c, s->out[0]));
        pg_i(z, R * T * C);
    }
    IR_ASSERT(!pad || acc >= 0);   /* (a pad's output never accumulates over the micro-batches: autograd) */
    pg_instr *in = emit_box(c, sec, pad, off(c, s->in[0]), off(c, s->out[0]), &full, &box, 3, acc, note);
    in->blk = o->block, in->rep = o->rep;
}

/* Is w (n chars) an identifier of annotation template anno? */
static int anno_has(const char *anno, const char *w, size_t n)
{
    if (!n) return 0;
    for (const char *a = anno; *a; a++)
        if (!strncmp(a, w, n) && (a == anno || !isalnum((unsigned char)a[-1])) && !isalnum((unsigned char)a[n]) &&
            a[n] != '_')
            return 1;
    return 0;
}

/* The integer attributes the args column names (`attr NAME`). */
static const struct {
    const char *name;
    int slot;
} arg_attrs[] = {{"heads", IR_IA_HEADS},   {"causal", IR_IA_CAUSAL},        {"vocab", IR_IA_VOCAB},
                 {"alibi", IR_IA_ALIBI},   {"buckets", IR_IA_RP_NB},        {"bidirectional", IR_IA_RP_BIDIR},
                 {"max_distance", IR_IA_RP_MAXDIST}, {"custom", IR_IA_CUSTOM}};

int pass_arg_parse(const ir_opinfo *oi, const char *w, pass_arg *a)
{
    memset(a, 0, sizeof *a);
    char t[4][24] = {""};
    int nt = 0;
    for (const char *p = w; *p && nt <= 4;) {   /* its words */
        p += strspn(p, " ");
        size_t n = strcspn(p, " ");
        if (!n) break;
        if (nt == 4 || n >= sizeof t[0]) return a->form = PASS_ARG_BAD;
        snprintf(t[nt++], sizeof t[0], "%.*s", (int)n, p);
        p += n;
    }
    char *end;
    if (nt == 1 && !strcmp(t[0], "acc")) return a->form = PASS_ARG_ACC;
    if (nt == 1 && !strcmp(t[0], "step+1")) return a->form = PASS_ARG_STEP;
    if (nt == 1 && !strcmp(t[0], "nin")) return a->form = PASS_ARG_NIN;
    if (nt == 1 && !strcmp(t[0], "nout")) return a->form = PASS_ARG_NOUT;
    if (nt == 1 && !strcmp(t[0], "shapes")) return a->form = PASS_ARG_SHAPES;
    if (nt == 2 && !strcmp(t[0], "attr")) {
        for (size_t k = 0; k < sizeof arg_attrs / sizeof arg_attrs[0]; k++)
            if (!strcmp(t[1], arg_attrs[k].name)) return a->slot = arg_attrs[k].slot, a->form = PASS_ARG_ATTR;
        return a->form = PASS_ARG_BAD;
    }
    if (nt == 3 && !strcmp(t[0], "max")) {
        if (!anno_has(oi->anno, t[1], strlen(t[1])) || !anno_has(oi->anno, t[2], strlen(t[2]))) return a->form = PASS_ARG_BAD;
        snprintf(a->id, sizeof a->id, "%s", t[1]);
        snprintf(a->id2, sizeof a->id2, "%s", t[2]);
        return a->form = PASS_ARG_MAX;
    }
    if (!strcmp(t[0], "lo")) {   /* lo K J, or lo K J/ID */
        if (nt != 3) return a->form = PASS_ARG_BAD;
        a->k = (int)strtol(t[1], &end, 10);
        if (*end || end == t[1] || a->k < 0 || a->k >= oi->nin + oi->nout) return a->form = PASS_ARG_BAD;
        a->j = (int)strtol(t[2], &end, 10);
        if (end == t[2] || a->j < -IR_MAXDIM || a->j >= IR_MAXDIM) return a->form = PASS_ARG_BAD;
        if (*end == '/') {
            if (!anno_has(oi->anno, end + 1, strlen(end + 1))) return a->form = PASS_ARG_BAD;
            snprintf(a->id, sizeof a->id, "%s", end + 1);
        } else if (*end) return a->form = PASS_ARG_BAD;
        return a->form = PASS_ARG_LO;
    }
    for (int i = 0; i < nt; i++) {   /* a product of cost factors */
        const char *f = t[i];
        int ok = !strcmp(f, "*") || !strcmp(f, "causal/2");
        if (!ok && f[0] == '@') {
            long q = strtol(f + 1, &end, 10);
            ok = !*end && end > f + 1 && q >= 0 && q < oi->nin + oi->nout;
        }
        if (!ok) ok = (strtod(f, &end), !*end && end > f);
        if (!ok) ok = anno_has(oi->anno, f, strlen(f));
        if (!ok) return a->form = PASS_ARG_BAD;
    }
    return a->form = nt ? PASS_ARG_FORMULA : PASS_ARG_BAD;
}

/* The kernel ints of args[0 .. len) (ir/ops.h): each comma-separated item
 * one int, in the forms pass_arg_parse reads; none: the default, n0 then
 * acc where the kernel's row has one. */
static void put_ints(lctx *c, pg_instr *in, const ir_subop *s, const ir_op *o, const int64_t *ext, const char *args,
                     size_t len, int kern, int acc, int64_t n0, int sec)
{
    const ir_graph *g = c->d->g;
    size_t at = strspn(args, " ");
    if (at >= len) {   /* elementwise, losses: n, then acc where the kernel's row has one (rt_kernels.h) */
        pg_i(in, n0);
        if (ir_prog_acc_index(kern) == 1) put_acc(c, in, acc, sec);
        else IR_ASSERT(!acc);
        return;
    }
    int accs = 0;
    while (at < len) {
        size_t n = strcspn(args + at, ",");
        if (at + n > len) n = len - at;
        char item[64];
        IR_ASSERT(n < sizeof item);
        memcpy(item, args + at, n);
        item[n] = '\0';
        char *w = item + strspn(item, " "), *e = w + strlen(w);
        while (e > w && e[-1] == ' ') *--e = '\0';
        pass_arg a;
        int id = -1, id2 = -1;
        switch (pass_arg_parse(&ir_ops[o->kind], w, &a)) {
        case PASS_ARG_ACC:
            put_acc(c, in, acc, sec);
            accs++;
            break;
        case PASS_ARG_STEP:   /* the optimizer's step count, from 1 */
            pg_iv(in, 1, 1, 0);
            break;
        case PASS_ARG_ATTR:
            pg_i(in, o->iattr[a.slot]);
            break;
        case PASS_ARG_NIN:
            pg_i(in, o->nin);
            break;
        case PASS_ARG_NOUT:
            pg_i(in, o->nout);
            break;
        case PASS_ARG_SHAPES:   /* per operand (inputs, then outputs): its dims, then the sub-op's extents */
            for (int k = 0; k < o->nin + o->nout; k++) {
                pg_i(in, o->anno.ndim[k]);
                for (int j = 0; j < o->anno.ndim[k]; j++) pg_i(in, ext_prod(o, ext, k, j, j + 1));
            }
            break;
        case PASS_ARG_MAX:
            id = ir_anno_find(&o->anno, a.id), id2 = ir_anno_find(&o->anno, a.id2);
            IR_ASSERT(id >= 0 && id2 >= 0);
            pg_i(in, ext[id] > ext[id2] ? ext[id] : ext[id2]);
            break;
        case PASS_ARG_LO: {   /* where the sub-op's box of operand k starts along dim j */
            int t = a.k < o->nin ? o->in[a.k] : o->out[a.k - o->nin], pt = a.k < o->nin ? s->in[a.k] : s->out[a.k - o->nin];
            int j = a.j < 0 ? g->t[t].ndim + a.j : a.j;
            IR_ASSERT(j >= 0 && j < g->t[t].ndim);
            int64_t lo = c->d->pt[pt].box.lo[j];
            if (a.id[0]) {
                id = ir_anno_find(&o->anno, a.id);
                IR_ASSERT(id >= 0 && ext[id] > 0);
                lo /= ext[id];
            }
            pg_i(in, lo);
            break;
        }
        case PASS_ARG_FORMULA: {
            double v = pass_cost_formula(o, w, ext);
            if (isnan(v)) ir_die(__FILE__, __LINE__, "op %s: kernel int \"%s\" of args \"%s\"", o->name, w, args);
            pg_i(in, (int64_t)v);
            break;
        }
        default:
            ir_die(__FILE__, __LINE__, "op %s: kernel int \"%s\" of args \"%s\"", o->name, w, args);
        }
        at += n + 1;
    }
    if (acc && !accs) ir_die(__FILE__, __LINE__, "op %s accumulates, but its args \"%s\" have no acc", o->name, args);
}

/* The kernel floats named in list (ir/ops.h args after ';'). */
static void put_floats(pg_instr *in, const ir_op *o, const char *list)
{
    static const struct {
        const char *name;
        int slot;
    } fa[] = {{"scale", IR_FA_SCALE}, {"eps", IR_FA_LN_EPS}, {"theta", IR_FA_THETA}, {"lr", IR_FA_LR},
              {"wd", IR_FA_WD}, {"beta1", IR_FA_BETA1}, {"beta2", IR_FA_BETA2}, {"aeps", IR_FA_EPS}};
    while (*list) {
        size_t n = strcspn(list, " ");
        if (n == 3 && !strncmp(list, "all", 3)) {   /* a custom op's attrs (its backward: the forward's) */
            for (int k = 0; k < IR_MAXFATTR; k++) pg_f(in, (float)o->fattr[k]);
        } else if (n) {
            int k = 0, nf = (int)(sizeof fa / sizeof fa[0]);
            while (k < nf && (strlen(fa[k].name) != n || strncmp(fa[k].name, list, n))) k++;
            if (k == nf) ir_die(__FILE__, __LINE__, "op %s: kernel float '%.*s'", o->name, (int)n, list);
            pg_f(in, (float)o->fattr[fa[k].slot]);
        }
        list += n;
        list += strspn(list, " ");
    }
}

/* bf16 storage (precision.c): sub-op s's operands stored in bf16 widened
 * into the f32 scratch before its kernel -- its inputs, and an output it
 * adds into (in_out) -- and off() pointed at the copies; cvt_end narrows
 * the outputs back after it. */
static void cvt_begin(lctx *c, const ir_subop *s, const ir_op *o, int sec, int in_out, int *outs)
{
    int64_t at[2 * IR_MAXIO], n[2 * IR_MAXIO], tot;
    int pt[2 * IR_MAXIO];
    c->ncv = 0;
    int m = pass_cvt_layout(c->d, s, pt, at, n, outs, &tot);
    IR_ASSERT(tot <= c->m->cvt_bytes);
    for (int j = 0; j < m; j++) {
        int is_in = 0;
        for (int k = 0; k < o->nin; k++) is_in |= s->in[k] == pt[j];
        if (is_in || (outs[j] && in_out)) {
            pg_instr *in = add(c, sec, RT_K_cvt_f32, c->d->g->t[c->d->pt[pt[j]].tensor].name);
            in->blk = o->block, in->rep = o->rep;
            pg_buf(in, off(c, pt[j]));
            pg_buf(in, c->m->cvt + at[j]);
            pg_i(in, n[j]);
            pg_i(in, (n[j] + 1) / 2);
        }
    }
    for (int j = 0; j < m; j++) c->cv_pt[j] = pt[j], c->cv_at[j] = c->m->cvt + at[j];
    c->ncv = m;
}

static void cvt_end(lctx *c, const ir_subop *s, const ir_op *o, int sec, const int *outs)
{
    int m = c->ncv;
    c->ncv = 0;
    for (int j = 0; j < m; j++) {
        if (!outs[j]) continue;
        pg_instr *in = add(c, sec, RT_K_cvt_bf16, c->d->g->t[c->d->pt[c->cv_pt[j]].tensor].name);
        in->blk = o->block, in->rep = o->rep;
        const ir_tensor *t = &c->d->g->t[c->d->pt[c->cv_pt[j]].tensor];
        int64_t e = ir_box_numel(&c->d->pt[c->cv_pt[j]].box, t->ndim);
        if (t->batch_dim >= 0) e /= c->d->g->train.micro_batches;
        pg_buf(in, c->cv_at[j]);
        pg_buf(in, off(c, c->cv_pt[j]));
        pg_i(in, e);
        pg_i(in, (e + 1) / 2);
    }
    (void)s;
}

static void lower_subop_kernel(lctx *c, int si, int sec);

static void lower_subop(lctx *c, int si, int sec)
{
    const ir_dist *d = c->d;
    const ir_subop *s = &d->sop[si];
    const ir_op *o = &d->g->op[s->op];
    if (!d->t16) {
        lower_subop_kernel(c, si, sec);
        return;
    }
    /* an output read before it is written: added into (accumulated, a co-shard piece after the first) */
    const ir_trans *tr = &d->trans[s->op];
    int in_out = (o->nout && pass_pt_accum(d, s->out[0])) || (tr->cosacc && s->sub % tr->cosk);
    int outs[2 * IR_MAXIO];
    for (int k = 0; k < o->nin; k++)   /* (inputs: loaded before they are widened) */
        if (d->g->t[o->in[k]].kind == IR_T_INPUT) load_input(c, s->in[k]);
    cvt_begin(c, s, o, sec, in_out, outs);
    lower_subop_kernel(c, si, sec);
    cvt_end(c, s, o, sec, outs);
}

static void lower_subop_kernel(lctx *c, int si, int sec)
{
    const ir_graph *g = c->d->g;
    const ir_subop *s = &c->d->sop[si];
    const ir_op *o = &g->op[s->op];
    int64_t ext[IR_MAXID];
    memcpy(ext, s->ext, sizeof ext);
    int b = pass_batch_id(g, s->op);
    if (b >= 0 && sec == IR_SEC_MB) ext[b] /= g->train.micro_batches;
    for (int k = 0; k < o->nin; k++)
        if (g->t[o->in[k]].kind == IR_T_INPUT) load_input(c, s->in[k]);
    int acc = o->nout && pass_pt_accum(c->d, s->out[0]);
    int nd0 = o->anno.ndim[0];
    int64_t n0 = ext_prod(o, ext, 0, 0, nd0);
    int kern = ir_ops[o->kind].kern;   /* ir/ops.h */
    if (kern == RT_K_matmul && g->train.bf16) kern = RT_K_matmul_bf16;   /* dtype = bf16: bf16 inputs */
    if (kern < 0 && o->kind != IR_OP_CONCAT && o->kind != IR_OP_SPLIT && o->kind != IR_OP_SLICE &&
        o->kind != IR_OP_PAD)   /* (those: slice and place instructions, lower_cols and lower_slice) */
        ir_die(__FILE__, __LINE__, "no kernel for op %s (kind %d)", o->name, (int)o->kind);
    if (!c->eval) c->p->flops += pass_subop_flops(g, s, sec);
    char note[300];
    snprintf(note, sizeof note, "%s.%d", o->name, s->sub);
    if (kern < 0) {
        if (o->kind == IR_OP_SLICE || o->kind == IR_OP_PAD) lower_slice(c, s, o, ext, sec, note);
        else lower_cols(c, s, o, ext, sec, note);
        return;
    }
    pg_instr *in = add(c, sec, kern, note);
    in->blk = o->block, in->rep = o->rep;   /* provenance; an update's: its param's */
    if (o->phase == IR_PH_OPT) prov_tensor(g, o->in[0], in);
    for (int k = 0; k < o->nin; k++)
        if (!(o->kind == IR_OP_EMBEDDING_BWD && k == 2)) pg_buf(in, off(c, s->in[k]));   /* table: shape only */
    for (int k = 0; k < o->nout; k++) {
        pg_buf(in, off(c, s->out[k]));
        if (pass_pt_accum(c->d, s->out[k]) != acc)
            ir_die(__FILE__, __LINE__, "op %s: outputs disagree on accumulation", o->name);
    }
    /* co-shard pieces adding into one gradient: the first piece is placed
       first (schedule.c keeps writers in order) and accumulates as any
       producer; the others always add */
    const ir_trans *tr = &c->d->trans[s->op];
    if (tr->cosacc && s->sub % tr->cosk) acc = 2;   /* (ZeRO 2: a shard's input, not accumulated: still) */
    const char *args = ir_ops[o->kind].args, *semi = strchr(args, ';');
    put_ints(c, in, s, o, ext, args, semi ? (size_t)(semi - args) : strlen(args), kern, acc, n0, sec);
    if (semi) put_floats(in, o, semi + 1);
}

ir_box pass_mbbox(const ir_dist *d, int tensor, const ir_box *b, int sec)
{
    ir_box r = *b;
    const ir_tensor *t = &d->g->t[tensor];
    if (sec == IR_SEC_MB && t->batch_dim >= 0) {
        int64_t m = d->g->train.micro_batches;
        IR_ASSERT(r.lo[t->batch_dim] % m == 0 && r.hi[t->batch_dim] % m == 0);
        r.lo[t->batch_dim] /= m;
        r.hi[t->batch_dim] /= m;
    }
    return r;
}

int64_t pass_comm_scratch(const ir_dist *d, int ci, int rank, int sec)
{
    const ir_comm *cm = &d->comm[ci];
    const ir_tensor *t = &d->g->t[cm->tensor];
    if (cm->kind == IR_COMM_ALLREDUCE || cm->kind == IR_COMM_SLICE || cm->kind == IR_COMM_ZERO) return 0;
    if (cm->bucket >= 0 && cm->bucket != ci) return 0;   /* (its bucket's first packs it) */
    const int *devs = d->ints + d->grp[cm->group].devs;   /* ascending: is rank a member? */
    int a = 0, b = cm->n;
    while (a < b) {
        int mid = (a + b) / 2;
        if (devs[mid] < rank) a = mid + 1;
        else b = mid;
    }
    if (a == cm->n || devs[a] != rank) return 0;
    if (cm->bucket == ci) {   /* a bucket of reduce-scatters or all-gathers: K + 1 blocks of a member's tiles */
        int rs = cm->kind == IR_COMM_REDUCESCATTER;
        int64_t L = 0;
        for (int x = ci; x >= 0; x = d->comm[x].bnext) {
            const ir_comm *cx = &d->comm[x];
            int pt = d->ints[(rs ? cx->out : cx->in) + a];
            L += ir_box_numel(&d->pt[pt].box, d->g->t[cx->tensor].ndim) * pass_elsize(&d->g->t[cx->tensor]);
        }
        return (cm->n + 1) * L;
    }
    /* the boxes of one execution, as lower_comm stages them: a micro-batch's in the micro-batches
       (a step's region would reserve micro_batches times the bytes, never touched) */
    const int nd = t->ndim, es = pass_elsize(t);
    int pin = d->ints[cm->in + a], pout = d->ints[cm->out + a];
    ir_box reg = pass_mbbox(d, cm->tensor, &cm->region, sec), ib, ob;
    memset(&ib, 0, sizeof ib);
    memset(&ob, 0, sizeof ob);
    if (pin >= 0) ib = pass_mbbox(d, cm->tensor, &d->pt[pin].box, sec);
    if (pout >= 0) ob = pass_mbbox(d, cm->tensor, &d->pt[pout].box, sec);
    int64_t one = ir_box_numel(&reg, nd) * es;   /* the region, staged once */
    switch (cm->kind) {   /* those that stage the region only where a buffer is not it (lower_comm) */
    case IR_COMM_SENDRECV:
        /* the region once, staged or not: the side a member does not use (the sender's receive
           buffer, the receiver's send buffer) names the scratch, n elements that nothing touches */
        return one;
    case IR_COMM_BROADCAST:
        return a == cm->root && !ir_box_eq(&reg, &ib, nd) ? one : 0;
    case IR_COMM_COPY:
        return ir_box_eq(&reg, &ob, nd) || ir_box_eq(&reg, &ib, nd) ? 0 : one;
    default:
        break;
    }
    /* the collectives: two buffers of the largest box involved (an upper bound) */
    int64_t big = ir_box_numel(&reg, nd);
    for (int k = 0; k < cm->n; k++) {
        int pi = d->ints[cm->in + k], po = d->ints[cm->out + k];
        ir_box x;
        if (pi >= 0 && ir_box_numel((x = pass_mbbox(d, cm->tensor, &d->pt[pi].box, sec), &x), nd) > big)
            big = ir_box_numel(&x, nd);
        if (po >= 0 && ir_box_numel((x = pass_mbbox(d, cm->tensor, &d->pt[po].box, sec), &x), nd) > big)
            big = ir_box_numel(&x, nd);
    }
    return 2 * big * es;
}

/* slice (dir 0: dst = src[region]) or place (dir 1: dst[region] = src) of a
 * region given in tensor coordinates, relative to the box of the full buffer. */
static pg_instr *emit_box(lctx *c, int sec, int dir, int64_t src, int64_t dst, const ir_box *full,
                          const ir_box *region, int nd, int acc, const char *note)
{
    pg_instr *in = add(c, sec, dir ? RT_K_place : RT_K_slice, note);
    pg_buf(in, src);
    pg_buf(in, dst);
    pg_i(in, nd);
    pg_acc(in, acc);   /* (-1: per micro-batch: overwrite on the first, then add) */
    for (int j = 0; j < nd; j++) {
        pg_i(in, full->hi[j] - full->lo[j]);
        pg_i(in, region->lo[j] - full->lo[j]);
        pg_i(in, region->hi[j] - full->lo[j]);
    }
    return in;
}

/* emit_box on a bf16 buffer whose box rows are whole 4-byte words (the
 * last dim's extent and the region's bounds in it even: precision.c), as
 * the f32 slice or place of those words. */
static pg_instr *emit_box16(lctx *c, int sec, int dir, int64_t src, int64_t dst, const ir_box *full,
                            const ir_box *region, int nd, const char *note)
{
    const int j = nd - 1;
    IR_ASSERT(nd > 0);
    int64_t e = full->hi[j] - full->lo[j], lo = region->lo[j] - full->lo[j], hi = region->hi[j] - full->lo[j];
    IR_ASSERT(e % 2 == 0 && lo % 2 == 0 && hi % 2 == 0);
    ir_box f = *full, r = *region;
    f.hi[j] = f.lo[j] + e / 2;
    r.lo[j] = f.lo[j] + lo / 2;
    r.hi[j] = f.lo[j] + hi / 2;
    return emit_box(c, sec, dir, src, dst, &f, &r, nd, 0, note);
}

/* Are the tiles (in member order) consecutive blocks of whole's row-major
 * buffer?  True when they tile one dim j in order and every dim before j
 * has extent 1. */
int pass_direct_tiles(const ir_box *whole, const ir_box *const *tile, int k, int nd)
{
    int j = 0;
    while (j < nd && whole->hi[j] - whole->lo[j] == 1) j++;
    if (j == nd) return k == 1;
    int64_t part = (whole->hi[j] - whole->lo[j]) / k;
    for (int i = 0; i < k; i++) {
        if (tile[i]->lo[j] != whole->lo[j] + i * part || tile[i]->hi[j] != whole->lo[j] + (i + 1) * part) return 0;
        for (int q = j + 1; q < nd; q++)
            if (tile[i]->lo[q] != whole->lo[q] || tile[i]->hi[q] != whole->hi[q]) return 0;
    }
    return 1;
}

/* A bucket of reduce-scatters or all-gathers (bucket.c), on its first
 * comm ci, the rank member k: one collective over the scratch, in which
 * member j's block holds every comm's tile j one after another (Ltot
 * floats: the bucket's tiles of one member).  A reduce-scatter packs each
 * input's tiles into the blocks, reduce-scatters into Ltot floats after
 * them and copies each comm's part to its output (adds, where the comm
 * accumulates: ZeRO 2's in the micro-batches); an all-gather copies
 * each input into the rank's block, gathers the blocks after it and places
 * each comm's tile j into its output. */
static void lower_bucket(lctx *c, int ci, int sec, int k, const char *note)
{
    const ir_dist *d = c->d;
    const ir_comm *cm = &d->comm[ci];
    const int K = cm->n, rs = cm->kind == IR_COMM_REDUCESCATTER;
    /* L: a member's tiles, floats (the scratch the bucket asks for is K + 1 blocks of them; the boxes
       are whole: in the micro-batches only tensors without a batch dim join a bucket) */
    IR_ASSERT(sec == IR_SEC_POST || sec == IR_SEC_MB);
    int64_t L = pass_comm_scratch(d, ci, c->p->rank, sec) / (K + 1) / 4, S = c->m->scratch;
    int nb = 0;
    for (int x = ci; x >= 0; x = d->comm[x].bnext) nb++;
    ir_box *tiles = ir_xmalloc(sizeof *tiles * (size_t)K);
    const ir_box **tl = ir_xmalloc(sizeof *tl * (size_t)K);
    int64_t R = rs ? S + K * L * 4 : S + L * 4;   /* the collective's output */
    char bn[300];
    snprintf(bn, sizeof bn, "%s bucket of %d, %s first", ir_comm_name(cm->kind), nb, note);
    const char *nt = ir_prog_str(c->p, bn);
    for (int pass = 0; pass < 2; pass++) {   /* 0: pack, then the collective; 1: unpack */
        int64_t at = 0;   /* the comm's offset in a block, floats */
        for (int x = ci; x >= 0; x = d->comm[x].bnext) {
            const ir_comm *cx = &d->comm[x];
            const ir_tensor *t = &d->g->t[cx->tensor];
            const int nd = t->ndim, es = pass_elsize(t);
            int pin = d->ints[cx->in + k], pout = d->ints[cx->out + k];
            ir_box full = pass_mbbox(d, cx->tensor, &d->pt[rs ? pin : pout].box, sec);
            ir_box mine = pass_mbbox(d, cx->tensor, &d->pt[rs ? pout : pin].box, sec);
            int64_t n = ir_box_numel(&mine, nd) * es / 4;
            /* the tiles in member order: consecutive blocks of the full box (a split of its first dim
               longer than 1)?  Then the blocks' column [at, at + n) of the K x L scratch is one box */
            for (int j = 0; j < K; j++) {
                tiles[j] = pass_mbbox(d, cx->tensor, &d->pt[d->ints[(rs ? cx->out : cx->in) + j]].box, sec);
                tl[j] = &tiles[j];
            }
            int direct = pass_direct_tiles(&full, tl, K, nd);
            ir_box blk, col;   /* the scratch as K x L, and the comm's column of it */
            memset(&blk, 0, sizeof blk);
            blk.hi[0] = K, blk.hi[1] = L;
            col = blk;
            col.lo[1] = at, col.hi[1] = at + n;
            if (rs && pass == 0) {   /* member j's tile of my input into block j */
                if (direct) emit_box(c, sec, 1, off(c, pin), S, &blk, &col, 2, 0, nt);
                else
                    for (int j = 0; j < K; j++)
                        emit_box(c, sec, 0, off(c, pin), S + (j * L + at) * 4, &full, &tiles[j], nd, 0, nt);
            } else if (rs) {   /* my part of the sum into the output (ZeRO 2's: added over the micro-batches) */
                pg_instr *in = add(c, sec, RT_K_copy, nt);
                pg_buf(in, R + at * 4);
                pg_buf(in, off(c, pout));
                pg_i(in, n);
                pg_acc(in, cx->acc ? (sec == IR_SEC_MB ? -1 : 1) : 0);
            } else if (pass == 0) {   /* my tile into my block */
                pg_instr *in = add(c, sec, RT_K_copy, nt);
                pg_buf(in, off(c, pin));
                pg_buf(in, S + at * 4);
                pg_i(in, n);
                pg_i(in, 0);
            } else {   /* member j's tile from its block into my output */
                if (direct) emit_box(c, sec, 0, R, off(c, pout), &blk, &col, 2, 0, nt);
                else
                    for (int j = 0; j < K; j++)
                        emit_box(c, sec, 1, R + (j * L + at) * 4, off(c, pout), &full, &tiles[j], nd, 0, nt);
            }
            at += n;
        }
        if (pass == 0) {
            pg_instr *in = add(c, sec, rs ? RT_K_reducescatter : RT_K_allgather, nt);
            pg_buf(in, S);
            pg_buf(in, R);
            pg_i(in, L);
            pg_i(in, cm->group);
        }
    }
    free(tiles);
    free(tl);
}

/* The rank's part of comm ci: it is member k of the group (the rank's
 * schedule items say which). */
static void lower_comm(lctx *c, int ci, int sec, int k)
{
    const ir_dist *d = c->d;
    const ir_comm *cm = &d->comm[ci];
    const ir_tensor *t = &d->g->t[cm->tensor];
    const int nd = t->ndim, es = pass_elsize(t), K = cm->n;
    IR_ASSERT(k >= 0 && k < K && d->ints[d->grp[cm->group].devs + k] == c->p->rank);
    const int psec = c->place >= 0 ? c->place : sec, pfrom = c->p->nins[psec];   /* provenance, below */
    int pin = d->ints[cm->in + k], pout = d->ints[cm->out + k];
    if (K > c->bcap) {   /* the members' in / out boxes, per micro-batch: any group size */
        c->bcap = K;
        c->ib = ir_xrealloc(c->ib, sizeof *c->ib * (size_t)K);
        c->ob = ir_xrealloc(c->ob, sizeof *c->ob * (size_t)K);
        c->tl = ir_xrealloc(c->tl, sizeof *c->tl * (size_t)K);
    }
    ir_box *ib = c->ib, *ob = c->ob;
    /* every member's only where the collective moves tiles between them,
       else this rank's: the others' are theirs to lower */
    int all = cm->kind == IR_COMM_ALLGATHER || cm->kind == IR_COMM_REDUCESCATTER || cm->kind == IR_COMM_ALLTOALL;
    for (int i = 0; i < K; i++) {
        if (!all && i != k) continue;
        int a = d->ints[cm->in + i], b = d->ints[cm->out + i];
        memset(&ib[i], 0, sizeof ib[i]);
        memset(&ob[i], 0, sizeof ob[i]);
        if (a >= 0) ib[i] = pass_mbbox(d, cm->tensor, &d->pt[a].box, sec);
        if (b >= 0) ob[i] = pass_mbbox(d, cm->tensor, &d->pt[b].box, sec);
    }
    ir_box reg = pass_mbbox(d, cm->tensor, &cm->region, sec);
    int64_t S = c->m->scratch, sent = 0, execs = sec == IR_SEC_MB ? d->g->train.micro_batches : 1;
    char note[300];
    snprintf(note, sizeof note, "%s %s", ir_comm_name(cm->kind), t->name);
    const char *nt = ir_prog_str(c->p, note);
    pg_instr *in;
    /* a bf16 tensor: moved as bf16 words (w16), or on the f32 wire between copies widened into the
       f32 scratch (precision.c) -- the out copy widened first where the comm keeps part of it */
    const int w16 = pass_comm_wire16(d, ci);
    int64_t cv_in, cv_out, cv_ao, cv_tot, cv_pout = -1;
    if (pass_comm_cvt(d, ci, k, sec, &cv_in, &cv_out, &cv_ao, &cv_tot)) {
        IR_ASSERT(cv_tot <= c->m->cvt_bytes && c->ncv == 0);
        int same = pin >= 0 && pout >= 0 && off(c, pin) == off(c, pout);
        int keep = pout >= 0 && !same &&
                   (cm->acc || ((cm->kind == IR_COMM_COPY || cm->kind == IR_COMM_SENDRECV) && !ir_box_eq(&reg, &ob[k], nd)));
        int64_t A = c->m->cvt, B = same ? A : A + cv_ao;
        for (int j = 0; j < 2; j++) {
            int q = j ? pout : pin;
            if (q < 0 || (j && same)) continue;
            if (!j || keep) {
                in = add(c, sec, RT_K_cvt_f32, nt);
                int64_t e = j ? cv_out : cv_in;
                pg_buf(in, off(c, q));
                pg_buf(in, j ? B : A);
                pg_i(in, e);
                pg_i(in, (e + 1) / 2);
            }
        }
        if (pout >= 0) cv_pout = pout;
        if (pin >= 0) c->cv_pt[c->ncv] = pin, c->cv_at[c->ncv++] = A;
        if (pout >= 0) c->cv_pt[c->ncv] = pout, c->cv_at[c->ncv++] = B;   /* (in place: B is A) */
    }
    switch (cm->kind) {
    case IR_COMM_ALLREDUCE:
        sent = ir_box_numel(&ib[k], nd) * es * 2 * (K - 1) / K;
        if (cm->bucket >= 0) {
            /* a gradient bucket (bucket.c): its first comm reduces the buffers of all of them, which
               memplan.c laid out one after another (in place; the gaps between them only alignment) */
            IR_ASSERT(off(c, pin) == off(c, pout));
            if (cm->bucket != ci) break;
            int64_t lo = off(c, pout), hi = lo + ir_box_numel(&ib[k], nd) * es;
            int nb = 1;
            for (int x = cm->bnext; x >= 0; x = d->comm[x].bnext, nb++) {
                const ir_comm *cx = &d->comm[x];
                IR_ASSERT(cx->group == cm->group && d->ints[d->grp[cx->group].devs + k] == c->p->rank);
                int px = d->ints[cx->out + k];
                int64_t o = off(c, px);
                IR_ASSERT(o >= hi && o - hi < 64 && off(c, d->ints[cx->in + k]) == o);
                hi = o + ir_box_numel(&d->pt[px].box, d->g->t[cx->tensor].ndim) * es;
            }
            char bn[300];
            snprintf(bn, sizeof bn, "allreduce bucket of %d gradients, %s first", nb, t->name);
            in = add(c, sec, RT_K_allreduce, ir_prog_str(c->p, bn));
            pg_buf(in, lo);
            pg_i(in, (hi - lo) / 4);
            pg_i(in, cm->group);
            break;
        }
        {
            /* on the bf16 wire (precision.c): n bf16 values in nw words */
            int64_t ne = ir_box_numel(&ib[k], nd), nw = w16 ? (ne + 1) / 2 : ne * es / 4;
            if (w16) sent = nw * 4 * 2 * (K - 1) / K;
            if (off(c, pin) != off(c, pout)) {
                /* the input is read after the reduction (memplan.c): reduce a copy */
                char cn[300];
                snprintf(cn, sizeof cn, "allreduce %s out of place: the unreduced value is read after it", t->name);
                in = add(c, sec, RT_K_copy, ir_prog_str(c->p, cn));
                pg_buf(in, off(c, pin));
                pg_buf(in, off(c, pout));
                pg_i(in, nw);
                pg_i(in, 0);
            }
            in = add(c, sec, w16 ? RT_K_allreduce_bf16 : RT_K_allreduce, nt);
            pg_buf(in, off(c, pout));
            pg_i(in, w16 ? ne : nw);
            pg_i(in, cm->group);
            if (w16) pg_i(in, nw);
        }
        break;
    case IR_COMM_SLICE:
        emit_box(c, sec, 0, off(c, pin), off(c, pout), &ib[k], &ob[k], nd, 0, nt);
        break;
    case IR_COMM_ZERO:
        in = add(c, sec, RT_K_zero, nt);
        pg_buf(in, off(c, pout));
        pg_i(in, ir_box_numel(&ob[k], nd) * es / 4);
        break;
    case IR_COMM_COPY:
        if (ir_box_eq(&reg, &ob[k], nd)) {
            emit_box(c, sec, 0, off(c, pin), off(c, pout), &ib[k], &reg, nd, cm->acc, nt);
        } else if (ir_box_eq(&reg, &ib[k], nd)) {
            emit_box(c, sec, 1, off(c, pin), off(c, pout), &ob[k], &reg, nd, cm->acc, nt);
        } else {
            emit_box(c, sec, 0, off(c, pin), S, &ib[k], &reg, nd, 0, nt);
            emit_box(c, sec, 1, S, off(c, pout), &ob[k], &reg, nd, cm->acc, nt);
        }
        break;
    case IR_COMM_SENDRECV: {
        int64_t n = w16 ? (ir_box_numel(&reg, nd) + 1) / 2 : ir_box_numel(&reg, nd) * es / 4;
        int other = 1 - cm->root;
        int64_t sbuf = S, rbuf = S;
        if (k == cm->root) {
            if (ir_box_eq(&reg, &ib[k], nd)) sbuf = off(c, pin);
            else emit_box(c, sec, 0, off(c, pin), S, &ib[k], &reg, nd, 0, nt);
            sent = n * 4;
        } else if (ir_box_eq(&reg, &ob[k], nd) && !cm->acc) {
            rbuf = off(c, pout);
        }
        in = add(c, sec, RT_K_sendrecv, nt);
        pg_buf(in, sbuf);
        pg_buf(in, rbuf);
        pg_i(in, n);
        pg_i(in, cm->group);
        pg_i(in, k == cm->root ? other : -1);
        pg_i(in, k == cm->root ? -1 : cm->root);
        if (k != cm->root && rbuf == S) emit_box(c, sec, 1, S, off(c, pout), &ob[k], &reg, nd, cm->acc, nt);
        break;
    }
    case IR_COMM_BROADCAST: {
        int64_t n = w16 ? (ir_box_numel(&reg, nd) + 1) / 2 : ir_box_numel(&reg, nd) * es / 4, buf;
        if (k == cm->root) {
            buf = ir_box_eq(&reg, &ib[k], nd) ? off(c, pin) : S;
            if (buf == S) emit_box(c, sec, 0, off(c, pin), S, &ib[k], &reg, nd, 0, nt);
            sent = n * 4;
        } else {
            IR_ASSERT(ir_box_eq(&reg, &ob[k], nd));
            buf = off(c, pout);
        }
        in = add(c, sec, RT_K_broadcast, nt);
        pg_buf(in, buf);
        pg_i(in, n);
        pg_i(in, cm->group);
        pg_i(in, cm->root);
        break;
    }
    case IR_COMM_ALLGATHER: {
        /* on the bf16 wire (precision.c): a member's piece in n words, placed as words */
        int64_t n = w16 ? ir_box_numel(&ib[k], nd) / 2 : ir_box_numel(&ib[k], nd) * es / 4;
        if (cm->bucket >= 0) {   /* a bucket (bucket.c): its first comm gathers them all */
            if (cm->bucket == ci) lower_bucket(c, ci, sec, k, t->name);
            sent = n * 4 * (K - 1);
            break;
        }
        const ir_box **tl = c->tl;
        for (int i = 0; i < K; i++) tl[i] = &ib[i];
        int direct = pass_direct_tiles(&ob[k], tl, K, nd);
        in = add(c, sec, RT_K_allgather, nt);
        pg_buf(in, off(c, pin));
        pg_buf(in, direct ? off(c, pout) : S);
        pg_i(in, n);
        pg_i(in, cm->group);
        if (!direct)
            for (int i = 0; i < K; i++) {
                if (w16) emit_box16(c, sec, 1, S + i * n * 4, off(c, pout), &ob[k], &ib[i], nd, nt);
                else emit_box(c, sec, 1, S + i * n * 4, off(c, pout), &ob[k], &ib[i], nd, 0, nt);
            }
        sent = n * 4 * (K - 1);
        break;
    }
    case IR_COMM_REDUCESCATTER: {
        /* on the bf16 wire (precision.c): a member's ne values in n words, the pieces packed as words */
        int64_t ne = ir_box_numel(&ob[k], nd), n = w16 ? ne / 2 : ne * es / 4;
        if (cm->bucket >= 0) {   /* a bucket (bucket.c): its first comm reduce-scatters them all */
            if (cm->bucket == ci) lower_bucket(c, ci, sec, k, t->name);
            sent = n * 4 * (K - 1);
            break;
        }
        const ir_box **tl = c->tl;
        for (int i = 0; i < K; i++) tl[i] = &ob[i];
        int direct = pass_direct_tiles(&ib[k], tl, K, nd);
        if (!direct)
            for (int i = 0; i < K; i++) {
                if (w16) emit_box16(c, sec, 0, off(c, pin), S + i * n * 4, &ib[k], &ob[i], nd, nt);
                else emit_box(c, sec, 0, off(c, pin), S + i * n * 4, &ib[k], &ob[i], nd, 0, nt);
            }
        /* ZeRO 2: each micro-batch's shard added to the step's (acc = mb) */
        int64_t R = cm->acc ? (direct ? S : S + K * n * 4) : off(c, pout);
        in = add(c, sec, w16 ? RT_K_reducescatter_bf16 : RT_K_reducescatter, nt);
        pg_buf(in, direct ? off(c, pin) : S);
        pg_buf(in, R);
        pg_i(in, w16 ? ne : n);
        pg_i(in, cm->group);
        if (w16) {   /* the receive's words and the send's */
            pg_i(in, n);
            pg_i(in, K * n);
        }
        if (cm->acc) emit_box(c, sec, 1, R, off(c, pout), &ob[k], &ob[k], nd, sec == IR_SEC_MB ? -1 : 1, nt);
        sent = n * 4 * (K - 1);
        break;
    }
    case IR_COMM_ALLTOALL: {
        /* chunk j of my piece goes to member j; chunk i from member i lands in my box */
        ir_box x;
        IR_ASSERT(ir_box_and(&ib[k], &ob[0], nd, &x));
        int64_t n = ir_box_numel(&x, nd) * es / 4, R = S + K * n * 4;
        for (int j = 0; j < K; j++) {
            IR_ASSERT(ir_box_and(&ib[k], &ob[j], nd, &x));
            emit_box(c, sec, 0, off(c, pin), S + j * n * 4, &ib[k], &x, nd, 0, nt);
        }
        in = add(c, sec, RT_K_alltoall, nt);
        pg_buf(in, S);
        pg_buf(in, R);
        pg_i(in, n);
        pg_i(in, cm->group);
        for (int i = 0; i < K; i++) {
            IR_ASSERT(ir_box_and(&ib[i], &ob[k], nd, &x));
            emit_box(c, sec, 1, R + i * n * 4, off(c, pout), &ob[k], &x, nd, 0, nt);
        }
        sent = n * 4 * (K - 1);
        break;
    }
    default:
        ir_die(__FILE__, __LINE__, "lowering of %s is not implemented", ir_comm_name(cm->kind));
    }
    if (cv_pout >= 0) {   /* the f32 result narrowed into the bf16 buffer */
        int64_t from = off(c, (int)cv_pout);
        c->ncv = 0;
        in = add(c, sec, RT_K_cvt_bf16, nt);
        pg_buf(in, from);
        pg_buf(in, off(c, (int)cv_pout));
        pg_i(in, cv_out);
        pg_i(in, (cv_out + 1) / 2);
    }
    c->ncv = 0;
    if (!c->eval) c->p->comm_bytes[cm->kind] += sent * execs;
    for (int x = pfrom; x < c->p->nins[psec]; x++) prov_tensor(d->g, cm->tensor, &c->p->ins[psec][x]);
}

/* Sum of squares of every gradient element the optimizer reads, each
 * logical element counted once (on the lowest device holding its box),
 * reduced over all ranks; gradclip turns it into the norm and the clip scale. */
static void grad_norm(lctx *c)
{
    const ir_dist *d = c->d;
    const ir_graph *g = d->g;
    if (c->m->gnorm < 0) return;
    pg_instr *in = add(c, IR_SEC_POST, RT_K_zero, "grad norm");
    pg_buf(in, c->m->gnorm);
    pg_i(in, 1);
    for (int q = d->rank_sop0[c->p->rank]; q < d->rank_sop0[c->p->rank + 1]; q++) {
        const ir_subop *s = &d->sop[d->rank_sop[q]];
        const ir_op *o = &g->op[s->op];
        if (o->phase != IR_PH_OPT) continue;
        /* a gradient counts once, on its owner (norm_owner); its other
           holders sum it into the unused float after the norm, so that every
           replica runs the same program (passes/share.c: ranks of equal
           shape share one), a number apart */
        const ir_ptensor *gp = &d->pt[s->in[1]];
        in = add(c, IR_SEC_POST, RT_K_sumsq, g->t[gp->tensor].name);
        prov_tensor(g, gp->tensor, in);
        pg_buf(in, off(c, s->in[1]));
        pg_buf(in, c->m->gnorm + (d->norm_owner[d->rank_sop[q]] ? 0 : 4));
        pg_i(in, bytes(c, s->in[1]) / 4);
        pg_i(in, 1);
    }
    if (d->ndev > 1) {
        IR_ASSERT(d->world_group >= 0);
        in = add(c, IR_SEC_POST, RT_K_allreduce, "grad norm");
        pg_buf(in, c->m->gnorm);
        pg_i(in, 1);
        pg_i(in, d->world_group);
    }
    in = add(c, IR_SEC_POST, RT_K_gradclip, "grad norm");
    pg_buf(in, c->m->gnorm);
    pg_f(in, (float)g->train.grad_clip);
}

/* The evaluation copy of the forward pass: zero the loss (eval_pre), the
 * forward sub-ops and the comms feeding them once per micro-batch of each
 * evaluation batch (eval), the loss reduction (eval_post). */
static void lower_eval(lctx *c)
{
    const ir_dist *d = c->d;
    const ir_graph *g = d->g;
    const int r = c->p->rank, *item = d->rank_item + d->rank_item0[r];
    const int nitem = d->rank_item0[r + 1] - d->rank_item0[r];
    c->eval = 1;
    memset(c->loaded, 0, (size_t)(d->rank_pt0[r + 1] - d->rank_pt0[r]) + 1);
    for (int q = d->rank_sop0[r]; q < d->rank_sop0[r + 1]; q++) {
        const ir_subop *s = &d->sop[d->rank_sop[q]];
        if (g->op[s->op].nout == 0 || g->op[s->op].out[0] != g->train.loss) continue;
        pg_instr *in = ir_prog_add(c->p, IR_SEC_EVAL_PRE, RT_K_zero, "eval loss");
        pg_buf(in, off(c, s->out[0]));
        pg_i(in, bytes(c, s->out[0]) / 4);
    }
    c->place = IR_SEC_EVAL;
    for (int q = 0; q < nitem; q++) {   /* the rank's items: its sub-ops, the comms it is in */
        const ir_item *it = &d->seq[item[q]];
        if (it->sec != IR_SEC_MB) continue;
        if (it->comm) {   /* (the forward's: ZeRO 3's gathers again for the backward are not needed) */
            const ir_tensor *t = &g->t[d->comm[it->id].tensor];
            if (t->kind != IR_T_GRAD && item[q] < d->seq_bwd)
                lower_comm(c, it->id, it->sec, d->rank_member[d->rank_item0[r] + q]);
        } else if (g->op[d->sop[it->id].op].phase == IR_PH_FWD) {
            lower_subop(c, it->id, it->sec);
        }
    }
    c->place = IR_SEC_EVAL_POST;
    for (int q = 0; q < nitem; q++) {
        const ir_item *it = &d->seq[item[q]];
        if (it->comm && d->comm[it->id].tensor == g->train.loss)
            lower_comm(c, it->id, it->sec, d->rank_member[d->rank_item0[r] + q]);
    }
    c->place = -1;
    c->eval = 0;
}

/* Manifest records: header, groups, params this rank stores, inputs, and
 * what the rank's banner and MFU need (mesh, param count, the FLOPs of a
 * step summed over every rank's sub-ops: known before any rank is lowered). */
static void manifest(lctx *c)
{
    const ir_dist *d = c->d;
    const ir_graph *g = d->g;
    ir_prog *p = c->p;
    ir_buf *b = &p->manifest;
    static const char *ik[] = {"none", "zeros", "ones", "const", "normal", "uniform"};
    ir_bprintf(b, "nnsc-manifest 1\nmodel %s\nrank %d world %d\narena %lld\nsteps %lld\nmicro_batches %lld\n",
               g->model ? g->model : "model", p->rank, p->world, (long long)p->arena, (long long)g->train.steps,
               (long long)g->train.micro_batches);
    ir_bprintf(b, "seed %llu\nlr %.9g\n", (unsigned long long)g->seed, g->train.lr);
    int mtp = d->mesh_tp, mdp = d->mesh_dp;   /* (stage_tp: this rank's stage's) */
    if (d->stage_tp) {
        mtp = d->stage_tp[p->rank / (d->ndev / d->mesh_pp)];
        mdp = d->ndev / d->mesh_pp / mtp;
    }
    ir_bprintf(b, "mesh dp %d tp %d", mdp, mtp);
    if (d->mesh_pp > 1) ir_bprintf(b, " pp %d", d->mesh_pp);
    ir_bprintf(b, " policy %s\n", g->req.policy ? g->req.policy : "dp");
    int64_t nparam = 0;
    for (int t = 0; t < g->nt; t++)
        if (g->t[t].kind == IR_T_PARAM) nparam += ir_numel(&g->t[t]);
    ir_bprintf(b, "param_count %lld\nflops_per_step %.17g\ndtype %s\n", (long long)nparam, d->step_flops,
               g->train.bf16 ? "bf16" : "f32");
    for (int i = 0; i < d->ngrp; i++) {
        ir_bprintf(b, "group %d %d", i, d->grp[i].n);
        for (int k = 0; k < d->grp[i].n; k++) ir_bprintf(b, " %d", d->ints[d->grp[i].devs + k]);
        ir_bprintf(b, "\n");
    }
    /* params (initialised here) and optimizer state (zeroed), both saved in
       checkpoints: the rank's stored pieces by tensor, then store order (the
       rank's pTensors only, so every rank's manifest costs its own share) */
    const int *rpt = d->rank_pt + d->rank_pt0[p->rank];
    int nrpt = d->rank_pt0[p->rank + 1] - d->rank_pt0[p->rank], nmine = 0;
    int64_t *mine = ir_xmalloc(sizeof *mine * ((size_t)nrpt + 1));
    for (int q = 0; q < nrpt; q++) {
        int pt = rpt[q], t = d->pt[pt].tensor;
        if (d->pt_store[pt] >= 0 && (g->t[t].kind == IR_T_PARAM || g->t[t].kind == IR_T_OPTSTATE))
            mine[nmine++] = (int64_t)t * ((int64_t)d->npt + 1) + d->pt_store[pt];   /* (tensor, store index) */
    }
    qsort(mine, (size_t)nmine, sizeof *mine, ir_cmp_i64);
    int np = 0, ns = 0;
    for (int q = 0; q < nmine; q++) {
        int t = (int)(mine[q] / ((int64_t)d->npt + 1)), s = (int)(mine[q] % ((int64_t)d->npt + 1));
        int pt = d->ints[d->store[t] + s];
        const ir_tensor *tt = &g->t[t];
        const ir_ptensor *pp = &d->pt[pt];
        IR_ASSERT(pp->dev == p->rank);
        /* the lowest device holding this box writes it when saving */
        int writer = d->pt_writer[pt];
        if (tt->kind == IR_T_PARAM) {
            c->pidx[d->pt_local[pt]] = np;
            ir_bprintf(b, "param %d %s %s %d", np++, tt->name, ir_dtype_name(tt->dtype), tt->ndim);
        } else {
            ir_bprintf(b, "state %d %s %s %d", ns++, tt->name, ir_dtype_name(tt->dtype), tt->ndim);
        }
        for (int j = 0; j < tt->ndim; j++) ir_bprintf(b, " %lld", (long long)tt->shape[j]);
        ir_bprintf(b, " box");
        for (int j = 0; j < tt->ndim; j++)
            ir_bprintf(b, " %lld %lld", (long long)pp->box.lo[j], (long long)pp->box.hi[j]);
        if (tt->kind == IR_T_PARAM) {
            ir_bprintf(b, " init %s %.9g %.9g", ik[tt->init], tt->init_a, tt->init_b);
            if (tt->import) ir_bprintf(b, " import %s %d", tt->import, tt->import_t);
        } else
            ir_bprintf(b, " of %s", g->t[tt->opt_of].name);
        ir_bprintf(b, " off %lld writer %d\n", (long long)off(c, pt), writer);
    }
    free(mine);
    const ir_train *tr = &g->train;
    int64_t tokens = 0;
    for (int t = 0; t < g->nt && !tokens; t++)
        if (g->t[t].kind == IR_T_INPUT && g->t[t].stream >= 0) tokens = ir_numel(&g->t[t]);
    ir_bprintf(b, "data %s\neval_data %s\neval_every %lld\neval_steps %lld\n", tr->data ? tr->data : "-",
               tr->eval_data ? tr->eval_data : "-", (long long)tr->eval_every, (long long)tr->eval_steps);
    ir_bprintf(b, "schedule %s warmup %lld min_lr_frac %.9g\nclip %.9g\ntokens_per_step %lld\n",
               tr->cosine ? "cosine" : "constant", (long long)tr->warmup, tr->lr > 0 ? tr->min_lr / tr->lr : 0,
               tr->grad_clip, (long long)tokens);
    int ni = 0;
    for (int t = 0; t < g->nt; t++) {
        const ir_tensor *tt = &g->t[t];
        if (tt->kind != IR_T_INPUT) continue;
        ir_bprintf(b, "input %d %s %s %d", ni++, tt->name, ir_dtype_name(tt->dtype), tt->ndim);
        for (int j = 0; j < tt->ndim; j++) ir_bprintf(b, " %lld", (long long)tt->shape[j]);
        /* a token input streams the data file of the run (the build's or --data); without
           one rtlib draws its synthetic values (int RANGE) as for a `dist int` input */
        if (tt->stream >= 0) ir_bprintf(b, " dist stream %d", tt->stream);
        if (tt->data == IR_DATA_INT)   /* stream inputs are i32: they always have a range */
            ir_bprintf(b, " %s %lld", tt->stream >= 0 ? "int" : "dist int", (long long)tt->data_range);
        else if (tt->data == IR_DATA_ZEROS) ir_bprintf(b, " dist zeros");
        else if (tt->stream < 0) ir_bprintf(b, " dist normal 0");
        ir_bprintf(b, " period %lld\n", (long long)g->train.data_period);
    }
    ir_bprintf(b, "end\n");
}

/* The unrolled tasks keep every order the per-micro-batch program had
 * between instructions of one micro-batch that share a buffer (read after
 * write, write after write, write after read; buffers compared by their
 * offset, which covers the items pipeline.c moves and the writers of one
 * buffer split between tasks) -- within a task, and across tasks for the
 * stash (outside it, a task's buffers live within the task and may share
 * bytes with another task's; the comms' scratch area is used within one
 * item): the check that the task split and the moved transfers change no
 * result.  old: the per-micro-batch instructions, item
 * q's at[q] .. at[q + 1] - 1; entry i's first instruction in the unrolled
 * order vstart[i] (entries of one call share it; with a steady-state loop,
 * the position it would have unrolled).  skip[mb] (NULL: none): the
 * micro-batches whose entries all lie in the loop's third or a later
 * iteration, whose check is the one of the micro-batch an iteration
 * earlier, moved by one iteration (same items, slots and kinds). */
static void unroll_check(const ir_prog *p, const pass_mem *mm, const int *kind, const pg_instr *old, const int *at,
                         const pass_pipe_ent *e, int ne, const int64_t *vstart, const char *skip)
{
    int mbs = 0;
    for (int i = 0; i < ne; i++)
        if (e[i].mb + 1 > mbs) mbs = e[i].mb + 1;
    /* the entries by micro-batch (counting sort: each micro-batch's in entry order), then by item */
    int *first = ir_xcalloc((size_t)mbs + 2, sizeof(int)), *idx = ir_xmalloc(sizeof(int) * ((size_t)ne + 1));
    for (int i = 0; i < ne; i++) first[e[i].mb + 1]++;
    for (int mb = 0; mb < mbs; mb++) first[mb + 1] += first[mb];
    int *fill = ir_xmalloc(sizeof(int) * ((size_t)mbs + 1));
    memcpy(fill, first, sizeof(int) * (size_t)mbs);
    for (int i = 0; i < ne; i++) idx[fill[e[i].mb]++] = i;
    free(fill);
    for (int mb = 0; mb < mbs; mb++) {
        if (skip && skip[mb]) continue;
        int *ix = idx + first[mb], n = first[mb + 1] - first[mb];
        for (int a = 1; a < n; a++)   /* entries of one micro-batch by item (insertion sort: mostly sorted) */
            for (int b = a; b > 0 && e[ix[b - 1]].q > e[ix[b]].q; b--) {
                int t = ix[b];
                ix[b] = ix[b - 1], ix[b - 1] = t;
            }
        /* per buffer offset: position of its last writer, the latest reader since */
        int64_t cap2 = 1;
        int64_t nins = 0;
        for (int a = 0; a < n; a++) nins += at[e[ix[a]].q + 1] - at[e[ix[a]].q];
        while (cap2 < 4 * (nins * PG_MAXBUF + 1)) cap2 *= 2;
        int64_t *key = ir_xmalloc(sizeof(int64_t) * (size_t)cap2), *lw = ir_xmalloc(sizeof(int64_t) * (size_t)cap2),
                *lr = ir_xmalloc(sizeof(int64_t) * (size_t)cap2);
        int *lk = ir_xmalloc(sizeof(int) * (size_t)cap2);   /* the task kind that used it last */
        int *lwj = ir_xmalloc(sizeof(int) * (size_t)cap2), *lrj = ir_xmalloc(sizeof(int) * (size_t)cap2);
        for (int64_t h = 0; h < cap2; h++) key[h] = -1;
        for (int a = 0; a < n; a++) {
            int i = ix[a];
            for (int j = at[e[i].q]; j < at[e[i].q + 1]; j++) {
                /* its position: merged entries share their call's */
                int64_t pos = vstart[i] + (e[i].merge || (i + 1 < ne && e[i + 1].merge) ? 0 : j - at[e[i].q]);
                const pg_instr *in = &old[j];
                for (int b = 0; b < in->nbuf; b++) {
                    int64_t bytes, off = in->buf[b];
                    /* the scratch area is each comm's own, written and read within its item */
                    if (mm->scratch_bytes && off >= mm->scratch && off < mm->scratch + mm->scratch_bytes) continue;
                    int r = ir_prog_access(in, b, &bytes);
                    uint64_t h = ((uint64_t)off * 0x9E3779B97F4A7C15u) & (uint64_t)(cap2 - 1);
                    while (key[h] >= 0 && key[h] != off) h = (h + 1) & (uint64_t)(cap2 - 1);
                    /* outside the stash, tasks of one micro-batch share bytes by design (each
                       task's buffers live within it): only the orders within a task count */
                    int stash = off >= mm->stash && off < mm->stash + mm->stash_bytes;
                    if (key[h] < 0 || (!stash && lk[h] != kind[i])) key[h] = off, lw[h] = -1, lr[h] = -1;
                    lk[h] = kind[i];
                    if (lw[h] > pos || ((r & PG_WR) && lr[h] > pos)) {
                        const pg_instr *o = &old[lw[h] > pos ? lwj[h] : lrj[h]];
                        ir_die(__FILE__, __LINE__, "rank %d: the pipeline order moves '%s' (micro-batch %d) across "
                               "'%s', which shares its buffer @%lld", p->rank, in->note ? in->note : "?", mb,
                               o->note ? o->note : "?", (long long)off);
                    }
                    if (r & PG_WR) lw[h] = pos, lwj[h] = j, lr[h] = -1;
                    if ((r & PG_RD) && pos > lr[h]) lr[h] = pos, lrj[h] = j;
                }
            }
        }
        free(key);
        free(lw);
        free(lr);
        free(lk);
        free(lwj);
        free(lrj);
    }
    free(idx);
    free(first);
}

/* A trace mark (rt_k_mark) of the edge (0 begin, 1 end) of task `task` of
 * stage st into *in; its micro-batch moves by `dmb` per iteration of the
 * steady-state loop (0 outside it). */
static void put_mark(ir_prog *p, pg_instr *in, const ir_pipe *pl, int st, int task, int edge, int dmb)
{
    const ir_task *t = &pl->task[pl->task0[st] + task];
    char note[64], tn[24];
    memset(in, 0, sizeof *in);
    in->kernel = RT_K_mark;
    in->blk = in->rep = -1;
    pg_i(in, pl->nch > 1 ? t->kind + 3 * (t->chunk + 1) : t->kind);   /* with chunks: F0.0 is 3 */
    pg_iv(in, t->mb, 0, dmb);
    pg_i(in, edge);
    snprintf(note, sizeof note, "task %s %s", pass_pipe_task_name(pl, t, tn, sizeof tn), edge ? "ends" : "begins");
    in->note = ir_prog_str(p, note);
}

/* The steady state of a pipeline's order as a loop: entries [ea, ea + R P)
 * are R iterations of P entries, iteration k's the first's with every
 * micro-batch moved by k dmb and every task by k dtask (same items, slots,
 * kinds, transfers in one call).  R == 0: none. */
typedef struct ur_loop {
    int ea, P, R, dmb, dtask;
} ur_loop;

/* The state of the marks while entries are unrolled: the task whose
 * marks are open, and the one whose begin waits for its call of transfers. */
typedef struct ur_state {
    int cur, pend;
} ur_state;

/* Advance the marks' state over entry i as unroll's emitter does (without
 * emitting): what cur holds before each entry. */
static void ur_step(const pass_pipe_ent *e, int ne, int i, ur_state *s)
{
    if (e[i].merge) return;
    int j = i, tj = e[i].task;
    while (j + 1 < ne && e[j + 1].merge) j++, tj = e[j].task > tj ? e[j].task : tj;
    if (tj != s->cur) {
        if (j > i) s->pend = tj;
        else s->cur = tj;
    }
    if (i + 1 < ne && e[i + 1].merge && s->pend >= 0) s->cur = s->pend, s->pend = -1;
}

/* Is entry j entry i an iteration later (micro-batch + dmb, task + dtask)? */
static int ur_same(const pass_pipe_ent *e, const int *kind, int i, int j, int dmb, int dtask)
{
    return e[i].q == e[j].q && e[i].slot == e[j].slot && e[i].merge == e[j].merge && e[i].hoisted == e[j].hoisted &&
           e[i].moves == e[j].moves && kind[i] == kind[j] && e[j].mb - e[i].mb == dmb &&
           e[j].task - e[i].task == dtask;
}

/* Find the steady state of stage st's order (entries e, kinds kind): the
 * task period whose tasks repeat longest (kind, chunk and slot equal, the
 * micro-batch moved by a constant), then the longest run of entries that
 * repeats with it, trimmed so that every iteration's marks and calls of
 * transfers are the first's moved and no entry of micro-batch 0 is in it
 * (its accumulations overwrite).  Worth it only with 3 iterations or more. */
static ur_loop ur_find(const ir_pipe *pl, int st, const pass_pipe_ent *e, int ne, const int *kind)
{
    ur_loop L = {0, 0, 0, 0, 0};
    const ir_task *t = pl->task + pl->task0[st];
    int nt = pl->task0[st + 1] - pl->task0[st];
    int bestPt = 0, bestrun = 0, bestj = 0, bestdmb = 0;
    for (int Pt = 1; 2 * Pt <= nt; Pt++) {
        int run = 0, dmb = 0;
        for (int j = 0; j + Pt < nt; j++) {
            int d = t[j + Pt].mb - t[j].mb;
            if (t[j + Pt].kind != t[j].kind || t[j + Pt].chunk != t[j].chunk || t[j + Pt].slot != t[j].slot || d <= 0)
                run = 0;
            else if (run && d == dmb)
                run++;
            else
                run = 1, dmb = d;   /* a new run starts here */
            if (run > bestrun) bestrun = run, bestPt = Pt, bestj = j - run + 1, bestdmb = dmb;
        }
    }
    if (bestrun < 2 * bestPt) return L;
    /* the entry period: from the first entry of a task in the middle of the run (its first
       tasks meet the warm-up's) to that of the task a period later */
    int jm = bestj + bestrun / 2, ia = -1, ib = -1;
    for (int i = 0; i < ne && (ia < 0 || ib < 0); i++) {
        if (ia < 0 && e[i].task == jm) ia = i;
        if (ib < 0 && e[i].task == jm + bestPt) ib = i;
    }
    if (ia < 0 || ib <= ia) return L;
    int P = ib - ia;
    /* the longest run of entries i with entry i + P its repeat */
    int a = -1, len = 0;
    for (int i = 0, r = 0; i + P < ne; i++) {
        r = ur_same(e, kind, i, i + P, bestdmb, bestPt) ? r + 1 : 0;
        if (r > len) len = r, a = i - r + 1;
    }
    if (len < 2 * P) return L;
    /* the marks' state before each entry */
    ur_state *sb = ir_xmalloc(sizeof *sb * ((size_t)ne + 1));
    ur_state s = {-1, -1};
    for (int i = 0; i < ne; i++) {
        sb[i] = s;
        ur_step(e, ne, i, &s);
    }
    sb[ne] = s;
    int b = a + len;   /* ur_same(i, i + P) for i in [a, b) */
    for (int ea = a; ea + 2 * P <= b + P; ea++) {
        int ok = !e[ea].merge && sb[ea].pend < 0 && sb[ea + P].pend < 0 &&
                 (sb[ea].cur < 0 ? sb[ea + P].cur < 0
                                 : sb[ea + P].cur - sb[ea].cur == bestPt &&
                                       t[sb[ea + P].cur].mb - t[sb[ea].cur].mb == bestdmb &&
                                       t[sb[ea + P].cur].kind == t[sb[ea].cur].kind &&
                                       t[sb[ea + P].cur].chunk == t[sb[ea].cur].chunk);
        for (int i = ea; ok && i < ea + P; i++) ok = e[i].mb > 0;
        if (!ok) continue;
        int R = 1 + (b - ea) / P;
        while (R >= 3 && ea + R * P < ne && e[ea + R * P].merge) R--;   /* a call of transfers stays whole */
        if (R >= 3) L = (ur_loop){ea, P, R, bestdmb, bestPt};
        break;
    }
    free(sb);
    return L;
}

/* Pipeline: the mb section, lowered item by item for one micro-batch
 * (item q's instructions are at[q] .. at[q + 1] - 1 of the rank's mb items;
 * other items add none there), becomes the rank's tasks of one step in
 * pipeline order (pass_pipe_order): each item once per task, with the
 * task's micro-batch folded into the integer arguments (c + m * mb) and
 * buffers of the stash moved to the task's slot.  The section then runs
 * once per step.  The steady state (ur_find), where the order repeats with
 * the micro-batches moved, is unrolled once, as a loop whose iteration is
 * its instructions' mb: a rank's program then grows with the stages, not
 * with the micro-batches (Megatron's GPT-3 plan has 192). */
typedef struct ur_emit {
    lctx *c;
    const int *at;
    const pg_instr *old;
    const pass_pipe_ent *e;
    int ne, st;
    pg_instr *ins;
    int k;             /* instructions so far */
    int *start;        /* per entry: its first instruction (-1: not emitted, in a later iteration) */
    ur_state s;
} ur_emit;

/* Emit entries [from, to); dmb > 0: the loop's first iteration, every
 * micro-batch-dependent int moving by dmb per iteration. */
static void ur_emit_range(ur_emit *u, int from, int to, int dmb)
{
    ir_prog *p = u->c->p;
    const pass_mem *m = u->c->m;
    const pass_pipe_ent *e = u->e;
    const ir_pipe *pl = u->c->d->pipe;
    const int *at = u->at;
    pg_instr *ins = u->ins;
    int ne = u->ne, st = u->st;
    for (int i = from; i < to; i++) {
        /* marks around each task's compute (rt_k_mark, --trace): a batch of
           transfers where two tasks meet falls between them */
        if (!e[i].merge) {
            int j = i, tj = e[i].task;   /* a call's last task: where the marks go on */
            while (j + 1 < ne && e[j + 1].merge) j++, tj = e[j].task > tj ? e[j].task : tj;
            if (tj != u->s.cur) {
                if (u->s.cur >= 0) put_mark(p, &ins[u->k++], pl, st, u->s.cur, 1, dmb);
                if (j > i) u->s.pend = tj;
                else put_mark(p, &ins[u->k++], pl, st, u->s.cur = tj, 0, dmb);
            }
        }
        u->start[i] = e[i].merge ? u->start[i - 1] : u->k;
        if (i + 1 < ne && e[i + 1].merge && !e[i].merge) {
            /* a batch of transfers in one call: each entry's one sendrecv becomes a p2p op */
            pg_instr *in = &ins[u->k++];
            const pg_instr *f = &u->old[at[e[i].q]];
            *in = *f;
            in->kernel = RT_K_p2p;
            in->nbuf = in->nint = in->nflt = 0;
            pg_i(in, 0);
            ir_buf nb = {0};
            for (int j = i; j < ne && (j == i || e[j].merge); j++) {
                IR_ASSERT(at[e[j].q + 1] - at[e[j].q] == 1);
                const pg_instr *x = &u->old[at[e[j].q]];
                IR_ASSERT(x->kernel == RT_K_sendrecv && (x->ints[2].c < 0) != (x->ints[3].c < 0));
                int send = x->ints[2].c >= 0;
                int64_t b = x->buf[send ? 0 : 1];
                if (b >= m->stash && b < m->stash + m->stash_bytes) b += e[j].slot * m->stash_bytes;
                pg_buf(in, b);
                pg_i(in, send ? 0 : 1);
                pg_i(in, x->ints[0].c);
                pg_i(in, x->ints[1].c);
                pg_i(in, send ? x->ints[2].c : x->ints[3].c);
                in->ints[0].c++;
                ir_bprintf(&nb, "%s%s", j > i ? " | " : "", x->note ? x->note : "");
            }
            in->note = ir_prog_str(p, nb.s);
            ir_buf_free(&nb);
            if (u->s.pend >= 0) put_mark(p, &ins[u->k++], pl, st, u->s.cur = u->s.pend, 0, dmb), u->s.pend = -1;
            continue;
        }
        if (e[i].merge) continue;   /* in the batch above */
        for (int j = at[e[i].q]; j < at[e[i].q + 1]; j++) {
            pg_instr *in = &ins[u->k++];
            *in = u->old[j];
            int acc = in->kernel < RT_K_COUNT ? ir_prog_acc_index(in->kernel) : -1;
            for (int a = 0; a < in->nint; a++) {
                int64_t mc = in->ints[a].m;
                in->ints[a].c += mc * e[i].mb;
                in->ints[a].m = mc * dmb;   /* 0 outside the loop */
                /* an acc int is a flag (rt_kernels.h: acc != 0 adds): 1, not the micro-batch,
                   so that the tasks of micro-batches 1 .. m - 1 are alike and outline.c shares
                   one body between them (one per micro-batch made codegen linear in m) */
                if (a == acc && mc) in->ints[a].c = in->ints[a].c != 0, in->ints[a].m = 0;
            }
            for (int a = 0; a < in->nbuf; a++)
                if (in->buf[a] >= m->stash && in->buf[a] < m->stash + m->stash_bytes)
                    in->buf[a] += e[i].slot * m->stash_bytes;
        }
    }
}

static void unroll(lctx *c, const int *at)
{
    ir_prog *p = c->p;
    const pass_mem *m = c->m;
    pass_pipe_ent *e;
    int ne = pass_pipe_order(c->d, p->rank, &e);
    const ir_pipe *pl = c->d->pipe;
    int st = p->rank / (c->d->ndev / c->d->mesh_pp);
    int *kind = ir_xmalloc(sizeof(int) * ((size_t)ne + 1));
    for (int i = 0; i < ne; i++) kind[i] = pl->task[pl->task0[st] + e[i].task].kind + 3 * pl->task[pl->task0[st] + e[i].task].chunk;
    ur_loop L = p->no_loop ? (ur_loop){0, 0, 0, 0, 0} : ur_find(pl, st, e, ne, kind);
    int ee = L.R ? L.ea + L.R * L.P : 0;   /* the entries after the loop */
    int64_t n = 0;
    for (int i = 0; i < ne; i++)
        if (!L.R || i < L.ea + L.P || i >= ee) n += at[e[i].q + 1] - at[e[i].q];
    IR_ASSERT(n < INT32_MAX);
    pg_instr *old = p->ins[IR_SEC_MB];
    ur_emit u = {c, at, old, e, ne, st, ir_xmalloc(sizeof(pg_instr) * ((size_t)n + 2 * (size_t)ne + 2)), 0,
                 ir_xmalloc(sizeof(int) * ((size_t)ne + 1)), {-1, -1}};
    for (int i = 0; i < ne; i++) u.start[i] = -1;
    int lo = 0, hi = 0;
    if (L.R) {
        ur_emit_range(&u, 0, L.ea, 0);
        lo = u.k;
        ur_emit_range(&u, L.ea, L.ea + L.P, L.dmb);
        hi = u.k;
        /* after the loop the marks' state is its last iteration's */
        ur_state s = {-1, -1};
        for (int i = 0; i < ee; i++) ur_step(e, ne, i, &s);
        u.s = s;
        ur_emit_range(&u, ee, ne, 0);
    } else {
        ur_emit_range(&u, 0, ne, 0);
    }
    if (u.s.cur >= 0) put_mark(p, &u.ins[u.k++], pl, st, u.s.cur, 1, 0);
    /* where each entry runs in the unrolled order, for the check */
    int64_t *vstart = ir_xmalloc(sizeof(int64_t) * ((size_t)ne + 1));
    char *skip = L.R ? ir_xcalloc((size_t)pl->m + 1, 1) : NULL;
    for (int i = 0; i < ne; i++) {
        if (!L.R || i < L.ea) {
            vstart[i] = u.start[i];
        } else if (i < ee) {
            int it = (i - L.ea) / L.P;
            vstart[i] = u.start[L.ea + (i - L.ea) % L.P] + (int64_t)it * (hi - lo);
        } else {
            vstart[i] = u.start[i] + (int64_t)(L.R - 1) * (hi - lo);
        }
    }
    if (skip) {   /* micro-batches all of whose entries are in the third iteration or later */
        for (int i = 0; i < ne; i++) skip[e[i].mb] = 1;
        for (int i = 0; i < ne; i++)
            if (i < L.ea + 2 * L.P || i >= ee) skip[e[i].mb] = 0;
    }
    unroll_check(p, m, kind, old, at, e, ne, vstart, skip);
    free(vstart);
    free(skip);
    free(kind);
    free(old);
    free(e);
    free(u.start);
    p->ins[IR_SEC_MB] = u.ins;
    p->nins[IR_SEC_MB] = p->inscap[IR_SEC_MB] = u.k;
    p->pipelined = 1;
    if (L.R) p->loop_lo = lo, p->loop_hi = hi, p->loop_iters = L.R;
}

void pass_lower(const ir_dist *d, const pass_mem *m, ir_prog *p)
{
    const ir_graph *g = d->g;
    /* the rank's share (pass_schedule's indexes): its items in schedule
       order, its sub-ops and pTensors ascending; nothing here walks another
       rank's, so lowering every rank is linear in the DistGraph */
    IR_ASSERT(d->rank_item0 && d->norm_owner);
    const int rk = p->rank, *item = d->rank_item + d->rank_item0[rk], *rpt = d->rank_pt + d->rank_pt0[rk];
    const int nitem = d->rank_item0[rk + 1] - d->rank_item0[rk], nrpt = d->rank_pt0[rk + 1] - d->rank_pt0[rk];
    lctx c = {.d = d, .m = m, .p = p, .pidx = ir_xmalloc(sizeof(int) * ((size_t)nrpt + 1)),
              .loaded = ir_xcalloc((size_t)nrpt + 1, 1), .place = -1};
    memset(c.pidx, 0xff, sizeof(int) * (size_t)nrpt);   /* -1: not a param of this rank */
    p->arena = m->arena;
    p->arena_top = -1;
    p->arena_top_bytes = 0;
    for (int q = 0; q < nrpt; q++) {   /* the largest buffer, for pass_arena_check's message */
        int l = d->pt_local[rpt[q]];
        if (m->off[l] >= 0 && m->bytes[l] > p->arena_top_bytes)
            p->arena_top = d->pt[rpt[q]].tensor, p->arena_top_bytes = m->bytes[l];
    }
    p->stash_bytes = m->stash_bytes;
    p->nslot = m->nslot;
    p->micro_batches = g->train.micro_batches;
    p->steps = g->train.steps;
    p->loss_off = -1;
    manifest(&c);
    /* prologue: params from the RNG, optimizer state zeroed */
    for (int q = 0; q < nrpt; q++) {
        int i = rpt[q];
        if (m->off[q] < 0) continue;
        const ir_tensor *t = &g->t[d->pt[i].tensor];
        if (c.pidx[q] >= 0) {
            pg_instr *in = ir_prog_add(p, IR_SEC_PROLOGUE, RT_K_init_param, t->name);
            prov_tensor(g, d->pt[i].tensor, in);
            pg_buf(in, m->off[q]);
            pg_i(in, c.pidx[q]);
        } else if (t->kind == IR_T_OPTSTATE) {
            pg_instr *in = ir_prog_add(p, IR_SEC_PROLOGUE, RT_K_zero, t->name);
            prov_tensor(g, d->pt[i].tensor, in);
            pg_buf(in, m->off[q]);
            pg_i(in, m->bytes[q] / pass_elsize(t));
        }
    }
    /* ZeRO 1, 2: the params gathered from their dp shards once initialised */
    c.place = IR_SEC_PROLOGUE;
    for (int q = 0; q < nitem; q++) {
        const ir_item *it = &d->seq[item[q]];
        if (it->comm && d->comm[it->id].prologue) lower_comm(&c, it->id, IR_SEC_POST, d->rank_member[d->rank_item0[rk] + q]);
    }
    c.place = -1;
    /* pre: accumulators written outside the micro-batch loop (the ones inside
       overwrite on micro-batch 0, see put_acc) */
    for (int q = d->rank_sop0[rk]; q < d->rank_sop0[rk + 1]; q++) {
        const ir_subop *s = &d->sop[d->rank_sop[q]];
        if (s->sec == IR_SEC_MB) continue;
        const ir_op *o = &g->op[s->op];
        for (int k = 0; k < o->nout; k++) {
            if (!d->accum[o->out[k]]) continue;
            const ir_tensor *t = &g->t[o->out[k]];
            pg_instr *in = ir_prog_add(p, IR_SEC_PRE, RT_K_zero, t->name);
            prov_tensor(g, o->out[k], in);
            pg_buf(in, off(&c, s->out[k]));
            pg_i(in, bytes(&c, s->out[k]) / pass_elsize(t));
        }
    }
    int normed = 0;
    int *at = d->pipe ? ir_xmalloc(sizeof(int) * ((size_t)nitem + 1)) : NULL;   /* pipeline: item q's first */
    for (int q = 0; q < nitem; q++) {
        const ir_item *it = &d->seq[item[q]];
        /* the global gradient norm: after the gradients' comms, before the first
           update (the schedule's first, on whichever rank it runs) */
        if (d->seq_opt >= 0 && item[q] >= d->seq_opt && !normed++) grad_norm(&c);
        if (at) at[q] = p->nins[IR_SEC_MB];
        if (it->comm) lower_comm(&c, it->id, it->sec, d->rank_member[d->rank_item0[rk] + q]);
        else lower_subop(&c, it->id, it->sec);
    }
    if (at) {
        at[nitem] = p->nins[IR_SEC_MB];
        unroll(&c, at);
        free(at);
    }
    if (d->seq_opt >= 0 && !normed++) grad_norm(&c);
    if (g->train.eval_every > 0) lower_eval(&c);
    /* the replicated loss this rank reports */
    for (int q = 0; q < nrpt; q++)
        if (d->pt[rpt[q]].tensor == g->train.loss && d->pt[rpt[q]].vn == 1 && m->off[q] >= 0)
            p->loss_off = m->off[q];
    /* arena map */
    for (int q = 0; q < nrpt; q++) {
        int i = rpt[q];
        if (m->off[q] < 0) continue;
        ir_buf nb = {0};
        ir_pt_print(d, i, &nb);
        pg_region *r = IR_PUSH(p->reg, p->nreg, p->regcap);
        r->name = ir_prog_str(p, nb.s);
        r->off = m->off[q];
        r->bytes = m->bytes[q];
        r->persistent = m->off[q] < m->persistent;
        ir_buf_free(&nb);
    }
    free(c.pidx);
    free(c.loaded);
    free(c.ib);
    free(c.ob);
    free(c.tl);
}
