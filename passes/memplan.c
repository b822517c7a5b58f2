/* memplan.c -- a static arena plan for one rank.
 *
 * Every pTensor the rank touches gets a buffer at a fixed byte offset of the
 * rank's one arena, so the step loop never allocates.  Buffers that live
 * across steps (params, optimizer state, accumulated gradients, the loss,
 * anything read after the micro-batch loop) are laid out first, one after
 * another.  Buffers used only inside one micro-batch share the rest of the
 * arena: each lives from its first to its last use in the rank's schedule,
 * and buffers are placed largest first at the lowest offset that does not
 * overlap a placed buffer whose lifetime intersects (first fit).  An
 * all-reduce works in place -- its result shares the buffer of its input --
 * when nothing on the rank reads the input after the all-reduce.  When
 * something does (a vocabulary-parallel embedding's partial sum read by a
 * layernorm, which needs the sum, and by a residual add that stays partial),
 * the result gets a buffer of its own and lower.c copies before reducing:
 * the later reader must see the value from before the collective.
 * Tensors with a batch dim hold one micro-batch.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

#define ALIGN 64

typedef struct buf {
    int pt;           /* pTensor */
    int64_t bytes;    /* size, aligned */
    int first, last;  /* lifetime in schedule positions */
} buf;

static int64_t align_up(int64_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

static int cmp_buf(const void *a, const void *b)
{
    const buf *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->pt - y->pt;
}

/* Record a use of pt at schedule position pos. */
static void use(int *first, int *last, int pt, int pos)
{
    if (first[pt] < 0 || pos < first[pt]) first[pt] = pos;
    if (pos > last[pt]) last[pt] = pos;
}

void pass_memplan(const ir_dist *d, int rank, pass_mem *m)
{
    const ir_graph *g = d->g;
    memset(m, 0, sizeof *m);
    m->rank = rank;
    m->off = ir_xmalloc(sizeof(int64_t) * ((size_t)d->npt + 1));
    m->bytes = ir_xcalloc((size_t)d->npt + 1, sizeof(int64_t));
    int *first = ir_xmalloc(sizeof(int) * ((size_t)d->npt + 1));
    int *last = ir_xmalloc(sizeof(int) * ((size_t)d->npt + 1));
    int *alias = ir_xmalloc(sizeof(int) * ((size_t)d->npt + 1));
    int *apos = ir_xmalloc(sizeof(int) * ((size_t)d->npt + 1));  /* in-place candidate: where it reduces */
    char *pers = ir_xcalloc((size_t)d->npt + 1, 1);
    for (int i = 0; i < d->npt; i++) m->off[i] = -1, first[i] = -1, last[i] = -1, alias[i] = -1, apos[i] = -1;
    /* uses along the global schedule, this rank's items only */
    for (int n = 0; n < d->nseq; n++) {
        const ir_item *it = &d->seq[n];
        int post = it->sec != IR_SEC_MB;
        if (it->comm) {
            const ir_comm *c = &d->comm[it->id];
            for (int k = 0; k < c->n; k++) {
                int in = d->ints[c->in + k], out = d->ints[c->out + k];
                if (d->ints[d->grp[c->group].devs + k] != rank) continue;
                if (in >= 0) use(first, last, in, n);
                if (out >= 0) use(first, last, out, n);
                if (c->kind == IR_COMM_ALLREDUCE) alias[out] = in, apos[out] = n;
                if (post && in >= 0) pers[in] = 1;
                if (post && out >= 0) pers[out] = 1;
            }
            int64_t sb = pass_comm_scratch(d, it->id, rank);
            if (sb > m->scratch_bytes) m->scratch_bytes = sb;
        } else {
            const ir_subop *s = &d->sop[it->id];
            if (s->dev != rank) continue;
            const ir_op *o = &g->op[s->op];
            for (int k = 0; k < o->nin; k++) {
                use(first, last, s->in[k], n);
                if (post) pers[s->in[k]] = 1;
            }
            for (int k = 0; k < o->nout; k++) {
                use(first, last, s->out[k], n);
                if (post) pers[s->out[k]] = 1;
            }
        }
    }
    for (int i = 0; i < d->npt; i++) {
        const ir_tensor *t = &g->t[d->pt[i].tensor];
        if (first[i] < 0 || d->pt[i].dev != rank) continue;
        if (t->kind == IR_T_PARAM || t->kind == IR_T_OPTSTATE || d->accum[d->pt[i].tensor]) pers[i] = 1;
        int64_t n = ir_box_numel(&d->pt[i].box, t->ndim) * pass_elsize(t);
        if (t->batch_dim >= 0) {
            IR_ASSERT(!pers[i]);
            n /= g->train.micro_batches;
        }
        m->bytes[i] = n;
    }
    /* in place only when the all-reduce is the input's last use on this
       rank: a reader of the input after it must see the unreduced value */
    for (int i = 0; i < d->npt; i++)
        if (alias[i] >= 0 && last[alias[i]] > apos[i]) alias[i] = -1;
    /* an alias chain ends in its buffer's owner; the owner lives as long as the chain */
    for (int i = 0; i < d->npt; i++) {
        if (alias[i] < 0 || first[i] < 0) continue;
        int r = alias[i];
        while (alias[r] >= 0) r = alias[r];
        use(first, last, r, first[i]);
        use(first, last, r, last[i]);
        pers[r] |= pers[i];
    }
    int64_t top = 0;
    for (int i = 0; i < d->npt; i++)
        if (first[i] >= 0 && alias[i] < 0 && pers[i]) {
            m->off[i] = top;
            top += align_up(m->bytes[i]);
        }
    m->gnorm = -1;
    for (int i = 0; i < d->nsop; i++)
        if (d->sop[i].dev == rank && g->op[d->sop[i].op].phase == IR_PH_OPT) m->gnorm = 0;
    if (m->gnorm == 0) {
        m->gnorm = top;
        top += ALIGN;
    }
    if (m->scratch_bytes) {
        m->scratch = top;
        top += align_up(m->scratch_bytes);
    }
    m->persistent = top;
    /* transient buffers: first fit by size */
    buf *bs = ir_xmalloc(sizeof(buf) * ((size_t)d->npt + 1));
    int nb = 0;
    for (int i = 0; i < d->npt; i++)
        if (first[i] >= 0 && alias[i] < 0 && !pers[i])
            bs[nb++] = (buf){i, align_up(m->bytes[i]), first[i], last[i]};
    qsort(bs, (size_t)nb, sizeof *bs, cmp_buf);
    int64_t end = top;
    for (int i = 0; i < nb; i++) {
        int64_t at = top;
        for (int again = 1; again;) {
            again = 0;
            for (int j = 0; j < i; j++) {
                if (bs[j].last < bs[i].first || bs[i].last < bs[j].first) continue;
                int64_t o = m->off[bs[j].pt];
                if (at < o + bs[j].bytes && o < at + bs[i].bytes) {
                    at = o + bs[j].bytes;
                    again = 1;
                }
            }
        }
        m->off[bs[i].pt] = at;
        if (at + bs[i].bytes > end) end = at + bs[i].bytes;
    }
    for (int i = 0; i < d->npt; i++)
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
    int *byoff;        /* the rank's pTensors, by offset */
    int n;             /* how many */
    int64_t maxbytes;  /* the largest buffer */
    char *valid;       /* per pTensor: its buffer holds its value */
    int *clobber;      /* per pTensor: the pTensor whose write overwrote it, or -1 */
    int *clob_item;    /* ... and the schedule item that wrote it */
    char *loaded;      /* per pTensor: input loaded in this micro-batch body */
} mck;

static const pass_mem *mck_sort_mem;
static int cmp_off(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    int64_t ox = mck_sort_mem->off[x], oy = mck_sort_mem->off[y];
    return ox != oy ? (ox < oy ? -1 : 1) : x - y;
}

/* pt's buffer now holds pt's value: every other buffer overlapping it lost
 * its own (item: the schedule position, for the message). */
static void mck_write(mck *k, int pt, int item)
{
    const pass_mem *m = k->m;
    int64_t lo = m->off[pt], hi = lo + m->bytes[pt];
    k->valid[pt] = 1;
    k->clobber[pt] = -1;
    /* the first buffer that may overlap starts after lo - maxbytes */
    int a = 0, b = k->n;
    while (a < b) {
        int mid = (a + b) / 2;
        if (m->off[k->byoff[mid]] + k->maxbytes <= lo) a = mid + 1;
        else b = mid;
    }
    for (int j = a; j < k->n && m->off[k->byoff[j]] < hi; j++) {
        int q = k->byoff[j];
        if (q == pt || m->off[q] + m->bytes[q] <= lo || !m->bytes[q]) continue;
        if (k->valid[q]) k->clobber[q] = pt, k->clob_item[q] = item;
        k->valid[q] = 0;
    }
}

/* A read of pt at schedule item `item`: 0, or 1 with a message. */
static int mck_read(mck *k, int pt, int item, char *msg, size_t cap)
{
    const ir_dist *d = k->d;
    const ir_graph *g = d->g;
    if (g->t[d->pt[pt].tensor].kind == IR_T_INPUT && !k->loaded[pt]) {
        k->loaded[pt] = 1;   /* lower.c loads an input just before its first reader */
        mck_write(k, pt, item);
    }
    if (k->valid[pt] || !k->m->bytes[pt]) return 0;
    const ir_item *it = &d->seq[item];
    const char *who = it->comm ? ir_comm_name(d->comm[it->id].kind) : g->op[d->sop[it->id].op].name;
    if (k->clobber[pt] >= 0) {
        const ir_item *w = &d->seq[k->clob_item[pt]];
        snprintf(msg, cap, "rank %d: %s reads p%d (%s) at @%lld, but %s wrote p%d (%s) over it before",
                 k->m->rank, who, pt, g->t[d->pt[pt].tensor].name, (long long)k->m->off[pt],
                 w->comm ? ir_comm_name(d->comm[w->id].kind) : g->op[d->sop[w->id].op].name, k->clobber[pt],
                 g->t[d->pt[k->clobber[pt]].tensor].name);
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
    const int rank = k->m->rank;
    memset(k->loaded, 0, (size_t)d->npt + 1);
    for (int n = 0; n < d->nseq; n++) {
        const ir_item *it = &d->seq[n];
        if (it->sec != sec) continue;
        if (it->comm) {
            const ir_comm *c = &d->comm[it->id];
            for (int j = 0; j < c->n; j++) {
                if (d->ints[d->grp[c->group].devs + j] != rank) continue;
                int in = d->ints[c->in + j], out = d->ints[c->out + j];
                if (in >= 0 && mck_read(k, in, n, msg, cap)) return 1;
                if (out >= 0) mck_write(k, out, n);
            }
        } else {
            const ir_subop *s = &d->sop[it->id];
            if (s->dev != rank) continue;
            const ir_op *o = &d->g->op[s->op];
            for (int j = 0; j < o->nin; j++)
                if (mck_read(k, s->in[j], n, msg, cap)) return 1;
            for (int j = 0; j < o->nout; j++) mck_write(k, s->out[j], n);
        }
    }
    return 0;
}

int pass_memcheck(const ir_dist *d, const pass_mem *m, char *msg, size_t cap)
{
    const ir_graph *g = d->g;
    mck k = {d, m, ir_xmalloc(sizeof(int) * ((size_t)d->npt + 1)), 0, 0, ir_xcalloc((size_t)d->npt + 1, 1),
             ir_xmalloc(sizeof(int) * ((size_t)d->npt + 1)), ir_xmalloc(sizeof(int) * ((size_t)d->npt + 1)),
             ir_xcalloc((size_t)d->npt + 1, 1)};
    for (int i = 0; i < d->npt; i++) {
        k.clobber[i] = -1;
        if (m->off[i] < 0) continue;
        k.byoff[k.n++] = i;
        if (m->bytes[i] > k.maxbytes) k.maxbytes = m->bytes[i];
    }
    mck_sort_mem = m;
    qsort(k.byoff, (size_t)k.n, sizeof *k.byoff, cmp_off);
    /* the prologue: params and optimizer state */
    for (int j = 0; j < k.n; j++) {
        int kind = g->t[d->pt[k.byoff[j]].tensor].kind;
        if (kind == IR_T_PARAM || kind == IR_T_OPTSTATE) k.valid[k.byoff[j]] = 1;
    }
    /* two micro-batches, the step's end, the next step's first micro-batch:
       every way the program goes on from each section */
    static const int order[] = {IR_SEC_MB, IR_SEC_MB, IR_SEC_POST, IR_SEC_MB, IR_SEC_POST};
    int bad = 0;
    for (size_t s = 0; s < sizeof order / sizeof *order && !bad; s++) bad = mck_section(&k, order[s], msg, cap);
    free(k.byoff);
    free(k.valid);
    free(k.clobber);
    free(k.clob_item);
    free(k.loaded);
    return bad;
}
