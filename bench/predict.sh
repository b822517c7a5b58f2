#!/usr/bin/env bash
# bench/predict.sh [STEPS] -- the cost model against measured steps on the
# cpu target (issue 12's "real check"): predicted and measured step time of
# several plans of one model, their ranking, and the ratio.
#
# Calibration first: `nnsc-aot profile MODEL` (frontend/profile.c) measures
# the FLOP/s the generated kernels reach on the model's shapes, the
# shared-memory transport's bandwidth and its latency; every plan is then built
# with that profile (--set cluster.device=FILE) and run: plan.txt's
# estimate against the run's median step.
#
# gpt2-tiny at C = 256 (tasks of milliseconds), 2 ranks (this machine has
# 2 cores: one rank per core, NNSC_THREADS=1, so no rank waits for a core).
# The issue asks for 4 ranks; on 2 cores 4 ranks share cores and the
# measured times are not the plan's.
#
# Environment: BUILD (build directory, default build/).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
steps=${1:-15}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-predict-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: bench/predict.sh $steps"
spec=("$top/examples/gpt2-tiny.ini" --set dims.C=256 --set dims.B=16 --set train.lr=3e-4)
median() { grep -o 'step median [0-9.]* ms' "$1" | grep -o '[0-9.]*' | head -n 1; }
run() {   # run NAME: median step of its launch
  NNSC_THREADS=1 "$tmp/$1/launch" --steps "$steps" --quiet >"$tmp/$1.log" 2>&1
  median "$tmp/$1.log"
}
# calibration: nnsc-aot profile on this model (1 rank, dp 2, tp 2)
"$build/nnsc-aot" profile "${spec[@]}" -o "$tmp/cpu.ini" --steps "$steps" -q
echo "calibrated ($(sed -n 's/^; *1 rank/1 rank/p' "$tmp/cpu.ini")): $(grep -E '^(flops|link_bw|link_lat) ' "$tmp/cpu.ini" | tr '\n' ' ')"
cal=(--set "cluster.device=$tmp/cpu.ini")
plans=("dp2|--set plan.policy=dp --set train.micro_batches=2"
       "tp2|--set plan.policy=tp --set train.micro_batches=2"
       "pp2-1f1b-m4|--set plan.pp=2 --set train.micro_batches=4"
       "pp2-gpipe-m4|--set plan.pp=2 --set plan.schedule=gpipe --set train.micro_batches=4"
       "pp2-zbh1-m4|--set plan.pp=2 --set plan.schedule=zb-h1 --set train.micro_batches=4"
       "pp2-1f1b-m8|--set plan.pp=2 --set train.micro_batches=8"
       "pp2-interleaved-m4|--set plan.pp=2 --set plan.schedule=interleaved --set train.micro_batches=4")
: >"$tmp/rows"
for p in "${plans[@]}"; do
  name=${p%%|*}
  # shellcheck disable=SC2206
  args=(${p#*|})
  "$build/nnsc-aot" "${spec[@]}" -o "$tmp/$name" -q --devices 2 "${args[@]}" "${cal[@]}"
  est=$(sed -n 's/^estimate  step \([0-9.]*\) ms.*/\1/p' "$tmp/$name/plan.txt")
  got=$(run "$name")
  echo "$name $est $got" >>"$tmp/rows"
done
python3 - "$tmp/rows" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
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
print(f"Spearman rank correlation {rho:.2f}; {within} of {k} predictions within 25 % of the measured step")
PY
