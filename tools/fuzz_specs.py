#!/usr/bin/env python3
"""fuzz_specs.py [-n N] [--seed S] [--build DIR] [--out DIR] [--compile K]

Hostile model specs against the compiler: each case takes a spec of
examples/ or tests/equiv/, applies a few random mutations (a line deleted or
duplicated, a number made 0, -1, huge, 2^40 or an expression, a key's value
swapped with another's, a name changed, bytes garbled, the file cut short, a
section header mangled) and runs `nnsc-aot SPEC --stop-after schedule` (every
K-th case a full build with -o, default K = 10), with a timeout.  A case
passes when the compiler exits 0, 1 or 2 within the timeout; a signal (a
crash, an abort), another status or a timeout is a finding, and the spec is
kept in --out (default fuzz-findings/) with the command and its stderr.

Run it against the sanitizer build (build-san/) to catch what does not
crash a plain build:
    tools/fuzz_specs.py -n 600 --build build-san
Prints one line per finding and a summary; exit 1 when anything was found.
"""
import argparse
import glob
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUMS = ["0", "-1", "1", "3", "7", "65536*65536", "1099511627776", "2^40", "9223372036854775807",
        "99999", "1e30", "-0", "0x10", "1/0", "(", "B*", "nan", "inf", "4*C", ""]


def mutate(lines, rng):
    """One random mutation of the spec's lines (a list of str)."""
    if not lines:
        return lines
    k = rng.randrange(len(lines))
    m = rng.randrange(10)
    line = lines[k]
    if m == 0:                                   # delete a line
        return lines[:k] + lines[k + 1:]
    if m == 1:                                   # duplicate a line (a key or section twice)
        return lines[:k] + [line] + lines[k:]
    if m == 2 and re.search(r"\d", line):        # a number made hostile
        return lines[:k] + [re.sub(r"\d+", rng.choice(NUMS), line, count=1)] + lines[k + 1:]
    if m == 3 and "=" in line:                   # the value of another key
        other = [l for l in lines if "=" in l]
        v = rng.choice(other).split("=", 1)[1]
        return lines[:k] + [line.split("=", 1)[0] + "=" + v] + lines[k + 1:]
    if m == 4 and "=" in line:                   # a name changed
        key, v = line.split("=", 1)
        words = v.split()
        if words:
            words[rng.randrange(len(words))] = rng.choice(["x", "h.0.zz", "*", "h.attn", "", "r", "-1", "a" * 300])
        return lines[:k] + [key + "= " + " ".join(words)] + lines[k + 1:]
    if m == 5:                                   # garbled bytes
        b = list(line)
        for _ in range(rng.randrange(1, 4)):
            if b:
                b[rng.randrange(len(b))] = chr(rng.choice([0x00, 0x01, 0x7f, 0x5b, 0x5d, 0x3d, 0x3b, 0xff, 0x20]))
        return lines[:k] + ["".join(b)] + lines[k + 1:]
    if m == 6:                                   # cut short
        return lines[:k]
    if m == 7 and line.startswith("["):          # a mangled section header
        return lines[:k] + [rng.choice(["[", "[]", "[op]", "[param ]", line[:-1], line + "]", "[block h h]"])] + lines[k + 1:]
    if m == 8:                                   # a very long line
        return lines[:k] + [line + " " + "x" * rng.choice([300, 5000, 70000])] + lines[k + 1:]
    return lines[:k] + [line.replace("=", "= " + rng.choice(NUMS) + " ", 1)] + lines[k + 1:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--build", default=os.path.join(TOP, "build"))
    ap.add_argument("--out", default="fuzz-findings")
    ap.add_argument("--compile", type=int, default=10, help="every K-th case a full build (-o)")
    ap.add_argument("--timeout", type=int, default=120)
    a = ap.parse_args()
    nn = os.path.join(os.path.abspath(a.build), "nnsc-aot")
    specs = sorted(glob.glob(os.path.join(TOP, "examples", "*.ini")) + glob.glob(os.path.join(TOP, "tests/equiv/*.ini")))
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="nnsc-fuzz-")
    found = 0
    counts = {}
    for i in range(a.n):
        src = rng.choice(specs)
        with open(src, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        for _ in range(rng.randrange(1, 4)):
            lines = mutate(lines, rng)
        d = os.path.join(tmp, "c%d" % i)
        os.makedirs(d)
        for c in glob.glob(os.path.join(os.path.dirname(src), "*.c")) + glob.glob(os.path.join(os.path.dirname(src), "*.cu")):
            shutil.copy(c, d)
        spec = os.path.join(d, "spec.ini")
        with open(spec, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write("\n".join(lines))
        full = a.compile > 0 and i % a.compile == 0
        cmd = [nn, spec] + (["-o", os.path.join(d, "out"), "-q"] if full else ["--stop-after", "schedule"])
        try:
            r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=a.timeout)
            rc, err = r.returncode, r.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            rc, err = "timeout", ""
        counts[rc] = counts.get(rc, 0) + 1
        bad = rc not in (0, 1, 2) or "runtime error" in err or "AddressSanitizer" in err or "internal error" in err
        if bad:
            found += 1
            os.makedirs(a.out, exist_ok=True)
            keep = os.path.join(a.out, "case%d.ini" % i)
            shutil.copy(spec, keep)
            with open(keep + ".txt", "w") as f:
                f.write("from %s\n%s\nexit %s\n%s" % (os.path.relpath(src, TOP), " ".join(cmd), rc, err[-4000:]))
            first = next((l for l in err.split("\n") if "error" in l or "ERROR" in l), err.strip()[-200:])
            print("finding %d (case %d, from %s): exit %s: %s" % (found, i, os.path.relpath(src, TOP), rc, first[:200]))
        shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    print("%d cases, exit statuses %s; %d findings%s" % (a.n, dict(sorted(counts.items(), key=str)), found,
                                                        " (in %s)" % a.out if found else ""))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
