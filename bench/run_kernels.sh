#!/usr/bin/env bash
# bench/run_kernels.sh [bench_kernels flags] -- build rtlib (build/), compile
# bench/bench_kernels.c against build/libnnsc_rt.a, and run it: timings of
# the fast kernels at the shapes of one GPT-2 small training step, on 1 and
# 2 threads, with the machine's FMA peak.  Prints the date and the CPU
# first, then markdown tables (docs/performance.md keeps a copy).
#
#   bench/run_kernels.sh                  all figures, median of 9 runs
#   bench/run_kernels.sh --quick          median of 3 runs
#   bench/run_kernels.sh --threads 1,2,4  other thread counts
#
# Environment: BUILD (build directory, default build/), NNSC_ISA (a lower
# instruction set, as for rank programs).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$top/build}
if [[ ! -f $build/CMakeCache.txt ]]; then
  echo "run_kernels.sh: no build in $build: run ./build.sh first" >&2
  exit 1
fi
cmake --build "$build" --target nnsc_rt >/dev/null
mkdir -p "$build/bench"
cc -std=gnu11 -O2 -march=x86-64-v2 -Wall -Wextra -Werror -Wno-unused-parameter -pthread \
  -I "$top/rtlib" "$top/bench/bench_kernels.c" "$build/libnnsc_rt.a" -lm \
  -o "$build/bench/bench_kernels"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs available; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "command: bench/run_kernels.sh $*"
exec "$build/bench/bench_kernels" "$@"
