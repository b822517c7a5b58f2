/* profile.c -- nnsc-aot profile -o FILE: calibrate the cpu-host profile
 * on this machine (docs/plan-search.md, Calibration).
 *
 * Three runs of a model (the one given, else a small transformer-shaped
 * one built in) the compiler builds (the generated kernels and the
 * shared-memory collectives are what is timed, one kernel thread per rank,
 * as the ranks run one per core; --set overrides apply to every run):
 *
 *   1 rank            the FLOP/s: the figure at which the cost model's
 *                     estimate of this run equals its measured median step
 *                     (the roofline's max: found by iterating);
 *   dp 2, 1 micro-batch  large all-reduces, and
 *   tp 2              many small ones: the link's bandwidth and latency
 *                     that make both estimates (each linear in 1 /
 *                     bandwidth and in latency) equal their steps; where
 *                     no positive pair does, latency 0 and the bandwidth
 *                     that fits both best (least squares).
 *
 * FILE is a profile `[cluster] device = FILE` reads (an INI [cluster]
 * section: device = cpu-host and the measured figures). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

/* Run dir/name/launch for steps (one kernel thread per rank); its median
 * step in ms, or -1. */
static double run(const char *dir, const char *name, int64_t steps)
{
    char cmd[8192], log[4096];
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    snprintf(cmd, sizeof cmd, "NNSC_THREADS=1 '%s/%s/launch' --steps %lld --quiet > '%s' 2>&1", dir, name,
             (long long)steps, log);
    if (system(cmd) != 0) return -1;
    FILE *f = fopen(log, "r");
    if (!f) return -1;
    char line[1024];
    double ms = -1;
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "step median ");
        if (p) ms = strtod(p + 12, NULL);
    }
    fclose(f);
    return ms;
}

/* A number after `key` in dir/name/plan.txt (the first line holding it), or -1. */
static double plan_num(const char *dir, const char *name, const char *key)
{
    char path[4096], line[4096];
    snprintf(path, sizeof path, "%s/%s/plan.txt", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    double v = -1;
    while (v < 0 && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, key);
        if (p) v = strtod(p + strlen(key), NULL);
    }
    fclose(f);
    return v;
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
    int rc = 0;
    double t1 = -1, t2 = -1, tt = -1, flops = 0, bw = 0, lat = 0;
    const char *s1[] = {"cluster.devices=1"};
    const char *s2[] = {"cluster.devices=2", "plan.policy=dp", "train.micro_batches=1"};
    const char *s3[] = {"cluster.devices=2", "plan.policy=tp"};
    if ((rc = build(o, spec, dir, "one", s1, 1)) || (rc = build(o, spec, dir, "dp", s2, 3)) ||
        (rc = build(o, spec, dir, "tp", s3, 2)))
        goto out;
    if ((t1 = run(dir, "one", steps)) <= 0 || (t2 = run(dir, "dp", steps)) <= 0 || (tt = run(dir, "tp", steps)) <= 0)
        goto fail;
    t1 /= 1e3, t2 /= 1e3, tt /= 1e3;
    /* fit the cost model's estimates of the three runs, one figure each */
    flops = plan_num(dir, "one", "compute   ") * 1e9 / t1;   /* (the start: FLOPs over time) */
    bw = 1e18;
    for (int it = 0; it < 8 && !rc; it++) {   /* FLOP/s: the 1-rank estimate = its run (the roofline: iterate) */
        double e;
        if ((rc = estimate(o, spec, s1, 1, flops, bw, 0, &e))) break;
        if (e <= 0) break;
        flops *= e / t1;
    }
    /* bandwidth and latency: the dp 2 run (large all-reduces) and the tp 2 run
       (many small ones) at once; each estimate is base + A / bw + B lat */
    double base[2] = {0, 0}, A[2] = {0, 0}, B[2] = {0, 0}, T[2] = {t2, tt};
    const char *const *ss[2] = {s2, s3};
    int ns[2] = {3, 2};
    for (int k = 0; k < 2 && !rc; k++) {
        double eb = 0, el = 0;
        if ((rc = estimate(o, spec, ss[k], ns[k], flops, 1e18, 0, &base[k])) ||
            (rc = estimate(o, spec, ss[k], ns[k], flops, 1e9, 0, &eb)) ||
            (rc = estimate(o, spec, ss[k], ns[k], flops, 1e18, 1e-3, &el)))
            break;
        A[k] = (eb - base[k]) * 1e9;
        B[k] = (el - base[k]) / 1e-3;
    }
    if (rc) goto out;
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
    bw = 1 / x;
    lat = y;
    if (rc) goto out;
    t1 *= 1e3, t2 *= 1e3, tt *= 1e3;
    {
        FILE *out = o->out ? fopen(o->out, "w") : stdout;
        if (!out) {
            fprintf(stderr, "nnsc-aot: error: cannot write %s\n", o->out);
            rc = 1;
            goto out;
        }
        time_t now = time(NULL);
        char when[64];
        strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
        fprintf(out, "; nnsc-aot profile (%s, model %s): cpu-host calibrated on this machine, one rank per core;\n"
                     "; 1 rank %.1f ms, dp 2 %.1f ms, tp 2 %.1f ms per step (medians of %lld steps).\n"
                     "; Use it with [cluster] device = THIS FILE (docs/plan-search.md).\n"
                     "[cluster]\ndevice = cpu-host\nflops = %.6g\nflops_bf16 = %.6g\nlink_bw = %.6g\n"
                     "link_lat = %.6g\nnet_bw = %.6g\nnet_lat = %.6g\n",
                when, o->spec ? o->spec : "built in", t1, t2, tt, (long long)steps, flops, flops, bw, lat, bw, lat);
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
    if (!rc) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd) != 0) rc = 1;
    }
    return rc;
}
