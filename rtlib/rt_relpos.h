/* rt_relpos.h -- T5's relative position buckets (op relpos_bias): the one
 * definition that the CPU kernels, the reference and the CUDA kernels
 * share (codegen/cuda.c prints RT_RELPOS_BODY after the preprocessor into a
 * device function).
 *
 * The bucket of a key s seen from a query t, d = s - t, as Hugging Face's
 * T5Attention._relative_position_bucket computes it (in float32, as torch
 * does): with nb buckets, bidirectional (an encoder) gives half of them to
 * keys after the query (d > 0) and takes |d|; otherwise (a decoder) a key
 * after the query counts as distance 0 and one before as t - s.  Of the n
 * buckets of a side, distances below n / 2 (max_exact) have a bucket each;
 * the others share the rest, log-spaced up to max_distance, past which all
 * fall into the last:
 *
 *     max_exact + (int)(logf(d / max_exact) / (float)log(max_distance / max_exact) * (n - max_exact))
 *
 * The compiler refuses n < 2 and max_distance <= max_exact (ir/graph.c);
 * for them the body returns the side's first bucket (no undefined
 * conversion).  A GPU's logf may differ from the C library's in the last
 * place, which can move a distance whose value lands exactly on a bucket
 * boundary into the neighbouring bucket (torch has the same difference). */
#ifndef RT_RELPOS_H
#define RT_RELPOS_H

/* Statements returning the bucket of distance d (long long; modified),
 * given nb (long long), bidir (int), maxd (long long). */
#define RT_RELPOS_BODY                                                                     \
    long long n_ = bidir ? nb / 2 : nb, r_ = 0;                                            \
    if (bidir) {                                                                           \
        if (d > 0) r_ = n_;                                                                \
        if (d < 0) d = -d;                                                                 \
    } else {                                                                               \
        d = d < 0 ? -d : 0;                                                                \
    }                                                                                      \
    long long me_ = n_ / 2;                                                                \
    if (d < me_) return r_ + d;                                                            \
    if (me_ < 1 || maxd <= me_) return r_;                                                 \
    long long v_ = me_ + (long long)(logf((float)d / (float)me_) /                         \
                                     (float)log((double)maxd / (double)me_) * (float)(n_ - me_)); \
    return r_ + (v_ < n_ - 1 ? v_ : n_ - 1);

#define RT_RELPOS_STR_(...) #__VA_ARGS__
#define RT_RELPOS_STR(...) RT_RELPOS_STR_(__VA_ARGS__)

#ifndef __CUDACC_RTC__
#include <math.h>
/* The bucket of distance d = s - t. */
static inline long long rt_relpos_bucket(long long d, long long nb, int bidir, long long maxd)
{
    RT_RELPOS_BODY
}
#endif

#endif
