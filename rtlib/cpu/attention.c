/* attention.c -- multi-head attention (optionally causal, optionally
 * grouped-query), forward and backward, flash-attention style.
 *
 * Tensors q, Y, dY, dq are (B, T, H, D) and k, v, dk, dv (B, S, Hkv, D) (S
 * keys: S = T when causal; cross-attention otherwise): head (b, h) is a
 * T x D (S x D) matrix whose rows are H*D (Hkv*D) floats apart,
 * which rt_gemm (matmul.c) takes as it is.  Query head h reads key/value
 * head h / (H / Hkv) (grouped-query attention; Hkv = H: multi-head).  lse is
 * (B, H, T).  Per head, with S = scale q k^T
 * (entries s > t masked out when causal) and P = softmax(S):
 *
 *   forward:  for each block of RT_ATT_QB query rows, for each block of
 *             RT_ATT_KB keys (only up to the diagonal when causal):
 *             S tile = q k^T (rt_gemm), online softmax (running row max m
 *             and sum l; earlier output rescaled by exp(m_old - m_new)),
 *             Y rows (+)= P v (rt_gemm into Y itself); at the end
 *             Y /= l and lse = m + log l.
 *   backward: P = exp(scale q k^T - lse) is recomputed tile by tile from the
 *             saved lse, Drow = rowsum(dY * Y), dP = dY v^T,
 *             dS = scale P (dP - Drow); dv += P^T dY, dk += dS^T q,
 *             dq += dS k (all rt_gemm).
 *
 * With ALiBi (alibi = 1) every score gets -m_h |t - s| before the softmax,
 * m_h the slope of the layer's query head hoff + h of Htot (rt_alibi_slope).
 *
 * With an additive bias (attention_ab: bias, (H, T, S)) every score of query
 * head h gets bias[h, t, s] after the scale and ALiBi; attention_dbias sums
 * the bias's gradient, dS / scale, over the batch: per (head, block of
 * queries) in batch order, so the sum is the same whatever the threads.
 *
 * With key lengths (attention_vl: lens, one i32 per row b) row b's queries
 * see only its keys s < lens[b] (a padded batch: the rest are padding); a
 * row with none gives Y = 0 and lse = -inf, and its keys' gradients 0.
 *
 * No T x S matrix is ever stored: the tiles live in the calling thread's
 * scratch (rt_scratch, after matmul's pack buffers).  Heads are independent
 * and split across the pool's threads; each head is computed the same way
 * whatever the thread count.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/rt_cpu.h"

/* One attention call. */
typedef struct at_job {
    int64_t B, T, H, D;     /* batch, queries, heads, head size */
    int64_t Hkv;            /* key/value heads (H a multiple of it) */
    int64_t S;              /* keys */
    int causal;             /* 1: query t sees keys s <= t */
    int alibi;              /* 1: scores get -m_h |t - s| (ALiBi), m_h rt_alibi_slope(hoff + h, Htot) */
    int64_t hoff, Htot;     /* ALiBi: global index of query head 0, heads of the whole layer */
    int acc;                /* backward: 1 adds into dq, dk, dv */
    float scale;            /* multiplies q . k */
    void *const *b;         /* the kernel's buffers (attention's, attention_bwd's order) */
    const int32_t *lens;    /* attention_vl: row b's keys s < lens[b] are seen; NULL: all S */
    const float *bias;      /* attention_ab: (H, T, S), added to the scores; NULL: none */
} at_job;

/* A head's view: its rows are ld floats apart, its key/value head's ldk. */
typedef struct at_head {
    int64_t T, S, D, ld;    /* query rows, key rows, columns, row stride (H*D) */
    int64_t off;            /* offset of row 0 of the head in a (B, T, H, D) tensor */
    int64_t loff;           /* offset of the head's lse (T floats) */
    int64_t ldk, koff;      /* row stride (Hkv*D) and row 0 of its key/value head in (B, T, Hkv, D) */
    float slope;            /* ALiBi: the head's m (0: no ALiBi) */
    const float *bias;      /* attention_ab: the head's (T, S) bias; NULL: none */
} at_head;

float rt_alibi_slope(int64_t h, int64_t H)
{
    /* BLOOM's and the paper's: with n the largest power of 2 <= H, heads
       0 .. n-1 get 2^(-8 (h+1) / n); the rest the odd steps of the 2n series */
    int64_t n = 1;
    while (n * 2 <= H) n *= 2;
    if (h < n) return (float)exp2(-8.0 * (double)(h + 1) / (double)n);
    return (float)exp2(-8.0 * (double)(2 * (h - n) + 1) / (double)(2 * n));
}

/* Head number bh = b*H + h of job j. */
static at_head at_head_of(const at_job *j, int64_t bh)
{
    int64_t b = bh / j->H, h = bh % j->H, ld = j->H * j->D, ldk = j->Hkv * j->D;
    int64_t g = h / (j->H / j->Hkv);
    float slope = j->alibi ? rt_alibi_slope(j->hoff + h, j->Htot) : 0.0f;
    int64_t S = j->lens && j->lens[b] < j->S ? j->lens[b] : j->S;   /* (the keys row b sees; lens checked >= 0) */
    const float *bias = j->bias ? j->bias + h * j->T * j->S : NULL;
    return (at_head){j->T, S, j->D, ld, b * j->T * ld + h * j->D, bh * j->T, ldk, b * j->S * ldk + g * j->D, slope,
                     bias};
}

/* Keys of block [s0, s0 + kb) that query t sees. */
static int64_t at_visible(const at_job *j, int64_t t, int64_t s0, int64_t kb)
{
    if (!j->causal)
        return kb;
    int64_t n = t - s0 + 1;
    return n < 0 ? 0 : n < kb ? n : kb;
}

/* y[0..D) *= c (one row of a head). */
static void at_scale_row(float *restrict y, int64_t D, float c)
{
    for (int64_t d = 0; d < D; d++)
        y[d] *= c;
}

/* Forward of one head. */
static void at_fwd_head(const at_job *j, int64_t bh, float *scratch)
{
    at_head hd = at_head_of(j, bh);
    const float *q = (const float *)j->b[0] + hd.off, *k = (const float *)j->b[1] + hd.koff;
    const float *v = (const float *)j->b[2] + hd.koff;
    float *y = (float *)j->b[3] + hd.off, *lse = (float *)j->b[4] + hd.loff;
    float *S = scratch + RT_MM_SCRATCH_FLOATS;   /* RT_ATT_QB x RT_ATT_KB */
    int64_t T = hd.T, D = hd.D, ld = hd.ld, ldk = hd.ldk;
    if (hd.S == 0) {   /* (a row whose keys are all padding) */
        for (int64_t t = 0; t < T; t++) {
            memset(y + t * ld, 0, (size_t)D * 4);
            lse[t] = -INFINITY;
        }
        return;
    }
    for (int64_t t0 = 0; t0 < T; t0 += RT_ATT_QB) {
        int64_t qb = T - t0 < RT_ATT_QB ? T - t0 : RT_ATT_QB;
        int64_t kend = j->causal && t0 + qb < hd.S ? t0 + qb : hd.S;
        float m[RT_ATT_QB], l[RT_ATT_QB];   /* running row max and sum of exp */
        for (int64_t s0 = 0; s0 < kend; s0 += RT_ATT_KB) {
            int64_t kb = kend - s0 < RT_ATT_KB ? kend - s0 : RT_ATT_KB;
            rt_gemm(qb, D, kb, q + t0 * ld, ld, 0, k + s0 * ldk, ldk, 1, S, RT_ATT_KB, 0, scratch);
            for (int64_t r = 0; r < qb; r++) {
                float *sr = S + r * RT_ATT_KB;
                int64_t nv = at_visible(j, t0 + r, s0, kb);
                if (nv == 0) {   /* no key of this block is visible: P row 0 */
                    memset(sr, 0, (size_t)kb * 4);
                    continue;
                }
                for (int64_t c = 0; c < nv; c++)
                    sr[c] *= j->scale;
                if (j->alibi)   /* -m |t - s| */
                    for (int64_t c = 0; c < nv; c++)
                        sr[c] -= hd.slope * (float)llabs(t0 + r - (s0 + c));
                if (hd.bias) {   /* + bias[h, t, s] */
                    const float *br = hd.bias + (t0 + r) * j->S + s0;
                    for (int64_t c = 0; c < nv; c++)
                        sr[c] += br[c];
                }
                float bm = rt_vmax(sr, nv);
                float mnew = s0 == 0 || bm > m[r] ? bm : m[r];
                /* (a bias of -inf on every key so far: the max is -inf, each exp 0) */
                float sum = (float)rt_vexp_affine(sr, 1.0f, isinf(mnew) ? 0.0f : mnew, sr, nv);
                memset(sr + nv, 0, (size_t)(kb - nv) * 4);
                if (s0 == 0) {
                    l[r] = sum;
                } else {
                    float corr = m[r] == mnew ? 1.0f : expf(m[r] - mnew);
                    l[r] = l[r] * corr + sum;
                    if (corr != 1.0f)
                        at_scale_row(y + (t0 + r) * ld, D, corr);
                }
                m[r] = mnew;
            }
            rt_gemm(qb, kb, D, S, RT_ATT_KB, 0, v + s0 * ldk, ldk, 0, y + t0 * ld, ld, s0 > 0,
                    scratch);
        }
        for (int64_t r = 0; r < qb; r++) {
            if (l[r] == 0.0f) {   /* every key masked by the bias: as a row with no keys */
                memset(y + (t0 + r) * ld, 0, (size_t)D * 4);
                lse[t0 + r] = -INFINITY;
                continue;
            }
            at_scale_row(y + (t0 + r) * ld, D, 1.0f / l[r]);
            lse[t0 + r] = m[r] + logf(l[r]);
        }
    }
}

/* sum_d x[d] y[d], 16 partial sums. */
static float at_dot(const float *restrict x, const float *restrict y, int64_t n)
{
    float acc[16] = {0};
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int j = 0; j < 16; j++)
            acc[j] += x[k + j] * y[k + j];
    for (int j = 0; k + j < n; j++)
        acc[j] += x[k + j] * y[k + j];
    float s = 0;
    for (int j = 0; j < 16; j++)
        s += acc[j];
    return s;
}

/* The tiles of queries [t0, t0 + qb) and keys [s0, s0 + kb) of head hd:
 * P = exp(scale q.k (- m |t - s|) (+ bias) - lse) and dS = dsc P (dP - drow),
 * dP = dY v^T (0 where masked; rows RT_ATT_KB floats apart). */
static void at_tiles(const at_job *j, const at_head *hd, const float *dy, const float *q, const float *k,
                     const float *v, const float *lse, const float *drow, int64_t t0, int64_t qb, int64_t s0,
                     int64_t kb, float dsc, float *P, float *dS, float *scratch)
{
    int64_t D = hd->D, ld = hd->ld, ldk = hd->ldk;
    rt_gemm(qb, D, kb, q + t0 * ld, ld, 0, k + s0 * ldk, ldk, 1, P, RT_ATT_KB, 0, scratch);
    rt_gemm(qb, D, kb, dy + t0 * ld, ld, 0, v + s0 * ldk, ldk, 1, dS, RT_ATT_KB, 0, scratch);
    for (int64_t r = 0; r < qb; r++) {
        float *pr = P + r * RT_ATT_KB, *dr = dS + r * RT_ATT_KB;
        int64_t nv = isinf(lse[t0 + r]) ? 0 : at_visible(j, t0 + r, s0, kb);   /* (a row with no key: P 0) */
        if (j->alibi || hd->bias) {   /* P = exp(scale q.k - m |t - s| + bias - lse) */
            for (int64_t c = 0; c < nv; c++)
                pr[c] = pr[c] * j->scale - hd->slope * (float)llabs(t0 + r - (s0 + c));
            if (hd->bias)
                for (int64_t c = 0; c < nv; c++)
                    pr[c] += hd->bias[(t0 + r) * j->S + s0 + c];
            rt_vexp_affine(pr, 1.0f, lse[t0 + r], pr, nv);
        } else {
            rt_vexp_affine(pr, j->scale, lse[t0 + r], pr, nv);
        }
        for (int64_t c = 0; c < nv; c++)
            dr[c] = dsc * pr[c] * (dr[c] - drow[r]);
        memset(pr + nv, 0, (size_t)(kb - nv) * 4);
        memset(dr + nv, 0, (size_t)(kb - nv) * 4);
    }
}

/* Backward of one head; first: the first query head of its key/value head
 * (which zeroes dk, dv when not accumulating). */
static void at_bwd_head(const at_job *j, int64_t bh, int first, float *scratch)
{
    at_head hd = at_head_of(j, bh);
    const float *dy = (const float *)j->b[0] + hd.off, *q = (const float *)j->b[1] + hd.off;
    const float *k = (const float *)j->b[2] + hd.koff, *v = (const float *)j->b[3] + hd.koff;
    const float *y = (const float *)j->b[4] + hd.off, *lse = (const float *)j->b[5] + hd.loff;
    float *dq = (float *)j->b[6] + hd.off, *dk = (float *)j->b[7] + hd.koff;
    float *dv = (float *)j->b[8] + hd.koff;
    float *P = scratch + RT_MM_SCRATCH_FLOATS, *dS = P + RT_ATT_QB * RT_ATT_KB;
    int64_t T = hd.T, D = hd.D, ld = hd.ld, ldk = hd.ldk;
    if (!j->acc) {
        for (int64_t t = 0; t < T; t++)
            memset(dq + t * ld, 0, (size_t)D * 4);
        for (int64_t s = 0; first && s < j->S; s++) {   /* (all of them: keys past lens get 0) */
            memset(dk + s * ldk, 0, (size_t)D * 4);
            memset(dv + s * ldk, 0, (size_t)D * 4);
        }
    }
    for (int64_t t0 = 0; t0 < T; t0 += RT_ATT_QB) {
        int64_t qb = T - t0 < RT_ATT_QB ? T - t0 : RT_ATT_QB;
        int64_t kend = j->causal && t0 + qb < hd.S ? t0 + qb : hd.S;
        float drow[RT_ATT_QB];   /* sum_d dY Y = sum_s P dP, per query row */
        for (int64_t r = 0; r < qb; r++)
            drow[r] = at_dot(dy + (t0 + r) * ld, y + (t0 + r) * ld, D);
        for (int64_t s0 = 0; s0 < kend; s0 += RT_ATT_KB) {
            int64_t kb = kend - s0 < RT_ATT_KB ? kend - s0 : RT_ATT_KB;
            at_tiles(j, &hd, dy, q, k, v, lse, drow, t0, qb, s0, kb, j->scale, P, dS, scratch);
            rt_gemm(kb, qb, D, P, RT_ATT_KB, 1, dy + t0 * ld, ld, 0, dv + s0 * ldk, ldk, 1, scratch);
            rt_gemm(kb, qb, D, dS, RT_ATT_KB, 1, q + t0 * ld, ld, 0, dk + s0 * ldk, ldk, 1, scratch);
            rt_gemm(qb, kb, D, dS, RT_ATT_KB, 0, k + s0 * ldk, ldk, 0, dq + t0 * ld, ld, 1, scratch);
        }
    }
}

/* Thread t's heads: a contiguous range of query heads b*H + h (forward),
 * or of key/value heads b*Hkv + g, each with its query heads in order
 * (backward: they add into the same dk, dv). */
static void at_task(void *p, int t, int nt, int bwd)
{
    const at_job *j = p;
    int64_t lo, hi, r = j->H / j->Hkv;
    rt_split(j->B * (bwd ? j->Hkv : j->H), t, nt, 1, &lo, &hi);
    float *scratch = rt_scratch(t);
    for (int64_t x = lo; x < hi; x++) {
        if (bwd)
            for (int64_t q = 0; q < r; q++)
                at_bwd_head(j, x * r + q, q == 0, scratch);
        else
            at_fwd_head(j, x, scratch);
    }
}

/* attention_dbias: thread t's (head, block of queries) pairs; each sums
 * over the batch in order into its rows of dbias (b[7], (H, T, S)). */
static void at_dbias_task(void *p, int t, int nt)
{
    const at_job *j = p;
    int64_t nqb = (j->T + RT_ATT_QB - 1) / RT_ATT_QB, lo, hi;
    rt_split(j->H * nqb, t, nt, 1, &lo, &hi);
    float *scratch = rt_scratch(t);
    float *P = scratch + RT_MM_SCRATCH_FLOATS, *dS = P + RT_ATT_QB * RT_ATT_KB;
    for (int64_t x = lo; x < hi; x++) {
        int64_t h = x / nqb, t0 = x % nqb * RT_ATT_QB;
        int64_t qb = j->T - t0 < RT_ATT_QB ? j->T - t0 : RT_ATT_QB;
        float *db = (float *)j->b[7] + (h * j->T + t0) * j->S;   /* rows t0 .. t0 + qb of head h */
        if (!j->acc)
            memset(db, 0, (size_t)(qb * j->S) * 4);
        for (int64_t b = 0; b < j->B; b++) {
            at_head hd = at_head_of(j, b * j->H + h);
            const float *dy = (const float *)j->b[0] + hd.off, *q = (const float *)j->b[1] + hd.off;
            const float *k = (const float *)j->b[2] + hd.koff, *v = (const float *)j->b[3] + hd.koff;
            const float *y = (const float *)j->b[4] + hd.off, *lse = (const float *)j->b[5] + hd.loff;
            int64_t kend = j->causal && t0 + qb < hd.S ? t0 + qb : hd.S;
            float drow[RT_ATT_QB];
            for (int64_t r = 0; r < qb; r++)
                drow[r] = at_dot(dy + (t0 + r) * hd.ld, y + (t0 + r) * hd.ld, hd.D);
            for (int64_t s0 = 0; s0 < kend; s0 += RT_ATT_KB) {
                int64_t kb = kend - s0 < RT_ATT_KB ? kend - s0 : RT_ATT_KB;
                at_tiles(j, &hd, dy, q, k, v, lse, drow, t0, qb, s0, kb, 1.0f, P, dS, scratch);
                for (int64_t r = 0; r < qb; r++) {
                    const float *dr = dS + r * RT_ATT_KB;
                    float *o = db + r * j->S + s0;
                    for (int64_t c = 0; c < kb; c++)
                        o[c] += dr[c];
                }
            }
        }
    }
}

/* Forward task. */
static void at_fwd_task(void *p, int t, int nt)
{
    at_task(p, t, nt, 0);
}

/* Backward task. */
static void at_bwd_task(void *p, int t, int nt)
{
    at_task(p, t, nt, 1);
}

/* Validate the shape arguments (hkv: Hkv, s: S). */
static void at_check(rt_ctx *ctx, const char *what, const int64_t *i, int64_t hkv, int64_t s, const int64_t *al)
{
    if (i[0] < 0 || i[1] < 0 || i[2] < 0 || i[3] < 0 || (i[4] != 0 && i[4] != 1) || hkv < 1 ||
        i[2] % hkv || s < 0 || (i[4] && s != i[1]) || (s == 0 && i[1] > 0) || (al[0] != 0 && al[0] != 1) ||
        al[1] < 0 || (al[0] && al[1] + i[2] > al[2]))
        rt_fatal(ctx, 1, "%s: bad B %lld T %lld H %lld D %lld causal %lld Hkv %lld S %lld alibi %lld %lld %lld",
                 what, (long long)i[0], (long long)i[1], (long long)i[2], (long long)i[3], (long long)i[4],
                 (long long)hkv, (long long)s, (long long)al[0], (long long)al[1], (long long)al[2]);
}

/* The job of an attention kernel's ints (bwd: attention_bwd's, with acc
 * and P) and scale; no buffers yet. */
static at_job at_job_of(const int64_t *i, const float *f, int bwd)
{
    return (at_job){.B = i[0], .T = i[1], .H = i[2], .D = i[3], .Hkv = i[5 + bwd], .S = i[6 + bwd],
                    .causal = (int)i[4], .alibi = (int)i[7 + 2 * bwd], .hoff = i[8 + 2 * bwd],
                    .Htot = i[9 + 2 * bwd], .acc = bwd ? (int)i[5] : 0, .scale = f[0]};
}

/* attention (bwd = 0) or attention_bwd (1) on kernel buffers b, where
 * buffer extra (-1: none) is the key lengths (bias = 0: attention_vl's) or
 * the bias (1: attention_ab's) and the others are attention's. */
static void at_run(rt_ctx *ctx, const char *what, void *const *b, const int64_t *i, const float *f, int bwd,
                   int extra, int bias)
{
    at_check(ctx, what, i, i[5 + bwd], i[6 + bwd], i + 7 + 2 * bwd);   /* (bwd: acc and P come first) */
    void *bb[9];
    for (int k = 0, m = 0; k < (bwd ? 9 : 5); k++, m++) bb[k] = b[m == extra ? ++m : m];
    at_job j = at_job_of(i, f, bwd);
    j.b = bb;
    j.lens = extra >= 0 && !bias ? b[extra] : NULL;
    j.bias = extra >= 0 && bias ? b[extra] : NULL;
    if (j.lens) rt_att_check_lens(ctx, what, j.lens, j.B);
    rt_parallel(bwd ? at_bwd_task : at_fwd_task, &j, rt_threads_for(j.B * (bwd ? j.Hkv : j.H), 1));
}

void rt_att_check_lens(rt_ctx *ctx, const char *what, const int32_t *lens, int64_t B)
{
    for (int64_t r = 0; r < B; r++)
        if (lens[r] < 0)
            rt_fatal(ctx, 1, "%s: key length %d of row %lld is negative (the lengths are 0 .. S)", what,
                     (int)lens[r], (long long)r);
}

void rt_k_attention(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    at_run(ctx, "attention", b, i, f, 0, -1, 0);
}

void rt_k_attention_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    at_run(ctx, "attention_bwd", b, i, f, 1, -1, 0);
}

void rt_k_attention_vl(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    at_run(ctx, "attention_vl", b, i, f, 0, 3, 0);
}

void rt_k_attention_vl_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    at_run(ctx, "attention_vl_bwd", b, i, f, 1, 6, 0);
}

void rt_k_attention_ab(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    at_run(ctx, "attention_ab", b, i, f, 0, 3, 1);
}

void rt_k_attention_ab_bwd(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    at_run(ctx, "attention_ab_bwd", b, i, f, 1, 6, 1);
}

void rt_k_attention_dbias(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    at_check(ctx, "attention_dbias", i, i[6], i[7], i + 9);
    at_job j = at_job_of(i, f, 1);
    j.b = b;
    j.bias = b[6];
    rt_parallel(at_dbias_task, &j, rt_threads_for(j.H * ((j.T + RT_ATT_QB - 1) / RT_ATT_QB), 1));
}
