/* test_rt_rng.c -- the counter-based RNG, param init and synthetic data.
 *
 * Plan independence: every box of a param or of a step's batch equals the
 * same region of the full tensor made by a one-box call.  Also: the fast
 * kernels equal the element-by-element references bit for bit, the
 * documented definitions hold (fnv1a64, Box-Muller over counters 2k, 2k+1,
 * the stream offset of step s), golden values pin the generator (changing
 * them changes every model's initial weights: a reviewed decision), and the
 * distributions have the right moments.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rt_internal.h"


/* Params: a full tensor (index 0) and pieces of it; arena offsets in bytes. */
static const char *manifest =
    "nnsc-manifest 1\n"
    "model rngtest\n"
    "rank 0 world 1\n"
    "arena 4000000\n"
    "steps 3\n"
    "micro_batches 1\n"
    "seed 1337\n"
    "param 0 w f32 3 7 13 5 box 0 7 0 13 0 5 init normal 0.02 0 off 0 writer 1\n"
    "param 1 w f32 3 7 13 5 box 2 5 0 13 1 4 init normal 0.02 0 off 2048 writer 0\n"
    "param 2 w f32 3 7 13 5 box 0 7 3 9 0 5 init normal 0.02 0 off 4096 writer 0\n"
    "param 3 w f32 3 7 13 5 box 6 7 12 13 4 5 init normal 0.02 0 off 8192 writer 0\n"
    "param 4 u f32 2 300 200 box 0 300 0 200 init uniform -0.5 1.5 off 16384 writer 1\n"
    "param 5 u f32 2 300 200 box 100 200 50 150 init uniform -0.5 1.5 off 260000 writer 0\n"
    "param 6 big f32 1 200000 box 0 200000 init normal 0.5 0 off 300000 writer 1\n"
    "param 7 c f32 2 3 4 box 0 3 0 4 init const 2.5 0 off 1100000 writer 1\n"
    "param 8 o f32 1 10 box 0 10 init ones 0 0 off 1100100 writer 1\n"
    "param 9 z f32 1 10 box 0 10 init zeros 0 0 off 1100200 writer 1\n"
    "param 10 s f32 0 box init normal 1 0 off 1100300 writer 1\n"
    "param 11 w2 f32 3 7 13 5 box 0 7 0 13 0 5 init normal 0.02 0 off 1100400 writer 1\n"
    "input 0 x f32 2 8 6 dist normal period 3\n"
    "input 1 t i32 2 8 5 dist int 50 period 2\n"
    "input 2 many f32 1 100000 dist normal 0 period 1\n"
    "input 3 tok i32 1 100000 dist int 7 period 1\n"
    "end\n";

/* Run init_param for param i into its arena offset; returns the pointer. */
static float *init(rt_ctx *ctx, int64_t i, int ref)
{
    float *dst = (float *)(rt_arena(ctx) + ctx->man.params[i].off);
    void *b[1] = {dst};
    int64_t ints[1] = {i};
    (ref ? rt_ref_init_param : rt_k_init_param)(ctx, b, ints, NULL);
    return dst;
}

/* 1 if the box of param `piece` equals the region of the full tensor `full`. */
static int box_matches(rt_ctx *ctx, int piece, const float *full, const float *got)
{
    const rt_param *p = &ctx->man.params[piece];
    int64_t n = rt_box_numel(p->ndim, p->lo, p->hi);
    for (int64_t q = 0; q < n; q++) {
        int64_t rest = q, idx = 0, stride = 1;
        for (int d = p->ndim - 1; d >= 0; d--) {
            int64_t ext = p->hi[d] - p->lo[d];
            idx += (p->lo[d] + rest % ext) * stride;
            rest /= ext;
            stride *= p->shape[d];
        }
        if (memcmp(&full[idx], &got[q], 4) != 0)
            return 0;
    }
    return 1;
}

static void test_params(rt_ctx *ctx)
{
    float *full = malloc(7 * 13 * 5 * 4);
    memcpy(full, init(ctx, 0, 0), 7 * 13 * 5 * 4);
    for (int piece = 1; piece <= 3; piece++) {
        float *got = init(ctx, piece, 0);
        check(box_matches(ctx, piece, full, got), "param w: box %d equals the same region of "
              "the full tensor (plan independence)", piece);
        int64_t n = rt_box_numel(3, ctx->man.params[piece].lo, ctx->man.params[piece].hi);
        float *keep = malloc((size_t)n * 4);
        memcpy(keep, got, (size_t)n * 4);
        init(ctx, piece, 1);
        check(memcmp(keep, got, (size_t)n * 4) == 0, "param w: box %d fast == reference "
              "(bitwise)", piece);
        free(keep);
    }
    /* determinism and keying */
    float *again = init(ctx, 0, 0);
    check(memcmp(again, full, 7 * 13 * 5 * 4) == 0, "param w: a second init is identical");
    float *w2 = init(ctx, 11, 0);
    check(memcmp(w2, full, 7 * 13 * 5 * 4) != 0, "param w2 (same shape, other name) differs");
    /* the big param is filled by all threads: 1, 2 and 3 give the reference's bits */
    const int64_t nb = 200000;
    float *ref = malloc((size_t)nb * 4);
    memcpy(ref, init(ctx, 6, 1), (size_t)nb * 4);
    int same = 1;
    for (int n = 1; n <= 3; n++) {
        rt_pool_init(n);
        same &= memcmp(init(ctx, 6, 0), ref, (size_t)nb * 4) == 0;
    }
    rt_pool_init(ctx->threads);
    check(same, "param big (200000): fast on 1, 2, 3 threads == reference (bitwise)");
    free(ref);
    ctx->man.seed = 1338;
    float *other = init(ctx, 0, 0);
    check(memcmp(other, full, 7 * 13 * 5 * 4) != 0, "param w with another seed differs");
    ctx->man.seed = 1337;
    init(ctx, 0, 0);
    /* the documented definition: element k = 0.02 * normal(key, k), computed in double */
    uint64_t key = rt_rng_key(1337, rt_fnv1a64("w"));
    int def = 1;
    for (int64_t k = 0; k < 7 * 13 * 5; k++) {
        double u1 = rt_rng_uniform(key, 2 * (uint64_t)k), u2 = rt_rng_uniform(key, 2 * (uint64_t)k + 1);
        float want = (float)(0.02 * (sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2)));
        def &= memcmp(&want, &full[k], 4) == 0;
    }
    check(def, "param w: element k is (float)(0.02 sqrt(-2 ln(1-u(2k))) cos(2 pi u(2k+1)))");
    free(full);

    float *u = malloc(300 * 200 * 4);
    memcpy(u, init(ctx, 4, 0), 300 * 200 * 4);
    float *ub = init(ctx, 5, 0);
    check(box_matches(ctx, 5, u, ub), "param u: inner box equals the full tensor's region");
    double mean = 0, mn = 1e9, mx = -1e9;
    for (int k = 0; k < 60000; k++) {
        mean += u[k];
        mn = fmin(mn, u[k]);
        mx = fmax(mx, u[k]);
    }
    mean /= 60000;
    check(mn >= -0.5 && mx < 1.5 && fabs(mean - 0.5) < 0.01 && mn < -0.49 && mx > 1.49,
          "uniform -0.5 1.5: range [%.4f, %.4f], mean %.4f", mn, mx, mean);
    free(u);

    float *g = init(ctx, 6, 0);
    double s = 0, s2 = 0, in1 = 0;
    for (int k = 0; k < 200000; k++) {
        s += g[k];
        s2 += (double)g[k] * g[k];
        in1 += fabs(g[k]) < 0.5;
    }
    mean = s / 200000;
    double sd = sqrt(s2 / 200000 - mean * mean);
    check(fabs(mean) < 4 * 0.5 / sqrt(200000) && fabs(sd - 0.5) < 0.005 &&
          fabs(in1 / 200000 - 0.6827) < 0.005,
          "normal 0.5: mean %.5f, std %.5f, P(|x| < std) = %.4f (0.6827)", mean, sd, in1 / 200000);

    float *c = init(ctx, 7, 0), *o = init(ctx, 8, 0), *z = init(ctx, 9, 0);
    int ok = 1;
    for (int k = 0; k < 12; k++)
        ok &= c[k] == 2.5f;
    for (int k = 0; k < 10; k++)
        ok &= o[k] == 1.0f && z[k] == 0.0f;
    check(ok, "const 2.5, ones and zeros");
    float *sc = init(ctx, 10, 0);
    float want = (float)rt_rng_normal(rt_rng_key(1337, rt_fnv1a64("s")), 0);
    check(*sc == want, "a 0-dimensional param is element 0 of its stream");
}

/* Fill dst with input idx's box [lo, hi) for step s (fast or reference). */
static void data(rt_ctx *ctx, int64_t idx, int64_t s, int nd, const int64_t *lo,
                 const int64_t *hi, void *dst, int ref)
{
    int64_t ints[3 + 2 * RT_MAXDIM] = {idx, s, nd};
    for (int d = 0; d < nd; d++) {
        ints[3 + 2 * d] = lo[d];
        ints[4 + 2 * d] = hi[d];
    }
    void *b[1] = {dst};
    (ref ? rt_ref_data : rt_k_data)(ctx, b, ints, NULL);
}

static void test_data(rt_ctx *ctx)
{
    float x[3][48], xb[48], xr[48];
    int64_t flo[2] = {0, 0}, fhi[2] = {8, 6};
    for (int s = 0; s < 3; s++)
        data(ctx, 0, s, 2, flo, fhi, x[s], 0);
    check(memcmp(x[0], x[1], sizeof x[0]) && memcmp(x[1], x[2], sizeof x[0]),
          "data x: consecutive steps differ");
    float x3[48];
    data(ctx, 0, 3, 2, flo, fhi, x3, 0);
    check(!memcmp(x3, x[0], sizeof x3), "data x: step 3 repeats step 0 (period 3)");
    /* a micro-batch / tensor-parallel box of step 1 */
    int64_t lo[2] = {2, 1}, hi[2] = {6, 4};
    data(ctx, 0, 1, 2, lo, hi, xb, 0);
    data(ctx, 0, 1, 2, lo, hi, xr, 1);
    int ok = 1;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 3; c++)
            ok &= !memcmp(&xb[r * 3 + c], &x[1][(r + 2) * 6 + c + 1], 4);
    check(ok, "data x: box [2:6, 1:4] of step 1 equals the full batch's region");
    check(!memcmp(xb, xr, 12 * 4), "data x: fast == reference (bitwise)");
    uint64_t key = rt_rng_key(1337, rt_fnv1a64("x"));
    ok = 1;
    for (int k = 0; k < 48; k++)
        ok &= x[2][k] == (float)rt_rng_normal(key, 2 * 48 + (uint64_t)k);
    check(ok, "data x: step 2 element k is stream element 2*numel + k");

    int32_t t[40], tb[10], tr[10], t2[40];
    int64_t tlo[2] = {0, 0}, thi[2] = {8, 5}, blo[2] = {5, 0}, bhi[2] = {7, 5};
    data(ctx, 1, 1, 2, tlo, thi, t, 0);
    data(ctx, 1, 3, 2, tlo, thi, t2, 0);
    data(ctx, 1, 1, 2, blo, bhi, tb, 0);
    data(ctx, 1, 1, 2, blo, bhi, tr, 1);
    check(!memcmp(t, t2, sizeof t), "data t: step 3 repeats step 1 (period 2)");
    check(!memcmp(tb, t + 25, sizeof tb) && !memcmp(tb, tr, sizeof tb),
          "data t: rows 5:7 equal the full batch's rows; fast == reference");

    static int32_t tok[100000];
    static float many[100000];
    int64_t one_lo[1] = {0}, one_hi[1] = {100000};
    data(ctx, 3, 0, 1, one_lo, one_hi, tok, 0);
    int hist[7] = {0}, inrange = 1;
    for (int k = 0; k < 100000; k++) {
        inrange &= tok[k] >= 0 && tok[k] < 7;
        if (tok[k] >= 0 && tok[k] < 7)
            hist[tok[k]]++;
    }
    int flat = 1;
    for (int v = 0; v < 7; v++)
        flat &= fabs(hist[v] - 100000.0 / 7) < 5 * sqrt(100000.0 / 7);
    check(inrange && flat, "data int 7: values in [0, 7), histogram flat (%d .. %d)", hist[0],
          hist[6]);
    data(ctx, 2, 0, 1, one_lo, one_hi, many, 0);
    double s = 0, s2 = 0;
    for (int k = 0; k < 100000; k++) {
        s += many[k];
        s2 += (double)many[k] * many[k];
    }
    double mean = s / 1e5, sd = sqrt(s2 / 1e5 - mean * mean);
    check(fabs(mean) < 0.02 && fabs(sd - 1) < 0.01, "data normal: mean %.4f, std %.4f", mean,
          sd);
}

/* Known answers: the hash, and golden values of the generator. */
static void test_golden(void)
{
    check(rt_fnv1a64("") == 0xcbf29ce484222325ULL && rt_fnv1a64("a") == 0xaf63dc4c8601ec8cULL,
          "fnv1a64 known answers");
    uint64_t key = rt_rng_key(1337, rt_fnv1a64("w"));
    check(rt_rng_bits(key, 0) == 0xc85c53776c8cf80aULL &&
          rt_rng_bits(key, 1) == 0x4b477a72dd7eef12ULL &&
          rt_rng_bits(key, 2) == 0x177e65f66f0167b1ULL,
          "golden bits of (seed 1337, \"w\") at counters 0, 1, 2");
    check(fabs(rt_rng_uniform(key, 5) - 0.681820154) < 1e-9 &&
          fabs(rt_rng_normal(key, 5) - 1.89920619) < 1e-7, "golden uniform(5) and normal(5)");
    /* uniform uses the 24 high bits */
    check(rt_rng_uniform(key, 0) == (float)(0xc85c53776c8cf80aULL >> 40) / 16777216.0f,
          "uniform(k) = (bits(k) >> 40) / 2^24");
}

int main(void)
{
    setenv("NNSC_RANK", "0", 1);
    setenv("NNSC_WORLD", "1", 1);
    char *argv[] = {"test_rt_rng", "--quiet", NULL};
    rt_ctx *ctx = rt_init(2, argv, manifest);
    test_golden();
    test_params(ctx);
    test_data(ctx);
    rt_finish(ctx);
    return check_done();
}
