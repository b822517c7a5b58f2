#!/usr/bin/env bash
# bench/gpu/step.sh [STEPS] -- gpt2-124m training on one GPU, end to end:
# build examples/gpt2-124m.ini with --target cuda at B x T tokens per step
# (default 8 x 1024), run STEPS steps (default 20) of rank 0, drop the first
# 3 steps and print the median step time, tokens/s and the model FLOP
# utilisation (MFU) for f32 and, when the compiler accepts
# `--set train.dtype=bf16`, for bf16; then the single-GPU equivalence check of
# issue 5: gpt2-tiny on the GPU against the CPU target, per-step losses
# within 1e-4 relative.  Called by bench/run_gpu.sh; docs/performance.md,
# "GPU (CUDA target)", describes the method.
#
#   bench/gpu/step.sh            20 steps, B=8 T=1024, data/tinytext_train.bin
#   B=4 T=1024 bench/gpu/step.sh 50
#
# MFU = FLOP per step / median step time / peak, where FLOP per step is the
# compiler's count in plan.txt ("compute X GFLOP/step" per rank: 2 M K N per
# matmul, 4 B H T^2 D per attention, halved when causal and doubled for its
# backward, 4 per element for the other ops; codegen/emit.c and
# passes/lower.c) and the peak comes from the GPU's name (table below).
#
# Environment: BUILD (build directory, default build/), OUT (output directory,
# default a temporary one, kept and printed), B, T (tokens per step), DATA
# (token file, default data/tinytext_train.bin; DATA=synthetic for the
# model's synthetic batches), PEAK_F32 and PEAK_BF16 (FLOP/s, for a GPU the
# table lacks), EQUIV_WEIGHT_TOL (verify's --weight-tol for the final weights
# in the equivalence check; default: verify's own), NNSC_STEP_TARGET (cuda;
# `cpu` runs the same pipeline on the cpu target, only to test this script
# on a machine without a GPU: its figures are not GPU figures and no MFU is
# printed).
#
# Output: result lines on stdout, and in OUT the builds, each run's
# steps.txt and summary.md (a markdown table of the results and the
# equivalence line, which bench/run_gpu.sh puts in its summary).
#
# Exit status: 0 all ran and the equivalence holds; 1 something failed; 2 no
# GPU (the rank's "no CUDA driver" / "no CUDA device" message is shown) or no
# build.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$top/build}
steps=${1:-20}
B=${B:-8}
T=${T:-1024}
target=${NNSC_STEP_TARGET:-cuda}
data=${DATA:-$top/data/tinytext_train.bin}
drop=3   # warm-up steps left out of the medians
nn=$build/nnsc-aot

die() { echo "step.sh: $2" >&2; exit "$1"; }
if ! [[ $steps =~ ^[0-9]+$ ]] || ((steps <= drop)); then die 2 "STEPS must be a number above $drop, not '$steps'"; fi
[[ $B =~ ^[1-9][0-9]*$ && $T =~ ^[1-9][0-9]*$ ]] || die 2 "B and T must be positive integers (B=$B T=$T)"
[[ $target == cuda || $target == cpu ]] || die 2 "NNSC_STEP_TARGET is cuda (default) or cpu, not '$target'"
[[ -x $nn ]] || die 2 "no compiler at $nn: build it first (./build.sh, or bench/run_gpu.sh)"
if [[ $data != synthetic ]]; then
  [[ -r $data ]] || die 2 "DATA=$data cannot be read (DATA=synthetic for synthetic batches)"
  data=$(cd "$(dirname "$data")" && pwd)/$(basename "$data")   # the rank opens it: make it absolute
fi
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/nnsc-gpu-step-XXXXXX")}
mkdir -p "$out" || die 1 "cannot create $out"
rows=$out/rows.md     # result rows of the summary table
equiv=$out/equiv.md   # the equivalence line of the summary
: >"$rows"
: >"$equiv"

# ---- the GPU and its peak throughput
# Dense peaks from NVIDIA's datasheets ("NVIDIA H100 Tensor Core GPU",
# "NVIDIA H200 Tensor Core GPU", "NVIDIA A100 Tensor Core GPU"): BF16 on the
# tensor cores without sparsity (the datasheets print the 2:4-sparse figure,
# twice this) and FP32 on the CUDA cores (no tensor cores, no TF32).
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
peak_f32=${PEAK_F32:-} peak_bf16=${PEAK_BF16:-} peak_src="PEAK_F32 / PEAK_BF16 from the environment"
if [[ -z $peak_f32 || -z $peak_bf16 ]]; then
  peak_src="not in this script's table: set PEAK_F32 / PEAK_BF16"
  case "$gpu" in
    *H100*PCIe*) pf=51e12 pb=756e12 peak_src="NVIDIA datasheet, H100 PCIe" ;;
    *H100*NVL* | *H200*NVL*) pf='' pb='' ;;   # other clocks and power: not in this table
    *H100* | *H200*) pf=67e12 pb=989e12 peak_src="NVIDIA datasheet: H100 SXM; the H200 has the same" ;;
    *A100*) pf=19.5e12 pb=312e12 peak_src="NVIDIA datasheet, A100" ;;
    *) pf='' pb='' ;;
  esac
  peak_f32=${peak_f32:-$pf} peak_bf16=${peak_bf16:-$pb}
fi
echo "gpu: ${gpu:-unknown (no nvidia-smi)}; peaks: f32 ${peak_f32:-?} FLOP/s, bf16 ${peak_bf16:-?} FLOP/s (${peak_src})"
[[ $target == cpu ]] && echo "NNSC_STEP_TARGET=cpu: testing this script on the cpu target; these are NOT GPU figures"

# build_model DIR MODEL [--set ...]: compile MODEL for the target into DIR
build_model() {
  local dir=$1 model=$2
  shift 2
  "$nn" "$top/examples/$model" -o "$dir" --target "$target" -q "$@" >"$dir.build.log" 2>&1
}

# run_rank DIR STEPS: run DIR/rank0 for STEPS steps, its output in DIR/steps.txt;
# exits the script with 2 when the rank finds no driver or no device
run_rank() {
  local dir=$1 n=$2 rc
  "$dir/rank0" --steps "$n" >"$dir/steps.txt" 2>"$dir/stderr.txt"
  rc=$?
  if ((rc == 2)); then
    cat "$dir/stderr.txt" >&2
    die 2 "the rank cannot run here (exit 2, message above): run this on a machine with an NVIDIA GPU"
  fi
  if ((rc != 0)); then
    tail -n 5 "$dir/steps.txt" "$dir/stderr.txt" >&2
    echo "step.sh: $dir/rank0 failed with exit status $rc" >&2
    return 1
  fi
}

# median_of FIELD FILE: the median of the value after FIELD ("ms", "tok/s")
# over the step lines of FILE, leaving out the first $drop steps
median_of() {
  awk -v key="$1" -v drop="$drop" '
    /^step [0-9]+\/[0-9]+ / { n++; if (n <= drop) next
      for (i = 1; i < NF; i++) if ($i == key) v[m++] = $(i + 1) + 0 }
    END { if (m == 0) exit 1
          for (i = 0; i < m; i++) for (j = i + 1; j < m; j++) if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
          printf "%.6g\n", m % 2 ? v[int(m / 2)] : (v[m / 2 - 1] + v[m / 2]) / 2 }' "$2"
}

# gflop_per_step PLAN: the sum over ranks of "compute X GFLOP/step" in plan.txt
gflop_per_step() {
  awk '{ for (i = 2; i < NF; i++) if ($i == "compute" && $(i + 2) == "GFLOP/step") { s += $(i + 1); n++ } }
       END { if (n == 0) exit 1; printf "%.6g\n", s }' "$1"
}

# bench_dtype DTYPE: build, run and report gpt2-124m in DTYPE (f32 or bf16)
bench_dtype() {
  local dt=$1 dir=$out/gpt2-124m-$1 sets=(--set "dims.B=$B" --set "dims.T=$T")
  [[ $data != synthetic ]] && sets+=(--set "train.data=$data")
  [[ $dt == bf16 ]] && sets+=(--set "train.dtype=bf16")
  mkdir -p "$dir"
  if ! build_model "$dir" gpt2-124m.ini "${sets[@]}"; then
    if [[ $dt == bf16 ]] && grep -q "dtype" "$dir.build.log"; then
      echo "bf16: skipped: $nn does not accept --set train.dtype=bf16 yet: $(head -n 1 "$dir.build.log")"
      echo "| bf16 | skipped: the compiler does not accept train.dtype=bf16 yet | | | | |" >>"$rows"
      return 0
    fi
    cat "$dir.build.log" >&2
    echo "step.sh: building gpt2-124m ($dt) failed (log above)" >&2
    return 1
  fi
  run_rank "$dir" "$steps" || return 1
  local ms tps gf
  if ! ms=$(median_of ms "$dir/steps.txt") || ! tps=$(median_of tok/s "$dir/steps.txt"); then
    echo "step.sh: no step lines in $dir/steps.txt" >&2
    return 1
  fi
  gf=$(gflop_per_step "$dir/plan.txt") || { echo "step.sh: no 'compute X GFLOP/step' in $dir/plan.txt" >&2; return 1; }
  local peak=$peak_f32
  [[ $dt == bf16 ]] && peak=$peak_bf16
  local line mfu
  line=$(awk -v ms="$ms" -v gf="$gf" 'BEGIN { printf "%.4g TFLOP/s achieved (%.6g GFLOP/step)", gf / ms, gf }')
  mfu="?"
  if [[ $target == cuda && -n $peak ]]; then
    mfu=$(awk -v ms="$ms" -v gf="$gf" -v p="$peak" 'BEGIN { printf "%.1f%%", 100 * gf * 1e9 / (ms * 1e-3) / p }')
    line+=", MFU $mfu of the $dt peak ($(awk -v p="$peak" 'BEGIN { printf "%g", p / 1e12 }') TFLOP/s)"
  elif [[ $target == cuda ]]; then
    line+=", MFU: unknown peak for '${gpu:-?}' (set PEAK_F32 / PEAK_BF16 in FLOP/s)"
  fi
  echo "result: $dt B=$B T=$T: median of steps $((drop + 1))..$steps: $ms ms/step, $tps tok/s; $line"
  printf '| %s | %s | %s | %s | %s | %s |\n' "$dt" "$B x $T" "$ms" "$tps" \
    "$(awk -v ms="$ms" -v gf="$gf" 'BEGIN { printf "%.4g", gf / ms }')" "$mfu" >>"$rows"
}

# equivalence: gpt2-tiny on one GPU against the CPU target, losses within 1e-4
equivalence() {
  local tol=1e-4 dir=$out/equiv
  mkdir -p "$dir"
  # verify does it when it takes --target (listed under "compile and verify" in --help)
  if [[ $target == cuda ]] &&
    "$nn" --help 2>&1 | sed -n '/^options (compile and verify)/,/^options (verify only)/p' | grep -q -- '--target'; then
    echo "equivalence: $nn verify examples/gpt2-tiny.ini --target cuda --steps $steps --loss-tol $tol"
    local wt=()
    [[ -n ${EQUIV_WEIGHT_TOL:-} ]] && wt=(--weight-tol "$EQUIV_WEIGHT_TOL")
    "$nn" verify "$top/examples/gpt2-tiny.ini" --target cuda --devices 1 --steps "$steps" --loss-tol "$tol" \
      "${wt[@]}" --keep "$dir/verify" >"$dir/verify.txt" 2>&1
    local rc=$?
    tail -n 4 "$dir/verify.txt"
    if ((rc == 0)); then
      echo "Equivalence: gpt2-tiny, 1 GPU vs the cpu target, $steps steps: nnsc-aot verify OK (per-step losses within $tol relative)." >>"$equiv"
      return 0
    fi
    echo "Equivalence: gpt2-tiny, 1 GPU vs the cpu target, $steps steps: nnsc-aot verify FAILED (exit $rc)." >>"$equiv"
    echo "step.sh: verify failed (exit $rc): $dir/verify.txt" >&2
    return 1
  fi
  # otherwise: both builds, both runs, the step lines compared here
  echo "equivalence: gpt2-tiny, $target vs cpu, $steps steps, step losses compared by this script"
  mkdir -p "$dir/cpu" "$dir/$target-run"
  "$nn" "$top/examples/gpt2-tiny.ini" -o "$dir/cpu" -q >"$dir/cpu.build.log" 2>&1 ||
    { cat "$dir/cpu.build.log" >&2; return 1; }
  build_model "$dir/$target-run" gpt2-tiny.ini || { cat "$dir/$target-run.build.log" >&2; return 1; }
  run_rank "$dir/cpu" "$steps" || return 1
  run_rank "$dir/$target-run" "$steps" || return 1
  awk -v tol="$tol" '
    BEGIN { num = "^[-+]?[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$" }   # a finite loss (not nan, inf)
    FNR == 1 { f++ }
    /^step [0-9]+\/[0-9]+ loss / { split($2, s, "/"); l[f, s[1]] = $4; n[f] = s[1] }
    END {
      if (n[1] == 0 || n[1] != n[2]) { printf "steps logged: %d vs %d\n", n[1], n[2]; exit 1 }
      worst = 0; bad = 0
      for (k = 1; k <= n[1]; k++) {
        a = l[1, k]; b = l[2, k]
        if (a !~ num || b !~ num) { bad++; printf "step %d: loss %s (cpu) vs %s: not a number\n", k, a, b; continue }
        d = a - b; if (d < 0) d = -d
        m = a < 0 ? -a : a; r = m > 0 ? d / m : d
        if (!(r <= tol)) { bad++; printf "step %d: loss %s (cpu) vs %s: relative difference %.3g > %g\n", k, a, b, r, tol }
        if (r > worst) worst = r
      }
      printf "losses of %d steps: largest relative difference %.3g (tolerance %g): %s\n", n[1], worst, tol, bad ? "MISMATCH" : "OK"
      exit bad ? 1 : 0
    }' "$dir/cpu/steps.txt" "$dir/$target-run/steps.txt"
  local rc=$?
  echo "Equivalence: gpt2-tiny, 1 $target vs the cpu target, $steps steps: per-step losses $( ((rc == 0)) && echo "within $tol relative: OK" || echo "differ by more than $tol relative: MISMATCH" ) (compared by bench/gpu/step.sh)." >>"$equiv"
  return $rc
}

echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); output in $out"
fail=0
bench_dtype f32 || fail=1
bench_dtype bf16 || fail=1
equivalence || fail=1
{
  echo "| dtype | tokens per step (B x T) | median ms/step | tokens/s | achieved TFLOP/s | MFU |"
  echo "|---|---|---|---|---|---|"
  cat "$rows"
  echo
  cat "$equiv"
} >"$out/summary.md"
status="done"
((fail)) && status=FAILED
echo "step.sh: $status (logs and summary.md in $out)"
exit $fail
