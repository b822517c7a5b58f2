/* manifest.c -- the MANIFEST text the compiler embeds -> rt_manifest.
 *
 * The format is in rt.h.  The parser is strict: every record is checked
 * (field counts, numbers, ranges, the order of ids, boxes inside shapes,
 * boxes inside the arena), because a manifest that disagrees with the code
 * that was generated next to it would otherwise corrupt memory silently.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "io/rt_io.h"

/* A line split into space-separated tokens. */
typedef struct man_line {
    int lineno;       /* 1-based line number */
    char *text;       /* the line, copied, NUL-terminated (for messages) */
    char *work;       /* a second copy, cut into tokens */
    char **tok;       /* tokens (pointers into work) */
    int ntok;         /* number of tokens */
    int pos;          /* next token to read */
} man_line;

/* Parser state: where to report errors. */
typedef struct man_parser {
    man_line *ln;     /* current line */
    char *err;        /* message buffer */
    size_t errlen;    /* its size */
    int failed;       /* 1 once an error is recorded */
} man_parser;

/* Record the first error: "line N: what (in "LINE")". */
static void man_err(man_parser *ps, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void man_err(man_parser *ps, const char *fmt, ...)
{
    if (ps->failed)
        return;
    ps->failed = 1;
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (ps->ln)
        snprintf(ps->err, ps->errlen, "line %d: %s (in \"%.120s\")", ps->ln->lineno, what,
                 ps->ln->text);
    else
        snprintf(ps->err, ps->errlen, "%s", what);
}

/* Next token of the line, or NULL (and an error naming what was expected). */
static const char *man_tok(man_parser *ps, const char *what)
{
    man_line *l = ps->ln;
    if (l->pos >= l->ntok) {
        man_err(ps, "missing %s", what);
        return NULL;
    }
    return l->tok[l->pos++];
}

/* Expect the literal keyword kw next. */
static int man_kw(man_parser *ps, const char *kw)
{
    const char *t = man_tok(ps, kw);
    if (!t)
        return 1;
    if (strcmp(t, kw) != 0) {
        man_err(ps, "expected '%s', found '%s'", kw, t);
        return 1;
    }
    return 0;
}

/* Next token as an integer in [min, max]. */
static int man_i64(man_parser *ps, const char *what, int64_t min, int64_t max, int64_t *out)
{
    const char *t = man_tok(ps, what);
    if (!t)
        return 1;
    char *end;
    errno = 0;
    long long v = strtoll(t, &end, 10);
    if (errno || end == t || *end) {
        man_err(ps, "%s: '%s' is not an integer", what, t);
        return 1;
    }
    if (v < min || v > max) {
        man_err(ps, "%s: %lld is out of range [%lld, %lld]", what, v, (long long)min,
                (long long)max);
        return 1;
    }
    *out = v;
    return 0;
}

/* Next token as an unsigned 64-bit integer. */
static int man_u64(man_parser *ps, const char *what, uint64_t *out)
{
    const char *t = man_tok(ps, what);
    if (!t)
        return 1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(t, &end, 10);
    if (errno || end == t || *end || t[0] == '-') {
        man_err(ps, "%s: '%s' is not an unsigned integer", what, t);
        return 1;
    }
    *out = v;
    return 0;
}

/* Next token as a finite real number. */
static int man_f64(man_parser *ps, const char *what, double *out)
{
    const char *t = man_tok(ps, what);
    if (!t)
        return 1;
    char *end;
    errno = 0;
    double v = strtod(t, &end);
    if (end == t || *end || !isfinite(v)) {
        man_err(ps, "%s: '%s' is not a finite number", what, t);
        return 1;
    }
    *out = v;
    return 0;
}

/* Next token as a name (copied into out, at most RT_NAME_MAX-1 bytes). */
static int man_name(man_parser *ps, const char *what, char *out)
{
    const char *t = man_tok(ps, what);
    if (!t)
        return 1;
    if (strlen(t) >= RT_NAME_MAX) {
        man_err(ps, "%s is longer than %d bytes", what, RT_NAME_MAX - 1);
        return 1;
    }
    strcpy(out, t);
    return 0;
}

/* Next token as a dtype. */
static int man_dtype(man_parser *ps, rt_dtype *out)
{
    const char *t = man_tok(ps, "dtype");
    if (!t)
        return 1;
    if (!strcmp(t, "f32"))
        *out = RT_F32;
    else if (!strcmp(t, "i32"))
        *out = RT_I32;
    else {
        man_err(ps, "unknown dtype '%s' (expected f32 or i32)", t);
        return 1;
    }
    return 0;
}

/* NDIM D0 .. DNDIM-1 */
static int man_shape(man_parser *ps, int *ndim, int64_t *shape)
{
    int64_t nd;
    if (man_i64(ps, "ndim", 0, RT_MAXDIM, &nd))
        return 1;
    *ndim = (int)nd;
    int64_t numel = 1;
    for (int d = 0; d < *ndim; d++) {
        if (man_i64(ps, "dimension", 1, INT64_C(1) << 40, &shape[d]))
            return 1;
        numel *= shape[d];   /* both factors <= 2^40: no overflow */
        if (numel > (INT64_C(1) << 40)) {
            man_err(ps, "tensor has more than 2^40 elements");
            return 1;
        }
    }
    return 0;
}

/* The line must have no tokens left. */
static int man_end_of_line(man_parser *ps)
{
    man_line *l = ps->ln;
    if (l->pos < l->ntok) {
        man_err(ps, "unexpected '%s' at the end of the record", l->tok[l->pos]);
        return 1;
    }
    return 0;
}

/* Grow an array of n elem-byte records to hold n+1 (capacity 4, 8, 16, ...). */
static void *man_grow(void *p, int n, size_t elem)
{
    if (n == 0 || (n >= 4 && (n & (n - 1)) == 0)) {   /* full: double */
        size_t cap = n ? (size_t)n * 2 : 4;
        p = realloc(p, cap * elem);
        if (!p)
            rt_fatal(NULL, 1, "out of memory parsing the manifest");
    }
    return p;
}

/* group ID N R0 .. RN-1 */
static int man_group(man_parser *ps, rt_manifest *m)
{
    int64_t id, n;
    if (m->world <= 0) {
        man_err(ps, "'group' before 'rank R world W'");
        return 1;
    }
    if (man_i64(ps, "group id", 0, INT32_MAX, &id) || man_i64(ps, "group size", 1, m->world, &n))
        return 1;
    if (id != m->ngroups) {
        man_err(ps, "group id %lld out of order (expected %d)", (long long)id, m->ngroups);
        return 1;
    }
    m->groups = man_grow(m->groups, m->ngroups, sizeof *m->groups);
    rt_group *g = &m->groups[m->ngroups++];
    g->n = (int)n;
    g->ranks = calloc((size_t)n, sizeof *g->ranks);
    if (!g->ranks) {
        man_err(ps, "out of memory");
        return 1;
    }
    for (int j = 0; j < g->n; j++) {
        int64_t r;
        if (man_i64(ps, "group member", 0, m->world - 1, &r))
            return 1;
        if (j > 0 && r <= g->ranks[j - 1]) {
            man_err(ps, "group members must be distinct and ascending");
            return 1;
        }
        g->ranks[j] = (int)r;
    }
    return man_end_of_line(ps);
}

/* init KIND A B */
static int man_init(man_parser *ps, rt_param *p)
{
    static const char *const kinds[] = {"zeros", "ones", "const", "normal", "uniform"};
    if (man_kw(ps, "init"))
        return 1;
    const char *t = man_tok(ps, "init kind");
    if (!t)
        return 1;
    int k = -1;
    for (int j = 0; j < 5; j++)
        if (!strcmp(t, kinds[j]))
            k = j;
    if (k < 0) {
        man_err(ps, "unknown init '%s' (expected zeros, ones, const, normal or uniform)", t);
        return 1;
    }
    p->init = (rt_init_kind)k;
    if (man_f64(ps, "init argument A", &p->a) || man_f64(ps, "init argument B", &p->b))
        return 1;
    if (p->init == RT_INIT_NORMAL && p->a < 0) {
        man_err(ps, "normal init: standard deviation %g is negative", p->a);
        return 1;
    }
    if (p->init == RT_INIT_UNIFORM && !(p->a <= p->b)) {
        man_err(ps, "uniform init: A %g is greater than B %g", p->a, p->b);
        return 1;
    }
    return 0;
}

/* `off OFFSET writer W` closing a param or state line; checks the box fits the arena. */
static int man_placement(man_parser *ps, const rt_manifest *m, rt_param *p, const char *what)
{
    int64_t off, w;
    if (man_kw(ps, "off") || man_i64(ps, "arena offset", 0, m->arena, &off) ||
        man_kw(ps, "writer") || man_i64(ps, "writer flag", 0, 1, &w))
        return 1;
    p->off = off;
    p->writer = (int)w;
    if (off % 4) {
        man_err(ps, "arena offset %lld is not 4-byte aligned", (long long)off);
        return 1;
    }
    if (rt_box_numel(p->ndim, p->lo, p->hi) * 4 > m->arena - off) {
        man_err(ps, "%s box of %lld bytes at offset %lld overruns the %lld-byte arena", what,
                (long long)(rt_box_numel(p->ndim, p->lo, p->hi) * 4), (long long)off,
                (long long)m->arena);
        return 1;
    }
    return man_end_of_line(ps);
}

/* IDX NAME DTYPE NDIM D.. box LO HI ..: the start of a param or state line,
 * appended to *arr (*n entries so far). */
static rt_param *man_boxed(man_parser *ps, const rt_manifest *m, rt_param **arr, int *n,
                           const char *what)
{
    int64_t idx;
    if (m->arena < 0) {
        man_err(ps, "'%s' before 'arena BYTES'", what);
        return NULL;
    }
    if (man_i64(ps, "index", 0, INT32_MAX, &idx))
        return NULL;
    if (idx != *n) {
        man_err(ps, "%s index %lld out of order (expected %d)", what, (long long)idx, *n);
        return NULL;
    }
    *arr = man_grow(*arr, *n, sizeof **arr);
    rt_param *p = &(*arr)[(*n)++];
    memset(p, 0, sizeof *p);
    p->of = -1;
    if (man_name(ps, "name", p->name) || man_dtype(ps, &p->dtype) ||
        man_shape(ps, &p->ndim, p->shape) || man_kw(ps, "box"))
        return NULL;
    for (int d = 0; d < p->ndim; d++) {
        if (man_i64(ps, "box lo", 0, p->shape[d] - 1, &p->lo[d]) ||
            man_i64(ps, "box hi", p->lo[d] + 1, p->shape[d], &p->hi[d]))
            return NULL;
    }
    p->key = rt_fnv1a64(p->name);
    return p;
}

/* param IDX NAME DTYPE NDIM D.. box LO HI .. init KIND A B [import NAME T] off OFFSET writer W */
static int man_param(man_parser *ps, rt_manifest *m)
{
    rt_param *p = man_boxed(ps, m, &m->params, &m->nparams, "param");
    if (!p || man_init(ps, p))
        return 1;
    man_line *l = ps->ln;   /* optional: import NAME T */
    if (l->pos < l->ntok && !strcmp(l->tok[l->pos], "import")) {
        int64_t tr;
        l->pos++;
        if (man_name(ps, "import name", p->import) || man_i64(ps, "import transposed flag", 0, 1, &tr))
            return 1;
        if (tr && p->ndim != 2) {
            man_err(ps, "param %s: only a 2-D param is imported transposed", p->name);
            return 1;
        }
        p->import_t = (int)tr;
    }
    return man_placement(ps, m, p, "param");
}

/* state IDX NAME DTYPE NDIM D.. box LO HI .. of PARAM off OFFSET writer W
 * (PARAM: a param line above, of the same dtype and shape). */
static int man_state(man_parser *ps, rt_manifest *m)
{
    rt_param *p = man_boxed(ps, m, &m->states, &m->nstates, "state");
    if (!p || man_kw(ps, "of"))
        return 1;
    const char *of = man_tok(ps, "param name");
    if (!of)
        return 1;
    for (int k = 0; k < m->nparams; k++)
        if (!strcmp(m->params[k].name, of))
            p->of = k;
    if (p->of < 0) {
        man_err(ps, "state %s is 'of' param %s, which is not a param of this rank "
                    "(params come before state lines)", p->name, of);
        return 1;
    }
    const rt_param *q = &m->params[p->of];
    if (q->dtype != p->dtype || q->ndim != p->ndim ||
        memcmp(q->shape, p->shape, sizeof q->shape) != 0) {
        man_err(ps, "state %s has another dtype or shape than its param %s", p->name, of);
        return 1;
    }
    return man_placement(ps, m, p, "state");
}

/* input IDX NAME DTYPE NDIM D.. dist normal|int RANGE|zeros period P
 * (RANGE is required for int and may be left out for normal), or
 * input IDX NAME i32 2 B T dist stream K [int RANGE] period P
 * (int RANGE: the synthetic values of a run without a data file). */
static int man_input(man_parser *ps, rt_manifest *m)
{
    int64_t idx;
    if (man_i64(ps, "input index", 0, INT32_MAX, &idx))
        return 1;
    if (idx != m->ninputs) {
        man_err(ps, "input index %lld out of order (expected %d)", (long long)idx, m->ninputs);
        return 1;
    }
    m->inputs = man_grow(m->inputs, m->ninputs, sizeof *m->inputs);
    rt_input *in = &m->inputs[m->ninputs++];
    memset(in, 0, sizeof *in);
    if (man_name(ps, "input name", in->name) || man_dtype(ps, &in->dtype) ||
        man_shape(ps, &in->ndim, in->shape) || man_kw(ps, "dist"))
        return 1;
    in->key = rt_fnv1a64(in->name);
    const char *t = man_tok(ps, "distribution");
    if (!t)
        return 1;
    if (!strcmp(t, "normal")) {
        in->dist = RT_DIST_NORMAL;
        if (in->dtype != RT_F32) {
            man_err(ps, "dist normal needs dtype f32");
            return 1;
        }
        man_line *l = ps->ln;
        if (l->pos < l->ntok && strcmp(l->tok[l->pos], "period") != 0 &&
            man_i64(ps, "range", 0, INT64_MAX, &in->range))
            return 1;
    } else if (!strcmp(t, "int")) {
        in->dist = RT_DIST_INT;
        if (in->dtype != RT_I32) {
            man_err(ps, "dist int needs dtype i32");
            return 1;
        }
        if (man_i64(ps, "range", 1, INT32_MAX, &in->range))
            return 1;
    } else if (!strcmp(t, "zeros")) {
        in->dist = RT_DIST_ZEROS;
        if (in->dtype != RT_F32) {
            man_err(ps, "dist zeros needs dtype f32");
            return 1;
        }
    } else if (!strcmp(t, "stream")) {
        in->dist = RT_DIST_STREAM;
        if (in->dtype != RT_I32 || in->ndim != 2) {
            man_err(ps, "dist stream needs an i32 input of shape B T");
            return 1;
        }
        if (man_i64(ps, "stream offset", 0, INT32_MAX, &in->stream))
            return 1;
        man_line *l = ps->ln;
        if (l->pos < l->ntok && !strcmp(l->tok[l->pos], "int")) {
            l->pos++;
            if (man_i64(ps, "synthetic range", 1, INT32_MAX, &in->range))
                return 1;
        }
        m->nstream++;
    } else {
        man_err(ps, "unknown distribution '%s' (expected normal, int, zeros or stream)", t);
        return 1;
    }
    if (man_kw(ps, "period") || man_i64(ps, "period", 1, INT64_MAX, &in->period))
        return 1;
    return man_end_of_line(ps);
}

/* Which of the required header records have been seen. */
enum {
    MAN_SEEN_MODEL = 1,
    MAN_SEEN_RANK = 2,
    MAN_SEEN_ARENA = 4,
    MAN_SEEN_STEPS = 8,
    MAN_SEEN_MB = 16,
    MAN_SEEN_SEED = 32,
    MAN_SEEN_LR = 64,
    MAN_SEEN_ALL_REQUIRED = 63,
    MAN_SEEN_DATA = 128,
    MAN_SEEN_EVAL_DATA = 256,
    MAN_SEEN_EVAL_EVERY = 512,
    MAN_SEEN_EVAL_STEPS = 1024,
    MAN_SEEN_SCHEDULE = 2048,
    MAN_SEEN_CLIP = 4096,
    MAN_SEEN_TOKENS = 8192,
    MAN_SEEN_MESH = 16384,
    MAN_SEEN_PARAM_COUNT = 32768,
    MAN_SEEN_FLOPS = 65536,
    MAN_SEEN_DTYPE = 131072,
};

/* Mark a once-only record as seen; error if it was already. */
static int man_once(man_parser *ps, int *seen, int bit, const char *what)
{
    if (*seen & bit) {
        man_err(ps, "'%s' given twice", what);
        return 1;
    }
    *seen |= bit;
    return 0;
}

/* A path, or "-" for none (*out stays NULL). */
static int man_path(man_parser *ps, const char *what, char **out)
{
    const char *t = man_tok(ps, what);
    if (!t)
        return 1;
    if (strcmp(t, "-") != 0) {
        *out = strdup(t);
        if (!*out) {
            man_err(ps, "out of memory");
            return 1;
        }
    }
    return man_end_of_line(ps);
}

/* schedule constant|cosine warmup W min_lr_frac F */
static int man_schedule(man_parser *ps, rt_manifest *m)
{
    const char *t = man_tok(ps, "schedule kind");
    if (!t)
        return 1;
    if (!strcmp(t, "constant"))
        m->sched = RT_SCHED_CONSTANT;
    else if (!strcmp(t, "cosine"))
        m->sched = RT_SCHED_COSINE;
    else {
        man_err(ps, "unknown schedule '%s' (expected constant or cosine)", t);
        return 1;
    }
    if (man_kw(ps, "warmup") || man_i64(ps, "warmup steps", 0, INT64_MAX, &m->warmup) ||
        man_kw(ps, "min_lr_frac") || man_f64(ps, "min_lr_frac", &m->min_lr_frac))
        return 1;
    if (m->min_lr_frac < 0 || m->min_lr_frac > 1) {
        man_err(ps, "min_lr_frac %g is outside [0, 1]", m->min_lr_frac);
        return 1;
    }
    return man_end_of_line(ps);
}

/* mesh dp D tp T policy POLICY (after `rank R world W`; D x T = W) */
static int man_mesh(man_parser *ps, rt_manifest *m)
{
    int64_t dp, tp;
    if (m->world <= 0) {
        man_err(ps, "'mesh' before 'rank R world W'");
        return 1;
    }
    int64_t pp = 1;
    if (man_kw(ps, "dp") || man_i64(ps, "dp degree", 1, m->world, &dp) || man_kw(ps, "tp") ||
        man_i64(ps, "tp degree", 1, m->world, &tp))
        return 1;
    /* pipeline stages: optional, 1 without */
    man_line *l = ps->ln;
    if (l->pos < l->ntok && !strcmp(l->tok[l->pos], "pp") &&
        (man_kw(ps, "pp") || man_i64(ps, "pp degree", 1, m->world, &pp)))
        return 1;
    if (man_kw(ps, "policy"))
        return 1;
    if (dp * tp * pp != m->world) {
        man_err(ps, "mesh dp %lld x tp %lld x pp %lld is not the world of %d", (long long)dp,
                (long long)tp, (long long)pp, m->world);
        return 1;
    }
    const char *t = man_tok(ps, "policy");
    if (!t)
        return 1;
    if (strlen(t) >= sizeof m->policy) {
        man_err(ps, "policy '%s' is longer than %d bytes", t, (int)sizeof m->policy - 1);
        return 1;
    }
    strcpy(m->policy, t);
    m->mesh_dp = (int)dp;
    m->mesh_tp = (int)tp;
    m->mesh_pp = (int)pp;
    return man_end_of_line(ps);
}

/* The records that describe the run for its banner and MFU (mesh, model
 * size, FLOPs, matmul precision); 1 if kind is none of them.  *rc is the
 * parse result. */
static int man_info_record(man_parser *ps, rt_manifest *m, int *seen, const char *kind, int *rc)
{
    if (!strcmp(kind, "mesh")) {
        *rc = man_once(ps, seen, MAN_SEEN_MESH, kind) || man_mesh(ps, m);
    } else if (!strcmp(kind, "param_count")) {
        *rc = man_once(ps, seen, MAN_SEEN_PARAM_COUNT, kind) ||
              man_i64(ps, "param_count", 0, INT64_MAX, &m->param_count) || man_end_of_line(ps);
    } else if (!strcmp(kind, "flops_per_step")) {
        *rc = man_once(ps, seen, MAN_SEEN_FLOPS, kind) ||
              man_f64(ps, "flops_per_step", &m->flops_per_step) || man_end_of_line(ps);
        if (!*rc && m->flops_per_step < 0) {
            man_err(ps, "flops_per_step %g is negative", m->flops_per_step);
            *rc = 1;
        }
    } else if (!strcmp(kind, "dtype")) {
        const char *t = NULL;
        *rc = man_once(ps, seen, MAN_SEEN_DTYPE, kind) || !(t = man_tok(ps, "dtype"));
        if (!*rc && strcmp(t, "f32") != 0 && strcmp(t, "bf16") != 0) {
            man_err(ps, "unknown dtype '%s' (expected f32 or bf16)", t);
            *rc = 1;
        }
        if (!*rc) {
            m->bf16 = !strcmp(t, "bf16");
            *rc = man_end_of_line(ps);
        }
    } else {
        return 1;
    }
    return 0;
}

/* The records of a training run (data files, evaluation, schedule, clipping);
 * 1 if kind is none of them.  *rc is the parse result. */
static int man_train_record(man_parser *ps, rt_manifest *m, int *seen, const char *kind, int *rc)
{
    if (!strcmp(kind, "data")) {
        *rc = man_once(ps, seen, MAN_SEEN_DATA, kind) || man_path(ps, "data path", &m->data);
    } else if (!strcmp(kind, "eval_data")) {
        *rc = man_once(ps, seen, MAN_SEEN_EVAL_DATA, kind) ||
              man_path(ps, "eval_data path", &m->eval_data);
    } else if (!strcmp(kind, "eval_every")) {
        *rc = man_once(ps, seen, MAN_SEEN_EVAL_EVERY, kind) ||
              man_i64(ps, "eval_every", 0, INT64_MAX, &m->eval_every) || man_end_of_line(ps);
    } else if (!strcmp(kind, "eval_steps")) {
        *rc = man_once(ps, seen, MAN_SEEN_EVAL_STEPS, kind) ||
              man_i64(ps, "eval_steps", 1, INT64_MAX, &m->eval_steps) || man_end_of_line(ps);
    } else if (!strcmp(kind, "schedule")) {
        *rc = man_once(ps, seen, MAN_SEEN_SCHEDULE, kind) || man_schedule(ps, m);
    } else if (!strcmp(kind, "clip")) {
        *rc = man_once(ps, seen, MAN_SEEN_CLIP, kind) || man_f64(ps, "clip", &m->clip) ||
              man_end_of_line(ps);
        if (!*rc && m->clip < 0) {
            man_err(ps, "clip %g is negative", m->clip);
            *rc = 1;
        }
    } else if (!strcmp(kind, "tokens_per_step")) {
        *rc = man_once(ps, seen, MAN_SEEN_TOKENS, kind) ||
              man_i64(ps, "tokens_per_step", 0, INT64_MAX, &m->tokens_per_step) ||
              man_end_of_line(ps);
    } else {
        return 1;
    }
    return 0;
}

/* One record (the line's first token is its kind). */
static int man_record(man_parser *ps, rt_manifest *m, int *seen)
{
    const char *kind = man_tok(ps, "record");
    if (!strcmp(kind, "model")) {
        return man_once(ps, seen, MAN_SEEN_MODEL, kind) || man_name(ps, "model name", m->model) ||
               man_end_of_line(ps);
    } else if (!strcmp(kind, "rank")) {
        int64_t r, w;
        if (man_once(ps, seen, MAN_SEEN_RANK, kind) || man_i64(ps, "rank", 0, INT32_MAX - 1, &r) ||
            man_kw(ps, "world") || man_i64(ps, "world", 1, INT32_MAX, &w))
            return 1;
        if (r >= w) {
            man_err(ps, "rank %lld is not below world %lld", (long long)r, (long long)w);
            return 1;
        }
        m->rank = (int)r;
        m->world = (int)w;
        return man_end_of_line(ps);
    } else if (!strcmp(kind, "arena")) {
        return man_once(ps, seen, MAN_SEEN_ARENA, kind) ||
               man_i64(ps, "arena bytes", 0, INT64_C(1) << 46, &m->arena) || man_end_of_line(ps);
    } else if (!strcmp(kind, "steps")) {
        return man_once(ps, seen, MAN_SEEN_STEPS, kind) ||
               man_i64(ps, "steps", 0, INT64_MAX, &m->steps) || man_end_of_line(ps);
    } else if (!strcmp(kind, "micro_batches")) {
        return man_once(ps, seen, MAN_SEEN_MB, kind) ||
               man_i64(ps, "micro_batches", 1, INT64_MAX, &m->micro_batches) ||
               man_end_of_line(ps);
    } else if (!strcmp(kind, "seed")) {
        return man_once(ps, seen, MAN_SEEN_SEED, kind) || man_u64(ps, "seed", &m->seed) ||
               man_end_of_line(ps);
    } else if (!strcmp(kind, "lr")) {
        return man_once(ps, seen, MAN_SEEN_LR, kind) || man_f64(ps, "lr", &m->lr) ||
               man_end_of_line(ps);
    } else if (!strcmp(kind, "group")) {
        return man_group(ps, m);
    } else if (!strcmp(kind, "param")) {
        return man_param(ps, m);
    } else if (!strcmp(kind, "state")) {
        return man_state(ps, m);
    } else if (!strcmp(kind, "input")) {
        return man_input(ps, m);
    }
    int rc;
    if (!man_train_record(ps, m, seen, kind, &rc) || !man_info_record(ps, m, seen, kind, &rc))
        return rc;
    man_err(ps, "unknown record '%s'", kind);
    return 1;
}

/* Split text[0..len) into ln (tokens separated by spaces or tabs). */
static int man_split(const char *text, size_t len, int lineno, man_line *ln)
{
    memset(ln, 0, sizeof *ln);
    ln->lineno = lineno;
    ln->text = malloc(len + 1);
    ln->work = malloc(len + 1);
    ln->tok = malloc((len / 2 + 2) * sizeof *ln->tok);
    char *work = ln->work;
    if (!ln->text || !work || !ln->tok)
        return 1;
    memcpy(ln->text, text, len);
    ln->text[len] = 0;
    if (len && ln->text[len - 1] == '\r')
        ln->text[--len] = 0;
    memcpy(work, ln->text, len + 1);
    for (char *p = work; *p;) {
        while (*p == ' ' || *p == '\t')
            *p++ = 0;
        if (!*p)
            break;
        ln->tok[ln->ntok++] = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
    }
    return 0;
}

/* Free a split line. */
static void man_line_free(man_line *ln)
{
    free(ln->work);
    free(ln->tok);
    free(ln->text);
}

int rt_manifest_parse(const char *text, rt_manifest *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->arena = -1;
    m->eval_steps = 1;
    man_parser ps = {NULL, err, errlen, 0};
    if (!text) {
        man_err(&ps, "no manifest");
        return 1;
    }
    int lineno = 0, seen = 0, ended = 0, header = 0;
    const char *p = text;
    while (*p && !ps.failed) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        man_line ln;
        lineno++;
        if (man_split(p, len, lineno, &ln)) {
            man_line_free(&ln);
            man_err(&ps, "out of memory");
            break;
        }
        ps.ln = &ln;
        if (ln.ntok == 0) {
            /* blank lines are allowed anywhere */
        } else if (ended) {
            man_err(&ps, "text after 'end'");
        } else if (!header) {
            if (ln.ntok != 2 || strcmp(ln.tok[0], "nnsc-manifest") != 0)
                man_err(&ps, "the first line must be 'nnsc-manifest 1'");
            else if (strcmp(ln.tok[1], "1") != 0)
                man_err(&ps, "manifest version %s is not supported (this rtlib reads 1)",
                        ln.tok[1]);
            header = 1;
        } else if (!strcmp(ln.tok[0], "end")) {
            if (ln.ntok != 1)
                man_err(&ps, "'end' takes no fields");
            ended = 1;
        } else {
            man_record(&ps, m, &seen);
        }
        man_line_free(&ln);
        ps.ln = NULL;
        p = nl ? nl + 1 : p + len;
    }
    if (!ps.failed && !header)
        man_err(&ps, "empty manifest (expected 'nnsc-manifest 1')");
    if (!ps.failed && !ended)
        man_err(&ps, "missing 'end' (the manifest is truncated)");
    if (!ps.failed && (seen & MAN_SEEN_ALL_REQUIRED) != MAN_SEEN_ALL_REQUIRED) {
        static const char *const names[] = {"model", "rank/world", "arena", "steps",
                                            "micro_batches", "seed"};
        for (int k = 0; k < 6; k++)
            if (!(seen & (1 << k))) {
                man_err(&ps, "missing '%s' record", names[k]);
                break;
            }
    }
    if (ps.failed) {
        rt_manifest_free(m);
        return 1;
    }
    return 0;
}

void rt_manifest_free(rt_manifest *m)
{
    for (int g = 0; g < m->ngroups; g++)
        free(m->groups[g].ranks);
    free(m->groups);
    free(m->params);
    free(m->states);
    free(m->inputs);
    free(m->data);
    free(m->eval_data);
    memset(m, 0, sizeof *m);
}
