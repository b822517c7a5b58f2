#!/usr/bin/env bash
# tests/hf_init.sh -- --init from Hugging Face LLaMA and T5 checkpoints: the params' `import` names
# (examples/llama-tiny.ini: model.layers.{r}.self_attn.q_proj.weight ...; examples/t5-v1_1-small.ini,
# shrunk: encoder.block.{r}.layer.0.SelfAttention.q.weight ...), torch's transposed
# Linear weights, BF16 / F16 / F32 tensors, one file or a directory of shards; every rank reads
# its own boxes.  The oracle (python3) writes the checkpoint and checks what loaded.
. "$(dirname "$0")/lib.sh" hf_init
# load_check WHAT SPEC ARGS...: in $tmp/WHAT, the model built on 1 device and on dp 2 x tp 2
# (ARGS for both), a checkpoint under its import names, loaded and trained on both
load_check() {
local what=$1 spec=$2 tmp=$tmp/$1
shift 2
mkdir -p "$tmp"
"$nn" "$spec" -o "$tmp/one" -q "$@" || no "$what: build 1 device"
"$nn" "$spec" -o "$tmp/four" -q --devices 4 --set plan.policy=hybrid --set plan.tp=2 "$@" || no "$what: build dp 2 x tp 2"

# the checkpoint, from the manifest's param lines (name, shape, import name, transposed)
strings "$tmp/one/rank0" | grep '^param [0-9]' >"$tmp/params"
python3 - "$tmp" <<'PY' || no "$what: writing the checkpoint"
import json, os, random, struct, sys
tmp = sys.argv[1]
rng = random.Random(5)
def f32bits(x): return struct.unpack("<I", struct.pack("<f", x))[0]
def bitsf32(u): return struct.unpack("<f", struct.pack("<I", u))[0]
tensors, want = {}, {}   # import name -> (dtype, bytes, shape); param name -> its f32 values (param layout)
for line in open(os.path.join(tmp, "params")):
    w = line.split()
    name, nd = w[2], int(w[4])
    shape = [int(x) for x in w[5:5 + nd]]
    i = w.index("import")
    imp, tr = w[i + 1], w[i + 2] == "1"
    n = 1
    for d in shape: n *= d
    x = [rng.gauss(0, 0.05) for _ in range(n)]
    if "norm" in imp:                # F16
        val = [struct.unpack("<e", struct.pack("<e", v))[0] for v in x]; dt, fmt = "F16", "e"
    elif imp == "lm_head.weight":    # F32
        val = [struct.unpack("<f", struct.pack("<f", v))[0] for v in x]; dt, fmt = "F32", "f"
    else:                            # BF16: the top half of the f32 bits
        val = [bitsf32(f32bits(v) & 0xFFFF0000) for v in x]; dt, fmt = "BF16", "H"
    file_vals, fshape = val, shape
    if tr:                           # stored transposed: (cols, rows)
        r, c = shape
        file_vals = [val[i * c + j] for j in range(c) for i in range(r)]
        fshape = [c, r]
    if fmt == "H":
        raw = struct.pack("<%dH" % n, *[f32bits(v) >> 16 for v in file_vals])
    else:
        raw = struct.pack("<%d%s" % (n, fmt), *file_vals)
    tensors[imp] = (dt, raw, fshape)
    want[name] = val
json.dump(want, open(os.path.join(tmp, "want.json"), "w"))
def write(path, names):
    hdr, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for nm in names:
        dt, b, sh = tensors[nm]
        hdr[nm] = {"dtype": dt, "shape": sh, "data_offsets": [off, off + len(b)]}
        off += len(b); blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
names = sorted(tensors)
write(os.path.join(tmp, "hf.safetensors"), names)
os.makedirs(os.path.join(tmp, "shards"))
write(os.path.join(tmp, "shards", "model-00001-of-00002.safetensors"), names[::2])
write(os.path.join(tmp, "shards", "model-00002-of-00002.safetensors"), names[1::2])
PY

"$tmp/one/rank0" --init "$tmp/hf.safetensors" --steps 0 --save "$tmp/a.safetensors" --quiet >"$tmp/a.log" 2>&1 ||
  no "$what: 1 device --init: $(tail -n 3 "$tmp/a.log")"
"$tmp/four/launch" --init "$tmp/shards" --steps 0 --save "$tmp/b.safetensors" --quiet >"$tmp/b.log" 2>&1 ||
  no "$what: 4 devices --init a directory of shards: $(tail -n 3 "$tmp/b.log")"
if python3 - "$tmp" <<'PY'
import json, os, struct, sys
tmp = sys.argv[1]
def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__": continue
        a, b = v["data_offsets"]
        out[k] = list(struct.unpack("<%df" % ((b - a) // 4), raw[8 + n + a:8 + n + b]))
    return out
a, b = read(os.path.join(tmp, "a.safetensors")), read(os.path.join(tmp, "b.safetensors"))
want = json.load(open(os.path.join(tmp, "want.json")))
assert len(want) == len(a) > 10, (len(want), len(a))
for name, w in want.items():
    assert a[name] == w, name      # exact: BF16 and F16 widen exactly
    assert b[name] == w, name      # the 4 ranks' boxes, transposed where stored so
print(f"{len(want)} params exact on 1 device and on dp 2 x tp 2")
PY
then ok "$what: --init from a Hugging Face-named checkpoint (BF16, F16, F32; transposed Linear weights): every param exact, one file on 1 device, 2 shards on dp 2 x tp 2"
else no "$what: the loaded params differ from the checkpoint"; fi

# training from it: 1 device and dp 2 x tp 2 agree
"$tmp/one/rank0" --init "$tmp/hf.safetensors" --steps 3 >"$tmp/a3.log" 2>&1 &&
  "$tmp/four/launch" --init "$tmp/shards" --steps 3 >"$tmp/b3.log" 2>&1 || no "$what: 3 steps from the checkpoint"
if python3 - "$tmp/a3.log" "$tmp/b3.log" <<'PY'
import re, sys
a, b = ([float(x) for x in re.findall(r"^step \d+/\d+ loss (\S+)", open(f).read(), re.M)] for f in sys.argv[1:])
assert len(a) == len(b) == 3, (a, b)
assert max(abs(x - y) / abs(y) for x, y in zip(a, b)) < 1e-5, (a, b)
PY
then ok "$what: 3 steps from it: 1 device and dp 2 x tp 2 give the same losses"
else no "$what: losses from the checkpoint: $(grep -c '^step' "$tmp/a3.log") / $(tail -n 2 "$tmp/b3.log")"; fi
}
spec=$top/examples/llama-tiny.ini
load_check llama "$spec"
# T5 v1.1 (examples/t5-v1_1-small.ini, shrunk): encoder and decoder stacks, cross-attention,
# the two relative position tables
load_check t5 "$top/examples/t5-v1_1-small.ini" --set dims.C=64 --set dims.NH=2 --set dims.DK=32 \
  --set dims.F=128 --set dims.L=2 --set dims.V=96 --set dims.TE=24 --set dims.TD=16 --set dims.NB=16 --set dims.MD=20
ll=$tmp/llama

# mistakes: a tensor missing, a wrong shape -- exit 2 naming it
python3 - "$ll" <<'PY'
import json, struct, sys
tmp = sys.argv[1]
raw = open(f"{tmp}/hf.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
def write(path, h):
    j = json.dumps(h).encode(); j += b" " * (-len(j) % 8)
    open(path, "wb").write(struct.pack("<Q", len(j)) + j + raw[8 + n:])
h = dict(hdr); h["model.layers.1.mlp.up_proj.weightX"] = h.pop("model.layers.1.mlp.up_proj.weight")
write(f"{tmp}/missing.safetensors", h)
h = dict(hdr); e = dict(h["model.norm.weight"]); e["shape"] = [64, 2]; h["model.norm.weight"] = e
write(f"{tmp}/shape.safetensors", h)
PY
expect_rc 2 "--init: an imported tensor missing" "$ll/one/rank0" --init "$ll/missing.safetensors" --steps 0
says "it has no tensor h.1.w3 or model.layers.1.mlp.up_proj.weight" "missing"
expect_rc 2 "--init: an imported tensor of the wrong shape" "$ll/one/rank0" --init "$ll/shape.safetensors" --steps 0
says "tensor model.norm.weight (for norm_w) has shape [64,2], expected [128]" "shape"
mkdir "$tmp/empty"
expect_rc 2 "--init: a directory without .safetensors files" "$ll/one/rank0" --init "$tmp/empty" --steps 0
says "holds no .safetensors file" "empty dir"

# fine-tuning with a frozen param (trainable = false): loaded, never updated, saved as loaded
"$nn" "$spec" -o "$tmp/fz" -q --set "param wte.trainable=false" || no "build with wte frozen"
grep -q "^model .*, 32.8K of them frozen (trainable = false)" "$tmp/fz/plan.txt" ||
  no "plan.txt does not count the frozen param: $(grep '^model' "$tmp/fz/plan.txt")"
"$tmp/fz/rank0" --init "$ll/hf.safetensors" --steps 4 --save "$ll/fz.safetensors" --quiet >"$tmp/fz.log" 2>&1 ||
  no "4 steps with wte frozen: $(tail -n 2 "$tmp/fz.log")"
if python3 - "$ll" <<'PY'
import json, struct, sys
tmp = sys.argv[1]
raw = open(f"{tmp}/fz.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
def get(k):
    a, b = hdr[k]["data_offsets"]
    return list(struct.unpack("<%df" % ((b - a) // 4), raw[8 + n + a:8 + n + b]))
want = json.load(open(f"{tmp}/want.json"))
assert get("wte") == want["wte"], "the frozen wte changed"
assert get("w_head") != want["w_head"], "w_head did not train"
PY
then ok "trainable = false: wte loaded from the checkpoint and unchanged after 4 steps, w_head trained"
else no "trainable = false"; fi

# the spec side: import_transposed needs a 2-D param, a block's import needs {r}
sed 's/^import = model.layers.{r}.input_layernorm.weight$/&\nimport_transposed = true/' "$spec" >"$tmp/t1.ini"
expect_rc 2 "import_transposed on a 1-D param" "$nn" "$tmp/t1.ini" -o "$tmp/e"
says "param 'h.attn_norm' has 1 dims" "1-D"
sed 's/^import = model.layers.{r}.mlp.up_proj.weight$/import = model.layers.mlp.up_proj.weight/' "$spec" >"$tmp/t2.ini"
expect_rc 2 "a block param's import without {r}" "$nn" "$tmp/t2.ini" -o "$tmp/e"
says "import of block param 'h.w3' has no {r}" "no {r}"

# the full-size T5 v1.1 small: Hugging Face's parameter count (google/t5-v1_1-small: 76,961,152) and names
"$nn" "$top/examples/t5-v1_1-small.ini" -o "$tmp/t5full" -q || no "build examples/t5-v1_1-small.ini"
strings "$tmp/t5full/rank0" | grep '^param [0-9]' >"$tmp/t5full.params"
if python3 - "$tmp/t5full.params" <<'PY'
import sys
n, imports, lin = 0, {}, 0
for line in open(sys.argv[1]):
    w = line.split()
    nd = int(w[4]); e = 1
    for d in w[5:5 + nd]: e *= int(d)
    n += e
    i = w.index("import")
    imports[w[i + 1]] = w[i + 2] == "1"
assert n == 76961152, n
assert len(imports) == 190, len(imports)   # every param its own name
for name, tr in [("shared.weight", False), ("lm_head.weight", True), ("encoder.final_layer_norm.weight", False),
                 ("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", False),
                 ("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", False),
                 ("encoder.block.7.layer.1.DenseReluDense.wi_1.weight", True),
                 ("decoder.block.7.layer.1.EncDecAttention.k.weight", True),
                 ("decoder.block.3.layer.2.layer_norm.weight", False)]:
    assert imports.get(name) == tr, (name, imports.get(name))
print(f"{n} params, {len(imports)} Hugging Face names")
PY
then ok "examples/t5-v1_1-small.ini builds with Hugging Face's 76,961,152 parameters under their 190 names (Linear weights transposed)"
else no "examples/t5-v1_1-small.ini: parameter count or names"; fi

echo "$pass passed, $fail failed"
((fail == 0))
