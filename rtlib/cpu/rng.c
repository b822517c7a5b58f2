/* rng.c -- counter-based random numbers and param initialisation.
 *
 * Every random value is a pure function of (seed, fnv1a64(tensor name),
 * element counter), so any rank can make any box of any tensor without
 * talking to the others, and every plan starts from the same logical weights
 * and sees the same data as the single-device program.
 *
 *   key(seed, h)  = mix(mix(seed ^ 0x6e6e73632d726e67) ^ h)
 *   bits(key, k)  = mix(key ^ mix(k + 0x9e3779b97f4a7c15))
 *   uniform(k)    = (bits(k) >> 40) * 2^-24                         in [0, 1)
 *   normal(k)     = sqrt(-2 ln(1 - uniform(2k))) cos(2 pi uniform(2k+1))   (double)
 *   int(k, R)     = ((bits(k) >> 32) * R) >> 32                     in [0, R)
 *
 * where mix is the splitmix64 finaliser (a bijection on 64-bit words with
 * full avalanche), so distinct counters give distinct words for one key.
 *
 * The data kernel (io/data.c) makes synthetic inputs from these streams.
 */
#include <math.h>
#include <string.h>

#include "cpu/rt_cpu.h"

#define RT_GOLDEN UINT64_C(0x9e3779b97f4a7c15)   /* 2^64 / golden ratio */
#define RT_KEY_SALT UINT64_C(0x6e6e73632d726e67) /* "nnsc-rng" */

/* The splitmix64 finaliser. */
static inline uint64_t rt_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

uint64_t rt_rng_key(uint64_t seed, uint64_t name_hash)
{
    return rt_mix64(rt_mix64(seed ^ RT_KEY_SALT) ^ name_hash);
}

uint64_t rt_rng_bits(uint64_t key, uint64_t k)
{
    return rt_mix64(key ^ rt_mix64(k + RT_GOLDEN));
}

float rt_rng_uniform(uint64_t key, uint64_t k)
{
    return (float)(rt_rng_bits(key, k) >> 40) * (1.0f / 16777216.0f);
}

double rt_rng_normal(uint64_t key, uint64_t k)
{
    double u1 = rt_rng_uniform(key, 2 * k);
    double u2 = rt_rng_uniform(key, 2 * k + 1);
    /* 1 - u1 is in (0, 1]: the log is finite */
    return sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2);
}

/* Integer in [0, range) from counter k (multiply-shift, no modulo bias to speak of). */
int32_t rt_rng_int(uint64_t key, uint64_t k, int64_t range)
{
    return (int32_t)(((rt_rng_bits(key, k) >> 32) * (uint64_t)range) >> 32);
}

double rt_param_value(const rt_param *p, uint64_t key, uint64_t k)
{
    switch (p->init) {
    case RT_INIT_ZEROS: return 0.0;
    case RT_INIT_ONES: return 1.0;
    case RT_INIT_CONST: return p->a;
    case RT_INIT_NORMAL: return p->a * rt_rng_normal(key, k);
    case RT_INIT_UNIFORM: return p->a + (p->b - p->a) * (double)rt_rng_uniform(key, k);
    }
    RT_ASSERT(!"unknown init kind");
}

/* Store value v as element q of dst (f32 or i32). */
static inline void rt_store(void *dst, rt_dtype dt, int64_t q, double v)
{
    if (dt == RT_F32)
        ((float *)dst)[q] = (float)v;
    else
        ((int32_t *)dst)[q] = (int32_t)lrint(v);
}

/* Fill count elements of a param, logical indices start.., into dst[pos..]. */
static void rt_param_run(const rt_param *p, uint64_t key, int64_t start, int64_t count,
                         void *dst, int64_t pos)
{
    if (p->dtype == RT_F32) {
        float *o = (float *)dst + pos;
        switch (p->init) {
        case RT_INIT_ZEROS:
        case RT_INIT_ONES:
        case RT_INIT_CONST: {
            float c = (float)rt_param_value(p, key, 0);
            for (int64_t t = 0; t < count; t++)
                o[t] = c;
            return;
        }
        case RT_INIT_NORMAL:
            for (int64_t t = 0; t < count; t++)
                o[t] = (float)(p->a * rt_rng_normal(key, (uint64_t)(start + t)));
            return;
        case RT_INIT_UNIFORM:
            for (int64_t t = 0; t < count; t++)
                o[t] = (float)(p->a + (p->b - p->a) *
                                          (double)rt_rng_uniform(key, (uint64_t)(start + t)));
            return;
        }
    }
    for (int64_t t = 0; t < count; t++)
        rt_store(dst, p->dtype, pos + t, rt_param_value(p, key, (uint64_t)(start + t)));
}

/* The manifest's param i, or a fatal error naming the caller's bad index. */
static const rt_param *rt_param_at(rt_ctx *ctx, int64_t i)
{
    if (i < 0 || i >= ctx->man.nparams)
        rt_fatal(ctx, 1, "init_param: param index %lld out of range (manifest has %d)",
                 (long long)i, ctx->man.nparams);
    return &ctx->man.params[i];
}

/* One run of a param box, cut across the pool's threads. */
typedef struct rt_run_arg {
    const rt_param *p;      /* the param */
    uint64_t key;           /* its stream */
    int64_t start, pos;     /* logical index of the run's first element; its box position */
    void *dst;              /* the box */
} rt_run_arg;

/* Elements [lo, hi) of a run (every element depends on its index only). */
static void rt_param_run_part(const void *q, int64_t lo, int64_t hi, int t)
{
    const rt_run_arg *a = q;
    rt_param_run(a->p, a->key, a->start + lo, hi - lo, a->dst, a->pos + lo);
}

/* rt_k_init_param, fast path: walk the box as contiguous logical runs; long
 * runs are filled by all threads (init of big params is otherwise the
 * slowest part of starting a rank). */
void rt_init_param_box(rt_ctx *ctx, void *dst, int64_t i)
{
    const rt_param *p = rt_param_at(ctx, i);
    uint64_t key = rt_rng_key(ctx->man.seed, p->key);
    rt_box_iter it;
    rt_box_iter_init(&it, p->ndim, p->shape, p->lo, p->hi);
    while (rt_box_iter_next(&it)) {
        rt_run_arg a = {p, key, it.start, it.pos, dst};
        rt_parallel_for(rt_param_run_part, &a, it.run, RT_EW_UNIT, RT_EW_GRAIN / 8);
    }
}

/* The reference: every element on its own, index arithmetic done the long way. */
void rt_ref_init_param(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const rt_param *p = rt_param_at(ctx, i[0]);
    uint64_t key = rt_rng_key(ctx->man.seed, p->key);
    int64_t n = rt_box_numel(p->ndim, p->lo, p->hi);
    for (int64_t q = 0; q < n; q++) {
        int64_t rest = q, logical = 0, stride = 1;
        for (int d = p->ndim - 1; d >= 0; d--) {
            int64_t ext = p->hi[d] - p->lo[d];
            logical += (p->lo[d] + rest % ext) * stride;
            rest /= ext;
            stride *= p->shape[d];
        }
        rt_store(b[0], p->dtype, q, rt_param_value(p, key, (uint64_t)logical));
    }
}
