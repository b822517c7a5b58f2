/* mock_selftest.c -- checks the CUDA driver and NCCL test doubles
 * (tests/mock/mock_cuda.c, mock_nccl.c) themselves, before tests/cuda_mock.sh
 * trusts them with rank executables: that they compute what rtlib's scalar
 * references compute, and above all that they REFUSE what a GPU would not
 * survive (pointers outside allocations, the host touching device memory,
 * wrong launch configurations, cubins for another architecture, unsynchronized
 * reads of pinned memory, mismatched messages, duplicate devices, dead peers).
 *
 *     build/tests/mock/mock_selftest
 *
 * Loads the doubles with dlopen from its own directory (after compiling the
 * kernel library: NVRTC looks for libcuda.so.1 itself, and must not get the
 * double, so do not run this under LD_LIBRARY_PATH=build/tests/mock).  Needs
 * NVRTC for a real cubin (the kernel library for sm_80); without it prints
 * SKIP and exits 0 having checked nothing.  Prints one line per check and
 * "N passed, M failed".
 */
#define _GNU_SOURCE
/* the toolkit's cuda.h by its full path (CMake defines NNSC_TOOLKIT_CUDA_H): the name
   alone finds codegen/cuda.h, the compiler's header of the same name */
#include NNSC_TOOLKIT_CUDA_H
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <nccl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "codegen.h"
#include "cuda.h"
#include "rt_cuda_abi.h"
#include "rt_internal.h"

/* ------------------------------------------------- the doubles' symbols */

#define STR_(x) #x
#define STR(x) STR_(x)   /* the exported name: cuda.h maps cuMemAlloc to cuMemAlloc_v2 */

/* X-macro: every driver function the doubles export. */
#define CU_FUNCS(X)                                                                         \
    X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount) \
    X(cuDeviceGet) X(cuDeviceGetAttribute) X(cuDeviceGetName) X(cuDeviceTotalMem)           \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)             \
    X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)        \
    X(cuFuncSetAttribute) X(cuMemAlloc) X(cuMemFree) X(cuMemAllocHost) X(cuMemFreeHost)     \
    X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemsetD8Async)       \
    X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuEventCreate)            \
    X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime)          \
    X(cuLaunchKernel)

/* And every NCCL function. */
#define NCCL_FUNCS(X)                                                                        \
    X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommSplit)                \
    X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommGetAsyncError) X(ncclGetErrorString)       \
    X(ncclAllReduce) X(ncclAllGather) X(ncclReduceScatter) X(ncclBroadcast) X(ncclSend)      \
    X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd)

/* One pointer per function, named p_<name as written>. */
#define DECL(f) static __typeof__(&f) p_##f;
CU_FUNCS(DECL)
NCCL_FUNCS(DECL)
#undef DECL

/* Resolve every symbol (cu: the driver double, nc: the NCCL double);
 * returns how many are missing.  The names are the exported ones (STR
 * expands cuda.h's macros, as a caller compiled against cuda.h would). */
static int load_syms(void *cu, void *nc)
{
    int missing = 0;
    void *sym;
#define LOAD_CU(f)                                                    \
    sym = dlsym(cu, STR(f));                                          \
    memcpy(&p_##f, &sym, sizeof sym);                                 \
    if (!sym) {                                                       \
        printf("      missing symbol %s\n", STR(f));                  \
        missing++;                                                    \
    }
#define LOAD_NC(f)                                                    \
    sym = dlsym(nc, #f);                                              \
    memcpy(&p_##f, &sym, sizeof sym);                                 \
    if (!sym) {                                                       \
        printf("      missing symbol %s\n", #f);                      \
        missing++;                                                    \
    }
    CU_FUNCS(LOAD_CU)
    NCCL_FUNCS(LOAD_NC)
#undef LOAD_CU
#undef LOAD_NC
    /* the names of the brief's list where cuda.h 13 maps them to _v2 */
    if (!dlsym(cu, "cuEventElapsedTime")) {
        printf("      missing symbol cuEventElapsedTime\n");
        missing++;
    }
    return missing;
}

/* ------------------------------------------------------------ helpers */

static cg_cubin cubin80;   /* the kernel library for sm_80 */
static CUmodule mod;       /* it, loaded */
static CUdeviceptr st_dev; /* the state */
static CUdeviceptr ws_dev; /* a workspace */

/* Load the library and allocate the state and workspace on the current context. */
static CUresult setup_module(void)
{
    CUresult r = p_cuModuleLoadData(&mod, cubin80.data);
    if (r)
        return r;
    if ((r = p_cuMemAlloc(&st_dev, sizeof(rt_cuda_state))) || (r = p_cuMemAlloc(&ws_dev, 8192)))
        return r;
    rt_cuda_state st = {.lr_scale = 1.0, .grad_scale = 1.0f};
    return p_cuMemcpyHtoDAsync(st_dev, &st, sizeof st, NULL);
}

/* An rt_cuda_args with the state and workspace filled in. */
static rt_cuda_args args0(void)
{
    rt_cuda_args a;
    memset(&a, 0, sizeof a);
    a.st = st_dev;
    a.ws = ws_dev;
    return a;
}

/* Launch entry `name` with args a on grid gx x gy, block bx, the default stream. */
static CUresult launch(const char *name, rt_cuda_args *a, unsigned gx, unsigned gy, unsigned bx)
{
    CUfunction f;
    CUresult r = p_cuModuleGetFunction(&f, mod, name);
    if (r)
        return r;
    void *params[] = {a};
    return p_cuLaunchKernel(f, gx, gy, 1, bx, 1, 1, 0, NULL, params, NULL);
}

/* Upload n floats to a new allocation. */
static CUdeviceptr upload(const float *x, size_t n)
{
    CUdeviceptr d = 0;
    if (p_cuMemAlloc(&d, n * 4) || p_cuMemcpyHtoDAsync(d, x, n * 4, NULL))
        return 0;
    return d;
}

/* Run fn in a child process with the environment changes env ("NAME=VALUE",
 * NULL-terminated); returns its wait status.  The child's stderr goes to
 * errbuf (if not NULL). */
static int in_child(void (*fn)(void), const char *const *env, char *errbuf, size_t errlen)
{
    int pfd[2];
    if (pipe(pfd))
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        dup2(pfd[1], 2);
        for (int k = 0; env && env[k]; k++)
            putenv((char *)env[k]);
        fn();
        fflush(stdout);
        _exit(check_fail ? 1 : 0);
    }
    close(pfd[1]);
    size_t got = 0;
    ssize_t n;
    char sink[256];
    while ((n = read(pfd[0], errbuf && got + 1 < errlen ? errbuf + got : sink,
                     errbuf && got + 1 < errlen ? errlen - 1 - got : sizeof sink)) > 0)
        if (errbuf && got + 1 < errlen)
            got += (size_t)n;
    if (errbuf)
        errbuf[got] = 0;
    close(pfd[0]);
    int st;
    waitpid(pid, &st, 0);
    return st;
}

/* ------------------------------------------------------- driver checks */

/* Device queries and contexts (the parent: NNSC_MOCK_CC=8.6, 4 devices). */
static void test_driver_basics(void)
{
    CUdeviceptr d;
    CUresult r = p_cuMemAlloc(&d, 16);
    CHECK(r == CUDA_ERROR_NOT_INITIALIZED, "before cuInit: CUDA_ERROR_NOT_INITIALIZED (%d)", r);
    CHECK(p_cuInit(0) == CUDA_SUCCESS, "cuInit");
    int n = 0, major = 0, minor = 0, v = 0;
    char name[64];
    CHECK(!p_cuDeviceGetCount(&n) && n == 4, "NNSC_MOCK_DEVICES=4: %d devices", n);
    CHECK(!p_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0) &&
              !p_cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0) &&
              major == 8 && minor == 6,
          "NNSC_MOCK_CC=8.6: compute capability %d.%d", major, minor);
    CHECK(!p_cuDeviceGetName(name, sizeof name, 0) && !strcmp(name, "nnsc mock device"),
          "device name '%s'", name);
    CHECK(p_cuDeviceGet(&n, 4) == CUDA_ERROR_INVALID_DEVICE, "device 4 of 4 is invalid");
    CHECK(!p_cuDriverGetVersion(&v) && v >= 12000, "driver version %d", v);
    const char *s = NULL;
    CHECK(!p_cuGetErrorName(CUDA_ERROR_NO_BINARY_FOR_GPU, &s) &&
              !strcmp(s, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
          "cuGetErrorName: %s", s ? s : "(null)");
    CHECK(!p_cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &s) && !strcmp(s, "invalid argument"),
          "cuGetErrorString: %s", s ? s : "(null)");
    r = p_cuMemAlloc(&d, 16);
    CHECK(r == CUDA_ERROR_INVALID_CONTEXT, "no current context: CUDA_ERROR_INVALID_CONTEXT");
    CUcontext ctx;
    CUdevice dev;
    CHECK(!p_cuDeviceGet(&dev, 0) && !p_cuDevicePrimaryCtxRetain(&ctx, dev) &&
              !p_cuCtxSetCurrent(ctx),
          "device 0's primary context is current");
    static const unsigned char junk[64] = "not a cubin";
    CUmodule m;
    r = p_cuModuleLoadData(&m, junk);
    CHECK(r == CUDA_ERROR_INVALID_IMAGE, "a non-ELF image: CUDA_ERROR_INVALID_IMAGE (%d)", r);
    r = setup_module();
    CHECK(r == CUDA_SUCCESS, "the sm_80 cubin loads on an sm_86 device (%d)", r);
    CUfunction f;
    CHECK(!p_cuModuleGetFunction(&f, mod, "nnsc_matmul"), "cuModuleGetFunction nnsc_matmul");
    CHECK(p_cuModuleGetFunction(&f, mod, "nnsc_allreduce") == CUDA_ERROR_NOT_FOUND,
          "nnsc_allreduce (host side) is not in the cubin: CUDA_ERROR_NOT_FOUND");
}

/* The matmul through the double equals rt_ref_matmul, bit for bit; wrong
 * configurations and pointers are refused. */
static void test_matmul(void)
{
    enum { M = 70, K = 33, N = 65 };
    static float A[M * K], B[K * N], C[M * N], R[M * N];
    for (int k = 0; k < M * K; k++)
        A[k] = (float)((k * 37 % 101) - 50) / 50.0f;
    for (int k = 0; k < K * N; k++)
        B[k] = (float)((k * 53 % 97) - 48) / 48.0f;
    CUdeviceptr dA = upload(A, M * K), dB = upload(B, K * N), dC = upload(C, M * N);
    rt_cuda_args a = args0();
    a.b[0] = dA, a.b[1] = dB, a.b[2] = dC;
    a.i[0] = M, a.i[1] = K, a.i[2] = N;
    CHECK(launch("nnsc_matmul", &a, 2, 2, 256) == CUDA_SUCCESS, "matmul 70x33x65 on grid (2, 2)");
    CHECK(!p_cuMemcpyDtoHAsync(C, dC, sizeof C, NULL), "download C (pageable: synchronous)");
    void *b[3] = {A, B, R};
    int64_t i[6] = {M, K, N, 0, 0, 0};
    rt_ref_matmul(NULL, b, i, NULL);
    CHECK(!memcmp(C, R, sizeof C), "C equals rt_ref_matmul bit for bit");

    CHECK(launch("nnsc_matmul", &a, 1, 2, 256) == CUDA_ERROR_INVALID_VALUE,
          "grid (1, 2) for N = 65 is refused");
    CHECK(launch("nnsc_matmul", &a, 2, 2, 128) == CUDA_ERROR_INVALID_VALUE,
          "block 128 for a 256-thread kernel is refused");
    a.b[2] = dC + 4;
    CHECK(launch("nnsc_matmul", &a, 2, 2, 256) == CUDA_ERROR_INVALID_VALUE,
          "C one float past its allocation is refused");
    a.b[2] = (CUdeviceptr)(uintptr_t)C;
    CHECK(launch("nnsc_matmul", &a, 2, 2, 256) == CUDA_ERROR_INVALID_VALUE,
          "a host pointer as C is refused");
    a.b[2] = dC;
    a.st = 0;
    CHECK(launch("nnsc_matmul", &a, 2, 2, 256) == CUDA_ERROR_INVALID_VALUE,
          "a launch without the state is refused");
    a.st = st_dev;
    CUdeviceptr dBig;
    p_cuMemAlloc(&dBig, 4 * (M * K + M * N));
    a.b[0] = dBig, a.b[2] = dBig + 4 * (M * K - 10);   /* the last 10 floats of A */
    CHECK(launch("nnsc_matmul", &a, 2, 2, 256) == CUDA_ERROR_INVALID_VALUE,
          "C overlapping A (both inside one allocation) is refused");
    a.b[0] = dA;
    p_cuMemFree(dBig);
    CHECK(!p_cuMemFree(dB), "cuMemFree");
    a.b[1] = dB, a.b[2] = dC;
    CHECK(launch("nnsc_matmul", &a, 2, 2, 256) == CUDA_ERROR_INVALID_VALUE,
          "a freed buffer is refused");
    CHECK(p_cuMemFree(dB) == CUDA_ERROR_INVALID_VALUE, "a second cuMemFree is refused");
    CHECK(p_cuMemcpyHtoDAsync(dC + 4 * (M * N - 1), A, 8, NULL) == CUDA_ERROR_INVALID_VALUE,
          "a copy 4 bytes past the end is refused");
    p_cuMemFree(dA);
    p_cuMemFree(dC);
}

/* Pinned copies complete at synchronization, not before; the parameter is
 * copied at launch. */
static void test_async(void)
{
    enum { n = 3000 };
    static float g[n];
    for (int k = 0; k < n; k++)
        g[k] = (float)(k % 7) - 3.0f;
    CUdeviceptr dG = upload(g, n), dS;
    p_cuMemAlloc(&dS, 4);
    float *pin = NULL;
    CHECK(!p_cuMemAllocHost((void **)&pin, 64), "cuMemAllocHost");
    CUstream s;
    CHECK(!p_cuStreamCreate(&s, 0), "cuStreamCreate");
    rt_cuda_args a = args0();
    a.b[0] = dG, a.b[1] = dS, a.i[0] = n;
    CUfunction f;
    p_cuModuleGetFunction(&f, mod, "nnsc_sumsq");
    void *params[] = {&a};
    CUevent e0, e1;
    p_cuEventCreate(&e0, 0);
    p_cuEventCreate(&e1, 0);
    p_cuEventRecord(e0, s);
    CHECK(!p_cuLaunchKernel(f, 2, 1, 1, 256, 1, 1, 0, s, params, NULL), "sumsq launched");
    a.i[0] = 1;   /* too late: the launch copied the parameter */
    pin[0] = -1.0f;
    CHECK(!p_cuMemcpyDtoHAsync(pin, dS, 4, s), "pinned download queued");
    p_cuEventRecord(e1, s);
    float ms = 0;
    CHECK(p_cuEventElapsedTime(&ms, e0, e1) == CUDA_ERROR_NOT_READY,
          "events not reached yet: CUDA_ERROR_NOT_READY");
    CHECK(pin[0] == -1.0f, "before cuStreamSynchronize the pinned buffer is untouched (%g)",
          pin[0]);
    CHECK(!p_cuStreamSynchronize(s), "cuStreamSynchronize");
    double want = 0;
    for (int k = 0; k < n; k++)
        want += (double)g[k] * g[k];
    CHECK(pin[0] == (float)want, "after it: the sum of squares of all %d elements (%g)", n,
          pin[0]);
    CHECK(!p_cuEventElapsedTime(&ms, e0, e1) && ms >= 0, "cuEventElapsedTime %.3f ms", ms);
    p_cuEventDestroy(e0);
    p_cuEventDestroy(e1);
    CHECK(!p_cuStreamDestroy(s) && p_cuStreamSynchronize(s) == CUDA_ERROR_INVALID_HANDLE,
          "a destroyed stream is invalid");
    CHECK(!p_cuMemFreeHost(pin), "cuMemFreeHost");
    p_cuMemFree(dG);
    p_cuMemFree(dS);
}

/* The state: gradclip writes norm and scale, sgd reads them; xent records a
 * bad target; embedding_bwd keeps untouched rows. */
static void test_state(void)
{
    float s16 = 16.0f;
    CUdeviceptr dS = upload(&s16, 1);
    rt_cuda_args a = args0();
    a.b[0] = dS;
    a.f[0] = 1.0f;   /* max norm */
    CHECK(!launch("nnsc_gradclip", &a, 1, 1, 32), "gradclip launched (grid 1, block 32)");
    rt_cuda_state st;
    p_cuMemcpyDtoHAsync(&st, st_dev, sizeof st, NULL);
    CHECK(st.grad_norm == 4.0 && st.grad_scale == (float)(1.0 / (4.0 + 1e-6)),
          "gradclip wrote norm %g and scale %g into the state", st.grad_norm, st.grad_scale);
    st.lr_scale = 0.5;
    p_cuMemcpyHtoDAsync(st_dev, &st, sizeof st, NULL);
    float p[4] = {1, 2, 3, 4}, g[4] = {1, 1, -1, 2}, want[4];
    memcpy(want, p, sizeof p);
    CUdeviceptr dP = upload(p, 4), dG = upload(g, 4);
    a = args0();
    a.b[0] = dP, a.b[1] = dG, a.i[0] = 4, a.f[0] = 0.1f, a.f[1] = 0.01f;
    CHECK(!launch("nnsc_sgd", &a, 1, 1, 256), "sgd launched");
    p_cuMemcpyDtoHAsync(p, dP, sizeof p, NULL);
    rt_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.lr_scale = 0.5;
    ctx.grad_scale = st.grad_scale;
    void *b[2] = {want, g};
    int64_t i[1] = {4};
    rt_ref_sgd(&ctx, b, i, a.f);
    CHECK(!memcmp(p, want, sizeof p), "sgd used the state's lr scale and grad scale");

    /* xent_stats: 3 rows of 5 columns (1 block), Vreal = 4; row 1's target 4 is outside [0, 4) */
    float logits[15], stats[9];
    for (int k = 0; k < 15; k++)
        logits[k] = (float)k / 7.0f;
    int32_t tg[3] = {0, 4, 2};
    CUdeviceptr dX = upload(logits, 15), dT = upload((float *)tg, 3), dSt = upload(stats, 9);
    a = args0();
    a.b[0] = dX, a.b[1] = dT, a.b[2] = dSt, a.b[3] = dSt + 12, a.b[4] = dSt + 24;
    a.i[0] = 3, a.i[1] = 1, a.i[2] = 5, a.i[3] = 4, a.i[4] = 0;
    CHECK(!launch("nnsc_xent_stats", &a, 3, 1, 256), "xent_stats with a bad target launches");
    p_cuMemcpyDtoHAsync(&st, st_dev, sizeof st, NULL);
    CHECK(st.err == RT_CUDA_ERR_TARGET && st.err_a == 4 && st.err_b == 1,
          "the state records target 4 of row 1 (err %d, %lld, %lld)", st.err,
          (long long)st.err_a, (long long)st.err_b);
    a.i[3] = 0;
    CHECK(launch("nnsc_xent_stats", &a, 3, 1, 256) == CUDA_ERROR_INVALID_VALUE,
          "Vreal 0 is refused (the launcher's check)");

    /* embedding_bwd, acc 0: rows 0 and 2 of the table are touched by no token */
    float tab[6] = {7, 7, 7, 7, 7, 7}, dy[4] = {1, 2, 3, 4};
    int32_t tok[2] = {1, 1};
    CUdeviceptr dTab = upload(tab, 6), dTok = upload((float *)tok, 2), dDy = upload(dy, 4);
    a = args0();
    a.b[0] = dTok, a.b[1] = dDy, a.b[2] = dTab, a.i[0] = 2, a.i[1] = 0, a.i[2] = 3, a.i[3] = 2;
    CHECK(!launch("nnsc_embedding_bwd", &a, 2, 1, 256), "embedding_bwd launched (grid R = 2)");
    p_cuMemcpyDtoHAsync(tab, dTab, sizeof tab, NULL);
    CHECK(tab[0] == 7 && tab[1] == 7 && tab[2] == 4 && tab[3] == 6 && tab[4] == 7 && tab[5] == 7,
          "only the touched row is written, as on the device: %g %g | %g %g | %g %g", tab[0],
          tab[1], tab[2], tab[3], tab[4], tab[5]);
}

/* Child: the host reads device memory directly. */
static void child_touch(void)
{
    CUdeviceptr d;
    p_cuMemAlloc(&d, 64);
    volatile float *p = (float *)(uintptr_t)d;
    printf("      read %g\n", p[3]);   /* must not get here */
}

/* Child: a grid reduction starts with a non-zero counter; the fault is sticky. */
static void child_sticky(void)
{
    rt_cuda_state st = {.lr_scale = 1, .grad_scale = 1, .red_count = 5};
    p_cuMemcpyHtoDAsync(st_dev, &st, sizeof st, NULL);
    float g = 1;
    CUdeviceptr dG = upload(&g, 1);
    rt_cuda_args a = args0();
    a.b[0] = dG, a.b[1] = dG, a.i[0] = 1;
    launch("nnsc_sumsq", &a, 1, 1, 256);
    CUresult r1 = p_cuCtxSynchronize(), r2 = p_cuMemAlloc(&dG, 4);
    _exit(r1 == CUDA_ERROR_LAUNCH_FAILED && r2 == CUDA_ERROR_LAUNCH_FAILED ? 0 : 1);
}

/* Child with NNSC_MOCK_CC=9.0: the sm_80 cubin does not load. */
static void child_cc90(void)
{
    CUcontext ctx;
    CUmodule m;
    if (p_cuInit(0) || p_cuDevicePrimaryCtxRetain(&ctx, 0) || p_cuCtxSetCurrent(ctx))
        _exit(2);
    _exit(p_cuModuleLoadData(&m, cubin80.data) == CUDA_ERROR_NO_BINARY_FOR_GPU ? 0 : 1);
}

/* Children without devices. */
static void child_nodev(void)
{
    int n = -1;
    _exit(!p_cuInit(0) && !p_cuDeviceGetCount(&n) && n == 0 ? 0 : 1);
}

static void child_nodev_init(void)
{
    _exit(p_cuInit(0) == CUDA_ERROR_NO_DEVICE ? 0 : 1);
}

/* Fresh processes with other environments: run before this process calls
 * cuInit (the children inherit its state, and cuInit reads the environment). */
static void test_fresh(void)
{
    static const char *const cc90[] = {"NNSC_MOCK_CC=9.0", NULL};
    static const char *const nodev[] = {"NNSC_MOCK_DEVICES=0", NULL};
    static const char *const nodev_init[] = {"NNSC_MOCK_DEVICES=0", "NNSC_MOCK_NODEV_INIT=1",
                                             NULL};
    char err[2048];
    int st = in_child(child_cc90, cc90, err, sizeof err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(err, "sm_80"),
          "on an sm_90 device the sm_80 cubin gives CUDA_ERROR_NO_BINARY_FOR_GPU");
    st = in_child(child_nodev, nodev, NULL, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "NNSC_MOCK_DEVICES=0: cuInit ok, 0 devices");
    st = in_child(child_nodev_init, nodev_init, NULL, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "NNSC_MOCK_NODEV_INIT=1: cuInit gives CUDA_ERROR_NO_DEVICE");
}

/* Faults that must kill or poison a process, each in a child. */
static void test_faults(void)
{
    char err[2048];
    int st = in_child(child_touch, NULL, err, sizeof err);
    /* killed by SIGSEGV; under AddressSanitizer, whose handler takes the
       repeated fault, an exit with its report */
    CHECK(((WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV) ||
           (WIFEXITED(st) && WEXITSTATUS(st) != 0 && strstr(err, "AddressSanitizer"))) &&
              strstr(err, "the host touched device memory"),
          "the host reading device memory dies (SIGSEGV) and says why: %.*s",
          (int)strcspn(err, "\n"), err);
    st = in_child(child_sticky, NULL, err, sizeof err);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(err, "reduction counter"),
          "a grid reduction with a stale counter fails the next sync and stays failed");
}

/* --------------------------------------------------------- NCCL checks */

static ncclUniqueId nccl_id;   /* the id of the running NCCL test */
static int nccl_rank, nccl_world, nccl_dev;   /* this child's place and device */

/* This child's context on nccl_dev. */
static void nccl_ctx(void)
{
    CUcontext ctx;
    p_cuDevicePrimaryCtxRetain(&ctx, nccl_dev);
    p_cuCtxSetCurrent(ctx);
}

/* A deterministic value of element k on rank r. */
static float val(int r, size_t k)
{
    return (float)((k * 2654435761u + (size_t)r * 97) % 1000) / 7.0f - 50.0f;
}

/* Rank body of the 3-rank test: every collective, a split, a p2p ring. */
static void nccl_body3(void)
{
    nccl_ctx();
    ncclComm_t c = NULL;
    int r = nccl_rank, n = nccl_world;
    CHECK(!p_ncclCommInitRank(&c, n, nccl_id, r), "rank %d: ncclCommInitRank", r);
    if (!c)
        return;
    enum { big = 300000, ag = 1000, rs = 700, bc = 5000, ring = 100000 };
    float *h = malloc(sizeof(float) * big * 3), *w = malloc(sizeof(float) * big * 3);
    CUdeviceptr d, e;
    p_cuMemAlloc(&d, sizeof(float) * big * 3);
    p_cuMemAlloc(&e, sizeof(float) * big * 3);

    /* allreduce of 1.2 MB (more than one staging chunk), in place */
    for (size_t k = 0; k < big; k++)
        h[k] = val(r, k);
    p_cuMemcpyHtoDAsync(d, h, sizeof(float) * big, NULL);
    CHECK(!p_ncclAllReduce((void *)d, (void *)d, big, ncclFloat32, ncclSum, c, NULL),
          "rank %d: ncclAllReduce of %d floats", r, big);
    p_cuMemcpyDtoHAsync(h, d, sizeof(float) * big, NULL);
    int bad = 0;
    for (size_t k = 0; k < big; k++)
        bad += h[k] != (val(0, k) + val(1, k)) + val(2, k);
    CHECK(!bad, "rank %d: the sums in rank order, bit for bit (%d wrong)", r, bad);

    /* allgather */
    for (size_t k = 0; k < ag; k++)
        h[k] = val(r, k);
    p_cuMemcpyHtoDAsync(d, h, sizeof(float) * ag, NULL);
    CHECK(!p_ncclAllGather((void *)d, (void *)e, ag, ncclFloat32, c, NULL),
          "rank %d: ncclAllGather", r);
    p_cuMemcpyDtoHAsync(w, e, sizeof(float) * ag * 3, NULL);
    bad = 0;
    for (int q = 0; q < 3; q++)
        for (size_t k = 0; k < ag; k++)
            bad += w[q * ag + k] != val(q, k);
    CHECK(!bad, "rank %d: allgather in rank order", r);

    /* reducescatter */
    for (size_t k = 0; k < rs * 3; k++)
        h[k] = val(r, k);
    p_cuMemcpyHtoDAsync(d, h, sizeof(float) * rs * 3, NULL);
    CHECK(!p_ncclReduceScatter((void *)d, (void *)e, rs, ncclFloat32, ncclSum, c, NULL),
          "rank %d: ncclReduceScatter", r);
    p_cuMemcpyDtoHAsync(w, e, sizeof(float) * rs, NULL);
    bad = 0;
    for (size_t k = 0; k < rs; k++) {
        size_t at = (size_t)r * rs + k;
        bad += w[k] != (val(0, at) + val(1, at)) + val(2, at);
    }
    CHECK(!bad, "rank %d: reducescatter gives chunk %d of the sum", r, r);

    /* broadcast from rank 1 */
    for (size_t k = 0; k < bc; k++)
        h[k] = val(r, k);
    p_cuMemcpyHtoDAsync(d, h, sizeof(float) * bc, NULL);
    CHECK(!p_ncclBroadcast((void *)d, (void *)d, bc, ncclFloat32, 1, c, NULL),
          "rank %d: ncclBroadcast", r);
    p_cuMemcpyDtoHAsync(w, d, sizeof(float) * bc, NULL);
    bad = 0;
    for (size_t k = 0; k < bc; k++)
        bad += w[k] != val(1, k);
    CHECK(!bad, "rank %d: broadcast from rank 1", r);

    /* a ring in a group: 400 KB to the right (more than a ring buffer), from
       the left, and 10 floats to itself */
    for (size_t k = 0; k < ring; k++)
        h[k] = val(r, k);
    p_cuMemcpyHtoDAsync(d, h, sizeof(float) * ring, NULL);
    p_ncclGroupStart();
    p_ncclSend((void *)d, ring, ncclFloat32, (r + 1) % n, c, NULL);
    p_ncclRecv((void *)e, ring, ncclFloat32, (r + n - 1) % n, c, NULL);
    p_ncclSend((void *)d, 10, ncclFloat32, r, c, NULL);
    p_ncclRecv((void *)(e + 4 * ring), 10, ncclFloat32, r, c, NULL);
    CHECK(!p_ncclGroupEnd(), "rank %d: grouped send/recv ring and a send to itself", r);
    p_cuMemcpyDtoHAsync(w, e, sizeof(float) * (ring + 10), NULL);
    bad = 0;
    for (size_t k = 0; k < ring; k++)
        bad += w[k] != val((r + n - 1) % n, k);
    for (size_t k = 0; k < 10; k++)
        bad += w[ring + k] != val(r, k);
    CHECK(!bad, "rank %d: received the left neighbour's data and its own", r);

    /* split: ranks 0 and 1 with keys reversed, rank 2 out */
    ncclComm_t s = (ncclComm_t)1;
    CHECK(!p_ncclCommSplit(c, r == 2 ? NCCL_SPLIT_NOCOLOR : 0, -r, &s, NULL),
          "rank %d: ncclCommSplit", r);
    if (r == 2) {
        CHECK(s == NULL, "rank 2 (no color) gets no communicator");
    } else {
        float mine = (float)(10 + r);
        p_cuMemcpyHtoDAsync(d, &mine, 4, NULL);
        p_ncclAllGather((void *)d, (void *)e, 1, ncclFloat32, s, NULL);
        float got[2];
        p_cuMemcpyDtoHAsync(got, e, 8, NULL);
        CHECK(got[0] == 11 && got[1] == 10, "rank %d: the split orders by key (rank 1 first): "
                                            "%g %g", r, got[0], got[1]);
        p_ncclCommDestroy(s);
    }

    /* a host buffer is refused (every rank makes the same mistake: no hang) */
    CHECK(p_ncclAllReduce(h, h, 4, ncclFloat32, ncclSum, c, NULL) == ncclInvalidArgument,
          "rank %d: a host buffer is refused", r);
    ncclResult_t ae = ncclSuccess;
    p_ncclCommGetAsyncError(c, &ae);
    CHECK(ae == ncclInvalidArgument, "rank %d: and the communicator reports it", r);
    p_ncclCommDestroy(c);
    free(h);
    free(w);
}

/* Rank body: a receive of another size than the matching send. */
static void nccl_body_mismatch(void)
{
    nccl_ctx();
    ncclComm_t c = NULL;
    p_ncclCommInitRank(&c, 2, nccl_id, nccl_rank);
    CUdeviceptr d;
    p_cuMemAlloc(&d, 400);
    ncclResult_t r = nccl_rank == 0 ? p_ncclSend((void *)d, 10, ncclFloat32, 1, c, NULL)
                                    : p_ncclRecv((void *)d, 20, ncclFloat32, 0, c, NULL);
    if (nccl_rank == 1)
        CHECK(r == ncclInvalidUsage, "a receive of 20 floats from a send of 10 is refused");
    p_ncclCommDestroy(c);
}

/* Rank body: two ranks on one device. */
static void nccl_body_dup(void)
{
    nccl_dev = 0;
    nccl_ctx();
    ncclComm_t c = NULL;
    ncclResult_t r = p_ncclCommInitRank(&c, 2, nccl_id, nccl_rank);
    CHECK(r == ncclInvalidUsage && !c, "rank %d: two ranks on device 0 are refused", nccl_rank);
}

/* Rank body: rank 1 dies; rank 0's allreduce must fail soon, not hang. */
static void nccl_body_dead(void)
{
    nccl_ctx();
    ncclComm_t c = NULL;
    p_ncclCommInitRank(&c, 2, nccl_id, nccl_rank);
    if (nccl_rank == 1)
        _exit(0);
    CUdeviceptr d;
    p_cuMemAlloc(&d, 64);
    double t0 = (double)time(NULL);
    ncclResult_t r = p_ncclAllReduce((void *)d, (void *)d, 16, ncclFloat32, ncclSum, c, NULL);
    CHECK(r == ncclRemoteError && time(NULL) - t0 < 10,
          "a dead peer fails the allreduce with ncclRemoteError (%d), no hang", r);
    p_ncclCommAbort(c);
}

/* Run body on world child ranks (devices 0..world-1) with a fresh id;
 * returns how many children failed. */
static int nccl_run(void (*body)(void), int world)
{
    p_ncclGetUniqueId(&nccl_id);
    pid_t pids[8];
    fflush(stdout);
    for (int r = 0; r < world; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            nccl_rank = r;
            nccl_world = world;
            nccl_dev = r;
            alarm(60);
            body();
            fflush(stdout);
            _exit(check_fail ? 1 : 0);
        }
    }
    int failed = 0;
    for (int r = 0; r < world; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    return failed;
}

/* Whether /dev/shm still holds the segment of the last id. */
static int shm_left(void)
{
    DIR *d = opendir("/dev/shm");
    int left = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        left += !strncmp(e->d_name, nccl_id.internal, strlen(nccl_id.internal));
    if (d)
        closedir(d);
    return left;
}

static void test_nccl(void)
{
    int v = 0;
    CHECK(!p_ncclGetVersion(&v) && v == 22800, "ncclGetVersion %d", v);
    CHECK(!strcmp(p_ncclGetErrorString(ncclRemoteError),
                  "remote process exited or there was a network error"),
          "ncclGetErrorString");
    int f = nccl_run(nccl_body3, 3);
    CHECK(!f, "3 ranks: collectives, split and p2p (%d ranks failed)", f);
    CHECK(!shm_left(), "no shared-memory segment is left in /dev/shm");
    f = nccl_run(nccl_body_mismatch, 2);
    CHECK(!f, "mismatched message sizes are reported");
    f = nccl_run(nccl_body_dup, 2);
    CHECK(!f && !shm_left(), "duplicate devices are reported, and the segment is removed");
    f = nccl_run(nccl_body_dead, 2);
    CHECK(!f, "a dead peer is noticed");
}

int main(void)
{
    /* NVRTC first: it probes for libcuda.so.1 itself and must not find the double */
    ir_buf src = {0};
    cg_cuda_source(&src);
    const char *arch[] = {"sm_80"};
    char err[4096];
    int rc = cg_nvrtc_compile(src.s, arch, 1, &cubin80, err, sizeof err);
    ir_buf_free(&src);
    if (rc == CG_NVRTC_MISSING) {
        printf("SKIP  no NVRTC: no cubin to load, the doubles are not exercised\n");
        return 0;
    }
    CHECK(rc == CG_NVRTC_OK, "the kernel library compiles for sm_80%s%s", rc ? ": " : "",
          rc ? err : "");
    if (rc)
        return check_done();

    /* the doubles, from this program's directory (build/tests/mock) */
    char dir[4096], path[4200];
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    dir[n > 0 ? n : 0] = 0;
    *(strrchr(dir, '/') ? strrchr(dir, '/') : dir) = 0;
    setenv("NNSC_MOCK_CC", "8.6", 1);
    setenv("NNSC_MOCK_DEVICES", "4", 1);
    setenv("NNSC_TIMEOUT", "20", 1);
    unsetenv("NNSC_MOCK_SYNC");
    unsetenv("NNSC_MOCK_PROTECT");
    snprintf(path, sizeof path, "%s/libcuda.so.1", dir);
    void *cu = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    snprintf(path, sizeof path, "%s/libnccl.so.2", dir);
    void *nc = cu ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!cu || !nc) {
        printf("FAIL  cannot load the doubles from %s: %s\n", dir, dlerror());
        return 1;
    }
    CHECK(dlsym(cu, "nnsc_mock_enter") && dlsym(nc, "ncclAllReduce"),
          "loaded the doubles from %s", dir);
    CHECK(!load_syms(cu, nc), "every driver and NCCL function is exported under its real name");
    test_fresh();
    test_driver_basics();
    if (mod) {
        test_matmul();
        test_async();
        test_state();
        test_faults();
    }
    test_nccl();
    cg_cubin_free(&cubin80, 1);
    return check_done();
}
