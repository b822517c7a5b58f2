/* net.c -- the TCP control plane of a multi-host (cuda target) job.
 *
 * On the cuda target the ranks of a job may run on several hosts, so there
 * is no shared-memory segment: device data goes through NCCL (nccl.c), and
 * the few agreements the host side needs (NCCL's unique id, "did any rank
 * fail to load?", the headers of a save, the final barrier) go through TCP:
 *
 *   rendezvous   Rank 0 listens on MASTER_PORT (on MASTER_ADDR's address when
 *                it is this host's, else on every interface); every other
 *                rank connects to MASTER_ADDR:MASTER_PORT, retrying until
 *                --timeout, and sends a hello {magic, version, rank, world,
 *                build hash, model, nonce}.  Then both prove that they know
 *                the job's secret (base/auth.c): rank 0 answers with a
 *                challenge {its nonce, HMAC(secret, "rank 0" || hello ||
 *                its nonce)}, which the peer checks before it answers with
 *                its proof HMAC(secret, "peer" || hello || rank 0's nonce);
 *                nothing else flows before.  A connection that fails the
 *                proof, or speaks another protocol, is refused and dropped
 *                (with a line on rank 0), and rank 0 waits on.  Of the
 *                proven, rank 0 refuses a second process with the same
 *                rank, another world size or another build (exit 2 on both
 *                sides, with the reason), and once all world-1 peers are
 *                in, welcomes each.  A star: rank 0 keeps one socket per
 *                peer, the others one socket to rank 0.
 *   collectives  barrier, broadcast (any root, relayed by rank 0), logical
 *                or, byte allgather: every rank sends its part to rank 0,
 *                which answers each.  Messages are frames {type, collective,
 *                sequence number, length} + payload; collective and number
 *                must match on both sides (else the ranks run different
 *                programs).  All integers on the wire are little-endian.
 *   failure      Every wait has a deadline (--timeout, restarted by the
 *                heartbeats of a peer busy with file I/O); a closed socket is
 *                a peer that left.  A rank that stops sends an abort frame
 *                {culprit, how} first, which rank 0 relays, so every rank
 *                stops at once and names the rank that caused it.
 *   watchdog     A thread watches the sockets for hang-ups while the rank is
 *                outside the control collectives (in a step, or an NCCL call
 *                that waits for a dead peer forever) and stops the rank then.
 *
 * One thread at a time uses the sockets: the main thread holds `own` for
 * each collective and heartbeat; the watchdog takes it only to stop the rank.
 */
#define _GNU_SOURCE   /* accept4, POLLRDHUP, SOCK_NONBLOCK */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "comm/rt_comm.h"

#define NET_MAGIC UINT64_C(0x74656e2d63736e6e)   /* "nnsc-net", little-endian */
#define NET_VERSION 2            /* wire protocol version (hello, challenge, frames, abort) */
#define NET_HDR 24               /* frame header bytes: type, what, seq, len */
#define NET_HELLO 128            /* hello payload bytes (version 1: 96, no nonce) */
#define NET_HELLO_NONCE 96       /* where the peer's nonce starts in the hello */
#define NET_CHALLENGE (RT_NONCE_LEN + RT_SHA256_LEN)   /* challenge payload: nonce, tag */
#define NET_REFUSALS 3           /* refused connections rank 0 reports, at most */
#define NET_MODEL 64             /* model name bytes in the hello (NUL-padded, truncated) */
#define NET_ABORT 12             /* abort payload bytes before the note */
#define NET_NOTE 128             /* longest note of an abort frame */
#define NET_MAX_PAYLOAD (INT64_C(1) << 31)   /* a larger length is a garbled stream */
#define NET_GRACE 2.0            /* extra seconds ranks != 0 wait for rank 0, which names the culprit */
#define NET_BEAT_GAP 0.1         /* least seconds between two heartbeats */
#define NET_PENDING 32           /* rank 0: most connections without a complete hello */
#define NET_WHAT_BYTES 100       /* frame `what` of rt_net_allgatherv_bytes (it has no rt_coll) */

/* Frame types. */
enum {
    NET_T_HELLO = 1,   /* rank -> 0: who this is (payload: NET_HELLO bytes) */
    NET_T_WELCOME,     /* 0 -> rank: every rank is in */
    NET_T_REJECT,      /* 0 -> rank: refused; payload: the reason */
    NET_T_DATA,        /* a collective's message */
    NET_T_BEAT,        /* the sender is alive and busy (long file I/O) */
    NET_T_ABORT,       /* the sender stops; payload: culprit, how, what, note */
    NET_T_CHALLENGE,   /* 0 -> rank: rank 0's nonce and its proof of the secret */
    NET_T_PROOF,       /* rank -> 0: the rank's proof of the secret */
};

/* How the culprit of an abort failed. */
enum {
    NET_LEFT = 1,      /* its connection closed */
    NET_TIMEOUT,       /* nothing from it within the deadline */
    NET_FAILED,        /* it stopped with an error of its own */
    NET_MISSING,       /* ranks that never joined (the note lists them) */
};

/* A decoded frame header. */
typedef struct net_hdr {
    uint32_t type;     /* NET_T_* */
    int32_t what;      /* rt_coll of the collective (or NET_WHAT_BYTES) */
    uint64_t seq;      /* the sender's collective number */
    int64_t len;       /* payload bytes that follow */
} net_hdr;

/* One connection. */
typedef struct net_conn {
    int fd;                         /* socket (non-blocking), -1 if none */
    unsigned char tail[NET_HDR];    /* the unsent end of a heartbeat frame */
    int ntail;                      /* bytes in tail */
} net_conn;

/* Rank 0 during the rendezvous: a connection not admitted yet. */
typedef struct net_pending {
    int fd;                                   /* socket, -1 once handed on or dropped */
    int proving;                              /* 0: reading the hello; 1: the proof (challenge sent) */
    int got;                                  /* bytes received of the frame being read */
    int want;                                 /* bytes of that frame (its header first) */
    unsigned char buf[NET_HDR + NET_HELLO];   /* the hello frame */
    unsigned char proof[NET_HDR + RT_SHA256_LEN];   /* the proof frame */
    unsigned char nonce[RT_NONCE_LEN];        /* rank 0's nonce for this connection */
    char from[80];                            /* the peer's address, for messages */
} net_pending;

/* The control plane of one rank. */
struct rt_net {
    int rank, world;                /* this rank and the world size */
    net_conn *c;                    /* rank 0: c[q] is peer q (c[0] unused); others: c[0] is rank 0 */
    int nc;                         /* entries of c */
    char (*from)[80];               /* rank 0: each peer's address, for messages */
    int lfd;                        /* rank 0 during the rendezvous: the listening socket, else -1 */
    net_pending *pend;              /* rank 0 during the rendezvous: connections without a hello */
    int npend;                      /* entries of pend in use */
    const char *addr_var;           /* "MASTER_ADDR" or "NNSC_MASTER_ADDR", for messages */
    rt_secret secret;               /* the job's secret (wiped after the rendezvous) */
    char bound[80];                 /* rank 0: where it listens, for messages */
    int refused;                    /* rank 0: connections refused so far */
    char addr[256];                 /* the master address */
    int port;                       /* the master port */
    uint64_t seq;                   /* control collectives started */
    double last_beat;               /* rt_now() of the last heartbeat sent */
    int culprit, how, what;         /* the failure to tell peers (how = 0: this rank's own) */
    char note[NET_NOTE];            /* NET_MISSING: which ranks never came */
    struct pollfd *pf;              /* poll set of net_gather and net_close_all [nc] */
    int *who;                       /* the connection of each entry of pf [nc] */
    char *got;                      /* rank 0: net_gather has peer q's frame [nc] */
    unsigned char **bufs;           /* rank 0: net_gather's payloads [nc] */
    int64_t *lens;                  /* rank 0: their lengths [nc] */
    unsigned char *rx;              /* a payload being received (freed by rt_net_free on failure) */
    unsigned char *reply;           /* rank 0: the allgather answer being sent (likewise) */
    pthread_mutex_t own;            /* held by the thread using the sockets */
    pthread_t dog;                  /* the watchdog thread */
    int dog_on;                     /* it is running */
    int wake[2];                    /* pipe that wakes it to stop */
    atomic_int stop;                /* it is to stop */
};

/* ---- small helpers */

/* Little-endian stores and loads (the wire format). */
static void net_put32(unsigned char *p, uint32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (unsigned char)(v >> 8 * k);
}

static void net_put64(unsigned char *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (unsigned char)(v >> 8 * k);
}

static uint32_t net_get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int k = 0; k < 4; k++)
        v |= (uint32_t)p[k] << 8 * k;
    return v;
}

static uint64_t net_get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v |= (uint64_t)p[k] << 8 * k;
    return v;
}

/* Encode / decode a frame header. */
static void net_hdr_put(unsigned char *p, uint32_t type, int what, uint64_t seq, int64_t len)
{
    net_put32(p, type);
    net_put32(p + 4, (uint32_t)what);
    net_put64(p + 8, seq);
    net_put64(p + 16, (uint64_t)len);
}

static net_hdr net_hdr_get(const unsigned char *p)
{
    net_hdr h = {net_get32(p), (int32_t)net_get32(p + 4), net_get64(p + 8),
                 (int64_t)net_get64(p + 16)};
    return h;
}

/* Name of a collective or of the byte allgather, for messages. */
static const char *net_coll_name(int what)
{
    return what == NET_WHAT_BYTES ? "byte allgather" : rt_coll_name(what);
}

/* " during barrier", or "" for what < 0 (outside the collectives). */
static const char *net_during(int what, char *buf, size_t len)
{
    if (what < 0)
        buf[0] = 0;
    else
        snprintf(buf, len, " during %s", net_coll_name(what));
    return buf;
}

/* Milliseconds for poll() to wait until `left` seconds have passed (> 0). */
static int net_ms(double left)
{
    if (left <= 0)
        return 0;
    if (left > 1e6)
        return 1000000000;
    return (int)(left * 1000.0) + 1;
}

/* Sleep s seconds. */
static void net_sleep(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Seconds this rank waits for a message: ranks other than 0 wait a little
 * longer for rank 0, so that rank 0, which waits for the others, times out
 * first and names the rank that is late. */
static double net_span(const rt_ctx *ctx)
{
    return ctx->timeout + (ctx->rank == 0 ? 0.0 : NET_GRACE);
}

/* The connection to peer q (rank 0: any peer; the others: only rank 0). */
static net_conn *net_conn_of(rt_net *n, int q)
{
    RT_ASSERT(n->rank == 0 ? q > 0 && q < n->world : q == 0);
    return n->rank == 0 ? &n->c[q] : &n->c[0];
}

/* Latency matters, not throughput: no Nagle delay.  Keepalive probes
 * notice a peer host that vanished without closing (power, network). */
static void net_tune(int fd)
{
    int one = 1, idle = 10, intvl = 5, cnt = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

/* FNV-1a step over one 64-bit word. */
static uint64_t net_fold(uint64_t h, uint64_t v)
{
    return (h ^ v) * UINT64_C(0x100000001b3);
}

/* What identifies the build: the manifest fields that every rank of one
 * compile shares (the model, the world, the training settings and the
 * group table; param boxes and the arena differ from rank to rank). */
static uint64_t net_build_hash(const rt_manifest *m)
{
    uint64_t h = rt_fnv1a64(m->model), bits;
    int64_t words[] = {m->world, m->steps, m->micro_batches, m->sched, m->warmup,
                       m->tokens_per_step, m->eval_every, m->eval_steps, m->ngroups};
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
        h = net_fold(h, (uint64_t)words[k]);
    h = net_fold(h, m->seed);
    double reals[] = {m->lr, m->min_lr_frac, m->clip};
    for (size_t k = 0; k < sizeof reals / sizeof reals[0]; k++) {
        memcpy(&bits, &reals[k], 8);
        h = net_fold(h, bits);
    }
    for (int g = 0; g < m->ngroups; g++) {
        h = net_fold(h, (uint64_t)m->groups[g].n);
        for (int j = 0; j < m->groups[g].n; j++)
            h = net_fold(h, (uint64_t)m->groups[g].ranks[j]);
    }
    return h;
}

/* ---- failure */

/* Stop this rank for a failure found here: remember what the peers are to
 * be told (rt_fatal's rt_net_free sends it), print the reason, exit 1. */
static void net_fail(rt_ctx *ctx, int culprit, int how, int what, const char *fmt, ...)
    __attribute__((format(printf, 5, 6), noreturn));
static void net_fail(rt_ctx *ctx, int culprit, int how, int what, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx->net) {
        ctx->net->culprit = culprit;
        ctx->net->how = how;
        ctx->net->what = what;
    }
    rt_fatal(ctx, 1, "%s", msg);
}

/* Peer q's connection closed (reason: the error, or NULL for an orderly close). */
static void net_left(rt_ctx *ctx, int q, int what, const char *reason) __attribute__((noreturn));
static void net_left(rt_ctx *ctx, int q, int what, const char *reason)
{
    char d[48];
    net_fail(ctx, q, NET_LEFT, what, "peer rank %d left the job%s (connection %s%s)", q,
             net_during(what, d, sizeof d), reason ? "lost: " : "closed", reason ? reason : "");
}

/* Nothing from peer q (reading) or nothing taken by it (writing) in time. */
static void net_timeout(rt_ctx *ctx, int q, int what, int writing) __attribute__((noreturn));
static void net_timeout(rt_ctx *ctx, int q, int what, int writing)
{
    net_fail(ctx, q, NET_TIMEOUT, what, "peer rank %d timed out in %s (%s for %g s)", q,
             net_coll_name(what), writing ? "it read nothing" : "nothing from it",
             q == 0 && ctx->rank != 0 ? net_span(ctx) : ctx->timeout);
}

/* The one-line message for an abort frame from rank `from` (payload p of
 * len bytes), seen by rank `me` during collective `during` (-1: outside
 * them).  Sets *culprit, *how and *what to what this rank passes on. */
static void net_abort_text(char *out, size_t outlen, int me, int from, const unsigned char *p,
                           int64_t len, int during, int *culprit, int *how, int *what)
{
    char d[48];
    *culprit = from;
    *how = NET_FAILED;
    *what = during;
    const char *note = "";
    if (p && len >= NET_ABORT) {
        *culprit = (int32_t)net_get32(p);
        *how = (int32_t)net_get32(p + 4);
        *what = (int32_t)net_get32(p + 8);
        note = (const char *)p + NET_ABORT;   /* NUL-terminated by the reader */
    }
    net_during(during, d, sizeof d);
    switch (*how) {
    case NET_LEFT:
        snprintf(out, outlen, "peer rank %d left the job%s (its connection closed; reported by "
                 "rank %d)", *culprit, d, from);
        break;
    case NET_TIMEOUT:
        if (*culprit == me)   /* this rank was too slow (busy without heartbeats, stopped) */
            snprintf(out, outlen, "rank %d stopped the job: this rank did not reach %s within "
                     "the timeout", from, net_coll_name(*what));
        else
            snprintf(out, outlen, "peer rank %d timed out in %s (reported by rank %d)",
                     *culprit, net_coll_name(*what), from);
        break;
    case NET_MISSING:
        snprintf(out, outlen, "%s (reported by rank %d)", note, from);
        break;
    default:
        *how = NET_FAILED;
        if (*culprit == from)
            snprintf(out, outlen, "peer rank %d left the job%s (it stopped with an error; see "
                     "its message)", from, d);
        else
            snprintf(out, outlen, "peer rank %d left the job%s (it stopped with an error; "
                     "reported by rank %d)", *culprit, d, from);
    }
}

/* An abort frame arrived from peer `from`: stop too (rank 0 relays it). */
static void net_follow(rt_ctx *ctx, int from, const unsigned char *p, int64_t len, int during)
    __attribute__((noreturn));
static void net_follow(rt_ctx *ctx, int from, const unsigned char *p, int64_t len, int during)
{
    char msg[400];
    int culprit, how, what;
    net_abort_text(msg, sizeof msg, ctx->rank, from, p, len, during, &culprit, &how, &what);
    if (how == NET_MISSING && ctx->net)
        snprintf(ctx->net->note, sizeof ctx->net->note, "%s", (const char *)p + NET_ABORT);
    net_fail(ctx, culprit, how, what, "%s", msg);
}

/* ---- sending and receiving */

/* Wait until fd is ready for `events` or the deadline passes.  Returns 0 at
 * the deadline, else 1 (also on errors: the next read or write says). */
static int net_wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - rt_now();
        if (left <= 0)
            return 0;
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, net_ms(left));
        if (r > 0 || (r < 0 && errno != EINTR))
            return 1;
    }
}

/* Write the iovecs to peer q by the deadline (partial writes, EINTR and a
 * full socket buffer handled; no SIGPIPE). */
static void net_send_iov(rt_ctx *ctx, int q, struct iovec *iov, int niov, double deadline,
                         int what)
{
    int fd = net_conn_of(ctx->net, q)->fd;
    while (niov > 0) {
        if (iov->iov_len == 0) {
            iov++;
            niov--;
            continue;
        }
        struct msghdr msg = {0};
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)niov;
        ssize_t r = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (!net_wait_fd(fd, POLLOUT, deadline))
                    net_timeout(ctx, q, what, 1);
                continue;
            }
            net_left(ctx, q, what, strerror(errno));
        }
        for (size_t done = (size_t)r; done > 0;) {   /* advance past what was written */
            size_t k = done < iov->iov_len ? done : iov->iov_len;
            iov->iov_base = (char *)iov->iov_base + k;
            iov->iov_len -= k;
            done -= k;
            if (iov->iov_len == 0) {
                iov++;
                niov--;
            }
        }
    }
}

/* Send one frame to peer q: the rest of an earlier heartbeat first, then
 * the header (this rank's collective number) and the payload. */
static void net_send(rt_ctx *ctx, int q, int type, int what, const void *payload, int64_t len,
                     double deadline)
{
    net_conn *c = net_conn_of(ctx->net, q);
    unsigned char h[NET_HDR], tail[NET_HDR];
    int ntail = c->ntail;
    memcpy(tail, c->tail, (size_t)ntail);
    c->ntail = 0;
    net_hdr_put(h, (uint32_t)type, what, ctx->net->seq, len);
    struct iovec iov[3] = {{tail, (size_t)ntail}, {h, NET_HDR}, {(void *)payload, (size_t)len}};
    net_send_iov(ctx, q, iov, 3, deadline, what);
}

/* Read exactly n bytes from peer q by the deadline. */
static void net_read(rt_ctx *ctx, int q, void *buf, int64_t n, double deadline, int what)
{
    int fd = net_conn_of(ctx->net, q)->fd;
    char *p = buf;
    while (n > 0) {
        ssize_t r = recv(fd, p, (size_t)(n < (1 << 30) ? n : (1 << 30)), 0);
        if (r > 0) {
            p += r;
            n -= r;
        } else if (r == 0) {
            net_left(ctx, q, what, NULL);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (!net_wait_fd(fd, POLLIN, deadline))
                net_timeout(ctx, q, what, 0);
        } else if (errno != EINTR) {
            net_left(ctx, q, what, strerror(errno));
        }
    }
}

/* Heartbeats to every peer but `except`, without waiting: a frame that does
 * not fit whole keeps its end in the connection's tail, which the next
 * frame to that peer sends first, so the stream stays intact. */
static void net_beat_all(rt_net *n, int except)
{
    double now = rt_now();
    if (now - n->last_beat < NET_BEAT_GAP)
        return;
    n->last_beat = now;
    for (int k = 0; k < n->nc; k++) {
        net_conn *c = &n->c[k];
        if (c->fd < 0 || (n->rank == 0 && k == except))
            continue;
        while (c->ntail > 0) {   /* the end of the last heartbeat first */
            ssize_t r = send(c->fd, c->tail, (size_t)c->ntail, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (r <= 0)
                break;
            memmove(c->tail, c->tail + r, (size_t)(c->ntail - r));
            c->ntail -= (int)r;
        }
        if (c->ntail > 0)
            continue;   /* the peer reads nothing: skip this one */
        unsigned char h[NET_HDR];
        net_hdr_put(h, NET_T_BEAT, 0, n->seq, 0);
        ssize_t r = send(c->fd, h, NET_HDR, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r <= 0)
            continue;   /* a full buffer, or a broken connection (the next collective says) */
        if (r < NET_HDR) {
            memcpy(c->tail, h + r, (size_t)(NET_HDR - r));
            c->ntail = NET_HDR - (int)r;
        }
    }
}

/* Check that a frame from peer q belongs to this rank's current collective. */
static void net_expect(rt_ctx *ctx, int q, const net_hdr *h, int what)
{
    rt_net *n = ctx->net;
    if (h->type != NET_T_DATA || h->what != what || h->seq != n->seq)
        rt_fatal(ctx, 1, "control messages out of step: rank %d sent %s #%llu (frame type %u), "
                 "this rank is in %s #%llu (do all ranks run executables of one build?)", q,
                 net_coll_name(h->what), (unsigned long long)h->seq, h->type,
                 net_coll_name(what), (unsigned long long)n->seq);
}

/* Read the next frame from peer q.  Returns 1 with its header in *h and its
 * payload in *p (malloc'ed and NUL-terminated; NULL when empty); returns 0
 * after a heartbeat, which restarts *deadline (and which rank 0 passes on to
 * the others, who may be waiting for it).  An abort frame stops this rank.
 * data = 1: the frame must be the data frame of the current collective
 * `what` (checked before its payload is read). */
static int net_next(rt_ctx *ctx, int q, net_hdr *h, unsigned char **p, double *deadline, int what,
                    int data)
{
    unsigned char raw[NET_HDR];
    net_read(ctx, q, raw, NET_HDR, *deadline, what);
    *h = net_hdr_get(raw);
    *p = NULL;
    if (h->len < 0 || h->len > NET_MAX_PAYLOAD || h->type < NET_T_HELLO ||
        h->type > NET_T_PROOF || (h->type == NET_T_BEAT && h->len != 0) ||
        (h->type == NET_T_ABORT && h->len > NET_ABORT + NET_NOTE))
        rt_fatal(ctx, 1, "garbled control message from rank %d during %s (type %u, %lld bytes)",
                 q, net_coll_name(what), h->type, (long long)h->len);
    if (h->type == NET_T_BEAT) {
        *deadline = rt_now() + net_span(ctx);
        if (ctx->rank == 0)
            net_beat_all(ctx->net, q);
        return 0;
    }
    if (h->type == NET_T_ABORT) {
        unsigned char ab[NET_ABORT + NET_NOTE + 1];
        net_read(ctx, q, ab, h->len, *deadline, what);
        ab[h->len] = 0;
        net_follow(ctx, q, ab, h->len, what);
    }
    if (data)
        net_expect(ctx, q, h, what);
    if (h->len > 0) {
        *p = malloc((size_t)h->len + 1);
        if (!*p)
            rt_fatal(ctx, 1, "out of memory");
        net_read(ctx, q, *p, h->len, *deadline, what);
        (*p)[h->len] = 0;
    }
    return 1;
}

/* Wait for the data frame of the current collective from peer q; returns
 * its payload (malloc'ed, or NULL when empty) and length. */
static unsigned char *net_recv_data(rt_ctx *ctx, int q, int what, int64_t *len)
{
    double deadline = rt_now() + net_span(ctx);
    rt_net *n = ctx->net;
    net_hdr h;
    while (!net_next(ctx, q, &h, &n->rx, &deadline, what, 1)) {
    }
    unsigned char *p = n->rx;
    n->rx = NULL;
    *len = h.len;
    return p;
}

/* Send a data frame of the current collective to peer q. */
static void net_send_data(rt_ctx *ctx, int q, int what, const void *p, int64_t len)
{
    net_send(ctx, q, NET_T_DATA, what, p, len, rt_now() + net_span(ctx));
}

/* Rank 0: the data frame of the current collective from every peer, in
 * whatever order they come (payloads in n->bufs[q], lengths in n->lens[q];
 * the caller frees the payloads).  The ranks still missing at the deadline
 * are named. */
static void net_gather(rt_ctx *ctx, int what)
{
    rt_net *n = ctx->net;
    int w = n->world, left = w - 1;
    memset(n->got, 0, (size_t)w);
    double deadline = rt_now() + ctx->timeout;
    while (left > 0) {
        int np = 0;
        for (int q = 1; q < w; q++)
            if (!n->got[q]) {
                n->pf[np] = (struct pollfd){n->c[q].fd, POLLIN, 0};
                n->who[np++] = q;
            }
        double rem = deadline - rt_now();
        if (rem <= 0) {
            char list[NET_NOTE];
            int o = 0, first = -1;
            for (int q = 1; q < w && o < (int)sizeof list - 16; q++)
                if (!n->got[q]) {
                    o += snprintf(list + o, sizeof list - (size_t)o, "%s%d", o ? ", " : "", q);
                    first = first < 0 ? q : first;
                }
            net_fail(ctx, first, NET_TIMEOUT, what, "peer rank%s %s timed out in %s (nothing "
                     "from %s for %g s)", left > 1 ? "s" : "", list, net_coll_name(what),
                     left > 1 ? "them" : "it", ctx->timeout);
        }
        int r = poll(n->pf, (nfds_t)np, net_ms(rem));
        if (r < 0 && errno != EINTR)
            rt_fatal(ctx, 1, "poll on the control connections failed: %s", strerror(errno));
        for (int k = 0; r > 0 && k < np; k++) {
            if (!n->pf[k].revents)
                continue;
            int q = n->who[k];
            net_hdr h;
            if (net_next(ctx, q, &h, &n->bufs[q], &deadline, what, 1)) {
                n->lens[q] = h.len;
                n->got[q] = 1;
                left--;
            }
        }
    }
}

/* Rank 0: free the payloads net_gather collected. */
static void net_gather_free(rt_net *n)
{
    for (int q = 0; q < n->nc && n->bufs; q++) {
        free(n->bufs[q]);
        n->bufs[q] = NULL;
    }
}

/* Start a control collective: take the sockets (from the watchdog) and
 * number the collective. */
static rt_net *net_begin(rt_ctx *ctx)
{
    rt_net *n = ctx->net;
    pthread_mutex_lock(&n->own);
    n->seq++;
    return n;
}

/* End a control collective. */
static void net_end(rt_net *n)
{
    pthread_mutex_unlock(&n->own);
}

/* ---- closing */

/* Close every connection: send `abort` (a whole frame, or NULL) where it
 * fits without waiting, shut the sending side, read (and drop) what still
 * comes until each peer closes or drain_s seconds pass -- closing a socket
 * with unread data would reset it and lose what was sent -- then close. */
static void net_close_all(rt_net *n, const unsigned char *abort, size_t alen, double drain_s)
{
    for (int k = 0; k < n->nc; k++) {
        net_conn *c = &n->c[k];
        if (c->fd < 0)
            continue;
        if (abort) {
            while (c->ntail > 0) {
                ssize_t r = send(c->fd, c->tail, (size_t)c->ntail, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (r <= 0)
                    break;
                memmove(c->tail, c->tail + r, (size_t)(c->ntail - r));
                c->ntail -= (int)r;
            }
            if (c->ntail == 0)
                (void)!send(c->fd, abort, alen, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        shutdown(c->fd, SHUT_WR);
    }
    double deadline = rt_now() + drain_s;
    struct pollfd *pf = n->pf;   /* free: net_gather is not running */
    int *idx = n->who;
    char junk[4096];
    for (;;) {
        int np = 0;
        for (int k = 0; k < n->nc; k++)
            if (n->c[k].fd >= 0) {
                pf[np] = (struct pollfd){n->c[k].fd, POLLIN, 0};
                idx[np++] = k;
            }
        double rem = deadline - rt_now();
        if (np == 0 || rem <= 0)
            break;
        if (poll(pf, (nfds_t)np, net_ms(rem)) < 0 && errno != EINTR)
            break;
        for (int j = 0; j < np; j++) {
            if (!pf[j].revents)
                continue;
            ssize_t r = recv(pf[j].fd, junk, sizeof junk, MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                close(n->c[idx[j]].fd);   /* the peer has closed too */
                n->c[idx[j]].fd = -1;
            }
        }
    }
    for (int k = 0; k < n->nc; k++)
        if (n->c[k].fd >= 0) {
            close(n->c[k].fd);
            n->c[k].fd = -1;
        }
}

/* An abort frame {culprit, how, what, note} into buf (NET_HDR + NET_ABORT +
 * NET_NOTE bytes); returns its length. */
static size_t net_abort_frame(unsigned char *buf, uint64_t seq, int culprit, int how, int what,
                              const char *note)
{
    size_t nl = strnlen(note, NET_NOTE - 1);
    net_hdr_put(buf, NET_T_ABORT, what, seq, (int64_t)(NET_ABORT + nl));
    net_put32(buf + NET_HDR, (uint32_t)culprit);
    net_put32(buf + NET_HDR + 4, (uint32_t)how);
    net_put32(buf + NET_HDR + 8, (uint32_t)what);
    memcpy(buf + NET_HDR + NET_ABORT, note, nl);
    return NET_HDR + NET_ABORT + nl;
}

/* ---- the watchdog */

/* The watchdog found peer q hung up while the main thread is outside the
 * control collectives (it holds `own`): read what q sent last (an abort
 * frame names the real culprit), print the reason, tell the peers, exit 1.
 * _exit: the main thread may be inside the CUDA driver or NCCL. */
static void net_dog_stop_rank(rt_net *n, int q) __attribute__((noreturn));
static void net_dog_stop_rank(rt_net *n, int q)
{
    net_conn *c = net_conn_of(n, q);
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    int err = 0;
    while (buf) {   /* everything q sent that nobody read (ends at its close) */
        if (len == cap) {
            if (cap >= (1u << 24))
                break;
            unsigned char *bigger = realloc(buf, cap * 2);
            if (!bigger)
                break;
            buf = bigger;
            cap *= 2;
        }
        ssize_t r = recv(c->fd, buf + len, cap - len, MSG_DONTWAIT);
        if (r > 0)
            len += (size_t)r;
        else if (r < 0 && errno == EINTR)
            continue;
        else {
            err = r < 0 && errno != EAGAIN && errno != EWOULDBLOCK ? errno : 0;
            break;
        }
    }
    char msg[400];
    int culprit = q, how = NET_LEFT, what = -1;
    snprintf(msg, sizeof msg, "peer rank %d left the job (connection %s%s)", q,
             err ? "lost: " : "closed", err ? strerror(err) : "");
    for (size_t at = 0; buf && at + NET_HDR <= len;) {   /* look for an abort frame */
        net_hdr h = net_hdr_get(buf + at);
        if (h.len < 0 || (uint64_t)h.len > len - at - NET_HDR)
            break;
        if (h.type == NET_T_ABORT) {
            unsigned char p[NET_ABORT + NET_NOTE];
            size_t pl = (size_t)h.len < sizeof p - 1 ? (size_t)h.len : sizeof p - 1;
            memcpy(p, buf + at + NET_HDR, pl);
            p[pl] = 0;
            net_abort_text(msg, sizeof msg, n->rank, q, p, (int64_t)pl, -1, &culprit, &how,
                           &what);
            break;
        }
        at += NET_HDR + (size_t)h.len;
    }
    free(buf);
    if (ftrylockfile(stdout) == 0) {   /* the step log so far, unless main is writing it */
        fflush(stdout);
        funlockfile(stdout);
    }
    char line[480];   /* one write: stderr may be buffered, and _exit flushes nothing */
    int ll = snprintf(line, sizeof line, "rank %d: %s\n", n->rank, msg);
    (void)!write(STDERR_FILENO, line, (size_t)(ll < (int)sizeof line ? ll : (int)sizeof line - 1));
    unsigned char ab[NET_HDR + NET_ABORT + NET_NOTE];
    size_t al = net_abort_frame(ab, n->seq, culprit, how, what, "");
    net_close_all(n, ab, al, 1.0);
    _exit(1);
}

/* The watchdog thread: sleeps in poll() until a connection hangs up (or the
 * wake pipe says stop).  While the main thread is in a collective it will
 * see the hang-up itself; otherwise the watchdog stops the rank. */
static void *net_dog_main(void *arg)
{
    rt_net *n = arg;
    struct pollfd *pf = calloc((size_t)n->nc + 1, sizeof *pf);
    int *who = calloc((size_t)n->nc + 1, sizeof *who);
    while (pf && who && !atomic_load(&n->stop)) {
        int np = 0;
        pf[np++] = (struct pollfd){n->wake[0], POLLIN, 0};
        for (int k = 0; k < n->nc; k++)
            if (n->c[k].fd >= 0) {
                pf[np] = (struct pollfd){n->c[k].fd, POLLRDHUP, 0};
                who[np++] = n->rank == 0 ? k : 0;
            }
        if (poll(pf, (nfds_t)np, -1) <= 0 || atomic_load(&n->stop))
            continue;
        int q = -1;
        for (int k = 1; k < np && q < 0; k++)
            if (pf[k].revents & (POLLRDHUP | POLLHUP | POLLERR))
                q = who[k];
        if (q < 0)
            continue;
        if (pthread_mutex_trylock(&n->own) != 0) {   /* the main thread is in a collective */
            net_sleep(0.02);
            continue;
        }
        if (atomic_load(&n->stop)) {
            pthread_mutex_unlock(&n->own);
            break;
        }
        net_dog_stop_rank(n, q);
    }
    free(pf);
    free(who);
    return NULL;
}

/* Start the watchdog (after the rendezvous). */
static void net_dog_start(rt_ctx *ctx)
{
    rt_net *n = ctx->net;
    if (pipe2(n->wake, O_CLOEXEC) != 0)
        rt_fatal(ctx, 1, "pipe failed: %s", strerror(errno));
    int e = pthread_create(&n->dog, NULL, net_dog_main, n);
    if (e)
        rt_fatal(ctx, 1, "cannot start the control-plane watchdog thread: %s", strerror(e));
    n->dog_on = 1;
}

/* Stop the watchdog (before the connections may close in an orderly way). */
static void net_dog_stop(rt_net *n)
{
    if (!n->dog_on)
        return;
    n->dog_on = 0;
    atomic_store(&n->stop, 1);
    (void)!write(n->wake[1], "x", 1);
    pthread_join(n->dog, NULL);
}

/* ---- environment */

/* The first of variables a, b that is set and not empty (*which: its name), or NULL. */
static const char *net_env2(const char *a, const char *b, const char **which)
{
    const char *v = getenv(a);
    *which = a;
    if (!v || !*v) {
        v = getenv(b);
        *which = b;
    }
    return v && *v ? v : NULL;
}

int rt_net_local_rank(const rt_ctx *ctx)
{
    static const char *const vars[] = {"NNSC_LOCAL_RANK", "LOCAL_RANK", "SLURM_LOCALID",
                                       "OMPI_COMM_WORLD_LOCAL_RANK"};
    for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++) {
        const char *v = getenv(vars[k]);
        if (!v || !*v)
            continue;
        char *end;
        errno = 0;
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end || x < 0 || x > INT32_MAX)
            /* rt_fatal takes a mutable ctx for its clean-up; nothing is set up yet */
            rt_fatal((rt_ctx *)ctx, 2, "%s must be this process's rank on its host (a "
                     "non-negative integer), not '%s'", vars[k], v);
        return (int)x;
    }
    return ctx->rank;
}

/* MASTER_ADDR / MASTER_PORT (NNSC_ first) into n; exits 2 when missing or bad. */
static void net_read_env(rt_ctx *ctx, rt_net *n)
{
    const char *pvar, *addr = net_env2("NNSC_MASTER_ADDR", "MASTER_ADDR", &n->addr_var);
    const char *port = net_env2("NNSC_MASTER_PORT", "MASTER_PORT", &pvar);
    if (!addr || !port)
        rt_fatal(ctx, 2, "%s is not set: the %d ranks of a cuda-target job meet at "
                 "MASTER_ADDR:MASTER_PORT (rank 0's host and a free TCP port there; "
                 "NNSC_MASTER_ADDR / NNSC_MASTER_PORT take precedence). Set both for every "
                 "rank; out/launch sets them for ranks on one host",
                 !addr ? "MASTER_ADDR" : "MASTER_PORT", ctx->world);
    size_t al = strlen(addr);
    if (al >= 2 && addr[0] == '[' && addr[al - 1] == ']') {   /* [IPv6 literal] */
        addr++;
        al -= 2;
    }
    if (al == 0 || al >= sizeof n->addr)
        rt_fatal(ctx, 2, "%s '%s' is not a host name or address", n->addr_var, addr);
    memcpy(n->addr, addr, al);
    n->addr[al] = 0;
    char *end;
    errno = 0;
    long p = strtol(port, &end, 10);
    if (errno || end == port || *end || p < 1 || p > 65535)
        rt_fatal(ctx, 2, "%s must be a TCP port number in 1..65535, not '%s'", pvar, port);
    n->port = (int)p;
}

/* ---- the proof of the secret */

/* The tag of one side of a connection's handshake: HMAC(secret, label ||
 * the hello || rank 0's nonce), label "nnsc-net rank 0" or "nnsc-net peer"
 * (so that neither side's tag serves as the other's). */
static void net_tag(const rt_net *n, const char *label, const unsigned char *hello,
                    const unsigned char *nonce0, unsigned char out[RT_SHA256_LEN])
{
    rt_hmac_state h;
    rt_hmac_init(&h, n->secret.key, n->secret.len);
    rt_hmac_update(&h, label, strlen(label));
    rt_hmac_update(&h, hello, NET_HELLO);
    rt_hmac_update(&h, nonce0, RT_NONCE_LEN);
    rt_hmac_final(&h, out);
}

/* The message of a rank without a secret (exit 2 with a hint). */
#define NET_NO_SECRET                                                                              \
    "no job secret: the ranks of a cuda-target job prove to each other with a shared secret that " \
    "they belong to one job before anything else flows (docs/cluster.md, Trust); out/launch "      \
    "makes one per run, a cluster launcher needs one given  hint: export NNSC_SECRET=$(od -An "    \
    "-N32 -tx1 /dev/urandom | tr -d ' \\n') before srun / mpirun (the same for every rank), or "   \
    "NNSC_SECRET_FILE=FILE, a file only you can read"

/* ---- rendezvous, rank 0 */

/* "host:port" of a socket address. */
static void net_addr_text(const struct sockaddr *sa, socklen_t len, char *out, size_t outlen)
{
    char host[64], serv[16];
    struct sockaddr_in v4;
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)sa;
    if (sa->sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
        memset(&v4, 0, sizeof v4);   /* an IPv4 peer of the dual-stack socket */
        v4.sin_family = AF_INET;
        v4.sin_port = a6->sin6_port;
        memcpy(&v4.sin_addr, a6->sin6_addr.s6_addr + 12, 4);
        sa = (const struct sockaddr *)&v4;
        len = sizeof v4;
    }
    if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        snprintf(out, outlen, "?");
    else
        snprintf(out, outlen, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, serv);
}

/* 1 if a is a loopback address (127/8, ::1, ::ffff:127/104). */
static int net_is_loopback(const struct sockaddr *a)
{
    if (a->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
    if (a->sa_family != AF_INET6)
        return 0;
    const struct in6_addr *v6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(v6) || (IN6_IS_ADDR_V4MAPPED(v6) && v6->s6_addr[12] == 127);
}

/* 1 if s is an IPv4 or IPv6 literal, or "localhost". */
static int net_is_literal(const char *s)
{
    unsigned char buf[sizeof(struct in6_addr)];
    return !strcmp(s, "localhost") || inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* A listening socket on address a (len bytes), or -1 with errno set. */
static int net_listen_on(const struct sockaddr *a, socklen_t len, int v6only)
{
    int one = 1, fd = socket(a->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->sa_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
    if (bind(fd, a, len) == 0 && listen(fd, 128) == 0)
        return fd;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

/* Port taken: exit 2. */
static void net_port_taken(rt_ctx *ctx, int port, int e) __attribute__((noreturn));
static void net_port_taken(rt_ctx *ctx, int port, int e)
{
    rt_fatal(ctx, 2, "cannot listen on TCP port %d: %s%s", port, strerror(e),
             e == EADDRINUSE ? " (another job on this host uses it? choose another MASTER_PORT)" : "");
}

/* Listen on the master port: on MASTER_ADDR's address when it is one of
 * this host's; else (a host name that resolves here only to loopback, like
 * Debian's 127.0.1.1 line for the host's own name, which the other hosts
 * resolve differently; or an address of another interface, a NAT) on every
 * interface, IPv6 and IPv4 where the host has IPv6.  Exits 2 when the port
 * is taken. */
static int net_listen(rt_ctx *ctx, rt_net *n)
{
    char port[16];
    snprintf(port, sizeof port, "%d", n->port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int literal = net_is_literal(n->addr), fd = -1;
    if (getaddrinfo(n->addr, port, &hints, &res) == 0) {
        for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
            if (!literal && net_is_loopback(ai->ai_addr))
                continue;
            fd = net_listen_on(ai->ai_addr, ai->ai_addrlen, 1);
            if (fd < 0 && errno == EADDRINUSE) {
                freeaddrinfo(res);
                net_port_taken(ctx, n->port, EADDRINUSE);
            }
            if (fd >= 0)
                net_addr_text(ai->ai_addr, ai->ai_addrlen, n->bound, sizeof n->bound);
        }
        freeaddrinfo(res);
        if (fd >= 0)
            return fd;
    }
    struct sockaddr_in6 a6 = {0};
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons((uint16_t)n->port);
    snprintf(n->bound, sizeof n->bound, "every interface, port %d", n->port);
    fd = net_listen_on((struct sockaddr *)&a6, sizeof a6, 0);
    if (fd >= 0)
        return fd;
    if (errno == EADDRINUSE)
        net_port_taken(ctx, n->port, errno);
    struct sockaddr_in a4 = {0};
    a4.sin_family = AF_INET;
    a4.sin_addr.s_addr = htonl(INADDR_ANY);
    a4.sin_port = htons((uint16_t)n->port);
    fd = net_listen_on((struct sockaddr *)&a4, sizeof a4, 0);
    if (fd < 0)
        net_port_taken(ctx, n->port, errno);
    return fd;
}

/* Send a reject frame with reason why to fd, without waiting, and shut the
 * sending side. */
static void net_send_reject(int fd, const char *why)
{
    size_t wl = strlen(why);
    unsigned char h[NET_HDR];
    net_hdr_put(h, NET_T_REJECT, RT_COLL_INIT, 0, (int64_t)wl);
    struct iovec iov[2] = {{h, NET_HDR}, {(void *)why, wl}};
    struct msghdr msg = {0};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    /* a few hundred bytes into a fresh socket: they fit without waiting */
    (void)!sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
}

/* Rank 0: refuse the connection of pending entry pe with reason (sent to
 * it, then printed here), exit 2.  For proven peers only: their job is
 * this one, misconfigured.  The peers already in are told by rt_net_free. */
static void net_reject(rt_ctx *ctx, net_pending *pe, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
static void net_reject(rt_ctx *ctx, net_pending *pe, const char *fmt, ...)
{
    char why[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    net_send_reject(pe->fd, why);
    net_wait_fd(pe->fd, POLLIN, rt_now() + 1.0);   /* let it read before we close */
    rt_fatal(ctx, 2, "%s", why);
}

/* Rank 0: refuse and drop a connection that has not proven the secret (or
 * speaks another protocol), telling it why; rank 0 says so (the first few
 * times) and waits on. */
static void net_refuse(rt_ctx *ctx, net_pending *pe, int rank, const char *why)
{
    rt_net *n = ctx->net;
    char msg[400];
    snprintf(msg, sizeof msg, "rank 0 refused the connection: %s", why);
    net_send_reject(pe->fd, msg);
    close(pe->fd);   /* nothing unread: the close sends the reject, then FIN */
    pe->fd = -1;
    if (n->refused++ < NET_REFUSALS)
        rt_warn(ctx, "refused a connection from %s claiming rank %d: %s; still waiting for this "
                "job's ranks%s", pe->from, rank, why,
                n->refused == NET_REFUSALS ? " (further refusals are not shown)" : "");
}

/* Rank 0: a complete hello from pending entry pe: send the challenge.
 * Returns 0 when the connection is dropped (not an nnsc rank, or another
 * protocol version: refused). */
static int net_challenge(rt_ctx *ctx, net_pending *pe)
{
    rt_net *n = ctx->net;
    net_hdr h = net_hdr_get(pe->buf);
    const unsigned char *p = pe->buf + NET_HDR;
    if (net_get64(p) != NET_MAGIC)
        return 0;   /* a stray connection (port scanner, another program) */
    uint32_t version = net_get32(p + 8);
    int rank = (int32_t)net_get32(p + 12);
    if (version != NET_VERSION) {
        char why[200];
        snprintf(why, sizeof why, "it speaks control-plane protocol %u, rank 0 protocol %u: all "
                 "rank executables must come from one nnsc-aot", version, NET_VERSION);
        net_refuse(ctx, pe, rank, why);
        return 0;
    }
    if (h.len != NET_HELLO)
        return 0;
    unsigned char ch[NET_HDR + NET_CHALLENGE];
    net_hdr_put(ch, NET_T_CHALLENGE, RT_COLL_INIT, 0, NET_CHALLENGE);
    rt_random(ctx, pe->nonce, RT_NONCE_LEN);
    memcpy(ch + NET_HDR, pe->nonce, RT_NONCE_LEN);
    net_tag(n, "nnsc-net rank 0", p, pe->nonce, ch + NET_HDR + RT_NONCE_LEN);
    /* 88 bytes into a fresh socket: they fit without waiting */
    if (send(pe->fd, ch, sizeof ch, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof ch)
        return 0;
    pe->proving = 1;
    pe->got = 0;
    pe->want = NET_HDR;
    return 1;
}

/* Rank 0: the proof of pending entry pe is complete.  Admits the rank
 * (returns 1), or refuses and drops a connection whose proof is wrong
 * (returns 0); a proven rank of another build or world, or a second
 * process of one rank: exit 2. */
static int net_admit(rt_ctx *ctx, net_pending *pe, uint64_t build)
{
    rt_net *n = ctx->net;
    const unsigned char *p = pe->buf + NET_HDR;
    int rank = (int32_t)net_get32(p + 12), world = (int32_t)net_get32(p + 16);
    net_hdr ph = net_hdr_get(pe->proof);
    unsigned char want[RT_SHA256_LEN];
    net_tag(n, "nnsc-net peer", p, pe->nonce, want);
    if (ph.type != NET_T_PROOF || ph.len != RT_SHA256_LEN ||
        !rt_ct_equal(want, pe->proof + NET_HDR, RT_SHA256_LEN)) {
        net_refuse(ctx, pe, rank, "it does not know this job's secret (a rank of another job "
                   "using the same MASTER_ADDR:MASTER_PORT, or ranks started with different "
                   "NNSC_SECRET / NNSC_SECRET_FILE)");
        return 0;
    }
    uint64_t their = net_get64(p + 24);
    char model[NET_MODEL + 1];
    memcpy(model, p + 32, NET_MODEL);
    model[NET_MODEL] = 0;
    if (world != n->world)
        net_reject(ctx, pe, "rank %d (from %s) belongs to a job of %d ranks of model '%s', "
                   "rank 0 to one of %d ranks of model '%s': start the rank executables of one "
                   "compile, with the same world size on every host", rank, pe->from, world,
                   model, n->world, ctx->man.model);
    if (rank < 1 || rank >= n->world)
        net_reject(ctx, pe, "a process (from %s) connected as rank %d: rank 0 is this one; each "
                   "rank must be started once", pe->from, rank);
    if (their != build)
        net_reject(ctx, pe, "rank %d (from %s) comes from a different compile than rank 0 "
                   "(model '%s' vs '%s', or another plan or setting): run the rank executables "
                   "of one nnsc-aot output directory", rank, pe->from, model, ctx->man.model);
    if (n->c[rank].fd >= 0)
        net_reject(ctx, pe, "rank %d connected twice (from %s and from %s): each rank must be "
                   "started once", rank, n->from[rank], pe->from);
    n->c[rank].fd = pe->fd;
    snprintf(n->from[rank], sizeof n->from[rank], "%s", pe->from);
    pe->fd = -1;
    net_tune(n->c[rank].fd);
    return 1;
}

/* Rank 0: drop pending entry pe (closed, or not speaking this protocol);
 * one that had the challenge and left without its proof is said. */
static void net_pending_drop(rt_ctx *ctx, net_pending *pe)
{
    rt_net *n = ctx->net;
    if (pe->proving && n->refused++ < NET_REFUSALS)
        rt_warn(ctx, "a connection from %s claiming rank %d left before proving this job's secret "
                "(a rank of another job, which found that this is not its rank 0?); still waiting "
                "for this job's ranks%s", pe->from, (int)(int32_t)net_get32(pe->buf + NET_HDR + 12),
                n->refused == NET_REFUSALS ? " (further refusals are not shown)" : "");
    close(pe->fd);
    pe->fd = -1;
}

/* Rank 0: read what pending entry pe sent; returns 1 when a rank was admitted. */
static int net_pending_read(rt_ctx *ctx, net_pending *pe, uint64_t build)
{
    unsigned char *buf = pe->proving ? pe->proof : pe->buf;
    ssize_t got = recv(pe->fd, buf + pe->got, (size_t)(pe->want - pe->got), 0);
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return 0;
    if (got <= 0) {   /* closed before its hello or proof: not a rank (or it refused us) */
        net_pending_drop(ctx, pe);
        return 0;
    }
    pe->got += (int)got;
    if (pe->got < pe->want)
        return 0;
    if (pe->want == NET_HDR) {   /* a header: how long the frame is */
        net_hdr h = net_hdr_get(buf);
        int64_t most = pe->proving ? RT_SHA256_LEN : NET_HELLO;
        if ((pe->proving ? h.type != NET_T_PROOF : h.type != NET_T_HELLO) || h.len < 16 || h.len > most) {
            net_pending_drop(ctx, pe);   /* not a rank speaking this protocol (or it gave up) */
            return 0;
        }
        pe->want = NET_HDR + (int)h.len;
        return 0;
    }
    if (!pe->proving) {
        if (!net_challenge(ctx, pe) && pe->fd >= 0) {
            close(pe->fd);
            pe->fd = -1;
        }
        return 0;
    }
    return net_admit(ctx, pe, build);
}

/* Rank 0: accept connections, challenge them and read their proofs until
 * every peer is in, then welcome them all.  Ranks still missing at the
 * deadline are named. */
static void net_rendezvous_root(rt_ctx *ctx, uint64_t build)
{
    rt_net *n = ctx->net;
    int joined = 0;
    double deadline = rt_now() + ctx->timeout;
    n->lfd = net_listen(ctx, n);
    n->pend = calloc(NET_PENDING, sizeof *n->pend);
    struct pollfd *pf = calloc(NET_PENDING + 1, sizeof *pf);
    if (!n->pend || !pf)
        rt_fatal(ctx, 1, "out of memory");
    while (joined < n->world - 1) {
        double rem = deadline - rt_now();
        if (rem <= 0) {
            int o = 0, first = -1, missing = n->world - 1 - joined;
            o = snprintf(n->note, sizeof n->note, "rank%s ", missing > 1 ? "s" : "");
            for (int q = 1; q < n->world && o < (int)sizeof n->note - 40; q++)
                if (n->c[q].fd < 0) {
                    o += snprintf(n->note + o, sizeof n->note - (size_t)o, "%s%d",
                                  first < 0 ? "" : ", ", q);
                    first = first < 0 ? q : first;
                }
            snprintf(n->note + o, sizeof n->note - (size_t)o, " did not join the job within %g s",
                     ctx->timeout);
            net_fail(ctx, first, NET_MISSING, RT_COLL_INIT, "%s (rank 0 listens on %s; are "
                     "they running, with %s=%s, the same MASTER_PORT and the same job secret?)",
                     n->note, n->bound, n->addr_var, n->addr);
        }
        int np = 0;
        pf[np++] = (struct pollfd){n->lfd, POLLIN, 0};
        for (int k = 0; k < n->npend; k++)
            pf[np++] = (struct pollfd){n->pend[k].fd, POLLIN, 0};
        int r = poll(pf, (nfds_t)np, net_ms(rem < 1.0 ? rem : 1.0));
        if (r < 0 && errno != EINTR)
            rt_fatal(ctx, 1, "poll on the listening socket failed: %s", strerror(errno));
        if (r <= 0)
            continue;
        /* hellos and proofs first (pf[1..] are the entries as they were when polled) */
        for (int k = 0; k + 1 < np; k++)
            if (pf[k + 1].revents && n->pend[k].fd >= 0)
                joined += net_pending_read(ctx, &n->pend[k], build);
        int keep = 0;   /* compact */
        for (int k = 0; k < n->npend; k++)
            if (n->pend[k].fd >= 0)
                n->pend[keep++] = n->pend[k];
        n->npend = keep;
        /* then new connections */
        if (pf[0].revents) {
            for (;;) {
                struct sockaddr_storage sa;
                socklen_t sl = sizeof sa;
                int fd = accept4(n->lfd, (struct sockaddr *)&sa, &sl,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                    break;   /* EAGAIN: no more; other errors: the next round tries again */
                if (n->npend == NET_PENDING) {   /* full of silent connections: drop the oldest */
                    close(n->pend[0].fd);
                    memmove(n->pend, n->pend + 1, (NET_PENDING - 1) * sizeof *n->pend);
                    n->npend--;
                }
                net_pending *pe = &n->pend[n->npend++];
                memset(pe, 0, sizeof *pe);
                pe->fd = fd;
                pe->want = NET_HDR;
                net_addr_text((struct sockaddr *)&sa, sl, pe->from, sizeof pe->from);
            }
        }
    }
    free(pf);
    for (int k = 0; k < n->npend; k++)
        close(n->pend[k].fd);
    free(n->pend);
    n->pend = NULL;
    n->npend = 0;
    close(n->lfd);
    n->lfd = -1;
    for (int q = 1; q < n->world; q++)
        net_send(ctx, q, NET_T_WELCOME, RT_COLL_INIT, NULL, 0, rt_now() + ctx->timeout);
}

/* ---- rendezvous, the other ranks */

/* ---- rendezvous, the other ranks */

/* One attempt to connect to the master: each of its addresses in turn.
 * Returns the socket, or -1 with the last error in err. */
static int net_connect_once(rt_ctx *ctx, double deadline, char *err, size_t errlen)
{
    rt_net *n = ctx->net;
    char port[16];
    snprintf(port, sizeof port, "%d", n->port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(n->addr, port, &hints, &res);
    if (e == EAI_AGAIN || (e == EAI_SYSTEM && errno == EINTR)) {
        snprintf(err, errlen, "name lookup: %s", gai_strerror(e));
        return -1;
    }
    if (e)
        rt_fatal(ctx, 2, "%s '%s' is not a known host name or address: %s", n->addr_var, n->addr,
                 e == EAI_SYSTEM ? strerror(errno) : gai_strerror(e));
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    ai->ai_protocol);
        if (fd < 0) {
            snprintf(err, errlen, "%s", strerror(errno));
            continue;
        }
        int r = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (r != 0 && errno == EINPROGRESS) {
            int soerr = ETIMEDOUT;
            socklen_t sl = sizeof soerr;
            if (net_wait_fd(fd, POLLOUT, deadline))
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
            errno = soerr;
            r = soerr ? -1 : 0;
        }
        if (r != 0) {
            snprintf(err, errlen, "%s", strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

/* A rank other than 0: connect (retrying with backoff until the timeout),
 * say hello, wait for rank 0's welcome. */

/* A rank other than 0: connect (retrying with backoff until the timeout),
 * say hello, check rank 0's proof of the secret, give this rank's, wait
 * for rank 0's welcome. */
static void net_rendezvous_peer(rt_ctx *ctx, uint64_t build)
{
    rt_net *n = ctx->net;
    double start = rt_now(), deadline = start + ctx->timeout, backoff = 0.01;
    char err[160] = "no attempt finished";
    int fd;
    while ((fd = net_connect_once(ctx, deadline, err, sizeof err)) < 0) {
        if (rt_now() + backoff > deadline)
            rt_fatal(ctx, 1, "no rendezvous with %s:%d after %g s (is rank 0 running? same "
                     "MASTER_PORT on every rank?); last attempt: %s", n->addr, n->port,
                     ctx->timeout, err);
        net_sleep(backoff);
        backoff = backoff * 2 < 1.0 ? backoff * 2 : 1.0;
    }
    net_tune(fd);
    n->c[0].fd = fd;
    unsigned char hello[NET_HELLO] = {0};
    net_put64(hello, NET_MAGIC);
    net_put32(hello + 8, NET_VERSION);
    net_put32(hello + 12, (uint32_t)ctx->rank);
    net_put32(hello + 16, (uint32_t)ctx->world);
    net_put64(hello + 24, build);
    memcpy(hello + 32, ctx->man.model, strnlen(ctx->man.model, NET_MODEL));
    rt_random(ctx, hello + NET_HELLO_NONCE, RT_NONCE_LEN);
    net_send(ctx, 0, NET_T_HELLO, RT_COLL_INIT, hello, NET_HELLO, rt_now() + ctx->timeout);
    /* rank 0's challenge: its nonce and its proof; then ours */
    double wait = rt_now() + net_span(ctx);
    net_hdr h;
    while (!net_next(ctx, 0, &h, &n->rx, &wait, RT_COLL_INIT, 0)) {
    }
    if (h.type == NET_T_REJECT)
        rt_fatal(ctx, 2, "rank 0 (at %s:%d) refused this rank: %s", n->addr, n->port,
                 n->rx ? (char *)n->rx : "");
    unsigned char want[RT_SHA256_LEN], proof[RT_SHA256_LEN];
    if (h.type != NET_T_CHALLENGE || h.len != NET_CHALLENGE)
        rt_fatal(ctx, 1, "unexpected control message (type %u) from rank 0 during startup", h.type);
    net_tag(n, "nnsc-net rank 0", hello, n->rx, want);
    if (!rt_ct_equal(want, n->rx + RT_NONCE_LEN, RT_SHA256_LEN))
        rt_fatal(ctx, 2, "the process listening at %s:%d is not this job's rank 0: it does not know "
                 "this job's secret (%s), so this rank does not join it (another job using the same "
                 "MASTER_ADDR:MASTER_PORT, or ranks started with different NNSC_SECRET / "
                 "NNSC_SECRET_FILE)  hint: give each job its own MASTER_PORT and one secret for all "
                 "its ranks", n->addr, n->port, n->secret.from);
    net_tag(n, "nnsc-net peer", hello, n->rx, proof);
    free(n->rx);
    n->rx = NULL;
    net_send(ctx, 0, NET_T_PROOF, RT_COLL_INIT, proof, RT_SHA256_LEN, rt_now() + ctx->timeout);
    /* rank 0 answers when every rank is in, or says who is missing */
    wait = rt_now() + net_span(ctx);
    while (!net_next(ctx, 0, &h, &n->rx, &wait, RT_COLL_INIT, 0)) {
    }
    if (h.type == NET_T_REJECT)
        rt_fatal(ctx, 2, "rank 0 (at %s:%d) refused this rank: %s", n->addr, n->port,
                 n->rx ? (char *)n->rx : "");
    free(n->rx);
    n->rx = NULL;
    if (h.type != NET_T_WELCOME)
        rt_fatal(ctx, 1, "unexpected control message (type %u) from rank 0 during startup",
                 h.type);
}

/* ---- the interface */

void rt_net_init(rt_ctx *ctx)
{
    RT_ASSERT(ctx->world > 1 && !ctx->net);
    rt_net *n = calloc(1, sizeof *n);
    if (!n)
        rt_fatal(ctx, 1, "out of memory");
    n->rank = ctx->rank;
    n->world = ctx->world;
    n->nc = ctx->rank == 0 ? ctx->world : 1;
    n->lfd = -1;
    n->wake[0] = n->wake[1] = -1;
    n->c = calloc((size_t)n->nc, sizeof *n->c);
    n->from = calloc((size_t)n->nc, sizeof *n->from);
    n->pf = calloc((size_t)n->nc, sizeof *n->pf);
    n->who = calloc((size_t)n->nc, sizeof *n->who);
    n->got = calloc((size_t)n->nc, 1);
    n->bufs = calloc((size_t)n->nc, sizeof *n->bufs);
    n->lens = calloc((size_t)n->nc, sizeof *n->lens);
    if (!n->c || !n->from || !n->pf || !n->who || !n->got || !n->bufs || !n->lens)
        rt_fatal(ctx, 1, "out of memory");
    for (int k = 0; k < n->nc; k++)
        n->c[k].fd = -1;
    pthread_mutex_init(&n->own, NULL);
    ctx->net = n;   /* from here on a failure closes what is open and tells the peers */
    ctx->on_fatal = rt_comm_abort;
    net_read_env(ctx, n);
    if (!rt_job_secret(ctx, &n->secret))
        rt_fatal(ctx, 2, NET_NO_SECRET);
    uint64_t build = net_build_hash(&ctx->man);
    if (ctx->rank == 0)
        net_rendezvous_root(ctx, build);
    else
        net_rendezvous_peer(ctx, build);
    rt_secret_wipe(&n->secret);   /* proven: not needed any more */
    net_dog_start(ctx);
}

void rt_net_free(rt_ctx *ctx, int failed)
{
    rt_net *n = ctx->net;
    if (!n)
        return;
    ctx->net = NULL;   /* nothing below comes back here */
    net_dog_stop(n);
    unsigned char ab[NET_HDR + NET_ABORT + NET_NOTE];
    size_t al = 0;
    if (failed) {
        /* what this rank tells the others: the failure net.c found, else its own */
        if (n->how)
            al = net_abort_frame(ab, n->seq, n->culprit, n->how, n->what, n->note);
        else
            al = net_abort_frame(ab, n->seq, n->rank, NET_FAILED, -1, "");
    }
    double drain = failed ? 1.0 : ctx->timeout < 10 ? ctx->timeout : 10;
    net_close_all(n, failed ? ab : NULL, al, drain);
    if (n->lfd >= 0)
        close(n->lfd);
    for (int k = 0; k < n->npend; k++)
        close(n->pend[k].fd);
    if (n->wake[0] >= 0) {
        close(n->wake[0]);
        close(n->wake[1]);
    }
    pthread_mutex_destroy(&n->own);
    net_gather_free(n);   /* what a failed collective had collected or was sending */
    free(n->rx);
    free(n->reply);
    free(n->pf);
    free(n->who);
    free(n->got);
    free(n->bufs);
    free(n->lens);
    free(n->pend);
    free(n->from);
    free(n->c);
    rt_secret_wipe(&n->secret);
    free(n);
}

void rt_net_barrier(rt_ctx *ctx, rt_coll what)
{
    if (!ctx->net)
        return;
    if (what == RT_COLL_FINISH)   /* peers close once this barrier is passed: no alarms */
        net_dog_stop(ctx->net);
    rt_net *n = net_begin(ctx);
    if (n->rank == 0) {
        net_gather(ctx, what);
        net_gather_free(n);
        for (int q = 1; q < n->world; q++)
            net_send_data(ctx, q, what, NULL, 0);
    } else {
        int64_t len;
        net_send_data(ctx, 0, what, NULL, 0);
        free(net_recv_data(ctx, 0, what, &len));
    }
    net_end(n);
}

void rt_net_broadcast(rt_ctx *ctx, void *buf, int64_t bytes, int root)
{
    const int what = RT_COLL_BROADCAST;
    if (root < 0 || root >= ctx->world)
        rt_fatal(ctx, 1, "broadcast from rank %d, but the world has %d ranks", root, ctx->world);
    if (!ctx->net || bytes <= 0)
        return;
    rt_net *n = net_begin(ctx);
    if (n->rank == root) {
        if (root == 0)
            for (int q = 1; q < n->world; q++)
                net_send_data(ctx, q, what, buf, bytes);
        else
            net_send_data(ctx, 0, what, buf, bytes);
    } else {
        /* rank 0 takes it from the root and passes it on; the others take it from rank 0 */
        int from = n->rank == 0 ? root : 0;
        int64_t len;
        unsigned char *p = net_recv_data(ctx, from, what, &len);
        if (len != bytes) {
            free(p);
            rt_fatal(ctx, 1, "broadcast of %lld bytes from rank %d, but this rank expects %lld",
                     (long long)len, root, (long long)bytes);
        }
        memcpy(buf, p, (size_t)bytes);
        free(p);
        if (n->rank == 0)
            for (int q = 1; q < n->world; q++)
                if (q != root)
                    net_send_data(ctx, q, what, buf, bytes);
    }
    net_end(n);
}

int rt_net_any(rt_ctx *ctx, int flag, rt_coll what)
{
    unsigned char f = flag != 0;
    if (!ctx->net)
        return f;
    rt_net *n = net_begin(ctx);
    if (n->rank == 0) {
        net_gather(ctx, what);
        for (int q = 1; q < n->world; q++) {
            if (n->lens[q] != 1)
                rt_fatal(ctx, 1, "rank %d sent %lld bytes in %s, not a flag", q,
                         (long long)n->lens[q], net_coll_name(what));
            f |= n->bufs[q][0] != 0;
        }
        net_gather_free(n);
        for (int q = 1; q < n->world; q++)
            net_send_data(ctx, q, what, &f, 1);
    } else {
        int64_t len;
        net_send_data(ctx, 0, what, &f, 1);
        unsigned char *p = net_recv_data(ctx, 0, what, &len);
        if (len != 1) {
            free(p);
            rt_fatal(ctx, 1, "rank 0 answered %s with %lld bytes, not a flag",
                     net_coll_name(what), (long long)len);
        }
        f = p[0] != 0;
        free(p);
    }
    net_end(n);
    return f;
}

char *rt_net_allgatherv_bytes(rt_ctx *ctx, const void *mine, int64_t len, int64_t *lens)
{
    const int what = NET_WHAT_BYTES;
    int w = ctx->world;
    char *all;
    if (!ctx->net) {   /* one rank */
        for (int r = 0; r < w; r++)
            lens[r] = r == ctx->rank ? len : 0;
        all = malloc((size_t)len + 1);
        if (!all)
            rt_fatal(ctx, 1, "out of memory");
        if (len > 0)
            memcpy(all, mine, (size_t)len);
        all[len] = 0;
        return all;
    }
    rt_net *n = net_begin(ctx);
    if (n->rank == 0) {
        /* the answer: every rank's length (8 bytes each), then the blobs in rank order */
        net_gather(ctx, what);
        memcpy(lens, n->lens, (size_t)w * sizeof *lens);
        lens[0] = len;
        int64_t total = 0;
        for (int r = 0; r < w; r++)
            total += lens[r];
        int64_t head = 8 * (int64_t)w;
        unsigned char *msg = n->reply = malloc((size_t)(head + total) + 1);
        if (!msg)
            rt_fatal(ctx, 1, "out of memory");
        int64_t at = head;
        for (int r = 0; r < w; r++) {
            net_put64(msg + 8 * r, (uint64_t)lens[r]);
            if (lens[r] > 0)
                memcpy(msg + at, r == 0 ? mine : n->bufs[r], (size_t)lens[r]);
            at += lens[r];
        }
        net_gather_free(n);
        for (int q = 1; q < w; q++)
            net_send_data(ctx, q, what, msg, head + total);
        all = malloc((size_t)total + 1);
        if (!all)
            rt_fatal(ctx, 1, "out of memory");
        memcpy(all, msg + head, (size_t)total);
        all[total] = 0;
        free(msg);
        n->reply = NULL;
    } else {
        int64_t got;
        net_send_data(ctx, 0, what, mine, len);
        unsigned char *msg = net_recv_data(ctx, 0, what, &got);
        int64_t head = 8 * (int64_t)w, total = 0;
        int ok = got >= head;
        for (int r = 0; ok && r < w; r++) {
            lens[r] = (int64_t)net_get64(msg + 8 * r);
            ok = lens[r] >= 0 && lens[r] <= got - head - total;
            total += ok ? lens[r] : 0;
        }
        if (!ok || head + total != got || lens[n->rank] != len) {
            free(msg);
            rt_fatal(ctx, 1, "rank 0's answer to the byte allgather is malformed (%lld bytes)",
                     (long long)got);
        }
        all = malloc((size_t)total + 1);
        if (!all)
            rt_fatal(ctx, 1, "out of memory");
        if (total > 0)
            memcpy(all, msg + head, (size_t)total);
        all[total] = 0;
        free(msg);
    }
    net_end(n);
    return all;
}

void rt_net_beat(rt_ctx *ctx)
{
    rt_net *n = ctx ? ctx->net : NULL;
    if (!n || pthread_mutex_trylock(&n->own) != 0)
        return;   /* no connections, or the watchdog is stopping the rank */
    net_beat_all(n, -1);
    pthread_mutex_unlock(&n->own);
}
