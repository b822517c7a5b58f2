#!/usr/bin/env bash
# bench/megatron.sh -- the cost model against Megatron-LM's published runs
# (issue 36 items 5 and 6): for each row of Narayanan et al., "Efficient
# Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
# (SC'21), Table 1 (A100 80GB, sequence 2048, vocabulary 51200), plus GPT-3
# 175B on 1024 GPUs:
#
#   published   the step time the row's throughput implies: F / (GPUs x
#               TFLOP/s per GPU), F = 96 B s l h^2 (1 + s / (6 h) + V / (16 l h))
#               FLOPs per step (the paper's count, recompute included);
#   Megatron    plan.txt's estimate of Megatron's own plan of the row: its
#               tp and pp, dp = GPUs / (tp pp), micro-batch size 1
#               (micro_batches = B / dp), every layer recomputed, 1f1b --
#               through the pipeline pass (`--stop-after schedule -v` prints
#               the estimate plan.txt would, and the largest memory plan
#               of the stages' first ranks; seconds even at 280
#               micro-batches): priced as Megatron-LM ran it
#               (`cluster.attention = unfused`: its attention stores the
#               scores, passes/cost.c) against the published step, and as
#               nnsc-aot's program runs it (fused attention); with MEM=1
#               also the whole build (-o) and plan.txt's memory per rank,
#               which takes minutes at hundreds of micro-batches and 1000+
#               ranks today;
#   searched    policy = auto's chosen plan (`--stop-after graph -v`), its
#               estimate, its ratio to the estimate of Megatron's plan as
#               nnsc-aot runs it (both nnsc-aot's program), its memory and the
#               search's time (its report's), or why it failed.
#
# The spec is examples/gpt2-124m.ini at the row's dims, dtype = bf16, on
# a100-80g (ir/profile.c; docs/plan-search.md, Calibration of a100-80g).
# MB_<row> (MB_1_7B, MB_7_5B, MB_39_1B, MB_145_6B, MB_529_6B, MB_GPT3) sets
# the micro-batches of Megatron's plan (B / dp by default); MEM_MB_<row>
# those of its whole build (default the same; 0: none).  MEM=1 makes the
# whole builds (default none), SEARCH=0 skips the searches; ROWS (default all: "1.7B
# 7.5B 39.1B 145.6B 529.6B GPT3") picks rows.  TIMEOUT (default 1200 s)
# bounds each estimate, MEM_TIMEOUT (900 s) each build, SEARCH_TIMEOUT (600
# s) each search.  Output: a markdown table for docs/performance.md.
# Environment: BUILD (default build/), WORK (default a fresh directory under
# $TMPDIR, removed at the end).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
nn=${BUILD:-$top/build}/nnsc-aot
[[ -x $nn ]] || { echo "megatron.sh: no $nn (./build.sh)" >&2; exit 1; }
work=${WORK:-}
if [[ -z $work ]]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/nnsc-megatron-XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

# name|heads|hidden|layers|tp|pp|GPUs|batch|published TFLOP/s per GPU
rows=(
  "1.7B|24|2304|24|1|1|32|512|137"
  "7.5B|32|4096|36|4|1|128|512|142"
  "39.1B|64|8192|48|8|2|512|1536|138"
  "145.6B|96|12288|80|8|8|1536|2304|148"
  "529.6B|128|20480|105|8|35|2520|2520|163"
  "GPT3|96|12288|96|8|16|1024|1536|140"
)
want=${ROWS:-1.7B 7.5B 39.1B 145.6B 529.6B GPT3}
S=2048 V=51200

# field FILE REGEX: the first capture of REGEX on FILE's lines (sed -E), or empty
field() { sed -nE "s/$2/\\1/p" "$1" | head -n 1; }

echo "megatron.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), nnsc-aot $(git -C "$top" rev-parse --short HEAD 2>/dev/null), a100-80g, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| row | GPUs (dp x tp x pp) | published step | Megatron's plan: micro-batches | as Megatron-LM runs it (attention unfused) | / published | as nnsc-aot runs it | its memory per rank | its whole build (-o): plan.txt's memory, time | searched plan | its estimate | / Megatron's plan in nnsc-aot | its memory | search time |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
fail=0
for r in "${rows[@]}"; do
  IFS='|' read -r name nh h l tp pp gpus b tf <<<"$r"
  [[ " $want " == *" $name "* ]] || continue
  dp=$((gpus / (tp * pp)))
  m0=$((b / dp))
  var=MB_${name//./_}
  m=${!var:-$m0}
  pub=$(awk -v B="$b" -v s=$S -v l="$l" -v h="$h" -v V=$V -v G="$gpus" -v tf="$tf" \
    'BEGIN { F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)); printf "%.2f", F / (G * tf * 1e12) }')
  sets=(--devices "$gpus" --set dims.L="$l" --set dims.C="$h" --set dims.NH="$nh" --set dims.T=$S --set dims.B="$b"
    --set dims.V=$V --set dims.VR=$V --set train.dtype=bf16 --set cluster.device=a100-80g)
  plan=(--set plan.policy=hybrid --set plan.tp="$tp" --set plan.pp="$pp" --set plan.recompute=h)
  # the estimates: the plan through the pipeline pass (--stop-after schedule -v prints plan.txt's estimate),
  # priced as Megatron-LM runs it (unfused attention: the published run's program) and as nnsc-aot does
  for a in unfused fused; do
    timeout "${TIMEOUT:-1200}" "$nn" "$top/examples/gpt2-124m.ini" "${sets[@]}" "${plan[@]}" --set train.micro_batches="$m" \
      --set cluster.attention=$a --stop-after schedule -v >/dev/null 2>"$work/$name.est.$a.log"
    rc=$?
    e=$(field "$work/$name.est.$a.log" '^nnsc-aot: estimate   step ([0-9.]+) ms.*')
    if [[ -n $e ]]; then
      cell="$(awk -v e="$e" 'BEGIN { printf "%.2f", e / 1e3 }') s"
    else
      why=$( ((rc == 124)) && echo "timed out (${TIMEOUT:-1200} s)" || grep -v '^nnsc-aot: [a-z]* *[0-9.]* ms$' \
        "$work/$name.est.$a.log" | tail -n 1 | cut -c1-120)
      cell="failed: $why" fail=1
    fi
    if [[ $a == unfused ]]; then
      ecell=$cell ratio=""
      [[ -n $e ]] && ratio=$(awk -v e="$e" -v p="$pub" 'BEGIN { printf "%.3f", e / 1e3 / p }')
    else
      est=$e fcell=$cell
      pmem=$(field "$work/$name.est.$a.log" '^nnsc-aot: estimate   step .* memory ([0-9.]+) MiB per rank.*')
      [[ -n $pmem ]] && pmem=$(awk -v m="$pmem" 'BEGIN { printf "%.1f GiB", m / 1024 }')
    fi
  done
  mcell=$m
  ((m != m0)) && mcell="$m (not $m0: $var)"
  # its memory: plan.txt of the whole build (-o), at MEM_MB_<row> micro-batches (default the estimate's)
  mvar=MEM_MB_${name//./_}
  mm=${!mvar:-$m}
  mem="(MEM=0)" bt=""
  if [[ $mm == 0 ]]; then
    mem="(not built: $mvar=0)"
  elif [[ ${MEM:-0} != 0 ]]; then
    out=$work/$name
    rm -rf "$out"
    t0=$(date +%s.%N)
    timeout "${MEM_TIMEOUT:-900}" "$nn" "$top/examples/gpt2-124m.ini" "${sets[@]}" "${plan[@]}" \
      --set train.micro_batches="$mm" -q -o "$out" >"$work/$name.build.log" 2>&1
    rc=$?
    bt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f s", b - a }')
    mem=$( [[ -f $out/plan.txt ]] && field "$out/plan.txt" '^memory    per rank at most ([0-9.]+ [KMGT]?i?B).*')
    if [[ -z $mem ]]; then
      mem="build failed: $( ((rc == 124)) && echo "timed out (${MEM_TIMEOUT:-900} s)" ||
        tail -n 1 "$work/$name.build.log" | cut -c1-100)"
    elif ((mm != m)); then
      mem="$mem (built at $mm micro-batches: $mvar)"
    fi
    rm -rf "$out"
  fi
  scell="(SEARCH=0)" sest="" sratio="" smem="" stime=""
  if [[ ${SEARCH:-1} != 0 ]]; then
    # (its status from a command substitution whose stderr is dropped: an abort's "Aborted" line from bash
    # stays out of the table)
    src=$( {
      timeout "${SEARCH_TIMEOUT:-600}" "$nn" "$top/examples/gpt2-124m.ini" "${sets[@]}" --set plan.policy=auto \
        --stop-after graph -v >/dev/null 2>"$work/$name.search.log"
      echo $?
    } 2>/dev/null)
    chosen=$(sed -n 's/^  chosen   //p' "$work/$name.search.log" | head -n 1)
    stime=$(field "$work/$name.search.log" '^search .* priced in ([0-9.]+ s).*')
    re='^(.*): step ~?([0-9.]+) ms, memory ([0-9.]+ [KMGT]?i?B)'
    if [[ $chosen =~ $re ]]; then
      scell=${BASH_REMATCH[1]}
      sest=$(awk -v e="${BASH_REMATCH[2]}" 'BEGIN { printf "%.2f s", e / 1e3 }')
      smem=${BASH_REMATCH[3]}
      [[ -n $est ]] && sratio=$(awk -v a="${BASH_REMATCH[2]}" -v e="$est" 'BEGIN { printf "%.3f", a / e }')
    else
      why=$( ((src == 124)) && echo "timed out (${SEARCH_TIMEOUT:-600} s)" ||
        grep -v '^ ' "$work/$name.search.log" | tail -n 1 | cut -c1-120)
      scell="failed (exit $src): ${why:-no chosen plan}"
    fi
  fi
  printf '| %s | %s (%s x %s x %s) | %s s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$gpus" "$dp" \
    "$tp" "$pp" "$pub" "$mcell" "$ecell" "$ratio" "$fcell" "${pmem:-?}" "$mem${bt:+, $bt}" "$scell" "$sest" "$sratio" "$smem" \
    "$stime"
done
exit $fail
