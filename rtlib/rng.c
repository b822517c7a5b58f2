/* rng.c -- counter-based random numbers, param initialisation, synthetic data.
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
 * Synthetic evaluation batch e (data kernel step -1-e) is batch e mod P of
 * the streams keyed with seed ^ RT_EVAL_SALT: held out from training.
 * Inputs with `dist stream` read token files instead (data.c).
 */
#include <math.h>
#include <string.h>

#include "rt_internal.h"

#define RT_GOLDEN UINT64_C(0x9e3779b97f4a7c15)   /* 2^64 / golden ratio */
#define RT_KEY_SALT UINT64_C(0x6e6e73632d726e67) /* "nnsc-rng" */
#define RT_EVAL_SALT UINT64_C(0x6e6e73632d657661) /* "nnsc-eva": seed of evaluation batches */

/* The splitmix64 finaliser. */
static inline uint64_t rt_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

uint64_t rt_fnv1a64(const char *s)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= UINT64_C(0x100000001b3);
    }
    return h;
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
static inline int32_t rt_rng_int(uint64_t key, uint64_t k, int64_t range)
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

/* Check the data kernel's arguments; returns the input. */
static const rt_input *rt_data_args(rt_ctx *ctx, const int64_t *i)
{
    if (i[0] < 0 || i[0] >= ctx->man.ninputs)
        rt_fatal(ctx, 1, "data: input index %lld out of range (manifest has %d)",
                 (long long)i[0], ctx->man.ninputs);
    const rt_input *in = &ctx->man.inputs[i[0]];
    if (i[2] != in->ndim)
        rt_fatal(ctx, 1, "data: input %s: step %lld, ndim %lld (manifest says %d)", in->name,
                 (long long)i[1], (long long)i[2], in->ndim);
    for (int d = 0; d < in->ndim; d++) {
        int64_t lo = i[3 + 2 * d], hi = i[4 + 2 * d];
        if (lo < 0 || hi <= lo || hi > in->shape[d])
            rt_fatal(ctx, 1, "data: input %s: box [%lld, %lld) of dim %d outside [0, %lld)",
                     in->name, (long long)lo, (long long)hi, d, (long long)in->shape[d]);
    }
    return in;
}

/* Stream key and first counter of a synthetic input's batch for the data
 * kernel's step (< 0: evaluation batch -1-step). */
static void rt_data_base(const rt_ctx *ctx, const rt_input *in, int64_t step, uint64_t *key,
                         uint64_t *base)
{
    int64_t batch = step >= 0 ? step : -1 - step;
    *key = rt_rng_key(step >= 0 ? ctx->man.seed : ctx->man.seed ^ RT_EVAL_SALT, in->key);
    *base = (uint64_t)(batch % in->period) * (uint64_t)rt_shape_numel(in->ndim, in->shape);
}

/* A stream input's box from the token files (data.c); ref: the reference reader. */
static void rt_data_tokens(rt_ctx *ctx, const rt_input *in, void *dst, const int64_t *i, int ref)
{
    int64_t lo[2] = {i[3], i[5]}, hi[2] = {i[4], i[6]};
    rt_data_stream(ctx, in, i[1], lo, hi, dst, ref);
}

/* Value of element j of an input's endless stream, stored as element q of dst. */
static inline void rt_data_elem(const rt_input *in, uint64_t key, uint64_t j, void *dst,
                                int64_t q)
{
    if (in->dist == RT_DIST_ZEROS)
        ((float *)dst)[q] = 0.0f;
    else if (in->dist == RT_DIST_NORMAL)
        ((float *)dst)[q] = (float)rt_rng_normal(key, j);
    else
        ((int32_t *)dst)[q] = rt_rng_int(key, j, in->range);
}

/* rt_k_data, fast path: contiguous runs of the box. */
void rt_data_box(rt_ctx *ctx, void *dst, const int64_t *i)
{
    const rt_input *in = rt_data_args(ctx, i);
    if (in->dist == RT_DIST_STREAM) {
        rt_data_tokens(ctx, in, dst, i, 0);
        return;
    }
    int64_t lo[RT_MAXDIM], hi[RT_MAXDIM];
    for (int d = 0; d < in->ndim; d++) {
        lo[d] = i[3 + 2 * d];
        hi[d] = i[4 + 2 * d];
    }
    uint64_t key, base;
    rt_data_base(ctx, in, i[1], &key, &base);
    rt_box_iter it;
    rt_box_iter_init(&it, in->ndim, in->shape, lo, hi);
    while (rt_box_iter_next(&it)) {
        uint64_t j = base + (uint64_t)it.start;
        if (in->dist == RT_DIST_INT) {
            int32_t *o = (int32_t *)dst + it.pos;
            for (int64_t t = 0; t < it.run; t++)
                o[t] = rt_rng_int(key, j + (uint64_t)t, in->range);
        } else if (in->dist == RT_DIST_ZEROS) {
            memset((float *)dst + it.pos, 0, sizeof(float) * (size_t)it.run);
        } else {
            float *o = (float *)dst + it.pos;
            for (int64_t t = 0; t < it.run; t++)
                o[t] = (float)rt_rng_normal(key, j + (uint64_t)t);
        }
    }
}

/* The reference: element by element. */
void rt_ref_data(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const rt_input *in = rt_data_args(ctx, i);
    if (in->dist == RT_DIST_STREAM) {
        rt_data_tokens(ctx, in, b[0], i, 1);
        return;
    }
    uint64_t key, base;
    rt_data_base(ctx, in, i[1], &key, &base);
    int64_t n = 1;
    for (int d = 0; d < in->ndim; d++)
        n *= i[4 + 2 * d] - i[3 + 2 * d];
    for (int64_t q = 0; q < n; q++) {
        int64_t rest = q, logical = 0, stride = 1;
        for (int d = in->ndim - 1; d >= 0; d--) {
            int64_t lo = i[3 + 2 * d], ext = i[4 + 2 * d] - lo;
            logical += (lo + rest % ext) * stride;
            rest /= ext;
            stride *= in->shape[d];
        }
        uint64_t j = base + (uint64_t)logical;
        rt_data_elem(in, key, j, b[0], q);
    }
}
