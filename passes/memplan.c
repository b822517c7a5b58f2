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
 * all-reduce works in place: its result shares the buffer of its input.
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
    char *pers = ir_xcalloc((size_t)d->npt + 1, 1);
    for (int i = 0; i < d->npt; i++) m->off[i] = -1, first[i] = -1, last[i] = -1, alias[i] = -1;
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
                if (c->kind == IR_COMM_ALLREDUCE) alias[out] = in;
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
    free(pers);
}

void pass_mem_free(pass_mem *m)
{
    free(m->off);
    free(m->bytes);
    memset(m, 0, sizeof *m);
}
