/* test_comm.c -- the comm pass on layout transitions.
 *
 * Each case builds a producer op and a consumer op with chosen op-trans and
 * op-assign, runs split + comm + schedule, then SIMULATES the derived comm
 * ops on real values: the producer's pieces get random data (value parts
 * random, summing to the true tensor), every comm op is executed by its
 * documented semantics (ir.h) in schedule order, and every pTensor the
 * consumer needs must then hold exactly the true values.  The checks also
 * pin which collectives are chosen and how many bytes move.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "passes.h"

/* ---------------------------------------------------------------- graphs */

enum { PROD_COPY, PROD_MATMUL };

typedef struct tcase {
    ir_graph g;
    ir_dist d;
    int y;          /* the tensor under test */
    int prod, cons; /* its producer and consumer ops */
} tcase;

/* x[R, C] -> producer -> y[R, C] -> copy -> z.  PROD_MATMUL: y = x2[R, 2] @ w[2, C]
 * (the reduction dim k of size 2 can be split to make value parts). */
static void build(tcase *t, int kind, int64_t R, int64_t C, int ndev)
{
    char err[256];
    ir_graph *g = &t->g;
    ir_graph_init(g);
    g->model = ir_str(g, "t");
    g->file = ir_str(g, "t.ini");
    g->train.loss = -1;
    g->train.micro_batches = 1;
    int64_t sx[2] = {R, C}, sx2[2] = {R, 2}, sw[2] = {2, C};
    const char *oy[] = {"y"}, *oz[] = {"z"};
    if (kind == PROD_COPY) {
        int x = ir_add_tensor(g, "x", IR_F32, IR_T_INPUT, 2, sx, 1);
        t->prod = ir_add_op(g, "prod", IR_OP_COPY, 1, &x, oy, 2, err, sizeof err);
    } else {
        int in[2] = {ir_add_tensor(g, "x", IR_F32, IR_T_INPUT, 2, sx2, 1),
                     ir_add_tensor(g, "w", IR_F32, IR_T_PARAM, 2, sw, 1)};
        t->prod = ir_add_op(g, "prod", IR_OP_MATMUL, 2, in, oy, 2, err, sizeof err);
    }
    IR_ASSERT(t->prod >= 0);
    t->y = g->op[t->prod].out[0];
    t->cons = ir_add_op(g, "cons", IR_OP_COPY, 1, &t->y, oz, 3, err, sizeof err);
    IR_ASSERT(t->cons >= 0);
    g->req.devices = ndev;
    ir_dist_init(&t->d, g, ndev);
}

/* op-trans of op: splits (identifier name or "r" replicate, parts), on devs. */
static void trans(tcase *t, int op, int nsplit, const char *const *ids, const int *parts, const int *devs)
{
    ir_trans *tr = &t->d.trans[op];
    memset(tr, 0, sizeof *tr);
    tr->nsplit = nsplit;
    tr->nsub = 1;
    for (int j = 0; j < nsplit; j++) {
        tr->id[j] = strcmp(ids[j], "r") == 0 ? IR_REPLICATE : ir_anno_find(&t->g.op[op].anno, ids[j]);
        IR_ASSERT(tr->id[j] != -1 || strcmp(ids[j], "r") == 0);
        tr->n[j] = parts[j];
        tr->nsub *= parts[j];
    }
    tr->devs = ir_dist_ints(&t->d, devs, tr->nsub);
}

static void run_passes(tcase *t)
{
    pass_split(&t->d);
    ir_dist_verify(&t->d);
    pass_comm(&t->d);
    ir_dist_verify(&t->d);
    pass_schedule(&t->d);
}

static void done(tcase *t)
{
    ir_dist_free(&t->d);
    ir_graph_free(&t->g);
}

/* ---------------------------------------------------------------- simulator */

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffff) / 65536.0f - 0.5f;
}

typedef struct sim {
    const ir_dist *d;
    int nd;
    int64_t C0, C1;  /* full shape */
    float *truth;    /* full tensor */
    float **val;     /* per pTensor: values over its box, or NULL */
} sim;

static float *buf(sim *s, int pt)
{
    if (!s->val[pt]) s->val[pt] = calloc((size_t)ir_box_numel(&s->d->pt[pt].box, s->nd), sizeof(float));
    return s->val[pt];
}

/* Element (i, j) of pTensor pt's buffer. */
static float *at(sim *s, int pt, int64_t i, int64_t j)
{
    const ir_box *b = &s->d->pt[pt].box;
    return &buf(s, pt)[(i - b->lo[0]) * (b->hi[1] - b->lo[1]) + (j - b->lo[1])];
}

/* Producer pieces: true values, or random parts summing to them (replicas equal). */
static void seed_sources(sim *s, int y, int prod)
{
    const ir_dist *d = s->d;
    for (int i = 0; i < d->nsop; i++) {
        const ir_subop *so = &d->sop[i];
        if (so->op != prod) continue;
        int pt = so->out[0];
        const ir_ptensor *p = &d->pt[pt];
        for (int64_t r = p->box.lo[0]; r < p->box.hi[0]; r++)
            for (int64_t c = p->box.lo[1]; c < p->box.hi[1]; c++) {
                /* part v of n: a deterministic function of (element, v) so replicas agree */
                float sum = 0, mine = 0;
                for (int v = 0; v < p->vn; v++) {
                    uint64_t h = (uint64_t)(r * 1000003 + c * 7919 + v * 104729 + 1);
                    h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33;
                    float part = v == p->vn - 1 ? s->truth[r * s->C1 + c] - sum : (float)(h % 1000) / 1000.0f - 0.5f;
                    sum += part;
                    if (v == p->vpart) mine = part;
                }
                *at(s, pt, r, c) = mine;
            }
    }
    (void)y;
}

/* Execute comm ci by the semantics documented in ir.h. */
static void exec_comm(sim *s, int ci)
{
    const ir_dist *d = s->d;
    const ir_comm *c = &d->comm[ci];
    const int *in = d->ints + c->in, *out = d->ints + c->out;
    for (int k = 0; k < c->n; k++) {
        int o = out[k];
        if (o < 0) continue;
        const ir_box *ob = &d->pt[o].box;
        float *tmp = calloc((size_t)ir_box_numel(ob, 2), sizeof(float));
        int64_t W = ob->hi[1] - ob->lo[1];
        for (int64_t r = ob->lo[0]; r < ob->hi[0]; r++)
            for (int64_t q = ob->lo[1]; q < ob->hi[1]; q++) {
                float v = *at(s, o, r, q), nv = v;
                int inreg = r >= c->region.lo[0] && r < c->region.hi[0] && q >= c->region.lo[1] && q < c->region.hi[1];
                switch (c->kind) {
                case IR_COMM_ALLREDUCE:
                case IR_COMM_REDUCESCATTER:
                    nv = 0;
                    for (int j = 0; j < c->n; j++) nv += *at(s, in[j], r, q);
                    break;
                case IR_COMM_ALLGATHER:
                case IR_COMM_ALLTOALL:
                    for (int j = 0; j < c->n; j++) {
                        const ir_box *ib = &d->pt[in[j]].box;
                        if (r >= ib->lo[0] && r < ib->hi[0] && q >= ib->lo[1] && q < ib->hi[1]) nv = *at(s, in[j], r, q);
                    }
                    break;
                case IR_COMM_BROADCAST:
                    if (inreg) nv = *at(s, in[c->root], r, q);
                    break;
                case IR_COMM_SENDRECV:
                    if (inreg) nv = (c->acc ? v : 0) + *at(s, in[c->root], r, q);
                    break;
                case IR_COMM_SLICE:
                    nv = *at(s, in[0], r, q);
                    break;
                case IR_COMM_COPY:
                    if (inreg) nv = (c->acc ? v : 0) + *at(s, in[0], r, q);
                    break;
                case IR_COMM_ZERO:
                    nv = 0;
                    break;
                default:
                    IR_ASSERT(0);
                }
                tmp[(r - ob->lo[0]) * W + (q - ob->lo[1])] = nv;
            }
        memcpy(buf(s, o), tmp, sizeof(float) * (size_t)ir_box_numel(ob, 2));
        free(tmp);
    }
}

/* Run the comms of y in schedule order; return the largest error over every
 * pTensor the consumer needs. */
static double simulate(tcase *t)
{
    const ir_dist *d = &t->d;
    sim s = {d, 2, t->g.t[t->y].shape[0], t->g.t[t->y].shape[1], NULL, NULL};
    s.truth = malloc(sizeof(float) * (size_t)(s.C0 * s.C1));
    for (int64_t i = 0; i < s.C0 * s.C1; i++) s.truth[i] = frand();
    s.val = calloc((size_t)d->npt, sizeof *s.val);
    seed_sources(&s, t->y, t->prod);
    for (int n = 0; n < d->nseq; n++)
        if (d->seq[n].comm && d->comm[d->seq[n].id].tensor == t->y) exec_comm(&s, d->seq[n].id);
    double err = 0;
    for (int i = 0; i < d->nsop; i++) {
        if (d->sop[i].op != t->cons) continue;
        int pt = d->sop[i].in[0];
        const ir_box *b = &d->pt[pt].box;
        if (!s.val[pt]) return INFINITY;
        for (int64_t r = b->lo[0]; r < b->hi[0]; r++)
            for (int64_t q = b->lo[1]; q < b->hi[1]; q++)
                err = fmax(err, fabs(*at(&s, pt, r, q) - s.truth[r * s.C1 + q]));
    }
    for (int i = 0; i < d->npt; i++) free(s.val[i]);
    free(s.val);
    free(s.truth);
    return err;
}

/* Count comms of y by kind; total bytes. */
static int count(const tcase *t, ir_commkind k, int64_t *bytes)
{
    int n = 0;
    if (bytes) *bytes = 0;
    for (int i = 0; i < t->d.ncomm; i++) {
        const ir_comm *c = &t->d.comm[i];
        if (c->tensor != t->y) continue;
        if (bytes) *bytes += c->bytes;
        n += c->kind == k;
    }
    return n;
}

static int seq8[8] = {0, 1, 2, 3, 4, 5, 6, 7};

/* ---------------------------------------------------------------- cases */

/* 256x256 value-split 2 x dim-0 split 4 on 8 devices, consumed dim-0 split 8:
 * reduce-scatters in 2-device groups. */
static void case_reducescatter(void)
{
    tcase t;
    build(&t, PROD_MATMUL, 256, 256, 8);
    const char *pi[] = {"*0", "k"}, *ci[] = {"*0"};
    int pp[] = {4, 2}, cp[] = {8};
    trans(&t, t.prod, 2, pi, pp, seq8);
    trans(&t, t.cons, 1, ci, cp, seq8);
    run_passes(&t);
    int ok = 1;
    for (int i = 0; i < t.d.ncomm; i++)
        if (t.d.comm[i].tensor == t.y) ok &= t.d.comm[i].kind == IR_COMM_REDUCESCATTER && t.d.comm[i].n == 2;
    int64_t b;
    CHECK(count(&t, IR_COMM_REDUCESCATTER, &b) == 4 && ok, "value 2 x rows 4 -> rows 8: 4 reduce-scatters over 2 devices");
    CHECK(b == 4 * (64 * 256 * 4 / 2), "bytes: each pair sends half a 64x256 piece (%lld)", (long long)b);
    CHECK(simulate(&t) < 1e-5, "consumers get the summed rows");
    done(&t);
}

/* [8,8] value-split 2 x dim-1 split 2 on 4 devices, consumed dim-0 split 4. */
static void case_value_cols_to_rows(void)
{
    tcase t;
    build(&t, PROD_MATMUL, 8, 8, 4);
    const char *pi[] = {"k", "n"}, *ci[] = {"*0"};
    int pp[] = {2, 2}, cp[] = {4};
    trans(&t, t.prod, 2, pi, pp, seq8);
    trans(&t, t.cons, 1, ci, cp, seq8);
    run_passes(&t);
    double e = simulate(&t);
    CHECK(e < 1e-5, "value 2 x cols 2 -> rows 4: consumers get the summed rows (err %g, %d comms)", e, t.d.ncomm);
    done(&t);
}

/* replicated -> split: a local slice, no bytes moved. */
static void case_replicated_to_split(void)
{
    tcase t;
    build(&t, PROD_COPY, 16, 8, 4);
    const char *pi[] = {"r"}, *ci[] = {"*0"};
    int pp[] = {4}, cp[] = {4};
    trans(&t, t.prod, 1, pi, pp, seq8);
    trans(&t, t.cons, 1, ci, cp, seq8);
    run_passes(&t);
    int64_t b;
    CHECK(count(&t, IR_COMM_SLICE, &b) == 4 && b == 0, "replicated -> rows 4: 4 local slices, 0 bytes");
    CHECK(simulate(&t) == 0, "slices are exact");
    done(&t);
}

/* split -> replicated: all-gather. */
static void case_allgather(void)
{
    tcase t;
    build(&t, PROD_COPY, 16, 8, 4);
    const char *pi[] = {"*1"}, *ci[] = {"r"};
    int pp[] = {4}, cp[] = {4};
    trans(&t, t.prod, 1, pi, pp, seq8);
    trans(&t, t.cons, 1, ci, cp, seq8);
    run_passes(&t);
    CHECK(count(&t, IR_COMM_ALLGATHER, NULL) == 1 && t.d.ncomm == 1, "cols 4 -> replicated: one all-gather");
    CHECK(simulate(&t) == 0, "every device gets the whole tensor");
    done(&t);
}

/* rows split -> cols split on the same devices: all-to-all. */
static void case_alltoall(void)
{
    tcase t;
    build(&t, PROD_COPY, 16, 8, 4);
    const char *pi[] = {"*0"}, *ci[] = {"*1"};
    int pp[] = {4}, cp[] = {4};
    trans(&t, t.prod, 1, pi, pp, seq8);
    trans(&t, t.cons, 1, ci, cp, seq8);
    run_passes(&t);
    int64_t b;
    CHECK(count(&t, IR_COMM_ALLTOALL, &b) == 1 && t.d.ncomm == 1, "rows 4 -> cols 4: one all-to-all");
    CHECK(b == 4 * 8 * 4 * 3 / 4, "bytes: 3/4 of each device's piece (%lld)", (long long)b);
    CHECK(simulate(&t) == 0, "every device gets its columns");
    done(&t);
}

/* value parts on all devices -> replicated: all-reduce. */
static void case_allreduce(void)
{
    tcase t;
    build(&t, PROD_MATMUL, 8, 8, 2);
    const char *pi[] = {"k"}, *ci[] = {"r"};
    int pp[] = {2}, cp[] = {2};
    trans(&t, t.prod, 1, pi, pp, seq8);
    trans(&t, t.cons, 1, ci, cp, seq8);
    run_passes(&t);
    CHECK(count(&t, IR_COMM_ALLREDUCE, NULL) == 1 && t.d.ncomm == 1, "value 2 -> replicated: one all-reduce");
    CHECK(simulate(&t) < 1e-6, "the sum arrives everywhere");
    done(&t);
}

/* dp x tp replicas: value 2 (dp) x replicated 2 (tp) -> replicated: all-reduce per tp replica. */
static void case_replica_groups(void)
{
    tcase t;
    build(&t, PROD_MATMUL, 8, 8, 4);
    const char *pi[] = {"k", "r"}, *ci[] = {"r"};
    int pp[] = {2, 2}, cp[] = {4};
    trans(&t, t.prod, 2, pi, pp, seq8);
    trans(&t, t.cons, 1, ci, cp, seq8);
    run_passes(&t);
    int ok = count(&t, IR_COMM_ALLREDUCE, NULL) == 2;
    for (int i = 0; i < t.d.ncomm && ok; i++) {
        const int *g = t.d.ints + t.d.grp[t.d.comm[i].group].devs;
        ok = t.d.comm[i].n == 2 && g[1] - g[0] == 2;
    }
    CHECK(ok, "value 2 x replicate 2 -> replicated: all-reduces over {0,2} and {1,3}");
    CHECK(simulate(&t) < 1e-6, "the sum arrives everywhere");
    done(&t);
}

/* one holder, many readers: broadcast. */
static void case_broadcast(void)
{
    tcase t;
    build(&t, PROD_COPY, 8, 8, 4);
    int two[1] = {2};
    trans(&t, t.prod, 0, NULL, NULL, two);
    const char *ci[] = {"r"};
    int cp[] = {4};
    trans(&t, t.cons, 1, ci, cp, seq8);
    run_passes(&t);
    int64_t b;
    CHECK(count(&t, IR_COMM_BROADCAST, &b) == 1 && b == 8 * 8 * 4, "held by rank 2, read by all: one broadcast");
    CHECK(simulate(&t) == 0, "everyone gets rank 2's copy");
    done(&t);
}

/* uneven regroupings fall back to send/recv and stay exact. */
static void case_fallback(void)
{
    tcase t;
    build(&t, PROD_COPY, 12, 8, 4);
    const char *pi[] = {"*0"}, *ci[] = {"*1"};
    int pp[] = {3}, cp[] = {2}, pd[] = {0, 1, 2}, cd[] = {3, 1};
    trans(&t, t.prod, 1, pi, pp, pd);
    trans(&t, t.cons, 1, ci, cp, cd);
    run_passes(&t);
    int64_t b;
    CHECK(count(&t, IR_COMM_SENDRECV, &b) >= 4, "rows 3 on {0,1,2} -> cols 2 on {3,1}: send/recv (%lld bytes)",
          (long long)b);
    CHECK(simulate(&t) == 0, "each consumer assembles its columns exactly");
    done(&t);
    /* value parts on some devices, a reader elsewhere */
    build(&t, PROD_MATMUL, 8, 4, 4);
    const char *vi[] = {"k"}, *ri[] = {"*0"};
    int vp[] = {2}, rp[] = {2}, vd[] = {0, 1}, rd[] = {2, 3};
    trans(&t, t.prod, 1, vi, vp, vd);
    trans(&t, t.cons, 1, ri, rp, rd);
    run_passes(&t);
    CHECK(simulate(&t) < 1e-6, "value parts on {0,1} -> rows on {2,3}: received and summed (%d comms)", t.d.ncomm);
    done(&t);
}

int main(void)
{
    case_reducescatter();
    case_value_cols_to_rows();
    case_replicated_to_split();
    case_allgather();
    case_alltoall();
    case_allreduce();
    case_replica_groups();
    case_broadcast();
    case_fallback();
    return check_done();
}
