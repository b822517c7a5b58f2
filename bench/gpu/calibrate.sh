#!/usr/bin/env bash
# bench/gpu/calibrate.sh pack DIR | run DIR | fit DIR LOGS -- the cost model
# on one GPU: `nnsc-aot profile --target cuda` calibrates a GPU profile's
# FLOP/s and weight_bw from two runs of gpt2-124m (B x T = 8 x 1024, f32;
# 1 and 8 micro-batches), then predicts six other plans of it on that GPU
# and compares with their measured steps (docs/plan-search.md, Calibration;
# results in docs/performance.md).
#
#   bench/gpu/calibrate.sh pack .gpu/cal          # here: the runs, built (no GPU needed)
#   bench/gpu/calibrate.sh run .gpu/cal           # there: writes .gpu/cal/logs (no compiler)
#   bench/gpu/calibrate.sh fit .gpu/cal LOGS      # here: the profile from LOGS (its cal/ or
#                                                 # the flat cal-*.log copies), and the table
#
# The plans (each also as the calibration's model and overrides): 2 and 4
# micro-batches, every layer recomputed, half of them, T 512 x B 16, and
# bf16 (the fit prices bf16 at the f32 FLOP/s it measured: its row shows
# how far that is).  Environment: NNSC (the compiler, default build/nnsc-aot),
# ARCH (default sm_90), STEPS (default 10), BASE (the built-in profile the
# calibration refines, default h100-80g).  Exit status: 0, 1 a step failed,
# 2 usage.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
die() { echo "calibrate.sh: $2" >&2; exit "$1"; }
(($# >= 2)) || die 2 "usage: bench/gpu/calibrate.sh pack DIR | run DIR | fit DIR LOGS"
mode=$1 dir=$2
nn=${NNSC:-$top/build/nnsc-aot}
spec=$top/examples/gpt2-124m.ini
steps=${STEPS:-10}
sets=(--set "cluster.device=${BASE:-h100-80g}" --set dims.B=8)
plans=(
  "m2|--set train.micro_batches=2"
  "m4|--set train.micro_batches=4"
  "rc-all|--set plan.recompute=h"
  "rc-half|--set plan.recompute=h.0-5"
  "t512|--set dims.T=512 --set dims.B=16"
  "bf16|--set train.dtype=bf16"
)
case $mode in
pack)
  [[ -x $nn ]] || die 2 "no compiler at $nn (./build.sh)"
  rm -rf "$dir" && mkdir -p "$dir/plans" || die 1 "cannot create $dir"
  "$nn" profile "$spec" --target cuda --arch "${ARCH:-sm_90}" --ranks 1 --pack "$dir/cal" --steps "$steps" -q \
    "${sets[@]}" || die 1 "profile --pack failed"
  for p in "${plans[@]}"; do
    IFS='|' read -r name ps <<<"$p"
    # shellcheck disable=SC2086  # ps: --set pairs without blanks
    "$nn" "$spec" --target cuda --arch "${ARCH:-sm_90}" -q -o "$dir/plans/$name" "${sets[@]}" $ps ||
      die 1 "building $name failed"
  done
  echo "$steps" >"$dir/steps"
  du -sh "$dir"
  ;;
run)
  [[ -x $dir/cal/run.sh ]] || die 2 "$dir is not packed (bench/gpu/calibrate.sh pack $dir)"
  dir=$(cd "$dir" && pwd)
  steps=$(cat "$dir/steps")
  mkdir -p "$dir/logs"
  fail=0
  "$dir/cal/run.sh" "$dir/logs/cal" || fail=1
  for p in "${plans[@]}"; do
    IFS='|' read -r name _ <<<"$p"
    (cd "$dir/plans/$name" && timeout 300 ./rank0 --steps "$steps" --quiet) >"$dir/logs/$name.log" 2>&1 ||
      { echo "calibrate.sh: $name failed: $(tail -n 2 "$dir/logs/$name.log")"; fail=1; }
    grep -h "step median" "$dir/logs/$name.log"
  done
  grep -h "step median" "$dir/logs/cal/"*.log
  for f in "$dir/logs/cal/"*.log; do cp "$f" "$dir/logs/cal-$(basename "$f")"; done   # (flat: fetched as files)
  exit $fail
  ;;
fit)
  (($# == 3)) || die 2 "usage: bench/gpu/calibrate.sh fit DIR LOGS"
  logs=$3
  [[ -x $nn ]] || die 2 "no compiler at $nn (./build.sh)"
  if [[ ! -d $logs/cal ]]; then   # the flat copies, as a device run fetches them
    mkdir -p "$dir/fetched/cal" && for f in "$logs"/cal-*.log; do cp "$f" "$dir/fetched/cal/${f##*/cal-}"; done
    for f in "$logs"/*.log; do [[ ${f##*/} == cal-* ]] || cp "$f" "$dir/fetched/"; done
    logs=$dir/fetched
  fi
  "$nn" profile "$spec" --target cuda --ranks 1 --from "$logs/cal" -o "$dir/gpu.ini" -q "${sets[@]}" ||
    die 1 "profile --from failed"
  sed -n 's/^; //p' "$dir/gpu.ini" | head -n 2
  echo
  echo "| plan | measured (median of $(cat "$dir/steps" 2>/dev/null || echo "$steps") steps) | predicted | predicted / measured |"
  echo "|---|---|---|---|"
  tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
  for p in "cal-one|" "cal-small|--set train.micro_batches=8" "${plans[@]}"; do
    IFS='|' read -r name ps <<<"$p"
    case $name in
    cal-one) log=$logs/cal/one-1.log ;;
    cal-small) log=$logs/cal/small-1.log ;;
    *) log=$logs/$name.log ;;
    esac
    got=$(sed -n 's/.*step median \([0-9.]*\) ms.*/\1/p' "$log" | tail -n 1)
    # shellcheck disable=SC2086
    "$nn" "$spec" -q -o "$tmp/$name" "${sets[@]}" $ps --set "cluster.device=$dir/gpu.ini" ||
      die 1 "building $name's estimate failed"
    est=$(sed -n 's/^estimate  step \([0-9.]*\) ms.*/\1/p' "$tmp/$name/plan.txt")
    [[ -n $got && -n $est ]] || die 1 "$name: no measured step ($log) or no estimate"
    printf '| %s%s | %s ms | %s ms | %s |\n' "$name" "${ps:+ ($ps)}" "$got" "$est" \
      "$(awk -v e="$est" -v g="$got" 'BEGIN { printf "%.3f", e / g }')"
  done
  ;;
*) die 2 "the mode is pack, run or fit, not '$mode'" ;;
esac
