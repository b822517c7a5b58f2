/* rt_testdata.h -- random test data with guard words, and the normalised
 * error, shared by the kernel tests (test_rt_kernels.c, test_rt_lowp.c).
 *
 * Define TD_SEED before including to start the generator elsewhere.
 */
#ifndef NNSC_RT_TESTDATA_H
#define NNSC_RT_TESTDATA_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef TD_SEED
#define TD_SEED 12345
#endif

static uint64_t lcg_state = TD_SEED;

/* 64 pseudo-random bits. */
static inline uint64_t lcg(void)
{
    lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return lcg_state;
}

/* Uniform in [lo, hi). */
static inline float frand(float lo, float hi)
{
    return lo + (hi - lo) * (float)((lcg() >> 40) * (1.0 / 16777216.0));
}

#define GUARD 16                 /* guard floats after each buffer */
#define GUARD_BITS 0x7fc0dead    /* a NaN pattern no kernel writes */

/* n floats uniform in [lo, hi) plus guard words. */
static inline float *fbuf(int64_t n, float lo, float hi)
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

/* A copy of a buffer made by fbuf: n floats and their guard words. */
static inline float *fdup(const float *src, int64_t n)
{
    float *p = malloc((size_t)(n + GUARD) * sizeof *p);
    memcpy(p, src, (size_t)(n + GUARD) * sizeof *p);
    return p;
}

/* 1 if the guard words after p[n] are intact. */
static inline int guard_ok(const float *p, int64_t n)
{
    for (int k = 0; k < GUARD; k++) {
        uint32_t g;
        memcpy(&g, &p[n + k], 4);
        if (g != GUARD_BITS)
            return 0;
    }
    return 1;
}

/* max |a - b| / max(max |b|, floor): the normalised max error; NaN
 * anywhere gives NaN (a failure). */
static inline double nerr(const float *a, const float *b, int64_t n, double floor)
{
    double md = 0, mb = floor;
    for (int64_t k = 0; k < n; k++) {
        double d = fabs((double)a[k] - b[k]);
        if (!(d <= md))
            md = d;
        if (fabs(b[k]) > mb)
            mb = fabs(b[k]);
    }
    return md / mb;
}

#endif
