"""A pytest plugin that runs filelock's own tests against ``leasehold_lock``.

``tests/python.rs`` downloads filelock's sdist (its tests are not copied into this
repository), and runs its test modules test_filelock, test_async_filelock and test_read_write
with ``-p leasehold_filelock_shim``. Loaded before filelock's test modules import it, this
plugin puts leasehold's classes in the ``filelock`` module in place of ``FileLock``,
``Timeout``, ``AsyncFileLock`` and ``ReadWriteLock`` (``leasehold_filelock_substitute``;
filelock's other classes, and its internals, stay its own), and chooses the tests:

* deselected, with the reason printed: tests of filelock's other lock classes (soft locks,
  Windows locks), tests that patch or spy on the Python functions filelock calls (to inject
  a fault or watch them; leasehold makes its calls in Rust), and tests of filelock's private
  helpers (or that reach them through a helper of the test module);
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

#: A test that patches or spies on a Python function injects a fault into filelock's Python
#: calls, or watches them.
PATCHES = re.compile(r"\b(mocker\.(patch|spy)|monkeypatch\.setattr|patch\.setattr|patch\.object)\b")
PRIVATE = re.compile(r"\bfilelock\._|\b_registry\b|\b_raise_grouped_errors\b|\b_append_exception_context\b|\block_descriptor\b|\bunlock_descriptor\b|\._context\b|\bclose_failure\b|\._fork|\bfilelock\.asyncio\._|\bBase(Async)?FileLock\.\w")

#: Deliberate differences: test name (without parameters) -> (reason, leasehold's own test).
PIN = "tests/test_filelock_compat.py::"
_NEVER_TRUNCATED = (
    "the lock file is never truncated, and a lock file that exists keeps its permissions (mode applies to a "
    "file the lock creates): a FileLock may guard a file that holds data, as flock(1) may",
    PIN + "test_an_existing_lock_file_keeps_its_content_and_mode",
)
_ONE_CLASS = (
    "FileLock and AsyncFileLock are one class on every platform, not aliases of UnixFileLock/WindowsFileLock",
    PIN + "test_the_classes_are_leaseholds_on_every_platform",
)
_PLAIN_FILE = (
    "ReadWriteLock's lock file is a plain lock file (shared leases), not an SQLite database: it has no journal "
    "mode or schema to refuse, and nothing is opened before a lease is taken",
    PIN + "test_a_read_write_lock_file_is_a_plain_file_opened_only_to_lock",
)
_PATH_AT_EACH_ATTEMPT = (
    "the lock path is opened as given at each attempt, missing parent directories created (the library's rule "
    "for every lease): no directory is pinned, so a singleton made before a chdir, a nested acquire after its "
    "directory went, and a waiter whose directory was renamed all follow the path",
    PIN + "test_the_lock_path_is_followed_at_each_attempt",
)
_NO_PYTHON_BELOW_RELEASE = (
    "a release makes no Python call while it holds the lock, so filelock's check that a signal can land below "
    "release() finds no such call (what it guards, a release that completes, holds)",
    PIN + "test_a_release_interrupted_at_any_python_call_completes",
)
_FILE_LEASE = (
    "a kernel file lease (F_SETLEASE) another holder has on the lock file makes the open fail with the library's "
    "LeaseError (code IO, EAGAIN) at once, not a Timeout",
    PIN + "test_a_file_lease_on_the_lock_file_is_an_error_at_once",
)
DIFFERENCES: Dict[str, Tuple[str, str]] = {
    "test_winner_truncates_stale_content": _NEVER_TRUNCATED,
    "test_on_acquired_runs_after_truncation_and_mode": _NEVER_TRUNCATED,
    "test_preserve_lock_file_unix_keeps_pathname": _ONE_CLASS,
    "test_preserve_lock_file_async_release_keeps_pathname": _ONE_CLASS,
    "test_read_write_lock_refuses_a_non_regular_path": _PLAIN_FILE,
    "test_read_write_lock_refuses_a_wal_database": _PLAIN_FILE,
    "test_read_write_lock_refuses_a_database_converted_to_wal_after_construction": _PLAIN_FILE,
    "test_read_write_lock_refuses_a_schema_that_never_finishes_loading": _PLAIN_FILE,
    "test_read_write_lock_refuses_a_schema_row_longer_than_a_lock_needs": _PLAIN_FILE,
    "test_waiter_after_directory_rename_does_not_lock_a_new_file": _PATH_AT_EACH_ATTEMPT,
    "test_nested_acquire_without_working_directory_preserves_hold": _PATH_AT_EACH_ATTEMPT,
    "test_singleton_after_chdir_locks_the_requested_file": _PATH_AT_EACH_ATTEMPT,
    "test_singleton_after_parent_link_moves_locks_the_requested_file": _PATH_AT_EACH_ATTEMPT,
    "test_release_interrupted_below_release_completes": _NO_PYTHON_BELOW_RELEASE,
    "test_lease_on_lock_file_does_not_outlast_deadline": _FILE_LEASE,
}

#: The deliberate differences, each once (the README's list).
DIFFERENCE_COUNT = len(set(DIFFERENCES.values()))


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
        return "patches or spies on Python functions filelock calls (leasehold makes its calls in Rust)"
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
    sys.stderr.write(
        f"\nleasehold: filelock {filelock.__version__}: {len(keep)} tests of the replaced classes selected; "
        f"the tests of {DIFFERENCE_COUNT} of the package's deliberate differences are expected to fail\n"
    )
    for why, n in sorted(reasons.items()):
        sys.stderr.write(f"leasehold: deselected {n}: {why}\n")

