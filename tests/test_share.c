/* test_share.c -- ranks that share one program (passes/share.c).
 *
 * Hand-made Programs of 5 ranks: ranks 0..3 alike but for their rank, a
 * group id that alternates (tp-like), a data offset (dp-like) and the
 * manifest's rank line; rank 4 has one more instruction.  The pass must
 * make two classes, {0..3} and {4}; in the first, the three differing
 * columns become rank variables (the data offset and the rank are
 * distinct columns even where they agree on a member, the equal columns
 * of two ints share one), everything else stays a constant, the table
 * restores every member's numbers, and the manifest becomes a template
 * that names the rank variable.  Then, end to end on real plans: every
 * rank of gpt2-tiny under dp x tp expands back to its own Program.
 *
 * usage: test_share TESTS_DIR   (specs under TESTS_DIR/../examples)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "frontend.h"
#include "passes.h"

/* Rank r's hand-made Program. */
static void make(ir_prog *p, int r, int extra)
{
    ir_prog_init(p, r, 5);
    p->arena = 4096;
    pg_instr *in = ir_prog_add(p, IR_SEC_MB, RT_K_allreduce, "allreduce x");
    pg_buf(in, 64);
    pg_i(in, 16);
    pg_i(in, 10 + r % 2);         /* group: alternates */
    in = ir_prog_add(p, IR_SEC_MB, RT_K_allreduce, "allreduce y");
    pg_buf(in, 128);
    pg_i(in, 16);
    pg_i(in, 10 + r % 2);         /* the same column: one variable */
    in = ir_prog_add(p, IR_SEC_MB, RT_K_zero, "z");
    pg_buf(in, 256 + 256 * r);    /* an offset per rank */
    pg_i(in, 8);
    if (extra) {
        in = ir_prog_add(p, IR_SEC_MB, RT_K_zero, "w");
        pg_buf(in, 512);
        pg_i(in, 4);
    }
    ir_bprintf(&p->manifest, "nnsc-manifest 1\nrank %d world 5\narena 4096\nlr 0.001\nend\n", r);
}

static void test_hand(void)
{
    pass_share *s = pass_share_new(5);
    for (int r = 0; r < 5; r++) {
        ir_prog p;
        make(&p, r, r == 4);
        int k = pass_share_add(s, &p);
        CHECK(k == (r == 4), "rank %d: class %d", r, k);
        CHECK(p.nins[IR_SEC_MB] == 0 && !p.manifest.s, "rank %d: the Program was taken", r);
    }
    int n = 0, cls[5], row[5];
    ir_prog *q = pass_share_finish(s, &n, cls, row);
    CHECK(n == 2, "two shared programs, got %d", n);
    if (n != 2) return;
    for (int k = 0; k < n; k++) ir_prog_verify(&q[k]);
    CHECK(cls[0] == 0 && cls[3] == 0 && cls[4] == 1 && row[0] == 0 && row[3] == 3 && row[4] == 0,
          "ranks 0..3 in program 0 (rows 0..3), rank 4 in program 1");
    const ir_prog *p = &q[0];
    CHECK(p->nmember == 4 && p->member[0] == 0 && p->member[3] == 3, "program 0: members 0..3");
    CHECK(p->nvar == 3, "3 rank variables (group, offset, rank), got %d", p->nvar);
    const pg_instr *a = &p->ins[IR_SEC_MB][0], *b = &p->ins[IR_SEC_MB][1], *z = &p->ins[IR_SEC_MB][2];
    CHECK(!a->bvar[0] && !a->ivar[0] && a->ivar[1] && a->ivar[1] == b->ivar[1] && !b->bvar[0],
          "the group ints share a variable; the equal buffers and sizes stay constants");
    CHECK(z->bvar[0] && !z->ivar[0], "the per-rank offset is a variable, the size a constant");
    int ok = 1;
    for (int m = 0; m < 4; m++) {
        const int64_t *rv = p->rv + (size_t)m * p->nvar;
        ok &= rv[a->ivar[1] - 1] == 10 + m % 2 && rv[z->bvar[0] - 1] == 256 + 256 * m;
    }
    CHECK(ok, "every member's row restores its group and offset");
    CHECK(strstr(p->manifest.s, "rank \x01") != NULL && strstr(p->manifest.s, "arena 4096\n") != NULL &&
              strstr(p->manifest.s, "lr 0.001\n") != NULL,
          "the manifest: the rank a variable, the arena and lr constants: %s", p->manifest.s);
    CHECK(q[1].nmember == 1 && q[1].nvar == 0 && !strchr(q[1].manifest.s, '\x01'),
          "program 1: one member, no variables");
    for (int k = 0; k < n; k++) ir_prog_free(&q[k]);
    free(q);
}

/* The instruction k of p's section sec with rank variables of row m filled in. */
static pg_instr fill(const ir_prog *p, const pg_instr *in, int m)
{
    pg_instr x = *in;
    const int64_t *rv = p->rv + (size_t)m * p->nvar;
    for (int j = 0; j < x.nbuf; j++)
        if (x.bvar[j]) x.buf[j] = rv[x.bvar[j] - 1], x.bvar[j] = 0;
    for (int j = 0; j < x.nint; j++)
        if (x.ivar[j]) x.ints[j].c = rv[x.ivar[j] - 1], x.ivar[j] = 0;
    return x;
}

/* gpt2-tiny under a plan: every rank's Program (lowered, fused, outlined)
 * against its shared program with its row filled in. */
static void test_plan(const char *spec, const char *const *sets, int nset, int want_programs)
{
    ir_graph g;
    ir_graph_init(&g);
    CHECK(fe_load(spec, sets, nset, &g) == 0 && pass_autograd(&g) == 0, "load %s", spec);
    ir_dist d;
    ir_dist_init(&d, &g, g.req.devices);
    CHECK(pass_plan(&d) == 0, "plan");
    pass_split(&d);
    pass_comm(&d);
    pass_schedule(&d);
    const int n = d.ndev;
    ir_prog *orig = calloc((size_t)n, sizeof *orig);
    pass_share *s = pass_share_new(n);
    pass_fuse_ids *f = pass_fuse_new();
    for (int r = 0; r < n; r++) {
        pass_mem m;
        pass_memplan(&d, r, &m);
        ir_prog p, c;
        ir_prog_init(&p, r, n);
        pass_lower(&d, &m, &p);
        pass_mem_free(&m);
        pass_fuse_prog(f, &p);
        pass_outline(&p);
        /* a copy to compare with: its instructions and call tables */
        ir_prog_init(&c, r, n);
        for (int sec = 0; sec < IR_SEC_COUNT; sec++)
            for (int i = 0; i < p.nins[sec]; i++) *IR_PUSH(c.ins[sec], c.nins[sec], c.inscap[sec]) = p.ins[sec][i];
        for (int t = 0; t < p.ntab; t++) *IR_PUSH(c.tab, c.ntab, c.tabcap) = p.tab[t];
        orig[r] = c;
        pass_share_add(s, &p);
    }
    pass_fuse_free(f);
    int np = 0, *cls = calloc((size_t)n, sizeof(int)), *row = calloc((size_t)n, sizeof(int));
    ir_prog *q = pass_share_finish(s, &np, cls, row);
    CHECK(np == want_programs, "%s on %d ranks: %d shared program(s), want %d", spec, n, np, want_programs);
    int same = 1;
    for (int r = 0; r < n; r++) {
        const ir_prog *p = &q[cls[r]];
        for (int sec = 0; sec < IR_SEC_COUNT; sec++) {
            same &= p->nins[sec] == orig[r].nins[sec];
            for (int i = 0; same && i < p->nins[sec]; i++) {
                pg_instr x = fill(p, &p->ins[sec][i], row[r]);
                const pg_instr *y = &orig[r].ins[sec][i];
                same &= x.kernel == y->kernel && x.nbuf == y->nbuf && x.nint == y->nint;
                for (int j = 0; same && j < x.nbuf; j++) same &= x.buf[j] == y->buf[j];
                for (int j = 0; same && j < x.nint; j++)
                    same &= x.ints[j].c == y->ints[j].c && x.ints[j].s == y->ints[j].s && x.ints[j].m == y->ints[j].m;
            }
        }
        same &= p->ntab == orig[r].ntab;
        for (int t = 0; same && t < p->ntab; t++) {
            int v = p->tabvar ? p->tabvar[t] : 0;
            same &= (v ? p->rv[(size_t)row[r] * p->nvar + v - 1] : p->tab[t]) == orig[r].tab[t];
        }
        ir_prog_free(&orig[r]);
    }
    CHECK(same, "every rank's instructions and call tables come back from its shared program and row");
    for (int k = 0; k < np; k++) {
        ir_prog_verify(&q[k]);
        ir_prog_free(&q[k]);
    }
    free(q), free(orig), free(cls), free(row);
    ir_dist_free(&d);
    ir_graph_free(&g);
}

int main(int argc, char **argv)
{
    const char *tests = argc > 1 ? argv[1] : "tests";
    char spec[1024];
    snprintf(spec, sizeof spec, "%s/../examples/gpt2-tiny.ini", tests);
    test_hand();
    const char *hybrid[] = {"cluster.devices=8", "plan.policy=hybrid", "plan.tp=4"};
    test_plan(spec, hybrid, 3, 1);
    const char *tp[] = {"cluster.devices=3", "plan.policy=tp"};
    test_plan(spec, tp, 2, 1);
    return check_done();
}
