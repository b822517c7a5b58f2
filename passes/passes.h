/* passes.h -- the passes that rewrite the IR, called in a straight line by
 * the driver (frontend/main.c).  Each pass is one file.
 *
 *   autograd.c  Graph -> Graph: backward ops, gradient tensors, optimizer ops
 *   plan.c      Graph -> DistGraph: op-trans (how each op is split) and
 *               op-assign (which device runs each sub-op), by policy
 *   split.c     DistGraph: materialise sub-ops and the pTensors they consume
 *               and produce, from each op's annotation and trans
 *   comm.c      DistGraph: derive communication from pTensor mismatches
 *   schedule.c  DistGraph: sections (prologue / per step / per micro-batch)
 *               and op-order on each device
 *   memplan.c   per rank: a static arena offset for every buffer
 *   lower.c     DistGraph + memory plan -> per-rank Program
 *   fuse.c      per-rank Programs: elementwise chains -> one `ew` call each
 *   outline.c   per-rank Program: repeated layers -> calls of bodies (loops)
 *
 * Passes report bad input (something the spec asks that cannot be done) as
 * FILE:LINE: error: ... and return 2; broken invariants die.
 */
#ifndef NNSC_PASSES_H
#define NNSC_PASSES_H

#include "ir.h"

/* autograd.c */
int pass_autograd(ir_graph *g);

/* recompute.c: copies of the forward ops of the [plan] recompute blocks
 * into the backward pass, read by those blocks' backward ops.  Returns 0
 * or 2 after a message. */
int pass_recompute(ir_graph *g);
/* ZeRO 3: every backward op reads a copy of its params made just before it
 * (gathered again for the backward).  Returns 0. */
int pass_zero3_regather(ir_graph *g);

/* plan.c */
int pass_plan(ir_dist *d);

/* split.c */
void pass_split(ir_dist *d);

/* comm.c */
void pass_comm(ir_dist *d);

/* schedule.c (then pass_bucket) */
void pass_schedule(ir_dist *d);

/* bucket.c: the collectives after the micro-batches (gradients' all-reduces
 * and reduce-scatters, params' all-gathers) that follow one another on
 * every member of a group in one collective (ir_comm.bucket, bnext,
 * bbytes); pass_bucket_order first reorders the post items before the
 * updates so that each group's comms of one kind follow one another
 * (before ir_dist_index_ranks) */
void pass_bucket_order(ir_dist *d);
/* Items out[0 .. n) into seq from position a on (a reorder's result), each
 * sub-op's order its new position (schedule.c). */
void pass_seq_put(ir_dist *d, int a, const ir_item *out, int n);
void pass_bucket(ir_dist *d);
/* The most bytes a bucket of reduce-scatters or all-gathers packs on
 * profile pf's devices (bucket.c). */
int64_t pass_bucket_cap(const ir_profile *pf);

/* pipeline.c: with pp stages, each stage's tasks per step (d->pipe) from
 * [plan] schedule or order, checked deadlock-free.  Returns 0 or 2. */
int pass_pipeline(ir_dist *d);
/* The rank's mb-section items in pipeline order: one entry per item and
 * task (the item's index q among the rank's items, the task's micro-batch,
 * stash slot and index in the stage's task list); returns the count, *out
 * malloc'd. */
typedef struct pass_pipe_ent {
    int q, mb, slot, task;
    int merge;   /* 1: a transfer run in one call (rt_k_p2p) with the previous entry's: the
                    transfers where two tasks meet progress together (lower.c) */
    int hoisted; /* 1: a receive moved to the start of this task from its own, later one
                    (ir_pipe.hoist) */
    int moves;   /* 1: a transfer between stages at its task's edge (hoisted, or one nothing
                    else in the task touches in between) */
} pass_pipe_ent;
#define PASS_P2P_MAX 6   /* transfers in one call (rtlib's RT_P2P_MAX) */
int pass_pipe_order(const ir_dist *d, int rank, pass_pipe_ent **out);
/* Fill p->task with built-in schedule p->sched for p->pp, v, k, m, split_w
 * and the dependencies p->dep (task0 and task allocated); zb-h1 orders by
 * cost[PASS_PIPE_C(p, s, 0, kind)] (pass_pipe_costs), or unit costs when
 * cost is NULL.  Returns 0, or 1 when zb-h1 finds no order under those
 * dependencies, 2 when the built-in needs what p lacks (interleaved: m a
 * multiple of pp). */
int pass_pipe_schedule(ir_pipe *p, const double *cost);
/* The task kind (IR_TASK_F, B, W) of the mb-section item at schedule
 * position n. */
int pass_pipe_kind(const ir_dist *d, int n);
/* A task's name into buf: F3, or with chunks F3.1 (micro-batch 3, chunk 1). */
const char *pass_pipe_task_name(const ir_pipe *p, const ir_task *t, char *buf, size_t n);
/* The task class of that item on stage s: kind + 3 x chunk (-1: not on s). */
int pass_pipe_class(const ir_dist *d, int n, int s);
/* Index of stage s's task (chunk, kind) in a cost array (3 pp nch entries). */
#define PASS_PIPE_C(p, s, chunk, kind) ((((s) * (p)->nch + (chunk)) * 3) + (kind))
/* The pipeline's task costs on the cost model: cost[PASS_PIPE_C(p, s, c,
 * kind)] gets the FLOPs of stage s's task of that kind and chunk for one
 * micro-batch (its first rank's sub-ops). */
void pass_pipe_costs(const ir_dist *d, double *cost);
/* The step of pipeline p with those task costs: the tasks list scheduled in
 * their orders, each after the tasks it depends on (p->dep); start[k] per
 * task of p->task (or NULL); returns the makespan, *bubble the idle
 * fraction of the stages; -1 when the orders wait on each other. */
double pass_pipe_simulate(const ir_pipe *p, const double *cost, double *start, double *bubble);

/* memplan.c: buffer of each pTensor on one rank */
typedef struct pass_mem {
    int rank;
    int64_t *off;        /* per pTensor of the rank (ir_dist.pt_local): arena byte offset, -1: no buffer */
    int64_t *bytes;      /* per pTensor of the rank: buffer bytes (per micro-batch for MB tensors) */
    int64_t arena;       /* total bytes */
    int64_t persistent;  /* bytes of buffers that live across steps */
    int64_t scratch;     /* offset of the scratch area comms pack into (see lower.c) */
    int64_t scratch_bytes; /* its size (0: no comm needs one) */
    int64_t cvt;         /* offset of the f32 scratch of the operands stored in bf16 (precision.c) */
    int64_t cvt_bytes;   /* its size (0: none) */
    int64_t gnorm;       /* offset of the gradient-norm scalar, or -1 (no optimizer) */
    int64_t stash;       /* pipeline: offset of the stash (buffers a micro-batch keeps between
                            its tasks), slot 0; slot k's copy is at stash + k * stash_bytes */
    int64_t stash_bytes; /* bytes of one slot (0: no pipeline) */
    int nslot;           /* slots */
} pass_mem;
void pass_memplan(const ir_dist *d, int rank, pass_mem *m);
/* Rank p's arena within what the runtime takes (IR_MAX_ARENA): 0, or 2
 * after a message at the spec line of its largest buffer.  Checked on
 * every rank before anything is written. */
int pass_arena_check(const ir_graph *g, const ir_prog *p);
void pass_mem_free(pass_mem *m);
/* pTensor pt's arena offset in m, -1 when it has no buffer there (pt on
 * another rank, or not used). */
static inline int64_t pass_mem_off(const ir_dist *d, const pass_mem *m, int pt)
{
    return d->pt[pt].dev == m->rank ? m->off[d->pt_local[pt]] : -1;
}
/* Replay the rank's schedule against its memory plan (two micro-batches,
 * the step's end, the next step): every read must find the value its
 * producer wrote, not another buffer's that shares the bytes.  Returns 0,
 * or 1 with a message naming the reader, the pTensor and what overwrote it. */
int pass_memcheck(const ir_dist *d, const pass_mem *m, char *msg, size_t cap);
/* A 128-bit key of everything pass_memcheck's verdict on m depends on (the
 * rank's items and operands in its own pTensor indices, the plan): ranks
 * with equal keys get the same verdict, so a build checks each key once. */
void pass_memcheck_key(const ir_dist *d, const pass_mem *m, uint64_t key[2]);

/* lower.c */
/* Model FLOPs of sub-op s per step when it runs in section sec (the cost
 * model behind plan.txt's compute figures and the manifest's flops_per_step). */
double pass_subop_flops(const ir_graph *g, const ir_subop *s, int sec);
/* Cost formula f (ir/ops.h's cost column; NULL or "": "4 @0") of op o over
 * extents ext: the product of its factors, NAN when a word is none. */
double pass_cost_formula(const ir_op *o, const char *f, const int64_t *ext);
/* One kernel int of the op table's args column (ir/ops.h), parsed against
 * row oi: its form (PASS_ARG_*, PASS_ARG_BAD when it is none) and what the
 * form names: attr its IR_IA_* slot; lo the operand k (inputs, then
 * outputs), the dim j (negative: from the last) and the identifier it
 * divides by (id, "" for none); max two identifiers (id, id2).  nin, nout:
 * the op's operand counts; shapes: per operand its number of dims, then
 * the sub-op's extent of each (a custom op's: rtlib/nnsc_custom.h). */
enum { PASS_ARG_BAD, PASS_ARG_ACC, PASS_ARG_FORMULA, PASS_ARG_ATTR, PASS_ARG_LO, PASS_ARG_MAX, PASS_ARG_STEP,
       PASS_ARG_NIN, PASS_ARG_NOUT, PASS_ARG_SHAPES /* (as many ints as the operands' dims, and one each) */ };
typedef struct pass_arg {
    int form, slot, k, j;
    char id[16], id2[16];
} pass_arg;
int pass_arg_parse(const ir_opinfo *oi, const char *w, pass_arg *a);

/* The cost model (cost.c) on the graph's profile g->prof. */
typedef struct pass_estimate {
    double step;      /* seconds per optimizer step (the slowest rank; a pipeline's timeline) */
    int rank;         /* the slowest rank (without a pipeline) */
    double compute;   /* its seconds of compute in the micro-batches, per step */
    double comm;      /* its seconds of collectives and transfers in the micro-batches, per step */
    double outside;   /* its seconds outside them (gradient collectives, updates) */
    double bubble;    /* a pipeline's idle fraction on the tasks' timeline (0 without) */
    double tasks;     /* a pipeline: the tasks' timeline alone, without the transfers' waits (s) */
} pass_estimate;
/* Seconds of sub-op s per execution in section sec (roofline). */
double pass_cost_subop(const ir_dist *d, const ir_subop *s, int sec);
/* Seconds of a collective of kind over n members whose busiest one sends bytes (alpha-beta); spans_nodes:
 * 0 within a node, else the most members the group has on one node (their ports carry it between nodes). */
double pass_cost_collective(const ir_profile *pf, ir_commkind kind, int n, double bytes, int spans_nodes);
/* The fraction of the profile's sms that a GEMM output of rows x cols keeps busy (tile and wave quantization). */
double pass_cost_wave_eff(int sms, double rows, double cols);
/* Seconds of one execution of comm c. */
double pass_cost_comm(const ir_dist *d, const ir_comm *c);
/* Item n of d->seq's seconds per execution (a comm's or a sub-op's), kept in d->itime once priced. */
double pass_item_time(const ir_dist *d, int n);
/* Balanced pipeline stages (balance.c): cut layers 0 .. nl-1 (costs cost[l];
 * pre on the first virtual stage, post on the last) into parts runs of
 * consecutive layers, virtual stage j on stage j % pp, minimising the
 * slowest stage's time; Z3 with a binary search on it, within work of Z3's
 * resource units in all (0: no bound; a count, not a time: the same cut on
 * every run and machine) and budget_s seconds (the net for a far slower
 * machine).  cut[0..parts] the first layer of each run (cut[parts] = nl);
 * *best_ms and *even_ms the slowest stage's time of that cut and of the
 * even one (in the costs' unit x 1e3).  0: a cut better than the even one
 * is in cut; 1: none (cut holds the even one). */
int pass_balance_cuts(int nl, const double *cost, double pre, double post, int pp, int parts, double budget_s,
                      uint64_t work, int *cut, double *best_ms, double *even_ms);
/* Per-op op-trans of a block on the tp axis (optrans.c): the abstract
 * problem -- a choice per op (nch[o] of them, choice 0 the incumbent), its
 * cost unary[o * PASS_OT_MAXC + c] and memory mem[...], and per tensor, for
 * each layout L (PASS_OT_NL codes: whole, partial, split along dim j) that
 * some consumer needs (forward) or gives its gradient in (backward), a
 * cost by the producer's choice (fcost, bcost; INT64_MAX: not possible).
 * The total memory at most mem_cap (-1: no bound). */
#define PASS_OT_MAXC 8
#define PASS_OT_NL 8
typedef struct pass_otc {
    int op;                        /* the consuming op */
    int8_t need[PASS_OT_MAXC];     /* per its choice: the layout it needs */
    int8_t grad[PASS_OT_MAXC];     /* per its choice: the layout of its gradient contribution (-1: none) */
} pass_otc;
typedef struct pass_ott {
    int prod;                      /* the producing op, or -1 (from outside: one fixed choice) */
    int c0, nc;                    /* its consumers: pass_otp.c[c0 .. c0 + nc) */
    int64_t fcost[PASS_OT_MAXC][PASS_OT_NL];   /* [producer's choice][layout needed] */
    int64_t bcost[PASS_OT_MAXC][PASS_OT_NL];   /* [producer's choice][gradient's layout given] */
} pass_ott;
typedef struct pass_otp {
    int nop;
    int *nch;
    int64_t *unary, *mem;
    int64_t mem_cap;
    int nt, ncons;
    pass_ott *t;
    pass_otc *c;
    int nimp;
    int (*imp)[4];                 /* (a, ca, b, cb): op a taking choice ca makes op b take cb (a follower) */
} pass_otp;
/* The total cost of choices x (INT64_MAX: not possible, over mem_cap, or
 * against an implication); *mem its memory. */
int64_t pass_ot_eval(const pass_otp *p, const int *x, int64_t *mem);
/* The cheapest choices by Z3 (weighted MaxSAT with its Optimize, within
 * work of its resource units; 0: no bound): x holds the incumbent, and on
 * return the best found (the optimum, or where the work ran out Z3's best
 * model if cheaper), *best its cost, *proved 1 when it is the optimum.
 * 0: better than the incumbent; 1: not. */
int pass_ot_solve(const pass_otp *p, uint64_t work, int *x, int64_t *best, int *proved);
void pass_otp_free(pass_otp *p);
typedef struct pass_otreq {
    int dp, tp, m, zero;           /* the candidate's mesh, micro-batches, ZeRO level */
    int bdiv;                      /* what divides the graph's batch on a device besides the micro-batches:
                                      dp, or 1 (the graph holds one dp replica's batch) */
    int spans_dp;                  /* 1: its dp groups span nodes */
    double stash;                  /* micro-batches' activations kept at once (0: recomputed) */
    double mem_room;               /* bytes a layer may add over the incumbent's (-1: no bound) */
    uint64_t work;                 /* Z3's budget (resource units) */
} pass_otreq;
typedef struct pass_otres {
    double model0, model;          /* seconds per layer and step on the model: the incumbent's, the best's */
    double space;                  /* combinations */
    int nop, changed, proved;      /* the block's ops, how many changed, 1: the best is the model's optimum */
} pass_otres;
/* One op's choice: the op-trans of an op of a block on every repeat. */
typedef struct pass_otchoice {
    char pat[256];                 /* the op's generic name, its block's pattern: "h.fc" */
    char batch[8];                 /* its batch identifier (ir_anno.idname), "" where it has none */
    char split[16];                /* what tp splits: an identifier, "replicate" or "value" */
} pass_otchoice;
typedef struct pass_otlist {
    pass_otchoice *v;
    int n, cap;
} pass_otlist;
/* Block blk's forward ops (repeat 1, or 0 when there is one) on d's plan (after pass_plan: the
 * incumbent): the cheapest choices on the model appended to out, an item per op (the incumbent's
 * where nothing is cheaper).  0: a choice other than the incumbent's; 1: none. */
int pass_optrans(const ir_dist *d, int blk, const pass_otreq *q, pass_otlist *out, pass_otres *res);
/* The plan's step on the cost model (after pass_pipeline). */
void pass_cost_step(const ir_dist *d, pass_estimate *e);
void pass_lower(const ir_dist *d, const pass_mem *m, ir_prog *p);
/* A box in the coordinates of one micro-batch when sec is IR_SEC_MB (the
 * batch dim divided by micro_batches). */
ir_box pass_mbbox(const ir_dist *d, int tensor, const ir_box *b, int sec);
/* The scratch bytes comm ci needs on rank in section sec (an upper bound
 * for the collectives; a transfer, broadcast or copy needs it only where
 * it stages its region). */
int64_t pass_comm_scratch(const ir_dist *d, int ci, int rank, int sec);

/* fuse.c: fuse chains of elementwise instructions into `ew` instructions
 * (rtlib/rt_kernels.h) in every rank's program, numbering the distinct
 * chains of the build 0, 1, ... (i[0], the same number on every rank).
 * Shared by the cpu and cuda targets.  Returns the number of distinct chains. */
int pass_fuse(ir_prog *progs, int nprogs);
/* The same one Program at a time (the chain numbers live in f): the
 * driver fuses each rank's as it is lowered.  pass_fuse_prog is
 * pass_fuse_local (the fusion; the chains' numbers not yet set) then
 * pass_fuse_number (in program order, bodies at their calls: it may run
 * after pass_outline, which treats equal chains alike whatever their
 * number), so ranks can be fused on several threads and numbered in rank
 * order. */
typedef struct pass_fuse_ids pass_fuse_ids;
pass_fuse_ids *pass_fuse_new(void);
void pass_fuse_prog(pass_fuse_ids *f, ir_prog *p);
void pass_fuse_local(ir_prog *p);
void pass_fuse_number(pass_fuse_ids *f, ir_prog *p);
int pass_fuse_count(const pass_fuse_ids *f);
void pass_fuse_free(pass_fuse_ids *f);

/* outline.c: in each section of p, the runs of instructions of consecutive
 * repeats of a block that have the same shape become one call of a body
 * (pg_body) with a table of one row per repeat; equal bodies are shared.
 * Run after fusion, per rank.  Returns the number of calls made. */
int pass_outline(ir_prog *p);

/* share.c: ranks that share one program.  Add every rank's Program in
 * rank order (pass_share_add takes it and leaves *p empty; it returns the
 * rank's class); pass_share_finish returns the shared Programs, one per
 * class in order of their first rank (nmember, member, nvar, rv, the
 * marks and the manifest template set), with each rank's class and row,
 * and frees the state. */
typedef struct pass_share pass_share;
pass_share *pass_share_new(int world);
int pass_share_add(pass_share *s, ir_prog *p);
ir_prog *pass_share_finish(pass_share *s, int *nprog, int *cls_of, int *row_of);

/* Is pTensor pt summed over the micro-batches of a step (schedule.c's
 * accum, but for ZeRO 2 a gradient's partial pieces: those are reduced in
 * each micro-batch and their shards accumulate)? */
static inline int pass_pt_accum(const ir_dist *d, int pt)
{
    int t = d->pt[pt].tensor;
    return d->accum[t] && !(d->zgrad[t] && d->pt[pt].vn > 1);
}

/* Shared helpers (plan.c). */
/* The annotation identifier of op that carries the batch, or -1. */
int pass_batch_id(const ir_graph *g, int op);
/* Bytes of one element. */
int pass_elsize(const ir_tensor *t);

/* precision.c */
/* Mark the tensors stored in bf16 ([train] storage = bf16) in d->t16: after
 * pass_comm and pass_schedule (it reads the comms and accum). */
void pass_precision(ir_dist *d);
/* Bytes per element of tensor t's buffers: 2 when stored in bf16, else
 * pass_elsize. */
int pass_t_elsize(const ir_dist *d, int t);
/* Buffer bytes of pTensor pt (one micro-batch's when batched): a bf16
 * buffer in whole 4-byte words (kernels count words: rt_kernels.h cvt_*). */
int64_t pass_pt_store_bytes(const ir_dist *d, int pt);
/* The f32 scratch of sub-op s's operands stored in bf16: the distinct
 * pTensors pt[j] (inputs, then outputs), each at byte at[j] of the scratch
 * with n[j] elements, is_out[j] when the sub-op writes it; returns how
 * many (at most 2 IR_MAXIO), *total the bytes they take. */
int pass_cvt_layout(const ir_dist *d, const ir_subop *s, int *pt, int64_t *at, int64_t *n, int *is_out,
                    int64_t *total);
/* Does comm ci move its bf16 tensor as bf16 (2-byte elements in whole
 * words: transfers and gathers that move whole buffers)?  0 for a tensor
 * stored in f32, and for the comms lower.c widens around (the f32 wire:
 * reductions, slices, accumulation; pass_comm_cvt). */
int pass_comm_wire16(const ir_dist *d, int ci);
/* Bytes comm ci puts on the wire (ir_comm.bytes, halved for bf16). */
int64_t pass_comm_bytes(const ir_dist *d, int ci);
/* The f32 scratch lower.c widens member k's in and out pTensors into for a
 * comm of a bf16 tensor on the f32 wire: returns 0 when none; *nin, *nout
 * their elements (one execution's, section sec), the in copy at byte 0 of
 * the scratch, the out copy at *at_out, *total the bytes of both. */
int pass_comm_cvt(const ir_dist *d, int ci, int k, int sec, int64_t *nin, int64_t *nout, int64_t *at_out,
                  int64_t *total);
/* Are the tiles (in member order) consecutive blocks of whole's row-major
 * buffer (lower.c)? */
int pass_direct_tiles(const ir_box *whole, const ir_box *const *tile, int k, int nd);
/* While set (the plan search trying candidates), pass_error prints nothing and keeps its
 * message in pass_last_error instead. */
extern _Thread_local int pass_quiet;   /* (per thread: the plan search prices in several) */
extern _Thread_local char pass_last_error[512];
/* Report bad input at the spec's line (0: none); returns 2. */
int pass_error(const ir_graph *g, int line, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- policy = auto (search.c, docs/plan-search.md)
 *
 * Where candidates' graphs come from: load(ctx, batch_div, layers, g) puts
 * into g a fresh forward graph of the model (its plan request and lists
 * the spec's) with every input's batch divided by batch_div and, layers >
 * 0, the blocks' repeats scaled to that many layers in all; 0, or nonzero
 * (g freed).  The frontend's loads the spec (fe_load_fold); it is called
 * from the search's threads. */
typedef struct pass_src {
    int (*load)(void *ctx, int64_t batch_div, int layers, ir_graph *g);
    void *ctx;
    int verbose;   /* the search's report and each candidate's price on stderr */
} pass_src;
/* Choose g's plan: every candidate built by the passes and priced; the
 * fastest that fits written into g's plan request and lists, its report in
 * g->req.search.  0, or 2 after a message (nothing fits). */
int pass_search(const pass_src *src, ir_graph *g);
/* The cost model's step (seconds) of loaded graph g's plan (g is planned:
 * free it after); 0 or 2. */
int pass_search_estimate(ir_graph *g, double *step);

#endif
