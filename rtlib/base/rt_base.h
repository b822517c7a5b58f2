/* rt_base.h -- rtlib's bottom layer: the types every layer shares (the
 * manifest, the rank's context), messages and fatal errors, boxes, the
 * trace.  Calls nothing above it.
 *
 *   sys.c     clock, rt_fatal / rt_warn / rt_out, rt_big_alloc, rt_open_file
 *   box.c     boxes of row-major tensors, the FNV-1a name hash
 *   trace.c   --trace FILE, the measured task and step timeline
 *   auth.c    the job secret, SHA-256, HMAC-SHA-256, random nonces
 *
 * The layers, each a folder with its header, each calling only the ones
 * before it (tests/layers.sh checks both includes and symbols):
 *   base < cpu < comm < io < cuda < train.
 * The headers at rtlib/'s top (rt.h, rt_kernels.h, rt_kext.h, rt_ew.h,
 * rt_cuda_abi.h, nnsc_custom.h) are the contract with the compiler and the
 * generated code; any layer may include them. */
#ifndef NNSC_RT_BASE_H
#define NNSC_RT_BASE_H

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
    int mem_report;             /* --mem: each rank says at the end what it allocated (runtime.c) */
    int64_t mem_rss0;           /* --mem: resident anonymous + shared bytes as rt_init began, -1: unknown */
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
    void (*on_fatal)(rt_ctx *ctx);  /* rt_fatal calls it before exiting, or NULL: set by
                                   rt_comm_init / rt_net_init (tell the peers) and
                                   rt_nccl_init (abort NCCL too) */
    void (*dev_sync)(rt_ctx *ctx);  /* wait for the device (set by cuda/dev_cuda.c for trace
                                   marks), or NULL on the cpu target */
};

/* ---- sys.c */

/* Monotonic clock in seconds. */
double rt_now(void);
/* A zeroed block of bytes, 2 MiB-aligned, from mmap, on transparent huge
 * pages where the kernel allows (madvise); NULL if out of memory. */
void *rt_big_alloc(size_t bytes);
/* Free a block of rt_big_alloc (bytes as allocated). */
void rt_big_free(void *p, size_t bytes);
/* Open a file the user named (flags as for open(2); O_CLOEXEC added; 0644
 * when created) without ever blocking in open(2): with O_NONBLOCK, which
 * is cleared once fstat has shown what it is.  Accepted: a regular file;
 * with stream_ok, for writing, also a character device (/dev/null, a
 * terminal) and a FIFO or pipe that a process reads.  Returns the
 * descriptor; -1 when open(2) or fstat fails (strerror in why); -2 when
 * the file is of a kind not accepted (why: "a FIFO (named pipe), not a
 * regular file", "a FIFO ... with no process reading it", ...). */
int rt_open_file(const char *path, int flags, int stream_ok, char *why, size_t len);
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
/* Under out/launch ($NNSC_LAUNCH): die with the launcher (PR_SET_PDEATHSIG,
 * SIGKILL), so that a launcher killed by SIGKILL leaves no rank running;
 * exits 1 if the launcher ($NNSC_LAUNCH_PID, else the parent of now) is
 * gone already.  Does nothing outside launch. */
void rt_watch_launcher(rt_ctx *ctx);
/* A broken invariant inside rtlib (a caller bug): message with file:line, abort. */
#define RT_ASSERT(cond) \
    do { if (!(cond)) rt_assert_fail(__FILE__, __LINE__, #cond); } while (0)
void rt_assert_fail(const char *file, int line, const char *what) __attribute__((noreturn));

/* ---- box.c */

/* FNV-1a 64-bit hash of a string. */
uint64_t rt_fnv1a64(const char *s);
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

/* ---- auth.c: the job secret and what the ranks prove it with */

#define RT_SHA256_LEN 32     /* bytes of a SHA-256 digest and of an HMAC-SHA-256 tag */
#define RT_NONCE_LEN 32      /* bytes of a nonce of the challenge-response */
#define RT_SECRET_MIN 16     /* fewest bytes of a job secret */
#define RT_SECRET_MAX 1024   /* one more than the most bytes of a job secret */

/* A SHA-256 computation in progress (FIPS 180-4). */
typedef struct rt_sha256_state {
    uint32_t h[8];              /* the hash value so far */
    uint64_t len;               /* bytes hashed */
    unsigned char buf[64];      /* the partial block */
    size_t nbuf;                /* bytes in buf */
} rt_sha256_state;

void rt_sha256_init(rt_sha256_state *s);
void rt_sha256_update(rt_sha256_state *s, const void *data, size_t n);
/* The digest into out; s is wiped. */
void rt_sha256_final(rt_sha256_state *s, unsigned char out[RT_SHA256_LEN]);
/* The digest of n bytes at one go. */
void rt_sha256(const void *data, size_t n, unsigned char out[RT_SHA256_LEN]);

/* An HMAC-SHA-256 computation in progress (RFC 2104). */
typedef struct rt_hmac_state {
    rt_sha256_state inner;            /* H(K ^ ipad || text ...) */
    rt_sha256_state outer;            /* H(K ^ opad || ...), fed at the end */
} rt_hmac_state;

void rt_hmac_init(rt_hmac_state *h, const void *key, size_t klen);
void rt_hmac_update(rt_hmac_state *h, const void *data, size_t n);
void rt_hmac_final(rt_hmac_state *h, unsigned char out[RT_SHA256_LEN]);
/* The tag of n bytes at one go. */
void rt_hmac_sha256(const void *key, size_t klen, const void *data, size_t n,
                    unsigned char out[RT_SHA256_LEN]);
/* 1 if the n bytes at a and b are equal; takes the same time wherever they differ. */
int rt_ct_equal(const void *a, const void *b, size_t n);
/* n random bytes from the kernel (getrandom); exits 1 if there are none. */
void rt_random(rt_ctx *ctx, void *buf, size_t n);

/* The job's secret. */
typedef struct rt_secret {
    unsigned char key[RT_SECRET_MAX];   /* its bytes (the HMAC key) */
    size_t len;                         /* how many */
    char from[24];                      /* "NNSC_SECRET" or "NNSC_SECRET_FILE", for messages */
} rt_secret;

/* The secret from $NNSC_SECRET, else from the file $NNSC_SECRET_FILE (a
 * regular file of this user, no access for group or others; a trailing
 * newline is dropped).  Returns 1 with it in s, 0 when neither is set;
 * a secret that is unfit (too short or long, a file others can read):
 * message and exit 2. */
int rt_job_secret(rt_ctx *ctx, rt_secret *s);
/* Overwrite the secret's bytes. */
void rt_secret_wipe(rt_secret *s);

/* ---- trace.c: --trace FILE, the measured task and step timeline */
typedef struct rt_trace rt_trace;
/* With --trace: create the rank's file (once the rank is known); exits 2 when it
 * cannot be created or is not a regular file. */
void rt_trace_open(rt_ctx *ctx);
/* A pipeline task edge: what 0 F, 1 B, 2 W; micro-batch mb; edge 0 begin, 1 end. */
void rt_trace_mark(rt_ctx *ctx, int64_t what, int64_t mb, int64_t edge);
void rt_trace_step(rt_ctx *ctx, int64_t step, int edge);
/* Write the rank's file (rt_finish). */
void rt_trace_write(rt_ctx *ctx);

/* The scalar reference of every kernel row, rt_ref_<name>: cpu/kernels_ref.c,
 * cpu/rng.c (init_param), comm/coll.c (collectives), io/data.c (data). */

#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) \
    void rt_ref_##name(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f);
#include "rt_kernels.h"
#undef RT_K

#endif
