/* test_rt_train.c -- the training loop's pieces (train.c): lr schedule
 * values, sumsq (against the reference and an exact sum, the same bits on
 * any number of threads), gradclip, sgd/adamw under the lr and gradient
 * multipliers, the step line with the gradient norm, evaluation due/report;
 * a non-finite loss or gradient norm stops the run at its step (exit 1, no
 * checkpoint of that step, the last one named).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rt_internal.h"

/* A one-rank manifest with a schedule, eval settings, and a param. */
static void manifest(char *out, size_t len, const char *sched, int64_t warmup, double frac,
                     int64_t eval_every, int64_t eval_steps)
{
    snprintf(out, len,
             "nnsc-manifest 1\nmodel traintest\nrank 0 world 1\narena 4096\nsteps 10\n"
             "micro_batches 1\nseed 1\nlr 0.5\n"
             "param 0 w f32 1 8 box 0 8 init normal 1 0 off 0 writer 1\n"
             "eval_every %lld\neval_steps %lld\nschedule %s warmup %lld min_lr_frac %.17g\n"
             "clip 1\ntokens_per_step 100\nend\n",
             (long long)eval_every, (long long)eval_steps, sched, (long long)warmup, frac);
}

/* Parse a manifest text (exits on error: the texts here are good). */
static rt_manifest parse(const char *text)
{
    rt_manifest m;
    char err[512];
    if (rt_manifest_parse(text, &m, err, sizeof err)) {
        printf("FAIL  manifest: %s\n", err);
        exit(1);
    }
    return m;
}

static void test_schedule(void)
{
    char text[1024];
    manifest(text, sizeof text, "constant", 0, 0, 0, 1);
    rt_manifest m = parse(text);
    int ok = 1;
    for (int64_t s = 0; s < 10; s++)
        ok &= rt_lr_scale(&m, 10, s) == 1.0;
    check(ok, "constant, no warmup: scale 1 at every step");
    rt_manifest_free(&m);

    manifest(text, sizeof text, "constant", 4, 0, 0, 1);
    m = parse(text);
    double want[6] = {0.25, 0.5, 0.75, 1, 1, 1};
    ok = 1;
    for (int64_t s = 0; s < 6; s++)
        ok &= rt_lr_scale(&m, 10, s) == want[s];
    check(ok, "warmup 4: (s+1)/4 = 0.25 0.5 0.75 1, then 1");
    rt_manifest_free(&m);

    manifest(text, sizeof text, "cosine", 2, 0.1, 0, 1);
    m = parse(text);
    double worst = 0;
    for (int64_t s = 0; s < 10; s++) {
        double w = s < 2 ? (s + 1) / 2.0
                         : 0.1 + 0.9 * 0.5 * (1 + cos(3.14159265358979323846 * (s - 2) / 8.0));
        worst = fmax(worst, fabs(rt_lr_scale(&m, 10, s) - w));
    }
    check(worst < 1e-15, "cosine, warmup 2, min_lr_frac 0.1, 10 steps: F + (1-F)/2 (1 + cos(pi "
          "(s-W)/(N-W))) (max err %.1e)", worst);
    check(rt_lr_scale(&m, 10, 2) == 1.0 && fabs(rt_lr_scale(&m, 10, 6) - 0.55) < 1e-15 &&
          rt_lr_scale(&m, 10, 9) > 0.1 && fabs(rt_lr_scale(&m, 10, 10) - 0.1) < 1e-15,
          "cosine: 1 at s = W, halfway 0.55 at s = W + (N-W)/2, reaches F at s = N");
    ok = 1;
    for (int64_t s = 2; s < 9; s++)
        ok &= rt_lr_scale(&m, 10, s + 1) < rt_lr_scale(&m, 10, s);
    check(ok, "cosine: strictly decreasing after warmup");
    check(rt_lr_scale(&m, 2, 1) == 1.0 && rt_lr_scale(&m, 1, 0) == 0.5,
          "cosine with steps <= warmup: warmup only, no division by zero");
    rt_manifest_free(&m);
}

/* An exact sum of g^2 (pairs of doubles, compensated), as a long double. */
static long double exact_sumsq(const float *g, int64_t n)
{
    long double s = 0, c = 0;
    for (int64_t k = 0; k < n; k++) {
        long double y = (long double)g[k] * g[k] - c, t = s + y;
        c = (t - s) - y;
        s = t;
    }
    return s;
}

static void test_sumsq(void)
{
    static const int64_t sizes[] = {0, 1, 7, 16, 1000, 16385, 100003, 3 << 20};
    int64_t nmax = 3 << 20;
    float *g = malloc((size_t)nmax * sizeof *g);
    uint64_t st = 12345;
    for (int64_t k = 0; k < nmax; k++) {
        st = st * 6364136223846793005ULL + 1442695040888963407ULL;
        g[k] = (float)((double)(st >> 11) / 9007199254740992.0 - 0.5) * (k % 97 ? 1.0f : 30.0f);
    }
    for (size_t q = 0; q < sizeof sizes / sizeof sizes[0]; q++) {
        int64_t n = sizes[q];
        float s_fast[3], s_ref = 0;
        for (int nt = 1; nt <= 3; nt++) {
            rt_pool_init(nt);
            s_fast[nt - 1] = -1;
            int64_t ints[2] = {n, 0};
            void *b[2] = {g, &s_fast[nt - 1]};
            rt_k_sumsq(NULL, b, ints, NULL);
        }
        rt_pool_free();
        int64_t ints[2] = {n, 0};
        void *b[2] = {g, &s_ref};
        rt_ref_sumsq(NULL, b, ints, NULL);
        float exact = (float)exact_sumsq(g, n);
        check(s_fast[0] == s_fast[1] && s_fast[1] == s_fast[2] &&
              fabsf(s_fast[0] - exact) <= 1e-7f * exact && fabsf(s_ref - exact) <= 1e-7f * exact,
              "sumsq n = %-8lld same bits on 1, 2, 3 threads; fast %.9g ref %.9g exact %.9g",
              (long long)n, s_fast[0], s_ref, exact);
    }
    float acc_f = 2.5f, acc_r = 2.5f;
    int64_t ints[2] = {1000, 1};
    void *bf[2] = {g, &acc_f}, *br[2] = {g, &acc_r};
    rt_k_sumsq(NULL, bf, ints, NULL);
    rt_ref_sumsq(NULL, br, ints, NULL);
    float want = (float)(2.5L + exact_sumsq(g, 1000));
    check(acc_f == want && acc_r == want, "sumsq acc = 1 adds to S[0] (%.9g, %.9g, want %.9g)",
          acc_f, acc_r, want);
    free(g);
}

/* rt_init on a manifest text, quiet. */
static rt_ctx *start(const char *text)
{
    char *argv[] = {"test_rt_train", "--quiet", NULL};
    return rt_init(2, argv, text);
}

static void test_gradclip_and_optimizers(void)
{
    char text[1024];
    manifest(text, sizeof text, "constant", 0, 0, 0, 1);
    rt_ctx *ctx = start(text);
    float S = 16.0f;
    void *b[1] = {&S};
    float fmax1 = 1.0f, fmax10 = 10.0f, fmax0 = 0.0f;
    rt_step_begin(ctx, 0);
    check(ctx->grad_scale == 1.0f && isnan(ctx->grad_norm) && ctx->lr_scale == 1.0,
          "rt_step_begin: grad scale 1, norm unknown (NaN), lr scale of the schedule");
    rt_k_gradclip(ctx, b, NULL, &fmax1);
    check(ctx->grad_norm == 4.0 && ctx->grad_scale == (float)(1.0 / (4.0 + 1e-6)),
          "gradclip S = 16, max 1: norm 4, scale 1/(4 + 1e-6) = %.9g", ctx->grad_scale);
    rt_k_gradclip(ctx, b, NULL, &fmax10);
    check(ctx->grad_norm == 4.0 && ctx->grad_scale == 1.0f, "gradclip max 10 > norm: scale 1");
    rt_k_gradclip(ctx, b, NULL, &fmax0);
    check(ctx->grad_scale == 1.0f, "gradclip max 0: no clipping, scale 1");
    rt_step_begin(ctx, 1);
    check(ctx->grad_scale == 1.0f && isnan(ctx->grad_norm),
          "the next rt_step_begin resets the scale and the norm (no state across steps)");

    /* sgd and adamw with lr scale 0.5, grad scale 0.25 vs the formula */
    enum { N = 50000 };
    float *p = malloc(3 * N * sizeof *p), *pr = malloc(3 * N * sizeof *pr);
    float *g = malloc(N * sizeof *g);
    for (int k = 0; k < N; k++) {
        g[k] = sinf((float)k) * 3.0f;
        p[k] = pr[k] = cosf((float)k);
        p[N + k] = pr[N + k] = 0.1f * sinf((float)k * 0.7f);          /* m */
        p[2 * N + k] = pr[2 * N + k] = 0.2f + 0.1f * cosf((float)k);  /* v */
    }
    ctx->lr_scale = 0.5;
    ctx->grad_scale = 0.25f;
    float f[5] = {0.01f, 0.1f, 0.9f, 0.99f, 1e-8f};
    int64_t ia[2] = {N, 3};
    void *bf[4] = {p, g, p + N, p + 2 * N}, *br[4] = {pr, g, pr + N, pr + 2 * N};
    rt_k_adamw(ctx, bf, ia, f);
    rt_ref_adamw(ctx, br, ia, f);
    double worst = 0, worst_formula = 0;
    for (int k = 0; k < N; k++) {
        double gk = g[k] * 0.25, m0 = 0.1f * sinf((float)k * 0.7f);
        double v0 = 0.2f + 0.1f * cosf((float)k), p0 = cosf((float)k);
        double m1 = 0.9 * m0 + 0.1 * gk, v1 = 0.99 * v0 + 0.01 * gk * gk;
        double want = p0 - 0.005 * ((m1 / (1 - pow(0.9, 3))) /
                                    (sqrt(v1 / (1 - pow(0.99, 3))) + 1e-8) + 0.1 * p0);
        worst = fmax(worst, fabs((double)p[k] - pr[k]));
        worst_formula = fmax(worst_formula, fabs((double)p[k] - want));
    }
    check(worst < 1e-6 && worst_formula < 1e-6, "adamw with lr scale 0.5, grad scale 0.25: fast "
          "vs reference %.1e, vs formula %.1e", worst, worst_formula);
    float f2[2] = {0.1f, 0.01f};
    int64_t is[1] = {N};
    void *sf[2] = {p, g}, *sr[2] = {pr, g};
    memcpy(pr, p, N * sizeof *p);
    float *p0 = malloc(N * sizeof *p0);
    memcpy(p0, p, N * sizeof *p);
    rt_k_sgd(ctx, sf, is, f2);
    rt_ref_sgd(ctx, sr, is, f2);
    worst = worst_formula = 0;
    for (int k = 0; k < N; k++) {
        double want = p0[k] - 0.05 * (g[k] * 0.25 + 0.01 * p0[k]);
        worst = fmax(worst, fabs((double)p[k] - pr[k]));
        worst_formula = fmax(worst_formula, fabs((double)p[k] - want));
    }
    check(worst < 1e-6 && worst_formula < 1e-6, "sgd with lr scale 0.5, grad scale 0.25: fast vs "
          "reference %.1e, vs formula %.1e", worst, worst_formula);
    /* scales of 1: the same bits as without a context */
    ctx->lr_scale = 1.0;
    ctx->grad_scale = 1.0f;
    memcpy(pr, p0, N * sizeof *p);
    memcpy(p, p0, N * sizeof *p);
    rt_k_sgd(ctx, sf, is, f2);
    rt_k_sgd(NULL, sr, is, f2);
    check(!memcmp(p, pr, N * sizeof *p), "sgd with scales 1 gives the bits of plain sgd");
    free(p);
    free(pr);
    free(p0);
    free(g);
    rt_finish(ctx);
}

/* Run fn in a child with stdout to a file; returns the output (static). */
static const char *capture(void (*fn)(void))
{
    static char out[4096];
    char path[64];
    snprintf(path, sizeof path, "/tmp/rttrain-%d.out", (int)getpid());
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(path, "w", stdout))
            _exit(99);
        fn();
        fflush(stdout);
        _exit(0);
    }
    int stt;
    waitpid(pid, &stt, 0);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    if (f)
        fclose(f);
    unlink(path);
    return out;
}

/* Child: two steps with a gradclip in the first, an eval after each 2nd. */
static void child_log(void)
{
    char text[1024], logp[64];
    manifest(text, sizeof text, "constant", 0, 0, 2, 4);
    snprintf(logp, sizeof logp, "/tmp/rttrain-%d.jsonl", (int)getppid());
    char *argv[] = {"t", "--log", logp, "--steps", "4", NULL};
    rt_ctx *ctx = rt_init(5, argv, text);
    float S = 9.0f, fmax = 1.0f, loss = 1.5f, eloss = 10.0f;
    void *b[1] = {&S};
    for (int64_t s = rt_first_step(ctx); s < rt_steps(ctx); s++) {
        rt_step_begin(ctx, s);
        if (s == 0)
            rt_k_gradclip(ctx, b, NULL, &fmax);
        rt_step_end(ctx, s, &loss);
        if (rt_eval_due(ctx, s)) {
            if (rt_eval_steps(ctx) != 4)
                printf("eval_steps wrong\n");
            rt_eval_end(ctx, s, &eloss);
        }
    }
    rt_finish(ctx);
}

static void test_logs(void)
{
    const char *out = capture(child_log);
    check(strstr(out, "step 1/4 loss 1.5 gnorm 3 lr 0.5 ms ") && strstr(out, "step 2/4 loss 1.5 "
          "gnorm - lr 0.5 ms ") && strstr(out, " tok/s ") && strstr(out, " eta "),
          "step line: gnorm 3 after gradclip of S = 9, '-' in a step without; lr, tok/s, eta");
    check(strstr(out, "step 2/4 loss 1.5 gnorm - lr 0.5 ms") &&
          strstr(out, "\neval step 2 loss 2.5\n") && strstr(out, "\neval step 4 loss 2.5\n") &&
          !strstr(out, "eval step 1 ") && !strstr(out, "eval step 3 "),
          "eval_every 2: 'eval step S loss L' after steps 2 and 4, loss / eval_steps (10/4)");
    char logp[64], log[4096];
    snprintf(logp, sizeof logp, "/tmp/rttrain-%d.jsonl", (int)getpid());
    FILE *f = fopen(logp, "r");
    size_t n = f ? fread(log, 1, sizeof log - 1, f) : 0;
    log[n] = 0;
    if (f)
        fclose(f);
    unlink(logp);
    check(strstr(log, "{\"step\":1,\"loss\":1.5,\"grad_norm\":3,\"lr\":0.5,\"ms\":") &&
          strstr(log, "{\"step\":2,\"loss\":1.5,\"grad_norm\":null,") &&
          strstr(log, "\"tokens_per_s\":") && strstr(log, "\"eta_s\":") &&
          strstr(log, "\n{\"step\":2,\"eval_loss\":2.5}\n") &&
          strstr(log, "\n{\"step\":4,\"eval_loss\":2.5}\n"),
          "--log: step lines with grad_norm, and {\"step\":S,\"eval_loss\":L} lines");
}


/* What stop_child did. */
typedef struct stop_result {
    int code;           /* exit status, -1 if killed */
    char out[4096];     /* stdout */
    char err[1024];     /* stderr */
} stop_result;

/* A child running 4 steps with a checkpoint after each, the loss finite
 * (1.5) but at step 2 (0-based): kind 1 loss inf, 2 loss -inf, 3 loss NaN,
 * 4 gradclip of S = NaN, 5 gradclip of S = inf; 0: all finite. */
static stop_result stop_child(int kind)
{
    stop_result r;
    char po[64], pe[64], dir[64];
    snprintf(po, sizeof po, "/tmp/rttrain-stop-%d.out", (int)getpid());
    snprintf(pe, sizeof pe, "/tmp/rttrain-stop-%d.err", (int)getpid());
    snprintf(dir, sizeof dir, "/tmp/rttrain-stop-%d", (int)getpid());
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(po, "w", stdout) || !freopen(pe, "w", stderr))
            _exit(99);
        char text[1024];
        manifest(text, sizeof text, "constant", 0, 0, 0, 1);
        char *argv[] = {"t", "--steps", "4", "--ckpt-dir", dir, "--ckpt-every", "1", NULL};
        rt_ctx *ctx = rt_init(7, argv, text);
        for (int64_t s = rt_first_step(ctx); s < rt_steps(ctx); s++) {
            float S = s == 2 && kind == 4 ? NAN : s == 2 && kind == 5 ? INFINITY : 4.0f;
            float fmax = 1.0f, loss = 1.5f;
            void *b[1] = {&S};
            rt_step_begin(ctx, s);
            rt_k_gradclip(ctx, b, NULL, &fmax);
            if (s == 2 && kind >= 1 && kind <= 3)
                loss = kind == 1 ? INFINITY : kind == 2 ? -INFINITY : NAN;
            rt_step_end(ctx, s, &loss);
        }
        _exit(rt_finish(ctx));
    }
    int st;
    waitpid(pid, &st, 0);
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    FILE *f = fopen(po, "r");
    size_t n = f ? fread(r.out, 1, sizeof r.out - 1, f) : 0;
    r.out[n] = 0;
    if (f)
        fclose(f);
    f = fopen(pe, "r");
    n = f ? fread(r.err, 1, sizeof r.err - 1, f) : 0;
    r.err[n] = 0;
    if (f)
        fclose(f);
    unlink(po);
    unlink(pe);
    return r;
}

static void test_nonfinite_stop(void)
{
    static const char *const what[] = {"", "the loss is inf", "the loss is -inf",
                                       "the loss is nan", "the gradient norm is nan",
                                       "the gradient norm is inf"};
    char dir[64], cmd[128], ck[160], ck3[160];
    snprintf(dir, sizeof dir, "/tmp/rttrain-stop-%d", (int)getpid());
    snprintf(ck, sizeof ck, "the newest checkpoint, %s/step-2.safetensors, is intact", dir);
    snprintf(ck3, sizeof ck3, "%s/step-3.safetensors", dir);
    for (int kind = 0; kind <= 5; kind++) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            exit(1);
        stop_result r = stop_child(kind);
        int no3 = access(ck3, F_OK) != 0;
        if (kind == 0) {
            check(r.code == 0 && !no3, "finite losses and norms: 4 steps, exit %d", r.code);
            continue;
        }
        /* a loss is known after its step line; gradclip stops before the update */
        int line3 = strstr(r.out, "step 3/4 ") != NULL;
        check(r.code == 1 && strstr(r.err, "step 3: ") && strstr(r.err, what[kind]) &&
              strstr(r.err, ck) && no3 && !strstr(r.out, "step 4/4") && !strstr(r.out, "done:") &&
              line3 == (kind <= 3),
              "%s at step 3: exit %d, stops there, no step-3 checkpoint, step-2 named: %s",
              what[kind], r.code, strtok(r.err, "\n"));
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        exit(1);
}

int main(void)
{
    test_schedule();
    test_sumsq();
    test_gradclip_and_optimizers();
    test_logs();
    test_nonfinite_stop();
    return check_done();
}
