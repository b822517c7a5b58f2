#!/usr/bin/env bash
# build.sh -- install what is missing, build, and optionally run every test.
#
#   ./build.sh             install missing Debian packages, build build/nnsc-aot
#   ./build.sh test        the same, then run the whole test suite (tests/run.sh)
#   ./build.sh san [test]  AddressSanitizer + UBSan build in build-san/ (and its tests)
#   ./build.sh install [PREFIX]  build, then install into PREFIX (default /usr/local):
#                          PREFIX/bin/nnsc-aot, PREFIX/lib/nnsc-aot, PREFIX/include/nnsc-aot,
#                          PREFIX/share/nnsc-aot (examples, golden.sh)
#   ./build.sh --help      this usage (also -h); nothing is installed or built
#
# Environment: JOBS (parallel build jobs, default: cores), NNSC_NO_APT=1 (never
# call apt-get; fail with the list of what is missing instead).
set -euo pipefail

LLVM_VERSION=19            # the one place the LLVM version is pinned (19 or newer)
PACKAGES=(cmake make gcc libc6-dev libinih-dev libz3-dev "llvm-${LLVM_VERSION}-dev" python3 python3-numpy librsvg2-bin)

# The usage text, on stdout.
usage() {
  cat <<EOF
usage: ./build.sh [san] [test]
       ./build.sh install [PREFIX]
       ./build.sh --help

  (nothing)   install missing Debian packages, build build/nnsc-aot
  test        the same, then run the whole test suite (tests/run.sh, ~8 min on 2 cores)
  san         AddressSanitizer + UBSan build in build-san/
  san test    the same, then the whole test suite against it
  install [PREFIX]  build, then install into PREFIX (default /usr/local): bin/nnsc-aot,
              lib/nnsc-aot/libnnsc_rt.a, include/nnsc-aot/nnsc_custom.h, share/nnsc-aot
              (examples, golden.sh); the installed nnsc-aot finds its runtime by its own path

environment:
  JOBS=N          parallel build jobs (default: the number of cores, $(nproc 2>/dev/null || echo "?") here)
  NNSC_NO_APT=1   never call apt-get: list what is missing and stop

packages: ${PACKAGES[*]}
EOF
}

# A bad command line: the message, a hint, exit 2.
bad_usage() {
  echo "build.sh: error: $1" >&2
  echo "  hint: ./build.sh --help lists what it accepts (none, test, san, san test, install [PREFIX])" >&2
  exit 2
}

# ---- the command line, before anything is installed or built
mode=build
dir=build
san=OFF
prefix=
case "$*" in
  "") ;;
  install) mode=install prefix=/usr/local ;;
  "install "*)
    (($# == 2)) || bad_usage "install takes one PREFIX, not '${*:2}'"
    mode=install prefix=$2
    case $prefix in /*) ;; *) prefix=$(pwd -P)/$prefix ;; esac ;;   # (relative to where build.sh was called)
  test) mode=test ;;
  san) dir=build-san san=ON ;;
  "san test") dir=build-san san=ON mode=test ;;
  -h | --help | help) usage; exit 0 ;;
  *)
    for a in "$@"; do
      case "$a" in
        test | san) ;;
        *) bad_usage "unknown argument '$a'" ;;
      esac
    done
    bad_usage "arguments in the wrong order or repeated: '$*'" ;;
esac

cd "$(dirname "$0")"
top=$(pwd)

# ---- Debian packages
if command -v dpkg-query >/dev/null 2>&1; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
else
  # not Debian: nothing to ask; CMake says what it cannot find
  echo "build.sh: no dpkg-query, so packages are not checked; the build needs: ${PACKAGES[*]}" >&2
  missing=()
fi
if ((${#missing[@]})); then
  sudo=""
  why=""
  if [[ "${NNSC_NO_APT:-0}" == 1 ]]; then
    why="NNSC_NO_APT=1"
  elif [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else why="not root and no sudo"; fi
  fi
  if [[ -n $why ]]; then
    {
      echo "build.sh: error: missing Debian packages: ${missing[*]}"
      echo "  ($why, so build.sh installs nothing)"
      echo "  hint: run as root, then ./build.sh again:"
      echo "    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
    } >&2
    exit 1
  fi
  echo "build.sh: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# ---- configure, build, test
jobs=${JOBS:-$(nproc)}
cmake -S "$top" -B "$top/$dir" -DNNSC_LLVM_VERSION="$LLVM_VERSION" -DNNSC_SANITIZE="$san" >/dev/null
cmake --build "$top/$dir" -j "$jobs"

# one line: what was built, and whether --target cuda can be used
nvrtc=$("$top/$dir/nnsc-aot" --version 2>/dev/null | sed -n 's/^\(NVRTC [0-9.]*\).*/\1/p')
echo "build.sh: built $dir/nnsc-aot and $dir/libnnsc_rt.a ($(if [[ $san == ON ]]; then echo "ASan+UBSan, "; fi)$(
  if [[ -n $nvrtc ]]; then echo "$nvrtc found: --target cpu and cuda"; else echo "NVRTC not found: --target cpu only"; fi))"

if [[ $mode == install ]]; then
  cmake --install "$top/$dir" --prefix "$prefix" >/dev/null
  echo "build.sh: installed $prefix/bin/nnsc-aot (runtime in $prefix/lib/nnsc-aot, header in $prefix/include/nnsc-aot, examples in $prefix/share/nnsc-aot)"
fi
if [[ $mode == test ]]; then
  exec "$top/tests/run.sh" "$top/$dir"
fi
