/* test_passes.c -- unit tests of the IR and the passes on graphs built
 * through the IR API (no spec file): annotations, autograd, the dp plan,
 * communication derived from pTensors, schedule, memory plan, lowering. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codegen.h"
#include "frontend.h"
#include "passes.h"
#include "rt_ew.h"

static void test_anno(void)
{
    ir_anno a;
    char err[256];
    int r32[2] = {3, 2};
    CHECK(ir_anno_parse("* k+, k n -> * n", 2, r32, &a, err, sizeof err) == 0, "matmul annotation parses");
    ir_buf b = {0};
    ir_anno_print(&a, &b);
    CHECK(strcmp(b.s, "*0 *1 k+, k n -> *0 *1 n") == 0, "expanded for rank 3: '%s'", b.s);
    ir_buf_free(&b);
    CHECK(a.id_reduce[ir_anno_find(&a, "k")] && !a.id_reduce[ir_anno_find(&a, "n")], "k is a reduction, n is not");
    int r2[1] = {2};
    CHECK(ir_anno_parse("*+ v^, *+ -> 1", 1, r2, &a, err, sizeof err) != 0, "wrong input count rejected: %s", err);
    int r11[2] = {1, 1};
    CHECK(ir_anno_parse("a b, b -> a", 2, r11, &a, err, sizeof err) != 0, "wrong rank rejected: %s", err);
    int r22[2] = {2, 2};
    CHECK(ir_anno_parse("a k+, k b -> a k", 2, r22, &a, err, sizeof err) != 0, "reduction in output rejected: %s", err);
    CHECK(ir_anno_parse("a b$, b -> a", 2, r22, &a, err, sizeof err) != 0, "bad character rejected: %s", err);
    int r1[1] = {2};
    CHECK(ir_anno_parse("*, * -> ", 1, r1, &a, err, sizeof err) != 0, "operand count mismatch rejected");
    int r2b[2] = {2, 2};
    CHECK(ir_anno_parse("*, * -> ", 2, r2b, &a, err, sizeof err) == 0 && a.nout == 0, "no outputs (optimizer)");
}

/* x[B,D] -> matmul w1 -> bias b1 -> relu -> matmul w2 -> mse(y) */
static void mlp(ir_graph *g, int64_t B, int mbs)
{
    char err[256];
    ir_graph_init(g);
    g->model = ir_str(g, "t");
    g->file = ir_str(g, "t.ini");
    int64_t sx[2] = {B, 4}, sw1[2] = {4, 6}, sb1[1] = {6}, sw2[2] = {6, 3}, sy[2] = {B, 3};
    int x = ir_add_tensor(g, "x", IR_F32, IR_T_INPUT, 2, sx, 1);
    int y = ir_add_tensor(g, "y", IR_F32, IR_T_INPUT, 2, sy, 2);
    g->t[x].batch_dim = g->t[y].batch_dim = 0;
    int w1 = ir_add_tensor(g, "w1", IR_F32, IR_T_PARAM, 2, sw1, 3);
    int b1 = ir_add_tensor(g, "b1", IR_F32, IR_T_PARAM, 1, sb1, 4);
    int w2 = ir_add_tensor(g, "w2", IR_F32, IR_T_PARAM, 2, sw2, 5);
    const char *o1[] = {"h"}, *o2[] = {"hb"}, *o3[] = {"a"}, *o4[] = {"p"}, *o5[] = {"loss"};
    int in1[2] = {x, w1};
    int op = ir_add_op(g, "fc1", IR_OP_MATMUL, 2, in1, o1, 6, err, sizeof err);
    int in2[2] = {g->op[op].out[0], b1};
    op = ir_add_op(g, "bias1", IR_OP_BIAS_ADD, 2, in2, o2, 7, err, sizeof err);
    int in3[1] = {g->op[op].out[0]};
    op = ir_add_op(g, "act", IR_OP_RELU, 1, in3, o3, 8, err, sizeof err);
    int in4[2] = {g->op[op].out[0], w2};
    op = ir_add_op(g, "fc2", IR_OP_MATMUL, 2, in4, o4, 9, err, sizeof err);
    int in5[2] = {g->op[op].out[0], y};
    op = ir_add_op(g, "mse", IR_OP_MSE_LOSS, 2, in5, o5, 10, err, sizeof err);
    g->train.loss = g->op[op].out[0];
    g->train.optimizer = IR_OP_ADAMW;
    g->train.lr = 1e-3;
    g->train.beta1 = 0.9;
    g->train.beta2 = 0.999;
    g->train.eps = 1e-8;
    g->train.steps = 3;
    g->train.micro_batches = mbs;
    g->train.data_period = 1;
}

static void test_graph(void)
{
    ir_graph g;
    mlp(&g, 8, 1);
    char err[256];
    int t = ir_find_tensor(&g, "p");
    CHECK(t >= 0 && g.t[t].shape[0] == 8 && g.t[t].shape[1] == 3 && g.t[t].batch_dim == 0,
          "shapes and batch dim inferred through two matmuls");
    int bad[2] = {ir_find_tensor(&g, "x"), ir_find_tensor(&g, "w2")};
    const char *on[] = {"bad"};
    CHECK(ir_add_op(&g, "bad", IR_OP_MATMUL, 2, bad, on, 11, err, sizeof err) < 0 && strstr(err, "shape mismatch"),
          "inner dim mismatch: %s", err);
    CHECK(g.op[ir_find_op(&g, "mse")].fattr[IR_FA_SCALE] == 1.0 / 24, "mse scale is 1/numel");
    CHECK(pass_autograd(&g) == 0, "autograd");
    ir_graph_verify(&g);
    int dw1 = ir_find_tensor(&g, "d.w1"), db1 = ir_find_tensor(&g, "d.b1"), dx = ir_find_tensor(&g, "d.x");
    CHECK(dw1 >= 0 && g.t[dw1].grad_of == ir_find_tensor(&g, "w1") && g.t[dw1].batch_dim == -1,
          "d.w1 is w1's gradient, batch reduced");
    CHECK(db1 >= 0 && g.op[g.t[db1].producer].kind == IR_OP_BIAS_GRAD, "d.b1 from bias_grad");
    CHECK(dx < 0, "no gradient for data");
    int nopt = 0;
    for (int i = 0; i < g.nop; i++) nopt += g.op[i].phase == IR_PH_OPT;
    CHECK(nopt == 3, "one optimizer op per param (%d)", nopt);
    CHECK(g.op[ir_find_op(&g, "opt.b1")].fattr[IR_FA_WD] == 0, "no weight decay on 1-d params");
    ir_graph_free(&g);
}

static int count_comm(const ir_dist *d, ir_commkind k)
{
    int n = 0;
    for (int i = 0; i < d->ncomm; i++) n += d->comm[i].kind == k;
    return n;
}

/* The mlp of batch B in mbs micro-batches, planned (dp) for ndev devices
 * through the schedule, verified after split and comm. */
static int no_buckets;   /* plan_mlp: [plan] grad_buckets = false */

static void plan_mlp(ir_graph *g, ir_dist *d, int64_t B, int mbs, int ndev)
{
    mlp(g, B, mbs);
    g->req.devices = ndev;
    g->req.no_grad_buckets = no_buckets;
    pass_autograd(g);
    ir_dist_init(d, g, ndev);
    CHECK(pass_plan(d) == 0, "dp plan on %d devices", ndev);
    pass_split(d);
    ir_dist_verify(d);
    pass_comm(d);
    ir_dist_verify(d);
    pass_schedule(d);
}

static void test_dp(int ndev, int mbs)
{
    ir_graph g;
    ir_dist d;
    plan_mlp(&g, &d, 8, mbs, ndev);
    int nar = count_comm(&d, IR_COMM_ALLREDUCE);
    /* three param gradients and the loss are sums over the devices */
    CHECK(nar == (ndev > 1 ? 4 : 0), "%d devices: %d all-reduces derived (3 grads + loss)", ndev, nar);
    int ok = 1;
    for (int i = 0; i < d.ncomm; i++)
        if (d.comm[i].kind == IR_COMM_ALLREDUCE)
            ok &= d.grp[d.comm[i].group].n == ndev && d.comm[i].sec == IR_SEC_POST;
    CHECK(ok, "all-reduces over all %d devices, once per step after the micro-batches", ndev);
    /* forward matmul on device k takes rows [k*8/n, (k+1)*8/n) */
    int fc1 = ir_find_op(&g, "fc1"), rows = 1;
    for (int i = 0; i < d.nsop; i++)
        if (d.sop[i].op == fc1) {
            const ir_ptensor *p = &d.pt[d.sop[i].in[0]];
            rows &= p->box.lo[0] == d.sop[i].dev * 8 / ndev && p->box.hi[0] == (d.sop[i].dev + 1) * 8 / ndev &&
                    p->dev == d.sop[i].dev;
        }
    CHECK(rows, "fc1 sub-ops take their device's rows");
    /* memory plan: live buffers never overlap */
    for (int r = 0; r < ndev; r++) {
        pass_mem m;
        pass_memplan(&d, r, &m);
        int overlap = 0, nl = d.rank_pt0[r + 1] - d.rank_pt0[r];   /* the rank's pTensors (pt_local) */
        for (int i = 0; i < nl; i++)
            for (int j = i + 1; j < nl; j++) {
                if (m.off[i] < 0 || m.off[j] < 0 || m.off[i] == m.off[j]) continue;
                /* persistent buffers must never share */
                if (m.off[i] < m.persistent && m.off[j] < m.persistent)
                    overlap |= m.off[i] < m.off[j] + m.bytes[j] && m.off[j] < m.off[i] + m.bytes[i];
            }
        CHECK(!overlap && m.arena >= m.persistent, "rank %d: persistent buffers disjoint, arena %lld", r,
              (long long)m.arena);
        ir_prog p;
        ir_prog_init(&p, r, ndev);
        pass_lower(&d, &m, &p);
        ir_prog_verify(&p);
        int nmm = 0, nar2 = 0;
        const pg_instr *ar0 = NULL;
        for (int i = 0; i < p.nins[IR_SEC_MB]; i++) nmm += p.ins[IR_SEC_MB][i].kernel == RT_K_matmul;
        for (int i = 0; i < p.nins[IR_SEC_POST]; i++)
            if (p.ins[IR_SEC_POST][i].kernel == RT_K_allreduce && !nar2++) ar0 = &p.ins[IR_SEC_POST][i];
        CHECK(nmm == 5, "rank %d: 5 matmuls per micro-batch (2 fwd, 1 dx, 2 dw), got %d", r, nmm);
        CHECK(nar2 == (ndev > 1 ? 2 : 0), "rank %d: %d all-reduce calls after the micro-batches (a bucket of the 3 "
              "grads and the loss, the grad norm)", r, nar2);
        if (ndev > 1 && ar0) {
            /* the bucket: the loss and the 3 gradients, each buffer 64-byte aligned, one after another from
               the first's offset (bucket.c, memplan.c) */
            int64_t want = 0, n = 0, head = -1;
            for (int i = 0; i < d.ncomm; i++)
                if (d.comm[i].kind == IR_COMM_ALLREDUCE) {
                    CHECK(d.comm[i].bucket >= 0 && (head < 0 || d.comm[i].bucket == head),
                          "rank %d: %s in the bucket", r, g.t[d.comm[i].tensor].name);
                    head = d.comm[i].bucket;
                }
            for (int i = (int)head; i >= 0; i = d.comm[i].bnext, n++)   /* (in the bucket's order) */
                want = (want + 63) / 64 * 64 +
                       ir_box_numel(&d.pt[d.ints[d.comm[i].out]].box, g.t[d.comm[i].tensor].ndim) * 4;
            CHECK(n == 4 && ar0->ints[0].c * 4 == want, "rank %d: the bucket's all-reduce spans %lld bytes: the loss "
                  "and 3 gradients with their alignment (%lld)", r, (long long)ar0->ints[0].c * 4, (long long)want);
        }
        CHECK(p.loss_off >= 0, "rank %d reports the loss", r);
        CHECK(strstr(p.manifest.s, "param 0 w1 f32 2 4 6 box 0 4 0 6 init") != NULL, "manifest lists w1's box");
        ir_prog_free(&p);
        pass_mem_free(&m);
    }
    ir_dist_free(&d);
    ir_graph_free(&g);
}

static void test_batch_divides(void)
{
    ir_graph g;
    mlp(&g, 6, 1);
    g.req.devices = 4;
    pass_autograd(&g);
    ir_dist d;
    ir_dist_init(&d, &g, 4);
    fflush(stdout);
    CHECK(pass_plan(&d) == 2, "batch 6 on 4 devices is bad input (exit 2)");
    ir_dist_free(&d);
    ir_graph_free(&g);
}

/* ---- pass_fuse */

/* Append bias_add X@x bias@bias Y@y (M x N) to section MB. */
static void fz_bias_add(ir_prog *p, int64_t x, int64_t bias, int64_t y, int64_t M, int64_t N) {
    pg_instr *in = ir_prog_add(p, IR_SEC_MB, RT_K_bias_add, "bias");
    pg_buf(in, x), pg_buf(in, bias), pg_buf(in, y), pg_i(in, M), pg_i(in, N);
}

/* Append gelu X@x Y@y (n) to section MB. */
static void fz_gelu(ir_prog *p, int64_t x, int64_t y, int64_t n) {
    pg_instr *in = ir_prog_add(p, IR_SEC_MB, RT_K_gelu, "gelu");
    pg_buf(in, x), pg_buf(in, y), pg_i(in, n);
}

/* Append add A B Y (n, acc = c + m * micro-batch) to section MB. */
static void fz_add(ir_prog *p, int64_t a, int64_t b, int64_t y, int64_t n, int64_t c, int64_t m) {
    pg_instr *in = ir_prog_add(p, IR_SEC_MB, RT_K_add, "add");
    pg_buf(in, a), pg_buf(in, b), pg_buf(in, y), pg_i(in, n), pg_iv(in, c, 0, m);
}

/* Append zero @x (n) to section MB. */
static void fz_zero(ir_prog *p, int64_t x, int64_t n) {
    pg_instr *in = ir_prog_add(p, IR_SEC_MB, RT_K_zero, "zero");
    pg_buf(in, x), pg_i(in, n);
}

/* Append softmax X@x Y@y (1 row of n) to section MB: a reader of X. */
static void fz_read(ir_prog *p, int64_t x, int64_t y, int64_t n) {
    pg_instr *in = ir_prog_add(p, IR_SEC_MB, RT_K_softmax, "read");
    pg_buf(in, x), pg_buf(in, y), pg_i(in, 1), pg_i(in, n);
}

/* The ew op (0-based) k's dst operand of instruction in. */
static int64_t fz_dst(const pg_instr *in, int k) { return in->ints[4 + 4 * k + 1].c; }

static void test_fuse(void) {
    /* arena layout (bytes): X 0, bias 4096, Y 8192, Z 12288, W 16384, 64 floats each
       (M 4 x N 16) */
    enum { X = 0, BIAS = 4096, Y = 8192, Z = 12288, W = 16384, N = 64 };
    ir_prog p[2];
    for (int c = 0; c < 13; c++) {
        ir_prog_init(&p[0], 0, 1);
        p[0].arena = 1 << 16;
        switch (c) {
        case 0:  /* Y = X + bias; Z = gelu(Y); Y and Z read later: stored */
            fz_bias_add(&p[0], X, BIAS, Y, 4, 16), fz_gelu(&p[0], Y, Z, N), fz_read(&p[0], Y, W, N),
                fz_read(&p[0], Z, W, N);
            break;
        case 1:  /* ... Y overwritten whole before any read: kept in a register */
            fz_bias_add(&p[0], X, BIAS, Y, 4, 16), fz_gelu(&p[0], Y, Z, N), fz_zero(&p[0], Y, N),
                fz_read(&p[0], Y, W, N), fz_read(&p[0], Z, W, N);
            break;
        case 2:  /* ... Y read by the next micro-batch before it is written again: stored */
            fz_read(&p[0], Y, W, N), fz_bias_add(&p[0], X, BIAS, Y, 4, 16), fz_gelu(&p[0], Y, Z, N);
            break;
        case 10:  /* Z read by nobody: a register; Z inside a persistent buffer: stored */
        case 11:
            fz_bias_add(&p[0], X, BIAS, Y, 4, 16), fz_gelu(&p[0], Y, Z, N);
            if (c == 11) {
                pg_region *g = IR_PUSH(p[0].reg, p[0].nreg, p[0].regcap);
                *g = (pg_region){"Z", Z, 4 * N, 1};
            }
            break;
        case 12:  /* Y read after the step, by the post section: stored */
            fz_bias_add(&p[0], X, BIAS, Y, 4, 16), fz_gelu(&p[0], Y, Z, N);
            {
                pg_instr *in = ir_prog_add(&p[0], IR_SEC_POST, RT_K_softmax, "post read");
                pg_buf(in, Y), pg_buf(in, W), pg_i(in, 1), pg_i(in, N);
            }
            break;
        case 3:  /* gelu writes into the bias row: not fused */
            fz_bias_add(&p[0], X, BIAS, Y, 4, 16), fz_gelu(&p[0], Y, BIAS - 8, N);
            break;
        case 4:  /* acc depends on the micro-batch: not fused */
            fz_gelu(&p[0], X, Y, N), fz_add(&p[0], Y, Z, W, N, 0, 1);
            break;
        case 5:  /* different sizes: not fused */
            fz_gelu(&p[0], X, Y, N), fz_add(&p[0], Y, Z, W, N / 2, 0, 0);
            break;
        case 6:  /* independent elementwise kernels: not fused */
            fz_gelu(&p[0], X, Y, N), fz_add(&p[0], Z, Z, W, N, 0, 0);
            break;
        case 8:  /* Y's first half overwritten, then its second half read: stored */
            fz_bias_add(&p[0], X, BIAS, Y, 4, 16), fz_gelu(&p[0], Y, Z, N), fz_zero(&p[0], Y, N / 2),
                fz_read(&p[0], Y + 2 * N, W, N / 2);
            break;
        case 9:  /* first half overwritten, then only that half read, then the rest overwritten */
            fz_bias_add(&p[0], X, BIAS, Y, 4, 16), fz_gelu(&p[0], Y, Z, N), fz_zero(&p[0], Y, N / 2),
                fz_read(&p[0], Y, W, N / 2), fz_zero(&p[0], Y + 2 * N, N / 2);
            break;
        case 7:  /* Y += X + Z then gelu(Y): the accumulated value is read from memory */
            fz_add(&p[0], X, Z, Y, N, 1, 0), fz_gelu(&p[0], Y, W, N), fz_zero(&p[0], Y, N);
            break;
        }
        int before = p[0].nins[IR_SEC_MB];
        int ids = pass_fuse(p, 1);
        ir_prog_verify(&p[0]);
        const pg_instr *e = &p[0].ins[IR_SEC_MB][c == 2];
        int fused = e->kernel == RT_K_ew;
        if (c == 0) CHECK(fused && ids == 1 && p[0].nins[IR_SEC_MB] == before - 1 &&
                              fz_dst(e, 0) >= RT_EW_MEM && e->nbuf == 4,
                          "fuse: bias_add+gelu become one ew; Y, read later, is stored");
        if (c == 1) CHECK(fused && fz_dst(e, 0) < RT_EW_MEM && e->nbuf == 3,
                          "fuse: Y overwritten before any read stays in a register");
        if (c == 2) CHECK(fused && e == &p[0].ins[IR_SEC_MB][1] && fz_dst(e, 0) >= RT_EW_MEM,
                          "fuse: a value the next micro-batch reads is stored");
        if (c >= 3 && c <= 6) {
            static const char *const why[] = {"a write into the bias row", "a loop-dependent acc",
                                              "different sizes", "no value passed along"};
            CHECK(!fused && ids == 0 && p[0].nins[IR_SEC_MB] == before, "fuse: %s is not fused",
                  why[c - 3]);
        }
        if (c == 7) CHECK(fused && fz_dst(e, 0) >= RT_EW_ACC && e->ints[4 + 4 + 2].c >= RT_EW_MEM &&
                              e->ints[4 + 4 + 2].c < RT_EW_ROW,
                          "fuse: an accumulated value is added in memory and read from there");
        if (c == 8) CHECK(fused && fz_dst(e, 0) >= RT_EW_MEM,
                          "fuse: a part not overwritten and read later keeps Y stored");
        if (c == 9) CHECK(fused && fz_dst(e, 0) < RT_EW_MEM,
                          "fuse: overwritten in two parts, read only where new: a register");
        if (c == 10) CHECK(fused && fz_dst(e, 1) < RT_EW_MEM, "fuse: a result nobody reads stays in a register");
        if (c == 11) CHECK(fused && fz_dst(e, 1) >= RT_EW_MEM, "fuse: a result in a persistent buffer is stored");
        if (c == 12) CHECK(fused && fz_dst(e, 0) >= RT_EW_MEM, "fuse: a result the post section reads is stored");
        ir_prog_free(&p[0]);
    }
    /* sums in place: Y (+)= A + B with A from a matmul and B from an
       embedding_bwd, both dying at the add: the producers write Y */
    for (int c = 0; c < 2; c++) {
        enum { TOK = 20480, DY = 24576, A = 28672, B = 32768, YS = 36864 };
        ir_prog_init(&p[0], 0, 1);
        p[0].arena = 1 << 16;
        pg_instr *in = ir_prog_add(&p[0], IR_SEC_MB, RT_K_matmul, "mm");
        pg_buf(in, X), pg_buf(in, W), pg_buf(in, A);
        pg_i(in, 8), pg_i(in, 8), pg_i(in, 8), pg_i(in, 0), pg_i(in, 0), pg_i(in, 0);
        if (c == 1) fz_read(&p[0], A, Z, 64);   /* A read before the add: no rewrite */
        in = ir_prog_add(&p[0], IR_SEC_MB, RT_K_embedding_bwd, "emb");
        pg_buf(in, TOK), pg_buf(in, DY), pg_buf(in, B);
        pg_i(in, 4), pg_i(in, 0), pg_i(in, 8), pg_i(in, 8), pg_i(in, 0);
        fz_add(&p[0], A, B, YS, 64, 0, 1);
        pass_fuse(p, 1);
        ir_prog_verify(&p[0]);
        const pg_instr *mm = &p[0].ins[IR_SEC_MB][0], *eb = &p[0].ins[IR_SEC_MB][c + 1];
        if (c == 0)
            CHECK(p[0].nins[IR_SEC_MB] == 2 && mm->buf[2] == YS && mm->ints[5].m == 1 &&
                      mm->ints[5].c == 0 && eb->buf[2] == YS && eb->ints[4].c == 1,
                  "fuse: Y (+)= A + B becomes matmul into Y with the add's acc, embedding_bwd adding");
        else
            CHECK(p[0].nins[IR_SEC_MB] == 4 && mm->buf[2] == A,
                  "fuse: a temporary read by another instruction keeps its add");
        ir_prog_free(&p[0]);
    }
    /* ids: the same chain on two ranks shares one; a different chain gets the next */
    for (int r = 0; r < 2; r++) {
        ir_prog_init(&p[r], r, 2);
        p[r].arena = 1 << 16;
        fz_bias_add(&p[r], X, BIAS, Y, 4, 16), fz_gelu(&p[r], Y, Z, N);
        fz_read(&p[r], Z, W, N);
        if (r == 1) fz_gelu(&p[r], X, W + 4096, N), fz_add(&p[r], W + 4096, Z, W, N, 1, 0);
    }
    int ids = pass_fuse(p, 2);
    CHECK(ids == 2 && p[0].ins[IR_SEC_MB][0].ints[0].c == 0 && p[1].ins[IR_SEC_MB][0].ints[0].c == 0 &&
              p[1].ins[IR_SEC_MB][2].kernel == RT_K_ew && p[1].ins[IR_SEC_MB][2].ints[0].c == 1,
          "fuse: equal chains share an id across ranks, another chain gets the next id");
    ir_prog_free(&p[0]);
    ir_prog_free(&p[1]);
}


/* Issue 9: a partial sum read both before and after the all-reduce that
 * sums it (the vocabulary-parallel embedding's output, read by the residual
 * add as a partial and by the layernorm summed).  The memory plan must not
 * reduce it in place, and pass_memcheck must catch a plan that does. */
static void test_inplace_readers(const char *tests)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/equiv/resid-embed.ini", tests);
    const char *sets[] = {"plan.policy=tp"};
    ir_graph g;
    ir_graph_init(&g);
    CHECK(fe_load(path, sets, 1, &g) == 0, "load %s", path);
    g.req.devices = 2;
    pass_autograd(&g);
    ir_dist d;
    ir_dist_init(&d, &g, 2);
    CHECK(pass_plan(&d) == 0, "tp plan on 2 devices");
    pass_split(&d);
    pass_comm(&d);
    pass_schedule(&d);
    /* the all-reduce of x0 and, on rank 0, its input and output */
    int x0 = ir_find_tensor(&g, "x0"), ci = -1;
    for (int i = 0; i < d.ncomm; i++)
        if (d.comm[i].kind == IR_COMM_ALLREDUCE && d.comm[i].tensor == x0) ci = i;
    CHECK(ci >= 0, "x0's partial sum is all-reduced");
    if (ci < 0) return;
    int pin = d.ints[d.comm[ci].in], pout = d.ints[d.comm[ci].out];
    pass_mem m;
    pass_memplan(&d, 0, &m);
    char msg[600] = "";
    int lin = d.pt_local[pin], lout = d.pt_local[pout];
    CHECK(m.off[lin] != m.off[lout], "the partial still read by the add is not reduced in place");
    CHECK(pass_memcheck(&d, &m, msg, sizeof msg) == 0, "the plan passes the check (%s)", msg);
    /* the old plan: the all-reduce in place over the partial */
    m.off[lout] = m.off[lin];
    CHECK(pass_memcheck(&d, &m, msg, sizeof msg) == 1 && strstr(msg, "res reads") && strstr(msg, "allreduce"),
          "an in-place all-reduce under a later reader is caught: %s", msg);
    pass_mem_free(&m);
    ir_dist_free(&d);
    ir_graph_free(&g);
}

/* Data parallelism wider than any fixed member limit: 128 replicas sum
 * their gradients and the loss in all-reduces over all 128 (the rules once
 * stopped at 64 members and fell back to a send/recv per cell). */
static void test_dp_wide(int ndev)
{
    ir_graph g;
    ir_dist d;
    plan_mlp(&g, &d, 2 * ndev, 1, ndev);
    int nar = count_comm(&d, IR_COMM_ALLREDUCE), nsr = count_comm(&d, IR_COMM_SENDRECV), wide = 1;
    for (int i = 0; i < d.ncomm; i++)
        if (d.comm[i].kind == IR_COMM_ALLREDUCE) wide &= d.grp[d.comm[i].group].n == ndev;
    CHECK(nar == 4 && nsr == 0 && wide, "%d devices: %d all-reduces over all of them (3 grads + loss), %d send/recv",
          ndev, nar, nsr);
    for (int r = 0; r < ndev; r += ndev - 1) {
        pass_mem m;
        pass_memplan(&d, r, &m);
        char why[600] = "";
        CHECK(pass_memcheck(&d, &m, why, sizeof why) == 0, "rank %d: memory plan checks (%s)", r, why);
        ir_prog p;
        ir_prog_init(&p, r, ndev);
        pass_lower(&d, &m, &p);
        ir_prog_verify(&p);
        int n = 0;
        for (int i = 0; i < p.nins[IR_SEC_POST]; i++) n += p.ins[IR_SEC_POST][i].kernel == RT_K_allreduce;
        CHECK(n == (no_buckets ? 5 : 2), "rank %d: %d all-reduce calls (%s, grad norm), got %d", r, no_buckets ? 5 : 2,
              no_buckets ? "3 grads, loss: grad_buckets = false" : "one bucket of 3 grads and the loss", n);
        ir_prog_free(&p);
        pass_mem_free(&m);
    }
    ir_dist_free(&d);
    ir_graph_free(&g);
}

/* Pipelines: the mlp's 5 forward ops cut into pp stages, each a device;
 * the schedule's stash slots, the transfers the comm pass derives, every
 * rank's Program unrolled from its tasks, and the cost model's bubble. */
static void test_pipeline(int pp, int m, int sched)
{
    const char *sn = sched == IR_SCHED_GPIPE ? "gpipe" : sched == IR_SCHED_ZBH1 ? "zb-h1" : "1f1b";
    ir_graph g;
    ir_dist d;
    mlp(&g, 4 * m, m);
    g.req.devices = pp;
    g.req.pp = pp;
    g.req.schedule = sched;
    pass_autograd(&g);
    ir_dist_init(&d, &g, pp);
    CHECK(pass_plan(&d) == 0 && d.mesh_pp == pp, "%s pp %d m %d: planned", sn, pp, m);
    int mono = 1, prev = 0;
    for (int i = 0; i < g.nop; i++)
        if (g.op[i].phase == IR_PH_FWD) mono &= d.op_stage[i] >= prev, prev = d.op_stage[i];
    CHECK(mono && d.op_stage[ir_find_op(&g, "fc1")] == 0 && d.op_stage[ir_find_op(&g, "mse")] == pp - 1,
          "%s pp %d: stages ascend from fc1 on 0 to the loss on %d", sn, pp, pp - 1);
    pass_split(&d);
    pass_comm(&d);
    pass_schedule(&d);
    CHECK(pass_pipeline(&d) == 0 && d.pipe, "%s pp %d m %d: schedule checks", sn, pp, m);
    int slots_ok = 1;
    for (int s = 0; s < pp; s++) {
        int want = sched == IR_SCHED_GPIPE ? m : sched == IR_SCHED_ZBH1 ? (pp < m ? pp : m) : (pp - s < m ? pp - s : m);
        /* zb-h1 orders by the stages' costs: at most its bound */
        slots_ok &= sched == IR_SCHED_ZBH1 ? d.pipe->nslot[s] >= 1 && d.pipe->nslot[s] <= want : d.pipe->nslot[s] == want;
    }
    CHECK(slots_ok, "%s pp %d m %d: stage s keeps %s micro-batches in flight", sn, pp, m,
          sched == IR_SCHED_GPIPE ? "m" : sched == IR_SCHED_ZBH1 ? "at most min(pp, m)" : "min(pp - s, m)");
    /* every stage boundary: a send/recv of the activation from stage s to s + 1, and a gradient sent back
       across it (from a later stage: bias_add's identity gradient skips a stage) */
    int fwd_ok = 1, bwd_ok = 1;
    for (int s = 0; s + 1 < pp; s++) {
        int fw = 0, bw = 0;
        for (int i = 0; i < d.ncomm; i++) {
            const ir_comm *c = &d.comm[i];
            if (c->kind != IR_COMM_SENDRECV && c->kind != IR_COMM_BROADCAST) continue;
            const int *mem = d.ints + d.grp[c->group].devs;
            int to_s = 0, to_s1 = 0;   /* a receiver on stage s or before, on s + 1 */
            for (int k = 0; k < c->n; k++) to_s |= k != c->root && mem[k] <= s, to_s1 |= k != c->root && mem[k] == s + 1;
            fw |= mem[c->root] == s && to_s1 && g.t[c->tensor].kind == IR_T_ACT;
            bw |= mem[c->root] > s && to_s && g.t[c->tensor].kind == IR_T_GRAD;
        }
        fwd_ok &= fw, bwd_ok &= bw;
    }
    CHECK(fwd_ok && bwd_ok, "%s pp %d: every boundary sends an activation forward and a gradient back", sn, pp);
    for (int r = 0; r < pp; r++) {
        pass_mem mm;
        pass_memplan(&d, r, &mm);
        CHECK(mm.nslot == d.pipe->nslot[r] && mm.stash_bytes > 0, "rank %d: %d stash slots of %lld bytes", r, mm.nslot,
              (long long)mm.stash_bytes);
        ir_prog p;
        ir_prog_init(&p, r, pp);
        pass_lower(&d, &mm, &p);
        ir_prog_verify(&p);
        int nomb = 1;   /* outside the steady-state loop, the micro-batch is folded into the constants */
        for (int i = 0; i < p.nins[IR_SEC_MB]; i++)
            for (int a = 0; a < p.ins[IR_SEC_MB][i].nint; a++)
                nomb &= p.ins[IR_SEC_MB][i].ints[a].m == 0 || (p.loop_iters && i >= p.loop_lo && i < p.loop_hi);
        CHECK(p.pipelined && nomb, "rank %d: mb section unrolled, micro-batch folded into the constants (%lld "
              "iterations of a steady-state loop)", r, (long long)p.loop_iters);
        /* 1f1b's steady state, stage s: F and B alternate over min(pp - s, m) slots; with m - (pp - s - 1)
           pairs of them (the first, with micro-batch 0, and the last outside), 3 iterations of 2 (pp - s)
           tasks or more are a loop */
        if (sched == IR_SCHED_1F1B && m - (pp - r - 1) - 2 >= 3 * (pp - r))
            CHECK(p.loop_iters >= 3, "1f1b pp %d m %d rank %d: the steady state is a loop (%lld iterations)", pp, m,
                  r, (long long)p.loop_iters);
        ir_prog_free(&p);
        pass_mem_free(&mm);
    }
    double cost[24], bubble;
    for (int s = 0; s < pp; s++) cost[3 * s] = 1, cost[3 * s + 1] = 2, cost[3 * s + 2] = 1;
    double span = pass_pipe_simulate(d.pipe, cost, NULL, &bubble);
    CHECK(span > 0 && bubble >= 0 && bubble < 1, "%s pp %d m %d: the cost model runs the step (%.1f)", sn, pp, m, span);
    ir_dist_free(&d);
    ir_graph_free(&g);
}

/* The schedules on a chain of equal stages against the formulas: gpipe
 * and 1f1b (F 1, B 2) leave (p - 1) / (m + p - 1) of the step idle, zb-h1
 * (F = B = W = 1) (p - 1) / (3 m + p - 1), with 1f1b's in-flight bound. */
static void test_bubble(int pp, int m, int sched)
{
    const char *sn = sched == IR_SCHED_GPIPE ? "gpipe" : sched == IR_SCHED_ZBH1 ? "zb-h1" : "1f1b";
    ir_pipe p;
    memset(&p, 0, sizeof p);
    p.pp = pp, p.m = m, p.sched = sched, p.split_w = sched == IR_SCHED_ZBH1;
    int nt = (p.split_w ? 3 : 2) * m;
    p.task0 = malloc(sizeof(int) * (size_t)(pp + 1));
    for (int s = 0; s <= pp; s++) p.task0[s] = nt * s;
    p.task = calloc((size_t)(nt * pp), sizeof(ir_task));
    p.dep = calloc((size_t)(2 * pp), sizeof(ir_pdep));
    for (int s = 0; s + 1 < pp; s++) {
        p.dep[p.ndep++] = (ir_pdep){s + 1, IR_TASK_F, s, IR_TASK_F, 0, 0};
        p.dep[p.ndep++] = (ir_pdep){s, IR_TASK_B, s + 1, IR_TASK_B, 0, 0};
    }
    CHECK(pass_pipe_schedule(&p, NULL) == 0, "%s pp %d m %d: built", sn, pp, m);
    double cost[3 * 16], bubble;
    for (int s = 0; s < pp; s++) cost[3 * s] = 1, cost[3 * s + 1] = p.split_w ? 1 : 2, cost[3 * s + 2] = 1;
    double span = pass_pipe_simulate(&p, cost, NULL, &bubble);
    double want = (double)(pp - 1) / (m + pp - 1), wspan = 3.0 * (m + pp - 1);
    if (sched == IR_SCHED_ZBH1) want = (double)(pp - 1) / (3 * m + pp - 1), wspan = 3.0 * m + pp - 1;
    CHECK(span == wspan && bubble > want - 1e-12 && bubble < want + 1e-12,
          "%s pp %d m %d: step %.1f (formula %.1f), bubble %.4f (formula %.4f)", sn, pp, m, span, wspan, bubble, want);
    /* in flight: 1f1b at most min(pp - s, m) on stage s; zb-h1 as many before their B, and at most pp before
       their W (1f1b's first stage); gpipe m */
    int ok = 1;
    for (int s = 0; s < pp; s++) {
        int fb = 0, fw = 0, tfb = 0, tfw = 0, lim = pp - s < m ? pp - s : m;
        for (int k = p.task0[s]; k < p.task0[s + 1]; k++) {
            int kd = p.task[k].kind;
            fb += kd == IR_TASK_F ? 1 : kd == IR_TASK_B ? -1 : 0;
            fw += kd == IR_TASK_F ? 1 : kd == (p.split_w ? IR_TASK_W : IR_TASK_B) ? -1 : 0;
            if (fb > tfb) tfb = fb;
            if (fw > tfw) tfw = fw;
        }
        if (sched == IR_SCHED_GPIPE) ok &= tfw == m;
        else ok &= tfb <= lim && tfw <= (sched == IR_SCHED_ZBH1 ? (pp < m ? pp : m) : lim);
    }
    CHECK(ok, "%s pp %d m %d: micro-batches in flight within the schedule's bound", sn, pp, m);
    free(p.task0);
    free(p.task);
    free(p.dep);
}

/* Interleaved 1F1B (v chunks, Megatron's order) and kFkB on a chain of
 * equal virtual stages (each chunk F 1, B 2; virtual stage j on stage
 * j % pp): interleaving leaves (p - 1) / (v m + p - 1) of the step idle;
 * kFkB the same (p - 1) / (m + p - 1) as 1f1b (the micro-batches of a group
 * still pipeline), with up to k (p - s) micro-batches in flight; every task
 * once, each kind and chunk in micro-batch order. */
static void test_bubble_v(int pp, int m, int v, int k)
{
    ir_pipe p;
    memset(&p, 0, sizeof p);
    p.pp = pp, p.m = m, p.v = v, p.k = k, p.sched = v > 1 ? IR_SCHED_INTERLEAVED : IR_SCHED_KFKB;
    const char *sn = v > 1 ? "interleaved" : "kfkb";
    int nt = 2 * m * v;
    p.task0 = malloc(sizeof(int) * (size_t)(pp + 1));
    for (int s = 0; s <= pp; s++) p.task0[s] = nt * s;
    p.task = calloc((size_t)(nt * pp), sizeof(ir_task));
    p.dep = calloc((size_t)(2 * pp * v), sizeof(ir_pdep));
    for (int j = 0; j + 1 < pp * v; j++) {   /* virtual stage j -> j + 1 and back */
        int s = j % pp, c = j / pp, s1 = (j + 1) % pp, c1 = (j + 1) / pp;
        p.dep[p.ndep++] = (ir_pdep){s1, IR_TASK_F, s, IR_TASK_F, c1, c};
        p.dep[p.ndep++] = (ir_pdep){s, IR_TASK_B, s1, IR_TASK_B, c, c1};
    }
    CHECK(pass_pipe_schedule(&p, NULL) == 0, "%s pp %d m %d v %d k %d: built", sn, pp, m, v, k);
    int ok = 1;
    for (int s = 0; s < pp; s++) {
        int seen[2][8][64];
        memset(seen, 0, sizeof seen);
        int next[2][8];
        memset(next, 0, sizeof next);
        for (int q = p.task0[s]; q < p.task0[s + 1]; q++) {
            const ir_task *t = &p.task[q];
            ok &= t->mb == next[t->kind][t->chunk]++ && !seen[t->kind][t->chunk][t->mb]++;
            /* kFkB: at most k (pp - s) micro-batches between their F and B */
            int fl = next[IR_TASK_F][0] - next[IR_TASK_B][0];
            if (v == 1) ok &= fl <= k * (pp - s);
        }
    }
    CHECK(ok, "%s pp %d m %d v %d k %d: every task once, each kind and chunk in micro-batch order", sn, pp, m, v, k);
    double cost[3 * 8 * 8], bubble;
    for (int i = 0; i < 3 * pp * v; i++) cost[i] = i % 3 == IR_TASK_F ? 1 : i % 3 == IR_TASK_B ? 2 : 0;
    double span = pass_pipe_simulate(&p, cost, NULL, &bubble);
    double want = (double)(pp - 1) / (v * m + pp - 1), wspan = 3.0 * (v * m + pp - 1);
    CHECK(span == wspan && bubble > want - 1e-12 && bubble < want + 1e-12,
          "%s pp %d m %d v %d k %d: step %.1f (formula %.1f), bubble %.4f (formula %.4f)", sn, pp, m, v, k, span, wspan,
          bubble, want);
    free(p.task0);
    free(p.task);
    free(p.dep);
}

/* interlaced (nnScaler): the layers' 1f1b on a chain of stages, and the
 * tasks of the ops on every stage (chunk 1 before the layers, chunk 2
 * after), which meet on every stage: each stage runs the same sequence of
 * shared tasks, its own tasks in 1f1b order, E(i) before the first stage's
 * F(i), the head's tasks between the last stage's F(i) and B(i), e(i)
 * after the first stage's B(i); the cost model runs the step with the
 * meetings. */
static void test_interlaced(int pp, int m)
{
    ir_pipe p;
    memset(&p, 0, sizeof p);
    p.pp = pp, p.m = m, p.v = 1, p.nch = 3, p.k = 1, p.sched = IR_SCHED_INTERLACED;
    int nt = 2 * m * 3;
    p.task0 = malloc(sizeof(int) * (size_t)(pp + 1));
    for (int s = 0; s <= pp; s++) p.task0[s] = nt * s;
    p.task = calloc((size_t)(nt * pp), sizeof(ir_task));
    p.dep = calloc((size_t)(8 * pp * pp + 8), sizeof(ir_pdep));
    for (int s = 0; s + 1 < pp; s++) {
        p.dep[p.ndep++] = (ir_pdep){s + 1, IR_TASK_F, s, IR_TASK_F, 0, 0};
        p.dep[p.ndep++] = (ir_pdep){s, IR_TASK_B, s + 1, IR_TASK_B, 0, 0};
    }
    for (int a = 0; a < pp; a++)
        for (int b = 0; b < pp; b++) {
            if (a == b) continue;
            p.dep[p.ndep++] = (ir_pdep){a, IR_TASK_F, b, IR_TASK_F, 1, 1};   /* the embedding's all-reduce */
            p.dep[p.ndep++] = (ir_pdep){a, IR_TASK_B, b, IR_TASK_B, 2, 2};   /* the head's input gradient's */
        }
    for (int s = 0; s + 1 < pp; s++) {
        p.dep[p.ndep++] = (ir_pdep){s, IR_TASK_F, pp - 1, IR_TASK_F, 2, 0};   /* the last layer's output */
        p.dep[p.ndep++] = (ir_pdep){s + 1, IR_TASK_B, 0, IR_TASK_B, 1, 0};    /* the first layer's input gradient */
    }
    CHECK(pass_pipe_schedule(&p, NULL) == 0, "interlaced pp %d m %d: built", pp, m);
    int same = 1, order = 1, f1b = 1, inflight = 0;
    for (int s = 0; s < pp; s++) {
        const ir_task *t = p.task + p.task0[s], *t0 = p.task;
        int a = 0, next[3][3] = {{0}}, done[64] = {0}, open = 0;
        ir_task own[64];
        int nown = 0;
        for (int k = 0; k < nt; k++) {
            order &= t[k].mb == next[t[k].kind][t[k].chunk]++;
            if (t[k].chunk) {   /* the k-th shared task: the same as stage 0's */
                while (t0[a].chunk == 0) a++;
                same &= t0[a].kind == t[k].kind && t0[a].chunk == t[k].chunk && t0[a].mb == t[k].mb;
                a++;
            } else own[nown++] = t[k];
            if (done[t[k].mb]++ == 0) open++;
            if (open > inflight) inflight = open;
            if (done[t[k].mb] == 6) open--;
        }
        /* the stage's own tasks: 1f1b's order */
        ir_task ref[64];
        int w = pp - s - 1 < m ? pp - s - 1 : m, n = 0;
        for (int i = 0; i < w; i++) ref[n++] = (ir_task){IR_TASK_F, i, 0, 0};
        for (int i = 0; i < m - w; i++) ref[n++] = (ir_task){IR_TASK_F, w + i, 0, 0}, ref[n++] = (ir_task){IR_TASK_B, i, 0, 0};
        for (int i = m - w; i < m; i++) ref[n++] = (ir_task){IR_TASK_B, i, 0, 0};
        for (int k = 0; k < 2 * m; k++) f1b &= own[k].kind == ref[k].kind && own[k].mb == ref[k].mb;
    }
    CHECK(same && order && f1b, "interlaced pp %d m %d: every stage the same shared tasks, each kind and chunk in "
          "micro-batch order, its own tasks in 1f1b order", pp, m);
    /* E(i) before stage 0's F(i); H(i) after the last stage's F(i) and before its B(i); e(i) after stage 0's B(i) */
    int rel = 1;
    for (int i = 0; i < m; i++) {
        int at[3][3][2];
        memset(at, -1, sizeof at);
        for (int s = 0; s < pp; s += pp - 1 ? pp - 1 : 1) {
            for (int k = 0; k < nt; k++) {
                const ir_task *t = &p.task[p.task0[s] + k];
                if (t->mb == i) at[t->kind][t->chunk][s ? 1 : 0] = k;
            }
            if (pp == 1) break;
        }
        rel &= at[IR_TASK_F][1][0] < at[IR_TASK_F][0][0] && at[IR_TASK_F][2][1] > at[IR_TASK_F][0][1] &&
               at[IR_TASK_B][2][1] < at[IR_TASK_B][0][1] && at[IR_TASK_B][1][0] > at[IR_TASK_B][0][0];
    }
    CHECK(rel, "interlaced pp %d m %d: E before the first layers, the head between the last layers' F and B, e after "
          "the first layers' B", pp, m);
    double cost[3 * 16 * 3], bubble;
    for (int i = 0; i < 3 * pp * 3; i++) cost[i] = i % 3 == IR_TASK_F ? 1 : 2;
    double span = pass_pipe_simulate(&p, cost, NULL, &bubble);
    CHECK(span > 0 && inflight <= (pp < m ? pp : m) + 1, "interlaced pp %d m %d: the cost model runs the step (%.0f, "
          "bubble %.3f), at most %d micro-batches in flight on a stage", pp, m, span, bubble, inflight);
    free(p.task0);
    free(p.task);
    free(p.dep);
}

/* The cost model's collectives against their closed forms (alpha-beta:
 * ring all-reduce 2(n-1) alpha + 2(n-1)/n S / beta, all-gather and
 * reduce-scatter (n-1) alpha + (n-1)/n S / beta, a send alpha + S / beta),
 * within a node and across nodes, and the built-in profiles' names. */
/* Balanced stages (balance.c): against every cut, for small random cases. */
static double bal_span(const double *cost, double pre, double post, int pp, int parts, const int *cut)
{
    double worst = 0;
    for (int s = 0; s < pp; s++) {
        double t = (s == 0 ? pre : 0) + (s == pp - 1 ? post : 0);
        for (int j = s; j < parts; j += pp)
            for (int l = cut[j]; l < cut[j + 1]; l++) t += cost[l];
        if (t > worst) worst = t;
    }
    return worst;
}

/* the smallest makespan over every cut (cut[1..parts-1] chosen in order) */
static double bal_brute(const double *cost, double pre, double post, int nl, int pp, int parts, int *cut, int j)
{
    if (j == parts) return bal_span(cost, pre, post, pp, parts, cut);
    double best = 1e300;
    for (int x = cut[j - 1] + 1; x <= nl - (parts - j); x++) {
        cut[j] = x;
        double v = bal_brute(cost, pre, post, nl, pp, parts, cut, j + 1);
        if (v < best) best = v;
    }
    return best;
}

static void test_balance(void)
{
    /* four equal layers, the head twice a layer on the last of 2 stages: 3 + 1 beats 2 + 2 */
    double c4[4] = {1, 1, 1, 1};
    int cut[9];
    double best, even;
    CHECK(pass_balance_cuts(4, c4, 0, 2, 2, 2, 2.0, 0, cut, &best, &even) == 0 && cut[0] == 0 && cut[1] == 3 &&
              cut[2] == 4 && fabs(best - 3e3) < 0.03 && fabs(even - 4e3) < 0.03,
          "balance: layers 3 + 1 with a head of 2 (cut %d %d %d, %.6g vs even %.6g)", cut[0], cut[1], cut[2], best, even);
    /* equal layers, nothing outside: the even cut is optimal, reported as no better cut */
    CHECK(pass_balance_cuts(4, c4, 0, 0, 2, 2, 2.0, 0, cut, &best, &even) == 1 && cut[1] == 2 && best == even,
          "balance: equal layers keep the even cut");
    /* random cases against every cut, plain and interleaved (2 chunks) */
    unsigned seed = 12345;
    int bad = 0, cases = 0;
    for (int k = 0; k < 60; k++) {
        double cost[10], pre, post;
        int nl = 4 + k % 6, pp = 1 + k % 3, v = 1 + (k / 3) % 2, parts = pp * v;
        if (parts > nl) continue;
        for (int l = 0; l < nl; l++) seed = seed * 1103515245u + 12345u, cost[l] = 1 + (seed >> 16) % 100;
        seed = seed * 1103515245u + 12345u, pre = (seed >> 16) % 50;
        seed = seed * 1103515245u + 12345u, post = (seed >> 16) % 300;
        int bc[12] = {0};
        bc[parts] = nl;
        double want = bal_brute(cost, pre, post, nl, pp, parts, bc, 1);
        pass_balance_cuts(nl, cost, pre, post, pp, parts, 5.0, 0, cut, &best, &even);
        double got = bal_span(cost, pre, post, pp, parts, cut), tot = pre + post;
        for (int l = 0; l < nl; l++) tot += cost[l];
        cases++;
        if (fabs(got - want) > 1e-5 * tot || fabs(best * 1e-3 - got) > 1e-5 * tot) {
            bad++;
            printf("      case %d: nl %d pp %d parts %d: got %.6g (reported %.6g), brute force %.6g\n", k, nl, pp, parts,
                   got, best * 1e-3, want);
        }
    }
    CHECK(bad == 0, "balance: %d random cuts (up to 9 layers, 3 stages, 2 chunks) optimal against every cut", cases);
}

/* pass_ot_solve's problem: the cheapest feasible choices by trying every one. */
static int64_t ot_brute(const pass_otp *p, int *best)
{
    int x[8] = {0};
    int64_t bv = INT64_MAX;
    for (;;) {
        int64_t v = pass_ot_eval(p, x, NULL);
        if (v < bv) bv = v, memcpy(best, x, sizeof(int) * (size_t)p->nop);
        int o = 0;
        while (o < p->nop && ++x[o] == p->nch[o]) x[o++] = 0;
        if (o == p->nop) break;
    }
    return bv;
}

/* Per-op op-trans's solver (optrans.c) against every choice on random problems: ops with up to 4
   choices, tensors with a producer (or none) and 1 to 3 consumers, conversions that cannot be
   made, followers, a memory bound. */
static void test_optrans(void)
{
    unsigned seed = 777;
#define RND(n) (seed = seed * 1103515245u + 12345u, (int)((seed >> 16) % (unsigned)(n)))
    int cases = 0, bad = 0, better = 0, infeasible = 0, cut = 0;
    for (int k = 0; k < 80; k++) {
        pass_otp p;
        memset(&p, 0, sizeof p);
        p.nop = 3 + RND(5);
        p.nch = calloc((size_t)p.nop, sizeof(int));
        p.unary = calloc((size_t)p.nop * PASS_OT_MAXC, sizeof(int64_t));
        p.mem = calloc((size_t)p.nop * PASS_OT_MAXC, sizeof(int64_t));
        for (int o = 0; o < p.nop; o++) {
            p.nch[o] = 1 + RND(4);
            for (int c = 0; c < p.nch[o]; c++) {
                p.unary[o * PASS_OT_MAXC + c] = RND(1000);
                p.mem[o * PASS_OT_MAXC + c] = RND(100);
            }
        }
        int64_t m0 = 0;
        for (int o = 0; o < p.nop; o++) m0 += p.mem[o * PASS_OT_MAXC];
        p.mem_cap = k % 3 == 0 ? m0 + RND(60) : -1;   /* (the incumbent fits) */
        p.nt = 1 + RND(p.nop);
        p.t = calloc((size_t)p.nt, sizeof(pass_ott));
        p.c = calloc((size_t)p.nt * 3, sizeof(pass_otc));
        for (int t = 0; t < p.nt; t++) {
            pass_ott *T = &p.t[t];
            T->prod = RND(4) ? RND(p.nop) : -1;
            T->c0 = p.ncons;
            T->nc = 1 + RND(3);
            for (int q = 0; q < T->nc; q++) {
                pass_otc *c = &p.c[p.ncons++];
                c->op = RND(p.nop);
                for (int h = 0; h < PASS_OT_MAXC; h++) c->need[h] = (int8_t)RND(4), c->grad[h] = (int8_t)(RND(5) - 1);
            }
            for (int c = 0; c < PASS_OT_MAXC; c++)
                for (int L = 0; L < PASS_OT_NL; L++) {
                    /* (conversions that cannot be made: not from the incumbent's producer, but in
                       every tenth problem) */
                    int inf = (c > 0 || k % 10 == 0) && RND(12) == 0;
                    T->fcost[c][L] = inf ? INT64_MAX : RND(3) ? RND(800) : 0;
                    inf = (c > 0 || k % 10 == 0) && RND(12) == 0;
                    T->bcost[c][L] = inf ? INT64_MAX : RND(3) ? RND(800) : 0;
                }
        }
        if (k % 2) {   /* a follower */
            p.nimp = 1;
            p.imp = calloc(1, sizeof *p.imp);
            int a = RND(p.nop), b = RND(p.nop);
            p.imp[0][0] = a, p.imp[0][1] = RND(p.nch[a]), p.imp[0][2] = b, p.imp[0][3] = RND(p.nch[b]);
            if (p.imp[0][1] == 0 && a != b) p.imp[0][3] = 0;   /* (the incumbent follows) */
        }
        int bx[8], x[8] = {0};
        int64_t want = ot_brute(&p, bx), got;
        int proved, rc = pass_ot_solve(&p, 0, x, &got, &proved);
        int64_t inc = pass_ot_eval(&p, (int[8]){0}, NULL);
        cases++;
        if (inc == INT64_MAX) {   /* an incumbent that is not feasible: nothing to improve on */
            infeasible++;
            if (rc != 1) bad++, printf("      case %d: an infeasible incumbent improved on\n", k);
        } else if (got != want || pass_ot_eval(&p, x, NULL) != got || !proved || rc != (want < inc ? 0 : 1)) {
            bad++;
            printf("      case %d: %d ops: got %lld (rc %d, proved %d), brute force %lld, incumbent %lld\n", k, p.nop,
                   (long long)got, rc, proved, (long long)want, (long long)inc);
        } else better += rc == 0;
        /* with almost no work: never worse than the incumbent, and not called the optimum unless it is */
        int y[8] = {0};
        int64_t g2;
        int pr2;
        pass_ot_solve(&p, 1, y, &g2, &pr2);
        cut += !pr2;
        if (inc != INT64_MAX && (g2 > inc || pass_ot_eval(&p, y, NULL) != g2 || (pr2 && g2 != want)))
            bad++, printf("      case %d: a budget of 1 unit gave %lld (proved %d), incumbent %lld\n", k, (long long)g2, pr2,
                          (long long)inc);
        pass_otp_free(&p);
    }
#undef RND
    CHECK(bad == 0 && better > 20 && infeasible < cases / 4 && cut > 0,
          "optrans: %d random problems (up to 7 ops x 4 choices, memory bound, followers) solved to the brute-force "
          "optimum (%d better than the incumbent, %d with an infeasible one; %d stopped by a budget of 1 unit, never "
          "worse than the incumbent)", cases, better, infeasible, cut);
}

static void test_cost(void)
{
    const ir_profile *a = ir_profile_find("a100-80g"), *c = ir_profile_find("cpu");
    CHECK(a && c && !strcmp(c->name, "cpu-host") && !ir_profile_find("tpu-v9") && ir_profile_find("dgx2") &&
          ir_profile_find("dgx2")->per_node == 16, "profiles: cpu is cpu-host, dgx2 has 16 devices per node, unknown names none");
    double S = 3.0e8;   /* bytes of the whole box */
    for (int n = 2; n <= 64; n *= 2) {
        double ar = 2.0 * (n - 1) / n * S, ag = (double)(n - 1) / n * S;
        double t = pass_cost_collective(a, IR_COMM_ALLREDUCE, n, ar, 0);
        CHECK(fabs(t - (2.0 * (n - 1) * a->link_lat + ar / a->link_bw)) < 1e-12 * t, "ring all-reduce, %d in a node", n);
        t = pass_cost_collective(a, IR_COMM_ALLREDUCE, n, ar, 1);
        CHECK(fabs(t - (2.0 * (n - 1) * a->net_lat + ar / a->net_bw)) < 1e-12 * t, "ring all-reduce, %d across nodes", n);
        t = pass_cost_collective(a, IR_COMM_ALLGATHER, n, ag, 0);
        CHECK(fabs(t - ((n - 1) * a->link_lat + ag / a->link_bw)) < 1e-12 * t, "all-gather, %d", n);
        t = pass_cost_collective(a, IR_COMM_REDUCESCATTER, n, ag, 1);
        CHECK(fabs(t - ((n - 1) * a->net_lat + ag / a->net_bw)) < 1e-12 * t, "reduce-scatter, %d across nodes", n);
    }
    double t = pass_cost_collective(a, IR_COMM_SENDRECV, 2, S, 0);
    CHECK(fabs(t - (a->link_lat + S / a->link_bw)) < 1e-12 * t, "send/recv");
    /* across nodes is slower than within (the profiles' IB below NVLink) */
    CHECK(pass_cost_collective(a, IR_COMM_ALLREDUCE, 8, S, 1) > pass_cost_collective(a, IR_COMM_ALLREDUCE, 8, S, 0),
          "across nodes slower than within");
}

/* Issue 36: the a100-80g estimate is a sum of terms, each from the
 * profile's constants by its closed form -- a GEMM at mm_eff of the bf16
 * peak times its wave efficiency (256 x 128 tiles over sms SMs) or its
 * bytes at mem_bw, whichever is longer; a collective whose group spans
 * nodes at its members' ports on one node, within the NVLink bandwidth;
 * the step (no pipeline) every micro-batch item m times plus the items
 * after them.  Checked on a dp 2 x m 2 plan of the mlp under bf16. */
static void test_cost_terms(void)
{
    const ir_profile *a = ir_profile_find("a100-80g");
    /* a 2048 x 2304 output (1.7B's q at micro-batch 1): 8 x 18 = 144 tiles of 256 x 128 (or 16 x 9 of
       128 x 256), 2 waves of 108 */
    double w = pass_cost_wave_eff(a->sms, 2048, 2304), want = 2048.0 * 2304 / (2 * 108 * 256.0 * 128);
    CHECK(a->sms == 108 && fabs(w - want) < 1e-12 && pass_cost_wave_eff(a->sms, 256 * 12, 128 * 9) == 1 &&
              pass_cost_wave_eff(0, 5, 7) == 1,
          "wave efficiency: 2048 x 2304 on 108 SMs %.4f (2 waves for 144 tiles), 108 whole tiles 1, no SMs 1", w);
    double S = 1e9, ar = 2.0 * 31 / 32 * S;
    double t8 = pass_cost_collective(a, IR_COMM_ALLREDUCE, 32, ar, 8), t1 = pass_cost_collective(a, IR_COMM_ALLREDUCE, 32, ar, 1);
    double bw8 = 8 * a->net_bw < a->link_bw ? 8 * a->net_bw : a->link_bw;
    CHECK(fabs(t8 - (62 * a->net_lat + ar / bw8)) < 1e-12 * t8 && fabs(t1 - (62 * a->net_lat + ar / a->net_bw)) < 1e-12 * t1,
          "all-reduce over 4 nodes: 8 members a node at %.0f GB/s (8 ports, within NVLink), 1 a node at one port's %.0f",
          bw8 / 1e9, a->net_bw / 1e9);
    ir_graph g;
    ir_dist d;
    mlp(&g, 8, 2);
    g.prof = *a;
    g.train.bf16 = 1;
    g.req.devices = 2;
    pass_autograd(&g);
    ir_dist_init(&d, &g, 2);
    CHECK(pass_plan(&d) == 0, "mlp dp 2 on a100-80g");
    pass_split(&d);
    pass_comm(&d);
    pass_schedule(&d);
    pass_estimate e;
    pass_cost_step(&d, &e);
    double m = g.train.micro_batches, sum = 0, peak = a->flops_bf16 * a->mm_eff;
    int nmm = 0, mm_ok = 1;
    for (int q = d.rank_item0[e.rank]; q < d.rank_item0[e.rank + 1]; q++) {
        const ir_item *it = &d.seq[d.rank_item[q]];
        if (it->sec == IR_SEC_PROLOGUE || it->sec == IR_SEC_EPILOGUE) continue;
        double t = it->comm ? pass_cost_comm(&d, &d.comm[it->id]) : pass_cost_subop(&d, &d.sop[it->id], it->sec);
        sum += it->sec == IR_SEC_MB ? m * t : t;
        const ir_subop *s = it->comm ? NULL : &d.sop[it->id];
        if (!s || g.op[s->op].kind != IR_OP_MATMUL || it->sec != IR_SEC_MB) continue;
        /* the forward matmul by hand: rows of its input piece per micro-batch, K and N of the weight */
        const ir_ptensor *x = &d.pt[s->in[0]], *wt = &d.pt[s->in[1]];
        double M = (double)(x->box.hi[0] - x->box.lo[0]) / m, K = (double)(wt->box.hi[0] - wt->box.lo[0]),
               N = (double)(wt->box.hi[1] - wt->box.lo[1]);
        double fl = 2 * M * K * N, by = 4 * (M * K + K * N + M * N);
        double tc = fl / (peak * pass_cost_wave_eff(108, M, N)), tb = by / a->mem_bw;
        mm_ok &= fabs(t - (tc > tb ? tc : tb)) <= 1e-9 * t;
        nmm++;
    }
    CHECK(nmm == 2 && mm_ok, "the forward matmuls' times: max(2MKN / (mm_eff peak x wave), bytes / mem_bw) (%d)", nmm);
    CHECK(!d.pipe && fabs(e.step - sum) <= 1e-9 * e.step && fabs(e.step - (e.compute + e.comm + e.outside)) <= 1e-9 * e.step,
          "the step %.3g s is the sum of rank %d's terms (%.3g s: micro-batch items x %g, then the rest)", e.step,
          e.rank, sum, m);
    ir_dist_free(&d);
    ir_graph_free(&g);
}

/* The op table (ir/ops.h) against the kernel contract (rtlib/rt_kernels.h):
 * every op lowers to a kernel, or is one of the view ops lowered by hand
 * (or cross_entropy, which never reaches a graph); a kernel of fixed
 * buffers takes the op's inputs and outputs (but embedding_bwd, whose
 * table input gives only its shape); a one-op backward rule names an op
 * taking as many inputs as the rule gives it, from roles the op has. */
static void test_op_table(void)
{
    static const int nbuf[RT_K_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) nbuf,
#include "rt_kernels.h"
#undef RT_K
    };
    int bad = 0, rules = 0;
    for (int k = 0; k < IR_OP_COUNT; k++) {
        const ir_opinfo *o = &ir_ops[k];
        int by_hand = k == IR_OP_CONCAT || k == IR_OP_SPLIT || k == IR_OP_SLICE || k == IR_OP_PAD ||
                      k == IR_OP_CROSS_ENTROPY;
        if ((o->kern < 0) != by_hand) {
            printf("  %s: kernel %d%s\n", o->name, o->kern, by_hand ? " (lowered by hand: none expected)" : "");
            bad++;
        }
        if (o->kern >= 0 && k != IR_OP_CUSTOM && k != IR_OP_EMBEDDING_BWD && nbuf[o->kern] != o->nin + o->nout) {
            printf("  %s: %d inputs and %d outputs, its kernel %s takes %d buffers\n", o->name, o->nin, o->nout,
                   cg_kernel_names[o->kern], nbuf[o->kern]);
            bad++;
        }
        int role[IR_BA_MAX], n = ir_op_bwd_inputs(k, role);
        if (o->bwd < 0) {
            if (o->bargs[0]) printf("  %s: backward inputs \"%s\" without a backward op\n", o->name, o->bargs), bad++;
            continue;
        }
        rules++;
        int ok = n >= 1 && n == ir_ops[o->bwd].nin && ir_ops[o->bwd].nout == 1 && o->nin >= 1;
        for (int j = 0; j < n && ok; j++)
            ok = role[j] != IR_BA_W ? role[j] != IR_BA_Y || o->nout >= 1 : o->nin >= 2;
        if (!ok) {
            printf("  %s: backward %s on \"%s\" (%d inputs read; it takes %d)\n", o->name, ir_ops[o->bwd].name,
                   o->bargs, n, ir_ops[o->bwd].nin);
            bad++;
        }
    }
    CHECK(bad == 0, "the op table: every op has its kernel and its kernel its buffers; one-op backward rules are "
          "well formed (%d of them; %d bad)", rules, bad);
    CHECK(rules >= 8, "relu, gelu, silu, softmax, rope, transpose, mean and split_heads take their rules from the "
          "table (%d rules)", rules);
    CHECK(ir_ops[IR_OP_RELU].bwd == IR_OP_RELU_BWD && ir_ops[IR_OP_RELU].kern == RT_K_relu,
          "relu lowers to rt_k_relu and differentiates by relu_bwd");

    /* the cost column: every word a number, `*`, `@K` with K an operand, causal/2, or
       an identifier of the row's annotation */
    bad = 0;
    for (int k = 0; k < IR_OP_COUNT; k++) {
        const ir_opinfo *o = &ir_ops[k];
        for (const char *f = o->cost; *f;) {   /* (one word: a product of one factor, as the lowering reads it) */
            size_t n = strcspn(f, " ");
            char w[32] = "";
            snprintf(w, sizeof w, "%.*s", (int)n, f);
            pass_arg a;
            int ok = n > 0 && n < sizeof w && pass_arg_parse(o, w, &a) == PASS_ARG_FORMULA;
            if (!ok) printf("  %s: cost \"%s\": '%s' is no factor\n", o->name, o->cost, w), bad++;
            f += n;
            f += strspn(f, " ");
        }
    }
    CHECK(bad == 0, "the op table's cost formulas name only numbers, *, @K, causal/2 and their annotation's "
          "identifiers (%d bad)", bad);
    /* the args column: as many ints and floats as the kernel's row takes, every int a
       product of factors (checked above) or acc */
    static const int knint[RT_K_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) nint,
#include "rt_kernels.h"
#undef RT_K
    }, knflt[RT_K_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) nflt,
#include "rt_kernels.h"
#undef RT_K
    }, kacc[RT_K_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) acc,
#include "rt_kernels.h"
#undef RT_K
    };
    int checked = 0, nhand = 0, forms = 0;
    bad = 0;
    for (int k = 0; k < IR_OP_COUNT; k++) {
        const ir_opinfo *o = &ir_ops[k];
        if (o->kern < 0) continue;
        const char *semi = strchr(o->args, ';'), *fl = semi ? semi + 1 : "";
        size_t ilen = semi ? (size_t)(semi - o->args) : strlen(o->args);
        int nf = 0, all = 0;
        for (const char *f = fl; *f;) {
            size_t n = strcspn(f, " ");
            if (n) nf++, all |= n == 3 && !strncmp(f, "all", 3);
            f += n;
            f += strspn(f, " ");
        }
        if (!all && nf != knflt[o->kern]) {
            printf("  %s: %d floats in args \"%s\", kernel %s takes %d\n", o->name, nf, o->args,
                   cg_kernel_names[o->kern], knflt[o->kern]);
            bad++;
        }
        nhand += !strncmp(o->args, "hand", 4);
        int ni = 0, blank = strspn(o->args, " ") >= ilen, accs = 0;
        for (size_t at = 0; !blank && at <= ilen;) {
            size_t n = strcspn(o->args + at, ",;");
            char w[64];
            snprintf(w, sizeof w, "%.*s", (int)n, o->args + at);
            pass_arg a;
            int form = pass_arg_parse(o, w, &a);
            if (form == PASS_ARG_BAD) printf("  %s: args \"%s\": '%s' is no kernel int\n", o->name, o->args, w), bad++;
            accs += form == PASS_ARG_ACC;
            forms |= 1 << form;
            ni += form != PASS_ARG_SHAPES;   /* (custom's variable tail: the kernel's row counts the rest) */
            at += n + 1;
        }
        if (blank) ni = 1 + (kacc[o->kern] == 1), accs = kacc[o->kern] == 1;
        int acc_ok = kacc[o->kern] < 0 ? accs == 0 : accs == 1;
        if (ni != knint[o->kern] || !acc_ok) {
            printf("  %s: args \"%s\" give %d ints (%d acc), kernel %s takes %d (acc at %d)\n", o->name, o->args,
                   ni, accs, cg_kernel_names[o->kern], knint[o->kern], kacc[o->kern]);
            bad++;
        }
        checked++;
    }
    CHECK(bad == 0 && checked >= 30, "the op table's args give each kernel as many ints and floats as its row in "
          "rt_kernels.h takes, acc where it has one, every int in a form the lowering reads (%d ops checked, %d bad)",
          checked, bad);
    CHECK(nhand == 0, "no op's kernel ints are written by hand (custom's too from its row): %d are", nhand);
    CHECK(forms == ((1 << PASS_ARG_ACC) | (1 << PASS_ARG_FORMULA) | (1 << PASS_ARG_ATTR) | (1 << PASS_ARG_LO) |
                    (1 << PASS_ARG_MAX) | (1 << PASS_ARG_STEP) | (1 << PASS_ARG_NIN) | (1 << PASS_ARG_NOUT) |
                    (1 << PASS_ARG_SHAPES)),
          "the op table uses every form of kernel int (forms seen: %#x)", (unsigned)forms);
    {   /* what is no kernel int, on attention_bwd's row */
        static const char *no[] = {"attr nope", "lo 9 0", "lo 0 x", "lo 0 -1/zz", "max t zz", "max t", "t zz", "",
                                   "acc acc", "step", "lo 0 1 2", "shapes 2", "nin nout"};
        const char *yes[] = {"acc", "step+1", "attr causal", "lo 1 -1/d", "max t s", "h r", "* t", "@2", "4 causal/2",
                             "nin", "nout", "shapes", "attr custom"};
        int wrong = 0;
        pass_arg a;
        for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
            if (pass_arg_parse(&ir_ops[IR_OP_ATTENTION_BWD], no[i], &a) != PASS_ARG_BAD)
                printf("  '%s' parsed as a kernel int\n", no[i]), wrong++;
        for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
            if (pass_arg_parse(&ir_ops[IR_OP_ATTENTION_BWD], yes[i], &a) == PASS_ARG_BAD)
                printf("  '%s' not parsed\n", yes[i]), wrong++;
        pass_arg_parse(&ir_ops[IR_OP_ATTENTION_BWD], "lo 1 -1/d", &a);
        wrong += a.k != 1 || a.j != -1 || strcmp(a.id, "d");
        CHECK(wrong == 0, "kernel ints: %zu forms read, %zu refused (unknown attribute, operand, dim, identifier)",
              sizeof yes / sizeof yes[0], sizeof no / sizeof no[0]);
    }
    /* and they price: the mlp's fc1 (B 8: x [8, 4] @ w1 [4, 6]) is 2 M K N, its relu 4 per element */
    ir_graph g;
    mlp(&g, 8, 1);
    const ir_op *fc1 = &g.op[0], *act = &g.op[2];
    double mm = pass_cost_formula(fc1, ir_ops[fc1->kind].cost, fc1->ext);
    double rl = pass_cost_formula(act, ir_ops[act->kind].cost, act->ext);
    double nope = pass_cost_formula(fc1, "2 * k zz", fc1->ext);
    CHECK(mm == 2.0 * 8 * 4 * 6 && rl == 4.0 * 8 * 6 && isnan(nope),
          "cost formulas: matmul 2 M K N = %g, relu 4 n = %g, an unknown word NaN (%g)", mm, rl, nope);
    ir_graph_free(&g);
}

int main(int argc, char **argv)
{
    test_op_table();
    test_cost();
    test_cost_terms();
    test_balance();
    test_optrans();
    test_inplace_readers(argc > 1 ? argv[1] : "tests");
    test_fuse();
    test_anno();
    test_graph();
    test_dp(1, 1);
    test_dp(2, 1);
    test_dp(4, 2);
    test_batch_divides();
    test_dp_wide(128);
    no_buckets = 1;   /* [plan] grad_buckets = false: one all-reduce each */
    test_dp_wide(128);
    no_buckets = 0;
    test_pipeline(2, 2, IR_SCHED_1F1B);
    test_pipeline(4, 4, IR_SCHED_1F1B);
    test_pipeline(3, 5, IR_SCHED_1F1B);
    test_pipeline(2, 12, IR_SCHED_1F1B);   /* long enough for the steady-state loop on every stage */
    test_pipeline(4, 20, IR_SCHED_1F1B);
    test_pipeline(2, 4, IR_SCHED_GPIPE);
    test_pipeline(5, 2, IR_SCHED_1F1B);
    for (int pp = 2; pp <= 8; pp *= 2)
        for (int m = pp; m <= 4 * pp; m *= 2) {
            test_bubble(pp, m, IR_SCHED_1F1B);
            test_bubble(pp, m, IR_SCHED_GPIPE);
            test_bubble(pp, m, IR_SCHED_ZBH1);
            test_bubble_v(pp, m, 2, 1);
            test_bubble_v(pp, m, 4, 1);
            test_bubble_v(pp, m, 1, 2);
            test_interlaced(pp, m);
        }
    test_pipeline(2, 4, IR_SCHED_ZBH1);
    test_pipeline(4, 8, IR_SCHED_ZBH1);
    test_pipeline(3, 3, IR_SCHED_ZBH1);
    return check_done();
}
