/* rt_lowp.h -- low-precision number formats of mixed-precision training
 * (lowp.c), shared by rtlib and its tests.  Generated rank programs never
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

#endif
