/* fuse.c -- elementwise fusion, shared by the cpu and cuda targets.
 *
 * After lowering, a rank's Program is a list of rtlib kernel calls.  Runs
 * of adjacent elementwise calls that feed each other -- bias_add then gelu,
 * bias_add then the residual add, gelu_bwd then an accumulating add, ... --
 * become one `ew` call (rtlib/rt_kernels.h, op codes in rtlib/rt_ew.h): one
 * pass over memory instead of one per kernel, one launch instead of several
 * on a GPU.  The CPU runs ew tile by tile (rtlib/kernels.c), the CUDA target
 * gets one generated kernel per distinct chain (codegen/cuda.c).
 *
 * A chain is a run of instructions of one section, each of them
 *   - elementwise (bias_add, add, copy, relu, relu_bwd, gelu, gelu_bwd) with
 *     constant ints (no loop-dependent acc),
 *   - over the same number of elements n (bias_add's bias is a row of N
 *     elements read as element k % N; one N per chain),
 *   - reading a value an earlier member of the chain wrote,
 * and whose buffers are, pairwise between members, either the same range
 * or disjoint wherever one side writes (a row is disjoint from every write).
 * Then element k of every buffer depends only on element k (or k % N of a
 * row) of the others, so running all members per element gives what
 * running them one after the other does.  Each member becomes one op that
 * rounds as its kernel does: fusion never changes a result (tests compare
 * bitwise).
 *
 * A member's result is stored only when it is live after the chain: the
 * rest of the section reads a byte of that range before it is overwritten
 * (an instruction's accesses come from ir_prog_access; overwriting a prefix
 * or a suffix shrinks the range; a range that reaches the end of its
 * section is live).  Dead results stay in a
 * register, which is where the bytes are saved.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"
#include "rt_ew.h"

/* A fusable instruction as the fuser sees it. */
typedef struct fz_src {
    int op;           /* RT_EW_* */
    int nin;          /* inputs: 1 or 2 */
    int64_t in[2];    /* arena byte offsets of the inputs (a, c) */
    int row[2];       /* input is a row of N elements (bias_add's bias) */
    int64_t out;      /* arena byte offset of the output */
    int acc;          /* the output is accumulated into (acc = 1) */
    int64_t n;        /* elements */
    int64_t N;        /* row length, 0 when the instruction reads no row */
} fz_src;

/* Integer argument j when it is a constant (1, *v), else 0. */
static int fz_const(const pg_instr *in, int j, int64_t *v) {
    if (j >= in->nint || in->ints[j].s || in->ints[j].m) return 0;
    *v = in->ints[j].c;
    return 1;
}

/* Describe in as a chain member; 0 when it cannot be one. */
static int fz_decode(const pg_instr *in, fz_src *s) {
    memset(s, 0, sizeof *s);
    for (int j = 0; j < in->nint; j++)
        if (in->ints[j].s || in->ints[j].m) return 0;
    int64_t a = 0, c = 0;
    switch (in->kernel) {
    case RT_K_bias_add:  /* X bias Y; M N */
        if (!fz_const(in, 0, &a) || !fz_const(in, 1, &c) || c < 1) return 0;
        *s = (fz_src){RT_EW_ADD, 2, {in->buf[0], in->buf[1]}, {0, 1}, in->buf[2], 0, a * c, c};
        return 1;
    case RT_K_add:  /* A B Y; n acc */
        fz_const(in, 0, &a), fz_const(in, 1, &c);
        *s = (fz_src){RT_EW_ADD, 2, {in->buf[0], in->buf[1]}, {0, 0}, in->buf[2], c != 0, a, 0};
        return 1;
    case RT_K_copy:  /* X Y; n acc */
        fz_const(in, 0, &a), fz_const(in, 1, &c);
        *s = (fz_src){RT_EW_COPY, 1, {in->buf[0], 0}, {0, 0}, in->buf[1], c != 0, a, 0};
        return 1;
    case RT_K_relu:
    case RT_K_gelu:  /* X Y; n */
        fz_const(in, 0, &a);
        *s = (fz_src){in->kernel == RT_K_relu ? RT_EW_RELU : RT_EW_GELU, 1, {in->buf[0], 0},
                      {0, 0}, in->buf[1], 0, a, 0};
        return 1;
    case RT_K_relu_bwd:
    case RT_K_gelu_bwd:  /* dY Y|X dX; n acc */
        fz_const(in, 0, &a), fz_const(in, 1, &c);
        *s = (fz_src){in->kernel == RT_K_relu_bwd ? RT_EW_RELU_BWD : RT_EW_GELU_BWD, 2,
                      {in->buf[0], in->buf[1]}, {0, 0}, in->buf[2], c != 0, a, 0};
        return 1;
    default:
        return 0;
    }
}

/* Bytes of input k of s (a row: N elements) and of its output. */
static int64_t fz_in_bytes(const fz_src *s, int k) { return 4 * (s->row[k] ? s->N : s->n); }

/* Do [a, a + na) and [b, b + nb) share a byte? */
static int fz_overlap(int64_t a, int64_t na, int64_t b, int64_t nb) {
    return a < b + nb && b < a + na;
}

/* Two ranges one of which is written: fine when disjoint, or the same
 * elementwise range (same start, both n elements, neither a row). */
static int fz_ok_pair(int64_t a, int64_t na, int rowa, int64_t b, int64_t nb, int rowb) {
    if (!fz_overlap(a, na, b, nb)) return 1;
    return !rowa && !rowb && a == b && na == nb;
}

/* May t join the chain m[0 .. nm)?  Same n, one N, a value of the chain
 * read, and every write of either side the same range as, or disjoint
 * from, every access of the other. */
static int fz_joins(const fz_src *m, int nm, const fz_src *t) {
    int64_t N = 0;
    for (int k = 0; k < nm; k++)
        if (m[k].N) N = m[k].N;
    if (t->n != m[0].n || t->n <= 0 || (t->N && N && t->N != N)) return 0;
    int reads_chain = 0;
    for (int k = 0; k < nm; k++) {
        const fz_src *s = &m[k];
        int64_t ob = 4 * s->n;
        /* t's accesses against s's write */
        for (int q = 0; q < t->nin; q++) {
            if (!fz_ok_pair(t->in[q], fz_in_bytes(t, q), t->row[q], s->out, ob, 0)) return 0;
            if (!t->row[q] && t->in[q] == s->out) reads_chain = 1;
        }
        if (!fz_ok_pair(t->out, 4 * t->n, 0, s->out, ob, 0)) return 0;
        /* t's write against s's reads */
        for (int q = 0; q < s->nin; q++)
            if (!fz_ok_pair(s->in[q], fz_in_bytes(s, q), s->row[q], t->out, 4 * t->n, 0)) return 0;
    }
    /* t's own row must not overlap its own output either */
    for (int q = 0; q < t->nin; q++)
        if (t->row[q] && fz_overlap(t->in[q], fz_in_bytes(t, q), t->out, 4 * t->n)) return 0;
    return reads_chain;
}

/* The part of a range not yet overwritten: a few disjoint intervals. */
#define FZ_MAXIV 1024
typedef struct fz_live {
    int n;                   /* intervals */
    int64_t lo[FZ_MAXIV];    /* interval k is [lo[k], hi[k]) */
    int64_t hi[FZ_MAXIV];
} fz_live;

/* Remove [wlo, whi) from the live part (an interval split in two needs a
 * free slot; without one the interval stays whole: conservative). */
static void fz_kill(fz_live *L, int64_t wlo, int64_t whi) {
    for (int k = 0; k < L->n; k++) {
        int64_t lo = L->lo[k], hi = L->hi[k];
        if (whi <= lo || hi <= wlo) continue;
        if (wlo <= lo && hi <= whi) {              /* all of it */
            L->lo[k] = L->lo[--L->n], L->hi[k] = L->hi[L->n];
            k--;
        } else if (wlo <= lo) {                    /* a prefix */
            L->lo[k] = whi;
        } else if (hi <= whi) {                    /* a suffix */
            L->hi[k] = wlo;
        } else if (L->n < FZ_MAXIV) {              /* the middle: split */
            L->hi[k] = wlo;
            L->lo[L->n] = whi, L->hi[L->n++] = hi;
        }
    }
}

/* Walk instructions [from, to) of section sec over the live part L of a
 * range: 1 when one reads a byte of it, 0 when all of it is overwritten,
 * -1 when neither (L keeps what is still live). */
static int fz_scan(const ir_prog *p, int sec, int from, int to, fz_live *L) {
    for (int x = from; x < to; x++) {
        const pg_instr *in = &p->ins[sec][x];
        /* an instruction reads its inputs before it writes */
        for (int j = 0; j < in->nbuf; j++) {
            int64_t nb;
            int acc = ir_prog_access(in, j, &nb);
            if (!(acc & PG_RD)) continue;
            for (int k = 0; k < L->n; k++)
                if (fz_overlap(L->lo[k], L->hi[k] - L->lo[k], in->buf[j], nb < 0 ? INT64_MAX / 4 : nb))
                    return 1;
        }
        for (int j = 0; j < in->nbuf; j++) {
            int64_t nb;
            int acc = ir_prog_access(in, j, &nb);
            if ((acc & PG_WR) && !(acc & PG_PART) && nb >= 0) fz_kill(L, in->buf[j], in->buf[j] + nb);
        }
        if (!L->n) return 0;
    }
    return -1;
}

/* Does one of the paths of sections, each walked from its start, read the
 * live part L before overwriting it?  secs[] ends with -1; MB is walked
 * only up to `tail` (back at the point the value was written: nothing read
 * it on the way). */
static int fz_path_reads(const ir_prog *p, const int *secs, int tail, fz_live L) {
    for (int k = 0; secs[k] >= 0; k++) {
        int r = fz_scan(p, secs[k], 0, secs[k] == IR_SEC_MB ? tail : p->nins[secs[k]], &L);
        if (r >= 0) return r;
    }
    return 0;
}

/* Is [off, off + bytes) read after instruction `from` of section sec
 * before it is overwritten?  The loss, and accesses of unknown size,
 * count as reads.  After the micro-batch section every way the program
 * can go on is followed: the next micro-batch, or the post section, an
 * evaluation and then the next step or the epilogue.  In other sections
 * the end of the section counts as a read. */
static int fz_live_after(const ir_prog *p, int sec, int from, int64_t off, int64_t bytes) {
    if (p->loss_off >= 0 && fz_overlap(off, bytes, p->loss_off, 4)) return 1;
    /* persistent buffers (params, optimizer state, accumulators) are read by
       checkpoints and by later steps: always live */
    for (int g = 0; g < p->nreg; g++)
        if (p->reg[g].persistent && fz_overlap(off, bytes, p->reg[g].off, p->reg[g].bytes)) return 1;
    fz_live L = {1, {off}, {off + bytes}};
    int r = fz_scan(p, sec, from, p->nins[sec], &L);
    if (r >= 0) return r;
    if (sec != IR_SEC_MB) return 1;
    /* evaluations are not every step: each way with and without one */
    static const int paths[][8] = {
        {IR_SEC_MB, -1},
        {IR_SEC_POST, IR_SEC_PRE, IR_SEC_MB, -1},
        {IR_SEC_POST, IR_SEC_EVAL_PRE, IR_SEC_EVAL, IR_SEC_EVAL_POST, IR_SEC_PRE, IR_SEC_MB, -1},
        {IR_SEC_POST, IR_SEC_EPILOGUE, -1},
        {IR_SEC_POST, IR_SEC_EVAL_PRE, IR_SEC_EVAL, IR_SEC_EVAL_POST, IR_SEC_EPILOGUE, -1},
    };
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++)
        if (fz_path_reads(p, paths[k], from, L)) return 1;
    return 0;
}

/* Buffer slot of byte offset off in the ew instruction (added on first use);
 * -1 when all RT_EW_NBUF slots are taken. */
static int fz_slot(int64_t *slots, int *nslot, int64_t off) {
    for (int k = 0; k < *nslot; k++)
        if (slots[k] == off) return k;
    if (*nslot == RT_EW_NBUF) return -1;
    slots[*nslot] = off;
    return (*nslot)++;
}

/* Build the ew instruction of chain m[0 .. nm) (instructions ins[first ..
 * first + nm) of section sec) into *out.  Returns 0 when it does not fit
 * (too many buffers); out->ints[0] (the id) is set later. */
static int fz_build(const ir_prog *p, int sec, int first, const fz_src *m, int nm,
                    pg_instr *out) {
    int64_t slots[RT_EW_NBUF], N = 0;
    int nslot = 0, reg_of[RT_EW_MAXOPS], nreg = 0;
    int64_t ops[RT_EW_MAXOPS][4];
    for (int k = 0; k < nm; k++)
        if (m[k].N) N = m[k].N;
    for (int k = 0; k < nm; k++) {
        const fz_src *s = &m[k];
        ops[k][0] = s->op;
        for (int q = 0; q < 2; q++) {
            if (q >= s->nin) { ops[k][2 + q] = 0; continue; }
            /* the latest earlier member that wrote this range holds the value */
            int w = -1;
            for (int e = k - 1; e >= 0 && w < 0; e--)
                if (!s->row[q] && m[e].out == s->in[q]) w = e;
            if (w >= 0 && reg_of[w] >= 0) {
                ops[k][2 + q] = RT_EW_REG + reg_of[w];
            } else {
                int sl = fz_slot(slots, &nslot, s->in[q]);
                if (sl < 0) return 0;
                ops[k][2 + q] = (s->row[q] ? RT_EW_ROW : RT_EW_MEM) + sl;
            }
        }
        int sl = fz_slot(slots, &nslot, s->out);
        if (sl < 0) return 0;
        reg_of[k] = -1;
        if (s->acc) {
            ops[k][1] = RT_EW_ACC + sl;
            continue;
        }
        /* dead after the chain: overwritten whole by a later member before
         * anything outside reads it, or not read again in the section */
        int over = 0, accd = 0;
        for (int e = k + 1; e < nm && !over; e++) {
            accd |= m[e].out == s->out && m[e].acc;   /* a later member adds to it in memory */
            over = m[e].out == s->out && !m[e].acc;
        }
        if (!accd && (over || !fz_live_after(p, sec, first + nm, s->out, 4 * s->n))) {
            reg_of[k] = nreg++;
            ops[k][1] = RT_EW_REG + reg_of[k];
        } else {
            ops[k][1] = RT_EW_MEM + sl;
        }
    }
    /* a slot used only by a member whose result now lives in a register is
     * still listed: harmless (nothing reads or writes it) but kept out of
     * the instruction by renumbering the slots actually used */
    int used[RT_EW_NBUF] = {0}, map[RT_EW_NBUF], nused = 0;
    for (int k = 0; k < nm; k++)
        for (int q = 1; q < 4; q++)
            if (ops[k][q] >= RT_EW_MEM && !(q == 3 && m[k].nin < 2)) used[RT_EW_BUF(ops[k][q])] = 1;
    memset(out, 0, sizeof *out);
    out->kernel = RT_K_ew;
    for (int sl = 0; sl < nslot; sl++) {
        map[sl] = used[sl] ? nused++ : -1;
        if (used[sl]) pg_buf(out, slots[sl]);
    }
    pg_i(out, 0);        /* id: numbered once every rank is fused */
    pg_i(out, m[0].n);
    pg_i(out, N ? N : 1);
    pg_i(out, nm);
    for (int k = 0; k < nm; k++)
        for (int q = 0; q < 4; q++) {
            int64_t x = ops[k][q];
            if (q >= 1 && x >= RT_EW_MEM && !(q == 3 && m[k].nin < 2))
                x = x - RT_EW_BUF(x) + map[RT_EW_BUF(x)];
            pg_i(out, x);
        }
    return 1;
}

/* Fuse the chains of section sec of p in place; returns how many. */
static int fz_section(ir_prog *p, int sec) {
    pg_instr *ins = p->ins[sec];
    int n = p->nins[sec], w = 0, fused = 0;
    for (int i = 0; i < n;) {
        fz_src m[RT_EW_MAXOPS];
        int nm = 0;
        if (fz_decode(&ins[i], &m[0])) {
            nm = 1;
            while (i + nm < n && nm < RT_EW_MAXOPS && fz_decode(&ins[i + nm], &m[nm]) &&
                   fz_joins(m, nm, &m[nm]))
                nm++;
        }
        pg_instr e;
        if (nm >= 2 && fz_build(p, sec, i, m, nm, &e)) {
            /* the note lists the fused instructions: "a+b+c" */
            ir_buf note = {0};
            for (int k = 0; k < nm; k++)
                ir_bprintf(&note, "%s%s", k ? "+" : "", ins[i + k].note ? ins[i + k].note : "?");
            e.note = ir_prog_str(p, note.s);
            ir_buf_free(&note);
            ins[w++] = e;
            i += nm;
            fused++;
        } else {
            ins[w++] = ins[i++];
        }
    }
    p->nins[sec] = w;
    return fused;
}

/* ---- sums in place: `add(A, B, Y)` whose operands' producers can
 * accumulate (the two gradients of a tied embedding) */

/* The last instruction before `before` in section sec that writes bytes
 * [off, off + bytes): when it writes exactly that range, whole, as its only
 * output, with a constant acc = 0 it could turn into an accumulation, its
 * index (and *bj its buffer); else -1. */
static int fz_sole_writer(const ir_prog *p, int sec, int before, int64_t off, int64_t bytes,
                          int *bj) {
    for (int x = before - 1; x >= 0; x--) {
        const pg_instr *in = &p->ins[sec][x];
        int hit = -1, writes = 0;
        for (int j = 0; j < in->nbuf; j++) {
            int64_t nb;
            int acc = ir_prog_access(in, j, &nb);
            if (!(acc & PG_WR)) continue;
            writes++;
            if (!fz_overlap(in->buf[j], nb < 0 ? INT64_MAX / 4 : nb, off, bytes)) continue;
            if (in->buf[j] != off || nb != bytes || (acc & PG_PART) || hit >= 0) return -1;
            hit = j;
        }
        if (hit < 0) continue;
        int ai = ir_prog_acc_index(in->kernel);
        int64_t acc;
        if (writes != 1 || ai < 0 || !fz_const(in, ai, &acc) || acc != 0) return -1;
        *bj = hit;
        return x;
    }
    return -1;
}

/* Does an instruction of [from, to) other than skip1 / skip2 touch
 * [off, off + bytes) (any access when `any`, else reads only)? */
static int fz_touched(const ir_prog *p, int sec, int from, int to, int skip1, int skip2,
                      int64_t off, int64_t bytes, int any) {
    for (int x = from; x < to; x++) {
        if (x == skip1 || x == skip2) continue;
        const pg_instr *in = &p->ins[sec][x];
        for (int j = 0; j < in->nbuf; j++) {
            int64_t nb;
            int acc = ir_prog_access(in, j, &nb);
            if ((any || (acc & PG_RD)) &&
                fz_overlap(in->buf[j], nb < 0 ? INT64_MAX / 4 : nb, off, bytes))
                return 1;
        }
    }
    return 0;
}

/* Rewrite Y (+)= A + B, where A and B each come whole from one producer
 * that has an acc argument and both die at the add, as: the first producer
 * writes Y with the add's acc, the second adds into Y, no add.  Saves the
 * two temporaries' round trip through memory (and embedding_bwd's zeroing
 * of its table): for GPT-2's tied embedding, 3 x 154 MB per micro-batch.
 * The sum is then (Y + first) + second instead of Y + (A + B): the same up
 * to rounding.  Returns how many adds went. */
static int fz_sum_in_place(ir_prog *p, int sec) {
    int done = 0;
    for (int x = 0; x < p->nins[sec]; x++) {
        pg_instr *add = &p->ins[sec][x];
        int64_t n;
        if (add->kernel != RT_K_add || !fz_const(add, 0, &n) || n <= 0) continue;
        int64_t a = add->buf[0], b = add->buf[1], y = add->buf[2], nb = 4 * n;
        if (fz_overlap(a, nb, b, nb) || fz_overlap(a, nb, y, nb) || fz_overlap(b, nb, y, nb))
            continue;
        int ja, jb, xa = fz_sole_writer(p, sec, x, a, nb, &ja), xb = fz_sole_writer(p, sec, x, b, nb, &jb);
        if (xa < 0 || xb < 0 || xa == xb) continue;
        int first = xa < xb ? xa : xb, second = xa < xb ? xb : xa;
        /* Y untouched from the first producer on (their inputs included),
           A and B read by nothing but the add, and dead after it */
        int64_t ylo = y;
        pg_instr *pf = &p->ins[sec][first], *ps = &p->ins[sec][second];
        int jf = first == xa ? ja : jb, js = first == xa ? jb : ja;
        int ybad = fz_touched(p, sec, first, x, first, second, ylo, nb, 1);
        for (int j = 0; j < pf->nbuf && !ybad; j++)
            ybad = j != jf && fz_overlap(pf->buf[j], 1, ylo, nb);
        for (int j = 0; j < ps->nbuf && !ybad; j++)
            ybad = j != js && fz_overlap(ps->buf[j], 1, ylo, nb);
        if (ybad || fz_touched(p, sec, xa + 1, x, -1, -1, a, nb, 0) ||
            fz_touched(p, sec, xb + 1, x, -1, -1, b, nb, 0) ||
            fz_live_after(p, sec, x + 1, a, nb) || fz_live_after(p, sec, x + 1, b, nb))
            continue;
        pf->buf[jf] = y;
        pf->ints[ir_prog_acc_index(pf->kernel)] = add->ints[1];
        ps->buf[js] = y;
        ps->ints[ir_prog_acc_index(ps->kernel)] = (pg_int){1, 0, 0};
        memmove(add, add + 1, (size_t)(p->nins[sec] - x - 1) * sizeof *add);
        p->nins[sec]--;
        x--;
        done++;
    }
    return done;
}

/* Do ew instructions a and b run the same program (and so may share a
 * generated kernel)?  Buffers and n, N are arguments; ops are code. */
static int fz_same_ops(const pg_instr *a, const pg_instr *b) {
    if (a->nint != b->nint || a->nbuf != b->nbuf) return 0;
    for (int j = 3; j < a->nint; j++)
        if (a->ints[j].c != b->ints[j].c) return 0;
    return 1;
}

int pass_fuse(ir_prog *progs, int nprogs) {
    /* fuse, then number the distinct programs in order of appearance */
    const pg_instr **seen = NULL;
    int nseen = 0, cap = 0;
    for (int r = 0; r < nprogs; r++)
        for (int sec = 0; sec < IR_SEC_COUNT; sec++) {
            fz_sum_in_place(&progs[r], sec);
            fz_section(&progs[r], sec);
            for (int x = 0; x < progs[r].nins[sec]; x++) {
                pg_instr *in = &progs[r].ins[sec][x];
                if (in->kernel != RT_K_ew) continue;
                int id = -1;
                for (int k = 0; k < nseen && id < 0; k++)
                    if (fz_same_ops(seen[k], in)) id = k;
                if (id < 0) {
                    if (nseen == cap) {
                        cap = cap ? 2 * cap : 16;
                        seen = realloc(seen, (size_t)cap * sizeof *seen);
                        IR_ASSERT(seen);
                    }
                    seen[id = nseen++] = in;
                }
                in->ints[0].c = id;
            }
        }
    free(seen);
    return nseen;
}
