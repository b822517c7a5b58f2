/* test_lowp.c -- mixed precision (train dtype = bf16) through the compiler.
 *
 * The spec key reaches the IR (default f32; bad values are in tests/bad/);
 * under bf16 the lowering turns every matmul call into a matmul_bf16 call
 * with the same arguments and changes nothing else (same other calls, arena,
 * manifest, FLOP count), for 1 device and for tp and dp plans on 2; and end
 * to end, gpt2-tiny built with bf16 trains 20 steps with losses that differ
 * from the f32 build's (the flag does something) but stay close (measured
 * below 1e-3 relative; the bound checked is 3e-3).  The kernel itself is
 * tested in test_rt_lowp.c, N-device bf16 plans against 1 device in
 * tests/equiv.list.
 *
 * usage: test_lowp TESTS_DIR   (the spec is TESTS_DIR/../examples/gpt2-tiny.ini;
 *        rtlib is the build's libnnsc_rt.a beside this program's directory)
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "codegen.h"
#include "frontend.h"
#include "passes.h"

/* ---------------------------------------------------------------- the IR */

/* dtype reaches ir_train.bf16. */
static void test_key(const char *spec)
{
    const char *bf16[] = {"train.dtype=bf16"}, *f32[] = {"train.dtype=f32"};
    ir_graph g;
    int rc = fe_load(spec, NULL, 0, &g);
    int def = rc == 0 && g.train.bf16 == 0;
    if (!rc) ir_graph_free(&g);
    rc = fe_load(spec, bf16, 1, &g);
    int on = rc == 0 && g.train.bf16 == 1;
    if (!rc) ir_graph_free(&g);
    rc = fe_load(spec, f32, 1, &g);
    int off = rc == 0 && g.train.bf16 == 0;
    if (!rc) ir_graph_free(&g);
    CHECK(def && on && off, "train.dtype: default f32, bf16 sets ir_train.bf16, f32 clears it");
}

/* ---------------------------------------------------------------- lowering */

/* A spec lowered for every rank, as the driver does it. */
typedef struct lowered {
    ir_graph g;       /* the graph (the dist refers to it) */
    ir_dist d;        /* the plan */
    ir_prog *p;       /* per rank, after pass_fuse */
    int n;            /* ranks */
} lowered;

/* Lower spec with sets; 0, or 1 when a phase failed. */
static int lower_spec_fused(lowered *L, const char *spec, const char *const *sets, int nset, int fuse)
{
    memset(L, 0, sizeof *L);
    if (fe_load(spec, sets, nset, &L->g) || pass_autograd(&L->g))
        return 1;
    ir_dist_init(&L->d, &L->g, L->g.req.devices);
    if (pass_plan(&L->d))
        return 1;
    pass_split(&L->d);
    pass_comm(&L->d);
    pass_schedule(&L->d);
    L->n = L->d.ndev;
    L->p = calloc((size_t)L->n, sizeof *L->p);
    for (int r = 0; r < L->n; r++) {
        pass_mem m;
        pass_memplan(&L->d, r, &m);
        ir_prog_init(&L->p[r], r, L->n);
        pass_lower(&L->d, &m, &L->p[r]);
        ir_prog_verify(&L->p[r]);
        pass_mem_free(&m);
    }
    if (fuse)
        pass_fuse(L->p, L->n);
    return 0;
}

static int lower_spec(lowered *L, const char *spec, const char *const *sets, int nset)
{
    return lower_spec_fused(L, spec, sets, nset, 1);
}

static void lowered_free(lowered *L)
{
    for (int r = 0; r < L->n; r++)
        ir_prog_free(&L->p[r]);
    free(L->p);
    if (L->d.g)
        ir_dist_free(&L->d);
    ir_graph_free(&L->g);
}

/* Same buffers, ints and floats. */
static int same_args(const pg_instr *a, const pg_instr *b)
{
    return a->nbuf == b->nbuf && a->nint == b->nint && a->nflt == b->nflt &&
           !memcmp(a->buf, b->buf, sizeof a->buf[0] * (size_t)a->nbuf) &&
           !memcmp(a->ints, b->ints, sizeof a->ints[0] * (size_t)a->nint) &&
           !memcmp(a->flt, b->flt, sizeof a->flt[0] * (size_t)a->nflt);
}

/* The f32 and bf16 Programs of spec under plan sets: identical but for
 * matmul -> matmul_bf16. */
static void test_lowering(const char *spec, const char *what, const char *const *plan, int nplan)
{
    const char *sets[8];
    for (int k = 0; k < nplan; k++)
        sets[k] = plan[k];
    sets[nplan] = "train.dtype=bf16";
    sets[nplan + 1] = "train.storage=f32";   /* (storage = bf16 adds conversions: test_storage) */
    lowered f, h;
    int rc = lower_spec(&f, spec, sets, nplan) | lower_spec(&h, spec, sets, nplan + 2);
    CHECK(!rc && f.n == h.n, "%s: f32 and bf16 builds lower (%d ranks)", what, f.n);
    if (rc || f.n != h.n) {
        lowered_free(&f);
        lowered_free(&h);
        return;
    }
    int nmm = 0, bad_mm = 0, other = 0, shape = 0, f32_left = 0, bf16_in_f32 = 0;
    for (int r = 0; r < f.n; r++) {
        const ir_prog *a = &f.p[r], *b = &h.p[r];
        /* the manifests differ in their `dtype` record only (it picks the peak for the MFU) */
        const char *da = strstr(a->manifest.s, "\ndtype f32\n");
        const char *db = strstr(b->manifest.s, "\ndtype bf16\n");
        size_t head = da ? (size_t)(da - a->manifest.s) : 0;
        shape += a->arena != b->arena || a->flops != b->flops || a->loss_off != b->loss_off ||
                 !da || !db || head != (size_t)(db - b->manifest.s) ||
                 strncmp(a->manifest.s, b->manifest.s, head) != 0 ||
                 strcmp(da + strlen("\ndtype f32\n"), db + strlen("\ndtype bf16\n")) != 0;
        for (int sec = 0; sec < IR_SEC_COUNT; sec++) {
            if (a->nins[sec] != b->nins[sec]) {
                shape++;
                continue;
            }
            for (int x = 0; x < a->nins[sec]; x++) {
                const pg_instr *u = &a->ins[sec][x], *v = &b->ins[sec][x];
                f32_left += v->kernel == RT_K_matmul;
                bf16_in_f32 += u->kernel == RT_K_matmul_bf16;
                if (u->kernel == RT_K_matmul) {
                    nmm++;
                    bad_mm += !(v->kernel == RT_K_matmul_bf16 && same_args(u, v));
                } else {
                    other += !(u->kernel == v->kernel && same_args(u, v));
                }
            }
        }
    }
    CHECK(nmm > 0 && !bad_mm && !f32_left && !bf16_in_f32,
          "%s: all %d matmul calls become matmul_bf16 with the same arguments (%d differ, %d "
          "f32 matmuls left)", what, nmm, bad_mm, f32_left);
    CHECK(!other && !shape, "%s: every other call, the arena, the manifest and the FLOP count "
          "are the same (%d calls, %d programs differ)", what, other, shape);
    lowered_free(&f);
    lowered_free(&h);
}

/* v is u, a slice or place (kernel kn), of bf16 words: the same ints but the last dim's extent and bounds
 * halved. */
static int word_box(const pg_instr *u, const pg_instr *v, int kn)
{
    if (u->kernel != kn || v->kernel != kn || u->nint != v->nint || u->nint < 5) return 0;
    int ok = !memcmp(u->ints, v->ints, sizeof u->ints[0] * (size_t)(u->nint - 3));
    for (int j = u->nint - 3; j < u->nint && ok; j++)
        ok = u->ints[j].c % 2 == 0 && v->ints[j].c == u->ints[j].c / 2 && v->ints[j].s == u->ints[j].s / 2 &&
             v->ints[j].m == u->ints[j].m / 2;
    return ok;
}

/* storage = bf16 against storage = f32 (both dtype = bf16), unfused: the same
 * kernel calls in the same order with the same ints once the conversions
 * are taken out; some conversions, each cvt_f32 followed (before the next
 * cvt_bf16 of the sub-op) by a kernel, widths nw = ceil(n / 2); a smaller
 * arena on every rank.  The comms on the bf16 wire have their counts in
 * words; nrs, nag (> 0: checked): the reduce-scatters and the all-gathers
 * among them, at least. */
static void test_storage(const char *spec, const char *what, const char *const *plan, int nplan, int nrs,
                         int nag)
{
    const char *sets[8];
    for (int k = 0; k < nplan; k++)
        sets[k] = plan[k];
    sets[nplan] = "train.dtype=bf16";
    sets[nplan + 1] = "train.storage=f32";
    lowered f, h;
    int rc = lower_spec_fused(&f, spec, sets, nplan + 2, 0) |   /* (unfused: fusion keeps to the kernels */
             lower_spec_fused(&h, spec, sets, nplan + 1, 0);     /* between conversions) */
    CHECK(!rc && f.n == h.n, "%s: storage f32 and bf16 builds lower (%d ranks)", what, f.n);
    if (rc || f.n != h.n) {
        lowered_free(&f);
        lowered_free(&h);
        return;
    }
    int ncvt = 0, differ = 0, badw = 0, smaller = 0, nwire = 0, rs16 = 0, ag16 = 0;
    for (int r = 0; r < f.n; r++) {
        const ir_prog *a = &f.p[r], *b = &h.p[r];
        smaller += b->arena < a->arena;
        for (int sec = 0; sec < IR_SEC_COUNT; sec++) {
            int x = 0, y = 0;
            for (;;) {
                while (y < b->nins[sec] && (b->ins[sec][y].kernel == RT_K_cvt_f32 ||
                                            b->ins[sec][y].kernel == RT_K_cvt_bf16)) {
                    const pg_instr *v = &b->ins[sec][y++];
                    ncvt++;
                    badw += v->nint != 2 || v->ints[0].s || v->ints[0].m || v->ints[1].s || v->ints[1].m ||
                            v->ints[1].c != (v->ints[0].c + 1) / 2;
                }
                if (x == a->nins[sec] || y == b->nins[sec]) {
                    differ += x != a->nins[sec] || y != b->nins[sec];
                    break;
                }
                const pg_instr *u = &a->ins[sec][x++], *v = &b->ins[sec][y++];
                if (u->kernel == RT_K_allreduce && v->kernel == RT_K_allreduce_bf16) {
                    /* the bf16 wire's all-reduce: n values, the group, nw words */
                    int ok = u->nint == 2 && v->nint == 3 && !memcmp(u->ints, v->ints, sizeof u->ints[0] * 2) &&
                             v->ints[2].c == (v->ints[0].c + 1) / 2;
                    nwire += ok, differ += !ok;
                    continue;
                }
                if (u->kernel == RT_K_reducescatter && v->kernel == RT_K_reducescatter_bf16) {
                    /* the bf16 wire's reduce-scatter: n values (even), the group, n / 2 words received and
                       the group's size times that sent */
                    int ok = u->nint == 2 && v->nint == 4 && !memcmp(u->ints, v->ints, sizeof u->ints[0] * 2) &&
                             v->ints[0].c % 2 == 0 && v->ints[2].c == v->ints[0].c / 2 && v->ints[1].c >= 0 &&
                             v->ints[1].c < h.d.ngrp && v->ints[3].c == h.d.grp[v->ints[1].c].n * v->ints[2].c;
                    nwire += ok, rs16 += ok, differ += !ok;
                    continue;
                }
                if (word_box(u, v, RT_K_slice)) {
                    /* a reduce-scatter's piece packed as bf16 words: the slices run up to the call */
                    int z = y;
                    while (z < b->nins[sec] && b->ins[sec][z].kernel == RT_K_slice) z++;
                    int ok = z < b->nins[sec] && b->ins[sec][z].kernel == RT_K_reducescatter_bf16;
                    nwire += ok, differ += !ok;
                    continue;
                }
                if (word_box(u, v, RT_K_place)) {
                    /* an all-gather's piece placed as bf16 words: the places run back to the call */
                    int z = y - 1;
                    while (z > 0 && b->ins[sec][z - 1].kernel == RT_K_place) z--;
                    int ok = z > 0 && b->ins[sec][z - 1].kernel == RT_K_allgather;
                    nwire += ok, differ += !ok;
                    continue;
                }
                if (u->kernel != v->kernel || u->nint != v->nint) {
                    differ++;
                    continue;
                }
                if (!memcmp(u->ints, v->ints, sizeof u->ints[0] * (size_t)u->nint)) continue;
                /* on the bf16 wire (precision.c): a transfer or gather of the same buffers with its
                   counts in words, ceil(n / 2), and nothing else changed */
                int wire = u->kernel == RT_K_sendrecv || u->kernel == RT_K_allgather ||
                           u->kernel == RT_K_broadcast || u->kernel == RT_K_p2p;
                for (int j = 0; j < u->nint && wire; j++) {
                    int cnt = u->kernel == RT_K_p2p ? j >= 1 && (j - 1) % 4 == 1 : j == 0;
                    if (cnt) wire = v->ints[j].c == (u->ints[j].c + 1) / 2 && v->ints[j].s == u->ints[j].s &&
                                    v->ints[j].m == u->ints[j].m / 2;
                    else wire = !memcmp(&u->ints[j], &v->ints[j], sizeof u->ints[j]);
                }
                if (wire) nwire++, ag16 += u->kernel == RT_K_allgather;
                else differ++;
            }
        }
    }
    CHECK(ncvt > 0 && !differ && !badw, "%s: storage = bf16 is storage = f32's calls plus %d conversions "
          "(%d calls differ, %d conversions with a wrong width; %d moved on the bf16 wire)", what, ncvt, differ,
          badw, nwire);
    if (nrs)
        CHECK(rs16 >= nrs, "%s: %d reduce-scatters on the bf16 wire (reducescatter_bf16; at least %d)", what,
              rs16, nrs);
    if (nag)
        CHECK(ag16 >= nag, "%s: %d all-gathers on the bf16 wire (their counts in words; at least %d)", what, ag16,
              nag);
    CHECK(smaller == f.n, "%s: a smaller arena on %d of %d ranks (rank 0: %lld -> %lld bytes)", what, smaller, f.n,
          (long long)f.p[0].arena, (long long)h.p[0].arena);
    lowered_free(&f);
    lowered_free(&h);
}

/* ---------------------------------------------------------------- training */

#define STEPS 20

/* Build spec (1 device, extra --set) into dir and run STEPS steps; the
 * per-step losses into loss[].  Returns how many were read. */
static int train(const char *spec, const char *dir, const char *set, double *loss)
{
    char *argv[] = {"nnsc-aot", (char *)spec, "-o", (char *)dir, "-q", "--set", (char *)set, NULL};
    fe_opts o;
    memset(&o, 0, sizeof o);
    int rc = fe_cli(7, argv, &o);
    if (!rc)
        rc = fe_compile(&o);
    fe_opts_free(&o);
    if (rc)
        return 0;
    char cmd[PATH_MAX + 200], path[PATH_MAX + 20], line[1024];
    snprintf(cmd, sizeof cmd, "%s/launch --steps %d > %s/log.txt 2>&1", dir, STEPS, dir);
    if (system(cmd) != 0)
        return 0;
    snprintf(path, sizeof path, "%s/log.txt", dir);
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        long long s, tot;
        double l;
        if (sscanf(line, "step %lld/%lld loss %lf", &s, &tot, &l) == 3 && s == n + 1 && n < STEPS)
            loss[n++] = l;
    }
    if (f)
        fclose(f);
    return n;
}

/* gpt2-tiny with f32 and with bf16: the losses differ, but little. */
static void test_train(const char *spec, const char *tmp)
{
    char d32[PATH_MAX], d16[PATH_MAX];
    snprintf(d32, sizeof d32, "%s/f32", tmp);
    snprintf(d16, sizeof d16, "%s/bf16", tmp);
    double l32[STEPS], l16[STEPS];
    int n32 = train(spec, d32, "train.dtype=f32", l32);
    int n16 = train(spec, d16, "train.dtype=bf16", l16);
    CHECK(n32 == STEPS && n16 == STEPS, "gpt2-tiny builds and trains %d steps in f32 (%d losses) "
          "and in bf16 (%d)", STEPS, n32, n16);
    if (n32 != STEPS || n16 != STEPS)
        return;
    int differ = 0, finite = 1;
    double worst = 0;
    for (int s = 0; s < STEPS; s++) {
        double r = fabs(l16[s] - l32[s]) / fmax(fabs(l16[s]), fabs(l32[s]));
        differ += l16[s] != l32[s];
        finite &= isfinite(l16[s]);
        worst = r > worst ? r : worst;
    }
    CHECK(finite && differ >= STEPS - 2, "bf16 losses differ from f32 in %d of %d steps (the "
          "matmuls see bf16)", differ, STEPS);
    CHECK(worst <= 3e-3, "... but stay close: largest relative difference %.2e (bound 3e-3)",
          worst);
    CHECK(l16[STEPS - 1] < 0.7 * l16[0], "bf16 trains: loss %.4f -> %.4f (f32: %.4f -> %.4f)",
          l16[0], l16[STEPS - 1], l32[0], l32[STEPS - 1]);
}

int main(int argc, char **argv)
{
    const char *tests = argc > 1 ? argv[1] : "tests";
    char spec[PATH_MAX], self[PATH_MAX], rtlib[PATH_MAX + 32];
    snprintf(spec, sizeof spec, "%s/../examples/gpt2-tiny.ini", tests);
    /* this program is build/tests/test_lowp; rtlib is build/libnnsc_rt.a */
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        perror("readlink /proc/self/exe");
        return 1;
    }
    self[n] = 0;
    snprintf(rtlib, sizeof rtlib, "%.*s/../libnnsc_rt.a", (int)(strrchr(self, '/') - self), self);
    if (!getenv("NNSC_RTLIB"))
        setenv("NNSC_RTLIB", rtlib, 1);

    test_key(spec);
    test_lowering(spec, "1 device", NULL, 0);
    static const char *const tp2[] = {"cluster.devices=2", "plan.policy=tp"};
    static const char *const dp2[] = {"cluster.devices=2", "plan.policy=dp"};
    test_lowering(spec, "tp on 2", tp2, 2);
    test_lowering(spec, "dp on 2", dp2, 2);
    test_storage(spec, "1 device", NULL, 0, 0, 0);
    test_storage(spec, "tp on 2", tp2, 2, 0, 0);
    test_storage(spec, "dp on 2", dp2, 2, 0, 0);
    /* the pipeline's transfers on the bf16 wire; sequence parallelism's 18 all-gathers and 17 reduce-scatters
       a rank on the bf16 wire (their pieces placed and packed as words: the batch dim before the split one) */
    static const char *const pp2[] = {"cluster.devices=2", "plan.pp=2", "train.micro_batches=4"};
    test_storage(spec, "pp 2, 4 micro-batches", pp2, 3, 0, 0);
    static const char *const sp2[] = {"cluster.devices=2", "plan.policy=tp", "plan.sequence_parallel=true"};
    test_storage(spec, "tp 2, sequence parallel", sp2, 3, 34, 36);

    char tmp[] = "/tmp/nnsc_test_lowp.XXXXXX";
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_train(spec, tmp);
    char cmd[PATH_MAX + 16];
    if (check_fail)
        printf("outputs kept in %s\n", tmp);
    else if (snprintf(cmd, sizeof cmd, "rm -rf %s", tmp) > 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return check_done();
}
