/* rt_ew.h -- the op codes of the fused elementwise kernel `ew`
 * (rtlib/rt_kernels.h), shared by the compiler (passes/fuse.c makes ew
 * programs, codegen/cuda.c turns each into a CUDA kernel) and rtlib
 * (kernels.c runs them on the CPU, kernels_ref.c is their scalar reference).
 *
 * An ew instruction's ints are: id, n, N, nops, then nops groups of 4
 * (op, dst, a, c).  Operands:
 *   RT_EW_REG + r     register r (0 <= r < RT_EW_NREG)
 *   RT_EW_MEM + s     element k of buffer s            (load, or store as dst)
 *   RT_EW_ROW + s     element k % N of buffer s         (load only: a row broadcast)
 *   RT_EW_ACC + s     dst only: buffer s element k += the value
 * Each op computes what the unfused kernel it came from computes, with the
 * same rounding, so fusion never changes a result.
 */
#ifndef NNSC_RT_EW_H
#define NNSC_RT_EW_H

enum {
    RT_EW_COPY = 0,      /* dst = a */
    RT_EW_ADD = 1,       /* dst = a + c */
    RT_EW_GELU = 2,      /* dst = gelu(a) (tanh approximation, as rt_k_gelu) */
    RT_EW_RELU = 3,      /* dst = a > 0 ? a : 0 */
    RT_EW_GELU_BWD = 4,  /* dst = a * gelu'(c) (as rt_k_gelu_bwd: a = dY, c = X) */
    RT_EW_RELU_BWD = 5,  /* dst = c > 0 ? a : 0 (as rt_k_relu_bwd: a = dY, c = Y) */
    RT_EW_MUL = 6,       /* dst = a * c */
    RT_EW_NOPS_KIND = 7  /* number of op kinds */
};

#define RT_EW_NREG 8     /* registers */
#define RT_EW_REG 0      /* operand base: registers */
#define RT_EW_MEM 16     /* operand base: buffer element k */
#define RT_EW_ROW 32     /* operand base: buffer element k % N */
#define RT_EW_ACC 48     /* operand base (dst only): buffer element k += */
#define RT_EW_BUF(x) ((x) & 15)   /* the buffer of a MEM, ROW or ACC operand */
#define RT_EW_NBUF 9     /* buffers an ew instruction may have */
#define RT_EW_HEAD 4     /* ints before the ops: id, n, N, nops */
#define RT_EW_MAXOPS 5   /* (26 - 4) / 4 with room to spare: the CUDA args hold 26 ints */

/* The source operands of op kind op: 1 (a) or 2 (a and c); 0 for a code
 * that is no op kind.  The one place that says so: the compiler, both
 * backends, the reference and the checks all ask it (a new kind is a row
 * here, and test_rt_kernels fails while one is missing). */
static inline int rt_ew_nsrc(long long op)
{
    static const unsigned char nsrc[RT_EW_NOPS_KIND] = {
        [RT_EW_COPY] = 1, [RT_EW_ADD] = 2, [RT_EW_GELU] = 1, [RT_EW_RELU] = 1,
        [RT_EW_GELU_BWD] = 2, [RT_EW_RELU_BWD] = 2, [RT_EW_MUL] = 2,
    };
    return op >= 0 && op < RT_EW_NOPS_KIND ? nsrc[op] : 0;
}

#endif
