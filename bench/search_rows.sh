#!/usr/bin/env bash
# bench/search_rows.sh -- policy = auto on the published Megatron-LM runs (issue 36; Narayanan et al.
# SC'21, Table 1, on a100-80g) and GPT-3 175B on 1024 devices: per row the search's time (wall and
# CPU, with the machine's load), the plan chosen, its step and memory per device.  Each row runs
#
#   nnsc-aot examples/gpt2-124m.ini --stop-after graph -v --devices GPUS --set dims.L=L \
#     --set dims.C=C --set dims.NH=NH --set dims.T=2048 --set dims.B=B --set dims.V=51200 \
#     --set dims.VR=51200 --set train.dtype=bf16 --set cluster.device=a100-80g --set plan.policy=auto
#
# Environment: BUILD (default build/), ROWS (names to run, default all: 1.7B 7.5B 39.1B 145.6B
# 529.6B gpt3).  Prints a markdown table for docs/performance.md; exit 1 when a search failed.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
nn=${BUILD:-$top/build}/nnsc-aot
[[ -x $nn ]] || { echo "search_rows.sh: no $nn (./build.sh)" >&2; exit 1; }
declare -A row=(
  [1.7B]="24 2304 24 32 512" [7.5B]="32 4096 36 128 512" [39.1B]="64 8192 48 512 1536"
  [145.6B]="96 12288 80 1536 2304" [529.6B]="128 20480 105 2520 2520" [gpt3]="96 12288 96 1024 1536")
rows=${ROWS:-1.7B 7.5B 39.1B 145.6B 529.6B gpt3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/search_rows-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "search_rows.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, nnsc-aot $(git -C "$top" rev-parse --short HEAD 2>/dev/null)"
echo "| row | GPUs | search wall | CPU (user+sys) | load before, after | candidates | chosen | step | memory |"
echo "|---|---|---|---|---|---|---|---|---|"
fail=0
for r in $rows; do
  read -r nh c l n b <<<"${row[$r]}"
  l0=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f '%e %U %S' -o "$tmp/time" "$nn" "$top/examples/gpt2-124m.ini" --stop-after graph -v --devices "$n" \
    --set dims.L="$l" --set dims.C="$c" --set dims.NH="$nh" --set dims.T=2048 --set dims.B="$b" --set dims.V=51200 \
    --set dims.VR=51200 --set train.dtype=bf16 --set cluster.device=a100-80g --set plan.policy=auto \
    >/dev/null 2>"$tmp/err"
  rc=$?
  l1=$(cut -d' ' -f1 /proc/loadavg)
  read -r wall user sys <"$tmp/time" 2>/dev/null || wall=? user=0 sys=0
  cands=$(grep -a '^search    ' "$tmp/err" | sed -n 's/.*: \([0-9]*\) candidate plans priced.*/\1/p')
  ch=$(grep -a '^  chosen' "$tmp/err" | sed 's/^  chosen *//')
  plan=${ch%%: step*}
  step=$(sed -n 's/.*: step \(~\?[0-9.]* ms\).*/\1/p' <<<"$ch")
  mem=$(sed -n 's/.*, memory \([0-9.]* [KMG]iB\).*/\1/p' <<<"$ch")
  if ((rc != 0)) || [[ -z $ch ]]; then
    fail=1
    plan="FAILED (exit $rc): $(grep -av '^search: ' "$tmp/err" | tail -1)"
  fi
  printf '| %s | %s | %s s | %.1f s | %s, %s | %s | %s | %s | %s |\n' "$r" "$n" "$wall" "$(echo "$user + $sys" | bc)" \
    "$l0" "$l1" "${cands:-?}" "$plan" "${step:-?}" "${mem:-?}"
done
exit $fail
