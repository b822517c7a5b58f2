/* driver.c -- the pipeline, in a straight line (like QBE's main):
 *
 *   fe_load -> pass_autograd -> pass_plan -> pass_split -> pass_comm ->
 *   pass_schedule -> per rank: pass_memplan -> pass_lower -> pass_fuse ->
 *   pass_outline -> pass_share (ranks of equal shape share a program) ->
 *   [cuda: cg_cuda_build_source -> cg_nvrtc_compile, once for the build] ->
 *   per shared program: cg_host -> cg_dispatch -> cg_link (out/rank, and
 *   out/rankK links to it) -> cg_emit (launch, plan.txt)
 *
 * Verifiers run after every pass; --dump=P prints the IR after pass P.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codegen.h"
#include "cuda.h"
#include "fe_priv.h"
#include "frontend.h"
#include "passes.h"

/* policy = auto's graph source: o's spec and --set, folded (passes/search.c). */
static int search_load(void *ctx, int64_t batch_div, int layers, ir_graph *g)
{
    const fe_opts *o = ctx;
    return fe_load_fold(o->spec, o->sets, o->nset, batch_div, layers, g);
}

int fe_search(const fe_opts *o, ir_graph *g)
{
    pass_src src = {search_load, (void *)o, o->verbose};
    return pass_search(&src, g);
}

int fe_estimate(const char *spec, const char *const *sets, int nset, double *step)
{
    ir_graph g;
    if (fe_load(spec, sets, nset, &g)) return 2;
    int rc = pass_search_estimate(&g, step);
    ir_graph_free(&g);
    return rc;
}

static const char *const dump_names[] = {"graph", "autograd", "plan", "comm", "schedule", "lower", "prog", "share"};

/* Is pass P asked for in the --dump list? */
static int want(const fe_opts *o, const char *p)
{
    if (!o->dump) return 0;
    size_t n = strlen(p);
    for (const char *s = o->dump; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if ((len == n && strncmp(s, p, n) == 0) || (len == 3 && strncmp(s, "all", 3) == 0)) return 1;
        s += len + (e != NULL);
    }
    return 0;
}

/* Does the compile stop after pass P (--stop-after)? */
static int stop_after(const fe_opts *o, const char *p) { return o->stop_after && strcmp(o->stop_after, p) == 0; }

/* Every name in the --dump list is a pass. */
static int check_dump(const fe_opts *o)
{
    for (const char *s = o->dump; s && *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int ok = len == 3 && strncmp(s, "all", 3) == 0;
        for (size_t i = 0; i < sizeof dump_names / sizeof *dump_names; i++)
            ok |= strlen(dump_names[i]) == len && strncmp(s, dump_names[i], len) == 0;
        if (!ok) {
            static const char *const all[] = {"graph", "autograd", "plan", "comm", "schedule", "lower", "prog",
                                              "share", "all"};
            char word[64];
            snprintf(word, sizeof word, "%.*s", (int)(len < 63 ? len : 63), s);
            int k = fe_closest(word, all, 9);
            fprintf(stderr, "nnsc-aot: error: --dump: unknown pass '%.*s'\n  hint: %s%s%sone of graph autograd plan "
                            "comm schedule lower prog share all\n", (int)len, s, k >= 0 ? "did you mean '" : "",
                    k >= 0 ? all[k] : "", k >= 0 ? "'? " : "");
            return 2;
        }
        s += len + (e != NULL);
    }
    return 0;
}

static void dump(const char *pass, ir_buf *b)
{
    printf("## %s\n%s", pass, b->s ? b->s : "");
    fflush(stdout);
    ir_buf_free(b);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Time of the last phase, shown with -v. */
static void tick(const fe_opts *o, double *t0, const char *what)
{
    double t = now();
    if (o->verbose) fprintf(stderr, "nnsc-aot: %-10s %8.1f ms\n", what, 1e3 * (t - *t0));
    *t0 = t;
}

static int mkdir_p(const char *dir)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return 1;
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0777) && errno != EEXIST) return 1;
            *p = '/';
        }
    if (mkdir(buf, 0777) && errno != EEXIST) return 1;
    struct stat st;
    return stat(buf, &st) || !S_ISDIR(st.st_mode);
}

/* Write text to path; 0, or 1 after a message. */
static int write_text(const char *path, const ir_buf *text)
{
    FILE *f = fopen(path, "w");
    int bad = !f || fwrite(text->s, 1, text->n, f) != text->n;
    if (f) bad |= fclose(f) != 0;
    if (bad) fprintf(stderr, "nnsc-aot: error: cannot write %s: %s\n", path, strerror(errno));
    return bad;
}

/* The generated kernels of fused chains in progs: distinct ids (i[0]) of
 * the ew instructions (cuda.c makes one nnsc_ew_<id> per id). */
static int count_fused(const ir_prog *progs, int nprogs)
{
    int64_t *ids = NULL;
    int n = 0, cap = 0;
    for (int r = 0; r < nprogs; r++)
        for (int sec = 0; sec < IR_SEC_COUNT; sec++)
            for (int i = 0, k = 0;;) {   /* bodies of calls included */
                const pg_instr *in = ir_prog_walk(&progs[r], sec, &i, &k);
                if (!in) break;
                if (in->kernel != RT_K_ew || in->nint < 1) continue;
                int seen = 0;
                for (int j = 0; j < n && !seen; j++) seen = ids[j] == in->ints[0].c;
                if (!seen) *IR_PUSH(ids, n, cap) = in->ints[0].c;
            }
    free(ids);
    return n;
}

/* The cuda target's kernels, once for the whole build: the CUDA C source
 * (the library and one kernel per fused chain), written to
 * DIR/kernels/nnsc_kernels.cu with --emit-kernels (before compiling, so a
 * failure leaves it to read), and compiled by NVRTC for every --arch into
 * gpu (its cubin array is the caller's to free).  Returns 0, or 1 after a
 * message (NVRTC failed, a file could not be written), or 2 (no NVRTC). */
/* Whether CUDA file path has NNSC_CUSTOM_CUDA(name) (blanks allowed inside the parentheses). */
static int defines_cuda_kernel(const char *path, const char *name)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    size_t n = strlen(name);
    while (!found && fgets(line, sizeof line, f))
        for (const char *p = strstr(line, "NNSC_CUSTOM_CUDA("); p && !found; p = strstr(p + 1, "NNSC_CUSTOM_CUDA(")) {
            const char *q = p + strlen("NNSC_CUSTOM_CUDA(");
            while (*q == ' ' || *q == '\t') q++;
            if (strncmp(q, name, n)) continue;
            q += n;
            while (*q == ' ' || *q == '\t') q++;
            found = *q == ')';
        }
    fclose(f);
    return found;
}

/* The cuda target: every custom op's launch fits the argument block (at most
 * RT_CUDA_CUSTOM_MAXOPS operands, RT_CUDA_MAXINT ints: 4 + per operand 1 + its
 * rank).  0, or 2 after a message at the section. */
static int custom_fits_launch(const ir_graph *g, const ir_prog *progs, int nprogs)
{
    for (int r = 0; r < nprogs; r++)
        for (int sec = 0; sec < IR_SEC_COUNT; sec++)
            for (int x = 0, k = 0;;) {
                const pg_instr *in = ir_prog_walk(&progs[r], sec, &x, &k);
                if (!in) break;
                if (in->kernel != RT_K_custom || (in->nbuf <= RT_CUDA_CUSTOM_MAXOPS && in->nint <= RT_CUDA_MAXINT)) continue;
                const ir_custom *c = &g->cust[in->ints[0].c];
                return pass_error(g, c->line, "on the cuda target a custom op takes at most 9 operands, inputs and "
                                  "outputs together (docs/custom-ops.md)",
                                  "custom op '%s' has %d operands and %d ints of arguments: too many for a CUDA "
                                  "launch", c->name, in->nbuf, in->nint);
            }
    return 0;
}

/* Compile the CUDA C src for every --arch, one at a time (a failure names
 * the one that failed), into cubin[0 .. o->narch); cust[0 .. ncust) are the
 * custom sections whose files the source holds (an error there is the
 * spec's), srcnote and srcpath say where the generated source is for an
 * error in ours.  0; 2 (bad input: no toolkit, an architecture NVRTC does
 * not know, a custom file that does not compile) or 1 after a message. */
int fe_nvrtc(const fe_opts *o, const char *src, const ir_custom *cust, int ncust, const char *srcnote,
             const char *srcpath, struct cg_cubin *cubin)
{
    char err[16384];
    int nv = CG_NVRTC_OK, a = 0, rc = 0;
    for (; nv == CG_NVRTC_OK && a < o->narch; a++)
        nv = cg_nvrtc_compile(src, (const char *const *)&o->archs[a], 1, &cubin[a], err, sizeof err);
    if (nv == CG_NVRTC_MISSING) {
        fprintf(stderr, "nnsc-aot: error: --target cuda: %s\n", err);
        rc = 2;
    } else if (nv != CG_NVRTC_OK && strstr(err, "NVRTC_ERROR_INVALID_OPTION")) {
        /* the options are fixed but for the architecture: NVRTC does not know it */
        int major = 0, minor = 0;
        cg_nvrtc_version(&major, &minor);
        fprintf(stderr, "nnsc-aot: error: --arch: NVRTC %d.%d cannot compile for %s\n"
                        "  hint: name architectures this CUDA toolkit knows (nvcc --list-gpu-code lists them), "
                        "e.g. sm_80,sm_90\n", major, minor, o->archs[a - 1]);
        rc = 2;
    } else if (nv != CG_NVRTC_OK) {
        /* an error in a custom op's CUDA file is the spec's (NVRTC's log names the file and line) */
        const char *user = NULL;
        for (int k = 0; k < ncust && !user; k++)
            if (cust[k].cuda && strstr(err, cust[k].cuda)) user = cust[k].cuda;
        if (user) {
            fprintf(stderr, "nnsc-aot: error: a custom op's CUDA kernel (%s) does not compile:\n%s\n"
                            "  hint: fix the file at the lines NVRTC names; it is compiled with the library's "
                            "types and NNSC_CUSTOM_CUDA, no #include (docs/custom-ops.md)\n", user, err);
            rc = 2;
        } else {
            fprintf(stderr, "nnsc-aot: error: NVRTC could not compile the CUDA kernels (%s%s):\n%s\n", srcnote,
                    srcpath, err);
            rc = 1;
        }
    }
    /* the kernels compile without a warning: one is worth seeing */
    for (int k = 0; !rc && !o->quiet && k < o->narch; k++)
        if (cubin[k].log && cubin[k].log[0])
            fprintf(stderr, "nnsc-aot: warning: NVRTC's log for %s:\n%s\n", cubin[k].arch, cubin[k].log);
    return rc;
}

static int build_kernels(const fe_opts *o, const ir_prog *progs, int nprogs, cg_gpu *gpu, double *t0)
{
    ir_buf src = {0};
    cg_cuda_build_source(&src, progs, nprogs);
    int rc = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/kernels/%s", o->out, CG_CUDA_SRC_NAME);
    if (o->emit_kernels) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/kernels", o->out);
        if (mkdir_p(dir)) {
            fprintf(stderr, "nnsc-aot: error: cannot create directory '%s': %s\n", dir, strerror(errno));
            rc = 1;
        }
        if (!rc) rc = write_text(path, &src);
    }
    cg_cubin *cubin = ir_xcalloc((size_t)o->narch, sizeof *cubin);
    if (!rc) rc = fe_nvrtc(o, src.s, nprogs > 0 ? progs[0].cust : NULL, nprogs > 0 ? progs[0].ncust : 0,
                           o->emit_kernels ? "the source is in " : "--emit-kernels writes the source to ", path, cubin);
    tick(o, t0, "nvrtc");
    *gpu = (cg_gpu){cubin, o->narch, (int64_t)src.n, count_fused(progs, nprogs)};
    if (!rc && o->verbose) {
        int major = 0, minor = 0;
        cg_nvrtc_version(&major, &minor);
        fprintf(stderr, "nnsc-aot: NVRTC %d.%d: %lld bytes of CUDA C, %d fused kernel%s; cubins", major, minor,
                (long long)gpu->src_bytes, gpu->nfused, gpu->nfused == 1 ? "" : "s");
        for (int k = 0; k < o->narch; k++) fprintf(stderr, " %s %zu bytes", cubin[k].arch, cubin[k].size);
        fprintf(stderr, "\n");
    }
    ir_buf_free(&src);
    return rc;
}

/* The code generation of the shared programs, by the worker threads. */
typedef struct cg_work {
    const fe_opts *o;          /* options */
    const ir_prog *progs;      /* the shared programs */
    int n;                     /* how many */
    const cg_gpu *gpu;         /* the cuda target's images, or NULL */
    atomic_int next;           /* the next program to take */
    atomic_int done;           /* programs finished (progress) */
    atomic_int failed;         /* set when any failed: the others stop taking work */
    int *rc;                   /* per program: 0, or the failure */
    pthread_mutex_t out;       /* one progress line at a time */
} cg_work;

/* Generate and optimise shared program k into DIR/prog<k>.o (and .ll with
 * --emit-llvm), one LLVM context per call. */
static int build_prog(cg_work *w, int k)
{
    const fe_opts *o = w->o;
    char obj[4200], ll[4200];
    snprintf(obj, sizeof obj, "%s/prog%d.o", o->out, k);
    snprintf(ll, sizeof ll, "%s/prog%d.ll", o->out, k);
    cg_opts co = {o->cpu, "", o->opt_level, o->emit_llvm, k};
    return w->gpu ? cg_host_cuda(&w->progs[k], &co, w->gpu, obj, o->emit_llvm ? ll : NULL)
                  : cg_host(&w->progs[k], &co, obj, o->emit_llvm ? ll : NULL);
}

/* A worker: take programs in order until none is left or one failed. */
static void *build_worker(void *arg)
{
    cg_work *w = arg;
    int tty = isatty(2);
    for (int k; !atomic_load(&w->failed) && (k = atomic_fetch_add(&w->next, 1)) < w->n;) {
        w->rc[k] = build_prog(w, k);
        if (w->rc[k]) atomic_store(&w->failed, 1);
        int d = atomic_fetch_add(&w->done, 1) + 1;
        /* progress of the long phase: a line per program with -v, one updated line on a terminal */
        pthread_mutex_lock(&w->out);
        if (w->o->verbose)
            fprintf(stderr, "nnsc-aot: codegen program %d (%d ranks) (%d/%d done)\n", k, w->progs[k].nmember, d,
                    w->n);
        else if (!w->o->quiet && tty) fprintf(stderr, "\rnnsc-aot: codegen %d/%d", d, w->n);
        pthread_mutex_unlock(&w->out);
    }
    return NULL;
}

/* How many threads for n units of work (ranks to lower, programs to
 * generate): $NNSC_JOBS, else the CPUs online, at most n.  A unit's result
 * depends on nothing else, so the files are the same for any count. */
static int codegen_jobs(int nprogs)
{
    const char *e = getenv("NNSC_JOBS");
    long j = e && *e ? strtol(e, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    if (j < 1) j = 1;
    if (j > 64) j = 64;
    return j > nprogs ? nprogs : (int)j;
}

/* Generate every shared program on `codegen_jobs` threads; 0 or the first
 * failing program's status. */
static int build_all(const fe_opts *o, const ir_prog *progs, int n, const cg_gpu *gpu)
{
    cg_work w = {.o = o, .progs = progs, .n = n, .gpu = gpu, .rc = ir_xcalloc((size_t)n + 1, sizeof(int))};
    atomic_init(&w.next, 0);
    atomic_init(&w.done, 0);
    atomic_init(&w.failed, 0);
    pthread_mutex_init(&w.out, NULL);
    int jobs = codegen_jobs(n);
    pthread_t th[64];
    int started = 0;
    for (int t = 1; t < jobs; t++)
        if (pthread_create(&th[started], NULL, build_worker, &w) == 0) started++;
    build_worker(&w);
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    pthread_mutex_destroy(&w.out);
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) rc = w.rc[k];
    if (!rc && atomic_load(&w.failed)) rc = 1;
    free(w.rc);
    return rc;
}

/* path2 becomes another name of path1 (a hard link; a copy where the file
 * system has none).  0, or 1 after a message. */
static int same_file_as(const char *path1, const char *path2)
{
    remove(path2);
    if (link(path1, path2) == 0) return 0;
    FILE *in = fopen(path1, "rb"), *out = in ? fopen(path2, "wb") : NULL;
    int bad = !in || !out;
    char buf[1 << 16];
    for (size_t n; !bad && (n = fread(buf, 1, sizeof buf, in)) > 0;) bad = fwrite(buf, 1, n, out) != n;
    if (in) bad |= ferror(in), fclose(in);
    if (out) bad |= fclose(out) != 0;
    if (!bad) bad = chmod(path2, 0755) != 0;
    if (bad) fprintf(stderr, "nnsc-aot: error: cannot write %s: %s\n", path2, strerror(errno));
    return bad;
}

/* The executable: the shared programs' objects, the dispatcher's and
 * rtlib linked into DIR/rank; DIR/rankK (and DIR/rankK.ll) name it (and
 * the code rank K runs) too. */
static int link_all(const fe_opts *o, const ir_dist *d, int nprog, const int *cls_of, const int *row_of,
                    const char *rtlib)
{
    const int n = d->ndev;
    char **objs = ir_xcalloc((size_t)nprog + 2, sizeof *objs);
    char path[4200], path2[4200];
    for (int k = 0; k <= nprog; k++) {
        if (k < nprog) snprintf(path, sizeof path, "%s/prog%d.o", o->out, k);
        else snprintf(path, sizeof path, "%s/dispatch.o", o->out);
        objs[k] = ir_xstrdup(path);
    }
    cg_opts co = {o->cpu, "", o->opt_level, 0, 0};
    /* custom ops' C kernels, each file once: OUT/customK.o */
    int ncobj = 0;
    const ir_graph *g = d->g;
    int rc = 0;
    for (int k = 0; k < g->ncust && !rc; k++) {
        int first = 1;
        for (int j = 0; j < k; j++) first &= strcmp(g->cust[j].src, g->cust[k].src) != 0;
        if (!first) continue;
        snprintf(path, sizeof path, "%s/custom%d.o", o->out, k);
        objs = ir_xrealloc(objs, sizeof *objs * ((size_t)nprog + 3 + (size_t)ncobj));
        objs[nprog + 1 + ncobj++] = ir_xstrdup(path);
        if ((rc = cg_compile_c(g->cust[k].src, path, o->cpu)) == 2)
            pass_error(g, g->cust[k].line, "fix the C file (the compiler's messages are above); it is compiled "
                        "with nnsc_custom.h on the include path (docs/custom-ops.md)",
                        "the kernel of custom op '%s' (%s) does not compile", g->cust[k].name, g->cust[k].src);
        for (int j = k; j < g->ncust && !rc; j++) {   /* every section this file serves defines its kernel */
            if (strcmp(g->cust[j].src, g->cust[k].src) != 0) continue;
            char sym[160], hint[400];
            snprintf(sym, sizeof sym, "nnsc_custom_%s", g->cust[j].name);
            if (cg_object_defines(path, sym) == 1) continue;
            snprintf(hint, sizeof hint, "define it in %s: #include \"nnsc_custom.h\", then NNSC_CUSTOM(%s) { ... } "
                     "(docs/custom-ops.md)", g->cust[j].src, g->cust[j].name);
            rc = pass_error(g, g->cust[j].line, hint, "custom op '%s': %s defines no kernel %s", g->cust[j].name,
                            g->cust[j].src, sym);
        }
    }
    /* a cuda build with custom ops: the table of their C kernels (nnsc_custom_fns), exported for the CUDA
       driver double, which runs them in place of the device kernels (tests/mock) */
    int cuda_cust = o->target == FE_TARGET_CUDA && g->ncust > 0;
    const char *cnames[IR_MAXCUSTOM];
    for (int k = 0; k < g->ncust; k++) cnames[k] = g->cust[k].name;
    if (!rc)
        rc = cg_dispatch(n, nprog, cls_of, row_of, d->g->model ? d->g->model : "model", &co, cnames,
                         cuda_cust ? g->ncust : 0, objs[nprog]);
    if (cuda_cust) {
        objs = ir_xrealloc(objs, sizeof *objs * ((size_t)nprog + 3 + (size_t)ncobj));
        objs[nprog + 1 + ncobj++] = ir_xstrdup("-Wl,--export-dynamic-symbol=nnsc_custom_fns");
    }
    snprintf(path, sizeof path, "%s/rank", o->out);
    if (!rc) rc = cg_link_objs((const char *const *)objs, nprog + 1 + ncobj, rtlib, path);
    for (int r = 0; r < n && !rc; r++) {
        snprintf(path2, sizeof path2, "%s/rank%d", o->out, r);
        rc = same_file_as(path, path2);
        if (!rc && o->emit_llvm) {
            char ll[4200];
            snprintf(ll, sizeof ll, "%s/prog%d.ll", o->out, cls_of[r]);
            snprintf(path2, sizeof path2, "%s/rank%d.ll", o->out, r);
            rc = same_file_as(ll, path2);
        }
    }
    for (int k = 0; k <= nprog + ncobj; k++) {
        if (objs[k][0] != '-') remove(objs[k]);   /* (not the linker flag) */
        free(objs[k]);
    }
    free(objs);
    return rc;
}

/* The lowering of the ranks, on several threads: workers take ranks in
 * order and make each one's Program (memory plan, its check, lowering,
 * fusion, outlining: per rank, no shared state); the main thread takes
 * the Programs in rank order (the chains' numbers, dumps, the share pass:
 * the order-dependent parts, so the output is the same for any number of
 * threads).  Workers stay at most `window` ranks ahead of it. */
typedef struct lw_work {
    const fe_opts *o;
    const ir_dist *d;
    ir_prog *slot;             /* per rank: its Program once ready */
    char *ready;               /* per rank: slot holds it */
    int next;                  /* the next rank to take */
    int taken;                 /* ranks the main thread has consumed */
    int window;                /* how far ahead of it workers may go */
    double busy;               /* seconds spent lowering (all workers) */
    uint64_t *checked;         /* memory plans checked: keys (pass_memcheck_key), open addressing */
    int nchecked, checkcap;    /* how many, slots (a power of two) */
    int nskipped;              /* ranks whose plan's key was checked already */
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* a rank got ready, or one was consumed */
} lw_work;

/* Has a plan with this key been checked (or is it being checked)?  If
 * not, it is marked so now. */
static int key_seen(lw_work *w, const uint64_t key[2])
{
    pthread_mutex_lock(&w->mu);
    if (2 * (w->nchecked + 1) > w->checkcap) {   /* grow: re-enter every key */
        int cap = w->checkcap ? 2 * w->checkcap : 64;
        uint64_t *t = ir_xcalloc((size_t)cap * 2, sizeof *t);
        for (int i = 0; i < w->checkcap; i++) {
            uint64_t *k = &w->checked[2 * i];
            if (!k[0] && !k[1]) continue;
            size_t j = (size_t)k[0] & (size_t)(cap - 1);
            while (t[2 * j] || t[2 * j + 1]) j = (j + 1) & (size_t)(cap - 1);
            t[2 * j] = k[0], t[2 * j + 1] = k[1];
        }
        free(w->checked);
        w->checked = t;
        w->checkcap = cap;
    }
    uint64_t k0 = key[0] | (key[0] == 0 && key[1] == 0);   /* (0, 0) marks an empty slot */
    size_t j = (size_t)k0 & (size_t)(w->checkcap - 1);
    int seen = 0;
    for (; w->checked[2 * j] || w->checked[2 * j + 1]; j = (j + 1) & (size_t)(w->checkcap - 1))
        if (w->checked[2 * j] == k0 && w->checked[2 * j + 1] == key[1]) seen = 1;
    if (!seen) w->checked[2 * j] = k0, w->checked[2 * j + 1] = key[1], w->nchecked++;
    else w->nskipped++;
    pthread_mutex_unlock(&w->mu);
    return seen;
}

/* The per-rank part: rank r's Program into *p.  The memory plan is checked
 * once per key: ranks whose schedules and plans are alike (SPMD replicas)
 * get one check. */
static void lower_rank(lw_work *w, int r, ir_prog *p)
{
    const fe_opts *o = w->o;
    const ir_dist *d = w->d;
    pass_mem m;
    pass_memplan(d, r, &m);
    uint64_t key[2];
    pass_memcheck_key(d, &m, key);
    char why[600];
    if (!key_seen(w, key) && pass_memcheck(d, &m, why, sizeof why))
        ir_die(__FILE__, __LINE__, "memory plan: %s", why);
    ir_prog_init(p, r, d->ndev);
    p->no_loop = o->no_loops;
    p->cust = d->g->cust, p->ncust = d->g->ncust;
    pass_lower(d, &m, p);
    ir_prog_verify(p);
    pass_mem_free(&m);
    if (!o->no_fuse) pass_fuse_local(p);
    /* repeated layers stay loops: calls of bodies (passes/outline.c); with
       --dump=lower the main thread outlines after printing */
    if (!want(o, "lower")) {
        if (!o->no_loops) pass_outline(p);
        ir_prog_verify(p);   /* numbering the chains later changes no checked field */
    }
    p->persistent = ir_prog_persistent(p);
}

static void *lower_worker(void *arg)
{
    lw_work *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->next < w->d->ndev && w->next >= w->taken + w->window) pthread_cond_wait(&w->cv, &w->mu);
        if (w->next >= w->d->ndev) break;
        int r = w->next++;
        pthread_mutex_unlock(&w->mu);
        double a = now();
        lower_rank(w, r, &w->slot[r]);
        double b = now();
        pthread_mutex_lock(&w->mu);
        w->busy += b - a;
        w->ready[r] = 1;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Lower every rank into the shared programs: the ranks' Programs made on
 * the worker threads go to the share pass in rank order, which keeps only
 * one per class and the differences, so memory grows with the classes and
 * the window of ranks in flight, not with the ranks.  Then generate the
 * shared programs, link the executable, write launch and plan.txt. */
static int build_ranks(const fe_opts *o, const ir_dist *d, double *t0)
{
    const int n = d->ndev;
    ir_buf lowered = {0}, outlined = {0};
    ir_prog *sum = ir_xcalloc((size_t)n + 1, sizeof *sum);   /* per rank: what plan.txt says */
    int *cls_of = ir_xcalloc((size_t)n + 1, sizeof(int)), *row_of = ir_xcalloc((size_t)n + 1, sizeof(int));
    pass_share *sh = pass_share_new(n);
    pass_fuse_ids *fz = pass_fuse_new();
    int jobs = codegen_jobs(n);
    lw_work w = {.o = o, .d = d, .slot = ir_xcalloc((size_t)n + 1, sizeof(ir_prog)),
                 .ready = ir_xcalloc((size_t)n + 1, 1), .window = 4 * jobs};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    pthread_t th[64];
    int started = 0;
    for (int t = 0; t < jobs; t++)
        if (pthread_create(&th[started], NULL, lower_worker, &w) == 0) started++;
    if (!started) {   /* no thread: lower them all here first */
        w.window = n;
        lower_worker(&w);
    }
    double t_main = 0;
    int too_big = 0;   /* a rank's arena is more than the runtime takes (then nothing is written) */
    for (int r = 0; r < n; r++) {
        pthread_mutex_lock(&w.mu);
        while (!w.ready[r]) pthread_cond_wait(&w.cv, &w.mu);
        pthread_mutex_unlock(&w.mu);
        double a = now();
        ir_prog *p = &w.slot[r];
        if (!too_big) too_big = pass_arena_check(d->g, p);
        if (!o->no_fuse) pass_fuse_number(fz, p);
        if (want(o, "lower")) {   /* the dump before outlining: outline here */
            ir_prog_print(p, &lowered);
            if (!o->no_loops) pass_outline(p);
            ir_prog_verify(p);
        }
        if (want(o, "prog")) ir_prog_print(p, &outlined);
        sum[r].rank = r;
        sum[r].arena = p->arena;
        sum[r].flops = p->flops;
        sum[r].persistent = p->persistent;
        sum[r].stash_bytes = p->stash_bytes;
        sum[r].staging = o->target == FE_TARGET_CUDA || !d->g->train.bf16 ? 0 : cg_bf16_staging(p, r);
        sum[r].nslot = p->nslot;
        memcpy(sum[r].comm_bytes, p->comm_bytes, sizeof p->comm_bytes);
        pass_share_add(sh, p);
        pthread_mutex_lock(&w.mu);
        w.taken = r + 1;
        pthread_cond_broadcast(&w.cv);
        pthread_mutex_unlock(&w.mu);
        t_main += now() - a;
    }
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    free(w.slot);
    free(w.ready);
    free(w.checked);
    if (o->verbose)
        fprintf(stderr, "nnsc-aot: lowered %d rank%s on %d thread%s (%.1f ms of work; numbering, checks and the "
                        "share pass %.1f ms); %d memory plan%s checked, %d alike skipped\n", n, n == 1 ? "" : "s",
                jobs, jobs == 1 ? "" : "s", 1e3 * w.busy, 1e3 * t_main, w.nchecked, w.nchecked == 1 ? "" : "s",
                w.nskipped);
    pass_fuse_free(fz);
    int nprog = 0;
    ir_prog *progs = pass_share_finish(sh, &nprog, cls_of, row_of);
    for (int k = 0; k < nprog; k++) ir_prog_verify(&progs[k]);
    ir_buf shared = {0};
    for (int k = 0; k < nprog && want(o, "share"); k++) {
        ir_bprintf(&shared, "program %d of %d\n", k, nprog);
        ir_prog_print(&progs[k], &shared);
    }
    tick(o, t0, "lower");
    if (o->verbose) fprintf(stderr, "nnsc-aot: %d rank%s share %d distinct program%s\n", n, n == 1 ? "" : "s",
                            nprog, nprog == 1 ? "" : "s");
    if (want(o, "lower")) dump("lower", &lowered);
    if (want(o, "prog")) dump("prog", &outlined);
    if (want(o, "share")) dump("share", &shared);
    int rc = too_big;
    if (o->out && !rc) {
        if (mkdir_p(o->out)) {
            fprintf(stderr, "nnsc-aot: error: cannot create output directory '%s': %s\n", o->out, strerror(errno));
            rc = 1;
        }
        const char *model = d->g->model ? d->g->model : "model";
        int claimed = !rc && !(rc = fe_outdir_claim(o->out, model));   /* (an earlier build's files removed) */
        const char *rtlib = rc ? NULL : cg_rtlib_path();
        if (!rc && !rtlib) rc = 1;
        cg_gpu gpu = {0};   /* the cuda target's images */
        int cuda = o->target == FE_TARGET_CUDA;
        if (!rc && cuda) rc = custom_fits_launch(d->g, progs, nprog);
        if (!rc && cuda) rc = build_kernels(o, progs, nprog, &gpu, t0);
        if (!rc) rc = build_all(o, progs, nprog, cuda ? &gpu : NULL);
        if (!o->verbose && !o->quiet && isatty(2)) fprintf(stderr, "\r\033[K");
        tick(o, t0, "codegen");
        if (!rc) rc = link_all(o, d, nprog, cls_of, row_of, rtlib);
        tick(o, t0, "link");
        if (!rc) rc = cg_emit(o->out, o->spec, d, sum, nprog, cuda ? &gpu : NULL);
        cg_cubin_free((cg_cubin *)gpu.cubin, gpu.ncubin);
        free((void *)gpu.cubin);
        if (claimed && fe_outdir_done(o->out, model) && !rc) rc = 1;
    }
    for (int k = 0; k < nprog; k++) ir_prog_free(&progs[k]);
    free(progs);
    free(sum);
    free(cls_of);
    free(row_of);
    return rc;
}

/* Can this nnsc-aot build for o's target?  Checked before any work. */
int fe_target_check(const fe_opts *o)
{
    int major, minor;
    if (o->target != FE_TARGET_CUDA || cg_nvrtc_version(&major, &minor) != CG_NVRTC_MISSING) return 0;
    fprintf(stderr, "nnsc-aot: error: --target cuda: CUDA toolkit not found: this nnsc-aot was built without "
                    "NVRTC, which compiles the GPU kernels\n"
                    "  hint: install the CUDA toolkit, configure with -DNNSC_CUDA_HOME=DIR (default "
                    "/usr/local/cuda) and rebuild; --target cpu works without it\n");
    return 2;
}

int fe_compile(const fe_opts *o)
{
    int rc = check_dump(o);
    if (!rc && o->stop_after) {
        int ok = 0;   /* (the passes up to schedule: the others run per rank) */
        for (size_t i = 0; i < 5; i++) ok |= strcmp(o->stop_after, dump_names[i]) == 0;
        if (!ok) {
            int k = fe_closest(o->stop_after, dump_names, 5);
            fprintf(stderr, "nnsc-aot: error: --stop-after: unknown pass '%s'\n  hint: %s%s%sone of graph autograd "
                            "plan comm schedule\n", o->stop_after, k >= 0 ? "did you mean '" : "",
                    k >= 0 ? dump_names[k] : "", k >= 0 ? "'? " : "");
            return 2;
        }
    }
    if (!rc && o->out) rc = fe_target_check(o);
    if (!rc && o->out) rc = fe_outdir_check(o->out);   /* (a build owns its directory: outdir.c) */
    if (rc) return rc;
    double t0 = now();
    ir_graph g;
    ir_graph_init(&g);
    rc = fe_load(o->spec, o->sets, o->nset, &g);
    if (!rc && o->reference) g.req.recompute = NULL, g.req.L.nrc = 0;   /* (verify's reference: the plain model) */
    if (rc) goto out_g;
    ir_graph_verify(&g);
    if (o->target == FE_TARGET_CUDA)   /* the cuda target: every custom op used (and its backward) has cuda = */
        for (int k = 0; k < g.nop; k++)
            if (g.op[k].kind == IR_OP_CUSTOM) {
                const ir_custom *c = &g.cust[g.op[k].iattr[IR_IA_CUSTOM]];
                const ir_custom *b = c->bwd >= 0 ? &g.cust[c->bwd] : NULL, *miss = !c->cuda ? c : b && !b->cuda ? b : 0;
                for (int w = 0; w < 2 && !miss; w++) {   /* each defines NNSC_CUSTOM_CUDA(its name) */
                    const ir_custom *x = w ? b : c;
                    if (x && !defines_cuda_kernel(x->cuda, x->name)) {
                        char hint[400];
                        snprintf(hint, sizeof hint, "define it in %s: NNSC_CUSTOM_CUDA(%s) { ... } "
                                 "(docs/custom-ops.md)", x->cuda, x->name);
                        rc = pass_error(&g, x->line, hint, "custom op '%s': %s defines no NNSC_CUSTOM_CUDA(%s)",
                                        x->name, x->cuda, x->name);
                        goto out_g;
                    }
                }
                if (!miss) continue;
                char hint[300];
                snprintf(hint, sizeof hint, "give [custom %s] a device kernel: cuda = FILE.cu with NNSC_CUSTOM_CUDA(%s) "
                         "(docs/custom-ops.md); or build for --target cpu", miss->name, miss->name);
                rc = pass_error(&g, miss->line, hint, "op '%s': custom op '%s' has no CUDA kernel (no cuda = in "
                                "[custom %s]), so it cannot run on the cuda target", g.op[k].name, c->name, miss->name);
                goto out_g;
            }
    tick(o, &t0, "frontend");
    /* (one device too: micro-batches and recompute, when memory is short; not verify's reference) */
    if (!o->reference && g.req.policy && !strcmp(g.req.policy, "auto")) {
        if ((rc = fe_search(o, &g))) goto out_g;
        tick(o, &t0, "search");
    }
    ir_buf b = {0};
    if (want(o, "graph")) ir_graph_print(&g, &b), dump("graph", &b);
    if (stop_after(o, "graph")) goto out_g;
    if ((rc = pass_autograd(&g))) goto out_g;
    if ((rc = pass_recompute(&g))) goto out_g;
    pass_zero3_regather(&g);
    ir_graph_verify(&g);
    tick(o, &t0, "autograd");
    if (want(o, "autograd")) ir_graph_print(&g, &b), dump("autograd", &b);
    if (stop_after(o, "autograd")) goto out_g;
    ir_dist d;
    ir_dist_init(&d, &g, g.req.devices);
    if ((rc = pass_plan(&d))) goto out_d;
    pass_split(&d);
    ir_dist_verify(&d);
    tick(o, &t0, "plan");
    if (want(o, "plan")) ir_dist_print(&d, &b), dump("plan", &b);
    if (stop_after(o, "plan")) goto out_d;
    pass_comm(&d);
    ir_dist_verify(&d);
    tick(o, &t0, "comm");
    if (want(o, "comm")) ir_dist_print(&d, &b), dump("comm", &b);
    if (stop_after(o, "comm")) goto out_d;
    pass_schedule(&d);
    ir_dist_verify(&d);
    if ((rc = pass_pipeline(&d))) goto out_d;
    tick(o, &t0, "schedule");
    if (want(o, "schedule")) ir_dist_print(&d, &b), dump("schedule", &b);
    if (stop_after(o, "schedule")) {
        if (o->verbose) {   /* plan.txt's estimate without building the ranks (bench/megatron.sh) */
            pass_estimate e;
            pass_cost_step(&d, &e);
            /* the memory: each stage's first rank's memory plan (the search's; its tp and dp
               peers hold alike boxes), the arena lowering then takes (plan.txt's per rank) */
            int64_t mx = 0;
            int sd = d.ndev / d.mesh_pp, smax = 0;
            for (int s = 0; s < d.mesh_pp; s++) {
                pass_mem m;
                pass_memplan(&d, s * sd, &m);
                if (m.arena > mx) mx = m.arena, smax = s;
                pass_mem_free(&m);
            }
            fprintf(stderr, "nnsc-aot: estimate   step %.3f ms on %s, memory %.1f MiB per rank (stage %d's first "
                    "rank's memory plan; cost model: plan.txt's)\n", e.step * 1e3, g.prof.name, (double)mx / 1048576.0,
                    smax);
        }
        goto out_d;
    }
    rc = build_ranks(o, &d, &t0);
    if (!rc && o->out && !o->quiet) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", o->out);
        for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/';) dir[--n] = '\0';
        fprintf(stderr, "nnsc-aot: %s: %d rank%s%s in %s/ (see %s/plan.txt; run %s/launch)\n", g.model, d.ndev,
                d.ndev > 1 ? "s" : "", o->target == FE_TARGET_CUDA ? " for cuda" : "", dir, dir, dir);
    }
out_d:
    ir_dist_free(&d);
out_g:
    ir_graph_free(&g);
    return rc;
}
