"""A pytest plugin that runs filelock's own tests against ``leasehold_lock``.

``tests/python.rs`` downloads filelock's sdist (its tests are not copied into this
repository), and runs its ``tests/test_filelock.py``, ``tests/test_async_filelock.py`` and
``tests/test_read_write.py`` with ``-p leasehold_filelock_shim``. Loaded before filelock's test
modules import it, this plugin puts leasehold's classes in the ``filelock`` module in place of
``FileLock``, ``Timeout``, ``AsyncFileLock`` and ``ReadWriteLock`` (filelock's others, and its
internals, stay its own), and chooses the tests:

* deselected, with the reason printed: tests of filelock's other lock classes (soft locks,
  Windows locks), tests that patch filelock's modules or ``os`` calls to inject a fault
  (leasehold makes its calls in Rust), and tests of filelock's private helpers;
* expected to fail (``xfail(strict=True)``: a pass is reported as a failure, so the list
  stays true): the deliberate differences in ``DIFFERENCES``, each pinned by a test of
  leasehold's own (named beside it) and stated in the package README.

Every other selected test must pass.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from typing import Dict, List, Tuple

import pytest

import filelock
import leasehold_filelock_substitute

#: filelock's classes leasehold does not replace: a test naming one of them in its
#: parameters, or only these in its body, is theirs alone.
OTHER_CLASSES = (
    "SoftFileLock",
    "MarkerSoftFileLock",
    "SoftFileLease",
    "StrictSoftFileLock",
    "WindowsFileLock",
    "AsyncSoftFileLock",
    "AsyncSoftFileLease",
    "AsyncStrictSoftFileLock",
    "AsyncWindowsFileLock",
    "SoftReadWriteLock",
    "AsyncSoftReadWriteLock",
)
OUR_NAMES = ("FileLock", "UnixFileLock", "AsyncFileLock", "AsyncUnixFileLock", "ReadWriteLock", "lock_type")

#: A test that patches these injects a fault into filelock's Python calls.
PATCHES = re.compile(r"""(mocker\.patch(\.object)?|monkeypatch\.setattr|patch\.setattr)\(\s*["']?(filelock\b|os\.|fcntl\.|time\.|sqlite3\.)""")
PRIVATE = re.compile(r"\bfilelock\._|\b_registry\b|\b_raise_grouped_errors\b|\b_append_exception_context\b|\block_descriptor\b|\bunlock_descriptor\b|\._context\b|\bclose_failure\b|\._fork|\bfilelock\.asyncio\._")

#: Deliberate differences: test name (without parameters) -> (reason, leasehold's own test).
_NEVER_TRUNCATED = (
    "the lock file is never truncated, and a lock file that exists keeps its permissions (mode applies to a "
    "file the lock creates): a FileLock may guard a file that holds data, as flock(1) may",
    "test_filelock.py::test_an_existing_lock_file_keeps_its_content_and_mode",
)
_ONE_CLASS = (
    "FileLock and AsyncFileLock are one class on every platform, not aliases of UnixFileLock/WindowsFileLock",
    "test_filelock.py::test_the_classes_are_leaseholds_on_every_platform",
)
_PLAIN_FILE = (
    "ReadWriteLock's lock file is a plain lock file (shared leases), not an SQLite database: it has no journal "
    "mode to refuse, and nothing is opened before a lease is taken",
    "test_filelock.py::test_a_read_write_lock_file_is_a_plain_file_opened_only_to_lock",
)
DIFFERENCES: Dict[str, Tuple[str, str]] = {
    "test_winner_truncates_stale_content": _NEVER_TRUNCATED,
    "test_on_acquired_runs_after_truncation_and_mode": _NEVER_TRUNCATED,
    "test_preserve_lock_file_unix_keeps_pathname": _ONE_CLASS,
    "test_preserve_lock_file_async_release_keeps_pathname": _ONE_CLASS,
    "test_read_write_lock_refuses_a_non_regular_path": _PLAIN_FILE,
    "test_read_write_lock_refuses_a_wal_database": _PLAIN_FILE,
    "test_read_write_lock_refuses_a_database_converted_to_wal_after_construction": _PLAIN_FILE,
}


def _source(item: pytest.Item) -> str:
    try:
        return inspect.getsource(item.function)  # type: ignore[attr-defined]
    except (OSError, TypeError, AttributeError):
        return ""


_TAINTED: Dict[str, Tuple[str, ...]] = {}


def _tainted_helpers(module: object) -> Tuple[str, ...]:
    """The module's helper functions (and fixtures) that patch or reach into filelock."""
    name = getattr(module, "__name__", "")
    if name not in _TAINTED:
        found = []
        for attr, value in vars(module).items():
            func = getattr(value, "__wrapped__", value)
            if not inspect.isfunction(func) or attr.startswith("test_"):
                continue
            try:
                src = inspect.getsource(func)
            except (OSError, TypeError):
                continue
            if PATCHES.search(src) or PRIVATE.search(src):
                found.append(func.__name__)
        _TAINTED[name] = tuple(found)
    return _TAINTED[name]


def _why_not(item: pytest.Item) -> str:
    """Why ``item`` is not a test of leasehold's classes ("" when it is)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    for value in params.values():
        name = getattr(value, "__name__", None)
        if name in OTHER_CLASSES:
            return f"tests filelock's {name}, which leasehold does not replace"
    src = _source(item)
    if not src:
        return ""
    others = [c for c in OTHER_CLASSES if re.search(rf"\b{c}\b", src)]
    if others and not any(re.search(rf"\b{n}\b", src) for n in OUR_NAMES):
        return f"tests filelock's {others[0]}, which leasehold does not replace"
    if PATCHES.search(src):
        return "injects a fault by patching filelock's Python calls (leasehold makes them in Rust)"
    if PRIVATE.search(src):
        return "tests filelock's private helpers"
    used = set(getattr(item, "fixturenames", ()))
    for helper in _tainted_helpers(getattr(item, "module", None)):
        if helper in used or re.search(rf"\b{helper}\(", src):
            return f"patches filelock's Python calls or reads its private state (through {helper})"
    return ""


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    keep: List[pytest.Item] = []
    dropped: List[pytest.Item] = []
    reasons: Dict[str, int] = {}
    for item in items:
        why = _why_not(item)
        if why:
            dropped.append(item)
            reasons[why] = reasons.get(why, 0) + 1
            if os.environ.get("LEASEHOLD_LIST_DESELECTED"):
                sys.stderr.write(f"deselected: {item.nodeid}: {why}\n")
            continue
        name = item.name.split("[", 1)[0]
        if name in DIFFERENCES:
            reason, ours = DIFFERENCES[name]
            item.add_marker(pytest.mark.xfail(reason=f"deliberate difference: {reason} (pinned by {ours})", strict=True))
        keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    sys.stderr.write(f"\nleasehold: filelock {filelock.__version__}: {len(keep)} tests of the replaced classes selected\n")
    for why, n in sorted(reasons.items()):
        sys.stderr.write(f"leasehold: deselected {n}: {why}\n")

