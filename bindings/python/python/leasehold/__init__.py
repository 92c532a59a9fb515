"""leasehold: fair, cancellable, kernel-arbitrated file leases for Python.

The lease (:func:`acquire`, :func:`try_acquire`, :func:`acquire_async`, :class:`Lease`,
:func:`holders`) is the Rust library's, through its native module; :class:`FileLock` gives it
filelock's interface. Every error is a :class:`LeaseError` with a stable ``code``;
:class:`Timeout` is raised when a lease could not be had in time.
"""

from __future__ import annotations

import os
from typing import Optional, Union

from . import _native
from ._errors import LeaseError, Timeout
from ._filelock import AcquireReturnProxy, FileLock
from ._native import Lease, __version__, acquire, holders, try_acquire

__all__ = [
    "AcquireReturnProxy",
    "FileLock",
    "Lease",
    "LeaseError",
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
    the library's tokio driver); cancelling the awaiting task ends the wait at once and
    leaves nothing held. Raises :class:`Timeout` when the lease could not be had in time."""
    return await _native.acquire_async(
        path,
        timeout,
        shared=shared,
        allow_network_fs=allow_network_fs,
        allow_shared_state=allow_shared_state,
    )
