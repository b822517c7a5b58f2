/* rt_ew.h -- the op codes of the fused elementwise kernel `ew`
 * (rtlib/rt_kernels.h) and the table of elementwise ops they come from,
 * shared by the compiler (passes/fuse.c makes ew programs, codegen/cuda.c
 * turns each into a CUDA kernel and makes the elementwise kernels) and
 * rtlib (cpu/kernels.c runs them, cpu/kernels_ref.c is their scalar
 * reference).
 *
 * An ew instruction's ints are: id, n, N, nops, then nops groups of 4
 * (op, dst, a, c).  Operands:
 *   RT_EW_REG + r     register r (0 <= r < RT_EW_NREG)
 *   RT_EW_MEM + s     element k of buffer s            (load, or store as dst)
 *   RT_EW_ROW + s     element k % N of buffer s         (load only: a row broadcast)
 *   RT_EW_ACC + s     dst only: buffer s element k += the value
 * Each op computes what the unfused kernel it came from computes, with the
 * same rounding, so fusion never changes a result: both are made from one
 * row of RT_EW_OPS below.
 */
#ifndef NNSC_RT_EW_H
#define NNSC_RT_EW_H

/* The elementwise ops, declared once.  RT_EW_OPS(X) calls, for each,
 *
 *   X(CODE, kernel, nsrc, acc, cpu, made, expr, ref)
 *
 *   CODE    its op code inside a fused ew, RT_EW_<CODE> (the row's place)
 *   kernel  the rt_kernels.h row that runs it alone: buffers a (, c), y;
 *           ints n (, acc)
 *   nsrc    source operands: 1 (a) or 2 (a and c)
 *   acc     1: the kernel's ints are n, acc and y (+)= the value; 0: n
 *   cpu     expr: the CPU runs expr in a loop the compiler vectorises;
 *           vec: by hand, rt_ew_vec_<CODE> (cpu/kernels.c: vmath's gelu,
 *           copy as memmove)
 *   made    made: the kernel's CPU entry rt_k_<kernel>, its reference
 *           rt_ref_<kernel> and its CUDA kernel nnsc_<kernel> are made from
 *           this row (cpu/kernels.c, cpu/kernels_ref.c, codegen/cuda.c);
 *           own: written by hand (copy: a bit copy of any 4-byte type)
 *   expr    the value in float from float a, c, in the C that is also CUDA C
 *           (expf, tanhf): the CPU's loop, every CUDA kernel (stringified
 *           after expansion), the fused ew on both targets
 *   ref     the value in double from double a, c: the scalar references
 *
 * So an elementwise op is a row here, its row in rt_kernels.h and its op
 * row in ir/ops.h (docs/adding-an-op.md); fusion, both targets' kernels and
 * the reference follow.  test_rt_kernels checks every row against its
 * rt_kernels.h row. */
#define RT_EW_SIGF(v) (1.0f / (1.0f + expf(-(v))))   /* sigmoid, float */
#define RT_EW_SIGD(v) (1.0 / (1.0 + exp(-(v))))      /* ... double */
/* gelu's tanh approximation: sqrt(2/pi) and the cubic's coefficient */
#define RT_EW_GELU_CF 0.7978845608028654f
#define RT_EW_GELU_AF 0.044715f
#define RT_EW_GELU_CD 0.7978845608028654
#define RT_EW_GELU_AD 0.044715
#define RT_EW_GELUF(v) (0.5f * (v) * (1.0f + tanhf(RT_EW_GELU_CF * ((v) + RT_EW_GELU_AF * (v) * (v) * (v)))))
#define RT_EW_GELUD(v) (0.5 * (v) * (1.0 + tanh(RT_EW_GELU_CD * ((v) + RT_EW_GELU_AD * (v) * (v) * (v)))))
/* gelu'(v) = 0.5 (1 + t) + 0.5 v (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 v^2), t = tanh(u) */
#define RT_EW_TGELUF(v) tanhf(RT_EW_GELU_CF * ((v) + RT_EW_GELU_AF * (v) * (v) * (v)))
#define RT_EW_TGELUD(v) tanh(RT_EW_GELU_CD * ((v) + RT_EW_GELU_AD * (v) * (v) * (v)))
#define RT_EW_DGELUF(v) (0.5f * (1.0f + RT_EW_TGELUF(v)) + 0.5f * (v) * (1.0f - RT_EW_TGELUF(v) * RT_EW_TGELUF(v)) * \
                         RT_EW_GELU_CF * (1.0f + 3.0f * RT_EW_GELU_AF * (v) * (v)))
#define RT_EW_DGELUD(v) (0.5 * (1.0 + RT_EW_TGELUD(v)) + 0.5 * (v) * (1.0 - RT_EW_TGELUD(v) * RT_EW_TGELUD(v)) * \
                         RT_EW_GELU_CD * (1.0 + 3.0 * RT_EW_GELU_AD * (v) * (v)))

/*        CODE      kernel    nsrc acc cpu   made  expr (float)                                  ref (double) */
#define RT_EW_OPS(X) \
    X(COPY,     copy,     1, 1, vec,  own,  a,                                            a) \
    X(ADD,      add,      2, 1, expr, made, a + c,                                        a + c) \
    X(GELU,     gelu,     1, 0, vec,  made, RT_EW_GELUF(a),                               RT_EW_GELUD(a)) \
    X(RELU,     relu,     1, 0, expr, made, a > 0.0f ? a : 0.0f,                          a > 0.0 ? a : 0.0) \
    X(GELU_BWD, gelu_bwd, 2, 1, vec,  made, a * RT_EW_DGELUF(c),                          a * RT_EW_DGELUD(c)) \
    X(RELU_BWD, relu_bwd, 2, 1, expr, made, c > 0.0f ? a : 0.0f,                          c > 0.0 ? a : 0.0) \
    X(MUL,      mul,      2, 1, expr, made, a * c,                                        a * c) \
    X(SILU,     silu,     1, 0, expr, made, a / (1.0f + expf(-a)),                        a / (1.0 + exp(-a))) \
    X(SILU_BWD, silu_bwd, 2, 1, expr, made, a * RT_EW_SIGF(c) * (1.0f + c * (1.0f - RT_EW_SIGF(c))), \
                                                                      a * RT_EW_SIGD(c) * (1.0 + c * (1.0 - RT_EW_SIGD(c))))

enum {
#define RT_EW_CODE(CODE, kernel, nsrc, acc, cpu, made, expr, ref) RT_EW_##CODE,
    RT_EW_OPS(RT_EW_CODE)
#undef RT_EW_CODE
    RT_EW_NOPS_KIND      /* number of op kinds */
};

/* An X of RT_EW_OPS's rows, for rows whose made column is `made` only; and
 * the column as 1 or 0. */
#define RT_EW_IF_made(...) __VA_ARGS__
#define RT_EW_IF_own(...)
#define RT_EW_MADE_made 1
#define RT_EW_MADE_own 0
/* Text of an expression after expansion (the CUDA kernels'). */
#define RT_EW_STR_(...) #__VA_ARGS__
#define RT_EW_STR(...) RT_EW_STR_(__VA_ARGS__)

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
 * that is no op kind.  The compiler, both backends, the reference and the
 * checks all ask it. */
static inline int rt_ew_nsrc(long long op)
{
    static const unsigned char nsrc[RT_EW_NOPS_KIND] = {
#define RT_EW_NSRC(CODE, kernel, n, acc, cpu, made, expr, ref) [RT_EW_##CODE] = n,
        RT_EW_OPS(RT_EW_NSRC)
#undef RT_EW_NSRC
    };
    return op >= 0 && op < RT_EW_NOPS_KIND ? nsrc[op] : 0;
}

#endif
