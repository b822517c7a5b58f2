#!/usr/bin/env bash
# tests/golden.sh SPEC.ini [--update] -- golden test of IR dumps, for the
# suite's golden/*.ini and for a user's own model (docs/testing.md,
# "Golden files").
#
# The first line of a golden spec says what to dump and with which options:
#     ; golden: --devices 2 --dump=autograd,comm
# The expected output is SPEC.out beside it.  The test runs
#     nnsc-aot SPEC.ini <options>
# in SPEC's folder and diffs its output (stdout and stderr) with SPEC.out:
# exit 0 when they agree, 1 when they differ or the compile fails.
# --update records the output as SPEC.out instead (a reviewed decision:
# commit the new .out with the change that explains it); a compile that
# fails is never recorded (exit 1, SPEC.out left as it was).
# nnsc-aot is $NNSC_BUILD/nnsc-aot when NNSC_BUILD is set, else the build/
# beside this script when it has one, else the nnsc-aot on PATH.
# Exit 2: bad usage (no spec, no '; golden:' line, an unknown argument).
set -u
usage() {
  echo "usage: tests/golden.sh SPEC.ini [--update]" >&2
  echo "  hint: SPEC.ini's first line names the options, e.g. '; golden: --devices 2 --dump=plan' (docs/testing.md)" >&2
  exit 2
}
(($# == 1 || $# == 2)) || usage
spec=$1
update=0
if (($# == 2)); then [[ $2 == --update ]] || { echo "tests/golden.sh: unknown argument '$2'" >&2; usage; }; update=1; fi
[[ -f $spec && -r $spec ]] || { echo "tests/golden.sh: $spec: no such file" >&2; usage; }
here=$(dirname "$0")
if [[ -n ${NNSC_BUILD:-} ]]; then nn=$(cd "$NNSC_BUILD" && pwd)/nnsc-aot
elif [[ -x $here/../build/nnsc-aot ]]; then nn=$(cd "$here/../build" && pwd)/nnsc-aot
else nn=$(command -v nnsc-aot) || { echo "tests/golden.sh: no nnsc-aot: set NNSC_BUILD or put it on PATH" >&2; exit 2; }
fi
exp=${spec%.ini}.out
opts=$(sed -n '1s/^; *golden: *//p' "$spec")
if [[ -z $opts ]]; then
  echo "$spec:1: error: the first line must be '; golden: OPTIONS'" >&2
  usage
fi
cd "$(dirname "$spec")" || exit 1
# shellcheck disable=SC2086
got=$("$nn" "$(basename "$spec")" $opts 2>&1)
rc=$?
if [[ $rc -ne 0 ]]; then
  printf '%s\n' "$got"
  if ((update)); then echo "tests/golden.sh: nnsc-aot exited $rc: not recorded ($exp left as it was)" >&2
  else echo "tests/golden.sh: nnsc-aot exited $rc" >&2; fi
  exit 1
fi
if ((update)); then
  printf '%s\n' "$got" >"$(basename "$exp")"
  echo "updated $exp"
  exit 0
fi
if [[ ! -f $(basename "$exp") ]]; then
  echo "tests/golden.sh: no $exp yet: record it with tests/golden.sh $spec --update" >&2
  exit 1
fi
diff -u "$(basename "$exp")" <(printf '%s\n' "$got")
