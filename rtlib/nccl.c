/* nccl.c -- collectives on the device with NCCL.  (placeholder) */
#include "rt_internal.h"

void rt_nccl_init(rt_ctx *ctx) { rt_fatal(ctx, 2, "NCCL support is not built yet"); }
void rt_nccl_free(rt_ctx *ctx, int failed) { ctx->nccl = NULL; }
void rt_nccl_k(rt_ctx *ctx, int kernel, void *const *b, const int64_t *i)
{
    rt_fatal(ctx, 1, "NCCL support is not built yet");
}
