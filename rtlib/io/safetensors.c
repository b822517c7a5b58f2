/* safetensors.c -- full logical tensors of all ranks in one safetensors file
 * (--save, checkpoints), and a validating reader (whole file, or header only
 * plus pread()s of the boxes a rank needs).
 *
 * File layout:
 *   u64 little-endian   N, the header length (a multiple of 8)
 *   N bytes             JSON: {"__metadata__":{"k":"v",..},
 *                              "NAME":{"dtype":"F32","shape":[..],"data_offsets":[a,b]},...}
 *                       tensor keys sorted by name (bytewise), padded with spaces
 *   data                each tensor's full row-major bytes at [a, b) of this section,
 *                       in key order, back to back
 *
 * Writing: every rank sends the list of boxes it holds to all others, so all
 * compute the same header, even when a rank holds only some tensors (a
 * pipeline stage).  Rank 0 creates the temporary file with the header at its
 * full size; each rank pwrite()s the boxes it is the writer of straight into
 * place and fsyncs; rank 0 renames the temporary file and fsyncs the
 * directory.  The ranks agree on success after each phase, so a failure
 * anywhere makes every rank exit 1 with a message, and the target file is
 * either the old one (or absent) or the complete new one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/rt_io.h"

/* Largest single pread/pwrite; a heartbeat follows each (rt_comm_beat). */
#define ST_IO_CHUNK (INT64_C(16) << 20)

/* ---- writer */

/* One tensor of the file being written, merged from all ranks' boxes. */
typedef struct st_out {
    char name[RT_NAME_MAX];     /* tensor name */
    rt_dtype dtype;             /* element type */
    int ndim;                   /* dimensions */
    int64_t shape[RT_MAXDIM];   /* full shape */
    int64_t begin;              /* data offset */
    int64_t written;            /* elements covered by writer boxes (checked) */
} st_out;

/* One writer box, as announced by some rank. */
typedef struct st_box {
    int t;                      /* index into the st_out table */
    int64_t lo[RT_MAXDIM], hi[RT_MAXDIM];   /* the box */
} st_box;

/* Growable text. */
typedef struct st_buf {
    char *s;        /* bytes */
    size_t len;     /* used */
    size_t cap;     /* allocated */
} st_buf;

/* Append formatted text (exits on out of memory). */
static void st_printf(st_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void st_printf(st_buf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (b->s && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->cap + (size_t)n + 1) * 2;
        b->s = realloc(b->s, b->cap);
        RT_ASSERT(b->s);
    }
}

/* Append s as a JSON string literal. */
static void st_json_string(st_buf *b, const char *s)
{
    st_printf(b, "\"");
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            st_printf(b, "\\%c", ch);
        else if (ch < 0x20)
            st_printf(b, "\\u%04x", ch);
        else
            st_printf(b, "%c", ch);
    }
    st_printf(b, "\"");
}

/* Box k of `what` held by this rank: params first, then state lines; NULL past the end. */
static const rt_param *st_held(const rt_ctx *ctx, int what, int k)
{
    int np = (what & RT_ST_PARAMS) ? ctx->man.nparams : 0;
    int ns = (what & RT_ST_STATE) ? ctx->man.nstates : 0;
    if (k < np)
        return &ctx->man.params[k];
    if (k - np < ns)
        return &ctx->man.states[k - np];
    return NULL;
}

/* This rank's boxes as text, one per line: NAME DTYPE NDIM D.. LO HI .. WRITER */
static void st_describe(const rt_ctx *ctx, int what, st_buf *b)
{
    const rt_param *p;
    for (int k = 0; (p = st_held(ctx, what, k)); k++) {
        st_printf(b, "%s %d %d", p->name, (int)p->dtype, p->ndim);
        for (int d = 0; d < p->ndim; d++)
            st_printf(b, " %lld", (long long)p->shape[d]);
        for (int d = 0; d < p->ndim; d++)
            st_printf(b, " %lld %lld", (long long)p->lo[d], (long long)p->hi[d]);
        st_printf(b, " %d\n", p->writer);
    }
}
/* Order of tensors in the file: bytewise by name. */
static int st_cmp_name(const void *a, const void *b)
{
    return strcmp(((const st_out *)a)->name, ((const st_out *)b)->name);
}

/* 1 if boxes a and b of ndim dimensions overlap. */
static int st_overlap(int ndim, const st_box *a, const st_box *b)
{
    for (int d = 0; d < ndim; d++)
        if (a->hi[d] <= b->lo[d] || b->hi[d] <= a->lo[d])
            return 0;
    return 1;
}

/* Merge all ranks' descriptions into the sorted tensor table and the list of
 * writer boxes; checks that the ranks agree and that the writer boxes of each
 * tensor tile it exactly.  Returns the number of tensors. */
static int st_merge(rt_ctx *ctx, char *all, st_out **tab_out, st_box **box_out, int *nbox_out)
{
    int ntab = 0, nbox = 0, cap = 16, bcap = 16;
    st_out *tab = malloc((size_t)cap * sizeof *tab);
    st_box *box = malloc((size_t)bcap * sizeof *box);
    RT_ASSERT(tab && box);
    /* pass 1: the distinct tensors */
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        st_out t;
        st_box bx;
        int dt, w, off = 0, used;
        memset(&t, 0, sizeof t);
        RT_ASSERT(sscanf(line, "%255s %d %d%n", t.name, &dt, &t.ndim, &used) == 3);
        off += used;
        t.dtype = (rt_dtype)dt;
        for (int d = 0; d < t.ndim; d++) {
            long long v;
            RT_ASSERT(sscanf(line + off, " %lld%n", &v, &used) == 1);
            t.shape[d] = v;
            off += used;
        }
        for (int d = 0; d < t.ndim; d++) {
            long long lo, hi;
            RT_ASSERT(sscanf(line + off, " %lld %lld%n", &lo, &hi, &used) == 2);
            bx.lo[d] = lo;
            bx.hi[d] = hi;
            off += used;
        }
        RT_ASSERT(sscanf(line + off, " %d", &w) == 1);
        int found = -1;
        for (int k = 0; k < ntab && found < 0; k++)
            if (!strcmp(tab[k].name, t.name))
                found = k;
        if (found < 0) {
            if (ntab == cap)
                tab = realloc(tab, (size_t)(cap *= 2) * sizeof *tab);
            RT_ASSERT(tab);
            found = ntab;
            tab[ntab++] = t;
        } else if (tab[found].dtype != t.dtype || tab[found].ndim != t.ndim ||
                   memcmp(tab[found].shape, t.shape, sizeof t.shape) != 0) {
            rt_fatal(ctx, 1, "save: ranks disagree on the shape or dtype of tensor %s", t.name);
        }
        if (w) {
            if (nbox == bcap)
                box = realloc(box, (size_t)(bcap *= 2) * sizeof *box);
            RT_ASSERT(box);
            bx.t = found;
            box[nbox++] = bx;
        }
    }
    /* the writer boxes of each tensor must cover it exactly once */
    for (int k = 0; k < nbox; k++) {
        st_out *t = &tab[box[k].t];
        t->written += rt_box_numel(t->ndim, box[k].lo, box[k].hi);
        for (int j = 0; j < k; j++)
            if (box[j].t == box[k].t && st_overlap(t->ndim, &box[j], &box[k]))
                rt_fatal(ctx, 1, "save: tensor %s has overlapping writer boxes (a code "
                                 "generation bug)", t->name);
    }
    for (int k = 0; k < ntab; k++)
        if (tab[k].written != rt_shape_numel(tab[k].ndim, tab[k].shape))
            rt_fatal(ctx, 1, "save: the writer boxes of tensor %s cover %lld of its %lld "
                             "elements (a code generation bug)", tab[k].name,
                     (long long)tab[k].written,
                     (long long)rt_shape_numel(tab[k].ndim, tab[k].shape));
    /* sort by name, then renumber the boxes */
    int *order = malloc((size_t)(ntab ? ntab : 1) * sizeof *order);
    st_out *sorted = malloc((size_t)(ntab ? ntab : 1) * sizeof *sorted);
    RT_ASSERT(order && sorted);
    memcpy(sorted, tab, (size_t)ntab * sizeof *tab);
    qsort(sorted, (size_t)ntab, sizeof *sorted, st_cmp_name);
    for (int k = 0; k < ntab; k++)
        for (int j = 0; j < ntab; j++)
            if (!strcmp(tab[k].name, sorted[j].name))
                order[k] = j;
    for (int k = 0; k < nbox; k++)
        box[k].t = order[box[k].t];
    free(order);
    free(tab);
    *tab_out = sorted;
    *box_out = box;
    *nbox_out = nbox;
    return ntab;
}

/* The JSON header (padded to a multiple of 8): the metadata, then the
 * tensors; fills each tensor's begin.  Returns the data section size. */
static int64_t st_header(st_out *tab, int ntab, const char *const *meta, st_buf *h)
{
    int64_t at = 0;
    st_printf(h, "{");
    if (meta && meta[0]) {
        st_printf(h, "\"__metadata__\":{");
        for (int k = 0; meta[k] && meta[k + 1]; k += 2) {
            st_printf(h, "%s", k ? "," : "");
            st_json_string(h, meta[k]);
            st_printf(h, ":");
            st_json_string(h, meta[k + 1]);
        }
        st_printf(h, "}%s", ntab ? "," : "");
    }
    for (int k = 0; k < ntab; k++) {
        int64_t bytes = rt_shape_numel(tab[k].ndim, tab[k].shape) * 4;
        tab[k].begin = at;
        st_printf(h, "%s", k ? "," : "");
        st_json_string(h, tab[k].name);
        st_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", tab[k].dtype == RT_F32 ? "F32" : "I32");
        for (int d = 0; d < tab[k].ndim; d++)
            st_printf(h, "%s%lld", d ? "," : "", (long long)tab[k].shape[d]);
        st_printf(h, "],\"data_offsets\":[%lld,%lld]}", (long long)at, (long long)(at + bytes));
        at += bytes;
    }
    st_printf(h, "}");
    while (h->len % 8)
        st_printf(h, " ");
    return at;
}

/* Write all of buf at off, in chunks with a heartbeat after each; 0 or an errno. */
static int st_pwrite_all(rt_ctx *ctx, int fd, const void *buf, size_t len, off_t off)
{
    const char *p = buf;
    while (len > 0) {
        size_t want = len < (size_t)ST_IO_CHUNK ? len : (size_t)ST_IO_CHUNK;
        ssize_t n = pwrite(fd, p, want, off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        p += n;
        len -= (size_t)n;
        off += n;
        if (ctx && len > 0)
            rt_comm_beat(ctx);
    }
    return 0;
}

/* Rank 0: create tmp with the header, sized to the whole file, flushed.
 * 0 or an errno. */
static int st_create(rt_ctx *ctx, const char *tmp, const st_buf *h, int64_t data_bytes)
{
    char why[160];
    /* never blocking: a FIFO left at the name is refused (EINVAL), not waited on */
    int fd = rt_open_file(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0, why, sizeof why);
    if (fd == -2)
        return EINVAL;
    if (fd < 0)
        return errno;
    unsigned char len8[8];
    for (int k = 0; k < 8; k++)
        len8[k] = (unsigned char)((uint64_t)h->len >> (8 * k));
    int e = st_pwrite_all(ctx, fd, len8, 8, 0);
    if (!e)
        e = st_pwrite_all(ctx, fd, h->s, h->len, 8);
    if (!e && ftruncate(fd, (off_t)(8 + h->len + (size_t)data_bytes)) != 0)
        e = errno;
    if (!e && fsync(fd) != 0)
        e = errno;
    if (close(fd) != 0 && !e)
        e = errno;
    return e;
}

/* Write this rank's writer boxes of `what` into tmp and fsync them.  0 or an errno. */
static int st_write_boxes(rt_ctx *ctx, int what, const char *tmp, const st_out *tab, int ntab,
                          int64_t data_start)
{
    int fd = -1, e = 0;
    const rt_param *p;
    for (int k = 0; (p = st_held(ctx, what, k)) && !e; k++) {
        if (!p->writer)
            continue;
        const st_out *t = NULL;
        for (int j = 0; j < ntab && !t; j++)
            if (!strcmp(tab[j].name, p->name))
                t = &tab[j];
        RT_ASSERT(t);
        if (fd < 0 && (fd = open(tmp, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0)
            return errno;   /* rank 0 made tmp a regular file: O_NONBLOCK changes nothing */
        const char *src = ctx->arena + p->off;
        rt_box_iter it;
        rt_box_iter_init(&it, p->ndim, p->shape, p->lo, p->hi);
        while (!e && rt_box_iter_next(&it))
            e = st_pwrite_all(ctx, fd, src + it.pos * 4, (size_t)it.run * 4,
                              (off_t)(data_start + t->begin + it.start * 4));
    }
    if (fd >= 0) {
        /* every writer flushes its own writes: on a shared file system one
           rank's fsync need not cover another host's pages */
        if (!e && fsync(fd) != 0)
            e = errno;
        rt_comm_beat(ctx);
        if (close(fd) != 0 && !e)
            e = errno;
    }
    return e;
}

/* Rank 0: rename tmp to path and fsync the directory.  0 or an errno. */
static int st_commit(const char *tmp, const char *path)
{
    if (rename(tmp, path) != 0)
        return errno;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir ? 1 : 0] = 0;
    else
        snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno;
    int e = fsync(dfd) != 0 ? errno : 0;
    close(dfd);
    /* EINVAL: a file system whose directories cannot be synced; the rename stands */
    return e == EINVAL ? 0 : e;
}

/* After a phase: every rank learns whether any failed; on failure all exit 1. */
static void st_agree(rt_ctx *ctx, int err, const char *what, const char *file, const char *tmp)
{
    if (err)
        rt_warn(ctx, "save: %s %s: %s", what, file, strerror(err));
    if (rt_comm_any(ctx, err != 0, RT_COLL_SAVE)) {
        if (ctx->rank == 0 && tmp)
            unlink(tmp);
        rt_fatal(ctx, 1, "save to %s failed (see the messages above)", file);
    }
}

void rt_st_write(rt_ctx *ctx, const char *path, const char *tmp, int what,
                 const char *const *meta)
{
    st_buf mine = {0}, h = {0};
    st_describe(ctx, what, &mine);
    int64_t *lens = calloc((size_t)ctx->world, sizeof *lens);
    RT_ASSERT(lens);
    char *all = rt_comm_allgatherv_bytes(ctx, mine.s ? mine.s : "", (int64_t)mine.len, lens,
                                         RT_COLL_SAVE);
    st_out *tab;
    st_box *box;
    int nbox;
    int ntab = st_merge(ctx, all, &tab, &box, &nbox);
    int64_t data_bytes = st_header(tab, ntab, meta, &h);

    st_agree(ctx, ctx->rank == 0 ? st_create(ctx, tmp, &h, data_bytes) : 0, "cannot create",
             tmp, tmp);
    st_agree(ctx, st_write_boxes(ctx, what, tmp, tab, ntab, 8 + (int64_t)h.len), "cannot write",
             tmp, tmp);
    st_agree(ctx, ctx->rank == 0 ? st_commit(tmp, path) : 0, "cannot finish", path, tmp);

    free(tab);
    free(box);
    free(all);
    free(lens);
    free(mine.s);
    free(h.s);
}

/* ---- reader */

#define ST_MAX_HEADER (INT64_C(100) << 20)   /* the reference implementation's limit */

/* Cursor over the JSON header. */
typedef struct st_json {
    const char *p;      /* next byte */
    const char *end;    /* one past the header */
    char *err;          /* message buffer */
    size_t errlen;      /* its size */
    int failed;         /* an error was recorded */
} st_json;

/* Record the first error, with the header offset it happened at. */
static int st_fail(st_json *j, const char *base, const char *what)
{
    if (!j->failed)
        snprintf(j->err, j->errlen, "header byte %lld: %s", (long long)(j->p - base), what);
    j->failed = 1;
    return 1;
}

/* Skip JSON whitespace. */
static void st_ws(st_json *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

/* Expect the character ch (after whitespace). */
static int st_expect(st_json *j, const char *base, char ch)
{
    st_ws(j);
    if (j->p >= j->end || *j->p != ch) {
        char m[40];
        snprintf(m, sizeof m, "expected '%c'", ch);
        return st_fail(j, base, m);
    }
    j->p++;
    return 0;
}

/* Four hex digits of a \u escape. */
static int st_hex4(st_json *j, unsigned *out)
{
    unsigned v = 0;
    if (j->end - j->p < 4)
        return 1;
    for (int k = 0; k < 4; k++) {
        char c = j->p[k];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return 1;
        v = v * 16 + d;
    }
    j->p += 4;
    *out = v;
    return 0;
}

/* A JSON string, decoded into a malloc'ed NUL-terminated copy. */
static int st_string(st_json *j, const char *base, char **out)
{
    st_ws(j);
    if (j->p >= j->end || *j->p != '"')
        return st_fail(j, base, "expected a string");
    j->p++;
    size_t cap = 16, len = 0;
    char *s = malloc(cap);
    RT_ASSERT(s);
    for (;;) {
        if (j->p >= j->end) {
            free(s);
            return st_fail(j, base, "unterminated string");
        }
        unsigned char ch = (unsigned char)*j->p++;
        unsigned cp = ch;
        if (ch == '"')
            break;
        if (ch < 0x20) {
            free(s);
            return st_fail(j, base, "control character in a string");
        }
        if (ch == '\\') {
            if (j->p >= j->end) {
                free(s);
                return st_fail(j, base, "unterminated escape");
            }
            char e = *j->p++;
            switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (st_hex4(j, &cp) || (cp >= 0xd800 && cp <= 0xdfff) || cp == 0) {
                    free(s);   /* surrogates and NUL are not accepted in names */
                    return st_fail(j, base, "bad or unsupported \\u escape");
                }
                break;
            default:
                free(s);
                return st_fail(j, base, "bad escape in a string");
            }
        }
        if (len + 4 >= cap) {
            s = realloc(s, cap *= 2);
            RT_ASSERT(s);
        }
        if (cp < 0x80 || ch != '\\') {   /* raw bytes (UTF-8 passes through) or ASCII escapes */
            s[len++] = (char)cp;
        } else if (cp < 0x800) {
            s[len++] = (char)(0xc0 | (cp >> 6));
            s[len++] = (char)(0x80 | (cp & 0x3f));
        } else {
            s[len++] = (char)(0xe0 | (cp >> 12));
            s[len++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            s[len++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    s[len] = 0;
    *out = s;
    return 0;
}

/* A non-negative integer (no sign, fraction or exponent) below 2^62. */
static int st_uint(st_json *j, const char *base, int64_t *out)
{
    st_ws(j);
    if (j->p >= j->end || *j->p < '0' || *j->p > '9')
        return st_fail(j, base, "expected a non-negative integer");
    if (*j->p == '0' && j->p + 1 < j->end && j->p[1] >= '0' && j->p[1] <= '9')
        return st_fail(j, base, "leading zero in an integer");
    int64_t v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (v > (INT64_C(1) << 62) / 10)
            return st_fail(j, base, "integer too large");
        v = v * 10 + (*j->p++ - '0');
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return st_fail(j, base, "expected an integer, found a fraction or exponent");
    *out = v;
    return 0;
}

/* [int, int, ...] with at most maxn entries. */
static int st_uint_array(st_json *j, const char *base, int64_t *v, int maxn, int *n)
{
    *n = 0;
    if (st_expect(j, base, '['))
        return 1;
    st_ws(j);
    if (j->p < j->end && *j->p == ']') {
        j->p++;
        return 0;
    }
    for (;;) {
        if (*n >= maxn)
            return st_fail(j, base, "array too long");
        if (st_uint(j, base, &v[(*n)++]))
            return 1;
        st_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        return st_expect(j, base, ']');
    }
}

/* Bytes per element of a safetensors dtype, or 0 if unknown. */
static int st_dtype_size(const char *d)
{
    static const struct { const char *name; int size; } tab[] = {
        {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1},
        {"I16", 2}, {"U16", 2}, {"F16", 2}, {"BF16", 2},
        {"I32", 4}, {"U32", 4}, {"F32", 4}, {"F64", 8}, {"I64", 8}, {"U64", 8},
    };
    for (size_t k = 0; k < sizeof tab / sizeof tab[0]; k++)
        if (!strcmp(d, tab[k].name))
            return tab[k].size;
    return 0;
}

/* {"k":"v",...}: the __metadata__ object (string values only), kept in f. */
static int st_metadata(st_json *j, const char *base, rt_st_file *f)
{
    if (f->meta)
        return st_fail(j, base, "__metadata__ given twice");
    f->meta = malloc(2 * sizeof *f->meta);   /* non-NULL even when empty */
    RT_ASSERT(f->meta);
    if (st_expect(j, base, '{'))
        return 1;
    st_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return 0;
    }
    for (int cap = 1;;) {
        char *k = NULL, *v = NULL;
        int bad = st_string(j, base, &k) || st_expect(j, base, ':') || st_string(j, base, &v);
        for (int q = 0; !bad && q < f->nmeta; q++)
            if (!strcmp(f->meta[2 * q], k))
                bad = st_fail(j, base, "duplicate __metadata__ key");
        if (bad) {
            free(k);
            free(v);
            return 1;
        }
        if (f->nmeta == cap) {
            f->meta = realloc(f->meta, (size_t)(cap *= 2) * 2 * sizeof *f->meta);
            RT_ASSERT(f->meta);
        }
        f->meta[2 * f->nmeta] = k;
        f->meta[2 * f->nmeta + 1] = v;
        f->nmeta++;
        st_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        return st_expect(j, base, '}');
    }
}

/* {"dtype":..,"shape":[..],"data_offsets":[a,b]}: one tensor's entry. */
static int st_tensor(st_json *j, const char *base, rt_st_tensor *t)
{
    int have_dtype = 0, have_shape = 0, have_off = 0;
    if (st_expect(j, base, '{'))
        return 1;
    for (;;) {
        char *key;
        if (st_string(j, base, &key))
            return 1;
        if (st_expect(j, base, ':')) {
            free(key);
            return 1;
        }
        int bad = 0;
        if (!strcmp(key, "dtype") && !have_dtype) {
            char *d;
            have_dtype = 1;
            bad = st_string(j, base, &d);
            if (!bad) {
                t->elem = st_dtype_size(d);
                if (!t->elem || strlen(d) >= sizeof t->dtype)
                    bad = st_fail(j, base, "unknown dtype");
                else
                    strcpy(t->dtype, d);
                free(d);
            }
        } else if (!strcmp(key, "shape") && !have_shape) {
            have_shape = 1;
            bad = st_uint_array(j, base, t->shape, RT_MAXDIM, &t->ndim);
        } else if (!strcmp(key, "data_offsets") && !have_off) {
            int64_t v[2];
            int n;
            have_off = 1;
            bad = st_uint_array(j, base, v, 2, &n);
            if (!bad && n != 2)
                bad = st_fail(j, base, "data_offsets needs two integers");
            t->begin = v[0];
            t->end = v[1];
        } else {
            bad = st_fail(j, base, "unknown or repeated field in a tensor entry");
        }
        free(key);
        if (bad)
            return 1;
        st_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (st_expect(j, base, '}'))
            return 1;
        break;
    }
    if (!have_dtype || !have_shape || !have_off)
        return st_fail(j, base, "tensor entry lacks dtype, shape or data_offsets");
    return 0;
}

/* Order tensors by data offset (for the coverage check). */
static int st_cmp_begin(const void *a, const void *b)
{
    const rt_st_tensor *x = *(rt_st_tensor *const *)a, *y = *(rt_st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Check sizes and that the tensors tile the data section exactly; point
 * each tensor at its bytes when the whole file is in memory. */
static int st_check_data(rt_st_file *f, int whole, char *err, size_t errlen)
{
    int64_t data = f->size - 8 - f->header_len;
    for (int k = 0; k < f->nt; k++) {
        rt_st_tensor *t = &f->t[k];
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] != 0 && numel > (INT64_C(1) << 62) / t->shape[d]) {
                snprintf(err, errlen, "tensor %s: shape overflows", t->name);
                return 1;
            }
            numel *= t->shape[d];
        }
        if (t->begin > t->end || t->end > data || numel > (INT64_C(1) << 62) / 8 ||
            t->end - t->begin != numel * t->elem) {
            snprintf(err, errlen, "tensor %s: data_offsets [%lld, %lld] do not fit its shape "
                                  "and dtype in a %lld-byte data section", t->name,
                     (long long)t->begin, (long long)t->end, (long long)data);
            return 1;
        }
        t->data = whole ? f->bytes + 8 + f->header_len + t->begin : NULL;
    }
    rt_st_tensor **by = malloc((f->nt > 0 ? (size_t)f->nt : 1) * sizeof *by);
    RT_ASSERT(by);
    for (int k = 0; k < f->nt; k++)
        by[k] = &f->t[k];
    qsort(by, (size_t)f->nt, sizeof *by, st_cmp_begin);
    int64_t at = 0;
    int bad = 0;
    for (int k = 0; k < f->nt && !bad; k++) {
        if (by[k]->begin != at) {
            snprintf(err, errlen, "tensor %s: data starts at %lld, expected %lld (gap or "
                                  "overlap)", by[k]->name, (long long)by[k]->begin,
                     (long long)at);
            bad = 1;
        }
        at = by[k]->end;
    }
    free(by);
    if (!bad && at != data) {
        snprintf(err, errlen, "the tensors cover %lld of the %lld data bytes", (long long)at,
                 (long long)data);
        bad = 1;
    }
    return bad;
}

/* The header length field of bytes[0..8), checked against a file of size
 * bytes; 0 after a message in err when it is out of range. */
static uint64_t st_header_len(const unsigned char *bytes, int64_t size, char *err, size_t errlen)
{
    if (size < 8) {
        snprintf(err, errlen, "file of %lld bytes is too short for a header", (long long)size);
        return 0;
    }
    uint64_t n = 0;
    for (int k = 7; k >= 0; k--)
        n = n << 8 | bytes[k];
    if (n < 2 || n > (uint64_t)ST_MAX_HEADER || n > (uint64_t)(size - 8)) {
        snprintf(err, errlen, "header length %llu is out of range for a %lld-byte file",
                 (unsigned long long)n, (long long)size);
        return 0;
    }
    return n;
}

/* rt_st_parse without the clean-up on failure: bytes holds the whole file
 * of size bytes (whole = 1) or its first 8 + header length bytes. */
static int st_parse(unsigned char *bytes, int64_t size, int whole, rt_st_file *f, char *err,
                    size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->bytes = bytes;
    f->size = size;
    uint64_t n = st_header_len(bytes, size, err, errlen);
    if (!n)
        return 1;
    f->header_len = (int64_t)n;
    const char *base = (const char *)bytes + 8;
    st_json j = {base, base + n, err, errlen, 0};
    int cap = 8;
    f->t = calloc((size_t)cap, sizeof *f->t);
    RT_ASSERT(f->t);
    if (st_expect(&j, base, '{'))
        return 1;
    st_ws(&j);
    if (j.p < j.end && *j.p == '}') {
        j.p++;
    } else {
        for (;;) {
            char *key;
            if (st_string(&j, base, &key))
                return 1;
            if (st_expect(&j, base, ':')) {
                free(key);
                return 1;
            }
            if (!strcmp(key, "__metadata__")) {
                free(key);
                if (st_metadata(&j, base, f))
                    return 1;
            } else {
                for (int k = 0; k < f->nt; k++)
                    if (!strcmp(f->t[k].name, key)) {
                        free(key);
                        return st_fail(&j, base, "duplicate tensor name");
                    }
                if (f->nt == cap) {
                    f->t = realloc(f->t, (size_t)(cap *= 2) * sizeof *f->t);
                    RT_ASSERT(f->t);
                }
                rt_st_tensor *t = &f->t[f->nt++];
                memset(t, 0, sizeof *t);
                t->name = key;
                if (st_tensor(&j, base, t))
                    return 1;
            }
            st_ws(&j);
            if (j.p < j.end && *j.p == ',') {
                j.p++;
                continue;
            }
            if (st_expect(&j, base, '}'))
                return 1;
            break;
        }
    }
    st_ws(&j);
    if (j.p != j.end)
        return st_fail(&j, base, "text after the header object");
    return st_check_data(f, whole, err, errlen);
}

int rt_st_parse(unsigned char *bytes, int64_t size, rt_st_file *f, char *err, size_t errlen)
{
    int rc = st_parse(bytes, size, 1, f, err, errlen);
    if (rc)
        rt_st_free(f);   /* also frees bytes */
    return rc;
}

/* Open path for reading, never blocking (a FIFO is refused, not waited
 * on): the descriptor, or -1 with a message in err. */
static int st_open_read(const char *path, char *err, size_t errlen)
{
    char why[160];
    int fd = rt_open_file(path, O_RDONLY, 0, why, sizeof why);
    if (fd == -1)
        snprintf(err, errlen, "cannot open %s: %s", path, why);
    else if (fd < 0)
        snprintf(err, errlen, "%s is %s: a safetensors file is a regular file", path, why);
    return fd;
}

int rt_st_open(const char *path, rt_st_file *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    int fd = st_open_read(path, err, errlen);
    if (fd < 0)
        return 1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        close(fd);
        return 1;
    }
    unsigned char *bytes = malloc((size_t)st.st_size + 1);
    RT_ASSERT(bytes);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, bytes + got, (size_t)st.st_size - got);
        if (r <= 0) {
            snprintf(err, errlen, "cannot read %s: %s", path, r ? strerror(errno) : "short file");
            close(fd);
            free(bytes);
            return 1;
        }
        got += (size_t)r;
    }
    close(fd);
    return rt_st_parse(bytes, (int64_t)got, f, err, errlen);
}

/* Read exactly len bytes at off; 0, or 1 with a message. */
static int st_pread_all(rt_ctx *ctx, int fd, void *buf, size_t len, off_t off, const char *what,
                        char *err, size_t errlen)
{
    char *p = buf;
    while (len > 0) {
        size_t want = len < (size_t)ST_IO_CHUNK ? len : (size_t)ST_IO_CHUNK;
        ssize_t n = pread(fd, p, want, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            snprintf(err, errlen, "cannot read %s: %s", what,
                     n ? strerror(errno) : "the file is shorter than its header says");
            return 1;
        }
        p += n;
        len -= (size_t)n;
        off += n;
        if (ctx && len > 0)
            rt_comm_beat(ctx);
    }
    return 0;
}

int rt_st_open_header(const char *path, rt_st_file *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    int fd = st_open_read(path, err, errlen);
    if (fd < 0)
        return 1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        close(fd);
        return 1;
    }
    unsigned char len8[8];
    uint64_t n = 0;
    if (st_pread_all(NULL, fd, len8, st.st_size < 8 ? (size_t)st.st_size : 8, 0, path, err,
                     errlen) ||
        !(n = st_header_len(len8, (int64_t)st.st_size, err, errlen))) {
        close(fd);
        return 1;
    }
    unsigned char *bytes = malloc(8 + (size_t)n);
    RT_ASSERT(bytes);
    memcpy(bytes, len8, 8);
    if (st_pread_all(NULL, fd, bytes + 8, (size_t)n, 8, path, err, errlen)) {
        close(fd);
        free(bytes);
        return 1;
    }
    if (st_parse(bytes, (int64_t)st.st_size, 0, f, err, errlen)) {
        rt_st_free(f);   /* also frees bytes */
        close(fd);
        return 1;
    }
    f->fd = fd;
    return 0;
}

int rt_st_read_box(rt_ctx *ctx, const rt_st_file *f, const rt_st_tensor *t, const int64_t *lo,
                   const int64_t *hi, void *dst, char *err, size_t errlen)
{
    RT_ASSERT(f->fd >= 0 && t->elem == 4);
    int64_t start = 8 + f->header_len + t->begin;
    rt_box_iter it;
    rt_box_iter_init(&it, t->ndim, t->shape, lo, hi);
    while (rt_box_iter_next(&it))
        if (st_pread_all(ctx, f->fd, (char *)dst + it.pos * 4, (size_t)it.run * 4,
                         (off_t)(start + it.start * 4), t->name, err, errlen))
            return 1;
    return 0;
}

/* A bf16 or f16 bit pattern as f32 (exact). */
static float st_half(uint16_t h, int bf16)
{
    if (bf16) {
        uint32_t u = (uint32_t)h << 16;
        float x;
        memcpy(&x, &u, 4);
        return x;
    }
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 31) {
        u = sign | 0x7f800000u | (m << 13);   /* inf, NaN */
    } else if (e == 0) {   /* zero or subnormal: m 2^-24 */
        float x = (float)m * 5.9604644775390625e-8f;
        return sign ? -x : x;
    } else {
        u = sign | ((e + 112) << 23) | (m << 13);
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

int rt_st_read_box_f32(rt_ctx *ctx, const rt_st_file *f, const rt_st_tensor *t, const int64_t *lo,
                       const int64_t *hi, int transposed, float *dst, char *err, size_t errlen)
{
    RT_ASSERT(f->fd >= 0 && (!transposed || t->ndim == 2));
    int half = !strcmp(t->dtype, "BF16") ? 1 : !strcmp(t->dtype, "F16") ? 2 : 0;
    RT_ASSERT(half || !strcmp(t->dtype, "F32"));
    if (!half && !transposed)
        return rt_st_read_box(ctx, f, t, lo, hi, dst, err, errlen);
    int64_t flo[RT_MAXDIM], fhi[RT_MAXDIM];   /* the box in the file's layout */
    for (int d = 0; d < t->ndim; d++) {
        int s = transposed ? t->ndim - 1 - d : d;
        flo[d] = lo[s], fhi[d] = hi[s];
    }
    int64_t n = rt_box_numel(t->ndim, flo, fhi);
    unsigned char *raw = malloc((size_t)(n ? n : 1) * (size_t)t->elem);
    RT_ASSERT(raw);
    int64_t start = 8 + f->header_len + t->begin;
    rt_box_iter it;
    rt_box_iter_init(&it, t->ndim, t->shape, flo, fhi);
    while (rt_box_iter_next(&it))
        if (st_pread_all(ctx, f->fd, raw + it.pos * t->elem, (size_t)(it.run * t->elem),
                         (off_t)(start + it.start * t->elem), t->name, err, errlen)) {
            free(raw);
            return 1;
        }
    int64_t rows = t->ndim == 2 ? fhi[0] - flo[0] : 1, cols = n / (rows ? rows : 1);
    for (int64_t k = 0; k < n; k++) {
        float x;
        if (half) {
            uint16_t h;
            memcpy(&h, raw + k * 2, 2);
            x = st_half(h, half == 1);
        } else {
            memcpy(&x, raw + k * 4, 4);
        }
        /* file element (r, c) of the box is the param's (c, r) when transposed */
        int64_t to = transposed ? (k % cols) * rows + k / cols : k;
        dst[to] = x;
    }
    free(raw);
    return 0;
}

const char *rt_st_meta(const rt_st_file *f, const char *key)
{
    for (int k = 0; k < f->nmeta; k++)
        if (!strcmp(f->meta[2 * k], key))
            return f->meta[2 * k + 1];
    return NULL;
}

const rt_st_tensor *rt_st_find(const rt_st_file *f, const char *name)
{
    for (int k = 0; k < f->nt; k++)
        if (!strcmp(f->t[k].name, name))
            return &f->t[k];
    return NULL;
}

void rt_st_free(rt_st_file *f)
{
    for (int k = 0; k < f->nt; k++)
        free(f->t[k].name);
    free(f->t);
    for (int k = 0; k < 2 * f->nmeta; k++)
        free(f->meta[k]);
    free(f->meta);
    free(f->bytes);
    if (f->fd >= 0)
        close(f->fd);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}
