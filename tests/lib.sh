# tests/lib.sh -- what the shell tests share; source it with the test's name:
#   . "$(dirname "$0")/lib.sh" NAME
# sets top (the checkout), build ($NNSC_BUILD or build/), nn (the compiler),
# tmp (a scratch directory, removed on exit), the pass/fail counters and:
#   ok DESC / no DESC            count and print a check
#   expect_rc RC DESC CMD...     CMD exits with RC (stdout in $tmp/out, stderr in $tmp/err)
#   says TEXT DESC               stderr of the last expect_rc holds TEXT
set -u
top=${NNSC_TOP:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
build=${NNSC_BUILD:-$top/build}
nn=$build/nnsc-aot
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-${1:-test}-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok    $*"; }
no() { fail=$((fail + 1)); echo "FAIL  $*"; }
expect_rc() {
  local want=$1 desc=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc == "$want" ]]; then ok "$desc (exit $rc)"; else no "$desc: exit $rc, wanted $want"; cat "$tmp/err"; fi
}
says() { grep -qF -- "$1" "$tmp/err" && ok "  ... says '$1'" || { no "$2: no '$1' in: $(cat "$tmp/err")"; }; }
