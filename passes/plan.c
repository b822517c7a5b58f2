/* plan.c -- choose op-trans and op-assign for every op, by policy.
 *
 * The devices form a mesh dp x tp (device = i_dp * tp + i_tp).  Every op gets
 * at most two nested splits, one per mesh axis:
 *
 *   dp axis: the annotation identifier at the op's batch dim, or replicate.
 *   tp axis (policy tp / hybrid): chosen by layout propagation in
 *            topological order, which reproduces Megatron-LM's layout from
 *            annotations alone:
 *     - a matmul (or matmul_nt) with a param weight whose input is
 *       replicated splits the weight's output-feature identifier (column
 *       parallel); whose input is split on its last dim splits the
 *       contracted identifier (row parallel: the output is a partial sum);
 *     - an embedding splits the vocabulary (a reduction: partial rows);
 *     - attention splits heads when q arrives split on its last dim;
 *     - other ops follow a split input on the same identifier; linear ops
 *       (add, copy) whose inputs are all partial sums stay partial (value
 *       split); ops whose split dims are frozen (layernorm, softmax,
 *       cross-entropy) are replicated;
 *     - a backward op splits the identifier of the same name as its forward
 *       op; an optimizer update splits the dim its param is split on.
 *
 * User constraints ([plan] trans = PATTERN SPLIT..., docs/plans.md) override
 * the choice for the ops they match, as a complete op-trans over all
 * devices.  Nothing here inserts communication: passes/comm.c derives it.
 */
#include <fnmatch.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

int pass_error(const ir_graph *g, int line, const char *hint, const char *fmt, ...)
{
    va_list ap;
    if (line > 0) fprintf(stderr, "%s:%d: error: ", g->file ? g->file : "?", line);
    else fprintf(stderr, "%s: error: ", g->file ? g->file : "?");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    /* quote the line, as the frontend does (the file was read once already) */
    FILE *f = line > 0 && g->file ? fopen(g->file, "r") : NULL;
    if (f) {
        char buf[256];
        int n = 1, at_start = 1;
        while (fgets(buf, sizeof buf, f)) {
            if (at_start && n == line) {
                size_t l = strcspn(buf, "\r\n");
                char *p = buf;
                while (*p == ' ' || *p == '\t') p++, l--;
                fprintf(stderr, "  %.*s%s\n", (int)l, p, strchr(buf, '\n') ? "" : "...");
                break;
            }
            at_start = strchr(buf, '\n') != NULL;
            n += at_start;
        }
        fclose(f);
    }
    if (hint) fprintf(stderr, "  hint: %s\n", hint);
    return 2;
}

int pass_elsize(const ir_tensor *t) { return t->dtype == IR_F32 || t->dtype == IR_I32 ? 4 : 4; }

int pass_batch_id(const ir_graph *g, int op)
{
    const ir_op *o = &g->op[op];
    for (int k = 0; k < o->nin + o->nout; k++) {
        const ir_tensor *t = &g->t[k < o->nin ? o->in[k] : o->out[k - o->nin]];
        if (t->batch_dim >= 0) return o->anno.dim[k][t->batch_dim].id;
    }
    return -1;
}

/* Extent of identifier id in op, or -1. */
static int64_t id_extent(const ir_graph *g, int op, int id)
{
    return id >= 0 ? g->op[op].ext[id] : -1;
}

/* Planner state: the mesh and each tensor's layout on the tp axis. */
enum { LAY_REP = -1, LAY_PARTIAL = -2 };

typedef struct planctx {
    ir_dist *d;
    int dp, tp;         /* mesh */
    int *lay;           /* per tensor: dim split on the tp axis, LAY_REP or LAY_PARTIAL */
    int *tpid;          /* per op: identifier split on the tp axis, IR_REPLICATE, IR_VALUE */
    char *fixed;        /* per op: set by a user constraint */
} planctx;

/* Set op's trans: nsplit splits (id[j], n[j]), sub-op s on device s. */
static void set_trans(ir_dist *d, int op, int nsplit, const int *id, const int *n, const char *why)
{
    ir_trans *tr = &d->trans[op];
    memset(tr, 0, sizeof *tr);
    tr->nsub = 1;
    for (int j = 0; j < nsplit; j++) {
        if (n[j] == 1 && id[j] == IR_REPLICATE) continue;
        tr->id[tr->nsplit] = id[j];
        tr->n[tr->nsplit++] = n[j];
        tr->nsub *= n[j];
    }
    int *devs = ir_xmalloc(sizeof(int) * (size_t)tr->nsub);
    for (int i = 0; i < tr->nsub; i++) devs[i] = i;
    tr->devs = ir_dist_ints(d, devs, tr->nsub);
    free(devs);
    tr->why = why ? ir_dist_str(d, why) : NULL;
}

/* Inputs' batch dims must divide by devices x micro-batches. */
static int check_batch(ir_dist *d, int dp)
{
    const ir_graph *g = d->g;
    int64_t parts = (int64_t)dp * g->train.micro_batches;
    for (int i = 0; i < g->nt; i++) {
        const ir_tensor *t = &g->t[i];
        if (t->kind != IR_T_INPUT || t->batch_dim < 0) continue;
        int64_t b = t->shape[t->batch_dim];
        if (b % parts == 0) continue;
        char hint[256];
        snprintf(hint, sizeof hint,
                 "make the batch a multiple of %lld, or use a data-parallel degree and micro_batches whose product "
                 "divides %lld", (long long)parts, (long long)b);
        return pass_error(g, t->line, hint,
                          "batch dim %d of input '%s' (%lld) does not divide by data-parallel devices x micro_batches "
                          "= %d x %lld", t->batch_dim, t->name, (long long)b, dp, (long long)g->train.micro_batches);
    }
    return 0;
}

/* The identifier at dim j of operand k (outer of a merged dim), or -1. */
static int id_at(const ir_op *o, int k, int j)
{
    return j >= 0 && j < o->anno.ndim[k] ? o->anno.dim[k][j].id : -1;
}

/* May identifier id of op be split into n parts? */
static int splittable(const ir_graph *g, int op, int id, int n)
{
    const ir_anno *a = &g->op[op].anno;
    if (id < 0 || a->id_frozen[id] || a->id_inner[id]) return 0;
    int64_t e = id_extent(g, op, id);
    return e > 0 && e % n == 0;
}

/* splittable(), and when only id's size stands in the way, the first such
 * reason in nd ("column parallel would split 'n' (100), which does not
 * divide by tp 4"): plan.txt says why an op that could split did not. */
static int try_split(const ir_graph *g, int op, int id, int n, const char *rule, char *nd, size_t ndsz)
{
    if (splittable(g, op, id, n)) return 1;
    const ir_anno *a = &g->op[op].anno;
    int64_t e = id_extent(g, op, id);
    if (!*nd && id >= 0 && !a->id_frozen[id] && !a->id_inner[id] && e > 0)
        snprintf(nd, ndsz, "%s would split '%s' (%lld), which does not divide by tp %d", rule, a->idname[id],
                 (long long)e, n);
    return 0;
}

/* The tp-axis choice for op by the rules in the header comment. */
static int choose_tp(planctx *c, int op, char *why, size_t whysz)
{
    const ir_graph *g = c->d->g;
    const ir_op *o = &g->op[op];
    const int tp = c->tp;
    int fl = ir_ops[o->kind].flags;
    char nd[200] = "";   /* why a split that applied did not divide */
    if (o->phase == IR_PH_OPT) {
        int j = c->lay[o->in[0]];
        int id = j >= 0 ? id_at(o, 0, j) : -1;
        if (j >= 0 ? try_split(g, op, id, tp, "the param's shard", nd, sizeof nd) : splittable(g, op, id, tp)) {
            snprintf(why, whysz, "update the param's tp shard (dim %d)", j);
            return id;
        }
        snprintf(why, whysz, "param replicated on the tp axis%s%s", *nd ? ": " : "", nd);
        return IR_REPLICATE;
    }
    if (o->phase == IR_PH_BWD && !(fl & OPF_LINEAR) && o->fwd >= 0) {
        int fid = c->tpid[o->fwd];
        if (fid >= 0) {
            int id = ir_anno_find(&o->anno, g->op[o->fwd].anno.idname[fid]);
            if (try_split(g, op, id, tp, "the forward's split", nd, sizeof nd)) {
                snprintf(why, whysz, "backward of %s: split '%s' like the forward", g->op[o->fwd].name,
                         o->anno.idname[id]);
                return id;
            }
        }
    }
    int x = o->in[0];
    if ((o->kind == IR_OP_MATMUL || o->kind == IR_OP_MATMUL_NT) && o->phase == IR_PH_FWD &&
        g->t[o->in[1]].kind == IR_T_PARAM) {
        int last = g->t[x].ndim - 1;
        if (c->lay[x] == last) {
            int id = id_at(o, 0, last);
            if (try_split(g, op, id, tp, "row parallel", nd, sizeof nd)) {
                snprintf(why, whysz, "row parallel: input arrives split on '%s'; output is a partial sum",
                         o->anno.idname[id]);
                return id;
            }
        }
        int id = id_at(o, 2, g->t[o->out[0]].ndim - 1);
        if (try_split(g, op, id, tp, "column parallel", nd, sizeof nd)) {
            snprintf(why, whysz, "column parallel: split output features '%s'", o->anno.idname[id]);
            return id;
        }
    }
    if (o->kind == IR_OP_EMBEDDING && g->t[o->in[1]].kind == IR_T_PARAM) {
        int id = ir_anno_find(&o->anno, "v");
        if (try_split(g, op, id, tp, "vocabulary parallel", nd, sizeof nd)) {
            snprintf(why, whysz, "vocabulary parallel: each shard looks up its rows; output is a partial sum");
            return id;
        }
    }
    if (fl & OPF_LINEAR) {
        int all = 1;
        for (int k = 0; k < o->nin; k++) all &= c->lay[o->in[k]] == LAY_PARTIAL;
        if (all) {
            snprintf(why, whysz, "linear op over partial sums: stays partial");
            return IR_VALUE;
        }
    }
    /* follow an input split on the tp axis */
    for (int k = 0; k < o->nin; k++) {
        int j = c->lay[o->in[k]];
        int id = id_at(o, k, j);
        if (j >= 0 && try_split(g, op, id, tp, "following its input", nd, sizeof nd)) {
            snprintf(why, whysz, "follows '%s' split on '%s'", g->t[o->in[k]].name, o->anno.idname[id]);
            return id;
        }
    }
    snprintf(why, whysz, "replicated on the tp axis%s%s", *nd ? ": " : "", nd);
    return IR_REPLICATE;
}

/* Record the tp layout of op's outputs (and of params it reads) under its trans. */
static void record_layout(planctx *c, int op)
{
    const ir_graph *g = c->d->g;
    const ir_op *o = &g->op[op];
    const ir_trans *tr = &c->d->trans[op];
    int b = pass_batch_id(g, op);
    /* the tp identifier: the last non-batch split of the trans */
    int id = IR_REPLICATE;
    for (int j = 0; j < tr->nsplit; j++)
        if (tr->id[j] != b || tr->id[j] < 0) id = tr->id[j];
    c->tpid[op] = id;
    for (int k = 0; k < o->nin + o->nout; k++) {
        int t = k < o->nin ? o->in[k] : o->out[k - o->nin];
        int lay = LAY_REP;
        if (id == IR_VALUE) lay = LAY_PARTIAL;
        for (int j = 0; j < o->anno.ndim[k] && id >= 0; j++)
            if (o->anno.dim[k][j].id == id) lay = j;
        if (k >= o->nin && id >= 0 && o->anno.id_reduce[id]) lay = LAY_PARTIAL;
        if (k >= o->nin) c->lay[t] = lay;
        else if (g->t[t].kind == IR_T_PARAM && c->lay[t] == LAY_REP && lay >= 0 && o->phase == IR_PH_FWD &&
                 !c->fixed[op])
            c->lay[t] = lay;   /* a param is stored as its first reader splits it */
    }
}

/* ---- user constraints: PATTERN SPLIT {SPLIT} {, ...}; SPLIT = IDENT N | replicate N | value N */

typedef struct ucons {
    char pat[256];       /* op name pattern (fnmatch), or a block-generic name (h.fc) */
    int n;               /* splits */
    char id[IR_MAXSPLIT][16];
    int parts[IR_MAXSPLIT];
} ucons;

/* Does pattern p match op name (or its name with the repeat index removed)? */
static int matches(const ir_graph *g, const ir_op *o, const char *p)
{
    if (fnmatch(p, o->name, 0) == 0) return 1;
    if (o->block < 0 || o->rep < 0) return 0;
    /* h.3.fc -> h.fc */
    char generic[512], rep[32];
    const char *bn = g->blk[o->block].name;
    size_t bl = strlen(bn);
    snprintf(rep, sizeof rep, ".%d.", o->rep);
    if (strncmp(o->name, bn, bl) != 0 || strncmp(o->name + bl, rep, strlen(rep)) != 0) return 0;
    snprintf(generic, sizeof generic, "%s.%s", bn, o->name + bl + strlen(rep));
    return fnmatch(p, generic, 0) == 0;
}

/* Parse the constraint list; returns the count or -1 after a message. */
static int parse_cons(const ir_graph *g, ucons **out)
{
    const char *s = g->req.trans;
    int n = 0, cap = 0;
    *out = NULL;
    static const char hint[] = "write trans = OPS IDENT N [IDENT N]..., e.g. trans = h.fc n 4, h.proj k 4 "
                               "(IDENT: a name of the op's annotation, or replicate / value)";
    while (s && *s) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char item[1024];
        if (len >= sizeof item) return pass_error(g, g->req.trans_line, hint, "[plan] trans: constraint too long"), -1;
        memcpy(item, s, len);
        item[len] = '\0';
        ucons *u = IR_PUSH(*out, n, cap);
        memset(u, 0, sizeof *u);
        char *save, *tok = strtok_r(item, " \t", &save);
        if (!tok) return pass_error(g, g->req.trans_line, hint, "[plan] trans: empty constraint"), -1;
        snprintf(u->pat, sizeof u->pat, "%s", tok);
        while ((tok = strtok_r(NULL, " \t", &save))) {
            char *num = strtok_r(NULL, " \t", &save);
            char *end;
            long v = num ? strtol(num, &end, 10) : 0;
            if (!num || *end || v < 1 || u->n == IR_MAXSPLIT)
                return pass_error(g, g->req.trans_line, hint, "[plan] trans: bad split '%s %s' for %s", tok,
                                  num ? num : "", u->pat), -1;
            snprintf(u->id[u->n], sizeof u->id[0], "%s", tok);
            u->parts[u->n++] = (int)v;
        }
        if (u->n == 0) return pass_error(g, g->req.trans_line, hint, "[plan] trans: '%s' has no split", u->pat), -1;
        s += len + (e != NULL);
    }
    return n;
}

/* Apply constraint u to op; returns 0 or 2 after a message. */
static int apply_cons(planctx *c, int op, const ucons *u)
{
    const ir_graph *g = c->d->g;
    const ir_op *o = &g->op[op];
    int ids[IR_MAXSPLIT], total = 1;
    char why[300];
    for (int j = 0; j < u->n; j++) {
        total *= u->parts[j];
        if (strcmp(u->id[j], "replicate") == 0) ids[j] = IR_REPLICATE;
        else if (strcmp(u->id[j], "value") == 0) {
            if (!(ir_ops[o->kind].flags & OPF_LINEAR))
                return pass_error(g, g->req.trans_line, "value splits apply to linear ops (add, copy)",
                                  "[plan] trans: op %s (%s) cannot be value-split", o->name, ir_ops[o->kind].name);
            ids[j] = IR_VALUE;
        } else {
            ids[j] = ir_anno_find(&o->anno, u->id[j]);
            ir_buf b = {0};
            ir_anno_print(&o->anno, &b);
            char hint[600];
            snprintf(hint, sizeof hint, "%s is `%s`; split a plain or `+` identifier whose size divides", o->name, b.s);
            ir_buf_free(&b);
            if (ids[j] < 0)
                return pass_error(g, g->req.trans_line, hint, "[plan] trans: op %s has no dim '%s'", o->name, u->id[j]);
            int64_t e = id_extent(g, op, ids[j]);
            if (o->anno.id_frozen[ids[j]] || o->anno.id_inner[ids[j]])
                return pass_error(g, g->req.trans_line, hint, "[plan] trans: dim '%s' of op %s may not be split",
                                  u->id[j], o->name);
            if (e % u->parts[j])
                return pass_error(g, g->req.trans_line, hint, "[plan] trans: dim '%s' of op %s (%lld) does not "
                                  "divide into %d", u->id[j], o->name, (long long)e, u->parts[j]);
        }
    }
    if (total != c->d->ndev)
        return pass_error(g, g->req.trans_line, "the product of a constraint's parts is the device count",
                          "[plan] trans: the splits for %s make %d sub-ops, but there are %d devices", o->name,
                          total, c->d->ndev);
    snprintf(why, sizeof why, "user constraint '%s'", u->pat);
    set_trans(c->d, op, u->n, ids, u->parts, why);
    c->fixed[op] = 1;
    return 0;
}

/* Among the forward ops outside blocks: -2 when none splits on the tp axis
 * (*why: the first reason an op did not split for its size, *whyop: that
 * op, or NULL), else the first that splits. */
static int tp_split_op(const planctx *c, int b, int r, const char **why, const char **whyop)
{
    const ir_graph *g = c->d->g;
    *why = *whyop = NULL;
    for (int i = 0; i < g->nop; i++) {
        const ir_op *o = &g->op[i];
        if (o->phase != IR_PH_FWD || o->block != b || (b >= 0 && o->rep != r)) continue;
        if (c->tpid[i] != IR_REPLICATE || c->fixed[i]) return i;   /* a user constraint is a choice */
        const char *w = c->d->trans[i].why, *x = w ? strstr(w, "tp axis: ") : NULL;
        if (!*why && x && strstr(x, "does not divide")) *why = x + strlen("tp axis: "), *whyop = o->name;
    }
    return -2;
}

/* Warn (stderr and d->warnings, which plan.txt shows) about every layer
 * that ends up whole on each device of the tp axis: tp buys nothing there. */
static void warn_replicated(planctx *c)
{
    ir_dist *d = c->d;
    const ir_graph *g = d->g;
    ir_buf w = {0};
    int nblk = 0;
    /* plan.txt names the file without its directory: no absolute paths in outputs */
    const char *file = g->file ? g->file : "?", *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    for (int i = 0; i < g->nop; i++)
        if (g->op[i].block + 1 > nblk) nblk = g->op[i].block + 1;
    /* one pass over the ops: per (block, repeat) whether a forward op splits
       on the tp axis, else the first op whose size stood in the way */
    int *rbase = ir_xcalloc((size_t)nblk + 1, sizeof(int));
    for (int b = 0; b < nblk; b++) rbase[b + 1] = rbase[b] + g->blk[b].repeat;
    char *split = ir_xcalloc((size_t)rbase[nblk] + 1, 1);
    const char **rwhy = ir_xcalloc((size_t)rbase[nblk] + 1, sizeof *rwhy);
    const char **rop = ir_xcalloc((size_t)rbase[nblk] + 1, sizeof *rop);
    for (int i = 0; i < g->nop; i++) {
        const ir_op *o = &g->op[i];
        if (o->phase != IR_PH_FWD || o->block < 0) continue;
        int k = rbase[o->block] + o->rep;
        if (c->tpid[i] != IR_REPLICATE || c->fixed[i]) split[k] = 1;   /* a user constraint is a choice */
        const char *wt = d->trans[i].why, *x = wt ? strstr(wt, "tp axis: ") : NULL;
        if (!rwhy[k] && x && strstr(x, "does not divide")) rwhy[k] = x + strlen("tp axis: "), rop[k] = o->name;
    }
    for (int b = 0; b < nblk; b++) {
        const ir_block *bk = &g->blk[b];
        int first = -1, last = -1, count = 0;
        const char *why = NULL, *wr, *whyop = NULL, *wo;
        for (int r = 0; r < bk->repeat; r++) {
            if (split[rbase[b] + r]) continue;
            wr = rwhy[rbase[b] + r], wo = rop[rbase[b] + r];
            if (first < 0) first = r;
            last = r;
            count++;
            if (!why) why = wr, whyop = wo;
        }
        if (!count) continue;
        char reps[64];
        if (count == bk->repeat) snprintf(reps, sizeof reps, "all %d repeats", count);
        else if (count == last - first + 1) snprintf(reps, sizeof reps, "repeats %d-%d", first, last);
        else snprintf(reps, sizeof reps, "%d of its %d repeats", count, bk->repeat);
        ir_bprintf(&w, "%s:%d: warning: block '%s': %s replicated on the tp axis (tp %d): every device of a tp "
                   "group computes them whole%s%s%s%s%s\n", base, bk->line, bk->name, reps, c->tp,
                   why ? " (" : "", why ? whyop : "", why ? ": " : "", why ? why : "", why ? ")" : "");
    }
    free(rbase);
    free(split);
    free(rwhy);
    free(rop);
    const char *why, *whyop;
    int any = 0;
    for (int i = 0; i < g->nop && !any; i++)
        any = g->op[i].phase == IR_PH_FWD && (c->tpid[i] != IR_REPLICATE || c->fixed[i]);
    if (!any && tp_split_op(c, -1, -1, &why, &whyop) == -2)
        ir_bprintf(&w, "%s: warning: no op is split on the tp axis (tp %d): every device of a tp group computes "
                   "the whole model%s%s%s%s%s\n", base, c->tp, why ? " (" : "", why ? whyop : "",
                   why ? ": " : "", why ? why : "", why ? ")" : "");
    if (w.n) {
        /* on stderr with the spec's path as given */
        for (const char *l = w.s; *l; l = strchr(l, '\n') + 1)
            fprintf(stderr, "%.*s%.*s\n", (int)(base - file), file, (int)strcspn(l, "\n"), l);
        fprintf(stderr, "  hint: choose sizes that divide by tp %d (plan.txt says why each op was not split), "
                        "a smaller tp, or [plan] trans constraints\n", c->tp);
        d->warnings = ir_dist_str(d, w.s);
    }
    ir_buf_free(&w);
}

/* The mesh from the policy; returns 0 or 2. */
static int mesh(ir_dist *d, int *dp, int *tp)
{
    const ir_graph *g = d->g;
    const ir_planreq *r = &g->req;
    const char *pol = r->policy ? r->policy : "dp";
    int n = d->ndev;
    if (strcmp(pol, "dp") == 0) *dp = n, *tp = 1;
    else if (strcmp(pol, "tp") == 0) *dp = 1, *tp = n;
    else {
        *dp = r->dp ? r->dp : (r->tp ? n / r->tp : 1);
        *tp = r->tp ? r->tp : n / *dp;
    }
    if (*dp * *tp != n || (r->dp && r->dp != *dp) || (r->tp && r->tp != *tp)) {
        char hint[200];
        snprintf(hint, sizeof hint, "with %d devices give dp and tp whose product is %d", n, n);
        return pass_error(g, r->policy_line, hint, "[plan] %s: dp %d x tp %d does not make %d devices", pol,
                          r->dp ? r->dp : *dp, r->tp ? r->tp : *tp, n);
    }
    return 0;
}

int pass_plan(ir_dist *d)
{
    const ir_graph *g = d->g;
    int dp = 1, tp = 1, rc;
    /* one device has one plan: every op whole (verify builds its reference so) */
    if (d->ndev > 1 && (rc = mesh(d, &dp, &tp))) return rc;
    if ((rc = check_batch(d, dp))) return rc;
    ucons *cons = NULL;
    int ncons = d->ndev > 1 ? parse_cons(g, &cons) : 0;
    if (ncons < 0) {
        free(cons);
        return 2;
    }
    planctx c = {d, dp, tp, ir_xmalloc(sizeof(int) * ((size_t)g->nt + 1)),
                 ir_xmalloc(sizeof(int) * ((size_t)g->nop + 1)), ir_xcalloc((size_t)g->nop + 1, 1)};
    for (int i = 0; i < g->nt; i++) c.lay[i] = LAY_REP;
    int *order = ir_xmalloc(sizeof(int) * ((size_t)g->nop + 1));
    int cyc;
    IR_ASSERT(!ir_topo(g, order, &cyc));
    int *used = ir_xcalloc((size_t)ncons + 1, sizeof(int));
    for (int n = 0; n < g->nop && !rc; n++) {
        int op = order[n];
        const ir_op *o = &g->op[op];
        int u = -1;
        for (int i = 0; i < ncons && u < 0; i++)
            if (matches(g, o, cons[i].pat)) u = i;
        if (u >= 0) {
            used[u] = 1;
            rc = apply_cons(&c, op, &cons[u]);
            record_layout(&c, op);
            continue;
        }
        char why[300], tw[200] = "";
        int b = pass_batch_id(g, op);
        int ids[2] = {b >= 0 && dp > 1 ? b : IR_REPLICATE, IR_REPLICATE}, parts[2] = {dp, tp};
        if (tp > 1) ids[1] = choose_tp(&c, op, tw, sizeof tw);
        if (ids[1] >= 0 && ids[1] == ids[0]) {
            ids[1] = IR_REPLICATE;   /* the batch is already split on the dp axis */
            snprintf(tw, sizeof tw, "replicated on the tp axis");
        }
        if (b >= 0 && dp > 1)
            snprintf(why, sizeof why, "dp: batch dim '%s' (%lld) split %d ways%s%s%s", o->anno.idname[b],
                     (long long)id_extent(g, op, b), dp,
                     o->anno.id_reduce[b] ? ", a reduction: outputs are partial sums" : "", tp > 1 ? "; tp: " : "", tw);
        else if (dp > 1)
            snprintf(why, sizeof why, "dp: no batch dim, replicated on all %d devices%s%s", dp, tp > 1 ? "; tp: " : "",
                     tw);
        else
            snprintf(why, sizeof why, "%s%s", tp > 1 ? "tp: " : "single device", tw);
        set_trans(d, op, 2, ids, parts, why);
        record_layout(&c, op);
    }
    d->mesh_dp = dp;
    d->mesh_tp = tp;
    if (!rc && tp > 1) warn_replicated(&c);
    for (int i = 0; i < ncons && !rc; i++)
        if (!used[i])
            rc = pass_error(g, g->req.trans_line, "patterns match op names (h.fc matches every repeat h.N.fc; * and ? "
                            "are wildcards); --dump=graph lists the ops", "[plan] trans: no op matches '%s'",
                            cons[i].pat);
    free(used);
    free(order);
    free(cons);
    free(c.lay);
    free(c.tpid);
    free(c.fixed);
    return rc;
}
