/* util.c -- allocation, growable arrays, checked arithmetic and text buffers
 * shared by every layer of the compiler. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* Report a broken invariant with its source location and abort. */
_Noreturn void ir_die(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
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

/* Grow an array to at least n elements, doubling; new space is zeroed. */
void ir_grow(void **p, int *cap, int n, size_t sz)
{
    if (n <= *cap) return;
    int nc = *cap ? *cap : 8;
    while (nc < n) {
        if (nc > (1 << 29)) ir_die(__FILE__, __LINE__, "array too large");
        nc *= 2;
    }
    *p = ir_xrealloc(*p, (size_t)nc * sz);
    memset((char *)*p + (size_t)*cap * sz, 0, (size_t)(nc - *cap) * sz);
    *cap = nc;
}

int ir_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int ir_mul_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_mul_overflow(a, b, r); }
int ir_add_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_add_overflow(a, b, r); }

/* Append formatted text to a buffer. */
void ir_bprintf(ir_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    IR_ASSERT(n >= 0);
    if (b->n + (size_t)n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + (size_t)n + 1) nc *= 2;
        b->s = ir_xrealloc(b->s, nc);
        b->cap = nc;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
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
