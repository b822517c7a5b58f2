/* train.c -- the pieces of the training loop around the kernels: the lr
 * schedule, the global gradient norm and clipping (sumsq, gradclip), the
 * per-step and evaluation logs.
 *
 * Per step s (0-based) of N, rt_step_begin sets the lr multiplier that sgd
 * and adamw apply (schedule below) and resets the gradient multiplier to 1;
 * rt_k_gradclip, called by every rank with the same all-reduced sum of
 * squares, sets it to the clipping factor.  Nothing here carries state from
 * one step to the next except the timing for the log, so a run resumed from
 * a checkpoint computes what the uninterrupted run computes.
 *
 * On the cuda target (ctx->dev) the step's scales also go to the device
 * state at step begin, and step and evaluation ends wait for the device,
 * read the loss and the gradient norm back, and stop on a device-side error
 * (dev_cuda.c) -- on every rank, since that is where each rank synchronises.
 *
 * lr schedule (warmup W, min_lr_frac F, N steps):
 *   s < W:                (s + 1) / W
 *   else, constant:       1
 *   else, cosine:         F + (1 - F) * 0.5 * (1 + cos(pi * (s - W) / (N - W)))
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "rt_internal.h"

/* ---- lr schedule */

double rt_lr_scale(const rt_manifest *m, int64_t steps, int64_t s)
{
    if (s < m->warmup)
        return (double)(s + 1) / (double)m->warmup;
    if (m->sched == RT_SCHED_CONSTANT || steps <= m->warmup)
        return 1.0;
    double progress = (double)(s - m->warmup) / (double)(steps - m->warmup);
    return m->min_lr_frac + (1.0 - m->min_lr_frac) * 0.5 * (1.0 + cos(M_PI * progress));
}

/* ---- gradient norm and clipping */

#define RT_SUMSQ_PARTS 1024        /* most partial sums of one sumsq call */
#define RT_SUMSQ_MIN_PART 16384    /* fewest elements per partial sum */

/* sumsq's partial sums: part j covers g[j * len, min(n, (j + 1) * len)). */
typedef struct rt_sumsq_arg {
    const float *g;     /* the gradient */
    int64_t n;          /* its length */
    int64_t len;        /* elements per part */
    double *part;       /* partial sums, one per part */
} rt_sumsq_arg;

/* Four floats and four doubles (GCC/Clang vector extension: SIMD on any
 * x86-64 level without intrinsics). */
typedef float rt_v4f __attribute__((vector_size(16)));
typedef double rt_v4d __attribute__((vector_size(32)));

/* sum of g[k]^2 over [0, n) in double: eight lanes (element k in lane
 * k mod 8, two vectors of four), then the lanes pairwise, then the tail,
 * always in this order. */
static double rt_sumsq_run(const float *restrict g, int64_t n)
{
    rt_v4d lo = {0, 0, 0, 0}, hi = {0, 0, 0, 0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) {
        rt_v4f a, b;
        memcpy(&a, g + k, sizeof a);   /* unaligned loads */
        memcpy(&b, g + k + 4, sizeof b);
        rt_v4d da = __builtin_convertvector(a, rt_v4d), db = __builtin_convertvector(b, rt_v4d);
        lo += da * da;
        hi += db * db;
    }
    double s = ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
    for (; k < n; k++)
        s += (double)g[k] * (double)g[k];
    return s;
}

/* Parts [lo, hi) of a sumsq. */
static void rt_sumsq_parts(const void *p, int64_t lo, int64_t hi, int t)
{
    const rt_sumsq_arg *a = p;
    for (int64_t j = lo; j < hi; j++) {
        int64_t b = j * a->len, e = b + a->len < a->n ? b + a->len : a->n;
        a->part[j] = rt_sumsq_run(a->g + b, e - b);
    }
}

/* S[0] (+)= sum G^2.  The cut into parts depends on n only (not on the
 * threads), and the parts are added in order, so the result is the same
 * on any number of threads. */
void rt_k_sumsq(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    double part[RT_SUMSQ_PARTS];
    int64_t n = i[0];
    int64_t len = (n + RT_SUMSQ_PARTS - 1) / RT_SUMSQ_PARTS;
    if (len < RT_SUMSQ_MIN_PART)
        len = RT_SUMSQ_MIN_PART;
    len = (len + 15) / 16 * 16;
    int64_t nparts = n > 0 ? (n + len - 1) / len : 0;
    rt_sumsq_arg a = {b[0], n, len, part};
    rt_parallel_for(rt_sumsq_parts, &a, nparts, 1, 1);
    double sum = 0.0;
    for (int64_t j = 0; j < nparts; j++)
        sum += part[j];
    float *s = b[1];
    s[0] = (float)((i[1] ? (double)s[0] : 0.0) + sum);
}

void rt_k_gradclip(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_ref_gradclip(ctx, b, i, f);   /* a scalar: the reference is the kernel */
}

/* ---- logs */

/* v as JSON: %.9g, or null when it is not finite (JSON has no NaN). */
static const char *rt_json_num(char *buf, size_t len, double v)
{
    if (!isfinite(v))
        return "null";
    snprintf(buf, len, "%.9g", v);
    return buf;
}

/* v for the text log: fmt, or "-" when it is not finite. */
static const char *rt_text_num(char *buf, size_t len, const char *fmt, double v)
{
    if (!isfinite(v))
        return "-";
    snprintf(buf, len, fmt, v);
    return buf;
}

/* Seconds as 12.3s, 4m05s or 2h07m. */
static const char *rt_text_eta(char *buf, size_t len, double s)
{
    if (!isfinite(s) || s < 0)
        return "-";
    if (s < 60)
        snprintf(buf, len, "%.1fs", s);
    else if (s < 3600)
        snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    else
        snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    return buf;
}

/* Write one line to the --log file and flush it; exits 1 if it cannot. */
static void rt_log_line(rt_ctx *ctx, const char *line)
{
    if (fputs(line, ctx->log) < 0 || fflush(ctx->log) != 0)
        rt_fatal(ctx, 1, "cannot write the log %s: %s", ctx->log_path, strerror(errno));
}

void rt_log_open(rt_ctx *ctx)
{
    if (!ctx->log_path || ctx->rank != 0)
        return;
    /* a resumed run continues its log; a new run starts it afresh */
    ctx->log = fopen(ctx->log_path, ctx->resume ? "a" : "w");
    if (!ctx->log)
        rt_fatal(ctx, 2, "--log %s: cannot open: %s", ctx->log_path, strerror(errno));
}

void rt_log_close(rt_ctx *ctx)
{
    if (ctx->log && fclose(ctx->log) != 0)
        fprintf(stderr, "rank %d: closing the log %s: %s\n", ctx->rank, ctx->log_path,
                strerror(errno));
    ctx->log = NULL;
}

/* ---- the loop */

void rt_step_begin(rt_ctx *ctx, int64_t step)
{
    double now = rt_now();
    if (!ctx->steps_done)
        ctx->run_t0 = now;
    ctx->step_t0 = now;
    ctx->lr_scale = rt_lr_scale(&ctx->man, ctx->steps, step);
    ctx->grad_scale = 1.0f;
    ctx->grad_norm = NAN;
    if (ctx->dev)
        rt_dev_step_begin(ctx);   /* the same into the device state, for sgd and adamw */
}

void rt_step_end(rt_ctx *ctx, int64_t step, const float *loss)
{
    float dev_loss;
    if (ctx->dev) {
        /* cuda target: loss is a device address.  Every rank waits here for
           its stream (so the step time counts the device's work), stops on a
           device-side error and gets the step's gradient norm. */
        dev_loss = rt_dev_step_end(ctx, loss);
        loss = &dev_loss;
    }
    double now = rt_now(), ms = (now - ctx->step_t0) * 1e3;
    ctx->steps_done++;
    if (ctx->rank == 0 && (!ctx->quiet || ctx->log)) {
        double l = loss ? (double)loss[0] : (double)NAN;
        double lr = ctx->man.lr * ctx->lr_scale;
        double tps = ctx->man.tokens_per_step > 0 && ms > 0
                         ? (double)ctx->man.tokens_per_step / (ms * 1e-3)
                         : (double)NAN;
        double eta = (now - ctx->run_t0) / (double)ctx->steps_done *
                     (double)(ctx->steps - step - 1);
        char b1[32], b2[32], b3[32], b4[32], b5[32];
        if (!ctx->quiet) {
            /* keep the prefix `step S/N loss L`: `nnsc-aot verify` parses it */
            printf("step %lld/%lld loss %.9g gnorm %s lr %s ms %.1f tok/s %s eta %s\n",
                   (long long)step + 1, (long long)ctx->steps, l,
                   rt_text_num(b1, sizeof b1, "%.4g", ctx->grad_norm),
                   rt_text_num(b2, sizeof b2, "%.4g", lr), ms,
                   rt_text_num(b3, sizeof b3, "%.0f", tps), rt_text_eta(b4, sizeof b4, eta));
            fflush(stdout);
        }
        if (ctx->log) {
            char line[512];
            snprintf(line, sizeof line,
                     "{\"step\":%lld,\"loss\":%s,\"grad_norm\":%s,\"lr\":%s,\"ms\":%.3f,"
                     "\"tokens_per_s\":%s,\"eta_s\":%s}\n", (long long)step + 1,
                     rt_json_num(b1, sizeof b1, l), rt_json_num(b2, sizeof b2, ctx->grad_norm),
                     rt_json_num(b3, sizeof b3, lr), ms, rt_json_num(b4, sizeof b4, tps),
                     rt_json_num(b5, sizeof b5, eta));
            rt_log_line(ctx, line);
        }
    }
    rt_ckpt_step(ctx, step);
}

int rt_eval_due(rt_ctx *ctx, int64_t step)
{
    return ctx->man.eval_every > 0 && (step + 1) % ctx->man.eval_every == 0;
}

int64_t rt_eval_steps(rt_ctx *ctx)
{
    return ctx->man.eval_steps;
}

void rt_eval_end(rt_ctx *ctx, int64_t step, const float *loss)
{
    float dev_loss;
    if (ctx->dev) {   /* cuda target: every rank waits and checks, as at step end */
        dev_loss = rt_dev_step_end(ctx, loss);
        loss = &dev_loss;
    }
    if (ctx->rank != 0)
        return;
    double l = (loss ? (double)loss[0] : (double)NAN) / (double)ctx->man.eval_steps;
    if (!ctx->quiet) {
        printf("eval step %lld loss %.9g\n", (long long)step + 1, l);
        fflush(stdout);
    }
    if (ctx->log) {
        char line[128], b[32];
        snprintf(line, sizeof line, "{\"step\":%lld,\"eval_loss\":%s}\n", (long long)step + 1,
                 rt_json_num(b, sizeof b, l));
        rt_log_line(ctx, line);
    }
}
