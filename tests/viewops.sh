#!/usr/bin/env bash
# tests/viewops.sh -- the ops that move elements without computing (issue 13):
# split then concat, transpose twice, split_heads then merge_heads are each the
# identity, so a model with them in the way trains bitwise like one without;
# a different order (concat of the parts swapped) does not.  The oracle is the
# model without them: h = x w, loss = mse(h, y).  split and concat with
# `groups` cut every group of the last dim: against split_heads, an ungrouped
# split and merge_heads, and the plan of a fused qkv in Megatron's layout
# (tests/equiv/fused-qkv-grouped.ini) splits its attention by heads under tp.
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
spec gsplitcat $'[op sp]\nkind = split\ngroups = 2\nfirst = 1\nin = h\nout = a, b\n[op cat]\nkind = concat\ngroups = 2\nin = a, b\nout = z'
# a grouped split (2 groups of 4 columns, [1 | 3] each), its parts side by side, against the same
# cut made by viewing the groups as heads: split_heads, an ungrouped split, merge_heads
spec gsplit $'[op sp]\nkind = split\ngroups = 2\nfirst = 1\nin = h\nout = a, b\n[op cat]\nkind = concat\nin = a, b\nout = z'
spec hsplit $'[op sh]\nkind = split_heads\nheads = 2\nin = h\nout = hh\n[op sp]\nkind = split\nfirst = 1\nin = hh\nout = a4, b4\n[op ma]\nkind = merge_heads\nin = a4\nout = a\n[op mb]\nkind = merge_heads\nin = b4\nout = b\n[op cat]\nkind = concat\nin = a, b\nout = z'
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
for s in plain splitcat gsplitcat gsplit hsplit swapped transpose2 heads slicefull slice1 tsplit1 slice2 tsplit2; do
  "$nn" "$tmp/$s.ini" -o "$tmp/$s" -q && "$tmp/$s/launch" >"$tmp/$s.log" 2>&1 || no "build or run $s: $(tail -n 3 "$tmp/$s.log")"
done
ref=$(losses plain)
[[ -n $ref ]] || no "the plain model gave no losses"
for s in splitcat gsplitcat transpose2 heads slicefull; do
  got=$(losses "$s")
  [[ -n $got && $got == "$ref" ]] && ok "$s is the identity: the same 6 losses bitwise as without it" ||
    no "$s: losses '$got', without it '$ref'"
done
for p in "slice1 tsplit1 (slice) (transpose, split, transpose)" "slice2 tsplit2 (slice) (transpose, split, transpose)" \
         "gsplit hsplit (split, groups = 2) (split_heads, split, merge_heads)"; do
  read -r a b what <<<"$p"
  la=$(losses "$a") lb=$(losses "$b")
  [[ -n $la && $la == "$lb" ]] && ok "$a trains bitwise like $b, $what: 6 losses" || no "$a: '$la', $b: '$lb'"
done
[[ $(losses gsplit) != "$ref" ]] || no "gsplit (the columns reordered) gave the losses of the plain model"

[[ $(losses slice1) != $(losses slice2) ]] || no "slice1 and slice2 (other windows) gave the same losses"
got=$(losses swapped)
[[ -n $got && $got != "$ref" ]] && ok "concat of the parts swapped trains differently (the order is kept)" ||
  no "swapped: '$got' against '$ref'"
# ... and under 2 devices (dp, tp), the column ops and the views train as on one
for s in splitcat gsplitcat transpose2 heads slice2; do
  expect_rc 0 "verify $s on dp 2" "$nn" verify "$tmp/$s.ini" --devices 2
  expect_rc 0 "verify $s on tp 2" "$nn" verify "$tmp/$s.ini" --devices 2 --set plan.policy=tp
done
# a fused qkv under tp: in Megatron's layout (groups = heads) the attention splits by heads;
# in Hugging Face's ([Q | K | V], no groups) it stays whole on every rank
for f in fused-qkv-grouped fused-qkv; do
  "$nn" "$top/tests/equiv/$f.ini" -o "$tmp/$f" -q --devices 2 --set plan.policy=tp || no "build $f on tp 2"
done
grep -Eq '^  h\.0\.attn +attention +split h /2 on 0,1' "$tmp/fused-qkv-grouped/plan.txt" &&
  grep -Eq '^  h\.0\.sq +split +split g /2 on 0,1' "$tmp/fused-qkv-grouped/plan.txt" &&
  ok "fused-qkv-grouped on tp 2: the splits split their groups and the attention its heads (plan.txt)" ||
  no "fused-qkv-grouped on tp 2: $(grep -E '^  h\.0\.(sq|attn) ' "$tmp/fused-qkv-grouped/plan.txt")"
grep -Eq '^  h\.0\.attn +attention +replicate' "$tmp/fused-qkv/plan.txt" &&
  ok "fused-qkv (no groups) on tp 2: the attention stays whole (the contrast)" ||
  no "fused-qkv on tp 2: $(grep -E '^  h\.0\.attn ' "$tmp/fused-qkv/plan.txt")"

echo "$pass passed, $fail failed"
((fail == 0))
