#!/usr/bin/env python3
"""doc_commands.py FILE... -- the shell commands shown in Markdown files.

Prints one line per command: FILE:LINE<TAB>COMMAND.  A command is a line of
a code block (indented by 4 spaces after a blank line, or fenced with ```sh,
```bash, ```console or a bare ```) whose first word, after any VAR=value
assignments and a leading "$ ", runs something of this project or a cluster
launcher: ./build.sh, build/..., nnsc-aot, out/..., bench/..., tests/...,
tools/..., python3, srun, mpirun.  Lines ending in a backslash are joined
with the next; a trailing "# comment" is dropped.  Output lines (such as
"nnsc-aot: error: ...") and fenced blocks of other languages (```ini) are
not commands.  tests/docs.sh checks that each one is run or accounted for.
"""
import re
import sys

CMD = re.compile(r"^(\./build\.sh|build/\S+|nnsc-aot|out/\S+|bench/\S+|tests/\S+|tools/\S+|python3|srun|mpirun)(\s|$)")
ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*\s+")


def strip_comment(line):
    """Drop a trailing '# ...' that is not inside quotes or part of $#/${#."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def commands(path):
    """Yield (line number, command) for the commands of one Markdown file."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    fence = None          # language of the open fence, or None
    prev_blank = True
    in_indent = False
    pending, start = "", 0
    for n, raw in enumerate(lines, 1):
        s = raw.rstrip()
        m = re.match(r"^\s*```(\w*)", s)
        if m:
            fence = None if fence is not None else (m.group(1) or "sh")
            prev_blank = False
            continue
        if fence is not None:
            code = fence in ("sh", "bash", "console", "shell")
            text = s
        else:
            if s.startswith("    ") and (prev_blank or in_indent):
                in_indent = True
                code, text = True, s[4:]
            else:
                in_indent = in_indent and s == ""
                code, text = False, ""
            prev_blank = s == ""
        if not code:
            continue
        text = text.strip()
        if text.startswith("$ "):
            text = text[2:]
        if pending:
            text = pending + " " + text
        elif not text:
            continue
        else:
            start = n
        if text.endswith("\\"):
            pending = text[:-1].rstrip()
            continue
        pending = ""
        cmd = re.sub(r"\s+", " ", strip_comment(text))
        head = cmd
        while ASSIGN.match(head):
            head = ASSIGN.sub("", head, count=1)
        words = head.split()
        if CMD.match(head) and not (len(words) > 1 and words[1].endswith(":")):   # "nnsc-aot plan: ..." is output
            yield start, cmd


def main():
    for path in sys.argv[1:]:
        for n, cmd in commands(path):
            print(f"{path}:{n}\t{cmd}")


if __name__ == "__main__":
    main()
