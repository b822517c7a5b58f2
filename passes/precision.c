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
 *   - not moved by a collective or a transfer: rtlib's collectives sum and
 *     move f32 for now (docs/plans.md, "Mixed precision": the tensors that
 *     cross devices stay f32 until the comm kernels take bf16).
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
    for (int c = 0; c < d->ncomm; c++) d->t16[d->comm[c].tensor] = 0;
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

#define CVT_ALIGN 64

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
