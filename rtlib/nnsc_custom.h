/* nnsc_custom.h -- the kernel side of a custom op ([custom NAME] in a model
 * spec; docs/custom-ops.md).
 *
 * The compiler compiles the section's `cpu = FILE.c` with this header on
 * the include path and links it into every rank.  FILE.c defines one
 * function per [custom NAME] section it serves:
 *
 *     #include "nnsc_custom.h"
 *
 *     NNSC_CUSTOM(NAME)
 *     {
 *         const float *x = c->in[0].data;
 *         float *y = c->out[0].data;
 *         for (int64_t k = 0; k < c->out[0].numel; k++)
 *             NNSC_PUT(c, y[k], x[k] * 2);
 *     }
 *
 * The body sees `c` (const nnsc_call *): the op's inputs, then outputs, as
 * dense row-major f32 tensors with their shapes.  Under a parallel plan a
 * rank runs the kernel on its box of every operand (the dims the
 * annotation lets the planner split), so a kernel must compute each output
 * element from the matching elements of the inputs as the annotation says,
 * whatever the shapes, and must not assume the full tensor.
 *
 * Accumulation: when c->acc is not 0 the kernel adds its results into the
 * outputs instead of overwriting them (gradients summed over micro-batches,
 * or over several uses of a tensor).  NNSC_PUT(c, dst, v) does either.
 *
 * The kernel runs on one thread of its rank and must be deterministic:
 * the same inputs give the same bits (a parallel plan is checked against
 * the one-device build).  It must not keep pointers past its return.
 */
#ifndef NNSC_CUSTOM_H
#define NNSC_CUSTOM_H

#include <stdint.h>

#define NNSC_CUSTOM_MAXIO 6   /* inputs or outputs of a custom op at most */
#define NNSC_CUSTOM_MAXDIM 8  /* dims of an operand at most */

typedef struct nnsc_tensor {
    float *data;                       /* numel floats, row-major */
    int ndim;
    int64_t shape[NNSC_CUSTOM_MAXDIM]; /* this rank's extents */
    int64_t numel;                     /* product of shape */
} nnsc_tensor;

#define NNSC_CUSTOM_MAXATTR 6 /* attrs of an op at most */

typedef struct nnsc_call {
    int nin, nout;
    int acc;                           /* != 0: add into the outputs */
    float attr[NNSC_CUSTOM_MAXATTR];   /* the [op]'s `attrs` in order, 0 past those given (a
                                          backward's: its forward op's) */
    nnsc_tensor in[NNSC_CUSTOM_MAXIO];
    nnsc_tensor out[NNSC_CUSTOM_MAXIO];
} nnsc_call;

/* dst = v, or dst += v when the call accumulates. */
#define NNSC_PUT(c, dst, v) ((dst) = (c)->acc ? (dst) + (v) : (v))

/* The generated code's arguments (b: the operands' pointers; i: the
 * section's row, nin, nout, acc, then per operand ndim and its extents)
 * as an nnsc_call. */
static inline void nnsc_custom_decode(nnsc_call *c, void *const *b, const int64_t *i, const float *f)
{
    c->nin = (int)i[1], c->nout = (int)i[2], c->acc = i[3] != 0;
    for (int k = 0; k < NNSC_CUSTOM_MAXATTR; k++)
        c->attr[k] = f ? f[k] : 0.0f;
    int pos = 4;
    for (int k = 0; k < c->nin + c->nout; k++) {
        nnsc_tensor *t = k < c->nin ? &c->in[k] : &c->out[k - c->nin];
        t->data = (float *)b[k];
        t->ndim = (int)i[pos++];
        t->numel = 1;
        for (int j = 0; j < t->ndim; j++) {
            t->shape[j] = i[pos++];
            t->numel *= t->shape[j];
        }
    }
}

/* Define the kernel of [custom NAME]: the function the ranks call,
 * nnsc_custom_NAME, whose body follows (it sees `const nnsc_call *c`). */
#define NNSC_CUSTOM(NAME)                                                                       \
    static void nnsc_custom_body_##NAME(const nnsc_call *c);                                    \
    void nnsc_custom_##NAME(void *ctx, void *const *b, const int64_t *i, const float *f);       \
    void nnsc_custom_##NAME(void *ctx, void *const *b, const int64_t *i, const float *f)        \
    {                                                                                           \
        (void)ctx;                                                                              \
        nnsc_call c;                                                                            \
        nnsc_custom_decode(&c, b, i, f);                                                        \
        nnsc_custom_body_##NAME(&c);                                                            \
    }                                                                                           \
    static void nnsc_custom_body_##NAME(const nnsc_call *c)

#endif
