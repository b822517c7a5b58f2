/* test_rt_threads.c -- the kernel threads of a rank (rtlib/cpu/pool.c): the
 * pool runs every part of a region exactly once, survives many regions in a
 * row and workers that fell asleep, splits ranges exactly; and every kernel
 * that runs on the pool gives the same results on 1, 2 and 3 threads
 * (bitwise), on shapes large enough to be split.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "rt_internal.h"

/* ---- pool mechanics */

/* What a counting region records. */
typedef struct count_arg {
    atomic_int hits[8];     /* calls per thread index */
    atomic_int bad_nt;      /* calls that saw an unexpected nt */
    int want_nt;            /* the nt every call should see */
    atomic_long sum;        /* sum of t over calls */
} count_arg;

/* Record one call of thread t. */
static void count_task(void *p, int t, int nt)
{
    count_arg *a = p;
    if (t >= 0 && t < 8)
        atomic_fetch_add(&a->hits[t], 1);
    if (nt != a->want_nt)
        atomic_fetch_add(&a->bad_nt, 1);
    atomic_fetch_add(&a->sum, t);
}

/* rt_parallel(want) on a pool of n: every t < min(want, n) runs once. */
static int region_ok(int n, int want)
{
    count_arg a;
    memset(&a, 0, sizeof a);
    a.want_nt = want < n ? want : n;
    if (a.want_nt < 1)
        a.want_nt = 1;
    rt_parallel(count_task, &a, want);
    int ok = atomic_load(&a.bad_nt) == 0;
    for (int t = 0; t < 8; t++)
        ok &= atomic_load(&a.hits[t]) == (t < a.want_nt ? 1 : 0);
    return ok;
}

/* Sleep for ms milliseconds. */
static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_pool(void)
{
    check(rt_pool_size() == 1 && region_ok(1, 4), "no pool: one thread runs the region");
    for (int n = 2; n <= 4; n++) {
        rt_pool_init(n);
        int ok = rt_pool_size() == n;
        for (int want = 0; want <= 6; want++)
            ok &= region_ok(n, want);
        check(ok, "pool of %d: want 0..6 threads, each part runs exactly once", n);
    }
    rt_pool_init(2);
    count_arg a;
    memset(&a, 0, sizeof a);
    a.want_nt = 2;
    for (int r = 0; r < 20000; r++)
        rt_parallel(count_task, &a, 2);
    check(atomic_load(&a.hits[0]) == 20000 && atomic_load(&a.hits[1]) == 20000 &&
          atomic_load(&a.bad_nt) == 0, "20000 regions back to back on 2 threads");
    int ok = 1;
    for (int r = 0; r < 5; r++) {   /* workers spin briefly, then sleep: wake them */
        sleep_ms(5);
        ok &= region_ok(2, 2);
    }
    check(ok, "regions after the workers went to sleep");
    rt_pool_init(1);
    check(rt_pool_size() == 1 && region_ok(1, 2), "back to one thread");

    /* rt_split: the parts tile [0, n) in order, cut at multiples of unit */
    ok = 1;
    static const int64_t ns[] = {0, 1, 15, 16, 17, 1000, 1037};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
        for (int nt = 1; nt <= 5; nt++)
            for (int64_t unit = 1; unit <= 16; unit += 15) {
                int64_t next = 0;
                for (int t = 0; t < nt; t++) {
                    int64_t lo, hi;
                    rt_split(ns[k], t, nt, unit, &lo, &hi);
                    ok &= lo == next && hi >= lo && (lo % unit == 0 || lo == ns[k]);
                    next = hi;
                }
                ok &= next == ns[k];
            }
    check(ok, "rt_split tiles [0, n) at unit boundaries");
    int d = rt_default_threads(1);
    check(d >= 1 && rt_default_threads(1 << 20) == 1, "default threads: %d for one rank, 1 "
          "for a world larger than the CPUs", d);
}

/* ---- 1, 2, 3 threads give the same results */

static uint64_t lcg_state = 777;

/* Uniform in [lo, hi). */
static float frand(float lo, float hi)
{
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (float)((lcg_state >> 40) * (1.0 / 16777216.0));
}

/* n floats in [lo, hi). */
static float *fbuf(int64_t n, float lo, float hi)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    for (int64_t k = 0; k < n; k++)
        p[k] = frand(lo, hi);
    return p;
}

typedef void kfn(rt_ctx *, void *const *, const int64_t *, const float *);

#define TH_MAXB 10

/* One kernel case: its buffers (inputs and outputs), run on each thread count. */
typedef struct th_case {
    const char *name;           /* for the report */
    kfn *k;                     /* kernel */
    int nb;                     /* buffers */
    int64_t sz[TH_MAXB];        /* floats per buffer */
    int out[TH_MAXB];           /* 1: buffer is written by the kernel */
    float *init[TH_MAXB];       /* contents before the call */
    const int64_t *ints;        /* int arguments */
    const float *flts;          /* float arguments */
    double tol;                 /* allowed normalized difference (0: bitwise) */
} th_case;

/* Run c on 1, 2 and 3 threads; compare the outputs with the 1-thread ones. */
static void th_run(const th_case *c)
{
    float *res[4][TH_MAXB];
    int split = 1;   /* the kernel did use more than one thread */
    for (int n = 1; n <= 3; n++) {
        rt_pool_init(n);
        for (int k = 0; k < c->nb; k++) {
            res[n][k] = malloc((size_t)(c->sz[k] > 0 ? c->sz[k] : 1) * 4);
            memcpy(res[n][k], c->init[k], (size_t)c->sz[k] * 4);
        }
        int64_t r0 = rt_pool_split_regions();
        c->k(NULL, (void *const *)res[n], c->ints, c->flts);
        if (n > 1)
            split &= rt_pool_split_regions() > r0;
    }
    rt_pool_init(1);
    double worst = 0;
    int bitwise = 1;
    for (int n = 2; n <= 3; n++)
        for (int k = 0; k < c->nb; k++) {
            if (!c->out[k])
                continue;
            double md = 0, mb = 1e-30;
            for (int64_t q = 0; q < c->sz[k]; q++) {
                double d = fabs((double)res[n][k][q] - res[1][k][q]);
                if (!(d <= md))
                    md = d;
                mb = fmax(mb, fabs(res[1][k][q]));
            }
            worst = fmax(worst, md / mb);
            bitwise &= memcmp(res[n][k], res[1][k], (size_t)c->sz[k] * 4) == 0;
        }
    check(split && (c->tol ? worst <= c->tol : bitwise),
          "%-30s 1 vs 2 vs 3 threads: %s (max diff %.2e)%s", c->name,
          bitwise ? "bitwise equal" : "differ", worst, split ? "" : ", NOT SPLIT");
    for (int n = 1; n <= 3; n++)
        for (int k = 0; k < c->nb; k++)
            free(res[n][k]);
}

/* A case with buffers of the given sizes, random in [-1, 1); outs marks outputs. */
static th_case th_make(const char *name, kfn *k, int nb, const int64_t *sz, const int *outs,
                       const int64_t *ints, const float *flts, double tol)
{
    th_case c = {name, k, nb, {0}, {0}, {0}, ints, flts, tol};
    for (int b = 0; b < nb; b++) {
        c.sz[b] = sz[b];
        c.out[b] = outs[b];
        c.init[b] = fbuf(sz[b], -1, 1);
    }
    return c;
}

/* Buffer b of c := i32 tokens in [0, hi). */
static void th_tokens(th_case *c, int b, int64_t hi)
{
    for (int64_t q = 0; q < c->sz[b]; q++) {
        int32_t v = (int32_t)((uint64_t)(q * 2654435761u) % (uint64_t)hi);
        memcpy(&c->init[b][q], &v, 4);
    }
}

static void th_free(th_case *c)
{
    for (int b = 0; b < c->nb; b++)
        free(c->init[b]);
}

static void test_agreement(void)
{
    static const int64_t mm[4][6] = {
        {130, 70, 150, 0, 0, 0}, {131, 70, 150, 1, 0, 1}, {300, 40, 100, 0, 1, 0},
        {20, 64, 900, 1, 1, 0},
    };
    for (int s = 0; s < 4; s++) {
        int64_t M = mm[s][0], K = mm[s][1], N = mm[s][2];
        char nm[64];
        snprintf(nm, sizeof nm, "matmul %lldx%lldx%lld t%lld%lld", (long long)M, (long long)K,
                 (long long)N, (long long)mm[s][3], (long long)mm[s][4]);
        th_case c = th_make(nm, rt_k_matmul, 3, (int64_t[]){M * K, K * N, M * N},
                            (int[]){0, 0, 1}, mm[s], NULL, 0);
        th_run(&c);
        th_free(&c);
    }
    /* grouped-query: 6 query heads on 2 key/value heads (the backward's threads own key/value heads) */
    const int64_t B = 2, T = 40, H = 6, Hkv = 2, D = 16, n = B * T * H * D, nk = B * T * Hkv * D, nl = B * H * T;
    float sc[1] = {0.25f};
    int64_t iat[10] = {B, T, H, D, 1, Hkv, T, 1, 2, 8}, iab[12] = {B, T, H, D, 1, 0, Hkv, T, T, 1, 2, 8};   /* ALiBi */
    th_case c = th_make("attention", rt_k_attention, 5, (int64_t[]){n, nk, nk, n, nl},
                        (int[]){0, 0, 0, 1, 1}, iat, sc, 0);
    th_run(&c);
    /* backward on the forward's own Y and lse */
    float *y = fbuf(n, 0, 1), *lse = fbuf(nl, 0, 1);
    void *bf[5] = {c.init[0], c.init[1], c.init[2], y, lse};
    rt_k_attention(NULL, bf, iat, sc);
    th_case cb = th_make("attention_bwd", rt_k_attention_bwd, 9,
                         (int64_t[]){n, n, nk, nk, n, nl, n, nk, nk}, (int[]){0, 0, 0, 0, 0, 0, 1, 1, 1},
                         iab, sc, 0);
    memcpy(cb.init[1], c.init[0], (size_t)n * 4);
    memcpy(cb.init[2], c.init[1], (size_t)nk * 4);
    memcpy(cb.init[3], c.init[2], (size_t)nk * 4);
    memcpy(cb.init[4], y, (size_t)n * 4);
    memcpy(cb.init[5], lse, (size_t)nl * 4);
    th_run(&cb);
    th_free(&cb);
    th_free(&c);
    free(y);
    free(lse);

    const int64_t R = 300, C = 256;
    float eps[1] = {1e-5f};
    int64_t irc[3] = {R, C, 0};
    th_case cs[] = {
        th_make("layernorm", rt_k_layernorm, 6, (int64_t[]){R * C, C, C, R * C, R, R},
                (int[]){0, 0, 0, 1, 1, 1}, irc, eps, 0),
        th_make("layernorm_bwd", rt_k_layernorm_bwd, 6, (int64_t[]){R * C, R * C, C, R, R, R * C},
                (int[]){0, 0, 0, 0, 0, 1}, irc, NULL, 0),
        th_make("layernorm_wgrad", rt_k_layernorm_wgrad, 6,
                (int64_t[]){R * C, R * C, R, R, C, C}, (int[]){0, 0, 0, 0, 1, 1}, irc, NULL, 0),
        th_make("softmax", rt_k_softmax, 2, (int64_t[]){R * C, R * C}, (int[]){0, 1}, irc, NULL,
                0),
        th_make("softmax_bwd", rt_k_softmax_bwd, 3, (int64_t[]){R * C, R * C, R * C},
                (int[]){0, 0, 1}, irc, NULL, 0),
        th_make("bias_add", rt_k_bias_add, 3, (int64_t[]){R * C, C, R * C}, (int[]){0, 0, 1},
                irc, NULL, 0),
        th_make("bias_grad", rt_k_bias_grad, 2, (int64_t[]){R * C, C}, (int[]){0, 1}, irc, NULL,
                0),
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        th_run(&cs[k]);
        th_free(&cs[k]);
    }

    const int64_t Vext = 50;
    int64_t iemb[5] = {R, 0, Vext, C, 0};
    th_case ce = th_make("embedding", rt_k_embedding, 3, (int64_t[]){R, Vext * C, R * C},
                         (int[]){0, 0, 1}, iemb, NULL, 0);
    th_tokens(&ce, 0, Vext + 5);
    th_run(&ce);
    th_free(&ce);
    th_case ceb = th_make("embedding_bwd", rt_k_embedding_bwd, 3, (int64_t[]){R, R * C, Vext * C},
                          (int[]){0, 0, 1}, iemb, NULL, 0);
    th_tokens(&ceb, 0, Vext + 5);
    th_run(&ceb);
    th_free(&ceb);

    const int64_t M = 64, V = 2000;
    float xs[1] = {1.0f / M};
    th_case ctr = th_make("transpose acc=1", rt_k_transpose, 2, (int64_t[]){4 * 300 * 70, 4 * 300 * 70},
                          (int[]){0, 1}, (int64_t[]){4, 300, 70, 1}, NULL, 0);
    th_run(&ctr);
    th_free(&ctr);
    /* T5's relative position bias over 300 positions: rows of (h, t); the backward a head a thread */
    int64_t irp[7] = {300, 300, 8, 32, 1, 128, 1};
    th_case crp = th_make("relpos_bias", rt_k_relpos_bias, 2, (int64_t[]){32 * 8, 8 * 300 * 300}, (int[]){0, 1},
                          irp, NULL, 0);
    th_run(&crp);
    th_free(&crp);
    th_case crb = th_make("relpos_bias_bwd acc=1", rt_k_relpos_bias_bwd, 2, (int64_t[]){8 * 300 * 300, 32 * 8},
                          (int[]){0, 1}, irp, NULL, 0);
    th_run(&crb);
    th_free(&crb);
    /* cross-entropy in vocabulary blocks, a second shard's columns (Vlo 2000 of 4000, 47 padding) */
    const int64_t KB = 8, CB = V / KB;
    int64_t ist[5] = {M, KB, CB, 2 * V - 47, V}, ivb[6] = {M, V, 1, 2 * V - 47, 2 * KB, V};
    th_case cst = th_make("xent_stats", rt_k_xent_stats, 5, (int64_t[]){M * V, M, M * KB, M * KB, M * KB},
                         (int[]){0, 0, 1, 1, 1}, ist, NULL, 0);
    th_tokens(&cst, 1, 2 * V - 47);
    th_run(&cst);
    th_free(&cst);
    th_case cvb = th_make("xent_vp_bwd acc=1", rt_k_xent_vp_bwd, 5,
                          (int64_t[]){M * V, M, 2 * M * KB, 2 * M * KB, M * V}, (int[]){0, 0, 0, 0, 1}, ivb, xs, 0);
    th_tokens(&cvb, 1, 2 * V - 47);
    for (int64_t q = 0; q < 2 * M * KB; q++)   /* block sums are positive */
        cvb.init[3][q] = 1.0f + fabsf(cvb.init[3][q]);
    th_run(&cvb);
    th_free(&cvb);

    const int64_t ne = 100003;
    int64_t i1[2] = {ne, 1}, ia[2] = {ne, 3};
    float adf[5] = {1e-3f, 0.1f, 0.9f, 0.95f, 1e-8f}, sgf[2] = {0.1f, 0.01f};
    th_case ce2[] = {
        th_make("gelu", rt_k_gelu, 2, (int64_t[]){ne, ne}, (int[]){0, 1}, i1, NULL, 0),
        th_make("gelu_bwd acc=1", rt_k_gelu_bwd, 3, (int64_t[]){ne, ne, ne}, (int[]){0, 0, 1}, i1,
                NULL, 0),
        th_make("add acc=1", rt_k_add, 3, (int64_t[]){ne, ne, ne}, (int[]){0, 0, 1}, i1, NULL, 0),
        th_make("zero", rt_k_zero, 1, (int64_t[]){ne}, (int[]){1}, i1, NULL, 0),
        th_make("sgd", rt_k_sgd, 2, (int64_t[]){ne, ne}, (int[]){1, 0}, i1, sgf, 0),
        th_make("adamw", rt_k_adamw, 4, (int64_t[]){ne, ne, ne, ne}, (int[]){1, 0, 1, 1}, ia, adf,
                0),
    };
    for (size_t k = 0; k < sizeof ce2 / sizeof ce2[0]; k++) {
        if (ce2[k].k == rt_k_adamw)   /* the second moment is not negative */
            for (int64_t q = 0; q < ne; q++)
                ce2[k].init[3][q] = fabsf(ce2[k].init[3][q]);
        th_run(&ce2[k]);
        th_free(&ce2[k]);
    }
}

int main(void)
{
    test_pool();
    test_agreement();
    return check_done();
}
