"""Shared helpers of the pytest suite: child processes that talk in lines, and the kernel
state tests synchronise on (never sleeps).

Run by ``cargo test --workspace --all-features`` (``tests/python.rs``), which puts the built
package on PYTHONPATH and passes LEASEHOLD_CLI (the ``leasehold`` binary, when built) and
LEASEHOLD_CRATE_VERSION.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable, List, Optional

import pytest

#: How long a handshake may take before the test fails (a loaded 2-core CI machine).
LIMIT = 20.0


def blocked_on(pid: int, path: str) -> bool:
    """Whether process ``pid`` waits in the kernel's lock queue for ``path``'s inode: a
    ``->`` line of /proc/locks (Linux) naming it."""
    ino = os.stat(path).st_ino
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if "->" in fields and len(fields) > 6:
            # "1: -> FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
            rest = fields[fields.index("->") + 1 :]
            if len(rest) > 4 and rest[3] == str(pid) and rest[4].endswith(f":{ino}"):
                return True
    return False


def holds(pid: int, path: str) -> bool:
    """Whether process ``pid`` holds a lock on ``path``'s inode (a granted /proc/locks line)."""
    ino = os.stat(path).st_ino
    with open("/proc/locks") as f:
        for line in f.read().splitlines():
            fields = line.split()
            # FLOCK only: leasehold's waiters mark themselves with a POSIX read lock.
            if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
                continue
            if fields[4] == str(pid) and fields[5].endswith(f":{ino}"):
                return True
    return False


def until(what: str, cond: Callable[[], bool], limit: float = LIMIT) -> None:
    """Waits until ``cond()`` holds, looking again at once; fails after ``limit`` seconds."""
    end = time.monotonic() + limit
    while not cond():
        if time.monotonic() > end:
            pytest.fail(f"timed out waiting until {what}")
        os.sched_yield()


class Child:
    """A process spoken to in lines on stdin/stdout (stderr passes through)."""

    def __init__(self, argv: List[str], env: Optional[dict] = None) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            bufsize=0,
            start_new_session=True,
        )
        self._buf = b""

    @classmethod
    def python(cls, code: str, *args: str) -> "Child":
        return cls([sys.executable, "-c", code, *args])

    @property
    def pid(self) -> int:
        return self.proc.pid

    def line(self, limit: float = LIMIT) -> str:
        """The next line the child prints; fails the test if none comes within ``limit``."""
        assert self.proc.stdout is not None
        end = time.monotonic() + limit
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buf:
                left = end - time.monotonic()
                if left <= 0 or not sel.select(left):
                    pytest.fail(f"no line from child {self.pid} within {limit} s (got {self._buf!r})")
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    pytest.fail(f"child {self.pid} exited ({self.proc.wait()}) before a line (got {self._buf!r})")
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def expect(self, word: str, limit: float = LIMIT) -> List[str]:
        """Reads a line and checks its first word."""
        fields = self.line(limit).split()
        assert fields and fields[0] == word, f"expected {word!r}, got {fields}"
        return fields

    def send(self, text: str = "") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((text + "\n").encode())
        self.proc.stdin.flush()

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def wait(self, limit: float = LIMIT) -> int:
        return self.proc.wait(timeout=limit)


@pytest.fixture
def children():
    """Children to be killed (SIGKILL) when the test ends, whatever happened."""
    made: List[Child] = []
    yield made
    for child in made:
        child.kill()


@pytest.fixture
def spawn(children):
    """``spawn(code, *args)``: a Python child running ``code``."""

    def make(code: str, *args: str) -> Child:
        child = Child.python(code, *args)
        children.append(child)
        return child

    return make


@pytest.fixture
def spawn_argv(children):
    """``spawn_argv(argv)``: any child."""

    def make(argv: List[str]) -> Child:
        child = Child(argv)
        children.append(child)
        return child

    return make


@pytest.fixture
def lock_path(tmp_path) -> str:
    return str(tmp_path / "test.lock")


@pytest.fixture
def cli() -> str:
    """The ``leasehold`` binary cargo built, or a skip saying why there is none."""
    path = os.environ.get("LEASEHOLD_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.skip("the leasehold CLI is not built in this target dir (cargo test --workspace builds it)")
    return path


@pytest.fixture
def flock_bin() -> str:
    path = shutil.which("flock")
    if path is None:
        pytest.skip("util-linux flock(1) is not installed")
    return path


@pytest.fixture
def linux():
    if not os.path.exists("/proc/locks"):
        pytest.skip("needs /proc/locks (Linux) to see who waits")


# --- child programs ---------------------------------------------------------------------

#: Holds a lease (argv: path, "shared"|"exclusive") until told, then releases and idles.
HOLD = """
import sys, leasehold_lock
lease = leasehold_lock.acquire(sys.argv[1], shared=sys.argv[2] == "shared")
print("held", flush=True)
sys.stdin.readline()
lease.release()
print("released", flush=True)
sys.stdin.readline()
"""

#: Waits for a lease (argv: path, timeout|"none", "shared"|"exclusive"), says when it has
#: it (with CLOCK_MONOTONIC), holds it until told, then idles.
WAIT = """
import sys, time, leasehold_lock
timeout = None if sys.argv[2] == "none" else float(sys.argv[2])
print("waiting", flush=True)
try:
    lease = leasehold_lock.acquire(sys.argv[1], timeout, shared=sys.argv[3] == "shared")
except leasehold_lock.Timeout as e:
    print("timeout", time.monotonic_ns(), e.code, flush=True)
    sys.stdin.readline()
    raise SystemExit(0)
print("acquired", time.monotonic_ns(), flush=True)
sys.stdin.readline()
lease.release()
print("released", flush=True)
sys.stdin.readline()
"""

#: Holds an fcntl.flock lock (argv: path, "shared"|"exclusive") until told.
FCNTL_HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_SH if sys.argv[2] == "shared" else fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
os.close(fd)
print("released", flush=True)
sys.stdin.readline()
"""


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "linux: needs /proc/locks")


def pytest_runtest_logreport(report) -> None:
    """Every skipped test says so in the project's form, ``SKIP: <what>: <why>``."""
    if report.skipped and report.when in ("setup", "call"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        sys.stderr.write(f"\nSKIP: {report.nodeid}: {reason.removeprefix('Skipped: ')}\n")


__all__ = [
    "FCNTL_HOLD",
    "HOLD",
    "WAIT",
    "Child",
    "blocked_on",
    "holds",
    "signal",
    "until",
]
