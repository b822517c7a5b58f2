/* precision.c -- which tensors are stored in bf16 ([train] storage = bf16).
 *
 * Mixed precision as Megatron-LM trains: under dtype = bf16 the activations
 * and the activations' gradients are stored in bf16, while the params (the
 * f32 master weights), their gradients (accumulated over the micro-batches
 * in f32) and the optimizer state stay f32.  pass_precision marks, per
 * vTensor, what a rank's buffers of it hold (ir_dist.t16): a tensor is
 * stored in bf16 when it is
 *
 *   - an activation or an activation's gradient (it has a batch dim),
 *     held per micro-batch (not summed over the micro-batches: schedule.c's
 *     accum), f32 in the graph, and not the loss;
 *   - not a statistic the backward needs at f32: layernorm's mean and rstd,
 *     rmsnorm's rstd, attention's log-sum-exp, cross entropy's block
 *     statistics (Megatron keeps these in f32 too);
 *
 * A comm of a bf16 tensor moves it as bf16 where it moves whole words
 * (pass_comm_wire16: a transfer between stages, a broadcast, an all-gather
 * whose pieces are whole words of each member's output: consecutive
 * blocks of even length, or boxes whose bounds in the last dim are even,
 * as the output's extent is, which lower.c places as words): the
 * collective moves the 2-byte elements as the words they are packed in,
 * so nothing is converted and half the bytes cross.  An all-reduce sums
 * bf16 values (rtlib's allreduce_bf16: in f32, rounded once, on the cpu
 * target), and so does a reduce-scatter whose pieces are whole words of
 * each member's input (reducescatter_bf16: the same rule, lower.c packing
 * the boxes as words).  The others (all-to-alls, slices, transfers that
 * place into part of a buffer or add into it, all-gathers and
 * reduce-scatters whose pieces are not whole words) run on the f32 wire:
 * lower.c widens their buffers into f32 scratch (pass_comm_cvt), runs the
 * collective as for f32 and narrows the result back.
 *
 * The kernels compute in f32.  lower.c widens a bf16 operand into f32
 * scratch before its kernel (cvt_f32) and narrows a bf16 output from it
 * after (cvt_bf16, round to nearest even), so what is kept between kernels
 * -- the saved tensors of the backward, the pipeline stash, a recompute's
 * checkpoints -- takes 2 bytes an element, and every result is what a
 * bf16-storing kernel would leave.  The scratch is one region of the arena
 * (memplan.c), as large as the largest sub-op's bf16 operands in f32: a
 * rank runs one kernel at a time.  memplan, plan.txt and the cost model
 * count every buffer at its stored size (pass_t_elsize).
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* Output k of op o is a statistic kept in f32. */
static int f32_stat(const ir_op *o, int k)
{
    switch (o->kind) {
    case IR_OP_LAYERNORM:
    case IR_OP_RMSNORM:
    case IR_OP_ATTENTION:
    case IR_OP_ATTENTION_VL:
    case IR_OP_ATTENTION_AB: return k > 0;
    case IR_OP_XENT_STATS: return 1;
    default: return 0;
    }
}

void pass_precision(ir_dist *d)
{
    const ir_graph *g = d->g;
    free(d->t16);
    d->t16 = NULL;
    if (!g->train.store16) return;
    d->t16 = ir_xcalloc((size_t)g->nt + 1, 1);
    for (int t = 0; t < g->nt; t++) {
        const ir_tensor *x = &g->t[t];
        d->t16[t] = x->dtype == IR_F32 && x->batch_dim >= 0 && (x->kind == IR_T_ACT || x->kind == IR_T_GRAD) &&
                    t != g->train.loss && !d->accum[t];
    }
    for (int i = 0; i < g->nop; i++)
        for (int k = 0; k < g->op[i].nout; k++)
            if (f32_stat(&g->op[i], k)) d->t16[g->op[i].out[k]] = 0;
}

/* One execution's box of pTensor pt (section sec). */
static ir_box mb_box(const ir_dist *d, int pt, int sec)
{
    return pass_mbbox(d, d->pt[pt].tensor, &d->pt[pt].box, sec);
}

/* Are the tiles (in member order) of whole, a bf16 buffer, whole 4-byte
 * words of it, to pack or place as f32 (lower.c): consecutive blocks of
 * even length, or boxes whose bounds in the last dim are even, as its
 * extent is? */
static int word_tiles(const ir_box *whole, const ir_box *const *tile, int k, int nd)
{
    int ok = 1;
    for (int i = 0; i < k && ok; i++) ok = ir_box_numel(tile[i], nd) % 2 == 0;
    if (!ok || pass_direct_tiles(whole, tile, k, nd)) return ok;
    const int j = nd - 1;
    ok = nd > 0 && (whole->hi[j] - whole->lo[j]) % 2 == 0;
    for (int i = 0; i < k && ok; i++)
        ok = (tile[i]->lo[j] - whole->lo[j]) % 2 == 0 && (tile[i]->hi[j] - whole->lo[j]) % 2 == 0;
    return ok;
}

/* Are comm cm's pieces (the pTensors at ints[piece ..], one a member) whole
 * words of every member's whole buffer (at ints[whole ..]), one execution's
 * boxes (word_tiles)? */
static int word_comm(const ir_dist *d, const ir_comm *cm, int piece, int whole)
{
    const int nd = d->g->t[cm->tensor].ndim, K = cm->n;
    ir_box *tile = ir_xmalloc(sizeof *tile * (size_t)K);
    const ir_box **tl = ir_xmalloc(sizeof *tl * (size_t)K);
    int ok = 1;
    for (int k = 0; k < K && ok; k++) {
        int p = d->ints[piece + k];
        ok = p >= 0;
        if (ok) tile[k] = mb_box(d, p, cm->sec), tl[k] = &tile[k];
    }
    for (int k = 0; k < K && ok; k++) {
        int w = d->ints[whole + k];
        ir_box b;
        ok = w >= 0 && ((b = mb_box(d, w, cm->sec)), word_tiles(&b, tl, K, nd));
    }
    free(tile);
    free(tl);
    return ok;
}

int pass_comm_wire16(const ir_dist *d, int ci)
{
    const ir_comm *cm = &d->comm[ci];
    if (!d->t16 || !d->t16[cm->tensor] || cm->acc || cm->bucket >= 0) return 0;
    const int nd = d->g->t[cm->tensor].ndim, K = cm->n;
    switch (cm->kind) {
    case IR_COMM_ALLREDUCE:   /* in place, or a copy first (lower.c): rtlib's allreduce_bf16 */
        return 1;
    case IR_COMM_SENDRECV: {   /* the sender's whole piece into the receiver's whole piece */
        if (K != 2 || cm->root < 0) return 0;
        int pin = d->ints[cm->in + cm->root], pout = d->ints[cm->out + 1 - cm->root];
        return pin >= 0 && pout >= 0 && ir_box_eq(&d->pt[pin].box, &cm->region, nd) &&
               ir_box_eq(&d->pt[pout].box, &cm->region, nd);
    }
    case IR_COMM_BROADCAST: {   /* (the others receive whole pieces: lower.c) */
        if (cm->root < 0) return 0;
        int pin = d->ints[cm->in + cm->root];
        if (pin < 0 || !ir_box_eq(&d->pt[pin].box, &cm->region, nd)) return 0;
        for (int k = 0; k < K; k++) {
            int po = d->ints[cm->out + k];
            if (k != cm->root && (po < 0 || !ir_box_eq(&d->pt[po].box, &cm->region, nd))) return 0;
        }
        return 1;
    }
    case IR_COMM_ALLGATHER:   /* every member's pieces whole words of its output (word_tiles) */
        return word_comm(d, cm, cm->in, cm->out);
    case IR_COMM_REDUCESCATTER:   /* every member's pieces whole words of its input */
        return word_comm(d, cm, cm->out, cm->in);
    default:
        return 0;
    }
}

int64_t pass_comm_bytes(const ir_dist *d, int ci)
{
    int64_t b = d->comm[ci].bytes;
    return pass_comm_wire16(d, ci) ? (b / 4 + 1) / 2 * 4 : b;
}

#define CVT_ALIGN 64

int pass_comm_cvt(const ir_dist *d, int ci, int k, int sec, int64_t *nin, int64_t *nout, int64_t *at_out,
                  int64_t *total)
{
    const ir_comm *cm = &d->comm[ci];
    *nin = *nout = *at_out = *total = 0;
    if (!d->t16 || !d->t16[cm->tensor] || pass_comm_wire16(d, ci)) return 0;
    const int nd = d->g->t[cm->tensor].ndim;
    int pin = d->ints[cm->in + k], pout = d->ints[cm->out + k];
    ir_box b;
    if (pin >= 0) *nin = ir_box_numel((b = mb_box(d, pin, sec), &b), nd);
    if (pout >= 0) *nout = ir_box_numel((b = mb_box(d, pout, sec), &b), nd);
    *at_out = (*nin * 4 + CVT_ALIGN - 1) / CVT_ALIGN * CVT_ALIGN;
    *total = *at_out + (*nout * 4 + CVT_ALIGN - 1) / CVT_ALIGN * CVT_ALIGN;
    return 1;
}

int pass_t_elsize(const ir_dist *d, int t)
{
    return d->t16 && d->t16[t] ? 2 : pass_elsize(&d->g->t[t]);
}

int64_t pass_pt_store_bytes(const ir_dist *d, int pt)
{
    const ir_ptensor *p = &d->pt[pt];
    const ir_tensor *t = &d->g->t[p->tensor];
    int64_t n = ir_box_numel(&p->box, t->ndim);
    if (t->batch_dim >= 0) n /= d->g->train.micro_batches;
    return d->t16 && d->t16[p->tensor] ? (n + 1) / 2 * 4 : n * pass_elsize(t);
}


int pass_cvt_layout(const ir_dist *d, const ir_subop *s, int *pt, int64_t *at, int64_t *n, int *is_out,
                    int64_t *total)
{
    const ir_op *o = &d->g->op[s->op];
    int m = 0;
    int64_t top = 0;
    *total = 0;
    if (!d->t16) return 0;
    for (int k = 0; k < o->nin + o->nout; k++) {
        int q = k < o->nin ? s->in[k] : s->out[k - o->nin];
        if (!d->t16[d->pt[q].tensor]) continue;
        int seen = -1;
        for (int j = 0; j < m; j++)
            if (pt[j] == q) seen = j;
        if (seen >= 0) {
            if (k >= o->nin) is_out[seen] = 1;
            continue;
        }
        const ir_tensor *t = &d->g->t[d->pt[q].tensor];
        int64_t e = ir_box_numel(&d->pt[q].box, t->ndim);
        if (t->batch_dim >= 0) e /= d->g->train.micro_batches;
        pt[m] = q, at[m] = top, n[m] = e, is_out[m] = k >= o->nin;
        top += (e * 4 + CVT_ALIGN - 1) / CVT_ALIGN * CVT_ALIGN;
        m++;
    }
    *total = top;
    return m;
}
