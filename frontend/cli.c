/* cli.c -- the command line of nnsc-aot (compile and verify). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm/Config/llvm-config.h>

#include "codegen.h"
#include "cuda.h"
#include "fe_priv.h"

static const char usage[] =
    "usage: nnsc-aot MODEL.ini -o DIR [options]        compile: DIR/rank runs every rank (rankK: links)\n"
    "       nnsc-aot verify MODEL.ini [options]         build 1-device and N-device programs,\n"
    "                                                   run both, compare losses and weights\n"
    "       nnsc-aot profile [MODEL.ini] -o FILE        calibrate the cpu-host cost-model profile on\n"
    "                                                   this machine, on MODEL (default: a built-in\n"
    "                                                   one); [cluster] device = FILE reads it;\n"
    "                                                   --target cuda: the GPU profile cluster.device\n"
    "                                                   names, on GPUs\n"
    "       nnsc-aot profile [MODEL.ini] --pack DIR     build the calibration runs into DIR, to run\n"
    "                                                   elsewhere (DIR/run.sh)\n"
    "       nnsc-aot profile [MODEL.ini] --from DIR -o FILE  calibrate from the logs DIR/run.sh wrote\n"
    "       nnsc-aot check-op MODEL.ini NAME            test custom op NAME's kernel: its splits (the\n"
    "                                                   annotation) and gradients (docs/custom-ops.md);\n"
    "                                                   --target cuda: its CUDA kernel too, on a GPU\n"
    "\n"
    "options (compile and verify):\n"
    "  -o DIR             output directory (created): rank (every rank), rank0..rankN-1\n"
    "                     (links to it), launch, plan.txt\n"
    "  --devices N        number of devices; short for --set cluster.devices=N\n"
    "  --set S.K=V        override key K of section S of the spec (repeatable), e.g.\n"
    "                     --set train.steps=5  --set \"param fc1.w.init=normal 0.1\"\n"
    "  --dump=P[,P...]    print the IR after passes to stdout; P is one of\n"
    "                     graph autograd plan comm schedule lower prog share (or all)\n"
    "  --stop-after P     stop after pass P (graph autograd plan comm schedule) and write\n"
    "                     nothing (no -o): with --dump or -v, to look at a plan, or time\n"
    "                     policy = auto's search alone (--stop-after graph)\n"
    "  --emit-llvm        also write DIR/progK.ll (the optimised host code of each distinct\n"
    "                     program) and DIR/rankN.ll (rank N's)\n"
    "  --cpu CPU          target CPU of rank code (default x86-64-v3; e.g. x86-64-v4, native,\n"
    "                     znver3; --cpu help lists the CPUs this LLVM knows)\n"
    "  -O N               LLVM optimisation level of rank code, 0..3 (default 2)\n"
    "  --target T         what the ranks run on: cpu (default) or cuda (one NVIDIA GPU\n"
    "                     per rank, NCCL; kernels compiled by NVRTC into every rank)\n"
    "  --arch LIST        cuda: GPU architectures to compile for, comma-separated,\n"
    "                     sm_80 or newer (default sm_80,sm_90; e.g. sm_80,sm_86,sm_90)\n"
    "  --emit-kernels     cuda: also write DIR/kernels/nnsc_kernels.cu (the CUDA C compiled)\n"
    "  --no-fuse          do not fuse elementwise chains (docs/fusion.md; for debugging)\n"
    "  --no-loops         unroll repeated layers instead of calling one body per layer\n"
    "                     shape in a loop (compile time grows with layers; for A/B runs)\n"
    "  -v                 per-pass timings on stderr\n"
    "  -q                 no progress lines\n"
    "  --help             this text (nnsc-aot verify --help, nnsc-aot help profile, ...: a command's)\n"
    "  --version          nnsc-aot's version and the LLVM (and NVRTC) it was built with\n"
    "\n"
    "options (verify only):\n"
    "  --steps N          train N steps (default: the spec's [train] steps)\n"
    "  --keep DIR         keep both builds and their outputs in DIR (default: a temporary dir)\n"
    "  --loss-tol X       largest relative difference of per-step losses (default 1e-5)\n"
    "  --weight-tol X     largest relative L2 difference of the final weights, all\n"
    "                     parameters taken as one vector (default 1e-4)\n"
    "\n"
    "options (profile only):\n"
    "  --steps N          steps of each calibration run (default 12)\n"
    "  --ranks N          ranks busy at once in every run, as many as the plans will run\n"
    "                     (default 2): N copies of the 1-rank runs, dp N, tp N; --target\n"
    "                     cuda: N GPUs (default 1: the 1-rank runs alone, no link fitted)\n"
    "  --rounds R         every run R times, round by round (the medians: a noisy machine)\n"
    "\n"
    "exit status: 0 ok, 1 failure (a rank failed, verify disagreed, a tool failed),\n"
    "             2 bad input (the message names file, line and what would be right)\n"
    "Spec format: docs/model-spec.md.  Plans: docs/plans.md.  Runtime flags: DIR/rank0 --help.\n";

/* The usage of each subcommand (nnsc-aot verify --help, ...). */
static const char usage_verify[] =
    "usage: nnsc-aot verify MODEL.ini [options]\n"
    "  Build MODEL for 1 device and for its N devices (the spec's, or --devices N),\n"
    "  train both from the same seed and data, and compare: per-step losses and the\n"
    "  final weights.  Exit 0 they agree, 1 they differ or a run failed, 2 bad input.\n"
    "\n"
    "options:\n"
    "  --devices N        the N-device build's devices\n"
    "  --set S.K=V        override key K of section S of the spec (repeatable)\n"
    "  --steps N          train N steps (default: the spec's [train] steps)\n"
    "  --keep DIR         keep both builds, their logs and final weights in DIR (dev1/,\n"
    "                     devN/; default: a temporary dir, removed when they agree)\n"
    "  --loss-tol X       largest relative difference of per-step losses (default 1e-5)\n"
    "  --weight-tol X     largest relative L2 difference of the final weights, all\n"
    "                     parameters taken as one vector (default 1e-4)\n"
    "  --target cuda      the N-device build for GPUs, against the 1-device CPU build\n"
    "  --arch LIST        cuda: GPU architectures (default sm_80,sm_90)\n"
    "  --cpu CPU, -O N, --no-fuse, --no-loops, -v, -q   as for a compile (nnsc-aot --help)\n"
    "Tolerances and what a failed verify prints: docs/cli.md, docs/testing.md.\n";
static const char usage_profile[] =
    "usage: nnsc-aot profile [MODEL.ini] -o FILE\n"
    "       nnsc-aot profile [MODEL.ini] --pack DIR\n"
    "       nnsc-aot profile [MODEL.ini] --from DIR -o FILE\n"
    "  Calibrate the cost model: build and run MODEL (default: a small built-in one)\n"
    "  five ways and write the FLOP/s, weight_bw and link figures they fit as a\n"
    "  [cluster] profile FILE ([cluster] device = FILE reads it).  --pack DIR builds\n"
    "  the runs into DIR with DIR/run.sh, to run where there is no compiler; --from\n"
    "  DIR fits FILE from the logs run.sh wrote.\n"
    "\n"
    "options:\n"
    "  --steps N          steps of each calibration run (default 12)\n"
    "  --ranks N          ranks busy at once in every run, as many as the plans will run\n"
    "                     (default 2; --target cuda: N GPUs, default 1)\n"
    "  --rounds R         every run R times, round by round (the medians: a noisy machine)\n"
    "  --set S.K=V        override a key of the spec in every run (repeatable)\n"
    "  --target cuda      refine the GPU profile cluster.device names, on GPUs\n"
    "  --arch LIST, -q    as for a compile (nnsc-aot --help)\n"
    "docs/cli.md and docs/plan-search.md (Calibration) say more.\n";
static const char usage_checkop[] =
    "usage: nnsc-aot check-op MODEL.ini NAME [options]\n"
    "  Test the kernel of MODEL's [custom NAME] section (and its backward's) in this\n"
    "  process: every output written, acc honoured, every split its annotation allows\n"
    "  against the unsplit run, gradients against finite differences, inputs left as\n"
    "  they were.  One line per check; exit 0 all passed, 1 one failed, 2 bad input.\n"
    "\n"
    "options:\n"
    "  --set S.K=V        override a key of the spec (repeatable)\n"
    "  --target cuda      also compile the section's CUDA kernel and, on a GPU, run the\n"
    "                     same checks with it against the C kernel\n"
    "  --arch LIST, -q    as for a compile (nnsc-aot --help)\n"
    "docs/custom-ops.md says more.\n";

/* Report a bad command line: "error: " fmt (with arg), then hint (NULL:
 * point at --help).  Returns 2. */
static int bad_hint(const char *hint, const char *fmt, const char *arg)
{
    fprintf(stderr, "nnsc-aot: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n  hint: %s\n", hint ? hint : "nnsc-aot --help lists the options");
    return 2;
}

/* The same, with the hint that points at --help. */
static int bad(const char *fmt, const char *arg)
{
    return bad_hint(NULL, fmt, arg);
}

#define STR_(x) #x
#define STR(x) STR_(x)  /* a macro's value as a string literal */

/* The GPU architectures the cuda target takes, for messages. */
#define ARCH_HINT "--arch takes a comma-separated list of sm_XY (compute capability X.Y), " \
                  "sm_80 or newer, e.g. sm_80,sm_90 (the default), sm_86, sm_89 or sm_90a"

/* One --arch entry: "sm_" then 2 or 3 digits (80 or more: the kernels use
 * sm_80's tensor-core mma.sync) and at most one letter (sm_90a).  0 if
 * good, else 2 after a message.  Which ones exist is NVRTC's to say. */
static int check_arch(const char *a)
{
    const char *p = a + 3;
    int digits = 0, cc = 0;
    if (strncmp(a, "sm_", 3) != 0)
        return bad_hint(ARCH_HINT, "--arch: '%s' is not a GPU architecture", a);
    for (; *p >= '0' && *p <= '9'; p++) digits++, cc = 10 * cc + (*p - '0');
    if (*p >= 'a' && *p <= 'z') p++;
    if (digits < 2 || digits > 3 || *p)
        return bad_hint(ARCH_HINT, "--arch: '%s' is not a GPU architecture", a);
    if (cc < 80)
        return bad_hint(ARCH_HINT, "--arch: %s is too old: the CUDA kernels need sm_80 or newer", a);
    return 0;
}

/* Parse --arch LIST into o->archs: every entry checked, none twice, at most
 * FE_MAX_ARCH.  0, or 2 after a message. */
static int parse_archs(fe_opts *o, const char *list)
{
    if (!list || !*list) return bad_hint(ARCH_HINT, "%s", "--arch needs a list of GPU architectures");
    for (int k = 0; k < o->narch; k++) free(o->archs[k]);
    o->narch = 0;
    if (!o->archs) o->archs = ir_xcalloc(FE_MAX_ARCH, sizeof *o->archs);
    for (const char *s = list;;) {
        size_t len = strcspn(s, ",");
        char item[32];
        if (len == 0) return bad_hint(ARCH_HINT, "--arch: an empty entry in '%s'", list);
        if (len >= sizeof item)
            return bad_hint(ARCH_HINT, "--arch: an entry of '%s' is not a GPU architecture", list);
        memcpy(item, s, len);
        item[len] = '\0';
        if (check_arch(item)) return 2;
        for (int k = 0; k < o->narch; k++)
            if (strcmp(o->archs[k], item) == 0) return bad_hint(ARCH_HINT, "--arch: %s is listed twice", item);
        if (o->narch == FE_MAX_ARCH)
            return bad_hint(ARCH_HINT, "--arch: more than " STR(FE_MAX_ARCH) " architectures in '%s'", list);
        o->archs[o->narch++] = ir_xstrdup(item);
        if (!s[len]) break;
        s += len + 1;
    }
    return 0;
}

/* --version: nnsc-aot's, the LLVM it was built with (and the libLLVM it
 * runs with, when another), and NVRTC's for the cuda target. */
static void print_version(void)
{
    unsigned major, minor, patch;
    int nv_major, nv_minor;
    LLVMGetVersion(&major, &minor, &patch);
    printf("nnsc-aot %s\n", FE_VERSION);
    printf("LLVM %s", LLVM_VERSION_STRING);
    if (major != LLVM_VERSION_MAJOR || minor != LLVM_VERSION_MINOR || patch != LLVM_VERSION_PATCH)
        printf(" (running with libLLVM %u.%u.%u)", major, minor, patch);
    printf("\n");
    int nv = cg_nvrtc_version(&nv_major, &nv_minor);
    if (nv == CG_NVRTC_OK) printf("NVRTC %d.%d (--target cuda)\n", nv_major, nv_minor);
    else if (nv == CG_NVRTC_MISSING) printf("NVRTC: none (built without the CUDA toolkit: no --target cuda)\n");
    else printf("NVRTC: does not answer (--target cuda will fail)\n");
}

/* The CPUs named in --cpu's hint: the x86-64 levels and common server CPUs. */
#define CPU_HINT "--cpu takes x86-64-v3 (the default: AVX2 and FMA, Intel Haswell / AMD Zen and later), " \
                 "x86-64-v2, x86-64-v4 (AVX-512), native (this machine's CPU) or an LLVM CPU name such as " \
                 "skylake-avx512, icelake-server, sapphirerapids, znver3 or znver4; " \
                 "`nnsc-aot --cpu help` lists them all"

/* --cpu help: the CPUs rank code can be compiled for (LLVM's list without
 * the 32-bit ones, which cg_cpu_check refuses).  Returns 3, or 1 when LLVM
 * did not list them. */
static int list_cpus(void)
{
    char **names = cg_cpu_names();
    if (!names) {
        fprintf(stderr, "nnsc-aot: error: --cpu help: LLVM %s did not list its CPUs\n", LLVM_VERSION_STRING);
        return 1;
    }
    printf("CPUs for rank code (--cpu NAME), LLVM %s:\n"
           "  native      this machine's CPU and its features\n"
           "  x86-64-v3   the default: AVX2 and FMA, Intel Haswell / AMD Zen and later\n",
           LLVM_VERSION_STRING);
    int col = 0, left = 0;
    char why[512];
    for (int i = 0; names[i]; i++) {
        if (cg_cpu_check(names[i], why, sizeof why) != 0) {
            left++;
            continue;
        }
        int w = (int)strlen(names[i]) + 1;
        if (col == 0) col = printf(" ");
        else if (col + w > 78) col = printf("\n ") - 1;
        col += printf(" %s", names[i]);
    }
    printf("\n");
    if (left) printf("(%d CPUs without 64-bit mode are left out: rank code is x86-64)\n", left);
    cg_cpu_names_free(names);
    return 3;
}

/* Check --cpu NAME before anything is built: LLVM would otherwise warn and
 * build for a generic CPU (an unknown name) or abort (a 32-bit CPU).
 * "native" is always right.  0, or 2 after a message (1 when the check
 * itself could not run). */
static int check_cpu(const char *cpu)
{
    char why[512], hint[1024], near[96], near_why[512];
    if (strcmp(cpu, "native") == 0) return 0;
    int rc = cg_cpu_check(cpu, why, sizeof why);
    if (rc == 0) return 0;
    if (rc < 0) {
        fprintf(stderr, "nnsc-aot: error: --cpu %s: cannot check the CPU name: %s\n", cpu, why);
        return 1;
    }
    /* a suggestion only among the CPUs that work */
    near[0] = '\0';
    char **names = cg_cpu_names();
    int n = 0;
    while (names && names[n]) n++;
    int k = rc == 1 && n ? fe_closest(cpu, (const char *const *)names, n) : -1;
    if (k >= 0 && cg_cpu_check(names[k], near_why, sizeof near_why) == 0)
        snprintf(near, sizeof near, "did you mean '%.60s'? ", names[k]);
    cg_cpu_names_free(names);
    snprintf(hint, sizeof hint, "%s%s", near, CPU_HINT);
    if (rc == 1) return bad_hint(hint, "--cpu %s: LLVM " LLVM_VERSION_STRING " does not know this CPU", cpu);
    fprintf(stderr, "nnsc-aot: error: --cpu %s: LLVM cannot compile x86-64 rank code for this CPU (%s)\n"
                    "  hint: rank code is 64-bit: name an x86-64 CPU; %s\n", cpu, why, CPU_HINT);
    return 2;
}

/* Every option, for "did you mean" (verify's last). */
static const char *const options[] = {
    "-o", "--devices", "--set", "--dump", "--stop-after", "--emit-llvm", "--cpu", "-O", "--target", "--arch", "--emit-kernels",
    "--no-fuse", "--no-loops", "-v", "-q", "--help", "--version", "--steps", "--keep", "--loss-tol",
    "--weight-tol", "--pack", "--from", "--ranks", "--rounds",
};

/* An unknown option: the message, with the closest option as a hint.
 * Returns 2. */
static int unknown_option(const char *a)
{
    char word[64], hint[256];
    snprintf(word, sizeof word, "%.*s", (int)strcspn(a, "="), a);
    int k = fe_closest(word, options, (int)(sizeof options / sizeof *options));
    if (k < 0) return bad("unknown option '%s'", a);
    snprintf(hint, sizeof hint, "did you mean '%s'? nnsc-aot --help lists the options", options[k]);
    return bad_hint(hint, "unknown option '%s'", a);
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

/* Parse argv into o (see usage). */
int fe_cli(int argc, char **argv, fe_opts *o)
{
    memset(o, 0, sizeof *o);
    o->cpu = "x86-64-v3";
    o->opt_level = 2;
    o->loss_tol = 1e-5;
    o->weight_tol = 1e-4;
    const char *target = NULL, *arch = NULL;
    int i = 1, cpu_given = 0;
    if (i < argc && strcmp(argv[i], "help") == 0) {   /* nnsc-aot help [COMMAND] */
        const char *c = i + 1 < argc ? argv[i + 1] : "";
        fputs(!strcmp(c, "verify") ? usage_verify : !strcmp(c, "profile") ? usage_profile
              : !strcmp(c, "check-op") ? usage_checkop : usage, stdout);
        return 3;
    }
    if (i < argc && !strchr(argv[i], '.') && !strchr(argv[i], '/') && argv[i][0] != '-') {
        static const char *const cmds[] = {"verify", "profile", "check-op", "compile", "help"};
        int k = fe_closest(argv[i], cmds, 5);
        if (k >= 0 && strcmp(argv[i], cmds[k]) != 0) {
            char hint[200];
            snprintf(hint, sizeof hint, "did you mean 'nnsc-aot %s'? nnsc-aot --help lists the commands", cmds[k]);
            return bad_hint(hint, "unknown command '%s'", argv[i]);
        }
    }
    if (i < argc && strcmp(argv[i], "verify") == 0) o->verify = 1, i++;
    else if (i < argc && strcmp(argv[i], "profile") == 0) o->profile = 1, i++;
    else if (i < argc && strcmp(argv[i], "check-op") == 0) o->check_op = 1, i++;
    else if (i < argc && strcmp(argv[i], "compile") == 0) i++;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t v;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(o->verify ? usage_verify : o->profile ? usage_profile : o->check_op ? usage_checkop : usage, stdout);
            return 3;
        } else if (strcmp(a, "--version") == 0) {
            print_version();
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
        } else if (strncmp(a, "--stop-after=", 13) == 0) {
            o->stop_after = a + 13;
        } else if (strcmp(a, "--stop-after") == 0) {
            if (!val) return bad("%s needs a pass name", a);
            o->stop_after = val, i++;
        } else if (strcmp(a, "--emit-llvm") == 0) {
            o->emit_llvm = 1;
        } else if (strcmp(a, "--cpu") == 0) {
            if (!val) return bad_hint(CPU_HINT, "%s needs a CPU name", a);
            if (strcmp(val, "help") == 0) return list_cpus();
            o->cpu = val, i++;
            cpu_given = 1;
        } else if (strcmp(a, "-O") == 0 || (strncmp(a, "-O", 2) == 0 && a[2])) {
            const char *n = a[2] ? a + 2 : val;
            if (parse_int(n, 0, 3, &v)) return bad("-O needs 0..3, got '%s'", n ? n : "");
            o->opt_level = (int)v;
            if (!a[2]) i++;
        } else if (strcmp(a, "--target") == 0 || strncmp(a, "--target=", 9) == 0) {
            target = a[8] ? a + 9 : val;
            if (!target) return bad_hint("--target cpu (the default) or --target cuda", "%s needs a target", a);
            if (!a[8]) i++;
        } else if (strcmp(a, "--arch") == 0 || strncmp(a, "--arch=", 7) == 0) {
            arch = a[6] ? a + 7 : val;
            if (!arch) return bad_hint(ARCH_HINT, "%s needs a list of GPU architectures", a);
            if (!a[6]) i++;
        } else if (strcmp(a, "--emit-kernels") == 0) {
            o->emit_kernels = 1;
        } else if (strcmp(a, "--no-fuse") == 0) {
            o->no_fuse = 1;
        } else if (strcmp(a, "--no-loops") == 0) {
            o->no_loops = 1;
        } else if (strcmp(a, "-v") == 0) {
            o->verbose = 1;
        } else if (strcmp(a, "-q") == 0) {
            o->quiet = 1;
        } else if ((o->verify || o->profile) && strcmp(a, "--steps") == 0) {
            if (parse_int(val, 1, INT64_MAX, &v)) return bad("--steps needs a number >= 1, got '%s'", val ? val : "");
            o->steps = v, i++;
        } else if (o->profile && (strcmp(a, "--pack") == 0 || strcmp(a, "--from") == 0)) {
            if (!val || !*val) return bad("%s needs a directory", a);
            *(a[2] == 'p' ? &o->prof_pack : &o->prof_from) = val, i++;
        } else if (o->profile && strcmp(a, "--ranks") == 0) {
            if (parse_int(val, 1, 1024, &v)) return bad("--ranks needs a number of ranks in [2, 1024] ([1, 1024] with "
                                                        "--target cuda), got '%s'", val ? val : "");
            o->prof_ranks = (int)v, i++;
        } else if (o->profile && strcmp(a, "--rounds") == 0) {
            if (parse_int(val, 1, 100, &v)) return bad("--rounds needs a number of rounds in [1, 100], got '%s'", val ? val : "");
            o->prof_rounds = (int)v, i++;
        } else if (o->verify && strcmp(a, "--keep") == 0) {
            if (!val) return bad("%s needs a directory", a);
            o->keep = val, i++;
        } else if (o->verify && (strcmp(a, "--loss-tol") == 0 || strcmp(a, "--weight-tol") == 0)) {
            char *end;
            double x = val ? strtod(val, &end) : -1;
            if (!val || *end || !(x >= 0)) return bad("tolerance needs a number >= 0, got '%s'", val ? val : "");
            *(a[2] == 'l' ? &o->loss_tol : &o->weight_tol) = x, i++;
        } else if (a[0] == '-' && a[1]) {
            return unknown_option(a);
        } else if (!o->spec) {
            o->spec = a;
        } else if (o->check_op && !o->check_name) {
            o->check_name = a;
        } else {
            return bad("more than one model spec given ('%s')", a);
        }
    }
    if (target && strcmp(target, "cuda") == 0) o->target = FE_TARGET_CUDA;
    else if (target && strcmp(target, "cpu") != 0)
        return bad_hint("--target cpu (the default) or --target cuda", "unknown target '%s'", target);
    if (o->target == FE_TARGET_CPU && (arch || o->emit_kernels))
        return bad_hint("add --target cuda to build for NVIDIA GPUs (the cpu target compiles no GPU code)",
                        "%s is for the cuda target only", arch ? "--arch" : "--emit-kernels");
    if (o->target == FE_TARGET_CUDA && parse_archs(o, arch ? arch : "sm_80,sm_90")) return 2;
    if (o->profile) {
        if (o->prof_pack && o->prof_from)
            return bad_hint("--pack on the machine with the compiler, --from once DIR/run.sh has run",
                            "%s", "profile takes --pack or --from, not both");
        if (o->prof_pack && o->out)
            return bad_hint("--pack DIR builds the runs; --from DIR -o FILE writes the profile", "%s",
                            "profile --pack writes no profile: leave out -o");
        if (!o->out && !o->prof_pack) return bad("%s", "profile needs -o FILE (the profile to write)");
        if (o->prof_ranks == 1 && o->target != FE_TARGET_CUDA)
            return bad_hint("a CPU's link is its shared memory, measured between ranks: give 2 or more (one GPU: "
                            "--target cuda --ranks 1)", "--ranks needs a number of ranks in [2, 1024], got '%s'", "1");
        return 0;
    }
    if (o->check_op) {
        if (!o->spec || !o->check_name)
            return bad_hint("nnsc-aot check-op MODEL.ini NAME, NAME a [custom NAME] section of the spec", "%s",
                            "check-op needs a model spec and a custom op's name");
        if (o->out) return bad("%s", "check-op writes nothing: leave out -o");
        return 0;
    }
    if (!o->spec) return bad("%s", "no model spec given");
    if (o->stop_after && (o->out || o->verify))
        return bad_hint(o->verify ? "verify builds and runs: leave out --stop-after" : "leave out -o DIR",
                        "--stop-after %s writes nothing", o->stop_after);
    if (!o->verify && !o->out && !o->dump && !o->stop_after)
        return bad("%s", "no output: give -o DIR (or --dump=PASS to print the IR)");
    if (cpu_given) return check_cpu(o->cpu);
    return 0;
}

void fe_opts_free(fe_opts *o)
{
    for (int i = 0; i < o->nset; i++) free((void *)o->sets[i]);
    free(o->sets);
    for (int k = 0; k < o->narch; k++) free(o->archs[k]);
    free(o->archs);
    memset(o, 0, sizeof *o);
}
