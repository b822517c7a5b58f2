#!/usr/bin/env bash
# tests/cli.sh -- the command line end to end: help, bad options, bad specs
# through the binary (exit 2, never a crash), determinism of every output,
# running a build, and launch's handling of a failed rank.
. "$(dirname "$0")/lib.sh" cli

expect_rc 0 "--help" "$nn" --help
grep -q -- "--set S.K=V" "$tmp/out" && grep -q verify "$tmp/out" && ok "--help documents --set and verify" || no "--help text"
expect_rc 2 "no arguments" "$nn"
expect_rc 2 "unknown option" "$nn" "$top/examples/mlp.ini" -o "$tmp/x" --frobnicate
expect_rc 2 "misspelled option" "$nn" "$top/examples/mlp.ini" -o "$tmp/x" --devics 2
says "hint: did you mean '--devices'?" "misspelled option"
# each command's own usage (--help after it, or nnsc-aot help COMMAND); a misspelled command or
# --dump / --stop-after pass gets "did you mean"
expect_rc 0 "help" "$nn" help
grep -q "^usage: nnsc-aot MODEL.ini -o DIR" "$tmp/out" && ok "  ... prints the usage" || no "help: $(head -n 2 "$tmp/out")"
for c in verify profile check-op; do
  expect_rc 0 "$c --help" "$nn" "$c" --help
  grep -q "^usage: nnsc-aot $c " "$tmp/out" && ! grep -q "^options (profile only)" "$tmp/out" &&
    ok "  ... $c's own usage" || no "$c --help: $(head -n 2 "$tmp/out")"
done
expect_rc 0 "help verify" "$nn" help verify
grep -q "^usage: nnsc-aot verify " "$tmp/out" && ok "  ... verify's usage" || no "help verify: $(head -n 1 "$tmp/out")"
expect_rc 2 "a misspelled command" "$nn" verfy "$top/examples/mlp.ini"
says "hint: did you mean 'nnsc-aot verify'?" "verfy"
expect_rc 2 "--dump=plna" "$nn" "$top/examples/mlp.ini" --dump=plna
says "did you mean 'plan'?" "--dump=plna"
expect_rc 2 "--stop-after shedule" "$nn" "$top/examples/mlp.ini" --stop-after shedule
says "did you mean 'schedule'?" "--stop-after shedule"

# --version: the one version string (frontend/frontend.h) and the LLVM it was built with
expect_rc 0 "--version" "$nn" --version
version=$(sed -n 's/^#define FE_VERSION "\(.*\)"$/\1/p' "$top/frontend/frontend.h")
llvm_config=$(sed -n 's/^LLVM_CONFIG:FILEPATH=//p' "$build/CMakeCache.txt")
llvm_version=$("$llvm_config" --version 2>/dev/null)
[[ -n $version && $(sed -n 1p "$tmp/out") == "nnsc-aot $version" ]] && ok "  ... first line: nnsc-aot $version" ||
  no "--version: first line '$(sed -n 1p "$tmp/out")', FE_VERSION '$version'"
[[ -n $llvm_version ]] && grep -qx "LLVM $llvm_version" "$tmp/out" && ok "  ... LLVM $llvm_version (what CMake built with)" ||
  no "--version: no 'LLVM $llvm_version' line in: $(cat "$tmp/out")"

# --cpu: checked before anything is built (LLVM would abort on some names)
expect_rc 2 "--cpu foo: unknown CPU" "$nn" "$top/examples/mlp.ini" -o "$tmp/cpu" --cpu foo
says "nnsc-aot: error: --cpu foo: LLVM" "--cpu foo"
says "hint: --cpu takes x86-64-v3" "--cpu foo"
! grep -q "LLVM ERROR\|not a recognized processor" "$tmp/err" && ok "  ... no LLVM warning or abort" || no "--cpu foo: $(cat "$tmp/err")"
[[ ! -e $tmp/cpu/rank0 ]] && ok "  ... nothing built" || no "--cpu foo built $tmp/cpu/rank0"
expect_rc 2 "--cpu skylake-avx51: a near name" "$nn" "$top/examples/mlp.ini" -o "$tmp/cpu" --cpu skylake-avx51
says "hint: did you mean 'skylake-avx512'?" "--cpu skylake-avx51"
expect_rc 2 "--cpu i686: a 32-bit CPU" "$nn" "$top/examples/mlp.ini" -o "$tmp/cpu" --cpu i686
says "LLVM cannot compile x86-64 rank code for this CPU" "--cpu i686"
expect_rc 2 "verify --cpu foo" "$nn" verify "$top/examples/mlp.ini" --cpu foo
expect_rc 0 "--cpu znver3 builds" "$nn" "$top/examples/mlp.ini" -o "$tmp/cpu" --cpu znver3 -q --emit-llvm
grep -q '"target-cpu"="znver3"' "$tmp/cpu/rank0.ll" && ok "  ... for znver3" || no "--cpu znver3: no target-cpu znver3 in rank0.ll"
expect_rc 0 "--cpu help" "$nn" --cpu help
grep -qw x86-64-v3 "$tmp/out" && grep -qw znver3 "$tmp/out" && grep -qw skylake-avx512 "$tmp/out" &&
  ! grep -qw i686 "$tmp/out" && ok "  ... lists x86-64-v3, znver3, skylake-avx512, not i686" || no "--cpu help: $(cat "$tmp/out")"

# -o where a file cannot be written (root writes through a read-only mode, so:
# an empty folder of sysfs, which takes no new files, and outputs that are directories): the
# path and the system's reason, exit 1, not the compiler's source file:line
unwritable() {   # unwritable LABEL WANT ARGS...
  local label=$1 want=$2
  shift 2
  expect_rc 1 "$label" "$nn" "$top/examples/mlp.ini" -q "$@"
  says "$want" "$label"
  ! grep -qE '\.c:[0-9]|linking' "$tmp/err" && ok "  ... no source file:line, no link command" || no "$label: $(cat "$tmp/err")"
}
# an empty directory no file can be made in, not even by root (an empty folder of sysfs)
ro=$(find /sys/class /sys/kernel -maxdepth 1 -mindepth 1 -type d -empty 2>/dev/null | while read -r d; do
  touch "$d/x" 2>/dev/null || { echo "$d"; break; }; done)
if [[ -n $ro ]]; then unwritable "-o $ro (empty, read-only)" "nnsc-aot: error: cannot write $ro/.nnsc-aot-files: " -o "$ro"
else echo "skip  -o an empty read-only directory: no empty unwritable folder in /sys here (not counted)"; fi
# (the folders in the way are the user's, in a directory an earlier build owns: its list names nothing)
mkdir -p "$tmp/wo1/prog0.ll" "$tmp/wo2/rank"
printf 'state done\n' | tee "$tmp/wo1/.nnsc-aot-files" >"$tmp/wo2/.nnsc-aot-files"
unwritable "-o DIR, DIR/prog0.ll a directory" "cannot write $tmp/wo1/prog0.ll: Is a directory" -o "$tmp/wo1" --emit-llvm
unwritable "-o DIR, DIR/rank a directory" "cannot write $tmp/wo2/rank: Is a directory" -o "$tmp/wo2"

# build.sh's command line: usage and bad words return before any apt-get or cmake
expect_rc 0 "build.sh --help" "$top/build.sh" --help
grep -q "san test" "$tmp/out" && grep -q "NNSC_NO_APT" "$tmp/out" && grep -q "JOBS" "$tmp/out" &&
  ok "  ... names san test, JOBS and NNSC_NO_APT" || no "build.sh --help: $(cat "$tmp/out")"
expect_rc 0 "build.sh -h" "$top/build.sh" -h
expect_rc 2 "build.sh frobnicate" "$top/build.sh" frobnicate
says "build.sh: error: unknown argument 'frobnicate'" "build.sh frobnicate"
says "hint: ./build.sh --help" "build.sh frobnicate"
expect_rc 2 "build.sh test san (wrong order)" "$top/build.sh" test san
expect_rc 2 "build.sh install with two prefixes" "$top/build.sh" install "$tmp/p1" "$tmp/p2"
says "install takes one PREFIX" "build.sh install a b"
# an installed tree (the install target ./build.sh install runs): PREFIX/bin/nnsc-aot finds its
# runtime and the custom-op header by its own path, so a compile in another directory works
# without NNSC_RTLIB or NNSC_INCLUDE, a custom op's C kernel included
if cmake --install "$build" --prefix "$tmp/pfx" >"$tmp/install.log" 2>&1; then
  cp "$top/tests/equiv/custom.ini" "$top/tests/equiv/custom_swiglu.c" "$top/tests/equiv/custom_swiglu.cu" "$tmp/"
  (cd "$tmp" && env -u NNSC_RTLIB -u NNSC_INCLUDE "$tmp/pfx/bin/nnsc-aot" "$tmp/pfx/share/nnsc-aot/examples/mlp.ini" \
    -o inst --devices 2 -q && env -u NNSC_RTLIB -u NNSC_INCLUDE "$tmp/pfx/bin/nnsc-aot" custom.ini -o instc -q &&
    inst/launch --steps 2 && instc/launch --steps 2) >"$tmp/inst.log" 2>&1 &&
    [[ -f $tmp/pfx/lib/nnsc-aot/libnnsc_rt.a && -f $tmp/pfx/include/nnsc-aot/nnsc_custom.h ]] &&
    ok "installed nnsc-aot compiles and links from another directory (custom op too), no NNSC_RTLIB" ||
    no "installed nnsc-aot: $(tail -n 4 "$tmp/inst.log")"
else no "cmake --install: $(tail -n 3 "$tmp/install.log")"; fi
# packages missing, not root, no sudo: the list and the command to run as root; nothing else runs
# (PATH holds only a dpkg-query that knows no package, an id that says 1000 and what build.sh needs)
mkdir -p "$tmp/fakebin"
for t in dirname grep cat nproc; do ln -sf "$(command -v "$t")" "$tmp/fakebin/$t"; done
printf '#!/bin/sh\nexit 1\n' >"$tmp/fakebin/dpkg-query"
printf '#!/bin/sh\necho 1000\n' >"$tmp/fakebin/id"
chmod +x "$tmp/fakebin/dpkg-query" "$tmp/fakebin/id"
expect_rc 1 "build.sh: packages missing, not root, no sudo" env PATH="$tmp/fakebin" "$BASH" "$top/build.sh"
says "missing Debian packages: cmake make gcc" "build.sh without sudo"
says "not root and no sudo" "build.sh without sudo"
says "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends cmake" "build.sh without sudo"
expect_rc 1 "build.sh: packages missing, NNSC_NO_APT=1" env PATH="$tmp/fakebin" NNSC_NO_APT=1 "$BASH" "$top/build.sh" san
says "(NNSC_NO_APT=1, so build.sh installs nothing)" "build.sh NNSC_NO_APT=1"
expect_rc 2 "--devices not a number" "$nn" "$top/examples/mlp.ini" -o "$tmp/x" --devices two
expect_rc 2 "unknown dump pass" "$nn" "$top/examples/mlp.ini" --dump=nothing
expect_rc 2 "missing spec file" "$nn" "$tmp/none.ini" -o "$tmp/x"
expect_rc 2 "batch not divisible by 3 devices" "$nn" "$top/examples/mlp.ini" -o "$tmp/x" --devices 3
grep -q "mlp.ini:[0-9]*: error: batch dim" "$tmp/err" && ok "divisibility message names file:line" || no "divisibility message: $(cat "$tmp/err")"

# docs/model-spec.md cannot fall behind frontend/spec.c: every section kind of
# the schema table has a "### `[KIND" heading, and every key a table row
# "| `KEY` |" under it
python3 - "$top/frontend/spec.c" "$top/docs/model-spec.md" >"$tmp/keys" 2>&1 <<'EOF'
import re, sys
src, doc = open(sys.argv[1]).read(), open(sys.argv[2]).read()
table = src[src.index("fe_schemas[] = {"):]
table = table[:table.index("\n};")]
rows = re.findall(r'\{"(\w+)",\s*\d,\s*\d,\s*\{([^}]*)\}', table)
heads = [m.start() for m in re.finditer(r"^#{2,3} ", doc, re.M)] + [len(doc)]
bad, nkeys = [], 0
for kind, keys in rows:
    m = re.search(r"^### `\[" + kind + r"[ \]]", doc, re.M)
    if not m:
        bad.append("no section heading ### `[%s` in docs/model-spec.md" % kind)
        continue
    part = doc[m.start():min(h for h in heads if h > m.start())]
    for key in re.findall(r'"(\w+)"', keys):
        nkeys += 1
        if not re.search(r"^\| `" + key + r"` \|", part, re.M):
            bad.append("[%s] %s: no row | `%s` | in its section of docs/model-spec.md" % (kind, key, key))
if len(rows) < 9 or nkeys < 40:
    bad.append("read only %d sections and %d keys from frontend/spec.c's fe_schemas" % (len(rows), nkeys))
print("\n".join(bad) if bad else "%d sections, %d keys" % (len(rows), nkeys))
sys.exit(1 if bad else 0)
EOF
[[ $? == 0 ]] && ok "docs/model-spec.md documents every section and key of spec.c ($(cat "$tmp/keys"))" ||
  no "docs/model-spec.md is behind frontend/spec.c: $(cat "$tmp/keys")"

# every golden/... and examples/... path that README.md and docs/*.md name exists
nmiss=0
nseen=0
while read -r p; do
  p=${p%.}
  nseen=$((nseen + 1))
  compgen -G "$top/$p" >/dev/null || { no "a doc names $p, which does not exist: $(grep -l -- "$p" "$top/README.md" "$top"/docs/*.md | tr '\n' ' ')"; nmiss=$((nmiss + 1)); }
done < <(grep -ohE '(golden|examples)/[A-Za-z0-9_.*-]+' "$top/README.md" "$top"/docs/*.md | sort -u)
((nmiss == 0 && nseen > 3)) && ok "the $nseen golden/ and examples/ paths named in README.md and docs/ exist"

# a [param] no op reads: built, with a warning at its line (it is never trained)
printf '%s\n' '[input x]' 'shape = 4 8' '[param w]' 'shape = 8 8' '[param spare]' 'shape = 8' '[op fc]' \
  'kind = matmul' 'in = x, w' 'out = h' '[op loss]' 'kind = mse_loss' 'in = h, x' 'out = loss' '[train]' \
  'loss = loss' >"$tmp/unused.ini"
expect_rc 0 "a param no op reads" "$nn" "$tmp/unused.ini" --stop-after graph
says "unused.ini:5: warning: param 'spare' is read by no op: it is never trained" "a param no op reads"
[[ $(grep -c "warning: param" "$tmp/err") == 1 ]] && ok "  ... once, about spare only" || no "unused param: $(cat "$tmp/err")"

# every bad spec of the corpus: exit 2 from the binary, with file:line
for f in "$top"/tests/bad/*.ini; do
  sets=()
  set_line=$(sed -n 's/^; set: *//p' "$f")
  [[ -n $set_line ]] && sets=(--set "$set_line")
  "$nn" "$f" -o "$tmp/bad" "${sets[@]}" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [[ $rc == 2 ]] && grep -q "error:" "$tmp/err"; then ok "bad/$(basename "$f"): exit 2"; else no "bad/$(basename "$f"): exit $rc"; cat "$tmp/err"; fi
done

# planner-level bad input: exit 2 with the expected message (first line: ; expect: TEXT)
for f in "$top"/tests/bad-plan/*.ini; do
  want=$(sed -n '1s/^; expect: //p' "$f")
  "$nn" "$f" -o "$tmp/bad" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [[ $rc == 2 ]] && grep -qF -- "$want" "$tmp/err"; then ok "bad-plan/$(basename "$f"): exit 2, '$want'"
  else no "bad-plan/$(basename "$f"): exit $rc"; cat "$tmp/err"; fi
done

# golden files of a user's own model (tests/golden.sh, docs/testing.md): --update records the dump,
# the check then passes, a change of the model fails it, and a failing compile is never recorded
mkdir -p "$tmp/gold"
{ echo "; golden: --devices 2 --dump=plan"; cat "$top/examples/mlp.ini"; } >"$tmp/gold/m.ini"
expect_rc 0 "golden.sh --update records a user's model" "$top/tests/golden.sh" "$tmp/gold/m.ini" --update
expect_rc 0 "golden.sh: the recorded dump matches" "$top/tests/golden.sh" "$tmp/gold/m.ini"
sed -i '1s/--devices 2/--devices 4/' "$tmp/gold/m.ini"
expect_rc 1 "golden.sh: a changed plan differs" "$top/tests/golden.sh" "$tmp/gold/m.ini"
{ echo "; golden: --devices 3 --dump=plan"; cat "$top/examples/mlp.ini"; } >"$tmp/gold/bad.ini"
expect_rc 1 "golden.sh --update of a failing compile" "$top/tests/golden.sh" "$tmp/gold/bad.ini" --update
says "not recorded" "golden failing compile"
[[ ! -e $tmp/gold/bad.out ]] && ok "  ... and writes no .out" || no "golden.sh recorded a failed compile: $(cat "$tmp/gold/bad.out")"
expect_rc 2 "golden.sh: a spec without '; golden:'" "$top/tests/golden.sh" "$top/examples/mlp.ini"

# determinism: two builds give byte-identical dumps, plans, IR and executables
for d in a b; do
  "$nn" "$top/examples/mlp.ini" --devices 2 -o "$tmp/$d" --emit-llvm -q --dump=all >"$tmp/$d.dump" 2>&1 || no "build $d"
done
cmp -s "$tmp/a.dump" "$tmp/b.dump" && ok "dumps identical" || no "dumps differ"
cmp -s "$tmp/a/plan.txt" "$tmp/b/plan.txt" && ok "plan.txt identical" || no "plan.txt differs"
same=1
for f in rank0.ll rank1.ll rank0 rank1 launch; do cmp -s "$tmp/a/$f" "$tmp/b/$f" || same=0; done
((same)) && ok "rank IR, executables and launch identical" || no "generated files differ"
grep -q "^$tmp" "$tmp/a/plan.txt" "$tmp/a/rank0.ll" && no "absolute paths in outputs" || ok "no absolute paths in plan.txt and rank0.ll"

# a build runs: rank 0 prints one loss line per step
"$tmp/a/launch" --steps 3 >"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
n=$(grep -c '^step [0-9]*/3 loss ' "$tmp/run.out")
[[ $rc == 0 && $n == 3 ]] && ok "launch runs 3 steps, rank 0 logs 3 lines" || { no "launch: exit $rc, $n loss lines"; cat "$tmp/run.err"; }
expect_rc 2 "a rank rejects an unknown flag" "$tmp/a/rank0" --frobnicate
"$tmp/a/launch" --frobnicate >/dev/null 2>&1 && no "launch passes a failing rank's status" || ok "launch exits non-zero when ranks fail"

# two runs with one exported NNSC_JOB: launch gives each its own secret, so
# the second is refused (exit 2, saying why) while the first one's rank 0
# waits for its own rank 1 (held back 2 s here) and trains as if alone
mkdir -p "$tmp/slow"
cp "$tmp/a/launch" "$tmp/slow/launch"
ln -f "$tmp/a/rank" "$tmp/slow/rank" && ln -f "$tmp/a/rank" "$tmp/slow/rank0"
printf '#!/usr/bin/env bash\nsleep 2\nexec "${0%%1}" "$@"\n' >"$tmp/slow/rank1"   # then: .../rank, as rank 1
chmod +x "$tmp/slow/rank1"
job="cli-two-$$"
NNSC_JOB=$job "$tmp/slow/launch" --steps 3 --timeout 10 >"$tmp/A.out" 2>"$tmp/A.err" &
apid=$!
for ((k = 0; k < 500; k++)); do [[ -e /dev/shm/nnsc-$job ]] && break; sleep 0.01; done
NNSC_JOB=$job "$tmp/a/launch" --steps 3 --timeout 10 >"$tmp/B.out" 2>"$tmp/B.err"
brc=$?
wait "$apid"
arc=$?
[[ $brc == 2 ]] && grep -q "another job with the same NNSC_JOB" "$tmp/B.err" &&
  ok "two launches with one NNSC_JOB: the second is refused, exit 2 ($(grep -m1 'another job' "$tmp/B.err" | cut -c1-90)...)" ||
  no "the second launch with one NNSC_JOB: exit $brc: $(cat "$tmp/B.err")"
[[ $arc == 0 && $(grep -c '^step [0-9]*/3 loss ' "$tmp/A.out") == 3 ]] && ! grep -q "^rank" "$tmp/A.err" &&
  ok "  ... and the first one's rank 0 waits for its own rank 1: 3 steps, exit 0" ||
  no "the first launch with one NNSC_JOB: exit $arc: $(cat "$tmp/A.err")"

# a build owns its -o directory: building a's 2-rank mlp again on 1 device removes what the first
# build wrote (rank1, its .ll files) and nothing else (a folder of the user's); a directory holding
# files no build wrote is refused, and so is a -o that is a file
mkdir -p "$tmp/a/ckpt" && echo mine >"$tmp/a/ckpt/keep.txt"
"$nn" "$top/examples/mlp.ini" -o "$tmp/a" -q || no "rebuild a on 1 device"
[[ -x $tmp/a/rank0 && ! -e $tmp/a/rank1 && ! -e $tmp/a/rank1.ll && ! -e $tmp/a/prog0.ll && -f $tmp/a/ckpt/keep.txt ]] &&
  grep -q "^file rank0$" "$tmp/a/.nnsc-aot-files" && ok "a rebuild into -o DIR removes the earlier build's files, keeps the user's" ||
  no "rebuild into the same -o: $(ls -A "$tmp/a" | tr '\n' ' ')"
mkdir -p "$tmp/foreign" && echo mine >"$tmp/foreign/notes.txt"
expect_rc 2 "-o a directory holding files no build wrote" "$nn" "$top/examples/mlp.ini" -o "$tmp/foreign"
says "the directory holds files an nnsc-aot build did not write ('notes.txt')" "foreign -o"
[[ $(ls -A "$tmp/foreign") == notes.txt ]] && ok "  ... and leaves it as it was" || no "foreign -o changed: $(ls -A "$tmp/foreign")"
expect_rc 2 "-o a file" "$nn" "$top/examples/mlp.ini" -o "$tmp/foreign/notes.txt"
says "not a directory" "-o a file"

# verify explains the known zero-gradient case: gpt2-tiny's attention key
# biases differ by ~100% between the runs, yet stayed at their init (0);
# and when it passes it leaves nothing in TMPDIR (every build's files removed:
# the suite runs it hundreds of times)
mkdir -p "$tmp/vtmp"
expect_rc 0 "verify gpt2-tiny dp2" env TMPDIR="$tmp/vtmp" "$nn" verify "$top/examples/gpt2-tiny.ini" --devices 2 --steps 5
[[ -z $(ls -A "$tmp/vtmp") ]] && ok "  ... and leaves nothing in TMPDIR" ||
  no "verify left in TMPDIR: $(find "$tmp/vtmp" | head -n 8 | tr '\n' ' ')"
grep -q "h.0.k_b, h.1.k_b, h.2.k_b and h.3.k_b differ by [0-9]*-[0-9]*% between the runs" "$tmp/out" &&
  grep -q "yet stayed at their init (0)" "$tmp/out" && grep -q "gradient that is zero in exact" "$tmp/out" &&
  ! grep -q "note:" "$tmp/out" && ok "  ... names the key biases and why their difference means nothing" ||
  no "verify gpt2-tiny: $(cat "$tmp/out")"
# a run that fails says so with the ranks' message: no empty loss table, no difference of 0
expect_rc 1 "verify with a missing data file" "$nn" verify "$top/examples/gpt2-tiny.ini" --devices 2 --steps 2 \
  --set "train.data=$tmp/none.bin" --keep "$tmp/vfail"
grep -q "^a run failed: the 1-device run exited with status 2 after logging 0 of 2 steps" "$tmp/out" &&
  grep -q "^a run failed: the 2-device run exited with status 2 after logging 0 of 2 steps" "$tmp/out" &&
  grep -q "^  | rank [01]: data file $tmp/none.bin: no such file" "$tmp/out" && grep -q "^verify: FAILED" "$tmp/out" &&
  ok "  ... names the failed runs and quotes their ranks" || no "verify, failed runs: $(cat "$tmp/out")"
! grep -q "rel diff\|largest relative difference" "$tmp/out" && ok "  ... and prints no loss table" ||
  no "verify, failed runs: a loss table: $(cat "$tmp/out")"
grep -q "no such file" "$tmp/err" && ok "  ... the ranks' stderr still shown" || no "verify stderr: $(cat "$tmp/err")"
# a bf16 model compared at f32's tolerances: verify fails and says why bf16 runs differ, and how to compare
expect_rc 1 "verify gpt2-tiny tp 2 in bf16 at the default tolerances" "$nn" verify "$top/examples/gpt2-tiny.ini" \
  --devices 2 --set plan.policy=tp --set train.dtype=bf16 --steps 20
grep -q "^verify: FAILED" "$tmp/out" && grep -q "^note: the model trains in bf16 (train.dtype)" "$tmp/out" &&
  grep -q -- "--set train.dtype=f32, or over a few steps with --loss-tol 1e-3 --weight-tol 1e-2" "$tmp/out" &&
  ok "  ... and says what bf16's differences are and how to compare" || no "verify bf16: $(tail -n 4 "$tmp/out")"

# kill -9 one rank mid-run: the others notice, launch fails, nothing hangs
"$nn" "$top/examples/mlp.ini" --devices 2 --set train.steps=100000000 -q -o "$tmp/long" || no "long build"
"$tmp/long/launch" --timeout 20 >"$tmp/long.out" 2>"$tmp/long.err" &
lp=$!
sleep 1
victim=$(pgrep -f "$tmp/long/rank1" | head -n 1)
if [[ -n $victim ]]; then kill -9 "$victim"; fi
t0=$SECONDS
wait $lp
rc=$?
if [[ -n $victim && $rc != 0 && $((SECONDS - t0)) -lt 30 ]]; then ok "rank 1 killed: launch exits $rc within $((SECONDS - t0)) s"; else no "killed rank: exit $rc after $((SECONDS - t0)) s"; cat "$tmp/long.err"; fi
pkill -9 -f "$tmp/long/rank" 2>/dev/null

echo "$pass passed, $fail failed"
((fail == 0))
