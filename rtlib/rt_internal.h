/* rt_internal.h -- what the files of rtlib share with each other and with
 * their tests (tests/test_rt_*.c).  Generated rank programs never include
 * this header: their whole interface is rt.h.
 *
 *   runtime.c      rt_init / rt_finish, flags, environment, arena, step log
 *   manifest.c     the MANIFEST text -> rt_manifest
 *   rng.c          counter-based RNG, param init, synthetic data
 *   pool.c         the rank's threads (fork-join pool) and per-thread scratch
 *   kernels.c      the rt_k_* entry points: elementwise, optimizers, copies
 *   rows.c         row-wise kernels: xent, softmax, layernorm, embedding
 *   attention.c    causal multi-head attention, forward and backward
 *   kernels_ref.c  rt_ref_*: plain scalar reference of every kernel
 *   matmul.c       blocked SIMD matmul with run-time ISA dispatch
 *   vmath.c        vectorised exp and the kernels built on it
 *   isa.c          the run-time choice of instruction set
 *   comm_shm.c     collectives between rank processes over POSIX shm
 *   safetensors.c  multi-rank safetensors writer and a validating reader
 *   data.c         token data files (llm.c layout) behind stream inputs
 *   train.c        the training loop: lr schedule, grad norm and clipping,
 *                  step and evaluation logs
 *   ckpt.c         checkpoints: save every N steps, --resume, --init, final weights
 *   lowp.c         bf16 rounding and matmul_bf16 (mixed precision)
 *   dev_cuda.c     the cuda target's device: driver via dlopen, launches, the mirror
 *   net.c          the cuda target's TCP rendezvous and control collectives
 *   nccl.c         the cuda target's collectives with NCCL (dlopen)
 */
#ifndef NNSC_RT_INTERNAL_H
#define NNSC_RT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rt.h"

#define RT_MAXDIM 8          /* most dimensions a param or input may have */
#define RT_NAME_MAX 256      /* longest tensor or model name in a manifest */

/* Element type of a param or input. */
typedef enum rt_dtype {
    RT_F32,   /* 32-bit float */
    RT_I32,   /* 32-bit signed integer */
} rt_dtype;

/* How a param is initialised (manifest `init KIND A B`). */
typedef enum rt_init_kind {
    RT_INIT_ZEROS,    /* 0 */
    RT_INIT_ONES,     /* 1 */
    RT_INIT_CONST,    /* A */
    RT_INIT_NORMAL,   /* N(0, A^2); B is ignored */
    RT_INIT_UNIFORM,  /* uniform in [A, B) */
} rt_init_kind;

/* How an input is made (manifest `dist KIND`). */
typedef enum rt_dist_kind {
    RT_DIST_NORMAL,   /* synthetic f32, N(0, 1) */
    RT_DIST_INT,      /* synthetic i32, uniform in [0, RANGE) */
    RT_DIST_STREAM,   /* i32 tokens read from the data file (data.c) */
    RT_DIST_ZEROS,    /* f32 0 (a recycle op's value before the first forward pass) */
} rt_dist_kind;

/* The lr schedule after warmup (manifest `schedule KIND ...`). */
typedef enum rt_sched_kind {
    RT_SCHED_CONSTANT,  /* scale 1 */
    RT_SCHED_COSINE,    /* cosine from 1 down to min_lr_frac (train.c) */
} rt_sched_kind;

/* One `param` line: a box of a param that this rank holds; also one `state`
 * line (a box of optimizer state: no initialiser, `of` names its param). */
typedef struct rt_param {
    char name[RT_NAME_MAX];     /* logical tensor name */
    uint64_t key;               /* fnv1a64(name) */
    rt_dtype dtype;             /* element type */
    int ndim;                   /* number of dimensions, 0..RT_MAXDIM */
    int64_t shape[RT_MAXDIM];   /* full logical shape */
    int64_t lo[RT_MAXDIM];      /* box held: first index per dimension */
    int64_t hi[RT_MAXDIM];      /* box held: one past the last index */
    rt_init_kind init;          /* initialiser */
    double a, b;                /* initialiser arguments */
    int64_t off;                /* arena byte offset of the box (row-major, contiguous) */
    int writer;                 /* 1: this rank writes the box when saving */
    int of;                     /* state lines: index of its param in params; params: -1 */
    char import[RT_NAME_MAX];   /* params: the name --init also accepts (`import`), or "" */
    int import_t;               /* ... stored transposed under it (2-D) */
} rt_param;

/* One `input` line: a data input (synthetic, or tokens from a file). */
typedef struct rt_input {
    char name[RT_NAME_MAX];     /* logical tensor name */
    uint64_t key;               /* fnv1a64(name) */
    rt_dtype dtype;             /* f32 for normal, i32 for int and stream */
    int ndim;                   /* number of dimensions */
    int64_t shape[RT_MAXDIM];   /* logical shape of one step's global batch */
    rt_dist_kind dist;          /* distribution */
    int64_t range;              /* RT_DIST_INT: values in [0, range); RT_DIST_STREAM: the
                                   synthetic values without a data file, [0, range)
                                   (0: none, a data file is needed) */
    int64_t stream;             /* RT_DIST_STREAM: K, the row offset of element t = 0 */
    int64_t period;             /* synthetic: distinct batches before the stream repeats */
} rt_input;

/* One `group` line: a set of ranks that run collectives together. */
typedef struct rt_group {
    int n;          /* number of members */
    int *ranks;     /* member ranks, ascending */
} rt_group;

/* The parsed MANIFEST. */
typedef struct rt_manifest {
    char model[RT_NAME_MAX];    /* model name */
    int rank, world;            /* the rank this program was built for, and the world size */
    int64_t arena;              /* arena bytes */
    int64_t steps;              /* default optimizer steps */
    int64_t micro_batches;      /* micro-batches per step */
    uint64_t seed;              /* RNG seed */
    double lr;                  /* learning rate (informational) */
    rt_group *groups; int ngroups;   /* groups, by id */
    rt_param *params; int nparams;   /* param boxes, by index */
    rt_param *states; int nstates;   /* optimizer state boxes, by index */
    rt_input *inputs; int ninputs;   /* inputs, by index */
    int nstream;                /* inputs with dist stream */
    char *data;                 /* `data PATH`: token file or glob of shards; NULL for "-" */
    char *eval_data;            /* `eval_data PATH`, or NULL */
    int64_t eval_every;         /* evaluate every K steps (0: never) */
    int64_t eval_steps;         /* batches per evaluation */
    rt_sched_kind sched;        /* lr schedule after warmup */
    int64_t warmup;             /* linear warmup steps */
    double min_lr_frac;         /* cosine floor as a fraction of lr, in [0, 1] */
    double clip;                /* gradient-norm clipping threshold (0: none) */
    int64_t tokens_per_step;    /* tokens per optimizer step, for tokens/s (0: unknown) */
    char policy[32];            /* `mesh dp D tp T policy P`: the plan's policy ("": unknown) */
    int mesh_dp, mesh_tp;       /* ... and its mesh (0: unknown) */
    int mesh_pp;                /* ... pipeline stages (1: none) */
    int64_t param_count;        /* `param_count N`: elements of all params of the model (0: unknown) */
    double flops_per_step;      /* `flops_per_step F`: model FLOPs of one step, all ranks (0: unknown) */
    int bf16;                   /* `dtype bf16`: matmuls read bf16 inputs (selects the peak) */
} rt_manifest;

/* One process's view of the shared-memory communicator (comm_shm.c). */
typedef struct rt_comm rt_comm;
/* The open token files of the stream inputs (data.c). */
typedef struct rt_data rt_data;
/* The CUDA target's device, TCP control plane and NCCL communicators. */
typedef struct rt_dev rt_dev;
typedef struct rt_net rt_net;
typedef struct rt_nccl rt_nccl;

/* Kernel numbers: the rows of rt_kernels.h, in order (rt_cuda_k's argument;
 * the compiler's ir.h numbers them the same way). */
enum {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) RT_KN_##name,
#include "rt_kernels.h"
#undef RT_K
    RT_KN_COUNT
};

/* The runtime context of one rank. */
struct rt_ctx {
    rt_manifest man;            /* the embedded manifest, parsed */
    int rank, world;            /* from the environment (equal to the manifest's) */
    int64_t steps;              /* steps to run (manifest or --steps) */
    const char *save_path;      /* --save FILE, or NULL */
    const char *trace_path;     /* --trace FILE, or NULL (trace.c) */
    struct rt_trace *trace;     /* the events so far with --trace, else NULL */
    const char *data_path;      /* --data PATH (overrides the manifest's), or NULL */
    const char *eval_path;      /* --eval-data PATH, or NULL */
    const char *init_path;      /* --init FILE: params to start from, or NULL */
    const char *ckpt_dir;       /* --ckpt-dir DIR, or NULL */
    int64_t ckpt_every;         /* --ckpt-every N (0: no periodic checkpoints) */
    int resume;                 /* --resume: start from the newest checkpoint in ckpt_dir */
    const char *log_path;       /* --log FILE (JSON lines, rank 0), or NULL */
    FILE *log;                  /* that file, open on rank 0 */
    int quiet;                  /* --quiet: no step log */
    int threads;                /* kernel threads (--threads, $NNSC_THREADS, or the default) */
    double timeout;             /* seconds any collective may wait */
    char *arena;                /* the arena: 2 MiB aligned (rt_big_alloc), zeroed */
    double step_t0;             /* monotonic seconds at rt_step_begin */
    double run_t0;              /* monotonic seconds at the first rt_step_begin (for eta) */
    int64_t steps_done;         /* steps this process has finished (for eta) */
    int64_t first_step;         /* what rt_first_step returns (after any loading) */
    int started;                /* rt_first_step has run (loaded what it had to) */
    double lr_scale;            /* this step's lr multiplier (rt_step_begin) */
    float grad_scale;           /* this step's gradient multiplier (rt_k_gradclip, else 1) */
    double grad_norm;           /* this step's global gradient norm, NaN if not computed */
    rt_data *data;              /* token files, NULL when no input is a stream */
    rt_comm *comm;              /* shm communicator, NULL when world == 1 or on the cuda target */
    rt_dev *dev;                /* cuda target: the device (dev_cuda.c); NULL on the cpu target */
    rt_net *net;                /* cuda target, world > 1: the TCP control plane (net.c) */
    rt_nccl *nccl;              /* cuda target, world > 1: the NCCL communicators (nccl.c) */
    int local_rank;             /* rank on this host: LOCAL_RANK etc. (net.c), else rank */
    const char *prog;           /* argv[0], for messages */
    int launched;               /* $NNSC_LAUNCH: started by out/launch (rank 0 speaks for all) */
    double peak_flops;          /* peak FLOP/s of one device (--peak-flops, $NNSC_PEAK_FLOPS,
                                   the device table); 0: unknown (no MFU) */
    char peak_src[96];          /* where peak_flops came from, for the banner */
    double *step_ms;            /* the last nstep_cap step times (ms), a ring (rank 0) */
    int64_t nstep_cap;          /* its capacity */
    double sum_ms;              /* sum of every step time of this process (ms) */
    double last_loss;           /* the loss of the last step (NaN before one) */
    double banner_t;            /* monotonic seconds at the banner (rt_first_step) */
};

/* ---- runtime.c */

/* Monotonic clock in seconds. */
double rt_now(void);
/* A zeroed block of bytes, 2 MiB-aligned, from mmap, on transparent huge
 * pages where the kernel allows (madvise); NULL if out of memory. */
void *rt_big_alloc(size_t bytes);
/* Free a block of rt_big_alloc (bytes as allocated). */
void rt_big_free(void *p, size_t bytes);
/* Print "rank R: <fmt>" (before the rank is known, or ctx NULL: "nnsc: <fmt>")
 * and a newline to stderr with one write(2), and exit with status code. */
void rt_fatal(rt_ctx *ctx, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
/* The same line without exiting (warnings, a rank's part of an agreed failure). */
void rt_warn(const rt_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Text to stdout with one write(2) (stdio's buffer flushed first): lines of
 * the log, so that no other process's output lands inside one. */
void rt_out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Write len bytes of buf to fd with one write(2) (more only if the kernel
 * takes part: a pipe takes up to PIPE_BUF bytes whole). */
void rt_write_all(int fd, const char *buf, size_t len);
/* A broken invariant inside rtlib (a caller bug): message with file:line, abort. */
#define RT_ASSERT(cond) \
    do { if (!(cond)) rt_assert_fail(__FILE__, __LINE__, #cond); } while (0)
void rt_assert_fail(const char *file, int line, const char *what) __attribute__((noreturn));

/* ---- manifest.c */

/* Parse text into m.  Returns 0, or 1 after writing "line N: what" to err. */
int rt_manifest_parse(const char *text, rt_manifest *m, char *err, size_t errlen);
void rt_manifest_free(rt_manifest *m);
/* Number of elements of a box / of a shape. */
int64_t rt_box_numel(int ndim, const int64_t *lo, const int64_t *hi);
int64_t rt_shape_numel(int ndim, const int64_t *shape);

/* Walks a box of a row-major tensor as runs of logically contiguous
 * elements (the trailing full dimensions merged into each run). */
typedef struct rt_box_iter {
    int ndim;                   /* dimensions */
    int cut;                    /* dims [0, cut) are stepped one index at a time */
    int64_t lo[RT_MAXDIM];      /* box start */
    int64_t hi[RT_MAXDIM];      /* box end */
    int64_t stride[RT_MAXDIM];  /* row-major strides of the full shape */
    int64_t idx[RT_MAXDIM];     /* current index in the stepped dims */
    int64_t run;                /* elements per run */
    int64_t start;              /* logical index of the current run's first element */
    int64_t pos;                /* box-local index of the current run's first element */
    int state;                  /* 0 before the first run, 1 inside, 2 done */
} rt_box_iter;

/* Start walking box [lo, hi) of shape. */
void rt_box_iter_init(rt_box_iter *it, int ndim, const int64_t *shape, const int64_t *lo,
                      const int64_t *hi);
/* Advance to the next run; 0 when there is none. */
int rt_box_iter_next(rt_box_iter *it);

/* ---- rng.c */

/* FNV-1a 64-bit hash of a string. */
uint64_t rt_fnv1a64(const char *s);
/* Stream key of a tensor: a function of (seed, name hash). */
uint64_t rt_rng_key(uint64_t seed, uint64_t name_hash);
/* 64 random bits for counter k of the stream key. */
uint64_t rt_rng_bits(uint64_t key, uint64_t k);
/* Uniform float in [0, 1) from the 24 high bits of rt_rng_bits(key, k). */
float rt_rng_uniform(uint64_t key, uint64_t k);
/* Standard normal of element k: Box-Muller over uniforms at 2k and 2k+1 (double). */
double rt_rng_normal(uint64_t key, uint64_t k);
/* Value of element k of a param under its initialiser (before rounding to the dtype). */
double rt_param_value(const rt_param *p, uint64_t key, uint64_t k);
/* Fast rt_k_init_param: fill dst with the box of param i. */
void rt_init_param_box(rt_ctx *ctx, void *dst, int64_t i);
/* Fast rt_k_data: i as for rt_k_data. */
void rt_data_box(rt_ctx *ctx, void *dst, const int64_t *i);

/* ---- data.c: token files (llm.c layout) */

#define RT_TOK_MAGIC 20240520   /* header[0] of a token file */
#define RT_TOK_VERSION 1        /* header[1] */
#define RT_TOK_HEADER 1024      /* header bytes: 256 little-endian int32 */

/* Open and check the token files of the stream inputs (rt_init, after the
 * communicator); exits 2 with a message naming the file when one is bad. */
void rt_data_open(rt_ctx *ctx);
/* Close them (rt_finish). */
void rt_data_close(rt_ctx *ctx);
/* Box [lo, hi) of stream input `in` for batch `step` (step < 0: evaluation
 * batch -1-step) into dst (i32, the box row-major).  ref = 1: read token by
 * token (the reference). */
void rt_data_stream(rt_ctx *ctx, const rt_input *in, int64_t step, const int64_t *lo,
                    const int64_t *hi, int32_t *dst, int ref);
/* Rows in the training (eval = 0) or evaluation (eval = 1) token sequence. */
int64_t rt_data_rows(const rt_ctx *ctx, int eval);

/* ---- train.c: the training loop */

/* lr multiplier of step s (0-based) of `steps` under the manifest's schedule. */
double rt_lr_scale(const rt_manifest *m, int64_t steps, int64_t s);
/* Parse a FLOP/s figure: a positive number with an optional k, M, G, T or P
 * (10^3 .. 10^15): "1.5e12", "312T", "50G".  0, or 1 when it is not one. */
int rt_parse_flops(const char *s, double *out);
/* Dense peak FLOP/s of the GPU called name from NVIDIA's datasheets (bf16:
 * tensor cores; else f32 without), and in src what it is; 0 when the
 * table has no entry (src ""). */
double rt_peak_of_device(const char *name, int bf16, char *src, size_t srclen);
/* n as 834, 12.3k, 1.2M, 124M (3 significant digits at most); bytes as
 * 640KiB, 3.2MiB, 1.5GiB.  Return buf. */
const char *rt_human_count(char *buf, size_t len, double n);
const char *rt_human_bytes(char *buf, size_t len, double bytes);
/* Peak resident memory of this process in bytes (getrusage). */
double rt_peak_rss(void);
/* Rank 0: the start-up banner (model, size, mesh, world, tokens per step,
 * arena, FLOPs, data, peak) on stdout and in the --log file (rt_first_step). */
void rt_banner(rt_ctx *ctx);
/* Rank 0: the closing summary (steps, wall time, step times, tokens/s,
 * final loss, MFU, peak memory) on stdout and in the --log file (rt_finish). */
void rt_summary(rt_ctx *ctx);
/* Open the --log file on rank 0 (appending when resuming); exits 2 if it cannot. */
void rt_log_open(rt_ctx *ctx);
void rt_log_close(rt_ctx *ctx);

/* ---- ckpt.c: checkpoints */

/* Open the checkpoint directory (rank 0 creates it); exits 2 on failure. */
void rt_ckpt_init(rt_ctx *ctx);
/* rt_first_step's work: --resume / --init loading; returns the first step. */
int64_t rt_ckpt_start(rt_ctx *ctx);
/* After step `step` (0-based): write DIR/step-(step+1) when one is due. */
void rt_ckpt_step(rt_ctx *ctx, int64_t step);
/* rt_finish's work: DIR/final.safetensors and --save FILE. */
void rt_ckpt_finish(rt_ctx *ctx);

/* ---- pool.c: the rank's threads */

#define RT_MAX_THREADS 1024   /* most threads a rank may use */

/* Per-thread scratch: matmul's pack buffers, then attention's tiles. */
#define RT_MM_SCRATCH_FLOATS (336 * 384 + 384 * (3072 + 32))
#define RT_ATT_QB 28          /* attention tile: query rows (2 matmul row slivers) */
#define RT_ATT_KB 64          /* attention tile: keys (2 matmul column slivers) */
#define RT_SCRATCH_FLOATS (RT_MM_SCRATCH_FLOATS + 2 * RT_ATT_QB * RT_ATT_KB)

/* Thread t's part of a parallel region of nt threads. */
typedef void rt_task(void *arg, int t, int nt);
/* The body of rt_parallel_for on [lo, hi), run by thread t. */
typedef void rt_range_fn(const void *arg, int64_t lo, int64_t hi, int t);

/* (Re)start the pool with n threads in all (the caller is thread 0; 1: none). */
void rt_pool_init(int n);
/* Stop and join the workers; back to one thread. */
void rt_pool_free(void);
/* Threads in the pool (1 without one). */
int rt_pool_size(void);
/* How many regions have run on more than one thread (tests, benchmarks). */
int64_t rt_pool_split_regions(void);
/* Run task(arg, t, nt) on t = 0 .. nt-1, nt = min(want, pool size); returns when
 * all have finished.  Thread 0 is the caller.  Regions do not nest. */
void rt_parallel(rt_task *task, void *arg, int want);
/* fn(arg, lo, hi, t) over [0, n) cut in nt near-equal parts of whole units,
 * nt = rt_threads_for(n, grain). */
void rt_parallel_for(rt_range_fn *fn, const void *arg, int64_t n, int64_t unit, int64_t grain);
/* Threads worth using for `work` items at `grain` items per thread at least (>= 1). */
int rt_threads_for(int64_t work, int64_t grain);
/* Part t of nt of [0, n), cut at multiples of unit: [*lo, *hi). */
void rt_split(int64_t n, int t, int nt, int64_t unit, int64_t *lo, int64_t *hi);
/* Thread t's scratch: RT_SCRATCH_FLOATS floats, 64-byte aligned. */
float *rt_scratch(int t);
/* Default thread count: CPUs this process may run on (sched_getaffinity)
 * divided by $NNSC_LOCAL_WORLD, or else by world; at least 1. */
int rt_default_threads(int world);

/* A kernel call's arguments, for the bodies that rt_parallel_for runs. */
typedef struct rt_kargs {
    rt_ctx *ctx;            /* the rank (may be NULL in tests) */
    void *const *b;         /* buffers */
    const int64_t *i;       /* ints */
    const float *f;         /* floats */
} rt_kargs;

/* Elementwise kernels split across threads in pieces of at least this many
 * elements (smaller ones run on the caller alone), cut at cache lines. */
#define RT_EW_GRAIN (1 << 15)
#define RT_EW_UNIT 16

/* Zeroing of at least this many words (2 MiB, a core's L2: what is zeroed
 * stays in cache no longer, e.g. the gradients zeroed at the start of a step
 * and accumulated at its end) uses non-temporal stores: twice as fast. */
#define RT_ZERO_STREAM_MIN ((int64_t)1 << 19)

/* ---- kernels.c */

/* p[0..n) = 0 (4-byte words); stream: non-temporal stores (big ranges). */
void rt_zero_words(void *p, int64_t n, int stream);

/* ---- matmul.c */

/* The fast matmul behind rt_k_matmul: C[M,N] (+)= op(A) op(B), on the pool. */
void rt_matmul(int64_t M, int64_t K, int64_t N, const float *A, int transA,
               const float *B, int transB, float *C, int acc);
/* The same on the calling thread with row strides lda, ldb, ldc (A stored
 * (M, lda) or, transA, (K, lda); B (K, ldb) or, transB, (N, ldb); C (M, ldc));
 * scratch: the thread's rt_scratch. */
void rt_gemm(int64_t M, int64_t K, int64_t N, const float *A, int64_t lda, int transA,
             const float *B, int64_t ldb, int transB, float *C, int64_t ldc, int acc,
             float *scratch);
/* Forget the chosen kernel (after rt_isa_force). */
void rt_matmul_reset(void);
/* Name of the micro-kernel in use (choosing it if needed). */
const char *rt_matmul_isa(void);

/* ---- isa.c */

/* 1 if this CPU and OS can run "avx512", "avx2" or "scalar" code. */
int rt_isa_supported(const char *name);
/* The ISA the fast kernels use: $NNSC_ISA if set and supported, else the best. */
const char *rt_isa_name(void);
/* Use isa (or NULL: choose again) from now on.  -1 if this CPU lacks it. */
int rt_isa_force(const char *isa);
/* Make every kernel choice now (before threads use them). */
void rt_isa_ready(void);

/* ---- vmath.c: vectorised exp-based kernels (same ISA choice) */

/* y = gelu(x) (tanh approximation). */
void rt_vgelu(const float *x, float *y, int64_t n);
/* dx (+)= dy * gelu'(x). */
void rt_vgelu_bwd(const float *dy, const float *x, float *dx, int64_t n, int acc);
/* max of x[0..n), n >= 1. */
float rt_vmax(const float *x, int64_t n);
/* sum of exp(x - mx). */
double rt_vexp_sum(const float *x, float mx, int64_t n);
/* y (+)= scale * exp((x - mx) - shift). */
void rt_vexp_scale(const float *x, float mx, float shift, float scale, float *y, int64_t n,
                   int acc);
/* ALiBi's slope m of head h of H (attention.c): 2^(-8 (h+1) / H) for H a
 * power of 2, the paper's interleaving otherwise. */
float rt_alibi_slope(int64_t h, int64_t H);
/* attention_vl: stop unless every key length lens[0 .. B) is >= 0. */
void rt_att_check_lens(rt_ctx *ctx, const char *what, const int32_t *lens, int64_t B);
/* y = exp(a x - c); returns sum of y. */
double rt_vexp_affine(const float *x, float a, float c, float *y, int64_t n);
/* Forget the chosen implementation (after rt_isa_force). */
void rt_vmath_reset(void);
/* Name of the implementation in use (choosing it if needed). */
const char *rt_vmath_isa(void);

/* ---- kernels_ref.c: the scalar reference of every kernel */

#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) \
    void rt_ref_##name(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f);
#include "rt_kernels.h"
#undef RT_K

/* ---- comm_shm.c */

/* Which collective a wait belongs to (for error messages). */
typedef enum rt_coll {
    RT_COLL_INIT,           /* attaching in rt_init */
    RT_COLL_ALLREDUCE,      /* rt_k_allreduce */
    RT_COLL_ALLGATHER,      /* rt_k_allgather */
    RT_COLL_REDUCESCATTER,  /* rt_k_reducescatter */
    RT_COLL_BROADCAST,      /* rt_k_broadcast */
    RT_COLL_SENDRECV,       /* rt_k_sendrecv */
    RT_COLL_ALLTOALL,       /* rt_k_alltoall */
    RT_COLL_BARRIER,        /* internal barrier */
    RT_COLL_SAVE,           /* writing a safetensors file (--save, checkpoints) */
    RT_COLL_LOAD,           /* --resume / --init */
    RT_COLL_FINISH,         /* rt_finish */
} rt_coll;

/* Name of collective `what` (an rt_coll) for messages, "?" if unknown. */
const char *rt_coll_name(int what);

/* The internal group of all ranks (manifest groups are 0..G-1). */
#define RT_GROUP_WORLD (-1)

/* Create or attach the job's segment (world > 1); exits on failure. */
void rt_comm_init(rt_ctx *ctx);
/* Detach from the segment (rank 0 also unlinks it if that is still
 * pending).  failed = 1 on an error path: peers are told to give up. */
void rt_comm_free(rt_ctx *ctx, int failed);
/* Staging bytes per rank in use (for tests). */
int64_t rt_comm_stage_bytes(const rt_ctx *ctx);

/* Collectives over group g (a manifest group id or RT_GROUP_WORLD).
 * fast = 0 selects the simple reference algorithm (rt_ref_*); both give
 * bitwise the same results. */
void rt_comm_allreduce(rt_ctx *ctx, float *buf, int64_t n, int g, int fast);
void rt_comm_allgather(rt_ctx *ctx, const float *send, float *recv, int64_t n, int g, int fast);
void rt_comm_reducescatter(rt_ctx *ctx, const float *send, float *recv, int64_t n, int g, int fast);
void rt_comm_broadcast(rt_ctx *ctx, void *buf, int64_t bytes, int g, int root, int fast);
void rt_comm_sendrecv(rt_ctx *ctx, const float *send, float *recv, int64_t n, int g,
                      int peer_send, int peer_recv, int fast);
void rt_comm_alltoall(rt_ctx *ctx, const float *send, float *recv, int64_t n, int g, int fast);
/* A batch of point-to-point transfers (rt_k_p2p): op j sends (dir 0) buf[j]
 * or receives (dir 1) into it n[j] floats to / from member peer[j] of group
 * g[j]; all progress together, the call returns when all are done. */
#define RT_P2P_MAX 6
/* The ops of a p2p call from its ints (checked): returns their count. */
int rt_p2p_ops(rt_ctx *ctx, const int64_t *i, int *dir, int64_t *n, int *g, int *peer);
/* rt_k_p2p's body (fast) and rt_ref_p2p's: the ops of i, then rt_comm_p2p. */
void rt_p2p_run(rt_ctx *ctx, void *const *b, const int64_t *i, int fast);
void rt_comm_p2p(rt_ctx *ctx, int nops, const int *dir, void *const *buf, const int64_t *n, const int *g,
                 const int *peer, int fast);
/* Barrier over group g. */
void rt_comm_barrier(rt_ctx *ctx, int g, rt_coll what);
/* Byte allgather over the world with per-rank lengths: every rank gets all
 * blobs.  Returns a malloc'ed concatenation (rank order); lens[world]
 * filled.  what names the operation in failure messages. */
char *rt_comm_allgatherv_bytes(rt_ctx *ctx, const void *mine, int64_t len, int64_t *lens,
                               rt_coll what);
/* Logical-or of flag over the world (used to agree on failure). */
int rt_comm_any(rt_ctx *ctx, int flag, rt_coll what);
/* Show peers that this rank is alive and busy (long file I/O): a peer
 * waiting for it restarts its deadline.  No-op when world == 1. */
void rt_comm_beat(rt_ctx *ctx);

/* ---- safetensors.c */

/* What a file written by rt_st_write holds. */
enum {
    RT_ST_PARAMS = 1,   /* the params (`param` lines) */
    RT_ST_STATE = 2,    /* the optimizer state (`state` lines) */
};

/* Every rank calls: write the full logical tensors of `what` that the ranks
 * hold together into path, through tmp: rank 0 creates tmp at its full size,
 * each writer pwrite()s its boxes and fsyncs, rank 0 renames tmp to path and
 * fsyncs the directory.  meta: key, value, key, value, ..., NULL (the
 * __metadata__ object).  On failure anywhere every rank exits 1 and path is
 * untouched. */
void rt_st_write(rt_ctx *ctx, const char *path, const char *tmp, int what,
                 const char *const *meta);

/* One tensor of a safetensors file read by rt_st_open / rt_st_open_header. */
typedef struct rt_st_tensor {
    char *name;                 /* tensor name (decoded) */
    char dtype[8];              /* "F32", "I32", ... */
    int elem;                   /* bytes per element */
    int ndim;                   /* number of dimensions */
    int64_t shape[RT_MAXDIM];   /* shape */
    int64_t begin, end;         /* data_offsets, relative to the data section */
    const void *data;           /* points into the file's bytes (NULL: header only) */
} rt_st_tensor;

/* A safetensors file, validated: held in memory, or only its header with
 * the file kept open for rt_st_read_box. */
typedef struct rt_st_file {
    unsigned char *bytes;       /* the whole file, or (header only) its first 8 + header_len bytes */
    int64_t size;               /* the file's size */
    int64_t header_len;         /* JSON header length */
    rt_st_tensor *t; int nt;    /* tensors, in header order */
    char **meta; int nmeta;     /* __metadata__: key meta[2k], value meta[2k+1], k < nmeta */
    int fd;                     /* header only: the open file; else -1 */
} rt_st_file;

/* Read and validate a file.  Returns 0, or 1 with a message in err (and
 * nothing left to free).  Tensor data may be unaligned: read it with memcpy. */
int rt_st_open(const char *path, rt_st_file *f, char *err, size_t errlen);
/* Read the box [lo, hi) of tensor t (F32, BF16 or F16) of a header-only
 * file as f32 into dst (row-major, contiguous); transposed: t is 2-D and
 * holds the param transposed (lo, hi are in the param's layout).  0, or 1
 * with a message. */
int rt_st_read_box_f32(rt_ctx *ctx, const rt_st_file *f, const rt_st_tensor *t, const int64_t *lo,
                       const int64_t *hi, int transposed, float *dst, char *err, size_t errlen);
/* The same, reading only the header (validated against the file's size);
 * the file stays open for rt_st_read_box until rt_st_free. */
int rt_st_open_header(const char *path, rt_st_file *f, char *err, size_t errlen);
/* Read box [lo, hi) of tensor t (4-byte elements; t->ndim dims) of a file
 * opened with rt_st_open_header into dst, row-major, with pread()s of the
 * box's contiguous runs.  ctx (may be NULL) gets heartbeats.  Returns 0, or
 * 1 with a message in err. */
int rt_st_read_box(rt_ctx *ctx, const rt_st_file *f, const rt_st_tensor *t, const int64_t *lo,
                   const int64_t *hi, void *dst, char *err, size_t errlen);
/* Validate a malloc'ed file image (takes ownership of bytes, freed on failure). */
int rt_st_parse(unsigned char *bytes, int64_t size, rt_st_file *f, char *err, size_t errlen);
/* The tensor called name, or NULL. */
const rt_st_tensor *rt_st_find(const rt_st_file *f, const char *name);
/* The __metadata__ value of key, or NULL. */
const char *rt_st_meta(const rt_st_file *f, const char *key);
void rt_st_free(rt_st_file *f);

/* ---- the CUDA target.  rt_init_cuda (runtime.c) calls, in order:
 * rt_net_init (world > 1), rt_dev_init, rt_nccl_init (world > 1). */

/* ---- net.c: the TCP control plane of a multi-host job.
 *
 * Rank and world come from the usual variables (runtime.c); net.c reads
 * MASTER_ADDR / MASTER_PORT (NNSC_MASTER_ADDR / NNSC_MASTER_PORT first) and
 * the local rank (LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK,
 * else rank).  Rank 0 listens; the others connect (retrying until
 * ctx->timeout); every rank checks that all agree on the world and the model.
 * Bad or missing variables: message and exit 2; a peer that does not come
 * or dies: message and exit 1. */
void rt_net_init(rt_ctx *ctx);
/* Close the connections; failed = 1 on an error path (peers are told). */
void rt_net_free(rt_ctx *ctx, int failed);
/* The local rank without any connection (for world == 1 and the device choice). */
int rt_net_local_rank(const rt_ctx *ctx);
/* World-wide control collectives over TCP (small messages): the same
 * contracts as the rt_comm_* functions of the same names, which call these
 * when ctx->net is set. */
void rt_net_barrier(rt_ctx *ctx, rt_coll what);
void rt_net_broadcast(rt_ctx *ctx, void *buf, int64_t bytes, int root);
int rt_net_any(rt_ctx *ctx, int flag, rt_coll what);
char *rt_net_allgatherv_bytes(rt_ctx *ctx, const void *mine, int64_t len, int64_t *lens);
/* A heartbeat during long local work (rt_comm_beat's contract): never blocks. */
void rt_net_beat(rt_ctx *ctx);

/* ---- dev_cuda.c: the device.
 *
 * The driver (libcuda.so.1) is opened with dlopen; no driver, no device, a
 * stub driver or no cubin for the device's architecture: a clear message
 * and exit 2.  Device = local rank modulo the devices visible.  The host
 * arena (ctx->arena) stays as the device arena's mirror: host-side kernels
 * (init_param, data) and checkpoints work on the mirror, and rt_dev_upload /
 * rt_dev_download move byte ranges between the two. */
void rt_dev_init(rt_ctx *ctx, const rt_image *images, int nimages);
void rt_dev_free(rt_ctx *ctx);
/* The device arena's base address (what rt_arena returns on the cuda target). */
char *rt_dev_arena(rt_ctx *ctx);
/* Arena bytes [off, off + bytes): mirror -> device / device -> mirror
 * (both wait for the stream). */
void rt_dev_upload(rt_ctx *ctx, int64_t off, int64_t bytes);
void rt_dev_download(rt_ctx *ctx, int64_t off, int64_t bytes);
/* The device's name ("NVIDIA H100 80GB HBM3"; "" without a device). */
const char *rt_dev_name(const rt_ctx *ctx);
/* The rank's stream (a CUstream), for NCCL. */
void *rt_dev_stream(rt_ctx *ctx);
/* Step begin: this step's lr scale and grad scale 1 into the device state. */
void rt_dev_step_begin(rt_ctx *ctx);
/* Wait for the rank's stream (trace marks). */
void rt_dev_sync(rt_ctx *ctx);
/* Wait for the stream, stop on a device-side error (the CPU target's
 * message), copy ctx->grad_norm from the device state; returns the float
 * at device address dloss (NaN when dloss is NULL). */
float rt_dev_step_end(rt_ctx *ctx, const void *dloss);

/* ---- trace.c: --trace FILE, the measured task and step timeline */
typedef struct rt_trace rt_trace;
void rt_trace_open(rt_ctx *ctx);
/* A pipeline task edge: what 0 F, 1 B, 2 W; micro-batch mb; edge 0 begin, 1 end. */
void rt_trace_mark(rt_ctx *ctx, int64_t what, int64_t mb, int64_t edge);
void rt_trace_step(rt_ctx *ctx, int64_t step, int edge);
/* Write the rank's file (rt_finish). */
void rt_trace_write(rt_ctx *ctx);

/* ---- nccl.c: collectives on the device (world > 1).
 *
 * libnccl.so.2 is opened with dlopen (missing: message, exit 2).  The
 * world communicator comes from a unique id that rank 0 broadcasts with
 * rt_net_broadcast; one communicator per manifest group (ncclCommSplit, in
 * member order).  rt_nccl_k runs one collective kernel (RT_KN_allreduce,
 * allgather, reducescatter, broadcast, sendrecv, alltoall) with the same
 * arguments as rt_k_<name>, b[] being device addresses, on rt_dev_stream. */
void rt_nccl_init(rt_ctx *ctx);
void rt_nccl_free(rt_ctx *ctx, int failed);
void rt_nccl_k(rt_ctx *ctx, int kernel, void *const *b, const int64_t *i);

#endif
