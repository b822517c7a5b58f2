/* test_cuda_ops.c -- the op test of the CUDA kernels: every device kernel of
 * rtlib/rt_kernels.h, launched through rtlib's CUDA backend (rt_cuda_k) on
 * random inputs (fixed seed), against its scalar reference rt_ref_<name>
 * (rtlib/cpu/kernels_ref.c, lowp.c) run on host copies of the same inputs.
 *
 *     tests/cuda_ops.sh [--gpu]            (the runner: docs/testing.md)
 *     build/tests/test_cuda_ops [--arch sm_XY[,sm_XY...]] [--only NAME]
 *
 * What runs: the kernel library plus three generated fused chains
 * (cg_cuda_build_source on a small ir_prog: every ew op kind and operand
 * kind), compiled with NVRTC (--arch, else for the cubin the default build,
 * sm_80 and sm_90, would load on device 0, else for the device's own
 * architecture); rt_init_cuda with those cubins and a one-rank manifest;
 * then, per case, its buffers laid out in the arena between guard
 * bytes, uploaded from the mirror (rt_dev_upload), the kernel run inside a
 * step (rt_dev_step_begin / rt_dev_step_end, as a generated program does,
 * so sgd and adamw read the lr and gradient scales from the device state
 * and gradclip writes the norm there), everything downloaded and compared:
 *
 *   outputs   normalised MSE = sum (x - ref)^2 / max(sum ref^2, 1e-30)
 *             <= 1e-6 for every f32 kernel and for matmul_bf16 (against
 *             rt_ref_matmul_bf16, which rounds the inputs as the kernel does:
 *             what is left are f32 sums; also 100 times closer to it than to
 *             the f32 product, which the bound alone would let pass); the
 *             optimizers' outputs are normalised by the reference's change
 *             instead (the update is small next to the value; a wrong lr
 *             scale would hide there)
 *   inputs    bit for bit unchanged
 *   guards    the bytes around every buffer unchanged (no write out of
 *             bounds); they hold NaNs, so an out-of-bounds read shows too
 *   state     after gradclip: the step's gradient norm and scale against the
 *             reference's; otherwise the step's (NaN, 1)
 *
 * Cases: several shapes per kernel, among them 1, odd sizes, sizes that are
 * not multiples of tiles or blocks, more elements than one grid-stride grid
 * covers (65535 blocks of 256), empty reductions, every acc / transpose /
 * causal / Vreal < V variant, in-place operands, buffers at 0, 4, 8 or 12
 * bytes past a 256-byte boundary.  A cross-entropy target outside [0, Vreal) stops the rank with
 * the CPU target's message: checked in a child process (this program
 * re-executed with --bad-target, as a CUDA context does not survive fork).
 *
 * On a GPU this is the op test.  Under the driver double (tests/mock, which
 * runs every launch as the same rt_ref_<name>) the comparisons are exact and
 * say nothing about the device code: what is checked there is the host side
 * (argument packing, launch configurations, buffer bounds, the device state,
 * uploads and downloads).  Without a driver on the library path (an ordinary
 * unit-test run on a machine without a GPU), without a device or without
 * NVRTC it prints SKIP and exits 77.
 *
 * Prints one line per case, a summary per kernel and "N passed, M failed";
 * exits 1 if anything failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codegen.h"
#include "cuda.h"
#include "cuda/cuda_drv.h"
#include "rt_cuda_abi.h"
#include "rt_ew.h"
#include "rt_internal.h"
#include "cuda/rt_cuda.h"
#include "rt_kext.h"

#define BOUND 1e-6                 /* normalised MSE bound, f32 and matmul_bf16 */
#define TINY 1e-30                 /* floor of the normalisation (an all-zero reference) */
#define ARENA_MB 256               /* the test arena: the largest case needs ~201 MiB */
#define GUARD 256                  /* guard bytes around each buffer */
#define SENTINEL 0xff              /* guard byte: four of them are a NaN */
#define GRID_ELEMS (65535LL * 256) /* elements one grid-stride launch covers in one pass */
#define BIG (GRID_ELEMS + 299)     /* more than that (odd) */
#define ALT_RATIO 100              /* matmul_bf16: this much closer to the bf16 reference
                                      than to the f32 product, in normalised MSE */

/* The scalar references, by kernel number. */
typedef void ref_fn(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f);
static ref_fn *const refs[RT_KN_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) rt_ref_##name,
#include "rt_kernels.h"
#undef RT_K
};

/* ------------------------------------------------------------ the device */

/* ---------------------------------------------------- the fused chains */

/* A fused elementwise chain (rt_ew.h): the same ops go into the generated
 * kernel nnsc_ew_<id> (through an ir_prog) and into the launch's ints. */
typedef struct ew_chain {
    const char *what;                 /* for the source's banner */
    int nbuf;                         /* buffers it names */
    int nops;                         /* ops */
    int64_t ops[4 * RT_EW_MAXOPS];    /* (op, dst, a, c) each */
} ew_chain;

/* Between them every op kind and every operand kind (register, element, row
 * broadcast, accumulation), aliasing (chain 1 reads and writes b0), all nine
 * buffer slots and the most ops a chain may have (chain 2). */
static const ew_chain chains[] = {
    {"r0 = b0 + row b1; b2 = gelu(r0); b3 += relu(b2)", 4, 3,
     {RT_EW_ADD, RT_EW_REG + 0, RT_EW_MEM + 0, RT_EW_ROW + 1,
      RT_EW_GELU, RT_EW_MEM + 2, RT_EW_REG + 0, 0,
      RT_EW_RELU, RT_EW_ACC + 3, RT_EW_MEM + 2, 0}},
    {"r1 = b0 gelu'(b1); b2 = relu_bwd(r1, b1); b0 = r1; b2 += b0 b1", 3, 4,
     {RT_EW_GELU_BWD, RT_EW_REG + 1, RT_EW_MEM + 0, RT_EW_MEM + 1,
      RT_EW_RELU_BWD, RT_EW_MEM + 2, RT_EW_REG + 1, RT_EW_MEM + 1,
      RT_EW_COPY, RT_EW_MEM + 0, RT_EW_REG + 1, 0,
      RT_EW_MUL, RT_EW_ACC + 2, RT_EW_MEM + 0, RT_EW_MEM + 1}},
    {"r0 = b0 row b1; r1 = r0 + row b2; b3 = relu_bwd(r1, b4); b5 += b6 gelu'(r1); "
     "b8 = b7 + r0", 9, 5,
     {RT_EW_MUL, RT_EW_REG + 0, RT_EW_MEM + 0, RT_EW_ROW + 1,
      RT_EW_ADD, RT_EW_REG + 1, RT_EW_REG + 0, RT_EW_ROW + 2,
      RT_EW_RELU_BWD, RT_EW_MEM + 3, RT_EW_REG + 1, RT_EW_MEM + 4,
      RT_EW_GELU_BWD, RT_EW_ACC + 5, RT_EW_MEM + 6, RT_EW_REG + 1,
      RT_EW_ADD, RT_EW_MEM + 8, RT_EW_MEM + 7, RT_EW_REG + 0}},
};
#define NCHAIN ((int)(sizeof chains / sizeof chains[0]))

/* The CUDA source of the test build: the library and nnsc_ew_0 .. 2. */
static void build_source(ir_buf *src)
{
    ir_prog p;
    ir_prog_init(&p, 0, 1);
    for (int c = 0; c < NCHAIN; c++) {
        pg_instr *in = ir_prog_add(&p, IR_SEC_MB, RT_K_ew, chains[c].what);
        for (int b = 0; b < chains[c].nbuf; b++)
            pg_buf(in, 64 * b);
        pg_i(in, c);    /* id */
        pg_i(in, 16);   /* n */
        pg_i(in, 4);    /* N */
        pg_i(in, chains[c].nops);
        for (int k = 0; k < 4 * chains[c].nops; k++)
            pg_i(in, chains[c].ops[k]);
    }
    p.arena = 4096;
    ir_prog_verify(&p);
    cg_cuda_build_source(src, &p, 1);
    ir_prog_free(&p);
}

/* ------------------------------------------------------ random numbers */

static uint64_t rng = 0x6e6e73632d6f7073ull;   /* fixed seed: every run, the same inputs */

/* splitmix64. */
static uint64_t rng_next(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static float rng_float(float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(rng_next() >> 40) * 0x1p-24);
}

/* ------------------------------------------------------------ the cases */

/* What a buffer of a case is. */
typedef enum tb_kind {
    TB_IN,      /* f32 input: must come back bit for bit */
    TB_TOK,     /* i32 input (tokens, targets): must come back bit for bit */
    TB_OUT,     /* output, random before (acc adds to it; what the kernel does not
                   write must stay): normalised MSE against the reference */
    TB_DELTA,   /* output normalised by the reference's change (optimizers) */
    TB_HOST,    /* host only: a preparation's by-product, never on the device */
} tb_kind;

/* One buffer of a case. */
typedef struct tbuf {
    const char *name;   /* for messages: "C", "dX", ... */
    tb_kind kind;       /* its role */
    int64_t n;          /* elements (4 bytes each) */
    int64_t off;        /* arena byte offset (tc_run) */
    float *host;        /* the reference's copy (i32 for TB_TOK) */
    float *init;        /* TB_DELTA: the contents before */
} tbuf;

/* One kernel call of a case. */
typedef struct tlaunch {
    int kernel;                   /* RT_KN_* */
    int nb;                       /* buffers */
    int buf[RT_CUDA_MAXBUF];      /* each one's index in the case */
    int ni;                       /* ints */
    int64_t i[RT_CUDA_MAXINT];    /* the ints */
    int nf;                       /* floats */
    float f[RT_CUDA_MAXFLT];      /* the floats */
} tlaunch;

#define TC_MAXBUF 12      /* buffers of a case */
#define TC_MAXLAUNCH 4    /* kernel calls of a case */

/* The case being built and run: its launches run in one step on the
 * device and, in the same order, as references on the host. */
typedef struct tcase {
    char label[24];                 /* the summary's row: the kernel (ew: ew_<id>) */
    char what[160];                 /* the shape and flags */
    double lr_scale;                /* the step's lr scale */
    int check_norm;                 /* gradclip ran: compare the step's norm and scale */
    int has_alt;                    /* alt_out must be ALT_RATIO times closer to its
                                       reference than to alt_host (matmul_bf16) */
    int alt_out, alt_host;          /* an output, and a host buffer holding what a wrong
                                       kernel would give (the f32 product) */
    tbuf b[TC_MAXBUF];              /* the buffers */
    int nb;                         /* how many */
    tlaunch l[TC_MAXLAUNCH];        /* the launches */
    int nl;                         /* how many */
} tcase;

static tcase tc;                /* the case being built */
static int tc_count;            /* cases run */
static int tc_active;           /* a case is running (for the exit report) */
static rt_ctx *ctx;             /* the rank */
static char *dev;               /* the device arena's base */
static int64_t arena_bytes;     /* its size */
static const char *only;        /* --only: run the kernels whose label contains this */
static int npass, nfail;        /* results */

/* Per-kernel summary. */
typedef struct kstat {
    char label[24];   /* kernel (ew_<id>) */
    int cases;        /* cases run */
    int failed;       /* of which failed */
    double worst;     /* largest normalised MSE */
} kstat;
static kstat kstats[64];
static int nkstat;

/* The summary row of label, made on first use. */
static kstat *kstat_of(const char *label)
{
    for (int k = 0; k < nkstat; k++)
        if (!strcmp(kstats[k].label, label))
            return &kstats[k];
    if (nkstat == (int)(sizeof kstats / sizeof kstats[0]))
        abort();
    kstat *s = &kstats[nkstat++];
    memset(s, 0, sizeof *s);
    snprintf(s->label, sizeof s->label, "%s", label);
    return s;
}

/* Start a case of kernel label (for ew: ew_<id>); what: its shape. */
static int tc_begin(const char *label, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int tc_begin(const char *label, const char *fmt, ...)
{
    memset(&tc, 0, sizeof tc);
    snprintf(tc.label, sizeof tc.label, "%s", label);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tc.what, sizeof tc.what, fmt, ap);
    va_end(ap);
    tc.lr_scale = 1.0;
    return !only || strstr(label, only);
}

/* A buffer of n floats, uniform in [lo, hi); returns its index. */
static int tc_buf(tb_kind kind, const char *name, int64_t n, float lo, float hi)
{
    if (tc.nb == TC_MAXBUF)
        abort();
    tbuf *b = &tc.b[tc.nb];
    b->name = name;
    b->kind = kind;
    b->n = n;
    b->host = malloc((size_t)(n > 0 ? n : 1) * 4);
    if (!b->host)
        abort();
    for (int64_t k = 0; k < n; k++)
        b->host[k] = rng_float(lo, hi);
    return tc.nb++;
}

/* An i32 input of n values, uniform in [lo, hi). */
static int tc_tok(const char *name, int64_t n, int64_t lo, int64_t hi)
{
    int x = tc_buf(TB_TOK, name, n, 0, 0);
    int32_t *t = (int32_t *)tc.b[x].host;
    for (int64_t k = 0; k < n; k++)
        t[k] = (int32_t)(lo + (int64_t)(rng_next() % (uint64_t)(hi - lo)));
    return x;
}

/* Make every 5th element of buffer x 0 and every 10th -0 (relu's edge). */
static void tc_zeros(int x)
{
    for (int64_t k = 0; k < tc.b[x].n; k += 5)
        tc.b[x].host[k] = k % 10 ? 0.0f : -0.0f;
}

/* Append a launch: kernel on buffers buf[0 .. nb), ints, floats. */
static void tc_launch(int kernel, int nb, const int *buf, int ni, const int64_t *i, int nf,
                      const float *f)
{
    if (tc.nl == TC_MAXLAUNCH || nb > RT_CUDA_MAXBUF || ni > RT_CUDA_MAXINT || nf > RT_CUDA_MAXFLT)
        abort();
    tlaunch *l = &tc.l[tc.nl++];
    l->kernel = kernel;
    l->nb = nb;
    l->ni = ni;
    l->nf = nf;
    memcpy(l->buf, buf, (size_t)nb * sizeof *buf);
    if (ni)
        memcpy(l->i, i, (size_t)ni * sizeof *i);
    if (nf)
        memcpy(l->f, f, (size_t)nf * sizeof *f);
}

/* Run a reference on the host copies now: realistic inputs (layernorm's
 * mean and rstd for its backward, attention's Y and lse, softmax's Y). */
static void tc_prep(int kernel, int nb, const int *buf, int ni, const int64_t *i, int nf,
                    const float *f)
{
    void *b[RT_CUDA_MAXBUF];
    for (int k = 0; k < nb; k++)
        b[k] = tc.b[buf[k]].host;
    refs[kernel](NULL, b, ni ? i : NULL, nf ? f : NULL);
}

/* Argument lists: L(K, B(x, y), I(n, acc), NOF). */
#define NARG_(T, ...) ((int)(sizeof((T[]){__VA_ARGS__}) / sizeof(T)))
#define B(...) NARG_(int, __VA_ARGS__), (const int[]){__VA_ARGS__}
#define I(...) NARG_(int64_t, __VA_ARGS__), (const int64_t[]){__VA_ARGS__}
#define F(...) NARG_(float, __VA_ARGS__), (const float[]){__VA_ARGS__}
#define NOI 0, NULL
#define NOF 0, NULL

/* Free the case's host buffers. */
static void tc_free(void)
{
    for (int k = 0; k < tc.nb; k++) {
        free(tc.b[k].host);
        free(tc.b[k].init);
    }
    tc.nb = 0;
}

/* Normalised MSE of got against want (n floats): sum (got - want)^2 over
 * the normaliser, sum want^2 or (base given) sum (want - base)^2; *worst
 * gets the index of the largest difference. */
static double nmse(const float *got, const float *want, const float *base, int64_t n,
                   int64_t *worst)
{
    double num = 0, den = 0, big = -1;
    *worst = 0;
    for (int64_t k = 0; k < n; k++) {
        if (isinf(want[k]) && got[k] == want[k])
            continue;   /* (the same infinity: attention_vl's lse of a row with no keys) */
        double d = (double)got[k] - want[k], r = base ? (double)want[k] - base[k] : want[k];
        num += d * d;
        den += r * r;
        if (!(fabs(d) <= big)) {   /* NaN wins */
            big = isnan(d) ? INFINITY : fabs(d);
            *worst = k;
        }
    }
    return num / (den > TINY ? den : TINY);
}

static char tc_details[4096];   /* the running case's failure details, printed after its line */

/* Note a failure of the running case (one line of details). */
static void tc_fail(int *failed, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tc_fail(int *failed, const char *fmt, ...)
{
    size_t len = strlen(tc_details);
    if (len + 8 < sizeof tc_details) {
        va_list ap;
        va_start(ap, fmt);
        snprintf(tc_details + len, sizeof tc_details - len, "      ");
        len += 6;
        vsnprintf(tc_details + len, sizeof tc_details - len, fmt, ap);
        va_end(ap);
        len = strlen(tc_details);
        snprintf(tc_details + len, sizeof tc_details - len, "\n");
    }
    *failed = 1;
}

/* The guard bytes [lo, hi) of the arena: all SENTINEL?  Else the first bad offset. */
static int64_t guard_bad(const unsigned char *a, int64_t lo, int64_t hi)
{
    for (int64_t k = lo; k < hi; k++)
        if (a[k] != SENTINEL)
            return k;
    return -1;
}

/* Run the case: lay it out, upload, launch in one step, run the references,
 * download, compare; one line of result. */
static void tc_run(void)
{
    int failed = 0;
    char worst_at[200] = "";
    tc_details[0] = 0;
    double worst = 0;
    unsigned char *mirror = (unsigned char *)ctx->arena;

    /* layout: guard, buffer, guard, ...; each buffer at a 256-byte boundary
       plus 0, 4, 8 or 12 bytes (varied by case and buffer) */
    int64_t top = 0;
    /* every buffer as large as its kernel's contract says (the formula of its
       row in rt_kernels.h, rt_kext.h): the guards then check that the kernel
       keeps to the contract the compiler plans the arena by */
    static const char *const row_ext[RT_KN_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) ext,
#include "rt_kernels.h"
#undef RT_K
    };
    for (int l = 0; l < tc.nl; l++)
        for (int k = 0; k < tc.l[l].nb; k++) {
            const tbuf *b = &tc.b[tc.l[l].buf[k]];
            int64_t e = rt_kext(row_ext[tc.l[l].kernel], k, tc.l[l].i, tc.l[l].ni);
            if (e != RT_KEXT_VAR && e != b->n)
                tc_fail(&failed, "%s (b[%d] of %s) holds %lld elements; its row's formula in rt_kernels.h "
                        "says %lld", b->name, k, cg_kernel_names[tc.l[l].kernel], (long long)b->n,
                        (long long)e);
        }
    for (int k = 0; k < tc.nb; k++) {
        tbuf *b = &tc.b[k];
        if (b->kind == TB_HOST)
            continue;
        top = (top + GUARD + 255) / 256 * 256 + 4 * ((tc_count + k) % 4);
        b->off = top;
        top += 4 * b->n;
        if (b->kind == TB_DELTA) {
            b->init = malloc((size_t)(b->n > 0 ? b->n : 1) * 4);
            memcpy(b->init, b->host, (size_t)b->n * 4);
        }
    }
    top += GUARD;
    tc_count++;
    if (top > arena_bytes) {
        printf("FAIL  %-15s %s: needs %lld bytes, the test arena has %lld\n", tc.label, tc.what,
               (long long)top, (long long)arena_bytes);
        nfail++;
        tc_free();
        return;
    }
    memset(mirror, SENTINEL, (size_t)top);
    for (int k = 0; k < tc.nb; k++)
        if (tc.b[k].kind != TB_HOST)
            memcpy(mirror + tc.b[k].off, tc.b[k].host, (size_t)tc.b[k].n * 4);
    rt_dev_upload(ctx, 0, top);

    /* the device: one step, as a generated program runs it */
    tc_active = 1;
    ctx->lr_scale = tc.lr_scale;
    rt_dev_step_begin(ctx);
    for (int x = 0; x < tc.nl; x++) {
        const tlaunch *l = &tc.l[x];
        void *b[RT_CUDA_MAXBUF];
        for (int k = 0; k < l->nb; k++)
            b[k] = dev + tc.b[l->buf[k]].off;
        rt_cuda_k(ctx, l->kernel, b, l->ni ? l->i : NULL, l->nf ? l->f : NULL);
    }
    rt_dev_step_end(ctx, NULL);
    rt_dev_download(ctx, 0, top);
    tc_active = 0;

    /* the references, with the step's scales in a context of their own */
    static rt_ctx host;
    memset(&host, 0, sizeof host);
    host.rank = 0;
    host.lr_scale = tc.lr_scale;
    host.grad_scale = 1.0f;
    host.grad_norm = NAN;
    for (int x = 0; x < tc.nl; x++) {
        const tlaunch *l = &tc.l[x];
        void *b[RT_CUDA_MAXBUF];
        for (int k = 0; k < l->nb; k++)
            b[k] = tc.b[l->buf[k]].host;
        refs[l->kernel](&host, b, l->ni ? l->i : NULL, l->nf ? l->f : NULL);
    }

    /* compare: guards, inputs, outputs, the state */
    int64_t prev = 0;
    const char *prev_name = NULL;
    for (int k = 0; k <= tc.nb; k++) {
        if (k < tc.nb && tc.b[k].kind == TB_HOST)
            continue;
        int64_t end = k < tc.nb ? tc.b[k].off : top;
        int64_t bad = guard_bad(mirror, prev, end);
        if (bad >= 0)
            tc_fail(&failed, "the guard bytes changed: byte %lld after %s, %lld before %s",
                    (long long)(bad - prev), prev_name ? prev_name : "the start",
                    (long long)(end - bad), k < tc.nb ? tc.b[k].name : "the end");
        if (k == tc.nb)
            break;
        const tbuf *b = &tc.b[k];
        const float *got = (const float *)(mirror + b->off);
        prev = b->off + 4 * b->n;
        prev_name = b->name;
        if (b->kind == TB_IN || b->kind == TB_TOK) {
            if (memcmp(got, b->host, (size_t)b->n * 4))
                tc_fail(&failed, "input %s changed", b->name);
            continue;
        }
        int64_t at;
        double e = nmse(got, b->host, b->kind == TB_DELTA ? b->init : NULL, b->n, &at);
        if (!(e <= worst)) {
            worst = isnan(e) ? INFINITY : e;
            snprintf(worst_at, sizeof worst_at, " (%s)", b->name);
        }
        if (!(e <= BOUND))
            tc_fail(&failed, "%s: normalised MSE %.3g > %g; largest difference at %lld: %.9g, "
                    "reference %.9g", b->name, e, BOUND, (long long)at, b->n ? got[at] : 0.0,
                    b->n ? b->host[at] : 0.0);
    }
    if (tc.check_norm) {
        double en = (ctx->grad_norm - host.grad_norm) * (ctx->grad_norm - host.grad_norm) /
                    (host.grad_norm * host.grad_norm + TINY);
        double es = ((double)ctx->grad_scale - host.grad_scale) *
                    ((double)ctx->grad_scale - host.grad_scale) /
                    ((double)host.grad_scale * host.grad_scale);
        if (!(en <= BOUND && es <= BOUND))
            tc_fail(&failed, "the step's gradient norm %.9g and scale %.9g, reference %.9g and "
                    "%.9g", ctx->grad_norm, ctx->grad_scale, host.grad_norm, host.grad_scale);
        if (!(en <= worst) || !(es <= worst)) {
            worst = en > es ? en : es;
            snprintf(worst_at, sizeof worst_at, " (grad %s)", en > es ? "norm" : "scale");
        }
    } else if (!isnan(ctx->grad_norm) || ctx->grad_scale != 1.0f) {
        /* rt_dev_step_begin's values: no kernel of the case touches them */
        tc_fail(&failed, "without gradclip the step's gradient norm and scale are %g and %g, "
                "not NaN and 1 (from rt_dev_step_begin)", ctx->grad_norm, ctx->grad_scale);
    }

    if (tc.has_alt) {
        /* matmul_bf16 on inputs that are not bf16 values: the f32 product is
           about 1e-6 away (normalised MSE); a kernel that does not round the
           inputs would pass the bound, but not this */
        const tbuf *o = &tc.b[tc.alt_out];
        const float *got = (const float *)(mirror + o->off);
        int64_t at;
        double e_ref = nmse(got, o->host, NULL, o->n, &at);
        double e_alt = nmse(got, tc.b[tc.alt_host].host, NULL, o->n, &at);
        if (!(e_ref * ALT_RATIO <= e_alt))
            tc_fail(&failed, "%s is not %d times closer to the bf16 reference (normalised MSE "
                    "%.3g) than to the f32 product (%.3g): the inputs are not rounded to bf16",
                    o->name, ALT_RATIO, e_ref, e_alt);
        snprintf(worst_at + strlen(worst_at), sizeof worst_at - strlen(worst_at),
                 "; f32 product %.2g", e_alt);
    }
    printf("%s  %-15s %-62s nmse %.2g%s\n%s", failed ? "FAIL" : "ok  ", tc.label, tc.what, worst,
           worst_at, tc_details);
    fflush(stdout);
    kstat *s = kstat_of(tc.label);
    s->cases++;
    s->failed += failed;
    if (!(worst <= s->worst))
        s->worst = worst;
    if (failed)
        nfail++;
    else
        npass++;
    tc_free();
}

/* A case that stops the process (a launch refused, a driver error:
 * rt_fatal exits) is still named in the output. */
static void at_exit_report(void)
{
    if (!tc_active)
        return;
    tc_active = 0;
    printf("FAIL  %-15s %s: the process exited during this case (message on stderr)\n",
           tc.label, tc.what);
}

/* ------------------------------------------------------- the kernels */

/* One elementwise kernel of rt_kernels.h: out (+)= op(in0[, in1]). */
typedef struct ew_kernel {
    int kernel;             /* RT_KN_* */
    int nin;                /* inputs, 1 or 2 */
    const char *in[2];      /* their names, in argument order */
    const char *out;        /* the output's name */
    int wide;               /* the input drawn from [lo, hi) (the others: [-1, 1)) */
    float lo, hi;
    int zeros;              /* the input sprinkled with zeros (relu's edge), or -1 */
    int acc;                /* takes acc (i[1]) */
    int nf;                 /* takes a float (mse_bwd's scale: 0.37) */
} ew_kernel;

static const ew_kernel ew_kernels[] = {
    {RT_KN_add, 2, {"A", "B"}, "Y", 0, -1, 1, -1, 1, 0},
    {RT_KN_copy, 1, {"X", NULL}, "Y", 0, -1, 1, -1, 1, 0},
    {RT_KN_relu, 1, {"X", NULL}, "Y", 0, -1, 1, 0, 0, 0},
    {RT_KN_relu_bwd, 2, {"dY", "Y"}, "dX", 0, -1, 1, 1, 1, 0},
    {RT_KN_gelu, 1, {"X", NULL}, "Y", 0, -6, 6, -1, 0, 0},
    {RT_KN_gelu_bwd, 2, {"dY", "X"}, "dX", 1, -5, 5, -1, 1, 0},
    {RT_KN_mul, 2, {"A", "B"}, "Y", 0, -1, 1, -1, 1, 0},
    {RT_KN_silu, 1, {"X", NULL}, "Y", 0, -8, 8, -1, 0, 0},
    {RT_KN_silu_bwd, 2, {"dY", "X"}, "dX", 1, -8, 8, -1, 1, 0},
    {RT_KN_mse_bwd, 2, {"P", "T"}, "dP", 0, -2, 2, -1, 1, 1},
};

/* zero, and the elementwise kernels: one element, odd sizes, beyond one
 * grid (zero and add), copy in place. */
static void ops_elementwise(void)
{
    static const int64_t ns[] = {1, 1001, 70001, BIG};
    for (int s = 0; s < 4; s++)
        if (tc_begin("zero", "n=%lld", (long long)ns[s])) {
            int y = tc_buf(TB_OUT, "dst", ns[s], -1, 1);
            tc_launch(RT_KN_zero, B(y), I(ns[s]), NOF);
            tc_run();
        }
    for (size_t e = 0; e < sizeof ew_kernels / sizeof ew_kernels[0]; e++) {
        const ew_kernel *k = &ew_kernels[e];
        const char *name = cg_kernel_names[k->kernel];
        for (int s = 0; s < 4; s++)
            for (int acc = 0; acc <= k->acc; acc++) {
                int64_t n = ns[s];
                if (n == BIG && (k->kernel != RT_KN_add || !acc))
                    continue;   /* beyond the grid: zero and add are enough */
                if (!tc_begin(name, "n=%lld%s%s", (long long)n,
                              k->acc ? (acc ? " acc=1" : " acc=0") : "",
                              k->nf ? " scale=0.37" : ""))
                    continue;
                int x[3];
                for (int j = 0; j < k->nin; j++)
                    x[j] = tc_buf(TB_IN, k->in[j], n, j == k->wide ? k->lo : -1,
                                  j == k->wide ? k->hi : 1);
                if (k->zeros >= 0)
                    tc_zeros(x[k->zeros]);
                x[k->nin] = tc_buf(TB_OUT, k->out, n, -1, 1);
                tc_launch(k->kernel, 1 + k->nin, x, 1 + k->acc, (const int64_t[]){n, acc},
                          k->nf, (const float[]){0.37f});
                tc_run();
                if (k->kernel == RT_KN_copy && s < 3 &&
                    tc_begin(name, "n=%lld acc=%d in place (X = Y)", (long long)n, acc)) {
                    int y = tc_buf(TB_OUT, "Y", n, -1, 1);
                    tc_launch(RT_KN_copy, B(y, y), I(n, acc), NOF);
                    tc_run();
                }
            }
    }
}

/* cvt_bf16 then cvt_f32 (bf16 storage): odd and even sizes, beyond one grid;
 * the bf16 words in between are compared too (their pairs of bf16s in
 * [-4, 4) read as f32 are finite). */
static void ops_cvt(void)
{
    static const int64_t ns[] = {1, 2, 1001, 70001, BIG + 1};
    for (int s = 0; s < 5; s++)
        for (int back = 0; back < 2; back++)
            if (tc_begin(back ? "cvt_f32" : "cvt_bf16", back ? "n=%lld, after cvt_bf16" : "n=%lld",
                         (long long)ns[s])) {
                int64_t n = ns[s], nw = (n + 1) / 2;
                int x = tc_buf(TB_IN, "X", n, -4, 4), w = tc_buf(TB_OUT, "W", nw, -1, 1);
                tc_launch(RT_KN_cvt_bf16, B(x, w), I(n, nw), NOF);
                if (back) {
                    int y = tc_buf(TB_OUT, "Y", n, -1, 1);
                    tc_launch(RT_KN_cvt_f32, B(w, y), I(n, nw), NOF);
                }
                tc_run();
            }
}

/* bias_add (also in place and beyond one grid) and bias_grad (column sums). */
static void ops_bias(void)
{
    static const int64_t mn[][2] = {{1, 1}, {33, 77}, {300, 37}, {4099, 4093}};
    for (int s = 0; s < 4; s++) {
        int64_t M = mn[s][0], N = mn[s][1];
        if (tc_begin("bias_add", "M=%lld N=%lld", (long long)M, (long long)N)) {
            int x = tc_buf(TB_IN, "X", M * N, -1, 1), b = tc_buf(TB_IN, "bias", N, -1, 1);
            int y = tc_buf(TB_OUT, "Y", M * N, -1, 1);
            tc_launch(RT_KN_bias_add, B(x, b, y), I(M, N), NOF);
            tc_run();
        }
        if (s == 1 && tc_begin("bias_add", "M=%lld N=%lld in place (Y = X)", (long long)M,
                               (long long)N)) {
            int b = tc_buf(TB_IN, "bias", N, -1, 1), y = tc_buf(TB_OUT, "Y", M * N, -1, 1);
            tc_launch(RT_KN_bias_add, B(y, b, y), I(M, N), NOF);
            tc_run();
        }
    }
    /* bias_grad: a column per thread column, ceil(N / 32) blocks; M = 0
       still writes zeros with acc = 0 */
    static const int64_t g[][3] = {{1, 1, 0}, {300, 37, 0}, {300, 37, 1}, {1000, 65, 0},
                                   {7, 1000, 1}, {0, 65, 0}, {0, 65, 1}, {4097, 33, 0}};
    for (size_t s = 0; s < sizeof g / sizeof g[0]; s++) {
        int64_t M = g[s][0], N = g[s][1], acc = g[s][2];
        if (!tc_begin("bias_grad", "M=%lld N=%lld acc=%lld", (long long)M, (long long)N,
                      (long long)acc))
            continue;
        int dy = tc_buf(TB_IN, "dY", M * N, -1, 1), db = tc_buf(TB_OUT, "db", N, -1, 1);
        tc_launch(RT_KN_bias_grad, B(dy, db), I(M, N, acc), NOF);
        tc_run();
    }
}

/* The scalar reductions: grid sums (mse_loss, sumsq), empty ones included. */
static void ops_reductions(void)
{
    /* n = 0 with acc = 0 must write 0 (with acc = 1 nothing runs); 2047 and
       2049 around one block's share; more than 1024 blocks' worth */
    static const int64_t ns[][2] = {{0, 0}, {0, 1}, {1, 0}, {2047, 1}, {2049, 0},
                                    {1024 * 2048 + 5, 0}, {3000001, 1}};
    for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++) {
        int64_t n = ns[s][0], acc = ns[s][1];
        if (tc_begin("mse_loss", "n=%lld acc=%lld scale=0.5", (long long)n, (long long)acc)) {
            int p = tc_buf(TB_IN, "P", n, -2, 2), t = tc_buf(TB_IN, "T", n, -2, 2);
            int l = tc_buf(TB_OUT, "L", 1, 1, 2);
            tc_launch(RT_KN_mse_loss, B(p, t, l), I(n, acc), F(0.5f));
            tc_run();
        }
    }
    for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++) {
        int64_t n = ns[s][0], acc = ns[s][1];
        if (tc_begin("sumsq", "n=%lld acc=%lld", (long long)n, (long long)acc)) {
            int gb = tc_buf(TB_IN, "G", n, -1, 1), sb = tc_buf(TB_OUT, "S", 1, 1, 2);
            tc_launch(RT_KN_sumsq, B(gb, sb), I(n, acc), NOF);
            tc_run();
        }
    }
}

/* xent_stats, xent_loss, xent_vp_bwd (the vocabulary-blocked cross-entropy):
 * a rank's share of the columns (Vlo > 0), padding (Vreal inside and past
 * the share), one block and many, M = 0, more rows than the workspace. */
static void ops_xent_blocks(void)
{
    static const int64_t c[][6] = {   /* M, K (the rank's blocks), C, Vreal, Vlo, Kall */
        {0, 4, 8, 32, 0, 4},    {1, 1, 1, 1, 0, 1},      {37, 8, 25, 190, 0, 8},   {37, 4, 25, 190, 100, 8},
        {37, 4, 25, 150, 100, 8}, {5, 64, 80, 50257, 0, 64}, {1500, 2, 16, 60, 32, 4}};
    for (int kind = 0; kind < 3; kind++)
        for (size_t s = 0; s < sizeof c / sizeof c[0]; s++)
            for (int acc = 0; acc < (kind ? 2 : 1); acc++) {
                int64_t M = c[s][0], K = c[s][1], C = c[s][2], Vr = c[s][3], Vlo = c[s][4], Ka = c[s][5];
                static const char *nm[3] = {"xent_stats", "xent_loss", "xent_vp_bwd"};
                float scale = M ? 1.0f / (float)M : 1.0f;
                if (!tc_begin(nm[kind], "M=%lld K=%lld C=%lld Vreal=%lld Vlo=%lld Kall=%lld acc=%d", (long long)M,
                              (long long)K, (long long)C, (long long)Vr, (long long)Vlo, (long long)Ka, acc))
                    continue;
                if (kind == 0) {
                    int x = tc_buf(TB_IN, "logits", M * K * C, -4, 4), t = tc_tok("targets", M, 0, Vr);
                    int a = tc_buf(TB_OUT, "bmax", M * K, 0, 1), b = tc_buf(TB_OUT, "bsum", M * K, 0, 1);
                    int p = tc_buf(TB_OUT, "btarget", M * K, 0, 1);
                    tc_launch(RT_KN_xent_stats, B(x, t, a, b, p), I(M, K, C, Vr, Vlo), NOF);
                } else if (kind == 1) {
                    int a = tc_buf(TB_IN, "bmax", M * Ka, -4, 4), b = tc_buf(TB_IN, "bsum", M * Ka, 0.5f, 40);
                    int p = tc_buf(TB_IN, "btarget", M * Ka, -4, 4), l = tc_buf(TB_OUT, "L", 1, 1, 2);
                    tc_launch(RT_KN_xent_loss, B(a, b, p, l), I(M, Ka, acc), F(scale));
                } else {
                    int x = tc_buf(TB_IN, "logits", M * K * C, -4, 4), t = tc_tok("targets", M, 0, Vr);
                    int a = tc_buf(TB_IN, "bmax", M * Ka, 3, 4), b = tc_buf(TB_IN, "bsum", M * Ka, 0.5f, 40);
                    int d = tc_buf(TB_OUT, "dlogits", M * K * C, -1, 1);
                    tc_launch(RT_KN_xent_vp_bwd, B(x, t, a, b, d), I(M, K * C, acc, Vr, Ka, Vlo), F(scale));
                }
                tc_run();
            }
}

/* sgd and adamw read the lr scale and the gradient scale from the device
 * state; gradclip (after sumsq) writes the norm and scale there. */
static void ops_optimizers(void)
{
    static const int64_t ns[] = {1, 1001, 70001};
    for (int s = 0; s < 3; s++) {
        int64_t n = ns[s];
        if (tc_begin("sgd", "n=%lld lr=0.05 wd=0.01, lr scale 0.37", (long long)n)) {
            tc.lr_scale = 0.37;
            int p = tc_buf(TB_DELTA, "P", n, -1, 1), g = tc_buf(TB_IN, "G", n, -1, 1);
            tc_launch(RT_KN_sgd, B(p, g), I(n), F(0.05f, 0.01f));
            tc_run();
        }
        for (int t = 1; t <= 7; t += 6) {
            if (!tc_begin("adamw", "n=%lld t=%d lr=0.01 wd=0.1, lr scale 0.37", (long long)n, t))
                continue;
            tc.lr_scale = 0.37;
            int p = tc_buf(TB_DELTA, "P", n, -1, 1), g = tc_buf(TB_IN, "G", n, -1, 1);
            int m = tc_buf(TB_DELTA, "M", n, -0.1f, 0.1f), v = tc_buf(TB_DELTA, "V", n, 0, 0.01f);
            tc_launch(RT_KN_adamw, B(p, g, m, v), I(n, t), F(0.01f, 0.1f, 0.9f, 0.999f, 1e-8f));
            tc_run();
        }
    }
    /* a step with clipping: sumsq, gradclip, then the optimizer with the
       scale gradclip left in the state (|G| ~ 41: max 0 and 1000 do not clip) */
    static const float maxes[] = {0.0f, 1000.0f, 1.0f};
    for (int s = 0; s < 3; s++)
        for (int adam = 0; adam < 2; adam++) {
            int64_t n = 5000;
            if (!tc_begin("gradclip", "max=%g, then %s n=%lld", maxes[s], adam ? "adamw" : "sgd",
                          (long long)n))
                continue;
            tc.lr_scale = 0.5;
            tc.check_norm = 1;
            int p = tc_buf(TB_DELTA, "P", n, -1, 1), g = tc_buf(TB_IN, "G", n, -1, 1);
            int sq = tc_buf(TB_OUT, "S", 1, 0, 0);
            tc_launch(RT_KN_sumsq, B(g, sq), I(n, 0), NOF);
            tc_launch(RT_KN_gradclip, B(sq), NOI, F(maxes[s]));
            if (adam) {
                int m = tc_buf(TB_DELTA, "M", n, -0.1f, 0.1f);
                int v = tc_buf(TB_DELTA, "V", n, 0, 0.01f);
                tc_launch(RT_KN_adamw, B(p, g, m, v), I(n, 3), F(0.01f, 0.1f, 0.9f, 0.999f, 1e-8f));
            } else {
                tc_launch(RT_KN_sgd, B(p, g), I(n), F(0.05f, 0.01f));
            }
            tc_run();
        }
}

/* embedding and embedding_bwd: vocabulary shards (tokens outside the shard),
 * repeated tokens, table rows no token touches, beyond one grid. */
static void ops_embedding(void)
{
    static const int64_t c[][6] = {   /* R, Vlo, Vext, C, acc, tokens below */
        {1, 0, 1, 1, 0, 1},      {37, 5, 20, 33, 0, 30}, {37, 5, 20, 33, 1, 30},
        {300, 0, 50, 65, 0, 50}, {2, 0, 8, 300, 0, 8},   {300, 0, 7, 257, 1, 7},
        {4099, 1, 3, 4093, 0, 5}};   /* embedding: beyond one grid */
    for (int bwd = 0; bwd < 2; bwd++)
        for (size_t s = 0; s < sizeof c / sizeof c[0]; s++) {
            int64_t R = c[s][0], Vlo = c[s][1], Vext = c[s][2], C = c[s][3], acc = c[s][4];
            if (bwd && R * C > GRID_ELEMS)
                continue;   /* a block per row: no grid-stride loop */
            if (!tc_begin(bwd ? "embedding_bwd" : "embedding",
                          "R=%lld Vlo=%lld Vext=%lld C=%lld acc=%lld, tokens < %lld",
                          (long long)R, (long long)Vlo, (long long)Vext, (long long)C,
                          (long long)acc, (long long)c[s][5]))
                continue;
            int t = tc_tok("tokens", R, 0, c[s][5]);
            if (bwd) {
                int dy = tc_buf(TB_IN, "dY", R * C, -1, 1);
                int dw = tc_buf(TB_OUT, "dtable", Vext * C, -1, 1);
                tc_launch(RT_KN_embedding_bwd, B(t, dy, dw), I(R, Vlo, Vext, C, acc), NOF);
            } else {
                int w = tc_buf(TB_IN, "table", Vext * C, -1, 1);
                int y = tc_buf(TB_OUT, "Y", R * C, -1, 1);
                tc_launch(RT_KN_embedding, B(t, w, y), I(R, Vlo, Vext, C, acc), NOF);
            }
            tc_run();
        }
}

/* layernorm (rms 0) or rmsnorm (rms 1), its backward and weight gradient
 * (mean and rstd from the reference forward): one column, a block's worth
 * and more, R = 0 (the weight gradient with acc = 0 writes zeros). */
static void ops_norm(int rms)
{
    static const int64_t rc[][2] = {{1, 1}, {37, 33}, {64, 1000}, {3, 4097}, {0, 33}};
    const char *nm = rms ? "rmsnorm" : "layernorm";
    const float eps = rms ? 1e-6f : 1e-5f;
    /* the forward's buffers (rmsnorm: X, w, Y, rstd; layernorm: X, w, bias, Y, mean, rstd) */
#define NORM_FWD(x, w, b, y, mean, rstd) \
    rms ? 4 : 6, rms ? (const int[]){x, w, y, rstd} : (const int[]){x, w, b, y, mean, rstd}
    for (int s = 0; s < 5; s++) {
        int64_t R = rc[s][0], C = rc[s][1];
        if (!R || !tc_begin(nm, "R=%lld C=%lld eps=%g", (long long)R, (long long)C, (double)eps))
            continue;
        int x = tc_buf(TB_IN, "X", R * C, -2, 3), w = tc_buf(TB_IN, "w", C, 0.5f, 1.5f);
        int b = rms ? -1 : tc_buf(TB_IN, "bias", C, -0.5f, 0.5f), y = tc_buf(TB_OUT, "Y", R * C, -1, 1);
        int mean = rms ? -1 : tc_buf(TB_OUT, "mean", R, -1, 1), rstd = tc_buf(TB_OUT, "rstd", R, -1, 1);
        tc_launch(rms ? RT_KN_rmsnorm : RT_KN_layernorm, NORM_FWD(x, w, b, y, mean, rstd), I(R, C), F(eps));
        tc_run();
    }
    for (int wgrad = 0; wgrad < 2; wgrad++)
        for (int s = 0; s < 5; s++)
            for (int acc = 0; acc < 2; acc++) {
                int64_t R = rc[s][0], C = rc[s][1];
                /* the input gradient: no rows, nothing to do; with C = 1 dX is
                   0 up to rounding, so acc = 1 compares it against the values
                   it is added to */
                if (!wgrad && (!R || (C == 1 && !acc)))
                    continue;
                if (!tc_begin(wgrad ? (rms ? "rmsnorm_wgrad" : "layernorm_wgrad") : (rms ? "rmsnorm_bwd" : "layernorm_bwd"),
                              "R=%lld C=%lld acc=%d", (long long)R, (long long)C, acc))
                    continue;
                int dy = tc_buf(TB_IN, "dY", R * C, -1, 1), x = tc_buf(TB_IN, "X", R * C, -2, 3);
                int w = tc_buf(wgrad ? TB_HOST : TB_IN, "w", C, 0.5f, 1.5f);
                int mean = rms ? -1 : tc_buf(TB_IN, "mean", R, 0, 0), rstd = tc_buf(TB_IN, "rstd", R, 0, 0);
                int b = rms ? -1 : tc_buf(TB_HOST, "bias", C, -0.5f, 0.5f);
                int y = tc_buf(TB_HOST, "Y", R * C, 0, 0);
                tc_prep(rms ? RT_KN_rmsnorm : RT_KN_layernorm, NORM_FWD(x, w, b, y, mean, rstd), I(R, C), F(eps));
                if (wgrad && rms) {
                    int dw = tc_buf(TB_OUT, "dw", C, -1, 1);
                    tc_launch(RT_KN_rmsnorm_wgrad, B(dy, x, rstd, dw), I(R, C, acc), NOF);
                } else if (wgrad) {
                    int dw = tc_buf(TB_OUT, "dw", C, -1, 1), db = tc_buf(TB_OUT, "dbias", C, -1, 1);
                    tc_launch(RT_KN_layernorm_wgrad, B(dy, x, mean, rstd, dw, db), I(R, C, acc), NOF);
                } else {
                    int dx = tc_buf(TB_OUT, "dX", R * C, -1, 1);
                    if (rms) tc_launch(RT_KN_rmsnorm_bwd, B(dy, x, w, rstd, dx), I(R, C, acc), NOF);
                    else tc_launch(RT_KN_layernorm_bwd, B(dy, x, w, mean, rstd, dx), I(R, C, acc), NOF);
                }
                tc_run();
            }
#undef NORM_FWD
}

/* rope, forward and inverse, with acc: one head of 2, several, a long
 * sequence (large angles), in place. */
static void ops_rope(void)
{
    static const int64_t sh[][4] = {{1, 1, 1, 2}, {2, 17, 3, 8}, {1, 700, 4, 64}, {3, 5, 2, 6}};
    for (int s = 0; s < 4; s++)
        for (int inv = 0; inv < 2; inv++)
            for (int acc = 0; acc < 2; acc++) {
                int64_t Bn = sh[s][0], T = sh[s][1], H = sh[s][2], D = sh[s][3], n = Bn * T * H * D;
                if (!tc_begin("rope", "B=%lld T=%lld H=%lld D=%lld inverse=%d acc=%d", (long long)Bn, (long long)T,
                              (long long)H, (long long)D, inv, acc))
                    continue;
                int x = tc_buf(TB_IN, "X", n, -2, 2), y = tc_buf(TB_OUT, "Y", n, -1, 1);
                tc_launch(RT_KN_rope, B(x, y), I(Bn, T, H, D, inv, acc), F(10000.0f));
                tc_run();
            }
}

/* softmax and its backward (Y from the reference forward): one column, a
 * block's worth and more. */
static void ops_softmax(void)
{
    static const int64_t rn[][2] = {{1, 1}, {37, 33}, {5, 3000}, {64, 257}};
    for (int s = 0; s < 4; s++) {
        int64_t R = rn[s][0], N = rn[s][1];
        if (!tc_begin("softmax", "R=%lld N=%lld", (long long)R, (long long)N))
            continue;
        int x = tc_buf(TB_IN, "X", R * N, -5, 5), y = tc_buf(TB_OUT, "Y", R * N, -1, 1);
        tc_launch(RT_KN_softmax, B(x, y), I(R, N), NOF);
        tc_run();
    }
    for (int s = 0; s < 4; s++)
        for (int acc = 0; acc < 2; acc++) {
            int64_t R = rn[s][0], N = rn[s][1];
            if (!tc_begin("softmax_bwd", "R=%lld N=%lld acc=%d", (long long)R, (long long)N, acc))
                continue;
            int dy = tc_buf(TB_IN, "dY", R * N, -1, 1), y = tc_buf(TB_IN, "Y", R * N, 0, 0);
            int x = tc_buf(TB_HOST, "X", R * N, -5, 5), dx = tc_buf(TB_OUT, "dX", R * N, -1, 1);
            tc_prep(RT_KN_softmax, B(x, y), I(R, N), NOF);
            tc_launch(RT_KN_softmax_bwd, B(dy, y, dx), I(R, N, acc), NOF);
            tc_run();
        }
}

/* mean_mid and its backward: more than a grid of outputs, T = 1, empty. */
static void ops_mean(void)
{
    static const int64_t sh[][3] = {{3, 7, 5}, {2, 1, 300}, {64, 33, 1100}, {0, 4, 3}};
    for (int s = 0; s < 4; s++)
        for (int acc = 0; acc < 2; acc++) {
            int64_t R = sh[s][0], T = sh[s][1], C = sh[s][2];
            float scale = 1.0f / (float)T;
            if (tc_begin("mean_mid", "R=%lld T=%lld C=%lld acc=%d", (long long)R, (long long)T, (long long)C, acc)) {
                int x = tc_buf(TB_IN, "X", R * T * C, -1, 1), y = tc_buf(TB_OUT, "Y", R * C, -1, 1);
                tc_launch(RT_KN_mean_mid, B(x, y), I(R, T, C, acc), F(scale));
                tc_run();
            }
            if (tc_begin("mean_mid_bwd", "R=%lld T=%lld C=%lld acc=%d", (long long)R, (long long)T, (long long)C,
                         acc)) {
                int dy = tc_buf(TB_IN, "dY", R * C, -1, 1), dx = tc_buf(TB_OUT, "dX", R * T * C, -1, 1);
                tc_launch(RT_KN_mean_mid_bwd, B(dy, dx), I(R, T, C, acc), F(scale));
                tc_run();
            }
        }
}

/* transpose: more than a grid of elements, one row or column, empty. */
static void ops_transpose(void)
{
    static const int64_t sh[][3] = {{3, 7, 5}, {2, 1, 300}, {64, 33, 1100}, {0, 4, 3}};
    for (int s = 0; s < 4; s++)
        for (int acc = 0; acc < 2; acc++) {
            int64_t R = sh[s][0], A = sh[s][1], Bn = sh[s][2];
            if (tc_begin("transpose", "R=%lld A=%lld B=%lld acc=%d", (long long)R, (long long)A, (long long)Bn, acc)) {
                int x = tc_buf(TB_IN, "X", R * A * Bn, -1, 1), y = tc_buf(TB_OUT, "Y", R * A * Bn, -1, 1);
                tc_launch(RT_KN_transpose, B(x, y), I(R, A, Bn, acc), NOF);
                tc_run();
            }
        }
}

/* relpos_bias and its backward: encoder and decoder buckets, cross lengths,
 * T5's defaults over 512 positions (more than a grid of elements), empty. */
static void ops_relpos(void)
{
    static const int64_t cs[][6] = {   /* T, S, H, NB, bidirectional, max_distance */
        {5, 5, 3, 8, 1, 6}, {7, 13, 2, 32, 0, 128}, {512, 512, 2, 32, 1, 128}, {0, 4, 2, 8, 1, 8}};
    for (int k = 0; k < 4; k++) {
        int64_t T = cs[k][0], S = cs[k][1], H = cs[k][2], NB = cs[k][3], bi = cs[k][4], md = cs[k][5];
        if (tc_begin("relpos_bias", "T=%lld S=%lld H=%lld NB=%lld bi=%lld md=%lld", (long long)T, (long long)S,
                     (long long)H, (long long)NB, (long long)bi, (long long)md)) {
            int tab = tc_buf(TB_IN, "table", NB * H, -1, 1), y = tc_buf(TB_OUT, "Y", H * T * S, -1, 1);
            tc_launch(RT_KN_relpos_bias, B(tab, y), I(T, S, H, NB, bi, md), NOF);
            tc_run();
        }
        for (int acc = 0; acc < 2; acc++)
            if (tc_begin("relpos_bias_bwd", "T=%lld S=%lld H=%lld NB=%lld acc=%d", (long long)T, (long long)S,
                         (long long)H, (long long)NB, acc)) {
                int dy = tc_buf(TB_IN, "dY", H * T * S, -1, 1), dt = tc_buf(TB_OUT, "dtable", NB * H, -1, 1);
                tc_launch(RT_KN_relpos_bias_bwd, B(dy, dt), I(T, S, H, NB, bi, md, acc), NOF);
                tc_run();
            }
    }
}

/* -inf entries of an additive bias (H, T, S): mask 1, every third key of a
 * row; mask 2, a sliding window (key s seen by queries s .. s + 4) and head
 * 0's query 1 with no key at all. */
static void ab_mask(float *bias, int64_t H, int64_t T, int64_t S, int mask)
{
    for (int64_t x = 0; x < H * T * S; x++) {
        int64_t s = x % S, t = x / S % T, h = x / (S * T);
        if (mask == 1 ? s % 3 == 2 : (s > t || s < t - 4 || (h == 0 && t == 1)))
            bias[x] = -INFINITY;
    }
}

/* attention and its backward (Y and lse from the reference forward): head
 * sizes 1 to 256 (the largest the kernel takes), odd T, causal or not,
 * grouped-query (Hkv < H) and multi-query (Hkv = 1), cross-attention (S keys
 * != T queries: more and fewer, not causal). */
static void ops_attention(void)
{
    /* B, T, H, D, Hkv, S (0: T), ALiBi (heads 1 .. H of H + 2), then 1: key lengths (attention_vl: S, 0 --
       Y = 0, lse = -inf --, 1, S / 2 + 1, S - 1 over the rows), 2, 3: an additive bias (attention_ab, its
       backward and attention_dbias; 2: every third key of a row -inf, 3: a sliding window and a query
       with no key, ab_mask) */
    static const int64_t sh[][8] = {
        {1, 1, 1, 1, 1, 0, 0, 0}, {1, 2, 1, 1, 1, 0, 0, 0}, {2, 5, 3, 8, 3, 0, 0, 0}, {1, 33, 2, 64, 2, 0, 0, 0},
        {1, 17, 1, 256, 1, 0, 0, 0}, {2, 70, 2, 24, 2, 0, 0, 0}, {2, 19, 6, 16, 2, 0, 0, 0},
        {1, 40, 4, 32, 1, 0, 0, 0}, {2, 19, 6, 16, 2, 45, 0, 0}, {1, 33, 2, 64, 2, 7, 0, 0}, {2, 3, 2, 8, 1, 1, 0, 0},
        {2, 19, 6, 16, 2, 0, 1, 0}, {1, 33, 3, 32, 3, 12, 1, 0},
        {5, 5, 3, 8, 3, 0, 0, 1}, {5, 19, 6, 16, 2, 0, 0, 1}, {5, 19, 6, 16, 2, 45, 0, 1}, {5, 33, 3, 32, 3, 12, 1, 1},
        {5, 40, 2, 64, 2, 0, 1, 1},
        {1, 1, 1, 1, 1, 0, 0, 2}, {3, 19, 6, 16, 2, 0, 0, 2}, {2, 33, 3, 32, 3, 12, 1, 2}, {2, 40, 2, 64, 2, 0, 1, 2},
        {1, 17, 1, 256, 1, 0, 0, 2}, {2, 40, 3, 16, 3, 0, 0, 3}, {2, 70, 2, 32, 1, 0, 1, 3}};
    for (int bwd = 0; bwd < 2; bwd++)
        for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++)
            for (int causal = 0; causal < (sh[s][5] ? 1 : 2); causal++)
                for (int acc = 0; acc <= bwd; acc++) {
                    int64_t Bn = sh[s][0], T = sh[s][1], H = sh[s][2], D = sh[s][3], Hkv = sh[s][4];
                    int64_t S = sh[s][5] ? sh[s][5] : T, P = T > S ? T : S, al = sh[s][6];
                    int64_t n = Bn * T * H * D, nk = Bn * S * Hkv * D;
                    int vl = sh[s][7] >= 2 ? 2 : (int)sh[s][7], mask = (int)sh[s][7] - 1;
                    float scale = 1.0f / sqrtf((float)D);
                    char what[128];
                    snprintf(what, sizeof what, "B=%lld T=%lld S=%lld H=%lld D=%lld Hkv=%lld causal=%d%s",
                             (long long)Bn, (long long)T, (long long)S, (long long)H, (long long)D, (long long)Hkv,
                             causal, al ? " alibi" : "");
                    const char *name = bwd ? (vl == 2 ? "attention_ab_bwd" : vl ? "attention_vl_bwd" : "attention_bwd")
                                           : (vl == 2 ? "attention_ab" : vl ? "attention_vl" : "attention");
                    /* one key: dq and dk are 0 up to rounding (P = 1) */
                    if ((bwd && S == 1) || !(bwd ? tc_begin(name, "%s acc=%d", what, acc) : tc_begin(name, "%s", what)))
                        continue;
                    int lens = -1, bias = -1;
                    if (vl == 2) {
                        bias = tc_buf(TB_IN, "bias", H * T * S, -2, 2);
                        ab_mask((float *)tc.b[bias].host, H, T, S, mask);
                    } else if (vl) {
                        lens = tc_tok("lens", Bn, 0, 1);
                        const int64_t pat[5] = {S, 0, 1, S / 2 + 1, S - 1};
                        for (int64_t r = 0; r < Bn; r++) ((int32_t *)tc.b[lens].host)[r] = (int32_t)pat[r % 5];
                    }
                    int dy = bwd ? tc_buf(TB_IN, "dY", n, -1, 1) : -1, q = tc_buf(TB_IN, "q", n, -1, 1);
                    int k = tc_buf(TB_IN, "k", nk, -1, 1), v = tc_buf(TB_IN, "v", nk, -1, 1);
                    int y = bwd ? tc_buf(TB_IN, "Y", n, 0, 0) : tc_buf(TB_OUT, "Y", n, -1, 1);
                    int lse = bwd ? tc_buf(TB_IN, "lse", Bn * H * T, 0, 0) : tc_buf(TB_OUT, "lse", Bn * H * T, -1, 1);
                    const int64_t *ifw = (const int64_t[]){Bn, T, H, D, causal, Hkv, S, al, 1, H + 2};
                    if (!bwd) {
                        if (vl == 2) tc_launch(RT_KN_attention_ab, B(q, k, v, bias, y, lse), 10, ifw, F(scale));
                        else if (vl) tc_launch(RT_KN_attention_vl, B(q, k, v, lens, y, lse), 10, ifw, F(scale));
                        else tc_launch(RT_KN_attention, B(q, k, v, y, lse), 10, ifw, F(scale));
                        tc_run();
                        continue;
                    }
                    int dq = tc_buf(TB_OUT, "dq", n, -1, 1), dk = tc_buf(TB_OUT, "dk", nk, -1, 1);
                    int dv = tc_buf(TB_OUT, "dv", nk, -1, 1);
                    const int64_t *ib = (const int64_t[]){Bn, T, H, D, causal, acc, Hkv, S, P, al, 1, H + 2};
                    if (vl == 2) {
                        tc_prep(RT_KN_attention_ab, B(q, k, v, bias, y, lse), 10, ifw, F(scale));
                        tc_launch(RT_KN_attention_ab_bwd, B(dy, q, k, v, y, lse, bias, dq, dk, dv), 12, ib, F(scale));
                    } else if (vl) {   /* (Y and lse from the reference forward) */
                        tc_prep(RT_KN_attention_vl, B(q, k, v, lens, y, lse), 10, ifw, F(scale));
                        tc_launch(RT_KN_attention_vl_bwd, B(dy, q, k, v, y, lse, lens, dq, dk, dv), 12, ib, F(scale));
                    } else {
                        tc_prep(RT_KN_attention, B(q, k, v, y, lse), 10, ifw, F(scale));
                        tc_launch(RT_KN_attention_bwd, B(dy, q, k, v, y, lse, dq, dk, dv), 12, ib, F(scale));
                    }
                    tc_run();
                    if (vl != 2 || !tc_begin("attention_dbias", "%s acc=%d", what, acc))
                        continue;
                    /* the bias's gradient, summed over the batch, on the same kind of inputs */
                    bias = tc_buf(TB_IN, "bias", H * T * S, -2, 2);
                    ab_mask((float *)tc.b[bias].host, H, T, S, mask);
                    dy = tc_buf(TB_IN, "dY", n, -1, 1), q = tc_buf(TB_IN, "q", n, -1, 1);
                    k = tc_buf(TB_IN, "k", nk, -1, 1), v = tc_buf(TB_IN, "v", nk, -1, 1);
                    y = tc_buf(TB_IN, "Y", n, 0, 0), lse = tc_buf(TB_IN, "lse", Bn * H * T, 0, 0);
                    int db = tc_buf(TB_OUT, "dbias", H * T * S, -1, 1);
                    tc_prep(RT_KN_attention_ab, B(q, k, v, bias, y, lse), 10, ifw, F(scale));
                    tc_launch(RT_KN_attention_dbias, B(dy, q, k, v, y, lse, bias, db), 12, ib, F(scale));
                    tc_run();
                }
}

/* A box of a tensor, for slice and place. */
typedef struct box {
    int ndim;                 /* dimensions */
    int64_t ext[RT_MAXDIM];   /* the full tensor's extents */
    int64_t lo[RT_MAXDIM];    /* the box: [lo, hi) per dimension */
    int64_t hi[RT_MAXDIM];
} box;

/* slice and place: 0 to 8 dimensions, full and partial boxes, beyond one
 * grid (slice). */
static void ops_slice_place(void)
{
    static const box boxes[] = {
        {0, {0}, {0}, {0}},
        {1, {1000}, {0}, {1000}},
        {1, {1000}, {3}, {998}},
        {2, {37, 50}, {5, 7}, {30, 49}},
        {3, {4, 5, 6}, {1, 0, 2}, {3, 5, 5}},
        {8, {2, 3, 2, 3, 2, 3, 2, 3}, {0, 1, 1, 0, 1, 1, 0, 1}, {2, 3, 2, 2, 2, 3, 1, 3}},
        {2, {4100, 4100}, {0, 3}, {4100, 4096}},
    };
    for (int place = 0; place < 2; place++)
        for (size_t s = 0; s < sizeof boxes / sizeof boxes[0]; s++) {
            const box *x = &boxes[s];
            int64_t full = 1, part = 1, ints[2 + 3 * RT_MAXDIM] = {x->ndim};
            char shape[96] = "(scalar)";
            int len = 0;
            for (int d = 0; d < x->ndim; d++) {
                full *= x->ext[d];
                part *= x->hi[d] - x->lo[d];
                ints[2 + 3 * d] = x->ext[d];
                ints[3 + 3 * d] = x->lo[d];
                ints[4 + 3 * d] = x->hi[d];
                len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%lld[%lld:%lld]",
                                d ? "," : "", (long long)x->ext[d], (long long)x->lo[d],
                                (long long)x->hi[d]);
            }
            int big = part > GRID_ELEMS;
            if (big && place)
                continue;   /* beyond one grid: slice is enough */
            for (int acc = big; acc < 2; acc++) {
                ints[1] = acc;
                if (!tc_begin(place ? "place" : "slice", "ndim=%d %s acc=%d", x->ndim, shape, acc))
                    continue;
                int src = tc_buf(TB_IN, "src", place ? part : full, -1, 1);
                int dst = tc_buf(TB_OUT, "dst", place ? full : part, -1, 1);
                tc_launch(place ? RT_KN_place : RT_KN_slice, B(src, dst), 2 + 3 * x->ndim, ints,
                          NOF);
                tc_run();
            }
        }
}

/* matmul and matmul_bf16: every transpose and acc, tiles of 64 partly
 * filled, M = 1 and N = 1, a long K. */
static void ops_matmul(void)
{
    static const int64_t sh[][3] = {   /* M, K, N */
        {1, 1, 1}, {1, 300, 7}, {65, 33, 130}, {64, 64, 64}, {130, 257, 67}, {33, 1000, 45}};
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int s = 0; s < 6; s++)
            for (int v = 0; v < 8; v++) {
                int64_t M = sh[s][0], K = sh[s][1], N = sh[s][2];
                int ta = v & 1, tb = v >> 1 & 1, acc = v >> 2;
                if (!tc_begin(bf16 ? "matmul_bf16" : "matmul",
                              "M=%lld K=%lld N=%lld transA=%d transB=%d acc=%d", (long long)M,
                              (long long)K, (long long)N, ta, tb, acc))
                    continue;
                int a = tc_buf(TB_IN, "A", M * K, -1, 1), b = tc_buf(TB_IN, "B", K * N, -1, 1);
                int c = tc_buf(TB_OUT, "C", M * N, -1, 1);
                if (bf16) {   /* the f32 product, which the result must not be */
                    tc.has_alt = 1;
                    tc.alt_out = c;
                    tc.alt_host = tc_buf(TB_HOST, "C f32", M * N, 0, 0);
                    memcpy(tc.b[tc.alt_host].host, tc.b[c].host, (size_t)(M * N) * 4);
                    tc_prep(RT_KN_matmul, B(a, b, tc.alt_host), I(M, K, N, ta, tb, acc), NOF);
                }
                tc_launch(bf16 ? RT_KN_matmul_bf16 : RT_KN_matmul, B(a, b, c),
                          I(M, K, N, ta, tb, acc), NOF);
                tc_run();
            }
}

/* The generated chains nnsc_ew_<id>: a row length N that does not divide
 * n, one element, beyond one grid. */
static void ops_ew(void)
{
    static const int64_t sizes[][2] = {{1, 1}, {1000, 7}, {70001, 13}, {BIG, 4093}};
    for (int c = 0; c < NCHAIN; c++)
        for (int s = 0; s < 4; s++) {
            int64_t n = sizes[s][0], N = sizes[s][1];
            if (n == BIG && c)
                continue;   /* one chain beyond the grid */
            char label[24];
            snprintf(label, sizeof label, "ew_%d", c);
            if (!tc_begin(label, "n=%lld N=%lld: %.40s...", (long long)n, (long long)N,
                          chains[c].what))
                continue;
            const ew_chain *ch = &chains[c];
            /* each buffer's role and length from the operands */
            int out[RT_EW_NBUF] = {0}, row[RT_EW_NBUF] = {0};
            for (int o = 0; o < ch->nops; o++) {
                const int64_t *q = ch->ops + 4 * o;
                int two = rt_ew_nsrc(q[0]) == 2;
                if (q[1] >= RT_EW_MEM)
                    out[RT_EW_BUF(q[1])] = 1;
                for (int k = 2; k < 3 + two; k++)
                    if (q[k] >= RT_EW_ROW && q[k] < RT_EW_ACC)
                        row[RT_EW_BUF(q[k])] = 1;
            }
            static const char *const names[RT_EW_NBUF] = {"b0", "b1", "b2", "b3", "b4",
                                                          "b5", "b6", "b7", "b8"};
            int bufs[RT_EW_NBUF];
            for (int b = 0; b < ch->nbuf; b++) {
                bufs[b] = tc_buf(out[b] ? TB_OUT : TB_IN, names[b], row[b] ? N : n, -2, 2);
                if (!out[b] && !row[b])
                    tc_zeros(bufs[b]);   /* relu / relu_bwd edges */
            }
            int64_t ints[RT_EW_HEAD + 4 * RT_EW_MAXOPS] = {c, n, N, ch->nops};
            memcpy(ints + RT_EW_HEAD, ch->ops, (size_t)(4 * ch->nops) * sizeof(int64_t));
            tc_launch(RT_KN_ew, ch->nbuf, bufs, RT_EW_HEAD + 4 * ch->nops, ints, NOF);
            tc_run();
        }
}

/* ------------------------------------------ a bad target (child process) */

/* The child (--bad-target KIND FILE): the images from FILE, then an
 * xent_stats (KIND 0) or xent_vp_bwd (KIND 1) with target 5 in row 3
 * (Vreal 5), or -1 in row 2, inside a step: rt_dev_step_end is to stop the
 * rank. */
static int bad_target_child(int kind, const char *path, char *argv0)
{
    FILE *f = fopen(path, "rb");
    static rt_image img[8];
    static unsigned char *data[8];
    int n = 0;
    char arch[16];
    unsigned long long size;
    while (f && n < 8 && fscanf(f, "%15s %llu", arch, &size) == 2 && fgetc(f) == '\n') {
        data[n] = malloc(size);
        if (!data[n] || fread(data[n], 1, size, f) != size)
            break;
        img[n].arch = strdup(arch);
        img[n].data = data[n];
        img[n].size = size;
        n++;
    }
    if (f)
        fclose(f);
    if (!n) {
        fprintf(stderr, "test_cuda_ops --bad-target: cannot read the images from %s\n", path);
        return 3;
    }
    rt_ctx *c = rt_init_cuda_alone(argv0, 1LL << 20, img, n);
    char *d = rt_arena(c);
    int64_t M = 5, V = 6, Vr = 5;
    float *logits = (float *)c->arena;
    int32_t *t = (int32_t *)(c->arena + 4096);
    for (int64_t k = 0; k < M * V; k++)
        logits[k] = (float)(k % 7) * 0.25f;
    for (int64_t m = 0; m < M; m++)
        t[m] = (int32_t)(m % Vr);
    if (kind == 0)
        t[3] = 5;
    else
        t[2] = -1;
    rt_dev_upload(c, 0, 8192);
    rt_step_begin(c, 0);
    if (kind == 0) {   /* xent_stats: 3 blocks of 2 */
        void *b[5] = {d, d + 4096, d + 6144, d + 6400, d + 6656};
        rt_cuda_k(c, RT_KN_xent_stats, b, (int64_t[]){M, 3, 2, Vr, 0}, NULL);
    } else {           /* xent_vp_bwd, on statistics of 1 block */
        float *st = (float *)(c->arena + 6144);
        for (int64_t m = 0; m < 2 * M; m++)
            st[m] = 1.0f;
        rt_dev_upload(c, 6144, 256);
        void *b[5] = {d, d + 4096, d + 6144, d + 6144 + 4 * M, d + 7168};
        rt_cuda_k(c, RT_KN_xent_vp_bwd, b, (int64_t[]){M, V, 0, Vr, 1, 0}, (float[]){1.0f});
    }
    rt_dev_step_end(c, NULL);
    printf("the bad target was not noticed\n");
    return 0;
}

/* Run the child for kind; check its exit status and message. */
static void test_bad_target(const char *self, const char *images, int kind)
{
    const char *want = kind ? "xent: target -1 of row 2 is outside [0, 5)"
                            : "xent: target 5 of row 3 is outside [0, 5)";
    const char *label = kind ? "xent_vp_bwd" : "xent_stats";
    if (!tc_begin(label, "a target outside [0, Vreal) stops the rank (child process)"))
        return;
    int fd[2];
    if (pipe(fd))
        abort();
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        dup2(fd[1], 1);
        close(fd[1]);
        char k[8];
        snprintf(k, sizeof k, "%d", kind);
        execl(self, self, "--bad-target", k, images, (char *)NULL);
        _exit(98);
    }
    close(fd[1]);
    char out[8192];
    size_t len = 0;
    ssize_t r;
    while ((r = read(fd[0], out + len, sizeof out - 1 - len)) > 0)
        len += (size_t)r;
    close(fd[0]);
    out[len] = 0;
    int st = 0;
    waitpid(pid, &st, 0);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    const char *line = strstr(out, want) ? strstr(out, want) : out;
    int ok = code == 1 && strstr(out, want) != NULL;
    printf("%s  %-15s %s: exit %d, '%.*s'\n", ok ? "ok  " : "FAIL", label, tc.what, code,
           (int)strcspn(line, "\n"), line);
    if (!ok)
        printf("      wanted exit 1 and '%s'\n", want);
    kstat *s = kstat_of(label);
    s->cases++;
    s->failed += !ok;
    if (ok)
        npass++;
    else
        nfail++;
}

/* Write the images for the children: per image "ARCH SIZE\n" and the bytes. */
static int write_images(const char *path, const cg_cubin *img, int n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    for (int k = 0; k < n; k++) {
        fprintf(f, "%s %llu\n", img[k].arch, (unsigned long long)img[k].size);
        fwrite(img[k].data, 1, img[k].size, f);
    }
    return fclose(f);
}

/* ----------------------------------------------------------------- main */

/* Every device kernel (an f32 entry point, or ew) has cases. */
static void check_coverage(void)
{
    for (int k = 0; k < RT_KN_COUNT; k++) {
        if (!cg_cuda_entry_of(k) && k != RT_K_ew)
            continue;
        int cases = 0;
        for (int s = 0; s < nkstat; s++)
            if (k == RT_K_ew ? !strncmp(kstats[s].label, "ew_", 3)
                             : !strcmp(kstats[s].label, cg_kernel_names[k]))
                cases += kstats[s].cases;
        if (!cases) {
            printf("FAIL  %-15s no case tests this device kernel\n", cg_kernel_names[k]);
            nfail++;
        }
    }
}

/* The per-kernel table. */
static void print_summary(void)
{
    printf("\n%-16s %6s %7s %12s\n", "kernel", "cases", "failed", "worst nmse");
    for (int k = 0; k < nkstat; k++)
        printf("%-16s %6d %7d %12.2g\n", kstats[k].label, kstats[k].cases, kstats[k].failed,
               kstats[k].worst);
}

/* The usage line, to stderr; exit 2. */
static void usage(void)
{
    fprintf(stderr, "usage: test_cuda_ops [--arch sm_XY[,sm_XY...]] [--only KERNEL] [TESTS_DIR]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *arch_arg = NULL;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--bad-target") && a + 2 < argc)
            return bad_target_child(atoi(argv[a + 1]), argv[a + 2], argv[0]);
        else if (!strcmp(argv[a], "--arch") && a + 1 < argc)
            arch_arg = argv[++a];
        else if (!strcmp(argv[a], "--only") && a + 1 < argc)
            only = argv[++a];
        else if (argv[a][0] == '-')
            usage();
        /* else: tests/run.sh passes the tests directory; nothing here needs it */
    }
    setvbuf(stdout, NULL, _IOLBF, 0);


    int major = 0, minor = 0;
    if (cg_nvrtc_version(&major, &minor) == CG_NVRTC_MISSING) {
        printf("SKIP  built without NVRTC (no CUDA toolkit): no cubin to run\n");
        return 77;
    }
    rt_cuda_found p;
    rt_cuda_probe(&p);
    if (!p.present || !p.count) {
        printf("SKIP  %s: the CUDA op test needs a GPU, or the driver double "
               "(tests/cuda_ops.sh runs it under build/tests/mock)\n", p.why);
        return 77;
    }
    printf("device: %s, sm_%d%d (%s); NVRTC %d.%d\n", p.name, p.major, p.minor,
           p.is_double ? "the driver DOUBLE" : "a real GPU", major, minor);
    if (!p.is_double)   /* a kernel that faults is named by the launcher's message */
        setenv("NNSC_CUDA_SYNC", "1", 0);
    if (p.is_double)
        printf("note: under the driver double every launch runs rtlib's scalar reference, the\n"
               "      same code as the comparison: the results are exact by construction, and\n"
               "      what is checked is the host side (argument packing, launch configurations,\n"
               "      bounds, the device state, uploads and downloads), not the CUDA kernels\n");

    /* the architectures: --arch, else the one the default build (sm_80,
       sm_90) would load on this device, else the device's own */
    const char *archs[8];
    int narch = 0;
    char archbuf[256], own[16];
    if (arch_arg) {
        snprintf(archbuf, sizeof archbuf, "%s", arch_arg);
        for (char *t = strtok(archbuf, ","); t && narch < 8; t = strtok(NULL, ","))
            archs[narch++] = t;
    } else {
        const rt_image defaults[2] = {{"sm_80", NULL, 0}, {"sm_90", NULL, 0}};
        int k = rt_cuda_pick_image(p.major, p.minor, defaults, 2);
        snprintf(own, sizeof own, "sm_%d%d", p.major, p.minor);
        archs[narch++] = k >= 0 ? defaults[k].arch : own;
    }

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ir_buf src = {0};
    build_source(&src);
    cg_cubin img[8];
    memset(img, 0, sizeof img);
    char err[16384];
    if (cg_nvrtc_compile(src.s, archs, narch, img, err, sizeof err) != CG_NVRTC_OK) {
        printf("FAIL  the kernel source (library and %d fused chains) does not compile:\n%s\n",
               NCHAIN, err);
        return 1;
    }
    ir_buf_free(&src);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rt_image images[8];
    for (int k = 0; k < narch; k++) {
        images[k] = (rt_image){img[k].arch, img[k].data, img[k].size};
        printf("cubin %s: %zu bytes%s%s\n", img[k].arch, img[k].size,
               img[k].log && img[k].log[0] ? "; NVRTC says:\n" : "",
               img[k].log ? img[k].log : "");
    }
    printf("compiled in %.1f s\n", (double)(t1.tv_sec - t0.tv_sec) +
                                       1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));

    arena_bytes = (int64_t)ARENA_MB << 20;
    ctx = rt_init_cuda_alone(argv[0], arena_bytes, images, narch);
    dev = rt_arena(ctx);
    atexit(at_exit_report);

    ops_elementwise();
    ops_cvt();
    ops_bias();
    ops_reductions();
    ops_xent_blocks();
    ops_optimizers();
    ops_embedding();
    ops_norm(0);
    ops_norm(1);
    ops_rope();
    ops_softmax();
    ops_mean();
    ops_transpose();
    ops_relpos();
    ops_attention();
    ops_slice_place();
    ops_matmul();
    ops_ew();

    /* the device-side error path, in children (after the parent's cases) */
    char images_path[64];
    snprintf(images_path, sizeof images_path, "/tmp/nnsc-cuda-ops-%d.img", (int)getpid());
    char self[4096];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    self[sl > 0 ? sl : 0] = 0;
    if (sl > 0 && !write_images(images_path, img, narch)) {
        test_bad_target(self, images_path, 0);
        test_bad_target(self, images_path, 1);
    } else {
        printf("FAIL  cannot write %s or find this program for the bad-target children\n",
               images_path);
        nfail++;
    }
    unlink(images_path);

    if (!only)
        check_coverage();
    print_summary();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    printf("%d passed, %d failed (%d cases in %.1f s after compiling; normalised MSE bound %g)\n",
           npass, nfail, tc_count, (double)(t0.tv_sec - t1.tv_sec) +
                                       1e-9 * (double)(t0.tv_nsec - t1.tv_nsec), BOUND);
    rt_finish(ctx);
    cg_cubin_free(img, narch);
    return nfail ? 1 : 0;
}
