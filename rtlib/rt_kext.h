/* rt_kext.h -- a kernel's buffer extents from the formula of its row in
 * rt_kernels.h (the row's last field, `ext`).
 *
 * The formula gives each buffer argument's element count from the integer
 * arguments, buffers separated by single spaces, in argument order:
 *
 *     "i0*i1 i1*i2 i0*i2"     matmul: A M*K, B K*N, C M*N (i: M, K, N, ...)
 *     "i0 i0 1"               mse_loss: P and T n, L one float
 *     "i0 ?"                  allgather: recv is n * the group's size
 *
 * A buffer's formula is a product of factors, each `iN` (integer argument
 * N) or a decimal constant; `?` means the count does not follow from the
 * ints alone (a group's size, a box, a manifest entry, a per-instruction
 * layout: the kernel's own code says it).  The compiler's Program (ir/prog.c:
 * arena extents, reads and writes), the CUDA driver double (tests/mock:
 * the bounds every launch must stay in) and the op tests (test_cuda_ops:
 * every case's buffers against it) all read extents from here, so a
 * kernel's contract is written once.
 *
 * Header-only: the compiler, rtlib and the tests each include it. */
#ifndef RT_KEXT_H
#define RT_KEXT_H

#include <stdint.h>
#include <stdio.h>

#define RT_KEXT_VAR (-2)   /* `?`, or a buffer past the formula's: not from the ints */
#define RT_KEXT_MAXINT 16  /* the ints a formula may name: i0 .. i15 */

/* The start of buffer j's formula in ext, or NULL when ext has fewer. */
static inline const char *rt_kext_at(const char *ext, int j)
{
    const char *p = ext;
    if (!p || !*p || j < 0) return NULL;
    for (int k = 0; k < j; k++) {
        while (*p && *p != ' ') p++;
        if (!*p) return NULL;
        p++;
    }
    return p;
}

/* Elements of buffer j from the ints (nint of them): >= 0; RT_KEXT_VAR
 * where the formula says `?` or has no buffer j; -1 when a factor names an
 * int past nint, an int is negative (the compiler passes -1 for one it does
 * not know) or the product overflows. */
static inline int64_t rt_kext(const char *ext, int j, const int64_t *ints, int nint)
{
    const char *p = rt_kext_at(ext, j);
    if (!p || *p == '?') return RT_KEXT_VAR;
    int64_t r = 1;
    for (;;) {
        int isint = *p == 'i';
        if (isint) p++;
        if (*p < '0' || *p > '9') return -1;
        int64_t v = 0;
        while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
        if (isint) {
            if (v >= nint || !ints) return -1;
            v = ints[v];
        }
        if (v < 0 || __builtin_mul_overflow(r, v, &r)) return -1;
        if (*p != '*') break;
        p++;
    }
    return r;
}

/* Is ext a well-formed formula of exactly nbuf buffers whose factors name
 * ints below nint?  0, or -1 with the reason in why. */
static inline int rt_kext_check(const char *ext, int nbuf, int nint, char *why, int wl)
{
    int nb = 0;
    const char *p = ext;
    if (!p) p = "";
    while (*p) {
        if (*p == '?') p++;
        else
            for (;;) {
                int isint = *p == 'i';
                if (isint) p++;
                if (*p < '0' || *p > '9') {
                    if (why) snprintf(why, (size_t)wl, "buffer %d: a factor is neither iN nor a number", nb);
                    return -1;
                }
                long v = 0;
                while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
                if (isint && (v >= nint || v >= RT_KEXT_MAXINT)) {
                    if (why) snprintf(why, (size_t)wl, "buffer %d: i%ld past the %d ints", nb, v, nint);
                    return -1;
                }
                if (*p != '*') break;
                p++;
            }
        nb++;
        if (*p == ' ' && p[1] && p[1] != ' ') p++;
        else if (*p) {
            if (why) snprintf(why, (size_t)wl, "buffer %d: '%c' where a space or the end belongs", nb - 1, *p);
            return -1;
        }
    }
    if (nb != nbuf) {
        if (why) snprintf(why, (size_t)wl, "%d buffers in the formula, %d in the row", nb, nbuf);
        return -1;
    }
    return 0;
}

#endif
