/* bench_matmul.c -- the CUDA target's matmul kernels against cuBLAS at the
 * shapes of one gpt2-124m training step, on one GPU.
 *
 *   bench_matmul KERNELS.cu [--B 8] [--T 1024] [--C 768] [--V 50304] [--L 12]
 *                [--reps 20] [--warmup 3] [--only f32,bf16,f16,f32bf16]
 *                [--shape M,K,N,tA,tB]... [--ref cublas|cpu] [--device N]
 *                [--arch sm_XY] [--cubin FILE] [--md FILE]
 *
 * KERNELS.cu is the kernel library the compiler embeds in cuda-target ranks,
 * as `nnsc-aot MODEL -o DIR --target cuda --emit-kernels` writes it
 * (DIR/kernels/nnsc_kernels.cu).  It is compiled here with NVRTC for the
 * device's own architecture (the compiler's options: -default-device
 * --std=c++17) and loaded with cuModuleLoadData (--cubin FILE loads that
 * image instead, e.g. one taken from a rank executable; the source still
 * gives the launch configurations).  Its matmul entry points are launched
 * exactly as rtlib's launcher does (one rt_cuda_args block by value,
 * rtlib/rt_cuda_abi.h; grid (ceil(N/BN), ceil(M/BM)), docs/cuda.md):
 *
 *   f32      nnsc_matmul                 f32 A, B          vs cublasSgemm
 *   bf16     nnsc_matmul_tc_bf16 if the library has it, else nnsc_matmul_bf16
 *                                        bf16 A, B         vs cublasGemmEx bf16
 *   f16      nnsc_matmul_tc_f16, else nnsc_matmul_f16
 *                                        f16 A, B          vs cublasGemmEx f16
 *   f32bf16  nnsc_matmul_bf16 when the library also has nnsc_matmul_tc_bf16
 *            (the matmul of train.dtype = bf16: f32 A, B rounded to bf16
 *            while staging the tiles; in libraries without the _tc_ names
 *            nnsc_matmul_bf16 took bf16 inputs and is measured as bf16)
 *                                        f32 A, B          vs cublasGemmEx f32,
 *                                                  CUBLAS_COMPUTE_32F_FAST_16BF
 *
 * C is f32 in every case, accumulation f32, acc = 0 (C = op(A) op(B), as in
 * a step with one micro-batch).  An entry point the library lacks is
 * skipped with a line saying so.  The block size of each entry point is
 * read from its NNSC_KERNEL(name, threads) line in the source and the tile
 * from NNSC_MM_BM/BN (f32) or NNSC_TC_BM/BN (tensor cores), 64 if absent.
 *
 * The shapes are those `nnsc-aot examples/gpt2-124m.ini --dump=lower`
 * emits for one step with R = B*T rows (forward, dX with transB, dW with
 * transA; separate q/k/v projections; tied lm head), with their counts per
 * step; --shape replaces them.  cuBLAS is column-major: the row-major
 * C[M,N] = op(A) op(B) is computed as C^T = op(B)^T op(A)^T, i.e.
 * gemm(opB, opA, N, M, K, B, ldb, A, lda, C, N) with ldb = tB ? K : N and
 * lda = tA ? M : K, the operation "transpose" where our flag is set.
 *
 * Every result is checked before it is timed: ours (output pre-filled with
 * NaN, so an unwritten tile shows) against cuBLAS over the whole matrix,
 * error = max |ours - ref| / max |ref|, within a tolerance per variant
 * (f32 1e-5, times sqrt(K / 4096) above K = 4096; 16-bit inputs 1e-4: both sides multiply the same 16-bit
 * values exactly and add in f32, so only the order of the f32 sums
 * differs; f32bf16 1e-2: each side rounds the f32 inputs to bf16 its own
 * way), and cuBLAS itself at 64 sampled entries against a double-precision
 * sum on the host, which proves the layout mapping above.  --ref cpu skips
 * cuBLAS and checks ours against the host sum over the whole matrix: for
 * small --shape runs, e.g. under the driver test double (tests/mock).
 *
 * Timing: CUDA events around each launch, --warmup launches first, then
 * the median of --reps (20 by default) launches, for ours and cuBLAS
 * alike, queued back to back on one stream (bm_time).  Output: a line per shape and variant (M K N tA tB,
 * count per step, ours GFLOP/s, cuBLAS GFLOP/s, ratio, error), then per
 * variant the FLOP-weighted mean ratio and the count-weighted matmul time of
 * one step; --md FILE writes the same as markdown tables.
 *
 * The driver (libcuda.so.1) is opened with dlopen, not linked, so that a
 * machine without it gets "no CUDA device: ..." and exit 2 instead of the
 * loader's "cannot open shared object file"; NVRTC and cuBLAS are linked
 * (neither needs the driver to load).  cuBLAS is used here only: rank
 * executables never link it.
 *
 * Exit status: 0 every check passed; 1 a check failed or a CUDA, NVRTC or
 * cuBLAS call failed; 2 bad arguments, unreadable source, no driver or no
 * device.  Built and run by bench/run_gpu.sh (docs/performance.md, "GPU
 * (CUDA target)").
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda.h>
#include <nvrtc.h>

#include "rt_cuda_abi.h"

#define BM_MAXSHAPE 64      /* most shapes in one run */
#define BM_NSAMPLE 64       /* entries of cuBLAS's result checked on the host */
#define BM_CPU_MAXFLOP 2e10 /* largest 2 M K N that --ref cpu computes on the host */
#define BM_NO_DEVICE "no CUDA device: run this on a machine with an NVIDIA GPU"

/* ------------------------------------------------------------ the driver */

/* The driver functions used (libcuda's exported names: cuMemAlloc_v2, not
 * cuda.h's cuMemAlloc macro), all of them among those rtlib's backend uses,
 * so the driver test double (tests/mock) can run this program too. */
#define BM_DRV_FUNCS(X)                                                                     \
    X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)                  \
    X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetAttribute) X(cuDeviceGetName)          \
    X(cuDeviceTotalMem_v2) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2)     \
    X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload)           \
    X(cuModuleGetFunction) X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemcpyHtoDAsync_v2)        \
    X(cuMemcpyDtoHAsync_v2) X(cuMemsetD8Async) X(cuStreamCreate) X(cuStreamDestroy_v2)     \
    X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy_v2) X(cuEventRecord)          \
    X(cuEventSynchronize) X(cuEventElapsedTime) X(cuLaunchKernel)

/* Pointers to the driver's functions, each with its cuda.h prototype. */
static struct bm_drv {
#define BM_DRV_FIELD(f) __typeof__(f) *f;   /* the driver's f */
    BM_DRV_FUNCS(BM_DRV_FIELD)
#undef BM_DRV_FIELD
} drv;

/* ------------------------------------------------------------- failures */

/* Print "bench_matmul: MESSAGE" and exit with code. */
__attribute__((format(printf, 2, 3)))
static _Noreturn void bm_die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("bench_matmul: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

/* The checks of CUDA, NVRTC and cuBLAS calls: file:line, the call, the
 * library's name and text for the status; exit 1. */
static void bm_cu_check(CUresult r, const char *call, const char *file, int line)
{
    if (r == CUDA_SUCCESS) return;
    const char *name = NULL, *text = NULL;
    if (drv.cuGetErrorName) drv.cuGetErrorName(r, &name);
    if (drv.cuGetErrorString) drv.cuGetErrorString(r, &text);
    fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", file, line, call, name ? name : "?",
            text ? text : "?");
    exit(1);
}

/* The same for NVRTC. */
static void bm_nvrtc_check(nvrtcResult r, const char *call, const char *file, int line)
{
    if (r == NVRTC_SUCCESS) return;
    fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, call, nvrtcGetErrorString(r));
    exit(1);
}

/* The same for cuBLAS. */
static void bm_cublas_check(cublasStatus_t r, const char *call, const char *file, int line)
{
    if (r == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, call, cublasGetStatusString(r));
    exit(1);
}

#define CU_CHECK(call) bm_cu_check((call), #call, __FILE__, __LINE__)
#define NVRTC_CHECK(call) bm_nvrtc_check((call), #call, __FILE__, __LINE__)
#define CUBLAS_CHECK(call) bm_cublas_check((call), #call, __FILE__, __LINE__)

/* malloc that stops the program when memory runs out. */
static void *bm_alloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) bm_die(1, "out of host memory (%zu bytes)", n);
    return p;
}

/* ------------------------------------------------------------- settings */

/* Element types of A and B. */
enum { BM_F32, BM_BF16, BM_F16 };

/* A matmul shape: C[M,N] = op(A)[M,K] op(B)[K,N]. */
typedef struct bm_shape {
    const char *what;   /* where it occurs in the step ("custom" for --shape) */
    long long M, K, N;  /* the product's sizes */
    int ta, tb;         /* A stored (K,M) / B stored (N,K) */
    int count;          /* how often one step runs it */
} bm_shape;

/* A variant of our matmul and the cuBLAS call it is measured against. */
typedef struct bm_variant {
    const char *name;       /* label: f32, bf16, f16, f32bf16 */
    const char *sym;        /* entry point found in the library (NULL: skipped) */
    int in;                 /* element type of A and B in memory: BM_F32 / BM_BF16 / BM_F16 */
    int round_bf16;         /* f32 inputs that both sides round to bf16 (f32bf16) */
    int block;              /* threads per block (its NNSC_KERNEL line) */
    int bm, bn;             /* rows and columns of C per block (the grid's tile) */
    double tol;             /* largest accepted max |ours - ref| / max |ref| */
    const char *ref_name;   /* the cuBLAS call, for the output */
    CUfunction fn;          /* the loaded entry point */
    int active;             /* selected by --only and present in the library */
} bm_variant;

/* The results of one shape and variant. */
typedef struct bm_result {
    int done;               /* measured */
    double ours_ms, ref_ms; /* median times (ref_ms < 0: no cuBLAS, --ref cpu) */
    double err;             /* max |ours - ref| / max |ref| (inf: NaN or unwritten) */
    double tol;             /* the bound err was held to (the variant's, scaled by K for f32) */
    int ok;                 /* err <= tol */
} bm_result;

/* Command-line settings. */
typedef struct bm_opts {
    const char *src_path;          /* the kernel library's CUDA source */
    long long B, T, C, V, L;       /* model sizes for the default shapes */
    int reps, warmup;              /* timed and untimed launches per measurement */
    const char *only;              /* comma-separated variant names, NULL: all */
    int use_cublas;                /* --ref cublas (1) or cpu (0) */
    int device;                    /* CUDA device ordinal */
    const char *arch;              /* NVRTC architecture, NULL: the device's */
    const char *cubin_path;        /* a cubin to load instead of compiling, NULL: compile */
    const char *md_path;           /* markdown output, NULL: none */
    bm_shape shapes[BM_MAXSHAPE];  /* what to measure */
    int nshape;                    /* how many */
    int custom;                    /* shapes came from --shape */
} bm_opts;

/* Usage text. */
static const char bm_usage[] =
    "usage: bench_matmul KERNELS.cu [--B 8] [--T 1024] [--C 768] [--V 50304] [--L 12]\n"
    "                    [--reps 20] [--warmup 3] [--only f32,bf16,f16,f32bf16]\n"
    "                    [--shape M,K,N,tA,tB]... [--ref cublas|cpu] [--device N]\n"
    "                    [--arch sm_XY] [--cubin FILE] [--md FILE]\n"
    "KERNELS.cu: the library `nnsc-aot MODEL -o DIR --target cuda --emit-kernels` writes\n"
    "(DIR/kernels/nnsc_kernels.cu).  Details: the comment at the top of bench/gpu/bench_matmul.c.\n";

/* A positive integer option value, or exit 2. */
static long long bm_posint(const char *opt, const char *v)
{
    char *end;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || *end || x <= 0) bm_die(2, "%s needs a positive integer, not '%s'", opt, v ? v : "");
    return x;
}

/* The default shapes: one gpt2-124m step (see the file comment). */
static void bm_default_shapes(bm_opts *o)
{
    long long R = o->B * o->T, C = o->C, F = 4 * o->C, V = o->V;
    int L = (int)o->L;
    const bm_shape s[] = {
        {"fwd q/k/v/attn-proj", R, C, C, 0, 0, 4 * L},
        {"fwd mlp fc", R, C, F, 0, 0, L},
        {"fwd mlp proj", R, F, C, 0, 0, L},
        {"fwd lm head (x wte^T)", R, C, V, 0, 1, 1},
        {"dx q/k/v/attn-proj", R, C, C, 0, 1, 4 * L},
        {"dx mlp fc", R, F, C, 0, 1, L},
        {"dx mlp proj", R, C, F, 0, 1, L},
        {"dx lm head (dlogits wte)", R, V, C, 0, 0, 1},
        {"dW q/k/v/attn-proj", C, R, C, 1, 0, 4 * L},
        {"dW mlp fc", C, R, F, 1, 0, L},
        {"dW mlp proj", F, R, C, 1, 0, L},
        {"dW lm head (dlogits^T x)", V, R, C, 1, 0, 1},
    };
    o->nshape = (int)(sizeof s / sizeof s[0]);
    memcpy(o->shapes, s, sizeof s);
}

/* Parse --shape M,K,N,tA,tB into the next shape. */
static void bm_add_shape(bm_opts *o, const char *v)
{
    long long M, K, N;
    int ta, tb, end = 0;
    if (!v || sscanf(v, "%lld,%lld,%lld,%d,%d%n", &M, &K, &N, &ta, &tb, &end) != 5 || v[end] ||
        M <= 0 || K <= 0 || N <= 0 || (ta != 0 && ta != 1) || (tb != 0 && tb != 1))
        bm_die(2, "--shape takes M,K,N,tA,tB (sizes > 0, flags 0 or 1), e.g. --shape 8192,768,768,0,1; "
                  "not '%s'", v ? v : "");
    if (o->nshape == BM_MAXSHAPE) bm_die(2, "more than %d --shape options", BM_MAXSHAPE);
    o->shapes[o->nshape++] = (bm_shape){"custom", M, K, N, ta, tb, 1};
}

/* Is name in the comma-separated list (NULL: every name is)? */
static int bm_listed(const char *list, const char *name)
{
    if (!list) return 1;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* Parse the command line into o; exit 2 on anything wrong. */
static void bm_parse(bm_opts *o, int argc, char **argv)
{
    *o = (bm_opts){.B = 8, .T = 1024, .C = 768, .V = 50304, .L = 12, .reps = 20, .warmup = 3,
                   .use_cublas = 1, .device = 0};
    for (int k = 1; k < argc; k++) {
        const char *a = argv[k], *v = k + 1 < argc ? argv[k + 1] : NULL;
        int used = 1;   /* the option takes a value */
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(bm_usage, stdout);
            exit(0);
        } else if (!strcmp(a, "--B")) o->B = bm_posint(a, v);
        else if (!strcmp(a, "--T")) o->T = bm_posint(a, v);
        else if (!strcmp(a, "--C")) o->C = bm_posint(a, v);
        else if (!strcmp(a, "--V")) o->V = bm_posint(a, v);
        else if (!strcmp(a, "--L")) o->L = bm_posint(a, v);
        else if (!strcmp(a, "--reps")) o->reps = (int)bm_posint(a, v);
        else if (!strcmp(a, "--warmup")) o->warmup = (int)bm_posint(a, v);
        else if (!strcmp(a, "--only")) {
            if (!v) bm_die(2, "--only needs a list of variants: f32,bf16,f16,f32bf16");
            o->only = v;
        } else if (!strcmp(a, "--shape")) {
            bm_add_shape(o, v);
            o->custom = 1;
        } else if (!strcmp(a, "--ref")) {
            if (!v || (strcmp(v, "cublas") && strcmp(v, "cpu")))
                bm_die(2, "--ref takes cublas (the default) or cpu, not '%s'", v ? v : "");
            o->use_cublas = !strcmp(v, "cublas");
        } else if (!strcmp(a, "--device")) {
            char *end;
            long d = v ? strtol(v, &end, 10) : -1;
            if (!v || *end || d < 0) bm_die(2, "--device needs a device number (0, 1, ...)");
            o->device = (int)d;
        } else if (!strcmp(a, "--arch")) {
            if (!v || strncmp(v, "sm_", 3) || !isdigit((unsigned char)v[3]))
                bm_die(2, "--arch takes a GPU architecture like sm_90, not '%s'", v ? v : "");
            o->arch = v;
        } else if (!strcmp(a, "--cubin")) {
            if (!v) bm_die(2, "--cubin needs a file name");
            o->cubin_path = v;
        } else if (!strcmp(a, "--md")) {
            if (!v) bm_die(2, "--md needs a file name");
            o->md_path = v;
        } else if (a[0] == '-') {
            bm_die(2, "unknown option '%s'\n%s", a, bm_usage);
        } else {
            if (o->src_path)
                bm_die(2, "one kernel source only ('%s' and '%s')\n%s", o->src_path, a, bm_usage);
            o->src_path = a;
            used = 0;
        }
        k += used;
    }
    if (!o->src_path) bm_die(2, "no kernel source given\n%s", bm_usage);
    for (const char *p = o->only; p && *p;) {
        const char *e = strchr(p, ',');
        int len = (int)(e ? (size_t)(e - p) : strlen(p));
        char name[32];
        snprintf(name, sizeof name, "%.*s", len, p);
        if (len >= (int)sizeof name || !bm_listed("f32,bf16,f16,f32bf16", name))
            bm_die(2, "--only: unknown variant '%.*s' (the variants: f32, bf16, f16, f32bf16)", len, p);
        if (!e) break;
        p = e + 1;
    }
    if (!o->custom) bm_default_shapes(o);
}

/* ---------------------------------------------------------- the source */

/* The whole of file path (what it is: hint, for the message) with a NUL
 * after it, its size in *size; exit 2 if it cannot be read. */
static char *bm_read_file(const char *path, const char *hint, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) bm_die(2, "cannot read %s (%s)", path, hint);
    size_t cap = 1 << 20, n = 0;
    char *s = bm_alloc(cap);
    size_t got;
    while ((got = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            cap *= 2;
            s = realloc(s, cap);
            if (!s) bm_die(1, "out of host memory reading %s", path);
        }
    }
    if (ferror(f)) bm_die(2, "cannot read %s (%s)", path, hint);
    fclose(f);
    s[n] = 0;
    *size = n;
    return s;
}

/* The value of `#define name VALUE` in src when VALUE is an integer, else dflt. */
static long bm_src_define(const char *src, const char *name, long dflt)
{
    size_t len = strlen(name);
    for (const char *p = strstr(src, "#define "); p; p = strstr(p + 1, "#define ")) {
        const char *q = p + 8;
        if (!strncmp(q, name, len) && (q[len] == ' ' || q[len] == '\t')) {
            char *end;
            long v = strtol(q + len, &end, 10);
            return end != q + len && v > 0 ? v : dflt;
        }
    }
    return dflt;
}

/* The threads per block of entry point sym: the second argument of its
 * `NNSC_KERNEL(sym, N)` line, a number or a #define'd name; 0 if absent. */
static int bm_src_block(const char *src, const char *sym)
{
    char key[128];
    snprintf(key, sizeof key, "NNSC_KERNEL(%s,", sym);
    const char *p = strstr(src, key);
    if (!p) return 0;
    p += strlen(key);
    while (*p == ' ') p++;
    char arg[64];
    int n = 0;
    while (n < (int)sizeof arg - 1 && (isalnum((unsigned char)p[n]) || p[n] == '_')) {
        arg[n] = p[n];
        n++;
    }
    arg[n] = 0;
    if (n == 0) return 0;
    if (isdigit((unsigned char)arg[0])) return atoi(arg);
    return (int)bm_src_define(src, arg, 0);
}

/* Compile src with NVRTC for arch into a cubin (*size bytes; free it). */
static char *bm_compile(const char *src, const char *arch, size_t *size)
{
    nvrtcProgram prog;
    NVRTC_CHECK(nvrtcCreateProgram(&prog, src, "nnsc_kernels.cu", 0, NULL, NULL));
    char archopt[64];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
    const char *opts[] = {archopt, "-default-device", "--std=c++17"};
    nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
    size_t logn = 0;
    NVRTC_CHECK(nvrtcGetProgramLogSize(prog, &logn));
    if (r != NVRTC_SUCCESS) {
        char *log = bm_alloc(logn + 1);
        NVRTC_CHECK(nvrtcGetProgramLog(prog, log));
        log[logn] = 0;
        fprintf(stderr, "bench_matmul: NVRTC: compiling the library for %s failed: %s\n%s\n", arch,
                nvrtcGetErrorString(r), log);
        if (r == NVRTC_ERROR_INVALID_OPTION)
            fprintf(stderr, "  hint: this NVRTC may not know %s; try --arch with an older one\n", arch);
        exit(1);
    }
    NVRTC_CHECK(nvrtcGetCUBINSize(prog, size));
    char *cubin = bm_alloc(*size);
    NVRTC_CHECK(nvrtcGetCUBIN(prog, cubin));
    NVRTC_CHECK(nvrtcDestroyProgram(&prog));
    return cubin;
}

/* ------------------------------------------------- host data, reference */

/* The next number of a splitmix64 sequence. */
static uint64_t bm_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* f32 to bf16, rounding to nearest even (the inputs are finite). */
static uint16_t bm_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* bf16 to f32 (exact). */
static float bm_from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* f32 to IEEE f16, rounding to nearest even (inputs finite, |f| < 65520). */
static uint16_t bm_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a < 0x38800000u)   /* below 2^-14: a multiple of 2^-24, rounded (rintf: to even) */
        return (uint16_t)(sign | (uint16_t)rintf(fabsf(f) * 16777216.0f));
    a -= 112u << 23;       /* exponent bias 127 -> 15 */
    a += 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | (a >> 13));
}

/* IEEE f16 to f32 (exact). */
static float bm_from_f16(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e ? ldexpf((float)(1024 + m), e - 25) : ldexpf((float)m, -24);
    return h & 0x8000 ? -v : v;
}

/* A and B of one shape on the host: the f32 values and, for the 16-bit
 * variants, the same values rounded to bf16 / f16. */
typedef struct bm_host {
    float *a, *b;          /* f32, uniform in [-1, 1) */
    uint16_t *a16, *b16;   /* the 16-bit type of the running variant (NULL for f32) */
    int t16;               /* which: BM_BF16 or BM_F16 (or BM_F32: none) */
} bm_host;

/* Element k of a (f32) or a16 (16-bit type t16) as the variant sees it. */
static double bm_val(const bm_host *h, int which, size_t k, int in, int round_bf16)
{
    const float *f = which ? h->b : h->a;
    const uint16_t *s = which ? h->b16 : h->a16;
    if (in == BM_BF16) return bm_from_bf16(s[k]);
    if (in == BM_F16) return bm_from_f16(s[k]);
    return round_bf16 ? bm_from_bf16(bm_to_bf16(f[k])) : f[k];
}

/* C[i,j] of shape s in double on the host, for the variant's inputs. */
static double bm_host_entry(const bm_host *h, const bm_shape *s, long long i, long long j, int in,
                            int round_bf16)
{
    double sum = 0;
    for (long long k = 0; k < s->K; k++) {
        size_t ia = (size_t)(s->ta ? k * s->M + i : i * s->K + k);
        size_t ib = (size_t)(s->tb ? j * s->K + k : k * s->N + j);
        sum += bm_val(h, 0, ia, in, round_bf16) * bm_val(h, 1, ib, in, round_bf16);
    }
    return sum;
}

/* max |x - ref| / max |ref| over n entries; +inf when x has a NaN (an
 * unwritten entry keeps the NaN fill). */
static double bm_error(const float *x, const float *ref, size_t n)
{
    double dmax = 0, rmax = 0;
    for (size_t k = 0; k < n; k++) {
        if (isnan(x[k]) || isnan(ref[k])) return INFINITY;
        double d = fabs((double)x[k] - (double)ref[k]), r = fabs((double)ref[k]);
        if (d > dmax) dmax = d;
        if (r > rmax) rmax = r;
    }
    return rmax > 0 ? dmax / rmax : dmax;
}

/* The median of v[0 .. n) (sorts v). */
static int bm_cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* See bm_cmp. */
static double bm_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bm_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ------------------------------------------------------------- the GPU */

/* What every measurement shares. */
typedef struct bm_gpu {
    CUdevice dev;               /* the device */
    CUcontext ctx;              /* its primary context */
    CUstream stream;            /* the one stream all work runs on */
    CUdeviceptr st, ws;         /* a zeroed rt_cuda_state and a small workspace (unused by matmul) */
    cublasHandle_t blas;        /* cuBLAS on stream (NULL with --ref cpu) */
    int max_grid_y;             /* largest gridDim.y */
} bm_gpu;

/* Open libcuda.so.1, initialise it and pick the device; exit 2 with
 * BM_NO_DEVICE when there is no driver or no device. */
static void bm_open_driver(bm_gpu *g, int device)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        bm_die(2, BM_NO_DEVICE " (libcuda.so.1, the NVIDIA driver's library, is not installed "
                  "or not on the library path: %s)", dlerror());
#define BM_DRV_LOAD(f)                                                                       \
    if (!(drv.f = (__typeof__(f) *)dlsym(h, #f)))                                           \
        bm_die(2, "the NVIDIA driver's libcuda.so.1 lacks %s: install a driver that supports " \
                  "CUDA %d.%d or newer", #f, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
    BM_DRV_FUNCS(BM_DRV_LOAD)
#undef BM_DRV_LOAD
    CUresult r = drv.cuInit(0);
    if (r != CUDA_SUCCESS) {
        const char *name = NULL;
        drv.cuGetErrorName(r, &name);
        if (r == CUDA_ERROR_STUB_LIBRARY) name = "CUDA_ERROR_STUB_LIBRARY";   /* the stub names nothing */
        bm_die(2, BM_NO_DEVICE " (cuInit: %s, error %d%s)", name ? name : "an error", (int)r,
               r == CUDA_ERROR_STUB_LIBRARY
                   ? ": this libcuda.so.1 is the toolkit's link stub, not a driver"
                   : "");
    }
    int n = 0;
    CU_CHECK(drv.cuDeviceGetCount(&n));
    if (n == 0) bm_die(2, BM_NO_DEVICE " (the driver sees no device)");
    if (device >= n)
        bm_die(2, "--device %d: the driver sees %d device%s (0 .. %d)", device, n, n > 1 ? "s" : "",
               n - 1);
    CU_CHECK(drv.cuDeviceGet(&g->dev, device));
    CU_CHECK(drv.cuDevicePrimaryCtxRetain(&g->ctx, g->dev));
    CU_CHECK(drv.cuCtxSetCurrent(g->ctx));
    CU_CHECK(drv.cuStreamCreate(&g->stream, CU_STREAM_NON_BLOCKING));
    CU_CHECK(drv.cuMemAlloc_v2(&g->st, sizeof(rt_cuda_state)));
    CU_CHECK(drv.cuMemAlloc_v2(&g->ws, 8 * 1024));
    CU_CHECK(drv.cuMemsetD8Async(g->st, 0, sizeof(rt_cuda_state), g->stream));
    CU_CHECK(drv.cuMemsetD8Async(g->ws, 0, 8 * 1024, g->stream));
    CU_CHECK(drv.cuDeviceGetAttribute(&g->max_grid_y, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, g->dev));
}

/* Device memory for n bytes, or exit 1 naming what it was for. */
static CUdeviceptr bm_dev_alloc(size_t n, const char *what)
{
    CUdeviceptr p;
    CUresult r = drv.cuMemAlloc_v2(&p, n ? n : 1);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        bm_die(1, "out of device memory allocating %s (%.1f MiB): use smaller --B/--T or --shape", what,
               (double)n / (1 << 20));
    CU_CHECK(r);
    return p;
}

/* Launch our entry point once: C = op(A) op(B). */
static void bm_launch(const bm_gpu *g, const bm_variant *v, const bm_shape *s, CUdeviceptr A,
                      CUdeviceptr B, CUdeviceptr C)
{
    rt_cuda_args a;
    memset(&a, 0, sizeof a);
    a.b[0] = A;
    a.b[1] = B;
    a.b[2] = C;
    a.st = g->st;
    a.ws = g->ws;
    a.i[0] = s->M;
    a.i[1] = s->K;
    a.i[2] = s->N;
    a.i[3] = s->ta;
    a.i[4] = s->tb;
    a.i[5] = 0;   /* acc */
    void *params[] = {&a};
    unsigned gx = (unsigned)((s->N + v->bn - 1) / v->bn), gy = (unsigned)((s->M + v->bm - 1) / v->bm);
    CU_CHECK(drv.cuLaunchKernel(v->fn, gx, gy, 1, (unsigned)v->block, 1, 1, 0, g->stream, params, NULL));
}

/* Run cuBLAS's counterpart of variant v once: R = op(A) op(B), row-major,
 * as the column-major R^T = op(B)^T op(A)^T (see the file comment). */
static void bm_cublas(const bm_gpu *g, const bm_variant *v, const bm_shape *s, CUdeviceptr A,
                      CUdeviceptr B, CUdeviceptr R)
{
    const float one = 1.0f, zero = 0.0f;
    cublasOperation_t opb = s->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opa = s->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    int m = (int)s->N, n = (int)s->M, k = (int)s->K;
    int ldb = (int)(s->tb ? s->K : s->N), lda = (int)(s->ta ? s->M : s->K), ldc = (int)s->N;
    if (v->in == BM_F32 && !v->round_bf16) {
        CUBLAS_CHECK(cublasSgemm(g->blas, opb, opa, m, n, k, &one, (const float *)B, ldb,
                                 (const float *)A, lda, &zero, (float *)R, ldc));
        return;
    }
    cudaDataType t = v->in == BM_BF16 ? CUDA_R_16BF : v->in == BM_F16 ? CUDA_R_16F : CUDA_R_32F;
    cublasComputeType_t ct = v->round_bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
    CUBLAS_CHECK(cublasGemmEx(g->blas, opb, opa, m, n, k, &one, (const void *)B, t, ldb,
                              (const void *)A, t, lda, &zero, (void *)R, CUDA_R_32F, ldc, ct,
                              CUBLAS_GEMM_DEFAULT));
}

/* Median time in ms of --reps runs of ours (blas = 0) or cuBLAS (1), after
 * --warmup untimed ones.  Each run sits between its own pair of events and
 * all runs are queued before the host waits, so the host's work for run r
 * overlaps the GPU's for run r - 1 and the events time the GPU alone. */
static double bm_time(const bm_gpu *g, const bm_opts *o, int blas, const bm_variant *v,
                      const bm_shape *s, CUdeviceptr A, CUdeviceptr B, CUdeviceptr C)
{
    for (int r = 0; r < o->warmup; r++) {
        if (blas) bm_cublas(g, v, s, A, B, C);
        else bm_launch(g, v, s, A, B, C);
    }
    CUevent *ev = bm_alloc(2 * (size_t)o->reps * sizeof *ev);
    for (int r = 0; r < 2 * o->reps; r++) CU_CHECK(drv.cuEventCreate(&ev[r], CU_EVENT_DEFAULT));
    for (int r = 0; r < o->reps; r++) {
        CU_CHECK(drv.cuEventRecord(ev[2 * r], g->stream));
        if (blas) bm_cublas(g, v, s, A, B, C);
        else bm_launch(g, v, s, A, B, C);
        CU_CHECK(drv.cuEventRecord(ev[2 * r + 1], g->stream));
    }
    CU_CHECK(drv.cuEventSynchronize(ev[2 * o->reps - 1]));
    double *t = bm_alloc((size_t)o->reps * sizeof *t);
    for (int r = 0; r < o->reps; r++) {
        float ms;
        CU_CHECK(drv.cuEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
        t[r] = ms;
    }
    for (int r = 0; r < 2 * o->reps; r++) CU_CHECK(drv.cuEventDestroy_v2(ev[r]));
    double med = bm_median(t, o->reps);
    free(t);
    free(ev);
    return med;
}

/* Download n floats from device address d into host memory x. */
static void bm_download(const bm_gpu *g, float *x, CUdeviceptr d, size_t n)
{
    CU_CHECK(drv.cuMemcpyDtoHAsync_v2(x, d, n * sizeof *x, g->stream));
    CU_CHECK(drv.cuStreamSynchronize(g->stream));
}

/* Upload n bytes from host memory x to device address d. */
static void bm_upload(const bm_gpu *g, CUdeviceptr d, const void *x, size_t n)
{
    CU_CHECK(drv.cuMemcpyHtoDAsync_v2(d, x, n, g->stream));
    CU_CHECK(drv.cuStreamSynchronize(g->stream));
}

/* Check cuBLAS's result r of shape s against the host's double sums at
 * BM_NSAMPLE entries (the corners and random ones); exit 1 when they
 * disagree by more than the variant's tolerance: then the mapping of our
 * row-major layout onto cuBLAS is wrong, and no figure would mean anything. */
static void bm_check_cublas(const bm_host *h, const bm_shape *s, const bm_variant *v, const float *r,
                            uint64_t *seed)
{
    double rmax = 0, dmax = 0;
    size_t n = (size_t)(s->M * s->N);
    for (size_t k = 0; k < n; k++)
        if (fabs((double)r[k]) > rmax) rmax = fabs((double)r[k]);
    long long wi = 0, wj = 0;
    for (int q = 0; q < BM_NSAMPLE; q++) {
        /* q = 0..3: the corners (0,0), (0,N-1), (M-1,0), (M-1,N-1); then random */
        long long i = q < 4 ? (q < 2 ? 0 : s->M - 1) : (long long)(bm_rand(seed) % (uint64_t)s->M);
        long long j = q < 4 ? (q % 2 ? s->N - 1 : 0) : (long long)(bm_rand(seed) % (uint64_t)s->N);
        double d = fabs(bm_host_entry(h, s, i, j, v->in, v->round_bf16) - (double)r[i * s->N + j]);
        if (!(d <= dmax)) {
            dmax = d;
            wi = i;
            wj = j;
        }
    }
    double e = rmax > 0 ? dmax / rmax : dmax;
    if (!(e <= v->tol))
        bm_die(1, "%s %lldx%lldx%lld tA %d tB %d: %s disagrees with the host's double-precision sum "
                  "at C[%lld,%lld] (error %.3g > %.0e): the row-major to column-major mapping of "
                  "this benchmark is wrong, so its figures would mean nothing",
               v->name, s->M, s->K, s->N, s->ta, s->tb, v->ref_name, wi, wj, e, v->tol);
}

/* ------------------------------------------------------------ the run */

/* Fill the host's A and B for shape s (f32 and, if t16, the 16-bit copy). */
static void bm_fill(bm_host *h, const bm_shape *s, int t16, uint64_t seed)
{
    size_t na = (size_t)(s->M * s->K), nb = (size_t)(s->K * s->N);
    h->a = bm_alloc(na * sizeof *h->a);
    h->b = bm_alloc(nb * sizeof *h->b);
    for (size_t k = 0; k < na; k++) h->a[k] = (float)((double)(bm_rand(&seed) >> 40) / 8388608.0 - 1.0);
    for (size_t k = 0; k < nb; k++) h->b[k] = (float)((double)(bm_rand(&seed) >> 40) / 8388608.0 - 1.0);
    h->t16 = t16;
    h->a16 = h->b16 = NULL;
    if (t16 == BM_F32) return;
    h->a16 = bm_alloc(na * sizeof *h->a16);
    h->b16 = bm_alloc(nb * sizeof *h->b16);
    for (size_t k = 0; k < na; k++) h->a16[k] = t16 == BM_BF16 ? bm_to_bf16(h->a[k]) : bm_to_f16(h->a[k]);
    for (size_t k = 0; k < nb; k++) h->b16[k] = t16 == BM_BF16 ? bm_to_bf16(h->b[k]) : bm_to_f16(h->b[k]);
}

/* Free what bm_fill allocated. */
static void bm_host_free(bm_host *h)
{
    free(h->a);
    free(h->b);
    free(h->a16);
    free(h->b16);
    memset(h, 0, sizeof *h);
}

/* Check, then time, variant v at shape s; fill res. */
static void bm_measure(const bm_gpu *g, const bm_opts *o, const bm_variant *v, const bm_shape *s,
                       int si, bm_result *res)
{
    size_t na = (size_t)(s->M * s->K), nb = (size_t)(s->K * s->N), nc = (size_t)(s->M * s->N);
    size_t esz = v->in == BM_F32 ? 4 : 2;
    bm_host h;
    uint64_t seed = 0x6e6e7363ull + 7919ull * (uint64_t)si;
    bm_fill(&h, s, v->in, seed);
    CUdeviceptr A = bm_dev_alloc(na * esz, "A"), B = bm_dev_alloc(nb * esz, "B");
    CUdeviceptr C = bm_dev_alloc(nc * 4, "C (ours)");
    bm_upload(g, A, v->in == BM_F32 ? (const void *)h.a : (const void *)h.a16, na * esz);
    bm_upload(g, B, v->in == BM_F32 ? (const void *)h.b : (const void *)h.b16, nb * esz);
    float *c = bm_alloc(nc * sizeof *c), *r = bm_alloc(nc * sizeof *r);

    /* ours, once, into a NaN-filled C (0xff bytes: a NaN in f32) */
    CU_CHECK(drv.cuMemsetD8Async(C, 0xff, nc * 4, g->stream));
    bm_launch(g, v, s, A, B, C);
    bm_download(g, c, C, nc);

    /* the reference: cuBLAS, itself checked at sampled entries; or the host */
    CUdeviceptr R = 0;
    if (g->blas) {
        R = bm_dev_alloc(nc * 4, "C (cuBLAS)");
        CU_CHECK(drv.cuMemsetD8Async(R, 0xff, nc * 4, g->stream));
        bm_cublas(g, v, s, A, B, R);
        bm_download(g, r, R, nc);
        bm_check_cublas(&h, s, v, r, &seed);
    } else {
        for (long long i = 0; i < s->M; i++)
            for (long long j = 0; j < s->N; j++)
                r[i * s->N + j] = (float)bm_host_entry(&h, s, i, j, v->in, v->round_bf16);
    }
    res->err = bm_error(c, r, nc);
    /* f32 sums K products in another order than cuBLAS: the rounding grows
     * like sqrt(K) (measured on an H200: 3.9e-6 at K = 8192, 1.14e-5 at
     * K = 50304), so its bound is v->tol up to K = 4096, then scaled */
    res->tol = v->tol;
    if (v->in == BM_F32 && !v->round_bf16 && s->K > 4096) res->tol = v->tol * sqrt((double)s->K / 4096.0);
    res->ok = res->err <= res->tol;

    res->ours_ms = bm_time(g, o, 0, v, s, A, B, C);
    res->ref_ms = g->blas ? bm_time(g, o, 1, v, s, A, B, R) : -1;
    res->done = 1;

    free(c);
    free(r);
    bm_host_free(&h);
    CU_CHECK(drv.cuMemFree_v2(A));
    CU_CHECK(drv.cuMemFree_v2(B));
    CU_CHECK(drv.cuMemFree_v2(C));
    if (R) CU_CHECK(drv.cuMemFree_v2(R));
}

/* GFLOP/s of shape s in ms milliseconds. */
static double bm_gflops(const bm_shape *s, double ms)
{
    return 2.0 * (double)s->M * (double)s->K * (double)s->N / (ms * 1e-3) / 1e9;
}

/* Look up the variants' entry points in the module and the source; print
 * what is measured and what is skipped. */
static void bm_resolve(bm_variant *vs, int nv, CUmodule mod, const char *src, const bm_opts *o)
{
    CUfunction f;
    int have_tc_bf16 = drv.cuModuleGetFunction(&f, mod, "nnsc_matmul_tc_bf16") == CUDA_SUCCESS;
    int have_tc_f16 = drv.cuModuleGetFunction(&f, mod, "nnsc_matmul_tc_f16") == CUDA_SUCCESS;
    for (int k = 0; k < nv; k++) {
        bm_variant *v = &vs[k];
        if (!bm_listed(o->only, v->name)) continue;
        if (!strcmp(v->name, "bf16")) v->sym = have_tc_bf16 ? "nnsc_matmul_tc_bf16" : "nnsc_matmul_bf16";
        if (!strcmp(v->name, "f16")) v->sym = have_tc_f16 ? "nnsc_matmul_tc_f16" : "nnsc_matmul_f16";
        if (!strcmp(v->name, "f32bf16") && !have_tc_bf16) {
            printf("skip %-8s nnsc_matmul_bf16 takes bf16 inputs in this library (there is no "
                   "nnsc_matmul_tc_bf16): measured as bf16\n", v->name);
            continue;
        }
        CUresult r = drv.cuModuleGetFunction(&v->fn, mod, v->sym);
        if (r == CUDA_ERROR_NOT_FOUND) {
            printf("skip %-8s %s is not in the library\n", v->name, v->sym);
            continue;
        }
        CU_CHECK(r);
        v->block = bm_src_block(src, v->sym);
        if (v->block <= 0 || v->block % 32)
            bm_die(1, "%s: no NNSC_KERNEL(%s, THREADS) line with a whole number of warps in the source",
                   o->src_path, v->sym);
        int tc = v->in != BM_F32 || v->round_bf16;
        v->bm = (int)bm_src_define(src, tc ? "NNSC_TC_BM" : "NNSC_MM_BM", 64);
        v->bn = (int)bm_src_define(src, tc ? "NNSC_TC_BN" : "NNSC_MM_BN", 64);
        v->active = 1;
        printf("%-13s %s: grid (ceil(N/%d), ceil(M/%d)), block %d; vs %s; tolerance %.0e\n", v->name,
               v->sym, v->bn, v->bm, v->block, o->use_cublas ? v->ref_name : "the host's double sums",
               v->tol);
    }
}

/* Write the markdown tables of the results to path. */
static void bm_write_md(const char *path, const bm_opts *o, const bm_variant *vs, int nv,
                        bm_result (*res)[BM_MAXSHAPE], const char *device)
{
    FILE *f = fopen(path, "w");
    if (!f) bm_die(1, "cannot write %s", path);
    fprintf(f, "Device: %s.  Median of %d runs after %d warm-up runs; C f32, acc = 0.\n\n", device,
            o->reps, o->warmup);
    for (int k = 0; k < nv; k++) {
        const bm_variant *v = &vs[k];
        if (!v->active) continue;
        fprintf(f, "| %s: %s vs %s | M x K x N | tA tB | per step | ours GFLOP/s | cuBLAS GFLOP/s "
                   "| ours / cuBLAS | max error |\n",
                v->name, v->sym, o->use_cublas ? v->ref_name : "host");
        fprintf(f, "|---|---|---|---|---|---|---|---|\n");
        double wsum = 0, wr = 0, tours = 0, tref = 0;
        for (int si = 0; si < o->nshape; si++) {
            const bm_shape *s = &o->shapes[si];
            const bm_result *r = &res[k][si];
            if (!r->done) continue;
            double go = bm_gflops(s, r->ours_ms), gr = r->ref_ms > 0 ? bm_gflops(s, r->ref_ms) : NAN;
            char gs[32] = "-", rs[32] = "-";
            if (r->ref_ms > 0) {
                snprintf(gs, sizeof gs, "%.0f", gr);
                snprintf(rs, sizeof rs, "%.3f", go / gr);
            }
            fprintf(f, "| %s | %lld x %lld x %lld | %d %d | %d | %.0f | %s | %s | %.1e%s |\n", s->what,
                    s->M, s->K, s->N, s->ta, s->tb, s->count, go, gs, rs, r->err, r->ok ? "" : " FAIL");
            double w = 2.0 * (double)s->M * (double)s->K * (double)s->N * s->count;
            wsum += w;
            if (r->ref_ms > 0) wr += w * go / gr;
            tours += s->count * r->ours_ms;
            tref += s->count * r->ref_ms;
        }
        if (o->use_cublas && wsum > 0)
            fprintf(f, "\n%s: FLOP-weighted mean ratio %.3f; matmul time of one step %.1f ms "
                       "(cuBLAS %.1f ms)\n\n", v->name, wr / wsum, tours, tref);
        else
            fprintf(f, "\n");
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    bm_opts o;
    bm_parse(&o, argc, argv);
    size_t src_size;
    char *src = bm_read_file(o.src_path, "the kernel source: write it with nnsc-aot MODEL -o DIR "
                             "--target cuda --emit-kernels, as DIR/kernels/nnsc_kernels.cu", &src_size);
    if (!o.use_cublas)
        for (int si = 0; si < o.nshape; si++) {
            const bm_shape *s = &o.shapes[si];
            if (2.0 * (double)s->M * (double)s->K * (double)s->N > BM_CPU_MAXFLOP)
                bm_die(2, "--ref cpu computes the reference on the host: use --shape with 2*M*K*N <= %.0e "
                          "(%lldx%lldx%lld is larger)", BM_CPU_MAXFLOP, s->M, s->K, s->N);
        }

    bm_gpu g;
    memset(&g, 0, sizeof g);
    bm_open_driver(&g, o.device);

    /* the device, and the library compiled for it */
    char name[256] = "?";
    int major = 0, minor = 0, sms = 0, drvver = 0, nvmaj = 0, nvmin = 0;
    size_t mem = 0;
    CU_CHECK(drv.cuDeviceGetName(name, (int)sizeof name, g.dev));
    CU_CHECK(drv.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g.dev));
    CU_CHECK(drv.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g.dev));
    CU_CHECK(drv.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, g.dev));
    CU_CHECK(drv.cuDeviceTotalMem_v2(&mem, g.dev));
    CU_CHECK(drv.cuDriverGetVersion(&drvver));
    NVRTC_CHECK(nvrtcVersion(&nvmaj, &nvmin));
    if (major < 8)
        bm_die(2, "%s is sm_%d%d: the CUDA target's kernels need sm_80 or newer (tensor-core mma.sync "
                  "with bf16)", name, major, minor);
    char arch[32];
    if (o.arch) snprintf(arch, sizeof arch, "%s", o.arch);
    else snprintf(arch, sizeof arch, "sm_%d%d", major, minor);
    char device[512];
    snprintf(device, sizeof device, "%s (sm_%d%d, %d SMs, %.0f GiB), driver CUDA %d.%d", name, major, minor,
             sms, (double)mem / (1 << 30), drvver / 1000, drvver % 1000 / 10);
    printf("bench_matmul: %s\n", device);
    size_t cubin_size;
    char *cubin = o.cubin_path ? bm_read_file(o.cubin_path, "--cubin: a cubin for this GPU", &cubin_size)
                               : bm_compile(src, arch, &cubin_size);
    CUmodule mod;
    CU_CHECK(drv.cuModuleLoadData(&mod, cubin));
    if (o.cubin_path)
        printf("library: %s (launch configurations from %s)\n", o.cubin_path, o.src_path);
    else
        printf("library: %s, NVRTC %d.%d for %s (%zu-byte cubin)\n", o.src_path, nvmaj, nvmin, arch,
               cubin_size);
    if (o.use_cublas) {
        int bv = 0;
        CUBLAS_CHECK(cublasCreate(&g.blas));
        CUBLAS_CHECK(cublasSetStream(g.blas, (cudaStream_t)g.stream));
        CUBLAS_CHECK(cublasSetMathMode(g.blas, CUBLAS_DEFAULT_MATH));   /* Sgemm: no TF32 */
        CUBLAS_CHECK(cublasGetVersion(g.blas, &bv));
        printf("reference: cuBLAS %d\n", bv);
    } else {
        printf("reference: the host's double-precision sums (--ref cpu; no cuBLAS)\n");
    }
    if (o.custom) printf("shapes: from --shape\n");
    else
        printf("shapes: one gpt2-124m step, B=%lld T=%lld (%lld rows), C=%lld, V=%lld, L=%lld, MLP 4C\n",
               o.B, o.T, o.B * o.T, o.C, o.V, o.L);
    printf("timing: median of %d launches after %d warm-up launches (CUDA events); C f32, acc = 0\n",
           o.reps, o.warmup);

    bm_variant vs[] = {
        {"f32", "nnsc_matmul", BM_F32, 0, 0, 0, 0, 1e-5, "cublasSgemm", NULL, 0},
        {"bf16", NULL, BM_BF16, 0, 0, 0, 0, 1e-4, "cublasGemmEx bf16 (compute 32F)", NULL, 0},
        {"f16", NULL, BM_F16, 0, 0, 0, 0, 1e-4, "cublasGemmEx f16 (compute 32F)", NULL, 0},
        {"f32bf16", "nnsc_matmul_bf16", BM_F32, 1, 0, 0, 0, 1e-2,
         "cublasGemmEx f32 (compute 32F_FAST_16BF)", NULL, 0},
    };
    int nv = (int)(sizeof vs / sizeof vs[0]);
    bm_resolve(vs, nv, mod, src, &o);

    static bm_result res[4][BM_MAXSHAPE];
    int fails = 0;
    printf("\n%-8s %6s %6s %6s %2s %2s %5s %13s %15s %7s %9s  %s\n", "variant", "M", "K", "N", "tA", "tB",
           "count", "ours GFLOP/s", "cuBLAS GFLOP/s", "ratio", "error", "what");
    for (int si = 0; si < o.nshape; si++) {
        const bm_shape *s = &o.shapes[si];
        for (int k = 0; k < nv; k++) {
            const bm_variant *v = &vs[k];
            if (!v->active) continue;
            long long gy = (s->M + v->bm - 1) / v->bm;
            if (gy > g.max_grid_y || s->M > INT32_MAX || s->N > INT32_MAX || s->K > INT32_MAX) {
                printf("%-8s %6lld %6lld %6lld %2d %2d: skipped: M/%d = %lld blocks exceed gridDim.y %d "
                       "or a size exceeds cuBLAS's int\n", v->name, s->M, s->K, s->N, s->ta, s->tb, v->bm,
                       gy, g.max_grid_y);
                continue;
            }
            bm_result *r = &res[k][si];
            bm_measure(&g, &o, v, s, si, r);
            double go = bm_gflops(s, r->ours_ms);
            char gs[32] = "-", rs[32] = "-";   /* cuBLAS GFLOP/s and the ratio ("-": --ref cpu) */
            if (r->ref_ms > 0) {
                snprintf(gs, sizeof gs, "%.1f", bm_gflops(s, r->ref_ms));
                snprintf(rs, sizeof rs, "%.3f", go / bm_gflops(s, r->ref_ms));
            }
            printf("%-8s %6lld %6lld %6lld %2d %2d %5d %13.1f %15s %7s %9.2e  %s%s\n", v->name, s->M, s->K,
                   s->N, s->ta, s->tb, s->count, go, gs, rs, r->err, s->what,
                   r->ok ? "" : "  FAIL: error above tolerance");
            fflush(stdout);
            fails += !r->ok;
        }
    }

    /* per variant: FLOP-weighted mean ratio and one step's matmul time */
    printf("\n");
    for (int k = 0; k < nv; k++) {
        const bm_variant *v = &vs[k];
        if (!v->active) continue;
        double wsum = 0, wr = 0, tours = 0, tref = 0;
        for (int si = 0; si < o.nshape; si++) {
            const bm_shape *s = &o.shapes[si];
            const bm_result *r = &res[k][si];
            if (!r->done) continue;
            double w = 2.0 * (double)s->M * (double)s->K * (double)s->N * s->count;
            wsum += w;
            tours += s->count * r->ours_ms;
            if (r->ref_ms > 0) {
                wr += w * r->ref_ms / r->ours_ms;   /* = ours GFLOP/s / cuBLAS GFLOP/s */
                tref += s->count * r->ref_ms;
            }
        }
        if (wsum == 0) continue;
        if (g.blas)
            printf("%-8s FLOP-weighted mean ratio %.3f (issue 5 asks > 0.60); matmul time of one step "
                   "%.2f ms, cuBLAS %.2f ms (%.3f)\n", v->name, wr / wsum, tours, tref, tref / tours);
        else
            printf("%-8s matmul time of the shapes, count-weighted: %.2f ms (no cuBLAS: --ref cpu)\n",
                   v->name, tours);
    }
    if (o.md_path) bm_write_md(o.md_path, &o, vs, nv, res, device);
    if (fails) printf("%d result%s above tolerance: FAIL\n", fails, fails > 1 ? "s" : "");
    else printf("all results within tolerance\n");

    if (g.blas) cublasDestroy(g.blas);
    CU_CHECK(drv.cuModuleUnload(mod));
    CU_CHECK(drv.cuMemFree_v2(g.st));
    CU_CHECK(drv.cuMemFree_v2(g.ws));
    CU_CHECK(drv.cuStreamDestroy_v2(g.stream));
    CU_CHECK(drv.cuDevicePrimaryCtxRelease_v2(g.dev));
    free(cubin);
    free(src);
    return fails ? 1 : 0;
}
