"""Python's conventions: a clean namespace, ``__exit__`` returning ``None``, ``bytes`` and
``os.PathLike`` paths everywhere a path is taken, ``code`` a ``Literal``, one meaning of
``timeout=-1`` (no limit) across the package, and errors in Python's words (the keyword
that opts in, never a Rust API; an empty or NUL path is ``INVALID_INPUT``)."""

from __future__ import annotations

import asyncio
import math
import os
import pathlib
import shutil
import subprocess
import sys
import typing

import pytest

import leasehold_lock
from conftest import FCNTL_HOLD, HOLD, WAIT, blocked_on, until


def test_dir_lists_the_public_names_and_private_modules_only():
    public = [n for n in dir(leasehold_lock) if not n.startswith("_")]
    assert sorted(public) == sorted(n for n in leasehold_lock.__all__ if not n.startswith("_"))
    for name in ("os", "asyncio", "Optional", "Union", "annotations"):
        assert name not in dir(leasehold_lock), name


def test_exit_returns_none_and_an_exception_in_the_block_propagates(lock_path):
    lease = leasehold_lock.acquire(lock_path)
    assert lease.__exit__(None, None, None) is None
    assert not lease.held
    with pytest.raises(KeyError):
        with leasehold_lock.acquire(lock_path):
            raise KeyError("x")
    assert leasehold_lock.holders(lock_path) == []


def test_code_is_a_literal_of_every_code_the_package_raises(lock_path, tmp_path):
    codes = set(typing.get_args(leasehold_lock.LeaseErrorCode))
    assert {"CONTENDED", "CANCELLED", "LOST", "INVALID_INPUT", "UNTRUSTED", "NETWORK_FS", "UNSUPPORTED", "CONFLICT", "IO"} == codes
    with pytest.raises(leasehold_lock.LeaseError) as caught:
        leasehold_lock.acquire(str(tmp_path))
    assert caught.value.code in codes


@pytest.mark.parametrize("kind", ["str", "bytes", "pathlike", "bytes-pathlike"])
def test_every_function_takes_str_bytes_and_pathlike_paths(tmp_path, kind):
    class BytesPath:
        def __init__(self, p: str) -> None:
            self.p = p

        def __fspath__(self) -> bytes:
            return os.fsencode(self.p)

    def as_kind(p: str):
        return {"str": p, "bytes": os.fsencode(p), "pathlike": pathlib.Path(p), "bytes-pathlike": BytesPath(p)}[kind]

    lock = str(tmp_path / "a.lock")
    with leasehold_lock.acquire(as_kind(lock), 5) as lease:
        assert lease.path == lock
        assert leasehold_lock.holders(as_kind(lock)) == [os.getpid()]
        assert leasehold_lock.try_acquire(as_kind(lock)) is None
    other = leasehold_lock.try_acquire(as_kind(lock), shared=True)
    assert other is not None
    other.release()

    async def in_asyncio() -> str:
        got = await leasehold_lock.acquire_async(as_kind(lock), 5)
        got.release()
        return got.path

    assert asyncio.run(in_asyncio()) == lock
    doc = leasehold_lock.Document(as_kind(str(tmp_path / "d.json")), lock_path=as_kind(str(tmp_path / "d.lock")))
    with doc.edit(timeout=5) as value:
        value["n"] = 1
    assert doc.read() == {"n": 1} and doc.lock_path == str(tmp_path / "d.lock")


def test_timeout_minus_one_waits_without_limit_everywhere(spawn, lock_path, tmp_path):
    # Free: -1 takes it at once, as None does.
    leasehold_lock.acquire(lock_path, -1).release()

    async def in_asyncio() -> None:
        (await leasehold_lock.acquire_async(lock_path, -1)).release()

    asyncio.run(in_asyncio())
    doc = leasehold_lock.Document(str(tmp_path / "d.json"))
    with doc.edit(timeout=-1) as value:
        value["n"] = 1
    assert doc.update(lambda v: {"n": v["n"] + 1}, timeout=-1) == {"n": 2}
    with leasehold_lock.FileLock(lock_path, timeout=-1):
        pass
    # Held elsewhere: -1 waits in the kernel's queue (no Timeout) until the holder lets go.
    waits_in_the_queue_until_released(spawn, lock_path, "-1")
    # Other negative numbers are refused, as filelock's ReadWriteLock refuses them.
    for bad in (-2, -0.5):
        with pytest.raises(ValueError, match="None or -1"):
            leasehold_lock.acquire(lock_path, bad)
        with pytest.raises(ValueError, match="None or -1"):
            doc.edit(timeout=bad).__enter__()



def test_infinity_and_a_timeout_too_large_to_count_wait_without_limit_and_nan_is_refused(spawn, lock_path, tmp_path):
    # The library's one reading of a timeout: infinity, and seconds beyond what a duration
    # holds, wait without limit (a number that large made the binding panic before).
    for endless in (math.inf, 1e300, sys.float_info.max):
        leasehold_lock.acquire(lock_path, endless).release()

        async def in_asyncio(endless: float = endless) -> None:
            (await leasehold_lock.acquire_async(lock_path, endless)).release()

        asyncio.run(in_asyncio())
        with leasehold_lock.Document(str(tmp_path / "d.json")).edit(timeout=endless) as value:
            value["n"] = 1
    # Held elsewhere: 1e300 waits in the kernel's queue until the holder lets go.
    waits_in_the_queue_until_released(spawn, lock_path, "1e300")
    # NaN and -inf are no number of seconds: refused before anything is opened, naming the
    # keyword.
    for bad in (math.nan, -math.inf):
        with pytest.raises(ValueError, match="timeout must be None or -1"):
            leasehold_lock.acquire(lock_path, bad)
        with pytest.raises(ValueError, match="timeout must be None or -1"):
            asyncio.run(leasehold_lock.acquire_async(lock_path, bad))


def test_a_wait_held_up_at_a_gate_is_worded_as_the_library_and_the_cli_word_it(spawn, lock_path):
    # The gates exist once a shared lease was taken; one is then held by a process that does
    # not let it go (in life a waiter that is stopped or stuck), the lock itself free.
    leasehold_lock.acquire(lock_path, shared=True).release()
    gate = os.path.join(os.path.dirname(lock_path), "." + os.path.basename(lock_path) + ".leasehold-gate")
    blocker = spawn(FCNTL_HOLD, gate, "exclusive")
    blocker.expect("held")
    with pytest.raises(leasehold_lock.Timeout) as raised:
        leasehold_lock.acquire(lock_path, 0, shared=True)
    message = str(raised.value)
    assert message.startswith(f"{lock_path}: lock is held up at its gate {gate}, held by "), message
    if leasehold_lock.holders(lock_path) is not None:
        assert f"another process (pid {blocker.pid}) (a waiter ahead in line; the lock itself is free" in message
        assert "stopped or stuck: resume or end it); not waited for (pass timeout=SECONDS" in message
    blocker.send()
    blocker.expect("released")

def test_an_empty_or_nul_path_is_invalid_input(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for path in ("", "a\0b.lock", b"", b"a\0b.lock"):
        for attempt in (
            lambda: leasehold_lock.acquire(path),
            lambda: leasehold_lock.acquire(path, 0, shared=True),
            lambda: leasehold_lock.try_acquire(path),
            lambda: asyncio.run(leasehold_lock.acquire_async(path, 0)),
            lambda: leasehold_lock.holders(path),
        ):
            with pytest.raises(leasehold_lock.LeaseError) as caught:
                attempt()
            assert caught.value.code == "INVALID_INPUT", caught.value
            message = str(caught.value)
            assert "is not a usable path" in message and "give the path of the lock file" in message, message
    assert os.listdir(tmp_path) == []


def in_python_terms(message: str) -> bool:
    return not any(word in message for word in ("LeaseOptions", "Budget", "::", "CLI:", "LEASEHOLD_"))


def test_a_refusal_names_the_keyword_that_opts_in(tmp_path):
    lock = str(tmp_path / "shared.lock")
    open(lock, "w").close()
    os.chmod(lock, 0o666)
    with pytest.raises(leasehold_lock.LeaseError) as caught:
        leasehold_lock.acquire(lock, 0)
    message = str(caught.value)
    assert caught.value.code == "UNTRUSTED", message
    assert message.startswith(f"{lock}: ") and "opt in with allow_shared_state=True" in message, message
    assert in_python_terms(message), message
    leasehold_lock.acquire(lock, 0, allow_shared_state=True).release()

    if shutil.which("bindfs") is None:
        pytest.skip("bindfs is not installed (a FUSE mount shows the NETWORK_FS message)")
    backing, mnt = tmp_path / "backing", tmp_path / "mnt"
    backing.mkdir()
    mnt.mkdir()
    if subprocess.run(["bindfs", str(backing), str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("bindfs cannot mount here")
    try:
        on_fuse = str(mnt / "app.lock")
        with pytest.raises(leasehold_lock.LeaseError) as caught:
            leasehold_lock.acquire(on_fuse, 0)
        message = str(caught.value)
        assert caught.value.code == "NETWORK_FS", message
        assert "opt in with allow_network_fs=True" in message and in_python_terms(message), message
        leasehold_lock.acquire(on_fuse, 0, allow_network_fs=True).release()
    finally:
        if subprocess.run(["fusermount3", "-u", str(mnt)]).returncode != 0:
            subprocess.run(["fusermount", "-u", str(mnt)])


def waits_in_the_queue_until_released(spawn, lock_path, timeout: str) -> None:
    """A process waiting with `timeout` for a lock another process holds queues in the
    kernel (no Timeout) and gets the lock once the holder lets go."""
    holder = spawn(HOLD, lock_path, "exclusive")
    holder.expect("held")
    waiter = spawn(WAIT, lock_path, timeout, "exclusive")
    waiter.expect("waiting")
    until("the waiter is queued in the kernel", lambda: blocked_on(waiter.pid, lock_path))
    holder.send()
    holder.expect("released")
    waiter.expect("acquired")
    waiter.send()
    waiter.expect("released")
