/* kernels.c -- the rt_k_* entry points that generated rank programs call:
 * elementwise kernels, losses, optimizers, copies.  (Collectives are in
 * comm/coll.c, the data kernel in io/data.c.)  (Row-wise
 * kernels are in rows.c, attention in attention.c, matmul in matmul.c.)
 *
 * Each unpacks the argument arrays (conventions in rt_kernels.h) and runs
 * the fast version of the kernel.  Fast versions work in float with loops
 * the compiler vectorises (restrict pointers, no loop-carried dependences
 * except explicit reductions); the exp-based ones (vmath.c) have explicit
 * SIMD code.  Elementwise kernels on more than RT_EW_GRAIN elements are cut
 * into one contiguous piece per pool thread (pool.c); an element's value
 * does not depend on the cut.  The scalar references are in kernels_ref.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu/rt_cpu.h"
#include "rt_ew.h"
#include "rt_relpos.h"

/* Run body(args, lo, hi, t) over [0, n) on the pool, elementwise-sized pieces. */
static void rt_ew(rt_range_fn *body, rt_ctx *ctx, void *const *b, const int64_t *i,
                  const float *f, int64_t n)
{
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(body, &a, n, RT_EW_UNIT, RT_EW_GRAIN);
}

void rt_k_init_param(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_init_param_box(ctx, b[0], i[0]);
}

void rt_zero_words(void *p, int64_t n, int stream)
{
    uint32_t *w = p;
#if defined(__x86_64__)
    if (stream) {
        /* non-temporal 16-byte stores (SSE2: every x86-64): no read of the old
         * lines, no cache pollution; the ends go through memset */
        int64_t head = (int64_t)((16 - (uintptr_t)w % 16) % 16) / 4;
        head = head < n ? head : n;
        memset(w, 0, (size_t)head * 4);
        int64_t k = head;
        __m128 z = _mm_setzero_ps();
        for (; k + 4 <= n; k += 4)
            _mm_stream_ps((float *)(w + k), z);
        memset(w + k, 0, (size_t)(n - k) * 4);
        _mm_sfence();   /* before other threads (or the next kernel) read them */
        return;
    }
#endif
    (void)stream;
    memset(w, 0, (size_t)n * 4);
}

/* zero on [lo, hi); i[0] words in all. */
static void rt_zero_range(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    rt_zero_words((uint32_t *)a->b[0] + lo, hi - lo, a->i[0] >= RT_ZERO_STREAM_MIN);
}

void rt_k_zero(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_ew(rt_zero_range, ctx, b, i, f, i[0]);
}

void rt_k_matmul(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_matmul(i[0], i[1], i[2], b[0], (int)i[3], b[1], (int)i[4], b[2], (int)i[5]);
}

/* bias_add on rows [lo, hi). */
static void rt_bias_add_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const float *x = a->b[0];
    const float *restrict bias = a->b[1];
    float *y = a->b[2];   /* may be x: rows are read before they are written */
    int64_t N = a->i[1];
    for (int64_t m = lo; m < hi; m++) {
        const float *xr = x + m * N;
        float *yr = y + m * N;
        for (int64_t n = 0; n < N; n++)
            yr[n] = xr[n] + bias[n];
    }
}

void rt_k_bias_add(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rt_bias_add_rows, &a, i[0], 1, RT_EW_GRAIN / (i[1] > 0 ? i[1] : 1) + 1);
}

/* bias_grad on columns [lo, hi): each column summed over rows in order, so
 * the result does not depend on the cut. */
static void rt_bias_grad_cols(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const float *restrict dy = a->b[0];
    float *restrict db = a->b[1];
    int64_t M = a->i[0], N = a->i[1];
    if (!a->i[2])
        memset(db + lo, 0, (size_t)(hi - lo) * 4);
    for (int64_t m = 0; m < M; m++) {   /* row by row: unit stride, vectorised over n */
        const float *r = dy + m * N;
        for (int64_t n = lo; n < hi; n++)
            db[n] += r[n];
    }
}

void rt_k_bias_grad(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_kargs a = {ctx, b, i, f};
    rt_parallel_for(rt_bias_grad_cols, &a, i[1], RT_EW_UNIT,
                    RT_EW_GRAIN / (i[0] > 0 ? i[0] : 1) + 1);
}

void rt_k_copy(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    if (!i[1]) {
        memmove(b[1], b[0], (size_t)i[0] * 4);   /* any 4-byte dtype; may overlap */
        return;
    }
    const float *restrict x = b[0];
    float *restrict y = b[1];
    for (int64_t k = 0; k < i[0]; k++)
        y[k] += x[k];
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

/* This step's lr (lr times the schedule's scale, rounded once) and gradient
 * multiplier (gradclip's); lr and 1 without a context (tests). */
static void rt_opt_scales(const rt_ctx *ctx, float lr, float *lr_step, float *gscale)
{
    *lr_step = ctx ? (float)((double)lr * ctx->lr_scale) : lr;
    *gscale = ctx ? ctx->grad_scale : 1.0f;
}

/* sgd on [lo, hi); f: lr', wd, grad scale. */
static void rt_sgd_range(const void *q, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = q;
    float *restrict p = a->b[0];
    const float *restrict g = a->b[1];
    float lr = a->f[0], wd = a->f[1], gs = a->f[2];
    for (int64_t k = lo; k < hi; k++)
        p[k] -= lr * (g[k] * gs + wd * p[k]);
}

void rt_k_sgd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    float fs[3] = {0, f[1], 0};
    rt_opt_scales(ctx, f[0], &fs[0], &fs[2]);
    rt_ew(rt_sgd_range, ctx, b, i, fs, i[0]);
}

/* adamw on [lo, hi); f: lr', wd, beta1, beta2, eps, grad scale. */
static void rt_adamw_range(const void *q, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = q;
    float *restrict p = a->b[0], *restrict m = a->b[2], *restrict v = a->b[3];
    const float *restrict g = a->b[1];
    float lr = a->f[0], wd = a->f[1], b1 = a->f[2], b2 = a->f[3], eps = a->f[4], gs = a->f[5];
    /* bias corrections in double: 1 - b^t loses digits in float for small t */
    float ic1 = (float)(1.0 / (1.0 - pow(b1, (double)a->i[1])));
    float ic2 = (float)(1.0 / (1.0 - pow(b2, (double)a->i[1])));
    for (int64_t k = lo; k < hi; k++) {
        float gk = g[k] * gs;
        float mk = b1 * m[k] + (1.0f - b1) * gk;
        float vk = b2 * v[k] + (1.0f - b2) * gk * gk;
        m[k] = mk;
        v[k] = vk;
        p[k] -= lr * ((mk * ic1) / (sqrtf(vk * ic2) + eps) + wd * p[k]);
    }
}

void rt_k_adamw(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    float fs[6] = {0, f[1], f[2], f[3], f[4], 0};
    rt_opt_scales(ctx, f[0], &fs[0], &fs[5]);
    rt_ew(rt_adamw_range, ctx, b, i, fs, i[0]);
}

void rt_k_mark(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)b, (void)f;
    rt_trace_mark(ctx, i[0], i[1], i[2]);
}

/* Read the per-dim triples (extent, lo, hi) of slice or place into shape,
 * lo, hi; exits 1 on a box outside the tensor. */
static int rt_box_args(rt_ctx *ctx, const char *what, const int64_t *i, int64_t *shape,
                       int64_t *lo, int64_t *hi)
{
    int nd = (int)i[0];
    if (nd < 0 || nd > RT_MAXDIM)
        rt_fatal(ctx, 1, "%s: ndim %d outside [0, %d]", what, nd, RT_MAXDIM);
    for (int d = 0; d < nd; d++) {
        shape[d] = i[2 + 3 * d];
        lo[d] = i[3 + 3 * d];
        hi[d] = i[4 + 3 * d];
        if (lo[d] < 0 || hi[d] <= lo[d] || hi[d] > shape[d])
            rt_fatal(ctx, 1, "%s: dim %d range [%lld, %lld) outside [0, %lld)", what, d,
                     (long long)lo[d], (long long)hi[d], (long long)shape[d]);
    }
    return nd;
}

/* dst (+)= src[box] (slice, to_box = 0) or dst[box] (+)= src (place, to_box = 1):
 * the box is walked as runs of contiguous elements of the big tensor. */
static void rt_box_move(rt_ctx *ctx, const char *what, void *const *b, const int64_t *i,
                        int to_box)
{
    int64_t shape[RT_MAXDIM], lo[RT_MAXDIM], hi[RT_MAXDIM];
    int nd = rt_box_args(ctx, what, i, shape, lo, hi);
    rt_box_iter it;
    rt_box_iter_init(&it, nd, shape, lo, hi);
    while (rt_box_iter_next(&it)) {
        int64_t from = to_box ? it.pos : it.start, to = to_box ? it.start : it.pos;
        if (!i[1]) {
            memcpy((uint32_t *)b[1] + to, (const uint32_t *)b[0] + from, (size_t)it.run * 4);
        } else {
            const float *restrict s = (const float *)b[0] + from;
            float *restrict d = (float *)b[1] + to;
            for (int64_t k = 0; k < it.run; k++)
                d[k] += s[k];
        }
    }
}

void rt_k_slice(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_box_move(ctx, "slice", b, i, 0);
}

void rt_k_place(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_box_move(ctx, "place", b, i, 1);
}

/* ---- ew: fused elementwise chains (rt_ew.h) */

/* ---- the elementwise ops of rt_ew.h (RT_EW_OPS): one tile function per op,
 * y (+)= the op over [0, n); the fused ew runs them tile by tile, and the
 * kernels of the rows marked `made` run them alone. */
typedef void rt_ew_tile_fn(const float *a, const float *c, float *y, int64_t n, int acc);

/* cpu = vec: by hand.  copy: memmove (any 4-byte type, y may be a). */
static void rt_ew_vec_COPY(const float *a, const float *c, float *y, int64_t n, int acc)
{
    if (acc)
        for (int64_t j = 0; j < n; j++)
            y[j] += a[j];
    else if (y != a)
        memmove(y, a, (size_t)n * 4);
}

/* gelu and gelu': vmath's vectorised tanh approximation. */
static void rt_ew_vec_GELU(const float *a, const float *c, float *y, int64_t n, int acc)
{
    RT_ASSERT(!acc);
    rt_vgelu(a, y, n);
}

static void rt_ew_vec_GELU_BWD(const float *a, const float *c, float *y, int64_t n, int acc)
{
    rt_vgelu_bwd(a, c, y, n, acc);
}

/* cpu = expr: the row's float expression in a loop (y may be a or c). */
#define RT_EW_EXPR_TILE(CODE, kernel, nsrc, racc, cpu, made, expr, ref)                        \
    __attribute__((unused)) static void rt_ew_expr_##CODE(const float *a_, const float *c_,     \
                                                          float *y, int64_t n, int acc)        \
    {                                                                                          \
        if (acc)                                                                               \
            for (int64_t j = 0; j < n; j++) {                                                  \
                const float a = a_[j], c = nsrc == 2 ? c_[j] : 0.0f;                           \
                (void)c;                                                                       \
                y[j] += (expr);                                                                \
            }                                                                                  \
        else                                                                                   \
            for (int64_t j = 0; j < n; j++) {                                                  \
                const float a = a_[j], c = nsrc == 2 ? c_[j] : 0.0f;                           \
                (void)c;                                                                       \
                y[j] = (expr);                                                                 \
            }                                                                                  \
    }
RT_EW_OPS(RT_EW_EXPR_TILE)
#undef RT_EW_EXPR_TILE

#define RT_EW_TILE_expr(CODE) rt_ew_expr_##CODE
#define RT_EW_TILE_vec(CODE) rt_ew_vec_##CODE

/* The tile function of every op code. */
static rt_ew_tile_fn *const rt_ew_tiles[RT_EW_NOPS_KIND] = {
#define RT_EW_TILE_OF(CODE, kernel, nsrc, racc, cpu, made, expr, ref) [RT_EW_##CODE] = RT_EW_TILE_##cpu(CODE),
    RT_EW_OPS(RT_EW_TILE_OF)
#undef RT_EW_TILE_OF
};

/* rt_k_<kernel> of the rows marked made: the tile function over the
 * kernel's range, cut among the pool's threads. */
#define RT_EW_KERNEL(CODE, kernel, nsrc, racc, cpu, made, expr, ref)                           \
    RT_EW_IF_##made(                                                                           \
    static void rt_ew1_##kernel(const void *p, int64_t lo, int64_t hi, int t)                  \
    {                                                                                          \
        const rt_kargs *q = p;                                                                 \
        RT_EW_TILE_##cpu(CODE)((const float *)q->b[0] + lo,                                    \
                               nsrc == 2 ? (const float *)q->b[1] + lo : NULL,                 \
                               (float *)q->b[nsrc] + lo, hi - lo, racc ? (int)q->i[1] : 0);    \
    }                                                                                          \
    void rt_k_##kernel(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)          \
    {                                                                                          \
        rt_ew(rt_ew1_##kernel, ctx, b, i, f, i[0]);                                            \
    })
RT_EW_OPS(RT_EW_KERNEL)
#undef RT_EW_KERNEL

#define RT_EW_TILE 256   /* elements per tile: registers are tiles, all in L1 */

/* The tile of operand code x for elements [k0, k0 + len): a register, the
 * buffer itself, or a row broadcast gathered into spare. */
static const float *rt_ew_operand(const rt_kargs *a, int64_t x, int64_t k0, int64_t len,
                                  float (*reg)[RT_EW_TILE], float *spare)
{
    if (x < RT_EW_MEM)
        return reg[x];
    if (x < RT_EW_ROW)
        return (const float *)a->b[x - RT_EW_MEM] + k0;
    RT_ASSERT(x < RT_EW_ACC);
    const float *row = a->b[x - RT_EW_ROW];
    int64_t N = a->i[2], r = k0 % N;
    for (int64_t j = 0; j < len; j++) {
        spare[j] = row[r];
        if (++r == N)
            r = 0;
    }
    return spare;
}

/* ew on [lo, hi): tile by tile, every op over the whole tile. */
static void rt_ew_range(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_kargs *a = p;
    const int64_t *ops = a->i + RT_EW_HEAD;
    int nops = (int)a->i[3];
    _Alignas(64) float reg[RT_EW_NREG][RT_EW_TILE];
    _Alignas(64) float sa[RT_EW_TILE], sc[RT_EW_TILE], res[RT_EW_TILE];
    for (int64_t k0 = lo; k0 < hi; k0 += RT_EW_TILE) {
        int64_t len = hi - k0 < RT_EW_TILE ? hi - k0 : RT_EW_TILE;
        for (int o = 0; o < nops; o++) {
            int64_t op = ops[4 * o], dst = ops[4 * o + 1];
            const float *x = rt_ew_operand(a, ops[4 * o + 2], k0, len, reg, sa);
            const float *c = rt_ew_nsrc(op) == 2
                                 ? rt_ew_operand(a, ops[4 * o + 3], k0, len, reg, sc)
                                 : NULL;
            float *y = dst < RT_EW_MEM   ? reg[dst]
                       : dst < RT_EW_ROW ? (float *)a->b[dst - RT_EW_MEM] + k0
                                         : res;   /* RT_EW_ACC: added below */
            RT_ASSERT(op >= 0 && op < RT_EW_NOPS_KIND);
            rt_ew_tiles[op](x, c, y, len, 0);
            if (dst >= RT_EW_ACC) {
                float *m = (float *)a->b[dst - RT_EW_ACC] + k0;
                for (int64_t j = 0; j < len; j++)
                    m[j] += res[j];
            }
        }
    }
}

void rt_k_ew(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    RT_ASSERT(i[3] >= 1 && i[3] <= RT_EW_MAXOPS && i[2] >= 1);
    rt_ew(rt_ew_range, ctx, b, i, f, i[1]);
}

/* A custom op's instruction calls the user's nnsc_custom_NAME directly
 * (codegen/host.c); reaching this entry means a program was built wrong. */
void rt_k_custom(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)b, (void)f;
    rt_fatal(ctx, 1, "internal error: custom op %lld called through rtlib's rt_k_custom", (long long)i[0]);
}

/* mean_mid on rows [lo, hi) of R: each output element summed over t in
 * order in f32, then scaled (the CUDA kernel sums the same way). */
static void rt_mean_mid_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    (void)t;
    const rt_kargs *a = p;
    const float *restrict x = a->b[0];
    float *restrict y = a->b[1];
    int64_t T = a->i[1], C = a->i[2];
    float scale = a->f[0];
    float s[256];
    for (int64_t r = lo; r < hi; r++)
        for (int64_t c0 = 0; c0 < C; c0 += 256) {   /* 256 columns at a time, on the stack */
            int64_t nc = C - c0 < 256 ? C - c0 : 256;
            memset(s, 0, (size_t)nc * 4);
            for (int64_t k = 0; k < T; k++) {
                const float *xr = x + (r * T + k) * C + c0;
                for (int64_t c = 0; c < nc; c++)
                    s[c] += xr[c];
            }
            float *yr = y + r * C + c0;
            for (int64_t c = 0; c < nc; c++)
                yr[c] = a->i[3] ? yr[c] + s[c] * scale : s[c] * scale;
        }
}

/* transpose on units [lo, hi) of R x ceil(A / 32): 32 rows of X at a time,
 * in 32 x 32 tiles (reads and writes both touch 32 consecutive floats). */
static void rt_transpose_units(const void *p, int64_t lo, int64_t hi, int t)
{
    (void)t;
    const rt_kargs *a = p;
    const float *restrict x = a->b[0];
    float *restrict y = a->b[1];
    int64_t A = a->i[1], B = a->i[2], na = (A + 31) / 32;
    int acc = a->i[3] != 0;
    for (int64_t u = lo; u < hi; u++) {
        int64_t r = u / na, a0 = u % na * 32, a1 = a0 + 32 < A ? a0 + 32 : A;
        const float *xr = x + r * A * B;
        float *yr = y + r * A * B;
        for (int64_t b0 = 0; b0 < B; b0 += 32) {
            int64_t b1 = b0 + 32 < B ? b0 + 32 : B;
            for (int64_t bb = b0; bb < b1; bb++)
                for (int64_t aa = a0; aa < a1; aa++) {
                    float v = xr[aa * B + bb];
                    yr[bb * A + aa] = acc ? yr[bb * A + aa] + v : v;
                }
        }
    }
}

void rt_k_transpose(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_kargs a = {ctx, b, i, f};
    int64_t units = i[0] * ((i[1] + 31) / 32), per = 32 * i[2];
    rt_parallel_for(rt_transpose_units, &a, units, 1, RT_EW_GRAIN / (per > 0 ? per : 1) + 1);
}

/* ---- relpos_bias: T5's relative position bias (rt_relpos.h) */

int64_t *rt_relpos_diagonals(rt_ctx *ctx, const int64_t *i)
{
    int64_t T = i[0], S = i[1], H = i[2], NB = i[3], md = i[5], n = i[4] ? NB / 2 : NB;
    if (T < 0 || S < 0 || H < 0 || NB < 0 || (i[4] != 0 && i[4] != 1))
        rt_fatal(ctx, 1, "relpos_bias: T %lld, S %lld, H %lld, NB %lld, bidirectional %lld", (long long)T,
                 (long long)S, (long long)H, (long long)NB, (long long)i[4]);
    if (n < 2 || md <= n / 2)
        rt_fatal(ctx, 1, "relpos_bias: %lld buckets (%s) and max_distance %lld leave no log-spaced bucket",
                 (long long)NB, i[4] ? "bidirectional" : "one side", (long long)md);
    if (T == 0 || S == 0) return NULL;
    int64_t *bk = malloc(sizeof(int64_t) * (size_t)(T + S - 1));
    if (!bk) rt_fatal(ctx, 1, "relpos_bias: out of memory");
    for (int64_t d = -(T - 1); d < S; d++) bk[d + T - 1] = rt_relpos_bucket(d, NB, (int)i[4], md);
    return bk;
}

typedef struct rp_args {
    rt_kargs a;
    const int64_t *bk;   /* the bucket of each diagonal */
    float *sum;          /* backward: per head, NB partial sums */
} rp_args;

/* Y[h, t, s] = table[bucket(s - t), h] on the rows (h, t) [lo, hi). */
static void rt_relpos_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    (void)t;
    const rp_args *r = p;
    const float *tab = r->a.b[0];
    float *y = r->a.b[1];
    int64_t T = r->a.i[0], S = r->a.i[1], H = r->a.i[2];
    for (int64_t u = lo; u < hi; u++) {
        int64_t h = u / T, q = u % T;
        const int64_t *bk = r->bk + (T - 1 - q);   /* bk[s]: the bucket of s - q */
        float *yr = y + u * S;
        for (int64_t s = 0; s < S; s++) yr[s] = tab[bk[s] * H + h];
    }
}

void rt_k_relpos_bias(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rp_args r = {{ctx, b, i, f}, rt_relpos_diagonals(ctx, i), NULL};
    if (r.bk) rt_parallel_for(rt_relpos_rows, &r, i[2] * i[0], 1, RT_EW_GRAIN / i[1] + 1);
    free((void *)r.bk);
}

/* dtable[:, h] (+)= per bucket the sum of dY[h] over its diagonals (d
 * ascending, t ascending), for the heads [lo, hi). */
static void rt_relpos_heads(const void *p, int64_t lo, int64_t hi, int t)
{
    (void)t;
    const rp_args *r = p;
    const float *dy = r->a.b[0];
    float *dtab = r->a.b[1];
    int64_t T = r->a.i[0], S = r->a.i[1], H = r->a.i[2], NB = r->a.i[3];
    int acc = r->a.i[6] != 0;
    for (int64_t h = lo; h < hi; h++) {
        float *sum = r->sum + h * NB;
        memset(sum, 0, sizeof(float) * (size_t)NB);
        for (int64_t d = -(T - 1); d < S && r->bk; d++) {
            int64_t t0 = d < 0 ? -d : 0, t1 = S - d < T ? S - d : T;
            float *sb = &sum[r->bk[d + T - 1]];
            for (int64_t q = t0; q < t1; q++) *sb += dy[(h * T + q) * S + q + d];
        }
        for (int64_t k = 0; k < NB; k++) dtab[k * H + h] = acc ? dtab[k * H + h] + sum[k] : sum[k];
    }
}

void rt_k_relpos_bias_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rp_args r = {{ctx, b, i, f}, rt_relpos_diagonals(ctx, i), NULL};
    r.sum = malloc(sizeof(float) * (size_t)(i[2] * i[3] + 1));
    if (!r.sum) rt_fatal(ctx, 1, "relpos_bias_bwd: out of memory");
    rt_parallel_for(rt_relpos_heads, &r, i[2], 1, RT_EW_GRAIN / (i[0] * i[1] + 1) + 1);
    free(r.sum);
    free((void *)r.bk);
}

void rt_k_mean_mid(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_kargs a = {ctx, b, i, f};
    int64_t per = i[1] * i[2];
    rt_parallel_for(rt_mean_mid_rows, &a, i[0], 1, RT_EW_GRAIN / (per > 0 ? per : 1) + 1);
}

/* mean_mid_bwd on rows [lo, hi) of R: dX[r, t, :] (+)= scale dY[r, :]. */
static void rt_mean_mid_bwd_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    (void)t;
    const rt_kargs *a = p;
    const float *restrict dy = a->b[0];
    float *restrict dx = a->b[1];
    int64_t T = a->i[1], C = a->i[2];
    float scale = a->f[0];
    for (int64_t r = lo; r < hi; r++)
        for (int64_t k = 0; k < T; k++) {
            float *d = dx + (r * T + k) * C;
            const float *g = dy + r * C;
            if (a->i[3])
                for (int64_t c = 0; c < C; c++)
                    d[c] += scale * g[c];
            else
                for (int64_t c = 0; c < C; c++)
                    d[c] = scale * g[c];
        }
}

void rt_k_mean_mid_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_kargs a = {ctx, b, i, f};
    int64_t per = i[1] * i[2];
    rt_parallel_for(rt_mean_mid_bwd_rows, &a, i[0], 1, RT_EW_GRAIN / (per > 0 ? per : 1) + 1);
}
