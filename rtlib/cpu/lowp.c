/* lowp.c -- mixed precision on the CPU (train dtype = bf16): rounding to
 * bf16, and the matmul_bf16 kernel (its scalar reference is in kernels_ref.c).
 *
 * Under dtype = bf16 every matmul of the model (forward and backward) is a
 * matmul_bf16: C[M,N] (+)= op(A) op(B) with A and B read as if rounded to
 * bf16 and the products summed in f32, as a tensor core does with bf16
 * inputs and f32 accumulation.  Everything else -- params, gradients,
 * optimizer state, every other kernel -- stays f32: the params are the f32
 * master weights, and only the products see bf16.
 *
 * The product of two bf16 values (8-bit significands) is exact in f32 (24
 * bits), so the fast kernel rounds the operands into staging buffers and
 * runs the f32 matmul (matmul.c) on them.  Staging is bounded: when an
 * operand is larger than RT_BF16_STAGE_FLOATS (64 MiB), C is computed in blocks
 * of rows and/or columns, each staged and multiplied in turn (a column
 * block of C goes through a staging buffer too: rt_matmul writes whole
 * rows).  matmul.c computes each element of C in the same order whatever
 * the blocking of M and N (its sums over K are cut by KC only), so the
 * result is the same as one rt_matmul over the rounded operands, for any
 * block size and thread count: deterministic, and tested so (test_rt_lowp).
 *
 * The staging buffers are kept between calls (kernels run one at a time on
 * the rank's thread) and grow to the largest call's needs.
 */
#include <string.h>

#include "cpu/rt_cpu.h"
#include "cpu/rt_lowp.h"

/* ---------------------------------------------------------------- rounding */

/* The bits of x rounded to bf16 (round to nearest, ties to even), low half
 * zero.  A NaN gets its quiet bit set first, so that cutting the low half
 * leaves a NaN even when its payload was all in that half. */
static inline uint32_t lp_bf16_bits(uint32_t u)
{
    if ((u & 0x7fffffffu) > 0x7f800000u)
        u |= 0x00400000u;
    else
        u += 0x7fffu + ((u >> 16) & 1u);
    return u & 0xffff0000u;
}

float rt_bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u = lp_bf16_bits(u);
    memcpy(&x, &u, 4);
    return x;
}

void rt_bf16_round_n(const float *src, float *dst, int64_t n)
{
    for (int64_t k = 0; k < n; k++) {
        uint32_t u;
        memcpy(&u, &src[k], 4);
        u = lp_bf16_bits(u);
        memcpy(&dst[k], &u, 4);
    }
}

/* ---------------------------------------------------------------- staging */

/* The staging limit in use, floats (rt_bf16_stage_limit; tests lower it):
 * larger operands are staged a block of rows (A) or columns (B) at a time;
 * the rule and the sizes are rt_lowp.h's, which plan.txt counts too. */
static int64_t lp_stage_floats = RT_BF16_STAGE_FLOATS;

/* One staging buffer, kept between calls. */
typedef struct lp_stage {
    float *p;       /* rt_big_alloc'ed, or NULL */
    size_t bytes;   /* its size */
} lp_stage;

/* The staging buffers: 0 a block of A, 1 a block of B, 2 a block of C. */
static lp_stage lp_stages[3];

/* Staging buffer k with room for n floats (grown when needed); exits 1
 * when out of memory. */
static float *lp_stage_get(rt_ctx *ctx, int k, int64_t n)
{
    lp_stage *s = &lp_stages[k];
    size_t need = (size_t)(n > 0 ? n : 1) * 4;
    if (s->bytes >= need)
        return s->p;
    if (s->p)
        rt_big_free(s->p, s->bytes);
    size_t unit = (size_t)RT_BF16_ALLOC_UNIT, bytes = (need + unit - 1) / unit * unit;
    s->p = rt_big_alloc(bytes);
    s->bytes = s->p ? bytes : 0;
    if (!s->p)
        rt_fatal(ctx, 1, "out of memory: matmul_bf16 needs %lld MiB to stage an operand",
                 (long long)(bytes >> 20));
    return s->p;
}

/* A copy of a block of rows: rows r of `cols` floats from src (rows ld
 * floats apart) to dst (rows dld floats apart), rounded to bf16 or not. */
typedef struct lp_copy {
    const float *src;   /* first source row */
    int64_t ld;         /* source row stride, floats */
    float *dst;         /* first destination row */
    int64_t dld;        /* destination row stride, floats */
    int64_t cols;       /* floats per row */
    int round;          /* 1: rounded to bf16; 0: copied as they are */
} lp_copy;

/* Rows [lo, hi) of an lp_copy. */
static void lp_copy_rows(const void *p, int64_t lo, int64_t hi, int t)
{
    const lp_copy *c = p;
    for (int64_t r = lo; r < hi; r++) {
        const float *s = c->src + r * c->ld;
        float *d = c->dst + r * c->dld;
        if (c->round)
            rt_bf16_round_n(s, d, c->cols);
        else
            memcpy(d, s, (size_t)c->cols * 4);
    }
}

/* Copy rows x cols floats from src (row stride ld) to dst (row stride dld),
 * rounding to bf16 when round; split by rows across the pool. */
static void lp_copy_block(const float *src, int64_t ld, int64_t rows, int64_t cols, float *dst,
                          int64_t dld, int round)
{
    if (rows <= 0 || cols <= 0)
        return;
    lp_copy c = {src, ld, dst, dld, cols, round};
    int64_t grain = cols >= RT_EW_GRAIN ? 1 : RT_EW_GRAIN / cols;   /* rows per thread, at least */
    rt_parallel_for(lp_copy_rows, &c, rows, 1, grain);
}

/* Stage rows [m0, m0 + mm) of op(A) (A stored (M, K), or (K, M) when ta) in
 * dst, in the same layout: (mm, K), or (K, mm) when ta. */
static void lp_stage_a(const float *A, int ta, int64_t M, int64_t K, int64_t m0, int64_t mm,
                       float *dst)
{
    if (ta)
        lp_copy_block(A + m0, M, K, mm, dst, mm, 1);
    else
        lp_copy_block(A + m0 * K, K, mm, K, dst, K, 1);
}

/* Stage columns [n0, n0 + nn) of op(B) (B stored (K, N), or (N, K) when tb)
 * in dst, in the same layout: (K, nn), or (nn, K) when tb. */
static void lp_stage_b(const float *B, int tb, int64_t K, int64_t N, int64_t n0, int64_t nn,
                       float *dst)
{
    if (tb)
        lp_copy_block(B + n0 * K, K, nn, K, dst, K, 1);
    else
        lp_copy_block(B + n0, N, K, nn, dst, nn, 1);
}

void rt_bf16_stage_limit(int64_t floats)
{
    lp_stage_floats = floats > 0 ? floats : RT_BF16_STAGE_FLOATS;
}

/* ---------------------------------------------------------------- the kernel */

void rt_k_matmul_bf16(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const float *A = b[0], *B = b[1];
    float *C = b[2];
    int64_t M = i[0], K = i[1], N = i[2];
    int ta = (int)i[3], tb = (int)i[4], acc = (int)i[5];
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {   /* no products: C = 0, or unchanged (no operand is read) */
        rt_matmul(M, K, N, A, ta, B, tb, C, acc);
        return;
    }
    int64_t need[3];
    rt_bf16_stage_need(M, K, N, lp_stage_floats, need);
    int64_t mb = need[0] / K, nb = need[1] / K;
    float *as = lp_stage_get(ctx, 0, need[0]);
    float *bs = lp_stage_get(ctx, 1, need[1]);
    float *cs = need[2] ? lp_stage_get(ctx, 2, need[2]) : NULL;
    if (mb == M)   /* all of A at once: staged once for every column block */
        lp_stage_a(A, ta, M, K, 0, M, as);
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
        int64_t nn = N - n0 < nb ? N - n0 : nb;
        lp_stage_b(B, tb, K, N, n0, nn, bs);
        for (int64_t m0 = 0; m0 < M; m0 += mb) {
            int64_t mm = M - m0 < mb ? M - m0 : mb;
            if (mb < M)
                lp_stage_a(A, ta, M, K, m0, mm, as);
            if (!cs) {   /* whole rows of C: in place */
                rt_matmul(mm, K, nn, as, ta, bs, tb, C + m0 * N, acc);
                continue;
            }
            /* a column block of C: through cs (C's values first when accumulating,
               so that every sum starts from them exactly as in place) */
            if (acc)
                lp_copy_block(C + m0 * N + n0, N, mm, nn, cs, nn, 0);
            rt_matmul(mm, K, nn, as, ta, bs, tb, cs, acc);
            lp_copy_block(cs, nn, mm, nn, C + m0 * N + n0, N, 0);
        }
    }
}

/* ------------------------------------------------------- bf16 storage */

/* cvt_f32: n bf16 values (the top halves of f32s, as uint16) widened. */
void rt_k_cvt_f32(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)ctx, (void)f;
    const uint16_t *x = b[0];
    uint32_t *y = b[1];
    for (int64_t k = 0; k < i[0]; k++) y[k] = (uint32_t)x[k] << 16;
}

/* cvt_bf16: n f32 values rounded to bf16 (lp_bf16_bits), stored as
 * uint16; an odd n pads the last word with 0. */
void rt_k_cvt_bf16(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    (void)ctx, (void)f;
    const uint32_t *x = b[0];
    uint16_t *y = b[1];
    int64_t n = i[0];
    for (int64_t k = 0; k < n; k++) {   /* lp_bf16_bits without a branch (the loop vectorises) */
        uint32_t u = x[k], nan = (u & 0x7fffffffu) > 0x7f800000u;
        uint32_t r = nan ? u | 0x00400000u : u + 0x7fffu + ((u >> 16) & 1u);
        y[k] = (uint16_t)(r >> 16);
    }
    if (n & 1) y[n] = 0;
}
