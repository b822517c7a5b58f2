/* dimops.c -- nnScaler-style dimops annotations (docs/dimops.md).
 *
 *   anno     = side "->" side
 *   side     = [ operand { "," operand } ]
 *   operand  = dim { " " dim }
 *   dim      = atom | "(" atom atom { atom } ")"     a merged dim: outer first
 *   atom     = ( ident | "*" ) [ "+" | "^" ] | number
 *
 * An annotation is instantiated for concrete input ranks: each `*` expands
 * into as many identifiers (*0, *1, ...) as the operand's rank leaves over.
 */
#include <ctype.h>
#include <stdarg.h>
#include <string.h>

#include "ir.h"

/* A dim token before `*` expansion. */
typedef struct rawdim {
    char name[8];   /* identifier, "*" for the star, "" for a literal */
    int64_t lit;    /* literal value */
    uint8_t reduce; /* `+` */
    uint8_t frozen; /* `^` */
    int nsub;       /* merged inner identifiers */
    char sub[2][8]; /* their names */
    uint8_t subfl[2]; /* their flags: 1 reduce, 2 frozen */
} rawdim;

typedef struct rawop {
    int n;               /* dims in the text */
    rawdim d[IR_MAXDIM];
    int star;            /* index of the star dim or -1 */
} rawop;

static int fail(char *err, size_t errsz, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errsz, fmt, ap);
    va_end(ap);
    return 1;
}

/* ident = letter { letter | digit | "_" }, at most 6 characters, then [+^]. */
static int parse_ident(const char **pp, char *name, uint8_t *flags, char *err, size_t errsz)
{
    const char *p = *pp;
    int k = 0;
    if (!(isalpha((unsigned char)*p) || *p == '_')) return fail(err, errsz, "expected an identifier at '%s'", p);
    while (isalnum((unsigned char)*p) || *p == '_') {
        if (k == 6) return fail(err, errsz, "identifier longer than 6 characters");
        name[k++] = *p++;
    }
    name[k] = '\0';
    *flags = 0;
    if (*p == '+') *flags = 1, p++;
    else if (*p == '^') *flags = 2, p++;
    *pp = p;
    return 0;
}

/* side = [ operand { "," operand } ]; parses up to the end of text or "->". */
static int parse_side(const char **pp, rawop *ops, int *nops, char *err, size_t errsz)
{
    const char *p = *pp;
    *nops = 0;
    while (*p == ' ') p++;
    if (*p == '\0' || (p[0] == '-' && p[1] == '>')) { *pp = p; return 0; }
    for (;;) {
        if (*nops == IR_MAXIO) return fail(err, errsz, "too many operands");
        rawop *o = &ops[(*nops)++];
        memset(o, 0, sizeof *o);
        o->star = -1;
        for (;;) {
            while (*p == ' ') p++;
            if (*p == ',' || *p == '\0' || (p[0] == '-' && p[1] == '>')) break;
            if (o->n == IR_MAXDIM) return fail(err, errsz, "too many dims in an operand");
            rawdim *d = &o->d[o->n];
            if (isdigit((unsigned char)*p)) {
                int64_t v = 0;
                while (isdigit((unsigned char)*p)) {
                    if (ir_mul_ovf(v, 10, &v) || ir_add_ovf(v, *p - '0', &v))
                        return fail(err, errsz, "number too large");
                    p++;
                }
                d->lit = v;
            } else if (*p == '*') {
                if (o->star >= 0) return fail(err, errsz, "two `*` in one operand");
                o->star = o->n;
                strcpy(d->name, "*");
                p++;
            } else if (*p == '(') {
                /* a merged dim: the outer identifier, then inner ones */
                uint8_t fl;
                p++;
                if (parse_ident(&p, d->name, &fl, err, errsz)) return 1;
                d->reduce = fl == 1;
                d->frozen = fl == 2;
                while (*p == ' ') p++;
                while (*p != ')') {
                    if (d->nsub == 2) return fail(err, errsz, "more than 3 identifiers in a merged dim");
                    if (parse_ident(&p, d->sub[d->nsub], &d->subfl[d->nsub], err, errsz)) return 1;
                    d->nsub++;
                    while (*p == ' ') p++;
                }
                if (d->nsub == 0) return fail(err, errsz, "a merged dim needs at least two identifiers");
                p++;
                o->n++;
                continue;
            } else if (isalpha((unsigned char)*p) || *p == '_') {
                uint8_t fl;
                if (parse_ident(&p, d->name, &fl, err, errsz)) return 1;
                d->reduce = fl == 1;
                d->frozen = fl == 2;
                o->n++;
                continue;
            } else {
                return fail(err, errsz, "unexpected character '%c'", *p);
            }
            if (*p == '+') { d->reduce = 1; p++; }
            else if (*p == '^') { d->frozen = 1; p++; }
            o->n++;
        }
        if (o->n == 0) return fail(err, errsz, "empty operand");
        if (*p != ',') break;
        p++;
    }
    *pp = p;
    return 0;
}

/* Find or add identifier name in a; returns its index or -1 when full. */
static int add_id(ir_anno *a, const char *name)
{
    int k = ir_anno_find(a, name);
    if (k >= 0) return k;
    if (a->nid == IR_MAXID) return -1;
    size_t n = strlen(name);
    if (n >= sizeof a->idname[0]) return -1;
    memcpy(a->idname[a->nid], name, n + 1);
    return a->nid++;
}

int ir_anno_find(const ir_anno *a, const char *name)
{
    for (int i = 0; i < a->nid; i++)
        if (strcmp(a->idname[i], name) == 0) return i;
    return -1;
}

/* Expand one raw operand into a's operand slot k with nstar star dims. */
static int expand(ir_anno *a, int k, const rawop *o, int nstar, char *err, size_t errsz)
{
    int nd = 0;
    for (int j = 0; j < o->n; j++) {
        const rawdim *r = &o->d[j];
        int reps = (j == o->star) ? nstar : 1;
        for (int s = 0; s < reps; s++) {
            if (nd == IR_MAXDIM) return fail(err, errsz, "operand has more than %d dims", IR_MAXDIM);
            ir_adim *d = &a->dim[k][nd++];
            memset(d, 0, sizeof *d);
            d->reduce = r->reduce;
            d->frozen = r->frozen;
            if (r->name[0] == '\0') { d->id = -1; d->lit = r->lit; continue; }
            char nm[16];
            if (j == o->star) snprintf(nm, sizeof nm, "*%d", s % IR_MAXDIM);
            else snprintf(nm, sizeof nm, "%s", r->name);
            d->id = add_id(a, nm);
            if (d->id < 0) return fail(err, errsz, "more than %d identifiers", IR_MAXID);
            d->nsub = r->nsub;
            for (int q = 0; q < r->nsub; q++) {
                d->sub[q] = add_id(a, r->sub[q]);
                if (d->sub[q] < 0) return fail(err, errsz, "more than %d identifiers", IR_MAXID);
                a->id_inner[d->sub[q]] = 1;
                if (r->subfl[q] == 1) a->id_reduce[d->sub[q]] = 1;
                if (r->subfl[q] == 2) a->id_frozen[d->sub[q]] = 1;
            }
        }
    }
    a->ndim[k] = nd;
    return 0;
}

int ir_anno_parse(const char *text, int nin, const int *in_ndim, ir_anno *a,
                  char *err, size_t errsz)
{
    rawop in[IR_MAXIO], out[IR_MAXIO];
    int nri, nro;
    const char *p = text;
    memset(a, 0, sizeof *a);
    if (parse_side(&p, in, &nri, err, errsz)) return 1;
    if (!(p[0] == '-' && p[1] == '>')) return fail(err, errsz, "annotation '%s' has no '->'", text);
    p += 2;
    if (parse_side(&p, out, &nro, err, errsz)) return 1;
    if (*p) return fail(err, errsz, "trailing text in annotation '%s'", text);
    if (nri != nin) return fail(err, errsz, "annotation '%s' has %d inputs, op has %d", text, nri, nin);
    /* the star count: whatever each input's rank leaves over; all must agree */
    int nstar = -1;
    for (int i = 0; i < nin; i++) {
        int fixed = in[i].n - (in[i].star >= 0);
        if (in[i].star < 0) {
            if (in_ndim[i] != fixed)
                return fail(err, errsz, "input %d must have %d dims (annotation '%s'), has %d",
                            i + 1, fixed, text, in_ndim[i]);
            continue;
        }
        int s = in_ndim[i] - fixed;
        if (s < 0)
            return fail(err, errsz, "input %d must have at least %d dims (annotation '%s'), has %d",
                        i + 1, fixed, text, in_ndim[i]);
        if (nstar >= 0 && s != nstar)
            return fail(err, errsz, "inputs disagree on the leading dims '*' (%d vs %d dims)", nstar, s);
        nstar = s;
    }
    if (nstar < 0) nstar = 0;
    a->nin = nin;
    a->nout = nro;
    for (int i = 0; i < nin; i++)
        if (expand(a, i, &in[i], nstar, err, errsz)) return 1;
    for (int i = 0; i < nro; i++)
        if (expand(a, nin + i, &out[i], nstar, err, errsz)) return 1;
    /* identifier flags are global: `+` on an input marks a reduction */
    for (int k = 0; k < nin + nro; k++)
        for (int j = 0; j < a->ndim[k]; j++) {
            const ir_adim *d = &a->dim[k][j];
            if (d->id < 0) continue;
            if (d->reduce) a->id_reduce[d->id] = 1;
            if (d->frozen) a->id_frozen[d->id] = 1;
        }
    for (int k = nin; k < nin + nro; k++)
        for (int j = 0; j < a->ndim[k]; j++) {
            int id = a->dim[k][j].id;
            if (id >= 0 && a->id_reduce[id])
                return fail(err, errsz, "reduction dim '%s' appears in an output", a->idname[id]);
            for (int q = 0; q < a->dim[k][j].nsub; q++)
                if (a->id_reduce[a->dim[k][j].sub[q]])
                    return fail(err, errsz, "reduction dim '%s' appears in an output",
                                a->idname[a->dim[k][j].sub[q]]);
        }
    return 0;
}

void ir_anno_print(const ir_anno *a, ir_buf *b)
{
    for (int k = 0; k < a->nin + a->nout; k++) {
        if (k == a->nin) ir_bprintf(b, a->nin ? " ->" : "->");
        else if (k) ir_bprintf(b, ",");
        for (int j = 0; j < a->ndim[k]; j++) {
            const ir_adim *d = &a->dim[k][j];
            ir_bprintf(b, (k == 0 && j == 0) ? "" : " ");
            if (d->id < 0) {
                ir_bprintf(b, "%lld", (long long)d->lit);
                continue;
            }
            ir_bprintf(b, "%s%s%s", d->nsub ? "(" : "", a->idname[d->id], d->reduce ? "+" : d->frozen ? "^" : "");
            for (int q = 0; q < d->nsub; q++)
                ir_bprintf(b, " %s%s", a->idname[d->sub[q]],
                           a->id_reduce[d->sub[q]] ? "+" : a->id_frozen[d->sub[q]] ? "^" : "");
            if (d->nsub) ir_bprintf(b, ")");
        }
    }
    if (a->nout == 0) ir_bprintf(b, " ->");
}

int64_t ir_adim_extent(const ir_adim *d, const int64_t *ext)
{
    if (d->id < 0) return d->lit;
    int64_t e = ext[d->id];
    for (int q = 0; q < d->nsub; q++) e *= ext[d->sub[q]];
    return e;
}
