/* test_rt_cuda.c -- rtlib's CUDA backend (rtlib/cuda/dev_cuda.c), what can be
 * checked without a GPU:
 *
 *   - rt_init_cuda with no driver on the library path: exit 2, "no CUDA
 *     driver", never the loader's message; with the toolkit's stub driver on
 *     LD_LIBRARY_PATH: exit 2, "the toolkit's stub" (each case re-executes
 *     this program, since the loader reads LD_LIBRARY_PATH at start-up);
 *   - the image choice for sm_80/86/89/90/100 against {sm_80, sm_90}, and
 *     arch-specific (sm_90a) and three-digit images;
 *   - the launch configurations of docs/cuda.md for sample shapes, the
 *     host-side refusals, and every block size against the kernel's
 *     __launch_bounds__ in codegen/cuda.c;
 *   - rtlib/cuda/cuda_drv.h's constants and function types against the toolkit's
 *     cuda.h, when the toolkit is installed.
 *
 * Running kernels needs a device or the test double of libcuda (tests/mock/).
 * Checks that cannot run here are printed as "skip", never counted as passed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The toolkit's cuda.h, when installed, to check cuda_drv.h against (it must
 * come first: cuda_drv.h then takes its types from it). */
#if __has_include("/usr/local/cuda/include/cuda.h")
#define HAVE_CUDA_H 1
#include "/usr/local/cuda/include/cuda.h"
#endif

#include "check.h"
#include "cuda/cuda_drv.h"
#include "rt_cuda_abi.h"
#include "rt_ew.h"
#include "rt_internal.h"

/* dev_cuda.c's internals shared with this test (documented there). */
extern int rt_cuda_pick_image(int major, int minor, const rt_image *images, int nimages);
extern int rt_cuda_launch_config(int kernel, void *const *b, const int64_t *i, unsigned *gx,
                                 unsigned *gy, unsigned *block, int64_t *ws, char *err,
                                 size_t errlen);

#define STUBS "/usr/local/cuda/lib64/stubs"   /* the toolkit's stub libcuda.so */

static const char *manifest =
    "nnsc-manifest 1\n"
    "model m\n"
    "rank 0 world 1\n"
    "arena 1024\n"
    "steps 1\n"
    "micro_batches 1\n"
    "seed 9\n"
    "lr 0.001\n"
    "group 0 1 0\n"
    "param 0 w f32 2 3 4 box 0 3 0 4 init normal 0.02 0 off 64 writer 1\n"
    "data -\n"
    "eval_data -\n"
    "eval_every 0\n"
    "eval_steps 1\n"
    "schedule constant warmup 0 min_lr_frac 0\n"
    "clip 0\n"
    "tokens_per_step 0\n"
    "input 0 x f32 2 2 3 dist normal period 1\n"
    "end\n";

/* ---- rt_init_cuda in a child */

/* The child's side (argv: self --child): start the cuda target. */
static int child_main(void)
{
    static const unsigned char img[4] = {0x7f, 'E', 'L', 'F'};
    const rt_image images[] = {{"sm_80", img, sizeof img}, {"sm_90", img, sizeof img}};
    char *argv[] = {"rank0", NULL};
    rt_ctx *ctx = rt_init_cuda(1, argv, manifest, images, 2);
    printf("initialised\n");
    return rt_finish(ctx);
}

/* What a child did. */
typedef struct result {
    int code;          /* exit status (-1 if killed) */
    char err[4096];    /* its stderr */
} result;

/* Run this program as a child (self --child) with LD_LIBRARY_PATH set to
 * libpath, or unset when NULL; stderr captured. */
static result run_child(const char *self, const char *libpath)
{
    static const char *const unset[] = {"NNSC_RANK", "NNSC_WORLD", "RANK", "WORLD_SIZE",
                                        "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
                                        "OMPI_COMM_WORLD_SIZE", "LOCAL_RANK", "NNSC_VERBOSE"};
    result r = {-1, ""};
    char pe[64];
    snprintf(pe, sizeof pe, "/tmp/rtcuda-%d.err", (int)getpid());
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen(pe, "w", stderr))
            _exit(99);
        for (size_t k = 0; k < sizeof unset / sizeof unset[0]; k++)
            unsetenv(unset[k]);
        if (libpath)
            setenv("LD_LIBRARY_PATH", libpath, 1);
        else
            unsetenv("LD_LIBRARY_PATH");
        execl(self, self, "--child", (char *)NULL);
        _exit(98);
    }
    int st;
    waitpid(pid, &st, 0);
    r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    FILE *f = fopen(pe, "r");
    size_t n = f ? fread(r.err, 1, sizeof r.err - 1, f) : 0;
    r.err[n] = 0;
    if (f)
        fclose(f);
    unlink(pe);
    return r;
}

/* Lines in s. */
static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* 1 if this process can load a libcuda by the names the backend tries
 * (a machine with a driver, or a libcuda.so on the default path). */
static int driver_present(void)
{
    const char *names[] = {"libcuda.so.1", "libcuda.so"};
    for (int k = 0; k < 2; k++) {
        void *h = dlopen(names[k], RTLD_LAZY | RTLD_LOCAL);
        if (h) {
            dlclose(h);
            return 1;
        }
    }
    return 0;
}

static void test_no_driver(const char *self)
{
    if (driver_present()) {
        printf("skip  no-driver message: a libcuda is on this machine's library path\n");
        return;
    }
    result r = run_child(self, NULL);
    int lines = count_lines(r.err);
    check(r.code == 2, "no libcuda: exit 2 (got %d)", r.code);
    check(strstr(r.err, "no CUDA driver: libcuda.so.1 not found") != NULL,
          "no libcuda: \"no CUDA driver: libcuda.so.1 not found\" (%s)", strtok(r.err, "\n"));
    check(!strstr(r.err, "cannot open shared object") && lines == 1,
          "no libcuda: one line (%d), not the loader's message", lines);
}

static void test_stub_driver(const char *self)
{
    struct stat st;
    if (stat(STUBS "/libcuda.so", &st) != 0) {
        printf("skip  stub-driver message: no %s/libcuda.so\n", STUBS);
        return;
    }
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (h) {
        dlclose(h);
        printf("skip  stub-driver message: a real libcuda.so.1 comes first on this machine\n");
        return;
    }
    result r = run_child(self, STUBS);
    int lines = count_lines(r.err);
    check(r.code == 2, "stub libcuda on LD_LIBRARY_PATH: exit 2 (got %d)", r.code);
    check(strstr(r.err, "the CUDA driver found is the toolkit's stub") && strstr(r.err, "stubs"),
          "stub libcuda: says it is the toolkit's stub and where (%s)", strtok(r.err, "\n"));
    check(lines == 1, "stub libcuda: one line (%d)", lines);
}

/* ---- the image choice */

static void test_pick_image(void)
{
    const rt_image two[] = {{"sm_80", NULL, 0}, {"sm_90", NULL, 0}};
    static const struct {
        int major, minor, want;
    } cases[] = {
        {8, 0, 0}, {8, 6, 0}, {8, 9, 0}, {9, 0, 1}, {10, 0, -1}, {7, 5, -1}, {12, 0, -1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int got = rt_cuda_pick_image(cases[k].major, cases[k].minor, two, 2);
        check(got == cases[k].want, "sm_%d%d against {sm_80, sm_90}: %s (got %d)",
              cases[k].major, cases[k].minor,
              cases[k].want < 0 ? "none" : two[cases[k].want].arch, got);
    }
    const rt_image minors[] = {{"sm_86", NULL, 0}, {"sm_80", NULL, 0}, {"sm_89", NULL, 0}};
    check(rt_cuda_pick_image(8, 6, minors, 3) == 0, "sm_86 device: the sm_86 image over sm_80");
    check(rt_cuda_pick_image(8, 9, minors, 3) == 2, "sm_89 device: the sm_89 image");
    check(rt_cuda_pick_image(8, 7, minors, 3) == 0, "sm_87 device: the highest minor below, sm_86");
    check(rt_cuda_pick_image(8, 0, minors + 2, 1) == -1, "sm_80 device: an sm_89 image does not run");
    const rt_image arch[] = {{"sm_90", NULL, 0}, {"sm_90a", NULL, 0}, {"sm_100", NULL, 0}};
    check(rt_cuda_pick_image(9, 0, arch, 3) == 1, "sm_90 device: sm_90a preferred to sm_90");
    check(rt_cuda_pick_image(9, 0, arch + 1, 1) == 0, "sm_90 device: sm_90a alone");
    check(rt_cuda_pick_image(10, 0, arch, 3) == 2, "sm_100 device: sm_100");
    check(rt_cuda_pick_image(10, 3, arch, 3) == 2, "sm_103 device: sm_100");
    const rt_image a89[] = {{"sm_80a", NULL, 0}};
    check(rt_cuda_pick_image(8, 6, a89, 1) == -1, "sm_86 device: sm_80a (arch-specific) does not run");
    const rt_image bad[] = {{"sm_8", NULL, 0}, {"compute_80", NULL, 0}, {NULL, NULL, 0},
                            {"sm_80x1", NULL, 0}, {"sm_80", NULL, 0}};
    check(rt_cuda_pick_image(8, 0, bad, 5) == 4, "malformed architecture names are passed over");
    check(rt_cuda_pick_image(8, 0, NULL, 0) == -1, "no images: none");
}

/* ---- launch configurations */

/* Kernel numbers and names, from rt_kernels.h. */
static const char *const knames[RT_KN_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) #name,
#include "rt_kernels.h"
#undef RT_K
};

/* One configuration: what rt_cuda_launch_config gave. */
typedef struct conf {
    int rc;                /* 1 launch, 0 skip, -1 refused */
    unsigned gx, gy, bs;   /* grid and block */
    int64_t ws;            /* workspace bytes */
    char err[320];         /* the refusal */
} conf;

/* The configuration of kernel k with ints i (b: buffers, may be dummies). */
static conf cfg(int k, void *const *b, const int64_t *i)
{
    conf c;
    memset(&c, 0, sizeof c);
    c.rc = rt_cuda_launch_config(k, b, i, &c.gx, &c.gy, &c.bs, &c.ws, c.err, sizeof c.err);
    return c;
}

/* Check a launch: rc 1, grid (gx, gy), block bs, workspace ws. */
static void expect(const char *what, conf c, unsigned gx, unsigned gy, unsigned bs, int64_t ws)
{
    check(c.rc == 1 && c.gx == gx && c.gy == gy && c.bs == bs && c.ws == ws,
          "%s: grid (%u, %u) block %u ws %lld (got rc %d, (%u, %u), %u, %lld%s%s)", what, gx, gy,
          bs, (long long)ws, c.rc, c.gx, c.gy, c.bs, (long long)c.ws, c.rc < 0 ? ": " : "",
          c.rc < 0 ? c.err : "");
}

/* Check a refusal whose message contains want. */
static void refused(const char *what, conf c, const char *want)
{
    check(c.rc == -1 && strstr(c.err, want), "%s: refused, \"%s\" (%s)", what, want, c.err);
}

static void test_launch_config(void)
{
    static float buf[64];
    void *b[10] = {buf, buf + 16, buf + 32, buf + 48, buf, buf, buf, buf, buf, buf};

    /* grid-stride kernels: min(ceil(n / 256), 65535) blocks of 256 */
    expect("zero n=1000", cfg(RT_KN_zero, b, (int64_t[]){1000}), 4, 1, 256, 0);
    expect("zero n=256*70000", cfg(RT_KN_zero, b, (int64_t[]){256LL * 70000}), 65535, 1, 256, 0);
    check(cfg(RT_KN_zero, b, (int64_t[]){0}).rc == 0, "zero n=0: skipped");
    refused("zero n=-1", cfg(RT_KN_zero, b, (int64_t[]){-1}), "negative");
    expect("bias_add M=3 N=100 (300 elements)", cfg(RT_KN_bias_add, b, (int64_t[]){3, 100}), 2,
           1, 256, 0);
    expect("add n=257", cfg(RT_KN_add, b, (int64_t[]){257, 0}), 2, 1, 256, 0);
    expect("relu n=256", cfg(RT_KN_relu, b, (int64_t[]){256}), 1, 1, 256, 0);
    expect("gelu_bwd n=513", cfg(RT_KN_gelu_bwd, b, (int64_t[]){513, 1}), 3, 1, 256, 0);
    expect("mse_bwd n=10", cfg(RT_KN_mse_bwd, b, (int64_t[]){10, 0}), 1, 1, 256, 0);
    expect("sgd n=1e6", cfg(RT_KN_sgd, b, (int64_t[]){1000000}), 3907, 1, 256, 0);
    expect("adamw n=5", cfg(RT_KN_adamw, b, (int64_t[]){5, 1}), 1, 1, 256, 0);
    expect("embedding R=3 C=100 (R*C elements)",
           cfg(RT_KN_embedding, b, (int64_t[]){3, 0, 50, 100, 0}), 2, 1, 256, 0);

    /* copy: equal or disjoint */
    void *same[2] = {buf, buf}, *apart[2] = {buf, buf + 4}, *part[2] = {buf, buf + 1};
    expect("copy X == Y", cfg(RT_KN_copy, same, (int64_t[]){4, 1}), 1, 1, 256, 0);
    expect("copy X, Y adjacent", cfg(RT_KN_copy, apart, (int64_t[]){4, 0}), 1, 1, 256, 0);
    refused("copy Y = X + 1, n = 4", cfg(RT_KN_copy, part, (int64_t[]){4, 0}), "overlap");
    void *back[2] = {buf + 3, buf};
    refused("copy X = Y + 3, n = 4", cfg(RT_KN_copy, back, (int64_t[]){4, 0}), "overlap");

    /* matmul: (ceil(N/64), ceil(M/64)) */
    expect("matmul M=100 K=7 N=130", cfg(RT_KN_matmul, b, (int64_t[]){100, 7, 130, 0, 1, 0}), 3,
           2, 256, 0);
    expect("matmul M=64 K=0 N=64 (C = 0)", cfg(RT_KN_matmul, b, (int64_t[]){64, 0, 64, 0, 0, 0}),
           1, 1, 256, 0);
    check(cfg(RT_KN_matmul, b, (int64_t[]){0, 5, 10, 0, 0, 0}).rc == 0, "matmul M=0: skipped");
    expect("matmul M=64*65535", cfg(RT_KN_matmul, b, (int64_t[]){64LL * 65535, 1, 1, 0, 0, 0}), 1,
           65535, 256, 0);
    refused("matmul M=64*65535+1",
            cfg(RT_KN_matmul, b, (int64_t[]){64LL * 65535 + 1, 1, 1, 0, 0, 0}), "M = ");

    /* column sums: ceil(N / 32), also with no rows */
    expect("bias_grad M=10 N=65", cfg(RT_KN_bias_grad, b, (int64_t[]){10, 65, 0}), 3, 1, 256, 0);
    expect("bias_grad M=0 N=65 (writes zeros)", cfg(RT_KN_bias_grad, b, (int64_t[]){0, 65, 0}),
           3, 1, 256, 0);
    expect("layernorm_wgrad R=0 C=33", cfg(RT_KN_layernorm_wgrad, b, (int64_t[]){0, 33, 0}), 2, 1,
           256, 0);

    /* scalar reductions: min(ceil(n / 2048), 1024) >= 1 blocks, a double each */
    expect("mse_loss n=5000", cfg(RT_KN_mse_loss, b, (int64_t[]){5000, 0}), 3, 1, 256, 24);
    expect("mse_loss n=0 acc=0 (writes 0)", cfg(RT_KN_mse_loss, b, (int64_t[]){0, 0}), 1, 1, 256,
           8);
    check(cfg(RT_KN_mse_loss, b, (int64_t[]){0, 1}).rc == 0, "mse_loss n=0 acc=1: skipped");
    expect("sumsq n=2048*5000", cfg(RT_KN_sumsq, b, (int64_t[]){2048LL * 5000, 1}), 1024, 1, 256,
           8192);
    expect("sumsq n=0 acc=0", cfg(RT_KN_sumsq, b, (int64_t[]){0, 0}), 1, 1, 256, 8);

    /* xent_loss: max(M, 1) blocks, M doubles of workspace; xent_stats, xent_vp_bwd: a block per
       row, Vreal >= 1 (the whole vocabulary's: may exceed the rank's columns) */
    expect("xent_loss M=5 K=4", cfg(RT_KN_xent_loss, b, (int64_t[]){5, 4, 0}), 5, 1, 256, 40);
    expect("xent_loss M=3000 (workspace 8 M)", cfg(RT_KN_xent_loss, b, (int64_t[]){3000, 64, 1}), 3000, 1,
           256, 24000);
    expect("xent_loss M=0 acc=0 (writes 0)", cfg(RT_KN_xent_loss, b, (int64_t[]){0, 4, 0}), 1, 1, 256, 8);
    check(cfg(RT_KN_xent_loss, b, (int64_t[]){0, 4, 1}).rc == 0, "xent_loss M=0 acc=1: skipped");
    expect("xent_stats M=5", cfg(RT_KN_xent_stats, b, (int64_t[]){5, 4, 8, 100, 32}), 5, 1, 256, 0);
    refused("xent_stats Vreal=0", cfg(RT_KN_xent_stats, b, (int64_t[]){5, 4, 8, 0, 0}), "Vreal 0 below 1");
    expect("xent_vp_bwd M=7", cfg(RT_KN_xent_vp_bwd, b, (int64_t[]){7, 10, 0, 9, 2, 0}), 7, 1, 256, 0);
    check(cfg(RT_KN_xent_vp_bwd, b, (int64_t[]){0, 10, 0, 9, 2, 0}).rc == 0, "xent_vp_bwd M=0: skipped");
    refused("xent_vp_bwd Vreal=0", cfg(RT_KN_xent_vp_bwd, b, (int64_t[]){7, 10, 0, 0, 2, 0}), "Vreal");

    /* rows kernels: a block per row */
    expect("layernorm R=4", cfg(RT_KN_layernorm, b, (int64_t[]){4, 768}), 4, 1, 256, 0);
    expect("layernorm_bwd R=9", cfg(RT_KN_layernorm_bwd, b, (int64_t[]){9, 8, 1}), 9, 1, 256, 0);
    expect("softmax_bwd R=2", cfg(RT_KN_softmax_bwd, b, (int64_t[]){2, 3, 0}), 2, 1, 256, 0);
    check(cfg(RT_KN_softmax, b, (int64_t[]){0, 5}).rc == 0, "softmax R=0: skipped");
    expect("embedding_bwd R=9", cfg(RT_KN_embedding_bwd, b, (int64_t[]){9, 0, 50, 16, 0}), 9, 1,
           256, 0);
    check(cfg(RT_KN_embedding_bwd, b, (int64_t[]){0, 0, 50, 16, 0}).rc == 0,
          "embedding_bwd R=0: skipped (the table is zeroed apart)");
    refused("layernorm R=2^31", cfg(RT_KN_layernorm, b, (int64_t[]){1LL << 31, 4}), "grid limit");

    /* gradclip: one warp */
    expect("gradclip", cfg(RT_KN_gradclip, b, (int64_t[]){0}), 1, 1, 32, 0);

    /* attention: a warp per (b, h, t), 4 warps per block */
    expect("attention B=2 T=5 H=3 D=64",
           cfg(RT_KN_attention, b, (int64_t[]){2, 5, 3, 64, 1, 3, 5, 0, 0, 3}), 8, 1, 128, 0);
    expect("attention_bwd B=1 T=4 H=1 D=256",
           cfg(RT_KN_attention_bwd, b, (int64_t[]){1, 4, 1, 256, 0, 1, 1, 4, 4, 0, 0, 1}), 1, 1, 128, 0);
    /* cross-attention's backward: a warp per (b, h, p), p < max(T, S) */
    expect("attention_bwd B=1 T=4 S=9 H=2 D=64",
           cfg(RT_KN_attention_bwd, b, (int64_t[]){1, 4, 2, 64, 0, 0, 2, 9, 9, 0, 0, 2}), 5, 1, 128, 0);
    check(cfg(RT_KN_attention, b, (int64_t[]){0, 5, 3, 64, 1, 3, 5, 0, 0, 3}).rc == 0, "attention B=0: skipped");
    refused("attention D=257", cfg(RT_KN_attention, b, (int64_t[]){1, 4, 1, 257, 1, 1, 4, 0, 0, 1}), "D = 257");
    refused("attention H=3 Hkv=2", cfg(RT_KN_attention, b, (int64_t[]){1, 4, 3, 64, 1, 2, 4, 0, 0, 3}), "Hkv 2");
    refused("attention causal with S != T", cfg(RT_KN_attention, b, (int64_t[]){1, 4, 1, 64, 1, 1, 6, 0, 0, 1}), "S 6");
    refused("attention no keys", cfg(RT_KN_attention, b, (int64_t[]){1, 4, 1, 64, 0, 1, 0, 0, 0, 1}), "S 0");
    refused("attention_bwd Hkv=0", cfg(RT_KN_attention_bwd, b, (int64_t[]){1, 4, 3, 64, 1, 0, 0, 4, 4, 0, 0, 3}), "Hkv 0");
    refused("attention_bwd causal=2", cfg(RT_KN_attention_bwd, b, (int64_t[]){1, 4, 1, 8, 2, 0, 1, 4, 4, 0, 0, 1}),
            "causal 2");
    refused("attention alibi = 2", cfg(RT_KN_attention, b, (int64_t[]){1, 4, 2, 64, 1, 2, 4, 2, 0, 2}), "alibi 2");
    refused("attention ALiBi heads past the layer's", cfg(RT_KN_attention, b, (int64_t[]){1, 4, 2, 64, 1, 2, 4, 1, 3, 4}),
            "alibi 1 3 4");
    refused("attention_bwd P != max(T, S)", cfg(RT_KN_attention_bwd, b, (int64_t[]){1, 4, 1, 8, 0, 0, 1, 9, 4, 0, 0, 1}),
            "S 9");

    /* slice / place: grid-stride over the box */
    expect("slice [1,3)x[0,6) of 4x6",
           cfg(RT_KN_slice, b, (int64_t[]){2, 0, 4, 1, 3, 6, 0, 6}), 1, 1, 256, 0);
    expect("place [0,300)x[0,2) of 300x4",
           cfg(RT_KN_place, b, (int64_t[]){2, 1, 300, 0, 300, 4, 0, 2}), 3, 1, 256, 0);
    expect("slice ndim 0 (one element)", cfg(RT_KN_slice, b, (int64_t[]){0, 0}), 1, 1, 256, 0);
    refused("slice ndim 9", cfg(RT_KN_slice, b, (int64_t[]){9, 0}), "ndim 9 outside [0, 8]");
    refused("place lo = hi", cfg(RT_KN_place, b, (int64_t[]){1, 0, 4, 2, 2}), "dim 0 range [2, 2)");
    refused("slice hi > extent", cfg(RT_KN_slice, b, (int64_t[]){1, 0, 4, 0, 5}), "outside [0, 4)");

    /* ew: grid-stride over n = i[1] */
    int64_t ew[RT_CUDA_MAXINT] = {3, 1000, 10, 2,
                                  RT_EW_ADD, RT_EW_REG + 0, RT_EW_MEM + 0, RT_EW_ROW + 1,
                                  RT_EW_GELU, RT_EW_ACC + 2, RT_EW_REG + 0, 0};
    expect("ew n=1000", cfg(RT_KN_ew, b, ew), 4, 1, 256, 0);
    ew[3] = RT_EW_MAXOPS + 1;
    refused("ew with too many ops", cfg(RT_KN_ew, b, ew), "ops, outside");
    ew[3] = 2;
    ew[8] = RT_EW_NOPS_KIND;
    refused("ew with an unknown op", cfg(RT_KN_ew, b, ew), "unknown op code");
    ew[8] = RT_EW_GELU;
    ew[9] = RT_EW_ROW + 0;
    refused("ew storing to a row broadcast", cfg(RT_KN_ew, b, ew), "bad dst operand");

    /* custom: row nin nout acc, then per operand ndim and extents; the grid strides over output 1 */
    int64_t cu[RT_CUDA_MAXINT] = {2, 1, 1, 0, 2, 3, 5, 1, 1000};
    conf cc = cfg(RT_KN_custom, b, cu);
    check(cc.rc == 1 && cc.bs == 256 && cc.gx == 4, "custom: output 1 of 1000 elements, grid %u x 256 (want 4)",
          cc.gx);
    cu[0] = 32;
    refused("custom of a section past the table", cfg(RT_KN_custom, b, cu), "outside [0, 32)");
    cu[0] = 2, cu[1] = 5, cu[2] = 5;
    refused("custom with 10 operands", cfg(RT_KN_custom, b, cu), "at most 9 operands");
    cu[1] = cu[2] = 1, cu[4] = 9;
    refused("custom with a rank of 9", cfg(RT_KN_custom, b, cu), "rank and extents do not fit");
    cu[4] = 2, cu[6] = -5;
    refused("custom with a negative extent", cfg(RT_KN_custom, b, cu), "bad extent");

    /* host-side and collective kernels have no launch */
    static const int host[] = {RT_KN_init_param, RT_KN_data, RT_KN_allreduce, RT_KN_allreduce_bf16, RT_KN_allgather,
                               RT_KN_reducescatter, RT_KN_reducescatter_bf16, RT_KN_broadcast, RT_KN_sendrecv,
                               RT_KN_alltoall, RT_KN_p2p, RT_KN_mark};
    int64_t ones[RT_CUDA_MAXINT];
    for (int k = 0; k < RT_CUDA_MAXINT; k++)
        ones[k] = 1;
    for (int k = 0; k < RT_KN_COUNT; k++) {
        int on_host = 0;
        for (size_t j = 0; j < sizeof host / sizeof host[0]; j++)
            on_host |= host[j] == k;
        conf c = cfg(k, b, ones);
        int says_host = c.rc == -1 && strstr(c.err, "does not run on the device");
        check(says_host == on_host, "%s %s on the device", knames[k],
              on_host ? "does not run" : "runs");
    }
    refused("kernel number -1", cfg(-1, b, ones), "kernel number");
    refused("kernel number RT_KN_COUNT", cfg(RT_KN_COUNT, b, ones), "kernel number");
}

/* ---- block sizes against codegen/cuda.c */

/* Read a whole file (NULL if it cannot). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = s ? fread(s, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!s)
        return NULL;
    s[got] = 0;
    return s;
}

/* The value of the thread bound `bound` of NNSC_KERNEL: a number, or a
 * macro #define'd to one in the CUDA source text src (-1: unknown). */
static long bound_value(const char *src, const char *bound, size_t len)
{
    char tok[64];
    if (len >= sizeof tok)
        return -1;
    memcpy(tok, bound, len);
    tok[len] = 0;
    char *end;
    long v = strtol(tok, &end, 10);
    if (end != tok && !*end)
        return v;
    char def[96];
    snprintf(def, sizeof def, "#define %s ", tok);
    const char *d = strstr(src, def);
    return d ? strtol(d + strlen(def), NULL, 10) : -1;
}

/* 1 if kernel k is made from a row of rt_ew.h (codegen/cuda.c prints it with
 * one format for all such rows). */
static int ew_made(int k)
{
#define EW_MADE(CODE, kernel, nsrc, acc, cpu, made, expr, ref) if (k == RT_KN_##kernel) return RT_EW_MADE_##made;
    RT_EW_OPS(EW_MADE)
#undef EW_MADE
    return 0;
}

/* Every device kernel's block size equals its __launch_bounds__, the second
 * argument of NNSC_KERNEL(nnsc_<name>, N) in codegen/cuda.c (the kernels
 * made from rt_ew.h's rows: its format "NNSC_KERNEL(nnsc_%s, N)"). */
static void test_launch_bounds(const char *tests_dir)
{
    char path[1200];
    snprintf(path, sizeof path, "%.1100s/../codegen/cuda.c", tests_dir);
    char *src = slurp(path);
    if (!src) {
        printf("skip  block sizes against codegen/cuda.c: cannot read %s\n", path);
        return;
    }
    static float buf[64];
    void *b[10] = {buf, buf + 16, buf + 32, buf + 48, buf, buf, buf, buf, buf, buf};
    int64_t i[RT_CUDA_MAXINT];
    for (int k = 0; k < RT_KN_COUNT; k++) {
        for (int j = 0; j < RT_CUDA_MAXINT; j++)
            i[j] = 1;
        if (k == RT_KN_slice || k == RT_KN_place) {   /* a valid 1-d box */
            i[2] = 4;
            i[3] = 0;
            i[4] = 4;
        }
        if (k == RT_KN_ew) {   /* one op: b1 = b0 */
            i[3] = 1;
            i[4] = RT_EW_COPY;
            i[5] = RT_EW_MEM + 1;
            i[6] = RT_EW_MEM + 0;
        }
        if (k == RT_KN_attention || k == RT_KN_attention_bwd || k == RT_KN_attention_vl ||
            k == RT_KN_attention_vl_bwd || k == RT_KN_attention_ab || k == RT_KN_attention_ab_bwd ||
            k == RT_KN_attention_dbias)   /* not causal, no ALiBi */
            i[4] = 0, i[k == RT_KN_attention || k == RT_KN_attention_vl || k == RT_KN_attention_ab ? 7 : 9] = 0;
        conf c = cfg(k, b, i);
        if (c.rc == -1 && strstr(c.err, "does not run on the device"))
            continue;
        char key[80];
        snprintf(key, sizeof key, k == RT_KN_ew ? "NNSC_KERNEL(nnsc_ew_%%d, " : k == RT_KN_custom ?
                 "NNSC_KERNEL(nnsc_custom_%%d, " : "NNSC_KERNEL(nnsc_%s, ", knames[k]);
        const char *at = strstr(src, key);
        if (!at && ew_made(k)) {   /* made from rt_ew.h's row: the generator's format */
            snprintf(key, sizeof key, "NNSC_KERNEL(nnsc_%%s, ");
            at = strstr(src, key);
        }
        long want = -1;
        if (at) {
            const char *v = at + strlen(key), *e = strchr(v, ')');
            want = e ? bound_value(src, v, (size_t)(e - v)) : -1;
        }
        check(c.rc == 1 && want > 0 && (long)c.bs == want,
              "%s: block %u is the kernel's __launch_bounds__ (%ld)", knames[k], c.bs, want);
    }
    free(src);
}

/* ---- cuda_drv.h against the toolkit's cuda.h */

static void test_driver_header(void)
{
#ifdef HAVE_CUDA_H
    int ok = 1;
#define CHK_VALUE(name, value)                                          \
    if ((long)(name) != (long)(value)) {                                \
        ok = 0;                                                         \
        printf("      %s is %ld in cuda.h, %ld in cuda_drv.h\n", #name, \
               (long)(name), (long)(value));                            \
    }
    CU_DRV_RESULTS(CHK_VALUE)
    CU_DRV_ATTRIBUTES(CHK_VALUE)
    CU_DRV_FUNC_ATTRIBUTES(CHK_VALUE)
    CU_DRV_FLAGS(CHK_VALUE)
#undef CHK_VALUE
    check(ok, "cuda_drv.h: every constant has cuda.h's value");
    ok = 1;
    int nfn = 0;
#define CHK_FN(name, params)                                                \
    nfn++;                                                                  \
    if (!__builtin_types_compatible_p(cu_fn_##name, __typeof__(&name))) {   \
        ok = 0;                                                             \
        printf("      %s: the type in cuda_drv.h differs from cuda.h's\n", #name); \
    }
    CU_DRV_FUNCS(CHK_FN)
#undef CHK_FN
    check(ok && nfn == 34, "cuda_drv.h: the %d driver functions have cuda.h's types", nfn);
    check(sizeof(CUdeviceptr) == 8 && sizeof(CUdevice) == sizeof(int),
          "CUdeviceptr is 64-bit, CUdevice an int");
#else
    printf("skip  cuda_drv.h against cuda.h: no /usr/local/cuda/include/cuda.h\n");
#endif
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--child"))
        return child_main();
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        printf("FAIL  cannot find this program (/proc/self/exe)\n");
        return 1;
    }
    self[n] = 0;
    /* the tests directory: tests/run.sh passes it; else this file's */
    char here[1024];
    snprintf(here, sizeof here, "%s", __FILE__);
    char *slash = strrchr(here, '/');
    if (slash)
        *slash = 0;
    const char *tests_dir = argc > 1 ? argv[1] : slash ? here : "tests";
    test_no_driver(self);
    test_stub_driver(self);
    test_pick_image();
    test_launch_config();
    test_launch_bounds(tests_dir);
    test_driver_header();
    return check_done();
}
