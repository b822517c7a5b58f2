#!/usr/bin/env bash
# bench/run_gpu.sh [STEPS] -- the GPU benchmarks of issue 5 in one command, on
# a machine with an NVIDIA GPU, its driver and the CUDA toolkit:
#
#   1. bench/gpu/bench_matmul.c: the CUDA target's matmul kernels (f32 and the
#      tensor-core variants) against cuBLAS at the shapes of one gpt2-124m
#      training step, every result checked;
#   2. bench/gpu/step.sh: gpt2-124m training on the GPU (median ms/step,
#      tokens/s, MFU; f32 and bf16) and gpt2-tiny GPU-vs-CPU equivalence;
#
# then a summary block ready to paste into docs/performance.md, section
# "GPU (CUDA target)" (which describes the method).  Without a GPU it stops
# at once with exit 2: nvidia-smi missing or listing no GPU, or bench_matmul
# / the rank finding no driver or no device.
#
#   bench/run_gpu.sh              B=8 T=1024, 20 steps
#   B=4 bench/run_gpu.sh 50
#
# Environment: BUILD (build directory, default build/; built with ./build.sh
# when it has no build yet, else brought up to date with cmake --build), OUT
# (output directory, default a new /tmp/nnsc-gpu-XXXXXX, kept: logs,
# matmul.md, step/summary.md, summary.md), CUDA_HOME (the toolkit, default
# /usr/local/cuda), B, T, DATA, PEAK_F32, PEAK_BF16 (see bench/gpu/step.sh),
# BENCH_MATMUL_ARGS (more bench_matmul flags, e.g. "--reps 50").
#
# Exit status: 0 every check passed; 1 something failed (the summary says
# what); 2 no GPU, no toolkit or no build.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
cuda=${CUDA_HOME:-/usr/local/cuda}
steps=${1:-20}
B=${B:-8}
T=${T:-1024}
die() { echo "run_gpu.sh: $2" >&2; exit "$1"; }

# ---- 0. a GPU, first of all
if ! command -v nvidia-smi >/dev/null 2>&1; then
  die 2 "no NVIDIA GPU: nvidia-smi is not installed; run this on a machine with an NVIDIA GPU and its driver"
fi
gpus=$(nvidia-smi -L 2>&1) || die 2 "no NVIDIA GPU: nvidia-smi -L failed: $(head -n 1 <<<"$gpus"); run this on a machine with an NVIDIA GPU"
grep -q '^GPU [0-9]' <<<"$gpus" || die 2 "no NVIDIA GPU: nvidia-smi -L lists none; run this on a machine with an NVIDIA GPU"
[[ -f $cuda/include/cublas_v2.h && -f $cuda/include/nvrtc.h && -e $cuda/lib64/libcublas.so && -e $cuda/lib64/libnvrtc.so ]] ||
  die 2 "no CUDA toolkit with NVRTC and cuBLAS at $cuda (set CUDA_HOME=DIR)"
out=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/nnsc-gpu-XXXXXX")}
mkdir -p "$out" || die 1 "cannot create $out"
echo "run_gpu.sh: output in $out"

# ---- 1. build the compiler and the benchmark
if [[ ! -f $build/CMakeCache.txt ]]; then
  [[ $build == "$top/build" ]] || die 2 "no build in $build: configure it first (or leave BUILD unset: ./build.sh makes build/)"
  echo "run_gpu.sh: no build yet: ./build.sh"
  "$top/build.sh" >"$out/build.log" 2>&1 || { tail -n 20 "$out/build.log" >&2; die 1 "./build.sh failed (log: $out/build.log)"; }
else
  cmake --build "$build" -j"$(nproc)" >"$out/build.log" 2>&1 ||
    { tail -n 20 "$out/build.log" >&2; die 1 "the build failed (log: $out/build.log)"; }
fi
mkdir -p "$build/bench"
bm=$build/bench/bench_matmul
cc -std=gnu11 -O2 -Wall -Wextra -Werror -I "$cuda/include" -I "$top/rtlib" "$top/bench/gpu/bench_matmul.c" \
  -o "$bm" -L "$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lnvrtc -lcublas -ldl -lm ||
  die 1 "compiling bench/gpu/bench_matmul.c failed"

# ---- 2. the kernel library, as the compiler emits it for gpt2-124m
"$build/nnsc-aot" "$top/examples/gpt2-124m.ini" -o "$out/kernels" --target cuda --emit-kernels -q \
  --set "dims.B=$B" --set "dims.T=$T" >"$out/kernels.log" 2>&1 ||
  { cat "$out/kernels.log" >&2; die 1 "nnsc-aot --target cuda --emit-kernels failed"; }
src=$out/kernels/kernels/nnsc_kernels.cu
[[ -f $src ]] || die 1 "nnsc-aot --emit-kernels wrote no $src"

date=$(date -u '+%Y-%m-%d %H:%M UTC')
smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
rev=$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git -C "$top" status --porcelain 2>/dev/null | head -n 1) ]] && rev+=" plus uncommitted changes"
echo "date: $date; gpu: $smi; nnsc-aot $rev"
fail=0

# ---- 3. matmuls against cuBLAS
echo
echo "==== bench_matmul (B=$B T=$T)"
# shellcheck disable=SC2086  # BENCH_MATMUL_ARGS is a list of flags
"$bm" "$src" --B "$B" --T "$T" --md "$out/matmul.md" ${BENCH_MATMUL_ARGS:-} | tee "$out/matmul.txt"
rc=${PIPESTATUS[0]}
((rc == 2)) && die 2 "bench_matmul cannot run here (message above): run this on a machine with an NVIDIA GPU"
((rc != 0)) && { fail=1; echo "run_gpu.sh: bench_matmul failed (exit $rc)" >&2; }

# ---- 4. training steps and the equivalence check
echo
echo "==== step.sh $steps (B=$B T=$T)"
B=$B T=$T BUILD=$build OUT=$out/step "$top/bench/gpu/step.sh" "$steps" | tee "$out/step.txt"
rc=${PIPESTATUS[0]}
((rc == 2)) && die 2 "step.sh cannot run here (message above): run this on a machine with an NVIDIA GPU"
((rc != 0)) && { fail=1; echo "run_gpu.sh: step.sh failed (exit $rc)" >&2; }

# ---- 5. the summary
{
  echo "Measured $date on $smi (nvidia-smi: name, driver, memory), nnsc-aot $rev."
  echo "Kernel library: $(sed -n 's/^library: //p' "$out/matmul.txt" | head -n 1);" \
    "reference: $(sed -n 's/^reference: //p' "$out/matmul.txt" | head -n 1)."
  echo "Command: \`bench/run_gpu.sh $steps\` (B=$B T=$T${DATA:+, DATA=$DATA})."
  echo
  echo "#### Matmul kernels against cuBLAS (bench/gpu/bench_matmul.c)"
  echo
  if [[ -s $out/matmul.md ]]; then cat "$out/matmul.md"; else echo "(no results: see $out/matmul.txt)"; fi
  echo
  echo "#### gpt2-124m training on one GPU (bench/gpu/step.sh)"
  echo
  if [[ -s $out/step/summary.md ]]; then cat "$out/step/summary.md"; else echo "(no results: see $out/step.txt)"; fi
  echo
  echo "Peaks: $(sed -n 's/^gpu: .*; peaks: //p' "$out/step.txt" | head -n 1)."
  ((fail)) && echo "Some checks FAILED: see $out/matmul.txt and $out/step.txt."
} >"$out/summary.md"
echo
echo "======== summary for docs/performance.md, \"GPU (CUDA target)\" (also in $out/summary.md) ========"
cat "$out/summary.md"
echo "========"
exit $fail
