"""The exceptions of leasehold: one class per way to react, each with a stable ``code``.

The native module raises these (``errors.rs`` holds the one table from the Rust library's
errors to the codes); they are Python classes so that :class:`Timeout` can be both a
:class:`LeaseError` and a built-in :class:`TimeoutError`, as ``filelock.Timeout`` is.
"""

from __future__ import annotations

from typing import Any, List, Literal, Optional, Tuple

__all__ = ["LeaseError", "LeaseErrorCode", "Timeout"]

#: The stable codes of :attr:`LeaseError.code`; each names one kind of failure.
LeaseErrorCode = Literal[
    "CONTENDED",
    "CANCELLED",
    "LOST",
    "INVALID_INPUT",
    "UNTRUSTED",
    "NETWORK_FS",
    "UNSUPPORTED",
    "CONFLICT",
    "IO",
]


class LeaseError(OSError):
    """A lease could not be had, or no longer stands.

    ``code`` is one of ``CONTENDED``, ``CANCELLED``, ``LOST``, ``INVALID_INPUT``,
    ``UNTRUSTED``, ``NETWORK_FS``, ``UNSUPPORTED``, ``IO``, and for a :class:`Document`
    ``CONFLICT`` (an ``update_if`` another update came before); ``path`` names the lock file (or
    ``None``); ``pids`` lists the holders the OS revealed (empty when it does not tell). The
    message names the path and says what to do.
    """

    code: LeaseErrorCode
    path: Optional[str]

    def __init__(
        self,
        message: Optional[str] = None,
        *,
        code: LeaseErrorCode = "IO",
        path: Optional[str] = None,
        cause: Any = None,
    ) -> None:
        super().__init__(*(() if message is None else (message,)))
        self.code = code
        self.path = path
        # The native error, described when first asked: its message names the holder, and
        # looking holders up (/proc/locks) stalls every flock on the machine for a moment,
        # which a failed try must not cost unless someone reads it.
        self._cause = cause
        self._pids: Optional[List[int]] = None

    @property
    def pids(self) -> List[int]:
        """The holder pids the OS revealed (looked up on first read; empty when unknown)."""
        if self._pids is None:
            self._pids = [] if self._cause is None else list(self._cause.pids())
        return self._pids

    def __str__(self) -> str:
        if self.args:
            return str(self.args[0])
        if self._cause is not None:
            return str(self._cause.message())
        return ""

    def __reduce__(self) -> Tuple[Any, ...]:
        return (_rebuild, (type(self), str(self), self.code, self.path, self.pids))


class Timeout(LeaseError, TimeoutError):
    """The lease could not be had within the wait (code ``CONTENDED``).

    Raised where ``filelock.Timeout`` would be: ``lock_file`` is the lock file's path, and
    ``Timeout(lock_file)`` can be built the same way.
    """

    def __init__(self, lock_file: str, message: Optional[str] = None, *, cause: Any = None) -> None:
        if message is None and cause is None:
            message = f"The file lock '{lock_file}' could not be acquired."
        super().__init__(message, code="CONTENDED", path=lock_file, cause=cause)

    @property
    def lock_file(self) -> str:
        """The path of the lock file (as ``filelock.Timeout.lock_file``)."""
        return self.path if self.path is not None else ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.lock_file!r})"


def _rebuild(cls: Any, message: str, code: LeaseErrorCode, path: Optional[str], pids: List[int]) -> LeaseError:
    """Unpickles an exception (its message and holders already resolved)."""
    if issubclass(cls, Timeout):
        err: LeaseError = cls(path or "", message)
    else:
        err = cls(message, code=code, path=path)
    err._pids = list(pids)
    return err
