#!/usr/bin/env bash
# tests/resume.sh -- real training runs end to end: gpt2-tiny on token data
# under a dp x tp plan (4 ranks), checkpoints, a rank killed with SIGKILL at
# a random moment, --resume, and the final weights bitwise equal to those of
# the uninterrupted run; a rank killed mid-step stops the run within the
# timeout, with and without the launcher's help; a stopped rank is named and
# ended by launch within the timeout and a grace; ranks end with a launch
# killed by SIGKILL.
#
# Prints one line per check and "N passed, M failed"; exits 1 on failure.
# RESUME_TRIALS (default 3) sets how many kill-and-resume trials run.
set -u
top=${NNSC_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
build=${NNSC_BUILD:-$top/build}
nn=$build/nnsc-aot
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-resume-XXXXXX")
trap 'kill_all; rm -rf "$tmp"' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok    $*"; }
no() { fail=$((fail + 1)); echo "FAIL  $*"; }
steps=12
flags=(--steps "$steps" --threads 1 --timeout 10)
started=()   # pids this script started, for the exit trap

# kill_all: stop whatever this script started and is still running
kill_all() { ((${#started[@]})) && kill -9 "${started[@]}" 2>/dev/null; return 0; }

# ranks_of PID: the pids of the rank processes launch PID started
ranks_of() { pgrep -P "$1" -f '/rank[0-9]+' || true; }

# wait_for_line FILE TEXT SECS: wait until FILE holds TEXT; 1 on timeout
wait_for_line() {
  local end=$((SECONDS + $3))
  until grep -q -- "$2" "$1" 2>/dev/null; do
    ((SECONDS > end)) && return 1
    sleep 0.005
  done
}

# ---- build: 4 ranks, dp 2 x tp 2, token inputs streaming the data file
out=$tmp/out
if "$nn" "$top/examples/gpt2-tiny.ini" -o "$out" -q --devices 4 --set plan.policy=hybrid \
     --set plan.tp=2 --set "train.data=$top/data/tinytext_train.bin" \
     --set "input tokens.stream=0" --set "input targets.stream=1" >"$tmp/build.log" 2>&1; then
  ok "build gpt2-tiny, 4 ranks (dp 2 x tp 2), token data from data/tinytext_train.bin"
else
  no "build gpt2-tiny: $(tail -n 3 "$tmp/build.log")"
  echo "$pass passed, $fail failed"
  exit 1
fi

# ---- the uninterrupted run
if "$out/launch" "${flags[@]}" --ckpt-dir "$tmp/A" >"$tmp/A.log" 2>&1 &&
   [[ -s $tmp/A/final.safetensors ]]; then
  ok "uninterrupted run: $steps steps, $tmp/A/final.safetensors ($(grep -c '^step ' "$tmp/A.log") step lines)"
else
  no "uninterrupted run failed: $(tail -n 3 "$tmp/A.log")"
fi

# ---- kill one rank at a random moment after step 4, then resume
trials=${RESUME_TRIALS:-3}
for ((trial = 1; trial <= trials; trial++)); do
  B=$tmp/B$trial
  victim=$((RANDOM % 4))
  delay_ms=$((RANDOM % 400))
  "$out/launch" "${flags[@]}" --ckpt-dir "$B" --ckpt-every 3 >"$B.log" 2>&1 &
  lpid=$!
  started+=("$lpid")
  killed=no
  if wait_for_line "$B.log" "^step 4/$steps " 60; then
    sleep "$(printf '0.%03d' "$delay_ms")"
    pids=($(ranks_of "$lpid"))
    if ((${#pids[@]} == 4)); then
      # rank r is the process running .../rankr
      for p in "${pids[@]}"; do
        if [[ $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline") == *"/rank$victim "* ]]; then
          kill -9 "$p" 2>/dev/null && killed=yes
        fi
      done
    fi
  fi
  wait "$lpid"
  rc1=$?
  last=$(grep '^step ' "$B.log" | tail -n 1 | cut -d' ' -f2)
  ckpts=$(cd "$B" 2>/dev/null && ls step-*.safetensors 2>/dev/null | tr '\n' ' ')
  "$out/launch" "${flags[@]}" --ckpt-dir "$B" --ckpt-every 3 --resume >"$B.resume.log" 2>&1
  rc2=$?
  from=$(sed -n 's/^resume from .*step-\([0-9]*\)\.safetensors.*/\1/p' "$B.resume.log")
  what="trial $trial: SIGKILL to rank $victim ${delay_ms} ms after step 4 (killed: $killed, launch exit $rc1, last step line $last, checkpoints then: ${ckpts:-none}), --resume from step ${from:-none} (exit $rc2)"
  if [[ $rc2 == 0 ]] && cmp -s "$tmp/A/final.safetensors" "$B/final.safetensors"; then
    ok "$what: final.safetensors byte for byte equal to the uninterrupted run's"
  else
    no "$what: final weights differ or the resume failed: $(tail -n 3 "$B.resume.log")"
  fi
  if [[ $killed == yes && $rc1 == 0 ]]; then
    no "trial $trial: launch exited 0 although rank $victim was killed"
  fi
  if ls -a "$B" | grep -q '\.tmp$'; then
    no "trial $trial: a temporary file was left after the resumed run: $(ls -a "$B")"
  fi
done

# ---- the newest checkpoint damaged (cut short): --resume skips it, says so,
# and goes on from the one before (every rank alike) to the same final weights
C=$tmp/C
mkdir -p "$C"
if [[ -f $tmp/B1/step-6.safetensors && -f $tmp/B1/step-9.safetensors ]]; then
  cp "$tmp/B1/step-6.safetensors" "$C/"
  head -c 5000 "$tmp/B1/step-9.safetensors" >"$C/step-9.safetensors"
  "$out/launch" "${flags[@]}" --ckpt-dir "$C" --ckpt-every 3 --resume >"$C.log" 2>&1
  rc=$?
  if [[ $rc == 0 ]] && grep -q "skipping .*step-9.safetensors" "$C.log" &&
     grep -q "^resume from .*step-6.safetensors: step 6 of $steps done" "$C.log" &&
     cmp -s "$tmp/A/final.safetensors" "$C/final.safetensors"; then
    ok "--resume past a cut step-9: from step-6, final.safetensors equal to the uninterrupted run's ($(grep -m1 'cannot load' "$C.log" | cut -c1-120))"
  else
    no "--resume past a damaged step-9: exit $rc: $(tail -n 4 "$C.log")"
  fi
else
  no "--resume past a damaged checkpoint: trial 1 left no step-6 and step-9 ($(ls "$tmp/B1" 2>&1 | tr '\n' ' '))"
fi

# ---- a rank killed mid-step: launch exits non-zero, fast
timeout_s=5
"$out/launch" --steps 1000 --threads 1 --timeout "$timeout_s" >"$tmp/K.log" 2>&1 &
lpid=$!
started+=("$lpid")
if wait_for_line "$tmp/K.log" "^step 3/" 60; then
  pids=($(ranks_of "$lpid"))
  t0=$(date +%s.%N)
  kill -9 "${pids[2]}" 2>/dev/null
  wait "$lpid"
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  if [[ $rc != 0 ]] && awk -v s="$secs" -v t="$timeout_s" 'BEGIN { exit !(s < t) }'; then
    ok "launch: a rank killed mid-step makes it exit $rc after ${secs} s (timeout ${timeout_s} s)"
  else
    no "launch after a rank was killed mid-step: exit $rc after ${secs} s"
  fi
else
  no "launch: the long run did not start: $(tail -n 3 "$tmp/K.log")"
  kill -9 "$lpid" 2>/dev/null
fi

# wait_pid PID SECS: wait for the child PID at most SECS seconds; its status,
# or 124 (it was still running: killed)
wait_pid() {
  local end=$((SECONDS + $2))
  while kill -0 "$1" 2>/dev/null && ((SECONDS <= end)); do sleep 0.05; done
  kill -0 "$1" 2>/dev/null && { kill -9 "$1" 2>/dev/null; wait "$1" 2>/dev/null; return 124; }
  wait "$1"
}

# alive PIDS...: those of PIDS still running (a zombie has ended)
alive() {
  local p st
  for p in "$@"; do
    st=
    read -r st 2>/dev/null <"/proc/$p/stat" || continue
    st=${st##*) }
    [[ ${st:0:1} != [ZX] ]] && printf "%s " "$p"
  done
}

# ---- a rank stopped (SIGSTOP): its peers give up after --timeout, launch
# names the stopped rank, ends it (SIGTERM + SIGCONT, then SIGKILL) and exits
stop_s=2
"$out/launch" --steps 1000 --threads 1 --timeout "$stop_s" >"$tmp/S.log" 2>&1 &
lpid=$!
started+=("$lpid")
if wait_for_line "$tmp/S.log" "^step 3/" 60; then
  pids=($(ranks_of "$lpid"))
  t0=$(date +%s.%N)
  kill -STOP "${pids[2]}" 2>/dev/null
  wait_pid "$lpid" $((stop_s + 15))
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  left=$(alive "${pids[@]}")
  line=$(grep '^launch: ' "$tmp/S.log")
  if [[ $rc != 0 && $line == "launch: rank 2 stopped answering (its process is stopped"* && -z $left ]] &&
     awk -v s="$secs" -v t="$stop_s" 'BEGIN { exit !(s < t + 4) }'; then
    ok "launch: a stopped rank (SIGSTOP to rank 2) makes it exit $rc after ${secs} s (timeout ${stop_s} s), naming it, no rank left"
  else
    no "launch after SIGSTOP to rank 2: exit $rc after ${secs} s, ranks left: ${left:-none}, said: ${line:-nothing}"
    [[ -n $left ]] && kill -9 $left 2>/dev/null   # this run's ranks, still there
  fi
else
  no "launch: the run to stop did not start: $(tail -n 3 "$tmp/S.log")"
fi

# ---- launch killed (SIGKILL): its ranks end with it, none runs on
"$out/launch" --steps 1000 --threads 1 --timeout "$timeout_s" >"$tmp/L.log" 2>&1 &
lpid=$!
started+=("$lpid")
if wait_for_line "$tmp/L.log" "^step 3/" 60; then
  pids=($(ranks_of "$lpid"))
  kill -9 "$lpid"
  wait "$lpid" 2>/dev/null
  sleep 1
  left=$(alive "${pids[@]}")
  [[ ${#pids[@]} == 4 && -z $left ]] && ok "launch killed by SIGKILL: none of its 4 ranks runs a second later" ||
    no "launch killed by SIGKILL: of ranks ${pids[*]}, still running: ${left:-none}"
  [[ -n $left ]] && kill -9 $left 2>/dev/null   # this run's orphans
else
  no "launch: the run to kill did not start: $(tail -n 3 "$tmp/L.log")"
fi

# ---- the same without launch (a cluster launcher that does not stop the others):
# the surviving ranks notice by themselves and name the dead rank
rpids=()
export NNSC_WORLD=4 NNSC_JOB="resume-test-$$-$RANDOM"
for r in 0 1 2 3; do
  NNSC_RANK=$r "$out/rank$r" --steps 1000 --threads 1 --timeout "$timeout_s" \
    >"$tmp/R$r.log" 2>&1 &
  rpids+=($!)
  started+=($!)
done
unset NNSC_WORLD NNSC_JOB
if wait_for_line "$tmp/R0.log" "^step 3/" 60; then
  t0=$(date +%s.%N)
  { kill -9 "${rpids[1]}"; wait "${rpids[1]}"; } 2>/dev/null
  codes=()
  for r in 0 2 3; do
    wait "${rpids[$r]}"
    codes+=($?)
  done
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  named=yes
  for r in 0 2 3; do grep -q "rank 1" "$tmp/R$r.log" || named=no; done
  if [[ "${codes[*]}" == "1 1 1" && $named == yes ]] && awk -v s="$secs" -v t="$timeout_s" 'BEGIN { exit !(s < t) }'; then
    ok "no launcher: after rank 1 is killed, ranks 0, 2, 3 exit 1 within ${secs} s naming it ($(grep -h 'rank 1' "$tmp/R0.log" | head -n 1))"
  else
    no "no launcher: exits ${codes[*]} after ${secs} s, rank 1 named: $named"
  fi
else
  no "no launcher: the run did not start: $(tail -n 3 "$tmp/R0.log")"
fi

echo "$pass passed, $fail failed"
((fail == 0))
