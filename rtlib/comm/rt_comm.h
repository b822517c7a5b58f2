/* rt_comm.h -- collectives between the ranks of a job.
 *
 *   comm_shm.c  collectives between rank processes over POSIX shm
 *   net.c       the TCP control plane of a multi-host job (rendezvous,
 *               small world-wide collectives)
 *   coll.c      the collective kernels rt_k_allreduce .. rt_k_alltoall and
 *               their rt_ref_* (the simple algorithms) */
#ifndef NNSC_RT_COMM_H
#define NNSC_RT_COMM_H

#include "cpu/rt_cpu.h"

/* ---- comm_shm.c */

/* Which collective a wait belongs to (for error messages). */
typedef enum rt_coll {
    RT_COLL_INIT,           /* attaching in rt_init */
    RT_COLL_ALLREDUCE,      /* rt_k_allreduce */
    RT_COLL_ALLGATHER,      /* rt_k_allgather */
    RT_COLL_REDUCESCATTER,  /* rt_k_reducescatter */
    RT_COLL_BROADCAST,      /* rt_k_broadcast */
    RT_COLL_SENDRECV,       /* rt_k_sendrecv */
    RT_COLL_ALLTOALL,       /* rt_k_alltoall */
    RT_COLL_BARRIER,        /* internal barrier */
    RT_COLL_SAVE,           /* writing a safetensors file (--save, checkpoints) */
    RT_COLL_LOAD,           /* --resume / --init */
    RT_COLL_FINISH,         /* rt_finish */
} rt_coll;

/* Name of collective `what` (an rt_coll) for messages, "?" if unknown. */
const char *rt_coll_name(int what);

/* The internal group of all ranks (manifest groups are 0..G-1). */
#define RT_GROUP_WORLD (-1)

/* Create or attach the job's segment (world > 1): this user's alone, and
 * with a job secret only rank 0 and peers that prove it; exits on failure. */
void rt_comm_init(rt_ctx *ctx);
/* Detach from the segment (rank 0 also unlinks it if that is still
 * pending).  failed = 1 on an error path: peers are told to give up. */
void rt_comm_free(rt_ctx *ctx, int failed);
/* The shared-memory segment this rank maps (--mem counts its resident
 * pages); *bytes 0 without a communicator. */
void rt_comm_span(const rt_ctx *ctx, const void **p, size_t *bytes);
/* ctx->on_fatal of a job with peers (set by rt_comm_init and rt_net_init):
 * rt_comm_free and rt_net_free with failed = 1, so that the peers stop too. */
void rt_comm_abort(rt_ctx *ctx);
/* Staging bytes per rank in use (for tests). */
int64_t rt_comm_stage_bytes(const rt_ctx *ctx);

/* Collectives over group g (a manifest group id or RT_GROUP_WORLD).
 * fast = 0 selects the simple reference algorithm (rt_ref_*); both give
 * bitwise the same results. */
void rt_comm_allreduce(rt_ctx *ctx, float *buf, int64_t n, int g, int fast);
/* The sum of n bf16 values (buf: 2 bytes each) over group g: widened, added
 * in f32 in member order, rounded once to bf16 (nearest even). */
void rt_comm_allreduce_bf16(rt_ctx *ctx, uint16_t *buf, int64_t n, int g, int fast);
void rt_comm_allgather(rt_ctx *ctx, const float *send, float *recv, int64_t n, int g, int fast);
void rt_comm_reducescatter(rt_ctx *ctx, const float *send, float *recv, int64_t n, int g, int fast);
/* Member k's block k (n bf16 values) of the sum of the members' send (size *
 * n bf16 values) over group g: widened, added in f32 in member order,
 * rounded once to bf16 (nearest even). */
void rt_comm_reducescatter_bf16(rt_ctx *ctx, const uint16_t *send, uint16_t *recv, int64_t n, int g, int fast);
void rt_comm_broadcast(rt_ctx *ctx, void *buf, int64_t bytes, int g, int root, int fast);
void rt_comm_sendrecv(rt_ctx *ctx, const float *send, float *recv, int64_t n, int g,
                      int peer_send, int peer_recv, int fast);
void rt_comm_alltoall(rt_ctx *ctx, const float *send, float *recv, int64_t n, int g, int fast);
/* A batch of point-to-point transfers (rt_k_p2p): op j sends (dir 0) buf[j]
 * or receives (dir 1) into it n[j] floats to / from member peer[j] of group
 * g[j]; all progress together, the call returns when all are done. */
#define RT_P2P_MAX 6
/* The ops of a p2p call from its ints (checked): returns their count. */
int rt_p2p_ops(rt_ctx *ctx, const int64_t *i, int *dir, int64_t *n, int *g, int *peer);
/* rt_k_p2p's body (fast) and rt_ref_p2p's: the ops of i, then rt_comm_p2p. */
void rt_p2p_run(rt_ctx *ctx, void *const *b, const int64_t *i, int fast);
void rt_comm_p2p(rt_ctx *ctx, int nops, const int *dir, void *const *buf, const int64_t *n, const int *g,
                 const int *peer, int fast);
/* Barrier over group g. */
void rt_comm_barrier(rt_ctx *ctx, int g, rt_coll what);
/* Byte allgather over the world with per-rank lengths: every rank gets all
 * blobs.  Returns a malloc'ed concatenation (rank order); lens[world]
 * filled.  what names the operation in failure messages. */
char *rt_comm_allgatherv_bytes(rt_ctx *ctx, const void *mine, int64_t len, int64_t *lens,
                               rt_coll what);
/* Logical-or of flag over the world (used to agree on failure). */
int rt_comm_any(rt_ctx *ctx, int flag, rt_coll what);
/* Show peers that this rank is alive and busy (long file I/O): a peer
 * waiting for it restarts its deadline.  No-op when world == 1. */
void rt_comm_beat(rt_ctx *ctx);

/* ---- net.c: the TCP control plane of a multi-host job.
 *
 * Rank and world come from the usual variables (runtime.c); net.c reads
 * MASTER_ADDR / MASTER_PORT (NNSC_MASTER_ADDR / NNSC_MASTER_PORT first) and
 * the local rank (LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK,
 * else rank) and the job's secret (NNSC_SECRET / NNSC_SECRET_FILE,
 * base/auth.c).  Rank 0 listens; the others connect (retrying until
 * ctx->timeout); each side proves the secret (HMAC over both sides'
 * nonces), then every rank checks that all agree on the world and the model.
 * Bad or missing variables, no secret: message and exit 2; a peer that does
 * not come or dies: message and exit 1. */
void rt_net_init(rt_ctx *ctx);
/* Close the connections; failed = 1 on an error path (peers are told). */
void rt_net_free(rt_ctx *ctx, int failed);
/* The local rank without any connection (for world == 1 and the device choice). */
int rt_net_local_rank(const rt_ctx *ctx);
/* World-wide control collectives over TCP (small messages): the same
 * contracts as the rt_comm_* functions of the same names, which call these
 * when ctx->net is set. */
void rt_net_barrier(rt_ctx *ctx, rt_coll what);
void rt_net_broadcast(rt_ctx *ctx, void *buf, int64_t bytes, int root);
int rt_net_any(rt_ctx *ctx, int flag, rt_coll what);
char *rt_net_allgatherv_bytes(rt_ctx *ctx, const void *mine, int64_t len, int64_t *lens);
/* A heartbeat during long local work (rt_comm_beat's contract): never blocks. */
void rt_net_beat(rt_ctx *ctx);

#endif
