/* data.c -- token data files behind the `dist stream` inputs.
 *
 * A token file has the llm.c layout: a header of 256 little-endian int32
 * (magic 20240520, version 1, token count N, the rest unused), then N
 * little-endian uint16 tokens.  A data set is one file or a glob(3) of
 * shards, taken in sorted order as one logical sequence of rows: a shard of
 * N tokens holds floor((N - 1) / T) rows of T + 1 tokens, row j starting at
 * token j T of the shard (rows overlap by one token and never cross shards).
 *
 * For a stream input of logical shape [B, T] with offset K, element (b, t)
 * of training step s is token K + t of row (s B + b) mod R, R the rows of
 * the training set; of evaluation batch e it is the same in the evaluation
 * set with row (e B + b) mod R_eval.  A rank reads only its box: one
 * pread() per run of rows that are adjacent in a shard (a full-width box of
 * consecutive rows is one contiguous token range), or per row when the box
 * holds some of the columns.  Files stay open for the whole run; every file
 * is checked at start-up (opened without blocking: a FIFO is refused, never
 * waited on; its header; every token below the vocabulary, below), and a
 * bad one stops the rank with status 2 and a message naming it.
 *
 * Whether a run reads a file is decided here, at start-up: a stream input
 * reads the data file of the run (--data, else the build's `data`); with
 * neither it draws the synthetic values its manifest line names (`int
 * RANGE`), the very numbers a `dist int RANGE` input gives, so a run without
 * data is the run of a program built for synthetic data.
 */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/rt_io.h"

/* One token file. */
typedef struct dt_shard {
    char *path;         /* file name */
    int fd;             /* open for the whole run */
    int64_t ntok;       /* tokens (header[2]) */
    int64_t rows;       /* floor((ntok - 1) / T) */
    int64_t first;      /* index of its first row in the data set */
    int64_t tok0;       /* index of its first token in the data set's tokens */
} dt_shard;

/* A data set: the training or the evaluation sequence of rows. */
typedef struct dt_set {
    const char *what;   /* "data" or "eval_data", for messages */
    dt_shard *sh;       /* shards in glob order */
    int nsh;            /* number of shards */
    int64_t rows;       /* rows in all shards */
    int64_t ntok;       /* tokens in all shards */
} dt_set;

/* The token files of one rank. */
struct rt_data {
    int64_t B, T;       /* the stream inputs' logical shape */
    dt_set train;       /* training rows */
    dt_set eval;        /* evaluation rows (nsh = 0: use train) */
    uint16_t *buf;      /* B * T tokens: one box's file bytes before widening */
};

/* Little-endian int32 at p. */
static int32_t dt_le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

/* Read exactly len bytes at off; 0, or an errno (EIO for a short file). */
static int dt_pread(int fd, void *buf, size_t len, off_t off)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = pread(fd, p, len, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EIO;
        p += n;
        len -= (size_t)n;
        off += n;
    }
    return 0;
}

/* Open and check one shard of a `what` set; exits 2 naming it when it is bad. */
static void dt_open_shard(rt_ctx *ctx, const char *what, dt_shard *s, int64_t T)
{
    unsigned char hdr[RT_TOK_HEADER];
    struct stat st;
    char why[160];
    s->fd = rt_open_file(s->path, O_RDONLY, 0, why, sizeof why);
    if (s->fd == -1)
        rt_fatal(ctx, 2, "%s file %s: cannot open: %s", what, s->path, why);
    if (s->fd < 0)
        rt_fatal(ctx, 2, "%s file %s: %s: %s takes token files (the llm.c layout, e.g. from "
                         "tools/mkdata.py)", what, s->path, why,
                 strcmp(what, "data") ? "--eval-data" : "--data");
    if (fstat(s->fd, &st) != 0)
        rt_fatal(ctx, 2, "%s file %s: %s", what, s->path, strerror(errno));
    if (st.st_size < RT_TOK_HEADER)
        rt_fatal(ctx, 2, "%s file %s: %lld bytes, too short for the %d-byte header (not a "
                         "token file, or truncated)", what, s->path, (long long)st.st_size,
                 RT_TOK_HEADER);
    int e = dt_pread(s->fd, hdr, sizeof hdr, 0);
    if (e)
        rt_fatal(ctx, 2, "%s file %s: cannot read the header: %s", what, s->path, strerror(e));
    int32_t magic = dt_le32(hdr), version = dt_le32(hdr + 4), ntok = dt_le32(hdr + 8);
    if (magic != RT_TOK_MAGIC)
        rt_fatal(ctx, 2, "%s file %s: bad magic %d (expected %d: a token file in the llm.c "
                         "layout, e.g. from tools/mkdata.py)", what, s->path, magic,
                 RT_TOK_MAGIC);
    if (version != RT_TOK_VERSION)
        rt_fatal(ctx, 2, "%s file %s: version %d (this reader knows version %d: uint16 tokens)",
                 what, s->path, version, RT_TOK_VERSION);
    if (ntok < 0)
        rt_fatal(ctx, 2, "%s file %s: negative token count %d", what, s->path, ntok);
    if (RT_TOK_HEADER + 2 * (int64_t)ntok > (int64_t)st.st_size)
        rt_fatal(ctx, 2, "%s file %s: the header says %d tokens but the file holds %lld "
                         "(truncated?)", what, s->path, ntok,
                 (long long)((st.st_size - RT_TOK_HEADER) / 2));
    s->ntok = ntok;
    s->rows = ntok >= 1 ? (ntok - 1) / T : 0;
}

/* Expand pattern into the shards of set (sorted glob matches) and open
 * them; exits 2 when nothing matches or a file is bad. */
static void dt_open_set(rt_ctx *ctx, dt_set *set, const char *what, const char *pattern,
                        int64_t B, int64_t T)
{
    glob_t g;
    set->what = what;
    int rc = glob(pattern, GLOB_ERR, NULL, &g);
    if (rc == GLOB_NOMATCH)
        rt_fatal(ctx, 2, "%s file %s: no such file (or the pattern matches none)", what,
                 pattern);
    if (rc != 0)
        rt_fatal(ctx, 2, "%s file %s: cannot list the matching files (%s)", what, pattern,
                 rc == GLOB_NOSPACE ? "out of memory" : "read error");
    set->nsh = (int)g.gl_pathc;
    set->sh = calloc(g.gl_pathc, sizeof *set->sh);
    if (!set->sh)
        rt_fatal(ctx, 1, "out of memory");
    for (size_t k = 0; k < g.gl_pathc; k++) {
        dt_shard *s = &set->sh[k];
        s->fd = -1;
        s->path = strdup(g.gl_pathv[k]);
        if (!s->path)
            rt_fatal(ctx, 1, "out of memory");
        dt_open_shard(ctx, what, s, T);
        s->first = set->rows;
        s->tok0 = set->ntok;
        set->rows += s->rows;
        set->ntok += s->ntok;
    }
    globfree(&g);
    if (set->rows < B)
        rt_fatal(ctx, 2, "%s file %s: %lld rows of %lld tokens in %d file(s), fewer than one "
                         "batch of %lld rows", what, pattern, (long long)set->rows,
                 (long long)(T + 1), set->nsh, (long long)B);
}

/* ---- the vocabulary check.  Every token of the files must lie below the
 * vocabulary of the token inputs: the smallest `int RANGE` of their
 * manifest lines (the spec's `data = int V`).  It is checked once, at
 * start-up: rank r of W reads part r of each set's tokens, DT_CHUNK tokens
 * per pread(2) into a buffer per thread (up to DT_SCAN_THREADS threads,
 * each its share of a block of chunks), then the ranks agree on the first
 * bad token, which every rank names alike. */

#define DT_CHUNK (1 << 17)        /* tokens per read of the scan: 256 KiB, within L2 */
#define DT_BLOCK_CHUNKS 64        /* chunks per thread between two heartbeats (16 MiB) */
#define DT_SCAN_THREADS 16        /* most threads of the scan (it is memory bound) */

/* Token k of a buffer read from a file (little-endian uint16). */
static inline unsigned dt_tok(const uint16_t *p, int64_t k)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap16(p[k]);
#else
    return p[k];
#endif
}

/* The largest of n tokens (a loop the compiler vectorizes). */
static unsigned dt_max_tok(const uint16_t *p, int64_t n)
{
    unsigned m = 0;
    for (int64_t k = 0; k < n; k++) {
        unsigned v = dt_tok(p, k);
        m = v > m ? v : m;
    }
    return m;
}

/* The shard holding token g of set (binary search on first tokens; an
 * empty shard shares its tok0 with the next, which is taken). */
static const dt_shard *dt_shard_of_tok(const dt_set *set, int64_t g)
{
    int lo = 0, hi = set->nsh - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (set->sh[mid].tok0 <= g)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &set->sh[lo];
}

/* One block of a rank's scan of a set; thread t writes only its own
 * bad[t], err[t] and errtok[t]. */
typedef struct dt_scan {
    const dt_set *set;    /* the set */
    int64_t from, to;     /* the block's tokens [from, to), in the set's sequence */
    unsigned vocab;       /* the smallest bad id */
    uint16_t *buf;        /* DT_CHUNK tokens per thread */
    int64_t *bad;         /* per thread: its first token >= vocab, or -1 */
    int *err;             /* per thread: the errno of a failed read, or 0 */
    int64_t *errtok;      /* ... and the token it was reading */
} dt_scan;

/* Thread t of nt: its share of the block's chunks, in order, up to its
 * first bad token. */
static void dt_scan_part(void *p, int t, int nt)
{
    const dt_scan *a = p;
    int64_t nchunk = (a->to - a->from + DT_CHUNK - 1) / DT_CHUNK, c0, c1;
    rt_split(nchunk, t, nt, 1, &c0, &c1);
    uint16_t *buf = a->buf + (size_t)t * DT_CHUNK;
    int64_t g = a->from + c0 * DT_CHUNK, end = a->from + c1 * DT_CHUNK;
    if (end > a->to)
        end = a->to;
    while (g < end) {   /* one read per chunk, or per piece of a chunk in a shard */
        const dt_shard *s = dt_shard_of_tok(a->set, g);
        int64_t stop = g + DT_CHUNK - (g - a->from) % DT_CHUNK;
        if (stop > end)
            stop = end;
        if (stop > s->tok0 + s->ntok)
            stop = s->tok0 + s->ntok;
        int64_t n = stop - g;
        int e = dt_pread(s->fd, buf, (size_t)n * 2, (off_t)(RT_TOK_HEADER + 2 * (g - s->tok0)));
        if (e) {
            a->err[t] = e;
            a->errtok[t] = g;
            return;
        }
        if (dt_max_tok(buf, n) >= a->vocab) {
            int64_t k = 0;
            while (dt_tok(buf, k) < a->vocab)
                k++;
            a->bad[t] = g + k;
            return;
        }
        g = stop;
    }
}

/* This rank's part of set: the index of its first token >= vocab in the
 * set's sequence, or -1.  A file that cannot be read: exit 2. */
static int64_t dt_scan_set(rt_ctx *ctx, const dt_set *set, unsigned vocab)
{
    int64_t lo = (int64_t)((__int128)set->ntok * ctx->rank / ctx->world);
    int64_t hi = (int64_t)((__int128)set->ntok * (ctx->rank + 1) / ctx->world);
    int nt = rt_pool_size() < DT_SCAN_THREADS ? rt_pool_size() : DT_SCAN_THREADS;
    uint16_t *buf = malloc((size_t)nt * DT_CHUNK * sizeof *buf);
    int64_t *bad = malloc(2 * sizeof *bad * (size_t)nt);
    int *err = malloc(sizeof *err * (size_t)nt);
    if (!buf || !bad || !err)
        rt_fatal(ctx, 1, "out of memory");
    dt_scan a = {set, lo, lo, vocab, buf, bad, err, bad + nt};
    int64_t first = -1;
    for (int64_t from = lo; from < hi && first < 0; from = a.to) {
        int64_t block = (int64_t)nt * DT_BLOCK_CHUNKS * DT_CHUNK;
        a.from = from;
        a.to = hi - from < block ? hi : from + block;
        for (int t = 0; t < nt; t++)
            bad[t] = -1, err[t] = 0;
        rt_parallel(dt_scan_part, &a, nt);
        for (int t = 0; t < nt; t++) {
            if (err[t]) {
                const dt_shard *s = dt_shard_of_tok(set, a.errtok[t]);
                rt_fatal(ctx, 2, "%s file %s: cannot read token %lld: %s", set->what, s->path,
                         (long long)(a.errtok[t] - s->tok0), strerror(err[t]));
            }
            if (bad[t] >= 0 && (first < 0 || bad[t] < first))
                first = bad[t];
        }
        rt_comm_beat(ctx);   /* a peer waiting for this scan restarts its deadline */
    }
    free(buf);
    free(bad);
    free(err);
    return first;
}

/* Check the tokens of the train and eval sets against the vocabulary of
 * the stream inputs (none: nothing to check); a bad one: every rank exits
 * 2 naming the file, the token's index in it, its id and the vocabulary. */
static void dt_check_vocab(rt_ctx *ctx, const rt_data *d)
{
    const rt_manifest *m = &ctx->man;
    const rt_input *by = NULL;   /* the stream input of the smallest range */
    for (int k = 0; k < m->ninputs; k++)
        if (m->inputs[k].dist == RT_DIST_STREAM && m->inputs[k].range > 0 &&
            (!by || m->inputs[k].range < by->range))
            by = &m->inputs[k];
    if (!by || by->range > UINT16_MAX)
        return;   /* no vocabulary known, or every uint16 is a valid id */
    unsigned vocab = (unsigned)by->range;
    const dt_set *sets[2] = {&d->train, &d->eval};
    int64_t mine[2] = {INT64_MAX, INT64_MAX};   /* (set, token) of this rank's first bad one */
    for (int k = 0; k < 2 && mine[0] == INT64_MAX; k++) {
        int64_t g = sets[k]->nsh ? dt_scan_set(ctx, sets[k], vocab) : -1;
        if (g >= 0)
            mine[0] = k, mine[1] = g;
    }
    int64_t first[2] = {mine[0], mine[1]};
    if (ctx->world > 1) {   /* the first over the ranks: every rank names the same token */
        int64_t *lens = calloc((size_t)ctx->world, sizeof *lens);
        if (!lens)
            rt_fatal(ctx, 1, "out of memory");
        char *all = rt_comm_allgatherv_bytes(ctx, mine, sizeof mine, lens, RT_COLL_INIT);
        for (int r = 0; r < ctx->world; r++) {
            int64_t v[2];
            memcpy(v, all + (size_t)r * sizeof v, sizeof v);
            if (v[0] < first[0] || (v[0] == first[0] && v[1] < first[1]))
                first[0] = v[0], first[1] = v[1];
        }
        free(all);
        free(lens);
    }
    if (first[0] == INT64_MAX)
        return;
    const dt_set *set = sets[first[0]];
    const dt_shard *s = dt_shard_of_tok(set, first[1]);
    int64_t at = first[1] - s->tok0;
    uint16_t tok;
    int e = dt_pread(s->fd, &tok, 2, (off_t)(RT_TOK_HEADER + 2 * at));
    if (e)
        rt_fatal(ctx, 2, "%s file %s: cannot read token %lld: %s", set->what, s->path,
                 (long long)at, strerror(e));
    unsigned id = dt_tok(&tok, 0);
    rt_fatal(ctx, 2, "%s file %s: token %lld (of %lld) is %u, outside the vocabulary [0, %u) of "
                     "input %s (`data = int %u` in the model spec): make the file with this "
                     "model's tokenizer, or build the model for a vocabulary of at least %u",
             set->what, s->path, (long long)at, (long long)s->ntok, id, vocab, by->name, vocab,
             id + 1);
}

/* Close a set's files. */
static void dt_close_set(dt_set *set)
{
    for (int k = 0; k < set->nsh; k++) {
        if (set->sh[k].fd >= 0)
            close(set->sh[k].fd);
        free(set->sh[k].path);
    }
    free(set->sh);
    memset(set, 0, sizeof *set);
}

/* --data or --eval-data given to a program none of whose inputs reads
 * tokens: exit 2, naming the inputs that could (i32 [B, T]) and what they
 * would need in the model spec. */
static void dt_no_stream(rt_ctx *ctx)
{
    const rt_manifest *m = &ctx->man;
    const char *flag = ctx->data_path ? "--data" : "--eval-data";
    char names[600] = "";
    int n = 0;
    size_t at = 0;
    for (int k = 0; k < m->ninputs && at < sizeof names; k++) {
        const rt_input *in = &m->inputs[k];
        if (in->dtype != RT_I32 || in->ndim != 2)
            continue;
        at += (size_t)snprintf(names + at, sizeof names - at, "%s[input %s]", n ? ", " : "",
                               in->name);
        n++;
    }
    if (!n)
        rt_fatal(ctx, 2, "%s: this program was compiled for synthetic data: none of its inputs "
                         "can read tokens (a token input is i32 of shape [B, T] with `stream = "
                         "K` in its [input] section of the model spec)", flag);
    rt_fatal(ctx, 2, "%s: this program was compiled for synthetic data: no input reads tokens. "
                     "To read a token file, add `stream = K` to %s in the model spec (K = 0: "
                     "a row's tokens, K = 1: the next tokens, the targets) and rebuild", flag,
             names);
}

/* No data file for the run: every stream input draws its synthetic values
 * (exactly those of a `dist int RANGE` input), or exit 2 when the manifest
 * names none. */
static void dt_synthetic(rt_ctx *ctx)
{
    rt_manifest *m = &ctx->man;
    for (int k = 0; k < m->ninputs; k++) {
        rt_input *in = &m->inputs[k];
        if (in->dist != RT_DIST_STREAM)
            continue;
        if (in->range <= 0)
            rt_fatal(ctx, 2, "input %s reads a data file, but none is configured (the program "
                             "was built with data = -): pass --data PATH", in->name);
        in->dist = RT_DIST_INT;
    }
}

void rt_data_open(rt_ctx *ctx)
{
    const rt_manifest *m = &ctx->man;
    if (!m->nstream) {
        if (ctx->data_path || ctx->eval_path)
            dt_no_stream(ctx);
        return;
    }
    const char *train = ctx->data_path ? ctx->data_path : m->data;
    const char *eval = ctx->eval_path ? ctx->eval_path : m->eval_data;
    if (!train && eval)
        rt_fatal(ctx, 2, "--eval-data %s: the token inputs would read evaluation batches from a "
                         "file but train on synthetic tokens: pass --data PATH too", eval);
    if (!train) {
        dt_synthetic(ctx);
        return;
    }
    rt_data *d = calloc(1, sizeof *d);
    if (!d)
        rt_fatal(ctx, 1, "out of memory");
    ctx->data = d;
    /* every stream input has the same [B, T]: rows are counted in one T */
    for (int k = 0; k < m->ninputs; k++) {
        const rt_input *in = &m->inputs[k];
        if (in->dist != RT_DIST_STREAM)
            continue;
        if (!d->T) {
            d->B = in->shape[0];
            d->T = in->shape[1];
        } else if (in->shape[0] != d->B || in->shape[1] != d->T) {
            rt_fatal(ctx, 2, "stream inputs of different shapes ([%lld, %lld] and %s [%lld, "
                             "%lld]): all token inputs must share one [B, T]", (long long)d->B,
                     (long long)d->T, in->name, (long long)in->shape[0],
                     (long long)in->shape[1]);
        }
        if (in->stream + d->T > d->T + 1)
            rt_fatal(ctx, 2, "input %s: stream offset %lld + T %lld is past the row length "
                             "T + 1 = %lld", in->name, (long long)in->stream, (long long)d->T,
                     (long long)(d->T + 1));
    }
    dt_open_set(ctx, &d->train, "data", train, d->B, d->T);
    if (eval)
        dt_open_set(ctx, &d->eval, "eval_data", eval, d->B, d->T);
    dt_check_vocab(ctx, d);
    d->buf = malloc((size_t)(d->B * d->T) * sizeof *d->buf);
    if (!d->buf)
        rt_fatal(ctx, 1, "out of memory");
}

void rt_data_close(rt_ctx *ctx)
{
    rt_data *d = ctx->data;
    if (!d)
        return;
    dt_close_set(&d->train);
    dt_close_set(&d->eval);
    free(d->buf);
    free(d);
    ctx->data = NULL;
}

int64_t rt_data_rows(const rt_ctx *ctx, int eval)
{
    const rt_data *d = ctx->data;
    if (!d)
        return 0;
    return eval && d->eval.nsh ? d->eval.rows : d->train.rows;
}

/* The shard holding row r of set (binary search on first rows). */
static const dt_shard *dt_shard_of(const dt_set *set, int64_t r)
{
    int lo = 0, hi = set->nsh - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (set->sh[mid].first <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &set->sh[lo];
}

/* Read n tokens starting at token `tok` of shard s into buf; exits 1 when the
 * file cannot be read (it changed under the run). */
static void dt_read(rt_ctx *ctx, const dt_shard *s, int64_t tok, int64_t n, uint16_t *buf)
{
    int e = dt_pread(s->fd, buf, (size_t)n * 2, (off_t)(RT_TOK_HEADER + 2 * tok));
    if (e)
        rt_fatal(ctx, 1, "data file %s: cannot read tokens %lld..%lld: %s", s->path,
                 (long long)tok, (long long)(tok + n), strerror(e));
}

/* Widen n little-endian uint16 tokens to int32. */
static void dt_widen(const uint16_t *src, int32_t *dst, int64_t n)
{
    const unsigned char *b = (const unsigned char *)src;
    for (int64_t k = 0; k < n; k++)
        dst[k] = (int32_t)(b[2 * k] | b[2 * k + 1] << 8);
}

void rt_data_stream(rt_ctx *ctx, const rt_input *in, int64_t step, const int64_t *lo,
                    const int64_t *hi, int32_t *dst, int ref)
{
    rt_data *d = ctx->data;
    RT_ASSERT(d && in->dist == RT_DIST_STREAM);
    const dt_set *set = step >= 0 || !d->eval.nsh ? &d->train : &d->eval;
    int64_t batch = step >= 0 ? step : -1 - step;
    int64_t R = set->rows, T = d->T;
    /* row of b = lo[0]: (batch B + b) mod R, without overflow */
    int64_t r0 = (int64_t)(((unsigned __int128)(uint64_t)(batch % R) * (uint64_t)(d->B % R) +
                            (uint64_t)lo[0]) % (uint64_t)R);
    int64_t t0 = lo[1], w = hi[1] - lo[1], nb = hi[0] - lo[0];
    int64_t K = in->stream;
    if (ref) {   /* the reference: every token on its own, its position spelled out */
        for (int64_t q = 0; q < nb * w; q++) {
            int64_t r = (r0 + q / w) % R, t = t0 + q % w;
            const dt_shard *s = dt_shard_of(set, r);
            uint16_t tok;
            dt_read(ctx, s, (r - s->first) * T + K + t, 1, &tok);
            dt_widen(&tok, dst + q, 1);
        }
        return;
    }
    for (int64_t b = 0; b < nb;) {
        int64_t r = (r0 + b) % R;
        const dt_shard *s = dt_shard_of(set, r);
        int64_t j = r - s->first;   /* row within the shard */
        int64_t m = 1;              /* rows read together */
        if (w == T) {               /* full rows: adjacent rows are adjacent tokens */
            m = nb - b;
            if (m > s->rows - j)
                m = s->rows - j;
        }
        dt_read(ctx, s, j * T + K + t0, m * w, d->buf);
        dt_widen(d->buf, dst + b * w, m * w);
        b += m;
    }
}

/* ---- the data kernel: synthetic inputs from the counter-based streams
 * (cpu/rng.c), stream inputs from the token files above.
 *
 * Synthetic evaluation batch e (data kernel step -1-e) is batch e mod P of
 * the streams keyed with seed ^ RT_EVAL_SALT: held out from training. */

#define RT_EVAL_SALT UINT64_C(0x6e6e73632d657661) /* "nnsc-eva": seed of evaluation batches */

/* Check the data kernel's arguments; returns the input. */
static const rt_input *rt_data_args(rt_ctx *ctx, const int64_t *i)
{
    if (i[0] < 0 || i[0] >= ctx->man.ninputs)
        rt_fatal(ctx, 1, "data: input index %lld out of range (manifest has %d)",
                 (long long)i[0], ctx->man.ninputs);
    const rt_input *in = &ctx->man.inputs[i[0]];
    if (i[2] != in->ndim)
        rt_fatal(ctx, 1, "data: input %s: step %lld, ndim %lld (manifest says %d)", in->name,
                 (long long)i[1], (long long)i[2], in->ndim);
    for (int d = 0; d < in->ndim; d++) {
        int64_t lo = i[3 + 2 * d], hi = i[4 + 2 * d];
        if (lo < 0 || hi <= lo || hi > in->shape[d])
            rt_fatal(ctx, 1, "data: input %s: box [%lld, %lld) of dim %d outside [0, %lld)",
                     in->name, (long long)lo, (long long)hi, d, (long long)in->shape[d]);
    }
    return in;
}

/* Stream key and first counter of a synthetic input's batch for the data
 * kernel's step (< 0: evaluation batch -1-step). */
static void rt_data_base(const rt_ctx *ctx, const rt_input *in, int64_t step, uint64_t *key,
                         uint64_t *base)
{
    int64_t batch = step >= 0 ? step : -1 - step;
    *key = rt_rng_key(step >= 0 ? ctx->man.seed : ctx->man.seed ^ RT_EVAL_SALT, in->key);
    *base = (uint64_t)(batch % in->period) * (uint64_t)rt_shape_numel(in->ndim, in->shape);
}

/* A stream input's box from the token files (data.c); ref: the reference reader. */
static void rt_data_tokens(rt_ctx *ctx, const rt_input *in, void *dst, const int64_t *i, int ref)
{
    int64_t lo[2] = {i[3], i[5]}, hi[2] = {i[4], i[6]};
    rt_data_stream(ctx, in, i[1], lo, hi, dst, ref);
}

/* Value of element j of an input's endless stream, stored as element q of dst. */
static inline void rt_data_elem(const rt_input *in, uint64_t key, uint64_t j, void *dst,
                                int64_t q)
{
    if (in->dist == RT_DIST_ZEROS)
        ((float *)dst)[q] = 0.0f;
    else if (in->dist == RT_DIST_NORMAL)
        ((float *)dst)[q] = (float)rt_rng_normal(key, j);
    else
        ((int32_t *)dst)[q] = rt_rng_int(key, j, in->range);
}

/* rt_k_data, fast path: contiguous runs of the box. */
void rt_data_box(rt_ctx *ctx, void *dst, const int64_t *i)
{
    const rt_input *in = rt_data_args(ctx, i);
    if (in->dist == RT_DIST_STREAM) {
        rt_data_tokens(ctx, in, dst, i, 0);
        return;
    }
    int64_t lo[RT_MAXDIM], hi[RT_MAXDIM];
    for (int d = 0; d < in->ndim; d++) {
        lo[d] = i[3 + 2 * d];
        hi[d] = i[4 + 2 * d];
    }
    uint64_t key, base;
    rt_data_base(ctx, in, i[1], &key, &base);
    rt_box_iter it;
    rt_box_iter_init(&it, in->ndim, in->shape, lo, hi);
    while (rt_box_iter_next(&it)) {
        uint64_t j = base + (uint64_t)it.start;
        if (in->dist == RT_DIST_INT) {
            int32_t *o = (int32_t *)dst + it.pos;
            for (int64_t t = 0; t < it.run; t++)
                o[t] = rt_rng_int(key, j + (uint64_t)t, in->range);
        } else if (in->dist == RT_DIST_ZEROS) {
            memset((float *)dst + it.pos, 0, sizeof(float) * (size_t)it.run);
        } else {
            float *o = (float *)dst + it.pos;
            for (int64_t t = 0; t < it.run; t++)
                o[t] = (float)rt_rng_normal(key, j + (uint64_t)t);
        }
    }
}

/* The reference: element by element. */
void rt_ref_data(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    const rt_input *in = rt_data_args(ctx, i);
    if (in->dist == RT_DIST_STREAM) {
        rt_data_tokens(ctx, in, b[0], i, 1);
        return;
    }
    uint64_t key, base;
    rt_data_base(ctx, in, i[1], &key, &base);
    int64_t n = 1;
    for (int d = 0; d < in->ndim; d++)
        n *= i[4 + 2 * d] - i[3 + 2 * d];
    for (int64_t q = 0; q < n; q++) {
        int64_t rest = q, logical = 0, stride = 1;
        for (int d = in->ndim - 1; d >= 0; d--) {
            int64_t lo = i[3 + 2 * d], ext = i[4 + 2 * d] - lo;
            logical += (lo + rest % ext) * stride;
            rest /= ext;
            stride *= in->shape[d];
        }
        uint64_t j = base + (uint64_t)logical;
        rt_data_elem(in, key, j, b[0], q);
    }
}

void rt_k_data(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f)
{
    rt_data_box(ctx, b[0], i);
}

