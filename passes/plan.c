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
 *     - attention splits heads when q arrives split on its last dim; with
 *       fewer key/value heads than tp (a multiple of them), it splits the
 *       key/value heads kv ways and the query heads of each tp / kv ways
 *       (its backward too: dk and dv are then partial sums);
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

_Thread_local int pass_quiet;
_Thread_local char pass_last_error[512];

int pass_error(const ir_graph *g, int line, const char *hint, const char *fmt, ...)
{
    va_list ap;
    if (pass_quiet) {
        va_start(ap, fmt);
        vsnprintf(pass_last_error, sizeof pass_last_error, fmt, ap);
        va_end(ap);
        return 2;
    }
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

int pass_elsize(const ir_tensor *t) { return t->dtype == IR_BF16 ? 2 : 4; }

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

/* The stages of every op (op-assign): one, or for an update of a param
 * read on several stages each of them, ascending; op's are
 * v[at[op]] .. v[at[op + 1] - 1]. */
typedef struct stages {
    int *at;   /* per op + 1 */
    int *v;    /* stage lists */
} stages;

/* Planner state: the mesh and each tensor's layout on the tp axis. */
enum { LAY_REP = -1, LAY_PARTIAL = -2 };

typedef struct planctx {
    ir_dist *d;
    int dp, tp;         /* mesh */
    int *lay;           /* per tensor: dim split on the tp axis, LAY_REP or LAY_PARTIAL */
    int *tpid;          /* per op: identifier split on the tp axis, IR_REPLICATE, IR_VALUE */
    char *fixed;        /* per op: set by a user constraint */
    stages st;          /* per op: its stages */
} planctx;

/* Set op's trans: nsplit splits (id[j], n[j]), sub-op s on device s of
 * its stage (op_stage; an update read on several stages is replicated on
 * each, outermost). */
static void set_trans(ir_dist *d, const stages *S, int op, int nsplit, const int *id, const int *n,
                      const char *why)
{
    ir_trans *tr = &d->trans[op];
    memset(tr, 0, sizeof *tr);
    tr->nsub = 1;
    const int *st = S->v + S->at[op];
    int nst = S->at[op + 1] - S->at[op];
    IR_ASSERT(nst >= 1 && nsplit + (nst > 1) <= IR_MAXSPLIT);
    if (nst > 1) {
        tr->id[tr->nsplit] = IR_REPLICATE;
        tr->n[tr->nsplit++] = nst;
        tr->nsub = nst;
    }
    for (int j = 0; j < nsplit; j++) {
        if (n[j] == 1 && id[j] == IR_REPLICATE) continue;
        tr->id[tr->nsplit] = id[j];
        tr->n[tr->nsplit++] = n[j];
        tr->nsub *= n[j];
    }
    int per = tr->nsub / nst, sd = d->ndev / d->mesh_pp;
    int *devs = ir_xmalloc(sizeof(int) * (size_t)tr->nsub);
    for (int i = 0; i < tr->nsub; i++)   /* (an op of every stage: on every device) */
        devs[i] = st[0] == IR_STAGE_ALL(d) ? i : st[i / per] % d->mesh_pp * sd + i % per;
    tr->devs = ir_dist_ints(d, devs, tr->nsub);
    free(devs);
    if (d->mesh_pp > 1 && why) {
        /* the stage(s) first: "stage 1: tp: column parallel ..." */
        char w[512];
        int k0 = snprintf(w, sizeof w, "stage%s ", nst > 1 ? "s" : "");
        for (int k = 0; k < nst && k0 < (int)sizeof w; k++)
            k0 += st[k] == IR_STAGE_ALL(d) ? snprintf(w + k0, sizeof w - (size_t)k0, "all")
                                           : snprintf(w + k0, sizeof w - (size_t)k0, "%s%d", k ? "," : "", st[k]);
        if (k0 < (int)sizeof w) snprintf(w + k0, sizeof w - (size_t)k0, ": %s", strcmp(why, "single device") ? why : "whole");
        tr->why = ir_dist_str(d, w);
        return;
    }
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

/* The tp-axis choice for op by the rules in the header comment.  *kv > 0:
 * attention with fewer key/value heads than tp, split on its key/value
 * heads h kv ways and on the query heads of each (r, the identifier
 * returned) tp / kv ways: Megatron's, a key/value head on tp / kv devices,
 * each with its share of the query heads (pass_split cuts (h r d) on r
 * once h is down to one). */
static int choose_tp(planctx *c, int op, char *why, size_t whysz, int *kv)
{
    const ir_graph *g = c->d->g;
    const ir_op *o = &g->op[op];
    const int tp = c->tp;
    int fl = ir_ops[o->kind].flags;
    char nd[200] = "";   /* why a split that applied did not divide */
    *kv = 0;
    if (IR_IS_ATT(o->kind) || IR_IS_ATT_BWD(o->kind)) {
        int h = ir_anno_find(&o->anno, "h"), r = ir_anno_find(&o->anno, "r");
        int64_t eh = h >= 0 ? id_extent(g, op, h) : 0, er = r >= 0 ? id_extent(g, op, r) : 0;
        if (r >= 0 && eh > 1 && eh < tp && tp % eh == 0 && er % (tp / eh) == 0 && !o->anno.id_frozen[h] &&
            !o->anno.id_inner[h] && !o->anno.id_frozen[r]) {
            *kv = (int)eh;
            snprintf(why, whysz, "key/value heads '%s' (%lld) split %lld ways, the %lld query heads of each ('%s') "
                     "%lld ways", o->anno.idname[h], (long long)eh, (long long)eh, (long long)er, o->anno.idname[r],
                     (long long)(tp / eh));
            return r;
        }
    }
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
    /* T5's relative position bias from its table: each device makes its
       heads' bias from its columns of the table (the attention reading it
       splits the same heads), not the whole bias to keep a tp-th of */
    if (o->kind == IR_OP_RELPOS_BIAS && g->t[o->in[0]].kind == IR_T_PARAM) {
        int id = ir_anno_find(&o->anno, "h");
        if (try_split(g, op, id, tp, "heads parallel", nd, sizeof nd)) {
            snprintf(why, whysz, "heads parallel: each device's heads from its columns of the table");
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
    /* sequence parallel (Megatron's): an op of the blocks that would be
       replicated splits its first dim after the batch dim, the sequence of
       a [B, T, C] activation (layernorm, the residual adds, the
       row-parallel biases); the comm pass then derives reduce-scatter and
       all-gather where tp all-reduced, and a tp-th of those activations
       stays on each device */
    if (g->req.seq_par && o->phase != IR_PH_OPT && o->block >= 0) {
        int b = pass_batch_id(g, op);
        for (int j = 0; j < o->anno.ndim[0]; j++) {
            int id = o->anno.dim[0][j].id;
            if (id < 0 || id == b || o->anno.idname[id][0] != '*') continue;
            if (try_split(g, op, id, tp, "sequence parallel", nd, sizeof nd)) {
                snprintf(why, whysz, "sequence parallel: split '%s'", o->anno.idname[id]);
                return id;
            }
            break;
        }
    }
    snprintf(why, whysz, "replicated on the tp axis%s%s", *nd ? ": " : "", nd);
    return IR_REPLICATE;
}

/* Is op's trans (a user constraint's) on the mesh: its last split the tp
 * axis's (an identifier, tp ways), the splits before it the dp axis's? */
static int on_mesh(const planctx *c, int op)
{
    const ir_trans *tr = &c->d->trans[op];
    if (c->tp < 2 || tr->nsplit < 1 || tr->n[tr->nsplit - 1] != c->tp || tr->id[tr->nsplit - 1] < 0) return 0;
    int outer = 1;
    for (int j = 0; j + 1 < tr->nsplit; j++) outer *= tr->n[j];
    return outer == c->dp;
}

/* Record the tp layout of op's outputs (and of params it reads) under its
 * trans.  A param is stored as its first forward reader splits it on the tp
 * axis: the policy's choice, or a constraint's on the mesh (then its update
 * and gradients are a tp-th, as under the policy's split). */
static void record_layout(planctx *c, int op)
{
    const ir_graph *g = c->d->g;
    const ir_op *o = &g->op[op];
    const ir_trans *tr = &c->d->trans[op];
    int b = pass_batch_id(g, op);
    /* the tp identifier: the last non-batch split of the trans (attention split on its
       key/value heads and then their query heads: r, with h before it) */
    int id = IR_REPLICATE, outer = -1;
    for (int j = 0; j < tr->nsplit; j++)
        if (tr->id[j] != b || tr->id[j] < 0) outer = id, id = tr->id[j];
    c->tpid[op] = id;
    for (int k = 0; k < o->nin + o->nout; k++) {
        int t = k < o->nin ? o->in[k] : o->out[k - o->nin];
        int lay = LAY_REP;
        if (id == IR_VALUE) lay = LAY_PARTIAL;
        for (int j = 0; j < o->anno.ndim[k] && id >= 0; j++) {
            const ir_adim *a = &o->anno.dim[k][j];
            /* (h r d) cut on h, then r: tp blocks in order, as a split of the dim */
            if (a->id == id || (outer >= 0 && a->id == outer && a->nsub > 0 && a->sub[0] == id)) lay = j;
        }
        if (k >= o->nin && id >= 0 && o->anno.id_inner[id] && lay == LAY_REP) lay = LAY_PARTIAL;   /* (dk: a sum
                                                                                           over r) */
        if (k >= o->nin && id >= 0 && o->anno.id_reduce[id]) lay = LAY_PARTIAL;
        if (k >= o->nin) c->lay[t] = lay;
        else if (g->t[t].kind == IR_T_PARAM && c->lay[t] == LAY_REP && lay >= 0 && o->phase == IR_PH_FWD &&
                 (!c->fixed[op] || on_mesh(c, op)))
            c->lay[t] = lay;   /* a param is stored as its first reader splits it */
    }
}

/* ---- op-trans constraints (the plan record's trans: PATTERN SPLIT {SPLIT}; SPLIT = IDENT N | replicate N |
   value N) */

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

/* Why identifier id of op o may not be split by a constraint (trans or
 * coshard), or NULL when it may; *hint: o's annotation and what to split
 * (hintsz bytes).  The planner splits an inner member of a merged dim
 * itself (attention's query heads r in (h r d), once the key/value heads h
 * are down to one a device); a constraint names the whole dim's outer
 * identifier instead. */
static const char *split_refused(const ir_op *o, int id, char *hint, size_t hintsz)
{
    ir_buf b = {0};
    ir_anno_print(&o->anno, &b);
    snprintf(hint, hintsz, "%s is `%s`; split a plain or `+` identifier whose size divides", o->name, b.s);
    ir_buf_free(&b);
    if (id < 0) return NULL;
    if (o->anno.id_frozen[id]) return "the op needs it whole (^ in the annotation)";
    if (o->anno.id_inner[id]) return "an inner part of a merged dim, split only by the planner once the dim's outer "
                                     "identifier is down to one part";
    return NULL;
}

/* ---- co-shard ([plan] coshard = PATTERN IDENT K, ...; nnScaler's coshard)
 *
 * Every sub-op of a matching forward op, and of its backward ops, is split
 * K ways more along IDENT, the K pieces on the sub-op's device, run one
 * after another: the comm pass assembles or sums what they make on that
 * device (local copies), so a piece's intermediates need only a K-th of
 * the memory at a time.  Returns 0 or 2 after a message. */
static int coshard(ir_dist *d)
{
    const ir_graph *g = d->g;
    int line = g->req.coshard_line;
    static const char hint[] = "write coshard = OPS IDENT K {, OPS IDENT K}: OPS an op pattern (h.attn, h.fc), IDENT a "
                               "name of its annotation (--dump=graph: *1 for a matmul's rows (tokens), h for "
                               "attention heads), K the pieces per device";
    /* tensors the optimizer reads: accumulated over micro-batches (schedule.c) */
    char *acc = ir_xcalloc((size_t)g->nt + 1, 1);
    for (int i = 0; i < g->nop; i++)
        if (g->op[i].phase == IR_PH_OPT)
            for (int k = 0; k < g->op[i].nin; k++) acc[g->op[i].in[k]] = 1;
    int rc = 0;
    for (int ci = 0; ci < g->req.L.ncos && !rc; ci++) {
        const char *pat = g->req.L.cos[ci].pat, *ident = g->req.L.cos[ci].id;
        const int k = g->req.L.cos[ci].k;
        int hit = 0;
        for (int op = 0; op < g->nop && !rc; op++) {
            const ir_op *o = &g->op[op];
            const ir_op *f = o->phase == IR_PH_FWD ? o : o->phase == IR_PH_BWD && o->fwd >= 0 ? &g->op[o->fwd] : NULL;
            if (!f || f->phase != IR_PH_FWD || !matches(g, f, pat)) continue;
            /* zero 3's copy of a param for the backward (recompute.c) stays whole: every
               piece reads the whole param (and its dp shards are split already) */
            if (o->recomp && o->kind == IR_OP_COPY && g->t[o->in[0]].kind == IR_T_PARAM) continue;
            int id = ir_anno_find(&o->anno, ident);
            if (id < 0) {
                if (o != f) continue;   /* a backward op without it stays whole */
                rc = pass_error(g, line, hint, "[plan] coshard: op %s has no dim '%s'", o->name, ident);
                break;
            }
            /* what a trans constraint may not split, coshard may not either (split.c cuts an
               inner identifier only once its dim's outer one is down to one part) */
            char ahint[600];
            const char *no = split_refused(o, id, ahint, sizeof ahint);
            if (no && o != f) continue;   /* (a backward op: stays whole) */
            if (no) {
                rc = pass_error(g, line, ahint, "[plan] coshard: dim '%s' of op %s may not be split: %s", ident, o->name,
                                no);
                break;
            }
            ir_trans *tr = &d->trans[op];
            if ((tr->cosk || tr->nsplit >= IR_MAXSPLIT) && o != f) continue;
            if (tr->cosk) {
                rc = pass_error(g, line, "name each op in one coshard item", "[plan] coshard: op %s is in pieces "
                                "already (an earlier item names it)", o->name);
                break;
            }
            if (tr->nsplit >= IR_MAXSPLIT) {
                rc = pass_error(g, line, "fewer splits in its trans constraint, or no coshard of it",
                                "[plan] coshard: op %s has %d splits already, the most an op takes", o->name,
                                tr->nsplit);
                break;
            }
            /* a backward op summing over it: the pieces add into its outputs
               when those are accumulated anyway (weight gradients: then they
               need only a piece of the activations); else it stays whole */
            int cacc = 0;
            if (o != f && o->anno.id_reduce[id]) {
                cacc = o->nout > 0;
                for (int q = 0; q < o->nout; q++) cacc &= acc[o->out[q]];
                if (!cacc) continue;
            }
            int64_t ext = id_extent(g, op, id), parts = k;
            for (int j = 0; j < tr->nsplit; j++)
                if (tr->id[j] == id) parts *= tr->n[j];
            if (ext % parts) {
                if (o != f) continue;
                rc = pass_error(g, line, hint, "[plan] coshard: dim '%s' of op %s (%lld) does not split into %lld",
                                ident, o->name, (long long)ext, (long long)parts);
                break;
            }
            if (k == 1) {   /* one piece: checked, nothing to split */
                hit |= o == f;
                continue;
            }
            const int *od = d->ints + tr->devs;
            int *devs = ir_xmalloc(sizeof(int) * (size_t)tr->nsub * (size_t)k);
            for (int i = 0; i < tr->nsub * k; i++) devs[i] = od[i / k];
            tr->id[tr->nsplit] = id;
            tr->n[tr->nsplit++] = k;
            tr->nsub *= k;
            tr->cosk = k;
            tr->cosacc = cacc;
            tr->devs = ir_dist_ints(d, devs, tr->nsub);
            free(devs);
            char w[512];
            snprintf(w, sizeof w, "%s; coshard: '%s' in %d pieces on each device, one after another%s",
                     tr->why ? tr->why : "", ident, k, cacc ? ", adding into the gradient" : "");
            tr->why = ir_dist_str(d, w);
            hit = 1;
        }
        if (!hit && !rc)
            rc = pass_error(g, line, "patterns match forward op names (--dump=graph lists them)",
                            "[plan] coshard: nothing matches '%s'", pat);
    }
    free(acc);
    return rc;
}

/* Apply constraint u to op; returns 0 or 2 after a message. */
static int apply_cons(planctx *c, int op, const ir_optrans *u)
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
                                  "[plan] trans: op %s (%s) cannot be value-split", o->name, ir_op_kind_name(g, o));
            ids[j] = IR_VALUE;
        } else {
            ids[j] = ir_anno_find(&o->anno, u->id[j]);
            char hint[600];
            const char *no = split_refused(o, ids[j], hint, sizeof hint);
            if (ids[j] < 0)
                return pass_error(g, g->req.trans_line, hint, "[plan] trans: op %s has no dim '%s'", o->name, u->id[j]);
            int64_t e = id_extent(g, op, ids[j]);
            if (no)
                return pass_error(g, g->req.trans_line, hint, "[plan] trans: dim '%s' of op %s may not be split: %s",
                                  u->id[j], o->name, no);
            if (e % u->parts[j])
                return pass_error(g, g->req.trans_line, hint, "[plan] trans: dim '%s' of op %s (%lld) does not "
                                  "divide into %d", u->id[j], o->name, (long long)e, u->parts[j]);
        }
    }
    int sd = c->d->op_stage[op] == IR_STAGE_ALL(c->d) ? c->d->ndev : c->d->ndev / c->d->mesh_pp;
    if (total != sd)
        return pass_error(g, g->req.trans_line,
                          c->d->mesh_pp > 1 ? "the product of a constraint's parts is the devices of a stage "
                                              "(devices / pp)"
                                            : "the product of a constraint's parts is the device count",
                          "[plan] trans: the splits for %s make %d sub-ops, but there are %d devices%s", o->name,
                          total, sd, c->d->mesh_pp > 1 ? " per stage" : "");
    snprintf(why, sizeof why, "%s '%s'", c->d->g->req.trans_auto ? "policy auto's op-trans" : "user constraint", u->pat);
    set_trans(c->d, &c->st, op, u->n, ids, u->parts, why);
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

/* The mesh from the policy; returns 0 or 2.  pp stages take devices / pp
 * each; the policy's dp and tp divide a stage's devices. */
static int mesh(ir_dist *d, int *dp, int *tp, int *pp)
{
    const ir_graph *g = d->g;
    const ir_planreq *r = &g->req;
    const char *pol = r->policy ? r->policy : "dp";
    *pp = r->pp > 1 ? r->pp : 1;
    if (d->ndev % *pp) {
        char hint[200];
        snprintf(hint, sizeof hint, "with %d devices choose pp among the divisors of %d", d->ndev, d->ndev);
        return pass_error(g, r->pp_line, hint, "[plan] pp %d does not divide %d devices", *pp, d->ndev);
    }
    int n = d->ndev / *pp;
    if (strcmp(pol, "dp") == 0) *dp = n, *tp = 1;
    else if (strcmp(pol, "tp") == 0) *dp = 1, *tp = n;
    else {
        *dp = r->dp ? r->dp : (r->tp ? n / r->tp : 1);
        *tp = r->tp ? r->tp : n / *dp;
    }
    if (*dp * *tp != n || (r->dp && r->dp != *dp) || (r->tp && r->tp != *tp)) {
        char hint[200];
        snprintf(hint, sizeof hint, "with %d devices%s give dp and tp whose product is %d", d->ndev,
                 *pp > 1 ? " in pp stages" : "", n);
        return pass_error(g, r->policy_line, hint, "[plan] %s: dp %d x tp %d%s does not make %d devices", pol,
                          r->dp ? r->dp : *dp, r->tp ? r->tp : *tp, *pp > 1 ? " x pp" : "", d->ndev);
    }
    return 0;
}

/* ---- op-assign: pipeline stages ([plan] pp, stage; docs/plans.md)
 *
 * Forward ops: a user `stage = ITEM STAGE, ...` first (ITEM: an op pattern
 * as in trans, or a block's repeats `h.0-5`, `h.3`); the repeats of the
 * blocks are otherwise cut into pp runs of consecutive layers, as even as
 * they go (earlier stages take the extra one); other ops go with the latest
 * stage they read from (the embedding on the first, the head and loss on
 * the last).  Backward ops run on their forward op's stage; an update on
 * every stage that reads its param (a tied embedding: first and last),
 * each stage keeping its replica. */

/* Is item "BLOCK.A-B" / "BLOCK.A" / "BLOCK"?  Then *b, *lo, *hi. */
static int block_item(const ir_graph *g, const char *item, int *b, int *lo, int *hi)
{
    for (int k = 0; k < g->nblk; k++) {
        size_t l = strlen(g->blk[k].name);
        if (strncmp(item, g->blk[k].name, l) != 0) continue;
        const char *r = item + l;
        if (!*r) return *b = k, *lo = 0, *hi = g->blk[k].repeat - 1, 1;
        char *e;
        if (*r != '.' || r[1] < '0' || r[1] > '9') continue;
        long a = strtol(r + 1, &e, 10), z = a;
        if (*e == '-') z = strtol(e + 1, &e, 10);
        if (*e) continue;
        return *b = k, *lo = (int)a, *hi = (int)z, 1;
    }
    return 0;
}

/* pp here counts the virtual stages (pp x chunks); virtual stage j runs on
 * stage j % mesh_pp (set_trans). */
static int assign_stages(planctx *c, int pp, const int *order)
{
    ir_dist *d = c->d;
    const ir_graph *g = d->g;
    const ir_planreq *r = &g->req;
    int *st = d->op_stage, nv = d->mesh_v, nphys = d->mesh_pp, all = pp;   /* all: IR_STAGE_ALL */
    for (int i = 0; i < g->nop; i++) st[i] = -1;
    static const char hint1[] = "write stage = ITEM STAGE {, ITEM STAGE}: ITEM an op pattern (lm_head, h.fc) or a "
                                "block's repeats (h.0-5, h.6); STAGE 0 .. pp-1";
    static const char hintv[] = "write stage = ITEM STAGE {, ITEM STAGE}: ITEM an op pattern (lm_head, h.fc) or a "
                                "block's repeats (h.0-5, h.6); STAGE a virtual stage 0 .. pp x chunks - 1 (virtual "
                                "stage j runs on stage j % pp as its chunk j / pp)";
    static const char hintr[] = "write stage = ITEM STAGE {, ITEM STAGE}: ITEM an op pattern (lm_head, h.fc) or a "
                                "block's repeats (h.0-5, h.6); STAGE 0 .. pp-1 (recycling: every pass's copy of the "
                                "op runs there, pass c as the stage's chunk c)";
    /* recycling: pass c's ops are chunk c of their stage (virtual stage c x pp + s) */
    const int rcy = g->train.recycle > 1 && nv > 1;
    const char *hint = rcy ? hintr : nv > 1 ? hintv : hint1;
    const int kmax = rcy ? nphys : pp;
    /* the plan record's op-assign items, in order: a later item overrides an earlier one */
    for (int ai = 0; ai < r->L.nstage; ai++) {
        const ir_assign *it = &r->L.stage[ai];
        char bname[300];   /* (a block item without text: the search's, "h.0-5" in messages) */
        if (!it->item) snprintf(bname, sizeof bname, "%s.%d-%d", g->blk[it->blk].name, it->lo, it->hi);
        const char *name = it->item ? it->item : bname;
        const int isall = it->all, k = isall ? all : it->k;
        if (isall && rcy) return pass_error(g, r->stage_line, hint, "[plan] stage: 'all' with recycle: not built");
        /* (a number is a stage: pp itself is out of range, not 'all', which is the word alone) */
        if (!isall && (k < 0 || k >= kmax))
            return pass_error(g, r->stage_line, hint, "[plan] stage: stage %d of '%s' is not in 0 .. %d (pp %d%s)", k,
                              name, kmax - 1, pp / nv, nv > 1 && !rcy ? " x chunks" : "");
        int b, lo, hi, hit = 0;
        int isblk = it->item ? block_item(g, name, &b, &lo, &hi) : (b = it->blk, lo = it->lo, hi = it->hi, 1);
        if (isblk && (lo < 0 || hi < lo || hi >= g->blk[b].repeat))
            return pass_error(g, r->stage_line, hint, "[plan] stage: block '%s' has repeats 0 .. %d, not %s",
                              g->blk[b].name, g->blk[b].repeat - 1, name);
        for (int i = 0; i < g->nop; i++) {
            const ir_op *o = &g->op[i];
            if (o->phase != IR_PH_FWD) continue;
            const ir_op *mo = o->orig >= 0 ? &g->op[o->orig] : o;   /* (a pass's copy: as its op) */
            if (isblk ? o->block == b && o->rep >= lo && o->rep <= hi : matches(g, mo, name))
                st[i] = isall || !rcy ? k : o->pass * nphys + k, hit = 1;
        }
        if (!hit)
            return pass_error(g, r->stage_line, "patterns match forward op names (--dump=graph lists them); "
                              "blocks are named with their repeats, h.0-5", "[plan] stage: nothing matches '%s'", name);
    }
    /* the blocks' layers, cut evenly */
    int nl = 0, *lb = ir_xcalloc((size_t)g->nblk + 1, sizeof(int));
    for (int b = 0; b < g->nblk; b++) lb[b] = nl, nl += g->blk[b].repeat;
    int nf = 0, kf = 0;
    for (int i = 0; i < g->nop; i++) nf += g->op[i].phase == IR_PH_FWD;
    /* interlaced: the forward ops outside the blocks before the first layer
       (no block op among what they read) or after the last (no block op
       reads what they make) run on every stage, split over all devices */
    char *anc = ir_xcalloc((size_t)g->nop + 1, 1), *desc = ir_xcalloc((size_t)g->nop + 1, 1);
    char *post = ir_xcalloc((size_t)g->nop + 1, 1);   /* on every stage, after staged ops */
    for (int n = 0; n < g->nop; n++) {
        const ir_op *o = &g->op[order[n]];
        for (int k = 0; k < o->nin; k++) {
            int p = g->t[o->in[k]].producer;
            if (p >= 0 && g->op[p].phase == IR_PH_FWD && (g->op[p].block >= 0 || anc[p])) anc[order[n]] = 1;
        }
    }
    for (int n = g->nop - 1; n >= 0; n--) {
        const ir_op *o = &g->op[order[n]];
        for (int k = 0; k < o->nin; k++) {
            int p = g->t[o->in[k]].producer;
            if (p >= 0 && o->phase == IR_PH_FWD && (o->block >= 0 || desc[order[n]])) desc[p] = 1;
        }
    }
    if (g->req.schedule == IR_SCHED_INTERLACED && nv == 1 && nl > 0)   /* (no blocks: nothing is before or after) */
        for (int i = 0; i < g->nop; i++)
            if (g->op[i].phase == IR_PH_FWD && g->op[i].block < 0 && st[i] < 0 && (!anc[i] || !desc[i])) st[i] = all;
    for (int n = 0; n < g->nop; n++) {
        int op = order[n];
        const ir_op *o = &g->op[op];
        if (o->phase != IR_PH_FWD) continue;
        int from = 0;   /* the latest stage it reads from (an op of every stage: none) */
        for (int k = 0; k < o->nin; k++) {
            int p = g->t[o->in[k]].producer;
            if (p >= 0 && st[p] > from && st[p] != all) from = st[p];
            if (p >= 0 && st[op] == all && (post[p] || st[p] != all)) post[op] = 1;
            if (p >= 0 && st[op] != all && post[p]) {
                char on[32] = "";   /* (an op the layers' cut places later: no stage yet) */
                if (st[op] >= 0) snprintf(on, sizeof on, " on stage %d", st[op]);
                free(lb), free(anc), free(desc), free(post);
                return pass_error(g, r->stage_line ? r->stage_line : r->pp_line,
                                  "an op of every stage runs before the pipeline's layers or after them: keep what "
                                  "reads the layers' results and is read by them on a stage",
                                  "[plan] stage: op %s%s reads %s from op %s, which runs on every stage after the "
                                  "layers", o->name, on, g->t[o->in[k]].name, g->op[p].name);
            }
        }
        if (st[op] == all) {
            kf++;
            continue;
        }
        if (st[op] < 0 && rcy) {   /* the pass's layers cut evenly over the stages; the rest follows */
            int base = o->pass * nphys;
            st[op] = o->block >= 0 ? base + (int)((int64_t)(lb[o->block] + o->rep) * nphys / nl) : base;
            if (st[op] < from) st[op] = from;
        }
        if (st[op] < 0) {
            if (o->block >= 0) st[op] = (int)((int64_t)(lb[o->block] + o->rep) * pp / nl);
            else if (nl == 0) st[op] = (int)((int64_t)kf * pp / nf);   /* no blocks: ops cut evenly */
            if (st[op] < from) st[op] = from;
        }
        kf++;
        if (st[op] < from) {
            int p = -1;
            for (int k = 0; k < o->nin && p < 0; k++) {
                int q = g->t[o->in[k]].producer;
                if (q >= 0 && st[q] == from) p = q;
            }
            free(lb), free(anc), free(desc), free(post);
            return pass_error(g, r->stage_line ? r->stage_line : r->pp_line,
                              "a stage reads only from itself and earlier stages: move the op to a later stage or "
                              "its producer to an earlier one",
                              "[plan] stage: op %s on stage %d reads %s from op %s on stage %d", o->name, st[op],
                              g->t[g->op[p].out[0]].name, g->op[p].name, from);
        }
    }
    free(lb);
    free(anc);
    free(desc);
    free(post);
    /* every stage runs something */
    char *busy = ir_xcalloc((size_t)pp, 1);
    int nall = 0;
    for (int i = 0; i < g->nop; i++)
        if (g->op[i].phase == IR_PH_FWD) {
            if (st[i] == all) nall++;
            else busy[st[i]] = 1;
        }
    if (nall && nv > 1) {
        free(busy);
        return pass_error(g, r->stage_line ? r->stage_line : r->chunks_line,
                          "ops on every stage go with one chunk per stage", "[plan] stage: ops on every stage with "
                          "chunks %d: not built", nv);
    }
    for (int k = 0; k < pp; k++)
        if (!busy[k]) {
            free(busy);
            char h[300];
            if (rcy)
                snprintf(h, sizeof h, "each of the %d passes runs its layers on every stage: pp %d needs at least %d "
                         "layers (block repeats) that read the recycled value, or a [plan] stage for each stage; use "
                         "a smaller pp", nv, nphys, nphys);
            else if (nv > 1)
                snprintf(h, sizeof h, "pp %d x chunks %d needs at least %d layers (block repeats) or a [plan] stage "
                         "for each virtual stage; use fewer chunks or a smaller pp", pp / nv, nv, pp);
            else
                snprintf(h, sizeof h, "pp %d needs at least %d layers (block repeats) or a [plan] stage for each "
                         "stage; use a smaller pp", pp, pp);
            if (rcy)
                return pass_error(g, r->stage_line ? r->stage_line : r->pp_line, h,
                                  "[plan] pp %d with recycle %d: stage %d has no ops in pass %d", nphys, nv, k % nphys,
                                  k / nphys);
            if (nv > 1)
                return pass_error(g, r->stage_line ? r->stage_line : r->pp_line, h,
                                  "[plan] pp %d x chunks %d: virtual stage %d has no ops", pp / nv, nv, k);
            return pass_error(g, r->stage_line ? r->stage_line : r->pp_line, h, "[plan] pp %d: stage %d has no ops",
                              pp, k);
        }
    free(busy);
    /* backward ops with their forward op; updates where their param is read
       (the forward readers of each tensor, CSR) */
    int *pr0 = ir_xcalloc((size_t)g->nt + 2, sizeof(int)), *pr, *fill;
    for (int j = 0; j < g->nop; j++)
        if (g->op[j].phase == IR_PH_FWD)
            for (int k = 0; k < g->op[j].nin; k++) pr0[g->op[j].in[k] + 1]++;
    for (int t = 0; t < g->nt; t++) pr0[t + 1] += pr0[t];
    pr = ir_xmalloc(sizeof(int) * ((size_t)pr0[g->nt] + 1));
    fill = ir_xcalloc((size_t)g->nt + 1, sizeof(int));
    for (int j = 0; j < g->nop; j++)
        if (g->op[j].phase == IR_PH_FWD)
            for (int k = 0; k < g->op[j].nin; k++) pr[pr0[g->op[j].in[k]] + fill[g->op[j].in[k]]++] = j;
    free(fill);
    int *at = c->st.at = ir_xcalloc((size_t)g->nop + 2, sizeof(int));
    int cap = g->nop + 1, *v = c->st.v = ir_xmalloc(sizeof(int) * (size_t)cap);
    char *on = ir_xcalloc((size_t)pp + 1, 1);
    for (int i = 0; i < g->nop; i++) {
        const ir_op *o = &g->op[i];
        int n0 = at[i], n = n0;
        if (o->phase == IR_PH_BWD) st[i] = o->fwd >= 0 ? st[o->fwd] : 0;
        if (o->phase == IR_PH_BWD && o->kind == IR_OP_ADD && !o->recomp) {
            /* a sum of gradient contributions made on one other stage runs there (one
               transfer of the sum, not one per contribution) */
            int a = g->t[o->in[0]].producer, b = g->t[o->in[1]].producer;
            if (a >= 0 && b >= 0 && st[a] == st[b]) st[i] = st[a];
        }
        if (o->phase == IR_PH_OPT) {
            /* once per stage (device group): the first virtual stage there reading it */
            memset(on, 0, (size_t)pp + 1);
            for (int q = pr0[o->in[0]]; q < pr0[o->in[0] + 1]; q++) on[st[pr[q]]] = 1;
            if (on[all]) {   /* read by ops of every stage: updated on every device, split like them */
                int other = -1;
                for (int k = 0; k < pp && other < 0; k++)
                    if (on[k]) other = k;
                if (other >= 0) {
                    free(on), free(pr0), free(pr);
                    return pass_error(g, r->stage_line ? r->stage_line : r->pp_line,
                                      "put every op reading the param on every stage, or none",
                                      "[plan] stage: param %s is read by ops of every stage and by stage %d: not "
                                      "built", g->t[o->in[0]].name, other);
                }
                st[i] = all;
            }
            for (int k = pp - 1; k >= 0; k--)
                for (int k2 = k - nphys; k2 >= 0 && on[k]; k2 -= nphys) on[k] &= (char)!on[k2];
            if (st[i] != all) st[i] = -1;
            for (int k = 0; k < pp && st[i] != all; k++)
                if (on[k]) {
                    if (st[i] < 0) st[i] = k;
                    if (n + 1 > cap) cap *= 2, v = c->st.v = ir_xrealloc(v, sizeof(int) * (size_t)cap);
                    v[n++] = k;
                }
            if (st[i] < 0) st[i] = 0;
        }
        if (n == n0) {
            if (n + 1 > cap) cap *= 2, v = c->st.v = ir_xrealloc(v, sizeof(int) * (size_t)cap);
            v[n++] = st[i] < 0 ? 0 : st[i];
        }
        at[i + 1] = n;
    }
    free(on);
    free(pr0);
    free(pr);
    return 0;
}

/* One stage: every op on stage 0. */
static void one_stage(planctx *c)
{
    const ir_graph *g = c->d->g;
    c->st.at = ir_xmalloc(sizeof(int) * ((size_t)g->nop + 2));
    c->st.v = ir_xcalloc((size_t)g->nop + 1, sizeof(int));
    for (int i = 0; i <= g->nop; i++) c->st.at[i] = i;
    memset(c->d->op_stage, 0, sizeof(int) * (size_t)g->nop);
}

/* [plan] stage_tp = T0 T1 ...: each stage's tp degree (its dp: the devices of
 * a stage / T); returns 0 (d->stage_tp set, *dp and *tp stage 0's) or 2. */
static int stage_tp(ir_dist *d, int pp, int *dp, int *tp)
{
    const ir_graph *g = d->g;
    const ir_planreq *r = &g->req;
    int sd = d->ndev / pp, line = r->stage_tp_line;
    char hint[240];
    snprintf(hint, sizeof hint, "write stage_tp = T0 .. T%d: each stage's tp degree, a divisor of its %d device%s "
             "(the rest is its dp)", pp - 1, sd, sd == 1 ? "" : "s");
    if (pp < 2) return pass_error(g, line, "stage_tp gives each pipeline stage its own tp: set pp > 1",
                                  "[plan] stage_tp without pp > 1");
    if (r->schedule == IR_SCHED_INTERLACED)
        return pass_error(g, line, "interlaced splits the ops outside the layers over every device, as one tp group: "
                          "use one tp for all stages", "[plan] stage_tp with schedule interlaced: not built");
    int *t = d->stage_tp = ir_xcalloc((size_t)pp, sizeof(int)), n = r->L.nstage_tp;
    for (int k = 0; k < n; k++) {
        const int v = r->L.stage_tp[k];
        if (k == pp) return pass_error(g, line, hint, "[plan] stage_tp: more than pp = %d degrees", pp);
        if (v < 1 || v > sd || sd % v)
            return pass_error(g, line, hint, "[plan] stage_tp: stage %d's tp %d does not divide its %d devices", k, v,
                              sd);
        t[k] = v;
    }
    if (n != pp) return pass_error(g, line, hint, "[plan] stage_tp: %d degrees for %d stages", n, pp);
    *tp = t[0];
    *dp = sd / t[0];
    return 0;
}

int pass_plan(ir_dist *d)
{
    const ir_graph *g = d->g;
    int dp = 1, tp = 1, pp = 1, rc;
    /* one device has one plan: every op whole (verify builds its reference so) */
    if (d->ndev > 1 && g->req.L.nstage_tp && (g->req.tp || g->req.dp))
        return pass_error(g, g->req.stage_tp_line, "stage_tp sets every stage's tp and dp: leave tp and dp out",
                          "[plan] stage_tp with %s", g->req.tp ? "tp" : "dp");
    if (d->ndev > 1 && (rc = mesh(d, &dp, &tp, &pp))) return rc;
    if (d->ndev > 1 && g->req.L.nstage_tp && (rc = stage_tp(d, pp, &dp, &tp))) return rc;
    d->mesh_pp = pp;
    /* model chunks: as given; interleaved without chunks takes 2 */
    int chunks = g->req.chunks ? g->req.chunks : g->req.schedule == IR_SCHED_INTERLEAVED ? 2 : 1;
    const int rcy = g->train.recycle;
    if (pp > 1 && rcy > 1) {   /* recycling: the passes are the stages' chunks */
        if (g->req.chunks)
            return pass_error(g, g->req.chunks_line, "with recycle the passes are each stage's model chunks: leave "
                              "chunks out", "[plan] chunks %d with recycle %d: not built", g->req.chunks, rcy);
        /* (interleaved: chunks of the layers, which the passes already are) */
        if (g->req.schedule != IR_SCHED_1F1B && g->req.schedule != IR_SCHED_GPIPE)
            return pass_error(g, g->req.pp_line, "with recycle the passes are each stage's model chunks: use schedule "
                              "= 1f1b (the passes interleaved: 3f1b), gpipe, or an order",
                              "[plan] schedule %s with recycle %d: not built", g->req.schedule == IR_SCHED_ZBH1 ?
                              "zb-h1" : g->req.schedule == IR_SCHED_KFKB ? "kFkB" : g->req.schedule ==
                              IR_SCHED_INTERLEAVED ? "interleaved" : "interlaced", rcy);
        chunks = rcy;
    }
    d->mesh_v = pp > 1 ? chunks : 1;
    if (d->mesh_v > 1 && (g->req.schedule == IR_SCHED_ZBH1 || g->req.schedule == IR_SCHED_KFKB))
        return pass_error(g, g->req.chunks_line, "chunks go with schedule = interleaved (1f1b), gpipe or an order",
                          "[plan] chunks %d with schedule %s: not built", d->mesh_v,
                          g->req.schedule == IR_SCHED_ZBH1 ? "zb-h1" : "kFkB");
    if (d->ndev > 1 && pp == 1 && g->req.chunks > 1)
        return pass_error(g, g->req.chunks_line, "chunks split each pipeline stage's layers into model chunks: set "
                          "pp > 1", "[plan] chunks %d without pp > 1", g->req.chunks);
    int bdp = dp;   /* (stage_tp: the largest dp of a stage) */
    for (int k = 0; d->stage_tp && k < pp; k++)
        if (d->ndev / pp / d->stage_tp[k] > bdp) bdp = d->ndev / pp / d->stage_tp[k];
    if ((rc = check_batch(d, bdp))) return rc;
    /* the op-trans constraints of the plan record (the spec's trans, or the search's) */
    const ir_optrans *cons = g->req.L.trans;
    int ncons = d->ndev > 1 ? g->req.L.ntrans : 0;
    planctx c = {d, dp, tp, ir_xmalloc(sizeof(int) * ((size_t)g->nt + 1)),
                 ir_xmalloc(sizeof(int) * ((size_t)g->nop + 1)), ir_xcalloc((size_t)g->nop + 1, 1), {NULL, NULL}};
    for (int i = 0; i < g->nt; i++) c.lay[i] = LAY_REP;
    int *order = ir_xmalloc(sizeof(int) * ((size_t)g->nop + 1));
    char *dppart = ir_xcalloc((size_t)g->nt + 1, 1);   /* per tensor: a partial sum on the dp axis */
    int cyc;
    IR_ASSERT(!ir_topo(g, order, &cyc));
    if (pp > 1) rc = assign_stages(&c, pp * d->mesh_v, order);
    else one_stage(&c);
    int *used = ir_xcalloc((size_t)ncons + 1, sizeof(int));
    for (int n = 0; n < g->nop && !rc; n++) {
        int op = order[n];
        const ir_op *o = &g->op[op];
        /* an op of every stage (interlaced) is split over all devices, as by tp */
        const int all = c.st.at && d->op_stage[op] == IR_STAGE_ALL(d);
        /* stage_tp: the op's stage's own dp x tp */
        const int stp = c.st.at && !all && d->stage_tp ? d->stage_tp[d->op_stage[op] % pp] : tp;
        const int ldp = all ? 1 : stp == tp ? dp : d->ndev / pp / stp, ltp = all ? d->ndev : stp;
        int u = -1;
        if (!c.st.at) break;
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
        int ids[2] = {b >= 0 && ldp > 1 ? b : IR_REPLICATE, IR_REPLICATE}, parts[2] = {ldp, ltp};
        /* a linear op without a batch dim over partial sums of the dp axis (a sum of a
           tied param's gradient contributions) stays partial: one reduction of the
           sum, not one per contribution */
        int dpval = 0;
        if (ids[0] == IR_REPLICATE && ldp > 1 && pp == 1 && (ir_ops[o->kind].flags & OPF_LINEAR) &&
            o->phase == IR_PH_BWD) {
            /* (without stages: the partial pieces then sit on the same devices, beside
               the tp split the op takes below; across stages the sum runs after the
               micro-batches, schedule.c) */
            dpval = 1;
            for (int k = 0; k < o->nin; k++) {
                int pr = g->t[o->in[k]].producer;
                dpval &= dppart[o->in[k]] && pr >= 0 && !c.fixed[pr];
            }
            if (dpval) ids[0] = IR_VALUE;
        }
        int kv = 0;
        if (ltp > 1) {
            c.tp = ltp;
            ids[1] = choose_tp(&c, op, tw, sizeof tw, &kv);
            c.tp = tp;
        }
        if (ids[1] >= 0 && ids[1] == ids[0]) {
            ids[1] = IR_REPLICATE;   /* the batch is already split on the dp axis */
            snprintf(tw, sizeof tw, "replicated on the tp axis");
        }
        char zw[200] = "";
        /* (and zero 3's backward copy of a param, recompute.c: its shard, which the
           comm pass then gathers for the backward) */
        int zcopy = o->recomp && o->kind == IR_OP_COPY && g->t[o->in[0]].kind == IR_T_PARAM;
        if ((o->phase == IR_PH_OPT || zcopy) && ldp > 1 && g->req.zero > 0) {
            /* ZeRO: the update (and its state, and under zero 3 its param) on the dp axis,
               along the param's first dim that divides and that tp leaves whole */
            for (int j = 0; j < o->anno.ndim[0] && ids[0] < 0; j++) {
                int id = o->anno.dim[0][j].id;
                if (id >= 0 && id != ids[1] && splittable(g, op, id, ldp)) {
                    ids[0] = id;
                    snprintf(zw, sizeof zw, "zero %d: %s on the dp axis, dim %d (%lld) split %d ways", g->req.zero,
                             zcopy ? "the param's shard, gathered again for the backward" : "the update's shard", j,
                             (long long)id_extent(g, op, id), ldp);
                    if (g->req.zero == 2 && o->phase == IR_PH_OPT && o->nin > 1) d->zgrad[o->in[1]] = 1;
                }
            }
            if (ids[0] < 0)
                snprintf(zw, sizeof zw, "zero %d: no dim of the param divides by dp %d (or tp splits it): replicated",
                         g->req.zero, ldp);
        }
        if (*zw)
            snprintf(why, sizeof why, "%s%s%s", zw, ltp > 1 ? "; tp: " : "", tw);
        else if (dpval)
            snprintf(why, sizeof why, "dp: linear op over partial sums: stays partial%s%s", ltp > 1 ? "; tp: " : "", tw);
        else if (b >= 0 && ldp > 1)
            snprintf(why, sizeof why, "dp: batch dim '%s' (%lld) split %d ways%s%s%s", o->anno.idname[b],
                     (long long)id_extent(g, op, b), ldp,
                     o->anno.id_reduce[b] ? ", a reduction: outputs are partial sums" : "", ltp > 1 ? "; tp: " : "", tw);
        else if (ldp > 1)
            snprintf(why, sizeof why, "dp: no batch dim, replicated on all %d devices%s%s", ldp, ltp > 1 ? "; tp: " : "",
                     tw);
        else
            snprintf(why, sizeof why, "%s%s", ltp > 1 ? "tp: " : "single device", tw);
        if (kv) {   /* the key/value heads kv ways, then the query heads of each ltp / kv ways */
            int id3[3] = {ids[0], ir_anno_find(&o->anno, "h"), ids[1]}, p3[3] = {ldp, kv, ltp / kv};
            set_trans(d, &c.st, op, 3, id3, p3, why);
        } else
            set_trans(d, &c.st, op, 2, ids, parts, why);
        record_layout(&c, op);
        /* its outputs are partial on the dp axis when that split reduces */
        if (ids[0] == IR_VALUE || (ids[0] >= 0 && o->anno.id_reduce[ids[0]]))
            for (int k = 0; k < o->nout; k++) dppart[o->out[k]] = 1;
    }
    d->mesh_dp = dp;
    d->mesh_tp = tp;
    if (!rc && tp > 1 && !d->stage_tp) warn_replicated(&c);
    if (!rc && d->ndev > 1 && g->req.L.ncos) rc = coshard(d);   /* (one device: every op whole, as verify's reference) */
    for (int i = 0; i < ncons && !rc; i++)
        if (!used[i])
            rc = pass_error(g, g->req.trans_line, "patterns match op names (h.fc matches every repeat h.N.fc; * and ? "
                            "are wildcards); --dump=graph lists the ops", "[plan] trans: no op matches '%s'",
                            cons[i].pat);
    free(used);
    free(order);
    free(dppart);
    free(c.lay);
    free(c.tpid);
    free(c.fixed);
    free(c.st.at);
    free(c.st.v);
    return rc;
}
