"""leasehold: fair, cancellable, kernel-arbitrated file leases for Python.

The lease (:func:`acquire`, :func:`try_acquire`, :func:`acquire_async`, :class:`Lease`,
:func:`holders`; :class:`Record` for a record lease on a mount whose kernel locks stay on
each host) is the Rust library's, through its native module; :class:`FileLock` gives it
filelock's interface. :class:`Document` is a file of your own that several processes read and
update without losing a change. Every error is a :class:`LeaseError` with a stable ``code``;
:class:`Timeout` is raised when a lease could not be had in time.
"""

# Only the package's public names, and its private modules, are bound here (dir() lists
# nothing else): no `from __future__` import, and `os` under a private name.
import os as _os

from . import _native
from ._aio import acquire_async
from ._document import Document, DocumentWatch, Snapshot
from ._errors import LeaseError, LeaseErrorCode, Timeout
from ._filelock import AcquireReturnProxy, AsyncFileLock, FileLock, ReadWriteLock
from ._native import Lease, Record, __version__, acquire, holders, try_acquire

# A child forked without exec (os.fork, multiprocessing's "fork" start method) lets go of
# the leases, waits and gates it inherited, without unlocking them: otherwise its copies keep
# a lease locked after the parent releases it, until the child exits. Its Lease objects then
# say they are not held. The forking thread holds the library's locks across the fork, so
# that the child finds its state whole.
if hasattr(_os, "register_at_fork"):
    _os.register_at_fork(
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
    "LeaseErrorCode",
    "ReadWriteLock",
    "Record",
    "Snapshot",
    "Timeout",
    "__version__",
    "acquire",
    "acquire_async",
    "holders",
    "try_acquire",
]

