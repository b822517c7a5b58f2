/* kernels_ref.c -- the plain scalar reference of every kernel in rt_kernels.h.
 *
 * rt_ref_<name> has the signature of rt_k_<name> and says, as directly as C
 * allows, what the kernel computes.  Sums are accumulated in double.  The
 * fast kernels (kernels.c, matmul.c) are tested against these; rng.c holds
 * the references of init_param and data, and the collectives' references are
 * the simple algorithms of comm_shm.c (fast = 0).
 */
#include <math.h>
#include <string.h>

#include "rt_internal.h"

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

/* C[M,N] (+)= op(A)[M,K] op(B)[K,N]. */
void rt_ref_matmul(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *A = b[0], *B = b[1];
    float *C = b[2];
    int64_t M = i[0], K = i[1], N = i[2];
    int ta = (int)i[3], tb = (int)i[4], acc = (int)i[5];
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)rt_ref_at(A, ta, m, k, M, K) * rt_ref_at(B, tb, k, n, K, N);
            C[m * N + n] = (float)((acc ? C[m * N + n] : 0.0) + s);
        }
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

/* Y (+)= A + B. */
void rt_ref_add(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0], *z = b[1];
    float *y = b[2];
    for (int64_t k = 0; k < i[0]; k++)
        y[k] = (i[1] ? y[k] : 0.0f) + (x[k] + z[k]);
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

/* Y = max(X, 0). */
void rt_ref_relu(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0];
    float *y = b[1];
    for (int64_t k = 0; k < i[0]; k++)
        y[k] = x[k] > 0.0f ? x[k] : 0.0f;
}

/* dX (+)= dY * (Y > 0). */
void rt_ref_relu_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *dy = b[0], *y = b[1];
    float *dx = b[2];
    for (int64_t k = 0; k < i[0]; k++)
        dx[k] = (i[1] ? dx[k] : 0.0f) + (y[k] > 0.0f ? dy[k] : 0.0f);
}

#define RT_GELU_C 0.7978845608028654   /* sqrt(2 / pi) */
#define RT_GELU_A 0.044715

/* Y = 0.5 X (1 + tanh(sqrt(2/pi) (X + 0.044715 X^3))). */
void rt_ref_gelu(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0];
    float *y = b[1];
    for (int64_t k = 0; k < i[0]; k++) {
        double v = x[k];
        y[k] = (float)(0.5 * v * (1.0 + tanh(RT_GELU_C * (v + RT_GELU_A * v * v * v))));
    }
}

/* dX (+)= dY * gelu'(X). */
void rt_ref_gelu_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *dy = b[0], *x = b[1];
    float *dx = b[2];
    for (int64_t k = 0; k < i[0]; k++) {
        double v = x[k];
        double t = tanh(RT_GELU_C * (v + RT_GELU_A * v * v * v));
        double d = 0.5 * (1.0 + t) +
                   0.5 * v * (1.0 - t * t) * RT_GELU_C * (1.0 + 3.0 * RT_GELU_A * v * v);
        dx[k] = (float)((i[1] ? dx[k] : 0.0) + dy[k] * d);
    }
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

/* log sum exp of a row, stable (max subtracted), in double. */
static double rt_ref_logsumexp(const float *row, int64_t V)
{
    double mx = row[0];
    for (int64_t v = 1; v < V; v++)
        if (row[v] > mx)
            mx = row[v];
    double s = 0;
    for (int64_t v = 0; v < V; v++)
        s += exp(row[v] - mx);
    return mx + log(s);
}

/* L[0] (+)= scale * sum_m (logsumexp(logits[m]) - logits[m, t_m]). */
void rt_ref_xent(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0];
    const int32_t *t = b[1];
    float *l = b[2];
    int64_t M = i[0], V = i[1];
    double s = 0;
    for (int64_t m = 0; m < M; m++) {
        rt_ref_check_target(ctx, t[m], m, V);
        s += rt_ref_logsumexp(x + m * V, V) - x[m * V + t[m]];
    }
    l[0] = (float)((i[2] ? l[0] : 0.0) + f[0] * s);
}

/* dlogits[m] (+)= scale * (softmax(logits[m]) - onehot(t_m)). */
void rt_ref_xent_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *x = b[0];
    const int32_t *t = b[1];
    float *dx = b[2];
    int64_t M = i[0], V = i[1];
    for (int64_t m = 0; m < M; m++) {
        rt_ref_check_target(ctx, t[m], m, V);
        const float *row = x + m * V;
        double lse = rt_ref_logsumexp(row, V);
        for (int64_t v = 0; v < V; v++) {
            double g = f[0] * (exp(row[v] - lse) - (v == t[m] ? 1.0 : 0.0));
            dx[m * V + v] = (float)((i[2] ? dx[m * V + v] : 0.0) + g);
        }
    }
}

/* P -= lr * (G + wd * P). */
void rt_ref_sgd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    float *p = b[0];
    const float *g = b[1];
    for (int64_t k = 0; k < i[0]; k++)
        p[k] = (float)(p[k] - (double)f[0] * (g[k] + (double)f[1] * p[k]));
}

/* AdamW (decoupled weight decay), t 1-based. */
void rt_ref_adamw(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    float *p = b[0], *m = b[2], *v = b[3];
    const float *g = b[1];
    double lr = f[0], wd = f[1], b1 = f[2], b2 = f[3], eps = f[4];
    double c1 = 1.0 - pow(b1, (double)i[1]), c2 = 1.0 - pow(b2, (double)i[1]);
    for (int64_t k = 0; k < i[0]; k++) {
        double mk = b1 * m[k] + (1.0 - b1) * g[k];
        double vk = b2 * v[k] + (1.0 - b2) * (double)g[k] * g[k];
        m[k] = (float)mk;
        v[k] = (float)vk;
        p[k] = (float)(p[k] - lr * ((mk / c1) / (sqrt(vk / c2) + eps) + wd * p[k]));
    }
}

/* Collectives: the simple algorithms (see comm_shm.c). */
void rt_ref_allreduce(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_comm_allreduce(ctx, b[0], i[0], (int)i[1], 0);
}

void rt_ref_allgather(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_comm_allgather(ctx, b[0], b[1], i[0], (int)i[1], 0);
}

void rt_ref_reducescatter(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_comm_reducescatter(ctx, b[0], b[1], i[0], (int)i[1], 0);
}

void rt_ref_broadcast(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_comm_broadcast(ctx, b[0], i[0] * 4, (int)i[1], (int)i[2], 0);
}

void rt_ref_sendrecv(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_comm_sendrecv(ctx, b[0], b[1], i[0], (int)i[1], (int)i[2], (int)i[3], 0);
}

void rt_ref_alltoall(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_comm_alltoall(ctx, b[0], b[1], i[0], (int)i[1], 0);
}

/* dst (+)= src[lo:hi, ...]: element by element, the index arithmetic spelled out. */
void rt_ref_slice(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    int nd = (int)i[0];
    int acc = (int)i[1];
    const int64_t *dim = i + 2;   /* per dim: extent, lo, hi */
    int64_t n = 1;
    for (int d = 0; d < nd; d++)
        n *= dim[3 * d + 2] - dim[3 * d + 1];
    for (int64_t q = 0; q < n; q++) {
        int64_t rest = q, src = 0, stride = 1;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t ext = dim[3 * d + 2] - dim[3 * d + 1];
            src += (dim[3 * d + 1] + rest % ext) * stride;
            rest /= ext;
            stride *= dim[3 * d];
        }
        if (acc)
            ((float *)b[1])[q] += ((const float *)b[0])[src];
        else
            ((uint32_t *)b[1])[q] = ((const uint32_t *)b[0])[src];
    }
}
