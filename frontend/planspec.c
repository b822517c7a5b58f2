/* planspec.c -- the spec's [plan] lists (trans, coshard, stage, recompute,
 * stage_tp) read into the plan record (ir_planlists, ir/ir.h) that the plan
 * passes take.  Only the syntax is checked here, with the key's line (or
 * its --set); what an item names is checked against the graph by the pass
 * that reads it (passes/plan.c, passes/recompute.c), since policy auto's
 * search fills the same lists for its candidates without any text. */
#include <stdlib.h>
#include <string.h>

#include "fe_priv.h"

/* The comma-separated items of text, each trimmed, as a malloc'd copy
 * whose items are NUL-terminated in place (*n of them in *item, malloc'd);
 * a trailing comma ends the list, an empty item before another is kept. */
static char *items(const char *text, char ***item, int *n)
{
    char *buf = ir_xstrdup(text), *p = buf;
    int cap = 0;
    *item = NULL, *n = 0;
    for (;;) {
        char *e = strchr(p, ',');
        if (e) *e = '\0';
        while (*p == ' ' || *p == '\t') p++;
        size_t l = strlen(p);
        while (l && (p[l - 1] == ' ' || p[l - 1] == '\t')) p[--l] = '\0';
        if (*p || e) *IR_PUSH(*item, *n, cap) = p;   /* (a last empty item: a trailing comma) */
        if (!e) break;
        p = e + 1;
    }
    return buf;
}

/* The words of item (split on blanks, in place) into w: their count, or
 * max + 1 (w filled to max) when there are more. */
static int words(char *item, char **w, int max)
{
    int n = 0;
    char *save, *tok;
    for (tok = strtok_r(item, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
        if (n == max) return max + 1;
        w[n++] = tok;
    }
    return n;
}

/* One item's reader: item (as written, for messages) in words w[0 .. nw)
 * (at most max words: nw = max + 1 when more), into slot (the list's next
 * element, zeroed).  0, or 2 after a message. */
typedef int (*item_rd)(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g, const char *item,
                       char **w, int nw, void *slot);

/* kv's items read by rd into a new list of elsz-byte elements in g's pool
 * (*list, *n), each split into at most max words.  0, or 2. */
static int read_items(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g, size_t elsz, int max,
                      void **list, int *n, item_rd rd)
{
    char **it;
    int ni, rc = 0;
    char *buf = items(kv->val, &it, &ni), *w[2 * IR_MAXSPLIT + 2];
    char *v = ir_galloc(g, elsz * (size_t)ni);
    *list = v, *n = 0;
    for (int i = 0; i < ni && !rc; i++) {
        char whole[512];
        snprintf(whole, sizeof whole, "%s", it[i]);
        int nw = words(it[i], w, max);
        if (!(rc = rd(s, sec, kv, g, whole, w, nw, v + elsz * (size_t)*n))) (*n)++;
    }
    free(it);
    free(buf);
    return rc;
}

static int trans_rd(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g, const char *item, char **w,
                    int nw, void *slot)
{
    static const char hint[] = "write trans = OPS IDENT N [IDENT N]..., e.g. trans = h.fc n 4, h.proj k 4 "
                               "(IDENT: a name of the op's annotation, or replicate / value)";
    (void)item;
    ir_optrans *u = slot;
    if (nw == 0) return fe_kv_error(s, sec, kv, hint, "[plan] trans: empty constraint");
    if (nw == 1) return fe_kv_error(s, sec, kv, hint, "[plan] trans: '%s' has no split", w[0]);
    u->pat = ir_str(g, w[0]);
    for (int k = 1; k < nw; k += 2) {
        if (u->n == IR_MAXSPLIT)   /* (before w[k]: words stops filling w past its max) */
            return fe_kv_error(s, sec, kv, hint, "[plan] trans: more than %d splits for %s", IR_MAXSPLIT, w[0]);
        char *end = NULL;
        long v = k + 1 < nw ? strtol(w[k + 1], &end, 10) : 0;
        if (k + 1 >= nw || *end || v < 1 || strlen(w[k]) >= sizeof u->id[0])
            return fe_kv_error(s, sec, kv, hint, "[plan] trans: bad split '%s %s' for %s", w[k],
                               k + 1 < nw ? w[k + 1] : "", w[0]);
        memcpy(u->id[u->n], w[k], strlen(w[k]) + 1);
        u->parts[u->n++] = (int)v;
    }
    return 0;
}

int fe_plan_trans(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g)
{
    ir_planlists *L = &g->req.L;
    return read_items(s, sec, kv, g, sizeof *L->trans, 2 * IR_MAXSPLIT + 1, (void **)&L->trans, &L->ntrans, trans_rd);
}

static int cos_rd(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g, const char *item, char **w,
                  int nw, void *slot)
{
    static const char hint[] = "write coshard = OPS IDENT K {, OPS IDENT K}: OPS an op pattern (h.attn, h.fc), IDENT a "
                               "name of its annotation (--dump=graph: *1 for a matmul's rows (tokens), h for "
                               "attention heads), K the pieces per device";
    ir_cosh *c = slot;
    char *end = NULL;
    long k = nw == 3 ? strtol(w[2], &end, 10) : 0;
    if (nw != 3 || *end || k < 1 || k > 1 << 20 || strlen(w[1]) >= sizeof c->id)
        return fe_kv_error(s, sec, kv, hint, "[plan] coshard: '%s' is not OPS IDENT K", item);
    c->pat = ir_str(g, w[0]);
    memcpy(c->id, w[1], strlen(w[1]) + 1);
    c->k = (int)k;
    return 0;
}

int fe_plan_coshard(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g)
{
    ir_planlists *L = &g->req.L;
    return read_items(s, sec, kv, g, sizeof *L->cos, 3, (void **)&L->cos, &L->ncos, cos_rd);
}

static int stage_rd(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g, const char *item, char **w,
                    int nw, void *slot)
{
    static const char hint[] = "write stage = ITEM STAGE {, ITEM STAGE}: ITEM an op pattern (lm_head, h.fc) or a "
                               "block's repeats (h.0-5, h.6); STAGE 0 .. pp-1 (or all: split over every device)";
    ir_assign *a = slot;
    char *end = NULL;
    if (nw == 2 && !strcmp(w[1], "all")) a->all = 1;
    else if (nw == 2) {
        long k = strtol(w[1], &end, 10);
        if (*end || end == w[1] || k < -(1L << 20) || k > 1L << 20) nw = 0;
        a->k = (int)k;
    }
    if (nw != 2) return fe_kv_error(s, sec, kv, hint, "[plan] stage: '%s' is not ITEM STAGE", item);
    a->item = ir_str(g, w[0]);
    return 0;
}

int fe_plan_stage(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g)
{
    ir_planlists *L = &g->req.L;
    return read_items(s, sec, kv, g, sizeof *L->stage, 2, (void **)&L->stage, &L->nstage, stage_rd);
}

/* "h", "h.3", "h.0-5", each maybe with ":attn": block b's repeats lo .. hi
 * (hi -1: all); 0, or 1 when item is no block's. */
static int rc_item(const ir_graph *g, const char *item, ir_rcitem *r)
{
    size_t n = strlen(item);
    r->attn = n > 5 && strcmp(item + n - 5, ":attn") == 0;
    if (r->attn) n -= 5;
    for (int b = 0; b < g->nblk; b++) {
        const char *bn = g->blk[b].name;
        size_t l = strlen(bn);
        if (n < l || strncmp(item, bn, l) != 0) continue;
        const char *p = item + l;
        if (p == item + n) return r->blk = b, r->lo = 0, r->hi = -1, 0;
        if (*p != '.' || p[1] < '0' || p[1] > '9') continue;
        char *e;
        long lo = strtol(p + 1, &e, 10), hi = lo;
        if (*e == '-') hi = strtol(e + 1, &e, 10);
        if (e != item + n || lo > 1L << 30 || hi > 1L << 30 || hi < 0) continue;
        return r->blk = b, r->lo = (int)lo, r->hi = (int)hi, 0;
    }
    return 1;
}

int fe_plan_recompute(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g)
{
    static const char hint[] = "write recompute = BLOCK {, BLOCK}: a block's name (h) or some of its repeats (h.0-5), "
                               "each maybe with :attn (h:attn: only the attention recomputed); "
                               "--dump=graph lists the blocks' ops";
    char *buf = ir_xstrdup(kv->val), *save, *tok;
    int n = 0, rc = 0;
    for (const char *p = kv->val; *p; p++) n += *p == ',' || *p == ' ' || *p == '\t';
    ir_planlists *L = &g->req.L;
    L->rc = ir_galloc(g, sizeof *L->rc * (size_t)(n + 1));
    for (tok = strtok_r(buf, ", \t", &save); tok && !rc; tok = strtok_r(NULL, ", \t", &save)) {
        ir_rcitem *r = &L->rc[L->nrc];
        if (rc_item(g, tok, r)) {
            rc = fe_kv_error(s, sec, kv, hint, "[plan] recompute: '%s' is not a block (or BLOCK.A-B, BLOCK:attn)", tok);
            break;
        }
        r->text = ir_str(g, tok);
        L->nrc++;
    }
    free(buf);
    return rc;
}

int fe_plan_stage_tp(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g)
{
    static const char hint[] = "write stage_tp = T0 T1 ..: each pipeline stage's tp degree, a divisor of its devices "
                               "(the rest is its dp)";
    ir_planlists *L = &g->req.L;
    size_t len = strlen(kv->val);
    L->stage_tp = ir_galloc(g, sizeof(int) * (len / 2 + 1));
    for (const char *p = kv->val; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        if (!*p) break;
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p || (*e && *e != ' ' && *e != '\t' && *e != ',') || v < 1 || v > 1L << 24)
            return fe_kv_error(s, sec, kv, hint, "[plan] stage_tp: '%s' is not a list of positive integers", kv->val);
        L->stage_tp[L->nstage_tp++] = (int)v;
        p = e;
    }
    return 0;
}
