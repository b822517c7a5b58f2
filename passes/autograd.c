/* autograd.c -- append the backward pass and the optimizer to the Graph.
 *
 * Forward ops are visited in reverse topological order.  When an op is
 * reached, every consumer of its outputs has already contributed to their
 * gradients; several contributions are summed with add ops, a single one is
 * used as is (an identity contribution, e.g. add's, is the same tensor).
 * Each op kind's backward rule below appends the ops that produce the
 * contributions to its inputs' gradients.  The loss has an implicit
 * gradient of 1 (its backward ops carry the loss scale).
 *
 * A recycle op's output needs no gradient (recycling: the passes before the
 * last run without), so nothing before it is differentiated through it.
 *
 * Every param's gradient ends in a tensor of its own (kind grad, grad_of =
 * the param), written by exactly one op, since it is accumulated over
 * micro-batches; an identity contribution gets a copy op.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct agctx {
    ir_graph *g;
    int **contrib;   /* per tensor: contribution tensor ids */
    int *ncontrib;
    int *uses;       /* per tensor: forward consumers that need its gradient */
    char *needs;     /* per tensor: requires a gradient */
    int *nmade;      /* per tensor: contributions made so far (names) */
    int fwd;         /* forward op being differentiated */
    int set;         /* > 0: the next backward op's integer attribute set - 1 is set_val (a custom
                        op's backward: the [custom] row it runs; merge_heads': the forward's heads;
                        concat's: where its first part ends) */
    int64_t set_val;
    const int64_t *ia;   /* not NULL: the next backward op's integer attributes (reshape's: the forward's input shape) */
} agctx;

/* Append backward op k (outputs named outs[], or name when outs is NULL),
 * with the forward op's attributes (heads, scale, vocab, eps). */
static int add_n(agctx *c, const char *name, ir_opkind k, int nin, const int *in, const char *const *outs)
{
    char err[256];
    const char *one[1] = {name};
    const ir_op *f = &c->g->op[c->fwd];
    int64_t ia[IR_MAXIATTR];
    double fa[IR_MAXFATTR];
    memcpy(ia, c->ia ? c->ia : f->iattr, sizeof ia);
    memcpy(fa, f->fattr, sizeof fa);
    if (c->set > 0) ia[c->set - 1] = c->set_val;
    int o = ir_add_op_attr(c->g, name, k, nin, in, outs ? outs : one, ia, fa, 0, err, sizeof err);
    if (o < 0) ir_die(__FILE__, __LINE__, "autograd %s: %s", name, err);
    ir_op *op = &c->g->op[o];
    op->phase = IR_PH_BWD;
    op->fwd = c->fwd;
    op->block = c->g->op[c->fwd].block;
    op->rep = c->g->op[c->fwd].rep;
    return o;
}

static int add(agctx *c, const char *name, ir_opkind k, int nin, const int *in)
{
    return add_n(c, name, k, nin, in, NULL);
}

/* Name of the next contribution to x's gradient. */
static void cname(agctx *c, int x, char *buf, size_t n)
{
    const char *xn = c->g->t[x].name;
    if (c->uses[x] <= 1) snprintf(buf, n, "d.%s", xn);
    else snprintf(buf, n, "d.%s.%d", xn, ++c->nmade[x]);
}

static void push(agctx *c, int x, int t)
{
    c->contrib[x] = ir_xrealloc(c->contrib[x], sizeof(int) * (size_t)(c->ncontrib[x] + 1));
    c->contrib[x][c->ncontrib[x]++] = t;
}

/* Append op k over in[] whose output contributes to x's gradient. */
static void contribute(agctx *c, int x, ir_opkind k, int nin, const int *in)
{
    if (!c->needs[x]) return;
    char nm[512];
    cname(c, x, nm, sizeof nm);
    int o = add(c, nm, k, nin, in);
    int t = c->g->op[o].out[0];
    c->g->t[t].kind = IR_T_GRAD;
    push(c, x, t);
}

/* Append op k over in[] with one output per xs[j], each a contribution to
 * xs[j]'s gradient (outputs for inputs that need none are computed and unused). */
static void contribute_n(agctx *c, int n, const int *xs, ir_opkind k, int nin, const int *in)
{
    char nm[IR_MAXIO][512];
    const char *outs[IR_MAXIO];
    IR_ASSERT(n <= IR_MAXIO);
    int any = 0;
    for (int j = 0; j < n; j++) {
        any |= c->needs[xs[j]];
        if (c->needs[xs[j]]) cname(c, xs[j], nm[j], sizeof nm[j]);
        else snprintf(nm[j], sizeof nm[j], "d.%s.unused", c->g->t[xs[j]].name);
        outs[j] = nm[j];
    }
    if (!any) return;
    int o = add_n(c, nm[0], k, nin, in, outs);
    for (int j = 0; j < n; j++) {
        int t = c->g->op[o].out[j];
        c->g->t[t].kind = IR_T_GRAD;
        if (c->needs[xs[j]]) push(c, xs[j], t);
    }
}

/* Gradient of output tensor y, summing its contributions (or -1). */
static int final_grad(agctx *c, int y)
{
    ir_graph *g = c->g;
    if (c->ncontrib[y] == 0) return -1;
    int acc = c->contrib[y][0];
    for (int i = 1; i < c->ncontrib[y]; i++) {
        char nm[512];
        if (i == c->ncontrib[y] - 1) snprintf(nm, sizeof nm, "d.%s", g->t[y].name);
        else snprintf(nm, sizeof nm, "d.%s.sum%d", g->t[y].name, i);
        int in[2] = {acc, c->contrib[y][i]};
        int o = add(c, nm, IR_OP_ADD, 2, in);
        acc = g->op[o].out[0];
        g->t[acc].kind = IR_T_GRAD;
    }
    return acc;
}

/* Record dy as y's gradient (the first contribution sum made for it). */
static void set_grad(ir_graph *g, int y, int dy)
{
    if (g->t[y].grad < 0) {
        g->t[y].grad = dy;
        if (g->t[dy].grad_of < 0) g->t[dy].grad_of = y;
    }
}

/* The gradients of every output of an op whose backward takes them all
 * (split; a custom op whose backward does, bwd_all) into a[]: an output the
 * loss does not depend on gets a gradient of zeros (an input tensor, data =
 * zeros, as recycling's first pass reads).  0 when no gradient is needed
 * (no output reaches the loss, or no input needs one). */
static int output_grads(agctx *c, const ir_op *o, int *a)
{
    ir_graph *g = c->g;
    int any = 0, anyin = 0;
    for (int k = 0; k < o->nout; k++) {
        a[k] = final_grad(c, o->out[k]);
        if (a[k] >= 0) any = 1, set_grad(g, o->out[k], a[k]);
    }
    for (int k = 0; k < o->nin; k++) anyin |= c->needs[o->in[k]];
    if (!any || !anyin) return 0;
    for (int k = 0; k < o->nout; k++) {
        if (a[k] >= 0) continue;
        const ir_tensor y = g->t[o->out[k]];
        char nm[512];
        snprintf(nm, sizeof nm, "d.%s.zeros", y.name);
        a[k] = ir_add_tensor(g, nm, IR_F32, IR_T_INPUT, y.ndim, y.shape, o->line);
        ir_tensor *z = &g->t[a[k]];
        z->data = IR_DATA_ZEROS;
        z->batch_dim = y.batch_dim;
        z->stream = -1;
    }
    return 1;
}

/* A custom op whose backward takes every output's gradient, then the inputs. */
static int backward_custom_all(agctx *c, const ir_op *o)
{
    const ir_custom *cu = &c->g->cust[o->iattr[IR_IA_CUSTOM]];
    int a[2 * IR_MAXIO];
    if (!output_grads(c, o, a)) return 0;
    for (int k = 0; k < o->nin; k++) a[o->nout + k] = o->in[k];
    c->set = 1 + IR_IA_CUSTOM, c->set_val = cu->bwd;
    contribute_n(c, o->nin, o->in, IR_OP_CUSTOM, o->nout + o->nin, a);
    c->set = 0;
    return 0;
}

/* A custom op whose backward is built-in ops ([custom] grad =, ir_gradop):
 * each added as written, over the op's gradients, inputs, outputs and the
 * ops before it, without the custom op's attributes; dxK contributes to
 * input K's gradient.  0, or 2 after a message at the grad key. */
static int backward_custom_grad(agctx *c, const ir_op *o)
{
    ir_graph *g = c->g;
    const ir_custom *cu = &g->cust[o->iattr[IR_IA_CUSTOM]];
    int dys[IR_MAXIO];
    if (cu->nout == 1) {
        dys[0] = final_grad(c, o->out[0]);
        if (dys[0] < 0) return 0;
        set_grad(g, o->out[0], dys[0]);
        int anyin = 0;
        for (int k = 0; k < o->nin; k++) anyin |= c->needs[o->in[k]];
        if (!anyin) return 0;
    } else if (!output_grads(c, o, dys)) {
        return 0;
    }
    const char *name[3 * IR_MAXIO + IR_MAXGRADOPS * IR_MAXIO];
    int id[3 * IR_MAXIO + IR_MAXGRADOPS * IR_MAXIO], n = 0;
    char seed[3 * IR_MAXIO][16];
    for (; n < 2 * o->nout + o->nin; n++) {   /* dy .., x1 .., y1 .. (ir_custom_grad_seed's order) */
        ir_custom_grad_seed(cu, n, seed[n], sizeof seed[n]);
        name[n] = seed[n];
        id[n] = n < o->nout ? dys[n] : n < o->nout + o->nin ? o->in[n - o->nout] : o->out[n - o->nout - o->nin];
    }
    for (int q = 0; q < cu->ngrad; q++) {
        const ir_gradop *gop = &cu->grad[q];
        int in[IR_MAXIO];
        for (int k = 0; k < gop->nin; k++) {
            in[k] = -1;
            for (int j = 0; j < n && in[k] < 0; j++)
                if (!strcmp(name[j], gop->in[k])) in[k] = id[j];
            IR_ASSERT(in[k] >= 0);   /* (the frontend checked the names) */
        }
        char outn[IR_MAXIO][600];
        const char *outs[IR_MAXIO];
        for (int k = 0; k < gop->nout; k++) {
            snprintf(outn[k], sizeof outn[k], "d.%s.%s", o->name, gop->out[k]);
            outs[k] = outn[k];
        }
        char err[256];
        int64_t ia[IR_MAXIATTR] = {0};
        double fa[IR_MAXFATTR] = {0};
        int op = ir_add_op_attr(g, outn[0], gop->kind, gop->nin, in, outs, ia, fa, 0, err, sizeof err);
        if (op < 0) {
            char ins[512] = "";
            size_t u = 0;
            for (int k = 0; k < gop->nin && u < sizeof ins; k++) {
                const ir_tensor *t = &g->t[in[k]];
                u += (size_t)snprintf(ins + u, sizeof ins - u, "%s%s [", k ? ", " : "", gop->in[k]);
                for (int d = 0; d < t->ndim && u < sizeof ins; d++)
                    u += (size_t)snprintf(ins + u, sizeof ins - u, "%s%lld", d ? "," : "", (long long)t->shape[d]);
                if (u < sizeof ins) u += (size_t)snprintf(ins + u, sizeof ins - u, "]");
            }
            return pass_error(g, cu->grad_line, "each grad op must fit its annotation (docs/model-spec.md); the "
                              "names' shapes here", "%s: custom op %s's grad op %d (%s on %s): %s", o->name, cu->name,
                              q + 1, ir_ops[gop->kind].name, ins, err);
        }
        ir_op *no = &g->op[op];
        no->phase = IR_PH_BWD;
        no->fwd = c->fwd;
        no->block = g->op[c->fwd].block;
        no->rep = g->op[c->fwd].rep;
        for (int k = 0; k < gop->nout; k++) name[n] = gop->out[k], id[n++] = g->op[op].out[k];
    }
    for (int k = 0; k < o->nin; k++) {
        if (!c->needs[o->in[k]]) continue;
        char dx[16];
        snprintf(dx, sizeof dx, "dx%d", k + 1);
        int t = -1;
        for (int j = 0; j < n && t < 0; j++)
            if (!strcmp(name[j], dx)) t = id[j];
        if (t < 0)
            return pass_error(g, cu->grad_line, "add an op writing it, or make the input data that needs no gradient",
                              "%s: input %d (%s) of custom op %s needs a gradient, and its grad writes no %s", o->name,
                              k + 1, g->t[o->in[k]].name, cu->name, dx);
        const ir_tensor *xt = &g->t[o->in[k]], *dt = &g->t[t];
        int same = xt->ndim == dt->ndim;
        for (int d = 0; d < xt->ndim && same; d++) same = xt->shape[d] == dt->shape[d];
        if (!same)
            return pass_error(g, cu->grad_line, "dxK must have input K's shape", "%s: custom op %s's grad gives %s "
                              "a shape other than input %d's (%s)", o->name, cu->name, dx, k + 1, xt->name);
        g->t[t].kind = IR_T_GRAD;
        push(c, o->in[k], t);
    }
    return 0;
}

/* A custom op without a backward taking every output's gradient: an
 * error (1) when an output past the first reaches the loss. */
static int custom_outputs_only_1(agctx *c, const ir_op *o)
{
    for (int k = 1; k < o->nout; k++)
        if (c->ncontrib[o->out[k]])
            return pass_error(c->g, o->line, "use output 1 where a gradient must flow, or give the custom op a "
                              "backward that takes every output's gradient (docs/custom-ops.md)",
                              "%s: output %d (%s) of custom op %s reaches the loss, but a custom op's backward "
                              "takes the gradient of output 1 only, unless it takes every output's",
                              o->name, k + 1, c->g->t[o->out[k]].name, c->g->cust[o->iattr[IR_IA_CUSTOM]].name);
    return 0;
}

/* Backward rule of one forward op. */
static int backward(agctx *c, int oi)
{
    ir_graph *g = c->g;
    const ir_op o = g->op[oi];   /* copy: g->op moves as ops are added */
    c->fwd = oi;
    if (o.kind == IR_OP_CUSTOM && g->cust[o.iattr[IR_IA_CUSTOM]].bwd >= 0 && g->cust[o.iattr[IR_IA_CUSTOM]].bwd_all)
        return backward_custom_all(c, &o);
    if (o.kind == IR_OP_CUSTOM && g->cust[o.iattr[IR_IA_CUSTOM]].ngrad > 0) return backward_custom_grad(c, &o);
    if (o.kind == IR_OP_SPLIT) {   /* dx = the outputs' gradients side by side */
        int a[2];
        if (output_grads(c, &o, a)) contribute(c, o.in[0], IR_OP_CONCAT, 2, a);
        return 0;
    }
    int dy = -1;
    if (!(ir_ops[o.kind].flags & OPF_LOSS)) {
        dy = final_grad(c, o.out[0]);
        if (dy < 0)   /* output 1 does not reach the loss; a custom op's others may */
            return o.kind == IR_OP_CUSTOM ? custom_outputs_only_1(c, &o) : 0;
        set_grad(g, o.out[0], dy);
    }
    int x = o.in[0], w = o.nin > 1 ? o.in[1] : -1;
    if (ir_ops[o.kind].bwd >= 0) {   /* the table's rule (ir/ops.h): one op giving input 0's gradient */
        int role[IR_BA_MAX], a[IR_BA_MAX], n = ir_op_bwd_inputs(o.kind, role);
        IR_ASSERT(n >= 0);
        for (int k = 0; k < n; k++)
            a[k] = role[k] == IR_BA_DY ? dy : role[k] == IR_BA_X ? x : role[k] == IR_BA_W ? w : o.out[0];
        contribute(c, x, ir_ops[o.kind].bwd, n, a);
        return 0;
    }
    switch (o.kind) {
    case IR_OP_MATMUL: {
        int a[2] = {dy, w};
        contribute(c, x, IR_OP_MATMUL_NT, 2, a);
        int b[2] = {x, dy};
        contribute(c, w, IR_OP_MATMUL_TN, 2, b);
        break;
    }
    case IR_OP_MATMUL_NT: { /* y[*,k] = x[*,n] w[k,n]^T */
        int a[2] = {dy, w};
        contribute(c, x, IR_OP_MATMUL, 2, a);
        int b[2] = {dy, x};
        contribute(c, w, IR_OP_MATMUL_TN, 2, b);
        break;
    }
    case IR_OP_BIAS_ADD:
        if (c->needs[x]) push(c, x, dy);
        contribute(c, w, IR_OP_BIAS_GRAD, 1, &dy);
        break;
    case IR_OP_ADD_BCAST:
        if (c->needs[x]) push(c, x, dy);
        contribute(c, w, IR_OP_SUM_LEAD, 1, &dy);
        break;
    case IR_OP_EMBEDDING: {
        int a[3] = {x, dy, w};
        contribute(c, w, IR_OP_EMBEDDING_BWD, 3, a);
        break;
    }
    case IR_OP_LAYERNORM: {
        int a[5] = {dy, x, w, o.out[1], o.out[2]};
        contribute(c, x, IR_OP_LAYERNORM_BWD, 5, a);
        int b[4] = {dy, x, o.out[1], o.out[2]};
        int wb[2] = {w, o.in[2]};
        contribute_n(c, 2, wb, IR_OP_LAYERNORM_WGRAD, 4, b);
        break;
    }
    case IR_OP_RMSNORM: {
        int a[4] = {dy, x, w, o.out[1]};
        contribute(c, x, IR_OP_RMSNORM_BWD, 4, a);
        int b[3] = {dy, x, o.out[1]};
        contribute(c, w, IR_OP_RMSNORM_WGRAD, 3, b);
        break;
    }
    case IR_OP_ATTENTION: {
        int a[6] = {dy, o.in[0], o.in[1], o.in[2], o.out[0], o.out[1]};
        contribute_n(c, 3, o.in, IR_OP_ATTENTION_BWD, 6, a);
        break;
    }
    case IR_OP_ATTENTION_VL: {   /* the key lengths (data) take no gradient */
        if (c->needs[o.in[3]])
            return pass_error(g, o.line, "give the key lengths as data (an i32 input), not computed from params",
                              "%s: gradients with respect to the key lengths are not supported", o.name);
        int a[7] = {dy, o.in[0], o.in[1], o.in[2], o.out[0], o.out[1], o.in[3]};
        contribute_n(c, 3, o.in, IR_OP_ATTENTION_VL_BWD, 7, a);
        break;
    }
    case IR_OP_ATTENTION_AB: {   /* q, k, v by attention_ab_bwd; the bias (when it needs one) by attention_dbias */
        int a[7] = {dy, o.in[0], o.in[1], o.in[2], o.out[0], o.out[1], o.in[3]};
        contribute_n(c, 3, o.in, IR_OP_ATTENTION_AB_BWD, 7, a);
        contribute(c, o.in[3], IR_OP_ATTENTION_DBIAS, 7, a);
        break;
    }
    case IR_OP_ADD:
        if (c->needs[x]) push(c, x, dy);
        if (c->needs[w]) push(c, w, dy);
        break;
    case IR_OP_MUL: {   /* da = dy b, db = dy a */
        int a[2] = {dy, w}, b[2] = {dy, x};
        contribute(c, x, IR_OP_MUL, 2, a);
        contribute(c, w, IR_OP_MUL, 2, b);
        break;
    }
    case IR_OP_COPY:
        if (c->needs[x]) push(c, x, dy);
        break;
    case IR_OP_RECYCLE:   /* (its output needs no gradient: not reached) */
        break;
    case IR_OP_CUSTOM: {   /* the backward section's op: dy, then the inputs -> their gradients */
        const ir_custom *cu = &g->cust[o.iattr[IR_IA_CUSTOM]];
        int e = custom_outputs_only_1(c, &o);
        if (e) return e;
        int any = 0;
        for (int k = 0; k < o.nin; k++) any |= c->needs[o.in[k]];
        if (!any) break;
        if (cu->bwd < 0)
            return pass_error(g, o.line, "add `backward = NAME` to the [custom] section, NAME another [custom] section "
                              "computing the inputs' gradients (docs/custom-ops.md)",
                              "%s: a gradient must flow through custom op %s, which has no backward", o.name, cu->name);
        int a[IR_MAXIO + 1];
        a[0] = dy;
        for (int k = 0; k < o.nin; k++) a[1 + k] = o.in[k];
        c->set = 1 + IR_IA_CUSTOM, c->set_val = cu->bwd;
        contribute_n(c, o.nin, o.in, IR_OP_CUSTOM, o.nin + 1, a);
        c->set = 0;
        break;
    }
    case IR_OP_RESHAPE: {   /* dx = dy reshaped back to x's shape */
        int64_t ia[IR_MAXIATTR] = {0};
        ia[IR_IA_RNDIM] = g->t[x].ndim;
        for (int d = 0; d < g->t[x].ndim; d++) ia[IR_IA_RSHAPE + d] = g->t[x].shape[d];
        c->ia = ia;
        contribute(c, x, IR_OP_RESHAPE, 1, &dy);
        c->ia = NULL;
        break;
    }
    case IR_OP_MERGE_HEADS: {   /* dx = dy split again, into the forward's heads */
        c->set = 1 + IR_IA_HEADS, c->set_val = g->t[x].shape[g->t[x].ndim - 2];
        contribute(c, x, IR_OP_SPLIT_HEADS, 1, &dy);
        c->set = 0;
        break;
    }
    case IR_OP_CONCAT: {   /* da, db = dy split where the inputs meet */
        int xs[2] = {x, w};
        c->set = 1 + IR_IA_FIRST, c->set_val = g->t[x].shape[g->t[x].ndim - 1];
        contribute_n(c, 2, xs, IR_OP_SPLIT, 1, &dy);
        c->set = 0;
        break;
    }
    case IR_OP_SLICE:   /* dx = dy at start:stop, zeros elsewhere (start, stop, t: the forward's attributes) */
        if (c->needs[x] && g->t[x].kind == IR_T_PARAM)
            return pass_error(g, o.line, "slice an activation (the param's use, e.g. an embedding lookup's output), "
                              "or give the param the sliced shape", "%s: a slice of param '%s' is not supported "
                              "(its gradient would accumulate over the micro-batches into a padded buffer)", o.name,
                              g->t[x].name);
        contribute(c, x, IR_OP_PAD, 1, &dy);
        break;
    case IR_OP_MSE_LOSS: {
        if (c->needs[w])
            return pass_error(g, o.line, "the second input (targets) must be data, not computed from params",
                              "%s: gradients with respect to the targets are not supported",
                              o.name);
        int a[2] = {x, w};
        contribute(c, x, IR_OP_MSE_BWD, 2, a);
        break;
    }
    case IR_OP_XENT_LOSS: {   /* straight to the logits: the statistics carry no gradient of their own */
        const ir_op *st = &g->op[g->t[o.in[0]].producer];
        IR_ASSERT(st->kind == IR_OP_XENT_STATS && st->out[1] == o.in[1]);
        if (c->needs[st->in[1]])
            return pass_error(g, o.line, "the second input (targets) must be data, not computed from params",
                              "%s: gradients with respect to the targets are not supported", o.name);
        int a[4] = {st->in[0], st->in[1], st->out[0], st->out[1]};
        contribute(c, st->in[0], IR_OP_XENT_VP_BWD, 4, a);
        break;
    }
    case IR_OP_XENT_STATS:   /* differentiated by xent_loss's rule: nothing reaches its outputs */
        break;
    default:
        ir_die(__FILE__, __LINE__, "no backward rule for %s", ir_ops[o.kind].name);
    }
    return 0;
}

/* Give param p a gradient tensor of its own and an optimizer op. */
static void optimizer(agctx *c, int p)
{
    ir_graph *g = c->g;
    int gr = final_grad(c, p);
    if (gr < 0) return;   /* param does not reach the loss: not trained */
    char nm[512];
    if (g->t[gr].grad_of >= 0 && g->t[gr].grad_of != p) {
        /* an identity contribution that is another tensor's gradient */
        snprintf(nm, sizeof nm, "d.%s", g->t[p].name);
        c->fwd = g->t[gr].producer >= 0 ? g->op[g->t[gr].producer].fwd : 0;
        int o = add(c, nm, IR_OP_COPY, 1, &gr);
        gr = g->op[o].out[0];
        g->t[gr].kind = IR_T_GRAD;
    }
    g->t[p].grad = gr;
    g->t[gr].grad_of = p;
    const ir_train *tr = &g->train;
    int in[4] = {p, gr, -1, -1};
    int nin = 2;
    if (tr->optimizer == IR_OP_ADAMW) {
        const ir_tensor *pt = &g->t[p];
        int64_t shape[IR_MAXDIM];
        memcpy(shape, pt->shape, sizeof shape);
        snprintf(nm, sizeof nm, "opt.m.%s", pt->name);
        in[2] = ir_add_tensor(g, nm, IR_F32, IR_T_OPTSTATE, g->t[p].ndim, shape, 0);
        snprintf(nm, sizeof nm, "opt.v.%s", g->t[p].name);
        in[3] = ir_add_tensor(g, nm, IR_F32, IR_T_OPTSTATE, g->t[p].ndim, shape, 0);
        g->t[in[2]].opt_of = p;
        g->t[in[3]].opt_of = p;
        nin = 4;
    }
    snprintf(nm, sizeof nm, "opt.%s", g->t[p].name);
    char err[256];
    int o = ir_add_op(g, nm, (ir_opkind)tr->optimizer, nin, in, NULL, 0, err, sizeof err);
    if (o < 0) ir_die(__FILE__, __LINE__, "optimizer %s: %s", nm, err);
    ir_op *op = &g->op[o];
    op->phase = IR_PH_OPT;
    op->fattr[IR_FA_LR] = tr->lr;
    /* decoupled weight decay on matrices only, not on biases and gains */
    op->fattr[IR_FA_WD] = g->t[p].ndim >= 2 ? tr->weight_decay : 0.0;
    op->fattr[IR_FA_BETA1] = tr->beta1;
    op->fattr[IR_FA_BETA2] = tr->beta2;
    op->fattr[IR_FA_EPS] = tr->eps;
}

int pass_autograd(ir_graph *g)
{
    IR_ASSERT(g->train.loss >= 0);
    int nt0 = g->nt, nop0 = g->nop;
    agctx c = {0};
    c.g = g;
    c.contrib = ir_xcalloc((size_t)nt0, sizeof *c.contrib);
    c.ncontrib = ir_xcalloc((size_t)nt0, sizeof *c.ncontrib);
    c.uses = ir_xcalloc((size_t)nt0, sizeof *c.uses);
    c.needs = ir_xcalloc((size_t)nt0, 1);
    c.nmade = ir_xcalloc((size_t)nt0, sizeof *c.nmade);
    int *order = ir_xmalloc(sizeof(int) * (size_t)(nop0 + 1));
    int cyc;
    IR_ASSERT(!ir_topo(g, order, &cyc));
    /* which tensors need a gradient: params and what is computed from them */
    for (int i = 0; i < nt0; i++) c.needs[i] = g->t[i].kind == IR_T_PARAM && !g->t[i].frozen;
    for (int n = 0; n < nop0; n++) {
        const ir_op *o = &g->op[order[n]];
        int any = 0;
        for (int k = 0; k < o->nin; k++) any |= c.needs[o->in[k]];
        if (o->kind == IR_OP_RECYCLE) any = 0;   /* the previous pass's value: no gradient flows back */
        for (int k = 0; k < o->nout; k++) c.needs[o->out[k]] = (char)any;
    }
    for (int i = 0; i < nop0; i++) {
        const ir_op *o = &g->op[i];
        for (int k = 0; k < o->nin; k++) c.uses[o->in[k]]++;
    }
    int rc = 0;
    for (int n = nop0 - 1; n >= 0 && !rc; n--) {
        int oi = order[n];
        /* only ops on a path to the loss: their outputs have contributions */
        if (!(ir_ops[g->op[oi].kind].flags & OPF_LOSS) || g->op[oi].out[0] == g->train.loss)
            rc = backward(&c, oi);
    }
    if (!rc)
        for (int i = 0; i < nt0; i++)
            if (g->t[i].kind == IR_T_PARAM) optimizer(&c, i);
    for (int i = 0; i < nt0; i++) free(c.contrib[i]);
    free(c.contrib);
    free(c.ncontrib);
    free(c.uses);
    free(c.needs);
    free(c.nmade);
    free(order);
    return rc;
}
