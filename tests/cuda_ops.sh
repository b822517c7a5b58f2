#!/usr/bin/env bash
# tests/cuda_ops.sh [--gpu] [ARGS...] -- the op test of the CUDA kernels:
# build/tests/test_cuda_ops runs every device kernel of rtlib/rt_kernels.h
# (and three generated fused chains) through rtlib's CUDA backend on random
# inputs, odd shapes and every acc / transpose / causal variant, and compares
# each result with the kernel's scalar CPU reference rt_ref_<name>
# (normalised MSE <= 1e-6), the bytes around every buffer and the inputs
# with what they were (docs/testing.md, "The CUDA op test").
#
#   on a GPU   with --gpu, or when `nvidia-smi -L` lists a GPU: against the
#              real driver.  This is the op test proper, and the first thing
#              to run on a machine with a GPU.
#   otherwise  under the driver double (build/tests/mock/libcuda.so.1, found
#              through LD_LIBRARY_PATH, as tests/cuda_mock.sh runs ranks).
#              The double runs every launch as the same rt_ref_<name> the
#              test compares with: the comparisons are exact by construction
#              and say NOTHING about the CUDA kernels.  What they check is the
#              host side -- argument packing, launch configurations and grids,
#              buffer bounds, the device state (lr and gradient scales, the
#              gradient norm, a bad target's error), uploads and downloads --
#              and that the process leaves no device memory allocated.
#
# ARGS go to test_cuda_ops: --arch sm_XY[,sm_XY...] (default: the cubin the
# default build, sm_80 and sm_90, would load on the device, else the device's
# own), --only KERNEL (the cases of kernels whose name contains KERNEL).
# The GPU is device 0: pick another with CUDA_VISIBLE_DEVICES.
#
# Skips (exit 77) without NVRTC (no cubins) and, when there is no GPU,
# without the driver double; with --gpu, not finding a GPU is a failure.
# Prints the test's lines and "N passed, M failed"; exits 1 on failure.
set -u
top=${NNSC_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
build=${NNSC_BUILD:-$top/build}
bin=$build/tests/test_cuda_ops
mock=$build/tests/mock

gpu=0
args=()
for a; do
  if [[ $a == --gpu ]]; then gpu=1; else args+=("$a"); fi
done
if [[ ! -x $bin ]]; then
  echo "FAIL  $bin is not built (cmake --build $build)"
  exit 1
fi

# the op test travels to GPU machines without LLVM (bench/gpu/ship.sh): it needs no libLLVM
# (the plain build's; a sanitized build links every library it is given)
if command -v ldd >/dev/null 2>&1 && ! ldd "$bin" 2>/dev/null | grep -q 'libasan' &&
  ldd "$bin" 2>/dev/null | grep -q 'libLLVM'; then
  echo "FAIL  $bin needs libLLVM ($(ldd "$bin" | grep -m1 libLLVM | awk '{print $1}')): it must run where only"
  echo "      the driver is (keep what it links from codegen/ free of LLVM calls; codegen/objfile.c holds them)"
  exit 1
fi

# ---- a GPU: the real driver
asked=$gpu
if ((!gpu)) && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  gpu=1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-cuda-ops-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if ((gpu)); then
  echo "mode: a real GPU ($( (nvidia-smi -L 2>/dev/null || echo 'nvidia-smi: none') | head -n 1)):" \
       "the CUDA kernels against their CPU references"
  # a kernel that hangs (a grid reduction waiting forever) ends here
  timeout 1800 "$bin" "${args[@]}" 2>&1 | tee "$tmp/out"
  rc=${PIPESTATUS[0]}
  if ((rc == 124)); then
    echo "FAIL  the op test did not finish in 30 minutes: the last case above hangs" \
         "(rerun it alone with --only KERNEL)"
    exit 1
  fi
  if ((rc == 77 && asked)); then
    echo "FAIL  --gpu: the op test could not run on a GPU here (the SKIP line above says why)"
    exit 1
  fi
  if ((rc == 0)) && ! grep -q '^device: .*(a real GPU)' "$tmp/out"; then
    echo "FAIL  the test did not run against the real driver (is $mock on LD_LIBRARY_PATH?)"
    exit 1
  fi
  exit "$rc"
fi

# ---- no GPU: the driver double
if [[ ! -f $mock/libcuda.so.1 ]]; then
  echo "SKIP  no GPU, and the CUDA driver double is not built (configure found no cuda.h and nccl.h under NNSC_CUDA_HOME)"
  exit 77
fi
echo "mode: no GPU -- under the CUDA driver double ($mock/libcuda.so.1)."
echo "      The double runs every launch as the scalar reference the test compares with:"
echo "      the comparisons check the HOST SIDE only (argument packing, launch configurations,"
echo "      bounds, the device state, uploads and downloads), NOT the CUDA kernels."
run_double() {   # the test's stdout shown and kept in $tmp/out, its stderr in $tmp/err; its status
  timeout 600 env -u NNSC_MOCK_CC -u NNSC_MOCK_SYNC -u NNSC_MOCK_PROTECT -u NNSC_MOCK_NODEV_INIT \
    -u NNSC_MOCK_DEVICES -u NNSC_MOCK_MEM \
    LD_LIBRARY_PATH="$mock${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NNSC_MOCK_STATS=1 \
    "$bin" "${args[@]}" 2>"$tmp/err" | tee "$tmp/out"
  return "${PIPESTATUS[0]}"
}
run_double
rc=$?
# A sanitized build: LeakSanitizer's own tracer thread sometimes crashes at exit ("Tracer caught
# signal 11 ... LeakSanitizer has encountered a fatal error"; seen in 2 of 9 runs at c8ecd65, after
# every case passed). That is the leak check failing to run, not a finding: run once more, so the
# leak check does run; a second such crash, or any other failure, stands.
if ((rc != 0)) && grep -q 'LeakSanitizer has encountered a fatal error' "$tmp/err" &&
  grep -q ' passed, 0 failed' "$tmp/out"; then
  echo "note  LeakSanitizer's tracer crashed at exit (a sanitizer failure, not a test result): running once more"
  run_double
  rc=$?
fi
# the driver's messages (a refused launch says why here), without the statistics
grep -v '^nnsc-mock-cuda:' "$tmp/err" | head -n 40
((rc == 77)) && exit 77
((rc == 124)) && echo "FAIL  the op test did not finish in 10 minutes under the double"
if ((rc == 0)); then
  stats=$(grep -m1 '^nnsc-mock-cuda:' "$tmp/err")
  if [[ $stats =~ launches=([1-9][0-9]*) && $stats == *" unfreed=0 sticky=0"* ]]; then
    echo "ok    the double ran ${BASH_REMATCH[1]} launches; every device allocation was freed, no sticky error"
  else
    echo "FAIL  the double's statistics: ${stats:-none} (want launches, unfreed=0 sticky=0)"
    rc=1
  fi
fi
exit "$rc"
