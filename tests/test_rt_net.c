/* test_rt_net.c -- the TCP control plane (net.c) and NCCL loading (nccl.c),
 * with real rank processes on this host.
 *
 * Each scenario forks one process per rank (stdout and stderr to files);
 * a rank builds a minimal rt_ctx (no manifest text, no arena), meets the
 * others through MASTER_ADDR/MASTER_PORT on a free port, runs collectives
 * and writes "CHECK <name> <0|1>" lines.  The parent merges the lines of all
 * ranks (a check passes when every rank that ran it passed) and checks each
 * rank's exit status, its message and how long it took.
 *
 * Covered: barrier, broadcast from every root (1 byte to 3 MiB), any,
 * allgatherv (empty and 2 MiB parts) over 2, 3 and 4 ranks, over IPv4,
 * IPv6 and a host name, directly and through the rt_comm_* functions;
 * heartbeats that keep a waiting rank from timing out; the environment
 * (missing or bad MASTER_ADDR / MASTER_PORT, NNSC_ precedence, local
 * rank); rank 0 that never comes; a rank that never joins; a peer that
 * dies in a collective or between collectives (the watchdog); a rank that
 * stops with an error; rank 0 dying; a rank that times out; ranks out of
 * step; another world size, another build, a rank started twice, stray
 * connections; the job secret: SHA-256 and HMAC-SHA-256 against the NIST
 * and RFC 4231 vectors, a peer with another secret refused while rank 0
 * waits on for its own, a rank 0 with another secret refused by its peer,
 * no secret, a short one, a secret file (fit, readable by others, missing),
 * rank 0 listening on MASTER_ADDR's address only; NCCL that cannot be
 * loaded, and with the installed NCCL (no GPU here) a clean failure in
 * ncclCommInitRank.
 *
 * --keep: leave the ranks' stdout/stderr files and print where they are.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "rt_internal.h"

/* net.c's heartbeat (not in rt_internal.h yet). */

static char tmpdir[256];   /* per-run directory for the ranks' output */

#define SECRET "test-secret-of-this-job-0123456789"   /* the job secret of the scenarios */

/* ---- helpers */

/* Whole file as a NUL-terminated string ("" if unreadable). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *s = NULL;
    size_t n = 0, cap = 0;
    if (f) {
        for (;;) {
            if (n + 4096 + 1 > cap) {
                cap = (n + 4096 + 1) * 2;
                s = realloc(s, cap);
            }
            size_t r = fread(s + n, 1, 4096, f);
            n += r;
            if (r == 0)
                break;
        }
        fclose(f);
    }
    if (!s)
        s = malloc(1);
    s[n] = 0;
    return s;
}

/* A TCP port that was free a moment ago (bind port 0, read it back). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        perror("free_port");
        exit(1);
    }
    close(fd);
    return ntohs(a.sin_port);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* A file of mode `mode` holding text under tmpdir; its path into path. */
static void secret_file(const char *name, const char *text, int mode, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    chmod(path, (mode_t)mode);
}

/* A minimal context: what net.c and nccl.c read (no manifest text, no arena). */
static rt_ctx *mkctx(int rank, int world, const char *model, double timeout)
{
    rt_ctx *ctx = calloc(1, sizeof *ctx);
    snprintf(ctx->man.model, sizeof ctx->man.model, "%s", model);
    ctx->man.rank = ctx->rank = rank;
    ctx->man.world = ctx->world = world;
    ctx->man.steps = 10;
    ctx->man.seed = 1337;
    ctx->timeout = timeout;
    return ctx;
}

static void freectx(rt_ctx *ctx)
{
    free(ctx);
}

/* ---- inside a rank process */

static int child_fails;   /* failed CHECK lines of this process */

/* Report one check from a rank (merged by the parent). */
static void rcheck(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rcheck(int ok, const char *fmt, ...)
{
    char name[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    for (char *p = name; *p; p++)
        if (*p == ' ')
            *p = '_';
    printf("CHECK %s %d\n", name, ok);
    fflush(stdout);
    if (!ok)
        child_fails++;
}

/* Byte k of rank r's data for test t. */
static unsigned char pat(int r, int64_t k, int t)
{
    return (unsigned char)((k * 131 + r * 17 + t * 7 + (k >> 8)) & 0xff);
}

/* What the ranks of a scenario do after meeting. */
enum {
    SC_COLL,        /* every collective; rank 1 busy with heartbeats when beats is set */
    SC_INIT,        /* meet, finish */
    SC_NOTHING,     /* rt_net_init only (it is expected to fail) */
    SC_DIE_COLL,    /* rank world-1 dies; the others enter a barrier */
    SC_DIE_IDLE,    /* rank world-1 dies while the others are outside the collectives */
    SC_FAIL_SELF,   /* rank 1 stops with an error of its own (exit 2) */
    SC_ROOT_DIES,   /* rank 0 dies; the others enter a barrier */
    SC_SLOW,        /* rank world-1 enters the barrier long after the timeout */
    SC_STEP,        /* rank 1 runs `any` where the others run a barrier */
    SC_NCCL,        /* meet, then rt_nccl_init */
};

/* One scenario. */
typedef struct scen {
    const char *name;       /* label */
    int world;              /* the job's world size */
    int nproc;              /* processes started */
    int rank_of[8];         /* process k's rank (-1 ends the list; default k) */
    int world_of[8];        /* process k's idea of the world (0: world) */
    const char *model_of[8];/* process k's model name (NULL: "nettest") */
    const char *addr;       /* MASTER_ADDR */
    const char *nnsc_addr;  /* NNSC_MASTER_ADDR, or NULL */
    double timeout;         /* ctx->timeout */
    int kind;               /* SC_* */
    int beats;              /* SC_COLL: rank 1 busy for longer than the timeout, beating */
    const char *secret_of[8];   /* process k's NNSC_SECRET (NULL: SECRET; "": none) */
    const char *secret_file;    /* NNSC_SECRET_FILE of every process, or NULL */
    int port;               /* set by run() */
} scen;

/* SC_COLL's checks for rank r of w. */
static void coll_body(rt_ctx *ctx, int r, int w, const scen *s)
{
    for (int k = 0; k < 3; k++)
        rt_net_barrier(ctx, RT_COLL_BARRIER);
    rcheck(1, "3 barriers");

    /* broadcast from every root, small to large (partial reads and writes) */
    static const int64_t sizes[] = {1, 1000, 3 << 20};
    for (int root = 0; root < w; root++)
        for (int z = 0; z < 3; z++) {
            int64_t n = sizes[z];
            unsigned char *buf = malloc((size_t)n);
            for (int64_t k = 0; k < n; k++)
                buf[k] = r == root ? pat(root, k, z) : 0xAA;
            rt_net_broadcast(ctx, buf, n, root);
            int ok = 1;
            for (int64_t k = 0; k < n && ok; k++)
                ok = buf[k] == pat(root, k, z);
            rcheck(ok, "broadcast root %d bytes %lld", root, (long long)n);
            free(buf);
        }
    unsigned char none = 7;
    rt_net_broadcast(ctx, &none, 0, w - 1);   /* 0 bytes: nothing moves */
    rcheck(none == 7, "broadcast of 0 bytes");

    /* logical or: nobody, then each rank alone */
    rcheck(rt_net_any(ctx, 0, RT_COLL_SAVE) == 0, "any of all 0");
    for (int t = 0; t < w; t++)
        rcheck(rt_net_any(ctx, r == t ? 5 : 0, RT_COLL_LOAD) == 1, "any with rank %d set", t);

    /* byte allgather: lengths differ, rank 1 sends nothing, the last 2 MiB */
    for (int big = 0; big < 2; big++) {
        int64_t len = r == 1 ? 0 : big && r == w - 1 ? (2 << 20) : 100 * r + 3;
        unsigned char *mine = malloc((size_t)len + 1);
        for (int64_t k = 0; k < len; k++)
            mine[k] = pat(r, k, 9);
        int64_t lens[8];
        char *all = rt_net_allgatherv_bytes(ctx, mine, len, lens);
        int ok = 1;
        int64_t at = 0;
        for (int q = 0; q < w && ok; q++) {
            int64_t want = q == 1 ? 0 : big && q == w - 1 ? (2 << 20) : 100 * q + 3;
            ok = lens[q] == want;
            for (int64_t k = 0; k < want && ok; k++)
                ok = (unsigned char)all[at + k] == pat(q, k, 9);
            at += want;
        }
        rcheck(ok && all[at] == 0, "allgatherv %s", big ? "with 2 MiB" : "small, one empty");
        free(all);
        free(mine);
    }

    /* the same through comm_shm.c's functions (no segment, a control plane) */
    rt_comm_barrier(ctx, RT_GROUP_WORLD, RT_COLL_BARRIER);
    int64_t v = r == w - 1 ? 4242 : 0;
    rt_comm_broadcast(ctx, &v, sizeof v, RT_GROUP_WORLD, w - 1, 1);
    rcheck(v == 4242, "rt_comm_broadcast from rank %d", w - 1);
    rcheck(rt_comm_any(ctx, r == 0, RT_COLL_SAVE) == 1, "rt_comm_any");
    int64_t lens[8];
    char one = (char)('a' + r);
    char *all = rt_comm_allgatherv_bytes(ctx, &one, 1, lens, RT_COLL_SAVE);
    int ok = 1;
    for (int q = 0; q < w; q++)
        ok &= lens[q] == 1 && all[q] == 'a' + q;
    rcheck(ok, "rt_comm_allgatherv_bytes");
    free(all);

    /* a rank busy for longer than the timeout, beating: nobody times out
       (ranks other than 0 wait on rank 0, which passes the beats on) */
    if (s->beats) {
        if (r == 1) {
            double until = now_s() + ctx->timeout + 2.0 + 1.5;
            while (now_s() < until) {
                sleep_s(0.05);
                rt_comm_beat(ctx);
            }
        }
        rt_net_barrier(ctx, RT_COLL_SAVE);
        rcheck(1, "barrier after a rank busy for longer than the timeout, beating");
    }
}

/* Body of process k of scenario s; returns its exit status. */
static int rank_main(const scen *s, int k)
{
    int r = s->rank_of[k] >= 0 ? s->rank_of[k] : k;
    int w = s->world_of[k] ? s->world_of[k] : s->world;
    char port[16];
    snprintf(port, sizeof port, "%d", s->port);
    setenv("MASTER_ADDR", s->addr, 1);
    setenv("MASTER_PORT", port, 1);
    unsetenv("NNSC_MASTER_PORT");
    if (s->nnsc_addr)
        setenv("NNSC_MASTER_ADDR", s->nnsc_addr, 1);
    else
        unsetenv("NNSC_MASTER_ADDR");
    const char *secret = s->secret_of[k] ? s->secret_of[k] : SECRET;
    if (*secret)
        setenv("NNSC_SECRET", secret, 1);
    else
        unsetenv("NNSC_SECRET");
    if (s->secret_file)
        setenv("NNSC_SECRET_FILE", s->secret_file, 1);
    else
        unsetenv("NNSC_SECRET_FILE");
    rt_ctx *ctx = mkctx(r, w, s->model_of[k] ? s->model_of[k] : "nettest", s->timeout);
    rt_net_init(ctx);
    rcheck(1, "rendezvous");
    switch (s->kind) {
    case SC_COLL:
        coll_body(ctx, r, w, s);
        break;
    case SC_NOTHING:
        return 0;
    case SC_DIE_COLL:
    case SC_DIE_IDLE:
        rt_net_barrier(ctx, RT_COLL_BARRIER);
        if (r == w - 1) {
            sleep_s(0.3);
            _exit(3);
        }
        if (s->kind == SC_DIE_IDLE)
            sleep_s(30);   /* a long step: only the watchdog can notice */
        else
            rt_net_barrier(ctx, RT_COLL_BARRIER);
        rcheck(0, "survived a dead peer");
        break;
    case SC_FAIL_SELF:
        rt_net_barrier(ctx, RT_COLL_BARRIER);
        if (r == 1)
            rt_fatal(ctx, 2, "bad data file (test)");
        rt_net_barrier(ctx, RT_COLL_LOAD);
        rcheck(0, "survived a failed peer");
        break;
    case SC_ROOT_DIES:
        rt_net_barrier(ctx, RT_COLL_BARRIER);
        if (r == 0) {
            sleep_s(0.3);
            _exit(3);
        }
        rt_net_barrier(ctx, RT_COLL_BARRIER);
        rcheck(0, "survived rank 0's death");
        break;
    case SC_SLOW:
        if (r == w - 1)
            sleep_s(4 * ctx->timeout + 3);
        rt_net_barrier(ctx, RT_COLL_SAVE);
        rcheck(0, "survived a slow peer");
        break;
    case SC_STEP:
        if (r == 1)
            rt_net_any(ctx, 1, RT_COLL_LOAD);
        else
            rt_net_barrier(ctx, RT_COLL_BARRIER);
        rcheck(0, "collectives out of step went unnoticed");
        break;
    case SC_NCCL:
        rt_nccl_init(ctx);
        rcheck(0, "rt_nccl_init worked without a GPU");
        break;
    }
    rt_net_barrier(ctx, RT_COLL_FINISH);
    rt_net_free(ctx, 0);
    rcheck(ctx->net == NULL, "freed");
    freectx(ctx);
    return child_fails ? 1 : 0;
}

/* ---- the parent */

/* One process of a scenario, after it ended. */
typedef struct proc {
    pid_t pid;          /* its pid */
    int code;           /* exit status; 128 + signal; -1 if it was killed at the limit */
    double secs;        /* seconds from the start of the scenario to its end */
    char *out, *err;    /* what it printed */
} proc;

/* Start process k of s with stdout/stderr in files; returns its pid. */
static pid_t spawn(const scen *s, int k, int idx)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        char path[400];
        snprintf(path, sizeof path, "%s/s%d.p%d.out", tmpdir, idx, k);
        if (!freopen(path, "w", stdout))
            _exit(99);
        snprintf(path, sizeof path, "%s/s%d.p%d.err", tmpdir, idx, k);
        if (!freopen(path, "w", stderr))
            _exit(99);
        exit(rank_main(s, k));
    }
    return pid;
}

/* Wait for n processes for at most limit seconds (then kill them). */
static void reap(proc *p, int n, double t0, double limit)
{
    int left = n;
    for (int k = 0; k < n; k++)
        p[k].code = -2;
    while (left > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid > 0) {
            for (int k = 0; k < n; k++)
                if (p[k].pid == pid) {
                    p[k].code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                    p[k].secs = now_s() - t0;
                    left--;
                }
            continue;
        }
        if (now_s() - t0 > limit) {
            for (int k = 0; k < n; k++)
                if (p[k].code == -2) {
                    kill(p[k].pid, SIGKILL);
                    waitpid(p[k].pid, NULL, 0);
                    p[k].code = -1;
                    p[k].secs = now_s() - t0;
                    left--;
                }
            break;
        }
        sleep_s(0.005);
    }
}

/* Run scenario s (index idx): start its processes, wait up to limit s, read their output. */
static void run(scen *s, int idx, proc *p, double limit)
{
    s->port = free_port();
    double t0 = now_s();
    for (int k = 0; k < s->nproc; k++)
        p[k].pid = spawn(s, k, idx);
    reap(p, s->nproc, t0, limit);
    for (int k = 0; k < s->nproc; k++) {
        char path[400];
        snprintf(path, sizeof path, "%s/s%d.p%d.out", tmpdir, idx, k);
        p[k].out = slurp(path);
        snprintf(path, sizeof path, "%s/s%d.p%d.err", tmpdir, idx, k);
        p[k].err = slurp(path);
    }
}

static void drop(proc *p, int n)
{
    for (int k = 0; k < n; k++) {
        free(p[k].out);
        free(p[k].err);
    }
}

/* Merge the CHECK lines of all processes: one line per check name. */
static void merge_checks(const scen *s, proc *p)
{
    char names[256][128];
    int ok[256], cnt[256], nn = 0;
    for (int k = 0; k < s->nproc; k++)
        for (char *line = p[k].out; line && *line;) {
            char *nl = strchr(line, '\n');
            char name[128];
            int v;
            if (sscanf(line, "CHECK %127s %d", name, &v) == 2) {
                int j = 0;
                while (j < nn && strcmp(names[j], name))
                    j++;
                if (j == nn && nn < 256) {
                    snprintf(names[nn], sizeof names[nn], "%s", name);
                    ok[nn] = 1;
                    cnt[nn++] = 0;
                }
                if (j < nn) {
                    ok[j] &= v;
                    cnt[j]++;
                }
            }
            line = nl ? nl + 1 : NULL;
        }
    for (int j = 0; j < nn; j++)
        check(ok[j], "%s: %s (%d ranks)", s->name, names[j], cnt[j]);
}

/* Show a process's stderr under a failed check. */
static void show(const proc *p, int k)
{
    printf("      process %d: exit %d after %.2f s; stderr: %s", k, p->code, p->secs,
           p->err[0] ? p->err : "(empty)\n");
}

/* A scenario that should succeed: every process exits 0, every check passes. */
static void expect_ok(scen *s, int idx, double limit)
{
    proc p[8];
    run(s, idx, p, limit);
    merge_checks(s, p);
    for (int k = 0; k < s->nproc; k++) {
        check(p[k].code == 0 && !p[k].err[0], "%s: rank %d exits 0 with nothing on stderr",
              s->name, k);
        if (p[k].code != 0 || p[k].err[0])
            show(&p[k], k);
    }
    drop(p, s->nproc);
}

/* Process k of a scenario ended with `code` and `msg` in its stderr (and a
 * second string too, if not NULL) within `within` seconds. */
static void expect_proc(const scen *s, const proc *p, int k, int code, const char *msg,
                        const char *msg2, double within)
{
    int ok = p[k].code == code && strstr(p[k].err, msg) && (!msg2 || strstr(p[k].err, msg2)) &&
             p[k].secs <= within;
    check(ok, "%s: process %d exits %d within %.1f s saying \"%s\"%s%s%s", s->name, k, code,
          within, msg, msg2 ? " and \"" : "", msg2 ? msg2 : "", msg2 ? "\"" : "");
    if (!ok)
        show(&p[k], k);
}

/* ---- scenarios */

/* A fresh scenario: world w, process k = rank k. */
static scen mk(const char *name, int w, int kind, double timeout)
{
    scen s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.world = w;
    s.nproc = w;
    for (int k = 0; k < 8; k++)
        s.rank_of[k] = -1;
    s.addr = "127.0.0.1";
    s.timeout = timeout;
    s.kind = kind;
    return s;
}

/* Collectives over 2, 3 and 4 ranks, over IPv4, IPv6 and a host name. */
static void test_collectives(int *idx)
{
    scen s2 = mk("2 ranks, IPv6 [::1]", 2, SC_COLL, 5.0);
    s2.addr = "[::1]";
    scen s3 = mk("3 ranks, localhost, heartbeats", 3, SC_COLL, 1.0);
    s3.addr = "localhost";
    s3.beats = 1;
    scen s4 = mk("4 ranks, NNSC_MASTER_ADDR first", 4, SC_COLL, 5.0);
    s4.addr = "no-such-host.invalid";   /* MASTER_ADDR loses to NNSC_MASTER_ADDR */
    s4.nnsc_addr = "127.0.0.1";
    int have6 = socket(AF_INET6, SOCK_STREAM, 0);
    if (have6 >= 0) {
        close(have6);
        expect_ok(&s2, (*idx)++, 30);
    } else {
        printf("skip  no IPv6 on this host: 2 ranks over [::1]\n");
        s2.addr = "127.0.0.1";
        s2.name = "2 ranks, IPv4";
        expect_ok(&s2, (*idx)++, 30);
    }
    expect_ok(&s3, (*idx)++, 30);
    expect_ok(&s4, (*idx)++, 30);
}

/* Peers that die, fail, hang, never come, or disagree. */
static void test_failures(int *idx)
{
    proc p[8];

    scen no0 = mk("no rank 0", 2, SC_NOTHING, 1.0);
    no0.nproc = 1;
    no0.rank_of[0] = 1;
    run(&no0, (*idx)++, p, 10);
    char want[160];
    snprintf(want, sizeof want, "rank 1: no rendezvous with 127.0.0.1:%d after 1 s (is rank 0 "
             "running? same MASTER_PORT on every rank?)", no0.port);
    expect_proc(&no0, p, 0, 1, want, NULL, 3.0);
    drop(p, no0.nproc);

    scen miss = mk("a rank never joins", 3, SC_INIT, 2.0);
    miss.nproc = 2;   /* rank 2 is not started */
    run(&miss, (*idx)++, p, 15);
    expect_proc(&miss, p, 0, 1, "rank 0: rank 2 did not join the job within 2 s", NULL, 3.5);
    expect_proc(&miss, p, 1, 1, "rank 1: rank 2 did not join the job within 2 s (reported by "
                "rank 0)", NULL, 3.5);
    drop(p, miss.nproc);

    scen die = mk("a peer dies in a collective", 3, SC_DIE_COLL, 20.0);
    run(&die, (*idx)++, p, 25);
    expect_proc(&die, p, 0, 1, "rank 0: peer rank 2 left the job during barrier (connection",
                NULL, 3.0);
    expect_proc(&die, p, 1, 1, "rank 1: peer rank 2 left the job during barrier", "reported by "
                "rank 0", 3.0);
    expect_proc(&die, p, 2, 3, "", NULL, 3.0);
    drop(p, die.nproc);

    scen idle = mk("a peer dies between collectives", 4, SC_DIE_IDLE, 20.0);
    run(&idle, (*idx)++, p, 25);
    expect_proc(&idle, p, 0, 1, "rank 0: peer rank 3 left the job (connection closed)", NULL,
                3.0);
    for (int k = 1; k < 3; k++)
        expect_proc(&idle, p, k, 1, "peer rank 3 left the job (its connection closed; reported "
                    "by rank 0)", NULL, 3.0);
    double lag = 0;
    for (int k = 0; k < 3; k++)
        lag = p[k].secs - p[3].secs > lag ? p[k].secs - p[3].secs : lag;
    check(p[3].code == 3 && lag < 0.5, "%s: the others end %.0f ms after the death (< 500)",
          idle.name, 1e3 * lag);
    drop(p, idle.nproc);

    scen self = mk("a peer stops with an error", 3, SC_FAIL_SELF, 20.0);
    run(&self, (*idx)++, p, 25);
    expect_proc(&self, p, 1, 2, "rank 1: bad data file (test)", NULL, 3.0);
    expect_proc(&self, p, 0, 1, "rank 0: peer rank 1 left the job", "(it stopped with an error; "
                "see its message)", 3.0);
    expect_proc(&self, p, 2, 1, "rank 2: peer rank 1 left the job", "(it stopped with an error; "
                "reported by rank 0)", 3.0);
    drop(p, self.nproc);

    scen root = mk("rank 0 dies", 3, SC_ROOT_DIES, 20.0);
    run(&root, (*idx)++, p, 25);
    for (int k = 1; k < 3; k++)
        expect_proc(&root, p, k, 1, "peer rank 0 left the job during barrier (connection", NULL,
                    3.0);
    drop(p, root.nproc);

    scen slow = mk("a peer times out", 3, SC_SLOW, 1.0);
    run(&slow, (*idx)++, p, 15);
    expect_proc(&slow, p, 0, 1, "rank 0: peer rank 2 timed out in save (nothing from it for 1 s)",
                NULL, 2.0);
    expect_proc(&slow, p, 1, 1, "rank 1: peer rank 2 timed out in save (reported by rank 0)",
                NULL, 2.0);
    expect_proc(&slow, p, 2, 1, "rank 2: rank 0 stopped the job: this rank did not reach save "
                "within the timeout", NULL, 3.0);   /* its watchdog reads rank 0's verdict */
    drop(p, slow.nproc);

    scen step = mk("ranks out of step", 2, SC_STEP, 5.0);
    run(&step, (*idx)++, p, 15);
    expect_proc(&step, p, 0, 1, "rank 0: control messages out of step: rank 1 sent checkpoint "
                "load #1 (frame type 4), this rank is in barrier #1", NULL, 3.0);
    expect_proc(&step, p, 1, 1, "rank 1: peer rank 0 left the job during checkpoint load (it "
                "stopped with an error; see its message)", NULL, 3.0);
    drop(p, step.nproc);

    scen wworld = mk("another world size", 2, SC_INIT, 5.0);
    wworld.world_of[1] = 3;
    run(&wworld, (*idx)++, p, 15);
    expect_proc(&wworld, p, 0, 2, "rank 0: rank 1 (from ", "belongs to a job of 3 ranks of model "
                "'nettest', rank 0 to one of 2 ranks", 3.0);
    expect_proc(&wworld, p, 1, 2, "rank 1: rank 0 (at 127.0.0.1:", "refused this rank: rank 1 "
                "(from ", 3.0);
    drop(p, wworld.nproc);

    scen build = mk("another build", 3, SC_INIT, 5.0);
    build.model_of[2] = "othermodel";
    run(&build, (*idx)++, p, 15);
    expect_proc(&build, p, 0, 2, "comes from a different compile than rank 0 (model "
                "'othermodel' vs 'nettest'", NULL, 3.0);
    expect_proc(&build, p, 2, 2, "refused this rank: rank 2 (from ", "different compile", 3.0);
    /* rank 1 may be in (told rank 0 stopped) or not yet (no rendezvous): either way, exit 1 */
    check(p[1].code == 1, "%s: the bystander rank 1 exits 1", build.name);
    drop(p, build.nproc);

    scen twice = mk("a rank started twice", 3, SC_INIT, 3.0);
    twice.rank_of[2] = 1;   /* two processes claim rank 1; rank 2 never comes */
    run(&twice, (*idx)++, p, 15);
    expect_proc(&twice, p, 0, 2, "rank 0: rank 1 connected twice (from ", "each rank must be "
                "started once", 3.0);
    int second = p[1].code == 2 ? 1 : 2, first = 3 - second;
    expect_proc(&twice, p, second, 2, "refused this rank: rank 1 connected twice", NULL, 3.0);
    expect_proc(&twice, p, first, 1, "rank 1: peer rank 0 left the job during startup (it "
                "stopped with an error; see its message)", NULL, 3.0);
    drop(p, twice.nproc);
}

/* Stray connections to rank 0 (silent, garbage, closed at once) do not
 * stop the rendezvous. */
static void test_strays(int *idx)
{
    scen s = mk("stray connections", 2, SC_INIT, 5.0);
    s.nproc = 1;   /* rank 0 in a child; rank 1 started by hand below */
    proc p[2];
    s.port = free_port();
    double t0 = now_s();
    p[0].pid = spawn(&s, 0, *idx);
    int fds[3];
    for (int k = 0; k < 3; k++) {   /* wait for rank 0 to listen, then connect */
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)s.port);
        for (int tries = 0; tries < 400; tries++) {
            fds[k] = socket(AF_INET, SOCK_STREAM, 0);
            if (connect(fds[k], (struct sockaddr *)&a, sizeof a) == 0)
                break;
            close(fds[k]);
            fds[k] = -1;
            sleep_s(0.01);
        }
    }
    /* rank 0 listens on MASTER_ADDR's address (127.0.0.1), not on every
       interface: another address of this host (127.0.0.2) is refused */
    struct sockaddr_in other = {0};
    other.sin_family = AF_INET;
    other.sin_addr.s_addr = htonl(0x7f000002);
    other.sin_port = htons((uint16_t)s.port);
    int ofd = socket(AF_INET, SOCK_STREAM, 0);
    int oc = connect(ofd, (struct sockaddr *)&other, sizeof other), oe = errno;
    check(fds[0] >= 0 && oc != 0 && oe == ECONNREFUSED, "%s: rank 0 listens on MASTER_ADDR "
          "127.0.0.1 only (127.0.0.2:%d refused)", s.name, s.port);
    close(ofd);
    char junk[200];
    memset(junk, 'x', sizeof junk);
    (void)!write(fds[1], junk, sizeof junk);   /* garbage: not a hello */
    close(fds[2]);                             /* gone at once */
    s.nproc = 2;
    s.rank_of[1] = 1;
    p[1].pid = spawn(&s, 1, *idx);   /* same port: s.port is kept */
    reap(p, 2, t0, 15);
    for (int k = 0; k < 2; k++) {
        char path[400];
        snprintf(path, sizeof path, "%s/s%d.p%d.err", tmpdir, *idx, k);
        p[k].err = slurp(path);
        snprintf(path, sizeof path, "%s/s%d.p%d.out", tmpdir, *idx, k);
        p[k].out = slurp(path);
        check(p[k].code == 0 && !p[k].err[0] && strstr(p[k].out, "CHECK rendezvous 1"),
              "%s: rank %d meets its peer and exits 0", s.name, k);
        if (p[k].code != 0)
            show(&p[k], k);
    }
    (*idx)++;
    close(fds[0]);
    close(fds[1]);
    drop(p, 2);
}

/* ---- the environment, in child processes */

/* Run fn in a child with stderr to a file; returns its exit status, stderr in *err. */
static int in_child(void (*fn)(void *), void *arg, char **err)
{
    char path[400];
    snprintf(path, sizeof path, "%s/child.err", tmpdir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(path, "w", stderr) || !freopen("/dev/null", "w", stdout))
            _exit(99);
        fn(arg);
        exit(0);
    }
    int st;
    double t0 = now_s();
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (now_s() - t0 > 20) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
        }
        sleep_s(0.005);
    }
    *err = slurp(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Variables for one environment case ("NAME=value", NULL ends). */
typedef struct envcase {
    const char *set[5];     /* assignments */
    int code;               /* expected exit status */
    const char *msg;        /* expected in stderr */
    const char *msg2;       /* also expected, or NULL */
} envcase;

/* Child: a clean environment plus the case's variables, then rt_net_init as rank 1 of 2. */
static void env_child(void *arg)
{
    const envcase *e = arg;
    static const char *const vars[] = {"MASTER_ADDR", "MASTER_PORT", "NNSC_MASTER_ADDR",
                                       "NNSC_MASTER_PORT", "NNSC_SECRET", "NNSC_SECRET_FILE"};
    for (size_t k = 0; k < 6; k++)
        unsetenv(vars[k]);
    for (int k = 0; k < 5 && e->set[k]; k++)
        putenv((char *)e->set[k]);
    rt_ctx *ctx = mkctx(1, 2, "nettest", 1.0);
    rt_net_init(ctx);
}

static void test_env(void)
{
    static const envcase cases[] = {
        {{NULL}, 2, "rank 1: MASTER_ADDR is not set: the 2 ranks of a cuda-target job meet at "
         "MASTER_ADDR:MASTER_PORT", "out/launch sets them for ranks on one host"},
        {{"MASTER_ADDR=127.0.0.1"}, 2, "rank 1: MASTER_PORT is not set", NULL},
        {{"MASTER_PORT=29500"}, 2, "rank 1: MASTER_ADDR is not set", NULL},
        {{"MASTER_ADDR=", "MASTER_PORT=29500"}, 2, "rank 1: MASTER_ADDR is not set", NULL},
        {{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=65536"}, 2, "rank 1: MASTER_PORT must be a TCP "
         "port number in 1..65535, not '65536'", NULL},
        {{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=0"}, 2, "MASTER_PORT must be a TCP port", NULL},
        {{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=29x"}, 2, "not '29x'", NULL},
        {{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=29500", "NNSC_MASTER_PORT=-4"}, 2,
         "rank 1: NNSC_MASTER_PORT must be a TCP port number in 1..65535, not '-4'", NULL},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char *err;
        int code = in_child(env_child, (void *)&cases[k], &err);
        int ok = code == cases[k].code && strstr(err, cases[k].msg) &&
                 (!cases[k].msg2 || strstr(err, cases[k].msg2));
        check(ok, "environment %s %s: exit %d, \"%s\"", cases[k].set[0] ? cases[k].set[0] : "{}",
              cases[k].set[1] ? cases[k].set[1] : "", cases[k].code, cases[k].msg);
        if (!ok)
            printf("      exit %d: %s", code, err);
        free(err);
    }
    /* the job secret: none, too short, a file others can read, a missing file */
    char port[32], open_file[600], missing[600], path[400];
    snprintf(port, sizeof port, "MASTER_PORT=%d", free_port());
    secret_file("secret.644", SECRET, 0644, path, sizeof path);
    snprintf(open_file, sizeof open_file, "NNSC_SECRET_FILE=%s", path);
    snprintf(missing, sizeof missing, "NNSC_SECRET_FILE=%s/no-such-secret", tmpdir);
    const envcase secrets[] = {
        {{"MASTER_ADDR=127.0.0.1", port}, 2, "rank 1: no job secret: the ranks of a cuda-target job "
         "prove to each other", "  hint: export NNSC_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \\n')"},
        {{"MASTER_ADDR=127.0.0.1", port, "NNSC_SECRET=short"}, 2, "rank 1: the job secret in NNSC_SECRET "
         "has 5 bytes: at least 16 are needed", "hint:"},
        {{"MASTER_ADDR=127.0.0.1", port, open_file}, 2, "can be read by its group or others (mode "
         "0644): a job secret must be readable only by you  hint: chmod 600 ", NULL},
        {{"MASTER_ADDR=127.0.0.1", port, missing}, 2, "no-such-secret: No such file or directory", NULL},
    };
    for (size_t k = 0; k < sizeof secrets / sizeof secrets[0]; k++) {
        char *err;
        int code = in_child(env_child, (void *)&secrets[k], &err);
        int ok = code == 2 && strstr(err, secrets[k].msg) && (!secrets[k].msg2 || strstr(err, secrets[k].msg2));
        check(ok, "job secret %s: exit 2, \"%s\"", secrets[k].set[2] ? secrets[k].set[2] : "unset",
              secrets[k].msg);
        if (!ok)
            printf("      exit %d: %s", code, err);
        free(err);
    }
    /* an unknown host: exit 2 naming it (when the resolver answers at all) */
    envcase unknown = {{"MASTER_ADDR=no-such-host.invalid", port, "NNSC_SECRET=" SECRET}, 2, "", NULL};
    char *err;
    int code = in_child(env_child, &unknown, &err);
    if (code == 1 && strstr(err, "name lookup"))
        printf("skip  unknown MASTER_ADDR: the resolver does not answer here (%s)", err);
    else
        check(code == 2 && strstr(err, "rank 1: MASTER_ADDR 'no-such-host.invalid' is not a "
                                       "known host name or address"),
              "unknown MASTER_ADDR: exit 2 naming it");
    free(err);
}

/* Child: rt_net_local_rank with one bad variable. */
static void local_child(void *arg)
{
    putenv((char *)arg);
    rt_ctx *ctx = mkctx(3, 4, "nettest", 1.0);
    rt_net_local_rank(ctx);
}

static void test_local_rank(void)
{
    static const char *const vars[] = {"NNSC_LOCAL_RANK", "LOCAL_RANK", "SLURM_LOCALID",
                                       "OMPI_COMM_WORLD_LOCAL_RANK"};
    rt_ctx *ctx = mkctx(5, 8, "nettest", 1.0);
    for (int k = 0; k < 4; k++)
        unsetenv(vars[k]);
    check(rt_net_local_rank(ctx) == 5, "local rank: none set gives the rank");
    for (int k = 3; k >= 0; k--) {   /* set from the last to the first: each takes over */
        char v[8];
        snprintf(v, sizeof v, "%d", 10 + k);
        setenv(vars[k], v, 1);
        check(rt_net_local_rank(ctx) == 10 + k, "local rank: %s wins over the later ones",
              vars[k]);
    }
    setenv("NNSC_LOCAL_RANK", "", 1);
    check(rt_net_local_rank(ctx) == 11, "local rank: an empty NNSC_LOCAL_RANK counts as unset");
    for (int k = 0; k < 4; k++)
        unsetenv(vars[k]);
    freectx(ctx);
    static const char *const bad[] = {"LOCAL_RANK=abc", "NNSC_LOCAL_RANK=-1", "SLURM_LOCALID=1x",
                                      "OMPI_COMM_WORLD_LOCAL_RANK=99999999999"};
    for (int k = 0; k < 4; k++) {
        char *err, name[64];
        int code = in_child(local_child, (void *)bad[k], &err);
        snprintf(name, sizeof name, "%.*s", (int)(strchr(bad[k], '=') - bad[k]), bad[k]);
        char want[200];
        snprintf(want, sizeof want, "rank 3: %s must be this process's rank on its host (a "
                 "non-negative integer), not '%s'", name, strchr(bad[k], '=') + 1);
        check(code == 2 && strstr(err, want), "local rank: %s is exit 2 naming it", bad[k]);
        if (code != 2 || !strstr(err, want))
            printf("      exit %d: %s", code, err);
        free(err);
    }
}

/* ---- the job secret */

/* Lower-case hex of n bytes into out (2n + 1 bytes). */
static void hex(const unsigned char *p, size_t n, char *out)
{
    for (size_t k = 0; k < n; k++)
        snprintf(out + 2 * k, 3, "%02x", p[k]);
}

/* SHA-256 (FIPS 180-4; NIST's examples) and HMAC-SHA-256 (RFC 4231's test cases). */
static void test_hash(void)
{
    static char million[1000001];
    memset(million, 'a', 1000000);
    static const struct { const char *msg, *want; } sha[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
         "lmnopqrsmnopqrstnopqrstu", "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
        {million, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
    };
    for (size_t k = 0; k < sizeof sha / sizeof sha[0]; k++) {
        unsigned char d[RT_SHA256_LEN], d2[RT_SHA256_LEN];
        char got[2 * RT_SHA256_LEN + 1];
        size_t n = strlen(sha[k].msg);
        rt_sha256(sha[k].msg, n, d);
        hex(d, sizeof d, got);
        /* the same bytes fed in pieces of 1, 2, 3, ... bytes */
        rt_sha256_state st;
        rt_sha256_init(&st);
        for (size_t at = 0, step = 1; at < n; at += step, step = step % 97 + 1)
            rt_sha256_update(&st, sha[k].msg + at, n - at < step ? n - at : step);
        rt_sha256_final(&st, d2);
        check(!strcmp(got, sha[k].want) && !memcmp(d, d2, sizeof d), "SHA-256 of %zu bytes (%.12s%s): "
              "%s, also in pieces", n, sha[k].msg, n > 12 ? "..." : "", sha[k].want);
    }
    unsigned char k1[20], k3[20], d3[50], k4[25], d4[50], k5[20], k6[131];
    memset(k1, 0x0b, sizeof k1);
    memset(k3, 0xaa, sizeof k3);
    memset(d3, 0xdd, sizeof d3);
    for (int j = 0; j < 25; j++)
        k4[j] = (unsigned char)(j + 1);
    memset(d4, 0xcd, sizeof d4);
    memset(k5, 0x0c, sizeof k5);
    memset(k6, 0xaa, sizeof k6);
    static const char m7[] = "This is a test using a larger than block-size key and a larger than "
                             "block-size data. The key needs to be hashed before being used by the "
                             "HMAC algorithm.";
    static const char m6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
    const struct { const void *key; size_t klen; const void *msg; size_t mlen; const char *want; } mac[] = {
        {k1, 20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {"Jefe", 4, "what do ya want for nothing?", 28,
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {k3, 20, d3, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
        {k4, 25, d4, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
        {k5, 20, "Test With Truncation", 20, "a3b6167473100ee06e0c796c2955552b"},   /* 128 bits */
        {k6, 131, m6, strlen(m6), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
        {k6, 131, m7, strlen(m7), "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
    };
    for (size_t k = 0; k < sizeof mac / sizeof mac[0]; k++) {
        unsigned char t[RT_SHA256_LEN];
        char got[2 * RT_SHA256_LEN + 1];
        rt_hmac_sha256(mac[k].key, mac[k].klen, mac[k].msg, mac[k].mlen, t);
        hex(t, sizeof t, got);
        check(!strncmp(got, mac[k].want, strlen(mac[k].want)), "HMAC-SHA-256, RFC 4231 test case %zu: %s",
              k + 1, mac[k].want);
    }
    unsigned char a[40] = {0}, b[40] = {0};
    int eq = rt_ct_equal(a, b, 40);
    b[39] = 1;
    int ne1 = !rt_ct_equal(a, b, 40);
    b[39] = 0;
    b[0] = 0x80;
    check(eq && ne1 && !rt_ct_equal(a, b, 40) && rt_ct_equal(a, b + 1, 39),
          "constant-time compare: equal, a difference in the last or the first byte");
}

/* A forged peer: connect to rank 0 at port (retrying while it starts),
 * send a well-formed hello of rank 1 of 2, read the challenge, answer with
 * a proof of random bytes, and put the reason of rank 0's reject into why. */
static void forge_peer(int port, char *why, size_t len)
{
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    int fd = -1;
    for (int tries = 0; tries < 400 && fd < 0; tries++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
            close(fd);
            fd = -1;
            sleep_s(0.01);
        }
    }
    /* net.c's wire format: header {type, what, seq, len} little-endian, then
       the hello {magic, version 2, rank, world, build, model, nonce} */
    unsigned char hello[24 + 128] = {0}, ch[24 + 64], proof[24 + 32], hdr[24];
    hello[0] = 1;                                       /* NET_T_HELLO */
    hello[16] = 128;                                    /* payload bytes */
    memcpy(hello + 24, "nnsc-net", 8);                  /* NET_MAGIC, little-endian */
    hello[24 + 8] = 2;                                  /* NET_VERSION */
    hello[24 + 12] = 1;                                 /* rank 1 */
    hello[24 + 16] = 2;                                 /* of 2 */
    memcpy(hello + 24 + 32, "nettest", 7);
    for (int k = 0; k < 32; k++)
        hello[24 + 96 + k] = (unsigned char)(k * 37 + 1);
    memset(proof, 0, sizeof proof);
    proof[0] = 8;                                       /* NET_T_PROOF */
    proof[16] = 32;
    for (int k = 0; k < 32; k++)
        proof[24 + k] = (unsigned char)(k * 11 + 5);    /* not the HMAC: no secret here */
    snprintf(why, len, "(no answer)");
    if (fd < 0 || write(fd, hello, sizeof hello) != (ssize_t)sizeof hello ||
        recv(fd, ch, sizeof ch, MSG_WAITALL) != (ssize_t)sizeof ch || ch[0] != 7 ||
        write(fd, proof, sizeof proof) != (ssize_t)sizeof proof ||
        recv(fd, hdr, sizeof hdr, MSG_WAITALL) != (ssize_t)sizeof hdr || hdr[0] != 3) {
        if (fd >= 0)
            close(fd);
        return;
    }
    size_t rl = (size_t)hdr[16] | (size_t)hdr[17] << 8, n = rl < len - 1 ? rl : len - 1;
    ssize_t r = recv(fd, why, n, MSG_WAITALL);
    why[r > 0 ? r : 0] = 0;
    close(fd);
}

/* Rank 0 and its peers with and without the job's secret, over TCP. */
static void test_secrets(int *idx)
{
    /* peers that do not know the secret: a rank of another job (which finds
       that rank 0 is not its own and leaves) and a forged client (a right
       hello, a wrong proof: refused); rank 0 says so of both, waits on, and
       the job's own rank 1 joins */
    scen s = mk("peers with another secret", 2, SC_INIT, 6.0);
    s.nproc = 3;
    s.rank_of[1] = s.rank_of[2] = 1;
    s.secret_of[1] = "the-secret-of-another-job-9876543210";
    proc p[3];
    s.port = free_port();
    double t0 = now_s();
    p[0].pid = spawn(&s, 0, *idx);
    p[1].pid = spawn(&s, 1, *idx);   /* the other job's rank first */
    reap(&p[1], 1, t0, 10);
    char reject[600] = "";
    forge_peer(s.port, reject, sizeof reject);
    p[2].pid = spawn(&s, 2, *idx);
    proc q[2] = {p[0], p[2]};
    reap(q, 2, t0, 20);
    p[0] = q[0];
    p[2] = q[1];
    for (int k = 0; k < 3; k++) {
        char path[400];
        snprintf(path, sizeof path, "%s/s%d.p%d.out", tmpdir, *idx, k);
        p[k].out = slurp(path);
        snprintf(path, sizeof path, "%s/s%d.p%d.err", tmpdir, *idx, k);
        p[k].err = slurp(path);
    }
    (*idx)++;
    expect_proc(&s, p, 1, 2, "rank 1: the process listening at 127.0.0.1:", "is not this job's rank "
                "0: it does not know this job's secret (NNSC_SECRET), so this rank does not join it", 3.0);
    check(strstr(reject, "rank 0 refused the connection: it does not know this job's secret") != NULL,
          "%s: a forged peer (right hello, wrong proof) is refused: \"%s\"", s.name, reject);
    check(p[0].code == 0 && strstr(p[0].err, "claiming rank 1 left before proving this job's secret") &&
              strstr(p[0].err, "rank 0: refused a connection from 127.0.0.1:") &&
              strstr(p[0].err, "claiming rank 1: it does not know this job's secret") &&
              strstr(p[0].err, "still waiting for this job's ranks") && strstr(p[0].out, "CHECK freed 1"),
          "%s: rank 0 says so of both, waits on, and finishes with its own rank 1", s.name);
    check(p[2].code == 0 && strstr(p[2].out, "CHECK freed 1") && !p[2].err[0],
          "%s: the job's own rank 1 joins after the refusals and exits 0", s.name);
    for (int k = 0; k < 3; k++)
        if (k != 1 && !strstr(p[k].out, "CHECK freed 1"))
            show(&p[k], k);
    drop(p, 3);

    /* a rank 0 that does not know the secret: its peer leaves before it proves anything */
    scen r0 = mk("a rank 0 with another secret", 2, SC_INIT, 1.0);
    r0.secret_of[0] = "the-secret-of-another-job-9876543210";
    run(&r0, (*idx)++, p, 15);
    expect_proc(&r0, p, 1, 2, "rank 1: the process listening at 127.0.0.1:", "is not this job's rank "
                "0: it does not know this job's secret (NNSC_SECRET)", 3.0);
    expect_proc(&r0, p, 0, 1, "rank 0: rank 1 did not join the job within 1 s", NULL, 3.0);
    drop(p, 2);

    /* the secret from a file only its owner can read */
    char path[400];
    secret_file("secret.ok", SECRET "\n", 0600, path, sizeof path);
    scen f = mk("2 ranks, NNSC_SECRET_FILE", 2, SC_INIT, 5.0);
    f.secret_of[0] = f.secret_of[1] = "";
    f.secret_file = path;
    expect_ok(&f, (*idx)++, 15);
}

/* ---- NCCL */

/* Child: rt_nccl_init of rank 0 of 2 with NNSC_NCCL_LIB = arg (NULL: unset). */
static void nccl_child(void *arg)
{
    if (arg)
        setenv("NNSC_NCCL_LIB", arg, 1);
    else
        unsetenv("NNSC_NCCL_LIB");
    rt_ctx *ctx = mkctx(0, 2, "nettest", 1.0);
    rt_nccl_init(ctx);
}

static void test_nccl(int *idx)
{
    char *err;
    int code = in_child(nccl_child, "libnccl-not-installed.so.2", &err);
    check(code == 2 && strstr(err, "rank 0: NCCL not found: NNSC_NCCL_LIB=libnccl-not-installed"
                                   ".so.2 does not exist or is not on the library path\n") &&
              !strstr(err, "cannot open shared object"),
          "NCCL: a missing NNSC_NCCL_LIB is exit 2 naming it");
    if (code != 2)
        printf("      exit %d: %s", code, err);
    free(err);

    code = in_child(nccl_child, "libm.so.6", &err);
    check(code == 2 && strstr(err, "rank 0: libm.so.6 has no ncclGetVersion: NCCL 2.18 or later "
                                   "is needed"),
          "NCCL: a library without NCCL's functions is exit 2");
    if (code != 2)
        printf("      exit %d: %s", code, err);
    free(err);

    char fake[400];   /* a file that is no library: the loader's reason is kept */
    snprintf(fake, sizeof fake, "%s/libnccl-fake.so.2", tmpdir);
    FILE *f = fopen(fake, "w");
    for (int k = 0; k < 20; k++)
        fputs("not an ELF file\n", f);
    fclose(f);
    code = in_child(nccl_child, fake, &err);
    check(code == 2 && strstr(err, "rank 0: NCCL cannot be loaded from ") &&
              strstr(err, "libnccl-fake.so.2: invalid ELF header"),
          "NCCL: a file that is no library is exit 2 with the loader's reason");
    if (code != 2)
        printf("      exit %d: %s", code, err);
    free(err);

    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        code = in_child(nccl_child, NULL, &err);
        check(code == 2 && strstr(err, "rank 0: NCCL not found: libnccl.so.2 is not installed or "
                                       "not on the library path (install NCCL or put its lib "
                                       "directory on LD_LIBRARY_PATH)\n") &&
                  !strstr(err, "cannot open shared object"),
              "NCCL: no libnccl.so.2 is exit 2 with what to do");
        if (code != 2)
            printf("      exit %d: %s", code, err);
        free(err);
        printf("skip  the installed NCCL: libnccl.so.2 cannot be opened here\n");
        return;
    }
    dlclose(h);
    printf("skip  no libnccl.so.2 case: the loader finds one here (ldconfig or LD_LIBRARY_PATH)\n");
    /* the installed NCCL with no GPU: the id goes round, ncclCommInitRank fails cleanly on
       both ranks (or one fails and the other follows it) */
    scen s = mk("NCCL without a GPU", 2, SC_NCCL, 10.0);
    proc p[2];
    setenv("NNSC_NCCL_LIB", "libnccl.so.2", 1);
    run(&s, (*idx)++, p, 60);
    unsetenv("NNSC_NCCL_LIB");
    int named = 0, ok = 1;
    for (int k = 0; k < 2; k++) {
        int own = strstr(p[k].err, "nccl.c:") && strstr(p[k].err, "NCCL: ncclCommInitRank "
                                                                   "failed in joining the world "
                                                                   "communicator of 2 ranks: ");
        named += own;
        ok &= p[k].code == 1 && (own || strstr(p[k].err, "left the job"));
    }
    check(ok && named >= 1, "%s: both ranks exit 1, a failing ncclCommInitRank named with "
          "file:line and NCCL's reason", s.name);
    if (!(ok && named >= 1))
        for (int k = 0; k < 2; k++)
            show(&p[k], k);
    drop(p, 2);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);   /* the strays' sockets; ranks use MSG_NOSIGNAL anyway */
    snprintf(tmpdir, sizeof tmpdir, "%s/nnsc-test-net-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR")
             : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    for (const char *const *v = (const char *const[]){"NNSC_LOCAL_RANK", "LOCAL_RANK",
                                                      "SLURM_LOCALID",
                                                      "OMPI_COMM_WORLD_LOCAL_RANK", NULL};
         *v; v++)
        unsetenv(*v);
    int idx = 0;
    test_hash();
    test_local_rank();
    test_env();
    test_collectives(&idx);
    test_strays(&idx);
    test_failures(&idx);
    test_secrets(&idx);
    test_nccl(&idx);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (argc > 1 && !strcmp(argv[1], "--keep"))
        printf("the ranks' output is in %s\n", tmpdir);
    else if (system(cmd) != 0)
        printf("note: could not remove %s\n", tmpdir);
    return check_done();
}
