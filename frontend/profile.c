/* profile.c -- nnsc-aot profile -o FILE: calibrate the cpu-host profile
 * on this machine (docs/plan-search.md, Calibration).
 *
 * Three runs of a model (the one given, else a small transformer-shaped
 * one built in) the compiler builds (the generated kernels and the
 * shared-memory collectives are what is timed, one kernel thread per rank,
 * as the ranks run one per core; --set overrides apply to every run), each
 * with N ranks busy at once (--ranks N, default 2: on a CPU the ranks share
 * caches and memory bandwidth, so a kernel is slower with its neighbours
 * busy):
 *
 *   1 rank, N copies  the FLOP/s: the figure at which the cost model's
 *   at once           estimate of this run equals the copies' mean median
 *                     step (the roofline's max: found by iterating);
 *   dp N, 1 micro-batch  large all-reduces, and
 *   tp N              many small ones: the link's bandwidth and latency
 *                     that make both estimates (each linear in 1 /
 *                     bandwidth and in latency) equal their steps; where
 *                     no positive pair does, latency 0 and the bandwidth
 *                     that fits both best (least squares).
 *
 * FILE is a profile `[cluster] device = FILE` reads (an INI [cluster]
 * section: device = cpu-host and the measured figures).
 *
 * A cluster has no compiler: --pack DIR builds the three runs into DIR with
 * DIR/run.sh, which runs them there and writes their logs; --from DIR -o
 * FILE then fits the profile from those logs where the compiler is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>

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
    const char **all = join_sets(o, sets, nset, NULL, 0, &b.nset);
    b.sets = all;
    int rc = fe_compile(&b);
    free(all);
    return rc;
}

/* The cost model's step (seconds) of spec with the command line's
 * overrides, then sets, then the profile figures flops, bw, lat. */
static int estimate(const fe_opts *o, const char *spec, const char *const *sets, int nset, double flops, double bw,
                    double lat, double *step)
{
    char f[4][64];
    snprintf(f[0], sizeof f[0], "cluster.flops=%.9g", flops);
    snprintf(f[1], sizeof f[1], "cluster.flops_bf16=%.9g", flops);
    snprintf(f[2], sizeof f[2], "cluster.link_bw=%.9g", bw);
    snprintf(f[3], sizeof f[3], "cluster.link_lat=%.9g", lat);
    const char *fp[4] = {f[0], f[1], f[2], f[3]}, **all;
    int n;
    all = join_sets(o, sets, nset, fp, 4, &n);
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

/* The 1-rank run's median step (ms) over its copies' logs dir/one-K.log,
 * K = 1..n: their mean, or -1 (*bad: the log that has none). */
static double one_median(const char *dir, int n, char *bad, size_t nbad)
{
    double sum = 0;
    for (int k = 1; k <= n; k++) {
        char log[4096];
        snprintf(log, sizeof log, "%s/one-%d.log", dir, k);
        double ms = log_median(log);
        if (ms <= 0) {
            snprintf(bad, nbad, "%s", log);
            return -1;
        }
        sum += ms;
    }
    return sum / n;
}

/* The world size a run's log names ("world N"), or -1. */
static int log_world(const char *log) { return (int)log_number(log, " world "); }

/* The shell command that runs the calibration run NAME of directory HERE
 * (a shell word) into LOGS (one too) for steps: the 1-rank run as n copies
 * at once, logs one-1.log..one-n.log; the others once, NAME.log. */
static void run_cmd(char *cmd, size_t ncmd, const char *here, const char *logs, const char *name, int n,
                    int64_t steps)
{
    if (strcmp(name, "one") == 0)
        snprintf(cmd, ncmd,
                 "pids=; for k in $(seq %d); do NNSC_THREADS=1 %s/one/launch --steps %lld --quiet >%s/one-$k.log "
                 "2>&1 & pids=\"$pids $!\"; done; rc=0; for p in $pids; do wait $p || rc=1; done; [ $rc = 0 ]",
                 n, here, (long long)steps, logs);
    else
        snprintf(cmd, ncmd, "NNSC_THREADS=1 %s/%s/launch --steps %lld --quiet >%s/%s.log 2>&1", here, name,
                 (long long)steps, logs, name);
}

/* Run the calibration run name of dir for steps; its median step in ms
 * (the 1-rank run: its n copies' mean), or -1. */
static double run(const char *dir, const char *name, int n, int64_t steps)
{
    char cmd[8192], q[4200], bad[4096];
    snprintf(q, sizeof q, "'%s'", dir);
    run_cmd(cmd, sizeof cmd, q, q, name, n, steps);
    if (system(cmd) != 0) return -1;
    if (strcmp(name, "one") == 0) return one_median(dir, n, bad, sizeof bad);
    snprintf(bad, sizeof bad, "%s/%s.log", dir, name);
    return log_median(bad);
}

/* The three runs: their names and settings (s2, s3: the world set by
 * set_world). */
static const char *const run_name[3] = {"one", "dp", "tp"};
static const char *const s1[] = {"cluster.devices=1"};
static char world_set[2][40];
static const char *s2[] = {world_set[0], "plan.policy=dp", "train.micro_batches=1"};
static const char *s3[] = {world_set[1], "plan.policy=tp"};
static void set_world(int n)
{
    snprintf(world_set[0], sizeof world_set[0], "cluster.devices=%d", n);
    snprintf(world_set[1], sizeof world_set[1], "cluster.devices=%d", n);
}

/* Fit the cost model's estimates of the three runs (seconds per step t1,
 * t2, tt) with one figure each: the FLOP/s, the link's bandwidth and its
 * latency.  0, or the compiler's status. */
static int fit(const fe_opts *o, const char *spec, double t1, double t2, double tt, double *flops_out, double *bw_out,
               double *lat_out)
{
    int rc;
    double e0, flops, bw = 1e18;
    /* FLOP/s: the 1-rank estimate = its run (the roofline's max: iterate from the compute-bound guess) */
    if ((rc = estimate(o, spec, s1, 1, 1e11, bw, 0, &e0))) return rc;
    flops = e0 > 0 ? 1e11 * e0 / t1 : 1e11;
    for (int it = 0; it < 8; it++) {
        double e;
        if ((rc = estimate(o, spec, s1, 1, flops, bw, 0, &e))) return rc;
        if (e <= 0) break;
        flops *= e / t1;
    }
    /* bandwidth and latency: the dp N run (large all-reduces) and the tp N run
       (many small ones) at once; each estimate is base + A / bw + B lat */
    double base[2] = {0, 0}, A[2] = {0, 0}, B[2] = {0, 0}, T[2] = {t2, tt};
    const char *const *ss[2] = {s2, s3};
    int ns[2] = {3, 2};
    for (int k = 0; k < 2; k++) {
        double eb = 0, el = 0;
        if ((rc = estimate(o, spec, ss[k], ns[k], flops, 1e18, 0, &base[k])) ||
            (rc = estimate(o, spec, ss[k], ns[k], flops, 1e9, 0, &eb)) ||
            (rc = estimate(o, spec, ss[k], ns[k], flops, 1e18, 1e-3, &el)))
            return rc;
        A[k] = (eb - base[k]) * 1e9;
        B[k] = (el - base[k]) / 1e-3;
    }
    double det = A[0] * B[1] - A[1] * B[0], x = -1, y = -1;   /* x = 1 / bw, y = latency */
    if (det != 0) {
        x = ((T[0] - base[0]) * B[1] - (T[1] - base[1]) * B[0]) / det;
        y = (A[0] * (T[1] - base[1]) - A[1] * (T[0] - base[0])) / det;
    }
    if (!(x > 0 && y >= 0)) {   /* no positive pair: latency 0, bandwidth by least squares */
        double num = A[0] * (T[0] - base[0]) + A[1] * (T[1] - base[1]), den = A[0] * A[0] + A[1] * A[1];
        x = den > 0 && num > 0 ? num / den : 1e-12;
        y = 0;
    }
    *flops_out = flops, *bw_out = 1 / x, *lat_out = y;
    return 0;
}

/* --pack DIR: the three runs built into DIR, and DIR/run.sh to run them. */
static int pack(const fe_opts *o, const char *spec, int n, int64_t steps)
{
    const char *dir = o->prof_pack;
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "nnsc-aot: error: cannot make %s: %s\n", dir, strerror(errno));
        return 1;
    }
    int rc;
    if ((rc = build(o, spec, dir, "one", s1, 1)) || (rc = build(o, spec, dir, "dp", s2, 3)) ||
        (rc = build(o, spec, dir, "tp", s3, 2)))
        return rc;
    char path[4096];
    snprintf(path, sizeof path, "%s/run.sh", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "nnsc-aot: error: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "#!/bin/sh\n"
               "# nnsc-aot profile --pack: the calibration runs of model %s (%d --set overrides), %d ranks\n"
               "# busy at once. On the machine to calibrate (no compiler needed): run.sh [LOGDIR]\n"
               "# (default: this directory) writes one-1.log..one-%d.log, dp.log and tp.log; then, where\n"
               "# nnsc-aot is, with the same model, --set overrides and --ranks:\n"
               "# nnsc-aot profile MODEL --ranks %d --from LOGDIR -o FILE\n"
               "set -e\n"
               "here=$(cd \"$(dirname \"$0\")\" && pwd)\n"
               "logs=${1:-$here}\n"
               "mkdir -p \"$logs\"\n",
            o->spec ? o->spec : "built in", o->nset, n, n, n);
    for (int k = 0; k < 3; k++) {
        char cmd[1024];
        run_cmd(cmd, sizeof cmd, "\"$here\"", "\"$logs\"", run_name[k], n, steps);
        fprintf(f, "%s ||\n  { echo \"run.sh: the %s run failed (logs in $logs)\" >&2; exit 1; }\n", cmd, run_name[k]);
    }
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
    char dir[] = "/tmp/nnsc-profile-XXXXXX";
    if (!mkdtemp(dir)) {
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
    int n = o->prof_ranks ? o->prof_ranks : 2, rc = 0;
    set_world(n);
    double t[3] = {-1, -1, -1}, flops = 0, bw = 0, lat = 0;
    if (o->prof_pack) {
        rc = pack(o, spec, n, steps);
        goto out;
    }
    if (o->prof_from) {   /* the logs of DIR/run.sh */
        for (int k = 1; k < 3; k++) {   /* the runs' world first: the likelier slip */
            char log[4096];
            snprintf(log, sizeof log, "%s/%s.log", o->prof_from, run_name[k]);
            int w = log_world(log);
            if (w > 0 && w != n) {
                fprintf(stderr, "nnsc-aot: error: %s: the run had %d ranks, not --ranks %d\n"
                                "  hint: give --from the --ranks that --pack had (--ranks %d)\n", log, w, n, w);
                rc = 2;
                goto out;
            }
        }
        for (int k = 0; k < 3; k++) {
            char log[4096];
            snprintf(log, sizeof log, "%s/%s.log", o->prof_from, run_name[k]);
            t[k] = k ? log_median(log) : one_median(o->prof_from, n, log, sizeof log);
            if (t[k] <= 0) {
                fprintf(stderr, "nnsc-aot: error: %s: no 'step median' in it (or no such file)\n"
                                "  hint: run DIR/run.sh of nnsc-aot profile --pack DIR first; --from names where "
                                "it wrote one-1.log..one-%d.log, dp.log and tp.log\n", log, n);
                rc = 2;
                goto out;
            }
        }
    } else {
        if ((rc = build(o, spec, dir, "one", s1, 1)) || (rc = build(o, spec, dir, "dp", s2, 3)) ||
            (rc = build(o, spec, dir, "tp", s3, 2)))
            goto out;
        for (int k = 0; k < 3; k++)
            if ((t[k] = run(dir, run_name[k], n, steps)) <= 0) goto fail;
    }
    double t1 = t[0] / 1e3, t2 = t[1] / 1e3, tt = t[2] / 1e3;
    if ((rc = fit(o, spec, t1, t2, tt, &flops, &bw, &lat))) goto out;
    t1 *= 1e3, t2 *= 1e3, tt *= 1e3;
    {
        FILE *out = o->out ? fopen(o->out, "w") : stdout;
        if (!out) {
            fprintf(stderr, "nnsc-aot: error: cannot write %s\n", o->out);
            rc = 1;
            goto out;
        }
        char nsteps[64] = "";
        if (!o->prof_from) snprintf(nsteps, sizeof nsteps, " of %lld steps", (long long)steps);
        time_t now = time(NULL);
        char when[64];
        strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
        fprintf(out, "; nnsc-aot profile (%s, model %s): cpu-host calibrated on %s, one rank per core;\n"
                     "; 1 rank (%d copies at once) %.1f ms, dp %d %.1f ms, tp %d %.1f ms per step (medians%s).\n"
                     "; Use it with [cluster] device = THIS FILE (docs/plan-search.md).\n"
                     "[cluster]\ndevice = cpu-host\nflops = %.6g\nflops_bf16 = %.6g\nlink_bw = %.6g\n"
                     "link_lat = %.6g\nnet_bw = %.6g\nnet_lat = %.6g\n",
                when, o->spec ? o->spec : "built in", o->prof_from ? "the machine of the --from logs" : "this machine",
                n, t1, n, t2, n, tt, nsteps, flops, flops, bw, lat, bw, lat);
        if (out != stdout && fclose(out)) rc = 1;
        if (!o->quiet)
            fprintf(stderr, "nnsc-aot profile: flops %.4g, link_bw %.4g B/s, link_lat %.3g s%s%s\n", flops, bw, lat,
                    o->out ? " -> " : "", o->out ? o->out : "");
    }
    goto out;
fail:
    fprintf(stderr, "nnsc-aot: error: a calibration run failed (logs in %s)\n", dir);
    return 1;
out:
    {   /* (a run that failed keeps its logs: fail) */
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) rc = 1;
    }
    return rc;
}
