/* expr.c -- numbers in a model spec: integer size expressions over [dims]
 * (checked for overflow, exact division, result >= 1), plain decimal
 * integers and floats.  Every function reports what is wrong in err and
 * returns 1; the caller adds file:line. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe_priv.h"

#define FE_EXPR_DEPTH 64   /* most nested parentheses in one expression */

/* State of one expression being evaluated. */
typedef struct fe_ex {
    const char *text;    /* the whole expression, for messages */
    const char *p;       /* next character */
    const fe_dims *dims; /* the dims, defined so far first */
    int nvis;            /* dims usable here (the rest are defined later) */
    int depth;           /* current parenthesis depth */
    char *err;           /* message out */
    size_t errsz;        /* its size */
    char *hint;          /* hint out */
    size_t hintsz;       /* its size */
} fe_ex;

static int ex_expr(fe_ex *e, int64_t *v);

/* Record a message (and optional hint); returns 1. */
static int ex_fail(fe_ex *e, const char *hint, const char *fmt, const char *arg)
{
    char clip[96];
    snprintf(e->err, e->errsz, fmt, arg ? fe_clip(arg, clip, sizeof clip) : "");
    snprintf(e->hint, e->hintsz, "%s", hint ? hint : "");
    return 1;
}

/* Skip blanks. */
static void ex_blank(fe_ex *e)
{
    while (*e->p == ' ' || *e->p == '\t') e->p++;
}

/* First and later characters of a name. */
static int is_name0(int c) { return isalpha(c) || c == '_'; }
static int is_name1(int c) { return isalnum(c) || c == '_' || c == '.'; }

/* NUMBER := [0-9]+   (not followed by a letter, '_' or '.') */
static int ex_number(fe_ex *e, int64_t *v)
{
    const char *start = e->p;
    int64_t x = 0;
    int big = 0;
    while (isdigit((unsigned char)*e->p)) {
        if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, *e->p - '0', &x)) big = 1;
        e->p++;
    }
    if (is_name1((unsigned char)*e->p)) {
        const char *q = e->p;
        while (is_name1((unsigned char)*q) || *q == '+' || *q == '-') q++;
        char word[128];
        snprintf(word, sizeof word, "%.*s", (int)(q - start > 100 ? 100 : q - start), start);
        return ex_fail(e, "numbers are decimal digits only (no exponent, suffix or fraction)",
                       "bad number '%s'", word);
    }
    if (big) {
        char word[128];
        snprintf(word, sizeof word, "%.*s", (int)(e->p - start > 100 ? 100 : e->p - start), start);
        return ex_fail(e, "sizes must fit in a signed 64-bit integer", "number too large: %s", word);
    }
    *v = x;
    return 0;
}

/* NAME := [A-Za-z_][A-Za-z0-9_.]*   (a dim defined earlier) */
static int ex_name(fe_ex *e, int64_t *v)
{
    const char *start = e->p;
    while (is_name1((unsigned char)*e->p)) e->p++;
    size_t n = (size_t)(e->p - start);
    char word[128], *w = n < sizeof word ? word : ir_xmalloc(n + 1);
    memcpy(w, start, n);
    w[n] = '\0';
    int at = fe_map_get(&e->dims->idx, w);
    if (w != word) free(w);
    if (at >= 0 && at < e->nvis) {
        *v = e->dims->d[at].val;
        return 0;
    }
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(n > 100 ? 100 : n), start);
    snprintf(e->err, e->errsz, "unknown dim '%s'", name);
    if (at >= 0) {
        snprintf(e->hint, e->hintsz,
                 "'%s' is defined later in [dims] (line %d); a dim may use only the dims above it",
                 name, e->dims->d[at].line);
        return 1;
    }
    const char **cand = ir_xmalloc(sizeof *cand * (size_t)(e->nvis + 1));
    for (int i = 0; i < e->nvis; i++) cand[i] = e->dims->d[i].name;
    char sug[192];
    if (fe_suggest(name, cand, e->nvis, sug, sizeof sug))
        snprintf(e->hint, e->hintsz, "%s", sug);
    else
        snprintf(e->hint, e->hintsz, "define it in [dims] before it is used, e.g. %s = 64", name);
    free(cand);
    return 1;
}

/* factor := NUMBER | NAME | '(' expr ')' */
static int ex_factor(fe_ex *e, int64_t *v)
{
    ex_blank(e);
    unsigned char c = (unsigned char)*e->p;
    if (isdigit(c)) return ex_number(e, v);
    if (is_name0(c)) return ex_name(e, v);
    if (c == '(') {
        if (++e->depth > FE_EXPR_DEPTH)
            return ex_fail(e, NULL, "expression nested too deeply: '%s'", e->text);
        e->p++;
        if (ex_expr(e, v)) return 1;
        ex_blank(e);
        if (*e->p != ')') return ex_fail(e, "close every '(' with a ')'", "missing ')' in '%s'", e->text);
        e->p++;
        e->depth--;
        return 0;
    }
    if (c == '-')
        return ex_fail(e, "sizes are built from non-negative integers with + - * / and parentheses",
                       "negative numbers are not allowed: '%s'", e->text);
    if (c == '\0') return ex_fail(e, NULL, "expression '%s' ends too early", e->text);
    if (c == ',')
        return ex_fail(e, "separate the dims of a shape with spaces, e.g. shape = B T",
                       "unexpected ',' in '%s'", e->text);
    if (c >= 0x80) return ex_fail(e, NULL, "unexpected non-ASCII character in '%s'", e->text);
    char ch[2] = {(char)c, 0};
    snprintf(e->err, e->errsz, "unexpected '%s' in expression", ch);
    char clip[96];
    size_t used = strlen(e->err);
    snprintf(e->err + used, e->errsz - used, " '%s'", fe_clip(e->text, clip, sizeof clip));
    snprintf(e->hint, e->hintsz, "expressions use integers, dim names, + - * / and parentheses");
    return 1;
}

/* term := factor (('*' | '/') factor)* */
static int ex_term(fe_ex *e, int64_t *v)
{
    if (ex_factor(e, v)) return 1;
    for (;;) {
        ex_blank(e);
        char op = *e->p;
        if (op != '*' && op != '/') return 0;
        e->p++;
        int64_t r;
        if (ex_factor(e, &r)) return 1;
        if (op == '*') {
            if (__builtin_mul_overflow(*v, r, v))
                return ex_fail(e, "sizes must fit in a signed 64-bit integer",
                               "'%s' overflows", e->text);
        } else {
            if (r == 0) return ex_fail(e, NULL, "division by zero in '%s'", e->text);
            if (*v % r != 0) {
                snprintf(e->err, e->errsz, "%lld / %lld is not exact (remainder %lld)",
                         (long long)*v, (long long)r, (long long)(*v % r));
                snprintf(e->hint, e->hintsz, "division in sizes must leave no remainder");
                return 1;
            }
            *v /= r;
        }
    }
}

/* expr := term (('+' | '-') term)* */
static int ex_expr(fe_ex *e, int64_t *v)
{
    if (ex_term(e, v)) return 1;
    for (;;) {
        ex_blank(e);
        char op = *e->p;
        if (op != '+' && op != '-') return 0;
        e->p++;
        int64_t r;
        if (ex_term(e, &r)) return 1;
        int ovf = op == '+' ? __builtin_add_overflow(*v, r, v) : __builtin_sub_overflow(*v, r, v);
        if (ovf)
            return ex_fail(e, "sizes must fit in a signed 64-bit integer", "'%s' overflows", e->text);
    }
}

int fe_eval(const char *text, const fe_dims *dims, int nvis,
            int64_t *val, char *err, size_t errsz, char *hint, size_t hintsz)
{
    fe_ex e = {text, text, dims, nvis, 0, err, errsz, hint, hintsz};
    err[0] = hint[0] = '\0';
    ex_blank(&e);
    if (*e.p == '\0')
        return ex_fail(&e, "write a number, a dim name or an expression like 4*C", "empty size expression%s", NULL);
    int64_t v;
    if (ex_expr(&e, &v)) return 1;
    ex_blank(&e);
    if (*e.p == ')') return ex_fail(&e, NULL, "unbalanced ')' in '%s'", text);
    if (*e.p != '\0') {
        /* a second operand with no operator in between: "4 C", "B,T" */
        if (*e.p == ',')
            return ex_fail(&e, "separate the dims of a shape with spaces, e.g. shape = B T",
                           "unexpected ',' in '%s'", text);
        return ex_fail(&e, "join operands with + - * or /; a shape lists its dims separated by spaces",
                       "unexpected text after the expression in '%s'", text);
    }
    if (v < 1) {
        char clip[96];
        snprintf(err, errsz, "'%s' is %lld; a size must be >= 1", fe_clip(text, clip, sizeof clip),
                 (long long)v);
        return 1;
    }
    *val = v;
    return 0;
}

int fe_parse_int(const char *text, int64_t min, int64_t max, int64_t *val,
                 char *err, size_t errsz)
{
    char clip[96];
    const char *p = text;
    if (*p == '\0') {
        snprintf(err, errsz, "expected an integer, got nothing");
        return 1;
    }
    if (*p == '-' && isdigit((unsigned char)p[1])) {
        int digits = 1;
        for (const char *q = p + 1; *q; q++) digits &= isdigit((unsigned char)*q) != 0;
        if (digits) {
            snprintf(err, errsz, "negative number %s (must be >= %lld)", fe_clip(text, clip, sizeof clip),
                     (long long)min);
            return 1;
        }
    }
    int64_t x = 0;
    int big = 0;
    for (; *p; p++) {
        if (!isdigit((unsigned char)*p)) {
            snprintf(err, errsz, "'%s' is not an integer (decimal digits only)",
                     fe_clip(text, clip, sizeof clip));
            return 1;
        }
        if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, *p - '0', &x)) big = 1;
    }
    if (big) {
        snprintf(err, errsz, "number too large: %s", fe_clip(text, clip, sizeof clip));
        return 1;
    }
    if (x < min || x > max) {
        snprintf(err, errsz, "%lld is out of range (must be %lld..%lld)", (long long)x,
                 (long long)min, (long long)max);
        return 1;
    }
    *val = x;
    return 0;
}

int fe_parse_u64(const char *text, uint64_t *val, char *err, size_t errsz)
{
    char clip[96];
    if (*text == '\0') {
        snprintf(err, errsz, "expected an integer, got nothing");
        return 1;
    }
    uint64_t x = 0;
    int big = 0;
    for (const char *p = text; *p; p++) {
        if (!isdigit((unsigned char)*p)) {
            snprintf(err, errsz, "'%s' is not a non-negative integer (decimal digits only)",
                     fe_clip(text, clip, sizeof clip));
            return 1;
        }
        if (__builtin_mul_overflow(x, 10u, &x) || __builtin_add_overflow(x, (uint64_t)(*p - '0'), &x))
            big = 1;
    }
    if (big) {
        snprintf(err, errsz, "number too large: %s (at most 18446744073709551615)",
                 fe_clip(text, clip, sizeof clip));
        return 1;
    }
    *val = x;
    return 0;
}

int fe_parse_float(const char *text, double *val, char *err, size_t errsz)
{
    char clip[96];
    if (*text == '\0') {
        snprintf(err, errsz, "expected a number, got nothing");
        return 1;
    }
    char *end;
    errno = 0;
    double x = strtod(text, &end);
    if (end == text || *end != '\0' || isspace((unsigned char)*text)) {
        snprintf(err, errsz, "'%s' is not a number", fe_clip(text, clip, sizeof clip));
        return 1;
    }
    if (!isfinite(x) || (errno == ERANGE && fabs(x) > 1.0)) {
        snprintf(err, errsz, "'%s' is not a finite number", fe_clip(text, clip, sizeof clip));
        return 1;
    }
    *val = x;
    return 0;
}
