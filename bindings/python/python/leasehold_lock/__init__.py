"""leasehold: fair, cancellable, kernel-arbitrated file leases for Python.

The lease (:func:`acquire`, :func:`try_acquire`, :func:`acquire_async`, :class:`Lease`,
:func:`holders`) is the Rust library's, through its native module; :class:`FileLock` gives it
filelock's interface. :class:`Document` is a file of your own that several processes read and
update without losing a change. Every error is a :class:`LeaseError` with a stable ``code``;
:class:`Timeout` is raised when a lease could not be had in time.
"""

from __future__ import annotations

import asyncio
import os
from typing import Optional, Union

from . import _native
from ._document import Document, DocumentWatch, Snapshot
from ._errors import LeaseError, Timeout
from ._filelock import AcquireReturnProxy, AsyncFileLock, FileLock, ReadWriteLock
from ._native import Lease, __version__, acquire, holders, try_acquire

# A child forked without exec (os.fork, multiprocessing's "fork" start method) lets go of
# the leases, waits and gates it inherited, without unlocking them: otherwise its copies keep
# a lease locked after the parent releases it, until the child exits. Its Lease objects then
# say they are not held. The forking thread holds the library's locks across the fork, so
# that the child finds its state whole.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_native._before_fork,
        after_in_parent=_native._after_fork_in_parent,
        after_in_child=_native._after_fork_in_child,
    )

__all__ = [
    "AcquireReturnProxy",
    "AsyncFileLock",
    "Document",
    "DocumentWatch",
    "FileLock",
    "Lease",
    "LeaseError",
    "ReadWriteLock",
    "Snapshot",
    "Timeout",
    "__version__",
    "acquire",
    "acquire_async",
    "holders",
    "try_acquire",
]


async def acquire_async(
    path: Union[str, "os.PathLike[str]"],
    timeout: Optional[float] = None,
    *,
    shared: bool = False,
    allow_network_fs: bool = False,
    allow_shared_state: bool = False,
) -> Lease:
    """:func:`acquire` for asyncio: waits without blocking the event loop (the wait runs on
    the library's tokio driver); cancelling the awaiting task ends the wait and leaves
    nothing held. Raises :class:`Timeout` when the lease could not be had in time."""
    loop = asyncio.get_running_loop()
    done: "asyncio.Future[Lease]" = loop.create_future()
    abandoned = False

    def finish(outcome: Union[Lease, BaseException]) -> None:
        # Called on the loop once the native acquisition has ended.
        if abandoned and isinstance(outcome, Lease):
            outcome.release()  # granted as the task was cancelled: nobody will hold it
        if done.done():
            return
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome)

    waiter = _native.start_acquire(
        path, timeout, shared, allow_network_fs, allow_shared_state, loop, finish
    )
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        abandoned = True
        waiter.cancel()
        # The cancellation completes once the wait has ended, so nothing of it is in line
        # (or holding) when the caller hears of it.
        try:
            lease = await done
        except BaseException:
            pass
        else:
            lease.release()
        raise
