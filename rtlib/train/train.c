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
 * A non-finite gradient norm (gradclip, every rank the same, before any
 * update) or loss (step end, every rank that holds it the same) stops the
 * run before a checkpoint of that step is written (rt_ckpt_stop, ckpt.c).
 *
 * Rank 0 also prints a banner when the run starts (rt_first_step) and a
 * summary at its end (rt_finish); the step line and both of them carry the
 * model FLOP utilisation, MFU = flops_per_step (the compiler's count for
 * the whole model, all ranks) / step time / (peak FLOP/s per device x
 * world), when a peak is known, and the peak resident memory of rank 0.
 *
 * lr schedule (warmup W, min_lr_frac F, N steps):
 *   s < W:                (s + 1) / W
 *   else, constant:       1
 *   else, cosine:         F + (1 - F) * 0.5 * (1 + cos(pi * (s - W) / (N - W)))
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "train/rt_train.h"

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
    /* every rank has the same all-reduced sum, and no update has run yet:
       all stop here, at the same step (its index: the steps run so far
       after the first) */
    if (ctx && !isfinite(ctx->grad_norm)) {
        char what[64];
        snprintf(what, sizeof what, "the gradient norm is %s", isnan(ctx->grad_norm) ? "nan" : "inf");
        rt_ckpt_stop(ctx, ctx->first_step + ctx->steps_done, what);
    }
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
    /* a resumed run continues its log; a new run starts it afresh.  A
       regular file, /dev/null or a terminal, or a pipe that a process reads
       (never waiting for a reader to come) */
    char why[160];
    int fd = rt_open_file(ctx->log_path, O_WRONLY | O_CREAT | (ctx->resume ? O_APPEND : O_TRUNC),
                          1, why, sizeof why);
    if (fd == -2)
        rt_fatal(ctx, 2, "--log %s: %s: give a regular file (or /dev/null, or a pipe that is "
                         "read: start its reader first)", ctx->log_path, why);
    if (fd < 0 || !(ctx->log = fdopen(fd, ctx->resume ? "a" : "w")))
        rt_fatal(ctx, 2, "--log %s: cannot open: %s", ctx->log_path, fd < 0 ? why : strerror(errno));
}

void rt_log_close(rt_ctx *ctx)
{
    if (ctx->log && fclose(ctx->log) != 0)
        rt_warn(ctx, "closing the log %s: %s", ctx->log_path, strerror(errno));
    ctx->log = NULL;
}

int rt_parse_flops(const char *s, double *out)
{
    static const char units[] = "kMGTP";
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || errno)
        return 1;
    if (*end) {
        const char *u = strchr(units, *end);
        if (!u || end[1])
            return 1;
        x *= pow(10.0, 3.0 * (double)(u - units + 1));
    }
    if (!(x > 0) || !isfinite(x))
        return 1;
    *out = x;
    return 0;
}

double rt_peak_of_device(const char *name, int bf16, char *src, size_t srclen)
{
    /* dense peaks, NVIDIA datasheets ("NVIDIA H100 Tensor Core GPU", "NVIDIA
       H200 Tensor Core GPU", "NVIDIA A100 Tensor Core GPU"): bf16 on tensor
       cores, f32 without them (our f32 matmuls use none); the datasheets'
       bf16 figure is the 2:4-sparse one, twice these.  The NVL parts run at
       other clocks and power: not in the table.  Same as bench/gpu/step.sh. */
    static const struct {
        const char *has, *also, *not;   /* name contains has and also, not not */
        double f32, bf16;               /* FLOP/s */
        const char *what;               /* for the banner */
    } table[] = {
        {"H100", "PCIe", NULL, 51e12, 756e12, "H100 PCIe"},
        {"H100", NULL, "NVL", 67e12, 989e12, "H100 SXM"},
        {"H200", NULL, "NVL", 67e12, 989e12, "H200 (H100 SXM figures)"},
        {"A100", NULL, NULL, 19.5e12, 312e12, "A100"},
    };
    src[0] = 0;
    for (size_t k = 0; name && k < sizeof table / sizeof table[0]; k++) {
        if (!strstr(name, table[k].has) || (table[k].also && !strstr(name, table[k].also)) ||
            (table[k].not && strstr(name, table[k].not)))
            continue;
        snprintf(src, srclen, "%s, %s dense", table[k].what, bf16 ? "bf16" : "f32");
        return bf16 ? table[k].bf16 : table[k].f32;
    }
    return 0;
}

/* v scaled by base until below it, with the unit; "%.1f" below 10, else "%.0f". */
static const char *rt_human(char *buf, size_t len, double v, double base,
                            const char *const *units, int nunits)
{
    int u = 0;
    while (fabs(v) >= base && u + 1 < nunits) {
        v /= base;
        u++;
    }
    if (u == 0 && v == floor(v))
        snprintf(buf, len, "%.0f%s", v, units[0]);
    else
        snprintf(buf, len, fabs(v) < 10 ? "%.1f%s" : "%.0f%s", v, units[u]);
    return buf;
}

const char *rt_human_count(char *buf, size_t len, double n)
{
    static const char *const units[] = {"", "k", "M", "G", "T", "P"};
    return rt_human(buf, len, n, 1000, units, 6);
}

const char *rt_human_bytes(char *buf, size_t len, double bytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    return rt_human(buf, len, bytes, 1024, units, 5);
}

/* v with an SI prefix before the unit what: "1.6 GFLOP", "989 TFLOP/s". */
static const char *rt_human_si(char *buf, size_t len, double v, const char *what)
{
    static const char *const units[] = {"", "k", "M", "G", "T", "P", "E"};
    char num[32];
    rt_human(num, sizeof num, v, 1000, units, 7);
    size_t digits = strspn(num, "0123456789.-");
    snprintf(buf, len, "%.*s %s%s", (int)digits, num, num + digits, what);
    return buf;
}

double rt_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return NAN;
    return (double)ru.ru_maxrss * 1024.0;   /* Linux: KiB */
}

/* MFU of a step of ms milliseconds, NaN when the FLOPs or the peak are unknown. */
static double rt_mfu(const rt_ctx *ctx, double ms)
{
    if (!(ctx->man.flops_per_step > 0) || !(ctx->peak_flops > 0) || !(ms > 0))
        return NAN;
    return ctx->man.flops_per_step / (ms * 1e-3) / (ctx->peak_flops * (double)ctx->world);
}

/* An MFU for the text log: "41.2%", or "-". */
static const char *rt_text_mfu(char *buf, size_t len, double mfu)
{
    if (!isfinite(mfu))
        return "-";
    snprintf(buf, len, "%.1f%%", mfu * 100);
    return buf;
}

/* s as a JSON string (quotes, backslashes and control characters escaped). */
static const char *rt_json_str(char *buf, size_t len, const char *s)
{
    size_t at = 0;
    if (!s)
        return "null";
    buf[at++] = '"';
    for (; *s && at + 8 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            at += (size_t)snprintf(buf + at, len - at, "\\%c", c);
        else if (c < 0x20)
            at += (size_t)snprintf(buf + at, len - at, "\\u%04x", c);
        else
            buf[at++] = (char)c;
    }
    buf[at++] = '"';
    buf[at] = 0;
    return buf;
}

/* The data the run reads, for the banner: "data PATH", or what stands in. */
static void rt_data_text(const rt_ctx *ctx, char *buf, size_t len, const char **path)
{
    const rt_manifest *m = &ctx->man;
    *path = NULL;
    if (ctx->data) {
        *path = ctx->data_path ? ctx->data_path : m->data;
        const char *ev = ctx->eval_path ? ctx->eval_path : m->eval_data;
        snprintf(buf, len, "data %s%s%s", *path, ev ? ", eval data " : "", ev ? ev : "");
    } else {
        snprintf(buf, len, m->nstream ? "synthetic tokens (no data file)" : "synthetic data");
    }
}

void rt_banner(rt_ctx *ctx)
{
    ctx->banner_t = rt_now();
    if (ctx->rank != 0)
        return;
    /* step times for the summary's median: the last RT_STEP_RING steps, kept
       in a block allocated here, before the loop */
    enum { RT_STEP_RING = 1 << 16 };
    int64_t left = ctx->steps > 0 ? ctx->steps : 1;
    ctx->nstep_cap = left < RT_STEP_RING ? left : RT_STEP_RING;
    ctx->step_ms = calloc((size_t)ctx->nstep_cap, sizeof *ctx->step_ms);
    if (!ctx->step_ms)
        rt_fatal(ctx, 1, "out of memory");
    const rt_manifest *m = &ctx->man;
    char params[32] = "", mesh[96] = "", tokens[48] = "", arena[32], flops[48] = "",
         peak[160], data[1200], b1[32];
    if (m->param_count > 0)
        snprintf(params, sizeof params, " %s params,", rt_human_count(b1, sizeof b1,
                                                                    (double)m->param_count));
    if (m->mesh_dp > 0 && m->mesh_pp > 1)
        snprintf(mesh, sizeof mesh, " mesh dp%d x tp%d x pp%d (%s),", m->mesh_dp, m->mesh_tp,
                 m->mesh_pp, m->policy);
    else if (m->mesh_dp > 0)
        snprintf(mesh, sizeof mesh, " mesh dp%d x tp%d (%s),", m->mesh_dp, m->mesh_tp,
                 m->policy);
    if (m->tokens_per_step > 0)
        snprintf(tokens, sizeof tokens, " %lld tokens/step,", (long long)m->tokens_per_step);
    rt_human_bytes(arena, sizeof arena, (double)m->arena);
    if (m->flops_per_step > 0)
        snprintf(flops, sizeof flops, ", %s/step", rt_human_si(b1, sizeof b1,
                                                               m->flops_per_step, "FLOP"));
    if (ctx->peak_flops > 0)
        snprintf(peak, sizeof peak, "peak %s per device (%s)",
                 rt_human_si(b1, sizeof b1, ctx->peak_flops, "FLOP/s"), ctx->peak_src);
    else
        snprintf(peak, sizeof peak, "peak unknown: no mfu (--peak-flops X or NNSC_PEAK_FLOPS)");
    const char *path;
    rt_data_text(ctx, data, sizeof data, &path);
    rt_out("model %s:%s%s world %d,%s arena %s per rank\n"
           "run: %lld step%s, %s%s, %s\n",
           m->model, params, mesh, ctx->world, tokens, arena, (long long)ctx->steps,
           ctx->steps == 1 ? "" : "s", data, flops, peak);
    if (ctx->log) {
        char line[2048], jm[600], jd[1100], jp[32], jf[32], jpol[80];
        snprintf(line, sizeof line,
                 "{\"start\":{\"model\":%s,\"params\":%lld,\"policy\":%s,\"dp\":%d,\"tp\":%d,\"pp\":%d,"
                 "\"world\":%d,\"tokens_per_step\":%lld,\"arena_bytes\":%lld,"
                 "\"flops_per_step\":%s,\"peak_flops\":%s,\"steps\":%lld,\"data\":%s}}\n",
                 rt_json_str(jm, sizeof jm, m->model), (long long)m->param_count,
                 rt_json_str(jpol, sizeof jpol, m->policy[0] ? m->policy : NULL), m->mesh_dp,
                 m->mesh_tp, m->mesh_pp > 0 ? m->mesh_pp : 1, ctx->world, (long long)m->tokens_per_step, (long long)m->arena,
                 rt_json_num(jf, sizeof jf, m->flops_per_step > 0 ? m->flops_per_step : NAN),
                 rt_json_num(jp, sizeof jp, ctx->peak_flops > 0 ? ctx->peak_flops : NAN),
                 (long long)ctx->steps, rt_json_str(jd, sizeof jd, path));
        rt_log_line(ctx, line);
    }
}

/* Compare two doubles (qsort). */
static int rt_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void rt_summary(rt_ctx *ctx)
{
    if (ctx->rank != 0)
        return;
    int64_t n = ctx->steps_done, kept = n < ctx->nstep_cap ? n : ctx->nstep_cap;
    double wall = rt_now() - ctx->banner_t, median = NAN, mean = NAN, tps = NAN, mfu = NAN;
    if (kept > 0) {
        qsort(ctx->step_ms, (size_t)kept, sizeof *ctx->step_ms, rt_cmp_double);
        median = kept % 2 ? ctx->step_ms[kept / 2]
                          : 0.5 * (ctx->step_ms[kept / 2 - 1] + ctx->step_ms[kept / 2]);
        mean = ctx->sum_ms / (double)n;
        if (ctx->man.tokens_per_step > 0 && wall > 0)
            tps = (double)ctx->man.tokens_per_step * (double)n / wall;
        mfu = rt_mfu(ctx, median);
    }
    double rss = rt_peak_rss();
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];
    if (n == 0 && ctx->first_step > 0 && ctx->first_step >= ctx->steps)
        rt_out("done: no step to run: the checkpoint resumed from is at step %lld, the run has "
               "%lld; the final weights are those of the checkpoint. To train on, resume with "
               "a larger --steps (the lr schedule follows --steps)\n",
               (long long)ctx->first_step, (long long)ctx->steps);
    else
        rt_out("done: %lld step%s in %.1fs, step median %s ms (mean %s ms), %s tok/s, final "
               "loss %s, mfu %s, peak mem %s (rank 0)\n", (long long)n, n == 1 ? "" : "s", wall,
               rt_text_num(b1, sizeof b1, "%.1f", median), rt_text_num(b2, sizeof b2, "%.1f", mean),
               rt_text_num(b3, sizeof b3, "%.0f", tps),
               rt_text_num(b6, sizeof b6, "%.9g", ctx->last_loss), rt_text_mfu(b4, sizeof b4, mfu),
               rt_human_bytes(b5, sizeof b5, rss));
    if (ctx->log) {
        char line[512];
        snprintf(line, sizeof line,
                 "{\"summary\":{\"steps_run\":%lld,\"wall_s\":%.3f,\"step_ms_median\":%s,"
                 "\"step_ms_mean\":%s,\"tokens_per_s\":%s,\"final_loss\":%s,\"mfu\":%s,"
                 "\"peak_rss_bytes\":%.0f}}\n", (long long)n, wall,
                 rt_json_num(b1, sizeof b1, median), rt_json_num(b2, sizeof b2, mean),
                 rt_json_num(b3, sizeof b3, tps), rt_json_num(b4, sizeof b4, ctx->last_loss),
                 rt_json_num(b6, sizeof b6, mfu), isfinite(rss) ? rss : 0.0);
        rt_log_line(ctx, line);
    }
}

/* ---- the loop */

void rt_step_begin(rt_ctx *ctx, int64_t step)
{
    double now = rt_now();
    if (!ctx->steps_done)
        ctx->run_t0 = now;
    ctx->step_t0 = now;
    rt_trace_step(ctx, step, 0);
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
        loss = loss ? &dev_loss : NULL;   /* NULL: this rank holds no loss */
    }
    double now = rt_now(), ms = (now - ctx->step_t0) * 1e3;
    rt_trace_step(ctx, step, 1);
    ctx->steps_done++;
    ctx->sum_ms += ms;
    ctx->last_loss = loss ? (double)loss[0] : (double)NAN;
    if (ctx->rank == 0 && ctx->step_ms)
        ctx->step_ms[(ctx->steps_done - 1) % ctx->nstep_cap] = ms;
    if (ctx->rank == 0 && (!ctx->quiet || ctx->log)) {
        double l = ctx->last_loss;
        double lr = ctx->man.lr * ctx->lr_scale;
        double tps = ctx->man.tokens_per_step > 0 && ms > 0
                         ? (double)ctx->man.tokens_per_step / (ms * 1e-3)
                         : (double)NAN;
        double eta = (now - ctx->run_t0) / (double)ctx->steps_done *
                     (double)(ctx->steps - step - 1);
        double mfu = rt_mfu(ctx, ms), rss = rt_peak_rss();
        char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];
        if (!ctx->quiet) {
            /* keep the prefix `step S/N loss L`: `nnsc-aot verify` parses it */
            rt_out("step %lld/%lld loss %.9g gnorm %s lr %s ms %.1f tok/s %s mfu %s mem %s "
                   "eta %s\n", (long long)step + 1, (long long)ctx->steps, l,
                   rt_text_num(b1, sizeof b1, "%.4g", ctx->grad_norm),
                   rt_text_num(b2, sizeof b2, "%.4g", lr), ms,
                   rt_text_num(b3, sizeof b3, "%.0f", tps), rt_text_mfu(b5, sizeof b5, mfu),
                   isfinite(rss) ? rt_human_bytes(b6, sizeof b6, rss) : "-",
                   rt_text_eta(b4, sizeof b4, eta));
        }
        if (ctx->log) {
            char line[512];
            snprintf(line, sizeof line,
                     "{\"step\":%lld,\"loss\":%s,\"grad_norm\":%s,\"lr\":%s,\"ms\":%.3f,"
                     "\"tokens_per_s\":%s,\"eta_s\":%s,\"mfu\":%s,\"peak_rss_bytes\":%.0f}\n",
                     (long long)step + 1, rt_json_num(b1, sizeof b1, l),
                     rt_json_num(b2, sizeof b2, ctx->grad_norm), rt_json_num(b3, sizeof b3, lr),
                     ms, rt_json_num(b4, sizeof b4, tps), rt_json_num(b5, sizeof b5, eta),
                     rt_json_num(b6, sizeof b6, mfu), isfinite(rss) ? rss : 0.0);
            rt_log_line(ctx, line);
        }
    }
    /* a non-finite loss (on every rank that holds it: the same value) or an
       infinite norm stops the run before this step's weights are saved; a
       NaN norm is also what a program without gradclip reports, so only the
       cpu target's gradclip (above) stops on one, and on the cuda target
       the weights it makes stop the run at the next loss or checkpoint */
    if (loss && !isfinite(ctx->last_loss)) {
        char what[64];
        snprintf(what, sizeof what, "the loss is %s", isnan(ctx->last_loss) ? "nan"
                 : ctx->last_loss > 0 ? "inf" : "-inf");
        rt_ckpt_stop(ctx, step, what);
    }
    if (isinf(ctx->grad_norm))
        rt_ckpt_stop(ctx, step, "the gradient norm is inf");
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
        loss = loss ? &dev_loss : NULL;   /* NULL: this rank holds no loss */
    }
    if (ctx->rank != 0)
        return;
    double l = (loss ? (double)loss[0] : (double)NAN) / (double)ctx->man.eval_steps;
    if (!ctx->quiet)
        rt_out("eval step %lld loss %.9g\n", (long long)step + 1, l);
    if (ctx->log) {
        char line[128], b[32];
        snprintf(line, sizeof line, "{\"step\":%lld,\"eval_loss\":%s}\n", (long long)step + 1,
                 rt_json_num(b, sizeof b, l));
        rt_log_line(ctx, line);
    }
}
