/* test_rt_ckpt.c -- checkpoints (ckpt.c, safetensors.c): --ckpt-dir,
 * --ckpt-every, --resume, --init, final weights.
 *
 * Rank processes hold four params and three optimizer-state tensors in one
 * of three layouts (3 ranks: rows / columns / replicated / one rank; 2 ranks:
 * other splits; 1 rank: everything).  A fake training loop sets every
 * element to a known function of (tensor, logical index, step), so the
 * files can be checked element by element: full tensors and metadata in the
 * checkpoints, the same bytes from every layout, resuming into another
 * layout, --init (params only), malformed files rejected with status 2
 * (run under ASan: never a crash), temporary files ignored, a rank that dies
 * or hangs during a checkpoint (the previous one stays intact, the others
 * exit within the timeout); non-finite weights: refused by --init and
 * --resume (the tensor and the first bad index named), never written to a
 * checkpoint; --resume past a damaged newest checkpoint (truncated, or
 * non-finite only where one rank reads) to the newest intact one, every
 * rank from the same step.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "rt_internal.h"

static char top[64];   /* the test's temporary directory */

/* The tensors: params 0..3, then states 4..6 (of params 0, 0, 1). */
static const struct {
    const char *name;   /* tensor name */
    int i32;            /* 1: i32 (params only) */
    int ndim;           /* dims */
    int64_t shape[2];   /* shape */
    int of;             /* states: the param; params: -1 */
} tens[] = {
    {"a", 0, 2, {6, 10}, -1},
    {"b", 0, 2, {4, 9}, -1},
    {"c", 0, 1, {5, 0}, -1},
    {"n", 1, 1, {3, 0}, -1},
    {"opt.m.a", 0, 2, {6, 10}, 0},
    {"opt.v.a", 0, 2, {6, 10}, 0},
    {"opt.m.b", 0, 2, {4, 9}, 1},
};
#define NPARAM 4
#define NTENS 7

/* The box of param p that rank r of a layout holds: 0 if none. */
static int layout_box(int layout, int r, int p, int64_t *lo, int64_t *hi, int *writer)
{
    for (int d = 0; d < tens[p].ndim; d++) {
        lo[d] = 0;
        hi[d] = tens[p].shape[d];
    }
    *writer = 1;
    if (layout == 3)            /* one rank: everything */
        return 1;
    if (layout == 1) {          /* three ranks */
        switch (p) {
        case 0: lo[0] = 2 * r; hi[0] = 2 * r + 2; return 1;    /* rows */
        case 1: lo[1] = 3 * r; hi[1] = 3 * r + 3; return 1;    /* columns */
        case 2: *writer = r == 0; return 1;                    /* replicated */
        default: return r == 2;                                /* one rank */
        }
    }
    switch (p) {                /* layout 2: two ranks */
    case 0: lo[1] = 5 * r; hi[1] = 5 * r + 5; return 1;        /* columns */
    case 1: *writer = r == 0; return 1;                        /* replicated */
    case 2: return r == 1;                                     /* one rank */
    default: *writer = r == 1; return 1;                       /* replicated, writer 1 */
    }
}

/* Ranks of a layout. */
static int layout_world(int layout)
{
    return layout == 1 ? 3 : layout == 2 ? 2 : 1;
}

/* The value of element k of tensor j after `step` steps. */
static double value(int j, int64_t k, int64_t step)
{
    if (j >= NPARAM)
        return -(j + 1) * 1000.0 - 0.5 * (double)k - (double)step;
    if (tens[j].i32)
        return (double)(j * 100 + k + 10 * step);
    return j * 100.0 + 0.25 * (double)k + (double)step;
}

/* The manifest of rank r of a layout; *off gets each tensor's arena offset
 * (-1 where the rank holds none). */
static void manifest(int layout, int r, int64_t steps, char *out, size_t len, int64_t *off)
{
    int o = snprintf(out, len, "nnsc-manifest 1\nmodel ckpttest\nrank %d world %d\narena 4096\n"
                               "steps %lld\nmicro_batches 1\nseed 3\n", r, layout_world(layout),
                     (long long)steps);
    int np = 0, ns = 0;
    for (int j = 0; j < NTENS; j++) {
        int p = j < NPARAM ? j : tens[j].of, w;
        int64_t lo[2], hi[2];
        off[j] = -1;
        if (!layout_box(layout, r, p, lo, hi, &w))
            continue;
        off[j] = 256 * j;
        if (j < NPARAM)
            o += snprintf(out + o, len - (size_t)o, "param %d %s %s %d", np++, tens[j].name,
                          tens[j].i32 ? "i32" : "f32", tens[j].ndim);
        else
            o += snprintf(out + o, len - (size_t)o, "state %d %s f32 %d", ns++, tens[j].name,
                          tens[j].ndim);
        for (int d = 0; d < tens[j].ndim; d++)
            o += snprintf(out + o, len - (size_t)o, " %lld", (long long)tens[j].shape[d]);
        o += snprintf(out + o, len - (size_t)o, " box");
        for (int d = 0; d < tens[j].ndim; d++)
            o += snprintf(out + o, len - (size_t)o, " %lld %lld", (long long)lo[d],
                          (long long)hi[d]);
        if (j < NPARAM)
            o += snprintf(out + o, len - (size_t)o, " init zeros 0 0");
        else
            o += snprintf(out + o, len - (size_t)o, " of %s", tens[tens[j].of].name);
        o += snprintf(out + o, len - (size_t)o, " off %lld writer %d\n", (long long)off[j], w);
    }
    snprintf(out + o, len - (size_t)o, "end\n");
}

/* Set (check = 0) or compare (check = 1) rank r's box of tensor j in the
 * arena with the values after `step` steps (step < 0: zeros).  1 if equal. */
static int box_values(rt_ctx *ctx, int layout, int r, int j, int64_t off, int64_t step,
                      int check)
{
    int p = j < NPARAM ? j : tens[j].of, w, ok = 1;
    int64_t lo[2], hi[2];
    layout_box(layout, r, p, lo, hi, &w);
    rt_box_iter it;
    rt_box_iter_init(&it, tens[j].ndim, tens[j].shape, lo, hi);
    char *a = rt_arena(ctx) + off;
    while (rt_box_iter_next(&it))
        for (int64_t q = 0; q < it.run; q++) {
            double v = step < 0 ? 0.0 : value(j, it.start + q, step);
            if (tens[j].i32) {
                int32_t *x = (int32_t *)a + it.pos + q;
                if (check)
                    ok &= *x == (int32_t)v;
                else
                    *x = (int32_t)v;
            } else {
                float *x = (float *)a + it.pos + q;
                if (check)
                    ok &= *x == (float)v;
                else
                    *x = (float)v;
            }
        }
    return ok;
}

/* One job: a layout, steps, flags, and what its ranks do and expect. */
typedef struct job {
    int layout;             /* 1, 2 or 3 */
    int64_t steps;          /* --steps */
    const char *flags[10];  /* more flags, NULL-terminated */
    int die_at;             /* rank die_rank exits before step_end of this step (-1: no) */
    int hang_at;            /* rank die_rank sleeps forever in this step (-1: no) */
    int die_rank;           /* the rank that dies or hangs */
    int64_t first;          /* expected rt_first_step (-1: do not check) */
    int64_t pstep, sstep;   /* expected loaded params / states: values after this step (-1: zeros) */
    int64_t nan_step;       /* rank die_rank's element 0 of a is NaN after this many steps (0: never) */
} job;

/* Rank r of a job; never returns.  Exit 3: a loaded value was wrong. */
static void rank_main(const job *jb, int r, const char *jobname)
{
    char man[4096], rs[16], ws[16];
    int64_t off[NTENS];
    manifest(jb->layout, r, jb->steps, man, sizeof man, off);
    snprintf(rs, sizeof rs, "%d", r);
    snprintf(ws, sizeof ws, "%d", layout_world(jb->layout));
    setenv("NNSC_RANK", rs, 1);
    setenv("NNSC_WORLD", ws, 1);
    setenv("NNSC_JOB", jobname, 1);
    char *argv[16] = {"test_rt_ckpt", "--quiet"};
    int argc = 2;
    for (int k = 0; jb->flags[k]; k++)
        argv[argc++] = (char *)jb->flags[k];
    argv[argc] = NULL;
    rt_ctx *ctx = rt_init(argc, argv, man);
    /* the prologue: params at their step-0 values, states zero */
    for (int j = 0; j < NPARAM; j++)
        if (off[j] >= 0)
            box_values(ctx, jb->layout, r, j, off[j], 0, 0);
    int64_t s0 = rt_first_step(ctx);
    int ok = jb->first < 0 || s0 == jb->first;
    for (int j = 0; j < NTENS && jb->first >= 0; j++)
        if (off[j] >= 0)
            ok &= box_values(ctx, jb->layout, r, j, off[j], j < NPARAM ? jb->pstep : jb->sstep, 1);
    if (!ok) {
        fprintf(stderr, "rank %d: loaded values are wrong (first step %lld)\n", r, (long long)s0);
        fflush(stderr);
        _exit(3);
    }
    for (int64_t s = s0; s < rt_steps(ctx); s++) {
        rt_step_begin(ctx, s);
        if (r == jb->die_rank && s == jb->die_at)
            _exit(1);
        while (r == jb->die_rank && s == jb->hang_at)
            pause();
        for (int j = 0; j < NTENS; j++)   /* the "update" */
            if (off[j] >= 0)
                box_values(ctx, jb->layout, r, j, off[j], s + 1, 0);
        if (r == jb->die_rank && s + 1 == jb->nan_step && off[0] >= 0)
            ((float *)(rt_arena(ctx) + off[0]))[0] = NAN;   /* a diverged "update" */
        float loss = 1.0f;
        rt_step_end(ctx, s, &loss);
    }
    _exit(rt_finish(ctx));
}

/* What the ranks of a job did. */
typedef struct result {
    int code[3];            /* exit status per rank (-1: killed) */
    char err[3][512];       /* first stderr line per rank */
    char last[3][512];      /* last stderr line per rank */
    double secs;            /* until the last rank that was not killed exited */
} result;

/* Run a job; a hanging rank is killed once every other rank has exited. */
static result run(const job *jb)
{
    static int tag;
    result res;
    int w = layout_world(jb->layout);
    char name[64], ep[3][96];
    snprintf(name, sizeof name, "test-ckpt-%d-%d", (int)getpid(), tag++);
    pid_t pids[3];
    double t0 = rt_now();
    fflush(stdout);
    for (int r = 0; r < w; r++) {
        snprintf(ep[r], sizeof ep[r], "%s/rank%d.err", top, r);
        pids[r] = fork();
        if (pids[r] == 0) {
            if (!freopen(ep[r], "w", stderr))
                _exit(99);
            rank_main(jb, r, name);
        }
    }
    for (int r = 0; r < w; r++) {
        if (jb->hang_at >= 0 && r == jb->die_rank)
            continue;
        int st;
        waitpid(pids[r], &st, 0);
        res.code[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    }
    res.secs = rt_now() - t0;
    if (jb->hang_at >= 0) {
        int st;
        kill(pids[jb->die_rank], SIGKILL);
        waitpid(pids[jb->die_rank], &st, 0);
        res.code[jb->die_rank] = -1;
    }
    for (int r = 0; r < w; r++) {
        FILE *f = fopen(ep[r], "r");
        size_t n = f ? fread(res.err[r], 1, sizeof res.err[r] - 1, f) : 0;
        res.err[r][n] = 0;
        if (f)
            fclose(f);
        while (n > 0 && res.err[r][n - 1] == '\n')
            res.err[r][--n] = 0;
        char *ll = strrchr(res.err[r], '\n');
        snprintf(res.last[r], sizeof res.last[r], "%s", ll ? ll + 1 : res.err[r]);
        char *nl = strchr(res.err[r], '\n');
        if (nl)
            *nl = 0;
    }
    return res;
}

/* 1 if every rank of a job's result exited with code. */
static int all_exit(const job *jb, const result *res, int code)
{
    for (int r = 0; r < layout_world(jb->layout); r++)
        if (res->code[r] != code)
            return 0;
    return 1;
}

/* "top/sub/name" (static buffer number k of 4). */
static const char *path_of(const char *sub, const char *name)
{
    static char buf[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s%s%s", top, sub, name[0] ? "/" : "", name);
    return buf[k];
}

/* Read a whole file (malloc'ed, *len its size), or NULL. */
static unsigned char *slurp(const char *path, int64_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*len + 1);
    if (fread(b, 1, (size_t)*len, f) != (size_t)*len)
        *len = -1;
    fclose(f);
    return b;
}

/* Write len bytes to path. */
static void spit(const char *path, const void *b, int64_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, (size_t)len, f) != (size_t)len) {
        perror(path);
        exit(1);
    }
    fclose(f);
}

/* 1 if files a and b have the same bytes. */
static int same_file(const char *a, const char *b)
{
    int64_t la = -2, lb = -3;
    unsigned char *x = slurp(a, &la), *y = slurp(b, &lb);
    int same = x && y && la == lb && !memcmp(x, y, (size_t)la);
    free(x);
    free(y);
    return same;
}

/* Check a file holds every tensor of `what` (1 params, 3 with state) with
 * the values after step, and the metadata. */
static int file_ok(const char *path, int what, int64_t step, char *why, size_t len)
{
    rt_st_file f;
    if (rt_st_open(path, &f, why, len))
        return 0;
    int ok = f.nt == (what == 3 ? NTENS : NPARAM);
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)step);
    const char *m = rt_st_meta(&f, "model"), *s = rt_st_meta(&f, "step");
    ok &= m && !strcmp(m, "ckpttest") && s && !strcmp(s, num);
    if (what == 3) {
        const char *dp = rt_st_meta(&f, "data_position");
        ok &= dp && !strcmp(dp, num);
    }
    for (int j = 0; j < (what == 3 ? NTENS : NPARAM) && ok; j++) {
        const rt_st_tensor *t = rt_st_find(&f, tens[j].name);
        int64_t n = tens[j].shape[0] * (tens[j].ndim > 1 ? tens[j].shape[1] : 1);
        ok &= t && t->ndim == tens[j].ndim && !strcmp(t->dtype, tens[j].i32 ? "I32" : "F32") &&
              t->end - t->begin == 4 * n;
        for (int64_t k = 0; ok && k < n; k++) {
            if (tens[j].i32) {
                int32_t v;
                memcpy(&v, (const char *)t->data + 4 * k, 4);
                ok &= v == (int32_t)value(j, k, step);
            } else {
                float v;
                memcpy(&v, (const char *)t->data + 4 * k, 4);
                ok &= v == (float)value(j, k, step);
            }
        }
        if (!ok)
            snprintf(why, len, "tensor %s differs", tens[j].name);
    }
    rt_st_free(&f);
    return ok;
}

/* 1 if a directory holds exactly the files listed (NULL-terminated). */
static int dir_is(const char *dir, const char *const *names)
{
    int want = 0, found = 0;
    for (; names[want]; want++)
        ;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int ok = 1;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int known = 0;
        for (int k = 0; k < want; k++)
            known |= !strcmp(e->d_name, names[k]);
        ok &= known;
        found++;
    }
    closedir(d);
    return ok && found == want;
}

/* rm -rf and mkdir -p of a test subdirectory; returns its path. */
static const char *fresh(const char *sub)
{
    char cmd[300];
    const char *p = path_of(sub, "");
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", p, p);
    if (system(cmd) != 0)
        exit(1);
    return p;
}

/* cp -r a test subdirectory. */
static void copy_dir(const char *from, const char *to)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", path_of(to, ""),
             path_of(from, ""), path_of(to, ""));
    if (system(cmd) != 0)
        exit(1);
}

static void test_write_and_resume(void)
{
    char why[256] = "";
    fresh("l1");
    job j1 = {1, 6, {"--ckpt-dir", path_of("l1", ""), "--ckpt-every", "2", NULL}, -1, -1, 0,
              0, 0, -1, 0};
    result res = run(&j1);
    check(all_exit(&j1, &res, 0), "3 ranks, 6 steps, --ckpt-every 2: exit 0 (%s)", res.err[0]);
    static const char *const l1_files[] = {"step-2.safetensors", "step-4.safetensors",
                                           "step-6.safetensors", "final.safetensors", NULL};
    check(dir_is(path_of("l1", ""), l1_files), "DIR holds step-2, step-4, step-6 and final "
          "(no temporary files)");
    check(file_ok(path_of("l1", "step-4.safetensors"), 3, 4, why, sizeof why),
          "step-4: full params and optimizer state after 4 steps, metadata step = data_position "
          "= 4, model %s", why);
    check(file_ok(path_of("l1", "final.safetensors"), 1, 6, why, sizeof why),
          "final: the params after 6 steps only, step 6 %s", why);

    /* the same checkpoints from other layouts, byte for byte */
    fresh("l2");
    fresh("l3");
    job j2 = j1, j3 = j1;
    j2.layout = 2;
    j2.flags[1] = path_of("l2", "");
    j3.layout = 3;
    j3.flags[1] = path_of("l3", "");
    result r2 = run(&j2), r3 = run(&j3);
    check(all_exit(&j2, &r2, 0) && all_exit(&j3, &r3, 0) &&
          same_file(path_of("l1", "step-4.safetensors"), path_of("l2", "step-4.safetensors")) &&
          same_file(path_of("l1", "step-4.safetensors"), path_of("l3", "step-4.safetensors")) &&
          same_file(path_of("l1", "final.safetensors"), path_of("l3", "final.safetensors")),
          "2-rank and 1-rank layouts write the same checkpoint and final bytes as 3 ranks");

    /* resume into other layouts */
    for (int layout = 2; layout <= 3; layout++) {
        copy_dir("l1", "rs");
        unlink(path_of("rs", "step-6.safetensors"));
        unlink(path_of("rs", "final.safetensors"));
        job jr = {layout, 6, {"--ckpt-dir", path_of("rs", ""), "--ckpt-every", "2", "--resume",
                              NULL}, -1, -1, 0, 4, 4, 4, 0};
        res = run(&jr);
        check(all_exit(&jr, &res, 0) &&
              same_file(path_of("l1", "final.safetensors"), path_of("rs", "final.safetensors")),
              "--resume a 3-rank checkpoint with %d rank(s): first step 4, every box of params "
              "and state loaded, same final file (%s)", layout_world(layout), res.err[0]);
    }

    /* --init: params only, from final weights, into 2 ranks */
    fresh("in");
    job ji = {2, 1, {"--init", path_of("l1", "final.safetensors"), NULL}, -1, -1, 0, 0, 6, -1, 0};
    res = run(&ji);
    check(all_exit(&ji, &res, 0), "--init FILE (final weights of 3 ranks) into 2 ranks: the "
          "params after 6 steps, state zero, first step 0 (%s)", res.err[0]);
    job ji2 = {3, 1, {"--ckpt-dir", path_of("in", ""), "--resume", "--init",
                      path_of("l1", "step-4.safetensors"), NULL}, -1, -1, 0, 0, 4, -1, 0};
    res = run(&ji2);
    check(all_exit(&ji2, &res, 0), "--resume with no checkpoint yet and --init a checkpoint: "
          "params from --init, state zero, step 0 (%s)", res.err[0]);
    copy_dir("l1", "in");
    job ji3 = {3, 6, {"--ckpt-dir", path_of("in", ""), "--resume", "--init",
                      path_of("l1", "step-2.safetensors"), NULL}, -1, -1, 0, 6, 6, 6, 0};
    res = run(&ji3);
    check(all_exit(&ji3, &res, 0), "--resume finding step-6 wins over --init (%s)", res.err[0]);
}

/* A safetensors image: the header text (length field its length, padded
 * with spaces to a multiple of 8) and data bytes taken from tensor values. */
static unsigned char *make_st(const char *hdr, int64_t data, int64_t *len)
{
    size_t h = strlen(hdr), hp = (h + 7) / 8 * 8;
    *len = 8 + (int64_t)hp + data;
    unsigned char *b = calloc(1, (size_t)*len + 1);
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)((uint64_t)hp >> (8 * k));
    memset(b + 8, ' ', hp);
    memcpy(b + 8, hdr, h);
    return b;
}

static void test_malformed(void)
{
    fresh("bad");
    /* the good params-only header, with holes for the variations */
    struct {
        const char *what;   /* description */
        const char *hdr;    /* the header (%s-free) */
        int64_t data;       /* data bytes */
        int64_t cut;        /* bytes cut off the end of the file */
        const char *say;    /* expected in the message */
    } cases[] = {
        {"a good file", "{\"__metadata__\":{\"model\":\"ckpttest\",\"step\":\"1\"},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[6,10],\"data_offsets\":[0,240]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[4,9],\"data_offsets\":[240,384]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[384,404]},"
         "\"n\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[404,416]}}", 416, 0, NULL},
        {"bad JSON", "{\"__metadata__\":{\"model\":\"ckpttest\"},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[6,10],\"data_offsets\":[0,240]},"
         "\"b\":{\"dtype\":\"F32\" \"shape\":[4,9],\"data_offsets\":[240,384]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[384,404]},"
         "\"n\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[404,416]}}", 416, 0, "expected"},
        {"offsets out of range", "{"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[6,10],\"data_offsets\":[0,240]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[4,9],\"data_offsets\":[240,384]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[384,404]},"
         "\"n\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[404,99999]}}", 416, 0,
         "data_offsets"},
        {"a wrong dtype", "{"
         "\"a\":{\"dtype\":\"I32\",\"shape\":[6,10],\"data_offsets\":[0,240]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[4,9],\"data_offsets\":[240,384]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[384,404]},"
         "\"n\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[404,416]}}", 416, 0,
         "tensor a is I32, expected F32"},
        {"a wrong shape", "{"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[10,6],\"data_offsets\":[0,240]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[4,9],\"data_offsets\":[240,384]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[384,404]},"
         "\"n\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[404,416]}}", 416, 0,
         "shape [10,6], expected [6,10]"},
        {"a missing tensor", "{"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[6,10],\"data_offsets\":[0,240]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[4,9],\"data_offsets\":[240,384]},"
         "\"n\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[384,396]}}", 396, 0,
         "no tensor c"},
        {"a truncated file", "{"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[6,10],\"data_offsets\":[0,240]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[4,9],\"data_offsets\":[240,384]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[384,404]},"
         "\"n\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[404,416]}}", 416, 9,
         "data"},
        {"another model", "{\"__metadata__\":{\"model\":\"other\"},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[6,10],\"data_offsets\":[0,240]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[4,9],\"data_offsets\":[240,384]},"
         "\"c\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[384,404]},"
         "\"n\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[404,416]}}", 416, 0,
         "model 'other'"},
        {"a header length past the end", "{}", -1000, 0, "header length"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int64_t len;
        unsigned char *b = make_st(cases[k].hdr, cases[k].data > 0 ? cases[k].data : 0, &len);
        if (cases[k].data < 0)   /* a length field larger than the file */
            b[1] = 0x7f;
        char name[32];
        snprintf(name, sizeof name, "case%zu.safetensors", k);
        const char *p = path_of("bad", name);
        spit(p, b, len - cases[k].cut);
        free(b);
        job jb = {1, 1, {"--init", p, NULL}, -1, -1, 0, -1, 0, 0, 0};
        result res = run(&jb);
        int ok = cases[k].say ? all_exit(&jb, &res, 2) && strstr(res.err[0], p) &&
                                    strstr(res.err[0], cases[k].say)
                              : all_exit(&jb, &res, 0);
        check(ok, "--init %s: 3 ranks exit %d %d %d: %s", cases[k].what, res.code[0],
              res.code[1], res.code[2], res.err[0]);
    }
    job jm = {2, 1, {"--init", path_of("bad", "none.safetensors"), NULL}, -1, -1, 0, -1, 0, 0, 0};
    result res = run(&jm);
    check(all_exit(&jm, &res, 2) && strstr(res.err[0], "none.safetensors"),
          "--init a missing file: every rank exits 2: %s", res.err[0]);

    /* --resume: a final file renamed as a checkpoint lacks the state; a step mismatch */
    fresh("rb");
    const char *final = path_of("l1", "final.safetensors");
    int64_t len;
    unsigned char *fb = slurp(final, &len);
    spit(path_of("rb", "step-6.safetensors"), fb, len);
    job jr = {2, 8, {"--ckpt-dir", path_of("rb", ""), "--resume", NULL}, -1, -1, 0, -1, 0, 0, 0};
    res = run(&jr);
    check(all_exit(&jr, &res, 2) && strstr(res.err[0], "no tensor opt.") &&
          strstr(res.err[0], "step-6"), "--resume from a file without optimizer state: exit 2: "
          "%s", res.err[0]);
    unlink(path_of("rb", "step-6.safetensors"));
    unsigned char *sb = slurp(path_of("l1", "step-4.safetensors"), &len);
    spit(path_of("rb", "step-5.safetensors"), sb, len);
    res = run(&jr);
    check(all_exit(&jr, &res, 2) && strstr(res.err[0], "says step 4"),
          "--resume from step-5 whose metadata says step 4: exit 2: %s", res.err[0]);
    free(fb);

    /* random corruption of a checkpoint: loaded or rejected (2), never a crash */
    int64_t hlen = 0;
    for (int k = 7; k >= 0; k--)
        hlen = hlen << 8 | sb[k];
    uint64_t s = 2024;
    int rejected = 0, loaded = 0, other = 0;
    for (int it = 0; it < 60; it++) {
        unsigned char *b = malloc((size_t)len);
        memcpy(b, sb, (size_t)len);
        for (int q = 0; q < 1 + it % 3; q++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            int64_t pos = (int64_t)((s >> 33) % (uint64_t)(8 + hlen));
            b[pos] = (unsigned char)(s >> 20);
        }
        const char *p = path_of("bad", "fuzz.safetensors");
        spit(p, b, it % 5 == 4 ? len - (int64_t)(s >> 40) % len : len);
        free(b);
        job jf = {3, 1, {"--init", p, NULL}, -1, -1, 0, -1, 0, 0, 0};
        res = run(&jf);
        rejected += res.code[0] == 2;
        loaded += res.code[0] == 0;
        other += res.code[0] != 0 && res.code[0] != 2;
    }
    check(other == 0, "60 corrupted or cut checkpoints for --init: %d rejected (exit 2), %d "
          "loaded, %d other (crash)", rejected, loaded, other);
    free(sb);
}

static void test_atomicity_and_failures(void)
{
    /* temporary files and other names never count as checkpoints */
    copy_dir("l1", "at");
    unlink(path_of("at", "step-6.safetensors"));
    unlink(path_of("at", "final.safetensors"));
    int64_t len;
    unsigned char *b = slurp(path_of("l1", "step-6.safetensors"), &len);
    spit(path_of("at", ".step-6.safetensors.tmp"), b, len);
    spit(path_of("at", "step-6.safetensors.tmp"), b, len);
    spit(path_of("at", "step-06.safetensors"), b, len);
    spit(path_of("at", "step-7.safetensors.bak"), b, len);
    free(b);
    job jt = {2, 4, {"--ckpt-dir", path_of("at", ""), "--resume", NULL}, -1, -1, 0, 4, 4, 4, 0};
    result res = run(&jt);
    check(all_exit(&jt, &res, 0), "--resume next to .step-6.safetensors.tmp, step-6.safetensors."
          "tmp, step-06.safetensors, step-7.safetensors.bak: loads step-4 (%s)", res.err[0]);
    check(access(path_of("at", ".step-6.safetensors.tmp"), F_OK) != 0 &&
          access(path_of("at", "step-6.safetensors.tmp"), F_OK) == 0,
          "start-up removes our stale .step-N.safetensors.tmp, leaves other files alone");

    /* a rank dies while the others write checkpoint 4: checkpoint 2 stays intact */
    fresh("dy");
    job jd = {2, 6, {"--ckpt-dir", path_of("dy", ""), "--ckpt-every", "2", "--timeout", "10",
                     NULL}, 3, -1, 1, -1, 0, 0, 0};
    res = run(&jd);
    check(res.code[0] == 1 && res.code[1] == 1 && strstr(res.err[0], "peer rank 1") &&
          res.secs < 5, "rank 1 dies before checkpoint 4: rank 0 exits 1 in %.2f s: %s",
          res.secs, res.err[0]);
    char why[256] = "";
    check(access(path_of("dy", "step-4.safetensors"), F_OK) != 0 &&
          file_ok(path_of("dy", "step-2.safetensors"), 3, 2, why, sizeof why),
          "no step-4.safetensors; step-2 complete and correct %s", why);
    job jr = {3, 6, {"--ckpt-dir", path_of("dy", ""), "--ckpt-every", "2", "--resume", NULL},
              -1, -1, 0, 2, 2, 2, 0};
    res = run(&jr);
    check(all_exit(&jr, &res, 0) &&
          same_file(path_of("l1", "final.safetensors"), path_of("dy", "final.safetensors")),
          "--resume (3 ranks) from step-2 finishes with the same final file (%s)", res.err[0]);

    /* a rank hangs in a step: the others leave within the timeout, naming it */
    fresh("hg");
    job jh = {1, 6, {"--ckpt-dir", path_of("hg", ""), "--ckpt-every", "2", "--timeout", "1",
                     NULL}, -1, 3, 2, -1, 0, 0, 0};
    res = run(&jh);
    check(res.code[0] == 1 && res.code[1] == 1 && strstr(res.err[0], "rank 2") &&
          res.secs < 6, "rank 2 hangs before checkpoint 4: ranks 0, 1 exit 1 in %.2f s "
          "(--timeout 1): %s | %s", res.secs, res.err[0], res.err[1]);
    check(file_ok(path_of("hg", "step-2.safetensors"), 3, 2, why, sizeof why) &&
          access(path_of("hg", "step-4.safetensors"), F_OK) != 0,
          "after the hang: step-2 intact, no step-4 %s", why);

    /* an unusable --ckpt-dir: a regular file */
    spit(path_of("", "afile"), "x", 1);
    job jf = {2, 1, {"--ckpt-dir", path_of("", "afile"), NULL}, -1, -1, 0, -1, 0, 0, 0};
    res = run(&jf);
    check(all_exit(&jf, &res, 2) && strstr(res.err[0], "afile"),
          "--ckpt-dir naming a regular file: every rank exits 2: %s", res.err[0]);
}


/* Byte offset in the file bytes b (len) of element k of tensor name. */
static int64_t elem_at(const unsigned char *b, int64_t len, const char *name, int64_t k)
{
    unsigned char *copy = malloc((size_t)len);
    memcpy(copy, b, (size_t)len);
    rt_st_file f;
    char err[256];
    if (rt_st_parse(copy, len, &f, err, sizeof err)) {
        fprintf(stderr, "elem_at: %s\n", err);
        exit(1);
    }
    const rt_st_tensor *t = rt_st_find(&f, name);
    int64_t at = t ? (const unsigned char *)t->data - f.bytes + 4 * k : -1;
    rt_st_free(&f);
    return at;
}

/* Copy of file `from` as `to` with element k of tensor name set to v. */
static void poke(const char *from, const char *to, const char *name, int64_t k, float v)
{
    int64_t len;
    unsigned char *b = slurp(from, &len);
    int64_t at = elem_at(b, len, name, k);
    memcpy(b + at, &v, 4);
    spit(to, b, len);
    free(b);
}

static void test_nonfinite_and_fallback(void)
{
    /* --init with NaN where only rank 2 reads (a is 6 x 10, rows 2r, 2r+1 on
       rank r): every rank exits 2, rank 2 names the tensor and the index */
    fresh("nf");
    const char *pn = path_of("nf", "nan.safetensors");
    poke(path_of("l1", "final.safetensors"), pn, "a", 4 * 10 + 7, NAN);
    job ji = {1, 1, {"--init", pn, NULL}, -1, -1, 0, -1, 0, 0, 0};
    result res = run(&ji);
    check(all_exit(&ji, &res, 2) && strstr(res.err[2], pn) &&
          strstr(res.err[2], "tensor a holds nan at [4, 7]") && strstr(res.err[0], "another rank"),
          "--init with a NaN at a[4, 7]: 3 ranks exit %d %d %d: %s | %s", res.code[0], res.code[1],
          res.code[2], res.err[2], res.err[0]);
    const char *pi = path_of("nf", "inf.safetensors");
    poke(path_of("l1", "final.safetensors"), pi, "c", 3, -INFINITY);
    job ji2 = {3, 1, {"--init", pi, NULL}, -1, -1, 0, -1, 0, 0, 0};
    res = run(&ji2);
    check(all_exit(&ji2, &res, 2) && strstr(res.err[0], "tensor c holds -inf at [3]"),
          "--init with -inf at c[3], 1 rank: exit %d: %s", res.code[0], res.err[0]);

    /* the newest checkpoint truncated: every rank resumes from step-4, to the
       uninterrupted run's final file */
    copy_dir("l1", "fb");
    unlink(path_of("fb", "final.safetensors"));
    int64_t len;
    unsigned char *b = slurp(path_of("l1", "step-6.safetensors"), &len);
    spit(path_of("fb", "step-6.safetensors"), b, len - 100);
    free(b);
    char fbdir[256], nwdir[256];   /* path_of's buffers are reused */
    snprintf(fbdir, sizeof fbdir, "%s", path_of("fb", ""));
    snprintf(nwdir, sizeof nwdir, "%s", path_of("nw", ""));
    job jr = {2, 6, {"--ckpt-dir", fbdir, "--ckpt-every", "2", "--resume", NULL}, -1, -1, 0, 4, 4,
              4, 0};
    res = run(&jr);
    check(all_exit(&jr, &res, 0) && strstr(res.err[0], "step-6.safetensors") &&
          strstr(res.err[0], "cannot load") &&
          same_file(path_of("l1", "final.safetensors"), path_of("fb", "final.safetensors")),
          "--resume, step-6 truncated: 2 ranks load step-4 and end with the same final file (%s)",
          res.err[0]);
    /* NaN in step-6 where only rank 2 reads: all three fall back together */
    copy_dir("l1", "fb");
    unlink(path_of("fb", "final.safetensors"));
    poke(path_of("l1", "step-6.safetensors"), path_of("fb", "step-6.safetensors"), "a", 5 * 10, NAN);
    job jr3 = jr;
    jr3.layout = 1;
    res = run(&jr3);
    check(all_exit(&jr3, &res, 0) && strstr(res.err[2], "tensor a holds nan at [5, 0]") &&
          strstr(res.err[0], "skipping") && strstr(res.err[0], "trying step-4") &&
          same_file(path_of("l1", "final.safetensors"), path_of("fb", "final.safetensors")),
          "--resume, step-6 with a NaN only rank 2 reads: every rank resumes from step-4 (%s | %s)",
          res.err[2], res.err[0]);
    /* none intact: exit 2 */
    fresh("fb");
    b = slurp(path_of("l1", "step-6.safetensors"), &len);
    spit(path_of("fb", "step-6.safetensors"), b, len - 100);
    spit(path_of("fb", "step-4.safetensors"), b, 40);
    free(b);
    res = run(&jr);
    check(all_exit(&jr, &res, 2) && strstr(res.last[0], "none of the 2 checkpoints") &&
          access(path_of("fb", "final.safetensors"), F_OK) != 0,
          "--resume, step-6 and step-4 both damaged: every rank exits 2, nothing written (%s)",
          res.last[0]);

    /* weights that turn NaN (on rank 1) in step 4: step-4 is not written */
    fresh("nw");
    job jw = {1, 6, {"--ckpt-dir", nwdir, "--ckpt-every", "2", NULL}, -1, -1, 1, -1, 0, 0, 4};
    res = run(&jw);
    static const char *const nw_files[] = {"step-2.safetensors", NULL};
    char why[256] = "";
    check(all_exit(&jw, &res, 1) && dir_is(path_of("nw", ""), nw_files) &&
          file_ok(path_of("nw", "step-2.safetensors"), 3, 2, why, sizeof why) &&
          strstr(res.err[1], "tensor a holds nan") && strstr(res.err[0], "step 4: the weights are "
          "not finite") && strstr(res.err[0], "step-2.safetensors, is intact"),
          "weights NaN in step 4: no step-4, no final; every rank exits 1 (%d %d %d: %s | %s) %s",
          res.code[0], res.code[1], res.code[2], res.err[1], res.err[0], why);
}

int main(void)
{
    snprintf(top, sizeof top, "/tmp/rtckpt-%d", (int)getpid());
    if (mkdir(top, 0700) != 0) {
        perror(top);
        return 1;
    }
    test_write_and_resume();
    test_malformed();
    test_atomicity_and_failures();
    test_nonfinite_and_fallback();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", top);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", top);
    return check_done();
}
