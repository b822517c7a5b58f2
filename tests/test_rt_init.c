/* test_rt_init.c -- rt_init and the step log: flags, rank/world from the
 * environment, the manifest parser's errors, the arena, the exact format
 * of the per-step line that `nnsc-aot verify` parses, and the --log JSON.
 *
 * Every case runs in a forked child with its stdout and stderr captured,
 * so cases that must exit (status 2 on bad input) can be checked.  Also:
 * -q, "did you mean" for a mistyped flag, and the files the flags name
 * (--log, --trace, --save, --init, --resume's checkpoints) when they are
 * FIFOs, directories or /dev/null: refused at once or used, never waited on.
 */
#define _GNU_SOURCE   /* sched_getaffinity */
#include <math.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rt_internal.h"


static const char *good_manifest =
    "nnsc-manifest 1\n"
    "model m\n"
    "rank 0 world 1\n"
    "arena 1000\n"
    "steps 4\n"
    "micro_batches 2\n"
    "seed 9\n"
    "lr 0.001\n"
    "group 0 1 0\n"
    "param 0 w f32 2 3 4 box 0 3 0 4 init normal 0.02 0 off 64 writer 1\n"
    "state 0 opt.m.w f32 2 3 4 box 0 3 0 4 of w off 128 writer 1\n"
    "data -\n"
    "eval_data -\n"
    "eval_every 0\n"
    "eval_steps 1\n"
    "schedule cosine warmup 2 min_lr_frac 0.1\n"
    "clip 1\n"
    "tokens_per_step 6\n"
    "input 0 x f32 2 2 3 dist normal period 1\n"
    "end\n";

/* good_manifest with what the compiler now writes too: the mesh, the model's
 * size and FLOPs, the matmul dtype, and a token input with its synthetic
 * fallback. */
static const char *full_manifest =
    "nnsc-manifest 1\n"
    "model m\n"
    "rank 0 world 1\n"
    "arena 1000\n"
    "steps 4\n"
    "micro_batches 2\n"
    "seed 9\n"
    "lr 0.001\n"
    "mesh dp 1 tp 1 policy dp\n"
    "param_count 12\n"
    "flops_per_step 1e6\n"
    "dtype bf16\n"
    "group 0 1 0\n"
    "param 0 w f32 2 3 4 box 0 3 0 4 init normal 0.02 0 off 64 writer 1\n"
    "data -\n"
    "tokens_per_step 6\n"
    "input 0 t i32 2 2 3 dist stream 0 int 7 period 1\n"
    "end\n";

/* What a child did. */
typedef struct result {
    int code;           /* exit status (-1 if killed) */
    char out[4096];     /* stdout */
    char err[4096];     /* stderr */
} result;

/* How a child starts: environment pairs (name, value or NULL to unset),
 * argv, manifest, and what it does after rt_init. */
typedef struct job {
    const char *env[12];      /* name, value, name, value, ... NULL */
    const char *argv[8];      /* argv, NULL-terminated (argv[0] included) */
    const char *manifest;     /* text */
    int action;               /* ACT_* */
} job;

enum {
    ACT_NONE,       /* rt_init, rt_finish */
    ACT_STEPS,      /* log rt_steps() steps with known losses */
    ACT_ARENA,      /* exit 0 if the arena is aligned and zeroed, else 5 */
    ACT_PRINT,      /* print rank, world, steps, timeout */
};

/* Read a file into buf (NUL-terminated). */
static void slurp(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    buf[n] = 0;
    if (f)
        fclose(f);
}

/* Run one job in a child. */
static result run(const job *j)
{
    static const char *const rank_vars[] = {"NNSC_RANK", "NNSC_WORLD", "RANK", "WORLD_SIZE",
                                            "SLURM_PROCID", "SLURM_NTASKS",
                                            "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                            "NNSC_TIMEOUT", "NNSC_JOB", "NNSC_THREADS",
                                            "NNSC_LOCAL_WORLD"};
    result r;
    char po[64], pe[64];
    snprintf(po, sizeof po, "/tmp/rtinit-%d.out", (int)getpid());
    snprintf(pe, sizeof pe, "/tmp/rtinit-%d.err", (int)getpid());
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(po, "w", stdout) || !freopen(pe, "w", stderr))
            _exit(99);
        alarm(20);   /* a child that blocks (opening a FIFO) is killed: code -1 */
        for (size_t k = 0; k < sizeof rank_vars / sizeof rank_vars[0]; k++)
            unsetenv(rank_vars[k]);
        for (int k = 0; j->env[k]; k += 2)
            if (j->env[k + 1])
                setenv(j->env[k], j->env[k + 1], 1);
            else
                unsetenv(j->env[k]);
        int argc = 0;
        while (j->argv[argc])
            argc++;
        rt_ctx *ctx = rt_init(argc, (char **)j->argv, j->manifest);
        if (j->action == ACT_STEPS) {
            for (int64_t s = rt_first_step(ctx); s < rt_steps(ctx); s++) {
                float loss = 2.0f / (float)(s + 3);
                rt_step_begin(ctx, s);
                rt_step_end(ctx, s, &loss);
            }
        } else if (j->action == ACT_ARENA) {
            char *a = rt_arena(ctx);
            int ok = ((uintptr_t)a % 64) == 0;
            for (int k = 0; k < ctx->man.arena; k++)
                ok &= a[k] == 0;
            fflush(stdout);
            _exit(ok ? 0 : 5);
        } else if (j->action == ACT_PRINT) {
            printf("rank %d world %d steps %lld timeout %g quiet %d threads %d pool %d\n",
                   ctx->rank, ctx->world, (long long)rt_steps(ctx), ctx->timeout, ctx->quiet,
                   ctx->threads, rt_pool_size());
        }
        int rc = rt_finish(ctx);
        fflush(stdout);
        _exit(rc);
    }
    int st;
    waitpid(pid, &st, 0);
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    slurp(po, r.out, sizeof r.out);
    slurp(pe, r.err, sizeof r.err);
    unlink(po);
    unlink(pe);
    return r;
}

/* A job with flags only. */
static result run_flags(const char *a1, const char *a2, const char *a3)
{
    job j = {{NULL}, {"rank0", a1, a2, a3, NULL}, good_manifest, ACT_PRINT};
    return run(&j);
}

static void test_flags(void)
{
    result r = run_flags("--help", NULL, NULL);
    check(r.code == 0 && strstr(r.out, "--steps") && strstr(r.out, "--save") &&
          strstr(r.out, "--quiet") && strstr(r.out, "--timeout") && strstr(r.out, "--help"),
          "--help lists the flags and exits 0");
    r = run_flags("--frobnicate", NULL, NULL);
    check(r.code == 2 && strstr(r.err, "--frobnicate"), "unknown flag: exit 2 naming it (%s)",
          strtok(r.err, "\n"));
    r = run_flags("extra", NULL, NULL);
    check(r.code == 2, "a stray argument: exit 2");
    r = run_flags("--steps", "x7", NULL);
    check(r.code == 2 && strstr(r.err, "--steps"), "--steps x7: exit 2");
    r = run_flags("--steps", NULL, NULL);
    check(r.code == 2, "--steps without a value: exit 2");
    r = run_flags("--timeout", "0", NULL);
    check(r.code == 2, "--timeout 0: exit 2");
    r = run_flags("--help", NULL, NULL);
    check(r.code == 0 && strstr(r.out, "--data") && strstr(r.out, "--eval-data") &&
          strstr(r.out, "--init") && strstr(r.out, "--ckpt-dir") && strstr(r.out, "--ckpt-every") &&
          strstr(r.out, "--resume") && strstr(r.out, "--log"),
          "--help lists --data --eval-data --init --ckpt-dir --ckpt-every --resume --log");
    r = run_flags("--data", "/tmp/x.bin", NULL);
    check(r.code == 2 && strstr(r.err, "compiled for synthetic data"),
          "--data with a program built for synthetic data: exit 2 (%s)", strtok(r.err, "\n"));
    r = run_flags("--eval-data=/tmp/x.bin", NULL, NULL);
    check(r.code == 2 && strstr(r.err, "compiled for synthetic data"),
          "--eval-data with a program built for synthetic data: exit 2");
    r = run_flags("--ckpt-every", "3", NULL);
    check(r.code == 2 && strstr(r.err, "--ckpt-dir"), "--ckpt-every without --ckpt-dir: exit 2");
    r = run_flags("--resume", NULL, NULL);
    check(r.code == 2 && strstr(r.err, "--ckpt-dir"), "--resume without --ckpt-dir: exit 2");
    r = run_flags("--resume=1", NULL, NULL);
    check(r.code == 2, "--resume=1: exit 2 (takes no value)");
    r = run_flags("--ckpt-every", "x", NULL);
    check(r.code == 2 && strstr(r.err, "--ckpt-every"), "--ckpt-every x: exit 2");
    r = run_flags("--init", "", NULL);
    check(r.code == 2 && strstr(r.err, "--init"), "--init '': exit 2");
    r = run_flags("--log", "/nonexistent-dir-nnsc/log.jsonl", NULL);
    check(r.code == 2 && strstr(r.err, "--log"), "--log into a missing directory: exit 2 (%s)",
          strtok(r.err, "\n"));
    r = run_flags("--steps", "7", "--quiet");
    check(r.code == 0 && strstr(r.out, "steps 7 ") && strstr(r.out, "quiet 1"),
          "--steps 7 --quiet are taken");
    r = run_flags("--steps=3", "--timeout=2.5", NULL);
    check(r.code == 0 && strstr(r.out, "steps 3 ") && strstr(r.out, "timeout 2.5"),
          "--steps=3 --timeout=2.5 (the = form)");
    r = run_flags(NULL, NULL, NULL);
    check(r.code == 0 && strstr(r.out, "rank 0 world 1 steps 4 timeout 60"),
          "defaults: rank 0 of 1, the manifest's steps, timeout 60 s");
    job j = {{"NNSC_TIMEOUT", "7", NULL}, {"rank0", NULL}, good_manifest, ACT_PRINT};
    r = run(&j);
    check(r.code == 0 && strstr(r.out, "timeout 7"), "NNSC_TIMEOUT=7 sets the timeout");
    job jt = {{"NNSC_TIMEOUT", "7", NULL}, {"rank0", "--timeout", "3", NULL}, good_manifest,
              ACT_PRINT};
    r = run(&jt);
    check(r.code == 0 && strstr(r.out, "timeout 3"), "--timeout overrides NNSC_TIMEOUT");
    job jb = {{"NNSC_TIMEOUT", "soon", NULL}, {"rank0", NULL}, good_manifest, ACT_PRINT};
    r = run(&jb);
    check(r.code == 2, "NNSC_TIMEOUT=soon: exit 2");
}

/* "threads N pool N" as the child prints it. */
static int has_threads(const result *r, int n)
{
    char want[48];
    snprintf(want, sizeof want, "threads %d pool %d\n", n, n);
    return r->code == 0 && strstr(r->out, want) != NULL;
}

/* --threads, NNSC_THREADS, NNSC_LOCAL_WORLD and the default. */
static void test_threads(void)
{
    cpu_set_t set;
    int ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    result r = run_flags("--help", NULL, NULL);
    check(r.code == 0 && strstr(r.out, "--threads") && strstr(r.out, "NNSC_THREADS") &&
          strstr(r.out, "NNSC_LOCAL_WORLD"), "--help lists --threads and its variables");
    r = run_flags(NULL, NULL, NULL);
    check(has_threads(&r, ncpu), "default: one thread per CPU of the affinity mask (%d)", ncpu);
    r = run_flags("--threads", "3", NULL);
    check(has_threads(&r, 3), "--threads 3 starts a pool of 3");
    r = run_flags("--threads=1", NULL, NULL);
    check(has_threads(&r, 1), "--threads=1: no workers");
    static const char *const bad[] = {"0", "-2", "two", "", "100000"};
    int ok = 1;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        r = run_flags("--threads", bad[k], NULL);
        ok &= r.code == 2 && strstr(r.err, "--threads") != NULL;
    }
    check(ok, "--threads 0, -2, two, '', 100000: exit 2 naming the flag");
    job je = {{"NNSC_THREADS", "2", NULL}, {"rank0", NULL}, good_manifest, ACT_PRINT};
    r = run(&je);
    check(has_threads(&r, 2), "NNSC_THREADS=2 sets the threads");
    job jo = {{"NNSC_THREADS", "2", NULL}, {"rank0", "--threads", "1", NULL}, good_manifest,
              ACT_PRINT};
    r = run(&jo);
    check(has_threads(&r, 1), "--threads overrides NNSC_THREADS");
    job jb = {{"NNSC_THREADS", "many", NULL}, {"rank0", NULL}, good_manifest, ACT_PRINT};
    r = run(&jb);
    check(r.code == 2 && strstr(r.err, "NNSC_THREADS"), "NNSC_THREADS=many: exit 2");
    job jl = {{"NNSC_LOCAL_WORLD", "2", NULL}, {"rank0", NULL}, good_manifest, ACT_PRINT};
    r = run(&jl);
    check(has_threads(&r, ncpu / 2 > 1 ? ncpu / 2 : 1), "NNSC_LOCAL_WORLD=2: CPUs / 2 threads");
    job jL = {{"NNSC_LOCAL_WORLD", "1000", NULL}, {"rank0", NULL}, good_manifest, ACT_PRINT};
    r = run(&jL);
    check(has_threads(&r, 1), "NNSC_LOCAL_WORLD=1000: at least 1 thread");
    job j0 = {{"NNSC_LOCAL_WORLD", "0", NULL}, {"rank0", NULL}, good_manifest, ACT_PRINT};
    r = run(&j0);
    check(r.code == 2 && strstr(r.err, "NNSC_LOCAL_WORLD"), "NNSC_LOCAL_WORLD=0: exit 2");
}

/* The manifest of rank r of w (no groups). */
static void manifest_rank(char *buf, size_t len, int r, int w)
{
    snprintf(buf, len, "nnsc-manifest 1\nmodel m\nrank %d world %d\narena 64\nsteps 1\n"
                       "micro_batches 1\nseed 1\nend\n", r, w);
}

static void test_env(void)
{
    char m01[256], m12[256], m02[256];
    manifest_rank(m01, sizeof m01, 0, 1);
    manifest_rank(m12, sizeof m12, 1, 2);
    manifest_rank(m02, sizeof m02, 0, 2);
    struct {
        const char *what;
        const char *env[8];
        const char *man;
        int code;
        const char *say;
    } cases[] = {
        {"NNSC_RANK=1 NNSC_WORLD=2 for a rank-0 build", {"NNSC_RANK", "1", "NNSC_WORLD", "2"},
         m02, 2, "rank 0 of 2"},
        {"RANK/WORLD_SIZE used when NNSC_* are unset", {"RANK", "1", "WORLD_SIZE", "2"}, m02, 2,
         "RANK"},
        {"SLURM_PROCID/SLURM_NTASKS", {"SLURM_PROCID", "1", "SLURM_NTASKS", "2"}, m02, 2,
         "SLURM_PROCID"},
        {"OMPI_COMM_WORLD_RANK/SIZE", {"OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2"},
         m02, 2, "OMPI_COMM_WORLD_RANK"},
        {"NNSC_* take precedence over RANK", {"NNSC_RANK", "0", "NNSC_WORLD", "1", "RANK", "1",
         "WORLD_SIZE", "2"}, m01, 0, NULL},
        {"only NNSC_RANK set", {"NNSC_RANK", "0"}, m01, 2, "NNSC_WORLD"},
        {"rank not below world", {"NNSC_RANK", "2", "NNSC_WORLD", "2"}, m12, 2, "rank"},
        {"rank not a number", {"RANK", "one", "WORLD_SIZE", "2"}, m12, 2, "RANK"},
        {"no variables: rank 0 of 1", {NULL}, m01, 0, NULL},
        {"no variables for a rank-1 build", {NULL}, m12, 2, "rank 1 of 2"},
        {"world 2 without NNSC_JOB", {"NNSC_RANK", "1", "NNSC_WORLD", "2"}, m12, 2, "NNSC_JOB"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        job j = {{NULL}, {"rank", "--quiet", "--timeout", "1", NULL}, cases[k].man, ACT_NONE};
        for (int e = 0; e < 8 && cases[k].env[e]; e++)
            j.env[e] = cases[k].env[e];
        result r = run(&j);
        int ok = r.code == cases[k].code && (!cases[k].say || strstr(r.err, cases[k].say));
        check(ok, "env: %s -> exit %d%s%.120s", cases[k].what, r.code, r.err[0] ? ": " : "",
              strtok(r.err, "\n") ? r.err : "");
    }
}

static void test_manifest_errors(void)
{
    static const char *const head = "nnsc-manifest 1\nmodel m\nrank 0 world 1\narena 100\n"
                                    "steps 1\nmicro_batches 1\nseed 1\n";
    struct {
        const char *what;   /* description */
        const char *body;   /* records after head (or a whole text if head is skipped) */
        int whole;          /* 1: body is the whole manifest */
        const char *say;    /* expected in the message */
    } cases[] = {
        {"empty text", "", 1, "empty manifest"},
        {"no header line", "model m\nend\n", 1, "first line"},
        {"version 2", "nnsc-manifest 2\nend\n", 1, "version 2"},
        {"no end (truncated)", "", 0, "missing 'end'"},
        {"unknown record", "colour blue\nend\n", 0, "unknown record 'colour'"},
        {"missing seed", "nnsc-manifest 1\nmodel m\nrank 0 world 1\narena 1\nsteps 1\n"
         "micro_batches 1\nend\n", 1, "missing 'seed'"},
        {"seed twice", "seed 2\nend\n", 0, "given twice"},
        {"text after end", "end\nsteps 3\n", 0, "after 'end'"},
        {"steps not a number", "nnsc-manifest 1\nsteps many\nend\n", 1, "not an integer"},
        {"group id out of order", "group 1 1 0\nend\n", 0, "out of order"},
        {"group member >= world", "group 0 1 3\nend\n", 0, "group member"},
        {"group members not ascending", "nnsc-manifest 1\nrank 0 world 3\ngroup 0 2 2 1\nend\n",
         1, "ascending"},
        {"param box past the shape", "param 0 w f32 1 4 box 0 5 init zeros 0 0 off 0 writer 1\n"
         "end\n", 0, "box hi"},
        {"param past the arena", "param 0 w f32 1 40 box 0 40 init zeros 0 0 off 0 writer 1\n"
         "end\n", 0, "overruns"},
        {"param index out of order", "param 1 w f32 1 4 box 0 4 init zeros 0 0 off 0 writer 1\n"
         "end\n", 0, "out of order"},
        {"unknown init", "param 0 w f32 1 4 box 0 4 init gauss 0 0 off 0 writer 1\nend\n", 0,
         "unknown init"},
        {"missing init arguments", "param 0 w f32 1 4 box 0 4 init zeros off 0 writer 1\nend\n",
         0, "init argument"},
        {"bad dtype", "param 0 w f64 1 4 box 0 4 init zeros 0 0 off 0 writer 1\nend\n", 0,
         "unknown dtype"},
        {"unaligned offset", "param 0 w f32 1 4 box 0 4 init zeros 0 0 off 2 writer 1\nend\n", 0,
         "aligned"},
        {"trailing field", "param 0 w f32 1 4 box 0 4 init zeros 0 0 off 0 writer 1 x\nend\n", 0,
         "unexpected 'x'"},
        {"int input with f32", "input 0 t f32 1 4 dist int 10 period 1\nend\n", 0, "dtype i32"},
        {"int input without range", "input 0 t i32 1 4 dist int period 1\nend\n", 0, "range"},
        {"input period 0", "input 0 x f32 1 4 dist normal period 0\nend\n", 0, "period"},
        {"rank not below world", "nnsc-manifest 1\nrank 2 world 2\nend\n", 1, "not below"},
        {"state of an unknown param", "state 0 opt.m.w f32 1 4 box 0 4 of w off 0 writer 1\nend\n",
         0, "not a param of this rank"},
        {"state of another shape", "param 0 w f32 1 4 box 0 4 init zeros 0 0 off 0 writer 1\n"
         "state 0 opt.m.w f32 1 5 box 0 5 of w off 16 writer 1\nend\n", 0, "shape"},
        {"state without 'of'", "param 0 w f32 1 4 box 0 4 init zeros 0 0 off 0 writer 1\n"
         "state 0 opt.m.w f32 1 4 box 0 4 off 16 writer 1\nend\n", 0, "expected 'of'"},
        {"state past the arena", "param 0 w f32 1 4 box 0 4 init zeros 0 0 off 0 writer 1\n"
         "state 0 opt.m.w f32 1 4 box 0 4 of w off 96 writer 1\nend\n", 0, "overruns"},
        {"state index out of order", "param 0 w f32 1 4 box 0 4 init zeros 0 0 off 0 writer 1\n"
         "state 1 opt.m.w f32 1 4 box 0 4 of w off 16 writer 1\nend\n", 0, "out of order"},
        {"stream input of f32", "input 0 t f32 2 2 3 dist stream 0 period 1\nend\n", 0,
         "dist stream needs"},
        {"stream input of one dim", "input 0 t i32 1 6 dist stream 0 period 1\nend\n", 0,
         "dist stream needs"},
        {"stream input without offset", "input 0 t i32 2 2 3 dist stream period 1\nend\n", 0,
         "stream offset"},
        {"unknown distribution", "input 0 t i32 2 2 3 dist file 0 period 1\nend\n", 0,
         "unknown distribution"},
        {"data twice", "data a.bin\ndata b.bin\nend\n", 0, "given twice"},
        {"data with two paths", "data a.bin b.bin\nend\n", 0, "unexpected 'b.bin'"},
        {"eval_data without a path", "eval_data\nend\n", 0, "missing eval_data path"},
        {"eval_every negative", "eval_every -1\nend\n", 0, "eval_every"},
        {"eval_steps 0", "eval_steps 0\nend\n", 0, "eval_steps"},
        {"unknown schedule", "schedule linear warmup 0 min_lr_frac 0\nend\n", 0,
         "unknown schedule"},
        {"schedule without warmup", "schedule cosine min_lr_frac 0\nend\n", 0,
         "expected 'warmup'"},
        {"min_lr_frac above 1", "schedule cosine warmup 0 min_lr_frac 2\nend\n", 0,
         "outside [0, 1]"},
        {"clip negative", "clip -1\nend\n", 0, "negative"},
        {"clip not a number", "clip big\nend\n", 0, "not a finite number"},
        {"tokens_per_step not an integer", "tokens_per_step 1.5\nend\n", 0, "not an integer"},
        {"stream input with no data file", "input 0 t i32 2 2 3 dist stream 0 period 1\n"
         "data -\nend\n", 0, "none is configured"},
        {"stream input with synthetic range 0", "input 0 t i32 2 2 3 dist stream 0 int 0 "
         "period 1\nend\n", 0, "synthetic range"},
        {"stream input with a normal fallback", "input 0 t i32 2 2 3 dist stream 0 normal "
         "period 1\nend\n", 0, "expected 'period'"},
        {"mesh before rank", "nnsc-manifest 1\nmesh dp 1 tp 1 policy dp\nend\n", 1,
         "'mesh' before"},
        {"mesh not the world", "nnsc-manifest 1\nrank 0 world 4\nmesh dp 2 tp 1 policy dp\n"
         "end\n", 1, "not the world of 4"},
        {"mesh without policy", "mesh dp 1 tp 1\nend\n", 0, "missing policy"},
        {"mesh twice", "mesh dp 1 tp 1 policy dp\nmesh dp 1 tp 1 policy dp\nend\n", 0,
         "given twice"},
        {"param_count negative", "param_count -5\nend\n", 0, "param_count"},
        {"flops_per_step negative", "flops_per_step -1\nend\n", 0, "negative"},
        {"flops_per_step not a number", "flops_per_step lots\nend\n", 0, "not a finite"},
        {"unknown matmul dtype", "dtype f16\nend\n", 0, "expected f32 or bf16"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char text[1024];
        snprintf(text, sizeof text, "%s%s", cases[k].whole ? "" : head, cases[k].body);
        job j = {{NULL}, {"rank", NULL}, text, ACT_NONE};
        result r = run(&j);
        char *first = strtok(r.err, "\n");
        int runtime = strstr(cases[k].say, "configured") != NULL;   /* checked at start-up */
        check(r.code == 2 && first && (runtime || strstr(first, "bad embedded manifest")) &&
              strstr(first, cases[k].say),
              "manifest %s: exit %d: %.150s", cases[k].what, r.code, first ? first : "");
    }
    job j = {{NULL}, {"rank", NULL}, good_manifest, ACT_NONE};
    result r = run(&j);
    check(r.code == 0 && !r.err[0], "a good manifest with every record kind is accepted");
    rt_manifest m;
    char err[256];
    int bad = rt_manifest_parse(full_manifest, &m, err, sizeof err);
    check(!bad && m.mesh_dp == 1 && m.mesh_tp == 1 && !strcmp(m.policy, "dp") &&
          m.param_count == 12 && m.flops_per_step == 1e6 && m.bf16 && m.nstream == 1 &&
          m.inputs[0].dist == RT_DIST_STREAM && m.inputs[0].range == 7,
          "mesh, param_count, flops_per_step, dtype and `dist stream K int R` are read (%s)",
          bad ? err : "ok");
    if (!bad)
        rt_manifest_free(&m);
    /* a token input without a data file: the synthetic values of `dist int 7` */
    job js = {{NULL}, {"rank", "--peak-flops", "1M", NULL}, full_manifest, ACT_STEPS};
    r = run(&js);
    check(r.code == 0 && strstr(r.out, "synthetic tokens") && strstr(r.out, "12 params") &&
          strstr(r.out, "mesh dp1 x tp1 (dp)") && strstr(r.out, "1.0 MFLOP/step") &&
          strstr(r.out, " mfu ") && !strstr(r.out, " mfu -"),
          "a token input runs on synthetic tokens without a data file; banner and mfu");
}

static void test_steps_and_arena(void)
{
    job j = {{NULL}, {"rank0", NULL}, good_manifest, ACT_STEPS};
    result r = run(&j);
    int ok = r.code == 0, lines = 0;
    int banner = 0, summary = 0;
    for (char *ln = strtok(r.out, "\n"); ln; ln = strtok(NULL, "\n")) {
        long long s, n;
        char lossbuf[64], want[64], gnorm[64], tps[64], eta[64], mfu[64], mem[64];
        double ms, lr, l;
        int used = 0;
        /* the banner (two lines) before the steps, the summary after them */
        if (!strncmp(ln, "model m:", 8) || !strncmp(ln, "run: 4 steps,", 13)) {
            ok &= lines == 0;
            banner++;
            continue;
        }
        if (!strncmp(ln, "done: 4 steps in ", 17)) {
            ok &= lines == 4 && strstr(ln, "final loss 0.333333343") && strstr(ln, "mfu -");
            summary++;
            continue;
        }
        /* the prefix that `nnsc-aot verify` reads, exactly as it reads it */
        if (sscanf(ln, "step %lld/%lld loss %lf", &s, &n, &l) != 3) {
            ok = 0;
            continue;
        }
        if (sscanf(ln, "step %lld/%lld loss %63s gnorm %63s lr %lf ms %lf tok/s %63s mfu %63s mem "
                       "%63s eta %63s%n", &s, &n, lossbuf, gnorm, &lr, &ms, tps, mfu, mem, eta,
                   &used) != 10 || ln[used] != 0 || strcmp(mfu, "-") != 0 ||
            !strstr(mem, "iB")) {
            ok = 0;
            continue;
        }
        snprintf(want, sizeof want, "%.9g", (double)(2.0f / (float)(s - 1 + 3)));
        /* manifest lr 0.001, warmup 2 steps, then cosine over the remaining 2 to 0.1 */
        double want_lr = 0.001 * (s <= 2 ? s / 2.0 : 0.1 + 0.9 * 0.5 * (1 + cos(M_PI * (s - 3) / 2.0)));
        ok &= s == lines + 1 && n == 4 && !strcmp(lossbuf, want) && ms >= 0 &&
              !strcmp(gnorm, "-") && fabs(lr - want_lr) <= 1e-4 * want_lr && eta[0] &&
              strcmp(tps, "-") != 0;
        lines++;
    }
    check(ok && lines == 4 && banner == 2 && summary == 1,
          "step log: banner, 4 lines 'step S/N loss %%.9g gnorm G lr LR ms T tok/s X mfu - mem M "
          "eta E' (S 1-based, lr from the schedule, no peak: mfu -), summary");
    job jq = {{NULL}, {"rank0", "--quiet", NULL}, good_manifest, ACT_STEPS};
    r = run(&jq);
    check(r.code == 0 && strncmp(r.out, "step ", 5) != 0 && !strstr(r.out, "\nstep ") &&
          strstr(r.out, "done: 4 steps"),
          "--quiet: no step lines (the banner and the summary stay)");
    job jp = {{NULL}, {"rank0", "--peak-flops", "2k", NULL}, good_manifest, ACT_STEPS};
    r = run(&jp);
    check(r.code == 0 && strstr(r.out, "mfu -") && strstr(r.out, "peak 2.0 kFLOP/s per device"),
          "--peak-flops 2k: taken; still mfu - without flops_per_step");

    char logp[64];
    snprintf(logp, sizeof logp, "/tmp/rtinit-%d.jsonl", (int)getpid());
    job jl = {{NULL}, {"rank0", "--quiet", "--log", logp, NULL}, good_manifest, ACT_STEPS};
    r = run(&jl);
    char log[4096];
    slurp(logp, log, sizeof log);
    int jok = r.code == 0, jlines = 0;
    int jstart = 0, jsummary = 0;
    for (char *ln = strtok(log, "\n"); ln; ln = strtok(NULL, "\n")) {
        long long s;
        double l, lr, ms, tps, eta, rss;
        int used = 0;
        if (!strncmp(ln, "{\"start\":{\"model\":\"m\",", 20)) {
            jstart++;
            continue;
        }
        if (!strncmp(ln, "{\"summary\":{\"steps_run\":4,", 26)) {
            jsummary++;
            continue;
        }
        jok &= sscanf(ln, "{\"step\":%lld,\"loss\":%lf,\"grad_norm\":null,\"lr\":%lf,\"ms\":%lf,"
                          "\"tokens_per_s\":%lf,\"eta_s\":%lf,\"mfu\":null,\"peak_rss_bytes\":%lf}%n",
                      &s, &l, &lr, &ms, &tps, &eta, &rss, &used) == 7 && ln[used] == 0 &&
               s == jlines + 1 && (float)l == 2.0f / (float)(s + 2) && rss > 0;
        jlines++;
    }
    check(jok && jlines == 4 && jstart == 1 && jsummary == 1,
          "--log: a start line, 4 JSON lines {step, loss, grad_norm (null: not computed), lr, "
          "ms, tokens_per_s, eta_s, mfu, peak_rss_bytes} and a summary line, even with --quiet");
    job jl2 = {{NULL}, {"rank0", "--quiet", "--log", logp, "--steps", "1", NULL}, good_manifest,
               ACT_STEPS};
    r = run(&jl2);
    slurp(logp, log, sizeof log);
    check(r.code == 0 && strstr(log, "{\"step\":1,") && !strstr(log, "{\"step\":2,"),
          "--log: a new run starts the file afresh");
    if (!(jok && jlines == 4))
        printf("%s", log);
    unlink(logp);
    job js = {{NULL}, {"rank0", "--steps", "2", NULL}, good_manifest, ACT_STEPS};
    r = run(&js);
    check(r.code == 0 && strstr(r.out, "step 2/2 ") && !strstr(r.out, "step 3"),
          "--steps 2: two lines, N = 2");
    job ja = {{NULL}, {"rank0", NULL}, good_manifest, ACT_ARENA};
    r = run(&ja);
    check(r.code == 0, "arena: 64-byte aligned and zeroed");
}

/* --peak-flops values, the GPU peak table, and the human units of the banner. */
static void test_units(void)
{
    static const struct {
        const char *in;
        double want;   /* 0: rejected */
    } flops[] = {{"1.5e12", 1.5e12}, {"312T", 312e12}, {"50G", 50e9}, {"2k", 2e3},
                 {"1P", 1e15}, {"7", 7}, {"0", 0}, {"-1T", 0}, {"3X", 0}, {"12TT", 0},
                 {"", 0}, {"T", 0}, {"inf", 0}, {"nan", 0}};
    int ok = 1;
    for (size_t k = 0; k < sizeof flops / sizeof flops[0]; k++) {
        double x = 0;
        int bad = rt_parse_flops(flops[k].in, &x);
        ok &= flops[k].want ? !bad && fabs(x - flops[k].want) <= 1e-9 * flops[k].want : bad;
    }
    check(ok, "--peak-flops: 1.5e12, 312T, 50G, 2k, 1P, 7 taken; 0, -1T, 3X, 12TT, '', T, inf, "
          "nan rejected");
    char src[96];
    ok = rt_peak_of_device("NVIDIA H100 80GB HBM3", 1, src, sizeof src) == 989e12 &&
         strstr(src, "bf16") && rt_peak_of_device("NVIDIA H100 80GB HBM3", 0, src, sizeof src) == 67e12 &&
         rt_peak_of_device("NVIDIA H100 PCIe", 1, src, sizeof src) == 756e12 &&
         rt_peak_of_device("NVIDIA H200", 1, src, sizeof src) == 989e12 &&
         rt_peak_of_device("NVIDIA A100-SXM4-80GB", 0, src, sizeof src) == 19.5e12 &&
         rt_peak_of_device("NVIDIA H100 NVL", 1, src, sizeof src) == 0 && !src[0] &&
         rt_peak_of_device("NVIDIA GeForce RTX 4090", 1, src, sizeof src) == 0 &&
         rt_peak_of_device("", 0, src, sizeof src) == 0;
    check(ok, "peak table: H100 SXM 989T/67T, H100 PCIe 756T, H200 989T, A100 f32 19.5T; NVL, "
          "others and no device: none");
    char b[32];
    ok = !strcmp(rt_human_count(b, sizeof b, 834304), "834k") &&
         !strcmp(rt_human_count(b, sizeof b, 1.24e6), "1.2M") &&
         !strcmp(rt_human_count(b, sizeof b, 124439808), "124M") &&
         !strcmp(rt_human_count(b, sizeof b, 54), "54") &&
         !strcmp(rt_human_bytes(b, sizeof b, 10320000), "9.8MiB") &&
         !strcmp(rt_human_bytes(b, sizeof b, 640 * 1024), "640KiB") &&
         !strcmp(rt_human_bytes(b, sizeof b, 1.5 * 1024 * 1024 * 1024), "1.5GiB");
    check(ok, "human units: 834k, 1.2M, 124M, 54; 9.8MiB, 640KiB, 1.5GiB");
}


/* -q, "did you mean", and the files the flags name when they are not
 * regular files. */
static void test_flag_paths(void)
{
    result r = run_flags("-q", "--steps", "2");
    check(r.code == 0 && strstr(r.out, "quiet 1"), "-q is --quiet (exit %d)", r.code);
    r = run_flags("--stpes", "3", NULL);
    check(r.code == 2 && strstr(r.err, "unknown flag '--stpes': did you mean '--steps'?"),
          "--stpes: did you mean '--steps'? (%s)", strtok(r.err, "\n"));
    r = run_flags("--ckpt_dir=x", NULL, NULL);
    check(r.code == 2 && strstr(r.err, "did you mean '--ckpt-dir'?"),
          "--ckpt_dir=x: did you mean '--ckpt-dir'? (%s)", strtok(r.err, "\n"));
    r = run_flags("-quiet", NULL, NULL);
    check(r.code == 2 && strstr(r.err, "did you mean '--quiet'?"), "-quiet: did you mean "
          "'--quiet'?");
    r = run_flags("--frobnicate", NULL, NULL);
    check(r.code == 2 && !strstr(r.err, "did you mean"), "--frobnicate: no suggestion (none is "
          "near)");

    char dir[64], fifo[96], path[128];
    snprintf(dir, sizeof dir, "/tmp/rtinit-paths-%d", (int)getpid());
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    if (mkdir(dir, 0700) != 0 || mkfifo(fifo, 0600) != 0) {
        perror(dir);
        exit(1);
    }
    double t0 = rt_now();
    job jl = {{NULL}, {"rank0", "--log", fifo, NULL}, good_manifest, ACT_STEPS};
    r = run(&jl);
    check(r.code == 2 && strstr(r.err, "--log") && strstr(r.err, fifo) &&
          strstr(r.err, "no process reading it") && rt_now() - t0 < 10,
          "--log FIFO without a reader: exit %d in %.2f s, never blocks (%s)", r.code,
          rt_now() - t0, strtok(r.err, "\n"));
    int rd = open(fifo, O_RDONLY | O_NONBLOCK);   /* a reader: now the log may go there */
    r = run(&jl);
    char got[4096] = "";
    ssize_t n = rd >= 0 ? read(rd, got, sizeof got - 1) : -1;
    got[n > 0 ? n : 0] = 0;
    check(r.code == 0 && strstr(got, "{\"start\":") && strstr(got, "{\"summary\":"),
          "--log FIFO that a process reads: the JSON lines go there (exit %d)", r.code);
    if (rd >= 0)
        close(rd);
    job jn = {{NULL}, {"rank0", "--log", "/dev/null", NULL}, good_manifest, ACT_STEPS};
    r = run(&jn);
    check(r.code == 0, "--log /dev/null: accepted (exit %d %s)", r.code, strtok(r.err, "\n"));
    job jd = {{NULL}, {"rank0", "--log", dir, NULL}, good_manifest, ACT_STEPS};
    r = run(&jd);
    check(r.code == 2 && strstr(r.err, "--log"), "--log a directory: exit %d", r.code);
    job jt = {{NULL}, {"rank0", "--trace", fifo, NULL}, good_manifest, ACT_STEPS};
    t0 = rt_now();
    r = run(&jt);
    check(r.code == 2 && strstr(r.err, "--trace") && strstr(r.err, fifo) && !strstr(r.out, "step "),
          "--trace FIFO: exit %d at start-up, before any step (%s)", r.code, strtok(r.err, "\n"));
    snprintf(path, sizeof path, "%s/t.json", dir);
    job jt2 = {{NULL}, {"rank0", "--trace", path, NULL}, good_manifest, ACT_STEPS};
    r = run(&jt2);
    char tr[4096];
    slurp(path, tr, sizeof tr);
    check(r.code == 0 && strstr(tr, "\"traceEvents\"") && strstr(tr, "step 4"),
          "--trace FILE: written (exit %d)", r.code);
    job js = {{NULL}, {"rank0", "--save", fifo, NULL}, good_manifest, ACT_STEPS};
    r = run(&js);
    check(r.code == 2 && strstr(r.err, "--save") && strstr(r.err, "FIFO") && !strstr(r.out, "step "),
          "--save FIFO: exit %d at start-up, before any step (%s)", r.code, strtok(r.err, "\n"));
    job js2 = {{NULL}, {"rank0", "--save", dir, NULL}, good_manifest, ACT_STEPS};
    r = run(&js2);
    check(r.code == 2 && strstr(r.err, "a directory"), "--save a directory: exit %d (%s)", r.code,
          strtok(r.err, "\n"));
    job ji = {{NULL}, {"rank0", "--init", fifo, NULL}, good_manifest, ACT_STEPS};
    t0 = rt_now();
    r = run(&ji);
    check(r.code == 2 && strstr(r.err, "--init") && strstr(r.err, fifo) && strstr(r.err, "FIFO") &&
          rt_now() - t0 < 10, "--init FIFO: exit %d in %.2f s (%s)", r.code, rt_now() - t0,
          strtok(r.err, "\n"));
    snprintf(path, sizeof path, "%s/ck", dir);
    char step5[160];
    snprintf(step5, sizeof step5, "%s/step-5.safetensors", path);
    if (mkdir(path, 0700) != 0 || mkfifo(step5, 0600) != 0) {
        perror(step5);
        exit(1);
    }
    job jr = {{NULL}, {"rank0", "--ckpt-dir", path, "--resume", NULL}, good_manifest, ACT_STEPS};
    t0 = rt_now();
    r = run(&jr);
    check(r.code == 2 && strstr(r.err, step5) && strstr(r.err, "FIFO") && rt_now() - t0 < 10,
          "--resume with a FIFO as DIR/step-5.safetensors: exit %d in %.2f s (%s)", r.code,
          rt_now() - t0, strtok(r.err, "\n"));
    unlink(step5);
    rmdir(path);
    unlink(fifo);
    snprintf(path, sizeof path, "%s/t.json", dir);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    test_flags();
    test_flag_paths();
    test_threads();
    test_env();
    test_manifest_errors();
    test_steps_and_arena();
    test_units();
    return check_done();
}
