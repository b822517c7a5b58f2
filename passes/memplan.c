/* memplan.c -- a static arena plan for one rank.
 *
 * Every pTensor the rank touches gets a buffer at a fixed byte offset of the
 * rank's one arena, so the step loop never allocates.  Buffers that live
 * across steps (params, optimizer state, accumulated gradients, the loss,
 * anything read after the micro-batch loop) are laid out first, one after
 * another, the gradient buckets' (bucket.c) first, each bucket's buffers in
 * its order so that one collective covers them.  Buffers used only inside
 * one micro-batch share the rest of the arena: each lives from its first
 * to its last use in the rank's schedule, and buffers are placed largest
 * first at the lowest offset that does not overlap a placed buffer whose
 * lifetime intersects (first fit).  An
 * all-reduce works in place -- its result shares the buffer of its input --
 * when nothing on the rank reads the input after the all-reduce.  When
 * something does (a vocabulary-parallel embedding's partial sum read by a
 * layernorm, which needs the sum, and by a residual add that stays partial),
 * the result gets a buffer of its own and lower.c copies before reducing:
 * the later reader must see the value from before the collective.
 * Tensors with a batch dim hold one micro-batch.
 *
 * Cost: a rank walks only its own schedule items and pTensors (the indexes
 * pass_schedule builds), first fit asks a segment tree over lifetimes
 * instead of every placed buffer, and pass_memcheck's replay keeps the last
 * writer of every byte in a segment tree: O(n log n) in the rank's share.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

#define ALIGN 64

typedef struct buf {
    int pt;           /* pTensor */
    int64_t bytes;    /* size, aligned */
    int first, last;  /* lifetime in the rank's schedule positions */
} buf;

static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

static int cmp_buf(const void *a, const void *b)
{
    const buf *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->pt - y->pt;
}

/* Record a use of local buffer i at schedule position pos. */
static void use(int *first, int *last, int i, int pos)
{
    if (first[i] < 0 || pos < first[i]) first[i] = pos;
    if (pos > last[i]) last[i] = pos;
}

/* Pipeline: buffer i is used by a task of class cls (-1: outside the
 * tasks); multi[i] once two classes use it (the stash). */
static void task_use(int *tcls, char *multi, int i, int cls)
{
    if (cls < 0) return;
    if (tcls[i] < 0) tcls[i] = cls;
    else if (tcls[i] != cls) multi[i] = 1;
}

/* The rank's share of the DistGraph: its items and pTensors (ir_dist's
 * per-rank indexes); per-buffer arrays are indexed by the pTensor's local
 * index (pt_local), so a rank costs its own items and pTensors only. */
typedef struct mrank {
    const int *item, *member;  /* its schedule items and its member index in each comm */
    int nitem;                 /* how many items */
    const int *pt;             /* its pTensors, ascending */
    int npt;                   /* how many pTensors */
} mrank;

/* The share of rank in d. */
static mrank rank_share(const ir_dist *d, int rank)
{
    IR_ASSERT(d->rank_item0 && rank >= 0 && rank < d->ndev);   /* pass_schedule's index */
    mrank r;
    r.item = d->rank_item + d->rank_item0[rank];
    r.member = d->rank_member + d->rank_item0[rank];
    r.nitem = d->rank_item0[rank + 1] - d->rank_item0[rank];
    r.pt = d->rank_pt + d->rank_pt0[rank];
    r.npt = d->rank_pt0[rank + 1] - d->rank_pt0[rank];
    return r;
}

/* ---- first fit over lifetimes
 *
 * Buffer i goes to the lowest offset >= top where its bytes meet no placed
 * buffer whose lifetime meets its own.  Scanning every placed buffer for
 * every new one is quadratic in the buffers of a rank (layers), so placed
 * buffers live in a segment tree over schedule positions: a buffer is
 * stored at the O(log n) nodes that tile its lifetime (own), and every node
 * keeps the union of the byte ranges stored in its subtree (sub).  The
 * buffers whose lifetimes meet [a, b] are those stored at nodes that meet
 * it: the unions sub of the nodes inside [a, b] and own of the nodes that
 * straddle it, O(log n) sets of merged byte ranges.  Bumping the offset
 * past whatever range it hits in any set until none is hit gives the
 * lowest fitting offset, the same answer as bumping past single buffers. */

/* Disjoint byte ranges [lo, hi), ascending; ranges that meet are merged. */
typedef struct mset {
    int64_t *lo, *hi;  /* the ranges */
    int n, cap;        /* how many, allocated */
} mset;

/* The first range of s that ends after y (s->n: none). */
static int mset_after(const mset *s, int64_t y)
{
    int a = 0, b = s->n;
    while (a < b) {
        int mid = (a + b) / 2;
        if (s->hi[mid] <= y) a = mid + 1;
        else b = mid;
    }
    return a;
}

/* Add [lo, hi) to s, merging the ranges it meets or touches. */
static void mset_add(mset *s, int64_t lo, int64_t hi)
{
    int a = mset_after(s, lo - 1), b = a;   /* ranges a .. b-1 meet or touch [lo, hi) */
    while (b < s->n && s->lo[b] <= hi) b++;
    if (a < b) {
        if (s->lo[a] < lo) lo = s->lo[a];
        if (s->hi[b - 1] > hi) hi = s->hi[b - 1];
    }
    int n = s->n - (b - a) + 1;
    if (n > s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4;
        if (s->cap < n) s->cap = n;
        s->lo = ir_xrealloc(s->lo, sizeof(int64_t) * (size_t)s->cap);
        s->hi = ir_xrealloc(s->hi, sizeof(int64_t) * (size_t)s->cap);
    }
    /* ranges b .. n-1 move to a + 1 */
    memmove(s->lo + a + 1, s->lo + b, sizeof(int64_t) * (size_t)(s->n - b));
    memmove(s->hi + a + 1, s->hi + b, sizeof(int64_t) * (size_t)(s->n - b));
    s->lo[a] = lo;
    s->hi[a] = hi;
    s->n = n;
}

/* The placed buffers: a segment tree over schedule positions 0 .. size-1. */
typedef struct ffit {
    int size;          /* leaves, a power of two */
    mset *own, *sub;   /* per node (1-based heap order): stored here, stored in the subtree */
    const mset **q;    /* the sets of one query */
    int nq, qcap;      /* how many, allocated */
} ffit;

/* An empty tree over schedule positions 0 .. npos - 1. */
static void ffit_init(ffit *f, int npos)
{
    memset(f, 0, sizeof *f);
    f->size = 1;
    while (f->size < npos) f->size *= 2;
    f->own = ir_xcalloc(2 * (size_t)f->size, sizeof(mset));
    f->sub = ir_xcalloc(2 * (size_t)f->size, sizeof(mset));
}

/* Free the tree and every set in it. */
static void ffit_free(ffit *f)
{
    for (int v = 0; v < 2 * f->size; v++) {
        free(f->own[v].lo), free(f->own[v].hi);
        free(f->sub[v].lo), free(f->sub[v].hi);
    }
    free(f->own);
    free(f->sub);
    free(f->q);
}

/* Store bytes [lo, hi) for positions [a, b] below node v (spanning [vl, vr)). */
static void ffit_insert(ffit *f, int v, int vl, int vr, int a, int b, int64_t lo, int64_t hi)
{
    if (b < vl || vr <= a) return;
    mset_add(&f->sub[v], lo, hi);
    if (a <= vl && vr - 1 <= b) {
        mset_add(&f->own[v], lo, hi);
        return;
    }
    int mid = (vl + vr) / 2;
    ffit_insert(f, 2 * v, vl, mid, a, b, lo, hi);
    ffit_insert(f, 2 * v + 1, mid, vr, a, b, lo, hi);
}

/* Collect the sets holding every buffer whose lifetime meets [a, b]. */
static void ffit_query(ffit *f, int v, int vl, int vr, int a, int b)
{
    if (b < vl || vr <= a) return;
    int inside = a <= vl && vr - 1 <= b;
    const mset *s = inside ? &f->sub[v] : &f->own[v];
    if (s->n) {
        if (f->nq == f->qcap) {
            f->qcap = f->qcap ? 2 * f->qcap : 64;
            f->q = ir_xrealloc(f->q, sizeof *f->q * (size_t)f->qcap);
        }
        f->q[f->nq++] = s;
    }
    if (inside || f->sub[v].n == 0) return;   /* inside: sub has it all; else nothing stored below */
    int mid = (vl + vr) / 2;
    ffit_query(f, 2 * v, vl, mid, a, b);
    ffit_query(f, 2 * v + 1, mid, vr, a, b);
}

/* The lowest offset >= top where `bytes` (> 0) fit during positions [a, b]. */
static int64_t ffit_lowest(ffit *f, int a, int b, int64_t top, int64_t bytes)
{
    f->nq = 0;
    ffit_query(f, 1, 0, f->size, a, b);
    int64_t at = top;
    for (int moved = 1; moved;) {
        moved = 0;
        for (int k = 0; k < f->nq; k++) {
            const mset *s = f->q[k];
            int j = mset_after(s, at);
            if (j < s->n && s->lo[j] < at + bytes) at = s->hi[j], moved = 1;
        }
    }
    return at;
}

void pass_memplan(const ir_dist *d, int rank, pass_mem *m)
{
    const ir_graph *g = d->g;
    const mrank R = rank_share(d, rank);
    const int *loc = d->pt_local;
    memset(m, 0, sizeof *m);
    m->rank = rank;
    /* every array is per pTensor of the rank (pt_local): nothing here grows
       with the other ranks' pTensors */
    size_t nl = (size_t)R.npt + 1;
    m->off = ir_xmalloc(sizeof(int64_t) * nl);
    memset(m->off, 0xff, sizeof(int64_t) * nl);   /* -1: no buffer */
    m->bytes = ir_xcalloc(nl, sizeof(int64_t));
    int *first = ir_xmalloc(sizeof(int) * nl), *last = ir_xmalloc(sizeof(int) * nl);
    int *alias = ir_xmalloc(sizeof(int) * nl);  /* local index of the buffer it shares, or -1 */
    int *apos = ir_xmalloc(sizeof(int) * nl);   /* in-place candidate: where it reduces */
    char *pers = ir_xcalloc(nl, 1);
    char *xfer = ir_xcalloc(nl, 1);   /* pipeline: touched by a transfer between stages */
    int *tcls = ir_xmalloc(sizeof(int) * nl);   /* pipeline: the task class using it (-1: none yet) */
    char *multi = ir_xcalloc(nl, 1);  /* pipeline: used by tasks of more than one class */
    const int sd = d->ndev / d->mesh_pp;
    for (int i = 0; i < R.npt; i++) first[i] = -1, last[i] = -1, alias[i] = -1, apos[i] = -1, tcls[i] = -1;
    /* uses along the global schedule, this rank's items only; lifetimes are
       in the rank's own item positions q (the same order as seq's) */
    for (int q = 0; q < R.nitem; q++) {
        int n = R.item[q];
        const ir_item *it = &d->seq[n];
        int post = it->sec != IR_SEC_MB;
        int tk = d->pipe && !post ? pass_pipe_class(d, n, rank / sd) : -1;
        if (it->comm) {
            const ir_comm *c = &d->comm[it->id];
            int k = R.member[q];
            int in = d->ints[c->in + k], out = d->ints[c->out + k];
            int li = in >= 0 ? loc[in] : -1, lo = out >= 0 ? loc[out] : -1;
            if (d->pipe && !post) {
                const int *gm = d->ints + d->grp[c->group].devs;
                int cross = gm[0] / sd != gm[c->n - 1] / sd;   /* members ascend */
                if (cross && li >= 0) xfer[li] = 1;
                if (cross && lo >= 0) xfer[lo] = 1;
            }
            if (in >= 0) use(first, last, li, q), task_use(tcls, multi, li, tk);
            if (out >= 0) use(first, last, lo, q), task_use(tcls, multi, lo, tk);
            if (c->kind == IR_COMM_ALLREDUCE) alias[lo] = li, apos[lo] = q;
            if (post && in >= 0) pers[li] = 1;
            if (post && out >= 0) pers[lo] = 1;
            int64_t sb = pass_comm_scratch(d, it->id, rank, it->sec), ni, no, ao, tot;
            if (sb > m->scratch_bytes) m->scratch_bytes = sb;
            if (pass_comm_cvt(d, it->id, k, it->sec, &ni, &no, &ao, &tot) && tot > m->cvt_bytes)
                m->cvt_bytes = tot;   /* its bf16 buffers in f32, around a collective on the f32 wire */
        } else {
            const ir_subop *s = &d->sop[it->id];
            const ir_op *o = &g->op[s->op];
            if (d->t16) {   /* its bf16 operands' f32 scratch */
                int cpt[2 * IR_MAXIO], cout[2 * IR_MAXIO];
                int64_t cat[2 * IR_MAXIO], cn[2 * IR_MAXIO], tot;
                pass_cvt_layout(d, s, cpt, cat, cn, cout, &tot);
                if (tot > m->cvt_bytes) m->cvt_bytes = tot;
            }
            for (int k = 0; k < o->nin; k++) {
                use(first, last, loc[s->in[k]], q);
                task_use(tcls, multi, loc[s->in[k]], tk);
                if (post) pers[loc[s->in[k]]] = 1;
            }
            for (int k = 0; k < o->nout; k++) {
                use(first, last, loc[s->out[k]], q);
                task_use(tcls, multi, loc[s->out[k]], tk);
                if (post) pers[loc[s->out[k]]] = 1;
            }
        }
    }
    for (int i = 0; i < R.npt; i++) {
        const ir_ptensor *p = &d->pt[R.pt[i]];
        const ir_tensor *t = &g->t[p->tensor];
        if (first[i] < 0) continue;
        /* a param's or optimizer state's stored pieces live across steps; a copy a
           comm makes for use within a micro-batch (ZeRO 3's gathered params) does not */
        if (((t->kind == IR_T_PARAM || t->kind == IR_T_OPTSTATE) && d->pt_store[R.pt[i]] >= 0) ||
            pass_pt_accum(d, R.pt[i]))
            pers[i] = 1;
        IR_ASSERT(t->batch_dim < 0 || !pers[i]);
        m->bytes[i] = pass_pt_store_bytes(d, R.pt[i]);
    }
    /* in place only when the all-reduce is the input's last use on this
       rank: a reader of the input after it must see the unreduced value */
    for (int i = 0; i < R.npt; i++)
        if (alias[i] >= 0 && last[alias[i]] > apos[i]) alias[i] = -1;
    /* an alias chain ends in its buffer's owner; the owner lives as long as the chain */
    for (int i = 0; i < R.npt; i++) {
        if (alias[i] < 0 || first[i] < 0) continue;
        int r = alias[i];
        while (alias[r] >= 0) r = alias[r];
        use(first, last, r, first[i]);
        use(first, last, r, last[i]);
        pers[r] |= pers[i];
        xfer[r] |= xfer[i];
        multi[r] |= multi[i];
        task_use(tcls, multi, r, tcls[i]);
    }
    int64_t top = 0;
    /* the all-reduces' gradient buckets first (bucket.c): each bucket's
       buffers one after another in its order, so that one collective covers
       them (the reduce-scatters' and all-gathers' pack into the scratch) */
    for (int q = 0; q < R.nitem; q++) {
        const ir_item *it = &d->seq[R.item[q]];
        if (!it->comm || d->comm[it->id].bucket < 0 || d->comm[it->id].kind != IR_COMM_ALLREDUCE) continue;
        int lo = loc[d->ints[d->comm[it->id].out + R.member[q]]], r = alias[lo];
        IR_ASSERT(r >= 0 && alias[r] < 0 && pers[r] && m->off[r] < 0);   /* in place, in its own buffer */
        m->off[r] = top;
        top += align_up(m->bytes[r]);
    }
    for (int i = 0; i < R.npt; i++)
        if (first[i] >= 0 && alias[i] < 0 && pers[i] && m->off[i] < 0) {
            m->off[i] = top;
            top += align_up(m->bytes[i]);
        }
    /* the gradient norm's float pair: on a rank with updates, and on every
       rank of a world > 1, as the norm's all-reduce spans the world (a
       pipeline stage without params takes part with zeros) */
    m->gnorm = d->ndev > 1 ? 0 : -1;
    for (int i = d->rank_sop0[rank]; i < d->rank_sop0[rank + 1]; i++)
        if (g->op[d->sop[d->rank_sop[i]].op].phase == IR_PH_OPT) m->gnorm = 0;
    if (m->gnorm == 0) {
        m->gnorm = top;
        top += ALIGN;
    }
    if (m->scratch_bytes) {
        m->scratch = top;
        top += align_up(m->scratch_bytes);
    }
    if (m->cvt_bytes) {
        m->cvt = top;
        top += align_up(m->cvt_bytes);
    }
    m->persistent = top;
    /* pipeline: the stash -- what a micro-batch keeps from one of its tasks
       for a later one (forward for backward, B for W), and the buffers of
       transfers between stages (which the schedule moves within their task)
       -- one copy per slot, each buffer at the same place in every copy
       (pipeline.c); buffers of one task share the rest by lifetime, as
       tasks never interleave */
    char *stashed = ir_xcalloc(nl, 1);
    if (d->pipe) {
        m->nslot = d->pipe->nslot[rank / sd];
        m->stash = top;
        for (int i = 0; i < R.npt; i++)
            if (first[i] >= 0 && alias[i] < 0 && !pers[i] && (xfer[i] || multi[i])) {
                stashed[i] = 1;
                m->off[i] = top;
                top += align_up(m->bytes[i]);
            }
        m->stash_bytes = top - m->stash;
        top = m->stash + m->stash_bytes * m->nslot;
    }
    /* transient buffers: first fit by size */
    buf *bs = ir_xmalloc(sizeof(buf) * nl);
    int nb = 0;
    for (int i = 0; i < R.npt; i++)
        if (first[i] >= 0 && alias[i] < 0 && !pers[i] && !stashed[i])
            bs[nb++] = (buf){i, align_up(m->bytes[i]), first[i], last[i]};
    qsort(bs, (size_t)nb, sizeof *bs, cmp_buf);
    int64_t end = top;
    ffit f;
    ffit_init(&f, R.nitem);
    for (int i = 0; i < nb; i++) {
        IR_ASSERT(bs[i].bytes > 0);
        int64_t at = ffit_lowest(&f, bs[i].first, bs[i].last, top, bs[i].bytes);
        m->off[bs[i].pt] = at;
        ffit_insert(&f, 1, 0, f.size, bs[i].first, bs[i].last, at, at + bs[i].bytes);
        if (at + bs[i].bytes > end) end = at + bs[i].bytes;
    }
    ffit_free(&f);
    for (int i = 0; i < R.npt; i++)
        if (alias[i] >= 0 && first[i] >= 0) {
            int r = alias[i];
            while (alias[r] >= 0) r = alias[r];
            m->off[i] = m->off[r];
        }
    m->arena = end > 0 ? end : ALIGN;
    free(bs);
    free(first);
    free(last);
    free(alias);
    free(apos);
    free(pers);
    free(xfer);
    free(tcls);
    free(multi);
    free(stashed);
}

void pass_mem_free(pass_mem *m)
{
    free(m->off);
    free(m->bytes);
    memset(m, 0, sizeof *m);
}

/* ---- checking a plan against the schedule */

typedef struct mck {
    const ir_dist *d;
    const pass_mem *m;
    mrank R;           /* the rank's items and pTensors */
    int *byoff;        /* the rank's pTensors with a buffer, by offset */
    int n;             /* how many */
    int64_t *mx;       /* segment tree (1-based, size leaves) of the largest buffer end below each node */
    int size;          /* its leaves, a power of two >= n */
    char *valid;       /* per local pTensor (pt_local): its buffer holds its value */
    int *clobber;      /* per local pTensor: the pTensor whose write overwrote it, or -1 */
    int *clob_item;    /* ... and the schedule item that wrote it */
    char *loaded;      /* per local pTensor: input loaded in this micro-batch body */
    /* the quick replay (mck_paint): who wrote each byte last */
    int painting;      /* 1: replay with the paint below, not valid / clobber */
    int unsure;        /* the paint cannot tell (a buffer without bytes, params sharing bytes) */
    int64_t *cut;      /* the buffers' starts and ends, ascending, distinct: cell c is [cut[c], cut[c + 1]) */
    int ncut;          /* how many */
    int psize;         /* leaves of own, a power of two >= ncut - 1 */
    int *own;          /* segment tree (1-based): the pTensor that wrote every cell below, -1: none, -2: mixed */
} mck;

/* ---- the quick replay
 *
 * Marking every buffer a write overlaps costs as many as share its bytes
 * over the whole schedule (the same low offsets serve a temporary of every
 * layer).  The replay only needs to know, at each read, whether the
 * buffer's bytes still hold what it wrote: that is, whether the last
 * writer of every one of its bytes is the buffer itself.  A segment tree
 * over the cells between buffer boundaries keeps the last writer per cell
 * (a write assigns a range, a read asks whether a range is all one
 * writer): O(log n) per access.  When a read fails, or the paint cannot
 * tell, pass_memcheck replays again the exact way, which names the
 * pTensor that overwrote the value. */


/* The cell starting at byte x, or -1 when no buffer boundary is there. */
static int mck_cell(const mck *k, int64_t x)
{
    int a = 0, b = k->ncut;
    while (a < b) {
        int mid = (a + b) / 2;
        if (k->cut[mid] < x) a = mid + 1;
        else b = mid;
    }
    return a < k->ncut && k->cut[a] == x ? a : -1;
}

/* Cells [a, b) below node v (spanning [vl, vr)) were written by pt. */
static void mck_assign(mck *k, int v, int vl, int vr, int a, int b, int pt)
{
    if (b <= vl || vr <= a) return;
    if (a <= vl && vr <= b) {
        k->own[v] = pt;
        return;
    }
    if (k->own[v] != -2) k->own[2 * v] = k->own[2 * v + 1] = k->own[v];   /* push the uniform writer down */
    int mid = (vl + vr) / 2;
    mck_assign(k, 2 * v, vl, mid, a, b, pt);
    mck_assign(k, 2 * v + 1, mid, vr, a, b, pt);
    k->own[v] = k->own[2 * v] == k->own[2 * v + 1] ? k->own[2 * v] : -2;
}

/* Did pt write every one of cells [a, b) below node v last? */
static int mck_owns(const mck *k, int v, int vl, int vr, int a, int b, int pt)
{
    if (b <= vl || vr <= a) return 1;
    if (k->own[v] != -2) return k->own[v] == pt;
    int mid = (vl + vr) / 2;
    return mck_owns(k, 2 * v, vl, mid, a, b, pt) && mck_owns(k, 2 * v + 1, mid, vr, a, b, pt);
}

/* The cells of pt's buffer, [*a, *b); 0 when it has none (unsure). */
static int mck_cells(mck *k, int pt, int *a, int *b)
{
    const pass_mem *m = k->m;
    int lp = k->d->pt_local[pt];
    if (m->off[lp] < 0 || m->bytes[lp] <= 0) return 0;
    *a = mck_cell(k, m->off[lp]);
    *b = mck_cell(k, m->off[lp] + m->bytes[lp]);
    return *a >= 0 && *b > *a;
}

/* pt wrote its buffer. */
static void mck_paint(mck *k, int pt)
{
    int a, b;
    if (!mck_cells(k, pt, &a, &b)) k->unsure = 1;
    else mck_assign(k, 1, 0, k->psize, a, b, pt);
}

/* Set up the paint over the rank's buffers (byoff, sorted): boundaries,
 * and params and optimizer state written by the prologue; unsure when two
 * of those share bytes (both hold their values at the start, which one
 * last writer per byte cannot say). */
static void mck_paint_init(mck *k)
{
    const ir_dist *d = k->d;
    const pass_mem *m = k->m;
    k->painting = 1;
    k->cut = ir_xmalloc(sizeof(int64_t) * (2 * (size_t)k->n + 1));
    for (int j = 0; j < k->n; j++) {
        int64_t lo = m->off[k->d->pt_local[k->byoff[j]]], hi = lo + m->bytes[k->d->pt_local[k->byoff[j]]];
        k->cut[2 * j] = lo, k->cut[2 * j + 1] = hi;
    }
    int n = 2 * k->n;
    qsort(k->cut, (size_t)n, sizeof *k->cut, ir_cmp_i64);
    for (int i = 0; i < n; i++)
        if (!k->ncut || k->cut[k->ncut - 1] != k->cut[i]) k->cut[k->ncut++] = k->cut[i];
    k->psize = 1;
    while (k->psize < k->ncut) k->psize *= 2;
    k->own = ir_xmalloc(sizeof(int) * 2 * (size_t)k->psize);
    for (int v = 0; v < 2 * k->psize; v++) k->own[v] = -1;
    int64_t end = INT64_MIN;
    for (int j = 0; j < k->n; j++) {
        int pt = k->byoff[j], kind = d->g->t[d->pt[pt].tensor].kind;
        int lp = d->pt_local[pt];
        if ((kind != IR_T_PARAM && kind != IR_T_OPTSTATE) || !m->bytes[lp]) continue;
        if (m->off[lp] < end) k->unsure = 1;
        if (m->off[lp] + m->bytes[lp] > end) end = m->off[lp] + m->bytes[lp];
        mck_paint(k, pt);
    }
}

/* A buffer by its offset, for sorting (no shared state: ranks are planned
 * on several threads). */
typedef struct offpt {
    int64_t off;
    int pt;
} offpt;

static int cmp_off(const void *a, const void *b)
{
    const offpt *x = a, *y = b;
    return x->off != y->off ? (x->off < y->off ? -1 : 1) : (x->pt > y->pt) - (x->pt < y->pt);
}

/* Mark every buffer among byoff[vl .. vr) below node v that ends after lo
 * as overwritten by pt (byoff[.. vr) all start before pt's end). */
static void mck_clobber(mck *k, int v, int vl, int vr, int to, int pt, int64_t lo, int item)
{
    const pass_mem *m = k->m;
    if (vl >= to || k->mx[v] <= lo) return;
    if (vr - vl == 1) {
        int q = k->byoff[vl], lq = k->d->pt_local[q];
        if (q == pt || !m->bytes[lq]) return;
        if (k->valid[lq]) k->clobber[lq] = pt, k->clob_item[lq] = item;
        k->valid[lq] = 0;
        return;
    }
    int mid = (vl + vr) / 2;
    mck_clobber(k, 2 * v, vl, mid, to, pt, lo, item);
    mck_clobber(k, 2 * v + 1, mid, vr, to, pt, lo, item);
}

/* pt's buffer now holds pt's value: every other buffer overlapping it lost
 * its own (item: the schedule position, for the message). */
static void mck_write(mck *k, int pt, int item)
{
    const pass_mem *m = k->m;
    int lp = k->d->pt_local[pt];
    int64_t lo = m->off[lp], hi = lo + m->bytes[lp];
    if (k->painting) {
        mck_paint(k, pt);
        return;
    }
    k->valid[lp] = 1;
    k->clobber[lp] = -1;
    /* the buffers that start before hi and end after lo */
    int a = 0, b = k->n;
    while (a < b) {
        int mid = (a + b) / 2;
        if (m->off[k->d->pt_local[k->byoff[mid]]] < hi) a = mid + 1;
        else b = mid;
    }
    mck_clobber(k, 1, 0, k->size, a, pt, lo, item);
}

/* A read of pt at schedule item `item`: 0, or 1 with a message. */
static int mck_read(mck *k, int pt, int item, char *msg, size_t cap)
{
    const ir_dist *d = k->d;
    const ir_graph *g = d->g;
    int lp = d->pt_local[pt];
    if (g->t[d->pt[pt].tensor].kind == IR_T_INPUT && !k->loaded[lp]) {
        k->loaded[lp] = 1;   /* lower.c loads an input just before its first reader */
        mck_write(k, pt, item);
    }
    if (!k->m->bytes[lp]) return 0;
    if (k->painting) {   /* 1: replay the exact way, for the verdict and the message */
        int a, b;
        return k->unsure || !mck_cells(k, pt, &a, &b) || !mck_owns(k, 1, 0, k->psize, a, b, pt);
    }
    if (k->valid[lp]) return 0;
    const ir_item *it = &d->seq[item];
    const char *who = it->comm ? ir_comm_name(d->comm[it->id].kind) : g->op[d->sop[it->id].op].name;
    if (k->clobber[lp] >= 0) {
        const ir_item *w = &d->seq[k->clob_item[lp]];
        snprintf(msg, cap, "rank %d: %s reads p%d (%s) at @%lld, but %s wrote p%d (%s) over it before",
                 k->m->rank, who, pt, g->t[d->pt[pt].tensor].name, (long long)k->m->off[lp],
                 w->comm ? ir_comm_name(d->comm[w->id].kind) : g->op[d->sop[w->id].op].name, k->clobber[lp],
                 g->t[d->pt[k->clobber[lp]].tensor].name);
    } else {
        snprintf(msg, cap, "rank %d: %s reads p%d (%s), which nothing wrote before", k->m->rank, who, pt,
                 g->t[d->pt[pt].tensor].name);
    }
    return 1;
}

/* Replay the rank's items of section sec; 0, or 1 with a message. */
static int mck_section(mck *k, int sec, char *msg, size_t cap)
{
    const ir_dist *d = k->d;
    memset(k->loaded, 0, (size_t)k->R.npt + 1);
    for (int q = 0; q < k->R.nitem; q++) {
        int n = k->R.item[q];
        const ir_item *it = &d->seq[n];
        if (it->sec != sec) continue;
        if (it->comm) {
            const ir_comm *c = &d->comm[it->id];
            int j = k->R.member[q];
            int in = d->ints[c->in + j], out = d->ints[c->out + j];
            if (in >= 0 && mck_read(k, in, n, msg, cap)) return 1;
            if (out >= 0) mck_write(k, out, n);
        } else {
            const ir_subop *s = &d->sop[it->id];
            const ir_op *o = &d->g->op[s->op];
            for (int j = 0; j < o->nin; j++)
                if (mck_read(k, s->in[j], n, msg, cap)) return 1;
            for (int j = 0; j < o->nout; j++) mck_write(k, s->out[j], n);
        }
    }
    return 0;
}

/* What pass_memcheck's verdict depends on, hashed twice (128 bits): the
 * rank's items (sub-ops by op and section, comms by kind, member and
 * section) with their operands as the rank's own pTensor indices, and
 * every local pTensor's tensor, buffer offset and bytes. */
void pass_memcheck_key(const ir_dist *d, const pass_mem *m, uint64_t key[2])
{
    const mrank R = rank_share(d, m->rank);
    uint64_t h[2] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull};
#define MK_MIX(x)                                                               \
    do {                                                                        \
        uint64_t x_ = (uint64_t)(x);                                            \
        h[0] = (h[0] ^ x_) * 0x9e3779b97f4a7c15ull, h[0] ^= h[0] >> 29;         \
        h[1] = (h[1] + x_) * 0xff51afd7ed558ccdull, h[1] ^= h[1] >> 33;         \
    } while (0)
    MK_MIX(R.nitem);
    MK_MIX(R.npt);
    for (int q = 0; q < R.nitem; q++) {
        const ir_item *it = &d->seq[R.item[q]];
        MK_MIX(it->comm << 8 | it->sec);
        if (it->comm) {
            const ir_comm *c = &d->comm[it->id];
            int k = R.member[q], in = d->ints[c->in + k], out = d->ints[c->out + k];
            MK_MIX(c->kind);   /* the member index differs from rank to rank; its operands tell */
            MK_MIX(in >= 0 ? d->pt_local[in] : -1);
            MK_MIX(out >= 0 ? d->pt_local[out] : -1);
        } else {
            const ir_subop *s = &d->sop[it->id];
            const ir_op *o = &d->g->op[s->op];
            MK_MIX(s->op);
            for (int j = 0; j < o->nin; j++) MK_MIX(d->pt_local[s->in[j]]);
            for (int j = 0; j < o->nout; j++) MK_MIX(d->pt_local[s->out[j]]);
        }
    }
    for (int i = 0; i < R.npt; i++) {
        MK_MIX(d->pt[R.pt[i]].tensor);
        MK_MIX(m->off[i]);
        MK_MIX(m->bytes[i]);
    }
#undef MK_MIX
    key[0] = h[0], key[1] = h[1];
}

int pass_memcheck(const ir_dist *d, const pass_mem *m, char *msg, size_t cap)
{
    const ir_graph *g = d->g;
    mck k;
    memset(&k, 0, sizeof k);
    k.d = d;
    k.m = m;
    k.R = rank_share(d, m->rank);
    size_t nl = (size_t)k.R.npt + 1;
    k.byoff = ir_xmalloc(sizeof(int) * nl);
    k.valid = ir_xcalloc(nl, 1);
    k.clobber = ir_xmalloc(sizeof(int) * nl);
    k.clob_item = ir_xmalloc(sizeof(int) * nl);
    k.loaded = ir_xcalloc(nl, 1);
    for (int i = 0; i < k.R.npt; i++) {
        int pt = k.R.pt[i];
        k.clobber[i] = -1;
        if (m->off[i] >= 0) k.byoff[k.n++] = pt;
    }
    offpt *ob = ir_xmalloc(sizeof *ob * ((size_t)k.n + 1));
    for (int j = 0; j < k.n; j++) ob[j] = (offpt){m->off[d->pt_local[k.byoff[j]]], k.byoff[j]};
    qsort(ob, (size_t)k.n, sizeof *ob, cmp_off);
    for (int j = 0; j < k.n; j++) k.byoff[j] = ob[j].pt;
    free(ob);
    /* two micro-batches, the step's end, the next step's first micro-batch:
       every way the program goes on from each section */
    static const int order[] = {IR_SEC_MB, IR_SEC_MB, IR_SEC_POST, IR_SEC_MB, IR_SEC_POST};
    const int nsec = (int)(sizeof order / sizeof *order);
    int bad = 0;
    mck_paint_init(&k);
    for (int s = 0; s < nsec && !bad; s++) bad = mck_section(&k, order[s], msg, cap);
    if (bad || k.unsure) {
        /* the exact replay: mark every buffer a write overlaps (a segment tree of
           buffer ends by start finds them) */
        k.painting = 0;
        k.size = 1;
        while (k.size < k.n) k.size *= 2;
        k.mx = ir_xmalloc(sizeof(int64_t) * 2 * (size_t)k.size);
        for (int j = 0; j < k.size; j++)
            k.mx[k.size + j] = j < k.n ? m->off[d->pt_local[k.byoff[j]]] + m->bytes[d->pt_local[k.byoff[j]]] : INT64_MIN;
        for (int v = k.size - 1; v >= 1; v--) k.mx[v] = k.mx[2 * v] > k.mx[2 * v + 1] ? k.mx[2 * v] : k.mx[2 * v + 1];
        /* the prologue: params and optimizer state */
        for (int j = 0; j < k.n; j++) {
            int kind = g->t[d->pt[k.byoff[j]].tensor].kind;
            if (kind == IR_T_PARAM || kind == IR_T_OPTSTATE) k.valid[d->pt_local[k.byoff[j]]] = 1;
        }
        bad = 0;
        for (int s = 0; s < nsec && !bad; s++) bad = mck_section(&k, order[s], msg, cap);
    }
    free(k.byoff);
    free(k.mx);
    free(k.cut);
    free(k.own);
    free(k.valid);
    free(k.clobber);
    free(k.clob_item);
    free(k.loaded);
    return bad;
}

/* The spec line that made tensor t: its own, or for a derived one (a
 * gradient, optimizer state) the line of what it derives from or of the op
 * that produced it; 0 when none is known. */
static int tensor_line(const ir_graph *g, int t)
{
    for (int hops = 0; t >= 0 && hops < 4; hops++) {
        const ir_tensor *x = &g->t[t];
        if (x->line > 0) return x->line;
        if (x->producer >= 0 && g->op[x->producer].line > 0) return g->op[x->producer].line;
        t = x->grad_of >= 0 ? x->grad_of : x->opt_of;
    }
    return 0;
}

int pass_arena_check(const ir_graph *g, const ir_prog *p)
{
    if (p->arena <= IR_MAX_ARENA) return 0;
    ir_buf a = {0}, big = {0};
    ir_bprint_bytes(&a, (double)p->arena);
    if (p->arena_top >= 0) ir_bprint_bytes(&big, (double)p->arena_top_bytes);
    char hint[600];
    snprintf(hint, sizeof hint, "its largest buffer is %s (%s); more devices, more micro_batches, recompute or "
             "smaller dims make the ranks' arenas smaller", p->arena_top >= 0 ? g->t[p->arena_top].name : "?",
             big.s ? big.s : "?");
    int rc = pass_error(g, p->arena_top >= 0 ? tensor_line(g, p->arena_top) : 0, hint,
                        "rank %d needs an arena of %lld bytes (%s): more than 2^46 (%lld), the most a rank may hold",
                        p->rank, (long long)p->arena, a.s, (long long)IR_MAX_ARENA);
    ir_buf_free(&a);
    ir_buf_free(&big);
    return rc;
}
