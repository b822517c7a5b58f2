#!/usr/bin/env bash
# tests/share.sh -- ranks that share one program (passes/share.c,
# docs/cluster.md): a dp x tp build is one program, out/rank, and every
# out/rankK is the same file; all ranks started by one and the same command
# (out/rank under NNSC_RANK, RANK, SLURM_PROCID or OMPI_COMM_WORLD_RANK)
# train as out/launch does; the wrong rank, the wrong world and no rank get
# a clear message and exit 2; a plan whose ranks differ in shape builds
# several programs into the one executable and still agrees with one device
# (verify); the output is byte for byte the same on 1 and 2 codegen threads.
# About 15 s.
. "$(dirname "$0")/lib.sh" share
build=$(cd "$build" && pwd)
nn=$build/nnsc-aot
spec=$top/examples/gpt2-tiny.ini
plan=(--devices 8 --set plan.policy=hybrid --set plan.tp=4 --set train.steps=3 -q)

# ---- 1. one program for dp 2 x tp 4
o=$tmp/o
if ! NNSC_JOBS=2 "$nn" "$spec" -o "$o" "${plan[@]}" >"$tmp/build.log" 2>&1; then
  no "build gpt2-tiny dp 2 x tp 4: $(tail -n 3 "$tmp/build.log")"
  echo "$pass passed, $fail failed"
  exit 1
fi
grep -q "^programs  1 distinct program for 8 ranks" "$o/plan.txt" && ok "plan.txt: 1 distinct program for 8 ranks" ||
  no "plan.txt programs line: $(grep '^programs' "$o/plan.txt")"
inode=$(stat -c %i "$o/rank")
same=1
for r in 0 1 2 3 4 5 6 7; do [[ $(stat -c %i "$o/rank$r") == "$inode" ]] || same=0; done
((same)) && ok "out/rank0..7 are links to out/rank" || no "out/rankK are not out/rank"
[[ -z $(find "$o" -name '*.o') ]] && ok "no object files left in out/" || no "object files left: $(find "$o" -name '*.o')"

# losses FILE: the "step S/N loss L" prefix of every step line
losses() { grep '^step ' "$1" | cut -d' ' -f1-4; }

# ---- 2. one command for every rank, as a cluster launcher starts them
expect_rc 0 "out/launch trains 3 steps" "$o/launch"
losses "$tmp/out" >"$tmp/launch.loss"
[[ $(wc -l <"$tmp/launch.loss") == 3 ]] && ok "  ... 3 step lines" || no "launch: $(cat "$tmp/out")"
# start_all VAR_RANK VAR_WORLD: out/rank 8 times with the rank in VAR_RANK
start_all() {
  local job="share-$$-$RANDOM" pids=() rc=0
  for r in 0 1 2 3 4 5 6 7; do
    env NNSC_JOB="$job" "$1=$r" "$2=8" "$o/rank" >"$tmp/rank$r.out" 2>"$tmp/rank$r.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}
for pair in "RANK WORLD_SIZE" "SLURM_PROCID SLURM_NTASKS" "OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE"; do
  read -r rv wv <<<"$pair"
  if start_all "$rv" "$wv"; then
    losses "$tmp/rank0.out" >"$tmp/cmd.loss"
    cmp -s "$tmp/launch.loss" "$tmp/cmd.loss" && ok "out/rank x 8 under $rv/$wv: the losses of out/launch" ||
      no "out/rank under $rv: losses differ: $(cat "$tmp/cmd.loss") vs $(cat "$tmp/launch.loss")"
  else
    no "out/rank x 8 under $rv/$wv failed: $(cat "$tmp"/rank*.err | head -n 5)"
  fi
done

# ---- 3. the wrong rank, the wrong world, no rank: exit 2 and what to do
expect_rc 2 "out/rank1 started as rank 3" env NNSC_RANK=3 NNSC_WORLD=8 "$o/rank1"
says "this program is rank 1 of 8" "rank1 as rank 3"
says "run the rank3 executable for rank 3" "rank1 as rank 3"
expect_rc 2 "out/rank with a world of 4" env NNSC_RANK=0 NNSC_WORLD=4 NNSC_JOB=x "$o/rank"
says "built for a job of 8 ranks" "out/rank in a world of 4"
expect_rc 2 "out/rank with no rank set" env -u NNSC_RANK -u RANK -u SLURM_PROCID -u OMPI_COMM_WORLD_RANK "$o/rank"
says "no rank is set in the environment" "out/rank without a rank"
says "under a launcher that sets the rank" "out/rank without a rank"
expect_rc 0 "out/rank --help works without a rank" env -u NNSC_RANK -u RANK -u SLURM_PROCID "$o/rank" --help

# ---- 4. determinism: 1 and 2 codegen threads, byte for byte
NNSC_JOBS=1 "$nn" "$spec" -o "$tmp/o1" "${plan[@]}" >"$tmp/build.log" 2>&1 || no "build on 1 thread failed"
cmp -s "$o/rank" "$tmp/o1/rank" && cmp -s "$o/plan.txt" "$tmp/o1/plan.txt" && cmp -s "$o/launch" "$tmp/o1/launch" &&
  ok "out/rank, plan.txt and launch byte for byte the same on 1 and 2 threads" ||
  no "output differs between 1 and 2 codegen threads"

# ---- 5. ranks of different shapes: several programs, one executable, verify agrees
trans=(--devices 4 --set plan.policy=hybrid --set plan.tp=2
       --set "plan.trans=h.fc *0 2 n 2, h.attn h 4, h.mproj k 4, lm_head replicate 4")
"$nn" "$spec" -o "$tmp/t" "${trans[@]}" -q >"$tmp/build.log" 2>&1 || no "build the per-op plan: $(tail -n 3 "$tmp/build.log")"
n=$(sed -n 's/^programs  \([0-9]*\) distinct programs\{0,1\} for 4 ranks.*/\1/p' "$tmp/t/plan.txt")
[[ -n $n && $n -gt 1 ]] && ok "a plan whose ranks differ: $n distinct programs in one out/rank" ||
  no "per-op plan: programs line $(grep '^programs' "$tmp/t/plan.txt")"
expect_rc 0 "  ... verify agrees with one device" "$nn" verify "$spec" "${trans[@]}" --steps 2
echo "$pass passed, $fail failed"
((fail == 0))
