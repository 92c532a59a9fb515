#!/usr/bin/env python3
"""Import circles between the files of a Rust crate: `.ci/file-circles.py SRC_DIR`.

A file refers to another when its code (comments and its test module left out) names a path
into it: `crate::a::b`, `super::x`, `self::y` (each name of a `use super::{x, y::{z}}` group
too), or a child module's name in a `use`. A
re-export from the crate root (`crate::Error` through `lib.rs`) is not a reference to the
root: the root is the crate's facade, not a layer. The files that refer to each other in a
circle are printed with their references; the exit status is 1 when there is a circle, so
CI fails on one (verbs are leaves: `cmd/worker.rs` dispatches to them, they never import it).
"""

import os
import re
import sys


def module_path(rel):
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def main(root):
    files = {}
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(d, n)
                with open(p, encoding="utf-8") as f:
                    files[os.path.relpath(p, root)] = f.read()
    by_module = {module_path(rel): rel for rel in files}
    roots = {rel for rel in files if rel in ("lib.rs", "main.rs")}

    def resolve(current, segments):
        head, rest = segments[0], list(segments[1:])
        if head == "crate":
            base = []
        elif head == "super":
            base = list(current[:-1])
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
        elif head == "self":
            base = list(current)
        elif tuple(current) + (head,) in by_module:
            base, rest = list(current), [head] + rest
        else:
            return None
        found = None
        for i in range(len(rest) + 1):
            found = by_module.get(tuple(base + rest[:i]), found)
        return found

    paths = re.compile(r"\b((?:crate|super|self)(?:::\w+)+)")
    group_start = re.compile(r"\b((?:crate|super|self)(?:::\w+)*)::\{")

    def expand_group(prefix, src, at):
        """The paths of the `{...}` group opening before `at` (`use super::{a, b::{c, d}}`):
        each name in it, nested groups included, is a path from `prefix`."""
        out, item, depth, i = [], "", 0, at
        while i < len(src):
            c = src[i]
            if c == "{":
                inner = expand_group(prefix + [p for p in item.strip().rstrip(":").split("::") if p], src, i + 1)
                out += inner
                item, depth = "", 0
                # skip to the matching brace
                level = 1
                i += 1
                while i < len(src) and level:
                    level += {"{": 1, "}": -1}.get(src[i], 0)
                    i += 1
                continue
            if c in ",}":
                name = item.strip().split(" as ")[0].strip()
                if name == "self":
                    out.append(list(prefix))
                elif name and name != "*":
                    out.append(prefix + name.split("::"))
                item = ""
                if c == "}":
                    return out
            else:
                item += c
            i += 1
        return out
    child_use = re.compile(r"\buse (\w+)::")
    edges = {rel: set() for rel in files}
    for rel, src in files.items():
        current = module_path(rel)
        src = re.sub(r"//[^\n]*", "", src)
        # A test module (`#[cfg(test)]`, `#[cfg(all(test, ...))]`) ends the file's code.
        src = re.split(r"#\[cfg\((?:all\()?test\b[^\]]*\]\s*(?:pub(?:\([\w:]+\))? )?mod \w+", src)[0]
        found = [m.group(1).split("::") for m in paths.finditer(src)]
        for m in group_start.finditer(src):
            found += expand_group(m.group(1).split("::"), src, m.end())
        found += [
            [m.group(1)]
            for m in child_use.finditer(src)
            if m.group(1) not in ("crate", "super", "self")
        ]
        for segments in found:
            target = resolve(current, segments)
            if target and target != rel and target not in roots:
                edges[rel].add(target)

    # Tarjan's strongly connected components, iteratively.
    index, low, on, stack, circles, counter = {}, {}, set(), [], [], [0]
    for start in sorted(files):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    component.append(w)
                    if w == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    arrows = sum(len(e) for e in edges.values())
    print(f"{root}: {len(files)} files, {arrows} references, {len(circles)} circles")
    for circle in circles:
        print(f"  circle of {len(circle)}:")
        for f in circle:
            print(f"    {f} -> {', '.join(sorted(t for t in edges[f] if t in circle))}")
    return 1 if circles else 0


if __name__ == "__main__":
    status = 0
    for src in sys.argv[1:]:
        status |= main(src)
    sys.exit(status)
