"""Exclusion and hand-over between real processes: two Python processes, Python and the
``leasehold`` CLI, Python and other flock users (``fcntl.flock``, util-linux ``flock(1)``),
and a Python holder killed with SIGKILL. Each side waits on kernel state or a child's line."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

import leasehold_lock
from conftest import FCNTL_HOLD, HOLD, WAIT, blocked_on, holds, until

pytestmark = pytest.mark.usefixtures("linux")


def test_two_python_processes_exclude_each_other_and_hand_over(spawn, lock_path):
    holder = spawn(HOLD, lock_path, "exclusive")
    holder.expect("held")
    assert leasehold_lock.try_acquire(lock_path) is None
    assert leasehold_lock.holders(lock_path) == [holder.pid]
    waiter = spawn(WAIT, lock_path, "none", "exclusive")
    waiter.expect("waiting")
    until("the waiter is queued in the kernel", lambda: blocked_on(waiter.pid, lock_path))
    holder.send()  # release
    holder.expect("released")
    waiter.expect("acquired")
    assert holds(waiter.pid, lock_path) and not holds(holder.pid, lock_path)
    # The new holder excludes the old one, and the lease moves back once it is released.
    assert leasehold_lock.try_acquire(lock_path) is None
    waiter.send()
    waiter.expect("released")
    lease = leasehold_lock.try_acquire(lock_path)
    assert lease is not None
    lease.release()


def test_shared_leases_coexist_across_processes_and_exclude_a_writer(spawn, lock_path):
    readers = [spawn(HOLD, lock_path, "shared") for _ in range(2)]
    for r in readers:
        r.expect("held")
    assert leasehold_lock.try_acquire(lock_path) is None
    with leasehold_lock.try_acquire(lock_path, shared=True) as mine:
        assert mine.shared
    writer = spawn(WAIT, lock_path, "none", "exclusive")
    writer.expect("waiting")
    until("the writer waits", lambda: blocked_on(writer.pid, lock_path))
    for r in readers:
        r.send()
        r.expect("released")
    writer.expect("acquired")
    assert leasehold_lock.try_acquire(lock_path, shared=True) is None


def test_a_timed_out_waiter_gives_up_and_never_takes_the_lease(spawn, lock_path):
    holder = spawn(HOLD, lock_path, "exclusive")
    holder.expect("held")
    waiter = spawn(WAIT, lock_path, "0.3", "exclusive")
    waiter.expect("waiting")
    assert waiter.expect("timeout")[2] == "CONTENDED"
    holder.send()
    holder.expect("released")
    # The abandoned waiter is alive and idle: it must hold nothing now.
    lease = leasehold_lock.acquire(lock_path, 5)
    assert not holds(waiter.pid, lock_path)
    lease.release()


def test_sigkill_of_a_python_holder_hands_the_lease_to_the_waiter(spawn, lock_path):
    holder = spawn(HOLD, lock_path, "exclusive")
    holder.expect("held")
    waiter = spawn(WAIT, lock_path, "none", "exclusive")
    waiter.expect("waiting")
    until("the waiter is queued in the kernel", lambda: blocked_on(waiter.pid, lock_path))
    killed = time.monotonic_ns()
    holder.kill()  # SIGKILL
    acquired = int(waiter.expect("acquired")[1])
    assert acquired - killed < 2_000_000_000, "takeover took more than 2 s"
    assert os.path.exists(lock_path), "a lock file is never removed"


# --- the leasehold CLI ------------------------------------------------------------------

def test_python_and_the_cli_exclude_each_other_both_ways(spawn, spawn_argv, cli, lock_path):
    # The CLI holds; Python waits and takes over when the CLI's command ends.
    run = spawn_argv([cli, "run", lock_path, "--", "sh", "-c", "echo held; read x"])
    run.expect("held")
    assert leasehold_lock.try_acquire(lock_path) is None
    waiter = spawn(WAIT, lock_path, "none", "exclusive")
    waiter.expect("waiting")
    until("the Python waiter queues", lambda: blocked_on(waiter.pid, lock_path))
    run.send()
    assert run.wait() == 0
    waiter.expect("acquired")
    # Python holds; the CLI is refused (75) at once and after a timed wait, then runs.
    out = subprocess.run([cli, "run", "--no-wait", lock_path, "--", "true"], capture_output=True, text=True)
    assert out.returncode == 75, out
    assert f"pid {waiter.pid}" in out.stderr, out.stderr
    out = subprocess.run([cli, "run", "--timeout", "0.2", lock_path, "--", "true"], capture_output=True, text=True)
    assert out.returncode == 75, out
    cli_waiter = spawn_argv([cli, "run", lock_path, "--", "echo", "ran"])
    until("the CLI waiter queues", lambda: blocked_on(cli_waiter.pid, lock_path))
    waiter.send()
    cli_waiter.expect("ran")
    assert cli_waiter.wait() == 0


def test_shared_python_and_shared_cli_coexist_and_exclude_exclusive(spawn_argv, cli, lock_path):
    run = spawn_argv([cli, "run", "--shared", lock_path, "--", "sh", "-c", "echo held; read x"])
    run.expect("held")
    with leasehold_lock.try_acquire(lock_path, shared=True) as shared:
        assert shared is not None
        out = subprocess.run([cli, "run", "--no-wait", lock_path, "--", "true"], capture_output=True)
        assert out.returncode == 75
        out = subprocess.run([cli, "run", "--shared", "--no-wait", lock_path, "--", "true"], capture_output=True)
        assert out.returncode == 0
    assert leasehold_lock.try_acquire(lock_path) is None  # the CLI still holds its shared lease
    run.send()
    assert run.wait() == 0
    with leasehold_lock.try_acquire(lock_path) as lease:
        assert lease is not None


# --- other flock users: fcntl.flock and util-linux flock(1) -----------------------------

@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_fcntl_flock_holders_and_leasehold_exclude_each_other(spawn, lock_path, mode):
    import fcntl

    holder = spawn(FCNTL_HOLD, lock_path, mode)
    holder.expect("held")
    assert leasehold_lock.try_acquire(lock_path) is None
    shared = leasehold_lock.try_acquire(lock_path, shared=True)
    assert (shared is not None) == (mode == "shared")
    if shared is not None:
        shared.release()
    waiter = spawn(WAIT, lock_path, "none", "exclusive")
    waiter.expect("waiting")
    until("the waiter queues behind the fcntl holder", lambda: blocked_on(waiter.pid, lock_path))
    holder.send()
    waiter.expect("acquired")
    # The other way round: leasehold holds, fcntl.flock is refused.
    fd = os.open(lock_path, os.O_RDWR)
    try:
        for op in (fcntl.LOCK_EX, fcntl.LOCK_SH):
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, op | fcntl.LOCK_NB)
        waiter.send()
        waiter.expect("released")
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_leasehold_shared_lease_admits_fcntl_readers_only(lock_path):
    import fcntl

    with leasehold_lock.acquire(lock_path, 0, shared=True):
        fd = os.open(lock_path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)


@pytest.mark.parametrize("mode", ["exclusive", "shared"])
def test_util_linux_flock_and_leasehold_exclude_each_other_both_ways(spawn, spawn_argv, flock_bin, lock_path, mode):
    flag = "-s" if mode == "shared" else "-x"
    # flock(1) holds.
    held = spawn_argv([flock_bin, flag, lock_path, "sh", "-c", "echo held; read x"])
    held.expect("held")
    assert leasehold_lock.try_acquire(lock_path) is None
    shared = leasehold_lock.try_acquire(lock_path, shared=True)
    assert (shared is not None) == (mode == "shared")
    if shared is not None:
        shared.release()
    held.send()
    assert held.wait() == 0
    # leasehold holds (in another process); flock(1) -n fails (1), and a waiting flock(1) runs
    # once it is released.
    holder = spawn(HOLD, lock_path, mode)
    holder.expect("held")
    ex = subprocess.run([flock_bin, "-n", "-x", lock_path, "true"])
    assert ex.returncode == 1
    sh = subprocess.run([flock_bin, "-n", "-s", lock_path, "true"])
    assert sh.returncode == (0 if mode == "shared" else 1)
    waiting = spawn_argv([flock_bin, "-x", lock_path, "echo", "ran"])
    until("flock(1) queues", lambda: blocked_on(waiting.pid, lock_path))
    holder.send()
    waiting.expect("ran")
    assert waiting.wait() == 0


def test_a_nested_shared_lease_is_granted_past_a_writer_waiting_for_the_outer_one(spawn, lock_path):
    # The writer holds the gate and waits for our outer lease: a nested shared lease that
    # waited behind it would wait for good (the timeout only bounds the test).
    outer = leasehold_lock.acquire(lock_path, shared=True)
    writer = spawn(WAIT, lock_path, "none", "exclusive")
    writer.expect("waiting")
    until("the writer waits for the outer lease", lambda: blocked_on(writer.pid, lock_path))
    inner = leasehold_lock.acquire(lock_path, 10, shared=True)
    assert inner.held
    inner.release()
    outer.release()
    writer.expect("acquired")
