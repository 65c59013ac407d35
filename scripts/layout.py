#!/usr/bin/env python3
"""Layout measures of src/: lines per top-level module, the largest functions, and the import graph
between stage modules (`crate::X` paths), with its cycles. Usage: scripts/layout.py [SRC_DIR]"""
import collections
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
lines = collections.Counter()
graph = collections.defaultdict(set)
functions = []
modules = sorted(
    n[:-3] if n.endswith(".rs") else n
    for n in os.listdir(src)
    if n not in ("lib.rs", "main.rs", "cli") and (n.endswith(".rs") or os.path.isdir(os.path.join(src, n)))
)
fn_start = re.compile(r"^\s*(pub(\([a-z]+\))?\s+)?(async\s+)?(const\s+)?(unsafe\s+)?fn\s+(\w+)")
for root, _, files in os.walk(src):
    for f in files:
        if not f.endswith(".rs"):
            continue
        path = os.path.join(root, f)
        rel = os.path.relpath(path, src)
        top = rel.split(os.sep)[0]
        top = top[:-3] if top.endswith(".rs") else top
        text = open(path, encoding="utf-8").read()
        body = text.split("#[cfg(test)]")[0]
        lines[top] += text.count("\n")
        code = "\n".join(l for l in body.split("\n") if not l.lstrip().startswith("//"))
        for m in re.findall(r"crate::([a-z_]+)", code):
            if m != top and m in modules:
                graph[top].add(m)
        # Functions: from the `fn` line to the line that closes its brace at the same indent.
        src_lines = text.split("\n")
        for i, line in enumerate(src_lines):
            m = fn_start.match(line)
            if not m or line.rstrip().endswith(";"):
                continue
            indent = len(line) - len(line.lstrip())
            for j in range(i + 1, len(src_lines)):
                if src_lines[j].startswith(" " * indent + "}") and len(src_lines[j]) - len(src_lines[j].lstrip()) == indent:
                    functions.append((j - i + 1, f"{rel}::{m.group(6)}"))
                    break

print("lines per module:")
for m, n in sorted(lines.items(), key=lambda kv: -kv[1]):
    print(f"  {m:12} {n:6}")
print(f"  {'total':12} {sum(lines.values()):6}")
print("largest functions:")
for n, name in sorted(functions, reverse=True)[:8]:
    print(f"  {n:5}  {name}")
print("imports between modules (non-test code):")
for m in sorted(graph):
    print(f"  {m} -> {', '.join(sorted(graph[m]))}")


def cycles():
    found = []
    for a in sorted(graph):
        for b in sorted(graph[a]):
            # a -> b; is there a path b -> ... -> a?
            stack, seen = [(b, [a, b])], {b}
            while stack:
                node, path = stack.pop()
                if node == a:
                    found.append(path)
                    break
                for n in sorted(graph[node]):
                    if n not in seen or n == a:
                        seen.add(n)
                        stack.append((n, path + [n]))
    return found


cyc = cycles()
print(f"cycles: {len(cyc)}")
for c in cyc:
    print("  " + " -> ".join(c))
sys.exit(1 if cyc and "--strict" in sys.argv else 0)
