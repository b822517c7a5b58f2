#!/usr/bin/env bash
# tests/cuda_mock.sh -- cuda-target rank executables run end to end on a
# machine without a GPU, under the test doubles of the CUDA driver and NCCL
# (build/tests/mock/libcuda.so.1 and libnccl.so.2, found through
# LD_LIBRARY_PATH; docs/testing.md, "CUDA target without a GPU").
#
# The device kernels never run here: the driver double runs rtlib's scalar
# references instead (never the cpu target's fast kernels), so what these
# runs check is the host side -- rtlib's CUDA backend (dev_cuda.c: loading,
# image choice, arena, argument packing, launch configurations, host-side
# kernels on the mirror, the device state, loss readback, checkpoints), the
# NCCL mapping (nccl.c) and the TCP rendezvous (net.c) -- by comparing each
# cuda-target run with the cpu-target 1-device run of the same model:
#
#   doubles    the exported symbols are exactly what rtlib's backend resolves
#              (rtlib/cuda/cuda_drv.h, nccl_api.h); mock_selftest: the doubles compute
#              what rtlib's references compute and refuse what a GPU would not
#              survive
#   1 device   mlp and a small gpt2-tiny (token data, warmup + cosine lr,
#              gradient clipping, evaluation), f32 and bf16 (mixed precision):
#              per-step and eval losses within 1e-5 relative, final weights
#              within 1e-4 relative L2 (the tolerances of nnsc-aot verify)
#   N devices  gpt2-tiny dp2, tp2, dp2 x tp2, pp2 and a user-constrained 4-rank plan
#              (grouped send/recv) against the same 1-device run; in bf16, tp2 x pp2
#              and tp2 with sequence parallelism (the bf16 wire: ncclBfloat16 sums,
#              plan.txt's storage line)
#   resume     a checkpoint and --resume under the doubles give the same losses
#              and bitwise the same weights as the uninterrupted run (4 ranks)
#   failures   no device, no cubin for the device (sm_75, sm_100), the stub
#              driver, no driver (said before the rendezvous), NCCL missing,
#              two ranks on one device, a rank killed:
#              one clear line and a non-zero exit, never a hang, and no shared
#              memory left behind; sm_86 runs the sm_80 cubin
#
# Without the doubles (no cuda.h / nccl.h when configuring) or without NVRTC
# (no cubins) the script says SKIP and exits 77 (tests/run.sh lists it as
# skipped); it never reports a check it could not run as passed.
# Prints one line per check and "N passed, M failed"; exits 1 on failure.
set -u
top=${NNSC_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
build=${NNSC_BUILD:-$top/build}
nn=$build/nnsc-aot
mock=$build/tests/mock
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-cuda-mock-XXXXXX")
started=()   # pids this script started, for the exit trap
trap 'kill_all; rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok    $*"; }
no() { fail=$((fail + 1)); echo "FAIL  $*"; }
skipped() { echo "SKIP  $*"; }
kill_all() { ((${#started[@]})) && kill -9 "${started[@]}" 2>/dev/null; return 0; }
finish() {
  echo "$pass passed, $fail failed"
  ((fail == 0))
  exit
}

# ---- the environment of every run under the doubles
run_env=(env LD_LIBRARY_PATH="$mock${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NNSC_THREADS=1
         NNSC_TIMEOUT=30 NNSC_MOCK_STATS=1 NNSC_MOCK_DEVICES=4)
unset NNSC_MOCK_CC NNSC_MOCK_SYNC NNSC_MOCK_PROTECT NNSC_MOCK_NODEV_INIT NNSC_NCCL_LIB

# py CMD ARGS...: comparisons of logs and safetensors files (plain python3)
py() {
  python3 - "$@" <<'EOF'
import array, json, math, re, struct, sys

def losses(path):
    """{('step', s): loss, ('eval', s): loss} from a rank-0 log."""
    out = {}
    for line in open(path, errors='replace'):
        m = re.match(r'step (\d+)/\d+ loss (\S+)', line)
        if m:
            out[('step', int(m.group(1)))] = float(m.group(2))
        m = re.match(r'eval step (\d+) loss (\S+)', line)
        if m:
            out[('eval', int(m.group(1)))] = float(m.group(2))
    return out

def tensors(path):
    """{name: array of floats} of a safetensors file (F32 only)."""
    d = open(path, 'rb').read()
    n, = struct.unpack_from('<Q', d, 0)
    hdr = json.loads(d[8:8 + n])
    out = {}
    for name, t in hdr.items():
        if name == '__metadata__':
            continue
        b, e = t['data_offsets']
        a = array.array('f')
        a.frombytes(d[8 + n + b:8 + n + e])
        out[name] = (t['dtype'], a)
    return out

def rel(a, b):
    m = max(abs(a), abs(b))
    return abs(a - b) / m if m > 0 else 0.0

cmd = sys.argv[1]
if cmd == 'compare':
    # compare REF_LOG REF_ST LOG ST LOSS_TOL WEIGHT_TOL: per-step losses within
    # LOSS_TOL relative, final weights within WEIGHT_TOL relative L2 (all
    # parameters as one vector), as nnsc-aot verify compares
    ref, got = losses(sys.argv[2]), losses(sys.argv[4])
    ltol, wtol = float(sys.argv[6]), float(sys.argv[7])
    bad = []
    if not ref or set(ref) != set(got):
        bad.append('logged steps differ: %d vs %d lines' % (len(ref), len(got)))
    worst = 0.0
    for k in sorted(ref):
        if k in got:
            r = rel(ref[k], got[k])
            worst = max(worst, r) if r == r else float('inf')
            if not r <= ltol:
                bad.append('%s %d: %.9g vs %.9g (rel %.3g)' % (k[0], k[1], ref[k], got[k], r))
    a, b = tensors(sys.argv[3]), tensors(sys.argv[5])
    num = den = 0.0
    if set(a) != set(b):
        bad.append('tensors differ: %s' % sorted(set(a) ^ set(b)))
    for name in a:
        if name not in b or len(a[name][1]) != len(b[name][1]):
            continue
        for x, y in zip(a[name][1], b[name][1]):
            num += (x - y) ** 2
            den += x * x
    w = math.sqrt(num / den) if den > 0 else math.sqrt(num)
    if not w <= wtol:
        bad.append('final weights: relative L2 difference %.3g > %g' % (w, wtol))
    print('%d losses, largest relative difference %.2g (tolerance %g); %d tensors, weights '
          'relative L2 %.2g (%g)' % (len(ref), worst, ltol, len(a), w, wtol))
    for line in bad[:10]:
        print('      ' + line)
    sys.exit(1 if bad else 0)
elif cmd == 'same':
    # same A B: the same tensors, bit for bit
    a, b = tensors(sys.argv[2]), tensors(sys.argv[3])
    diff = [n for n in a if n not in b or a[n][1].tobytes() != b[n][1].tobytes()]
    diff += [n for n in b if n not in a]
    print('%d tensors, %d differ%s' % (len(a), len(diff), (': ' + ', '.join(diff[:5])) if diff else ''))
    sys.exit(1 if diff else 0)
EOF
}

# stats LOG N: the log holds N "nnsc-mock-cuda:" lines (one per rank), each
# with launches, and every rank freed its device memory; prints rank 0's
# launch count
stats() {
  local n
  n=$(grep -c '^nnsc-mock-cuda: .* launches=[1-9]' "$1")
  [[ $n == "$2" ]] || { echo "$n of $2 ranks ran kernels under the driver double"; return 1; }
  n=$(grep -c '^nnsc-mock-cuda: .* unfreed=0 sticky=0' "$1")
  [[ $n == "$2" ]] || { echo "$(($2 - n)) ranks left device memory allocated"; return 1; }
  grep -m1 '^nnsc-mock-cuda:' "$1" | sed 's/.*launches=\([0-9]*\).*/\1 launches/'
}

# ---- prerequisites: the doubles
if [[ ! -f $mock/libcuda.so.1 || ! -f $mock/libnccl.so.2 || ! -x $mock/mock_selftest ]]; then
  echo "SKIP  the CUDA/NCCL test doubles are not built (configure found no cuda.h and nccl.h under NNSC_CUDA_HOME)"
  exit 77
fi

# ---- the doubles export what rtlib's backend resolves, and nothing else
want_cu=$(grep -o '^ *X(cu[A-Za-z0-9_]*' "$top/rtlib/cuda/cuda_drv.h" | sed 's/.*X(//' | sort)
want_nc=$(grep -o 'nccl_[A-Za-z]*_fn' "$top/rtlib/cuda/nccl_api.h" | sed 's/^nccl_\(.*\)_fn$/nccl\1/' | sort -u)
have_cu=$(nm -D --defined-only "$mock/libcuda.so.1" | awk '{print $3}' | sort)
have_nc=$(nm -D --defined-only "$mock/libnccl.so.2" | awk '{print $3}' | sort)
extra_cu="cuEventElapsedTime_v2 cuGetExportTable nnsc_mock_check nnsc_mock_enter nnsc_mock_leave"
exp_cu=$(printf '%s\n' $want_cu $extra_cu | sort -u)
if [[ -n $want_cu && $have_cu == "$exp_cu" ]]; then
  ok "libcuda.so.1 exports the $(wc -w <<<"$want_cu") functions of rtlib/cuda/cuda_drv.h, plus $extra_cu"
else
  no "libcuda.so.1 exports: $(comm -3 <(echo "$exp_cu") <(echo "$have_cu") | tr -s ' \n\t' ' ')(left: wanted only, right: exported only)"
fi
if [[ -n $want_nc && $have_nc == "$want_nc" ]]; then
  ok "libnccl.so.2 exports exactly the $(wc -w <<<"$want_nc") functions of rtlib/cuda/nccl_api.h"
else
  no "libnccl.so.2 exports: $(comm -3 <(echo "$want_nc") <(echo "$have_nc") | tr -s ' \n\t' ' ')"
fi

# ---- the doubles themselves (they compile the kernel library with NVRTC)
"$mock/mock_selftest" >"$tmp/selftest.log" 2>&1
rc=$?
if grep -q '^SKIP' "$tmp/selftest.log"; then
  skipped "$(grep '^SKIP' "$tmp/selftest.log" | sed 's/^SKIP *//')"
  skipped "nnsc-aot has no NVRTC: no cuda-target executable can be built, nothing ran"
  ((fail)) && finish
  exit 77
elif ((rc == 0)); then
  ok "mock_selftest: $(tail -n 1 "$tmp/selftest.log")"
else
  no "mock_selftest failed:"
  grep -v '^ok' "$tmp/selftest.log" | head -n 30 | sed 's/^/      | /'
fi

# ---- builds: the cpu-target references and the cuda targets
# gpt2-tiny made small (2 layers, 16 positions, 64 channels), reading the
# token file, with warmup, a cosine schedule and clipping (the device state's
# lr and grad scales matter) and an evaluation every 3 steps
steps=6
gpt=("$top/examples/gpt2-tiny.ini" --set dims.T=16 --set dims.C=64 --set dims.L=2
     --set train.warmup_steps=2 --set train.lr_schedule=cosine --set train.grad_clip=1.0
     --set train.eval_every=3 --set train.eval_steps=2
     --set "train.data=$top/data/tinytext_train.bin" --set "input tokens.stream=0"
     --set "input targets.stream=1")
# llama-tiny made small the same way: rmsnorm, rope, silu and mul on the device
llama=("$top/examples/llama-tiny.ini" --set dims.T=16 --set dims.C=64 --set dims.L=2 --set dims.F=128)
# ... and with grouped-query attention (4 query heads on 2 key/value heads)
gqa=("$top/tests/equiv/gqa.ini" --set dims.T=16 --set dims.C=64 --set dims.L=2 --set dims.F=128)
# ... and an encoder-decoder with cross-attention (16 queries over 24 keys), vocabulary-parallel loss
xattn=("$top/tests/equiv/xattn.ini")
slice=("$top/tests/equiv/slice.ini")
# attention with key lengths (a padded batch; attention_vl: 6 and 10 buffers)
padmask=("$top/tests/equiv/padmask.ini")
# attention with an additive bias, learned (attention_ab, attention_ab_bwd, attention_dbias)
abias=("$top/tests/equiv/attn-bias.ini")
# T5's relative position bias (relpos_bias, relpos_bias_bwd) read by every layer's attention_ab
relpos=("$top/tests/equiv/t5-relpos.ini")
# build NAME ARGS...: nnsc-aot ARGS -o $tmp/NAME (not under the doubles);
# failures are reported by built below
build() {
  local name=$1
  shift
  "$nn" "$@" -o "$tmp/$name" -q >"$tmp/$name.build.log" 2>&1
}
# built NAME...: each build succeeded (else FAIL with its message)
built() {
  local name all=0
  for name; do
    [[ -x $tmp/$name/launch ]] && continue
    no "build $name: $(tail -n 3 "$tmp/$name.build.log")"
    all=1
  done
  return $all
}
# run NAME ARGS...: $tmp/NAME/launch --steps $steps --save ... under the doubles;
# stdout to NAME.log, stderr to NAME.err
run() {
  local name=$1
  shift
  "${run_env[@]}" "$@" "$tmp/$name/launch" --steps "$steps" --save "$tmp/$name/final.safetensors" \
    >"$tmp/$name.log" 2>"$tmp/$name.err"
}
# check_run NAME REF RANKS DESC [LOSS_TOL WEIGHT_TOL]: NAME ran (exit 0,
# RANKS ranks under the doubles) and agrees with the cpu-target run REF
# (default tolerances: nnsc-aot verify's, 1e-5 and 1e-4)
check_run() {
  local name=$1 ref=$2 ranks=$3 desc=$4 ltol=${5:-1e-5} wtol=${6:-1e-4} rc=0 launches
  [[ -x $tmp/$name/launch && -x $tmp/$ref/launch ]] || return   # the build failed (said so)
  if [[ ! -s $tmp/$name/final.safetensors ]]; then
    no "$desc: the run failed:"
    tail -n 8 "$tmp/$name.err" "$tmp/$name.log" | sed 's/^/      | /'
    return
  fi
  if ! launches=$(stats "$tmp/$name.err" "$ranks"); then
    no "$desc: $launches"
    return
  fi
  local cmp
  cmp=$(py compare "$tmp/$ref.log" "$tmp/$ref/final.safetensors" "$tmp/$name.log" \
        "$tmp/$name/final.safetensors" "$ltol" "$wtol") || rc=1
  if ((rc == 0)); then
    ok "$desc: ${cmp%%$'\n'*} (rank 0: $launches)"
  else
    no "$desc: $cmp"
  fi
}

# two lanes of builds at once (NVRTC takes most of each cuda build's time)
(
  build mlp-cpu "$top/examples/mlp.ini"
  build gpt-cpu "${gpt[@]}"
  build gpt-bf16-cpu "${gpt[@]}" --set train.dtype=bf16
  build rcy-cpu "$top/tests/equiv/recycle.ini"
  build llama-cpu "${llama[@]}"
  build gqa-cpu "${gqa[@]}"
  build xattn-cpu "${xattn[@]}"
  build slice-cpu "${slice[@]}"
  build padmask-cpu "${padmask[@]}"
  build abias-cpu "${abias[@]}"
  build relpos-cpu "${relpos[@]}"
  build mlp "$top/examples/mlp.ini" --target cuda --arch sm_80,sm_90
  build gpt "${gpt[@]}" --target cuda --arch sm_90
  build gpt-plan "${gpt[@]}" --target cuda --arch sm_90 --devices 4 --set plan.policy=hybrid \
    --set plan.tp=2 --set "plan.trans=h.fc *0 2 n 2, h.attn h 4, h.mproj k 4, lm_head replicate 4"
  build gpt-bf16-tp2pp2 "${gpt[@]}" --set train.dtype=bf16 --target cuda --arch sm_90 --devices 4 \
    --set plan.policy=hybrid --set plan.tp=2 --set plan.pp=2 --set train.micro_batches=4
  build gpt-bf16-sp2 "${gpt[@]}" --set train.dtype=bf16 --target cuda --arch sm_90 --devices 2 \
    --set plan.policy=tp --set plan.sequence_parallel=true
) &
(
  build gpt-bf16 "${gpt[@]}" --set train.dtype=bf16 --target cuda --arch sm_90
  build gpt-dp2 "${gpt[@]}" --target cuda --arch sm_90 --devices 2 --set plan.policy=dp
  build gpt-dp2-z1 "${gpt[@]}" --target cuda --arch sm_90 --devices 2 --set plan.policy=dp --set plan.zero=1
  build gpt-dp2-z2 "${gpt[@]}" --target cuda --arch sm_90 --devices 2 --set plan.policy=dp --set plan.zero=2 \
    --set cluster.device=h100-80g
  build gpt-dp2-z3 "${gpt[@]}" --target cuda --arch sm_90 --devices 2 --set plan.policy=dp --set plan.zero=3 \
    --set cluster.device=h100-80g
  build gpt-tp2 "${gpt[@]}" --target cuda --arch sm_90 --devices 2 --set plan.policy=tp
  build gpt-dp2tp2 "${gpt[@]}" --target cuda --arch sm_90 --devices 4 --set plan.policy=hybrid \
    --set plan.tp=2
  build gpt-pp2 "${gpt[@]}" --target cuda --arch sm_90 --devices 2 --set plan.pp=2
  build gpt-pp2-ilv "${gpt[@]}" --target cuda --arch sm_90 --devices 2 --set plan.pp=2 --set plan.schedule=interleaved \
    --set "plan.stage=h.0 1, h.1 2, lnf 3"
  build gpt-pp2-ilc "${gpt[@]}" --target cuda --arch sm_90 --devices 2 --set plan.pp=2 --set plan.schedule=interlaced
  build rcy-pp2 "$top/tests/equiv/recycle.ini" --target cuda --arch sm_90 --devices 2 --set plan.pp=2
  build llama-tp2 "${llama[@]}" --target cuda --arch sm_90 --devices 2 --set plan.policy=tp
  build gqa-tp2 "${gqa[@]}" --target cuda --arch sm_90 --devices 2 --set plan.policy=tp
  build xattn-tp2 "${xattn[@]}" --target cuda --arch sm_90 --devices 2 --set plan.policy=tp
  build slice-dp2 "${slice[@]}" --target cuda --arch sm_90 --devices 2 --set train.micro_batches=2
  build padmask-tp2 "${padmask[@]}" --target cuda --arch sm_90 --devices 2 --set plan.policy=tp
  build abias-tp2 "${abias[@]}" --target cuda --arch sm_90 --devices 2 --set plan.policy=tp
  build relpos-tp2 "${relpos[@]}" --target cuda --arch sm_90 --devices 2 --set plan.policy=tp
) &
wait
built mlp-cpu gpt-cpu gpt-bf16-cpu rcy-cpu llama-cpu gqa-cpu xattn-cpu slice-cpu padmask-cpu abias-cpu relpos-cpu mlp gpt gpt-bf16 gpt-bf16-tp2pp2 gpt-bf16-sp2 \
  gpt-dp2 gpt-dp2-z1 gpt-dp2-z2 gpt-dp2-z3 gpt-tp2 gpt-dp2tp2 gpt-plan gpt-pp2 gpt-pp2-ilv gpt-pp2-ilc rcy-pp2 llama-tp2 gqa-tp2 xattn-tp2 slice-dp2 \
  padmask-tp2 abias-tp2 relpos-tp2

# the cpu-target references (no doubles involved, but the same environment)
for ref in mlp-cpu gpt-cpu gpt-bf16-cpu rcy-cpu llama-cpu gqa-cpu xattn-cpu slice-cpu padmask-cpu abias-cpu relpos-cpu; do
  [[ -x $tmp/$ref/launch ]] || continue
  run "$ref"
  [[ -s $tmp/$ref/final.safetensors ]] || no "the cpu-target reference $ref failed: $(tail -n 3 "$tmp/$ref.err")"
done

# ---- 1 device, then N devices, against the 1-device cpu-target runs
[[ -x $tmp/mlp/launch ]] && run mlp; check_run mlp mlp-cpu 1 "mlp, 1 device (sm_90)"
[[ -x $tmp/gpt/launch ]] && run gpt; check_run gpt gpt-cpu 1 "gpt2-tiny, 1 device"
# bf16: both sides round the matmul inputs alike, but sums in another order
# flip a few roundings, which training grows (tests/equiv.list's bf16 lines
# and tolerances; measured here with bf16 storage: losses 4.9e-5, weights 8.7e-4;
# tp2 x pp2 below: 2.1e-5, 1.1e-3)
[[ -x $tmp/gpt-bf16/launch ]] && run gpt-bf16
check_run gpt-bf16 gpt-bf16-cpu 1 "gpt2-tiny, 1 device, dtype bf16 (matmul_bf16)" 5e-4 3e-3
# bf16 storage across devices (docs/plans.md, Mixed precision): the stage transfers move bf16 words
# through NCCL, tp's all-reduces sum bf16 (ncclBfloat16); tests/equiv.list's bf16 tolerances
[[ -x $tmp/gpt-bf16-tp2pp2/launch ]] && run gpt-bf16-tp2pp2
check_run gpt-bf16-tp2pp2 gpt-bf16-cpu 4 "gpt2-tiny, tp2 x pp2, 4 micro-batches, dtype bf16 (bf16 storage, cvt, the bf16 wire)" 1e-3 1e-2
# sequence parallelism under bf16 storage (2 layers): every comm of a bf16 tensor on the bf16 wire --
# its 9 reduce-scatters (reducescatter_bf16, the pieces packed as words: ncclReduceScatter of
# ncclBfloat16), 10 of its 14 all-gathers (the bf16 ones: the pieces gathered and placed as words,
# ncclAllGather; the other 4 gather f32 tensors: the loss's block statistics and targets, d.wpe) and
# the embedding's all-reduce, so plan.txt's storage line says 20 move bf16, 0 f32 (the f32 wire's
# all-gathers made it 10, 10)
if [[ -s $tmp/gpt-bf16-sp2/plan.txt ]]; then
  line=$(grep -m1 '^storage ' "$tmp/gpt-bf16-sp2/plan.txt")
  nrs=$(grep -c '^  reducescatter ' "$tmp/gpt-bf16-sp2/plan.txt")
  nag=$(grep -c '^  allgather ' "$tmp/gpt-bf16-sp2/plan.txt")
  if [[ $line =~ of\ the\ ([0-9]+)\ comms\ of\ bf16\ tensors\ ([0-9]+)\ move\ bf16,\ ([0-9]+)\ f32 ]] &&
    ((nrs == 9 && nag == 14 && BASH_REMATCH[1] == 20 && BASH_REMATCH[2] == 20 && BASH_REMATCH[3] == 0)); then
    ok "gpt2-tiny, tp2, sequence parallel, dtype bf16: plan.txt's storage line has all 20 comms of bf16 tensors move bf16 (its $nrs reduce-scatters and the bf16 ones of its $nag all-gathers among them)"
  else
    no "gpt2-tiny, tp2, sequence parallel, dtype bf16: $nrs reduce-scatters, $nag all-gathers (want 9, 14), and plan.txt says: ${line:-no storage line} (want 20 move bf16, 0 f32)"
  fi
fi
[[ -x $tmp/gpt-bf16-sp2/launch ]] && run gpt-bf16-sp2
check_run gpt-bf16-sp2 gpt-bf16-cpu 2 "gpt2-tiny, tp2, sequence parallel, dtype bf16 (reduce-scatters and all-gathers on the bf16 wire)" 1e-3 1e-2
if [[ -s $tmp/gpt-bf16-sp2.err ]] && ! grep -q '^nnsc-mock-nccl: .* reducescatter=[1-9]' "$tmp/gpt-bf16-sp2.err"; then
  no "gpt-bf16-sp2: no ncclReduceScatter went through the NCCL double"
fi
if [[ -s $tmp/gpt-bf16-sp2.err ]] && ! grep -q '^nnsc-mock-nccl: .* allgather=[1-9]' "$tmp/gpt-bf16-sp2.err"; then
  no "gpt-bf16-sp2: no ncclAllGather went through the NCCL double"
fi
[[ -x $tmp/llama-tp2/launch ]] && run llama-tp2
check_run llama-tp2 llama-cpu 2 "llama-tiny, tp2 (rmsnorm, rope, silu, mul)"
[[ -x $tmp/gqa-tp2/launch ]] && run gqa-tp2
check_run gqa-tp2 gqa-cpu 2 "gqa, tp2 (grouped-query attention: a key/value head and its 2 query heads per device)"
[[ -x $tmp/xattn-tp2/launch ]] && run xattn-tp2
check_run xattn-tp2 xattn-cpu 2 "xattn, tp2 (cross-attention, 16 queries over 24 keys; vocabulary-parallel loss)"
[[ -x $tmp/slice-dp2/launch ]] && run slice-dp2
check_run slice-dp2 slice-cpu 2 "slice, dp2 with 2 micro-batches (slice; pad: zero, then place)"
[[ -x $tmp/padmask-tp2/launch ]] && run padmask-tp2
check_run padmask-tp2 padmask-cpu 2 "padmask, tp2 (attention with key lengths; rows with no key)"
[[ -x $tmp/abias-tp2/launch ]] && run abias-tp2
check_run abias-tp2 abias-cpu 2 "attn-bias, tp2 (attention with a learned additive bias; its gradient summed over the batch)"
[[ -x $tmp/relpos-tp2/launch ]] && run relpos-tp2
check_run relpos-tp2 relpos-cpu 2 "t5-relpos, tp2 (T5's relative position bias: relpos_bias and its backward)"
[[ -x $tmp/gpt-dp2/launch ]] && run gpt-dp2; check_run gpt-dp2 gpt-cpu 2 "gpt2-tiny, dp2"
# ZeRO 1: the small params' reduce-scatters and all-gathers packed into buckets in the scratch
# (passes/bucket.c; the device's place, slice and copy kernels), the large ones alone
[[ -x $tmp/gpt-dp2-z1/launch ]] && run gpt-dp2-z1
check_run gpt-dp2-z1 gpt-cpu 2 "gpt2-tiny, dp2, ZeRO 1 (packed buckets of reduce-scatters and all-gathers)"
# ZeRO 2 and 3 on h100-80g's profile: the micro-batches' reduce-scatters (their shards added over the
# micro-batches) and gathers in buckets too
[[ -x $tmp/gpt-dp2-z2/launch ]] && run gpt-dp2-z2
check_run gpt-dp2-z2 gpt-cpu 2 "gpt2-tiny, dp2, ZeRO 2 (the micro-batches' reduce-scatters in buckets)"
[[ -x $tmp/gpt-dp2-z3/launch ]] && run gpt-dp2-z3
check_run gpt-dp2-z3 gpt-cpu 2 "gpt2-tiny, dp2, ZeRO 3 (the micro-batches' gathers in buckets)"
[[ -x $tmp/gpt-tp2/launch ]] && run gpt-tp2; check_run gpt-tp2 gpt-cpu 2 "gpt2-tiny, tp2"
[[ -x $tmp/gpt-dp2tp2/launch ]] && run gpt-dp2tp2
check_run gpt-dp2tp2 gpt-cpu 4 "gpt2-tiny, dp2 x tp2 (4 ranks)"
# tests/equiv.list's user-constrained plan: point-to-point exchanges (grouped
# ncclSend / ncclRecv) besides all-reduces and all-gathers
[[ -x $tmp/gpt-plan/launch ]] && run gpt-plan
check_run gpt-plan gpt-cpu 4 "gpt2-tiny, 4 ranks, user-constrained plan (send/recv)"
# a pipeline (pp 2, 1f1b): the stages' transfers are ncclSend / ncclRecv, the mb section unrolled
[[ -x $tmp/gpt-pp2/launch ]] && run gpt-pp2
check_run gpt-pp2 gpt-cpu 2 "gpt2-tiny, pp2 (1f1b)"
# interleaved (2 chunks, the embedding, the 2 layers and the head one virtual stage each: grouped
# ncclSend / ncclRecv with receives posted early and sends made late) and interlaced
# (the embedding and head split over both ranks: all-reduces between the stages' tasks)
[[ -x $tmp/gpt-pp2-ilv/launch ]] && run gpt-pp2-ilv
check_run gpt-pp2-ilv gpt-cpu 2 "gpt2-tiny, pp2 interleaved"
[[ -x $tmp/gpt-pp2-ilc/launch ]] && run gpt-pp2-ilc
check_run gpt-pp2-ilc gpt-cpu 2 "gpt2-tiny, pp2 interlaced"
# recycling (3 forward passes per micro-batch as chunks, 3f1b): the inputs of zeros, the recycle copies
[[ -x $tmp/rcy-pp2/launch ]] && run rcy-pp2
check_run rcy-pp2 rcy-cpu 2 "recycle.ini, pp2 3f1b"
if [[ -s $tmp/gpt-plan.err ]] && ! grep -q '^nnsc-mock-nccl: .* send=[1-9]' "$tmp/gpt-plan.err"; then
  no "gpt-plan: no ncclSend went through the NCCL double"
fi
for name in gpt-dp2 gpt-tp2 gpt-dp2tp2 gpt-plan; do
  if [[ -s $tmp/$name.err ]] && ! grep -q '^nnsc-mock-nccl: .*comms=[1-9]' "$tmp/$name.err"; then
    no "$name: the ranks made no NCCL communicator through the NCCL double"
  fi
done

# ---- checkpoints and --resume under the doubles (4 ranks): a run that
# checkpoints every 3 steps, its last checkpoint and final weights removed,
# resumed from step 3, against the uninterrupted run above
if [[ -s $tmp/gpt-dp2tp2/final.safetensors ]]; then
  d=$tmp/gpt-dp2tp2
  "${run_env[@]}" "$d/launch" --steps "$steps" --ckpt-dir "$tmp/ck" --ckpt-every 3 \
    >"$tmp/ck1.log" 2>"$tmp/ck1.err"
  rm -f "$tmp/ck/step-$steps.safetensors" "$tmp/ck/final.safetensors"
  "${run_env[@]}" "$d/launch" --steps "$steps" --ckpt-dir "$tmp/ck" --resume \
    --save "$tmp/ck/resumed.safetensors" >"$tmp/ck2.log" 2>"$tmp/ck2.err"
  # "step S/N loss L" and "eval step S loss L", without the timings
  losses_after3() { grep -E '^(step [4-9]/|eval step [4-9] )' "$1" | sed -E 's/^((eval )?step [^ ]+ loss [^ ]+).*/\1/'; }
  want=$(losses_after3 "$tmp/gpt-dp2tp2.log")
  got=$(losses_after3 "$tmp/ck2.log")
  if [[ -s $tmp/ck/step-3.safetensors && -n $want && $got == "$want" ]]; then
    ok "resumed from step 3: steps 4-$steps log the uninterrupted run's losses exactly"
  else
    no "resume: losses after step 3 differ or the runs failed"
    diff <(echo "$want") <(echo "$got") | head -n 8 | sed 's/^/      | /'
    tail -n 3 "$tmp/ck1.err" "$tmp/ck2.err" | sed 's/^/      | /'
  fi
  if [[ -s $tmp/ck/resumed.safetensors ]] &&
     cmp_out=$(py same "$d/final.safetensors" "$tmp/ck/resumed.safetensors"); then
    ok "resumed run's final weights equal the uninterrupted run's bit for bit ($cmp_out)"
  else
    no "resumed run's final weights: ${cmp_out:-no file}"
  fi
fi

# ---- how ranks fail without a usable device, driver or NCCL
# expect NAME RC TEXT DESC ENV... -- CMD...: CMD under the doubles (with ENV
# added) exits RC (or non-zero for RC = nz) and its stderr holds TEXT
expect() {
  local name=$1 want=$2 text=$3 desc=$4
  shift 4
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local t0=$SECONDS
  timeout 60 "${run_env[@]}" "${envs[@]}" "$@" >"$tmp/$name.log" 2>"$tmp/$name.err"
  local rc=$?
  if { [[ $want == nz ]] && ((rc != 0 && rc != 124)); } || [[ $rc == "$want" ]]; then
    if grep -qF -- "$text" "$tmp/$name.err"; then
      ok "$desc: exit $rc in $((SECONDS - t0)) s, '$(grep -m1 -F -- "$text" "$tmp/$name.err" | cut -c1-110)'"
    else
      no "$desc: exit $rc but no '$text' in: $(head -n 3 "$tmp/$name.err")"
    fi
  else
    no "$desc: exit $rc, wanted $want: $(head -n 3 "$tmp/$name.err")"
  fi
}
if [[ -x $tmp/mlp/launch ]]; then
  r0=$tmp/mlp/rank0
  expect nodev 2 "no CUDA device" "NNSC_MOCK_DEVICES=0 (cuInit fine, no device)" \
    NNSC_MOCK_DEVICES=0 -- "$r0" --steps 1
  expect nodev-init 2 "no CUDA device" "no device, cuInit says CUDA_ERROR_NO_DEVICE" \
    NNSC_MOCK_DEVICES=0 NNSC_MOCK_NODEV_INIT=1 -- "$r0" --steps 1
  expect cc75 2 "no cubin for sm_75" "an sm_75 device and cubins for sm_80, sm_90" \
    NNSC_MOCK_CC=7.5 -- "$r0" --steps 1
  expect cc100 2 "no cubin for sm_100" "an sm_100 device (a newer major: no cubin runs)" \
    NNSC_MOCK_CC=10.0 -- "$r0" --steps 1
  if [[ -e /usr/local/cuda/lib64/stubs/libcuda.so ]]; then
    mkdir -p "$tmp/stub"
    ln -s /usr/local/cuda/lib64/stubs/libcuda.so "$tmp/stub/libcuda.so.1"
    expect stub 2 "stub" "the toolkit's stub driver as libcuda.so.1" \
      LD_LIBRARY_PATH="$tmp/stub" -- "$r0" --steps 1
  else
    skipped "the stub driver: /usr/local/cuda/lib64/stubs/libcuda.so is not there"
  fi
  # sm_86 loads the sm_80 cubin (same major, lower minor) and trains the same
  "${run_env[@]}" NNSC_MOCK_CC=8.6 "$tmp/mlp/launch" --steps "$steps" >"$tmp/cc86.log" 2>"$tmp/cc86.err"
  if stats "$tmp/cc86.err" 1 >/dev/null &&
     [[ $(grep '^step' "$tmp/cc86.log" | awk '{print $4}') == "$(grep '^step' "$tmp/mlp.log" | awk '{print $4}')" ]]; then
    ok "an sm_86 device runs the sm_80 cubin: the same losses as on sm_90"
  else
    no "sm_86: $(tail -n 3 "$tmp/cc86.err")"
  fi
fi
if [[ -x $tmp/gpt-dp2/launch ]]; then
  # no driver at all (not under the doubles): rank 1 of 2, started alone, says
  # so at once, before it would wait for rank 0 at the rendezvous
  if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    skipped "no driver, rank 1 of 2 alone: this machine has a real libcuda.so.1"
  else
    t0=$(date +%s.%N)
    env -u LD_LIBRARY_PATH NNSC_RANK=1 NNSC_WORLD=2 NNSC_JOB="mock-nodrv-$$" MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$((20000 + RANDOM % 20000)) timeout 60 "$tmp/gpt-dp2/rank1" --steps 1 --timeout 30 \
      >"$tmp/nodrv.log" 2>"$tmp/nodrv.err"
    rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    if [[ $rc == 2 ]] && grep -q "no CUDA driver" "$tmp/nodrv.err" && awk -v s="$secs" 'BEGIN { exit !(s < 5) }'; then
      ok "no driver: rank 1 of 2 alone exits 2 in ${secs} s, before the rendezvous (--timeout 30): $(head -n 1 "$tmp/nodrv.err" | cut -c1-80)"
    else
      no "no driver, rank 1 of 2 alone: exit $rc after ${secs} s: $(head -n 2 "$tmp/nodrv.err")"
    fi
  fi
  expect nonccl nz "NCCL not found" "NCCL missing (NNSC_NCCL_LIB names no file), 2 ranks" \
    NNSC_NCCL_LIB="$tmp/none/libnccl.so.2" -- "$tmp/gpt-dp2/launch" --steps 1
  expect dupdev nz "Duplicate GPU" "2 ranks on a host with 1 device (both on device 0)" \
    NNSC_MOCK_DEVICES=1 -- "$tmp/gpt-dp2/launch" --steps 1

  # a rank killed mid-run: the launch ends (non-zero) well within the timeout
  shm_before=$(ls /dev/shm | grep -c '^nnsc-mock-nccl-')
  "${run_env[@]}" NNSC_TIMEOUT=20 "$tmp/gpt-dp2/launch" --steps 1000 >"$tmp/kill.log" 2>"$tmp/kill.err" &
  lpid=$!
  started+=("$lpid")
  end=$((SECONDS + 60))
  until grep -q '^step 2/' "$tmp/kill.log" 2>/dev/null || ((SECONDS > end)); do sleep 0.05; done
  victim=$(pgrep -P "$lpid" -f '/rank1' | head -n 1)
  t0=$SECONDS
  [[ -n $victim ]] && kill -9 "$victim"
  end=$((SECONDS + 25))
  while kill -0 "$lpid" 2>/dev/null && ((SECONDS < end)); do sleep 0.1; done
  if kill -0 "$lpid" 2>/dev/null; then
    no "rank 1 killed: the launch still runs after 25 s"
    kill -9 "$lpid" $(pgrep -P "$lpid") 2>/dev/null
  else
    wait "$lpid"
    rc=$?
    if [[ -n $victim ]] && ((rc != 0)); then
      ok "rank 1 killed at step 2: the launch exits $rc after $((SECONDS - t0)) s ($(grep -m1 'rank 0' "$tmp/kill.err" | cut -c1-90))"
    else
      no "rank 1 killed: victim '${victim:-none}', launch exit $rc"
    fi
  fi
  shm_after=$(ls /dev/shm | grep -c '^nnsc-mock-nccl-')
  if ((shm_after <= shm_before)); then
    ok "no NCCL-double segment left in /dev/shm"
  else
    no "$((shm_after - shm_before)) nnsc-mock-nccl segments left in /dev/shm"
  fi
fi

# ---- nnsc-aot profile --target cuda: --pack builds the 1-rank runs for the GPU (one GPU: no link
# runs), run.sh runs them (here under the doubles), --from fits a profile of the named GPU's: its
# FLOP/s and weight_bw measured, its links kept (docs/plan-search.md, Calibration)
mlp=$top/examples/mlp.ini
if "$nn" profile "$mlp" --target cuda --pack "$tmp/cal" --set cluster.device=h100-80g --steps 3 -q &&
  [[ -x $tmp/cal/one/launch && -x $tmp/cal/small/launch && ! -e $tmp/cal/dp && ! -e $tmp/cal/tp ]] &&
  "${run_env[@]}" NNSC_MOCK_DEVICES=1 "$tmp/cal/run.sh" "$tmp/cal/logs" >"$tmp/cal.out" 2>&1 &&
  "$nn" profile "$mlp" --target cuda --set cluster.device=h100-80g --from "$tmp/cal/logs" -o "$tmp/gpu.ini" -q &&
  grep -q '^device = h100-80g$' "$tmp/gpu.ini" && grep -Eq '^flops = [1-9]' "$tmp/gpu.ini" &&
  ! grep -q '^link_bw' "$tmp/gpu.ini" &&
  "$nn" "$mlp" --devices 2 -q -o "$tmp/calb" --set "cluster.device=$tmp/gpu.ini" &&
  grep -q "^estimate  step .* on $tmp/gpu.ini .* of 80.0 GiB per device" "$tmp/calb/plan.txt"; then
  ok "profile --target cuda --pack / run.sh / --from: a profile of h100-80g's, its FLOP/s from the runs, its links kept"
else
  no "profile --target cuda: $(ls "$tmp/cal" 2>&1 | tr '\n' ' '); $(tail -n 2 "$tmp/cal.out" 2>&1); $(cat "$tmp/gpu.ini" 2>&1 | tail -n 4)"
fi
if ! "$nn" profile "$mlp" --target cuda --pack "$tmp/cal2" -q 2>"$tmp/cal2.err" &&
  grep -q "profile --target cuda refines a GPU's profile, and the spec's device is cpu-host" "$tmp/cal2.err"; then
  ok "profile --target cuda on cpu-host: refused, naming the GPU profile to give"
else no "profile --target cuda on cpu-host: $(cat "$tmp/cal2.err")"; fi

finish
