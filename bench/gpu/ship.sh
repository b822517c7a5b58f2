#!/usr/bin/env bash
# bench/gpu/ship.sh pack DIR | run DIR [STEPS] -- the GPU checks as the
# product is used: the ranks are compiled HERE (where nnsc-aot, LLVM and
# NVRTC are) and copied to a GPU machine that has only the driver, where
# they run without the compiler.
#
#   pack DIR   (the build machine) compiles into DIR:
#     cases/NAME/{cpu,cuda}/   one spec on one device for the cpu target and
#                              for the cuda target (sm_80,sm_90), the same
#                              build otherwise (table CASES below);
#     g124-f32, g124-bf16      gpt2-124m, B x T = 8 x 1024, for timing;
#     test_cuda_ops            the op test of every CUDA kernel (tests/cuda_ops.sh);
#     bench_matmul, kernels.cu the matmuls against cuBLAS (bench/gpu/bench_matmul.c).
#   run DIR [STEPS]   (the GPU machine; needs nvidia-smi, the driver, NVRTC
#                     and cuBLAS of CUDA 13, python3 with numpy) runs:
#     1. test_cuda_ops: each CUDA kernel against its CPU reference;
#     2. every case's cpu and cuda rank for STEPS steps (default 20) with
#        --save: the per-step losses and the final weights compared by
#        bench/gpu/compare.py (relative; bounds per case in CASES);
#     3. gpt2-124m f32 and bf16: median ms/step of steps 4..STEPS, tokens/s;
#     4. bench_matmul.
#   Results in $OUT (or DIR/results): log.txt, summary.md.
#   SHIP_PARTS (default 1234) picks the parts that run, e.g. SHIP_PARTS=12
#   for the kernels and the trainings only.
#
# Exit status: 0 every check passed; 1 a check failed; 2 usage, no GPU.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
die() { echo "ship.sh: $2" >&2; exit "$1"; }
(($# >= 2)) || die 2 "usage: bench/gpu/ship.sh pack DIR | run DIR [STEPS]"
mode=$1 dir=$2 steps=${3:-20}

# name | spec | --set options (shell words) | loss bound | weight bound.
# f32 bounds: the GPU sums in other orders than the CPU (grid reductions,
# atomics-free column sums), so losses and weights differ by rounding; bf16
# rounds the matmul inputs, and a rounding flipped by a different f32 sum
# grows over the steps (tests/equiv.list: bf16 vs f32 differ by ~1e-3).
CASES=(
  "mlp|examples/mlp.ini||1e-5|1e-4"
  "mlp-block|examples/mlp-block.ini||1e-5|1e-4"
  "gpt2-tiny|examples/gpt2-tiny.ini||1e-4|1e-3"
  "gpt2-tiny-text|examples/gpt2-tiny.ini|--set train.data=data/tinytext_train.bin --set train.lr_schedule=cosine --set train.warmup_steps=3 --set train.grad_clip=1.0|1e-4|1e-3"
  "gpt2-tiny-sgd|examples/gpt2-tiny.ini|--set train.optimizer=sgd --set train.lr=0.05|1e-4|1e-3"
  "gpt2-tiny-recompute|examples/gpt2-tiny.ini|--set plan.recompute=h|1e-4|1e-3"
  "gpt2-tiny-bf16|examples/gpt2-tiny.ini|--set train.dtype=bf16|1e-3|1e-2"
  "encdec|tests/equiv/encdec.ini||1e-4|1e-3"
  "recycle|tests/equiv/recycle.ini||1e-4|1e-3"
  "fanout|tests/equiv/fanout.ini||1e-4|1e-3"
  "classify|golden/classify-dp4.ini||1e-5|1e-4"
  "llama-tiny|examples/llama-tiny.ini||1e-4|1e-3"
  "llama-tiny-bf16|examples/llama-tiny.ini|--set train.dtype=bf16|1e-3|1e-2"
  "swiglu|tests/equiv/swiglu.ini||1e-4|1e-3"
  "gqa|tests/equiv/gqa.ini||1e-4|1e-3"
  "meanpool|tests/equiv/meanpool.ini||1e-4|1e-3"
  "xattn|tests/equiv/xattn.ini||1e-4|1e-3"
  "mixer|tests/equiv/mixer.ini||1e-4|1e-3"
  "qknorm|tests/equiv/qknorm.ini||1e-4|1e-3"
  "fused-qkv|tests/equiv/fused-qkv.ini||1e-4|1e-3"
  "fused-qkv-grouped|tests/equiv/fused-qkv-grouped.ini||1e-4|1e-3"
  "padmask|tests/equiv/padmask.ini||1e-4|1e-3"
  "attn-bias|tests/equiv/attn-bias.ini||1e-4|1e-3"
  "reshape|tests/equiv/reshape.ini||1e-4|1e-3"
  "t5-relpos|tests/equiv/t5-relpos.ini||1e-4|1e-3"
  "alibi|tests/equiv/decoder-nopos.ini|--set 'op h.attn.alibi=true'|1e-4|1e-3"
  "vocab-pad|examples/gpt2-tiny.ini|--set 'op loss.vocab=100' --set 'input targets.data=int 100'|1e-4|1e-3"
  "slice|tests/equiv/slice.ini||1e-4|1e-3"
  "custom|tests/equiv/custom.ini||1e-4|1e-3"
  "custom-grad|tests/equiv/custom_grad.ini||1e-4|1e-3"
  "custom-norm|tests/equiv/custom_norm.ini||1e-4|1e-3"
)

if [[ $mode == pack ]]; then
  nn=${NNSC:-$top/build/nnsc-aot}
  [[ -x $nn ]] || die 2 "no compiler at $nn (./build.sh)"
  cuda=${CUDA_HOME:-/usr/local/cuda}
  rm -rf "$dir" && mkdir -p "$dir/cases" || die 1 "cannot create $dir"
  for c in "${CASES[@]}"; do
    IFS='|' read -r name spec opts _ _ <<<"$c"
    eval "args=($opts)"   # opts: shell words, quoted where a value has a blank
    for t in cpu cuda; do
      "$nn" "$top/$spec" -o "$dir/cases/$name/$t" --devices 1 --target "$t" -q "${args[@]}" ||
        die 1 "building $name for $t failed"
      rm -f "$dir/cases/$name/$t/rank"   # rank0 is a hard link to it: one copy travels
    done
  done
  for dt in f32 bf16; do
    "$nn" "$top/examples/gpt2-124m.ini" -o "$dir/g124-$dt" --target cuda -q --set dims.B=8 --set dims.T=1024 \
      --set "train.dtype=$dt" || die 1 "building gpt2-124m $dt failed"
    rm -f "$dir/g124-$dt/rank"
  done
  "$nn" "$top/examples/gpt2-124m.ini" -o "$dir/kern" --target cuda --emit-kernels -q --set dims.B=8 \
    --set dims.T=1024 || die 1 "--emit-kernels failed"
  cp "$dir/kern/kernels/nnsc_kernels.cu" "$dir/kernels.cu" && rm -rf "$dir/kern"
  cp "$top/build/tests/test_cuda_ops" "$dir/" || die 1 "no build/tests/test_cuda_ops"
  cc -std=gnu11 -O2 -Wall -Wextra -Werror -I "$cuda/include" -I "$top/rtlib" "$top/bench/gpu/bench_matmul.c" \
    -o "$dir/bench_matmul" -L "$cuda/lib64" -Wl,-rpath,"$cuda/lib64" -lnvrtc -lcublas -ldl -lm ||
    die 1 "compiling bench_matmul failed"
  du -sh "$dir"
  exit 0
fi
[[ $mode == run ]] || die 2 "the mode is pack or run, not '$mode'"
[[ -d $dir/cases ]] || die 2 "$dir is not a packed directory (bench/gpu/ship.sh pack $dir)"
nvidia-smi -L 2>/dev/null | grep -q '^GPU ' || die 2 "no NVIDIA GPU here (nvidia-smi -L)"
res=${OUT:-$dir/results}
mkdir -p "$res"
fail=0
parts=${SHIP_PARTS:-1234}
part() { [[ $parts == *"$1"* ]]; }
sum=$res/summary.md
{
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1)"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); steps: $steps"
} | tee "$sum"

if part 1; then
echo "==== 1. test_cuda_ops on the GPU" | tee -a "$sum"
timeout 180 "$dir/test_cuda_ops" >"$res/cuda_ops.txt" 2>&1
rc=$?
grep -E '^device:|passed|FAIL' "$res/cuda_ops.txt" | head -n 40 | tee -a "$sum"
grep -q '^device: .*(a real GPU)' "$res/cuda_ops.txt" || { echo "FAIL test_cuda_ops did not run on the GPU" | tee -a "$sum"; fail=1; }
((rc == 0)) || { echo "FAIL test_cuda_ops exit $rc" | tee -a "$sum"; fail=1; }
fi

part 2 && {
echo "==== 2. one GPU against the cpu target, $steps steps (the same build otherwise)" | tee -a "$sum"
for c in "${CASES[@]}"; do
  IFS='|' read -r name _ _ lt wt <<<"$c"
  ok=1
  for t in cpu cuda; do
    d=$dir/cases/$name/$t
    (cd "$top" && timeout 60 "$d/rank0" --steps "$steps" --save "$res/$name-$t.safetensors") \
      >"$res/$name-$t.txt" 2>&1 || { ok=0; echo "FAIL $name: the $t rank failed: $(tail -n 2 "$res/$name-$t.txt")" | tee -a "$sum"; }
  done
  if ((ok)); then
    python3 "$top/bench/gpu/compare.py" "$name" "$res/$name-cpu.txt" "$res/$name-cuda.txt" \
      "$res/$name-cpu.safetensors" "$res/$name-cuda.safetensors" "$lt" "$wt" | tee -a "$sum"
    ((PIPESTATUS[0] == 0)) || fail=1
  else
    fail=1
  fi
  rm -f "$res/$name-"*.safetensors
done
}

part 3 && {
echo "==== 3. gpt2-124m B x T = 8 x 1024 on one GPU" | tee -a "$sum"
for dt in f32 bf16; do
  (cd "$top" && timeout 150 "$dir/g124-$dt/rank0" --steps "$steps" --data data/tinytext_train.bin) \
    >"$res/g124-$dt.txt" 2>&1 || { echo "FAIL gpt2-124m $dt: $(tail -n 2 "$res/g124-$dt.txt")" | tee -a "$sum"; fail=1; continue; }
  awk -v dt="$dt" '
    /^step [0-9]+\/[0-9]+ / { n++; if (n == 1) first = $4; last = $4; if (n <= 3) next
      for (i = 1; i < NF; i++) { if ($i == "ms") ms[m] = $(i + 1) + 0; if ($i == "tok/s") tk[m] = $(i + 1) + 0 }
      m++ }
    function med(a, k,  i, j, x) { for (i = 0; i < k; i++) for (j = i + 1; j < k; j++) if (a[j] < a[i]) { x = a[i]; a[i] = a[j]; a[j] = x }
      return k % 2 ? a[int(k / 2)] : (a[k / 2 - 1] + a[k / 2]) / 2 }
    END { if (m == 0) { print "FAIL gpt2-124m " dt ": no step lines"; exit 1 }
      printf "gpt2-124m %s: median of %d steps %.1f ms/step, %.0f tok/s; loss %s -> %s\n", dt, m, med(ms, m), med(tk, m), first, last }' \
    "$res/g124-$dt.txt" | tee -a "$sum"
  grep -m1 -i 'mfu' "$res/g124-$dt.txt" | tee -a "$sum"
done
}

if part 4; then
echo "==== 4. bench_matmul against cuBLAS" | tee -a "$sum"
timeout 150 "$dir/bench_matmul" "$dir/kernels.cu" --B 8 --T 1024 --md "$res/matmul.md" >"$res/matmul.txt" 2>&1 ||
  { echo "FAIL bench_matmul: $(tail -n 3 "$res/matmul.txt")" | tee -a "$sum"; fail=1; }
cat "$res/matmul.md" >>"$sum" 2>/dev/null
fi
((fail)) && echo "SOME CHECKS FAILED" | tee -a "$sum"
exit "$fail"
