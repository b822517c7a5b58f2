#!/usr/bin/env python3
"""bench/bubble.py TRACE-PREFIX P M SCHED [SKIP] -- the measured pipeline bubble
from the --trace files of a P-rank pipeline run (one rank per stage).

Reads TRACE-PREFIX-rank0.json .. -rank(P-1).json (rtlib/base/trace.c), and for
every step after the first SKIP: the step's span (first task begin to last
task end over the ranks) and the busy time (sum of the task spans); the
bubble is 1 - busy / (P * span).  Prints the medians of the span and the
bubble over the steps, the
median task times T_F, T_B (and T_W), and the formula: (p-1)/(m+p-1) for
gpipe, 1f1b and kFkB (2f2b), (p-1)/(3m+p-1) for zb-h1 (equal F, B, W),
(p-1)/(vm+p-1) for interleaved with v = 2 chunks (a task is one chunk's,
so T_F, T_B are per chunk), none for interlaced (T_F, T_B then mix the
layers' tasks and the shared ones), and the formula
with the measured times where it has one: 1f1b and gpipe
(p-1)(T_F+T_B)/(m(T_F+T_B)+(p-1)(T_F+T_B)) = the same ratio; zb-h1
(p-1)(T_F+T_B-T_W)/(m(T_F+T_B+T_W)+(p-1)(T_F+T_B-T_W)) (Qi et al.).
A test oracle / benchmark tool, not part of the product.
"""
import json
import statistics
import sys


def main():
    prefix, P, M, sched = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    skip = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    tasks = {}   # (rank, step) -> list of (kind, begin, end)
    kinds = {"F": [], "B": [], "W": []}
    for r in range(P):
        ev = json.load(open(f"{prefix}-rank{r}.json"))["traceEvents"]
        step, open_ = -1, {}
        for e in ev:
            if e["cat"] == "step":
                if e["ph"] == "B":
                    step = int(e["name"].split()[1])
                continue
            if e["ph"] == "B":
                open_[e["name"]] = e["ts"]
            else:
                b = open_.pop(e["name"])
                tasks.setdefault((r, step), []).append((e["name"][0], b, e["ts"]))
                if step > skip:
                    kinds[e["name"][0]].append(e["ts"] - b)
    steps = sorted({s for (_, s) in tasks if s > skip})
    bubbles, spans = [], []
    for s in steps:
        ts = [t for r in range(P) for t in tasks.get((r, s), [])]
        span = max(t[2] for t in ts) - min(t[1] for t in ts)
        busy = sum(t[2] - t[1] for t in ts)
        bubbles.append(1 - busy / (P * span))
        spans.append(span)
    tf = statistics.median(kinds["F"])
    tb = statistics.median(kinds["B"])
    tw = statistics.median(kinds["W"]) if kinds["W"] else 0.0
    p, m = P, M
    if sched == "zb-h1":
        formula = (p - 1) / (3 * m + p - 1)
        measured_f = (p - 1) * (tf + tb - tw) / (m * (tf + tb + tw) + (p - 1) * (tf + tb - tw))
    elif sched == "interleaved":   # 2 chunks per stage (the build's default)
        formula = (p - 1) / (2 * m + p - 1)
        measured_f = formula
    elif sched == "interlaced":    # no closed form: the cost model's step is in plan.txt
        formula = measured_f = float("nan")
    else:
        formula = (p - 1) / (m + p - 1)
        measured_f = formula
    head = (f"{sched:6s} p {p} m {m:2d}: step {statistics.median(spans) / 1e3:6.1f} ms, bubble "
            f"{100 * statistics.median(bubbles):5.1f} % (medians of {len(bubbles)} steps)")
    if formula != formula:   # none (interlaced)
        print(head + "; no formula (plan.txt has the cost model's step)")
        return
    print(head + f"; formula {100 * formula:5.1f} % "
          f"(with the measured T_F {tf / 1e3:.2f} ms, T_B {tb / 1e3:.2f} ms"
          + (f", T_W {tw / 1e3:.2f} ms" if kinds["W"] else "")
          + f": {100 * measured_f:5.1f} %)")


main()
