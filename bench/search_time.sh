#!/usr/bin/env bash
# bench/search_time.sh [REPS] -- how long policy = auto searches (issue 12):
# gpt2-124m-shaped graphs (C 768, T 64, B 1024) of 12, 24, 48 and 96 layers
# on 8, 64, 128 and 1024 a100-80g devices.  Each cell runs
#
#   nnsc-aot examples/gpt2-124m.ini --stop-after graph -v --devices N \
#     --set dims.L=L --set dims.T=64 --set dims.B=1024 \
#     --set plan.policy=auto --set cluster.device=a100-80g
#
# (--stop-after graph: the compile stops after the search and the graph,
# nothing is built) REPS times (default 3) and prints the median of the search's own
# time (the "priced in X s" of its report) and the candidates priced, as a
# markdown table for docs/performance.md.  The search uses one thread per
# CPU this process may use (its report says how many).
#
# Environment: BUILD (default build/), LAYERS, DEVICES (lists to replace the
# defaults).  Exit status 0, or 1 when a run failed.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
nn=${BUILD:-$top/build}/nnsc-aot
reps=${1:-3}
layers=${LAYERS:-12 24 48 96}
devices=${DEVICES:-8 64 128 1024}
[[ -x $nn ]] || { echo "search_time.sh: no $nn (./build.sh)" >&2; exit 1; }
[[ $reps =~ ^[1-9][0-9]*$ ]] || { echo "search_time.sh: REPS must be a positive integer" >&2; exit 1; }

median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "search_time.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg), nnsc-aot $(git -C "$top" rev-parse --short HEAD 2>/dev/null)"
printf '| layers |'
for n in $devices; do printf ' %s devices |' "$n"; done
printf '\n|---|'
for _ in $devices; do printf -- '---|'; done
printf '\n'
fail=0
for l in $layers; do
  printf '| %s |' "$l"
  for n in $devices; do
    ts=() cands=""
    for ((r = 0; r < reps; r++)); do
      line=$("$nn" "$top/examples/gpt2-124m.ini" --stop-after graph -v --devices "$n" --set "dims.L=$l" --set dims.T=64 \
        --set dims.B=1024 --set plan.policy=auto --set cluster.device=a100-80g 2>&1 >/dev/null | grep '^search    ')
      if [[ $line =~ ([0-9]+)\ candidate\ plans\ priced\ in\ ([0-9.]+)\ s ]]; then
        cands=${BASH_REMATCH[1]}
        ts+=("${BASH_REMATCH[2]}")
      else
        fail=1
      fi
    done
    if ((${#ts[@]})); then
      printf ' %s s (%s) |' "$(printf '%s\n' "${ts[@]}" | median)" "$cands"
    else
      printf ' failed |'
    fi
  done
  printf '\n'
done
echo "(median search time of $reps runs; in brackets: candidate plans priced)"
exit $fail
