/* ir.h -- the three IR levels of nnsc-aot and everything that works on them.
 *
 *   Graph      logical ops on vTensors (ir_graph)             ir/graph.c
 *   DistGraph  sub-ops on devices over pTensors, comm ops     ir/dist.c
 *   Program    per rank: instruction lists with arena offsets ir/prog.c
 *
 * Objects live in arrays owned by their graph and refer to each other by
 * integer ids, so graphs copy, dump and diff deterministically.  Every
 * string a graph holds is copied into the graph's string pool and freed with
 * the graph.
 */
#ifndef NNSC_IR_H
#define NNSC_IR_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define IR_MAXDIM   8   /* most dimensions of a tensor */
#define IR_MAXIO    7   /* most inputs (or outputs) of an op (attention_vl_bwd: 7 inputs) */
#define IR_CUSTOM_MAXIO 6   /* most inputs (or outputs) of a [custom] op */
#define IR_MAXID    16  /* most distinct identifiers in one annotation */
#define IR_MAXSPLIT 5   /* most nested op-trans splits of one op */
#define IR_MAXFATTR 6   /* float attributes of an op */
#define IR_MAXIATTR 27  /* integer attributes of an op */

/* Limits of the runtime's manifest reader (rtlib/io/manifest.c): a rank
 * whose manifest passed one could never start, so the compiler checks them
 * where the values are made (tests/test_passes checks they are the
 * reader's).  Every tensor of a graph, declared or derived, has at most
 * IR_MAX_NUMEL elements (ir_add_tensor asserts it), so its bytes and their
 * sums over a rank fit in 64 bits. */
#define IR_MAX_NUMEL (INT64_C(1) << 40)  /* elements of a tensor (and so of each of its dims) */
#define IR_MAX_ARENA (INT64_C(1) << 46)  /* bytes of a rank's arena */
#define IR_MAX_NAME 255                  /* bytes of a model or tensor name (rtlib's RT_NAME_MAX - 1) */
#define IR_MAX_RANGE INT32_MAX           /* the range of an int input's synthetic values */

/* ---------------------------------------------------------------- util.c */

/* Broken invariant: print file:line and message, abort. */
#define IR_ASSERT(c)                                                         \
    do {                                                                     \
        if (!(c)) ir_die(__FILE__, __LINE__, "assertion failed: %s", #c);    \
    } while (0)
_Noreturn void ir_die(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A recovery point for ir_die in this thread (the plan search's candidate
 * builds, passes/search.c): while one is pushed, ir_die pops it, writes its
 * message to msg ("passes/comm.c:1143: no communication rule ...") and
 * longjmps to jb instead of aborting.  Push, then `if (setjmp(r->jb) == 0)`
 * the work and pop; where it returns nonzero, ir_die popped it already.  The
 * objects the work changes belong to a caller of the function that calls
 * setjmp (C leaves that function's own locals indeterminate).  What the
 * dying code had allocated and not yet linked into them is lost, and a
 * lock it held stays held: push only around work that holds none (the
 * spec's loader takes inih's). */
typedef struct ir_recover {
    jmp_buf jb;
    struct ir_recover *prev;   /* the one pushed before, restored when this one pops */
    char msg[512];
} ir_recover;
void ir_recover_push(ir_recover *r);
void ir_recover_pop(ir_recover *r);
void *ir_xmalloc(size_t n);               /* malloc or die */
void *ir_xcalloc(size_t n, size_t sz);    /* calloc or die */
void *ir_xrealloc(void *p, size_t n);     /* realloc or die */
char *ir_xstrdup(const char *s);          /* strdup or die */
/* Grow *p (an array of *cap elements of size sz) to hold at least n. */
void ir_grow(void **p, int *cap, int n, size_t sz);
#define IR_PUSH(arr, n, cap) (ir_grow((void **)&(arr), &(cap), (n) + 1, sizeof *(arr)), &(arr)[(n)++])

/* qsort's order of int64s (an array of them, or records that start with one). */
int ir_cmp_i64(const void *a, const void *b);
/* Checked 64-bit arithmetic: return 0 and set *r, or return 1 on overflow. */
int ir_mul_ovf(int64_t a, int64_t b, int64_t *r);
int ir_add_ovf(int64_t a, int64_t b, int64_t *r);
/* A min-heap of ints in h[0 .. *n) (ir/graph.c): push x; pop the smallest (*n > 0). */
void ir_heap_push(int *h, int *n, int x);
int ir_heap_pop(int *h, int *n);

/* A growable text buffer (dumps, plan.txt, manifests). */
typedef struct ir_buf {
    char *s;   /* NUL-terminated text */
    size_t n;  /* length */
    size_t cap;/* allocated bytes */
} ir_buf;
void ir_bprintf(ir_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append a byte count with its unit (B, KiB, MiB, GiB, TiB): plan.txt's sizes. */
void ir_bprint_bytes(ir_buf *b, double bytes);
void ir_buf_free(ir_buf *b);

/* ---------------------------------------------------------------- ops.h */

/* Op flags, see ir/ops.h. */
enum {
    OPF_USER = 1,   /* usable in a spec */
    OPF_LOSS = 2,   /* produces the loss */
    OPF_OPTIM = 4,  /* optimizer update, in place, no outputs */
    OPF_ELTW = 8,   /* elementwise */
    OPF_LINEAR = 16,/* linear in every input: may consume value-split inputs (partial sums) */
};

typedef enum ir_opkind {
#define OP(e, name, anno, nin, nout, flags, kern, bwd, bargs, cost, args) IR_OP_##e,
#include "ops.h"
#undef OP
    IR_OP_COUNT
} ir_opkind;

typedef struct ir_opinfo {
    const char *name;  /* spec name */
    const char *anno;  /* annotation template (may hold `*`) */
    int nin;           /* number of inputs */
    int nout;          /* number of outputs */
    int flags;         /* OPF_* */
    int kern;          /* the RT_K_* kernel it lowers to, or -1 (lowered by hand: passes/lower.c) */
    int bwd;           /* the backward op giving input 0's gradient (IR_OP_*), or -1: a rule in
                          passes/autograd.c, or none */
    const char *bargs; /* bwd's inputs: "dy", "x", "w", "y" separated by spaces */
    const char *cost;  /* FLOPs of a sub-op as a product of factors (ir/ops.h); "": 4 per element of operand 0 */
    const char *args;  /* the kernel's ints and floats, "INTS; FLOATS" (ir/ops.h) */
} ir_opinfo;
extern const ir_opinfo ir_ops[IR_OP_COUNT];
/* The annotation of a reshape of x to the shape in iattr (IR_IA_RNDIM,
 * IR_IA_RSHAPE) into buf: the leading dims they share as identifiers
 * p0, p1, ..., the others as numbers ("p0 64 12 -> p0 768").  0, or -1 with
 * err when the shape is bad or has another element count. */
struct ir_tensor;
int ir_reshape_anno(const struct ir_tensor *x, const int64_t *iattr, char *buf, size_t len, char *err, size_t errsz);
/* Op kind by spec name, or -1. */
int ir_op_lookup(const char *name);
/* The inputs of kind's one-op backward rule (ir_opinfo.bwd, bargs), as
 * roles IR_BA_*: their count (at most IR_BA_MAX), or -1 when bargs is
 * malformed (a word that is not dy, x, w or y; more than IR_BA_MAX). */
enum { IR_BA_DY, IR_BA_X, IR_BA_W, IR_BA_Y, IR_BA_MAX = 4 };
/* Attention's forward (attention, attention_vl) and backward kinds. */
#define IR_IS_ATT(k) ((k) == IR_OP_ATTENTION || (k) == IR_OP_ATTENTION_VL || (k) == IR_OP_ATTENTION_AB)
/* (attention_dbias counts as a backward: it reads the backward's inputs in its order) */
#define IR_IS_ATT_BWD(k) ((k) == IR_OP_ATTENTION_BWD || (k) == IR_OP_ATTENTION_VL_BWD || \
                          (k) == IR_OP_ATTENTION_AB_BWD || (k) == IR_OP_ATTENTION_DBIAS)
int ir_op_bwd_inputs(int kind, int *role);
struct ir_graph;
struct ir_op;
/* The kind's name of op o as the spec writes it (a custom op's section name). */
const char *ir_op_kind_name(const struct ir_graph *g, const struct ir_op *o);

/* ------------------------------------------------------------- dimops.c */

/* One dimension of one operand in an instantiated annotation.  A merged
 * dimension "(h d)" has id = h (the outer identifier) and sub = {d}: its
 * extent is ext[h] * ext[d], and splitting h cuts it into contiguous blocks. */
typedef struct ir_adim {
    int64_t lit;     /* the literal size when id == -1 */
    int8_t id;       /* identifier index into ir_anno.idname, or -1: literal */
    uint8_t reduce;  /* marked `+` */
    uint8_t frozen;  /* marked `^` */
    uint8_t nsub;    /* inner identifiers merged into this dim (0: a plain dim) */
    int8_t sub[2];   /* their identifier indices, outer to inner */
} ir_adim;           /* (16 bytes: every op holds 2 * IR_MAXIO * IR_MAXDIM of them) */
_Static_assert(IR_MAXID <= 127, "ir_adim's identifier indices are int8_t");

/* An annotation with `*` expanded for concrete operand ranks. */
typedef struct ir_anno {
    int nin, nout;                          /* operands: inputs then outputs */
    int ndim[2 * IR_MAXIO];                 /* rank of each operand */
    ir_adim dim[2 * IR_MAXIO][IR_MAXDIM];   /* dims of each operand */
    int nid;                                /* number of identifiers */
    char idname[IR_MAXID][8];               /* identifier names (`*` dims print as *0, *1 ...) */
    uint8_t id_reduce[IR_MAXID];            /* identifier is a reduction (value-splits outputs) */
    uint8_t id_frozen[IR_MAXID];            /* identifier must not be split */
    uint8_t id_inner[IR_MAXID];             /* inner member of a merged dim: not split */
} ir_anno;

/* Instantiate annotation text for operands of the given ranks (inputs only;
 * output ranks follow).  Returns 0, or 1 with a message in err. */
int ir_anno_parse(const char *text, int nin, const int *in_ndim, ir_anno *a,
                  char *err, size_t errsz);
/* Print an instantiated annotation ("*0 k+, k n -> *0 n"). */
void ir_anno_print(const ir_anno *a, ir_buf *b);
/* Identifier index by name, or -1. */
int ir_anno_find(const ir_anno *a, const char *name);

/* ------------------------------------------------------------- graph.c */

typedef enum ir_dtype {
    IR_F32,  /* 32-bit float */
    IR_I32,  /* 32-bit signed integer (token ids, class targets) */
    IR_BF16, /* bfloat16: a tensor's storage under [train] storage = bf16 (passes/precision.c) */
} ir_dtype;

typedef enum ir_tkind {
    IR_T_INPUT,    /* data fed per step (synthetic or from a file) */
    IR_T_PARAM,    /* trained weight */
    IR_T_ACT,      /* activation (forward value) */
    IR_T_GRAD,     /* gradient of a param or activation */
    IR_T_OPTSTATE, /* optimizer state (AdamW moments) */
    IR_T_LOSS,     /* the scalar loss */
} ir_tkind;

typedef enum ir_initkind {
    IR_INIT_NONE,    /* not a parameter */
    IR_INIT_ZEROS,   /* all 0 */
    IR_INIT_ONES,    /* all 1 */
    IR_INIT_CONST,   /* all a */
    IR_INIT_NORMAL,  /* N(0, a^2) */
    IR_INIT_UNIFORM, /* U[a, b) */
} ir_initkind;

/* Synthetic data distributions of inputs. */
typedef enum ir_datakind {
    IR_DATA_NORMAL,  /* f32 N(0, 1) */
    IR_DATA_INT,     /* i32 uniform in [0, range) */
    IR_DATA_ZEROS,   /* f32 0 (a recycle op's value before the first pass, frontend/lower.c) */
} ir_datakind;

/* A vTensor: a full logical tensor of the single-device model. */
typedef struct ir_tensor {
    const char *name;       /* spec name, or derived name (d.fc1.w for grads) */
    ir_dtype dtype;         /* element type */
    ir_tkind kind;          /* role */
    int ndim;               /* rank (0..IR_MAXDIM) */
    int64_t shape[IR_MAXDIM];
    int batch_dim;          /* dim that carries the batch (split by dp, micro-batches), or -1 */
    int producer;           /* op id, or -1 (inputs, params, opt state) */
    int grad;               /* tensor id of its gradient, or -1 */
    int grad_of;            /* for IR_T_GRAD: the tensor it is the gradient of, else -1 */
    int opt_of;             /* for IR_T_OPTSTATE: the param it belongs to, else -1 */
    ir_initkind init;       /* params: initialiser */
    double init_a, init_b;  /* initialiser arguments */
    const char *import;     /* params: the name --init also accepts (a Hugging Face checkpoint's), or NULL */
    int import_t;           /* ... stored transposed there (2-D: a torch Linear's (out, in) weight) */
    int frozen;             /* params: trainable = false (no gradient, no update; loaded and saved) */
    ir_datakind data;       /* inputs: synthetic distribution */
    int64_t data_range;     /* inputs with IR_DATA_INT: values in [0, range) */
    int stream;             /* inputs: token offset in the data file's rows (-1: synthetic only) */
    int line;               /* spec line that declared it (0: derived) */
} ir_tensor;

/* A logical op. */
typedef struct ir_op {
    const char *name;       /* spec name, or derived (fc1.bwd0) */
    ir_opkind kind;         /* row of ir_ops */
    int nin, nout;          /* operand counts */
    int in[IR_MAXIO];       /* input tensor ids */
    int out[IR_MAXIO];      /* output tensor ids */
    ir_anno anno;           /* annotation instantiated for these operands */
    int64_t ext[IR_MAXID];  /* extent of each annotation identifier */
    double fattr[IR_MAXFATTR]; /* float attributes (loss scale, lr ...) */
    int64_t iattr[IR_MAXIATTR];/* integer attributes */
    int phase;              /* IR_PH_* */
    int block;              /* block id or -1 */
    int rep;                /* repeat index within the block, or -1 */
    int fwd;                /* for backward ops: the forward op id, else -1 */
    int recomp;             /* 1: a copy of forward op fwd run in the backward pass (passes/recompute.c) */
    int pass;               /* recycling ([train] recycle = R): the forward pass 0 .. R-1 the op runs in
                               (ops that read no recycled value: 0; the last pass has the gradients) */
    int orig;               /* recycling: for an op of pass < R-1, the op of pass R-1 it copies, else -1 */
    int line;               /* spec line (0: derived) */
} ir_op;

enum {
    IR_PH_FWD,   /* forward */
    IR_PH_BWD,   /* backward */
    IR_PH_OPT,   /* optimizer update */
};

/* Integer attribute slots. */
enum {
    IR_IA_HEADS = 0,  /* attention, rope: number of heads (binds identifier h) */
    IR_IA_CAUSAL = 1, /* attention: 1 = causal mask */
    IR_IA_VOCAB = 2,  /* cross_entropy: real vocabulary size (columns past it are padding) */
    IR_IA_CUSTOM = 3, /* custom: the ir_graph.cust row */
    IR_IA_KV_HEADS = 4,/* attention: key/value heads (0: heads; grouped-query when fewer) */
    IR_IA_MEAN_T = 5, /* mean, mean_bwd: the extent of t (binds t in the backward) */
    IR_IA_XBLOCKS = 6,/* xent_stats, xent_vp_bwd: vocabulary blocks (binds k of the logits' (k c)) */
    IR_IA_FIRST = 7,  /* split: the last dim of output 1 (binds a; output 2 gets the rest) */
    IR_IA_ALIBI = 8,  /* attention: 1 = ALiBi's linear biases on the scores */
    IR_IA_START = 9,  /* slice, pad: the first position of the dim before the last kept */
    IR_IA_STOP = 10,  /* slice, pad: one past the last (s = stop - start) */
    IR_IA_FULL = 11,  /* slice, pad: the dim's whole extent (binds t in pad) */
    IR_IA_GROUPS = 12,/* split, concat: the last dim's groups (binds g; 0 or 1: one) */
    IR_IA_RNDIM = 13, /* reshape: the output's number of dims (1 .. IR_MAXDIM) */
    IR_IA_RSHAPE = 14,/* reshape: the output's extents, slots RSHAPE .. RSHAPE + RNDIM - 1 */
    IR_IA_RP_T = 22,  /* relpos_bias(_bwd): the query positions (binds t) */
    IR_IA_RP_S = 23,  /* relpos_bias(_bwd): the key positions (binds s) */
    IR_IA_RP_NB = 24, /* relpos_bias(_bwd): the buckets, the table's rows (binds b in the backward) */
    IR_IA_RP_BIDIR = 25,/* relpos_bias(_bwd): 1 = bidirectional (an encoder's): half the buckets for keys after the query */
    IR_IA_RP_MAXDIST = 26,/* relpos_bias(_bwd): the distance from which on every distance shares the last bucket */
};

/* Float attribute slots. */
enum {
    IR_FA_SCALE = 0,  /* loss ops and their backward: 1 / number of averaged terms */
    IR_FA_LR = 0,     /* optimizers: learning rate */
    IR_FA_WD = 1,     /* optimizers: weight decay */
    IR_FA_BETA1 = 2,  /* adamw */
    IR_FA_BETA2 = 3,  /* adamw */
    IR_FA_EPS = 4,    /* adamw */
    IR_FA_LN_EPS = 1, /* layernorm: variance epsilon */
    IR_FA_THETA = 0,  /* rope: the base of the rotation frequencies (10000) */
};

/* A repeated block of the spec (unrolled into ops tagged with it). */
typedef struct ir_block {
    const char *name;  /* block name (h) */
    int repeat;        /* repeat count */
    int line;          /* spec line */
} ir_block;

/* Training settings from [train]. */
typedef struct ir_train {
    int loss;                 /* tensor id of the loss */
    int optimizer;            /* IR_OP_SGD or IR_OP_ADAMW */
    double lr, weight_decay, beta1, beta2, eps;
    int64_t steps;            /* optimizer steps */
    int64_t micro_batches;    /* gradient accumulation steps per optimizer step */
    int recycle;              /* forward passes per micro-batch (AlphaFold's recycling): R - 1 without
                                 gradients, each feeding its recycle ops' inputs to the next, then one
                                 with (1: none) */
    int64_t data_period;      /* synthetic data: distinct batches, cycled */
    const char *data;         /* token file or glob of shards, or NULL: synthetic */
    const char *eval_data;    /* held-out token file, or NULL */
    int64_t eval_every;       /* evaluate every K steps (0: never) */
    int64_t eval_steps;       /* batches per evaluation */
    int cosine;               /* lr schedule: 0 constant, 1 cosine decay to min_lr */
    int64_t warmup;           /* linear warmup steps */
    double min_lr;            /* cosine floor */
    double grad_clip;         /* global gradient-norm threshold (0: none) */
    int bf16;                 /* dtype = bf16: every matmul reads its inputs rounded to bf16
                                 (matmul_bf16); 0: f32 throughout */
    int store16;              /* storage = bf16 (dtype = bf16's default): activations and activation
                                 gradients stored in bf16 (passes/precision.c); 0: f32 */
} ir_train;

/* ---- The plan record's lists: what the plan passes read (plan.c,
 * recompute.c) for op-trans, co-shard, op-assign to stages, recompute and
 * each stage's tp.  The frontend parses the spec's [plan] text into them
 * (frontend/planspec.c: the syntax, with the spec's line); policy auto's
 * search fills them for each candidate directly (passes/search.c).  What
 * an item names is checked against the graph by the pass that reads it.
 * Strings and arrays are the graph's (its pool: ir_str, ir_galloc). */
typedef struct ir_optrans {   /* trans: ops matching pat split over identifiers, in order */
    const char *pat;          /* op pattern (fnmatch; h.fc: every repeat's) */
    int n;                    /* splits (1 .. IR_MAXSPLIT) */
    char id[IR_MAXSPLIT][16]; /* an annotation identifier, replicate or value */
    int parts[IR_MAXSPLIT];
} ir_optrans;
typedef struct ir_cosh {      /* coshard: ops matching pat in k pieces of identifier id a device */
    const char *pat;
    char id[32];
    int k;
} ir_cosh;
typedef struct ir_assign {    /* stage: the forward ops item names on stage k (a later item wins) */
    const char *item;         /* an op pattern, or a block's repeats (h, h.3, h.0-5); NULL: blk's */
    int k;                    /* the (virtual) stage; all: every device, interlaced */
    int all;
    int blk, lo, hi;          /* item NULL: repeats lo .. hi of block blk */
} ir_assign;
typedef struct ir_rcitem {    /* recompute: repeats lo .. hi of block blk (attn: the attention alone) */
    int blk, lo, hi;          /* hi = -1: every repeat */
    int attn;
    const char *text;         /* as written ("h.0-5:attn"), for messages */
} ir_rcitem;
typedef struct ir_planlists {
    ir_optrans *trans; int ntrans;
    ir_cosh *cos; int ncos;
    ir_assign *stage; int nstage;
    ir_rcitem *rc; int nrc;
    int *stage_tp; int nstage_tp; /* each stage's tp degree (nstage_tp 0: tp everywhere) */
} ir_planlists;

/* Plan request from [plan] and [cluster]. */
typedef struct ir_planreq {
    int devices;              /* world size */
    const char *policy;       /* "dp", "tp" or "hybrid" */
    int policy_line;          /* spec line of policy (0: default or --set) */
    int dp, tp;               /* hybrid degrees (0: not given) */
    const char *trans;        /* user op-trans constraints, as written, or NULL */
    int trans_line;           /* spec line of trans */
    int pp;                   /* pipeline stages (1: none) */
    int pp_line;              /* spec line of pp (0: default or --set) */
    const char *stage;        /* user op-assign to stages ("h.0-5 0, lm_head 1"), or NULL */
    int stage_line;           /* spec line of stage */
    int schedule;             /* IR_SCHED_*: the pipeline's op-order */
    int group;                /* kFkB: micro-batches per group k (IR_SCHED_KFKB) */
    int chunks;               /* model chunks per stage (virtual stages = pp x chunks); 0: not given */
    int chunks_line;          /* spec line of chunks */
    const char *order;        /* a user order of tasks per stage ("F0 F1 B0 B1; ..."), or NULL */
    int order_line;           /* spec line of order */
    int zero;                 /* ZeRO level 0..3: the optimizer update (1, 2), and the params (3), sharded
                                 on the dp axis */
    int zero_line;            /* spec line of zero */
    const char *coshard;      /* co-shard: ops split further into pieces run one after another on the
                                 same device ("h.attn h 2, ..."), or NULL */
    int coshard_line;         /* spec line of coshard */
    const char *recompute;    /* blocks (or repeats) whose forward is recomputed in the backward, or NULL */
    int recompute_line;       /* spec line of recompute */
    const char *search;       /* policy auto: the search's report for plan.txt, or NULL */
    int pp_given, zero_given; /* pp, zero written in the spec or --set (policy auto keeps them) */
    int schedule_given;       /* schedule written in the spec or --set (policy auto keeps it) */
    int no_balance;           /* balance = false: policy auto keeps the even cut of the layers */
    int seq_par;              /* sequence_parallel = true: ops of the blocks that tp would replicate
                                 split the sequence (Megatron's sequence parallelism) */
    int seq_par_given;        /* the spec sets sequence_parallel (policy auto keeps it) */
    int no_fold_layers;       /* fold_layers = false: policy auto builds every candidate on every layer */
    int trans_auto;           /* trans was set by policy auto (its op-trans refinements), not the spec */
    int no_per_op;            /* per_op_trans = false: policy auto keeps the policy's op-trans (no
                                 ops outside the blocks whole on tp, no MLP chains on tokens) */
    int no_accum;             /* accumulate = false: policy auto keeps one micro-batch without a
                                 pipeline (no gradient accumulation) */
    int no_cos_rung;          /* coshard_rung = false: policy auto's memory ladder stops before its
                                 last rung (the blocks' MLP chains co-sharded) */
    int no_grad_buckets;      /* grad_buckets = false: one all-reduce per gradient (passes/bucket.c) */
    const char *stage_tp;     /* each stage's tp degree ("2 1"), or NULL: tp everywhere */
    int stage_tp_line;        /* spec line of stage_tp */
    ir_planlists L;           /* trans, coshard, stage, recompute and stage_tp as the passes read them
                                 (the strings above: as written, for plan.txt and messages) */
} ir_planreq;

/* Pipeline schedules ([plan] schedule). */
enum {
    IR_SCHED_1F1B,   /* one forward one backward (PipeDream-flush, Megatron's default) */
    IR_SCHED_GPIPE,  /* all forwards, then all backwards */
    IR_SCHED_ZBH1,   /* zero bubble H1: backward split into B and W, W filling the bubbles,
                        1F1B's memory (Qi et al., Zero Bubble Pipeline Parallelism) */
    IR_SCHED_KFKB,   /* 1F1B over groups of k micro-batches: k forwards, k backwards */
    IR_SCHED_INTERLEAVED, /* 1F1B over model chunks, chunks per stage (Megatron's interleaved
                        schedule, Narayanan et al. 2021) */
    IR_SCHED_INTERLACED, /* nnScaler's: the ops outside the layers (embedding, head, loss) split
                        over every device, their tasks interlaced with a 1F1B pipeline */
};

/* A device and cluster profile for the cost model ([cluster] device and
 * its overrides; passes/cost.c holds the built-in ones). */
typedef struct ir_profile {
    const char *name;         /* cpu-host, v100-32g, a100-80g, h100-80g, dgx2, ... */
    double flops;             /* f32 FLOP/s per device (peak) */
    double flops_bf16;        /* bf16 (or fp16) matmul FLOP/s per device */
    double mem_bw;            /* memory bandwidth, bytes/s per device */
    double mem;               /* memory per device, bytes */
    double link_bw, link_lat; /* within a node: bytes/s per device and direction, seconds per message */
    double net_bw, net_lat;   /* between nodes (IB): bytes/s per device, seconds per message */
    int per_node;             /* devices per node */
    double weight_bw;         /* bytes/s at which a micro-batch's kernel goes over its operands without a
                                 batch dim (a matmul packing its weight, a weight gradient accumulated),
                                 on top of its roofline time; 0: not priced (the built-in profiles),
                                 nnsc-aot profile fits it */
    double mm_eff;            /* the fraction of flops_bf16 that large tensor-core GEMMs reach (0: 1, the
                                 peak; passes/cost.c) */
    int sms;                  /* streaming multiprocessors: a GEMM's tiles run in waves of this many
                                 (0: no wave quantization; passes/cost.c) */
    int attn_unfused;         /* [cluster] attention = unfused: attention priced as a framework that stores
                                 its scores runs it (Megatron-LM's of 2021: every score's products, the
                                 scores, softmax and dropout through memory; passes/cost.c); 0: fused,
                                 nnsc-aot's kernels (online softmax, the scores never stored) */
} ir_profile;

/* A [custom NAME] section of the spec (docs/custom-ops.md): an op the user
 * declares with its annotation and a C kernel compiled at compile time. */
#define IR_MAXCUSTOM 32
/* One op of a custom op's backward written as built-in ops ([custom] grad =):
 * its kind and operands by name -- dy (dy1, dy2, ... with several outputs),
 * x1 .. xn (the op's inputs), y1 .. ym (its outputs), the outputs of the
 * ops before it; dx1 .. dxn are the inputs' gradients. */
#define IR_MAXGRADOPS 12
typedef struct ir_gradop {
    int kind;                 /* a built-in IR_OP_* */
    int nin, nout;
    const char *in[IR_MAXIO], *out[IR_MAXIO];
} ir_gradop;

typedef struct ir_custom {
    const char *name;         /* NAME: the op kind in [op] sections and the kernel nnsc_custom_NAME */
    const char *anno;         /* annotation text (also the shape rule) */
    int nin, nout;            /* operand counts, from the annotation */
    int bwd;                  /* the backward's row, or -1 (none: no gradient may flow through it) */
    int bwd_all;              /* the backward takes every output's gradient (nout + nin inputs), not
                                 output 1's alone (1 + nin) */
    const char *src;          /* the C file of its kernel (resolved path) */
    const char *cuda;         /* the CUDA C file of its device kernel (resolved path), or NULL: the
                                 cpu target only */
    double flops;             /* FLOPs per element of output 0 (cost model) */
    int line;                 /* spec line of the section */
    ir_gradop grad[IR_MAXGRADOPS]; /* grad =: the backward as built-in ops (ngrad > 0; then bwd = -1) */
    int ngrad;
    int grad_line;            /* the grad key's line */
} ir_custom;
/* Name k of the names a custom op's grad ops read before their own outputs
 * (ir_gradop): dy (dy1 .. dym), then x1 .. xn, then y1 .. ym, into buf;
 * their count is 2 * nout + nin. */
void ir_custom_grad_seed(const ir_custom *c, int k, char *buf, size_t n);

typedef struct ir_graph {
    const char *model;        /* model name */
    const char *file;         /* spec path as given */
    uint64_t seed;            /* RNG seed */
    ir_tensor *t; int nt, tcap;
    ir_op *op; int nop, opcap;
    ir_block *blk; int nblk, blkcap;
    ir_train train;
    ir_planreq req;
    ir_profile prof;          /* the cluster's profile ([cluster] device; cost model) */
    char **pool; int npool, poolcap; /* owned strings */
    ir_custom cust[IR_MAXCUSTOM]; int ncust; /* [custom NAME] sections */
} ir_graph;

/* A built-in profile by name (cpu is cpu-host), or NULL; the names, for messages. */
const ir_profile *ir_profile_find(const char *name);
const char *ir_profile_names(void);

void ir_graph_init(ir_graph *g);
void ir_graph_free(ir_graph *g);
/* Copy s into the graph's pool. */
const char *ir_str(ir_graph *g, const char *s);
/* n zeroed bytes owned by the graph's pool (freed with it). */
void *ir_galloc(ir_graph *g, size_t n);
/* dst = a copy of src's tensors, ops, blocks and request that shares src's
 * strings and plan lists: src must outlive dst (dst's own pool starts
 * empty; what is added to dst is dst's). */
void ir_graph_clone(ir_graph *dst, const ir_graph *src);
/* Add a tensor (name copied); returns its id. */
int ir_add_tensor(ir_graph *g, const char *name, ir_dtype dt, ir_tkind kind,
                  int ndim, const int64_t *shape, int line);
/* Add an op over existing input tensors; creates its outputs (named
 * out_names[i], shapes inferred from the annotation).  Returns the op id, or
 * -1 with a message in err when the annotation or shapes do not fit. */
int ir_add_op(ir_graph *g, const char *name, ir_opkind kind, int nin,
              const int *in, const char *const *out_names, int line,
              char *err, size_t errsz);
/* The same with attributes (IR_IA_* / IR_FA_* slots; NULL: none), which
 * may bind annotation identifiers (heads binds h). */
int ir_add_op_attr(ir_graph *g, const char *name, ir_opkind kind, int nin,
                   const int *in, const char *const *out_names, const int64_t *iattr,
                   const double *fattr, int line, char *err, size_t errsz);
/* Add a spec's cross_entropy over in[0] (logits) and in[1] (targets):
 * xent_stats (op name NAME.stats; per row and vocabulary block: max, sum of
 * exp, the target's logit) then xent_loss (NAME, output out_name).  The
 * blocks let tp split the vocabulary without gathering the logits.  Checks
 * and messages are cross_entropy's.  Returns the loss op (*stats_op: the
 * other), or -1 with err. */
int ir_add_cross_entropy(ir_graph *g, const char *name, const int *in, const char *out_name, const int64_t *iattr,
                         const double *fattr, int line, int *stats_op, char *err, size_t errsz);
/* Vocabulary blocks of xent_stats for a last dim of v: the divisor of v up to
 * 64, leaving 64 columns or more per block, with the most factors of 2 (then
 * the largest), so tp degrees divide it; 1 for fewer than 128 columns. */
int64_t ir_xent_blocks(int64_t v);
/* Extent of annotation dim d given identifier extents (merged dims multiply). */
int64_t ir_adim_extent(const ir_adim *d, const int64_t *ext);
/* Tensor or op id by name, or -1. */
int ir_find_tensor(const ir_graph *g, const char *name);
int ir_find_op(const ir_graph *g, const char *name);
int64_t ir_numel(const ir_tensor *t);
/* Elements of a shape into *n, checked against IR_MAX_NUMEL: 0, or 1 when
 * they are more (or overflow 64 bits; *n is then INT64_MAX). */
int ir_shape_numel(int ndim, const int64_t *shape, int64_t *n);
/* "2 x 3 x 4" into buf: a shape for messages. */
const char *ir_shape_text(int ndim, const int64_t *shape, char *buf, size_t bufsz);
const char *ir_dtype_name(ir_dtype d);
const char *ir_tkind_name(ir_tkind k);
/* Ops in a topological order (producers first); returns 0, or 1 when the
 * graph has a cycle (then *cyc is an op on it). order must hold nop ints. */
int ir_topo(const ir_graph *g, int *order, int *cyc);
/* Print the graph in the dump format (golden files). */
void ir_graph_print(const ir_graph *g, ir_buf *b);
/* Check invariants; die on violation. */
void ir_graph_verify(const ir_graph *g);

/* -------------------------------------------------------------- dist.c */

/* A box: per dimension a half-open index range [lo, hi). */
typedef struct ir_box {
    int64_t lo[IR_MAXDIM];
    int64_t hi[IR_MAXDIM];
} ir_box;

/* A pTensor: the piece of a vTensor that one device holds. */
typedef struct ir_ptensor {
    int tensor;  /* vTensor id */
    int dev;     /* device (rank) */
    ir_box box;  /* index ranges held */
    int vpart;   /* value split: this is part vpart ... */
    int vn;      /* ... of vn parts whose sum is the value (vn == 1: full value) */
} ir_ptensor;

enum { IR_REPLICATE = -1, IR_VALUE = -2 };

/* op-trans of one op: nested splits, then op-assign of each sub-op. */
typedef struct ir_trans {
    int nsplit;                 /* number of nested splits (0: one sub-op) */
    int id[IR_MAXSPLIT];        /* identifier split (annotation index), IR_REPLICATE or
                                   IR_VALUE (OPF_LINEAR ops: inputs and outputs value-split) */
    int n[IR_MAXSPLIT];         /* parts of that split */
    int nsub;                   /* product of n[] */
    int devs;                   /* index into dg->ints: device of sub-op i is ints[devs + i] */
    int cosk;                   /* co-shard ([plan] coshard): the last split makes cosk pieces on each
                                   sub-op's device, run one after another (0: none) */
    int cosacc;                 /* co-shard of a reduction whose outputs are accumulated (a param's
                                   gradient): the pieces add into one pTensor, no value split */
    const char *why;            /* reason, shown in plan.txt */
} ir_trans;

/* A sub-op: one piece of an op placed on a device. */
typedef struct ir_subop {
    int op;                     /* op id */
    int sub;                    /* index within the op's trans (0..nsub-1) */
    int dev;                    /* device */
    int in[IR_MAXIO];           /* pTensor ids consumed (box needed, full value) */
    int out[IR_MAXIO];          /* pTensor ids produced */
    int64_t ext[IR_MAXID];      /* extent of each annotation identifier in this sub-op */
    int sec;                    /* section, set by schedule: IR_SEC_* */
    int order;                  /* op-order on its device (schedule), -1 unset */
} ir_subop;

typedef enum ir_commkind {
    IR_COMM_ALLREDUCE,      /* value parts of one box -> the full value on every member */
    IR_COMM_ALLGATHER,      /* pieces tiling a box along one dim -> the box on every member */
    IR_COMM_REDUCESCATTER,  /* value parts of one box -> member k: the full value of its piece */
    IR_COMM_ALLTOALL,       /* a box tiled along dim a -> the same box tiled along dim b */
    IR_COMM_BROADCAST,      /* the root's piece -> the region on every other member */
    IR_COMM_SENDRECV,       /* point to point: the root's region -> the other member (general fallback) */
    IR_COMM_SLICE,          /* local: a sub-box of a local piece (no bytes moved) */
    IR_COMM_COPY,           /* local: the region of a local piece into a local buffer (assembly) */
    IR_COMM_ZERO,           /* local: zero a buffer before pieces are added into it */
    IR_COMM_COUNT
} ir_commkind;

/* A communication op derived by passes/comm.c.  Member k of the group
 * contributes pTensor in[k] and writes pTensor out[k] (-1: none).
 * Semantics, per kind (boxes are the pTensors'):
 *   ALLREDUCE      out[k] = sum_j in[j]                 (all the same box; in place)
 *   ALLGATHER      out[k][box of in[j]] = in[j] for all j
 *   REDUCESCATTER  out[k] = (sum_j in[j])[box of out[k]]
 *   ALLTOALL       out[k][box in[j] & box out[k]] = in[j][same] for all j
 *   BROADCAST      out[k][region] = in[root][region] for k != root
 *   SENDRECV       out[1-root][region] (+)= in[root][region]   (a 2-member group)
 *   SLICE          out[0] = in[0][box of out[0]]
 *   COPY           out[0][region] (+)= in[0][region]
 *   ZERO           out[0] = 0
 * (+)= adds when acc is set. */
typedef struct ir_comm {
    ir_commkind kind;
    int tensor;        /* vTensor id */
    int group;         /* group id (dg->groups) */
    int in;            /* index into dg->ints: pTensor consumed by each member, or -1 */
    int out;           /* index into dg->ints: pTensor produced by each member, or -1 */
    int n;             /* members (= group size) */
    ir_box region;     /* BROADCAST, SENDRECV, COPY: the box moved */
    int root;          /* BROADCAST, SENDRECV: member index of the sender */
    int acc;           /* SENDRECV, COPY: add into the output; REDUCESCATTER: in each micro-batch,
                          summed over the step's micro-batches (ZeRO 2's gradient shards) */
    int64_t bytes;     /* bytes the busiest member sends per step: a batched tensor's in the micro-batches
                          are the step's batch, 1/micro_batches of it per execution (cost model) */
    int sec;           /* section, set by schedule */
    int prologue;      /* also once in the prologue (ZeRO-1/2: the params gathered after the updates
                          are gathered after their initialisation too; schedule.c) */
    const char *why;   /* reason, shown in dumps and plan.txt */
    int bucket;        /* gradient bucket (passes/bucket.c): the bucket's first comm, whose collective
                          does this one's too (an all-reduce's in place, a reduce-scatter's or
                          all-gather's packed into the scratch); -1: none */
    int bnext;         /* the bucket's next comm, -1: the last */
    int64_t bbytes;    /* on a bucket's first comm: the bytes of all of them (cost model) */
} ir_comm;

/* A device group used by collectives. */
typedef struct ir_group {
    int n;       /* members */
    int devs;    /* index into dg->ints: ranks, ascending */
} ir_group;

/* Program sections (also DistGraph placement). */
enum {
    IR_SEC_PROLOGUE,  /* once, before training (param init) */
    IR_SEC_PRE,       /* each step, before micro-batches (zero accumulators) */
    IR_SEC_MB,        /* each micro-batch (forward, backward) */
    IR_SEC_POST,      /* each step, after micro-batches (grad comm, optimizer) */
    IR_SEC_EPILOGUE,  /* once, after training */
    IR_SEC_EVAL_PRE,  /* before an evaluation (zero the loss) */
    IR_SEC_EVAL,      /* each micro-batch of each evaluation batch: forward only */
    IR_SEC_EVAL_POST, /* after an evaluation (reduce the loss) */
    IR_SEC_COUNT
};

/* One step of the global schedule: a sub-op or a comm, in a section.  All
 * devices follow the one global order, so every group sees its collectives
 * in the same order. */
typedef struct ir_item {
    int sec;      /* IR_SEC_* */
    int comm;     /* 1: id is a comm, 0: a sub-op */
    int id;       /* sub-op or comm id */
} ir_item;

/* A pipeline's op-order (passes/pipeline.c): per stage, the tasks it runs
 * in one step, each the stage's forward (F) or backward (B) items for one
 * micro-batch; a micro-batch in flight (its F done, its B not) keeps the
 * buffers its B reads in one of the stage's stash slots. */
enum { IR_TASK_F, IR_TASK_B, IR_TASK_W };
typedef struct ir_task {
    int kind;   /* IR_TASK_F, IR_TASK_B, or IR_TASK_W (weight gradients, split from B) */
    int mb;     /* micro-batch */
    int slot;   /* stash slot of the micro-batch */
    int chunk;  /* model chunk (interleaved: virtual stage chunk x pp + stage), else 0 */
} ir_task;

/* A dependency between tasks of one micro-batch: stage s's task of kind
 * `kind` (and chunk) receives what stage from_s's task of kind from_kind
 * (and from_chunk) sends (derived from the transfers between stages:
 * forward to the next stage, gradients back, a tied embedding's gradient
 * from the last stage to the first). */
typedef struct ir_pdep {
    int s, kind, from_s, from_kind, chunk, from_chunk;
} ir_pdep;

/* A transfer the pipeline moves out of its task (pipeline.c): on rank
 * `rank`, the transfer at schedule position n of micro-batch mb runs at the
 * start of the stage's task `task` (an index into its list): a receive
 * posted early, before the task that reads it, so that the sender's
 * blocking send meets it; or (late) at the end of task `task`: a send
 * made late, when the receiver gets to it on the cost model, so that the
 * sender does not wait for it. */
typedef struct ir_hoist {
    int rank, n, mb, task, late;
} ir_hoist;

typedef struct ir_pipe {
    int pp;          /* stages */
    int v;           /* model chunks per stage (1; interleaved: virtual stages pp x v) */
    int nch;         /* task chunks: v, and (interlaced) chunk v for the ops on every stage
                        before the pipeline (embedding: F and B tasks E, e), v + 1 for those
                        after it (head, loss) */
    int recycle;     /* recycling: the forward passes per micro-batch, which are the chunks (0: none) */
    int cut_recv;    /* pipeline.c's order: where a run of transfers takes several calls, receives
                        before sends to their sender (a retry where the order fails without) */
    int k;           /* kFkB: micro-batches per group */
    int m;           /* micro-batches per step */
    int sched;       /* IR_SCHED_*, or -1: the user's order */
    int split_w;     /* 1: the backward is split into B (input gradients) and W (weight
                        gradients) tasks, 3 m v tasks per stage; 0: 2 m v */
    int *task0;      /* per stage + 1: CSR start into task */
    ir_task *task;   /* the tasks, stage after stage, in the order each stage runs them */
    int *nslot;      /* per stage: stash slots (the most micro-batches in flight) */
    ir_pdep *dep;    /* the dependencies between stages' tasks */
    int ndep;
    ir_hoist *hoist; /* receives posted early, sends made late */
    int nhoist;
    double span;     /* the cost model's time of the micro-batches' items, every rank's order run
                        with its compute and blocking transfers and collectives (the check's
                        progress, timed; 0: not known) */
} ir_pipe;

/* op_stage of an op split over every device (all stages at once). */
#define IR_STAGE_ALL(d) ((d)->mesh_pp * (d)->mesh_v)

typedef struct ir_dist {
    const ir_graph *g;         /* the logical graph (not owned) */
    int ndev;                  /* devices */
    ir_trans *trans;           /* per op (g->nop) */
    ir_ptensor *pt; int npt, ptcap;
    ir_subop *sop; int nsop, sopcap;
    ir_comm *comm; int ncomm, commcap;
    ir_group *grp; int ngrp, grpcap;
    int *ints; int nints, intscap;   /* pool of int lists */
    ir_item *seq; int nseq, seqcap; /* the schedule (schedule.c) */
    double *itime;             /* per item of seq: its seconds per execution once priced, -1 before
                                  (pass_item_time's; schedule.c makes it with seq) */
    double *iflops;            /* per item of seq: a sub-op's FLOPs per step (pass_subop_flops in its
                                  section), 0 for a comm (schedule.c) */
    char *accum;               /* per tensor: summed over the micro-batches of a step (schedule.c) */
    char *t16;                 /* per tensor: stored in bf16 ([train] storage = bf16: precision.c), NULL: none */
    int world_group;           /* group of all devices (schedule.c; -1 with one device) */
    int *store;                /* per param / opt-state tensor: index into ints of the
                                  pTensors devices store it as, or -1 */
    int *nstore;               /* per tensor: length of that list */
    char **pool; int npool, poolcap; /* owned strings */
    int mesh_dp, mesh_tp;      /* the plan's mesh dp x tp (plan.c; 1 x 1 on one device; with
                                  stage_tp, stage 0's) */
    int *stage_tp;             /* per stage: its tp degree ([plan] stage_tp; its dp: devices per
                                  stage / tp), or NULL: mesh_tp on every stage */
    int mesh_pp;               /* pipeline stages (plan.c): stage k runs on devices
                                  k * dp * tp .. (k + 1) * dp * tp - 1; 1: no pipeline */
    int mesh_v;                /* model chunks per stage (plan.c; 1: none): op_stage numbers
                                  virtual stages, virtual stage j on stage j % mesh_pp as its
                                  chunk j / mesh_pp */
    int *op_stage;             /* per op: its (virtual) stage (plan.c); an optimizer update of a
                                  param read on several stages runs on each of them (the lowest here);
                                  IR_STAGE_ALL(d): split over every device (interlaced) */
    signed char *item_chunk;   /* pipeline: per position n in seq and stage s, [n * mesh_pp + s]: the
                                  chunk whose tasks run it on s (pipeline.c), -1: not on s */
    ir_pipe *pipe;             /* the pipeline's op-order (pipeline.c), NULL: no pipeline */
    char *zgrad;               /* per tensor: a param's gradient reduce-scattered in every micro-batch
                                  into the update's dp shard, which accumulates (ZeRO 2, plan.c) */
    char *item_w;              /* per position in seq: a weight-gradient item (the W task when
                                  pipe->split_w; pipeline.c), NULL: none */
    int seq_bwd;               /* position in seq of the first backward item of the mb section
                                  (schedule.c): a rank's mb items before it are its forward task */
    const char *warnings;      /* what the planner warned about, one per line, or NULL (plan.c) */
    double step_flops;         /* model FLOPs of a step summed over every rank's sub-ops (schedule.c) */
    struct ir_ptindex *pt_index; /* per vTensor: an open-addressing index of its pTensors by
                                  content (ir_dist_pt); one small table per tensor, so the
                                  lookups of one op's sub-ops stay in a few cache lines */
    int *grp_hash;             /* the same for grp by member list (ir_dist_group) */
    int grp_hcap;              /* slots of grp_hash */
    /* indexes that keep the passes linear in ops x devices (ir_dist_index_sops,
       ir_dist_index_ranks): a pass over one rank touches only that rank's share */
    int *op_sop;               /* per op + 1: the op's sub-ops are op_sop[op] .. op_sop[op + 1] - 1
                                  (split.c makes them op by op) */
    int *rank_item0;           /* per device + 1: CSR start into rank_item and rank_member */
    int *rank_item;            /* per device, ascending: the schedule positions (into seq) of its
                                  items, the sub-ops on it and the comms it is a member of */
    int *rank_member;          /* per rank_item: the device's member index in the comm, -1: a sub-op */
    int *rank_sop0;            /* per device + 1: CSR start into rank_sop */
    int *rank_sop;             /* per device, ascending: the sub-ops on it */
    int *rank_pt0;             /* per device + 1: CSR start into rank_pt */
    int *rank_pt;              /* per device, ascending: the pTensors on it */
    int *pt_local;             /* per pTensor: its index in its device's part of rank_pt */
    int *pt_store;             /* per pTensor: its index in its tensor's store list, -1: none */
    char *pt_writer;           /* per pTensor of a store list: 1 when no lower device stores
                                  the same box (it writes the box to checkpoints) */
    int seq_opt;               /* position in seq of the first optimizer sub-op (post), -1: none */
    char *norm_owner;          /* per sub-op: 1 when no sub-op of the same op on a lower device
                                  reads the same box of input 1 (an optimizer's gradient, which
                                  the gradient norm counts once) */
} ir_dist;

void ir_dist_init(ir_dist *d, const ir_graph *g, int ndev);
void ir_dist_free(ir_dist *d);
const char *ir_dist_str(ir_dist *d, const char *s);
/* Append n ints to the pool; returns the start index. */
int ir_dist_ints(ir_dist *d, const int *v, int n);
/* Make room for npt pTensors and nsop sub-ops in all (arrays and the
 * pTensor index sized once, not grown step by step). */
void ir_dist_reserve(ir_dist *d, int64_t npt, int64_t nsop);
/* Find or add a pTensor; returns its id. */
int ir_dist_pt(ir_dist *d, const ir_ptensor *p);
/* Find or add a group over the given ascending ranks; returns its id. */
int ir_dist_group(ir_dist *d, const int *devs, int n);
/* Build op_sop from the sub-ops (pass_split, once every sub-op exists). */
void ir_dist_index_sops(ir_dist *d);
/* Build the per-rank indexes (rank_*, pt_local, seq_opt, norm_owner) from
 * the schedule (pass_schedule, once it is complete). */
void ir_dist_index_ranks(ir_dist *d);
int64_t ir_box_numel(const ir_box *b, int ndim);
int ir_box_eq(const ir_box *a, const ir_box *b, int ndim);
/* a contains b */
int ir_box_contains(const ir_box *a, const ir_box *b, int ndim);
/* a & b -> *o; returns 0 when they do not meet. */
int ir_box_and(const ir_box *a, const ir_box *b, int ndim, ir_box *o);
/* The full box of a tensor. */
ir_box ir_box_full(const ir_tensor *t);
void ir_box_print(const ir_box *b, int ndim, ir_buf *buf);
void ir_pt_print(const ir_dist *d, int pt, ir_buf *b);
const char *ir_comm_name(ir_commkind k);
void ir_dist_print(const ir_dist *d, ir_buf *b);
void ir_dist_verify(const ir_dist *d);

/* -------------------------------------------------------------- prog.c */

#define PG_MAXBUF 12
#define PG_MAXINT 32
#define PG_MAXFLT 8

/* rtlib entry points, RT_K_<name> (rtlib/rt_kernels.h is the one list). */
enum {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) RT_K_##name,
#include "rt_kernels.h"
#undef RT_K
    RT_K_COUNT
};

/* An integer argument: value = c + step * s + mb * m (loop variables of the
 * train loop), so data offsets and step counters stay loop-dependent. */
typedef struct pg_int {
    int64_t c;   /* constant part */
    int64_t s;   /* coefficient of the step index */
    int64_t m;   /* coefficient of the micro-batch index */
} pg_int;

/* The kernel of a call instruction: not an rtlib kernel (outside RT_K_*,
 * and not RT_K_COUNT, which stays an invalid id), but `for each row of the
 * table: run the body`, see pg_body. */
#define PG_CALL (RT_K_COUNT + 1)

/* One instruction: a call of an rtlib kernel rt_k_<name>(ctx, bufs, ints,
 * flts), or (kernel == PG_CALL) a call of a body once per row of its table.
 * Inside a body an operand may be a slot: its value comes from the row the
 * body runs with (buffer: the offset; int: the constant part c, the step and
 * micro-batch coefficients stay in the instruction); the operand then holds
 * 0 in buf[] / ints[].c. */
typedef struct pg_instr {
    int kernel;                 /* RT_K_* (rtlib/rt_kernels.h), or PG_CALL */
    int nbuf;                   /* buffer arguments */
    int64_t buf[PG_MAXBUF];     /* arena byte offsets of the buffer arguments */
    int nint;                   /* integer arguments */
    pg_int ints[PG_MAXINT];     /* integer arguments */
    int nflt;                   /* float arguments */
    float flt[PG_MAXFLT];       /* float arguments */
    const char *note;           /* what it does, for dumps and comments in rankN.ll */
    int blk;                    /* provenance: the repeated block (ir_graph.blk id) the
                                   instruction was lowered from, -1: none (passes/lower.c) */
    int rep;                    /* ... and the repeat of that block, -1: none */
    uint16_t bslot[PG_MAXBUF];  /* in a body: 0, or k + 1 when buffer j is slot k of the row */
    uint16_t islot[PG_MAXINT];  /* in a body: 0, or k + 1 when ints[j].c is slot k of the row */
    uint16_t bvar[PG_MAXBUF];   /* in a shared program: 0, or v + 1 when buffer j's offset is rank
                                   variable v (the rank's row of ir_prog.rv), see passes/share.c */
    uint16_t ivar[PG_MAXINT];   /* ... 0, or v + 1 when ints[j].c is rank variable v */
    int body;                   /* PG_CALL: the body (index into ir_prog.body) */
    int nrows;                  /* PG_CALL: rows of the table, the body runs once per row in order */
    int tab;                    /* PG_CALL: index into ir_prog.tab of row 0; row r's slot k is
                                   tab[tab + r * nslots + k] */
} pg_instr;

/* A callable body (passes/outline.c): the instructions of one repeat of a
 * block, run by call instructions once per row of their tables, each row
 * filling the slots with one repeat's offsets and constants. */
typedef struct pg_body {
    pg_instr *ins;              /* its instructions (kernels only, no calls) */
    int nins, inscap;           /* how many, allocated */
    int nslots;                 /* slots per row (>= 0) */
} pg_body;

/* A named region of the arena (for dumps and the memory report). */
typedef struct pg_region {
    const char *name;   /* pTensor description */
    int64_t off;        /* byte offset */
    int64_t bytes;      /* size */
    int persistent;     /* lives across steps (params, grads, opt state) */
} pg_region;

/* The program of one rank. */
typedef struct ir_prog {
    int rank, world;
    int64_t arena;                    /* arena bytes */
    int arena_top;                    /* the tensor of the arena's largest buffer (messages), -1: none */
    int64_t arena_top_bytes;          /* ... its bytes */
    int64_t micro_batches;            /* micro-batches per step (trip count of the IR_SEC_EVAL loop) */
    int pipelined;                    /* 1: the IR_SEC_MB section holds a pipeline's tasks unrolled
                                         (passes/lower.c) and runs once per step, not micro_batches times */
    int loop_lo, loop_hi;             /* pipelined, loop_iters > 0: the steady state as a loop -- MB
                                         instructions [loop_lo, loop_hi) run loop_iters times in a row,
                                         the mb of their ints (c + m * mb) counting the iterations from 0;
                                         outside it a pipelined program's ints have no mb (lower.c) */
    int64_t loop_iters;               /* 0: no loop */
    int no_loop;                      /* set before lowering: 1 unrolls the steady state too (--no-loops) */
    int64_t steps;                    /* default step count */
    int64_t loss_off;                 /* arena offset of the replicated loss, -1: none */
    pg_instr *ins[IR_SEC_COUNT];      /* instructions per section */
    int nins[IR_SEC_COUNT], inscap[IR_SEC_COUNT];
    pg_region *reg; int nreg, regcap; /* arena map */
    pg_body *body; int nbody, bodycap;/* callable bodies (passes/outline.c) */
    int64_t *tab; int ntab, tabcap;   /* the call instructions' tables, row after row */
    ir_buf manifest;                  /* text handed to rt_init (see rtlib/rt.h) */
    int64_t comm_bytes[IR_COMM_COUNT];/* bytes this rank sends per step, by kind */
    double flops;                     /* model FLOPs this rank computes per step (cost model) */
    int64_t persistent;               /* bytes of params, grads and optimizer state (regions that
                                         share a buffer once), for plan.txt */
    int64_t stash_bytes;              /* pipeline: bytes a micro-batch in flight keeps (one slot) */
    int64_t staging;                  /* cpu target, dtype bf16: bytes rtlib's matmul_bf16 stages its
                                         operands in, outside the arena (cg_bf16_staging; plan.txt) */
    int nslot;                        /* pipeline: slots (micro-batches in flight at most) */
    char **pool; int npool, poolcap;  /* owned strings */
    const ir_custom *cust; int ncust; /* the graph's [custom] sections: RT_K_custom's ints[0] names
                                         the row, whose kernel is nnsc_custom_<name> (codegen/host.c) */
    /* A shared program (passes/share.c): the Program of several ranks, the
       members, equal but for rank variables; nmember == 0: not shared. */
    int nmember;                      /* ranks running it */
    int *member;                      /* their ranks, ascending: row i of rv is member[i]'s */
    int nvar;                         /* rank variables */
    int64_t *rv;                      /* nmember x nvar values, row after row */
    uint16_t *tabvar;                 /* per entry of tab: 0, or v + 1 when it is rank variable v
                                         (NULL: none is) */
    int loss_var;                     /* 0, or v + 1 when loss_off is rank variable v */
    /* the manifest is then a template: a rank variable v stands where a
       number was, as the bytes PG_VAR_MARK, v in decimal, PG_VAR_END */
} ir_prog;

/* Marks of a rank variable in a shared program's manifest template. */
#define PG_VAR_MARK '\x01'
#define PG_VAR_END '\x02'

/* How instruction in uses its buffer j: a mask of PG_RD (reads it), PG_WR
 * (writes it) and PG_PART (the write does not simply overwrite the whole
 * extent: it accumulates, reads first, or covers only a part); *bytes gets
 * the extent in bytes, or -1 when the ints do not tell (assume anything). */
enum { PG_RD = 1, PG_WR = 2, PG_PART = 4 };
int ir_prog_access(const pg_instr *in, int j, int64_t *bytes);
/* The index of kernel's `acc` int (acc = 1 adds into its outputs), -1 if none. */
int ir_prog_acc_index(int kernel);

void ir_prog_init(ir_prog *p, int rank, int world);
void ir_prog_free(ir_prog *p);
/* Persistent bytes of p's arena map (params, grads, optimizer state). */
int64_t ir_prog_persistent(const ir_prog *p);
const char *ir_prog_str(ir_prog *p, const char *s);
pg_instr *ir_prog_add(ir_prog *p, int sec, int kernel, const char *note);
/* Append body b to the Program (taking its instructions); returns its id. */
int ir_prog_add_body(ir_prog *p, pg_body *b);
/* Append nrows rows of the body's nslots values to the table pool; returns
 * the index of the first (the call's tab). */
int ir_prog_add_rows(ir_prog *p, const int64_t *rows, int nrows, int nslots);
/* Instruction k of call's body with row r's slots filled in: what the call
 * runs for that row (no slots left; provenance -1). */
void ir_prog_expand(const ir_prog *p, const pg_instr *call, int r, int k, pg_instr *out);
/* Walk the rtlib kernel instructions of section sec in program order, the
 * body of a call once per call (slots read as 0): start with *i = *k = 0;
 * returns the next instruction, NULL at the end. */
const pg_instr *ir_prog_walk(const ir_prog *p, int sec, int *i, int *k);
void pg_buf(pg_instr *in, int64_t off);
void pg_i(pg_instr *in, int64_t c);
void pg_iv(pg_instr *in, int64_t c, int64_t s, int64_t m);
void pg_f(pg_instr *in, float f);
/* Print the Program in the dump format (--dump=lower, and with bodies and
 * calls --dump=prog). */
void ir_prog_print(const ir_prog *p, ir_buf *b);
void ir_prog_verify(const ir_prog *p);

#endif
