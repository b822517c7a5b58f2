/* bench_kernels.c -- rtlib's fast kernels at the shapes of one GPT-2 small
 * training step (124M parameters: V = 50304 padded from 50257, C = 768, 12
 * layers, 12 heads, MLP 4C) on B x T = 4 x 64 = 256 tokens, on 1 and 2
 * threads (or those given), against the machine's measured FMA peak.
 *
 *   bench_kernels [--threads 1,2] [--runs N] [--quick]
 *
 * Prints markdown tables: the peak (a register-only FMA loop on every
 * thread, the instruction set the kernels use); each matmul of the step
 * (forward, input gradient with transB, weight gradient with transA) in
 * GFLOP/s and % of that peak; attention, layernorm and the other kernels in
 * ms; and an estimate of one step: the sum over the step's kernels of
 * count x median cold time.
 *
 * Every figure is the median of N runs (--runs, default 9; --quick: 3).
 * "hot": the operands stay in cache from the previous run (calls under 2 ms
 * are batched and timed together): what the kernel can do.  "cold": before
 * each run every thread writes through a 512 MiB buffer, so operands and
 * pack buffers come from memory, as in a training step, where each kernel
 * reads what an earlier one wrote long ago and the weights are streamed.
 * Benchmarks, not tests: nothing is checked.
 *
 * Built and run by bench/run_kernels.sh against build/libnnsc_rt.a.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "rt_internal.h"

#define BN_MAXT 8   /* most thread counts compared */

/* Command-line settings. */
typedef struct bn_opts {
    int threads[BN_MAXT];   /* thread counts to compare */
    int nthreads;           /* how many */
    int runs;               /* timed runs per figure (median) */
} bn_opts;

/* ---- timing */

typedef void bn_fn(void *arg);

/* qsort comparison of doubles. */
static int bn_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define BN_EVICT_BYTES ((size_t)512 << 20)
static char *bn_junk;   /* what the cold runs write through */

/* Thread t's share of an eviction: write one byte per line of its slice. */
static void bn_evict_task(void *arg, int t, int nt)
{
    size_t lo = BN_EVICT_BYTES / (size_t)nt * (size_t)t, hi = lo + BN_EVICT_BYTES / (size_t)nt;
    for (size_t k = lo; k < hi; k += 64)
        bn_junk[k]++;
}

/* Push everything out of every thread's caches (workers stay awake). */
static void bn_evict(void)
{
    if (!bn_junk) {
        bn_junk = rt_big_alloc(BN_EVICT_BYTES);
        if (!bn_junk) {
            fprintf(stderr, "bench: out of memory\n");
            exit(1);
        }
    }
    rt_parallel(bn_evict_task, NULL, rt_pool_size());
}

/* Median seconds per call of fn(arg) over runs runs (after a warm-up call).
 * cold: caches evicted before each run; hot: calls shorter than 2 ms are
 * batched so that a run lasts about 2 ms. */
static double bn_time(bn_fn *fn, void *arg, int runs, int cold)
{
    double t0 = rt_now();
    fn(arg);   /* warm-up: first touch, caches, workers awake */
    double once = rt_now() - t0;
    int batch = !cold && once < 2e-3 ? (int)(2e-3 / (once > 1e-7 ? once : 1e-7)) + 1 : 1;
    double *t = malloc(sizeof *t * (size_t)runs);
    for (int r = 0; r < runs; r++) {
        if (cold)
            bn_evict();
        double s = rt_now();
        for (int k = 0; k < batch; k++)
            fn(arg);
        t[r] = (rt_now() - s) / batch;
    }
    qsort(t, (size_t)runs, sizeof *t, bn_cmp);
    double med = t[runs / 2];
    free(t);
    return med;
}

/* n floats, uniform in [lo, hi) (a fixed LCG: runs are repeatable), on
 * huge pages like a rank's arena. */
static float *bn_buf(int64_t n, float lo, float hi)
{
    float *p = rt_big_alloc((size_t)n * 4);
    if (!p) {
        fprintf(stderr, "bench: out of memory (%lld floats)\n", (long long)n);
        exit(1);
    }
    uint64_t s = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
    for (int64_t k = 0; k < n; k++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        p[k] = lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
    }
    return p;
}

/* ---- FMA peak */

#define BN_FMA_ITERS 20000000L

#if defined(__x86_64__)
/* 12 independent 512-bit FMA chains; returns a value so nothing is elided. */
__attribute__((target("avx512f"))) static float bn_fma512(long n)
{
    __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
#define BN_Z(i) __m512 a##i = _mm512_set1_ps((float)i);
    BN_Z(0) BN_Z(1) BN_Z(2) BN_Z(3) BN_Z(4) BN_Z(5) BN_Z(6) BN_Z(7) BN_Z(8) BN_Z(9) BN_Z(10) BN_Z(11)
#undef BN_Z
    for (long k = 0; k < n; k++) {
#define BN_F(i) a##i = _mm512_fmadd_ps(a##i, b, c);
        BN_F(0) BN_F(1) BN_F(2) BN_F(3) BN_F(4) BN_F(5) BN_F(6) BN_F(7) BN_F(8) BN_F(9)
        BN_F(10) BN_F(11)
#undef BN_F
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    return _mm512_reduce_add_ps(s);
}

/* 12 independent 256-bit FMA chains. */
__attribute__((target("avx2,fma"))) static float bn_fma256(long n)
{
    __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
#define BN_Y(i) __m256 a##i = _mm256_set1_ps((float)i);
    BN_Y(0) BN_Y(1) BN_Y(2) BN_Y(3) BN_Y(4) BN_Y(5) BN_Y(6) BN_Y(7) BN_Y(8) BN_Y(9) BN_Y(10) BN_Y(11)
#undef BN_Y
    for (long k = 0; k < n; k++) {
#define BN_F(i) a##i = _mm256_fmadd_ps(a##i, b, c);
        BN_F(0) BN_F(1) BN_F(2) BN_F(3) BN_F(4) BN_F(5) BN_F(6) BN_F(7) BN_F(8) BN_F(9)
        BN_F(10) BN_F(11)
#undef BN_F
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float t[8];
    _mm256_storeu_ps(t, s);
    return t[0] + t[7];
}
#endif

/* 12 scalar multiply-add chains (the portable kernel's ISA: baseline SSE). */
static float bn_fma_scalar(long n)
{
    float a[12], b = 0.999f, c = 1e-3f;
    for (int i = 0; i < 12; i++)
        a[i] = (float)i;
    for (long k = 0; k < n; k++)
        for (int i = 0; i < 12; i++)
            a[i] = a[i] * b + c;
    return a[0] + a[11];
}

/* Flops of one call of the loop of the ISA in use (12 chains x lanes x 2). */
static double bn_fma_flops(const char *isa, long n)
{
    int lanes = !strcmp(isa, "avx512") ? 16 : !strcmp(isa, "avx2") ? 8 : 1;
    return 2.0 * 12 * lanes * (double)n;
}

/* The peak loop on every thread of the region. */
static void bn_peak_task(void *arg, int t, int nt)
{
    volatile float *sink = arg;
    const char *isa = rt_matmul_isa();
#if defined(__x86_64__)
    if (!strcmp(isa, "avx512")) {
        sink[t] = bn_fma512(BN_FMA_ITERS);
        return;
    }
    if (!strcmp(isa, "avx2")) {
        sink[t] = bn_fma256(BN_FMA_ITERS);
        return;
    }
#endif
    sink[t] = bn_fma_scalar(BN_FMA_ITERS / 16);
}

/* One region of the peak loop (for bn_time). */
static void bn_peak_run(void *arg)
{
    rt_parallel(bn_peak_task, arg, rt_pool_size());
}

/* Measured peak GFLOP/s of the current pool (all threads at once). */
static double bn_peak(int runs)
{
    static float sink[RT_MAX_THREADS];
    const char *isa = rt_matmul_isa();
    long n = strcmp(isa, "avx512") && strcmp(isa, "avx2") ? BN_FMA_ITERS / 16 : BN_FMA_ITERS;
    double t = bn_time(bn_peak_run, sink, runs, 0);
    return bn_fma_flops(isa, n) * rt_pool_size() / t * 1e-9;
}

/* ---- kernel calls */

/* One kernel call: the kernel and its arguments. */
typedef struct bn_call {
    void (*k)(rt_ctx *, void *const *, const int64_t *, const float *);   /* rt_k_* */
    void *b[10];            /* buffers */
    int64_t i[12];          /* ints */
    float f[5];             /* floats */
} bn_call;

/* Run the call (for bn_time). */
static void bn_run_call(void *p)
{
    bn_call *c = p;
    c->k(NULL, c->b, c->i, c->f);
}

/* One matmul of the step. */
typedef struct bn_mm {
    const char *what;       /* which product */
    int64_t M, K, N;        /* C[M,N] (+)= op(A) op(B) */
    int ta, tb;             /* transposes */
    int count;              /* times per training step */
} bn_mm;

/* The matmuls of one GPT-2 small step on 256 tokens (12 layers). */
static const bn_mm bn_mms[] = {
    {"fwd q/k/v/attn-proj", 256, 768, 768, 0, 0, 48},
    {"fwd mlp fc", 256, 768, 3072, 0, 0, 12},
    {"fwd mlp proj", 256, 3072, 768, 0, 0, 12},
    {"fwd lm head (x wte^T)", 256, 768, 50304, 0, 1, 1},
    {"dx q/k/v/attn-proj", 256, 768, 768, 0, 1, 48},
    {"dx mlp fc", 256, 3072, 768, 0, 1, 12},
    {"dx mlp proj", 256, 768, 3072, 0, 1, 12},
    {"dx lm head (dlogits wte)", 256, 50304, 768, 0, 0, 1},
    {"dW q/k/v/attn-proj", 768, 256, 768, 1, 0, 48},
    {"dW mlp fc", 768, 256, 3072, 1, 0, 12},
    {"dW mlp proj", 3072, 256, 768, 1, 0, 12},
    {"dW lm head (dlogits^T x)", 50304, 256, 768, 1, 0, 1},
};
#define BN_NMM ((int)(sizeof bn_mms / sizeof bn_mms[0]))

/* Median seconds of one matmul at the current thread count, hot or cold. */
static double bn_matmul(const bn_mm *m, int runs, int cold)
{
    float *A = bn_buf(m->M * m->K, -1, 1), *B = bn_buf(m->K * m->N, -1, 1);
    float *C = bn_buf(m->M * m->N, 0, 0);
    bn_call c = {rt_k_matmul, {A, B, C}, {m->M, m->K, m->N, m->ta, m->tb, 0}, {0}};
    double t = bn_time(bn_run_call, &c, runs, cold);
    rt_big_free(A, (size_t)(m->M * m->K) * 4);
    rt_big_free(B, (size_t)(m->K * m->N) * 4);
    rt_big_free(C, (size_t)(m->M * m->N) * 4);
    return t;
}

/* ---- the other kernels of the step */

#define BN_B 4          /* sequences */
#define BN_T 64         /* positions */
#define BN_R (BN_B * BN_T)
#define BN_C 768
#define BN_H 12
#define BN_V 50304
#define BN_VR 50257
#define BN_L 12
#define BN_NPARAM 124475904LL   /* GPT-2 small with V = 50304, T = 1024 positions */

/* One other kernel of the step. */
typedef struct bn_other {
    const char *what;       /* name and shape */
    int count;              /* times per step */
    bn_call call;           /* the call */
    double flops;           /* useful flops per call (0: not a flop kernel) */
} bn_other;

/* Fill the calls of the non-matmul kernels (buffers allocated here). */
static int bn_others(bn_other *o)
{
    const int64_t R = BN_R, C = BN_C, n = (int64_t)BN_B * BN_T * BN_H * (BN_C / BN_H);
    const int64_t nl = (int64_t)BN_B * BN_H * BN_T, D = BN_C / BN_H, F = 4 * BN_C;
    int k = 0;
    float *q = bn_buf(n, -1, 1), *kk = bn_buf(n, -1, 1), *v = bn_buf(n, -1, 1);
    float *y = bn_buf(n, 0, 0), *lse = bn_buf(nl, 0, 0), *dy = bn_buf(n, -1, 1);
    float *dq = bn_buf(n, 0, 0), *dk = bn_buf(n, 0, 0), *dv = bn_buf(n, 0, 0);
    double causal_pairs = (double)BN_B * BN_H * BN_T * (BN_T + 1) / 2;
    o[k++] = (bn_other){"attention fwd (B4 T64 H12 D64, causal)", BN_L,
                        {rt_k_attention, {q, kk, v, y, lse}, {BN_B, BN_T, BN_H, D, 1, BN_H, BN_T, 0, 0, BN_H},
                         {0.125f}}, 4.0 * causal_pairs * D};
    rt_k_attention(NULL, o[k - 1].call.b, o[k - 1].call.i, o[k - 1].call.f);   /* Y, lse */
    o[k++] = (bn_other){"attention bwd", BN_L,
                        {rt_k_attention_bwd, {dy, q, kk, v, y, lse, dq, dk, dv},
                         {BN_B, BN_T, BN_H, D, 1, 0, BN_H, BN_T, BN_T, 0, 0, BN_H}, {0.125f}}, 10.0 * causal_pairs * D};
    float *x = bn_buf(R * C, -1, 1), *w = bn_buf(C, 0.5f, 1.5f), *bias = bn_buf(C, -1, 1);
    float *ln = bn_buf(R * C, 0, 0), *mean = bn_buf(R, 0, 0), *rstd = bn_buf(R, 0, 0);
    float *dln = bn_buf(R * C, -1, 1), *dx = bn_buf(R * C, 0, 0), *dw = bn_buf(C, 0, 0);
    float *db = bn_buf(C, 0, 0);
    o[k++] = (bn_other){"layernorm (256 x 768)", 2 * BN_L + 1,
                        {rt_k_layernorm, {x, w, bias, ln, mean, rstd}, {R, C}, {1e-5f}}, 0};
    rt_k_layernorm(NULL, o[k - 1].call.b, o[k - 1].call.i, o[k - 1].call.f);
    o[k++] = (bn_other){"layernorm_bwd", 2 * BN_L + 1,
                        {rt_k_layernorm_bwd, {dln, x, w, mean, rstd, dx}, {R, C, 1}, {0}}, 0};
    o[k++] = (bn_other){"layernorm_wgrad", 2 * BN_L + 1,
                        {rt_k_layernorm_wgrad, {dln, x, mean, rstd, dw, db}, {R, C, 0}, {0}}, 0};
    float *h = bn_buf(R * F, -3, 3), *g = bn_buf(R * F, 0, 0), *dh = bn_buf(R * F, -1, 1);
    o[k++] = (bn_other){"gelu (256 x 3072)", BN_L, {rt_k_gelu, {h, g}, {R * F}, {0}}, 0};
    o[k++] = (bn_other){"gelu_bwd", BN_L, {rt_k_gelu_bwd, {dh, h, g}, {R * F, 0}, {0}}, 0};
    float *fb = bn_buf(F, -1, 1), *dfb = bn_buf(F, 0, 0);
    o[k++] = (bn_other){"bias_add (256 x 768)", 5 * BN_L,
                        {rt_k_bias_add, {x, bias, ln}, {R, C}, {0}}, 0};
    o[k++] = (bn_other){"bias_add (256 x 3072)", BN_L,
                        {rt_k_bias_add, {h, fb, g}, {R, F}, {0}}, 0};
    o[k++] = (bn_other){"bias_grad (256 x 768)", 5 * BN_L,
                        {rt_k_bias_grad, {dln, db}, {R, C, 0}, {0}}, 0};
    o[k++] = (bn_other){"bias_grad (256 x 3072)", BN_L,
                        {rt_k_bias_grad, {dh, dfb}, {R, F, 0}, {0}}, 0};
    o[k++] = (bn_other){"add (residuals, gradient sums; 256 x 768)", 4 * BN_L + 2,
                        {rt_k_add, {x, dln, ln}, {R * C, 0}, {0}}, 0};
    float *logits = bn_buf(R * BN_V, -4, 4), *dlogits = bn_buf(R * BN_V, 0, 0);
    int32_t *tg = malloc(sizeof *tg * R);
    for (int64_t r = 0; r < R; r++)
        tg[r] = (int32_t)((r * 7919) % BN_VR);
    float *loss = bn_buf(1, 0, 0);
    /* cross-entropy as the compiler lowers it: 64 vocabulary blocks of 786 columns */
    float *st = bn_buf(3 * R * 64, 0, 0);
    o[k++] = (bn_other){"xent_stats (256 x 50304 in 64 blocks, Vreal 50257)", 1,
                        {rt_k_xent_stats, {logits, tg, st, st + R * 64, st + 2 * R * 64},
                         {R, 64, BN_V / 64, BN_VR, 0}, {0}}, 0};
    rt_k_xent_stats(NULL, o[k - 1].call.b, o[k - 1].call.i, o[k - 1].call.f);
    o[k++] = (bn_other){"xent_loss (256 x 64 blocks)", 1,
                        {rt_k_xent_loss, {st, st + R * 64, st + 2 * R * 64, loss}, {R, 64, 0}, {1.0f / R}}, 0};
    o[k++] = (bn_other){"xent_vp_bwd", 1,
                        {rt_k_xent_vp_bwd, {logits, tg, st, st + R * 64, dlogits}, {R, BN_V, 0, BN_VR, 64, 0},
                         {1.0f / R}}, 0};
    float *wte = bn_buf((int64_t)BN_V * C, -0.1f, 0.1f), *dwte = bn_buf((int64_t)BN_V * C, 0, 0);
    o[k++] = (bn_other){"embedding (256 tokens of 50304 x 768)", 1,
                        {rt_k_embedding, {tg, wte, x}, {R, 0, BN_V, C, 0}, {0}}, 0};
    o[k++] = (bn_other){"embedding_bwd (acc = 0: zeroes the 154 MB table)", 1,
                        {rt_k_embedding_bwd, {tg, dln, dwte}, {R, 0, BN_V, C, 0}, {0}}, 0};
    float *p = bn_buf(BN_NPARAM, -0.1f, 0.1f), *gp = bn_buf(BN_NPARAM, -0.01f, 0.01f);
    float *m1 = bn_buf(BN_NPARAM, 0, 0), *m2 = bn_buf(BN_NPARAM, 0, 0);
    o[k++] = (bn_other){"zero (all 124.5M gradients, as a step starts)", 1,
                        {rt_k_zero, {gp}, {BN_NPARAM}, {0}}, 0};
    o[k++] = (bn_other){"adamw (all 124.5M parameters)", 1,
                        {rt_k_adamw, {p, gp, m1, m2}, {BN_NPARAM, 1},
                         {6e-4f, 0.0f, 0.9f, 0.95f, 1e-8f}}, 0};
    return k;
}

/* ---- main */

/* Parse "1,2,4" into o->threads. */
static void bn_parse_threads(bn_opts *o, const char *s)
{
    o->nthreads = 0;
    while (*s && o->nthreads < BN_MAXT) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > RT_MAX_THREADS) {
            fprintf(stderr, "bench: bad --threads list\n");
            exit(2);
        }
        o->threads[o->nthreads++] = (int)v;
        s = *end == ',' ? end + 1 : end;
    }
}

int main(int argc, char **argv)
{
    bn_opts o = {{1, 2}, 2, 9};
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--threads") && a + 1 < argc)
            bn_parse_threads(&o, argv[++a]);
        else if (!strcmp(argv[a], "--runs") && a + 1 < argc && atoi(argv[a + 1]) > 0)
            o.runs = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--quick"))
            o.runs = 3;
        else {
            fprintf(stderr, "usage: bench_kernels [--threads 1,2] [--runs N] [--quick]\n");
            return 2;
        }
    }
    double peak[BN_MAXT], mm_t[BN_MAXT][BN_NMM][2];
    printf("ISA: %s (matmul %s, vmath %s); median of %d runs\n\n", rt_isa_name(),
           rt_matmul_isa(), rt_vmath_isa(), o.runs);

    printf("| threads | FMA peak GFLOP/s |\n|---|---|\n");
    for (int t = 0; t < o.nthreads; t++) {
        rt_pool_init(o.threads[t]);
        peak[t] = bn_peak(o.runs);
        printf("| %d | %.1f |\n", o.threads[t], peak[t]);
    }

    printf("\nmatmul GFLOP/s (%% of the peak of as many threads), hot and cold:\n\n"
           "| matmul | M x K x N | tA tB | per step |");
    for (int t = 0; t < o.nthreads; t++)
        printf(" %dT hot | %dT cold |", o.threads[t], o.threads[t]);
    printf("\n|---|---|---|---|");
    for (int t = 0; t < o.nthreads; t++)
        printf("---|---|");
    printf("\n");
    for (int s = 0; s < BN_NMM; s++) {
        const bn_mm *m = &bn_mms[s];
        double fl = 2.0 * m->M * m->K * m->N;
        printf("| %s | %lld x %lld x %lld | %d %d | %d |", m->what, (long long)m->M,
               (long long)m->K, (long long)m->N, m->ta, m->tb, m->count);
        for (int t = 0; t < o.nthreads; t++) {
            rt_pool_init(o.threads[t]);
            for (int cold = 0; cold < 2; cold++) {
                mm_t[t][s][cold] = bn_matmul(m, o.runs, cold);
                double g = fl / mm_t[t][s][cold] * 1e-9;
                printf(" %.0f (%.0f%%) |", g, 100 * g / peak[t]);
            }
        }
        printf("\n");
        fflush(stdout);
    }
    double mm_flops = 0;
    for (int s = 0; s < BN_NMM; s++)
        mm_flops += bn_mms[s].count * 2.0 * bn_mms[s].M * bn_mms[s].K * bn_mms[s].N;
    printf("| **a step's matmuls: GFLOP/s (%%), ms** | %.1f GFLOP | | |", mm_flops * 1e-9);
    double mm_step[BN_MAXT];
    for (int t = 0; t < o.nthreads; t++)
        for (int cold = 0; cold < 2; cold++) {
            double sum = 0;
            for (int s = 0; s < BN_NMM; s++)
                sum += bn_mms[s].count * mm_t[t][s][cold];
            if (cold)
                mm_step[t] = sum;
            printf(" %.0f (%.0f%%), %.0f ms |", mm_flops / sum * 1e-9,
                   100 * mm_flops / sum * 1e-9 / peak[t], sum * 1e3);
        }
    printf("\n");

    static bn_other oth[32];
    int no = bn_others(oth);
    printf("\nother kernels, ms per call, hot and cold:\n\n| kernel | per step |");
    for (int t = 0; t < o.nthreads; t++)
        printf(" %dT hot | %dT cold |", o.threads[t], o.threads[t]);
    printf("\n|---|---|");
    for (int t = 0; t < o.nthreads; t++)
        printf("---|---|");
    printf("\n");
    double other_step[BN_MAXT] = {0};
    for (int k = 0; k < no; k++) {
        printf("| %s | %d |", oth[k].what, oth[k].count);
        for (int t = 0; t < o.nthreads; t++) {
            rt_pool_init(o.threads[t]);
            for (int cold = 0; cold < 2; cold++) {
                double s = bn_time(bn_run_call, &oth[k].call, o.runs, cold);
                if (cold)
                    other_step[t] += oth[k].count * s;
                if (oth[k].flops > 0)
                    printf(" %.3f (%.0f GFLOP/s) |", s * 1e3, oth[k].flops / s * 1e-9);
                else
                    printf(" %.3f |", s * 1e3);
            }
        }
        printf("\n");
        fflush(stdout);
    }
    printf("\n| step estimate, cold (sum of count x time) | matmul ms | other ms | total ms |\n"
           "|---|---|---|---|\n");
    for (int t = 0; t < o.nthreads; t++)
        printf("| %d threads | %.0f | %.0f | %.0f |\n", o.threads[t], mm_step[t] * 1e3,
               other_step[t] * 1e3, (mm_step[t] + other_step[t]) * 1e3);
    rt_pool_free();
    return 0;
}
