/* sys.c -- what every layer of rtlib uses: the clock, messages and fatal
 * errors, big zeroed blocks, opening the files a user names.
 *
 * Every message goes out with one write(2) (rt_fatal, rt_warn, rt_out): the
 * ranks of a job share a terminal or a pipe (out/launch filters their
 * stderr line by line), and a line written in pieces would mix with the
 * lines of the others.  rt_fatal calls ctx->on_fatal first, which the
 * layers above set (comm: tell the peers; cuda: abort NCCL too).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/rt_base.h"

double rt_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void rt_write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;   /* nowhere to report it: the message is lost, not the run */
        buf += n;
        len -= (size_t)n;
    }
}

#define RT_LINE_MAX 4096   /* a message line: PIPE_BUF, so a pipe takes it whole */

/* "rank R: " (or "nnsc: ") + fmt + "\n" into one buffer, then one write to
 * stderr: lines of several ranks sharing a terminal or a pipe never mix. */
static void rt_vline(const rt_ctx *ctx, const char *fmt, va_list ap)
{
    char line[RT_LINE_MAX];
    int at = ctx && ctx->rank >= 0 ? snprintf(line, sizeof line, "rank %d: ", ctx->rank)
                                   : snprintf(line, sizeof line, "nnsc: ");
    int n = vsnprintf(line + at, sizeof line - (size_t)at, fmt, ap);
    size_t len = (size_t)at + (n < 0 ? 0 : (size_t)n);
    if (len > sizeof line - 2) {   /* cut: end with "..." */
        len = sizeof line - 2;
        memcpy(line + len - 3, "...", 3);
    }
    line[len++] = '\n';
    fflush(stdout);   /* what rank 0 logged so far comes first */
    fflush(stderr);
    rt_write_all(fileno(stderr), line, len);
}

void rt_warn(const rt_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rt_vline(ctx, fmt, ap);
    va_end(ap);
}

void rt_out(const char *fmt, ...)
{
    char text[16384];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    fflush(stdout);
    rt_write_all(fileno(stdout), text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
}

void rt_fatal(rt_ctx *ctx, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rt_vline(ctx, fmt, ap);
    va_end(ap);
    if (ctx && ctx->on_fatal)
        ctx->on_fatal(ctx);   /* the layers above: tell peers, stop collectives */
    exit(code);
}

void rt_watch_launcher(rt_ctx *ctx)
{
    if (!ctx->launched)
        return;
    /* the launcher's pid: launch gives it, else the parent before the prctl */
    const char *e = getenv("NNSC_LAUNCH_PID");
    char *end;
    long want = e && *e ? strtol(e, &end, 10) : 0;
    if (!e || !*e || *end || want <= 1)
        want = (long)getppid();
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        rt_warn(ctx, "cannot ask to end with the launcher (prctl: %s): if it is killed, stop "
                "this rank by hand", strerror(errno));
    /* it may have died before the prctl took effect: then no signal comes.
       A parent other than the launcher (a wrapper it started) is watched
       instead while the launcher lives. */
    if ((long)getppid() != want && kill((pid_t)want, 0) != 0 && errno == ESRCH)
        rt_fatal(ctx, 1, "the launcher (pid %ld) is gone: not starting", want);
}

void rt_assert_fail(const char *file, int line, const char *what)
{
    rt_warn(NULL, "%s:%d: rtlib internal error: %s", file, line, what);
    abort();
}

#define RT_HUGE (2u << 20)   /* huge page size (x86-64) */

/* Round bytes up to whole huge pages. */
static size_t rt_huge_round(size_t bytes)
{
    return (bytes + RT_HUGE - 1) / RT_HUGE * RT_HUGE;
}

void *rt_big_alloc(size_t bytes)
{
    size_t len = rt_huge_round(bytes ? bytes : 1);
    char *raw = mmap(NULL, len + RT_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    char *p = (char *)(((uintptr_t)raw + RT_HUGE - 1) / RT_HUGE * RT_HUGE);
    if (p > raw)
        munmap(raw, (size_t)(p - raw));   /* the unaligned head ... */
    if (p + len < raw + len + RT_HUGE)
        munmap(p + len, (size_t)(raw + len + RT_HUGE - (p + len)));   /* ... and tail */
#ifdef MADV_HUGEPAGE
    madvise(p, len, MADV_HUGEPAGE);   /* a hint: without it, 4 KiB pages */
#endif
    return p;
}

void rt_big_free(void *p, size_t bytes)
{
    if (p)
        munmap(p, rt_huge_round(bytes ? bytes : 1));
}


/* What a file that is not a regular file is, for messages. */
static const char *rt_file_kind(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO (named pipe)"
         : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

int rt_open_file(const char *path, int flags, int stream_ok, char *why, size_t len)
{
    int writing = (flags & O_ACCMODE) != O_RDONLY;
    /* O_NONBLOCK: opening a FIFO waits for its other end, forever and outside
       any timeout; so open without waiting and look at what it is first */
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        if (writing && e == ENXIO) {   /* a FIFO that nobody reads (open(2)) */
            snprintf(why, len, "a FIFO (named pipe) with no process reading it: writing "
                               "would block");
            return -2;
        }
        snprintf(why, len, "%s", strerror(e));
        errno = e;
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        snprintf(why, len, "%s", strerror(e));
        close(fd);
        errno = e;
        return -1;
    }
    int ok = S_ISREG(st.st_mode) ||
             (stream_ok && writing && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)));
    if (!ok) {
        snprintf(why, len, "%s, not a regular file", rt_file_kind(st.st_mode));
        close(fd);
        return -2;
    }
    int fl = fcntl(fd, F_GETFL);   /* from here on reads and writes wait as usual */
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        snprintf(why, len, "%s", strerror(e));
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}
