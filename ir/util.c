/* util.c -- allocation, growable arrays, checked arithmetic and text buffers
 * shared by every layer of the compiler. */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ir.h"

#define IR_GROW_BIG ((size_t)64 << 20)   /* new space this large is zeroed by the kernel (ir_zero) */
#define IR_HUGE ((uintptr_t)2 << 20)      /* a transparent huge page */

/* The innermost recovery point pushed in this thread, or NULL: ir_die aborts. */
static _Thread_local ir_recover *recover_top;

void ir_recover_push(ir_recover *r)
{
    r->prev = recover_top;
    r->msg[0] = '\0';
    recover_top = r;
}

void ir_recover_pop(ir_recover *r)
{
    if (recover_top == r) recover_top = r->prev;
}

/* __FILE__ as the repository names it ("passes/comm.c"): the last two parts
 * of the path, so that a message kept in plan.txt does not name the build's
 * directory (outputs are the same wherever the compiler was built). */
static const char *src_name(const char *file)
{
    const char *a = NULL, *b = NULL;
    for (const char *p = file; *p; p++)
        if (*p == '/') a = b, b = p;
    return a ? a + 1 : file;
}

/* Report a broken invariant with its source location and abort; where this
 * thread has a recovery point (ir_recover_push), the message goes there and
 * ir_die returns to it instead. */
_Noreturn void ir_die(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    ir_recover *r = recover_top;
    if (r) {
        recover_top = r->prev;   /* (popped first: a second ir_die while it unwinds goes to the next) */
        int n = snprintf(r->msg, sizeof r->msg, "%s:%d: ", src_name(file), line);
        va_start(ap, fmt);
        if (n >= 0 && (size_t)n < sizeof r->msg) vsnprintf(r->msg + n, sizeof r->msg - (size_t)n, fmt, ap);
        va_end(ap);
        longjmp(r->jb, 1);
    }
    fprintf(stderr, "%s:%d: internal error: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

void *ir_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) ir_die(__FILE__, __LINE__, "out of memory (%zu bytes)", n);
    return p;
}

void *ir_xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) ir_die(__FILE__, __LINE__, "out of memory (%zu x %zu bytes)", n, sz);
    return p;
}

void *ir_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) ir_die(__FILE__, __LINE__, "out of memory (%zu bytes)", n);
    return q;
}

char *ir_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = ir_xmalloc(n);
    memcpy(p, s, n);
    return p;
}

/* Zero n bytes at q.  A large span's whole pages are handed back to the
 * kernel instead (madvise MADV_DONTNEED: private anonymous memory, as
 * malloc's is, then reads as zeros), so that they fault in only when used,
 * and it asks for huge pages there (a fault per 2 MiB); only the partial
 * pages at the ends are cleared by memset. */
static void ir_zero(char *q, size_t n)
{
#if defined(MADV_DONTNEED) && defined(MADV_HUGEPAGE)
    if (n >= IR_GROW_BIG) {
        uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t a = ((uintptr_t)q + pg - 1) & ~(pg - 1), e = ((uintptr_t)q + n) & ~(pg - 1);
        if (pg && e > a && madvise((void *)a, e - a, MADV_DONTNEED) == 0) {
            memset(q, 0, a - (uintptr_t)q);
            memset((void *)e, 0, (uintptr_t)q + n - e);
            uintptr_t ha = (a + IR_HUGE - 1) & ~(IR_HUGE - 1), he = e & ~(IR_HUGE - 1);
            if (he > ha) madvise((void *)ha, he - ha, MADV_HUGEPAGE);   /* (advice: a failure changes nothing) */
            return;
        }
    }
#endif
    memset(q, 0, n);
}

/* Grow an array to at least n elements, doubling; new space is zeroed
 * (ir_zero: a large array's new pages are not touched until used, where a
 * memset would fault in at once the half that a graph of a million ops
 * did not use yet). */
void ir_grow(void **p, int *cap, int n, size_t sz)
{
    if (n <= *cap) return;
    int nc = *cap ? *cap : 8;
    while (nc < n) {
        if (nc > (1 << 29)) ir_die(__FILE__, __LINE__, "array too large");
        nc *= 2;
    }
    size_t old = (size_t)*cap * sz, bytes = (size_t)nc * sz;
    *p = ir_xrealloc(*p, bytes);
    ir_zero((char *)*p + old, bytes - old);
    *cap = nc;
}

int ir_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int ir_mul_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_mul_overflow(a, b, r); }
int ir_add_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_add_overflow(a, b, r); }

/* Append formatted text to a buffer: formatted once into the room left,
 * and again only when it did not fit (dumps, manifests and notes are made
 * of millions of short pieces). */
void ir_bprintf(ir_buf *b, const char *fmt, ...)
{
    if (b->cap - b->n < 64) {
        size_t nc = b->cap ? 2 * b->cap : 256;
        b->s = ir_xrealloc(b->s, nc);
        b->cap = nc;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    IR_ASSERT(n >= 0);
    if (b->n + (size_t)n + 1 > b->cap) {
        size_t nc = 2 * b->cap;
        while (nc < b->n + (size_t)n + 1) nc *= 2;
        b->s = ir_xrealloc(b->s, nc);
        b->cap = nc;
        va_start(ap, fmt);
        vsnprintf(b->s + b->n, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    b->n += (size_t)n;
}

void ir_buf_free(ir_buf *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}

void ir_bprint_bytes(ir_buf *b, double bytes)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    if (u == 0) ir_bprintf(b, "%.0f B", bytes);
    else ir_bprintf(b, "%.*f %s", bytes < 10 ? 2 : 1, bytes, unit[u]);
}
