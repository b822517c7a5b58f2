/* mock_nccl.c -- a test double of NCCL (libnccl.so.2) for machines without
 * a GPU: the rank processes of one host exchange data through POSIX shared
 * memory, so that cuda-target ranks run their collectives for real in the
 * test suite (tests/cuda_mock.sh; docs/testing.md, "CUDA target without a
 * GPU").  Built as build/tests/mock/libnccl.so.2, next to the driver double
 * (mock_cuda.c), whose device memory it reads and writes.
 *
 * It exports exactly the NCCL functions rtlib's nccl.c may use, with the
 * signatures of nccl.h (included, so the compiler checks them):
 *
 * - ncclGetUniqueId: a random id; it names the communicator's shared-memory
 *   segment (/dev/shm/nnsc-mock-nccl-<hex>).  ncclCommInitRank maps it, checks
 *   that every rank agrees on the size and that no rank joins twice and no two
 *   ranks use the same device (NCCL's "Duplicate GPU detected"), waits for all
 *   ranks, and then rank 0 unlinks the name (nothing is left in /dev/shm once
 *   everyone has joined).  A current CUDA context is required (NCCL uses the
 *   current device).
 * - ncclCommSplit: collective over the parent; members with the same color
 *   form a communicator ordered by (key, parent rank); NCCL_SPLIT_NOCOLOR
 *   gives NULL.  Its segment's name is derived from the parent's, so no id
 *   has to travel.
 * - ncclAllReduce, ncclReduceScatter (float32 and bfloat16 sums), ncclAllGather,
 *   ncclBroadcast (any type): through per-rank staging slots in the segment
 *   with process-shared barriers, in chunks; sums are taken in rank order,
 *   so every rank gets bitwise the same result and runs are deterministic.
 * - ncclSend / ncclRecv: a byte ring per ordered pair of ranks; inside
 *   ncclGroupStart/End they are queued and progressed together at the
 *   outermost ncclGroupEnd, so pairwise exchanges, rings and sends to self
 *   cannot deadlock.  Each message carries its size: a receive of another
 *   size than the matching send is reported (ncclInvalidUsage).
 * - ncclCommDestroy, ncclCommAbort (peers waiting on it fail at once with
 *   ncclRemoteError), ncclCommGetAsyncError, ncclGetErrorString,
 *   ncclGetVersion (22800).
 *
 * Every buffer is checked against the driver double's allocations (device
 * memory of the communicator's device, large enough for the call), and the
 * driver double's queued stream work runs first (NCCL's work follows it on
 * the stream).  The stream argument is otherwise ignored: the call is
 * complete when it returns.  No wait lasts longer than NNSC_TIMEOUT seconds
 * (default 60), and a peer process that has died is noticed within a tenth
 * of a second: the call then fails with a message instead of hanging.
 * NNSC_MOCK_STATS=1 prints one line per process at exit, starting
 * "nnsc-mock-nccl:".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <nccl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MN_VERSION 22800            /* ncclGetVersion */
#define MN_MAX_RANKS 64             /* most ranks a communicator of the double may have */
#define MN_SEG_MAGIC 0x6e6e6363u    /* mn_seg.magic */
#define MN_ID_MAGIC "nnsc-mock-nccl"   /* the start of every unique id */
#define MN_SLOT_BYTES (1u << 20)    /* staging bytes per rank for the collectives */
#define MN_MSG_MAGIC 0x6d73676eu    /* the header of a point-to-point message */
#define MN_NAME_MAX 200             /* longest segment name */
#define MN_HEAD_BYTES 4096          /* mn_seg, rounded up: the slots and rings start aligned */

/* ------------------------------------------------------------- layout */

/* What a rank publishes in the segment. */
typedef struct mn_info {
    _Atomic int pid;    /* its process (0: not joined yet) */
    int dev;            /* its CUDA device */
    int color, key;     /* ncclCommSplit's arguments (valid between its barriers) */
} mn_info;

/* The head of a byte ring from one rank to another (the bytes follow). */
typedef struct mn_chan {
    _Atomic uint64_t head;   /* bytes the sender has written, in all */
    _Atomic uint64_t tail;   /* bytes the receiver has read, in all */
} mn_chan;

/* The start of a communicator's shared segment; after it (at MN_HEAD_BYTES)
 * come the staging slots (nranks * MN_SLOT_BYTES) and the rings (nranks^2 *
 * (64 + chan bytes)). */
typedef struct mn_seg {
    _Atomic uint32_t magic;         /* MN_SEG_MAGIC once set up */
    _Atomic int nranks;             /* ranks (the first to join sets it) */
    _Atomic uint32_t bar_count;     /* ranks in the running barrier */
    _Atomic uint32_t bar_gen;       /* barriers completed (futex word) */
    _Atomic int abort;              /* a rank called ncclCommAbort */
    _Atomic uint32_t bell[MN_MAX_RANKS];   /* per rank: bumped when a ring of it moves (futex) */
    mn_info info[MN_MAX_RANKS];     /* per rank */
} mn_seg;

/* One rank's communicator. */
struct ncclComm {
    char name[MN_NAME_MAX];     /* the segment's shm name */
    int nranks, rank;           /* size and this rank's place */
    int dev;                    /* this rank's device */
    int nsplit;                 /* ncclCommSplit calls so far (names the children) */
    mn_seg *seg;                /* the mapping */
    size_t seglen;              /* its length */
    size_t chan_bytes;          /* ring size per ordered pair */
    ncclResult_t async;         /* the first failure (ncclCommGetAsyncError) */
};

/* The driver double's hooks (mock_cuda.c); NULL when it is not loaded, and
 * then buffers are plain host memory, unchecked. */
static struct {
    int looked;                 /* tried already */
    int (*enter)(void *stream, const char *who);
    int (*check)(const void *p, uint64_t bytes, int dev, const char *what);
    void (*leave)(void);
} mn_cuda;

_Static_assert(sizeof(mn_seg) <= MN_HEAD_BYTES, "mn_seg outgrew its page");

/* Counters for NNSC_MOCK_STATS=1. */
static struct {
    long comms;                 /* communicators made */
    long calls[6];              /* allreduce, allgather, reducescatter, broadcast, send, recv */
    long long bytes[6];         /* their payload bytes (this rank's send side) */
    long groups;                /* outermost ncclGroupEnd calls */
} mn_stats;

/* ------------------------------------------------------------ helpers */

/* Print "nnsc mock nccl: <who>: <what>" and return code; remember it in
 * comm (may be NULL) for ncclCommGetAsyncError. */
static ncclResult_t mn_fail(ncclResult_t code, struct ncclComm *comm, const char *who,
                            const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static ncclResult_t mn_fail(ncclResult_t code, struct ncclComm *comm, const char *who,
                            const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "nnsc mock nccl: %s: %s\n", who, msg);
    if (comm && comm->async == ncclSuccess)
        comm->async = code;
    return code;
}

/* Monotonic seconds. */
static double mn_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds any wait may last: $NNSC_TIMEOUT, else 60. */
static double mn_timeout(void)
{
    const char *s = getenv("NNSC_TIMEOUT");
    char *end;
    double t = s && *s ? strtod(s, &end) : 60.0;
    return t > 0 ? t : 60.0;
}

/* Sleep on futex word w while it holds v, at most ms milliseconds. */
static void mn_futex_wait(_Atomic uint32_t *w, uint32_t v, long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ts, NULL, 0);
}

/* Wake every waiter on futex word w. */
static void mn_futex_wake(_Atomic uint32_t *w)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

/* Whether process pid is gone (or a zombie). */
static int mn_dead(int pid)
{
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) && errno == ESRCH)
        return 1;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

/* While waiting: 0 to go on, or the error when the wait must stop (a peer
 * aborted or died, or the deadline passed).  done(arg), when given, says
 * whether the wait is over after all: a peer that passed the barrier and
 * exited before this rank looked again is not a failure. */
static ncclResult_t mn_wait_ok(struct ncclComm *c, double deadline, const char *who,
                               double *next_check, int (*done)(const void *), const void *arg)
{
    if (atomic_load(&c->seg->abort))
        return mn_fail(ncclRemoteError, c, who, "a peer aborted the communicator");
    double now = mn_now();
    if (now >= *next_check) {
        *next_check = now + 0.1;
        for (int r = 0; r < c->nranks; r++)
            if (r != c->rank && mn_dead(atomic_load(&c->seg->info[r].pid)) && !(done && done(arg)))
                return mn_fail(ncclRemoteError, c, who, "rank %d (pid %d) of the communicator "
                               "has died", r, atomic_load(&c->seg->info[r].pid));
    }
    if (now > deadline)
        return mn_fail(ncclSystemError, c, who, "rank %d waited %.0f s for its peers "
                       "(NNSC_TIMEOUT)", c->rank, mn_timeout());
    return ncclSuccess;
}

/* A barrier being waited for: its segment and generation. */
typedef struct mn_bar_wait {
    mn_seg *g;       /* the communicator's segment */
    uint32_t gen;    /* the generation the barrier started in */
} mn_bar_wait;

/* The barrier waited for is over (mn_wait_ok's done). */
static int mn_barrier_done(const void *arg)
{
    const mn_bar_wait *w = arg;
    return atomic_load(&w->g->bar_gen) != w->gen;
}

/* A barrier over the communicator's ranks. */
static ncclResult_t mn_barrier(struct ncclComm *c, const char *who)
{
    mn_seg *g = c->seg;
    uint32_t gen = atomic_load(&g->bar_gen);
    if (atomic_fetch_add(&g->bar_count, 1) == (uint32_t)c->nranks - 1) {
        atomic_store(&g->bar_count, 0);
        atomic_fetch_add(&g->bar_gen, 1);
        mn_futex_wake(&g->bar_gen);
        return ncclSuccess;
    }
    double deadline = mn_now() + mn_timeout(), next = 0;
    while (atomic_load(&g->bar_gen) == gen) {
        mn_bar_wait w = {g, gen};
        ncclResult_t r = mn_wait_ok(c, deadline, who, &next, mn_barrier_done, &w);
        if (r)
            return r;
        mn_futex_wait(&g->bar_gen, gen, 50);
    }
    return ncclSuccess;
}

/* Staging slot of rank r. */
static char *mn_slot(struct ncclComm *c, int r)
{
    return (char *)c->seg + MN_HEAD_BYTES + (size_t)r * MN_SLOT_BYTES;
}

/* The ring from rank `from` to rank `to`, and its bytes. */
static mn_chan *mn_chan_of(struct ncclComm *c, int from, int to)
{
    char *base = (char *)c->seg + MN_HEAD_BYTES + (size_t)c->nranks * MN_SLOT_BYTES;
    return (mn_chan *)(base + ((size_t)from * c->nranks + to) * (64 + c->chan_bytes));
}

static char *mn_chan_data(struct ncclComm *c, mn_chan *ch)
{
    return (char *)ch + 64;
}

/* Bytes per element of t, or 0 for an unknown type. */
static size_t mn_type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

/* Find the driver double's hooks (once). */
static void mn_find_cuda(void)
{
    if (mn_cuda.looked)
        return;
    mn_cuda.looked = 1;
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return;
    *(void **)&mn_cuda.enter = dlsym(h, "nnsc_mock_enter");
    *(void **)&mn_cuda.check = dlsym(h, "nnsc_mock_check");
    *(void **)&mn_cuda.leave = dlsym(h, "nnsc_mock_leave");
    if (!mn_cuda.enter || !mn_cuda.check || !mn_cuda.leave)
        mn_cuda.enter = NULL;
}

/* Begin device work for a call on comm: the driver double's queue runs,
 * device memory opens, and the current device must be comm's.  Pair with
 * mn_end (also on failure). */
static ncclResult_t mn_begin(struct ncclComm *c, cudaStream_t stream, const char *who)
{
    mn_find_cuda();
    if (!mn_cuda.enter)
        return ncclSuccess;
    int dev = mn_cuda.enter(stream, who);
    if (dev == -1)
        return mn_fail(ncclInvalidUsage, c, who, "no current CUDA context");
    if (dev == -2)
        return mn_fail(ncclInvalidArgument, c, who, "the stream is not a live stream of the "
                       "current device");
    if (dev != c->dev)
        return mn_fail(ncclInvalidUsage, c, who, "the current device is %d, the "
                       "communicator's is %d", dev, c->dev);
    return ncclSuccess;
}

static void mn_end(void)
{
    if (mn_cuda.enter)
        mn_cuda.leave();
}

/* Check a buffer argument: bytes of device memory of comm's device. */
static ncclResult_t mn_buf(struct ncclComm *c, const void *p, uint64_t bytes, const char *who,
                           const char *arg)
{
    char what[160];
    mn_find_cuda();
    if (!mn_cuda.enter || !bytes)
        return ncclSuccess;
    snprintf(what, sizeof what, "%s %s (%" PRIu64 " bytes, rank %d of %d)", who, arg, bytes,
             c->rank, c->nranks);
    if (mn_cuda.check(p, bytes, c->dev, what))
        return mn_fail(ncclInvalidArgument, c, who, "bad %s buffer", arg);
    return ncclSuccess;
}

/* A usable communicator? */
static ncclResult_t mn_comm_ok(struct ncclComm *c, const char *who)
{
    if (!c || !c->seg)
        return mn_fail(ncclInvalidArgument, NULL, who, "NULL or destroyed communicator");
    if (c->async)
        return mn_fail(c->async, c, who, "the communicator failed earlier");
    return ncclSuccess;
}

/* ------------------------------------------------------- communicators */

/* Map segment `name` for nranks and take place `rank`; wait for everyone;
 * rank 0 then unlinks the name.  *out is the communicator, or NULL. */
static ncclResult_t mn_join(const char *name, int nranks, int rank, int dev,
                            struct ncclComm **out, const char *who)
{
    *out = NULL;
    if (nranks < 1 || nranks > MN_MAX_RANKS || rank < 0 || rank >= nranks)
        return mn_fail(ncclInvalidArgument, NULL, who, "rank %d of %d (the double supports 1 to "
                       "%d ranks)", rank, nranks, MN_MAX_RANKS);
    struct ncclComm *c = calloc(1, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->nranks = nranks;
    c->rank = rank;
    c->dev = dev;
    c->chan_bytes = nranks <= 8 ? (256u << 10) : (64u << 10);
    c->seglen = MN_HEAD_BYTES + (size_t)nranks * MN_SLOT_BYTES +
                (size_t)nranks * nranks * (64 + c->chan_bytes);
    int fd = shm_open(name, O_CREAT | O_RDWR, 0600);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) ||
        ((size_t)sb.st_size < c->seglen && ftruncate(fd, (off_t)c->seglen))) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        free(c);
        return mn_fail(ncclSystemError, NULL, who, "shared memory %s: %s", name, strerror(e));
    }
    c->seg = mmap(NULL, c->seglen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (c->seg == MAP_FAILED) {
        int e = errno;
        free(c);
        return mn_fail(ncclSystemError, NULL, who, "mapping %s: %s", name, strerror(e));
    }
    mn_seg *g = c->seg;
    int zero = 0, me = (int)getpid();
    atomic_compare_exchange_strong(&g->nranks, &zero, nranks);
    ncclResult_t r = ncclSuccess;
    if (atomic_load(&g->nranks) != nranks)
        r = mn_fail(ncclInvalidArgument, c, who, "rank %d says %d ranks, another said %d", rank,
                    nranks, atomic_load(&g->nranks));
    zero = 0;
    if (!r && !atomic_compare_exchange_strong(&g->info[rank].pid, &zero, me))
        r = mn_fail(ncclInvalidUsage, c, who, "rank %d joined twice (pids %d and %d)", rank,
                    zero, me);
    if (!r) {
        g->info[rank].dev = dev;
        r = mn_barrier(c, who);
    }
    for (int k = 0; !r && k < nranks; k++)
        if (k != rank && g->info[k].dev == dev)
            r = mn_fail(ncclInvalidUsage, c, who, "Duplicate GPU detected: rank %d and rank %d "
                        "both on CUDA device %d", rank, k, dev);
    if (!r)
        r = mn_barrier(c, who);   /* everyone has looked at info: the name may go */
    if (rank == 0)
        shm_unlink(name);
    if (r) {
        atomic_store(&g->abort, 1);
        munmap(c->seg, c->seglen);
        free(c);
        return r;
    }
    atomic_store(&g->magic, MN_SEG_MAGIC);
    mn_stats.comms++;
    *out = c;
    return ncclSuccess;
}

ncclResult_t ncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = MN_VERSION;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    if (!uniqueId)
        return mn_fail(ncclInvalidArgument, NULL, "ncclGetUniqueId", "NULL id");
    unsigned char rnd[12];
    if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return mn_fail(ncclSystemError, NULL, "ncclGetUniqueId", "getrandom: %s",
                       strerror(errno));
    memset(uniqueId, 0, sizeof *uniqueId);
    int n = snprintf(uniqueId->internal, sizeof uniqueId->internal, "%s-", MN_ID_MAGIC);
    for (size_t k = 0; k < sizeof rnd; k++)
        n += snprintf(uniqueId->internal + n, sizeof uniqueId->internal - (size_t)n, "%02x",
                      rnd[k]);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    const char *who = "ncclCommInitRank";
    if (!comm)
        return mn_fail(ncclInvalidArgument, NULL, who, "NULL comm");
    *comm = NULL;
    commId.internal[sizeof commId.internal - 1] = 0;
    if (strncmp(commId.internal, MN_ID_MAGIC "-", strlen(MN_ID_MAGIC) + 1) ||
        strlen(commId.internal) > 64 || strchr(commId.internal, '/'))
        return mn_fail(ncclInvalidArgument, NULL, who, "the unique id was not made by "
                       "ncclGetUniqueId of this double (or was damaged in transit)");
    mn_find_cuda();
    int dev = 0;
    if (mn_cuda.enter) {
        dev = mn_cuda.enter(NULL, who);
        mn_cuda.leave();
        if (dev < 0)
            return mn_fail(ncclInvalidUsage, NULL, who, "no current CUDA context "
                           "(cuCtxSetCurrent before ncclCommInitRank)");
    }
    char name[MN_NAME_MAX];
    snprintf(name, sizeof name, "/%s", commId.internal);
    return mn_join(name, nranks, rank, dev, comm, who);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config)
{
    const char *who = "ncclCommSplit";
    ncclResult_t r = mn_comm_ok(comm, who);
    if (r)
        return r;
    if (!newcomm || color < NCCL_SPLIT_NOCOLOR)
        return mn_fail(ncclInvalidArgument, comm, who, "NULL newcomm or color %d", color);
    *newcomm = NULL;
    mn_seg *g = comm->seg;
    g->info[comm->rank].color = color;
    g->info[comm->rank].key = key;
    if ((r = mn_barrier(comm, who)))
        return r;
    int n = 0, me = -1, colors[MN_MAX_RANKS], keys[MN_MAX_RANKS];
    for (int k = 0; k < comm->nranks; k++)
        colors[k] = g->info[k].color, keys[k] = g->info[k].key;
    if ((r = mn_barrier(comm, who)))   /* the info slots may be reused after this */
        return r;
    int split = comm->nsplit++;
    if (color == NCCL_SPLIT_NOCOLOR)
        return ncclSuccess;
    for (int k = 0; k < comm->nranks; k++) {
        if (colors[k] != color)
            continue;
        /* my place: members ordered by (key, parent rank) */
        if (keys[k] < key || (keys[k] == key && k < comm->rank))
            me++;
        n++;
    }
    me++;
    char name[MN_NAME_MAX];
    if (snprintf(name, sizeof name, "%s.%d.%d", comm->name, split, color) >= (int)sizeof name)
        return mn_fail(ncclInternalError, comm, who, "splits nested too deep for the double");
    return mn_join(name, n, me, comm->dev, newcomm, who);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm || !comm->seg)
        return mn_fail(ncclInvalidArgument, NULL, "ncclCommDestroy", "NULL communicator");
    munmap(comm->seg, comm->seglen);
    comm->seg = NULL;
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    if (!comm || !comm->seg)
        return ncclSuccess;   /* NCCL accepts NULL here */
    atomic_store(&comm->seg->abort, 1);
    mn_futex_wake(&comm->seg->bar_gen);
    for (int r = 0; r < comm->nranks; r++) {
        atomic_fetch_add(&comm->seg->bell[r], 1);
        mn_futex_wake(&comm->seg->bell[r]);
    }
    munmap(comm->seg, comm->seglen);
    comm->seg = NULL;
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!comm || !comm->seg || !asyncError)
        return mn_fail(ncclInvalidArgument, NULL, "ncclCommGetAsyncError", "NULL argument");
    if (!comm->async && atomic_load(&comm->seg->abort))
        comm->async = ncclRemoteError;
    *asyncError = comm->async;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

/* --------------------------------------------------------- collectives */

/* The kinds of operation, for the group queue and the counters. */
enum { MN_ALLREDUCE, MN_ALLGATHER, MN_REDUCESCATTER, MN_BROADCAST, MN_SEND, MN_RECV };

/* One call (queued inside a group, or run at once). */
typedef struct mn_call {
    int kind;                   /* MN_* */
    struct ncclComm *comm;      /* the communicator */
    const void *send;           /* send buffer (NULL for a receive) */
    void *recv;                 /* receive buffer (NULL for a send) */
    uint64_t count;             /* elements (per rank for allgather / reducescatter) */
    size_t esize;               /* bytes per element */
    int root;                   /* broadcast: the root; send / recv: the peer */
    cudaStream_t stream;        /* the stream (checked, otherwise ignored) */
    /* point-to-point progress */
    int hdr;                    /* the message header has been written / read */
    uint64_t done;              /* payload bytes moved */
} mn_call;

/* The calling thread's group: depth and queued calls. */
static __thread int mn_depth;
static __thread mn_call *mn_q;
static __thread int mn_nq, mn_capq;

/* Run a collective (device memory is accessible).  Chunks fill the staging
 * slots; two barriers per chunk (deposit, then everyone has read). */
static ncclResult_t mn_collective(mn_call *x, const char *who)
{
    struct ncclComm *c = x->comm;
    int n = c->nranks, me = c->rank;
    ncclResult_t r = ncclSuccess;
    uint64_t bytes = x->count * x->esize;   /* per rank */
    uint64_t chunk = x->kind == MN_REDUCESCATTER ? MN_SLOT_BYTES / (unsigned)n / 4 * 4
                                                 : MN_SLOT_BYTES;
    for (uint64_t off = 0; !r && (off < bytes || (off == 0 && bytes == 0)); off += chunk) {
        uint64_t len = bytes - off < chunk ? bytes - off : chunk;
        char *mine = mn_slot(c, me);
        /* deposit */
        if (x->kind == MN_REDUCESCATTER) {
            for (int k = 0; k < n; k++)
                memcpy(mine + (size_t)k * len, (const char *)x->send + k * bytes + off, len);
        } else if (x->kind != MN_BROADCAST || me == x->root) {
            memcpy(mine, (const char *)x->send + off, len);
        }
        if ((r = mn_barrier(c, who)))
            break;
        /* combine */
        switch (x->kind) {
        case MN_ALLREDUCE:
        case MN_REDUCESCATTER: {
            size_t at = x->kind == MN_REDUCESCATTER ? (size_t)me * len : 0;
            if (x->esize == 2) {   /* bfloat16 */
                uint16_t *out = (uint16_t *)((char *)x->recv + off);
                for (uint64_t j = 0; j < len / 2; j++) {
                    float s = 0;
                    for (int k = 0; k < n; k++) {
                        uint32_t u = (uint32_t)((const uint16_t *)(mn_slot(c, k) + at))[j] << 16;
                        float v;
                        memcpy(&v, &u, 4);
                        s = k ? s + v : v;
                    }
                    uint32_t u;
                    memcpy(&u, &s, 4);
                    if ((u & 0x7fffffffu) > 0x7f800000u) u |= 0x00400000u;
                    else u += 0x7fffu + ((u >> 16) & 1u);
                    out[j] = (uint16_t)(u >> 16);
                }
                break;
            }
            float *out = (float *)((char *)x->recv + off);
            for (uint64_t j = 0; j < len / 4; j++) {
                float s = ((const float *)(mn_slot(c, 0) + at))[j];
                for (int k = 1; k < n; k++)   /* in rank order: the same bits everywhere */
                    s += ((const float *)(mn_slot(c, k) + at))[j];
                out[j] = s;
            }
            break;
        }
        case MN_ALLGATHER:
            for (int k = 0; k < n; k++)
                memcpy((char *)x->recv + k * bytes + off, mn_slot(c, k), len);
            break;
        case MN_BROADCAST:
            memmove((char *)x->recv + off, mn_slot(c, x->root), len);
            break;
        }
        r = mn_barrier(c, who);
        if (bytes == 0)
            break;
    }
    return r;
}

/* Make progress on a point-to-point call: move what the ring allows.
 * Returns 1 if anything moved, 0 if not, -1 on a size mismatch. */
static int mn_p2p_step(mn_call *x)
{
    struct ncclComm *c = x->comm;
    int sending = x->kind == MN_SEND;
    mn_chan *ch = sending ? mn_chan_of(c, c->rank, x->root) : mn_chan_of(c, x->root, c->rank);
    char *data = mn_chan_data(c, ch);
    uint64_t cap = c->chan_bytes, bytes = x->count * x->esize;
    uint64_t head = atomic_load(&ch->head), tail = atomic_load(&ch->tail);
    int moved = 0;
    for (;;) {
        uint64_t avail = sending ? cap - (head - tail) : head - tail;
        uint64_t want = !x->hdr ? 16 : bytes - x->done;
        if (x->hdr && want == 0)
            break;
        if (avail < (x->hdr ? 1 : 16))
            break;
        uint64_t k = want < avail ? want : avail;
        uint64_t pos = (sending ? head : tail) % cap;
        uint64_t first = k < cap - pos ? k : cap - pos;
        if (!x->hdr) {   /* the header: magic and size */
            uint64_t h[2] = {MN_MSG_MAGIC, bytes};
            if (sending) {
                memcpy(data + pos, h, first);
                memcpy(data, (char *)h + first, 16 - first);
            } else {
                memcpy(h, data + pos, first);
                memcpy((char *)h + first, data, 16 - first);
                if (h[0] != MN_MSG_MAGIC || h[1] != bytes) {
                    mn_fail(ncclInvalidUsage, c, "ncclRecv", "rank %d receives %" PRIu64
                            " bytes from rank %d, which sends %" PRIu64, c->rank, bytes,
                            x->root, h[1]);
                    return -1;
                }
            }
            x->hdr = 1;
        } else if (sending) {
            const char *src = (const char *)x->send + x->done;
            memcpy(data + pos, src, first);
            memcpy(data, src + first, k - first);
            x->done += k;
        } else {
            char *dst = (char *)x->recv + x->done;
            memcpy(dst, data + pos, first);
            memcpy(dst + first, data, k - first);
            x->done += k;
        }
        if (sending)
            atomic_store(&ch->head, head += k);
        else
            atomic_store(&ch->tail, tail += k);
        moved = 1;
    }
    if (moved) {   /* the peer may be waiting for this */
        atomic_fetch_add(&c->seg->bell[x->root], 1);
        mn_futex_wake(&c->seg->bell[x->root]);
    }
    return moved;
}

/* Whether a point-to-point call is complete. */
static int mn_p2p_done(const mn_call *x)
{
    return x->hdr && x->done == x->count * x->esize;
}


/* The p2p calls of a batch, for mn_p2p_moves. */
typedef struct mn_p2p_batch {
    mn_call *q;
    int n;
} mn_p2p_batch;

/* mn_wait_ok's done() for a batch of p2p calls whose peer has exited: one
 * more pass over them; 1 when any moved, finished or found a size mismatch
 * (the caller's next pass reports it), so that a peer that sent and exited
 * before this rank looked is not a failure. */
static int mn_p2p_moves(const void *arg)
{
    const mn_p2p_batch *b = arg;
    int any = 0;
    for (int k = 0; k < b->n; k++) {
        mn_call *x = &b->q[k];
        if (x->kind < MN_SEND || mn_p2p_done(x))
            continue;
        int blocked = 0;   /* (as mn_run: an earlier unfinished call on the same ring goes first) */
        for (int j = 0; j < k && !blocked; j++)
            blocked = b->q[j].kind == x->kind && b->q[j].comm == x->comm && b->q[j].root == x->root &&
                      !mn_p2p_done(&b->q[j]);
        if (blocked)
            continue;
        int m = mn_p2p_step(x);
        any |= m != 0 || mn_p2p_done(x);
    }
    return any;
}
/* Run calls q[0 .. n): the collectives in order, then all point-to-point
 * calls together until each is complete (calls on one ring in order). */
static ncclResult_t mn_run(mn_call *q, int n, const char *who)
{
    ncclResult_t r = ncclSuccess;
    int begun = 0;
    for (int k = 0; k < n && !r; k++, begun++)
        r = mn_begin(q[k].comm, q[k].stream, who);
    for (int k = 0; k < n && !r; k++)
        if (q[k].kind < MN_SEND)
            r = mn_collective(&q[k], who);
    double deadline = mn_now() + mn_timeout(), next = 0;
    for (;;) {
        if (r)
            break;
        int pending = 0, moved = 0;
        struct ncclComm *wait_comm = NULL;
        for (int k = 0; k < n; k++) {
            mn_call *x = &q[k];
            if (x->kind < MN_SEND || mn_p2p_done(x))
                continue;
            pending = 1;
            wait_comm = x->comm;
            int blocked = 0;   /* an earlier unfinished call on the same ring goes first */
            for (int j = 0; j < k && !blocked; j++)
                blocked = q[j].kind == x->kind && q[j].comm == x->comm && q[j].root == x->root &&
                          !mn_p2p_done(&q[j]);
            if (blocked)
                continue;
            int m = mn_p2p_step(x);
            if (m < 0) {
                r = ncclInvalidUsage;
                break;
            }
            moved |= m;
        }
        if (r || !pending)
            break;
        if (!moved) {
            _Atomic uint32_t *bell = &wait_comm->seg->bell[wait_comm->rank];
            uint32_t b = atomic_load(bell);
            mn_p2p_batch pb = {q, n};   /* (a peer that sent and exited: what it sent still counts) */
            if ((r = mn_wait_ok(wait_comm, deadline, who, &next, mn_p2p_moves, &pb)))
                break;
            mn_futex_wait(bell, b, 5);
        } else {
            deadline = mn_now() + mn_timeout();   /* progress restarts the clock */
        }
    }
    for (int k = 0; k < begun; k++)
        mn_end();
    return r;
}

/* Check a call and run it now, or queue it inside a group. */
static ncclResult_t mn_submit(mn_call *x, const char *who)
{
    ncclResult_t r = mn_comm_ok(x->comm, who);
    if (r)
        return r;
    struct ncclComm *c = x->comm;
    if (!x->esize)
        return mn_fail(ncclInvalidArgument, c, who, "unknown data type");
    if ((x->kind == MN_BROADCAST || x->kind >= MN_SEND) && (x->root < 0 || x->root >= c->nranks))
        return mn_fail(ncclInvalidArgument, c, who, "%s %d of %d ranks",
                       x->kind == MN_BROADCAST ? "root" : "peer", x->root, c->nranks);
    uint64_t per = x->count * x->esize, n = (uint64_t)c->nranks;
    uint64_t sb = x->kind == MN_REDUCESCATTER ? per * n : per;
    uint64_t rb = x->kind == MN_ALLGATHER ? per * n : per;
    if (x->kind != MN_RECV && (x->kind != MN_BROADCAST || c->rank == x->root) &&
        (r = mn_buf(c, x->send, sb, who, "send")))
        return r;
    if (x->kind != MN_SEND && (r = mn_buf(c, x->recv, rb, who, "receive")))
        return r;
    mn_stats.calls[x->kind]++;
    mn_stats.bytes[x->kind] += (long long)(x->kind == MN_RECV ? rb : sb);
    if (mn_depth > 0) {
        if (mn_nq == mn_capq) {
            mn_capq = mn_capq ? 2 * mn_capq : 16;
            mn_q = realloc(mn_q, (size_t)mn_capq * sizeof *mn_q);
        }
        mn_q[mn_nq++] = *x;
        return ncclSuccess;
    }
    return mn_run(x, 1, who);
}

/* Only float32 and bfloat16 sums are modelled (bf16: widened, summed in f32 in rank order,
 * rounded once -- real NCCL rounds its partial sums its own way). */
static ncclResult_t mn_float_sum(ncclDataType_t t, ncclRedOp_t op, struct ncclComm *c,
                                 const char *who)
{
    if ((t != ncclFloat32 && t != ncclBfloat16) || op != ncclSum)
        return mn_fail(ncclInvalidArgument, c, who, "the double reduces float32 and bfloat16 sums only "
                       "(type %d, op %d)", (int)t, (int)op);
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    ncclResult_t r = mn_float_sum(datatype, op, comm, "ncclAllReduce");
    mn_call x = {MN_ALLREDUCE, comm, sendbuff, recvbuff, count, mn_type_size(datatype), 0, stream, 0, 0};
    return r ? r : mn_submit(&x, "ncclAllReduce");
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream)
{
    ncclResult_t r = mn_float_sum(datatype, op, comm, "ncclReduceScatter");
    mn_call x = {MN_REDUCESCATTER, comm, sendbuff, recvbuff, recvcount, mn_type_size(datatype), 0, stream, 0,
                 0};
    return r ? r : mn_submit(&x, "ncclReduceScatter");
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    mn_call x = {MN_ALLGATHER, comm, sendbuff, recvbuff, sendcount, mn_type_size(datatype), 0,
                 stream, 0, 0};
    return mn_submit(&x, "ncclAllGather");
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream)
{
    mn_call x = {MN_BROADCAST, comm, sendbuff, recvbuff, count, mn_type_size(datatype), root,
                 stream, 0, 0};
    return mn_submit(&x, "ncclBroadcast");
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    mn_call x = {MN_SEND, comm, sendbuff, NULL, count, mn_type_size(datatype), peer, stream, 0,
                 0};
    return mn_submit(&x, "ncclSend");
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    mn_call x = {MN_RECV, comm, NULL, recvbuff, count, mn_type_size(datatype), peer, stream, 0,
                 0};
    return mn_submit(&x, "ncclRecv");
}

ncclResult_t ncclGroupStart(void)
{
    mn_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (mn_depth <= 0)
        return mn_fail(ncclInvalidUsage, NULL, "ncclGroupEnd", "no ncclGroupStart before it");
    if (--mn_depth > 0)
        return ncclSuccess;
    mn_stats.groups++;
    int n = mn_nq;
    mn_nq = 0;
    return n ? mn_run(mn_q, n, "ncclGroupEnd") : ncclSuccess;
}

/* NNSC_MOCK_STATS=1: one line at exit. */
__attribute__((destructor)) static void mn_stats_print(void)
{
    const char *s = getenv("NNSC_MOCK_STATS");
    if (!s || strcmp(s, "1"))
        return;
    static const char *const names[] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                        "send", "recv"};
    char line[1024];
    int len = snprintf(line, sizeof line, "nnsc-mock-nccl: pid=%d comms=%ld groups=%ld",
                       (int)getpid(), mn_stats.comms, mn_stats.groups);
    for (int k = 0; k < 6 && len < (int)sizeof line; k++)
        len += snprintf(line + len, sizeof line - (size_t)len, " %s=%ld/%lldB", names[k],
                        mn_stats.calls[k], mn_stats.bytes[k]);
    fprintf(stderr, "%s\n", line);
}
