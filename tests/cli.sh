#!/usr/bin/env bash
# tests/cli.sh -- the command line end to end: help, bad options, bad specs
# through the binary (exit 2, never a crash), determinism of every output,
# running a build, and launch's handling of a failed rank.
. "$(dirname "$0")/lib.sh" cli

expect_rc 0 "--help" "$nn" --help
grep -q -- "--set S.K=V" "$tmp/out" && grep -q verify "$tmp/out" && ok "--help documents --set and verify" || no "--help text"
expect_rc 2 "no arguments" "$nn"
expect_rc 2 "unknown option" "$nn" "$top/examples/mlp.ini" -o "$tmp/x" --frobnicate
expect_rc 2 "--devices not a number" "$nn" "$top/examples/mlp.ini" -o "$tmp/x" --devices two
expect_rc 2 "unknown dump pass" "$nn" "$top/examples/mlp.ini" --dump=nothing
expect_rc 2 "missing spec file" "$nn" "$tmp/none.ini" -o "$tmp/x"
expect_rc 2 "batch not divisible by 3 devices" "$nn" "$top/examples/mlp.ini" -o "$tmp/x" --devices 3
grep -q "mlp.ini:[0-9]*: error: batch dim" "$tmp/err" && ok "divisibility message names file:line" || no "divisibility message: $(cat "$tmp/err")"

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
