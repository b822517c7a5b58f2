/* test_outline.c -- repeated layers as calls of bodies (passes/outline.c).
 *
 * The pass must not change what runs: every call, expanded row by row into
 * its body (slots filled from the row), gives back the instructions it
 * replaced, in order.  Checked instruction for instruction (kernel,
 * buffers, ints with their loop coefficients, floats) against a copy of the
 * Program taken before outlining, for every rank of several specs and plans
 * (mlp-block; gpt2-tiny under dp, tp and hybrid; one and two micro-batches;
 * with an evaluation copy of the forward pass), which must also come out
 * verified and smaller.  Then: the code does not grow with the layers
 * (gpt2-tiny at 4 and 8 layers has the same instructions and bodies per
 * rank), the evaluation forward shares the training forward's body, and on
 * hand-made Programs, repeats whose runs differ at the boundaries stay
 * unrolled (the first, the last), descending runs (a backward pass) are
 * outlined from the highest repeat, and an ew with another program breaks
 * a range, and a body may hold two repeats when layers alternate.  End to
 * end, gpt2-tiny under tp with an evaluation trains the same, bit for bit,
 * built with loops and with --no-loops, from a smaller rankN.ll.
 *
 * usage: test_outline TESTS_DIR   (specs under TESTS_DIR/../examples)
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "codegen.h"
#include "frontend.h"
#include "passes.h"
#include "rt_ew.h"

/* A spec lowered and fused for every rank, as the driver does it. */
typedef struct lowered {
    ir_graph g;   /* the graph (the dist refers to it) */
    ir_dist d;    /* the plan */
    ir_prog *p;   /* per rank, after pass_fuse */
    int n;        /* ranks */
} lowered;

/* Lower spec with sets; 0, or 1 when a phase failed. */
static int lower_spec(lowered *L, const char *spec, const char *const *sets, int nset) {
    memset(L, 0, sizeof *L);
    if (fe_load(spec, sets, nset, &L->g) || pass_autograd(&L->g)) return 1;
    ir_dist_init(&L->d, &L->g, L->g.req.devices);
    if (pass_plan(&L->d)) return 1;
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
        pass_mem_free(&m);
    }
    pass_fuse(L->p, L->n);
    return 0;
}

/* Free what lower_spec made. */
static void lowered_free(lowered *L) {
    for (int r = 0; r < L->n; r++) ir_prog_free(&L->p[r]);
    free(L->p);
    if (L->d.g) ir_dist_free(&L->d);
    ir_graph_free(&L->g);
}

/* The instructions of every section of a Program, copied. */
typedef struct snap {
    pg_instr *ins[IR_SEC_COUNT];  /* per section */
    int n[IR_SEC_COUNT];          /* how many */
} snap;

/* Copy p's sections into s. */
static void snap_take(snap *s, const ir_prog *p) {
    for (int sec = 0; sec < IR_SEC_COUNT; sec++) {
        s->n[sec] = p->nins[sec];
        s->ins[sec] = malloc(sizeof *s->ins[sec] * ((size_t)p->nins[sec] + 1));
        if (p->nins[sec]) memcpy(s->ins[sec], p->ins[sec], sizeof *s->ins[sec] * (size_t)p->nins[sec]);
    }
}

/* Free a snapshot. */
static void snap_free(snap *s) {
    for (int sec = 0; sec < IR_SEC_COUNT; sec++) free(s->ins[sec]);
}

/* Do a and b run the same: kernel, counts, buffers, ints, floats (bitwise),
 * and no slots left? */
static int same_instr(const pg_instr *a, const pg_instr *b) {
    if (a->kernel != b->kernel || a->nbuf != b->nbuf || a->nint != b->nint || a->nflt != b->nflt) return 0;
    for (int j = 0; j < a->nbuf; j++)
        if (a->buf[j] != b->buf[j] || a->bslot[j] || b->bslot[j]) return 0;
    for (int j = 0; j < a->nint; j++)
        if (a->ints[j].c != b->ints[j].c || a->ints[j].s != b->ints[j].s || a->ints[j].m != b->ints[j].m ||
            a->islot[j] || b->islot[j])
            return 0;
    return !memcmp(a->flt, b->flt, sizeof a->flt[0] * (size_t)a->nflt);
}

/* Expand every call of p and compare with the snapshot: the index of the
 * first instruction that differs (section * 1e6 + position), or -1 when all
 * are the same and as many. */
static long expand_diff(const ir_prog *p, const snap *s) {
    for (int sec = 0; sec < IR_SEC_COUNT; sec++) {
        int at = 0;
        for (int i = 0; i < p->nins[sec]; i++) {
            const pg_instr *in = &p->ins[sec][i];
            if (in->kernel != PG_CALL) {
                if (at >= s->n[sec] || !same_instr(in, &s->ins[sec][at])) return sec * 1000000L + at;
                at++;
                continue;
            }
            for (int r = 0; r < in->nrows; r++)
                for (int k = 0; k < p->body[in->body].nins; k++) {
                    pg_instr x;
                    ir_prog_expand(p, in, r, k, &x);
                    if (at >= s->n[sec] || !same_instr(&x, &s->ins[sec][at])) return sec * 1000000L + at;
                    at++;
                }
        }
        if (at != s->n[sec]) return sec * 1000000L + at;
    }
    return -1;
}

/* Top-level instructions of p (a call counts once) and calls. */
static int count_top(const ir_prog *p, int *calls) {
    int n = 0;
    *calls = 0;
    for (int sec = 0; sec < IR_SEC_COUNT; sec++)
        for (int i = 0; i < p->nins[sec]; i++) {
            n++;
            *calls += p->ins[sec][i].kernel == PG_CALL;
        }
    return n;
}

/* Outline every rank of spec under sets: verified, smaller, and expanding
 * the calls gives back the Program before outlining. */
static void test_roundtrip(const char *spec, const char *what, const char *const *sets, int nset) {
    lowered L;
    if (lower_spec(&L, spec, sets, nset)) {
        CHECK(0, "%s: lowers", what);
        return;
    }
    int bad = 0, calls = 0, before = 0, after = 0;
    long where = -1;
    for (int r = 0; r < L.n; r++) {
        snap s;
        snap_take(&s, &L.p[r]);
        for (int sec = 0; sec < IR_SEC_COUNT; sec++) before += s.n[sec];
        pass_outline(&L.p[r]);
        ir_prog_verify(&L.p[r]);
        int c;
        after += count_top(&L.p[r], &c);
        calls += c;
        long d = expand_diff(&L.p[r], &s);
        if (d >= 0 && !bad++) where = d + 100000000L * r;
        snap_free(&s);
    }
    CHECK(!bad, "%s: %d ranks, every call expands to the instructions it replaced (first difference %ld)",
          what, L.n, where);
    CHECK(calls > 0 && after < before, "%s: %d calls, %d top-level instructions from %d", what, calls, after, before);
    lowered_free(&L);
}

/* gpt2-tiny at 4 and at 8 layers: per rank the same number of top-level
 * instructions, calls and bodies (the rows grow, the code does not). */
static void test_layers(const char *spec) {
    const char *s4[] = {"plan.policy=hybrid", "plan.tp=2", "cluster.devices=4", "dims.L=4"};
    const char *s8[] = {"plan.policy=hybrid", "plan.tp=2", "cluster.devices=4", "dims.L=8"};
    lowered a, b;
    if (lower_spec(&a, spec, s4, 4) || lower_spec(&b, spec, s8, 4)) {
        CHECK(0, "gpt2-tiny L=4 and L=8 lower");
        return;
    }
    int same = a.n == b.n, na = 0, nb = 0;
    for (int r = 0; r < a.n && same; r++) {
        pass_outline(&a.p[r]);
        pass_outline(&b.p[r]);
        int ca, cb;
        na = count_top(&a.p[r], &ca);
        nb = count_top(&b.p[r], &cb);
        same = na == nb && ca == cb && a.p[r].nbody == b.p[r].nbody;
    }
    CHECK(same, "gpt2-tiny hybrid 2x2: L=4 and L=8 have the same code per rank (%d and %d top-level instructions)",
          na, nb);
    lowered_free(&a);
    lowered_free(&b);
}

/* With an evaluation, the eval section's forward calls the body of the
 * training forward (bodies are shared, so eval adds no code for layers). */
static void test_eval_shares(const char *spec, const char *const *evsets) {
    const char *sets[] = {"plan.policy=tp", "cluster.devices=2", "dims.L=6", evsets[0], evsets[1], evsets[2]};
    lowered L;
    if (lower_spec(&L, spec, sets, 6)) {
        CHECK(0, "gpt2-tiny with eval lowers");
        return;
    }
    int shared = 1;
    for (int r = 0; r < L.n; r++) {
        pass_outline(&L.p[r]);
        const ir_prog *p = &L.p[r];
        int found = 0;
        for (int i = 0; i < p->nins[IR_SEC_EVAL]; i++) {
            const pg_instr *e = &p->ins[IR_SEC_EVAL][i];
            if (e->kernel != PG_CALL) continue;
            for (int j = 0; j < p->nins[IR_SEC_MB]; j++)
                found |= p->ins[IR_SEC_MB][j].kernel == PG_CALL && p->ins[IR_SEC_MB][j].body == e->body;
        }
        shared &= found;
    }
    CHECK(shared, "gpt2-tiny tp2 with eval: every rank's eval forward calls a body of its training forward");
    lowered_free(&L);
}

/* ------------------------------------------------------ hand-made Programs */

/* Append a matmul of block 0, repeat rep, reading @a and writing @c. */
static pg_instr *mm(ir_prog *p, int sec, int rep, int64_t a, int64_t c, int64_t k) {
    pg_instr *in = ir_prog_add(p, sec, RT_K_matmul, "mm");
    pg_buf(in, a);
    pg_buf(in, 4096);
    pg_buf(in, c);
    int64_t v[6] = {4, k, 4, 0, 0, 0};
    for (int j = 0; j < 6; j++) pg_i(in, v[j]);
    in->ints[5] = (pg_int){0, 0, 1};   /* acc = mb: loop coefficients stay in the body */
    in->blk = 0;
    in->rep = rep;
    return in;
}

/* Append a relu of block 0, repeat rep, @x -> @y, n elements. */
static void relu(ir_prog *p, int sec, int rep, int64_t x, int64_t y, int64_t n) {
    pg_instr *in = ir_prog_add(p, sec, RT_K_relu, "relu");
    pg_buf(in, x);
    pg_buf(in, y);
    pg_i(in, n);
    in->blk = 0;
    in->rep = rep;
}

/* Append an ew with program id `id` (a copy of 16 elements), block 0. */
static void ew(ir_prog *p, int sec, int rep, int64_t x, int64_t y, int id) {
    pg_instr *in = ir_prog_add(p, sec, RT_K_ew, "ew");
    pg_buf(in, x);
    pg_buf(in, y);
    int64_t v[8] = {id, 16, 1, 1, RT_EW_COPY, RT_EW_MEM + 1, RT_EW_MEM + 0, 0};   /* b1 = b0 */
    for (int j = 0; j < 8; j++) pg_i(in, v[j]);
    in->blk = 0;
    in->rep = rep;
}

/* A Program of one rank with a 1 MiB arena. */
static void hand_prog(ir_prog *p) {
    ir_prog_init(p, 0, 1);
    p->arena = 1 << 20;
    p->steps = 1;
    p->micro_batches = 2;
}

/* Outline p (after a snapshot) and check the round trip; returns the
 * section's top-level kernels as a string, one letter each: C call, m
 * matmul, r relu, e ew. */
static void outline_shape(ir_prog *p, int sec, char *out, size_t cap, int *ok) {
    snap s;
    snap_take(&s, p);
    pass_outline(p);
    ir_prog_verify(p);
    *ok = expand_diff(p, &s) < 0;
    snap_free(&s);
    size_t n = 0;
    for (int i = 0; i < p->nins[sec] && n + 1 < cap; i++) {
        int k = p->ins[sec][i].kernel;
        out[n++] = k == PG_CALL ? 'C' : k == RT_K_matmul ? 'm' : k == RT_K_relu ? 'r' : k == RT_K_ew ? 'e' : '?';
    }
    out[n] = 0;
}

static void test_boundaries(void) {
    ir_prog p;
    char sh[64];
    int ok;

    /* forward, 4 repeats of (matmul, relu); repeat 0 starts with an extra relu
       (fused differently at the block's entry), repeat 3 ends with one: both
       stay unrolled; K differs between repeats 1 and 2 (an int slot) */
    hand_prog(&p);
    relu(&p, IR_SEC_MB, 0, 0, 256, 64);
    for (int r = 0; r < 4; r++) {
        mm(&p, IR_SEC_MB, r, 1024 * r, 1024 * r + 512, 4 + r);
        relu(&p, IR_SEC_MB, r, 1024 * r + 512, 1024 * (r + 1), 16);
    }
    relu(&p, IR_SEC_MB, 3, 4096, 8192, 16);
    outline_shape(&p, IR_SEC_MB, sh, sizeof sh, &ok);
    CHECK(ok && !strcmp(sh, "rmrCmrr") && p.nbody == 1 && p.ins[IR_SEC_MB][3].nrows == 2,
          "repeats 1..2 become a call, the odd first and last stay unrolled (got %s)", sh);
    /* the body: what moves per repeat is a slot (a buffer read as written before
       shares its slot), the rest constants, the loop coefficient kept */
    const pg_instr *b0 = &p.body[0].ins[0], *b1 = &p.body[0].ins[1];
    CHECK(p.body[0].nslots == 4 && b0->bslot[0] && !b0->bslot[1] && b0->buf[1] == 4096 && b0->bslot[2] &&
              b0->islot[1] && !b0->islot[0] && b0->ints[5].m == 1 && b1->bslot[0] == b0->bslot[2] &&
              b1->bslot[1] && !b1->islot[0],
          "body: 4 slots (3 buffers, K), @4096 and the other ints constant, mb kept");
    ir_prog_free(&p);

    /* backward: repeats in descending order 3..0, all alike: one call from repeat 3 */
    hand_prog(&p);
    for (int r = 3; r >= 0; r--) {
        relu(&p, IR_SEC_MB, r, 1024 * r, 1024 * r + 512, 16);
        mm(&p, IR_SEC_MB, r, 1024 * r + 512, 1024 * r + 768, 4);
    }
    outline_shape(&p, IR_SEC_MB, sh, sizeof sh, &ok);
    CHECK(ok && !strcmp(sh, "C") && p.ins[IR_SEC_MB][0].nrows == 4 && p.tab[p.ins[IR_SEC_MB][0].tab] == 3072,
          "descending repeats 3..0: one call of 4 rows, row 0 is repeat 3 (got %s)", sh);
    ir_prog_free(&p);

    /* an ew whose program differs (another id) in repeat 2 breaks the range;
       the same body serves both calls, in two sections */
    hand_prog(&p);
    for (int r = 0; r < 5; r++) ew(&p, IR_SEC_MB, r, 64 * r, 64 * r + 4096, r == 2 ? 1 : 0);
    for (int r = 0; r < 2; r++) ew(&p, IR_SEC_EVAL, r, 64 * r, 64 * r + 4096, 0);
    outline_shape(&p, IR_SEC_MB, sh, sizeof sh, &ok);
    CHECK(ok && !strcmp(sh, "CeC") && p.nbody == 1 && p.ins[IR_SEC_EVAL][0].kernel == PG_CALL &&
              p.ins[IR_SEC_EVAL][0].body == 0,
          "ew programs: repeats 0..1 and 3..4 and the eval copy call one shared body, repeat 2 unrolled (got %s)", sh);
    ir_prog_free(&p);

    /* layers that alternate (A B A B A B, a ping-pong memory plan): a body of
       two repeats per row */
    hand_prog(&p);
    for (int r = 0; r < 6; r++) {
        relu(&p, IR_SEC_MB, r, 1024 * r, 1024 * r + 512, 16);
        if (r % 2) relu(&p, IR_SEC_MB, r, 1024 * r + 512, 1024 * r + 768, 16);
    }
    outline_shape(&p, IR_SEC_MB, sh, sizeof sh, &ok);
    CHECK(ok && !strcmp(sh, "C") && p.ins[IR_SEC_MB][0].nrows == 3 && p.body[0].nins == 3,
          "alternating repeats: one call of 3 rows of a 2-repeat body (got %s)", sh);
    ir_prog_free(&p);

    /* repeats not consecutive (0, 2), or of another block, or one repeat only: unrolled */
    hand_prog(&p);
    relu(&p, IR_SEC_POST, 0, 0, 64, 16);
    relu(&p, IR_SEC_POST, 2, 64, 128, 16);
    relu(&p, IR_SEC_POST, 3, 128, 192, 16);
    p.ins[IR_SEC_POST][2].blk = 1;
    relu(&p, IR_SEC_POST, 5, 192, 256, 16);
    outline_shape(&p, IR_SEC_POST, sh, sizeof sh, &ok);
    CHECK(ok && !strcmp(sh, "rrrr") && p.nbody == 0, "gaps, another block, a lone repeat: nothing outlined (got %s)", sh);
    ir_prog_free(&p);

    /* a loop-dependent int must agree (same step coefficient) to share a body */
    hand_prog(&p);
    for (int r = 0; r < 3; r++) {
        pg_instr *in = mm(&p, IR_SEC_MB, r, 1024 * r, 1024 * r + 512, 4);
        if (r == 2) in->ints[5] = (pg_int){0, 0, 2};
    }
    outline_shape(&p, IR_SEC_MB, sh, sizeof sh, &ok);
    CHECK(ok && !strcmp(sh, "Cm"), "ints that differ in a loop coefficient are not slots (got %s)", sh);
    ir_prog_free(&p);
}

/* ------------------------------------------------------------ the verifier */

/* Does ir_prog_verify(p) abort with a message holding want?  (It runs in a
 * child; its stderr is read back through a pipe.) */
static int verify_dies(const ir_prog *p, const char *want) {
    int fd[2];
    if (pipe(fd)) return 0;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        signal(SIGABRT, SIG_DFL);
        ir_prog_verify(p);
        _exit(0);
    }
    close(fd[1]);
    char msg[4096];
    size_t n = 0;
    ssize_t k;
    while (n + 1 < sizeof msg && (k = read(fd[0], msg + n, sizeof msg - 1 - n)) > 0) n += (size_t)k;
    msg[n] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    int ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(msg, want);
    if (!ok) printf("      verify said: %s\n", n ? msg : "(nothing)");
    return ok;
}

/* ir_prog_verify checks bodies, tables and every row of every call. */
static void test_verify(void) {
    ir_prog p;
    hand_prog(&p);
    for (int r = 0; r < 3; r++) relu(&p, IR_SEC_MB, r, 1024 * r, 1024 * r + 512, 16);
    for (int r = 0; r < 2; r++) relu(&p, IR_SEC_PROLOGUE, r, 64 * r, 64 * r + 4096, 8);
    relu(&p, IR_SEC_PROLOGUE, 0, 8192, 8256, 8);
    p.ins[IR_SEC_PROLOGUE][2].blk = p.ins[IR_SEC_PROLOGUE][2].rep = -1;
    pass_outline(&p);
    ir_prog_verify(&p);
    pg_instr *call = &p.ins[IR_SEC_MB][0];
    pg_body *b = &p.body[call->body];
    CHECK(call->kernel == PG_CALL && b->nslots == 2 && p.nbody == 2 && p.nins[IR_SEC_PROLOGUE] == 2,
          "hand program: 2 calls of 2 bodies, verified");
    int64_t *row1 = &p.tab[call->tab + b->nslots];
    int64_t keep = row1[1];
    row1[1] = (1 << 20) - 16;
    char want[32];
    snprintf(want, sizeof want, "body %d row 1", call->body);
    CHECK(verify_dies(&p, want), "a row whose buffer runs past the arena is rejected, the row named");
    row1[1] = keep;
    pg_body *pb = &p.body[p.ins[IR_SEC_PROLOGUE][0].body];
    pb->ins[0].ints[0].s = 1;
    CHECK(verify_dies(&p, "step outside"), "a body called in the prologue may not use the step");
    pb->ins[0].ints[0].s = 0;
    b->ins[0].bslot[0] = 9;
    CHECK(verify_dies(&p, "is slot 8 of 2"), "a slot past the row is rejected");
    b->ins[0].bslot[0] = 1;
    b->ins[0].buf[0] = 64;
    CHECK(verify_dies(&p, "slotted buffer 0 holds 64"), "a slotted operand must hold 0");
    b->ins[0].buf[0] = 0;
    call->nrows = 1000;
    CHECK(verify_dies(&p, "table pool"), "a table past the pool is rejected");
    call->nrows = 3;
    p.ins[IR_SEC_PROLOGUE][1].bslot[0] = 1;
    CHECK(verify_dies(&p, "slot outside a body"), "a slot in a section's own instruction is rejected");
    p.ins[IR_SEC_PROLOGUE][1].bslot[0] = 0;
    p.ins[IR_SEC_PROLOGUE][0] = p.ins[IR_SEC_PROLOGUE][1];
    CHECK(verify_dies(&p, "never called"), "a body no call runs is rejected");
    ir_prog_free(&p);
}

/* ------------------------------------------------------------- end to end */

/* Build spec into dir with the options (-q, --emit-llvm and extra), run 4
 * steps; the step and eval lines of the log up to their timings into log
 * (cap bytes) and the size of rank0.ll into *ll.  0 on failure. */
static int build_run(const char *spec, const char *dir, const char *const *extra, int nextra, char *log,
                     size_t cap, long *ll) {
    const char *argv[32] = {"nnsc-aot", spec, "-o", dir, "-q", "--emit-llvm"};
    int argc = 6;
    for (int k = 0; k < nextra; k++) argv[argc++] = extra[k];
    argv[argc] = NULL;
    fe_opts o;
    memset(&o, 0, sizeof o);
    int rc = fe_cli(argc, (char **)argv, &o);
    if (!rc) rc = fe_compile(&o);
    fe_opts_free(&o);
    if (rc) return 0;
    char cmd[PATH_MAX + 200], path[PATH_MAX + 20], line[1024];
    snprintf(cmd, sizeof cmd, "%s/launch --steps 4 > %s/log.txt 2>&1", dir, dir);
    if (system(cmd) != 0) return 0;
    snprintf(path, sizeof path, "%s/log.txt", dir);
    FILE *f = fopen(path, "r");
    size_t n = 0;
    log[0] = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "step ", 5) && strncmp(line, "eval ", 5)) continue;
        char *ms = strstr(line, " ms ");
        if (ms) *ms = 0;
        n += (size_t)snprintf(log + n, n < cap ? cap - n : 0, "%s|", strtok(line, "\n"));
    }
    if (f) fclose(f);
    struct stat st;
    snprintf(path, sizeof path, "%s/rank0.ll", dir);
    *ll = stat(path, &st) ? -1 : (long)st.st_size;
    return n > 0 && n < cap;
}

/* gpt2-tiny tp2, 6 layers, with an evaluation every 2 steps: the looped
 * build and the unrolled one print the same losses, bit for bit. */
static void test_end_to_end(const char *spec, const char *const *evs, const char *tmp) {
    char d1[PATH_MAX], d2[PATH_MAX];
    snprintf(d1, sizeof d1, "%s/loops", tmp);
    snprintf(d2, sizeof d2, "%s/unrolled", tmp);
    const char *ex[16] = {"--devices", "2", "--set", "plan.policy=tp", "--set", "dims.L=6", "--set", evs[0],
                          "--set", evs[1], "--set", "train.eval_every=2", "--no-loops"};
    static char l1[8192], l2[8192];
    long s1, s2;
    int ok1 = build_run(spec, d1, ex, 12, l1, sizeof l1, &s1), ok2 = build_run(spec, d2, ex, 13, l2, sizeof l2, &s2);
    CHECK(ok1 && ok2, "gpt2-tiny tp2 with eval builds and runs with loops and with --no-loops");
    CHECK(ok1 && ok2 && !strcmp(l1, l2) && strstr(l1, "eval "), "... and both print the same step and eval "
          "lines: %.120s", l1);
    CHECK(ok1 && ok2 && s1 > 0 && s1 < s2, "... from less host code: rank0.ll %ld bytes vs %ld unrolled", s1, s2);
}

int main(int argc, char **argv) {
    const char *tests = argc > 1 ? argv[1] : "tests";
    char mlpb[4200], gpt[4200];
    snprintf(mlpb, sizeof mlpb, "%s/../examples/mlp-block.ini", tests);
    snprintf(gpt, sizeof gpt, "%s/../examples/gpt2-tiny.ini", tests);

    const char *m2[] = {"cluster.devices=2"};
    const char *m1[] = {"cluster.devices=2", "train.micro_batches=1", "dims.L=5"};
    test_roundtrip(mlpb, "mlp-block dp2", m2, 1);
    test_roundtrip(mlpb, "mlp-block dp2, 1 micro-batch, L=5", m1, 3);
    const char *dp[] = {"plan.policy=dp", "cluster.devices=2"};
    const char *dp1[] = {"plan.policy=dp", "cluster.devices=2", "train.micro_batches=1"};
    const char *tp[] = {"plan.policy=tp", "cluster.devices=2", "dims.L=6"};
    const char *tp1[] = {"plan.policy=tp", "cluster.devices=2", "train.micro_batches=1"};
    const char *hy[] = {"plan.policy=hybrid", "plan.tp=2", "cluster.devices=4"};
    const char *hy1[] = {"plan.policy=hybrid", "plan.tp=2", "cluster.devices=4", "train.micro_batches=1",
                         "dims.L=7"};
    /* an evaluation needs token files */
    char data[4300], eval[4300];
    snprintf(data, sizeof data, "train.data=%s/../data/tinytext_train.bin", tests);
    snprintf(eval, sizeof eval, "train.eval_data=%s/../data/tinytext_val.bin", tests);
    const char *evs[] = {data, eval, "train.eval_every=5"};
    const char *ev[] = {"plan.policy=hybrid", "plan.tp=2", "cluster.devices=4", data, eval, "train.eval_every=5"};
    test_roundtrip(gpt, "gpt2-tiny dp2", dp, 2);
    test_roundtrip(gpt, "gpt2-tiny dp2, 1 micro-batch", dp1, 3);
    test_roundtrip(gpt, "gpt2-tiny tp2, L=6", tp, 3);
    test_roundtrip(gpt, "gpt2-tiny tp2, 1 micro-batch", tp1, 3);
    test_roundtrip(gpt, "gpt2-tiny hybrid 2x2", hy, 3);
    test_roundtrip(gpt, "gpt2-tiny hybrid 2x2, 1 micro-batch, L=7", hy1, 5);
    test_roundtrip(gpt, "gpt2-tiny hybrid 2x2 with eval", ev, 6);
    test_layers(gpt);
    test_eval_shares(gpt, evs);
    test_boundaries();
    test_verify();

    /* end to end: this program is build/tests/test_outline; rtlib is build/libnnsc_rt.a */
    char self[PATH_MAX], rtlib[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        perror("readlink /proc/self/exe");
        return 1;
    }
    self[n] = 0;
    snprintf(rtlib, sizeof rtlib, "%.*s/../libnnsc_rt.a", (int)(strrchr(self, '/') - self), self);
    if (!getenv("NNSC_RTLIB")) setenv("NNSC_RTLIB", rtlib, 1);
    char tmp[] = "/tmp/nnsc_test_outline.XXXXXX";
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_end_to_end(gpt, evs, tmp);
    char cmd[PATH_MAX + 16];
    if (check_fail) printf("outputs kept in %s\n", tmp);
    else if (snprintf(cmd, sizeof cmd, "rm -rf %s", tmp) > 0 && system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp);
    return check_done();
}
