#!/usr/bin/env bash
# tests/recycle.sh -- recycling ([train] recycle = R, AlphaFold's; docs/plans.md,
# Recycling) against an oracle written out by hand: the same model with its
# three forward passes as separate ops, the first pass reading an input of
# zeros, and passes 0 and 1 reading params of their own (a0_*, a1_*, same
# initial values), so that only pass 2 sends gradients to w1, w2, w3 -- what
# recycling's no-gradient passes must give.  Checked: the step-1 loss (the
# forward: passes chained, zeros first) and w1, w2, w3 after one SGD step
# (the gradient: only the last pass); the same hand-written model with the
# params shared by all passes (gradients through every pass) must differ, so
# the check can fail.  Then: no backward op of an earlier pass in
# --dump=autograd, plan.txt's 3f1b pipeline (three forward tasks and one
# backward per micro-batch and chunk), and the errors.  About 5 s.
. "$(dirname "$0")/lib.sh" recycle

head='[model]
name = rmini
seed = 3
[dims]
B = 4
D = 8
H = 16
[input x]
shape = B D
[input t]
shape = B D
[param w1]
shape = D H
init = const 0.05
[param w2]
shape = H D
init = const -0.03
[param w3]
shape = D D
init = const 0.02'
tail='[op head]
kind = matmul
in = z, w3
out = p
[op loss]
kind = mse_loss
in = p, t
out = loss
[train]
loss = loss
optimizer = sgd
lr = 0.5
steps = 1'
# pass PREFIX IN W OUT: mix, fc, gelu, fc2 of one pass
pass() {
  printf '[op %smix]\nkind = add\nin = x, %s\nout = %sm\n' "$1" "$2" "$1"
  printf '[op %sfc]\nkind = matmul\nin = %sm, %sw1\nout = %sh\n' "$1" "$1" "$3" "$1"
  printf '[op %sact]\nkind = gelu\nin = %sh\nout = %sg\n' "$1" "$1" "$1"
  printf '[op %sfc2]\nkind = matmul\nin = %sg, %sw2\nout = %s\n' "$1" "$1" "$3" "$4"
}
{
  echo "$head"
  printf '[op prev]\nkind = recycle\nin = z\nout = zp\nshape = B D\n'
  pass "" zp "" z
  echo "$tail"
  echo "recycle = 3"
} >"$tmp/rcy.ini"
# by hand; $1: the earlier passes' param prefix (a0_/a1_: params of their own, "": shared)
byhand() {
  echo "$head"
  for a in a0_ a1_; do
    [[ $1 == own ]] && printf '[param %sw1]\nshape = D H\ninit = const 0.05\n[param %sw2]\nshape = H D\ninit = const -0.03\n' $a $a
  done
  printf '[input z0]\nshape = B D\ndata = zeros\n'
  if [[ $1 == own ]]; then pass p0_ z0 a0_ z1; pass p1_ z1 a1_ z2; else pass p0_ z0 "" z1; pass p1_ z1 "" z2; fi
  pass "" z2 "" z
  echo "$tail"
}
byhand own >"$tmp/own.ini"
byhand shared >"$tmp/shared.ini"
for m in rcy own shared; do
  "$nn" "$tmp/$m.ini" -o "$tmp/$m" -q >"$tmp/$m.build" 2>&1 || no "build $m: $(tail -n 3 "$tmp/$m.build")"
  "$tmp/$m/launch" --steps 1 --save "$tmp/$m.safetensors" >"$tmp/$m.log" 2>&1 || no "run $m: $(tail -n 3 "$tmp/$m.log")"
done
cmp=$(python3 - "$tmp" <<'PY'
import array, json, re, struct, sys
d = sys.argv[1]
def loss(m):
    return float(re.search(r"^step 1/1 loss (\S+)", open(f"{d}/{m}.log").read(), re.M).group(1))
def tensors(m):
    b = open(f"{d}/{m}.safetensors", "rb").read()
    n, = struct.unpack_from("<Q", b, 0)
    h = json.loads(b[8:8 + n])
    out = {}
    for k, t in h.items():
        if k == "__metadata__": continue
        s, e = t["data_offsets"]
        a = array.array("f"); a.frombytes(b[8 + n + s:8 + n + e]); out[k] = a
    return out
def rel(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5
    den = max(sum(x * x for x in a) ** 0.5, 1e-30)
    return num / den
r, o, s = tensors("rcy"), tensors("own"), tensors("shared")
dl = abs(loss("rcy") - loss("own")) / abs(loss("own"))
dw = max(rel(r[k], o[k]) for k in ("w1", "w2", "w3"))
ds = max(rel(s[k], o[k]) for k in ("w1", "w2"))
print(f"{dl:.3g} {dw:.3g} {ds:.3g}")
PY
)
read -r dl dw ds <<<"$cmp"
python3 -c "import sys; sys.exit(0 if float('$dl') < 1e-6 else 1)" 2>/dev/null &&
  ok "recycle = 3: the step-1 loss is the hand-unrolled model's (relative difference $dl)" || no "recycle loss: $cmp"
python3 -c "import sys; sys.exit(0 if float('$dw') < 1e-6 else 1)" 2>/dev/null &&
  ok "recycle = 3: w1, w2, w3 after one step are the ones only the last pass's gradient gives ($dw)" ||
  no "recycle weights: $cmp"
python3 -c "import sys; sys.exit(0 if float('$ds') > 1e-4 else 1)" 2>/dev/null &&
  ok "  ... and gradients through every pass would differ ($ds): the check can fail" || no "control: $cmp"

# autograd: nothing of the earlier passes is differentiated, the recycled value has no gradient
"$nn" "$tmp/rcy.ini" -o "$tmp/d" -q --dump=autograd >"$tmp/ag" 2>&1
if grep -q " bwd " "$tmp/ag" && ! grep -qE " bwd d\.(p[0-9]+\.|zp)" "$tmp/ag" && grep -q "fwd p1.fc2 " "$tmp/ag"; then
  ok "--dump=autograd: passes 0 and 1 (p0.*, p1.*) run forward only; no gradient of the recycled zp"
else no "autograd of recycling: $(grep -E 'bwd d\.(p[0-9]|zp)' "$tmp/ag" | head -3)"; fi

# the pipeline: passes are each stage's chunks, 3 forwards and 1 backward per micro-batch and chunk
"$nn" "$top/tests/equiv/recycle.ini" -o "$tmp/pp" -q --devices 2 --set plan.pp=2 --set train.micro_batches=4 \
  >"$tmp/pp.log" 2>&1 || no "recycle pp 2 build: $(tail -n 3 "$tmp/pp.log")"
if grep -q "schedule 3f1b (recycling" "$tmp/pp/plan.txt" && python3 - "$tmp/pp/plan.txt" <<'PY'
import re, sys
orders = re.findall(r"^    order  (.*)$", open(sys.argv[1]).read(), re.M)
assert len(orders) == 2
for o in orders:
    t = o.split()
    assert sorted(x for x in t if x[0] == "F") == sorted(f"F{m}.{c}" for m in range(4) for c in range(3)), t
    # each micro-batch: its three passes in order, then its backward
    for m in range(4):
        f = [t.index(f"F{m}.{c}") for c in range(3)]
        assert f == sorted(f) and t.index(f"B{m}.2") > f[2], (m, t)
PY
then ok "pp 2: plan.txt's 3f1b order runs each micro-batch's three passes in order, then its backward"
else no "recycle pipeline: $(grep -A12 '^pipeline' "$tmp/pp/plan.txt")"; fi

# errors: exit 2 at the line, saying what is wrong
sed 's/^recycle = 3$/recycle = 2/' "$tmp/rcy.ini" >"$tmp/r2.ini"
grep -v "^shape = B D$" "$tmp/rcy.ini" | sed 's/^\[input x\]$/[input x]\nshape = B D/; s/^\[input t\]$/[input t]\nshape = B D/' >"$tmp/noshape.ini"
sed 's/^shape = B D$/shape = B H/' "$tmp/rcy.ini" | sed '0,/shape = B H/s//shape = B D/;0,/shape = B H/s//shape = B D/' >"$tmp/badshape.ini"
grep -v "^recycle = 3$" "$tmp/shared.ini" >"$tmp/norcy.ini"
echo "recycle = 3" >>"$tmp/norcy.ini"
expect_rc 2 "recycle = 3 without a recycle op" "$nn" "$tmp/norcy.ini" -o "$tmp/e"
says "recycle = 3, but no op is of kind recycle" "no recycle op"
expect_rc 2 "a recycle op without shape" "$nn" "$tmp/noshape.ini" -o "$tmp/e"
says "recycle op 'prev' needs shape" "no shape"
expect_rc 2 "a recycle op whose shape is not its input's" "$nn" "$tmp/badshape.ini" -o "$tmp/e"
says "p0.zp comes from recycle op 'p0.prev', shaped by its \`shape\`" "bad shape"
expect_rc 2 "schedule 3f1b with recycle 2" "$nn" "$tmp/r2.ini" -o "$tmp/e" --devices 2 --set plan.pp=2 \
  --set plan.schedule=3f1b
says "schedule '3f1b': recycle is 2" "3f1b"
expect_rc 2 "chunks with recycle" "$nn" "$top/tests/equiv/recycle.ini" -o "$tmp/e" --devices 2 --set plan.pp=2 \
  --set plan.chunks=2
says "[plan] chunks 2 with recycle 3: not built" "chunks"
expect_rc 2 "zb-h1 with recycle" "$nn" "$top/tests/equiv/recycle.ini" -o "$tmp/e" --devices 2 --set plan.pp=2 \
  --set plan.schedule=zb-h1
says "[plan] schedule zb-h1 with recycle 3: not built" "zb-h1"
# interleaved is chunks of the layers, which the passes already are (it built 3f1b before 2027-01)
expect_rc 2 "interleaved with recycle" "$nn" "$top/tests/equiv/recycle.ini" -o "$tmp/e" --devices 2 --set plan.pp=2 \
  --set plan.schedule=interleaved
says "[plan] schedule interleaved with recycle 3: not built" "interleaved"

echo "$pass passed, $fail failed"
((fail == 0))
