#!/usr/bin/env bash
# tests/cuda.sh -- the compiler side of --target cuda, on a machine without a
# GPU: the command line (bad --target / --arch values), every example built
# with NVRTC for sm_80 and sm_90, what the rank executables hold (both cubins,
# valid CUDA ELF images, the same in every rank, exactly the cubins NVRTC
# makes from the source --emit-kernels writes), what they link (no CUDA, NCCL
# or toolkit library: rtlib dlopens the driver and NCCL), determinism, and
# what running them here gives: the clear no-driver message and exit 2, from a
# rank, from out/launch and from verify --target cuda.  On a machine with an
# NVIDIA GPU (nvidia-smi lists one) the runs must train instead.
#
# Exits 77 (skipped; tests/run.sh lists it as SKIP) after the command-line
# checks when nnsc-aot was built without NVRTC.
. "$(dirname "$0")/lib.sh" cuda

# py CMD ARGS...: the ELF and NVRTC helpers below
py() {
  python3 - "$@" <<'EOF'
import ctypes, struct, sys

def elf_sections(d):
    """(addr, offset, size) of every section of an ELF64 little-endian file."""
    shoff, = struct.unpack_from('<Q', d, 0x28)
    shentsize, shnum = struct.unpack_from('<HH', d, 0x3a)
    out = []
    for k in range(shnum):
        o = shoff + k * shentsize
        name, typ, flags, addr, off, size, link = struct.unpack_from('<IIQQQQI', d, o)
        out.append((typ, addr, off, size, link))
    return out

def symbol(d, want):
    """File bytes of symbol `want` (from .symtab) of an ELF64 executable."""
    secs = elf_sections(d)
    for typ, addr, off, size, link in secs:
        if typ != 2:  # SHT_SYMTAB
            continue
        stroff = secs[link][2]
        for k in range(size // 24):
            st_name, info, other, shndx, value, ssize = struct.unpack_from('<IBBHQQ', d, off + 24 * k)
            end = d.index(b'\0', stroff + st_name)
            if d[stroff + st_name:end].decode() == want:
                s = secs[shndx]
                return d[s[2] + value - s[1]: s[2] + value - s[1] + ssize]
    sys.exit('no symbol ' + want)

cmd = sys.argv[1]
if cmd == 'image':        # image EXE SYMBOL OUT: write the symbol's bytes to OUT
    data = symbol(open(sys.argv[2], 'rb').read(), sys.argv[3])
    open(sys.argv[4], 'wb').write(data)
elif cmd == 'cubin':      # cubin FILE: "machine SM" of a CUDA ELF image
    d = open(sys.argv[2], 'rb').read()
    if d[:4] != b'\x7fELF' or d[4] != 2:
        sys.exit('not an ELF64 image')
    machine, = struct.unpack_from('<H', d, 18)
    flags, = struct.unpack_from('<I', d, 48)
    sm = (flags >> 8) & 0xff if d[8] >= 8 else flags & 0xff   # EI_ABIVERSION 8+: new e_flags layout
    print(machine, sm)
elif cmd == 'nvrtc':      # nvrtc LIBNVRTC SRC ARCH OUT: compile like codegen/nvrtc.c does
    lib = ctypes.CDLL(sys.argv[2])
    src = open(sys.argv[3], 'rb').read()
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b'nnsc_kernels.cu', 0, None, None) == 0
    opts = [b'--gpu-architecture=' + sys.argv[4].encode(), b'-default-device', b'--std=c++17']
    arr = (ctypes.c_char_p * len(opts))(*opts)
    if lib.nvrtcCompileProgram(prog, len(opts), arr) != 0:
        sys.exit('NVRTC failed on ' + sys.argv[3])
    n = ctypes.c_size_t()
    assert lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)) == 0
    buf = ctypes.create_string_buffer(n.value)
    assert lib.nvrtcGetCUBIN(prog, buf) == 0
    open(sys.argv[5], 'wb').write(buf.raw)
EOF
}

[[ -x $nn ]] || { echo "FAIL  no $nn: build nnsc-aot first"; exit 1; }
mlp=$top/examples/mlp.ini
# ---- the command line: bad values exit 2 naming what is wrong and what is allowed
expect_rc 0 "--help" "$nn" --help
grep -q -- "--target T" "$tmp/out" && grep -q -- "--arch LIST" "$tmp/out" && grep -q -- "--emit-kernels" "$tmp/out" &&
  ok "--help documents --target, --arch and --emit-kernels" || no "--help text"
expect_rc 2 "--target gpu" "$nn" "$mlp" -o "$tmp/x" --target gpu
says "unknown target 'gpu'" "--target gpu"
says "--target cpu (the default) or --target cuda" "--target gpu"
expect_rc 2 "--arch with the cpu target" "$nn" "$mlp" -o "$tmp/x" --arch sm_80
says "--arch is for the cuda target only" "--arch on cpu"
says "hint: add --target cuda" "--arch on cpu"
expect_rc 2 "--emit-kernels with the cpu target" "$nn" "$mlp" -o "$tmp/x" --emit-kernels --target cpu
says "--emit-kernels is for the cuda target only" "--emit-kernels on cpu"
expect_rc 2 "--arch sm_75 (older than sm_80)" "$nn" "$mlp" -o "$tmp/x" --target cuda --arch sm_75
says "sm_75 is too old: the CUDA kernels need sm_80 or newer" "--arch sm_75"
says "e.g. sm_80,sm_90 (the default)" "--arch sm_75"
expect_rc 2 "--arch compute_80" "$nn" "$mlp" -o "$tmp/x" --target cuda --arch compute_80
says "'compute_80' is not a GPU architecture" "--arch compute_80"
expect_rc 2 "--arch=sm_80,,sm_90" "$nn" "$mlp" -o "$tmp/x" --target=cuda --arch=sm_80,,sm_90
says "an empty entry in 'sm_80,,sm_90'" "--arch with an empty entry"
expect_rc 2 "--arch sm_90,sm_90" "$nn" "$mlp" -o "$tmp/x" --target cuda --arch sm_90,sm_90
says "sm_90 is listed twice" "--arch twice"
expect_rc 2 "--arch without a value" "$nn" "$mlp" -o "$tmp/x" --target cuda --arch
[[ ! -e $tmp/x ]] && ok "no output directory after bad options" || no "bad options created $tmp/x"

# ---- no NVRTC in this nnsc-aot: the cuda target says so (exit 2), the rest is skipped
"$nn" "$mlp" -o "$tmp/probe" --target cuda --arch sm_80 -q 2>"$tmp/err"
rc=$?
if [[ $rc == 2 ]] && grep -q "CUDA toolkit not found" "$tmp/err"; then
  ok "without NVRTC --target cuda exits 2: $(head -n 1 "$tmp/err")"
  grep -q "hint: install the CUDA toolkit" "$tmp/err" && ok "  ... with a hint" || no "no hint: $(cat "$tmp/err")"
  echo "$pass passed, $fail failed"
  ((fail)) && exit 1
  echo "SKIP (no CUDA toolkit: nnsc-aot was built without NVRTC; the NVRTC builds and runs were not tested)"
  exit 77
fi
[[ $rc == 0 ]] && ok "--target cuda builds mlp (NVRTC present)" || { no "--target cuda probe: exit $rc"; cat "$tmp/err"; }
libnvrtc=$(sed -n 's/^NNSC_NVRTC_LIB:FILEPATH=//p' "$build/CMakeCache.txt")

expect_rc 2 "--arch sm_99 (NVRTC knows no such GPU)" "$nn" "$mlp" -o "$tmp/x" --target cuda --arch sm_80,sm_99
says "--arch: NVRTC" "--arch sm_99"
says "cannot compile for sm_99" "--arch sm_99"

# ---- builds: every example (1 device), mlp on 2 devices, gpt2-tiny tensor-parallel on 2
# build NAME ARGS...: nnsc-aot ARGS --target cuda -o $tmp/NAME, timed
build() {
  local name=$1 t0=$SECONDS
  shift
  if "$nn" "$@" --target cuda -q -o "$tmp/$name" 2>"$tmp/$name.err"; then
    ok "$name: built with NVRTC for sm_80 and sm_90 in $((SECONDS - t0)) s"
  else
    no "$name: exit $?"
    cat "$tmp/$name.err"
  fi
}
builds=()
for f in "$top"/examples/*.ini; do
  name=$(basename "$f" .ini)-1
  # (the 1-device plan, every op whole: a spec's policy = auto would search, and llama3-8b does
  # not fit one 80 GB device, which the search rightly refuses)
  build "$name" "$f" --devices 1 --set plan.policy=hybrid
  builds+=("$name:1")
done
build mlp-2 "$mlp" --devices 2 --emit-kernels -v
builds+=("mlp-2:2")
build gpt2-tiny-tp2 "$top/examples/gpt2-tiny.ini" --devices 2 --set plan.policy=tp
builds+=("gpt2-tiny-tp2:2")
grep -q "^nnsc-aot: nvrtc  *[0-9.]* ms" "$tmp/mlp-2.err" && ok "-v prints the NVRTC time" ||
  no "-v: no nvrtc line in: $(cat "$tmp/mlp-2.err")"

# ---- what every build holds
for b in "${builds[@]}"; do
  name=${b%:*} world=${b#*:} d=$tmp/${b%:*}
  [[ -d $d ]] || continue
  grep -q "^target cuda sm_80,sm_90: every rank embeds cubins of .* (sm_80), .* (sm_90)" "$d/plan.txt" &&
    ok "$name: plan.txt names the target, the archs and the cubin sizes" || no "$name: plan.txt has no target line"
  grep -q "RANK=\$r LOCAL_RANK=\$r" "$d/launch" && grep -q "^world=$world$" "$d/launch" &&
    ok "$name: launch starts $world rank(s) with RANK and LOCAL_RANK" || no "$name: launch"
  for ((r = 0; r < world; r++)); do
    exe=$d/rank$r
    [[ -x $exe ]] || { no "$name: no executable rank$r"; continue; }
    needed=$(readelf -d "$exe" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
    if [[ -n $needed ]] && ! grep -qiE "cuda|nccl|nvrtc|nvidia" <<<"$needed"; then
      ok "$name/rank$r: links no CUDA, NCCL or toolkit library (needs: $needed)"
    else
      no "$name/rank$r: needs $needed"
    fi
    for a in sm_80 sm_90; do
      if ! py image "$exe" "nnsc_cubin_$a" "$tmp/$name.$r.$a.cubin" 2>"$tmp/py.err"; then
        no "$name/rank$r: no embedded $a image: $(cat "$tmp/py.err")"
        continue
      fi
      info=$(py cubin "$tmp/$name.$r.$a.cubin" 2>&1)
      if ((r == 0)); then
        [[ $info == "190 ${a#sm_}" ]] && ok "$name/rank0: nnsc_cubin_$a is a CUDA ELF image for $a ($(stat -c %s "$tmp/$name.0.$a.cubin") bytes)" ||
          no "$name/rank0: nnsc_cubin_$a: machine and sm '$info', wanted '190 ${a#sm_}'"
      else
        cmp -s "$tmp/$name.0.$a.cubin" "$tmp/$name.$r.$a.cubin" && ok "$name/rank$r: the same $a image as rank 0" ||
          no "$name/rank$r: its $a image differs from rank 0's"
      fi
    done
  done
done

# ---- --emit-kernels writes the source the build compiled: NVRTC on that file
# (the options of codegen/nvrtc.c) gives the very images the ranks embed
cu=$tmp/mlp-2/kernels/nnsc_kernels.cu
if [[ -s $cu ]] && grep -q 'extern "C" __global__' "$cu"; then
  ok "--emit-kernels writes kernels/nnsc_kernels.cu ($(stat -c %s "$cu") bytes)"
  for a in sm_80 sm_90; do
    if py nvrtc "$libnvrtc" "$cu" "$a" "$tmp/emitted.$a.cubin" 2>"$tmp/py.err" &&
      cmp -s "$tmp/emitted.$a.cubin" "$tmp/mlp-2.0.$a.cubin"; then
      ok "  ... NVRTC on it for $a gives the embedded image, byte for byte"
    else
      no "--emit-kernels: the $a image compiled from $cu differs from the embedded one $(cat "$tmp/py.err")"
    fi
  done
else
  no "--emit-kernels: no CUDA C in $cu"
fi
[[ ! -e $tmp/mlp-1/kernels ]] && ok "without --emit-kernels no kernels/ directory" || no "kernels/ written unasked"

# ---- determinism: a second build gives the same bytes, everywhere
build mlp-2-again "$mlp" --devices 2 --emit-kernels
same=1
for f in rank0 rank1 launch plan.txt kernels/nnsc_kernels.cu; do
  cmp -s "$tmp/mlp-2/$f" "$tmp/mlp-2-again/$f" || { same=0; echo "differs: $f"; }
done
((same)) && ok "two builds: byte-identical executables, launch, plan.txt and kernels" || no "builds differ"
if ! grep -q "$tmp" "$tmp/mlp-2/plan.txt" "$tmp/mlp-2/launch" "$tmp/mlp-2/kernels/nnsc_kernels.cu" 2>/dev/null &&
  [[ -s $tmp/mlp-2/plan.txt && -s $tmp/mlp-2/launch && -s $cu ]]; then
  ok "no absolute paths in plan.txt, launch and the kernels"
else
  no "absolute paths in the outputs, or outputs missing"
fi

# ---- launch's environment and arguments, with stand-in ranks that write them down
if [[ -x $tmp/mlp-2/launch ]]; then
  mkdir -p "$tmp/fake"
  cp "$tmp/mlp-2/launch" "$tmp/fake/launch"
  for r in 0 1; do
    printf '#!/usr/bin/env bash\necho "RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT NNSC_RANK=${NNSC_RANK-unset} args=$#:$2" >"${0%%/*}/env%d"\nexit "${FAKE_STATUS:-0}"\n' "$r" >"$tmp/fake/rank$r"
    chmod +x "$tmp/fake/rank$r"
  done
  env -u NNSC_MASTER_PORT NNSC_RANK=7 MASTER_PORT= "$tmp/fake/launch" --steps "a b" >/dev/null 2>&1
  rc=$?
  port=$(sed -n 's/.*MASTER_PORT=\([0-9]*\) .*/\1/p' "$tmp/fake/env0" 2>/dev/null)
  want0="RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NNSC_RANK=unset args=2:a b"
  want1="RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NNSC_RANK=unset args=2:a b"
  if [[ $rc == 0 && $port -ge 29500 && $port -lt 30600 && $(cat "$tmp/fake/env0") == "$want0" && $(cat "$tmp/fake/env1") == "$want1" ]]; then
    ok "launch: rank K gets RANK=K WORLD_SIZE=2 LOCAL_RANK=K MASTER_ADDR=127.0.0.1, a free MASTER_PORT ($port), the arguments"
  else
    no "launch environment: exit $rc, got '$(cat "$tmp/fake/env0" "$tmp/fake/env1" 2>&1)'"
  fi
  MASTER_PORT=4321 "$tmp/fake/launch" >/dev/null 2>&1
  grep -q "MASTER_PORT=4321 " "$tmp/fake/env0" && grep -q "MASTER_PORT=4321 " "$tmp/fake/env1" &&
    ok "launch: \$MASTER_PORT is used when set" || no "launch ignores MASTER_PORT: $(cat "$tmp/fake/env0")"
  FAKE_STATUS=3 "$tmp/fake/launch" >/dev/null 2>"$tmp/err"
  rc=$?
  [[ $rc == 3 ]] && grep -q "failed (exit status 3); stopping the other ranks" "$tmp/err" &&
    ok "launch: a failing rank's status (3) is the launch's, with a message" || no "launch: exit $rc, $(cat "$tmp/err")"
fi

# ---- running here
if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  # a GPU: the ranks train (rank 0 logs the loss of every step)
  gpus=$(nvidia-smi -L | grep -c '^GPU ')
  "$tmp/mlp-1/launch" --steps 3 >"$tmp/run.out" 2>"$tmp/run.err"
  rc=$?
  n=$(grep -c '^step [0-9]*/3 loss ' "$tmp/run.out")
  [[ $rc == 0 && $n == 3 ]] && ok "GPU: mlp-1/launch trains 3 steps" || { no "GPU: mlp-1: exit $rc, $n loss lines"; cat "$tmp/run.err"; }
  if ((gpus >= 2)); then
    "$tmp/mlp-2/launch" --steps 3 --timeout 30 >"$tmp/run.out" 2>"$tmp/run.err"
    rc=$?
    n=$(grep -c '^step [0-9]*/3 loss ' "$tmp/run.out")
    [[ $rc == 0 && $n == 3 ]] && ok "GPU: mlp-2/launch trains 3 steps on 2 GPUs" || { no "GPU: mlp-2: exit $rc, $n loss lines"; cat "$tmp/run.err"; }
  fi
  expect_rc 0 "GPU: verify --target cuda (1 device cpu vs 1 device cuda)" "$nn" verify "$mlp" --devices 1 --target cuda --steps 3 --keep "$tmp/verify"
else
  # no GPU here: rtlib's one-line message (the driver cannot be loaded, or no
  # device), exit 2; never the loader's "cannot open shared object"
  # no_gpu_msg DESC: stderr says why in rtlib's words
  no_gpu_msg() {
    if grep -qiE "driver|libcuda|no (cuda|gpu|device)" "$tmp/err" &&
      ! grep -qE "cannot open shared object|error while loading shared libraries" "$tmp/err"; then
      ok "  ... $1: $(grep -iE "driver|libcuda|no (cuda|gpu|device)" "$tmp/err" | head -n 1)"
    else
      no "$1: no clear no-driver/no-device message in: $(cat "$tmp/err")"
    fi
  }
  expect_rc 2 "no GPU: mlp-1/rank0 stops" "$tmp/mlp-1/rank0" --steps 1
  no_gpu_msg "rank0"
  [[ $(wc -l <"$tmp/err") == 1 ]] && ok "  ... in one line" || no "rank0: $(wc -l <"$tmp/err") lines of messages"
  t0=$SECONDS
  "$tmp/mlp-2/launch" --steps 1 --timeout 10 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [[ ($rc == 1 || $rc == 2) && $((SECONDS - t0)) -lt 30 ]] && ok "no GPU: mlp-2/launch exits $rc in $((SECONDS - t0)) s" ||
    no "no GPU: mlp-2/launch: exit $rc after $((SECONDS - t0)) s"
  no_gpu_msg "launch"
  expect_rc 1 "no GPU: verify --target cuda fails" "$nn" verify "$mlp" --devices 1 --target cuda --steps 2 --keep "$tmp/verify"
  grep -q "a run failed" "$tmp/out" && grep -q "verify: FAILED" "$tmp/out" && ok "  ... saying a run failed" ||
    no "verify output: $(cat "$tmp/out")"
  no_gpu_msg "verify"
fi

# The GPU benchmark (bench/gpu/bench_matmul.c, built by bench/run_gpu.sh):
# it must keep compiling without a warning, and without a GPU refuse with
# its message and exit 2 (needs the toolkit's cuBLAS and NVRTC to link).
cuda_home=${NNSC_CUDA_HOME:-/usr/local/cuda}
if [[ -f $cuda_home/include/cublas_v2.h && -e $cuda_home/lib64/libcublas.so ]]; then
  if cc -std=gnu11 -O2 -Wall -Wextra -Werror -I "$cuda_home/include" -I "$top/rtlib" \
      "$top/bench/gpu/bench_matmul.c" -o "$tmp/bench_matmul" -L "$cuda_home/lib64" \
      -Wl,-rpath,"$cuda_home/lib64" -lnvrtc -lcublas -ldl -lm 2>"$tmp/err"; then
    ok "bench/gpu/bench_matmul.c compiles with -Wall -Wextra -Werror"
    if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L 2>/dev/null | grep -q GPU; then
      "$nn" "$mlp" -o "$tmp/bm" --target cuda --emit-kernels -q >/dev/null 2>&1
      expect_rc 2 "no GPU: bench_matmul refuses" "$tmp/bench_matmul" "$tmp/bm/kernels/nnsc_kernels.cu"
      grep -qi "no CUDA" "$tmp/err" && ok "  ... saying: $(head -n 1 "$tmp/err")" ||
        no "bench_matmul: no clear message in: $(cat "$tmp/err")"
    fi
  else
    no "bench/gpu/bench_matmul.c does not compile: $(cat "$tmp/err")"
  fi
else
  echo "SKIP  bench_matmul build check: no cuBLAS under $cuda_home (benchmarks only)"
fi

echo "$pass passed, $fail failed"
((fail == 0))
