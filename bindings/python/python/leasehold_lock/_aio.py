"""The asyncio face of the lease: :func:`acquire_async`."""

from __future__ import annotations

import asyncio
import os
from typing import Optional, Union

from . import _native
from ._native import Lease, Record

__all__ = ["acquire_async"]


async def acquire_async(
    path: Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"],
    timeout: Optional[float] = None,
    *,
    shared: bool = False,
    allow_network_fs: bool = False,
    allow_shared_state: bool = False,
    on_shared_mount: Optional[Record] = None,
) -> Lease:
    """:func:`acquire` for asyncio: waits without blocking the event loop (the wait runs on
    the library's tokio driver); cancelling the awaiting task ends the wait and leaves
    nothing held. ``timeout`` as for :func:`acquire` (``None`` or ``-1``: without limit; ``0``:
    try once), ``on_shared_mount`` too. Raises :class:`Timeout` when the lease could not be had
    in time."""
    loop = asyncio.get_running_loop()
    done: "asyncio.Future[Lease]" = loop.create_future()
    abandoned = False

    def finish(outcome: Union[Lease, BaseException]) -> None:
        # Called on the loop once the native acquisition has ended, and its thread has left
        # Python (`settled`: the interpreter must not shut down under it).
        waiter.settled()
        if abandoned and isinstance(outcome, Lease):
            outcome.release()  # granted as the task was cancelled: nobody will hold it
        if done.done():
            return
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome)

    waiter = _native.start_acquire(
        path, timeout, shared, allow_network_fs, allow_shared_state, on_shared_mount, loop, finish
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
