/* net.c -- the TCP control plane of a multi-host (cuda target) job.  (placeholder) */
#include "rt_internal.h"

int rt_net_local_rank(const rt_ctx *ctx) { return ctx->rank; }
void rt_net_init(rt_ctx *ctx) { rt_fatal(ctx, 2, "the TCP rendezvous is not built yet"); }
void rt_net_free(rt_ctx *ctx, int failed) { ctx->net = NULL; }
void rt_net_barrier(rt_ctx *ctx, rt_coll what) {}
void rt_net_broadcast(rt_ctx *ctx, void *buf, int64_t bytes, int root) {}
int rt_net_any(rt_ctx *ctx, int flag, rt_coll what) { return flag; }
char *rt_net_allgatherv_bytes(rt_ctx *ctx, const void *mine, int64_t len, int64_t *lens)
{
    rt_fatal(ctx, 1, "not built yet");
}
