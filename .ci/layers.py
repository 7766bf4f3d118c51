#!/usr/bin/env python3
"""Checks that the daemon's top-level modules (src/<module>) import each other in one direction:
no two modules reach each other through `crate::` paths, directly or around a circle. Comments and
`#[cfg(test)]` code are ignored (a test may compose layers). Prints each circle and exits 1."""
import collections
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "src"
modules, imports = set(), collections.defaultdict(set)
for directory, _, files in os.walk(root):
    for name in files:
        if not name.endswith(".rs") or name == "tests.rs":
            continue
        path = os.path.join(directory, name)
        top = os.path.relpath(path, root).split("/")[0].removesuffix(".rs")
        if top in ("main", "lib"):
            continue
        modules.add(top)
        code = open(path, encoding="utf-8").read().split("#[cfg(test)]")[0]
        code = "\n".join(l for l in code.split("\n") if not l.strip().startswith("//"))
        found = set(re.findall(r"crate::([a-z_0-9]+)", code))
        for group in re.findall(r"use crate::\{([^;]*)\}", code, re.S):
            found |= set(re.findall(r"(?:^|[,{\s])([a-z_0-9]+)(?:::|\s*[,}]|$)", group))
        imports[top] |= found - {top, "self"}

index, low, stack, on_stack, circles, counter = {}, {}, [], set(), [], [0]


def visit(module):
    index[module] = low[module] = counter[0]
    counter[0] += 1
    stack.append(module)
    on_stack.add(module)
    for other in imports[module] & modules:
        if other not in index:
            visit(other)
            low[module] = min(low[module], low[other])
        elif other in on_stack:
            low[module] = min(low[module], index[other])
    if low[module] == index[module]:
        component = []
        while True:
            other = stack.pop()
            on_stack.discard(other)
            component.append(other)
            if other == module:
                break
        if len(component) > 1:
            circles.append(sorted(component))


sys.setrecursionlimit(10_000)
for module in sorted(modules):
    if module not in index:
        visit(module)
for circle in circles:
    print("these modules of", root, "import each other:", ", ".join(circle))
    for module in circle:
        print("  ", module, "->", ", ".join(sorted(imports[module] & set(circle))))
sys.exit(1 if circles else 0)
