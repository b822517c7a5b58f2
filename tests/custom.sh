#!/usr/bin/env bash
# tests/custom.sh -- custom ops ([custom NAME], docs/custom-ops.md): a user's C kernel
# trains like the built-ins it replaces, the planner splits it through its annotation,
# and every mistake in a [custom] section or its C file is a clear exit 2.
. "$(dirname "$0")/lib.sh" custom
spec=$top/tests/equiv/custom.ini
same_losses() {   # LOG_A LOG_B STEPS: the per-step losses within 1e-5 relative
  python3 - "$@" <<'PY'
import re, sys
a, b = ([float(x) for x in re.findall(r"^step \d+/\d+ loss (\S+)", open(f).read(), re.M)] for f in sys.argv[1:3])
assert len(a) == len(b) == int(sys.argv[3]), (a, b)
worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))
assert worst <= 1e-5, worst
PY
}

# custom.ini is swiglu.ini with silu and mul as one custom op: the same losses on 1 device
"$nn" "$spec" -o "$tmp/c1" -q && "$nn" "$top/tests/equiv/swiglu.ini" -o "$tmp/s1" -q || no "build custom.ini / swiglu.ini"
"$tmp/c1/launch" --steps 10 >"$tmp/c1.log" 2>&1 && "$tmp/s1/launch" --steps 10 >"$tmp/s1.log" 2>&1 || no "run them"
if same_losses "$tmp/c1.log" "$tmp/s1.log" 10
then ok "custom swiglu (a C kernel) trains like the built-in silu and mul (10 steps, losses within 1e-5)"
else no "custom.ini and swiglu.ini disagree: $(tail -n 2 "$tmp/c1.log") / $(tail -n 2 "$tmp/s1.log")"; fi

# custom_grad.ini: the same op with its backward as built-in ops (grad =): custom.ini's losses
gspec=$top/tests/equiv/custom_grad.ini
"$nn" "$gspec" -o "$tmp/g1" -q && "$tmp/g1/launch" --steps 10 >"$tmp/g1.log" 2>&1 || no "build or run custom_grad.ini"
if same_losses "$tmp/g1.log" "$tmp/c1.log" 10
then ok "grad = built-in ops (mul, silu_bwd, silu) trains like the C backward kernel (10 steps, losses within 1e-5)"
else no "custom_grad.ini and custom.ini disagree: $(tail -n 2 "$tmp/g1.log") / $(tail -n 2 "$tmp/c1.log")"; fi
"$nn" "$gspec" -o "$tmp/gtp" --devices 2 --set plan.policy=tp -q || no "custom_grad tp build"
grep -qE "^  d\.h\.0\.glu\.dx1 +silu_bwd +split" "$tmp/gtp/plan.txt" &&
  grep -qE "^  d\.h\.0\.glu\.dx2 +mul +split" "$tmp/gtp/plan.txt" &&
  ok "tp: the grad ops are built-ins the planner splits (plan.txt)" ||
  no "custom_grad tp plan: $(grep -E 'glu' "$tmp/gtp/plan.txt" | head -4)"
# the planner splits it through its annotation: f under tp, its backward too
"$nn" "$spec" -o "$tmp/tp" --devices 2 --set plan.policy=tp -q || no "tp build"
grep -qE "^  h\.0\.glu +swiglu +split f /2 on 0,1" "$tmp/tp/plan.txt" &&
  grep -qE "^  d\.h\.0\.g +swiglu_bwd +split f /2" "$tmp/tp/plan.txt" &&
  ok "tp: the custom op and its backward are split along f (plan.txt)" ||
  no "tp plan: $(grep -E 'glu|d\.h\.0\.g ' "$tmp/tp/plan.txt" | head -3)"

# mistakes: exit 2 at the line, saying what is wrong
cp "$top/tests/equiv/custom_swiglu.c" "$top/tests/equiv/custom_swiglu.cu" "$tmp/"
mk() { sed "s|cpu = custom_swiglu.c|cpu = $tmp/custom_swiglu.c|; s|cuda = custom_swiglu.cu|cuda = $tmp/custom_swiglu.cu|" \
  "${src:-$spec}" >"$tmp/$1.ini"; }   # (src: another spec than custom.ini)
edit() { mk "$1"; python3 - "$tmp/$1.ini" "$2" "$3" <<'PY'
import sys
p, a, b = sys.argv[1:]
s = open(p).read()
assert s.count(a) >= 1, a
open(p, "w").write(s.replace(a, b, 1))
PY
}
# ... a wrong grad is a clear exit 2: at the key when it reads wrong, at the op's use when the shapes do not fit
src=$gspec edit gkind "silu_bwd dyu, x1" "swish dyu, x1"
expect_rc 2 "grad with an unknown op kind" "$nn" "$tmp/gkind.ini" -o "$tmp/e"
says "custom op 'swiglu': grad op 2: 'swish' is not a built-in op kind" "grad kind"
src=$gspec edit gloss "silu x1 -> s" "mse_loss x1, x2 -> s"
expect_rc 2 "grad with a loss" "$nn" "$tmp/gloss.ini" -o "$tmp/e"
says "'mse_loss' is not a built-in op that grad may use" "grad loss"
src=$gspec edit gname "mul dy, s -> dx2" "mul dy, t -> dx2"
expect_rc 2 "grad reading an unknown name" "$nn" "$tmp/gname.ini" -o "$tmp/e"
says "grad op 4 (mul) reads 't', which is none of its names nor an output of an op before it" "grad name"
src=$gspec edit gnin "silu x1 -> s" "silu x1, x2 -> s"
expect_rc 2 "grad with the wrong inputs for an op" "$nn" "$tmp/gnin.ini" -o "$tmp/e"
says "grad op 3 (silu) takes 1 input and makes 1 output" "grad arity"
src=$gspec edit gtwice "silu x1 -> s" "silu x1 -> dyu"
expect_rc 2 "grad writing a name twice" "$nn" "$tmp/gtwice.ini" -o "$tmp/e"
says "writes 'dyu', which an op before it already writes" "grad twice"
src=$gspec edit gdx "mul dy, s -> dx2" "mul dy, s -> dx3"
expect_rc 2 "grad writing a gradient past the inputs" "$nn" "$tmp/gdx.ini" -o "$tmp/e"
says "writes 'dx3', but the gradients are dx1 .. dx2" "grad dx"
src=$gspec edit gboth "flops = 6" $'flops = 6\nbackward = swiglu'
expect_rc 2 "grad and backward together" "$nn" "$tmp/gboth.ini" -o "$tmp/e"
says "custom op 'swiglu' has both backward and grad" "grad and backward"
src=$gspec edit gmiss "; mul dy, s -> dx2" ""
expect_rc 2 "grad without an input's gradient" "$nn" "$tmp/gmiss.ini" -o "$tmp/e"
says "(h.3.u) of custom op swiglu needs a gradient, and its grad writes no dx2" "grad missing dx"
src=$gspec edit gshape "mul dy, s -> dx2" "transpose s -> dx2"
expect_rc 2 "grad giving a gradient of the wrong shape" "$nn" "$tmp/gshape.ini" -o "$tmp/e"
says "custom op swiglu's grad gives dx2 a shape other than input 2's" "grad shape"

edit name "[custom swiglu]" "[custom swi.glu]"
expect_rc 2 "a custom op name that is not a C identifier" "$nn" "$tmp/name.ini" -o "$tmp/e"
says "custom op name 'swi.glu' is not a C identifier" "name"
edit builtin "[custom swiglu_bwd]" "[custom matmul]"
expect_rc 2 "a custom op named as a built-in kind" "$nn" "$tmp/builtin.ini" -o "$tmp/e"
says "custom op 'matmul' has the name of a built-in op kind" "built-in name"
edit arrow "annotation = * f, * f -> * f" "annotation = * f, * f"
expect_rc 2 "an annotation without ->" "$nn" "$tmp/arrow.ini" -o "$tmp/e"
says "annotation of custom op 'swiglu' has no '->'" "no arrow"
edit anno "annotation = * f, * f -> * f" "annotation = * f, * f -> * g+ ("
expect_rc 2 "an annotation that does not parse" "$nn" "$tmp/anno.ini" -o "$tmp/e"
says "annotation of custom op 'swiglu':" "bad annotation"
edit nofile "cpu = $tmp/custom_swiglu.c" "cpu = nope.c"
expect_rc 2 "a kernel file that does not exist" "$nn" "$tmp/nofile.ini" -o "$tmp/e"
says "custom op 'swiglu': cannot read" "no file"
edit nobwd "backward = swiglu_bwd" "backward = swiglu_back"
expect_rc 2 "backward naming no section" "$nn" "$tmp/nobwd.ini" -o "$tmp/e"
says "no [custom swiglu_back] section" "unknown backward"
edit arity "annotation = * f, * f, * f -> * f, * f" "annotation = * f, * f -> * f, * f"
expect_rc 2 "a backward with the wrong inputs" "$nn" "$tmp/arity.ini" -o "$tmp/e"
says "backward 'swiglu_bwd' of custom op 'swiglu' takes 2 inputs and makes 2 outputs" "backward arity"
edit noback "backward = swiglu_bwd" ""
expect_rc 2 "a gradient through a custom op without backward" "$nn" "$tmp/noback.ini" -o "$tmp/e"
says "a gradient must flow through custom op swiglu, which has no backward" "no backward"
edit nin "in = h.g, h.u" "in = h.g"
expect_rc 2 "a custom op given too few inputs" "$nn" "$tmp/nin.ini" -o "$tmp/e"
says "op 'h.glu' (swiglu) takes 2 inputs, got 1" "inputs"
edit shape "in = h.g, h.u" "in = h.g, h.n"
expect_rc 2 "inputs that do not fit the annotation" "$nn" "$tmp/shape.ini" -o "$tmp/e"
says "swiglu is \`* f, * f -> * f\`" "shapes"
# the cuda target: each custom op used, and its backward, needs cuda = FILE.cu with its kernel
mk nocuda && sed -i '/^cuda = /d' "$tmp/nocuda.ini"
expect_rc 2 "a custom op without cuda = on the cuda target" "$nn" "$tmp/nocuda.ini" -o "$tmp/e" --target cuda
says "custom op 'swiglu' has no CUDA kernel (no cuda = in [custom swiglu])" "cuda"
mk nobwdcuda && python3 - "$tmp/nobwdcuda.ini" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read(); i = s.rindex("cuda = "); j = s.index("\n", i)
open(p, "w").write(s[:i] + s[j + 1:])
PY
expect_rc 2 "a custom backward without cuda = on the cuda target" "$nn" "$tmp/nobwdcuda.ini" -o "$tmp/e" --target cuda
says "has no CUDA kernel (no cuda = in [custom swiglu_bwd])" "cuda backward"
edit cuname "cuda = $tmp/custom_swiglu.cu" "cuda = $tmp/none.cu"
expect_rc 2 "a cuda = file that does not exist" "$nn" "$tmp/cuname.ini" -o "$tmp/e" --target cuda
says "custom op 'swiglu': cannot read '$tmp/none.cu'" "cuda file"
sed 's/NNSC_CUSTOM_CUDA(swiglu_bwd)/NNSC_CUSTOM_CUDA(swiglu_back)/' "$tmp/custom_swiglu.cu" >"$tmp/nokern.cu"
mk nokern && sed -i "s|cuda = $tmp/custom_swiglu.cu|cuda = $tmp/nokern.cu|" "$tmp/nokern.ini"
expect_rc 2 "a cuda file without the section's kernel" "$nn" "$tmp/nokern.ini" -o "$tmp/e" --target cuda
says "custom op 'swiglu_bwd': $tmp/nokern.cu defines no NNSC_CUSTOM_CUDA(swiglu_bwd)" "cuda kernel missing"
sed 's/float s = g\[k\]/float s = g[k] +/' "$tmp/custom_swiglu.cu" >"$tmp/badcu.cu"
mk badcu && sed -i "s|cuda = $tmp/custom_swiglu.cu|cuda = $tmp/badcu.cu|" "$tmp/badcu.ini"
expect_rc 2 "a cuda file that does not compile" "$nn" "$tmp/badcu.ini" -o "$tmp/e" --target cuda
says "a custom op's CUDA kernel ($tmp/badcu.cu) does not compile" "cuda compile"
says "$tmp/badcu.cu(12): error: expected an expression" "NVRTC names the file and line"
# the C file: does not compile; compiles but lacks a kernel
mk cc
echo "this is not C;" >>"$tmp/custom_swiglu.c"
expect_rc 2 "a kernel file that does not compile" "$nn" "$tmp/cc.ini" -o "$tmp/e"
says "the kernel of custom op 'swiglu' ($tmp/custom_swiglu.c) does not compile" "cc"
sed 's/^NNSC_CUSTOM(swiglu_bwd)$/NNSC_CUSTOM(swiglu_bwd2)/' "$top/tests/equiv/custom_swiglu.c" >"$tmp/custom_swiglu.c"
expect_rc 2 "a kernel file without one of its kernels" "$nn" "$tmp/cc.ini" -o "$tmp/e"
says "custom op 'swiglu_bwd': $tmp/custom_swiglu.c defines no kernel nnsc_custom_swiglu_bwd" "no symbol"
[[ ! -e $tmp/e/rank ]] && ok "  ... and writes no rank" || no "a rank was linked without its kernel"

# check-op: the kernels and annotations of the examples pass
for op in swiglu swiglu_bwd; do
  expect_rc 0 "check-op custom.ini $op" "$nn" check-op "$spec" "$op"
done
for op in rownorm sqsum; do
  expect_rc 0 "check-op custom_norm.ini $op" "$nn" check-op "$top/tests/equiv/custom_norm.ini" "$op"
done
grep -qF "ok   sqsum: split o+ (8 -> 4 + 4) gives the unsplit result" "$tmp/out" &&
  grep -qF "ok   sqsum_bwd: gradient of input 1 'p' against finite differences" "$tmp/out" &&
  ok "  ... splits the + dim (partial sums added) and checks the gradient" || no "check-op sqsum: $(cat "$tmp/out")"
# ... and catches a wrong annotation, a wrong gradient, a kernel that ignores acc
cp "$top/tests/equiv/custom_norm.c" "$tmp/"
sed "s|cpu = custom_norm.c|cpu = $tmp/custom_norm.c|; /^cuda = /d" "$top/tests/equiv/custom_norm.ini" >"$tmp/n.ini"
sed 's/^annotation = \* f^ -> \* f^$/annotation = * f -> * f/' "$tmp/n.ini" >"$tmp/nf.ini"
expect_rc 1 "check-op: an RMS norm's row dim marked splittable" "$nn" check-op "$tmp/nf.ini" rownorm
grep -qF "FAIL rownorm: dim 'f' is marked splittable, but splitting it (64 -> 32 + 32) changes output 1 'y1'" "$tmp/out" &&
  ok "  ... names dim 'f' and the output it changes" || no "check-op rownorm f: $(cat "$tmp/out")"
sed 's/^annotation = \* o+ -> \*$/annotation = * o -> */' "$tmp/n.ini" >"$tmp/no.ini"
expect_rc 1 "check-op: a sum's dim not marked +" "$nn" check-op "$tmp/no.ini" sqsum
grep -qF "FAIL sqsum: dim 'o' is marked splittable" "$tmp/out" && grep -qF "or '+' if the parts' outputs are partial sums" "$tmp/out" &&
  ok "  ... names dim 'o' and suggests +" || no "check-op sqsum o: $(cat "$tmp/out")"
# attrs reach the kernel (and its backward): sqsum's scale 0.5 against 1
"$nn" "$top/tests/equiv/custom_norm.ini" -o "$tmp/a05" -q && "$tmp/a05/launch" --steps 3 >"$tmp/a05.log" 2>&1 &&
  "$nn" "$top/tests/equiv/custom_norm.ini" -o "$tmp/a1" -q --set "op sq.attrs=1" && "$tmp/a1/launch" --steps 3 >"$tmp/a1.log" 2>&1 ||
  no "building or running custom_norm.ini with attrs 0.5 and 1"
l05=$(grep -m1 '^step 1/' "$tmp/a05.log" | awk '{print $4}') l1=$(grep -m1 '^step 1/' "$tmp/a1.log" | awk '{print $4}')
[[ -n $l05 && -n $l1 && $l05 != "$l1" ]] && ok "attrs = 0.5 and 1 give different first losses ($l05, $l1): the kernel reads c->attr" ||
  no "attrs: first losses $l05 and $l1"
expect_rc 2 "attrs that are not numbers" "$nn" "$top/tests/equiv/custom_norm.ini" -o "$tmp/e" --set "op sq.attrs=0.5, x"
says "attrs: " "attrs"
sed 's/2.0f \* a \* p->data/a * p->data/' "$top/tests/equiv/custom_norm.c" >"$tmp/custom_norm.c"
expect_rc 1 "check-op: a backward off by a factor 2" "$nn" check-op "$tmp/n.ini" sqsum
grep -qE "FAIL sqsum_bwd: gradient of input 1 'p' against finite differences" "$tmp/out" &&
  ok "  ... the gradient check fails" || no "check-op grad: $(cat "$tmp/out")"
sed 's/NNSC_PUT(c, y\[k\], s \* u\[k\])/y[k] = s * u[k]/' "$top/tests/equiv/custom_swiglu.c" >"$tmp/custom_swiglu.c"
mk acc
expect_rc 1 "check-op: a kernel that ignores acc" "$nn" check-op "$tmp/acc.ini" swiglu
grep -qF "FAIL swiglu: acc = 1 adds into the outputs" "$tmp/out" && ok "  ... the acc check fails" ||
  no "check-op acc: $(cat "$tmp/out")"
expect_rc 2 "check-op: no such custom op" "$nn" check-op "$spec" swiglu3
says "has no [custom swiglu3] section" "unknown"
says "its custom ops: swiglu, swiglu_bwd" "unknown hint"
printf '[custom lonely]\nannotation = * -> *\ncpu = custom_swiglu.c\n' >>"$tmp/acc.ini"
expect_rc 2 "check-op: a custom op no [op] uses" "$nn" check-op "$tmp/acc.ini" lonely
says "no [op] is of kind lonely" "unused"
expect_rc 2 "check-op with -o" "$nn" check-op "$spec" swiglu -o "$tmp/x"
says "check-op writes nothing" "-o"

# two outputs, both reaching the loss, and a backward taking both gradients (custom_pair.ini):
# the same losses as the built-ins; with output 2 alone reaching the loss, output 1's gradient is zeros
pair=$top/tests/equiv/custom_pair.ini pairb=$top/tests/equiv/custom_pair_builtin.ini
for v in both only2; do
  extra=()
  [[ $v == only2 ]] && extra=(--set "op h.sum.in=h.p2, h.p2")
  "$nn" "$pair" -o "$tmp/p-$v" -q "${extra[@]}" && "$nn" "$pairb" -o "$tmp/pb-$v" -q "${extra[@]}" &&
    "$tmp/p-$v/launch" --steps 8 >"$tmp/p-$v.log" 2>&1 && "$tmp/pb-$v/launch" --steps 8 >"$tmp/pb-$v.log" 2>&1 ||
    no "build or run custom_pair.ini / custom_pair_builtin.ini ($v)"
  if python3 - "$tmp/p-$v.log" "$tmp/pb-$v.log" <<'PY'
import re, sys
a, b = ([float(x) for x in re.findall(r"^step \d+/\d+ loss (\S+)", open(f).read(), re.M)] for f in sys.argv[1:])
assert len(a) == len(b) == 8, (a, b)
worst = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))
assert worst <= 1e-5, worst
PY
  then ok "custom pair ($v): a two-output op with a two-gradient backward trains like the built-ins (8 steps, 1e-5)"
  else no "custom pair ($v): $(tail -n 2 "$tmp/p-$v.log") / $(tail -n 2 "$tmp/pb-$v.log")"; fi
done
"$nn" "$pair" --set "op h.sum.in=h.p2, h.p2" --stop-after autograd --dump=autograd >"$tmp/p.dump" 2>&1
grep -qE "input +f32 d\.h\.0\.p1\.zeros\[16,128\] batch=0 data=zeros" "$tmp/p.dump" &&
  ok "  ... output 1's gradient, which nothing makes, is an input of zeros" || no "zeros: $(grep -c zeros "$tmp/p.dump")"
expect_rc 0 "check-op custom_pair.ini pair (the gradients of both outputs)" "$nn" check-op "$pair" pair
sed 's/ + dy2\[k\] \* u\[k\]);/);/' "$top/tests/equiv/custom_pair.c" >"$tmp/custom_pair.c"
sed "s|cpu = custom_pair.c|cpu = $tmp/custom_pair.c|" "$pair" >"$tmp/pair-bad.ini"
expect_rc 1 "check-op: a backward that forgets output 2's gradient" "$nn" check-op "$tmp/pair-bad.ini" pair
grep -qF "FAIL pair_bwd: gradient of input 1 'h.0.g' against finite differences" "$tmp/out" &&
  ok "  ... the gradient check fails" || no "check-op pair: $(cat "$tmp/out")"
# a backward taking output 1's gradient alone: output 2 may not reach the loss, even with output 1 unused
sed -e "s|cpu = custom_pair.c|cpu = $tmp/custom_pair.c|" -e 's/^annotation = \* f, \* f, \* f, \* f -> \* f, \* f$/annotation = * f, * f, * f -> * f, * f/' \
  "$pair" >"$tmp/pair-1.ini"
expect_rc 2 "output 2 reaching the loss through a backward of output 1's gradient" "$nn" "$tmp/pair-1.ini" -o "$tmp/e" \
  --set "op h.sum.in=h.p2, h.p2"
says "output 2 (h.3.p2) of custom op pair reaches the loss, but a custom op's backward takes the gradient of output 1 only" \
  "output 2 alone"

# the cuda target: a custom op's CUDA kernel (cuda = FILE.cu) compiles with NVRTC into the build's
# kernel library, and the ranks launch it (nnsc_custom_<row>) with the op's operands. Under the
# CUDA driver double the launch runs the rank's own C kernel of the section, so these check the
# compile, the launches and their buffers against the cpu build, not the CUDA code's arithmetic
# (bench/gpu/ship.sh runs the custom case on a GPU).
mockenv=(env LD_LIBRARY_PATH="$build/tests/mock${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NNSC_THREADS=1 NNSC_TIMEOUT=30
         NNSC_MOCK_STATS=1 NNSC_MOCK_DEVICES=2)
if "$nn" "$spec" -o "$tmp/cu1" -q --target cuda && "${mockenv[@]}" "$tmp/cu1/rank0" --steps 8 >"$tmp/cu1.log" 2>&1 &&
   "$tmp/c1/rank0" --steps 8 >"$tmp/cpu8.log" 2>&1 && same_losses "$tmp/cu1.log" "$tmp/cpu8.log" 8 &&
   grep -qE "nnsc-mock-cuda: .*kernels=.*custom:[1-9]" "$tmp/cu1.log"; then
  ok "cuda target: custom.ini's swiglu and swiglu_bwd as CUDA kernels (NVRTC), launched under the driver double: the cpu build's losses (8 steps, 1e-5)"
else no "cuda target, custom.ini: $(tail -n 3 "$tmp/cu1.log")"; fi
# ... and with grad = built-in ops: the forward launches the user's kernel, the gradients the library's
if "$nn" "$gspec" -o "$tmp/cug" -q --target cuda && "${mockenv[@]}" "$tmp/cug/rank0" --steps 8 >"$tmp/cug.log" 2>&1 &&
   "$tmp/g1/rank0" --steps 8 >"$tmp/cpug8.log" 2>&1 && same_losses "$tmp/cug.log" "$tmp/cpug8.log" 8 &&
   grep -qE "nnsc-mock-cuda: .*kernels=.*custom:[1-9]" "$tmp/cug.log"; then
  ok "cuda target: custom_grad.ini (a CUDA forward kernel, the gradients as built-in kernels) under the driver double: the cpu build's losses (8 steps, 1e-5)"
else no "cuda target, custom_grad.ini: $(tail -n 3 "$tmp/cug.log")"; fi
# tp 2 on two (double) GPUs: the norm's kernels on each rank's rows, sqsum's partial sums all-reduced, attrs
norm=$top/tests/equiv/custom_norm.ini
if "$nn" "$norm" -o "$tmp/cun" -q --target cuda --devices 2 --set plan.policy=tp &&
   "$nn" "$norm" -o "$tmp/n1" -q && "${mockenv[@]}" "$tmp/cun/launch" --steps 6 >"$tmp/cun.log" 2>&1 &&
   "$tmp/n1/rank0" --steps 6 >"$tmp/n1.log" 2>&1 && same_losses "$tmp/cun.log" "$tmp/n1.log" 6 &&
   grep -q "sq .*split" "$tmp/cun/plan.txt"; then
  ok "cuda target, tp 2: custom_norm.ini's four CUDA kernels train like 1 cpu device (6 steps, 1e-5)"
else no "cuda target, custom_norm.ini tp 2: $(tail -n 3 "$tmp/cun.log")"; fi

# check-op --target cuda: the checks again with the CUDA kernels, launched through rtlib's
# launcher as a rank launches them, their outputs against the C kernels', the guard bytes around
# every operand and the inputs unchanged (docs/custom-ops.md, check-op). Under the driver double
# the launches run the C kernels: that checks the host side, not the CUDA arithmetic (a GPU run:
# docs/performance.md). Without a driver the kernels are compiled and the run is said NOT RUN.
outs() { grep -qF -- "$1" "$tmp/out" && ok "  ... prints '$1'" || no "$2: no '$1' in: $(cat "$tmp/out")"; }
if [[ -e $build/tests/mock/libcuda.so.1 ]] && "$nn" --version | grep -q '^NVRTC [0-9]'; then
  expect_rc 0 "check-op --target cuda under the driver double" env LD_LIBRARY_PATH="$build/tests/mock" \
    "$nn" check-op "$spec" swiglu --target cuda
  outs "cuda: the kernels compile for sm_80, sm_90 (NVRTC" "check-op cuda"
  outs "(the driver DOUBLE)" "check-op cuda"
  outs "ok   swiglu_bwd [cuda]: gradient of input 2 'h.0.u' against finite differences" "check-op cuda"
  outs "ok   swiglu [cuda]: the CUDA kernel's outputs against the C kernel's" "check-op cuda"
  outs "ok   swiglu_bwd [cuda]: the CUDA kernel's outputs against the C kernel's" "check-op cuda"
  outs "ok   cuda: 78 launches, 0 wrote outside their outputs, 0 into an input" "check-op cuda"
  outs "check-op: OK" "check-op cuda"
  expect_rc 0 "check-op --target cuda, custom_norm.ini sqsum (a + split) under the double" \
    env LD_LIBRARY_PATH="$build/tests/mock" "$nn" check-op "$norm" sqsum --target cuda
  outs "ok   sqsum [cuda]: split o+ (8 -> 4 + 4) gives the unsplit result" "check-op cuda sqsum"
  # with no driver on the library path: compiled, NOT RUN, still exit 0 for the C kernels' checks
  if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    expect_rc 0 "check-op --target cuda without a driver" env LD_LIBRARY_PATH= "$nn" check-op "$spec" swiglu --target cuda
    outs "NOT RUN: no CUDA driver (libcuda.so.1) on the library path" "check-op cuda, no driver"
    outs "check-op: OK (the C kernels; the CUDA kernels compiled, NOT RUN)" "check-op cuda, no driver"
  fi
  # a section without cuda = (custom_pair.ini has none), a CUDA file that does not compile: exit 2
  expect_rc 2 "check-op --target cuda: a custom op without a CUDA kernel" "$nn" check-op "$pair" pair --target cuda
  says "custom_pair.ini:8: error: check-op --target cuda: custom op 'pair' has no CUDA kernel (no cuda = in [custom pair])" \
    "no cuda ="
  cp "$top/tests/equiv/custom_swiglu.c" "$tmp/custom_swiglu.c"
  sed 's/NNSC_PUT(c, y\[k\], s \* u\[k\]);/NNSC_PUT(c, y[k], s * u[k])/' "$top/tests/equiv/custom_swiglu.cu" >"$tmp/custom_swiglu.cu"
  mk cubad
  expect_rc 2 "check-op --target cuda: a CUDA file that does not compile" "$nn" check-op "$tmp/cubad.ini" swiglu --target cuda
  says "error: a custom op's CUDA kernel ($tmp/custom_swiglu.cu) does not compile" "cuda compile"
  cp "$top/tests/equiv/custom_swiglu.cu" "$tmp/custom_swiglu.cu"
else
  echo "SKIP  check-op --target cuda: this build has no NVRTC or no driver double (not counted)"
fi
# a C kernel that writes into an input fails the check (the planner reads inputs again)
sed 's/NNSC_PUT(c, y\[k\], s \* u\[k\]);/NNSC_PUT(c, y[k], s * u[k]); ((float *)u)[k] = 0.0f;/' \
  "$top/tests/equiv/custom_swiglu.c" >"$tmp/custom_swiglu.c"
mk inw
expect_rc 1 "check-op: a kernel that writes into its input" "$nn" check-op "$tmp/inw.ini" swiglu
outs "FAIL C kernels: 78 calls, " "check-op input"
outs "the first: swiglu (acc 0) changed its input 2 'h.0.u'" "check-op input"

# a kernel file whose name starts with '-' (here "-oPWN.c", beside a spec given without a folder)
# is compiled as a file, never read by cc as an option (-o PWN.c)
mkdir -p "$tmp/dash"
cp "$top/tests/equiv/custom_swiglu.c" "$tmp/dash/-oPWN.c"
sed 's|cpu = custom_swiglu.c|cpu = -oPWN.c|; /^cuda = /d' "$spec" >"$tmp/dash/model.ini"
if (cd "$tmp/dash" && "$nn" model.ini -o out -q) >"$tmp/dash.log" 2>&1 && [[ -x $tmp/dash/out/rank && ! -e $tmp/dash/PWN.c ]]
then ok "a custom op's file named '-oPWN.c' is compiled as a file, not taken as cc's -o"
else no "custom file '-oPWN.c': $(tail -n 3 "$tmp/dash.log"; ls "$tmp/dash")"; fi

echo "$pass passed, $fail failed"
((fail == 0))
