#!/usr/bin/env bash
# bench/buckets.sh [ROUNDS] [STEPS] -- gradient buckets (docs/comm.md) on the
# CPU target: each plan below built with and without [plan] grad_buckets,
# the two run one after the other ROUNDS times (default 5; alternating, so
# that a change of the machine's load hits both), STEPS steps each (default
# 30); prints per plan and way the median of the per-round medians of
# steps 2..STEPS, and their ratio, and the collectives rank 0 issues after
# the micro-batches and in them (all-reduces, reduce-scatters, all-gathers).
#
# Environment: BUILD (build directory, default build/); ONLY: run only the
# plans whose name holds this text.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
rounds=${1:-5}
steps=${2:-30}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-buckets-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tiny=$top/examples/gpt2-tiny.ini
plans=(
  "gpt2-tiny dp 2|$tiny --devices 2 --set plan.policy=dp"
  "gpt2-tiny tp 2, sequence parallel|$tiny --devices 2 --set plan.policy=tp --set plan.sequence_parallel=true"
  "gpt2-tiny at C 32, T 8, dp 2|$tiny --devices 2 --set plan.policy=dp --set dims.C=32 --set dims.T=8"
  "gpt2-tiny at C 32, T 8, dp 2, zero 1|$tiny --devices 2 --set plan.policy=dp --set dims.C=32 --set dims.T=8 --set plan.zero=1"
  "mlp dp 2|$top/examples/mlp.ini --devices 2"
  "gpt2-tiny at C 32, T 8, dp 2, zero 2, a100's plan|$tiny --devices 2 --set plan.policy=dp --set dims.C=32 --set dims.T=8 --set plan.zero=2 --set cluster.device=a100-80g"
  "gpt2-tiny at C 32, T 8, dp 2, zero 3, a100's plan|$tiny --devices 2 --set plan.policy=dp --set dims.C=32 --set dims.T=8 --set plan.zero=3 --set cluster.device=a100-80g"
)
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs available; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: bench/buckets.sh $rounds $steps"
# median of steps 2..N's ms in a --log file (JSON lines, ms to the microsecond)
med() {
  sed -n 's/^{"step":\([0-9]*\),.*"ms":\([0-9.]*\),.*/\1 \2/p' "$1" | awk '$1 > 1 {print $2}' | sort -g |
    awk '{v[n++] = $1} END {print n ? v[int(n / 2)] : "nan"}'
}
mmed() { tr ' ' '\n' | sort -g | awk 'NF {v[n++] = $1} END {print v[int(n / 2)]}'; }
for p in "${plans[@]}"; do
  name=${p%%|*}
  [[ -z ${ONLY:-} || $name == *"$ONLY"* ]] || continue
  read -r -a args <<<"${p#*|}"
  for b in true false; do
    "$build/nnsc-aot" "${args[@]}" --set plan.grad_buckets=$b --dump=lower -q -o "$tmp/$b" >"$tmp/$b.lower" 2>/dev/null
  done
  on=() off=()
  for ((r = 0; r < rounds; r++)); do
    for b in true false; do
      rm -f "$tmp/$b.json"
      "$tmp/$b/launch" --steps "$steps" --quiet --log "$tmp/$b.json" >/dev/null 2>&1
      if [[ $b == true ]]; then on+=("$(med "$tmp/$b.json")"); else off+=("$(med "$tmp/$b.json")"); fi
    done
  done
  mon=$(echo "${on[*]}" | mmed) moff=$(echo "${off[*]}" | mmed)
  ar() { awk -v s="$2" '/^prog rank/ {r = $3} r == 0 && $1 == s && $2 ~ /^(allreduce|reducescatter|allgather)$/ {n++} END {print n + 0}' "$1"; }
  printf '%-36s buckets %8.3f ms (%d collectives after the loop, %d in it), one by one %8.3f ms (%d, %d): %.3fx\n' \
    "$name" "$mon" "$(ar "$tmp/true.lower" post)" "$(ar "$tmp/true.lower" mb)" "$moff" "$(ar "$tmp/false.lower" post)" \
    "$(ar "$tmp/false.lower" mb)" "$(awk -v a="$moff" -v b="$mon" 'BEGIN {print a / b}')"
  echo "  per round, buckets: ${on[*]}; one by one: ${off[*]}"
done
