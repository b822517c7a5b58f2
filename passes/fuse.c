/* fuse.c -- elementwise fusion, shared by the cpu and cuda targets.
 *
 * After lowering, a rank's Program is a list of rtlib kernel calls.  Runs
 * of adjacent elementwise calls that feed each other -- bias_add then gelu,
 * bias_add then the residual add, gelu_bwd then an accumulating add, ... --
 * become one `ew` call (rtlib/rt_kernels.h, op codes in rtlib/rt_ew.h): one
 * pass over memory instead of one per kernel, one launch instead of several
 * on a GPU.  The CPU runs ew tile by tile (rtlib/cpu/kernels.c), the CUDA target
 * gets one generated kernel per distinct chain (codegen/cuda.c).
 *
 * A chain is a run of instructions of one section, each of them
 *   - elementwise (bias_add, or a kernel of rt_ew.h's table of elementwise
 *     ops: add, mul, copy, relu, gelu, silu and their backwards) with
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

/* The kernels that are one elementwise op (rt_ew.h's RT_EW_OPS). */
static const struct {
    int kernel, code, nsrc, acc;
} fz_ew[] = {
#define FZ_EW(CODE, kernel, nsrc, acc, cpu, made, expr, ref) {RT_K_##kernel, RT_EW_##CODE, nsrc, acc},
    RT_EW_OPS(FZ_EW)
#undef FZ_EW
};

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
    default:   /* the elementwise rows of rt_ew.h: a (, c), y; n (, acc) */
        for (int k = 0; k < (int)(sizeof fz_ew / sizeof fz_ew[0]); k++) {
            if (fz_ew[k].kernel != in->kernel) continue;
            int two = fz_ew[k].nsrc == 2;
            fz_const(in, 0, &a);
            if (fz_ew[k].acc) fz_const(in, 1, &c);
            *s = (fz_src){fz_ew[k].code, fz_ew[k].nsrc, {in->buf[0], two ? in->buf[1] : 0}, {0, 0},
                          in->buf[fz_ew[k].nsrc], c != 0, a, 0};
            return 1;
        }
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

/* A pipeline's steady state is a loop (lower.c): a liveness question asked
 * before it or inside it is answered within its region -- up to the loop's
 * start, or to the end of one iteration -- and a range still live there
 * counts as read (the next iteration, or the instructions after, may read
 * it).  Conservative: a store may stay that the unrolled program would
 * drop, never the other way.  Returns the region's end for a question at
 * `from`, or -1 when the question is after the loop (or there is none):
 * then the rest of the section and the paths answer it as before.  Chains
 * and sums in place stay within one region too. */
static int fz_region_end(int lo, int hi, int from) {
    if (lo >= hi || from > hi) return -1;
    return from <= lo ? lo : hi;
}

/* The region of instruction x (0 before the loop, 1 in it, 2 after). */
static int fz_region(int lo, int hi, int x) { return lo >= hi ? 0 : x < lo ? 0 : x < hi ? 1 : 2; }

/* Is [off, off + bytes) read after instruction `from` of section sec
 * before it is overwritten?  The loss, and accesses of unknown size,
 * count as reads.  After the micro-batch section every way the program
 * can go on is followed: the next micro-batch, or the post section, an
 * evaluation and then the next step or the epilogue.  In other sections
 * the end of the section counts as a read.  This walks every instruction
 * on the way, for sums in place, which rewrite the section as they go;
 * fusion asks fz_live_after, the same question through an index. */
static int fz_live_after_walk(const ir_prog *p, int sec, int from, int64_t off, int64_t bytes) {
    if (p->loss_off >= 0 && fz_overlap(off, bytes, p->loss_off, 4)) return 1;
    /* persistent buffers (params, optimizer state, accumulators) are read by
       checkpoints and by later steps: always live */
    for (int g = 0; g < p->nreg; g++)
        if (p->reg[g].persistent && fz_overlap(off, bytes, p->reg[g].off, p->reg[g].bytes)) return 1;
    fz_live L = {1, {off}, {off + bytes}};
    int rend = sec == IR_SEC_MB && p->loop_iters > 0 ? fz_region_end(p->loop_lo, p->loop_hi, from) : -1;
    if (rend >= 0) {
        int rr = fz_scan(p, sec, from, rend, &L);
        return rr >= 0 ? rr : 1;
    }
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

/* ---- the same question through an index
 *
 * Walking the rest of the program for every chain member is quadratic in
 * a section's length.  Only instructions that access bytes of the asked
 * range can read it or overwrite part of it, so each section's accesses
 * are indexed by byte range (fz_sidx: the distinct ranges, sorted, with
 * the instructions that touch each), and a scan visits just the
 * instructions touching the range, in order: the walk's answer, since the
 * others change nothing.  While the micro-batch section is fused, its
 * array holds the fused program so far in its first w slots and the
 * original from w on; fz_view keeps the ew instructions made so far and
 * the original instructions they replace, so a walk of that section from
 * its start sees what the array holds. */

/* One buffer access of an instruction as a liveness scan sees it. */
typedef struct fz_acc {
    int64_t lo, ext;  /* bytes [lo, lo + ext) (size unknown: ext INT64_MAX / 4) */
    int rd;           /* reads them */
    int kill;         /* writes all of them (a known size): overwrites */
} fz_acc;

/* The accesses of in that can read or overwrite a range, in buffer order. */
static int fz_accesses(const pg_instr *in, fz_acc *a) {
    int n = 0;
    for (int j = 0; j < in->nbuf; j++) {
        int64_t nb;
        int acc = ir_prog_access(in, j, &nb);
        int rd = (acc & PG_RD) != 0, kill = (acc & PG_WR) && !(acc & PG_PART) && nb >= 0;
        if (rd || kill) a[n++] = (fz_acc){in->buf[j], nb < 0 ? INT64_MAX / 4 : nb, rd, kill};
    }
    return n;
}

/* One instruction's accesses over the live part L: 1 when one reads a byte
 * of it, 0 when all of it is overwritten, -1 when neither (fz_scan's step). */
static int fz_step(const fz_acc *a, int n, fz_live *L) {
    for (int j = 0; j < n; j++) {
        if (!a[j].rd) continue;
        for (int k = 0; k < L->n; k++)
            if (fz_overlap(L->lo[k], L->hi[k] - L->lo[k], a[j].lo, a[j].ext)) return 1;
    }
    for (int j = 0; j < n; j++)
        if (a[j].kill) fz_kill(L, a[j].lo, a[j].lo + a[j].ext);
    return L->n ? -1 : 0;
}

/* A section's accesses, by instruction and by byte range. */
typedef struct fz_sidx {
    int n;               /* instructions indexed */
    int *a0;             /* per instruction + 1: CSR start into acc */
    fz_acc *acc;         /* their accesses */
    int nkey;            /* distinct ranges [klo, khi) accessed */
    int64_t *klo, *khi;  /* ... ascending by (lo, hi) */
    int ksz;             /* leaves of kmx, a power of two */
    int64_t *kmx;        /* segment tree (1-based) of the largest khi below each node */
    int *kp0, *kp;       /* per key + 1: CSR start into kp: the instructions accessing the range, ascending */
} fz_sidx;

/* An access of instruction pos, for sorting by range. */
typedef struct fz_trip {
    int64_t lo, hi;  /* the range */
    int pos;         /* the instruction */
} fz_trip;

/* Orders accesses by range, then instruction. */
static int fz_cmp_trip(const void *a, const void *b) {
    const fz_trip *x = a, *y = b;
    if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
    if (x->hi != y->hi) return x->hi < y->hi ? -1 : 1;
    return x->pos - y->pos;
}

/* Index the accesses of section sec of p as it is now. */
static void fz_sidx_build(fz_sidx *S, const ir_prog *p, int sec) {
    memset(S, 0, sizeof *S);
    S->n = p->nins[sec];
    S->a0 = ir_xmalloc(sizeof(int) * ((size_t)S->n + 1));
    int cap = 16, na = 0;
    S->acc = ir_xmalloc(sizeof(fz_acc) * (size_t)cap);
    for (int x = 0; x < S->n; x++) {
        S->a0[x] = na;
        if (na + PG_MAXBUF > cap) {
            while (na + PG_MAXBUF > cap) cap *= 2;
            S->acc = ir_xrealloc(S->acc, sizeof(fz_acc) * (size_t)cap);
        }
        na += fz_accesses(&p->ins[sec][x], S->acc + na);
    }
    S->a0[S->n] = na;
    fz_trip *t = ir_xmalloc(sizeof(fz_trip) * ((size_t)na + 1));
    for (int x = 0; x < S->n; x++)
        for (int j = S->a0[x]; j < S->a0[x + 1]; j++) t[j] = (fz_trip){S->acc[j].lo, S->acc[j].lo + S->acc[j].ext, x};
    qsort(t, (size_t)na, sizeof *t, fz_cmp_trip);
    S->klo = ir_xmalloc(sizeof(int64_t) * ((size_t)na + 1));
    S->khi = ir_xmalloc(sizeof(int64_t) * ((size_t)na + 1));
    S->kp0 = ir_xmalloc(sizeof(int) * ((size_t)na + 2));
    S->kp = ir_xmalloc(sizeof(int) * ((size_t)na + 1));
    int np = 0;
    for (int j = 0; j < na; j++) {
        if (!S->nkey || t[j].lo != S->klo[S->nkey - 1] || t[j].hi != S->khi[S->nkey - 1]) {
            S->klo[S->nkey] = t[j].lo, S->khi[S->nkey] = t[j].hi;
            S->kp0[S->nkey++] = np;
        } else if (S->kp[np - 1] == t[j].pos) {
            continue;   /* the instruction accesses the range twice */
        }
        S->kp[np++] = t[j].pos;
    }
    S->kp0[S->nkey] = np;
    free(t);
    S->ksz = 1;
    while (S->ksz < S->nkey) S->ksz *= 2;
    S->kmx = ir_xmalloc(sizeof(int64_t) * 2 * (size_t)S->ksz);
    for (int k = 0; k < S->ksz; k++) S->kmx[S->ksz + k] = k < S->nkey ? S->khi[k] : INT64_MIN;
    for (int v = S->ksz - 1; v >= 1; v--)
        S->kmx[v] = S->kmx[2 * v] > S->kmx[2 * v + 1] ? S->kmx[2 * v] : S->kmx[2 * v + 1];
}

/* Free an index (zeroed: not built). */
static void fz_sidx_free(fz_sidx *S) {
    free(S->a0), free(S->acc), free(S->klo), free(S->khi), free(S->kmx), free(S->kp0), free(S->kp);
    memset(S, 0, sizeof *S);
}

/* The key of range [lo, hi) in S, or -1. */
static int fz_key_of(const fz_sidx *S, int64_t lo, int64_t hi) {
    int a = 0, b = S->nkey;
    while (a < b) {
        int mid = (a + b) / 2;
        if (S->klo[mid] < lo || (S->klo[mid] == lo && S->khi[mid] < hi)) a = mid + 1;
        else b = mid;
    }
    return a < S->nkey && S->klo[a] == lo && S->khi[a] == hi ? a : -1;
}

/* A growable list of ints. */
typedef struct fz_ints {
    int *v;
    int n, cap;
} fz_ints;

/* Append the keys among [vl, vr) below node v that end after qlo (all of
 * keys [0, to) start before the asked range ends), ascending. */
static void fz_keys(const fz_sidx *S, int v, int vl, int vr, int to, int64_t qlo, fz_ints *out) {
    if (vl >= to || S->kmx[v] <= qlo) return;
    if (vr - vl == 1) {
        *IR_PUSH(out->v, out->n, out->cap) = vl;
        return;
    }
    int mid = (vl + vr) / 2;
    fz_keys(S, 2 * v, vl, mid, to, qlo, out);
    fz_keys(S, 2 * v + 1, mid, vr, to, qlo, out);
}

/* The ew instructions fusion has made so far in the section S indexes. */
typedef struct fz_view {
    const fz_sidx *S;   /* the section as it was before fusion */
    int i, w;           /* original instructions from i on are still to fuse; the array's first w slots
                           hold the fused program (and slots w .. i - 1 still the originals) */
    char *skip;         /* per original instruction: a member of a fused chain (an ew stands for it) */
    int ne;             /* ew instructions made */
    fz_ints epos;       /* per ew: the original position of its chain's first member (ascending) */
    fz_ints ea0;        /* per ew + 1: CSR start into eacc */
    fz_acc *eacc;       /* their accesses */
    int neacc, eacccap; /* how many, allocated */
    fz_ints *kew;       /* per key of S: the ews accessing that range, ascending */
    fz_ints xe;         /* ews accessing a range S has no key for ... */
    int64_t *xlo, *xhi; /* ... and that range, per entry of xe */
    int xcap;           /* allocated entries of xlo, xhi */
} fz_view;

/* An empty view of the section S indexes. */
static void fz_view_init(fz_view *V, const fz_sidx *S) {
    memset(V, 0, sizeof *V);
    V->S = S;
    V->skip = ir_xcalloc((size_t)S->n + 1, 1);
    V->kew = ir_xcalloc((size_t)S->nkey + 1, sizeof *V->kew);
    *IR_PUSH(V->ea0.v, V->ea0.n, V->ea0.cap) = 0;
}

/* Free the view (before S, whose key count it needs). */
static void fz_view_free(fz_view *V) {
    for (int k = 0; k < V->S->nkey; k++) free(V->kew[k].v);
    free(V->kew), free(V->skip), free(V->epos.v), free(V->ea0.v), free(V->eacc);
    free(V->xe.v), free(V->xlo), free(V->xhi);
    memset(V, 0, sizeof *V);
}

/* Record ew e, standing for original instructions [i, i + nm). */
static void fz_view_add(fz_view *V, const pg_instr *e, int i, int nm) {
    for (int k = 0; k < nm; k++) V->skip[i + k] = 1;
    int id = V->ne++;
    *IR_PUSH(V->epos.v, V->epos.n, V->epos.cap) = i;
    if (V->neacc + PG_MAXBUF > V->eacccap) {
        V->eacccap = 2 * (V->neacc + PG_MAXBUF);
        V->eacc = ir_xrealloc(V->eacc, sizeof(fz_acc) * (size_t)V->eacccap);
    }
    int na = fz_accesses(e, V->eacc + V->neacc);
    for (int j = V->neacc; j < V->neacc + na; j++) {
        int64_t lo = V->eacc[j].lo, hi = lo + V->eacc[j].ext;
        int key = fz_key_of(V->S, lo, hi);
        if (key >= 0) {
            fz_ints *l = &V->kew[key];
            if (!l->n || l->v[l->n - 1] != id) *IR_PUSH(l->v, l->n, l->cap) = id;
            continue;
        }
        if (V->xe.n == V->xcap) {
            V->xcap = V->xcap ? 2 * V->xcap : 16;
            V->xlo = ir_xrealloc(V->xlo, sizeof(int64_t) * (size_t)V->xcap);
            V->xhi = ir_xrealloc(V->xhi, sizeof(int64_t) * (size_t)V->xcap);
        }
        V->xlo[V->xe.n] = lo, V->xhi[V->xe.n] = hi;
        *IR_PUSH(V->xe.v, V->xe.n, V->xe.cap) = id;
    }
    V->neacc += na;
    *IR_PUSH(V->ea0.v, V->ea0.n, V->ea0.cap) = V->neacc;
}

/* First index of sorted list v[0 .. n) whose value (the position of
 * instruction v[k], or of ew v[k] when pos is given) is >= from. */
static int fz_lower(const int *v, int n, const int *pos, int from) {
    int a = 0, b = n;
    while (a < b) {
        int mid = (a + b) / 2;
        if ((pos ? pos[v[mid]] : v[mid]) < from) a = mid + 1;
        else b = mid;
    }
    return a;
}

/* Per-prog state of fusion: the indexes of the sections and the scratch of scans. */
typedef struct fz_ctx {
    const ir_prog *p;          /* the Program being fused */
    fz_sidx idx[IR_SEC_COUNT]; /* sections indexed (n == 0 and no keys: not built) */
    fz_view view;              /* the micro-batch section while it is fused (S NULL: not) */
    int64_t *plo, *pmx;        /* persistent regions by offset, and the largest end up to each */
    int npers;                 /* how many */
    fz_ints keys, cur, ecur;   /* scratch of fz_iscan: candidate keys, their cursors */
    int lo, hi;                /* the micro-batch section's steady-state loop (original
                                  indexes; lo == hi: none), see fz_region_end */
} fz_ctx;


/* A context for p: its persistent regions sorted, no section indexed yet. */
static void fz_ctx_init(fz_ctx *F, const ir_prog *p) {
    memset(F, 0, sizeof *F);
    F->p = p;
    /* persistent buffers, as (offset, end) pairs sorted by offset */
    int64_t *pr = ir_xmalloc(sizeof(int64_t) * 2 * ((size_t)p->nreg + 1));
    for (int g = 0; g < p->nreg; g++)
        if (p->reg[g].persistent) {
            pr[2 * F->npers] = p->reg[g].off;
            pr[2 * F->npers++ + 1] = p->reg[g].off + p->reg[g].bytes;
        }
    qsort(pr, (size_t)F->npers, 2 * sizeof(int64_t), ir_cmp_i64);   /* by the first of each pair */
    F->plo = ir_xmalloc(sizeof(int64_t) * ((size_t)F->npers + 1));
    F->pmx = ir_xmalloc(sizeof(int64_t) * ((size_t)F->npers + 1));
    for (int k = 0; k < F->npers; k++) {
        F->plo[k] = pr[2 * k];
        F->pmx[k] = k && F->pmx[k - 1] > pr[2 * k + 1] ? F->pmx[k - 1] : pr[2 * k + 1];
    }
    free(pr);
}

/* Free the context's indexes and scratch. */
static void fz_ctx_free(fz_ctx *F) {
    if (F->view.S) fz_view_free(&F->view);   /* before the index it views */
    for (int s = 0; s < IR_SEC_COUNT; s++) fz_sidx_free(&F->idx[s]);
    free(F->plo), free(F->pmx), free(F->keys.v), free(F->cur.v), free(F->ecur.v);
}

/* Does a persistent buffer share a byte with [off, off + bytes)? */
static int fz_persistent(const fz_ctx *F, int64_t off, int64_t bytes) {
    int a = 0, b = F->npers;   /* the buffers that start before off + bytes: [0, a) */
    while (a < b) {
        int mid = (a + b) / 2;
        if (F->plo[mid] < off + bytes) a = mid + 1;
        else b = mid;
    }
    return a > 0 && F->pmx[a - 1] > off;
}

/* fz_scan over instructions [from, to) of the section S indexes, visiting
 * only those that touch [qlo, qhi) (L's ranges lie inside it); with V, the
 * fused view: an ew instead of the originals it replaced. */
static int fz_iscan(fz_ctx *F, const fz_sidx *S, const fz_view *V, int from, int to, fz_live *L,
                    int64_t qlo, int64_t qhi) {
    if (from >= to) return -1;
    /* keys that start before qhi: [0, nk) */
    int a = 0, b = S->nkey;
    while (a < b) {
        int mid = (a + b) / 2;
        if (S->klo[mid] < qhi) a = mid + 1;
        else b = mid;
    }
    F->keys.n = 0;
    if (S->nkey) fz_keys(S, 1, 0, S->ksz, a, qlo, &F->keys);
    int nk = F->keys.n;
    ir_grow((void **)&F->cur.v, &F->cur.cap, nk + 1, sizeof(int));
    ir_grow((void **)&F->ecur.v, &F->ecur.cap, nk + 2, sizeof(int));
    for (int c = 0; c < nk; c++) {
        int k = F->keys.v[c];
        F->cur.v[c] = S->kp0[k] + fz_lower(S->kp + S->kp0[k], S->kp0[k + 1] - S->kp0[k], NULL, from);
        if (V) F->ecur.v[c] = fz_lower(V->kew[k].v, V->kew[k].n, V->epos.v, from);
    }
    /* ews touching the range through ranges S has no key for: scanned in full (rare) */
    int xc = V ? fz_lower(V->xe.v, V->xe.n, V->epos.v, from) : 0;
    for (;;) {
        int next = to, ew = -1;
        for (int c = 0; c < nk; c++) {
            int k = F->keys.v[c], *q = &F->cur.v[c];
            while (*q < S->kp0[k + 1] && V && V->skip[S->kp[*q]]) ++*q;
            if (*q < S->kp0[k + 1] && S->kp[*q] < next) next = S->kp[*q], ew = -1;
            if (V && F->ecur.v[c] < V->kew[k].n) {
                int e = V->kew[k].v[F->ecur.v[c]];
                if (V->epos.v[e] < next) next = V->epos.v[e], ew = e;
            }
        }
        for (int x = xc; V && x < V->xe.n; x++) {
            int e = V->xe.v[x];
            if (V->epos.v[e] >= next) break;
            if (fz_overlap(qlo, qhi - qlo, V->xlo[x], V->xhi[x] - V->xlo[x])) next = V->epos.v[e], ew = e;
        }
        if (next >= to) return -1;
        int r = ew >= 0 ? fz_step(V->eacc + V->ea0.v[ew], V->ea0.v[ew + 1] - V->ea0.v[ew], L)
                        : fz_step(S->acc + S->a0[next], S->a0[next + 1] - S->a0[next], L);
        if (r >= 0) return r;
        /* past this position on every list */
        for (int c = 0; c < nk; c++) {
            int k = F->keys.v[c];
            if (F->cur.v[c] < S->kp0[k + 1] && S->kp[F->cur.v[c]] == next) F->cur.v[c]++;
            if (V && F->ecur.v[c] < V->kew[k].n && V->epos.v[V->kew[k].v[F->ecur.v[c]]] == next) F->ecur.v[c]++;
        }
        while (V && xc < V->xe.n && V->epos.v[V->xe.v[xc]] <= next) xc++;
    }
}

/* fz_live_after_walk's answer through the indexes, for a chain ending
 * before instruction `from` of the section being fused (F->view is the
 * micro-batch section's state when that is the one). */
static int fz_live_after(fz_ctx *F, int sec, int from, int64_t off, int64_t bytes) {
    const ir_prog *p = F->p;
    if (p->loss_off >= 0 && fz_overlap(off, bytes, p->loss_off, 4)) return 1;
    /* persistent buffers (params, optimizer state, accumulators) are read by
       checkpoints and by later steps: always live */
    if (fz_persistent(F, off, bytes)) return 1;
    fz_live L = {1, {off}, {off + bytes}};
    const int64_t qlo = off, qhi = off + bytes;
    int rend = sec == IR_SEC_MB ? fz_region_end(F->lo, F->hi, from) : -1;
    if (rend >= 0) {   /* before or in a pipeline's loop: within its region */
        int rr = fz_iscan(F, &F->idx[sec], NULL, from, rend, &L, qlo, qhi);
        return rr >= 0 ? rr : 1;
    }
    int r = fz_iscan(F, &F->idx[sec], NULL, from, F->idx[sec].n, &L, qlo, qhi);
    if (r >= 0) return r;
    if (sec != IR_SEC_MB) return 1;
    IR_ASSERT(F->view.S == &F->idx[IR_SEC_MB]);
    static const int paths[][8] = {   /* as in fz_live_after_walk */
        {IR_SEC_MB, -1},
        {IR_SEC_POST, IR_SEC_PRE, IR_SEC_MB, -1},
        {IR_SEC_POST, IR_SEC_EVAL_PRE, IR_SEC_EVAL, IR_SEC_EVAL_POST, IR_SEC_PRE, IR_SEC_MB, -1},
        {IR_SEC_POST, IR_SEC_EPILOGUE, -1},
        {IR_SEC_POST, IR_SEC_EVAL_PRE, IR_SEC_EVAL, IR_SEC_EVAL_POST, IR_SEC_EPILOGUE, -1},
    };
    fz_live P;   /* each path starts from what the section left live */
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
        P.n = L.n;
        memcpy(P.lo, L.lo, sizeof(int64_t) * (size_t)L.n);
        memcpy(P.hi, L.hi, sizeof(int64_t) * (size_t)L.n);
        int pr = -1;
        for (int j = 0; paths[k][j] >= 0 && pr < 0; j++) {
            int s = paths[k][j];
            if (s != IR_SEC_MB) {
                pr = fz_iscan(F, &F->idx[s], NULL, 0, F->idx[s].n, &P, qlo, qhi);
                continue;
            }
            /* the array from its start up to the chain's end: the fused program so far
               (the view of originals [0, i)), then what slots w .. from - 1 hold */
            pr = fz_iscan(F, &F->idx[s], &F->view, 0, F->view.i, &P, qlo, qhi);
            if (pr < 0) pr = fz_iscan(F, &F->idx[s], NULL, F->view.w, from, &P, qlo, qhi);
        }
        if (pr > 0) return 1;
    }
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
static int fz_build(fz_ctx *F, int sec, int first, const fz_src *m, int nm, pg_instr *out) {
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
        if (!accd && (over || !fz_live_after(F, sec, first + nm, s->out, 4 * s->n))) {
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

/* Fuse the chains of section sec of p in place; returns how many.  The
 * sections a liveness question may walk are indexed first (all of them
 * for the micro-batch section, whose questions follow the paths). */
static int fz_section(ir_prog *p, int sec) {
    pg_instr *ins = p->ins[sec];
    int n = p->nins[sec], w = 0, fused = 0;
    fz_ctx F;
    fz_ctx_init(&F, p);
    for (int s = 0; s < IR_SEC_COUNT; s++)
        if (s == sec || (sec == IR_SEC_MB && s != IR_SEC_PROLOGUE)) fz_sidx_build(&F.idx[s], p, s);
    if (sec == IR_SEC_MB) fz_view_init(&F.view, &F.idx[sec]);
    int loop = sec == IR_SEC_MB && p->loop_iters > 0;
    if (loop) F.lo = p->loop_lo, F.hi = p->loop_hi;
    int nlo = F.lo, nhi = F.hi;   /* the loop's edges in the fused section */
    for (int i = 0; i < n;) {
        F.view.i = i, F.view.w = w;
        if (loop && i == F.lo) nlo = w;
        if (loop && i == F.hi) nhi = w;
        int lim = !loop ? n : i < F.lo ? F.lo : i < F.hi ? F.hi : n;   /* chains end at the loop's edges */
        fz_src m[RT_EW_MAXOPS];
        int nm = 0;
        if (fz_decode(&ins[i], &m[0])) {
            nm = 1;
            while (i + nm < lim && nm < RT_EW_MAXOPS && fz_decode(&ins[i + nm], &m[nm]) &&
                   fz_joins(m, nm, &m[nm]))
                nm++;
        }
        pg_instr e;
        if (nm >= 2 && fz_build(&F, sec, i, m, nm, &e)) {
            /* the note lists the fused instructions: "a+b+c" */
            ir_buf note = {0};
            for (int k = 0; k < nm; k++)
                ir_bprintf(&note, "%s%s", k ? "+" : "", ins[i + k].note ? ins[i + k].note : "?");
            e.note = ir_prog_str(p, note.s);
            ir_buf_free(&note);
            /* provenance: the members' when they all agree, else none */
            e.blk = ins[i].blk, e.rep = ins[i].rep;
            for (int k = 1; k < nm; k++)
                if (ins[i + k].blk != e.blk || ins[i + k].rep != e.rep) e.blk = e.rep = -1;
            if (sec == IR_SEC_MB) fz_view_add(&F.view, &e, i, nm);
            ins[w++] = e;
            i += nm;
            fused++;
        } else {
            ins[w++] = ins[i++];
        }
    }
    if (loop && F.hi == n) nhi = w;
    if (loop) p->loop_lo = nlo, p->loop_hi = nhi;
    p->nins[sec] = w;
    fz_ctx_free(&F);
    return fused;
}

/* ---- sums in place: `add(A, B, Y)` whose operands' producers can
 * accumulate (the two gradients of a tied embedding) */

/* The last instruction before `before` in section sec that writes bytes
 * [off, off + bytes): when it writes exactly that range, whole, as its only
 * output, with a constant acc = 0 it could turn into an accumulation, its
 * index (and *bj its buffer); else -1. */
/* The byte ranges an instruction's buffers span, as bounds: of its writes,
 * of its reads, of every buffer (size unknown: to INT64_MAX / 4).  The
 * walks of sums in place below pass over an instruction whose bounds miss
 * the asked range without calling ir_prog_access on each buffer again:
 * those walks go from a backward add to its addends' writers, across
 * every task between a micro-batch's forward and backward in an unrolled
 * pipeline. */
typedef struct fz_bound {
    int64_t wlo, whi, rlo, rhi, alo, ahi;   /* [lo, hi); lo >= hi: none */
} fz_bound;

static fz_bound fz_bound_of(const pg_instr *in) {
    fz_bound b = {INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN, INT64_MAX, INT64_MIN};
    for (int j = 0; j < in->nbuf; j++) {
        int64_t nb;
        int acc = ir_prog_access(in, j, &nb);
        int64_t lo = in->buf[j], hi = lo + (nb < 0 ? INT64_MAX / 4 : nb);
        if (lo < b.alo) b.alo = lo;
        if (hi > b.ahi) b.ahi = hi;
        if ((acc & PG_WR) && lo < b.wlo) b.wlo = lo;
        if ((acc & PG_WR) && hi > b.whi) b.whi = hi;
        if ((acc & PG_RD) && lo < b.rlo) b.rlo = lo;
        if ((acc & PG_RD) && hi > b.rhi) b.rhi = hi;
    }
    return b;
}

/* Does [lo, hi) of a bound meet [off, off + bytes)? */
static int fz_bound_meets(int64_t lo, int64_t hi, int64_t off, int64_t bytes) {
    return lo < hi && lo < off + bytes && off < hi;
}

/* The one instruction before `before` whose writes reach the range first
 * (walking back), if it writes all of exactly that range with acc 0 and
 * writes nothing else: its index (and *bj the buffer), else -1. */
static int fz_sole_writer(const ir_prog *p, int sec, int before, int64_t off, int64_t bytes,
                          int *bj, const fz_bound *bd) {
    for (int x = before - 1; x >= 0; x--) {
        if (!fz_bound_meets(bd[x].wlo, bd[x].whi, off, bytes)) continue;   /* no write of x meets it */
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
                      int64_t off, int64_t bytes, int any, const fz_bound *bd) {
    for (int x = from; x < to; x++) {
        if (x == skip1 || x == skip2) continue;
        if (!fz_bound_meets(any ? bd[x].alo : bd[x].rlo, any ? bd[x].ahi : bd[x].rhi, off, bytes)) continue;
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
    int done = 0, loop = sec == IR_SEC_MB && p->loop_iters > 0;
    fz_bound *bd = ir_xmalloc(sizeof *bd * ((size_t)p->nins[sec] + 1));
    for (int x = 0; x < p->nins[sec]; x++) bd[x] = fz_bound_of(&p->ins[sec][x]);
    for (int x = 0; x < p->nins[sec]; x++) {
        pg_instr *add = &p->ins[sec][x];
        int64_t n;
        if (add->kernel != RT_K_add || !fz_const(add, 0, &n) || n <= 0) continue;
        int64_t a = add->buf[0], b = add->buf[1], y = add->buf[2], nb = 4 * n;
        if (fz_overlap(a, nb, b, nb) || fz_overlap(a, nb, y, nb) || fz_overlap(b, nb, y, nb))
            continue;
        int ja, jb, xa = fz_sole_writer(p, sec, x, a, nb, &ja, bd), xb = fz_sole_writer(p, sec, x, b, nb, &jb, bd);
        if (xa < 0 || xb < 0 || xa == xb) continue;
        if (loop && (fz_region(p->loop_lo, p->loop_hi, xa) != fz_region(p->loop_lo, p->loop_hi, x) ||
                     fz_region(p->loop_lo, p->loop_hi, xb) != fz_region(p->loop_lo, p->loop_hi, x)))
            continue;   /* producers in another region of a pipeline's loop */
        int first = xa < xb ? xa : xb, second = xa < xb ? xb : xa;
        /* Y untouched from the first producer on (their inputs included),
           A and B read by nothing but the add, and dead after it */
        int64_t ylo = y;
        pg_instr *pf = &p->ins[sec][first], *ps = &p->ins[sec][second];
        int jf = first == xa ? ja : jb, js = first == xa ? jb : ja;
        int ybad = fz_touched(p, sec, first, x, first, second, ylo, nb, 1, bd);
        for (int j = 0; j < pf->nbuf && !ybad; j++)
            ybad = j != jf && fz_overlap(pf->buf[j], 1, ylo, nb);
        for (int j = 0; j < ps->nbuf && !ybad; j++)
            ybad = j != js && fz_overlap(ps->buf[j], 1, ylo, nb);
        if (ybad || fz_touched(p, sec, xa + 1, x, -1, -1, a, nb, 0, bd) ||
            fz_touched(p, sec, xb + 1, x, -1, -1, b, nb, 0, bd) ||
            fz_live_after_walk(p, sec, x + 1, a, nb) || fz_live_after_walk(p, sec, x + 1, b, nb))
            continue;
        pf->buf[jf] = y;
        pf->ints[ir_prog_acc_index(pf->kernel)] = add->ints[1];
        ps->buf[js] = y;
        ps->ints[ir_prog_acc_index(ps->kernel)] = (pg_int){1, 0, 0};
        bd[first] = fz_bound_of(pf);
        bd[second] = fz_bound_of(ps);
        if (loop && x < p->loop_lo) p->loop_lo--;
        if (loop && x < p->loop_hi) p->loop_hi--;
        memmove(add, add + 1, (size_t)(p->nins[sec] - x - 1) * sizeof *add);
        memmove(&bd[x], &bd[x + 1], (size_t)(p->nins[sec] - x - 1) * sizeof *bd);
        p->nins[sec]--;
        x--;
        done++;
    }
    free(bd);
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

/* Hash of what fz_same_ops compares. */
static uint64_t fz_ops_hash(const pg_instr *a) {
    uint64_t h = ((uint64_t)a->nint << 32 | (uint64_t)a->nbuf) * 0x9e3779b97f4a7c15ull;
    for (int j = 3; j < a->nint; j++) {
        h = (h ^ (uint64_t)a->ints[j].c) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    return h;
}

/* The distinct chains of a build so far: copies of their first `ew`
 * instructions and a table by program (open addressing). */
struct pass_fuse_ids {
    pg_instr *seen;    /* chain id -> its first instruction (a copy) */
    int nseen, cap;
    int *tab, tcap;    /* chain ids by fz_ops_hash, -1: empty */
};

pass_fuse_ids *pass_fuse_new(void) { return ir_xcalloc(1, sizeof(pass_fuse_ids)); }

int pass_fuse_count(const pass_fuse_ids *f) { return f->nseen; }

void pass_fuse_free(pass_fuse_ids *f) {
    if (!f) return;
    free(f->seen);
    free(f->tab);
    free(f);
}

void pass_fuse_local(ir_prog *p) {
    for (int sec = 0; sec < IR_SEC_COUNT; sec++) {
        fz_sum_in_place(p, sec);
        fz_section(p, sec);
    }
}

/* The chain number of ew instruction in (its first instruction copied
 * when new). */
static int fz_number(pass_fuse_ids *f, const pg_instr *in) {
    if (2 * (f->nseen + 1) > f->tcap) {   /* grow the table, re-enter every program */
        f->tcap = f->tcap ? 2 * f->tcap : 64;
        free(f->tab);
        f->tab = ir_xmalloc(sizeof(int) * (size_t)f->tcap);
        for (int k = 0; k < f->tcap; k++) f->tab[k] = -1;
        for (int k = 0; k < f->nseen; k++) {
            size_t i = (size_t)fz_ops_hash(&f->seen[k]) & (size_t)(f->tcap - 1);
            while (f->tab[i] >= 0) i = (i + 1) & (size_t)(f->tcap - 1);
            f->tab[i] = k;
        }
    }
    size_t i = (size_t)fz_ops_hash(in) & (size_t)(f->tcap - 1);
    while (f->tab[i] >= 0 && !fz_same_ops(&f->seen[f->tab[i]], in)) i = (i + 1) & (size_t)(f->tcap - 1);
    if (f->tab[i] < 0) {
        f->tab[i] = f->nseen;
        *IR_PUSH(f->seen, f->nseen, f->cap) = *in;
    }
    return f->tab[i];
}

void pass_fuse_number(pass_fuse_ids *f, ir_prog *p) {
    /* in program order, bodies where they are called (a body's instruction
       is numbered at its first call; every call runs the same chain) */
    for (int sec = 0; sec < IR_SEC_COUNT; sec++)
        for (int i = 0, k = 0;;) {
            pg_instr *in = (pg_instr *)ir_prog_walk(p, sec, &i, &k);
            if (!in) break;
            if (in->kernel == RT_K_ew) in->ints[0].c = fz_number(f, in);
        }
}

void pass_fuse_prog(pass_fuse_ids *f, ir_prog *p) {
    pass_fuse_local(p);
    pass_fuse_number(f, p);
}

int pass_fuse(ir_prog *progs, int nprogs) {
    pass_fuse_ids *f = pass_fuse_new();
    for (int r = 0; r < nprogs; r++) pass_fuse_prog(f, &progs[r]);
    int n = f->nseen;
    pass_fuse_free(f);
    return n;
}
