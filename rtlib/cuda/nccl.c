/* nccl.c -- the collective kernels of the cuda target, on NCCL.
 *
 * libnccl.so.2 is opened with dlopen (rank executables have no DT_NEEDED
 * on it; a missing library is a one-line message and exit 2) and every
 * function comes from dlsym, with the declarations of nccl_api.h, so rtlib
 * builds without the CUDA toolkit.  $NNSC_NCCL_LIB names another library
 * to open instead (a path, or a name the loader searches for).
 *
 * Communicators: rank 0 makes the unique id and sends it to every rank over
 * the TCP control plane (rt_net_broadcast); every rank then joins the world
 * communicator.  Each manifest group gets its own, split from the world
 * (ncclCommSplit: color = group id for members, NCCL_SPLIT_NOCOLOR for the
 * rest; key = the member index, so a member's rank in the communicator is
 * its index in the group, which is what the kernels' roots and peers are).
 * A group of all ranks in rank order uses the world communicator, and a
 * group listed twice shares the first one's.
 *
 * rt_nccl_k runs one collective kernel of rt_kernels.h with the arguments
 * of rt_k_<name> (b[] device addresses), on the rank's stream.  Every NCCL
 * call goes through NCCL_CALL: a failure stops the rank (exit 1) with
 * file:line, the function and ncclGetErrorString.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/nccl_api.h"
#include "cuda/rt_cuda.h"

/* The NCCL functions the backend uses, once: X(name without "nccl"). */
#define NCCL_FUNCS(X)                                                                      \
    X(GetVersion) X(GetUniqueId) X(CommInitRank) X(CommSplit) X(CommDestroy) X(CommAbort) \
    X(CommGetAsyncError) X(GetErrorString) X(AllReduce) X(AllGather) X(ReduceScatter)     \
    X(Broadcast) X(Send) X(Recv) X(GroupStart) X(GroupEnd)

#define NCCL_MIN_VERSION 21800   /* 2.18: ncclCommSplit */

/* The library, its functions and the rank's communicators. */
struct rt_nccl {
    void *lib;                  /* dlopen handle (never closed: NCCL's threads may linger) */
    const char *lib_name;       /* what was opened, for messages */
#define NCCL_FIELD(name) nccl_##name##_fn *name;   /* e.g. AllReduce: ncclAllReduce */
    NCCL_FUNCS(NCCL_FIELD)
#undef NCCL_FIELD
    int version;                /* ncclGetVersion */
    ncclComm_t world;           /* all ranks */
    int ngroups;                /* manifest groups */
    ncclComm_t *comm;           /* per group: its communicator; NULL where this rank is no member */
    int *mine;                  /* per group: 1 if comm[g] was made for g (to be destroyed) */
    int *me;                    /* per group: this rank's member index, or -1 */
    char op[96];                /* the collective being issued, for messages ("" outside) */
};

/* file:line without the directory (rank executables carry no build paths). */
#ifdef __FILE_NAME__
#define NCCL_FILE __FILE_NAME__
#else
#define NCCL_FILE __FILE__
#endif

/* Call NCCL function `fn` (nccl<fn>) of nc with the arguments; stop the rank on failure. */
#define NCCL_CALL(ctx, nc, fn, ...) \
    nccl_check((ctx), (nc), (nc)->fn(__VA_ARGS__), "nccl" #fn, NCCL_FILE, __LINE__)

/* Stop the rank (exit 1) when r is not ncclSuccess. */
static void nccl_check(rt_ctx *ctx, const rt_nccl *nc, ncclResult_t r, const char *call,
                       const char *file, int line)
{
    if (r == ncclSuccess)
        return;
    rt_fatal(ctx, 1, "%s:%d: NCCL: %s failed%s%s: %s (ncclResult_t %d)", file, line, call,
             nc->op[0] ? " in " : "", nc->op, nc->GetErrorString(r), r);
}

/* "2.28.9" from an ncclGetVersion code (2.9 and later: X*10000 + Y*100 + Z). */
static void nccl_version_text(int v, char *out, size_t len)
{
    if (v >= 10000)
        snprintf(out, len, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    else
        snprintf(out, len, "%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
}

/* Open the library and look up every function; exits 2 when NCCL is
 * missing, incomplete or too old. */
static void nccl_load(rt_ctx *ctx, rt_nccl *nc)
{
    const char *env = getenv("NNSC_NCCL_LIB");
    nc->lib_name = env && *env ? env : "libnccl.so.2";
    nc->lib = dlopen(nc->lib_name, RTLD_NOW | RTLD_LOCAL);
    if (!nc->lib) {
        /* the loader's own text only when it says more than "no such file" (a
           dependency of NCCL missing, a library of the wrong architecture, ...) */
        const char *why = dlerror();
        size_t nl = strlen(nc->lib_name);
        int absent = !why || (!strncmp(why, nc->lib_name, nl) && why[nl] == ':' &&
                              strstr(why, "No such file or directory"));
        if (!absent)
            rt_fatal(ctx, 2, "NCCL cannot be loaded from %s: %s", nc->lib_name, why);
        if (env && *env)
            rt_fatal(ctx, 2, "NCCL not found: NNSC_NCCL_LIB=%s does not exist or is not on the "
                     "library path", env);
        rt_fatal(ctx, 2, "NCCL not found: libnccl.so.2 is not installed or not on the library "
                 "path (install NCCL or put its lib directory on LD_LIBRARY_PATH)");
    }
#define NCCL_SYM(name)                                                                        \
    nc->name = (nccl_##name##_fn *)dlsym(nc->lib, "nccl" #name);                              \
    if (!nc->name)                                                                            \
        rt_fatal(ctx, 2, "%s has no nccl" #name ": NCCL %d.%d or later is needed",            \
                 nc->lib_name, NCCL_MIN_VERSION / 10000, NCCL_MIN_VERSION / 100 % 100);
    NCCL_FUNCS(NCCL_SYM)
#undef NCCL_SYM
    NCCL_CALL(ctx, nc, GetVersion, &nc->version);
    if (nc->version < NCCL_MIN_VERSION) {
        char v[32];
        nccl_version_text(nc->version, v, sizeof v);
        rt_fatal(ctx, 2, "%s is NCCL %s: version %d.%d or later is needed (ncclCommSplit)",
                 nc->lib_name, v, NCCL_MIN_VERSION / 10000, NCCL_MIN_VERSION / 100 % 100);
    }
}

/* 1 if groups a and b list the same ranks in the same order. */
static int nccl_same_group(const rt_group *a, const rt_group *b)
{
    return a->n == b->n && memcmp(a->ranks, b->ranks, (size_t)a->n * sizeof *a->ranks) == 0;
}

/* ctx->on_fatal from rt_nccl_init on: abort the communicators (peers in a
 * collective stop too), then tell the peers over the control plane. */
static void nccl_abort(rt_ctx *ctx)
{
    rt_nccl_free(ctx, 1);
    rt_comm_abort(ctx);
}

void rt_nccl_init(rt_ctx *ctx)
{
    const rt_manifest *m = &ctx->man;
    rt_nccl *nc = calloc(1, sizeof *nc);
    if (!nc)
        rt_fatal(ctx, 1, "out of memory");
    ctx->nccl = nc;
    ctx->on_fatal = nccl_abort;
    nccl_load(ctx, nc);
    RT_ASSERT(ctx->world == 1 || ctx->net);   /* the id travels over the control plane */

    /* the world communicator, from rank 0's unique id */
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (ctx->rank == 0)
        NCCL_CALL(ctx, nc, GetUniqueId, &id);
    rt_net_broadcast(ctx, &id, sizeof id, 0);
    snprintf(nc->op, sizeof nc->op, "joining the world communicator of %d ranks", ctx->world);
    NCCL_CALL(ctx, nc, CommInitRank, &nc->world, ctx->world, id, ctx->rank);

    /* one per manifest group: every rank takes part in every split (it is
       collective over the world communicator), members with the group's color */
    nc->ngroups = m->ngroups;
    nc->comm = calloc((size_t)m->ngroups + 1, sizeof *nc->comm);
    nc->mine = calloc((size_t)m->ngroups + 1, sizeof *nc->mine);
    nc->me = calloc((size_t)m->ngroups + 1, sizeof *nc->me);
    if (!nc->comm || !nc->mine || !nc->me)
        rt_fatal(ctx, 1, "out of memory");
    for (int g = 0; g < m->ngroups; g++) {
        const rt_group *gr = &m->groups[g];
        nc->me[g] = -1;
        for (int j = 0; j < gr->n; j++)
            if (gr->ranks[j] == ctx->rank)
                nc->me[g] = j;
        int whole = gr->n == ctx->world, twin = -1;
        for (int j = 0; whole && j < gr->n; j++)
            whole = gr->ranks[j] == j;
        for (int h = 0; h < g && twin < 0; h++)
            if (nccl_same_group(gr, &m->groups[h]))
                twin = h;
        if (whole) {
            nc->comm[g] = nc->world;
        } else if (twin >= 0) {
            nc->comm[g] = nc->comm[twin];
        } else {
            snprintf(nc->op, sizeof nc->op, "making the communicator of group %d", g);
            int member = nc->me[g] >= 0;
            NCCL_CALL(ctx, nc, CommSplit, nc->world, member ? g : NCCL_SPLIT_NOCOLOR,
                      member ? nc->me[g] : 0, &nc->comm[g], NULL);
            nc->mine[g] = nc->comm[g] != NULL;
            if (member != (nc->comm[g] != NULL))
                rt_fatal(ctx, 1, "ncclCommSplit for group %d gave %s communicator to a %s", g,
                         member ? "no" : "a", member ? "member" : "non-member");
        }
    }
    nc->op[0] = 0;
}

void rt_nccl_free(rt_ctx *ctx, int failed)
{
    rt_nccl *nc = ctx->nccl;
    if (!nc)
        return;
    ctx->nccl = NULL;   /* a failure below does not come back here */
    snprintf(nc->op, sizeof nc->op, "closing the communicators");
    for (int g = 0; g < nc->ngroups; g++)
        if (nc->mine[g] && nc->comm[g]) {
            if (failed)
                nc->CommAbort(nc->comm[g]);   /* stopping anyway: errors do not matter */
            else
                NCCL_CALL(ctx, nc, CommDestroy, nc->comm[g]);
        }
    if (nc->world) {
        if (failed)
            nc->CommAbort(nc->world);
        else
            NCCL_CALL(ctx, nc, CommDestroy, nc->world);
    }
    free(nc->comm);
    free(nc->mine);
    free(nc->me);
    free(nc);
}

/* Stop the rank when NCCL has found an error in the background (a network
 * failure of an earlier collective) on comm. */
static void nccl_async_check(rt_ctx *ctx, rt_nccl *nc, ncclComm_t comm)
{
    ncclResult_t async = ncclSuccess;
    NCCL_CALL(ctx, nc, CommGetAsyncError, comm, &async);
    if (async != ncclSuccess && async != ncclInProgress)
        rt_fatal(ctx, 1, "NCCL: an earlier collective failed%s%s: %s (ncclResult_t %d)",
                 nc->op[0] ? "; now in " : "", nc->op, nc->GetErrorString(async), async);
}

/* Name of a collective kernel, for messages (NULL: not one). */
static const char *nccl_kernel_name(int kernel)
{
    switch (kernel) {
    case RT_KN_allreduce: return "allreduce";
    case RT_KN_allreduce_bf16: return "allreduce_bf16";
    case RT_KN_allgather: return "allgather";
    case RT_KN_reducescatter: return "reducescatter";
    case RT_KN_reducescatter_bf16: return "reducescatter_bf16";
    case RT_KN_broadcast: return "broadcast";
    case RT_KN_sendrecv: return "sendrecv";
    case RT_KN_alltoall: return "alltoall";
    case RT_KN_p2p: return "p2p";
    }
    return NULL;
}

/* p2p: the batch of sends and receives as one NCCL group (they progress
 * together), each on its own group's communicator. */
static void nccl_p2p(rt_ctx *ctx, rt_nccl *nc, void *const *b, const int64_t *i)
{
    int dir[RT_P2P_MAX], g[RT_P2P_MAX], peer[RT_P2P_MAX];
    int64_t n[RT_P2P_MAX];
    int k = rt_p2p_ops(ctx, i, dir, n, g, peer);
    void *stream = rt_dev_stream(ctx);
    snprintf(nc->op, sizeof nc->op, "p2p of %d transfers", k);
    for (int j = 0; j < k; j++) {
        if (g[j] < 0 || g[j] >= nc->ngroups || nc->me[g[j]] < 0)
            rt_fatal(ctx, 1, "p2p on group %d, which does not contain rank %d", g[j], ctx->rank);
        if (peer[j] < 0 || peer[j] >= ctx->man.groups[g[j]].n || peer[j] == nc->me[g[j]])
            rt_fatal(ctx, 1, "p2p on group %d: peer %d is not another member", g[j], peer[j]);
        nccl_async_check(ctx, nc, nc->comm[g[j]]);
    }
    NCCL_CALL(ctx, nc, GroupStart);
    for (int j = 0; j < k; j++) {
        if (n[j] <= 0) continue;
        if (dir[j] == 0) NCCL_CALL(ctx, nc, Send, b[j], (size_t)n[j], ncclFloat32, peer[j], nc->comm[g[j]], stream);
        else NCCL_CALL(ctx, nc, Recv, b[j], (size_t)n[j], ncclFloat32, peer[j], nc->comm[g[j]], stream);
    }
    NCCL_CALL(ctx, nc, GroupEnd);
    nc->op[0] = 0;
}

void rt_nccl_k(rt_ctx *ctx, int kernel, void *const *b, const int64_t *i)
{
    rt_nccl *nc = ctx->nccl;
    const char *name = nccl_kernel_name(kernel);
    RT_ASSERT(nc && name);
    if (kernel == RT_KN_p2p) {   /* its ints are per transfer */
        nccl_p2p(ctx, nc, b, i);
        return;
    }
    int64_t n = i[0], g = i[1];
    if (g < 0 || g >= nc->ngroups)
        rt_fatal(ctx, 1, "%s on group %lld, but the manifest has %d groups", name, (long long)g,
                 nc->ngroups);
    int me = nc->me[g], size = ctx->man.groups[g].n;
    if (me < 0)
        rt_fatal(ctx, 1, "%s on group %lld, which does not contain rank %d", name, (long long)g,
                 ctx->rank);
    ncclComm_t comm = nc->comm[g];
    void *stream = rt_dev_stream(ctx);
    size_t cnt = n > 0 ? (size_t)n : 0;
    snprintf(nc->op, sizeof nc->op, "%s of %lld floats on group %lld", name, (long long)n,
             (long long)g);
    nccl_async_check(ctx, nc, comm);
    switch (kernel) {
    case RT_KN_allreduce:   /* in place; every member gets the same sum */
        if (cnt)
            NCCL_CALL(ctx, nc, AllReduce, b[0], b[0], cnt, ncclFloat32, ncclSum, comm, stream);
        break;
    case RT_KN_allreduce_bf16:   /* n bf16 values, in place (NCCL's bf16 sum: its own roundings) */
        if (cnt)
            NCCL_CALL(ctx, nc, AllReduce, b[0], b[0], cnt, ncclBfloat16, ncclSum, comm, stream);
        break;
    case RT_KN_allgather:   /* recv = the members' sends in member order */
        if (cnt)
            NCCL_CALL(ctx, nc, AllGather, b[0], b[1], cnt, ncclFloat32, comm, stream);
        break;
    case RT_KN_reducescatter:   /* recv = chunk `me` of the sum */
        if (cnt)
            NCCL_CALL(ctx, nc, ReduceScatter, b[0], b[1], cnt, ncclFloat32, ncclSum, comm,
                      stream);
        break;
    case RT_KN_reducescatter_bf16:   /* n bf16 values: chunk `me` of NCCL's bf16 sum */
        if (cnt)
            NCCL_CALL(ctx, nc, ReduceScatter, b[0], b[1], cnt, ncclBfloat16, ncclSum, comm, stream);
        break;
    case RT_KN_broadcast: {   /* in place, from member `root` (a bit copy: any 4-byte type) */
        int64_t root = i[2];
        if (root < 0 || root >= size)
            rt_fatal(ctx, 1, "broadcast on group %lld: root %lld is not a member index (group "
                     "has %d)", (long long)g, (long long)root, size);
        if (cnt)
            NCCL_CALL(ctx, nc, Broadcast, b[0], b[0], cnt, ncclFloat32, (int)root, comm, stream);
        break;
    }
    case RT_KN_sendrecv: {   /* to member peer_send, from member peer_recv (-1: none) */
        int64_t ps = i[2], pr = i[3];
        if (ps < -1 || ps >= size || pr < -1 || pr >= size)
            rt_fatal(ctx, 1, "sendrecv on group %lld: peers %lld/%lld are not member indices "
                     "(group has %d)", (long long)g, (long long)ps, (long long)pr, size);
        if ((ps == me) != (pr == me))
            rt_fatal(ctx, 1, "sendrecv on group %lld: a send to itself needs a receive from "
                     "itself", (long long)g);
        if (!cnt || (ps < 0 && pr < 0))
            break;
        NCCL_CALL(ctx, nc, GroupStart);
        if (ps >= 0)
            NCCL_CALL(ctx, nc, Send, b[0], cnt, ncclFloat32, (int)ps, comm, stream);
        if (pr >= 0)
            NCCL_CALL(ctx, nc, Recv, b[1], cnt, ncclFloat32, (int)pr, comm, stream);
        NCCL_CALL(ctx, nc, GroupEnd);
        break;
    }
    case RT_KN_alltoall: {   /* chunk j of send to member j; chunk j of recv from member j */
        if (!cnt)
            break;
        size_t chunk = cnt * 4, all = chunk * (size_t)size;
        const char *s = b[0];
        char *r = b[1];
        uintptr_t su = (uintptr_t)s, ru = (uintptr_t)r;
        if (su < ru + all && ru < su + all)   /* chunks would be overwritten before they go */
            rt_fatal(ctx, 1, "alltoall on group %lld: send and receive buffers overlap (not "
                     "supported on the cuda target)", (long long)g);
        NCCL_CALL(ctx, nc, GroupStart);
        for (int j = 0; j < size; j++) {   /* j == me: NCCL copies to itself */
            NCCL_CALL(ctx, nc, Send, s + (size_t)j * chunk, cnt, ncclFloat32, j, comm, stream);
            NCCL_CALL(ctx, nc, Recv, r + (size_t)j * chunk, cnt, ncclFloat32, j, comm, stream);
        }
        NCCL_CALL(ctx, nc, GroupEnd);
        break;
    }
    }
    nc->op[0] = 0;
}
