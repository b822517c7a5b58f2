/* profile.c -- nnsc-aot profile -o FILE: calibrate the cpu-host profile
 * on this machine, or with --target cuda the GPU profile the spec names
 * on GPUs (docs/plan-search.md, Calibration).
 *
 * Five runs of a model (the one given, else a small transformer-shaped
 * one built in) the compiler builds (the generated kernels and the
 * shared-memory collectives are what is timed, one kernel thread per rank,
 * as the ranks run one per core; --set overrides apply to every run), each
 * with N ranks busy at once (--ranks N, default 2: on a CPU the ranks share
 * caches and memory bandwidth, so a kernel is slower with its neighbours
 * busy).  Each pair differs in what one figure prices:
 *
 *   one      1 rank, N copies at once, 1 micro-batch    the FLOP/s
 *   small    the same with K micro-batches (the most   weight_bw: the same
 *            up to 16 dividing the batch)              FLOPs, K passes over
 *                                                      the weights
 *   dp       dp N, 1 micro-batch (large all-reduces)   the link's bandwidth
 *   tp       tp N, 1 micro-batch (smaller ones)        and latency
 *   tpsmall  tp N, K micro-batches (K times the        (least squares over
 *            messages, the same bytes)                 the three)
 *
 * The fit goes through the cost model's own estimates of those runs (fit).
 * --rounds R runs them R times, round by round, and takes each run's
 * median over the rounds.
 *
 * FILE is a profile `[cluster] device = FILE` reads (an INI [cluster]
 * section: device = cpu-host and the measured figures).
 *
 * --target cuda: the runs are built for GPUs, a rank per GPU (the 1-rank
 * runs once: a GPU is not shared), and FILE refines the GPU profile the
 * spec or --set cluster.device names (its FLOP/s and weight_bw measured;
 * its memory bandwidth, memory and links kept).  --ranks defaults to 1
 * there: one GPU has no link, so the dp and tp runs are left out and the
 * links stay the profile's.
 *
 * A cluster has no compiler: --pack DIR builds the runs into DIR with
 * DIR/run.sh, which runs them there and writes their logs; --from DIR -o
 * FILE then fits the profile from those logs where the compiler is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#include "frontend.h"

static const char cal_spec[] =
    "; the calibration model of nnsc-aot profile\n"
    "[model]\nname = calibrate\nseed = 5\n"
    "[dims]\nB = 16\nT = 64\nC = 256\nF = 4*C\nL = 2\n"
    "[input x]\nshape = B T C\n[input y]\nshape = B T C\n"
    "[block h]\nrepeat = L\nin = x\nout = z\n"
    "[param h.ln_w]\nshape = C\ninit = ones\n[param h.ln_b]\nshape = C\ninit = zeros\n"
    "[op h.ln]\nkind = layernorm\nin = h.in, h.ln_w, h.ln_b\nout = h.a, h.a_mean, h.a_rstd\n"
    "[param h.w1]\nshape = C F\ninit = normal 0.02\n"
    "[op h.fc]\nkind = matmul\nin = h.a, h.w1\nout = h.f\n"
    "[op h.act]\nkind = gelu\nin = h.f\nout = h.g\n"
    "[param h.w2]\nshape = F C\ninit = normal 0.02\n"
    "[op h.fc2]\nkind = matmul\nin = h.g, h.w2\nout = h.m\n"
    "[op h.res]\nkind = add\nin = h.in, h.m\nout = h.out\n"
    "[op loss]\nkind = mse_loss\nin = z, y\nout = loss\n"
    "[train]\nloss = loss\nlr = 1e-4\nsteps = 10\n";

/* The command line's --set overrides, then a, then b (later ones win): a
 * new array (free it), its length in *n. */
static const char **join_sets(const fe_opts *o, const char *const *a, int na, const char *const *b, int nb, int *n)
{
    const char **all = ir_xmalloc(sizeof *all * ((size_t)o->nset + (size_t)na + (size_t)nb + 1));
    *n = 0;
    for (int i = 0; i < o->nset; i++) all[(*n)++] = o->sets[i];
    for (int i = 0; i < na; i++) all[(*n)++] = a[i];
    for (int i = 0; i < nb; i++) all[(*n)++] = b[i];
    return all;
}

/* Build the calibration spec into dir/name with the command line's --set
 * overrides and then sets; 0 or the compiler's status. */
static int build(const fe_opts *o, const char *spec, const char *dir, const char *name, const char *const *sets,
                 int nset)
{
    fe_opts b;
    memset(&b, 0, sizeof b);
    b.spec = spec;
    char out[4096];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    b.out = out;
    b.cpu = o->cpu ? o->cpu : "x86-64-v3";
    b.opt_level = o->opt_level ? o->opt_level : 2;
    b.quiet = 1;
    b.target = o->target;   /* (cuda: the cubins for o's --arch) */
    b.archs = o->archs;
    b.narch = o->narch;
    const char **all = join_sets(o, sets, nset, NULL, 0, &b.nset);
    b.sets = all;
    int rc = fe_compile(&b);
    free(all);
    return rc;
}

/* The cost model's step (seconds) of spec with the command line's
 * overrides, then sets, then the profile figures flops, bw, lat and
 * 1 / weight_bw (wx: seconds per byte; 0, weights not priced). */
static int estimate(const fe_opts *o, const char *spec, const char *const *sets, int nset, double flops, double bw,
                    double lat, double wx, double *step)
{
    char f[5][64];
    snprintf(f[0], sizeof f[0], "cluster.flops=%.9g", flops);
    snprintf(f[1], sizeof f[1], "cluster.flops_bf16=%.9g", flops);
    snprintf(f[2], sizeof f[2], "cluster.link_bw=%.9g", bw);
    snprintf(f[3], sizeof f[3], "cluster.link_lat=%.9g", lat);
    snprintf(f[4], sizeof f[4], "cluster.weight_bw=%.9g", wx > 0 ? 1 / wx : 0);
    const char *fp[5] = {f[0], f[1], f[2], f[3], f[4]}, **all;
    int n;
    all = join_sets(o, sets, nset, fp, 5, &n);
    int rc = fe_estimate(spec, all, n, step);
    free(all);
    return rc;
}

/* The number after key on the last line of a run's log holding it, or -1. */
static double log_number(const char *log, const char *key)
{
    FILE *f = fopen(log, "r");
    if (!f) return -1;
    char line[1024];
    double v = -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, key);
        if (p) v = strtod(p + strlen(key), NULL);
    }
    fclose(f);
    return v;
}

/* The median step (ms) a run's log reports, or -1. */
static double log_median(const char *log) { return log_number(log, "step median "); }

/* The world size a run's log names ("world N"), or -1. */
static int log_world(const char *log) { return (int)log_number(log, " world "); }

/* The calibration runs: names, settings (the worlds and the small run's
 * micro-batches set by set_runs). */
enum { RUN_ONE, RUN_SMALL, RUN_DP, RUN_TP, RUN_TPSMALL, NRUN };
static const char *const run_name[NRUN] = {"one", "small", "dp", "tp", "tpsmall"};
static char world_set[40], small_set[40];
static const char *s_one[] = {"cluster.devices=1", "train.micro_batches=1"};
static const char *s_small[] = {"cluster.devices=1", small_set};
static const char *s_dp[] = {world_set, "plan.policy=dp", "train.micro_batches=1"};
static const char *s_tp[] = {world_set, "plan.policy=tp", "train.micro_batches=1"};
static const char *s_tpsmall[] = {world_set, "plan.policy=tp", small_set};
static const char *const *const run_set[NRUN] = {s_one, s_small, s_dp, s_tp, s_tpsmall};
static const int run_nset[NRUN] = {2, 2, 3, 3, 3};
static void set_runs(int n, int K)
{
    snprintf(world_set, sizeof world_set, "cluster.devices=%d", n);
    snprintf(small_set, sizeof small_set, "train.micro_batches=%d", K);
}
/* The cuda target: the runs on GPUs, a rank per GPU (the 1-rank runs once). */
static int cal_cuda;
/* Run k is built and run: the small runs only where the batch has K, the
 * link's (dp, tp) only with n >= 2 ranks. */
static int wanted(int k, int K, int n)
{
    return (K || (k != RUN_SMALL && k != RUN_TPSMALL)) && (n >= 2 || k == RUN_ONE || k == RUN_SMALL);
}
/* The 1-rank runs go as N copies at once (the others' ranks are N already);
 * on GPUs once, a rank alone on its GPU. */
static int copies(int k) { return k == RUN_ONE || k == RUN_SMALL; }
static int ncopies(int k, int n) { return !copies(k) ? 1 : cal_cuda ? 1 : n; }

/* The small run's micro-batches: the most, up to 16, that divide the
 * model's batch (0: none, the batch is 1 or has no divisor in 2..16), and
 * in base the built-in profile the spec and overrides name (the one the
 * calibration refines).  0, or the frontend's status. */
static int small_mb(const fe_opts *o, const char *spec, int *K, char *base, size_t nbase)
{
    int n;
    const char **all = join_sets(o, s_one, 2, NULL, 0, &n);
    ir_graph g;
    int rc = fe_load(spec, all, n, &g);
    free(all);
    if (rc) return rc;
    snprintf(base, nbase, "%s", g.prof.name);
    int64_t B = 0;
    for (int t = 0; t < g.nt && !B; t++)
        if (g.t[t].kind == IR_T_INPUT && g.t[t].batch_dim >= 0) B = g.t[t].shape[g.t[t].batch_dim];
    ir_graph_free(&g);
    *K = 0;
    for (int k = 16; k >= 2 && !*K; k--)
        if (B % k == 0) *K = k;
    return 0;
}

/* Run k's median step (ms) in the logs of dir (one round): the 1-rank runs'
 * the mean over their copies NAME-1.log..NAME-n.log, the others' NAME.log;
 * -1 (*bad: the log that has none). */
static double run_ms(const char *dir, int k, int n, char *bad, size_t nbad)
{
    if (!copies(k)) {
        snprintf(bad, nbad, "%s/%s.log", dir, run_name[k]);
        return log_median(bad);
    }
    double sum = 0;
    int nc = ncopies(k, n);
    for (int c = 1; c <= nc; c++) {
        snprintf(bad, nbad, "%s/%s-%d.log", dir, run_name[k], c);
        double ms = log_median(bad);
        if (ms <= 0) return -1;
        sum += ms;
    }
    return sum / nc;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Run k's median step (ms) in dir: with rounds (dir/r1, dir/r2, ...) the
 * median over them, else run_ms of dir; -1 (*bad as run_ms). */
static double rounds_ms(const char *dir, int k, int n, char *bad, size_t nbad)
{
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/r1", dir);
    if (!is_dir(sub)) return run_ms(dir, k, n, bad, nbad);
    double v[100];
    int nr = 0;
    for (; nr < 100; nr++) {
        snprintf(sub, sizeof sub, "%s/r%d", dir, nr + 1);
        if (!is_dir(sub)) break;
        if ((v[nr] = run_ms(sub, k, n, bad, nbad)) <= 0) return -1;
    }
    qsort(v, (size_t)nr, sizeof v[0], cmp_double);
    return nr % 2 ? v[nr / 2] : (v[nr / 2 - 1] + v[nr / 2]) / 2;
}

/* The shell command of DIR/run.sh (--pack) that runs calibration run k of
 * directory HERE (a shell word: a quoted variable of the script) into LOGS
 * (one too) for steps: the 1-rank runs as n copies at
 * once, logs NAME-1.log..NAME-n.log; the others once, NAME.log. */
static void run_cmd(char *cmd, size_t ncmd, const char *here, const char *logs, int k, int n, int64_t steps)
{
    const char *name = run_name[k];
    if (copies(k))
        snprintf(cmd, ncmd,
                 "pids=; for k in $(seq %d); do NNSC_THREADS=1 %s/%s/launch --steps %lld --quiet >%s/%s-$k.log "
                 "2>&1 & pids=\"$pids $!\"; done; rc=0; for p in $pids; do wait $p || rc=1; done; [ $rc = 0 ]",
                 ncopies(k, n), here, name, (long long)steps, logs, name);
    else
        snprintf(cmd, ncmd, "NNSC_THREADS=1 %s/%s/launch --steps %lld --quiet >%s/%s.log 2>&1", here, name,
                 (long long)steps, logs, name);
}

/* The environment of the calibration runs: ours with NNSC_THREADS=1 (one
 * kernel thread per rank, as the ranks run one per core). */
static char **run_env(void)
{
    size_t n = 0;
    while (environ[n]) n++;
    char **env = ir_xmalloc(sizeof *env * (n + 2));
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "NNSC_THREADS=", 13)) env[m++] = environ[i];
    env[m++] = "NNSC_THREADS=1";
    env[m] = NULL;
    return env;
}

/* Run calibration run k of dir here, its logs into logs, for steps, and
 * wait: the 1-rank runs as n copies at once (NAME-1.log..NAME-n.log), the
 * others once (NAME.log).  The launcher is started with an argument vector
 * (posix_spawn), never through a shell, so no path can inject a command.
 * 0, or 1 when a run could not start or failed (its log says why). */
static int run_local(const char *here, const char *logs, int k, int n, int64_t steps)
{
    const char *name = run_name[k];
    int nc = ncopies(k, n), bad = 0;
    char launch[4200], nsteps[32];
    snprintf(launch, sizeof launch, "%s/%s/launch", here, name);
    snprintf(nsteps, sizeof nsteps, "%lld", (long long)steps);
    char *argv[] = {launch, "--steps", nsteps, "--quiet", NULL};
    char **env = run_env();
    pid_t *pid = ir_xmalloc(sizeof *pid * (size_t)nc);
    int started = 0;
    for (int c = 1; c <= nc; c++) {
        char log[4200];
        if (copies(k)) snprintf(log, sizeof log, "%s/%s-%d.log", logs, name, c);
        else snprintf(log, sizeof log, "%s/%s.log", logs, name);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
        int e = posix_spawn(&pid[started], launch, &fa, NULL, argv, env);
        posix_spawn_file_actions_destroy(&fa);
        if (e) {
            fprintf(stderr, "nnsc-aot: error: cannot run %s: %s\n", launch, strerror(e));
            bad = 1;
            break;
        }
        started++;
    }
    for (int c = 0; c < started; c++) {
        int st;
        while (waitpid(pid[c], &st, 0) < 0)
            if (errno != EINTR) { st = -1; break; }
        if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st)) bad = 1;
    }
    free(env);
    free(pid);
    return bad;
}

/* Build the runs (the small one only with K > 0) into dir; 0 or the
 * compiler's status. */
static int build_runs(const fe_opts *o, const char *spec, const char *dir, int K, int n)
{
    for (int k = 0; k < NRUN; k++) {
        if (!wanted(k, K, n)) continue;
        int rc = build(o, spec, dir, run_name[k], run_set[k], run_nset[k]);
        if (rc) return rc;
    }
    return 0;
}

/* The cost model's step (seconds) of run k with weights not priced, and
 * the bytes its micro-batches' kernels go over without a batch dim on the
 * slowest rank (the step's slope in 1 / weight_bw). */
static int est_run(const fe_opts *o, const char *spec, int k, double flops, double *e, double *wbytes)
{
    int rc = estimate(o, spec, run_set[k], run_nset[k], flops, 1e18, 0, 0, e);
    if (rc || !wbytes) return rc;
    double e2;
    if ((rc = estimate(o, spec, run_set[k], run_nset[k], flops, 1e18, 0, 1e-9, &e2))) return rc;
    *wbytes = (e2 - *e) / 1e-9;
    return 0;
}

/* Fit the profile to the runs' steps t[] (seconds; t[RUN_SMALL] unused
 * with K = 0): the FLOP/s and weight_bw from the 1-rank runs (1 and K
 * micro-batches: the same FLOPs, K times the passes over the weights), then
 * the link's bandwidth and latency from dp N and tp N.  *wbw_out 0: the K
 * micro-batches cost no more than 1 (weights not priced); with n < 2 ranks
 * no link (*bw_out, *lat_out 0).  0, or the compiler's status. */
static int fit(const fe_opts *o, const char *spec, const double *t, int K, int n, double *flops_out,
               double *wbw_out, double *bw_out, double *lat_out)
{
    int rc;
    double flops = 1e11, x = 0, e1, eS, n1 = 0, nS = 0;   /* x: 1 / weight_bw */
    if ((rc = est_run(o, spec, RUN_ONE, flops, &e1, &n1)) || (K && (rc = est_run(o, spec, RUN_SMALL, flops, &eS, &nS))))
        return rc;
    /* each estimate is base(flops) + weight bytes x x, base about proportional to 1 / flops (the
       roofline's max bends it: iterate).  Both runs at once: c base1 + n1 x = t1, c baseS + nS x = tS,
       flops /= c */
    for (int it = 0; it < 8; it++) {
        if ((rc = est_run(o, spec, RUN_ONE, flops, &e1, NULL))) return rc;
        if (e1 <= 0) break;
        double c = t[RUN_ONE] / e1;
        x = 0;
        if (K) {
            if ((rc = est_run(o, spec, RUN_SMALL, flops, &eS, NULL))) return rc;
            double det = e1 * nS - eS * n1;
            if (det != 0) {
                double cc = (t[RUN_ONE] * nS - t[RUN_SMALL] * n1) / det;
                double xx = (e1 * t[RUN_SMALL] - eS * t[RUN_ONE]) / det;
                if (cc > 0 && xx >= 0) c = cc, x = xx;
            }
        }
        flops /= c;
    }
    /* bandwidth and latency: dp N (large all-reduces), tp N with 1 micro-batch (many smaller ones) and
       with K (K times as many messages, the same bytes); each estimate is base + A / bw + B lat, fitted
       by least squares in relative terms (each run's error over its step) */
    if (n < 2) {   /* one rank (one GPU): no link to fit, the base profile's stays */
        *flops_out = flops, *wbw_out = x > 0 ? 1 / x : 0, *bw_out = *lat_out = 0;
        return 0;
    }
    double base[3] = {0, 0, 0}, A[3] = {0, 0, 0}, B[3] = {0, 0, 0};
    const int kk[3] = {RUN_DP, RUN_TP, RUN_TPSMALL};
    int nr = K ? 3 : 2;
    for (int j = 0; j < nr; j++) {
        int k = kk[j];
        double eb = 0, el = 0;
        if ((rc = estimate(o, spec, run_set[k], run_nset[k], flops, 1e18, 0, x, &base[j])) ||
            (rc = estimate(o, spec, run_set[k], run_nset[k], flops, 1e9, 0, x, &eb)) ||
            (rc = estimate(o, spec, run_set[k], run_nset[k], flops, 1e18, 1e-3, x, &el)))
            return rc;
        A[j] = (eb - base[j]) * 1e9 / t[k];
        B[j] = (el - base[j]) / 1e-3 / t[k];
        base[j] = (t[k] - base[j]) / t[k];   /* what the link is to explain, relative */
    }
    double aa = 0, ab = 0, bb = 0, ar = 0, br = 0, bx = -1, y = -1;   /* bx = 1 / bw, y = latency */
    for (int j = 0; j < nr; j++)
        aa += A[j] * A[j], ab += A[j] * B[j], bb += B[j] * B[j], ar += A[j] * base[j], br += B[j] * base[j];
    double det = aa * bb - ab * ab;
    if (det != 0) {
        bx = (ar * bb - br * ab) / det;
        y = (aa * br - ab * ar) / det;
    }
    if (!(bx > 0 && y >= 0)) {   /* no positive pair: latency 0, bandwidth by least squares */
        bx = aa > 0 && ar > 0 ? ar / aa : 1e-12;
        y = 0;
    }
    *flops_out = flops, *wbw_out = x > 0 ? 1 / x : 0, *bw_out = 1 / bx, *lat_out = y;
    return 0;
}

/* --pack DIR: the runs built into DIR, and DIR/run.sh to run them (rounds:
 * each round's logs in LOGDIR/rR). */
static int pack(const fe_opts *o, const char *spec, int n, int K, int rounds, int64_t steps)
{
    const char *dir = o->prof_pack;
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "nnsc-aot: error: cannot make %s: %s\n", dir, strerror(errno));
        return 1;
    }
    int rc;
    if ((rc = build_runs(o, spec, dir, K, n))) return rc;
    char path[4096];
    snprintf(path, sizeof path, "%s/run.sh", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "nnsc-aot: error: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "#!/bin/sh\n"
               "# nnsc-aot profile --pack: the calibration runs of model %s (%d --set overrides), %d rank%s\n"
               "# busy at once%s, %d round%s. On the machine to calibrate (no compiler needed): run.sh [LOGDIR]\n"
               "# (default: this directory) writes the runs' logs%s; then, where nnsc-aot is,\n"
               "# with the same model, --set overrides and --ranks:\n"
               "# nnsc-aot profile MODEL --ranks %d --from LOGDIR -o FILE\n"
               "set -e\n"
               "here=$(cd \"$(dirname \"$0\")\" && pwd)\n"
               "logs=${1:-$here}\n"
               "mkdir -p \"$logs\"\n",
            o->spec ? o->spec : "built in", o->nset, n, n == 1 ? "" : "s", cal_cuda ? " (the cuda target: a GPU each)" : "",
            rounds, rounds == 1 ? "" : "s",
            rounds == 1 ? "" : " (LOGDIR/r1, r2, ...: one folder a round)", n);
    if (rounds > 1)
        fprintf(f, "for r in $(seq %d); do\nd=\"$logs/r$r\"\nmkdir -p \"$d\"\n", rounds);
    else
        fprintf(f, "d=\"$logs\"\n");
    for (int k = 0; k < NRUN; k++) {
        if (!wanted(k, K, n)) continue;
        char cmd[1024];
        run_cmd(cmd, sizeof cmd, "\"$here\"", "\"$d\"", k, n, steps);
        fprintf(f, "%s ||\n  { echo \"run.sh: the %s run failed (logs in $d)\" >&2; exit 1; }\n", cmd, run_name[k]);
    }
    if (rounds > 1) fprintf(f, "done\n");
    fprintf(f, "echo \"run.sh: logs in $logs\"\n");
    if (fclose(f) || chmod(path, 0755)) {
        fprintf(stderr, "nnsc-aot: error: cannot write %s\n", path);
        return 1;
    }
    if (!o->quiet)
        fprintf(stderr, "nnsc-aot profile: the calibration runs in %s; run %s/run.sh there, then nnsc-aot profile "
                        "--from\n", dir, dir);
    return 0;
}

int fe_profile(const fe_opts *o)
{
    char dir[1024];
    const char *tmp = getenv("TMPDIR");
    if (snprintf(dir, sizeof dir, "%.900s/nnsc-profile-XXXXXX", tmp && *tmp ? tmp : "/tmp") >= (int)sizeof dir ||
        !mkdtemp(dir)) {
        fprintf(stderr, "nnsc-aot: error: cannot make a temporary directory\n");
        return 1;
    }
    char spec[4096];
    if (o->spec) {   /* the user's model: the FLOP/s its own shapes reach */
        snprintf(spec, sizeof spec, "%s", o->spec);
    } else {
        snprintf(spec, sizeof spec, "%s/calibrate.ini", dir);
        FILE *f = fopen(spec, "w");
        if (!f || fputs(cal_spec, f) < 0 || fclose(f)) {
            fprintf(stderr, "nnsc-aot: error: cannot write %s\n", spec);
            return 1;
        }
    }
    int64_t steps = o->steps ? o->steps : 12;
    cal_cuda = o->target == FE_TARGET_CUDA;
    int n = o->prof_ranks ? o->prof_ranks : cal_cuda ? 1 : 2, rounds = o->prof_rounds ? o->prof_rounds : 1, K = 0,
        rc = 0;
    double t[NRUN] = {-1, -1, -1, -1, -1}, flops = 0, wbw = 0, bw = 0, lat = 0;
    char base[64];
    if ((rc = small_mb(o, spec, &K, base, sizeof base))) goto out;
    if (cal_cuda && !strcmp(base, "cpu-host")) {
        fprintf(stderr, "nnsc-aot: error: profile --target cuda refines a GPU's profile, and the spec's device is "
                        "cpu-host\n  hint: name the GPU the runs are on, e.g. --set cluster.device=h100-80g (its "
                        "memory bandwidth, memory and links stay; the runs fit its FLOP/s and weight_bw)\n");
        rc = 2;
        goto out;
    }
    if (cal_cuda && !o->prof_from && (rc = fe_target_check(o))) goto out;   /* (--from only fits) */
    set_runs(n, K);
    if (o->prof_pack) {
        rc = pack(o, spec, n, K, rounds, steps);
        goto out;
    }
    const char *logs = dir;
    if (o->prof_from) {   /* the logs of DIR/run.sh */
        logs = o->prof_from;
        char first[4096];
        snprintf(first, sizeof first, "%s/r1", logs);
        if (!is_dir(first)) snprintf(first, sizeof first, "%s", logs);
        for (int k = RUN_DP; k <= RUN_TP; k++) {   /* the runs' world first: the likelier slip */
            char log[4200];
            snprintf(log, sizeof log, "%s/%s.log", first, run_name[k]);
            int w = log_world(log);
            if (w > 0 && w != n) {
                fprintf(stderr, "nnsc-aot: error: %s: the run had %d ranks, not --ranks %d\n"
                                "  hint: give --from the --ranks that --pack had (--ranks %d)\n", log, w, n, w);
                rc = 2;
                goto out;
            }
        }
    } else {
        if ((rc = build_runs(o, spec, dir, K, n))) goto out;
        for (int r = 1; r <= rounds; r++) {
            char sub[4096];
            snprintf(sub, sizeof sub, "%s/r%d", dir, r);
            if (rounds > 1 && mkdir(sub, 0777)) goto fail;
            for (int k = 0; k < NRUN; k++)
                if (wanted(k, K, n) && run_local(dir, rounds > 1 ? sub : dir, k, n, steps)) goto fail;
        }
    }
    for (int k = 0; k < NRUN; k++) {
        if (!wanted(k, K, n)) continue;
        char bad[4200];
        if ((t[k] = rounds_ms(logs, k, n, bad, sizeof bad)) <= 0) {
            if (!o->prof_from) goto fail;
            fprintf(stderr, "nnsc-aot: error: %s: no 'step median' in it (or no such file)\n"
                            "  hint: run DIR/run.sh of nnsc-aot profile --pack DIR (of this nnsc-aot, with this "
                            "model, --set overrides and --ranks) first; --from names where it wrote its logs\n", bad);
            rc = 2;
            goto out;
        }
    }
    double ts[NRUN];
    for (int k = 0; k < NRUN; k++) ts[k] = t[k] / 1e3;
    if ((rc = fit(o, spec, ts, K, n, &flops, &wbw, &bw, &lat))) goto out;
    {
        FILE *out = o->out ? fopen(o->out, "w") : stdout;
        if (!out) {
            fprintf(stderr, "nnsc-aot: error: cannot write %s\n", o->out);
            rc = 1;
            goto out;
        }
        char nsteps[64] = "", nround[64] = "", small[96] = "", tpsmall[96] = "";
        if (!o->prof_from) snprintf(nsteps, sizeof nsteps, " of %lld steps", (long long)steps);
        if (rounds > 1 || o->prof_from) {
            int nr = 0;
            char sub[4200];
            do snprintf(sub, sizeof sub, "%s/r%d", logs, ++nr);
            while (nr < 100 && is_dir(sub));
            if (nr > 2) snprintf(nround, sizeof nround, ", over %d rounds", nr - 1);
        }
        if (K) {
            snprintf(small, sizeof small, ", with %d micro-batches %.1f ms", K, t[RUN_SMALL]);
            snprintf(tpsmall, sizeof tpsmall, ", with %d micro-batches %.1f ms", K, t[RUN_TPSMALL]);
        }
        time_t now = time(NULL);
        char when[64];
        strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
        char links[160] = "";
        if (n >= 2)
            snprintf(links, sizeof links, ", dp %d %.1f ms, tp %d %.1f ms%s", n, t[RUN_DP], n, t[RUN_TP], tpsmall);
        fprintf(out, "; nnsc-aot profile (%s, model %s): %s calibrated on %s, %s;\n"
                     "; 1 rank (%d cop%s at once) %.1f ms%s%s per step (medians%s%s).\n"
                     "; Use it with [cluster] device = THIS FILE (docs/plan-search.md).\n"
                     "[cluster]\ndevice = %s\nflops = %.6g\nflops_bf16 = %.6g\nweight_bw = %.6g\n",
                when, o->spec ? o->spec : "built in", cal_cuda ? base : "cpu-host",
                o->prof_from ? "the machine of the --from logs" : "this machine",
                cal_cuda ? "the cuda target, one rank per GPU" : "one rank per core", ncopies(RUN_ONE, n),
                ncopies(RUN_ONE, n) == 1 ? "y" : "ies", t[RUN_ONE], small, links, nsteps, nround,
                cal_cuda ? base : "cpu-host", flops, flops, wbw);
        if (n >= 2) fprintf(out, "link_bw = %.6g\nlink_lat = %.6g\n", bw, lat);
        if (n >= 2 && !cal_cuda) fprintf(out, "net_bw = %.6g\nnet_lat = %.6g\n", bw, lat);   /* (one host) */
        if (n >= 2 && cal_cuda) fprintf(out, "; (the network between nodes is %s's, not measured)\n", base);
        if (n < 2) fprintf(out, "; (one rank: the links are %s's, not measured)\n", cal_cuda ? base : "cpu-host");
        if (out != stdout && fclose(out)) rc = 1;
        if (!o->quiet && n >= 2)
            fprintf(stderr, "nnsc-aot profile: flops %.4g, weight_bw %.4g B/s, link_bw %.4g B/s, link_lat %.3g s%s%s\n",
                    flops, wbw, bw, lat, o->out ? " -> " : "", o->out ? o->out : "");
        else if (!o->quiet)
            fprintf(stderr, "nnsc-aot profile: flops %.4g, weight_bw %.4g B/s (one rank: no link measured)%s%s\n", flops,
                    wbw, o->out ? " -> " : "", o->out ? o->out : "");
    }
    goto out;
fail:
    fprintf(stderr, "nnsc-aot: error: a calibration run failed (logs in %s)\n", dir);
    return 1;
out:
    if (fe_rm_tree(dir)) rc = 1;   /* (a run that failed keeps its logs: fail) */
    return rc;
}
