#!/usr/bin/env bash
# bench/run_step.sh [STEPS] [rank flags...] -- one-rank GPT-2 small training
# steps end to end: compile examples/gpt2-124m.ini for one device at the
# benchmark shape (B = 4, T = 64: 256 tokens per step) with build/nnsc-aot,
# run STEPS steps (default 12) of rank 0, and print the step lines and the
# median and minimum step time of steps 2..STEPS (step 1 warms up).
#
#   bench/run_step.sh                 12 steps, threads from the default rule
#   bench/run_step.sh 20 --threads 1  one kernel thread
#
# Environment: BUILD (build directory, default build/), OUT (output
# directory, default a temporary one, removed at the end), NNSC_FLAGS
# (extra compiler options, e.g. --no-loops or --no-fuse for an A/B run).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
steps=${1:-12}
shift || true
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/nnsc-step-XXXXXX")}
[[ -n ${OUT:-} ]] || trap 'rm -rf "$out"' EXIT
# shellcheck disable=SC2086  # NNSC_FLAGS is a list of options
"$build/nnsc-aot" "$top/examples/gpt2-124m.ini" -o "$out" --set dims.T=64 ${NNSC_FLAGS:-} >/dev/null 2>&1
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs available; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: ${NNSC_FLAGS:+NNSC_FLAGS=\"$NNSC_FLAGS\" }bench/run_step.sh $steps $*"
"$out/rank0" --steps "$steps" "$@" | tee "$out/steps.txt"
awk '/^step /{for (i = 1; i < NF; i++) if ($i == "ms") t[n++] = $(i + 1)}
     END {m = 0; for (i = 1; i < n; i++) v[m++] = t[i];
          for (i = 0; i < m; i++) for (j = i + 1; j < m; j++) if (v[j] < v[i]) {x = v[i]; v[i] = v[j]; v[j] = x}
          if (m) printf "steps 2..%d: median %.1f ms, min %.1f ms\n", n, v[int(m / 2)], v[0]}' "$out/steps.txt"
