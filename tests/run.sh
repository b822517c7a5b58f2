#!/usr/bin/env bash
# tests/run.sh BUILD_DIR -- run every test of nnsc-aot against one build.
#
#   unit      every BUILD_DIR/tests/test_* program (C unit tests per layer)
#   golden    golden/*.ini: IR dumps diffed against golden/*.out (tests/golden.sh)
#   cli       the command line, determinism, launch failure handling (tests/cli.sh),
#             Megatron's communication volume under the tp policy (tests/megatron.sh),
#             the issue-9 family really reduces still-read values out of place (tests/inplace.sh),
#             plan.txt's header, why ops stay whole, replicated-layer warnings (tests/plan.sh),
#             every command in README.md and docs/ run or accounted for, the program output
#             they show checked against the program (tests/docs.sh, tests/doc_outputs.py),
#             checkpoints, kill -9 and bitwise resume, dying ranks (tests/resume.sh),
#             pipelines, ZeRO, coshard (tests/pipeline.sh), activations per layer and
#             plan.txt's arena against what ranks allocate (tests/memory.sh), recycling against a
#             hand-unrolled oracle (tests/recycle.sh), custom ops: a user's C kernel
#             against the built-ins, their split, every mistake (tests/custom.sh), --init
#             from a Hugging Face-named checkpoint (tests/hf_init.sh), the view ops
#             (split, concat, transpose, split_heads, merge_heads: tests/viewops.sh),
#             rtlib's layers call nothing above them (tests/layers.sh)
#   cuda      --target cuda without a GPU: NVRTC builds of every example, embedded
#             cubins, linking, determinism, the no-driver failure (tests/cuda.sh);
#             rtlib's CUDA backend against a mock driver (tests/cuda_mock.sh);
#             the op test of every CUDA kernel (tests/cuda_ops.sh: on a GPU the
#             kernels against their CPU references, else the host side under the
#             driver double) (also run with cli)
#   equiv     nnsc-aot verify: N-device plans train like 1 device (tests/equiv.sh)
#
# A test that exits 77 is skipped (it cannot run here, e.g. no CUDA toolkit):
# listed as SKIP with the reason it printed last, counted apart, not failed.
# Prints one line per test as each finishes and closes with "N passed, M
# failed" (and ", K skipped" when any were); exits 1 if anything failed.
# TESTS="unit golden" runs a subset; TESTS_SKIP="docs cuda" leaves out tests
# by name (listed as SKIP); EQUIV_STRIDE=K runs every K-th line of
# tests/equiv.list; TEST_JOBS=N runs N tests at once (default: the CPUs this
# process may use, at most 4; 1: one after another, in the order above).
# The tests that time themselves (scaling, wide) run first, alone.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$top/build}" && pwd)
export NNSC_BUILD=$build
export NNSC_TOP=$top
log=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-tests-XXXXXX")
pass=0
fail=0
skip=0
failed=()

jobs_max=${TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[[ $jobs_max =~ ^[1-9][0-9]*$ ]] || { echo "tests/run.sh: TEST_JOBS must be a positive integer" >&2; exit 2; }
[[ -z ${TEST_JOBS:-} ]] && ((jobs_max > 4)) && jobs_max=4
declare -A running=() logf=()   # per test started and not yet reported (by a number): its name, its log
started=0

# report NAME RC SECS LOGFILE: one finished test's line; exit status 77 means
# skipped (its last line starting SKIP says why); a failure shows its log's tail
report() {
  local name=$1 rc=$2 secs=$3 lf=$4
  if ((rc == 0)); then
    pass=$((pass + 1))
    printf 'PASS  %-40s %3ds\n' "$name" "$secs"
  elif ((rc == 77)); then
    skip=$((skip + 1))
    printf 'SKIP  %-40s %3ds  %s\n' "$name" "$secs" "$(grep '^SKIP' "$lf" | tail -n 1)"
  else
    fail=$((fail + 1))
    failed+=("$name")
    printf 'FAIL  %-40s %3ds\n' "$name" "$secs"
    tail -n 30 "$lf" | sed 's/^/      | /'
  fi
}

# reap: wait for a started test to finish, then report every one that has
reap() {
  local k rc secs
  wait -n 2>/dev/null
  for k in "${!running[@]}"; do
    [[ -f ${logf[$k]}.rc ]] || continue
    read -r rc secs <"${logf[$k]}.rc"
    report "${running[$k]}" "$rc" "$secs" "${logf[$k]}"
    unset "running[$k]" "logf[$k]"
  done
}

# run NAME CMD...: one test, its output kept in the log dir (shown on
# failure); started beside the others up to TEST_JOBS at once
run() {
  local name=$1
  shift
  if [[ " ${TESTS_SKIP:-} " == *" $name "* ]]; then   # left out by request: counted as skipped, said why
    skip=$((skip + 1))
    printf 'SKIP  %-40s %3ds  SKIP left out by TESTS_SKIP\n' "$name" 0
    return
  fi
  local lf="$log/${name//\//_}.log"
  [[ -e $lf ]] && lf="$log/${name//\//_}.$started.log"   # (two lines of equiv.list may share a name)
  while ((${#running[@]} >= jobs_max)); do reap; done
  (
    t0=$SECONDS
    "$@" >"$lf" 2>&1
    echo "$? $((SECONDS - t0))" >"$lf.rc.tmp" && mv "$lf.rc.tmp" "$lf.rc"
  ) &
  running[$started]=$name logf[$started]=$lf
  started=$((started + 1))
}

# run_alone NAME CMD...: the same once every test started before has finished, and
# before any other starts (a test that times itself)
run_alone() {
  while ((${#running[@]})); do reap; done
  run "$@"
  while ((${#running[@]})); do reap; done
}

want() { [[ -z "${TESTS:-}" || " $TESTS " == *" $1 "* ]]; }

# the tests that time themselves, first and alone
want cli && run_alone "scaling" "$top/tests/scaling.sh"
want cli && run_alone "wide" "$top/tests/wide.sh"

if want unit; then
  for t in "$build"/tests/test_*; do
    [[ -x $t ]] || continue
    # the CUDA op test needs a GPU or the driver double: tests/cuda_ops.sh runs it
    [[ $(basename "$t") == test_cuda_ops ]] && continue
    run "unit/$(basename "$t")" "$t" "$top/tests"
  done
fi
if want golden; then
  for f in "$top"/golden/*.ini; do
    run "golden/$(basename "$f" .ini)" "$top/tests/golden.sh" "$f"
  done
fi
want cli && run "cli" "$top/tests/cli.sh"
want cli && run "megatron" "$top/tests/megatron.sh"
want cli && run "inplace" "$top/tests/inplace.sh"
want cli && run "buckets" "$top/tests/buckets.sh"
want cli && run "plan" "$top/tests/plan.sh"
want cli && run "docs" "$top/tests/docs.sh"
want cli && run "resume" "$top/tests/resume.sh"
want cli && run "runtime_ux" "$top/tests/runtime_ux.sh"
want cli && run "share" "$top/tests/share.sh"
want cli && run "pipeline" "$top/tests/pipeline.sh"
want cli && run "memory" "$top/tests/memory.sh"
want cli && run "recycle" "$top/tests/recycle.sh"
want cli && run "custom" "$top/tests/custom.sh"
want cli && run "hf_init" "$top/tests/hf_init.sh"
want cli && run "viewops" "$top/tests/viewops.sh"
want cli && run "relpos" "$top/tests/relpos.sh"
want cli && run "layers" "$top/tests/layers.sh"
(want cli || want cuda) && run "cuda" "$top/tests/cuda.sh"
[[ -f $top/tests/cuda_mock.sh ]] && (want cli || want cuda) && run "cuda_mock" "$top/tests/cuda_mock.sh"
[[ -f $top/tests/cuda_ops.sh ]] && (want cli || want cuda) && run "cuda_ops" "$top/tests/cuda_ops.sh"
if want equiv; then
  mkdir -p "$log/verify"   # verify's temporary builds (a failed one keeps its own: reported, then removed with the log)
  # EQUIV_STRIDE=K runs every K-th line alone (CI's sanitized pass: .ci/run); the count says how many
  stride=${EQUIV_STRIDE:-1}
  [[ $stride =~ ^[1-9][0-9]*$ ]] || { echo "tests/run.sh: EQUIV_STRIDE must be a positive integer" >&2; exit 2; }
  line=0 left=0
  while read -r spec devs extra; do
    [[ -z $spec || $spec == \#* ]] && continue
    if ((line++ % stride)); then left=$((left + 1)); continue; fi
    eval "args=($extra)"   # the list quotes values that hold blanks
    name="$(basename "$spec" .ini)-$devs${extra:+-$(printf '%s' "$extra" | tr -cs 'A-Za-z0-9=.' '_' | cut -c1-60)}"
    run "equiv/$name" env TMPDIR="$log/verify" "$build/nnsc-aot" verify "$top/$spec" --devices "$devs" "${args[@]}"
  done <"$top/tests/equiv.list"
  ((left)) && echo "equiv: $left of $line lines of tests/equiv.list not run (EQUIV_STRIDE=$stride: one line in $stride ran)"
fi

while ((${#running[@]})); do reap; done
echo
((fail)) && echo "failed: ${failed[*]} (logs in $log)"
((fail)) || rm -rf "$log"
echo "$pass passed, $fail failed$( ((skip)) && echo ", $skip skipped")"
((fail == 0))
