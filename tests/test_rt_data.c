/* test_rt_data.c -- token data files behind `dist stream` inputs (data.c).
 *
 * Writes token files in the llm.c layout into a temporary directory and
 * checks, against an independent model of the specification, that the data
 * kernel (fast and reference) returns token K + t of row (s B + b) mod R for
 * every box: one file, shards (one too short to hold a row), wrap-around,
 * column boxes, evaluation batches from the eval file or the training file,
 * tokens above 255; and that bad files stop the rank with status 2 and a
 * message naming the file: among them tokens outside the vocabulary (the
 * stream inputs' `int R`: the file, the token's index and id, the
 * vocabulary; shards, several threads, several chunks) and FIFOs given as
 * token files (refused at once, never waited on).
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rt_internal.h"

#define B 4       /* rows per step */
#define T 6       /* tokens per row of an input (rows hold T + 1) */

static char dir[64];   /* the temporary directory */

/* Token p of test file f: spread over 16 bits (values above 255 too). */
static uint16_t tok_of(int f, int64_t p)
{
    return (uint16_t)((p * 7919 + f * 1009 + 3) & 0xffff);
}

/* Write file NAME in dir: header (magic, version, count) and n tokens of
 * file id f; hdr_count < 0: the true count.  Returns the path (static). */
static const char *write_tokens(const char *name, int f, int64_t n, int32_t magic,
                                int32_t version, int64_t hdr_count)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        perror(path);
        exit(1);
    }
    unsigned char hdr[RT_TOK_HEADER] = {0};
    int32_t h[3] = {magic, version, (int32_t)(hdr_count == -1 ? n : hdr_count)};
    for (int k = 0; k < 3; k++)
        for (int q = 0; q < 4; q++)
            hdr[4 * k + q] = (unsigned char)((uint32_t)h[k] >> (8 * q));
    fwrite(hdr, 1, sizeof hdr, fp);
    for (int64_t p = 0; p < n; p++) {
        uint16_t v = tok_of(f, p);
        unsigned char le[2] = {(unsigned char)(v & 0xff), (unsigned char)(v >> 8)};
        fwrite(le, 1, 2, fp);
    }
    fclose(fp);
    return path;
}

/* The model of the specification: a list of shards (file id, tokens). */
typedef struct model {
    int nf;             /* shards */
    int id[4];          /* file ids, in glob order */
    int64_t ntok[4];    /* tokens per shard */
} model;

/* Rows of a model: floor((N - 1) / T) per shard. */
static int64_t model_rows(const model *m)
{
    int64_t r = 0;
    for (int k = 0; k < m->nf; k++)
        r += m->ntok[k] >= 1 ? (m->ntok[k] - 1) / T : 0;
    return r;
}

/* Token K + t of global row r. */
static int32_t model_tok(const model *m, int64_t r, int64_t K, int64_t t)
{
    for (int k = 0; k < m->nf; k++) {
        int64_t rows = m->ntok[k] >= 1 ? (m->ntok[k] - 1) / T : 0;
        if (r < rows)
            return tok_of(m->id[k], r * T + K + t);
        r -= rows;
    }
    return -1;
}

/* The manifest: tokens (K = 0), targets (K = 1), a synthetic input; data
 * and eval_data paths ("-" for none). */
static void manifest(char *out, size_t len, const char *data, const char *eval, int K2)
{
    snprintf(out, len,
             "nnsc-manifest 1\nmodel datatest\nrank 0 world 1\narena 4096\nsteps 1\n"
             "micro_batches 1\nseed 5\ndata %s\neval_data %s\neval_every 0\neval_steps 1\n"
             "input 0 tokens i32 2 %d %d dist stream 0 period 1\n"
             "input 1 targets i32 2 %d %d dist stream %d period 1\n"
             "input 2 noise f32 2 %d 3 dist normal period 2\nend\n",
             data, eval, B, T, B, T, K2, B);
}

/* Compare the data kernel's box [b0, b1) x [t0, t1) of input idx (offset K)
 * at kernel step `step` with the model's rows; fast (ref = 0) or reference. */
static int box_ok(rt_ctx *ctx, const model *m, int idx, int64_t K, int64_t step, int b0, int b1,
                  int t0, int t1, int ref)
{
    int32_t got[B * T + 4];
    int64_t n = (int64_t)(b1 - b0) * (t1 - t0);
    got[n] = 0x5a5a5a5a;   /* guard */
    int64_t args[7] = {idx, step, 2, b0, b1, t0, t1};
    void *bufs[1] = {got};
    (ref ? rt_ref_data : rt_k_data)(ctx, bufs, args, NULL);
    int64_t R = model_rows(m), batch = step >= 0 ? step : -1 - step;
    for (int b = b0; b < b1; b++)
        for (int t = t0; t < t1; t++) {
            int64_t r = (int64_t)(((__int128)batch * B + b) % R);
            if (got[(b - b0) * (t1 - t0) + (t - t0)] != model_tok(m, r, K, t))
                return 0;
        }
    return got[n] == 0x5a5a5a5a;
}

/* Every full box of steps [s0, s1) and a set of partial boxes, both inputs,
 * fast and reference. */
static int all_boxes_ok(rt_ctx *ctx, const model *m, int64_t s0, int64_t s1)
{
    int ok = 1;
    for (int64_t s = s0; s < s1; s++)
        for (int in = 0; in < 2; in++)
            for (int ref = 0; ref < 2; ref++) {
                ok &= box_ok(ctx, m, in, in, s, 0, B, 0, T, ref);
                ok &= box_ok(ctx, m, in, in, s, 1, 3, 0, T, ref);    /* a micro-batch */
                ok &= box_ok(ctx, m, in, in, s, 0, B, 2, 5, ref);    /* columns */
                ok &= box_ok(ctx, m, in, in, s, 3, 4, 5, 6, ref);    /* one token */
            }
    return ok;
}

/* rt_init for the manifest text with extra flags (NULL-terminated). */
static rt_ctx *start(const char *man, ...)
{
    char *argv[12] = {"test_rt_data", "--quiet"};
    int argc = 2;
    va_list ap;
    va_start(ap, man);
    for (const char *a; (a = va_arg(ap, const char *)) && argc < 11;)
        argv[argc++] = (char *)a;
    va_end(ap);
    argv[argc] = NULL;
    return rt_init(argc, argv, man);
}

static void test_one_file(void)
{
    char man[2048], path[128];
    snprintf(path, sizeof path, "%s", write_tokens("one.bin", 1, 6 * T + 1, RT_TOK_MAGIC, 1, -1));
    model m = {1, {1}, {6 * T + 1}};
    manifest(man, sizeof man, path, "-", 1);
    rt_ctx *ctx = start(man, NULL);
    check(rt_data_rows(ctx, 0) == 6, "one file of 6T+1 tokens: 6 rows of T+1 (got %lld)",
          (long long)rt_data_rows(ctx, 0));
    check(all_boxes_ok(ctx, &m, 0, 7), "steps 0..6: element (b, t) = token K + t of row "
          "(sB + b) mod R (rows wrap), full, micro-batch, column and single-token boxes, fast "
          "and reference");
    check(all_boxes_ok(ctx, &m, -3, 0), "no eval file: evaluation batches 0..2 come from the "
          "training rows");
    int64_t big = (INT64_C(1) << 61) + 5;
    check(box_ok(ctx, &m, 0, 0, big, 0, B, 0, T, 0) && box_ok(ctx, &m, 0, 0, big, 0, B, 0, T, 1),
          "step 2^61 + 5: no overflow in s B + b");
    /* a synthetic input beside the streams: evaluation batches differ from
       training batches, fast = reference */
    float tr[B * 3], ev[B * 3], ev2[B * 3];
    int64_t a_tr[7] = {2, 0, 2, 0, B, 0, 3}, a_ev[7] = {2, -1, 2, 0, B, 0, 3};
    void *b1[1] = {tr}, *b2[1] = {ev}, *b3[1] = {ev2};
    rt_k_data(ctx, b1, a_tr, NULL);
    rt_k_data(ctx, b2, a_ev, NULL);
    rt_ref_data(ctx, b3, a_ev, NULL);
    check(memcmp(tr, ev, sizeof tr) != 0 && memcmp(ev, ev2, sizeof ev) == 0,
          "synthetic input: evaluation batch 0 is held out (differs from step 0), fast = "
          "reference");
    rt_finish(ctx);

    /* --data overrides the manifest's path */
    manifest(man, sizeof man, "/nonexistent/none.bin", "-", 1);
    ctx = start(man, "--data", path, NULL);
    check(all_boxes_ok(ctx, &m, 0, 3), "--data PATH overrides the manifest's data path");
    rt_finish(ctx);
}

static void test_shards_and_eval(void)
{
    char man[2048], pat[128], ev[128];
    /* shard a: 3 rows + 2 spare tokens; b: too short for a row; c: 5 rows */
    write_tokens("shard-a.bin", 2, 3 * T + 3, RT_TOK_MAGIC, 1, -1);
    write_tokens("shard-b.bin", 3, T, RT_TOK_MAGIC, 1, -1);
    write_tokens("shard-c.bin", 4, 5 * T + 1, RT_TOK_MAGIC, 1, -1);
    snprintf(ev, sizeof ev, "%s", write_tokens("eval.bin", 5, 4 * T + 1, RT_TOK_MAGIC, 1, -1));
    snprintf(pat, sizeof pat, "%s/shard-*.bin", dir);
    model m = {3, {2, 3, 4}, {3 * T + 3, T, 5 * T + 1}};
    model me = {1, {5}, {4 * T + 1}};
    manifest(man, sizeof man, pat, ev, 1);
    rt_ctx *ctx = start(man, NULL);
    check(rt_data_rows(ctx, 0) == 8 && rt_data_rows(ctx, 1) == 4,
          "glob of 3 shards: 3 + 0 + 5 = 8 rows (got %lld); eval file 4 rows (got %lld)",
          (long long)rt_data_rows(ctx, 0), (long long)rt_data_rows(ctx, 1));
    check(all_boxes_ok(ctx, &m, 0, 9), "shards in sorted glob order as one sequence: rows never "
          "cross shards, batches cross shard ends and wrap");
    check(all_boxes_ok(ctx, &me, -5, 0), "evaluation batch e (step -1-e): rows (eB + b) mod R of "
          "the eval file");
    rt_finish(ctx);

    /* --eval-data overrides; the eval file as training data too */
    manifest(man, sizeof man, ev, "-", 1);
    ctx = start(man, "--eval-data", pat, NULL);
    check(all_boxes_ok(ctx, &me, 0, 3) && all_boxes_ok(ctx, &m, -4, 0),
          "--data from the manifest, --eval-data PATTERN overrides eval_data");
    rt_finish(ctx);
}

/* What a child did. */
typedef struct outcome {
    int code;           /* exit status, -1 if killed */
    char err[1024];     /* stderr */
} outcome;

/* rt_init in a child with manifest man and one optional flag pair. */
static outcome run_child(const char *man, const char *flag, const char *val)
{
    outcome o;
    char pe[96];
    snprintf(pe, sizeof pe, "%s/child.err", dir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen(pe, "w", stderr))
            _exit(99);
        alarm(20);   /* a rank that blocks (in open(2) of a FIFO, say) is killed: code -1 */
        rt_ctx *ctx = flag ? start(man, flag, val, NULL) : start(man, NULL);
        _exit(rt_finish(ctx));
    }
    int st;
    waitpid(pid, &st, 0);
    o.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    FILE *f = fopen(pe, "r");
    size_t n = f ? fread(o.err, 1, sizeof o.err - 1, f) : 0;
    o.err[n] = 0;
    if (f)
        fclose(f);
    char *nl = strchr(o.err, '\n');
    if (nl)
        *nl = 0;
    return o;
}

static void test_bad_files(void)
{
    char man[2048], p[128];
    struct {
        const char *what;   /* description */
        const char *name;   /* file to write (NULL: none) */
        int64_t n;          /* tokens */
        int32_t magic, version;
        int64_t hdr;        /* header count (-1: true) */
        const char *say;    /* expected in the message */
    } cases[] = {
        {"a missing file", NULL, 0, 0, 0, 0, "no such file"},
        {"bad magic", "badmagic.bin", 40, 12345, 1, -1, "bad magic 12345"},
        {"version 2", "v2.bin", 40, RT_TOK_MAGIC, 2, -1, "version 2"},
        {"count larger than the file (truncated)", "trunc.bin", 40, RT_TOK_MAGIC, 1, 41,
         "truncated"},
        {"a file shorter than the header", "short.bin", 0, 0, 0, 0, "too short"},
        {"fewer rows than one batch", "few.bin", 3 * T + 1, RT_TOK_MAGIC, 1, -1,
         "fewer than one batch"},
        {"negative count", "neg.bin", 40, RT_TOK_MAGIC, 1, -7, "negative"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (!cases[k].name) {
            snprintf(p, sizeof p, "%s/missing.bin", dir);
        } else if (!strcmp(cases[k].name, "short.bin")) {
            snprintf(p, sizeof p, "%s/short.bin", dir);
            FILE *f = fopen(p, "wb");
            fputs("hello", f);
            fclose(f);
        } else {
            snprintf(p, sizeof p, "%s", write_tokens(cases[k].name, 9, cases[k].n, cases[k].magic,
                                                    cases[k].version, cases[k].hdr));
        }
        manifest(man, sizeof man, p, "-", 1);
        outcome o = run_child(man, NULL, NULL);
        check(o.code == 2 && strstr(o.err, p) && strstr(o.err, cases[k].say),
              "data file with %s: exit %d: %s", cases[k].what, o.code, o.err);
    }
    char good[128], pat[128];
    snprintf(good, sizeof good, "%s", write_tokens("good.bin", 1, 6 * T + 1, RT_TOK_MAGIC, 1, -1));
    snprintf(pat, sizeof pat, "%s/nomatch-*.bin", dir);
    manifest(man, sizeof man, pat, "-", 1);
    outcome o = run_child(man, NULL, NULL);
    check(o.code == 2 && strstr(o.err, pat), "a glob that matches nothing: exit %d: %s", o.code,
          o.err);
    manifest(man, sizeof man, good, "-", 1);
    o = run_child(man, "--eval-data", p);
    check(o.code == 2 && strstr(o.err, "eval_data") && strstr(o.err, p),
          "a bad --eval-data file: exit %d: %s", o.code, o.err);
    manifest(man, sizeof man, good, "-", 2);
    o = run_child(man, NULL, NULL);
    check(o.code == 2 && strstr(o.err, "targets") && strstr(o.err, "row length"),
          "stream offset K = 2 (K + T past the row of T + 1): exit %d: %s", o.code, o.err);
    char odd[2048];
    snprintf(odd, sizeof odd,
             "nnsc-manifest 1\nmodel datatest\nrank 0 world 1\narena 64\nsteps 1\n"
             "micro_batches 1\nseed 5\ndata %s\n"
             "input 0 tokens i32 2 %d %d dist stream 0 period 1\n"
             "input 1 targets i32 2 %d %d dist stream 1 period 1\nend\n", good, B, T, B, T - 1);
    o = run_child(odd, NULL, NULL);
    check(o.code == 2 && strstr(o.err, "share one [B, T]"),
          "stream inputs of different shapes: exit %d: %s", o.code, o.err);
}


/* Write NAME in dir with n tokens (i * 7) % vocab, and id `bad` at each
 * index of at[] (na of them).  Returns the path (static). */
static const char *write_vocab(const char *name, int64_t n, int vocab, const int64_t *at, int na,
                               int bad)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        perror(path);
        exit(1);
    }
    unsigned char hdr[RT_TOK_HEADER] = {0};
    int32_t h[3] = {RT_TOK_MAGIC, 1, (int32_t)n};
    for (int k = 0; k < 3; k++)
        for (int q = 0; q < 4; q++)
            hdr[4 * k + q] = (unsigned char)((uint32_t)h[k] >> (8 * q));
    fwrite(hdr, 1, sizeof hdr, fp);
    for (int64_t p = 0; p < n; p++) {
        int v = (int)(p * 7 % vocab);
        for (int k = 0; k < na; k++)
            if (at[k] == p)
                v = bad;
        unsigned char le[2] = {(unsigned char)(v & 0xff), (unsigned char)(v >> 8)};
        fwrite(le, 1, 2, fp);
    }
    fclose(fp);
    return path;
}

/* The manifest of test_vocab: the token inputs with synthetic ranges r0 and
 * r1 (the vocabulary), data and eval_data paths. */
static void vocab_manifest(char *out, size_t len, const char *data, const char *eval, int r0,
                           int r1)
{
    snprintf(out, len,
             "nnsc-manifest 1\nmodel datatest\nrank 0 world 1\narena 4096\nsteps 1\n"
             "micro_batches 1\nseed 5\ndata %s\neval_data %s\neval_every 0\neval_steps 1\n"
             "input 0 tokens i32 2 %d %d dist stream 0 int %d period 1\n"
             "input 1 targets i32 2 %d %d dist stream 1 int %d period 1\nend\n",
             data, eval, B, T, r0, B, T, r1);
}

static void test_vocab(void)
{
    char man[2048], good[128], bad[128], pat[128], big[128];
    /* every id below the vocabulary, the largest (299) among them: opens */
    int64_t top[1] = {17};
    snprintf(good, sizeof good, "%s", write_vocab("v-good.bin", 40 * T + 1, 300, top, 1, 299));
    vocab_manifest(man, sizeof man, good, "-", 300, 300);
    outcome o = run_child(man, NULL, NULL);
    check(o.code == 0, "vocabulary 300, ids 0 .. 299: the file opens (exit %d: %s)", o.code, o.err);
    /* id 300 at token 123: exit 2 naming the file, the index, the id, the vocabulary */
    int64_t at[1] = {123};
    snprintf(bad, sizeof bad, "%s", write_vocab("v-bad.bin", 40 * T + 1, 300, at, 1, 300));
    vocab_manifest(man, sizeof man, bad, "-", 300, 300);
    o = run_child(man, NULL, NULL);
    check(o.code == 2 && strstr(o.err, bad) && strstr(o.err, "token 123 ") &&
          strstr(o.err, "is 300,") && strstr(o.err, "[0, 300)"),
          "id 300 at token 123, vocabulary 300: exit %d: %s", o.code, o.err);
    /* the smaller range of the two inputs is the vocabulary, and it is named */
    vocab_manifest(man, sizeof man, good, "-", 300, 256);
    o = run_child(man, NULL, NULL);
    check(o.code == 2 && strstr(o.err, "[0, 256)") && strstr(o.err, "input targets"),
          "ranges 300 and 256: ids of 256 and more are out (exit %d: %s)", o.code, o.err);
    /* shards: the bad id is in the third; its index is counted in that file */
    write_vocab("vs-a.bin", 10 * T + 1, 300, NULL, 0, 0);
    write_vocab("vs-b.bin", 3, 300, NULL, 0, 0);
    int64_t at_c[1] = {2 * T + 3};
    const char *pc = write_vocab("vs-c.bin", 10 * T + 1, 300, at_c, 1, 4000);
    snprintf(pat, sizeof pat, "%s/vs-*.bin", dir);
    vocab_manifest(man, sizeof man, pat, "-", 300, 300);
    char want[64];
    snprintf(want, sizeof want, "token %d ", 2 * T + 3);
    o = run_child(man, NULL, NULL);
    check(o.code == 2 && strstr(o.err, pc) && strstr(o.err, want) && strstr(o.err, "is 4000"),
          "3 shards, id 4000 in the third: exit %d: %s", o.code, o.err);
    /* the eval file is checked too */
    vocab_manifest(man, sizeof man, good, bad, 300, 300);
    o = run_child(man, NULL, NULL);
    check(o.code == 2 && strstr(o.err, "eval_data file") && strstr(o.err, bad),
          "a bad id in the eval file: exit %d: %s", o.code, o.err);
    /* many chunks (2^17 tokens a read) on 3 threads: the first bad id is named */
    int64_t two[2] = {600001, 200003};
    snprintf(big, sizeof big, "%s", write_vocab("v-big.bin", 1000001, 300, two, 2, 301));
    vocab_manifest(man, sizeof man, big, "-", 300, 300);
    o = run_child(man, "--threads", "3");
    check(o.code == 2 && strstr(o.err, "token 200003 ") && strstr(o.err, "(of 1000001)"),
          "10^6 tokens, bad ids at 200003 and 600001, 3 threads: the first named (exit %d: %s)",
          o.code, o.err);
    /* no range in the manifest (an older build): no check */
    manifest(man, sizeof man, bad, "-", 1);
    o = run_child(man, NULL, NULL);
    check(o.code == 0, "stream inputs without a range: ids are not checked (exit %d: %s)", o.code,
          o.err);
}

/* A FIFO as a token file: refused at once (exit 2, the path and the flag). */
static void test_fifo(void)
{
    char man[2048], fifo[128], good[128], pat[128];
    snprintf(fifo, sizeof fifo, "%s/fifo-x.bin", dir);
    if (mkfifo(fifo, 0600) != 0) {
        perror(fifo);
        exit(1);
    }
    snprintf(good, sizeof good, "%s", write_tokens("fifo-a.bin", 1, 6 * T + 1, RT_TOK_MAGIC, 1, -1));
    manifest(man, sizeof man, "-", "-", 1);
    double t0 = rt_now();
    outcome o = run_child(man, "--data", fifo);
    check(o.code == 2 && strstr(o.err, fifo) && strstr(o.err, "FIFO") && strstr(o.err, "--data") &&
          rt_now() - t0 < 5, "--data FIFO: exit %d in %.2f s: %s", o.code, rt_now() - t0, o.err);
    manifest(man, sizeof man, good, "-", 1);
    o = run_child(man, "--eval-data", fifo);
    check(o.code == 2 && strstr(o.err, fifo) && strstr(o.err, "--eval-data"),
          "--eval-data FIFO: exit %d: %s", o.code, o.err);
    snprintf(pat, sizeof pat, "%s/fifo-*.bin", dir);
    o = run_child(man, "--data", pat);
    check(o.code == 2 && strstr(o.err, fifo), "a glob matching a file and a FIFO: exit %d: %s",
          o.code, o.err);
    o = run_child(man, "--data", dir);
    check(o.code == 2 && strstr(o.err, "directory"), "--data a directory: exit %d: %s", o.code,
          o.err);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/rtdata-%d", (int)getpid());
    if (mkdir(dir, 0700) != 0) {
        perror(dir);
        return 1;
    }
    test_one_file();
    test_shards_and_eval();
    test_bad_files();
    test_vocab();
    test_fifo();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_done();
}
