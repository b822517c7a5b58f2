/* test_rt_save.c -- --save FILE (safetensors) from several rank processes,
 * and the validating reader.
 *
 * Three ranks hold params split by rows, by columns, replicated (one
 * writer), on one rank only (a pipeline stage), and an i32 param; the file
 * they write together must hold each full logical tensor and be byte for
 * byte the file one rank holding everything writes.  The reader must reject
 * malformed files (and survive random corruption without reading out of
 * bounds: run this under ASan).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rt_internal.h"


/* The params of the test model: name, dims, init. */
typedef struct tparam {
    const char *name;     /* name (one with a quote, to test JSON escaping) */
    const char *dtype;    /* f32 / i32 */
    int ndim;             /* dimensions */
    int64_t shape[3];     /* shape */
    const char *init;     /* "normal 0.1 0" etc. */
} tparam;

static const tparam params[] = {
    {"a.rows", "f32", 2, {6, 10, 0}, "normal 0.1 0"},
    {"b.cols", "f32", 2, {4, 9, 0}, "uniform -1 1"},
    {"c.repl", "f32", 1, {5, 0, 0}, "normal 1 0"},
    {"d.stage2", "f32", 3, {3, 4, 5}, "normal 0.5 0"},
    {"e.\"quoted\"", "f32", 2, {2, 2, 0}, "ones 0 0"},
    {"f.int", "i32", 1, {3, 0, 0}, "const 7 0"},
};
#define NPARAM 6

/* Append rank r's param lines (of world w: w == 1 holds everything). */
static int param_lines(int r, int w, char *out, size_t len)
{
    int o = 0, idx = 0;
    int64_t off = 0;
    for (int k = 0; k < NPARAM; k++) {
        const tparam *p = &params[k];
        int64_t lo[3] = {0, 0, 0}, hi[3] = {p->shape[0], p->shape[1], p->shape[2]};
        int holds = 1, writer = 1;
        if (w > 1) {
            switch (k) {
            case 0: lo[0] = 2 * r; hi[0] = 2 * r + 2; break;          /* rows */
            case 1: lo[1] = 3 * r; hi[1] = 3 * r + 3; break;          /* columns */
            case 2: writer = r == 0; break;                           /* replicated */
            case 3: holds = r == 2; break;                            /* one stage */
            case 4: holds = r != 2; writer = r == 1; break;           /* two of three */
            case 5: writer = r == 2; break;
            }
        }
        if (!holds)
            continue;
        o += snprintf(out + o, len - (size_t)o, "param %d %s %s %d", idx++, p->name, p->dtype,
                      p->ndim);
        for (int d = 0; d < p->ndim; d++)
            o += snprintf(out + o, len - (size_t)o, " %lld", (long long)p->shape[d]);
        o += snprintf(out + o, len - (size_t)o, " box");
        for (int d = 0; d < p->ndim; d++)
            o += snprintf(out + o, len - (size_t)o, " %lld %lld", (long long)lo[d],
                          (long long)hi[d]);
        o += snprintf(out + o, len - (size_t)o, " init %s off %lld writer %d\n", p->init,
                      (long long)off, writer);
        off += 1024;
    }
    return idx;
}

/* Rank r of w: init every param it holds, save to path, exit.  Never returns. */
static void rank_main(int r, int w, const char *job, const char *path)
{
    char man[8192], rs[16], ws[16];
    int o = snprintf(man, sizeof man, "nnsc-manifest 1\nmodel savetest\nrank %d world %d\n"
                                      "arena 8192\nsteps 0\nmicro_batches 1\nseed 42\n", r, w);
    int np = param_lines(r, w, man + o, sizeof man - (size_t)o);
    strcat(man, "end\n");
    snprintf(rs, sizeof rs, "%d", r);
    snprintf(ws, sizeof ws, "%d", w);
    setenv("NNSC_RANK", rs, 1);
    setenv("NNSC_WORLD", ws, 1);
    setenv("NNSC_JOB", job, 1);
    char *argv[] = {"test_rt_save", "--quiet", "--timeout", "10", "--save", (char *)path, NULL};
    rt_ctx *ctx = rt_init(6, argv, man);
    for (int64_t i = 0; i < np; i++) {
        void *b[1] = {rt_arena(ctx) + ctx->man.params[i].off};
        rt_k_init_param(ctx, b, &i, NULL);
    }
    _exit(rt_finish(ctx));
}

/* Run w ranks saving to path; returns how many exited with code. */
static int run_ranks(int w, const char *path, int tag, int code)
{
    char job[64];
    snprintf(job, sizeof job, "test-save-%d-%d", (int)getpid(), tag);
    pid_t pids[8];
    fflush(stdout);
    for (int r = 0; r < w; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            if (code != 0 && !freopen("/dev/null", "w", stderr))
                _exit(8);
            rank_main(r, w, job, path);
        }
    }
    int good = 0;
    for (int r = 0; r < w; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        good += WIFEXITED(st) && WEXITSTATUS(st) == code;
    }
    return good;
}

/* Read a whole file (malloc'ed); *len its size. */
static unsigned char *read_all(const char *path, int64_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*len + 1);
    if (fread(b, 1, (size_t)*len, f) != (size_t)*len)
        *len = -1;
    fclose(f);
    return b;
}

/* The full logical value of param k, made by a one-rank context. */
static void expected(int k, void *out)
{
    char man[2048];
    const tparam *p = &params[k];
    int o = snprintf(man, sizeof man, "nnsc-manifest 1\nmodel x\nrank 0 world 1\narena 1024\n"
                                      "steps 0\nmicro_batches 1\nseed 42\nparam 0 %s %s %d",
                     p->name, p->dtype, p->ndim);
    for (int d = 0; d < p->ndim; d++)
        o += snprintf(man + o, sizeof man - (size_t)o, " %lld", (long long)p->shape[d]);
    o += snprintf(man + o, sizeof man - (size_t)o, " box");
    for (int d = 0; d < p->ndim; d++)
        o += snprintf(man + o, sizeof man - (size_t)o, " 0 %lld", (long long)p->shape[d]);
    snprintf(man + o, sizeof man - (size_t)o, " init %s off 0 writer 1\nend\n", p->init);
    setenv("NNSC_RANK", "0", 1);
    setenv("NNSC_WORLD", "1", 1);
    char *argv[] = {"x", "--quiet", NULL};
    rt_ctx *ctx = rt_init(2, argv, man);
    int64_t zero = 0;
    void *b[1] = {out};
    rt_k_init_param(ctx, b, &zero, NULL);
    rt_finish(ctx);
}

static void test_multirank_save(void)
{
    char p3[128], p1[128], tmp[140];
    snprintf(p3, sizeof p3, "/tmp/rtsave-%d-w3.safetensors", (int)getpid());
    snprintf(p1, sizeof p1, "/tmp/rtsave-%d-w1.safetensors", (int)getpid());
    snprintf(tmp, sizeof tmp, "%s.tmp", p3);
    check(run_ranks(3, p3, 0, 0) == 3, "3 ranks save split, replicated and one-stage params");
    check(access(tmp, F_OK) != 0, "no FILE.tmp left behind");
    rt_st_file f;
    char err[256];
    int rc = rt_st_open(p3, &f, err, sizeof err);
    check(rc == 0, "the reader accepts the saved file%s%s", rc ? ": " : "", rc ? err : "");
    if (rc)
        return;
    check(f.nt == NPARAM && f.header_len % 8 == 0,
          "%d tensors, header length %lld is a multiple of 8", f.nt, (long long)f.header_len);
    int sorted = 1;
    for (int k = 1; k < f.nt; k++)
        sorted &= strcmp(f.t[k - 1].name, f.t[k].name) < 0 && f.t[k].begin == f.t[k - 1].end;
    check(sorted, "keys sorted by name, data back to back in key order");
    for (int k = 0; k < NPARAM; k++) {
        const rt_st_tensor *t = rt_st_find(&f, params[k].name);
        float want[64];
        expected(k, want);
        int64_t n = 1;
        int shape_ok = t && t->ndim == params[k].ndim;
        for (int d = 0; shape_ok && d < params[k].ndim; d++) {
            shape_ok &= t->shape[d] == params[k].shape[d];
            n *= params[k].shape[d];
        }
        int ok = shape_ok && !strcmp(t->dtype, params[k].dtype[0] == 'f' ? "F32" : "I32") &&
                 t->end - t->begin == n * 4 && memcmp(t->data, want, (size_t)n * 4) == 0;
        check(ok, "tensor %-12s holds the full logical tensor (%s, %lld elements)",
              params[k].name, t ? t->dtype : "missing", (long long)n);
    }
    rt_st_free(&f);

    check(run_ranks(1, p1, 1, 0) == 1, "1 rank holding everything saves too");
    int64_t l1, l3;
    unsigned char *b1 = read_all(p1, &l1), *b3 = read_all(p3, &l3);
    check(b1 && b3 && l1 == l3 && l1 > 0 && !memcmp(b1, b3, (size_t)l1),
          "the 3-rank file and the 1-rank file are byte for byte the same (%lld bytes)",
          (long long)l1);
    free(b1);
    free(b3);
    unlink(p1);
    unlink(p3);

    const char *bad = "/nonexistent-dir-nnsc/x.safetensors";
    check(run_ranks(2, bad, 2, 1) == 2, "save into a missing directory: every rank exits 1");
}

/* ---- the reader on crafted files */

/* A file image: 8-byte length, header text, then data bytes. */
static unsigned char *make_file(const char *hdr, int64_t hlen_field, int64_t data, int64_t *len)
{
    size_t h = strlen(hdr);
    *len = 8 + (int64_t)h + data;
    unsigned char *b = calloc(1, (size_t)*len + 1);
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)((uint64_t)hlen_field >> (8 * k));
    memcpy(b + 8, hdr, h);
    return b;
}

/* Parse an image; 0 if accepted. */
static int parse(const char *hdr, int64_t hlen_field, int64_t data, char *err, size_t errlen)
{
    int64_t len;
    unsigned char *b = make_file(hdr, hlen_field < 0 ? (int64_t)strlen(hdr) : hlen_field, data,
                                 &len);
    rt_st_file f;
    int rc = rt_st_parse(b, len, &f, err, errlen);
    if (!rc)
        rt_st_free(&f);
    return rc;
}

static void test_reader(void)
{
    static const struct {
        const char *what;     /* description */
        const char *hdr;      /* header text */
        int64_t hlen;         /* header length field (-1: the text's length) */
        int64_t data;         /* data bytes after the header */
        int accept;           /* expected verdict */
    } cases[] = {
        {"valid", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1, 8, 1},
        {"valid with __metadata__ and spaces",
         "{\"__metadata__\":{\"format\":\"pt\"}, \"x\" : {\"shape\":[1,2],\"dtype\":\"I32\","
         "\"data_offsets\":[0,8]}}   ", -1, 8, 1},
        {"empty header object", "{}      ", -1, 0, 1},
        {"scalar tensor", "{\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}}", -1,
         8, 1},
        {"header length past the end", "{}", 1000, 0, 0},
        {"header length 2^62", "{}", INT64_C(1) << 62, 0, 0},
        {"header length 0", "{}", 0, 0, 0},
        {"missing closing brace", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}",
         -1, 8, 0},
        {"text after the object", "{} x", -1, 0, 0},
        {"unterminated string", "{\"x", -1, 0, 0},
        {"bad escape", "{\"\\q\":{}}", -1, 0, 0},
        {"offsets past the data", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         -1, 4, 0},
        {"offsets disagree with the shape",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", -1, 8, 0},
        {"begin after end", "{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", -1,
         8, 0},
        {"unknown dtype", "{\"x\":{\"dtype\":\"F31\",\"shape\":[2],\"data_offsets\":[0,8]}}", -1,
         8, 0},
        {"duplicate name",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, 8, 0},
        {"gap in the data", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1,
         8, 0},
        {"data not covered", "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         -1, 8, 0},
        {"overlapping tensors",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, 8, 0},
        {"negative dimension", "{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",
         -1, 8, 0},
        {"fractional dimension",
         "{\"x\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", -1, 8, 0},
        {"missing data_offsets", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2]}}", -1, 8, 0},
        {"extra field", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"y\":1}}",
         -1, 8, 0},
        {"three offsets", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", -1,
         8, 0},
        {"too many dimensions",
         "{\"x\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", -1, 1,
         0},
        {"huge shape overflows",
         "{\"x\":{\"dtype\":\"F64\",\"shape\":[4000000000,4000000000,4000000000],"
         "\"data_offsets\":[0,8]}}", -1, 8, 0},
        {"metadata with a number", "{\"__metadata__\":{\"a\":1}}", -1, 0, 0},
        {"header cut inside a string", "{\"abc\":{}}", 4, 0, 0},
        {"NUL escape in a name", "{\"\\u0000\":{\"dtype\":\"U8\",\"shape\":[0],"
         "\"data_offsets\":[0,0]}}", -1, 0, 0},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int k = 0; k < n; k++) {
        char err[256] = "";
        int rc = parse(cases[k].hdr, cases[k].hlen, cases[k].data, err, sizeof err);
        check((rc == 0) == cases[k].accept, "reader %s: %s%s%s", cases[k].accept ? "accepts" :
              "rejects", cases[k].what, rc ? " -- " : "", rc ? err : "");
    }
    int64_t len;
    unsigned char *tiny = make_file("", 0, 0, &len);
    rt_st_file f;
    char err[256];
    check(rt_st_parse(tiny, 5, &f, err, sizeof err) != 0, "reader rejects a 5-byte file: %s",
          err);
    check(rt_st_open("/nonexistent/x.safetensors", &f, err, sizeof err) != 0,
          "reader reports a missing file: %s", err);

    /* random corruption of a valid header: must be accepted or rejected, never crash */
    const char *good = "{\"__metadata__\":{\"k\":\"v\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],"
                       "\"data_offsets\":[0,16]},\"b\\u00e9\":{\"dtype\":\"I32\",\"shape\":[1],"
                       "\"data_offsets\":[16,20]}}";
    uint64_t s = 99;
    int accepted = 0, rejected = 0;
    for (int it = 0; it < 3000; it++) {
        unsigned char *b = make_file(good, (int64_t)strlen(good), 20, &len);
        int flips = 1 + it % 4;
        for (int q = 0; q < flips; q++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            int64_t pos = (int64_t)((s >> 33) % (uint64_t)(len - 20));
            b[pos] = (unsigned char)(s >> 20);
        }
        if (rt_st_parse(b, len, &f, err, sizeof err) == 0) {
            accepted++;
            rt_st_free(&f);
        } else {
            rejected++;
        }
    }
    check(rejected > 2000, "3000 randomly corrupted headers: %d rejected, %d accepted, "
          "no crash", rejected, accepted);
}

int main(void)
{
    test_multirank_save();
    test_reader();
    return check_done();
}
