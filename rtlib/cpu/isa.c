/* isa.c -- which SIMD instruction set the fast kernels use.
 *
 * rtlib is compiled for a baseline (-march=x86-64-v2); the matmul and vmath
 * kernels also carry AVX2+FMA and AVX-512F versions (target attributes) and
 * use the best one this CPU and OS support.  $NNSC_ISA=avx512|avx2|scalar
 * asks for a lower one (for comparisons); tests switch with rt_isa_force.
 */
#include <stdlib.h>
#include <string.h>

#include "cpu/rt_cpu.h"

/* The choice, once made (NULL: not yet). */
static const char *isa_cur;

int rt_isa_supported(const char *name)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (!strcmp(name, "avx512"))
        return __builtin_cpu_supports("avx512f");
    if (!strcmp(name, "avx2"))
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return !strcmp(name, "scalar");
}

const char *rt_isa_name(void)
{
    static const char *const best_first[] = {"avx512", "avx2", "scalar"};
    if (!isa_cur) {
        const char *e = getenv("NNSC_ISA");
        for (int k = 0; k < 3 && !isa_cur; k++)
            if (e && !strcmp(e, best_first[k]) && rt_isa_supported(e))
                isa_cur = best_first[k];
        for (int k = 0; k < 3 && !isa_cur; k++)
            if (rt_isa_supported(best_first[k]))
                isa_cur = best_first[k];
    }
    return isa_cur;
}

int rt_isa_force(const char *name)
{
    static const char *const names[] = {"avx512", "avx2", "scalar"};
    const char *pick = NULL;
    for (int k = 0; k < 3; k++)
        if (name && !strcmp(name, names[k]))
            pick = names[k];
    if (name && (!pick || !rt_isa_supported(pick)))
        return -1;
    isa_cur = pick;   /* NULL: choose again on next use */
    rt_matmul_reset();
    rt_vmath_reset();
    return 0;
}

void rt_isa_ready(void)
{
    rt_isa_name();
    rt_matmul_isa();
    rt_vmath_isa();
}
