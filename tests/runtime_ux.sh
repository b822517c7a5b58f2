#!/usr/bin/env bash
# tests/runtime_ux.sh -- what a user of the rank executables sees, end to end
# (docs/runtime.md): --data on a build without [train] data (token inputs
# stream the file, and without one draw exactly the synthetic values of a
# build without `stream` keys), checkpoints and --resume on it; the message
# for --data on a build with no token inputs; rank messages written whole and
# shown once under out/launch (a bad flag, a missing data file, --help); a
# rank started alone; the start-up banner, the step line's mfu and mem, the
# closing summary and the same in the --log JSON; -q, "did you mean" for a
# mistyped flag, a token id outside the vocabulary and a FIFO as --data
# (named once under launch, exit 2, never a hang), --resume of a finished
# run.  About 10 s.
. "$(dirname "$0")/lib.sh" runtime_ux
build=$(cd "$build" && pwd)   # the test changes directory
nn=$build/nnsc-aot

# ---- builds: gpt2-tiny on 4 ranks (dp 2 x tp 2), as in the README; and the
# same spec without its `stream` keys (no input reads tokens)
o=$tmp/o
plan=(--devices 4 --set plan.policy=hybrid --set plan.tp=2 -q)
if ! "$nn" "$top/examples/gpt2-tiny.ini" -o "$o" "${plan[@]}" >"$tmp/build.log" 2>&1; then
  no "build gpt2-tiny: $(tail -n 3 "$tmp/build.log")"
  echo "$pass passed, $fail failed"
  exit 1
fi
sed '/^stream *=/d' "$top/examples/gpt2-tiny.ini" >"$tmp/nostream.ini"
"$nn" "$tmp/nostream.ini" -o "$tmp/ns" "${plan[@]}" >"$tmp/build.log" 2>&1 || no "build without stream keys: $(tail -n 3 "$tmp/build.log")"
data=$top/data/tinytext_train.bin

# losses FILE: the "step S/N loss L" prefix of every step line
losses() { grep '^step ' "$1" | cut -d' ' -f1-4; }

# ---- 1. --data at run time
cd "$top" || exit 1   # the relative data path of the README
expect_rc 0 "--data on a build without [train] data, checkpoints every 5 of 6 steps" \
  "$o/launch" --data data/tinytext_train.bin --ckpt-dir "$tmp/ck" --ckpt-every 5 --steps 6
cp "$tmp/out" "$tmp/data.out"
[[ $(losses "$tmp/data.out" | wc -l) == 6 && -f $tmp/ck/step-5.safetensors && -f $tmp/ck/final.safetensors ]] &&
  ok "  ... 6 step lines, step-5 and final checkpoints" || no "--data run: $(cat "$tmp/data.out")"
grep -q "^run: 6 steps, data data/tinytext_train.bin," "$tmp/data.out" && ok "  ... the banner names the data file" ||
  no "banner without the data file: $(grep '^run:' "$tmp/data.out")"
expect_rc 0 "--resume from step-5 with --data" \
  "$o/launch" --data data/tinytext_train.bin --ckpt-dir "$tmp/ck" --ckpt-every 5 --steps 6 --resume
grep -q "^resume from .*step-5.safetensors: step 5 of 6 done" "$tmp/out" &&
  [[ $(losses "$tmp/out") == "$(losses "$tmp/data.out" | tail -n 1)" ]] &&
  ok "  ... resumes at step 6 with the uninterrupted run's loss" || no "resume: $(cat "$tmp/out")"
expect_rc 0 "no data file: synthetic tokens" "$o/launch" --steps 6
cp "$tmp/out" "$tmp/syn.out"
grep -q "^run: 6 steps, synthetic tokens" "$tmp/syn.out" && ok "  ... the banner says synthetic tokens" || no "banner: $(grep '^run:' "$tmp/syn.out")"
[[ -n $(losses "$tmp/syn.out") && $(losses "$tmp/syn.out") != "$(losses "$tmp/data.out")" ]] &&
  ok "  ... losses differ from the run on the data file" || no "synthetic and data runs have the same losses"
expect_rc 0 "the build without stream keys" "$tmp/ns/launch" --steps 6
[[ $(losses "$tmp/out") == "$(losses "$tmp/syn.out")" ]] &&
  ok "  ... trains exactly like the token build without data (same synthetic numbers)" ||
  no "synthetic tokens differ from dist int: $(losses "$tmp/out" | tail -n 1) vs $(losses "$tmp/syn.out" | tail -n 1)"
expect_rc 0 "--data on the build made with [train] data" \
  "$nn" "$top/examples/gpt2-tiny.ini" -o "$tmp/bd" "${plan[@]}" --set "train.data=$data"
"$tmp/bd/launch" --steps 6 >"$tmp/bd.out" 2>&1
[[ $(losses "$tmp/bd.out") == "$(losses "$tmp/data.out")" ]] && ok "  ... --data gives the same losses as a build-time data file" ||
  no "build-time data vs --data: $(losses "$tmp/bd.out" | tail -n 1) vs $(losses "$tmp/data.out" | tail -n 1)"
expect_rc 2 "--eval-data without training data" "$o/launch" --eval-data data/tinytext_val.bin --steps 1
says "pass --data PATH too" "--eval-data alone"
expect_rc 2 "--data on a build with no token inputs" "$tmp/ns/launch" --data data/tinytext_train.bin
says "compiled for synthetic data" "no token inputs"
says "add \`stream = K\` to [input tokens], [input targets]" "no token inputs: which inputs"
grep -q "\[train\] \`data" "$tmp/err" && no "the hint asks for [train] data, which does not help" || ok "  ... and does not ask for [train] data"
expect_rc 0 "--resume of the finished run (--steps 5: step-5 is its last)" \
  "$o/launch" --data data/tinytext_train.bin --ckpt-dir "$tmp/ck" --steps 5 --resume
grep -q "^resume from .*step-5.safetensors: step 5 of 5 done: no step left to run$" "$tmp/out" &&
  grep -q "^done: no step to run: the checkpoint resumed from is at step 5, the run has 5; .* larger --steps" "$tmp/out" &&
  ! grep -q nan "$tmp/out" && ok "  ... says the run is complete and what to do, no 'final loss nan'" ||
  no "finished run: $(tail -n 2 "$tmp/out")"
# a token id the model cannot embed (300; the vocabulary is 256) at token 1234
python3 - "$data" "$tmp/oov.bin" <<'PYEOF'
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
b[1024 + 2 * 1234:1024 + 2 * 1234 + 2] = (300).to_bytes(2, 'little')
open(sys.argv[2], 'wb').write(b)
PYEOF
expect_rc 2 "launch --data with token id 300 at token 1234 (vocabulary 256)" "$o/launch" --data "$tmp/oov.bin" --steps 1
n=$(grep -c "oov.bin: token 1234 (of [0-9]*) is 300, outside the vocabulary \[0, 256) of input" "$tmp/err")
[[ $n == 1 ]] && ok "  ... the file, the token, the id and the vocabulary, said once for 4 ranks" ||
  no "out-of-vocabulary token: $n lines: $(cat "$tmp/err")"
mkfifo "$tmp/fifo.bin"
t0=$SECONDS
expect_rc 2 "launch --data FIFO (no writer)" timeout 30 "$o/launch" --data "$tmp/fifo.bin" --steps 1
says "fifo.bin: a FIFO (named pipe), not a regular file: --data takes token files" "--data FIFO"
((SECONDS - t0 < 10)) && ok "  ... at once ($((SECONDS - t0)) s), never waiting for a writer" || no "--data FIFO took $((SECONDS - t0)) s"
cd "$tmp" || exit 1

# ---- 2. messages: whole lines, once under launch
expect_rc 2 "launch --frobnicate" "$o/launch" --frobnicate
n=$(grep -c "unknown flag '--frobnicate'" "$tmp/err")
[[ $n == 1 ]] && ok "  ... the bad flag is reported once, not once per rank" || no "bad flag reported $n times: $(cat "$tmp/err")"
grep -qv -E "^(nnsc|rank [0-9]+|launch): " "$tmp/err" && no "a malformed line: $(cat "$tmp/err")" || ok "  ... every line starts with its speaker"
expect_rc 2 "launch --data missing.bin" "$o/launch" --data "$tmp/missing.bin"
n=$(grep -c "missing.bin: no such file" "$tmp/err")
m=$(grep -c "^rank " "$tmp/err")
[[ $n == 1 && $m == 1 ]] && ok "  ... the missing file is reported once ($(grep '^rank ' "$tmp/err"))" ||
  no "missing file reported $n times, $m rank lines: $(cat "$tmp/err")"
expect_rc 2 "launch --stpes 3" "$o/launch" --stpes 3
n=$(grep -c "unknown flag '--stpes': did you mean '--steps'?" "$tmp/err")
[[ $n == 1 ]] && ok "  ... did you mean '--steps'? (once)" || no "--stpes: $(cat "$tmp/err")"
expect_rc 0 "launch -q --steps 2 (the compiler's -q)" "$o/launch" -q --steps 2
! grep -q "^step " "$tmp/out" && grep -q "^done: 2 steps" "$tmp/out" && ok "  ... -q is --quiet" || no "-q: $(cat "$tmp/out" "$tmp/err")"
expect_rc 0 "launch --help" "$o/launch" --help
n=$(grep -c "^usage:" "$tmp/out")
[[ $n == 1 ]] && grep -q -- "--peak-flops" "$tmp/out" && ok "  ... the usage is printed once, with --peak-flops" || no "usage printed $n times"
expect_rc 0 "rank0 --help alone" "$o/rank0" --help
grep -q "^usage:" "$tmp/out" && ok "  ... prints the usage" || no "rank0 --help printed nothing"

# four ranks writing errors into one pipe at once, ten times: every line whole
for ((i = 0; i < 10; i++)); do
  for r in 0 1 2 3; do NNSC_RANK=$r NNSC_WORLD=4 "$o/rank$r" --frobnicate-the-whole-line & done
  wait
done 2>&1 >/dev/null | cat >"$tmp/inter.err"
n=$(grep -c -E "^nnsc: unknown flag '--frobnicate-the-whole-line' \(flags: .* --help\)$" "$tmp/inter.err")
[[ $n == 40 && $(wc -l <"$tmp/inter.err") == 40 ]] && ok "40 error lines of 4 ranks racing into one pipe arrive whole" ||
  no "interleaved lines ($n of $(wc -l <"$tmp/inter.err") whole): $(head -n 5 "$tmp/inter.err")"

# the launcher's filter: a line every rank prints alike once, each rank's own
# lines all, a rank's repeated line each time, launch's own line after them
mkdir -p "$tmp/fake"
cp "$o/launch" "$tmp/fake/launch"
for r in 0 1 2 3; do
  cat >"$tmp/fake/rank$r" <<EOF
#!/usr/bin/env bash
echo "rank $r: every rank says this" >&2
echo "rank $r: only rank $r says this" >&2
[[ $r == 2 ]] && echo "rank 2: every rank says this" >&2
[[ $r == 3 ]] && { sleep 0.2; exit 3; }
exit 0
EOF
  chmod +x "$tmp/fake/rank$r"
done
expect_rc 3 "launch with ranks that print alike and apart (fake ranks)" "$tmp/fake/launch"
every=$(grep -c "every rank says this" "$tmp/err")
own=$(grep -c -E "^rank ([0-3]): only rank \1 says this$" "$tmp/err")
[[ $own == 4 && ($every == 1 || $every == 2) ]] && [[ $every == 1 || $(grep "every rank" "$tmp/err" | cut -d: -f1 | sort -u) == "rank 2" ]] &&
  [[ $(tail -n 1 "$tmp/err") == "launch: rank 3 failed (exit status 3); stopping the other ranks" ]] &&
  ok "  ... the common line once (or a rank's repeat), every rank's own line, launch's line last" ||
  no "filter: $(cat "$tmp/err")"

# ---- 3. a rank started alone
novars=(env -u NNSC_RANK -u NNSC_WORLD -u RANK -u WORLD_SIZE -u SLURM_PROCID -u SLURM_NTASKS
        -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u NNSC_LAUNCH)
expect_rc 2 "rank1 alone, no rank in the environment" "${novars[@]}" "$o/rank1"
says "$o/launch" "rank alone: names launch"
says "NNSC_RANK=K NNSC_WORLD=4" "rank alone: names the variables"
grep -q "run the rank" "$tmp/err" && no "rank alone: still says 'run the rank... executable'" || ok "  ... and not 'run the rankN executable'"
expect_rc 2 "rank0 alone in a world of 4" "${novars[@]}" "$o/rank0"
says "start all 4 ranks" "rank0 alone"
expect_rc 2 "rank1 with NNSC_RANK=2" env NNSC_RANK=2 NNSC_WORLD=4 "$o/rank1"
says "run the rank2 executable for rank 2" "wrong rank"
expect_rc 2 "rank1 in a world of 2" env NNSC_RANK=1 NNSC_WORLD=2 "$o/rank1"
says "rebuild with --devices 2" "wrong world"

# ---- 4. banner, step line, summary, --log
expect_rc 0 "3 steps with --peak-flops 50G --log" "$o/launch" --steps 3 --peak-flops 50G --log "$tmp/log.jsonl"
cp "$tmp/out" "$tmp/ux.out"
grep -q "^model gpt2-tiny: 834k params, mesh dp2 x tp2 (hybrid), world 4, 512 tokens/step, arena 9.3MiB per rank$" "$tmp/ux.out" &&
  grep -q "^run: 3 steps, synthetic tokens (no data file), 2.7 GFLOP/step, peak 50 GFLOP/s per device (--peak-flops)$" "$tmp/ux.out" &&
  ok "  ... banner: model, params, mesh, world, tokens/step, arena, FLOP/step, peak" || no "banner: $(head -n 2 "$tmp/ux.out")"
# mfu = flops_per_step / step time / (peak x world), flops_per_step the sum of plan.txt's per-rank counts
gflop=$(awk '{ for (i = 2; i < NF; i++) if ($i == "compute" && $(i + 2) == "GFLOP/step") s += $(i + 1) } END { print s }' "$o/plan.txt")
bad=$(awk -v g="$gflop" '/^step / {
        for (i = 1; i < NF; i++) { if ($i == "ms") ms = $(i + 1); if ($i == "mfu") mfu = $(i + 1); if ($i == "mem") mem = $(i + 1) }
        n++; want = g * 1e9 / (ms * 1e-3) / (50e9 * 4) * 100; sub(/%$/, "", mfu)
        d = mfu - want; if (d < 0) d = -d
        if (d > 0.1 + 0.01 * want || mem !~ /^[0-9.]+(KiB|MiB|GiB)$/) print "step " n ": mfu " mfu "% want " want "%, mem " mem
      } END { if (n != 3) print n " step lines" }' "$tmp/ux.out")
[[ -z $bad ]] && ok "  ... step lines: mfu = plan.txt's $gflop GFLOP / ms / (50G x 4), mem in binary units" || no "step lines: $bad"
last=$(grep '^step 3/3' "$tmp/ux.out" | awk '{ print $4 }')
grep -q -E "^done: 3 steps in [0-9.]+s, step median [0-9.]+ ms \(mean [0-9.]+ ms\), [0-9]+ tok/s, final loss $last, mfu [0-9.]+%, peak mem [0-9.]+(MiB|GiB) \(rank 0\)$" "$tmp/ux.out" &&
  ok "  ... summary: steps, wall, median and mean step, tok/s, final loss, mfu, peak mem" || no "summary: $(tail -n 1 "$tmp/ux.out")"
if python3 - "$tmp/log.jsonl" "$gflop" >"$tmp/json.txt" 2>&1 <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
start, steps, summary = lines[0]["start"], lines[1:-1], lines[-1]["summary"]
assert start["model"] == "gpt2-tiny" and start["params"] == 834304 and start["policy"] == "hybrid"
assert (start["dp"], start["tp"], start["world"], start["tokens_per_step"]) == (2, 2, 4, 512)
assert abs(start["flops_per_step"] / (float(sys.argv[2]) * 1e9) - 1) < 2e-3 and start["peak_flops"] == 5e10
assert [s["step"] for s in steps] == [1, 2, 3]
for s in steps:
    assert abs(s["mfu"] - start["flops_per_step"] / (s["ms"] * 1e-3) / (5e10 * 4)) < 1e-3 * s["mfu"]
    assert s["peak_rss_bytes"] > 1 << 20
assert summary["steps_run"] == 3 and summary["final_loss"] == steps[-1]["loss"] and summary["mfu"] > 0
assert summary["step_ms_median"] == sorted(s["ms"] for s in steps)[1] or abs(summary["step_ms_median"] / sorted(s["ms"] for s in steps)[1] - 1) < 1e-3
EOF
then ok "  ... --log: start line, steps with mfu and peak_rss_bytes, summary (valid JSON, consistent)"
else no "--log JSON: $(tail -n 3 "$tmp/json.txt"; cat "$tmp/log.jsonl")"; fi
expect_rc 0 "no peak known" "$o/launch" --steps 1
grep -q "^step 1/1 .* mfu - mem " "$tmp/out" && grep -q "peak unknown" "$tmp/out" && ok "  ... mfu - (no number invented on a CPU)" || no "no peak: $(cat "$tmp/out")"
expect_rc 0 "NNSC_PEAK_FLOPS=312T" env NNSC_PEAK_FLOPS=312T "$o/launch" --steps 1
grep -q "peak 312 TFLOP/s per device (NNSC_PEAK_FLOPS)" "$tmp/out" && ok "  ... the banner names the peak and its source" || no "NNSC_PEAK_FLOPS: $(grep '^run' "$tmp/out")"
expect_rc 2 "--peak-flops 12X" "$o/launch" --peak-flops 12X
says "e.g. 1.5e12, 312T or 50G" "bad --peak-flops"
expect_rc 0 "--quiet" "$o/launch" --steps 2 --quiet
! grep -q "^step " "$tmp/out" && grep -q "^model gpt2-tiny" "$tmp/out" && grep -q "^done: 2 steps" "$tmp/out" &&
  ok "  ... no step lines; banner and summary stay" || no "--quiet: $(cat "$tmp/out")"
expect_rc 0 "verify still reads the step lines" "$nn" verify "$top/examples/mlp.ini" --devices 2 --steps 3

echo "$pass passed, $fail failed"
((fail == 0))
