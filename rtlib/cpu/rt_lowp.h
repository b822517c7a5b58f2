/* rt_lowp.h -- low-precision number formats of mixed-precision training
 * (lowp.c), shared by rtlib, its tests and the compiler (plan.txt counts
 * matmul_bf16's staging: codegen/emit.c).  Generated rank programs never
 * include it: they call rt_k_matmul_bf16 (rt_kernels.h).
 *
 * bf16 is the top half of an IEEE f32: sign, the same 8-bit exponent, 7
 * mantissa bits.  A bf16 value is held here as the f32 with the same top
 * half and a zero low half, so that f32 code computes with it unchanged.
 */
#ifndef NNSC_RT_LOWP_H
#define NNSC_RT_LOWP_H

#include <stdint.h>

/* x rounded to bf16 (nearest, ties to even), as an f32 whose low 16 bits
 * are 0.  Values beyond the largest bf16 round to +-inf, infinities stay,
 * subnormals round like normals, and a NaN stays a NaN (made quiet, sign
 * kept).  The CUDA kernels (codegen/cuda.c: nnsc_bf16_rn) give the same
 * bits. */
float rt_bf16_round(float x);

/* dst[k] = rt_bf16_round(src[k]) for k < n, on the calling thread (dst may
 * be src). */
void rt_bf16_round_n(const float *src, float *dst, int64_t n);

/* The most floats rt_k_matmul_bf16 stages of one operand at a time before
 * it works in blocks (0: the default, 2^24).  For tests: the blocked path
 * on small matrices. */
void rt_bf16_stage_limit(int64_t floats);

/* matmul_bf16's staging (lowp.c): three buffers kept between calls -- a
 * block of A's rows, of B's columns, and of C where B is cut into column
 * blocks -- each grown to the largest call's need, in RT_BF16_ALLOC_UNIT
 * bytes.  An operand larger than RT_BF16_STAGE_FLOATS is staged a block
 * at a time, blocks cut at multiples of RT_BF16_BLOCK_UNIT rows or
 * columns. */
#define RT_BF16_STAGE_FLOATS ((int64_t)1 << 24)
#define RT_BF16_BLOCK_UNIT 64
#define RT_BF16_ALLOC_UNIT ((int64_t)2 << 20)

/* Rows or columns per block when `other` floats come with each of n
 * (limit: the staging limit in floats). */
static inline int64_t rt_bf16_block(int64_t n, int64_t other, int64_t limit)
{
    if (n <= limit / other)
        return n;
    int64_t b = limit / other / RT_BF16_BLOCK_UNIT * RT_BF16_BLOCK_UNIT;
    if (b < RT_BF16_BLOCK_UNIT)
        b = RT_BF16_BLOCK_UNIT;
    return b < n ? b : n;
}

/* The floats each staging buffer needs for C[M, N] = op(A) op(B) over K
 * (need[2] 0: no C block); 0, 0, 0 where nothing is staged (M, N or K <= 0). */
static inline void rt_bf16_stage_need(int64_t M, int64_t K, int64_t N, int64_t limit, int64_t need[3])
{
    need[0] = need[1] = need[2] = 0;
    if (M <= 0 || N <= 0 || K <= 0)
        return;
    int64_t mb = rt_bf16_block(M, K, limit), nb = rt_bf16_block(N, K, limit);
    need[0] = mb * K, need[1] = nb * K, need[2] = nb < N ? mb * nb : 0;
}

#endif
