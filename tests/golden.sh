#!/usr/bin/env bash
# tests/golden.sh SPEC.ini [--update] -- golden test of IR dumps.
#
# The first line of a golden spec says what to dump and with which options:
#     ; golden: --devices 2 --dump=autograd,comm
# The expected output is SPEC.out beside it.  The test runs
#     nnsc-aot SPEC.ini <options>
# and diffs stdout with SPEC.out.  --update rewrites SPEC.out instead (a
# reviewed decision: commit the new .out with the change that explains it).
set -u
spec=$1
build=$(cd "${NNSC_BUILD:-$(dirname "$0")/../build}" && pwd)
exp=${spec%.ini}.out
opts=$(sed -n '1s/^; *golden: *//p' "$spec")
if [[ -z $opts ]]; then
  echo "$spec: first line must be '; golden: OPTIONS'" >&2
  exit 1
fi
cd "$(dirname "$spec")" || exit 1
# shellcheck disable=SC2086
got=$("$build/nnsc-aot" "$(basename "$spec")" $opts 2>&1)
rc=$?
if [[ ${2:-} == --update ]]; then
  printf '%s\n' "$got" >"$(basename "$exp")"
  echo "updated $exp"
  exit 0
fi
if [[ $rc -ne 0 ]]; then
  printf '%s\n' "$got"
  echo "nnsc-aot exited $rc" >&2
  exit 1
fi
diff -u "$(basename "$exp")" <(printf '%s\n' "$got")
