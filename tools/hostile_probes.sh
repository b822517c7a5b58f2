#!/usr/bin/env bash
# tools/hostile_probes.sh [BUILD] -- the probes of a demanding user and a
# hostile local user, rerun by hand (not a test: it takes minutes and
# measures wall time): hangs, hijacks, injections, crashes and stale output.
# Each probe prints one row: what was tried, what happened, how long it
# took; a row that starts with BAD is a defect.  Exits 1 when any row is BAD.
# Run as root for the shared-memory probe of another user's segment.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$top/build}" && pwd)
nn=$build/nnsc-aot
w=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-probes-XXXXXX")
trap 'rm -rf "$w"' EXIT
bad=0
row() { printf '%-4s %-62s %s\n' "$1" "$2" "$3"; [[ $1 == BAD ]] && bad=1; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f s", b - a }'; }
alive() {   # alive PID...: how many still run (a zombie, dead but not yet reaped by init, does not count)
  local n=0 p st
  for p in "$@"; do
    st=$(awk '{ print $3 }' "/proc/$p/stat" 2>/dev/null) || continue
    [[ -n $st && $st != Z ]] && n=$((n + 1))
  done
  echo "$n"
}
rank_pids() { pgrep -f "^$1/rank[0-9]" | tr '\n' ' '; }

cd "$w" || exit 1
"$nn" "$top/examples/gpt2-tiny.ini" -o g4 --devices 4 --set plan.policy=hybrid --set plan.tp=2 -q || { echo "build failed"; exit 1; }
"$nn" "$top/examples/mlp.ini" -o m2 --devices 2 -q || exit 1

# ---- hangs
g4/launch --steps 100000 --timeout 5 >stop.out 2>stop.err &
lp=$!
sleep 2
r2=$(pgrep -f "^$w/g4/rank2")
kill -STOP "$r2"
t0=$(now)
wait "$lp"
rc=$?
t=$(secs "$t0")
left=$(alive $(rank_pids "$w/g4"))
if [[ $rc != 0 && $left == 0 ]] && grep -q "rank 2 stopped answering" stop.err; then row ok "SIGSTOP of rank 2, --timeout 5: launch exits $rc naming rank 2, none left" "$t"
else row BAD "SIGSTOP of rank 2: exit $rc, $left left: $(tail -n 1 stop.err)" "$t"; fi
kill -KILL "$r2" 2>/dev/null

g4/launch --steps 100000 >k9.out 2>&1 &
lp=$!
disown "$lp"   # (no "Killed" notice from this shell)
sleep 2
ranks=$(rank_pids "$w/g4")
kill -KILL "$lp"
t0=$(now)
for ((k = 0; k < 100; k++)); do [[ $(alive $ranks) == 0 ]] && break; sleep 0.01; done
row "$([[ $(alive $ranks) == 0 ]] && echo ok || echo BAD)" "kill -9 of launch: its 4 ranks end" "$(secs "$t0")"
kill -KILL $ranks 2>/dev/null

g4/launch --steps 100000 >kr.out 2>kr.err &
lp=$!
sleep 2
kill -KILL "$(pgrep -f "^$w/g4/rank1")"
t0=$(now)
wait "$lp"
rc=$?
row "$([[ $rc != 0 ]] && echo ok || echo BAD)" "kill -9 of rank 1: launch exits $rc, the peers say so" "$(secs "$t0")"

mkfifo fifo fifo-rank0.json fifo-rank1.json   # (--trace FILE.json: rank K writes FILE-rankK.json)
for f in --data --eval-data --init --log --trace; do
  t0=$(now)
  arg=fifo
  [[ $f == --trace ]] && arg=fifo.json
  timeout 20 m2/launch --steps 1 "$f" "$arg" >/dev/null 2>fifo.err
  rc=$?
  row "$([[ $rc == 2 ]] && echo ok || echo BAD)" "$f a FIFO: exit $rc" "$(secs "$t0")"
done

# ---- crashes and builds that can never run
probe_rc() {   # probe_rc WANT LABEL CMD...: CMD exits WANT, and no sanitizer or internal error
  local want=$1 label=$2
  shift 2
  local t0
  t0=$(now)
  timeout 300 "$@" >p.out 2>p.err
  local rc=$?
  if [[ $rc == "$want" ]] && ! grep -q "internal error\|runtime error\|AddressSanitizer" p.err; then row ok "$label: exit $rc" "$(secs "$t0")"
  else row BAD "$label: exit $rc: $(grep -m1 error p.err | cut -c1-80)" "$(secs "$t0")"; fi
}
probe_rc 2 "dims.B=65536*65536, dims.F=2^40" "$nn" "$top/examples/gpt2-tiny.ini" -o o1 --set 'dims.B=65536*65536' --set dims.F=1099511627776
probe_rc 2 "coshard=h.attn r 2 on gqa" "$nn" "$top/tests/equiv/gqa.ini" -o o2 --devices 2 --set "plan.coshard=h.attn r 2"
python3 -c 'import sys; print(open(sys.argv[1]).read().replace("name = mlp", "name = " + "a" * 1000000, 1))' "$top/examples/mlp.ini" >longname.ini
probe_rc 2 "a 1 MB model name" "$nn" longname.ini -o o3
probe_rc 2 "dims.B=2^40" "$nn" "$top/examples/gpt2-tiny.ini" -o o4 --set dims.B=1099511627776
probe_rc 2 "schedule interleaved with recycle" "$nn" "$top/tests/equiv/recycle.ini" -o o5 --devices 2 --set plan.pp=2 --set plan.schedule=interleaved
probe_rc 2 "stage=h.0 2 on pp 2" "$nn" "$top/examples/gpt2-tiny.ini" -o o6 --devices 2 --set plan.pp=2 --set "plan.stage=h.0 2"
probe_rc 1 "-o under an empty read-only sysfs folder" "$nn" "$top/examples/mlp.ini" -o "$(find /sys/class -maxdepth 1 -mindepth 1 -type d -empty | head -n 1)"

# ---- pipelines the docs promise
probe_rc 0 "verify mlp-block interlaced dp 2 x pp 2" "$nn" verify "$top/examples/mlp-block.ini" --devices 4 --set plan.pp=2 --set plan.policy=dp --set plan.schedule=interlaced --set train.micro_batches=2
probe_rc 0 "verify encdec 3f3b on pp 3" "$nn" verify "$top/tests/equiv/encdec.ini" --devices 3 --set plan.pp=3 --set plan.schedule=3f3b --set train.micro_batches=6 --set dims.B=12

# ---- security
if [[ $(id -u) == 0 ]]; then
  job=probe-$$
  : >"/dev/shm/nnsc-$job" && chmod 666 "/dev/shm/nnsc-$job" && chown 65534 "/dev/shm/nnsc-$job"
  NNSC_JOB=$job probe_rc 2 "a /dev/shm/nnsc-JOB of another user, mode 666" env NNSC_JOB=$job m2/launch --steps 1
  rm -f "/dev/shm/nnsc-$job"
fi
mkdir -p "x'\$(touch $w/PWN)'y"
TMPDIR="$w/x'\$(touch $w/PWN)'y" "$nn" profile -o cal.ini --steps 1 -q >/dev/null 2>&1
row "$([[ ! -e $w/PWN ]] && echo ok || echo BAD)" "TMPDIR holding \$(touch PWN) for nnsc-aot profile: nothing ran" ""

# ---- data and numbers
m2/launch --steps 1 --save good.safetensors >/dev/null 2>&1
python3 - good.safetensors nan.safetensors <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
t = next(v for k, v in sorted(h.items()) if k != "__metadata__" and v["dtype"] == "F32")
o = 8 + n + t["data_offsets"][0]
b[o:o + 4] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(b)
PY
probe_rc 2 "--init with a NaN weight" m2/launch --steps 1 --init nan.safetensors

# ---- the first hour
"$nn" "$top/examples/mlp.ini" -o out --devices 4 -q && "$nn" "$top/examples/mlp.ini" -o out --devices 2 -q
row "$([[ ! -e out/rank2 && ! -e out/rank3 && -x out/rank1 ]] && echo ok || echo BAD)" "a 2-rank build into a 4-rank build's out/: no rank2, rank3 left" ""

echo
((bad)) && echo "hostile_probes: some probes found a defect (BAD rows)" || echo "hostile_probes: every probe clean"
((bad == 0))
