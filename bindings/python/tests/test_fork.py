"""A child forked without exec (``os.fork``, ``multiprocessing``'s ``fork`` start method) lets
go of the leases, waits and gates it inherited, without unlocking them: the parent's release
frees the lock for every other process at once while the child still runs, and a wait the
parent gave up on does not end with the lock held by the child. Handshakes are pipes and
/proc/locks, never sleeps."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading

import pytest

import leasehold_lock
from conftest import HOLD, blocked_on, until

pytestmark = pytest.mark.usefixtures("linux")

#: Exits 0 if another process takes (and drops) an exclusive flock on argv[1] at once.
TAKE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(1)
"""


def free_for_another_process(path: str) -> bool:
    return subprocess.run([sys.executable, "-c", TAKE, path]).returncode == 0


def what_the_child_sees(lease: leasehold_lock.Lease) -> str:
    """What an inherited lease says in the child: held?, and verify()."""
    try:
        lease.verify()
        verified = "verified"
    except leasehold_lock.LeaseError as e:
        verified = e.code
    return f"{lease.held} {verified}"


@pytest.mark.parametrize("shared", [False, True])
def test_os_fork_child_keeps_no_lease_after_the_parent_releases(lock_path, shared):
    lease = leasehold_lock.acquire(lock_path, shared=shared)
    said_r, said_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, stay alive until told, then release (a no-op)
        try:
            os.write(said_w, (what_the_child_sees(lease) + "\n").encode())
            os.read(go_r, 1)
            lease.release()
            os.write(said_w, f"{lease.held}\n".encode())
        finally:
            os._exit(0)
    with os.fdopen(said_r) as said:
        try:
            # Read first: the child's report comes after its fork hook has run (until then
            # its copy of the descriptor shares the lock, released by closing as flock(1)'s).
            assert said.readline().split() == ["False", "LOST"]
            assert lease.held, "the parent's lease is untouched by the fork"
            lease.verify()
            assert not free_for_another_process(lock_path), "still held by the parent"
            lease.release()
            assert free_for_another_process(lock_path), "the child, alive, holds nothing"
        finally:
            os.write(go_w, b"x")
            assert said.readline().split() == ["False"]
            os.waitpid(pid, 0)


def _report_and_wait(lease, conn, go) -> None:
    conn.send(what_the_child_sees(lease))
    go.wait(30)
    lease.release()
    conn.send(lease.held)


def test_multiprocessing_fork_child_keeps_no_lease_after_the_parent_releases(lock_path):
    ctx = multiprocessing.get_context("fork")
    lease = leasehold_lock.acquire(lock_path)
    parent_end, child_end = ctx.Pipe()
    go = ctx.Event()
    child = ctx.Process(target=_report_and_wait, args=(lease, child_end, go))
    child.start()
    try:
        assert lease.held
        lease.release()
        # The child's report comes after its fork hook has run: until then its copy of the
        # descriptor still shares the lock (a lease is released by closing, as flock(1)'s).
        assert parent_end.recv() == "False LOST"
        assert child.is_alive()
        assert free_for_another_process(lock_path), "the child, alive, holds nothing"
    finally:
        go.set()
        assert parent_end.recv() is False
        child.join(30)


def test_a_wait_the_parent_gave_up_does_not_end_with_the_lock_held_by_the_child(spawn, lock_path):
    holder = spawn(HOLD, lock_path, "exclusive")
    holder.expect("held")
    outcome = []
    gave_up = threading.Event()

    def wait() -> None:
        try:
            outcome.append(leasehold_lock.acquire(lock_path, timeout=2))
        except leasehold_lock.Timeout as e:
            outcome.append(e)
        gave_up.set()

    waiter = threading.Thread(target=wait)
    waiter.start()
    until("this process waits for the lock", lambda: blocked_on(os.getpid(), lock_path))
    go_r, go_w = os.pipe()
    pid = os.fork()  # from the main thread, while another thread waits
    if pid == 0:
        try:
            os.read(go_r, 1)
        finally:
            os._exit(0)
    try:
        assert gave_up.wait(30)
        waiter.join()
        assert isinstance(outcome[0], leasehold_lock.Timeout), outcome
        holder.send()  # release: the abandoned wait's helper is granted and lets go
        holder.expect("released")
        until("another process gets the lock, the child alive", lambda: free_for_another_process(lock_path))
    finally:
        os.write(go_w, b"x")
        os.waitpid(pid, 0)
