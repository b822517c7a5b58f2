/* outline.c -- repeated layers stay loops: runs of instructions that repeat
 * per repeat of a block become one call of a body.
 *
 * The frontend unrolls a [block] into ops tagged with (block, repeat), and
 * lowering tags every instruction it makes with that provenance (pg_instr
 * blk, rep; fusion keeps it when a chain's members agree).  Per section,
 * the instructions of one repeat form a run (maximal, consecutive, one
 * provenance); the runs of consecutive repeats follow each other, ascending
 * in the forward pass, descending in the backward.  When the runs of a range
 * of repeats have the same shape -- the same kernels, argument counts,
 * floats, loop coefficients of every int, and every int of an ew (its
 * program) -- they differ only in buffer offsets and int constants: the run
 * of the first repeat in that order becomes a body whose differing operands
 * are slots, and the range becomes one call instruction whose table holds
 * one row of slot values per repeat, in call order.  Operands whose values
 * agree in every row share a slot.  Expanding a call (each row into the
 * body) gives back exactly the instructions it replaced, in order:
 * outlining changes what code is generated, never what runs.
 *
 * The longest range of runs from each start is taken, left to right (a
 * repeat whose run differs -- fusion across a layer boundary, a
 * communication only one layer needs -- stays unrolled and the range starts
 * after it).  Bodies that are the same (instructions and slots) are shared
 * between calls, so a rank has one body per distinct layer shape and
 * direction (the evaluation copy of the forward pass calls the training
 * forward's body).  Codegen (codegen/host.c) makes each body one function
 * and each call a loop over its table.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* The extent of a run: instructions [at, at + n) of one provenance. */
typedef struct ol_run {
    int at;   /* first instruction */
    int n;    /* how many */
    int rep;  /* the repeat */
} ol_run;

/* The run that starts at instruction i of ins[0 .. n) (i's provenance
 * must be a block's). */
static ol_run ol_run_at(const pg_instr *ins, int n, int i) {
    ol_run r = {i, 1, ins[i].rep};
    while (i + r.n < n && ins[i + r.n].blk == ins[i].blk && ins[i + r.n].rep == ins[i].rep) r.n++;
    return r;
}

/* May a and b be the same instruction of a body, differing only in what
 * slots can hold (buffer offsets, int constants outside an ew)? */
static int ol_same_shape(const pg_instr *a, const pg_instr *b) {
    if (a->kernel != b->kernel || a->nbuf != b->nbuf || a->nint != b->nint || a->nflt != b->nflt)
        return 0;
    if (a->kernel == PG_CALL || memcmp(a->flt, b->flt, sizeof a->flt[0] * (size_t)a->nflt)) return 0;
    for (int j = 0; j < a->nint; j++) {
        if (a->ints[j].s != b->ints[j].s || a->ints[j].m != b->ints[j].m) return 0;
        /* an ew's ints are its program (numbered by pass_fuse) and shape */
        if (a->kernel == RT_K_ew && a->ints[j].c != b->ints[j].c) return 0;
    }
    return 1;
}

/* Do runs x and y (of ins) have the same shape, instruction by instruction? */
static int ol_same_runs(const pg_instr *ins, const ol_run *x, const ol_run *y) {
    if (x->n != y->n) return 0;
    for (int k = 0; k < x->n; k++)
        if (!ol_same_shape(&ins[x->at + k], &ins[y->at + k])) return 0;
    return 1;
}

/* A body being built: the columns of its slots (one value per row). */
typedef struct ol_cols {
    int nrows;        /* rows (runs) */
    int n, cap;       /* slots, allocated */
    int64_t *v;       /* slot k's value in row r: v[k * nrows + r] */
    char *isbuf;      /* slot k holds buffer offsets (1) or int constants (0) */
} ol_cols;

/* The slot whose column is col (of kind isbuf), added when no slot has it. */
static int ol_slot(ol_cols *c, const int64_t *col, int isbuf) {
    for (int k = 0; k < c->n; k++)
        if (c->isbuf[k] == isbuf && !memcmp(&c->v[(size_t)k * c->nrows], col, sizeof *col * (size_t)c->nrows))
            return k;
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->v = ir_xrealloc(c->v, sizeof *c->v * (size_t)c->cap * (size_t)c->nrows);
        c->isbuf = ir_xrealloc(c->isbuf, (size_t)c->cap);
    }
    memcpy(&c->v[(size_t)c->n * c->nrows], col, sizeof *col * (size_t)c->nrows);
    c->isbuf[c->n] = (char)isbuf;
    return c->n++;
}

/* Are bodies a and b the same code: instructions, slots and notes?  The
 * notes keep bodies of different instructions apart even where their
 * numbers happen to be equal on this rank, so whether two bodies are
 * shared does not depend on the rank (passes/share.c: ranks of equal
 * shape share a program). */
static int ol_same_body(const pg_body *a, const pg_body *b) {
    if (a->nins != b->nins || a->nslots != b->nslots) return 0;
    for (int i = 0; i < a->nins; i++) {
        const pg_instr *x = &a->ins[i], *y = &b->ins[i];
        if (strcmp(x->note ? x->note : "", y->note ? y->note : "") != 0) return 0;
        if (!ol_same_shape(x, y) || memcmp(x->buf, y->buf, sizeof x->buf[0] * (size_t)x->nbuf) ||
            memcmp(x->bslot, y->bslot, sizeof x->bslot[0] * (size_t)x->nbuf) ||
            memcmp(x->islot, y->islot, sizeof x->islot[0] * (size_t)x->nint))
            return 0;
        for (int j = 0; j < x->nint; j++)
            if (x->ints[j].c != y->ints[j].c) return 0;
    }
    return 1;
}

/* Replace runs[0 .. nrun) of section sec (same shape, adjacent, in call
 * order) by one call appended to out: the body from runs[0] with a slot for
 * every operand that differs between runs, shared with an equal body if
 * the Program has one. */
static void ol_call(ir_prog *p, const pg_instr *ins, const ol_run *runs, int nrun, int period, int dir,
                    pg_instr *out) {
    pg_body b = {0};
    ol_cols c = {nrun, 0, 0, NULL, NULL};
    int64_t *col = ir_xmalloc(sizeof *col * (size_t)nrun);
    b.nins = b.inscap = runs[0].n;
    b.ins = ir_xmalloc(sizeof *b.ins * (size_t)b.nins);
    for (int k = 0; k < b.nins; k++) {
        pg_instr *x = &b.ins[k];
        *x = ins[runs[0].at + k];
        for (int j = 0; j < x->nbuf; j++) {
            int same = 1;
            for (int r = 0; r < nrun; r++) {
                col[r] = ins[runs[r].at + k].buf[j];
                same &= col[r] == col[0];
            }
            if (same) continue;
            x->bslot[j] = (uint16_t)(ol_slot(&c, col, 1) + 1);
            x->buf[j] = 0;
        }
        for (int j = 0; j < x->nint; j++) {
            int same = 1;
            for (int r = 0; r < nrun; r++) {
                col[r] = ins[runs[r].at + k].ints[j].c;
                same &= col[r] == col[0];
            }
            if (same) continue;
            x->islot[j] = (uint16_t)(ol_slot(&c, col, 0) + 1);
            x->ints[j].c = 0;
        }
    }
    IR_ASSERT(c.n < UINT16_MAX);
    b.nslots = c.n;
    /* the table, row by row */
    int64_t *rows = ir_xmalloc(sizeof *rows * ((size_t)nrun * (size_t)c.n + 1));
    for (int r = 0; r < nrun; r++)
        for (int s = 0; s < c.n; s++) rows[(size_t)r * c.n + s] = c.v[(size_t)s * nrun + r];
    int id = -1;
    for (int k = 0; k < p->nbody && id < 0; k++)
        if (ol_same_body(&p->body[k], &b)) id = k;
    if (id < 0) id = ir_prog_add_body(p, &b);
    free(b.ins);   /* NULL when the Program took it */
    memset(out, 0, sizeof *out);
    out->kernel = PG_CALL;
    out->body = id;
    out->nrows = nrun;
    out->tab = ir_prog_add_rows(p, rows, nrun, c.n);
    out->blk = ins[runs[0].at].blk;
    out->rep = -1;
    char note[96];
    int last = runs[nrun - 1].rep + (period - 1) * dir;
    if (period == 1) snprintf(note, sizeof note, "block %d repeats %d..%d", out->blk, runs[0].rep, last);
    else snprintf(note, sizeof note, "block %d repeats %d..%d, %d per row", out->blk, runs[0].rep, last, period);
    out->note = ir_prog_str(p, note);
    free(rows);
    free(col);
    free(c.v);
    free(c.isbuf);
}

/* Most repeats one row may cover: the memory plan may alternate buffers
 * between layers (ping-pong), so that only every other layer's run has the
 * same shape; a body of two (or more) repeats then still repeats. */
#define OL_MAXPERIOD 4

/* The run of unit u of period P in seq: P consecutive runs, as one extent. */
static ol_run ol_unit(const ol_run *seq, int P, int u) {
    const ol_run *a = &seq[u * P], *z = &seq[u * P + P - 1];
    return (ol_run){a->at, z->at + z->n - a->at, a->rep};
}

/* Outline section sec of p; returns the number of calls made. */
static int ol_section(ir_prog *p, int sec) {
    const pg_instr *ins = p->ins[sec];
    int n = p->nins[sec], nout = 0, outcap = 0, calls = 0;
    pg_instr *out = NULL;
    ol_run *seq = NULL;
    int nseq = 0, seqcap = 0;
    /* a pipeline's steady-state loop (lower.c) is a region of its own: no run crosses its edges */
    int loop = sec == IR_SEC_MB && p->loop_iters > 0, edge[2] = {loop ? p->loop_lo : n, loop ? p->loop_hi : n};
    int lim = edge[0], nedge = 0;
    for (int i = 0; i < n;) {
        while (nedge < 2 && i == edge[nedge]) {   /* an edge reached: where it is in the output */
            if (nedge == 0) p->loop_lo = nout;
            else p->loop_hi = nout;
            nedge++;
            lim = nedge < 2 ? edge[nedge] : n;
        }
        if (ins[i].blk < 0 || ins[i].rep < 0 || ins[i].kernel == PG_CALL) {
            *IR_PUSH(out, nout, outcap) = ins[i++];
            continue;
        }
        /* the runs of consecutive repeats from here, in one direction */
        nseq = 0;
        *IR_PUSH(seq, nseq, seqcap) = ol_run_at(ins, lim, i);
        int dir = 0;
        for (int at = i + seq[0].n; at < lim && ins[at].blk == ins[i].blk && ins[at].kernel != PG_CALL;) {
            ol_run r = ol_run_at(ins, lim, at);
            int d = r.rep - seq[nseq - 1].rep;
            if (dir ? d != dir : d != 1 && d != -1) break;
            dir = d;
            *IR_PUSH(seq, nseq, seqcap) = r;
            at += r.n;
        }
        /* the period whose matching units cover the most runs (the smallest on a tie) */
        int bestP = 0, bestu = 0;
        for (int P = 1; P <= OL_MAXPERIOD && 2 * P <= nseq; P++) {
            ol_run u0 = ol_unit(seq, P, 0);
            int u = 1;
            for (; (u + 1) * P <= nseq; u++) {
                ol_run uu = ol_unit(seq, P, u);
                if (!ol_same_runs(ins, &u0, &uu)) break;
            }
            if (u >= 2 && u * P > bestu * bestP) bestP = P, bestu = u;
        }
        if (!bestP) {   /* stays unrolled */
            for (int k = 0; k < seq[0].n; k++) *IR_PUSH(out, nout, outcap) = ins[i + k];
            i += seq[0].n;
            continue;
        }
        ol_run *u = ir_xmalloc(sizeof *u * (size_t)bestu);
        for (int k = 0; k < bestu; k++) u[k] = ol_unit(seq, bestP, k);
        pg_instr *call = IR_PUSH(out, nout, outcap);
        ol_call(p, ins, u, bestu, bestP, dir, call);
        i = u[bestu - 1].at + u[bestu - 1].n;
        free(u);
        calls++;
    }
    if (loop && nedge < 2) p->loop_hi = nout;   /* the loop ends the section */
    free(seq);
    free(p->ins[sec]);
    p->ins[sec] = out;
    p->nins[sec] = nout;
    p->inscap[sec] = outcap;
    return calls;
}

/* Outline every section of p (passes.h). */
int pass_outline(ir_prog *p) {
    int calls = 0;
    for (int sec = 0; sec < IR_SEC_COUNT; sec++) calls += ol_section(p, sec);
    return calls;
}
