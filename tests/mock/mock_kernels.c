/* mock_kernels.c -- the kernel side of the CUDA driver double (mock_cuda.c;
 * both build libcuda.so.1): what a cubin holds, what a launch of each kernel
 * must look like, and running it as rtlib's scalar reference.
 *
 * - mock_parse_cubin: an ELF64 CUDA image (e_machine 190), its architecture,
 *   its kernel entries and, from .nv.info, each one's __launch_bounds__ and
 *   parameter size.
 * - mock_shape_of: from a kernel and its integer arguments, the bytes each
 *   buffer argument spans (the row's formula in rt_kernels.h, rt_kext.h;
 *   the kernel's own rule where it says `?`) and the block and grid of
 *   docs/cuda.md's table of launch configurations.
 * - mock_run_launch: rt_ref_<name> (rtlib/cpu/kernels_ref.c, lowp.c) on the
 *   launch's arguments -- never the fast CPU kernels (rt_k_*) the cpu target
 *   runs -- with the device kernels' behaviour where it differs from the
 *   reference's (the state, bad targets, embedding_bwd's untouched rows).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_cuda.h"
#include "rt_ew.h"
#include "rt_kext.h"

/* ------------------------------------------------------- cubin parsing */

/* A little-endian field of the image (the caller checked the bounds). */
static uint64_t mock_rd(const unsigned char *d, uint64_t off, int bytes)
{
    uint64_t v = 0;
    for (int k = bytes - 1; k >= 0; k--)
        v = v << 8 | d[off + (uint64_t)k];
    return v;
}

/* The kernel of an entry symbol: nnsc_<name> for a device-side row of
 * rt_kernels.h, nnsc_ew_<id> for a fused chain, nnsc_custom_<row> for a
 * custom op's (*ew_id: the id or row); -1 if not modelled. */
static int mock_kernel_of(const char *sym, int64_t *ew_id)
{
    static const char *const names[] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) #name,
#include "rt_kernels.h"
#undef RT_K
    };
    static const struct { const char *prefix; int kernel; } numbered[] = {{"ew_", RT_KN_ew},
                                                                          {"custom_", RT_KN_custom}};
    *ew_id = -1;
    if (strncmp(sym, "nnsc_", 5))
        return -1;
    const char *s = sym + 5;
    for (size_t j = 0; j < sizeof numbered / sizeof numbered[0]; j++) {   /* nnsc_<prefix><number> */
        size_t n = strlen(numbered[j].prefix);
        if (strncmp(s, numbered[j].prefix, n) || !s[n])
            continue;
        char *end;
        long long id = strtoll(s + n, &end, 10);
        if (*end || id < 0)
            return -1;
        *ew_id = id;
        return numbered[j].kernel;
    }
    for (int k = 0; k < RT_KN_COUNT; k++)
        if (!strcmp(s, names[k]) && k != RT_KN_ew && k != RT_KN_custom)
            return k;
    return -1;
}

/* Read .nv.info.<name> (off, size in the image) into e: the attributes are
 * records {u8 format, u8 attribute, u16 value or size}, format 4 (a value of
 * `size` bytes following) or else no following bytes. */
static void mock_nv_info(const unsigned char *d, uint64_t off, uint64_t size, mock_entry *e)
{
    for (uint64_t p = off; p + 4 <= off + size;) {
        unsigned fmt = d[p], attr = d[p + 1];
        unsigned v = (unsigned)mock_rd(d, p + 2, 2);
        if (fmt == 4) {
            if (p + 4 + v > off + size)
                return;
            if (attr == 0x05 && v >= 4)   /* EIATTR_MAX_THREADS: x, y, z */
                e->max_threads = (int)mock_rd(d, p + 4, 4);
            p += 4 + v;
        } else {
            if (attr == 0x19)   /* EIATTR_CBANK_PARAM_SIZE */
                e->param_bytes = (int)v;
            p += 4;
        }
    }
}

/* Parse a cubin: ELF64 little-endian, e_machine 190 (EM_CUDA); the
 * architecture from e_flags; entries = FUNC GLOBAL symbols with the CUDA
 * entry flag (0x10 in st_other).  CUDA_SUCCESS or the error (with a message). */
CUresult mock_parse_cubin(const unsigned char *d, struct CUmod_st *m)
{
    const char *who = "cuModuleLoadData";
    if (memcmp(d, "\177ELF", 4))
        return mock_fail(CUDA_ERROR_INVALID_IMAGE, who, "the image is not an ELF file (the "
                         "double loads cubins only, not PTX or fatbins)");
    if (d[4] != 2 || d[5] != 1)
        return mock_fail(CUDA_ERROR_INVALID_IMAGE, who, "not a 64-bit little-endian ELF");
    unsigned machine = (unsigned)mock_rd(d, 18, 2);
    if (machine != 190)
        return mock_fail(CUDA_ERROR_INVALID_IMAGE, who, "ELF machine %u, not 190 (EM_CUDA)",
                         machine);
    uint64_t flags = mock_rd(d, 48, 4);
    /* the SM: bits 8..15 of e_flags in the current ABI (version >= 8), bits 0..7 before */
    m->sm = d[8] >= 8 ? (int)(flags >> 8 & 0xff) : (int)(flags & 0xff);
    uint64_t shoff = mock_rd(d, 0x28, 8);
    unsigned shentsize = (unsigned)mock_rd(d, 0x3a, 2), shnum = (unsigned)mock_rd(d, 0x3c, 2);
    unsigned shstrndx = (unsigned)mock_rd(d, 0x3e, 2);
    if (shentsize != 64 || shstrndx >= shnum || shnum == 0)
        return mock_fail(CUDA_ERROR_INVALID_IMAGE, who, "bad ELF section header table");
#define SH(k, off, bytes) mock_rd(d, shoff + (uint64_t)(k) * shentsize + (off), (bytes))
    uint64_t shstr = SH(shstrndx, 24, 8);
    unsigned symtab = shnum;
    for (unsigned k = 0; k < shnum; k++)
        if (SH(k, 4, 4) == 2)   /* SHT_SYMTAB */
            symtab = k;
    if (symtab == shnum)
        return mock_fail(CUDA_ERROR_INVALID_IMAGE, who, "no symbol table");
    uint64_t symoff = SH(symtab, 24, 8), symsize = SH(symtab, 32, 8);
    uint64_t stroff = SH((unsigned)SH(symtab, 40, 4), 24, 8);
    int cap = 0;
    for (uint64_t s = symoff; s + 24 <= symoff + symsize; s += 24) {
        unsigned info = d[s + 4], other = d[s + 5];
        if (!((info & 0xf) == 2 && (info >> 4) == 1 && (other & 0x10)))
            continue;
        const char *name = (const char *)d + stroff + mock_rd(d, s, 4);
        mock_grow(&m->e, m->ne, &cap, sizeof *m->e);
        mock_entry *e = &m->e[m->ne++];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%s", name);
        e->kernel = mock_kernel_of(name, &e->ew_id);
        e->param_bytes = -1;
        char info_name[128], shared_name[128];
        snprintf(info_name, sizeof info_name, ".nv.info.%s", name);
        snprintf(shared_name, sizeof shared_name, ".nv.shared.%s", name);
        for (unsigned k = 0; k < shnum; k++) {
            const char *sec = (const char *)d + shstr + SH(k, 0, 4);
            if (!strcmp(sec, info_name))
                mock_nv_info(d, SH(k, 24, 8), SH(k, 32, 8), e);
            else if (!strcmp(sec, shared_name))
                e->static_smem = (int64_t)SH(k, 32, 8);
        }
    }
#undef SH
    if (!m->ne)
        return mock_fail(CUDA_ERROR_INVALID_IMAGE, who, "the cubin has no kernel entry");
    return CUDA_SUCCESS;
}

/* ------------------------------------------------- launch configurations */

/* a * b, or MOCK_BAD when either is negative (or MOCK_BAD) or it overflows. */
static int64_t mock_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r))
        return MOCK_BAD;
    return r;
}

/* Bytes of a * b floats (or i32s), or MOCK_BAD. */
static int64_t mock_f4(int64_t a, int64_t b) { return mock_mul(mock_mul(a, b), 4); }

/* ceil(a / b) for a >= 0 (MOCK_BAD stays MOCK_BAD). */
static int64_t mock_cdiv(int64_t a, int64_t b) { return a < 0 ? MOCK_BAD : (a + b - 1) / b; }

/* The shape of an ew launch: operands (rt_ew.h) decide which buffers are
 * used and how far (n elements, or N for a row broadcast); every register is
 * written before it is read (the generated kernel does not initialise them).
 * 0, or -1 with the reason. */
static int mock_ew_shape(const rt_cuda_args *a, int64_t id, mock_shape *s, char *why, size_t wl)
{
    const int64_t *i = a->i;
    int64_t n = i[1], N = i[2], nops = i[3];
    if (i[0] != id) {
        snprintf(why, wl, "i[0] = %" PRId64 " is not the id %" PRId64 " of the kernel", i[0], id);
        return -1;
    }
    if (n < 0 || nops < 1 || nops > (RT_CUDA_MAXINT - RT_EW_HEAD) / 4) {
        snprintf(why, wl, "n = %" PRId64 ", nops = %" PRId64 ": need n >= 0, 1 <= nops <= %d", n,
                 nops, (RT_CUDA_MAXINT - RT_EW_HEAD) / 4);
        return -1;
    }
    unsigned written = 0;   /* registers written so far */
    for (int64_t o = 0; o < nops; o++) {
        const int64_t *q = i + RT_EW_HEAD + 4 * o;
        int64_t op = q[0];
        if (op < 0 || op >= RT_EW_NOPS_KIND) {
            snprintf(why, wl, "op %" PRId64 ": unknown op code %" PRId64, o, op);
            return -1;
        }
        int two = rt_ew_nsrc(op) == 2;
        for (int r = 0; r < 1 + two; r++) {   /* the sources: a, then c */
            int64_t x = q[2 + r];
            if (x >= RT_EW_REG && x < RT_EW_REG + RT_EW_NREG) {
                if (!(written >> x & 1)) {
                    snprintf(why, wl, "op %" PRId64 " reads register %" PRId64
                             " before any op writes it", o, x);
                    return -1;
                }
            } else if (x >= RT_EW_MEM && x < RT_EW_ACC && RT_EW_BUF(x) < RT_EW_NBUF) {
                int b = RT_EW_BUF(x);
                int64_t need = x < RT_EW_ROW ? mock_f4(n, 1) : mock_f4(N, 1);
                if (x >= RT_EW_ROW && N < 1) {
                    snprintf(why, wl, "op %" PRId64 " broadcasts a row but N = %" PRId64, o, N);
                    return -1;
                }
                if (need > s->bytes[b])
                    s->bytes[b] = need;
            } else {
                snprintf(why, wl, "op %" PRId64 ": bad source operand %" PRId64, o, x);
                return -1;
            }
        }
        int64_t d = q[1];
        if (d >= RT_EW_REG && d < RT_EW_REG + RT_EW_NREG) {
            written |= 1u << d;
        } else if (((d >= RT_EW_MEM && d < RT_EW_ROW) || (d >= RT_EW_ACC && d < RT_EW_ACC + 16)) &&
                   RT_EW_BUF(d) < RT_EW_NBUF) {
            if (mock_f4(n, 1) > s->bytes[RT_EW_BUF(d)])
                s->bytes[RT_EW_BUF(d)] = mock_f4(n, 1);
        } else {
            snprintf(why, wl, "op %" PRId64 ": bad destination operand %" PRId64, o, d);
            return -1;
        }
    }
    s->block = 256;
    s->grid = MOCK_GRID_STRIDE;
    return 0;
}

/* The buffer extents and launch configuration kernel K must have, from its
 * integer arguments (rt_kernels.h; docs/cuda.md's table).  Also checks the
 * arguments the launcher is to check (Vreal, ndim and boxes, D, flags).  0,
 * or -1 with the reason in why. */
int mock_shape_of(int K, int64_t ew_id, const rt_cuda_args *a, mock_shape *s, char *why,
                         size_t wl)
{
    const int64_t *i = a->i;
    int64_t *B = s->bytes;
    for (int k = 0; k < RT_CUDA_MAXBUF; k++)
        B[k] = MOCK_UNUSED;
    s->block = 256;
    s->grid = MOCK_GRID_STRIDE;
    s->gx = s->gy = 1;
    s->ws_per_block = 0;
    static const char *const row_ext[RT_KN_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) ext,
#include "rt_kernels.h"
#undef RT_K
    };
    static const int row_nbuf[RT_KN_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) nbuf,
#include "rt_kernels.h"
#undef RT_K
    };
    for (int k = 0; k < row_nbuf[K] && k < RT_CUDA_MAXBUF; k++) {   /* the contract's extents */
        int64_t e = rt_kext(row_ext[K], k, i, RT_CUDA_MAXINT);
        if (e != RT_KEXT_VAR)
            B[k] = e < 0 ? MOCK_BAD : mock_f4(e, 1);
    }
    switch (K) {
    case RT_KN_matmul:
    case RT_KN_matmul_bf16:   /* i: M, K, N, transA, transB, acc; 64x64 tiles of C */
        if (((i[3] | i[4]) & ~(int64_t)1) || i[5] < 0) {   /* acc: 0, or any count (the micro-batch) */
            snprintf(why, wl, "transA and transB must be 0 or 1, acc >= 0");
            return -1;
        }
        s->block = K == RT_KN_matmul ? 256 : 128;   /* bf16: the tensor-core code */
        s->grid = MOCK_GRID_FIXED, s->gx = mock_cdiv(i[2], 64), s->gy = mock_cdiv(i[0], 64);
        break;
    case RT_KN_bias_grad:   /* i: M, N, acc */
        s->grid = MOCK_GRID_FIXED, s->gx = mock_cdiv(i[1], 32);
        break;
    case RT_KN_copy:
        if (B[0] > 0 && a->b[0] != a->b[1] && a->b[0] < a->b[1] + (uint64_t)B[1] &&
            a->b[1] < a->b[0] + (uint64_t)B[0]) {
            snprintf(why, wl, "X and Y overlap partly (the launcher copies only X == Y or "
                              "disjoint ranges)");
            return -1;
        }
        break;
    case RT_KN_cvt_f32:
    case RT_KN_cvt_bf16:   /* i: n, nw: the bf16 side is ceil(n / 2) words */
        if (i[0] < 0 || i[1] != (i[0] + 1) / 2) {
            snprintf(why, wl, "nw must be ceil(n / 2)");
            return -1;
        }
        break;
    case RT_KN_adamw:   /* i: n, t */
        if (i[1] < 1) {
            snprintf(why, wl, "step t = %" PRId64 " (it is 1-based)", i[1]);
            return -1;
        }
        break;
    case RT_KN_mse_loss:
        s->grid = MOCK_GRID_REDUCE, s->ws_per_block = 8;
        break;
    case RT_KN_sumsq:
        s->grid = MOCK_GRID_REDUCE, s->ws_per_block = 8;
        break;
    case RT_KN_xent_stats:   /* i: M, K, C, Vreal, Vlo */
        if (i[3] < 1) {
            snprintf(why, wl, "Vreal = %" PRId64 " below 1 (the launcher checks it)", i[3]);
            return -1;
        }
        s->grid = MOCK_GRID_FIXED, s->gx = i[0];
        break;
    case RT_KN_xent_loss:   /* i: M, K, acc */
        s->grid = MOCK_GRID_FIXED, s->gx = i[0] == 0 ? 1 : i[0];
        s->ws_per_block = 8;
        break;
    case RT_KN_xent_vp_bwd:   /* i: M, V, acc, Vreal, Kall, Vlo */
        if (i[3] < 1) {
            snprintf(why, wl, "Vreal = %" PRId64 " below 1 (the launcher checks it)", i[3]);
            return -1;
        }
        s->grid = MOCK_GRID_FIXED, s->gx = i[0];
        break;
    case RT_KN_gradclip:
        s->grid = MOCK_GRID_FIXED, s->block = 32;
        break;
    case RT_KN_embedding:
    case RT_KN_embedding_bwd:   /* i: R, Vlo, Vext, C, acc */
        if (K == RT_KN_embedding_bwd)
            s->grid = MOCK_GRID_FIXED, s->gx = i[0];
        break;
    case RT_KN_layernorm:   /* a block per row */
    case RT_KN_layernorm_bwd:
        s->grid = MOCK_GRID_FIXED, s->gx = i[0];
        break;
    case RT_KN_layernorm_wgrad:   /* 32 columns a block */
        s->grid = MOCK_GRID_FIXED, s->gx = mock_cdiv(i[1], 32);
        break;
    case RT_KN_rope:   /* i: B, T, H, D, inverse, acc */
        if (i[3] % 2) {
            snprintf(why, wl, "head size D = %" PRId64 " is odd", i[3]);
            return -1;
        }
        break;
    case RT_KN_rmsnorm:   /* a block per row */
    case RT_KN_rmsnorm_bwd:
        s->grid = MOCK_GRID_FIXED, s->gx = i[0];
        break;
    case RT_KN_rmsnorm_wgrad:   /* 32 columns a block */
        s->grid = MOCK_GRID_FIXED, s->gx = mock_cdiv(i[1], 32);
        break;
    case RT_KN_softmax:   /* a block per row */
    case RT_KN_softmax_bwd:
        s->grid = MOCK_GRID_FIXED, s->gx = i[0];
        break;
    case RT_KN_attention:
    case RT_KN_attention_bwd:
    case RT_KN_attention_vl:
    case RT_KN_attention_vl_bwd:
    case RT_KN_attention_ab:
    case RT_KN_attention_ab_bwd:
    case RT_KN_attention_dbias: {   /* i: B, T, H, D, causal (, acc), Hkv, S (, P = max(T, S)) */
        int fw = K == RT_KN_attention || K == RT_KN_attention_vl || K == RT_KN_attention_ab;
        int64_t rows = mock_mul(mock_mul(i[0], i[1]), i[2]);   /* B*T*H: q, Y, lse rows */
        int64_t hkv = i[fw ? 5 : 6], S = i[fw ? 6 : 7];
        const int64_t *al = i + (fw ? 7 : 9);   /* alibi, hoff, Htot */
        if (S < 0 || (i[4] && S != i[1]) || (S == 0 && i[1] > 0) || (!fw && i[8] != (i[1] > S ? i[1] : S)) ||
            (al[0] != 0 && al[0] != 1) || (al[0] && (al[1] < 0 || al[1] + i[2] > al[2]))) {
            snprintf(why, wl, "S = %" PRId64 " keys for T = %" PRId64 " queries (causal %" PRId64 "), P or "
                     "ALiBi's heads (the launcher checks them)", S, i[1], i[4]);
            return -1;
        }
        if (hkv < 1 || i[2] % hkv) {
            snprintf(why, wl, "Hkv = %" PRId64 " does not divide H = %" PRId64 " (the launcher checks it)", hkv,
                     i[2]);
            return -1;
        }
        if (i[3] < 1 || i[3] > 256) {
            snprintf(why, wl, "head size D = %" PRId64 " outside [1, 256] (the launcher "
                              "checks it)", i[3]);
            return -1;
        }
        s->block = 128;
        s->grid = MOCK_GRID_FIXED;
        s->gx = mock_cdiv(fw ? rows : K == RT_KN_attention_dbias ? mock_mul(mock_mul(i[2], i[1]), i[7])
                                                            : mock_mul(mock_mul(i[0], i[8]), i[2]), 4);   /* 4 warps a block */
        break;
    }
    case RT_KN_slice:
    case RT_KN_place: {   /* i: ndim, acc, per dim: extent, lo, hi */
        if (i[0] < 0 || i[0] > RT_MAXDIM || i[1] < 0) {
            snprintf(why, wl, "ndim = %" PRId64 " outside [0, %d] or acc = %" PRId64, i[0],
                     RT_MAXDIM, i[1]);
            return -1;
        }
        int64_t full = 4, box = 4;
        for (int d = 0; d < (int)i[0]; d++) {
            int64_t ext = i[2 + 3 * d], lo = i[3 + 3 * d], hi = i[4 + 3 * d];
            if (lo < 0 || lo > hi || hi > ext) {
                snprintf(why, wl, "dim %d: box [%" PRId64 ", %" PRId64 ") is not inside "
                         "extent %" PRId64, d, lo, hi, ext);
                return -1;
            }
            full = mock_mul(full, ext);
            box = mock_mul(box, hi - lo);
        }
        B[0] = K == RT_KN_slice ? full : box;
        B[1] = K == RT_KN_slice ? box : full;
        break;
    }
    case RT_KN_ew:
        if (mock_ew_shape(a, ew_id, s, why, wl))
            return -1;
        break;
    case RT_KN_custom: {   /* i: row nin nout acc, then per operand ndim and its extents */
        if (i[0] != ew_id || i[1] < 1 || i[2] < 1 || i[1] + i[2] > RT_CUDA_CUSTOM_MAXOPS) {
            snprintf(why, wl, "custom: row %" PRId64 " (entry %" PRId64 "), %" PRId64 " inputs, %" PRId64
                     " outputs", i[0], ew_id, i[1], i[2]);
            return -1;
        }
        int pos = 4;
        for (int k = 0; k < i[1] + i[2]; k++) {
            int64_t nd = pos < RT_CUDA_MAXINT ? i[pos] : -1, numel = 1;
            if (nd < 0 || nd > 8 || pos + 1 + nd > RT_CUDA_MAXINT) {
                snprintf(why, wl, "custom: operand %d's rank does not fit the ints", k + 1);
                return -1;
            }
            for (int j = 1; j <= nd; j++)
                numel = mock_mul(numel, i[pos + j]);
            B[k] = mock_f4(numel, 1);
            pos += 1 + (int)nd;
        }
        break;
    }
    default:   /* the grid-stride kernels over buffers the formula sizes (add, silu, sgd, ...) */
        if (!row_ext[K][0] || strchr(row_ext[K], '?')) {
            snprintf(why, wl, "the double has no model of this kernel");
            return -1;
        }
        break;
    }
    for (int k = 0; k < RT_CUDA_MAXBUF; k++)
        if (B[k] == MOCK_BAD || s->gx == MOCK_BAD || s->gy == MOCK_BAD) {
            snprintf(why, wl, "the integer arguments give a negative or overflowing size "
                              "(b[%d])", k);
            return -1;
        }
    return 0;
}

/* -------------------------------------------------------- kernel runs */

/* The scalar references, by kernel number (rtlib/cpu/kernels_ref.c). */
typedef void mock_ref_fn(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f);
static mock_ref_fn *const mock_refs[RT_KN_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) rt_ref_##name,
#include "rt_kernels.h"
#undef RT_K
};

/* Run a launch now (device memory is accessible): the scalar reference on a
 * private rt_ctx holding the state's scales, with the device kernels'
 * behaviour where it differs from rt_ref_* (see each case). */
CUresult mock_run_launch(const mock_op *op)
{
    const mock_entry *e = op->fn->e;
    const rt_cuda_args *a = &op->args;
    rt_cuda_state *st = (rt_cuda_state *)(uintptr_t)a->st;
    void *b[RT_CUDA_MAXBUF];
    for (int k = 0; k < RT_CUDA_MAXBUF; k++)
        b[k] = (void *)(uintptr_t)a->b[k];
    rt_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.rank = -1;
    ctx.lr_scale = st->lr_scale;
    ctx.grad_scale = st->grad_scale;
    ctx.grad_norm = st->grad_norm;
    int K = e->kernel;
    if (K == RT_KN_custom) {
        /* the rank's C kernel of the section (the table the compiler exports from cuda builds) */
        typedef void custom_fn(void *, void *const *, const int64_t *, const float *);
        custom_fn *const *tab = dlsym(RTLD_DEFAULT, "nnsc_custom_fns");
        int64_t n = 0;
        while (tab && tab[n])
            n++;
        if (a->i[0] >= n)
            return mock_fail(CUDA_ERROR_LAUNCH_FAILED, e->name, "no C kernel of custom row %" PRId64
                             " in the rank's nnsc_custom_fns (%" PRId64 " rows)", a->i[0], n);
        tab[a->i[0]](NULL, b, a->i, a->f);
        return CUDA_SUCCESS;
    }
    if ((K == RT_KN_mse_loss || K == RT_KN_sumsq || K == RT_KN_xent_loss) && st->red_count) {
        return mock_fail(CUDA_ERROR_LAUNCH_FAILED, e->name, "the state's grid reduction counter "
                         "is %u, not 0, at the start of a grid reduction", st->red_count);
    }
    if (K == RT_KN_xent_stats || K == RT_KN_xent_vp_bwd) {
        /* a target outside [0, Vreal): the device kernels record the first in
           the state and carry on (the host stops the rank after the step);
           the reference would exit, so it sees target 0 there instead */
        int64_t Mrows = a->i[0], Vr = a->i[3];
        const int32_t *t = b[1];
        int32_t *fixed = NULL;
        for (int64_t m = 0; m < Mrows; m++) {
            if (t[m] >= 0 && t[m] < Vr)
                continue;
            if (!fixed) {
                fixed = malloc((size_t)Mrows * 4);
                memcpy(fixed, t, (size_t)Mrows * 4);
                if (st->err == RT_CUDA_ERR_NONE) {
                    st->err = RT_CUDA_ERR_TARGET;
                    st->err_a = t[m];
                    st->err_b = m;
                }
            }
            fixed[m] = 0;
        }
        if (fixed)
            b[1] = fixed;
        mock_refs[K](&ctx, b, a->i, a->f);
        free(fixed);
        return CUDA_SUCCESS;
    }
    if (K == RT_KN_embedding_bwd && !a->i[4]) {
        /* the device kernel writes only the table rows some in-shard token
           touches (the host zeroes the table first, docs/cuda.md); the
           reference zeroes every row: keep the untouched ones as they were */
        int64_t R = a->i[0], Vlo = a->i[1], Vext = a->i[2], C = a->i[3];
        const int32_t *tok = b[0];
        float *tab = b[2];
        char *touched = calloc((size_t)(Vext > 0 ? Vext : 1), 1);
        float *keep = malloc((size_t)mock_f4(Vext, C) + 4);
        memcpy(keep, tab, (size_t)mock_f4(Vext, C));
        for (int64_t r = 0; r < R; r++)
            if (tok[r] - Vlo >= 0 && tok[r] - Vlo < Vext)
                touched[tok[r] - Vlo] = 1;
        mock_refs[K](&ctx, b, a->i, a->f);
        for (int64_t v = 0; v < Vext; v++)
            if (!touched[v])
                memcpy(tab + v * C, keep + v * C, (size_t)C * 4);
        free(touched);
        free(keep);
        return CUDA_SUCCESS;
    }
    mock_refs[K](&ctx, b, a->i, a->f);
    if (K == RT_KN_gradclip) {   /* the device kernel writes these into the state */
        st->grad_norm = ctx.grad_norm;
        st->grad_scale = ctx.grad_scale;
    }
    return CUDA_SUCCESS;
}
