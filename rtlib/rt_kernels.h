/* rt_kernels.h -- every entry point a generated rank program calls, declared once.
 *
 * Each row: RT_K(name, nbuf, nint, nflt, out, rw, acc, ext)
 * expands (in rt.h) to
 *     void rt_k_<name>(rt_ctx *ctx, void *const *b, const int64_t *i, const float *f);
 * and (in the compiler) to the enum RT_K_<name> and the name table that
 * codegen/host.c uses to declare and call the function.  nbuf/nint/nflt are
 * the minimum counts; rows marked "var" take a count from an int argument.
 * out: the buffers it writes (RT_B(j): b[j]); rw: those of them it also
 * reads, or writes only in part, whatever acc says; acc: the index of its
 * acc int (-1: none; acc != 0 makes every written buffer read too).  The
 * compiler's Program (ir/prog.c) checks reads before writes and plans the
 * arena from them.  Kernels whose roles vary per call (ew, p2p, mark,
 * custom) give 0 here and are read per instruction (ir_prog_access).
 * ext: each buffer's element count as a product of ints (rt_kext.h:
 * "i0*i1 i1*i2 i0*i2" is matmul's M*K, K*N, M*N; `?` where the ints alone
 * do not give it); the compiler's arena extents, the CUDA driver double's
 * bounds and the op tests' buffer sizes all read it, and a unit test
 * (test_codegen) checks every row's formula against its nbuf and nint.
 *
 * Conventions: b[] are arena pointers (float * unless stated), i[] are
 * element counts and flags, f[] are float hyper-parameters.  `acc` = 0
 * overwrites the output, any other value adds into it (the compiler passes
 * the micro-batch index in a step's micro-batch loop: the first overwrites,
 * the others add).  All matrices are row-major.
 */
#ifndef RT_B
#define RT_B(j) (1u << (j))   /* buffer b[j] in a row's out and rw masks */
#endif
/*    name            nbuf nint nflt  out, rw, acc   arguments */
RT_K(init_param,      1,   1,   0, RT_B(0), 0, -1, "?")  /* b: dst.  i: param index in the manifest. Fills dst with the
                                                    rank's box of the param from the counter-based RNG. */
RT_K(zero,            1,   1,   0, RT_B(0), 0, -1, "i0")  /* b: dst.  i: n floats (or i32s).  dst[0..n) = 0 */
RT_K(data,            1,   3,   0, RT_B(0), 0, -1, "?")  /* var. b: dst (f32 or i32).  i: input index in the manifest,
                                                    step, ndim, then ndim pairs lo, hi (the box, in logical
                                                    indices of the step's batch).  Fills dst with the box of
                                                    the input's logical batch for that step; step < 0 means
                                                    batch -1-step of the evaluation data. */
RT_K(matmul,          3,   6,   0, RT_B(2), 0, 5, "i0*i1 i1*i2 i0*i2")  /* b: A, B, C.  i: M, K, N, transA, transB, acc.
                                                   C[M,N] (+)= op(A)[M,K] op(B)[K,N]; A is stored (M,K), or
                                                   (K,M) when transA; B is (K,N), or (N,K) when transB. */
RT_K(bias_add,        3,   2,   0, RT_B(2), 0, -1, "i0*i1 i1 i0*i1")  /* b: X, bias, Y.  i: M, N.  Y[m,n] = X[m,n] + bias[n] (Y may be X) */
RT_K(bias_grad,       2,   3,   0, RT_B(1), 0, 2, "i0*i1 i1")  /* b: dY, db.  i: M, N, acc.  db[n] (+)= sum_m dY[m,n] */
RT_K(add,             3,   2,   0, RT_B(2), 0, 1, "i0 i0 i0")  /* b: A, B, Y.  i: n, acc.  Y (+)= A + B */
RT_K(mul,             3,   2,   0, RT_B(2), 0, 1, "i0 i0 i0")  /* b: A, B, Y.  i: n, acc.  Y (+)= A * B */
RT_K(copy,            2,   2,   0, RT_B(1), 0, 1, "i0 i0")  /* b: X, Y.  i: n, acc.  Y (+)= X */
RT_K(relu,            2,   1,   0, RT_B(1), 0, -1, "i0 i0")  /* b: X, Y.  i: n.  Y = max(X, 0) */
RT_K(relu_bwd,        3,   2,   0, RT_B(2), 0, 1, "i0 i0 i0")  /* b: dY, Y, dX.  i: n, acc.  dX (+)= dY * (Y > 0) */
RT_K(gelu,            2,   1,   0, RT_B(1), 0, -1, "i0 i0")  /* b: X, Y.  i: n.  Y = 0.5 X (1 + tanh(sqrt(2/pi) (X + 0.044715 X^3))) */
RT_K(gelu_bwd,        3,   2,   0, RT_B(2), 0, 1, "i0 i0 i0")  /* b: dY, X, dX.  i: n, acc.  dX (+)= dY * gelu'(X) */
RT_K(silu,            2,   1,   0, RT_B(1), 0, -1, "i0 i0")  /* b: X, Y.  i: n.  Y = X / (1 + exp(-X)) */
RT_K(silu_bwd,        3,   2,   0, RT_B(2), 0, 1, "i0 i0 i0")  /* b: dY, X, dX.  i: n, acc.  dX (+)= dY * s (1 + X (1 - s)),
                                                   s = 1 / (1 + exp(-X)) */
RT_K(mse_loss,        3,   2,   1, RT_B(2), 0, 1, "i0 i0 1")  /* b: P, T, L.  i: n, acc.  f: scale.  L[0] (+)= scale * sum (P - T)^2 */
RT_K(mse_bwd,         3,   2,   1, RT_B(2), 0, 1, "i0 i0 i0")  /* b: P, T, dP.  i: n, acc.  f: scale.  dP (+)= 2 scale (P - T) */
RT_K(xent_stats,      5,   5,   0, RT_B(2) | RT_B(3) | RT_B(4), 0, -1, "i0*i1*i2 i0 i0*i1 i0*i1 i0*i1")  /* b: logits (M, K*C), targets (i32, M), bmax, bsum, btarget (M, K).
                                                                        i: M, K, C, Vreal, Vlo.  The rank's logits hold columns
                                                                        [Vlo, Vlo + K*C) of the vocabulary, in K blocks of C; of block j
                                                                        (columns g) the real ones g < Vreal count: bmax = their max,
                                                                        bsum = sum exp(x - bmax), btarget = x[t_m] when t_m is
                                                                        among them, else 0 (a block with no real column: bmax 0, bsum 0).
                                                                        A target outside [0, Vreal) is an error. */
RT_K(xent_loss,       4,   3,   1, RT_B(3), 0, 2, "i0*i1 i0*i1 i0*i1 1")  /* b: bmax, bsum, btarget (M, K), L.  i: M, K, acc.  f: scale.
                                                   L[0] (+)= scale * sum_m (lse_m - sum_j btarget[m, j]), lse_m =
                                                   X + log sum_j bsum[m, j] exp(bmax[m, j] - X), X = max_j bmax[m, j] */
RT_K(xent_vp_bwd,     5,   6,   1, RT_B(4), 0, 2, "i0*i1 i0 i0*i4 i0*i4 i0*i1")  /* b: logits (M, V), targets (i32, M), bmax, bsum (M, Kall),
                                                   dlogits (M, V).  i: M, V, acc, Vreal, Kall, Vlo.  f: scale.
                                                   With lse_m from all Kall blocks (as xent_loss), for the rank's
                                                   columns g = Vlo + v: dlogits[m, v] (+)= scale * (exp(x - lse_m) -
                                                   (g == t_m)) where g < Vreal, else (+)= 0 */
RT_K(sgd,             2,   1,   2, RT_B(0), RT_B(0), -1, "i0 i0")  /* b: P, G.  i: n.  f: lr, wd.  With g = G * ctx grad scale and
                                                          lr' = lr * ctx lr scale (rt_step_begin, rt_k_gradclip):
                                                          P -= lr' * (g + wd * P) */
RT_K(adamw,           4,   2,   5, RT_B(0) | RT_B(2) | RT_B(3), RT_B(0) | RT_B(2) | RT_B(3), -1, "i0 i0 i0 i0")  /* b: P, G, M, V.  i: n, t (1-based step).  f: lr, wd, beta1,
                                                                                                  beta2, eps.  With g and lr' as for sgd: M = b1 M + (1-b1) g;
                                                                                                  V = b2 V + (1-b2) g^2;
                                                                                                  P -= lr' * (M/(1-b1^t) / (sqrt(V/(1-b2^t)) + eps) + wd P) */
RT_K(sumsq,           2,   2,   0, RT_B(1), 0, 1, "i0 1")  /* b: G, S (1 float).  i: n, acc.  S[0] (+)= sum G^2 (in double,
                                                   rounded once; fixed order) */
RT_K(gradclip,        1,   0,   1, 0, 0, -1, "1")  /* b: S (the global sum of squares of all gradients).  f: max
                                              norm (0: no clipping).  Sets the step's gradient norm
                                              sqrt(S) (logged) and the grad scale used by the optimizer
                                              kernels: min(1, max / (norm + 1e-6)) when max > 0, else 1. */
RT_K(allreduce,       1,   2,   0, RT_B(0), RT_B(0), -1, "i0")  /* b: buf (f32, in place).  i: n, group.  Sum over the group;
                                                          every member gets bitwise the same result. */
RT_K(allgather,       2,   2,   0, RT_B(1), 0, -1, "i0 ?")  /* b: send (n floats), recv (n * size floats).  i: n, group.
                                                    recv = concatenation of members' send in group order. */
RT_K(reducescatter,   2,   2,   0, RT_B(1), 0, -1, "? i0")  /* b: send (n * size floats), recv (n floats).  i: n, group.
                                                    recv = member k's chunk k of the sum of all sends. */
RT_K(broadcast,       1,   3,   0, RT_B(0), RT_B(0), -1, "i0")  /* b: buf.  i: n, group, root (index within the group). */
RT_K(sendrecv,        2,   4,   0, RT_B(1), RT_B(1), -1, "i0 i0")  /* b: send, recv.  i: n, group, peer_send, peer_recv (indices
                                                          within the group, -1: none).  Pairs with the peers' calls. */
RT_K(p2p,            1,   5,   0, 0, 0, -1, "?")  /* var. b: one buffer per op.  i: nops (1..6), then per op j: dir (0 send,
                                             1 receive), n, group, peer (member index, not this rank).  The
                                             sends and receives progress together and the call returns when
                                             all are done (a batch, as NCCL's grouped send/recv): pipelines'
                                             transfers at a task boundary.  Pairs with the peers' calls. */
RT_K(mark,            0,   3,   0, 0, 0, -1, "")  /* i: what (0 F, 1 B, 2 W; + 3 (chunk + 1) for a model chunk's task),
                                              micro-batch, edge (0 begin, 1 end).  A
                                              pipeline task's edge: recorded with --trace (rtlib/base/trace.c) */
RT_K(alltoall,        2,   2,   0, RT_B(1), 0, -1, "? ?")  /* b: send (size chunks of n floats), recv (same).  i: n, group.
                                                    member k's recv chunk j = member j's send chunk k. */
RT_K(embedding,       3,   5,   0, RT_B(2), 0, 4, "i0 i2*i3 i0*i3")  /* b: tokens (i32, R), table (Vext, C), Y (R, C).  i: R, Vlo, Vext, C, acc.
                                                   Y[r] (+)= table[tok_r - Vlo] if Vlo <= tok_r < Vlo + Vext, else (+)= 0
                                                   (a vocabulary shard: out-of-shard rows give 0) */
RT_K(embedding_bwd,   3,   5,   0, RT_B(2), 0, 4, "i0 i0*i3 i2*i3")  /* b: tokens (i32, R), dY (R, C), dtable (Vext, C).  i: R, Vlo, Vext, C, acc.
                                                   acc = 0: dtable = 0 first; then dtable[tok_r - Vlo] += dY[r] for in-shard
                                                   tokens (rows summed in order r = 0..R-1: deterministic) */
RT_K(layernorm,       6,   2,   1, RT_B(3) | RT_B(4) | RT_B(5), 0, -1, "i0*i1 i1 i1 i0*i1 i0 i0")  /* b: X (R, C), w (C), bias (C), Y (R, C), mean (R), rstd (R).  i: R, C.
                                                                        f: eps.  mean, rstd = 1/sqrt(var + eps) (biased var); Y = (X-mean) rstd w + bias */
RT_K(layernorm_bwd,   6,   3,   0, RT_B(5), 0, 2, "i0*i1 i0*i1 i1 i0 i0 i0*i1")  /* b: dY, X, w, mean, rstd, dX.  i: R, C, acc.  dX (+)= layernorm input grad */
RT_K(layernorm_wgrad, 6,   3,   0, RT_B(4) | RT_B(5), 0, 2, "i0*i1 i0*i1 i0 i0 i1 i1")  /* b: dY, X, mean, rstd, dw, dbias.  i: R, C, acc.
                                                             dw (+)= sum_r dY (X-mean) rstd; dbias (+)= sum_r dY */
RT_K(rmsnorm,         4,   2,   1, RT_B(2) | RT_B(3), 0, -1, "i0*i1 i1 i0*i1 i0")  /* b: X (R, C), w (C), Y (R, C), rstd (R).  i: R, C.  f: eps.
                                                              rstd = 1/sqrt(mean_c(X^2) + eps); Y = X rstd w */
RT_K(rmsnorm_bwd,     5,   3,   0, RT_B(4), 0, 2, "i0*i1 i0*i1 i1 i0 i0*i1")  /* b: dY, X, w, rstd, dX.  i: R, C, acc.  With xhat = X rstd and
                                                   g = dY w: dX (+)= rstd (g - xhat mean_c(g xhat)) */
RT_K(rmsnorm_wgrad,   4,   3,   0, RT_B(3), 0, 2, "i0*i1 i0*i1 i0 i1")  /* b: dY, X, rstd, dw.  i: R, C, acc.  dw (+)= sum_r dY X rstd */
RT_K(rope,            2,   6,   1, RT_B(1), 0, 5, "i0*i1*i2*i3 i0*i1*i2*i3")  /* b: X (B, T, H, D), Y.  i: B, T, H, D (even), inverse, acc.  f: theta.
                                                   Per head, LLaMA's halves: with a = t theta^(-2j/D), j < D/2,
                                                   Y[j] (+)= X[j] cos a - X[j+D/2] sin a, Y[j+D/2] (+)= X[j+D/2] cos a
                                                   + X[j] sin a; inverse: the angle -a (the backward).  Y may be X */
RT_K(softmax,         2,   2,   0, RT_B(1), 0, -1, "i0*i1 i0*i1")  /* b: X (R, N), Y.  i: R, N.  Y = softmax over the last dim (stable) */
RT_K(softmax_bwd,     3,   3,   0, RT_B(2), 0, 2, "i0*i1 i0*i1 i0*i1")  /* b: dY, Y, dX.  i: R, N, acc.  dX (+)= Y (dY - sum(dY Y)) */
RT_K(attention,       5,  10,   1, RT_B(3) | RT_B(4), 0, -1, "i0*i1*i2*i3 i0*i6*i5*i3 i0*i6*i5*i3 i0*i1*i2*i3 i0*i2*i1")  /* b: q (B, T, H, D), k, v (B, S, Hkv, D), Y (B, T, H, D), lse (B, H, T).
                                                              i: B, T, H, D, causal, Hkv, S, alibi, hoff, Htot.  f: scale (default 1/sqrt(D)).
                                                              Multi-head attention per (b, h) of T queries over S keys
                                                              (causal: S = T), grouped-query when Hkv < H (H a multiple of
                                                              Hkv): query head h reads key/value head h / (H / Hkv).
                                                              Sc = scale q k^T (masked to s <= t when causal; with alibi = 1
                                                              each score - m |t - s|, m the slope of the layer's query
                                                              head hoff + h of Htot, rt_alibi_slope), P = softmax(Sc),
                                                              Y = P v, lse = logsumexp of Sc's rows.  Rows of q/Y are H*D floats,
                                                              of k/v Hkv*D. */
RT_K(attention_bwd,   9,  12,   1, RT_B(6) | RT_B(7) | RT_B(8), 0, 5, "i0*i1*i2*i3 i0*i1*i2*i3 i0*i7*i6*i3 i0*i7*i6*i3 i0*i1*i2*i3 i0*i2*i1 i0*i1*i2*i3 i0*i7*i6*i3 i0*i7*i6*i3")  /* b: dY, q, k, v, Y, lse, dq, dk, dv.  i: B, T, H, D, causal, acc, Hkv, S,
                                                                       P = max(T, S), alibi, hoff, Htot.  f: scale.  Gradients of attention (P recomputed
                                                                       from q, k, lse); dk, dv of a key/value head sum over its H / Hkv
                                                                       query heads, in head order. */
RT_K(attention_vl,    6,  10,   1, RT_B(4) | RT_B(5), 0, -1, "i0*i1*i2*i3 i0*i6*i5*i3 i0*i6*i5*i3 i0 i0*i1*i2*i3 i0*i2*i1")
                       /* b: q, k, v, lens (i32, B), Y, lse.  i, f: attention's.  attention where row b's queries see
                          only its keys s < lens[b] (padding after them); a row with lens[b] = 0 gives Y = 0,
                          lse = -inf.  A negative length is an error. */
RT_K(attention_vl_bwd, 10, 12,   1, RT_B(7) | RT_B(8) | RT_B(9), 0, 5, "i0*i1*i2*i3 i0*i1*i2*i3 i0*i7*i6*i3 i0*i7*i6*i3 i0*i1*i2*i3 i0*i2*i1 i0 i0*i1*i2*i3 i0*i7*i6*i3 i0*i7*i6*i3")
                       /* b: dY, q, k, v, Y, lse, lens, dq, dk, dv.  i, f: attention_bwd's.  Its gradients with
                          attention_vl's mask: keys s >= lens[b] get dk = dv = 0 (+ acc). */
RT_K(attention_ab,    6,  10,   1, RT_B(4) | RT_B(5), 0, -1, "i0*i1*i2*i3 i0*i6*i5*i3 i0*i6*i5*i3 i2*i1*i6 i0*i1*i2*i3 i0*i2*i1")
                       /* b: q, k, v, bias (H, T, S), Y, lse.  i, f: attention's.  attention where every score of
                          query head h gets bias[h, t, s] after the scale (and ALiBi); a bias of -inf masks. */
RT_K(attention_ab_bwd, 10, 12,   1, RT_B(7) | RT_B(8) | RT_B(9), 0, 5, "i0*i1*i2*i3 i0*i1*i2*i3 i0*i7*i6*i3 i0*i7*i6*i3 i0*i1*i2*i3 i0*i2*i1 i2*i1*i7 i0*i1*i2*i3 i0*i7*i6*i3 i0*i7*i6*i3")
                       /* b: dY, q, k, v, Y, lse, bias, dq, dk, dv.  i, f: attention_bwd's.  Its gradients with
                          attention_ab's bias in the scores. */
RT_K(attention_dbias, 8,  12,   1, RT_B(7), 0, 5, "i0*i1*i2*i3 i0*i1*i2*i3 i0*i7*i6*i3 i0*i7*i6*i3 i0*i1*i2*i3 i0*i2*i1 i2*i1*i7 i2*i1*i7")
                       /* b: dY, q, k, v, Y, lse, bias, dbias (H, T, S).  i, f: attention_bwd's.  The bias's
                          gradient: dbias[h, t, s] (+)= sum over b, in order, of P (dP - Drow) (attention_bwd's
                          dS without the scale); 0 where masked. */
RT_K(mean_mid,        2,   4,   1, RT_B(1), 0, 3, "i0*i1*i2 i0*i2")  /* b: X (R, T, C), Y (R, C).  i: R, T, C, acc.  f: scale.
                                                   Y[r, c] (+)= scale * sum_t X[r, t, c] (summed in t order in f32,
                                                   then scaled).  mean over the dim before the last. */
RT_K(mean_mid_bwd,    2,   4,   1, RT_B(1), 0, 3, "i0*i2 i0*i1*i2")  /* b: dY (R, C), dX (R, T, C).  i: R, T, C, acc.  f: scale.
                                                   dX[r, t, c] (+)= scale * dY[r, c]. */
RT_K(transpose,       2,   4,   0, RT_B(1), 0, 3, "i0*i1*i2 i0*i1*i2")  /* b: X (R, A, B), Y (R, B, A).  i: R, A, B, acc.
                                                  Y[r, b, a] (+)= X[r, a, b] */
RT_K(relpos_bias,     2,   6,   0, RT_B(1), 0, -1, "i3*i2 i2*i0*i1")  /* b: table (NB, H), Y (H, T, S).  i: T, S, H, NB,
                                                  bidirectional, max_distance.  Y[h, t, s] = table[rt_relpos_bucket(s - t), h]
                                                  (T5's buckets; the H columns may be a shard of the heads) */
RT_K(relpos_bias_bwd, 2,   7,   0, RT_B(1), 0, 6, "i2*i0*i1 i3*i2")  /* b: dY (H, T, S), dtable (NB, H).  i: T, S, H, NB,
                                                  bidirectional, max_distance, acc.  dtable[b, h] (+)= the sum of
                                                  dY[h, t, s] over the (t, s) in bucket b, by diagonal d = s - t
                                                  ascending, then t ascending (deterministic) */
RT_K(place,           2,   2,   0, RT_B(1), RT_B(1), 1, "? ?")  /* var. b: src, dst.  i: ndim, acc, then per dim: dst extent, lo, hi.
                                                         dst[lo:hi, ...] (+)= src (src contiguous); the inverse of slice */
RT_K(slice,           2,   2,   0, RT_B(1), 0, 1, "? ?")  /* var. b: src, dst.  i: ndim, acc, then per dim: src extent,
                                                   lo, hi.  dst (+)= src[lo:hi, ...] (dst contiguous). */
RT_K(ew,              1,   4,   0, 0, 0, -1, "?")  /* var. A fused elementwise chain (passes/fuse.c): b: up to 9
                                              buffers; i: id, n, N, nops, then nops groups of 4 (op,
                                              dst, a, c).  For each element k < n the ops run in order on
                                              registers and buffer elements (k, or k % N for a row
                                              broadcast); op codes and operands: rt_ew.h.  Every op
                                              rounds as its unfused kernel does: fusing never changes a
                                              result.  id numbers the distinct chains of a build (the
                                              CUDA target has one generated kernel per id: nnsc_ew_<id>). */
RT_K(matmul_bf16,     3,   6,   0, RT_B(2), 0, 5, "i0*i1 i1*i2 i0*i2")  /* b: A, B, C.  i: M, K, N, transA, transB, acc.  Mixed
                                                   precision (train dtype = bf16): matmul's product with
                                                   A and B (f32 in memory) read as if rounded to bf16
                                                   (nearest even; NaN stays NaN, inf inf), products
                                                   summed in f32 into C (f32).  Reference and CPU
                                                   kernel: lowp.c. */
RT_K(custom,          0,   4,   0, 0, 0, 3, "")  /* var. A [custom NAME] op (docs/custom-ops.md): generated code
                                             calls the user's nnsc_custom_NAME (rtlib/nnsc_custom.h), not
                                             this entry.  b: the inputs, then the outputs.  i: the
                                             section's row, nin, nout, acc, then per operand: ndim and
                                             its extents.  acc != 0: add into the outputs. */
RT_K(cvt_f32,         2,   2,   0, RT_B(1), 0, -1, "i1 i0")  /* b: X (bf16, n values in nw = i1 = ceil(n/2) 4-byte words),
                                                   Y (f32, n).  i: n, nw.  Y = X widened (exact).  bf16
                                                   storage (train dtype = bf16, passes/precision.c): an operand
                                                   stored in bf16 is widened into f32 scratch before its kernel */
RT_K(cvt_bf16,        2,   2,   0, RT_B(1), 0, -1, "i0 i1")  /* b: X (f32, n), Y (bf16, nw words).  i: n, nw.  Y = X rounded
                                                   to bf16 (nearest, ties to even; NaN stays NaN: rt_lowp.h);
                                                   an odd n writes 0 to the last word's high half.  A kernel's
                                                   output stored in bf16 is narrowed from its f32 scratch */
RT_K(allreduce_bf16,  1,   3,   0, RT_B(0), RT_B(0), -1, "i2")  /* b: buf (bf16, n values in nw = i2 =
                                                   ceil(n/2) 4-byte words, in place).  i: n, group, nw.
                                                   Sum over the group on the bf16 wire (passes/precision.c):
                                                   cpu target: each value widened, summed in f32 in member
                                                   order, rounded once to bf16, bitwise the same on every
                                                   member; cuda: NCCL's bf16 sum (ncclBfloat16) */
RT_K(reducescatter_bf16, 2, 4,   0, RT_B(1), 0, -1, "i3 i2")  /* b: send (bf16, size * n values in sw = i3 =
                                                   ceil(size n / 2) words), recv (bf16, n values in nw = i2 =
                                                   ceil(n / 2) words).  i: n, group, nw, sw.  recv = member
                                                   k's block k (values [k n, (k + 1) n)) of the sum over the
                                                   group on the bf16 wire (passes/precision.c; lower.c's n is
                                                   even, an odd n leaves recv's last half as it was): cpu
                                                   target: each value widened, summed in f32 in member order,
                                                   rounded once to bf16, as allreduce_bf16; cuda: NCCL's bf16
                                                   sum (ncclBfloat16) */
