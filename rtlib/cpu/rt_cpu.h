/* rt_cpu.h -- the cpu kernels: the rank's threads, the rt_k_* compute
 * kernels and their scalar references, parameter initialisation.
 *
 *   pool.c         the rank's threads (fork-join pool) and per-thread scratch
 *   isa.c          the run-time choice of instruction set
 *   kernels.c      the rt_k_* entry points: elementwise, optimizers, copies
 *   rows.c         row-wise kernels: xent, softmax, layernorm, embedding
 *   attention.c    multi-head attention, forward and backward
 *   matmul.c       blocked SIMD matmul with run-time ISA dispatch
 *   vmath.c        vectorised exp and the kernels built on it
 *   lowp.c         bf16 rounding and matmul_bf16 (mixed precision; rt_lowp.h)
 *   kernels_ref.c  rt_ref_*: plain scalar reference of every compute kernel
 *   rng.c          counter-based RNG, param init */
#ifndef NNSC_RT_CPU_H
#define NNSC_RT_CPU_H

#include "base/rt_base.h"

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

/* relpos_bias(_bwd)'s ints checked (T, S, H, NB >= 0; a side of at least 2
 * buckets; max_distance above its exact ones): the bucket of each diagonal
 * d = s - t, at [d + T - 1] (T + S - 1 of them), malloc'd (NULL when none). */
int64_t *rt_relpos_diagonals(rt_ctx *ctx, const int64_t *i);

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

/* ---- rng.c */

/* Stream key of a tensor: a function of (seed, name hash). */
uint64_t rt_rng_key(uint64_t seed, uint64_t name_hash);
/* 64 random bits for counter k of the stream key. */
uint64_t rt_rng_bits(uint64_t key, uint64_t k);
/* Integer in [0, range) from the 32 high bits of rt_rng_bits(key, k). */
int32_t rt_rng_int(uint64_t key, uint64_t k, int64_t range);
/* Uniform float in [0, 1) from the 24 high bits of rt_rng_bits(key, k). */
float rt_rng_uniform(uint64_t key, uint64_t k);
/* Standard normal of element k: Box-Muller over uniforms at 2k and 2k+1 (double). */
double rt_rng_normal(uint64_t key, uint64_t k);
/* Value of element k of a param under its initialiser (before rounding to the dtype). */
double rt_param_value(const rt_param *p, uint64_t key, uint64_t k);
/* Fast rt_k_init_param: fill dst with the box of param i. */
void rt_init_param_box(rt_ctx *ctx, void *dst, int64_t i);

#endif
