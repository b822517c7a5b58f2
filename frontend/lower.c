/* lower.c -- a checked fe_spec to the forward Graph.
 *
 * In order: [model]; [dims] (each an expression over the dims above it);
 * [block]s; [op] declarations (kind, in, out); the tensor names every
 * section defines (each defined once); inputs and params (block params once
 * per repeat); op instances (block ops once per repeat, names rewritten as
 * below); the instances added to the graph in dependency order, their shapes
 * inferred by ir_add_op; [train], [cluster], [plan].
 *
 * Block unrolling, for block h with repeat L and repeat r:
 *     h.X   ->  h.r.X                  params, ops and op outputs of the block
 *     h.in  ->  the block's `in` tensor (r = 0), h.(r-1).out (r > 0)
 *     OUT   ->  h.(L-1).out            OUT is the block's `out`, used after it
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fe_priv.h"

#define FE_MAX_REPEAT 100000    /* most repeats of one block */
#define FE_MAX_INST   1000000   /* most ops after unrolling */
#define FE_MAX_DEVICES 65536    /* most devices in [cluster] */

/* ---------------------------------------------------------------- state */

/* A [block NAME], checked. */
typedef struct fe_blk {
    const fe_section *sec;  /* its section */
    const char *name;       /* NAME */
    size_t len;             /* strlen(name) */
    int repeat;             /* repeat count */
    const fe_kv *in;        /* `in`: tensor fed to repeat 0 */
    const fe_kv *out;       /* `out`: name of the last repeat's output */
    int has_out;            /* an op of the block writes NAME.out */
    int id;                 /* index in g->blk */
} fe_blk;

/* An [op NAME], checked. */
typedef struct fe_opdecl {
    const fe_section *sec;     /* its section */
    ir_opkind kind;            /* row of ir_ops */
    int nin, nout;             /* operand counts */
    char *in[IR_MAXIO];        /* input names as written */
    char *out[IR_MAXIO];       /* output names as written */
    const fe_kv *in_kv;        /* the `in` key (messages point at it) */
    const fe_kv *out_kv;       /* the `out` key */
    int block;                 /* block it belongs to (index into blk), or -1 */
    int64_t iattr[IR_MAXIATTR];/* attributes (heads, causal, vocab) */
    double fattr[IR_MAXFATTR]; /* attributes (eps) */
    int ndim;                  /* recycle: the recycled tensor's shape (`shape`) */
    int64_t shape[IR_MAXDIM];
} fe_opdecl;

/* One op to add: an [op], or one repeat of a block's op. */
typedef struct fe_inst {
    int decl;                  /* index into ops */
    int rep;                   /* repeat index, or -1 */
    char *name;                /* op name in the graph */
    char *in[IR_MAXIO];        /* input tensor names in the graph */
    char *out[IR_MAXIO];       /* output tensor names in the graph */
    int wait;                  /* inputs whose producer is not added yet */
    int done;                  /* added to the graph */
    int pass;                  /* recycling: the forward pass it runs in (ir_op.pass) */
    int orig;                  /* recycling: for a copy in an earlier pass, the instance it copies, else -1 */
    int op;                    /* its op in the graph, once added */
} fe_inst;

/* A tensor name the spec defines (before unrolling). */
typedef struct fe_name {
    const char *name;          /* as written */
    const char *what;          /* "input", "param", "output of op X" ... */
    int line;                  /* defining line (0: --set) */
    int block;                 /* block it belongs to, or -1 */
} fe_name;

/* Lowering state. */
typedef struct fe_lw {
    const fe_spec *s;          /* the spec */
    ir_graph *g;               /* the graph being built */
    fe_dims dims;              /* [dims] in order and by name */
    fe_blk *blk; int nblk, blkcap;            /* [block]s in file order */
    fe_opdecl *ops; int nops, opcap;          /* [op]s in file order */
    fe_inst *inst; int ninst, instcap;        /* op instances */
    fe_name *names; int nnames, namecap;      /* tensor names as written */
    fe_map name_idx;           /* name as written -> names[] */
    fe_map alias;              /* block out name -> blk[] */
    fe_map blk_idx;            /* block name -> blk[] */
    fe_map blk_pre;            /* each dotted prefix of a block name ("a" of "a.b") -> the first blk[] */
    size_t blk_maxlen;         /* longest block name */
    int *sec_op;               /* per section of the spec: its ops[] (an [op]), else -1 */
    fe_map tensor;             /* graph tensor name -> tensor id */
    fe_map producer;           /* graph tensor name -> inst[] producing it */
    char **strs; int nstrs, strcap;           /* strings owned by the lowering */
    int64_t batch_div;         /* inputs' batch dims divided by this (policy auto's folded dp replicas) */
    int layers;                /* > 0: the blocks' repeats scaled to this many layers in all (policy auto's
                                  folded layers; the search passes only a count every block's repeat
                                  scales to exactly) */
} fe_lw;

/* Keep s until the lowering ends; returns it. */
static char *own(fe_lw *L, char *s)
{
    *IR_PUSH(L->strs, L->nstrs, L->strcap) = s;
    return s;
}

/* printf into a string owned by the lowering. */
static char *fmt(fe_lw *L, const char *f, ...) __attribute__((format(printf, 2, 3)));
static char *fmt(fe_lw *L, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(NULL, 0, f, ap);
    va_end(ap);
    char *p = ir_xmalloc((size_t)n + 1);
    va_start(ap, f);
    vsnprintf(p, (size_t)n + 1, f, ap);
    va_end(ap);
    return own(L, p);
}

/* The section is a [kind ...]. */
static int is_kind(const fe_section *sec, const char *kind) { return strcmp(sec->kind, kind) == 0; }

/* The first (for unnamed kinds: the only) section of a kind, or NULL. */
static const fe_section *section(const fe_spec *s, const char *kind)
{
    for (int i = 0; i < s->nsec; i++)
        if (is_kind(&s->sec[i], kind)) return &s->sec[i];
    return NULL;
}

/* The block name is a member of (its name starts with "BLOCK."), or -1:
 * each prefix of name that ends before a '.' and is no longer than a block
 * name, looked up (blocks do not overlap: at most one matches). */
static int block_of(const fe_lw *L, const char *name)
{
    if (!L->nblk) return -1;
    size_t lim = strnlen(name, L->blk_maxlen + 1);
    char buf[256], *w = lim < sizeof buf ? buf : ir_xmalloc(lim + 1);
    int b = -1;
    for (size_t p = 1; p < lim && b < 0; p++) {
        if (name[p] != '.') continue;
        memcpy(w, name, p);
        w[p] = '\0';
        b = fe_map_get(&L->blk_idx, w);
    }
    if (w != buf) free(w);
    return b;
}

/* Copy the next blank-separated word of *p into w (wsz bytes); returns its
 * length (>= wsz: too long, w holds a prefix), 0 at the end. */
static size_t next_word(const char **p, char *w, size_t wsz)
{
    const char *q = *p;
    while (*q == ' ' || *q == '\t') q++;
    const char *e = q;
    while (*e && *e != ' ' && *e != '\t') e++;
    size_t n = (size_t)(e - q);
    snprintf(w, wsz, "%.*s", (int)(n < wsz ? n : wsz - 1), q);
    *p = e;
    return n;
}

/* ---------------------------------------------------------------- values */

/* Integer key in [min, max], default def when absent. */
static int get_int(fe_lw *L, const fe_section *sec, const char *key, int64_t def,
                   int64_t min, int64_t max, int64_t *v)
{
    const fe_kv *kv = sec ? fe_get(sec, key) : NULL;
    *v = def;
    if (!kv) return 0;
    char err[256], hint[128];
    if (fe_parse_int(kv->val, min, max, v, err, sizeof err)) {
        if (max == INT64_MAX) snprintf(hint, sizeof hint, "%s is a whole number >= %lld", key, (long long)min);
        else snprintf(hint, sizeof hint, "%s is a whole number from %lld to %lld", key, (long long)min, (long long)max);
        return fe_kv_error(L->s, sec, kv, hint, "%s: %s", key, err);
    }
    return 0;
}

/* Rules for float keys. */
enum { FE_ANY, FE_POS, FE_NONNEG, FE_UNIT };

/* Float key obeying rule, default def when absent. */
static int get_float(fe_lw *L, const fe_section *sec, const char *key, double def, int rule, double *v)
{
    const fe_kv *kv = sec ? fe_get(sec, key) : NULL;
    *v = def;
    if (!kv) return 0;
    char err[256];
    if (fe_parse_float(kv->val, v, err, sizeof err))
        return fe_kv_error(L->s, sec, kv, "write a decimal number such as 0.001 or 1e-3", "%s: %s", key, err);
    static const char *const need[] = {"", "> 0", ">= 0", "in [0, 1)"};
    int bad = (rule == FE_POS && !(*v > 0)) || (rule == FE_NONNEG && !(*v >= 0)) ||
              (rule == FE_UNIT && !(*v >= 0 && *v < 1));
    if (bad) return fe_kv_error(L->s, sec, kv, NULL, "%s must be %s, is %g", key, need[rule], *v);
    return 0;
}

/* Key whose value must be one of the NULL-terminated words; *v = index. */
static int get_choice(fe_lw *L, const fe_section *sec, const char *key, const char *const *words,
                      int def, int *v)
{
    const fe_kv *kv = sec ? fe_get(sec, key) : NULL;
    *v = def;
    if (!kv) return 0;
    char hint[256], clip[96];
    size_t used = 0;
    hint[0] = '\0';
    for (int i = 0; words[i]; i++) {
        if (strcmp(words[i], kv->val) == 0) {
            *v = i;
            return 0;
        }
        used += (size_t)snprintf(hint + used, sizeof hint - used, "%s%s", i ? " | " : "", words[i]);
    }
    char msg[300];
    snprintf(msg, sizeof msg, "%s is %s (the only value for now)", key, hint);
    if (words[1]) snprintf(msg, sizeof msg, "%s is one of: %s", key, hint);
    return fe_kv_error(L->s, sec, kv, msg, "unknown %s '%s'", key, fe_clip(kv->val, clip, sizeof clip));
}

/* shape := SIZE (BLANK SIZE)*     SIZE := an expression (expr.c); blanks
 * inside parentheses belong to the SIZE. */
static int parse_shape(fe_lw *L, const fe_section *sec, int *ndim, int64_t *shape)
{
    const fe_kv *kv = fe_get(sec, "shape");
    static const char blanks[] = "a shape lists sizes separated by blanks; write each without blanks, e.g. shape = B 4*C";
    char err[256], hint[256], tok[256], clip[96];
    *ndim = 0;
    const char *p = kv->val;
    for (;;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        const char *start = p;
        int depth = 0;
        while (*p && (depth > 0 || (*p != ' ' && *p != '\t'))) {
            depth += (*p == '(') - (*p == ')');
            p++;
        }
        if (*ndim == IR_MAXDIM)
            return fe_kv_error(L->s, sec, kv, NULL, "shape has more than %d dims", IR_MAXDIM);
        size_t n = (size_t)(p - start);
        char *t = n < sizeof tok ? tok : ir_xmalloc(n + 1);
        memcpy(t, start, n);
        t[n] = '\0';
        int64_t v;
        int bad = fe_eval(t, &L->dims, L->dims.n, &v, err, sizeof err, hint, sizeof hint);
        int lone = bad && (strchr("+*/", t[0]) || strchr("+-*/", t[n - 1]));
        if (t != tok) free(t);
        if (bad) return fe_kv_error(L->s, sec, kv, lone || !hint[0] ? blanks : hint, "shape: %s", err);
        shape[(*ndim)++] = v;
    }
    if (*ndim == 0)
        return fe_kv_error(L->s, sec, kv, "e.g. shape = B D", "empty shape");
    int64_t numel;
    if (ir_shape_numel(*ndim, shape, &numel)) {
        char sh[200];
        return fe_kv_error(L->s, sec, kv, "the runtime holds a tensor of at most 2^40 elements (4 TiB of f32)",
                           "tensor %s is %s%s elements: more than 2^40 (%lld)", fe_clip(sec->name, clip, sizeof clip),
                           ir_shape_text(*ndim, shape, sh, sizeof sh), numel == INT64_MAX ? " (over 2^63)" : "",
                           (long long)IR_MAX_NUMEL);
    }
    return 0;
}

/* A name the rank executables hold (an input's, a param's: `extra` bytes
 * more for what is named after it, its optimizer state opt.m.NAME) within
 * their limit of IR_MAX_NAME bytes.  Returns 0, or 2 after a message. */
static int check_name(fe_lw *L, const fe_section *sec, const char *name, const char *what, size_t extra)
{
    size_t n = strlen(name);
    if (n + extra <= IR_MAX_NAME) return 0;
    char clip[96], hint[160];
    snprintf(hint, sizeof hint, "the rank executables hold names of up to %d bytes%s", IR_MAX_NAME,
             extra ? ", and a param's optimizer state is named opt.m.NAME" : "");
    return fe_error(L->s, sec->line, hint, "%s name '%s' is %zu bytes; at most %zu", what,
                    fe_clip(name, clip, sizeof clip), n, IR_MAX_NAME - extra);
}

/* ---------------------------------------------------------------- [model] [dims] */

/* [model]  name = NAME (default: the file's base name), seed = U64 */
static int lower_model(fe_lw *L)
{
    const fe_section *sec = section(L->s, "model");
    const fe_kv *kv = sec ? fe_get(sec, "name") : NULL;
    char clip[96];
    if (kv) {
        const char *n = kv->val;
        int ok = isalpha((unsigned char)*n) || *n == '_';
        for (const char *q = n; *q && ok; q++) ok = isalnum((unsigned char)*q) || strchr("_.-", *q);
        if (!ok)
            return fe_kv_error(L->s, sec, kv, "a model name is letters, digits, '_', '.' and '-', starting with a letter or '_'",
                               "bad model name '%s'", fe_clip(n, clip, sizeof clip));
        if (strlen(n) > IR_MAX_NAME)
            return fe_kv_error(L->s, sec, kv, "the rank executables hold names of up to 255 bytes",
                               "model name '%s' is %zu bytes; at most %d", fe_clip(n, clip, sizeof clip), strlen(n),
                               IR_MAX_NAME);
        L->g->model = ir_str(L->g, n);
    } else {
        const char *base = strrchr(L->s->file, '/');
        base = base ? base + 1 : L->s->file;
        char *n = fmt(L, "m_%s", base);
        char *dot = strrchr(n, '.');
        if (dot && dot > n + 2) *dot = '\0';
        for (char *q = n + 2; *q; q++)
            if (!(isalnum((unsigned char)*q) || strchr("_.-", *q))) *q = '_';
        /* drop the "m_" unless the base name starts with a digit or is empty */
        int keep = !(isalpha((unsigned char)n[2]) || n[2] == '_');
        if (strlen(n + (keep ? 0 : 2)) > IR_MAX_NAME) n[IR_MAX_NAME + (keep ? 0 : 2)] = '\0';   /* (the runtime's limit) */
        L->g->model = ir_str(L->g, keep ? n : n + 2);
    }
    kv = sec ? fe_get(sec, "seed") : NULL;
    if (kv) {
        char err[256];
        if (fe_parse_u64(kv->val, &L->g->seed, err, sizeof err))
            return fe_kv_error(L->s, sec, kv, "seed is a whole number from 0 to 2^64-1", "seed: %s", err);
    }
    return 0;
}

/* [dims]  NAME = EXPR   (each over literals and the dims above it) */
static int lower_dims(fe_lw *L)
{
    const fe_section *sec = section(L->s, "dims");
    if (!sec) return 0;
    for (int i = 0; i < sec->nkv; i++) {
        fe_dim *d = IR_PUSH(L->dims.d, L->dims.n, L->dims.cap);
        d->name = sec->kv[i].key;
        d->line = sec->kv[i].line;
        fe_map_put(&L->dims.idx, d->name, i);
    }
    char err[256], hint[256];
    for (int i = 0; i < sec->nkv; i++) {
        if (fe_eval(sec->kv[i].val, &L->dims, i, &L->dims.d[i].val, err, sizeof err, hint, sizeof hint))
            return fe_kv_error(L->s, sec, &sec->kv[i], hint[0] ? hint : NULL, "dim %s: %s", sec->kv[i].key, err);
    }
    return 0;
}

/* ---------------------------------------------------------------- [block] [op] */

/* A single tensor name (block in/out). */
static int one_name(fe_lw *L, const fe_section *sec, const fe_kv *kv)
{
    char clip[96];
    if (!fe_is_name(kv->val))
        return fe_kv_error(L->s, sec, kv, "a block has one input and one output, each a tensor name",
                           "'%s' is not a tensor name", fe_clip(kv->val, clip, sizeof clip));
    return 0;
}

/* [block NAME]  repeat = EXPR, in = TENSOR, out = NEWNAME */
static int lower_blocks(fe_lw *L)
{
    char err[256], hint[256], clip[96], clip2[96];
    for (int i = 0; i < L->s->nsec; i++) {
        const fe_section *sec = &L->s->sec[i];
        if (!is_kind(sec, "block")) continue;
        size_t len = strlen(sec->name);
        /* an earlier block inside this one's name, or this one inside an earlier one's: the first */
        int in = block_of(L, sec->name), out = fe_map_get(&L->blk_pre, sec->name);
        int ov = in < 0 ? out : out < 0 ? in : in < out ? in : out;
        if (ov >= 0) {
            const fe_blk *o = &L->blk[ov];
            snprintf(hint, sizeof hint, "blocks do not nest; [block %s] is at line %d",
                     fe_clip(o->name, clip, sizeof clip), o->sec->line);
            return fe_error(L->s, sec->line, hint, "block '%s' overlaps block '%s'",
                            fe_clip(sec->name, clip, sizeof clip), fe_clip(o->name, clip2, sizeof clip2));
        }
        fe_map_put(&L->blk_idx, sec->name, L->nblk);
        for (size_t p = 1; p < len; p++)
            if (sec->name[p] == '.') {
                char *pre = fmt(L, "%.*s", (int)p, sec->name);
                if (fe_map_get(&L->blk_pre, pre) < 0) fe_map_put(&L->blk_pre, pre, L->nblk);
            }
        if (len > L->blk_maxlen) L->blk_maxlen = len;
        fe_blk *b = IR_PUSH(L->blk, L->nblk, L->blkcap);
        b->sec = sec;
        b->name = sec->name;
        b->len = len;
        b->in = fe_get(sec, "in");
        b->out = fe_get(sec, "out");
        const fe_kv *rep = fe_get(sec, "repeat");
        int64_t v;
        if (fe_eval(rep->val, &L->dims, L->dims.n, &v, err, sizeof err, hint, sizeof hint))
            return fe_kv_error(L->s, sec, rep, hint[0] ? hint : NULL, "repeat: %s", err);
        if (v > FE_MAX_REPEAT)
            return fe_kv_error(L->s, sec, rep, NULL, "repeat is %lld; at most %d", (long long)v, FE_MAX_REPEAT);
        b->repeat = (int)v;
        if (one_name(L, sec, b->in) || one_name(L, sec, b->out)) return 2;
        const fe_kv *io[2] = {b->in, b->out};
        for (int k = 0; k < 2; k++)
            if (strncmp(io[k]->val, b->name, len) == 0 && io[k]->val[len] == '.') {
                snprintf(hint, sizeof hint, "inside the block its input is %s.in and its result %s.out; "
                         "`in` and `out` of [block] name tensors outside it", b->name, b->name);
                return fe_kv_error(L->s, sec, io[k], hint, "'%s' is a name inside block %s",
                                   fe_clip(io[k]->val, clip, sizeof clip), b->name);
            }
        ir_block *gb = IR_PUSH(L->g->blk, L->g->nblk, L->g->blkcap);
        gb->name = ir_str(L->g, b->name);
        gb->repeat = b->repeat;
        gb->line = sec->line;
        b->id = L->g->nblk - 1;
    }
    if (L->layers > 0) {   /* folded: every block's repeat scaled by layers / (the spec's layers) */
        int64_t nl = 0;
        for (int b = 0; b < L->nblk; b++) nl += L->blk[b].repeat;
        for (int b = 0; b < L->nblk; b++) {
            int64_t r = (int64_t)L->blk[b].repeat * L->layers;
            IR_ASSERT(nl > 0 && r % nl == 0 && r / nl >= 1);
            L->blk[b].repeat = L->g->blk[L->blk[b].id].repeat = (int)(r / nl);
        }
    }
    return 0;
}

/* The op-table row of declaration d: a custom op's from its [custom]
 * section. */
static ir_opinfo op_info(const fe_lw *L, const fe_opdecl *d)
{
    ir_opinfo oi = ir_ops[d->kind];
    if (d->kind == IR_OP_CUSTOM) {
        const ir_custom *c = &L->g->cust[d->iattr[IR_IA_CUSTOM]];
        oi.name = c->name, oi.anno = c->anno, oi.nin = c->nin, oi.nout = c->nout;
    }
    return oi;
}

/* The operands of an annotation's side (text up to "->" or its end):
 * how many (commas + 1, 0 when blank) and the rank each would have with
 * `*` standing for one dim. */
static int anno_side(const char *p, const char *end, int *rank)
{
    int n = 0, dims = 0, any = 0;
    for (const char *q = p; q < end; q++) {
        if (*q == ',') {
            if (n < IR_MAXIO) rank[n] = dims;
            n++, dims = 0;
        } else if (*q == '(') {   /* a merged dim: one dim */
            dims++, any = 1;
            while (q + 1 < end && *q != ')') q++;
        } else if (*q != ' ' && *q != '\t' && (q == p || q[-1] == ' ' || q[-1] == '\t' || q[-1] == ',')) {
            dims++, any = 1;
        }
    }
    if (!any && n == 0) return 0;
    if (n < IR_MAXIO) rank[n] = dims;
    return n + 1;
}

/* May a custom op's grad = use built-in op kind k?  The ops that need no
 * keys of a spec (heads, first, ...) and are not losses or updates. */
static int grad_kind_ok(int k)
{
    if (k < 0 || k == IR_OP_CUSTOM || k == IR_OP_MSE_BWD || (ir_ops[k].flags & (OPF_LOSS | OPF_OPTIM))) return 0;
    return (ir_ops[k].flags & OPF_ELTW) || k == IR_OP_MATMUL || k == IR_OP_MATMUL_NT || k == IR_OP_MATMUL_TN ||
           k == IR_OP_BIAS_ADD || k == IR_OP_BIAS_GRAD || k == IR_OP_ADD_BCAST || k == IR_OP_SUM_LEAD ||
           k == IR_OP_TRANSPOSE || k == IR_OP_SOFTMAX || k == IR_OP_SOFTMAX_BWD;
}

/* A comma-separated list of names from [p, e) into out[] (at most max, each
 * owned by the graph); their count, or -1 (an empty name, too many). */
static int grad_names(fe_lw *L, const char *p, const char *e, const char **out, int max)
{
    int n = 0;
    while (p < e) {
        const char *c = memchr(p, ',', (size_t)(e - p));
        const char *q = c ? c : e, *a = p, *b = q;
        while (a < b && (*a == ' ' || *a == '\t')) a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
        if (a == b || n == max) return -1;
        char *nm = ir_xmalloc((size_t)(b - a) + 1);
        memcpy(nm, a, (size_t)(b - a));
        nm[b - a] = '\0';
        out[n++] = ir_str(L->g, nm);
        free(nm);
        if (!c) break;
        p = c + 1;
        if (p == e) return -1;   /* (a trailing comma) */
    }
    return n;
}

/* Why grad may not write name o (known[0 .. nseed): the names it reads). */
static const char *grad_taken_why(const char *const *known, int nseed, const char *o)
{
    for (int j = 0; j < nseed; j++)
        if (!strcmp(known[j], o)) return "one of the names grad reads (dy, x1, y1, ...)";
    return "which an op before it already writes (each name is written once)";
}

/* grad = OP; OP; ...: custom op c's backward as built-in ops, each `KIND
 * IN, IN -> OUT, OUT` over the names dy (dy1 .. dym with several outputs),
 * x1 .. xn, y1 .. ym and the outputs before it; dx1 .. dxn are the inputs'
 * gradients (docs/custom-ops.md).  0, or 2 after a message at the key. */
static int parse_grad(fe_lw *L, const fe_section *sec, const fe_kv *kv, ir_custom *c)
{
    char clip[96], hint[1024], w[64];
    const char *known[3 * IR_MAXIO + IR_MAXGRADOPS * IR_MAXIO];
    int nknown = 0;
    for (; nknown < 2 * c->nout + c->nin; nknown++) {   /* dy .., x1 .., y1 .. */
        ir_custom_grad_seed(c, nknown, w, sizeof w);
        known[nknown] = ir_str(L->g, w);
    }
    int nseed = nknown;
    snprintf(hint, sizeof hint, "grad = KIND IN, IN -> OUT; KIND ... with the names dy%s, x1%s, y1%s, the outputs "
             "of the ops before, and dx1%s for the inputs' gradients; KIND a built-in op without keys (e.g. mul, "
             "silu_bwd, matmul_nt), e.g. grad = mul dy, x2 -> dx1; mul dy, x1 -> dx2", c->nout > 1 ? "1 .. dym" : "",
             c->nin > 1 ? " .. xn" : "", c->nout > 1 ? " .. ym" : "", c->nin > 1 ? " .. dxn" : "");
    c->ngrad = 0;
    c->grad_line = kv->line ? kv->line : sec->line;
    for (const char *p = kv->val; *p;) {
        const char *e = strchr(p, ';');
        if (!e) e = p + strlen(p);
        while (p < e && (*p == ' ' || *p == '\t')) p++;
        if (p == e)
            return fe_kv_error(L->s, sec, kv, hint, "custom op '%s': grad has an empty op (two ';' in a row?)",
                               c->name);
        if (c->ngrad == IR_MAXGRADOPS)
            return fe_kv_error(L->s, sec, kv, "write the backward as another [custom] section (backward = NAME)",
                               "custom op '%s': grad has more than %d ops", c->name, IR_MAXGRADOPS);
        ir_gradop *op = &c->grad[c->ngrad];
        int opn = c->ngrad + 1;
        size_t kl = strcspn(p, " \t");
        if (p + kl > e) kl = (size_t)(e - p);
        snprintf(w, sizeof w, "%.*s", (int)(kl < 63 ? kl : 63), p);
        op->kind = ir_op_lookup(w);
        if (!grad_kind_ok(op->kind))
            return fe_kv_error(L->s, sec, kv, hint, "custom op '%s': grad op %d: '%s' is %s", c->name, opn,
                               fe_clip(w, clip, sizeof clip), op->kind < 0 ? "not a built-in op kind" :
                               "not a built-in op that grad may use (losses, updates and ops with keys may not)");
        const char *arrow = strstr(p + kl, "->");
        if (!arrow || arrow >= e)
            return fe_kv_error(L->s, sec, kv, hint, "custom op '%s': grad op %d (%s) has no '->'", c->name, opn, w);
        op->nin = grad_names(L, p + kl, arrow, op->in, IR_MAXIO);
        op->nout = grad_names(L, arrow + 2, e, op->out, IR_MAXIO);
        if (op->nin != ir_ops[op->kind].nin || op->nout != ir_ops[op->kind].nout)
            return fe_kv_error(L->s, sec, kv, hint, "custom op '%s': grad op %d (%s) takes %d input%s and makes %d "
                               "output%s (`%s`), written with %d and %d", c->name, opn, w, ir_ops[op->kind].nin,
                               ir_ops[op->kind].nin == 1 ? "" : "s", ir_ops[op->kind].nout,
                               ir_ops[op->kind].nout == 1 ? "" : "s", ir_ops[op->kind].anno, op->nin, op->nout);
        for (int k = 0; k < op->nin; k++) {
            int found = 0;
            for (int j = 0; j < nknown && !found; j++) found = !strcmp(known[j], op->in[k]);
            if (!found)
                return fe_kv_error(L->s, sec, kv, hint, "custom op '%s': grad op %d (%s) reads '%s', which is none "
                                   "of its names nor an output of an op before it", c->name, opn, w,
                                   fe_clip(op->in[k], clip, sizeof clip));
        }
        for (int k = 0; k < op->nout; k++) {
            const char *o = op->out[k];
            int taken = !fe_is_name(o) || strchr(o, '.');
            for (int j = 0; j < nknown && !taken; j++) taken = !strcmp(known[j], o);
            if (taken)
                return fe_kv_error(L->s, sec, kv, hint, "custom op '%s': grad op %d (%s) writes '%s', %s", c->name,
                                   opn, w, fe_clip(o, clip, sizeof clip), !fe_is_name(o) || strchr(o, '.') ?
                                   "which is not a plain name (letters, digits, '_')" : grad_taken_why(known, nseed, o));
            if (!strncmp(o, "dx", 2)) {
                char *end;
                long xi = strtol(o + 2, &end, 10);
                if (*end || xi < 1 || xi > c->nin)
                    return fe_kv_error(L->s, sec, kv, hint, "custom op '%s': grad op %d (%s) writes '%s', but the "
                                       "gradients are dx1 .. dx%d", c->name, opn, w, o, c->nin);
            }
            known[nknown++] = o;
        }
        c->ngrad++;
        p = *e ? e + 1 : e;
        if (*e && !*p)
            return fe_kv_error(L->s, sec, kv, hint, "custom op '%s': grad ends with ';'", c->name);
    }
    int any = 0;
    for (int j = nseed; j < nknown; j++) any |= !strncmp(known[j], "dx", 2);
    if (!any)
        return fe_kv_error(L->s, sec, kv, hint, "custom op '%s': grad gives no gradient (no op writes dx1 .. dx%d)",
                           c->name, c->nin);
    return 0;
}

/* [custom NAME]  annotation = ..., cpu = FILE.c, backward = NAME, flops = F:
 * an op kind of the user's, its kernel a C function compiled with the
 * ranks (docs/custom-ops.md). */
static int lower_customs(fe_lw *L)
{
    char clip[96], hint[512], err[256];
    ir_graph *g = L->g;
    for (int i = 0; i < L->s->nsec; i++) {
        const fe_section *sec = &L->s->sec[i];
        if (!is_kind(sec, "custom")) continue;
        const char *nm = sec->name;
        int cid = 1;
        for (const char *q = nm; *q; q++)
            cid &= (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || *q == '_' || (q > nm && *q >= '0' && *q <= '9');
        if (!cid)
            return fe_error(L->s, sec->line, "a custom op's name is also its kernel's C name (nnsc_custom_NAME): "
                            "letters, digits and '_', starting with a letter or '_'",
                            "custom op name '%s' is not a C identifier", fe_clip(nm, clip, sizeof clip));
        if (ir_op_lookup(nm) >= 0)
            return fe_error(L->s, sec->line, "pick another name: the built-in op kinds are listed in docs/model-spec.md",
                            "custom op '%s' has the name of a built-in op kind", fe_clip(nm, clip, sizeof clip));
        for (int j = 0; j < g->ncust; j++)
            if (strcmp(g->cust[j].name, nm) == 0) {
                snprintf(hint, sizeof hint, "it is first declared at line %d", g->cust[j].line);
                return fe_error(L->s, sec->line, hint, "custom op '%s' declared twice", fe_clip(nm, clip, sizeof clip));
            }
        if (g->ncust == IR_MAXCUSTOM)
            return fe_error(L->s, sec->line, "merge some of them, or raise IR_MAXCUSTOM (ir/ir.h)",
                            "more than %d [custom] sections", IR_MAXCUSTOM);
        ir_custom *c = &g->cust[g->ncust];
        memset(c, 0, sizeof *c);
        c->name = ir_str(g, nm);
        c->line = sec->line;
        c->bwd = -1;
        /* the annotation: its operand counts, then a trial instantiation with
           `*` as one dim (the real one happens per op, with its inputs' ranks) */
        const fe_kv *akv = fe_get(sec, "annotation");
        const char *a = akv->val, *arrow = strstr(a, "->");
        int rin[IR_MAXIO + 1], rout[IR_MAXIO + 1];
        if (!arrow)
            return fe_kv_error(L->s, sec, akv, "write inputs -> outputs, e.g. `* f, * f -> * f` (docs/dimops.md)",
                               "annotation of custom op '%s' has no '->'", fe_clip(nm, clip, sizeof clip));
        c->nin = anno_side(a, arrow, rin);
        c->nout = anno_side(arrow + 2, a + strlen(a), rout);
        if (c->nin < 1 || c->nin > IR_CUSTOM_MAXIO || c->nout < 1 || c->nout > IR_CUSTOM_MAXIO) {
            snprintf(hint, sizeof hint, "a custom op takes 1 to %d inputs and makes 1 to %d outputs", IR_CUSTOM_MAXIO,
                     IR_CUSTOM_MAXIO);
            return fe_kv_error(L->s, sec, akv, hint, "annotation of custom op '%s' has %d input%s and %d output%s",
                               fe_clip(nm, clip, sizeof clip), c->nin, c->nin == 1 ? "" : "s", c->nout,
                               c->nout == 1 ? "" : "s");
        }
        ir_anno trial;
        memset(&trial, 0, sizeof trial);
        int bad = ir_anno_parse(a, c->nin, rin, &trial, err, sizeof err);
        if (bad || trial.nout != c->nout)
            return fe_kv_error(L->s, sec, akv, "docs/dimops.md describes annotations, e.g. `* k+, k n -> * n`",
                               "annotation of custom op '%s': %s", fe_clip(nm, clip, sizeof clip),
                               bad ? err : "the outputs do not parse");
        c->anno = ir_str(g, a);
        /* the kernels' files (C, and CUDA C if given), relative to the spec's directory */
        for (int w = 0; w < 2; w++) {
            const fe_kv *ckv = fe_get(sec, w ? "cuda" : "cpu");
            if (!ckv) continue;
            char path[4096];
            const char *slash = strrchr(L->s->file, '/');
            if (ckv->val[0] == '/' || !slash) snprintf(path, sizeof path, "%s", ckv->val);
            else snprintf(path, sizeof path, "%.*s/%s", (int)(slash - L->s->file), L->s->file, ckv->val);
            FILE *f = fopen(path, "r");
            if (!f)
                return fe_kv_error(L->s, sec, ckv, w ? "cuda = names the CUDA C file of the device kernel, relative "
                                   "to the spec's directory" : "cpu = names the C file of the kernel, relative to "
                                   "the spec's directory", "custom op '%s': cannot read '%s': %s",
                                   fe_clip(nm, clip, sizeof clip), path, strerror(errno));
            fclose(f);
            *(w ? &c->cuda : &c->src) = ir_str(g, path);
        }
        if (get_float(L, sec, "flops", 4.0, FE_NONNEG, &c->flops)) return 2;
        g->ncust++;
    }
    /* backward = NAME: another [custom] section; it takes the gradient of
       output 1, then the inputs, and makes the inputs' gradients */
    for (int i = 0; i < L->s->nsec; i++) {
        const fe_section *sec = &L->s->sec[i];
        const fe_kv *bkv = is_kind(sec, "custom") ? fe_get(sec, "backward") : NULL;
        if (!bkv) continue;
        if (fe_get(sec, "grad"))
            return fe_kv_error(L->s, sec, fe_get(sec, "grad"), "keep one: backward = NAME (a kernel) or grad = ... "
                               "(built-in ops)", "custom op '%s' has both backward and grad", sec->name);
        int me = -1, b = -1;
        for (int j = 0; j < g->ncust; j++) {
            if (strcmp(g->cust[j].name, sec->name) == 0) me = j;
            if (strcmp(g->cust[j].name, bkv->val) == 0) b = j;
        }
        IR_ASSERT(me >= 0);
        ir_custom *c = &g->cust[me];
        if (b < 0 || b == me)
            return fe_kv_error(L->s, sec, bkv, "backward = names another [custom NAME] section: the kernel of the "
                               "gradients", b == me ? "custom op '%s' is its own backward" : "no [custom %s] section",
                               fe_clip(b == me ? c->name : bkv->val, clip, sizeof clip));
        const ir_custom *bc = &g->cust[b];
        int all = c->nout > 1 && bc->nin == c->nout + c->nin;   /* every output's gradient */
        if ((bc->nin != 1 + c->nin && !all) || bc->nout != c->nin) {
            char more[160] = "";
            if (c->nout > 1)
                snprintf(more, sizeof more, " (or the gradients of all its %d outputs, then its inputs: %d in all)",
                         c->nout, c->nout + c->nin);
            snprintf(hint, sizeof hint, "the backward of an op with %d input%s takes the gradient of its output 1, "
                     "then its %d input%s (%d in all)%s, and makes the %d input gradient%s",
                     c->nin, c->nin == 1 ? "" : "s", c->nin, c->nin == 1 ? "" : "s", 1 + c->nin, more, c->nin,
                     c->nin == 1 ? "" : "s");
            return fe_kv_error(L->s, sec, bkv, hint, "backward '%s' of custom op '%s' takes %d input%s and makes %d "
                               "output%s", bc->name, c->name, bc->nin, bc->nin == 1 ? "" : "s", bc->nout,
                               bc->nout == 1 ? "" : "s");
        }
        c->bwd = b;
        c->bwd_all = all;
    }
    /* grad = OP; OP; ...: the backward as built-in ops (not with backward =) */
    for (int i = 0; i < L->s->nsec; i++) {
        const fe_section *sec = &L->s->sec[i];
        const fe_kv *gkv = is_kind(sec, "custom") ? fe_get(sec, "grad") : NULL;
        if (!gkv) continue;
        int me = -1;
        for (int j = 0; j < g->ncust && me < 0; j++)
            if (strcmp(g->cust[j].name, sec->name) == 0) me = j;
        IR_ASSERT(me >= 0);
        if (parse_grad(L, sec, gkv, &g->cust[me])) return 2;
    }
    return 0;
}

/* The names in a comma-separated list (empty ones count: parse_list says so). */
static int count_names(const char *v)
{
    int n = 1;
    for (; *v; v++) n += *v == ',';
    return n;
}

/* list := NAME (',' NAME)*    with exactly want names. */
static int parse_list(fe_lw *L, const fe_section *sec, const fe_kv *kv, const ir_opinfo *oi, char **names,
                      int want, const char *what, int *got)
{
    char clip[96], hint[256];
    int n = 0;
    const char *p = kv->val;
    for (;;) {
        const char *e = p + strcspn(p, ",");
        while (*p == ' ' || *p == '\t') p++;
        const char *t = e;
        while (t > p && (t[-1] == ' ' || t[-1] == '\t')) t--;
        char *name = ir_xmalloc((size_t)(t - p) + 1);
        memcpy(name, p, (size_t)(t - p));
        name[t - p] = '\0';
        own(L, name);
        if (!*name)
            return fe_kv_error(L->s, sec, kv, "write names separated by commas, e.g. in = x, fc1.w",
                               "empty name in the %s list", what);
        if (!fe_is_name(name))
            return fe_kv_error(L->s, sec, kv, "names are letters, digits, '_' and '.', starting with a letter or '_'; separate them with commas",
                               "'%s' is not a tensor name", fe_clip(name, clip, sizeof clip));
        if (n < IR_MAXIO) names[n] = name;
        n++;
        if (!*e) break;
        p = e + 1;
    }
    if (n != want) {
        snprintf(hint, sizeof hint, "%s takes %d input%s and makes %d output%s; its annotation is `%s`",
                 oi->name, oi->nin, oi->nin == 1 ? "" : "s", oi->nout, oi->nout == 1 ? "" : "s", oi->anno);
        return fe_kv_error(L->s, sec, kv, hint, "op '%s' (%s) takes %d %s%s, got %d",
                           fe_clip(sec->name, clip, sizeof clip), oi->name, want, what, want == 1 ? "" : "s", n);
    }
    *got = n;
    return 0;
}

/* [op NAME]  kind = KIND, in = NAME, ..., out = NAME, ... */
/* Op attributes: heads = EXPR and causal = true|false (attention), vocab =
 * EXPR (cross_entropy: the real vocabulary; logits past it are padding),
 * eps = FLOAT (layernorm, rmsnorm), heads and theta = FLOAT (rope), scale = FLOAT (attention: of q . k,
 * default 1 / sqrt(head size)).  A key that does not belong to the op's kind is
 * an error. */
static int op_attrs(fe_lw *L, const fe_section *sec, fe_opdecl *d)
{
    static const struct { const char *key; ir_opkind kind; } own[] = {
        {"heads", IR_OP_ATTENTION}, {"heads", IR_OP_ROPE}, {"heads", IR_OP_SPLIT_HEADS}, {"first", IR_OP_SPLIT}, {"groups", IR_OP_SPLIT}, {"groups", IR_OP_CONCAT}, {"start", IR_OP_SLICE}, {"stop", IR_OP_SLICE}, {"kv_heads", IR_OP_ATTENTION}, {"causal", IR_OP_ATTENTION}, {"alibi", IR_OP_ATTENTION},
        {"heads", IR_OP_ATTENTION_VL}, {"kv_heads", IR_OP_ATTENTION_VL}, {"causal", IR_OP_ATTENTION_VL},
        {"alibi", IR_OP_ATTENTION_VL}, {"scale", IR_OP_ATTENTION_VL},
        {"vocab", IR_OP_CROSS_ENTROPY}, {"eps", IR_OP_LAYERNORM}, {"eps", IR_OP_RMSNORM},
        {"theta", IR_OP_ROPE}, {"shape", IR_OP_RECYCLE}, {"shape", IR_OP_RESHAPE}, {"attrs", IR_OP_CUSTOM},
        {"shape", IR_OP_RELPOS_BIAS}, {"bidirectional", IR_OP_RELPOS_BIAS}, {"max_distance", IR_OP_RELPOS_BIAS},
        {"scale", IR_OP_ATTENTION}};
    char err[256], hint[256], clip[96];
    for (size_t a = 0; a < sizeof own / sizeof own[0]; a++) {
        const fe_kv *kv = fe_get(sec, own[a].key);
        if (!kv) continue;
        int mine = 0;   /* (a key may belong to several kinds: eps, heads) */
        char kinds[128] = "";
        for (size_t b = 0; b < sizeof own / sizeof own[0]; b++)
            if (!strcmp(own[b].key, own[a].key)) {
                mine |= own[b].kind == d->kind;
                size_t u = strlen(kinds);
                snprintf(kinds + u, sizeof kinds - u, "%s%s", u ? " and " : "", ir_ops[own[b].kind].name);
            }
        if (!mine) {
            snprintf(hint, sizeof hint, "%s is a key of %s ops only", own[a].key, kinds);
            return fe_kv_error(L->s, sec, kv, hint, "op '%s' (%s) has no key '%s'", fe_clip(sec->name, clip, sizeof clip),
                               ir_ops[d->kind].name, own[a].key);
        }
    }
    const fe_kv *kv;
    static const char *const tf[] = {"true", "false", NULL};
    static const char *const bk[] = {"causal", "alibi"};   /* attention's flags: causal by default, no ALiBi */
    static const int bslot[] = {IR_IA_CAUSAL, IR_IA_ALIBI}, bdef[] = {0, 1};
    for (int a = 0; a < 2; a++) {
        int v;
        if (get_choice(L, sec, bk[a], tf, bdef[a], &v)) return 2;
        d->iattr[bslot[a]] = v == 0;
    }
    static const char *const ik[] = {"heads", "vocab", "kv_heads", "first", "start", "stop", "groups"};
    static const int slot[] = {IR_IA_HEADS, IR_IA_VOCAB, IR_IA_KV_HEADS, IR_IA_FIRST, IR_IA_START, IR_IA_STOP,
                               IR_IA_GROUPS};
    for (int a = 0; a < 7; a++) {
        if (!(kv = fe_get(sec, ik[a]))) continue;
        if (slot[a] == IR_IA_START && strspn(kv->val, "0") == strlen(kv->val) && kv->val[0]) {   /* (a size is >= 1) */
            d->iattr[slot[a]] = 0;
            continue;
        }
        if (fe_eval(kv->val, &L->dims, L->dims.n, &d->iattr[slot[a]], err, sizeof err, hint, sizeof hint))
            return fe_kv_error(L->s, sec, kv, hint[0] ? hint : NULL, "%s: %s", ik[a], err);
    }
    if (d->kind == IR_OP_CUSTOM && (kv = fe_get(sec, "attrs"))) {   /* floats for the kernel: c->attr[] */
        const char *p = kv->val;
        int n = 0;
        for (;;) {
            const char *e = p + strcspn(p, ",");
            char w[64];
            while (*p == ' ' || *p == '\t') p++;
            size_t len = (size_t)(e - p);
            while (len && (p[len - 1] == ' ' || p[len - 1] == '\t')) len--;
            if (len >= sizeof w) len = sizeof w - 1;
            memcpy(w, p, len);
            w[len] = '\0';
            if (n == IR_MAXFATTR)
                return fe_kv_error(L->s, sec, kv, "a custom op's kernel takes at most 6 attrs", "more than %d attrs",
                                   IR_MAXFATTR);
            if (fe_parse_float(w, &d->fattr[n], err, sizeof err))
                return fe_kv_error(L->s, sec, kv, "attrs = floats separated by commas, e.g. attrs = 0.5, 2",
                                   "attrs: %s", err);
            n++;
            if (!*e) break;
            p = e + 1;
        }
    }
    if ((kv = fe_get(sec, "kv_heads")) && d->iattr[IR_IA_KV_HEADS] < 1)
        return fe_kv_error(L->s, sec, kv, "kv_heads is the number of key/value heads, >= 1, dividing heads",
                           "kv_heads must be >= 1, got %lld", (long long)d->iattr[IR_IA_KV_HEADS]);
    if ((IR_IS_ATT(d->kind) || d->kind == IR_OP_ROPE || d->kind == IR_OP_SPLIT_HEADS) && !fe_get(sec, "heads"))
        return fe_error(L->s, sec->line, !IR_IS_ATT(d->kind) ? "add `heads = N`: the last dim of x is heads x head size"
                                                               : "add `heads = N`: the last dim of q, k and v is heads x head size",
                        "%s op '%s' needs heads", ir_ops[d->kind].name, fe_clip(sec->name, clip, sizeof clip));
    if (d->kind == IR_OP_SLICE && (!fe_get(sec, "start") || !fe_get(sec, "stop")))
        return fe_error(L->s, sec->line, "add `start = N` and `stop = M`: the positions start .. stop - 1 of the dim "
                        "before the last are kept", "slice op '%s' needs start and stop",
                        fe_clip(sec->name, clip, sizeof clip));
    if (d->kind == IR_OP_SPLIT && !fe_get(sec, "first"))
        return fe_error(L->s, sec->line, "add `first = N`: the last dim of output 1; output 2 gets the rest",
                        "split op '%s' needs first", fe_clip(sec->name, clip, sizeof clip));
    if (d->kind == IR_OP_ROPE && get_float(L, sec, "theta", 10000.0, FE_POS, &d->fattr[IR_FA_THETA])) return 2;
    /* attention's scale of q . k: 0 (absent) is 1 / sqrt(head size), set by ir_add_op */
    if (IR_IS_ATT(d->kind) && get_float(L, sec, "scale", 0.0, FE_POS, &d->fattr[IR_FA_SCALE])) return 2;
    if (d->kind != IR_OP_CUSTOM && get_float(L, sec, "eps", 1e-5, FE_POS, &d->fattr[IR_FA_LN_EPS])) return 2;
    if (d->kind == IR_OP_RECYCLE) {
        if (!fe_get(sec, "shape"))
            return fe_error(L->s, sec->line, "add `shape = ...`: the shape of the recycled tensor (its `in`), "
                            "which the first pass reads as zeros", "recycle op '%s' needs shape",
                            fe_clip(sec->name, clip, sizeof clip));
        if (parse_shape(L, sec, &d->ndim, d->shape)) return 2;
    }
    if (d->kind == IR_OP_RESHAPE) {   /* the output's shape, into the op's attributes */
        if (!fe_get(sec, "shape"))
            return fe_error(L->s, sec->line, "add `shape = ...`: the output's extents, as many elements as x's "
                            "(e.g. shape = B T*C)", "reshape op '%s' needs shape", fe_clip(sec->name, clip, sizeof clip));
        int nd;
        int64_t sh[IR_MAXDIM];
        if (parse_shape(L, sec, &nd, sh)) return 2;
        d->iattr[IR_IA_RNDIM] = nd;
        for (int k = 0; k < nd; k++) d->iattr[IR_IA_RSHAPE + k] = sh[k];
    }
    if (d->kind == IR_OP_RELPOS_BIAS) {   /* shape = T S; bidirectional (true); max_distance (128) */
        const char *shint = "add `shape = T S`: the query positions and the key positions (T5's encoder: shape = T T)";
        if (!(kv = fe_get(sec, "shape")))
            return fe_error(L->s, sec->line, shint, "relpos_bias op '%s' needs shape", fe_clip(sec->name, clip, sizeof clip));
        int nd, v;
        int64_t sh[IR_MAXDIM];
        if (parse_shape(L, sec, &nd, sh)) return 2;
        if (nd != 2) return fe_kv_error(L->s, sec, kv, shint, "relpos_bias: shape has %d dims, not 2 (T S)", nd);
        d->iattr[IR_IA_RP_T] = sh[0], d->iattr[IR_IA_RP_S] = sh[1];
        if (get_choice(L, sec, "bidirectional", tf, 0, &v)) return 2;
        d->iattr[IR_IA_RP_BIDIR] = v == 0;
        d->iattr[IR_IA_RP_MAXDIST] = 128;
        if ((kv = fe_get(sec, "max_distance")) &&
            fe_eval(kv->val, &L->dims, L->dims.n, &d->iattr[IR_IA_RP_MAXDIST], err, sizeof err, hint,
                    sizeof hint))
            return fe_kv_error(L->s, sec, kv, hint[0] ? hint : NULL, "max_distance: %s", err);
    }
    return 0;
}

static int lower_opdecls(fe_lw *L)
{
    char hint[512], clip[96], clip2[96];
    L->sec_op = ir_xmalloc(sizeof *L->sec_op * ((size_t)L->s->nsec + 1));
    for (int i = 0; i < L->s->nsec; i++) L->sec_op[i] = -1;
    for (int i = 0; i < L->s->nsec; i++) {
        const fe_section *sec = &L->s->sec[i];
        if (!is_kind(sec, "op")) continue;
        const fe_kv *kkv = fe_get(sec, "kind");
        int k = ir_op_lookup(kkv->val), cu = -1;
        for (int j = 0; j < L->g->ncust; j++)
            if (strcmp(L->g->cust[j].name, kkv->val) == 0) cu = j, k = IR_OP_CUSTOM;
        if (k < 0 || (!(ir_ops[k].flags & OPF_USER) && cu < 0)) {
            const char *cand[IR_OP_COUNT + IR_MAXCUSTOM];
            int nc = 0;
            for (int j = 0; j < IR_OP_COUNT; j++)
                if (ir_ops[j].flags & OPF_USER) cand[nc++] = ir_ops[j].name;
            for (int j = 0; j < L->g->ncust; j++) cand[nc++] = L->g->cust[j].name;
            size_t used = 0;
            if (fe_suggest(kkv->val, cand, nc, hint, sizeof hint)) used = strlen(hint);
            used += (size_t)snprintf(hint + used, sizeof hint - used, "%sop kinds:", used ? " " : "");
            for (int j = 0; j < nc && used < sizeof hint; j++)
                used += (size_t)snprintf(hint + used, sizeof hint - used, " %s", cand[j]);
            return fe_kv_error(L->s, sec, kkv, hint, "unknown op kind '%s'", fe_clip(kkv->val, clip, sizeof clip));
        }
        L->sec_op[i] = L->nops;
        fe_opdecl *d = IR_PUSH(L->ops, L->nops, L->opcap);
        d->sec = sec;
        d->kind = (ir_opkind)k;
        d->in_kv = fe_get(sec, "in");
        d->out_kv = fe_get(sec, "out");
        d->block = block_of(L, sec->name);
        d->iattr[IR_IA_CUSTOM] = cu;
        if (k == IR_OP_ATTENTION && d->in_kv && count_names(d->in_kv->val) == 4)
            d->kind = IR_OP_ATTENTION_VL;   /* q, k, v and the key lengths */
        if (k == IR_OP_RECYCLE && d->block >= 0)
            return fe_error(L->s, sec->line, "declare the recycle op outside the block: it feeds a tensor of the "
                            "previous forward pass into this one, once per pass", "recycle op '%s' in block %s",
                            fe_clip(sec->name, clip, sizeof clip), L->blk[d->block].name);
        if (op_attrs(L, sec, d)) return 2;
        ir_opinfo oi = op_info(L, d);
        if (parse_list(L, sec, d->in_kv, &oi, d->in, oi.nin, "input", &d->nin) ||
            parse_list(L, sec, d->out_kv, &oi, d->out, oi.nout, "output", &d->nout))
            return 2;
        for (int o = 0; o < d->nout; o++) {
            const char *n = d->out[o];
            int b = block_of(L, n);
            if (d->block >= 0) {
                const fe_blk *B = &L->blk[d->block];
                if (b != d->block || strcmp(n + B->len, ".in") == 0) {
                    snprintf(hint, sizeof hint, "outputs of the ops of block %s are named %s.NAME "
                             "(%s.out is the result of a repeat; %s.in is its input)", B->name, B->name, B->name, B->name);
                    return fe_kv_error(L->s, sec, d->out_kv, hint, "op '%s' of block %s cannot write '%s'",
                                       fe_clip(sec->name, clip, sizeof clip), B->name, fe_clip(n, clip2, sizeof clip2));
                }
                if (strcmp(n + B->len, ".out") == 0) L->blk[d->block].has_out = 1;
            } else if (b >= 0) {
                snprintf(hint, sizeof hint, "names %s.* belong to block %s: its [op %s.NAME] and [param %s.NAME] sections",
                         L->blk[b].name, L->blk[b].name, L->blk[b].name, L->blk[b].name);
                return fe_kv_error(L->s, sec, d->out_kv, hint, "name '%s' is reserved for block %s",
                                   fe_clip(n, clip, sizeof clip), L->blk[b].name);
            }
        }
    }
    for (int b = 0; b < L->nblk; b++)
        if (!L->blk[b].has_out) {
            const char *n = L->blk[b].name;
            snprintf(hint, sizeof hint, "one op of the block must write its result to %s.out (the next repeat reads it as %s.in)", n, n);
            return fe_error(L->s, L->blk[b].sec->line, hint, "block '%s' has no op with out = %s.out", n, n);
        }
    return 0;
}

/* ---------------------------------------------------------------- names */

/* Define a tensor name (as written); a second definition is an error. */
static int define(fe_lw *L, const fe_section *sec, const fe_kv *kv, const char *name, const char *what, int line)
{
    char hint[384], clip[96];
    int old = fe_map_get(&L->name_idx, name);
    if (old >= 0) {
        const fe_name *o = &L->names[old];
        if (o->line) snprintf(hint, sizeof hint, "it is first defined at line %d (%s); tensor names are unique", o->line, o->what);
        else snprintf(hint, sizeof hint, "it is first defined by --set (%s); tensor names are unique", o->what);
        if (kv) return fe_kv_error(L->s, sec, kv, hint, "name '%s' defined twice", fe_clip(name, clip, sizeof clip));
        return fe_error(L->s, line, hint, "name '%s' defined twice", fe_clip(name, clip, sizeof clip));
    }
    fe_name *n = IR_PUSH(L->names, L->nnames, L->namecap);
    n->name = name;
    n->what = what;
    n->line = line;
    n->block = block_of(L, name);
    fe_map_put(&L->name_idx, name, L->nnames - 1);
    return 0;
}

/* Every tensor name an input, param, op output or block out defines, in
 * file order; block rules for inputs and params. */
static int lower_names(fe_lw *L)
{
    char hint[384], clip[96];
    for (int i = 0; i < L->s->nsec; i++) {
        const fe_section *sec = &L->s->sec[i];
        int in = is_kind(sec, "input"), pa = is_kind(sec, "param");
        if (in || pa) {
            int b = block_of(L, sec->name);
            if (b >= 0 && in) {
                snprintf(hint, sizeof hint, "declare inputs outside blocks; inside block %s use %s.in or a name defined outside",
                         L->blk[b].name, L->blk[b].name);
                return fe_error(L->s, sec->line, hint, "input '%s' cannot belong to block %s",
                                fe_clip(sec->name, clip, sizeof clip), L->blk[b].name);
            }
            if (b >= 0 && (strcmp(sec->name + L->blk[b].len, ".in") == 0 || strcmp(sec->name + L->blk[b].len, ".out") == 0))
                return fe_error(L->s, sec->line, "NAME.in and NAME.out of a block are its input and result",
                                "param name '%s' is reserved", fe_clip(sec->name, clip, sizeof clip));
            if (define(L, sec, NULL, sec->name, fmt(L, "[%s %s]", sec->kind, sec->name), sec->line)) return 2;
        } else if (is_kind(sec, "op")) {
            const fe_opdecl *d = &L->ops[L->sec_op[i]];
            for (int o = 0; o < d->nout; o++)
                if (define(L, sec, d->out_kv, d->out[o], fmt(L, "output of [op %s]", sec->name), d->out_kv->line))
                    return 2;
        } else if (is_kind(sec, "block")) {
            const fe_kv *out = fe_get(sec, "out");
            if (define(L, sec, out, out->val, fmt(L, "out of [block %s]", sec->name), out->line)) return 2;
            fe_map_put(&L->alias, out->val, fe_map_get(&L->blk_idx, sec->name));
        }
    }
    return 0;
}

/* Hint for an unknown tensor name used in block `block` (or -1). */
static const char *unknown_hint(fe_lw *L, const char *name, int block, char *buf, size_t bufsz)
{
    char clip[96];
    int b = block_of(L, name);
    if (b >= 0 && b != block) {
        snprintf(buf, bufsz, "'%s' is inside block %s; outside it, use the block's out name '%s'",
                 fe_clip(name, clip, sizeof clip), L->blk[b].name, L->blk[b].out->val);
        return buf;
    }
    const char **cand = ir_xmalloc(sizeof *cand * (size_t)(L->nnames + 1));
    int nc = 0;
    for (int i = 0; i < L->nnames; i++)
        if (L->names[i].block < 0 || L->names[i].block == block) cand[nc++] = L->names[i].name;
    if (block >= 0) cand[nc++] = fmt(L, "%s.in", L->blk[block].name);
    const char *sug = fe_suggest(name, cand, nc, buf, bufsz);
    free(cand);
    if (!sug) snprintf(buf, bufsz, "define it with [input NAME], [param NAME] or as an op output");
    return buf;
}

/* ---------------------------------------------------------------- tensors */

static const char *const fe_dtypes[] = {"f32", "i32", NULL};

/* [input NAME]  shape = SHAPE, dtype = f32|i32, data = normal | zeros | int EXPR,
 *               batch_dim = INT */
static int lower_input(fe_lw *L, const fe_section *sec)
{
    int ndim, dt;
    int64_t shape[IR_MAXDIM];
    char err[256], hint[256], w[128], clip[96];
    if (parse_shape(L, sec, &ndim, shape) || get_choice(L, sec, "dtype", fe_dtypes, 0, &dt) ||
        check_name(L, sec, sec->name, "input", 0))
        return 2;
    int id = ir_add_tensor(L->g, sec->name, dt ? IR_I32 : IR_F32, IR_T_INPUT, ndim, shape, sec->line);
    fe_map_put(&L->tensor, L->g->t[id].name, id);
    ir_tensor *t = &L->g->t[id];
    const fe_kv *kv = fe_get(sec, "data");
    if (!kv) {
        if (dt)
            return fe_error(L->s, sec->line, "write data = int RANGE: values in [0, RANGE), e.g. data = int V",
                            "i32 input '%s' needs `data = int RANGE`", fe_clip(sec->name, clip, sizeof clip));
        t->data = IR_DATA_NORMAL;
    } else {
        const char *p = kv->val;
        next_word(&p, w, sizeof w);
        if (strcmp(w, "normal") == 0) {
            if (dt) return fe_kv_error(L->s, sec, kv, "i32 inputs take data = int RANGE", "data = normal needs dtype = f32");
            if (*p) return fe_kv_error(L->s, sec, kv, "write data = normal", "data = normal takes no arguments");
            t->data = IR_DATA_NORMAL;
        } else if (strcmp(w, "int") == 0) {
            if (!dt) return fe_kv_error(L->s, sec, kv, "add dtype = i32, or use data = normal", "data = int needs dtype = i32");
            if (fe_eval(p, &L->dims, L->dims.n, &t->data_range, err, sizeof err, hint, sizeof hint))
                return fe_kv_error(L->s, sec, kv, hint[0] ? hint : "write data = int RANGE, e.g. data = int V",
                                   "data range: %s", err);
            if (t->data_range > IR_MAX_RANGE)
                return fe_kv_error(L->s, sec, kv, "the values are i32: a range of at most 2^31 - 1",
                                   "data range %lld is more than %d", (long long)t->data_range, IR_MAX_RANGE);
            t->data = IR_DATA_INT;
        } else if (strcmp(w, "zeros") == 0) {
            if (dt) return fe_kv_error(L->s, sec, kv, "i32 inputs take data = int RANGE", "data = zeros needs dtype = f32");
            if (*p) return fe_kv_error(L->s, sec, kv, "write data = zeros", "data = zeros takes no arguments");
            t->data = IR_DATA_ZEROS;
        } else {
            return fe_kv_error(L->s, sec, kv, "data is normal or zeros (f32), or int RANGE (i32)", "unknown data '%s'",
                               fe_clip(kv->val, clip, sizeof clip));
        }
    }
    int64_t bd;
    if (get_int(L, sec, "batch_dim", 0, 0, ndim - 1, &bd)) return 2;
    t->batch_dim = (int)bd;
    /* one of batch_div replicas' share (exact: the search divides only then) */
    if (L->batch_div > 1 && t->shape[bd] % L->batch_div == 0) t->shape[bd] /= L->batch_div;
    /* stream = K: with a token file, element (b, t) is token K + t of row b */
    t->stream = -1;
    if ((kv = fe_get(sec, "stream"))) {
        int64_t k;
        if (get_int(L, sec, "stream", 0, 0, 1 << 20, &k)) return 2;
        if (!dt || ndim != 2 || bd != 0)
            return fe_kv_error(L->s, sec, kv, "token inputs are i32 [B, T] with batch_dim = 0",
                               "stream input '%s' must be i32 with shape B T", fe_clip(sec->name, clip, sizeof clip));
        t->stream = (int)k;
    }
    return 0;
}

/* init := zeros | ones | const V | normal STD | uniform LO HI */
static int parse_init(fe_lw *L, const fe_section *sec, ir_tensor *t)
{
    static const char hint[] = "init is zeros | ones | const V | normal STD | uniform LO HI";
    const fe_kv *kv = fe_get(sec, "init");
    t->init = IR_INIT_NORMAL;
    t->init_a = 0.02;
    t->init_b = 0;
    if (!kv) return 0;
    static const struct { const char *w; ir_initkind k; int nargs; } forms[] = {
        {"zeros", IR_INIT_ZEROS, 0}, {"ones", IR_INIT_ONES, 0}, {"const", IR_INIT_CONST, 1},
        {"normal", IR_INIT_NORMAL, 1}, {"uniform", IR_INIT_UNIFORM, 2},
    };
    char w[128], err[256], clip[96];
    const char *p = kv->val;
    next_word(&p, w, sizeof w);
    for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
        if (strcmp(w, forms[f].w) != 0) continue;
        double a[3] = {0, 0, 0};
        int n = 0;
        for (size_t len; (len = next_word(&p, w, sizeof w)) > 0; n++) {
            if (n == forms[f].nargs)
                return fe_kv_error(L->s, sec, kv, hint, "init %s takes %d argument%s", forms[f].w, forms[f].nargs,
                                   forms[f].nargs == 1 ? "" : "s");
            if (len >= sizeof w) snprintf(w, sizeof w, "%s", "?");
            if (fe_parse_float(w, &a[n], err, sizeof err)) return fe_kv_error(L->s, sec, kv, hint, "init: %s", err);
        }
        if (n != forms[f].nargs)
            return fe_kv_error(L->s, sec, kv, hint, "init %s takes %d argument%s", forms[f].w, forms[f].nargs,
                               forms[f].nargs == 1 ? "" : "s");
        if (forms[f].k == IR_INIT_NORMAL && a[0] < 0)
            return fe_kv_error(L->s, sec, kv, NULL, "init normal: the standard deviation must be >= 0");
        if (forms[f].k == IR_INIT_UNIFORM && !(a[0] < a[1]))
            return fe_kv_error(L->s, sec, kv, NULL, "init uniform LO HI needs LO < HI");
        t->init = forms[f].k;
        t->init_a = a[0];
        t->init_b = a[1];
        return 0;
    }
    return fe_kv_error(L->s, sec, kv, hint, "unknown init '%s'", fe_clip(kv->val, clip, sizeof clip));
}

/* [param NAME]  shape = SHAPE, init = INIT, dtype = f32.  A block's param
 * becomes one tensor per repeat. */
static int lower_param(fe_lw *L, const fe_section *sec)
{
    int ndim, dt;
    int64_t shape[IR_MAXDIM];
    if (parse_shape(L, sec, &ndim, shape) || get_choice(L, sec, "dtype", fe_dtypes, 0, &dt)) return 2;
    if (dt) return fe_kv_error(L->s, sec, fe_get(sec, "dtype"), "params are trained, so f32", "params must be f32");
    ir_tensor proto;
    memset(&proto, 0, sizeof proto);
    if (parse_init(L, sec, &proto)) return 2;
    int b = block_of(L, sec->name), tr;
    int nrep = b < 0 ? 1 : L->blk[b].repeat;
    /* import = NAME (a block's: {r} the repeat), import_transposed = true|false */
    static const char *const tf[] = {"false", "true", NULL};
    const fe_kv *ikv = fe_get(sec, "import");
    char clip[96];
    int trainable;
    if (get_choice(L, sec, "import_transposed", tf, 0, &tr) || get_choice(L, sec, "trainable", tf, 1, &trainable))
        return 2;
    if (tr && ndim != 2)
        return fe_kv_error(L->s, sec, fe_get(sec, "import_transposed"), "only a 2-D param is stored transposed",
                           "param '%s' has %d dims", fe_clip(sec->name, clip, sizeof clip), ndim);
    if (fe_get(sec, "import_transposed") && !ikv)
        return fe_kv_error(L->s, sec, fe_get(sec, "import_transposed"), "add import = NAME, the name in the other "
                           "checkpoint", "import_transposed without import");
    if (ikv) {
        const char *v = ikv->val, *rr = strstr(v, "{r}");
        int ok = *v && strlen(v) < 200 && !strpbrk(v, " \t\"") && (!rr || !strstr(rr + 3, "{r}"));
        if (!ok)
            return fe_kv_error(L->s, sec, ikv, "import = the tensor's name in a safetensors checkpoint, e.g. "
                               "model.layers.{r}.self_attn.q_proj.weight ({r}: the repeat, in a block)",
                               "bad import name '%s'", fe_clip(v, clip, sizeof clip));
        if (b >= 0 && nrep > 1 && !rr)
            return fe_kv_error(L->s, sec, ikv, "write {r} where the layer number goes, e.g. model.layers.{r}.mlp.up_proj.weight",
                               "import of block param '%s' has no {r}: every repeat would load one tensor",
                               fe_clip(sec->name, clip, sizeof clip));
        if (b < 0 && rr)
            return fe_kv_error(L->s, sec, ikv, "{r} is the repeat of a block's param", "import of '%s' has {r} "
                               "outside a block", fe_clip(sec->name, clip, sizeof clip));
    }
    /* adamw (the default optimizer) keeps state opt.m.NAME and opt.v.NAME per param */
    const fe_section *tsec = section(L->s, "train");
    const fe_kv *okv = tsec ? fe_get(tsec, "optimizer") : NULL;
    size_t state = okv && strcmp(okv->val, "sgd") == 0 ? 0 : strlen("opt.m.");
    for (int r = 0; r < nrep; r++) {
        const char *name = b < 0 ? sec->name : fmt(L, "%s.%d.%s", L->blk[b].name, r, sec->name + L->blk[b].len + 1);
        if ((r == 0 || r == nrep - 1) && check_name(L, sec, name, "param", state)) return 2;   /* (the longest: the last) */
        int id = ir_add_tensor(L->g, name, IR_F32, IR_T_PARAM, ndim, shape, sec->line);
        ir_tensor *t = &L->g->t[id];
        t->init = proto.init;
        t->init_a = proto.init_a;
        t->init_b = proto.init_b;
        t->frozen = !trainable;
        if (ikv) {
            const char *v = ikv->val, *rr = strstr(v, "{r}");
            t->import = rr ? ir_str(L->g, fmt(L, "%.*s%d%s", (int)(rr - v), v, r, rr + 3)) : ir_str(L->g, v);
            t->import_t = tr;
        }
        fe_map_put(&L->tensor, t->name, id);
    }
    return 0;
}

/* Inputs and params in file order; a block's params (repeat-major) where
 * its [block] section is. */
static int lower_tensors(fe_lw *L)
{
    int64_t total = 0;
    int ns = L->s->nsec, rc = 0;
    /* each block's params in file order: a list through next[] from head[block] */
    int *pb = ir_xmalloc(sizeof *pb * ((size_t)ns + 1)), *next = ir_xmalloc(sizeof *next * ((size_t)ns + 1));
    int *head = ir_xmalloc(sizeof *head * ((size_t)L->nblk + 1));
    for (int b = 0; b < L->nblk; b++) head[b] = -1;
    for (int i = ns - 1; i >= 0; i--) {
        pb[i] = is_kind(&L->s->sec[i], "param") ? block_of(L, L->s->sec[i].name) : -1;
        next[i] = -1;
        if (pb[i] < 0) continue;
        next[i] = head[pb[i]];
        head[pb[i]] = i;
    }
    for (int i = 0; i < ns && !rc; i++) {
        const fe_section *sec = &L->s->sec[i];
        if (is_kind(sec, "input")) {
            rc = lower_input(L, sec);
        } else if (is_kind(sec, "param") && pb[i] < 0) {
            rc = lower_param(L, sec);
        } else if (is_kind(sec, "block")) {
            int b = fe_map_get(&L->blk_idx, sec->name);
            for (int j = head[b]; j >= 0 && !rc; j = next[j]) {
                total += L->blk[b].repeat;
                if (total > FE_MAX_INST)
                    rc = fe_error(L->s, sec->line, NULL, "more than %d params after unrolling blocks", FE_MAX_INST);
                else
                    rc = lower_param(L, &L->s->sec[j]);
            }
        }
    }
    free(pb);
    free(next);
    free(head);
    return rc ? 2 : 0;
}

/* ---------------------------------------------------------------- ops */

/* Graph name of a tensor named `name` in repeat rep of block (or -1). */
static char *resolve(fe_lw *L, int block, int rep, const char *name)
{
    if (block >= 0) {
        const fe_blk *B = &L->blk[block];
        if (strncmp(name, B->name, B->len) == 0 && name[B->len] == '.') {
            const char *x = name + B->len + 1;
            if (strcmp(x, "in") == 0)
                return rep == 0 ? resolve(L, -1, -1, B->in->val) : fmt(L, "%s.%d.out", B->name, rep - 1);
            return fmt(L, "%s.%d.%s", B->name, rep, x);
        }
    }
    int a = fe_map_get(&L->alias, name);
    if (a >= 0) return fmt(L, "%s.%d.out", L->blk[a].name, L->blk[a].repeat - 1);
    return fmt(L, "%s", name);
}

/* Add the instance of op decl for repeat rep (-1: not in a block); its
 * outputs become known producers. */
static void add_inst(fe_lw *L, int decl, int rep)
{
    const fe_opdecl *d = &L->ops[decl];
    fe_inst *in = IR_PUSH(L->inst, L->ninst, L->instcap);
    memset(in, 0, sizeof *in);
    in->decl = decl;
    in->rep = rep;
    in->orig = -1;
    in->op = -1;
    in->name = resolve(L, d->block, rep, d->sec->name);
    for (int o = 0; o < d->nout; o++) {
        in->out[o] = resolve(L, d->block, rep, d->out[o]);
        fe_map_put(&L->producer, in->out[o], L->ninst - 1);
    }
}

/* A model has ops; say so plainly when the file is empty. */
static int lower_complete(fe_lw *L)
{
    if (L->nops > 0) return 0;
    int blank = 1;
    for (int i = 0; i < L->s->nlines && blank; i++) {
        const char *p = L->s->lines[i];
        while (*p == ' ' || *p == '\t') p++;
        blank = !*p || *p == ';' || *p == '#';
    }
    return fe_error(L->s, -1, "a model is [input NAME], [param NAME] and [op NAME] sections and a [train] section; see docs/model-spec.md",
                    "no [op] sections%s", blank ? " (the file is empty)" : "");
}

/* Op instances in file order (a block's, repeat-major, where its [block]
 * is); inputs resolved; unknown names reported. */
static int lower_insts(fe_lw *L)
{
    char hint[384], clip[96];
    int64_t total = 0;
    /* each block's ops in file order: a list through next[] from head[block] */
    int *next = ir_xmalloc(sizeof *next * ((size_t)L->nops + 1)), *head = ir_xmalloc(sizeof *head * ((size_t)L->nblk + 1));
    for (int b = 0; b < L->nblk; b++) head[b] = -1;
    for (int k = L->nops - 1; k >= 0; k--) {
        int b = L->ops[k].block;
        next[k] = b < 0 ? -1 : head[b];
        if (b >= 0) head[b] = k, total += L->blk[b].repeat;
    }
    if (total + L->nops > FE_MAX_INST) {
        free(next);
        free(head);
        return fe_error(L->s, -1, "lower the repeat counts", "more than %d ops after unrolling blocks", FE_MAX_INST);
    }
    for (int i = 0; i < L->s->nsec; i++) {
        const fe_section *sec = &L->s->sec[i];
        if (is_kind(sec, "op")) {
            int k = L->sec_op[i];
            if (L->ops[k].block < 0) add_inst(L, k, -1);
        } else if (is_kind(sec, "block")) {
            int b = fe_map_get(&L->blk_idx, sec->name);
            for (int r = 0; r < L->blk[b].repeat; r++)
                for (int k = head[b]; k >= 0; k = next[k]) add_inst(L, k, r);
        }
    }
    free(next);
    free(head);
    /* a block's `in` must exist even when no op reads NAME.in */
    for (int b = 0; b < L->nblk; b++) {
        const char *n = L->blk[b].in->val;
        int ni = fe_map_get(&L->name_idx, n);
        if (ni < 0 || L->names[ni].block >= 0)
            return fe_kv_error(L->s, L->blk[b].sec, L->blk[b].in, unknown_hint(L, n, -1, hint, sizeof hint),
                               "unknown tensor '%s'", fe_clip(n, clip, sizeof clip));
    }
    for (int i = 0; i < L->ninst; i++) {
        fe_inst *in = &L->inst[i];
        const fe_opdecl *d = &L->ops[in->decl];
        for (int k = 0; k < d->nin; k++) {
            in->in[k] = resolve(L, d->block, in->rep, d->in[k]);
            if (fe_map_get(&L->tensor, in->in[k]) >= 0) continue;
            if (fe_map_get(&L->producer, in->in[k]) >= 0) {
                in->wait++;
                continue;
            }
            return fe_kv_error(L->s, d->sec, d->in_kv, unknown_hint(L, d->in[k], d->block, hint, sizeof hint),
                               "unknown tensor '%s'", fe_clip(d->in[k], clip, sizeof clip));
        }
    }
    return 0;
}

/* ---- recycling ([train] recycle = R; AlphaFold's): the forward runs R
 * times per micro-batch, the first R - 1 passes without gradients.  A
 * recycle op (y = x) gives its pass the value its `in` had in the pass
 * before, zeros in the first.  The passes are unrolled here: the ops that
 * depend on a recycle op's output and that the next pass needs (ancestors
 * of a recycle op's input) are copied once per earlier pass, named
 * pN.NAME; ops that read no recycled value run once (pass 0) and every pass
 * reads their outputs; the rest (the head, the loss) run only in the last
 * pass, under their own names.  Autograd gives a recycle op's output no
 * gradient, so only the last pass is differentiated. */
static int lower_recycle(fe_lw *L)
{
    const fe_section *tsec = section(L->s, "train");
    int64_t R = 1;
    if (tsec && get_int(L, tsec, "recycle", 1, 1, 64, &R)) return 2;
    int n0 = L->ninst, nrc = 0;
    char hint[384], clip[96];
    for (int i = 0; i < n0; i++) {
        L->inst[i].pass = 0;
        nrc += L->ops[L->inst[i].decl].kind == IR_OP_RECYCLE;
    }
    if (!nrc) {
        if (R > 1)
            return fe_kv_error(L->s, tsec, fe_get(tsec, "recycle"), "add an [op NAME] with kind = recycle, in = the "
                               "tensor fed back, out = its name in the next pass, shape = its shape",
                               "recycle = %lld, but no op is of kind recycle", (long long)R);
        return 0;
    }
    /* the first pass's value: an input of zeros per recycle op */
    char **zname = ir_xcalloc((size_t)n0 + 1, sizeof *zname);
    for (int i = 0; i < n0; i++) {
        const fe_opdecl *d = &L->ops[L->inst[i].decl];
        if (d->kind != IR_OP_RECYCLE) continue;
        zname[i] = fmt(L, "%s.zeros", L->inst[i].out[0]);
        if (fe_map_get(&L->tensor, zname[i]) >= 0 || fe_map_get(&L->producer, zname[i]) >= 0) {
            const char *taken = zname[i];   /* (owned by L, not by zname) */
            free(zname);
            return fe_error(L->s, d->sec->line, "recycling names the first pass's value NAME.zeros (NAME the "
                            "recycle op's out): rename the tensor", "name '%s' is taken",
                            fe_clip(taken, clip, sizeof clip));
        }
        if (check_name(L, d->sec, zname[i], "input", 0)) {   /* (the first pass's value is an input) */
            free(zname);
            return 2;
        }
        int id = ir_add_tensor(L->g, zname[i], IR_F32, IR_T_INPUT, d->ndim, d->shape, d->sec->line);
        ir_tensor *t = &L->g->t[id];
        t->data = IR_DATA_ZEROS;
        t->batch_dim = 0;
        t->stream = -1;
        fe_map_put(&L->tensor, t->name, id);
    }
    /* the instances' inputs by producer (CSR: consumers of each instance) */
    int *c0 = ir_xcalloc((size_t)n0 + 2, sizeof(int)), *cs, *fill = ir_xcalloc((size_t)n0 + 1, sizeof(int));
#define PROD(nm) (fe_map_get(&L->tensor, (nm)) >= 0 ? -1 : fe_map_get(&L->producer, (nm)))
    for (int i = 0; i < n0; i++)
        for (int k = 0; k < L->ops[L->inst[i].decl].nin; k++) {
            int p = PROD(L->inst[i].in[k]);
            if (p >= 0) c0[p + 1]++;
        }
    for (int i = 0; i < n0; i++) c0[i + 1] += c0[i];
    cs = ir_xmalloc(sizeof(int) * ((size_t)c0[n0] + 1));
    for (int i = 0; i < n0; i++)
        for (int k = 0; k < L->ops[L->inst[i].decl].nin; k++) {
            int p = PROD(L->inst[i].in[k]);
            if (p >= 0) cs[c0[p] + fill[p]++] = i;
        }
    /* dep: reads a recycled value (forward from the recycle ops); anc: the
       next pass needs it (backward from their inputs' producers) */
    char *dep = ir_xcalloc((size_t)n0 + 1, 1), *anc = ir_xcalloc((size_t)n0 + 1, 1);
    int *q = ir_xmalloc(sizeof(int) * ((size_t)n0 + 1)), nq = 0;
    for (int i = 0; i < n0; i++)
        if (zname[i]) dep[i] = 1, q[nq++] = i;
    for (int h = 0; h < nq; h++)
        for (int x = c0[q[h]]; x < c0[q[h] + 1]; x++)
            if (!dep[cs[x]]) dep[cs[x]] = 1, q[nq++] = cs[x];
    nq = 0;
    for (int i = 0; i < n0; i++) {
        if (!zname[i]) continue;
        int p = PROD(L->inst[i].in[0]);
        if (p >= 0 && dep[p] && !anc[p]) anc[p] = 1, q[nq++] = p;
    }
    for (int h = 0; h < nq; h++) {
        const fe_inst *in = &L->inst[q[h]];
        if (zname[q[h]]) continue;   /* (a recycle op's input is the pass before's) */
        for (int k = 0; k < L->ops[in->decl].nin; k++) {
            int p = PROD(in->in[k]);
            if (p >= 0 && dep[p] && !anc[p]) anc[p] = 1, q[nq++] = p;
        }
    }
    /* the copies of the earlier passes */
    int rc = 0;
    for (int c = 0; c + 1 < R && !rc; c++)
        for (int i = 0; i < n0 && !rc; i++) {
            if (!zname[i] && !(dep[i] && anc[i])) continue;
            const fe_opdecl *d = &L->ops[L->inst[i].decl];
            fe_inst *cp = IR_PUSH(L->inst, L->ninst, L->instcap);
            const fe_inst *or = &L->inst[i];
            memset(cp, 0, sizeof *cp);
            cp->decl = or->decl;
            cp->rep = or->rep;
            cp->pass = c;
            cp->orig = i;
            cp->op = -1;
            cp->name = fmt(L, "p%d.%s", c, or->name);
            for (int k = 0; k < d->nout; k++) {
                cp->out[k] = fmt(L, "p%d.%s", c, or->out[k]);
                if (fe_map_get(&L->tensor, cp->out[k]) >= 0 || fe_map_get(&L->producer, cp->out[k]) >= 0) {
                    snprintf(hint, sizeof hint, "recycling names the copies of the earlier passes pN.NAME: rename "
                             "'%s'", cp->out[k]);
                    rc = fe_error(L->s, d->sec->line, hint, "name '%s' is taken", fe_clip(cp->out[k], clip, sizeof clip));
                    break;
                }
                fe_map_put(&L->producer, cp->out[k], L->ninst - 1);
            }
            for (int k = 0; k < d->nin; k++) {
                int p = PROD(or->in[k]);
                if (zname[i]) cp->in[k] = c == 0 ? zname[i] : fmt(L, "p%d.%s", c - 1, or->in[k]);
                else if (p >= 0 && (zname[p] || (dep[p] && anc[p]))) cp->in[k] = fmt(L, "p%d.%s", c, or->in[k]);
                else cp->in[k] = or->in[k];
            }
        }
    /* the last pass: its recycle ops read the pass before's (or zeros) */
    for (int i = 0; i < n0 && !rc; i++) {
        if (dep[i]) L->inst[i].pass = (int)R - 1;
        if (zname[i]) L->inst[i].in[0] = R == 1 ? zname[i] : fmt(L, "p%lld.%s", (long long)R - 2, L->inst[i].in[0]);
    }
    for (int i = 0; i < L->ninst && !rc; i++) {
        fe_inst *in = &L->inst[i];
        in->wait = 0;
        for (int k = 0; k < L->ops[in->decl].nin; k++) in->wait += PROD(in->in[k]) >= 0;
    }
#undef PROD
    free(zname);
    free(c0);
    free(cs);
    free(fill);
    free(dep);
    free(anc);
    free(q);
    return rc;
}

/* Min-heap of instance indices: ready ops, the earliest in the spec first. */
typedef struct fe_heap {
    int *v;    /* elements */
    int n;     /* count */
    int cap;   /* allocated */
} fe_heap;

/* Add x to the heap. */
static void heap_push(fe_heap *h, int x)
{
    int i = h->n;
    *IR_PUSH(h->v, h->n, h->cap) = x;
    while (i > 0 && h->v[(i - 1) / 2] > h->v[i]) {
        int p = (i - 1) / 2, t = h->v[p];
        h->v[p] = h->v[i];
        h->v[i] = t;
        i = p;
    }
}

/* Remove and return the smallest element (the heap is not empty). */
static int heap_pop(fe_heap *h)
{
    int top = h->v[0];
    h->v[0] = h->v[--h->n];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && h->v[l] < h->v[m]) m = l;
        if (r < h->n && h->v[r] < h->v[m]) m = r;
        if (m == i) break;
        int t = h->v[m];
        h->v[m] = h->v[i];
        h->v[i] = t;
        i = m;
    }
    return top;
}

/* Some ops are left and none is ready: report a cycle among them. */
static int report_cycle(fe_lw *L)
{
    int start = 0;
    while (L->inst[start].done) start++;
    int *seen = ir_xcalloc((size_t)L->ninst, sizeof *seen);
    int *path = ir_xmalloc(sizeof *path * (size_t)L->ninst);
    int n = 0, cur = start;
    while (!seen[cur]) {
        seen[cur] = ++n;
        path[n - 1] = cur;
        const fe_inst *in = &L->inst[cur];
        int next = -1;
        for (int k = 0; k < L->ops[in->decl].nin && next < 0; k++) {
            int p = fe_map_get(&L->producer, in->in[k]);
            if (p >= 0 && !L->inst[p].done) next = p;
        }
        IR_ASSERT(next >= 0);
        cur = next;
    }
    /* path[seen[cur]-1 .. n-1] is the cycle, each op reading the next one's
     * output; print it the other way (producer -> consumer), from its
     * earliest op */
    int first = seen[cur] - 1, len = n - first, lo = first;
    for (int j = first; j < n; j++)
        if (path[j] < path[lo]) lo = j;
    ir_buf b = {0};
    for (int j = 0; j <= len; j++) {
        int idx = first + ((lo - first) - j + len) % len;
        if (j > 8 && j < len) {
            ir_bprintf(&b, " -> ...");
            j = len - 1;
            continue;
        }
        ir_bprintf(&b, "%s%s", j ? " -> " : "", L->inst[path[idx]].name);
    }
    const fe_opdecl *d = &L->ops[L->inst[path[lo]].decl];
    fe_kv_error(L->s, d->sec, d->in_kv, "each op's output feeds the next; one of these inputs must come from elsewhere",
                "ops form a cycle: %s", b.s);
    ir_buf_free(&b);
    free(seen);
    free(path);
    return 2;
}

/* ir_add_op failed for instance i: report it at the op's `in`. */
static int report_shapes(fe_lw *L, const fe_inst *in, const int *ids, ir_opkind kind, const char *err)
{
    const fe_opdecl *d = &L->ops[in->decl];
    ir_opinfo oinfo = op_info(L, d);
    if (kind != d->kind) oinfo = ir_ops[kind];   /* (attention given a bias: attention_ab) */
    const ir_opinfo *oi = &oinfo;
    ir_buf b = {0};
    char clip[96];
    ir_bprintf(&b, "inputs:");
    for (int k = 0; k < d->nin; k++) {
        const ir_tensor *t = &L->g->t[ids[k]];
        ir_bprintf(&b, "%s %s %s[", k ? "," : "", fe_clip(t->name, clip, sizeof clip), ir_dtype_name(t->dtype));
        for (int j = 0; j < t->ndim; j++) ir_bprintf(&b, "%s%lld", j ? "," : "", (long long)t->shape[j]);
        ir_bprintf(&b, "]");
    }
    if (oi->anno[0]) ir_bprintf(&b, "; %s is `%s`", oi->name, oi->anno);
    for (int k = 0; k < d->nin; k++) {   /* (a recycled value has the recycle op's declared shape) */
        int p = L->g->t[ids[k]].producer;
        if (p >= 0 && L->g->op[p].kind == IR_OP_RECYCLE)
            ir_bprintf(&b, "; %s comes from recycle op '%s', shaped by its `shape`", L->g->t[ids[k]].name,
                       L->g->op[p].name);
    }
    fe_kv_error(L->s, d->sec, d->in_kv, b.s, "op '%s' (%s): %s", fe_clip(in->name, clip, sizeof clip), oi->name, err);
    ir_buf_free(&b);
    return 2;
}

/* Add the instances to the graph in dependency order (Kahn's algorithm,
 * earliest in the spec first among the ready ones). */
static int lower_order(fe_lw *L)
{
    /* consumers of each instance, as a CSR list */
    int *cnt = ir_xcalloc((size_t)L->ninst + 1, sizeof *cnt);
    for (int i = 0; i < L->ninst; i++)
        for (int k = 0; k < L->ops[L->inst[i].decl].nin; k++) {
            int p = fe_map_get(&L->producer, L->inst[i].in[k]);
            if (p >= 0 && fe_map_get(&L->tensor, L->inst[i].in[k]) < 0) cnt[p + 1]++;
        }
    for (int i = 0; i < L->ninst; i++) cnt[i + 1] += cnt[i];
    int *use = ir_xmalloc(sizeof *use * (size_t)(cnt[L->ninst] + 1));
    int *fill = ir_xcalloc((size_t)L->ninst + 1, sizeof *fill);
    for (int i = 0; i < L->ninst; i++)
        for (int k = 0; k < L->ops[L->inst[i].decl].nin; k++) {
            int p = fe_map_get(&L->producer, L->inst[i].in[k]);
            if (p >= 0 && fe_map_get(&L->tensor, L->inst[i].in[k]) < 0) use[cnt[p] + fill[p]++] = i;
        }
    fe_heap h = {0};
    for (int i = 0; i < L->ninst; i++)
        if (L->inst[i].wait == 0) heap_push(&h, i);
    int added = 0, rc = 0;
    char err[512];
    while (h.n > 0 && !rc) {
        int i = heap_pop(&h);
        fe_inst *in = &L->inst[i];
        const fe_opdecl *d = &L->ops[in->decl];
        int ids[IR_MAXIO];
        for (int k = 0; k < d->nin; k++) ids[k] = fe_map_get(&L->tensor, in->in[k]);
        err[0] = '\0';
        int op, first;
        ir_opkind kind = d->kind;
        if (kind == IR_OP_ATTENTION_VL && L->g->t[ids[3]].dtype == IR_F32) {
            /* a 4th input of f32: an additive bias (H, T, S), not key lengths */
            kind = IR_OP_ATTENTION_AB;
            if (L->g->t[ids[3]].ndim != 3) {
                snprintf(err, sizeof err, "the 4th input of attention is the key lengths (i32, the batch dims) or "
                         "an additive bias (f32, [heads, T, S]); '%s' is f32 with %d dims", L->g->t[ids[3]].name,
                         L->g->t[ids[3]].ndim);
                rc = report_shapes(L, in, ids, kind, err);
                break;
            }
        }
        if (d->kind == IR_OP_CROSS_ENTROPY)   /* two ops: vocabulary-block statistics, then the loss */
            op = ir_add_cross_entropy(L->g, in->name, ids, in->out[0], d->iattr, d->fattr, d->sec->line, &first, err,
                                      sizeof err);
        else
            first = op = ir_add_op_attr(L->g, in->name, kind, d->nin, ids, (const char *const *)in->out,
                                        d->iattr, d->fattr, d->sec->line, err, sizeof err);
        if (op < 0) {
            rc = report_shapes(L, in, ids, kind, err[0] ? err : "the inputs do not fit the op");
            break;
        }
        for (int j = first; j <= op; j++) {
            ir_op *oj = &L->g->op[j];
            oj->block = d->block >= 0 ? L->blk[d->block].id : -1;
            oj->rep = in->rep;
            oj->pass = in->pass;
        }
        ir_op *o = &L->g->op[op];
        in->op = op;
        if (d->kind == IR_OP_RECYCLE) {   /* what it feeds back must have the declared shape */
            const ir_tensor *x = &L->g->t[ids[0]];
            int same = x->ndim == d->ndim;
            for (int j = 0; j < d->ndim && same; j++) same = x->shape[j] == d->shape[j];
            if (!same) {
                ir_buf b = {0};
                for (int j = 0; j < x->ndim; j++) ir_bprintf(&b, "%s%lld", j ? " " : "", (long long)x->shape[j]);
                char clip[96];
                rc = fe_kv_error(L->s, d->sec, fe_get(d->sec, "shape"), "shape is the shape of `in`, which the "
                                 "next pass reads", "recycle op '%s': in = %s has shape %s, not the op's shape",
                                 fe_clip(d->sec->name, clip, sizeof clip), x->name, b.s);
                ir_buf_free(&b);
                break;
            }
        }
        for (int k = 0; k < o->nout; k++) fe_map_put(&L->tensor, L->g->t[o->out[k]].name, o->out[k]);
        in->done = 1;
        added++;
        for (int u = cnt[i]; u < cnt[i + 1]; u++)
            if (--L->inst[use[u]].wait == 0) heap_push(&h, use[u]);
    }
    if (!rc && added < L->ninst) rc = report_cycle(L);
    for (int i = 0; i < L->ninst && !rc; i++)
        if (L->inst[i].orig >= 0) L->g->op[L->inst[i].op].orig = L->inst[L->inst[i].orig].op;
    free(h.v);
    free(cnt);
    free(use);
    free(fill);
    return rc;
}

/* ---------------------------------------------------------------- [train] [cluster] [plan] */

/* A token file ([train] key = PATH) needs an input that reads it (`stream
 * = K`).  1 when the graph has none, with a hint naming the inputs that
 * could (i32 [B, T]), else 0. */
static int no_token_input(fe_lw *L, const char *key, char *hint, size_t hintsz)
{
    ir_buf names = {0};
    int n = 0;
    for (int t = 0; t < L->g->nt; t++) {
        const ir_tensor *x = &L->g->t[t];
        if (x->kind != IR_T_INPUT) continue;
        if (x->stream >= 0) {
            ir_buf_free(&names);
            return 0;
        }
        if (x->dtype == IR_I32 && x->ndim == 2 && x->batch_dim == 0 && n < 4)
            ir_bprintf(&names, "%s[input %s]", n++ ? ", " : "", x->name);
    }
    static const char ks[] = "(K = 0: a row's tokens, K = 1: the next tokens, the targets)";
    if (n)
        snprintf(hint, hintsz, "add `stream = K` to %s %s, or leave %s out (synthetic data)", names.s, ks, key);
    else
        snprintf(hint, hintsz, "give the token inputs (i32, shape B T) `stream = K` %s, or leave %s out "
                 "(synthetic data)", ks, key);
    ir_buf_free(&names);
    return 1;
}

/* [train]  loss = TENSOR, optimizer = sgd|adamw, lr, weight_decay, beta1,
 *          beta2, eps, steps, micro_batches, data = synthetic|PATH,
 *          data_period, eval_data = PATH, eval_every, eval_steps,
 *          lr_schedule = constant|cosine, warmup_steps, min_lr, grad_clip,
 *          dtype = f32|bf16  (docs/model-spec.md) */
static int lower_train(fe_lw *L)
{
    const fe_section *sec = section(L->s, "train");
    ir_train *tr = &L->g->train;
    char hint[512], clip[96];
    if (!sec)
        return fe_error(L->s, -1, "add a [train] section with `loss = TENSOR` naming the output of a loss op",
                        "missing [train] section");
    const fe_kv *kv = fe_get(sec, "loss");
    int id = -1;
    if (fe_is_name(kv->val)) {
        char *real = resolve(L, -1, -1, kv->val);
        id = fe_map_get(&L->tensor, real);
    }
    if (id < 0)
        return fe_kv_error(L->s, sec, kv, unknown_hint(L, kv->val, -1, hint, sizeof hint), "unknown tensor '%s'",
                           fe_clip(kv->val, clip, sizeof clip));
    const ir_tensor *t = &L->g->t[id];
    if (t->producer < 0 || !(ir_ops[L->g->op[t->producer].kind].flags & OPF_LOSS)) {
        size_t used = (size_t)snprintf(hint, sizeof hint, "name the output of a loss op (");
        for (int k = 0, n = 0; k < IR_OP_COUNT; k++)
            if ((ir_ops[k].flags & OPF_LOSS) && (ir_ops[k].flags & OPF_USER))
                used += (size_t)snprintf(hint + used, sizeof hint - used, "%s%s", n++ ? ", " : "", ir_ops[k].name);
        used += (size_t)snprintf(hint + used, sizeof hint - used, ")");
        if (t->producer >= 0)
            snprintf(hint + used, sizeof hint - used, "; '%s' comes from op '%s' (%s)", fe_clip(kv->val, clip, sizeof clip),
                     L->g->op[t->producer].name, ir_op_kind_name(L->g, &L->g->op[t->producer]));
        return fe_kv_error(L->s, sec, kv, hint, "loss '%s' is not the output of a loss op", fe_clip(kv->val, clip, sizeof clip));
    }
    tr->loss = id;
    static const char *const optims[] = {"sgd", "adamw", NULL};
    int opt, sched;
    if (get_choice(L, sec, "optimizer", optims, 1, &opt)) return 2;
    tr->optimizer = opt ? IR_OP_ADAMW : IR_OP_SGD;
    if (get_float(L, sec, "lr", 1e-3, FE_POS, &tr->lr) ||
        get_float(L, sec, "weight_decay", 0, FE_NONNEG, &tr->weight_decay) ||
        get_float(L, sec, "beta1", 0.9, FE_UNIT, &tr->beta1) ||
        get_float(L, sec, "beta2", 0.999, FE_UNIT, &tr->beta2) ||
        get_float(L, sec, "eps", 1e-8, FE_POS, &tr->eps) ||
        get_int(L, sec, "steps", 10, 1, INT64_MAX, &tr->steps) ||
        get_int(L, sec, "micro_batches", 1, 1, INT64_MAX, &tr->micro_batches) ||
        get_int(L, sec, "data_period", 4, 1, INT64_MAX, &tr->data_period) ||
        get_int(L, sec, "eval_every", 0, 0, INT64_MAX, &tr->eval_every) ||
        get_int(L, sec, "eval_steps", 1, 1, INT64_MAX, &tr->eval_steps) ||
        get_int(L, sec, "warmup_steps", 0, 0, INT64_MAX, &tr->warmup) ||
        get_float(L, sec, "min_lr", 0, FE_NONNEG, &tr->min_lr) ||
        get_float(L, sec, "grad_clip", 0, FE_NONNEG, &tr->grad_clip))
        return 2;
    int64_t rcy;
    if (get_int(L, sec, "recycle", 1, 1, 64, &rcy)) return 2;   /* (lower_recycle unrolled the passes) */
    tr->recycle = (int)rcy;
    static const char *const scheds[] = {"constant", "cosine", NULL};
    if (get_choice(L, sec, "lr_schedule", scheds, 0, &sched)) return 2;
    tr->cosine = sched == 1;
    /* dtype = bf16: mixed precision, matmuls on bf16-rounded inputs (passes/lower.c) */
    static const char *const dtypes[] = {"f32", "bf16", NULL};
    int dt;
    if (get_choice(L, sec, "dtype", dtypes, 0, &dt)) return 2;
    tr->bf16 = dt == 1;
    /* storage = bf16 (dtype bf16's default): activations and their gradients stored in bf16
       (passes/precision.c); f32: only the matmuls' inputs rounded */
    int st;
    if (get_choice(L, sec, "storage", dtypes, dt, &st)) return 2;
    if (st == 1 && !tr->bf16)
        return fe_kv_error(L->s, sec, fe_get(sec, "storage"), "storage = bf16 goes with dtype = bf16 (mixed precision)",
                           "storage = bf16 under dtype = f32");
    tr->store16 = st == 1;
    /* data = synthetic | a token file (or a glob of shards); files are read
       by the rank programs, so only the text is checked here */
    static const char *const files[] = {"data", "eval_data"};
    for (int f = 0; f < 2; f++) {
        const fe_kv *dk = fe_get(sec, files[f]);
        if (!dk || strcmp(dk->val, "synthetic") == 0) continue;
        if (!dk->val[0] || strpbrk(dk->val, " \t") || strcmp(dk->val, "-") == 0)
            return fe_kv_error(L->s, sec, dk, "a path without blanks, e.g. data = data/tinytext_train.bin (a file "
                               "named - as ./-)", "%s: bad path '%s'", files[f], fe_clip(dk->val, clip, sizeof clip));
        if (no_token_input(L, files[f], hint, sizeof hint))
            return fe_kv_error(L->s, sec, dk, hint, "%s: no input reads tokens (none has `stream = K`), "
                               "so the file would be ignored", files[f]);
        if (f == 0) tr->data = ir_str(L->g, dk->val);
        else tr->eval_data = ir_str(L->g, dk->val);
    }
    if (tr->eval_data && !tr->data)
        return fe_kv_error(L->s, sec, fe_get(sec, "eval_data"), "add data = PATH (the training token file)",
                           "eval_data needs data: the stream inputs read tokens in training too");
    if (tr->eval_every && !tr->eval_data && !tr->data)
        return fe_kv_error(L->s, sec, fe_get(sec, "eval_every"),
                           "add data = PATH (the training token file) and, for held-out batches, eval_data = PATH",
                           "eval_every needs a token file: evaluation reads eval_data, else data");
    if (tr->min_lr > tr->lr)
        return fe_kv_error(L->s, sec, fe_get(sec, "min_lr"), NULL, "min_lr %g is above lr %g", tr->min_lr, tr->lr);
    return 0;
}

/* [cluster] devices = INT, device = cpu;
 * [plan] policy = dp|tp|hybrid, dp = INT, tp = INT, pp = INT, trans = CONSTRAINT {, CONSTRAINT},
 * stage = OPS STAGE {, OPS STAGE}, schedule = 1f1b|gpipe|zb-h1|interleaved|interlaced|KfKb, chunks = V,
 * order = TASKS {; TASKS},
 * recompute = BLOCK {, BLOCK}
 * (constraints, stages and orders are checked by the planner, which knows the ops) */
static int lower_cluster(fe_lw *L)
{
    const fe_section *cl = section(L->s, "cluster"), *pl = section(L->s, "plan");

    static const char *const pols[] = {"dp", "tp", "hybrid", "auto", NULL};
    static const char *const scheds[] = {"1f1b", "gpipe", "zb-h1", "interleaved", "interlaced",
                                         "KfKb (2f2b, 3f3b, ...)", NULL};
    int64_t n, dp, tp, pp, zero, chunks;
    int pol, sch, group = 1;
    const fe_kv *skv = pl ? fe_get(pl, "schedule") : NULL;
    char fl[2], bl[2];   /* the letters f and b, each with its terminator */
    int ka, kb, kn = 0;
    if (skv && sscanf(skv->val, "%d%1[f]%d%1[b]%n", &ka, fl, &kb, bl, &kn) == 4 && !skv->val[kn] &&
        strcmp(skv->val, "1f1b")) {
        /* kFkB: 1F1B over groups of k micro-batches */
        char clip[96];
        int rf = kb == 1 && ka > 1 && ka == L->g->train.recycle;   /* NfNb: recycling's passes, 1F1B over them */
        if (!rf && kb == 1 && ka > 1)
            return fe_kv_error(L->s, pl, skv, "NfNb runs a micro-batch's N forward passes (recycling: [train] recycle "
                               "= N) and its one backward", "schedule '%s': recycle is %d", fe_clip(skv->val, clip,
                               sizeof clip), L->g->train.recycle);
        if (!rf && (ka != kb || ka < 1 || ka > 4096))
            return fe_kv_error(L->s, pl, skv, "kFkB runs k forwards then k backwards: write 2f2b, 3f3b, ... "
                               "(1f1b for k = 1)", "schedule '%s': the forward and backward counts differ or are "
                               "out of range", fe_clip(skv->val, clip, sizeof clip));
        group = rf ? 1 : ka;
    }
    if (get_int(L, cl, "devices", 1, 1, FE_MAX_DEVICES, &n) ||
        get_choice(L, pl, "policy", pols, 0, &pol) || get_int(L, pl, "dp", 0, 1, FE_MAX_DEVICES, &dp) ||
        get_int(L, pl, "tp", 0, 1, FE_MAX_DEVICES, &tp) || get_int(L, pl, "pp", 1, 1, FE_MAX_DEVICES, &pp) ||
        (kn == 0 && get_choice(L, pl, "schedule", scheds, 0, &sch)) || get_int(L, pl, "zero", 0, 0, 3, &zero) ||
        get_int(L, pl, "chunks", 0, 1, 64, &chunks))
        return 2;
    /* the cost model's profile: built in, each figure overridable */
    const fe_kv *dk = cl ? fe_get(cl, "device") : NULL;
    size_t dl = dk ? strlen(dk->val) : 0;
    if (dk && (strchr(dk->val, '/') || (dl > 4 && !strcmp(dk->val + dl - 4, ".ini")))) {
        /* a profile file (nnsc-aot profile -o FILE): its [cluster] keys */
        fe_spec ps;
        char clip[96];
        if (fe_parse(dk->val, NULL, 0, &ps))
            return fe_kv_error(L->s, cl, dk, "write the file with nnsc-aot profile -o FILE", "device: profile '%s' "
                               "does not read", fe_clip(dk->val, clip, sizeof clip));
        const fe_section *pc = section(&ps, "cluster");
        const fe_kv *pd = pc ? fe_get(pc, "device") : NULL;
        const ir_profile *base = pd ? ir_profile_find(pd->val) : NULL;
        if (!base) {
            fe_spec_free(&ps);
            return fe_kv_error(L->s, cl, dk, "a profile file names a built-in device (device = cpu-host) and its "
                               "figures", "device: profile '%s' names no built-in device",
                               fe_clip(dk->val, clip, sizeof clip));
        }
        L->g->prof = *base;
        ir_profile *q = &L->g->prof;
        static const char *const fk[] = {"flops", "flops_bf16", "mem_bw", "memory", "link_bw", "link_lat", "net_bw",
                                         "net_lat", "weight_bw"};
        double *fv[] = {&q->flops, &q->flops_bf16, &q->mem_bw, &q->mem, &q->link_bw, &q->link_lat, &q->net_bw,
                        &q->net_lat, &q->weight_bw};
        for (int k = 0; k < 9; k++) {
            const fe_kv *x = fe_get(pc, fk[k]);
            char err[128];
            if (x && (fe_parse_float(x->val, fv[k], err, sizeof err) || *fv[k] < 0)) {
                fe_spec_free(&ps);
                return fe_kv_error(L->s, cl, dk, NULL, "device: profile '%s': %s = %s is not a number >= 0",
                                   fe_clip(dk->val, clip, sizeof clip), fk[k], x->val);
            }
        }
        q->name = ir_str(L->g, dk->val);
        fe_spec_free(&ps);
    } else if (dk) {
        const ir_profile *pf = ir_profile_find(dk->val);
        char clip[96], hint[256];
        if (!pf) {
            snprintf(hint, sizeof hint, "profiles: %s; or give flops, mem_bw, memory, link_bw, ... in [cluster]",
                     ir_profile_names());
            return fe_kv_error(L->s, cl, dk, hint, "unknown device '%s'", fe_clip(dk->val, clip, sizeof clip));
        }
        L->g->prof = *pf;
    }
    ir_profile *pf = &L->g->prof;
    int64_t pn;
    if (get_float(L, cl, "flops", pf->flops, FE_POS, &pf->flops) ||
        get_float(L, cl, "flops_bf16", pf->flops_bf16, FE_POS, &pf->flops_bf16) ||
        get_float(L, cl, "mem_bw", pf->mem_bw, FE_POS, &pf->mem_bw) ||
        get_float(L, cl, "memory", pf->mem, FE_POS, &pf->mem) ||
        get_float(L, cl, "link_bw", pf->link_bw, FE_POS, &pf->link_bw) ||
        get_float(L, cl, "link_lat", pf->link_lat, FE_NONNEG, &pf->link_lat) ||
        get_float(L, cl, "net_bw", pf->net_bw, FE_POS, &pf->net_bw) ||
        get_float(L, cl, "net_lat", pf->net_lat, FE_NONNEG, &pf->net_lat) ||
        get_float(L, cl, "weight_bw", pf->weight_bw, FE_NONNEG, &pf->weight_bw) ||
        get_int(L, cl, "per_node", pf->per_node, 1, FE_MAX_DEVICES, &pn))
        return 2;
    pf->per_node = (int)pn;
    static const char *const attn_kinds[] = {"fused", "unfused", NULL};
    if (get_choice(L, cl, "attention", attn_kinds, pf->attn_unfused, &pf->attn_unfused)) return 2;
    ir_planreq *r = &L->g->req;
    r->devices = (int)n;
    r->policy = ir_str(L->g, pols[pol]);
    r->dp = (int)dp;
    r->tp = (int)tp;
    r->pp = (int)pp;
    r->zero = (int)zero;
    if (kn) sch = group == 1 ? 0 : 5;
    static const int sched_of[] = {IR_SCHED_1F1B, IR_SCHED_GPIPE, IR_SCHED_ZBH1, IR_SCHED_INTERLEAVED,
                                   IR_SCHED_INTERLACED, IR_SCHED_KFKB};
    r->schedule = sched_of[sch];
    r->group = group;
    r->chunks = (int)chunks;   /* 0: not given (plan.c: 2 for interleaved, else 1) */
    const fe_kv *kv = pl ? fe_get(pl, "trans") : NULL;
    if (kv) {
        r->trans = ir_str(L->g, kv->val);
        r->trans_line = kv->line;
        if (fe_plan_trans(L->s, pl, kv, L->g)) return 2;
    }
    if ((kv = pl ? fe_get(pl, "stage") : NULL)) {
        r->stage = ir_str(L->g, kv->val);
        r->stage_line = kv->line;
        if (fe_plan_stage(L->s, pl, kv, L->g)) return 2;
    }
    if ((kv = pl ? fe_get(pl, "order") : NULL)) {
        r->order = ir_str(L->g, kv->val);
        r->order_line = kv->line;
    }
    if ((kv = pl ? fe_get(pl, "pp") : NULL)) r->pp_line = kv->line, r->pp_given = 1;
    if ((kv = pl ? fe_get(pl, "chunks") : NULL)) r->chunks_line = kv->line;
    if ((kv = pl ? fe_get(pl, "schedule") : NULL)) r->schedule_given = 1;
    {
        static const char *const tf[] = {"true", "false", NULL};
        int v;
        if (get_choice(L, pl, "balance", tf, 0, &v)) return 2;
        r->no_balance = v == 1;
        if (get_choice(L, pl, "fold_layers", tf, 0, &v)) return 2;
        r->no_fold_layers = v == 1;
        if (get_choice(L, pl, "per_op_trans", tf, 0, &v)) return 2;
        r->no_per_op = v == 1;
        if (get_choice(L, pl, "accumulate", tf, 0, &v)) return 2;
        r->no_accum = v == 1;
        if (get_choice(L, pl, "coshard_rung", tf, 0, &v)) return 2;
        r->no_cos_rung = v == 1;
        if (get_choice(L, pl, "sequence_parallel", tf, 1, &v)) return 2;
        r->seq_par = v == 0;
        r->seq_par_given = pl && fe_get(pl, "sequence_parallel");
        if (get_choice(L, pl, "grad_buckets", tf, 0, &v)) return 2;
        r->no_grad_buckets = v == 1;
    }
    if ((kv = pl ? fe_get(pl, "zero") : NULL)) r->zero_line = kv->line, r->zero_given = 1;
    if ((kv = pl ? fe_get(pl, "stage_tp") : NULL)) {
        r->stage_tp = ir_str(L->g, kv->val);
        r->stage_tp_line = kv->line;
        if (fe_plan_stage_tp(L->s, pl, kv, L->g)) return 2;
    }
    if ((kv = pl ? fe_get(pl, "coshard") : NULL)) {
        r->coshard = ir_str(L->g, kv->val);
        r->coshard_line = kv->line;
        if (fe_plan_coshard(L->s, pl, kv, L->g)) return 2;
    }
    if ((kv = pl ? fe_get(pl, "recompute") : NULL)) {
        r->recompute = ir_str(L->g, kv->val);
        r->recompute_line = kv->line;
        if (fe_plan_recompute(L->s, pl, kv, L->g)) return 2;
    }
    const fe_kv *pk = pl ? fe_get(pl, "policy") : NULL;
    if (pk) r->policy_line = pk->line;
    return 0;
}

/* ---------------------------------------------------------------- entry points */

/* Free what the lowering owns (not the graph). */
static void lower_free(fe_lw *L)
{
    for (int i = 0; i < L->nstrs; i++) free(L->strs[i]);
    free(L->strs);
    free(L->dims.d);
    fe_map_free(&L->dims.idx);
    free(L->blk);
    free(L->ops);
    free(L->inst);
    free(L->names);
    fe_map_free(&L->name_idx);
    fe_map_free(&L->alias);
    fe_map_free(&L->blk_idx);
    fe_map_free(&L->blk_pre);
    free(L->sec_op);
    fe_map_free(&L->tensor);
    fe_map_free(&L->producer);
}

/* Warn about every [param] that no op reads: it gets no gradient, so it is
 * never trained, yet it is initialised, checkpointed and counted.  Once per
 * process: the plan search loads the spec again for its candidates. */
static void warn_unused_params(const fe_lw *L)
{
    static atomic_int warned;
    const ir_graph *g = L->g;
    char *read = ir_xcalloc((size_t)g->nt + 1, 1);
    for (int i = 0; i < g->nop; i++)
        for (int k = 0; k < g->op[i].nin; k++) read[g->op[i].in[k]] = 1;
    /* per header line (a [param]'s tensors, one per repeat in a block, share its line): 1 none read, 2 one is */
    char *state = ir_xcalloc((size_t)L->s->nlines + 2, 1);
    int unread = 0;
    for (int t = 0; t < g->nt; t++) {
        const ir_tensor *x = &g->t[t];
        if (x->kind != IR_T_PARAM || x->line <= 0 || x->line > L->s->nlines) continue;
        if (read[t]) state[x->line] = 2;
        else if (!state[x->line]) state[x->line] = 1;
    }
    for (int i = 0; i < L->s->nsec; i++) unread += is_kind(&L->s->sec[i], "param") && state[L->s->sec[i].line] == 1;
    if (unread && !atomic_exchange(&warned, 1))
        for (int i = 0; i < L->s->nsec; i++) {
            const fe_section *sec = &L->s->sec[i];
            if (!is_kind(sec, "param") || state[sec->line] != 1) continue;
            char clip[96];
            fprintf(stderr, "%s:%d: warning: param '%s' is read by no op: it is never trained (no gradient reaches "
                    "it), yet it is initialised, saved in checkpoints and counted in the model's parameters\n"
                    "  hint: name it in an op's `in`, or remove [param %s]\n", L->s->file, sec->line,
                    fe_clip(sec->name, clip, sizeof clip), fe_clip(sec->name, clip, sizeof clip));
        }
    free(state);
    free(read);
}

/* g is (re)initialised here; on failure it is freed again, so the caller
 * has nothing to clean up either way but ir_graph_free after success. */
static int lower_fold(const fe_spec *s, ir_graph *g, int64_t batch_div, int layers)
{
    fe_lw L;
    memset(&L, 0, sizeof L);
    L.s = s;
    L.g = g;
    L.batch_div = batch_div;
    L.layers = layers;
    ir_graph_init(g);
    g->file = ir_str(g, s->file);
    int bad = lower_model(&L) || lower_dims(&L) || lower_blocks(&L) || lower_customs(&L) || lower_opdecls(&L) ||
              lower_names(&L) || lower_tensors(&L) || lower_complete(&L) || lower_insts(&L) || lower_recycle(&L) || lower_order(&L) ||
              lower_train(&L) || lower_cluster(&L);
    if (!bad) warn_unused_params(&L);
    lower_free(&L);
    if (bad) {
        ir_graph_free(g);
        return 2;
    }
    return 0;
}

int fe_lower(const fe_spec *s, ir_graph *g) { return lower_fold(s, g, 1, 0); }

int fe_load_fold(const char *path, const char *const *sets, int nset, int64_t batch_div, int layers, ir_graph *g)
{
    fe_spec s;
    ir_graph_init(g);
    if (fe_parse(path, sets, nset, &s)) return 2;
    int rc = lower_fold(&s, g, batch_div, layers);
    fe_spec_free(&s);
    return rc;
}

int fe_load(const char *path, const char *const *sets, int nset, ir_graph *g)
{
    return fe_load_fold(path, sets, nset, 1, 0, g);
}
