/* mock_cuda.c -- a test double of the CUDA driver (libcuda.so.1) for machines
 * without a GPU, so that cuda-target rank executables run end to end in the
 * test suite (tests/cuda_mock.sh; docs/testing.md, "CUDA target without a
 * GPU").  Built, with mock_kernels.c (cubins, launch shapes, running the
 * references), as build/tests/mock/libcuda.so.1; a rank finds it with
 * LD_LIBRARY_PATH=build/tests/mock.  This file: the driver API, memory,
 * streams and the queue of stream work.
 *
 * It exports exactly the driver functions rtlib's CUDA backend may use (the
 * list of rtlib/cuda/cuda_drv.h), with the signatures of cuda.h (included, so the
 * compiler checks them; cuEventElapsedTime under both its names), plus
 * cuGetExportTable, which answers "not supported" to NVRTC's probe (below),
 * and three nnsc_mock_* hooks for the NCCL double (mock_nccl.c).  What it
 * models:
 *
 * - Devices: NNSC_MOCK_DEVICES (default 1) devices named "nnsc mock device",
 *   compute capability NNSC_MOCK_CC (default 9.0), NNSC_MOCK_MEM bytes each
 *   (default 80 GiB).  NNSC_MOCK_DEVICES=0: cuInit succeeds and the count is
 *   0; NNSC_MOCK_NODEV_INIT=1 makes cuInit itself fail with
 *   CUDA_ERROR_NO_DEVICE, as the real driver does when no GPU is visible.
 * - Device memory is host memory (a CUdeviceptr is the host address), but
 *   each allocation is its own mapping with a guard page after it, kept
 *   PROT_NONE whenever the double is not running device work: the host
 *   touching device memory directly crashes with a message naming the
 *   allocation, as it would on a GPU.  Freed allocations stay reserved, so a
 *   stale pointer is reported as "freed" instead of reaching new memory.
 *   NNSC_MOCK_PROTECT=0 turns the protection off.
 * - Every pointer argument is checked: copies and memsets must lie inside one
 *   live allocation of the current device; kernel buffers must lie inside one
 *   for the byte counts the kernel's integer arguments imply (rt_kernels.h),
 *   and be 4-byte aligned; the state and the workspace likewise.  Failures
 *   return CUDA_ERROR_INVALID_VALUE with a line on stderr saying what was
 *   wrong.
 * - Modules: cuModuleLoadData accepts only an ELF64 CUDA cubin (e_machine
 *   190) for the device's architecture (same major, minor not above the
 *   device's; else CUDA_ERROR_NO_BINARY_FOR_GPU); its kernel entry symbols
 *   are the functions cuModuleGetFunction finds, and their .nv.info sections
 *   give each kernel's __launch_bounds__ and parameter size.
 * - Launches: the one parameter is an rt_cuda_args (rtlib/rt_cuda_abi.h) of
 *   exactly the cubin's parameter size; the block must be the kernel's
 *   declared block (docs/cuda.md's table, checked against the cubin) and the
 *   grid what the table says for the fixed-grid kernels (grid-stride
 *   kernels: any grid of at least one block).  The kernel then runs as
 *   rtlib's SCALAR REFERENCE rt_ref_<name> (kernels_ref.c), never the fast
 *   CPU kernels the cpu target uses, on a private rt_ctx whose lr and
 *   gradient scales come from the rank's device state; gradclip writes the
 *   norm and scale back into the state, and a cross-entropy target outside
 *   [0, Vreal) is recorded in the state's err fields as the device kernels
 *   do.  nnsc_ew_<id> runs rt_ref_ew, nnsc_matmul_bf16 rt_ref_matmul_bf16, and
 *   nnsc_custom_<row> the rank's own C kernel of that custom section (the
 *   nnsc_custom_fns table a cuda build with custom ops exports).
 *   The tensor-core matmuls on 16-bit inputs (nnsc_matmul_tc_*) are not
 *   modelled (nothing launches them yet).
 * - Streams: work is queued in call order (one queue for all streams) and
 *   runs when the host must see it: cuStreamSynchronize, cuCtxSynchronize,
 *   cuEventSynchronize, a copy to or from pageable host memory (synchronous
 *   in the real driver), a free, an NCCL call.  Copies to and from pinned
 *   memory (cuMemAllocHost) are therefore as late as a GPU may make them: a
 *   host that reads a pinned buffer before synchronizing reads stale bytes.
 *   NNSC_MOCK_SYNC=1 runs everything at once instead.
 * - NNSC_MOCK_STATS=1: one line per process on stderr at exit, starting
 *   "nnsc-mock-cuda:", with the launches per kernel and the bytes copied.
 *
 * Errors of device work found when it runs (a grid reduction counter that is
 * not 0) make the context's error sticky (CUDA_ERROR_LAUNCH_FAILED from then
 * on), like a fault on a GPU.  Nothing here says anything about the device
 * kernels themselves: they never run (docs/testing.md lists what the double
 * can and cannot show).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "mock_cuda.h"

/* The hooks the NCCL double uses (mock_nccl.c declares the same). */
int nnsc_mock_enter(CUstream stream, const char *who);
int nnsc_mock_check(const void *p, uint64_t bytes, int dev, const char *what);
void nnsc_mock_leave(void);

#define MOCK_MAX_DEVICES 64            /* most devices NNSC_MOCK_DEVICES may ask for */
#define MOCK_ALIGN 256                 /* alignment of device allocations (as cuMemAlloc) */
#define MOCK_DRIVER_VERSION 13000      /* cuDriverGetVersion: CUDA 13.0 */
#define MOCK_SMEM_DEFAULT 49152        /* static + dynamic shared memory without opt-in */

/* ------------------------------------------------------------ error names */

/* The codes the double returns, with the real driver's name and text. */
static const struct mock_errname {
    CUresult code;      /* the code */
    const char *name;   /* cuGetErrorName */
    const char *text;   /* cuGetErrorString */
} mock_errnames[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    /* never returned, but rtlib names them (rtlib/cuda/cuda_drv.h) */
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
     "the provided PTX was compiled with an unsupported toolchain."},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_MISALIGNED_ADDRESS, "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* The row of code, or NULL for a code the double never returns. */
static const struct mock_errname *mock_errname_of(CUresult code)
{
    for (size_t k = 0; k < sizeof mock_errnames / sizeof mock_errnames[0]; k++)
        if (mock_errnames[k].code == code)
            return &mock_errnames[k];
    return NULL;
}

CUresult mock_fail(CUresult code, const char *who, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const struct mock_errname *e = mock_errname_of(code);
    fprintf(stderr, "nnsc mock cuda: %s: %s (%s)\n", who, msg, e ? e->name : "?");
    return code;
}

/* ------------------------------------------------------------ the state */

/* One device allocation (cuMemAlloc) or pinned host block (cuMemAllocHost). */
typedef struct mock_alloc {
    uintptr_t base;     /* the address handed out */
    uint64_t bytes;     /* the size asked for */
    char *map;          /* the mapping holding it (device memory) or the malloc block */
    size_t maplen;      /* the mapping's length, guard page excluded */
    int dev;            /* device ordinal (device memory); -1 for pinned host memory */
    int id;             /* allocation number, for messages (1, 2, ...) */
    int freed;          /* 1 after cuMemFree: the range stays reserved, PROT_NONE */
} mock_alloc;

/* The primary context of a device. */
struct CUctx_st {
    int dev;            /* its device */
    int refs;           /* cuDevicePrimaryCtxRetain count; 0: inactive */
};

/* A stream. */
struct CUstream_st {
    int dev;            /* its context's device */
    int live;           /* 0 after cuStreamDestroy */
};

/* An event. */
struct CUevent_st {
    unsigned flags;     /* cuEventCreate flags */
    int live;           /* 0 after cuEventDestroy */
    int recorded;       /* cuEventRecord was called (the record may still be queued) */
    int pending;        /* a record of it is queued, not yet run */
    double t;           /* monotonic seconds when the last record ran */
};

/* Everything the double knows; one per process. */
static struct {
    pthread_mutex_t mu;         /* held by every entry point */
    int inited;                 /* cuInit succeeded */
    int ndev;                   /* devices */
    int cc_major, cc_minor;     /* their compute capability */
    uint64_t total_mem;         /* bytes of memory per device */
    uint64_t used_mem[MOCK_MAX_DEVICES];   /* bytes allocated per device */
    int sync;                   /* NNSC_MOCK_SYNC=1: run stream work at once */
    int protect;                /* device memory PROT_NONE outside device work */
    int stats;                  /* NNSC_MOCK_STATS=1 */
    int used;                   /* a primary context was retained (the stats line is due) */
    struct CUctx_st ctx[MOCK_MAX_DEVICES];   /* primary contexts */
    mock_alloc *allocs;         /* every allocation ever made (freed ones stay) */
    int nalloc, capalloc;       /* how many, and room for */
    struct CUmod_st **mods;     /* every module ever loaded */
    int nmod, capmod;           /* how many, and room for */
    struct CUstream_st **streams;   /* every stream ever created */
    int nstream, capstream;     /* how many, and room for */
    struct CUevent_st **events;     /* every event ever created */
    int nevent, capevent;       /* how many, and room for */
    mock_op *q;                 /* queued stream work, in call order */
    int nq, capq;               /* how many, and room for */
    int access;                 /* depth of device-work sections (memory accessible) */
    CUresult sticky;            /* a fault found while running device work (sticky) */
    struct sigaction old_segv;  /* the SIGSEGV action before ours */
    /* statistics */
    int64_t launches[RT_KN_COUNT];  /* launches per kernel */
    int64_t launch_total;       /* all launches */
    int64_t bytes_htod, bytes_dtoh, bytes_dtod;   /* bytes copied */
    int64_t drains;             /* times the queue ran */
    int64_t max_queue;          /* longest queue */
    uint64_t peak_mem;          /* most device bytes allocated at once (all devices) */
} M = {.mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP};

/* The calling thread's current context (the driver's is per thread too). */
static __thread struct CUctx_st *mock_cur;

void mock_grow(void *p, int n, int *cap, size_t sz)
{
    void **pp = p;
    if (n < *cap)
        return;
    int nc = *cap ? 2 * *cap : 16;
    void *q = realloc(*pp, (size_t)nc * sz);
    if (!q) {
        fprintf(stderr, "nnsc mock cuda: out of host memory\n");
        abort();
    }
    *pp = q;
    *cap = nc;
}

/* Lock the double; every entry point pairs this with mock_unlock. */
static void mock_lock(void) { pthread_mutex_lock(&M.mu); }
static void mock_unlock(void) { pthread_mutex_unlock(&M.mu); }

/* Return code after unlocking (for `return mock_ret(...)`). */
static CUresult mock_ret(CUresult code)
{
    mock_unlock();
    return code;
}

/* Read a decimal environment variable into *v (kept when unset); 0, or -1
 * after a message when it is not a number in [lo, hi]. */
static int mock_env_int(const char *name, long long lo, long long hi, long long *v)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end || x < lo || x > hi) {
        fprintf(stderr, "nnsc mock cuda: %s=%s is not a whole number in [%lld, %lld]\n", name,
                s, lo, hi);
        return -1;
    }
    *v = x;
    return 0;
}

/* -------------------------------------------------- device memory access */

/* Make every live device allocation accessible (on = 1) or not (0). */
static void mock_protect_all(int on)
{
    if (!M.protect)
        return;
    for (int k = 0; k < M.nalloc; k++) {
        mock_alloc *a = &M.allocs[k];
        if (a->dev >= 0 && !a->freed)
            mprotect(a->map, a->maplen, on ? PROT_READ | PROT_WRITE : PROT_NONE);
    }
}

/* Begin / end a stretch of device work (nesting allowed). */
static void mock_access_begin(void)
{
    if (M.access++ == 0)
        mock_protect_all(1);
}

static void mock_access_end(void)
{
    if (--M.access == 0)
        mock_protect_all(0);
}

/* The allocation (live or freed, device or pinned) whose range holds p, or NULL. */
static mock_alloc *mock_alloc_at(uintptr_t p)
{
    for (int k = M.nalloc - 1; k >= 0; k--) {
        mock_alloc *a = &M.allocs[k];
        if (a->base && p >= a->base && p < a->base + (a->bytes ? a->bytes : 1))
            return a;
    }
    return NULL;
}

/* SIGSEGV: the host touched device memory (it is PROT_NONE outside device
 * work).  Say which allocation, then let the fault kill the process as it
 * would on a GPU system (the old action runs when the fault repeats). */
static void mock_segv(int sig, siginfo_t *si, void *uc)
{
    uintptr_t p = (uintptr_t)si->si_addr;
    for (int k = 0; k < M.nalloc; k++) {
        const mock_alloc *a = &M.allocs[k];
        if (a->dev < 0 || p < (uintptr_t)a->map || p >= (uintptr_t)a->map + a->maplen + 4096)
            continue;
        char msg[320];
        int n = snprintf(msg, sizeof msg,
                         "nnsc mock cuda: the host touched device memory at 0x%" PRIxPTR
                         " (%s device allocation #%d of %" PRIu64 " bytes, offset %" PRIdPTR
                         "): device memory is not host memory; copy it with cuMemcpy*\n",
                         p, a->freed ? "freed" : "live", a->id, a->bytes,
                         (intptr_t)(p - a->base));
        if (n > 0 && write(2, msg, (size_t)n) < 0) {
            /* nothing more to do: the process dies next */
        }
        break;
    }
    sigaction(SIGSEGV, &M.old_segv, NULL);
}

/* Check that [p, p + bytes) lies in one live allocation of device dev (any
 * device if dev < 0).  0, or -1 with the reason in why. */
static int mock_range(uintptr_t p, uint64_t bytes, int dev, char *why, size_t whylen)
{
    mock_alloc *a = mock_alloc_at(p);
    if (!a && bytes == 0) {   /* an empty range may sit at an allocation's end */
        for (int k = 0; k < M.nalloc; k++)
            if (!M.allocs[k].freed && M.allocs[k].dev >= 0 &&
                p == M.allocs[k].base + M.allocs[k].bytes)
                return 0;
    }
    if (!a) {
        snprintf(why, whylen, "0x%" PRIxPTR " is not device memory (no allocation holds it)",
                 p);
        return -1;
    }
    if (a->dev < 0) {
        snprintf(why, whylen, "0x%" PRIxPTR " is pinned host memory (cuMemAllocHost #%d), "
                              "not device memory", p, a->id);
        return -1;
    }
    if (a->freed) {
        snprintf(why, whylen, "0x%" PRIxPTR " is in device allocation #%d, freed already", p,
                 a->id);
        return -1;
    }
    if (dev >= 0 && a->dev != dev) {
        snprintf(why, whylen, "0x%" PRIxPTR " is memory of device %d, not of device %d", p,
                 a->dev, dev);
        return -1;
    }
    uint64_t off = p - a->base;
    if (bytes > a->bytes - off) {
        snprintf(why, whylen, "[0x%" PRIxPTR ", +%" PRIu64 ") runs %" PRIu64 " bytes past the "
                              "end of device allocation #%d (%" PRIu64 " bytes, this range "
                              "starts at offset %" PRIu64 ")",
                 p, bytes, bytes - (a->bytes - off), a->id, a->bytes, off);
        return -1;
    }
    return 0;
}

/* Whether host range [p, p + bytes) overlaps any device allocation (a
 * device pointer passed where a host one belongs). */
static const mock_alloc *mock_host_overlaps_dev(uintptr_t p, uint64_t bytes)
{
    for (int k = 0; k < M.nalloc; k++) {
        const mock_alloc *a = &M.allocs[k];
        if (a->dev >= 0 && p < a->base + a->bytes && a->base < p + (bytes ? bytes : 1))
            return a;
    }
    return NULL;
}

/* Whether host range [p, p + bytes) lies in a live pinned block. */
static int mock_is_pinned(uintptr_t p, uint64_t bytes)
{
    const mock_alloc *a = mock_alloc_at(p);
    return a && a->dev < 0 && !a->freed && bytes <= a->bytes - (p - a->base);
}

/* ---------------------------------------------------- handles, checks */

/* The current context, checked: CUDA_SUCCESS with *dev set, or the error. */
static CUresult mock_need_ctx(const char *who, int *dev)
{
    if (!M.inited)
        return mock_fail(CUDA_ERROR_NOT_INITIALIZED, who, "cuInit has not been called");
    if (!mock_cur)
        return mock_fail(CUDA_ERROR_INVALID_CONTEXT, who,
                         "no current context on this thread (cuCtxSetCurrent)");
    if (mock_cur->refs <= 0)
        return mock_fail(CUDA_ERROR_INVALID_CONTEXT, who,
                         "the current context (device %d) was released "
                         "(cuDevicePrimaryCtxRelease)", mock_cur->dev);
    if (M.sticky)
        return mock_fail(M.sticky, who, "an earlier fault in device work is sticky");
    *dev = mock_cur->dev;
    return CUDA_SUCCESS;
}

/* Whether s is NULL (the default stream) or a live stream of device dev. */
static int mock_stream_ok(CUstream s, int dev)
{
    if (!s)
        return 1;
    for (int k = 0; k < M.nstream; k++)
        if (M.streams[k] == s)
            return s->live && s->dev == dev;
    return 0;
}

/* Whether e is a live event. */
static int mock_event_ok(CUevent e)
{
    for (int k = 0; k < M.nevent; k++)
        if (M.events[k] == e)
            return e->live;
    return 0;
}

/* Whether f is a function of a loaded module. */
static int mock_func_ok(CUfunction f)
{
    for (int k = 0; k < M.nmod; k++) {
        struct CUmod_st *m = M.mods[k];
        if (f >= m->fn && f < m->fn + m->ne)
            return m->loaded;
    }
    return 0;
}

/* Run one queued operation (device memory is accessible). */
static void mock_run_op(mock_op *op)
{
    switch (op->kind) {
    case MOCK_OP_LAUNCH:
        if (!M.sticky)
            M.sticky = mock_run_launch(op);
        break;
    case MOCK_OP_COPY:
        memmove(op->dst, op->src, op->bytes);
        break;
    case MOCK_OP_MEMSET:
        memset(op->dst, op->val, op->bytes);
        break;
    case MOCK_OP_EVENT: {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        op->ev->t = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
        op->ev->pending--;
        break;
    }
    }
}

/* Run all queued work, in call order. */
static void mock_drain(void)
{
    if (!M.nq)
        return;
    M.drains++;
    mock_access_begin();
    for (int k = 0; k < M.nq; k++)
        mock_run_op(&M.q[k]);
    mock_access_end();
    M.nq = 0;
}

/* Queue op (or run it now under NNSC_MOCK_SYNC=1). */
static void mock_enqueue(const mock_op *op)
{
    if (M.sync) {
        mock_op tmp = *op;
        mock_access_begin();
        mock_run_op(&tmp);
        mock_access_end();
        return;
    }
    mock_grow(&M.q, M.nq, &M.capq, sizeof *M.q);
    M.q[M.nq++] = *op;
    if (M.nq > M.max_queue)
        M.max_queue = M.nq;
}

/* ---------------------------------------------------------- statistics */

/* NNSC_MOCK_STATS=1: one line at exit. */
__attribute__((destructor)) static void mock_stats_print(void)
{
    if (!M.stats || !M.used)   /* not for NVRTC's probe in nnsc-aot (cuGetExportTable) */
        return;
    static const char *const names[] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) #name,
#include "rt_kernels.h"
#undef RT_K
    };
    char line[4096];
    int len = snprintf(line, sizeof line, "nnsc-mock-cuda: pid=%d launches=%" PRId64 " kernels=",
                       (int)getpid(), M.launch_total);
    int first = 1;
    for (int k = 0; k < RT_KN_COUNT && len < (int)sizeof line - 64; k++)
        if (M.launches[k]) {
            len += snprintf(line + len, sizeof line - (size_t)len, "%s%s:%" PRId64,
                            first ? "" : ",", names[k], M.launches[k]);
            first = 0;
        }
    int live = 0;
    for (int k = 0; k < M.nalloc; k++)
        live += !M.allocs[k].freed;
    if (len < (int)sizeof line)
        snprintf(line + len, sizeof line - (size_t)len,
                 "%s htod=%" PRId64 " dtoh=%" PRId64 " dtod=%" PRId64 " drains=%" PRId64
                 " max_queue=%" PRId64 " peak_mem=%" PRIu64 " unfreed=%d sticky=%d",
                 first ? "-" : "", M.bytes_htod, M.bytes_dtoh, M.bytes_dtod, M.drains,
                 M.max_queue, M.peak_mem, live, (int)M.sticky);
    fprintf(stderr, "%s\n", line);
}

/* ===================================================== the driver API */

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    const struct mock_errname *e = mock_errname_of(error);
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = e ? e->name : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    const struct mock_errname *e = mock_errname_of(error);
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = e ? e->text : NULL;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = MOCK_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* Not for rtlib (which must not use it): NVRTC, inside nnsc-aot, opens
 * libcuda.so.1 too, calls cuInit and asks for the driver's private export
 * tables; answering "not supported" lets it compile as without a driver,
 * so that nnsc-aot (e.g. verify --target cuda) can run under
 * LD_LIBRARY_PATH=build/tests/mock.  Without this symbol NVRTC crashes. */
CUresult CUDAAPI cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (ppExportTable)
        *ppExportTable = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    mock_lock();
    if (Flags)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, "cuInit", "flags must be 0"));
    if (M.inited)
        return mock_ret(CUDA_SUCCESS);
    long long ndev = 1, mem = 80ll << 30, sync = 0, protect = 1, stats = 0, nodev_init = 0;
    if (mock_env_int("NNSC_MOCK_DEVICES", 0, MOCK_MAX_DEVICES, &ndev) ||
        mock_env_int("NNSC_MOCK_MEM", 1 << 20, 1ll << 50, &mem) ||
        mock_env_int("NNSC_MOCK_SYNC", 0, 1, &sync) ||
        mock_env_int("NNSC_MOCK_PROTECT", 0, 1, &protect) ||
        mock_env_int("NNSC_MOCK_STATS", 0, 1, &stats) ||
        mock_env_int("NNSC_MOCK_NODEV_INIT", 0, 1, &nodev_init))
        return mock_ret(CUDA_ERROR_UNKNOWN);
    int major = 9, minor = 0;
    const char *cc = getenv("NNSC_MOCK_CC");
    if (cc && *cc) {
        char tail;
        if (sscanf(cc, "%d.%d%c", &major, &minor, &tail) != 2 || major < 1 || major > 20 ||
            minor < 0 || minor > 9) {
            fprintf(stderr, "nnsc mock cuda: NNSC_MOCK_CC=%s is not a compute capability "
                            "like 9.0\n", cc);
            return mock_ret(CUDA_ERROR_UNKNOWN);
        }
    }
    M.stats = (int)stats;
    if (ndev == 0 && nodev_init)
        return mock_ret(CUDA_ERROR_NO_DEVICE);
    M.ndev = (int)ndev;
    M.cc_major = major;
    M.cc_minor = minor;
    M.total_mem = (uint64_t)mem;
    M.sync = (int)sync;
    M.protect = (int)protect;
    for (int d = 0; d < M.ndev; d++)
        M.ctx[d] = (struct CUctx_st){d, 0};
    if (M.protect) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = mock_segv;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &M.old_segv);
    }
    M.inited = 1;
    return mock_ret(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    if (!M.inited)
        return mock_fail(CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGetCount", "cuInit first");
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = M.ndev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!M.inited)
        return mock_fail(CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGet", "cuInit first");
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= M.ndev)
        return mock_fail(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet",
                         "ordinal %d, but there are %d devices", ordinal, M.ndev);
    *device = ordinal;
    return CUDA_SUCCESS;
}

/* Check a CUdevice argument. */
static CUresult mock_dev_ok(CUdevice dev, const char *who)
{
    if (!M.inited)
        return mock_fail(CUDA_ERROR_NOT_INITIALIZED, who, "cuInit first");
    if (dev < 0 || dev >= M.ndev)
        return mock_fail(CUDA_ERROR_INVALID_DEVICE, who, "device %d of %d", dev, M.ndev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult r = mock_dev_ok(dev, "cuDeviceGetAttribute");
    if (r)
        return r;
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    int sm9 = M.cc_major >= 9;
    switch ((int)attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *pi = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *pi = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *pi = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *pi = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *pi = MOCK_SMEM_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *pi = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *pi = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *pi = sm9 ? 1980000 : 1410000; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = sm9 ? 132 : 108; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *pi = CU_COMPUTEMODE_DEFAULT; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = 0x10 + dev; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *pi = sm9 ? 2619000 : 1593000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *pi = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *pi = sm9 ? 50331648 : 41943040; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *pi = 2048; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *pi = 2; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = M.cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = M.cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
        *pi = sm9 ? 233472 : 167936;
        break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *pi = 65536; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: *pi = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        *pi = sm9 ? 232448 : 166912;
        break;
    default:
        return mock_fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute",
                         "attribute %d is not modelled (add it to tests/mock/mock_cuda.c)",
                         (int)attrib);
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult r = mock_dev_ok(dev, "cuDeviceGetName");
    if (r)
        return r;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "nnsc mock device");
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
    CUresult r = mock_dev_ok(dev, "cuDeviceTotalMem_v2");
    if (r)
        return r;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = M.total_mem;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    mock_lock();
    CUresult r = mock_dev_ok(dev, "cuDevicePrimaryCtxRetain");
    if (r)
        return mock_ret(r);
    if (!pctx)
        return mock_ret(CUDA_ERROR_INVALID_VALUE);
    M.ctx[dev].refs++;
    M.used = 1;
    *pctx = &M.ctx[dev];
    return mock_ret(CUDA_SUCCESS);
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    mock_lock();
    CUresult r = mock_dev_ok(dev, "cuDevicePrimaryCtxRelease_v2");
    if (r)
        return mock_ret(r);
    if (M.ctx[dev].refs <= 0)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease_v2",
                                  "device %d's primary context is not retained", dev));
    if (--M.ctx[dev].refs == 0)
        mock_drain();   /* the context goes: its work finishes first */
    return mock_ret(CUDA_SUCCESS);
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    if (!M.inited)
        return mock_fail(CUDA_ERROR_NOT_INITIALIZED, "cuCtxSetCurrent", "cuInit first");
    if (ctx && (ctx < M.ctx || ctx >= M.ctx + M.ndev))
        return mock_fail(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent", "not a context");
    if (ctx && ctx->refs <= 0)
        return mock_fail(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent",
                         "device %d's primary context is not retained", ctx->dev);
    mock_cur = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuCtxSynchronize", &dev);
    if (r)
        return mock_ret(r);
    mock_drain();
    return mock_ret(M.sticky);
}

/* ------------------------------------------------------------ memory */

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuMemAlloc_v2", &dev);
    if (r)
        return mock_ret(r);
    if (!dptr || !bytesize)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc_v2",
                                  "%s", !dptr ? "dptr is NULL" : "0 bytes"));
    if (bytesize > M.total_mem - M.used_mem[dev])
        return mock_ret(mock_fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc_v2",
                                  "%zu bytes asked, %" PRIu64 " of %" PRIu64 " free", bytesize,
                                  M.total_mem - M.used_mem[dev], M.total_mem));
    /* the block ends (rounded to MOCK_ALIGN) just before a guard page */
    size_t page = 4096, span = (bytesize + MOCK_ALIGN - 1) / MOCK_ALIGN * MOCK_ALIGN;
    size_t maplen = (span + page - 1) / page * page;
    char *map = mmap(NULL, maplen + page, M.protect ? PROT_NONE : PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED)
        return mock_ret(mock_fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc_v2",
                                  "mmap of %zu bytes: %s", maplen, strerror(errno)));
    if (!M.protect)
        mprotect(map + maplen, page, PROT_NONE);   /* the guard page */
    else if (M.access)
        mprotect(map, maplen, PROT_READ | PROT_WRITE);
    mock_grow(&M.allocs, M.nalloc, &M.capalloc, sizeof *M.allocs);
    mock_alloc *a = &M.allocs[M.nalloc++];
    *a = (mock_alloc){(uintptr_t)(map + maplen - span), bytesize, map, maplen, dev, M.nalloc, 0};
    M.used_mem[dev] += bytesize;
    uint64_t total = 0;
    for (int d = 0; d < M.ndev; d++)
        total += M.used_mem[d];
    if (total > M.peak_mem)
        M.peak_mem = total;
    *dptr = (CUdeviceptr)a->base;
    return mock_ret(CUDA_SUCCESS);
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuMemFree_v2", &dev);
    if (r)
        return mock_ret(r);
    mock_alloc *a = mock_alloc_at((uintptr_t)dptr);
    if (!a || a->dev < 0 || a->base != (uintptr_t)dptr || a->freed)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, "cuMemFree_v2",
                                  "0x%llx is not the start of a live device allocation%s",
                                  (unsigned long long)dptr,
                                  a && a->freed ? " (freed already)" : ""));
    mock_drain();   /* cuMemFree waits for the device */
    a->freed = 1;
    M.used_mem[a->dev] -= a->bytes;
    madvise(a->map, a->maplen, MADV_DONTNEED);   /* give the pages back, keep the range */
    mprotect(a->map, a->maplen, PROT_NONE);
    return mock_ret(CUDA_SUCCESS);
}

CUresult CUDAAPI cuMemAllocHost(void **pp, size_t bytesize)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuMemAllocHost_v2", &dev);
    if (r)
        return mock_ret(r);
    if (!pp || !bytesize)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, "cuMemAllocHost_v2",
                                  "%s", !pp ? "pp is NULL" : "0 bytes"));
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytesize))
        return mock_ret(mock_fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAllocHost_v2",
                                  "%zu bytes", bytesize));
    mock_grow(&M.allocs, M.nalloc, &M.capalloc, sizeof *M.allocs);
    mock_alloc *a = &M.allocs[M.nalloc++];
    *a = (mock_alloc){(uintptr_t)p, bytesize, p, bytesize, -1, M.nalloc, 0};
    *pp = p;
    return mock_ret(CUDA_SUCCESS);
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuMemFreeHost", &dev);
    if (r)
        return mock_ret(r);
    mock_alloc *a = mock_alloc_at((uintptr_t)p);
    if (!a || a->dev >= 0 || a->base != (uintptr_t)p || a->freed)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, "cuMemFreeHost",
                                  "%p is not the start of a live cuMemAllocHost block", p));
    mock_drain();   /* queued copies may still use it */
    a->freed = 1;
    free(a->map);
    a->base = 0;   /* malloc may reuse the range: forget it */
    a->bytes = 0;
    return mock_ret(CUDA_SUCCESS);
}

/* Shared part of the three copies and the memset: check, then queue or run. */
static CUresult mock_copy(const char *who, int kind, void *dst, const void *src, uint64_t bytes,
                          unsigned char val, CUstream s)
{
    int dev;
    CUresult r = mock_need_ctx(who, &dev);
    if (r)
        return r;
    if (!mock_stream_ok(s, dev))
        return mock_fail(CUDA_ERROR_INVALID_HANDLE, who, "not a live stream of device %d", dev);
    char why[512];
    int pinned = 0;
    const mock_alloc *bad;
    /* kind: 0 HtoD, 1 DtoH, 2 DtoD, 3 memset */
    if (kind != 0 && mock_range((uintptr_t)(kind == 1 ? src : dst), bytes, dev, why, sizeof why))
        return mock_fail(CUDA_ERROR_INVALID_VALUE, who, "%s: %s",
                         kind == 1 ? "source" : "destination", why);
    if (kind == 0 && mock_range((uintptr_t)dst, bytes, dev, why, sizeof why))
        return mock_fail(CUDA_ERROR_INVALID_VALUE, who, "destination: %s", why);
    if (kind == 2 && mock_range((uintptr_t)src, bytes, dev, why, sizeof why))
        return mock_fail(CUDA_ERROR_INVALID_VALUE, who, "source: %s", why);
    if (kind <= 1) {
        const void *host = kind == 0 ? src : dst;
        if (!host)
            return mock_fail(CUDA_ERROR_INVALID_VALUE, who, "the host pointer is NULL");
        if ((bad = mock_host_overlaps_dev((uintptr_t)host, bytes)))
            return mock_fail(CUDA_ERROR_INVALID_VALUE, who,
                             "the host %s %p is device memory (allocation #%d)",
                             kind == 0 ? "source" : "destination", host, bad->id);
        pinned = mock_is_pinned((uintptr_t)host, bytes);
    }
    if (kind == 0)
        M.bytes_htod += (int64_t)bytes;
    else if (kind == 1)
        M.bytes_dtoh += (int64_t)bytes;
    else if (kind == 2)
        M.bytes_dtod += (int64_t)bytes;
    mock_op op = {.kind = kind == 3 ? MOCK_OP_MEMSET : MOCK_OP_COPY, .dst = dst, .src = src,
                  .bytes = bytes, .val = val};
    if (kind >= 2 || pinned) {   /* asynchronous for the host */
        mock_enqueue(&op);
    } else {   /* pageable host memory: the driver finishes the copy before returning */
        mock_drain();
        mock_access_begin();
        mock_run_op(&op);
        mock_access_end();
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                   CUstream hStream)
{
    mock_lock();
    return mock_ret(mock_copy("cuMemcpyHtoDAsync_v2", 0, (void *)(uintptr_t)dstDevice, srcHost,
                              ByteCount, 0, hStream));
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                   CUstream hStream)
{
    mock_lock();
    return mock_ret(mock_copy("cuMemcpyDtoHAsync_v2", 1, dstHost,
                              (const void *)(uintptr_t)srcDevice, ByteCount, 0, hStream));
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                   size_t ByteCount, CUstream hStream)
{
    mock_lock();
    return mock_ret(mock_copy("cuMemcpyDtoDAsync_v2", 2, (void *)(uintptr_t)dstDevice,
                              (const void *)(uintptr_t)srcDevice, ByteCount, 0, hStream));
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream)
{
    mock_lock();
    return mock_ret(mock_copy("cuMemsetD8Async", 3, (void *)(uintptr_t)dstDevice, NULL, N, uc,
                              hStream));
}

/* ------------------------------------------------------------ modules */

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuModuleLoadData", &dev);
    if (r)
        return mock_ret(r);
    if (!module || !image)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, "cuModuleLoadData",
                                  "NULL argument"));
    struct CUmod_st *m = calloc(1, sizeof *m);
    m->dev = dev;
    r = mock_parse_cubin(image, m);
    int dev_sm = M.cc_major * 10 + M.cc_minor;
    if (!r && (m->sm / 10 != M.cc_major || m->sm % 10 > M.cc_minor))
        r = mock_fail(CUDA_ERROR_NO_BINARY_FOR_GPU, "cuModuleLoadData",
                      "the cubin is for sm_%d, the device is sm_%d (a cubin runs on the same "
                      "major architecture with a minor version not above the device's)",
                      m->sm, dev_sm);
    if (r) {
        free(m->e);
        free(m);
        return mock_ret(r);
    }
    m->fn = calloc((size_t)m->ne, sizeof *m->fn);
    for (int k = 0; k < m->ne; k++)
        m->fn[k] = (struct CUfunc_st){m, &m->e[k], 0};
    m->loaded = 1;
    mock_grow(&M.mods, M.nmod, &M.capmod, sizeof *M.mods);
    M.mods[M.nmod++] = m;
    *module = m;
    return mock_ret(CUDA_SUCCESS);
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuModuleUnload", &dev);
    if (r)
        return mock_ret(r);
    for (int k = 0; k < M.nmod; k++)
        if (M.mods[k] == hmod && hmod->loaded) {
            mock_drain();
            hmod->loaded = 0;   /* the struct stays: old handles must stay invalid */
            return mock_ret(CUDA_SUCCESS);
        }
    return mock_ret(mock_fail(CUDA_ERROR_INVALID_HANDLE, "cuModuleUnload", "not a loaded module"));
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuModuleGetFunction", &dev);
    if (r)
        return mock_ret(r);
    int live = 0;
    for (int k = 0; k < M.nmod; k++)
        live |= M.mods[k] == hmod && hmod->loaded;
    if (!live || !hfunc || !name)
        return mock_ret(mock_fail(live ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE,
                                  "cuModuleGetFunction", "%s", live ? "NULL argument"
                                                                    : "not a loaded module"));
    for (int k = 0; k < hmod->ne; k++)
        if (!strcmp(hmod->e[k].name, name)) {
            *hfunc = &hmod->fn[k];
            return mock_ret(CUDA_SUCCESS);
        }
    return mock_ret(mock_fail(CUDA_ERROR_NOT_FOUND, "cuModuleGetFunction",
                              "the cubin has no kernel entry '%s'", name));
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuFuncSetAttribute", &dev);
    if (r)
        return mock_ret(r);
    if (!mock_func_ok(hfunc))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_HANDLE, "cuFuncSetAttribute",
                                  "not a function of a loaded module"));
    int optin = M.cc_major >= 9 ? 232448 : 166912;
    if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
        if (value < 0 || value + hfunc->e->static_smem > optin)
            return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, "cuFuncSetAttribute",
                                      "%d dynamic + %" PRId64 " static shared bytes exceed the "
                                      "device's %d", value, hfunc->e->static_smem, optin));
        hfunc->max_dyn_smem = value;
        return mock_ret(CUDA_SUCCESS);
    }
    if (attrib == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
        if (value < -1 || value > 100)
            return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, "cuFuncSetAttribute",
                                      "carveout %d outside [-1, 100]", value));
        return mock_ret(CUDA_SUCCESS);
    }
    return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, "cuFuncSetAttribute",
                              "attribute %d is read-only or not modelled", (int)attrib));
}

/* ------------------------------------------------------ streams, events */

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuStreamCreate", &dev);
    if (r)
        return mock_ret(r);
    if (!phStream || Flags > CU_STREAM_NON_BLOCKING)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, "cuStreamCreate",
                                  "NULL handle or bad flags %u", Flags));
    struct CUstream_st *s = calloc(1, sizeof *s);
    *s = (struct CUstream_st){dev, 1};
    mock_grow(&M.streams, M.nstream, &M.capstream, sizeof *M.streams);
    M.streams[M.nstream++] = s;
    *phStream = s;
    return mock_ret(CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuStreamDestroy_v2", &dev);
    if (r)
        return mock_ret(r);
    if (!hStream || !mock_stream_ok(hStream, dev))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_HANDLE, "cuStreamDestroy_v2",
                                  "not a live stream of device %d", dev));
    mock_drain();   /* its work still completes */
    hStream->live = 0;
    return mock_ret(CUDA_SUCCESS);
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuStreamSynchronize", &dev);
    if (r)
        return mock_ret(r);
    if (!mock_stream_ok(hStream, dev))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_HANDLE, "cuStreamSynchronize",
                                  "not a live stream of device %d", dev));
    mock_drain();
    return mock_ret(M.sticky);
}

CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuEventCreate", &dev);
    if (r)
        return mock_ret(r);
    if (!phEvent || Flags > 7)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, "cuEventCreate",
                                  "NULL handle or bad flags %u", Flags));
    struct CUevent_st *e = calloc(1, sizeof *e);
    e->flags = Flags;
    e->live = 1;
    mock_grow(&M.events, M.nevent, &M.capevent, sizeof *M.events);
    M.events[M.nevent++] = e;
    *phEvent = e;
    return mock_ret(CUDA_SUCCESS);
}

CUresult CUDAAPI cuEventDestroy(CUevent hEvent)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuEventDestroy_v2", &dev);
    if (r)
        return mock_ret(r);
    if (!mock_event_ok(hEvent))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_HANDLE, "cuEventDestroy_v2",
                                  "not a live event"));
    mock_drain();   /* a queued record of it must not touch a dead event */
    hEvent->live = 0;
    return mock_ret(CUDA_SUCCESS);
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuEventRecord", &dev);
    if (r)
        return mock_ret(r);
    if (!mock_event_ok(hEvent) || !mock_stream_ok(hStream, dev))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_HANDLE, "cuEventRecord",
                                  "not a live event, or not a live stream of device %d", dev));
    hEvent->recorded = 1;
    hEvent->pending++;
    mock_op op = {.kind = MOCK_OP_EVENT, .ev = hEvent};
    mock_enqueue(&op);
    return mock_ret(CUDA_SUCCESS);
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuEventSynchronize", &dev);
    if (r)
        return mock_ret(r);
    if (!mock_event_ok(hEvent))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_HANDLE, "cuEventSynchronize",
                                  "not a live event"));
    mock_drain();
    return mock_ret(M.sticky);
}

CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    mock_lock();
    int dev;
    CUresult r = mock_need_ctx("cuEventElapsedTime", &dev);
    if (r)
        return mock_ret(r);
    if (!pMilliseconds || !mock_event_ok(hStart) || !mock_event_ok(hEnd))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime",
                                  "not live events"));
    if ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime",
                                  "an event was created with CU_EVENT_DISABLE_TIMING"));
    if (!hStart->recorded || !hEnd->recorded)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime",
                                  "an event was never recorded"));
    if (hStart->pending || hEnd->pending)
        return mock_ret(CUDA_ERROR_NOT_READY);   /* not an error: the host asked too early */
    *pMilliseconds = (float)((hEnd->t - hStart->t) * 1e3);
    return mock_ret(CUDA_SUCCESS);
}

/* cuda.h (CUDA 13) maps cuEventElapsedTime to cuEventElapsedTime_v2, which
 * the definition above is; the driver also exports the old name, and so
 * does the double. */
#undef cuEventElapsedTime
CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

/* ------------------------------------------------------------ launches */

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream,
                                void **kernelParams, void **extra)
{
    mock_lock();
    int dev;
    char who[128] = "cuLaunchKernel";
    CUresult r = mock_need_ctx(who, &dev);
    if (r)
        return mock_ret(r);
    if (!mock_func_ok(f))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_HANDLE, who,
                                  "not a function of a loaded module"));
    const mock_entry *e = f->e;
    snprintf(who, sizeof who, "cuLaunchKernel(%s)", e->name);
    if (f->mod->dev != dev)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_HANDLE, who, "the module was loaded on "
                                  "device %d, the current context is device %d", f->mod->dev,
                                  dev));
    if (!mock_stream_ok(hStream, dev))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_HANDLE, who,
                                  "not a live stream of device %d", dev));
    /* the driver's own checks */
    if (!gridDimX || !gridDimY || !gridDimZ || gridDimY > 65535 || gridDimZ > 65535 ||
        gridDimX > 2147483647u)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "grid (%u, %u, %u) is empty "
                                  "or beyond the limits", gridDimX, gridDimY, gridDimZ));
    uint64_t threads = (uint64_t)blockDimX * blockDimY * blockDimZ;
    if (!threads || threads > 1024 || blockDimZ > 64)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "block (%u, %u, %u) is empty "
                                  "or beyond the limits", blockDimX, blockDimY, blockDimZ));
    if (e->max_threads && threads > (uint64_t)e->max_threads)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "block of %" PRIu64 " threads "
                                  "exceeds the kernel's __launch_bounds__ (%d)", threads,
                                  e->max_threads));
    int64_t smem_cap = f->max_dyn_smem ? f->max_dyn_smem : MOCK_SMEM_DEFAULT - e->static_smem;
    if ((int64_t)sharedMemBytes > smem_cap)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "%u bytes of dynamic shared "
                                  "memory, at most %" PRId64 " allowed", sharedMemBytes,
                                  smem_cap));
    if (extra)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "the double takes the "
                                  "arguments through kernelParams only (extra must be NULL)"));
    if (!kernelParams || !kernelParams[0])
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "kernelParams or its first "
                                  "element is NULL"));
    /* the project's contract: one rt_cuda_args, a modelled kernel, its block */
    if (e->param_bytes != (int)sizeof(rt_cuda_args))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "the kernel takes %d parameter "
                                  "bytes, not one rt_cuda_args (%zu)", e->param_bytes,
                                  sizeof(rt_cuda_args)));
    if (e->kernel < 0)
        return mock_ret(mock_fail(CUDA_ERROR_NOT_SUPPORTED, who, "the double has no reference "
                                  "for this kernel"));
    mock_op op = {.kind = MOCK_OP_LAUNCH, .fn = f};
    memcpy(&op.args, kernelParams[0], sizeof op.args);   /* copied now, as the driver does */
    mock_shape s;
    char why[512];
    if (mock_shape_of(e->kernel, e->ew_id, &op.args, &s, why, sizeof why))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "%s", why));
    if (e->max_threads && e->max_threads != s.block)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "the cubin declares "
                                  "__launch_bounds__(%d), the double's table (docs/cuda.md) "
                                  "%d: one of them is out of date", e->max_threads, s.block));
    if (blockDimX != (unsigned)s.block || blockDimY != 1 || blockDimZ != 1)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "block (%u, %u, %u), the "
                                  "kernel is written for (%d, 1, 1) (docs/cuda.md)", blockDimX,
                                  blockDimY, blockDimZ, s.block));
    if (gridDimZ != 1 || (s.grid != MOCK_GRID_FIXED && gridDimY != 1))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "grid (%u, %u, %u): the "
                                  "kernel uses a 1-D grid", gridDimX, gridDimY, gridDimZ));
    if (s.grid == MOCK_GRID_FIXED && (gridDimX != s.gx || gridDimY != s.gy))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "grid (%u, %u), docs/cuda.md's "
                                  "table gives (%" PRId64 ", %" PRId64 ") for these arguments",
                                  gridDimX, gridDimY, s.gx, s.gy));
    if (s.grid == MOCK_GRID_REDUCE && gridDimX > 1024)
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "a grid reduction of %u "
                                  "blocks (at most 1024)", gridDimX));
    /* every pointer: inside a live allocation of this device, aligned */
    for (int k = 0; k < RT_CUDA_MAXBUF; k++) {
        if (s.bytes[k] < 0)
            continue;
        uintptr_t p = (uintptr_t)op.args.b[k];
        if (p % 4 || mock_range(p, (uint64_t)s.bytes[k], dev, why, sizeof why))
            return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "b[%d] (%" PRId64 " bytes "
                                      "for these arguments): %s", k, s.bytes[k],
                                      p % 4 ? "not 4-byte aligned" : why));
    }
    if (op.args.st % 8 ||
        mock_range((uintptr_t)op.args.st, sizeof(rt_cuda_state), dev, why, sizeof why))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "st (the rank's state): %s",
                                  op.args.st % 8 ? "not 8-byte aligned" : why));
    if (s.ws_per_block &&
        (op.args.ws % 8 || mock_range((uintptr_t)op.args.ws, (uint64_t)s.ws_per_block * gridDimX,
                                      dev, why, sizeof why)))
        return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "ws (workspace for %u blocks): "
                                  "%s", gridDimX, op.args.ws % 8 ? "not 8-byte aligned" : why));
    if ((e->kernel == RT_KN_matmul || e->kernel == RT_KN_matmul_bf16) && op.args.i[1] > 0) {
        for (int k = 0; k < 2; k++)
            if (op.args.b[2] < op.args.b[k] + (uint64_t)s.bytes[k] &&
                op.args.b[k] < op.args.b[2] + (uint64_t)s.bytes[2])
                return mock_ret(mock_fail(CUDA_ERROR_INVALID_VALUE, who, "C overlaps %s",
                                          k ? "B" : "A"));
    }
    M.launches[e->kernel]++;
    M.launch_total++;
    mock_enqueue(&op);
    return mock_ret(CUDA_SUCCESS);
}

/* ------------------------------------------------- hooks for mock_nccl.c */

/* Before an NCCL call touches device memory: run the queued work (NCCL's
 * work comes after it on the stream) and make device memory accessible.
 * Returns the current context's device, -1 without one, -2 when stream is
 * not a live stream of it.  Pair with nnsc_mock_leave (even on failure). */
int nnsc_mock_enter(CUstream stream, const char *who)
{
    mock_lock();
    int dev = mock_cur && mock_cur->refs > 0 ? mock_cur->dev : -1;
    if (dev >= 0 && !mock_stream_ok(stream, dev))
        dev = -2;
    mock_drain();
    mock_access_begin();
    mock_unlock();
    return dev;
}

/* Whether [p, p + bytes) lies in one live allocation of device dev: 0, or
 * -1 after a message naming what (an NCCL argument). */
int nnsc_mock_check(const void *p, uint64_t bytes, int dev, const char *what)
{
    char why[512];
    mock_lock();
    int bad = mock_range((uintptr_t)p, bytes, dev, why, sizeof why);
    mock_unlock();
    if (bad)
        fprintf(stderr, "nnsc mock cuda: %s: %s\n", what, why);
    return bad ? -1 : 0;
}

/* After the NCCL call: device memory is inaccessible again. */
void nnsc_mock_leave(void)
{
    mock_lock();
    mock_access_end();
    mock_unlock();
}
