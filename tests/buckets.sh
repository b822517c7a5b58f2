#!/usr/bin/env bash
# tests/buckets.sh -- gradient buckets (passes/bucket.c, docs/comm.md):
# the all-reduces after the micro-batches that follow one another on every
# member of a group run as one collective over their buffers, laid out one
# after another.  For each plan below, built with and without
# [plan] grad_buckets:
#   - the bucketed ranks issue fewer all-reduces after the micro-batches
#     (the lower dump's post section), and plan.txt names the buckets;
#   - ZeRO 2's and 3's plans marked "mb" (a GPU profile, where packing a
#     param costs less than the latency it saves) also issue fewer
#     collectives in the micro-batches (ZeRO 3's gathers, moved together
#     with the copies they read; ZeRO 2's reduce-scatters);
#   - the cost model's estimate is not higher with buckets;
#   - both train bitwise alike: the CPU collectives add the members' values
#     in member order whatever the buffer's length, so the losses printed
#     and the final weights saved are the same bytes.
# (tests/equiv.list verifies the bucketed plans against one device.)
. "$(dirname "$0")/lib.sh" buckets

tiny=$top/examples/gpt2-tiny.ini
plans=(
  "dp2|$tiny --devices 2 --set plan.policy=dp"
  "dp2-mb2|$tiny --devices 2 --set plan.policy=dp --set train.micro_batches=2 --set train.grad_clip=0.5"
  "tp2-sp|$tiny --devices 2 --set plan.policy=tp --set plan.sequence_parallel=true"
  "dp2xtp2-sp|$tiny --devices 4 --set plan.policy=hybrid --set plan.tp=2 --set plan.sequence_parallel=true"
  "pp2xdp2|$tiny --devices 4 --set plan.policy=dp --set plan.pp=2 --set train.micro_batches=4"
  "mlp-dp4|$top/examples/mlp.ini --devices 4"
  "dp2-zero1|$tiny --devices 2 --set plan.policy=dp --set plan.zero=1"
  "dp2-zero2-mb2|$tiny --devices 2 --set plan.policy=dp --set plan.zero=2 --set train.micro_batches=2"
  "dp2-zero3|$tiny --devices 2 --set plan.policy=dp --set plan.zero=3"
  "dp2xtp2-zero1-sp|$tiny --devices 4 --set plan.policy=hybrid --set plan.tp=2 --set plan.zero=1 --set plan.sequence_parallel=true"
  "mb:dp4-zero2|$tiny --devices 4 --set plan.policy=dp --set plan.zero=2 --set cluster.device=a100-80g"
  "mb:dp4-zero3|$tiny --devices 4 --set plan.policy=dp --set plan.zero=3 --set cluster.device=a100-80g"
  "mb:dp2xtp2-zero3-sp|$tiny --devices 4 --set plan.policy=hybrid --set plan.tp=2 --set plan.zero=3 --set plan.sequence_parallel=true --set cluster.device=h100-80g"
)
# rank 0's collectives after the micro-batches and in the prologue (the gradient norm's included)
post_ar() {
  awk '/^prog rank/ {r = $3} r == 0 && /^  (post|pro ) +(allreduce|reducescatter|allgather) / {n++} END {print n + 0}' "$1"
}
# rank 0's collectives in the micro-batches
mb_coll() {
  awk '/^prog rank/ {r = $3} r == 0 && /^  mb +(allreduce|reducescatter|allgather) / {n++} END {print n + 0}' "$1"
}
est() { sed -n 's/^estimate  step \([0-9.]*\) ms.*/\1/p' "$1"; }

for p in "${plans[@]}"; do
  name=${p%%|*}
  read -r -a args <<<"${p#*|}"
  for b in true false; do
    d=$tmp/$name-$b
    if ! "$nn" "${args[@]}" --set train.steps=4 --set plan.grad_buckets=$b --dump=lower -q -o "$d" >"$d.lower" 2>"$d.err"; then
      no "$name grad_buckets=$b: build failed: $(tail -n 3 "$d.err")"
      continue
    fi
    "$d/launch" --save "$d.st" >"$d.log" 2>&1 || no "$name grad_buckets=$b: run failed: $(tail -n 3 "$d.log")"
  done
  on=$tmp/$name-true off=$tmp/$name-false
  [[ -f $on.lower && -f $off.lower ]] || continue
  a=$(post_ar "$on.lower") z=$(post_ar "$off.lower")
  ((a < z)) && ok "$name: $a collectives after the micro-batches on rank 0 with buckets, $z without" ||
    no "$name: $a collectives after the micro-batches with buckets, $z without"
  if [[ $name == mb:* ]]; then
    a=$(mb_coll "$on.lower") z=$(mb_coll "$off.lower")
    ((a < z)) && ok "$name: $a collectives in the micro-batches on rank 0 with buckets, $z without" ||
      no "$name: $a collectives in the micro-batches with buckets, $z without"
  fi
  # dp x tp with sequence parallelism: a rank is in two groups after the loop (dp, and dp x tp for the
  # sequence-parallel params); the reorder (pass_bucket_order) makes one bucket of each, and the norm
  if [[ $name == dp2xtp2-sp ]]; then
    ((a == 3)) && ok "$name: one bucket per group (reordered), and the norm: $a" || no "$name: $a all-reduces, wanted 3"
  fi
  grep -q "the first of a gradient bucket of" "$on/plan.txt" && ok "$name: plan.txt names the buckets" ||
    no "$name: no bucket in plan.txt"
  grep -q "gradient bucket" "$off/plan.txt" && no "$name: a bucket in plan.txt with grad_buckets = false"
  ea=$(est "$on/plan.txt") ez=$(est "$off/plan.txt")
  awk -v a="$ea" -v z="$ez" 'BEGIN {exit !(a != "" && a + 0 <= z + 0)}' &&
    ok "$name: estimate $ea ms with buckets, $ez without" || no "$name: estimate $ea ms with buckets, $ez without"
  if cmp -s <(grep -o 'loss [0-9.]*' "$on.log") <(grep -o 'loss [0-9.]*' "$off.log") &&
    [[ -s $on.st ]] && cmp -s "$on.st" "$off.st"; then
    ok "$name: the same losses and final weights, bitwise ($(grep -o 'final loss [0-9.]*' "$on.log"))"
  else
    no "$name: losses or final weights differ with buckets"
    diff <(grep -o 'loss [0-9.]*' "$on.log") <(grep -o 'loss [0-9.]*' "$off.log") | head -n 4
  fi
done

# under sequence parallelism the layernorms' and biases' gradients are
# bucketed over tp: gpt2-124m on tp 8 (a100-80g) is then estimated faster
# with sequence parallelism than without (one collective instead of one per
# param)
g124=$top/examples/gpt2-124m.ini
for sp in true false; do
  "$nn" "$g124" --devices 8 --set plan.policy=tp --set cluster.device=a100-80g --set plan.sequence_parallel=$sp \
    -q -o "$tmp/sp-$sp" >/dev/null 2>&1 || no "gpt2-124m tp 8 sequence_parallel=$sp"
done
s1=$(est "$tmp/sp-true/plan.txt") s0=$(est "$tmp/sp-false/plan.txt")
awk -v a="$s1" -v z="$s0" 'BEGIN {exit !(a != "" && z != "" && a + 0 < z + 0)}' &&
  ok "gpt2-124m tp 8: $s1 ms with sequence parallelism, $s0 ms without" ||
  no "gpt2-124m tp 8: $s1 ms with sequence parallelism, $s0 ms without"
echo "$pass passed, $fail failed"
((fail == 0))
