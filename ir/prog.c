/* prog.c -- the Program: per rank, instruction lists with arena offsets.
 *
 * A Program is what codegen/host.c turns into a rank's main(): five sections
 * of rtlib kernel calls (prologue, per-step pre, per-micro-batch, per-step
 * post, epilogue), each call with arena byte offsets, integer arguments that
 * may depend on the step and micro-batch indices, and float constants.
 * After passes/outline.c, a section may also hold call instructions: a
 * body (the instructions of one repeat of a block, some operands slots) run
 * once per row of a table that fills the slots, one row per repeat.
 * This file builds Programs, prints them (the `--dump=lower` / `--dump=prog`
 * and golden format) and checks them against the argument counts of
 * rt_kernels.h (a call: every body instruction with every row filled in).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "codegen.h"   /* RT_K_* ids and cg_kernel_names */
#include "rt_ew.h"
#include "rt_kext.h"

/* Each kernel's contract (index RT_K_*), from its row in rt_kernels.h: the
 * minimum argument counts, and which buffers it writes (bit j: b[j]), which
 * of those it also reads or writes only in part whatever acc says (rw), and
 * the index of its acc int (-1: none), which dumps and passes (fuse.c) need. */
static const struct pg_kinfo {
    int nbuf;      /* buffer arguments */
    int nint;      /* integer arguments */
    int nflt;      /* float arguments */
    unsigned out;  /* buffers written */
    unsigned rw;   /* written buffers that are also read, or written only in part */
    int acc;       /* the acc int: acc != 0 makes every written buffer read too */
    const char *ext; /* each buffer's elements as a product of ints (rt_kext.h) */
} pg_kinfo[RT_K_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) {nbuf, nint, nflt, out, rw, acc, ext},
#include "rt_kernels.h"
#undef RT_K
};

/* Section tags as printed at the start of each instruction line. */
static const char *const pg_secname[IR_SEC_COUNT] = {"pro", "pre", "mb", "post", "epi", "epre", "eval", "epost"};

/* Every element of every buffer argument is 4 bytes (f32 or i32). */
#define PG_ELEM 4

/* An empty Program of one rank: no loss, one micro-batch, no steps. */
void ir_prog_init(ir_prog *p, int rank, int world) {
    memset(p, 0, sizeof *p);
    p->rank = rank;
    p->world = world;
    p->micro_batches = 1;
    p->loss_off = -1;
    p->arena_top = -1;
}

/* Free everything the Program owns and leave it empty. */
void ir_prog_free(ir_prog *p) {
    for (int s = 0; s < IR_SEC_COUNT; s++) free(p->ins[s]);
    free(p->reg);
    for (int k = 0; k < p->nbody; k++) free(p->body[k].ins);
    free(p->body);
    free(p->tab);
    free(p->member);
    free(p->rv);
    free(p->tabvar);
    ir_buf_free(&p->manifest);
    for (int i = 0; i < p->npool; i++) free(p->pool[i]);
    free(p->pool);
    memset(p, 0, sizeof *p);
}

static int cmp_region(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* Persistent bytes of p from its arena map (params, grads, optimizer
 * state; regions that share a buffer count once: the first at an offset). */
int64_t ir_prog_persistent(const ir_prog *p) {
    int64_t pers = 0, *r = ir_xmalloc(sizeof(int64_t) * 2 * ((size_t)p->nreg + 1));
    int n = 0;
    for (int i = 0; i < p->nreg; i++)
        if (p->reg[i].persistent) r[2 * n] = p->reg[i].off, r[2 * n++ + 1] = i;
    qsort(r, (size_t)n, 2 * sizeof(int64_t), cmp_region);
    for (int k = 0; k < n; k++)
        if (k == 0 || r[2 * k] != r[2 * k - 2]) pers += p->reg[r[2 * k + 1]].bytes;
    free(r);
    return pers;
}

/* Copy s into the Program's string pool (NULL stays NULL). */
const char *ir_prog_str(ir_prog *p, const char *s) {
    if (!s) return NULL;
    char **slot = IR_PUSH(p->pool, p->npool, p->poolcap);
    *slot = ir_xstrdup(s);
    return *slot;
}

/* Append an instruction calling kernel (RT_K_*) to section sec; the note is
 * copied.  The pointer is valid until the next ir_prog_add on that section. */
pg_instr *ir_prog_add(ir_prog *p, int sec, int kernel, const char *note) {
    IR_ASSERT(sec >= 0 && sec < IR_SEC_COUNT);
    IR_ASSERT(kernel >= 0 && kernel < RT_K_COUNT);
    /* no zeroing of the argument arrays (most of an instruction's kilobyte):
       pg_buf / pg_i / pg_f clear what they append, and nothing reads past
       nbuf / nint / nflt */
    if (p->nins[sec] == p->inscap[sec]) {
        int cap = p->inscap[sec] ? 2 * p->inscap[sec] : 16;
        IR_ASSERT(cap > p->nins[sec]);
        p->ins[sec] = ir_xrealloc(p->ins[sec], sizeof *p->ins[sec] * (size_t)cap);
        p->inscap[sec] = cap;
    }
    pg_instr *in = &p->ins[sec][p->nins[sec]++];
    in->kernel = kernel;
    in->nbuf = in->nint = in->nflt = 0;
    in->note = ir_prog_str(p, note);
    in->blk = in->rep = -1;
    in->body = in->nrows = in->tab = 0;
    return in;
}

/* Append body b, taking its instructions (b is left empty); its id. */
int ir_prog_add_body(ir_prog *p, pg_body *b) {
    pg_body *slot = IR_PUSH(p->body, p->nbody, p->bodycap);
    *slot = *b;
    memset(b, 0, sizeof *b);
    return p->nbody - 1;
}

/* Append nrows * nslots table values; the index of the first. */
int ir_prog_add_rows(ir_prog *p, const int64_t *rows, int nrows, int nslots) {
    int64_t n;
    IR_ASSERT(nrows >= 0 && nslots >= 0 && !ir_mul_ovf(nrows, nslots, &n) && n <= INT32_MAX - p->ntab);
    int at = p->ntab;
    ir_grow((void **)&p->tab, &p->tabcap, at + (int)n, sizeof *p->tab);
    if (n) memcpy(p->tab + at, rows, (size_t)n * sizeof *rows);
    p->ntab += (int)n;
    return at;
}

/* Body instruction k of call, row r's slots filled in (provenance cleared). */
void ir_prog_expand(const ir_prog *p, const pg_instr *call, int r, int k, pg_instr *out) {
    IR_ASSERT(call->kernel == PG_CALL && call->body >= 0 && call->body < p->nbody);
    const pg_body *b = &p->body[call->body];
    IR_ASSERT(r >= 0 && r < call->nrows && k >= 0 && k < b->nins);
    const int64_t *row = p->tab + call->tab + (int64_t)r * b->nslots;
    *out = b->ins[k];
    for (int j = 0; j < out->nbuf && j < PG_MAXBUF; j++)
        if (out->bslot[j]) out->buf[j] = row[out->bslot[j] - 1], out->bslot[j] = 0;
    for (int j = 0; j < out->nint && j < PG_MAXINT; j++)
        if (out->islot[j]) out->ints[j].c = row[out->islot[j] - 1], out->islot[j] = 0;
    out->blk = out->rep = -1;
}

/* The next kernel instruction of section sec at (*i, *k): *i the section's
 * instruction, *k the position in a call's body. */
const pg_instr *ir_prog_walk(const ir_prog *p, int sec, int *i, int *k) {
    while (*i < p->nins[sec]) {
        const pg_instr *in = &p->ins[sec][*i];
        if (in->kernel != PG_CALL) {
            ++*i;
            return in;
        }
        const pg_body *b = &p->body[in->body];
        if (*k < b->nins) return &b->ins[(*k)++];
        ++*i;
        *k = 0;
    }
    return NULL;
}

/* Append a buffer argument (arena byte offset). */
void pg_buf(pg_instr *in, int64_t off) {
    IR_ASSERT(in->nbuf < PG_MAXBUF);
    in->bslot[in->nbuf] = in->bvar[in->nbuf] = 0;
    in->buf[in->nbuf++] = off;
}

/* Append a constant integer argument. */
void pg_i(pg_instr *in, int64_t c) {
    pg_iv(in, c, 0, 0);
}

/* Append the integer argument c + s * step + m * micro_batch. */
void pg_iv(pg_instr *in, int64_t c, int64_t s, int64_t m) {
    IR_ASSERT(in->nint < PG_MAXINT);
    in->islot[in->nint] = in->ivar[in->nint] = 0;
    in->ints[in->nint++] = (pg_int){c, s, m};
}

/* Append a float argument. */
void pg_f(pg_instr *in, float f) {
    IR_ASSERT(in->nflt < PG_MAXFLT);
    in->flt[in->nflt++] = f;
}

/* ------------------------------------------------------------- printing */

/* One term `k` + name of a loop-dependent int: "+2s", "-m", "+s". */
static void pg_print_term(ir_buf *b, int64_t k, char var, int first) {
    if (k == 0) return;
    if (k < 0) ir_bprintf(b, "-");
    else if (!first) ir_bprintf(b, "+");
    /* k == INT64_MIN has no positive counterpart; print its digits as is. */
    if (k == INT64_MIN) ir_bprintf(b, "9223372036854775808");
    else if (k != 1 && k != -1) ir_bprintf(b, "%" PRId64, k < 0 ? -k : k);
    ir_bprintf(b, "%c", var);
}

/* An integer argument: "32", "s", "3+2s+8m", "-1+m". */
static void pg_print_int(ir_buf *b, pg_int v) {
    int lead = v.c != 0 || (v.s == 0 && v.m == 0);
    if (lead) ir_bprintf(b, "%" PRId64, v.c);
    pg_print_term(b, v.s, 's', !lead);
    pg_print_term(b, v.m, 'm', !lead && v.s == 0);
}

/* A float in the shortest %g form that reads back as the same float, so
 * dumps are both exact and readable (3e-4 prints as 0.0003). */
static void pg_print_float(ir_buf *b, float f) {
    char t[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(t, sizeof t, "%.*g", prec, (double)f);
        if (f != f || strtof(t, NULL) == f) break;  /* NaN never reads back equal */
    }
    ir_bprintf(b, "%s", t);
}

/* A slotted integer argument: "$3", "$3+s", "$0-2m". */
static void pg_print_slot_int(ir_buf *b, const char *mark, int slot, pg_int v) {
    ir_bprintf(b, "%s%d", mark, slot);
    pg_print_term(b, v.s, 's', 0);
    pg_print_term(b, v.m, 'm', 0);
}

/* A call line: "  mb   call          body 0 x3 rows  ; note", then one line
 * per row of its table: "         [960640 98304 2]". */
static void pg_print_call(ir_buf *b, const char *tag, const ir_prog *p, const pg_instr *in) {
    ir_bprintf(b, "  %-4s %-13s body %d x%d rows", tag, "call", in->body, in->nrows);
    if (in->note && in->note[0]) ir_bprintf(b, "  ; %s", in->note);
    ir_bprintf(b, "\n");
    if (!p || in->body < 0 || in->body >= p->nbody) return;
    int ns = p->body[in->body].nslots;
    for (int r = 0; r < in->nrows; r++) {
        if (in->tab < 0 || (int64_t)in->tab + (int64_t)(r + 1) * ns > p->ntab) break;
        ir_bprintf(b, "         [");
        for (int k = 0; k < ns; k++) {
            int64_t t = in->tab + (int64_t)r * ns + k;
            if (p->tabvar && p->tabvar[t]) ir_bprintf(b, "%sr%d", k ? " " : "", p->tabvar[t] - 1);
            else ir_bprintf(b, "%s%" PRId64, k ? " " : "", p->tab[t]);
        }
        ir_bprintf(b, "]\n");
    }
}

/* One instruction line:
 *   "  mb   matmul        b=[@0 @4096] i=[32 64 3+2s] f=[0.5]  ; note"
 * (a kernel id out of range, which the verifier reports, prints as `?`;
 * in a body, a slotted operand prints as $k).  tag: the section's name, or
 * the body's ("b3"); p, when not NULL, gives a call its table rows. */
static void pg_print_line(ir_buf *b, const char *tag, const ir_prog *p, const pg_instr *in) {
    if (in->kernel == PG_CALL) {
        pg_print_call(b, tag, p, in);
        return;
    }
    int known = in->kernel >= 0 && in->kernel < RT_K_COUNT;
    ir_bprintf(b, "  %-4s %-13s b=[", tag, known ? cg_kernel_names[in->kernel] : "?");
    /* Counts are clamped: the verifier prints instructions it rejects. */
    for (int j = 0; j < in->nbuf && j < PG_MAXBUF; j++) {
        if (in->bslot[j]) ir_bprintf(b, "%s$%d", j ? " " : "", in->bslot[j] - 1);
        else if (in->bvar[j]) ir_bprintf(b, "%s@r%d", j ? " " : "", in->bvar[j] - 1);
        else ir_bprintf(b, "%s@%" PRId64, j ? " " : "", in->buf[j]);
    }
    ir_bprintf(b, "] i=[");
    for (int j = 0; j < in->nint && j < PG_MAXINT; j++) {
        if (j) ir_bprintf(b, " ");
        if (in->islot[j]) pg_print_slot_int(b, "$", in->islot[j] - 1, in->ints[j]);
        else if (in->ivar[j]) pg_print_slot_int(b, "r", in->ivar[j] - 1, in->ints[j]);
        else pg_print_int(b, in->ints[j]);
    }
    ir_bprintf(b, "] f=[");
    for (int j = 0; j < in->nflt && j < PG_MAXFLT; j++) {
        if (j) ir_bprintf(b, " ");
        pg_print_float(b, in->flt[j]);
    }
    ir_bprintf(b, "]");
    if (in->note && in->note[0]) ir_bprintf(b, "  ; %s", in->note);
    ir_bprintf(b, "\n");
}

/* An instruction of section sec (see pg_print_line). */
static void pg_print_instr(ir_buf *b, int sec, const pg_instr *in) {
    pg_print_line(b, pg_secname[sec], NULL, in);
}

/* Print the Program in the dump format: a header, the communication volume,
 * the arena map, the instructions of every section in order, the manifest. */
void ir_prog_print(const ir_prog *p, ir_buf *b) {
    ir_bprintf(b, "prog rank %d world %d arena %" PRId64 " steps %" PRId64
                  " micro_batches %" PRId64,
               p->rank, p->world, p->arena, p->steps, p->micro_batches);
    if (p->pipelined) ir_bprintf(b, " (mb once: pipeline tasks)");
    ir_bprintf(b, " loss ");
    if (p->loss_off < 0) ir_bprintf(b, "none\n");
    else if (p->loss_var) ir_bprintf(b, "@r%d\n", p->loss_var - 1);
    else ir_bprintf(b, "@%" PRId64 "\n", p->loss_off);
    if (p->nmember > 0) {   /* a shared program: its ranks and their rows of rank variables */
        ir_bprintf(b, "shared by %d rank%s, %d rank variable%s (rN below)\n", p->nmember, p->nmember == 1 ? "" : "s",
                   p->nvar, p->nvar == 1 ? "" : "s");
        for (int m = 0; m < p->nmember; m++) {
            ir_bprintf(b, "  rank %d: [", p->member[m]);
            for (int v = 0; v < p->nvar; v++)
                ir_bprintf(b, "%s%" PRId64, v ? " " : "", p->rv[(size_t)m * p->nvar + v]);
            ir_bprintf(b, "]\n");
        }
    }
    for (int k = 0; k < IR_COMM_COUNT; k++)
        if (p->comm_bytes[k])
            ir_bprintf(b, "comm %s %" PRId64 " bytes/step\n", ir_comm_name(k), p->comm_bytes[k]);
    for (int r = 0; r < p->nreg; r++) {
        const pg_region *g = &p->reg[r];
        ir_bprintf(b, "region @%" PRId64 " +%" PRId64 " %s %s\n", g->off, g->bytes,
                   g->persistent ? "persistent" : "temp", g->name ? g->name : "?");
    }
    /* bodies first (a Program without any prints as --dump=lower always has) */
    for (int k = 0; k < p->nbody; k++) {
        const pg_body *bd = &p->body[k];
        char tag[16];
        snprintf(tag, sizeof tag, "b%d", k);
        ir_bprintf(b, "body %d: %d instructions, %d slots\n", k, bd->nins, bd->nslots);
        for (int i = 0; i < bd->nins; i++) pg_print_line(b, tag, p, &bd->ins[i]);
    }
    for (int s = 0; s < IR_SEC_COUNT; s++)
        for (int i = 0; i < p->nins[s]; i++) {
            int loop = s == IR_SEC_MB && p->loop_iters > 0;
            if (loop && i == p->loop_lo)
                ir_bprintf(b, "%s loop %" PRId64 " times, mb = the iteration {\n", pg_secname[s], p->loop_iters);
            pg_print_line(b, pg_secname[s], p, &p->ins[s][i]);
            if (loop && i + 1 == p->loop_hi) ir_bprintf(b, "%s }\n", pg_secname[s]);
        }
    if (p->manifest.n) {
        ir_bprintf(b, "manifest\n");
        const char *line = p->manifest.s;
        while (*line) {
            size_t len = strcspn(line, "\n");
            ir_bprintf(b, "  | ");
            for (size_t i = 0; i < len; i++) {   /* a template's rank variable reads {rN} */
                if (line[i] == PG_VAR_MARK) ir_bprintf(b, "{r");
                else if (line[i] == PG_VAR_END) ir_bprintf(b, "}");
                else ir_bprintf(b, "%c", line[i]);
            }
            ir_bprintf(b, "\n");
            line += len + (line[len] == '\n');
        }
    }
}

/* ----------------------------------------------------------- verifying */

/* Where a verifier failure points. */
typedef struct pg_where {
    const ir_prog *p;   /* the Program */
    int sec;            /* section */
    int idx;            /* instruction index in the section */
    const pg_instr *in; /* the instruction checked when it is not ins[sec][idx] (a body's,
                           expanded with one row of a call), else NULL */
    int body, row;      /* that body and row (-1: none) */
} pg_where;

/* Die with the failing instruction, printed, in the message. */
#define PG_CHECK(w, cond, ...)                                              \
    do {                                                                    \
        if (!(cond)) pg_fail(__FILE__, __LINE__, (w), #cond, __VA_ARGS__);  \
    } while (0)

/* Report a failed PG_CHECK: the reason, the condition and the instruction
 * it concerns (if any), through ir_die. */
__attribute__((format(printf, 5, 6)))
static _Noreturn void pg_fail(const char *file, int line, const pg_where *w,
                              const char *cond, const char *fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    ir_buf ib = {0};
    if (w->in || w->idx >= 0) {
        if (w->body >= 0) ir_bprintf(&ib, "body %d row %d: ", w->body, w->row);
        pg_print_instr(&ib, w->sec, w->in ? w->in : &w->p->ins[w->sec][w->idx]);
        ib.s[--ib.n] = 0;  /* drop the newline */
    }
    ir_die(file, line, "program of rank %d is invalid: %s [%s]%s%s", w->p->rank, why, cond,
           ib.s ? "\n" : "", ib.s ? ib.s : "");
}

/* Integer argument j when it is a constant: 1 and *v, else 0. */
static int pg_const(const pg_instr *in, int j, int64_t *v) {
    if (j >= in->nint || in->ints[j].s || in->ints[j].m) return 0;
    *v = in->ints[j].c;
    return 1;
}

/* The product of the constant ints at j0, j0 + stride, ... (cnt of them),
 * or -1 when one is loop-dependent, negative or the product overflows. */
static int64_t pg_prod(const pg_instr *in, int j0, int cnt, int stride) {
    int64_t r = 1, v;
    for (int k = 0; k < cnt; k++) {
        if (!pg_const(in, j0 + k * stride, &v) || v < 0 || ir_mul_ovf(r, v, &r)) return -1;
    }
    return r;
}

/* Elements of a box given as ndim (lo, hi) int pairs, the pair of dim d at
 * first + stride * d; -1 when one is loop-dependent, reversed or the
 * product overflows. */
static int64_t pg_box(const pg_instr *in, int first, int stride, int64_t ndim) {
    int64_t r = 1;
    for (int d = 0; d < ndim; d++) {
        int at = first + stride * d;
        if (at + 1 >= in->nint) return -1;
        /* lo and hi may move with the step or micro-batch (a data batch's
           rows), as long as they move together: the extent is constant */
        pg_int lo = in->ints[at], hi = in->ints[at + 1];
        if (lo.s != hi.s || lo.m != hi.m || hi.c < lo.c || ir_mul_ovf(r, hi.c - lo.c, &r))
            return -1;
    }
    return r;
}


/* ew: elements of buffer j its ops touch (n, or N for row broadcasts only),
 * -1 when the ints are malformed (the verifier says so). */
static int64_t pg_ew_extent(const pg_instr *in, int j) {
    int64_t n, N, nops, ext = 0;
    if (!pg_const(in, 1, &n) || !pg_const(in, 2, &N) || !pg_const(in, 3, &nops) || nops < 0 ||
        RT_EW_HEAD + 4 * nops > in->nint)
        return -1;
    for (int o = 0; o < nops; o++)
        for (int q = 1; q < 4; q++) {
            int64_t x;
            if (!pg_const(in, RT_EW_HEAD + 4 * o + q, &x)) return -1;
            if (x >= RT_EW_MEM && RT_EW_BUF(x) == j) {
                int64_t e = x >= RT_EW_ROW && x < RT_EW_ACC ? N : n;
                if (e > ext) ext = e;
            }
        }
    return ext;
}

/* Elements of buffer j that the kernel touches, as far as the ints tell
 * (a lower bound where the size depends on a group's size or on the
 * manifest), or -1 when unknown (loop-dependent sizes, buffers past the
 * documented ones). */
static int64_t pg_extent(const pg_instr *in, int j) {
    int64_t n = pg_prod(in, 0, 1, 1), ndim;
    if (in->kernel == RT_K_ew) return j < in->nbuf ? pg_ew_extent(in, j) : -1;
    if (j >= pg_kinfo[in->kernel].nbuf && in->kernel != RT_K_custom) return -1;
    {   /* the row's formula (rt_kernels.h), over the constant ints (-1: one that is not) */
        int64_t v[RT_KEXT_MAXINT];
        int ni = in->nint < RT_KEXT_MAXINT ? in->nint : RT_KEXT_MAXINT;
        for (int k = 0; k < ni; k++)
            if (!pg_const(in, k, &v[k])) v[k] = -1;
        int64_t e = rt_kext(pg_kinfo[in->kernel].ext, j, v, ni);
        if (e != RT_KEXT_VAR) return e;
    }
    switch (in->kernel) {   /* the rows whose formula says `?` */
    case RT_K_custom: {   /* id nin nout acc, then per operand: ndim, extents */
        int pos = 4;
        for (int k = 0; k < j; k++) {
            if (!pg_const(in, pos, &ndim) || ndim < 0) return -1;
            pos += 1 + (int)ndim;
        }
        return pg_const(in, pos, &ndim) && ndim >= 0 && pos + 1 + ndim <= in->nint
                   ? pg_prod(in, pos + 1, (int)ndim, 1) : -1;
    }
    case RT_K_init_param:
        return -1;  /* the box size is in the manifest */
    case RT_K_p2p: {   /* nops (dir n group peer)*: op j's buffer n floats */
        int64_t x;
        return 2 + 4 * j < in->nint && pg_const(in, 2 + 4 * j, &x) ? x : -1;
    }
    case RT_K_data:       /* input step ndim (lo hi)*: dst the box */
        return pg_const(in, 2, &ndim) ? pg_box(in, 3, 2, ndim) : -1;
    case RT_K_slice:      /* ndim acc (extent lo hi)*: src prod extent, dst the box */
        if (!pg_const(in, 0, &ndim)) return -1;
        return j == 0 ? pg_prod(in, 2, (int)ndim, 3) : pg_box(in, 3, 3, ndim);
    case RT_K_place:      /* ndim acc (extent lo hi)*: src the box, dst prod extent */
        if (!pg_const(in, 0, &ndim)) return -1;
        return j == 1 ? pg_prod(in, 2, (int)ndim, 3) : pg_box(in, 3, 3, ndim);
    default:
        /* collectives' n * group-size buffers: n is a lower bound */
        return n;
    }
}


int ir_prog_acc_index(int kernel) {
    IR_ASSERT(kernel >= 0 && kernel < RT_K_COUNT);
    return pg_kinfo[kernel].acc;
}

int ir_prog_access(const pg_instr *in, int j, int64_t *bytes) {
    IR_ASSERT(in->kernel >= 0 && in->kernel < RT_K_COUNT && j >= 0 && j < in->nbuf);
    int64_t n = pg_extent(in, j);
    int k = in->kernel, r = 0;
    /* collectives whose buffers hold n * (group size) elements: unknown here */
    if ((k == RT_K_allgather && j == 1) || (k == RT_K_reducescatter && j == 0) ||
        k == RT_K_alltoall || k == RT_K_init_param)
        n = -1;
    *bytes = n < 0 || ir_mul_ovf(n, PG_ELEM, &n) ? -1 : n;
    if (k == RT_K_ew) {
        int64_t nops = 0, x;
        pg_const(in, 3, &nops);
        for (int o = 0; o < nops && RT_EW_HEAD + 4 * o + 3 < in->nint; o++)
            for (int q = 1; q < 4; q++) {
                if (!pg_const(in, RT_EW_HEAD + 4 * o + q, &x) || x < RT_EW_MEM || RT_EW_BUF(x) != j)
                    continue;
                if (q == 1) r |= x >= RT_EW_ACC ? PG_RD | PG_WR | PG_PART : PG_WR;
                else r |= PG_RD;
            }
        return r;
    }
    if (k == RT_K_p2p) {   /* op j receives (dir 1: writes all of it) or sends (reads it) */
        int64_t dir = 1;
        if (1 + 4 * j >= in->nint || !pg_const(in, 1 + 4 * j, &dir)) return PG_RD | PG_WR | PG_PART;
        return dir ? PG_WR : PG_RD;
    }
    if (k == RT_K_custom) {   /* the inputs, then the outputs (written, or added into when acc) */
        int64_t nin = 0, acc = 1;
        if (!pg_const(in, 1, &nin)) return PG_RD | PG_WR | PG_PART;
        if (j < nin) return PG_RD;
        return pg_const(in, 3, &acc) && !acc ? PG_WR : PG_RD | PG_WR | PG_PART;
    }
    const struct pg_kinfo *ro = &pg_kinfo[k];
    int64_t acc = 0;
    int acc_known = ro->acc < 0 || pg_const(in, ro->acc, &acc);
    if (ro->out >> j & 1) {
        r |= PG_WR;
        if ((ro->rw >> j & 1) || !acc_known || acc) r |= PG_RD | PG_PART;
    } else {
        r |= PG_RD;
    }
    /* embedding_bwd with acc = 0 zeroes the whole table first: a full write */
    return r;
}

/* ew's program: op and operand codes valid, buffers named exist, registers
 * written before they are read, the ints fit the CUDA argument block. */
static void pg_verify_ew(const pg_where *w, const pg_instr *in) {
    int64_t n, N, nops, v[4];
    PG_CHECK(w, pg_const(in, 1, &n) && pg_const(in, 2, &N) && pg_const(in, 3, &nops),
             "ew: n, N and nops must be constants");
    PG_CHECK(w, n >= 0 && N >= 1 && nops >= 1 && nops <= RT_EW_MAXOPS,
             "ew: n %" PRId64 ", N %" PRId64 ", %" PRId64 " ops", n, N, nops);
    PG_CHECK(w, in->nint == RT_EW_HEAD + 4 * nops, "ew: %d ints for %" PRId64 " ops", in->nint, nops);
    PG_CHECK(w, in->nbuf <= RT_EW_NBUF, "ew: %d buffers", in->nbuf);
    unsigned written = 0;  /* registers written so far */
    for (int o = 0; o < nops; o++) {
        for (int q = 0; q < 4; q++)
            PG_CHECK(w, pg_const(in, RT_EW_HEAD + 4 * o + q, &v[q]), "ew: op %d is not constant", o);
        PG_CHECK(w, v[0] >= 0 && v[0] < RT_EW_NOPS_KIND, "ew: op %d has kind %" PRId64, o, v[0]);
        int nsrc = rt_ew_nsrc(v[0]);
        for (int q = 2; q < 2 + nsrc; q++) {
            int64_t x = v[q];
            PG_CHECK(w, (x >= 0 && x < RT_EW_NREG) ||
                            (x >= RT_EW_MEM && x < RT_EW_MEM + RT_EW_NBUF) ||
                            (x >= RT_EW_ROW && x < RT_EW_ROW + RT_EW_NBUF),
                     "ew: op %d reads operand %" PRId64, o, x);
            if (x < RT_EW_MEM)
                PG_CHECK(w, x < RT_EW_NREG && (written >> x & 1), "ew: op %d reads register %" PRId64
                         " before it is written", o, x);
            else
                PG_CHECK(w, RT_EW_BUF(x) < in->nbuf, "ew: op %d reads buffer %" PRId64, o, RT_EW_BUF(x));
        }
        int64_t d = v[1];
        PG_CHECK(w, (d >= 0 && d < RT_EW_NREG) || (d >= RT_EW_MEM && d < RT_EW_MEM + RT_EW_NBUF) ||
                        (d >= RT_EW_ACC && d < RT_EW_ACC + RT_EW_NBUF),
                 "ew: op %d writes operand %" PRId64, o, d);
        if (d < RT_EW_MEM) {
            PG_CHECK(w, d < RT_EW_NREG, "ew: op %d writes register %" PRId64, o, d);
            written |= 1u << d;
        } else {
            PG_CHECK(w, RT_EW_BUF(d) < in->nbuf, "ew: op %d writes buffer %" PRId64, o, RT_EW_BUF(d));
        }
    }
}

/* Checks of the variable-length kernels (data, slice, ew): the int count
 * follows from ndim, and slice boxes lie inside their source. */
static void pg_verify_var(const pg_where *w, const pg_instr *in) {
    int64_t ndim, ext, lo, hi;
    if (in->kernel == RT_K_ew) {
        pg_verify_ew(w, in);
    } else if (in->kernel == RT_K_data) {
        PG_CHECK(w, pg_const(in, 2, &ndim), "data: ndim must be a constant");
        PG_CHECK(w, ndim >= 0 && ndim <= IR_MAXDIM, "data: ndim %" PRId64 " out of range", ndim);
        PG_CHECK(w, in->nint == 3 + 2 * ndim, "data: %d ints for ndim %" PRId64, in->nint, ndim);
    } else if (in->kernel == RT_K_slice || in->kernel == RT_K_place) {
        PG_CHECK(w, pg_const(in, 0, &ndim), "slice: ndim must be a constant");
        PG_CHECK(w, ndim >= 1 && ndim <= IR_MAXDIM, "slice: ndim %" PRId64 " out of range", ndim);
        PG_CHECK(w, in->nint == 2 + 3 * ndim, "slice: %d ints for ndim %" PRId64, in->nint, ndim);
        for (int d = 0; d < ndim; d++) {
            if (!pg_const(in, 2 + 3 * d, &ext) || !pg_const(in, 3 + 3 * d, &lo) ||
                !pg_const(in, 4 + 3 * d, &hi))
                continue;
            PG_CHECK(w, 0 <= lo && lo <= hi && hi <= ext,
                     "slice: dim %d range [%" PRId64 ", %" PRId64 ") outside extent %" PRId64, d,
                     lo, hi, ext);
        }
    }
}

/* Check one instruction of section sec. */
static void pg_verify_instr(const pg_where *w, const pg_instr *in) {
    const ir_prog *p = w->p;
    PG_CHECK(w, in->kernel >= 0 && in->kernel < RT_K_COUNT, "kernel id %d", in->kernel);
    for (int j = 0; j < in->nbuf && j < PG_MAXBUF; j++)
        PG_CHECK(w, !in->bslot[j], "buffer %d is a slot outside a body", j);
    for (int j = 0; j < in->nint && j < PG_MAXINT; j++)
        PG_CHECK(w, !in->islot[j], "int %d is a slot outside a body", j);
    /* rank variables (a shared program's, passes/share.c) name one of its variables */
    for (int j = 0; j < in->nbuf && j < PG_MAXBUF; j++)
        PG_CHECK(w, in->bvar[j] <= p->nvar, "buffer %d is rank variable %d of %d", j, in->bvar[j] - 1, p->nvar);
    for (int j = 0; j < in->nint && j < PG_MAXINT; j++)
        PG_CHECK(w, in->ivar[j] <= p->nvar, "int %d is rank variable %d of %d", j, in->ivar[j] - 1, p->nvar);
    const struct pg_kinfo *k = &pg_kinfo[in->kernel];
    PG_CHECK(w, in->nbuf >= k->nbuf && in->nbuf <= PG_MAXBUF, "%d buffers, kernel takes %d",
             in->nbuf, k->nbuf);
    if (in->kernel == RT_K_p2p) {   /* nops, then (dir n group peer) per op: one buffer each */
        int64_t nops, dir;
        PG_CHECK(w, pg_const(in, 0, &nops) && nops >= 1 && nops <= 6 && in->nbuf == nops &&
                        in->nint == 1 + 4 * nops, "p2p: %d buffers, %d ints", in->nbuf, in->nint);
        for (int j = 0; j < in->nbuf; j++)
            PG_CHECK(w, pg_const(in, 1 + 4 * j, &dir) && (dir == 0 || dir == 1), "p2p op %d: direction", j);
    }
    PG_CHECK(w, in->nint >= k->nint && in->nint <= PG_MAXINT, "%d ints, kernel takes %d",
             in->nint, k->nint);
    PG_CHECK(w, in->nflt >= k->nflt && in->nflt <= PG_MAXFLT, "%d floats, kernel takes %d",
             in->nflt, k->nflt);
    /* Loop variables exist only inside their loops. */
    for (int j = 0; j < in->nint; j++) {
        int has_step = w->sec != IR_SEC_PROLOGUE && w->sec != IR_SEC_EPILOGUE;
        PG_CHECK(w, has_step || in->ints[j].s == 0, "int %d uses the step outside the step loop", j);
        PG_CHECK(w, w->sec == IR_SEC_MB || w->sec == IR_SEC_EVAL || in->ints[j].m == 0,
                 "int %d uses the micro-batch outside the micro-batch loop", j);
        /* a pipeline's tasks are unrolled: the mb is the steady state's iteration, only in it */
        PG_CHECK(w, !p->pipelined || w->sec != IR_SEC_MB || in->ints[j].m == 0 ||
                        (p->loop_iters > 0 && w->idx >= p->loop_lo && w->idx < p->loop_hi),
                 "int %d uses the micro-batch outside the pipeline's loop", j);
    }
    pg_verify_var(w, in);
    for (int j = 0; j < in->nbuf; j++) {
        int64_t off = in->buf[j], n = pg_extent(in, j), end;
        PG_CHECK(w, off >= 0 && off < p->arena, "buffer %d at @%" PRId64 " outside the arena of %"
                 PRId64 " bytes", j, off, p->arena);
        PG_CHECK(w, off % PG_ELEM == 0, "buffer %d at @%" PRId64 " not %d-byte aligned", j, off,
                 PG_ELEM);
        if (n < 0) continue;
        PG_CHECK(w, !ir_mul_ovf(n, PG_ELEM, &end) && !ir_add_ovf(end, off, &end) &&
                     end <= p->arena,
                 "buffer %d: %" PRId64 " elements at @%" PRId64 " run past the arena of %" PRId64
                 " bytes", j, n, off, p->arena);
    }
}

/* Check body k on its own: kernel instructions only, argument counts in
 * range, every slot in range and used, a slotted operand holding 0. */
static void pg_verify_body(const ir_prog *p, int k) {
    const pg_body *b = &p->body[k];
    pg_where w = {p, IR_SEC_PROLOGUE, -1, NULL, k, -1};
    PG_CHECK(&w, b->nins >= 1 && b->ins, "body %d has %d instructions", k, b->nins);
    PG_CHECK(&w, b->nslots >= 0 && b->nslots < UINT16_MAX, "body %d has %d slots", k, b->nslots);
    char *used = ir_xcalloc((size_t)b->nslots + 1, 1);
    for (int i = 0; i < b->nins; i++) {
        const pg_instr *in = &b->ins[i];
        w.in = in;
        PG_CHECK(&w, in->kernel >= 0 && in->kernel < RT_K_COUNT, "body %d: kernel id %d", k, in->kernel);
        PG_CHECK(&w, in->nbuf >= 0 && in->nbuf <= PG_MAXBUF && in->nint >= 0 && in->nint <= PG_MAXINT,
                 "body %d: argument counts", k);
        for (int j = 0; j < in->nbuf; j++) {
            int sl = in->bslot[j];
            PG_CHECK(&w, sl <= b->nslots, "body %d: buffer %d is slot %d of %d", k, j, sl - 1, b->nslots);
            PG_CHECK(&w, !sl || in->buf[j] == 0, "body %d: slotted buffer %d holds %" PRId64, k, j, in->buf[j]);
            if (sl) used[sl - 1] = 1;
        }
        for (int j = 0; j < in->nint; j++) {
            int sl = in->islot[j];
            PG_CHECK(&w, sl <= b->nslots, "body %d: int %d is slot %d of %d", k, j, sl - 1, b->nslots);
            PG_CHECK(&w, !sl || in->ints[j].c == 0, "body %d: slotted int %d holds %" PRId64, k, j,
                     in->ints[j].c);
            if (sl) used[sl - 1] = 1;
        }
    }
    w.in = NULL;
    for (int s = 0; s < b->nslots; s++) PG_CHECK(&w, used[s], "body %d: slot %d is not used", k, s);
    free(used);
}

/* Check call instruction `call` of section w->sec: its body and table
 * exist, and every instruction it runs -- each body instruction with each
 * row filled in -- passes the checks of an instruction of that section. */
static void pg_verify_call(const pg_where *w, const pg_instr *call) {
    const ir_prog *p = w->p;
    PG_CHECK(w, call->body >= 0 && call->body < p->nbody, "call of body %d of %d", call->body, p->nbody);
    const pg_body *b = &p->body[call->body];
    int64_t need;
    PG_CHECK(w, call->nrows >= 1 && call->tab >= 0 && !ir_mul_ovf(call->nrows, b->nslots, &need) &&
                    need <= p->ntab - call->tab,
             "call: %d rows of %d slots at %d, the table pool holds %d", call->nrows, b->nslots, call->tab,
             p->ntab);
    PG_CHECK(w, call->nbuf == 0 && call->nint == 0 && call->nflt == 0, "call with arguments");
    pg_where v = *w;
    v.body = call->body;
    for (v.row = 0; v.row < call->nrows; v.row++)
        for (int i = 0; i < b->nins; i++) {
            pg_instr x;
            ir_prog_expand(p, call, v.row, i, &x);
            v.in = &x;
            pg_verify_instr(&v, &x);
        }
}

/* Check the Program's invariants; die on violation. */
void ir_prog_verify(const ir_prog *p) {
    pg_where w = {p, 0, -1, NULL, -1, -1};
    PG_CHECK(&w, p->world >= 1 && p->rank >= 0 && p->rank < p->world, "rank %d of world %d",
             p->rank, p->world);
    PG_CHECK(&w, p->arena >= 0, "arena of %" PRId64 " bytes", p->arena);
    PG_CHECK(&w, p->micro_batches >= 1, "%" PRId64 " micro-batches", p->micro_batches);
    PG_CHECK(&w, p->pipelined == 0 || p->pipelined == 1, "pipelined %d", p->pipelined);
    PG_CHECK(&w, p->loop_iters == 0 || (p->pipelined && p->loop_iters >= 1 && 0 <= p->loop_lo &&
                                         p->loop_lo < p->loop_hi && p->loop_hi <= p->nins[IR_SEC_MB]),
             "the mb loop [%d, %d) of %d instructions, %" PRId64 " times", p->loop_lo, p->loop_hi,
             p->nins[IR_SEC_MB], p->loop_iters);
    PG_CHECK(&w, p->steps >= 0, "%" PRId64 " steps", p->steps);
    PG_CHECK(&w, p->loss_off == -1 || (p->loss_off >= 0 && p->loss_off % PG_ELEM == 0 &&
                                       p->loss_off <= p->arena - PG_ELEM),
             "loss at @%" PRId64 " outside the arena", p->loss_off);
    PG_CHECK(&w, p->manifest.n == 0 || strlen(p->manifest.s) == p->manifest.n,
             "manifest holds a NUL byte");
    /* a shared program: members ascending, a row of variables each, every
       variable named in range (in the manifest template too) */
    PG_CHECK(&w, p->nmember >= 0 && p->nvar >= 0 && p->nvar <= UINT16_MAX - 1 &&
                     (p->nmember == 0 || (p->member && (p->nvar == 0 || p->rv))),
             "%d members, %d rank variables", p->nmember, p->nvar);
    for (int m = 1; m < p->nmember; m++)
        PG_CHECK(&w, p->member[m] > p->member[m - 1], "members not ascending at %d", m);
    PG_CHECK(&w, p->loss_var >= 0 && p->loss_var <= p->nvar, "loss is rank variable %d of %d", p->loss_var - 1,
             p->nvar);
    for (int t = 0; p->tabvar && t < p->ntab; t++)
        PG_CHECK(&w, p->tabvar[t] <= p->nvar, "table entry %d is rank variable %d of %d", t, p->tabvar[t] - 1,
                 p->nvar);
    for (const char *c = p->manifest.s ? strchr(p->manifest.s, PG_VAR_MARK) : NULL; c; c = strchr(c + 1, PG_VAR_MARK)) {
        char *e;
        long v = strtol(c + 1, &e, 10);
        PG_CHECK(&w, e > c + 1 && *e == PG_VAR_END && v >= 0 && v < p->nvar, "manifest names rank variable %ld of %d",
                 v, p->nvar);
    }
    for (int r = 0; r < p->nreg; r++) {
        const pg_region *g = &p->reg[r];
        PG_CHECK(&w, g->off >= 0 && g->bytes >= 0 && g->off <= p->arena - g->bytes,
                 "region %s [@%" PRId64 " +%" PRId64 ") outside the arena", g->name, g->off,
                 g->bytes);
    }
    PG_CHECK(&w, p->nbody == 0 || p->body, "%d bodies and no array", p->nbody);
    PG_CHECK(&w, p->ntab >= 0 && (p->ntab == 0 || p->tab), "a table pool of %d values", p->ntab);
    for (int k = 0; k < p->nbody; k++) pg_verify_body(p, k);  /* before the calls expand them */
    for (w.sec = 0; w.sec < IR_SEC_COUNT; w.sec++) {
        PG_CHECK(&w, p->nins[w.sec] == 0 || p->ins[w.sec], "section %d has no array", w.sec);
        for (w.idx = 0; w.idx < p->nins[w.sec]; w.idx++) {
            const pg_instr *in = &p->ins[w.sec][w.idx];
            if (in->kernel == PG_CALL) pg_verify_call(&w, in);
            else pg_verify_instr(&w, in);
        }
        w.idx = -1;
    }
    /* every body is called */
    char *called = ir_xcalloc((size_t)p->nbody + 1, 1);
    for (int sec = 0; sec < IR_SEC_COUNT; sec++)
        for (int i = 0; i < p->nins[sec]; i++)
            if (p->ins[sec][i].kernel == PG_CALL) called[p->ins[sec][i].body] = 1;
    for (int k = 0; k < p->nbody; k++) {
        w = (pg_where){p, 0, -1, NULL, k, -1};
        PG_CHECK(&w, called[k], "body %d is never called", k);
    }
    free(called);
}
