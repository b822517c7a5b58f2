#!/usr/bin/env bash
# bench/predict.sh -- the cost model against measured steps on the cpu
# target (issue 12's "real check"): predicted and measured step time of
# several plans of one model, their ranking, and the ratio.
#
#   bench/predict.sh [STEPS]          here: calibrate, build, run, report
#   bench/predict.sh pack DIR [STEPS] the same in three stages, for a machine
#   bench/predict.sh plans DIR        without the compiler (more cores than
#   bench/predict.sh report DIR       this one): see below
#
# Calibration first: `nnsc-aot profile MODEL` (frontend/profile.c) measures
# the FLOP/s the generated kernels reach on the model's shapes, the
# shared-memory transport's bandwidth and its latency; every plan is then built
# with that profile (--set cluster.device=FILE) and run: plan.txt's
# estimate against the run's median step.
#
# gpt2-tiny at C = 256 (tasks of milliseconds), one kernel thread per rank
# (NNSC_THREADS=1), RANKS ranks (default 2: this machine has 2 cores, and
# ranks that share a core measure the sharing, not the plan).  RANKS=4
# needs 4 free cores: in stages, on a machine with them --
#
#   RANKS=4 bench/predict.sh pack .pred 30    here: DIR/cal (profile --pack)
#   .pred/cal/run.sh .pred/cal-logs           there (no compiler needed)
#   RANKS=4 bench/predict.sh plans .pred      here: fit DIR/cpu.ini from
#                                             DIR/cal-logs, build the plans
#   .pred/plans/run.sh .pred/plan-logs        there
#   RANKS=4 bench/predict.sh report .pred     here: the table
#
# or with one trip to that machine (the plans are fixed by their --set
# options, so the ranks do not depend on the profile; only plan.txt's
# estimate does):
#
#   RANKS=4 bench/predict.sh bundle .pred 30  here: DIR/cal, and DIR/plans
#                                             priced with the built-in cpu profile
#   .pred/run.sh                              there: DIR/cal-logs, DIR/plan-logs
#   RANKS=4 bench/predict.sh plans .pred      here: fit DIR/cpu.ini, rebuild the
#                                             plans with it, check every rank is
#                                             byte-identical to the one that ran,
#                                             keep the new plan.txt files
#   RANKS=4 bench/predict.sh report .pred     here: the table
#
# Environment: BUILD (build directory, default build/), RANKS (2 or 4), ROUNDS (default 3: each
# run that many times, round by round, calibration and plans alike; the medians), PLANS=spread (4
# ranks: five plans whose estimates lie 18 % or more apart instead of the nine; PLANS=probe:
# twelve plans at 1 to 16 micro-batches, the data for the calibration's fit; PLANS=all: both).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
nn=$build/nnsc-aot
ranks=${RANKS:-2}
spec=("$top/examples/gpt2-tiny.ini" --set dims.C=256 --set dims.B=16 --set train.lr=3e-4)
case $ranks in
  2) plans=("dp2|--set plan.policy=dp --set train.micro_batches=2"
            "tp2|--set plan.policy=tp --set train.micro_batches=2"
            "pp2-1f1b-m4|--set plan.pp=2 --set train.micro_batches=4"
            "pp2-gpipe-m4|--set plan.pp=2 --set plan.schedule=gpipe --set train.micro_batches=4"
            "pp2-zbh1-m4|--set plan.pp=2 --set plan.schedule=zb-h1 --set train.micro_batches=4"
            "pp2-1f1b-m8|--set plan.pp=2 --set train.micro_batches=8"
            "pp2-interleaved-m4|--set plan.pp=2 --set plan.schedule=interleaved --set train.micro_batches=4") ;;
  4) # five plans whose estimates (with the 4-rank profile of docs/performance.md) lie 18 % or
     # more apart, chosen before any was run: a ranking check beyond the runs' noise
     spread=("dp2-tp2|--set plan.policy=hybrid --set plan.dp=2 --set plan.tp=2 --set train.micro_batches=1"
             "tp2-pp2-1f1b-m2|--set plan.policy=hybrid --set plan.tp=2 --set plan.pp=2 --set train.micro_batches=2"
             "tp4-m4|--set plan.policy=tp --set train.micro_batches=4"
             "pp4-1f1b-m2|--set plan.pp=4 --set train.micro_batches=2"
             "tp4-m16|--set plan.policy=tp --set train.micro_batches=16")
     # how the step moves with the micro-batches at a fixed plan: dp 4 (the same all-reduces, smaller
     # kernels), tp 4 (more and smaller messages too), dp 2 x tp 2 and pp 4 -- the data a calibration
     # of the small-kernel rate and the per-message latency is fitted on
     probe=("dp4-m1|--set plan.policy=dp --set train.micro_batches=1"
              "dp4-m4|--set plan.policy=dp --set train.micro_batches=4"
              "dp4-m2|--set plan.policy=dp --set train.micro_batches=2"
              "tp4-m1|--set plan.policy=tp --set train.micro_batches=1"
              "tp4-m2|--set plan.policy=tp --set train.micro_batches=2"
              "tp4-m4|--set plan.policy=tp --set train.micro_batches=4"
              "tp4-m8|--set plan.policy=tp --set train.micro_batches=8"
              "tp4-m16|--set plan.policy=tp --set train.micro_batches=16"
              "dp2-tp2-m1|--set plan.policy=hybrid --set plan.dp=2 --set plan.tp=2 --set train.micro_batches=1"
              "dp2-tp2-m8|--set plan.policy=hybrid --set plan.dp=2 --set plan.tp=2 --set train.micro_batches=8"
              "pp4-1f1b-m4|--set plan.pp=4 --set train.micro_batches=4"
              "pp4-1f1b-m16|--set plan.pp=4 --set train.micro_batches=16")
     nine=("dp4|--set plan.policy=dp --set train.micro_batches=1"
            "tp4|--set plan.policy=tp --set train.micro_batches=1"
            "dp2-tp2|--set plan.policy=hybrid --set plan.dp=2 --set plan.tp=2 --set train.micro_batches=1"
            "dp2-pp2-1f1b-m4|--set plan.policy=hybrid --set plan.dp=2 --set plan.pp=2 --set train.micro_batches=4"
            "tp2-pp2-1f1b-m4|--set plan.policy=hybrid --set plan.tp=2 --set plan.pp=2 --set train.micro_batches=4"
            "pp4-1f1b-m4|--set plan.pp=4 --set train.micro_batches=4"
            "pp4-1f1b-m8|--set plan.pp=4 --set train.micro_batches=8"
            "pp4-gpipe-m8|--set plan.pp=4 --set plan.schedule=gpipe --set train.micro_batches=8"
            "pp4-zbh1-m8|--set plan.pp=4 --set plan.schedule=zb-h1 --set train.micro_batches=8")
     case ${PLANS:-} in
       spread) plans=("${spread[@]}") ;;
       probe) plans=("${probe[@]}") ;;
       all)   # both sets in one bundle (report PLANS=spread or probe on it for each alone)
         plans=("${spread[@]}")
         for p in "${probe[@]}"; do
           [[ " ${spread[*]%%|*} " == *" ${p%%|*} "* ]] || plans+=("$p")
         done ;;
       *) plans=("${nine[@]}") ;;
     esac ;;
  *) echo "predict.sh: RANKS must be 2 or 4" >&2; exit 1 ;;
esac
rounds=${ROUNDS:-3}
# median LOGDIR NAME: the run's median step (ms); with rounds (LOGDIR/r1, r2, ...) the median over them
median() {
  local f v=()
  if [[ -d $1/r1 ]]; then
    for f in "$1"/r*/"$2.log"; do v+=("$(grep -o 'step median [0-9.]* ms' "$f" | grep -o '[0-9.]*' | head -n 1)"); done
    printf '%s\n' "${v[@]}" | sort -g | awk '{ a[NR] = $1 } END { if (NR) print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
  else
    grep -o 'step median [0-9.]* ms' "$1/$2.log" | grep -o '[0-9.]*' | head -n 1
  fi
}

# build_plans DIR PROFILE STEPS: each plan into DIR/NAME with the profile, DIR/run.sh to run them
build_plans() {
  local dir=$1 prof=$2 steps=$3 p name args
  mkdir -p "$dir"
  {
    echo '#!/bin/sh'
    echo "# bench/predict.sh's plans ($ranks ranks): run.sh [LOGDIR] runs each (NNSC_THREADS=1, $steps steps)"
    echo 'set -e'
    echo 'here=$(cd "$(dirname "$0")" && pwd)'
    echo 'logs=${1:-$here}'
    echo 'mkdir -p "$logs"'
  } >"$dir/run.sh"
  for p in "${plans[@]}"; do
    name=${p%%|*}
    # shellcheck disable=SC2206
    args=(${p#*|})
    "$nn" "${spec[@]}" -o "$dir/$name" -q --devices "$ranks" "${args[@]}" --set "cluster.device=$prof"
    echo "NNSC_THREADS=1 \"\$here/$name/launch\" --steps $steps --quiet >\"\$logs/$name.log\" 2>&1" >>"$dir/run.sh"
  done
  echo 'echo "run.sh: logs in $logs"' >>"$dir/run.sh"
  chmod +x "$dir/run.sh"
}

# report PLANDIR LOGDIR: predicted (plan.txt) against measured (the logs)
report() {
  local p name est got
  : >"$tmp/rows"
  for p in "${plans[@]}"; do
    name=${p%%|*}
    est=$(sed -n 's/^estimate  step \([0-9.]*\) ms.*/\1/p' "$1/$name/plan.txt")
    got=$(median "$2" "$name")
    [[ -n $est && -n $got ]] || { echo "predict.sh: no estimate or no measured step for $name" >&2; exit 1; }
    echo "$name $est $got" >>"$tmp/rows"
  done
  : >"$tmp/rounds"
  if [[ -d $2/r1 ]]; then   # each round's ranking alone, and against the others': the runs' noise
    for r in "$2"/r*/; do
      for p in "${plans[@]}"; do name=${p%%|*}; printf '%s ' "$(median "$r" "$name")"; done >>"$tmp/rounds"
      echo >>"$tmp/rounds"
    done
  fi
  python3 - "$tmp/rows" "$tmp/rounds" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
rounds = [[float(x) for x in l.split()] for l in open(sys.argv[2]) if l.strip()]
rows = [(n, float(e), float(m)) for n, e, m in rows]
print(f"{'plan':22s} {'predicted ms':>12s} {'measured ms':>12s} {'ratio':>6s}")
for n, e, m in rows:
    print(f"{n:22s} {e:12.1f} {m:12.1f} {e / m:6.2f}")
pe = [n for n, _, _ in sorted(rows, key=lambda r: r[1])]
pm = [n for n, _, _ in sorted(rows, key=lambda r: r[2])]
def ranks(order):
    return {n: i for i, n in enumerate(order)}
a, b = ranks(pe), ranks(pm)
k = len(rows)
rho = 1 - 6 * sum((a[n] - b[n]) ** 2 for n in a) / (k * (k * k - 1))
within = sum(abs(e / m - 1) <= 0.25 for _, e, m in rows)
print("predicted order:", " < ".join(pe))
print("measured order: ", " < ".join(pm))
print(f"Spearman rank correlation {rho:.2f}; {within} of {k} predictions within 25 % of the measured step"
      + (f" (measured: the median of {len(rounds)} rounds)" if rounds else ""))
def spear(x, y):
    rx = {i: r for r, i in enumerate(sorted(range(len(x)), key=lambda i: x[i]))}
    ry = {i: r for r, i in enumerate(sorted(range(len(y)), key=lambda i: y[i]))}
    return 1 - 6 * sum((rx[i] - ry[i]) ** 2 for i in rx) / (k * (k * k - 1))
if rounds:
    est = [e for _, e, _ in rows]
    print("each round: predicted against it " + ", ".join(f"{spear(est, r):.2f}" for r in rounds)
          + "; within 25 % " + ", ".join(str(sum(abs(e / m - 1) <= 0.25 for e, m in zip(est, r))) for r in rounds))
    pairs = [spear(rounds[i], rounds[j]) for i in range(len(rounds)) for j in range(i + 1, len(rounds))]
    if pairs:
        print("rounds against each other: " + ", ".join(f"{p:.2f}" for p in pairs))
PY
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-predict-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); $ranks ranks"
case ${1:-} in
  pack)
    dir=${2:?predict.sh pack DIR [STEPS]}
    steps=${3:-15}
    mkdir -p "$dir"
    echo "$steps" >"$dir/steps"
    "$nn" profile "${spec[@]}" --ranks "$ranks" --pack "$dir/cal" --steps "$steps" -q
    echo "next: $dir/cal/run.sh $dir/cal-logs (where the ranks run), then RANKS=$ranks $0 plans $dir" ;;
  bundle)
    dir=${2:?predict.sh bundle DIR [STEPS]}
    steps=${3:-15}
    mkdir -p "$dir"
    echo "$steps" >"$dir/steps"
    "$nn" profile "${spec[@]}" --ranks "$ranks" --pack "$dir/cal" --steps "$steps" -q
    build_plans "$dir/plans" cpu "$steps"
    {
      echo '#!/bin/sh'
      echo "# bench/predict.sh bundle: $rounds rounds, each the calibration runs, then the plans ($ranks ranks):"
      echo "# the machine's drift shared by both, the medians over the rounds"
      echo 'set -e'
      echo 'here=$(cd "$(dirname "$0")" && pwd)'
      echo "for r in \$(seq $rounds); do"
      echo '  "$here/cal/run.sh" "$here/cal-logs/r$r"'
      echo '  "$here/plans/run.sh" "$here/plan-logs/r$r"'
      echo 'done'
    } >"$dir/run.sh"
    chmod +x "$dir/run.sh"
    echo "next: $dir/run.sh (where the ranks run), then RANKS=$ranks $0 plans $dir" ;;
  plans)
    dir=${2:?predict.sh plans DIR}
    "$nn" profile "${spec[@]}" --ranks "$ranks" --from "$dir/cal-logs" -o "$dir/cpu.ini" -q
    echo "calibrated ($(sed -n 's/^; *1 rank/1 rank/p' "$dir/cpu.ini")): $(grep -E '^(flops|weight_bw|link_bw|link_lat) ' "$dir/cpu.ini" | tr '\n' ' ')"
    if [[ -d $dir/plan-logs ]]; then
      # bundled: the plans already ran; price them again with the fitted
      # profile and prove the ranks that ran are the ones priced
      build_plans "$tmp/plans" "$dir/cpu.ini" "$(cat "$dir/steps")"
      for p in "${plans[@]}"; do
        name=${p%%|*}
        for r in "$tmp/plans/$name"/rank[0-9]*; do
          cmp -s "$r" "$dir/plans/$name/${r##*/}" ||
            { echo "predict.sh: $name/${r##*/} differs from the rank that ran" >&2; exit 1; }
        done
        cp "$tmp/plans/$name/plan.txt" "$dir/plans/$name/plan.txt"
      done
      echo "the plans rebuilt with $dir/cpu.ini are byte-identical to the ranks that ran; plan.txt updated"
      echo "next: RANKS=$ranks $0 report $dir"
      exit 0
    fi
    build_plans "$dir/plans" "$dir/cpu.ini" "$(cat "$dir/steps")"
    echo "next: $dir/plans/run.sh $dir/plan-logs (where the ranks run), then RANKS=$ranks $0 report $dir" ;;
  report)
    dir=${2:?predict.sh report DIR}
    echo "calibrated ($(sed -n 's/^; *1 rank/1 rank/p' "$dir/cpu.ini")): $(grep -E '^(flops|weight_bw|link_bw|link_lat) ' "$dir/cpu.ini" | tr '\n' ' ')"
    report "$dir/plans" "$dir/plan-logs" ;;
  *)
    steps=${1:-15}
    echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "command: bench/predict.sh $steps"
    # calibration: nnsc-aot profile on this model (RANKS copies of 1 rank at once, dp RANKS, tp RANKS)
    "$nn" profile "${spec[@]}" --ranks "$ranks" --rounds "$rounds" -o "$tmp/cpu.ini" --steps "$steps" -q
    echo "calibrated ($(sed -n 's/^; *1 rank/1 rank/p' "$tmp/cpu.ini")): $(grep -E '^(flops|weight_bw|link_bw|link_lat) ' "$tmp/cpu.ini" | tr '\n' ' ')"
    build_plans "$tmp/plans" "$tmp/cpu.ini" "$steps"
    for r in $(seq "$rounds"); do "$tmp/plans/run.sh" "$tmp/logs/r$r" >/dev/null; done
    report "$tmp/plans" "$tmp/logs" ;;
esac
