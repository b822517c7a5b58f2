#!/usr/bin/env python3
"""compare.py NAME A.txt B.txt A.safetensors B.safetensors LOSS_TOL WEIGHT_TOL

Test tooling for bench/gpu/ship.sh: compares two runs of one model (the cpu
and the cuda build): the per-step losses of the ranks' "step N/M loss X"
lines (largest relative difference) and the final weights written by
--save (relative L2 difference over all tensors as one vector, and the worst
tensor).  Prints one line; exit 0 when both are within their bounds."""
import json
import struct
import sys

import numpy as np


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            w = line.split()
            if len(w) >= 4 and w[0] == "step" and w[2] == "loss":
                out[int(w[1].split("/")[0])] = float(w[3])
    return out


def tensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    head = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        if v["dtype"] != "F32":
            raise SystemExit(f"{path}: tensor {k} is {v['dtype']}, this tool reads F32")
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], dtype="<f4").astype(np.float64)
    return out


def main():
    name, la, lb, wa, wb = sys.argv[1:6]
    ltol, wtol = float(sys.argv[6]), float(sys.argv[7])
    a, b = losses(la), losses(lb)
    if not a or a.keys() != b.keys():
        print(f"FAIL {name}: step lines differ ({len(a)} vs {len(b)} steps)")
        return 1
    lrel = max(abs(a[s] - b[s]) / max(abs(a[s]), 1e-30) for s in a)
    ta, tb = tensors(wa), tensors(wb)
    if ta.keys() != tb.keys():
        print(f"FAIL {name}: the weight files hold different tensors")
        return 1
    num = sum(float(np.sum((ta[k] - tb[k]) ** 2)) for k in ta)
    den = sum(float(np.sum(ta[k] ** 2)) for k in ta)
    wrel = (num / max(den, 1e-300)) ** 0.5
    worst = max(ta, key=lambda k: np.linalg.norm(ta[k] - tb[k]) / max(np.linalg.norm(ta[k]), 1e-30))
    wk = np.linalg.norm(ta[worst] - tb[worst]) / max(np.linalg.norm(ta[worst]), 1e-30)
    ok = lrel <= ltol and wrel <= wtol and np.isfinite(lrel) and np.isfinite(wrel)
    last = max(a)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {len(a)} steps, losses max rel diff {lrel:.3g} (bound {ltol:g}),"
          f" final loss {a[last]:.6g} vs {b[last]:.6g}; weights rel L2 {wrel:.3g} (bound {wtol:g}),"
          f" worst tensor {worst} {wk:.3g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
