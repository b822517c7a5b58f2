#!/usr/bin/env bash
# bench/frontend_scale.sh -- compile time of specs that are large in one
# way, for the table in docs/performance.md (issue 35, item 3; not a test).
#
# Three generated specs, each at the sizes given, timed as the median of
# RUNS (3) wall times:
#   (how: graph is --stop-after graph, -o a full build)
#   dims N     examples/mlp.ini with N more [dims] lines (Dk = k, every
#              tenth of them an expression over the one before), through
#              `--stop-after graph` (the front end only);
#   ops N      a chain of N ops (a matmul then bias_add / gelu / relu in
#              turn, one [param] per matmul, every eighth op a matmul) on
#              one device, built with -o (every phase, codegen included);
#   repeat N   examples/gpt2-tiny.ini with dims.L = N (a [block] with
#              repeat = N), C 8 and T 4, through --stop-after graph and
#              with -o.
# A case that runs past TIMEOUT seconds prints ">TIMEOUT".
#
#   bench/frontend_scale.sh                                   every case at its default sizes
#   CASES=dims DIMS="80000 500000" bench/frontend_scale.sh
#
# Environment: CASES ("dims ops repeat"), DIMS ("20000 80000 500000"),
# OPS ("1000 4000 10000"), REPEATS ("1000 10000 99999"), RUNS (3), TIMEOUT
# (seconds per build, default 120), BUILD (build directory, default build/).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
nn=$build/nnsc-aot
cases=${CASES:-dims ops repeat}
runs=${RUNS:-3}
limit=${TIMEOUT:-120}
work=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-fescale-XXXXXX")
trap 'rm -rf "$work"' EXIT

# dims_spec N: mlp.ini with N more dims
dims_spec() {
  awk -v n="$1" '
    { print }
    /^\[dims\]/ {
      for (k = 0; k < n; k++)
        if (k % 10 == 9) printf "D%d = D%d+1\n", k, k - 1
        else printf "D%d = %d\n", k, k + 1
    }' "$top/examples/mlp.ini"
}

# ops_spec N: a chain of N ops, one device
ops_spec() {
  awk -v n="$1" 'BEGIN {
    print "[model]\nname = chain\n[dims]\nB = 4\nD = 8"
    print "[input x]\nshape = B D\n[input y]\nshape = B D"
    prev = "x"
    for (k = 0; k < n; k++) {
      out = "t" k
      if (k % 8 == 0) {
        printf "[param w%d]\nshape = D D\n[op o%d]\nkind = matmul\nin = %s, w%d\nout = %s\n", k, k, prev, k, out
      } else if (k % 8 == 1) {
        printf "[param b%d]\nshape = D\ninit = zeros\n[op o%d]\nkind = bias_add\nin = %s, b%d\nout = %s\n", k, k, prev, k, out
      } else {
        printf "[op o%d]\nkind = %s\nin = %s\nout = %s\n", k, (k % 2 ? "relu" : "gelu"), prev, out
      }
      prev = out
    }
    printf "[op loss]\nkind = mse_loss\nin = %s, y\nout = loss\n", prev
    print "[train]\nloss = loss\nsteps = 1\n[cluster]\ndevices = 1"
  }'
}

# median of the numbers on stdin
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# time_one LABEL SIZE HOW SPEC ARGS...: RUNS builds, one line with the median
time_one() {
  local label=$1 size=$2 how=$3 spec=$4
  shift 4
  local r t rc ts=()
  for ((r = 0; r < runs; r++)); do
    rm -rf "$work/out"
    local t0=$(date +%s.%N)
    timeout "$limit" "$nn" "$spec" "$@" >"$work/log" 2>&1
    rc=$?
    t=$(echo "$(date +%s.%N) - $t0" | bc)
    if ((rc == 124)); then printf '%-8s %8s  %-14s %10s\n' "$label" "$size" "$how" ">$limit"; return; fi
    if ((rc)); then printf '%-8s %8s  %-14s  exit %d: %s\n' "$label" "$size" "$how" "$rc" "$(tail -n 1 "$work/log")"; return; fi
    ts+=("$t")
  done
  printf '%-8s %8s  %-14s %10.2f\n' "$label" "$size" "$how" "$(printf '%s\n' "${ts[@]}" | median)"
}

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(git -C "$top" rev-parse --short HEAD 2>/dev/null)$(git -C "$top" diff --quiet 2>/dev/null || echo +changes)"
printf '%-8s %8s  %-14s %10s\n' case size how "seconds"
for c in $cases; do
  case $c in
  dims)
    for n in ${DIMS:-20000 80000 500000}; do
      dims_spec "$n" >"$work/dims.ini"
      time_one dims "$n" graph "$work/dims.ini" --stop-after graph -q
    done ;;
  ops)
    for n in ${OPS:-1000 4000 10000}; do
      ops_spec "$n" >"$work/ops.ini"
      time_one ops "$n" graph "$work/ops.ini" --stop-after graph -q
      time_one ops "$n" -o "$work/ops.ini" -o "$work/out" -q
    done ;;
  repeat)
    for n in ${REPEATS:-1000 10000 99999}; do
      set -- --set dims.L="$n" --set dims.C=8 --set dims.T=4 --set dims.NH=2 --set dims.V=16
      time_one repeat "$n" graph "$top/examples/gpt2-tiny.ini" "$@" --stop-after graph -q
      time_one repeat "$n" -o "$top/examples/gpt2-tiny.ini" "$@" -o "$work/out" -q
    done ;;
  *) echo "frontend_scale.sh: unknown case '$c' (dims, ops, repeat)" >&2; exit 2 ;;
  esac
done
