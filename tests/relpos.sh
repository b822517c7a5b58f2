#!/usr/bin/env bash
# tests/relpos.sh -- relpos_bias's buckets (rtlib/rt_relpos.h) against Hugging Face's rule,
# T5Attention._relative_position_bucket, written out here in Python with float32 rounding
# after each operation as torch computes it: every distance d = s - t in -600 .. 600 for T5's
# defaults (32 buckets, max_distance 128) both ways, and for other bucket counts and
# distances (odd counts, a max_distance past the range).  The buckets come from
# test_rt_kernels --relpos, which calls the rtlib function the kernels use.
. "$(dirname "$0")/lib.sh" relpos
tk=$build/tests/test_rt_kernels
[[ -x $tk ]] || { no "no $tk"; echo "0 passed, 1 failed"; exit 1; }
for cfg in "32 128 1" "32 128 0" "10 20 1" "10 20 0" "33 50 1" "64 256 0" "8 5 1" "4 3 1" "2 3 0"; do
  read -r nb md bi <<<"$cfg"
  "$tk" --relpos "$nb" "$md" "$bi" -600 600 >"$tmp/ours" || { no "test_rt_kernels --relpos $cfg"; continue; }
  python3 - "$nb" "$md" "$bi" >"$tmp/hf" <<'PY'
import math, struct, sys
nb, md, bi = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
def f32(x): return struct.unpack("<f", struct.pack("<f", x))[0]
def bucket(d):
    r, n = 0, nb
    if bi:
        n //= 2
        if d > 0: r = n
        d = abs(d)
    else:
        d = -min(d, 0)
    me = n // 2
    if d < me: return r + d
    x = f32(f32(math.log(f32(f32(d) / f32(me)))) / f32(math.log(md / me)))
    return r + min(me + int(f32(x * f32(n - me))), n - 1)
for d in range(-600, 601): print(bucket(d))
PY
  if cmp -s "$tmp/ours" "$tmp/hf"; then
    ok "buckets of $nb, max_distance $md, bidirectional $bi: d = -600 .. 600 as Hugging Face's rule ($(sort -un "$tmp/ours" | wc -l) distinct)"
  else
    no "buckets of $nb, max_distance $md, bidirectional $bi differ from Hugging Face's rule:"
    paste "$tmp/ours" "$tmp/hf" | awk '$1 != $2 { print "  d = " NR - 601 ": " $1 ", HF " $2 }' | head -5
  fi
done
echo "$pass passed, $fail failed"
((fail == 0))
