/* kernels_ref.c -- the plain scalar reference of every kernel in rt_kernels.h.
 *
 * rt_ref_<name> has the signature of rt_k_<name> and says, as directly as C
 * allows, what the kernel computes.  Sums are accumulated in double.  The
 * fast kernels (kernels.c, matmul.c) are tested against these; rng.c holds
 * the references of init_param and data, and the collectives' references are
 * the simple algorithms of comm_shm.c (fast = 0).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_ew.h"
#include "rt_relpos.h"
#include "cpu/rt_cpu.h"
#include "cpu/rt_lowp.h"

/* b: dst.  i: n.  dst[0..n) = 0 (f32 or i32 alike). */
void rt_ref_zero(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    float *y = b[0];
    for (int64_t k = 0; k < i[0]; k++)
        y[k] = 0.0f;
}

/* Element (r, c) of a row-major matrix stored (rows, cols), or of its transpose. */
static inline float rt_ref_at(const float *m, int trans, int64_t r, int64_t c, int64_t rows,
                              int64_t cols)
{
    return trans ? m[c * rows + r] : m[r * cols + c];
}

/* C[M,N] (+)= op(A)[M,K] op(B)[K,N], summed in double; bf16: the operands'
 * elements rounded to bf16 first (every product is then exact). */
static void rt_ref_mm(void *const *b, const int64_t *i, int bf16)
{
    const float *A = b[0], *B = b[1];
    float *C = b[2];
    int64_t M = i[0], K = i[1], N = i[2];
    int ta = (int)i[3], tb = (int)i[4], acc = (int)i[5];
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) {
                float x = rt_ref_at(A, ta, m, k, M, K), y = rt_ref_at(B, tb, k, n, K, N);
                if (bf16)
                    x = rt_bf16_round(x), y = rt_bf16_round(y);
                s += (double)x * y;
            }
            C[m * N + n] = (float)((acc ? C[m * N + n] : 0.0) + s);
        }
}

/* C[M,N] (+)= op(A)[M,K] op(B)[K,N]. */
void rt_ref_matmul(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_ref_mm(b, i, 0);
}

/* The same with A's and B's elements rounded to bf16 (lowp.c). */
void rt_ref_matmul_bf16(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_ref_mm(b, i, 1);
}

/* Y[m,n] = X[m,n] + bias[n]. */
void rt_ref_bias_add(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0], *bias = b[1];
    float *y = b[2];
    for (int64_t m = 0; m < i[0]; m++)
        for (int64_t n = 0; n < i[1]; n++)
            y[m * i[1] + n] = x[m * i[1] + n] + bias[n];
}

/* db[n] (+)= sum_m dY[m,n]. */
void rt_ref_bias_grad(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *dy = b[0];
    float *db = b[1];
    for (int64_t n = 0; n < i[1]; n++) {
        double s = 0;
        for (int64_t m = 0; m < i[0]; m++)
            s += dy[m * i[1] + n];
        db[n] = (float)((i[2] ? db[n] : 0.0) + s);
    }
}

/* Y (+)= X (acc = 0 copies any 4-byte elements bit for bit). */
void rt_ref_copy(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    if (!i[1]) {
        memmove(b[1], b[0], (size_t)i[0] * 4);
        return;
    }
    const float *x = b[0];
    float *y = b[1];
    for (int64_t k = 0; k < i[0]; k++)
        y[k] += x[k];
}

/* rt_ref_<kernel> of the elementwise rows of rt_ew.h marked made: the
 * row's double expression, the sum with y (acc) in double, rounded once. */
#define RT_EW_REF(CODE, kernel, nsrc, racc, cpu, made, expr, ref)                              \
    RT_EW_IF_##made(                                                                           \
    void rt_ref_##kernel(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)        \
    {                                                                                          \
        const float *A = b[0], *C = nsrc == 2 ? (const float *)b[1] : NULL;                    \
        float *Y = b[nsrc];                                                                    \
        int acc = racc ? (int)i[1] : 0;                                                        \
        for (int64_t k = 0; k < i[0]; k++) {                                                   \
            const double a = A[k], c = nsrc == 2 ? C[k] : 0.0;                                 \
            (void)c;                                                                           \
            Y[k] = (float)((acc ? (double)Y[k] : 0.0) + (ref));                                \
        }                                                                                      \
    })
RT_EW_OPS(RT_EW_REF)
#undef RT_EW_REF

/* The value of elementwise op `op` (rt_ew.h) in double. */
static double rt_ref_ew_value(int64_t op, double a, double c)
{
    switch (op) {
#define RT_EW_CASE(CODE, kernel, nsrc, racc, cpu, made, expr, ref) case RT_EW_##CODE: return (ref);
    RT_EW_OPS(RT_EW_CASE)
#undef RT_EW_CASE
    default: RT_ASSERT(!"ew: unknown op");
    }
    return 0;
}

/* L[0] (+)= scale * sum (P - T)^2. */
void rt_ref_mse_loss(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *p = b[0], *t = b[1];
    float *l = b[2];
    double s = 0;
    for (int64_t k = 0; k < i[0]; k++) {
        double d = (double)p[k] - t[k];
        s += d * d;
    }
    l[0] = (float)((i[1] ? l[0] : 0.0) + f[0] * s);
}

/* dP (+)= 2 scale (P - T). */
void rt_ref_mse_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *p = b[0], *t = b[1];
    float *dp = b[2];
    for (int64_t k = 0; k < i[0]; k++)
        dp[k] = (float)((i[1] ? dp[k] : 0.0) + 2.0 * f[0] * ((double)p[k] - t[k]));
}

/* Check target t of row m is a class index; a bad one is a data bug. */
static void rt_ref_check_target(rt_ctx *ctx, int32_t t, int64_t m, int64_t V)
{
    if (t < 0 || t >= V)
        rt_fatal(ctx, 1, "xent: target %d of row %lld is outside [0, %lld)", t, (long long)m,
                 (long long)V);
}

/* log sum exp of row[0..n), stable (max subtracted), in double. */
static double rt_ref_logsumexp(const float *row, int64_t n)
{
    double mx = row[0];
    for (int64_t v = 1; v < n; v++)
        if (row[v] > mx)
            mx = row[v];
    double s = 0;
    for (int64_t v = 0; v < n; v++)
        s += exp(row[v] - mx);
    return mx + log(s);
}

/* xent_stats: per row and block of C, in double, rounded once. */
void rt_ref_xent_stats(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)f;
    const float *x = b[0];
    const int32_t *t = b[1];
    float *mx = b[2], *se = b[3], *pk = b[4];
    int64_t M = i[0], K = i[1], C = i[2], Vr = i[3], Vlo = i[4];
    if (Vr < 1)
        rt_fatal(ctx, 1, "xent: Vreal %lld below 1", (long long)Vr);
    for (int64_t m = 0; m < M; m++) {
        rt_ref_check_target(ctx, t[m], m, Vr);
        for (int64_t j = 0; j < K; j++) {
            const float *blk = x + (m * K + j) * C;
            int64_t g0 = Vlo + j * C;
            double bm = -INFINITY, s = 0, p = 0;
            for (int64_t c = 0; c < C && g0 + c < Vr; c++)
                if (blk[c] > bm) bm = blk[c];
            for (int64_t c = 0; c < C && g0 + c < Vr; c++) {
                s += exp((double)blk[c] - bm);
                if (g0 + c == t[m]) p = blk[c];
            }
            mx[m * K + j] = s > 0 ? (float)bm : 0.0f, se[m * K + j] = (float)s, pk[m * K + j] = (float)p;
        }
    }
}

/* log sum exp of a row from its blocks (those with a real column), in double. */
static double rt_ref_blocks_lse(const float *mx, const float *se, int64_t K)
{
    double top = -INFINITY, s = 0;
    for (int64_t j = 0; j < K; j++)
        if (se[j] > 0 && mx[j] > top) top = mx[j];
    for (int64_t j = 0; j < K; j++)
        if (se[j] > 0) s += (double)se[j] * exp((double)mx[j] - top);
    return top + log(s);
}

/* L[0] (+)= scale * sum_m (lse_m - sum_j btarget[m, j]). */
void rt_ref_xent_loss(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)ctx;
    const float *mx = b[0], *se = b[1], *pk = b[2];
    float *l = b[3];
    int64_t M = i[0], K = i[1];
    double s = 0;
    for (int64_t m = 0; m < M; m++) {
        s += rt_ref_blocks_lse(mx + m * K, se + m * K, K);
        for (int64_t j = 0; j < K; j++) s -= pk[m * K + j];
    }
    l[0] = (float)((i[2] ? l[0] : 0.0) + f[0] * s);
}

/* dlogits[m, v] (+)= scale * (exp(x - lse_m) - onehot) on the rank's real columns, 0 past Vreal. */
void rt_ref_xent_vp_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0], *mx = b[2], *se = b[3];
    const int32_t *t = b[1];
    float *dx = b[4];
    int64_t M = i[0], V = i[1], Vr = i[3], K = i[4], Vlo = i[5];
    if (Vr < 1)
        rt_fatal(ctx, 1, "xent: Vreal %lld below 1", (long long)Vr);
    for (int64_t m = 0; m < M; m++) {
        rt_ref_check_target(ctx, t[m], m, Vr);
        double lse = rt_ref_blocks_lse(mx + m * K, se + m * K, K);
        for (int64_t v = 0; v < V; v++) {
            int64_t g = Vlo + v;
            double gr = g < Vr ? f[0] * (exp(x[m * V + v] - lse) - (g == t[m] ? 1.0 : 0.0)) : 0.0;
            dx[m * V + v] = (float)((i[2] ? dx[m * V + v] : 0.0) + gr);
        }
    }
}

/* This step's lr multiplier and gradient multiplier (1 and 1 without a context). */
static void rt_ref_scales(const rt_ctx *ctx, double *lr_scale, double *gscale)
{
    *lr_scale = ctx ? ctx->lr_scale : 1.0;
    *gscale = ctx ? (double)ctx->grad_scale : 1.0;
}

/* With g = G * grad scale, lr' = lr * lr scale: P -= lr' * (g + wd * P). */
void rt_ref_sgd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    float *p = b[0];
    const float *g = b[1];
    double ls, gs;
    rt_ref_scales(ctx, &ls, &gs);
    double lr = (double)f[0] * ls;
    for (int64_t k = 0; k < i[0]; k++)
        p[k] = (float)(p[k] - lr * (g[k] * gs + (double)f[1] * p[k]));
}

/* AdamW (decoupled weight decay), t 1-based, on g = G * grad scale with
 * lr' = lr * lr scale. */
void rt_ref_adamw(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    float *p = b[0], *m = b[2], *v = b[3];
    const float *g = b[1];
    double ls, gs;
    rt_ref_scales(ctx, &ls, &gs);
    double lr = f[0] * ls, wd = f[1], b1 = f[2], b2 = f[3], eps = f[4];
    double c1 = 1.0 - pow(b1, (double)i[1]), c2 = 1.0 - pow(b2, (double)i[1]);
    for (int64_t k = 0; k < i[0]; k++) {
        double gk = g[k] * gs;
        double mk = b1 * m[k] + (1.0 - b1) * gk;
        double vk = b2 * v[k] + (1.0 - b2) * gk * gk;
        m[k] = (float)mk;
        v[k] = (float)vk;
        p[k] = (float)(p[k] - lr * ((mk / c1) / (sqrt(vk / c2) + eps) + wd * p[k]));
    }
}

/* S[0] (+)= sum G^2, in double, in index order, rounded once. */
void rt_ref_sumsq(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *g = b[0];
    float *s = b[1];
    double sum = 0.0;
    for (int64_t k = 0; k < i[0]; k++)
        sum += (double)g[k] * g[k];
    s[0] = (float)((i[1] ? (double)s[0] : 0.0) + sum);
}

/* norm = sqrt(S[0]); grad scale = min(1, max / (norm + 1e-6)) when max > 0, else 1. */
void rt_ref_gradclip(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    double norm = sqrt((double)((const float *)b[0])[0]);
    double scale = f[0] > 0 && f[0] / (norm + 1e-6) < 1.0 ? f[0] / (norm + 1e-6) : 1.0;
    if (ctx) {
        ctx->grad_norm = norm;
        ctx->grad_scale = (float)scale;
    }
}

void rt_ref_mark(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)b, (void)f;
    rt_trace_mark(ctx, i[0], i[1], i[2]);
}

/* Offset, in the full buffer of a box copy's index arithmetic, of element q
 * of the box (row-major); dim holds per dim: full extent, lo, hi. */
static int64_t ref_box_offset(const int64_t *dim, int nd, int64_t q)
{
    int64_t off = 0, stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
        int64_t ext = dim[3 * d + 2] - dim[3 * d + 1];
        off += (dim[3 * d + 1] + q % ext) * stride;
        q /= ext;
        stride *= dim[3 * d];
    }
    return off;
}

/* Copy the box (i: ndim, acc, per dim extent lo hi) between a full buffer
 * and a contiguous one: place = 0: dst (+)= src[box]; place = 1: dst[box] (+)= src. */
static void ref_box_copy(void *const *b, const int64_t *i, int place)
{
    int nd = (int)i[0];
    int acc = (int)i[1];
    const int64_t *dim = i + 2;
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= dim[3 * d + 2] - dim[3 * d + 1];
    for (int64_t q = 0; q < n; q++) {
        int64_t full = ref_box_offset(dim, nd, q);
        int64_t src = place ? q : full, dst = place ? full : q;
        if (acc)
            ((float *)b[1])[dst] += ((const float *)b[0])[src];
        else
            ((uint32_t *)b[1])[dst] = ((const uint32_t *)b[0])[src];
    }
}

/* dst (+)= src[lo:hi, ...] (dst contiguous). */
void rt_ref_slice(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    ref_box_copy(b, i, 0);
}

/* dst[lo:hi, ...] (+)= src (src contiguous). */
void rt_ref_place(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    ref_box_copy(b, i, 1);
}

/* Y[r] (+)= table[tok_r - Vlo] when Vlo <= tok_r < Vlo + Vext, else (+)= 0. */
void rt_ref_embedding(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const int32_t *tok = b[0];
    const float *tab = b[1];
    float *y = b[2];
    int64_t R = i[0], Vlo = i[1], Vext = i[2], C = i[3];
    for (int64_t r = 0; r < R; r++) {
        int64_t row = (int64_t)tok[r] - Vlo;
        int in = row >= 0 && row < Vext;
        for (int64_t c = 0; c < C; c++)
            y[r * C + c] = (i[4] ? y[r * C + c] : 0.0f) + (in ? tab[row * C + c] : 0.0f);
    }
}

/* dtable[v] (+)= sum of dY[r] over the rows r (in order) whose token is Vlo + v. */
void rt_ref_embedding_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const int32_t *tok = b[0];
    const float *dy = b[1];
    float *dt = b[2];
    int64_t R = i[0], Vlo = i[1], Vext = i[2], C = i[3];
    for (int64_t v = 0; v < Vext; v++)
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t r = 0; r < R; r++)
                if ((int64_t)tok[r] - Vlo == v)
                    s += dy[r * C + c];
            dt[v * C + c] = (float)((i[4] ? dt[v * C + c] : 0.0) + s);
        }
}

/* Per row: mean, biased variance, rstd = 1/sqrt(var + eps); Y = (X - mean) rstd w + bias. */
void rt_ref_layernorm(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0], *w = b[1], *bias = b[2];
    float *y = b[3], *mean = b[4], *rstd = b[5];
    int64_t R = i[0], C = i[1];
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * C;
        double mu = 0, var = 0;
        for (int64_t c = 0; c < C; c++)
            mu += xr[c];
        mu /= (double)C;
        for (int64_t c = 0; c < C; c++)
            var += (xr[c] - mu) * (xr[c] - mu);
        var /= (double)C;
        double rs = 1.0 / sqrt(var + f[0]);
        mean[r] = (float)mu;
        rstd[r] = (float)rs;
        for (int64_t c = 0; c < C; c++)
            y[r * C + c] = (float)((xr[c] - mu) * rs * w[c] + bias[c]);
    }
}

/* Y (+)= X rotated per head and position (rt_kernels.h: rope), in double. */
void rt_ref_rope(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0];
    float *y = b[1];
    int64_t B = i[0], T = i[1], H = i[2], D = i[3], half = D / 2;
    for (int64_t bt = 0; bt < B * T; bt++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t j = 0; j < half; j++) {
                double ang = (double)(bt % T) * pow((double)f[0], -2.0 * (double)j / (double)D);
                double c = cos(ang), s = i[4] ? -sin(ang) : sin(ang);
                int64_t k = (bt * H + h) * D + j;
                double x1 = x[k], x2 = x[k + half];
                float y1 = (float)((i[5] ? y[k] : 0.0) + x1 * c - x2 * s);
                float y2 = (float)((i[5] ? y[k + half] : 0.0) + x2 * c + x1 * s);
                y[k] = y1, y[k + half] = y2;
            }
}

/* rstd = 1/sqrt(mean_c(X^2) + eps), Y = X rstd w (in double). */
void rt_ref_rmsnorm(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0], *w = b[1];
    float *y = b[2], *rstd = b[3];
    int64_t R = i[0], C = i[1];
    for (int64_t r = 0; r < R && C > 0; r++) {
        const float *xr = x + r * C;
        double ms = 0;
        for (int64_t c = 0; c < C; c++)
            ms += (double)xr[c] * xr[c];
        double rs = 1.0 / sqrt(ms / (double)C + f[0]);
        rstd[r] = (float)rs;
        for (int64_t c = 0; c < C; c++)
            y[r * C + c] = (float)(xr[c] * rs * w[c]);
    }
}

/* With xhat = X rstd and g = dY w (the saved rstd): dX (+)= rstd (g - xhat
 * mean_c(g xhat)) (in double). */
void rt_ref_rmsnorm_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *dy = b[0], *x = b[1], *w = b[2], *rstd = b[3];
    float *dx = b[4];
    int64_t R = i[0], C = i[1];
    for (int64_t r = 0; r < R && C > 0; r++) {
        const float *dyr = dy + r * C, *xr = x + r * C;
        double rs = rstd[r], sgx = 0;
        for (int64_t c = 0; c < C; c++)
            sgx += (double)dyr[c] * w[c] * (xr[c] * rs);
        sgx /= (double)C;
        for (int64_t c = 0; c < C; c++)
            dx[r * C + c] = (float)((i[2] ? dx[r * C + c] : 0.0) + rs * ((double)dyr[c] * w[c] - xr[c] * rs * sgx));
    }
}

/* dw (+)= sum_r dY X rstd (in double). */
void rt_ref_rmsnorm_wgrad(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *dy = b[0], *x = b[1], *rstd = b[2];
    float *dw = b[3];
    int64_t R = i[0], C = i[1];
    for (int64_t c = 0; c < C; c++) {
        double s = 0;
        for (int64_t r = 0; r < R; r++)
            s += (double)dy[r * C + c] * (x[r * C + c] * rstd[r]);
        dw[c] = (float)((i[2] ? dw[c] : 0.0) + s);
    }
}

/* With xhat = (X - mean) rstd and g = dY w (the saved mean, rstd):
 * dX (+)= rstd (g - mean_c(g) - xhat mean_c(g xhat)). */
void rt_ref_layernorm_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *dy = b[0], *x = b[1], *w = b[2], *mean = b[3], *rstd = b[4];
    float *dx = b[5];
    int64_t R = i[0], C = i[1];
    for (int64_t r = 0; r < R; r++) {
        double sg = 0, sgx = 0;
        for (int64_t c = 0; c < C; c++) {
            double xhat = ((double)x[r * C + c] - mean[r]) * rstd[r];
            double g = (double)dy[r * C + c] * w[c];
            sg += g;
            sgx += g * xhat;
        }
        sg /= (double)C;
        sgx /= (double)C;
        for (int64_t c = 0; c < C; c++) {
            double xhat = ((double)x[r * C + c] - mean[r]) * rstd[r];
            double g = (double)dy[r * C + c] * w[c];
            double d = rstd[r] * (g - sg - xhat * sgx);
            dx[r * C + c] = (float)((i[2] ? dx[r * C + c] : 0.0) + d);
        }
    }
}

/* dw (+)= sum_r dY (X - mean) rstd; dbias (+)= sum_r dY. */
void rt_ref_layernorm_wgrad(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *dy = b[0], *x = b[1], *mean = b[2], *rstd = b[3];
    float *dw = b[4], *db = b[5];
    int64_t R = i[0], C = i[1];
    for (int64_t c = 0; c < C; c++) {
        double sw = 0, sb = 0;
        for (int64_t r = 0; r < R; r++) {
            sw += (double)dy[r * C + c] * (((double)x[r * C + c] - mean[r]) * rstd[r]);
            sb += dy[r * C + c];
        }
        dw[c] = (float)((i[2] ? dw[c] : 0.0) + sw);
        db[c] = (float)((i[2] ? db[c] : 0.0) + sb);
    }
}

/* Y = softmax of each row of X (max subtracted). */
void rt_ref_softmax(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0];
    float *y = b[1];
    int64_t R = i[0], N = i[1];
    for (int64_t r = 0; r < R; r++) {
        double lse = rt_ref_logsumexp(x + r * N, N);
        for (int64_t n = 0; n < N; n++)
            y[r * N + n] = (float)exp(x[r * N + n] - lse);
    }
}

/* dX (+)= Y (dY - sum(dY Y)), per row. */
void rt_ref_softmax_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *dy = b[0], *y = b[1];
    float *dx = b[2];
    int64_t R = i[0], N = i[1];
    for (int64_t r = 0; r < R; r++) {
        double s = 0;
        for (int64_t n = 0; n < N; n++)
            s += (double)dy[r * N + n] * y[r * N + n];
        for (int64_t n = 0; n < N; n++) {
            double d = (double)y[r * N + n] * (dy[r * N + n] - s);
            dx[r * N + n] = (float)((i[2] ? dx[r * N + n] : 0.0) + d);
        }
    }
}

/* The shape of an attention call: i = B, T, H, D, causal (, acc), Hkv, S; f[0] = scale. */
typedef struct rt_ref_att {
    int64_t B, T, H, D;   /* batch, queries, heads, head size */
    int causal;           /* 1: query t sees keys s <= t */
    double scale;         /* multiplies q . k */
    int64_t Hkv;          /* key/value heads: query head h reads head h / (H / Hkv) */
    int64_t S;            /* keys */
    int alibi;            /* 1: scores get -m |t - s|, m the slope of layer head hoff + h of Htot */
    int64_t hoff, Htot;
    const int32_t *lens;  /* attention_vl: row b sees keys s < lens[b]; NULL: all */
    const float *bias;    /* attention_ab: (H, T, S), added to the scores; NULL: none */
} rt_ref_att;

/* ALiBi's slope of head h of H, in double: with n the largest power of 2 <= H,
 * 2^(-8 (h+1) / n) for h < n, 2^(-8 (2 (h - n) + 1) / (2 n)) after. */
static double rt_ref_alibi_slope(int64_t h, int64_t H)
{
    int64_t n = 1;
    while (2 * n <= H) n *= 2;
    return h < n ? pow(2.0, -8.0 * (double)(h + 1) / (double)n) : pow(2.0, -4.0 * (double)(2 * (h - n) + 1) / (double)n);
}

/* The score of query t and key s in head (b, h): scale q_t . k_s (- m |t - s|)
 * (+ bias[h, t, s]). */
static double rt_ref_score(const rt_ref_att *a, const float *q, const float *k, int64_t b, int64_t t, int64_t s,
                           int64_t h);

/* Index of element (b, t, h, d) of a (B, T, H, D) tensor (q, Y, dY, dq). */
static int64_t rt_ref_bthd(const rt_ref_att *a, int64_t b, int64_t t, int64_t h, int64_t d)
{
    return ((b * a->T + t) * a->H + h) * a->D + d;
}

/* Index of element (b, s, g, d) of a (B, S, Hkv, D) tensor (k, v, dk, dv). */
static int64_t rt_ref_btgd(const rt_ref_att *a, int64_t b, int64_t s, int64_t g, int64_t d)
{
    return ((b * a->S + s) * a->Hkv + g) * a->D + d;
}

/* The key/value head of query head h. */
static int64_t rt_ref_kvh(const rt_ref_att *a, int64_t h)
{
    return h / (a->H / a->Hkv);
}

/* sum_d x[b, t, h, d] y[b, s, h, d] in double; ykv: y is (B, T, Hkv, D),
 * read at query head h's key/value head. */
static double rt_ref_rowdot(const rt_ref_att *a, const float *x, const float *y, int64_t b,
                            int64_t t, int64_t s, int64_t h, int ykv)
{
    double r = 0;
    for (int64_t d = 0; d < a->D; d++)
        r += (double)x[rt_ref_bthd(a, b, t, h, d)] *
             y[ykv ? rt_ref_btgd(a, b, s, rt_ref_kvh(a, h), d) : rt_ref_bthd(a, b, s, h, d)];
    return r;
}

static double rt_ref_score(const rt_ref_att *a, const float *q, const float *k, int64_t b, int64_t t, int64_t s,
                           int64_t h)
{
    double x = a->scale * rt_ref_rowdot(a, q, k, b, t, s, h, 1);
    if (a->alibi) x -= rt_ref_alibi_slope(a->hoff + h, a->Htot) * (double)(t > s ? t - s : s - t);
    if (a->bias) x += a->bias[(h * a->T + t) * a->S + s];
    return x;
}

/* Softmax weight P[t, s] of head (b, h): exp(score - lse_t), 0 when masked. */
static double rt_ref_prob(const rt_ref_att *a, const float *q, const float *k, double lse,
                          int64_t b, int64_t t, int64_t s, int64_t h)
{
    if ((a->causal && s > t) || (a->lens && s >= a->lens[b]) || isinf(lse))
        return 0.0;
    return exp(rt_ref_score(a, q, k, b, t, s, h) - lse);
}

/* Per (b, h): S = scale q k^T (s <= t when causal; s < lens[b] with lens),
 * lse = logsumexp of S's rows, Y = softmax(S) v (a row with no key: Y = 0,
 * lse = -inf). */
static void rt_ref_att_fwd(rt_ref_att a, const float *q, const float *k, const float *v, float *y, float *lse)
{
    for (int64_t bb = 0; bb < a.B; bb++)
        for (int64_t h = 0; h < a.H; h++)
            for (int64_t t = 0; t < a.T; t++) {
                int64_t ns = a.causal ? t + 1 : a.S;   /* visible keys */
                if (a.lens && a.lens[bb] < ns) ns = a.lens[bb];
                if (ns <= 0) {
                    lse[(bb * a.H + h) * a.T + t] = -INFINITY;
                    for (int64_t d = 0; d < a.D; d++) y[rt_ref_bthd(&a, bb, t, h, d)] = 0.0f;
                    continue;
                }
                double mx = -INFINITY, sum = 0;
                for (int64_t s = 0; s < ns; s++)
                    mx = fmax(mx, rt_ref_score(&a, q, k, bb, t, s, h));
                if (isinf(mx)) {   /* every key masked by a bias of -inf: as no key */
                    lse[(bb * a.H + h) * a.T + t] = -INFINITY;
                    for (int64_t d = 0; d < a.D; d++) y[rt_ref_bthd(&a, bb, t, h, d)] = 0.0f;
                    continue;
                }
                for (int64_t s = 0; s < ns; s++)
                    sum += exp(rt_ref_score(&a, q, k, bb, t, s, h) - mx);
                double l = mx + log(sum);
                lse[(bb * a.H + h) * a.T + t] = (float)l;
                for (int64_t d = 0; d < a.D; d++) {
                    double o = 0;
                    for (int64_t s = 0; s < ns; s++)
                        o += rt_ref_prob(&a, q, k, l, bb, t, s, h) * v[rt_ref_btgd(&a, bb, s, rt_ref_kvh(&a, h), d)];
                    y[rt_ref_bthd(&a, bb, t, h, d)] = (float)o;
                }
            }
}

/* The shape of an attention kernel's ints (bwd: attention_bwd's, with acc
 * and P) and scale, with key lengths or a bias (or neither). */
static rt_ref_att rt_ref_att_of(const int64_t *i, const float *f, int bwd, const int32_t *lens, const float *bias)
{
    return (rt_ref_att){i[0], i[1], i[2], i[3], (int)i[4], f[0], i[5 + bwd], i[6 + bwd], (int)i[7 + 2 * bwd],
                        i[8 + 2 * bwd], i[9 + 2 * bwd], lens, bias};
}

/* dS[t, s] = P[t, s] (dP[t, s] - Drow[t]) with dP = dY_t . v_s and Drow = dY_t . Y_t. */
static double rt_ref_dscore(const rt_ref_att *a, void *const *b, int64_t bb, int64_t t,
                            int64_t s, int64_t h)
{
    const float *dy = b[0], *q = b[1], *k = b[2], *v = b[3], *y = b[4], *lse = b[5];
    double p = rt_ref_prob(a, q, k, lse[(bb * a->H + h) * a->T + t], bb, t, s, h);
    if (p == 0.0)
        return 0.0;
    return p * (rt_ref_rowdot(a, dy, v, bb, t, s, h, 1) - rt_ref_rowdot(a, dy, y, bb, t, t, h, 0));
}

/* Gradients of attention with P = exp(scale q k^T - lse) (masked):
 * dv = P^T dY, dq = scale dS k, dk = scale dS^T q; dk and dv of a key/value
 * head summed over its query heads. */
static void rt_ref_att_bwd(rt_ref_att a, void *const *b, int acc)
{
    const float *dy = b[0], *q = b[1], *k = b[2], *lse = b[5];
    float *dq = b[6], *dk = b[7], *dv = b[8];
    int64_t r = a.H / a.Hkv;
    for (int64_t bb = 0; bb < a.B; bb++)
        for (int64_t h = 0; h < a.H; h++)
            for (int64_t t = 0; t < a.T; t++)   /* t: this row's position */
                for (int64_t d = 0; d < a.D; d++) {
                    double gq = 0;
                    for (int64_t s = 0; s < a.S; s++)   /* s: a key */
                        gq += rt_ref_dscore(&a, b, bb, t, s, h) * k[rt_ref_btgd(&a, bb, s, rt_ref_kvh(&a, h), d)];
                    int64_t o = rt_ref_bthd(&a, bb, t, h, d);
                    dq[o] = (float)((acc ? dq[o] : 0.0) + a.scale * gq);
                }
    for (int64_t bb = 0; bb < a.B; bb++)
        for (int64_t g = 0; g < a.Hkv; g++)
            for (int64_t t = 0; t < a.S; t++)   /* t: a key */
                for (int64_t d = 0; d < a.D; d++) {
                    double gk = 0, gv = 0;
                    for (int64_t h = g * r; h < (g + 1) * r; h++)   /* the query heads of head g */
                        for (int64_t s = 0; s < a.T; s++) {   /* s: a query */
                            gk += rt_ref_dscore(&a, b, bb, s, t, h) * q[rt_ref_bthd(&a, bb, s, h, d)];
                            gv += rt_ref_prob(&a, q, k, lse[(bb * a.H + h) * a.T + s], bb, s, t, h) *
                                  dy[rt_ref_bthd(&a, bb, s, h, d)];
                        }
                    int64_t o = rt_ref_btgd(&a, bb, t, g, d);
                    dk[o] = (float)((acc ? dk[o] : 0.0) + a.scale * gk);
                    dv[o] = (float)((acc ? dv[o] : 0.0) + gv);
                }
}

/* attention (bwd = 0) or attention_bwd (1) on kernel buffers b, where
 * buffer extra (-1: none) is the key lengths (bias = 0) or the bias (1). */
static void rt_ref_att_run(rt_ctx *ctx, const char *what, void *const *b, const int64_t *i, const float *f, int bwd,
                           int extra, int bias)
{
    void *bb[9];
    for (int k = 0, m = 0; k < (bwd ? 9 : 5); k++, m++) bb[k] = b[m == extra ? ++m : m];
    const int32_t *lens = extra >= 0 && !bias ? b[extra] : NULL;
    if (lens) rt_att_check_lens(ctx, what, lens, i[0]);
    rt_ref_att a = rt_ref_att_of(i, f, bwd, lens, extra >= 0 && bias ? b[extra] : NULL);
    if (bwd)
        rt_ref_att_bwd(a, bb, (int)i[5]);
    else
        rt_ref_att_fwd(a, bb[0], bb[1], bb[2], bb[3], bb[4]);
}

void rt_ref_attention(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_ref_att_run(ctx, "attention", b, i, f, 0, -1, 0);
}

void rt_ref_attention_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_ref_att_run(ctx, "attention_bwd", b, i, f, 1, -1, 0);
}

/* b: q, k, v, lens, Y, lse and dY, q, k, v, Y, lse, lens, dq, dk, dv. */
void rt_ref_attention_vl(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_ref_att_run(ctx, "attention_vl", b, i, f, 0, 3, 0);
}

void rt_ref_attention_vl_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_ref_att_run(ctx, "attention_vl_bwd", b, i, f, 1, 6, 0);
}

/* b: q, k, v, bias (H, T, S), Y, lse and dY, q, k, v, Y, lse, bias, dq, dk, dv. */
void rt_ref_attention_ab(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_ref_att_run(ctx, "attention_ab", b, i, f, 0, 3, 1);
}

void rt_ref_attention_ab_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_ref_att_run(ctx, "attention_ab_bwd", b, i, f, 1, 6, 1);
}

/* The bias's gradient: dbias[h, t, s] (+)= sum_b dS[b, h, t, s] (unscaled). */
void rt_ref_attention_dbias(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_ref_att a = rt_ref_att_of(i, f, 1, NULL, b[6]);
    float *db = b[7];
    for (int64_t h = 0; h < a.H; h++)
        for (int64_t t = 0; t < a.T; t++)
            for (int64_t s = 0; s < a.S; s++) {
                double g = 0;
                for (int64_t bb = 0; bb < a.B; bb++)
                    g += rt_ref_dscore(&a, b, bb, t, s, h);
                int64_t o = (h * a.T + t) * a.S + s;
                db[o] = (float)((i[5] ? db[o] : 0.0) + g);
            }
}

/* One ew operand of element k: a register or a buffer element. */
static float rt_ref_ew_get(void *const *b, const int64_t *i, const float *reg, int64_t x,
                           int64_t k)
{
    if (x < RT_EW_MEM)
        return reg[x];
    if (x < RT_EW_ROW)
        return ((const float *)b[x - RT_EW_MEM])[k];
    return ((const float *)b[x - RT_EW_ROW])[k % i[2]];
}

/* The fused chain, element by element, each op as its unfused reference. */
void rt_ref_ew(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const int64_t *ops = i + RT_EW_HEAD;
    for (int64_t k = 0; k < i[1]; k++) {
        float reg[RT_EW_NREG] = {0};
        for (int64_t o = 0; o < i[3]; o++) {
            int64_t op = ops[4 * o], dst = ops[4 * o + 1];
            float x = rt_ref_ew_get(b, i, reg, ops[4 * o + 2], k), v;
            float c = rt_ew_nsrc(op) == 2
                          ? rt_ref_ew_get(b, i, reg, ops[4 * o + 3], k)
                          : 0.0f;
            v = (float)rt_ref_ew_value(op, x, c);
            if (dst < RT_EW_MEM)
                reg[dst] = v;
            else if (dst < RT_EW_ROW)
                ((float *)b[dst - RT_EW_MEM])[k] = v;
            else
                ((float *)b[dst - RT_EW_ACC])[k] += v;
        }
    }
}

/* Custom ops have no reference here: their kernel is the user's
 * (docs/custom-ops.md), and check-op tests it. */
void rt_ref_custom(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)b, (void)f;
    rt_fatal(ctx, 1, "internal error: no reference kernel for custom op %lld", (long long)i[0]);
}

/* Y[r, b, a] (+)= X[r, a, b]. */
void rt_ref_transpose(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)ctx, (void)f;
    const float *x = b[0];
    float *y = b[1];
    int64_t R = i[0], A = i[1], B = i[2];
    for (int64_t r = 0; r < R; r++)
        for (int64_t aa = 0; aa < A; aa++)
            for (int64_t bb = 0; bb < B; bb++) {
                int64_t o = (r * B + bb) * A + aa;
                y[o] = i[3] ? y[o] + x[(r * A + aa) * B + bb] : x[(r * A + aa) * B + bb];
            }
}

/* Y[h, t, s] = table[bucket(s - t), h]. */
void rt_ref_relpos_bias(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)f;
    const float *tab = b[0];
    float *y = b[1];
    int64_t T = i[0], S = i[1], H = i[2];
    free(rt_relpos_diagonals(ctx, i));   /* (the checks) */
    for (int64_t h = 0; h < H; h++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t s = 0; s < S; s++)
                y[(h * T + t) * S + s] = tab[rt_relpos_bucket(s - t, i[3], (int)i[4], i[5]) * H + h];
}

/* dtable[b, h] (+)= the sum of dY[h, t, s] over bucket b's (t, s), in
 * double, diagonal by diagonal. */
void rt_ref_relpos_bias_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)f;
    const float *dy = b[0];
    float *dtab = b[1];
    int64_t T = i[0], S = i[1], H = i[2], NB = i[3];
    free(rt_relpos_diagonals(ctx, i));
    for (int64_t h = 0; h < H; h++)
        for (int64_t k = 0; k < NB; k++) {
            double s = 0;
            for (int64_t d = -(T - 1); d < S; d++) {
                if (rt_relpos_bucket(d, NB, (int)i[4], i[5]) != k) continue;
                for (int64_t t = d < 0 ? -d : 0; t < T && t + d < S; t++) s += dy[(h * T + t) * S + t + d];
            }
            dtab[k * H + h] = i[6] ? (float)(dtab[k * H + h] + s) : (float)s;
        }
}

/* Y[r, c] (+)= scale sum_t X[r, t, c], in double. */
void rt_ref_mean_mid(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0];
    float *y = b[1];
    int64_t R = i[0], T = i[1], C = i[2];
    for (int64_t r = 0; r < R; r++)
        for (int64_t c = 0; c < C; c++) {
            double s = 0;
            for (int64_t t = 0; t < T; t++)
                s += x[(r * T + t) * C + c];
            y[r * C + c] = (float)((i[3] ? y[r * C + c] : 0.0) + (double)f[0] * s);
        }
}

/* dX[r, t, c] (+)= scale dY[r, c]. */
void rt_ref_mean_mid_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *dy = b[0];
    float *dx = b[1];
    int64_t R = i[0], T = i[1], C = i[2];
    for (int64_t r = 0; r < R; r++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++) {
                int64_t o = (r * T + t) * C + c;
                dx[o] = (float)((i[3] ? dx[o] : 0.0) + (double)f[0] * dy[r * C + c]);
            }
}

/* cvt_f32: bf16 (uint16 halves) to f32, one value at a time. */
void rt_ref_cvt_f32(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const uint16_t *x = b[0];
    float *y = b[1];
    for (int64_t k = 0; k < i[0]; k++) {
        uint32_t u = (uint32_t)x[k] << 16;
        memcpy(&y[k], &u, 4);
    }
}

/* cvt_bf16: f32 to bf16 through rt_bf16_round (rt_lowp.h), the top half kept. */
void rt_ref_cvt_bf16(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0];
    uint16_t *y = b[1];
    for (int64_t k = 0; k < i[0]; k++) {
        float r = rt_bf16_round(x[k]);
        uint32_t u;
        memcpy(&u, &r, 4);
        y[k] = (uint16_t)(u >> 16);
    }
    if (i[0] & 1) y[i[0]] = 0;
}
