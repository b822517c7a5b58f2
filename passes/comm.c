/* comm.c -- derive communication from pTensor mismatches.
 *
 * For every vTensor, the pTensors its producers made (or, for params and
 * optimizer state, the pieces devices store, i.e. what the optimizer updates)
 * are the sources; the pTensors sub-ops consume are the needs (a box, as a
 * full value, on a device).  For each need not already there, the cheapest
 * rule that applies makes it (docs/comm.md has the table and byte costs):
 *
 *   slice          a full-value local piece covers the box          0 bytes
 *   all-reduce     the box exists as value parts 0..V-1, one per member
 *   reduce-scatter value parts of a larger box; members need its tiles
 *   all-gather     tiles of the box (one per member) -> every member
 *   all-to-all     a box tiled along dim a -> the same box tiled along dim b
 *   broadcast      one holder, several devices need the same box
 *   send/recv      general fallback: the box is covered cell by cell from
 *                  the nearest holders (local copies first), value parts summed
 *
 * Replicated holders are matched by replica index (the r-th holder of every
 * piece forms group r), so data-parallel replicas of a tensor-parallel
 * layout all-reduce in their own groups.  Every rule checks the exact
 * coverage it needs; a need no rule can make is a planner error.
 *
 * Cost: a tensor's sources and needs come from its producer's and its
 * consumers' sub-ops only (pass_split's op_sop, a consumer list per
 * tensor); rules look up one device's sources and needs through chains by
 * device, and the pieces of each value split are collected once per tensor
 * with a table by box.  Linear in the sub-ops for the rules the planner's
 * policies use; the fallbacks (broadcast, cell-by-cell send/recv) still
 * scan a tensor's needs per call.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* A list of distinct pTensors of one tensor.  Every pTensor belongs to one
 * tensor and each tensor is handled once, so membership (on) never needs
 * clearing when the list is emptied for the next tensor. */
typedef struct list {
    int *v; int n, cap;
    char *on;        /* per pTensor id: in the list (for any tensor so far) */
    int oncap;       /* entries of on */
} list;

/* Append x unless it is listed already. */
static void lpush(list *l, int x)
{
    if (x >= l->oncap) {
        int old = l->oncap;
        ir_grow((void **)&l->on, &l->oncap, x + 1, 1);
        memset(l->on + old, 0, (size_t)(l->oncap - old));
    }
    if (l->on[x]) return;
    l->on[x] = 1;
    *IR_PUSH(l->v, l->n, l->cap) = x;
}

/* Is pTensor x in the list? */
static int lhas(const list *l, int x) { return x < l->oncap && l->on[x]; }

/* Per-tensor state of the pass. */
typedef struct cctx {
    ir_dist *d;
    int t;            /* the tensor */
    int nd;           /* its rank */
    list src;         /* source pTensors */
    list need;        /* needed pTensors */
    char *made;       /* per pTensor id: made by a comm */
    int madecap;
    int64_t *sent;    /* per device: bytes sent by fallback transfers (load balance) */
    int *cons0;       /* per tensor + 1: CSR start into cons */
    int *cons;        /* ops reading each tensor, ascending, each once */
    /* the tensor's sources and needs by device (index_devs): chains through
       the lists in list order, so a rule looks at one device's only */
    int *dstamp;      /* per device: tensor + 1 whose chains shead / nhead hold */
    int *shead;       /* per device: index into src of its first source, -1: none */
    int *nhead;       /* per device: index into need of its first need, -1: none */
    int *snext;       /* per index into src: the next source on the same device, -1 */
    int *nnext;       /* per index into need: the next need on the same device, -1 */
    int snextcap, nnextcap;  /* allocated entries of snext, nnext */
    struct pcache *pc;       /* the tensor's pieces, by value split (pieces) */
    int npc, pccap;          /* how many value splits, allocated */
    /* the rules' scratch arrays (one rule runs at a time), each of scap
       entries: at least the devices and the tensor's sources and needs, so
       a collective may span every device (no fixed member limit) */
    int scap;
    const struct piece **ch;
    const ir_box **bx, **nb;
    int *grp, *devs, *in, *out, *order, *norder;
    int *mstamp, mgen;       /* per device: mgen when taken by the current match */
    int *gstamp;             /* per device: tensor + 1 whose sends gsent counts */
    int *gsent;              /* per device: the tensor's boxes it sends on to another stage
                                (rule_stage_gather: its receivers spread over the holders) */
} cctx;

/* Make the scratch arrays hold at least n entries. */
static void scratch(cctx *c, int n)
{
    if (n <= c->scap) return;
    int cap = c->scap ? c->scap : 64;
    while (cap < n) cap *= 2;
    c->ch = ir_xrealloc(c->ch, sizeof *c->ch * (size_t)cap);
    c->bx = ir_xrealloc(c->bx, sizeof *c->bx * (size_t)cap);
    c->nb = ir_xrealloc(c->nb, sizeof *c->nb * (size_t)cap);
    int **iv[] = {&c->grp, &c->devs, &c->in, &c->out, &c->order, &c->norder};
    for (size_t k = 0; k < sizeof iv / sizeof *iv; k++) *iv[k] = ir_xrealloc(*iv[k], sizeof(int) * (size_t)cap);
    c->scap = cap;
}

static void scratch_free(cctx *c)
{
    free(c->ch), free(c->bx), free(c->nb), free(c->grp), free(c->devs), free(c->in), free(c->out);
    free(c->order), free(c->norder), free(c->mstamp), free(c->gstamp), free(c->gsent);
}

static int is_made(const cctx *c, int pt) { return pt < c->madecap && c->made[pt]; }

static void mark(cctx *c, int pt)
{
    if (pt < 0) return;
    if (pt >= c->madecap) ir_grow((void **)&c->made, &c->madecap, pt + 1, 1);
    c->made[pt] = 1;
}

static const ir_ptensor *P(const cctx *c, int pt) { return &c->d->pt[pt]; }
static int64_t bytes_of(const cctx *c, const ir_box *b)
{
    return ir_box_numel(b, c->nd) * pass_elsize(&c->d->g->t[c->t]);
}


/* Add a comm over members devs[0..n) (any order: sorted here, with their
 * in/out pTensors); returns its id.  root is a device (or -1). */
static int add_comm(cctx *c, ir_commkind k, int n, const int *devs, const int *in, const int *out,
                    const ir_box *region, int root, int acc, int64_t bytes, const char *why)
{
    ir_dist *d = c->d;
    int *sd = ir_xmalloc(sizeof(int) * 4 * (size_t)n), *si = sd + n, *so = si + n, *ix = so + n;
    /* members by device: sort (device, position) pairs packed in 64 bits */
    int64_t *key = ir_xmalloc(sizeof *key * (size_t)n);
    for (int j = 0; j < n; j++) key[j] = (int64_t)devs[j] << 32 | j;
    qsort(key, (size_t)n, sizeof *key, ir_cmp_i64);
    for (int i = 0; i < n; i++) ix[i] = (int)(key[i] & 0xffffffff), sd[i] = devs[ix[i]];
    free(key);
    ir_comm cm;
    memset(&cm, 0, sizeof cm);
    cm.root = -1;
    cm.bucket = cm.bnext = -1;
    for (int i = 0; i < n; i++) {
        IR_ASSERT(i == 0 || sd[i] != sd[i - 1]);
        si[i] = in ? in[ix[i]] : -1;
        so[i] = out ? out[ix[i]] : -1;
        if (sd[i] == root) cm.root = i;
    }
    cm.kind = k;
    cm.tensor = c->t;
    cm.group = ir_dist_group(d, sd, n);
    cm.n = n;
    cm.in = ir_dist_ints(d, si, n);
    cm.out = ir_dist_ints(d, so, n);
    if (region) cm.region = *region;
    cm.acc = acc;
    cm.bytes = bytes;
    cm.sec = -1;
    cm.why = why ? ir_dist_str(d, why) : NULL;
    *IR_PUSH(d->comm, d->ncomm, d->commcap) = cm;
    for (int i = 0; i < n; i++) mark(c, so[i]);
    free(sd);
    return d->ncomm - 1;
}

/* The full-value pTensor with pt's box on device dev. */
static int full_pt(cctx *c, int pt, int dev)
{
    ir_ptensor p = *P(c, pt);
    p.vpart = 0;
    p.vn = 1;
    p.dev = dev;
    return ir_dist_pt(c->d, &p);
}

/* The one dim where box a differs from box b (-1: none or several). */
static int diff_dim(const ir_box *a, const ir_box *b, int nd)
{
    int j = -1;
    for (int i = 0; i < nd; i++)
        if (a->lo[i] != b->lo[i] || a->hi[i] != b->hi[i]) {
            if (j >= 0) return -1;
            j = i;
        }
    return j;
}

/* Pieces: distinct boxes, each with its holders (pTensors, by device). */
typedef struct piece {
    ir_box box;
    int n, cap;     /* holders, allocated */
    int *pt;        /* holder pTensors, ascending device */
} piece;

/* The pieces of one selection of the tensor's sources (value split vn, one
 * part or any), with a table to find a box's. */
typedef struct pset {
    piece *ps;      /* the pieces, in order of their first source */
    int np, cap;    /* how many, allocated */
    int *tab;       /* open addressing: piece index by box, -1 empty (tcap slots, a power of two) */
    int tcap;       /* slots of tab */
    int built;      /* collected */
} pset;

/* The pieces of the sources with one value split vn, built once per tensor
 * (the sources do not change while its needs are made). */
typedef struct pcache {
    int vn;         /* the value split */
    pset *set;      /* [0]: any part, [1 + j]: part j */
} pcache;

/* Hash of the first nd dims of a box (multiply and fold, a word at a time). */
static uint64_t box_hash(const ir_box *b, int nd)
{
    uint64_t h = 14695981039346656037ull;
    for (int i = 0; i < nd; i++)
        for (int k = 0; k < 2; k++) {
            h = (h ^ (uint64_t)(k ? b->hi[i] : b->lo[i])) * 0x9e3779b97f4a7c15ull;
            h ^= h >> 29;
        }
    return h;
}

/* Index of the piece of S with box b, or -1. */
static int pset_find(const cctx *c, const pset *S, const ir_box *b)
{
    if (!S->tcap) return -1;
    size_t mask = (size_t)S->tcap - 1;
    for (size_t i = (size_t)box_hash(b, c->nd) & mask; S->tab[i] >= 0; i = (i + 1) & mask)
        if (ir_box_eq(&S->ps[S->tab[i]].box, b, c->nd)) return S->tab[i];
    return -1;
}

/* Add source pTensor pt to S: to the piece of its box (made when new), in
 * device order. */
static void pset_add(const cctx *c, pset *S, int pt)
{
    const ir_ptensor *s = P(c, pt);
    int k = pset_find(c, S, &s->box);
    if (k < 0) {
        if (2 * (S->np + 1) > S->tcap) {   /* grow the table, re-enter every box */
            S->tcap = S->tcap ? 2 * S->tcap : 16;
            free(S->tab);
            S->tab = ir_xmalloc(sizeof(int) * (size_t)S->tcap);
            for (int i = 0; i < S->tcap; i++) S->tab[i] = -1;
            for (int q = 0; q < S->np; q++) {
                size_t i = (size_t)box_hash(&S->ps[q].box, c->nd) & (size_t)(S->tcap - 1);
                while (S->tab[i] >= 0) i = (i + 1) & (size_t)(S->tcap - 1);
                S->tab[i] = q;
            }
        }
        piece *p = IR_PUSH(S->ps, S->np, S->cap);
        memset(p, 0, sizeof *p);
        p->box = s->box;
        k = S->np - 1;
        size_t i = (size_t)box_hash(&s->box, c->nd) & (size_t)(S->tcap - 1);
        while (S->tab[i] >= 0) i = (i + 1) & (size_t)(S->tcap - 1);
        S->tab[i] = k;
    }
    piece *p = &S->ps[k];
    int at = p->n;
    *IR_PUSH(p->pt, p->n, p->cap) = pt;
    while (at > 0 && P(c, p->pt[at - 1])->dev > s->dev) p->pt[at] = p->pt[at - 1], at--;
    p->pt[at] = pt;
}

/* The sources matching (vn, vpart or -1 for any) as distinct-box pieces:
 * collected on first use, for every part of vn at once (one pass over the
 * sources), and kept until the next tensor. */
static const pset *pieces(cctx *c, int vn, int vpart)
{
    pcache *pc = NULL;
    for (int i = 0; i < c->npc && !pc; i++)
        if (c->pc[i].vn == vn) pc = &c->pc[i];
    if (!pc) {
        pc = IR_PUSH(c->pc, c->npc, c->pccap);
        pc->vn = vn;
        pc->set = ir_xcalloc((size_t)vn + 1, sizeof(pset));
    }
    pset *S = &pc->set[vpart + 1];
    if (S->built) return S;
    for (int j = vpart < 0 ? 0 : 1; j < (vpart < 0 ? 1 : vn + 1); j++) pc->set[j].built = 1;
    for (int i = 0; i < c->src.n; i++) {
        const ir_ptensor *s = P(c, c->src.v[i]);
        if (s->vn == vn) pset_add(c, &pc->set[vpart < 0 ? 0 : 1 + s->vpart], c->src.v[i]);
    }
    return S;
}

/* Forget the pieces of the last tensor. */
static void pieces_free(cctx *c)
{
    for (int i = 0; i < c->npc; i++) {
        for (int j = 0; j <= c->pc[i].vn; j++) {
            pset *S = &c->pc[i].set[j];
            for (int q = 0; q < S->np; q++) free(S->ps[q].pt);
            free(S->ps), free(S->tab);
        }
        free(c->pc[i].set);
    }
    c->npc = 0;
}

/* Replica matching: chunks[i] (i < k) are pieces with the same number of
 * holders R; dev is the r-th holder of one of them; grp[i] = the r-th holder
 * pTensor of chunk i.  Returns 1 on success. */
static int match(cctx *c, const piece *const *chunks, int k, int dev, int *grp)
{
    int R = chunks[0]->n, r = -1;
    for (int i = 0; i < k; i++) {
        if (chunks[i]->n != R) return 0;
        for (int q = 0; q < R; q++)
            if (P(c, chunks[i]->pt[q])->dev == dev) r = q;
    }
    if (r < 0) return 0;
    if (++c->mgen == 0) {   /* wrapped: forget every stamp */
        memset(c->mstamp, 0, sizeof(int) * (size_t)c->d->ndev);
        c->mgen = 1;
    }
    for (int i = 0; i < k; i++) {
        grp[i] = chunks[i]->pt[r];
        int dv = P(c, grp[i])->dev;
        if (c->mstamp[dv] == c->mgen) return 0;   /* two members on one device */
        c->mstamp[dv] = c->mgen;
    }
    return 1;
}

/* Do boxes tile whole along dim j into equal consecutive ranges?  order[i]
 * = index of the box holding range i. */
static int tiles(const ir_box *const *bx, int k, const ir_box *whole, int j, int nd, int *order)
{
    int64_t len = whole->hi[j] - whole->lo[j];
    if (k < 2 || len % k) return 0;
    int64_t part = len / k;
    for (int i = 0; i < k; i++) order[i] = -1;
    for (int i = 0; i < k; i++) {
        for (int q = 0; q < nd; q++)
            if (q != j && (bx[i]->lo[q] != whole->lo[q] || bx[i]->hi[q] != whole->hi[q])) return 0;
        int64_t off = bx[i]->lo[j] - whole->lo[j];
        if (off < 0 || off % part || bx[i]->hi[j] - bx[i]->lo[j] != part) return 0;
        if (order[off / part] >= 0) return 0;
        order[off / part] = i;
    }
    return 1;
}

/* Index into src of the first source on dev, -1: none (then snext). */
static int src_on(const cctx *c, int dev) { return c->dstamp[dev] == c->t + 1 ? c->shead[dev] : -1; }

/* Index into need of the first need on dev, -1: none (then nnext). */
static int needs_on(const cctx *c, int dev) { return c->dstamp[dev] == c->t + 1 ? c->nhead[dev] : -1; }

/* Chain the tensor's sources and needs by device, each in list order. */
static void index_devs(cctx *c)
{
    ir_grow((void **)&c->snext, &c->snextcap, c->src.n + 1, sizeof(int));
    ir_grow((void **)&c->nnext, &c->nnextcap, c->need.n + 1, sizeof(int));
    for (int l = 0; l < 2; l++) {
        const list *L = l ? &c->need : &c->src;
        int *head = l ? c->nhead : c->shead, *next = l ? c->nnext : c->snext;
        for (int i = L->n - 1; i >= 0; i--) {
            int dev = P(c, L->v[i])->dev;
            if (c->dstamp[dev] != c->t + 1) c->dstamp[dev] = c->t + 1, c->shead[dev] = c->nhead[dev] = -1;
            next[i] = head[dev];
            head[dev] = i;
        }
    }
}

/* A full-value need on dev with this box, not yet made, or -1. */
static int need_on(const cctx *c, int dev, const ir_box *box)
{
    for (int i = needs_on(c, dev); i >= 0; i = c->nnext[i]) {
        const ir_ptensor *n = P(c, c->need.v[i]);
        if (n->vn == 1 && ir_box_eq(&n->box, box, c->nd)) return c->need.v[i];
    }
    return -1;
}

/* Is pt there: a source, or made by a comm already? */
static int have(const cctx *c, int pt) { return lhas(&c->src, pt) || is_made(c, pt); }

/* ---------------------------------------------------------------- rules */

/* A full-value local piece covers the need: slice it. */
static int rule_slice(cctx *c, int need)
{
    const ir_ptensor n = *P(c, need);
    for (int i = src_on(c, n.dev); i >= 0; i = c->snext[i]) {
        const ir_ptensor *s = P(c, c->src.v[i]);
        if (s->vn != 1 || !ir_box_contains(&s->box, &n.box, c->nd)) continue;
        int in = c->src.v[i];
        add_comm(c, IR_COMM_SLICE, 1, &n.dev, &in, &need, NULL, -1, 0, 0, "a sub-box of a local piece");
        return 1;
    }
    /* a larger box made here for another reader (the main loop makes those
       first): co-shard pieces read slices of a tensor received whole */
    for (int i = needs_on(c, n.dev); i >= 0; i = c->nnext[i]) {
        int in = c->need.v[i];
        const ir_ptensor *s = P(c, in);
        if (in == need || s->vn != 1 || !is_made(c, in) || !ir_box_contains(&s->box, &n.box, c->nd)) continue;
        add_comm(c, IR_COMM_SLICE, 1, &n.dev, &in, &need, NULL, -1, 0, 0, "a sub-box of a piece made here");
        return 1;
    }
    return 0;
}

/* Value parts 0..V-1 of the need's box, one per member: all-reduce. */
static int rule_allreduce(cctx *c, int need)
{
    const ir_ptensor n = *P(c, need);
    int ok = 0;
    for (int i = 0; i < c->src.n && !ok; i++) {
        const ir_ptensor *s = P(c, c->src.v[i]);
        if (s->vn == 1 || !ir_box_eq(&s->box, &n.box, c->nd)) continue;
        int V = s->vn;
        scratch(c, V + 1);
        const piece **ch = c->ch;
        int *grp = c->grp, *devs = c->devs, *out = c->out, good = 1;
        for (int j = 0; j < V && good; j++) {
            const pset *S = pieces(c, V, j);
            int q = pset_find(c, S, &n.box);
            ch[j] = q >= 0 ? &S->ps[q] : NULL;
            good = ch[j] != NULL;
            if (!good) V = j + 1;
        }
        if (good && match(c, ch, V, n.dev, grp)) {
            for (int j = 0; j < V; j++) {
                devs[j] = P(c, grp[j])->dev;
                out[j] = full_pt(c, grp[j], devs[j]);
            }
            char why[160];
            snprintf(why, sizeof why, "sum of %d partial values", V);
            add_comm(c, IR_COMM_ALLREDUCE, V, devs, grp, out, NULL, -1, 0, bytes_of(c, &n.box) * 2 * (V - 1) / V,
                     why);
            ok = 1;
        }
        break;
    }
    return ok;
}

/* Pipelines: value parts of a larger box held across stages, one per
 * member (an op split over every device, interlaced: a vocabulary-parallel
 * embedding's output), a sub-box needed (a stage's dp rows): all-reduce the
 * whole box over the members, then slice -- one collective every rank of
 * the shared task meets, not cell-by-cell sums from every holder. */
static int rule_allreduce_slice(cctx *c, int need)
{
    const ir_dist *d = c->d;
    const ir_ptensor n = *P(c, need);
    int sd = d->ndev / d->mesh_pp;
    if (d->mesh_pp <= 1) return 0;
    for (int i = 0; i < c->src.n; i++) {
        const ir_ptensor *s = P(c, c->src.v[i]);
        if (s->vn == 1 || ir_box_eq(&s->box, &n.box, c->nd) || !ir_box_contains(&s->box, &n.box, c->nd)) continue;
        int stages = 0;   /* the parts' holders on more than one stage */
        for (int j = 0; j < c->src.n; j++) stages |= P(c, c->src.v[j])->dev / sd != s->dev / sd;
        if (!stages) return 0;
        int full = full_pt(c, c->src.v[i], n.dev);
        if (!have(c, full) && !rule_allreduce(c, full)) return 0;
        add_comm(c, IR_COMM_SLICE, 1, &n.dev, &full, &need, NULL, -1, 0, 0, "a sub-box of the sum over every stage");
        return 1;
    }
    return 0;
}

/* Value parts of a larger box whose members need its tiles: reduce-scatter. */
static int rule_reducescatter(cctx *c, int need)
{
    const ir_ptensor n = *P(c, need);
    int ok = 0;
    for (int i = 0; i < c->src.n && !ok; i++) {
        const ir_ptensor s = *P(c, c->src.v[i]);
        if (s.vn == 1 || ir_box_eq(&s.box, &n.box, c->nd) || !ir_box_contains(&s.box, &n.box, c->nd))
            continue;
        int V = s.vn, good = 1;
        scratch(c, V + 1);
        int *grp = c->grp, *devs = c->devs, *out = c->out, *order = c->order;
        const piece **ch = c->ch;
        for (int j = 0; j < V; j++) {
            const pset *S = pieces(c, V, j);
            int q = pset_find(c, S, &s.box);
            ch[j] = q >= 0 ? &S->ps[q] : NULL;
            good &= ch[j] != NULL;
        }
        if (good && match(c, ch, V, n.dev, grp)) {
            int dim = diff_dim(&s.box, &n.box, c->nd);
            const ir_box **bx = c->bx;
            for (int j = 0; j < V && good; j++) {
                devs[j] = P(c, grp[j])->dev;
                out[j] = -1;
                /* member j's need: a tile of the box along dim */
                for (int q = needs_on(c, devs[j]); q >= 0 && out[j] < 0; q = c->nnext[q]) {
                    const ir_ptensor *m = P(c, c->need.v[q]);
                    if (m->vn == 1 && ir_box_contains(&s.box, &m->box, c->nd) &&
                        diff_dim(&s.box, &m->box, c->nd) == dim && !have(c, c->need.v[q]))
                        out[j] = c->need.v[q];
                }
                good = out[j] >= 0;
                if (good) bx[j] = &P(c, out[j])->box;
            }
            if (good && dim >= 0 && tiles(bx, V, &s.box, dim, c->nd, order)) {
                char why[160];
                snprintf(why, sizeof why, "sum of %d partial values, each member needs one tile (dim %d)", V, dim);
                add_comm(c, IR_COMM_REDUCESCATTER, V, devs, grp, out, NULL, -1, 0,
                         bytes_of(c, &s.box) * (V - 1) / V, why);
                ok = 1;
            }
        }
    }
    return ok;
}

/* Tiles of the need's box, one per member, all members need the box: all-gather. */
/* The full-value pieces strictly inside box b that differ from it in one
 * dim (the same for all): into c->ch and c->bx; returns their count, *dim
 * that dim.  Tiles of b when tiles() says so. */
static int tiles_in(cctx *c, const ir_box *b, int *dim)
{
    const pset *S = pieces(c, 1, -1);
    const piece *ps = S->ps;
    int np = S->np, k = 0;
    scratch(c, np + 1);
    *dim = -1;
    for (int q = 0; q < np; q++) {
        if (!ir_box_contains(b, &ps[q].box, c->nd) || ir_box_eq(b, &ps[q].box, c->nd)) continue;
        int j = diff_dim(b, &ps[q].box, c->nd);
        if (j < 0 || (*dim >= 0 && j != *dim)) continue;
        *dim = j;
        c->ch[k] = &ps[q];
        c->bx[k++] = &ps[q].box;
    }
    return k;
}

static int rule_allgather(cctx *c, int need)
{
    const ir_ptensor n = *P(c, need);
    int dim, k = tiles_in(c, &n.box, &dim), ok = 0;
    const piece **ch = c->ch;
    const ir_box **bx = c->bx;
    int *order = c->order, *grp = c->grp, *devs = c->devs, *out = c->out;
    if (k >= 2 && tiles(bx, k, &n.box, dim, c->nd, order) && match(c, ch, k, n.dev, grp)) {
        ok = 1;
        for (int j = 0; j < k && ok; j++) {
            devs[j] = P(c, grp[j])->dev;
            out[j] = need_on(c, devs[j], &n.box);
            ok = out[j] >= 0 && !have(c, out[j]);
        }
        if (ok) {
            char why[160];
            snprintf(why, sizeof why, "%d tiles along dim %d; every member needs the whole box", k, dim);
            add_comm(c, IR_COMM_ALLGATHER, k, devs, grp, out, NULL, -1, 0, bytes_of(c, bx[0]) * (k - 1), why);
        }
    }
    return ok;
}

/* A box tiled along dim a on the members, needed tiled along dim b: all-to-all. */
static int rule_alltoall(cctx *c, int need)
{
    const ir_ptensor n = *P(c, need);
    const pset *S = pieces(c, 1, -1);
    const piece *ps = S->ps;
    int np = S->np, ok = 0;
    /* the member's own piece: the one on n.dev that meets the need */
    for (int q = 0; q < np && !ok; q++) {
        const ir_box *mine = &ps[q].box;
        int on = 0;
        for (int r = 0; r < ps[q].n; r++) on |= P(c, ps[q].pt[r])->dev == n.dev;
        ir_box x;
        if (!on || !ir_box_and(mine, &n.box, c->nd, &x)) continue;
        /* the whole box: the need's extent in every dim but b, the piece's in dim b */
        ir_box whole = n.box;
        int a = -1, b = -1;
        for (int i = 0; i < c->nd; i++) {
            int pn = mine->lo[i] == n.box.lo[i] && mine->hi[i] == n.box.hi[i];
            if (pn) continue;
            if (mine->lo[i] >= n.box.lo[i] && mine->hi[i] <= n.box.hi[i]) {
                if (a >= 0) a = -2;
                else a = i;   /* the piece is a tile of the need along a */
            } else if (n.box.lo[i] >= mine->lo[i] && n.box.hi[i] <= mine->hi[i]) {
                if (b >= 0) b = -2;
                else b = i, whole.lo[i] = mine->lo[i], whole.hi[i] = mine->hi[i];
            } else {
                a = -2;
            }
        }
        if (a < 0 || b < 0) continue;
        scratch(c, np + 1);
        const piece **ch = c->ch;
        const ir_box **bx = c->bx, **nb = c->nb;
        int k = 0, *order = c->order, *grp = c->grp, *devs = c->devs, *out = c->out, *norder = c->norder;
        for (int p = 0; p < np; p++)
            if (ir_box_contains(&whole, &ps[p].box, c->nd) && diff_dim(&whole, &ps[p].box, c->nd) == a)
                ch[k] = &ps[p], bx[k] = &ps[p].box, k++;
        if (k < 2 || !tiles(bx, k, &whole, a, c->nd, order) || !match(c, ch, k, n.dev, grp)) continue;
        int good = 1;
        for (int j = 0; j < k && good; j++) {
            devs[j] = P(c, grp[j])->dev;
            out[j] = -1;
            for (int q2 = needs_on(c, devs[j]); q2 >= 0 && out[j] < 0; q2 = c->nnext[q2]) {
                const ir_ptensor *m = P(c, c->need.v[q2]);
                if (m->vn == 1 && ir_box_contains(&whole, &m->box, c->nd) &&
                    diff_dim(&whole, &m->box, c->nd) == b && !have(c, c->need.v[q2]))
                    out[j] = c->need.v[q2];
            }
            good = out[j] >= 0;
            if (good) nb[j] = &P(c, out[j])->box;
        }
        if (good && tiles(nb, k, &whole, b, c->nd, norder)) {
            char why[160];
            snprintf(why, sizeof why, "tiles along dim %d become tiles along dim %d", a, b);
            add_comm(c, IR_COMM_ALLTOALL, k, devs, grp, out, NULL, -1, 0, bytes_of(c, bx[0]) * (k - 1) / k, why);
            ok = 1;
        }
    }
    return ok;
}

/* One holder of the box, several devices need it: broadcast. */
static int rule_broadcast(cctx *c, int need)
{
    const ir_ptensor n = *P(c, need);
    int root = -1, rpt = -1;
    for (int i = 0; i < c->src.n; i++) {
        const ir_ptensor *s = P(c, c->src.v[i]);
        if (s->vn != 1 || !ir_box_contains(&s->box, &n.box, c->nd)) continue;
        if (s->dev == n.dev) return 0;   /* local: a slice does it */
        if (root < 0 || s->dev < root) root = s->dev, rpt = c->src.v[i];
    }
    if (root < 0) return 0;
    /* in a pipeline, a value one stage sends to others goes point to point (the
       send/recv fallback): a transfer to each, which the pipeline batches at its
       task boundaries, not one collective that ties three stages' orders together
       (the loss, reduced once a step for every rank to report, stays a broadcast) */
    int sd = c->d->ndev / c->d->mesh_pp;
    if (c->d->mesh_pp > 1 && c->t != c->d->g->train.loss && n.dev / sd != root / sd) return 0;
    scratch(c, c->need.n + 2);
    int *devs = c->devs, *in = c->in, *out = c->out, k = 1;
    devs[0] = root, in[0] = rpt, out[0] = -1;
    if (++c->mgen == 0) {   /* wrapped: forget every stamp */
        memset(c->mstamp, 0, sizeof(int) * (size_t)c->d->ndev);
        c->mgen = 1;
    }
    c->mstamp[root] = c->mgen;
    for (int i = 0; i < c->need.n; i++) {
        int q = c->need.v[i];
        const ir_ptensor *m = P(c, q);
        if (m->vn != 1 || !ir_box_eq(&m->box, &n.box, c->nd) || have(c, q) || m->dev == root) continue;
        if (c->d->mesh_pp > 1 && c->t != c->d->g->train.loss && m->dev / sd != root / sd) continue;
        int local = 0;
        for (int s = src_on(c, m->dev); s >= 0; s = c->snext[s]) {
            const ir_ptensor *sp = P(c, c->src.v[s]);
            local |= sp->vn == 1 && ir_box_contains(&sp->box, &m->box, c->nd);
        }
        if (local) continue;
        if (c->mstamp[m->dev] == c->mgen) continue;   /* the device is a member already */
        c->mstamp[m->dev] = c->mgen;
        devs[k] = m->dev, in[k] = -1, out[k] = q, k++;
    }
    if (k < 3) return 0;   /* one receiver: send/recv is as cheap */
    char why[160];
    snprintf(why, sizeof why, "rank %d holds the box; %d others need it", root, k - 1);
    add_comm(c, IR_COMM_BROADCAST, k, devs, in, out, &n.box, root, 0, bytes_of(c, &n.box), why);
    return 1;
}

/* Sorted unique cut points of pieces within [lo, hi) along dim j, into cut
 * (room for 2 np + 2: every piece's two bounds and the box's). */
static int cuts(const piece *ps, int np, const ir_box *b, int j, int64_t *cut)
{
    int n = 0;
    cut[n++] = b->lo[j];
    cut[n++] = b->hi[j];
    for (int q = 0; q < np; q++) {
        if (ps[q].box.lo[j] > b->lo[j] && ps[q].box.lo[j] < b->hi[j]) cut[n++] = ps[q].box.lo[j];
        if (ps[q].box.hi[j] > b->lo[j] && ps[q].box.hi[j] < b->hi[j]) cut[n++] = ps[q].box.hi[j];
    }
    qsort(cut, (size_t)n, sizeof *cut, ir_cmp_i64);
    int u = 0;
    for (int i = 0; i < n; i++)
        if (!u || cut[u - 1] != cut[i]) cut[u++] = cut[i];
    return u;
}

/* cover's cells, ncell of them: cut[j][0 .. nc[j]] the cut points of dim j,
 * idx the odometer (zero); each cell from the best holder.  0 if some cell
 * is not covered. */
static int cover_cells(cctx *c, int need, const piece *ps, int np, int acc, const char *why, int64_t *const *cut,
                       const int *nc, int *idx, int64_t ncell)
{
    const ir_ptensor n = *P(c, need);
    int sd = c->d->ndev / c->d->mesh_pp;
    for (int64_t cell = 0; cell < ncell; cell++) {
        ir_box b;
        memset(&b, 0, sizeof b);
        for (int j = 0; j < c->nd; j++) b.lo[j] = cut[j][idx[j]], b.hi[j] = cut[j][idx[j] + 1];
        int best = -1, bdev = -1;
        for (int q = 0; q < np; q++) {
            if (!ir_box_contains(&ps[q].box, &b, c->nd)) continue;
            for (int r = 0; r < ps[q].n; r++) {
                int dv = P(c, ps[q].pt[r])->dev;
                /* (a holder on the need's stage: no transfer between stages, as for a param
                   every stage that reads it keeps, split another way there with stage_tp) */
                int ds = dv / sd == n.dev / sd, bs = bdev >= 0 && bdev / sd == n.dev / sd;
                int better = best < 0 || dv == n.dev ||
                             (bdev != n.dev && (ds > bs || (ds == bs && c->sent[dv] < c->sent[bdev])));
                if (better) best = ps[q].pt[r], bdev = dv;
            }
        }
        if (best < 0) return 0;
        if (bdev == n.dev) {
            add_comm(c, IR_COMM_COPY, 1, &n.dev, &best, &need, &b, -1, acc, 0, why);
        } else {
            int devs[2] = {bdev, n.dev}, in[2] = {best, -1}, out[2] = {-1, need};
            c->sent[bdev] += bytes_of(c, &b);
            add_comm(c, IR_COMM_SENDRECV, 2, devs, in, out, &b, bdev, acc, bytes_of(c, &b), why);
        }
        for (int j = c->nd - 1; j >= 0; j--) {
            if (++idx[j] < nc[j]) break;
            idx[j] = 0;
        }
    }
    return 1;
}

/* Cover the need cell by cell from pieces (one value part, or full values),
 * local holders first, then (pipelines) those on the need's stage, else the
 * least-loaded holder.  Returns 0 if some cell is not covered. */
static int cover(cctx *c, int need, const piece *ps, int np, int acc, const char *why)
{
    const ir_ptensor n = *P(c, need);
    /* the cut points per dim, room for every piece's bounds: a fixed 64 dropped the bounds past
       the 62nd, and a box in 64 tiles (interlaced's head over 64 devices, split on the tokens
       under sequence parallelism) then had cells no piece contains */
    size_t room = 2 * (size_t)np + 2;
    int64_t *cut[IR_MAXDIM], *cutv = ir_xmalloc(sizeof(int64_t) * room * (size_t)(c->nd ? c->nd : 1));
    int nc[IR_MAXDIM], idx[IR_MAXDIM] = {0};
    int64_t ncell = 1;
    for (int j = 0; j < c->nd; j++) {
        cut[j] = cutv + room * (size_t)j;
        nc[j] = cuts(ps, np, &n.box, j, cut[j]) - 1;
        ncell *= nc[j];
    }
    int ok = ncell <= 4096 && cover_cells(c, need, ps, np, acc, why, cut, nc, idx, ncell);
    free(cutv);
    return ok;
}

/* General fallback: assemble the need from full pieces, or sum value parts. */
static int rule_fallback(cctx *c, int need)
{
    const ir_ptensor n = *P(c, need);
    const pset *S = pieces(c, 1, -1);
    const piece *ps = S->ps;
    int np = S->np, ok = 0;
    /* full values: one covering remote piece needs no zeroing */
    int single = 0;
    for (int q = 0; q < np; q++) single |= ir_box_contains(&ps[q].box, &n.box, c->nd);
    int ncomm0 = c->d->ncomm;
    if (np) {
        int zero = !single;
        if (zero) add_comm(c, IR_COMM_ZERO, 1, &n.dev, NULL, &need, NULL, -1, 0, 0, "assembled from pieces");
        ok = cover(c, need, ps, np, zero, "assembled from the pieces that hold it");
        if (!ok) c->d->ncomm = ncomm0;   /* drop the partial assembly; try value parts */
    }
    if (ok) return 1;
    /* value parts: zero, then add every part's pieces */
    int V = 0;
    for (int i = 0; i < c->src.n; i++)
        if (P(c, c->src.v[i])->vn > 1) V = P(c, c->src.v[i])->vn;
    if (!V) return 0;
    add_comm(c, IR_COMM_ZERO, 1, &n.dev, NULL, &need, NULL, -1, 0, 0, "sum of partial values");
    for (int j = 0; j < V; j++) {
        S = pieces(c, V, j);
        ok = cover(c, need, S->ps, S->np, 1, "sum of the partial values that hold it");
        if (!ok) return 0;
    }
    return 1;
}

/* Pipelines: a whole value needed on a stage that holds none of it, made
 * as partial sums on another stage (a vocabulary-parallel embedding read by
 * a later stage): sum the parts where they are (all-reduce on their stage),
 * then send the sum, from the device with the same place in its stage when
 * it holds one -- one transfer per need, not one per part. */
static int rule_stage_sum(cctx *c, int need)
{
    const ir_dist *d = c->d;
    const ir_ptensor n = *P(c, need);
    int sd = d->ndev / d->mesh_pp, best = -1;
    if (d->mesh_pp <= 1 || n.vn != 1) return 0;
    for (int i = 0; i < c->src.n; i++)
        if (P(c, c->src.v[i])->dev / sd == n.dev / sd) return 0;   /* its own stage has pieces */
    for (int i = 0; i < c->src.n; i++) {
        const ir_ptensor *s = P(c, c->src.v[i]);
        if (s->vn == 1 || !ir_box_contains(&s->box, &n.box, c->nd)) continue;
        int full = full_pt(c, c->src.v[i], s->dev);
        if (!have(c, full) && !rule_allreduce(c, full)) return 0;
        if (best < 0 || s->dev % sd == n.dev % sd) best = full;
    }
    if (best < 0) return 0;
    int devs[2] = {P(c, best)->dev, n.dev}, in[2] = {best, -1}, out[2] = {-1, need};
    add_comm(c, IR_COMM_SENDRECV, 2, devs, in, out, &n.box, devs[0], 0, bytes_of(c, &n.box),
             "the sum made on its stage, sent on");
    return 1;
}

/* Pipelines: a whole value needed on a stage that holds none of it, made
 * as tiles on another stage (a tp split the next stage does not share):
 * gather the tiles where they are (all-gather on their stage), then send
 * the whole box, from the device with the same place in its stage when it
 * holds one -- one transfer per need that goes whole, not one per tile
 * added into a zeroed buffer (which the pipeline cannot move to its task's
 * edge).  When the tiles do not tile the need but the tensor (stages with
 * their own tp, stage_tp: a dp stage's row block read from a tp stage's
 * column tiles), the tensor is gathered and the need's box sent out of it. */
static int rule_stage_gather(cctx *c, int need)
{
    const ir_dist *d = c->d;
    const ir_ptensor n = *P(c, need);
    int sd = d->ndev / d->mesh_pp;
    if (d->mesh_pp <= 1 || n.vn != 1) return 0;
    for (int i = 0; i < c->src.n; i++)
        if (P(c, c->src.v[i])->dev / sd == n.dev / sd) return 0;   /* its own stage has pieces */
    /* the box gathered: the need's, or (stages with other layouts, stage_tp: a row
       block needed from column tiles) the whole tensor's, the need then sent out of it */
    ir_box w = n.box;
    int dim, k = tiles_in(c, &w, &dim);
    const piece **ch = c->ch;
    const ir_box **bx = c->bx;
    int *order = c->order, *grp = c->grp, *devs = c->devs, *out = c->out;
    if (k < 2 || !tiles(bx, k, &w, dim, c->nd, order)) {
        if (!d->stage_tp) return 0;   /* (stages of one layout: the cells go as they are) */
        w = ir_box_full(&d->g->t[c->t]);
        if (ir_box_eq(&w, &n.box, c->nd)) return 0;
        k = tiles_in(c, &w, &dim);
        if (k < 2 || !tiles(bx, k, &w, dim, c->nd, order)) return 0;
    }
    /* the replicas whose member sits where the need does in its stage, else the first */
    int pick = P(c, ch[0]->pt[0])->dev;
    for (int r = 0; r < ch[0]->n; r++)
        for (int i = 0; i < k; i++)
            if (r < ch[i]->n && P(c, ch[i]->pt[r])->dev % sd == n.dev % sd) pick = P(c, ch[0]->pt[r])->dev;
    if (!match(c, ch, k, pick, grp)) return 0;
    /* the sender: the member with the need's place in its stage, else the one that sends the
       fewest of the tensor's boxes so far (a stage whose devices need more than their place's
       tiles, a co-sharded MLP's whole sequence: each member sends to as many receivers) */
    int best = -1, made = 1, same = 0;
    for (int j = 0; j < k; j++) {
        devs[j] = P(c, grp[j])->dev;
        ir_ptensor wp = n;
        wp.box = w;
        wp.dev = devs[j];
        out[j] = ir_dist_pt(c->d, &wp);
        made &= have(c, out[j]);
        if (c->gstamp[devs[j]] != c->t + 1) c->gstamp[devs[j]] = c->t + 1, c->gsent[devs[j]] = 0;
        if (same) continue;
        same = devs[j] % sd == n.dev % sd;
        if (best < 0 || same || c->gsent[devs[j]] < c->gsent[P(c, best)->dev]) best = out[j];
    }
    c->gsent[P(c, best)->dev]++;
    if (!made) {
        char why[160];
        snprintf(why, sizeof why, "%d tiles along dim %d, gathered on their stage for a later one", k, dim);
        add_comm(c, IR_COMM_ALLGATHER, k, devs, grp, out, NULL, -1, 0, bytes_of(c, bx[0]) * (k - 1), why);
    }
    int dv[2] = {P(c, best)->dev, n.dev}, in[2] = {best, -1}, ou[2] = {-1, need};
    add_comm(c, IR_COMM_SENDRECV, 2, dv, in, ou, &n.box, dv[0], 0, bytes_of(c, &n.box),
             ir_box_eq(&w, &n.box, c->nd) ? "the whole box gathered on its stage, sent on"
                                          : "the tensor gathered on its stage, the box sent on");
    return 1;
}

/* Pipelines: a whole value needed on a stage that holds none of it, a tile
 * along dim b of a box another stage holds as tiles along dim a
 * (sequence parallelism's token rows on a stage whose previous one adds the
 * residual split by channels, as where the heads do not divide tp):
 * all-to-all on that stage, every member's tile along b the one its
 * place-mate on the need's stage needs, then each sent whole to it -- one
 * transfer per need, not a piece from every member added into a zeroed
 * buffer (which the pipeline can neither move to its task's edge nor post
 * early). */
static int rule_stage_alltoall(cctx *c, int need)
{
    const ir_dist *d = c->d;
    const ir_ptensor n = *P(c, need);
    int sd = d->ndev / d->mesh_pp, ns = n.dev / sd;
    if (d->mesh_pp <= 1 || n.vn != 1) return 0;
    for (int i = 0; i < c->src.n; i++)
        if (P(c, c->src.v[i])->dev / sd == ns) return 0;   /* its own stage has pieces */
    const pset *S = pieces(c, 1, -1);
    const piece *ps = S->ps;
    int np = S->np;
    scratch(c, np + 1);
    for (int q = 0; q < np; q++) {
        /* a piece meeting the need, and the box it tiles: the need's extent but in dim b */
        ir_box x, whole = n.box;
        if (!ir_box_and(&ps[q].box, &n.box, c->nd, &x)) continue;
        int a = -1, b = -1;
        for (int i = 0; i < c->nd; i++) {
            const ir_box *m = &ps[q].box;
            if (m->lo[i] == n.box.lo[i] && m->hi[i] == n.box.hi[i]) continue;
            if (m->lo[i] >= n.box.lo[i] && m->hi[i] <= n.box.hi[i]) a = a < 0 ? i : -2;
            else if (n.box.lo[i] >= m->lo[i] && n.box.hi[i] <= m->hi[i])
                b = b < 0 ? i : -2, whole.lo[i] = m->lo[i], whole.hi[i] = m->hi[i];
            else a = -2;
        }
        if (a < 0 || b < 0) continue;
        const piece **ch = c->ch;
        const ir_box **bx = c->bx, **nb = c->nb;
        int k = 0, *order = c->order, *norder = c->norder, *grp = c->grp, *devs = c->devs, *out = c->out;
        int *rneed = c->in;
        for (int p = 0; p < np; p++)
            if (ir_box_contains(&whole, &ps[p].box, c->nd) && diff_dim(&whole, &ps[p].box, c->nd) == a)
                ch[k] = &ps[p], bx[k] = &ps[p].box, k++;
        if (k < 2 || !tiles(bx, k, &whole, a, c->nd, order)) continue;
        /* the replica with a member at the need's place, else the first */
        int pick = P(c, ch[0]->pt[0])->dev;
        for (int r = 0; r < ch[0]->n; r++)
            for (int i = 0; i < k; i++)
                if (r < ch[i]->n && P(c, ch[i]->pt[r])->dev % sd == n.dev % sd) pick = P(c, ch[0]->pt[r])->dev;
        if (!match(c, ch, k, pick, grp)) return 0;
        for (int j = 0; j < k; j++) {
            devs[j] = P(c, grp[j])->dev;
            rneed[j] = -1;
            if (devs[j] / sd == ns || devs[j] / sd != devs[0] / sd) return 0;   /* the members on one other stage */
        }
        /* the tiles along b the need's stage needs, one made by each member: its place-mate's
           where that is one, else one nobody makes yet (stages with their own tp) */
        for (int pass = 0; pass < 2; pass++)
            for (int j = 0; j < k; j++) {
                int lo = ns * sd + (pass ? 0 : devs[j] % sd), hi = pass ? (ns + 1) * sd : lo + 1;
                for (int dv = lo; dv < hi && rneed[j] < 0; dv++)
                    for (int i = needs_on(c, dv); i >= 0 && rneed[j] < 0; i = c->nnext[i]) {
                        const ir_ptensor *m = P(c, c->need.v[i]);
                        int taken = m->vn != 1 || !ir_box_contains(&whole, &m->box, c->nd) ||
                                    diff_dim(&whole, &m->box, c->nd) != b || have(c, c->need.v[i]);
                        for (int l = 0; l < k && !taken; l++)
                            taken = rneed[l] >= 0 && ir_box_eq(&P(c, rneed[l])->box, &m->box, c->nd);
                        if (!taken) rneed[j] = c->need.v[i];
                    }
            }
        int mine = 0;
        for (int j = 0; j < k; j++) {
            if (rneed[j] < 0) return 0;
            nb[j] = &P(c, rneed[j])->box;
            mine |= ir_box_eq(nb[j], &n.box, c->nd);
        }
        if (!mine || !tiles(nb, k, &whole, b, c->nd, norder)) return 0;
        for (int j = 0; j < k; j++) {
            ir_ptensor wp = *P(c, rneed[j]);
            wp.dev = devs[j];
            out[j] = ir_dist_pt(c->d, &wp);
        }
        char why[160];
        snprintf(why, sizeof why, "tiles along dim %d become tiles along dim %d on their stage for a later one", a, b);
        add_comm(c, IR_COMM_ALLTOALL, k, devs, grp, out, NULL, -1, 0, bytes_of(c, bx[0]) * (k - 1) / k, why);
        /* every such need of the stage, from the member that made its tile */
        for (int dv = ns * sd; dv < (ns + 1) * sd; dv++)
            for (int i = needs_on(c, dv); i >= 0; i = c->nnext[i]) {
                const ir_ptensor *m = P(c, c->need.v[i]);
                if (m->vn != 1 || have(c, c->need.v[i])) continue;
                for (int j = 0; j < k; j++) {
                    if (!ir_box_eq(nb[j], &m->box, c->nd)) continue;
                    int two[2] = {devs[j], dv}, in[2] = {out[j], -1}, ou[2] = {-1, c->need.v[i]};
                    add_comm(c, IR_COMM_SENDRECV, 2, two, in, ou, nb[j], devs[j], 0, bytes_of(c, nb[j]),
                             "the tile made on its stage, sent on");
                    break;
                }
            }
        return 1;
    }
    return 0;
}

/* A value-split need (a linear op's input): part 0 from a local full
 * value, the other parts zero. */
static int rule_partial(cctx *c, int need)
{
    const ir_ptensor n = *P(c, need);
    for (int i = src_on(c, n.dev); i >= 0; i = c->snext[i]) {
        const ir_ptensor *s = P(c, c->src.v[i]);
        if (s->vn != 1 || !ir_box_contains(&s->box, &n.box, c->nd)) continue;
        int in = c->src.v[i];
        if (n.vpart == 0) add_comm(c, IR_COMM_COPY, 1, &n.dev, &in, &need, &n.box, -1, 0, 0, "part 0 of a full value");
        else add_comm(c, IR_COMM_ZERO, 1, &n.dev, NULL, &need, NULL, -1, 0, 0, "part > 0 of a full value");
        return 1;
    }
    /* the same part of the same value split elsewhere (partial sums a linear op keeps, made on
       another stage): moved there; else part 0 assembled from full values, the others zero */
    const pset *S = pieces(c, n.vn, n.vpart);
    const char *why = "the same partial value, moved";
    if (!S->np) {
        if (n.vpart > 0) {
            add_comm(c, IR_COMM_ZERO, 1, &n.dev, NULL, &need, NULL, -1, 0, 0, "part > 0 of a full value");
            return 1;
        }
        S = pieces(c, 1, -1);
        why = "part 0 of a full value, moved";
        if (!S->np) {
            /* only partial sums split another way (interlaced: an embedding's vocabulary split
               over every device, read as a tp-partial by the first residual add): their full
               value here first, then part 0 of it */
            int full = full_pt(c, need, n.dev);
            if (!have(c, full) &&
                !(rule_slice(c, full) || rule_allreduce(c, full) || rule_reducescatter(c, full) ||
                  rule_allreduce_slice(c, full) || rule_allgather(c, full) || rule_alltoall(c, full) ||
                  rule_broadcast(c, full) || rule_stage_sum(c, full) || rule_stage_gather(c, full) ||
                  rule_stage_alltoall(c, full) || rule_fallback(c, full)))
                return 0;
            add_comm(c, IR_COMM_COPY, 1, &n.dev, &full, &need, &n.box, -1, 0, 0, "part 0 of the full value made here");
            return 1;
        }
    }
    if (!S->np) return 0;
    int single = 0, ncomm0 = c->d->ncomm;
    for (int q = 0; q < S->np; q++) single |= ir_box_contains(&S->ps[q].box, &n.box, c->nd);
    if (!single) add_comm(c, IR_COMM_ZERO, 1, &n.dev, NULL, &need, NULL, -1, 0, 0, "assembled from pieces");
    if (cover(c, need, S->ps, S->np, !single, why)) return 1;
    c->d->ncomm = ncomm0;
    return 0;
}

/* Push operand k of every sub-op of consumer ops of t (in sub-op order)
 * that reads t, where k passes the filter: 0 any input, 1 an optimizer's
 * param or state (k == 0 or k >= 2; the gradient is k == 1). */
static void consumed(const cctx *c, int t, int opt_only, list *l)
{
    const ir_dist *d = c->d;
    const ir_graph *g = d->g;
    for (int q = c->cons0[t]; q < c->cons0[t + 1]; q++) {
        int op = c->cons[q];
        const ir_op *o = &g->op[op];
        if (opt_only && o->phase != IR_PH_OPT) continue;
        for (int i = d->op_sop[op]; i < d->op_sop[op + 1]; i++)
            for (int k = 0; k < o->nin; k++)
                if (o->in[k] == t && (!opt_only || k == 0 || k >= 2)) lpush(l, d->sop[i].in[k]);
    }
}

/* Sources of tensor t: what producers made, or what devices store. */
static void sources(const cctx *c, int t, list *src)
{
    const ir_dist *d = c->d;
    const ir_graph *g = d->g;
    int p = g->t[t].producer;
    if (p >= 0) {
        for (int i = d->op_sop[p]; i < d->op_sop[p + 1]; i++)
            for (int k = 0; k < g->op[p].nout; k++)
                if (g->op[p].out[k] == t) lpush(src, d->sop[i].out[k]);
        return;
    }
    /* params and optimizer state live where the optimizer updates them;
       an untrained param, and data, where their consumers need them */
    consumed(c, t, 1, src);
    if (src->n) return;
    consumed(c, t, 0, src);
}

/* The index of the pass: each tensor's consumer ops. */
static void index_graph(cctx *c)
{
    const ir_dist *d = c->d;
    const ir_graph *g = d->g;
    IR_ASSERT(d->op_sop && d->op_sop[g->nop] == d->nsop);   /* pass_split's index */
    c->cons0 = ir_xcalloc((size_t)g->nt + 2, sizeof(int));
    int n = 0;
    for (int op = 0; op < g->nop; op++)
        for (int k = 0; k < g->op[op].nin; k++) {
            int dup = 0;   /* an op reading t twice is listed once */
            for (int j = 0; j < k; j++) dup |= g->op[op].in[j] == g->op[op].in[k];
            if (!dup) c->cons0[g->op[op].in[k] + 1]++, n++;
        }
    for (int t = 0; t < g->nt; t++) c->cons0[t + 1] += c->cons0[t];
    c->cons = ir_xmalloc(sizeof(int) * ((size_t)n + 1));
    int *fill = ir_xcalloc((size_t)g->nt + 1, sizeof(int));
    for (int op = 0; op < g->nop; op++)
        for (int k = 0; k < g->op[op].nin; k++) {
            int dup = 0, t = g->op[op].in[k];
            for (int j = 0; j < k; j++) dup |= g->op[op].in[j] == t;
            if (!dup) c->cons[c->cons0[t] + fill[t]++] = op;
        }
    free(fill);
}

void pass_comm(ir_dist *d)
{
    const ir_graph *g = d->g;
    cctx c;
    memset(&c, 0, sizeof c);
    c.d = d;
    c.sent = ir_xcalloc((size_t)d->ndev + 1, sizeof *c.sent);
    c.dstamp = ir_xcalloc((size_t)d->ndev + 1, sizeof(int));
    c.shead = ir_xmalloc(sizeof(int) * ((size_t)d->ndev + 1));
    c.nhead = ir_xmalloc(sizeof(int) * ((size_t)d->ndev + 1));
    c.mstamp = ir_xcalloc((size_t)d->ndev + 1, sizeof(int));
    c.gstamp = ir_xcalloc((size_t)d->ndev + 1, sizeof(int));
    c.gsent = ir_xcalloc((size_t)d->ndev + 1, sizeof(int));
    index_graph(&c);
    for (int t = 0; t < g->nt; t++) {
        c.t = t;
        c.nd = g->t[t].ndim;
        c.src.n = c.need.n = 0;
        sources(&c, t, &c.src);
        if (g->t[t].kind == IR_T_PARAM || g->t[t].kind == IR_T_OPTSTATE) {
            d->store[t] = ir_dist_ints(d, c.src.v, c.src.n);
            d->nstore[t] = c.src.n;
        }
        consumed(&c, t, 0, &c.need);
        /* the loss is reported by every device that holds a part of it */
        if (t == g->train.loss) {
            for (int i = 0; i < c.src.n; i++) lpush(&c.need, full_pt(&c, c.src.v[i], P(&c, c.src.v[i])->dev));
            /* ... and, in a pipeline, by every device (the last stage holds it) */
            for (int dev = 0; dev < d->ndev && d->mesh_pp > 1 && c.src.n; dev++)
                lpush(&c.need, full_pt(&c, c.src.v[0], dev));
        }
        if (g->t[t].kind == IR_T_INPUT) continue;   /* data is loaded where it is needed */
        index_devs(&c);
        pieces_free(&c);
        /* first the needs no larger one on the same device contains, then
           those (sliced from it, rule_slice) */
        char *inner = ir_xcalloc((size_t)c.need.n + 1, 1);
        for (int i = 0; i < c.need.n; i++) {
            const ir_ptensor *a = P(&c, c.need.v[i]);
            for (int j = needs_on(&c, a->dev); j >= 0 && !inner[i] && a->vn == 1; j = c.nnext[j]) {
                const ir_ptensor *b = P(&c, c.need.v[j]);
                inner[i] = b->vn == 1 && c.need.v[j] != c.need.v[i] && ir_box_contains(&b->box, &a->box, c.nd);
            }
        }
        for (int x = 0; x < 2 * c.need.n; x++) {
            int i = x % c.need.n;
            if (inner[i] != (x >= c.need.n)) continue;
            int nd = c.need.v[i];
            if (have(&c, nd)) continue;
            int ok = P(&c, nd)->vn > 1 ? rule_partial(&c, nd)
                                       : rule_slice(&c, nd) || rule_allreduce(&c, nd) || rule_reducescatter(&c, nd) ||
                                             rule_allreduce_slice(&c, nd) ||
                                             rule_allgather(&c, nd) || rule_alltoall(&c, nd) ||
                                             rule_broadcast(&c, nd) || rule_stage_sum(&c, nd) ||
                                             rule_stage_gather(&c, nd) || rule_stage_alltoall(&c, nd) ||
                                             rule_fallback(&c, nd);
            if (!ok) {
                ir_buf b = {0};
                ir_pt_print(d, nd, &b);
                ir_die(__FILE__, __LINE__, "no communication rule produces %s from the pieces of %s", b.s,
                       g->t[t].name);
            }
        }
        free(inner);
    }
    free(c.src.v);
    free(c.src.on);
    free(c.need.v);
    free(c.need.on);
    free(c.cons0);
    free(c.cons);
    free(c.dstamp);
    free(c.shead);
    free(c.nhead);
    free(c.snext);
    free(c.nnext);
    pieces_free(&c);
    scratch_free(&c);
    free(c.pc);
    free(c.made);
    free(c.sent);
}
