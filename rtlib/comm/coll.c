/* coll.c -- the collective kernels: rt_k_<name> (fast algorithms) and
 * rt_ref_<name> (the simple reference algorithms; both give bitwise the same
 * results) of allreduce, allgather, reducescatter, broadcast, sendrecv, p2p
 * and alltoall, on the shm communicator (comm_shm.c).  On the cuda target
 * the same rows run on NCCL (cuda/nccl.c).
 */
#include "comm/rt_comm.h"

int rt_p2p_ops(rt_ctx *ctx, const int64_t *i, int *dir, int64_t *n, int *g, int *peer)
{
    int k = (int)i[0];
    if (k < 1 || k > RT_P2P_MAX) rt_fatal(ctx, 1, "p2p with %lld ops (1 .. %d)", (long long)i[0], RT_P2P_MAX);
    for (int j = 0; j < k; j++) {
        dir[j] = (int)i[1 + 4 * j];
        n[j] = i[2 + 4 * j];
        g[j] = (int)i[3 + 4 * j];
        peer[j] = (int)i[4 + 4 * j];
    }
    return k;
}

void rt_p2p_run(rt_ctx *ctx, void *const *b, const int64_t *i, int fast)
{
    int dir[RT_P2P_MAX], g[RT_P2P_MAX], peer[RT_P2P_MAX];
    int64_t n[RT_P2P_MAX];
    int k = rt_p2p_ops(ctx, i, dir, n, g, peer);
    rt_comm_p2p(ctx, k, dir, b, n, g, peer, fast);
}

/* rt_k_<name> (fast = 1) and rt_ref_<name> (fast = 0) of one collective:
 * call, with the kernel's arguments b, i and the choice fast. */
#define RT_COLL(name, call)                                                               \
    void rt_k_##name(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)      \
    {                                                                                     \
        const int fast = 1;                                                               \
        call;                                                                             \
    }                                                                                     \
    void rt_ref_##name(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)    \
    {                                                                                     \
        const int fast = 0;                                                               \
        call;                                                                             \
    }

RT_COLL(allreduce, rt_comm_allreduce(ctx, b[0], i[0], (int)i[1], fast))
RT_COLL(allreduce_bf16, rt_comm_allreduce_bf16(ctx, b[0], i[0], (int)i[1], fast))
RT_COLL(allgather, rt_comm_allgather(ctx, b[0], b[1], i[0], (int)i[1], fast))
RT_COLL(reducescatter, rt_comm_reducescatter(ctx, b[0], b[1], i[0], (int)i[1], fast))
RT_COLL(reducescatter_bf16, rt_comm_reducescatter_bf16(ctx, b[0], b[1], i[0], (int)i[1], fast))
RT_COLL(broadcast, rt_comm_broadcast(ctx, b[0], i[0] * 4, (int)i[1], (int)i[2], fast))
RT_COLL(sendrecv, rt_comm_sendrecv(ctx, b[0], b[1], i[0], (int)i[1], (int)i[2], (int)i[3], fast))
RT_COLL(p2p, rt_p2p_run(ctx, b, i, fast))
RT_COLL(alltoall, rt_comm_alltoall(ctx, b[0], b[1], i[0], (int)i[1], fast))
#undef RT_COLL
