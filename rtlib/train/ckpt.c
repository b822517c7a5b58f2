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
 * one.
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

/* Rank 0: the newest N of DIR/step-N.safetensors, or -1; removes our stale
 * temporary files when clean is set.  0, or an errno. */
static int ck_scan(const char *dir, int clean, int64_t *newest)
{
    *newest = -1;
    DIR *d = opendir(dir);
    if (!d)
        return errno;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t n = ck_step_of(e->d_name);
        if (n > *newest)
            *newest = n;
        if (clean && ck_is_tmp(e->d_name))
            unlinkat(dirfd(d), e->d_name, 0);   /* left by a killed run; best effort */
    }
    closedir(d);
    return 0;
}

void rt_ckpt_init(rt_ctx *ctx)
{
    if (!ctx->ckpt_dir)
        return;
    int err = 0;
    int64_t newest = -1;
    if (ctx->rank == 0) {
        struct stat st;
        if (mkdir(ctx->ckpt_dir, 0755) != 0 && errno != EEXIST)
            err = errno;
        else if (stat(ctx->ckpt_dir, &st) != 0)
            err = errno;
        else if (!S_ISDIR(st.st_mode))
            err = ENOTDIR;
        else
            err = ck_scan(ctx->ckpt_dir, 1, &newest);
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
                                       err, errlen);
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
            bad = !t || rt_st_read_box(ctx, &f[at], t, p->lo, p->hi, ctx->arena + p->off, err, errlen);
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
                                 errlen);
    }
    for (int k = 0; k < opened; k++)
        rt_st_free(&f[k]);
    for (int k = 0; k < nf; k++)
        free(names[k]);
    free(names);
    free(f);
    return bad;
}

/* Every rank: load, then agree; on failure anywhere every rank exits 2. */
static int64_t ck_load_all(rt_ctx *ctx, const char *path, int what, int want_step)
{
    char err[600] = "";
    int64_t step = 0;
    int bad = what == RT_ST_PARAMS && !want_step ? ck_load_init(ctx, path, err, sizeof err)
                                                 : ck_load(ctx, path, what, want_step ? &step : NULL, err, sizeof err);
    if (bad)
        rt_warn(ctx, "cannot load %s: %s", path, err);
    if (rt_comm_any(ctx, bad, RT_COLL_LOAD))
        rt_fatal(ctx, 2, "cannot load %s (%s)", path,
                 bad ? "see above" : "another rank could not: see its message");
    return step;
}

int64_t rt_ckpt_start(rt_ctx *ctx)
{
    int64_t newest = -1;
    if (ctx->resume) {
        /* rank 0 decides, so every rank loads the same file */
        if (ctx->rank == 0) {
            int e = ck_scan(ctx->ckpt_dir, 0, &newest);
            if (e)
                rt_warn(ctx, "--ckpt-dir %s: %s", ctx->ckpt_dir, strerror(e));
        }
        if (ctx->comm)
            rt_comm_broadcast(ctx, &newest, sizeof newest, RT_GROUP_WORLD, 0, 1);
        else if (ctx->net)   /* cuda target: over the TCP control plane */
            rt_net_broadcast(ctx, &newest, sizeof newest, 0);
    }
    if (newest >= 0) {
        char name[32];
        snprintf(name, sizeof name, "%lld", (long long)newest);
        char *path = ck_path(ctx, ctx->ckpt_dir, "step-", name, ".safetensors");
        int64_t step = ck_load_all(ctx, path, RT_ST_PARAMS | RT_ST_STATE, 1);
        if (step != newest)
            rt_fatal(ctx, 2, "checkpoint %s says step %lld in its metadata", path,
                     (long long)step);
        if (ctx->rank == 0 && !ctx->quiet)
            rt_out("resume from %s: step %lld of %lld done\n", path, (long long)step,
                   (long long)ctx->steps);
        free(path);
        return step;
    }
    if (ctx->resume && ctx->rank == 0 && !ctx->quiet)
        rt_out("resume: no checkpoint in %s yet, starting %s\n", ctx->ckpt_dir,
               ctx->init_path ? "from --init" : "at step 0");
    if (ctx->init_path) {
        ck_load_all(ctx, ctx->init_path, RT_ST_PARAMS, 0);
        if (ctx->rank == 0 && !ctx->quiet)
            rt_out("init: params from %s\n", ctx->init_path);
    }
    return 0;
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
        if (!ctx->ckpt_dir)   /* else ck_save has just downloaded the params */
            ck_download(ctx, RT_ST_PARAMS);
        rt_st_write(ctx, ctx->save_path, tmp, RT_ST_PARAMS, meta);
        free(tmp);
    }
}
