"""``FileLock``, ``AsyncFileLock`` and ``ReadWriteLock`` as drop-ins for filelock's: the
keywords and behaviours filelock's own suite checks (``tests/python.rs`` runs that suite
against these classes), and each deliberate difference from filelock, pinned here and listed
in the package README ("Switching from filelock")."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import stat
import sys

import pytest

import leasehold_lock
from conftest import HOLD, blocked_on, holds, until
from leasehold_lock import AsyncFileLock, FileLock, ReadWriteLock, Timeout

# --- the constructor and acquire keywords ------------------------------------------------


def test_every_keyword_of_filelock_is_accepted_and_checked(lock_path):
    lock = FileLock(
        lock_path,
        5,
        0o640,
        True,
        blocking=True,
        is_singleton=False,
        poll_interval=0.01,
        context_error_policy="group",
        close_error_policy="suppress",
        fallback_to_soft=False,
        preserve_lock_file=True,
        on_acquired=None,
    )
    assert (lock.timeout, lock.mode, lock.poll_interval, lock.context_error_policy) == (5, 0o640, 0.01, "group")
    assert (lock.close_error_policy, lock.fallback_to_soft, lock.preserve_lock_file) == ("suppress", False, True)
    with pytest.warns(UserWarning, match="lifetime is ignored"):
        assert FileLock(lock_path, lifetime=10).lifetime is None
    with lock.acquire(timeout=1, poll_interval=0.02, blocking=True, cancel_check=lambda: False):
        assert lock.is_locked
    with pytest.warns(DeprecationWarning, match="poll_interval"):
        lock.acquire(poll_intervall=0.02)
    lock.release()
    for bad, error in [
        ({"poll_interval": -1}, ValueError),
        ({"poll_interval": float("nan")}, ValueError),
        ({"poll_interval": True}, TypeError),
        ({"blocking": 1}, TypeError),
        ({"timeout": "5"}, TypeError),
        ({"mode": 0o400}, ValueError),
        ({"mode": 0o1666}, ValueError),
        ({"context_error_policy": "x"}, ValueError),
        ({"close_error_policy": "x"}, ValueError),
        ({"no_such_option": 1}, TypeError),
    ]:
        with pytest.raises(error):
            FileLock(lock_path, **bad)


def test_timeout_has_filelocks_message_and_attributes(lock_path, spawn):
    holder = spawn(HOLD, lock_path, "exclusive")
    holder.expect("held")
    with pytest.raises(Timeout) as err:
        FileLock(lock_path).acquire(timeout=0)
    e = err.value
    assert str(e) == f"The file lock '{lock_path}' could not be acquired."
    assert isinstance(e, TimeoutError) and e.lock_file == lock_path and e.code == "CONTENDED"
    assert repr(e) == f"Timeout({lock_path!r})"
    if os.path.exists("/proc/locks"):
        assert e.pids == [holder.pid]  # the holder is still named, beside filelock's message


def test_cancel_check_ends_a_wait(lock_path, spawn):
    holder = spawn(HOLD, lock_path, "exclusive")
    holder.expect("held")
    asked = []

    def cancel() -> bool:
        asked.append(blocked_on(os.getpid(), lock_path))
        return True

    lock = FileLock(lock_path)  # no time limit: only cancel_check can end this wait
    with pytest.raises(Timeout):
        lock.acquire(poll_interval=0.05, cancel_check=cancel)
    assert asked, "cancel_check was never asked"
    assert not lock.is_locked and lock.lock_counter == 0


def test_on_acquired_runs_once_per_acquisition_with_the_locked_file(lock_path, spawn):
    seen = []

    def hook(fd: int) -> None:
        st = os.fstat(fd)
        seen.append((lock.is_locked, holds(os.getpid(), lock_path), (st.st_dev, st.st_ino)))
        os.write(fd, b"holder metadata")

    lock = FileLock(lock_path, on_acquired=hook)
    with lock:
        with lock:  # re-entry: no second call
            pass
        st = os.stat(lock_path)
        assert seen == [(True, True, (st.st_dev, st.st_ino))]
    with open(lock_path, "rb") as f:
        assert f.read() == b"holder metadata"


def test_an_on_acquired_that_raises_releases_the_lock(lock_path):
    def hook(_fd: int) -> None:
        raise RuntimeError("hook failed")

    lock = FileLock(lock_path, on_acquired=hook)
    with pytest.raises(RuntimeError, match="hook failed"):
        lock.acquire()
    assert not lock.is_locked and lock.lock_counter == 0
    with leasehold_lock.try_acquire(lock_path, allow_shared_state=True) as free:
        assert free is not None


@pytest.mark.parametrize("mode", [None, 0o666, 0o600])
def test_mode_sets_the_permissions_of_a_lock_file_it_creates(tmp_path, mode):
    path = str(tmp_path / "new" / "m.lock")  # the parent is made too, as filelock
    old = os.umask(0o022)
    try:
        lock = FileLock(path) if mode is None else FileLock(path, mode=mode)
        with lock:
            pass
    finally:
        os.umask(old)
    want = 0o644 if mode is None else mode  # unset: 0666 less the umask, as filelock
    assert stat.S_IMODE(os.stat(path).st_mode) == want


# --- subclasses ------------------------------------------------------------------------


def test_a_subclass_may_have_a_constructor_of_its_own(tmp_path):
    class FilePathLock(FileLock):
        def __init__(self, file_path: str) -> None:
            super().__init__(file_path + ".lock")

    lock = FilePathLock(str(tmp_path / "a"))
    assert lock.lock_file == str(tmp_path / "a") + ".lock"
    with lock:
        assert os.path.exists(lock.lock_file)

    class Tagged(FileLock):
        def __init__(self, lock_file, timeout=-1, mode=0o644, thread_local=True, my_param=0, **kwargs):
            super().__init__(lock_file, timeout, mode, thread_local, is_singleton=True)
            self.my_param = my_param

    calls = []

    class Counted(FileLock):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            calls.append(1)

    tagged = Tagged(str(tmp_path / "b"), my_param=7)
    assert tagged.my_param == 7 and tagged.is_singleton
    a = Counted(str(tmp_path / "c"), is_singleton=True)
    assert Counted(str(tmp_path / "c"), is_singleton=True) is a and calls == [1]


# --- unusable paths, deadlock ----------------------------------------------------------


def test_unusable_paths_raise_the_oserror_filelock_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        FileLock("").acquire()
    with pytest.raises(ValueError, match="embedded null"):
        FileLock(str(tmp_path / "a\0b")).acquire()
    with pytest.raises(IsADirectoryError) as err:
        FileLock(str(tmp_path)).acquire()
    e = err.value
    assert e.errno == errno.EISDIR and isinstance(e, leasehold_lock.LeaseError) and e.code == "INVALID_INPUT"


def test_a_second_instance_in_the_same_thread_raises_instead_of_waiting_forever(lock_path):
    with FileLock(lock_path):
        other = FileLock(lock_path)
        with pytest.raises(RuntimeError, match="Deadlock"):
            other.acquire()
        with pytest.raises(Timeout):  # a bounded wait is a wait
            other.acquire(timeout=0.05)
        assert not other.is_locked
    with FileLock(lock_path):  # and nothing was left behind
        pass


# --- trust: the caller's file -----------------------------------------------------------


def test_a_filelock_locks_a_file_another_user_may_write_or_owns(tmp_path):
    shared = str(tmp_path / "shared.lock")
    fd = os.open(shared, os.O_CREAT | os.O_WRONLY, 0o600)
    os.fchmod(fd, 0o666)
    os.close(fd)
    paths = [shared]
    if os.geteuid() == 0:
        theirs = str(tmp_path / "theirs.lock")
        open(theirs, "w").close()
        os.chown(theirs, 12345, 12345)
        paths.append(theirs)
    for path in paths:
        with pytest.raises(leasehold_lock.LeaseError) as err:
            leasehold_lock.acquire(path, 0)  # the lease keeps the ownership rule
        assert err.value.code == "UNTRUSTED"
        with FileLock(path) as lock:  # the drop-in locks the file its caller chose
            assert lock.is_locked


# --- AsyncFileLock ----------------------------------------------------------------------


def test_async_file_lock_waits_without_blocking_the_loop(lock_path, spawn):
    holder = spawn(HOLD, lock_path, "exclusive")
    holder.expect("held")

    async def main():
        lock = AsyncFileLock(lock_path)
        ticks = 0
        waiter = asyncio.ensure_future(lock.acquire(timeout=20))
        while not blocked_on(os.getpid(), lock_path):
            ticks += 1  # the loop keeps running while the lock is waited for
            await asyncio.sleep(0)
        holder.send()
        async with await waiter:
            assert lock.is_locked and lock.lock_counter == 1
            async with lock:
                assert lock.lock_counter == 2
        assert not lock.is_locked
        with pytest.raises(NotImplementedError):
            with lock:
                pass
        return ticks

    assert asyncio.run(main()) > 0


def test_async_file_lock_deadlock_is_per_task(lock_path):
    async def main():
        first = AsyncFileLock(lock_path)
        await first.acquire()
        with pytest.raises(RuntimeError, match="Deadlock"):
            await AsyncFileLock(lock_path).acquire()

        async def other_task():
            with pytest.raises(Timeout):
                await AsyncFileLock(lock_path, timeout=0).acquire()

        await asyncio.create_task(other_task())
        await first.release()

    asyncio.run(main())


# --- ReadWriteLock ----------------------------------------------------------------------

READ_WRITE = """
import sys, leasehold_lock
lock = leasehold_lock.ReadWriteLock(sys.argv[1], is_singleton=False)
print("waiting", flush=True)
(lock.acquire_read if sys.argv[2] == "read" else lock.acquire_write)(timeout=20)
print("acquired", flush=True)
sys.stdin.readline()
lock.release()
print("released", flush=True)
sys.stdin.readline()
"""


def test_read_write_lock_readers_share_and_a_writer_excludes(lock_path, spawn):
    reader = spawn(READ_WRITE, lock_path, "read")
    reader.expect("waiting")
    reader.expect("acquired")
    lock = ReadWriteLock(lock_path, is_singleton=False)
    with lock.read_lock(timeout=0):
        with pytest.raises(RuntimeError, match="upgrade not allowed"):
            lock.acquire_write(timeout=0)
    with pytest.raises(Timeout, match="could not be acquired"):
        lock.acquire_write(timeout=0)
    reader.send()
    reader.expect("released")
    with lock.write_lock(timeout=20):
        with pytest.raises(Timeout):
            ReadWriteLock(lock_path, is_singleton=False).acquire_read(blocking=False)


def test_read_write_lock_writers_are_not_starved_by_overlapping_readers(lock_path, spawn, linux):
    first = spawn(READ_WRITE, lock_path, "read")
    first.expect("waiting")
    first.expect("acquired")
    writer = spawn(READ_WRITE, lock_path, "write")
    writer.expect("waiting")
    until("the writer waits in the kernel", lambda: blocked_on(writer.pid, lock_path))
    late = spawn(READ_WRITE, lock_path, "read")  # arrives while the writer waits
    late.expect("waiting")
    # The waiting writer holds the gate beside the lock file (docs/design.md), where the
    # late reader queues.
    gate = os.path.join(os.path.dirname(lock_path), "." + os.path.basename(lock_path) + ".leasehold-gate")
    until("the late reader queues behind the writer", lambda: blocked_on(late.pid, gate))
    first.send()  # the first reader leaves: the writer, not the late reader, goes next
    first.expect("released")
    writer.expect("acquired")
    writer.send()
    writer.expect("released")
    late.expect("acquired")
    late.send()


def test_read_write_lock_is_a_singleton_per_path_by_default(lock_path):
    a = ReadWriteLock(lock_path)
    assert ReadWriteLock.get_lock(lock_path) is a
    with pytest.raises(ValueError, match="cannot be changed"):
        ReadWriteLock(lock_path, timeout=3)
    assert ReadWriteLock(lock_path, is_singleton=False) is not a


# --- deliberate differences (named in the filelock suite's run, tests/python.rs) --------


def test_an_existing_lock_file_keeps_its_content_and_mode(lock_path):
    with open(lock_path, "wb") as f:
        f.write(b"data the lock guards")
    os.chmod(lock_path, 0o640)
    with FileLock(lock_path, mode=0o600):
        pass
    assert stat.S_IMODE(os.stat(lock_path).st_mode) == 0o640
    with open(lock_path, "rb") as f:
        assert f.read() == b"data the lock guards"


def test_the_classes_are_leaseholds_on_every_platform():
    for cls, name in [(FileLock, "FileLock"), (AsyncFileLock, "AsyncFileLock"), (ReadWriteLock, "ReadWriteLock")]:
        assert cls.__name__ == name and cls.__module__ == "leasehold_lock._filelock"
    assert issubclass(AsyncFileLock, FileLock)
    for soft in ("SoftFileLock", "AsyncSoftFileLock", "SoftReadWriteLock"):  # no soft locks
        assert not hasattr(leasehold_lock, soft)


def test_a_read_write_lock_file_is_a_plain_file_opened_only_to_lock(tmp_path):
    path = str(tmp_path / "rw.lock")
    lock = ReadWriteLock(path, is_singleton=False)
    assert not os.path.exists(path)  # constructing it opens nothing
    with lock.read_lock():
        assert os.path.getsize(path) == 0  # a plain lock file, no database in it
    fifo = str(tmp_path / "fifo.lock")
    os.mkfifo(fifo)
    later = ReadWriteLock(fifo, is_singleton=False)  # refused when a lease is taken
    with pytest.raises(leasehold_lock.LeaseError) as err:
        later.acquire_read(timeout=0)
    assert err.value.code == "INVALID_INPUT"



def test_the_lock_path_is_followed_at_each_attempt(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    lock = FileLock("x.lock", is_singleton=True)
    monkeypatch.chdir(second)
    with lock:  # the working directory of the acquisition, not of the construction
        assert (second / "x.lock").exists() and not (first / "x.lock").exists()
    moved = tmp_path / "moved"
    with FileLock(str(tmp_path / "d" / "x.lock")):
        os.rename(tmp_path / "d", moved)
        with FileLock(str(tmp_path / "d" / "x.lock"), timeout=0) as again:  # the path, made again
            assert again.is_locked and (tmp_path / "d" / "x.lock").exists()


def test_a_release_interrupted_at_any_python_call_completes(lock_path):
    target = 1  # 1 is the call of release() itself, before its body
    while True:
        target += 1
        lock = FileLock(lock_path)
        lock.acquire()
        calls = iter(range(1, 1000))

        def interrupt(_frame, event, _arg):
            if event == "call" and next(calls) == target:
                raise KeyboardInterrupt

        sys.setprofile(interrupt)
        try:
            lock.release()
            interrupted = False
        except KeyboardInterrupt:
            interrupted = True
        finally:
            sys.setprofile(None)
        assert not lock.is_locked and lock.lock_counter == 0, f"interrupted at call {target}"
        with FileLock(lock_path, timeout=0) as peer:  # released in the kernel too, and registered nowhere
            assert peer.is_locked
        if not interrupted:
            break
    assert target > 2  # some Python call (the log line) was interrupted


def test_a_file_lease_on_the_lock_file_is_an_error_at_once(lock_path):
    fcntl = pytest.importorskip("fcntl")
    if not hasattr(fcntl, "F_SETLEASE"):
        pytest.skip("no file leases (F_SETLEASE) here")
    previous = signal.signal(signal.SIGIO, signal.SIG_IGN)  # the lease-break notice
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        except OSError as e:
            pytest.skip(f"this filesystem grants no file lease: {e}")
        with pytest.raises(leasehold_lock.LeaseError) as err:
            FileLock(lock_path).acquire(timeout=5)
        assert not isinstance(err.value, Timeout) and err.value.code == "IO"
    finally:
        os.close(fd)
        signal.signal(signal.SIGIO, previous)
