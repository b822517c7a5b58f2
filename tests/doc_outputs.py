#!/usr/bin/env python3
"""doc_outputs.py WORK TOP FILE... -- the program output shown in Markdown files,
checked against the program.

A code block that shows what a command prints is marked by an HTML comment
(invisible when rendered) on the line before it:

    <!-- output: COMMAND -->      every line of the block is a line of what
                                  COMMAND prints (stdout and stderr), in order;
                                  other lines may come between them
    <!-- output~: COMMAND -->     the same, but a number in the block matches
                                  any number (timings, throughput: the block
                                  shows the shape of the line, not this run's)

The next code block (4-space indented, or fenced) after the comment is the
expected text; blank lines before it are skipped.  COMMAND runs under bash in
a fresh scratch directory WORK/outN that links TOP's examples/, data/,
golden/ and tests/ and the build (NNSC_BUILD, as build/ and as nnsc-aot on
PATH); it must exit 0.  Prints "ok    ..." or "FAIL  ..." per block (the
first missing line and what the command printed near it), then
"N passed, M failed"; exits 1 if any failed.  tests/docs.sh runs it.
"""
import os
import re
import subprocess
import sys

MARK = re.compile(r"^\s*<!--\s*output(~?):\s*(.*?)\s*-->\s*$")
NUM = re.compile(r"\d+(?:\.\d+)?")


def blocks(path):
    """Yield (line, mode, command, expected lines) for each marked block."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        m = MARK.match(lines[i])
        i += 1
        if not m:
            continue
        at, mode, cmd = i, m.group(1), m.group(2)
        while i < len(lines) and not lines[i].strip():
            i += 1
        body = []
        if i < len(lines) and lines[i].lstrip().startswith("```"):
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith("```"):
                body.append(lines[i].rstrip())
                i += 1
        else:
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i][4:].rstrip())
                i += 1
        while body and not body[-1]:
            body.pop()
        yield at, mode, cmd, [b for b in body if b.strip()]


def matcher(line, loose):
    """A function telling whether an output line is the block's line."""
    if not loose:
        return lambda out: out.rstrip() == line
    rx = re.compile("^" + r"-?\d+(?:\.\d+)?".join(re.escape(p) for p in NUM.split(line)) + "$")
    return lambda out: rx.match(out.rstrip()) is not None


def scratch(work, top, build, n):
    """A fresh scratch directory linking the checkout's inputs and the build."""
    w = os.path.join(work, "out%d" % n)
    os.makedirs(os.path.join(w, "bin"))
    os.symlink(build, os.path.join(w, "build"))
    for d in ("examples", "data", "golden", "tests"):
        os.symlink(os.path.join(top, d), os.path.join(w, d))
    os.symlink(os.path.join(build, "nnsc-aot"), os.path.join(w, "bin", "nnsc-aot"))
    return w


def main():
    work, top, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    build = os.path.abspath(os.environ.get("NNSC_BUILD", os.path.join(top, "build")))
    passed = failed = n = 0
    for path in files:
        rel = os.path.relpath(path, top)
        for at, mode, cmd, want in blocks(path):
            n += 1
            where = "%s:%d" % (rel, at)
            if not want:
                print("FAIL  %s: no code block after the output comment" % where)
                failed += 1
                continue
            w = scratch(work, top, build, n)
            env = dict(os.environ, PATH=os.path.join(w, "bin") + os.pathsep + os.environ.get("PATH", ""))
            try:
                r = subprocess.run(["bash", "-c", cmd], cwd=w, env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
                out, rc = r.stdout.decode("utf-8", "replace").split("\n"), r.returncode
            except subprocess.TimeoutExpired:
                out, rc = [], "timeout"
            if rc != 0:
                print("FAIL  %s: %s: exit %s" % (where, cmd, rc))
                for o in out[-5:]:
                    print("      | " + o)
                failed += 1
                continue
            k, miss = 0, None
            for line in want:
                is_it = matcher(line, mode == "~")
                while k < len(out) and not is_it(out[k]):
                    k += 1
                if k == len(out):
                    miss = line
                    break
                k += 1
            if miss is None:
                print("ok    %s: the output of '%s' (%d lines%s)" % (where, cmd, len(want),
                                                                    ", numbers free" if mode else ""))
                passed += 1
            else:
                print("FAIL  %s: '%s' no longer prints (in this order) the doc's line:\n      | %s\n"
                      "      its output:" % (where, cmd, miss))
                for o in out[:40]:
                    print("      > " + o)
                failed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
