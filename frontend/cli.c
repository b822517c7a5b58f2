/* cli.c -- the command line of nnsc-aot (compile and verify). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"

static const char usage[] =
    "usage: nnsc-aot MODEL.ini -o DIR [options]        compile: one executable per rank in DIR\n"
    "       nnsc-aot verify MODEL.ini [options]         build 1-device and N-device programs,\n"
    "                                                   run both, compare losses and weights\n"
    "\n"
    "options (compile and verify):\n"
    "  -o DIR             output directory (created): rank0..rankN-1, launch, plan.txt\n"
    "  --devices N        number of devices; short for --set cluster.devices=N\n"
    "  --set S.K=V        override key K of section S of the spec (repeatable), e.g.\n"
    "                     --set train.steps=5  --set \"param fc1.w.init=normal 0.1\"\n"
    "  --dump=P[,P...]    print the IR after passes to stdout; P is one of\n"
    "                     graph autograd plan comm schedule lower (or all)\n"
    "  --emit-llvm        also write DIR/rankN.ll (the optimised host code)\n"
    "  --cpu CPU          target CPU of rank code (default x86-64-v3; e.g. x86-64-v4, native)\n"
    "  -O N               LLVM optimisation level of rank code, 0..3 (default 2)\n"
    "  -v                 per-pass timings on stderr\n"
    "  -q                 no progress lines\n"
    "  --help             this text\n"
    "\n"
    "options (verify only):\n"
    "  --steps N          train N steps (default: the spec's [train] steps)\n"
    "  --keep DIR         keep both builds and their outputs in DIR (default: a temporary dir)\n"
    "  --loss-tol X       largest relative difference of per-step losses (default 1e-5)\n"
    "  --weight-tol X     largest relative L2 difference of the final weights, all\n"
    "                     parameters taken as one vector (default 1e-4)\n"
    "\n"
    "exit status: 0 ok, 1 failure (a rank failed, verify disagreed, a tool failed),\n"
    "             2 bad input (the message names file, line and what would be right)\n"
    "Spec format: docs/model-spec.md.  Plans: docs/plans.md.  Runtime flags: DIR/rank0 --help.\n";

static int bad(const char *fmt, const char *arg)
{
    fprintf(stderr, "nnsc-aot: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n  hint: nnsc-aot --help lists the options\n");
    return 2;
}

static void add_set(fe_opts *o, const char *s)
{
    *IR_PUSH(o->sets, o->nset, o->setcap) = ir_xstrdup(s);
}

/* A decimal integer in [lo, hi], whole string. */
static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *v)
{
    char *end;
    if (!s || !*s || *s == '-' || *s == '+') return 1;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end || x < lo || x > hi) return 1;
    *v = x;
    return 0;
}

int fe_cli(int argc, char **argv, fe_opts *o)
{
    memset(o, 0, sizeof *o);
    o->cpu = "x86-64-v3";
    o->opt_level = 2;
    o->loss_tol = 1e-5;
    o->weight_tol = 1e-4;
    int i = 1;
    if (i < argc && strcmp(argv[i], "verify") == 0) o->verify = 1, i++;
    else if (i < argc && strcmp(argv[i], "compile") == 0) i++;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return 3;
        } else if (strcmp(a, "-o") == 0) {
            if (!val) return bad("%s needs a directory", a);
            o->out = val, i++;
        } else if (strcmp(a, "--devices") == 0) {
            if (parse_int(val, 1, 1 << 20, &v)) return bad("--devices needs a number >= 1, got '%s'", val ? val : "");
            char buf[64];
            snprintf(buf, sizeof buf, "cluster.devices=%lld", (long long)v);
            add_set(o, buf), i++;
        } else if (strcmp(a, "--set") == 0) {
            if (!val) return bad("%s needs SECTION.KEY=VALUE", a);
            add_set(o, val), i++;
        } else if (strncmp(a, "--set=", 6) == 0) {
            add_set(o, a + 6);
        } else if (strncmp(a, "--dump=", 7) == 0) {
            o->dump = a + 7;
        } else if (strcmp(a, "--dump") == 0) {
            if (!val) return bad("%s needs pass names", a);
            o->dump = val, i++;
        } else if (strcmp(a, "--emit-llvm") == 0) {
            o->emit_llvm = 1;
        } else if (strcmp(a, "--cpu") == 0) {
            if (!val) return bad("%s needs a CPU name", a);
            o->cpu = val, i++;
        } else if (strcmp(a, "-O") == 0 || (strncmp(a, "-O", 2) == 0 && a[2])) {
            const char *n = a[2] ? a + 2 : val;
            if (parse_int(n, 0, 3, &v)) return bad("-O needs 0..3, got '%s'", n ? n : "");
            o->opt_level = (int)v;
            if (!a[2]) i++;
        } else if (strcmp(a, "-v") == 0) {
            o->verbose = 1;
        } else if (strcmp(a, "-q") == 0) {
            o->quiet = 1;
        } else if (o->verify && strcmp(a, "--steps") == 0) {
            if (parse_int(val, 1, INT64_MAX, &v)) return bad("--steps needs a number >= 1, got '%s'", val ? val : "");
            o->steps = v, i++;
        } else if (o->verify && strcmp(a, "--keep") == 0) {
            if (!val) return bad("%s needs a directory", a);
            o->keep = val, i++;
        } else if (o->verify && (strcmp(a, "--loss-tol") == 0 || strcmp(a, "--weight-tol") == 0)) {
            char *end;
            double x = val ? strtod(val, &end) : -1;
            if (!val || *end || !(x >= 0)) return bad("tolerance needs a number >= 0, got '%s'", val ? val : "");
            *(a[2] == 'l' ? &o->loss_tol : &o->weight_tol) = x, i++;
        } else if (a[0] == '-' && a[1]) {
            return bad("unknown option '%s'", a);
        } else if (!o->spec) {
            o->spec = a;
        } else {
            return bad("more than one model spec given ('%s')", a);
        }
    }
    if (!o->spec) return bad("%s", "no model spec given");
    if (!o->verify && !o->out && !o->dump) return bad("%s", "no output: give -o DIR (or --dump=PASS to print the IR)");
    return 0;
}

void fe_opts_free(fe_opts *o)
{
    for (int i = 0; i < o->nset; i++) free((void *)o->sets[i]);
    free(o->sets);
    memset(o, 0, sizeof *o);
}
