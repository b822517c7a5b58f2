/* dist.c -- the DistGraph: sub-ops on devices over pTensors, comm ops,
 * device groups; boxes; printer and verifier. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* One tensor's index: per slot the upper 32 bits of the pTensor's hash and
 * its id + 1 (0: empty), so most probes are decided without reading the
 * pTensor; cap slots, a power of two (0: none yet), at most half full. */
typedef struct ir_ptindex {
    uint64_t *slot;
    int cap, n;
} ir_ptindex;

void ir_dist_init(ir_dist *d, const ir_graph *g, int ndev)
{
    memset(d, 0, sizeof *d);
    d->g = g;
    d->ndev = ndev;
    d->trans = ir_xcalloc((size_t)g->nop + 1, sizeof *d->trans);
    d->op_stage = ir_xcalloc((size_t)g->nop + 1, sizeof *d->op_stage);
    d->accum = ir_xcalloc((size_t)g->nt + 1, 1);
    d->zgrad = ir_xcalloc((size_t)g->nt + 1, 1);
    d->world_group = -1;
    d->seq_opt = -1;
    d->mesh_dp = d->mesh_tp = d->mesh_pp = d->mesh_v = 1;
    d->seq_bwd = -1;
    d->store = ir_xmalloc(sizeof(int) * ((size_t)g->nt + 1));
    d->nstore = ir_xcalloc((size_t)g->nt + 1, sizeof(int));
    for (int i = 0; i < g->nt; i++) d->store[i] = -1;
}

void ir_dist_free(ir_dist *d)
{
    for (int i = 0; i < d->npool; i++) free(d->pool[i]);
    free(d->pool);
    free(d->trans);
    free(d->op_stage);
    free(d->stage_tp);
    free(d->item_w);
    free(d->item_chunk);
    free(d->zgrad);
    if (d->pipe) {
        free(d->pipe->task0);
        free(d->pipe->task);
        free(d->pipe->nslot);
        free(d->pipe->dep);
        free(d->pipe->hoist);
        free(d->pipe);
    }
    free(d->pt);
    free(d->sop);
    free(d->comm);
    free(d->grp);
    free(d->ints);
    free(d->store);
    free(d->nstore);
    free(d->seq);
    free(d->itime);
    free(d->iflops);
    free(d->accum);
    free(d->t16);
    for (int t = 0; d->pt_index && t < d->g->nt; t++) free(d->pt_index[t].slot);
    free(d->pt_index);
    free(d->grp_hash);
    free(d->op_sop);
    free(d->rank_item0);
    free(d->rank_item);
    free(d->rank_member);
    free(d->rank_sop0);
    free(d->rank_sop);
    free(d->rank_pt0);
    free(d->rank_pt);
    free(d->pt_local);
    free(d->norm_owner);
    free(d->pt_store);
    free(d->pt_writer);
    memset(d, 0, sizeof *d);
}

const char *ir_dist_str(ir_dist *d, const char *s)
{
    char **slot = IR_PUSH(d->pool, d->npool, d->poolcap);
    *slot = ir_xstrdup(s);
    return *slot;
}

int ir_dist_ints(ir_dist *d, const int *v, int n)
{
    ir_grow((void **)&d->ints, &d->intscap, d->nints + n + 1, sizeof *d->ints);
    int at = d->nints;
    if (n) memcpy(d->ints + at, v, sizeof(int) * (size_t)n);
    d->nints += n;
    return at;
}

static int pt_eq(const ir_dist *d, const ir_ptensor *a, const ir_ptensor *b)
{
    return a->tensor == b->tensor && a->dev == b->dev && a->vpart == b->vpart && a->vn == b->vn &&
           ir_box_eq(&a->box, &b->box, d->g->t[a->tensor].ndim);
}

/* Mix x into hash h (multiply and fold, a word at a time). */
static uint64_t hash_mix(uint64_t h, int64_t x)
{
    h = (h ^ (uint64_t)x) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

/* Hash of the first nd dims of a box, mixed into h. */
static uint64_t box_hash(uint64_t h, const ir_box *b, int nd)
{
    for (int i = 0; i < nd; i++) h = hash_mix(hash_mix(h, b->lo[i]), b->hi[i]);
    return h;
}

/* Hash of a pTensor's identity: what pt_eq compares. */
static uint64_t pt_hash(const ir_dist *d, const ir_ptensor *p)
{
    uint64_t h = 14695981039346656037ull;
    h = hash_mix(h, p->tensor);
    h = hash_mix(h, p->dev);
    h = hash_mix(h, p->vpart);
    h = hash_mix(h, p->vn);
    return box_hash(h, &p->box, d->g->t[p->tensor].ndim);
}

/* Hash of a device list. */
static uint64_t devs_hash(const int *devs, int n)
{
    uint64_t h = hash_mix(14695981039346656037ull, n);
    for (int i = 0; i < n; i++) h = hash_mix(h, devs[i]);
    return h;
}

/* A table of cap slots (a power of two), every slot -1 (empty). */
static int *hash_new(int cap)
{
    int *t = ir_xmalloc(sizeof(int) * (size_t)cap);
    for (int i = 0; i < cap; i++) t[i] = -1;
    return t;
}

/* Put id into the first empty slot from hash h on (linear probing). */
static void hash_put(int *tab, int cap, uint64_t h, int id)
{
    size_t i = (size_t)h & (size_t)(cap - 1);
    while (tab[i] >= 0) i = (i + 1) & (size_t)(cap - 1);
    tab[i] = id;
}

static uint64_t pt_slot(int id, uint64_t h) { return (h & 0xffffffff00000000ull) | (uint64_t)(id + 1); }

/* Keep tensor t's index at most half full, rebuilt from its own slots. */
static ir_ptindex *pt_index_grow(ir_dist *d, int t)
{
    if (!d->pt_index) d->pt_index = ir_xcalloc((size_t)d->g->nt + 1, sizeof *d->pt_index);
    ir_ptindex *x = &d->pt_index[t];
    if (2 * (x->n + 1) <= x->cap) return x;
    int cap = x->cap ? 2 * x->cap : 16;
    uint64_t *slot = ir_xcalloc((size_t)cap, sizeof *slot);
    for (int i = 0; i < x->cap; i++) {
        if (!x->slot[i]) continue;
        int id = (int)(x->slot[i] & 0xffffffffu) - 1;
        size_t k = (size_t)pt_hash(d, &d->pt[id]) & (size_t)(cap - 1);
        while (slot[k]) k = (k + 1) & (size_t)(cap - 1);
        slot[k] = x->slot[i];
    }
    free(x->slot);
    x->slot = slot;
    x->cap = cap;
    return x;
}

void ir_dist_reserve(ir_dist *d, int64_t npt, int64_t nsop)
{
    IR_ASSERT(npt >= 0 && nsop >= 0 && npt < (1ll << 29) && nsop < (1ll << 29));
    if (npt > d->ptcap) {   /* no zeroing: entries are written as they are added */
        d->pt = ir_xrealloc(d->pt, sizeof *d->pt * (size_t)npt);
        d->ptcap = (int)npt;
    }
    if (nsop > d->sopcap) {
        d->sop = ir_xrealloc(d->sop, sizeof *d->sop * (size_t)nsop);
        d->sopcap = (int)nsop;
    }
}

int ir_dist_pt(ir_dist *d, const ir_ptensor *p)
{
    ir_ptindex *x = pt_index_grow(d, p->tensor);
    uint64_t h = pt_hash(d, p), tag = h & 0xffffffff00000000ull;
    size_t mask = (size_t)x->cap - 1, i = (size_t)h & mask;
    for (; x->slot[i]; i = (i + 1) & mask) {
        int id = (int)(x->slot[i] & 0xffffffffu) - 1;
        if ((x->slot[i] & 0xffffffff00000000ull) == tag && pt_eq(d, &d->pt[id], p)) return id;
    }
    ir_ptensor *n = IR_PUSH(d->pt, d->npt, d->ptcap);
    *n = *p;
    x->slot[i] = pt_slot(d->npt - 1, h);
    x->n++;
    return d->npt - 1;
}

/* Keep the group index at most half full, rebuilt from d->grp when it grows. */
static void grp_index_grow(ir_dist *d)
{
    if (2 * (d->ngrp + 1) <= d->grp_hcap) return;
    int cap = d->grp_hcap ? 2 * d->grp_hcap : 256;
    free(d->grp_hash);
    d->grp_hash = hash_new(cap);
    d->grp_hcap = cap;
    for (int i = 0; i < d->ngrp; i++)
        hash_put(d->grp_hash, cap, devs_hash(d->ints + d->grp[i].devs, d->grp[i].n), i);
}

int ir_dist_group(ir_dist *d, const int *devs, int n)
{
    grp_index_grow(d);
    size_t mask = (size_t)d->grp_hcap - 1, i = (size_t)devs_hash(devs, n) & mask;
    for (; d->grp_hash[i] >= 0; i = (i + 1) & mask) {
        const ir_group *g = &d->grp[d->grp_hash[i]];
        if (g->n == n && memcmp(d->ints + g->devs, devs, sizeof(int) * (size_t)n) == 0) return d->grp_hash[i];
    }
    for (int k = 1; k < n; k++) IR_ASSERT(devs[k] > devs[k - 1]);
    ir_group *g = IR_PUSH(d->grp, d->ngrp, d->grpcap);
    g->n = n;
    g->devs = ir_dist_ints(d, devs, n);
    d->grp_hash[i] = d->ngrp - 1;
    return d->ngrp - 1;
}

/* op_sop: sub-ops are made op by op, so each op's are one run. */
void ir_dist_index_sops(ir_dist *d)
{
    free(d->op_sop);
    d->op_sop = ir_xcalloc((size_t)d->g->nop + 2, sizeof(int));
    for (int i = 0; i < d->nsop; i++) {
        IR_ASSERT(i == 0 || d->sop[i].op >= d->sop[i - 1].op);
        d->op_sop[d->sop[i].op + 1]++;
    }
    for (int op = 0; op < d->g->nop; op++) d->op_sop[op + 1] += d->op_sop[op];
}

/* The ndev + 1 starts of a CSR from the per-device counts in cnt; cnt
 * becomes each device's fill cursor (its start). */
static int *csr_start(int *cnt, int ndev)
{
    int *start = ir_xmalloc(sizeof(int) * ((size_t)ndev + 1));
    start[0] = 0;
    for (int r = 0; r < ndev; r++) {
        start[r + 1] = start[r] + cnt[r];
        cnt[r] = start[r];
    }
    return start;
}

/* norm_owner of the sub-ops of op: a sub-op owns its gradient box when it
 * is on the lowest device among the op's sub-ops reading that box (an
 * open-addressing table over the op's sub-ops, by box: linear in them). */
static void index_owner(ir_dist *d, int op)
{
    const ir_graph *g = d->g;
    int lo = d->op_sop[op], n = d->op_sop[op + 1] - lo;
    if (g->op[op].nin < 2 || n == 0) return;
    int cap = 16;
    while (cap < 2 * n) cap *= 2;
    /* slot of each box: the sub-op on the lowest device reading it */
    int *tab = hash_new(cap), nd = g->t[g->op[op].in[1]].ndim;
    for (int pass = 0; pass < 2; pass++)
        for (int i = lo; i < lo + n; i++) {
            const ir_box *b = &d->pt[d->sop[i].in[1]].box;
            size_t k = (size_t)box_hash(14695981039346656037ull, b, nd) & (size_t)(cap - 1);
            while (tab[k] >= 0 && !ir_box_eq(&d->pt[d->sop[tab[k]].in[1]].box, b, nd)) k = (k + 1) & (size_t)(cap - 1);
            if (pass == 0 && (tab[k] < 0 || d->sop[i].dev < d->sop[tab[k]].dev)) tab[k] = i;
            if (pass == 1) d->norm_owner[i] = d->sop[i].dev <= d->sop[tab[k]].dev;
        }
    free(tab);
}

/* The per-rank indexes, from the complete schedule (see ir.h). */
/* A stored piece, for finding each box's lowest holder. */
typedef struct spiece {
    const ir_box *box;
    int nd, dev, pt;
} spiece;

static int cmp_spiece(const void *a, const void *b)
{
    const spiece *x = a, *y = b;
    for (int i = 0; i < x->nd; i++) {
        if (x->box->lo[i] != y->box->lo[i]) return x->box->lo[i] < y->box->lo[i] ? -1 : 1;
        if (x->box->hi[i] != y->box->hi[i]) return x->box->hi[i] < y->box->hi[i] ? -1 : 1;
    }
    return (x->dev > y->dev) - (x->dev < y->dev);
}

/* pt_store and pt_writer from the store lists (pass_comm's): per tensor, its
 * pieces sorted by box then device, the first of each box writes it. */
static void index_stores(ir_dist *d)
{
    const ir_graph *g = d->g;
    free(d->pt_store), free(d->pt_writer);
    d->pt_store = ir_xmalloc(sizeof(int) * ((size_t)d->npt + 1));
    memset(d->pt_store, 0xff, sizeof(int) * ((size_t)d->npt + 1));
    d->pt_writer = ir_xcalloc((size_t)d->npt + 1, 1);
    spiece *sp = NULL;
    int cap = 0;
    for (int t = 0; t < g->nt; t++) {
        if (!d->store || d->store[t] < 0) continue;
        int n = d->nstore[t];
        ir_grow((void **)&sp, &cap, n + 1, sizeof *sp);
        for (int s = 0; s < n; s++) {
            int pt = d->ints[d->store[t] + s];
            d->pt_store[pt] = s;
            sp[s] = (spiece){&d->pt[pt].box, g->t[t].ndim, d->pt[pt].dev, pt};
        }
        qsort(sp, (size_t)n, sizeof *sp, cmp_spiece);
        for (int s = 0; s < n; s++)
            d->pt_writer[sp[s].pt] = s == 0 || !ir_box_eq(sp[s - 1].box, sp[s].box, sp[s].nd);
    }
    free(sp);
}

void ir_dist_index_ranks(ir_dist *d)
{
    const int nd = d->ndev;
    IR_ASSERT(d->op_sop && d->op_sop[d->g->nop] == d->nsop);
    free(d->rank_item0), free(d->rank_item), free(d->rank_member);
    free(d->rank_sop0), free(d->rank_sop), free(d->rank_pt0), free(d->rank_pt);
    free(d->pt_local), free(d->norm_owner);
    int *cnt = ir_xcalloc((size_t)nd + 1, sizeof(int));
    /* items: a sub-op on its device, a comm on each member */
    for (int n = 0; n < d->nseq; n++) {
        const ir_item *it = &d->seq[n];
        if (!it->comm) {
            cnt[d->sop[it->id].dev]++;
            continue;
        }
        const ir_comm *c = &d->comm[it->id];
        for (int k = 0; k < c->n; k++) cnt[d->ints[d->grp[c->group].devs + k]]++;
    }
    d->rank_item0 = csr_start(cnt, nd);
    d->rank_item = ir_xmalloc(sizeof(int) * ((size_t)d->rank_item0[nd] + 1));
    d->rank_member = ir_xmalloc(sizeof(int) * ((size_t)d->rank_item0[nd] + 1));
    d->seq_opt = -1;
    for (int n = 0; n < d->nseq; n++) {
        const ir_item *it = &d->seq[n];
        if (!it->comm) {
            int r = d->sop[it->id].dev;
            d->rank_item[cnt[r]] = n;
            d->rank_member[cnt[r]++] = -1;
            if (d->seq_opt < 0 && it->sec == IR_SEC_POST && d->g->op[d->sop[it->id].op].phase == IR_PH_OPT)
                d->seq_opt = n;
            continue;
        }
        const ir_comm *c = &d->comm[it->id];
        for (int k = 0; k < c->n; k++) {
            int r = d->ints[d->grp[c->group].devs + k];
            d->rank_item[cnt[r]] = n;
            d->rank_member[cnt[r]++] = k;
        }
    }
    /* sub-ops and pTensors by device */
    memset(cnt, 0, sizeof(int) * (size_t)nd);
    for (int i = 0; i < d->nsop; i++) cnt[d->sop[i].dev]++;
    d->rank_sop0 = csr_start(cnt, nd);
    d->rank_sop = ir_xmalloc(sizeof(int) * ((size_t)d->nsop + 1));
    for (int i = 0; i < d->nsop; i++) d->rank_sop[cnt[d->sop[i].dev]++] = i;
    memset(cnt, 0, sizeof(int) * (size_t)nd);
    for (int i = 0; i < d->npt; i++) cnt[d->pt[i].dev]++;
    d->rank_pt0 = csr_start(cnt, nd);
    d->rank_pt = ir_xmalloc(sizeof(int) * ((size_t)d->npt + 1));
    d->pt_local = ir_xmalloc(sizeof(int) * ((size_t)d->npt + 1));
    for (int i = 0; i < d->npt; i++) {
        int r = d->pt[i].dev;
        d->pt_local[i] = cnt[r] - d->rank_pt0[r];
        d->rank_pt[cnt[r]++] = i;
    }
    free(cnt);
    d->norm_owner = ir_xcalloc((size_t)d->nsop + 1, 1);
    for (int op = 0; op < d->g->nop; op++) index_owner(d, op);
    index_stores(d);
}

int64_t ir_box_numel(const ir_box *b, int ndim)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= b->hi[i] - b->lo[i];
    return n;
}

int ir_box_eq(const ir_box *a, const ir_box *b, int ndim)
{
    for (int i = 0; i < ndim; i++)
        if (a->lo[i] != b->lo[i] || a->hi[i] != b->hi[i]) return 0;
    return 1;
}

int ir_box_contains(const ir_box *a, const ir_box *b, int ndim)
{
    for (int i = 0; i < ndim; i++)
        if (b->lo[i] < a->lo[i] || b->hi[i] > a->hi[i]) return 0;
    return 1;
}

int ir_box_and(const ir_box *a, const ir_box *b, int ndim, ir_box *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 0; i < ndim; i++) {
        o->lo[i] = a->lo[i] > b->lo[i] ? a->lo[i] : b->lo[i];
        o->hi[i] = a->hi[i] < b->hi[i] ? a->hi[i] : b->hi[i];
        if (o->lo[i] >= o->hi[i]) return 0;
    }
    return 1;
}

ir_box ir_box_full(const ir_tensor *t)
{
    ir_box b;
    memset(&b, 0, sizeof b);
    for (int i = 0; i < t->ndim; i++) b.hi[i] = t->shape[i];
    return b;
}

void ir_box_print(const ir_box *b, int ndim, ir_buf *buf)
{
    ir_bprintf(buf, "[");
    for (int i = 0; i < ndim; i++)
        ir_bprintf(buf, "%s%lld:%lld", i ? "," : "", (long long)b->lo[i], (long long)b->hi[i]);
    ir_bprintf(buf, "]");
}

/* p3 = d.fc1.w[0:64,0:128]/2of4@1 */
void ir_pt_print(const ir_dist *d, int pt, ir_buf *b)
{
    const ir_ptensor *p = &d->pt[pt];
    const ir_tensor *t = &d->g->t[p->tensor];
    ir_bprintf(b, "p%d=%s", pt, t->name);
    ir_box_print(&p->box, t->ndim, b);
    if (p->vn > 1) ir_bprintf(b, "/%dof%d", p->vpart, p->vn);
    ir_bprintf(b, "@%d", p->dev);
}

const char *ir_comm_name(ir_commkind k)
{
    static const char *n[IR_COMM_COUNT] = {"allreduce", "allgather", "reducescatter", "alltoall",
                                           "broadcast", "sendrecv", "slice", "copy", "zero"};
    return (unsigned)k < IR_COMM_COUNT ? n[k] : "?";
}

static const char *sec_name(int s)
{
    static const char *n[IR_SEC_COUNT] = {"prologue", "pre", "mb", "post", "epilogue", "eval_pre", "eval", "eval_post"};
    return (unsigned)s < IR_SEC_COUNT ? n[s] : "?";
}

static void print_trans(const ir_dist *d, int op, ir_buf *b)
{
    const ir_trans *tr = &d->trans[op];
    const ir_op *o = &d->g->op[op];
    if (tr->nsplit == 0) ir_bprintf(b, "whole");
    for (int j = 0; j < tr->nsplit; j++) {
        if (tr->id[j] == IR_VALUE) ir_bprintf(b, "%svalue %d", j ? " x " : "", tr->n[j]);
        else if (tr->id[j] < 0) ir_bprintf(b, "%sreplicate %d", j ? " x " : "", tr->n[j]);
        else ir_bprintf(b, "%ssplit %s %d", j ? " x " : "", o->anno.idname[tr->id[j]], tr->n[j]);
    }
    ir_bprintf(b, " on devs");
    for (int s = 0; s < tr->nsub; s++) ir_bprintf(b, "%s%d", s ? "," : " ", d->ints[tr->devs + s]);
}

void ir_dist_print(const ir_dist *d, ir_buf *b)
{
    const ir_graph *g = d->g;
    ir_bprintf(b, "dist %s devices %d\n", g->model ? g->model : "?", d->ndev);
    for (int i = 0; i < d->ngrp; i++) {
        ir_bprintf(b, "  group g%d {", i);
        for (int k = 0; k < d->grp[i].n; k++) ir_bprintf(b, "%s%d", k ? "," : "", d->ints[d->grp[i].devs + k]);
        ir_bprintf(b, "}\n");
    }
    for (int i = 0; i < g->nop; i++) {
        ir_bprintf(b, "  trans %s: ", g->op[i].name);
        print_trans(d, i, b);
        if (d->trans[i].why) ir_bprintf(b, "  ; %s", d->trans[i].why);
        ir_bprintf(b, "\n");
    }
    for (int i = 0; i < d->nsop; i++) {
        const ir_subop *s = &d->sop[i];
        const ir_op *o = &g->op[s->op];
        ir_bprintf(b, "  s%d %s.%d dev %d", i, o->name, s->sub, s->dev);
        if (s->order >= 0) ir_bprintf(b, " %s#%d", sec_name(s->sec), s->order);
        ir_bprintf(b, " (");
        for (int k = 0; k < o->nin; k++) {
            if (k) ir_bprintf(b, ", ");
            ir_pt_print(d, s->in[k], b);
        }
        ir_bprintf(b, ") ->");
        for (int k = 0; k < o->nout; k++) {
            ir_bprintf(b, " ");
            ir_pt_print(d, s->out[k], b);
        }
        ir_bprintf(b, "\n");
    }
    for (int i = 0; i < d->ncomm; i++) {
        const ir_comm *c = &d->comm[i];
        ir_bprintf(b, "  c%d %s %s g%d %s bytes %lld:", i, ir_comm_name(c->kind), g->t[c->tensor].name, c->group,
                   sec_name(c->sec), (long long)c->bytes);
        if (c->kind == IR_COMM_BROADCAST || c->kind == IR_COMM_SENDRECV || c->kind == IR_COMM_COPY) {
            ir_bprintf(b, " region ");
            ir_box_print(&c->region, g->t[c->tensor].ndim, b);
            if (c->acc) ir_bprintf(b, " acc");
        }
        for (int k = 0; k < c->n; k++) {
            int pi = d->ints[c->in + k], po = d->ints[c->out + k];
            ir_bprintf(b, " ");
            if (pi >= 0) ir_pt_print(d, pi, b);
            else ir_bprintf(b, "-");
            ir_bprintf(b, " => ");
            if (po >= 0) ir_pt_print(d, po, b);
            else ir_bprintf(b, "-");
            ir_bprintf(b, k + 1 < c->n ? ";" : "");
        }
        if (c->why) ir_bprintf(b, "  ; %s", c->why);
        ir_bprintf(b, "\n");
    }
}

void ir_dist_verify(const ir_dist *d)
{
    const ir_graph *g = d->g;
    for (int i = 0; i < d->npt; i++) {
        const ir_ptensor *p = &d->pt[i];
        IR_ASSERT(p->tensor >= 0 && p->tensor < g->nt);
        IR_ASSERT(p->dev >= 0 && p->dev < d->ndev);
        IR_ASSERT(p->vn >= 1 && p->vpart >= 0 && p->vpart < p->vn);
        const ir_tensor *t = &g->t[p->tensor];
        for (int k = 0; k < t->ndim; k++)
            if (!(0 <= p->box.lo[k] && p->box.lo[k] < p->box.hi[k] && p->box.hi[k] <= t->shape[k]))
                ir_die(__FILE__, __LINE__, "pTensor p%d of %s: bad box in dim %d", i, t->name, k);
    }
    for (int i = 0; i < d->nsop; i++) {
        const ir_subop *s = &d->sop[i];
        const ir_op *o = &g->op[s->op];
        for (int k = 0; k < o->nin; k++) {
            const ir_ptensor *p = &d->pt[s->in[k]];
            IR_ASSERT(p->tensor == o->in[k] && p->dev == s->dev);
            int valsplit = 0;
            for (int j = 0; j < d->trans[s->op].nsplit; j++) valsplit |= d->trans[s->op].id[j] == IR_VALUE;
            if (p->vn != 1 && !((ir_ops[o->kind].flags & OPF_LINEAR) && valsplit))
                ir_die(__FILE__, __LINE__, "sub-op s%d (%s) consumes a partial value", i, o->name);
        }
        for (int k = 0; k < o->nout; k++) IR_ASSERT(d->pt[s->out[k]].tensor == o->out[k]);
    }
    for (int i = 0; i < d->ncomm; i++) {
        const ir_comm *c = &d->comm[i];
        IR_ASSERT(c->group >= 0 && c->group < d->ngrp && d->grp[c->group].n == c->n);
        const int *devs = d->ints + d->grp[c->group].devs;
        for (int k = 0; k < c->n; k++) {
            int pi = d->ints[c->in + k], po = d->ints[c->out + k];
            IR_ASSERT(pi < 0 || (d->pt[pi].tensor == c->tensor && d->pt[pi].dev == devs[k]));
            IR_ASSERT(po < 0 || (d->pt[po].tensor == c->tensor && d->pt[po].dev == devs[k]));
        }
    }
}
