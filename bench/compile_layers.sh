#!/usr/bin/env bash
# bench/compile_layers.sh -- compile time of GPT-2 small by depth, with
# repeated layers as loops (the default) and unrolled (--no-loops), for the
# table in docs/performance.md ("Compile time: layers as loops"; not a test).
#
# Per depth L and mode it compiles
#     nnsc-aot examples/gpt2-124m.ini --devices 4 --set plan.policy=tp \
#         --set dims.L=L -o DIR -v [--no-loops]
# and prints the wall time, the codegen phase (LLVM: build, optimise, emit
# and link every rank, from -v), peak RSS (/usr/bin/time), the size of
# rank0 and the number of top-level instructions + bodies of rank 0
# (--dump=prog, a second run without -o).
#
#   bench/compile_layers.sh                       L = 12 24 48 96, both modes
#   LAYERS="12 24" MODES=loops bench/compile_layers.sh
#
# Environment: LAYERS (default "12 24 48 96"), MODES ("loops unrolled"),
# TIMEOUT (seconds per compile, default 600), BUILD (build directory,
# default build/), NNSC_JOBS (codegen threads; default the CPUs).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
layers=${LAYERS:-12 24 48 96}
modes=${MODES:-loops unrolled}
limit=${TIMEOUT:-600}
[[ -x /usr/bin/time ]] || { echo "compile_layers.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-layers-XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(git -C "$top" rev-parse --short HEAD 2>/dev/null)$(git -C "$top" diff --quiet 2>/dev/null || echo +changes)"
printf '%-6s %-9s %9s %10s %9s %12s %14s\n' layers mode "wall s" "codegen s" "peak MB" "rank0 bytes" "instrs+bodies"
for L in $layers; do
  for mode in $modes; do
    args=("$top/examples/gpt2-124m.ini" --devices 4 --set plan.policy=tp --set dims.L="$L")
    [[ $mode == unrolled ]] && args+=(--no-loops)
    rm -rf "$work/out"
    timeout "$limit" /usr/bin/time -f '%e %M' -o "$work/time" \
      "$build/nnsc-aot" "${args[@]}" -o "$work/out" -v >"$work/log" 2>&1
    rc=$?
    if ((rc == 124)); then
      printf '%-6s %-9s %9s\n' "$L" "$mode" ">$limit"
      continue
    elif ((rc)); then
      printf '%-6s %-9s failed (exit %d: %s)\n' "$L" "$mode" "$rc" "$(tail -n 1 "$work/log")"
      continue
    fi
    read -r secs kb <"$work/time"
    cg=$(awk '$2 == "codegen" && $3 ~ /^[0-9.]+$/ {printf "%.1f", $3 / 1000}' "$work/log")
    size=$(stat -c %s "$work/out/rank0")
    shape=$("$build/nnsc-aot" "${args[@]}" --dump=prog 2>/dev/null |
      awk '/^prog rank 1 /{exit} /^body /{b++} /^  (pro|pre|mb|post|epi|epre|eval|epost) /{n++} END{print n "+" b + 0}')
    printf '%-6s %-9s %9s %10s %9d %12d %14s\n' "$L" "$mode" "$secs" "$cg" $((kb / 1024)) "$size" "$shape"
  done
done
