/* test_rt_kernels.c -- every rtlib kernel against its scalar reference, the
 * backward kernels against central finite differences of the forward ones,
 * the optimizers against their formulas, and the fast matmul on every ISA
 * path this CPU has, all transpose/acc combinations and awkward shapes.
 *
 * Output buffers carry guard words after their end; a kernel that writes
 * past its output fails the check it is in.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rt_internal.h"


/* ---- data helpers */

static uint64_t lcg_state = 12345;

/* Uniform in [lo, hi). */
static float frand(float lo, float hi)
{
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + (hi - lo) * (float)((lcg_state >> 40) * (1.0 / 16777216.0));
}

#define GUARD 16                 /* guard floats after each buffer */
#define GUARD_BITS 0x7fc0dead    /* a NaN pattern no kernel writes */

/* n floats of random data in [lo, hi) plus guard words. */
static float *fbuf(int64_t n, float lo, float hi)
{
    float *p = malloc((size_t)(n + GUARD) * sizeof *p);
    for (int64_t k = 0; k < n; k++)
        p[k] = frand(lo, hi);
    for (int k = 0; k < GUARD; k++) {
        uint32_t g = GUARD_BITS;
        memcpy(&p[n + k], &g, 4);
    }
    return p;
}

/* A copy of a buffer made by fbuf. */
static float *fdup(const float *src, int64_t n)
{
    float *p = malloc((size_t)(n + GUARD) * sizeof *p);
    memcpy(p, src, (size_t)(n + GUARD) * sizeof *p);
    return p;
}

/* 1 if the guard words after p[n] are intact. */
static int guard_ok(const float *p, int64_t n)
{
    for (int k = 0; k < GUARD; k++) {
        uint32_t g;
        memcpy(&g, &p[n + k], 4);
        if (g != GUARD_BITS)
            return 0;
    }
    return 1;
}

/* max |a - b| / max(|b|, floor): the normalized max error. */
static double nerr(const float *a, const float *b, int64_t n, double floor)
{
    double md = 0, mb = floor;
    for (int64_t k = 0; k < n; k++) {
        double d = fabs((double)a[k] - b[k]);
        if (!(d <= md))
            md = d;   /* NaN propagates as a failure */
        if (fabs(b[k]) > mb)
            mb = fabs(b[k]);
    }
    return md / mb;
}

typedef void kfn(rt_ctx *, void *const *, const int64_t *, const float *);

/* Run fast and reference kernel on copies of the same inputs; compare output
 * buffer `out` (n_out floats).  bufs: nb buffers of sizes sz[], made in [lo, hi). */
static void cmp_kernel(const char *name, kfn *fast, kfn *ref, int nb, const int64_t *sz,
                       int out, const int64_t *ints, const float *flts, float lo, float hi,
                       double tol)
{
    float *a[4], *b[4];
    for (int k = 0; k < nb; k++) {
        a[k] = fbuf(sz[k], lo, hi);
        b[k] = fdup(a[k], sz[k]);
    }
    fast(NULL, (void *const *)a, ints, flts);
    ref(NULL, (void *const *)b, ints, flts);
    double e = nerr(a[out], b[out], sz[out], 1e-6);
    int g = 1;
    for (int k = 0; k < nb; k++)
        g &= guard_ok(a[k], sz[k]);
    check(e <= tol && g, "%-28s fast vs reference: err %.2e (tol %.0e)%s", name, e, tol,
          g ? "" : ", GUARD OVERWRITTEN");
    for (int k = 0; k < nb; k++) {
        free(a[k]);
        free(b[k]);
    }
}

/* ---- elementwise and reduction kernels vs reference */

static void test_elementwise(void)
{
    const int64_t n = 1037, M = 37, N = 53;
    for (int acc = 0; acc < 2; acc++) {
        char nm[64];
        int64_t i2[2] = {n, acc};
        int64_t s3[3] = {n, n, n}, s2[2] = {n, n};
        snprintf(nm, sizeof nm, "add acc=%d", acc);
        cmp_kernel(nm, rt_k_add, rt_ref_add, 3, s3, 2, i2, NULL, -2, 2, 1e-6);
        snprintf(nm, sizeof nm, "copy acc=%d", acc);
        cmp_kernel(nm, rt_k_copy, rt_ref_copy, 2, s2, 1, i2, NULL, -2, 2, 1e-6);
        snprintf(nm, sizeof nm, "relu_bwd acc=%d", acc);
        cmp_kernel(nm, rt_k_relu_bwd, rt_ref_relu_bwd, 3, s3, 2, i2, NULL, -2, 2, 1e-6);
        snprintf(nm, sizeof nm, "gelu_bwd acc=%d", acc);
        cmp_kernel(nm, rt_k_gelu_bwd, rt_ref_gelu_bwd, 3, s3, 2, i2, NULL, -6, 6, 1e-5);
        float sc[1] = {0.37f};
        int64_t s3l[3] = {n, n, 1};
        snprintf(nm, sizeof nm, "mse_loss acc=%d", acc);
        cmp_kernel(nm, rt_k_mse_loss, rt_ref_mse_loss, 3, s3l, 2, i2, sc, -2, 2, 1e-6);
        snprintf(nm, sizeof nm, "mse_bwd acc=%d", acc);
        cmp_kernel(nm, rt_k_mse_bwd, rt_ref_mse_bwd, 3, s3, 2, i2, sc, -2, 2, 1e-6);
        int64_t ib[3] = {M, N, acc}, sb[2] = {M * N, N};
        snprintf(nm, sizeof nm, "bias_grad acc=%d", acc);
        cmp_kernel(nm, rt_k_bias_grad, rt_ref_bias_grad, 2, sb, 1, ib, NULL, -2, 2, 1e-5);
    }
    int64_t i1[1] = {n}, s2[2] = {n, n};
    cmp_kernel("relu", rt_k_relu, rt_ref_relu, 2, s2, 1, i1, NULL, -2, 2, 0);
    cmp_kernel("gelu", rt_k_gelu, rt_ref_gelu, 2, s2, 1, i1, NULL, -8, 8, 1e-6);
    int64_t s1[1] = {n};
    cmp_kernel("zero", rt_k_zero, rt_ref_zero, 1, s1, 0, i1, NULL, -2, 2, 0);
    int64_t ib[2] = {M, N}, sb[3] = {M * N, N, M * N};
    cmp_kernel("bias_add", rt_k_bias_add, rt_ref_bias_add, 3, sb, 2, ib, NULL, -2, 2, 1e-7);
    float sgdf[2] = {0.1f, 0.01f};
    int64_t s2o[2] = {n, n};
    cmp_kernel("sgd", rt_k_sgd, rt_ref_sgd, 2, s2o, 0, i1, sgdf, -1, 1, 1e-6);
    float adf[5] = {1e-3f, 0.1f, 0.9f, 0.95f, 1e-8f};
    int64_t ia[2] = {n, 4}, s4[4] = {n, n, n, n};
    cmp_kernel("adamw", rt_k_adamw, rt_ref_adamw, 4, s4, 0, ia, adf, 0, 1, 1e-6);

    /* gelu and gelu_bwd far out and near 0 */
    static const float ext[] = {-1e4f, -80.0f, -10.0f, -3.0f, -1e-3f, -1e-6f, 0.0f, 1e-6f, 1e-3f,
                                0.5f, 3.0f, 10.0f, 80.0f, 1e4f, 2.5f, -2.5f, 7.0f};
    int64_t ne = (int64_t)(sizeof ext / sizeof ext[0]), ie[2] = {ne, 0};
    float gy[32], gr[32], dy1[32], gd[32], gdr[32];
    for (int64_t k = 0; k < ne; k++)
        dy1[k] = 1.0f;
    void *bg[2] = {(void *)ext, gy}, *bgr[2] = {(void *)ext, gr};
    void *bd[3] = {dy1, (void *)ext, gd}, *bdr[3] = {dy1, (void *)ext, gdr};
    rt_k_gelu(NULL, bg, ie, NULL);
    rt_ref_gelu(NULL, bgr, ie, NULL);
    rt_k_gelu_bwd(NULL, bd, ie, NULL);
    rt_ref_gelu_bwd(NULL, bdr, ie, NULL);
    double worst = 0;
    for (int64_t k = 0; k < ne; k++) {
        worst = fmax(worst, fabs(gy[k] - gr[k]) / fmax(1.0, fabs(gr[k])));
        worst = fmax(worst, fabs(gd[k] - gdr[k]));
        if (!isfinite(gy[k]) || !isfinite(gd[k]))
            worst = INFINITY;
    }
    check(worst < 1e-6, "gelu and gelu_bwd at -1e4 .. 1e4: finite, err %.2e", worst);

    /* bias_add in place (Y is X) */
    float *x = fbuf(M * N, -1, 1), *bias = fbuf(N, -1, 1), *y = fdup(x, M * N);
    void *bi[3] = {x, bias, x}, *br[3] = {y, bias, y};
    rt_k_bias_add(NULL, bi, ib, NULL);
    rt_ref_bias_add(NULL, br, ib, NULL);
    check(nerr(x, y, M * N, 1e-6) == 0 && guard_ok(x, M * N), "bias_add in place");
    free(x);
    free(bias);
    free(y);
}

/* xent / xent_bwd vs reference, and stability with logits near 1e4. */
static void test_xent(void)
{
    const int64_t M = 13, V = 301;
    for (int acc = 0; acc < 2; acc++) {
        float *lg = fbuf(M * V, -5, 5), *l1 = fbuf(M * V, -1, 1), *l2;
        int32_t *t = malloc(M * sizeof *t);
        for (int64_t m = 0; m < M; m++)
            t[m] = (int32_t)((m * 97 + 5) % V);
        l2 = fdup(l1, M * V);
        int64_t ints[3] = {M, V, acc};
        float sc[1] = {1.0f / M};
        void *bf[3] = {lg, t, l1}, *br[3] = {lg, t, l2};
        rt_k_xent(NULL, bf, ints, sc);
        rt_ref_xent(NULL, br, ints, sc);
        check(nerr(l1, l2, 1, 1e-6) < 1e-6 && guard_ok(l1, M * V),
              "xent acc=%d fast vs reference: %.7g vs %.7g", acc, l1[0], l2[0]);
        rt_k_xent_bwd(NULL, bf, ints, sc);
        rt_ref_xent_bwd(NULL, br, ints, sc);
        double e = nerr(l1, l2, M * V, 1e-6);
        check(e < 1e-5 && guard_ok(l1, M * V), "xent_bwd acc=%d fast vs reference: err %.2e",
              acc, e);
        free(lg);
        free(l1);
        free(l2);
        free(t);
    }
    /* rows spanning [-90, 0]: exp underflows for some entries */
    {
        float wide[2 * 50], g1[100], g2[100], l1[1], l2[1];
        for (int k = 0; k < 100; k++)
            wide[k] = -90.0f * (float)((k * 37) % 50) / 49.0f;
        int32_t tw[2] = {3, 49};
        int64_t iw[3] = {2, 50, 0};
        float sw[1] = {0.5f};
        void *a1[3] = {wide, tw, l1}, *a2[3] = {wide, tw, l2};
        void *d1[3] = {wide, tw, g1}, *d2[3] = {wide, tw, g2};
        rt_k_xent(NULL, a1, iw, sw);
        rt_ref_xent(NULL, a2, iw, sw);
        rt_k_xent_bwd(NULL, d1, iw, sw);
        rt_ref_xent_bwd(NULL, d2, iw, sw);
        double e = nerr(g1, g2, 100, 1e-6);
        check(fabs(l1[0] - l2[0]) < 1e-5 * fabs(l2[0]) && e < 1e-5,
              "xent, xent_bwd with logits spread over [-90, 0]: loss %.7g vs %.7g, grad err %.2e",
              l1[0], l2[0], e);
    }
    /* logits around 1e4: a naive exp overflows */
    float row[3 * 2] = {1e4f, 1e4f + 1, 1e4f - 2, -1e4f, -1e4f + 3, -1e4f + 1};
    int32_t tg[2] = {1, 0};
    float loss[1], d[6];
    int64_t ints[3] = {2, 3, 0};
    float sc[1] = {1.0f};
    void *b1[3] = {row, tg, loss}, *b2[3] = {row, tg, d};
    rt_k_xent(NULL, b1, ints, sc);
    double want = (log(exp(0.0) + exp(1.0) + exp(-2.0)) - 1.0) +
                  (log(exp(0.0) + exp(3.0) + exp(1.0)) - 0.0);
    check(isfinite(loss[0]) && fabs(loss[0] - want) < 1e-4,
          "xent stable at |logits| ~ 1e4: %.7g (want %.7g)", loss[0], want);
    rt_k_xent_bwd(NULL, b2, ints, sc);
    int fin = 1;
    double rs0 = 0, rs1 = 0;
    for (int k = 0; k < 6; k++)
        fin &= isfinite(d[k]);
    for (int k = 0; k < 3; k++) {
        rs0 += d[k];
        rs1 += d[3 + k];
    }
    check(fin && fabs(rs0) < 1e-6 && fabs(rs1) < 1e-6 && fabs(d[1] - (exp(1.0) /
          (exp(0.0) + exp(1.0) + exp(-2.0)) - 1)) < 1e-6,
          "xent_bwd stable at |logits| ~ 1e4 (rows sum to 0)");
}

/* slice (any dims) vs reference, acc 0 and 1. */
static void test_slice(void)
{
    /* src (5, 7, 9), take [1:4, 0:7, 2:8] (inner dim partial) and [2:3, 1:7, 0:9] */
    int64_t cases[2][11] = {
        {3, 0, 5, 1, 4, 7, 0, 7, 9, 2, 8},
        {3, 0, 5, 2, 3, 7, 1, 7, 9, 0, 9},
    };
    for (int c = 0; c < 2; c++)
        for (int acc = 0; acc < 2; acc++) {
            cases[c][1] = acc;
            int64_t n = 1;
            for (int d = 0; d < 3; d++)
                n *= cases[c][4 + 3 * d] - cases[c][3 + 3 * d];
            int64_t sz[2] = {5 * 7 * 9, n};
            char nm[48];
            snprintf(nm, sizeof nm, "slice case %d acc=%d", c, acc);
            cmp_kernel(nm, rt_k_slice, rt_ref_slice, 2, sz, 1, cases[c], NULL, -1, 1, 0);
        }
}

/* ---- matmul */

/* One matmul case on the current ISA path vs the reference. */
static int mm_case(int64_t M, int64_t K, int64_t N, int ta, int tb, int acc, double *err)
{
    float *A = fbuf(M * K, -1, 1), *B = fbuf(K * N, -1, 1), *C = fbuf(M * N, -1, 1);
    float *R = fdup(C, M * N);
    int64_t ints[6] = {M, K, N, ta, tb, acc};
    void *bf[3] = {A, B, C}, *br[3] = {A, B, R};
    rt_k_matmul(NULL, bf, ints, NULL);
    rt_ref_matmul(NULL, br, ints, NULL);
    *err = nerr(C, R, M * N, 1.0);
    int ok = *err <= 2e-6 * sqrt((double)K) + 1e-6 && guard_ok(C, M * N) &&
             guard_ok(A, M * K) && guard_ok(B, K * N);
    free(A);
    free(B);
    free(C);
    free(R);
    return ok;
}

static void test_matmul(void)
{
    static const char *const isas[] = {"avx512", "avx2", "scalar"};
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {1, 7, 33}, {7, 1, 100}, {33, 257, 1}, {100, 33, 7}, {257, 100, 33},
        {1, 257, 257}, {257, 1, 257}, {100, 100, 100}, {33, 7, 257}, {15, 33, 31}, {14, 256, 32},
    };
    for (int s = 0; s < 3; s++) {
        if (rt_isa_force(isas[s]) != 0) {
            printf("skip matmul on %s: this CPU lacks it\n", isas[s]);
            continue;
        }
        int bad = 0, cases = 0;
        double worst = 0;
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
            for (int combo = 0; combo < 8; combo++) {
                double e;
                int ok = mm_case(shapes[k][0], shapes[k][1], shapes[k][2], combo & 1,
                                 (combo >> 1) & 1, combo >> 2, &e);
                cases++;
                worst = e > worst ? e : worst;
                if (!ok) {
                    bad++;
                    printf("     %s M=%lld K=%lld N=%lld transA=%d transB=%d acc=%d: err %.2e\n",
                           isas[s], (long long)shapes[k][0], (long long)shapes[k][1],
                           (long long)shapes[k][2], combo & 1, (combo >> 1) & 1, combo >> 2, e);
                }
            }
        check(!bad, "matmul %-6s: %d shapes x 4 transposes x acc, %d bad, worst err %.2e",
              isas[s], cases, bad, worst);
        /* shapes that cross the cache blocks: MC and KC, then NC */
        int bigbad = 0;
        double e, bw = 0;
        for (int combo = 0; combo < 8; combo++) {
            if (combo < 4)
                bigbad += !mm_case(171, 400, 40, combo & 1, combo >> 1, combo & 1, &e);
            else
                bigbad += !mm_case(15, 40, 3080, combo & 1, (combo >> 1) & 1, 1, &e);
            bw = e > bw ? e : bw;
        }
        check(!bigbad, "matmul %-6s: 171x400x40 and 15x40x3080 (cross MC, KC, NC), 4 "
              "transposes each: err %.2e", isas[s], bw);
    }
    rt_isa_force(NULL);
    /* K = 0: C is zeroed (acc = 0) or left alone (acc = 1) */
    float C[4] = {1, 2, 3, 4};
    int64_t i0[6] = {2, 0, 2, 0, 0, 1};
    void *b0[3] = {C, C, C};
    rt_k_matmul(NULL, b0, i0, NULL);
    int ok = C[0] == 1 && C[3] == 4;
    i0[5] = 0;
    rt_k_matmul(NULL, b0, i0, NULL);
    check(ok && C[0] == 0 && C[3] == 0, "matmul with K = 0 (acc keeps C, no acc zeroes it)");
}

/* ---- backward kernels vs finite differences */

/* sum_k w[k] y[k] in double. */
static double dot(const float *w, const float *y, int64_t n)
{
    double s = 0;
    for (int64_t k = 0; k < n; k++)
        s += (double)w[k] * y[k];
    return s;
}

/* Elementwise activation: L = sum w * f(x); check dx from the bwd kernel. */
static void fd_activation(const char *name, kfn *fwd, kfn *bwd, int bwd_uses_y)
{
    const int64_t n = 64;
    float *x = fbuf(n, -3, 3), *w = fbuf(n, -1, 1), *y = fbuf(n, 0, 1), *dx = fbuf(n, 0, 1);
    for (int64_t k = 0; k < n; k++)   /* keep away from relu's kink */
        if (fabsf(x[k]) < 0.05f)
            x[k] = 0.5f;
    int64_t i1[1] = {n}, i2[2] = {n, 0};
    void *bf[2] = {x, y};
    fwd(NULL, bf, i1, NULL);
    void *bb[3] = {w, bwd_uses_y ? y : x, dx};
    bwd(NULL, bb, i2, NULL);
    double worst = 0;
    const float h = 1e-2f;
    for (int64_t k = 0; k < n; k++) {
        float keep = x[k];
        x[k] = keep + h;
        fwd(NULL, bf, i1, NULL);
        double lp = dot(w, y, n);
        x[k] = keep - h;
        fwd(NULL, bf, i1, NULL);
        double lm = dot(w, y, n);
        x[k] = keep;
        double fd = (lp - lm) / (2 * h), e = fabs(fd - dx[k]);
        worst = e > worst ? e : worst;
    }
    check(worst < 2e-3, "%-10s vs central differences: max err %.2e", name, worst);
    free(x);
    free(w);
    free(y);
    free(dx);
}

/* mse_bwd and xent_bwd: the gradient of the loss kernel's output. */
static void fd_losses(void)
{
    const int64_t n = 40, M = 4, V = 9;
    float *p = fbuf(n, -2, 2), *t = fbuf(n, -2, 2), *dp = fbuf(n, 0, 1), l[1];
    float sc[1] = {0.25f};
    int64_t i2[2] = {n, 0};
    void *bl[3] = {p, t, l}, *bd[3] = {p, t, dp};
    rt_k_mse_bwd(NULL, bd, i2, sc);
    double worst = 0;
    const float h = 1e-2f;
    for (int64_t k = 0; k < n; k++) {
        float keep = p[k];
        p[k] = keep + h;
        rt_k_mse_loss(NULL, bl, i2, sc);
        double lp = l[0];
        p[k] = keep - h;
        rt_k_mse_loss(NULL, bl, i2, sc);
        double lm = l[0];
        p[k] = keep;
        double e = fabs((lp - lm) / (2 * h) - dp[k]);
        worst = e > worst ? e : worst;
    }
    check(worst < 2e-3, "mse_bwd    vs central differences: max err %.2e", worst);

    float *lg = fbuf(M * V, -3, 3), *dl = fbuf(M * V, 0, 1);
    int32_t tg[4] = {3, 0, 8, 5};
    int64_t i3[3] = {M, V, 0};
    float s2[1] = {1.0f / M};
    void *bx[3] = {lg, tg, l}, *bxd[3] = {lg, tg, dl};
    rt_k_xent_bwd(NULL, bxd, i3, s2);
    worst = 0;
    for (int64_t k = 0; k < M * V; k++) {
        float keep = lg[k];
        lg[k] = keep + h;
        rt_k_xent(NULL, bx, i3, s2);
        double lp = l[0];
        lg[k] = keep - h;
        rt_k_xent(NULL, bx, i3, s2);
        double lm = l[0];
        lg[k] = keep;
        double e = fabs((lp - lm) / (2 * h) - dl[k]);
        worst = e > worst ? e : worst;
    }
    check(worst < 2e-3, "xent_bwd   vs central differences: max err %.2e", worst);
    free(p);
    free(t);
    free(dp);
    free(lg);
    free(dl);
}

/* matmul grads (dA = dC B^T, dB = A^T dC via the kernel's transposes) and
 * bias_grad, against central differences of L = sum W * (A B + bias). */
static void fd_matmul(void)
{
    const int64_t M = 5, K = 7, N = 6;
    float *A = fbuf(M * K, -1, 1), *B = fbuf(K * N, -1, 1), *W = fbuf(M * N, -1, 1);
    float *bias = fbuf(N, -1, 1), *C = fbuf(M * N, 0, 1), *dA = fbuf(M * K, 0, 1);
    float *dB = fbuf(K * N, 0, 1), *db = fbuf(N, 0, 1);
    int64_t ifw[6] = {M, K, N, 0, 0, 0}, ibias[2] = {M, N};
    int64_t ida[6] = {M, N, K, 0, 1, 0};   /* dA[M,K] = W[M,N] B^T, B stored (K,N) = (N,K)^T */
    int64_t idb[6] = {K, M, N, 1, 0, 0};   /* dB[K,N] = A^T W, A stored (M,K) */
    int64_t ibg[3] = {M, N, 0};
    void *ba[3] = {W, B, dA}, *bb[3] = {A, W, dB}, *bg[2] = {W, db};
    rt_k_matmul(NULL, ba, ida, NULL);
    rt_k_matmul(NULL, bb, idb, NULL);
    rt_k_bias_grad(NULL, bg, ibg, NULL);
    const float h = 1e-2f;
    double worst = 0;
    float *params[3] = {A, B, bias}, *grads[3] = {dA, dB, db};
    int64_t sizes[3] = {M * K, K * N, N};
    for (int q = 0; q < 3; q++)
        for (int64_t k = 0; k < sizes[q]; k++) {
            double l2[2];
            float keep = params[q][k];
            for (int s = 0; s < 2; s++) {
                params[q][k] = keep + (s ? -h : h);
                void *bf[3] = {A, B, C}, *bbias[3] = {C, bias, C};
                rt_k_matmul(NULL, bf, ifw, NULL);
                rt_k_bias_add(NULL, bbias, ibias, NULL);
                l2[s] = dot(W, C, M * N);
            }
            params[q][k] = keep;
            double e = fabs((l2[0] - l2[1]) / (2 * h) - grads[q][k]);
            worst = e > worst ? e : worst;
        }
    check(worst < 1e-3, "matmul dA, dB and bias_grad vs central differences: max err %.2e",
          worst);
    free(A);
    free(B);
    free(W);
    free(bias);
    free(C);
    free(dA);
    free(dB);
    free(db);
}

/* ---- optimizers vs their formulas */

static void test_optimizers(void)
{
    const int64_t n = 257;
    float *p = fbuf(n, -1, 1), *m = fbuf(n, -0.1f, 0.1f), *v = fbuf(n, 0, 0.01f);
    float *p0 = fdup(p, n), *m0 = fdup(m, n), *v0 = fdup(v, n);
    float f[5] = {1e-2f, 0.1f, 0.9f, 0.999f, 1e-8f};
    double worst = 0;
    for (int64_t t = 1; t <= 3; t++) {
        float *g = fbuf(n, -1, 1);
        int64_t ints[2] = {n, t};
        void *b[4] = {p, g, m, v};
        rt_k_adamw(NULL, b, ints, f);
        for (int64_t k = 0; k < n; k++) {   /* the textbook AdamW step, in double */
            double mk = 0.9 * m0[k] + 0.1 * g[k];
            double vk = 0.999 * v0[k] + 0.001 * (double)g[k] * g[k];
            double mh = mk / (1 - pow(0.9, (double)t)), vh = vk / (1 - pow(0.999, (double)t));
            double pk = p0[k] - 1e-2 * (mh / (sqrt(vh) + 1e-8) + 0.1 * p0[k]);
            double e = fabs(pk - p[k]) + fabs(mk - m[k]) + fabs(vk - v[k]);
            worst = e > worst ? e : worst;
            p0[k] = p[k];   /* follow the kernel's own state */
            m0[k] = m[k];
            v0[k] = v[k];
        }
        free(g);
    }
    check(worst < 1e-5 && guard_ok(p, n) && guard_ok(m, n) && guard_ok(v, n),
          "adamw vs formula, 3 steps: max err %.2e", worst);

    float *g = fbuf(n, -1, 1);
    memcpy(p0, p, (size_t)n * 4);
    float sf[2] = {0.05f, 0.01f};
    int64_t si[1] = {n};
    void *sb[2] = {p, g};
    rt_k_sgd(NULL, sb, si, sf);
    worst = 0;
    for (int64_t k = 0; k < n; k++) {
        double want = p0[k] - 0.05 * (g[k] + 0.01 * p0[k]);
        worst = fmax(worst, fabs(want - p[k]));
    }
    check(worst < 1e-6 && guard_ok(p, n), "sgd vs formula: max err %.2e", worst);
    free(p);
    free(m);
    free(v);
    free(p0);
    free(m0);
    free(v0);
    free(g);
}

/* --bench [M K N]...: GFLOP/s of the fast matmul on each ISA path (no checks). */
static int bench(int argc, char **argv)
{
    static const int64_t dflt[][3] = {{256, 768, 768}, {1024, 1024, 1024}, {512, 3072, 768},
                                      {64, 64, 64}};
    int64_t sh[16][3];
    int ns = 0;
    for (int a = 2; a + 2 < argc && ns < 16; a += 3, ns++)
        for (int d = 0; d < 3; d++)
            sh[ns][d] = atoll(argv[a + d]);
    if (!ns)
        for (; ns < 4; ns++)
            memcpy(sh[ns], dflt[ns], sizeof sh[ns]);
    static const char *const isas[] = {"avx512", "avx2", "scalar"};
    for (int s = 0; s < 3; s++) {
        if (rt_isa_force(isas[s]) != 0)
            continue;
        for (int k = 0; k < ns; k++)
            for (int combo = 0; combo < 4; combo++) {
                int64_t M = sh[k][0], K = sh[k][1], N = sh[k][2];
                float *A = fbuf(M * K, -1, 1), *B = fbuf(K * N, -1, 1), *C = fbuf(M * N, 0, 1);
                int64_t ints[6] = {M, K, N, combo & 1, combo >> 1, 0};
                void *b[3] = {A, B, C};
                double flop = 2.0 * M * N * K, best = 1e30;
                int reps = (int)(2e9 / flop) + 1;
                reps = reps > 200 ? 200 : reps;
                for (int r = 0; r < 3; r++) {   /* best of 3 timed batches */
                    double t0 = rt_now();
                    for (int q = 0; q < reps; q++)
                        rt_k_matmul(NULL, b, ints, NULL);
                    double t = (rt_now() - t0) / reps;
                    best = t < best ? t : best;
                }
                printf("matmul %-6s M=%-5lld K=%-5lld N=%-5lld transA=%d transB=%d  %8.1f GFLOP/s\n",
                       isas[s], (long long)M, (long long)K, (long long)N, combo & 1, combo >> 1,
                       flop / best * 1e-9);
                free(A);
                free(B);
                free(C);
            }
    }
    for (int s = 0; s < 3; s++) {   /* the exp-based kernels, 2^20 elements */
        if (rt_isa_force(isas[s]) != 0)
            continue;
        const int64_t n = 1 << 20, V = 1024;
        float *x = fbuf(n, -4, 4), *y = fbuf(n, 0, 1), *d = fbuf(n, 0, 1), l[1];
        int32_t *t = calloc((size_t)(n / V), sizeof *t);
        int64_t i1[2] = {n, 0}, ix[3] = {n / V, V, 0};
        float sc[1] = {1.0f};
        void *bg[2] = {x, y}, *bb[3] = {y, x, d}, *bx[3] = {x, t, l}, *bxd[3] = {x, t, d};
        const char *names[4] = {"gelu", "gelu_bwd", "xent", "xent_bwd"};
        for (int w = 0; w < 4; w++) {
            double best = 1e30;
            for (int r = 0; r < 5; r++) {
                double t0 = rt_now();
                if (w == 0)
                    rt_k_gelu(NULL, bg, i1, NULL);
                else if (w == 1)
                    rt_k_gelu_bwd(NULL, bb, i1, NULL);
                else if (w == 2)
                    rt_k_xent(NULL, bx, ix, sc);
                else
                    rt_k_xent_bwd(NULL, bxd, ix, sc);
                best = fmin(best, rt_now() - t0);
            }
            printf("%-8s %-6s 2^20 elements  %7.3f ms  %6.2f ns/element\n", names[w], isas[s],
                   best * 1e3, best * 1e9 / n);
        }
        free(x);
        free(y);
        free(d);
        free(t);
    }
    rt_isa_force(NULL);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--bench"))
        return bench(argc, argv);
    printf("ISA: %s\n", rt_isa_name());
    static const char *const isas[] = {"avx512", "avx2", "scalar"};
    for (int s = 0; s < 3; s++) {   /* the exp-based kernels have a version per ISA */
        if (rt_isa_force(isas[s]) != 0) {
            printf("skip %s: this CPU lacks it\n", isas[s]);
            continue;
        }
        printf("-- elementwise kernels, %s\n", isas[s]);
        test_elementwise();
        test_xent();
    }
    rt_isa_force(NULL);
    test_slice();
    test_matmul();
    fd_activation("relu_bwd", rt_k_relu, rt_k_relu_bwd, 1);
    fd_activation("gelu_bwd", rt_k_gelu, rt_k_gelu_bwd, 0);
    fd_losses();
    fd_matmul();
    test_optimizers();
    return check_done();
}
