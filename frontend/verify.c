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
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frontend.h"
#include "rt_internal.h"

extern char **environ;

/* Run DIR/launch with args, stdout to DIR/log.txt; returns the exit status. */
static int run_launch(const char *dir, int64_t steps)
{
    char launch[4200], log[4200], save[4200], nsteps[32];
    snprintf(launch, sizeof launch, "%s/launch", dir);
    snprintf(log, sizeof log, "%s/log.txt", dir);
    snprintf(save, sizeof save, "%s/final.safetensors", dir);
    snprintf(nsteps, sizeof nsteps, "%lld", (long long)steps);
    char *argv[] = {launch, "--save", save, steps ? "--steps" : NULL, nsteps, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, launch, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) {
        fprintf(stderr, "nnsc-aot verify: cannot run %s: %s\n", launch, strerror(rc));
        return 1;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return 1;
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

static double rel(double a, double b)
{
    double m = fmax(fabs(a), fabs(b));
    return m > 0 ? fabs(a - b) / m : 0;
}

/* Per-tensor relative L2 difference, for the report. */
typedef struct wdiff {
    const char *name;  /* tensor */
    double rel;        /* ||a - b|| / ||a|| */
} wdiff;

static int cmp_wdiff(const void *x, const void *y)
{
    double a = ((const wdiff *)x)->rel, b = ((const wdiff *)y)->rel;
    return a < b ? 1 : a > b ? -1 : 0;
}

/* Compare the final weights: the relative L2 difference over all
 * parameters as one vector must be within tol (docs/testing.md explains why
 * per-tensor bounds cannot work under AdamW).  Returns the number of
 * failures. */
static int compare_weights(const char *d1, const char *dn, double tol)
{
    char p1[8400], pn[8400], err[512];
    snprintf(p1, sizeof p1, "%s/final.safetensors", d1);
    snprintf(pn, sizeof pn, "%s/final.safetensors", dn);
    rt_st_file a, b;
    if (rt_st_open(p1, &a, err, sizeof err)) {
        fprintf(stderr, "nnsc-aot verify: %s: %s\n", p1, err);
        return 1;
    }
    if (rt_st_open(pn, &b, err, sizeof err)) {
        fprintf(stderr, "nnsc-aot verify: %s: %s\n", pn, err);
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
        if (!y || y->end - y->begin != x->end - x->begin || strcmp(x->dtype, "F32") || strcmp(y->dtype, "F32")) {
            printf("final weights: tensor %s missing or different in the %s build\n", x->name, dn);
            bad++;
            continue;
        }
        int64_t n = (x->end - x->begin) / 4;
        const float *u = x->data, *v = y->data;
        double tn = 0, td = 0;
        for (int64_t k = 0; k < n; k++) {
            double e = (double)u[k] - v[k];
            td += e * e;
            tn += (double)u[k] * u[k];
            if (isnan(u[k]) || isnan(v[k])) td = INFINITY;
        }
        num += td;
        den += tn;
        total += n;
        wd[i].rel = tn > 0 ? sqrt(td / tn) : sqrt(td);
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (!(rel <= tol)) bad++;
    qsort(wd, (size_t)a.nt, sizeof *wd, cmp_wdiff);
    printf("final weights: %d tensors, %lld values: relative L2 difference %.3g, tolerance %.3g\n", a.nt,
           (long long)total, rel, tol);
    printf("  largest per tensor:");
    for (int i = 0; i < a.nt && i < 3; i++) printf(" %s %.3g%s", wd[i].name, wd[i].rel, i + 1 < 3 && i + 1 < a.nt ? "," : "");
    printf("\n");
    free(wd);
    rt_st_free(&a);
    rt_st_free(&b);
    return bad;
}

/* Build the model for ndev devices into dir, for o's target (cpu = 1: for
 * the cpu target whatever o says). */
static int build(const fe_opts *o, int ndev, const char *dir, int cpu)
{
    fe_opts c = *o;
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

int fe_verify(const fe_opts *o)
{
    ir_graph g;
    ir_graph_init(&g);
    int rc = fe_load(o->spec, o->sets, o->nset, &g);
    int ndev = g.req.devices;
    char model[256];
    snprintf(model, sizeof model, "%s", g.model ? g.model : "model");
    ir_graph_free(&g);
    if (rc || (rc = fe_target_check(o))) return rc;
    int cuda = o->target == FE_TARGET_CUDA;
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
    if ((rc = build(o, 1, d1, 1)) || (rc = build(o, ndev, dn, 0))) return rc;
    int r1 = run_launch(d1, o->steps), rn = run_launch(dn, o->steps);
    double *l1, *ln;
    int n1 = read_losses(d1, &l1), nn = read_losses(dn, &ln);
    if (cuda) {
        printf("verify %s: 1 device (cpu) vs %d device%s (cuda", model, ndev, ndev > 1 ? "s" : "");
        for (int k = 0; k < o->narch; k++) printf("%s%s", k ? "," : " ", o->archs[k]);
        printf("), %d steps (builds in %s)\n", n1, root);
    } else {
        printf("verify %s: 1 device vs %d devices, %d steps (builds in %s)\n", model, ndev, n1, root);
    }
    int bad = 0;
    if (r1 || rn) {
        printf("a run failed: 1-device exit status %d, %d-device exit status %d\n", r1, ndev, rn);
        bad++;
    }
    if (n1 != nn || n1 == 0) {
        printf("steps logged: %d vs %d\n", n1, nn);
        bad++;
    }
    printf("%6s  %-16s  %-16s  %s\n", "step", "loss 1 dev", "loss N dev", "rel diff");
    double worst = 0;
    for (int s = 0; s < n1 && s < nn; s++) {
        double r = rel(l1[s], ln[s]);
        if (!(r <= o->loss_tol)) bad++;
        if (r > worst || r != r) worst = r;
        printf("%6d  %-16.9g  %-16.9g  %.3g%s\n", s + 1, l1[s], ln[s], r, r <= o->loss_tol ? "" : "  MISMATCH");
    }
    printf("losses: largest relative difference %.3g, tolerance %.3g\n", worst, o->loss_tol);
    if (!r1 && !rn) bad += compare_weights(d1, dn, o->weight_tol);
    printf("verify: %s\n", bad ? "FAILED" : "OK");
    free(l1);
    free(ln);
    if (!o->keep && !bad) {
        /* remove what we made; keep it when something disagreed */
        char cmdpath[4300];
        const char *sub[] = {d1, dn};
        for (int i = 0; i < 2; i++) {
            const char *files[] = {"launch", "plan.txt", "log.txt", "final.safetensors",
                                   "kernels/nnsc_kernels.cu", "kernels"};
            for (size_t k = 0; k < sizeof files / sizeof *files; k++) {
                snprintf(cmdpath, sizeof cmdpath, "%s/%s", sub[i], files[k]);
                remove(cmdpath);
            }
            for (int r = 0; r < ndev; r++) {
                snprintf(cmdpath, sizeof cmdpath, "%s/rank%d", sub[i], r);
                remove(cmdpath);
            }
            rmdir(sub[i]);
        }
        rmdir(root);
    }
    return bad ? 1 : 0;
}
