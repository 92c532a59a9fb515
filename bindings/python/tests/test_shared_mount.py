"""``on_shared_mount=Record(ttl=...)`` on the two-mount bed: two bindfs mounts of one
directory, on which a kernel lock through one does not exclude one through the other (checked
first) — as two NFS clients with ``local_lock=all``. Python holders in child processes, the
leasehold CLI's ``run`` (``LEASEHOLD_SHARED_MOUNT=record:SECS``) on the other side; handshakes
by lines on pipes, never sleeps."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
from typing import Iterator, List, Tuple

import pytest

import leasehold_lock
from conftest import Child, until
from leasehold_lock import Document, LeaseError, Record

#: A record lease's holder (argv: path, TTL seconds): prints ``held TOKEN``; on ``verify``
#: prints ``ok`` or the error's code; on ``release`` releases and prints ``released``.
RECORD_HOLDER = """
import sys, leasehold_lock
lease = leasehold_lock.acquire(sys.argv[1], on_shared_mount=leasehold_lock.Record(ttl=float(sys.argv[2])))
print("held", lease.fencing_token, flush=True)
for cmd in sys.stdin:
    cmd = cmd.strip()
    if cmd == "verify":
        try:
            lease.verify()
            print("ok", flush=True)
        except leasehold_lock.LeaseError as e:
            print(e.code, flush=True)
    if cmd == "release":
        lease.release()
        print("released", flush=True)
"""


def _unmount(mnt: str) -> None:
    # Lazily (-z): a released record lease's directory descriptor stays open until its
    # object is collected, which would keep the mount busy.
    if subprocess.run(["fusermount3", "-uz", mnt], capture_output=True).returncode != 0:
        subprocess.run(["fusermount", "-uz", mnt], capture_output=True)


@pytest.fixture
def two_mounts(tmp_path, cli) -> Iterator[Tuple[str, str]]:
    """Two mounts of one directory that the kernel's lock does not cross, or a skip (no
    bindfs, no FUSE, or a kernel lock that does cross them here)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the two-mount bed is Linux-only (bindfs)")
    if shutil.which("bindfs") is None:
        print("SKIP: FUSE test: bindfs is not installed (apt-get install bindfs)")
        pytest.skip("FUSE test: bindfs is not installed")
    backing = tmp_path / "backing"
    backing.mkdir()
    mounted: List[str] = []
    try:
        for name in ("mnt", "mnt-2"):
            mnt = str(tmp_path / name)
            os.mkdir(mnt)
            got = subprocess.run(["bindfs", str(backing), mnt], capture_output=True)
            if got.returncode != 0:
                print(f"SKIP: FUSE test: bindfs could not mount here: {got.stderr!r}")
                pytest.skip("FUSE test: bindfs could not mount here")
            mounted.append(mnt)
        a, b = mounted
        probe = leasehold_lock.try_acquire(os.path.join(a, "probe.lock"), allow_network_fs=True)
        assert probe is not None
        other = subprocess.run(
            [cli, "run", "--no-wait", os.path.join(b, "probe.lock"), "--", "true"],
            env={**os.environ, "LEASEHOLD_ALLOW_NETWORK_FS": "1"},
        )
        probe.release()
        if other.returncode != 0:
            print("SKIP: record lease test: a kernel lock through one bindfs mount excludes the other here, so they are not two hosts")
            pytest.skip("the bindfs mounts are not two hosts here")
        yield a, b
    finally:
        for mnt in reversed(mounted):
            _unmount(mnt)


def run_once(cli: str, lock: str, *flags: str) -> subprocess.CompletedProcess:
    """A ``leasehold run`` with a record lease (TTL 60 s) on ``lock``, printing ``ran TOKEN``."""
    return subprocess.run(
        [cli, "run", *flags, lock, "--", "sh", "-c", "echo ran $LEASEHOLD_FENCING_TOKEN"],
        env={**os.environ, "LEASEHOLD_SHARED_MOUNT": "record:60"},
        capture_output=True,
        text=True,
    )


def cli_holder(children: List[Child], cli: str, lock: str) -> Child:
    """A ``leasehold run`` holding the record lease (TTL 60 s) on ``lock``: prints ``locked
    TOKEN``, waits for a line, prints ``done``; killed when the test ends."""
    child = Child(
        [cli, "run", lock, "--", "sh", "-c", "echo locked $LEASEHOLD_FENCING_TOKEN; read _ignored; echo done"],
        env={**os.environ, "LEASEHOLD_SHARED_MOUNT": "record:60"},
    )
    children.append(child)
    return child


#: The refusal's naming of the keyword, as every call of the package words it.
NAMED = (
    "take a record lease there, which excludes across hosts (exclusive leases; "
    "on_shared_mount=leasehold_lock.Record(ttl=SECONDS)), or opt in with allow_network_fs=True"
)


def test_without_the_keyword_a_host_only_mount_is_refused_naming_it(two_mounts, tmp_path):
    lock = os.path.join(two_mounts[0], "job.lock")
    named = NAMED
    for attempt in (
        lambda: leasehold_lock.try_acquire(lock),
        lambda: leasehold_lock.acquire(lock, 1),
        lambda: asyncio.run(leasehold_lock.acquire_async(lock, 1)),
    ):
        with pytest.raises(LeaseError) as refused:
            attempt()
        assert refused.value.code == "NETWORK_FS"
        assert named in str(refused.value), str(refused.value)
        assert "LeaseOptions" not in str(refused.value)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"Record\(ttl=.*positive number of seconds"):
            Record(ttl=bad)
    with pytest.raises(TypeError):
        leasehold_lock.try_acquire(lock, on_shared_mount=10.0)  # type: ignore[arg-type]
    assert Record(ttl=2.5).ttl == 2.5
    # On a local disk the keyword changes nothing: the kernel's lease, without a token.
    local = leasehold_lock.try_acquire(str(tmp_path / "local.lock"), on_shared_mount=Record(ttl=60))
    assert local is not None and local.fencing_token is None
    local.release()


def test_a_python_holder_and_leasehold_run_exclude_each_other_across_the_mounts(two_mounts, cli, spawn, children):
    lock_a, lock_b = (os.path.join(m, "job.lock") for m in two_mounts)
    record = Record(ttl=60)

    # A Python holder through A: the CLI through B cannot have it.
    holder = spawn(RECORD_HOLDER, lock_a, "60")
    assert holder.line() == f"held {token(1)}"
    busy = run_once(cli, lock_b, "--no-wait")
    assert (busy.returncode, busy.stdout) == (75, ""), busy.stderr
    assert re.search(rf"held by pid {holder.pid} on host [0-9a-f]{{16}} \(record lease, fencing token {token(1)}\)", busy.stderr), busy.stderr
    holder.send("verify")
    assert holder.line() == "ok"
    holder.send("release")
    assert holder.line() == "released"
    after = run_once(cli, lock_b, "--no-wait")
    assert (after.returncode, after.stdout) == (0, f"ran {token(2)}\n"), after.stderr

    # A CLI holder through B: Python through A cannot have it; a waiting acquire gets it,
    # with the next token, once the holder is done.
    holder = cli_holder(children, cli, lock_b)
    assert holder.line() == f"locked {token(3)}"
    assert leasehold_lock.try_acquire(lock_a, on_shared_mount=record) is None
    with pytest.raises(leasehold_lock.Timeout):
        leasehold_lock.acquire(lock_a, 0, on_shared_mount=record)
    holder.send("go")
    assert holder.line() == "done"
    assert holder.wait() == 0
    lease = leasehold_lock.acquire(lock_a, 30, on_shared_mount=record)
    assert (lease.fencing_token, lease.shared) == (token(4), False)
    lease.verify()
    lease.release()
    with pytest.raises(LeaseError) as lost:
        lease.verify()
    assert lost.value.code == "LOST"

    # Async, through B, while a CLI run through A waits for it.
    async def hold_async() -> None:
        got = await leasehold_lock.acquire_async(lock_b, 30, on_shared_mount=record)
        assert got.fencing_token == token(5)
        refused = run_once(cli, lock_a, "--no-wait")
        assert refused.returncode == 75, refused.stderr
        got.release()

    asyncio.run(hold_async())
    last = run_once(cli, lock_a, "--no-wait")
    assert (last.returncode, last.stdout) == (0, f"ran {token(6)}\n"), last.stderr


def test_after_sigkill_of_a_python_holder_a_successor_on_this_host_takes_over_at_once(two_mounts, spawn, cli):
    lock_a, lock_b = (os.path.join(m, "job.lock") for m in two_mounts)
    # A TTL far beyond the successor's timeout: only the same-host takeover can grant it.
    record = Record(ttl=600)
    holder = spawn(RECORD_HOLDER, lock_a, "600")
    assert holder.line() == f"held {token(1)}"
    assert leasehold_lock.try_acquire(lock_b, on_shared_mount=record) is None
    holder.signal(signal.SIGKILL)
    holder.wait()
    # Through the same mount (through the other, another host to the protocol, it would wait
    # for the TTL): adopted from the pass record the holder's renewing thread wrote after its
    # grant (the next local count), or taken over under rule (a) if it died before that write.
    successor = leasehold_lock.acquire(lock_a, 30, on_shared_mount=record)
    assert successor.fencing_token in (token(1) + 1, token(2)), successor.fencing_token
    server = successor.fencing_token >> 20
    successor.verify()
    successor.release()
    after = run_once(cli, lock_a, "--no-wait")
    assert (after.returncode, after.stdout) == (0, f"ran {token(server + 1)}\n"), after.stderr


#: Waits for a record lease without limit (argv: path); on KeyboardInterrupt says so, then
#: idles until stdin closes.
RECORD_SIGINT = """
import signal, sys, leasehold_lock
signal.signal(signal.SIGINT, signal.default_int_handler)  # as an interactive program has it
print("waiting", flush=True)
try:
    leasehold_lock.acquire(sys.argv[1], on_shared_mount=leasehold_lock.Record(ttl=60))
    print("acquired", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
sys.stdin.readline()
"""


def kernel_free(lock: str) -> bool:
    """Whether this process can take the kernel's lock on ``lock`` right now (then lets it go)."""
    got = leasehold_lock.try_acquire(lock, allow_network_fs=True)
    if got is None:
        return False
    got.release()
    return True


def test_sigint_and_task_cancellation_end_a_record_wait_with_nothing_held(two_mounts, cli, spawn, children):
    lock_a, lock_b = (os.path.join(m, "job.lock") for m in two_mounts)
    holder = cli_holder(children, cli, lock_b)
    assert holder.line() == f"locked {token(1)}"

    # A blocking wait through A holds this host's queue (the kernel's lock on the lock path)
    # while it polls the record; SIGINT ends it with KeyboardInterrupt.
    child = spawn(RECORD_SIGINT, lock_a)
    child.expect("waiting")
    until("the child's record wait holds this host's queue", lambda: not kernel_free(lock_a))
    child.signal(signal.SIGINT)
    child.expect("interrupted")
    assert kernel_free(lock_a), "the interrupted wait left nothing held"

    # asyncio: cancelling the awaiting task ends the wait.
    async def cancelled() -> None:
        task = asyncio.ensure_future(leasehold_lock.acquire_async(lock_a, on_shared_mount=Record(ttl=60)))
        while kernel_free(lock_a):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert kernel_free(lock_a), "the cancelled wait left nothing held"
    holder.send("go")
    assert holder.line() == "done"
    assert holder.wait() == 0


#: Holds a record lease (argv: path), then forks: the child says what its inherited lease
#: answers, releases it and exits through the interpreter's own end (which collects it);
#: the parent says `child-done`, then idles until stdin closes.
RECORD_FORK = """
import gc, os, sys, leasehold_lock
lease = leasehold_lock.acquire(sys.argv[1], on_shared_mount=leasehold_lock.Record(ttl=60))
print("held", lease.fencing_token, flush=True)
pid = os.fork()
if pid == 0:
    try:
        lease.verify()
        verified = "ok"
    except leasehold_lock.LeaseError as e:
        verified = e.code
    print("child", lease.held, verified, flush=True)
    lease.release()
    del lease
    gc.collect()
    sys.exit(0)
_, status = os.waitpid(pid, 0)
print("child-done", os.waitstatus_to_exitcode(status), flush=True)
sys.stdin.readline()
lease.verify()
print("still", lease.held, flush=True)
"""


def test_a_forked_child_lets_go_of_an_inherited_record_lease_without_giving_it_back(two_mounts, cli, spawn):
    lock_a, lock_b = (os.path.join(m, "job.lock") for m in two_mounts)
    parent = spawn(RECORD_FORK, lock_a)
    assert parent.line() == f"held {token(1)}"
    # In the child the lease answers as a released one: not held, verify LOST.
    assert parent.line() == "child False LOST"
    assert parent.line() == "child-done 0"
    # Neither its release nor its collection gave the parent's record back.
    busy = run_once(cli, lock_b, "--no-wait")
    assert (busy.returncode, busy.stdout) == (75, ""), busy.stderr
    assert re.search(rf"held by pid {parent.pid} on host [0-9a-f]{{16}} \(record lease, fencing token {token(1)}\)", busy.stderr), busy.stderr
    parent.send()
    assert parent.line() == "still True"


def bump(d):
    d = d or {}
    d["n"] = d.get("n", 0) + 1
    return d


def test_a_document_without_the_keyword_is_refused_on_a_host_only_mount_and_with_it_is_fenced(two_mounts):
    path_a, path_b = (os.path.join(m, "doc.json") for m in two_mounts)
    default = Document(path_a)
    for attempt in (
        lambda: default.update(bump, timeout=1),
        lambda: default.update(bump, timeout=0),
        lambda: asyncio.run(default.update_async(bump, timeout=1)),
    ):
        with pytest.raises(LeaseError) as refused:
            attempt()
        assert refused.value.code == "NETWORK_FS"
        assert NAMED in str(refused.value), str(refused.value)
        assert "LeaseOptions" not in str(refused.value)
    with pytest.raises(LeaseError) as refused:
        with default.edit(timeout=1):
            pass
    assert refused.value.code == "NETWORK_FS" and NAMED in str(refused.value)
    assert not os.path.exists(path_a), "a refused update wrote nothing"
    with pytest.raises(TypeError):
        Document(path_a, on_shared_mount=60.0)  # type: ignore[arg-type]

    # With the keyword: a record lease through either mount, its token kept in the fence.
    through_a = Document(path_a, on_shared_mount=Record(ttl=60))
    through_b = Document(path_b, on_shared_mount=Record(ttl=60))
    assert through_a.update(bump, timeout=30) == {"n": 1}
    assert through_b.update(bump, timeout=30) == {"n": 2}
    with through_a.edit(timeout=30) as value:
        value["n"] += 1
    assert asyncio.run(through_b.update_async(bump, timeout=30)) == {"n": 4}
    assert Document(path_b).read() == {"n": 4}
    with open(os.path.join(two_mounts[1], "doc.json.lock.fence")) as f:
        assert f.read().strip() == str(token(4))


def token(t: int) -> int:
    """The record lease's fencing token of the server's grant `t` (no hand-over on one host since)."""
    return t << 20
