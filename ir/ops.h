/* ops.h -- the operator table, declared once.
 *
 * Each row: OP(ENUM, "name", "dimops annotation", nin, nout, flags, kernel, bwd, "bwd inputs", "cost",
 *              "args")
 *
 * The annotation is the nnScaler-style einops form documented in
 * docs/dimops.md: a plain identifier may be split (every operand holding it
 * is split the same way), `+` marks a reduction dimension (splitting it
 * leaves the outputs value-split: partial sums), `^` marks a dimension that
 * must not be split, `*` stands for any number of leading dimensions (the
 * same number in every operand that has it; `*+` makes them all reduction
 * dimensions), a number is a fixed-size dimension that is never split.
 * The annotation is also the shape rule: identifiers bind to the extents of
 * the inputs, must agree, and give the output shapes.
 *
 * Flags:
 *   OPF_USER   the op may be named in a model spec (`kind = name`)
 *   OPF_LOSS   the op produces a scalar loss (root of autograd)
 *   OPF_OPTIM  an optimizer update: writes its inputs 0 (param) and 2.. (state)
 *              in place, has no outputs, runs once per step after all micro-batches
 *   OPF_ELTW   elementwise over all dims (candidate for fusion)
 *   OPF_LINEAR linear in every input: a sub-op may take value-split inputs
 *              (partial sums) and give a value-split output
 *
 * kernel: the rtlib kernel it lowers to (its row in rtlib/rt_kernels.h
 * gives the kernel's arguments and buffer extents); `none`: lowered by hand
 * in passes/lower.c (the view ops, to slice and place; cross_entropy never
 * reaches a graph).  matmul becomes matmul_bf16 under dtype = bf16.
 *
 * cost: the sub-op's FLOPs as a product of factors (passes/lower.c,
 * pass_subop_flops): a number, an identifier of the annotation (its extent
 * in the sub-op), `*` (the leading dims of operand 0), `@K` (every element
 * of operand K), `causal/2` (1/2 when the op is causal); "" is "4 @0", a
 * few FLOPs per element of operand 0.  A custom op's comes from its
 * [custom] section.  test_passes checks every formula against its row.
 *
 * args: the kernel's ints and floats, "INTS; FLOATS" (passes/lower.c):
 * INTS, comma-separated, each a product of cost factors (a sub-op's
 * extents, numbers), `acc` (the accumulate flag), `attr NAME` (an integer
 * attribute), `lo K J` or `lo K J/ID` (where the sub-op's box of operand K
 * starts along dim J, negative from the last; divided by ID's extent),
 * `max A B` (the larger extent), `step+1` (the optimizer's step count),
 * `nin`, `nout` (the op's operand counts) or `shapes` (per operand its
 * number of dims and the sub-op's extents: as many ints as that makes,
 * custom's); "" for the default (every element of operand 0, then acc
 * where the kernel's row has one; docs/adding-an-op.md);
 * FLOATS, the op's attributes by name (scale, eps, theta, lr, wd, beta1,
 * beta2, aeps; all: every one, a custom op's).  test_passes checks the
 * counts against the kernel's row in rtlib/rt_kernels.h.
 *
 * bwd, "bwd inputs": a backward rule that is one op giving the gradient of
 * input 0, on the inputs named: dy (the output's gradient), x (input 0), w
 * (input 1), y (output 0) -- relu's is RELU_BWD on "dy y".  NONE: the rule
 * is written in passes/autograd.c (several gradients, checks, attributes)
 * or the op has none (backward ops, losses' own).  A unit test
 * (test_passes) walks the table: every op has a kernel or is one of the
 * hand-lowered ones, every rule's op and inputs exist, and every forward op
 * a spec may name has a rule one way or the other.
 */
/*  enum            name                 annotation                        in out flags           kernel  bwd  bwd inputs  cost  args */
OP(MATMUL,        "matmul",            "* k+, k n -> * n",                2, 1, OPF_USER, matmul, NONE, "", "2 * k n", "*, k, n, 0, 0, acc")              /* y = x @ w,  w: (K, N) */
OP(MATMUL_NT,     "matmul_nt",         "* n+, k n -> * k",                2, 1, OPF_USER, matmul, NONE, "", "2 * n k", "*, n, k, 0, 1, acc")              /* y = x @ w^T (dx = dy @ w^T; tied lm head) */
OP(MATMUL_TN,     "matmul_tn",         "*+ k, *+ n -> k n",               2, 1, 0, matmul, NONE, "", "2 * k n", "k, *, n, 1, 0, acc")                     /* dw = x^T @ dy, summed over leading dims */
OP(BIAS_ADD,      "bias_add",          "* n, n -> * n",                   2, 1, OPF_USER, bias_add, NONE, "", "", "*, n")              /* y = x + b (b broadcast over rows) */
OP(BIAS_GRAD,     "bias_grad",         "*+ n -> n",                       1, 1, 0, bias_grad, NONE, "", "", "*, n, acc")                     /* db = column sums of dy */
OP(ADD,           "add",               "*, * -> *",                       2, 1, OPF_USER | OPF_ELTW | OPF_LINEAR, add, NONE, "", "", "") /* y = a + b */
OP(MUL,           "mul",               "*, * -> *",                       2, 1, OPF_USER | OPF_ELTW, mul, NONE, "", "", "")   /* y = a * b (SwiGLU's gate) */
OP(COPY,          "copy",              "* -> *",                          1, 1, OPF_ELTW | OPF_LINEAR, copy, NONE, "", "", "") /* y = x */
OP(RECYCLE,       "recycle",           "* -> *",                          1, 1, OPF_USER, copy, NONE, "", "", "")              /* y = x, x the previous forward pass's (recycling); no gradient */
OP(ADD_BCAST,     "add_bcast",         "* t c, t c -> * t c",             2, 1, OPF_USER, bias_add, NONE, "", "", "*, t c")              /* y = x + p, p broadcast over leading dims (positions) */
OP(SUM_LEAD,      "sum_lead",          "*+ t c -> t c",                   1, 1, 0, bias_grad, NONE, "", "", "*, t c, acc")                     /* dp = sum of dy over leading dims */
OP(EMBEDDING,     "embedding",         "*, v+ c -> * c",                  2, 1, OPF_USER, embedding, NONE, "", "", "*, lo 1 0, v, c, acc")              /* y = table[tokens]; tokens i32; a v split gives partial rows */
OP(EMBEDDING_BWD, "embedding_bwd",     "*+, *+ c, v c -> v c",            3, 1, 0, embedding_bwd, NONE, "", "", "*, lo 3 0, v, c, acc")                     /* dtable[tok] += dy; inputs tokens, dy, table (shape) */
OP(LAYERNORM,     "layernorm",         "* c^, c^, c^ -> * c^, *, *",      3, 3, OPF_USER, layernorm, NONE, "", "", "*, c; eps")              /* y, mean, rstd = layernorm(x, w, b) over the last dim */
OP(LAYERNORM_BWD, "layernorm_bwd",     "* c^, * c^, c^, *, * -> * c^",    5, 1, 0, layernorm_bwd, NONE, "", "", "*, c, acc")                     /* dx; inputs dy, x, w, mean, rstd */
OP(LAYERNORM_WGRAD, "layernorm_wgrad", "*+ c^, *+ c^, *+, *+ -> c^, c^",  4, 2, 0, layernorm_wgrad, NONE, "", "", "*, c, acc")                     /* dw, db; inputs dy, x, mean, rstd */
OP(RMSNORM,       "rmsnorm",           "* c^, c^ -> * c^, *",             2, 2, OPF_USER, rmsnorm, NONE, "", "", "*, c; eps")              /* y, rstd = rmsnorm(x, w) over the last dim (LLaMA) */
OP(RMSNORM_BWD,   "rmsnorm_bwd",       "* c^, * c^, c^, * -> * c^",       4, 1, 0, rmsnorm_bwd, NONE, "", "", "*, c, acc")                     /* dx; inputs dy, x, w, rstd */
OP(RMSNORM_WGRAD, "rmsnorm_wgrad",     "*+ c^, *+ c^, *+ -> c^",          3, 1, 0, rmsnorm_wgrad, NONE, "", "", "*, c, acc")                     /* dw; inputs dy, x, rstd */
OP(SOFTMAX,       "softmax",           "* n^ -> * n^",                    1, 1, OPF_USER, softmax, SOFTMAX_BWD, "dy y", "", "*, n")              /* over the last dim */
OP(SOFTMAX_BWD,   "softmax_bwd",       "* n^, * n^ -> * n^",              2, 1, 0, softmax_bwd, NONE, "", "", "*, n, acc")                     /* inputs dy, y */
OP(ATTENTION,     "attention",         "* t^ (h r d^), * s^ (h d^), * s^ (h d^) -> * t^ (h r d^), * (h r) t^", 3, 2, OPF_USER, attention, NONE, "", "4 * h r t s d causal/2", "*, t, h r, d, attr causal, h, s, attr alibi, lo 0 -1/d, attr heads; scale") /* multi-head attention (causal by default: then s = t); q, k, v -> y, lse; t queries, s keys (cross-attention: s != t); h: the key/value heads (kv_heads, default heads), r = heads / kv_heads query heads each (grouped-query) */
OP(ATTENTION_BWD, "attention_bwd",     "* t^ (h r d^), * t^ (h r d^), * s^ (h d^), * s^ (h d^), * t^ (h r d^), * (h r) t^ -> * t^ (h r d^), * s^ (h d^), * s^ (h d^)", 6, 3, 0, attention_bwd, NONE, "", "8 * h r t s d causal/2", "*, t, h r, d, attr causal, acc, h, s, max t s, attr alibi, lo 1 -1/d, attr heads; scale") /* dy, q, k, v, y, lse -> dq, dk, dv */
OP(ATTENTION_VL,  "attention_vl",      "* t^ (h r d^), * s^ (h d^), * s^ (h d^), * -> * t^ (h r d^), * (h r) t^", 4, 2, 0, attention_vl, NONE, "", "4 * h r t s d causal/2", "*, t, h r, d, attr causal, h, s, attr alibi, lo 0 -1/d, attr heads; scale") /* attention with key lengths (a spec's attention given a 4th input, lens: i32, one per row of the batch dims): row b's queries see its keys s < lens[b] */
OP(ATTENTION_VL_BWD, "attention_vl_bwd", "* t^ (h r d^), * t^ (h r d^), * s^ (h d^), * s^ (h d^), * t^ (h r d^), * (h r) t^, * -> * t^ (h r d^), * s^ (h d^), * s^ (h d^)", 7, 3, 0, attention_vl_bwd, NONE, "", "8 * h r t s d causal/2", "*, t, h r, d, attr causal, acc, h, s, max t s, attr alibi, lo 1 -1/d, attr heads; scale") /* dy, q, k, v, y, lse, lens -> dq, dk, dv */
OP(ATTENTION_AB,  "attention_ab",      "* t^ (h r d^), * s^ (h d^), * s^ (h d^), (h r) t^ s^ -> * t^ (h r d^), * (h r) t^", 4, 2, 0, attention_ab, NONE, "", "4 * h r t s d causal/2", "*, t, h r, d, attr causal, h, s, attr alibi, lo 0 -1/d, attr heads; scale") /* attention with an additive bias (a spec's attention given a 4th input, f32 [heads, T, S]): every score of query head h gets bias[h, t, s] after the scale (T5's position bias, a mask of -inf) */
OP(ATTENTION_AB_BWD, "attention_ab_bwd", "* t^ (h r d^), * t^ (h r d^), * s^ (h d^), * s^ (h d^), * t^ (h r d^), * (h r) t^, (h r) t^ s^ -> * t^ (h r d^), * s^ (h d^), * s^ (h d^)", 7, 3, 0, attention_ab_bwd, NONE, "", "8 * h r t s d causal/2", "*, t, h r, d, attr causal, acc, h, s, max t s, attr alibi, lo 1 -1/d, attr heads; scale") /* dy, q, k, v, y, lse, bias -> dq, dk, dv */
OP(ATTENTION_DBIAS, "attention_dbias",  "*+ t^ (h r d^), *+ t^ (h r d^), *+ s^ (h d^), *+ s^ (h d^), *+ t^ (h r d^), *+ (h r) t^, (h r) t^ s^ -> (h r) t^ s^", 7, 1, 0, attention_dbias, NONE, "", "4 * h r t s d causal/2", "*, t, h r, d, attr causal, acc, h, s, max t s, attr alibi, lo 1 -1/d, attr heads; scale") /* dy, q, k, v, y, lse, bias -> dbias = sum over the batch dims of P (dP - Drow): a split batch leaves partial sums */
OP(ROPE,          "rope",              "* t^ (h d^) -> * t^ (h d^)",      1, 1, OPF_USER, rope, ROPE_BWD, "dy", "", "*, t, h, d, 0, acc; theta")              /* rotary position embedding of each head (LLaMA's halves); heads binds h, theta the base */
OP(ROPE_BWD,      "rope_bwd",          "* t^ (h d^) -> * t^ (h d^)",      1, 1, 0, rope, NONE, "", "", "*, t, h, d, 1, acc; theta")                     /* dx = the rotation back of dy */
OP(MEAN,          "mean",              "* t+ c -> * c",                   1, 1, OPF_USER, mean_mid, MEAN_BWD, "dy", "", "*, t, c, acc; scale")              /* y = the mean over the dim before the last (mean pooling over a sequence) */
OP(MEAN_BWD,      "mean_bwd",          "* c -> * t c",                    1, 1, 0, mean_mid_bwd, NONE, "", "", "*, t, c, acc; scale")                     /* dx = dy / T broadcast over t (T: the forward's, iattr IR_IA_MEAN_T) */
OP(SPLIT_HEADS,   "split_heads",       "* (h d^) -> * h d^",              1, 1, OPF_USER | OPF_LINEAR, copy, MERGE_HEADS, "dy", "", "") /* [*, heads x d] viewed as [*, heads, d] (per-head ops: QK-norm); heads binds h; a copy */
OP(MERGE_HEADS,   "merge_heads",       "* h d^ -> * (h d^)",              1, 1, OPF_USER | OPF_LINEAR, copy, NONE, "", "", "") /* the inverse: [*, h, d] as [*, h x d] */
OP(RESHAPE,       "reshape",           "",                                1, 1, OPF_USER | OPF_LINEAR, copy, NONE, "", "", "") /* y = x with another shape (iattr IR_IA_RNDIM, IR_IA_RSHAPE), the same elements in the same order; its annotation is made per op (ir_add_op): the leading dims x and y share are identifiers, the rest fixed numbers; its backward is a reshape back */
OP(CONCAT,        "concat",            "* (g a^), * (g b^) -> * (g c^)",  2, 1, OPF_USER | OPF_LINEAR, none, NONE, "", "", "") /* the last dims side by side, group by group (g: groups, default 1): c = a + b; its backward is split */
OP(SPLIT,         "split",             "* (g c^) -> * (g a^), * (g b^)",  1, 2, OPF_USER | OPF_LINEAR, none, NONE, "", "", "") /* the last dim cut in two in each of its g groups (iattr IR_IA_GROUPS, default 1): a = first (IR_IA_FIRST), b = c - a; its backward is concat */
OP(SLICE,         "slice",             "* t^ c -> * s^ c",                1, 1, OPF_USER | OPF_LINEAR, none, NONE, "", "", "") /* y = x[..., start:stop, :]: positions start .. stop-1 of the dim before the last (a CLS token, a window); its backward is pad */
OP(PAD,           "pad",               "* s^ c -> * t^ c",                1, 1, OPF_LINEAR, none, NONE, "", "", "")            /* dx = dy at start:stop of t (the forward's extent, iattr IR_IA_FULL), zeros elsewhere */
OP(RELPOS_BIAS,   "relpos_bias",       "b^ h -> h t^ s^",                 1, 1, OPF_USER | OPF_LINEAR, relpos_bias, RELPOS_BIAS_BWD, "dy", "2 * h t s", "t, s, h, attr buckets, attr bidirectional, attr max_distance") /* T5's relative position bias: y[h, t, s] = table[bucket(s - t), h]; table (buckets, heads); t, s from the shape (IR_IA_RP_T, RP_S), the buckets' rule from bidirectional and max_distance */
OP(RELPOS_BIAS_BWD, "relpos_bias_bwd",  "h t^ s^ -> b^ h",                 1, 1, OPF_LINEAR, relpos_bias_bwd, NONE, "", "2 * h t s", "t, s, h, attr buckets, attr bidirectional, attr max_distance, acc") /* dtable[b, h] = the sum of dy[h, t, s] over the (t, s) in bucket b */
OP(TRANSPOSE,     "transpose",         "* a b -> * b a",                  1, 1, OPF_USER | OPF_LINEAR, transpose, TRANSPOSE, "dy", "", "*, a, b, acc") /* swap the last two dims (MLP-Mixer's token mixing); its own backward */
OP(RELU,          "relu",              "* -> *",                          1, 1, OPF_USER | OPF_ELTW, relu, RELU_BWD, "dy y", "", "")   /* y = max(x, 0) */
OP(RELU_BWD,      "relu_bwd",          "*, * -> *",                       2, 1, OPF_ELTW, relu_bwd, NONE, "", "", "")              /* dx = dy * (y > 0); inputs dy, y */
OP(GELU,          "gelu",              "* -> *",                          1, 1, OPF_USER | OPF_ELTW, gelu, GELU_BWD, "dy x", "", "")   /* tanh approximation */
OP(GELU_BWD,      "gelu_bwd",          "*, * -> *",                       2, 1, OPF_ELTW, gelu_bwd, NONE, "", "", "")              /* inputs dy, x */
OP(SILU,          "silu",              "* -> *",                          1, 1, OPF_USER | OPF_ELTW, silu, SILU_BWD, "dy x", "", "")   /* y = x sigmoid(x) (swish; LLaMA's MLP) */
OP(SILU_BWD,      "silu_bwd",          "*, * -> *",                       2, 1, OPF_ELTW, silu_bwd, NONE, "", "", "")              /* inputs dy, x */
OP(MSE_LOSS,      "mse_loss",          "*+, *+ -> 1",                     2, 1, OPF_USER | OPF_LOSS, mse_loss, NONE, "", "", "; scale")   /* mean((p - t)^2) over all elements */
OP(MSE_BWD,       "mse_bwd",           "*, * -> *",                       2, 1, OPF_ELTW, mse_bwd, NONE, "", "", "; scale")              /* dp = 2 (p - t) / numel; inputs p, t */
OP(CROSS_ENTROPY, "cross_entropy",     "*+ v^, *+ -> 1",                  2, 1, OPF_USER | OPF_LOSS, none, NONE, "", "", "")   /* mean over rows of -log softmax(logits[:vocab])[target]; targets i32; the spec's op, never in a graph: */
/* cross_entropy in a spec lowers to these (ir_add_cross_entropy): the vocabulary in k blocks of c,
 * per-block statistics, then their combination -- so tp splits the vocabulary (k) with no all-gather
 * of the logits, only of the rows x k statistics */
OP(XENT_STATS,    "xent_stats",        "* (k c^), * -> * k, * k, * k",    2, 3, 0, xent_stats, NONE, "", "", "*, k, c, attr vocab, lo 0 -1")                     /* per row and block: max, sum exp(x - max), the target's logit (0 elsewhere) */
OP(XENT_LOSS,     "xent_loss",         "*+ k^, *+ k^, *+ k^ -> 1",        3, 1, OPF_LOSS, xent_loss, NONE, "", "", "*, k, acc; scale")              /* mean over rows of logsumexp combined from the blocks - the target's logit */
OP(XENT_VP_BWD,   "xent_vp_bwd",       "* (k c^), *, * j^, * j^ -> * (k c^)", 4, 1, 0, xent_vp_bwd, NONE, "", "", "*, k c, acc, attr vocab, j, lo 0 -1; scale")                 /* logits, targets, block max, block sum -> dlogits = (softmax - onehot) / rows */
OP(CUSTOM,        "custom",            "",                                0, 0, 0, custom, NONE, "", "", "attr custom, nin, nout, acc, shapes; all")                     /* a [custom NAME] op of the spec: annotation, counts and kernel from g->cust[iattr[IR_IA_CUSTOM]] */
OP(SGD,           "sgd",               "*, * -> ",                        2, 0, OPF_OPTIM, sgd, NONE, "", "", "@0; lr wd")             /* p -= lr (g + wd p); inputs p, g */
OP(ADAMW,         "adamw",             "*, *, *, * -> ",                  4, 0, OPF_OPTIM, adamw, NONE, "", "", "*, step+1; lr wd beta1 beta2 aeps")             /* inputs p, g, m, v */
