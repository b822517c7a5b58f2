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
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rt_ew.h"
#include "rt_internal.h"
#include "rt_relpos.h"


/* ---- data helpers: rt_testdata.h */
#include "rt_testdata.h"

typedef void kfn(rt_ctx *, void *const *, const int64_t *, const float *);

/* ---- cross-entropy of whole rows, as the compiler lowers it (i: M, V,
 * acc, Vreal; b: logits, targets, then L or dlogits; f: scale): xent_stats
 * over K blocks (the largest divisor of V up to 8), then xent_loss or
 * xent_vp_bwd; and its double-precision oracle, the one-op formula. */

static int64_t xk_blocks(int64_t V)
{
    for (int64_t k = 8; k > 1; k--)
        if (V % k == 0) return k;
    return 1;
}

/* The statistics (3 M K floats, malloc'd) of logits b[0], targets b[1]. */
static float *xk_stats(rt_ctx *ctx, void *const *b, const int64_t *i, int64_t K)
{
    int64_t M = i[0];
    float *st = malloc((size_t)(3 * M * K + 1) * sizeof *st);
    int64_t is[5] = {M, K, i[1] / K, i[3], 0};
    void *bs[5] = {b[0], b[1], st, st + M * K, st + 2 * M * K};
    rt_k_xent_stats(ctx, bs, is, NULL);
    return st;
}

static void xk_fwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    int64_t M = i[0], K = xk_blocks(i[1]);
    float *st = xk_stats(ctx, b, i, K);
    int64_t il[3] = {M, K, i[2]};
    void *bl[4] = {st, st + M * K, st + 2 * M * K, b[2]};
    rt_k_xent_loss(ctx, bl, il, f);
    free(st);
}

static void xk_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    int64_t M = i[0], K = xk_blocks(i[1]);
    float *st = xk_stats(ctx, b, i, K);
    int64_t ib[6] = {M, i[1], i[2], i[3], K, 0};
    void *bb[5] = {b[0], b[1], st, st + M * K, b[2]};
    rt_k_xent_vp_bwd(ctx, bb, ib, f);
    free(st);
}

/* log sum exp of row[0..n), stable, in double. */
static double oracle_lse(const float *row, int64_t n)
{
    double mx = row[0], s = 0;
    for (int64_t v = 1; v < n; v++) mx = row[v] > mx ? row[v] : mx;
    for (int64_t v = 0; v < n; v++) s += exp(row[v] - mx);
    return mx + log(s);
}

/* L[0] (+)= scale * sum_m (logsumexp(logits[m, :Vreal]) - logits[m, t_m]). */
static void oracle_xent(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)ctx;
    const float *x = b[0];
    const int32_t *t = b[1];
    float *l = b[2];
    double s = 0;
    for (int64_t m = 0; m < i[0]; m++) s += oracle_lse(x + m * i[1], i[3]) - x[m * i[1] + t[m]];
    l[0] = (float)((i[2] ? l[0] : 0.0) + f[0] * s);
}

/* dlogits[m, :Vreal] (+)= scale * (softmax - onehot(t_m)); past Vreal (+)= 0. */
static void oracle_xent_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)ctx;
    const float *x = b[0];
    const int32_t *t = b[1];
    float *dx = b[2];
    int64_t V = i[1], Vr = i[3];
    for (int64_t m = 0; m < i[0]; m++) {
        double lse = oracle_lse(x + m * V, Vr);
        for (int64_t v = 0; v < V; v++) {
            double g = v < Vr ? f[0] * (exp(x[m * V + v] - lse) - (v == t[m] ? 1.0 : 0.0)) : 0.0;
            dx[m * V + v] = (float)((i[2] ? dx[m * V + v] : 0.0) + g);
        }
    }
}

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
        snprintf(nm, sizeof nm, "mul acc=%d", acc);
        cmp_kernel(nm, rt_k_mul, rt_ref_mul, 3, s3, 2, i2, NULL, -2, 2, 1e-6);
        snprintf(nm, sizeof nm, "silu_bwd acc=%d", acc);
        cmp_kernel(nm, rt_k_silu_bwd, rt_ref_silu_bwd, 3, s3, 2, i2, NULL, -8, 8, 1e-6);
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
    cmp_kernel("silu", rt_k_silu, rt_ref_silu, 2, s2, 1, i1, NULL, -8, 8, 1e-6);
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

/* Cross-entropy of whole rows (the blocked kernels: xk_fwd, xk_bwd) vs the
 * one-op formula in double, and stability with logits near 1e4. */
/* The elementwise ops' table (rt_ew.h) against the kernel table: each row's
 * kernel has buffers a (, c), y, ints n (, acc) and extents n; and each op
 * alone in an ew gives bitwise what its kernel gives, fast and reference,
 * with and without acc, over sizes that cross tiles and threads. */
static const struct {
    const char *code, *kernel;
    int kn, nsrc, acc;
    kfn *fast, *ref;
} ew_rows[] = {
#define EW_ROW(CODE, kernel, nsrc, acc, cpu, made, expr, ref) \
    {#CODE, #kernel, RT_KN_##kernel, nsrc, acc, rt_k_##kernel, rt_ref_##kernel},
    RT_EW_OPS(EW_ROW)
#undef EW_ROW
};

static const struct {
    const char *name;
    int nbuf, nint, nflt, acc;
    const char *ext;
} k_rows[] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) {#name, nbuf, nint, nflt, acc, ext},
#include "rt_kernels.h"
#undef RT_K
};

static void test_ew_rows(void)
{
    int n_rows = (int)(sizeof ew_rows / sizeof ew_rows[0]);
    check(n_rows == RT_EW_NOPS_KIND, "rt_ew.h: %d rows, %d op codes", n_rows, RT_EW_NOPS_KIND);
    /* the converse: a kernel whose contract is elementwise (a (, c), y; n (, acc);
       no floats; every extent n) is a row of rt_ew.h */
    char missing[256] = "";
    for (int k = 0; k < (int)(sizeof k_rows / sizeof k_rows[0]); k++) {
        int acc = k_rows[k].acc == 1, nb = k_rows[k].nbuf;
        if (k_rows[k].nflt || (nb != 2 && nb != 3) || k_rows[k].nint != 1 + acc ||
            strcmp(k_rows[k].ext, nb == 3 ? "i0 i0 i0" : "i0 i0"))
            continue;
        int found = 0;
        for (int r = 0; r < n_rows; r++) found |= ew_rows[r].kn == k;
        if (!found) snprintf(missing + strlen(missing), sizeof missing - strlen(missing), " %s", k_rows[k].name);
    }
    check(!missing[0], "every elementwise kernel of rt_kernels.h is a row of rt_ew.h (missing:%s)",
          missing[0] ? missing : " none");
    for (int r = 0; r < n_rows; r++) {
        int ns = ew_rows[r].nsrc, ac = ew_rows[r].acc, kn = ew_rows[r].kn;
        const char *ext = ns == 2 ? "i0 i0 i0" : "i0 i0";
        CHECK(k_rows[kn].nbuf == ns + 1 && k_rows[kn].nint == 1 + ac && k_rows[kn].acc == (ac ? 1 : -1) &&
                  !strcmp(k_rows[kn].ext, ext),
              "ew row %s: kernel %s takes %d buffers, ints n%s, extents \"%s\" (rt_kernels.h: %d, %d, acc %d, \"%s\")",
              ew_rows[r].code, ew_rows[r].kernel, ns + 1, ac ? ", acc" : "", ext, k_rows[kn].nbuf,
              k_rows[kn].nint, k_rows[kn].acc, k_rows[kn].ext);
        int bad = 0;
        double worst = 0;
        for (int64_t n = 1; n <= 70001; n = n * 37 + 3)
            for (int acc = 0; acc <= ac; acc++) {
                float *a = fbuf(n, -3, 3), *c = fbuf(n, -2, 2), *y0 = fbuf(n, -1, 1);
                float *yk = fdup(y0, n), *ye = fdup(y0, n), *yr = fdup(y0, n), *yre = fdup(y0, n);
                int64_t ik[2] = {n, acc};
                int64_t ie[8] = {0, n, n, 1, r, (acc ? RT_EW_ACC : RT_EW_MEM) + ns, RT_EW_MEM + 0,
                                 ns == 2 ? RT_EW_MEM + 1 : 0};
                ew_rows[r].fast(NULL, ns == 2 ? (void *[]){a, c, yk} : (void *[]){a, yk}, ik, NULL);
                ew_rows[r].ref(NULL, ns == 2 ? (void *[]){a, c, yr} : (void *[]){a, yr}, ik, NULL);
                rt_k_ew(NULL, ns == 2 ? (void *[]){a, c, ye} : (void *[]){a, ye}, ie, NULL);
                rt_ref_ew(NULL, ns == 2 ? (void *[]){a, c, yre} : (void *[]){a, yre}, ie, NULL);
                /* acc: the kernel adds in one rounding, ew adds a rounded value: equal
                   unless a kernel fuses the add (vmath's gelu_bwd) */
                bad += !acc && (memcmp(yk, ye, (size_t)n * 4) || memcmp(yr, yre, (size_t)n * 4));
                worst = fmax(worst, nerr(yr, yk, n, 0.1));
                worst = fmax(worst, nerr(yre, ye, n, 0.1));
                float *all[] = {a, c, y0, yk, ye, yr, yre};
                for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
                    free(all[k]);
            }
        CHECK(!bad && worst < 1e-5,
              "ew row %s alone in an ew: bitwise its kernel %s (fast and reference); fast within %.2g "
              "of the reference", ew_rows[r].code, ew_rows[r].kernel, worst);
    }
}

/* ew (fused chains) gives bitwise what the unfused kernels give, over sizes
 * that cross tile and thread boundaries, and agrees with rt_ref_ew. */
static void test_ew(void)
{
    /* every op kind has its operand count (rt_ew_nsrc's table has no hole) */
    int holes = 0;
    for (int op = 0; op < RT_EW_NOPS_KIND; op++)
        holes += rt_ew_nsrc(op) < 1 || rt_ew_nsrc(op) > 2;
    check(!holes && rt_ew_nsrc(RT_EW_NOPS_KIND) == 0 && rt_ew_nsrc(-1) == 0,
          "rt_ew_nsrc: 1 or 2 source operands for each of the %d op kinds, 0 past them", RT_EW_NOPS_KIND);
    test_ew_rows();
    static const int64_t sizes[][2] = {{1, 1}, {7, 3}, {1000, 37}, {70001, 128}};
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        int64_t N = sizes[z][1], M = sizes[z][0] / N, n = M * N;
        float *x = fbuf(n, -3, 3), *bias = fbuf(N, -1, 1), *dy = fbuf(n, -2, 2);
        float *acc0 = fbuf(n, -1, 1);
        /* A: Y = X + bias (row); Z = gelu(Y) -- bias_add then gelu */
        float *y1 = fbuf(n, 0, 1), *z1 = fbuf(n, 0, 1), *y2 = fbuf(n, 0, 1), *z2 = fbuf(n, 0, 1);
        rt_k_bias_add(NULL, (void *[]){x, bias, y1}, (int64_t[]){M, N}, NULL);
        rt_k_gelu(NULL, (void *[]){y1, z1}, (int64_t[]){n}, NULL);
        int64_t ia[] = {0, n, N, 2, RT_EW_ADD, RT_EW_MEM + 2, RT_EW_MEM + 0, RT_EW_ROW + 1,
                        RT_EW_GELU, RT_EW_MEM + 3, RT_EW_MEM + 2, 0};
        rt_k_ew(NULL, (void *[]){x, bias, y2, z2}, ia, NULL);
        CHECK(!memcmp(y1, y2, (size_t)n * 4) && !memcmp(z1, z2, (size_t)n * 4),
              "ew bias_add+gelu, n %lld N %lld: bitwise as the unfused kernels", (long long)n,
              (long long)N);
        /* B: T = gelu_bwd(dY, X); A += T; U = relu_bwd(dY, X); V = U + T; W = V * X,
         * with T and U in registers */
        float *a1 = fdup(acc0, n), *a2 = fdup(acc0, n), *t = fbuf(n, 0, 1), *u = fbuf(n, 0, 1);
        float *v1 = fbuf(n, 0, 1), *w1 = fbuf(n, 0, 1), *v2 = fbuf(n, 0, 1), *w2 = fbuf(n, 0, 1);
        rt_k_gelu_bwd(NULL, (void *[]){dy, x, t}, (int64_t[]){n, 0}, NULL);
        rt_k_copy(NULL, (void *[]){t, a1}, (int64_t[]){n, 1}, NULL);
        rt_k_relu_bwd(NULL, (void *[]){dy, x, u}, (int64_t[]){n, 0}, NULL);
        rt_k_add(NULL, (void *[]){u, t, v1}, (int64_t[]){n, 0}, NULL);
        for (int64_t k = 0; k < n; k++)
            w1[k] = v1[k] * x[k];
        int64_t ib[] = {1, n, 1, 5,
                        RT_EW_GELU_BWD, RT_EW_REG + 0, RT_EW_MEM + 0, RT_EW_MEM + 1,
                        RT_EW_COPY, RT_EW_ACC + 2, RT_EW_REG + 0, 0,
                        RT_EW_RELU_BWD, RT_EW_REG + 1, RT_EW_MEM + 0, RT_EW_MEM + 1,
                        RT_EW_ADD, RT_EW_MEM + 3, RT_EW_REG + 1, RT_EW_REG + 0,
                        RT_EW_MUL, RT_EW_MEM + 4, RT_EW_MEM + 3, RT_EW_MEM + 1};
        rt_k_ew(NULL, (void *[]){dy, x, a2, v2, w2}, ib, NULL);
        CHECK(!memcmp(a1, a2, (size_t)n * 4) && !memcmp(v1, v2, (size_t)n * 4) &&
                  !memcmp(w1, w2, (size_t)n * 4),
              "ew gelu_bwd/copy acc/relu_bwd/add/mul, n %lld: bitwise as unfused", (long long)n);
        /* the scalar reference of both programs */
        float *y3 = fbuf(n, 0, 1), *z3 = fbuf(n, 0, 1), *a3 = fdup(acc0, n), *v3 = fbuf(n, 0, 1),
              *w3 = fbuf(n, 0, 1);
        rt_ref_ew(NULL, (void *[]){x, bias, y3, z3}, ia, NULL);
        rt_ref_ew(NULL, (void *[]){dy, x, a3, v3, w3}, ib, NULL);
        /* floor 0.1: with n = 1 the one value may sit where gelu' crosses 0 (x near -0.75),
           and the fast kernel's absolute error (~1e-7 of terms of size 1) is all there is */
        double e = nerr(z3, z2, n, 0.1);
        e = fmax(e, nerr(y3, y2, n, 0.1));
        e = fmax(e, nerr(a3, a2, n, 0.1));
        e = fmax(e, nerr(v3, v2, n, 0.1));
        e = fmax(e, nerr(w3, w2, n, 0.1));
        CHECK(e < 1e-5, "ew n %lld: fast and reference agree (worst normalised error %.2g)",
              (long long)n, e);
        float *all[] = {x, bias, dy, acc0, y1, z1, y2, z2, a1, a2, t, u, v1, w1, v2, w2,
                        y3, z3, a3, v3, w3};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            free(all[k]);
    }
}

static void test_xent(void)
{
    const int64_t M = 13, V = 301;
    for (int acc = 0; acc < 2; acc++) {
        float *lg = fbuf(M * V, -5, 5), *l1 = fbuf(M * V, -1, 1), *l2;
        int32_t *t = malloc(M * sizeof *t);
        for (int64_t m = 0; m < M; m++)
            t[m] = (int32_t)((m * 97 + 5) % V);
        l2 = fdup(l1, M * V);
        int64_t ints[4] = {M, V, acc, V};
        float sc[1] = {1.0f / M};
        void *bf[3] = {lg, t, l1}, *br[3] = {lg, t, l2};
        xk_fwd(NULL, bf, ints, sc);
        oracle_xent(NULL, br, ints, sc);
        check(nerr(l1, l2, 1, 1e-6) < 1e-6 && guard_ok(l1, M * V),
              "xent acc=%d fast vs reference: %.7g vs %.7g", acc, l1[0], l2[0]);
        xk_bwd(NULL, bf, ints, sc);
        oracle_xent_bwd(NULL, br, ints, sc);
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
        int64_t iw[4] = {2, 50, 0, 50};
        float sw[1] = {0.5f};
        void *a1[3] = {wide, tw, l1}, *a2[3] = {wide, tw, l2};
        void *d1[3] = {wide, tw, g1}, *d2[3] = {wide, tw, g2};
        xk_fwd(NULL, a1, iw, sw);
        oracle_xent(NULL, a2, iw, sw);
        xk_bwd(NULL, d1, iw, sw);
        oracle_xent_bwd(NULL, d2, iw, sw);
        double e = nerr(g1, g2, 100, 1e-6);
        check(fabs(l1[0] - l2[0]) < 1e-5 * fabs(l2[0]) && e < 1e-5,
              "xent, xent_bwd with logits spread over [-90, 0]: loss %.7g vs %.7g, grad err %.2e",
              l1[0], l2[0], e);
    }
    /* logits around 1e4: a naive exp overflows */
    float row[3 * 2] = {1e4f, 1e4f + 1, 1e4f - 2, -1e4f, -1e4f + 3, -1e4f + 1};
    int32_t tg[2] = {1, 0};
    float loss[1], d[6];
    int64_t ints[4] = {2, 3, 0, 3};
    float sc[1] = {1.0f};
    void *b1[3] = {row, tg, loss}, *b2[3] = {row, tg, d};
    xk_fwd(NULL, b1, ints, sc);
    double want = (log(exp(0.0) + exp(1.0) + exp(-2.0)) - 1.0) +
                  (log(exp(0.0) + exp(3.0) + exp(1.0)) - 0.0);
    check(isfinite(loss[0]) && fabs(loss[0] - want) < 1e-4,
          "xent stable at |logits| ~ 1e4: %.7g (want %.7g)", loss[0], want);
    xk_bwd(NULL, b2, ints, sc);
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

/* The vocabulary-blocked cross-entropy (xent_stats, xent_loss, xent_vp_bwd):
 * fast against reference, against the one-op xent on the same rows, and a
 * tp shard's kernels against the columns of the whole (bitwise). */
static void test_xent_blocks(void)
{
    const int64_t M = 13, V = 300, Vr = 291, K = 12, C = V / K, H = V / 2, KH = K / 2;
    float *lg = fbuf(M * V, -5, 5);
    int32_t t[13];
    for (int64_t m = 0; m < M; m++)
        t[m] = (int32_t)((m * 97 + 5) % Vr);
    t[0] = 0, t[1] = (int32_t)Vr - 1, t[2] = (int32_t)H, t[3] = (int32_t)H - 1;   /* first, last, shard edges */
    float *st[2][3];
    for (int w = 0; w < 2; w++)
        for (int k = 0; k < 3; k++)
            st[w][k] = fbuf(M * K, 0, 1);
    int64_t is[5] = {M, K, C, Vr, 0};
    void *bs0[5] = {lg, t, st[0][0], st[0][1], st[0][2]}, *bs1[5] = {lg, t, st[1][0], st[1][1], st[1][2]};
    rt_k_xent_stats(NULL, bs0, is, NULL);
    rt_ref_xent_stats(NULL, bs1, is, NULL);
    double e = 0;
    for (int k = 0; k < 3; k++) {
        double ek = nerr(st[0][k], st[1][k], M * K, 1e-6);
        e = ek > e ? ek : e;
    }
    int pad = 1;   /* blocks past Vreal: nothing real (bsum 0) */
    for (int64_t m = 0; m < M; m++)
        for (int64_t j = 0; j < K; j++)
            if (j * C >= Vr) pad &= st[0][1][m * K + j] == 0 && st[0][2][m * K + j] == 0;
    check(e < 1e-6 && pad && guard_ok(st[0][0], M * K) && guard_ok(st[0][2], M * K),
          "xent_stats fast vs reference (M %lld, %lld blocks of %lld, Vreal %lld): err %.2e", (long long)M,
          (long long)K, (long long)C, (long long)Vr, e);
    float sc[1] = {1.0f / M};
    for (int acc = 0; acc < 2; acc++) {
        float l[3] = {0.25f, 0.25f, 0.25f};
        int64_t il[3] = {M, K, acc}, ix[4] = {M, V, acc, Vr};
        void *bl0[4] = {st[0][0], st[0][1], st[0][2], &l[0]}, *bl1[4] = {st[1][0], st[1][1], st[1][2], &l[1]};
        void *bx[3] = {lg, t, &l[2]};
        rt_k_xent_loss(NULL, bl0, il, sc);
        rt_ref_xent_loss(NULL, bl1, il, sc);
        oracle_xent(NULL, bx, ix, sc);
        check(fabs(l[0] - l[2]) < 1e-6 * fabs(l[2]) && fabs(l[1] - l[2]) < 1e-6 * fabs(l[2]),
              "xent_loss acc=%d from the blocks: fast %.8g, reference %.8g, one-op xent %.8g", acc, l[0], l[1], l[2]);
        float *d0 = fbuf(M * V, -1, 1), *d1 = fdup(d0, M * V), *d2 = fdup(d0, M * V);
        int64_t ib[6] = {M, V, acc, Vr, K, 0};
        void *bb0[5] = {lg, t, st[0][0], st[0][1], d0}, *bb1[5] = {lg, t, st[1][0], st[1][1], d1};
        void *bx2[3] = {lg, t, d2};
        rt_k_xent_vp_bwd(NULL, bb0, ib, sc);
        rt_ref_xent_vp_bwd(NULL, bb1, ib, sc);
        oracle_xent_bwd(NULL, bx2, ix, sc);
        double e1 = nerr(d0, d1, M * V, 1e-6), e2 = nerr(d0, d2, M * V, 1e-6);
        check(e1 < 1e-5 && e2 < 1e-5 && guard_ok(d0, M * V),
              "xent_vp_bwd acc=%d: err %.2e vs its reference, %.2e vs the one-op xent_bwd", acc, e1, e2);
        /* tp 2: each half's kernels on its columns (Vlo 0 and H), with the whole's statistics */
        int same = 1;
        for (int h = 0; h < 2; h++) {
            float *lh = fbuf(M * H, 0, 1), *sh[3], *dh = fbuf(M * H, -1, 1);
            for (int k = 0; k < 3; k++) sh[k] = fbuf(M * KH, 0, 1);
            for (int64_t m = 0; m < M; m++) memcpy(lh + m * H, lg + m * V + h * H, (size_t)H * 4);
            float *dref = fdup(d2, M * V);   /* the whole's gradient before this call, for acc */
            if (acc)
                for (int64_t m = 0; m < M; m++) memcpy(dh + m * H, d2 + m * V + h * H, (size_t)H * 4);
            int64_t ish[5] = {M, KH, C, Vr, h * H}, ibh[6] = {M, H, acc, Vr, K, h * H};
            void *bsh[5] = {lh, t, sh[0], sh[1], sh[2]}, *bbh[5] = {lh, t, st[0][0], st[0][1], dh};
            rt_k_xent_stats(NULL, bsh, ish, NULL);
            for (int k = 0; k < 3; k++)
                for (int64_t m = 0; m < M; m++)
                    same &= memcmp(sh[k] + m * KH, st[0][k] + m * K + h * KH, (size_t)KH * 4) == 0;
            rt_k_xent_vp_bwd(NULL, bbh, ibh, sc);
            float *dw = fdup(dref, M * V);
            void *bw[5] = {lg, t, st[0][0], st[0][1], dw};
            rt_k_xent_vp_bwd(NULL, bw, ib, sc);
            for (int64_t m = 0; m < M; m++)
                same &= memcmp(dh + m * H, dw + m * V + h * H, (size_t)H * 4) == 0;
            free(lh), free(dh), free(dref), free(dw);
            for (int k = 0; k < 3; k++) free(sh[k]);
        }
        check(same, "xent_stats, xent_vp_bwd acc=%d on each half of the columns: bitwise the whole's halves", acc);
        free(d0), free(d1), free(d2);
    }
    /* logits around +-1e4, one column per block: the blocks' maxes differ by 2e4 */
    float row[3 * 2] = {1e4f, 1e4f + 1, 1e4f - 2, -1e4f, -1e4f + 3, -1e4f + 1}, bm[6], bsu[6], bt[6], loss[1], d[6];
    int32_t tg[2] = {1, 0};
    int64_t i3[5] = {2, 3, 1, 3, 0}, i3l[3] = {2, 3, 0}, i3b[6] = {2, 3, 0, 3, 3, 0};
    float one[1] = {1.0f};
    void *b3[5] = {row, tg, bm, bsu, bt}, *b3l[4] = {bm, bsu, bt, loss}, *b3b[5] = {row, tg, bm, bsu, d};
    rt_k_xent_stats(NULL, b3, i3, NULL);
    rt_k_xent_loss(NULL, b3l, i3l, one);
    rt_k_xent_vp_bwd(NULL, b3b, i3b, one);
    double want = (log(exp(0.0) + exp(1.0) + exp(-2.0)) - 1.0) + (log(exp(0.0) + exp(3.0) + exp(1.0)) - 0.0);
    double rs = fabs(d[0] + d[1] + d[2]) + fabs(d[3] + d[4] + d[5]);
    check(isfinite(loss[0]) && fabs(loss[0] - want) < 1e-4 && rs < 1e-6,
          "xent blocks stable at |logits| ~ 1e4: loss %.7g (want %.7g), rows of the gradient sum to %.1e", loss[0], want,
          rs);
    for (int w = 0; w < 2; w++)
        for (int k = 0; k < 3; k++)
            free(st[w][k]);
    free(lg);
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

/* ---- kernels with several buffers: fast and reference on copies */

#define KC_MAXB 10

/* One kernel call prepared twice, for the fast kernel and the reference:
 * buffers of random floats with guard words after each. */
typedef struct kcall {
    int nb;                     /* buffers */
    int64_t sz[KC_MAXB];        /* floats (or i32s) per buffer */
    float *f[KC_MAXB];          /* the fast kernel's copies */
    float *r[KC_MAXB];          /* the reference's copies */
} kcall;

/* nb buffers of sz[k] floats in [lo, hi), the same in both copies. */
static void kc_make(kcall *c, int nb, const int64_t *sz, float lo, float hi)
{
    c->nb = nb;
    for (int k = 0; k < nb; k++) {
        c->sz[k] = sz[k];
        c->f[k] = fbuf(sz[k], lo, hi);
        c->r[k] = fdup(c->f[k], sz[k]);
    }
}

/* Buffer k (both copies) := n i32 values in [lo, hi). */
static void kc_tokens(kcall *c, int k, int64_t lo, int64_t hi)
{
    for (int64_t q = 0; q < c->sz[k]; q++) {
        int32_t v = (int32_t)(lo + (int64_t)frand(0, (float)(hi - lo)));
        v = v >= hi ? (int32_t)(hi - 1) : v;
        memcpy(&c->f[k][q], &v, 4);
        memcpy(&c->r[k][q], &v, 4);
    }
}

/* Buffer k (both copies) := src. */
static void kc_set(kcall *c, int k, const float *src)
{
    memcpy(c->f[k], src, (size_t)c->sz[k] * 4);
    memcpy(c->r[k], src, (size_t)c->sz[k] * 4);
}

/* Run the fast kernel on f and the reference on r. */
static void kc_run(kcall *c, kfn *fast, kfn *ref, const int64_t *ints, const float *flts)
{
    fast(NULL, (void *const *)c->f, ints, flts);
    ref(NULL, (void *const *)c->r, ints, flts);
}

/* 1 if no guard word of the fast copies was overwritten. */
static int kc_guards(const kcall *c)
{
    int g = 1;
    for (int k = 0; k < c->nb; k++)
        g &= guard_ok(c->f[k], c->sz[k]);
    return g;
}

/* Check outputs outs[0..nout) (buffer indices) within tol, and the guards:
 * the error is max |fast - ref| over all of them divided by the largest
 * |ref| of all of them (an output that should be 0 is judged on the scale
 * of its siblings, e.g. dq of a one-position attention). */
static void kc_check(const kcall *c, const char *name, const int *outs, int nout, double tol)
{
    double md = 0, mb = 1e-6;
    for (int k = 0; k < nout; k++) {
        const float *a = c->f[outs[k]], *b = c->r[outs[k]];
        for (int64_t q = 0; q < c->sz[outs[k]]; q++) {
            double d = a[q] == b[q] ? 0.0 : fabs((double)a[q] - b[q]);   /* (equal infinities: 0) */
            if (!(d <= md))
                md = d;   /* NaN propagates as a failure */
            if (isfinite(b[q])) mb = fmax(mb, fabs(b[q]));   /* (lse -inf: a row with no keys) */
        }
    }
    double e = md / mb;
    int g = kc_guards(c);
    check(e <= tol && g, "%-36s fast vs reference: err %.2e (tol %.0e)%s", name, e, tol,
          g ? "" : ", GUARD OVERWRITTEN");
}

static void kc_free(kcall *c)
{
    for (int k = 0; k < c->nb; k++) {
        free(c->f[k]);
        free(c->r[k]);
    }
}

/* embedding, embedding_bwd, layernorm (3), softmax (2) vs reference, odd shapes. */
static void test_rows(void)
{
    const int64_t R = 37, C = 53, Vlo = 5, Vext = 11;
    char nm[64];
    for (int acc = 0; acc < 2; acc++) {
        kcall c;
        /* tokens in [0, 20): some below Vlo, some past the shard */
        int64_t ie[5] = {R, Vlo, Vext, C, acc}, se[3] = {R, Vext * C, R * C};
        kc_make(&c, 3, se, -1, 1);
        kc_tokens(&c, 0, 0, 20);
        kc_run(&c, rt_k_embedding, rt_ref_embedding, ie, NULL);
        snprintf(nm, sizeof nm, "embedding acc=%d", acc);
        kc_check(&c, nm, (int[]){2}, 1, 1e-7);
        kc_free(&c);

        int64_t sb[3] = {R, R * C, Vext * C};
        kc_make(&c, 3, sb, -1, 1);
        kc_tokens(&c, 0, 0, 20);
        kc_run(&c, rt_k_embedding_bwd, rt_ref_embedding_bwd, ie, NULL);
        snprintf(nm, sizeof nm, "embedding_bwd acc=%d", acc);
        kc_check(&c, nm, (int[]){2}, 1, 1e-6);
        kc_free(&c);

        /* layernorm_bwd: dY, X, w, mean, rstd, dX (any mean, rstd > 0) */
        int64_t il[3] = {R, C, acc}, sl[6] = {R * C, R * C, C, R, R, R * C};
        kc_make(&c, 6, sl, -1, 1);
        for (int64_t r = 0; r < R; r++)
            c.f[4][r] = c.r[4][r] = 0.5f + fabsf(c.f[4][r]);
        kc_run(&c, rt_k_layernorm_bwd, rt_ref_layernorm_bwd, il, NULL);
        snprintf(nm, sizeof nm, "layernorm_bwd acc=%d", acc);
        kc_check(&c, nm, (int[]){5}, 1, 1e-5);
        kc_free(&c);

        /* layernorm_wgrad: dY, X, mean, rstd, dw, dbias */
        int64_t sw[6] = {R * C, R * C, R, R, C, C};
        kc_make(&c, 6, sw, -1, 1);
        kc_run(&c, rt_k_layernorm_wgrad, rt_ref_layernorm_wgrad, il, NULL);
        snprintf(nm, sizeof nm, "layernorm_wgrad acc=%d", acc);
        kc_check(&c, nm, (int[]){4, 5}, 2, 1e-5);
        kc_free(&c);

        /* rmsnorm_bwd: dY, X, w, rstd, dX (any rstd > 0) */
        int64_t srb[5] = {R * C, R * C, C, R, R * C};
        kc_make(&c, 5, srb, -1, 1);
        for (int64_t r = 0; r < R; r++)
            c.f[3][r] = c.r[3][r] = 0.5f + fabsf(c.f[3][r]);
        kc_run(&c, rt_k_rmsnorm_bwd, rt_ref_rmsnorm_bwd, il, NULL);
        snprintf(nm, sizeof nm, "rmsnorm_bwd acc=%d", acc);
        kc_check(&c, nm, (int[]){4}, 1, 1e-5);
        kc_free(&c);

        /* rmsnorm_wgrad: dY, X, rstd, dw */
        int64_t srw[4] = {R * C, R * C, R, C};
        kc_make(&c, 4, srw, -1, 1);
        kc_run(&c, rt_k_rmsnorm_wgrad, rt_ref_rmsnorm_wgrad, il, NULL);
        snprintf(nm, sizeof nm, "rmsnorm_wgrad acc=%d", acc);
        kc_check(&c, nm, (int[]){3}, 1, 1e-5);
        kc_free(&c);

        /* softmax_bwd: dY, Y, dX */
        int64_t ss[3] = {R * C, R * C, R * C};
        kc_make(&c, 3, ss, 0, 1);
        kc_run(&c, rt_k_softmax_bwd, rt_ref_softmax_bwd, il, NULL);
        snprintf(nm, sizeof nm, "softmax_bwd acc=%d", acc);
        kc_check(&c, nm, (int[]){2}, 1, 1e-5);
        kc_free(&c);
    }
    /* layernorm: rows offset by 3 (a large mean) and C = 1 (var 0) */
    static const int64_t cols[2] = {53, 1};
    for (int s = 0; s < 2; s++) {
        kcall c;
        int64_t Cs = cols[s], il[2] = {R, Cs}, sl[6] = {R * Cs, Cs, Cs, R * Cs, R, R};
        kc_make(&c, 6, sl, 2, 4);
        float eps[1] = {1e-5f};
        kc_run(&c, rt_k_layernorm, rt_ref_layernorm, il, eps);
        snprintf(nm, sizeof nm, "layernorm C=%lld", (long long)Cs);
        kc_check(&c, nm, (int[]){3, 4, 5}, 3, s ? 1e-5 : 2e-5);
        kc_free(&c);
    }
    /* rope: forward and inverse (the backward), with acc; B 3, T 5, H 2, D 6 */
    for (int inv = 0; inv < 2; inv++)
        for (int acc = 0; acc < 2; acc++) {
            kcall c;
            int64_t ir[6] = {3, 5, 2, 6, inv, acc}, sr[2] = {3 * 5 * 2 * 6, 3 * 5 * 2 * 6};
            kc_make(&c, 2, sr, -1, 1);
            float th[1] = {10000.0f};
            kc_run(&c, rt_k_rope, rt_ref_rope, ir, th);
            snprintf(nm, sizeof nm, "rope inverse=%d acc=%d", inv, acc);
            kc_check(&c, nm, (int[]){1}, 1, 1e-6);
            kc_free(&c);
        }
    /* rmsnorm: rows offset by 3 and C = 1 */
    for (int s = 0; s < 2; s++) {
        kcall c;
        int64_t Cs = cols[s], il[2] = {R, Cs}, sl[4] = {R * Cs, Cs, R * Cs, R};
        kc_make(&c, 4, sl, 2, 4);
        float eps[1] = {1e-6f};
        kc_run(&c, rt_k_rmsnorm, rt_ref_rmsnorm, il, eps);
        snprintf(nm, sizeof nm, "rmsnorm C=%lld", (long long)Cs);
        kc_check(&c, nm, (int[]){2, 3}, 2, 1e-5);
        kc_free(&c);
    }
    /* softmax with a row of large values and one of length 1 */
    for (int s = 0; s < 2; s++) {
        kcall c;
        int64_t N = s ? 1 : C, is[2] = {R, N}, ss[2] = {R * N, R * N};
        kc_make(&c, 2, ss, -30, 30);
        for (int64_t n = 0; n < N; n++)
            c.f[0][n] = c.r[0][n] = 1e4f + (float)n;
        kc_run(&c, rt_k_softmax, rt_ref_softmax, is, NULL);
        snprintf(nm, sizeof nm, "softmax N=%lld (a row near 1e4)", (long long)N);
        kc_check(&c, nm, (int[]){1}, 1, 1e-6);
        kc_free(&c);
    }
}

/* zero past RT_ZERO_STREAM_MIN (non-temporal stores) from an address that is
 * not 16-byte aligned: every word 0, the words around it untouched. */
static void test_zero_stream(void)
{
    const int64_t n = RT_ZERO_STREAM_MIN + 7;
    float *x = fbuf(n + 2, 1, 2);
    int64_t ints[1] = {n};
    void *b[1] = {x + 1};
    rt_k_zero(NULL, b, ints, NULL);
    int ok = x[0] >= 1 && x[n + 1] >= 1 && guard_ok(x, n + 2);
    for (int64_t k = 1; k <= n; k++)
        ok &= x[k] == 0.0f;
    check(ok, "zero of %lld words at an odd address (streaming stores)", (long long)n);
    free(x);
}

/* place vs reference, and place(slice(x)) puts the box back. */
static void test_place(void)
{
    /* dst (5, 7, 9); boxes [1:4, 0:7, 2:8] and [2:3, 1:7, 0:9] */
    int64_t cases[2][11] = {
        {3, 0, 5, 1, 4, 7, 0, 7, 9, 2, 8},
        {3, 0, 5, 2, 3, 7, 1, 7, 9, 0, 9},
    };
    for (int c = 0; c < 2; c++) {
        int64_t n = 1;
        for (int d = 0; d < 3; d++)
            n *= cases[c][4 + 3 * d] - cases[c][3 + 3 * d];
        for (int acc = 0; acc < 2; acc++) {
            cases[c][1] = acc;
            int64_t sz[2] = {n, 5 * 7 * 9};
            char nm[48];
            snprintf(nm, sizeof nm, "place case %d acc=%d", c, acc);
            cmp_kernel(nm, rt_k_place, rt_ref_place, 2, sz, 1, cases[c], NULL, -1, 1, 0);
        }
        cases[c][1] = 0;
        float *x = fbuf(5 * 7 * 9, -1, 1), *box = fbuf(n, 0, 1), *y = fbuf(5 * 7 * 9, 0, 0);
        void *bs[2] = {x, box}, *bp[2] = {box, y};
        rt_k_slice(NULL, bs, cases[c], NULL);
        rt_k_place(NULL, bp, cases[c], NULL);
        int ok = 1;
        for (int64_t a = 0; a < 5; a++)
            for (int64_t bb = 0; bb < 7; bb++)
                for (int64_t d = 0; d < 9; d++) {
                    int64_t q = (a * 7 + bb) * 9 + d;
                    int in = a >= cases[c][3] && a < cases[c][4] && bb >= cases[c][6] &&
                             bb < cases[c][7] && d >= cases[c][9] && d < cases[c][10];
                    ok &= y[q] == (in ? x[q] : 0.0f);
                }
        check(ok && guard_ok(y, 5 * 7 * 9), "place case %d: place(slice(x)) is x on the box, "
              "0 elsewhere", c);
        free(x);
        free(box);
        free(y);
    }
}

/* Forward and backward of one attention shape vs reference (backward
 * inputs Y and lse from the fast forward, so they are consistent); Hkv
 * key/value heads (grouped-query when below H); S keys (0: S = T; else
 * cross-attention, not causal); alibi: ALiBi, the heads being 1 .. H of a
 * layer of H + 2. */
static void att_case(int64_t B, int64_t T, int64_t H, int64_t D, int causal, int accs, int64_t Hkv, int64_t S,
                     int alibi)
{
    if (!S) S = T;
    int64_t n = B * T * H * D, nk = B * S * Hkv * D, nl = B * H * T;
    float sc[1] = {1.0f / sqrtf((float)D)};
    char nm[140];
    kcall c;
    int64_t sf[5] = {n, nk, nk, n, nl}, ifw[10] = {B, T, H, D, causal, Hkv, S, alibi, 1, H + 2};
    kc_make(&c, 5, sf, -2, 2);
    kc_run(&c, rt_k_attention, rt_ref_attention, ifw, sc);
    snprintf(nm, sizeof nm, "attention B%lld T%lld S%lld H%lld D%lld Hkv%lld causal=%d%s", (long long)B,
             (long long)T, (long long)S, (long long)H, (long long)D, (long long)Hkv, causal, alibi ? " alibi" : "");
    kc_check(&c, nm, (int[]){3, 4}, 2, 2e-5);
    float *q = fdup(c.f[0], n), *k = fdup(c.f[1], nk), *v = fdup(c.f[2], nk);
    float *y = fdup(c.f[3], n), *lse = fdup(c.f[4], nl);
    kc_free(&c);
    for (int acc = 0; acc < accs; acc++) {
        int64_t sb[9] = {n, n, nk, nk, n, nl, n, nk, nk};
        int64_t ib[12] = {B, T, H, D, causal, acc, Hkv, S, T > S ? T : S, alibi, 1, H + 2};
        kc_make(&c, 9, sb, -1, 1);
        kc_set(&c, 1, q);
        kc_set(&c, 2, k);
        kc_set(&c, 3, v);
        kc_set(&c, 4, y);
        kc_set(&c, 5, lse);
        kc_run(&c, rt_k_attention_bwd, rt_ref_attention_bwd, ib, sc);
        snprintf(nm, sizeof nm, "attention_bwd B%lld T%lld S%lld H%lld D%lld Hkv%lld causal=%d acc=%d%s",
                 (long long)B, (long long)T, (long long)S, (long long)H, (long long)D, (long long)Hkv, causal, acc,
                 alibi ? " alibi" : "");
        kc_check(&c, nm, (int[]){6, 7, 8}, 3, 5e-5);
        kc_free(&c);
    }
    free(q);
    free(k);
    free(v);
    free(y);
    free(lse);
}

/* One backward kernel of the attention family against its reference:
 * nbuf buffers of sizes sb, inputs 1..6 set from in[] (dY random), ints ib
 * (B T H D causal acc Hkv S P alibi ...), outputs outs[] checked within
 * 5e-5; named "KNAME B.. T.. S.. H.. D.. Hkv.. causal=. acc=.[ alibi]TAG". */
static void att_bwd_check(const char *kname, kfn *fast, kfn *ref, int nbuf, const int64_t *sb, const float *const *in,
                          const int64_t *ib, const float *sc, const char *tag, const int *outs, int nout)
{
    kcall c;
    char nm[180];
    kc_make(&c, nbuf, sb, -1, 1);
    for (int x = 0; x < 6; x++) kc_set(&c, 1 + x, in[x]);
    kc_run(&c, fast, ref, ib, sc);
    snprintf(nm, sizeof nm, "%s B%lld T%lld S%lld H%lld D%lld Hkv%lld causal=%d acc=%d%s%s", kname, (long long)ib[0],
             (long long)ib[1], (long long)ib[7], (long long)ib[2], (long long)ib[3], (long long)ib[6], (int)ib[4],
             (int)ib[5], ib[9] ? " alibi" : "", tag);
    kc_check(&c, nm, outs, nout, 5e-5);
    kc_free(&c);
}

/* attention_vl and its backward vs reference: row b sees keys s < lens[b],
 * lens cycling over S, 0 (Y = 0, lse = -inf, its keys' gradients 0), 1, S/2
 * and S - 1; with S = 0 given, S = T. */
static void att_vl_case(int64_t B, int64_t T, int64_t H, int64_t D, int causal, int64_t Hkv, int64_t S, int alibi)
{
    if (!S) S = T;
    int64_t n = B * T * H * D, nk = B * S * Hkv * D, nl = B * H * T;
    float sc[1] = {1.0f / sqrtf((float)D)};
    char nm[160];
    int32_t *lens = malloc((size_t)B * 4);
    const int64_t pat[5] = {S, 0, 1, S / 2, S - 1};
    for (int64_t b = 0; b < B; b++) lens[b] = (int32_t)pat[b % 5];
    kcall c;
    int64_t sf[6] = {n, nk, nk, B, n, nl}, ifw[10] = {B, T, H, D, causal, Hkv, S, alibi, 1, H + 2};
    kc_make(&c, 6, sf, -2, 2);
    kc_set(&c, 3, (const float *)lens);
    kc_run(&c, rt_k_attention_vl, rt_ref_attention_vl, ifw, sc);
    snprintf(nm, sizeof nm, "attention_vl B%lld T%lld S%lld H%lld D%lld Hkv%lld causal=%d%s", (long long)B,
             (long long)T, (long long)S, (long long)H, (long long)D, (long long)Hkv, causal, alibi ? " alibi" : "");
    kc_check(&c, nm, (int[]){4, 5}, 2, 2e-5);
    int zero = 1;   /* row 1 (lens 0): Y = 0, lse = -inf */
    for (int64_t q = T * H * D; B > 1 && q < 2 * T * H * D; q++) zero &= c.f[4][q] == 0.0f;
    for (int64_t q = H * T; B > 1 && q < 2 * H * T; q++) zero &= isinf(c.f[5][q]) && c.f[5][q] < 0;
    check(zero, "%s: the row with no keys gives Y = 0 and lse = -inf", nm);
    float *q = fdup(c.f[0], n), *k = fdup(c.f[1], nk), *v = fdup(c.f[2], nk);
    float *y = fdup(c.f[4], n), *lse = fdup(c.f[5], nl);
    kc_free(&c);
    for (int acc = 0; acc < 2; acc++) {
        int64_t sb[10] = {n, n, nk, nk, n, nl, B, n, nk, nk};
        int64_t ib[12] = {B, T, H, D, causal, acc, Hkv, S, T > S ? T : S, alibi, 1, H + 2};
        const float *in[6] = {q, k, v, y, lse, (const float *)lens};
        att_bwd_check("attention_vl_bwd", rt_k_attention_vl_bwd, rt_ref_attention_vl_bwd, 10, sb, in, ib, sc, "",
                      (int[]){7, 8, 9}, 3);
    }
    free(lens);
    free(q);
    free(k);
    free(v);
    free(y);
    free(lse);
}

/* attention_ab, its backward and attention_dbias vs reference: a bias
 * (H, T, S) in the scores; mask 1: every third key of each row gets -inf;
 * mask 2: a sliding window (key s seen by queries s .. s + 4 only, so the
 * first key tiles of late queries are all -inf) and head 0's query 1 sees
 * no key at all (Y = 0, lse = -inf, no gradient). */
static void att_ab_case(int64_t B, int64_t T, int64_t H, int64_t D, int causal, int64_t Hkv, int64_t S, int alibi,
                        int mask)
{
    if (!S) S = T;
    int64_t n = B * T * H * D, nk = B * S * Hkv * D, nl = B * H * T, nb = H * T * S;
    float sc[1] = {1.0f / sqrtf((float)D)};
    char nm[180];
    float *bias = fbuf(nb, -2, 2);
    for (int64_t x = 0; mask && x < nb; x++) {
        int64_t s = x % S, t = x / S % T, h = x / (S * T);
        if (mask == 1 ? s % 3 == 2 : (s > t || s < t - 4 || (h == 0 && t == 1)))
            bias[x] = -INFINITY;
    }
    kcall c;
    int64_t sf[6] = {n, nk, nk, nb, n, nl}, ifw[10] = {B, T, H, D, causal, Hkv, S, alibi, 1, H + 2};
    kc_make(&c, 6, sf, -2, 2);
    kc_set(&c, 3, bias);
    kc_run(&c, rt_k_attention_ab, rt_ref_attention_ab, ifw, sc);
    snprintf(nm, sizeof nm, "attention_ab B%lld T%lld S%lld H%lld D%lld Hkv%lld causal=%d%s%s", (long long)B,
             (long long)T, (long long)S, (long long)H, (long long)D, (long long)Hkv, causal, alibi ? " alibi" : "",
             mask ? " -inf mask" : "");
    kc_check(&c, nm, (int[]){4, 5}, 2, 2e-5);
    if (mask == 2) {   /* head 0's query 1 of every row: Y = 0, lse = -inf */
        int none = 1;
        for (int64_t b = 0; b < B && T > 1; b++) {
            for (int64_t d = 0; d < D; d++) none &= c.f[4][((b * T + 1) * H) * D + d] == 0.0f;
            none &= isinf(c.f[5][(b * H) * T + 1]) && c.f[5][(b * H) * T + 1] < 0;
        }
        check(none, "%s: a query whose every key the bias masks gives Y = 0, lse = -inf", nm);
    }
    float *q = fdup(c.f[0], n), *k = fdup(c.f[1], nk), *v = fdup(c.f[2], nk);
    float *y = fdup(c.f[4], n), *lse = fdup(c.f[5], nl);
    kc_free(&c);
    for (int acc = 0; acc < 2; acc++) {
        int64_t sb[10] = {n, n, nk, nk, n, nl, nb, n, nk, nk}, sd[8] = {n, n, nk, nk, n, nl, nb, nb};
        int64_t ib[12] = {B, T, H, D, causal, acc, Hkv, S, T > S ? T : S, alibi, 1, H + 2};
        const float *in[6] = {q, k, v, y, lse, bias};
        const char *tag = mask ? " -inf mask" : "";
        att_bwd_check("attention_ab_bwd", rt_k_attention_ab_bwd, rt_ref_attention_ab_bwd, 10, sb, in, ib, sc, tag,
                      (int[]){7, 8, 9}, 3);
        att_bwd_check("attention_dbias", rt_k_attention_dbias, rt_ref_attention_dbias, 8, sd, in, ib, sc, tag,
                      (int[]){7}, 1);
    }
    float *all[6] = {bias, q, k, v, y, lse};
    for (int a = 0; a < 6; a++)
        free(all[a]);
}

static void test_attention(void)
{
    for (int causal = 0; causal < 2; causal++) {
        att_case(2, 37, 3, 16, causal, 2, 3, 0, 0);   /* odd T: partial query tiles */
        att_case(1, 150, 2, 8, causal, 1, 2, 0, 0);   /* several query and key tiles */
        att_case(1, 64, 1, 32, causal, 1, 1, 0, 0);   /* a GPT-2-like tile */
        att_case(3, 1, 2, 5, causal, 1, 2, 0, 0);     /* one position */
        att_case(1, 29, 1, 1, causal, 1, 1, 0, 0);    /* head size 1 */
        att_case(2, 37, 6, 16, causal, 2, 2, 0, 0);   /* grouped-query: 3 query heads per key/value head */
        att_case(1, 70, 4, 8, causal, 1, 1, 0, 0);    /* multi-query: one key/value head */
    }
    /* cross-attention: T queries over S keys, fewer and more, across key and query tiles */
    att_case(2, 37, 3, 16, 0, 2, 3, 100, 0);
    att_case(2, 150, 2, 8, 0, 2, 1, 29, 0);
    att_case(1, 1, 2, 5, 0, 1, 2, 70, 0);
    att_case(3, 20, 4, 8, 0, 1, 2, 1, 0);
    /* ALiBi: causal and not, several tiles, grouped-query, cross-attention */
    att_case(2, 37, 3, 16, 1, 2, 3, 0, 1);
    att_case(1, 150, 4, 8, 1, 1, 2, 0, 1);
    att_case(2, 37, 6, 16, 0, 1, 2, 0, 1);
    att_case(2, 20, 3, 8, 0, 1, 3, 45, 1);
    /* key lengths: causal and not, several tiles, grouped-query, cross-attention, ALiBi */
    for (int causal = 0; causal < 2; causal++) {
        att_vl_case(5, 37, 3, 16, causal, 3, 0, 0);
        att_vl_case(5, 150, 4, 8, causal, 2, 0, 0);
        att_vl_case(5, 20, 2, 8, causal, 1, 0, 1);
    }
    att_vl_case(5, 37, 3, 16, 0, 3, 100, 0);
    att_vl_case(5, 20, 2, 8, 0, 2, 7, 0);
    /* an additive bias: causal and not, tiles, grouped-query, cross-attention, ALiBi, -inf entries */
    for (int causal = 0; causal < 2; causal++) {
        att_ab_case(3, 37, 3, 16, causal, 3, 0, 0, 0);
        att_ab_case(2, 150, 4, 8, causal, 2, 0, 0, 0);
        att_ab_case(2, 20, 2, 8, causal, 1, 0, 1, 1);
        att_ab_case(2, 150, 3, 8, causal, 3, 0, 0, 2);   /* a sliding window; a query with no key */
    }
    att_ab_case(2, 37, 3, 16, 0, 3, 100, 0, 1);
    att_ab_case(3, 20, 2, 8, 0, 2, 7, 0, 0);
}

/* xent with Vreal < V: the padding columns change nothing and get gradient 0. */
static void test_xent_vreal(void)
{
    const int64_t M = 7, V = 44, Vr = 33;   /* blocks of 11 columns in both (xk_blocks) */
    float *pad = fbuf(M * V, -4, 4), *cmp = fbuf(M * Vr, 0, 1);
    for (int64_t m = 0; m < M; m++) {
        memcpy(cmp + m * Vr, pad + m * V, (size_t)Vr * 4);
        for (int64_t v = Vr; v < V; v++)   /* what no kernel may look at */
            pad[m * V + v] = (v % 3 == 0) ? NAN : (v % 3 == 1) ? 1e30f : -INFINITY;
    }
    int32_t tg[7] = {0, 32, 5, 17, 32, 1, 20};
    float sc[1] = {1.0f / M}, lp[1], lc[1], lr[1];
    int64_t ip[4] = {M, V, 0, Vr}, ic[4] = {M, Vr, 0, Vr};
    void *bp[3] = {pad, tg, lp}, *bc[3] = {cmp, tg, lc}, *br[3] = {pad, tg, lr};
    xk_fwd(NULL, bp, ip, sc);
    xk_fwd(NULL, bc, ic, sc);
    oracle_xent(NULL, br, ip, sc);
    check(lp[0] == lc[0] && fabs(lp[0] - lr[0]) < 1e-6 * fabs(lr[0]),
          "xent Vreal=%lld of V=%lld: loss %.7g, same as without padding (%.7g), reference %.7g",
          (long long)Vr, (long long)V, lp[0], lc[0], lr[0]);
    for (int acc = 0; acc < 2; acc++) {
        float *gp = fbuf(M * V, -1, 1), *gc = fbuf(M * Vr, 0, 1), *gr = fdup(gp, M * V);
        float *g0 = fdup(gp, M * V);
        for (int64_t m = 0; m < M; m++)
            memcpy(gc + m * Vr, gp + m * V, (size_t)Vr * 4);
        ip[2] = ic[2] = acc;
        void *dp[3] = {pad, tg, gp}, *dc[3] = {cmp, tg, gc}, *dr[3] = {pad, tg, gr};
        xk_bwd(NULL, dp, ip, sc);
        xk_bwd(NULL, dc, ic, sc);
        oracle_xent_bwd(NULL, dr, ip, sc);
        int same = 1, padok = 1;
        for (int64_t m = 0; m < M; m++)
            for (int64_t v = 0; v < V; v++) {
                float g = gp[m * V + v];
                if (v < Vr)
                    same &= g == gc[m * Vr + v];
                else
                    padok &= acc ? g == g0[m * V + v] : g == 0.0f;
            }
        double e = nerr(gp, gr, M * V, 1e-6);
        check(same && padok && e < 1e-5 && guard_ok(gp, M * V),
              "xent_bwd Vreal acc=%d: real columns as without padding, padding %s, err vs "
              "reference %.2e", acc, acc ? "unchanged" : "0", e);
        free(gp);
        free(gc);
        free(gr);
        free(g0);
    }
    free(pad);
    free(cmp);
}

/* Exit status of fn(arg) run in a child process (its stderr discarded). */
static int exit_status(void (*fn)(const int64_t *), const int64_t *arg)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr))
            _exit(98);
        fn(arg);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* cross-entropy (xent_stats, xent_loss) on a 2 x 4 matrix with ints i (M, V, acc, Vreal) and
 * targets {i[4], 0}. */
static void xent_child(const int64_t *i)
{
    float lg[8] = {0}, l[1];
    int32_t t[2] = {(int32_t)i[4], 0};
    void *b[3] = {lg, t, l};
    float sc[1] = {1.0f};
    xk_fwd(NULL, b, i, sc);
}

/* Vreal = 0 or a target in the padding: exit status 1 (Vreal may exceed a
 * rank's columns: its share of a wider vocabulary). */
static void test_xent_errors(void)
{
    int64_t bad[2][5] = {{2, 4, 0, 0, 0}, {2, 4, 0, 3, 3}};
    int ok = 1;
    for (int k = 0; k < 2; k++)
        ok &= exit_status(xent_child, bad[k]) == 1;
    int64_t good[5] = {2, 4, 0, 3, 2}, wide[5] = {2, 4, 0, 9, 7};
    check(ok && exit_status(xent_child, good) == 0 && exit_status(xent_child, wide) == 0,
          "xent_stats: Vreal = 0, target >= Vreal exit 1; good calls exit 0 (Vreal past the columns too)");
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

/* rt_gemm with row strides (as attention calls it): operands inside wider
 * rows, C inside a wider matrix that must keep its other columns; every
 * transpose, sizes across the 16-wide packing steps. */
static void test_gemm_strided(void)
{
    static const int64_t shapes[][3] = {{28, 16, 28}, {37, 29, 45}, {14, 64, 64}, {8, 100, 33},
                                        {1, 17, 70}, {50, 1, 3}};
    static const char *const isas[] = {"avx512", "avx2", "scalar"};
    for (int s = 0; s < 3; s++) {
        if (rt_isa_force(isas[s]) != 0)
            continue;
        int bad = 0;
        double worst = 0;
        for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; q++)
            for (int combo = 0; combo < 8; combo++) {
                int64_t M = shapes[q][0], K = shapes[q][1], N = shapes[q][2];
                int ta = combo & 1, tb = (combo >> 1) & 1, acc = combo >> 2;
                int64_t lda = (ta ? M : K) + 5, ldb = (tb ? K : N) + 3, ldc = N + 7;
                int64_t na = (ta ? K : M) * lda, nb = (tb ? N : K) * ldb, nc = M * ldc;
                float *A = fbuf(na, -1, 1), *B = fbuf(nb, -1, 1), *C = fbuf(nc, -1, 1);
                float *C0 = fdup(C, nc);
                rt_gemm(M, K, N, A, lda, ta, B, ldb, tb, C, ldc, acc, rt_scratch(0));
                double e = 0;
                int kept = 1;
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < ldc; n++) {
                        if (n >= N) {
                            kept &= C[m * ldc + n] == C0[m * ldc + n];
                            continue;
                        }
                        double r = acc ? C0[m * ldc + n] : 0.0;
                        for (int64_t k = 0; k < K; k++)
                            r += (double)(ta ? A[k * lda + m] : A[m * lda + k]) *
                                 (tb ? B[n * ldb + k] : B[k * ldb + n]);
                        e = fmax(e, fabs(r - C[m * ldc + n]));
                    }
                worst = fmax(worst, e);
                if (!(e <= 2e-6 * sqrt((double)K) + 1e-6) || !kept || !guard_ok(C, nc))
                    bad++;
                free(A);
                free(B);
                free(C);
                free(C0);
            }
        check(!bad, "rt_gemm %-6s with row strides: 6 shapes x 4 transposes x acc, %d bad, "
              "worst err %.2e", isas[s], bad, worst);
    }
    rt_isa_force(NULL);
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
    int64_t i3[4] = {M, V, 0, V};
    float s2[1] = {1.0f / M};
    void *bx[3] = {lg, tg, l}, *bxd[3] = {lg, tg, dl};
    xk_bwd(NULL, bxd, i3, s2);
    worst = 0;
    for (int64_t k = 0; k < M * V; k++) {
        float keep = lg[k];
        lg[k] = keep + h;
        xk_fwd(NULL, bx, i3, s2);
        double lp = l[0];
        lg[k] = keep - h;
        xk_fwd(NULL, bx, i3, s2);
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

/* Max |central difference of L = sum W y - grad| over x[0..nx), with y the
 * output (ny floats) of fwd(b, ints, flts), which reads x.  Richardson's
 * extrapolation of the differences at h and h / 2, (4 D(h/2) - D(h)) / 3,
 * cancels their h^2 term: a curved output (a layernorm row of small
 * variance) does not then pass for a wrong gradient. */
static double fd_check(kfn *fwd, void *const *b, const int64_t *ints, const float *flts,
                       float *x, int64_t nx, const float *grad, const float *W, const float *y,
                       int64_t ny)
{
    const float hs[2] = {1e-2f, 5e-3f};
    double worst = 0;
    for (int64_t k = 0; k < nx; k++) {
        float keep = x[k];
        double dd[2];
        for (int j = 0; j < 2; j++) {
            x[k] = keep + hs[j];
            fwd(NULL, b, ints, flts);
            double lp = dot(W, y, ny);
            x[k] = keep - hs[j];
            fwd(NULL, b, ints, flts);
            double lm = dot(W, y, ny);
            dd[j] = (lp - lm) / ((double)(keep + hs[j]) - (double)(keep - hs[j]));
        }
        x[k] = keep;
        worst = fmax(worst, fabs((4 * dd[1] - dd[0]) / 3 - grad[k]));
    }
    fwd(NULL, b, ints, flts);   /* leave y as it was */
    return worst;
}

/* attention_bwd's dq, dk, dv vs central differences of L = sum W Y (Hkv
 * key/value heads: grouped-query when 1 < H / Hkv). */
static void fd_attention(int causal, int64_t Hkv, int64_t S, int alibi)
{
    const int64_t B = 2, T = 5, H = 2, D = 3, n = B * T * H * D, nk = B * S * Hkv * D;
    float *q = fbuf(n, -1, 1), *k = fbuf(nk, -1, 1), *v = fbuf(nk, -1, 1), *W = fbuf(n, -1, 1);
    float *y = fbuf(n, 0, 1), *lse = fbuf(B * H * T, 0, 1);
    float *dq = fbuf(n, 0, 1), *dk = fbuf(nk, 0, 1), *dv = fbuf(nk, 0, 1);
    float sc[1] = {0.7f};
    int64_t ifw[10] = {B, T, H, D, causal, Hkv, S, alibi, 2, 5};
    int64_t ib[12] = {B, T, H, D, causal, 0, Hkv, S, T > S ? T : S, alibi, 2, 5};
    void *bf[5] = {q, k, v, y, lse}, *bb[9] = {W, q, k, v, y, lse, dq, dk, dv};
    rt_k_attention(NULL, bf, ifw, sc);
    rt_k_attention_bwd(NULL, bb, ib, sc);
    double eq = fd_check(rt_k_attention, bf, ifw, sc, q, n, dq, W, y, n);
    double ek = fd_check(rt_k_attention, bf, ifw, sc, k, nk, dk, W, y, n);
    double ev = fd_check(rt_k_attention, bf, ifw, sc, v, nk, dv, W, y, n);
    check(fmax(eq, fmax(ek, ev)) < 2e-3, "attention_bwd causal=%d Hkv=%lld S=%lld%s vs central differences: dq "
          "%.2e, dk %.2e, dv %.2e", causal, (long long)Hkv, (long long)S, alibi ? " alibi" : "", eq, ek, ev);
    float *all[9] = {q, k, v, W, y, lse, dq, dk, dv};
    for (int a = 0; a < 9; a++)
        free(all[a]);
}

/* attention_vl_bwd's dq, dk, dv vs central differences of L = sum W Y, row
 * 0 seeing 3 of S = 5 keys, row 1 none. */
static void fd_attention_vl(int causal)
{
    const int64_t B = 2, T = 5, H = 2, D = 3, S = 5, Hkv = 2, n = B * T * H * D, nk = B * S * Hkv * D;
    float *q = fbuf(n, -1, 1), *k = fbuf(nk, -1, 1), *v = fbuf(nk, -1, 1), *W = fbuf(n, -1, 1);
    float *y = fbuf(n, 0, 1), *lse = fbuf(B * H * T, 0, 1);
    float *dq = fbuf(n, 0, 1), *dk = fbuf(nk, 0, 1), *dv = fbuf(nk, 0, 1);
    int32_t lens[2] = {3, 0};
    float sc[1] = {0.7f};
    int64_t ifw[10] = {B, T, H, D, causal, Hkv, S, 0, 0, 2};
    int64_t ib[12] = {B, T, H, D, causal, 0, Hkv, S, T, 0, 0, 2};
    void *bf[6] = {q, k, v, lens, y, lse}, *bb[10] = {W, q, k, v, y, lse, lens, dq, dk, dv};
    rt_k_attention_vl(NULL, bf, ifw, sc);
    rt_k_attention_vl_bwd(NULL, bb, ib, sc);
    double eq = fd_check(rt_k_attention_vl, bf, ifw, sc, q, n, dq, W, y, n);
    double ek = fd_check(rt_k_attention_vl, bf, ifw, sc, k, nk, dk, W, y, n);
    double ev = fd_check(rt_k_attention_vl, bf, ifw, sc, v, nk, dv, W, y, n);
    int masked = 1;   /* keys 3, 4 of row 0 and all of row 1: no gradient */
    for (int64_t s = 0; s < S; s++)
        for (int64_t x = 0; x < Hkv * D; x++)
            for (int64_t b = 0; b < B; b++)
                if (b == 1 || s >= 3) masked &= dk[(b * S + s) * Hkv * D + x] == 0 && dv[(b * S + s) * Hkv * D + x] == 0;
    check(fmax(eq, fmax(ek, ev)) < 2e-3 && masked, "attention_vl_bwd causal=%d vs central differences: dq %.2e, "
          "dk %.2e, dv %.2e; the padding keys' dk, dv 0: %s", causal, eq, ek, ev, masked ? "yes" : "NO");
    float *all[9] = {q, k, v, W, y, lse, dq, dk, dv};
    for (int a = 0; a < 9; a++)
        free(all[a]);
}

/* attention_ab_bwd's dq, dk, dv and attention_dbias's dbias vs central
 * differences of L = sum W Y. */
static void fd_attention_ab(int causal, int64_t Hkv, int alibi)
{
    const int64_t B = 2, T = 5, H = 2, D = 3, S = 5, n = B * T * H * D, nk = B * S * Hkv * D, nb = H * T * S;
    float *q = fbuf(n, -1, 1), *k = fbuf(nk, -1, 1), *v = fbuf(nk, -1, 1), *W = fbuf(n, -1, 1);
    float *bias = fbuf(nb, -1, 1), *y = fbuf(n, 0, 1), *lse = fbuf(B * H * T, 0, 1);
    float *dq = fbuf(n, 0, 1), *dk = fbuf(nk, 0, 1), *dv = fbuf(nk, 0, 1), *db = fbuf(nb, 0, 1);
    float sc[1] = {0.7f};
    int64_t ifw[10] = {B, T, H, D, causal, Hkv, S, alibi, 2, 5};
    int64_t ib[12] = {B, T, H, D, causal, 0, Hkv, S, T, alibi, 2, 5};
    void *bf[6] = {q, k, v, bias, y, lse}, *bb[10] = {W, q, k, v, y, lse, bias, dq, dk, dv};
    void *bd[8] = {W, q, k, v, y, lse, bias, db};
    rt_k_attention_ab(NULL, bf, ifw, sc);
    rt_k_attention_ab_bwd(NULL, bb, ib, sc);
    rt_k_attention_dbias(NULL, bd, ib, sc);
    double eq = fd_check(rt_k_attention_ab, bf, ifw, sc, q, n, dq, W, y, n);
    double ek = fd_check(rt_k_attention_ab, bf, ifw, sc, k, nk, dk, W, y, n);
    double ev = fd_check(rt_k_attention_ab, bf, ifw, sc, v, nk, dv, W, y, n);
    double eb = fd_check(rt_k_attention_ab, bf, ifw, sc, bias, nb, db, W, y, n);
    int zero = 1;   /* causal: the bias of keys after the query gets no gradient */
    for (int64_t h = 0; causal && h < H; h++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t s = t + 1; s < S; s++) zero &= db[(h * T + t) * S + s] == 0.0f;
    check(fmax(fmax(eq, eb), fmax(ek, ev)) < 2e-3 && zero, "attention_ab_bwd and attention_dbias causal=%d "
          "Hkv=%lld%s vs central differences: dq %.2e, dk %.2e, dv %.2e, dbias %.2e", causal, (long long)Hkv,
          alibi ? " alibi" : "", eq, ek, ev, eb);
    float *all[11] = {q, k, v, W, bias, y, lse, dq, dk, dv, db};
    for (int a = 0; a < 11; a++)
        free(all[a]);
}

/* layernorm_bwd (dX) and layernorm_wgrad (dw, dbias) vs central differences. */
static void fd_layernorm(void)
{
    const int64_t R = 4, C = 7;
    float *x = fbuf(R * C, -1, 1), *w = fbuf(C, 0.5f, 1.5f), *bias = fbuf(C, -1, 1);
    float *W = fbuf(R * C, -1, 1), *y = fbuf(R * C, 0, 1), *mean = fbuf(R, 0, 1);
    float *rstd = fbuf(R, 0, 1), *dx = fbuf(R * C, 0, 1), *dw = fbuf(C, 0, 1);
    float *db = fbuf(C, 0, 1), eps[1] = {1e-5f};
    int64_t ifw[2] = {R, C}, ib[3] = {R, C, 0};
    void *bf[6] = {x, w, bias, y, mean, rstd};
    void *bb[6] = {W, x, w, mean, rstd, dx}, *bw[6] = {W, x, mean, rstd, dw, db};
    rt_k_layernorm(NULL, bf, ifw, eps);
    rt_k_layernorm_bwd(NULL, bb, ib, NULL);
    rt_k_layernorm_wgrad(NULL, bw, ib, NULL);
    double ex = fd_check(rt_k_layernorm, bf, ifw, eps, x, R * C, dx, W, y, R * C);
    double ew = fd_check(rt_k_layernorm, bf, ifw, eps, w, C, dw, W, y, R * C);
    double eb = fd_check(rt_k_layernorm, bf, ifw, eps, bias, C, db, W, y, R * C);
    check(fmax(ex, fmax(ew, eb)) < 2e-3, "layernorm_bwd, layernorm_wgrad vs central "
          "differences: dx %.2e, dw %.2e, dbias %.2e", ex, ew, eb);
    float *all[10] = {x, w, bias, W, y, mean, rstd, dx, dw, db};
    for (int a = 0; a < 10; a++)
        free(all[a]);
}

/* rmsnorm_bwd (dX) and rmsnorm_wgrad (dw) vs central differences. */
static void fd_rmsnorm(void)
{
    const int64_t R = 4, C = 7;
    float *x = fbuf(R * C, -1, 1), *w = fbuf(C, 0.5f, 1.5f), *W = fbuf(R * C, -1, 1);
    float *y = fbuf(R * C, 0, 1), *rstd = fbuf(R, 0, 1), *dx = fbuf(R * C, 0, 1), *dw = fbuf(C, 0, 1);
    float eps[1] = {1e-6f};
    int64_t ifw[2] = {R, C}, ib[3] = {R, C, 0};
    void *bf[4] = {x, w, y, rstd}, *bb[5] = {W, x, w, rstd, dx}, *bw[4] = {W, x, rstd, dw};
    rt_k_rmsnorm(NULL, bf, ifw, eps);
    rt_k_rmsnorm_bwd(NULL, bb, ib, NULL);
    rt_k_rmsnorm_wgrad(NULL, bw, ib, NULL);
    double ex = fd_check(rt_k_rmsnorm, bf, ifw, eps, x, R * C, dx, W, y, R * C);
    double ew = fd_check(rt_k_rmsnorm, bf, ifw, eps, w, C, dw, W, y, R * C);
    check(fmax(ex, ew) < 2e-3, "rmsnorm_bwd, rmsnorm_wgrad vs central differences: dx %.2e, dw %.2e", ex, ew);
    float *all[7] = {x, w, W, y, rstd, dx, dw};
    for (int a = 0; a < 7; a++)
        free(all[a]);
}

/* mean_mid and its backward vs reference (odd sizes, more than 256 columns,
 * acc), and the backward vs central differences of L = sum W mean(X). */
static void test_mean(void)
{
    static const int64_t sh[][3] = {{3, 7, 5}, {2, 1, 300}, {5, 33, 17}, {0, 4, 3}};
    char nm[64];
    for (int s = 0; s < 4; s++)
        for (int acc = 0; acc < 2; acc++) {
            int64_t R = sh[s][0], T = sh[s][1], C = sh[s][2], iv[4] = {R, T, C, acc};
            float sc[1] = {1.0f / (float)T};
            kcall c;
            kc_make(&c, 2, (int64_t[]){R * T * C, R * C}, -1, 1);
            kc_run(&c, rt_k_mean_mid, rt_ref_mean_mid, iv, sc);
            snprintf(nm, sizeof nm, "mean_mid R%lld T%lld C%lld acc=%d", (long long)R, (long long)T, (long long)C, acc);
            kc_check(&c, nm, (int[]){1}, 1, 1e-6);
            kc_free(&c);
            kc_make(&c, 2, (int64_t[]){R * C, R * T * C}, -1, 1);
            kc_run(&c, rt_k_mean_mid_bwd, rt_ref_mean_mid_bwd, iv, sc);
            snprintf(nm, sizeof nm, "mean_mid_bwd R%lld T%lld C%lld acc=%d", (long long)R, (long long)T, (long long)C,
                     acc);
            kc_check(&c, nm, (int[]){1}, 1, 1e-6);
            kc_free(&c);
        }
    const int64_t R = 3, T = 6, C = 5;
    float *x = fbuf(R * T * C, -1, 1), *W = fbuf(R * C, -1, 1), *y = fbuf(R * C, 0, 1), *dx = fbuf(R * T * C, 0, 1);
    float sc[1] = {1.0f / (float)T};
    int64_t iv[4] = {R, T, C, 0};
    void *bf[2] = {x, y}, *bb[2] = {W, dx};
    rt_k_mean_mid(NULL, bf, iv, sc);
    rt_k_mean_mid_bwd(NULL, bb, iv, sc);
    double e = fd_check(rt_k_mean_mid, bf, iv, sc, x, R * T * C, dx, W, y, R * C);
    check(e < 2e-3, "mean_mid_bwd vs central differences: %.2e", e);
    free(x), free(W), free(y), free(dx);
}

/* transpose vs reference (tiles partly filled, one row or column, acc), and
 * transposing twice gives X back bitwise. */
static void test_transpose(void)
{
    static const int64_t sh[][3] = {{3, 7, 5}, {2, 1, 300}, {4, 33, 65}, {1, 64, 32}, {0, 4, 3}};
    char nm[64];
    for (int s = 0; s < 5; s++)
        for (int acc = 0; acc < 2; acc++) {
            int64_t R = sh[s][0], A = sh[s][1], Bn = sh[s][2], iv[4] = {R, A, Bn, acc};
            kcall c;
            kc_make(&c, 2, (int64_t[]){R * A * Bn, R * A * Bn}, -1, 1);
            kc_run(&c, rt_k_transpose, rt_ref_transpose, iv, NULL);
            snprintf(nm, sizeof nm, "transpose R%lld A%lld B%lld acc=%d", (long long)R, (long long)A, (long long)Bn, acc);
            kc_check(&c, nm, (int[]){1}, 1, 1e-7);
            kc_free(&c);
        }
    const int64_t R = 3, A = 40, Bn = 70, n = R * A * Bn;
    float *x = fbuf(n, -1, 1), *y = fbuf(n, 0, 1), *z = fbuf(n, 0, 1);
    rt_k_transpose(NULL, (void *[]){x, y}, (int64_t[]){R, A, Bn, 0}, NULL);
    rt_k_transpose(NULL, (void *[]){y, z}, (int64_t[]){R, Bn, A, 0}, NULL);
    check(!memcmp(x, z, (size_t)n * 4) && y[(1 * Bn + 3) * A + 5] == x[(1 * A + 5) * Bn + 3] && guard_ok(z, n),
          "transpose twice gives X back; Y[1, 3, 5] = X[1, 5, 3]");
    free(x), free(y), free(z);
}

/* relpos_bias and its backward vs reference (encoder and decoder buckets,
 * cross lengths, T5's defaults over 300 positions, empty), the backward as
 * the forward's adjoint (<fwd(tab), dY> = <tab, bwd(dY)>), and buckets of
 * T5's defaults (32 buckets, max_distance 128) that follow from the rule by
 * hand.  tests/relpos.sh checks every bucket against Hugging Face's rule in
 * numpy. */
static void test_relpos(void)
{
    static const int64_t cs[][6] = {   /* T, S, H, NB, bidirectional, max_distance */
        {5, 5, 3, 8, 1, 6}, {24, 24, 4, 16, 1, 12}, {7, 13, 2, 32, 0, 128}, {40, 30, 1, 10, 0, 20},
        {300, 300, 2, 32, 1, 128}, {1, 1, 1, 4, 1, 3}, {0, 4, 2, 8, 1, 8}, {9, 0, 2, 6, 0, 5}};
    char nm[96];
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        int64_t T = cs[k][0], S = cs[k][1], H = cs[k][2], NB = cs[k][3];
        kcall c;
        kc_make(&c, 2, (int64_t[]){NB * H, H * T * S}, -1, 1);
        kc_run(&c, rt_k_relpos_bias, rt_ref_relpos_bias, cs[k], NULL);
        snprintf(nm, sizeof nm, "relpos_bias T%lld S%lld H%lld NB%lld bi%lld md%lld", (long long)T, (long long)S,
                 (long long)H, (long long)NB, (long long)cs[k][4], (long long)cs[k][5]);
        kc_check(&c, nm, (int[]){1}, 1, 0);
        /* the adjoint: <Y, dY> for Y = fwd(tab) against <tab, bwd(dY)> */
        float *dy = fbuf(H * T * S, -1, 1), *dt = fbuf(NB * H, -1, 1);
        int64_t ib[7] = {T, S, H, NB, cs[k][4], cs[k][5], 0};
        rt_k_relpos_bias_bwd(NULL, (void *[]){dy, dt}, ib, NULL);
        double l = 0, r = 0, sc = 1e-30;
        for (int64_t q = 0; q < H * T * S; q++) l += (double)c.f[1][q] * dy[q], sc += fabs((double)c.f[1][q] * dy[q]);
        for (int64_t q = 0; q < NB * H; q++) r += (double)c.f[0][q] * dt[q];
        check(fabs(l - r) <= 1e-6 * sc && guard_ok(dt, NB * H), "%s: the backward is the forward's adjoint "
              "(%.6g vs %.6g)", nm, l, r);
        free(dy), free(dt);
        kc_free(&c);
        for (int acc = 0; acc < 2; acc++) {
            ib[6] = acc;
            kc_make(&c, 2, (int64_t[]){H * T * S, NB * H}, -1, 1);
            kc_run(&c, rt_k_relpos_bias_bwd, rt_ref_relpos_bias_bwd, ib, NULL);
            snprintf(nm, sizeof nm, "relpos_bias_bwd T%lld S%lld H%lld NB%lld acc=%d", (long long)T, (long long)S,
                     (long long)H, (long long)NB, acc);
            kc_check(&c, nm, (int[]){1}, 1, 1e-6 + 1e-7 * sqrt((double)(T * S)));   /* (f32 sums of up to T S terms) */
            kc_free(&c);
        }
    }
    /* T5's defaults: 16 buckets a side, exact below 8, log-spaced to 128, then the last */
    static const long long want[][3] = {   /* d, bidirectional, bucket */
        {0, 1, 0}, {1, 1, 17}, {-1, 1, 1}, {7, 1, 23}, {-8, 1, 8}, {8, 1, 24}, {-16, 1, 10}, {-32, 1, 12},
        {-64, 1, 14}, {-127, 1, 15}, {-128, 1, 15}, {1000, 1, 31}, {5, 0, 0}, {-5, 0, 5}, {-16, 0, 16},
        {-200, 0, 31}};
    int bad = 0;
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        long long b = rt_relpos_bucket(want[k][0], 32, (int)want[k][1], 128);
        if (b != want[k][2]) {
            printf("  bucket of d = %lld (bidirectional %lld): %lld, want %lld\n", want[k][0], want[k][1], b, want[k][2]);
            bad++;
        }
    }
    check(!bad, "T5's buckets (32, max_distance 128): %zu distances as the rule gives them by hand",
          sizeof want / sizeof want[0]);
}

/* --relpos NB MAXDIST BIDIR DLO DHI: the buckets of d = DLO .. DHI, one a
 * line (tests/relpos.sh compares them with Hugging Face's rule). */
static int relpos_dump(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: test_rt_kernels --relpos NB MAXDIST BIDIR DLO DHI\n");
        return 2;
    }
    long long nb = atoll(argv[2]), md = atoll(argv[3]), bi = atoll(argv[4]), lo = atoll(argv[5]), hi = atoll(argv[6]);
    for (long long d = lo; d <= hi; d++) printf("%lld\n", rt_relpos_bucket(d, nb, (int)bi, md));
    return 0;
}

/* rope's backward (the inverse rotation of dY) vs central differences of
 * L = sum W rope(X); and the inverse undoes the forward. */
static void fd_rope(void)
{
    const int64_t B = 2, T = 9, H = 2, D = 8, n = B * T * H * D;
    float *x = fbuf(n, -1, 1), *W = fbuf(n, -1, 1), *y = fbuf(n, 0, 1), *dx = fbuf(n, 0, 1), *z = fbuf(n, 0, 1);
    float th[1] = {100.0f};   /* (a small base: large angles at the later positions) */
    int64_t ifw[6] = {B, T, H, D, 0, 0}, ibw[6] = {B, T, H, D, 1, 0};
    void *bf[2] = {x, y}, *bb[2] = {W, dx}, *bz[2] = {y, z};
    rt_k_rope(NULL, bf, ifw, th);
    rt_k_rope(NULL, bb, ibw, th);
    double e = fd_check(rt_k_rope, bf, ifw, th, x, n, dx, W, y, n);
    rt_k_rope(NULL, bz, ibw, th);
    double back = 0;
    for (int64_t k = 0; k < n; k++)
        back = fmax(back, fabs((double)z[k] - x[k]));
    check(e < 2e-3 && back < 1e-5, "rope backward vs central differences: max err %.2e; inverse(rope(x)) - x: %.2e",
          e, back);
    float *all[5] = {x, W, y, dx, z};
    for (int a = 0; a < 5; a++)
        free(all[a]);
}

/* softmax_bwd and embedding_bwd vs central differences. */
static void fd_softmax_embedding(void)
{
    const int64_t R = 3, N = 6;
    float *x = fbuf(R * N, -2, 2), *y = fbuf(R * N, 0, 1), *W = fbuf(R * N, -1, 1);
    float *dx = fbuf(R * N, 0, 1);
    int64_t is[2] = {R, N}, ib[3] = {R, N, 0};
    void *bf[2] = {x, y}, *bb[3] = {W, y, dx};
    rt_k_softmax(NULL, bf, is, NULL);
    rt_k_softmax_bwd(NULL, bb, ib, NULL);
    double e = fd_check(rt_k_softmax, bf, is, NULL, x, R * N, dx, W, y, R * N);
    check(e < 2e-3, "softmax_bwd vs central differences: max err %.2e", e);
    free(x);
    free(y);
    free(W);
    free(dx);

    /* tokens repeat and leave the shard [2, 6) */
    const int64_t Rt = 9, Vlo = 2, Vext = 4, C = 3;
    int32_t tok[9] = {2, 5, 3, 2, 0, 7, 5, 5, 4};
    float *tab = fbuf(Vext * C, -1, 1), *emb = fbuf(Rt * C, 0, 1), *We = fbuf(Rt * C, -1, 1);
    float *dt = fbuf(Vext * C, 0, 1);
    int64_t ie[5] = {Rt, Vlo, Vext, C, 0};
    void *ef[3] = {tok, tab, emb}, *eb[3] = {tok, We, dt};
    rt_k_embedding(NULL, ef, ie, NULL);
    rt_k_embedding_bwd(NULL, eb, ie, NULL);
    e = fd_check(rt_k_embedding, ef, ie, NULL, tab, Vext * C, dt, We, emb, Rt * C);
    check(e < 1e-4, "embedding_bwd vs central differences: max err %.2e", e);
    free(tab);
    free(emb);
    free(We);
    free(dt);
}

/* xent_bwd with Vreal < V vs central differences of xent, all V columns. */
static void fd_xent_vreal(void)
{
    const int64_t M = 4, V = 9, Vr = 6;
    float *lg = fbuf(M * V, -3, 3), *dl = fbuf(M * V, 0, 1), l[1];
    int32_t tg[4] = {3, 0, 5, 5};
    int64_t ints[4] = {M, V, 0, Vr};
    float sc[1] = {1.0f / M}, one[1] = {1.0f};
    void *bx[3] = {lg, tg, l}, *bd[3] = {lg, tg, dl};
    xk_bwd(NULL, bd, ints, sc);
    double e = fd_check(xk_fwd, bx, ints, sc, lg, M * V, dl, one, l, 1);
    check(e < 2e-3, "xent_bwd Vreal=%lld of V=%lld vs central differences: max err %.2e",
          (long long)Vr, (long long)V, e);
    free(lg);
    free(dl);
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
        int64_t i1[2] = {n, 0}, ix[4] = {n / V, V, 0, V};
        float sc[1] = {1.0f};
        void *bg[2] = {x, y}, *bb[3] = {y, x, d}, *bx[3] = {x, t, l}, *bxd[3] = {x, t, d};
        const char *names[4] = {"gelu", "gelu_bwd", "xent_stats+loss", "xent_stats+vp_bwd"};
        for (int w = 0; w < 4; w++) {
            double best = 1e30;
            for (int r = 0; r < 5; r++) {
                double t0 = rt_now();
                if (w == 0)
                    rt_k_gelu(NULL, bg, i1, NULL);
                else if (w == 1)
                    rt_k_gelu_bwd(NULL, bb, i1, NULL);
                else if (w == 2)
                    xk_fwd(NULL, bx, ix, sc);
                else
                    xk_bwd(NULL, bxd, ix, sc);
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
    if (argc > 1 && !strcmp(argv[1], "--relpos"))
        return relpos_dump(argc, argv);
    printf("ISA: %s\n", rt_isa_name());
    static const char *const isas[] = {"avx512", "avx2", "scalar"};
    for (int s = 0; s < 3; s++) {   /* the exp-based kernels have a version per ISA */
        if (rt_isa_force(isas[s]) != 0) {
            printf("skip %s: this CPU lacks it\n", isas[s]);
            continue;
        }
        printf("-- elementwise kernels, %s\n", isas[s]);
        test_elementwise();
        test_ew();
        test_xent();
        test_xent_vreal();
        test_xent_blocks();
        test_rows();
        test_attention();
    }
    rt_isa_force(NULL);
    test_xent_errors();
    test_zero_stream();
    test_slice();
    test_place();
    test_matmul();
    test_gemm_strided();
    fd_activation("relu_bwd", rt_k_relu, rt_k_relu_bwd, 1);
    fd_activation("gelu_bwd", rt_k_gelu, rt_k_gelu_bwd, 0);
    fd_activation("silu_bwd", rt_k_silu, rt_k_silu_bwd, 0);
    fd_losses();
    fd_xent_vreal();
    fd_matmul();
    for (int causal = 0; causal < 2; causal++) {
        fd_attention(causal, 2, 5, 0);
        fd_attention(causal, 1, 5, 0);   /* grouped-query: both query heads read one */
        fd_attention(causal, 2, 5, 1);   /* ALiBi */
    }
    fd_attention(0, 2, 8, 0);   /* cross-attention: more keys than queries */
    fd_attention(0, 1, 3, 0);   /* fewer */
    fd_attention_vl(0);
    fd_attention_vl(1);
    for (int causal = 0; causal < 2; causal++) {
        fd_attention_ab(causal, 2, 0);
        fd_attention_ab(causal, 1, 1);   /* grouped-query, ALiBi */
    }
    fd_layernorm();
    fd_rmsnorm();
    fd_rope();
    test_mean();
    test_transpose();
    test_relpos();
    fd_softmax_embedding();
    test_optimizers();
    return check_done();
}
