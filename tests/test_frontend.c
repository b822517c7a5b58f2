/* test_frontend.c -- the model spec frontend: every malformed spec in
 * tests/bad/ must fail with status 2 and the message its first line
 * expects; valid specs must lower to the expected Graph.
 *
 * usage: test_frontend TESTS_DIR [EXAMPLES_DIR]
 *        (EXAMPLES_DIR defaults to TESTS_DIR/../examples)
 *
 * A file in tests/bad/ starts with `; expect: TEXT` (a substring of what
 * nnsc-aot prints on stderr; up to 4 such lines, each must be there, e.g.
 * the error and its hint) and may add `; set: SECTION.KEY=VALUE` lines:
 * --set overrides to apply.  Prints one line per check and a summary
 * "N passed, M failed"; exits 1 on any failure.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fe_priv.h"
#include "frontend.h"
#include "ir.h"
#include "io/rt_io.h"

static char tmpdir[256];   /* scratch files of this run */

/* fe_load with stderr captured into err (NUL-terminated). */
static int load_capture(const char *path, const char *const *sets, int nset, ir_graph *g,
                        char *err, size_t errsz)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    if (!tmp) {
        perror("tmpfile");
        exit(1);
    }
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    int rc = fe_load(path, sets, nset, g);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(err, 1, errsz - 1, tmp);
    err[n] = '\0';
    fclose(tmp);
    return rc;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    b[got] = '\0';
    fclose(f);
    return b;
}

static void spit(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fwrite(text, 1, n, f);
    fclose(f);
}

/* A scratch file named name holding text; returns its path (static). */
static const char *scratch(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    spit(path, text, strlen(text));
    return path;
}

/* Expect fe_load(path, sets) to fail with status 2 and a message holding
 * every one of want[0 .. nwant). */
static void expect_errors(const char *label, const char *path, const char *const *sets, int nset,
                          const char *const *want, int nwant)
{
    static char err[1 << 16];
    ir_graph g;
    int rc = load_capture(path, sets, nset, &g, err, sizeof err);
    int ok = rc == 2 && strstr(err, "error: ");
    for (int k = 0; k < nwant; k++) ok = ok && strstr(err, want[k]);
    CHECK(ok, "%s: %s%s", label, want[0], nwant > 1 ? " (and the hint)" : "");
    if (!ok) fprintf(stdout, "      status %d, stderr:\n%s\n", rc, err);
    ir_graph_free(&g);
}

/* Expect fe_load(path, sets) to fail with status 2 and a message holding want. */
static void expect_error(const char *label, const char *path, const char *const *sets, int nset,
                         const char *want)
{
    expect_errors(label, path, sets, nset, &want, 1);
}

/* ---------------------------------------------------------------- bad specs */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Every .ini file in tests/bad: status 2 and the expected text. */
static void test_bad_dir(const char *tests)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/bad", tests);
    DIR *d = opendir(dir);
    if (!d) {
        CHECK(0, "open %s", dir);
        return;
    }
    char *names[512];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 512;) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".ini") == 0) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    CHECK(n >= 20, "tests/bad has %d specs (>= 20)", n);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        char *text = slurp(path);
        char wantbuf[4][512];
        const char *want[4];
        int nwant = 0;
        const char *sets[8];
        char setbuf[8][256];
        int nset = 0;
        for (char *ln = text; ln && *ln == ';';) {
            char *nl = strchr(ln, '\n');
            int len = nl ? (int)(nl - ln) : (int)strlen(ln);
            if (strncmp(ln, "; expect: ", 10) == 0 && nwant < 4) {
                snprintf(wantbuf[nwant], sizeof wantbuf[nwant], "%.*s", len - 10, ln + 10);
                want[nwant] = wantbuf[nwant];
                nwant++;
            }
            if (strncmp(ln, "; set: ", 7) == 0 && nset < 8) {
                snprintf(setbuf[nset], sizeof setbuf[nset], "%.*s", len - 7, ln + 7);
                sets[nset] = setbuf[nset];
                nset++;
            }
            ln = nl ? nl + 1 : NULL;
        }
        if (!nwant) CHECK(0, "%s: no `; expect:` line", names[i]);
        else expect_errors(names[i], path, sets, nset, want, nwant);
        free(text);
        free(names[i]);
    }
}

/* Bad inputs made at run time: binary, bad UTF-8, huge line, empty, missing. */
static void test_bad_generated(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/binary.ini", tmpdir);
    static const char bin[] = "[dims]\nB = 8\n\x7f" "ELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0>\0";
    spit(path, bin, sizeof bin - 1);
    expect_error("binary file (NUL bytes)", path, NULL, 0, ":3: error: binary data (NUL byte)");

    spit(path, "[dims]\nB = 8\nC = \xff\xfe\n", 18);
    expect_error("invalid UTF-8", path, NULL, 0, ":3: error: invalid UTF-8 (byte 0xff)");

    spit(path, "[dims]\nB = 8\x1b[0m\n", 16);
    expect_error("control character", path, NULL, 0, ":2: error: control character 0x1b");

    spit(path, "", 0);
    expect_error("empty file", path, NULL, 0, "binary.ini: error: no [op] sections (the file is empty)");

    snprintf(path, sizeof path, "%s/no-such-dir/model.ini", tmpdir);
    expect_error("missing file", path, NULL, 0, "model.ini: error: cannot open the model spec: No such file or directory");

    expect_error("a directory", tmpdir, NULL, 0, "error: cannot read the model spec: Is a directory");

    /* a 100 KB bad value: reported at its line, the quote cut to 200 bytes */
    size_t big = 100 * 1024;
    char *text = malloc(big + 64);
    int off = sprintf(text, "[dims]\nB = 8\nC = ");
    memset(text + off, 'Q', big);
    strcpy(text + off + big, "!\n");
    const char *p = scratch("long-bad.ini", text);
    static char err[1 << 16];
    ir_graph g;
    int rc = load_capture(p, NULL, 0, &g, err, sizeof err);
    char *quote = strstr(err, "\n  C = QQQ");
    char *dots = quote ? strstr(quote, "...\n") : NULL;
    CHECK(rc == 2 && strstr(err, ":3: error: dim C: unknown dim 'QQQQ") && quote && dots &&
              dots - (quote + 3) == 200 && strlen(err) < 2000,
          "100 KB bad line: error at :3, quoted line cut to 200 bytes + \"...\"");
    ir_graph_free(&g);
    free(text);

    const char *bad_sets[] = {"train.steps=5", "train.steps"};
    p = scratch("set-ok.ini", "[dims]\nB = 8\n");
    expect_error("--set without '='", p, bad_sets, 2, "<command line>: error: --set train.steps: expected SECTION.KEY=VALUE");
}

/* ---------------------------------------------------------------- suggestions */

/* fe_closest(word, cand) picks want (NULL: none). */
static void expect_closest(const char *word, const char *const *cand, int n, const char *want)
{
    int k = fe_closest(word, cand, n);
    const char *got = k >= 0 ? cand[k] : NULL;
    int ok = want ? got && strcmp(got, want) == 0 : !got;
    CHECK(ok, "did you mean: '%s' -> %s%s%s (got %s)", word, want ? "'" : "", want ? want : "nothing",
          want ? "'" : "", got ? got : "nothing");
}

/* "Did you mean": edit distance with swaps, case, ties and thresholds. */
static void test_suggest(void)
{
    const char *params[] = {"fc1.w", "fc1.b", "fc2.w", "fc2.b", "fc3.w", "fc3.b", "x", "y"};
    const char *rparams[] = {"y", "x", "fc3.b", "fc3.w", "fc2.b", "fc2.w", "fc1.b", "fc1.w"};
    int np = 8;
    expect_closest("fc2.ww", params, np, "fc2.w");      /* one deletion, not 'fc1.w' (two) */
    expect_closest("fc2.ww", rparams, np, "fc2.w");     /* whatever the order */
    expect_closest("fc2w", params, np, "fc2.w");
    expect_closest("fc.w", params, np, "fc1.w");        /* tie at 1 edit: strcmp order ... */
    expect_closest("fc.w", rparams, np, "fc1.w");       /* ... in any candidate order */
    expect_closest("FC3.B", params, np, "fc3.b");       /* case is no edit */
    expect_closest("fc4.w", params, np, "fc1.w");
    expect_closest("fc2.w", params + 2, 1, NULL);       /* never the word itself */
    expect_closest("z", params, np, NULL);              /* 1 letter: only another case */
    expect_closest("X", params, np, "x");
    expect_closest("wq.fc2", params, np, NULL);         /* too far */
    const char *keys[] = {"loss", "optimizer", "lr", "weight_decay", "beta1", "beta2", "eps", "steps",
                          "micro_batches", "data", "data_period", "eval_data", "eval_every", "eval_steps",
                          "lr_schedule", "warmup_steps", "min_lr", "grad_clip", "dtype"};
    int nk = (int)(sizeof keys / sizeof *keys);
    expect_closest("stpes", keys, nk, "steps");         /* a swap of two letters is one edit */
    expect_closest("optimzer", keys, nk, "optimizer");
    expect_closest("lr_shedule", keys, nk, "lr_schedule");
    expect_closest("eval_evry", keys, nk, "eval_every");
    expect_closest("evalsteps", keys, nk, "eval_steps");
    expect_closest("warmup_step", keys, nk, "warmup_steps");
    expect_closest("gradclip", keys, nk, "grad_clip");
    expect_closest("micro_batch", keys, nk, "micro_batches");
    expect_closest("Lr", keys, nk, "lr");
    expect_closest("lt", keys, nk, "lr");
    expect_closest("beta3", keys, nk, "beta1");         /* tie beta1/beta2: strcmp order */
    expect_closest("warmup", keys, nk, NULL);           /* 6 letters from warmup_steps */
    expect_closest("learning_rate", keys, nk, NULL);
    const char *kinds[] = {"matmul", "bias_add", "add", "relu", "gelu", "matmul_nt", "add_bcast",
                           "embedding", "layernorm", "softmax", "attention", "mse_loss", "cross_entropy"};
    int nkind = (int)(sizeof kinds / sizeof *kinds);
    expect_closest("matmult", kinds, nkind, "matmul");
    expect_closest("rellu", kinds, nkind, "relu");      /* not gelu (2 edits) */
    expect_closest("gelu2", kinds, nkind, "gelu");
    expect_closest("laynorm", kinds, nkind, "layernorm");
    expect_closest("atention", kinds, nkind, "attention");
    expect_closest("crossentropy", kinds, nkind, "cross_entropy");
    expect_closest("mse", kinds, nkind, NULL);
    const char *sections[] = {"model", "dims", "input", "param", "op", "block", "train", "cluster", "plan"};
    expect_closest("trian", sections, 9, "train");
    expect_closest("prams", sections, 9, "param");
    expect_closest("ops", sections, 9, "op");
    expect_closest("dim", sections, 9, "dims");
    /* very long words and candidates: no suggestion, no trouble */
    static char longw[400];
    memset(longw, 'a', sizeof longw - 1);
    const char *lc[] = {longw, "aaaa"};
    expect_closest(longw, lc + 1, 1, NULL);
    expect_closest("aaab", lc, 2, "aaaa");
    char buf[64];
    const char *sug = fe_suggest("fc2.ww", params, np, buf, sizeof buf);
    CHECK(sug && strcmp(sug, "did you mean 'fc2.w'?") == 0, "fe_suggest: \"did you mean 'fc2.w'?\"");
}

/* ---------------------------------------------------------------- good specs */

static int tid(const ir_graph *g, const char *name) { return ir_find_tensor(g, name); }

static int shape_is(const ir_graph *g, const char *name, int ndim, int64_t d0, int64_t d1)
{
    int t = tid(g, name);
    if (t < 0 || g->t[t].ndim != ndim) return 0;
    return g->t[t].shape[0] == d0 && (ndim < 2 || g->t[t].shape[1] == d1);
}

/* Load path (sets) expecting success; prints stderr on failure. */
static int load_ok(const char *label, const char *path, const char *const *sets, int nset, ir_graph *g)
{
    static char err[1 << 16];
    int rc = load_capture(path, sets, nset, g, err, sizeof err);
    CHECK(rc == 0 && err[0] == '\0', "%s loads", label);
    if (rc) printf("      status %d, stderr:\n%s\n", rc, err);
    return rc == 0;
}

static void test_mlp(const char *examples)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/mlp.ini", examples);
    ir_graph g;
    if (!load_ok("examples/mlp.ini", path, NULL, 0, &g)) return;
    CHECK(strcmp(g.model, "mlp") == 0 && g.seed == 1337, "mlp: model name and seed");
    CHECK(g.nop == 9 && tid(&g, "x") == 0 && tid(&g, "fc1.w") == 2, "mlp: 9 ops, tensors in file order");
    CHECK(shape_is(&g, "h1", 2, 32, 128) && shape_is(&g, "pred", 2, 32, 16) && shape_is(&g, "loss", 1, 1, 0),
          "mlp: shapes inferred (h1 [32,128], pred [32,16], loss [1])");
    int pred = tid(&g, "pred"), x = tid(&g, "x");
    CHECK(g.t[x].batch_dim == 0 && g.t[pred].batch_dim == 0 && g.t[x].data == IR_DATA_NORMAL,
          "mlp: batch dim 0 on x and propagated to pred");
    int w3 = tid(&g, "fc3.w"), b1 = tid(&g, "fc1.b"), w2 = tid(&g, "fc2.w");
    CHECK(g.t[w3].init == IR_INIT_UNIFORM && g.t[w3].init_a == -0.05 && g.t[w3].init_b == 0.05 &&
              g.t[b1].init == IR_INIT_ZEROS && g.t[w2].init == IR_INIT_NORMAL && g.t[w2].init_a == 0.02,
          "mlp: param initialisers (uniform, zeros, default normal 0.02)");
    const ir_train *t = &g.train;
    CHECK(t->loss == tid(&g, "loss") && g.t[t->loss].kind == IR_T_LOSS && t->optimizer == IR_OP_ADAMW &&
              t->lr == 1e-3 && t->beta1 == 0.9 && t->beta2 == 0.999 && t->eps == 1e-8 && t->steps == 20 &&
              t->micro_batches == 2 && t->data_period == 2 && t->weight_decay == 0,
          "mlp: [train] settings");
    CHECK(g.req.devices == 1 && strcmp(g.req.policy, "dp") == 0 && strcmp(g.file, path) == 0,
          "mlp: [cluster] and [plan]");
    ir_graph_verify(&g);
    ir_graph_free(&g);
}

static void test_mlp_block(const char *examples)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/mlp-block.ini", examples);
    ir_graph g;
    if (!load_ok("examples/mlp-block.ini", path, NULL, 0, &g)) return;
    CHECK(g.nblk == 1 && strcmp(g.blk[0].name, "h") == 0 && g.blk[0].repeat == 3, "block: one block h, repeat 3");
    int w0 = tid(&g, "h.0.w"), w1 = tid(&g, "h.1.w"), w2 = tid(&g, "h.2.w");
    CHECK(w0 >= 0 && w1 >= 0 && w2 >= 0 && w0 != w1 && tid(&g, "h.w") < 0 && tid(&g, "h.3.w") < 0 &&
              shape_is(&g, "h.1.w", 2, 128, 128) && g.t[tid(&g, "h.2.b")].init == IR_INIT_ZEROS,
          "block: params unrolled h.0.w h.1.w h.2.w (h.w gone)");
    int f0 = ir_find_op(&g, "h.0.fc"), f1 = ir_find_op(&g, "h.1.fc"), r2 = ir_find_op(&g, "h.2.res");
    CHECK(f0 >= 0 && f1 >= 0 && r2 >= 0 && g.op[f0].in[0] == tid(&g, "x0") && g.op[f1].in[0] == tid(&g, "h.0.out") &&
              g.op[f1].in[1] == w1 && g.op[r2].in[0] == tid(&g, "h.1.out"),
          "block: h.in is x0 for repeat 0, h.(r-1).out after");
    int head = ir_find_op(&g, "head");
    CHECK(head >= 0 && g.op[head].in[0] == tid(&g, "h.2.out") && tid(&g, "xL") < 0,
          "block: out name xL resolves to h.2.out");
    CHECK(g.op[f1].block == 0 && g.op[f1].rep == 1 && g.op[r2].rep == 2 && g.op[head].block == -1 &&
              g.op[head].rep == -1 && g.nop == 3 + 4 * 3,
          "block: ops carry block and repeat");
    ir_graph_verify(&g);
    ir_graph_free(&g);
}

static const char small[] =
    "; a small spec for the positive tests\n"
    "[dims]\n"
    "B = 8\n"
    "C = (B+4)*2/3      ; 8\n"
    "D = 2*C - 1        ; 15\n"
    "V = 7\n"
    "[op loss]\n"               /* ops in any order */
    "kind = cross_entropy\n"
    "in = logits, tok\n"
    "out = loss\n"
    "[input x]\n"
    "shape = B (C + 1)\n"
    "[input tok]\n"
    "shape = B\n"
    "dtype = i32\n"
    "data = int V*2\n"
    "[param w]\n"
    "shape = (C + 1) V\n"
    "init = const 0.5\n"
    "[op fc]\n"
    "kind = matmul\n"
    "in = h, w\n"
    "out = logits\n"
    "[op act]\n"
    "kind = relu\n"
    "in = x\n"
    "out = h\n"
    "[train]\n"
    "loss = loss\n"
    "optimizer = sgd\n";

static void test_small(void)
{
    const char *p = scratch("small.ini", small);
    ir_graph g;
    if (!load_ok("small spec", p, NULL, 0, &g)) return;
    CHECK(shape_is(&g, "x", 2, 8, 9) && shape_is(&g, "w", 2, 9, 7) && shape_is(&g, "logits", 2, 8, 7),
          "dims: C = (B+4)*2/3 = 8; shapes with (C + 1)");
    int tok = tid(&g, "tok");
    CHECK(g.t[tok].dtype == IR_I32 && g.t[tok].data == IR_DATA_INT && g.t[tok].data_range == 14,
          "i32 input: data = int V*2 gives range 14");
    CHECK(g.nop == 4 && strcmp(g.op[0].name, "act") == 0 && strcmp(g.op[1].name, "fc") == 0 &&
              strcmp(g.op[2].name, "loss.stats") == 0 && strcmp(g.op[3].name, "loss") == 0,
          "ops listed out of order are added in dependency order (cross_entropy: statistics, then loss)");
    CHECK(g.op[2].kind == IR_OP_XENT_STATS && g.op[3].kind == IR_OP_XENT_LOSS && g.op[3].out[0] == tid(&g, "loss") &&
              g.t[g.op[3].out[0]].kind == IR_T_LOSS && g.op[2].iattr[IR_IA_XBLOCKS] == 1 &&
              g.op[3].fattr[IR_FA_SCALE] == 1.0 / 8,
          "cross_entropy: xent_stats (1 block of 7 columns) and xent_loss (scale 1/rows) writing the loss");
    CHECK(strcmp(g.model, "small") == 0 && g.t[tid(&g, "w")].init == IR_INIT_CONST && g.t[tid(&g, "w")].init_a == 0.5 &&
              g.train.optimizer == IR_OP_SGD && g.train.steps == 10 && g.train.data_period == 4,
          "defaults: model name from the file, steps 10, data_period 4; init const");
    ir_graph_free(&g);

    const char *sets[] = {"dims.B=14", "train.steps = 7", "param w.init=uniform -1 1",
                          "cluster.devices=4", "model.name=over", "train.lr=0.5"};
    if (!load_ok("small spec with --set", p, sets, 6, &g)) return;
    int w = tid(&g, "w");
    CHECK(shape_is(&g, "x", 2, 14, 13) && g.train.steps == 7 && g.t[w].init == IR_INIT_UNIFORM &&
              g.t[w].init_a == -1 && g.t[w].init_b == 1 && g.req.devices == 4 && strcmp(g.model, "over") == 0 &&
              g.train.lr == 0.5,
          "--set: dims, train, param (named section), new [cluster] and [model]");
    ir_graph_free(&g);
}

/* The exact message format. */
static void test_format(void)
{
    const char *p = scratch("format.ini", "[dims]\nB = 8\n\t C = B +  Z   ; a comment\n");
    static char err[4096];
    ir_graph g;
    load_capture(p, NULL, 0, &g, err, sizeof err);
    char want[1024];
    snprintf(want, sizeof want,
             "%s:3: error: dim C: unknown dim 'Z'\n"
             "  C = B +  Z   ; a comment\n"
             "  hint: define it in [dims] before it is used, e.g. Z = 64\n", p);
    CHECK(strcmp(err, want) == 0, "message format: FILE:LINE: error: / quoted line / hint");
    if (strcmp(err, want) != 0) printf("      got:\n%s      want:\n%s", err, want);
    ir_graph_free(&g);
}

/* Long lines, CR LF, a BOM, and line numbers after them. */
static void test_lines(void)
{
    size_t big = 100 * 1024;
    size_t n = strlen(small);
    char *text = malloc(n + 3 * big + 256);
    char *q = text;
    q += sprintf(q, "; ");
    memset(q, 'c', big);       /* a 100 KB comment */
    q += big;
    q += sprintf(q, "\n[model]\nname = long");
    q += sprintf(q, " ; ");
    memset(q, 'k', big);       /* a value followed by a 100 KB comment */
    q += big;
    q += sprintf(q, "\n");
    memcpy(q, small, n + 1);
    const char *p = scratch("long.ini", text);
    ir_graph g;
    if (load_ok("100 KB lines", p, NULL, 0, &g)) {
        CHECK(strcmp(g.model, "long") == 0 && g.nop == 4, "100 KB lines: values and comments read right");
        ir_graph_free(&g);
    }
    /* an error after the long lines still points at the right line */
    strcpy(q, "[dims]\nB = 8\n\nC = B/0\n");
    p = scratch("long2.ini", text);
    expect_error("line count after 100 KB lines", p, NULL, 0, "long2.ini:7: error: dim C: division by zero");

    /* CR LF line ends and a UTF-8 BOM */
    char *crlf = malloc(2 * n + 8), *c = crlf;
    c += sprintf(c, "\xEF\xBB\xBF");
    for (const char *s = small; *s; s++) {
        if (*s == '\n') *c++ = '\r';
        *c++ = *s;
    }
    *c = '\0';
    p = scratch("crlf.ini", crlf);
    if (load_ok("CR LF and BOM", p, NULL, 0, &g)) ir_graph_free(&g);
    /* the continuation diagnosis and the line number under CR LF */
    strcpy(crlf, "[dims]\r\nB = 8\r\nC = 4 +\r\n    B\r\n");
    p = scratch("crlf2.ini", crlf);
    expect_error("CR LF continuation line", p, NULL, 0, "crlf2.ini:4: error: continuation lines are not supported");
    free(crlf);
    free(text);
}

/* Is tensor name [a, b, c]? */
static int shape3(const ir_graph *g, const char *name, int64_t a, int64_t b, int64_t c)
{
    int t = tid(g, name);
    return t >= 0 && g->t[t].ndim == 3 && g->t[t].shape[0] == a && g->t[t].shape[1] == b && g->t[t].shape[2] == c;
}

/* tests/equiv/xattn.ini: cross-attention (16 queries over 24 keys) with its
 * own scale, self-attention with the default 1 / sqrt(head size). */
static void test_cross_attention(const char *tests)
{
    char p[600];
    snprintf(p, sizeof p, "%s/equiv/xattn.ini", tests);
    ir_graph g;
    if (!load_ok("xattn.ini", p, NULL, 0, &g)) return;
    int x = ir_find_op(&g, "d.0.xattn"), s = ir_find_op(&g, "d.0.attn");
    CHECK(x >= 0 && s >= 0 && g.op[x].fattr[IR_FA_SCALE] == 0.2 && g.op[s].fattr[IR_FA_SCALE] == 0.25 &&
              !g.op[x].iattr[IR_IA_CAUSAL] && shape3(&g, "d.0.q", 8, 16, 32) && shape3(&g, "d.0.k", 8, 24, 32) &&
              shape3(&g, "d.0.cy", 8, 16, 32) && shape3(&g, "d.0.clse", 8, 2, 16),
          "cross-attention: q 16 positions, k and v 24, y and lse as q; scale = 0.2, the default 1/sqrt(16)");
    ir_graph_free(&g);
}

/* A minimal manifest with one param (NAME, 1-D of N elements), one int
 * input (RANGE), the given model name and arena bytes: does the runtime's
 * reader take it? */
static int manifest_ok(const char *model, long long arena, const char *name, long long n, long long range,
                       char *err, size_t errsz)
{
    ir_buf b = {0};
    ir_bprintf(&b, "nnsc-manifest 1\nmodel %s\nrank 0 world 1\narena %lld\nsteps 1\nmicro_batches 1\nseed 1\n"
               "lr 0.1\nparam 0 %s f32 1 %lld box 0 %lld init zeros 0 0 off 0 writer 1\n"
               "input 0 t i32 1 4 dist int %lld period 1\nend\n", model, arena, name, n, n, range);
    rt_manifest m;
    err[0] = '\0';
    int bad = rt_manifest_parse(b.s, &m, err, errsz);
    if (!bad) rt_manifest_free(&m);
    ir_buf_free(&b);
    return !bad;
}

/* The limits the compiler checks (ir.h: IR_MAX_*) are the runtime's
 * manifest reader's: a value at the limit is taken, one past it refused. */
static void test_runtime_limits(void)
{
    char err[512], name[IR_MAX_NAME + 2];
    memset(name, 'n', sizeof name - 1);
    name[IR_MAX_NAME + 1] = '\0';   /* one byte too long */
    long long A = IR_MAX_ARENA, N = IR_MAX_NUMEL, R = IR_MAX_RANGE;
    CHECK(manifest_ok("m", A, "w", N, R, err, sizeof err), "a manifest at every limit loads (%s)", err);
    CHECK(!manifest_ok(name, A, "w", N, R, err, sizeof err) && strstr(err, "255"),
          "a model name of %d bytes is refused: %s", IR_MAX_NAME + 1, err);
    CHECK(!manifest_ok("m", A, name, N, R, err, sizeof err) && strstr(err, "255"),
          "a tensor name of %d bytes is refused: %s", IR_MAX_NAME + 1, err);
    name[IR_MAX_NAME] = '\0';
    CHECK(manifest_ok(name, A, name, N, R, err, sizeof err), "names of %d bytes load (%s)", IR_MAX_NAME, err);
    CHECK(!manifest_ok("m", A + 1, "w", N, R, err, sizeof err), "an arena of 2^46 + 1 bytes is refused: %s", err);
    CHECK(!manifest_ok("m", A, "w", N + 1, R, err, sizeof err), "a tensor of 2^40 + 1 elements is refused: %s", err);
    CHECK(!manifest_ok("m", A, "w", N, R + 1, err, sizeof err), "an int range of 2^31 is refused: %s", err);
}

/* The [plan] lists read into the plan record (frontend/planspec.c): typed
 * items as the passes take them, and each syntax error at its key. */
static void test_plan_lists(const char *examples)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/gpt2-tiny.ini", examples);
    const char *sets[] = {"plan.trans=h.fc *1 2 replicate 2, lm_head *0 2,", "plan.coshard=h.attn h 2, h.fc *1 4",
                          "plan.stage=h.0-1 0, lm_head 1, tok_emb all", "plan.recompute=h.0-1:attn, h.3 h",
                          "plan.stage_tp=2, 1"};
    ir_graph g;
    if (!load_ok("plan lists", path, sets, 5, &g)) return;
    const ir_planlists *L = &g.req.L;
    CHECK(L->ntrans == 2 && !strcmp(L->trans[0].pat, "h.fc") && L->trans[0].n == 2 && !strcmp(L->trans[0].id[0], "*1") &&
              L->trans[0].parts[0] == 2 && !strcmp(L->trans[0].id[1], "replicate") && L->trans[0].parts[1] == 2 &&
              !strcmp(L->trans[1].pat, "lm_head") && L->trans[1].n == 1 && L->trans[1].parts[0] == 2,
          "trans: 2 items (a trailing comma ends the list), their splits in order");
    CHECK(L->ncos == 2 && !strcmp(L->cos[0].pat, "h.attn") && !strcmp(L->cos[0].id, "h") && L->cos[0].k == 2 &&
              L->cos[1].k == 4 && !strcmp(L->cos[1].id, "*1"),
          "coshard: 2 items");
    CHECK(L->nstage == 3 && !strcmp(L->stage[0].item, "h.0-1") && L->stage[0].k == 0 && !L->stage[0].all &&
              L->stage[1].k == 1 && L->stage[2].all,
          "stage: 3 items, 'all' marked");
    int hb = g.nblk > 0 && !strcmp(g.blk[0].name, "h") ? 0 : -1;
    CHECK(hb == 0 && L->nrc == 3 && L->rc[0].blk == 0 && L->rc[0].lo == 0 && L->rc[0].hi == 1 && L->rc[0].attn &&
              L->rc[1].lo == 3 && L->rc[1].hi == 3 && !L->rc[1].attn && L->rc[2].hi == -1,
          "recompute: h.0-1:attn, h.3, h (every repeat)");
    CHECK(L->nstage_tp == 2 && L->stage_tp[0] == 2 && L->stage_tp[1] == 1, "stage_tp: 2 1");
    /* a clone shares the strings and lists, owns its arrays: what is added to it is its own */
    ir_graph c;
    ir_graph_clone(&c, &g);
    int64_t sh[1] = {4};
    int nt = g.nt, t = ir_add_tensor(&c, "clone.only", IR_F32, IR_T_ACT, 1, sh, 0);
    CHECK(c.nop == g.nop && c.nblk == g.nblk && t == nt && c.nt == nt + 1 && g.nt == nt && c.req.L.ntrans == 2 &&
              c.req.L.trans == g.req.L.trans && c.t[0].name == g.t[0].name && ir_find_tensor(&g, "clone.only") < 0,
          "ir_graph_clone: the same graph, its own arrays");
    ir_graph_free(&c);
    CHECK(!strcmp(g.req.L.trans[0].pat, "h.fc") && g.nt == nt, "ir_graph_clone: the source intact after the clone is freed");
    ir_graph_free(&g);
    static const struct { const char *set, *want; } bad[] = {
        {"plan.trans=h.fc *1", "[plan] trans: bad split '*1 ' for h.fc"},
        {"plan.trans=h.fc *1 2,, lm_head *0 2", "[plan] trans: empty constraint"},
        {"plan.trans=h.fc", "[plan] trans: 'h.fc' has no split"},
        {"plan.coshard=h.fc *1 0", "[plan] coshard: 'h.fc *1 0' is not OPS IDENT K"},
        {"plan.stage=h.0-1", "[plan] stage: 'h.0-1' is not ITEM STAGE"},
        {"plan.stage=h.0-1 1x", "[plan] stage: 'h.0-1 1x' is not ITEM STAGE"},
        {"plan.recompute=g", "[plan] recompute: 'g' is not a block"},
        {"plan.recompute=h.x", "[plan] recompute: 'h.x' is not a block"},
        {"plan.stage_tp=2 x", "[plan] stage_tp: '2 x' is not a list of positive integers"},
        {"plan.stage_tp=2 0", "is not a list of positive integers"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const char *one[] = {bad[k].set};
        const char *want[] = {bad[k].want, "--set plan."};
        expect_errors(bad[k].set, path, one, 1, want, 2);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s TESTS_DIR [EXAMPLES_DIR]\n", argv[0]);
        return 2;
    }
    const char *tests = argv[1];
    char examples[512];
    if (argc > 2) snprintf(examples, sizeof examples, "%s", argv[2]);
    else snprintf(examples, sizeof examples, "%s/../examples", tests);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_frontend.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_suggest();
    test_runtime_limits();
    test_bad_dir(tests);
    test_bad_generated();
    test_mlp(examples);
    test_mlp_block(examples);
    test_small();
    test_format();
    test_lines();
    test_cross_attention(tests);
    test_plan_lists(examples);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_done();
}
