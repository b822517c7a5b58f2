/* test_rt_lowp.c -- mixed precision on the CPU (rtlib/cpu/lowp.c): rounding to
 * bf16 and the matmul_bf16 kernel.
 *
 * Rounding: exact on every bf16 value, against an independent model (the
 * nearer of the two neighbouring bf16 values, ties to the even one, the
 * overflow threshold of IEEE rounding) on every f32 whose low half is one of
 * the critical patterns and on a stride through all 2^32 patterns; NaN,
 * infinities, signed zeros, subnormals, named ties.
 *
 * matmul_bf16: the fast kernel against rt_ref_matmul_bf16 on awkward shapes
 * with all transposes and acc, on every ISA path this CPU has; equal to the
 * f32 matmul on operands rounded beforehand (what it promises), also when it
 * stages its operands in blocks and on 3 threads; operands left untouched
 * (they are the f32 master weights); results that must differ from the f32
 * matmul do; NaN and inf go through; K = 0; guard words after every buffer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rt_internal.h"
#include "cpu/rt_lowp.h"

/* ---- data helpers: rt_testdata.h */
#define TD_SEED 4242
#include "rt_testdata.h"

/* Bits of a float, and the float of bits. */
static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ---- rounding */

/* The independent model of bf16 rounding of the f32 with bits u: the bits
 * of the result.  For finite x, lo is x with its low half cut (the bf16
 * neighbour towards zero) and hi the next bf16 away from zero; the nearer
 * wins, a tie goes to the one whose last kept bit is 0.  Past the largest
 * bf16, hi is infinity, which IEEE rounding counts as 2^128 when measuring
 * the distance. */
static uint32_t model_round(uint32_t u)
{
    if ((u & 0x7f800000u) == 0x7f800000u)   /* inf, NaN: handled by the caller */
        return u;
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    double x = fabs((double)float_of(u)), l = fabs((double)float_of(lo));
    double h = (hi & 0x7f800000u) == 0x7f800000u ? ldexp(1.0, 128) : fabs((double)float_of(hi));
    if (x - l < h - x)
        return lo;
    if (x - l > h - x)
        return hi;
    return (lo & 0x10000u) ? hi : lo;
}

/* Does the rounding of bits u agree with the model (NaN: stays a NaN of
 * the same sign; inf: stays)? */
static int round_ok(uint32_t u)
{
    uint32_t r = bits_of(rt_bf16_round(float_of(u)));
    if ((r & 0xffffu) != 0)
        return 0;
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (r & 0x7fffffffu) > 0x7f800000u && (r >> 31) == (u >> 31);
    if ((u & 0x7fffffffu) == 0x7f800000u)
        return r == u;
    return r == model_round(u);
}

static void test_round(void)
{
    /* every bf16 value (low half 0) rounds to itself; NaNs stay NaNs */
    int bad = 0, nans = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        uint32_t u = h << 16;
        uint32_t r = bits_of(rt_bf16_round(float_of(u)));
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            nans++;
            bad += !((r & 0x7fffffffu) > 0x7f800000u && r >> 31 == u >> 31);
        } else {
            bad += r != u;
        }
    }
    check(!bad, "all 65536 bf16 values round to themselves (%d of them NaNs, which stay NaN); "
          "%d wrong", nans, bad);

    /* every top half with the critical low halves: just below, at and just
       above the midpoint, the ends, and a random one per top half */
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7ffe, 0x7fff, 0x8000, 0x8001, 0xfffe, 0xffff};
    int64_t n = 0;
    bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        for (size_t k = 0; k < sizeof lows / sizeof lows[0]; k++, n++)
            bad += !round_ok(h << 16 | lows[k]);
        bad += !round_ok(h << 16 | (uint32_t)(lcg() >> 48));
        n++;
    }
    /* a stride through all 2^32 patterns */
    for (uint64_t u = 0; u < ((uint64_t)1 << 32); u += 4099, n++)
        bad += !round_ok((uint32_t)u);
    check(!bad, "rounding = nearest bf16, ties to even, on %lld patterns (all top halves x "
          "critical low halves, a stride through all 2^32): %d wrong", (long long)n, bad);

    /* named cases */
    static const struct { uint32_t in, out; const char *what; } cases[] = {
        {0x3f808000u, 0x3f800000u, "1 + 2^-8 (tie): to 1, the even one"},
        {0x3f818000u, 0x3f820000u, "1 + 3 2^-8 (tie): up to the even one"},
        {0x3f807fffu, 0x3f800000u, "just below a tie: down"},
        {0x3f808001u, 0x3f810000u, "just above a tie: up"},
        {0xbf808001u, 0xbf810000u, "negative: away from zero above the tie"},
        {0x7f7fffffu, 0x7f800000u, "largest f32: overflows to +inf"},
        {0xff7fffffu, 0xff800000u, "-largest f32: to -inf"},
        {0x7f7f7fffu, 0x7f7f0000u, "below the overflow threshold: largest bf16"},
        {0x7f7f8000u, 0x7f800000u, "at the overflow threshold (tie, odd largest bf16): +inf"},
        {0x7f800000u, 0x7f800000u, "+inf stays"},
        {0xff800000u, 0xff800000u, "-inf stays"},
        {0x80000000u, 0x80000000u, "-0 stays -0"},
        {0x00000001u, 0x00000000u, "smallest subnormal: to +0"},
        {0x80008000u, 0x80000000u, "subnormal tie: to -0 (even)"},
        {0x00018000u, 0x00020000u, "subnormal tie up to even"},
        {0x007fffffu, 0x00800000u, "largest subnormal: up to the smallest normal"},
    };
    bad = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint32_t r = bits_of(rt_bf16_round(float_of(cases[k].in)));
        if (r != cases[k].out) {
            printf("     %08x -> %08x, want %08x: %s\n", cases[k].in, r, cases[k].out,
                   cases[k].what);
            bad++;
        }
    }
    check(!bad, "%zu named cases (ties, overflow threshold, inf, -0, subnormals)",
          sizeof cases / sizeof cases[0]);

    /* NaNs whose payload is only in the low half stay NaN, sign kept */
    static const uint32_t nan_in[] = {0x7f800001u, 0xff800001u, 0x7f80ffffu, 0x7fc00000u,
                                      0xffffffffu};
    int nok = 1;
    for (size_t k = 0; k < sizeof nan_in / sizeof nan_in[0]; k++) {
        float r = rt_bf16_round(float_of(nan_in[k]));
        nok &= isnan(r) && (bits_of(r) >> 31) == (nan_in[k] >> 31) && !(bits_of(r) & 0xffffu);
    }
    check(nok, "NaNs (signalling, payload only in the low half, negative) stay NaN, sign kept");

    /* the array form: the same as one by one, in place too */
    enum { NA = 1037 };
    float src[NA], dst[NA], inplace[NA];
    for (int k = 0; k < NA; k++)
        src[k] = inplace[k] = float_of((uint32_t)(lcg() >> 32));
    rt_bf16_round_n(src, dst, NA);
    rt_bf16_round_n(inplace, inplace, NA);
    int same = 1;
    for (int k = 0; k < NA; k++) {
        uint32_t want = bits_of(rt_bf16_round(src[k]));
        same &= bits_of(dst[k]) == want && bits_of(inplace[k]) == want;
    }
    check(same, "rt_bf16_round_n (%d random patterns, and in place) = rt_bf16_round each", NA);
}

/* ---- matmul_bf16 */

/* Values equal element by element (+0 and -0 are equal: matmul.c's edge
 * tiles may turn a -0 sum into +0; NaN only where the other has NaN). */
static int same_values(const float *a, const float *b, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        if (!(a[k] == b[k] || (isnan(a[k]) && isnan(b[k]))))
            return 0;
    return 1;
}

/* One case: fast vs reference, vs rt_matmul on rounded operands, operands
 * untouched, guards intact.  *err gets the normalized error vs reference. */
static int mm_case(int64_t M, int64_t K, int64_t N, int ta, int tb, int acc, double *err)
{
    float *A = fbuf(M * K, -1, 1), *B = fbuf(K * N, -1, 1), *C = fbuf(M * N, -1, 1);
    float *A0 = fdup(A, M * K), *B0 = fdup(B, K * N);
    float *R = fdup(C, M * N), *F = fdup(C, M * N);
    int64_t ints[6] = {M, K, N, ta, tb, acc};
    void *bf[3] = {A, B, C}, *br[3] = {A, B, R};
    rt_k_matmul_bf16(NULL, bf, ints, NULL);
    rt_ref_matmul_bf16(NULL, br, ints, NULL);
    *err = nerr(C, R, M * N, 1.0);
    /* the f32 matmul on operands rounded beforehand */
    float *Ar = fdup(A, M * K), *Br = fdup(B, K * N);
    rt_bf16_round_n(Ar, Ar, M * K);
    rt_bf16_round_n(Br, Br, K * N);
    rt_matmul(M, K, N, Ar, ta, Br, tb, F, acc);
    int ok = *err <= 2e-6 * sqrt((double)K) + 1e-6 && same_values(C, F, M * N) &&
             !memcmp(A, A0, (size_t)(M * K + GUARD) * 4) &&
             !memcmp(B, B0, (size_t)(K * N + GUARD) * 4) && guard_ok(C, M * N);
    free(A);
    free(B);
    free(C);
    free(A0);
    free(B0);
    free(R);
    free(F);
    free(Ar);
    free(Br);
    return ok;
}

static void test_matmul_bf16(void)
{
    static const char *const isas[] = {"avx512", "avx2", "scalar"};
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {1, 7, 33}, {7, 1, 100}, {33, 257, 1}, {100, 33, 7}, {257, 100, 33},
        {1, 257, 257}, {257, 1, 257}, {100, 100, 100}, {33, 7, 257}, {15, 33, 31}, {14, 256, 32},
        {171, 400, 40}, {15, 40, 3080},
    };
    for (int s = 0; s < 3; s++) {
        if (rt_isa_force(isas[s]) != 0) {
            printf("skip matmul_bf16 on %s: this CPU lacks it\n", isas[s]);
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
        check(!bad, "matmul_bf16 %-6s: %d cases (shapes x 4 transposes x acc) vs reference "
              "(worst %.2e), = f32 matmul of rounded operands, operands untouched; %d bad",
              isas[s], cases, worst, bad);
    }
    rt_isa_force(NULL);

    /* K = 0: C is zeroed (acc = 0) or left alone (acc = 1) */
    float C[4] = {1, 2, 3, 4};
    int64_t i0[6] = {2, 0, 2, 0, 0, 1};
    void *b0[3] = {C, C, C};
    rt_k_matmul_bf16(NULL, b0, i0, NULL);
    int ok = C[0] == 1 && C[3] == 4;
    i0[5] = 0;
    rt_k_matmul_bf16(NULL, b0, i0, NULL);
    check(ok && C[0] == 0 && C[3] == 0, "matmul_bf16 with K = 0 (acc keeps C, no acc zeroes it)");
}

/* Blocked staging (a small staging limit) and 3 threads give the same
 * values as one unblocked call on one thread, for every transpose and acc. */
static void test_blocked(void)
{
    static const int64_t shapes[][3] = {{200, 50, 300}, {70, 130, 65}, {129, 3, 1000}};
    int bad = 0, cases = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int combo = 0; combo < 8; combo++) {
            int64_t M = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
            int64_t ints[6] = {M, K, N, combo & 1, (combo >> 1) & 1, combo >> 2};
            float *A = fbuf(M * K, -2, 2), *B = fbuf(K * N, -2, 2), *C = fbuf(M * N, -1, 1);
            float *C2 = fdup(C, M * N), *C3 = fdup(C, M * N);
            void *b1[3] = {A, B, C}, *b2[3] = {A, B, C2}, *b3[3] = {A, B, C3};
            rt_k_matmul_bf16(NULL, b1, ints, NULL);     /* whole, 1 thread */
            rt_bf16_stage_limit(1000);                  /* blocks of 64 rows / columns */
            rt_k_matmul_bf16(NULL, b2, ints, NULL);
            rt_pool_init(3);
            rt_k_matmul_bf16(NULL, b3, ints, NULL);     /* blocked, 3 threads */
            rt_pool_free();
            rt_bf16_stage_limit(0);
            cases++;
            if (!same_values(C, C2, M * N) || !same_values(C, C3, M * N) ||
                !guard_ok(C2, M * N) || !guard_ok(C3, M * N)) {
                bad++;
                printf("     M=%lld K=%lld N=%lld transA=%d transB=%d acc=%d differ\n",
                       (long long)M, (long long)K, (long long)N, combo & 1, (combo >> 1) & 1,
                       combo >> 2);
            }
            free(A);
            free(B);
            free(C);
            free(C2);
            free(C3);
        }
    check(!bad, "matmul_bf16 staged in blocks of 64 rows/columns, and on 3 threads: the same "
          "values as one call on one thread (%d cases, %d differ)", cases, bad);
}

/* What the rounding changes: exact cases, the size of the difference from
 * the f32 matmul on random data, NaN and inf. */
static void test_differs(void)
{
    /* 1x1x1: (1 + 2^-9) * 3 -> 1 * 3: the f32 matmul keeps 3.005859375 */
    float a = 1.0f + 0x1p-9f, bb = 3.0f, c = -7.0f, c32 = -7.0f;
    int64_t i1[6] = {1, 1, 1, 0, 0, 0};
    void *b1[3] = {&a, &bb, &c}, *b2[3] = {&a, &bb, &c32};
    rt_k_matmul_bf16(NULL, b1, i1, NULL);
    rt_k_matmul(NULL, b2, i1, NULL);
    check(c == 3.0f && c32 == 3.005859375f && a == 1.0f + 0x1p-9f,
          "(1 + 2^-9) x 3: bf16 gives %.9g, f32 %.9g; the operand stays 1 + 2^-9", c, c32);

    /* random operands: bf16 differs from f32 by about the bf16 epsilon, not more */
    int64_t M = 64, K = 256, N = 48;
    float *A = fbuf(M * K, -1, 1), *B = fbuf(K * N, -1, 1);
    float *C = fbuf(M * N, 0, 1), *F = fbuf(M * N, 0, 1);
    int64_t ints[6] = {M, K, N, 0, 0, 0};
    void *bc[3] = {A, B, C}, *bf[3] = {A, B, F};
    rt_k_matmul_bf16(NULL, bc, ints, NULL);
    rt_k_matmul(NULL, bf, ints, NULL);
    double e = nerr(C, F, M * N, 1.0);
    int64_t diff = 0;
    for (int64_t k = 0; k < M * N; k++)
        diff += C[k] != F[k];
    check(e > 1e-4 && e < 2e-2 && diff > M * N * 9 / 10,
          "64x256x48 on [-1, 1): %lld of %lld elements differ from the f32 matmul, max "
          "normalized difference %.2e (in (1e-4, 2e-2): bf16 has 8 significant bits)",
          (long long)diff, (long long)(M * N), e);
    free(A);
    free(B);
    free(C);
    free(F);

    /* NaN and inf go through: a NaN in row 0 of A makes row 0 of C NaN, an inf in
       row 1 makes row 1 +-inf or NaN, row 2 stays finite */
    float A2[3 * 2] = {NAN, 1, INFINITY, 1, 1, 1}, B2[2 * 2] = {1, 2, 3, 4}, C2[3 * 2];
    int64_t i2[6] = {3, 2, 2, 0, 0, 0};
    void *b3[3] = {A2, B2, C2};
    rt_k_matmul_bf16(NULL, b3, i2, NULL);
    check(isnan(C2[0]) && isnan(C2[1]) && isinf(C2[2]) && C2[2] > 0 && isinf(C2[3]) &&
              C2[4] == 4 && C2[5] == 6,
          "NaN and inf in A go through to their rows of C; other rows exact");
}

/* ---- cvt_bf16, cvt_f32 */

static void test_cvt(void)
{
    /* cvt_bf16 on a stride through every pattern, with the critical low halves */
    enum { N = 1 << 16 };
    uint32_t *x = malloc(4 * (N + 1)), *w = malloc(4 * (N / 2 + 2)), *wr = malloc(4 * (N / 2 + 2));
    uint32_t *y = malloc(4 * (N + 1));
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
    int bad = 0, badref = 0;
    for (int pass = 0; pass < 6; pass++) {
        for (uint32_t h = 0; h < N; h++) x[h] = h << 16 | (pass < 6 ? lows[pass] : 0);
        rt_k_cvt_bf16(NULL, (void *[]){x, w}, (const int64_t[]){N, N / 2}, NULL);
        rt_ref_cvt_bf16(NULL, (void *[]){x, wr}, (const int64_t[]){N, N / 2}, NULL);
        const uint16_t *v = (const uint16_t *)w;
        for (uint32_t h = 0; h < N; h++) bad += (uint32_t)v[h] << 16 != bits_of(rt_bf16_round(float_of(x[h])));
        badref += memcmp(w, wr, 4 * (N / 2)) != 0;
    }
    for (uint64_t u = 0; u < (1ull << 32); u += 65521 * 16) {   /* a stride through all patterns */
        x[0] = (uint32_t)u;
        rt_k_cvt_bf16(NULL, (void *[]){x, w}, (const int64_t[]){1, 1}, NULL);
        bad += (w[0] & 0xffffu) << 16 != bits_of(rt_bf16_round(float_of(x[0]))) || w[0] >> 16 != 0;
    }
    check(!bad && !badref, "cvt_bf16 is rt_bf16_round's top half on every pattern tried (%d wrong; %d passes "
          "unlike rt_ref_cvt_bf16)", bad, badref);
    /* odd n: the last word's high half 0, nothing written past it */
    for (int n = 1; n <= 9; n += 2) {
        for (int k = 0; k < n; k++) x[k] = bits_of(1.0f + (float)k / 8);
        for (int k = 0; k < 8; k++) w[k] = 0xdeadbeefu;
        rt_k_cvt_bf16(NULL, (void *[]){x, w}, (const int64_t[]){n, (n + 1) / 2}, NULL);
        check(w[n / 2] >> 16 == 0 && w[(n + 1) / 2] == 0xdeadbeefu, "cvt_bf16 n=%d: the pad half is 0 and "
              "the word after untouched", n);
    }
    /* cvt_f32: every bf16 value widened exactly */
    uint16_t *hv = (uint16_t *)w;
    for (uint32_t h = 0; h < N; h++) hv[h] = (uint16_t)h;
    y[N] = 0xdeadbeefu;
    rt_k_cvt_f32(NULL, (void *[]){w, y}, (const int64_t[]){N, N / 2}, NULL);
    bad = 0;
    for (uint32_t h = 0; h < N; h++) bad += y[h] != h << 16;
    rt_ref_cvt_f32(NULL, (void *[]){w, x}, (const int64_t[]){N, N / 2}, NULL);
    check(!bad && !memcmp(x, y, 4 * N) && y[N] == 0xdeadbeefu,
          "cvt_f32 widens all 65536 bf16 values exactly, as rt_ref_cvt_f32 (%d wrong)", bad);
    free(x), free(w), free(wr), free(y);
}

int main(int argc, char **argv)
{
    printf("ISA: %s\n", rt_isa_name());
    test_round();
    test_matmul_bf16();
    test_blocked();
    test_differs();
    test_cvt();
    return check_done();
}
