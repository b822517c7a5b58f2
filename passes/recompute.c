/* recompute.c -- activation recomputation per block ([plan] recompute).
 *
 * For every recomputed repeat of a block, the forward ops of that repeat
 * are copied into the backward pass (phase bwd, fwd = the original, so the
 * planner splits each copy like its original and a pipeline runs it on the
 * same stage), and the repeat's backward ops read the copies' outputs
 * instead of the forward's.  The forward's activations inside the repeat
 * then die in the forward pass; what the backward keeps of it is the
 * repeat's inputs (the block input, params), which the copies read.  The
 * schedule places a copy just before the first backward op that needs it
 * (schedule.c), so one repeat's recomputed activations live at a time.
 * The copies compute exactly what the forward did: training is bitwise
 * the same as without recomputation.
 *
 * Selective recompute (an item BLOCK:attn, Korthikanti et al.'s): only the
 * repeat's attention core is copied, and every backward op of the repeat
 * that reads the core's outputs (the attention's own backward, the output
 * projection's weight gradient) reads the copy's; the rest of the repeat's
 * activations, the core's inputs among them, are kept.
 */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* The attention core that selective recompute copies: the attention ops,
 * whose backward recomputes the scores itself (flash-style: the forward
 * keeps the output and its log-sum-exp, never the T x T scores). */
static int attn_core(const ir_op *o) { return IR_IS_ATT(o->kind); }

/* Is tensor t made by a recomputed forward op (rec) of the same repeat as
 * op o -- what o reads from the copies instead?  o may be a forward op
 * (the copy of it reads the copies) or a backward op; a backward reads the
 * copies of its own forward op's outputs too (attention's y and lse,
 * layernorm's mean and rstd), or those outputs stay alive from the forward
 * to the backward -- in a pipeline, stash in every slot. */
static int own(const ir_graph *g, const char *rec, int t, int o)
{
    int p = g->t[t].producer;
    return p >= 0 && rec[p] && g->op[p].phase == IR_PH_FWD && g->op[p].block == g->op[o].block &&
           g->op[p].rep == g->op[o].rep && g->op[o].block >= 0;
}

int pass_recompute(ir_graph *g)
{
    const ir_planlists *L = &g->req.L;
    int line = g->req.recompute_line;
    /* (verify's 1-device reference comes here without the spec's recompute:
       frontend/driver.c; one device otherwise recomputes as asked) */
    if (!L->nrc) return 0;
    static const char hint[] = "write recompute = BLOCK {, BLOCK}: a block's name (h) or some of its repeats (h.0-5), "
                               "each maybe with :attn (h:attn: only the attention recomputed); "
                               "--dump=graph lists the blocks' ops";
    /* the plan record's items (the spec's recompute, or the search's), checked */
    int nop0 = g->nop, nt0 = g->nt;
    char *rec = ir_xcalloc((size_t)nop0 + 1, 1);   /* per forward op: recomputed */
    for (int k = 0; k < L->nrc; k++) {
        const ir_rcitem *it = &L->rc[k];
        const char *tok = it->text ? it->text : g->blk[it->blk].name;
        int hit = 0, core = 0;
        for (int i = 0; i < nop0; i++) {
            const ir_op *o = &g->op[i];
            if (o->phase != IR_PH_FWD || o->block != it->blk) continue;
            if (it->hi >= 0 && (o->rep < it->lo || o->rep > it->hi)) continue;
            hit = 1;
            if (!it->attn || attn_core(o)) rec[i] = 1, core = 1;
        }
        if (!hit) {
            free(rec);
            return pass_error(g, line, hint, "[plan] recompute: '%s' names no repeat of its block", tok);
        }
        if (!core) {
            free(rec);
            return pass_error(g, line, "selective recompute (:attn) copies a block's attention ops; without one, "
                              "recompute the whole block (drop :attn)",
                              "[plan] recompute: '%s': its repeats have no attention op", tok);
        }
    }
    for (int i = 0; i < nop0; i++)
        if (rec[i] && (ir_ops[g->op[i].kind].flags & OPF_LOSS)) {
            free(rec);
            return pass_error(g, line, "recompute blocks of layers; the loss is computed once",
                              "[plan] recompute: block of op %s computes the loss", g->op[i].name);
        }
    /* which forward ops the backward needs again: the producers of what the
       repeats' backward ops read, and the recomputed ops those read */
    char *need = ir_xcalloc((size_t)nop0 + 1, 1);
    for (int i = 0; i < nop0; i++) {
        const ir_op *o = &g->op[i];
        if (o->phase != IR_PH_BWD || o->fwd < 0) continue;
        for (int k = 0; k < o->nin; k++)
            if (own(g, rec, o->in[k], i)) need[g->t[o->in[k]].producer] = 1;
    }
    for (int i = nop0 - 1; i >= 0; i--)
        if (need[i])
            for (int k = 0; k < g->op[i].nin; k++)
                if (own(g, rec, g->op[i].in[k], i)) need[g->t[g->op[i].in[k]].producer] = 1;
    /* the copies, in op order (a repeat's ops are in dependency order) */
    int *copy = ir_xmalloc(sizeof(int) * ((size_t)nt0 + 1));   /* per tensor: its copy, or -1 */
    for (int t = 0; t < nt0; t++) copy[t] = -1;
    char err[256];
    for (int i = 0; i < nop0; i++) {
        if (!need[i]) continue;
        ir_op o = g->op[i];   /* by value: adding ops moves the array */
        int in[IR_MAXIO];
        const char *on[IR_MAXIO];
        char names_[IR_MAXIO][300];
        for (int k = 0; k < o.nin; k++) in[k] = own(g, rec, o.in[k], i) ? copy[o.in[k]] : o.in[k];
        for (int k = 0; k < o.nout; k++) {
            snprintf(names_[k], sizeof names_[k], "rc.%s", g->t[o.out[k]].name);
            on[k] = names_[k];
        }
        char nm[300];
        snprintf(nm, sizeof nm, "rc.%s", o.name);
        int c = ir_add_op_attr(g, nm, o.kind, o.nin, in, on, o.iattr, o.fattr, o.line, err, sizeof err);
        if (c < 0) ir_die(__FILE__, __LINE__, "recompute %s: %s", o.name, err);
        ir_op *co = &g->op[c];
        memcpy(co->fattr, o.fattr, sizeof co->fattr);
        co->phase = IR_PH_BWD;
        co->fwd = i;
        co->block = o.block;
        co->rep = o.rep;
        co->recomp = 1;
        for (int k = 0; k < o.nout; k++) copy[o.out[k]] = co->out[k];
    }
    /* the repeats' backward ops read the copies */
    for (int i = 0; i < nop0; i++) {
        ir_op *o = &g->op[i];
        if (o->phase != IR_PH_BWD || o->fwd < 0) continue;
        for (int k = 0; k < o->nin; k++)
            if (o->in[k] < nt0 && own(g, rec, o->in[k], i)) o->in[k] = copy[o->in[k]];
    }
    free(copy);
    free(rec);
    free(need);
    return 0;
}

int pass_zero3_regather(ir_graph *g)
{
    /* ZeRO 3 (plan.c shards the params on the dp axis; the comm pass gathers
       them where they are read): a backward op reads its own copy of a param,
       made just before it, so the comm pass gathers the param again for the
       backward and the forward's gathered copy dies after the forward -- as
       DeepSpeed gathers a layer's weights twice per micro-batch.  One device
       has nothing to gather. */
    if (g->req.zero != 3 || g->req.devices <= 1) return 0;
    int nop0 = g->nop;
    char err[256];
    for (int i = 0; i < nop0; i++) {
        if (g->op[i].phase != IR_PH_BWD || g->op[i].recomp) continue;
        for (int k = 0; k < g->op[i].nin; k++) {
            int t = g->op[i].in[k];
            if (g->t[t].kind != IR_T_PARAM) continue;
            char nm[300], on[300];
            snprintf(nm, sizeof nm, "rg.%s.%s", g->t[t].name, g->op[i].name);
            snprintf(on, sizeof on, "rg.%s.%s", g->t[t].name, g->op[i].name);
            const char *outs[1] = {on};
            int c = ir_add_op(g, nm, IR_OP_COPY, 1, &t, outs, g->op[i].line, err, sizeof err);
            if (c < 0) ir_die(__FILE__, __LINE__, "zero 3 copy of %s: %s", g->t[t].name, err);
            ir_op *co = &g->op[c];
            co->phase = IR_PH_BWD;
            co->fwd = g->op[i].fwd;   /* its reader's stage; split like the param's readers */
            co->block = g->op[i].block;
            co->rep = g->op[i].rep;
            co->recomp = 1;           /* placed just before its reader (schedule.c) */
            g->op[i].in[k] = co->out[0];
        }
    }
    return 0;
}
