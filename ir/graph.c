/* graph.c -- the logical Graph: vTensors and ops, construction with shape
 * inference from annotations, topological order, printer and verifier. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

enum { RT_K_none = -1, IR_OP_NONE = -1 };   /* (ops.h: no kernel, no one-op backward rule) */

const ir_opinfo ir_ops[IR_OP_COUNT] = {
#define OP(e, name, anno, nin, nout, flags, kern, bwd, bargs, cost, args) \
    {name, anno, nin, nout, flags, RT_K_##kern, IR_OP_##bwd, bargs, cost, args},
#include "ops.h"
#undef OP
};

int ir_op_bwd_inputs(int kind, int *role)
{
    static const char *const words[] = {[IR_BA_DY] = "dy", [IR_BA_X] = "x", [IR_BA_W] = "w", [IR_BA_Y] = "y"};
    int n = 0;
    for (const char *p = ir_ops[kind].bargs; *p;) {
        size_t len = strcspn(p, " ");
        int r = -1;
        for (int k = 0; k < 4 && r < 0; k++)
            if (len == strlen(words[k]) && !strncmp(p, words[k], len)) r = k;
        if (r < 0 || n == IR_BA_MAX) return -1;
        role[n++] = r;
        p += len;
        if (*p == ' ' && !*++p) return -1;   /* (a trailing space) */
    }
    return n;
}

void ir_custom_grad_seed(const ir_custom *c, int k, char *buf, size_t n)
{
    if (k < c->nout) snprintf(buf, n, c->nout == 1 ? "dy" : "dy%d", k + 1);
    else if (k < c->nout + c->nin) snprintf(buf, n, "x%d", k - c->nout + 1);
    else snprintf(buf, n, "y%d", k - c->nout - c->nin + 1);
}

int ir_op_lookup(const char *name)
{
    for (int k = 0; k < IR_OP_COUNT; k++)
        if (strcmp(ir_ops[k].name, name) == 0) return k;
    return -1;
}

void ir_graph_init(ir_graph *g)
{
    memset(g, 0, sizeof *g);
    g->seed = 1337;
    g->train.loss = -1;
    g->req.devices = 1;
    g->prof = *ir_profile_find("cpu-host");
}

const char *ir_op_kind_name(const ir_graph *g, const ir_op *o)
{
    if (o->kind == IR_OP_CUSTOM && o->iattr[IR_IA_CUSTOM] >= 0 && o->iattr[IR_IA_CUSTOM] < g->ncust)
        return g->cust[o->iattr[IR_IA_CUSTOM]].name;
    return ir_ops[o->kind].name;
}

void ir_graph_free(ir_graph *g)
{
    for (int i = 0; i < g->npool; i++) free(g->pool[i]);
    free(g->pool);
    free(g->t);
    free(g->op);
    free(g->blk);
    memset(g, 0, sizeof *g);
}

const char *ir_str(ir_graph *g, const char *s)
{
    if (!s) return NULL;
    char **slot = IR_PUSH(g->pool, g->npool, g->poolcap);
    *slot = ir_xstrdup(s);
    return *slot;
}

void *ir_galloc(ir_graph *g, size_t n)
{
    char **slot = IR_PUSH(g->pool, g->npool, g->poolcap);
    *slot = ir_xcalloc(n ? n : 1, 1);
    return *slot;
}

void ir_graph_clone(ir_graph *dst, const ir_graph *src)
{
    *dst = *src;
    dst->pool = NULL, dst->npool = dst->poolcap = 0;
    dst->t = ir_xcalloc((size_t)src->nt + 1, sizeof *dst->t);
    dst->op = ir_xcalloc((size_t)src->nop + 1, sizeof *dst->op);
    dst->blk = ir_xcalloc((size_t)src->nblk + 1, sizeof *dst->blk);
    if (src->nt) memcpy(dst->t, src->t, sizeof *dst->t * (size_t)src->nt);
    if (src->nop) memcpy(dst->op, src->op, sizeof *dst->op * (size_t)src->nop);
    if (src->nblk) memcpy(dst->blk, src->blk, sizeof *dst->blk * (size_t)src->nblk);   /* (none: blk NULL) */
    dst->tcap = src->nt + 1, dst->opcap = src->nop + 1, dst->blkcap = src->nblk + 1;
}

int ir_add_tensor(ir_graph *g, const char *name, ir_dtype dt, ir_tkind kind,
                  int ndim, const int64_t *shape, int line)
{
    IR_ASSERT(ndim >= 0 && ndim <= IR_MAXDIM);
    int64_t numel;
    IR_ASSERT(!ir_shape_numel(ndim, shape, &numel));   /* (checked where the shape was made) */
    ir_tensor *t = IR_PUSH(g->t, g->nt, g->tcap);
    memset(t, 0, sizeof *t);
    t->name = ir_str(g, name);
    t->dtype = dt;
    t->kind = kind;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->batch_dim = -1;
    t->producer = -1;
    t->grad = -1;
    t->grad_of = -1;
    t->opt_of = -1;
    t->line = line;
    return g->nt - 1;
}

int64_t ir_numel(const ir_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

int ir_shape_numel(int ndim, const int64_t *shape, int64_t *n)
{
    *n = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 1 || __builtin_mul_overflow(*n, shape[i], n)) {
            *n = INT64_MAX;
            return 1;
        }
    return *n > IR_MAX_NUMEL;
}

const char *ir_shape_text(int ndim, const int64_t *shape, char *buf, size_t bufsz)
{
    size_t u = 0;
    buf[0] = '\0';
    for (int i = 0; i < ndim && u < bufsz; i++)
        u += (size_t)snprintf(buf + u, bufsz - u, "%s%lld", i ? " x " : "", (long long)shape[i]);
    if (!ndim) snprintf(buf, bufsz, "a scalar");
    return buf;
}

/* Bind annotation identifiers to the inputs' extents; check they agree.
 * ext[id] = extent (or -1 where unbound; ext may come pre-bound from
 * attributes).  Plain dims bind first, then merged dims "(h d)" bind their
 * one unknown member.  Returns 0 or 1 with err. */
static int bind_ids(const ir_graph *g, const ir_anno *a, const int *in, int64_t *ext,
                    char *err, size_t errsz)
{
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < a->nin; k++) {
            const ir_tensor *t = &g->t[in[k]];
            for (int j = 0; j < a->ndim[k]; j++) {
                const ir_adim *d = &a->dim[k][j];
                int64_t e = t->shape[j];
                if (d->id < 0) {
                    if (pass == 0 && e != d->lit) {
                        snprintf(err, errsz, "input %d ('%s') dim %d must be %lld, is %lld",
                                 k + 1, t->name, j, (long long)d->lit, (long long)e);
                        return 1;
                    }
                    continue;
                }
                if (d->nsub) {
                    if (pass == 0) continue;
                    /* a merged dim: at most one unknown member */
                    int ids[3] = {d->id, d->sub[0], d->nsub > 1 ? d->sub[1] : -1};
                    int unk = -1, nunk = 0;
                    int64_t known = 1;
                    for (int q = 0; q <= d->nsub; q++) {
                        if (ext[ids[q]] < 0) unk = ids[q], nunk++;
                        else if (__builtin_mul_overflow(known, ext[ids[q]], &known)) known = INT64_MAX;
                    }
                    if (nunk > 1) {
                        snprintf(err, errsz, "cannot split dim %d of '%s' (%lld) into the merged dims of the "
                                 "annotation: give the size of '%s'", j, t->name, (long long)e, a->idname[d->id]);
                        return 1;
                    }
                    if (nunk == 1 && known > 0 && e % known == 0) ext[unk] = e / known, known = e;
                    if (known != e) {
                        snprintf(err, errsz, "dim %d of '%s' (%lld) does not split into '%s' x ... = %lld", j,
                                 t->name, (long long)e, a->idname[d->id], (long long)known);
                        return 1;
                    }
                    continue;
                }
                if (pass == 1) continue;
                if (ext[d->id] < 0) { ext[d->id] = e; continue; }
                if (ext[d->id] != e) {
                    snprintf(err, errsz, "shape mismatch: dim '%s' is %lld, but dim %d of input %d ('%s') is %lld",
                             a->idname[d->id], (long long)ext[d->id], j, k + 1, t->name, (long long)e);
                    return 1;
                }
            }
        }
    return 0;
}

/* The annotation identifier that carries the batch into this op, or -1.
 * Fails when inputs carry the batch on different identifiers. */
static int batch_id(const ir_graph *g, ir_opkind kind, const ir_anno *a, const int *in, int *id,
                    char *err, size_t errsz)
{
    *id = -1;
    for (int k = 0; k < a->nin; k++) {
        const ir_tensor *t = &g->t[in[k]];
        if (t->batch_dim < 0) continue;
        int b = a->dim[k][t->batch_dim].id;
        if (b < 0 || a->id_frozen[b]) {
            if (kind == IR_OP_RESHAPE)
                snprintf(err, errsz, "reshape keeps the batch dim: the dims of '%s' up to its batch dim (dim %d) "
                         "must stay as they are in shape; merge or split the dims after it", t->name, t->batch_dim);
            else
                snprintf(err, errsz, "the batch dim of '%s' (dim %d) may not be split by this op",
                         t->name, t->batch_dim);
            return 1;
        }
        /* a user op may not sum over the batch (only losses reduce it) */
        int fl = kind == IR_OP_CUSTOM ? OPF_USER : ir_ops[kind].flags;
        if (a->id_reduce[b] && (fl & OPF_USER) && !(fl & OPF_LOSS)) {
            snprintf(err, errsz, "the batch dim of '%s' (dim %d) would be summed over by %s; the batch must stay "
                     "a dim of its own (check batch_dim of the inputs)", t->name, t->batch_dim, ir_ops[kind].name);
            return 1;
        }
        if (*id >= 0 && *id != b) {
            snprintf(err, errsz, "inputs carry the batch on different dims ('%s' vs '%s')",
                     a->idname[*id], a->idname[b]);
            return 1;
        }
        *id = b;
    }
    return 0;
}

int ir_add_op(ir_graph *g, const char *name, ir_opkind kind, int nin,
              const int *in, const char *const *out_names, int line,
              char *err, size_t errsz)
{
    return ir_add_op_attr(g, name, kind, nin, in, out_names, NULL, NULL, line, err, errsz);
}

int ir_reshape_anno(const ir_tensor *x, const int64_t *iattr, char *buf, size_t len, char *err, size_t errsz)
{
    int nd = iattr ? (int)iattr[IR_IA_RNDIM] : 0;
    if (nd < 1 || nd > IR_MAXDIM) {
        snprintf(err, errsz, "reshape needs a shape of 1 to %d dims, got %d", IR_MAXDIM, nd);
        return -1;
    }
    const int64_t *sh = iattr + IR_IA_RSHAPE;
    int64_t nx = ir_numel(x), ny = 1;
    for (int d = 0; d < nd; d++) {
        if (sh[d] < 1) {
            snprintf(err, errsz, "reshape: dim %d of the shape is %lld (extents are >= 1)", d, (long long)sh[d]);
            return -1;
        }
        if (__builtin_mul_overflow(ny, sh[d], &ny)) ny = INT64_MAX;   /* (then not nx: reported below) */
    }
    if (nx != ny) {
        char a[160] = "", b[160] = "";
        for (int d = 0; d < x->ndim; d++) snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? " x " : "",
                                                   (long long)x->shape[d]);
        for (int d = 0; d < nd; d++) snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? " x " : "",
                                              (long long)sh[d]);
        snprintf(err, errsz, "reshape keeps the elements: '%s' has %s = %lld, the shape %s = %lld", x->name, a,
                 (long long)nx, b, (long long)ny);
        return -1;
    }
    /* the leading dims both have (equal extents) are identifiers p0, p1, ...; the rest numbers */
    int k = 0;
    while (k < x->ndim && k < nd && x->shape[k] == sh[k]) k++;
    size_t u = 0;
    for (int side = 0; side < 2; side++) {
        int n = side ? nd : x->ndim;
        for (int d = 0; d < n; d++) {
            if (d < k) u += (size_t)snprintf(buf + u, len - u, "%sp%d", d ? " " : "", d);
            else u += (size_t)snprintf(buf + u, len - u, "%s%lld", d ? " " : "", (long long)(side ? sh[d] : x->shape[d]));
            if (u >= len) return snprintf(err, errsz, "reshape: annotation too long"), -1;
        }
        if (!side) u += (size_t)snprintf(buf + u, len - u, " -> ");
    }
    return 0;
}

int ir_add_op_attr(ir_graph *g, const char *name, ir_opkind kind, int nin,
                   const int *in, const char *const *out_names, const int64_t *iattr,
                   const double *fattr, int line, char *err, size_t errsz)
{
    ir_opinfo ci = ir_ops[kind];   /* a custom op's row: its [custom] section's */
    if (kind == IR_OP_CUSTOM) {
        IR_ASSERT(iattr && iattr[IR_IA_CUSTOM] >= 0 && iattr[IR_IA_CUSTOM] < g->ncust);
        const ir_custom *c = &g->cust[iattr[IR_IA_CUSTOM]];
        ci.name = c->name, ci.anno = c->anno, ci.nin = c->nin, ci.nout = c->nout;
    }
    char rs[512];
    if (kind == IR_OP_RESHAPE && nin == 1) {   /* the annotation of this reshape */
        if (ir_reshape_anno(&g->t[in[0]], iattr, rs, sizeof rs, err, errsz)) return -1;
        ci.anno = rs;
    }
    const ir_opinfo *oi = &ci;
    if (nin != oi->nin) {
        snprintf(err, errsz, "%s takes %d inputs, got %d", oi->name, oi->nin, nin);
        return -1;
    }
    ir_op op;
    memset(&op, 0, sizeof op);
    int ndim[IR_MAXIO];
    for (int k = 0; k < nin; k++) ndim[k] = g->t[in[k]].ndim;
    if (ir_anno_parse(oi->anno, nin, ndim, &op.anno, err, errsz)) return -1;
    if (iattr) memcpy(op.iattr, iattr, sizeof op.iattr);
    if (fattr) memcpy(op.fattr, fattr, sizeof op.fattr);
    int64_t ext[IR_MAXID];
    for (int i = 0; i < IR_MAXID; i++) ext[i] = -1;
    int h = ir_anno_find(&op.anno, "h");
    if ((IR_IS_ATT(kind) || IR_IS_ATT_BWD(kind) || kind == IR_OP_ROPE || kind == IR_OP_ROPE_BWD ||
         kind == IR_OP_SPLIT_HEADS) &&
        h >= 0) {
        if (op.iattr[IR_IA_HEADS] < 1) {
            snprintf(err, errsz, "%s needs heads >= 1", oi->name);
            return -1;
        }
        ext[h] = op.iattr[IR_IA_HEADS];
        int r = ir_anno_find(&op.anno, "r");
        if (r >= 0) {   /* attention: h the key/value heads, r the query heads of each */
            int64_t kv = op.iattr[IR_IA_KV_HEADS] ? op.iattr[IR_IA_KV_HEADS] : op.iattr[IR_IA_HEADS];
            if (kv < 1 || op.iattr[IR_IA_HEADS] % kv) {
                snprintf(err, errsz, "%s: heads (%lld) must be a multiple of kv_heads (%lld)", oi->name,
                         (long long)op.iattr[IR_IA_HEADS], (long long)kv);
                return -1;
            }
            op.iattr[IR_IA_KV_HEADS] = kv;
            ext[h] = kv;
            ext[r] = op.iattr[IR_IA_HEADS] / kv;
        }
    }
    if (kind == IR_OP_XENT_STATS || kind == IR_OP_XENT_VP_BWD) {   /* the logits' (k c): k blocks */
        int kb = ir_anno_find(&op.anno, "k");
        IR_ASSERT(kb >= 0 && op.iattr[IR_IA_XBLOCKS] >= 1);
        ext[kb] = op.iattr[IR_IA_XBLOCKS];
    }
    if (kind == IR_OP_PAD) {   /* t: the forward's */
        int t = ir_anno_find(&op.anno, "t");
        IR_ASSERT(t >= 0 && op.iattr[IR_IA_FULL] >= 1);
        ext[t] = op.iattr[IR_IA_FULL];
    }
    if (kind == IR_OP_SPLIT || kind == IR_OP_CONCAT) {   /* g: the groups of the last dim */
        int gi = ir_anno_find(&op.anno, "g");
        IR_ASSERT(gi >= 0);
        ext[gi] = op.iattr[IR_IA_GROUPS] > 1 ? op.iattr[IR_IA_GROUPS] : 1;
        for (int k = 0; k < oi->nin; k++) {
            const ir_tensor *x = &g->t[in[k]];
            if (x->ndim >= 1 && x->shape[x->ndim - 1] % ext[gi]) {
                snprintf(err, errsz, "groups = %lld does not divide the last dim of '%s' (%lld): each group is "
                         "the last dim / groups columns", (long long)ext[gi], x->name,
                         (long long)x->shape[x->ndim - 1]);
                return -1;
            }
        }
    }
    if (kind == IR_OP_MEAN_BWD) {   /* t: the forward's, which its input does not show */
        int t = ir_anno_find(&op.anno, "t");
        IR_ASSERT(t >= 0 && op.iattr[IR_IA_MEAN_T] >= 1);
        ext[t] = op.iattr[IR_IA_MEAN_T];
    }
    if (kind == IR_OP_RELPOS_BIAS || kind == IR_OP_RELPOS_BIAS_BWD) {   /* t, s from the shape; b (backward) */
        if (op.iattr[IR_IA_RP_T] < 1 || op.iattr[IR_IA_RP_S] < 1 || op.iattr[IR_IA_RP_MAXDIST] < 1) {
            snprintf(err, errsz, "%s needs shape = T S (query and key positions, each >= 1) and max_distance >= 1",
                     oi->name);
            return -1;
        }
        ext[ir_anno_find(&op.anno, "t")] = op.iattr[IR_IA_RP_T];
        ext[ir_anno_find(&op.anno, "s")] = op.iattr[IR_IA_RP_S];
        if (kind == IR_OP_RELPOS_BIAS_BWD) ext[ir_anno_find(&op.anno, "b")] = op.iattr[IR_IA_RP_NB];
    }
    if (bind_ids(g, &op.anno, in, ext, err, errsz)) return -1;
    if (kind == IR_OP_RELPOS_BIAS) {   /* T5's buckets: exact distances below max_exact, then log-spaced */
        int64_t nb = ext[ir_anno_find(&op.anno, "b")], n = op.iattr[IR_IA_RP_BIDIR] ? nb / 2 : nb;
        if (n < 2) {
            snprintf(err, errsz, "the table '%s' has %lld rows (buckets); it needs at least %d (%s)",
                     g->t[in[0]].name, (long long)nb, op.iattr[IR_IA_RP_BIDIR] ? 4 : 2,
                     op.iattr[IR_IA_RP_BIDIR] ? "bidirectional: half of them for each side, half of those exact"
                                              : "half of them for exact distances");
            return -1;
        }
        if (op.iattr[IR_IA_RP_MAXDIST] <= n / 2) {
            snprintf(err, errsz, "max_distance = %lld must exceed the exact distances (%lld: half of "
                     "the %lld buckets%s)", (long long)op.iattr[IR_IA_RP_MAXDIST], (long long)(n / 2),
                     (long long)n, op.iattr[IR_IA_RP_BIDIR] ? " of one side" : "");
            return -1;
        }
        op.iattr[IR_IA_RP_NB] = nb;
    }
    if (kind == IR_OP_CONCAT)   /* c = a + b */
        ext[ir_anno_find(&op.anno, "c")] = ext[ir_anno_find(&op.anno, "a")] + ext[ir_anno_find(&op.anno, "b")];
    if (kind == IR_OP_SLICE || kind == IR_OP_PAD) {   /* s = stop - start, within t */
        int64_t t = ext[ir_anno_find(&op.anno, "t")], a = op.iattr[IR_IA_START], z = op.iattr[IR_IA_STOP];
        if (kind == IR_OP_SLICE && (a < 0 || z <= a || z > t)) {
            snprintf(err, errsz, "start = %lld, stop = %lld: the positions kept must lie within the %lld of '%s' "
                     "(the dim before the last), at least one: 0 <= start < stop <= %lld", (long long)a, (long long)z,
                     (long long)t, g->t[in[0]].name, (long long)t);
            return -1;
        }
        ext[ir_anno_find(&op.anno, "s")] = z - a;
        op.iattr[IR_IA_FULL] = t;
    }
    if (kind == IR_OP_SPLIT) {   /* a = first, b = the rest */
        int64_t cc = ext[ir_anno_find(&op.anno, "c")], a = op.iattr[IR_IA_FIRST];
        if (a < 1 || a >= cc) {
            snprintf(err, errsz, "first = %lld must leave both parts a column at least: 1 <= first < %lld "
                     "(the last dim of '%s'%s)", (long long)a, (long long)cc, g->t[in[0]].name,
                     op.iattr[IR_IA_GROUPS] > 1 ? ", per group" : "");
            return -1;
        }
        ext[ir_anno_find(&op.anno, "a")] = a;
        ext[ir_anno_find(&op.anno, "b")] = cc - a;
    }
    if ((IR_IS_ATT(kind) || IR_IS_ATT_BWD(kind)) && op.iattr[IR_IA_CAUSAL]) {
        int64_t et = ext[ir_anno_find(&op.anno, "t")], es = ext[ir_anno_find(&op.anno, "s")];
        if (et != es) {
            snprintf(err, errsz, "causal attention needs as many keys as queries: q has %lld positions, k and v "
                     "%lld (cross-attention: causal = false)", (long long)et, (long long)es);
            return -1;
        }
    }
    if (kind == IR_OP_ROPE || kind == IR_OP_ROPE_BWD) {   /* the rotation pairs the halves of a head */
        int d = ir_anno_find(&op.anno, "d");
        if (d >= 0 && ext[d] % 2) {
            snprintf(err, errsz, "%s needs an even head size (last dim / heads), got %lld", oi->name,
                     (long long)ext[d]);
            return -1;
        }
    }
    memcpy(op.ext, ext, sizeof op.ext);
    int bid;
    if (batch_id(g, kind, &op.anno, in, &bid, err, errsz)) return -1;
    /* dtype rules: class targets, token ids and key lengths are i32, everything else f32 */
    for (int k = 0; k < nin; k++) {
        int ints = ((kind == IR_OP_CROSS_ENTROPY || kind == IR_OP_XENT_STATS ||
                     kind == IR_OP_XENT_VP_BWD) && k == 1) ||
                   ((kind == IR_OP_EMBEDDING || kind == IR_OP_EMBEDDING_BWD) && k == 0) ||
                   (kind == IR_OP_ATTENTION_VL && k == 3) || (kind == IR_OP_ATTENTION_VL_BWD && k == 6);
        ir_dtype want = ints ? IR_I32 : IR_F32;
        if (g->t[in[k]].dtype != want) {
            snprintf(err, errsz, "input %d ('%s') of %s must be %s, is %s", k + 1,
                     g->t[in[k]].name, oi->name, ir_dtype_name(want), ir_dtype_name(g->t[in[k]].dtype));
            return -1;
        }
    }
    op.name = ir_str(g, name);
    op.kind = kind;
    op.nin = nin;
    op.nout = oi->nout;
    op.line = line;
    op.block = -1;
    op.rep = -1;
    op.fwd = -1;
    op.orig = -1;
    op.phase = (oi->flags & OPF_OPTIM) ? IR_PH_OPT : IR_PH_FWD;
    for (int k = 0; k < nin; k++) op.in[k] = in[k];
    int opid = g->nop;
    for (int k = 0; k < op.nout; k++) {
        const int ko = nin + k;
        int64_t shape[IR_MAXDIM];
        int bd = -1;
        for (int j = 0; j < op.anno.ndim[ko]; j++) {
            const ir_adim *d = &op.anno.dim[ko][j];
            if (d->id < 0) { shape[j] = d->lit; continue; }
            int unbound = ext[d->id] < 0;
            for (int q = 0; q < d->nsub; q++) unbound |= ext[d->sub[q]] < 0;
            if (unbound) {
                snprintf(err, errsz, "output dim '%s' of %s is not bound by any input",
                         op.anno.idname[d->id], oi->name);
                return -1;
            }
            int64_t e = ext[d->id];   /* ir_adim_extent, checked: a merged dim multiplies */
            int ovf = 0;
            for (int q = 0; q < d->nsub; q++) ovf |= __builtin_mul_overflow(e, ext[d->sub[q]], &e);
            shape[j] = ovf ? INT64_MAX : e;
            if (d->id == bid) bd = j;
        }
        int64_t numel;
        if (ir_shape_numel(op.anno.ndim[ko], shape, &numel)) {
            char sh[200];
            snprintf(err, errsz, "output '%s' of %s would be %s%s elements: more than 2^40 (%lld), the most a "
                     "tensor may have", out_names[k], oi->name, ir_shape_text(op.anno.ndim[ko], shape, sh, sizeof sh),
                     numel == INT64_MAX ? " (over 2^63)" : "", (long long)IR_MAX_NUMEL);
            return -1;
        }
        ir_tkind tk = (oi->flags & OPF_LOSS) ? IR_T_LOSS : IR_T_ACT;
        int t = ir_add_tensor(g, out_names[k], IR_F32, tk, op.anno.ndim[ko], shape, line);
        g->t[t].producer = opid;
        g->t[t].batch_dim = bd;
        op.out[k] = t;
    }
    /* losses average: scale = 1 / number of averaged terms */
    if (kind == IR_OP_MSE_LOSS) op.fattr[IR_FA_SCALE] = 1.0 / (double)ir_numel(&g->t[in[0]]);
    if (kind == IR_OP_CROSS_ENTROPY) {
        op.fattr[IR_FA_SCALE] = 1.0 / (double)ir_numel(&g->t[in[1]]);
        int64_t v = g->t[in[0]].shape[g->t[in[0]].ndim - 1];
        if (op.iattr[IR_IA_VOCAB] == 0) op.iattr[IR_IA_VOCAB] = v;
        if (op.iattr[IR_IA_VOCAB] < 1 || op.iattr[IR_IA_VOCAB] > v) {
            snprintf(err, errsz, "vocab = %lld must be between 1 and the logits' last dim (%lld)",
                     (long long)op.iattr[IR_IA_VOCAB], (long long)v);
            return -1;
        }
    }
    if (kind == IR_OP_MEAN) {
        op.iattr[IR_IA_MEAN_T] = ext[ir_anno_find(&op.anno, "t")];
        op.fattr[IR_FA_SCALE] = 1.0 / (double)op.iattr[IR_IA_MEAN_T];
    }
    if (IR_IS_ATT(kind) && op.fattr[IR_FA_SCALE] == 0)   /* (a spec's scale = ... when given) */
        op.fattr[IR_FA_SCALE] = 1.0 / sqrt((double)ext[ir_anno_find(&op.anno, "d")]);
    if (kind == IR_OP_LAYERNORM && op.fattr[IR_FA_LN_EPS] == 0) op.fattr[IR_FA_LN_EPS] = 1e-5;
    *IR_PUSH(g->op, g->nop, g->opcap) = op;
    return opid;
}

int64_t ir_xent_blocks(int64_t v)
{
    int64_t best = 1;
    int bestp = 0;
    for (int64_t d = 2; d <= 64 && d * 64 <= v; d++) {   /* blocks of 64 columns at least */
        if (v % d) continue;
        int p = 0;
        for (int64_t x = d; x % 2 == 0; x /= 2) p++;
        if (p >= bestp) best = d, bestp = p;   /* more factors of 2, then larger */
    }
    return best;
}

int ir_add_cross_entropy(ir_graph *g, const char *name, const int *in, const char *out_name, const int64_t *iattr,
                         const double *fattr, int line, int *stats_op, char *err, size_t errsz)
{
    /* checked as the one op it stands for (the same messages), then taken back */
    const char *one[1] = {out_name};
    int nt0 = g->nt, o = ir_add_op_attr(g, name, IR_OP_CROSS_ENTROPY, 2, in, one, iattr, fattr, line, err, errsz);
    if (o < 0) return -1;
    IR_ASSERT(o == g->nop - 1 && g->nt == nt0 + 1);
    int64_t ia[IR_MAXIATTR];
    double fa[IR_MAXFATTR];
    memcpy(ia, g->op[o].iattr, sizeof ia);
    memcpy(fa, g->op[o].fattr, sizeof fa);
    g->nop--, g->nt--;
    const ir_tensor *lg = &g->t[in[0]];
    ia[IR_IA_XBLOCKS] = ir_xent_blocks(lg->shape[lg->ndim - 1]);
    char sn[512], on[3][512];
    const char *outs[3] = {on[0], on[1], on[2]};
    snprintf(sn, sizeof sn, "%s.stats", name);
    snprintf(on[0], sizeof on[0], "%s.bmax", out_name);
    snprintf(on[1], sizeof on[1], "%s.bsum", out_name);
    snprintf(on[2], sizeof on[2], "%s.btarget", out_name);
    int s = ir_add_op_attr(g, sn, IR_OP_XENT_STATS, 2, in, outs, ia, fa, line, err, errsz);
    if (s < 0) return -1;
    int st[3] = {g->op[s].out[0], g->op[s].out[1], g->op[s].out[2]};
    o = ir_add_op_attr(g, name, IR_OP_XENT_LOSS, 3, st, one, ia, fa, line, err, errsz);
    if (o < 0) return -1;
    *stats_op = s;
    return o;
}

int ir_find_tensor(const ir_graph *g, const char *name)
{
    for (int i = 0; i < g->nt; i++)
        if (strcmp(g->t[i].name, name) == 0) return i;
    return -1;
}

int ir_find_op(const ir_graph *g, const char *name)
{
    for (int i = 0; i < g->nop; i++)
        if (strcmp(g->op[i].name, name) == 0) return i;
    return -1;
}

const char *ir_dtype_name(ir_dtype d)
{
    switch (d) {
    case IR_F32: return "f32";
    case IR_I32: return "i32";
    case IR_BF16: return "bf16";
    }
    return "?";
}

const char *ir_tkind_name(ir_tkind k)
{
    switch (k) {
    case IR_T_INPUT: return "input";
    case IR_T_PARAM: return "param";
    case IR_T_ACT: return "act";
    case IR_T_GRAD: return "grad";
    case IR_T_OPTSTATE: return "optstate";
    case IR_T_LOSS: return "loss";
    }
    return "?";
}

/* Push x onto the min-heap h of n ints. */
void ir_heap_push(int *h, int *n, int x)
{
    int i = (*n)++;
    for (; i > 0 && h[(i - 1) / 2] > x; i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = x;
}

/* Pop the smallest of the min-heap h of n > 0 ints. */
int ir_heap_pop(int *h, int *n)
{
    int top = h[0], x = h[--*n], i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= x) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
    return top;
}

/* Kahn's algorithm, smallest op id first among the ready ones, so the order
 * is deterministic and close to the order ops were added.  Optimizer ops
 * read params that forward ops also read; they are ordered by data only.
 * The ready ops wait in a min-heap and each op's consumers are listed once
 * (CSR, one entry per input that reads one of its outputs): O(ops log ops). */
int ir_topo(const ir_graph *g, int *order, int *cyc)
{
    int *indeg = ir_xcalloc((size_t)g->nop + 1, sizeof *indeg);
    int *done = ir_xcalloc((size_t)g->nop + 1, sizeof *done);
    int *first = ir_xcalloc((size_t)g->nop + 2, sizeof *first);   /* CSR start of each op's consumers */
    int nedge = 0;
    for (int i = 0; i < g->nop; i++)
        for (int k = 0; k < g->op[i].nin; k++) {
            int p = g->t[g->op[i].in[k]].producer;
            if (p >= 0) indeg[i]++, first[p + 1]++, nedge++;
        }
    for (int i = 0; i < g->nop; i++) first[i + 1] += first[i];
    int *cons = ir_xmalloc(sizeof *cons * ((size_t)nedge + 1)), *fill = ir_xcalloc((size_t)g->nop + 1, sizeof *fill);
    for (int i = 0; i < g->nop; i++)
        for (int k = 0; k < g->op[i].nin; k++) {
            int p = g->t[g->op[i].in[k]].producer;
            if (p >= 0) cons[first[p] + fill[p]++] = i;
        }
    int *heap = ir_xmalloc(sizeof *heap * ((size_t)g->nop + 1)), nheap = 0, n = 0;
    for (int i = 0; i < g->nop; i++)
        if (indeg[i] == 0) ir_heap_push(heap, &nheap, i);
    while (nheap > 0) {
        int pick = ir_heap_pop(heap, &nheap);
        done[pick] = 1;
        order[n++] = pick;
        for (int e = first[pick]; e < first[pick + 1]; e++)
            if (--indeg[cons[e]] == 0) ir_heap_push(heap, &nheap, cons[e]);
    }
    int bad = n < g->nop;
    if (bad && cyc)
        for (int i = 0; i < g->nop; i++)
            if (!done[i]) { *cyc = i; break; }
    free(indeg);
    free(done);
    free(first);
    free(cons);
    free(fill);
    free(heap);
    return bad;
}

static void print_shape(const ir_tensor *t, ir_buf *b)
{
    ir_bprintf(b, "[");
    for (int i = 0; i < t->ndim; i++) ir_bprintf(b, "%s%lld", i ? "," : "", (long long)t->shape[i]);
    ir_bprintf(b, "]");
}

void ir_graph_print(const ir_graph *g, ir_buf *b)
{
    ir_bprintf(b, "graph %s seed %llu devices %d\n", g->model ? g->model : "?",
               (unsigned long long)g->seed, g->req.devices);
    for (int i = 0; i < g->nt; i++) {
        const ir_tensor *t = &g->t[i];
        ir_bprintf(b, "  t%-3d %-9s %s %s", i, ir_tkind_name(t->kind), ir_dtype_name(t->dtype), t->name);
        print_shape(t, b);
        if (t->batch_dim >= 0) ir_bprintf(b, " batch=%d", t->batch_dim);
        if (t->grad >= 0) ir_bprintf(b, " grad=t%d", t->grad);
        if (t->kind == IR_T_PARAM) {
            static const char *ik[] = {"none", "zeros", "ones", "const", "normal", "uniform"};
            ir_bprintf(b, " init=%s", ik[t->init]);
            if (t->init >= IR_INIT_CONST) ir_bprintf(b, ":%g", t->init_a);
            if (t->init == IR_INIT_UNIFORM) ir_bprintf(b, ":%g", t->init_b);
        }
        if (t->kind == IR_T_INPUT) {
            if (t->data == IR_DATA_INT) ir_bprintf(b, " data=int:%lld", (long long)t->data_range);
            else if (t->data == IR_DATA_ZEROS) ir_bprintf(b, " data=zeros");
            else ir_bprintf(b, " data=normal");
        }
        ir_bprintf(b, "\n");
    }
    static const char *ph[] = {"fwd", "bwd", "opt"};
    for (int i = 0; i < g->nop; i++) {
        const ir_op *o = &g->op[i];
        ir_bprintf(b, "  op%-3d %s %s %s(", i, ph[o->phase], o->name, ir_op_kind_name(g, o));
        for (int k = 0; k < o->nin; k++) ir_bprintf(b, "%st%d", k ? ", " : "", o->in[k]);
        ir_bprintf(b, ") ->");
        for (int k = 0; k < o->nout; k++) ir_bprintf(b, " t%d", o->out[k]);
        ir_bprintf(b, "  \"");
        ir_anno_print(&o->anno, b);
        ir_bprintf(b, "\"");
        if (o->kind == IR_OP_MSE_LOSS || o->kind == IR_OP_MSE_BWD || o->kind == IR_OP_XENT_LOSS ||
            o->kind == IR_OP_XENT_VP_BWD)
            ir_bprintf(b, " scale=%g", o->fattr[IR_FA_SCALE]);
        if (o->kind == IR_OP_XENT_STATS || o->kind == IR_OP_XENT_LOSS || o->kind == IR_OP_XENT_VP_BWD)
            ir_bprintf(b, " vocab=%lld blocks=%lld", (long long)o->iattr[IR_IA_VOCAB],
                       (long long)o->iattr[IR_IA_XBLOCKS]);
        ir_bprintf(b, "\n");
    }
}

void ir_graph_verify(const ir_graph *g)
{
    for (int i = 0; i < g->nop; i++)
        if (g->op[i].kind == IR_OP_CROSS_ENTROPY)
            ir_die(__FILE__, __LINE__, "op %s: cross_entropy is added by ir_add_cross_entropy (statistics, then loss)",
                   g->op[i].name);
    for (int i = 0; i < g->nt; i++) {
        const ir_tensor *t = &g->t[i];
        if (t->producer >= 0) {
            IR_ASSERT(t->producer < g->nop);
            const ir_op *o = &g->op[t->producer];
            int found = 0;
            for (int k = 0; k < o->nout; k++) found |= o->out[k] == i;
            if (!found) ir_die(__FILE__, __LINE__, "tensor %s: producer %s does not list it", t->name, o->name);
        }
        if (t->batch_dim >= t->ndim) ir_die(__FILE__, __LINE__, "tensor %s: bad batch dim", t->name);
        if (t->grad >= 0) IR_ASSERT(g->t[t->grad].kind == IR_T_GRAD);
    }
    for (int i = 0; i < g->nop; i++) {
        const ir_op *o = &g->op[i];
        if (o->kind == IR_OP_CUSTOM) {
            IR_ASSERT(o->iattr[IR_IA_CUSTOM] >= 0 && o->iattr[IR_IA_CUSTOM] < g->ncust);
            const ir_custom *c = &g->cust[o->iattr[IR_IA_CUSTOM]];
            IR_ASSERT(o->nin == c->nin && o->nout == c->nout);
        } else {
            IR_ASSERT(o->nin == ir_ops[o->kind].nin && o->nout == ir_ops[o->kind].nout);
        }
        for (int k = 0; k < o->nin; k++) IR_ASSERT(o->in[k] >= 0 && o->in[k] < g->nt);
        for (int k = 0; k < o->nout; k++) IR_ASSERT(g->t[o->out[k]].producer == i);
        /* operands agree with the annotation */
        for (int k = 0; k < o->nin + o->nout; k++) {
            const ir_tensor *t = &g->t[k < o->nin ? o->in[k] : o->out[k - o->nin]];
            if (t->ndim != o->anno.ndim[k])
                ir_die(__FILE__, __LINE__, "op %s operand %d: rank %d vs annotation %d", o->name, k,
                       t->ndim, o->anno.ndim[k]);
        }
    }
    int *order = ir_xmalloc(sizeof(int) * (size_t)(g->nop + 1));
    int cyc = -1;
    if (ir_topo(g, order, &cyc)) ir_die(__FILE__, __LINE__, "graph has a cycle at op %s", g->op[cyc].name);
    free(order);
}
