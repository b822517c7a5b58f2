#!/usr/bin/env bash
# bench/compile_scale.sh -- compile time and peak memory of GPT-shaped specs
# by layers x devices, for the table in docs/performance.md (not a test).
#
# The spec is examples/gpt2-124m.ini (C 768, 12 heads, vocabulary 50304) at
# T = 128 with L layers, compiled for N devices as a dp x tp mesh (tp 4 on 8
# devices, else tp 8; one sequence per data-parallel rank: B = dp) with -o,
# so every phase runs: planning, lowering, code generation and linking of
# every rank (the cuda target also compiles its kernels with NVRTC).
# Per row it prints the wall time and peak RSS (/usr/bin/time), the number
# of distinct programs in the executable (plan.txt's `programs` line: ranks
# of equal shape share one, passes/share.c) and the bytes of out/ as du
# counts them (out/rankK are hard links of out/rank: counted once).
#
#   bench/compile_scale.sh                      every row (about 6 minutes on 2 cores)
#   LAYERS="12 24" DEVICES="8 64" bench/compile_scale.sh
#
# Environment: LAYERS (default "12 24 48 96"), DEVICES ("8 64 256 1024"),
# TARGETS ("cpu cuda"), TIMEOUT (seconds per row, default 600), BUILD
# (build directory, default build/), NNSC_JOBS (codegen threads; default
# the CPUs).  Needs GNU time (/usr/bin/time, Debian's package time).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
layers=${LAYERS:-12 24 48 96}
devices=${DEVICES:-8 64 256 1024}
targets=${TARGETS:-cpu cuda}
limit=${TIMEOUT:-600}
[[ -x /usr/bin/time ]] || { echo "compile_scale.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-scale-XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(git -C "$top" rev-parse --short HEAD 2>/dev/null)$(git -C "$top" diff --quiet 2>/dev/null || echo +changes)"
printf '%-6s %-7s %-8s %-8s %10s %10s %9s %12s\n' target layers devices mesh seconds "peak MB" programs "out/ bytes"
for target in $targets; do
  for L in $layers; do
    for N in $devices; do
      tp=8
      ((N <= 8)) && tp=4
      dp=$((N / tp))
      out=$work/out
      rm -rf "$out"
      timeout "$limit" /usr/bin/time -f '%e %M' -o "$work/time" \
        "$build/nnsc-aot" "$top/examples/gpt2-124m.ini" -o "$out" -q --target "$target" --devices "$N" \
        --set plan.policy=hybrid --set plan.tp=$tp --set dims.B=$dp --set dims.T=128 --set dims.L="$L" \
        >"$work/log" 2>&1
      rc=$?
      if ((rc == 124)); then
        printf '%-6s %-7s %-8s %-8s %10s %10s %9s %12s\n' "$target" "$L" "$N" "${dp}x$tp" ">$limit" - - -
        continue
      elif ((rc)); then
        printf '%-6s %-7s %-8s %-8s %10s  (exit %d: %s)\n' "$target" "$L" "$N" "${dp}x$tp" failed "$rc" \
          "$(tail -n 1 "$work/log")"
        continue
      fi
      read -r secs kb <"$work/time"
      progs=$(sed -n 's/^programs  *\([0-9]*\) distinct.*/\1/p' "$out/plan.txt")
      bytes=$(du -sb "$out" | cut -f1)
      printf '%-6s %-7s %-8s %-8s %10s %10d %9d %12d\n' "$target" "$L" "$N" "${dp}x$tp" "$secs" $((kb / 1024)) \
        "$progs" "$bytes"
    done
  done
done
