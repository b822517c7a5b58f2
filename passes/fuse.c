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

/* Is [off, off + bytes) read after instruction `from` of section sec
 * before an instruction overwrites all of it?  The end of the section,
 * the loss and accesses of unknown size count as reads. */
static int fz_live_after(const ir_prog *p, int sec, int from, int64_t off, int64_t bytes) {
    if (p->loss_off >= 0 && fz_overlap(off, bytes, p->loss_off, 4)) return 1;
    int64_t lo = off, hi = off + bytes;   /* the part not yet overwritten */
    for (int x = from; x < p->nins[sec]; x++) {
        const pg_instr *in = &p->ins[sec][x];
        /* an instruction reads its inputs before it writes */
        for (int j = 0; j < in->nbuf; j++) {
            int64_t nb;
            int acc = ir_prog_access(in, j, &nb);
            if ((acc & PG_RD) && fz_overlap(lo, hi - lo, in->buf[j], nb < 0 ? INT64_MAX / 4 : nb))
                return 1;
        }
        for (int j = 0; j < in->nbuf; j++) {
            int64_t nb;
            int acc = ir_prog_access(in, j, &nb);
            if (!(acc & PG_WR) || (acc & PG_PART) || nb < 0) continue;
            int64_t wlo = in->buf[j], whi = wlo + nb;
            if (wlo <= lo && hi <= whi) return 0;           /* all of it overwritten */
            if (wlo <= lo && lo < whi) lo = whi;              /* a prefix */
            else if (wlo < hi && hi <= whi) hi = wlo;         /* a suffix */
        }
    }
    return 1;
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
