#!/usr/bin/env bash
# bench/plan_quality.sh -- the plan policy = auto chooses against the best
# Megatron-style grid plan, under the same cost model (issue 12), on a
# simulated cluster of 32 V100s (two DGX-2 nodes: the `dgx2` profile, 16 per
# node).
#
#   auto   every dp x tp x pp, micro-batches, schedule 1f1b / zb-h1 /
#          interleaved, and the memory ladder (docs/plan-search.md);
#   even   auto with balance = false: the layers cut into even counts, as
#          the planner (and Megatron) cut them;
#   grid   the search bound to schedule = 1f1b (Megatron's default schedule),
#          balance = false, per_op_trans = false (Megatron's op-trans for
#          every op: no op outside the blocks whole on tp, no MLP chain on its
#          tokens, no op-trans searched per block) and coshard_rung = false:
#          dp x tp x pp x micro-batches with the memory ladder of ZeRO,
#          sequence parallelism and recompute (Megatron's kinds).  For a
#          recycling graph (af2-recycle) the grid's schedule is gpipe: the
#          passes run one after another through the pipeline, filled and
#          drained each time, as a framework without 3F1B runs them (1f1b
#          there is nnScaler's 3F1B: docs/plans.md).
#
# The grid is a subset of auto's candidates, so auto is never slower by
# construction; the benchmark measures by how much it is faster, on which
# graphs, and how much of it the balanced stages give.  Graphs (bench/models/ and the repository's specs):
#
#   gpt-1.3b    examples/gpt2-124m.ini at C 2048, 16 heads, 24 layers, T 1024, B 512
#   t5-like     tests/equiv/encdec.ini at V 32128 (a large tied embedding), C 1024,
#               16 heads, 24 + 24 layers, T 512, B 256
#   swin-like   bench/models/swin-like.ini (stage widths 1:2:4:8, depths 2-2-18-2)
#   af2-like    bench/models/af2-like.ini (48 pair blocks, R 256, CZ 128)
#   af2-recycle bench/models/af2-recycle.ini: the same with AlphaFold2's
#               recycling, three passes of the trunk per micro-batch
#
# Each search runs as `nnsc-aot SPEC --stop-after graph -v --devices 32 --set
# plan.policy=auto --set cluster.device=dgx2 [--set plan.schedule=1f1b]`;
# the chosen line of its report is printed.  Output: a markdown table for
# docs/performance.md.  Environment: BUILD (default build/).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
nn=${BUILD:-$top/build}/nnsc-aot
[[ -x $nn ]] || { echo "plan_quality.sh: no $nn (./build.sh)" >&2; exit 1; }

models=(
  "gpt-1.3b|examples/gpt2-124m.ini|--set dims.C=2048 --set dims.NH=16 --set dims.L=24 --set dims.T=1024 --set dims.B=512"
  "t5-like|tests/equiv/encdec.ini|--set dims.V=32128 --set dims.C=1024 --set dims.NH=16 --set dims.LE=24 --set dims.LD=24 --set dims.T=512 --set dims.B=256"
  "swin-like|bench/models/swin-like.ini|"
  "af2-like|bench/models/af2-like.ini|"
  "af2-recycle|bench/models/af2-recycle.ini||gpipe"
)

# chosen SPEC SETS...: the chosen line of the search's report ("dp ... : step X ms, memory Y")
chosen() {
  local spec=$1
  shift
  "$nn" "$top/$spec" --stop-after graph -v --devices 32 --set plan.policy=auto --set cluster.device=dgx2 "$@" 2>&1 >/dev/null |
    sed -n 's/^  chosen   //p'
}

echo "plan_quality.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), nnsc-aot $(git -C "$top" rev-parse --short HEAD 2>/dev/null), 32 x dgx2"
echo
echo "| graph | auto: chosen plan | auto step | even cut: step | grid (1f1b, even, Megatron's op-trans, no coshard): best plan | grid step | grid / auto |"
echo "|---|---|---|---|---|---|---|"
fail=0
for m in "${models[@]}"; do
  IFS='|' read -r name spec sets gsched <<<"$m"
  # shellcheck disable=SC2086  # sets: --set pairs without blanks in values
  a=$(chosen "$spec" $sets)
  # shellcheck disable=SC2086
  e=$(chosen "$spec" $sets --set plan.balance=false)
  # shellcheck disable=SC2086
  g=$(chosen "$spec" $sets --set plan.schedule="${gsched:-1f1b}" --set plan.balance=false --set plan.per_op_trans=false \
    --set plan.coshard_rung=false)
  re='^(.*): step ([0-9.]+) ms'
  if [[ $a =~ $re ]] && ap=${BASH_REMATCH[1]} as=${BASH_REMATCH[2]} && [[ $e =~ $re ]] && es=${BASH_REMATCH[2]} &&
    [[ $g =~ $re ]] && gp=${BASH_REMATCH[1]} gs=${BASH_REMATCH[2]}; then
    printf '| %s | %s | %s ms | %s ms | %s | %s ms | %s |\n' "$name" "$ap" "$as" "$es" "$gp" "$gs" \
      "$(awk -v a="$as" -v g="$gs" 'BEGIN { printf "%.3f", g / a }')"
  else
    printf '| %s | failed: %s | | %s | %s | | |\n' "$name" "${a:-no plan}" "${e:-no plan}" "${g:-no plan}"
    fail=1
  fi
done
exit $fail
