#!/usr/bin/env bash
# bench/pipeline_bubble.sh [STEPS] -- the measured pipeline bubble on the cpu
# target against its formula, and the stash per stage against 1F1B's bound.
#
# gpt2-tiny widened to C = 256 (so a task is milliseconds, not the
# transfers' microseconds) on pp 2 stages, one rank per stage and one
# kernel thread per rank (2 ranks on this 2-core machine: a rank never waits
# for a core), for gpipe, 1f1b, zb-h1, interleaved (2 chunks per stage),
# 2f2b and interlaced at m = 4 and 8 micro-batches: each
# run writes --trace files, and bench/bubble.py takes the median over steps
# 3..STEPS of 1 - busy / (p x span).  Then the stash plan.txt states per
# stage for pp 4, m 8, against 1F1B's min(p - s, m) micro-batches in flight.
#
# Environment: BUILD (build directory, default build/).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
steps=${1:-12}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-bubble-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs available; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: bench/pipeline_bubble.sh $steps"
spec=(--set dims.C=256 --set dims.B=16 --set train.lr=3e-4)
for m in 4 8; do
  for sched in gpipe 1f1b zb-h1 interleaved 2f2b interlaced; do
    o=$tmp/$sched-$m
    "$build/nnsc-aot" "$top/examples/gpt2-tiny.ini" -o "$o" -q --devices 2 --set plan.pp=2 \
      --set "plan.schedule=$sched" --set "train.micro_batches=$m" "${spec[@]}"
    NNSC_THREADS=1 "$o/launch" --steps "$steps" --quiet --trace "$o/trace.json" >/dev/null
    python3 "$top/bench/bubble.py" "$o/trace" 2 "$m" "$sched"
  done
done
echo "stash per stage (plan.txt), pp 4, m 8, 1f1b: slots are min(p - s, m) = 4 3 2 1"
"$build/nnsc-aot" "$top/examples/gpt2-tiny.ini" -o "$tmp/p4" -q --devices 4 --set plan.pp=4 \
  --set train.micro_batches=8 "${spec[@]}"
grep -o 'stage [0-9] on [0-9]*:.*stash [0-9]* x [0-9.]* [KMG]iB = [0-9.]* [KMG]iB' "$tmp/p4/plan.txt" |
  sed 's/: .*stash/: stash/'
