"""``leasehold_lock.FileLock``: the behaviours filelock's users rely on, checked against
filelock itself where both must agree (the ``Lock`` fixture runs a test with each), and the
deliberate differences (kernel waits, unsafe paths refused, the lock file kept)."""

from __future__ import annotations

import os
import threading
import time

import pytest

import leasehold_lock
from conftest import HOLD, blocked_on, until

filelock = pytest.importorskip("filelock")


@pytest.fixture(params=["leasehold", "filelock"])
def impl(request):
    """(FileLock, Timeout) of leasehold, and of filelock for comparison."""
    if request.param == "leasehold":
        return leasehold_lock.FileLock, leasehold_lock.Timeout
    return filelock.FileLock, filelock.Timeout


def test_the_names_replace_filelocks():
    from leasehold_lock import FileLock, Timeout  # noqa: F401  (the drop-in import)

    assert issubclass(leasehold_lock.Timeout, TimeoutError)
    t = leasehold_lock.Timeout("/x.lock")
    assert t.lock_file == "/x.lock" and str(t) == "The file lock '/x.lock' could not be acquired."


def test_timeout_raises_timeout_naming_the_lock_file(impl, lock_path):
    FileLock, Timeout = impl
    first, second = FileLock(lock_path), FileLock(lock_path)
    first.acquire()
    started = time.monotonic()
    with pytest.raises(Timeout) as err:
        second.acquire(timeout=0.1)
    assert time.monotonic() - started >= 0.1
    assert err.value.lock_file == lock_path
    assert not second.is_locked and second.lock_counter == 0
    first.release()
    with second.acquire(timeout=1):
        assert second.is_locked


def test_non_blocking_acquire_is_one_try(impl, lock_path):
    FileLock, Timeout = impl
    holder = FileLock(lock_path)
    holder.acquire()
    for make, call in [
        (lambda: FileLock(lock_path), lambda lock: lock.acquire(blocking=False)),
        (lambda: FileLock(lock_path), lambda lock: lock.acquire(timeout=0)),
        (lambda: FileLock(lock_path, blocking=False), lambda lock: lock.acquire()),
        (lambda: FileLock(lock_path, timeout=0), lambda lock: lock.acquire()),
        (lambda: FileLock(lock_path), lambda lock: lock.acquire(timeout=30, blocking=False)),
    ]:
        lock = make()
        started = time.monotonic()
        with pytest.raises(Timeout):
            call(lock)
        assert time.monotonic() - started < 1.0
        assert not lock.is_locked
    holder.release()


def test_reentrant_acquires_count_levels_and_the_last_release_unlocks(impl, lock_path):
    FileLock, _ = impl
    lock = FileLock(lock_path)
    with lock:
        with lock.acquire(timeout=1) as same:
            assert same is lock
            with lock:
                assert lock.lock_counter == 3
            assert lock.lock_counter == 2
        assert lock.is_locked and lock.lock_counter == 1
        assert leasehold_lock.try_acquire(lock_path) is None
    assert not lock.is_locked and lock.lock_counter == 0
    with leasehold_lock.try_acquire(lock_path) as free:
        assert free is not None


def test_release_force_drops_every_level_and_extra_releases_do_nothing(impl, lock_path):
    FileLock, _ = impl
    lock = FileLock(lock_path)
    for _ in range(3):
        lock.acquire()
    lock.release(force=True)
    assert not lock.is_locked and lock.lock_counter == 0
    lock.release()
    assert lock.lock_counter == 0
    with leasehold_lock.try_acquire(lock_path) as free:
        assert free is not None


def test_thread_local_locks_keep_a_count_per_thread(impl, lock_path):
    FileLock, Timeout = impl
    lock = FileLock(lock_path, thread_local=True)
    assert lock.is_thread_local()
    lock.acquire()
    seen = {}

    def other():
        seen["locked"] = lock.is_locked
        try:
            lock.acquire(timeout=0.1)
            seen["got"] = True
        except Timeout:
            seen["got"] = False

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == {"locked": False, "got": False}
    assert lock.lock_counter == 1
    lock.release()


def test_shared_locks_keep_one_count_for_all_threads(impl, lock_path):
    FileLock, _ = impl
    lock = FileLock(lock_path, thread_local=False)
    assert not lock.is_thread_local()
    lock.acquire()
    seen = {}

    def other():
        seen["locked"] = lock.is_locked
        lock.acquire(timeout=0)
        seen["counter"] = lock.lock_counter
        lock.release()

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == {"locked": True, "counter": 2}
    assert lock.lock_counter == 1
    lock.release()
    assert not lock.is_locked


def test_a_shared_lock_is_waited_for_by_one_thread_while_others_count_on_it(lock_path, spawn):
    holder = spawn(HOLD, lock_path, "exclusive")
    holder.expect("held")
    lock = leasehold_lock.FileLock(lock_path, thread_local=False)
    results = []

    def take():
        lock.acquire(timeout=20)
        results.append(lock.lock_counter)

    threads = [threading.Thread(target=take) for _ in range(3)]
    for t in threads:
        t.start()
    holder.send()
    for t in threads:
        t.join()
    assert sorted(results) == [1, 2, 3] and lock.lock_counter == 3
    lock.release(force=True)


def test_timeout_is_settable_and_negative_waits_without_limit(impl, lock_path, spawn):
    FileLock, Timeout = impl
    lock = FileLock(lock_path, timeout=5)
    assert lock.timeout == 5
    lock.timeout = 0.05
    assert lock.timeout == 0.05
    holder = spawn(HOLD, lock_path, "exclusive")
    holder.expect("held")
    with pytest.raises(Timeout):
        lock.acquire()
    lock.timeout = -1
    started = threading.Event()
    got = threading.Event()

    def wait():
        started.set()
        with lock:  # waits without limit
            got.set()

    t = threading.Thread(target=wait)
    t.start()
    started.wait()
    if FileLock is leasehold_lock.FileLock:  # filelock polls: only leasehold's wait is visible
        until("the waiter queues in the kernel", lambda: blocked_on(os.getpid(), lock_path))
    assert not got.is_set()
    holder.send()
    t.join()
    assert got.is_set()


def test_singletons_are_one_instance_per_path_and_refuse_other_arguments(impl, lock_path):
    FileLock, _ = impl
    a = FileLock(lock_path, is_singleton=True)
    b = FileLock(lock_path, is_singleton=True)
    assert a is b and a.is_singleton
    assert FileLock(lock_path) is not a
    with pytest.raises(ValueError):
        FileLock(lock_path, timeout=3, is_singleton=True)
    with a:
        with b:
            assert a.lock_counter == 2


def test_a_lock_is_a_decorator(impl, lock_path):
    FileLock, _ = impl
    lock = FileLock(lock_path)

    @lock
    def inside():
        return lock.is_locked

    assert inside() is True and not lock.is_locked


def test_lock_file_and_mode_are_reported(lock_path):
    lock = leasehold_lock.FileLock(lock_path)
    assert lock.lock_file == lock_path and lock.mode == 0o644 and lock.blocking  # filelock's report
    lock.blocking = False
    assert not lock.blocking


def test_pathlike_lock_files_are_accepted(tmp_path):
    lock = leasehold_lock.FileLock(tmp_path / "p.lock")
    with lock:
        assert lock.lock_file == str(tmp_path / "p.lock")


# --- deliberate differences --------------------------------------------------------------

def test_the_lock_file_is_never_deleted(lock_path):
    with leasehold_lock.FileLock(lock_path):
        pass
    assert os.path.isfile(lock_path)


def test_a_waiter_is_woken_at_the_release_not_at_a_poll(spawn, lock_path):
    child = spawn(HOLD, lock_path, "exclusive")
    child.expect("held")
    lock = leasehold_lock.FileLock(lock_path)
    got = []
    t = threading.Thread(target=lambda: got.append(lock.acquire(timeout=20, poll_interval=5)))
    t.start()
    until("the FileLock waits in the kernel", lambda: blocked_on(os.getpid(), lock_path))
    released = time.monotonic()
    child.send()
    t.join()
    assert time.monotonic() - released < 1.0, "poll_interval=5 must not delay the hand-over"
    lock.release()


def test_filelock_and_leasehold_filelock_exclude_each_other(lock_path, spawn):
    theirs = filelock.FileLock(lock_path)
    with theirs:
        with pytest.raises(leasehold_lock.Timeout):
            leasehold_lock.FileLock(lock_path).acquire(timeout=0)
    mine = leasehold_lock.FileLock(lock_path)
    with mine:
        with pytest.raises(filelock.Timeout):
            filelock.FileLock(lock_path).acquire(timeout=0)
