#!/usr/bin/env bash
# tests/scaling.sh -- compile time grows linearly in ops x devices (issue 10).
#
# Builds examples/gpt2-tiny.ini at a size and at four times that size, once
# quadrupling the layers and once the devices (and examples/mlp.ini with 4x
# the [dims] lines: the front end's name lookups), and reads the per-pass times
# `nnsc-aot -v` prints.  No output directory: --dump=graph prints the
# (small) graph, and every pass up to and including lowering and fusion runs
# for every rank, without code generation.  A linear pass takes 4 to 6x as
# long at four times the size (its arrays and tables outgrow the caches as
# they grow); a quadratic one 16x.  The test fails when a pass takes more
# than LIMIT (8) times as long: growth faster than size^1.5.  (It doubled
# the sizes with a limit of 3x until 2026-12-01: the schedule pass, linear
# but for the caches, measured 2.3 to 2.9x on a quiet 2-core machine and
# 3.13x once in CI, too close to the limit to tell.)
#
# Robust on a loaded, shared machine: each size is built once to warm up
# (not counted), then RUNS (3) times, and each pass keeps its fastest time
# (load only ever adds time).  A comparison over the limit is measured again
# (RUNS more builds of each size) before it fails.  A pass faster than MIN_MS
# (20 ms) at the smaller size is too quick to time against the scheduler's
# noise: it is summed with the passes after it (in pipeline order) until the
# sum reaches MIN_MS, and the table says which passes were summed.  Passes
# that do not depend on the grown quantity (frontend and autograd do not
# see the devices) are timed all the same: they stay near 1x.
#
#   tests/scaling.sh                    the three quadruplings, a table each (~45 s)
#   LIMIT=10 RUNS=5 tests/scaling.sh    looser, more runs
. "$(dirname "$0")/lib.sh" scaling
# The sanitizer build's timings measure ASan's shadow memory as much as the
# passes (schedule grew 2.65x there, 2.3x in the optimised build): this
# test times the optimised compiler only, which the plain suite runs.
if grep -q '^NNSC_SANITIZE:[A-Z]*=ON' "$build/CMakeCache.txt" 2>/dev/null; then
  echo "SKIP: a sanitizer build (timings not meaningful); the plain suite runs this test"
  exit 77
fi

limit=${LIMIT:-8}
runs=${RUNS:-3}
min_ms=${MIN_MS:-20}
spec=$top/examples/gpt2-tiny.ini
# the passes checked, in pipeline order (the outline pass and codegen are not)
passes=(frontend autograd plan comm schedule lower)

# build NAME [SPEC.ini] ARGS...: one build (of $spec unless a spec comes
# first), its per-pass times ("pass ms" lines) appended to $tmp/NAME.all
build() {
  local name=$1 sp=$spec
  shift
  if [[ ${1:-} == *.ini ]]; then sp=$1; shift; fi
  if ! timeout 300 "$nn" "$sp" -v --dump=graph "$@" >/dev/null 2>"$tmp/$name.err"; then
    no "nnsc-aot $* failed: $(tail -n 3 "$tmp/$name.err")"
    return 1
  fi
  sed -n 's/^nnsc-aot: \([a-z]*\) *\([0-9.]*\) ms$/\1 \2/p' "$tmp/$name.err" >>"$tmp/$name.all"
}

# times NAME ARGS...: a build to warm up (not counted: the first build after
# one of the other size pays for its memory), then RUNS builds; the fastest
# time per pass so far into $tmp/NAME
times() {
  local name=$1
  shift
  build warm "$@" || return 1
  for ((r = 0; r < runs; r++)); do build "$name" "$@" || return 1; done
  awk '!($1 in m) || $2 < m[$1] { m[$1] = $2 } END { for (p in m) print p, m[p] }' "$tmp/$name.all" >"$tmp/$name"
}

# table TITLE LABEL_SMALL LABEL_BIG: the table of $tmp/small against
# $tmp/big; exits 1 when a pass (or sum) of MIN_MS or more grows past LIMIT
table() {
  echo
  echo "$1 (fastest of $2 runs, ms)"
  awk -v list="${passes[*]}" -v lim="$limit" -v minms="$min_ms" -v ls="$3" -v lb="$4" '
    FILENAME == ARGV[1] { a[$1] = $2; next }
    { b[$1] = $2 }
    END {
      n = split(list, p, " ")
      printf "  %-28s %10s %10s %7s\n", "passes", ls, lb, "ratio"
      bad = 0; g = ""; sa = 0; sb = 0
      for (i = 1; i <= n; i++) {
        if (!(p[i] in a) || !(p[i] in b)) { printf "  %s: no time printed\n", p[i]; bad = 1; continue }
        g = g (g == "" ? "" : "+") p[i]; sa += a[p[i]]; sb += b[p[i]]
        # close the group once it is long enough to time, or at the end
        if (sa < minms && i < n) continue
        r = sa > 0 ? sb / sa : 0
        flag = r > lim ? "  > " lim : ""
        if (sa < minms) flag = flag "  (under " minms " ms: not checked)"
        printf "  %-28s %10.1f %10.1f %7.2f%s\n", g, sa, sb, r, flag
        if (r > lim && sa >= minms) bad = 1
        g = ""; sa = 0; sb = 0
      }
      exit bad
    }' "$tmp/small" "$tmp/big"
}

# compare TITLE LABEL_SMALL LABEL_BIG SMALL_ARGS -- BIG_ARGS: measure both
# sizes, print the table, once more with more runs if a pass is over the
# limit, and count the check
compare() {
  local title=$1 ls=$2 lb=$3 small=() big=()
  shift 3
  while [[ $1 != -- ]]; do small+=("$1"); shift; done
  shift
  big=("$@")
  rm -f "$tmp/small.all" "$tmp/big.all"
  times small "${small[@]}" && times big "${big[@]}" || return
  if ! table "$title" "$runs" "$ls" "$lb"; then
    echo "  over ${limit}x: measuring again"
    times small "${small[@]}" && times big "${big[@]}" || return
    if ! table "$title" $((2 * runs)) "$ls" "$lb"; then
      no "$title: a pass grows more than ${limit}x (table above)"
      return
    fi
  fi
  ok "$title: no pass grows more than ${limit}x"
}

# quadrupling the layers: dp 2 x tp 4 on 8 devices, 128 and 512 layers
common=(--devices 8 --set plan.policy=hybrid --set plan.tp=4 --set dims.B=16)
compare "layers 128 -> 512 (gpt2-tiny, 8 devices: dp 2 x tp 4)" "L=128" "L=512" \
  "${common[@]}" --set dims.L=128 -- "${common[@]}" --set dims.L=512

# quadrupling the devices: dp 8 -> 32 x tp 4 (one sequence per micro-batch and
# data-parallel rank), 32 layers
common=(--set plan.policy=hybrid --set plan.tp=4 --set dims.L=32)
compare "devices 32 -> 128 (gpt2-tiny, 32 layers, dp 8 -> 32 x tp 4)" "N=32" "N=128" \
  "${common[@]}" --devices 32 --set dims.B=64 -- "${common[@]}" --devices 128 --set dims.B=256

# quadrupling the [dims] lines: 50000 -> 200000 named sizes before mlp.ini's
# (the front end looks dims up by name: it took 9.6 s for 80000 lines when it
# scanned them)
for n in 50000 200000; do
  awk -v n="$n" '{ print } /^\[dims\]/ { for (k = 0; k < n; k++) printf "D%d = %d\n", k, k + 1 }' \
    "$top/examples/mlp.ini" >"$tmp/dims$n.ini"
done
compare "[dims] lines 50000 -> 200000 (mlp.ini)" "50000" "200000" "$tmp/dims50000.ini" -- "$tmp/dims200000.ini"
echo
echo "$pass passed, $fail failed"
((fail == 0))
