"""A program that uses every public name of ``leasehold_lock`` as a typed program would:
``tests/python.rs`` type-checks it with ``mypy --strict`` and pyright (strict), and checks that
it names everything in ``leasehold_lock.__all__``. It is never run."""

import asyncio
import pathlib
from typing import Any, Dict, List, Optional

import leasehold_lock
from leasehold_lock import (
    AcquireReturnProxy,
    AsyncFileLock,
    Document,
    DocumentWatch,
    FileLock,
    Lease,
    LeaseError,
    LeaseErrorCode,
    ReadWriteLock,
    Record,
    Snapshot,
    Timeout,
    __version__,
    acquire,
    acquire_async,
    holders,
    try_acquire,
)


def leases(path: str) -> int:
    version: str = __version__
    with acquire(path, 5) as lease:
        lease.verify()
        held: bool = lease.held
        where: str = lease.path
        shared: bool = lease.shared
        del held, where, shared
        return len(version)  # `with` returns: __exit__ swallows nothing


def record_leases(path: str) -> Optional[int]:
    shared_mount: Record = Record(ttl=10.0)
    ttl: float = shared_mount.ttl
    with acquire(path, 5, on_shared_mount=shared_mount) as lease:
        token: Optional[int] = lease.fencing_token
    again = try_acquire(path, on_shared_mount=Record(ttl))
    if again is not None:
        again.release()
    return token


async def record_in_asyncio(path: str) -> None:
    lease: Lease = await acquire_async(path, 1.5, on_shared_mount=Record(ttl=2.5))
    lease.release()


def paths(path: str) -> Optional[Lease]:
    acquire(path.encode(), -1).release()
    acquire(pathlib.Path(path), None, shared=True, allow_network_fs=False, allow_shared_state=False).release()
    who: Optional[List[int]] = holders(pathlib.Path(path))
    del who
    return try_acquire(path.encode(), shared=False)


async def in_asyncio(path: str) -> None:
    lease: Lease = await acquire_async(path.encode(), 1.5, shared=False)
    lease.release()
    lock = AsyncFileLock(path + ".async", timeout=1)
    async with lock:
        pass
    async with await lock.acquire():
        pass


def errors(path: str) -> str:
    try:
        acquire(path, 0)
    except Timeout as e:
        lock_file: str = e.lock_file
        return lock_file
    except LeaseError as e:
        code: LeaseErrorCode = e.code
        pids: List[int] = e.pids
        where: Optional[str] = e.path
        if code == "NETWORK_FS":
            return f"{where} {pids}"
        return code
    return ""


def documents(path: str) -> Any:
    doc = Document(path, lock_path=pathlib.Path(path + ".lock"), encoding="json", allow_shared_state=False, on_shared_mount=Record(ttl=30.0))
    with doc.edit(timeout=5) as value:
        value["n"] = 1
    doc.update(lambda v: v, timeout=-1)
    doc.update_if("0" * 32, lambda v: v)
    snap: Optional[Snapshot] = doc.snapshot()
    if snap is not None:
        version: str = snap.version
        del version
    watch: DocumentWatch = doc.watch()
    for s in watch:
        return s.value
    return doc.read()


def filelocks(path: str) -> Dict[str, int]:
    lock = FileLock(path, timeout=10, poll_interval=0.05)
    proxy: AcquireReturnProxy = lock.acquire(timeout=1)
    with proxy:
        pass
    with lock:
        counter: int = lock.lock_counter
    rw = ReadWriteLock(path + ".rw")
    with rw.read_lock():
        pass
    with rw.write_lock(timeout=1):
        pass
    return {"counter": counter, "locked": int(lock.is_locked)}


def main() -> None:
    leases("a.lock")
    paths("a.lock")
    asyncio.run(in_asyncio("a.lock"))
    errors("a.lock")
    documents("d.json")
    filelocks("f.lock")
    assert leasehold_lock.__all__
