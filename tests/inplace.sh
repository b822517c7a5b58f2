#!/usr/bin/env bash
# tests/inplace.sh -- the issue-9 family (tests/equiv/{decoder-nopos,fanout,
# resid-embed}.ini; the other specs there are for pipelines) really has a
# pTensor read both before and after the all-reduce that sums it, under tp
# and hybrid: the lower dump shows the all-reduce done out of place (a copy
# first) on every rank.  The equivalence runs in tests/equiv.list then
# check that those plans train like one device; this keeps them meaningful.
. "$(dirname "$0")/lib.sh" inplace

for spec in "$top"/tests/equiv/{decoder-nopos,fanout,resid-embed}.ini; do
  name=$(basename "$spec" .ini)
  for plan in "4 --set plan.policy=tp" "4 --set plan.policy=hybrid --set plan.tp=2" "2 --set plan.policy=tp"; do
    read -r n rest <<<"$plan"
    # shellcheck disable=SC2086
    "$nn" "$spec" --devices "$n" $rest --dump=lower >"$tmp/lower" 2>"$tmp/err"
    rc=$?
    ranks=$(grep -c '^prog rank' "$tmp/lower")
    withcopy=$(awk '/^prog rank/ {r = $3} /out of place/ {seen[r] = 1} END {print length(seen)}' "$tmp/lower")
    if [[ $rc == 0 && $ranks == "$n" && $withcopy == "$n" ]]; then
      ok "$name $plan: every rank reduces a still-read value out of place"
    else
      no "$name $plan: exit $rc, $ranks ranks, $withcopy with an out-of-place all-reduce"
      tail -n 3 "$tmp/err"
    fi
  done
done
# and a plain dp build has nothing to copy: in place stays the default
"$nn" "$top/examples/mlp.ini" --devices 4 --dump=lower >"$tmp/lower" 2>/dev/null
grep -q "out of place" "$tmp/lower" && no "mlp dp4 copies before an all-reduce" || ok "mlp dp4: every all-reduce in place"
echo "$pass passed, $fail failed"
((fail == 0))
