/* pool.c -- the rank's threads: a persistent fork-join pool.
 *
 * A rank runs its kernels on N threads: the thread that calls the kernels
 * (main) is thread 0, and N - 1 workers are created once, by rt_init
 * (rt_pool_init), and live until rt_finish.  rt_parallel(task, arg, want)
 * runs task(arg, t, nt) on threads t = 0 .. nt-1, nt = min(want, N), and
 * returns when all have finished.  A kernel splits its work by t itself,
 * statically (rt_split), so its results depend on nt and the inputs only.
 * Nothing is allocated per call.
 *
 * A worker waits for the next job by spinning on the job counter for
 * RT_POOL_SPIN_S seconds (kernels of a training step follow each other within
 * microseconds) and then sleeps on a condition variable; the caller wakes
 * sleepers only when there are any.  Every thread owns a scratch block
 * (rt_scratch: matmul's pack buffers, attention's tiles), allocated with the
 * pool on huge pages; without a pool (tests) thread 0 uses a static one.
 *
 * Regions do not nest: a task must not call rt_parallel (kernels call the
 * single-threaded pieces, e.g. rt_gemm, from inside their tasks).  A forked
 * child has no workers; an atfork handler makes its pool single-threaded.
 */
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/rt_cpu.h"

#define RT_POOL_SPIN_S 2e-4   /* how long an idle worker spins before it sleeps */

/* The pool (one per process). */
typedef struct rt_pool {
    int n;                      /* threads in all, the caller included (1: no workers) */
    pthread_t *th;              /* workers: th[t] for t = 1 .. n-1 */
    float **scratch;            /* scratch of threads 0 .. n-1 (rt_big_alloc) */
    rt_task *task;              /* the current job ... */
    void *arg;                  /* ... its argument ... */
    int nt;                     /* ... and how many threads take part */
    atomic_ullong gen;          /* job counter: a new value means a new job (or stop) */
    atomic_int left;            /* workers that have not finished the current job */
    atomic_int sleepers;        /* workers blocked on wake */
    atomic_int stop;            /* 1: workers exit at the next job */
    pthread_mutex_t mu;         /* guards sleeping */
    pthread_cond_t wake;        /* sleepers wait here for gen to change */
} rt_pool;

static rt_pool pool = {.n = 1};

/* Regions run on more than one thread so far (for tests and benchmarks). */
static int64_t pool_split_regions;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

/* 1 while thread 0 is inside a region (nesting check). */
static _Thread_local int pool_in_region;

/* The scratch of thread 0 when no pool was started (tests); static so that
 * kernels run without rt_init. */
static float pool_scratch0[RT_SCRATCH_FLOATS] __attribute__((aligned(64)));

/* A failed pthread call: the runtime cannot go on. */
#define PT_CHECK(call) \
    do { int rc_ = (call); if (rc_) rt_pthread_fail(#call, rc_); } while (0)

/* Report a failed pthread call and exit 1. */
static void __attribute__((noreturn)) rt_pthread_fail(const char *what, int rc)
{
    rt_fatal(NULL, 1, "%s failed: %s", what, strerror(rc));
}

/* In a forked child: the workers do not exist there; run single-threaded. */
static void rt_pool_atfork_child(void)
{
    pool.n = 1;
    pool.th = NULL;        /* the parent's memory, left alone */
    pool.scratch = NULL;
    pool_in_region = 0;
    atomic_store(&pool.sleepers, 0);
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.wake, NULL);
}

/* One-time setup: the lock, the condition and the fork handler. */
static void rt_pool_once(void)
{
    PT_CHECK(pthread_mutex_init(&pool.mu, NULL));
    PT_CHECK(pthread_cond_init(&pool.wake, NULL));
    PT_CHECK(pthread_atfork(NULL, NULL, rt_pool_atfork_child));
}

/* Spin hint for busy-wait loops. */
static inline void rt_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Wait until the job counter differs from seen; returns the new value. */
static unsigned long long rt_pool_wait_job(unsigned long long seen)
{
    double t0 = rt_now();
    for (int k = 1;; k++) {
        unsigned long long g = atomic_load_explicit(&pool.gen, memory_order_acquire);
        if (g != seen)
            return g;
        rt_pause();
        if (k % 256 == 0 && rt_now() - t0 > RT_POOL_SPIN_S)
            break;
    }
    pthread_mutex_lock(&pool.mu);
    atomic_fetch_add(&pool.sleepers, 1);   /* seq_cst: pairs with rt_parallel's check */
    unsigned long long g;
    while ((g = atomic_load(&pool.gen)) == seen)
        pthread_cond_wait(&pool.wake, &pool.mu);
    atomic_fetch_sub(&pool.sleepers, 1);
    pthread_mutex_unlock(&pool.mu);
    return g;
}

/* The process's CPUs, as they were before the pool pinned anything. */
static cpu_set_t pool_mask;
static int pool_mask_saved;
/* cpu[t]: the CPU thread t is pinned to, or -1 (not pinned). */
static int pool_cpu[RT_MAX_THREADS];

/* Pin the calling thread to CPU c (c < 0: back to the whole saved mask). */
static void rt_pool_pin(int c)
{
    cpu_set_t one;
    if (c < 0) {
        pthread_setaffinity_np(pthread_self(), sizeof pool_mask, &pool_mask);
        return;
    }
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);   /* best effort */
}

/* Choose pool_cpu for n threads: thread t on the t-th CPU of the mask when
 * the mask has exactly n CPUs (the rank owns them), or when $NNSC_PIN=1 and
 * it has at least n; never when $NNSC_PIN=0; else the scheduler places the
 * threads. */
static void rt_pool_place(int n)
{
    const char *e = getenv("NNSC_PIN");
    int have = CPU_COUNT(&pool_mask);
    int pin = e && !strcmp(e, "1") ? have >= n : e && !strcmp(e, "0") ? 0 : have == n;
    for (int c = 0, t = 0; t < n; t++) {
        while (pin && c < CPU_SETSIZE && !CPU_ISSET(c, &pool_mask))
            c++;
        pool_cpu[t] = pin && c < CPU_SETSIZE ? c++ : -1;
    }
}

/* A worker: run thread t's part of every job until told to stop. */
static void *rt_pool_worker(void *p)
{
    int t = (int)(intptr_t)p;
    unsigned long long seen = 0;   /* the counter is 0 when the pool starts */
    pool_in_region = 1;            /* a task on a worker must not start a region */
    if (pool_cpu[t] >= 0)
        rt_pool_pin(pool_cpu[t]);
    for (;;) {
        seen = rt_pool_wait_job(seen);
        if (atomic_load_explicit(&pool.stop, memory_order_relaxed))
            return NULL;
        if (t < pool.nt)
            pool.task(pool.arg, t, pool.nt);
        atomic_fetch_sub_explicit(&pool.left, 1, memory_order_acq_rel);
    }
}

/* Publish a new job value and wake sleeping workers. */
static void rt_pool_kick(void)
{
    atomic_fetch_add(&pool.gen, 1);   /* seq_cst: the job fields are visible to acquirers */
    if (atomic_load(&pool.sleepers)) {
        pthread_mutex_lock(&pool.mu);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.mu);
    }
}

void rt_pool_init(int n)
{
    pthread_once(&pool_once, rt_pool_once);
    rt_pool_free();
    RT_ASSERT(n >= 1 && n <= RT_MAX_THREADS);
    rt_isa_ready();   /* choose the kernels now, not racing inside a region */
    if (!pool_mask_saved) {
        if (sched_getaffinity(0, sizeof pool_mask, &pool_mask) != 0) {
            CPU_ZERO(&pool_mask);   /* unknown: never pin */
        }
        pool_mask_saved = 1;
    }
    rt_pool_place(n);
    pool.th = calloc((size_t)n, sizeof *pool.th);
    pool.scratch = calloc((size_t)n, sizeof *pool.scratch);
    if (!pool.th || !pool.scratch)
        rt_fatal(NULL, 1, "out of memory for %d threads", n);
    for (int t = 0; t < n; t++) {
        pool.scratch[t] = rt_big_alloc(sizeof(float) * RT_SCRATCH_FLOATS);
        if (!pool.scratch[t])
            rt_fatal(NULL, 1, "out of memory for the scratch of %d threads", n);
    }
    if (n == 1) {
        if (pool_cpu[0] >= 0)
            rt_pool_pin(pool_cpu[0]);
        pool.n = 1;
        return;
    }
    atomic_store(&pool.gen, 0);
    atomic_store(&pool.stop, 0);
    atomic_store(&pool.left, 0);
    for (int t = 1; t < n; t++)
        PT_CHECK(pthread_create(&pool.th[t], NULL, rt_pool_worker, (void *)(intptr_t)t));
    if (pool_cpu[0] >= 0)
        rt_pool_pin(pool_cpu[0]);
    pool.n = n;
}

void rt_pool_free(void)
{
    if (pool.n > 1) {
        atomic_store(&pool.stop, 1);
        rt_pool_kick();
        for (int t = 1; t < pool.n; t++)
            PT_CHECK(pthread_join(pool.th[t], NULL));
    }
    for (int t = 0; pool.scratch && t < pool.n; t++)
        rt_big_free(pool.scratch[t], sizeof(float) * RT_SCRATCH_FLOATS);
    free(pool.th);
    free(pool.scratch);
    pool.th = NULL;
    pool.scratch = NULL;
    pool.n = 1;
    if (pool_mask_saved && pool_cpu[0] >= 0) {
        rt_pool_pin(-1);   /* the caller may run anywhere again */
        pool_cpu[0] = -1;
    }
}

int rt_pool_size(void)
{
    return pool.n;
}

int64_t rt_pool_split_regions(void)
{
    return pool_split_regions;
}

float *rt_scratch(int t)
{
    RT_ASSERT(t >= 0 && t < pool.n);
    return pool.scratch ? pool.scratch[t] : pool_scratch0;
}

void rt_parallel(rt_task *task, void *arg, int want)
{
    int nt = want < pool.n ? want : pool.n;
    RT_ASSERT(!pool_in_region);   /* regions do not nest */
    if (nt <= 1) {
        task(arg, 0, 1);
        return;
    }
    rt_isa_ready();   /* kernels chosen here, not by racing threads */
    pool_split_regions++;
    pool.task = task;
    pool.arg = arg;
    pool.nt = nt;
    atomic_store_explicit(&pool.left, pool.n - 1, memory_order_relaxed);
    rt_pool_kick();
    pool_in_region = 1;
    task(arg, 0, nt);
    pool_in_region = 0;
    for (int k = 1; atomic_load_explicit(&pool.left, memory_order_acquire); k++) {
        rt_pause();
        if (k % 1024 == 0)
            sched_yield();   /* a worker may have lost its core */
    }
}

void rt_split(int64_t n, int t, int nt, int64_t unit, int64_t *lo, int64_t *hi)
{
    int64_t units = (n + unit - 1) / unit;
    int64_t a = units * t / nt, b = units * (t + 1) / nt;
    *lo = a * unit < n ? a * unit : n;
    *hi = b * unit < n ? b * unit : n;
}

int rt_threads_for(int64_t work, int64_t grain)
{
    int64_t n = grain > 0 ? work / grain : work;
    if (n < 1)
        return 1;
    return n < pool.n ? (int)n : pool.n;
}

/* Arguments of rt_parallel_for's task. */
typedef struct rt_for_arg {
    rt_range_fn *fn;        /* body over [lo, hi) */
    const void *arg;        /* its argument */
    int64_t n, unit;        /* range and split granularity */
} rt_for_arg;

/* Thread t's share of an rt_parallel_for. */
static void rt_for_task(void *p, int t, int nt)
{
    const rt_for_arg *a = p;
    int64_t lo, hi;
    rt_split(a->n, t, nt, a->unit, &lo, &hi);
    if (lo < hi)
        a->fn(a->arg, lo, hi, t);
}

void rt_parallel_for(rt_range_fn *fn, const void *arg, int64_t n, int64_t unit, int64_t grain)
{
    if (n <= 0)
        return;
    rt_for_arg a = {fn, arg, n, unit};
    rt_parallel(rt_for_task, &a, rt_threads_for(n, grain));
}

int rt_default_threads(int world)
{
    cpu_set_t set;
    int ncpu = pool_mask_saved ? CPU_COUNT(&pool_mask)
               : sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    if (ncpu < 1)
        ncpu = 1;
    int local = world;
    const char *e = getenv("NNSC_LOCAL_WORLD");
    if (e && *e) {
        char *end;
        long v = strtol(e, &end, 10);
        if (*end || v < 1)
            rt_fatal(NULL, 2, "NNSC_LOCAL_WORLD needs a positive integer, not '%s'", e);
        local = (int)(v < INT32_MAX ? v : INT32_MAX);
    }
    int n = ncpu / (local > 0 ? local : 1);
    if (n > RT_MAX_THREADS)
        n = RT_MAX_THREADS;
    return n < 1 ? 1 : n;
}
