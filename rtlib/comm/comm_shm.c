/* comm_shm.c -- collectives between the rank processes of one host, over a
 * POSIX shared-memory segment.
 *
 * Segment layout (one per job, named /nnsc-<NNSC_JOB>):
 *
 *   shm_hdr                       magic, sizes, abort flag
 *   shm_rank[world]               pid and state of each rank (one cache line each)
 *   shm_ctr[sum of slot sizes]    barrier counters: one per (slot, member)
 *   shm_pair[world * world]       send/ack sequence numbers per ordered rank pair
 *   staging[world][2][half]       each rank's two staging halves
 *
 * Slot 0 is the internal group of all ranks; manifest group g is slot g+1.
 * A barrier on a slot: member m stores its next epoch into its counter
 * (release) and waits until every member's counter reaches it (acquire), so
 * what a member wrote to its staging before the barrier is visible to all
 * after it.  A rank is in one collective at a time, in program order, so its
 * staging belongs to that collective; every group collective ends with a
 * barrier, after which no member reads anyone's staging any more.
 *
 * Data moves in chunks through the staging halves, so any n works with a
 * bounded segment.  Reductions add the members' values in member order
 * (((m0 + m1) + m2) + ...) whoever computes them, so all members get bitwise
 * the same sums, and reducescatter gives the same bits as allreduce.
 *
 * Nothing waits forever: every wait has a deadline (--timeout), watches the
 * peer's pid (kill(pid, 0), and /proc for zombies), and the segment's abort
 * flag, which a rank that fails sets before it exits.  A peer busy with long
 * file I/O (checkpoints) bumps its heartbeat, which restarts the deadline of
 * a rank waiting for it: slow disks are not hangs.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/rt_comm.h"
#include "cpu/rt_lowp.h"

#define SHM_MAGIC UINT64_C(0x6e6e73632d73686d)   /* "nnsc-shm" */
#define SHM_VERSION 3
#define SHM_DEFAULT_HALF (INT64_C(2) << 20)       /* 2 MiB per staging half */

/* States of a rank in the segment. */
enum {
    SHM_UNATTACHED = 0,  /* has not opened the segment yet */
    SHM_RUNNING = 1,     /* attached and working */
    SHM_FINISHED = 2,    /* passed rt_finish's last barrier */
    SHM_GONE = 3,        /* failed, or exited without rt_finish */
};

/* The segment header (written by rank 0 before it publishes magic). */
typedef struct shm_hdr {
    _Atomic uint64_t magic;        /* SHM_MAGIC once the segment is ready */
    uint32_t version;              /* SHM_VERSION (magic and version stay first in every layout) */
    int32_t world;                 /* number of ranks */
    int32_t nslots;                /* 1 + number of manifest groups */
    int32_t pid0;                  /* rank 0's process id (a live one: the segment is in use) */
    uint64_t groups_hash;          /* hash of the group table: all manifests must agree */
    uint64_t total;                /* segment bytes */
    int64_t half;                  /* bytes per staging half */
    _Atomic uint64_t abort;        /* 0, or the first rank that gave up (low 32 bits,
                                      plus 1) and the peer it blamed (bits 32..62,
                                      plus 1; 0 if it failed by itself); bit 63: the
                                      peer timed out (else it died) */
    int32_t auth;                  /* 1: the job has a secret, and tag0 proves rank 0 knows it */
    int32_t pad1;                  /* (alignment) */
    unsigned char nonce0[RT_NONCE_LEN];   /* rank 0's fresh nonce */
    unsigned char tag0[RT_SHA256_LEN];    /* shm_tag(rank 0): HMAC over the name and nonce0 */
} shm_hdr;

/* Per-rank record, two cache lines. */
typedef struct shm_rank {
    _Atomic int32_t pid;           /* process id once attached, else 0 */
    _Atomic int32_t state;         /* SHM_* */
    _Atomic uint64_t beat;         /* bumped by long file I/O (rt_comm_beat) */
    unsigned char nonce[RT_NONCE_LEN];    /* a peer's fresh nonce (auth) */
    unsigned char tag[RT_SHA256_LEN];     /* shm_tag(this rank): it knows the secret (auth) */
    char pad[48];                  /* keep ranks on separate lines */
} shm_rank;

/* A barrier counter, one cache line. */
typedef struct shm_ctr {
    _Atomic uint64_t v;            /* last epoch the member reached */
    char pad[56];                  /* keep counters on separate lines */
} shm_ctr;

/* Point-to-point state of one ordered pair (src -> dst). */
typedef struct shm_pair {
    _Atomic uint64_t sent;         /* chunks src has posted to dst, ever (written by src) */
    _Atomic uint64_t ack;          /* chunks dst has copied out, ever (written by dst) */
    _Atomic int64_t n;             /* floats in src's current transfer (checked by dst) */
    _Atomic int64_t off;           /* ... where in src's staging its chunks go (bytes) */
    _Atomic int64_t chunk;         /* ... floats per chunk */
    _Atomic int64_t depth;         /* ... chunks in flight (chunk k at off + (k % depth) * chunk) */
    int64_t pad[2];                /* (64 bytes) */
} shm_pair;

/* One process's view of the segment. */
struct rt_comm {
    int rank;                      /* this process's rank */
    char name[NAME_MAX];           /* shm name, "/nnsc-..." */
    char path[NAME_MAX + 16];      /* its file, "/dev/shm/nnsc-...", for messages */
    rt_secret secret;              /* the job's secret (auth), wiped once every rank is in */
    int auth;                      /* 1: the job has a secret */
    int linked;                    /* rank 0: the name still exists */
    void *base;                    /* mapping */
    size_t size;                   /* mapping bytes */
    shm_hdr *hdr;                  /* header */
    shm_rank *ranks;               /* [world] */
    shm_ctr *ctr;                  /* barrier counters */
    shm_pair *pairs;               /* [world * world] */
    char *stage;                   /* staging, [world][2][half] */
    int64_t half;                  /* bytes per staging half */
    int nslots;                    /* 1 + manifest groups */
    int *slot_n;                   /* members per slot */
    const int **slot_ranks;        /* member ranks per slot */
    int *slot_me;                  /* this rank's index in each slot, or -1 */
    int64_t *slot_ctr;             /* first counter of each slot */
    uint64_t *epoch;               /* barriers passed, per slot */
    uint64_t *sent, *recvd;        /* chunks sent to / received from each rank */
    int *world_ranks;              /* 0..world-1, the members of slot 0 */
};

/* The communicator of this process, for the exit hook. */
static rt_comm *shm_live;

/* ---- small helpers */

/* A pause for spin loops. */
static inline void shm_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

const char *rt_coll_name(int what)
{
    switch (what) {
    case RT_COLL_INIT: return "startup";
    case RT_COLL_ALLREDUCE: return "allreduce";
    case RT_COLL_ALLGATHER: return "allgather";
    case RT_COLL_REDUCESCATTER: return "reducescatter";
    case RT_COLL_BROADCAST: return "broadcast";
    case RT_COLL_SENDRECV: return "sendrecv";
    case RT_COLL_ALLTOALL: return "alltoall";
    case RT_COLL_BARRIER: return "barrier";
    case RT_COLL_SAVE: return "save";
    case RT_COLL_LOAD: return "checkpoint load";
    case RT_COLL_FINISH: return "finish";
    }
    return "?";
}

/* "group 3" or "world". */
static const char *shm_group_name(int g, char *buf, size_t len)
{
    if (g == RT_GROUP_WORLD)
        snprintf(buf, len, "the world group");
    else
        snprintf(buf, len, "group %d", g);
    return buf;
}

/* Staging half h of rank r. */
static inline char *shm_stage(const rt_comm *c, int r, int h)
{
    return c->stage + ((int64_t)r * 2 + h) * c->half;
}

/* ---- failure */

#define SHM_ABORT_TIMEOUT (UINT64_C(1) << 63)   /* abort word: the culprit timed out */

/* Record that this rank gives up (blaming culprit, or -1, which timed out
 * or died), if nobody did yet. */
static void shm_set_abort(rt_comm *c, int me, int culprit, int timed_out)
{
    uint64_t expect = 0;
    uint64_t word = (uint64_t)(uint32_t)(me + 1) | (uint64_t)(uint32_t)(culprit + 1) << 32 |
                    (timed_out ? SHM_ABORT_TIMEOUT : 0);
    atomic_compare_exchange_strong(&c->hdr->abort, &expect, word);
}

/* A wait failed: tell the peers, print the one-line reason, exit 1. */
static void shm_fail(rt_ctx *ctx, int culprit, const char *how, int what, int g)
    __attribute__((noreturn));
static void shm_fail(rt_ctx *ctx, int culprit, const char *how, int what, int g)
{
    char gb[32];
    shm_set_abort(ctx->comm, ctx->rank, culprit, how[0] == 't');
    rt_fatal(ctx, 1, "peer rank %d %s in %s on %s", culprit, how, rt_coll_name(what),
             shm_group_name(g, gb, sizeof gb));
}

/* Another rank gave up first (abort word ab): follow it. */
static void shm_follow_abort(rt_ctx *ctx, uint64_t ab, int what, int g) __attribute__((noreturn));
static void shm_follow_abort(rt_ctx *ctx, uint64_t ab, int what, int g)
{
    char gb[32];
    int who = (int)(uint32_t)ab - 1;
    int culprit = (int)((uint32_t)(ab >> 32) & 0x7fffffff) - 1;
    if (culprit < 0 || culprit == ctx->rank || culprit == who)   /* it failed by itself */
        rt_fatal(ctx, 1, "peer rank %d died in %s on %s (it exited or failed)", who,
                 rt_coll_name(what), shm_group_name(g, gb, sizeof gb));
    rt_fatal(ctx, 1, "peer rank %d %s in %s on %s (reported by rank %d)", culprit,
             ab & SHM_ABORT_TIMEOUT ? "timed out" : "died", rt_coll_name(what),
             shm_group_name(g, gb, sizeof gb), who);
}

/* 1 if rank r has exited (or is a zombie, or marked itself gone), not
 * after passing rt_finish's last barrier: a rank still waiting in that
 * barrier may have read r's counter before r stored it, and r, which saw
 * every counter, may be gone by the time the waiter checks (seen with 128
 * ranks on 2 cores); what r stored is there to read. */
static int shm_rank_dead(const rt_comm *c, int r)
{
    int st = atomic_load(&c->ranks[r].state);
    if (st == SHM_GONE)
        return 1;
    if (st == SHM_FINISHED)
        return 0;
    pid_t pid = atomic_load(&c->ranks[r].pid);
    if (pid <= 0)
        return 0;   /* not attached yet: only the deadline applies */
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return 1;
    /* an exited child whose parent has not reaped it still answers kill() */
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

/* ---- waiting */

/* State of one bounded wait. */
typedef struct shm_waiter {
    rt_ctx *ctx;         /* the rank */
    int what;            /* rt_coll, for messages */
    int g;               /* group, for messages */
    double deadline;     /* give up after this (rt_now seconds) */
    double next_check;   /* next liveness check */
    unsigned iter;       /* rounds waited so far */
    int beat_rank;       /* the peer whose heartbeat was last read (-1: none) */
    uint64_t beat;       /* its heartbeat then */
} shm_waiter;

/* Start a wait that may last ctx->timeout seconds. */
static void shm_waiter_init(shm_waiter *w, rt_ctx *ctx, int what, int g)
{
    double now = rt_now();
    w->ctx = ctx;
    w->what = what;
    w->g = g;
    w->deadline = now + ctx->timeout;
    w->next_check = now + 0.02;
    w->iter = 0;
    w->beat_rank = -1;
    w->beat = 0;
}

/* Progress was made: restart the deadline. */
static void shm_waiter_progress(shm_waiter *w)
{
    w->iter = 0;
    w->deadline = rt_now() + w->ctx->timeout;
}

/* One round of waiting for peers a and b (-1: none): spin, then yield, then
 * sleep; check the abort flag, the peers' liveness and the deadline. */
static void shm_pause(shm_waiter *w, int a, int b)
{
    rt_comm *c = w->ctx->comm;
    w->iter++;
    if (w->iter < 64) {
        shm_relax();
        return;
    }
    uint64_t ab = atomic_load_explicit(&c->hdr->abort, memory_order_relaxed);
    if (ab && (int)(uint32_t)ab - 1 != w->ctx->rank)
        shm_follow_abort(w->ctx, ab, w->what, w->g);
    if (w->iter < 4096) {
        sched_yield();
    } else {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    if ((w->iter & 15) == 0) {
        double now = rt_now();
        if (now >= w->next_check) {
            w->next_check = now + 0.05;
            if (a >= 0 && shm_rank_dead(c, a))
                shm_fail(w->ctx, a, "died", w->what, w->g);
            if (b >= 0 && shm_rank_dead(c, b))
                shm_fail(w->ctx, b, "died", w->what, w->g);
            if (a >= 0) {   /* a busy peer is not a hung one */
                uint64_t beat = atomic_load_explicit(&c->ranks[a].beat, memory_order_relaxed);
                if (w->beat_rank == a && beat != w->beat)
                    w->deadline = now + w->ctx->timeout;
                w->beat_rank = a;
                w->beat = beat;
            }
        }
        if (now > w->deadline)
            shm_fail(w->ctx, a >= 0 ? a : b, "timed out", w->what, w->g);
    }
}

/* Wait until *v >= target; owner is the rank that advances it. */
static void shm_wait_ge(shm_waiter *w, _Atomic uint64_t *v, uint64_t target, int owner)
{
    w->iter = 0;
    while (atomic_load_explicit(v, memory_order_acquire) < target)
        shm_pause(w, owner, -1);
}

/* ---- groups and barriers */

/* A collective's view of its group. */
typedef struct shm_grp {
    int slot;            /* slot in the segment (0 = world) */
    int n;               /* members */
    int me;              /* this rank's member index */
    const int *ranks;    /* member ranks */
} shm_grp;

/* Resolve group g for this rank (a manifest id or RT_GROUP_WORLD); exits
 * when g is unknown or this rank is not in it (a code generation bug). */
static shm_grp shm_group(rt_ctx *ctx, int64_t g, int what)
{
    static const int rank0[1] = {0};
    shm_grp r;
    if (g != RT_GROUP_WORLD && (g < 0 || g >= ctx->man.ngroups))
        rt_fatal(ctx, 1, "%s on group %lld, but the manifest has %d groups", rt_coll_name(what),
                 (long long)g, ctx->man.ngroups);
    r.slot = (int)g + 1;
    if (!ctx->comm) {             /* world == 1: every group is {0} */
        r.n = 1;
        r.me = 0;
        r.ranks = rank0;
    } else {
        r.n = ctx->comm->slot_n[r.slot];
        r.me = ctx->comm->slot_me[r.slot];
        r.ranks = ctx->comm->slot_ranks[r.slot];
    }
    if (!ctx->comm && g != RT_GROUP_WORLD && ctx->man.groups[g].n != 1)
        rt_fatal(ctx, 1, "%s on group %lld of %d ranks, but the world has one rank",
                 rt_coll_name(what), (long long)g, ctx->man.groups[g].n);
    if (r.me < 0)
        rt_fatal(ctx, 1, "%s on group %lld, which does not contain rank %d", rt_coll_name(what),
                 (long long)g, ctx->rank);
    return r;
}

/* Barrier over the members of gr. */
static void shm_barrier(rt_ctx *ctx, const shm_grp *gr, int what, int g)
{
    if (gr->n == 1)
        return;
    rt_comm *c = ctx->comm;
    shm_ctr *ctr = &c->ctr[c->slot_ctr[gr->slot]];
    uint64_t e = ++c->epoch[gr->slot];
    atomic_store_explicit(&ctr[gr->me].v, e, memory_order_release);
    shm_waiter w;
    shm_waiter_init(&w, ctx, what, g);
    for (int j = 0; j < gr->n; j++)
        if (j != gr->me)
            shm_wait_ge(&w, &ctr[j].v, e, gr->ranks[j]);
}

/* Cuda target (no segment; a TCP control plane, net.c, when world > 1):
 * 1 when a control collective on group g goes to net.c, which has only the
 * world group (device data goes through NCCL). */
static int shm_use_net(rt_ctx *ctx, int g, int what)
{
    if (ctx->comm || !ctx->net)
        return 0;
    if (g != RT_GROUP_WORLD)
        rt_fatal(ctx, 1, "%s on group %d over the TCP control plane, which has only the world "
                 "group", rt_coll_name(what), g);
    return 1;
}

void rt_comm_barrier(rt_ctx *ctx, int g, rt_coll what)
{
    if (shm_use_net(ctx, g, what)) {
        rt_net_barrier(ctx, what);
        return;
    }
    shm_grp gr = shm_group(ctx, g, what);
    shm_barrier(ctx, &gr, what, g);
}

/* ---- set-up and tear-down */

/* Bytes from the start of the segment to each array, and the total. */
typedef struct shm_layout {
    size_t ranks, ctr, pairs, stage, total;   /* offsets and size */
    int64_t nctr;                             /* barrier counters */
} shm_layout;

/* Round up to a page. */
static size_t shm_align(size_t x)
{
    return (x + 4095) & ~(size_t)4095;
}

/* Where each array lives for this manifest and staging size. */
static shm_layout shm_compute_layout(const rt_manifest *m, int64_t half)
{
    shm_layout l;
    l.nctr = m->world;
    for (int g = 0; g < m->ngroups; g++)
        l.nctr += m->groups[g].n;
    l.ranks = shm_align(sizeof(shm_hdr));
    l.ctr = shm_align(l.ranks + (size_t)m->world * sizeof(shm_rank));
    l.pairs = shm_align(l.ctr + (size_t)l.nctr * sizeof(shm_ctr));
    l.stage = shm_align(l.pairs + (size_t)m->world * (size_t)m->world * sizeof(shm_pair));
    l.total = shm_align(l.stage + (size_t)m->world * 2 * (size_t)half);
    return l;
}

/* Hash of the group table: every rank's manifest must list the same groups. */
static uint64_t shm_groups_hash(const rt_manifest *m)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    int64_t words[2] = {m->world, m->ngroups};
    for (int k = 0; k < 2; k++)
        h = (h ^ (uint64_t)words[k]) * UINT64_C(0x100000001b3);
    for (int g = 0; g < m->ngroups; g++) {
        h = (h ^ (uint64_t)m->groups[g].n) * UINT64_C(0x100000001b3);
        for (int j = 0; j < m->groups[g].n; j++)
            h = (h ^ (uint64_t)m->groups[g].ranks[j]) * UINT64_C(0x100000001b3);
    }
    return h;
}

/* The segment name from NNSC_JOB (or the Slurm job and step); exits 2 if none. */
static void shm_name(rt_ctx *ctx, char *out, size_t len)
{
    char job[200];
    const char *j = getenv("NNSC_JOB");
    const char *sj = getenv("SLURM_JOB_ID"), *ss = getenv("SLURM_STEP_ID");
    if (j && *j)
        snprintf(job, sizeof job, "%s", j);
    else if (sj && *sj)
        snprintf(job, sizeof job, "slurm-%s-%s", sj, ss ? ss : "0");
    else
        rt_fatal(ctx, 2, "NNSC_JOB is not set: with %d ranks the ranks meet in shared memory "
                         "named after it (the generated launch script sets it; set it to a "
                         "string unique to this run, the same for all ranks)", ctx->world);
    char *o = out;
    o += snprintf(out, len, "/nnsc-");
    for (const char *p = job; *p && o < out + len - 1; p++)
        *o++ = (char)((p[0] >= 'a' && p[0] <= 'z') || (p[0] >= 'A' && p[0] <= 'Z') ||
                              (p[0] >= '0' && p[0] <= '9') || p[0] == '-' || p[0] == '_' ||
                              p[0] == '.'
                          ? p[0]
                          : '_');
    *o = 0;
}

/* Exit hook: a rank that leaves without rt_finish is marked gone, so its
 * peers stop waiting for it at once. */
static void shm_atexit(void)
{
    rt_comm *c = shm_live;
    if (!c || atomic_load(&c->ranks[c->rank].pid) != (int32_t)getpid())
        return;   /* none, or a forked child that never attached */
    if (atomic_load(&c->ranks[c->rank].state) == SHM_RUNNING) {
        atomic_store(&c->ranks[c->rank].state, SHM_GONE);
        shm_set_abort(c, c->rank, -1, 0);
    }
    if (c->linked)
        shm_unlink(c->name);
}

/* ---- ownership and authentication
 *
 * Anyone on the host may create a file in /dev/shm, so a segment is used
 * only when it is this user's and closed to everyone else (fstat before
 * mapping), and rank 0 creates its own with O_EXCL, never taking over or
 * removing one another user owns or another live job uses.  With a job
 * secret, rank 0 proves in the header that it knows it (tag0: an HMAC over
 * the segment's name and a fresh nonce) and every peer, before it writes a
 * byte, checks that proof, then leaves its own in its rank record (over
 * rank 0's nonce, its rank and a nonce of its own), which rank 0 checks once
 * all are in: ranks of two runs that share an NNSC_JOB never mix. */

#define SHM_HINT "  hint: give each run its own NNSC_JOB, or leave it unset (out/launch makes a " \
                 "fresh one per run)"

/* The tag rank r proves the secret with: HMAC(secret, "nnsc-shm rank" || r ||
 * name || nonce0 [|| nonce, for a peer]). */
static void shm_tag(const rt_comm *c, int r, const unsigned char *nonce0, const unsigned char *nonce,
                    unsigned char out[RT_SHA256_LEN])
{
    unsigned char rb[4] = {(unsigned char)r, (unsigned char)(r >> 8), (unsigned char)(r >> 16),
                           (unsigned char)(r >> 24)};
    rt_hmac_state h;
    rt_hmac_init(&h, c->secret.key, c->secret.len);
    rt_hmac_update(&h, "nnsc-shm rank", 13);
    rt_hmac_update(&h, rb, 4);
    rt_hmac_update(&h, c->name, strlen(c->name));
    rt_hmac_update(&h, nonce0, RT_NONCE_LEN);
    if (nonce)
        rt_hmac_update(&h, nonce, RT_NONCE_LEN);
    rt_hmac_final(&h, out);
}

/* Exit 2 unless st (of the segment's file, open as fd or -1) is a regular
 * file of this user that its group and others cannot open. */
static void shm_check_owner(rt_ctx *ctx, rt_comm *c, int fd, const struct stat *st)
{
    if (st->st_uid != geteuid()) {
        if (fd >= 0)
            close(fd);
        rt_fatal(ctx, 2, "shared memory %s belongs to uid %d, not to this user (uid %d): refusing "
                 "it (another user made it, perhaps to take over this job's ranks)  hint: give "
                 "the run another NNSC_JOB (out/launch makes a fresh one when NNSC_JOB is unset), "
                 "and have the file removed by its owner or an administrator", c->path,
                 (int)st->st_uid, (int)geteuid());
    }
    if (!S_ISREG(st->st_mode) || (st->st_mode & 077)) {
        if (fd >= 0)
            close(fd);
        rt_fatal(ctx, 2, "shared memory %s can be opened by its group or others (mode %04o): "
                 "refusing it (a job's segment is its user's alone)  hint: remove it (rm %s) and "
                 "start the job again", c->path, (unsigned)(st->st_mode & 07777), c->path);
    }
}

/* The segment's file exists but cannot be opened (errno e): name its owner; exit 2. */
static void shm_unopenable(rt_ctx *ctx, rt_comm *c, int e)
{
    struct stat st;
    if (lstat(c->path, &st) == 0)
        shm_check_owner(ctx, c, -1, &st);
    rt_fatal(ctx, 2, "cannot open shared memory %s: %s", c->path, strerror(e));
}

/* 1 if process pid exists (a pid of another user counts). */
static int shm_pid_alive(pid_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

/* Rank 0: a segment of this name exists.  Exit 2 if another user owns it
 * or a live job uses it; else it is left by a run that crashed before its
 * ranks met: remove it. */
static void shm_clear_stale(rt_ctx *ctx, rt_comm *c)
{
    int fd = shm_open(c->name, O_RDWR, 0);
    if (fd < 0) {
        if (errno == ENOENT)
            return;   /* gone meanwhile */
        shm_unopenable(ctx, c, errno);
    }
    struct stat st;
    if (fstat(fd, &st) != 0)
        rt_fatal(ctx, 1, "fstat of shared memory %s failed: %s", c->path, strerror(errno));
    shm_check_owner(ctx, c, fd, &st);
    /* a segment being made now (no magic yet) gets a moment to be published */
    double until = rt_now() + 0.5;
    while ((size_t)st.st_size < sizeof(shm_hdr) && rt_now() < until) {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
        if (fstat(fd, &st) != 0)
            break;
    }
    if ((size_t)st.st_size >= sizeof(shm_hdr)) {
        shm_hdr *h = mmap(NULL, sizeof(shm_hdr), PROT_READ, MAP_SHARED, fd, 0);
        if (h != MAP_FAILED) {
            while (atomic_load_explicit(&h->magic, memory_order_acquire) != SHM_MAGIC && rt_now() < until)
                sched_yield();
            int live = atomic_load(&h->magic) == SHM_MAGIC && h->version == SHM_VERSION &&
                       h->pid0 != (int32_t)getpid() && shm_pid_alive(h->pid0);
            pid_t pid0 = h->pid0;
            munmap(h, sizeof(shm_hdr));
            if (live) {
                close(fd);
                rt_fatal(ctx, 2, "shared memory %s is in use by another job with the same NNSC_JOB "
                         "(its rank 0 is pid %d, still running): refusing to take it over" SHM_HINT,
                         c->path, (int)pid0);
            }
        }
    }
    close(fd);
    shm_unlink(c->name);   /* this user's, and nobody uses it */
}

/* Map fd (size bytes) or exit. */
static void *shm_map(rt_ctx *ctx, int fd, size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        rt_fatal(ctx, 1, "mmap of %zu bytes of shared memory failed: %s", size, strerror(errno));
    return p;
}

/* Rank 0: create and initialise the segment (O_EXCL; a stale one of this
 * user is replaced, any other refused). */
static void shm_create(rt_ctx *ctx, rt_comm *c, const shm_layout *l)
{
    int fd = -1;
    for (int tries = 0; fd < 0; tries++) {
        fd = shm_open(c->name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd >= 0)
            break;
        if (errno != EEXIST || tries == 3)
            rt_fatal(ctx, 1, "cannot create shared memory %s: %s", c->path, strerror(errno));
        shm_clear_stale(ctx, c);   /* left by a crashed run of the same job name? */
    }
    c->linked = 1;
    struct stat st;
    if (fstat(fd, &st) != 0)
        rt_fatal(ctx, 1, "fstat of shared memory %s failed: %s", c->path, strerror(errno));
    shm_check_owner(ctx, c, fd, &st);   /* made by us with 0600: a check of the checks */
    if (ftruncate(fd, (off_t)l->total) != 0) {
        int e = errno;
        shm_unlink(c->name);
        c->linked = 0;
        rt_fatal(ctx, 1, "cannot size shared memory %s to %zu bytes: %s", c->path, l->total,
                 strerror(e));
    }
    c->base = shm_map(ctx, fd, l->total);
    c->size = l->total;
    close(fd);
    shm_hdr *h = c->base;
    h->version = SHM_VERSION;
    h->world = ctx->world;
    h->nslots = c->nslots;
    h->pid0 = (int32_t)getpid();
    h->groups_hash = shm_groups_hash(&ctx->man);
    h->total = l->total;
    h->half = c->half;
    h->auth = c->auth;
    if (c->auth) {
        rt_random(ctx, h->nonce0, RT_NONCE_LEN);
        shm_tag(c, 0, h->nonce0, NULL, h->tag0);
    }
    atomic_store_explicit(&h->magic, SHM_MAGIC, memory_order_release);
}

/* A peer: does rank 0 of the segment at h know this job's secret?  Exit 2
 * if not; nothing has been written to the segment. */
static void shm_check_root(rt_ctx *ctx, rt_comm *c, const shm_hdr *h)
{
    if (h->auth != c->auth)
        rt_fatal(ctx, 2, "rank 0 of shared memory %s (pid %d) runs %s a job secret and this rank "
                 "%s: another job with the same NNSC_JOB, or ranks started with different "
                 "NNSC_SECRET / NNSC_SECRET_FILE" SHM_HINT, c->path, (int)h->pid0,
                 h->auth ? "with" : "without", c->auth ? "with one" : "without");
    if (!c->auth)
        return;
    unsigned char want[RT_SHA256_LEN];
    shm_tag(c, 0, h->nonce0, NULL, want);
    if (!rt_ct_equal(want, h->tag0, RT_SHA256_LEN))
        rt_fatal(ctx, 2, "shared memory %s belongs to another job with the same NNSC_JOB: its "
                 "rank 0 (pid %d) does not know this job's secret (%s), so this rank does not "
                 "join it" SHM_HINT, c->path, (int)h->pid0, c->secret.from);
}

/* Other ranks: open the segment rank 0 made, retrying until the deadline. */
static void shm_open_peer(rt_ctx *ctx, rt_comm *c, const rt_manifest *m)
{
    double deadline = rt_now() + ctx->timeout;
    for (unsigned tries = 0;; tries++) {
        if (rt_now() > deadline)
            rt_fatal(ctx, 1, "peer rank 0 timed out in startup: shared memory %s did not "
                             "appear within %g s (is rank 0 running with the same NNSC_JOB?)",
                     c->path, ctx->timeout);
        if (tries) {
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
        }
        int fd = shm_open(c->name, O_RDWR, 0);
        if (fd < 0) {
            if (errno != ENOENT)
                shm_unopenable(ctx, c, errno);
            continue;
        }
        struct stat st;
        if (fstat(fd, &st) != 0) {
            close(fd);
            continue;
        }
        shm_check_owner(ctx, c, fd, &st);   /* before mapping a byte of it */
        if ((size_t)st.st_size < sizeof(shm_hdr)) {
            close(fd);
            continue;
        }
        void *p = shm_map(ctx, fd, (size_t)st.st_size);
        close(fd);
        shm_hdr *h = p;
        while (atomic_load_explicit(&h->magic, memory_order_acquire) != SHM_MAGIC &&
               rt_now() < deadline)
            sched_yield();
        if (atomic_load(&h->magic) != SHM_MAGIC ||
            (h->version == SHM_VERSION && !shm_pid_alive(h->pid0))) {
            munmap(p, (size_t)st.st_size);   /* stale segment of an earlier run: retry */
            continue;
        }
        if (h->version != SHM_VERSION) {
            uint32_t v = h->version;
            munmap(p, (size_t)st.st_size);
            rt_fatal(ctx, 2, "shared memory %s has layout %u, this rank layout %u: were all rank "
                     "executables built by the same nnsc-aot?", c->path, v, SHM_VERSION);
        }
        shm_check_root(ctx, c, h);
        if (h->world != ctx->world || h->nslots != c->nslots || h->groups_hash != shm_groups_hash(m)) {
            uint64_t expect = 0;   /* tell rank 0 not to wait for us */
            atomic_compare_exchange_strong(&h->abort, &expect, (uint64_t)(ctx->rank + 1));
            rt_fatal(ctx, 2, "rank 0's manifest lists different groups or world size than "
                             "this rank's (were all rank executables built by the same "
                             "compile?)");
        }
        c->half = h->half;
        shm_layout l = shm_compute_layout(m, c->half);
        if (l.total != h->total || l.total != (size_t)st.st_size)
            rt_fatal(ctx, 2, "shared memory %s has an unexpected size", c->path);
        c->base = p;
        c->size = l.total;
        return;
    }
}

/* Rank 0, once every rank is in: each peer's proof of the secret.  A rank
 * without one (not nnsc's, since a rank of another job leaves before it
 * writes): exit 2, and the peers stop. */
static void shm_check_peers(rt_ctx *ctx, rt_comm *c)
{
    for (int r = 1; r < ctx->world && c->auth; r++) {
        unsigned char want[RT_SHA256_LEN];
        shm_tag(c, r, c->hdr->nonce0, c->ranks[r].nonce, want);
        if (!rt_ct_equal(want, c->ranks[r].tag, RT_SHA256_LEN)) {
            shm_set_abort(c, ctx->rank, r, 0);
            rt_fatal(ctx, 2, "the process attached to shared memory %s as rank %d (pid %d) did not "
                     "prove this job's secret: stopping the job", c->path, r,
                     (int)atomic_load(&c->ranks[r].pid));
        }
    }
}

/* Point the array pointers into the mapping and set up the slot tables. */
static void shm_setup_views(rt_ctx *ctx, rt_comm *c)
{
    const rt_manifest *m = &ctx->man;
    shm_layout l = shm_compute_layout(m, c->half);
    char *b = c->base;
    c->hdr = (shm_hdr *)b;
    c->ranks = (shm_rank *)(b + l.ranks);
    c->ctr = (shm_ctr *)(b + l.ctr);
    c->pairs = (shm_pair *)(b + l.pairs);
    c->stage = b + l.stage;
    int64_t next = 0;
    for (int s = 0; s < c->nslots; s++) {
        c->slot_n[s] = s == 0 ? m->world : m->groups[s - 1].n;
        c->slot_ranks[s] = s == 0 ? c->world_ranks : m->groups[s - 1].ranks;
        c->slot_ctr[s] = next;
        next += c->slot_n[s];
        c->slot_me[s] = -1;
        for (int j = 0; j < c->slot_n[s]; j++)
            if (c->slot_ranks[s][j] == ctx->rank)
                c->slot_me[s] = j;
    }
}

/* Staging half size: $NNSC_SHM_STAGE_KB (tests), else 2 MiB; at least 64 B per rank. */
static int64_t shm_half_bytes(rt_ctx *ctx)
{
    int64_t half = SHM_DEFAULT_HALF;
    const char *e = getenv("NNSC_SHM_STAGE_KB");
    if (e && *e) {
        char *end;
        long long kb = strtoll(e, &end, 10);
        if (*end || kb < 1 || kb > (1 << 20))
            rt_fatal(ctx, 2, "NNSC_SHM_STAGE_KB must be 1..1048576, not '%s'", e);
        half = kb * 1024;
    }
    if (half < (int64_t)ctx->world * 64)
        half = (int64_t)ctx->world * 64;
    return half;
}

void rt_comm_init(rt_ctx *ctx)
{
    static int hooked;
    rt_comm *c = calloc(1, sizeof *c);
    const rt_manifest *m = &ctx->man;
    if (!c)
        rt_fatal(ctx, 1, "out of memory");
    c->nslots = 1 + m->ngroups;
    c->slot_n = calloc((size_t)c->nslots, sizeof *c->slot_n);
    c->slot_ranks = calloc((size_t)c->nslots, sizeof *c->slot_ranks);
    c->slot_me = calloc((size_t)c->nslots, sizeof *c->slot_me);
    c->slot_ctr = calloc((size_t)c->nslots, sizeof *c->slot_ctr);
    c->epoch = calloc((size_t)c->nslots, sizeof *c->epoch);
    c->sent = calloc((size_t)ctx->world, sizeof *c->sent);
    c->recvd = calloc((size_t)ctx->world, sizeof *c->recvd);
    c->world_ranks = calloc((size_t)ctx->world, sizeof *c->world_ranks);
    if (!c->slot_n || !c->slot_ranks || !c->slot_me || !c->slot_ctr || !c->epoch || !c->sent ||
        !c->recvd || !c->world_ranks)
        rt_fatal(ctx, 1, "out of memory");
    for (int r = 0; r < ctx->world; r++)
        c->world_ranks[r] = r;
    c->rank = ctx->rank;
    shm_name(ctx, c->name, sizeof c->name);
    snprintf(c->path, sizeof c->path, "/dev/shm%s", c->name);
    c->auth = rt_job_secret(ctx, &c->secret);   /* none: the owner and mode checks alone */
    if (ctx->rank == 0) {
        c->half = shm_half_bytes(ctx);
        shm_layout l = shm_compute_layout(m, c->half);
        shm_create(ctx, c, &l);
    } else {
        shm_open_peer(ctx, c, m);
    }
    shm_setup_views(ctx, c);
    ctx->comm = c;
    ctx->on_fatal = rt_comm_abort;   /* rt_fatal tells the peers */
    shm_live = c;
    if (!hooked) {
        hooked = 1;
        atexit(shm_atexit);
    }
    if (c->auth && ctx->rank > 0) {   /* this rank's proof, for rank 0 (released by the barrier) */
        rt_random(ctx, c->ranks[ctx->rank].nonce, RT_NONCE_LEN);
        shm_tag(c, ctx->rank, c->hdr->nonce0, c->ranks[ctx->rank].nonce, c->ranks[ctx->rank].tag);
    }
    atomic_store(&c->ranks[ctx->rank].pid, (int32_t)getpid());
    atomic_store(&c->ranks[ctx->rank].state, SHM_RUNNING);
    /* everyone attached: the name is no longer needed, so a crash from here
     * on leaves nothing behind in /dev/shm */
    rt_comm_barrier(ctx, RT_GROUP_WORLD, RT_COLL_INIT);
    if (ctx->rank == 0) {
        shm_unlink(c->name);
        c->linked = 0;
        shm_check_peers(ctx, c);
    }
    rt_secret_wipe(&c->secret);
}

void rt_comm_abort(rt_ctx *ctx)
{
    rt_comm_free(ctx, 1);
    rt_net_free(ctx, 1);
}

void rt_comm_span(const rt_ctx *ctx, const void **p, size_t *bytes)
{
    const rt_comm *c = ctx->comm;
    *p = c ? c->base : NULL;
    *bytes = c ? (size_t)c->size : 0;
}

void rt_comm_free(rt_ctx *ctx, int failed)
{
    rt_comm *c = ctx->comm;
    if (!c)
        return;
    ctx->comm = NULL;
    if (c->hdr) {
        if (failed)
            shm_set_abort(c, ctx->rank, -1, 0);
        atomic_store(&c->ranks[ctx->rank].state, failed ? SHM_GONE : SHM_FINISHED);
    }
    if (c->linked)
        shm_unlink(c->name);
    if (shm_live == c)
        shm_live = NULL;
    if (c->base)
        munmap(c->base, c->size);
    free(c->slot_n);
    free(c->slot_ranks);
    free(c->slot_me);
    free(c->slot_ctr);
    free(c->epoch);
    free(c->sent);
    free(c->recvd);
    free(c->world_ranks);
    free(c);
}

void rt_comm_beat(rt_ctx *ctx)
{
    if (ctx && ctx->comm)
        atomic_fetch_add_explicit(&ctx->comm->ranks[ctx->rank].beat, 1, memory_order_relaxed);
    else if (ctx && ctx->net)
        rt_net_beat(ctx);
}

int64_t rt_comm_stage_bytes(const rt_ctx *ctx)
{
    return ctx->comm ? ctx->comm->half : 0;
}

/* ---- reductions */

/* dst[t] = src[0][t] + src[1][t] + ... in member order (bitwise reproducible). */
static void shm_reduce(float *dst, const float *const *src, int p, int64_t cnt)
{
    const float *s0 = src[0];
    for (int64_t t = 0; t < cnt; t++)
        dst[t] = s0[t];
    for (int j = 1; j < p; j++) {
        const float *s = src[j];
        for (int64_t t = 0; t < cnt; t++)
            dst[t] += s[t];
    }
}

/* Start of member j's share of a chunk of cnt floats (16-float aligned cuts). */
static inline int64_t shm_cut(int64_t cnt, int p, int j)
{
    if (j >= p)
        return cnt;
    return (cnt * j / p) & ~(int64_t)15;
}

/* Most members in any group: bounds the small per-call pointer arrays. */
#define SHM_PTRS 64

/* Pointers to the members' staging (half h, plus byte offset off) for shm_reduce;
 * uses the caller's array when the group is small, else malloc. */
static const float **shm_srcs(const rt_comm *c, const shm_grp *gr, int h, int64_t off,
                              const float **small)
{
    const float **s = gr->n <= SHM_PTRS ? small : malloc((size_t)gr->n * sizeof *s);
    RT_ASSERT(s);
    for (int j = 0; j < gr->n; j++)
        s[j] = (const float *)(shm_stage(c, gr->ranks[j], h) + off);
    return s;
}

/* A reduction of cnt elements: dst = the member-order sum of src[0 .. p). */
typedef void shm_reducer(void *dst, const void *const *src, int p, int64_t cnt);

static void shm_reduce_f32(void *dst, const void *const *src, int p, int64_t cnt)
{
    shm_reduce(dst, (const float *const *)src, p, cnt);
}

/* The all-reduce of n elements of es bytes, summed by red: fast, each member
 * sums its share of a staged chunk into its half 1 and all copy all shares;
 * the reference, every member sums the whole chunk itself (the same sums). */
static void shm_allreduce(rt_ctx *ctx, char *buf, int64_t n, int es, shm_reducer *red, int g, int fast)
{
    shm_grp gr = shm_group(ctx, g, RT_COLL_ALLREDUCE);
    if (gr.n == 1 || n <= 0)
        return;
    rt_comm *c = ctx->comm;
    const int w = RT_COLL_ALLREDUCE;
    int64_t chunk = c->half / es;   /* elements a staging half holds */
    const float *small[SHM_PTRS];
    for (int64_t o = 0; o < n; o += chunk) {
        int64_t cnt = n - o < chunk ? n - o : chunk;
        memcpy(shm_stage(c, ctx->rank, 0), buf + o * es, (size_t)(cnt * es));
        shm_barrier(ctx, &gr, w, g);
        int64_t a = fast ? shm_cut(cnt, gr.n, gr.me) : 0, b = fast ? shm_cut(cnt, gr.n, gr.me + 1) : cnt;
        const float **src = shm_srcs(c, &gr, 0, a * es, small);
        red(fast ? shm_stage(c, ctx->rank, 1) + a * es : buf + o * es, (const void *const *)src, gr.n, b - a);
        if (src != small)
            free(src);
        shm_barrier(ctx, &gr, w, g);
        if (fast)
            for (int j = 0; j < gr.n; j++) {
                int64_t aj = shm_cut(cnt, gr.n, j), bj = shm_cut(cnt, gr.n, j + 1);
                memcpy(buf + (o + aj) * es, shm_stage(c, gr.ranks[j], 1) + aj * es, (size_t)((bj - aj) * es));
            }
    }
    shm_barrier(ctx, &gr, w, g);
}

void rt_comm_allreduce(rt_ctx *ctx, float *buf, int64_t n, int g, int fast)
{
    shm_allreduce(ctx, (char *)buf, n, 4, shm_reduce_f32, g, fast);
}

/* bf16 (the top half of an f32) widened, and an f32 rounded to bf16 (nearest even; rt_lowp.h). */
static inline float shm_bf16_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

static inline uint16_t shm_f32_bf16(float x)
{
    float r = rt_bf16_round(x);
    uint32_t u;
    memcpy(&u, &r, 4);
    return (uint16_t)(u >> 16);
}

/* dst[t] = bf16(src[0][t] + src[1][t] + ...): the bf16 values widened, summed in f32 in member
 * order, rounded once (bitwise reproducible; blocks of SHM_R16 in f32 on the stack). */
#define SHM_R16 512
static void shm_reduce_bf16(void *dstv, const void *const *srcv, int p, int64_t cnt)
{
    uint16_t *dst = dstv;
    const uint16_t *const *src = (const uint16_t *const *)srcv;
    float acc[SHM_R16];
    for (int64_t t0 = 0; t0 < cnt; t0 += SHM_R16) {
        int64_t m = cnt - t0 < SHM_R16 ? cnt - t0 : SHM_R16;
        for (int64_t t = 0; t < m; t++)
            acc[t] = shm_bf16_f32(src[0][t0 + t]);
        for (int j = 1; j < p; j++)
            for (int64_t t = 0; t < m; t++)
                acc[t] += shm_bf16_f32(src[j][t0 + t]);
        for (int64_t t = 0; t < m; t++)
            dst[t0 + t] = shm_f32_bf16(acc[t]);
    }
}

void rt_comm_allreduce_bf16(rt_ctx *ctx, uint16_t *buf, int64_t n, int g, int fast)
{
    shm_allreduce(ctx, (char *)buf, n, 2, shm_reduce_bf16, g, fast);
}

/* The reduce-scatter of size * n elements of es bytes, summed by red: member
 * k gets block k (elements [k n, (k + 1) n)) of the member-order sum.  Fast,
 * every member posts its pieces of all blocks side by side and sums the column
 * that is its own, halves alternating; the reference, one reduction per
 * block, everyone posting its piece (the same sums). */
static void shm_reducescatter(rt_ctx *ctx, const char *send, char *recv, int64_t n, int es, shm_reducer *red,
                              int g, int fast)
{
    shm_grp gr = shm_group(ctx, g, RT_COLL_REDUCESCATTER);
    if (n <= 0)
        return;
    if (gr.n == 1) {
        memmove(recv, send, (size_t)(n * es));
        return;
    }
    rt_comm *c = ctx->comm;
    const int w = RT_COLL_REDUCESCATTER;
    const float *small[SHM_PTRS];
    if (fast) {
        int64_t piece = c->half / es / gr.n, k = 0;
        for (int64_t o = 0; o < n; o += piece, k++) {
            int64_t cnt = n - o < piece ? n - o : piece;
            int h = (int)(k & 1);
            char *mine = shm_stage(c, ctx->rank, h);
            for (int d = 0; d < gr.n; d++)
                memcpy(mine + d * cnt * es, send + ((int64_t)d * n + o) * es, (size_t)(cnt * es));
            shm_barrier(ctx, &gr, w, g);
            const float **src = shm_srcs(c, &gr, h, gr.me * cnt * es, small);
            red(recv + o * es, (const void *const *)src, gr.n, cnt);
            if (src != small)
                free(src);
        }
    } else {
        int64_t chunk = c->half / es;
        for (int d = 0; d < gr.n; d++)
            for (int64_t o = 0; o < n; o += chunk) {
                int64_t cnt = n - o < chunk ? n - o : chunk;
                memcpy(shm_stage(c, ctx->rank, 0), send + ((int64_t)d * n + o) * es, (size_t)(cnt * es));
                shm_barrier(ctx, &gr, w, g);
                if (d == gr.me) {
                    const float **src = shm_srcs(c, &gr, 0, 0, small);
                    red(recv + o * es, (const void *const *)src, gr.n, cnt);
                    if (src != small)
                        free(src);
                }
                shm_barrier(ctx, &gr, w, g);
            }
    }
    shm_barrier(ctx, &gr, w, g);
}

void rt_comm_reducescatter(rt_ctx *ctx, const float *send, float *recv, int64_t n, int g, int fast)
{
    shm_reducescatter(ctx, (const char *)send, (char *)recv, n, 4, shm_reduce_f32, g, fast);
}

void rt_comm_reducescatter_bf16(rt_ctx *ctx, const uint16_t *send, uint16_t *recv, int64_t n, int g, int fast)
{
    shm_reducescatter(ctx, (const char *)send, (char *)recv, n, 2, shm_reduce_bf16, g, fast);
}

/* ---- data movement */

void rt_comm_allgather(rt_ctx *ctx, const float *send, float *recv, int64_t n, int g, int fast)
{
    shm_grp gr = shm_group(ctx, g, RT_COLL_ALLGATHER);
    if (n <= 0)
        return;
    if (gr.n == 1) {
        memmove(recv, send, (size_t)n * 4);
        return;
    }
    rt_comm *c = ctx->comm;
    const int w = RT_COLL_ALLGATHER;
    int64_t chunk = c->half / 4, k = 0;
    for (int64_t o = 0; o < n; o += chunk, k++) {
        int64_t cnt = n - o < chunk ? n - o : chunk;
        int h = fast ? (int)(k & 1) : 0;   /* fast: alternate halves, one barrier a chunk */
        memcpy(shm_stage(c, ctx->rank, h), send + o, (size_t)cnt * 4);
        shm_barrier(ctx, &gr, w, g);
        for (int j = 0; j < gr.n; j++) {
            float *dst = recv + (int64_t)j * n + o;
            if (j == gr.me)
                memmove(dst, send + o, (size_t)cnt * 4);
            else
                memcpy(dst, shm_stage(c, gr.ranks[j], h), (size_t)cnt * 4);
        }
        if (!fast)
            shm_barrier(ctx, &gr, w, g);
    }
    shm_barrier(ctx, &gr, w, g);
}

/* rt_comm_broadcast, with `what` naming the operation in messages. */
static void shm_broadcast(rt_ctx *ctx, void *buf, int64_t bytes, int g, int root, int fast,
                          int w)
{
    shm_grp gr = shm_group(ctx, g, w);
    if (root < 0 || root >= gr.n)
        rt_fatal(ctx, 1, "broadcast on group %d: root %d is not a member index (group has %d)",
                 g, root, gr.n);
    if (gr.n == 1 || bytes <= 0)
        return;
    rt_comm *c = ctx->comm;
    int64_t k = 0;
    for (int64_t o = 0; o < bytes; o += c->half, k++) {
        int64_t cnt = bytes - o < c->half ? bytes - o : c->half;
        int h = fast ? (int)(k & 1) : 0;
        if (gr.me == root)
            memcpy(shm_stage(c, ctx->rank, h), (char *)buf + o, (size_t)cnt);
        shm_barrier(ctx, &gr, w, g);
        if (gr.me != root)
            memcpy((char *)buf + o, shm_stage(c, gr.ranks[root], h), (size_t)cnt);
        if (!fast)
            shm_barrier(ctx, &gr, w, g);
    }
    shm_barrier(ctx, &gr, w, g);
}

void rt_comm_broadcast(rt_ctx *ctx, void *buf, int64_t bytes, int g, int root, int fast)
{
    if (shm_use_net(ctx, g, RT_COLL_BROADCAST)) {
        rt_net_broadcast(ctx, buf, bytes, root);
        return;
    }
    shm_broadcast(ctx, buf, bytes, g, root, fast, RT_COLL_BROADCAST);
}

void rt_comm_alltoall(rt_ctx *ctx, const float *send, float *recv, int64_t n, int g, int fast)
{
    shm_grp gr = shm_group(ctx, g, RT_COLL_ALLTOALL);
    if (n <= 0)
        return;
    if (gr.n == 1) {
        memmove(recv, send, (size_t)n * 4);
        return;
    }
    rt_comm *c = ctx->comm;
    const int w = RT_COLL_ALLTOALL;
    int64_t piece = c->half / 4 / gr.n, k = 0;
    for (int64_t o = 0; o < n; o += piece, k++) {
        int64_t cnt = n - o < piece ? n - o : piece;
        int h = fast ? (int)(k & 1) : 0;
        float *mine = (float *)shm_stage(c, ctx->rank, h);
        for (int d = 0; d < gr.n; d++)   /* piece for member d at column d */
            memcpy(mine + d * cnt, send + (int64_t)d * n + o, (size_t)cnt * 4);
        shm_barrier(ctx, &gr, w, g);
        for (int j = 0; j < gr.n; j++)
            memcpy(recv + (int64_t)j * n + o,
                   (float *)shm_stage(c, gr.ranks[j], h) + gr.me * cnt, (size_t)cnt * 4);
        if (!fast)
            shm_barrier(ctx, &gr, w, g);
    }
    shm_barrier(ctx, &gr, w, g);
}

/* p2p: a batch of sends and receives, each with its own group and peer,
 * progressing together (a rank sending to a peer that is itself sending to
 * this rank in the same batch does not wait for it), each pair of ranks
 * synchronising on its own sequence numbers.  The sends share this rank's
 * staging: each gets a slice, cut into `depth` chunks (fast: two in
 * flight), and states the slice in its pair record, where the receiver
 * reads it once the first chunk is posted. */
typedef struct p2p_op {
    int send;            /* 1: send, 0: receive */
    char *buf;           /* the data */
    int64_t n;           /* floats */
    int peer;            /* the other rank */
    shm_pair *pr;        /* the pair record (this -> peer for a send, peer -> this for a receive) */
    int state;           /* 0: waits for an earlier transfer on its pair, 1: running, 2: done */
    uint64_t base;       /* chunks of the pair before this transfer */
    int64_t chunk;       /* floats per chunk (a receive: the sender's, once known) */
    int64_t off, depth;  /* the slice of the sender's staging */
    int64_t nch, done;   /* chunks in all (-1: not known yet), posted (send) or taken (receive) */
} p2p_op;

void rt_comm_p2p(rt_ctx *ctx, int nops, const int *dir, void *const *buf, const int64_t *n, const int *g,
                 const int *peer, int fast)
{
    const int w = RT_COLL_SENDRECV;
    rt_comm *c = ctx->comm;
    p2p_op op[RT_P2P_MAX];
    int nsend = 0, k = 0;
    if (nops < 1 || nops > RT_P2P_MAX)
        rt_fatal(ctx, 1, "p2p with %d transfers (1 .. %d)", nops, RT_P2P_MAX);
    for (int j = 0; j < nops; j++) nsend += dir[j] == 0 && n[j] > 0;
    int64_t depth = fast ? 2 : 1, share = nsend ? 2 * c->half / nsend : 0;
    int64_t chunk = share / depth / 4 / 16 * 16;   /* floats, a multiple of 64 bytes */
    if (nsend && chunk < 16)
        rt_fatal(ctx, 1, "p2p: %d sends at once do not fit the staging", nsend);
    for (int j = 0, si = 0; j < nops; j++) {
        shm_grp gr = shm_group(ctx, g[j], w);
        if (peer[j] < 0 || peer[j] >= gr.n || peer[j] == gr.me)
            rt_fatal(ctx, 1, "p2p on group %d: peer %d is not another member (group has %d)", g[j], peer[j], gr.n);
        if (n[j] <= 0)
            continue;
        p2p_op *o = &op[k++];
        memset(o, 0, sizeof *o);
        o->send = dir[j] == 0;
        o->buf = buf[j];
        o->n = n[j];
        o->peer = gr.ranks[peer[j]];
        o->nch = -1;
        if (o->send) {
            o->pr = &c->pairs[(int64_t)ctx->rank * ctx->world + o->peer];
            o->chunk = chunk;
            o->depth = depth;
            o->off = (int64_t)si++ * share;
        } else {
            o->pr = &c->pairs[(int64_t)o->peer * ctx->world + ctx->rank];
        }
    }
    shm_waiter wt;
    shm_waiter_init(&wt, ctx, w, g[0]);
    for (;;) {
        int progress = 0, busy = 0, first = -1;
        for (int j = 0; j < k; j++) {
            p2p_op *o = &op[j];
            if (o->state == 2) continue;
            busy = 1;
            if (first < 0) first = o->peer;
            if (o->state == 0) {
                /* transfers on one pair go one after the other, in batch order (the peer's
                   batch lists them in the same order) */
                int wait = 0;
                for (int q = 0; q < j; q++) wait |= op[q].state != 2 && op[q].send == o->send && op[q].peer == o->peer;
                if (wait) continue;
                o->state = 1;
                if (o->send) {
                    o->base = c->sent[o->peer];
                    o->nch = (o->n + o->chunk - 1) / o->chunk;
                    /* published by the release of the first chunk's count */
                    atomic_store_explicit(&o->pr->n, o->n, memory_order_relaxed);
                    atomic_store_explicit(&o->pr->off, o->off, memory_order_relaxed);
                    atomic_store_explicit(&o->pr->chunk, o->chunk, memory_order_relaxed);
                    atomic_store_explicit(&o->pr->depth, o->depth, memory_order_relaxed);
                } else {
                    o->base = c->recvd[o->peer];
                }
            }
            if (o->send) {
                /* post the next chunk once the slot it reuses has been taken */
                uint64_t acked = atomic_load_explicit(&o->pr->ack, memory_order_acquire);
                if (o->done < o->nch && acked + (uint64_t)o->depth >= o->base + (uint64_t)o->done + 1) {
                    int64_t at = o->done * o->chunk, cnt = o->n - at < o->chunk ? o->n - at : o->chunk;
                    memcpy(c->stage + (int64_t)ctx->rank * 2 * c->half + o->off + (o->done % o->depth) * o->chunk * 4,
                           o->buf + at * 4, (size_t)cnt * 4);
                    atomic_store_explicit(&o->pr->sent, o->base + (uint64_t)o->done + 1, memory_order_release);
                    o->done++;
                    progress = 1;
                }
                if (o->done == o->nch && acked >= o->base + (uint64_t)o->nch) {
                    c->sent[o->peer] = o->base + (uint64_t)o->nch;
                    o->state = 2;
                    progress = 1;
                }
                continue;
            }
            /* a receive: the sender's record once its first chunk is posted */
            uint64_t posted = atomic_load_explicit(&o->pr->sent, memory_order_acquire);
            if (o->nch < 0 && posted >= o->base + 1) {
                int64_t theirs = atomic_load_explicit(&o->pr->n, memory_order_relaxed);
                if (theirs != o->n)
                    rt_fatal(ctx, 1, "p2p: rank %d sends %lld floats, this rank expects %lld", o->peer,
                             (long long)theirs, (long long)o->n);
                o->chunk = atomic_load_explicit(&o->pr->chunk, memory_order_relaxed);
                o->off = atomic_load_explicit(&o->pr->off, memory_order_relaxed);
                o->depth = atomic_load_explicit(&o->pr->depth, memory_order_relaxed);
                o->nch = (o->n + o->chunk - 1) / o->chunk;
            }
            if (o->nch >= 0 && o->done < o->nch && posted >= o->base + (uint64_t)o->done + 1) {
                int64_t at = o->done * o->chunk, cnt = o->n - at < o->chunk ? o->n - at : o->chunk;
                memcpy(o->buf + at * 4,
                       c->stage + (int64_t)o->peer * 2 * c->half + o->off + (o->done % o->depth) * o->chunk * 4,
                       (size_t)cnt * 4);
                atomic_store_explicit(&o->pr->ack, o->base + (uint64_t)o->done + 1, memory_order_release);
                o->done++;
                progress = 1;
            }
            if (o->nch >= 0 && o->done == o->nch) {
                c->recvd[o->peer] = o->base + (uint64_t)o->nch;
                o->state = 2;
                progress = 1;
            }
        }
        if (!busy)
            break;
        if (progress)
            shm_waiter_progress(&wt);
        else
            shm_pause(&wt, first, -1);
    }
}

/* sendrecv: one send and one receive in one batch (the same or a self copy). */
void rt_comm_sendrecv(rt_ctx *ctx, const float *send, float *recv, int64_t n, int g,
                      int peer_send, int peer_recv, int fast)
{
    const int w = RT_COLL_SENDRECV;
    shm_grp gr = shm_group(ctx, g, w);
    if (peer_send < -1 || peer_send >= gr.n || peer_recv < -1 || peer_recv >= gr.n)
        rt_fatal(ctx, 1, "sendrecv on group %d: peers %d/%d are not member indices "
                         "(group has %d)", g, peer_send, peer_recv, gr.n);
    if ((peer_send == gr.me) != (peer_recv == gr.me))
        rt_fatal(ctx, 1, "sendrecv on group %d: a send to itself needs a receive from itself",
                 g);
    if (n <= 0 || (peer_send < 0 && peer_recv < 0))
        return;
    if (peer_send == gr.me) {
        memmove(recv, send, (size_t)n * 4);
        return;
    }
    int dir[2], gs[2] = {g, g}, peer[2], k = 0;
    void *bufs[2];
    int64_t ns[2] = {n, n};
    if (peer_send >= 0) dir[k] = 0, peer[k] = peer_send, bufs[k++] = (void *)send;
    if (peer_recv >= 0) dir[k] = 1, peer[k] = peer_recv, bufs[k++] = recv;
    rt_comm_p2p(ctx, k, dir, bufs, ns, gs, peer, fast);
}

/* ---- helpers for the runtime itself (save) */

char *rt_comm_allgatherv_bytes(rt_ctx *ctx, const void *mine, int64_t len, int64_t *lens,
                               rt_coll what)
{
    if (shm_use_net(ctx, RT_GROUP_WORLD, what))
        return rt_net_allgatherv_bytes(ctx, mine, len, lens);
    int world = ctx->world;
    for (int r = 0; r < world; r++) {
        lens[r] = r == ctx->rank ? len : 0;
        if (ctx->comm)
            shm_broadcast(ctx, &lens[r], sizeof lens[r], RT_GROUP_WORLD, r, 1, (int)what);
    }
    int64_t total = 0;
    for (int r = 0; r < world; r++)
        total += lens[r];
    char *all = malloc((size_t)total + 1);
    if (!all)
        rt_fatal(ctx, 1, "out of memory");
    int64_t at = 0;
    for (int r = 0; r < world; r++) {
        if (r == ctx->rank && len > 0)
            memcpy(all + at, mine, (size_t)len);
        if (ctx->comm)
            shm_broadcast(ctx, all + at, lens[r], RT_GROUP_WORLD, r, 1, (int)what);
        at += lens[r];
    }
    all[total] = 0;
    return all;
}

int rt_comm_any(rt_ctx *ctx, int flag, rt_coll what)
{
    if (shm_use_net(ctx, RT_GROUP_WORLD, what))
        return rt_net_any(ctx, flag, what);
    if (!ctx->comm)
        return flag != 0;
    int64_t *lens = calloc((size_t)ctx->world, sizeof *lens);
    unsigned char f = flag != 0;
    if (!lens)
        rt_fatal(ctx, 1, "out of memory");
    char *all = rt_comm_allgatherv_bytes(ctx, &f, 1, lens, what);
    int any = 0;
    for (int r = 0; r < ctx->world; r++)
        any |= all[r];
    free(all);
    free(lens);
    return any;
}
