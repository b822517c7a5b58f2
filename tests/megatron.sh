#!/usr/bin/env bash
# tests/megatron.sh -- the tp policy reproduces Megatron-LM's communication:
# per layer and micro-batch, 2 all-reduces of b*s*h elements in the forward
# pass and 2 in the backward pass, and nothing else inside the layers.
# Checked on plan.txt's per-layer line for gpt2-tiny at several tp degrees.
set -u
top=${NNSC_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
build=${NNSC_BUILD:-$top/build}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-meg-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
B=8 T=64 C=128
for cfg in "2 1" "2 2" "4 2" "4 4"; do
  read -r tp m <<<"$cfg"
  "$build/nnsc-aot" "$top/examples/gpt2-tiny.ini" -q -o "$tmp/tp$tp" --devices "$tp" --set plan.policy=tp \
    --set train.micro_batches="$m" || { fail=$((fail + 1)); continue; }
  line=$(grep '^per layer (block h' "$tmp/tp$tp/plan.txt")
  calls=$(sed -n 's/.*allreduce \([0-9]*\) calls.*/\1/p' <<<"$line")
  bytes=$(sed -n 's/.*allreduce [0-9]* calls \([0-9]*\) bytes.*/\1/p' <<<"$line")
  # b*s*h elements per micro-batch, ring all-reduce sends 2(tp-1)/tp of them
  want_calls=$((4 * m))
  want_bytes=$((4 * m * 2 * (tp - 1) * (B / m) * T * C * 4 / tp))
  others=$(sed 's/allreduce [0-9]* calls [0-9]* bytes;//' <<<"${line#*:}" | tr -d ' ')
  if [[ $calls == "$want_calls" && $bytes == "$want_bytes" && -z $others ]]; then
    pass=$((pass + 1))
    echo "ok    tp $tp, $m micro-batches: per layer $calls all-reduces, $bytes bytes (Megatron: 4 x $m, $want_bytes)"
  else
    fail=$((fail + 1))
    echo "FAIL  tp $tp, $m micro-batches: '$line' (want $want_calls all-reduces, $want_bytes bytes, nothing else)"
  fi
done
echo "$pass passed, $fail failed"
((fail == 0))
