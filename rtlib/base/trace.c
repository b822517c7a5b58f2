/* trace.c -- --trace FILE: a Chrome-trace JSON timeline of the rank's
 * pipeline tasks and steps, as measured.
 *
 * A pipeline's rank program marks where each task (F, B, W of a
 * micro-batch) begins and ends (rt_k_mark, placed by passes/lower.c around
 * the task's compute; the transfers where two tasks meet fall between
 * tasks), and the step loop marks each step.  Without --trace a mark is
 * one test of a flag.  With it, rank r creates its file at start-up (so a
 * bad path stops the run before it trains; a FIFO is refused, never
 * waited on: rt_open_file), keeps the events in memory and writes them at
 * rt_finish: FILE for a 1-rank run, else FILE with
 * "-rank<r>" before its extension (trace.json -> trace-rank0.json ...),
 * as {"traceEvents": [...]} with "B"/"E" events on pid 0, tid = rank,
 * timestamps in microseconds of CLOCK_MONOTONIC (comparable between the
 * ranks of one host), so the files of all ranks merge into one view
 * (chrome://tracing, Perfetto).  On the cuda target a mark first waits for
 * the rank's stream, so a task's span is its device time (tracing slows
 * the run by those waits). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rt_base.h"

/* One event: what (0 F, 1 B, 2 W, each + 3 (chunk + 1) with model chunks;
 * -1 a step), micro-batch or step, 0 begin 1 end, time in microseconds. */
typedef struct rt_tevent {
    int what, edge;
    int64_t id;
    double us;
} rt_tevent;

struct rt_trace {
    rt_tevent *ev;      /* the events so far */
    int64_t n, cap;     /* their count and room */
    FILE *f;            /* the rank's file, open from rt_trace_open */
    char path[4200];    /* its name */
};

static void trace_add(rt_ctx *ctx, int what, int64_t id, int edge)
{
    rt_trace *t = ctx->trace;
    if (!t)
        return;
    if (ctx->dev_sync && what >= 0)
        ctx->dev_sync(ctx);   /* the cuda target: marks after the device work */
    if (t->n == t->cap) {
        int64_t cap = t->cap ? 2 * t->cap : 4096;
        rt_tevent *ev = realloc(t->ev, sizeof *ev * (size_t)cap);
        if (!ev)
            rt_fatal(ctx, 1, "--trace: out of memory after %lld events", (long long)t->n);
        t->ev = ev;
        t->cap = cap;
    }
    t->ev[t->n++] = (rt_tevent){what, edge, id, rt_now() * 1e6};
}

void rt_trace_open(rt_ctx *ctx)
{
    if (!ctx->trace_path)
        return;
    rt_trace *t = ctx->trace = calloc(1, sizeof *ctx->trace);
    if (!t)
        rt_fatal(ctx, 1, "--trace: out of memory");
    const char *p = ctx->trace_path, *dot = strrchr(p, '.'), *slash = strrchr(p, '/');
    if (ctx->world == 1)
        snprintf(t->path, sizeof t->path, "%s", p);
    else if (dot && (!slash || dot > slash))
        snprintf(t->path, sizeof t->path, "%.*s-rank%d%s", (int)(dot - p), p, ctx->rank, dot);
    else
        snprintf(t->path, sizeof t->path, "%s-rank%d", p, ctx->rank);
    char why[160];
    int fd = rt_open_file(t->path, O_WRONLY | O_CREAT | O_TRUNC, 0, why, sizeof why);
    if (fd == -2)
        rt_fatal(ctx, 2, "--trace %s: %s: give the name of a regular file to write", t->path, why);
    if (fd < 0 || !(t->f = fdopen(fd, "w")))
        rt_fatal(ctx, 2, "--trace %s: cannot create: %s", t->path, fd < 0 ? why : strerror(errno));
}

void rt_trace_mark(rt_ctx *ctx, int64_t what, int64_t mb, int64_t edge)
{
    if (what < 0 || what >= 3 * 65 || (edge != 0 && edge != 1))
        rt_fatal(ctx, 1, "mark: event %lld edge %lld (0 F, 1 B, 2 W, + 3 (chunk + 1); 0 begin, 1 end)",
                 (long long)what, (long long)edge);
    trace_add(ctx, (int)what, mb, (int)edge);
}

void rt_trace_step(rt_ctx *ctx, int64_t step, int edge)
{
    trace_add(ctx, -1, step, edge);
}

void rt_trace_write(rt_ctx *ctx)
{
    rt_trace *t = ctx->trace;
    if (!t)
        return;
    FILE *f = t->f;
    const char *path = t->path;
    t->f = NULL;
    static const char kind[] = "FBW";
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    for (int64_t k = 0; k < t->n; k++) {
        const rt_tevent *e = &t->ev[k];
        char name[32];
        if (e->what < 0)
            snprintf(name, sizeof name, "step %lld", (long long)e->id + 1);
        else if (e->what >= 3)   /* a chunk's task: F3.1 */
            snprintf(name, sizeof name, "%c%lld.%d", kind[e->what % 3], (long long)e->id, e->what / 3 - 1);
        else
            snprintf(name, sizeof name, "%c%lld", kind[e->what], (long long)e->id);
        fprintf(f, "%s{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"%s\", \"ts\": %.3f, \"pid\": 0, \"tid\": %d}",
                k ? ",\n" : "", name, e->what < 0 ? "step" : "task", e->edge ? "E" : "B", e->us, ctx->rank);
    }
    fprintf(f, "\n]}\n");
    if (fclose(f))
        rt_fatal(ctx, 1, "--trace: writing %s failed", path);
    free(t->ev);
    free(t);
    ctx->trace = NULL;
}
