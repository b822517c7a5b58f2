#!/usr/bin/env bash
# bench/frontend_scale.sh -- compile time of specs that are large in one
# way, for the table in docs/performance.md (issue 35, item 3; not a test).
#
# Three generated specs, each at the sizes given, built RUNS (3) times; a
# row gives the median wall time and the peak RSS of the median run
# (/usr/bin/time).  "how" is graph (--stop-after graph: the front end
# only) or -o (every phase: planning, lowering, code generation, linking).
#   dims N     examples/mlp.ini with N more [dims] lines (Dk = k + 1, every
#              tenth an expression over the one before), graph;
#   ops N      a chain of N ops on one device (a matmul, a bias_add, then
#              gelu and relu in turn, a [param] for each matmul and bias),
#              graph and -o;
#   repeat N   examples/mlp-block.ini with dims.L = N (its [block] repeated
#              N times: 4 ops and 2 params each), graph and -o.
# A build that runs past TIMEOUT seconds prints ">TIMEOUT".
#
#   bench/frontend_scale.sh                                   every case at its default sizes
#   CASES=dims DIMS="80000 500000" bench/frontend_scale.sh
#
# Environment: CASES ("dims ops repeat"), DIMS ("20000 80000 500000"),
# OPS ("1000 2000 10000"), REPEATS ("10000 30000 99999"), HOW ("graph -o"),
# RUNS (3), TIMEOUT (seconds per build, default 120), BUILD (build
# directory, default build/).  Needs GNU time (Debian's package time).
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

# median of the lines "SECONDS KB" on stdin: that line
median() { sort -g | awk '{ v[NR] = $0 } END { print v[int((NR + 1) / 2)] }'; }

# time_one LABEL SIZE HOW SPEC ARGS...: RUNS builds, one line with the median
time_one() {
  local label=$1 size=$2 how=$3 spec=$4
  shift 4
  [[ " ${HOW:-graph -o} " == *" $how "* ]] || return 0
  local r rc ts=()
  for ((r = 0; r < runs; r++)); do
    rm -rf "$work/out"
    timeout "$limit" /usr/bin/time -f '%e %M' -o "$work/time" "$nn" "$spec" "$@" >"$work/log" 2>&1
    rc=$?
    if ((rc == 124)); then printf '%-8s %8s  %-6s %10s %10s\n' "$label" "$size" "$how" ">$limit" -; return; fi
    if ((rc)); then printf '%-8s %8s  %-6s  exit %d: %s\n' "$label" "$size" "$how" "$rc" "$(tail -n 1 "$work/log")"; return; fi
    ts+=("$(tail -n 1 "$work/time")")
  done
  local m
  m=$(printf '%s\n' "${ts[@]}" | median)
  printf '%-8s %8s  %-6s %10.2f %10d\n' "$label" "$size" "$how" "${m% *}" "$((${m#* } / 1024))"
}

[[ -x /usr/bin/time ]] || { echo "frontend_scale.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "commit: $(git -C "$top" rev-parse --short HEAD 2>/dev/null)$(git -C "$top" diff --quiet 2>/dev/null || echo +changes)"
printf '%-8s %8s  %-6s %10s %10s\n' case size how seconds "peak MB"
for c in $cases; do
  case $c in
  dims)
    for n in ${DIMS:-20000 80000 500000}; do
      dims_spec "$n" >"$work/dims.ini"
      time_one dims "$n" graph "$work/dims.ini" --stop-after graph -q
    done ;;
  ops)
    for n in ${OPS:-1000 2000 10000}; do
      ops_spec "$n" >"$work/ops.ini"
      time_one ops "$n" graph "$work/ops.ini" --stop-after graph -q
      time_one ops "$n" -o "$work/ops.ini" -o "$work/out" -q
    done ;;
  repeat)
    for n in ${REPEATS:-10000 30000 99999}; do
      time_one repeat "$n" graph "$top/examples/mlp-block.ini" --set dims.L="$n" --stop-after graph -q
      time_one repeat "$n" -o "$top/examples/mlp-block.ini" --set dims.L="$n" -o "$work/out" -q
    done ;;
  *) echo "frontend_scale.sh: unknown case '$c' (dims, ops, repeat)" >&2; exit 2 ;;
  esac
done
