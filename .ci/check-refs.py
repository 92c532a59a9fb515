#!/usr/bin/env python3
"""Every repository path the docs and the code comments cite exists.

Scans the Markdown files and the comments of the Rust, JavaScript, TypeScript and Python
sources of the repository (what `git ls-files` lists) for paths — `crates/NAME/src/lib.rs`,
`docs/cli.md`, a bare `gate.rs` — and for Markdown links with an anchor
(`BENCHMARKS.md#a-heading`), and fails naming each one that does not resolve:

* a path with a slash resolves against the repository root, the citing file's directory, the
  citing crate's root or its `src/` (as rustdoc and a reader do), or as the tail of a tracked
  path (`posix/gate.rs` in a sentence about the library's `src/`); a component in capitals
  (`ROOT/published/ID.json`) is a placeholder, not a path;
* a bare file name resolves when some tracked file has that name;
* examples are code, not citations: fenced blocks of Markdown and of doc comments are skipped,
  and so are rustdoc's intra-doc links (`[x](Self::y)`).
* a section cited by name (`BENCHMARKS.md, "Current figures"`) resolves when a heading of
  that file, or a bold label opening one of its paragraphs, starts with the name (case aside);
* an anchor resolves when the linked Markdown file has a heading of that slug (GitHub's rule:
  lower case, punctuation dropped, spaces to hyphens).

Run from anywhere: `python3 .ci/check-refs.py`; exit 1 with one line per dangling reference.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# File kinds whose citations are checked: the extensions a reference must end with.
CITED = ("rs", "md", "py", "pyi", "js", "mjs", "ts", "toml", "sh", "yml", "yaml")  # not .json: the stores' files
SOURCES = (".rs", ".js", ".mjs", ".ts", ".py", ".pyi")
# A path-looking token: optional dirs, a name, a cited extension, not part of a URL.
TOKEN = re.compile(
    r"(?<![\w/.:@-])((?:\.{1,2}/|[\w.-]+/)*[\w-][\w.-]*\.(?:" + "|".join(CITED) + r"))(?![\w/-])"
)
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A section cited by name: `BENCHMARKS.md, "Shared mode"`.
SECTION = re.compile(r"([\w./-]+\.md),? \"([^\"]+)\"")
# Names that look like files but are not files of this repository.
FOREIGN = {
    "Cargo.lock",  # generated in a package's build
    "package-lock.json",
    "lib.rs",  # a crate root in general
    "main.rs",
    "mod.rs",
    "build.rs",
    "conftest.py",
    "setup.py",
    "index.js",
    "index.d.ts",
    "package.json",
    "pyproject.toml",
    "Cargo.toml",
    "config.toml",
    "sitecustomize.py",
    "Node.js",  # names, not files
    "docs.rs",
    "crates.io",
}


def tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.decode()
    return [ROOT / p for p in out.split("\0") if p]


def comments(path: Path, text: str) -> str:
    """The comment text of a source file (code is not prose: paths there are code's)."""
    if path.suffix in (".py", ".pyi"):
        parts = re.findall(r"#[^\n]*", text)
        parts += re.findall(r'"""(.*?)"""', text, flags=re.S)
        return "\n".join(parts)
    return "\n".join(re.findall(r"//[^\n]*|/\*.*?\*/", text, flags=re.S))


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a doc comment's fences start after its marker)."""
    out, fenced = [], False
    for line in text.splitlines():
        bare = re.sub(r"^\s*(//[/!]?|#)?\s*", "", line)
        if bare.startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return out


def slug(heading: str) -> str:
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(md: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_fence = False
    for line in md.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        if in_fence or not line.startswith("#"):
            continue
        s = slug(line.lstrip("#"))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def headings(md: Path) -> list[str]:
    text = md.read_text(encoding="utf-8", errors="replace")
    lines = prose_lines(text)
    found = [line.lstrip("#").strip().lower() for line in lines if line.startswith("#")]
    # A bold label opening a list item or paragraph (`- **Shared mode.** ...`) is a section.
    found += [m.group(1).lower() for line in lines for m in [re.match(r"(?:- )?\*\*([^*]+)\*\*", line)] if m]
    return found


def crate_root(path: Path) -> Path | None:
    for parent in path.parents:
        if (parent / "Cargo.toml").exists() and parent != ROOT:
            return parent
        if parent == ROOT:
            return None
    return None


def main() -> int:
    files = tracked()
    names = {p.name for p in files}
    rel = {p.relative_to(ROOT).as_posix() for p in files}
    dirs = {d for p in rel for d in [os.path.dirname(p)] if d}
    dirs |= {os.path.dirname(d) for d in list(dirs)}

    def exists(candidate: Path) -> bool:
        try:
            r = candidate.resolve().relative_to(ROOT).as_posix()
        except ValueError:
            return False
        return r in rel or r in dirs

    bad: list[str] = []
    for path in files:
        if path.suffix not in SOURCES + (".md",):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        prose = text if path.suffix == ".md" else comments(path, text)
        where = path.relative_to(ROOT).as_posix()
        bases = [ROOT, path.parent]
        crate = crate_root(path)
        if crate is not None:
            bases += [crate, crate / "src"]
        for line in prose_lines(prose):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"[a-z]+:", target) or "::" in target or target.startswith("#"):
                    continue
                if not re.search(r"\.(" + "|".join(CITED) + r")(#|$)", target) and "/" not in target:
                    continue
                file, _, anchor = target.partition("#")
                resolved = (path.parent / file) if file else path
                if file and not exists(resolved):
                    bad.append(f"{where}: link to {target}: no such file")
                elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                    bad.append(f"{where}: link to {target}: no heading '#{anchor}' there")
            for m in SECTION.finditer(line):
                file, section = m.group(1), m.group(2)
                cited = [b / file for b in bases if exists(b / file)]
                cited += [ROOT / r for r in rel if r.endswith("/" + file) or r == file]
                if cited and not any(
                    h.startswith(section.lower()) for c in cited for h in headings(c)
                ):
                    bad.append(f'{where}: cites {file}, "{section}": no such heading there')
            for m in TOKEN.finditer(line):
                token = m.group(1)
                if "/" not in token:
                    if token in names or token in FOREIGN:
                        continue
                    bad.append(f"{where}: cites {token}: no tracked file has that name")
                    continue
                if token.startswith(("node_modules/", "target/", "dist/", "/")):
                    continue
                if any(part.isupper() for part in token.split("/")[:-1]):
                    continue
                if any(exists(base / token) for base in bases):
                    continue
                if any(r.endswith("/" + token.lstrip("./")) for r in rel):
                    continue
                bad.append(f"{where}: cites {token}: no such path")
    for line in sorted(set(bad)):
        print(line)
    if bad:
        print(f"{len(set(bad))} dangling reference(s): fix the citation or the file", file=sys.stderr)
        return 1
    print(f"references: {len(files)} tracked files checked, none dangling")
    return 0


if __name__ == "__main__":
    sys.exit(main())
