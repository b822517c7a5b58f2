/* runtime.c -- rt_init / rt_finish: flags, environment, the arena.
 *
 * Errors in what the user gave (flags, environment, a manifest that does not
 * match the environment, bad data or checkpoint files) print one line and
 * exit with status 2; failures at run time (a dead peer, a write that fails)
 * exit with status 1 (the messages: base/sys.c).  rt_init also starts the
 * kernel threads (cpu/pool.c), the communicator (comm/comm_shm.c), the token
 * files (io/data.c) and the checkpoint directory (ckpt.c); rt_finish writes
 * the final weights and stops them.  The step loop's pieces are in train.c.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "train/rt_train.h"

/* Write a zero into every 4 KiB page of bytes [lo, hi) of the block at p. */
static void rt_touch_pages(const void *p, int64_t lo, int64_t hi, int t)
{
    volatile char *b = (volatile char *)p;
    for (int64_t k = lo; k < hi; k += 4096)
        b[k] = 0;
}

/* ---- --mem: what a rank really allocated, to hold against plan.txt's
 * memory per rank (the arena the compiler planned).  The arena is not
 * faulted in ahead and stays on 4 KiB pages, so its resident pages at the
 * end are the bytes the program touched (mincore).  The growth of the
 * process's resident anonymous and shared memory since rt_init began is
 * everything this library allocated and used; of it, the runtime's own
 * buffers of a fixed size, the same for every model (each kernel thread's
 * scratch, the communicator's segment), are measured apart, and what is
 * left is what the plan does not know of.  All measured, none taken from
 * the manifest: a planned byte never used, or a buffer outside the plan,
 * shows. */

/* The process's resident anonymous and shared-memory bytes now (Linux's
 * /proc/self/status RssAnon + RssShmem: what was allocated and touched,
 * not the executable's code paged in), -1 when unknown. */
static int64_t rt_rss_alloc(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long long kib, sum = 0;
    int seen = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "RssAnon: %lld", &kib) == 1 || sscanf(line, "RssShmem: %lld", &kib) == 1)
            sum += kib, seen++;
    fclose(f);
    return seen == 2 ? (int64_t)sum * 1024 : -1;
}

/* The arena on 4 KiB pages, so that mincore counts what was touched. */
static void rt_mem_arena_pages(rt_ctx *ctx)
{
#ifdef MADV_NOHUGEPAGE
    madvise(ctx->arena, (size_t)ctx->man.arena, MADV_NOHUGEPAGE);
#else
    (void)ctx;
#endif
}

/* Resident bytes of [p, p + len) (its whole pages), -1 when unknown. */
static int64_t rt_resident(const void *p, size_t len)
{
    if (!p || !len)
        return 0;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p / pg * pg, hi = ((uintptr_t)p + len + pg - 1) / pg * pg;
    size_t n = (hi - lo) / pg;
    unsigned char *vec = malloc(n);
    if (!vec || mincore((void *)lo, hi - lo, vec) != 0) {
        free(vec);
        return -1;
    }
    int64_t res = 0;
    for (size_t i = 0; i < n; i++)
        res += vec[i] & 1;
    free(vec);
    return res * (int64_t)pg;
}

/* One line per rank on stderr (one write), bytes: the planned arena, its
 * bytes touched, the growth of resident memory since rt_init began, of it
 * the runtime's fixed buffers (kernel scratch, the communicator's
 * segment), and the rest. */
static void rt_mem_report(const rt_ctx *ctx)
{
    int64_t now = rt_rss_alloc();
    int64_t grown = now >= 0 && ctx->mem_rss0 >= 0 ? now - ctx->mem_rss0 : -1;
    int64_t touched = ctx->dev ? -1 : rt_resident(ctx->arena, (size_t)ctx->man.arena);   /* (cuda: the device's) */
    if (touched > ctx->man.arena)
        touched = ctx->man.arena;   /* (the last page's tail) */
    int64_t fixed = 0;
    for (int t = 0; t < ctx->threads && fixed >= 0; t++) {
        int64_t r = rt_resident(rt_scratch(t), sizeof(float) * RT_SCRATCH_FLOATS);
        fixed = r < 0 ? -1 : fixed + r;
    }
    const void *seg;
    size_t segb;
    rt_comm_span(ctx, &seg, &segb);
    int64_t rs = rt_resident(seg, segb);
    fixed = fixed < 0 || rs < 0 ? -1 : fixed + rs;
    int known = grown >= 0 && touched >= 0 && fixed >= 0;
    char line[400];
    int n = snprintf(line, sizeof line,
                     "mem: rank %d arena %lld touched %lld; resident growth %lld: arena %lld, runtime buffers "
                     "%lld, other %lld (bytes)\n",
                     ctx->rank, (long long)ctx->man.arena, (long long)touched, (long long)grown,
                     (long long)touched, (long long)fixed, (long long)(known ? grown - touched - fixed : -1));
    if (n > 0 && write(2, line, (size_t)n) < 0)
        return;
}

/* The flags (--help): one write to stdout. */
static void rt_usage(const char *prog, const rt_manifest *m)
{
    rt_out("usage: %s [flags]\n"
           "  rank %d of %d of model '%s', built by nnsc-aot\n"
           "flags:\n"
           "  --steps N       run N optimizer steps (default %lld, from the build)\n"
           "  --data PATH     token file, or a quoted glob of shards, for the token inputs\n"
           "                  (default: the build's, %s)\n"
           "  --eval-data PATH  held-out token file(s) for evaluation (default: the build's,\n"
           "                  %s; else the training data)\n"
           "  --init FILE     start from the params in FILE (a checkpoint or final weights\n"
           "                  of this model, written under any plan)\n"
           "  --ckpt-dir DIR  checkpoints DIR/step-N.safetensors and, at the end, the\n"
           "                  final weights DIR/final.safetensors\n"
           "  --ckpt-every N  write a checkpoint every N steps (needs --ckpt-dir)\n"
           "  --resume        continue from the newest checkpoint in --ckpt-dir (params,\n"
           "                  optimizer state, step); without one, start as usual\n"
           "  --log FILE      also write the step and eval log to FILE as JSON lines\n"
           "                  (rank 0; appended to with --resume)\n"
           "  --save FILE     write the final weights to FILE (safetensors, full tensors)\n"
           "  --trace FILE    write the measured timeline of steps and pipeline tasks as\n"
           "                  Chrome-trace JSON (rank K of several: FILE-rankK.json)\n"
           "  --quiet, -q     do not print the per-step loss line\n"
           "  --mem           at the end every rank prints what it allocated: the arena,\n"
           "                  its bytes touched, and its peak resident growth (stderr)\n"
           "  --peak-flops X  peak FLOP/s of one device, for the MFU in the log: 1.5e12,\n"
           "                  312T, 50G (default $NNSC_PEAK_FLOPS, else the GPU's table\n"
           "                  entry; on a CPU none, and no MFU is shown)\n"
           "  --timeout SEC   longest wait for a peer in a collective (default 60,\n"
           "                  or $NNSC_TIMEOUT); then the rank exits with status 1\n"
           "  --threads N     threads for the kernels (default $NNSC_THREADS, else the\n"
           "                  CPUs this process may use divided by $NNSC_LOCAL_WORLD,\n"
           "                  else by the world size; at least 1)\n"
           "  --help          print this and exit\n"
           "environment:\n"
           "  NNSC_RANK/NNSC_WORLD, else RANK/WORLD_SIZE, else SLURM_PROCID/SLURM_NTASKS,\n"
           "  else OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (default rank 0 of 1);\n"
           "  NNSC_JOB: a string unique to the run, the same for all its ranks (world > 1);\n"
           "  NNSC_SECRET (16 or more characters) or NNSC_SECRET_FILE (a file only its\n"
           "  user can read): the job's secret the ranks prove to each other; out/launch\n"
           "  makes one per run; needed between hosts (docs/cluster.md, Trust);\n"
           "  NNSC_THREADS, NNSC_LOCAL_WORLD (ranks on this host): see --threads;\n"
           "  NNSC_PEAK_FLOPS: see --peak-flops\n",
           prog, m->rank, m->world, m->model, (long long)m->steps,
           m->nstream ? (m->data ? m->data : "none: synthetic tokens")
                      : "none: no input reads tokens",
           m->eval_data ? m->eval_data : "none");
}

/* Parse a flag's value as a non-negative integer, or exit 2. */
static int64_t rt_flag_int(const char *flag, const char *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < 0)
        rt_fatal(NULL, 2, "%s needs a non-negative integer, not '%s'", flag, v);
    return x;
}

/* A flag's file or directory name: not empty, or exit 2. */
static const char *rt_flag_path(const char *flag, const char *v)
{
    if (!*v)
        rt_fatal(NULL, 2, "%s needs a file name", flag);
    return v;
}

/* Parse a thread count in [1, RT_MAX_THREADS], or exit 2.  what names its source. */
static int rt_parse_threads(const char *what, const char *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < 1 || x > RT_MAX_THREADS)
        rt_fatal(NULL, 2, "%s needs a whole number of threads in [1, %d], not '%s'", what,
                 RT_MAX_THREADS, v);
    return (int)x;
}

/* Parse a timeout in seconds (> 0), or exit 2.  what names its source. */
static double rt_parse_timeout(const char *what, const char *v)
{
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x > 0) || !isfinite(x))
        rt_fatal(NULL, 2, "%s needs a positive number of seconds, not '%s'", what, v);
    return x;
}

/* Parse a peak FLOP/s (--peak-flops, NNSC_PEAK_FLOPS), or exit 2. */
static double rt_parse_peak(const char *what, const char *v)
{
    double x;
    if (rt_parse_flops(v, &x))
        rt_fatal(NULL, 2, "%s needs a positive FLOP/s figure, e.g. 1.5e12, 312T or 50G, not '%s'",
                 what, v);
    return x;
}

/* The launchers' rank and world variables, in the order they are read. */
static const char *const rt_rank_vars[][2] = {
    {"NNSC_RANK", "NNSC_WORLD"},
    {"RANK", "WORLD_SIZE"},
    {"SLURM_PROCID", "SLURM_NTASKS"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
};

/* The rank the environment gives this process (the first pair set, as
 * rt_rank_from_env reads it), or -1 when none is set or it is not a number;
 * nothing is checked (for --help, which must work in any environment). */
static int rt_env_rank_peek(void)
{
    for (size_t k = 0; k < sizeof rt_rank_vars / sizeof rt_rank_vars[0]; k++) {
        const char *v = getenv(rt_rank_vars[k][0]);
        if (v && *v) {
            char *end;
            long r = strtol(v, &end, 10);
            return *end || r < 0 || r > INT32_MAX ? -1 : (int)r;
        }
    }
    return -1;
}

/* The flags, for "did you mean". */
static const char *const rt_flags[] = {
    "--steps", "--data", "--eval-data", "--init", "--ckpt-dir", "--ckpt-every", "--resume",
    "--log", "--save", "--trace", "--quiet", "--mem", "--peak-flops", "--timeout", "--threads", "--help",
};

#define RT_NEAR_MAX 31   /* longest word rt_edits compares */

/* Edits between a and b, letters compared without case: insertions,
 * deletions, replacements and swaps of two neighbours ("--stpes" -> "--steps"
 * is one; the restricted Damerau-Levenshtein distance, by the usual table
 * kept in three rows).  Words longer than RT_NEAR_MAX count as far apart. */
static int rt_edits(const char *a, const char *b)
{
    int na = (int)strlen(a), nb = (int)strlen(b);
    if (na > RT_NEAR_MAX || nb > RT_NEAR_MAX)
        return RT_NEAR_MAX + 1;
    int row[3][RT_NEAR_MAX + 1];   /* row i % 3 of the table: a's first i letters */
    for (int j = 0; j <= nb; j++)
        row[0][j] = j;
    for (int i = 1; i <= na; i++) {
        int *cur = row[i % 3], *up = row[(i + 2) % 3], *up2 = row[(i + 1) % 3];
        cur[0] = i;
        for (int j = 1; j <= nb; j++) {
            int x = tolower((unsigned char)a[i - 1]), y = tolower((unsigned char)b[j - 1]);
            int d = up[j - 1] + (x != y);
            if (up[j] + 1 < d)
                d = up[j] + 1;
            if (cur[j - 1] + 1 < d)
                d = cur[j - 1] + 1;
            if (i > 1 && j > 1 && x == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == y && up2[j - 2] + 1 < d)
                d = up2[j - 2] + 1;
            cur[j] = d;
        }
    }
    return row[na % 3][nb];
}

/* The flag nearest to word (the compiler's rule, frontend/spec.c: at most
 * one edit in 4 letters, 2 in 8, else 3, the dashes not counted; of equally
 * near ones the first in rt_flags), or NULL. */
static const char *rt_closest_flag(const char *word)
{
    size_t letters = strlen(word) - strspn(word, "-");
    int limit = letters <= 1 ? 0 : letters <= 4 ? 1 : letters <= 8 ? 2 : 3;
    const char *best = NULL;
    int bestd = limit + 1;
    for (size_t k = 0; k < sizeof rt_flags / sizeof rt_flags[0]; k++) {
        int d = rt_edits(word, rt_flags[k]);
        if (d < bestd)
            best = rt_flags[k], bestd = d;
    }
    return best;
}

/* Read the command line into ctx; exits 0 on --help and 2 on a bad flag. */
static void rt_parse_flags(rt_ctx *ctx, int argc, char **argv)
{
    const char *prog = ctx->prog;
    int have_timeout = 0;
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        const char *val = NULL;
        char name[32];
        const char *eq = strchr(arg, '=');
        size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        if (nlen >= sizeof name)
            nlen = sizeof name - 1;
        memcpy(name, arg, nlen);
        name[nlen] = 0;
        static const char *const valued[] = {"--steps", "--save", "--timeout", "--threads",
                                             "--data", "--eval-data", "--init", "--ckpt-dir",
                                             "--ckpt-every", "--log", "--peak-flops", "--trace"};
        int takes_value = 0;
        for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
            takes_value |= !strcmp(name, valued[k]);
        if (takes_value) {
            if (eq)
                val = eq + 1;
            else if (a + 1 < argc)
                val = argv[++a];
            else
                rt_fatal(NULL, 2, "%s needs a value (try --help)", name);
        } else if (eq && (!strcmp(name, "--quiet") || !strcmp(name, "--resume") ||
                          !strcmp(name, "--mem") || !strcmp(name, "--help"))) {
            rt_fatal(NULL, 2, "%s takes no value (try --help)", name);
        }
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            /* under out/launch every rank gets --help: rank 0 answers for all */
            if (!ctx->launched || rt_env_rank_peek() <= 0)
                rt_usage(prog, &ctx->man);
            exit(0);
        } else if (!strcmp(arg, "--quiet") || !strcmp(arg, "-q")) {
            ctx->quiet = 1;
        } else if (!strcmp(arg, "--mem")) {
            ctx->mem_report = 1;
        } else if (!strcmp(name, "--steps")) {
            ctx->steps = rt_flag_int("--steps", val);
        } else if (!strcmp(name, "--save")) {
            ctx->save_path = rt_flag_path("--save", val);
        } else if (!strcmp(name, "--trace")) {
            ctx->trace_path = rt_flag_path("--trace", val);
        } else if (!strcmp(name, "--data")) {
            ctx->data_path = rt_flag_path("--data", val);
        } else if (!strcmp(name, "--eval-data")) {
            ctx->eval_path = rt_flag_path("--eval-data", val);
        } else if (!strcmp(name, "--init")) {
            ctx->init_path = rt_flag_path("--init", val);
        } else if (!strcmp(name, "--ckpt-dir")) {
            ctx->ckpt_dir = rt_flag_path("--ckpt-dir", val);
        } else if (!strcmp(name, "--ckpt-every")) {
            ctx->ckpt_every = rt_flag_int("--ckpt-every", val);
        } else if (!strcmp(name, "--log")) {
            ctx->log_path = rt_flag_path("--log", val);
        } else if (!strcmp(arg, "--resume")) {
            ctx->resume = 1;
        } else if (!strcmp(name, "--timeout")) {
            ctx->timeout = rt_parse_timeout("--timeout", val);
            have_timeout = 1;
        } else if (!strcmp(name, "--threads")) {
            ctx->threads = rt_parse_threads("--threads", val);
        } else if (!strcmp(name, "--peak-flops")) {
            ctx->peak_flops = rt_parse_peak("--peak-flops", val);
            snprintf(ctx->peak_src, sizeof ctx->peak_src, "--peak-flops");
        } else {
            char near[64] = "";
            const char *best = arg[0] == '-' ? rt_closest_flag(name) : NULL;
            if (best)
                snprintf(near, sizeof near, ": did you mean '%s'?", best);
            rt_fatal(NULL, 2, "unknown %s '%s'%s (flags: --steps N --data PATH --eval-data PATH "
                              "--init FILE --ckpt-dir DIR --ckpt-every N --resume --log FILE "
                              "--save FILE --trace FILE --quiet --mem --peak-flops X --timeout SEC --threads N "
                              "--help)", arg[0] == '-' ? "flag" : "argument", arg, near);
        }
    }
    if ((ctx->ckpt_every || ctx->resume) && !ctx->ckpt_dir)
        rt_fatal(NULL, 2, "%s needs --ckpt-dir DIR", ctx->resume ? "--resume" : "--ckpt-every");
    if (!have_timeout) {
        const char *t = getenv("NNSC_TIMEOUT");
        ctx->timeout = t && *t ? rt_parse_timeout("NNSC_TIMEOUT", t) : 60.0;
    }
    if (!ctx->threads) {   /* 0: no flag; the default needs the world size (later) */
        const char *t = getenv("NNSC_THREADS");
        if (t && *t)
            ctx->threads = rt_parse_threads("NNSC_THREADS", t);
    }
    if (!ctx->peak_flops) {   /* 0: no flag; the device's table entry comes later (cuda) */
        const char *t = getenv("NNSC_PEAK_FLOPS");
        if (t && *t) {
            ctx->peak_flops = rt_parse_peak("NNSC_PEAK_FLOPS", t);
            snprintf(ctx->peak_src, sizeof ctx->peak_src, "NNSC_PEAK_FLOPS");
        }
    }
}

/* Read one rank/world pair of environment variables.  Returns 1 if set
 * (r, w filled), 0 if neither is set; exits 2 when only one is, or bad. */
static int rt_env_pair(const char *rname, const char *wname, int *r, int *w)
{
    const char *rs = getenv(rname), *ws = getenv(wname);
    if (!rs && !ws)
        return 0;
    if (!rs || !ws)
        rt_fatal(NULL, 2, "%s is set but %s is not; set both or neither", rs ? rname : wname,
                 rs ? wname : rname);
    char *e1, *e2;
    errno = 0;
    long rv = strtol(rs, &e1, 10), wv = strtol(ws, &e2, 10);
    if (errno || e1 == rs || *e1 || e2 == ws || *e2 || wv < 1 || wv > INT32_MAX || rv < 0 ||
        rv >= wv)
        rt_fatal(NULL, 2, "bad rank/world in the environment: %s=%s %s=%s (need 0 <= rank < "
                          "world)", rname, rs, wname, ws);
    *r = (int)rv;
    *w = (int)wv;
    return 1;
}

/* Rank and world from the first launcher convention present (0 and 1
 * when none is); the variables' names in *src, or NULL. */
static void rt_rank_env(int *r, int *w, const char **src)
{
    *r = 0, *w = 1, *src = NULL;
    for (size_t k = 0; k < sizeof rt_rank_vars / sizeof rt_rank_vars[0] && !*src; k++)
        if (rt_env_pair(rt_rank_vars[k][0], rt_rank_vars[k][1], r, w))
            *src = rt_rank_vars[k][0];
}

/* Rank and world from the first launcher convention present; exits 2 when
 * none is set in a world of several ranks, or when they disagree with the
 * manifest this program was built with. */
static void rt_rank_from_env(rt_ctx *ctx)
{
    const rt_manifest *m = &ctx->man;
    int r, w;
    const char *src;
    rt_rank_env(&r, &w, &src);
    if (!src && m->world > 1) {
        /* started by hand, alone: say how the ranks of a job are started */
        const char *slash = strrchr(ctx->prog, '/');
        int dirlen = slash ? (int)(slash - ctx->prog) : 1;
        rt_fatal(NULL, 2, "this program is rank %d of %d (model '%s') and no rank is set in "
                          "the environment: start all %d ranks with %.*s/launch "
                          "(it passes its arguments on), or start each rank K of 0..%d with "
                          "NNSC_RANK=K NNSC_WORLD=%d (or RANK/WORLD_SIZE, SLURM_PROCID/"
                          "SLURM_NTASKS, OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE) and the same "
                          "NNSC_JOB (docs/runtime.md, docs/cluster.md)", m->rank, m->world,
                 m->model, m->world, dirlen, slash ? ctx->prog : ".", m->world - 1, m->world);
    }
    if (w != m->world)
        rt_fatal(NULL, 2, "this program was built for a job of %d ranks (model '%s'), but the "
                          "environment says %d (%s=%d of %d): start %d ranks, or rebuild with "
                          "--devices %d", m->world, m->model, w, src ? src : "no rank set", r, w,
                 m->world, w);
    if (r != m->rank)
        rt_fatal(NULL, 2, "this program is rank %d of %d (model '%s'), but the environment says "
                          "rank %d of %d (%s): run the rank%d executable for rank %d", m->rank,
                 m->world, m->model, r, w, src, r, r);
    ctx->rank = r;
    ctx->world = w;
}

/* The rank the executable's name gives: K for ".../rankK" with K < world,
 * else -1 (the shared name "rank", or a copy under another name). */
static int rt_rank_of_name(const char *prog, int world)
{
    const char *base = strrchr(prog, '/');
    base = base ? base + 1 : prog;
    if (strncmp(base, "rank", 4) != 0 || !base[4])
        return -1;
    long k = 0;
    for (const char *c = base + 4; *c; c++) {
        if (*c < '0' || *c > '9' || k > INT32_MAX / 10)
            return -1;
        k = 10 * k + (*c - '0');
    }
    return k < world ? (int)k : -1;
}

int rt_rank_select(int argc, char **argv, int world, const char *model)
{
    const char *prog = argc > 0 && argv[0] ? argv[0] : "rank";
    int named = rt_rank_of_name(prog, world);
    for (int a = 1; a < argc; a++)   /* --help works anywhere: as the named rank, or rank 0 */
        if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h"))
            return named >= 0 ? named : 0;
    int r, w;
    const char *src;
    rt_rank_env(&r, &w, &src);
    const char *slash = strrchr(prog, '/');
    int dirlen = slash ? (int)(slash - prog) : 1;
    const char *dir = slash ? prog : ".";
    if (!src) {
        if (world == 1 || named >= 0)
            return named >= 0 ? named : 0;   /* rankK alone: rt_init says how ranks are started */
        rt_fatal(NULL, 2, "this program runs any rank of a job of %d (model '%s') and no rank is set in "
                          "the environment: start all %d ranks with %.*s/launch (it passes its arguments "
                          "on), or start %.*s/rank once per rank under a launcher that sets the rank "
                          "(srun: SLURM_PROCID/SLURM_NTASKS; mpirun: OMPI_COMM_WORLD_RANK/"
                          "OMPI_COMM_WORLD_SIZE; torchrun: RANK/WORLD_SIZE) or with NNSC_RANK=K "
                          "NNSC_WORLD=%d, and the same NNSC_JOB (docs/cluster.md)",
                 world, model, world, dirlen, dir, dirlen, dir, world);
    }
    if (w != world)   /* rt_init says so, naming the world it was built for */
        return named >= 0 ? named : 0;
    if (named >= 0 && r != named)
        rt_fatal(NULL, 2, "this program is rank %d of %d (model '%s'), but the environment says "
                          "rank %d of %d (%s): run the rank%d executable for rank %d, or %.*s/rank, "
                          "which runs as the rank the environment gives", named, world, model, r, w, src,
                 r, r, dirlen, dir);
    return r;
}

/* The filled manifest (one per process; kept reachable for leak checkers). */
static char *rt_filled_manifest;

const char *rt_manifest_fill(const char *tmpl, const int64_t *row)
{
    size_t n = strlen(tmpl), cap = n + 64, len = 0;
    char *out = malloc(cap);
    if (!out)
        rt_fatal(NULL, 1, "out of memory");
    for (const char *s = tmpl; *s;) {
        if (len + 32 > cap) {
            cap = 2 * cap + 64;
            char *grown = realloc(out, cap);
            if (!grown)
                rt_fatal(NULL, 1, "out of memory");
            out = grown;
        }
        if (*s != '\x01') {
            out[len++] = *s++;
            continue;
        }
        char *end;
        long v = strtol(s + 1, &end, 10);
        if (end == s + 1 || *end != '\x02' || v < 0)
            rt_fatal(NULL, 2, "bad embedded manifest template at byte %ld", (long)(s - tmpl));
        len += (size_t)snprintf(out + len, cap - len, "%lld", (long long)row[v]);
        s = end + 1;
    }
    out[len] = 0;
    free(rt_filled_manifest);
    rt_filled_manifest = out;
    return out;
}

/* The context rt_init is making: reachable, so that a leak checker does
 * not report it when a bad flag exits before rt_init returns. */
static rt_ctx *rt_starting;

/* rt_init and rt_init_cuda: cuda = 1 keeps the shm communicator out (the
 * ranks may be on several hosts) and sets up the device instead. */
static rt_ctx *rt_init_target(int argc, char **argv, const char *manifest, int cuda,
                              const rt_image *images, int nimages)
{
    int64_t rss0 = rt_rss_alloc();   /* (before anything this library allocates: --mem) */
    rt_ctx *ctx = rt_starting = calloc(1, sizeof *ctx);
    if (!ctx)
        rt_fatal(NULL, 1, "out of memory");
    ctx->mem_rss0 = rss0;
    ctx->rank = -1;
    ctx->lr_scale = 1.0;
    ctx->grad_scale = 1.0f;
    ctx->grad_norm = NAN;
    ctx->last_loss = NAN;
    ctx->prog = argc > 0 && argv[0] ? argv[0] : "rank";
    const char *launched = getenv("NNSC_LAUNCH");
    ctx->launched = launched && *launched && strcmp(launched, "0") != 0;
    char err[768];
    if (rt_manifest_parse(manifest, &ctx->man, err, sizeof err))
        rt_fatal(NULL, 2, "bad embedded manifest: %s", err);
    ctx->steps = ctx->man.steps;
    rt_parse_flags(ctx, argc, argv);
    rt_rank_from_env(ctx);
    rt_watch_launcher(ctx);   /* under out/launch: end with it */
    rt_trace_open(ctx);   /* its file name has the rank in it */

    if (!ctx->threads)
        ctx->threads = rt_default_threads(ctx->world);
    rt_pool_init(ctx->threads);

    /* the arena: one zeroed block for the whole run, on huge pages where
     * possible (fewer TLB misses in kernels that stream weights), its pages
     * faulted in now rather than during the first step */
    ctx->local_rank = rt_net_local_rank(ctx);
    if (cuda) {
        /* the device first: no driver, no device or no cubin for it is said
           at once, before the rendezvous waits for the peers (exit 2) */
        rt_dev_open(ctx, images, nimages);
        if (ctx->world > 1)
            rt_net_init(ctx);
        rt_dev_init(ctx, images, nimages);
        if (ctx->world > 1)
            rt_nccl_init(ctx);
        if (!ctx->peak_flops)   /* no flag, no variable: the GPU's table entry, if any */
            ctx->peak_flops = rt_peak_of_device(rt_dev_name(ctx), ctx->man.bf16, ctx->peak_src,
                                                sizeof ctx->peak_src);
    }
    /* cpu: the arena; cuda: its host mirror, used only for initialisation,
       data and checkpoints, so its pages are faulted in as they are used */
    ctx->arena = rt_big_alloc((size_t)ctx->man.arena);
    if (!ctx->arena)
        rt_fatal(ctx, 1, "cannot allocate the %lld-byte arena", (long long)ctx->man.arena);
    if (!cuda && ctx->mem_report)
        rt_mem_arena_pages(ctx);   /* 4 KiB pages, faulted in as the program uses them */
    else if (!cuda)
        rt_parallel_for(rt_touch_pages, ctx->arena, ctx->man.arena, 4096, 1 << 24);
    if (!cuda && ctx->world > 1)
        rt_comm_init(ctx);
    /* after the communicator: a rank that stops here makes its peers stop too */
    rt_data_open(ctx);
    rt_ckpt_init(ctx);
    rt_log_open(ctx);
    ctx->step_t0 = rt_now();
    return ctx;
}

rt_ctx *rt_init(int argc, char **argv, const char *manifest)
{
    return rt_init_target(argc, argv, manifest, 0, NULL, 0);
}

rt_ctx *rt_init_cuda(int argc, char **argv, const char *manifest, const rt_image *images,
                     int nimages)
{
    return rt_init_target(argc, argv, manifest, 1, images, nimages);
}

rt_ctx *rt_init_cuda_alone(const char *name, int64_t arena, const rt_image *images, int nimages)
{
    static const char fmt[] = "nnsc-manifest 1\n"
                              "model %s\n"
                              "rank 0 world 1\n"
                              "arena %lld\n"
                              "steps 1\n"
                              "micro_batches 1\n"
                              "seed 1\n"
                              "lr 0.001\n"
                              "group 0 1 0\n"
                              "data -\n"
                              "eval_data -\n"
                              "eval_every 0\n"
                              "eval_steps 1\n"
                              "schedule constant warmup 0 min_lr_frac 0\n"
                              "clip 0\n"
                              "tokens_per_step 0\n"
                              "end\n";
    char manifest[1024];
    const char *base = strrchr(name, '/');
    snprintf(manifest, sizeof manifest, fmt, base ? base + 1 : name, (long long)arena);
    /* rank 0 of 1 on device 0 (CUDA_VISIBLE_DEVICES picks the GPU) */
    setenv("NNSC_RANK", "0", 1);
    setenv("NNSC_WORLD", "1", 1);
    setenv("NNSC_LOCAL_RANK", "0", 1);
    setenv("NNSC_THREADS", "1", 0);
    char *av[] = {(char *)name, NULL};
    return rt_init_cuda(1, av, manifest, images, nimages);
}

char *rt_arena(rt_ctx *ctx)
{
    return ctx->dev ? rt_dev_arena(ctx) : ctx->arena;
}

/* Cuda target: every param and optimizer-state box, mirror -> device. */
static void rt_upload_state(rt_ctx *ctx)
{
    const rt_manifest *m = &ctx->man;
    for (int k = 0; k < m->nparams; k++)
        rt_dev_upload(ctx, m->params[k].off,
                      4 * rt_box_numel(m->params[k].ndim, m->params[k].lo, m->params[k].hi));
    for (int k = 0; k < m->nstates; k++)
        rt_dev_upload(ctx, m->states[k].off,
                      4 * rt_box_numel(m->states[k].ndim, m->states[k].lo, m->states[k].hi));
}

int64_t rt_first_step(rt_ctx *ctx)
{
    /* called once the prologue has initialised the params: loading
       (--resume, --init) overwrites them */
    if (!ctx->started) {
        rt_banner(ctx);   /* what runs, before any resume or init note */
        ctx->first_step = rt_ckpt_start(ctx);
        ctx->started = 1;
        /* on the cuda target loading wrote the mirror: the device gets it
           (the prologue's init_param has uploaded its boxes already; again
           is harmless and keeps this simple) */
        if (ctx->dev && (ctx->init_path || ctx->first_step > 0))
            rt_upload_state(ctx);
    }
    return ctx->first_step;
}

int64_t rt_steps(rt_ctx *ctx)
{
    return ctx->steps;
}

int rt_finish(rt_ctx *ctx)
{
    rt_trace_write(ctx);
    rt_ckpt_finish(ctx);
    if (ctx->started)
        rt_summary(ctx);
    if (ctx->mem_report)
        rt_mem_report(ctx);
    rt_log_close(ctx);
    rt_data_close(ctx);
    if (ctx->comm) {
        rt_comm_barrier(ctx, RT_GROUP_WORLD, RT_COLL_FINISH);
        rt_comm_free(ctx, 0);
    }
    if (ctx->nccl)
        rt_nccl_free(ctx, 0);
    if (ctx->dev)
        rt_dev_free(ctx);
    if (ctx->net) {
        rt_net_barrier(ctx, RT_COLL_FINISH);
        rt_net_free(ctx, 0);
    }
    rt_pool_free();
    free(ctx->step_ms);
    rt_big_free(ctx->arena, (size_t)ctx->man.arena);
    rt_manifest_free(&ctx->man);
    if (rt_starting == ctx)
        rt_starting = NULL;
    free(ctx);
    return 0;
}
