/* verify.c -- nnsc-aot verify: the product's guarantee, checked.
 *
 * Builds the model for 1 device and for N devices (same seed, same data),
 * runs both with --save, and compares the per-step losses (relative
 * difference) and the final weights (largest difference relative to each
 * tensor's largest magnitude).  Exit 0 only if everything agrees within the
 * tolerances.
 *
 * With --target cuda the reference is the same 1-device CPU build and the
 * other side the cuda build for N devices (N may be 1): the GPU kernels
 * against the CPU ones, on a machine with a GPU per rank.  Without one, the
 * cuda ranks' own message (no driver, no device) shows and verify fails.
 *
 * The report says what failed in words: a run that failed is named with its
 * exit status, the steps it logged and the first lines its ranks wrote on
 * stderr (no loss table of nothing); when the weights agree as a whole but
 * some tensors differ by much more than the tolerance, it says whether they
 * are the known case of a gradient that is zero in exact arithmetic (they
 * stayed at their constant init: rounding noise, docs/testing.md).
 */
#define _XOPEN_SOURCE 700   /* nftw */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frontend.h"
#include "rt_internal.h"

extern char **environ;

/* Copy file path to stderr (what the ranks wrote there). */
static void copy_to_stderr(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char buf[4096];
    size_t n;
    fflush(stdout);
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stderr);
    fclose(f);
}

/* Run DIR/launch with args, stdout to DIR/log.txt, stderr to
 * DIR/stderr.txt (copied to our stderr afterwards, so it is both shown and
 * at hand for the report); returns the exit status, or -1 when it could
 * not be started (the message is in stderr.txt). */
static int run_launch(const char *dir, int64_t steps)
{
    char launch[4200], log[4200], errlog[4200], save[4200], nsteps[32];
    snprintf(launch, sizeof launch, "%s/launch", dir);
    snprintf(log, sizeof log, "%s/log.txt", dir);
    snprintf(errlog, sizeof errlog, "%s/stderr.txt", dir);
    snprintf(save, sizeof save, "%s/final.safetensors", dir);
    snprintf(nsteps, sizeof nsteps, "%lld", (long long)steps);
    char *argv[] = {launch, "--save", save, steps ? "--steps" : NULL, nsteps, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, errlog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, launch, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) {
        FILE *f = fopen(errlog, "w");
        if (f) {
            fprintf(f, "nnsc-aot verify: cannot run %s: %s\n", launch, strerror(rc));
            fclose(f);
        }
        copy_to_stderr(errlog);
        return -1;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    copy_to_stderr(errlog);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Per-step losses from a log ("step S/N loss L ..."); returns the count. */
static int read_losses(const char *dir, double **loss)
{
    char path[4200], line[1024];
    snprintf(path, sizeof path, "%s/log.txt", dir);
    FILE *f = fopen(path, "r");
    int n = 0, cap = 0;
    *loss = NULL;
    if (!f) return 0;
    while (fgets(line, sizeof line, f)) {
        long long s, tot;
        double l;
        if (sscanf(line, "step %lld/%lld loss %lf", &s, &tot, &l) != 3) continue;
        if (s != n + 1) continue;
        *IR_PUSH(*loss, n, cap) = l;
    }
    fclose(f);
    return n;
}

/* |a - b| relative to the larger magnitude (0 when both are 0). */
static double rel(double a, double b)
{
    double m = fmax(fabs(a), fabs(b));
    return m > 0 ? fabs(a - b) / m : 0;
}

/* What verify knows of a param from the spec, to explain the report. */
typedef struct vparam {
    char *name;        /* tensor name (as in final.safetensors) */
    ir_initkind init;  /* its initialiser */
    double init_a;     /* const: the value */
} vparam;

/* The training, for the same purpose. */
typedef struct vtrain {
    vparam *p; int np;   /* the params */
    double lr;           /* [train] lr */
    int64_t steps;       /* steps run */
    int adamw;           /* the optimizer is AdamW (else SGD) */
    int bf16;            /* [train] dtype = bf16 */
} vtrain;

/* The constant a param starts at (zeros, ones, const V), or NAN (a random
 * init, or a name the spec does not have). */
static double init_value(const vtrain *vt, const char *name)
{
    for (int i = 0; i < vt->np; i++) {
        if (strcmp(vt->p[i].name, name) != 0) continue;
        switch (vt->p[i].init) {
        case IR_INIT_ZEROS: return 0;
        case IR_INIT_ONES: return 1;
        case IR_INIT_CONST: return vt->p[i].init_a;
        default: return NAN;
        }
    }
    return NAN;
}

/* Per-tensor relative L2 difference, for the report. */
typedef struct wdiff {
    const char *name;  /* tensor */
    double rel;        /* ||a - b|| / ||a|| */
    double init;       /* the constant it started at, or NAN */
    double moved;      /* the larger RMS of (final - init) over both runs (init known) */
} wdiff;

/* qsort order: the largest relative difference first. */
static int cmp_wdiff(const void *x, const void *y)
{
    double a = ((const wdiff *)x)->rel, b = ((const wdiff *)y)->rel;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* A tensor that differs by more than this many times the tolerance is
 * explained when the whole model agrees. */
#define VERIFY_FAR 10

/* A tensor that moved (RMS from its constant init) less than this fraction
 * of lr x steps did not really train: the zero-gradient case.  AdamW moves
 * a trained element about lr per step (gpt2-tiny's biases with zeros init:
 * 10% of lr x steps and more), rounding noise about lr x 1e-4 (its
 * attention key biases: 0.02%). */
#define VERIFY_STAYED 0.01

/* qsort order of names: strcmp. */
static int cmp_name(const void *x, const void *y)
{
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* Print the names of the tensors i with pick[i] set, in name order, at most
 * 8 ("a, b, c and 3 more"). */
static void print_names(const wdiff *wd, const int *pick, int n)
{
    const char **names = ir_xmalloc(sizeof *names * (size_t)(n + 1));
    int k = 0;
    for (int i = 0; i < n; i++)
        if (pick[i]) names[k++] = wd[i].name;
    qsort(names, (size_t)k, sizeof *names, cmp_name);
    for (int i = 0; i < k && i < 8; i++) printf("%s%s", i == 0 ? "" : i + 1 == k ? " and " : ", ", names[i]);
    if (k > 8) printf(" and %d more", k - 8);
    free(names);
}

/* The weights agree as a whole but some tensors differ by more than
 * VERIFY_FAR x tol: say which, and whether they are the known case. */
static void explain_far(const wdiff *wd, int n, double tol, const vtrain *vt)
{
    int *stayed = ir_xcalloc((size_t)n + 1, sizeof *stayed), *other = ir_xcalloc((size_t)n + 1, sizeof *other);
    int ns = 0, same_init = 1;
    double bound = VERIFY_STAYED * vt->lr * (double)vt->steps, lo = INFINITY, hi = 0, moved = 0, init = NAN;
    for (int i = 0; i < n; i++) {
        if (!(wd[i].rel > VERIFY_FAR * tol)) continue;
        if (!isnan(wd[i].init) && wd[i].moved <= bound) {
            stayed[i] = 1;
            same_init &= ns == 0 || wd[i].init == init;
            init = wd[i].init;
            ns++;
            lo = fmin(lo, wd[i].rel), hi = fmax(hi, wd[i].rel), moved = fmax(moved, wd[i].moved);
        } else {
            other[i] = 1;
        }
    }
    if (ns) {
        printf("  ");
        print_names(wd, stayed, n);
        if (lo < hi) printf(" differ by %.0f-%.0f%% between the runs,\n", 100 * lo, 100 * hi);
        else printf(" differ%s by %.0f%% between the runs,\n", ns > 1 ? "" : "s", 100 * hi);
        char at[64] = "constant";
        if (same_init) snprintf(at, sizeof at, "%g", init);
        printf("    yet stayed at %s init (%s): %s moved more than %.2g RMS, under %.0f%% of\n"
               "    lr x steps (%.3g).  The known case of a gradient that is zero in exact\n"
               "    arithmetic (e.g. an attention key bias: softmax ignores a constant added to\n",
               ns > 1 ? "their" : "its", at, ns > 1 ? "none" : "it never", moved,
               100 * VERIFY_STAYED, vt->lr * (double)vt->steps);
        if (vt->adamw)
            printf("    every key): what each run leaves there is rounding noise (AdamW scales it up\n"
                   "    to steps of about lr x 1e-4), different for every summation order, so the\n");
        else
            printf("    every key): what each run leaves there is rounding noise, different for\n"
                   "    every summation order, so the\n");
        printf("    per-tensor difference means nothing for %s (docs/testing.md, Tolerances).\n"
               "    The difference of all weights above is the check.\n", ns > 1 ? "them" : "it");
    }
    for (int i = 0; i < n; i++) {
        if (!other[i]) continue;
        printf("  note: %s differs by %.3g (relative L2), over %dx the tolerance, although all weights agree:\n",
               wd[i].name, wd[i].rel, VERIFY_FAR);
        if (isnan(wd[i].init))
            printf("    its init is random, so whether it stayed put (the zero-gradient case) cannot be told here\n");
        else
            printf("    it moved %.2g RMS from its init (%g), so it trained: not the zero-gradient case\n", wd[i].moved,
                   wd[i].init);
    }
    free(stayed);
    free(other);
}

/* Compare the final weights: the relative L2 difference over all
 * parameters as one vector must be within tol (docs/testing.md explains why
 * per-tensor bounds cannot work under AdamW).  Returns the number of
 * failures. */
static int compare_weights(const char *d1, const char *dn, double tol, const vtrain *vt)
{
    char p1[8400], pn[8400], err[512];
    snprintf(p1, sizeof p1, "%s/final.safetensors", d1);
    snprintf(pn, sizeof pn, "%s/final.safetensors", dn);
    rt_st_file a, b;
    if (rt_st_open(p1, &a, err, sizeof err)) {
        printf("final weights: cannot compare: %s: %s\n", p1, err);
        return 1;
    }
    if (rt_st_open(pn, &b, err, sizeof err)) {
        printf("final weights: cannot compare: %s: %s\n", pn, err);
        rt_st_free(&a);
        return 1;
    }
    int bad = 0;
    double num = 0, den = 0;
    int64_t total = 0;
    wdiff *wd = ir_xcalloc((size_t)a.nt + 1, sizeof *wd);
    if (a.nt != b.nt) {
        printf("final weights: %d tensors vs %d\n", a.nt, b.nt);
        bad++;
    }
    for (int i = 0; i < a.nt; i++) {
        const rt_st_tensor *x = &a.t[i], *y = rt_st_find(&b, x->name);
        wd[i].name = x->name;
        wd[i].init = init_value(vt, x->name);
        if (!y || y->end - y->begin != x->end - x->begin || strcmp(x->dtype, "F32") || strcmp(y->dtype, "F32")) {
            printf("final weights: tensor %s missing or different in the %s build\n", x->name, dn);
            wd[i].init = NAN;
            bad++;
            continue;
        }
        int64_t n = (x->end - x->begin) / 4;
        const float *u = x->data, *v = y->data;
        double tn = 0, td = 0, mu = 0, mv = 0, c = isnan(wd[i].init) ? 0 : wd[i].init;
        for (int64_t k = 0; k < n; k++) {
            double e = (double)u[k] - v[k];
            td += e * e;
            tn += (double)u[k] * u[k];
            mu += ((double)u[k] - c) * ((double)u[k] - c);
            mv += ((double)v[k] - c) * ((double)v[k] - c);
            if (isnan(u[k]) || isnan(v[k])) td = INFINITY;
        }
        num += td;
        den += tn;
        total += n;
        wd[i].rel = tn > 0 ? sqrt(td / tn) : sqrt(td);
        wd[i].moved = n > 0 ? sqrt(fmax(mu, mv) / (double)n) : 0;
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (!(rel <= tol)) bad++;
    qsort(wd, (size_t)a.nt, sizeof *wd, cmp_wdiff);
    printf("final weights: %d tensors, %lld values: relative L2 difference %.3g, tolerance %.3g\n", a.nt,
           (long long)total, rel, tol);
    printf("  largest per tensor:");
    for (int i = 0; i < a.nt && i < 3; i++) printf(" %s %.3g%s", wd[i].name, wd[i].rel, i + 1 < 3 && i + 1 < a.nt ? "," : "");
    printf("\n");
    if (!bad) explain_far(wd, a.nt, tol, vt);
    free(wd);
    rt_st_free(&a);
    rt_st_free(&b);
    return bad;
}

/* Build the model for ndev devices into dir, for o's target (cpu = 1: for
 * the cpu target whatever o says; ref = 1: the reference, nothing
 * recomputed). */
static int build(const fe_opts *o, int ndev, const char *dir, int cpu, int ref)
{
    fe_opts c = *o;
    c.reference = ref;
    if (cpu) {
        c.target = FE_TARGET_CPU;
        c.archs = NULL;
        c.narch = 0;
        c.emit_kernels = 0;
    }
    c.sets = ir_xmalloc(sizeof(char *) * ((size_t)o->nset + 1));
    for (int i = 0; i < o->nset; i++) c.sets[i] = o->sets[i];
    char dev[64];
    snprintf(dev, sizeof dev, "cluster.devices=%d", ndev);
    c.sets[o->nset] = dev;
    c.nset = o->nset + 1;
    c.out = dir;
    c.dump = NULL;
    c.quiet = 1;
    c.verify = 0;
    int rc = fe_compile(&c);
    free(c.sets);
    return rc;
}

/* The first lines a failed run wrote on stderr (DIR/stderr.txt), indented,
 * at most max of them; the rest counted. */
static void quote_stderr(const char *dir, int max)
{
    char path[4300], line[1024];
    snprintf(path, sizeof path, "%s/stderr.txt", dir);
    FILE *f = fopen(path, "r");
    int n = 0, more = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '\n') continue;
        if (n == max) {
            more++;
            continue;
        }
        printf("  | %s%s", line, strchr(line, '\n') ? "" : "\n");
        n++;
    }
    if (f) fclose(f);
    if (!n) printf("  (it wrote nothing on stderr)\n");
    if (more) printf("  (%d more lines in %s)\n", more, path);
}

/* Report a run that failed: its exit status, the steps it logged of want,
 * and the first lines of its stderr. */
static void report_failed(const char *what, const char *dir, int rc, int logged, int64_t want)
{
    if (rc < 0) printf("a run failed: the %s run could not be started\n", what);
    else if (rc > 128) printf("a run failed: the %s run was killed by signal %d", what, rc - 128);
    else printf("a run failed: the %s run exited with status %d", what, rc);
    if (rc >= 0) printf(" after logging %d of %lld steps\n", logged, (long long)want);
    quote_stderr(dir, 8);
}

/* nftw callback: remove one entry (files before their directories). */
static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

int fe_rm_tree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return access(dir, F_OK) == 0 ? -1 : 0;
}

/* Build, run and compare (fe_verify, after the spec has been read). */
static int verify_run(const fe_opts *o, int ndev, const char *model, const vtrain *vt)
{
    int rc, cuda = o->target == FE_TARGET_CUDA;
    char root[4096], d1[4200], dn[4200];
    if (o->keep) {
        snprintf(root, sizeof root, "%s", o->keep);
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(root, sizeof root, "%s/nnsc-verify-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(root)) {
            fprintf(stderr, "nnsc-aot verify: cannot create a temporary directory: %s\n", strerror(errno));
            return 1;
        }
    }
    snprintf(d1, sizeof d1, "%s/dev1", root);
    snprintf(dn, sizeof dn, "%s/dev%d", root, ndev);
    if (ndev == 1) snprintf(dn, sizeof dn, "%s/dev1-again", root);
    if (cuda) snprintf(dn, sizeof dn, "%s/cuda%d", root, ndev);
    if ((rc = build(o, 1, d1, 1, 1)) || (rc = build(o, ndev, dn, 0, 0))) return rc;
    int r1 = run_launch(d1, o->steps), rn = run_launch(dn, o->steps);
    double *l1, *ln;
    int n1 = read_losses(d1, &l1), nn = read_losses(dn, &ln);
    long long want = (long long)vt->steps;
    char what1[64], whatn[64];
    if (cuda) {
        printf("verify %s: 1 device (cpu) vs %d device%s (cuda", model, ndev, ndev > 1 ? "s" : "");
        for (int k = 0; k < o->narch; k++) printf("%s%s", k ? "," : " ", o->archs[k]);
        printf("), %lld steps (builds in %s)\n", want, root);
        snprintf(whatn, sizeof whatn, "%d-device cuda", ndev);
    } else {
        printf("verify %s: 1 device vs %d devices, %lld steps (builds in %s)\n", model, ndev, want, root);
        snprintf(whatn, sizeof whatn, "%d-device%s", ndev, ndev == 1 ? " (again)" : "");
    }
    snprintf(what1, sizeof what1, "1-device%s", cuda ? " cpu" : "");
    int bad = 0;
    if (r1) report_failed(what1, d1, r1, n1, want), bad++;
    if (rn) report_failed(whatn, dn, rn, nn, want), bad++;
    /* both ran: each must have logged every step ("step S/N loss L") */
    const char *dirs[2] = {d1, dn}, *whats[2] = {what1, whatn};
    int counts[2] = {n1, nn};
    for (int k = 0; k < 2 && !r1 && !rn; k++)
        if (counts[k] != want) {
            printf("the %s run logged %d of %lld step lines (`step S/N loss L`, in %s/log.txt)\n", whats[k], counts[k],
                   want, dirs[k]);
            bad++;
        }
    int common = n1 < nn ? n1 : nn;
    if (common > 0) {
        if (common < want) printf("the %d step%s both runs logged:\n", common, common > 1 ? "s" : "");
        printf("%6s  %-16s  %-16s  %s\n", "step", "loss 1 dev", "loss N dev", "rel diff");
        double worst = 0;
        for (int s = 0; s < common; s++) {
            double r = rel(l1[s], ln[s]);
            if (!(r <= o->loss_tol)) bad++;
            if (r > worst || r != r) worst = r;
            printf("%6d  %-16.9g  %-16.9g  %.3g%s\n", s + 1, l1[s], ln[s], r, r <= o->loss_tol ? "" : "  MISMATCH");
        }
        printf("losses: largest relative difference %.3g, tolerance %.3g\n", worst, o->loss_tol);
    } else if (!r1 && !rn) {
        printf("losses: nothing to compare\n");
    }
    if (!r1 && !rn) bad += compare_weights(d1, dn, o->weight_tol, vt);
    else printf("final weights: not compared (a run failed)\n");
    printf("verify: %s\n", bad ? "FAILED" : "OK");
    if (bad && vt->bf16 && !r1 && !rn)   /* (what a bf16 run's differences are: docs/testing.md) */
        printf("note: the model trains in bf16 (train.dtype): another f32 summation order flips some bf16 roundings "
               "of matmul inputs, and training grows that to bf16's own noise, so bf16 runs agree only that far; "
               "compare with --set train.dtype=f32, or over a few steps with --loss-tol 1e-3 --weight-tol 1e-2 "
               "--steps 10\n");
    if (!o->keep && !bad)   /* remove the temporary tree we made (every build's files); keep it when
                               something disagreed */
        fe_rm_tree(root);
    free(l1);
    free(ln);
    return bad ? 1 : 0;
}

int fe_verify(const fe_opts *o)
{
    ir_graph g;
    ir_graph_init(&g);
    int rc = fe_load(o->spec, o->sets, o->nset, &g);
    int ndev = g.req.devices;
    char model[256];
    snprintf(model, sizeof model, "%s", g.model ? g.model : "model");
    vtrain vt = {NULL, 0, g.train.lr, o->steps ? o->steps : g.train.steps, g.train.optimizer == IR_OP_ADAMW,
                 g.train.bf16};
    for (int t = 0; !rc && t < g.nt; t++) {
        if (g.t[t].kind != IR_T_PARAM) continue;
        vt.p = ir_xrealloc(vt.p, sizeof *vt.p * (size_t)(vt.np + 1));
        vt.p[vt.np++] = (vparam){ir_xstrdup(g.t[t].name), g.t[t].init, g.t[t].init_a};
    }
    ir_graph_free(&g);
    if (!rc) rc = fe_target_check(o);
    if (!rc) rc = verify_run(o, ndev, model, &vt);
    for (int i = 0; i < vt.np; i++) free(vt.p[i].name);
    free(vt.p);
    return rc;
}
