/* frontend.h -- the model spec (INI) to the logical Graph, and the command line.
 *
 *   spec.c     read the INI file with inih (own line-counting reader), apply
 *              --set overrides, check every section and key
 *   lower.c    evaluate [dims], declare inputs/params, unroll [block]s, add
 *              ops in dependency order (shapes inferred by ir_add_op), fill
 *              g->train and g->req
 *   main.c     the driver: nnsc-aot compile / verify
 *   verify.c   nnsc-aot verify
 *
 * Bad input is reported as
 *     FILE:LINE: error: WHAT
 *       LINE TEXT (the offending line, when there is one)
 *       hint: WHAT WOULD BE RIGHT
 * and the caller exits with status 2.
 */
#ifndef NNSC_FRONTEND_H
#define NNSC_FRONTEND_H

#include "ir.h"

/* The version of nnsc-aot (`nnsc-aot --version`): the one place it is
 * written.  MAJOR.MINOR.PATCH; raise it with a change users should know of. */
#define FE_VERSION "0.1.0"

/* One `key = value` of a section. */
typedef struct fe_kv {
    char *key;    /* key, trimmed */
    char *val;    /* value, trimmed, comments removed */
    int line;     /* line in the file, or 0 for a --set override */
} fe_kv;

/* One [section] of the spec. */
typedef struct fe_section {
    char *kind;   /* first word of the header: model dims input param op block train cluster plan */
    char *name;   /* second word (input/param/op/block), or NULL */
    int line;     /* line of the header */
    fe_kv *kv; int nkv, kvcap;
} fe_section;

/* The parsed spec, before lowering. */
typedef struct fe_spec {
    char *file;                 /* path as given */
    fe_section *sec; int nsec, seccap;
    char **lines; int nlines;   /* raw lines, for quoting in messages (1-based via line-1) */
} fe_spec;

/* Report bad input at file:line (line 0: no line) and return 2.
 * hint may be NULL. */
int fe_error(const fe_spec *s, int line, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Read and check the spec; apply overrides ("section.key=value", where
 * section is the header text, e.g. "train" or "param fc1.w").  Returns 0, or
 * 2 after printing a message. */
int fe_parse(const char *path, const char *const *sets, int nset, fe_spec *s);
void fe_spec_free(fe_spec *s);
/* Value of key in section, or NULL. */
const fe_kv *fe_get(const fe_section *sec, const char *key);

/* Build the forward Graph from a parsed spec.  Returns 0, or 2 after
 * printing a message. */
int fe_lower(const fe_spec *s, ir_graph *g);

/* fe_parse + fe_lower. */
int fe_load(const char *path, const char *const *sets, int nset, ir_graph *g);
/* The same with every input's batch dim divided by batch_div (where it
 * divides): one of batch_div data-parallel replicas; and with layers > 0,
 * every block's repeat scaled to `layers` layers in all, which the caller
 * makes exact (policy auto's folds, passes/search.c). */
int fe_load_fold(const char *path, const char *const *sets, int nset, int64_t batch_div, int layers, ir_graph *g);

/* What the rank executables run on (--target). */
typedef enum fe_target {
    FE_TARGET_CPU,   /* kernels in rtlib on the CPU, ranks on one host (shared memory) */
    FE_TARGET_CUDA,  /* kernels as cubins on one NVIDIA GPU per rank, NCCL (docs/cuda.md) */
} fe_target;

/* Most --arch entries. */
#define FE_MAX_ARCH 8

/* The command line (cli.c), for compile and verify alike. */
typedef struct fe_opts {
    int verify;                /* the verify command */
    int reference;             /* verify's 1-device reference build: every op whole, nothing recomputed,
                                  no search (the spec's micro-batches) */
    int profile;               /* the profile command (profile.c): calibrate cpu-host, write -o FILE */
    const char *prof_pack;     /* profile --pack DIR: build the calibration runs into DIR (and DIR/run.sh) */
    const char *prof_from;     /* profile --from DIR: fit from the logs DIR/run.sh wrote */
    int prof_ranks;            /* profile --ranks N: ranks busy at once in every run (0: 2) */
    int prof_rounds;           /* profile --rounds R: every run R times, round by round; the medians (0: 1) */
    int check_op;              /* the check-op command (checkop.c) */
    const char *check_name;    /* check-op SPEC NAME: the [custom NAME] to check */
    const char *spec;          /* model spec path */
    const char *out;           /* output directory, or NULL (dumps only) */
    const char **sets;         /* --set overrides (--devices N becomes cluster.devices=N) */
    int nset, setcap;
    const char *dump;          /* comma-separated pass names to dump, or NULL */
    const char *stop_after;    /* --stop-after: the pass the compile stops after (nothing written), or NULL */
    int emit_llvm;             /* write rankN.ll */
    const char *cpu;           /* target CPU of rank code */
    int opt_level;             /* LLVM optimisation level */
    fe_target target;          /* --target (default cpu) */
    char **archs;              /* cuda: GPU architectures, e.g. "sm_80" (owned; --arch,
                                  default sm_80,sm_90); NULL for cpu */
    int narch;                 /* how many (1 .. FE_MAX_ARCH; 0 for cpu) */
    int emit_kernels;          /* cuda: write DIR/kernels/nnsc_kernels.cu */
    int no_fuse;               /* --no-fuse: keep elementwise kernels unfused (passes/fuse.c) */
    int no_loops;              /* --no-loops: unroll repeated layers (no passes/outline.c) */
    int verbose;               /* per-pass timings on stderr */
    int quiet;                 /* no progress lines */
    int64_t steps;             /* verify: steps to run (0: the spec's) */
    const char *keep;          /* verify: keep the builds in this directory */
    double loss_tol;           /* verify: relative tolerance of per-step losses */
    double weight_tol;         /* verify: relative tolerance of final weights */
} fe_opts;
/* Parse argv; returns 0, 3 for --help, --version or --cpu help (printed),
 * or 2 after a message (a bad option, an unknown --cpu). */
int fe_cli(int argc, char **argv, fe_opts *o);
void fe_opts_free(fe_opts *o);

/* driver.c: one compile.  Returns 0, 1 (a tool or system failure, message
 * printed) or 2 (bad input, message printed). */
int fe_compile(const fe_opts *o);
/* The cost model's step (seconds) of spec with the overrides sets (driver.c); 0 or 2. */
int fe_estimate(const char *spec, const char *const *sets, int nset, double *step);
/* nnsc-aot profile: calibrate the cpu-host profile on this machine, write it to o->out. */
int fe_profile(const fe_opts *o);
/* [plan] policy = auto: passes/search.c's pass_search on the loaded graph
 * g, its candidates' graphs loaded from o's spec and --set (driver.c).  0,
 * or 2 after a message. */
int fe_search(const fe_opts *o, ir_graph *g);
/* Can this nnsc-aot build for o's target?  0, or 2 after a message (the
 * cuda target in a compiler built without NVRTC). */
int fe_target_check(const fe_opts *o);
/* driver.c: compile CUDA C src with NVRTC for every o->archs entry into
 * cubin[0 .. o->narch), the cuda target's messages on failure (a custom
 * section's file among cust[0 .. ncust) that does not compile is the spec's
 * error; srcnote + srcpath say where the generated source is).  0, 2 (bad
 * input) or 1. */
struct cg_cubin;
int fe_nvrtc(const fe_opts *o, const char *src, const ir_custom *cust, int ncust, const char *srcnote,
             const char *srcpath, struct cg_cubin *cubin);

/* verify.c: build 1-device and N-device programs, run both, compare.
 * Returns the exit status. */
int fe_verify(const fe_opts *o);
/* Remove the tree at dir (a temporary directory the compiler made); 0, or -1
 * when something stayed. */
int fe_rm_tree(const char *dir);
/* outdir.c: a build owns its -o directory (DIR/.nnsc-aot-files lists what
 * it wrote).  fe_outdir_check, before any work: 0 when dir is missing,
 * empty or an earlier build's, else 2 after a message (a file, or a folder
 * holding files nnsc-aot did not write).  fe_outdir_claim, before the first
 * file is written: removes what the earlier build wrote and records what
 * stays; fe_outdir_done, after the last (done or failed): records what this
 * build wrote.  Both 0, or 1 after a message. */
int fe_outdir_check(const char *dir);
int fe_outdir_claim(const char *dir, const char *model);
int fe_outdir_done(const char *dir, const char *model);
/* nnsc-aot check-op SPEC NAME: a custom op's kernel and annotation against
 * its unsplit runs and finite differences (--target cuda: its CUDA kernel
 * too, on a GPU); 0 ok, 1 a check failed, 2 bad input. */
int fe_check_op(const fe_opts *o);

#endif
