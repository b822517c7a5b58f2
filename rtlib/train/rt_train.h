/* rt_train.h -- the top layer: rt_init / rt_finish, the training loop,
 * checkpoints.
 *
 *   runtime.c  rt_init / rt_finish, flags, environment, the arena
 *   train.c    lr schedule, grad norm and clipping, step and evaluation logs
 *   ckpt.c     checkpoints: save every N steps, --resume, --init, final weights */
#ifndef NNSC_RT_TRAIN_H
#define NNSC_RT_TRAIN_H

#include "cuda/rt_cuda.h"

/* ---- train.c: the training loop */

/* lr multiplier of step s (0-based) of `steps` under the manifest's schedule. */
double rt_lr_scale(const rt_manifest *m, int64_t steps, int64_t s);
/* Parse a FLOP/s figure: a positive number with an optional k, M, G, T or P
 * (10^3 .. 10^15): "1.5e12", "312T", "50G".  0, or 1 when it is not one. */
int rt_parse_flops(const char *s, double *out);
/* Dense peak FLOP/s of the GPU called name from NVIDIA's datasheets (bf16:
 * tensor cores; else f32 without), and in src what it is; 0 when the
 * table has no entry (src ""). */
double rt_peak_of_device(const char *name, int bf16, char *src, size_t srclen);
/* n as 834, 12.3k, 1.2M, 124M (3 significant digits at most); bytes as
 * 640KiB, 3.2MiB, 1.5GiB.  Return buf. */
const char *rt_human_count(char *buf, size_t len, double n);
const char *rt_human_bytes(char *buf, size_t len, double bytes);
/* Peak resident memory of this process in bytes (getrusage). */
double rt_peak_rss(void);
/* Rank 0: the start-up banner (model, size, mesh, world, tokens per step,
 * arena, FLOPs, data, peak) on stdout and in the --log file (rt_first_step). */
void rt_banner(rt_ctx *ctx);
/* Rank 0: the closing summary (steps, wall time, step times, tokens/s,
 * final loss, MFU, peak memory) on stdout and in the --log file (rt_finish). */
void rt_summary(rt_ctx *ctx);
/* Open the --log file on rank 0 (appending when resuming); exits 2 if it cannot. */
void rt_log_open(rt_ctx *ctx);
void rt_log_close(rt_ctx *ctx);

/* ---- ckpt.c: checkpoints */

/* Open the checkpoint directory (rank 0 creates it) and look at --save's
 * name; exits 2 on failure. */
void rt_ckpt_init(rt_ctx *ctx);
/* rt_first_step's work: --resume / --init loading; returns the first step. */
int64_t rt_ckpt_start(rt_ctx *ctx);
/* After step `step` (0-based): write DIR/step-(step+1) when one is due. */
void rt_ckpt_step(rt_ctx *ctx, int64_t step);
/* rt_finish's work: DIR/final.safetensors and --save FILE. */
void rt_ckpt_finish(rt_ctx *ctx);
/* Stop the run after a non-finite step `step` (0-based; what: "the loss is
 * nan", ...): one line naming the step and the newest checkpoint kept,
 * exit 1.  Every rank that sees it calls it; no file is written. */
void rt_ckpt_stop(rt_ctx *ctx, int64_t step, const char *what) __attribute__((noreturn));

#endif
