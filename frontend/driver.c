/* driver.c -- the pipeline, in a straight line (like QBE's main):
 *
 *   fe_load -> pass_autograd -> pass_plan -> pass_split -> pass_comm ->
 *   pass_schedule -> per rank: pass_memplan -> pass_lower -> cg_host -> cg_link
 *   -> cg_emit (launch, plan.txt)
 *
 * Verifiers run after every pass; --dump=P prints the IR after pass P.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codegen.h"
#include "frontend.h"
#include "passes.h"

static const char *const dump_names[] = {"graph", "autograd", "plan", "comm", "schedule", "lower"};

/* Is pass P asked for in the --dump list? */
static int want(const fe_opts *o, const char *p)
{
    if (!o->dump) return 0;
    size_t n = strlen(p);
    for (const char *s = o->dump; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if ((len == n && strncmp(s, p, n) == 0) || (len == 3 && strncmp(s, "all", 3) == 0)) return 1;
        s += len + (e != NULL);
    }
    return 0;
}

/* Every name in the --dump list is a pass. */
static int check_dump(const fe_opts *o)
{
    for (const char *s = o->dump; s && *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int ok = len == 3 && strncmp(s, "all", 3) == 0;
        for (size_t i = 0; i < sizeof dump_names / sizeof *dump_names; i++)
            ok |= strlen(dump_names[i]) == len && strncmp(s, dump_names[i], len) == 0;
        if (!ok) {
            fprintf(stderr, "nnsc-aot: error: --dump: unknown pass '%.*s'\n  hint: one of graph autograd plan comm "
                            "schedule lower all\n", (int)len, s);
            return 2;
        }
        s += len + (e != NULL);
    }
    return 0;
}

static void dump(const char *pass, ir_buf *b)
{
    printf("## %s\n%s", pass, b->s ? b->s : "");
    fflush(stdout);
    ir_buf_free(b);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Time of the last phase, shown with -v. */
static void tick(const fe_opts *o, double *t0, const char *what)
{
    double t = now();
    if (o->verbose) fprintf(stderr, "nnsc-aot: %-10s %8.1f ms\n", what, 1e3 * (t - *t0));
    *t0 = t;
}

static int mkdir_p(const char *dir)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return 1;
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0777) && errno != EEXIST) return 1;
            *p = '/';
        }
    if (mkdir(buf, 0777) && errno != EEXIST) return 1;
    struct stat st;
    return stat(buf, &st) || !S_ISDIR(st.st_mode);
}

/* Lower, generate and link every rank. */
static int build_ranks(const fe_opts *o, const ir_dist *d, double *t0)
{
    ir_buf lowered = {0};
    ir_prog *progs = ir_xcalloc((size_t)d->ndev, sizeof *progs);
    for (int r = 0; r < d->ndev; r++) {
        pass_mem m;
        pass_memplan(d, r, &m);
        ir_prog_init(&progs[r], r, d->ndev);
        pass_lower(d, &m, &progs[r]);
        ir_prog_verify(&progs[r]);
        if (want(o, "lower")) ir_prog_print(&progs[r], &lowered);
        pass_mem_free(&m);
    }
    pass_fuse(progs, d->ndev);
    tick(o, t0, "lower");
    if (want(o, "lower")) dump("lower", &lowered);
    int rc = 0;
    if (o->out) {
        if (mkdir_p(o->out)) {
            fprintf(stderr, "nnsc-aot: error: cannot create output directory '%s': %s\n", o->out, strerror(errno));
            rc = 1;
        }
        const char *rtlib = rc ? NULL : cg_rtlib_path();
        if (!rc && !rtlib) rc = 1;
        cg_opts co = {o->cpu, "", o->opt_level, o->emit_llvm};
        int tty = isatty(2);
        for (int r = 0; r < d->ndev && !rc; r++) {
            char obj[4200], ll[4200], exe[4200];
            snprintf(obj, sizeof obj, "%s/rank%d.o", o->out, r);
            snprintf(ll, sizeof ll, "%s/rank%d.ll", o->out, r);
            snprintf(exe, sizeof exe, "%s/rank%d", o->out, r);
            /* progress of the long phase: a line per rank with -v, one updated line on a terminal */
            if (o->verbose) fprintf(stderr, "nnsc-aot: codegen + link rank %d/%d\n", r + 1, d->ndev);
            else if (!o->quiet && tty) fprintf(stderr, "\rnnsc-aot: codegen + link rank %d/%d", r + 1, d->ndev);
            rc = cg_host(&progs[r], &co, obj, o->emit_llvm ? ll : NULL);
            if (!rc) rc = cg_link(obj, rtlib, exe);
            if (!rc) remove(obj);
        }
        if (!o->verbose && !o->quiet && tty) fprintf(stderr, "\r\033[K");
        tick(o, t0, "codegen");
        if (!rc) rc = cg_emit(o->out, o->spec, d, progs);
    }
    for (int r = 0; r < d->ndev; r++) ir_prog_free(&progs[r]);
    free(progs);
    return rc;
}

int fe_compile(const fe_opts *o)
{
    int rc = check_dump(o);
    if (rc) return rc;
    double t0 = now();
    ir_graph g;
    ir_graph_init(&g);
    rc = fe_load(o->spec, o->sets, o->nset, &g);
    if (rc) goto out_g;
    ir_graph_verify(&g);
    tick(o, &t0, "frontend");
    ir_buf b = {0};
    if (want(o, "graph")) ir_graph_print(&g, &b), dump("graph", &b);
    if ((rc = pass_autograd(&g))) goto out_g;
    ir_graph_verify(&g);
    tick(o, &t0, "autograd");
    if (want(o, "autograd")) ir_graph_print(&g, &b), dump("autograd", &b);
    ir_dist d;
    ir_dist_init(&d, &g, g.req.devices);
    if ((rc = pass_plan(&d))) goto out_d;
    pass_split(&d);
    ir_dist_verify(&d);
    tick(o, &t0, "plan");
    if (want(o, "plan")) ir_dist_print(&d, &b), dump("plan", &b);
    pass_comm(&d);
    ir_dist_verify(&d);
    tick(o, &t0, "comm");
    if (want(o, "comm")) ir_dist_print(&d, &b), dump("comm", &b);
    pass_schedule(&d);
    ir_dist_verify(&d);
    tick(o, &t0, "schedule");
    if (want(o, "schedule")) ir_dist_print(&d, &b), dump("schedule", &b);
    rc = build_ranks(o, &d, &t0);
    if (!rc && o->out && !o->quiet) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", o->out);
        for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/';) dir[--n] = '\0';
        fprintf(stderr, "nnsc-aot: %s: %d rank%s in %s/ (see %s/plan.txt; run %s/launch)\n", g.model, d.ndev,
                d.ndev > 1 ? "s" : "", dir, dir, dir);
    }
out_d:
    ir_dist_free(&d);
out_g:
    ir_graph_free(&g);
    return rc;
}
