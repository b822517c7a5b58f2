#!/usr/bin/env bash
# bench/gpu/checkop.sh pack DIR | run DIR -- `nnsc-aot check-op --target cuda`
# on a GPU machine that has no compiler's libraries (LLVM, Z3, inih): pack
# copies nnsc-aot, nnsc_custom.h and the shared libraries it needs but the C
# and C++ runtimes into DIR (185 MB; 44 MB as a tar.xz); run, on the
# GPU machine (needs the NVIDIA driver, CUDA 13's NVRTC and a C compiler),
# checks the CUDA kernels of tests/equiv's custom ops, then two broken copies
# of custom_swiglu.cu, which must fail: one ignores acc, one writes 3
# elements past its output.  docs/custom-ops.md ("The CUDA kernels").
#
#   bench/gpu/checkop.sh pack .gpu/co      # here
#   bench/gpu/checkop.sh run .gpu/co       # there, in a checkout
#
# Exit status: 0 the good kernels passed and the broken ones failed; 1 not; 2 usage.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
die() { echo "checkop.sh: $2" >&2; exit "$1"; }
(($# == 2)) || die 2 "usage: bench/gpu/checkop.sh pack DIR | run DIR"
mode=$1 dir=$2
if [[ $mode == pack ]]; then
  nn=${NNSC:-$top/build/nnsc-aot}
  [[ -x $nn ]] || die 2 "no compiler at $nn (./build.sh)"
  rm -rf "$dir" && mkdir -p "$dir/lib" "$dir/include" || die 1 "cannot create $dir"
  cp "$nn" "$dir/" && cp "$(dirname "$nn")/include/nnsc_custom.h" "$dir/include/" || die 1 "copying the compiler failed"
  ldd "$nn" | awk '$3 ~ /^\// {print $3}' | grep -vE '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libnvrtc)[.-]' |
    while read -r l; do cp -L "$l" "$dir/lib/" || exit 1; done || die 1 "copying the libraries failed"
  du -sh "$dir"
  exit 0
fi
[[ $mode == run ]] || die 2 "the mode is pack or run, not '$mode'"
[[ -x $dir/nnsc-aot ]] || die 2 "$dir is not packed (bench/gpu/checkop.sh pack $dir)"
dir=$(cd "$dir" && pwd)
export LD_LIBRARY_PATH=$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} NNSC_INCLUDE=$dir/include
nn=$dir/nnsc-aot
cd "$top" || exit 2
fail=0
for c in "custom.ini swiglu" "custom.ini swiglu_bwd" "custom_norm.ini rownorm" "custom_norm.ini sqsum" \
         "custom_grad.ini swiglu"; do
  read -r spec op <<<"$c"
  echo "==== check-op tests/equiv/$spec $op --target cuda"
  "$nn" check-op "tests/equiv/$spec" "$op" --target cuda || fail=1
done
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
for b in acc oob; do
  mkdir -p "$tmp/$b" && cp tests/equiv/custom.ini tests/equiv/custom_swiglu.c "$tmp/$b/"
done
sed 's/NNSC_PUT(c, y\[k\], s \* u\[k\]);/y[k] = s * u[k];/' tests/equiv/custom_swiglu.cu >"$tmp/acc/custom_swiglu.cu"
sed '0,/numel) {/s//numel + 3) {/' tests/equiv/custom_swiglu.cu >"$tmp/oob/custom_swiglu.cu"
echo "==== a CUDA kernel that ignores acc (must fail)"
"$nn" check-op "$tmp/acc/custom.ini" swiglu --target cuda | tee "$tmp/acc.out"
grep -q "^  FAIL swiglu \[cuda\]: acc = 1 adds into the outputs" "$tmp/acc.out" || { echo "checkop.sh: not caught"; fail=1; }
echo "==== a CUDA kernel that writes 3 elements past its output (must fail)"
"$nn" check-op "$tmp/oob/custom.ini" swiglu --target cuda | tee "$tmp/oob.out"
grep -q "^  FAIL cuda: .* wrote past the end of operand 3 'y1'" "$tmp/oob.out" || { echo "checkop.sh: not caught"; fail=1; }
grep -q "(a real GPU)" "$tmp/oob.out" || { echo "checkop.sh: the CUDA kernels did not run on a GPU"; fail=1; }
exit $fail
