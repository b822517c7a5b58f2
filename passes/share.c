/* share.c -- ranks that share one program.
 *
 * In an SPMD plan most ranks' Programs are the same program: the same
 * kernels in the same order on buffers of the same sizes at the same
 * offsets, differing only in a few numbers -- the rank itself, the groups
 * its collectives use, where its slice of the data or of a parameter
 * starts, whether it writes a shared box to checkpoints.  This pass puts
 * the Programs of a build into classes of equal *shape* (everything but
 * those numbers) and makes one shared Program per class: the first rank's,
 * with every number that differs within the class turned into a rank
 * variable, whose value each member finds in its row of a table.
 *
 * What is a number and what is shape: an instruction's buffer offsets and
 * the constant parts of its ints (outside slots), a call table's entries,
 * the loss offset and every integer token of the manifest are numbers;
 * the kernels, argument counts, floats, step and micro-batch coefficients,
 * slots, bodies, the fused kernels' programs (the ints of `ew`, which name
 * the CUDA kernel compiled for the build) and the manifest's other tokens
 * are shape.  Two Programs are in one class only when their shapes are
 * equal, so a member runs exactly its own Program: its row restores every
 * number of it.
 *
 * Ranks are added one at a time and each member is reduced at once to the
 * positions where its numbers differ from its class's first rank (a few,
 * for SPMD ranks), so the memory grows with the classes, not the ranks.
 * At the end the positions that differ anywhere become variables; those
 * whose columns (values over the members) are equal share one variable,
 * so the table is members x distinct columns (the rank, the tp and dp
 * groups, a handful of slice starts).
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* A growable int64 vector. */
typedef struct vec {
    int64_t *v;
    int n, cap;
} vec;

static void vpush(vec *x, int64_t v) { *IR_PUSH(x->v, x->n, x->cap) = v; }

/* One class: its first rank's Program and its values, the members and
 * their differences from it. */
typedef struct sclass {
    ir_prog prog;          /* the first rank's Program (becomes the shared one) */
    uint64_t hash;         /* of its shape */
    vec vals;              /* its numbers, in walk order */
    int *mem;              /* member ranks, ascending (added in rank order) */
    int nmem, memcap;
    vec dpos, dval;        /* the members' differences: position and value, member after member */
    int *dstart;           /* per member + 1: start into dpos / dval */
    int dscap;
} sclass;

struct pass_share {
    int world;
    sclass *cls;
    int ncls, clscap;
    vec scratch;           /* the numbers of the Program being added */
};

/* ---------------------------------------------------------------- walk */

/* Is the token [s, e) a decimal integer that fits an int64? */
static int numeric(const char *s, const char *e)
{
    const char *p = s + (s < e && *s == '-');
    if (p >= e || e - p > 18) return 0;
    for (; p < e; p++)
        if (*p < '0' || *p > '9') return 0;
    return 1;
}

/* Where a token ends: a space, a newline or the end. */
static const char *tok_end(const char *s)
{
    while (*s && *s != ' ' && *s != '\n') s++;
    return s;
}

/* Does ints j of in hold a number (not shape)? */
static int int_is_number(const pg_instr *in, int j) { return in->kernel != RT_K_ew && !in->islot[j]; }

/* The numbers of p's instructions in walk order (sections, then bodies;
 * a call's table comes later): fn(ctx, value, its mark) for each, the mark
 * being the bvar / ivar entry that names a rank variable there.  walk and
 * mark both go through here, so their orders cannot differ. */
typedef void visit_fn(void *ctx, int64_t v, uint16_t *mark);

static void visit_list(pg_instr *ins, int n, visit_fn *fn, void *ctx)
{
    for (int i = 0; i < n; i++) {
        pg_instr *in = &ins[i];
        if (in->kernel == PG_CALL) continue;
        for (int j = 0; j < in->nbuf; j++)
            if (!in->bslot[j]) fn(ctx, in->buf[j], &in->bvar[j]);
        for (int j = 0; j < in->nint; j++)
            if (int_is_number(in, j)) fn(ctx, in->ints[j].c, &in->ivar[j]);
    }
}

static void visit_instrs(ir_prog *p, visit_fn *fn, void *ctx)
{
    for (int s = 0; s < IR_SEC_COUNT; s++) visit_list(p->ins[s], p->nins[s], fn, ctx);
    for (int k = 0; k < p->nbody; k++) visit_list(p->body[k].ins, p->body[k].nins, fn, ctx);
}

static void push_value(void *out, int64_t v, uint16_t *mark)
{
    (void)mark;
    vpush(out, v);
}

/* Every number of p in walk order: sections, bodies, tables, the loss
 * offset, the manifest's integers. */
static void walk(const ir_prog *p, vec *out)
{
    out->n = 0;
    visit_instrs((ir_prog *)p, push_value, out);   /* reads only */
    for (int t = 0; t < p->ntab; t++) vpush(out, p->tab[t]);
    vpush(out, p->loss_off);
    for (const char *s = p->manifest.s ? p->manifest.s : ""; *s;) {
        const char *e = tok_end(s);
        if (numeric(s, e)) vpush(out, strtoll(s, NULL, 10));
        s = *e ? e + 1 : e;
    }
}

/* ---------------------------------------------------------------- shape */

static uint64_t mix(uint64_t h, uint64_t x)
{
    h = (h ^ x) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

static uint64_t shape_instr(uint64_t h, const pg_instr *in)
{
    h = mix(h, (uint64_t)in->kernel);
    h = mix(h, (uint64_t)(in->nbuf | in->nint << 8 | in->nflt << 16));
    if (in->kernel == PG_CALL) return mix(mix(h, (uint64_t)in->body), (uint64_t)in->nrows);
    for (int j = 0; j < in->nint; j++) {
        h = mix(h, (uint64_t)in->ints[j].s ^ (uint64_t)in->ints[j].m << 20 ^ (uint64_t)in->islot[j] << 40);
        if (!int_is_number(in, j)) h = mix(h, (uint64_t)in->ints[j].c);
    }
    for (int j = 0; j < in->nbuf; j++) h = mix(h, in->bslot[j]);
    for (int j = 0; j < in->nflt; j++) {
        uint32_t f;
        memcpy(&f, &in->flt[j], 4);
        h = mix(h, f);
    }
    return h;
}

/* A hash of p's shape (equal shapes hash equal). */
static uint64_t shape_hash(const ir_prog *p)
{
    uint64_t h = mix(mix(mix(mix(0, (uint64_t)p->world), (uint64_t)p->micro_batches), (uint64_t)p->steps),
                     (uint64_t)p->pipelined);
    h = mix(h, p->loss_off >= 0);
    h = mix(mix(mix(h, (uint64_t)p->loop_lo), (uint64_t)p->loop_hi), (uint64_t)p->loop_iters);
    for (int s = 0; s < IR_SEC_COUNT; s++) {
        h = mix(h, (uint64_t)p->nins[s]);
        for (int i = 0; i < p->nins[s]; i++) h = shape_instr(h, &p->ins[s][i]);
    }
    for (int k = 0; k < p->nbody; k++) {
        h = mix(mix(h, (uint64_t)p->body[k].nins), (uint64_t)p->body[k].nslots);
        for (int i = 0; i < p->body[k].nins; i++) h = shape_instr(h, &p->body[k].ins[i]);
    }
    h = mix(h, (uint64_t)p->ntab);
    for (const char *s = p->manifest.s ? p->manifest.s : ""; *s;) {
        const char *e = tok_end(s);
        if (!numeric(s, e))
            for (const char *c = s; c < e; c++) h = mix(h, (unsigned char)*c);
        h = mix(h, (unsigned char)*e);
        s = *e ? e + 1 : e;
    }
    return h;
}

static int same_instr(const pg_instr *a, const pg_instr *b)
{
    if (a->kernel != b->kernel || a->nbuf != b->nbuf || a->nint != b->nint || a->nflt != b->nflt) return 0;
    if (a->kernel == PG_CALL) return a->body == b->body && a->nrows == b->nrows && a->tab == b->tab;
    for (int j = 0; j < a->nint; j++) {
        if (a->ints[j].s != b->ints[j].s || a->ints[j].m != b->ints[j].m || a->islot[j] != b->islot[j]) return 0;
        if (!int_is_number(a, j) && a->ints[j].c != b->ints[j].c) return 0;
    }
    for (int j = 0; j < a->nbuf; j++)
        if (a->bslot[j] != b->bslot[j]) return 0;
    return memcmp(a->flt, b->flt, sizeof(float) * (size_t)a->nflt) == 0;
}

/* Are the shapes of a and b equal? */
static int same_shape(const ir_prog *a, const ir_prog *b)
{
    if (a->world != b->world || a->micro_batches != b->micro_batches || a->pipelined != b->pipelined ||
        a->steps != b->steps || a->loop_lo != b->loop_lo || a->loop_hi != b->loop_hi ||
        a->loop_iters != b->loop_iters ||
        a->nbody != b->nbody || a->ntab != b->ntab || (a->loss_off >= 0) != (b->loss_off >= 0))
        return 0;
    for (int s = 0; s < IR_SEC_COUNT; s++) {
        if (a->nins[s] != b->nins[s]) return 0;
        for (int i = 0; i < a->nins[s]; i++)
            if (!same_instr(&a->ins[s][i], &b->ins[s][i])) return 0;
    }
    for (int k = 0; k < a->nbody; k++) {
        if (a->body[k].nins != b->body[k].nins || a->body[k].nslots != b->body[k].nslots) return 0;
        for (int i = 0; i < a->body[k].nins; i++)
            if (!same_instr(&a->body[k].ins[i], &b->body[k].ins[i])) return 0;
    }
    const char *x = a->manifest.s ? a->manifest.s : "", *y = b->manifest.s ? b->manifest.s : "";
    while (*x && *y) {
        const char *ex = tok_end(x), *ey = tok_end(y);
        int nx = numeric(x, ex), ny = numeric(y, ey);
        if (nx != ny || *ex != *ey) return 0;
        if (!nx && (ex - x != ey - y || memcmp(x, y, (size_t)(ex - x)) != 0)) return 0;
        x = *ex ? ex + 1 : ex;
        y = *ey ? ey + 1 : ey;
    }
    return !*x && !*y;
}

/* ---------------------------------------------------------------- classes */

pass_share *pass_share_new(int world)
{
    pass_share *s = ir_xcalloc(1, sizeof *s);
    s->world = world;
    return s;
}

int pass_share_add(pass_share *s, ir_prog *p)
{
    uint64_t h = shape_hash(p);
    sclass *c = NULL;
    for (int k = 0; k < s->ncls && !c; k++)
        if (s->cls[k].hash == h && same_shape(&s->cls[k].prog, p)) c = &s->cls[k];
    if (!c) {   /* a new class: p is its first rank */
        c = IR_PUSH(s->cls, s->ncls, s->clscap);
        memset(c, 0, sizeof *c);
        c->hash = h;
        walk(p, &c->vals);
        c->prog = *p;
        memset(p, 0, sizeof *p);
        *IR_PUSH(c->mem, c->nmem, c->memcap) = c->prog.rank;
        ir_grow((void **)&c->dstart, &c->dscap, 2, sizeof(int));
        c->dstart[0] = c->dstart[1] = 0;
        return (int)(c - s->cls);
    }
    IR_ASSERT(p->rank > c->mem[c->nmem - 1]);   /* ranks come in order */
    walk(p, &s->scratch);
    IR_ASSERT(s->scratch.n == c->vals.n);   /* equal shapes walk alike */
    for (int i = 0; i < s->scratch.n; i++)
        if (s->scratch.v[i] != c->vals.v[i]) vpush(&c->dpos, i), vpush(&c->dval, s->scratch.v[i]);
    *IR_PUSH(c->mem, c->nmem, c->memcap) = p->rank;
    ir_grow((void **)&c->dstart, &c->dscap, c->nmem + 1, sizeof(int));
    c->dstart[c->nmem] = c->dpos.n;
    ir_prog_free(p);
    return (int)(c - s->cls);
}

/* Marking: position pos of the walk gets variable var[pos] (0: none). */
typedef struct marker {
    const int *var;     /* per position: 0, or v + 1 */
    int pos;
} marker;

static void set_mark(void *ctx, int64_t v, uint16_t *mark)
{
    marker *m = ctx;
    (void)v;
    *mark = (uint16_t)m->var[m->pos++];
}

/* Turn the class's Program into the shared one: marks where var says. */
static void mark(ir_prog *p, const int *var)
{
    marker m = {var, 0};
    visit_instrs(p, set_mark, &m);
    for (int t = 0; t < p->ntab; t++) {
        if (!var[m.pos]) {
            m.pos++;
            continue;
        }
        if (!p->tabvar) p->tabvar = ir_xcalloc((size_t)p->ntab + 1, sizeof *p->tabvar);
        p->tabvar[t] = (uint16_t)var[m.pos++];
    }
    p->loss_var = var[m.pos++];
    /* the manifest template */
    ir_buf t = {0};
    const char *s = p->manifest.s ? p->manifest.s : "";
    while (*s) {
        const char *e = tok_end(s);
        if (numeric(s, e) && var[m.pos++]) ir_bprintf(&t, "%c%d%c", PG_VAR_MARK, var[m.pos - 1] - 1, PG_VAR_END);
        else ir_bprintf(&t, "%.*s", (int)(e - s), s);
        if (*e) ir_bprintf(&t, "%c", *e);
        s = *e ? e + 1 : e;
    }
    ir_bprintf(&t, "%s", "");
    ir_buf_free(&p->manifest);
    p->manifest = t;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Make class c's shared Program. */
static void finish_class(sclass *c)
{
    ir_prog *p = &c->prog;
    const int nm = c->nmem, nv = c->vals.n;
    /* the positions that differ for some member, ascending, distinct */
    int *pos = ir_xmalloc(sizeof(int) * ((size_t)c->dpos.n + 1)), np = 0;
    for (int i = 0; i < c->dpos.n; i++) pos[np++] = (int)c->dpos.v[i];
    qsort(pos, (size_t)np, sizeof *pos, cmp_int);
    int u = 0;
    for (int i = 0; i < np; i++)
        if (!u || pos[u - 1] != pos[i]) pos[u++] = pos[i];
    np = u;
    /* their columns: col[i * nm + m] is member m's value at pos[i] */
    int64_t *col = ir_xmalloc(sizeof(int64_t) * ((size_t)np * (size_t)nm + 1));
    for (int i = 0; i < np; i++)
        for (int m = 0; m < nm; m++) col[(size_t)i * nm + m] = c->vals.v[pos[i]];
    for (int m = 1; m < nm; m++) {   /* member m's differences: [dstart[m], dstart[m + 1]) */
        int i = 0;
        for (int d = c->dstart[m]; d < c->dstart[m + 1]; d++) {
            while (pos[i] != (int)c->dpos.v[d]) i++;   /* both ascend */
            col[(size_t)i * nm + m] = c->dval.v[d];
        }
    }
    /* equal columns share a variable (a table by column hash) */
    int *var = ir_xcalloc((size_t)nv + 1, sizeof(int)), *first = ir_xmalloc(sizeof(int) * ((size_t)np + 1));
    int nvar = 0, tcap = 16;
    while (tcap < 2 * np) tcap *= 2;
    int *tab = ir_xmalloc(sizeof(int) * (size_t)tcap);
    for (int k = 0; k < tcap; k++) tab[k] = -1;
    for (int i = 0; i < np; i++) {
        const int64_t *ci = col + (size_t)i * nm;
        uint64_t h = 0;
        for (int m = 0; m < nm; m++) h = mix(h, (uint64_t)ci[m]);
        size_t k = (size_t)h & (size_t)(tcap - 1);
        for (; tab[k] >= 0; k = (k + 1) & (size_t)(tcap - 1))
            if (!memcmp(col + (size_t)first[tab[k]] * nm, ci, sizeof(int64_t) * (size_t)nm)) break;
        if (tab[k] < 0) {
            IR_ASSERT(nvar < 65535);   /* bvar / ivar are 16 bits */
            first[nvar] = i;
            tab[k] = nvar++;
        }
        var[pos[i]] = tab[k] + 1;
    }
    mark(p, var);
    p->nmember = nm;
    p->member = ir_xmalloc(sizeof(int) * (size_t)nm);
    memcpy(p->member, c->mem, sizeof(int) * (size_t)nm);
    p->nvar = nvar;
    p->rv = ir_xmalloc(sizeof(int64_t) * ((size_t)nm * (size_t)nvar + 1));
    for (int m = 0; m < nm; m++)
        for (int v = 0; v < nvar; v++) p->rv[(size_t)m * nvar + v] = col[(size_t)first[v] * nm + m];
    free(pos);
    free(col);
    free(var);
    free(first);
    free(tab);
}

ir_prog *pass_share_finish(pass_share *s, int *nprog, int *cls_of, int *row_of)
{
    ir_prog *out = ir_xcalloc((size_t)s->ncls + 1, sizeof *out);
    for (int k = 0; k < s->ncls; k++) {
        sclass *c = &s->cls[k];
        finish_class(c);
        for (int m = 0; m < c->nmem; m++) cls_of[c->mem[m]] = k, row_of[c->mem[m]] = m;
        out[k] = c->prog;
        free(c->vals.v), free(c->mem), free(c->dpos.v), free(c->dval.v), free(c->dstart);
    }
    *nprog = s->ncls;
    free(s->cls);
    free(s->scratch.v);
    free(s);
    return out;
}
