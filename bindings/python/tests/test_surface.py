"""The rest of the surface: unusable lock paths refused promptly with INVALID_INPUT and left
untouched, error codes and holders, the Lease object's lifetime, and the version."""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import stat
import time

import pytest

import leasehold_lock
from conftest import HOLD


def hostile_paths(tmp_path):
    """A symlink to a real file, a dangling symlink, a FIFO and a directory."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    os.chmod(victim, 0o640)
    link = tmp_path / "link.lock"
    link.symlink_to(victim)
    dangling = tmp_path / "dangling.lock"
    dangling.symlink_to(tmp_path / "nothing")
    fifo = tmp_path / "fifo.lock"
    os.mkfifo(fifo)
    directory = tmp_path / "dir.lock"
    directory.mkdir()
    return victim, {"symlink": link, "dangling symlink": dangling, "FIFO": fifo, "directory": directory}


def snapshot(tmp_path):
    out = {}
    for entry in sorted(tmp_path.rglob("*")):
        st = os.lstat(entry)
        content = entry.read_bytes() if stat.S_ISREG(st.st_mode) else None
        out[str(entry)] = (stat.S_IFMT(st.st_mode), st.st_mode & 0o7777, st.st_ino, content)
    return out


CALLS = {
    "acquire": lambda p: leasehold_lock.acquire(p),
    "acquire(timeout=5)": lambda p: leasehold_lock.acquire(p, 5),
    "acquire(shared)": lambda p: leasehold_lock.acquire(p, shared=True),
    "try_acquire": lambda p: leasehold_lock.try_acquire(p),
    "acquire_async": lambda p: asyncio.run(leasehold_lock.acquire_async(p, 5)),
    "FileLock": lambda p: leasehold_lock.FileLock(p).acquire(),
    "holders": lambda p: leasehold_lock.holders(p),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_unusable_lock_paths_are_refused_promptly_and_changed_in_nothing(tmp_path, call):
    victim, paths = hostile_paths(tmp_path)
    before = snapshot(tmp_path)
    for what, path in paths.items():
        started = time.monotonic()
        with pytest.raises(leasehold_lock.LeaseError) as err:
            CALLS[call](str(path))
        assert time.monotonic() - started < 1.0, f"{what}: not refused promptly"
        e = err.value
        assert e.code == "INVALID_INPUT", (what, e.code, str(e))
        assert e.path == str(path) and str(path) in str(e), (what, str(e))
        assert not isinstance(e, leasehold_lock.Timeout)
    assert snapshot(tmp_path) == before, "something was changed"
    assert not (tmp_path / "nothing").exists(), "a dangling symlink was followed"


def test_a_socket_and_a_device_are_refused_too(tmp_path):
    sock_path = str(tmp_path / "sock.lock")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(sock_path)
    try:
        for path in (sock_path, "/dev/null"):
            with pytest.raises(leasehold_lock.LeaseError) as err:
                leasehold_lock.try_acquire(path)
            assert err.value.code == "INVALID_INPUT"
    finally:
        sock.close()


def test_a_parent_that_is_a_file_is_invalid_input(tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(leasehold_lock.LeaseError) as err:
        leasehold_lock.acquire(str(tmp_path / "file" / "x.lock"), 0)
    assert err.value.code == "INVALID_INPUT"
    assert (tmp_path / "file").read_bytes() == b"x"


def test_a_lock_file_others_may_write_is_untrusted_unless_allowed(lock_path):
    open(lock_path, "w").close()
    os.chmod(lock_path, 0o666)
    with pytest.raises(leasehold_lock.LeaseError) as err:
        leasehold_lock.try_acquire(lock_path)
    assert err.value.code == "UNTRUSTED" and "allow_shared_state=True" in str(err.value)
    assert os.stat(lock_path).st_mode & 0o777 == 0o666
    with leasehold_lock.try_acquire(lock_path, allow_shared_state=True) as lease:
        assert lease is not None


def test_verify_reports_a_removed_or_replaced_lock_file_as_lost(lock_path):
    lease = leasehold_lock.acquire(lock_path)
    lease.verify()
    os.unlink(lock_path)
    with pytest.raises(leasehold_lock.LeaseError) as err:
        lease.verify()
    assert err.value.code == "LOST" and err.value.path == lock_path
    open(lock_path, "w").close()
    with pytest.raises(leasehold_lock.LeaseError):
        lease.verify()
    lease.release()
    with pytest.raises(leasehold_lock.LeaseError) as err:
        lease.verify()
    assert err.value.code == "LOST"


def test_a_lease_is_a_context_manager_and_release_is_idempotent(lock_path):
    with leasehold_lock.acquire(lock_path, 5) as lease:
        assert isinstance(lease, leasehold_lock.Lease)
        assert lease.path == lock_path and lease.shared is False
        assert leasehold_lock.try_acquire(lock_path) is None
        assert "held" in repr(lease)
    assert "released" in repr(lease)
    lease.release()
    lease.release()
    with leasehold_lock.try_acquire(lock_path) as again:
        assert again is not None


def test_garbage_collection_releases_a_lease(lock_path):
    lease = leasehold_lock.acquire(lock_path)
    assert leasehold_lock.try_acquire(lock_path) is None
    del lease
    gc.collect()
    with leasehold_lock.try_acquire(lock_path) as again:
        assert again is not None


def test_holders_names_the_holding_process_and_creates_nothing(spawn, tmp_path, lock_path):
    missing = str(tmp_path / "missing.lock")
    assert leasehold_lock.holders(missing) == []
    assert not os.path.exists(missing)
    holder = spawn(HOLD, lock_path, "exclusive")
    holder.expect("held")
    assert leasehold_lock.holders(lock_path) == [holder.pid]
    err = None
    try:
        leasehold_lock.acquire(lock_path, 0)
    except leasehold_lock.Timeout as e:
        err = e
    assert err is not None and err.pids == [holder.pid]
    assert f"pid {holder.pid}" in str(err)
    holder.send()
    holder.expect("released")
    assert leasehold_lock.holders(lock_path) == []
    # An error whose holder was never asked about is pickled with what was known.
    import pickle

    again = pickle.loads(pickle.dumps(err))
    assert type(again) is leasehold_lock.Timeout and again.lock_file == lock_path and again.pids == [holder.pid]


def test_contention_messages_name_the_timeout_argument_not_the_rust_budget(lock_path):
    # The facts are the library's; the setting to change is named as Python writes it.
    with leasehold_lock.acquire(lock_path):
        for timeout, said in ((0, "not waited for"), (0.05, "gave up after")):
            with pytest.raises(leasehold_lock.Timeout) as caught:
                leasehold_lock.acquire(lock_path, timeout)
            message = str(caught.value)
            assert message.startswith(f"{lock_path}: lock is held by "), message
            assert said in message and "timeout" in message, message
            assert "Budget" not in message, message


def test_bad_timeouts_are_value_errors(lock_path):
    # -1 is filelock's "without limit", as everywhere in the package (test_conventions.py).
    for bad in (-2, -0.5, float("nan")):
        with pytest.raises(ValueError):
            leasehold_lock.acquire(lock_path, bad)


def test_the_version_is_the_crates():
    want = os.environ.get("LEASEHOLD_CRATE_VERSION")
    if not want:
        pytest.skip("LEASEHOLD_CRATE_VERSION is set by tests/python.rs")
    assert leasehold_lock.__version__ == want


def test_the_stubs_name_every_public_name():
    here = os.path.dirname(leasehold_lock.__file__)
    assert os.path.exists(os.path.join(here, "py.typed"))
    stub = open(os.path.join(here, "_native.pyi")).read()
    for name in ("class Lease", "def acquire(", "def try_acquire(", "def start_acquire(", "def holders("):
        assert name in stub, name
    for name in leasehold_lock.__all__:
        assert hasattr(leasehold_lock, name), name
