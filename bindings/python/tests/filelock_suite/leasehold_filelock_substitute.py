"""Puts leasehold's classes in the ``filelock`` module in place of filelock's ``FileLock``
(and ``UnixFileLock``, which ``FileLock`` is on Unix), ``Timeout``, ``AsyncFileLock`` (and
``AsyncUnixFileLock``) and ``ReadWriteLock``; the rest of filelock stays its own.

Imported by the pytest plugin ``leasehold_filelock_shim`` and, through ``sitecustomize`` (when
``LEASEHOLD_FILELOCK_SUBSTITUTE`` is set), by every Python process the suite starts, so that
a child made with multiprocessing's ``spawn`` locks with leasehold's classes too.
"""

from __future__ import annotations

import filelock
import filelock.asyncio

import leasehold_lock

SUBSTITUTES = {
    "FileLock": leasehold_lock.FileLock,
    "UnixFileLock": leasehold_lock.FileLock,
    "Timeout": leasehold_lock.Timeout,
    "AsyncFileLock": leasehold_lock.AsyncFileLock,
    "AsyncUnixFileLock": leasehold_lock.AsyncFileLock,
    "ReadWriteLock": leasehold_lock.ReadWriteLock,
}

for _name, _cls in SUBSTITUTES.items():
    setattr(filelock, _name, _cls)
filelock.asyncio.AsyncUnixFileLock = leasehold_lock.AsyncFileLock  # type: ignore[misc]
