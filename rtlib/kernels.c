/* kernels.c -- the rt_k_* entry points that generated rank programs call.
 *
 * Each is a thin wrapper: it unpacks the argument arrays (conventions in
 * rt_kernels.h) and runs the fast version of the kernel.  Fast versions work
 * in float with loops the compiler vectorises (restrict pointers, no
 * loop-carried dependences except explicit reductions); matmul (matmul.c)
 * and the exp-based kernels (vmath.c: gelu, the softmax of xent) have
 * explicit SIMD code; the scalar references are in kernels_ref.c.
 */
#include <math.h>
#include <string.h>

#include "rt_internal.h"

void rt_k_init_param(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_init_param_box(ctx, b[0], i[0]);
}

void rt_k_zero(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    memset(b[0], 0, (size_t)i[0] * 4);
}

void rt_k_data(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_data_box(ctx, b[0], i);
}

void rt_k_matmul(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_matmul(i[0], i[1], i[2], b[0], (int)i[3], b[1], (int)i[4], b[2], (int)i[5]);
}

void rt_k_bias_add(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0];
    const float *restrict bias = b[1];
    float *y = b[2];   /* may be x: rows are read before they are written */
    int64_t M = i[0], N = i[1];
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * N;
        float *yr = y + m * N;
        for (int64_t n = 0; n < N; n++)
            yr[n] = xr[n] + bias[n];
    }
}

void rt_k_bias_grad(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *restrict dy = b[0];
    float *restrict db = b[1];
    int64_t M = i[0], N = i[1];
    if (!i[2])
        memset(db, 0, (size_t)N * 4);
    for (int64_t m = 0; m < M; m++) {   /* row by row: unit stride, vectorised over n */
        const float *r = dy + m * N;
        for (int64_t n = 0; n < N; n++)
            db[n] += r[n];
    }
}

void rt_k_add(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0], *z = b[1];
    float *y = b[2];   /* may alias x or z (elementwise) */
    int64_t n = i[0];
    if (i[1])
        for (int64_t k = 0; k < n; k++)
            y[k] += x[k] + z[k];
    else
        for (int64_t k = 0; k < n; k++)
            y[k] = x[k] + z[k];
}

void rt_k_copy(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    if (!i[1]) {
        memmove(b[1], b[0], (size_t)i[0] * 4);   /* any 4-byte dtype */
        return;
    }
    const float *restrict x = b[0];
    float *restrict y = b[1];
    for (int64_t k = 0; k < i[0]; k++)
        y[k] += x[k];
}

void rt_k_relu(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0];
    float *y = b[1];
    for (int64_t k = 0; k < i[0]; k++)
        y[k] = x[k] > 0.0f ? x[k] : 0.0f;
}

void rt_k_relu_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *dy = b[0], *y = b[1];
    float *dx = b[2];
    int64_t n = i[0];
    if (i[1])
        for (int64_t k = 0; k < n; k++)
            dx[k] += y[k] > 0.0f ? dy[k] : 0.0f;
    else
        for (int64_t k = 0; k < n; k++)
            dx[k] = y[k] > 0.0f ? dy[k] : 0.0f;
}

void rt_k_gelu(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_vgelu(b[0], b[1], i[0]);
}

void rt_k_gelu_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_vgelu_bwd(b[0], b[1], b[2], i[0], (int)i[1]);
}

void rt_k_mse_loss(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *restrict p = b[0], *restrict t = b[1];
    float *l = b[2];
    double s = 0;
    for (int64_t k = 0; k < i[0]; k++) {
        double d = (double)p[k] - t[k];
        s += d * d;
    }
    l[0] = (float)((i[1] ? l[0] : 0.0) + f[0] * s);
}

void rt_k_mse_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *p = b[0], *t = b[1];
    float *dp = b[2];
    float s2 = 2.0f * f[0];
    if (i[1])
        for (int64_t k = 0; k < i[0]; k++)
            dp[k] += s2 * (p[k] - t[k]);
    else
        for (int64_t k = 0; k < i[0]; k++)
            dp[k] = s2 * (p[k] - t[k]);
}

/* Max and log-sum-exp of a row (max subtracted before exp: no overflow). */
static void rt_row_lse(const float *row, int64_t V, float *mx_out, double *lse_out)
{
    float mx = rt_vmax(row, V);
    *mx_out = mx;
    *lse_out = (double)mx + log(rt_vexp_sum(row, mx, V));
}

/* A class index outside [0, V) is bad data, not something to index with. */
static void rt_check_target(rt_ctx *ctx, int32_t t, int64_t m, int64_t V)
{
    if (t < 0 || t >= V)
        rt_fatal(ctx, 1, "xent: target %d of row %lld is outside [0, %lld)", t, (long long)m,
                 (long long)V);
}

void rt_k_xent(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0];
    const int32_t *t = b[1];
    float *l = b[2];
    int64_t M = i[0], V = i[1];
    double s = 0;
    for (int64_t m = 0; m < M; m++) {
        float mx;
        double lse;
        rt_check_target(ctx, t[m], m, V);
        rt_row_lse(x + m * V, V, &mx, &lse);
        s += lse - x[m * V + t[m]];
    }
    l[0] = (float)((i[2] ? l[0] : 0.0) + f[0] * s);
}

void rt_k_xent_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0];
    const int32_t *t = b[1];
    float *dx = b[2];
    int64_t M = i[0], V = i[1];
    float scale = f[0];
    for (int64_t m = 0; m < M; m++) {
        float mx;
        double lse;
        rt_check_target(ctx, t[m], m, V);
        const float *row = x + m * V;
        float *d = dx + m * V;
        rt_row_lse(row, V, &mx, &lse);
        /* softmax = exp((row - mx) - shift): row - mx is exact, shift is small */
        rt_vexp_scale(row, mx, (float)(lse - mx), scale, d, V, (int)i[2]);
        d[t[m]] -= scale;
    }
}

void rt_k_sgd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    float *restrict p = b[0];
    const float *restrict g = b[1];
    float lr = f[0], wd = f[1];
    for (int64_t k = 0; k < i[0]; k++)
        p[k] -= lr * (g[k] + wd * p[k]);
}

void rt_k_adamw(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    float *restrict p = b[0], *restrict m = b[2], *restrict v = b[3];
    const float *restrict g = b[1];
    float lr = f[0], wd = f[1], b1 = f[2], b2 = f[3], eps = f[4];
    /* bias corrections in double: 1 - b^t loses digits in float for small t */
    float ic1 = (float)(1.0 / (1.0 - pow(b1, (double)i[1])));
    float ic2 = (float)(1.0 / (1.0 - pow(b2, (double)i[1])));
    for (int64_t k = 0; k < i[0]; k++) {
        float mk = b1 * m[k] + (1.0f - b1) * g[k];
        float vk = b2 * v[k] + (1.0f - b2) * g[k] * g[k];
        m[k] = mk;
        v[k] = vk;
        p[k] -= lr * ((mk * ic1) / (sqrtf(vk * ic2) + eps) + wd * p[k]);
    }
}

void rt_k_allreduce(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_comm_allreduce(ctx, b[0], i[0], (int)i[1], 1);
}

void rt_k_allgather(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_comm_allgather(ctx, b[0], b[1], i[0], (int)i[1], 1);
}

void rt_k_reducescatter(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_comm_reducescatter(ctx, b[0], b[1], i[0], (int)i[1], 1);
}

void rt_k_broadcast(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_comm_broadcast(ctx, b[0], i[0] * 4, (int)i[1], (int)i[2], 1);
}

void rt_k_sendrecv(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_comm_sendrecv(ctx, b[0], b[1], i[0], (int)i[1], (int)i[2], (int)i[3], 1);
}

void rt_k_alltoall(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_comm_alltoall(ctx, b[0], b[1], i[0], (int)i[1], 1);
}

void rt_k_slice(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    int nd = (int)i[0];
    int64_t shape[RT_MAXDIM], lo[RT_MAXDIM], hi[RT_MAXDIM];
    if (nd < 0 || nd > RT_MAXDIM)
        rt_fatal(ctx, 1, "slice: ndim %d outside [0, %d]", nd, RT_MAXDIM);
    for (int d = 0; d < nd; d++) {
        shape[d] = i[2 + 3 * d];
        lo[d] = i[3 + 3 * d];
        hi[d] = i[4 + 3 * d];
        if (lo[d] < 0 || hi[d] <= lo[d] || hi[d] > shape[d])
            rt_fatal(ctx, 1, "slice: dim %d range [%lld, %lld) outside [0, %lld)", d,
                     (long long)lo[d], (long long)hi[d], (long long)shape[d]);
    }
    rt_box_iter it;
    rt_box_iter_init(&it, nd, shape, lo, hi);
    while (rt_box_iter_next(&it)) {
        if (!i[1]) {
            memcpy((uint32_t *)b[1] + it.pos, (const uint32_t *)b[0] + it.start,
                   (size_t)it.run * 4);
        } else {
            const float *restrict s = (const float *)b[0] + it.start;
            float *restrict d = (float *)b[1] + it.pos;
            for (int64_t t = 0; t < it.run; t++)
                d[t] += s[t];
        }
    }
}
