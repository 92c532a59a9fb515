"""The package README's examples run as pasted: each ```python block is run by this Python,
as a script, in a fresh directory, and must exit 0. Blocks of another language are not run
here: ``crates/leasehold-stores/tests/doc_blocks.rs`` checks that each is marked with the
reason."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import List, Tuple

import pytest

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")

def blocks() -> List[Tuple[str, int, str]]:
    """The README's fenced blocks: info string, first line number, body."""
    found = []
    lines = open(README, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        opened = re.match(r"^```(.*)$", lines[i])
        if opened:
            start = i + 1
            end = start
            while end < len(lines) and lines[end] != "```":
                end += 1
            found.append((opened.group(1).strip(), start, "\n".join(lines[start:end]) + "\n"))
            i = end
        i += 1
    return found


EXAMPLES = [b for b in blocks() if b[0] == "python"]


def test_the_readme_has_its_examples():
    assert len(EXAMPLES) >= 4, "the README lost its examples"


@pytest.mark.parametrize("line,body", [(b[1], b[2]) for b in EXAMPLES], ids=[f"README.md:{b[1]}" for b in EXAMPLES])
def test_the_example_runs_as_pasted(tmp_path, line, body):
    script = tmp_path / "example.py"
    script.write_text(body)
    # A bound on a hung example (the test would otherwise never end), not a timing claim.
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"README.md:{line} failed:\n{done.stdout}{done.stderr}"
