#!/usr/bin/env bash
# tests/docs.sh -- every command shown in README.md and docs/*.md is run, or
# accounted for with the reason it cannot run in this suite; and every block
# of program output marked <!-- output: CMD --> is what CMD prints now
# (tests/doc_outputs.py).
#
# tests/doc_commands.py lists the commands of the Markdown code blocks.  Each
# must match a row of the table below (first match wins):
#   run          run it as written, from a scratch directory holding build/,
#                examples/, data/ and golden/ of this checkout (out/, ckpt/ are
#                made there); `nnsc-aot` is build/nnsc-aot; optional parts in
#                [brackets] are left out; it must exit 0
#   rc N TEXT    the same, but it must exit N and print TEXT (what it does here)
#   gpu          run on a machine with an NVIDIA driver (exit 0); elsewhere
#                it must refuse cleanly: exit 2, "no CUDA driver"
#   skip REASON  not run here (a GPU, a cluster, the suite itself, a benchmark
#                of minutes); the reason is printed
# A row "@FILE REGEX" applies to the commands of that file only.
# The commands of one file run in order in one directory (a compile, then
# its launch).  A command no row matches fails the test ("add it to the
# table"), and so does a row that matches no command (a stale row).
. "$(dirname "$0")/lib.sh" docs
build=$(cd "$build" && pwd)

table=$(cat <<'EOF'
^\./build\.sh$	skip it builds this checkout; CI runs it on a fresh machine before this suite
^\./build\.sh test$	skip it is the command that runs this suite
^\./build\.sh san test$	skip the suite under the sanitizers; CI runs it after the plain suite
^([A-Z][A-Z0-9_]*=\S+ )*bench/	skip a benchmark (minutes; results in docs/performance.md, not a test)
^python3 bench/best_of\.py	skip combines saved benchmark outputs (bench/)
^tools/hostile_probes\.sh$	skip probes of wall time and of another user's files (run by hand; each defect it found has a test in the suite)
^tools/fuzz_specs\.py 	skip a fuzzer of minutes against the sanitizer build (run by hand; findings become tests/bad/ cases)
^build/bench/bench_matmul	skip needs a GPU (bench/gpu)
^build/tests/test_rt_kernels --bench	skip a kernel benchmark
^tests/cuda_ops\.sh --gpu	skip needs a GPU; the suite runs tests/cuda_ops.sh under the driver double
^tests/cuda_ops\.sh$	skip the suite runs it (tests/run.sh: cuda_ops)
^NNSC_BUILD=build tests/golden\.sh golden/\S+ --update	skip rewrites a golden file; tests/golden.sh without --update runs in the suite
^tests/golden\.sh path/to/model\.ini	skip a user's spec (a placeholder); tests/cli.sh runs the same on a copy of examples/mlp.ini
^\./build\.sh install 	skip installs into a system prefix; tests/cli.sh installs into a scratch one (the same CMake install target)
^(srun|mpirun) 	skip needs a Slurm / Open MPI cluster (docs/cluster.md)
^RANK=\$r WORLD_SIZE=8 .*out/rank\$r	skip one node of a 2-node GPU cluster (docs/cluster.md)
^nnsc-aot MODEL\.ini -o DIR \[options\]	skip a synopsis (placeholders), not a command
^nnsc-aot verify MODEL\.ini \[options\]	skip a synopsis (placeholders), not a command
^nnsc-aot profile \[MODEL\.ini\] -o FILE	skip a synopsis (placeholders), not a command
^nnsc-aot profile \[MODEL\.ini\] --(pack|from) DIR	skip a synopsis (placeholders), not a command
^out/rank0 \[--steps N\]	skip a synopsis (placeholders), not a command
^nnsc-aot check-op MODEL\.ini NAME	skip a synopsis (placeholders), not a command
^build/nnsc-aot .*--target cuda	run
^nnsc-aot .*--target cuda	run
@cuda.md ^out/launch$	gpu
^out/launch$	run
^out/cal/run\.sh out/cal/logs$	run
^out/launch --data	run
^build/nnsc-aot 	run
^nnsc-aot 	run
EOF
)

mapfile -t rows <<<"$table"
used=()
for i in "${!rows[@]}"; do used[i]=0; done

# scratch directories, one per Markdown file: the checkout's inputs, linked
mkwork() {
  local w=$tmp/work/$1
  mkdir -p "$w/bin"
  ln -s "$build" "$w/build"
  for d in examples data golden tests; do ln -s "$top/$d" "$w/$d"; done
  ln -s "$build/nnsc-aot" "$w/bin/nnsc-aot"
  echo "$w"
}

cuda_ok=1
[[ -d /usr/local/cuda/include ]] || cuda_ok=0

python3 "$top/tests/doc_commands.py" "$top/README.md" "$top"/docs/*.md >"$tmp/cmds" || no "doc_commands.py failed"
n=$(wc -l <"$tmp/cmds")
((n > 20)) && ok "found $n commands in README.md and docs/" || no "only $n commands found"

while IFS=$'\t' read -r where cmd; do
  file=${where%%:*}
  rel=${where#"$top"/}
  hit=-1
  for i in "${!rows[@]}"; do
    re=${rows[i]%%$'\t'*}
    if [[ $re == @* ]]; then
      only=${re%% *}
      re=${re#* }
      [[ $(basename "$file") == "${only#@}" ]] || continue
    fi
    if [[ $cmd =~ $re ]]; then hit=$i; break; fi
  done
  if ((hit < 0)); then
    no "$rel: not run by any test: $cmd (add it to tests/docs.sh)"
    continue
  fi
  used[hit]=1
  action=${rows[hit]#*$'\t'}
  case $action in
    skip\ *)
      echo "skip  $rel: $cmd -- ${action#skip }"
      continue
      ;;
  esac
  if [[ $cmd == *"--target cuda"* ]] && ((!cuda_ok)); then
    echo "skip  $rel: $cmd -- no CUDA toolkit here"
    continue
  fi
  key=$(basename "$file" .md)
  w=$tmp/work/$key
  [[ -d $w ]] || w=$(mkwork "$key")
  run=$(sed -E 's/ \[[^]]*\]//g' <<<"$cmd")
  want=0
  text=""
  if [[ $action == rc\ * ]]; then
    read -r _ want text <<<"$action"
  elif [[ $action == gpu ]] && ! command -v nvidia-smi >/dev/null; then
    want=2 text="no CUDA driver"
  fi
  (cd "$w" && PATH="$w/bin:$PATH" timeout 600 bash -c "$run") >"$tmp/out" 2>"$tmp/err" </dev/null
  rc=$?
  if [[ $rc == "$want" ]] && { [[ -z $text ]] || grep -qF -- "$text" "$tmp/out" "$tmp/err"; }; then
    ok "$rel: $cmd (exit $rc)"
  else
    no "$rel: $cmd: exit $rc, wanted $want${text:+ and '$text'}"
    tail -n 5 "$tmp/err" | sed 's/^/      | /'
  fi
done <"$tmp/cmds"

# program output the docs show (a block after <!-- output: CMD -->): checked against CMD's output
# now, so a doc cannot drift from the program (tests/doc_outputs.py)
mkdir -p "$tmp/outputs"
NNSC_BUILD=$build python3 "$top/tests/doc_outputs.py" "$tmp/outputs" "$top" "$top/README.md" "$top"/docs/*.md >"$tmp/outputs.log" 2>&1
grep -E '^(ok|FAIL|      )' "$tmp/outputs.log"
pass=$((pass + $(grep -c '^ok' "$tmp/outputs.log")))
fail=$((fail + $(grep -c '^FAIL' "$tmp/outputs.log")))
n_out=$(grep -c '^ok\|^FAIL' "$tmp/outputs.log")
((n_out >= 5)) && ok "$n_out blocks of program output in the docs checked" || no "only $n_out output blocks found: $(tail -n 2 "$tmp/outputs.log")"

for i in "${!rows[@]}"; do
  ((used[i])) || no "stale row in tests/docs.sh (no command in the docs matches): ${rows[i]%%$'\t'*}"
done
echo "$pass passed, $fail failed"
((fail == 0))
