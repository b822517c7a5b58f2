/* rows.c -- the row-wise kernels: cross-entropy (in vocabulary blocks),
 * softmax, layernorm, embedding.
 *
 * Each works on the rows of a (R, C) matrix and is cut across the pool's
 * threads by rows (forward and input gradients) or by columns (weight
 * gradients: layernorm_wgrad and embedding_bwd sum over rows, so a thread
 * owns a range of columns and sums every row of it in order; their results
 * do not depend on the number of threads).  xent_loss sums its rows on one
 * thread, in row order (rows x blocks terms: cheap), so the loss does not
 * depend on the thread count either.
 *
 * Row reductions keep 16 partial sums (one per lane of the widest vector;
 * the compiler vectorises the lane loop at any ISA), so results do not
 * depend on the ISA either; the exp-based kernels use vmath.c.
 */
#include <math.h>
#include <string.h>

#include "cpu/rt_cpu.h"

#define RW_LANES 16   /* partial sums per row reduction */

/* sum_k x[k] in float with RW_LANES partial sums. */
static float rw_sum(const float *restrict x, int64_t n)
{
    float acc[RW_LANES] = {0};
    int64_t k = 0;
    for (; k + RW_LANES <= n; k += RW_LANES)
        for (int j = 0; j < RW_LANES; j++)
            acc[j] += x[k + j];
    for (int j = 0; k + j < n; j++)
        acc[j] += x[k + j];
    double s = 0;
    for (int j = 0; j < RW_LANES; j++)
        s += acc[j];
    return (float)s;
}

/* sum_k x[k] y[k] in float with RW_LANES partial sums. */
static float rw_dot(const float *restrict x, const float *restrict y, int64_t n)
{
    float acc[RW_LANES] = {0};
    int64_t k = 0;
    for (; k + RW_LANES <= n; k += RW_LANES)
        for (int j = 0; j < RW_LANES; j++)
            acc[j] += x[k + j] * y[k + j];
    for (int j = 0; k + j < n; j++)
        acc[j] += x[k + j] * y[k + j];
    double s = 0;
    for (int j = 0; j < RW_LANES; j++)
        s += acc[j];
    return (float)s;
}

/* sum_k (x[k] - m)^2 in float with RW_LANES partial sums. */
static float rw_sumsq_dev(const float *restrict x, float m, int64_t n)
{
    float acc[RW_LANES] = {0};
    int64_t k = 0;
    for (; k + RW_LANES <= n; k += RW_LANES)
        for (int j = 0; j < RW_LANES; j++)
            acc[j] += (x[k + j] - m) * (x[k + j] - m);
    for (int j = 0; k + j < n; j++)
        acc[j] += (x[k + j] - m) * (x[k + j] - m);
    double s = 0;
    for (int j = 0; j < RW_LANES; j++)
        s += acc[j];
    return (float)s;
}

/* Rows per thread at least, for rows of n floats: about RT_EW_GRAIN floats. */
static int64_t rw_grain(int64_t n)
{
    return RT_EW_GRAIN / (n > 0 ? n : 1) + 1;
}

/* ---- cross-entropy in vocabulary blocks: xent_stats, xent_loss, xent_vp_bwd */

/* Every target must be a real class: a bad one is a data bug (checked on
 * the calling thread, before any work is split). */
static void rw_check_targets(rt_ctx *ctx, const int32_t *t, int64_t M, int64_t Vr)
{
    for (int64_t m = 0; m < M; m++)
        if (t[m] < 0 || t[m] >= Vr)
            rt_fatal(ctx, 1, "xent: target %d of row %lld is outside [0, %lld)", t[m],
                     (long long)m, (long long)Vr);
}

/* Stats of rows [lo, hi): per block of C columns, max, sum of exp and the target's logit. */
static void rw_xstats_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    (void)t;
    const rt_kargs *a = p;
    const float *lg = a->b[0];
    const int32_t *tg = a->b[1];
    float *mx = a->b[2], *se = a->b[3], *pk = a->b[4];
    int64_t K = a->i[1], C = a->i[2], Vr = a->i[3], Vlo = a->i[4];
    for (int64_t m = lo; m < hi; m++)
        for (int64_t j = 0; j < K; j++) {
            const float *blk = lg + (m * K + j) * C;
            int64_t g0 = Vlo + j * C, n = Vr - g0 < C ? Vr - g0 : C;
            float bm = 0;   /* nothing real: 0, with sum 0 */
            double bs = 0;
            if (n > 0) {
                bm = rt_vmax(blk, n);
                bs = rt_vexp_sum(blk, bm, n);
            }
            mx[m * K + j] = bm;
            se[m * K + j] = (float)bs;
            pk[m * K + j] = tg[m] >= g0 && tg[m] < g0 + n ? blk[tg[m] - g0] : 0.0f;
        }
}

void rt_k_xent_stats(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    if (i[3] < 1)
        rt_fatal(ctx, 1, "xent: Vreal %lld below 1", (long long)i[3]);
    rw_check_targets(ctx, b[1], i[0], i[3]);
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rw_xstats_rows, &a, i[0], 1, rw_grain(i[1] * i[2]));
}

/* log sum exp of a row from its K blocks' max and sum of exp (blocks with
 * nothing real have sum 0); *top: the largest max. */
static double rw_blocks_lse(const float *mx, const float *se, int64_t K, float *top)
{
    float x = -INFINITY;
    for (int64_t j = 0; j < K; j++)
        if (se[j] > 0 && mx[j] > x)
            x = mx[j];
    double s = 0;
    for (int64_t j = 0; j < K; j++)
        if (se[j] > 0)
            s += (double)se[j] * exp((double)mx[j] - (double)x);
    *top = x;
    return (double)x + log(s);
}

void rt_k_xent_loss(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)ctx;
    const float *mx = b[0], *se = b[1], *pk = b[2];
    int64_t M = i[0], K = i[1];
    double s = 0;   /* rows * blocks terms: one thread, in row order (any thread count gives the same) */
    for (int64_t m = 0; m < M; m++) {
        float top;
        double picked = 0;
        for (int64_t j = 0; j < K; j++)
            picked += pk[m * K + j];
        s += rw_blocks_lse(mx + m * K, se + m * K, K, &top) - picked;
    }
    float *l = b[3];
    l[0] = (float)((i[2] ? l[0] : 0.0) + f[0] * s);
}

/* xent_vp_bwd on rows [lo, hi). */
static void rw_xvp_bwd_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    (void)t;
    const rt_kargs *a = p;
    const float *lg = a->b[0], *mx = a->b[2], *se = a->b[3];
    const int32_t *tg = a->b[1];
    float *dx = a->b[4];
    int64_t V = a->i[1], Vr = a->i[3], K = a->i[4], Vlo = a->i[5];
    int acc = (int)a->i[2];
    float scale = a->f[0];
    int64_t n = Vr - Vlo < V ? Vr - Vlo : V;   /* the rank's real columns */
    if (n < 0) n = 0;
    for (int64_t m = lo; m < hi; m++) {
        const float *row = lg + m * V;
        float *d = dx + m * V, top;
        double lse = rw_blocks_lse(mx + m * K, se + m * K, K, &top);
        /* softmax = exp((row - top) - shift), shift = lse - top >= 0 */
        if (n > 0) rt_vexp_scale(row, top, (float)(lse - top), scale, d, n, acc);
        if (tg[m] >= Vlo && tg[m] < Vlo + n) d[tg[m] - Vlo] -= scale;
        if (!acc && n < V)
            memset(d + n, 0, (size_t)(V - n) * 4);   /* padding columns: gradient 0 */
    }
}

void rt_k_xent_vp_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    if (i[3] < 1)
        rt_fatal(ctx, 1, "xent: Vreal %lld below 1", (long long)i[3]);
    rw_check_targets(ctx, b[1], i[0], i[3]);
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rw_xvp_bwd_rows, &a, i[0], 1, rw_grain(i[1]));
}

/* ---- softmax */

/* softmax on rows [lo, hi). */
static void rw_softmax_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const float *x = a->b[0];
    float *y = a->b[1];
    int64_t N = a->i[1];
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * N;
        float *yr = y + r * N;
        float mx = rt_vmax(xr, N);
        float inv = (float)(1.0 / rt_vexp_affine(xr, 1.0f, mx, yr, N));
        for (int64_t n = 0; n < N; n++)
            yr[n] *= inv;
    }
}

void rt_k_softmax(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    if (i[1] <= 0)
        return;
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rw_softmax_rows, &a, i[0], 1, rw_grain(i[1]));
}

/* softmax_bwd on rows [lo, hi). */
static void rw_softmax_bwd_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const float *dy = a->b[0], *y = a->b[1];
    float *dx = a->b[2];
    int64_t N = a->i[1];
    for (int64_t r = lo; r < hi; r++) {
        const float *restrict dyr = dy + r * N, *restrict yr = y + r * N;
        float *restrict dxr = dx + r * N;
        float s = rw_dot(dyr, yr, N);
        if (a->i[2])
            for (int64_t n = 0; n < N; n++)
                dxr[n] += yr[n] * (dyr[n] - s);
        else
            for (int64_t n = 0; n < N; n++)
                dxr[n] = yr[n] * (dyr[n] - s);
    }
}

void rt_k_softmax_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rw_softmax_bwd_rows, &a, i[0], 1, rw_grain(i[1]));
}

/* ---- layernorm */

/* layernorm on rows [lo, hi): two passes (mean, then the centred sum of squares). */
static void rw_layernorm_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const float *x = a->b[0], *restrict w = a->b[1], *restrict bias = a->b[2];
    float *y = a->b[3], *mean = a->b[4], *rstd = a->b[5];
    int64_t C = a->i[1];
    for (int64_t r = lo; r < hi; r++) {
        const float *restrict xr = x + r * C;
        float *restrict yr = y + r * C;
        float mu = rw_sum(xr, C) / (float)C;
        float var = rw_sumsq_dev(xr, mu, C) / (float)C;
        float rs = 1.0f / sqrtf(var + a->f[0]);
        mean[r] = mu;
        rstd[r] = rs;
        for (int64_t c = 0; c < C; c++)
            yr[c] = (xr[c] - mu) * rs * w[c] + bias[c];
    }
}

void rt_k_layernorm(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    if (i[1] <= 0)
        return;
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rw_layernorm_rows, &a, i[0], 1, rw_grain(i[1]));
}

/* layernorm_bwd on rows [lo, hi): with xhat = (x - mean) rstd and g = dy w,
 * dx = rstd (g - mean(g) - xhat mean(g xhat)). */
static void rw_layernorm_bwd_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const float *dy = a->b[0], *x = a->b[1], *restrict w = a->b[2];
    const float *mean = a->b[3], *rstd = a->b[4];
    float *dx = a->b[5];
    int64_t C = a->i[1];
    for (int64_t r = lo; r < hi; r++) {
        const float *restrict dyr = dy + r * C, *restrict xr = x + r * C;
        float *restrict dxr = dx + r * C;
        float mu = mean[r], rs = rstd[r];
        float ag[RW_LANES] = {0}, agx[RW_LANES] = {0};   /* sum g, sum g xhat */
        int64_t c = 0;
        for (; c + RW_LANES <= C; c += RW_LANES)
            for (int j = 0; j < RW_LANES; j++) {
                float g = dyr[c + j] * w[c + j];
                ag[j] += g;
                agx[j] += g * ((xr[c + j] - mu) * rs);
            }
        for (int j = 0; c + j < C; j++) {
            float g = dyr[c + j] * w[c + j];
            ag[j] += g;
            agx[j] += g * ((xr[c + j] - mu) * rs);
        }
        double sg = 0, sgx = 0;
        for (int j = 0; j < RW_LANES; j++) {
            sg += ag[j];
            sgx += agx[j];
        }
        float mg = (float)(sg / (double)C), mgx = (float)(sgx / (double)C);
        if (a->i[2])
            for (c = 0; c < C; c++)
                dxr[c] += rs * (dyr[c] * w[c] - mg - (xr[c] - mu) * rs * mgx);
        else
            for (c = 0; c < C; c++)
                dxr[c] = rs * (dyr[c] * w[c] - mg - (xr[c] - mu) * rs * mgx);
    }
}

void rt_k_layernorm_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    if (i[1] <= 0)
        return;
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rw_layernorm_bwd_rows, &a, i[0], 1, rw_grain(i[1]));
}

/* layernorm_wgrad on columns [lo, hi), every row in order. */
static void rw_layernorm_wgrad_cols(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const float *dy = a->b[0], *x = a->b[1], *mean = a->b[2], *rstd = a->b[3];
    float *restrict dw = a->b[4], *restrict db = a->b[5];
    int64_t R = a->i[0], C = a->i[1];
    if (!a->i[2]) {
        memset(dw + lo, 0, (size_t)(hi - lo) * 4);
        memset(db + lo, 0, (size_t)(hi - lo) * 4);
    }
    for (int64_t r = 0; r < R; r++) {
        const float *restrict dyr = dy + r * C, *restrict xr = x + r * C;
        float mu = mean[r], rs = rstd[r];
        for (int64_t c = lo; c < hi; c++) {
            dw[c] += dyr[c] * ((xr[c] - mu) * rs);
            db[c] += dyr[c];
        }
    }
}

void rt_k_layernorm_wgrad(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rw_layernorm_wgrad_cols, &a, i[1], RT_EW_UNIT, rw_grain(i[0]));
}

/* ---- rmsnorm */

/* rmsnorm on rows [lo, hi). */
static void rw_rmsnorm_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const float *x = a->b[0], *restrict w = a->b[1];
    float *y = a->b[2], *rstd = a->b[3];
    int64_t C = a->i[1];
    for (int64_t r = lo; r < hi; r++) {
        const float *restrict xr = x + r * C;
        float *restrict yr = y + r * C;
        float rs = 1.0f / sqrtf(rw_dot(xr, xr, C) / (float)C + a->f[0]);
        rstd[r] = rs;
        for (int64_t c = 0; c < C; c++)
            yr[c] = xr[c] * rs * w[c];
    }
}

void rt_k_rmsnorm(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    if (i[1] <= 0)
        return;
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rw_rmsnorm_rows, &a, i[0], 1, rw_grain(i[1]));
}

/* rmsnorm_bwd on rows [lo, hi): with xhat = x rstd and g = dy w,
 * dx = rstd (g - xhat mean(g xhat)). */
static void rw_rmsnorm_bwd_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const float *dy = a->b[0], *x = a->b[1], *restrict w = a->b[2], *rstd = a->b[3];
    float *dx = a->b[4];
    int64_t C = a->i[1];
    for (int64_t r = lo; r < hi; r++) {
        const float *restrict dyr = dy + r * C, *restrict xr = x + r * C;
        float *restrict dxr = dx + r * C;
        float rs = rstd[r], agx[RW_LANES] = {0};   /* sum g xhat */
        int64_t c = 0;
        for (; c + RW_LANES <= C; c += RW_LANES)
            for (int j = 0; j < RW_LANES; j++)
                agx[j] += dyr[c + j] * w[c + j] * (xr[c + j] * rs);
        for (int j = 0; c + j < C; j++)
            agx[j] += dyr[c + j] * w[c + j] * (xr[c + j] * rs);
        double sgx = 0;
        for (int j = 0; j < RW_LANES; j++)
            sgx += agx[j];
        float mgx = (float)(sgx / (double)C);
        if (a->i[2])
            for (c = 0; c < C; c++)
                dxr[c] += rs * (dyr[c] * w[c] - xr[c] * rs * mgx);
        else
            for (c = 0; c < C; c++)
                dxr[c] = rs * (dyr[c] * w[c] - xr[c] * rs * mgx);
    }
}

void rt_k_rmsnorm_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    if (i[1] <= 0)
        return;
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rw_rmsnorm_bwd_rows, &a, i[0], 1, rw_grain(i[1]));
}

/* rmsnorm_wgrad on columns [lo, hi), every row in order. */
static void rw_rmsnorm_wgrad_cols(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const float *dy = a->b[0], *x = a->b[1], *rstd = a->b[2];
    float *restrict dw = a->b[3];
    int64_t R = a->i[0], C = a->i[1];
    if (!a->i[2]) memset(dw + lo, 0, (size_t)(hi - lo) * 4);
    for (int64_t r = 0; r < R; r++) {
        const float *restrict dyr = dy + r * C, *restrict xr = x + r * C;
        float rs = rstd[r];
        for (int64_t c = lo; c < hi; c++)
            dw[c] += dyr[c] * (xr[c] * rs);
    }
}

void rt_k_rmsnorm_wgrad(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rw_rmsnorm_wgrad_cols, &a, i[1], RT_EW_UNIT, rw_grain(i[0]));
}

/* ---- rope */

/* rope on rows [lo, hi) of B T (each T x ... row: H heads of D): the angle
 * of pair j at position t is t theta^(-2j/D), in double, its cos and sin
 * rounded to float (the CUDA kernel the same). */
static void rw_rope_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const float *x = a->b[0];
    float *y = a->b[1];
    int64_t T = a->i[1], H = a->i[2], D = a->i[3], half = D / 2;
    int inv = (int)a->i[4], acc = (int)a->i[5];
    double theta = a->f[0];
    for (int64_t r = lo; r < hi; r++) {
        int64_t pos = r % T;
        for (int64_t j = 0; j < half; j++) {
            double ang = (double)pos * pow(theta, -2.0 * (double)j / (double)D);
            float c = (float)cos(ang), s = (float)sin(ang);
            if (inv) s = -s;
            for (int64_t h = 0; h < H; h++) {
                int64_t k = (r * H + h) * D + j;
                float x1 = x[k], x2 = x[k + half];
                float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
                if (acc) y[k] += y1, y[k + half] += y2;
                else y[k] = y1, y[k + half] = y2;
            }
        }
    }
}

void rt_k_rope(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    if (i[3] <= 0)
        return;
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rw_rope_rows, &a, i[0] * i[1], 1, rw_grain(i[2] * i[3]));
}

/* ---- embedding */

/* embedding on rows [lo, hi): a row of the table, or 0 for out-of-shard tokens. */
static void rw_embedding_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const int32_t *tok = a->b[0];
    const float *tab = a->b[1];
    float *y = a->b[2];
    int64_t Vlo = a->i[1], Vext = a->i[2], C = a->i[3];
    for (int64_t r = lo; r < hi; r++) {
        int64_t row = (int64_t)tok[r] - Vlo;
        float *restrict yr = y + r * C;
        if (row < 0 || row >= Vext) {
            if (!a->i[4])
                memset(yr, 0, (size_t)C * 4);
        } else if (!a->i[4]) {
            memcpy(yr, tab + row * C, (size_t)C * 4);
        } else {
            const float *restrict tr = tab + row * C;
            for (int64_t c = 0; c < C; c++)
                yr[c] += tr[c];
        }
    }
}

void rt_k_embedding(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rw_embedding_rows, &a, i[0], 1, rw_grain(i[3]));
}

/* embedding_bwd, zeroing: table rows [lo, hi). */
static void rw_embedding_zero(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    int64_t C = a->i[3];
    rt_zero_words((float *)a->b[2] + lo * C, (hi - lo) * C, a->i[2] * C >= RT_ZERO_STREAM_MIN);
}

/* embedding_bwd on columns [lo, hi): rows of dY added in order r = 0, 1, ... */
static void rw_embedding_bwd_cols(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const int32_t *tok = a->b[0];
    const float *dy = a->b[1];
    float *dt = a->b[2];
    int64_t R = a->i[0], Vlo = a->i[1], Vext = a->i[2], C = a->i[3];
    for (int64_t r = 0; r < R; r++) {
        int64_t row = (int64_t)tok[r] - Vlo;
        if (row < 0 || row >= Vext)
            continue;
        const float *restrict s = dy + r * C;
        float *restrict d = dt + row * C;
        for (int64_t c = lo; c < hi; c++)
            d[c] += s[c];
    }
}

void rt_k_embedding_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_kargs a = {ctx, b, i, f};
    if (!i[4])
        rt_parallel_for(rw_embedding_zero, &a, i[2], 1, rw_grain(i[3]));
    rt_parallel_for(rw_embedding_bwd_cols, &a, i[3], RT_EW_UNIT, rw_grain(i[0]));
}
