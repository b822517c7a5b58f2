#!/usr/bin/env bash
# build.sh -- install what is missing, build, and optionally run every test.
#
#   ./build.sh             install missing Debian packages, build build/nnsc-aot
#   ./build.sh test        the same, then run the whole test suite (tests/run.sh)
#   ./build.sh san [test]  AddressSanitizer + UBSan build in build-san/ (and its tests)
#
# Environment: JOBS (parallel build jobs, default: cores), NNSC_NO_APT=1 (never
# call apt-get; fail with the list of what is missing instead).
set -euo pipefail

LLVM_VERSION=19            # the one place the LLVM version is pinned (19 or newer)
PACKAGES=(cmake make gcc libc6-dev libinih-dev libz3-dev "llvm-${LLVM_VERSION}-dev" python3 python3-numpy)

cd "$(dirname "$0")"
top=$(pwd)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ "${NNSC_NO_APT:-0}" == 1 ]]; then
    echo "build.sh: missing Debian packages: ${missing[*]}" >&2
    exit 1
  fi
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "build.sh: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

mode=build
dir=build
san=OFF
if [[ "${1:-}" == san ]]; then
  dir=build-san
  san=ON
  shift
fi
[[ "${1:-}" == test ]] && mode=test

jobs=${JOBS:-$(nproc)}
cmake -S "$top" -B "$top/$dir" -DNNSC_LLVM_VERSION="$LLVM_VERSION" -DNNSC_SANITIZE="$san" >/dev/null
cmake --build "$top/$dir" -j "$jobs"

if [[ $mode == test ]]; then
  exec "$top/tests/run.sh" "$top/$dir"
fi
