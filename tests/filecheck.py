#!/usr/bin/env python3
"""A small FileCheck (LLVM's): checks a tool's output against the check lines
of a test file, in order.

    mtc inspect tests/golden/X.ir ARGS | tests/filecheck.py tests/golden/X.ir

Check lines are comments of the test file (`# CHECK: ...`, or after any
prefix up to the keyword):

    CHECK: PAT       the next line at or after the current place that holds
                     PAT; the place moves past it
    CHECK-NEXT: PAT  the line right after the last match holds PAT
    CHECK-NOT: PAT   no line between the last match and the next match (or
                     the end) holds PAT
    CHECK-COUNT-N: PAT  N lines in a row from the current place, each the
                     next that holds PAT (as N CHECKs)

PAT is literal text in which {{REGEX}} is a Python regular expression;
spaces match any run of spaces. A failure prints the check, its line in the
test file and the output from where the search began, and exits 1.
"""
import re
import sys

KEYS = re.compile(r"\bCHECK(-NEXT|-NOT|-COUNT-(\d+))?:\s?(.*)$")


def pattern(text):
    """PAT as a regular expression."""
    out, pos = [], 0
    for m in re.finditer(r"\{\{(.*?)\}\}", text):
        out.append(re.escape(text[pos:m.start()]))
        out.append("(?:" + m.group(1) + ")")
        pos = m.end()
    out.append(re.escape(text[pos:]))
    return re.compile(re.sub(r"(\\ )+", r"\\s+", "".join(out).strip()))


def checks(path):
    """[(kind, count, regex, text, line number)] from the test file."""
    found = []
    for no, line in enumerate(open(path, encoding="utf-8"), 1):
        m = KEYS.search(line)
        if not m:
            continue
        kind = "NOT" if m.group(1) == "-NOT" else "NEXT" if m.group(1) == "-NEXT" else "CHECK"
        count = int(m.group(2)) if m.group(2) else 1
        text = m.group(3).rstrip()
        if not text:
            sys.exit(f"{path}:{no}: an empty check")
        found.append((kind, count, pattern(text), text, no))
    if not any(k != "NOT" for k, *_ in found):
        sys.exit(f"{path}: no CHECK lines")
    return found


def fail(path, no, what, lines, start):
    print(f"{path}:{no}: {what}", file=sys.stderr)
    print(f"output from line {start + 1}:", file=sys.stderr)
    for i in range(start, min(len(lines), start + 12)):
        print(f"  {i + 1:5}: {lines[i]}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: filecheck.py TESTFILE < OUTPUT")
    path = sys.argv[1]
    lines = sys.stdin.read().splitlines()
    at, last, nots = 0, -1, []   # where to search, the last match, CHECK-NOTs pending
    for kind, count, rx, text, no in checks(path):
        if kind == "NOT":
            nots.append((rx, text, no))
            continue
        for _ in range(count):
            if kind == "NEXT":
                hit = last + 1 if last + 1 < len(lines) and rx.search(lines[last + 1]) else None
                if hit is None:
                    fail(path, no, f"CHECK-NEXT: {text}: not on the line after the last match",
                         lines, max(last, 0))
            else:
                hit = next((i for i in range(at, len(lines)) if rx.search(lines[i])), None)
                if hit is None:
                    fail(path, no, f"CHECK: {text}: not found", lines, at)
            for nrx, ntext, nno in nots:
                bad = next((i for i in range(at, hit) if nrx.search(lines[i])), None)
                if bad is not None:
                    fail(path, nno, f"CHECK-NOT: {ntext}: found on output line {bad + 1}",
                         lines, at)
            nots = []
            last, at = hit, hit + 1
    for nrx, ntext, nno in nots:   # CHECK-NOTs after the last match: to the end
        bad = next((i for i in range(at, len(lines)) if nrx.search(lines[i])), None)
        if bad is not None:
            fail(path, nno, f"CHECK-NOT: {ntext}: found on output line {bad + 1}", lines, at)
    return 0


if __name__ == "__main__":
    sys.exit(main())
