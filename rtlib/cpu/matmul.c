/* matmul.c -- C[M,N] (+)= op(A)[M,K] op(B)[K,N], blocked for the caches,
 * with a SIMD register-blocked micro-kernel chosen at run time.
 *
 * The classic Goto/BLIS structure, on one thread (rt_gemm):
 *
 *   for jc in N by NC:                  B panel of NC columns
 *     for pc in K by KC:                pack op(B)[pc.., jc..] into NR-wide slivers (L3/L2)
 *       for ic in M by MC:              pack op(A)[ic.., pc..] into MR-tall slivers (L2)
 *         for jr in NC by NR:           one B sliver (KC x NR, stays in L1)
 *           for ir in MC by MR:         micro-kernel: an MR x NR tile of C in registers
 *
 * Packing reads A and B in whichever of the four transpose layouts they come
 * in and writes the one layout the micro-kernel wants, zero-padding partial
 * slivers, so the kernel never sees a transpose or an edge.  Edge tiles of C
 * (fewer than MR rows or NR columns) go through a small buffer.  With
 * AVX-512, the strided layouts are packed by 16 x 16 transposes and the
 * contiguous ones with masked loads and stores, a sliver row at a time.
 *
 * Micro-kernels: AVX-512F 14x32 (28 zmm accumulators), AVX2+FMA 6x16 (12 ymm
 * accumulators), and a portable C one; isa.c picks the best the CPU has
 * ($NNSC_ISA=avx512|avx2|scalar asks for a lower one).  The pack
 * buffers are the calling thread's scratch (pool.c: on huge pages, which
 * matters when the operands are not in cache, as in a training step): no
 * allocation per call.
 *
 * rt_matmul (the rt_k_matmul kernel) splits C into a grid of blocks, one per
 * pool thread (rows in multiples of MR, columns in multiples of NR), and
 * each thread runs rt_gemm on its block: every element of C is computed by
 * one thread, in the same order whatever the number of threads, so results
 * are bitwise the same for any thread count.  rt_gemm also takes row
 * strides, so attention (attention.c) runs it on tiles of its heads.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define RT_HAVE_X86 1
#endif

#include "cpu/rt_cpu.h"

/* Register tile and cache blocks of one micro-kernel. */
typedef struct mm_isa {
    const char *name;   /* "avx512", "avx2", "scalar" */
    int mr, nr;         /* register tile: rows, columns */
    int64_t mc, kc, nc; /* cache blocks: rows of A, depth, columns of B */
    /* c[0..mr, 0..nr) (+)= a-sliver (kc x mr) times b-sliver (kc x nr); ldc: row stride */
    void (*kernel)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int load_c);
    /* optional: dst[p*width + r] = src[r*ld + p] for r < rows (0 for rows <= r < width) */
    void (*strided)(const float *src, int64_t ld, int64_t rows, int64_t kc, int width,
                    float *dst);
    /* optional: the slivers of a contiguous panel, row by row: for p < kc and
     * each sliver s, dst[s*kc*width + p*width + j] = src[p*ld + s*width + j]
     * for s*width + j < cols, 0 beyond */
    void (*copy)(const float *src, int64_t ld, int64_t cols, int64_t kc, int width, float *dst);
} mm_isa;

#define MM_MAX_MR 16
#define MM_MAX_NR 32
#define MM_MAX_MC 336
#define MM_MAX_KC 384
#define MM_MAX_NC 3072
#define MM_APACK_FLOATS (MM_MAX_MC * MM_MAX_KC)
#define MM_BPACK_FLOATS (MM_MAX_KC * (MM_MAX_NC + MM_MAX_NR))
_Static_assert(MM_APACK_FLOATS + MM_BPACK_FLOATS <= RT_MM_SCRATCH_FLOATS,
               "matmul pack buffers must fit the scratch");

/* ---- micro-kernels */

/* Portable 4x8 kernel (the compiler may vectorise it for the baseline ISA). */
static void mm_kernel_scalar(int64_t kc, const float *restrict a, const float *restrict b,
                             float *restrict c, int64_t ldc, int load_c)
{
    float acc[4][8] = {{0}};
    for (int64_t p = 0; p < kc; p++) {
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 8; j++)
                acc[i][j] += a[i] * b[j];
        a += 4;
        b += 8;
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++)
            c[i * ldc + j] = (load_c ? c[i * ldc + j] : 0.0f) + acc[i][j];
}

#ifdef RT_HAVE_X86

/* AVX2 + FMA: a 6x16 tile in 12 ymm registers. */
__attribute__((target("avx2,fma"))) static void
mm_kernel_avx2(int64_t kc, const float *restrict a, const float *restrict b, float *restrict c,
               int64_t ldc, int load_c)
{
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int64_t p = 0; p < kc; p++) {
        __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
        __m256 x;
#define MM_ROW2(i)                               \
    x = _mm256_broadcast_ss(a + i);              \
    c##i##0 = _mm256_fmadd_ps(x, b0, c##i##0);   \
    c##i##1 = _mm256_fmadd_ps(x, b1, c##i##1);
        MM_ROW2(0) MM_ROW2(1) MM_ROW2(2) MM_ROW2(3) MM_ROW2(4) MM_ROW2(5)
#undef MM_ROW2
        a += 6;
        b += 16;
    }
#define MM_ST2(i)                                                                       \
    {                                                                                   \
        float *r = c + i * ldc;                                                         \
        if (load_c) {                                                                   \
            c##i##0 = _mm256_add_ps(c##i##0, _mm256_loadu_ps(r));                       \
            c##i##1 = _mm256_add_ps(c##i##1, _mm256_loadu_ps(r + 8));                   \
        }                                                                               \
        _mm256_storeu_ps(r, c##i##0);                                                   \
        _mm256_storeu_ps(r + 8, c##i##1);                                               \
    }
    MM_ST2(0) MM_ST2(1) MM_ST2(2) MM_ST2(3) MM_ST2(4) MM_ST2(5)
#undef MM_ST2
}

/* AVX-512F: a 14x32 tile in 28 zmm registers; A is broadcast from memory. */
__attribute__((target("avx512f"))) static void
mm_kernel_avx512(int64_t kc, const float *restrict a, const float *restrict b,
                 float *restrict c, int64_t ldc, int load_c)
{
#define MM_Z(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();
    MM_Z(0) MM_Z(1) MM_Z(2) MM_Z(3) MM_Z(4) MM_Z(5) MM_Z(6)
    MM_Z(7) MM_Z(8) MM_Z(9) MM_Z(10) MM_Z(11) MM_Z(12) MM_Z(13)
#undef MM_Z
    for (int i = 0; i < 14; i++) {   /* both lines of each row: stored at the end */
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
    }
    for (int64_t p = 0; p < kc; p++) {
        __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
        __m512 x;
#define MM_ROW(i)                                \
    x = _mm512_set1_ps(a[i]);                    \
    c##i##0 = _mm512_fmadd_ps(x, b0, c##i##0);   \
    c##i##1 = _mm512_fmadd_ps(x, b1, c##i##1);
        MM_ROW(0) MM_ROW(1) MM_ROW(2) MM_ROW(3) MM_ROW(4) MM_ROW(5) MM_ROW(6)
        MM_ROW(7) MM_ROW(8) MM_ROW(9) MM_ROW(10) MM_ROW(11) MM_ROW(12) MM_ROW(13)
#undef MM_ROW
        a += 14;
        b += 32;
    }
#define MM_ST(i)                                                                        \
    {                                                                                   \
        float *r = c + i * ldc;                                                         \
        if (load_c) {                                                                   \
            c##i##0 = _mm512_add_ps(c##i##0, _mm512_loadu_ps(r));                       \
            c##i##1 = _mm512_add_ps(c##i##1, _mm512_loadu_ps(r + 16));                  \
        }                                                                               \
        _mm512_storeu_ps(r, c##i##0);                                                   \
        _mm512_storeu_ps(r + 16, c##i##1);                                              \
    }
    MM_ST(0) MM_ST(1) MM_ST(2) MM_ST(3) MM_ST(4) MM_ST(5) MM_ST(6)
    MM_ST(7) MM_ST(8) MM_ST(9) MM_ST(10) MM_ST(11) MM_ST(12) MM_ST(13)
#undef MM_ST
}

/* 16 x 16 transpose in registers: r[i] holds row i; afterwards r[j] holds
 * column j (32-bit, 64-bit and two 128-bit rounds of two-source shuffles). */
__attribute__((target("avx512f"))) static inline void mm_transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
        __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int h = 0; h < 16; h += 8)
        for (int j = 0; j < 4; j++) {
            t[h + j] = _mm512_shuffle_f32x4(r[h + j], r[h + j + 4], 0x88);
            t[h + j + 4] = _mm512_shuffle_f32x4(r[h + j], r[h + j + 4], 0xdd);
        }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
    }
}

/* Packing of the two strided layouts (a sliver column is one k of mr rows
 * of A stored (M, K), or of nr columns of B stored (N, K)): 16 source rows,
 * 16 consecutive k at a time, are read as whole vectors (row streams for the
 * prefetcher; masked at the ends, missing rows are 0) and transposed in
 * registers.  Faster than a masked gather per sliver column. */
__attribute__((target("avx512f"))) static void
mm_trans_avx512(const float *src, int64_t ld, int64_t rows, int64_t kc, int width, float *dst)
{
    for (int r0 = 0; r0 < width; r0 += 16) {
        int nrow = rows - r0 < 16 ? (int)(rows - r0 > 0 ? rows - r0 : 0) : 16;
        int wid = width - r0 < 16 ? width - r0 : 16;   /* lanes stored */
        __mmask16 st = (__mmask16)(wid >= 16 ? 0xffff : (1u << wid) - 1);
        for (int64_t p0 = 0; p0 < kc; p0 += 16) {
            int64_t np = kc - p0 < 16 ? kc - p0 : 16;
            __mmask16 ld_m = (__mmask16)(np >= 16 ? 0xffff : (1u << np) - 1);
            __m512 r[16];
            for (int i = 0; i < 16; i++)
                r[i] = i < nrow ? _mm512_maskz_loadu_ps(ld_m, src + (r0 + i) * ld + p0)
                                : _mm512_setzero_ps();
            mm_transpose16(r);
            for (int64_t j = 0; j < np; j++)
                _mm512_mask_storeu_ps(dst + (p0 + j) * width + r0, st, r[j]);
        }
    }
}

/* Packing of the two contiguous layouts: each source row is read once,
 * from left to right (a stream the hardware prefetcher follows, which
 * matters when the operand comes from memory), and scattered to the
 * slivers with masked loads and stores. */
__attribute__((target("avx512f"))) static void
mm_copy_avx512(const float *src, int64_t ld, int64_t cols, int64_t kc, int width, float *dst)
{
    __mmask16 st0 = (__mmask16)(width >= 16 ? 0xffff : (1u << width) - 1);
    __mmask16 st1 = (__mmask16)(width <= 16 ? 0 : (1u << (width - 16)) - 1);
    int64_t sliver = kc * width;
    for (int64_t p = 0; p < kc; p++, src += ld) {
        float *d = dst + p * width;
        for (int64_t j0 = 0; j0 < cols; j0 += width, d += sliver) {
            int64_t w = cols - j0;
            __mmask16 l0 = (__mmask16)(w >= 16 ? 0xffff : (1u << w) - 1);
            __mmask16 l1 = (__mmask16)(w <= 16 ? 0 : w >= 32 ? 0xffff : (1u << (w - 16)) - 1);
            _mm512_mask_storeu_ps(d, st0, _mm512_maskz_loadu_ps(l0, src + j0));
            if (width > 16)
                _mm512_mask_storeu_ps(d + 16, st1, _mm512_maskz_loadu_ps(l1, src + j0 + 16));
        }
    }
}

#endif /* RT_HAVE_X86 */

/* The kernels this build knows, best first. */
static const mm_isa mm_isas[] = {
#ifdef RT_HAVE_X86
    {"avx512", 14, 32, 14 * 12, 384, 3072, mm_kernel_avx512, mm_trans_avx512, mm_copy_avx512},
    {"avx2", 6, 16, 6 * 24, 256, 3072, mm_kernel_avx2, NULL, NULL},
#endif
    {"scalar", 4, 8, 4 * 32, 256, 1024, mm_kernel_scalar, NULL, NULL},
};
#define MM_NISA ((int)(sizeof mm_isas / sizeof mm_isas[0]))

/* The kernel in use (chosen on first call). */
static const mm_isa *mm_cur;



/* The kernel of the ISA rt_isa_name picks (the portable one if this build lacks it). */
static const mm_isa *mm_choose(void)
{
    if (!mm_cur) {
        const char *name = rt_isa_name();
        for (int k = 0; k < MM_NISA && !mm_cur; k++)
            if (!strcmp(mm_isas[k].name, name))
                mm_cur = &mm_isas[k];
        if (!mm_cur)
            mm_cur = &mm_isas[MM_NISA - 1];
        RT_ASSERT(mm_cur->mr <= MM_MAX_MR && mm_cur->nr <= MM_MAX_NR &&
                  mm_cur->mc <= MM_MAX_MC && mm_cur->kc <= MM_MAX_KC && mm_cur->nc <= MM_MAX_NC);
    }
    return mm_cur;
}

void rt_matmul_reset(void)
{
    mm_cur = NULL;
}

const char *rt_matmul_isa(void)
{
    return mm_choose()->name;
}

/* ---- packing */

/* Pack op(B)[pc..pc+kc, jc..jc+nc) as nr-wide slivers: sliver s holds
 * columns s*nr.., row p at dst[s*kc*nr + p*nr], zero beyond nc.  B's rows
 * are ldb floats apart (B stored (K, N), or (N, K) when transB). */
static void mm_pack_b(const mm_isa *k, const float *B, int64_t ldb, int transB, int64_t pc,
                      int64_t kc, int64_t jc, int64_t nc, float *dst)
{
    int nr = k->nr;
    if (!transB && k->copy) {
        k->copy(B + pc * ldb + jc, ldb, nc, kc, nr, dst);
        return;
    }
    for (int64_t j0 = 0; j0 < nc; j0 += nr, dst += kc * nr) {
        int64_t w = nc - j0 < nr ? nc - j0 : nr;
        if (transB && k->strided) {
            k->strided(B + (jc + j0) * ldb + pc, ldb, w, kc, nr, dst);
        } else if (!transB) {
            const float *src = B + pc * ldb + jc + j0;
            for (int64_t p = 0; p < kc; p++) {
                memcpy(dst + p * nr, src + p * ldb, (size_t)w * 4);
                for (int64_t j = w; j < nr; j++)
                    dst[p * nr + j] = 0.0f;
            }
        } else {
            for (int64_t j = 0; j < w; j++) {
                const float *src = B + (jc + j0 + j) * ldb + pc;   /* B stored (N, K) */
                for (int64_t p = 0; p < kc; p++)
                    dst[p * nr + j] = src[p];
            }
            for (int64_t j = w; j < nr; j++)
                for (int64_t p = 0; p < kc; p++)
                    dst[p * nr + j] = 0.0f;
        }
    }
}

/* Pack op(A)[ic..ic+mc, pc..pc+kc) as mr-tall slivers: sliver s holds
 * rows s*mr.., column p at dst[s*kc*mr + p*mr], zero beyond mc.  A's rows
 * are lda floats apart (A stored (M, K), or (K, M) when transA). */
static void mm_pack_a(const mm_isa *k, const float *A, int64_t lda, int transA, int64_t ic,
                      int64_t mc, int64_t pc, int64_t kc, float *dst)
{
    int mr = k->mr;
    if (transA && k->copy) {
        k->copy(A + pc * lda + ic, lda, mc, kc, mr, dst);
        return;
    }
    for (int64_t i0 = 0; i0 < mc; i0 += mr, dst += kc * mr) {
        int64_t h = mc - i0 < mr ? mc - i0 : mr;
        if (!transA && k->strided) {
            k->strided(A + (ic + i0) * lda + pc, lda, h, kc, mr, dst);
        } else if (transA) {
            const float *src = A + pc * lda + ic + i0;   /* A stored (K, M) */
            for (int64_t p = 0; p < kc; p++) {
                memcpy(dst + p * mr, src + p * lda, (size_t)h * 4);
                for (int64_t i = h; i < mr; i++)
                    dst[p * mr + i] = 0.0f;
            }
        } else {
            for (int64_t i = 0; i < h; i++) {
                const float *src = A + (ic + i0 + i) * lda + pc;
                for (int64_t p = 0; p < kc; p++)
                    dst[p * mr + i] = src[p];
            }
            for (int64_t i = h; i < mr; i++)
                for (int64_t p = 0; p < kc; p++)
                    dst[p * mr + i] = 0.0f;
        }
    }
}

/* ---- driver */

/* Memory that the next packing will read: rows of bytes, prefetched into
 * L2 a few lines at a time while the current block computes, so that the
 * packing (which would otherwise wait on DRAM with the FMA units idle)
 * reads from cache.  A training step streams its weights and activations
 * from memory: this hides most of that latency. */
#define MM_PF_MAX_LINES 2048   /* 128 KiB: what L2 holds beside the block being computed */

typedef struct mm_pf {
    const char *base;       /* first row (NULL: nothing to prefetch) */
    int64_t rows;           /* rows */
    int64_t stride;         /* bytes from one row to the next */
    int64_t lines;          /* 64-byte lines per row */
    int64_t done;           /* lines prefetched so far */
} mm_pf;

/* The rows of op(X)[r0..r0+nr, c0..c0+nc) of a matrix stored with row
 * stride ld (floats), transposed or not, as a prefetch job. */
static mm_pf mm_pf_rows(const float *X, int64_t ld, int trans, int64_t r0, int64_t nr,
                        int64_t c0, int64_t nc)
{
    if (trans) {   /* stored (cols, rows): nc rows of nr floats */
        int64_t t = r0;
        r0 = c0;
        c0 = t;
        t = nr;
        nr = nc;
        nc = t;
    }
    const char *first = (const char *)(X + r0 * ld + c0);
    int64_t lines = ((int64_t)((uintptr_t)first % 64) + nc * 4 + 63) / 64;
    if (nr * lines > MM_PF_MAX_LINES)   /* only the start: more would evict the block */
        nr = MM_PF_MAX_LINES / lines > 0 ? MM_PF_MAX_LINES / lines : 1;
    return (mm_pf){(const char *)((uintptr_t)first / 64 * 64), nr, ld * 4, lines, 0};
}

/* Prefetch the next n lines of job pf into L2. */
static void mm_pf_issue(mm_pf *pf, int64_t n)
{
    int64_t total = pf->rows * pf->lines;
    for (; n > 0 && pf->base && pf->done < total; n--, pf->done++) {
        int64_t r = pf->done / pf->lines, l = pf->done % pf->lines;
        __builtin_prefetch(pf->base + r * pf->stride + l * 64, 0, 2);
    }
}

/* One packed block: C[ic.., jc..] (+)= Apack Bpack over depth kc, spreading
 * the prefetch jobs pf[0..npf) over its micro-kernel calls. */
static void mm_block(const mm_isa *k, int64_t mc, int64_t nc, int64_t kc, const float *ap,
                     const float *bp, float *C, int64_t ldc, int load_c, mm_pf *pf, int npf)
{
    float tile[MM_MAX_MR * MM_MAX_NR] __attribute__((aligned(64)));
    int64_t calls = ((mc + k->mr - 1) / k->mr) * ((nc + k->nr - 1) / k->nr), per[2] = {0, 0};
    for (int q = 0; q < npf; q++)
        per[q] = (pf[q].rows * pf[q].lines + calls - 1) / calls;
    for (int64_t jr = 0; jr < nc; jr += k->nr) {
        int64_t w = nc - jr < k->nr ? nc - jr : k->nr;
        const float *b = bp + (jr / k->nr) * kc * k->nr;
        for (int64_t ir = 0; ir < mc; ir += k->mr) {
            int64_t h = mc - ir < k->mr ? mc - ir : k->mr;
            const float *a = ap + (ir / k->mr) * kc * k->mr;
            float *c = C + ir * ldc + jr;
            for (int q = 0; q < npf; q++)
                mm_pf_issue(&pf[q], per[q]);
            if (h == k->mr && w == k->nr) {
                k->kernel(kc, a, b, c, ldc, load_c);
                continue;
            }
            k->kernel(kc, a, b, tile, k->nr, 0);   /* edge tile: through a buffer */
            for (int64_t i = 0; i < h; i++)
                for (int64_t j = 0; j < w; j++)
                    c[i * ldc + j] = (load_c ? c[i * ldc + j] : 0.0f) + tile[i * k->nr + j];
        }
    }
}

void rt_gemm(int64_t M, int64_t K, int64_t N, const float *A, int64_t lda, int transA,
             const float *B, int64_t ldb, int transB, float *C, int64_t ldc, int acc,
             float *scratch)
{

    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        for (int64_t m = 0; m < M && !acc; m++)
            memset(C + m * ldc, 0, (size_t)N * 4);
        return;
    }
    const mm_isa *k = mm_choose();
    float *apack = scratch, *bpack = scratch + MM_APACK_FLOATS;
    for (int64_t jc = 0; jc < N; jc += k->nc) {
        int64_t nc = N - jc < k->nc ? N - jc : k->nc;
        for (int64_t pc = 0; pc < K; pc += k->kc) {
            int64_t kc = K - pc < k->kc ? K - pc : k->kc;
            int load_c = acc || pc > 0;
            /* the B panel after this one: (pc + kc, jc), else (0, jc + nc) */
            int64_t npc = pc + kc < K ? pc + kc : 0, njc = pc + kc < K ? jc : jc + nc;
            int64_t nkc = K - npc < k->kc ? K - npc : k->kc;
            int64_t nnc = N - njc < k->nc ? N - njc : k->nc;
            mm_pack_b(k, B, ldb, transB, pc, kc, jc, nc, bpack);
            for (int64_t ic = 0; ic < M; ic += k->mc) {
                int64_t mc = M - ic < k->mc ? M - ic : k->mc;
                mm_pack_a(k, A, lda, transA, ic, mc, pc, kc, apack);
                /* prefetch the next A block; in the last block, also the next B panel */
                mm_pf pf[2];
                int npf = 0;
                int64_t nic = ic + mc < M ? ic + mc : 0;
                int last = ic + mc >= M;
                if (!last || njc < N)
                    pf[npf++] = mm_pf_rows(A, lda, transA, nic, M - nic < k->mc ? M - nic : k->mc,
                                           last ? npc : pc, last ? nkc : kc);
                if (last && njc < N)
                    pf[npf++] = mm_pf_rows(B, ldb, transB, npc, nkc, njc, nnc);
                mm_block(k, mc, nc, kc, apack, bpack, C + ic * ldc + jc, ldc, load_c, pf, npf);
            }
        }
    }
}

/* A threaded matmul: the operands and the thread grid. */
typedef struct mm_job {
    int64_t M, K, N;        /* C[M,N] (+)= op(A)[M,K] op(B)[K,N] */
    const float *A, *B;     /* operands, stored as rt_matmul documents */
    int transA, transB;     /* layouts */
    float *C;               /* result */
    int acc;                /* 1: add into C */
    int tm, tn;             /* grid: tm row blocks x tn column blocks */
    int64_t mu, nu;         /* split granularity: MR rows, NR columns */
} mm_job;

/* Thread t's block of the grid: rt_gemm on a sub-matrix of C. */
static void mm_task(void *p, int t, int nt)
{
    const mm_job *j = p;
    int64_t m0, m1, n0, n1;
    rt_split(j->M, t / j->tn, j->tm, j->mu, &m0, &m1);
    rt_split(j->N, t % j->tn, j->tn, j->nu, &n0, &n1);
    if (m0 >= m1 || n0 >= n1)
        return;
    const float *A = j->transA ? j->A + m0 : j->A + m0 * j->K;
    const float *B = j->transB ? j->B + n0 * j->K : j->B + n0;
    rt_gemm(m1 - m0, j->K, n1 - n0, A, j->transA ? j->M : j->K, j->transA, B,
            j->transB ? j->K : j->N, j->transB, j->C + m0 * j->N + n0, j->N, j->acc,
            rt_scratch(t));
}

/* Products below this many multiply-adds run on one thread. */
#define MM_PAR_GRAIN (1 << 18)

void rt_matmul(int64_t M, int64_t K, int64_t N, const float *A, int transA, const float *B,
               int transB, float *C, int acc)
{
    if (M <= 0 || N <= 0)
        return;
    const mm_isa *k = mm_choose();
    mm_job j = {M, K, N, A, B, transA, transB, C, acc, 1, 1, k->mr, k->nr};
    int nt = rt_threads_for(M * N * (K > 0 ? K : 1), MM_PAR_GRAIN);
    /* the grid tm x tn = nt that packs least: each thread packs its rows of
     * A (M/tm x K) and its columns of B (K x N/tn); blocks keep >= 1 tile */
    double best = -1;
    for (int tm = 1; tm <= nt; tm++) {
        int tn = nt / tm;
        if (tm * tn != nt || (tm > 1 && M < tm * k->mr) || (tn > 1 && N < tn * k->nr))
            continue;
        double cost = (double)M / tm + (double)N / tn;
        if (best < 0 || cost < best) {
            best = cost;
            j.tm = tm;
            j.tn = tn;
        }
    }
    rt_parallel(mm_task, &j, j.tm * j.tn);
}
