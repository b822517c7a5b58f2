/* dev_cuda.c -- the CUDA backend.  (placeholder) */
#include "rt_internal.h"

void rt_dev_init(rt_ctx *ctx, const rt_image *images, int nimages)
{
    rt_fatal(ctx, 2, "the CUDA backend is not built yet");
}
void rt_dev_free(rt_ctx *ctx) { ctx->dev = NULL; }
char *rt_dev_arena(rt_ctx *ctx) { return NULL; }
void rt_dev_upload(rt_ctx *ctx, int64_t off, int64_t bytes) {}
void rt_dev_download(rt_ctx *ctx, int64_t off, int64_t bytes) {}
void *rt_dev_stream(rt_ctx *ctx) { return NULL; }
void rt_dev_step_begin(rt_ctx *ctx) {}
float rt_dev_step_end(rt_ctx *ctx, const void *dloss) { return 0; }
void rt_cuda_k(rt_ctx *ctx, int kernel, void *const *b, const int64_t *i, const float *f)
{
    rt_fatal(ctx, 1, "the CUDA backend is not built yet");
}
