/* test_rt_comm.c -- the shared-memory collectives, with real rank processes.
 *
 * Each scenario forks W children; child r sets NNSC_RANK/NNSC_WORLD/NNSC_JOB,
 * calls rt_init with a manifest built for rank r (groups included), runs
 * collectives, and writes "CHECK <name> <0|1>" lines to its stdout (a file).
 * The parent merges the lines of all ranks (a check passes when every rank
 * that ran it passed) and prints one line per check.  Expected values are
 * computed locally, summing in member order, and compared bit for bit.
 *
 * Failure scenarios: a peer that dies, one that exits without rt_finish,
 * one that never arrives (timeout), and manifests that disagree on groups;
 * the surviving ranks must exit 1 with a message naming the peer within a
 * few seconds, and nothing may be left in /dev/shm.  Every scenario runs
 * with a job secret, one without; a segment planted by another user (as
 * root: chown to uid 65534) or open to group and others is refused, and
 * two runs with one NNSC_JOB do not mix.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "rt_internal.h"


#define TSECRET "the-test-job-s-secret-0123456789"   /* the scenarios' NNSC_SECRET */

static const char *child_secret = TSECRET;   /* NNSC_SECRET of the next child ("": none) */

/* ---- inside a rank process */

static int child_fails;   /* failed CHECK lines written by this rank */

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
    if (!ok)
        child_fails++;
}

/* Test data: element k of rank r's buffer; magnitudes differ per rank so
 * that float sums depend on their order. */
static float val(int r, int64_t k, int salt)
{
    static const float scale[3] = {0.1f, 1.0f, 10.0f};
    uint64_t h = (uint64_t)k * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(r * 131 + salt) << 40;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 32;
    return ((float)(h >> 40) * (1.0f / 16777216.0f) - 0.5f) * scale[r % 3];
}

/* Group of the scenario as the test sees it. */
typedef struct tgroup {
    int n;              /* members */
    int ranks[8];       /* member ranks */
} tgroup;

/* Scenario description shared by parent and children. */
typedef struct scen {
    const char *name;       /* label */
    int world;              /* ranks */
    int ngroups;            /* groups */
    tgroup groups[8];       /* the manifest's groups */
    const char *stage_kb;   /* NNSC_SHM_STAGE_KB, or NULL for the default */
    const char *timeout;    /* --timeout */
    int64_t sizes[6];       /* n values to test (0 ends) */
    int kind;               /* what the children do (SC_*) */
} scen;

enum {
    SC_ALL,          /* every collective on every group */
    SC_DIE,          /* rank world-1 _exits after rt_init; others allreduce */
    SC_EXIT,         /* rank 1 calls exit() without rt_finish; others allgather */
    SC_HANG,         /* rank world-1 sleeps; others allreduce (timeout) */
    SC_BADGROUPS,    /* rank 1's manifest has other groups */
    SC_BIG,          /* large n on the world group only */
    SC_BENCH,        /* timings only (--bench) */
};

/* Index of rank r in g, or -1. */
static int member(const tgroup *g, int r)
{
    for (int j = 0; j < g->n; j++)
        if (g->ranks[j] == r)
            return j;
    return -1;
}

/* malloc'ed n floats plus 4 guard floats of a NaN pattern. */
static float *gbuf(int64_t n)
{
    float *p = malloc((size_t)(n + 4) * 4);
    for (int k = 0; k < 4; k++)
        memcpy(&p[n + k], &(uint32_t){0x7fc0beef}, 4);
    return p;
}

static int guard_ok(const float *p, int64_t n)
{
    for (int k = 0; k < 4; k++) {
        uint32_t g;
        memcpy(&g, &p[n + k], 4);
        if (g != 0x7fc0beef)
            return 0;
    }
    return 1;
}

/* Bitwise equality of n floats. */
static int same(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * 4) == 0;
}

typedef void kfn(rt_ctx *, void *const *, const int64_t *, const float *);

/* allreduce, fast and reference: bitwise the member-order sum. */
static void t_allreduce(rt_ctx *ctx, int me_rank, const tgroup *g, int gi, int64_t n)
{
    float *want = gbuf(n);
    for (int64_t k = 0; k < n; k++) {   /* ((m0 + m1) + m2) + ... */
        float s = val(g->ranks[0], k, gi);
        for (int j = 1; j < g->n; j++)
            s += val(g->ranks[j], k, gi);
        want[k] = s;
    }
    for (int fast = 1; fast >= 0; fast--) {
        float *buf = gbuf(n);
        for (int64_t k = 0; k < n; k++)
            buf[k] = val(me_rank, k, gi);
        int64_t ints[2] = {n, gi};
        void *b[1] = {buf};
        (fast ? rt_k_allreduce : rt_ref_allreduce)(ctx, b, ints, NULL);
        rcheck(same(buf, want, n) && guard_ok(buf, n), "allreduce %s group %d n=%lld",
               fast ? "fast" : "ref", gi, (long long)n);
        free(buf);
    }
    free(want);
}

/* bf16 bits of x (nearest even), and back (the test's own rounding, against rt_lowp's). */
static uint16_t to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);   /* (no NaNs here) */
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* allreduce_bf16, fast and reference: the bf16 values widened, summed in f32 in member order,
 * rounded once; an odd n in its whole words; the word after them untouched. */
static void t_allreduce_bf16(rt_ctx *ctx, int me_rank, const tgroup *g, int gi, int64_t n)
{
    int64_t nw = (n + 1) / 2;
    uint16_t *want = calloc((size_t)(2 * nw + 2), 2);
    for (int64_t k = 0; k < n; k++) {
        float s = from_bf16(to_bf16(val(g->ranks[0], k, gi)));
        for (int j = 1; j < g->n; j++)
            s += from_bf16(to_bf16(val(g->ranks[j], k, gi)));
        want[k] = to_bf16(s);
    }
    for (int fast = 1; fast >= 0; fast--) {
        uint16_t *buf = calloc((size_t)(2 * nw + 2), 2);
        for (int64_t k = 0; k < n; k++)
            buf[k] = to_bf16(val(me_rank, k, gi));
        buf[2 * nw] = buf[2 * nw + 1] = 0xbeef;
        int64_t ints[3] = {n, gi, nw};
        void *b[1] = {buf};
        (fast ? rt_k_allreduce_bf16 : rt_ref_allreduce_bf16)(ctx, b, ints, NULL);
        rcheck(!memcmp(buf, want, (size_t)n * 2) && buf[2 * nw] == 0xbeef && buf[2 * nw + 1] == 0xbeef,
               "allreduce_bf16 %s group %d n=%lld", fast ? "fast" : "ref", gi, (long long)n);
        free(buf);
    }
    free(want);
}

/* reducescatter (also in place): member k gets chunk k of the member-order sum. */
static void t_reducescatter(rt_ctx *ctx, int me_rank, const tgroup *g, int gi, int64_t n)
{
    int me = member(g, me_rank), p = g->n;
    float *want = gbuf(n);
    for (int64_t k = 0; k < n; k++) {
        float s = val(g->ranks[0], me * n + k, gi);
        for (int j = 1; j < p; j++)
            s += val(g->ranks[j], me * n + k, gi);
        want[k] = s;
    }
    for (int mode = 0; mode < 3; mode++) {   /* fast, reference, fast in place */
        float *send = gbuf(n * p), *recv = gbuf(n);
        for (int64_t k = 0; k < n * p; k++)
            send[k] = val(me_rank, k, gi);
        int64_t ints[2] = {n, gi};
        void *b[2] = {send, mode == 2 ? send + me * n : recv};
        (mode == 1 ? rt_ref_reducescatter : rt_k_reducescatter)(ctx, b, ints, NULL);
        const float *got = mode == 2 ? send + me * n : recv;
        rcheck(same(got, want, n) && guard_ok(recv, n) && guard_ok(send, n * p),
               "reducescatter %s group %d n=%lld",
               mode == 0 ? "fast" : mode == 1 ? "ref" : "in-place", gi, (long long)n);
        free(send);
        free(recv);
    }
    free(want);
}

/* reducescatter_bf16 (also in place): member k gets block k of the bf16 values widened, summed in f32
 * in member order and rounded once -- the local sum's bits, and the f32 reducescatter's of the widened
 * values rounded; fast and reference alike; an odd n leaves recv's pad half and the words after it
 * untouched, and the send is not written. */
static void t_reducescatter_bf16(rt_ctx *ctx, int me_rank, const tgroup *g, int gi, int64_t n)
{
    int me = member(g, me_rank), p = g->n;
    int64_t nw = (n + 1) / 2, sw = (n * p + 1) / 2;
    uint16_t *want = malloc((size_t)n * 2), *sent = calloc((size_t)(2 * sw + 2), 2);
    for (int64_t k = 0; k < n; k++) {
        float s = from_bf16(to_bf16(val(g->ranks[0], me * n + k, gi)));
        for (int j = 1; j < p; j++)
            s += from_bf16(to_bf16(val(g->ranks[j], me * n + k, gi)));
        want[k] = to_bf16(s);
    }
    for (int64_t k = 0; k < n * p; k++)
        sent[k] = to_bf16(val(me_rank, k, gi));
    /* the f32 wire's result: the widened values reduce-scattered in f32, then rounded */
    float *wide = gbuf(n * p), *wsum = gbuf(n);
    for (int64_t k = 0; k < n * p; k++)
        wide[k] = from_bf16(sent[k]);
    int64_t i32[2] = {n, gi};
    void *b32[2] = {wide, wsum};
    rt_k_reducescatter(ctx, b32, i32, NULL);
    int f32_same = 1;
    for (int64_t k = 0; k < n; k++)
        f32_same &= to_bf16(wsum[k]) == want[k];
    rcheck(f32_same, "reducescatter_bf16's sums are the f32 reducescatter's rounded, group %d n=%lld", gi,
           (long long)n);
    for (int mode = 0; mode < 3; mode++) {   /* fast, reference, fast in place */
        uint16_t *send = calloc((size_t)(2 * sw + 2), 2), *recv = calloc((size_t)(2 * nw + 2), 2);
        memcpy(send, sent, (size_t)(2 * sw + 2) * 2);
        send[2 * sw] = send[2 * sw + 1] = 0xbeef;
        for (int64_t k = n; k < 2 * nw + 2; k++)
            recv[k] = 0xbeef;
        int64_t ints[4] = {n, gi, nw, sw};
        void *b[2] = {send, mode == 2 ? send + me * n : recv};
        (mode == 1 ? rt_ref_reducescatter_bf16 : rt_k_reducescatter_bf16)(ctx, b, ints, NULL);
        const uint16_t *got = mode == 2 ? send + me * n : recv;
        int ok = !memcmp(got, want, (size_t)n * 2) && send[2 * sw] == 0xbeef && send[2 * sw + 1] == 0xbeef;
        for (int64_t k = n; k < 2 * nw + 2 && ok && mode < 2; k++)
            ok = recv[k] == 0xbeef;
        for (int64_t k = 0; k < n * p && ok && mode < 2; k++)
            ok = send[k] == sent[k];
        rcheck(ok, "reducescatter_bf16 %s group %d n=%lld", mode == 0 ? "fast" : mode == 1 ? "ref" : "in-place",
               gi, (long long)n);
        free(send);
        free(recv);
    }
    free(want);
    free(sent);
    free(wide);
    free(wsum);
}

/* allgather (also in place): recv = members' sends in member order. */
static void t_allgather(rt_ctx *ctx, int me_rank, const tgroup *g, int gi, int64_t n)
{
    int me = member(g, me_rank), p = g->n;
    for (int mode = 0; mode < 3; mode++) {
        float *send = gbuf(n), *recv = gbuf(n * p);
        for (int64_t k = 0; k < n; k++)
            send[k] = val(me_rank, k, gi + 10);
        if (mode == 2)
            memcpy(recv + me * n, send, (size_t)n * 4);
        int64_t ints[2] = {n, gi};
        void *b[2] = {mode == 2 ? recv + me * n : send, recv};
        (mode == 1 ? rt_ref_allgather : rt_k_allgather)(ctx, b, ints, NULL);
        int ok = guard_ok(recv, n * p);
        for (int j = 0; j < p; j++)
            for (int64_t k = 0; k < n && ok; k++)
                ok = recv[j * n + k] == val(g->ranks[j], k, gi + 10);
        rcheck(ok, "allgather %s group %d n=%lld",
               mode == 0 ? "fast" : mode == 1 ? "ref" : "in-place", gi, (long long)n);
        free(send);
        free(recv);
    }
}

/* broadcast from every root in turn. */
static void t_broadcast(rt_ctx *ctx, int me_rank, const tgroup *g, int gi, int64_t n)
{
    int me = member(g, me_rank);
    for (int fast = 1; fast >= 0; fast--) {
        int ok = 1;
        for (int root = 0; root < g->n; root++) {
            float *buf = gbuf(n);
            for (int64_t k = 0; k < n; k++)
                buf[k] = me == root ? val(me_rank, k, gi + 20) : -1.0f;
            int64_t ints[3] = {n, gi, root};
            void *b[1] = {buf};
            (fast ? rt_k_broadcast : rt_ref_broadcast)(ctx, b, ints, NULL);
            for (int64_t k = 0; k < n && ok; k++)
                ok = buf[k] == val(g->ranks[root], k, gi + 20);
            ok &= guard_ok(buf, n);
            free(buf);
        }
        rcheck(ok, "broadcast %s every root group %d n=%lld", fast ? "fast" : "ref", gi,
               (long long)n);
    }
}

/* alltoall (also in place): my recv chunk j = member j's send chunk me. */
static void t_alltoall(rt_ctx *ctx, int me_rank, const tgroup *g, int gi, int64_t n)
{
    int me = member(g, me_rank), p = g->n;
    for (int mode = 0; mode < 3; mode++) {
        float *send = gbuf(n * p), *recv = gbuf(n * p);
        for (int64_t k = 0; k < n * p; k++)
            send[k] = val(me_rank, k, gi + 30);
        int64_t ints[2] = {n, gi};
        void *b[2] = {send, mode == 2 ? send : recv};
        (mode == 1 ? rt_ref_alltoall : rt_k_alltoall)(ctx, b, ints, NULL);
        const float *got = mode == 2 ? send : recv;
        int ok = guard_ok(recv, n * p) && guard_ok(send, n * p);
        for (int j = 0; j < p; j++)
            for (int64_t k = 0; k < n && ok; k++)
                ok = got[j * n + k] == val(g->ranks[j], me * n + k, gi + 30);
        rcheck(ok, "alltoall %s group %d n=%lld",
               mode == 0 ? "fast" : mode == 1 ? "ref" : "in-place", gi, (long long)n);
        free(send);
        free(recv);
    }
}

/* sendrecv: a ring over the group, then a one-way pipeline. */
static void t_sendrecv(rt_ctx *ctx, int me_rank, const tgroup *g, int gi, int64_t n)
{
    int me = member(g, me_rank), p = g->n;
    for (int fast = 1; fast >= 0; fast--) {
        kfn *f = fast ? rt_k_sendrecv : rt_ref_sendrecv;
        float *send = gbuf(n), *recv = gbuf(n);
        for (int64_t k = 0; k < n; k++) {
            send[k] = val(me_rank, k, gi + 40);
            recv[k] = -7.0f;
        }
        int from = (me - 1 + p) % p;
        int64_t ring[4] = {n, gi, (me + 1) % p, from};
        void *b[2] = {send, recv};
        f(ctx, b, ring, NULL);
        int ok = guard_ok(recv, n);
        for (int64_t k = 0; k < n && ok; k++)
            ok = recv[k] == val(g->ranks[from], k, gi + 40);
        rcheck(ok, "sendrecv %s ring group %d n=%lld", fast ? "fast" : "ref", gi, (long long)n);
        if (p > 1) {
            for (int64_t k = 0; k < n; k++)
                recv[k] = -7.0f;
            int64_t pipe[4] = {n, gi, me < p - 1 ? me + 1 : -1, me > 0 ? me - 1 : -1};
            f(ctx, b, pipe, NULL);
            ok = guard_ok(recv, n);
            for (int64_t k = 0; k < n && ok; k++)
                ok = recv[k] == (me > 0 ? val(g->ranks[me - 1], k, gi + 40) : -7.0f);
            rcheck(ok, "sendrecv %s pipeline group %d n=%lld", fast ? "fast" : "ref", gi,
                   (long long)n);
        }
        free(send);
        free(recv);
    }
}

/* p2p: one batch in which every member sends two buffers (n and n / 2 + 1
 * floats) to the next member and one to the previous, and receives the
 * matching three: every rank sends before it receives, which only a batch
 * whose transfers progress together completes; two transfers on one pair go
 * in batch order. */
static void t_p2p(rt_ctx *ctx, int me_rank, const tgroup *g, int gi, int64_t n)
{
    int me = member(g, me_rank), p = g->n;
    if (p < 2)
        return;
    int next = (me + 1) % p, prev = (me - 1 + p) % p;
    int64_t len[3] = {n, n / 2 + 1, n};
    for (int fast = 1; fast >= 0; fast--) {
        kfn *f = fast ? rt_k_p2p : rt_ref_p2p;
        float *out[3], *in[3];
        for (int j = 0; j < 3; j++) {
            out[j] = gbuf(len[j]);
            in[j] = gbuf(len[j]);
            for (int64_t k = 0; k < len[j]; k++) {
                out[j][k] = val(me_rank, k, gi + 50 + j);
                in[j][k] = -7.0f;
            }
        }
        /* sends: 0 and 1 to next, 2 to prev; receives: 0 and 1 from prev, 2 from next */
        int64_t i[1 + 4 * 6] = {6};
        void *b[6];
        for (int j = 0; j < 3; j++) {
            int64_t *s = &i[1 + 4 * j], *r = &i[1 + 4 * (3 + j)];
            s[0] = 0, s[1] = len[j], s[2] = gi, s[3] = j < 2 ? next : prev;
            r[0] = 1, r[1] = len[j], r[2] = gi, r[3] = j < 2 ? prev : next;
            b[j] = out[j];
            b[3 + j] = in[j];
        }
        f(ctx, b, i, NULL);
        int ok = 1;
        for (int j = 0; j < 3; j++) {
            int from = g->ranks[j < 2 ? prev : next];
            ok &= guard_ok(in[j], len[j]);
            for (int64_t k = 0; k < len[j] && ok; k++)
                ok = in[j][k] == val(from, k, gi + 50 + j);
            free(out[j]);
            free(in[j]);
        }
        rcheck(ok, "p2p %s batch (2 sends each way to next, 1 to prev) group %d n=%lld", fast ? "fast" : "ref", gi,
               (long long)n);
    }
}

/* Every collective on every group this rank is in, in one global order, so
 * collectives on different groups interleave. */
static void run_all(rt_ctx *ctx, int rank, const scen *s)
{
    for (int si = 0; si < 6 && s->sizes[si]; si++) {
        int64_t n = s->sizes[si];
        typedef void tfn(rt_ctx *, int, const tgroup *, int, int64_t);
        static tfn *const tests[] = {t_allreduce, t_allreduce_bf16, t_reducescatter, t_reducescatter_bf16,
                                     t_allgather, t_broadcast,      t_alltoall,      t_sendrecv,
                                     t_p2p};
        for (size_t t = 0; t < sizeof tests / sizeof tests[0]; t++)
            for (int gi = 0; gi < s->ngroups; gi++)
                if (member(&s->groups[gi], rank) >= 0)
                    tests[t](ctx, rank, &s->groups[gi], gi, n);
    }
}

/* --bench: time allreduce, allgather and barriers; rank 0 prints "BENCH" lines. */
static void run_bench(rt_ctx *ctx, int rank, const scen *s)
{
    static const int64_t sizes[] = {1, 1024, 262144, 4194304};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int64_t n = sizes[k];
        float *buf = calloc((size_t)n * s->world, 4);
        int reps = n < 4096 ? 2000 : n < 1000000 ? 50 : 5;
        int64_t ints[2] = {n, 0};
        void *b1[1] = {buf}, *b2[2] = {buf, buf};
        for (int what = 0; what < 2; what++) {
            rt_comm_barrier(ctx, RT_GROUP_WORLD, RT_COLL_BARRIER);
            double t0 = rt_now();
            for (int r = 0; r < reps; r++)
                (what ? rt_k_allgather : rt_k_allreduce)(ctx, what ? b2 : b1, ints, NULL);
            double t = (rt_now() - t0) / reps;
            if (rank == 0)
                printf("BENCH world %d %-9s n=%-8lld %10.1f us  %7.2f GB/s of buffer\n",
                       s->world, what ? "allgather" : "allreduce", (long long)n, t * 1e6,
                       (double)n * 4 * (what ? s->world : 1) / t * 1e-9);
        }
        free(buf);
    }
}

/* The manifest of rank r in scenario s. */
static void build_manifest(const scen *s, int r, char *out, size_t len)
{
    int o = snprintf(out, len, "nnsc-manifest 1\nmodel commtest\nrank %d world %d\narena 4096\n"
                               "steps 1\nmicro_batches 1\nseed 7\n", r, s->world);
    for (int g = 0; g < s->ngroups; g++) {
        tgroup gr = s->groups[g];
        if (s->kind == SC_BADGROUPS && r == 1 && g == s->ngroups - 1)
            gr.ranks[0] = 0;   /* {1} becomes {0}: disagrees with rank 0 */
        o += snprintf(out + o, len - (size_t)o, "group %d %d", g, gr.n);
        for (int j = 0; j < gr.n; j++)
            o += snprintf(out + o, len - (size_t)o, " %d", gr.ranks[j]);
        o += snprintf(out + o, len - (size_t)o, "\n");
    }
    snprintf(out + o, len - (size_t)o, "end\n");
}

/* Body of rank r: never returns. */
static void child(const scen *s, int r, const char *job)
{
    char man[4096], rs[16], ws[16];
    snprintf(rs, sizeof rs, "%d", r);
    snprintf(ws, sizeof ws, "%d", s->world);
    setenv("NNSC_RANK", rs, 1);
    setenv("NNSC_WORLD", ws, 1);
    setenv("NNSC_JOB", job, 1);
    unsetenv("NNSC_SECRET_FILE");
    if (*child_secret)
        setenv("NNSC_SECRET", child_secret, 1);
    else
        unsetenv("NNSC_SECRET");
    if (s->stage_kb)
        setenv("NNSC_SHM_STAGE_KB", s->stage_kb, 1);
    else
        unsetenv("NNSC_SHM_STAGE_KB");
    build_manifest(s, r, man, sizeof man);
    char *argv[] = {"test_rt_comm", "--quiet", "--timeout", (char *)s->timeout, NULL};
    rt_ctx *ctx = rt_init(4, argv, man);
    if (ctx->rank != r || ctx->world != s->world)
        _exit(9);
    switch (s->kind) {
    case SC_ALL:
    case SC_BIG:
        run_all(ctx, r, s);
        break;
    case SC_BENCH:
        run_bench(ctx, r, s);
        break;
    case SC_DIE:
    case SC_HANG:
        if (r == s->world - 1) {
            if (s->kind == SC_HANG)
                sleep(30);   /* killed by the parent */
            _exit(7);        /* dies: no atexit hooks, no rt_finish */
        }
        t_allreduce(ctx, r, &s->groups[0], 0, 1000);
        break;
    case SC_EXIT:
        if (r == 1)
            exit(3);         /* leaves without rt_finish; atexit marks it gone */
        t_allgather(ctx, r, &s->groups[0], 0, 10);
        break;
    }
    rt_finish(ctx);
    fflush(stdout);
    _exit(child_fails ? 1 : 0);
}

/* ---- the parent */

/* Result of one rank process. */
typedef struct rank_out {
    pid_t pid;          /* process */
    int status;         /* wait status */
    double t_exit;      /* seconds after the start when it was reaped */
    char out[64];       /* stdout file */
    char err[64];       /* stderr file */
} rank_out;

/* Read a whole small file (malloc'ed, NUL-terminated). */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return calloc(1, 1);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = calloc(1, (size_t)len + 1);
    if (fread(s, 1, (size_t)len, f) != (size_t)len)
        s[0] = 0;
    fclose(f);
    return s;
}

/* Fork the ranks of s, wait (at most limit seconds, then SIGKILL; a rank
 * given as sleeper is killed once the others are done). */
static void run_scen(const scen *s, const char *job, rank_out *ro, double limit, int sleeper)
{
    double t0 = rt_now();
    fflush(stdout);
    for (int r = 0; r < s->world; r++) {
        snprintf(ro[r].out, sizeof ro[r].out, "/tmp/rtcomm-%d-%d.out", (int)getpid(), r);
        snprintf(ro[r].err, sizeof ro[r].err, "/tmp/rtcomm-%d-%d.err", (int)getpid(), r);
        ro[r].status = -1;
        pid_t pid = fork();
        if (pid == 0) {
            if (!freopen(ro[r].out, "w", stdout) || !freopen(ro[r].err, "w", stderr))
                _exit(8);
            child(s, r, job);
        }
        ro[r].pid = pid;
    }
    int left = s->world;
    while (left > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid > 0) {
            for (int r = 0; r < s->world; r++)
                if (ro[r].pid == pid) {
                    ro[r].status = st;
                    ro[r].t_exit = rt_now() - t0;
                    left--;
                }
            continue;
        }
        int others_done = 1;
        for (int r = 0; r < s->world; r++)
            if (r != sleeper && ro[r].status == -1)
                others_done = 0;
        if (rt_now() - t0 > limit || (sleeper >= 0 && others_done)) {
            for (int r = 0; r < s->world; r++)
                if (ro[r].status == -1)
                    kill(ro[r].pid, SIGKILL);
            if (rt_now() - t0 > limit)
                printf("     %s: still running after %.0f s: killed (a hang)\n", s->name, limit);
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* 1 if rank exited normally with code. */
static int exited_with(const rank_out *r, int code)
{
    return r->status != -1 && WIFEXITED(r->status) && WEXITSTATUS(r->status) == code;
}

/* 1 if the job's segment is gone from /dev/shm. */
static int shm_clean(const char *job)
{
    char path[256];
    snprintf(path, sizeof path, "/dev/shm/nnsc-%s", job);
    return access(path, F_OK) != 0;
}

/* Merge the ranks' CHECK lines into one line per check. */
static void merge_checks(const scen *s, rank_out *ro)
{
    char *names[4096];
    int fails[4096], nn = 0;
    for (int r = 0; r < s->world; r++) {
        char *text = slurp(ro[r].out), *save = NULL;
        for (char *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
            char nm[200];
            int ok;
            if (sscanf(ln, "CHECK %199s %d", nm, &ok) != 2)
                continue;
            int k = 0;
            while (k < nn && strcmp(names[k], nm))
                k++;
            if (k == nn && nn < 4096) {
                names[nn] = strdup(nm);
                fails[nn++] = 0;
            }
            if (k < nn)
                fails[k] += !ok;
        }
        free(text);
    }
    for (int k = 0; k < nn; k++) {
        for (char *p = names[k]; *p; p++)
            if (*p == '_')
                *p = ' ';
        check(!fails[k], "%s: %s%s", s->name, names[k], fails[k] ? " (some rank differs)" : "");
        free(names[k]);
    }
}

/* Show a rank's stderr (on failures). */
static void show_err(const rank_out *r, int rank)
{
    char *e = slurp(r->err);
    if (*e)
        printf("     rank %d stderr: %s", rank, e);
    free(e);
}

/* Remove the ranks' output files. */
static void cleanup(const scen *s, rank_out *ro)
{
    for (int r = 0; r < s->world; r++) {
        unlink(ro[r].out);
        unlink(ro[r].err);
    }
}

/* Run one scenario where every rank must succeed. */
static void scen_ok(const scen *s, int idx)
{
    char job[64];
    rank_out ro[8];
    snprintf(job, sizeof job, "test-comm-%d-%d", (int)getpid(), idx);
    double t0 = rt_now();
    run_scen(s, job, ro, 60, -1);
    merge_checks(s, ro);
    int ok = 1;
    for (int r = 0; r < s->world; r++)
        ok &= exited_with(&ro[r], 0);
    check(ok, "%s: all %d ranks exited 0 (%.2f s)", s->name, s->world, rt_now() - t0);
    if (!ok)
        for (int r = 0; r < s->world; r++)
            show_err(&ro[r], r);
    check(shm_clean(job), "%s: nothing left in /dev/shm", s->name);
    cleanup(s, ro);
}

/* Run a failure scenario: the ranks in `fails` must exit with code in time,
 * one of them saying want in stderr. */
static void scen_fail(const scen *s, int idx, int culprit, int code, const char *want,
                      double within, int sleeper)
{
    char job[64];
    rank_out ro[8];
    snprintf(job, sizeof job, "test-comm-%d-%d", (int)getpid(), idx);
    run_scen(s, job, ro, 30, sleeper);
    int ok = 1, said = 0;
    double worst = 0;
    for (int r = 0; r < s->world; r++) {
        if (r == culprit)
            continue;
        ok &= exited_with(&ro[r], code);
        worst = ro[r].t_exit > worst ? ro[r].t_exit : worst;
        char *e = slurp(ro[r].err);
        said |= strstr(e, want) != NULL;
        free(e);
    }
    check(ok && said && worst < within,
          "%s: the other ranks exit %d in %.2f s (< %.0f s), saying \"%s\"", s->name, code,
          worst, within, want);
    if (!(ok && said && worst < within))
        for (int r = 0; r < s->world; r++)
            show_err(&ro[r], r);
    check(shm_clean(job), "%s: nothing left in /dev/shm", s->name);
    cleanup(s, ro);
}

/* ---- the segment's owner and mode, and two runs with one NNSC_JOB */

/* Start rank r of s alone, with NNSC_SECRET = secret ("" unset); output
 * files named after tag. */
static void spawn_rank(const scen *s, int r, const char *job, const char *secret, rank_out *ro,
                       const char *tag)
{
    snprintf(ro->out, sizeof ro->out, "/tmp/rtcomm-%d-%s.out", (int)getpid(), tag);
    snprintf(ro->err, sizeof ro->err, "/tmp/rtcomm-%d-%s.err", (int)getpid(), tag);
    ro->status = -1;
    child_secret = secret;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(ro->out, "w", stdout) || !freopen(ro->err, "w", stderr))
            _exit(8);
        child(s, r, job);
    }
    ro->pid = pid;
    child_secret = TSECRET;
}

/* Wait for the rank of ro at most limit seconds (then SIGKILL). */
static void wait_rank(rank_out *ro, double limit)
{
    double t0 = rt_now();
    while (waitpid(ro->pid, &ro->status, WNOHANG) == 0) {
        if (rt_now() - t0 > limit) {
            kill(ro->pid, SIGKILL);
            waitpid(ro->pid, &ro->status, 0);
            ro->status = -1;
            break;
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    ro->t_exit = rt_now() - t0;
}

/* Rank ro exited with code and its stderr holds want (and want2, unless NULL). */
static int said(const rank_out *ro, int code, const char *want, const char *want2)
{
    char *e = slurp(ro->err);
    int ok = exited_with(ro, code) && strstr(e, want) && (!want2 || strstr(e, want2));
    if (!ok)
        printf("     exit status %d, stderr: %s", ro->status, *e ? e : "(empty)\n");
    free(e);
    unlink(ro->out);
    unlink(ro->err);
    return ok;
}

/* Make /dev/shm/nnsc-JOB as another program would: mode, and owner uid (-1: this user). */
static int plant(const char *job, int mode, int uid)
{
    char name[128];
    snprintf(name, sizeof name, "/nnsc-%s", job);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
        return 0;
    int ok = ftruncate(fd, 1 << 16) == 0 && fchmod(fd, (mode_t)mode) == 0 &&
             (uid < 0 || fchown(fd, (uid_t)uid, (gid_t)uid) == 0);
    close(fd);
    return ok;
}

/* A segment another user made, or one its group or others can open: refused (exit 2, named), never used or removed. */
static void test_owner(int idx)
{
    scen s = {"planted segment", 2, 1, {{2, {0, 1}}}, NULL, "2", {0}, SC_ALL};
    char job[64], path[128];
    rank_out ro;
    snprintf(job, sizeof job, "test-comm-%d-%d", (int)getpid(), idx);
    snprintf(path, sizeof path, "/dev/shm/nnsc-%s", job);
    if (geteuid() != 0) {
        printf("skip  a segment of another user: chown needs root here\n");
    } else if (plant(job, 0666, 65534)) {
        /* the attack: another user pre-creates the job's segment, open to all */
        spawn_rank(&s, 0, job, TSECRET, &ro, "own0");
        wait_rank(&ro, 10);
        check(said(&ro, 2, path, "belongs to uid 65534, not to this user (uid 0): refusing it"),
              "a segment of uid 65534: rank 0 refuses it, exit 2, naming %s", path);
        spawn_rank(&s, 1, job, TSECRET, &ro, "own1");
        wait_rank(&ro, 10);
        check(said(&ro, 2, path, "belongs to uid 65534"), "  ... and so does a peer rank");
        check(access(path, F_OK) == 0, "  ... which leaves it in place (it is not ours to remove)");
        shm_unlink(path + 8);
    } else {
        check(0, "could not plant a segment of uid 65534 at %s", path);
    }
    if (plant(job, 0666, -1)) {
        spawn_rank(&s, 1, job, TSECRET, &ro, "mode1");
        wait_rank(&ro, 10);
        check(said(&ro, 2, path, "can be opened by its group or others (mode 0666): refusing it"),
              "a segment its group and others can open: a peer refuses it before mapping, exit 2");
        shm_unlink(path + 8);
    } else {
        check(0, "could not plant a segment at %s", path);
    }
}

/* Two runs with one NNSC_JOB, each with its own secret: the second's ranks
 * are refused with a message, the first's rank 0 waits for its own. */
static void test_two_jobs(int idx)
{
    scen s = {"two runs, one NNSC_JOB", 2, 1, {{2, {0, 1}}}, NULL, "5", {1, 1000, 0}, SC_ALL};
    char job[64];
    rank_out a0, a1, b0, b1, n0, n1;
    snprintf(job, sizeof job, "test-comm-%d-%d", (int)getpid(), idx);
    const char *other = "another-run-s-secret-0123456789";
    spawn_rank(&s, 0, job, TSECRET, &a0, "a0");
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/nnsc-%s", job);
    for (int k = 0; k < 2000 && access(path, F_OK) != 0; k++) {   /* run A's rank 0 is up */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    spawn_rank(&s, 1, job, other, &b1, "b1");
    wait_rank(&b1, 10);
    check(said(&b1, 2, "belongs to another job with the same NNSC_JOB: its rank 0 (pid",
               "does not know this job's secret (NNSC_SECRET), so this rank does not join it"),
          "%s: run B's rank 1 refuses run A's segment, exit 2, saying why", s.name);
    spawn_rank(&s, 0, job, other, &b0, "b0");
    wait_rank(&b0, 10);
    check(said(&b0, 2, "is in use by another job with the same NNSC_JOB (its rank 0 is pid",
               "refusing to take it over  hint: give each run its own NNSC_JOB"),
          "%s: run B's rank 0 does not take over run A's segment, exit 2", s.name);
    spawn_rank(&s, 1, job, TSECRET, &a1, "a1");
    wait_rank(&a1, 20);
    wait_rank(&a0, 20);
    merge_checks(&s, (rank_out[2]){a0, a1});
    check(exited_with(&a0, 0) && exited_with(&a1, 0), "%s: run A's rank 0 waited for its own rank 1, "
          "and both exit 0", s.name);
    if (!exited_with(&a0, 0) || !exited_with(&a1, 0)) {
        show_err(&a0, 0);
        show_err(&a1, 1);
    }
    check(shm_clean(job), "%s: nothing left in /dev/shm", s.name);
    cleanup(&s, (rank_out[2]){a0, a1});
    /* a secret on one side only: refused too */
    spawn_rank(&s, 0, job, "", &n0, "n0");
    for (int k = 0; k < 2000 && access(path, F_OK) != 0; k++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    spawn_rank(&s, 1, job, TSECRET, &n1, "n1");
    wait_rank(&n1, 10);
    check(said(&n1, 2, "runs without a job secret and this rank with one", NULL),
          "a rank with a secret refuses a rank 0 without one, exit 2");
    kill(n0.pid, SIGKILL);
    wait_rank(&n0, 10);
    unlink(n0.out);
    unlink(n0.err);
    shm_unlink(path + 8);   /* rank 0 was killed before its peers met it */
}

/* world == 1: no shared memory, collectives are copies or no-ops. */
static void test_world1(void)
{
    const char *man = "nnsc-manifest 1\nmodel one\nrank 0 world 1\narena 64\nsteps 1\n"
                      "micro_batches 1\nseed 1\ngroup 0 1 0\nend\n";
    unsetenv("NNSC_JOB");
    setenv("NNSC_RANK", "0", 1);
    setenv("NNSC_WORLD", "1", 1);
    char *argv[] = {"t", "--quiet", NULL};
    rt_ctx *ctx = rt_init(2, argv, man);
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0};
    int64_t i2[2] = {5, 0}, i3[3] = {5, 0, 0}, i4[4] = {5, 0, 0, 0};
    void *b1[1] = {a}, *b2[2] = {a, b};
    rt_k_allreduce(ctx, b1, i2, NULL);
    rt_k_broadcast(ctx, b1, i3, NULL);
    int ok = a[0] == 1 && a[4] == 5;
    rt_k_allgather(ctx, b2, i2, NULL);
    ok &= same(a, b, 5);
    memset(b, 0, sizeof b);
    rt_k_reducescatter(ctx, b2, i2, NULL);
    ok &= same(a, b, 5);
    memset(b, 0, sizeof b);
    int64_t i16[4] = {9, 0, 5, 5};   /* 9 bf16 values: a group of one copies them */
    rt_k_reducescatter_bf16(ctx, b2, i16, NULL);
    ok &= same(a, b, 4) && !memcmp(&a[4], &b[4], 2);
    memset(b, 0, sizeof b);
    rt_k_alltoall(ctx, b2, i2, NULL);
    ok &= same(a, b, 5);
    memset(b, 0, sizeof b);
    rt_k_sendrecv(ctx, b2, i4, NULL);
    ok &= same(a, b, 5);
    check(ok && ctx->comm == NULL, "world 1: no shared memory; collectives copy or do nothing");
    rt_finish(ctx);
}

int main(int argc, char **argv)
{
    int idx = 0;
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        for (int w = 2; w <= 4; w += 2) {
            scen b = {"bench", w, 1, {{w, {0, 1, 2, 3}}}, getenv("NNSC_SHM_STAGE_KB"), "60",
                      {0}, SC_BENCH};
            rank_out ro[8];
            char job[64];
            snprintf(job, sizeof job, "test-comm-bench-%d-%d", (int)getpid(), w);
            run_scen(&b, job, ro, 120, -1);
            char *out = slurp(ro[0].out);
            fputs(out, stdout);
            free(out);
            cleanup(&b, ro);
        }
        return 0;
    }
    test_world1();
    /* groups: everyone, sub-groups that skip ranks, and size-1 groups */
    scen s2 = {"world 2", 2, 3, {{2, {0, 1}}, {1, {1}}, {1, {0}}}, "4", "20",
               {1, 3, 1000, 4099, 0}, SC_ALL};
    scen s3 = {"world 3", 3, 3, {{3, {0, 1, 2}}, {2, {0, 2}}, {1, {1}}}, "4", "20",
               {1, 1000, 3001, 0}, SC_ALL};
    scen s4 = {"world 4", 4, 5, {{4, {0, 1, 2, 3}}, {2, {1, 3}}, {2, {0, 2}}, {3, {0, 1, 2}},
               {1, {3}}}, "4", "20", {1, 257, 5000, 0}, SC_ALL};
    scen big = {"world 4 big", 4, 1, {{4, {0, 1, 2, 3}}}, NULL, "20",
                {(INT64_C(5) << 18) + 3, 0}, SC_BIG};
    scen_ok(&s2, idx++);
    scen_ok(&s3, idx++);
    scen_ok(&s4, idx++);
    scen_ok(&big, idx++);
    child_secret = "";   /* the shared-memory transport runs without a secret too */
    scen nos = {"world 2 without a secret", 2, 1, {{2, {0, 1}}}, "4", "20", {1, 1000, 0}, SC_ALL};
    scen_ok(&nos, idx++);
    child_secret = TSECRET;
    test_owner(idx++);
    test_two_jobs(idx++);

    scen die = {"dead peer", 3, 1, {{3, {0, 1, 2}}}, NULL, "5", {0}, SC_DIE};
    scen_fail(&die, idx++, 2, 1, "peer rank 2 died in allreduce on group 0", 4.0, -1);
    scen ex = {"exit without rt_finish", 3, 1, {{3, {0, 1, 2}}}, NULL, "5", {0}, SC_EXIT};
    scen_fail(&ex, idx++, 1, 1, "peer rank 1 died in allgather on group 0", 4.0, -1);
    scen hang = {"peer never arrives", 3, 1, {{3, {0, 1, 2}}}, NULL, "1.5", {0}, SC_HANG};
    scen_fail(&hang, idx++, 2, 1, "peer rank 2 timed out in allreduce on group 0", 5.0, 2);
    scen bad = {"groups differ", 2, 2, {{2, {0, 1}}, {1, {1}}}, NULL, "5", {0}, SC_BADGROUPS};
    scen_fail(&bad, idx++, 0, 2, "lists different groups", 5.0, -1);
    (void)argc;
    (void)argv;
    return check_done();
}
