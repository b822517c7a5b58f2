/* vmath.c -- vectorised exp and the kernels built on it (gelu, gelu_bwd,
 * the softmax sums of xent, softmax and attention's exp), with the same
 * run-time ISA choice as matmul.
 *
 * exp(x) = 2^n * e^r with n = round(x log2 e) and r = x - n ln 2 (ln 2 split
 * in a high and a low part, so r is exact to a few ulp), |r| <= ln2 / 2, and
 * e^r by its Taylor polynomial to degree 7 (truncation error below 1e-8,
 * relative).  tanh(u) = 1 - 2 / (exp(2u) + 1): exact limits at +-inf and an
 * absolute error of a few 1e-8 near 0, which is what gelu needs (its
 * result is 0.5 x (1 + tanh u)).  Results differ from libm's in the last
 * bits; the kernel tests bound the difference against the double-precision
 * references.
 */
#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define RT_HAVE_X86 1
#endif

#include "cpu/rt_cpu.h"

#define VM_LOG2E 1.44269504088896341f
#define VM_LN2_HI 0.693359375f          /* ln 2, high part (exact in few bits) */
#define VM_LN2_LO (-2.12194440e-4f)     /* ln 2 - VM_LN2_HI */
#define VM_GELU_C 0.7978845608f         /* sqrt(2 / pi) */
#define VM_GELU_A 0.044715f

/* One implementation of the vector primitives. */
typedef struct vm_isa {
    const char *name;   /* "avx512", "avx2", "scalar" */
    void (*gelu)(const float *x, float *y, int64_t n);
    void (*gelu_bwd)(const float *dy, const float *x, float *dx, int64_t n, int acc);
    float (*max)(const float *x, int64_t n);
    double (*exp_sum)(const float *x, float mx, int64_t n);
    void (*exp_scale)(const float *x, float mx, float shift, float scale, float *y, int64_t n,
                      int acc);
    double (*exp_affine)(const float *x, float a, float c, float *y, int64_t n);
} vm_isa;

/* ---- portable versions (libm) */

/* y = gelu(x) with libm's tanhf. */
static void vm_gelu_scalar(const float *x, float *y, int64_t n)
{
    for (int64_t k = 0; k < n; k++) {
        float v = x[k];
        y[k] = 0.5f * v * (1.0f + tanhf(VM_GELU_C * (v + VM_GELU_A * v * v * v)));
    }
}

/* dx (+)= dy * gelu'(x) with libm's tanhf. */
static void vm_gelu_bwd_scalar(const float *dy, const float *x, float *dx, int64_t n, int acc)
{
    for (int64_t k = 0; k < n; k++) {
        float v = x[k];
        float t = tanhf(VM_GELU_C * (v + VM_GELU_A * v * v * v));
        float d = 0.5f * (1.0f + t) +
                  0.5f * v * (1.0f - t * t) * VM_GELU_C * (1.0f + 3.0f * VM_GELU_A * v * v);
        dx[k] = (acc ? dx[k] : 0.0f) + dy[k] * d;
    }
}

/* max of x[0..n). */
static float vm_max_scalar(const float *x, int64_t n)
{
    float m = x[0];
    for (int64_t k = 1; k < n; k++)
        m = x[k] > m ? x[k] : m;
    return m;
}

/* sum of exp(x - mx). */
static double vm_exp_sum_scalar(const float *x, float mx, int64_t n)
{
    float s = 0.0f;
    for (int64_t k = 0; k < n; k++)
        s += expf(x[k] - mx);
    return s;
}

/* y (+)= scale * exp((x - mx) - shift). */
static void vm_exp_scale_scalar(const float *x, float mx, float shift, float scale, float *y,
                                int64_t n, int acc)
{
    for (int64_t k = 0; k < n; k++)
        y[k] = (acc ? y[k] : 0.0f) + scale * expf((x[k] - mx) - shift);
}

/* y = exp(a x - c); returns the sum of y. */
static double vm_exp_affine_scalar(const float *x, float a, float c, float *y, int64_t n)
{
    float s = 0.0f;
    for (int64_t k = 0; k < n; k++) {
        y[k] = expf(a * x[k] - c);
        s += y[k];
    }
    return s;
}

#ifdef RT_HAVE_X86

/* ---- AVX-512F */

/* e^x, 16 lanes; scalef handles overflow (inf) and underflow (0). */
__attribute__((target("avx512f"))) static inline __m512 vm_exp512(__m512 x)
{
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(100.0f)), _mm512_set1_ps(-110.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(VM_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(VM_LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(VM_LN2_LO), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);           /* Horner, 1/7! .. 1/0! */
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* tanh(u) = 1 - 2 / (e^(2u) + 1). */
__attribute__((target("avx512f"))) static inline __m512 vm_tanh512(__m512 u)
{
    __m512 e = vm_exp512(_mm512_add_ps(u, u));
    __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
}

/* Mask of the first n (< 16) lanes, or all. */
static inline __mmask16 vm_mask16(int64_t n)
{
    return (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
}

/* The same five with 16 lanes; the tail is a masked load/store. */
__attribute__((target("avx512f"))) static void vm_gelu_avx512(const float *x, float *y,
                                                              int64_t n)
{
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = vm_mask16(n - k);
        __m512 v = _mm512_maskz_loadu_ps(m, x + k);
        __m512 u = _mm512_mul_ps(_mm512_set1_ps(VM_GELU_C),
                                 _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(VM_GELU_A), v),
                                                 _mm512_mul_ps(v, v), v));
        __m512 t = vm_tanh512(u);
        __m512 r = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), v),
                                 _mm512_add_ps(_mm512_set1_ps(1.0f), t));
        _mm512_mask_storeu_ps(y + k, m, r);
    }
}

__attribute__((target("avx512f"))) static void
vm_gelu_bwd_avx512(const float *dy, const float *x, float *dx, int64_t n, int acc)
{
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = vm_mask16(n - k);
        __m512 v = _mm512_maskz_loadu_ps(m, x + k);
        __m512 v2 = _mm512_mul_ps(v, v);
        __m512 u = _mm512_mul_ps(_mm512_set1_ps(VM_GELU_C),
                                 _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(VM_GELU_A), v), v2,
                                                 v));
        __m512 t = vm_tanh512(u);
        __m512 du = _mm512_mul_ps(_mm512_set1_ps(VM_GELU_C),
                                  _mm512_fmadd_ps(_mm512_set1_ps(3.0f * VM_GELU_A), v2, one));
        __m512 sech2 = _mm512_fnmadd_ps(t, t, one);
        __m512 d = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(half, v), sech2), du,
                                   _mm512_mul_ps(half, _mm512_add_ps(one, t)));
        __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + k), d);
        if (acc)
            g = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dx + k), g);
        _mm512_mask_storeu_ps(dx + k, m, g);
    }
}

__attribute__((target("avx512f"))) static float vm_max_avx512(const float *x, int64_t n)
{
    __m512 m = _mm512_set1_ps(x[0]);
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 mk = vm_mask16(n - k);
        m = _mm512_mask_max_ps(m, mk, m, _mm512_maskz_loadu_ps(mk, x + k));
    }
    return _mm512_reduce_max_ps(m);
}

__attribute__((target("avx512f"))) static double vm_exp_sum_avx512(const float *x, float mx,
                                                                   int64_t n)
{
    __m512 s = _mm512_setzero_ps(), vmx = _mm512_set1_ps(mx);
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = vm_mask16(n - k);
        __m512 e = vm_exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + k), vmx));
        s = _mm512_mask_add_ps(s, m, s, e);
    }
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx512f"))) static void
vm_exp_scale_avx512(const float *x, float mx, float shift, float scale, float *y, int64_t n,
                    int acc)
{
    __m512 vmx = _mm512_set1_ps(mx), vsh = _mm512_set1_ps(shift), vsc = _mm512_set1_ps(scale);
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = vm_mask16(n - k);
        __m512 e = vm_exp512(_mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + k), vmx),
                                           vsh));
        __m512 r = acc ? _mm512_fmadd_ps(vsc, e, _mm512_maskz_loadu_ps(m, y + k))
                       : _mm512_mul_ps(vsc, e);
        _mm512_mask_storeu_ps(y + k, m, r);
    }
}

__attribute__((target("avx512f"))) static double
vm_exp_affine_avx512(const float *x, float a, float c, float *y, int64_t n)
{
    __m512 s = _mm512_setzero_ps(), va = _mm512_set1_ps(a), vc = _mm512_set1_ps(c);
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = vm_mask16(n - k);
        __m512 e = vm_exp512(_mm512_fmsub_ps(va, _mm512_maskz_loadu_ps(m, x + k), vc));
        _mm512_mask_storeu_ps(y + k, m, e);
        s = _mm512_mask_add_ps(s, m, s, e);
    }
    return _mm512_reduce_add_ps(s);
}

/* ---- AVX2 + FMA (tails go through a zero-padded 8-float buffer) */

/* e^x, 8 lanes; below -87.3 the result is 0. */
__attribute__((target("avx2,fma"))) static inline __m256 vm_exp256(__m256 x)
{
    __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.7f)), _mm256_set1_ps(-87.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(VM_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(VM_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(VM_LN2_LO), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n: n + 127 into the exponent field; n is in [-126, 128] after the clamp */
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
                                  23);
    __m256 half_scale = _mm256_castsi256_ps(
        _mm256_sub_epi32(e, _mm256_set1_epi32(1 << 23)));   /* 2^(n-1): n = 128 stays finite */
    __m256 res = _mm256_mul_ps(_mm256_mul_ps(p, half_scale), _mm256_set1_ps(2.0f));
    return _mm256_andnot_ps(tiny, res);
}

__attribute__((target("avx2,fma"))) static inline __m256 vm_tanh256(__m256 u)
{
    __m256 e = vm_exp256(_mm256_add_ps(u, u));
    __m256 one = _mm256_set1_ps(1.0f);
    return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
}

/* gelu of 8 lanes. */
__attribute__((target("avx2,fma"))) static inline __m256 vm_gelu8(__m256 v)
{
    __m256 u = _mm256_mul_ps(_mm256_set1_ps(VM_GELU_C),
                             _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(VM_GELU_A), v),
                                             _mm256_mul_ps(v, v), v));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v),
                         _mm256_add_ps(_mm256_set1_ps(1.0f), vm_tanh256(u)));
}

/* gelu'(v) of 8 lanes. */
__attribute__((target("avx2,fma"))) static inline __m256 vm_dgelu8(__m256 v)
{
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    __m256 v2 = _mm256_mul_ps(v, v);
    __m256 u = _mm256_mul_ps(_mm256_set1_ps(VM_GELU_C),
                             _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(VM_GELU_A), v), v2, v));
    __m256 t = vm_tanh256(u);
    __m256 du = _mm256_mul_ps(_mm256_set1_ps(VM_GELU_C),
                              _mm256_fmadd_ps(_mm256_set1_ps(3.0f * VM_GELU_A), v2, one));
    __m256 sech2 = _mm256_fnmadd_ps(t, t, one);
    return _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(half, v), sech2), du,
                           _mm256_mul_ps(half, _mm256_add_ps(one, t)));
}

/* Load k..k+8 of x, zero-padded past n. */
__attribute__((target("avx2,fma"))) static inline __m256 vm_load8(const float *x, int64_t k,
                                                                  int64_t n)
{
    if (n - k >= 8)
        return _mm256_loadu_ps(x + k);
    float t[8] = {0};
    memcpy(t, x + k, (size_t)(n - k) * 4);
    return _mm256_loadu_ps(t);
}

/* Store lanes of v to y[k..min(k+8, n)). */
__attribute__((target("avx2,fma"))) static inline void vm_store8(float *y, int64_t k, int64_t n,
                                                                __m256 v)
{
    if (n - k >= 8) {
        _mm256_storeu_ps(y + k, v);
        return;
    }
    float t[8];
    _mm256_storeu_ps(t, v);
    memcpy(y + k, t, (size_t)(n - k) * 4);
}

/* The same with 8 lanes (max stays scalar). */
__attribute__((target("avx2,fma"))) static void vm_gelu_avx2(const float *x, float *y, int64_t n)
{
    for (int64_t k = 0; k < n; k += 8)
        vm_store8(y, k, n, vm_gelu8(vm_load8(x, k, n)));
}

__attribute__((target("avx2,fma"))) static void
vm_gelu_bwd_avx2(const float *dy, const float *x, float *dx, int64_t n, int acc)
{
    for (int64_t k = 0; k < n; k += 8) {
        __m256 g = _mm256_mul_ps(vm_load8(dy, k, n), vm_dgelu8(vm_load8(x, k, n)));
        if (acc)
            g = _mm256_add_ps(vm_load8(dx, k, n), g);
        vm_store8(dx, k, n, g);
    }
}

__attribute__((target("avx2,fma"))) static double vm_exp_sum_avx2(const float *x, float mx,
                                                                 int64_t n)
{
    __m256 s = _mm256_setzero_ps(), vmx = _mm256_set1_ps(mx);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        s = _mm256_add_ps(s, vm_exp256(_mm256_sub_ps(_mm256_loadu_ps(x + k), vmx)));
    float t[8];
    _mm256_storeu_ps(t, s);
    double r = 0;
    for (int j = 0; j < 8; j++)
        r += t[j];
    for (; k < n; k++)
        r += expf(x[k] - mx);
    return r;
}

__attribute__((target("avx2,fma"))) static void
vm_exp_scale_avx2(const float *x, float mx, float shift, float scale, float *y, int64_t n,
                  int acc)
{
    __m256 vmx = _mm256_set1_ps(mx), vsh = _mm256_set1_ps(shift), vsc = _mm256_set1_ps(scale);
    for (int64_t k = 0; k < n; k += 8) {
        __m256 e = vm_exp256(_mm256_sub_ps(_mm256_sub_ps(vm_load8(x, k, n), vmx), vsh));
        __m256 r = acc ? _mm256_fmadd_ps(vsc, e, vm_load8(y, k, n)) : _mm256_mul_ps(vsc, e);
        vm_store8(y, k, n, r);
    }
}

__attribute__((target("avx2,fma"))) static double
vm_exp_affine_avx2(const float *x, float a, float c, float *y, int64_t n)
{
    __m256 s = _mm256_setzero_ps(), va = _mm256_set1_ps(a), vc = _mm256_set1_ps(c);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        __m256 e = vm_exp256(_mm256_fmsub_ps(va, _mm256_loadu_ps(x + k), vc));
        _mm256_storeu_ps(y + k, e);
        s = _mm256_add_ps(s, e);
    }
    float t[8];
    _mm256_storeu_ps(t, s);
    double r = 0;
    for (int j = 0; j < 8; j++)
        r += t[j];
    for (; k < n; k++) {
        y[k] = expf(a * x[k] - c);
        r += y[k];
    }
    return r;
}

#endif /* RT_HAVE_X86 */

/* The implementations, best first. */
static const vm_isa vm_isas[] = {
#ifdef RT_HAVE_X86
    {"avx512", vm_gelu_avx512, vm_gelu_bwd_avx512, vm_max_avx512, vm_exp_sum_avx512,
     vm_exp_scale_avx512, vm_exp_affine_avx512},
    {"avx2", vm_gelu_avx2, vm_gelu_bwd_avx2, vm_max_scalar, vm_exp_sum_avx2, vm_exp_scale_avx2,
     vm_exp_affine_avx2},
#endif
    {"scalar", vm_gelu_scalar, vm_gelu_bwd_scalar, vm_max_scalar, vm_exp_sum_scalar,
     vm_exp_scale_scalar, vm_exp_affine_scalar},
};

/* The implementation in use (chosen on first call). */
static const vm_isa *vm_cur;

/* Choose: rt_isa_choose's pick, by name. */
static const vm_isa *vm(void)
{
    if (!vm_cur) {
        const char *name = rt_isa_name();
        for (size_t k = 0; k < sizeof vm_isas / sizeof vm_isas[0] && !vm_cur; k++)
            if (!strcmp(vm_isas[k].name, name))
                vm_cur = &vm_isas[k];
        if (!vm_cur)
            vm_cur = &vm_isas[sizeof vm_isas / sizeof vm_isas[0] - 1];
    }
    return vm_cur;
}

void rt_vmath_reset(void)
{
    vm_cur = NULL;
}

const char *rt_vmath_isa(void)
{
    return vm()->name;
}

void rt_vgelu(const float *x, float *y, int64_t n)
{
    if (n > 0)
        vm()->gelu(x, y, n);
}

void rt_vgelu_bwd(const float *dy, const float *x, float *dx, int64_t n, int acc)
{
    if (n > 0)
        vm()->gelu_bwd(dy, x, dx, n, acc);
}

float rt_vmax(const float *x, int64_t n)
{
    return vm()->max(x, n);
}

double rt_vexp_sum(const float *x, float mx, int64_t n)
{
    return vm()->exp_sum(x, mx, n);
}

void rt_vexp_scale(const float *x, float mx, float shift, float scale, float *y, int64_t n,
                   int acc)
{
    if (n > 0)
        vm()->exp_scale(x, mx, shift, scale, y, n, acc);
}

double rt_vexp_affine(const float *x, float a, float c, float *y, int64_t n)
{
    return n > 0 ? vm()->exp_affine(x, a, c, y, n) : 0.0;
}
