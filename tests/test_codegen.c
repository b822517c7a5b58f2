/* test_codegen.c -- Program building, printing and verifying (ir/prog.c),
 * code generation (codegen/host.c) and linking (codegen/link.c).
 *
 * A small Program is built by hand: a prologue that initialises params and
 * zeroes a buffer, a step loop whose pre, micro-batch and post sections call
 * zero / mse_loss / copy with step- and micro-batch-dependent sizes, and an
 * epilogue.  It is compiled to an object, linked with the real rtlib
 * (build/libnnsc_rt.a) and run; the logged losses and the saved params must
 * be what the loops compute.  Generating twice (once in a fresh process)
 * must give byte-identical rank0.ll and rank0.o.
 *
 * The cuda target's module (cg_host_cuda) is checked on the same Program
 * with two made-up images: what it declares and calls, the embedded images
 * and their table, determinism, and that the linked executable holds both
 * images 16-byte aligned, needs no CUDA library and, run here, stops with
 * rtlib's message rather than the loader's.
 *
 * Prints one line per check and "N passed, M failed" (tests/check.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "codegen.h"
#include "ir.h"
#include "rt_internal.h"  /* rt_st_open: rtlib's safetensors reader */
#include "rt_kext.h"

/* ------------------------------------------------------- the test program */

/* Arena layout of the test program (bytes). */
enum {
    OFF_ONE = 0,      /* param "one": 16 ones */
    OFF_ZERO = 64,    /* 16 zeros (targets of the loss) */
    OFF_LOSS = 128,   /* the loss */
    OFF_W = 192,      /* param "w": 16 floats, accumulated into */
    ARENA = 256,      /* arena bytes */
};

static const char manifest[] =
    "nnsc-manifest 1\n"
    "model t\n"
    "rank 0 world 1\n"
    "arena 256\n"
    "steps 3\n"
    "micro_batches 2\n"
    "seed 1\n"
    "param 0 one f32 1 16 box 0 16 init ones 0 0 off 0 writer 1\n"
    "param 1 w f32 1 16 box 0 16 init zeros 0 0 off 192 writer 1\n"
    "end\n";

/* The Program.  Per step s, micro-batch m:
 *   loss += 0.5 * sum(ones[0 .. 1+s+2m))   so loss(s) = 0.5 (1+s) + 0.5 (3+s) = 2 + s
 *   w[0 .. 2+m) += 1                        w0, w1 += 2 and w2 += 1 per step
 * after the micro-batches w[0 .. s) += 1    w0 += 2, w1 += 1 over steps 0..2
 * and once at the end w0 = w0 + one0.       so w = 9 7 3 0 ... after 3 steps */
static void build_prog_pad(ir_prog *p, int pad);
static void build_prog(ir_prog *p) { build_prog_pad(p, 0); }

/* The same with pad zero kernels (of the zeros) before the loss and before
 * w's head: sections longer than codegen's parts (codegen/host.c, CG_PART),
 * their loop-dependent kernels in a part of their own. */
static void build_prog_pad(ir_prog *p, int pad) {
    ir_prog_init(p, 0, 1);
    p->arena = ARENA;
    p->steps = 3;
    p->micro_batches = 2;
    p->loss_off = OFF_LOSS;
    ir_bprintf(&p->manifest, "%s", manifest);
    pg_region regs[] = {
        {ir_prog_str(p, "one"), OFF_ONE, 64, 1},
        {ir_prog_str(p, "targets"), OFF_ZERO, 64, 0},
        {ir_prog_str(p, "loss"), OFF_LOSS, 4, 0},
        {ir_prog_str(p, "w"), OFF_W, 64, 1},
    };
    for (size_t r = 0; r < sizeof regs / sizeof regs[0]; r++)
        *IR_PUSH(p->reg, p->nreg, p->regcap) = regs[r];
    p->comm_bytes[IR_COMM_ALLREDUCE] = 64;  /* printed only */

    pg_instr *in = ir_prog_add(p, IR_SEC_PROLOGUE, RT_K_init_param, "init one");
    pg_buf(in, OFF_ONE);
    pg_i(in, 0);
    in = ir_prog_add(p, IR_SEC_PROLOGUE, RT_K_init_param, "init w");
    pg_buf(in, OFF_W);
    pg_i(in, 1);
    in = ir_prog_add(p, IR_SEC_PROLOGUE, RT_K_zero, "zero targets");
    pg_buf(in, OFF_ZERO);
    pg_i(in, 16);

    in = ir_prog_add(p, IR_SEC_PRE, RT_K_zero, "zero loss");
    pg_buf(in, OFF_LOSS);
    pg_i(in, 1);

    for (int k = 0; k < pad; k++) {
        in = ir_prog_add(p, IR_SEC_MB, RT_K_zero, "pad");
        pg_buf(in, OFF_ZERO);
        pg_i(in, 16);
    }
    in = ir_prog_add(p, IR_SEC_MB, RT_K_mse_loss, "loss (mse)");
    pg_buf(in, OFF_ONE);
    pg_buf(in, OFF_ZERO);
    pg_buf(in, OFF_LOSS);
    pg_iv(in, 1, 1, 2);
    pg_i(in, 1);
    pg_f(in, 0.5f);
    in = ir_prog_add(p, IR_SEC_MB, RT_K_copy, "accumulate w");
    pg_buf(in, OFF_ONE);
    pg_buf(in, OFF_W);
    pg_iv(in, 2, 0, 1);
    pg_i(in, 1);

    for (int k = 0; k < pad; k++) {
        in = ir_prog_add(p, IR_SEC_POST, RT_K_zero, "pad");
        pg_buf(in, OFF_ZERO);
        pg_i(in, 16);
    }
    in = ir_prog_add(p, IR_SEC_POST, RT_K_copy, "w head");
    pg_buf(in, OFF_ONE);
    pg_buf(in, OFF_W);
    pg_iv(in, 0, 1, 0);
    pg_i(in, 1);

    in = ir_prog_add(p, IR_SEC_EPILOGUE, RT_K_add, NULL);
    pg_buf(in, OFF_W);
    pg_buf(in, OFF_ONE);
    pg_buf(in, OFF_W);
    pg_i(in, 1);
    pg_i(in, 0);
}

static const char expect_dump[] =
    "prog rank 0 world 1 arena 256 steps 3 micro_batches 2 loss @128\n"
    "comm allreduce 64 bytes/step\n"
    "region @0 +64 persistent one\n"
    "region @64 +64 temp targets\n"
    "region @128 +4 temp loss\n"
    "region @192 +64 persistent w\n"
    "  pro  init_param    b=[@0] i=[0] f=[]  ; init one\n"
    "  pro  init_param    b=[@192] i=[1] f=[]  ; init w\n"
    "  pro  zero          b=[@64] i=[16] f=[]  ; zero targets\n"
    "  pre  zero          b=[@128] i=[1] f=[]  ; zero loss\n"
    "  mb   mse_loss      b=[@0 @64 @128] i=[1+s+2m 1] f=[0.5]  ; loss (mse)\n"
    "  mb   copy          b=[@0 @192] i=[2+m 1] f=[]  ; accumulate w\n"
    "  post copy          b=[@0 @192] i=[s 1] f=[]  ; w head\n"
    "  epi  add           b=[@192 @0 @192] i=[1 0] f=[]\n"
    "manifest\n"
    "  | nnsc-manifest 1\n"
    "  | model t\n"
    "  | rank 0 world 1\n"
    "  | arena 256\n"
    "  | steps 3\n"
    "  | micro_batches 2\n"
    "  | seed 1\n"
    "  | param 0 one f32 1 16 box 0 16 init ones 0 0 off 0 writer 1\n"
    "  | param 1 w f32 1 16 box 0 16 init zeros 0 0 off 192 writer 1\n"
    "  | end\n";

/* ---------------------------------------------------------------- helpers */

/* The whole file at path (NUL-terminated, *n bytes), or NULL. */
static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *s = malloc(cap);
    size_t got;
    while ((got = fread(s + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len - 1 == 0) s = realloc(s, cap *= 2);
    }
    fclose(f);
    s[len] = 0;
    if (n) *n = len;
    return s;
}

/* Same bytes in both files (and both readable, non-empty). */
static int same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = read_file(a, &na), *y = read_file(b, &nb);
    int same = x && y && na > 0 && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* Run fn(arg) in a child with stderr to a file; returns what it wrote
 * (malloc'ed) and sets *st to its wait status (-1 if it did not run). */
static char *in_child(void (*fn)(const void *), const void *arg, const char *dir, int *st) {
    char out[PATH_MAX];
    snprintf(out, sizeof out, "%s/child.txt", dir);
    fflush(stdout);
    fflush(stderr);
    *st = -1;
    pid_t pid = fork();
    if (pid < 0) return NULL;
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(127);
        dup2(fd, 2);
        fn(arg);
        _exit(0);
    }
    while (waitpid(pid, st, 0) < 0 && errno == EINTR) continue;
    char *msg = read_file(out, NULL);
    unlink(out);
    return msg;
}

/* in_child body: run a program (a NULL-terminated argv), stdout with stderr. */
static void child_exec(const void *argv) {
    char *const *av = argv;
    dup2(2, 1);
    execv(av[0], av);
    _exit(127);
}

/* in_child body: verify a Program. */
static void child_verify(const void *p) {
    ir_prog_verify(p);
}

/* 1 if ir_prog_verify aborts on p (as it must for a broken Program) with
 * want in its message. */
static int verify_dies(const ir_prog *p, const char *dir, const char *want) {
    int st;
    char *msg = in_child(child_verify, p, dir, &st);
    int ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && msg && strstr(msg, want);
    if (!ok) fprintf(stderr, "verify output: %s\n", msg ? msg : "(none)");
    free(msg);
    return ok;
}

/* in_child body: generate the test program into an unwritable place. */
static void child_bad_path(const void *p) {
    _exit(cg_host(p, NULL, "/nonexistent/dir/rank0.o", NULL));
}

/* The losses of the run's step lines ("step ... loss X ..."), in order;
 * returns how many were found (at most max). */
static int logged_losses(const char *log, double *loss, int max) {
    int n = 0;
    const char *line = log;
    while (*line && n < max) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        const char *l = strstr(line, " loss ");
        if (strncmp(line, "step ", 5) == 0 && l && l < line + len) loss[n++] = strtod(l + 6, NULL);
        line += len + (eol != NULL);
    }
    return n;
}

/* Remove the (flat) scratch directory and its files. */
static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    char path[PATH_MAX + 256];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
}

/* ------------------------------------------------------------------ tests */

/* Printing: the dump format of golden files. */
static void test_print(void) {
    ir_prog p;
    build_prog(&p);
    ir_buf b = {0};
    ir_prog_print(&p, &b);
    int same = b.s && strcmp(b.s, expect_dump) == 0;
    if (!same) fprintf(stderr, "got:\n%s\nwant:\n%s", b.s ? b.s : "", expect_dump);
    CHECK(same, "ir_prog_print gives the expected dump");
    ir_buf_free(&b);

    /* Loop-dependent ints and floats in their short forms. */
    pg_instr *in = ir_prog_add(&p, IR_SEC_MB, RT_K_sgd, "x");
    pg_buf(in, 0);
    pg_buf(in, 0);
    pg_iv(in, -1, -1, 1);
    pg_iv(in, 0, 0, -3);
    pg_iv(in, 5, 2, 0);
    pg_iv(in, 0, 0, 0);
    pg_f(in, 3e-4f);
    pg_f(in, 0.1f);
    pg_f(in, -2.0f);
    pg_f(in, 1e20f);
    ir_prog_print(&p, &b);
    CHECK(strstr(b.s, "i=[-1-s+m -3m 5+2s 0] f=[0.0003 0.1 -2 1e+20]") != NULL,
          "ints print as c+Ks+Km, floats in their shortest exact form");
    ir_buf_free(&b);
    ir_prog_free(&p);
}

/* The kernel contract's extents (rt_kernels.h's last field, rt_kext.h):
 * every row's formula names exactly its nbuf buffers and only its ints; the
 * reader gives the products, `?` and the bad cases; and ir_prog_verify
 * sizes a buffer by it (a matmul C one float short of M*N is refused). */
static void test_kext(const char *dir) {
    static const struct { const char *name, *ext; int nbuf, nint; } rows[] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) {#name, ext, nbuf, nint},
#include "rt_kernels.h"
#undef RT_K
    };
    int bad = 0, fixed = 0;
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        char why[160];
        if (rt_kext_check(rows[k].ext, rows[k].nbuf, rows[k].nint, why, (int)sizeof why)) {
            printf("  %s: \"%s\": %s\n", rows[k].name, rows[k].ext, why);
            bad++;
        }
        fixed += rows[k].ext[0] && !strchr(rows[k].ext, '?');
    }
    CHECK(bad == 0, "every row of rt_kernels.h has a formula of its nbuf buffers over its ints (%d bad)", bad);
    CHECK(fixed >= 40, "%d rows have every buffer's extent from their ints", fixed);
    char why[160];
    CHECK(rt_kext_check("i0 i1", 3, 2, why, (int)sizeof why) && strstr(why, "2 buffers in the formula, 3"),
          "a formula with a buffer too few is refused (%s)", why);
    CHECK(rt_kext_check("i0*i5", 1, 2, why, (int)sizeof why) && strstr(why, "i5 past the 2 ints"),
          "a formula naming an int past the row's is refused (%s)", why);
    CHECK(rt_kext_check("i0  i1", 2, 2, why, (int)sizeof why) && rt_kext_check("i0*", 1, 1, why, (int)sizeof why) &&
          rt_kext_check("x1", 1, 1, why, (int)sizeof why) && rt_kext_check("i0 ", 1, 1, why, (int)sizeof why),
          "double spaces, a dangling *, a stray letter and a trailing space are refused");
    const int64_t mkn[3] = {3, 5, 7}, neg[2] = {-1, 4}, big[2] = {INT64_MAX / 2, 3};
    CHECK(rt_kext("i0*i1 i1*i2 i0*i2", 0, mkn, 3) == 15 && rt_kext("i0*i1 i1*i2 i0*i2", 2, mkn, 3) == 21 &&
          rt_kext("i0 i0 1", 2, mkn, 3) == 1 && rt_kext("4*i2", 0, mkn, 3) == 28,
          "the formula's products (matmul's A and C, a constant, a constant factor)");
    CHECK(rt_kext("i0 ?", 1, mkn, 3) == RT_KEXT_VAR && rt_kext("i0", 1, mkn, 3) == RT_KEXT_VAR &&
          rt_kext("", 0, mkn, 3) == RT_KEXT_VAR, "`?`, and buffers past the formula, are not from the ints");
    CHECK(rt_kext("i0*i1", 0, neg, 2) == -1 && rt_kext("i0*i1", 0, big, 2) == -1 && rt_kext("i3", 0, mkn, 3) == -1,
          "an unknown (negative) int, an overflow and an int past the count give -1");

    ir_prog p;
    build_prog(&p);
    pg_instr *in = ir_prog_add(&p, IR_SEC_PRE, RT_K_matmul, "mm short");
    pg_buf(in, 0);
    pg_buf(in, 64);
    pg_buf(in, ARENA - 4 * 15 + 4);   /* C holds 14 of M*N = 15 floats before the arena ends */
    int64_t m35[6] = {3, 4, 5, 0, 0, 0};
    for (int k = 0; k < 6; k++) pg_i(in, m35[k]);
    CHECK(verify_dies(&p, dir, "run past the arena"), "verify sizes matmul's C by the formula i0*i2 (M*N)");
    ir_prog_free(&p);
}

/* Verifying: a good Program passes; each kind of broken one dies. */
static void test_verify(const char *dir) {
    ir_prog p;
    build_prog(&p);
    ir_prog_verify(&p);
    CHECK(1, "ir_prog_verify accepts the test program");

    pg_instr *in = ir_prog_add(&p, IR_SEC_PRE, RT_K_copy, "too far");
    pg_buf(in, 0);
    pg_buf(in, 200);
    pg_i(in, 16);
    pg_i(in, 0);
    CHECK(verify_dies(&p, dir, "run past the arena"), "verify rejects a buffer running past the arena");
    in->buf[1] = ARENA;
    CHECK(verify_dies(&p, dir, "outside the arena"), "verify rejects a buffer starting at the arena's end");
    in->buf[1] = 2;
    CHECK(verify_dies(&p, dir, "aligned"), "verify rejects a misaligned buffer");
    in->buf[1] = 64;
    in->nint = 1;
    CHECK(verify_dies(&p, dir, "1 ints, kernel takes 2"), "verify rejects too few ints");
    in->nint = 2;
    in->ints[0].m = 1;
    CHECK(verify_dies(&p, dir, "micro-batch outside"), "verify rejects the micro-batch index outside its loop");
    in->ints[0].m = 0;
    in->kernel = RT_K_COUNT;
    CHECK(verify_dies(&p, dir, "kernel id"), "verify rejects an unknown kernel");
    in->kernel = RT_K_copy;
    ir_prog_verify(&p);
    in = ir_prog_add(&p, IR_SEC_PROLOGUE, RT_K_zero, "step too early");
    pg_buf(in, 0);
    pg_iv(in, 1, 1, 0);
    CHECK(verify_dies(&p, dir, "step outside"), "verify rejects the step index in the prologue");
    ir_prog_free(&p);

    build_prog(&p);
    in = ir_prog_add(&p, IR_SEC_MB, RT_K_matmul, "mm");
    pg_buf(in, 0);
    pg_buf(in, 64);
    pg_buf(in, 128);  /* C is 4 x 4 floats: 64 bytes at @128 runs into @192, fine ... */
    int64_t mkn[6] = {4, 4, 4, 0, 0, 0};
    for (int j = 0; j < 6; j++) pg_i(in, mkn[j]);
    ir_prog_verify(&p);
    in->ints[2].c = 20;  /* ... but 4 x 20 floats at @128 run past the arena */
    CHECK(verify_dies(&p, dir, "80 elements at @64"), "verify checks matmul extents from M, K, N");
    ir_prog_free(&p);

    build_prog(&p);
    in = ir_prog_add(&p, IR_SEC_POST, RT_K_slice, "sl");
    pg_buf(in, 0);
    pg_buf(in, 64);
    int64_t sl[5] = {1, 0, 16, 4, 20};  /* ndim 1, acc 0, extent 16, [4, 20) */
    for (int j = 0; j < 5; j++) pg_i(in, sl[j]);
    CHECK(verify_dies(&p, dir, "outside extent"), "verify rejects a slice outside its source");
    in->ints[4].c = 12;
    ir_prog_verify(&p);
    pg_i(in, 0);
    CHECK(verify_dies(&p, dir, "6 ints for ndim 1"), "verify checks a variable-length int count");
    ir_prog_free(&p);
}

/* A path in the scratch directory. */
static const char *scratch(const char *dir, const char *name) {
    static char buf[4][PATH_MAX];
    static int next;
    char *r = buf[next++ % 4];
    snprintf(r, PATH_MAX, "%s/%s", dir, name);
    return r;
}

/* The module: what rank0.ll holds, and that generating it is deterministic. */
static void test_module(const char *self, const char *dir) {
    char obj[PATH_MAX], ll[PATH_MAX], obj2[PATH_MAX], ll2[PATH_MAX];
    snprintf(obj, sizeof obj, "%s", scratch(dir, "rank0.o"));
    snprintf(ll, sizeof ll, "%s", scratch(dir, "rank0.ll"));
    snprintf(obj2, sizeof obj2, "%s", scratch(dir, "again.o"));
    snprintf(ll2, sizeof ll2, "%s", scratch(dir, "again.ll"));

    ir_prog p;
    build_prog(&p);
    cg_opts o = {"x86-64-v3", "", 2, 1, 0};
    CHECK(cg_host(&p, &o, obj, ll) == 0, "cg_host writes rank0.o and rank0.ll");

    char *text = read_file(ll, NULL);
    CHECK(text && strstr(text, "source_filename = \"rank0\"") &&
              strstr(text, "define i32 @main(i32 %argc, ptr %argv)") &&
              strstr(text, "\"target-cpu\"=\"x86-64-v3\""),
          "rank0.ll is module rank0 with main() for x86-64-v3");
    CHECK(text && strstr(text, "declare void @rt_k_mse_loss(ptr, ptr, ptr, ptr)") &&
              strstr(text, "declare ptr @rt_init(i32, ptr, ptr)") &&
              strstr(text, "declare i32 @rt_finish(ptr)") && !strstr(text, "rt_k_matmul"),
          "rank0.ll declares rtlib and only the kernels it calls");
    CHECK(text && strstr(text, "!nnsc.note") && strstr(text, "!{!\"loss (mse)\"}") &&
              strstr(text, "%accumulate_w.i = alloca [2 x i64]") &&
              strstr(text, "@loss__mse_.f = private unnamed_addr constant [1 x float] [float 5.000000e-01]"),
          "rank0.ll names arrays after the notes and keeps the notes as metadata");
    CHECK(text && strstr(text, "c\"nnsc-manifest 1\\0Amodel t\\0A") && !strstr(text, dir),
          "rank0.ll embeds the manifest and no path");
    free(text);
    text = NULL;

    /* Same Program, fresh process: byte-identical outputs. */
    char *gen[] = {(char *)self, "--gen", obj2, ll2, NULL};
    int st;
    free(in_child(child_exec, gen, dir, &st));
    CHECK(st == 0 && same_file(ll, ll2) && same_file(obj, obj2),
          "a second generation (fresh process) gives byte-identical .ll and .o");
    CHECK(cg_host(&p, &o, obj2, NULL) == 0 && same_file(obj, obj2),
          "a second generation (same process, no .ll) gives a byte-identical .o");

    /* An object that cannot be written comes back as 1 with its path and the system's reason. */
    char *msg = in_child(child_bad_path, &p, dir, &st);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && msg && !strstr(msg, "host.c:") &&
              strstr(msg, "nnsc-aot: error: cannot write /nonexistent/dir/rank0.o: No such file"),
          "cg_host reports an object it cannot write with its path and the reason");
    if (msg && !strstr(msg, "No such file")) fprintf(stderr, "%s", msg);
    free(msg);

    /* "native" is the build host's CPU, by name, with its features. */
    cg_opts native = {"native", "", 2, 0, 0};
    CHECK(cg_host(&p, &native, obj2, ll2) == 0 && (text = read_file(ll2, NULL)) &&
              !strstr(text, "\"target-cpu\"=\"native\"") && strstr(text, "\"target-features\"=\"+"),
          "--cpu native compiles for the host's CPU by name and features");
    free(text);
    text = NULL;

    /* Another rank is another module. */
    p.rank = 1;
    p.world = 2;
    CHECK(cg_host(&p, NULL, obj2, ll2) == 0 && (text = read_file(ll2, NULL)) &&
              strstr(text, "source_filename = \"rank1\"") && strstr(text, "x86-64-v3"),
          "rank 1 with default options is module rank1 for x86-64-v3");
    free(text);
    ir_prog_free(&p);
}

/* Build at opt level, link with rtlib, run with --save: the logged losses
 * and the saved w must be what build_prog says. */
static void test_run(const char *dir, int opt_level, int pad) {
    const char *obj = scratch(dir, "run.o"), *exe = scratch(dir, "run");
    const char *save = scratch(dir, "run.safetensors"), *ll = scratch(dir, "run.ll");
    ir_prog p;
    build_prog_pad(&p, pad);
    cg_opts o = {NULL, NULL, opt_level, 0, 0};
    int ok = cg_host(&p, &o, obj, pad ? ll : NULL) == 0;
    ir_prog_free(&p);
    ok = ok && cg_link(obj, cg_rtlib_path(), exe) == 0;
    CHECK(ok, "-O%d: cg_host and cg_link (with %s) make rank0%s", opt_level, cg_rtlib_path(),
          pad ? ", sections of 600+ kernels" : "");
    if (!ok) return;
    if (pad) {
        char *text = read_file(ll, NULL);
        CHECK(text && strstr(text, "@nnsc_part4(") && strstr(text, "optnone"),
              "  ... in part functions, unoptimised");
        free(text);
    }

    char *args[] = {(char *)exe, "--save", (char *)save, NULL};
    int st;
    char *out = in_child(child_exec, args, dir, &st);
    double loss[4];
    int nl = out ? logged_losses(out, loss, 4) : 0;
    ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && nl == 3;
    for (int s = 0; s < nl && ok; s++) ok = fabs(loss[s] - (2 + s)) < 1e-6;
    if (!ok) fprintf(stderr, "rank0 status %#x, output:\n%s\n", st, out ? out : "(none)");
    CHECK(ok, "-O%d: rank0 exits 0 and logs losses 2 3 4 (loop-dependent ints)", opt_level);
    free(out);

    /* w shows that every section ran, in order, with the right sizes. */
    rt_st_file f;
    char err[256] = "";
    const rt_st_tensor *w = NULL;
    int opened = rt_st_open(save, &f, err, sizeof err) == 0;
    if (opened) w = rt_st_find(&f, "w");
    static const float want_w[16] = {9, 7, 3};
    CHECK(w && strcmp(w->dtype, "F32") == 0 && w->end - w->begin == sizeof want_w &&
              memcmp(w->data, want_w, sizeof want_w) == 0,
          "-O%d: rank0 --save holds w = 9 7 3 0 ...%s%s", opt_level, err[0] ? ": " : "", err);
    if (opened) rt_st_free(&f);
}

/* Arguments of one cg_link call made in a child. */
typedef struct link_case {
    const char *obj, *rtlib, *exe;  /* cg_link's arguments */
    const char *cc;                 /* $NNSC_CC, or NULL for the default */
} link_case;

/* in_child body: cg_link, exiting with its result. */
static void child_link(const void *arg) {
    const link_case *c = arg;
    if (c->cc) setenv("NNSC_CC", c->cc, 1);
    _exit(cg_link(c->obj, c->rtlib, c->exe));
}

/* cg_link fails (returns 1) with want in its message. */
static int link_fails(const link_case *c, const char *dir, const char *want) {
    int st;
    char *msg = in_child(child_link, c, dir, &st);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 1 && msg && strstr(msg, want);
    if (!ok) fprintf(stderr, "cg_link output: %s\n", msg ? msg : "(none)");
    free(msg);
    return ok;
}

/* Link failures are reported and returned, not fatal. */
static void test_link_errors(const char *dir) {
    const char *obj = scratch(dir, "run.o"), *exe = scratch(dir, "bad");
    link_case no_rt = {obj, "/nonexistent/libnnsc_rt.a", exe, NULL};
    CHECK(link_fails(&no_rt, dir, "cannot read the runtime library /nonexistent/libnnsc_rt.a"),
          "cg_link reports a missing rtlib");
    link_case no_cc = {obj, cg_rtlib_path(), exe, "/nonexistent/cc"};
    CHECK(link_fails(&no_cc, dir, "cannot run the C compiler driver '/nonexistent/cc'"),
          "cg_link reports a missing C compiler driver");
    link_case bad_obj = {scratch(dir, "rank0.ll"), cg_rtlib_path(), exe, NULL};
    CHECK(link_fails(&bad_obj, dir, "exited with status 1"), "cg_link reports a failed link");
}

/* ------------------------------------------------------ the cuda target */

/* A made-up image of n bytes: an ELF magic, then a pattern seeded by seed
 * (never found elsewhere in an executable). */
static unsigned char *fake_image(size_t n, unsigned seed) {
    unsigned char *d = malloc(n);
    memcpy(d, "\x7f" "ELF", 4);
    for (size_t k = 4; k < n; k++) d[k] = (unsigned char)((k * 131 + seed * 977 + (k >> 3)) ^ (k >> 7));
    return d;
}

/* How many times blob[0 .. n) occurs in hay[0 .. len), and where (*at) the
 * first occurrence starts. */
static int count_blob(const char *hay, size_t len, const unsigned char *blob, size_t n, size_t *at) {
    int c = 0;
    for (size_t k = 0; k + n <= len; k++)
        if (memcmp(hay + k, blob, n) == 0) {
            if (!c) *at = k;
            c++;
        }
    return c;
}

/* The cuda module of the test Program: rt_init_cuda with the image table,
 * rt_cuda_k with each kernel's number, the images embedded; deterministic;
 * linked without CUDA libraries; and run here, a clear failure. */
static void test_cuda_module(const char *dir) {
    char obj[PATH_MAX], ll[PATH_MAX], obj2[PATH_MAX], exe[PATH_MAX];
    snprintf(obj, sizeof obj, "%s", scratch(dir, "cuda.o"));
    snprintf(ll, sizeof ll, "%s", scratch(dir, "cuda.ll"));
    snprintf(obj2, sizeof obj2, "%s", scratch(dir, "cuda2.o"));
    snprintf(exe, sizeof exe, "%s", scratch(dir, "cuda"));
    cg_cubin cb[2] = {{.arch = "sm_80", .size = 1000}, {.arch = "sm_90", .size = 777}};
    cb[0].data = fake_image(cb[0].size, 1);
    cb[1].data = fake_image(cb[1].size, 2);
    cg_gpu gpu = {cb, 2, 0, 0};
    ir_prog p;
    build_prog(&p);
    cg_opts o = {"x86-64-v3", "", 2, 1, 0};
    CHECK(cg_host_cuda(&p, &o, &gpu, obj, ll) == 0, "cg_host_cuda writes the cuda rank0.o and rank0.ll");

    char *text = read_file(ll, NULL);
    CHECK(text && strstr(text, "declare ptr @rt_init_cuda(i32, ptr, ptr, ptr, i32)") &&
              strstr(text, "declare void @rt_cuda_k(ptr, i32, ptr, ptr, ptr)") && !strstr(text, "@rt_k_") &&
              !strstr(text, "@rt_init("),
          "cuda rank0.ll declares rt_init_cuda and rt_cuda_k, no rt_init and no rt_k_*");
    CHECK(text && strstr(text, "%rt_image = type { ptr, ptr, i64 }") &&
              strstr(text, "@nnsc_cubin_sm_80 = internal constant [1000 x i8] c\"\\7FELF") &&
              strstr(text, "@nnsc_cubin_sm_90 = internal constant [777 x i8] c\"\\7FELF") &&
              strstr(text, "@nnsc_arch_sm_80 = private unnamed_addr constant [6 x i8] c\"sm_80\\00\"") &&
              strstr(text, "@nnsc_images = private constant [2 x %rt_image] [%rt_image { ptr @nnsc_arch_sm_80, "
                           "ptr @nnsc_cubin_sm_80, i64 1000 }, %rt_image { ptr @nnsc_arch_sm_90, ptr "
                           "@nnsc_cubin_sm_90, i64 777 }]"),
          "cuda rank0.ll embeds both images (internal, named by arch) and the rt_image table");
    int aligned = 0;
    for (const char *q = text; q && (q = strstr(q, "@nnsc_cubin_sm_")); q++) {
        const char *eol = strchr(q, '\n');
        if (strncmp(q - 1, "\n@", 2) == 0 && eol && eol - q > 12 && strncmp(eol - 10, ", align 16", 10) == 0)
            aligned++;
    }
    CHECK(aligned == 2, "both images are 16-byte aligned (%d of 2)", aligned);
    CHECK(text && strstr(text, "@rt_init_cuda(i32 %argc, ptr %argv, ptr nonnull @manifest, ptr nonnull "
                               "@nnsc_images, i32 2)"),
          "main() calls rt_init_cuda(argc, argv, manifest, images, 2)");
    /* every kernel the Program calls, and only those, by number */
    int used[RT_K_COUNT] = {0}, ok = text != NULL;
    for (int sec = 0; sec < IR_SEC_COUNT; sec++)
        for (int k = 0; k < p.nins[sec]; k++) used[p.ins[sec][k].kernel] = 1;
    for (int k = 0; k < RT_K_COUNT && ok; k++) {
        char call[64];
        snprintf(call, sizeof call, "@rt_cuda_k(ptr %%ctx, i32 %d, ", k);
        ok = !strstr(text, call) == !used[k];
        if (!ok) fprintf(stderr, "kernel %s (%d): used %d, in the module %d\n", cg_kernel_names[k], k, used[k], !used[k] ? 1 : 0);
    }
    CHECK(ok, "every instruction is rt_cuda_k(ctx, RT_K_<name>, ...) with its kernel's number");
    free(text);

    CHECK(cg_host_cuda(&p, &o, &gpu, obj2, NULL) == 0 && same_file(obj, obj2),
          "a second cuda generation gives a byte-identical .o");
    ir_prog_free(&p);

    int linked = cg_link(obj, cg_rtlib_path(), exe) == 0;
    CHECK(linked, "cg_link links the cuda rank like a cpu rank");
    size_t len = 0, at[2] = {0, 0};
    char *bin = linked ? read_file(exe, &len) : NULL;
    int n80 = bin ? count_blob(bin, len, cb[0].data, cb[0].size, &at[0]) : 0;
    int n90 = bin ? count_blob(bin, len, cb[1].data, cb[1].size, &at[1]) : 0;
    CHECK(n80 == 1 && n90 == 1 && at[0] % 16 == 0 && at[1] % 16 == 0,
          "the executable holds each image once, 16-byte aligned (sm_80 %d at %zu, sm_90 %d at %zu)", n80, at[0],
          n90, at[1]);
    free(bin);

    if (linked) {
        char *args[] = {exe, "--steps", "1", NULL};
        int st;
        char *out = in_child(child_exec, args, dir, &st);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0 && out && out[0] && !strstr(out, "cannot open shared object") &&
                  !strstr(out, "step 1/1"),
              "the cuda rank, run with made-up images, stops with rtlib's message (exit %d): %.*s",
              WIFEXITED(st) ? WEXITSTATUS(st) : -1, out ? (int)strcspn(out, "\n") : 0, out ? out : "");
        free(out);
    }
    free(cb[0].data);
    free(cb[1].data);
}

/* The rank program of the test in a file, for the fresh-process check. */
static int gen_only(const char *obj, const char *ll) {
    ir_prog p;
    build_prog(&p);
    cg_opts o = {"x86-64-v3", "", 2, 1, 0};
    int rc = cg_host(&p, &o, obj, ll);
    ir_prog_free(&p);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--gen") == 0) return gen_only(argv[2], argv[3]);

    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        perror("readlink /proc/self/exe");
        return 1;
    }
    self[n] = 0;

    char dir[] = "/tmp/nnsc_test_codegen.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }

    test_print();
    test_verify(dir);
    test_kext(dir);

    /* The test binary is build/tests/test_codegen; rtlib is build/libnnsc_rt.a. */
    unsetenv("NNSC_RTLIB");
    const char *def = cg_rtlib_path();
    char want[PATH_MAX + 16];
    snprintf(want, sizeof want, "%.*s/libnnsc_rt.a", (int)(strrchr(self, '/') - self), self);
    CHECK(strcmp(def, want) == 0, "cg_rtlib_path defaults to the compiler's directory (%s)", def);
    char rtlib[PATH_MAX + 32];
    snprintf(rtlib, sizeof rtlib, "%.*s/../libnnsc_rt.a", (int)(strrchr(self, '/') - self), self);
    setenv("NNSC_RTLIB", rtlib, 1);
    CHECK(strcmp(cg_rtlib_path(), getenv("NNSC_RTLIB")) == 0, "cg_rtlib_path follows $NNSC_RTLIB");

    test_module(self, dir);
    test_run(dir, 2, 0);
    test_run(dir, 0, 0);
    test_run(dir, 3, 0);
    test_run(dir, 2, 600);
    test_link_errors(dir);
    test_cuda_module(dir);
    if (check_fail) printf("outputs kept in %s\n", dir);
    else remove_dir(dir);
    return check_done();
}
