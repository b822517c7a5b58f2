#!/usr/bin/env bash
# tests/viewops.sh -- the ops that move elements without computing (issue 13):
# split then concat, transpose twice, split_heads then merge_heads are each the
# identity, so a model with them in the way trains bitwise like one without;
# a different order (concat of the parts swapped) does not.  The oracle is the
# model without them: h = x w, loss = mse(h, y).
. "$(dirname "$0")/lib.sh" viewops

# spec NAME OPS: x [B, T, C] @ w -> h; OPS (sections) turn h into z; loss = mse(z, y)
spec() {
  local name=$1 ops=$2
  cat >"$tmp/$name.ini" <<INI
[model]
name = $name
seed = 11
[dims]
B = 4
T = 6
C = 8
[input x]
shape = B T C
[input y]
shape = B T C
[param w]
shape = C C
init = normal 0.3
[op fc]
kind = matmul
in = x, w
out = h
$ops
[op loss]
kind = mse_loss
in = z, y
out = loss
[train]
loss = loss
optimizer = sgd
lr = 0.5
steps = 6
INI
}
spec plain ""
sed -i 's/^out = h$/out = z/' "$tmp/plain.ini"   # (the loss reads the matmul's output itself)
spec splitcat $'[op sp]\nkind = split\nfirst = 3\nin = h\nout = a, b\n[op cat]\nkind = concat\nin = a, b\nout = z'
spec swapped $'[op sp]\nkind = split\nfirst = 3\nin = h\nout = a, b\n[op cat]\nkind = concat\nin = b, a\nout = z'
spec transpose2 $'[op t1]\nkind = transpose\nin = h\nout = ht\n[op t2]\nkind = transpose\nin = ht\nout = z'
spec heads $'[op sh]\nkind = split_heads\nheads = 4\nin = h\nout = hh\n[op mh]\nkind = merge_heads\nin = hh\nout = z'
spec slicefull $'[op sl]\nkind = slice\nstart = 0\nstop = T\nin = h\nout = z'
# slice against the same positions taken by transpose, split and transpose back (y: the window's shape);
# its backward (pad: zeros outside the window) against concat's with the unused part's zeros
spec slice1 $'[op sl]\nkind = slice\nstart = 0\nstop = 2\nin = h\nout = z'
spec tsplit1 $'[op t1]\nkind = transpose\nin = h\nout = ht\n[op sp]\nkind = split\nfirst = 2\nin = ht\nout = a, b\n[op t2]\nkind = transpose\nin = a\nout = z'
spec slice2 $'[op sl]\nkind = slice\nstart = 2\nstop = T\nin = h\nout = z'
spec tsplit2 $'[op t1]\nkind = transpose\nin = h\nout = ht\n[op sp]\nkind = split\nfirst = 2\nin = ht\nout = a, b\n[op t2]\nkind = transpose\nin = b\nout = z'
for s in slice1 tsplit1; do sed -i '/^\[input y\]$/{n;s/^shape = B T C$/shape = B 2 C/}' "$tmp/$s.ini"; done
for s in slice2 tsplit2; do sed -i '/^\[input y\]$/{n;s/^shape = B T C$/shape = B T-2 C/}' "$tmp/$s.ini"; done

losses() { grep '^step' "$tmp/$1.log" | awk '{print $4}' | tr '\n' ' '; }
for s in plain splitcat swapped transpose2 heads slicefull slice1 tsplit1 slice2 tsplit2; do
  "$nn" "$tmp/$s.ini" -o "$tmp/$s" -q && "$tmp/$s/launch" >"$tmp/$s.log" 2>&1 || no "build or run $s: $(tail -n 3 "$tmp/$s.log")"
done
ref=$(losses plain)
[[ -n $ref ]] || no "the plain model gave no losses"
for s in splitcat transpose2 heads slicefull; do
  got=$(losses "$s")
  [[ -n $got && $got == "$ref" ]] && ok "$s is the identity: the same 6 losses bitwise as without it" ||
    no "$s: losses '$got', without it '$ref'"
done
for p in "slice1 tsplit1" "slice2 tsplit2"; do
  read -r a b <<<"$p"
  la=$(losses "$a") lb=$(losses "$b")
  [[ -n $la && $la == "$lb" ]] && ok "$a (slice) trains bitwise like $b (transpose, split, transpose): 6 losses" ||
    no "$a: '$la', $b: '$lb'"
done
[[ $(losses slice1) != $(losses slice2) ]] || no "slice1 and slice2 (other windows) gave the same losses"
got=$(losses swapped)
[[ -n $got && $got != "$ref" ]] && ok "concat of the parts swapped trains differently (the order is kept)" ||
  no "swapped: '$got' against '$ref'"
# ... and under 2 devices (dp, tp), the column ops and the views train as on one
for s in splitcat transpose2 heads slice2; do
  expect_rc 0 "verify $s on dp 2" "$nn" verify "$tmp/$s.ini" --devices 2
  expect_rc 0 "verify $s on tp 2" "$nn" verify "$tmp/$s.ini" --devices 2 --set plan.policy=tp
done

echo "$pass passed, $fail failed"
((fail == 0))
