/* ckpt.c -- checkpoints: every N steps, --resume, --init, the final weights.
 *
 * A checkpoint is a safetensors file (safetensors.c) of FULL logical
 * tensors by name: the params and the optimizer state (`state` lines, e.g.
 * opt.m.X and opt.v.X), plus __metadata__ {"step": the next step to run,
 * "data_position": the same (the data is a function of the step), "model":
 * the model name}.  Every rank writes only the boxes it is the writer of, so
 * nothing is gathered, and every rank reads only the boxes it holds, so a
 * file written under one plan loads under any other.
 *
 * Layout of --ckpt-dir DIR:
 *   DIR/step-N.safetensors         after step N (1-based count), every --ckpt-every
 *   DIR/final.safetensors          the params at the end of the run
 *   DIR/.step-N.safetensors.tmp    being written (never read; removed at start-up)
 *
 * On the cuda target the params and optimizer state live on the device:
 * saving downloads this rank's boxes to the host arena (the mirror) first,
 * and after loading runtime.c uploads them (rt_first_step).
 *
 * A file appears under its final name only by rename(2) after every writer
 * has fsync'ed its part (rt_st_write), so a rank killed at any moment leaves
 * the previous checkpoints intact, and --resume takes the newest complete
 * one: newest first, the next older when any rank cannot load one (the
 * ranks agree on each, so all go on from the same step).
 *
 * Weights are finite or refused: loading checks every f32 element read
 * (--init, --resume: exit 2 naming the tensor and index), and saving checks
 * the boxes each rank writes first (a non-finite one stops the run, exit 1,
 * nothing written: rt_ckpt_stop, which train.c calls too for a non-finite
 * loss or gradient norm).
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/rt_train.h"

/* "DIR/NAME" into a malloc'ed string. */
static char *ck_path(rt_ctx *ctx, const char *dir, const char *prefix, const char *name,
                     const char *suffix)
{
    size_t len = strlen(dir) + strlen(prefix) + strlen(name) + strlen(suffix) + 2;
    char *p = malloc(len);
    if (!p)
        rt_fatal(ctx, 1, "out of memory");
    snprintf(p, len, "%s/%s%s%s", dir, prefix, name, suffix);
    return p;
}

/* N if name is exactly "step-N.safetensors" (N decimal, no sign or leading
 * zero), else -1. */
static int64_t ck_step_of(const char *name)
{
    static const char suffix[] = ".safetensors";
    if (strncmp(name, "step-", 5) != 0)
        return -1;
    const char *p = name + 5;
    int64_t n = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (n > (INT64_MAX - 9) / 10)
            return -1;
        n = n * 10 + (*p - '0');
    }
    if (!digits || (digits > 1 && name[5] == '0') || strcmp(p, suffix) != 0)
        return -1;
    return n;
}

/* 1 if name is a temporary file of ours: ".NAME.safetensors.tmp". */
static int ck_is_tmp(const char *name)
{
    static const char suffix[] = ".safetensors.tmp";
    size_t n = strlen(name), s = sizeof suffix - 1;
    return name[0] == '.' && n > s + 1 && strcmp(name + n - s, suffix) == 0;
}

/* Compare two steps, the larger first (qsort). */
static int ck_cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* Rank 0: every N of DIR/step-N.safetensors, the newest first, into *steps
 * (malloc'ed, *n of them; NULL when steps is NULL); removes our stale
 * temporary files when clean is set.  0, or an errno. */
static int ck_scan(const char *dir, int clean, int64_t **steps, int64_t *n)
{
    int64_t cap = 0;
    if (steps)
        *steps = NULL, *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return errno;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t k = ck_step_of(e->d_name);
        if (k >= 0 && steps) {
            if (*n == cap) {
                cap = cap ? 2 * cap : 16;
                int64_t *grown = realloc(*steps, sizeof **steps * (size_t)cap);
                RT_ASSERT(grown);
                *steps = grown;
            }
            (*steps)[(*n)++] = k;
        }
        if (clean && ck_is_tmp(e->d_name))
            unlinkat(dirfd(d), e->d_name, 0);   /* left by a killed run; best effort */
    }
    closedir(d);
    if (steps && *n)
        qsort(*steps, (size_t)*n, sizeof **steps, ck_cmp_desc);
    return 0;
}

void rt_ckpt_init(rt_ctx *ctx)
{
    /* --save is written at the end: what can be seen wrong with it now is
       said now, not after the run (a missing directory is found then) */
    struct stat sv;
    if (ctx->save_path && stat(ctx->save_path, &sv) == 0 && !S_ISREG(sv.st_mode))
        rt_fatal(ctx, 2, "--save %s: %s, not a regular file: --save names the safetensors "
                         "file to write (through %s.tmp and a rename)", ctx->save_path,
                 S_ISDIR(sv.st_mode) ? "a directory" : S_ISFIFO(sv.st_mode) ? "a FIFO (named pipe)"
                                                                            : "there is something",
                 ctx->save_path);
    if (!ctx->ckpt_dir)
        return;
    int err = 0;
    if (ctx->rank == 0) {
        struct stat st;
        if (mkdir(ctx->ckpt_dir, 0755) != 0 && errno != EEXIST)
            err = errno;
        else if (stat(ctx->ckpt_dir, &st) != 0)
            err = errno;
        else if (!S_ISDIR(st.st_mode))
            err = ENOTDIR;
        else
            err = ck_scan(ctx->ckpt_dir, 1, NULL, NULL);
        if (err)
            rt_warn(ctx, "--ckpt-dir %s: %s", ctx->ckpt_dir, strerror(err));
    }
    if (rt_comm_any(ctx, err, RT_COLL_LOAD))
        rt_fatal(ctx, 2, "cannot use the checkpoint directory %s%s", ctx->ckpt_dir,
                 err ? "" : " (see rank 0's message)");
}

/* The tensor of file f holding p, checked: same name, dtype and shape.
 * NULL after a message in err. */
static const rt_st_tensor *ck_match(const rt_st_file *f, const rt_param *p, char *err,
                                    size_t errlen)
{
    const rt_st_tensor *t = rt_st_find(f, p->name);
    const char *want = p->dtype == RT_F32 ? "F32" : "I32";
    if (!t) {
        snprintf(err, errlen, "it has no tensor %s", p->name);
        return NULL;
    }
    if (strcmp(t->dtype, want) != 0) {
        snprintf(err, errlen, "tensor %s is %s, expected %s", p->name, t->dtype, want);
        return NULL;
    }
    int same = t->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++)
        same = t->shape[d] == p->shape[d];
    if (!same) {
        char got[160] = "", exp[160] = "";
        for (int d = 0, o = 0; d < t->ndim && o < 150; d++)
            o += snprintf(got + o, sizeof got - (size_t)o, "%s%lld", d ? "," : "",
                          (long long)t->shape[d]);
        for (int d = 0, o = 0; d < p->ndim && o < 150; d++)
            o += snprintf(exp + o, sizeof exp - (size_t)o, "%s%lld", d ? "," : "",
                          (long long)p->shape[d]);
        snprintf(err, errlen, "tensor %s has shape [%s], expected [%s]", p->name, got, exp);
        return NULL;
    }
    return t;
}

/* A non-negative decimal integer metadata value of f, or -1. */
static int64_t ck_meta_int(const rt_st_file *f, const char *key)
{
    const char *v = rt_st_meta(f, key);
    if (!v || !*v)
        return -1;
    int64_t n = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9' || n > (INT64_MAX - 9) / 10)
            return -1;
        n = n * 10 + (*p - '0');
    }
    return n;
}

/* 1 if the f32 element at p is NaN or infinite (all exponent bits set). */
static inline int ck_nonfinite_at(const char *p)
{
    uint32_t u;
    memcpy(&u, p, 4);
    return (u & 0x7f800000u) == 0x7f800000u;
}

/* Every element of this rank's box of p (f32; just loaded into the arena)
 * finite: 0; else 1 with the first other one, by its index in the full
 * tensor, in err. */
static int ck_finite(const rt_ctx *ctx, const rt_param *p, char *err, size_t errlen)
{
    if (p->dtype != RT_F32)
        return 0;
    const char *x = ctx->arena + p->off;
    int64_t n = rt_box_numel(p->ndim, p->lo, p->hi), q = 0;
    for (int64_t b = 0; b < n; b += 4096) {   /* blocks without a branch per element */
        int64_t e = b + 4096 < n ? b + 4096 : n;
        int bad = 0;
        for (int64_t k = b; k < e; k++)
            bad |= ck_nonfinite_at(x + 4 * k);
        if (bad) {
            for (q = b; !ck_nonfinite_at(x + 4 * q); q++)
                ;
            break;
        }
        q = n;
    }
    if (q >= n)
        return 0;
    float v;
    memcpy(&v, x + 4 * q, 4);
    char at[200] = "";
    int64_t rest = q, idx[RT_MAXDIM];
    for (int d = p->ndim - 1; d >= 0; d--) {   /* box-local row-major -> the tensor's index */
        int64_t ext = p->hi[d] - p->lo[d];
        idx[d] = p->lo[d] + rest % ext;
        rest /= ext;
    }
    for (int d = 0, o = 0; d < p->ndim && o < 180; d++)
        o += snprintf(at + o, sizeof at - (size_t)o, "%s%lld", d ? ", " : "", (long long)idx[d]);
    snprintf(err, errlen, "tensor %s holds %s at [%s] (the first non-finite element of this "
                          "rank's part): weights must be finite numbers", p->name,
             v != v ? "nan" : v > 0 ? "inf" : "-inf", at);
    return 1;
}

/* Load this rank's boxes of `what` from path into the arena; *step gets the
 * metadata step when step is not NULL.  0, or 1 with a message in err. */
static int ck_load(rt_ctx *ctx, const char *path, int what, int64_t *step, char *err,
                   size_t errlen)
{
    rt_st_file f;
    if (rt_st_open_header(path, &f, err, errlen))
        return 1;
    int bad = 0;
    const char *model = rt_st_meta(&f, "model");
    if (model && strcmp(model, ctx->man.model) != 0) {
        snprintf(err, errlen, "it holds model '%s', this program is model '%s'", model,
                 ctx->man.model);
        bad = 1;
    }
    if (!bad && step && (*step = ck_meta_int(&f, "step")) < 0) {
        snprintf(err, errlen, "its __metadata__ has no valid \"step\" (not a checkpoint?)");
        bad = 1;
    }
    for (int s = 0; s < 2 && !bad; s++) {
        if (!(what & (s ? RT_ST_STATE : RT_ST_PARAMS)))
            continue;
        const rt_param *ps = s ? ctx->man.states : ctx->man.params;
        int n = s ? ctx->man.nstates : ctx->man.nparams;
        for (int k = 0; k < n && !bad; k++) {
            const rt_st_tensor *t = ck_match(&f, &ps[k], err, errlen);
            bad = !t || rt_st_read_box(ctx, &f, t, ps[k].lo, ps[k].hi, ctx->arena + ps[k].off,
                                       err, errlen) || ck_finite(ctx, &ps[k], err, errlen);
        }
    }
    rt_st_free(&f);
    return bad;
}

/* The files --init reads: path itself, or every *.safetensors file in the
 * directory path (a sharded checkpoint), in name order.  Their count, or -1
 * with a message in err; *names malloc'ed (free each, then the array). */
static int ck_init_files(const char *path, char ***names, char *err, size_t errlen)
{
    struct stat st;
    *names = NULL;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        *names = malloc(sizeof **names);
        RT_ASSERT(*names);
        (*names)[0] = strdup(path);
        RT_ASSERT((*names)[0]);
        return 1;
    }
    struct dirent **ents;
    int ne = scandir(path, &ents, NULL, alphasort), n = 0;
    if (ne < 0) {
        snprintf(err, errlen, "cannot read the directory %s: %s", path, strerror(errno));
        return -1;
    }
    *names = malloc(sizeof **names * (size_t)(ne ? ne : 1));
    RT_ASSERT(*names);
    for (int k = 0; k < ne; k++) {
        size_t l = strlen(ents[k]->d_name);
        if (l > 12 && !strcmp(ents[k]->d_name + l - 12, ".safetensors") && ents[k]->d_name[0] != '.')
            (*names)[n++] = ck_path(NULL, path, "", ents[k]->d_name, "");
        free(ents[k]);
    }
    free(ents);
    if (!n) {
        snprintf(err, errlen, "the directory %s holds no .safetensors file", path);
        free(*names);
        *names = NULL;
        return -1;
    }
    return n;
}

/* "FILE: " before the message in err (a file of a sharded --init directory). */
static void ck_prefix(char *err, size_t errlen, const char *file)
{
    size_t fl = strlen(file) + 2, el = strlen(err);
    if (fl + 1 >= errlen)
        return;   /* no room: the message alone */
    if (fl + el + 1 > errlen)
        el = errlen - fl - 1;   /* its end cut */
    memmove(err + fl, err, el);
    err[fl + el] = 0;
    memcpy(err, file, fl - 2);
    memcpy(err + fl - 2, ": ", 2);
}

/* --init: this rank's param boxes from the file(s) at path, each param by
 * its own name (a checkpoint or the final weights of this model, f32), or
 * else by its import name (F32, BF16 or F16, transposed where the manifest
 * says; a Hugging Face checkpoint).  0, or 1 with a message in err. */
static int ck_load_init(rt_ctx *ctx, const char *path, char *err, size_t errlen)
{
    char **names;
    int nf = ck_init_files(path, &names, err, errlen), bad = nf < 0;
    rt_st_file *f = calloc((size_t)(nf > 0 ? nf : 1), sizeof *f);
    RT_ASSERT(f);
    int opened = 0;   /* files 0 .. opened-1 are open */
    for (int k = 0; k < nf && !bad; k++) {
        if ((bad = rt_st_open_header(names[k], &f[k], err, errlen)))
            break;
        opened++;
        const char *model = rt_st_meta(&f[k], "model");
        if (model && strcmp(model, ctx->man.model) != 0) {
            snprintf(err, errlen, "%s holds model '%s', this program is model '%s'", names[k], model,
                     ctx->man.model);
            bad = 1;
        }
    }
    for (int k = 0; k < ctx->man.nparams && !bad; k++) {
        const rt_param *p = &ctx->man.params[k];
        int at = -1, imp = 0;
        for (int q = 0; q < nf && at < 0; q++)
            if (rt_st_find(&f[q], p->name))
                at = q;
        for (int q = 0; q < nf && at < 0 && p->import[0]; q++)
            if (rt_st_find(&f[q], p->import))
                at = q, imp = 1;
        if (at < 0) {
            snprintf(err, errlen, "%s no tensor %s%s%s", nf > 1 ? "its files hold" : "it has", p->name,
                     p->import[0] ? " or " : "", p->import);
            bad = 1;
            break;
        }
        if (!imp) {
            const rt_st_tensor *t = ck_match(&f[at], p, err, errlen);
            bad = !t || rt_st_read_box(ctx, &f[at], t, p->lo, p->hi, ctx->arena + p->off, err, errlen) ||
                  ck_finite(ctx, p, err, errlen);
            if (bad && nf > 1)   /* a sharded checkpoint: which file */
                ck_prefix(err, errlen, names[at]);
            continue;
        }
        const rt_st_tensor *t = rt_st_find(&f[at], p->import);
        if (p->dtype != RT_F32 ||
            (strcmp(t->dtype, "F32") && strcmp(t->dtype, "BF16") && strcmp(t->dtype, "F16"))) {
            snprintf(err, errlen, "tensor %s (for %s) is %s; an imported param loads from F32, BF16 or F16",
                     p->import, p->name, t->dtype);
            bad = 1;
            break;
        }
        int same = t->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++)
            same = t->shape[d] == p->shape[p->import_t ? p->ndim - 1 - d : d];
        if (!same) {
            char got[160] = "", exp[160] = "";
            for (int d = 0, o = 0; d < t->ndim && o < 150; d++)
                o += snprintf(got + o, sizeof got - (size_t)o, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            for (int d = 0, o = 0; d < p->ndim && o < 150; d++)
                o += snprintf(exp + o, sizeof exp - (size_t)o, "%s%lld", d ? "," : "",
                              (long long)p->shape[p->import_t ? p->ndim - 1 - d : d]);
            snprintf(err, errlen, "tensor %s (for %s) has shape [%s], expected [%s]%s", p->import, p->name, got,
                     exp, p->import_t ? " (the param transposed)" : "");
            bad = 1;
            break;
        }
        bad = rt_st_read_box_f32(ctx, &f[at], t, p->lo, p->hi, p->import_t, (float *)(ctx->arena + p->off), err,
                                 errlen) ||
              ck_finite(ctx, p, err, errlen);
        if (bad && nf > 1)
            ck_prefix(err, errlen, names[at]);
    }
    for (int k = 0; k < opened; k++)
        rt_st_free(&f[k]);
    for (int k = 0; k < nf; k++)
        free(names[k]);
    free(names);
    free(f);
    return bad;
}

/* Every rank: --init's params from path, then agree; on failure anywhere
 * every rank exits 2. */
static void ck_load_init_all(rt_ctx *ctx, const char *path)
{
    char err[600] = "";
    int bad = ck_load_init(ctx, path, err, sizeof err);
    if (bad)
        rt_warn(ctx, "--init %s: cannot load: %s", path, err);
    if (rt_comm_any(ctx, bad, RT_COLL_LOAD))
        rt_fatal(ctx, 2, "--init %s: cannot load it (%s)", path,
                 bad ? "see above" : "another rank could not: see its message");
}

/* Rank 0's list of checkpoint steps, newest first, on every rank (malloc'ed,
 * *n of them). */
static int64_t *ck_share_list(rt_ctx *ctx, int64_t *n)
{
    int64_t *steps = NULL;
    *n = 0;
    if (ctx->rank == 0) {
        int e = ck_scan(ctx->ckpt_dir, 0, &steps, n);
        if (e)
            rt_warn(ctx, "--ckpt-dir %s: %s", ctx->ckpt_dir, strerror(e));
    }
    if (ctx->comm)
        rt_comm_broadcast(ctx, n, sizeof *n, RT_GROUP_WORLD, 0, 1);
    else if (ctx->net)   /* cuda target: over the TCP control plane */
        rt_net_broadcast(ctx, n, sizeof *n, 0);
    if (ctx->rank != 0 && *n > 0) {
        steps = malloc(sizeof *steps * (size_t)*n);
        RT_ASSERT(steps);
    }
    if (*n > 0 && ctx->comm)
        rt_comm_broadcast(ctx, steps, (int64_t)sizeof *steps * *n, RT_GROUP_WORLD, 0, 1);
    else if (*n > 0 && ctx->net)
        rt_net_broadcast(ctx, steps, (int64_t)sizeof *steps * *n, 0);
    return steps;
}

/* --resume: the newest checkpoint every rank loads, trying the older ones
 * when one does not (each rank reads only its boxes, so the ranks agree on
 * each file: all go on from the same step).  The step reached, or -1 when
 * DIR holds no checkpoint; exits 2 when it holds some and none loads. */
static int64_t ck_resume(rt_ctx *ctx)
{
    int64_t n;
    int64_t *steps = ck_share_list(ctx, &n);
    for (int64_t k = 0; k < n; k++) {
        char name[32], err[600] = "";
        snprintf(name, sizeof name, "%lld", (long long)steps[k]);
        char *path = ck_path(ctx, ctx->ckpt_dir, "step-", name, ".safetensors");
        int64_t step = -1;
        int bad = ck_load(ctx, path, RT_ST_PARAMS | RT_ST_STATE, &step, err, sizeof err);
        if (!bad && step != steps[k]) {
            snprintf(err, sizeof err, "its metadata says step %lld", (long long)step);
            bad = 1;
        }
        if (bad)
            rt_warn(ctx, "--resume: cannot load %s: %s", path, err);
        int any = rt_comm_any(ctx, bad, RT_COLL_LOAD);
        if (any && ctx->rank == 0 && k + 1 < n)
            rt_warn(ctx, "--resume: skipping %s (%s); trying step-%lld, the newest before it",
                     path, bad ? "above" : "another rank could not load it: see its message",
                     (long long)steps[k + 1]);
        if (!any) {
            if (ctx->rank == 0 && !ctx->quiet)
                rt_out("resume from %s: step %lld of %lld done%s\n", path, (long long)step,
                       (long long)ctx->steps,
                       step >= ctx->steps ? ": no step left to run" : "");
            free(path);
            free(steps);
            return step;
        }
        free(path);
    }
    free(steps);
    if (n > 0)
        rt_fatal(ctx, 2, "--resume: none of the %lld checkpoint%s in %s loads (see above): move "
                         "the damaged files away to start afresh, or start from a file with "
                         "--init", (long long)n, n == 1 ? "" : "s", ctx->ckpt_dir);
    return -1;
}

int64_t rt_ckpt_start(rt_ctx *ctx)
{
    int64_t step = ctx->resume ? ck_resume(ctx) : -1;
    if (step >= 0)
        return step;
    if (ctx->resume && ctx->rank == 0 && !ctx->quiet)
        rt_out("resume: no checkpoint in %s yet, starting %s\n", ctx->ckpt_dir,
               ctx->init_path ? "from --init" : "at step 0");
    if (ctx->init_path) {
        ck_load_init_all(ctx, ctx->init_path);
        if (ctx->rank == 0 && !ctx->quiet)
            rt_out("init: params from %s\n", ctx->init_path);
    }
    return 0;
}

void rt_ckpt_stop(rt_ctx *ctx, int64_t step, const char *what)
{
    /* the newest checkpoint this run has: the last one due before the step,
       else the one it resumed from (the files are written only after every
       rank has passed the step's checks, so it is intact) */
    int64_t last = ctx->ckpt_every > 0 ? step / ctx->ckpt_every * ctx->ckpt_every : 0;
    if (last < ctx->first_step && ctx->resume)
        last = ctx->first_step;
    char kept[600];
    if (ctx->ckpt_dir && last > 0)
        snprintf(kept, sizeof kept, "the newest checkpoint, %s/step-%lld.safetensors, is intact: "
                 "--resume goes on from it (with a lower lr, or [train] clip)", ctx->ckpt_dir,
                 (long long)last);
    else
        snprintf(kept, sizeof kept, "this run has written no checkpoint yet");
    rt_fatal(ctx, 1, "step %lld: %s: training stopped, and no checkpoint, final or --save file "
                     "of these weights is written; %s", (long long)step + 1, what, kept);
}

/* Every rank, before a checkpoint, the final weights or --save of step
 * `step` (its count of steps done): the boxes it writes of `what` must be
 * finite; where one is not, its rank names the element and every rank stops
 * (rt_ckpt_stop). */
static void ck_check_weights(rt_ctx *ctx, int what, int64_t step)
{
    char err[600] = "";
    int bad = 0;
    for (int s = 0; s < 2 && !bad; s++) {
        if (!(what & (s ? RT_ST_STATE : RT_ST_PARAMS)))
            continue;
        const rt_param *ps = s ? ctx->man.states : ctx->man.params;
        int n = s ? ctx->man.nstates : ctx->man.nparams;
        for (int k = 0; k < n && !bad; k++)
            bad = ps[k].writer && ck_finite(ctx, &ps[k], err, sizeof err);
    }
    if (bad)
        rt_warn(ctx, "after step %lld: %s", (long long)step, err);
    if (rt_comm_any(ctx, bad, RT_COLL_SAVE))
        rt_ckpt_stop(ctx, step - 1, bad ? "the weights are not finite (above)"
                                        : "the weights are not finite (another rank's message)");
}

/* Cuda target: copy this rank's boxes of `what` (RT_ST_*) from the device
 * to the mirror, which rt_st_write reads.  Nothing on the cpu target. */
static void ck_download(rt_ctx *ctx, int what)
{
    if (!ctx->dev)
        return;
    for (int s = 0; s < 2; s++) {
        if (!(what & (s ? RT_ST_STATE : RT_ST_PARAMS)))
            continue;
        const rt_param *ps = s ? ctx->man.states : ctx->man.params;
        int n = s ? ctx->man.nstates : ctx->man.nparams;
        for (int k = 0; k < n; k++)
            rt_dev_download(ctx, ps[k].off, 4 * rt_box_numel(ps[k].ndim, ps[k].lo, ps[k].hi));
    }
}

/* Every rank: write DIR/NAME (through DIR/.NAME.tmp) with `what` and the
 * step in the metadata (the mirror downloaded first on the cuda target). */
static void ck_save(rt_ctx *ctx, const char *dir, const char *name, int what, int64_t step)
{
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)step);
    char *path = ck_path(ctx, dir, "", name, "");
    char *tmp = ck_path(ctx, dir, ".", name, ".tmp");
    const char *meta[] = {"data_position", num, "model", ctx->man.model, "step", num, NULL};
    double t0 = rt_now();
    ck_download(ctx, what);
    ck_check_weights(ctx, what, step);
    rt_st_write(ctx, path, tmp, what, meta);
    if (ctx->rank == 0 && !ctx->quiet)
        rt_out("checkpoint %s (%.0f ms)\n", path, (rt_now() - t0) * 1e3);
    free(path);
    free(tmp);
}

void rt_ckpt_step(rt_ctx *ctx, int64_t step)
{
    if (!ctx->ckpt_dir || ctx->ckpt_every <= 0 || (step + 1) % ctx->ckpt_every != 0)
        return;
    char name[48];
    snprintf(name, sizeof name, "step-%lld.safetensors", (long long)step + 1);
    ck_save(ctx, ctx->ckpt_dir, name, RT_ST_PARAMS | RT_ST_STATE, step + 1);
}

void rt_ckpt_finish(rt_ctx *ctx)
{
    int64_t step = ctx->first_step > ctx->steps ? ctx->first_step : ctx->steps;
    if (ctx->ckpt_dir)
        ck_save(ctx, ctx->ckpt_dir, "final.safetensors", RT_ST_PARAMS, step);
    if (ctx->save_path) {
        char num[32];
        snprintf(num, sizeof num, "%lld", (long long)step);
        size_t plen = strlen(ctx->save_path);
        char *tmp = malloc(plen + 5);
        if (!tmp)
            rt_fatal(ctx, 1, "out of memory");
        memcpy(tmp, ctx->save_path, plen);
        memcpy(tmp + plen, ".tmp", 5);
        const char *meta[] = {"model", ctx->man.model, "step", num, NULL};
        if (!ctx->ckpt_dir) {   /* else ck_save has just downloaded and checked the params */
            ck_download(ctx, RT_ST_PARAMS);
            ck_check_weights(ctx, RT_ST_PARAMS, step);
        }
        rt_st_write(ctx, ctx->save_path, tmp, RT_ST_PARAMS, meta);
        free(tmp);
    }
}
